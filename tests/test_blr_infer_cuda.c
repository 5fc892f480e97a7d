/* CUDA inference of a BLR linear (br_blr_infer_cuda): the decode kernel and the
 * prefill GEMMs against an f64 reference written here from the formulas, on fresh
 * random layers (signs, scales of either sign and spread-out magnitudes, garbage in
 * the bits past r) and inputs; y poisoned with NaN bytes before each run; odd shapes
 * (m, n, r not multiples of 16 or 32, r = 1, a few outputs or inputs, the
 * 11008 × 4096 shape scaled down), one and two paths, f16 and bf16, with and without
 * bias, 1, 3, 16, 32, 33, 64, 65 and 200 tokens. Also: the kernel each token count
 * runs (each variant at least once), two runs giving the same bits, a decode and a prefill run captured in a CUDA
 * graph and replayed to the same bits, and the errors.
 *
 * Tolerance. The plan rounds z = g⊙x and t = ℓ⊙(S_Vᵀz) to the operand type (unit
 * roundoff u: f16 2^-11, bf16 2^-8; the prefill GEMMs take f16 operands for either
 * activation type) and y once to the activation type (u_y); every sum is f32. With
 * W̃ = S_U·diag(ℓ)·S_Vᵀ of a path, an error e_j of z_j reaches y_i as h_i·W̃_ij·e_j
 * and an error e_k of t_k as h_i·S_U[i][k]·e_k, so
 *   worst:  |Δy_i| ≤ Σ_p |h_i|·(Σ_j |W̃_ij|·e(z_j) + Σ_k e(t_k) + f32 sums) + e_y(y_i)
 * with e(v) = u·|v| (+ f16's subnormal spacing 2^-25), and, the roundings being
 * independent and uniform over ±e, typically
 *   σ_i² = Σ_p h_i²·(Σ_j W̃_ij²·e(z_j)²/3 + Σ_k e(t_k)²/3) + e_y(y_i)²/3.
 * Every output must be within the worst case, and within 8·σ_i (a Gaussian passes 8σ
 * about once in 10^15 draws; the sums here are of bounded terms, lighter-tailed
 * still): a misplaced sign or a lost term moves an output by far more. The largest
 * ratios seen are printed. */
#include "harness.h"
#include "infer/blr_infer_cuda.h"

#ifdef BR_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define SIGMAS 8.0

static size_t words_of(size_t r) { return (r + 31) / 32; }

/* A value of magnitude exp(N(0, spread)) · scale and random sign, never 0. */
static float spread_value(br_rng *rng, double scale, double spread) {
    double v = scale * exp(spread * br_rng_normal(rng));
    if (v < 1e-30) v = 1e-30;
    return (float)((br_rng_u64(rng) & 1) ? v : -v);
}

/* A random layer: every bit random, also those past r (the plan must ignore them);
 * h ~ 1/√r, ℓ ~ 1, g ~ 1/√n, spread over e^±0.7. */
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

#ifdef BR_HAVE_CUDA
/* ⌈a / b⌉ (only the CUDA cases use it: unused it would fail the CPU build) */
static size_t cdiv_sz(size_t a, size_t b) { return (a + b - 1) / b; }

/* ±1 of sign k of a bitmap row */
static int sign_of(const uint32_t *row, size_t k) { return (row[k / 32] >> (k % 32) & 1u) ? 1 : -1; }

/* ---------------------------------------------------------------- 16-bit types,
 * decoded and rounded here independently of the library */

static double bf16_value(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static double act_value(br_act_type t, uint16_t h) {
    return t == BR_ACT_BF16 ? bf16_value(h) : t_f16_value(h);
}
/* v (finite, in range) to the nearest bf16, ties to even */
static uint16_t bf16_round(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static uint16_t act_round(br_act_type t, float v) {
    return t == BR_ACT_BF16 ? bf16_round(v) : br_half_from_float(v);
}

/* ---------------------------------------------------------------- device memory */

static void cuda_ok(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}
static void *dev_new(size_t bytes) {
    void *p = NULL;
    cuda_ok(cudaMalloc(&p, bytes ? bytes : 2), "cudaMalloc");
    return p;
}
/* The copies wait for the whole device (the context's stream is its own). */
static void dev_put(void *dst, const void *src, size_t bytes) {
    cuda_ok(cudaDeviceSynchronize(), "sync");
    cuda_ok(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
}
static void dev_get(void *dst, const void *src, size_t bytes) {
    cuda_ok(cudaDeviceSynchronize(), "sync");
    cuda_ok(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy from the device");
}
/* NaN in f16 (0xFFFF) and in bf16 (0xFFFF) alike */
static void dev_poison(void *p, size_t bytes) {
    cuda_ok(cudaDeviceSynchronize(), "sync");
    cuda_ok(cudaMemset(p, 0xFF, bytes), "cudaMemset");
    cuda_ok(cudaDeviceSynchronize(), "sync");
}

/* ---------------------------------------------------------------- reference */

/* W̃_p [m][n] = S_U,p·diag(ℓ_p)·S_V,pᵀ in f64 (for the error model). */
static double *wtilde(const br_blr_host *L, size_t p) {
    size_t m = L->m, n = L->n, r = L->r, w = words_of(r);
    const br_blr_path_host *ph = &L->path[p];
    double *W = t_xmalloc(m * n * sizeof *W), *ul = t_xmalloc(r * sizeof *ul);
    for (size_t i = 0; i < m; i++) {
        for (size_t k = 0; k < r; k++)
            ul[k] = sign_of(ph->bits_u + i * w, k) * (double)ph->l[k];
        for (size_t j = 0; j < n; j++) {
            const uint32_t *v = ph->bits_v + j * w;
            double s = 0;
            for (size_t k = 0; k < r; k++)
                s += sign_of(v, k) > 0 ? ul[k] : -ul[k];
            W[i * n + j] = s;
        }
    }
    free(ul);
    return W;
}

typedef struct errstat {
    double worst_ratio, sigma_ratio; /* largest err/worst and err/σ */
    size_t over_worst, over_sigma, not_finite;
    size_t first; /* first offending output (SIZE_MAX: none) */
} errstat;

/* Compares y [ntok][m] (the plan's output) with the reference of the layer on x;
 * u: the operand roundoff, uy the activation type's. */
static errstat compare(const br_blr_host *L, double *const W[], br_act_type type, const uint16_t *x,
                       size_t ntok, const uint16_t *bias, const uint16_t *y, double u, double uy) {
    size_t m = L->m, n = L->n, r = L->r, P = L->paths, w = words_of(r);
    const double sub = u == 0x1p-11 ? 0x1p-25 : 0.0; /* f16 operands' subnormal spacing */
    double *z = t_xmalloc(n * sizeof *z), *t = t_xmalloc(r * sizeof *t);
    double *worst = t_xmalloc(m * sizeof *worst), *var = t_xmalloc(m * sizeof *var);
    double *yr = t_xmalloc(m * sizeof *yr), *mag = t_xmalloc(m * sizeof *mag);
    errstat es = {0, 0, 0, 0, 0, SIZE_MAX};
    for (size_t tok = 0; tok < ntok; tok++) {
        for (size_t i = 0; i < m; i++) {
            double b = bias ? act_value(type, bias[i]) : 0.0;
            yr[i] = b, mag[i] = fabs(b), worst[i] = 0, var[i] = 0;
        }
        for (size_t p = 0; p < P; p++) {
            const br_blr_path_host *ph = &L->path[p];
            for (size_t j = 0; j < n; j++)
                z[j] = (double)ph->g[j] * act_value(type, x[tok * n + j]);
            double tl1_err = 0, tvar = 0, tl1 = 0;
            for (size_t k = 0; k < r; k++) {
                double a = 0;
                for (size_t j = 0; j < n; j++)
                    a += sign_of(ph->bits_v + j * w, k) > 0 ? z[j] : -z[j];
                t[k] = (double)ph->l[k] * a;
                double e = (u + 0x1p-24) * fabs(t[k]) + sub;
                tl1_err += e, tvar += e * e / 3, tl1 += fabs(t[k]);
            }
            /* phase 2's f32 sums: (K/16 + 2) roundings of 2^-23 each, doubled for any
             * truncation of the tensor cores' additions */
            double sums = ((double)r / 16 + 2) * 0x1p-22 * tl1;
            double *Wp = W[p];
            for (size_t i = 0; i < m; i++) {
                double c = 0;
                for (size_t k = 0; k < r; k++)
                    c += sign_of(ph->bits_u + i * w, k) > 0 ? t[k] : -t[k];
                double h = (double)ph->h[i];
                yr[i] += h * c;
                mag[i] += fabs(h * c);
                double zw = 0, zv = 0, zsum = 0;
                for (size_t j = 0; j < n; j++) {
                    double e = (u + 0x1p-24) * fabs(z[j]) + sub, wij = Wp[i * n + j];
                    zw += fabs(wij) * e;
                    zv += wij * wij * e * e / 3;
                    zsum += fabs(wij) * fabs(z[j]);
                }
                /* phase 1's f32 sums reach y through W̃ like z's roundings */
                double s1 = ((double)n / 16 + 2) * 0x1p-22 * zsum;
                worst[i] += fabs(h) * (zw + tl1_err + s1 + sums);
                var[i] += h * h * (zv + tvar);
            }
        }
        for (size_t i = 0; i < m; i++) {
            double ey = uy * fabs(yr[i]) + (type == BR_ACT_F16 ? 0x1p-25 : 0.0);
            double wst = 1.05 * (worst[i] + ey + 0x1p-21 * mag[i]) + 1e-30;
            double sig = sqrt(var[i] + ey * ey / 3) + 0x1p-22 * mag[i] + 1e-30;
            double got = act_value(type, y[tok * m + i]);
            size_t e = tok * m + i;
            if (!isfinite(got)) {
                es.not_finite++;
                if (es.first == SIZE_MAX) es.first = e;
                continue;
            }
            double d = fabs(got - yr[i]);
            if (d / wst > es.worst_ratio) es.worst_ratio = d / wst;
            if (d / sig > es.sigma_ratio) es.sigma_ratio = d / sig;
            if (d > wst) es.over_worst++;
            if (d > SIGMAS * sig) es.over_sigma++;
            if ((d > wst || d > SIGMAS * sig) && es.first == SIZE_MAX) es.first = e;
        }
    }
    free(z), free(t), free(worst), free(var), free(yr), free(mag);
    return es;
}

/* ---------------------------------------------------------------- cases */

static double g_worst[2][2], g_sigma[2][2]; /* [prefill][bf16] */

/* The kernel a run of ntok tokens must report: up to 64 the decode kernels (launches
 * of up to 32 tokens; the name is the last launch's). Up to 8 tokens the resident
 * kernel where a warp's signs fit its registers (⌈⌈n/256⌉/8⌉ ≤ BR_IC_RES_U1 units
 * in phase 1, P·⌈r/256⌉ ≤ 8·BR_IC_RES_U2 in phase 2) and z's slices, 8 warps ×
 * (nt + 1)·(⌈⌈n/256⌉/8⌉·256 + 16) halves, and t's copy, (nt + 1)·(P·⌈r/256⌉·256 +
 * 16) halves, fit its shared memory (infer/blr_infer_cuda.h). Else the kernel that
 * stages t in shared memory where its copy there, nt·(P·⌈r/256⌉·256 + 8) halves,
 * fits 32 KB (decode.cu's kTsBytes and ts_stride), and else reads t's fragments from
 * L2. */
static const char *kernel_for(size_t ntok, size_t n, size_t r, size_t P) {
    if (ntok > 64) return "prefill";
    const size_t nt = ntok > 32 ? ntok - 32 : ntok, ku2 = cdiv_sz(r, 256);
    const size_t upw1 = cdiv_sz(cdiv_sz(n, 256), 8);
    if (nt <= 8 && upw1 <= BR_IC_RES_U1 && P * ku2 <= 8 * BR_IC_RES_U2 &&
        8 * (nt + 1) * (upw1 * 256 + 16) * 2 <= BR_IC_RES_REGION &&
        (nt + 1) * (P * ku2 * 256 + 16) * 2 <= BR_IC_RES_T_BYTES)
        return "decode_resident";
    return nt * (P * ku2 * 256 + 8) * 2 > 32768 ? "decode" : "decode_t_smem";
}

/* runs checked of each kernel */
static const char *const g_kernels[4] = {"decode_resident", "decode_t_smem", "decode", "prefill"};
static size_t g_ran[4];

/* One layer through the plan at each token count, both types, checked; two runs give
 * the same bits. */
static void check_layer(br_ctx *ctx, size_t m, size_t n, size_t r, size_t P, const size_t *toks,
                        size_t ntoks, uint64_t stream) {
    br_rng rng = t_rng_for(stream);
    br_blr_host L = random_layer(ctx, &rng, m, n, r, P);
    double *W[BR_BLR_MAX_PATHS] = {0};
    for (size_t p = 0; p < P; p++)
        W[p] = wtilde(&L, p);
    br_blr_infer_cuda *plan = NULL;
    CHECK_OK(ctx, br_blr_infer_cuda_new(ctx, &L, &plan));
    if (!plan) goto out;
    CHECK(strcmp(br_blr_infer_cuda_kernel(plan), "none") == 0, "kernel before a run: %s",
          br_blr_infer_cuda_kernel(plan));
    /* the signs once (padded to the decode kernel's 16 × 256 units), not per layout */
    const size_t units = P * (cdiv_sz(r, 16) * cdiv_sz(n, 256) + cdiv_sz(m, 16) * cdiv_sz(r, 256));
    CHECK(br_blr_infer_cuda_bytes(plan) >= units * 512 &&
              br_blr_infer_cuda_bytes(plan) < units * 512 + 4 * P * (m + r + n) + (1u << 20),
          "plan holds %zu bytes, signs %zu", br_blr_infer_cuda_bytes(plan), units * 512);
    for (size_t ti = 0; ti < ntoks; ti++) {
        size_t ntok = toks[ti];
        for (int bf = 0; bf < 2; bf++) {
            br_act_type type = bf ? BR_ACT_BF16 : BR_ACT_F16;
            int with_bias = (int)((ti + (size_t)bf) % 2);
            uint16_t *x = t_xmalloc(ntok * n * 2), *bias = t_xmalloc(m * 2);
            uint16_t *y = t_xmalloc(ntok * m * 2), *y2 = t_xmalloc(ntok * m * 2);
            for (size_t i = 0; i < ntok * n; i++)
                x[i] = act_round(type, spread_value(&rng, 1.0, 0.8));
            for (size_t i = 0; i < m; i++)
                bias[i] = act_round(type, spread_value(&rng, 0.3, 0.5));
            void *dx = dev_new(ntok * n * 2), *db = dev_new(m * 2), *dy = dev_new(ntok * m * 2);
            dev_put(dx, x, ntok * n * 2);
            dev_put(db, bias, m * 2);
            dev_poison(dy, ntok * m * 2);
            CHECK_OK(ctx, br_blr_infer_cuda_run(plan, type, dx, ntok, with_bias ? db : NULL, dy));
            CHECK_OK(ctx, br_ctx_sync(ctx));
            dev_get(y, dy, ntok * m * 2);
            const char *k = br_blr_infer_cuda_kernel(plan), *want = kernel_for(ntok, n, r, P);
            int pre = strcmp(want, "prefill") == 0;
            CHECK(strcmp(k, want) == 0, "%zux%zu r%zu P%zu: %zu tokens ran %s, expected %s", m, n,
                  r, P, ntok, k, want);
            for (int i = 0; i < 4; i++)
                g_ran[i] += strcmp(k, g_kernels[i]) == 0;
            double u = pre || !bf ? 0x1p-11 : 0x1p-8, uy = bf ? 0x1p-8 : 0x1p-11;
            errstat es = compare(&L, W, type, x, ntok, with_bias ? bias : NULL, y, u, uy);
            if (es.worst_ratio > g_worst[pre][bf]) g_worst[pre][bf] = es.worst_ratio;
            if (es.sigma_ratio > g_sigma[pre][bf]) g_sigma[pre][bf] = es.sigma_ratio;
            CHECK(es.not_finite == 0 && es.over_worst == 0 && es.over_sigma == 0,
                  "%s %s %zux%zu r%zu P%zu ntok %zu bias %d: %zu not finite, %zu past the worst "
                  "case, %zu past %gσ (largest %.3g of worst, %.3gσ); first [%zu][%zu] = %.6g",
                  k, bf ? "bf16" : "f16", m, n, r, P, ntok, with_bias, es.not_finite,
                  es.over_worst, es.over_sigma, SIGMAS, es.worst_ratio, es.sigma_ratio,
                  es.first == SIZE_MAX ? 0 : es.first / m, es.first == SIZE_MAX ? 0 : es.first % m,
                  es.first == SIZE_MAX ? 0.0 : act_value(type, y[es.first]));
            /* a second run: the same bits */
            dev_poison(dy, ntok * m * 2);
            CHECK_OK(ctx, br_blr_infer_cuda_run(plan, type, dx, ntok, with_bias ? db : NULL, dy));
            CHECK_OK(ctx, br_ctx_sync(ctx));
            dev_get(y2, dy, ntok * m * 2);
            size_t differ = t_bits_differ16(y, y2, ntok * m);
            CHECK(differ == 0, "%s %zux%zu r%zu P%zu ntok %zu: %zu outputs differ between runs", k,
                  m, n, r, P, ntok, differ);
            cudaFree(dx), cudaFree(db), cudaFree(dy);
            free(x), free(bias), free(y), free(y2);
        }
    }
out:
    br_blr_infer_cuda_free(plan);
    for (size_t p = 0; p < P; p++)
        free(W[p]);
    br_blr_host_free(&L);
}

static const size_t all_toks[] = {1, 3, 16, 32, 33, 64, 65, 200};
/* BITRANK_TEST_QUICK=1 (the compute-sanitizer runs): fewer token counts, the same paths */
static const size_t quick_toks[] = {1, 16, 33, 65};
static int g_quick;
#define TOKS(list) (g_quick ? quick_toks : list), (g_quick ? sizeof quick_toks / sizeof quick_toks[0] \
                                                           : sizeof list / sizeof list[0])

/* odd shapes: nothing a multiple of 16 or 32, few outputs or inputs, r = 1 */
static void odd_shapes(void) {
    br_ctx *ctx = t_ctx();
    static const size_t shapes[][4] = {{37, 45, 13, 1},  {5, 3, 1, 2},    {300, 7, 33, 2},
                                       {3, 500, 70, 1},  {100, 260, 257, 2}, {17, 31, 47, 2}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        check_layer(ctx, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], TOKS(all_toks),
                    100 + s);
    br_ctx_free(ctx);
}

/* 11008 × 4096 at 1 bpw, two paths (r = 1492), scaled down by 8: many row tiles,
 * segments in both phases */
static void llama_shape_scaled(void) {
    br_ctx *ctx = t_ctx();
    check_layer(ctx, 1376, 512, 187, 2, TOKS(all_toks), 200);
    if (!g_quick) check_layer(ctx, 512, 1376, 187, 2, TOKS(all_toks), 201);
    br_ctx_free(ctx);
}

/* An LM-head-like output count: more row tiles than the grid's blocks take in one job
 * (more than 16 a block on an H100 or H200), so blocks loop over phase-2 jobs; and its
 * transpose: tens of k segments per phase-1 row tile, summed in order; and a rank
 * above the grid's blocks in row tiles. */
static void wide_shapes(void) {
    br_ctx *ctx = t_ctx();
    static const size_t toks[] = {1, 17, 32};
    check_layer(ctx, 70001, 40, 9, 2, toks, sizeof toks / sizeof toks[0], 250);
    check_layer(ctx, 40, 70001, 9, 2, toks, sizeof toks / sizeof toks[0], 251);
    /* more phase-1 row tiles (2 × 144) than an H100's or H200's grid has blocks: one
     * token's row-tile-a-block phase 1 loops, some blocks over both paths' z */
    check_layer(ctx, 600, 300, 2300, 2, toks, sizeof toks / sizeof toks[0], 252);
    br_ctx_free(ctx);
}

/* random shapes, a few token counts each */
static void random_shapes(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(300);
    static const size_t toks[] = {1, 9, 27, 130};
    for (int s = 0; s < 4; s++) {
        size_t m = t_rand_size(&rng, 1, 700), n = t_rand_size(&rng, 1, 700);
        size_t r = t_rand_size(&rng, 1, 300), P = t_rand_size(&rng, 1, 2);
        check_layer(ctx, m, n, r, P, TOKS(toks), 301 + (uint64_t)s);
    }
    br_ctx_free(ctx);
}

/* A decode run and a prefill run captured in a CUDA graph on the caller's stream and
 * replayed: the same bits as the eager runs (nothing allocated in the capture). */
static void graph_replay(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(400);
    size_t m = 700, n = 333, r = 121, P = 2;
    br_blr_host L = random_layer(ctx, &rng, m, n, r, P);
    br_blr_infer_cuda *plan = NULL;
    CHECK_OK(ctx, br_blr_infer_cuda_new(ctx, &L, &plan));
    cudaStream_t stream;
    cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    static const size_t toks[] = {1, 16, 200};
    for (size_t ti = 0; plan && ti < sizeof toks / sizeof toks[0]; ti++) {
        size_t ntok = toks[ti];
        uint16_t *x = t_xmalloc(ntok * n * 2), *y = t_xmalloc(ntok * m * 2);
        uint16_t *y2 = t_xmalloc(ntok * m * 2);
        for (size_t i = 0; i < ntok * n; i++)
            x[i] = act_round(BR_ACT_F16, spread_value(&rng, 1.0, 0.8));
        void *dx = dev_new(ntok * n * 2), *dy = dev_new(ntok * m * 2);
        dev_put(dx, x, ntok * n * 2);
        CHECK_OK(ctx, br_ctx_set_stream(ctx, stream));
        CHECK_OK(ctx, br_blr_infer_cuda_run(plan, BR_ACT_F16, dx, ntok, NULL, dy)); /* eager */
        CHECK_OK(ctx, br_ctx_sync(ctx));
        dev_get(y, dy, ntok * m * 2);
        dev_poison(dy, ntok * m * 2);
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
        br_status st = br_blr_infer_cuda_run(plan, BR_ACT_F16, dx, ntok, NULL, dy);
        cudaError_t ce = cudaStreamEndCapture(stream, &graph);
        CHECK(st == BR_OK, "captured run (%zu tokens): %s: %s", ntok, br_status_name(st),
              br_ctx_error(ctx));
        CHECK(ce == cudaSuccess, "end capture (%zu tokens): %s", ntok, cudaGetErrorString(ce));
        if (st == BR_OK && ce == cudaSuccess) {
            cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
            for (int rep = 0; rep < 3; rep++) { /* replays find the counters reset */
                dev_poison(dy, ntok * m * 2);
                cuda_ok(cudaGraphLaunch(exec, stream), "graph launch");
                cuda_ok(cudaStreamSynchronize(stream), "graph sync");
                dev_get(y2, dy, ntok * m * 2);
                size_t differ = t_bits_differ16(y, y2, ntok * m);
                CHECK(differ == 0, "replay %d of %zu tokens: %zu outputs differ from the eager run",
                      rep, ntok, differ);
            }
            cudaGraphExecDestroy(exec);
        }
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();
        CHECK_OK(ctx, br_ctx_use_own_stream(ctx));
        cudaFree(dx), cudaFree(dy);
        free(x), free(y), free(y2);
    }
    br_blr_infer_cuda_free(plan);
    cuda_ok(cudaStreamDestroy(stream), "stream destroy");
    br_blr_host_free(&L);
    br_ctx_free(ctx);
}

/* Two plans of different shapes on one context share its workspace: prefill and
 * decode runs interleaved, each growing it or not, give each plan the bits it gave
 * alone; a prefill larger than any before is refused inside a capture (BR_E_STATE)
 * and leaves the capture intact. */
static void shared_workspace(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(450);
    static const size_t shape[2][3] = {{700, 333, 121}, {1376, 512, 187}};
    static const size_t toks[] = {200, 5, 300, 70};
    br_blr_host L[2];
    br_blr_infer_cuda *plan[2] = {NULL, NULL};
    uint16_t *x[2], *want[2][4];
    void *dx[2], *dy[2];
    for (int k = 0; k < 2; k++) {
        size_t m = shape[k][0], n = shape[k][1];
        L[k] = random_layer(ctx, &rng, m, n, shape[k][2], 2);
        CHECK_OK(ctx, br_blr_infer_cuda_new(ctx, &L[k], &plan[k]));
        x[k] = t_xmalloc(400 * n * 2);
        for (size_t i = 0; i < 400 * n; i++)
            x[k][i] = act_round(BR_ACT_F16, spread_value(&rng, 1.0, 0.8));
        dx[k] = dev_new(400 * n * 2), dy[k] = dev_new(400 * m * 2);
        dev_put(dx[k], x[k], 400 * n * 2);
        for (int t = 0; t < 4; t++)
            want[k][t] = t_xmalloc(toks[t] * m * 2);
    }
    for (int pass = 0; pass < 2 && plan[0] && plan[1]; pass++)
        for (int t = 0; t < 4; t++)
            for (int k = 0; k < 2; k++) {
                size_t m = shape[k][0], ntok = toks[t];
                uint16_t *got = pass ? t_xmalloc(ntok * m * 2) : want[k][t];
                dev_poison(dy[k], ntok * m * 2);
                CHECK_OK(ctx, br_blr_infer_cuda_run(plan[k], BR_ACT_F16, dx[k], ntok, NULL, dy[k]));
                CHECK_OK(ctx, br_ctx_sync(ctx));
                dev_get(got, dy[k], ntok * m * 2);
                if (pass) {
                    size_t differ = t_bits_differ16(want[k][t], got, ntok * m);
                    CHECK(differ == 0, "plan %d, %zu tokens after the other plan's runs: %zu "
                          "outputs differ", k, ntok, differ);
                    free(got);
                }
            }
    if (plan[1]) { /* the larger plan: 400 tokens need more than its 300 did */
        cudaStream_t stream;
        cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
        CHECK_OK(ctx, br_ctx_set_stream(ctx, stream));
        cudaGraph_t graph = NULL;
        cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
        br_status st = br_blr_infer_cuda_run(plan[1], BR_ACT_F16, dx[1], 400, NULL, dy[1]);
        cudaError_t ce = cudaStreamEndCapture(stream, &graph);
        CHECK(st == BR_E_STATE && strstr(br_ctx_error(ctx), "captured"),
              "a prefill larger than any before, captured: %s: %s", br_status_name(st),
              br_ctx_error(ctx));
        CHECK(ce == cudaSuccess, "the capture after the refusal: %s", cudaGetErrorString(ce));
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();
        CHECK_OK(ctx, br_ctx_use_own_stream(ctx));
        cuda_ok(cudaStreamDestroy(stream), "stream destroy");
    }
    for (int k = 0; k < 2; k++) {
        br_blr_infer_cuda_free(plan[k]);
        br_blr_host_free(&L[k]);
        cudaFree(dx[k]), cudaFree(dy[k]);
        free(x[k]);
        for (int t = 0; t < 4; t++)
            free(want[k][t]);
    }
    br_ctx_free(ctx);
}

/* Layers in a chain, each run's output the next one's input, issued back to back
 * with no synchronization (plan A, B, A, B, ... on one stream: A's counter is used
 * again two launches on), then captured in a CUDA graph and replayed: every link
 * gives the bits it gives when each run is synchronized alone. A kernel that read
 * its input, the workspace or its counter before the kernel before it had finished
 * (programmatic dependent launch) would differ here. */
static void chained_layers(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(470);
    enum { LINKS = 6 };
    const size_t n = 512, r = 96;
    br_blr_host L[2];
    br_blr_infer_cuda *plan[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        L[k] = random_layer(ctx, &rng, n, n, r, 2);
        CHECK_OK(ctx, br_blr_infer_cuda_new(ctx, &L[k], &plan[k]));
    }
    cudaStream_t stream;
    cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    CHECK_OK(ctx, br_ctx_set_stream(ctx, stream));
    static const size_t toks[] = {1, 3, 8};
    for (size_t ti = 0; plan[0] && plan[1] && ti < sizeof toks / sizeof toks[0]; ti++) {
        const size_t ntok = toks[ti], bytes = ntok * n * 2;
        uint16_t *x = t_xmalloc(bytes), *want[LINKS], *got = t_xmalloc(bytes);
        for (size_t i = 0; i < ntok * n; i++)
            x[i] = act_round(BR_ACT_F16, spread_value(&rng, 1.0, 0.8));
        void *buf[LINKS + 1];
        for (int i = 0; i <= LINKS; i++) buf[i] = dev_new(bytes);
        dev_put(buf[0], x, bytes);
        /* each link alone */
        for (int i = 0; i < LINKS; i++) {
            want[i] = t_xmalloc(bytes);
            CHECK_OK(ctx, br_blr_infer_cuda_run(plan[i % 2], BR_ACT_F16, buf[i], ntok, NULL, buf[i + 1]));
            CHECK_OK(ctx, br_ctx_sync(ctx));
            dev_get(want[i], buf[i + 1], bytes);
        }
        const char *k = br_blr_infer_cuda_kernel(plan[0]), *kw = kernel_for(ntok, n, r, 2);
        CHECK(strcmp(k, kw) == 0, "%zu tokens: kernel %s, expected %s", ntok, k, kw);
        for (int mode = 0; mode < 2; mode++) { /* 0: eager, back to back; 1: a graph */
            for (int i = 1; i <= LINKS; i++) dev_poison(buf[i], bytes);
            cudaGraph_t graph = NULL;
            cudaGraphExec_t exec = NULL;
            if (mode) cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
            br_status st = BR_OK;
            for (int i = 0; i < LINKS && st == BR_OK; i++)
                st = br_blr_infer_cuda_run(plan[i % 2], BR_ACT_F16, buf[i], ntok, NULL, buf[i + 1]);
            CHECK(st == BR_OK, "chain of %zu tokens (%s): %s: %s", ntok, mode ? "captured" : "eager",
                  br_status_name(st), br_ctx_error(ctx));
            if (mode) {
                cudaError_t ce = cudaStreamEndCapture(stream, &graph);
                CHECK(ce == cudaSuccess, "end capture: %s", cudaGetErrorString(ce));
                if (st == BR_OK && ce == cudaSuccess) {
                    cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
                    for (int i = 1; i <= LINKS; i++) dev_poison(buf[i], bytes);
                    cuda_ok(cudaGraphLaunch(exec, stream), "graph launch");
                }
            }
            cuda_ok(cudaStreamSynchronize(stream), "chain sync");
            for (int i = 0; i < LINKS; i++) {
                dev_get(got, buf[i + 1], bytes);
                size_t differ = t_bits_differ16(want[i], got, ntok * n);
                CHECK(differ == 0, "%s chain of %zu tokens, link %d: %zu outputs differ from "
                      "the run alone", mode ? "captured" : "eager", ntok, i, differ);
            }
            if (exec) cudaGraphExecDestroy(exec);
            if (graph) cudaGraphDestroy(graph);
            cudaGetLastError();
        }
        for (int i = 0; i <= LINKS; i++) cudaFree(buf[i]);
        for (int i = 0; i < LINKS; i++) free(want[i]);
        free(x), free(got);
    }
    CHECK_OK(ctx, br_ctx_use_own_stream(ctx));
    cuda_ok(cudaStreamDestroy(stream), "stream destroy");
    for (int k = 0; k < 2; k++) {
        br_blr_infer_cuda_free(plan[k]);
        br_blr_host_free(&L[k]);
    }
    br_ctx_free(ctx);
}

/* bad arguments on a CUDA context */
static void errors_cuda(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(500);
    br_blr_host L = random_layer(ctx, &rng, 40, 50, 20, 2);
    br_blr_infer_cuda *plan = NULL;
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_infer_cuda_new(ctx, NULL, &plan));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_infer_cuda_new(ctx, &L, NULL));
    CHECK(br_blr_infer_cuda_new(NULL, &L, &plan) == BR_E_ARG && plan == NULL, "NULL ctx");
    float keep = L.path[1].l[7];
    L.path[1].l[7] = NAN;
    CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "l[7]", br_blr_infer_cuda_new(ctx, &L, &plan));
    L.path[1].l[7] = keep;
    keep = L.path[0].g[3];
    L.path[0].g[3] = INFINITY;
    CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "g[3]", br_blr_infer_cuda_new(ctx, &L, &plan));
    L.path[0].g[3] = keep;
    CHECK(plan == NULL, "a refused plan is NULL");
    CHECK_OK(ctx, br_blr_infer_cuda_new(ctx, &L, &plan));
    void *dx = dev_new(4 * 50 * 2), *dy = dev_new(4 * 40 * 2);
    CHECK_FAILS(ctx, BR_E_SHAPE, br_blr_infer_cuda_run(plan, BR_ACT_F16, dx, 0, NULL, dy));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_infer_cuda_run(plan, BR_ACT_F16, NULL, 1, NULL, dy));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_infer_cuda_run(plan, BR_ACT_F16, dx, 1, NULL, NULL));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_infer_cuda_run(plan, (br_act_type)7, dx, 1, NULL, dy));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_infer_cuda_run(plan, BR_ACT_F16, dx, 1, NULL, dx));
    CHECK_FAILS(ctx, BR_E_ARG,
                br_blr_infer_cuda_run(plan, BR_ACT_F16, (char *)dx + 1, 1, NULL, dy));
    CHECK(br_blr_infer_cuda_run(NULL, BR_ACT_F16, dx, 1, NULL, dy) == BR_E_ARG, "NULL plan");
    CHECK(strcmp(br_blr_infer_cuda_kernel(plan), "none") == 0, "failed runs ran %s",
          br_blr_infer_cuda_kernel(plan));
    CHECK(strcmp(br_blr_infer_cuda_kernel(NULL), "none") == 0, "NULL plan's kernel");
    CHECK(br_blr_infer_cuda_bytes(NULL) == 0, "NULL plan's bytes");
    br_blr_infer_cuda_free(plan);
    br_blr_infer_cuda_free(NULL);
    cudaFree(dx), cudaFree(dy);
    br_blr_host_free(&L);
    br_ctx_free(ctx);
}
#endif

/* A CPU context is refused (any build). */
static void cpu_ctx_refused(void) {
    br_ctx *ctx = t_cpu_ctx();
    br_rng rng = t_rng_for(600);
    br_blr_host L = random_layer(ctx, &rng, 10, 20, 5, 1);
    br_blr_infer_cuda *plan = (br_blr_infer_cuda *)&L; /* set to NULL by the call */
    CHECK_FAILS_MSG(ctx, BR_E_UNSUPPORTED, "CUDA", br_blr_infer_cuda_new(ctx, &L, &plan));
    CHECK(plan == NULL, "a refused plan is NULL");
    br_blr_host_free(&L);
    br_ctx_free(ctx);
}

int main(void) {
    if (strncmp(t_device(), "cuda", 4) != 0) {
        /* the GPU cases need a CUDA device: only the refusal runs here */
        static const t_case cpu_cases[] = {T_CASE(cpu_ctx_refused)};
        int rc = t_run("blr_infer_cuda", cpu_cases, 1);
        if (rc) return rc;
        fprintf(stderr, "skip: the GPU cases run with BITRANK_TEST_DEVICE=cuda\n");
        return T_SKIP;
    }
#ifdef BR_HAVE_CUDA
    const char *quick = getenv("BITRANK_TEST_QUICK");
    g_quick = quick && *quick && strcmp(quick, "0") != 0;
    static const t_case cases[] = {T_CASE(cpu_ctx_refused), T_CASE(errors_cuda),
                                   T_CASE(odd_shapes),      T_CASE(llama_shape_scaled),
                                   T_CASE(wide_shapes),     T_CASE(random_shapes),
                                   T_CASE(graph_replay),    T_CASE(shared_workspace),
                                   T_CASE(chained_layers)};
    int rc = t_run("blr_infer_cuda", cases, sizeof cases / sizeof cases[0]);
    for (int i = 0; i < 4; i++) {
        fprintf(stderr, "runs checked on %s: %zu\n", g_kernels[i], g_ran[i]);
        if (!g_ran[i]) {
            fprintf(stderr, "FAIL: %s never ran\n", g_kernels[i]);
            rc = rc ? rc : 1;
        }
    }
    static const char *const kname[2] = {"decode", "prefill"};
    for (int pre = 0; pre < 2; pre++)
        for (int bf = 0; bf < 2; bf++)
            fprintf(stderr, "%s %s: largest error %.3g of the worst case, %.3g σ\n", kname[pre],
                    bf ? "bf16" : "f16", g_worst[pre][bf], g_sigma[pre][bf]);
    return rc;
#else
    (void)t_ctx;
    fprintf(stderr, "skip: this build has no CUDA backend\n");
    return T_SKIP;
#endif
}
