/* CPU inference of a BLR linear (br_blr_infer): both kernels against an f64
 * reference written here from the formulas, on fresh random layers (signs, scales of
 * either sign and spread-out magnitudes, garbage in the bits past r) and inputs,
 * outputs poisoned with NaN before each run; odd shapes (r = 1, m, n, r not
 * multiples of 8 or 32), one and two paths, with and without bias, 1 and many
 * tokens. Each result is held to the error bound the header states (computed here
 * from the reference's own quantities) and, for at least 16 outputs and rank 16,
 * to the f16-level tolerance max_i |y_i − y_ref_i| ≤ 2e-3·‖y_ref‖∞ per token. Also: which kernel
 * ran, the same bits for any thread count, non-finite inputs, the f16 run, bad arguments. */
#include "harness.h"
#include "threads.h"

#define TOL_INF 2e-3 /* per token, relative to ‖y_ref‖∞ */
#define U 0x1p-24    /* f32 unit roundoff */

/* Whether this CPU runs the AVX2 kernel, asked independently of the library. */
static int cpu_has_avx2(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

static size_t words_of(size_t r) { return (r + 31) / 32; }
static int sign_bit(const uint32_t *row, size_t k) { return (int)(row[k / 32] >> (k % 32) & 1u); }

/* A value of magnitude exp(N(0, spread)) · scale and random sign, never 0. */
static float spread_value(br_rng *rng, double scale, double spread) {
    double v = scale * exp(spread * br_rng_normal(rng));
    if (v < 1e-30) v = 1e-30;
    return (float)((br_rng_u64(rng) & 1) ? v : -v);
}

/* A random layer: every bit random, also those past r in a row's last word (the
 * plan must ignore them). h ~ 1/√r, g ~ 1/√n, ℓ ~ 1, spread over e^±1. */
static br_blr_host random_layer(br_ctx *ctx, br_rng *rng, size_t m, size_t n, size_t r, size_t P) {
    br_blr_host L;
    CHECK_OK(ctx, br_blr_host_alloc(ctx, &L, m, n, r, P));
    for (size_t p = 0; p < P; p++) {
        br_blr_path_host *ph = &L.path[p];
        for (size_t i = 0; i < m * words_of(r); i++)
            ph->bits_u[i] = (uint32_t)br_rng_u64(rng);
        for (size_t i = 0; i < n * words_of(r); i++)
            ph->bits_v[i] = (uint32_t)br_rng_u64(rng);
        for (size_t i = 0; i < m; i++)
            ph->h[i] = spread_value(rng, 1.0 / sqrt((double)r), 0.7);
        for (size_t k = 0; k < r; k++)
            ph->l[k] = spread_value(rng, 1.0, 0.7);
        for (size_t j = 0; j < n; j++)
            ph->g[j] = spread_value(rng, 1.0 / sqrt((double)n), 0.7);
    }
    return L;
}

static float *random_x(br_rng *rng, size_t count) {
    float *x = t_xmalloc(count * sizeof *x);
    for (size_t i = 0; i < count; i++)
        x[i] = spread_value(rng, 1.0, 0.8);
    return x;
}

/* E(z) of a product S·z of length k (padded to 32) for the kernel (the header's
 * accuracy section), from |z| [k]. */
static double stage_bound(int avx2, const double *zabs, size_t k) {
    double kp = (double)((k + 31) / 32 * 32), l1 = 0;
    for (size_t i = 0; i < k; i++)
        l1 += zabs[i];
    return avx2 ? (1.0 / 16000 + (kp / 16 + 5) * U) * l1 : (kp / 8 + 5) * U * l1;
}

/* y_ref [ntok][m] in f64 and the bound of |y − y_ref| [ntok][m] for the kernel. */
static void reference(const br_blr_host *L, const float *x, size_t ntok, const float *bias,
                      int avx2, double *y_ref, double *bound) {
    size_t m = L->m, n = L->n, r = L->r, w = words_of(r);
    double *a = t_xmalloc(r * sizeof *a), *zabs = t_xmalloc((n > r ? n : r) * sizeof *zabs);
    double *c = t_xmalloc(m * sizeof *c);
    for (size_t t = 0; t < ntok; t++) {
        const float *xt = x + t * n;
        double *yt = y_ref + t * m, *bt = bound + t * m;
        for (size_t i = 0; i < m; i++) {
            yt[i] = bias ? bias[i] : 0.0;
            bt[i] = bias ? 0x1p-22 * fabs((double)bias[i]) : 0.0;
        }
        for (size_t p = 0; p < L->paths; p++) {
            const br_blr_path_host *ph = &L->path[p];
            /* stage 1: a = S_Vᵀ (g ⊙ x) */
            for (size_t k = 0; k < r; k++)
                a[k] = 0;
            for (size_t j = 0; j < n; j++) {
                double z = (double)ph->g[j] * (double)xt[j];
                zabs[j] = fabs(z);
                const uint32_t *row = ph->bits_v + j * w;
                for (size_t k = 0; k < r; k++)
                    a[k] += sign_bit(row, k) ? z : -z;
            }
            double e1 = stage_bound(avx2, zabs, n);
            /* stage 2: c = S_U (ℓ ⊙ a); the kernel's z = ℓ⊙a is off by up to |ℓ|·e1 */
            double l1 = 0;
            for (size_t k = 0; k < r; k++) {
                l1 += fabs((double)ph->l[k]);
                zabs[k] = fabs((double)ph->l[k] * a[k]) + fabs((double)ph->l[k]) * e1;
            }
            double e2 = stage_bound(avx2, zabs, r);
            for (size_t i = 0; i < m; i++) {
                const uint32_t *row = ph->bits_u + i * w;
                double s = 0;
                for (size_t k = 0; k < r; k++)
                    s += sign_bit(row, k) ? (double)ph->l[k] * a[k] : -(double)ph->l[k] * a[k];
                c[i] = s;
                double hi = (double)ph->h[i];
                yt[i] += hi * s;
                bt[i] += fabs(hi) * (e2 + l1 * e1) + 0x1p-22 * fabs(hi * s);
            }
        }
        /* second-order terms (products of two roundings) */
        for (size_t i = 0; i < m; i++)
            bt[i] = bt[i] * 1.001 + 1e-300;
    }
    free(a);
    free(zabs);
    free(c);
}

static float *poisoned(size_t count) {
    float *v = t_xmalloc(count * sizeof *v);
    for (size_t i = 0; i < count; i++)
        memcpy(&v[i], &(uint32_t){T_NAN32}, 4);
    return v;
}

/* The largest ratio of the error to the bound and to ‖y_ref‖∞ a kernel showed. */
static double g_worst_bound[2], g_worst_inf[2];

/* One layer and input through one kernel, checked against the reference. */
static void check_shape(br_ctx *ctx, size_t m, size_t n, size_t r, size_t P, size_t ntok,
                        int with_bias, br_infer_kernel kernel, uint64_t stream) {
    br_rng rng = t_rng_for(stream);
    br_blr_host L = random_layer(ctx, &rng, m, n, r, P);
    float *x = random_x(&rng, ntok * n);
    float *bias = NULL;
    if (with_bias) {
        bias = t_xmalloc(m * sizeof *bias);
        for (size_t i = 0; i < m; i++)
            bias[i] = spread_value(&rng, 0.3, 0.5);
    }
    int avx2 = kernel == BR_INFER_AVX2;
    br_blr_infer *plan = NULL;
    CHECK_OK(ctx, br_blr_infer_new(ctx, &L, &plan));
    CHECK_OK(ctx, br_blr_infer_set_kernel(plan, kernel));
    CHECK(strcmp(br_blr_infer_kernel(plan), avx2 ? "avx2-lut" : "portable") == 0,
          "kernel %s ran, asked %s", br_blr_infer_kernel(plan), avx2 ? "avx2-lut" : "portable");
    float *y = poisoned(ntok * m);
    CHECK_OK(ctx, br_blr_infer_run(plan, x, ntok, bias, y));
    double *y_ref = t_xmalloc(ntok * m * sizeof *y_ref),
           *bound = t_xmalloc(ntok * m * sizeof *bound);
    reference(&L, x, ntok, bias, avx2, y_ref, bound);
    /* The tolerance relative to ‖y_ref‖∞ is a statement about typical data: with
     * fewer than 16 outputs, or a rank below 16 (every output then a combination of
     * a few sums a_k), all outputs of a token can cancel to near 0 together, and no
     * rounded summation keeps an error relative to its result; those shapes are
     * held to the bound alone. */
    const int cancels = m < 16 || r < 16;
    size_t over_bound = 0, first_bad = SIZE_MAX;
    for (size_t t = 0; t < ntok; t++) {
        double ymax = 0, emax = 0;
        for (size_t i = 0; i < m; i++) {
            size_t e = t * m + i;
            double d = fabs((double)y[e] - y_ref[e]);
            if (!(d <= bound[e])) {
                over_bound++;
                if (first_bad == SIZE_MAX) first_bad = e;
            }
            if (d / bound[e] > g_worst_bound[avx2]) g_worst_bound[avx2] = d / bound[e];
            ymax = fabs(y_ref[e]) > ymax ? fabs(y_ref[e]) : ymax;
            emax = d > emax || isnan(d) ? d : emax;
        }
        double rel = emax / (ymax > 1e-30 ? ymax : 1e-30);
        if (!cancels && rel > g_worst_inf[avx2]) g_worst_inf[avx2] = rel;
        CHECK(cancels || rel <= TOL_INF,
              "%s %zux%zu r%zu P%zu token %zu/%zu bias %d: max err %.3g of ‖y‖∞",
              br_blr_infer_kernel(plan), m, n, r, P, t, ntok, with_bias, rel);
    }
    CHECK(over_bound == 0,
          "%s %zux%zu r%zu P%zu ntok %zu: %zu outputs past the bound, first [%zu][%zu]: %.9g vs "
          "%.9g, bound %.3g",
          br_blr_infer_kernel(plan), m, n, r, P, ntok, over_bound,
          first_bad == SIZE_MAX ? 0 : first_bad / m, first_bad == SIZE_MAX ? 0 : first_bad % m,
          first_bad == SIZE_MAX ? 0.0 : (double)y[first_bad],
          first_bad == SIZE_MAX ? 0.0 : y_ref[first_bad],
          first_bad == SIZE_MAX ? 0.0 : bound[first_bad]);
    br_blr_infer_free(plan);
    br_blr_host_free(&L);
    free(x);
    free(bias);
    free(y);
    free(y_ref);
    free(bound);
}

/* m, n, r, paths, ntok, bias: odd sizes first, then the sizes of a real layer */
static const size_t SHAPES[][6] = {
    {1, 1, 1, 1, 1, 0},       {1, 1, 1, 2, 3, 1},        {7, 5, 3, 2, 1, 1},
    {33, 65, 31, 2, 3, 0},    {64, 96, 32, 1, 9, 1},     {100, 70, 20, 2, 17, 1},
    {31, 257, 1, 1, 2, 0},    {130, 33, 45, 2, 8, 1},    {9, 40, 33, 1, 1, 1},
    {256, 384, 64, 2, 16, 0}, {384, 1536, 200, 2, 5, 1}, {1000, 1000, 250, 2, 2, 1},
};
#define N_SHAPES (sizeof SHAPES / sizeof SHAPES[0])
#define N_RANDOM 12

static void check_kernel(br_infer_kernel kernel, uint64_t stream) {
    br_ctx *ctx = t_cpu_ctx();
    br_rng rng = t_rng_for(stream);
    for (size_t i = 0; i < N_SHAPES + N_RANDOM; i++) {
        size_t m, n, r, P, ntok, bias;
        if (i < N_SHAPES) {
            m = SHAPES[i][0], n = SHAPES[i][1], r = SHAPES[i][2], P = SHAPES[i][3];
            ntok = SHAPES[i][4], bias = SHAPES[i][5];
        } else {
            m = t_rand_size(&rng, 1, 300), n = t_rand_size(&rng, 1, 300);
            r = t_rand_size(&rng, 1, 130), P = t_rand_size(&rng, 1, 2);
            ntok = t_rand_size(&rng, 1, 20), bias = t_rand_size(&rng, 0, 1);
        }
        check_shape(ctx, m, n, r, P, ntok, (int)bias, kernel, stream * 1000 + i);
    }
    br_ctx_free(ctx);
}

static void portable_against_f64(void) {
    check_kernel(BR_INFER_PORTABLE, 1);
    fprintf(stderr, "  portable: worst error %.3g of the bound, %.3g of ‖y_ref‖∞\n",
            g_worst_bound[0], g_worst_inf[0]);
}

static void avx2_against_f64(void) {
    if (!cpu_has_avx2()) {
        fprintf(stderr, "  skipped: this CPU has no AVX2 and FMA\n");
        return;
    }
    check_kernel(BR_INFER_AVX2, 2);
    fprintf(stderr, "  avx2-lut: worst error %.3g of the bound, %.3g of ‖y_ref‖∞\n",
            g_worst_bound[1], g_worst_inf[1]);
}

/* A layer of the size the benchmark targets (4096×4096, 1 bpw, 2 paths): the
 * tolerance is hardest to meet at long products. */
static void large_layer_against_f64(void) {
    br_ctx *ctx = t_cpu_ctx();
    g_worst_bound[0] = g_worst_bound[1] = g_worst_inf[0] = g_worst_inf[1] = 0;
    check_shape(ctx, 4096, 4096, 1006, 2, 2, 1, BR_INFER_PORTABLE, 3);
    if (cpu_has_avx2()) check_shape(ctx, 4096, 4096, 1006, 2, 2, 1, BR_INFER_AVX2, 3);
    fprintf(stderr,
            "  4096x4096 r1006: portable %.3g of the bound, %.3g of ‖y_ref‖∞; avx2-lut %.3g, "
            "%.3g\n",
            g_worst_bound[0], g_worst_inf[0], g_worst_bound[1], g_worst_inf[1]);
    br_ctx_free(ctx);
}

/* A new plan picks AVX2 where the CPU has it; the choice can be changed back. */
static void kernel_choice(void) {
    br_ctx *ctx = t_cpu_ctx();
    br_rng rng = t_rng_for(4);
    br_blr_host L = random_layer(ctx, &rng, 40, 50, 10, 2);
    br_blr_infer *plan = NULL;
    CHECK_OK(ctx, br_blr_infer_new(ctx, &L, &plan));
    const char *want = cpu_has_avx2() ? "avx2-lut" : "portable";
    CHECK(strcmp(br_blr_infer_kernel(plan), want) == 0, "new plan: %s, expected %s",
          br_blr_infer_kernel(plan), want);
    CHECK_OK(ctx, br_blr_infer_set_kernel(plan, BR_INFER_PORTABLE));
    CHECK(strcmp(br_blr_infer_kernel(plan), "portable") == 0, "forced: %s",
          br_blr_infer_kernel(plan));
    if (cpu_has_avx2()) {
        CHECK_OK(ctx, br_blr_infer_set_kernel(plan, BR_INFER_AVX2));
        CHECK(strcmp(br_blr_infer_kernel(plan), "avx2-lut") == 0, "%s", br_blr_infer_kernel(plan));
    } else {
        fprintf(stderr, "  this CPU has no AVX2: asking for it must fail\n");
        CHECK_FAILS_MSG(ctx, BR_E_UNSUPPORTED, "AVX2",
                        br_blr_infer_set_kernel(plan, BR_INFER_AVX2));
    }
    CHECK_OK(ctx, br_blr_infer_set_kernel(plan, BR_INFER_AUTO));
    CHECK(strcmp(br_blr_infer_kernel(plan), want) == 0, "auto: %s", br_blr_infer_kernel(plan));
    br_blr_infer_free(plan);
    br_blr_host_free(&L);
    br_ctx_free(ctx);
}

/* The same bits for 1, 2 and 3 OpenMP threads, both kernels, at a size that runs
 * in parallel. */
static void threads_same_bits(void) {
#ifdef _OPENMP
    int prev = omp_get_max_threads();
#else
    int prev = 1;
#endif
    br_ctx *ctx = t_cpu_ctx();
    br_rng rng = t_rng_for(5);
    size_t m = 300, n = 500, r = 100, P = 2, ntok = 11;
    br_blr_host L = random_layer(ctx, &rng, m, n, r, P);
    float *x = random_x(&rng, ntok * n), *bias = random_x(&rng, m);
    br_blr_infer *plan = NULL;
    CHECK_OK(ctx, br_blr_infer_new(ctx, &L, &plan));
    for (int k = 0; k < 2; k++) {
        if (k == 1 && !cpu_has_avx2()) break;
        CHECK_OK(ctx, br_blr_infer_set_kernel(plan, k ? BR_INFER_AVX2 : BR_INFER_PORTABLE));
        float *y1 = poisoned(ntok * m);
        set_threads(1, 1);
        CHECK_OK(ctx, br_blr_infer_run(plan, x, ntok, bias, y1));
        for (int threads = 2; threads <= 3; threads++) {
            float *yk = poisoned(ntok * m);
            set_threads(threads, 1);
            CHECK_OK(ctx, br_blr_infer_run(plan, x, ntok, bias, yk));
            size_t bad = t_bits_differ32(y1, yk, ntok * m);
            CHECK(bad == 0, "%s: %zu outputs differ between 1 and %d threads, first %zu",
                  br_blr_infer_kernel(plan), bad, threads, t_first_diff32(y1, yk, ntok * m));
            free(yk);
        }
        /* and a run of some of the tokens gives those tokens' bits, wherever they
         * fall in the runs' chunks of tokens */
        float *y3 = poisoned(3 * m);
        CHECK_OK(ctx, br_blr_infer_run(plan, x + 6 * n, 3, bias, y3));
        CHECK(t_bits_differ32(y1 + 6 * m, y3, 3 * m) == 0, "%s: tokens 6..8 alone differ",
              br_blr_infer_kernel(plan));
        free(y3);
        free(y1);
    }
    set_threads(prev, 1);
    br_blr_infer_free(plan);
    br_blr_host_free(&L);
    free(x);
    free(bias);
    br_ctx_free(ctx);
}

/* The plan copies what it needs: changing or freeing the layer afterwards changes
 * nothing. */
static void plan_owns_its_copy(void) {
    br_ctx *ctx = t_cpu_ctx();
    br_rng rng = t_rng_for(6);
    size_t m = 70, n = 90, r = 40, ntok = 3;
    br_blr_host L = random_layer(ctx, &rng, m, n, r, 2);
    float *x = random_x(&rng, ntok * n);
    br_blr_infer *plan = NULL;
    CHECK_OK(ctx, br_blr_infer_new(ctx, &L, &plan));
    float *y0 = poisoned(ntok * m), *y1 = poisoned(ntok * m);
    CHECK_OK(ctx, br_blr_infer_run(plan, x, ntok, NULL, y0));
    for (size_t p = 0; p < 2; p++) {
        L.path[p].h[0] *= 2;
        L.path[p].bits_u[0] ^= 1u;
        L.path[p].bits_v[0] ^= 1u;
        L.path[p].l[0] = -L.path[p].l[0];
    }
    br_blr_host_free(&L);
    CHECK_OK(ctx, br_blr_infer_run(plan, x, ntok, NULL, y1));
    CHECK(t_bits_differ32(y0, y1, ntok * m) == 0, "the plan read the layer after it was made");
    br_blr_infer_free(plan);
    free(x);
    free(y0);
    free(y1);
    br_ctx_free(ctx);
}

/* A token holding NaN or infinity: all of its outputs are NaN or infinite, the other
 * tokens' outputs unchanged. */
static void nonfinite_inputs(void) {
    br_ctx *ctx = t_cpu_ctx();
    br_rng rng = t_rng_for(7);
    size_t m = 45, n = 77, r = 50, ntok = 3;
    br_blr_host L = random_layer(ctx, &rng, m, n, r, 2);
    float *x = random_x(&rng, ntok * n);
    br_blr_infer *plan = NULL;
    CHECK_OK(ctx, br_blr_infer_new(ctx, &L, &plan));
    for (int k = 0; k < 2; k++) {
        if (k == 1 && !cpu_has_avx2()) break;
        CHECK_OK(ctx, br_blr_infer_set_kernel(plan, k ? BR_INFER_AVX2 : BR_INFER_PORTABLE));
        float *clean = poisoned(ntok * m);
        CHECK_OK(ctx, br_blr_infer_run(plan, x, ntok, NULL, clean));
        const float bad_values[2] = {NAN, INFINITY};
        for (int b = 0; b < 2; b++) {
            float *xb = t_xmalloc(ntok * n * sizeof *xb);
            memcpy(xb, x, ntok * n * sizeof *xb);
            xb[1 * n + 37] = bad_values[b];
            float *y = poisoned(ntok * m);
            CHECK_OK(ctx, br_blr_infer_run(plan, xb, ntok, NULL, y));
            size_t finite = 0;
            for (size_t i = 0; i < m; i++)
                finite += isfinite(y[m + i]) != 0;
            CHECK(finite == 0, "%s, x = %g: %zu outputs of the token are finite",
                  br_blr_infer_kernel(plan), (double)bad_values[b], finite);
            CHECK(t_bits_differ32(clean, y, m) == 0 &&
                      t_bits_differ32(clean + 2 * m, y + 2 * m, m) == 0,
                  "%s: a non-finite token changed the others", br_blr_infer_kernel(plan));
            free(xb);
            free(y);
        }
        free(clean);
    }
    br_blr_infer_free(plan);
    br_blr_host_free(&L);
    free(x);
    br_ctx_free(ctx);
}

/* The f16 run is the f32 run of the f16 values, rounded: the same bits. */
static void f16_run_matches_f32(void) {
    br_ctx *ctx = t_cpu_ctx();
    br_rng rng = t_rng_for(8);
    size_t m = 61, n = 129, r = 35, ntok = 10;
    br_blr_host L = random_layer(ctx, &rng, m, n, r, 2);
    float *x = random_x(&rng, ntok * n), *bias = random_x(&rng, m);
    uint16_t *x16 = t_xmalloc(ntok * n * 2), *b16 = t_xmalloc(m * 2),
             *y16 = t_xmalloc(ntok * m * 2);
    for (size_t i = 0; i < ntok * n; i++) {
        x16[i] = br_half_from_float(x[i]);
        x[i] = (float)t_f16_value(x16[i]);
    }
    for (size_t i = 0; i < m; i++) {
        b16[i] = br_half_from_float(bias[i]);
        bias[i] = (float)t_f16_value(b16[i]);
    }
    for (size_t i = 0; i < ntok * m; i++)
        y16[i] = T_NAN16;
    br_blr_infer *plan = NULL;
    CHECK_OK(ctx, br_blr_infer_new(ctx, &L, &plan));
    float *y = poisoned(ntok * m);
    CHECK_OK(ctx, br_blr_infer_run(plan, x, ntok, bias, y));
    CHECK_OK(ctx, br_blr_infer_run_f16(plan, x16, ntok, b16, y16));
    size_t bad = 0;
    for (size_t i = 0; i < ntok * m; i++)
        bad += y16[i] != br_half_from_float(y[i]);
    CHECK(bad == 0, "%zu f16 outputs differ from the f32 run rounded", bad);
    /* without bias too */
    CHECK_OK(ctx, br_blr_infer_run(plan, x, ntok, NULL, y));
    CHECK_OK(ctx, br_blr_infer_run_f16(plan, x16, ntok, NULL, y16));
    bad = 0;
    for (size_t i = 0; i < ntok * m; i++)
        bad += y16[i] != br_half_from_float(y[i]);
    CHECK(bad == 0, "no bias: %zu f16 outputs differ from the f32 run rounded", bad);
    br_blr_infer_free(plan);
    br_blr_host_free(&L);
    free(x);
    free(bias);
    free(x16);
    free(b16);
    free(y16);
    free(y);
    br_ctx_free(ctx);
}

static void bad_arguments(void) {
    br_ctx *ctx = t_cpu_ctx();
    br_rng rng = t_rng_for(9);
    br_blr_host L = random_layer(ctx, &rng, 20, 30, 8, 2);
    br_blr_infer *plan = (br_blr_infer *)&L; /* must be set to NULL on failure */
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "out", br_blr_infer_new(ctx, &L, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "layer", br_blr_infer_new(ctx, NULL, &plan));
    CHECK(plan == NULL, "*out not cleared on failure");
    br_blr_host bad = L;
    bad.m = 0;
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "m, n, r", br_blr_infer_new(ctx, &bad, &plan));
    bad = L;
    bad.r = 0;
    CHECK_FAILS(ctx, BR_E_SHAPE, br_blr_infer_new(ctx, &bad, &plan));
    bad = L;
    bad.paths = 0;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "paths", br_blr_infer_new(ctx, &bad, &plan));
    bad.paths = 3;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "paths", br_blr_infer_new(ctx, &bad, &plan));
    bad = L;
    bad.path[1].g = NULL;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "NULL", br_blr_infer_new(ctx, &bad, &plan));
    bad = L;
    bad.m = ((size_t)1 << 31) + 1; /* arrays too short, but refused before reading them */
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "too large", br_blr_infer_new(ctx, &bad, &plan));
    bad = L;
    bad.n = SIZE_MAX / 2;
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_blr_infer_new(ctx, &bad, &plan));
    float keep = L.path[1].h[3];
    L.path[1].h[3] = NAN;
    CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "h[3]", br_blr_infer_new(ctx, &L, &plan));
    L.path[1].h[3] = keep;
    keep = L.path[0].l[7];
    L.path[0].l[7] = -INFINITY;
    CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "l[7]", br_blr_infer_new(ctx, &L, &plan));
    L.path[0].l[7] = keep;
    CHECK(plan == NULL, "*out not NULL after failures");
    /* a NULL context: the status still comes back */
    CHECK(br_blr_infer_new(NULL, &bad, &plan) == BR_E_OVERFLOW, "NULL ctx");

    CHECK_OK(ctx, br_blr_infer_new(ctx, &L, &plan));
    float x[2 * 30], y[2 * 20 + 30], b[20];
    for (size_t i = 0; i < 60; i++)
        x[i] = 1.0f;
    for (size_t i = 0; i < 20; i++)
        b[i] = 1.0f;
    for (size_t i = 0; i < 70; i++)
        memcpy(&y[i], &(uint32_t){T_NAN32}, 4);
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "x", br_blr_infer_run(plan, NULL, 2, b, y));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "y", br_blr_infer_run(plan, x, 2, b, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "ntok", br_blr_infer_run(plan, x, 0, b, y));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "ntok", br_blr_infer_run(plan, x, SIZE_MAX / 4, b, y));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps x", br_blr_infer_run(plan, y + 10, 1, b, y));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps bias", br_blr_infer_run(plan, x, 2, y + 39, y));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "kernel", br_blr_infer_set_kernel(plan, (br_infer_kernel)7));
    uint16_t h16[60] = {0};
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "ntok", br_blr_infer_run_f16(plan, h16, 0, NULL, h16 + 30));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps x",
                    br_blr_infer_run_f16(plan, h16, 1, NULL, h16 + 20));
    CHECK(br_blr_infer_run(NULL, x, 2, b, y) == BR_E_ARG, "NULL plan");
    CHECK(br_blr_infer_run_f16(NULL, h16, 1, NULL, h16 + 30) == BR_E_ARG, "NULL plan (f16)");
    CHECK(br_blr_infer_set_kernel(NULL, BR_INFER_AUTO) == BR_E_ARG, "NULL plan (set_kernel)");
    CHECK(strcmp(br_blr_infer_kernel(NULL), "none") == 0, "kernel of NULL");
    /* after all that, the plan still runs */
    CHECK_OK(ctx, br_blr_infer_run(plan, x, 2, b, y));
    CHECK(t_count_written32(y, 40) == 40, "the run after failures wrote %zu of 40",
          t_count_written32(y, 40));
    br_blr_infer_free(plan);
    br_blr_infer_free(NULL);
    br_blr_host_free(&L);
    br_ctx_free(ctx);
}

T_RUN("blr_infer", T_CASE(portable_against_f64), T_CASE(avx2_against_f64),
      T_CASE(large_layer_against_f64), T_CASE(kernel_choice), T_CASE(threads_same_bits),
      T_CASE(plan_owns_its_copy), T_CASE(nonfinite_inputs), T_CASE(f16_run_matches_f32),
      T_CASE(bad_arguments))
