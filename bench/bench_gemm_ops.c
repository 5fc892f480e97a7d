/* GEMM benchmark through the op-level API, on any device: the GEMMs a BLR layer
 * step issues, as the layer issues them (br_mm on an f16 plane, br_mm_bits on a sign
 * bitmap stored as rows or as columns, and br_mm_tn, the sign-gradient GEMM with
 * both operands stored k-rows-first), at the four GEMM shapes of a Qwen3.5-0.8B
 * training step (4096 tokens) that bench/bench_gemm.cu measures on CUDA's kernels
 * directly. This one goes through the front-end and the context's backend only, so
 * the same program measures the CPU, CUDA and Vulkan backends side by side.
 *
 *   bench_gemm_ops [--device cpu|cuda|vulkan[:N]] [--runs N] [--quick] [--shape 1..4]
 *                  [--check-only]
 *
 * --quick: the shapes divided by 16 (a smoke test that finishes in seconds on
 * lavapipe); --shape i: only the i-th shape; --check-only: the correctness checks
 * without the timing (the full shapes on a slow device).
 *
 * Before timing, each variant at each shape runs once on random f16 operands (the
 * bitmaps random, the column bitmap the transpose of the row bitmap, the tn
 * operands the transposes of the plain ones, so every variant has one of two
 * references) into an output poisoned with NaN; every output entry must be finite
 * and, on sampled entries (the four corners and 256 random ones), the output must
 * agree with an f64 reference computed here: ‖got − ref‖/‖ref‖ < 3e-3 (the f16
 * operand tolerance of DESIGN.md). A failure is printed, the variant is not timed,
 * and the program exits 1 after the rest.
 *
 * Timing as bench_ops: REPS calls recorded into a graph (a CUDA graph on CUDA, one
 * recorded submission on Vulkan), replayed after 3 warm-up replays; the median over
 * N (default 20) replays of the wall time from launch to sync, divided by REPS.
 * The calls rotate over enough operand sets that one replay touches more than
 * 2 × 60 MB (the H200's L2 is 60 MB), as bench_gemm does, so an operand is not
 * served from the cache of the call before. TFLOP/s = 2·M·N·K / time. One JSON
 * line per measurement on stdout, a table on stderr. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bitrank_ops.h"
#include "core/rng.h"
#include "ops/layer_ops.h"
#include "bench_clock.h"

#define REPS 10
#define SAMPLES 256
#define TOL 3e-3

static br_ctx *g_ctx;
static int g_runs = 20;

static void fail(const char *what) {
    fprintf(stderr, "bench_gemm_ops: %s: %s\n", what, br_ctx_error(g_ctx));
    exit(1);
}
#define OK(call)                                                                                   \
    do {                                                                                           \
        if ((call) != BR_OK) fail(#call);                                                          \
    } while (0)

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "bench_gemm_ops: out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static br_buf *upload(br_dtype dt, const void *host, size_t n) {
    br_buf *b = NULL;
    OK(br_buf_new(g_ctx, dt, n, &b));
    OK(br_buf_upload(b, 0, host, n));
    return b;
}

/* ---------------------------------------------------------------- operands */

/* The host operands of one shape. act f16 [M][K], plane f16 [N][K]; rows u32
 * [N][K/32] (bit kk of row j: the sign of plane_pm1[j][kk], 1 = +1); cols u32
 * [K][ceil(N/32)], the same signs transposed; act_t f16 [K][M] and plane_t f16
 * [K][N], the transposes of act and plane (br_mm_tn's operands). */
typedef struct host_ops {
    size_t m, n, k, ncw; /* ncw: words of a column-bitmap row */
    uint16_t *act, *plane, *act_t, *plane_t;
    uint32_t *rows, *cols;
} host_ops;

static float rand_pm1(br_rng *r) { return (float)(2.0 * br_rng_unit(r) - 1.0); }

static host_ops make_host(br_rng *r, size_t m, size_t n, size_t k) {
    host_ops h = {.m = m, .n = n, .k = k, .ncw = (n + 31) / 32};
    h.act = xmalloc(m * k * sizeof *h.act);
    h.plane = xmalloc(n * k * sizeof *h.plane);
    h.act_t = xmalloc(k * m * sizeof *h.act_t);
    h.plane_t = xmalloc(k * n * sizeof *h.plane_t);
    h.rows = xmalloc(n * (k / 32) * sizeof *h.rows);
    h.cols = calloc(k * h.ncw, sizeof *h.cols);
    if (!h.cols) fail("out of host memory");
    for (size_t i = 0; i < m * k; i++)
        h.act[i] = br_half_from_float(rand_pm1(r));
    for (size_t i = 0; i < n * k; i++)
        h.plane[i] = br_half_from_float(rand_pm1(r));
    for (size_t i = 0; i < m; i++)
        for (size_t kk = 0; kk < k; kk++)
            h.act_t[kk * m + i] = h.act[i * k + kk];
    for (size_t j = 0; j < n; j++)
        for (size_t kk = 0; kk < k; kk++)
            h.plane_t[kk * n + j] = h.plane[j * k + kk];
    for (size_t i = 0; i < n * (k / 32); i++)
        h.rows[i] = (uint32_t)br_rng_u64(r);
    for (size_t j = 0; j < n; j++)
        for (size_t kk = 0; kk < k; kk++)
            if (h.rows[j * (k / 32) + kk / 32] >> (kk % 32) & 1u)
                h.cols[kk * h.ncw + j / 32] |= 1u << (j % 32);
    return h;
}

static void free_host(host_ops *h) {
    free(h->act), free(h->plane), free(h->act_t), free(h->plane_t), free(h->rows), free(h->cols);
}

/* The reference of entry (i, j) in f64: Σ_k act[i][k]·plane[j][k], with the ±1 plane
 * of the bitmap where bits is set. */
static double ref_entry(const host_ops *h, size_t i, size_t j, int bits) {
    double s = 0;
    const uint16_t *a = h->act + i * h->k;
    for (size_t kk = 0; kk < h->k; kk++) {
        double p = bits ? (h->rows[j * (h->k / 32) + kk / 32] >> (kk % 32) & 1u ? 1.0 : -1.0)
                        : (double)br_half_to_float(h->plane[j * h->k + kk]);
        s += (double)br_half_to_float(a[kk]) * p;
    }
    return s;
}

/* ---------------------------------------------------------------- variants */

enum { V_F16, V_BITS_ROWS, V_BITS_COLS, V_TN, V_COUNT };
static const char *const k_variant[V_COUNT] = {"mm_f16", "mm_bits_rows", "mm_bits_cols", "mm_tn"};

/* One operand set on the device (a replay rotates over several). */
typedef struct dev_set {
    br_buf *act, *plane, *rows, *cols, *act_t, *plane_t, *out;
} dev_set;

static void run_variant(int v, const dev_set *s, size_t m, size_t n, size_t k) {
    br_gemm g = {.m = m, .n = n, .k = k, .oscale = 1.0f}; /* plain product, strides 0: dense */
    switch (v) {
    case V_F16: OK(br_mm(g_ctx, s->act, s->plane, s->out, g)); break;
    case V_BITS_ROWS: OK(br_mm_bits(g_ctx, s->act, s->rows, BR_BITS_ROWS, s->out, g)); break;
    case V_BITS_COLS: OK(br_mm_bits(g_ctx, s->act, s->cols, BR_BITS_COLS, s->out, g)); break;
    default: OK(br_mm_tn(g_ctx, s->act_t, s->plane_t, 0, s->out, g)); break;
    }
}

/* The check before timing: one call into a NaN-poisoned output, every entry finite,
 * the sampled entries against the f64 reference. Returns the relative error (NAN
 * when an entry is not finite); *kernel gets the kernel the backend ran. */
static double check_variant(int v, const dev_set *s, const host_ops *h, float *out, char *kernel,
                            size_t kernel_len) {
    const size_t m = h->m, n = h->n;
    OK(br_buf_fill(s->out, 0, m * n, 0x7fc00000u));
    run_variant(v, s, m, n, h->k);
    snprintf(kernel, kernel_len, "%s", br_ctx_last_kernel(g_ctx));
    OK(br_ctx_sync(g_ctx));
    OK(br_buf_download(s->out, 0, out, m * n));
    size_t bad = 0;
    for (size_t i = 0; i < m * n; i++)
        bad += !isfinite(out[i]);
    if (bad) {
        fprintf(stderr, "FAIL %s at %zu x %zu x %zu: %zu of %zu outputs not finite (unwritten?)\n",
                k_variant[v], m, n, h->k, bad, m * n);
        return NAN;
    }
    /* fixed corners (tile edges) and random entries from a stream of their own */
    br_rng r;
    br_rng_seed(&r, 0x5eed + m * 31 + n * 7 + h->k);
    double num = 0, den = 0;
    for (size_t q = 0; q < SAMPLES + 4; q++) {
        size_t i, j;
        if (q < 4) {
            i = q & 1 ? m - 1 : 0;
            j = q & 2 ? n - 1 : 0;
        } else {
            i = (size_t)(br_rng_unit(&r) * (double)m);
            j = (size_t)(br_rng_unit(&r) * (double)n);
        }
        const double ref = ref_entry(h, i, j, v == V_BITS_ROWS || v == V_BITS_COLS);
        const double d = (double)out[i * n + j] - ref;
        num += d * d;
        den += ref * ref;
    }
    const double err = sqrt(num / (den > 0 ? den : 1));
    if (!(err < TOL))
        fprintf(stderr, "FAIL %s at %zu x %zu x %zu: rel err %.3g on sampled entries (tol %.0e)\n",
                k_variant[v], m, n, h->k, err, TOL);
    return err;
}

/* Median ms of one call of variant v: graph replays of REPS calls over the sets. */
static double time_variant(int v, const dev_set *sets, int nsets, size_t m, size_t n, size_t k) {
    br_graph *g = NULL;
    OK(br_graph_begin(g_ctx));
    for (int i = 0; i < REPS; i++)
        run_variant(v, &sets[i % nsets], m, n, k);
    OK(br_graph_end(g_ctx, &g));
    for (int i = 0; i < 3; i++)
        OK(br_graph_launch(g));
    OK(br_ctx_sync(g_ctx));
    double *t = xmalloc((size_t)g_runs * sizeof *t);
    for (int i = 0; i < g_runs; i++) {
        double t0 = bench_now_ms();
        OK(br_graph_launch(g));
        OK(br_ctx_sync(g_ctx));
        t[i] = (bench_now_ms() - t0) / REPS;
    }
    qsort(t, (size_t)g_runs, sizeof *t, bench_cmp_double);
    double med = t[g_runs / 2];
    free(t);
    br_graph_free(g);
    return med;
}

/* ---------------------------------------------------------------- one shape */

typedef struct result {
    double ms, tflops, err;
    int ok;
} result;

static void bench_shape(br_rng *r, size_t m, size_t n, size_t k, int check_only, int quick,
                        result res[V_COUNT], int *failures) {
    host_ops h = make_host(r, m, n, k);
    /* the bytes one call must touch (f16 act, f32 out); sets enough that a replay's
     * REPS calls cover 2 × 60 MB (--quick: 2, the point there is the program) */
    const double set_bytes = (double)m * (double)k * 2 + (double)m * (double)n * 4;
    int nsets = quick || check_only ? (check_only ? 1 : 2) : (int)ceil(120e6 / set_bytes) + 1;
    if (nsets < 1) nsets = 1;
    if (nsets > REPS) nsets = REPS;
    dev_set *sets = calloc((size_t)nsets, sizeof *sets);
    if (!sets) fail("out of host memory");
    for (int i = 0; i < nsets; i++) {
        sets[i].act = upload(BR_F16, h.act, m * k);
        sets[i].plane = upload(BR_F16, h.plane, n * k);
        sets[i].rows = upload(BR_U32, h.rows, n * (k / 32));
        sets[i].cols = upload(BR_U32, h.cols, k * h.ncw);
        sets[i].act_t = upload(BR_F16, h.act_t, k * m);
        sets[i].plane_t = upload(BR_F16, h.plane_t, k * n);
        OK(br_buf_new(g_ctx, BR_F32, m * n, &sets[i].out));
    }
    float *out = xmalloc(m * n * sizeof *out);
    const double flop = 2.0 * (double)m * (double)n * (double)k;
    for (int v = 0; v < V_COUNT; v++) {
        char kernel[128];
        result *x = &res[v];
        *x = (result){.err = check_variant(v, &sets[0], &h, out, kernel, sizeof kernel)};
        x->ok = x->err < TOL;
        if (!x->ok) {
            ++*failures;
            continue;
        }
        if (check_only) {
            fprintf(stderr, "ok %-13s %zu x %zu x %zu  rel err %.3g  (%s)\n", k_variant[v], m, n, k,
                    x->err, kernel);
            continue;
        }
        x->ms = time_variant(v, sets, nsets, m, n, k);
        x->tflops = flop / (x->ms * 1e-3) / 1e12;
        printf("{\"bench\":\"gemm_ops\",\"device\":\"%s\",\"m\":%zu,\"n\":%zu,\"k\":%zu,"
               "\"variant\":\"%s\",\"kernel\":\"%s\",\"ms\":%.5f,\"tflops\":%.3f,"
               "\"rel_err\":%.3g,\"runs\":%d,\"reps\":%d,\"sets\":%d}\n",
               br_ctx_device(g_ctx), m, n, k, k_variant[v], kernel, x->ms, x->tflops, x->err,
               g_runs, REPS, nsets);
        fflush(stdout);
    }
    free(out);
    for (int i = 0; i < nsets; i++) {
        br_buf_free(sets[i].act), br_buf_free(sets[i].plane), br_buf_free(sets[i].rows);
        br_buf_free(sets[i].cols), br_buf_free(sets[i].act_t), br_buf_free(sets[i].plane_t);
        br_buf_free(sets[i].out);
    }
    free(sets);
    free_host(&h);
}

int main(int argc, char **argv) {
    const char *device = "cuda";
    int quick = 0, check_only = 0, only = 0, runs_given = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = argv[++i];
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc && atoi(argv[i + 1]) >= 3)
            g_runs = atoi(argv[++i]), runs_given = 1;
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--check-only"))
            check_only = 1;
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc && atoi(argv[i + 1]) >= 1 &&
                 atoi(argv[i + 1]) <= 4)
            only = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_gemm_ops [--device cpu|cuda|vulkan[:N]] "
                            "[--runs N (>= 3)] [--quick] [--shape 1..4] [--check-only]\n");
            return 2;
        }
    }
    char err[256];
    if (br_ctx_new(device, &g_ctx, err, sizeof err) != BR_OK) {
        fprintf(stderr, "bench_gemm_ops: cannot open %s: %s\n", device, err);
        return 1;
    }
    if (quick && !runs_given) g_runs = 3;
    /* (M, N, K): the layer step's GEMMs at 4096 tokens, as bench_gemm.cu has them */
    static const size_t shapes[4][3] = {
        {4096, 3584, 1024}, {4096, 1024, 3584}, {3584, 1024, 4096}, {4096, 6144, 1024}};
    const size_t div = quick ? 16 : 1; /* every K stays a multiple of 32 */
    br_rng r;
    br_rng_seed(&r, (uint64_t)time(NULL));
    result res[4][V_COUNT];
    memset(res, 0, sizeof res);
    int failures = 0;
    fprintf(stderr, "bench_gemm_ops on %s (%s backend)\n", br_ctx_device(g_ctx),
            br_ctx_backend(g_ctx));
    for (int s = 0; s < 4; s++) {
        if (only && s != only - 1) continue;
        bench_shape(&r, shapes[s][0] / div, shapes[s][1] / div, shapes[s][2] / div, check_only,
                    quick, res[s], &failures);
    }
    if (!check_only) {
        fprintf(stderr, "\nTFLOP/s (2·M·N·K / median time of %d replays of %d calls) and ms\n",
                g_runs, REPS);
        fprintf(stderr, "%-18s", "M,N,K");
        for (int v = 0; v < V_COUNT; v++)
            fprintf(stderr, " %21s", k_variant[v]);
        fprintf(stderr, "\n");
        for (int s = 0; s < 4; s++) {
            if (only && s != only - 1) continue;
            char shape[48];
            snprintf(shape, sizeof shape, "%zu,%zu,%zu", shapes[s][0] / div, shapes[s][1] / div,
                     shapes[s][2] / div);
            fprintf(stderr, "%-18s", shape);
            for (int v = 0; v < V_COUNT; v++) {
                if (res[s][v].ok)
                    fprintf(stderr, " %9.3f (%7.3f ms)", res[s][v].tflops, res[s][v].ms);
                else
                    fprintf(stderr, " %21s", "FAILED");
            }
            fprintf(stderr, "\n");
        }
    }
    br_ctx_free(g_ctx);
    if (failures) {
        fprintf(stderr, "bench_gemm_ops: %d correctness failures\n", failures);
        return 1;
    }
    return 0;
}
