/* The compression of a whole checkpoint: select, check, compress layer by layer
 * with a checkpoint after each, write the output atomically. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "compress/calib.h"
#include "compress/layer_job.h"

#define CKPT_PREFIX "layer-"
#define CKPT_SUFFIX ".safetensors"

typedef struct job {
    br_ctx *ctx;
    const char *in_path, *out_path;
    const br_compress_opts *o;
    br_compress_progress_fn progress;
    void *user;
    double t0;
    br_compress_report *rep;
    size_t layer, layers; /* the layer being compressed, how many */
    uint64_t *layer_data; /* [layers]: hash of a layer's weights and calibration bytes (plan) */
    br_svid_device *svid; /* device Dual-SVID state: made by the first layer, freed at the end */
    br_gram_cache gram;   /* the last Gram's factor (q, k, v share theirs) */
    char hash[17];        /* options + input, hex */
    char ckpt_dir[4096];
} job;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Re-fail with the context's message prefixed by `prefix` (a file name). */
static br_status prefixed(br_ctx *ctx, br_status st, const char *prefix) {
    char msg[sizeof ctx->err];
    snprintf(msg, sizeof msg, "%s", br_ctx_error(ctx));
    if (!strncmp(msg, prefix, strlen(prefix))) return st; /* already named */
    return br_fail(ctx, st, "%s: %s", prefix, msg);
}

static int emit(job *j, br_compress_phase phase, const br_layer_report *lr, int step, int steps,
                double loss) {
    if (!j->progress) return 0;
    br_compress_progress p = {.phase = phase,
                              .layer = j->layer,
                              .layers = j->layers,
                              .report = lr,
                              .step = step,
                              .steps = steps,
                              .loss = loss,
                              .elapsed = now_seconds() - j->t0};
    return j->progress(&p, j->user);
}

typedef struct step_hook {
    job *j;
    const br_layer_report *lr;
    double last_loss;
} step_hook;

static int on_step(void *user, int step, int steps, double loss) {
    step_hook *h = user;
    if (loss >= 0) h->last_loss = loss;
    return emit(h->j, BR_PHASE_TRAIN, h->lr, step, steps, h->last_loss);
}

static int is_float_dtype(br_st_dtype d) {
    return d == BR_ST_F32 || d == BR_ST_F16 || d == BR_ST_BF16;
}

/* Hash of what decides every layer's result: the options and the input's tensor
 * list (names, dtypes, shapes: the layers' numbering). What decides one layer's
 * alone, its weights' values and the bytes of the calibration data it takes (not
 * the files' paths: a file rewritten in place is other data, a file moved is the
 * same), is j->layer_data[layer]: a change there refuses that layer's checkpoint
 * only. */
static void options_hash(job *j, const br_st_file *in) {
    const br_compress_opts *o = j->o;
    char buf[1024];
    uint64_t h = br_name_hash("bitrank-compress-v2");
    snprintf(buf, sizeof buf,
             "bpw=%.17g rank=%zu paths=%zu steps=%d tokens=%zu lr=%.9g sign_lr=%.9g warmup=%d "
             "patience=%d eval_every=%d eval_tokens=%zu seed=%llu act=%d gram=%d synth=%d",
             o->bpw, o->rank, o->paths, o->steps, o->tokens, (double)o->lr, (double)o->sign_lr,
             o->warmup, o->patience, o->eval_every, o->eval_tokens, (unsigned long long)o->seed,
             o->activations != NULL, o->gram != NULL, o->synthetic);
    h ^= br_name_hash(buf) * 3;
    for (size_t i = 0; i < o->n_include; i++)
        h = h * 31 + br_name_hash(o->include[i]);
    h = h * 37 + 1;
    for (size_t i = 0; i < o->n_exclude; i++)
        h = h * 31 + br_name_hash(o->exclude[i]);
    for (size_t i = 0; i < br_st_count(in); i++) {
        const br_st_tensor *t = br_st_tensor_at(in, i);
        h = h * 131 + br_name_hash(t->name) + (uint64_t)t->dtype * 7;
        for (size_t d = 0; d < t->ndim; d++)
            h = h * 17 + t->shape[d];
    }
    snprintf(j->hash, sizeof j->hash, "%016llx", (unsigned long long)h);
}

static void ckpt_path(const job *j, size_t index, char *out, size_t cap) {
    snprintf(out, cap, "%s/" CKPT_PREFIX "%05zu" CKPT_SUFFIX, j->ckpt_dir, index);
}

/* Remove our layer files from the checkpoint directory (and the directory when
 * `rmdir_too` and it is then empty). */
static void ckpt_clear(const job *j, int rmdir_too) {
    DIR *d = opendir(j->ckpt_dir);
    if (!d) return;
    struct dirent *e;
    char path[4400];
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name), pl = strlen(CKPT_PREFIX), sl = strlen(CKPT_SUFFIX);
        if (len == pl + 5 + sl && !strncmp(e->d_name, CKPT_PREFIX, pl) &&
            !strcmp(e->d_name + len - sl, CKPT_SUFFIX)) {
            snprintf(path, sizeof path, "%s/%s", j->ckpt_dir, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
    if (rmdir_too) rmdir(j->ckpt_dir);
}

static br_status ckpt_save(job *j, size_t index, const br_blr_host *L, const br_layer_report *lr) {
    br_ctx *ctx = j->ctx;
    char path[4400], num[256];
    ckpt_path(j, index, path, sizeof path);
    br_st_writer *w = NULL;
    br_status st = br_st_writer_new(ctx, path, &w);
    if (!st) st = br_st_writer_add_blr(w, lr->name, L);
    char data[17];
    snprintf(data, sizeof data, "%016llx", (unsigned long long)j->layer_data[index]);
    if (!st) st = br_st_writer_meta(w, "bitrank.ckpt.hash", j->hash);
    if (!st) st = br_st_writer_meta(w, "bitrank.ckpt.data", data);
    if (!st) st = br_st_writer_meta(w, "bitrank.ckpt.layer", lr->name);
    snprintf(num, sizeof num, "%.17g %.17g %.17g %d %d %.9g %s", lr->err_init, lr->err_trained,
             lr->weight_err, lr->steps, lr->loss_every, lr->seconds,
             lr->init_device[0] ? lr->init_device : "cpu");
    if (!st) st = br_st_writer_meta(w, "bitrank.ckpt.report", num);
    /* the loss curve, as text */
    size_t cap = lr->n_loss * 18 + 1;
    char *curve = malloc(cap);
    if (!curve && !st) st = br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", path);
    if (curve) {
        size_t pos = 0;
        curve[0] = '\0';
        for (size_t i = 0; i < lr->n_loss && pos + 18 < cap; i++)
            pos += (size_t)snprintf(curve + pos, cap - pos, "%s%.9g", i ? " " : "",
                                    (double)lr->loss[i]);
        if (!st) st = br_st_writer_meta(w, "bitrank.ckpt.loss", curve);
        free(curve);
    }
    if (!st) st = br_st_writer_finish(w);
    br_st_writer_free(w);
    return st;
}

/* A damaged checkpoint: the message names the file and the field, and says how
 * to go on. The job stops (a checkpoint is never silently dropped or used: our
 * writer renames complete files into place, so damage means something outside
 * the job, a disk or a copy, touched them). */
static br_status damaged(br_ctx *ctx, const char *path, const char *layer, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static br_status damaged(br_ctx *ctx, const char *path, const char *layer, const char *fmt, ...) {
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return br_fail(ctx, BR_E_FORMAT,
                   "%s: damaged checkpoint of layer '%s': %s; remove the file to recompute the "
                   "layer",
                   path, layer, what);
}

/* The scales of a layer read from a checkpoint are finite (f16 can hold ±Inf and NaN). */
static br_status check_scales(br_ctx *ctx, const char *path, const char *name,
                              const br_blr_host *L) {
    for (size_t p = 0; p < L->paths; p++) {
        const float *arr[3] = {L->path[p].h, L->path[p].l, L->path[p].g};
        const size_t len[3] = {L->m, L->r, L->n};
        static const char *const suffix[3] = {"h", "l", "g"};
        for (int a = 0; a < 3; a++)
            for (size_t i = 0; i < len[a]; i++)
                if (!isfinite(arr[a][i]))
                    return damaged(ctx, path, name, "tensor '%s.blr.%s' [%zu][%zu] is %s", name,
                                   suffix[a], p, i, isnan(arr[a][i]) ? "NaN" : "infinite");
    }
    return BR_OK;
}

/* The report fields of a checkpoint: "err_init err_trained weight_err steps
 * loss_every seconds device", then the loss curve, each number in range. */
static br_status parse_report(job *j, const char *path, const char *name, const char *rep,
                              const char *curve, br_layer_report *lr) {
    br_ctx *ctx = j->ctx;
    const char *field = "bitrank.ckpt.report";
    /* six numbers and a word, single spaces between (strtod: no sscanf %d, whose
     * overflow is undefined) */
    static const char *const names[6] = {"err_init", "err_trained", "weight_err",
                                         "steps",    "loss_every",  "seconds"};
    double v[6];
    const char *c = rep;
    for (int i = 0; i < 6; i++) {
        char *stop = NULL;
        v[i] = strtod(c, &stop);
        if (stop == c || *stop != ' ')
            return damaged(ctx, path, name, "field '%s' is not 7 values: '%.80s'", field, rep);
        c = stop + 1;
    }
    const char *dev = c;
    if (strcmp(dev, "cpu") != 0 && strcmp(dev, "cuda") != 0)
        return damaged(ctx, path, name, "field '%s': device '%.40s' is not cpu or cuda", field,
                       dev);
    int max_steps = j->o->steps > 0 ? j->o->steps : 0;
    const double max[6] = {INFINITY, INFINITY, INFINITY, max_steps, max_steps > 1 ? max_steps : 1,
                           INFINITY};
    for (int i = 0; i < 6; i++) {
        int whole = i == 3 || i == 4;
        if (!(v[i] >= 0) || !isfinite(v[i]) || v[i] > max[i] || (whole && v[i] != floor(v[i])))
            return damaged(ctx, path, name, "field '%s': %s = %g, expected %s in [0, %g]", field,
                           names[i], v[i], whole ? "an integer" : "a finite number", max[i]);
    }
    lr->err_init = v[0];
    lr->err_trained = v[1];
    lr->weight_err = v[2];
    lr->steps = (int)v[3];
    lr->loss_every = (int)v[4];
    lr->seconds = v[5];
    snprintf(lr->init_device, sizeof lr->init_device, "%s", dev);
    /* the loss curve: a point every loss_every steps (and the last), ≥ 0 or NaN/Inf
     * (a refused step's loss is logged as it was) */
    field = "bitrank.ckpt.loss";
    size_t cap =
        lr->steps > 0 ? (size_t)lr->steps / (size_t)(lr->loss_every ? lr->loss_every : 1) + 2 : 0;
    lr->loss = malloc((cap ? cap : 1) * sizeof *lr->loss);
    if (!lr->loss) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", path);
    for (const char *at = curve; *at;) {
        char *stop = NULL;
        double point = strtod(at, &stop);
        if (stop == at || (*stop && *stop != ' ') || point < 0)
            return damaged(ctx, path, name, "field '%s': point %zu is not a loss ≥ 0: '%.20s'",
                           field, lr->n_loss, at);
        if (lr->n_loss == cap)
            return damaged(ctx, path, name, "field '%s' has more than the %zu points of %d steps",
                           field, cap, lr->steps);
        lr->loss[lr->n_loss++] = (float)point;
        at = *stop ? stop + 1 : stop;
    }
    if ((lr->steps > 0) != (lr->n_loss > 0) || (lr->n_loss > 0) != (lr->loss_every > 0))
        return damaged(ctx, path, name,
                       "fields '%s' and 'bitrank.ckpt.report' disagree: %zu points, %d steps, "
                       "loss_every %d",
                       field, lr->n_loss, lr->steps, lr->loss_every);
    return BR_OK;
}

/* Layer `index` (tensor `name`, [m][n] of rank r) from the checkpoint: 1 if taken
 * (L allocated, lr filled), 0 if there is none, <0 on error (*status set; a file
 * made with other options or input is BR_E_STATE, a damaged one BR_E_FORMAT
 * naming the file and the field). */
static int ckpt_load(job *j, size_t index, const char *name, size_t m, size_t n, size_t r,
                     br_blr_host *L, br_layer_report *lr, br_status *status) {
    br_ctx *ctx = j->ctx;
    char path[4400];
    ckpt_path(j, index, path, sizeof path);
    struct stat sb;
    if (stat(path, &sb) != 0) return 0;
    memset(L, 0, sizeof *L);
    br_st_file *f = NULL;
    br_status st = br_st_open(ctx, path, &f);
    if (st) {
        /* the parser's message names the file and what is wrong with it */
        char msg[sizeof ctx->err];
        snprintf(msg, sizeof msg, "%s", br_ctx_error(ctx));
        *status = br_fail(ctx, st,
                          "%s (a damaged checkpoint of layer '%s': remove the file to "
                          "recompute the layer)",
                          msg, name);
        return -1;
    }
    const char *hash = br_st_meta(f, "bitrank.ckpt.hash");
    const char *data = br_st_meta(f, "bitrank.ckpt.data");
    const char *layer = br_st_meta(f, "bitrank.ckpt.layer");
    char want_data[17];
    snprintf(want_data, sizeof want_data, "%016llx", (unsigned long long)j->layer_data[index]);
    const char *rep = br_st_meta(f, "bitrank.ckpt.report");
    const char *curve = br_st_meta(f, "bitrank.ckpt.loss");
    const br_blr_info *info = br_st_blr_count(f) == 1 ? br_st_blr_at(f, 0) : NULL;
    if (!hash || strcmp(hash, j->hash) != 0) {
        st = br_fail(ctx, BR_E_STATE,
                     "%s: this checkpoint was made with other options or another input (hash "
                     "%s, now %s): rerun with the options of the interrupted run, or without "
                     "--resume to start over",
                     path, hash ? hash : "none", j->hash);
    } else if (!data || strcmp(data, want_data) != 0) {
        st = br_fail(ctx, BR_E_STATE,
                     "%s: layer '%s' was fit to another input: its weights or calibration data "
                     "differ from this run's (data %.16s, now %s): remove the file to recompute "
                     "the layer, or rerun without --resume to start over",
                     path, name, data ? data : "none", want_data);
    } else if (!layer || strcmp(layer, name) != 0) {
        st = damaged(ctx, path, name, "field 'bitrank.ckpt.layer' is '%.200s'",
                     layer ? layer : "(missing)");
    } else if (!rep || !curve) {
        st = damaged(ctx, path, name, "field '%s' is missing",
                     !rep ? "bitrank.ckpt.report" : "bitrank.ckpt.loss");
    } else if (!info || strcmp(info->name, name) != 0) {
        st = damaged(ctx, path, name, "it holds %zu compressed layers, expected '%s' alone",
                     br_st_blr_count(f), name);
    } else if (info->m != m || info->n != n || info->r != r || info->paths != j->o->paths) {
        st = damaged(ctx, path, name,
                     "field '%s.blr': [%zu][%zu], rank %zu, %zu path(s); the layer is "
                     "[%zu][%zu], rank %zu, %zu path(s)",
                     name, info->m, info->n, info->r, info->paths, m, n, r, j->o->paths);
    }
    if (!st) st = br_st_read_blr(ctx, f, name, L);
    if (!st) st = check_scales(ctx, path, name, L);
    if (!st) st = parse_report(j, path, name, rep, curve, lr);
    br_st_close(f);
    if (st) {
        br_blr_host_free(L);
        free(lr->loss);
        lr->loss = NULL;
        lr->n_loss = 0;
        *status = st;
        return -1;
    }
    lr->resumed = 1;
    return 1;
}

void br_compress_report_free(br_compress_report *rep) {
    if (!rep) return;
    for (size_t i = 0; i < rep->n_layers; i++)
        free(rep->layers[i].loss);
    free(rep->layers);
    free(rep);
}

/* Bytes of a layer's tensors in the output: per path u8 sign rows and f16 scales. */
static uint64_t blr_bytes(size_t m, size_t n, size_t r, size_t paths) {
    return (uint64_t)paths * ((uint64_t)(m + n) * ((r + 7) / 8) + 2ull * (m + n + r));
}

/* Read tensor t as f32 [numel] into a new array; NaN/Inf fail naming the element. */
static br_status read_weight(job *j, const br_st_file *in, const br_st_tensor *t, float **out) {
    size_t m = (size_t)t->shape[0], n = (size_t)t->shape[1];
    float *w = malloc(m * n * sizeof *w);
    if (!w)
        return br_fail(j->ctx, BR_E_NOMEM, "%s: tensor '%s' [%zu][%zu]: out of host memory",
                       j->in_path, t->name, m, n);
    br_status st = br_st_read_f32(j->ctx, in, t, 0, m * n, w);
    if (!st) st = br_check_weights(j->ctx, j->in_path, t->name, w, m, n);
    if (st) {
        free(w);
        return st;
    }
    *out = w;
    return BR_OK;
}

/* Everything checkable before the first layer runs; fills rank[] per tensor (0:
 * passthrough). */
static br_status plan(job *j, const br_st_file *in, const br_calib_src *cs, size_t *rank,
                      size_t *nsel) {
    br_ctx *ctx = j->ctx;
    const br_compress_opts *o = j->o;
    *nsel = 0;
    size_t count = br_st_count(in);
    for (size_t i = 0; i < count; i++) {
        const br_st_tensor *t = br_st_tensor_at(in, i);
        rank[i] = 0;
        if (!br_compress_selects(o, t->name, t->ndim)) continue;
        if (!is_float_dtype(t->dtype))
            return br_fail(ctx, BR_E_UNSUPPORTED,
                           "%s: tensor '%s': dtype %s cannot be compressed (F32, F16 or BF16 "
                           "can; --exclude it to copy it unchanged)",
                           j->in_path, t->name, t->dtype_name);
        uint64_t m = t->shape[0], n = t->shape[1];
        if (!m || !n) continue; /* an empty weight has nothing to compress: copied as it is */
        if (m > BR_MAX_ELEMS / n)
            return br_fail(ctx, BR_E_SHAPE,
                           "%s: tensor '%s': shape [%llu][%llu] is too large to "
                           "compress",
                           j->in_path, t->name, (unsigned long long)m, (unsigned long long)n);
        if (o->rank) {
            rank[i] = o->rank;
        } else {
            br_status st =
                br_compress_rank(ctx, t->name, (size_t)m, (size_t)n, o->paths, o->bpw, &rank[i]);
            if (st) return prefixed(ctx, st, j->in_path);
        }
        (*nsel)++;
    }
    if (!*nsel)
        return br_fail(ctx, BR_E_ARG,
                       "%s: nothing to compress: none of its %zu tensors is a 2-D linear weight "
                       "(names ending in .weight, not embeddings or norms; --include adds more)",
                       j->in_path, count);
    /* every weight finite, before hours of work; each layer's values and the
     * bytes of the calibration data it takes tag its checkpoint */
    j->layer_data = calloc(*nsel, sizeof *j->layer_data);
    if (!j->layer_data) return br_fail(ctx, BR_E_NOMEM, "out of host memory");
    br_calib_memo memo = {0};
    br_status st = BR_OK;
    for (size_t i = 0, index = 0; i < count && !st; i++) {
        if (!rank[i]) continue;
        const br_st_tensor *t = br_st_tensor_at(in, i);
        float *w = NULL;
        st = read_weight(j, in, t, &w);
        if (st) break;
        uint64_t h = br_bytes_hash(br_name_hash(t->name), w, (size_t)t->numel * sizeof *w);
        free(w);
        st = br_calib_hash(ctx, cs, t->name, (size_t)t->shape[1], &memo, &h);
        j->layer_data[index++] = h;
    }
    br_calib_memo_free(&memo);
    return st;
}

/* One selected tensor: from the checkpoint, or compressed and checkpointed. */
static br_status one_layer(job *j, const br_st_file *in, const br_calib_src *cs, size_t tensor,
                           size_t rank, int resume, br_blr_host *L) {
    br_ctx *ctx = j->ctx;
    const br_compress_opts *o = j->o;
    const br_st_tensor *t = br_st_tensor_at(in, tensor);
    br_layer_report *lr = &j->rep->layers[j->layer];
    memset(lr, 0, sizeof *lr);
    size_t m = (size_t)t->shape[0], n = (size_t)t->shape[1];
    snprintf(lr->name, sizeof lr->name, "%s", t->name);
    lr->m = m;
    lr->n = n;
    lr->rank = rank;
    lr->paths = o->paths;
    lr->bpw = br_blr_bpw(m, n, rank, o->paths);
    br_status st = BR_OK;
    if (resume) {
        int got = ckpt_load(j, j->layer, t->name, m, n, rank, L, lr, &st);
        if (got < 0) return st;
        if (got > 0) {
            j->rep->n_layers = j->layer + 1;
            if (emit(j, BR_PHASE_RESUMED, lr, 0, 0, 0))
                return br_fail(ctx, BR_E_STATE, "cancelled");
            return BR_OK;
        }
    }
    j->rep->n_layers = j->layer + 1;
    if (emit(j, BR_PHASE_INIT, lr, 0, o->steps, 0)) return br_fail(ctx, BR_E_STATE, "cancelled");
    float *w = NULL;
    double *gram = NULL;
    br_calib_set calib = {0};
    st = read_weight(j, in, t, &w);
    if (!st) st = br_calib_gram(ctx, cs->gram, t->name, n, &gram);
    if (!st)
        st = br_calib_inputs(ctx, cs, t->name, n, br_train_pool_tokens(o), o->eval_tokens, o->seed,
                             gram, o->synthetic, &calib);
    if (!st) {
        br_train_in tin = {calib.x_train, calib.ntrain, calib.x_eval, calib.neval};
        step_hook hook = {j, lr, -1};
        st = br_compress_layer(ctx, &j->svid, &j->gram, t->name, w, m, n, rank, &tin, gram, o, L,
                               lr, on_step, &hook);
        if (st && st != BR_E_STATE) st = prefixed(ctx, st, t->name);
    }
    free(w);
    free(gram);
    br_calib_free(&calib);
    if (!st) st = ckpt_save(j, j->layer, L, lr);
    if (st) return st;
    if (emit(j, BR_PHASE_DONE, lr, lr->steps, o->steps, 0))
        return br_fail(ctx, BR_E_STATE, "cancelled");
    return BR_OK;
}

static br_status copy_metadata(br_st_writer *w, const br_st_file *in) {
    for (size_t i = 0; i < br_st_meta_count(in); i++) {
        const char *k = NULL, *v = NULL;
        BR_TRY(br_st_meta_at(in, i, &k, &v));
        if (!strcmp(k, "format") || !strcmp(k, "format_version") || !strncmp(k, "bitrank.", 8))
            continue;
        BR_TRY(br_st_writer_meta(w, k, v));
    }
    return BR_OK;
}

br_status br_compress_file(br_ctx *ctx, const char *in_path, const char *out_path,
                           const br_compress_opts *opts, const char *checkpoint_dir, int resume,
                           br_compress_progress_fn progress, void *user,
                           br_compress_report **report) {
    if (report) *report = NULL;
    if (!ctx) return BR_E_ARG;
    if (!in_path || !out_path)
        return br_fail(ctx, BR_E_ARG, "br_compress_file: %s is NULL",
                       !in_path ? "in_path" : "out_path");
    br_compress_opts o;
    if (opts)
        o = *opts;
    else
        br_compress_opts_default(&o);
    BR_TRY(br_compress_check_opts(ctx, &o));
    job j = {.ctx = ctx,
             .in_path = in_path,
             .out_path = out_path,
             .o = &o,
             .progress = progress,
             .user = user,
             .t0 = now_seconds()};
    snprintf(j.ckpt_dir, sizeof j.ckpt_dir, "%s", checkpoint_dir ? checkpoint_dir : "");
    if (!checkpoint_dir) snprintf(j.ckpt_dir, sizeof j.ckpt_dir, "%s.partial", out_path);

    br_st_file *in = NULL, *acts = NULL, *gramf = NULL;
    br_st_writer *w = NULL;
    size_t *rank = NULL;
    int ckpt_made = 0;
    br_compress_report *rep = calloc(1, sizeof *rep);
    br_status st = rep ? BR_OK : br_fail(ctx, BR_E_NOMEM, "out of host memory");
    if (!st) st = br_st_open(ctx, in_path, &in);
    if (!st && o.activations) st = br_st_open(ctx, o.activations, &acts);
    if (!st && o.gram) st = br_st_open(ctx, o.gram, &gramf);
    size_t count = in ? br_st_count(in) : 0, nsel = 0;
    if (!st) {
        rank = calloc(count ? count : 1, sizeof *rank);
        if (!rank) st = br_fail(ctx, BR_E_NOMEM, "out of host memory");
    }
    br_calib_src cs = {acts, gramf};
    if (!st) st = plan(&j, in, &cs, rank, &nsel);
    if (!st) {
        rep->layers = calloc(nsel, sizeof *rep->layers);
        if (!rep->layers) st = br_fail(ctx, BR_E_NOMEM, "out of host memory");
    }
    /* the output location is checked (its temporary file made) before any work */
    if (!st) st = br_st_writer_new(ctx, out_path, &w);
    if (!st) {
        options_hash(&j, in);
        struct stat sb;
        if (mkdir(j.ckpt_dir, 0777) != 0 && errno != EEXIST)
            st = br_fail(ctx, BR_E_IO, "%s: cannot create the checkpoint directory: %s", j.ckpt_dir,
                         strerror(errno));
        else if (stat(j.ckpt_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
            st = br_fail(ctx, BR_E_IO,
                         "%s: cannot use it as the checkpoint directory: it is not a directory",
                         j.ckpt_dir);
        else
            ckpt_made = 1;
        if (ckpt_made && !resume) ckpt_clear(&j, 0);
    }
    if (rep) {
        snprintf(rep->device, sizeof rep->device, "%s", br_ctx_device(ctx));
        snprintf(rep->calibration, sizeof rep->calibration, "%s",
                 o.activations                   ? "activations"
                 : o.gram                        ? "gram"
                 : o.synthetic == BR_SYNTH_HEAVY ? "synthetic heavy-tailed"
                                                 : "synthetic isotropic");
    }
    j.rep = rep;
    j.layers = nsel;
    /* with resume, every checkpoint is checked before the first layer runs: a
     * refused one stops the job before any work, not after hours of it */
    for (size_t i = 0, index = 0; !st && resume && i < count; i++) {
        if (!rank[i]) continue;
        const br_st_tensor *t = br_st_tensor_at(in, i);
        br_blr_host L = {0};
        br_layer_report lr;
        memset(&lr, 0, sizeof lr);
        if (ckpt_load(&j, index++, t->name, (size_t)t->shape[0], (size_t)t->shape[1], rank[i], &L,
                      &lr, &st) > 0) {
            br_blr_host_free(&L);
            free(lr.loss);
        }
    }
    /* tensors in the input's order: copies, and each layer as soon as it is done
     * (br_st_writer_add_blr copies it, so at most one layer is held) */
    for (size_t i = 0; !st && i < count; i++) {
        const br_st_tensor *t = br_st_tensor_at(in, i);
        if (!rank[i]) {
            rep->n_passthrough++;
            st = br_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
            continue;
        }
        br_blr_host L = {0};
        st = one_layer(&j, in, &cs, i, rank[i], resume, &L);
        if (!st) st = br_st_writer_add_blr(w, t->name, &L);
        if (!st) {
            rep->params_compressed += t->numel;
            rep->bytes_before += t->nbytes;
            rep->bytes_after += blr_bytes(L.m, L.n, L.r, L.paths);
        }
        br_blr_host_free(&L);
        j.layer++;
    }
    if (!st && emit(&j, BR_PHASE_WRITE, NULL, 0, 0, 0)) st = br_fail(ctx, BR_E_STATE, "cancelled");
    if (!st) st = copy_metadata(w, in);
    char num[64];
    snprintf(num, sizeof num, "%g", o.rank ? 0.0 : o.bpw);
    if (!st) st = br_st_writer_meta(w, "bitrank.version", BITRANK_VERSION);
    if (!st) st = br_st_writer_meta(w, "bitrank.bpw_target", num);
    if (!st) st = br_st_writer_meta(w, "bitrank.calibration", rep->calibration);
    if (!st) {
        const char *base = strrchr(in_path, '/');
        st = br_st_writer_meta(w, "bitrank.source", base ? base + 1 : in_path);
    }
    if (!st) st = br_st_writer_finish(w);
    if (!st) {
        /* the input's size: every shard it spans, each counted once */
        struct stat sb;
        for (size_t i = 0; i < count; i++) {
            const char *file = br_st_tensor_at(in, i)->file;
            int seen = 0;
            for (size_t k = 0; k < i && !seen; k++)
                seen = !strcmp(br_st_tensor_at(in, k)->file, file);
            if (!seen && stat(file, &sb) == 0) rep->file_in += (uint64_t)sb.st_size;
        }
        if (stat(out_path, &sb) == 0) rep->file_out = (uint64_t)sb.st_size;
        ckpt_clear(&j, 1);
    }
    br_svid_device_free(j.svid);
    br_gram_cache_free(&j.gram);
    free(j.layer_data);
    br_st_writer_free(w);
    if (st && ckpt_made) rmdir(j.ckpt_dir); /* only if no layer finished (then empty) */
    free(rank);
    br_st_close(in);
    br_st_close(acts);
    br_st_close(gramf);
    if (rep) rep->seconds = now_seconds() - j.t0;
    if (report && rep && (st == BR_OK || rep->n_layers > 0))
        *report = rep;
    else
        br_compress_report_free(rep);
    return st;
}
