/* CPU inference of a BLR linear (br_blr_infer) beside OpenBLAS on the dense f32 W
 * of the same shape: cblas_sgemv for 1 token, cblas_sgemm for several.
 *
 *   bench_infer_cpu [--runs N] [--kernel auto|portable] [--cold] [--quick]
 *
 * Shapes [m][n]: 4096×4096, 11008×4096, 4096×11008; 2 paths at 1.0, 0.55 and 0.1
 * bits per weight (the rank br_compress_rank gives); 1 and 16 tokens. Threads: the
 * library's OpenMP team (OMP_NUM_THREADS) and OpenBLAS's are set to the same count;
 * all BLR runs come before the first BLAS call (see main).
 * Each measurement: 5 warm-up runs, then N (default 50) runs each timed alone; the
 * median (and the minimum), in ms. --cold: before each timed run, 64 MB of other data are read so
 * that the layer's signs (or W) come from memory, not from the caches (a model's
 * layers are used one after another); by default the data stay cached between
 * runs, which only the BLR layer (a few MB) can use.
 *
 * Bytes read a run: BLR P·(m + n)·r/8 of signs + 4·P·(m + n + r) of scales; dense
 * 4·m·n; both + 4·ntok·(n + m) of x and y. GB/s = those bytes / the median time.
 * One line per measurement; the ratio is the dense median over the BLR median. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bitrank.h"
#include "core/rng.h"
#include "bench_clock.h"

#ifdef BR_HAVE_CBLAS
#include <cblas.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

static br_ctx *g_ctx;

static void fail(const char *what) {
    fprintf(stderr, "bench_infer_cpu: %s: %s\n", what, br_ctx_error(g_ctx));
    exit(1);
}
#define OK(call)                                                                                   \
    do {                                                                                           \
        if ((call) != BR_OK) fail(#call);                                                          \
    } while (0)

static void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) fail("out of host memory");
    return p;
}

/* Reading this evicts the layer from the caches (--cold). */
#define EVICT_BYTES ((size_t)64 << 20)
static float *g_evict;
static volatile float g_sink;
static void evict(void) {
    float s = 0;
    for (size_t i = 0; i < EVICT_BYTES / sizeof(float); i += 16)
        s += g_evict[i];
    g_sink = s;
}

typedef void (*run_fn)(void *arg);

/* The median of `runs` timed runs after 5 untimed ones; *min_ms their minimum. */
static double median_ms(run_fn fn, void *arg, int runs, int cold, double *min_ms) {
    double *t = xmalloc((size_t)runs * sizeof *t);
    for (int i = 0; i < 5; i++)
        fn(arg);
    for (int i = 0; i < runs; i++) {
        if (cold) evict();
        double t0 = bench_now_ms();
        fn(arg);
        t[i] = bench_now_ms() - t0;
    }
    qsort(t, (size_t)runs, sizeof *t, bench_cmp_double);
    *min_ms = t[0];
    double med = runs % 2 ? t[runs / 2] : 0.5 * (t[runs / 2 - 1] + t[runs / 2]);
    free(t);
    return med;
}

typedef struct blr_job {
    br_blr_infer *plan;
    const float *x, *bias;
    float *y;
    size_t ntok;
} blr_job;
static void run_blr(void *arg) {
    blr_job *j = arg;
    OK(br_blr_infer_run(j->plan, j->x, j->ntok, j->bias, j->y));
}

#ifdef BR_HAVE_CBLAS
typedef struct dense_job {
    const float *w, *x;
    float *y;
    size_t m, n, ntok;
} dense_job;
static void run_dense(void *arg) {
    dense_job *j = arg;
    if (j->ntok == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)j->m, (int)j->n, 1.0f, j->w, (int)j->n, j->x,
                    1, 0.0f, j->y, 1);
    else /* y [ntok][m] = x [ntok][n] · Wᵀ */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->ntok, (int)j->m, (int)j->n,
                    1.0f, j->x, (int)j->n, j->w, (int)j->n, 0.0f, j->y, (int)j->m);
}
#endif

static br_blr_host random_layer(br_rng *rng, size_t m, size_t n, size_t r, size_t P) {
    br_blr_host L;
    OK(br_blr_host_alloc(g_ctx, &L, m, n, r, P));
    size_t w = (r + 31) / 32;
    for (size_t p = 0; p < P; p++) {
        br_blr_path_host *ph = &L.path[p];
        for (size_t i = 0; i < m * w; i++)
            ph->bits_u[i] = (uint32_t)br_rng_u64(rng);
        for (size_t i = 0; i < n * w; i++)
            ph->bits_v[i] = (uint32_t)br_rng_u64(rng);
        for (size_t i = 0; i < m; i++)
            ph->h[i] = br_rng_sym(rng) * 0.05f;
        for (size_t k = 0; k < r; k++)
            ph->l[k] = 0.5f + br_rng_sym(rng) * 0.4f;
        for (size_t j = 0; j < n; j++)
            ph->g[j] = br_rng_sym(rng) * 0.02f;
    }
    return L;
}

int main(int argc, char **argv) {
    int runs = 50, cold = 0, quick = 0;
    br_infer_kernel kernel = BR_INFER_AUTO;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            runs = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--kernel") && i + 1 < argc) {
            const char *k = argv[++i];
            kernel = !strcmp(k, "portable") ? BR_INFER_PORTABLE : BR_INFER_AUTO;
        } else if (!strcmp(argv[i], "--cold")) {
            cold = 1;
        } else if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else {
            fprintf(stderr, "usage: bench_infer_cpu [--runs N] [--kernel auto|portable] [--cold] "
                            "[--quick]\n");
            return 2;
        }
    }
    if (runs < 5) runs = 5;
    char err[256];
    if (br_ctx_new("cpu", &g_ctx, err, sizeof err) != BR_OK) {
        fprintf(stderr, "bench_infer_cpu: %s\n", err);
        return 1;
    }
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    g_evict = xmalloc(EVICT_BYTES);
    for (size_t i = 0; i < EVICT_BYTES / sizeof(float); i++)
        g_evict[i] = (float)(i & 1023);

    static const size_t shapes[][2] = {{4096, 4096}, {11008, 4096}, {4096, 11008}};
    static const double bpws[] = {1.0, 0.55, 0.1};
    static const size_t toks[] = {1, 16};
    enum { NS = 3, NB = 3, NT = 2 };
    const size_t P = 2, max_tok = 16;
    size_t n_shapes = quick ? 1 : NS, n_bpw = quick ? 1 : NB;
    br_rng rng;
    br_rng_seed(&rng, 1);
    float *x = xmalloc(max_tok * 11008 * sizeof *x), *y = xmalloc(max_tok * 11008 * sizeof *y);
    float *bias = xmalloc(11008 * sizeof *bias);
    for (size_t i = 0; i < max_tok * 11008; i++)
        x[i] = br_rng_sym(&rng);
    for (size_t i = 0; i < 11008; i++)
        bias[i] = br_rng_sym(&rng) * 0.1f;
    /* every BLR run first, then every BLAS run: OpenBLAS's threads spin for a while
     * after each call, and would take the cores from the next OpenMP team */
    double blr_ms[NS][NB][NT], blas_ms[NS][NT] = {{0}}, blr_min[NS][NB][NT],
                               blas_min[NS][NT] = {{0}};
    size_t rank[NS][NB];
    const char *kname = "";
    for (size_t s = 0; s < n_shapes; s++)
        for (size_t b = 0; b < n_bpw; b++) {
            size_t m = shapes[s][0], n = shapes[s][1];
            OK(br_compress_rank(g_ctx, "bench", m, n, P, bpws[b], &rank[s][b]));
            br_blr_host L = random_layer(&rng, m, n, rank[s][b], P);
            br_blr_infer *plan = NULL;
            OK(br_blr_infer_new(g_ctx, &L, &plan));
            OK(br_blr_infer_set_kernel(plan, kernel));
            br_blr_host_free(&L);
            kname = br_blr_infer_kernel(plan);
            for (size_t t = 0; t < NT; t++) {
                blr_job bj = {plan, x, bias, y, toks[t]};
                blr_ms[s][b][t] = median_ms(run_blr, &bj, runs, cold, &blr_min[s][b][t]);
            }
            br_blr_infer_free(plan);
        }
#ifdef BR_HAVE_CBLAS
    /* only now: setting OpenBLAS's thread count wakes its threads, which then spin
     * beside an OpenMP team that spins too (OMP_WAIT_POLICY=active) and starve it */
    openblas_set_num_threads(threads);
    for (size_t s = 0; s < n_shapes; s++) {
        size_t m = shapes[s][0], n = shapes[s][1];
        float *w = xmalloc(m * n * sizeof *w);
        for (size_t i = 0; i < m * n; i++)
            w[i] = br_rng_sym(&rng) * 0.02f;
        for (size_t t = 0; t < NT; t++) {
            dense_job dj = {w, x, y, m, n, toks[t]};
            blas_ms[s][t] = median_ms(run_dense, &dj, runs, cold, &blas_min[s][t]);
        }
        free(w);
    }
#endif
    printf("threads %d (OpenMP and OpenBLAS), %d runs, %s caches, kernel %s\n", threads, runs,
           cold ? "cold" : "warm", kname);
    printf("%-11s %5s %5s %4s %8s %8s %8s %8s %6s %7s %8s %9s\n", "shape", "bpw", "rank", "tok",
           "blr_ms", "(min)", "blas_ms", "(min)", "ratio", "blr_MB", "blr_GB/s", "blas_GB/s");
    for (size_t s = 0; s < n_shapes; s++)
        for (size_t b = 0; b < n_bpw; b++)
            for (size_t t = 0; t < NT; t++) {
                size_t m = shapes[s][0], n = shapes[s][1], r = rank[s][b], ntok = toks[t];
                double ms = blr_ms[s][b][t], dms = blas_ms[s][t];
                double io = 4.0 * (double)ntok * (double)(n + m);
                double blr_bytes = (double)P * (double)(m + n) * (double)r / 8 +
                                   4.0 * (double)P * (double)(m + n + r) + io;
                double dense_bytes = 4.0 * (double)m * (double)n + io;
                char shape[32];
                snprintf(shape, sizeof shape, "%zux%zu", m, n);
                printf("%-11s %5.2f %5zu %4zu %8.3f %8.3f %8.3f %8.3f %6.2f %7.2f %8.2f %9.2f\n",
                       shape, br_blr_bpw(m, n, r, P), r, ntok, ms, blr_min[s][b][t], dms,
                       dms > 0 ? blas_min[s][t] : 0.0, dms > 0 ? dms / ms : 0.0, blr_bytes / 1e6,
                       blr_bytes / ms / 1e6, dms > 0 ? dense_bytes / dms / 1e6 : 0.0);
            }
    free(x);
    free(y);
    free(bias);
    free(g_evict);
    br_ctx_free(g_ctx);
    return 0;
}
