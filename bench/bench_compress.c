/* The main job on one big layer: a 3584×1024 linear at 1.0 bits per weight, two
 * paths, Dual-SVID initialization + 500 steps of 4096 tokens (target on the H200:
 * under 5 s). One JSON line: the initialization alone, the whole layer, errors.
 *
 * usage: bench_compress [--device D] [--m M] [--n N] [--steps S] [--tokens T]
 *                       [--bpw X] [--paths P]
 * (on a CPU, e.g. --steps 20 --tokens 512 for a quick look). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bitrank.h"
#include "compress/calib.h"
#include "compress/host_blas.h"
#include "compress/layer_job.h"
#include "core/rng.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* W = A·diag(σ)·Bᵀ/√n with σ_k = (k+1)^−0.6: a trained layer's decaying spectrum. */
static float *make_weight(size_t m, size_t n, uint64_t seed) {
    size_t k = m < n ? m : n;
    float *a = malloc(m * k * sizeof *a), *b = malloc(n * k * sizeof *b),
          *w = malloc(m * n * sizeof *w);
    if (!a || !b || !w) return NULL;
    br_rng rng;
    br_rng_seed(&rng, seed);
    for (size_t i = 0; i < m; i++)
        for (size_t c = 0; c < k; c++)
            a[i * k + c] = (float)(br_rng_normal(&rng) * pow((double)c + 1, -0.6));
    for (size_t i = 0; i < n * k; i++)
        b[i] = (float)br_rng_normal(&rng);
    br_sgemm(0, 1, m, n, k, (float)(0.02 / sqrt((double)n)), a, k, b, k, 0.0f, w, n);
    free(a);
    free(b);
    return w;
}

int main(int argc, char **argv) {
    const char *device = "auto";
    size_t m = 3584, n = 1024;
    br_compress_opts o;
    br_compress_opts_default(&o);
    o.steps = 500;
    o.tokens = 4096;
    o.eval_every = 100;
    o.patience = 0;               /* always the full run */
    o.synthetic = BR_SYNTH_HEAVY; /* channel statistics like activations' */
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--device"))
            device = v;
        else if (!strcmp(k, "--m"))
            m = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--n"))
            n = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--steps"))
            o.steps = atoi(v);
        else if (!strcmp(k, "--tokens"))
            o.tokens = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--bpw"))
            o.bpw = atof(v);
        else if (!strcmp(k, "--paths"))
            o.paths = strtoull(v, NULL, 10);
        else {
            fprintf(stderr, "bench_compress: unknown option %s\n", k);
            return 2;
        }
    }
    br_ctx *ctx = NULL;
    char err[256];
    if (br_ctx_new(device, &ctx, err, sizeof err) != BR_OK) {
        fprintf(stderr, "bench_compress: %s\n", err);
        return 1;
    }
    float *w = make_weight(m, n, 1);
    size_t rank = 0;
    if (!w || br_compress_rank(ctx, "bench", m, n, o.paths, o.bpw, &rank) != BR_OK) {
        fprintf(stderr, "bench_compress: %s\n", w ? br_ctx_error(ctx) : "out of memory");
        return 1;
    }
    /* calibration inputs (host generation, not part of the timed job) */
    br_calib_set cs;
    if (br_calib_inputs(ctx, NULL, "bench", n, br_train_pool_tokens(&o), o.eval_tokens, o.seed,
                        NULL, o.synthetic, &cs) != BR_OK) {
        fprintf(stderr, "bench_compress: %s\n", br_ctx_error(ctx));
        return 1;
    }
    /* the initialization alone (on the device where it has one) */
    br_blr_host L;
    br_svid_factors f;
    double t0 = now();
    br_status st = br_layer_host_alloc(ctx, &L, m, n, rank, o.paths);
    if (!st) st = br_svid_factors_alloc(ctx, &f, m, n, rank, o.paths);
    const char *where = "cpu";
    if (!st && strcmp(br_ctx_backend(ctx), "cpu") != 0) {
        st = br_svid_init_device(ctx, w, NULL, 1, &L, &f);
        where = br_ctx_backend(ctx);
        if (st == BR_E_UNSUPPORTED) st = BR_E_DEVICE;
    } else if (!st) {
        st = br_svid_init_host(ctx, w, NULL, NULL, 1, &L, &f);
    }
    double t_init = now() - t0;
    if (st) {
        fprintf(stderr, "bench_compress: init: %s\n", br_ctx_error(ctx));
        return 1;
    }
    br_layer_host_free(&L);
    br_svid_factors_free(&f);
    /* the whole layer: init + teacher outputs + training + evaluations */
    br_train_in in = {cs.x_train, cs.ntrain, cs.x_eval, cs.neval};
    br_layer_report rep;
    memset(&rep, 0, sizeof rep);
    t0 = now();
    st = br_compress_one(ctx, "bench", w, m, n, rank, &in, NULL, &o, &L, &rep, NULL, NULL);
    double t_all = now() - t0;
    if (st) {
        fprintf(stderr, "bench_compress: %s\n", br_ctx_error(ctx));
        return 1;
    }
    printf("{\"bench\":\"compress_layer\",\"device\":\"%s\",\"m\":%zu,\"n\":%zu,\"rank\":%zu,"
           "\"paths\":%zu,\"bpw\":%.4f,\"steps\":%d,\"tokens\":%zu,\"init_on\":\"%s\","
           "\"init_s\":%.3f,\"layer_s\":%.3f,\"target_s\":5.0,\"err_init\":%.4f,"
           "\"err_trained\":%.4f}\n",
           br_ctx_device(ctx), m, n, rank, o.paths, rep.bpw, rep.steps, o.tokens, where, t_init,
           t_all, rep.err_init, rep.err_trained);
    free(rep.loss);
    br_layer_host_free(&L);
    br_calib_free(&cs);
    free(w);
    br_ctx_free(ctx);
    return 0;
}
