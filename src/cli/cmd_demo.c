/* `bitrank demo`: the main job on the embedded default, one transformer block of
 * all-MiniLM-L6-v2 (data/minilm-l6-block3.safetensors, docs/DATA.md) with the
 * input Grams recorded from the real model (data/minilm-l6-block3.gram.safetensors),
 * and its table. Finishes in well under two minutes on a 2-core CPU. */
/* realpath() is an XSI function */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "bitrank.h"
#include "cli/commands.h"
#include "cli/compress_report.h"

#define DEMO_DATA "minilm-l6-block3.safetensors"

static int readable(const char *path) { return access(path, R_OK) == 0; }

/* The embedded default: $BITRANK_DATA (the file), else data/ of the source tree
 * this program was built from, else beside the executable, else ./data. */
static int find_data(char *out, size_t cap) {
    const char *env = getenv("BITRANK_DATA");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return readable(out);
    }
    char here[4096];
    snprintf(here, sizeof here, "%s", __FILE__); /* .../src/cli/cmd_demo.c */
    char *cli = dirname(here);
    snprintf(out, cap, "%s/../../data/" DEMO_DATA, cli);
    if (here[0] == '/' && readable(out)) return 1;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *dir = dirname(exe);
        static const char *const rel[] = {"data/", "../data/", "../share/bitrank/data/"};
        for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
            snprintf(out, cap, "%s/%s" DEMO_DATA, dir, rel[i]);
            if (readable(out)) return 1;
        }
    }
    snprintf(out, cap, "data/" DEMO_DATA);
    return readable(out);
}

/* Remove the plain files of `dir` (one of ours: a layer checkpoint or a temporary
 * file of the writer) and then the directory. */
static void remove_files_and_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    char path[4400];
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

int br_cmd_demo(int argc, char **argv) {
    const char *device = "auto", *report = NULL, *out_arg = NULL;
    int quiet = 0;
    br_compress_opts o;
    br_compress_opts_default(&o);
    o.steps = 150;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--device") && v) {
            device = argv[++i];
        } else if (!strcmp(argv[i], "--report") && v) {
            report = argv[++i];
        } else if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) && v) {
            out_arg = argv[++i];
        } else if (!strcmp(argv[i], "--steps") && v) {
            char *end = NULL;
            long s = strtol(argv[++i], &end, 10);
            if (end == argv[i] || *end || s < 0 || s > 1000000) {
                fprintf(stderr, "bitrank demo: --steps: '%s' is not a count\n", argv[i]);
                return 2;
            }
            o.steps = (int)s;
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            quiet = 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: bitrank demo [--device D] [--steps N] [-o OUT] [--report FILE.html] "
                   "[--quiet]\n\nCompresses the embedded default (one block of "
                   "all-MiniLM-L6-v2, docs/DATA.md)\nat 1.0 bits per weight and prints the "
                   "table. Device auto, %d steps per layer.\n",
                   o.steps);
            return 0;
        } else {
            fprintf(stderr,
                    "bitrank demo: unknown option '%s'\nusage: bitrank demo [--device D] "
                    "[--steps N] [-o OUT] [--report FILE.html] [--quiet]\n",
                    argv[i]);
            return 2;
        }
    }
    char data[4200], resolved[4200];
    if (!find_data(data, sizeof data)) {
        fprintf(stderr,
                "bitrank demo: cannot find the embedded default %s (tried $BITRANK_DATA, the "
                "source tree's data/, data/ beside the program, ./data); set BITRANK_DATA to "
                "its path\n",
                DEMO_DATA);
        return 1;
    }
    if (realpath(data, resolved) && strlen(resolved) < sizeof data) strcpy(data, resolved);
    /* the recorded input Grams beside it: the layers train on the statistics of
     * real activations (else on isotropic synthetic inputs) */
    char gram[4300];
    size_t dlen = strlen(data);
    snprintf(gram, sizeof gram, "%.*s.gram.safetensors", (int)(dlen > 12 ? dlen - 12 : dlen),
             data); /* less ".safetensors" */
    if (readable(gram)) o.gram = gram;
    br_ctx *ctx = NULL;
    char err[256];
    if (br_ctx_new(device, &ctx, err, sizeof err) != BR_OK) {
        fprintf(stderr, "bitrank demo: device %s: %s\n", device, err);
        return 1;
    }
    /* A private work directory holds the checkpoint (and the output unless -o is
     * given): the demo has no --resume, so whatever the job leaves there is
     * removed when it ends, and all of it when it fails. Made after the context,
     * whose creation (seconds on a GPU) an interrupt would otherwise end with the
     * directory left behind. */
    char dir[64], ckpt[96], out[4300];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/bitrank-demo-XXXXXX",
             tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "bitrank demo: cannot make a temporary directory %s: %s\n", dir,
                strerror(errno));
        br_ctx_free(ctx);
        return 1;
    }
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint", dir);
    if (out_arg)
        snprintf(out, sizeof out, "%s", out_arg);
    else
        snprintf(out, sizeof out, "%s/minilm-l6-block3.blr.safetensors", dir);
#ifdef _OPENMP
    /* The demo's ops are small: on a busy 2-core machine OpenMP's spinning
     * barriers wait on descheduled threads, which made it 3-4x slower (2:13 vs
     * 0:40 measured at load 4). One thread unless the user says otherwise. */
    if (!strcmp(br_ctx_backend(ctx), "cpu") && !getenv("OMP_NUM_THREADS")) omp_set_num_threads(1);
#endif
    if (!quiet)
        fprintf(stderr, "bitrank %s on %s: compressing %s at %.1f bits per weight%s%s\n",
                BITRANK_VERSION, br_ctx_device(ctx), data, o.bpw,
                o.gram ? ", calibrated by the input Grams " : "", o.gram ? o.gram : "");
    int rc =
        br_cli_run_compress(ctx, NULL, 0, data, out, &o, ckpt, 0, quiet, report, "bitrank demo");
    /* profile=1 (BITRANK_OPTIONS): where the device time went, op by op */
    if (br_cli_profiling(ctx)) br_profile_report(ctx, stderr);
    br_ctx_free(ctx);
    remove_files_and_dir(ckpt);
    /* a failure leaves nothing: the default output goes too (-o names the user's
     * file, which the job writes only when it succeeds) */
    if (rc != 0 && !out_arg) unlink(out);
    if (rc != 0 || out_arg) rmdir(dir);
    if (rc == 0 && !quiet) printf("output: %s (bitrank inspect it)\n", out);
    return rc;
}
