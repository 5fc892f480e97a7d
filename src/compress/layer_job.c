/* One matrix from W to a trained BLR layer: rank, Dual-SVID, training, report. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compress/calib.h"
#include "compress/layer_job.h"
#include "compress/train.h"

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

br_status br_compress_one(br_ctx *ctx, const char *name, const float *w, size_t m, size_t n,
                          size_t rank, const br_train_in *in, const double *gram,
                          const br_compress_opts *o, br_blr_host *out, br_layer_report *rep,
                          br_train_hook hook, void *user) {
    br_svid_device *dev = NULL;
    br_status st =
        br_compress_layer(ctx, &dev, NULL, name, w, m, n, rank, in, gram, o, out, rep, hook, user);
    br_svid_device_free(dev);
    return st;
}

br_status br_compress_layer(br_ctx *ctx, br_svid_device **devp, br_gram_cache *gc, const char *name,
                            const float *w, size_t m, size_t n, size_t rank, const br_train_in *in,
                            const double *gram, const br_compress_opts *o, br_blr_host *out,
                            br_layer_report *rep, br_train_hook hook, void *user) {
    double t0 = now_seconds();
    br_svid_factors f = {0};
    snprintf(rep->name, sizeof rep->name, "%s", name);
    rep->m = m;
    rep->n = n;
    rep->rank = rank;
    rep->paths = o->paths;
    rep->bpw = br_blr_bpw(m, n, rank, o->paths);
    BR_TRY(br_layer_host_alloc(ctx, out, m, n, rank, o->paths));
    br_status st = br_svid_factors_alloc(ctx, &f, m, n, rank, o->paths);
    /* the SVD on the GPU when the context has one, else (or if that fails for want
     * of a device path) on the host */
    br_status dev = BR_E_UNSUPPORTED;
    if (!st && o->init_on_device && strcmp(br_ctx_backend(ctx), "cpu") != 0) {
        dev = *devp ? BR_OK : br_svid_device_new(ctx, devp);
        if (dev == BR_OK)
            dev = br_svid_init_on(*devp, w, gram, gc, o->seed ^ br_name_hash(name), out, &f);
        if (dev != BR_OK && dev != BR_E_UNSUPPORTED) st = dev;
    }
    snprintf(rep->init_device, sizeof rep->init_device, "%s",
             dev == BR_OK ? br_ctx_backend(ctx) : "cpu");
    if (!st && dev != BR_OK)
        st = br_svid_init_host(ctx, w, gram, gc, o->seed ^ br_name_hash(name), out, &f);
    if (!st) st = br_train_layer(ctx, w, in, o, out, &f, rep, hook, user);
    br_svid_factors_free(&f);
    if (!st) {
        float *w_hat = malloc(m * n * sizeof *w_hat);
        if (!w_hat) {
            st = br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", name);
        } else {
            st = br_layer_host_reconstruct(ctx, out, 0, w_hat);
            rep->weight_err = br_rel_diff(w_hat, w, m * n);
            free(w_hat);
        }
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
    size_t rank = o.rank;
    if (!rank) BR_TRY(br_compress_rank(ctx, nm, m, n, o.paths, o.bpw, &rank));
    BR_TRY(br_check_weights(ctx, NULL, nm, w, m, n));
    br_calib_set cs = {0};
    br_train_in in;
    if (x) {
        size_t neval = o.eval_tokens < ntok / 4 ? o.eval_tokens : ntok / 4;
        if (!neval) neval = 1;
        in = (br_train_in){x, ntok - neval, x + (ntok - neval) * n, neval};
    } else {
        BR_TRY(br_calib_inputs(ctx, NULL, nm, n, br_train_pool_tokens(&o), o.eval_tokens, o.seed,
                               gram, o.synthetic, &cs));
        in = (br_train_in){cs.x_train, cs.ntrain, cs.x_eval, cs.neval};
    }
    br_layer_report rep;
    memset(&rep, 0, sizeof rep);
    br_status st = br_compress_one(ctx, nm, w, m, n, rank, &in, gram, &o, out, &rep, NULL, NULL);
    br_calib_free(&cs);
    if (report)
        *report = rep;
    else
        free(rep.loss);
    return st;
}

size_t br_train_pool_tokens(const br_compress_opts *o) {
    size_t T = o->tokens ? o->tokens : 512;
    size_t pool = 8 * T;
    if (pool > 32768) pool = T > 32768 ? T : 32768;
    return pool;
}
