/* One matrix from W to a trained BLR layer: objective, initialization, training,
 * report. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compress/layer_job.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

br_status br_check_weights(br_ctx *ctx, const char *file, const char *name, const float *w,
                           size_t m, size_t n) {
    for (size_t i = 0; i < m * n; i++)
        if (!isfinite(w[i]))
            return br_fail(ctx, BR_E_NONFINITE, "%s%stensor '%s': element [%zu][%zu] is %s",
                           file ? file : "", file ? ": " : "", name, i / n, i % n,
                           isnan(w[i]) ? "NaN" : "infinite");
    return BR_OK;
}

/* The objective of the layer from its calibration set. */
static br_status make_objective(br_ctx *ctx, const char *name, const float *w, size_t m, size_t n,
                                const br_calib_set *cs, const double *gram,
                                const br_compress_opts *o, br_objective *obj) {
    size_t batch = o->tokens ? o->tokens : 512;
    uint64_t seed = o->seed ^ br_name_hash(name) ^ 0x0b1ec7ull;
    if (cs->recorded)
        return br_objective_from_inputs(ctx, w, m, n, cs->x_train, cs->ntrain, o, batch, seed, obj);
    if (gram) return br_objective_from_gram(ctx, w, m, n, gram, o, batch, seed, obj);
    return br_objective_from_variances(ctx, w, m, n, cs->var, o, batch, seed, obj);
}

/* One Dual-SVID under wh (NULL: plain), on the device where possible. *on: where
 * the SVD ran. */
static br_status svid(br_ctx *ctx, br_svid_device **devp, const float *w, const br_whitening *wh,
                      uint64_t seed, const br_compress_opts *o, br_blr_host *L, br_svid_factors *f,
                      const char **on) {
    br_status dev = BR_E_UNSUPPORTED;
    if (o->init_on_device && strcmp(br_ctx_backend(ctx), "cpu") != 0) {
        dev = *devp ? BR_OK : br_svid_device_new(ctx, devp);
        if (dev == BR_OK) dev = br_svid_whitened_on(*devp, w, wh, seed, L, f);
        if (dev != BR_OK && dev != BR_E_UNSUPPORTED) return dev;
    }
    *on = dev == BR_OK ? br_ctx_backend(ctx) : "cpu";
    if (dev == BR_OK) return BR_OK;
    return br_svid_whitened_host(ctx, w, wh, seed, L, f);
}

static double weight_error(br_ctx *ctx, const br_blr_host *L, const float *w, br_status *st) {
    size_t m = L->m, n = L->n;
    float *w_hat = malloc(m * n * sizeof *w_hat);
    if (!w_hat) {
        *st = br_fail(ctx, BR_E_NOMEM, "out of host memory for a [%zu][%zu] reconstruction", m, n);
        return INFINITY;
    }
    *st = br_layer_host_reconstruct(ctx, L, 0, w_hat);
    double e = *st ? INFINITY : br_rel_diff(w_hat, w, m * n);
    free(w_hat);
    return e;
}

/* The initializations worth trying for this objective, best first when equal. */
typedef struct init_kind {
    const char *name;
    br_whitening wh;
    int plain;
} init_kind;

br_status br_compress_layer(br_ctx *ctx, br_svid_device **devp, const char *name, const float *w,
                            size_t m, size_t n, size_t rank, const br_calib_set *cs,
                            const double *gram, const br_compress_opts *o, br_blr_host *out,
                            br_layer_report *rep, br_train_hook hook, void *user) {
    double t0 = now_seconds();
    snprintf(rep->name, sizeof rep->name, "%s", name);
    rep->m = m;
    rep->n = n;
    rep->rank = rank;
    rep->paths = o->paths;
    rep->bpw = br_blr_bpw(m, n, rank, o->paths);
    snprintf(rep->calibration, sizeof rep->calibration, "%s", cs->kind ? cs->kind : "");
    rep->calib_tokens = cs->recorded ? cs->ntrain : 0;
    memset(out, 0, sizeof *out);

    int zero = 1;
    for (size_t i = 0; i < m * n && zero; i++)
        zero = w[i] == 0.0f;
    if (zero) {
        /* Ŵ = 0 (every scale 0) is exact: nothing to fit */
        BR_TRY(br_layer_host_alloc(ctx, out, m, n, rank, o->paths));
        snprintf(rep->init_kind, sizeof rep->init_kind, "plain");
        snprintf(rep->init_device, sizeof rep->init_device, "cpu");
        rep->seconds = now_seconds() - t0;
        return BR_OK;
    }
    br_objective obj = {0};
    br_trainer *tr = NULL;
    br_blr_host cand = {0};
    br_svid_factors f = {0}, fc = {0};
    double *scale = NULL;
    br_status st = make_objective(ctx, name, w, m, n, cs, gram, o, &obj);
    br_train_data data = {&obj, cs->x_eval, cs->neval, obj.floor2};
    if (!st) st = br_trainer_new(ctx, w, m, n, rank, o->paths, &data, o, &tr);
    /* the trainer holds the pool on its device now */
    free(obj.pool);
    obj.pool = NULL;
    if (!st) st = br_layer_host_alloc(ctx, out, m, n, rank, o->paths);
    if (!st) st = br_layer_host_alloc(ctx, &cand, m, n, rank, o->paths);
    if (!st) st = br_svid_factors_alloc(ctx, &f, m, n, rank, o->paths);
    if (!st) st = br_svid_factors_alloc(ctx, &fc, m, n, rank, o->paths);
    if (!st && !obj.diag_flat) {
        scale = malloc(n * sizeof *scale);
        if (!scale) st = br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", name);
        for (size_t j = 0; scale && j < n; j++)
            scale[j] = sqrt(obj.diag[j]);
    }
    init_kind kinds[3];
    size_t nk = 0;
    kinds[nk++] = (init_kind){"plain", {0}, 1};
    if (scale) kinds[nk++] = (init_kind){"scaled", {.n = n, .scale = scale}, 0};
    if (obj.chol)
        kinds[nk++] =
            (init_kind){"whitened", {.n = n, .factor = obj.chol, .factor_inv = obj.chol_inv}, 0};
    double best = INFINITY;
    uint64_t seed = o->seed ^ br_name_hash(name);
    for (size_t k = 0; !st && k < nk; k++) {
        const char *on = "cpu";
        double crit = 0;
        st = svid(ctx, devp, w, kinds[k].plain ? NULL : &kinds[k].wh, seed, o, &cand, &fc, &on);
        if (!st) st = br_trainer_measure(tr, &cand, &crit, NULL, NULL);
        if (!st && (crit < best || k == 0)) {
            best = crit;
            br_blr_host tl = *out;
            *out = cand;
            cand = tl;
            br_svid_factors tf = f;
            f = fc;
            fc = tf;
            snprintf(rep->init_kind, sizeof rep->init_kind, "%s", kinds[k].name);
            snprintf(rep->init_device, sizeof rep->init_device, "%s", on);
        }
    }
    br_layer_host_free(&cand);
    br_svid_factors_free(&fc);
    free(scale);
    br_objective_free(&obj);
    if (!st) rep->weight_err_init = weight_error(ctx, out, w, &st);
    rep->init_seconds = now_seconds() - t0;
    if (!st) st = br_trainer_train(tr, out, &f, rep, hook, user);
    br_svid_factors_free(&f);
    br_trainer_free(tr);
    if (!st) rep->weight_err = weight_error(ctx, out, w, &st);
    if (!st && !(rep->weight_err <= 1.0)) {
        rep->outcome = BR_LAYER_SKIPPED;
        snprintf(rep->note, sizeof rep->note,
                 "compression failed: weight error %.3g > 1 (Ŵ is further from W than 0 is); "
                 "the original is kept",
                 rep->weight_err);
    }
    rep->seconds = now_seconds() - t0;
    if (st) br_layer_host_free(out);
    return st;
}

br_status br_compress_matrix(br_ctx *ctx, const char *name, const float *w, size_t m, size_t n,
                             const float *x, size_t ntok, const double *gram,
                             const br_compress_opts *opts, br_blr_host *out,
                             br_layer_report *report) {
    if (!ctx) return BR_E_ARG;
    const char *nm = name ? name : "matrix";
    if (!w || !out)
        return br_fail(ctx, BR_E_ARG, "br_compress_matrix: %s is NULL", !w ? "w" : "out");
    memset(out, 0, sizeof *out);
    if (!m || !n || m > BR_MAX_ELEMS / n)
        return br_fail(ctx, BR_E_SHAPE, "br_compress_matrix: %s: bad shape [%zu][%zu]", nm, m, n);
    if (x && ntok < 2)
        return br_fail(ctx, BR_E_SHAPE, "br_compress_matrix: %s: %zu input token(s), need ≥ 2", nm,
                       ntok);
    br_compress_opts o;
    if (opts)
        o = *opts;
    else
        br_compress_opts_default(&o);
    if (br_compress_check_opts(ctx, &o) != BR_OK) {
        char msg[sizeof ctx->err];
        snprintf(msg, sizeof msg, "%s", br_ctx_error(ctx));
        return br_fail(ctx, BR_E_ARG, "br_compress_matrix: %s: %s", nm, msg);
    }
    size_t mn = m < n ? m : n;
    size_t rank = o.rank ? (o.rank < mn ? o.rank : mn) : 0;
    if (!rank) BR_TRY(br_compress_rank(ctx, nm, m, n, o.paths, o.bpw, &rank));
    BR_TRY(br_check_weights(ctx, NULL, nm, w, m, n));
    br_calib_set cs = {0};
    if (x) {
        size_t neval = o.eval_tokens < ntok / 4 ? o.eval_tokens : ntok / 4;
        if (!neval) neval = 1;
        cs = (br_calib_set){.x_train = (float *)x,
                            .ntrain = ntok - neval,
                            .x_eval = (float *)x + (ntok - neval) * n,
                            .neval = neval,
                            .recorded = 1,
                            .kind = "activations"};
    } else {
        BR_TRY(br_calib_inputs(ctx, NULL, nm, n, o.eval_tokens, o.seed, gram, o.synthetic, &cs));
    }
    br_layer_report rep;
    memset(&rep, 0, sizeof rep);
    br_svid_device *dev = NULL;
    br_status st =
        br_compress_layer(ctx, &dev, nm, w, m, n, rank, &cs, gram, &o, out, &rep, NULL, NULL);
    br_svid_device_free(dev);
    if (!x) br_calib_free(&cs);
    if (report) {
        *report = rep;
    } else {
        free(rep.loss);
        free(rep.eval);
    }
    return st;
}
