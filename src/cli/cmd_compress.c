/* `bitrank compress IN -o OUT --bpw 1.0 ...`: the main job. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bitrank.h"
#include "cli/commands.h"
#include "cli/compress_report.h"
#include "cli/device_list.h"
#include "cli/term_escape.h"
#include "compress/paths.h"

static const char usage_text[] =
    "usage: bitrank compress IN -o OUT [options]\n"
    "\n"
    "Replace the linear layers of the safetensors checkpoint IN (a file, a sharded\n"
    "index .json or a directory) by binary low-rank layers, trained to reproduce\n"
    "their outputs, and write OUT (safetensors, docs/FORMAT.md).\n"
    "\n"
    "  -o, --output FILE   the output file (written to a temporary name, then renamed)\n"
    "  --bpw X             bits per weight per layer (1.0); the rank is the largest\n"
    "                      within it; a layer it cannot hold is copied unchanged\n"
    "  --rank R            a fixed rank instead (capped at a layer's min(m, n))\n"
    "  --paths P           1 or 2 binary paths per layer (2)\n"
    "  --calib FILE        recorded inputs: safetensors, tensor NAME [tokens][n] per layer\n"
    "  --gram FILE         input Grams: safetensors, tensor NAME [n][n] per layer\n"
    "  --allow-uncalibrated  train layers that --calib/--gram has no tensor for on\n"
    "                      synthetic inputs (else such layers are refused)\n"
    "  --weight-term X     weight of ‖W − Ŵ‖²/‖W‖² beside the output error (0.03):\n"
    "                      holds Ŵ near W where the calibration inputs say little\n"
    "  --token-weighting K relative (default: each token's error relative to its\n"
    "                      own output) or aggregate (all tokens' error together)\n"
    "  --synthetic KIND    inputs of layers without recorded ones: iso (default:\n"
    "                      N(0, I), which fits the weights themselves) or heavy\n"
    "                      (log-normal channel scales: a stand-in for activations)\n"
    "  --device D          auto, cpu, cuda, cuda:N, vulkan or vulkan:N (auto)\n"
    "  --devices LIST      one job over several devices of one kind, e.g.\n"
    "                      cuda:0,cuda:1: each takes the next layer; the output is\n"
    "                      the file one of them alone writes (not with --device)\n"
    "  --steps N           training steps per layer (300; 0 = initialization only)\n"
    "  --tokens T          tokens per step (512)\n"
    "  --lr X              peak learning rate of the scales (0.02)\n"
    "  --sign-lr X         peak learning rate of the signs (0.01; 0 = signs frozen)\n"
    "  --include PAT       also compress 2-D tensors matching the glob (repeatable)\n"
    "  --exclude PAT       never compress tensors matching the glob (repeatable)\n"
    "  --report FILE.html  write an HTML report (table and loss curves)\n"
    "  --resume            continue an interrupted run from OUT.partial/ (every\n"
    "                      checkpoint is checked first; docs/FORMAT.md section 5)\n"
    "  --seed S            seed of every random choice (1)\n"
    "  --quiet             no progress and no table (errors only)\n";

static volatile sig_atomic_t cancel_requested;

static void on_signal(int sig) {
    (void)sig;
    cancel_requested = 1;
}

static int bad_usage(const char *fmt, const char *arg) {
    fprintf(stderr, "bitrank compress: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(bitrank compress --help for usage)\n");
    return 2;
}

static int parse_double(const char *s, double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

/* A decimal count: digits only (no sign, space, octal "010" or hex "0x20"). */
static int parse_size(const char *s, unsigned long long *out) {
    char *end = NULL;
    errno = 0;
    if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] != '\0')) return -1; /* "010": octal? */
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

/* A learning rate: a number ≥ 0 that stays finite as a float. */
static int parse_rate(const char *s, float *out) {
    double d;
    if (parse_double(s, &d) || !(d >= 0) || !isfinite((float)d)) return -1;
    *out = (float)d;
    return 0;
}

/* Whether `dir` exists and holds a finished layer (the job removes an empty one). */
static int has_checkpoint(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d));)
        found = !strncmp(e->d_name, "layer-", 6);
    closedir(d);
    return found;
}

/* "WHO: MESSAGE" on stderr, the message's control characters escaped: it names
 * tensors and fields of untrusted files, whose bytes must not reach the terminal
 * as escape sequences. */
static void print_error(const char *who, const char *msg) {
    size_t cap = 4 * strlen(msg) + 1;
    char fallback[1024], *safe = malloc(cap);
    if (!safe) {
        safe = fallback;
        cap = sizeof fallback;
    }
    br_cli_escape(safe, cap, msg);
    fprintf(stderr, "%s: %s\n", who, safe);
    if (safe != fallback) free(safe);
}

/* The run's paths against its inputs, before anything is written or created: the
 * output renamed over the input (or a shard, or the index; or a calibration file)
 * would destroy it, as would the checkpoint directory's cleaning or the report
 * renamed over it; the report renamed over the output would replace the result.
 * Compared by identity (compress/paths.h). An input that cannot be opened is left
 * to the job, which reports it. 0, or 1 with the message printed. */
static int check_paths(br_ctx *ctx, const char *in, const char *out, const br_compress_opts *o,
                       const char *checkpoint_dir, const char *report, const char *who) {
    char partial[4200];
    snprintf(partial, sizeof partial, "%s.partial", out);
    const char *ckpt = checkpoint_dir ? checkpoint_dir : partial;
    char msg[4600];
    msg[0] = '\0';
    if (report && br_path_same_file(report, out))
        snprintf(msg, sizeof msg,
                 "%s: the report is the output file %s: writing it would replace the output; "
                 "choose another path",
                 report, out);
    else if (report && br_path_same_file(report, ckpt))
        snprintf(msg, sizeof msg, "%s: the report is the checkpoint directory; choose another path",
                 report);
    if (msg[0]) {
        print_error(who, msg);
        return 1;
    }
    const char *inputs[3] = {in, o->activations, o->gram};
    for (int i = 0; i < 3; i++) {
        br_st_file *f = NULL;
        if (!inputs[i] || br_st_open(ctx, inputs[i], &f) != BR_OK) continue;
        br_status st = i == 0 ? br_compress_check_paths(ctx, f, out, checkpoint_dir)
                              : br_compress_check_not_input(ctx, f, out, "output");
        if (!st && report) st = br_compress_check_not_input(ctx, f, report, "report");
        br_st_close(f);
        if (st) {
            print_error(who, br_ctx_error(ctx));
            return 1;
        }
    }
    br_ctx_clear_error(ctx);
    return 0;
}

int br_cli_profiling(const br_ctx *ctx) {
    char v[8];
    return br_ctx_option(ctx, "profile", v, sizeof v) == BR_OK && !strcmp(v, "1");
}

int br_cli_run_compress(br_ctx *ctx, br_ctx *const *devices, size_t n_devices, const char *in,
                        const char *out, const br_compress_opts *o, const char *checkpoint_dir,
                        int resume, int quiet, const char *report_path, const char *who) {
    char err[512];
    if (check_paths(ctx, in, out, o, checkpoint_dir, report_path, who)) return 1;
    if (report_path && br_cli_html_writable(report_path, err, sizeof err) != 0) {
        print_error(who, err);
        return 1;
    }
    br_cli_progress prog;
    br_cli_progress_init(&prog, stderr, quiet, &cancel_requested);
    if (n_devices > 1) prog.devices = n_devices;
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    br_compress_report *rep = NULL;
    br_status st = br_compress_file_on(ctx, devices, n_devices, in, out, o, checkpoint_dir, resume,
                                       br_cli_progress_cb, &prog, &rep);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    br_cli_progress_end(&prog);
    if (st != BR_OK) {
        char partial[4200];
        snprintf(partial, sizeof partial, "%s.partial", out);
        if (cancel_requested && !checkpoint_dir && has_checkpoint(partial))
            fprintf(stderr,
                    "%s: interrupted; no output written. Finished layers are kept in %s: "
                    "rerun with --resume to continue\n",
                    who, partial);
        else if (cancel_requested)
            fprintf(stderr, "%s: interrupted; no output written\n", who);
        else
            print_error(who, br_ctx_error(ctx));
        br_compress_report_free(rep);
        return 1;
    }
    if (!quiet) br_cli_print_table(stdout, rep, in, out);
    int rc = 0;
    if (report_path) {
        if (br_cli_write_html(report_path, rep, in, out, err, sizeof err) != 0) {
            print_error(who, err);
            rc = 1;
        } else if (!quiet) {
            printf("report: %s\n", report_path);
        }
    }
    br_compress_report_free(rep);
    return rc;
}

/* The job on one context (--device). */
static int run_on_device(const char *in, const char *out, const br_compress_opts *o, int resume,
                         int quiet, const char *report, const char *device) {
    br_ctx *ctx = NULL;
    char err[256];
    if (br_ctx_new(device, &ctx, err, sizeof err) != BR_OK) {
        fprintf(stderr, "bitrank compress: device %s: %s\n", device, err);
        return 1;
    }
    if (!quiet) fprintf(stderr, "bitrank %s on %s\n", BITRANK_VERSION, br_ctx_device(ctx));
    int rc = br_cli_run_compress(ctx, NULL, 0, in, out, o, NULL, resume, quiet, report,
                                 "bitrank compress");
    /* profile=1 (BITRANK_OPTIONS): where the device time went, op by op */
    if (br_cli_profiling(ctx)) br_profile_report(ctx, stderr);
    br_ctx_free(ctx);
    return rc;
}

/* The job over several contexts (--devices): one per item, each compressing
 * layers on its own thread, and one on the CPU for the job itself (the files,
 * the plan and the output: host work, which needs no device of its own). */
static int run_on_devices(const char *in, const char *out, const br_compress_opts *o, int resume,
                          int quiet, const char *report, const br_cli_device_list *list) {
    br_ctx *job = NULL, **dev = calloc(list->n, sizeof *dev);
    char err[256];
    int rc = 0;
    if (!dev) {
        fprintf(stderr, "bitrank compress: out of memory\n");
        return 1;
    }
    if (br_ctx_new("cpu", &job, err, sizeof err) != BR_OK) {
        fprintf(stderr, "bitrank compress: the job's context (cpu): %s\n", err);
        rc = 1;
    }
    for (size_t k = 0; k < list->n && !rc; k++)
        if (br_ctx_new(list->items[k], &dev[k], err, sizeof err) != BR_OK) {
            fprintf(stderr, "bitrank compress: device %s (item %zu of --devices): %s\n",
                    list->items[k], k + 1, err);
            rc = 1;
        }
    if (!rc && !quiet) {
        fprintf(stderr, "bitrank %s on %zu devices:", BITRANK_VERSION, list->n);
        for (size_t k = 0; k < list->n; k++)
            fprintf(stderr, "%s %s", k ? ";" : "", br_ctx_device(dev[k]));
        fputc('\n', stderr);
    }
    int ran = !rc;
    if (ran)
        rc = br_cli_run_compress(job, dev, list->n, in, out, o, NULL, resume, quiet, report,
                                 "bitrank compress");
    for (size_t k = 0; k < list->n; k++) {
        /* profile=1 (BITRANK_OPTIONS): each device's time, op by op */
        if (ran && br_cli_profiling(dev[k])) br_profile_report(dev[k], stderr);
        br_ctx_free(dev[k]);
    }
    br_ctx_free(job);
    free(dev);
    return rc;
}

int br_cmd_compress(int argc, char **argv) {
    br_compress_opts o;
    br_compress_opts_default(&o);
    const char *in = NULL, *out = NULL, *device = "auto", *devices = NULL, *report = NULL;
    int resume = 0, quiet = 0, device_given = 0;
    const char **inc = calloc((size_t)argc + 1, sizeof *inc);
    const char **exc = calloc((size_t)argc + 1, sizeof *exc);
    if (!inc || !exc) {
        fprintf(stderr, "bitrank compress: out of memory\n");
        free(inc);
        free(exc);
        return 1;
    }
    int rc = -1;
    for (int i = 1; i < argc && rc < 0; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
        unsigned long long u;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage_text, stdout);
            rc = 0;
        } else if (!strcmp(a, "--resume")) {
            resume = 1;
        } else if (!strcmp(a, "--allow-uncalibrated")) {
            o.allow_uncalibrated = 1;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            quiet = 1;
        } else if (a[0] == '-' && a[1] != '\0') {
            if (!v) {
                rc = bad_usage("option %s needs a value", a);
                break;
            }
            i++;
            if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
                out = v;
            } else if (!strcmp(a, "--bpw")) {
                if (parse_double(v, &d) || !(d > 0))
                    rc = bad_usage("--bpw: '%s' is not a positive number", v);
                o.bpw = d;
            } else if (!strcmp(a, "--rank")) {
                if (parse_size(v, &u) || !u || u > (1u << 20))
                    rc = bad_usage("--rank: '%s' is not a rank of 1..1048576", v);
                o.rank = (size_t)u;
            } else if (!strcmp(a, "--paths")) {
                if (parse_size(v, &u) || u < 1 || u > 2)
                    rc = bad_usage("--paths: '%s' is not 1 or 2", v);
                o.paths = (size_t)u;
            } else if (!strcmp(a, "--calib")) {
                o.activations = v;
            } else if (!strcmp(a, "--gram")) {
                o.gram = v;
            } else if (!strcmp(a, "--synthetic")) {
                if (!strcmp(v, "iso") || !strcmp(v, "isotropic"))
                    o.synthetic = BR_SYNTH_ISOTROPIC;
                else if (!strcmp(v, "heavy"))
                    o.synthetic = BR_SYNTH_HEAVY;
                else
                    rc = bad_usage("--synthetic: '%s' is not iso or heavy", v);
            } else if (!strcmp(a, "--device")) {
                device = v;
                device_given = 1;
            } else if (!strcmp(a, "--devices")) {
                devices = v;
            } else if (!strcmp(a, "--steps")) {
                if (parse_size(v, &u) || u > 10000000)
                    rc = bad_usage("--steps: '%s' is not a count", v);
                o.steps = (int)u;
            } else if (!strcmp(a, "--tokens")) {
                if (parse_size(v, &u) || !u || u > (1u << 20))
                    rc = bad_usage("--tokens: '%s' is not a count of 1..1048576", v);
                o.tokens = (size_t)u;
            } else if (!strcmp(a, "--lr")) {
                if (parse_rate(v, &o.lr)) rc = bad_usage("--lr: '%s' is not a number ≥ 0", v);
            } else if (!strcmp(a, "--weight-term")) {
                if (parse_rate(v, &o.weight_term))
                    rc = bad_usage("--weight-term: '%s' is not a number ≥ 0", v);
            } else if (!strcmp(a, "--token-weighting")) {
                if (!strcmp(v, "relative"))
                    o.token_weighting = BR_TOKENS_RELATIVE;
                else if (!strcmp(v, "aggregate"))
                    o.token_weighting = BR_TOKENS_AGGREGATE;
                else
                    rc = bad_usage("--token-weighting: '%s' is not relative or aggregate", v);
            } else if (!strcmp(a, "--sign-lr")) {
                if (parse_rate(v, &o.sign_lr))
                    rc = bad_usage("--sign-lr: '%s' is not a number ≥ 0", v);
            } else if (!strcmp(a, "--include")) {
                inc[o.n_include++] = v;
            } else if (!strcmp(a, "--exclude")) {
                exc[o.n_exclude++] = v;
            } else if (!strcmp(a, "--report")) {
                report = v;
            } else if (!strcmp(a, "--seed")) {
                if (parse_size(v, &u)) rc = bad_usage("--seed: '%s' is not a number", v);
                o.seed = u;
            } else {
                rc = bad_usage("unknown option '%s'", a);
            }
        } else if (!in) {
            in = a;
        } else {
            rc = bad_usage("unexpected argument '%s'", a);
        }
    }
    o.include = inc;
    o.exclude = exc;
    if (rc < 0 && !in) rc = bad_usage("%s", "no input file given");
    if (rc < 0 && !out) rc = bad_usage("%s", "no output file given (-o OUT)");
    if (rc < 0 && device_given && devices)
        rc = bad_usage("%s", "--device and --devices together: give one (--devices for several)");
    br_cli_device_list list = {0};
    if (rc < 0 && devices) {
        char why[600];
        if (br_cli_device_list_parse(devices, &list, why, sizeof why) != 0)
            rc = bad_usage("%s", why);
        else if (list.n == 1)
            device = list.items[0]; /* one device: as --device */
    }
    if (rc < 0)
        rc = list.n > 1 ? run_on_devices(in, out, &o, resume, quiet, report, &list)
                        : run_on_device(in, out, &o, resume, quiet, report, device);
    br_cli_device_list_free(&list);
    free(inc);
    free(exc);
    return rc;
}
