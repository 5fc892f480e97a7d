/* The BLR layer training step: forward, loss gradient, backward with the sign
 * gradients, the sign optimizer and Adam over the scales — recorded once as a graph
 * and replayed, at the shapes of a Qwen3.5-0.8B-like step (4096 tokens, 2 paths).
 *
 *   bench_layer [--device cuda|cpu|vulkan[:N]] [--runs N] [--mode latent|factored|exact|off]
 *               [--dx] [--quick] [--profile] [--shape 1|2|3] [--residual] [--stage-x]
 *               [--target-f32]
 * --profile: after timing, three eager (not graph) steps under the op profiler,
 * its table on stderr: where a step's time goes, op by op.
 *
 * Per shape: a random layer and target, then the step: dy = (y − y*)/N straight
 * from the forward, staged for the backward in the output GEMM's epilogue
 * (the loss forward, no f32 dy; --residual: the residual forward writes dy in
 * f32 and the backward stages it: the older, unfused form), the backward, the
 * optimizer. x is a fixed batch (as the compress job's calibration batches and the
 * PyTorch reference's resident bf16 x are): staged once by br_blr_stage before the
 * graph is recorded, and the step's loss forward reads it (--stage-x: the
 * step stages x itself, the earlier definition). The target y* is
 * held in f16, as the PyTorch reference holds it in bf16 (--target-f32: in f32, the
 * earlier definition; the same values either way). 5 warm-up replays, then N
 * (default 20, at least 20) replays each timed by device timers (CUDA events) around the launch;
 * the median and the minimum in ms.
 * --dx also forms the input gradient (a layer inside a network needs it; the
 * PyTorch reference of bench/torch_layer.py does not, x has no grad there).
 * One JSON line per measurement on stdout.
 *
 * Floors printed beside the time (T tokens, P paths, R = P·r):
 *   flop  = 2·T·R·(2n + 3m) [+ 2·T·R·n with --dx]: the GEMMs of the step,
 *           A = x·W_Vᵀ [T][R] (2TnR, one GEMM for all paths), out = A'·S_Uᵀ per path
 *           (2TRm), B = dy·W_Uᵀ [T][R] (2TmR, one GEMM), M_U = dyᵀ·A' [m][R] (2mRT),
 *           N_V = xᵀ·B' [n][R] (2nRT) [, dx = B'·S_Vᵀ per path (2TRn)];
 *           everything else is O(T·(m+n+R)) (staging, expand, colsum, rowdot).
 *   bytes = 4·T·n + 2·T·m  (read x once in f32, or its f16 staging and transpose
 *           once each; y* once in f16; 4·T·m with --target-f32 or --residual)
 *         + P·(m+n)·r·(24 latent: Λ, m1, v read and written, f32 | 16 factored:
 *           Λ, m1 | 0 exact, off) + P·(m+n)·r/4 (bitmaps read and written)
 *           [+ 4·T·n written for dx with --dx]
 *   floor_ms = max(flop / 630 TFLOP/s, bytes / 4.2 TB/s): the H200's best measured
 *           f16 GEMM rate (cuBLAS, 8192³) and device copy rate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bitrank.h"
#include "core/backend.h"
#include "core/rng.h"
#include "bench_clock.h"

static br_ctx *g_ctx;

static void fail(const char *what) {
    fprintf(stderr, "bench_layer: %s: %s\n", what, br_ctx_error(g_ctx));
    exit(1);
}
#define OK(call)                                                                                   \
    do {                                                                                           \
        if ((call) != BR_OK) fail(#call);                                                          \
    } while (0)

static br_buf *upload(br_dtype dt, const void *host, size_t n) {
    br_buf *b = NULL;
    OK(br_buf_new(g_ctx, dt, n, &b));
    OK(br_buf_upload(b, 0, host, n));
    return b;
}

static float *rand_f32(br_rng *rng, size_t n, float lo, float hi) {
    float *v = malloc(n * sizeof *v);
    if (!v) fail("out of host memory");
    for (size_t i = 0; i < n; i++)
        v[i] = lo + (hi - lo) * (float)br_rng_unit(rng);
    return v;
}

static int g_profile, g_residual, g_stage_x, g_target_f32;
static br_buf *g_x16; /* x staged once (unless --stage-x) */

/* One training step: forward with the loss gradient, backward, (optimizer: caller). */
static void step(br_blr *l, br_blr_scratch *s, br_buf *bx, br_buf *bys, br_buf *bys16, float inv,
                 br_buf *bdy, br_buf *bdx, size_t T) {
    /* |dy| ~ 1/(T·m) ≈ 7e-8: gs = 2^24 lifts dy out of the f16 subnormals */
    const float gs = 16777216.0f;
    if (g_residual) {
        br_blr_fwd f = {.x = bx, .target = bys, .alpha = inv, .out = bdy, .ntok = T};
        OK(br_blr_forward(l, s, &f));
        OK(br_blr_backward(l, s, bx, bdy, bdx, T, gs, 0));
    } else {
        const br_buf *target = g_target_f32 ? bys : bys16;
        br_blr_fwd f = {.x = g_stage_x ? bx : NULL,
                        .x16 = g_stage_x ? NULL : g_x16,
                        .target = target,
                        .alpha = inv,
                        .gscale = gs,
                        .ntok = T};
        OK(br_blr_forward(l, s, &f));
        OK(br_blr_backward(l, s, bx, NULL, bdx, T, gs, 0));
    }
}

/* Device timer slots of this program (above the profiler's). */
#define SLOT0 4000

static void bench_shape(size_t m, size_t n, size_t r, size_t P, size_t T, br_sign_mode mode,
                        int factored, int with_dx, int runs, const char *mode_name) {
    br_rng rng;
    br_rng_seed(&rng, 1234 + m * 7 + n);
    unsigned flags = mode == BR_SIGN_EXACT ? BR_BLR_CURVATURE : mode ? BR_BLR_SIGN_GRADS : 0;
    br_blr *l = NULL;
    OK(br_blr_new(g_ctx, m, n, r, P, flags, &l));
    size_t w = r / 32;
    uint32_t *bu = malloc(m * w * 4), *bv = malloc(n * w * 4);
    if (!bu || !bv) fail("out of host memory");
    for (size_t p = 0; p < P; p++) {
        for (size_t i = 0; i < m * w; i++)
            bu[i] = (uint32_t)br_rng_u64(&rng);
        for (size_t i = 0; i < n * w; i++)
            bv[i] = (uint32_t)br_rng_u64(&rng);
        float *h = rand_f32(&rng, m, 0.01f, 0.05f), *lv = rand_f32(&rng, r, 0.5f, 1.5f);
        float *g = rand_f32(&rng, n, 0.05f, 0.2f);
        OK(br_blr_set_path(l, p, bu, bv, h, lv, g));
        free(h), free(lv), free(g);
    }
    free(bu), free(bv);
    float *x = rand_f32(&rng, T * n, -1.0f, 1.0f), *ys = rand_f32(&rng, T * m, -1.0f, 1.0f);
    uint16_t *ys16 = malloc(T * m * sizeof *ys16);
    if (!ys16) fail("out of host memory");
    for (size_t i = 0; i < T * m; i++) { /* one target, either way held */
        ys16[i] = br_half_from_float(ys[i]);
        ys[i] = br_half_to_float(ys16[i]);
    }
    br_buf *bx = upload(BR_F32, x, T * n), *bys = upload(BR_F32, ys, T * m);
    br_buf *bys16 = upload(BR_F16, ys16, T * m);
    free(x), free(ys), free(ys16);
    float inv = 1.0f / (float)(T * m);
    OK(br_buf_new(g_ctx, BR_F16, br_pad_rows(T) * br_blr_stage_cols(l), &g_x16));
    OK(br_blr_stage(l, bx, g_x16, T));
    br_buf *bdy = NULL, *bdx = NULL;
    OK(br_buf_new(g_ctx, BR_F32, T * m, &bdy));
    if (with_dx) OK(br_buf_new(g_ctx, BR_F32, T * n, &bdx));
    br_blr_scratch *s = NULL;
    OK(br_blr_scratch_new(l, T, NULL, &s));
    br_opt_cfg cfg = br_opt_defaults();
    cfg.sign_mode = mode;
    cfg.sign_factored = factored;
    cfg.curvature = inv;
    if (mode == BR_SIGN_EXACT) cfg.flip_budget = 1e-3f;
    br_blr_opt *o = NULL;
    OK(br_blr_opt_new(l, &cfg, &o));

    br_graph *gr = NULL;
    OK(br_graph_begin(g_ctx));
    step(l, s, bx, bys, bys16, inv, bdy, bdx, T);
    OK(br_blr_opt_step(o));
    OK(br_graph_end(g_ctx, &gr));
    for (int i = 0; i < 5; i++)
        OK(br_graph_launch(gr));
    OK(br_ctx_sync(g_ctx));
    double *t = malloc((size_t)runs * sizeof *t);
    for (int i = 0; i < runs; i++) {
        OK(g_ctx->be->timer_mark(g_ctx, SLOT0));
        OK(br_graph_launch(gr));
        OK(g_ctx->be->timer_mark(g_ctx, SLOT0 + 1));
        OK(g_ctx->be->timer_elapsed(g_ctx, SLOT0, SLOT0 + 1, &t[i]));
    }
    qsort(t, (size_t)runs, sizeof *t, bench_cmp_double);
    if (g_profile) {
        OK(br_ctx_set_options(g_ctx, "profile=1"));
        br_profile_reset(g_ctx);
        for (int i = 0; i < 3; i++) {
            step(l, s, bx, bys, bys16, inv, bdy, bdx, T);
            OK(br_blr_opt_step(o));
        }
        fprintf(stderr, "profile of 3 eager steps, (m, n, r, P, T) = (%zu, %zu, %zu, %zu, %zu):\n",
                m, n, r, P, T);
        OK(br_profile_report(g_ctx, stderr));
        OK(br_ctx_set_options(g_ctx, "profile=0"));
    }
    br_step_info info;
    OK(br_blr_opt_info(o, &info));
    uint64_t flips = 0;
    for (size_t i = 0; i < info.nmats; i++)
        flips += info.flips[i];

    double R = (double)P * (double)r;
    double flop = 2.0 * (double)T * R * (double)(2 * n + 3 * m);
    if (with_dx) flop += 2.0 * (double)T * R * (double)n;
    double per_sign = mode == BR_SIGN_LATENT ? (factored ? 16.0 : 24.0) : 0.0;
    const double ybytes = g_target_f32 || g_residual ? 4.0 : 2.0;
    double bytes = 4.0 * (double)T * (double)n + ybytes * (double)T * (double)m +
                   (double)P * (double)(m + n) * (double)r * (per_sign + (mode ? 0.25 : 0.0));
    if (with_dx) bytes += 4.0 * (double)T * (double)n;
    double floor_ms = flop / 630e12 * 1e3, bytes_ms = bytes / 4.2e12 * 1e3;
    if (bytes_ms > floor_ms) floor_ms = bytes_ms;
    double med = t[runs / 2];
    printf(
        "{\"bench\":\"layer_step\",\"device\":\"%s\",\"m\":%zu,\"n\":%zu,\"r\":%zu,\"paths\":%zu,"
        "\"tokens\":%zu,\"mode\":\"%s\",\"dx\":%s,\"dy\":\"%s\",\"x\":\"%s\",\"target\":\"%s\","
        "\"ops\":%zu,\"runs\":%"
        "d,\"median_"
        "ms\":%.4f,"
        "\"min_ms\":%.4f,\"gflop\":%.2f,\"tflops\":%.1f,\"bytes_floor_mb\":%.1f,"
        "\"floor_ms\":%.4f,\"of_floor\":%.2f,\"flips_last_step\":%llu,\"refused\":%d}\n",
        br_ctx_device(g_ctx), m, n, r, P, T, mode_name, with_dx ? "true" : "false",
        g_residual ? "residual" : "staged",
        g_stage_x || g_residual ? "staged each step" : "staged once",
        g_target_f32 || g_residual ? "f32" : "f16", br_graph_op_count(gr), runs, med, t[0],
        flop / 1e9, flop / (med * 1e-3) / 1e12, bytes / 1e6, floor_ms, med / floor_ms,
        (unsigned long long)flips, info.refused);
    fflush(stdout);
    free(t);
    br_graph_free(gr);
    br_blr_opt_free(o);
    br_blr_scratch_free(s);
    br_buf_free(bx), br_buf_free(bys), br_buf_free(bys16), br_buf_free(bdy), br_buf_free(bdx);
    br_buf_free(g_x16);
    g_x16 = NULL;
    br_blr_free(l);
}

int main(int argc, char **argv) {
    const char *device = "cuda", *mode_name = "latent";
    int runs = 20, quick = 0, with_dx = 0, only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = argv[++i];
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mode") && i + 1 < argc)
            mode_name = argv[++i];
        else if (!strcmp(argv[i], "--dx"))
            with_dx = 1;
        else if (!strcmp(argv[i], "--profile"))
            g_profile = 1;
        else if (!strcmp(argv[i], "--stage-x"))
            g_stage_x = 1;
        else if (!strcmp(argv[i], "--target-f32"))
            g_target_f32 = 1;
        else if (!strcmp(argv[i], "--residual"))
            g_residual = 1;
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc && atoi(argv[i + 1]) >= 1 &&
                 atoi(argv[i + 1]) <= 3)
            only = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_layer [--device cuda|cpu|vulkan[:N]] [--runs N] "
                            "[--mode latent|factored|exact|off] [--dx] [--quick] [--profile] "
                            "[--shape 1|2|3] [--residual] [--stage-x] [--target-f32]\n");
            return 2;
        }
    }
    if (runs < 20) runs = 20;
    br_sign_mode mode = BR_SIGN_LATENT;
    int factored = 0;
    if (!strcmp(mode_name, "factored"))
        factored = 1;
    else if (!strcmp(mode_name, "exact"))
        mode = BR_SIGN_EXACT;
    else if (!strcmp(mode_name, "off"))
        mode = BR_SIGN_OFF;
    else if (strcmp(mode_name, "latent")) {
        fprintf(stderr, "bench_layer: unknown mode %s\n", mode_name);
        return 2;
    }
    char err[256];
    if (br_ctx_new(device, &g_ctx, err, sizeof err) != BR_OK) {
        fprintf(stderr, "bench_layer: %s: %s\n", device, err);
        return 1;
    }
    static const size_t shapes[3][5] = {
        {3584, 1024, 384, 2, 4096}, {1024, 3584, 384, 2, 4096}, {6144, 1024, 512, 2, 4096}};
    for (int i = 0; i < 3; i++) {
        if (only && i != only - 1) continue;
        size_t div = quick ? 16 : 1; /* --quick: a smoke test of the program */
        size_t r = shapes[i][2] / div / 32 * 32;
        bench_shape(shapes[i][0] / div, shapes[i][1] / div, r ? r : 32, shapes[i][3],
                    shapes[i][4] / div, mode, factored, with_dx, runs, mode_name);
    }
    br_ctx_free(g_ctx);
    return 0;
}
