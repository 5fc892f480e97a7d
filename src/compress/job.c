/* The compression of a whole checkpoint: select, check, compress layer by layer
 * with a checkpoint after each, write the output atomically. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "compress/calib.h"
#include "compress/ckpt.h"
#include "compress/layer_job.h"
#include "compress/paths.h"

/* A selected layer as the plan left it. */
typedef struct layer_plan {
    size_t tensor; /* its index in the input */
    size_t rank;
    int skip;       /* copied unchanged (note says why) */
    char note[256]; /* why skipped, or a remark (a rank capped) */
    double work;    /* estimated cost, for the progress display's ETA */
} layer_plan;

/* Where a layer runs: a context (device), its Dual-SVID state, and the checkpoint
 * directory seen through that context (its errors land there). */
typedef struct job_device {
    br_ctx *ctx;
    br_svid_device *svid; /* made by the device's first layer, freed at the end */
    br_ckpt ckpt;
} job_device;

/* A layer's result on the way from the device that ran it to the writer. */
typedef enum { LAYER_WAITING, LAYER_RUNNING, LAYER_FINISHED } layer_state;
typedef struct layer_result {
    layer_state state;
    br_status st;
    int stopped; /* its progress call said stop (a cancel, or another layer failed) */
    br_blr_host L;
} layer_result;

typedef struct job {
    br_ctx *ctx;
    const char *in_path, *out_path;
    const br_compress_opts *o;
    br_compress_progress_fn progress;
    void *user;
    double t0;
    br_compress_report *rep;
    size_t layer, layers;     /* the layer being compressed, how many */
    uint64_t *layer_data;     /* [layers]: hash of a layer's weights and calibration bytes (plan) */
    struct layer_plan *plans; /* [layers]: what the plan decided for each selected layer */
    double work_done;         /* estimated cost of the layers before this one */
    double work_total;        /* of every selected layer */
    br_ckpt ckpt;             /* the checkpoint directory */
    int resume;
    /* Several devices: one thread each takes the next layer in plan order; the
     * caller's thread writes the results in order. `mu` guards everything below,
     * the progress callback and the report's layers; `cv` signals a result. */
    int threaded; /* the layers run on device threads (else on the caller's) */
    size_t n_devices;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t next;          /* the next layer to take */
    layer_result *result; /* [layers] */
    int abort;            /* a layer failed, the writer failed or a cancel: take no more */
    int failed;           /* a device's failure is recorded below (the first one only) */
    br_status fail_st;
    char fail_msg[sizeof(((br_ctx *)0)->err)]; /* a context's message naming the device */
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

static int emit_locked(job *j, size_t layer, br_compress_phase phase, const br_layer_report *lr,
                       int step, int steps, double loss) {
    if (!j->progress) return 0;
    br_compress_progress p = {.phase = phase,
                              .layer = layer,
                              .layers = j->layers,
                              .report = lr,
                              .step = step,
                              .steps = steps,
                              .loss = loss,
                              .elapsed = now_seconds() - j->t0,
                              .work_before = j->work_done,
                              .work_layer =
                                  j->plans && layer < j->layers ? j->plans[layer].work : 0,
                              .work_total = j->work_total};
    return j->progress(&p, j->user);
}

/* The progress callback for layer `layer`: one call at a time, whichever device
 * thread makes it; nonzero (stop) also once the job is aborting (another device's
 * layer or the writer failed), which marks the layer as stopped rather than
 * failed: its "cancelled" is a consequence, not the job's failure. */
static int emit(job *j, size_t layer, br_compress_phase phase, const br_layer_report *lr, int step,
                int steps, double loss) {
    if (!j->threaded) return emit_locked(j, layer, phase, lr, step, steps, loss);
    pthread_mutex_lock(&j->mu);
    int stop = j->abort;
    if (!stop && emit_locked(j, layer, phase, lr, step, steps, loss)) stop = j->abort = 1;
    if (stop && layer < j->layers) j->result[layer].stopped = 1;
    pthread_mutex_unlock(&j->mu);
    return stop;
}

typedef struct step_hook {
    job *j;
    size_t layer;
    const br_layer_report *lr;
    double last_loss;
} step_hook;

static int on_step(void *user, int step, int steps, double loss) {
    step_hook *h = user;
    if (loss >= 0) h->last_loss = loss;
    return emit(h->j, h->layer, BR_PHASE_TRAIN, h->lr, step, steps, h->last_loss);
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
    uint64_t h = br_name_hash("bitrank-compress-v3");
    snprintf(buf, sizeof buf,
             "bpw=%.17g rank=%zu paths=%zu steps=%d tokens=%zu lr=%.9g sign_lr=%.9g warmup=%d "
             "patience=%d eval_every=%d eval_tokens=%zu seed=%llu act=%d gram=%d synth=%d "
             "weight_term=%.9g token_weighting=%d",
             o->bpw, o->rank, o->paths, o->steps, o->tokens, (double)o->lr, (double)o->sign_lr,
             o->warmup, o->patience, o->eval_every, o->eval_tokens, (unsigned long long)o->seed,
             o->activations != NULL, o->gram != NULL, o->synthetic, (double)o->weight_term,
             o->token_weighting);
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
    snprintf(j->ckpt.hash, sizeof j->ckpt.hash, "%016llx", (unsigned long long)h);
}

void br_compress_report_free(br_compress_report *rep) {
    if (!rep) return;
    for (size_t i = 0; i < rep->n_layers; i++) {
        free(rep->layers[i].loss);
        free(rep->layers[i].eval);
    }
    free(rep->layers);
    free(rep);
}

/* Bytes of a layer's tensors in the output: per path u8 sign rows and f16 scales. */
static uint64_t blr_bytes(size_t m, size_t n, size_t r, size_t paths) {
    return (uint64_t)paths * ((uint64_t)(m + n) * ((r + 7) / 8) + 2ull * (m + n + r));
}

/* Read tensor t as f32 [numel] into a new array; NaN/Inf fail naming the element. */
static br_status read_weight(br_ctx *ctx, const char *in_path, const br_st_file *in,
                             const br_st_tensor *t, float **out) {
    size_t m = (size_t)t->shape[0], n = (size_t)t->shape[1];
    float *w = malloc(m * n * sizeof *w);
    if (!w)
        return br_fail(ctx, BR_E_NOMEM, "%s: tensor '%s' [%zu][%zu]: out of host memory", in_path,
                       t->name, m, n);
    br_status st = br_st_read_f32(ctx, in, t, 0, m * n, w);
    if (!st) st = br_check_weights(ctx, in_path, t->name, w, m, n);
    if (st) {
        free(w);
        return st;
    }
    *out = w;
    return BR_OK;
}

/* Estimated cost of a layer (arbitrary units): its training steps' FLOPs and its
 * initialization's. */
static double layer_work(const br_compress_opts *o, size_t m, size_t n, size_t rank) {
    double rpad = (double)((rank + 31) / 32 * 32), T = (double)(o->tokens ? o->tokens : 512);
    double pool = 1;
    while (pool < (double)n)
        pool *= 2;
    if (T > pool) T = pool;
    double step = 6.0 * T * (double)o->paths * rpad * (double)(m + n);
    return (double)(o->steps > 0 ? o->steps : 0) * step + 40.0 * (double)m * (double)n * rpad;
}

/* Up to three names of `file`'s tensors, for a message. */
static void some_names(const br_st_file *file, char *out, size_t cap) {
    size_t pos = 0, count = br_st_count(file);
    out[0] = '\0';
    for (size_t i = 0; i < count && i < 3 && pos + 1 < cap; i++)
        pos += (size_t)snprintf(out + pos, cap - pos, "%s'%.80s'", i ? ", " : "",
                                br_st_tensor_at(file, i)->name);
    if (count > 3 && pos + 1 < cap) snprintf(out + pos, cap - pos, ", …");
}

/* The calibration files against the layers: every layer that trains must find its
 * inputs in each file given (a file whose names match nothing, or only some
 * layers, would silently train those layers on synthetic inputs), unless the
 * options allow it for some (never for all). */
static br_status check_calibration(job *j, const br_st_file *in, const br_calib_src *cs) {
    br_ctx *ctx = j->ctx;
    br_calib_memo memo = {0};
    br_status st = BR_OK;
    size_t missing[2] = {0, 0}, first[2] = {0, 0}, trained = 0;
    for (size_t l = 0; !st && l < j->layers; l++) {
        if (j->plans[l].skip) continue;
        const br_st_tensor *t = br_st_tensor_at(in, j->plans[l].tensor);
        int acts = 0, gram = 0;
        st = br_calib_check(ctx, cs, t->name, (size_t)t->shape[1], &memo, &acts, &gram);
        const int has[2] = {acts, gram};
        const br_st_file *f[2] = {cs->acts, cs->gram};
        for (int k = 0; k < 2; k++)
            if (f[k] && !has[k] && !missing[k]++) first[k] = l;
        if (!st && (cs->acts || cs->gram) && !acts && !gram)
            snprintf(j->plans[l].note, sizeof j->plans[l].note,
                     "no calibration tensor: trained on synthetic inputs");
        trained++;
    }
    br_calib_memo_free(&memo);
    BR_TRY(st);
    static const char *const what[2] = {"--calib (recorded inputs)", "--gram (input Grams)"};
    const br_st_file *f[2] = {cs->acts, cs->gram};
    for (int k = 0; k < 2; k++) {
        if (!missing[k] || (j->o->allow_uncalibrated && missing[k] < trained)) continue;
        char names[300];
        some_names(f[k], names, sizeof names);
        const br_st_tensor *t = br_st_tensor_at(in, j->plans[first[k]].tensor);
        return br_fail(ctx, BR_E_ARG,
                       "%s: %s: %zu of the %zu layers to compress find no tensor for them, the "
                       "first '%s' (looked up as NAME, NAME less '.weight', then its enclosing "
                       "modules; the file holds %s): rename the tensors to match (a missing or "
                       "extra prefix such as 'model.'?), --exclude the layers without inputs%s",
                       br_st_path(f[k]), what[k], missing[k], trained, t->name, names,
                       missing[k] < trained ? ", or --allow-uncalibrated to train them on "
                                              "synthetic inputs"
                                            : "");
    }
    return BR_OK;
}

/* Everything checkable before the first layer runs: which tensors are compressed,
 * each layer's rank or why it is skipped, the calibration data, every weight
 * finite. Fills j->plans, j->layers and the layers' data hashes. */
static br_status plan(job *j, const br_st_file *in, const br_calib_src *cs) {
    br_ctx *ctx = j->ctx;
    const br_compress_opts *o = j->o;
    size_t count = br_st_count(in), nsel = 0, nskip = 0;
    j->plans = calloc(count ? count : 1, sizeof *j->plans);
    if (!j->plans) return br_fail(ctx, BR_E_NOMEM, "out of host memory");
    for (size_t i = 0; i < count; i++) {
        const br_st_tensor *t = br_st_tensor_at(in, i);
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
        layer_plan *p = &j->plans[nsel++];
        p->tensor = i;
        size_t mn = m < n ? (size_t)m : (size_t)n;
        if (o->rank) {
            p->rank = o->rank < mn ? o->rank : mn;
            if (o->rank > mn)
                snprintf(p->note, sizeof p->note, "rank capped at min(m, n) = %zu (asked %zu)", mn,
                         o->rank);
        } else if (br_compress_rank(ctx, t->name, (size_t)m, (size_t)n, o->paths, o->bpw,
                                    &p->rank) != BR_OK) {
            /* a shape the budget cannot hold: copied unchanged, unless asked for by name */
            if (br_compress_included(o, t->name)) {
                char msg[sizeof ctx->err];
                snprintf(msg, sizeof msg, "%s", br_ctx_error(ctx));
                return prefixed(ctx, br_fail(ctx, BR_E_SHAPE, "%s (asked for by --include)", msg),
                                j->in_path);
            }
            snprintf(p->note, sizeof p->note, "skipped: %.200s; copied unchanged",
                     br_ctx_error(ctx));
            br_ctx_clear_error(ctx);
            p->skip = 1;
            p->rank = 0;
            nskip++;
        }
        p->work = p->skip ? 0 : layer_work(o, (size_t)m, (size_t)n, p->rank);
        j->work_total += p->work;
    }
    j->layers = nsel;
    if (!nsel)
        return br_fail(ctx, BR_E_ARG,
                       "%s: nothing to compress: none of its %zu tensors is a 2-D linear weight "
                       "(names ending in .weight, not embeddings or norms; --include adds more)",
                       j->in_path, count);
    if (nskip == nsel)
        return br_fail(ctx, BR_E_SHAPE,
                       "%s: none of the %zu layers fits the budget of %g bits per weight (the "
                       "first: %s): raise --bpw or use --paths 1",
                       j->in_path, nsel, o->bpw, j->plans[0].note);
    BR_TRY(check_calibration(j, in, cs));
    /* every weight finite, before hours of work; each layer's values and the
     * bytes of the calibration data it takes tag its checkpoint */
    j->layer_data = calloc(nsel, sizeof *j->layer_data);
    if (!j->layer_data) return br_fail(ctx, BR_E_NOMEM, "out of host memory");
    br_calib_memo memo = {0};
    br_status st = BR_OK;
    for (size_t l = 0; l < nsel && !st; l++) {
        if (j->plans[l].skip) continue;
        const br_st_tensor *t = br_st_tensor_at(in, j->plans[l].tensor);
        float *w = NULL;
        st = read_weight(ctx, j->in_path, in, t, &w);
        if (st) break;
        uint64_t h = br_bytes_hash(br_name_hash(t->name), w, (size_t)t->numel * sizeof *w);
        free(w);
        st = br_calib_hash(ctx, cs, t->name, (size_t)t->shape[1], &memo, &h);
        j->layer_data[l] = h;
    }
    br_calib_memo_free(&memo);
    return st;
}

/* Selected layer `layer` on device d: skipped, from the checkpoint, or compressed
 * and checkpointed. *L is left empty (L->paths 0) when the layer is written
 * unchanged. Touches only the layer's own report and d's state, so devices run
 * layers side by side. */
static br_status one_layer(job *j, job_device *d, size_t layer, const br_st_file *in,
                           const br_calib_src *cs, br_blr_host *L) {
    br_ctx *ctx = d->ctx;
    const br_compress_opts *o = j->o;
    const layer_plan *p = &j->plans[layer];
    const br_st_tensor *t = br_st_tensor_at(in, p->tensor);
    br_layer_report *lr = &j->rep->layers[layer];
    memset(lr, 0, sizeof *lr);
    size_t m = (size_t)t->shape[0], n = (size_t)t->shape[1], rank = p->rank;
    snprintf(lr->name, sizeof lr->name, "%s", t->name);
    snprintf(lr->note, sizeof lr->note, "%s", p->note);
    lr->m = m;
    lr->n = n;
    lr->rank = rank;
    lr->paths = o->paths;
    if (p->skip) {
        lr->outcome = BR_LAYER_SKIPPED;
        if (emit(j, layer, BR_PHASE_DONE, lr, 0, 0, 0))
            return br_fail(ctx, BR_E_STATE, "cancelled");
        return BR_OK;
    }
    lr->bpw = br_blr_bpw(m, n, rank, o->paths);
    br_status st = BR_OK;
    if (j->resume) {
        int got =
            br_ckpt_load(&d->ckpt, layer, j->layer_data[layer], t->name, m, n, rank, L, lr, &st);
        if (got < 0) return st;
        if (got > 0) {
            if (emit(j, layer, BR_PHASE_RESUMED, lr, 0, 0, 0))
                return br_fail(ctx, BR_E_STATE, "cancelled");
            return BR_OK;
        }
    }
    if (emit(j, layer, BR_PHASE_INIT, lr, 0, o->steps, 0))
        return br_fail(ctx, BR_E_STATE, "cancelled");
    float *w = NULL;
    double *gram = NULL;
    br_calib_set calib = {0};
    st = read_weight(ctx, j->in_path, in, t, &w);
    if (!st) st = br_calib_gram(ctx, cs->gram, t->name, n, &gram);
    if (!st)
        st = br_calib_inputs(ctx, cs, t->name, n, o->eval_tokens, o->seed, gram, o->synthetic,
                             &calib);
    if (!st) {
        step_hook hook = {j, layer, lr, -1};
        st = br_compress_layer(ctx, &d->svid, t->name, w, m, n, rank, &calib, gram, o, L, lr,
                               on_step, &hook);
        if (st && st != BR_E_STATE) st = prefixed(ctx, st, t->name);
        if (!st && p->note[0] && !lr->note[0]) snprintf(lr->note, sizeof lr->note, "%s", p->note);
    }
    free(w);
    free(gram);
    br_calib_free(&calib);
    if (!st) st = br_ckpt_save(&d->ckpt, layer, j->layer_data[layer], L, lr);
    if (st) return st;
    if (emit(j, layer, BR_PHASE_DONE, lr, lr->steps, o->steps, 0))
        return br_fail(ctx, BR_E_STATE, "cancelled");
    return BR_OK;
}

/* ---------------------------------------------------------------- several devices */

typedef struct device_thread {
    job *j;
    size_t index; /* in the caller's list of devices (for messages) */
    job_device d;
    const br_st_file *in;
    const br_calib_src *cs;
    pthread_t thread;
    int started;
} device_thread;

/* The device's name in a message: its description's first word ("cuda:1", "cpu"). */
static void device_name(br_ctx *ctx, char *out, size_t cap) {
    const char *desc = br_ctx_device(ctx);
    snprintf(out, cap, "%.*s", (int)strcspn(desc, " "), desc);
}

/* Record a device's failure of layer l as the job's, unless one is recorded
 * already (the first stops the job; later ones are its consequences, or at least
 * not what the user must fix first). The message names the device and the layer
 * (the device's own message mostly names the layer already). Under j->mu. */
static void record_failure(job *j, size_t k, br_ctx *dev, size_t l, br_status st) {
    if (j->failed) return;
    j->failed = 1;
    j->fail_st = st;
    const char *msg = br_ctx_error(dev), *name = j->rep->layers[l].name;
    char dn[64];
    device_name(dev, dn, sizeof dn);
    if (strstr(msg, name))
        snprintf(j->fail_msg, sizeof j->fail_msg, "device %zu (%s): %s", k, dn, msg);
    else
        snprintf(j->fail_msg, sizeof j->fail_msg, "device %zu (%s): layer '%s': %s", k, dn, name,
                 msg);
}

/* A device's thread: the next layer in plan order until none is left or the job
 * aborts. Each layer's result depends only on its inputs and the options (its
 * seeds derive from its name), so which device runs it does not change it. */
static void *device_main(void *arg) {
    device_thread *dt = arg;
    job *j = dt->j;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        if (j->abort || j->next >= j->layers) {
            pthread_mutex_unlock(&j->mu);
            break;
        }
        size_t l = j->next++;
        j->result[l].state = LAYER_RUNNING;
        pthread_mutex_unlock(&j->mu);
        br_blr_host L = {0};
        br_status st = one_layer(j, &dt->d, l, dt->in, dt->cs, &L);
        pthread_mutex_lock(&j->mu);
        layer_result *r = &j->result[l];
        r->st = st;
        r->L = L;
        if (st) {
            if (!r->stopped) record_failure(j, dt->index, dt->d.ctx, l, st);
            j->abort = 1;
        } else {
            j->work_done += j->plans[l].work;
        }
        r->state = LAYER_FINISHED;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
    return NULL;
}

/* Wait for layer l's result: BR_OK with *L (then the writer's to free), or the
 * layer's failure status (BR_E_STATE for a layer the abort left untaken), whose
 * message the caller takes from the job once every device has stopped
 * (job_failure). */
static br_status await_layer(job *j, size_t l, br_blr_host *L) {
    pthread_mutex_lock(&j->mu);
    layer_result *r = &j->result[l];
    while (r->state != LAYER_FINISHED && !(j->abort && r->state == LAYER_WAITING))
        pthread_cond_wait(&j->cv, &j->mu);
    br_status st = r->state == LAYER_FINISHED ? r->st : BR_E_STATE;
    if (!st) {
        *L = r->L;
        memset(&r->L, 0, sizeof r->L);
    }
    pthread_mutex_unlock(&j->mu);
    return st;
}

/* After the devices stopped at a failure or a cancel: the job's status and
 * message on its context: the device's failure that stopped it, else
 * "cancelled" (the progress callback asked). */
static br_status job_failure(job *j) {
    if (j->failed) return br_fail(j->ctx, j->fail_st, "%s", j->fail_msg);
    return br_fail(j->ctx, BR_E_STATE, "cancelled");
}

/* The options that decide the result, as "key=value …" (the report's and the
 * output's record of the run). */
static void options_string(const br_compress_opts *o, char *out, size_t cap) {
    char target[64];
    if (o->rank)
        snprintf(target, sizeof target, "rank=%zu", o->rank);
    else
        snprintf(target, sizeof target, "bpw=%g", o->bpw);
    snprintf(out, cap,
             "%s paths=%zu steps=%d tokens=%zu lr=%g sign_lr=%g warmup=%d patience=%d "
             "eval_every=%d eval_tokens=%zu weight_term=%g token_weighting=%s synthetic=%s "
             "seed=%llu",
             target, o->paths, o->steps, o->tokens, (double)o->lr, (double)o->sign_lr, o->warmup,
             o->patience, o->eval_every, o->eval_tokens, (double)o->weight_term,
             o->token_weighting == BR_TOKENS_AGGREGATE ? "aggregate" : "relative",
             o->synthetic == BR_SYNTH_HEAVY ? "heavy" : "iso", (unsigned long long)o->seed);
}

/* The skipped layers and why, one "NAME: note" line each, for the output's
 * metadata (empty when none). */
static char *skipped_list(const br_compress_report *rep) {
    size_t cap = 1;
    for (size_t i = 0; i < rep->n_layers; i++)
        if (rep->layers[i].outcome == BR_LAYER_SKIPPED)
            cap += strlen(rep->layers[i].name) + strlen(rep->layers[i].note) + 3;
    char *s = malloc(cap);
    if (!s) return NULL;
    size_t pos = 0;
    s[0] = '\0';
    for (size_t i = 0; i < rep->n_layers; i++)
        if (rep->layers[i].outcome == BR_LAYER_SKIPPED)
            pos += (size_t)snprintf(s + pos, cap - pos, "%s%s: %s", pos ? "\n" : "",
                                    rep->layers[i].name, rep->layers[i].note);
    return s;
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

/* The report's device of a job on several: their names, then the first one's
 * details when all share them ("cuda:0, cuda:1 NVIDIA H100 (sm_90, 79.1 GiB)",
 * "cpu, cpu"), else every description. */
static void devices_text(br_ctx *const *devices, size_t n, char *out, size_t cap) {
    const char *first = br_ctx_device(devices[0]);
    const char *detail = first + strcspn(first, " ");
    int same = 1;
    for (size_t k = 1; k < n && same; k++) {
        const char *d = br_ctx_device(devices[k]);
        same = !strcmp(d + strcspn(d, " "), detail);
    }
    size_t pos = 0;
    out[0] = '\0';
    for (size_t k = 0; k < n && pos + 1 < cap; k++) {
        const char *d = br_ctx_device(devices[k]);
        int len = same ? (int)strcspn(d, " ") : (int)strlen(d);
        pos += (size_t)snprintf(out + pos, cap - pos, "%s%.*s", k ? ", " : "", len, d);
    }
    if (same && pos + 1 < cap) snprintf(out + pos, cap - pos, "%s", detail);
}

/* The device contexts against the job's: none, or the job's alone, runs on the
 * caller's thread (*threaded 0); otherwise each is distinct, not the job's (whose
 * thread writes the output), not NULL, and of one backend. */
static br_status check_devices(br_ctx *ctx, br_ctx *const *devices, size_t n_devices,
                               int *threaded) {
    *threaded = 0;
    if (n_devices == 0 || (n_devices == 1 && devices && devices[0] == ctx)) return BR_OK;
    if (!devices) return br_fail(ctx, BR_E_ARG, "br_compress_file_on: devices is NULL");
    if (n_devices > BR_COMPRESS_MAX_DEVICES)
        return br_fail(ctx, BR_E_ARG, "br_compress_file_on: %zu devices (at most %d)", n_devices,
                       BR_COMPRESS_MAX_DEVICES);
    for (size_t k = 0; k < n_devices; k++) {
        if (!devices[k])
            return br_fail(ctx, BR_E_ARG, "br_compress_file_on: devices[%zu] is NULL", k);
        if (devices[k] == ctx)
            return br_fail(ctx, BR_E_ARG,
                           "br_compress_file_on: devices[%zu] is the job's context: with several "
                           "devices the job's context only writes the output; open one more",
                           k);
        if (strcmp(br_ctx_backend(devices[k]), br_ctx_backend(devices[0])) != 0)
            return br_fail(ctx, BR_E_ARG,
                           "br_compress_file_on: devices[0] is %s and devices[%zu] %s: a layer's "
                           "bits depend on the kind of device that computes it, so the devices "
                           "of one job are of one kind (the output is then the same file "
                           "whichever device takes which layer)",
                           br_ctx_backend(devices[0]), k, br_ctx_backend(devices[k]));
        for (size_t i = 0; i < k; i++)
            if (devices[i] == devices[k])
                return br_fail(ctx, BR_E_ARG,
                               "br_compress_file_on: devices[%zu] and devices[%zu] are the same "
                               "context (a context runs on one thread at a time; open one per "
                               "device)",
                               i, k);
    }
    *threaded = 1;
    return BR_OK;
}

br_status br_compress_file(br_ctx *ctx, const char *in_path, const char *out_path,
                           const br_compress_opts *opts, const char *checkpoint_dir, int resume,
                           br_compress_progress_fn progress, void *user,
                           br_compress_report **report) {
    return br_compress_file_on(ctx, NULL, 0, in_path, out_path, opts, checkpoint_dir, resume,
                               progress, user, report);
}

br_status br_compress_file_on(br_ctx *ctx, br_ctx *const *devices, size_t n_devices,
                              const char *in_path, const char *out_path,
                              const br_compress_opts *opts, const char *checkpoint_dir, int resume,
                              br_compress_progress_fn progress, void *user,
                              br_compress_report **report) {
    if (report) *report = NULL;
    if (!ctx) return BR_E_ARG;
    if (!in_path || !out_path)
        return br_fail(ctx, BR_E_ARG, "br_compress_file: %s is NULL",
                       !in_path ? "in_path" : "out_path");
    int threaded = 0;
    BR_TRY(check_devices(ctx, devices, n_devices, &threaded));
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
             .t0 = now_seconds(),
             .resume = resume,
             .threaded = threaded,
             .n_devices = threaded ? n_devices : 1};
    if (threaded) {
        if (pthread_mutex_init(&j.mu, NULL))
            return br_fail(ctx, BR_E_STATE, "no mutex for the job");
        if (pthread_cond_init(&j.cv, NULL)) {
            pthread_mutex_destroy(&j.mu);
            return br_fail(ctx, BR_E_STATE, "no condition variable for the job");
        }
    }
    snprintf(j.ckpt.dir, sizeof j.ckpt.dir, "%s", checkpoint_dir ? checkpoint_dir : "");
    if (!checkpoint_dir) snprintf(j.ckpt.dir, sizeof j.ckpt.dir, "%s.partial", out_path);

    br_st_file *in = NULL, *acts = NULL, *gramf = NULL;
    br_st_writer *w = NULL;
    int ckpt_made = 0;
    br_compress_report *rep = calloc(1, sizeof *rep);
    br_status st = rep ? BR_OK : br_fail(ctx, BR_E_NOMEM, "out of host memory");
    if (!st) st = br_st_open(ctx, in_path, &in);
    if (!st && o.activations) st = br_st_open(ctx, o.activations, &acts);
    if (!st && o.gram) st = br_st_open(ctx, o.gram, &gramf);
    size_t count = in ? br_st_count(in) : 0;
    br_calib_src cs = {acts, gramf};
    /* nothing written may be one of the files read */
    if (!st) st = br_compress_check_paths(ctx, in, out_path, checkpoint_dir);
    if (!st && acts) st = br_compress_check_not_input(ctx, acts, out_path, "output");
    if (!st && gramf) st = br_compress_check_not_input(ctx, gramf, out_path, "output");
    if (!st) st = plan(&j, in, &cs);
    if (!st) {
        rep->layers = calloc(j.layers, sizeof *rep->layers);
        if (!rep->layers) st = br_fail(ctx, BR_E_NOMEM, "out of host memory");
    }
    /* the output location is checked (its temporary file made) before any work */
    if (!st) st = br_st_writer_new(ctx, out_path, &w);
    if (!st) {
        options_hash(&j, in);
        j.ckpt.ctx = ctx;
        j.ckpt.max_steps = o.steps > 0 ? o.steps : 0;
        j.ckpt.paths = o.paths;
        struct stat sb;
        if (mkdir(j.ckpt.dir, 0777) != 0 && errno != EEXIST)
            st = br_fail(ctx, BR_E_IO, "%s: cannot create the checkpoint directory: %s", j.ckpt.dir,
                         strerror(errno));
        else if (stat(j.ckpt.dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
            st = br_fail(ctx, BR_E_IO,
                         "%s: cannot use it as the checkpoint directory: it is not a directory",
                         j.ckpt.dir);
        else
            ckpt_made = 1;
        /* one job at a time per checkpoint directory (two would clobber each
         * other's layers) */
        if (ckpt_made) st = br_ckpt_lock(&j.ckpt);
        if (!st && !resume) br_ckpt_clear(&j.ckpt, 0);
    }
    if (rep && threaded)
        devices_text(devices, n_devices, rep->device, sizeof rep->device);
    else if (rep)
        snprintf(rep->device, sizeof rep->device, "%s", br_ctx_device(ctx));
    if (rep) {
        snprintf(rep->calibration, sizeof rep->calibration, "%s",
                 o.activations                   ? "activations"
                 : o.gram                        ? "gram"
                 : o.synthetic == BR_SYNTH_HEAVY ? "synthetic heavy-tailed"
                                                 : "synthetic isotropic");
    }
    if (rep) {
        snprintf(rep->calib_file, sizeof rep->calib_file, "%s",
                 o.activations ? o.activations
                 : o.gram      ? o.gram
                               : "");
        options_string(&o, rep->options, sizeof rep->options);
    }
    j.rep = rep;
    /* with resume, every checkpoint is checked before the first layer runs: a
     * refused one stops the job before any work, not after hours of it */
    for (size_t l = 0; !st && resume && l < j.layers; l++) {
        if (j.plans[l].skip) continue;
        const br_st_tensor *t = br_st_tensor_at(in, j.plans[l].tensor);
        br_blr_host L = {0};
        br_layer_report lr;
        memset(&lr, 0, sizeof lr);
        int got = br_ckpt_load(&j.ckpt, l, j.layer_data[l], t->name, (size_t)t->shape[0],
                               (size_t)t->shape[1], j.plans[l].rank, &L, &lr, &st);
        if (got > 0) {
            br_blr_host_free(&L);
            free(lr.loss);
            free(lr.eval);
        }
    }
    /* the devices: the job's context alone runs the layers on the caller's thread;
     * several run one thread each, each with its own view of the checkpoints */
    job_device one = {.ctx = ctx, .ckpt = j.ckpt};
    device_thread *threads = NULL;
    int device_failed = 0; /* the writer stopped at a device's failure */
    if (!st && j.threaded) {
        threads = calloc(j.n_devices, sizeof *threads);
        j.result = calloc(j.layers, sizeof *j.result);
        if (!threads || !j.result) st = br_fail(ctx, BR_E_NOMEM, "out of host memory");
        for (size_t k = 0; !st && k < j.n_devices; k++) {
            device_thread *dt = &threads[k];
            *dt = (device_thread){.j = &j, .index = k, .in = in, .cs = &cs};
            dt->d.ctx = devices[k];
            dt->d.ckpt = j.ckpt;
            dt->d.ckpt.ctx = devices[k];
            dt->d.ckpt.locked = 0; /* the job's thread holds the lock */
            int e = pthread_create(&dt->thread, NULL, device_main, dt);
            if (e) {
                pthread_mutex_lock(&j.mu);
                j.abort = 1;
                pthread_mutex_unlock(&j.mu);
                char dn[64];
                device_name(devices[k], dn, sizeof dn);
                st = br_fail(ctx, BR_E_STATE, "cannot start the thread of device %zu (%s): %s", k,
                             dn, strerror(e));
            } else {
                dt->started = 1;
            }
        }
    }
    /* tensors in the input's order: copies, and each layer as soon as it is done
     * (br_st_writer_add_blr copies it; with one device at most one layer is held,
     * with several those finished ahead of the one written) */
    for (size_t i = 0; !st && i < count; i++) {
        const br_st_tensor *t = br_st_tensor_at(in, i);
        if (j.layer >= j.layers || j.plans[j.layer].tensor != i) {
            rep->n_passthrough++;
            st = br_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
            continue;
        }
        br_blr_host L = {0};
        if (threads) {
            st = await_layer(&j, j.layer, &L);
            device_failed = st != BR_OK;
        } else {
            rep->n_layers = j.layer + 1;
            st = one_layer(&j, &one, j.layer, in, &cs, &L);
        }
        const br_layer_report *lr = &rep->layers[j.layer];
        if (!st && lr->outcome == BR_LAYER_SKIPPED) {
            rep->n_skipped++;
            st = br_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
        } else if (!st) {
            st = br_st_writer_add_blr(w, t->name, &L);
            if (!st) {
                rep->params_compressed += t->numel;
                rep->bytes_before += t->nbytes;
                rep->bytes_after += blr_bytes(L.m, L.n, L.r, L.paths);
            }
        }
        br_blr_host_free(&L);
        if (!threads) j.work_done += j.plans[j.layer].work;
        j.layer++;
    }
    if (threads) {
        if (st) {
            pthread_mutex_lock(&j.mu);
            j.abort = 1;
            pthread_mutex_unlock(&j.mu);
        }
        for (size_t k = 0; k < j.n_devices; k++)
            if (threads[k].started) pthread_join(threads[k].thread, NULL);
        /* a device's failure is the job's, with its message (the writer's own
         * failure is already on ctx) */
        if (device_failed) st = job_failure(&j);
        /* the report holds the layers the devices took: a prefix in plan order,
         * each finished now (ok, failed or stopped), whose curves it frees */
        size_t done = 0;
        while (j.result && done < j.layers && j.result[done].state == LAYER_FINISHED)
            done++;
        rep->n_layers = done;
        for (size_t k = 0; k < j.n_devices; k++)
            br_svid_device_free(threads[k].d.svid);
        for (size_t l = 0; j.result && l < j.layers; l++)
            br_blr_host_free(&j.result[l].L);
        free(threads);
    }
    if (!st && emit(&j, j.layers, BR_PHASE_WRITE, NULL, 0, 0, 0))
        st = br_fail(ctx, BR_E_STATE, "cancelled");
    if (!st) st = copy_metadata(w, in);
    char num[64];
    snprintf(num, sizeof num, "%g", o.rank ? 0.0 : o.bpw);
    if (!st) st = br_st_writer_meta(w, "bitrank.version", BITRANK_VERSION);
    if (!st) st = br_st_writer_meta(w, "bitrank.bpw_target", num);
    if (!st) st = br_st_writer_meta(w, "bitrank.calibration", rep->calibration);
    if (!st) st = br_st_writer_meta(w, "bitrank.options", rep->options);
    if (!st && rep->n_skipped) {
        char *skipped = skipped_list(rep);
        st = skipped ? br_st_writer_meta(w, "bitrank.skipped", skipped)
                     : br_fail(ctx, BR_E_NOMEM, "out of host memory");
        free(skipped);
    }
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
        br_ckpt_clear(&j.ckpt, 1);
    }
    br_svid_device_free(one.svid);
    free(j.result);
    if (j.threaded) {
        pthread_cond_destroy(&j.cv);
        pthread_mutex_destroy(&j.mu);
    }
    free(j.layer_data);
    free(j.plans);
    br_st_writer_free(w);
    br_ckpt_unlock(&j.ckpt);
    if (st && ckpt_made) rmdir(j.ckpt.dir); /* only if no layer finished (then empty) */
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
