/* GEMM benchmark: our dense f16 GEMM and bitmap GEMMs (BITS_ROWS,
 * BITS_COLS) against cuBLASLt f16 × f16 → f32 (f32 compute, the peer) and against
 * expand-then-cuBLASLt, at the four GEMM shapes of a Qwen3.5-0.8B training step
 * (4096 tokens), plus the mma.sync family and each wgmma tile for reference.
 *
 *   bench_gemm [--runs N] [--quick] [--no-sweep] [--sweep-only] [--no-wgmma]
 *              [--layer] [--layer-only]
 *
 * --quick skips the per-tile wgmma measurements; --no-wgmma runs everything on the
 * mma.sync family (a Hopper kernel that faults cannot take the other numbers down);
 * --layer adds the GEMMs of a BLR layer step (bench_layer below: as the layer calls
 * them, with the epilogue, and every tile × split), --layer-only runs just those.
 *
 * Before timing: a correctness sweep over awkward shapes (every family, plane kind
 * and tile against an f64 host reference), then at each benchmark shape each
 * variant against cuBLASLt on the same data (‖got − ref‖/‖ref‖ < 3e-3, printed).
 * Any failure → exit status 1. Timing: CUDA events around each call on the
 * context's stream, 5 warm-up calls, median of N (default 30) calls, inputs and
 * outputs rotated over enough buffer sets that the working set exceeds 2 × the
 * 60 MB L2. One JSON line per measurement on stdout, a table at the end.
 *
 * Floors on the H200 (≈ 790 TFLOP/s dense f16/bf16 measured, ≈ 4.2 TB/s copy):
 *
 *   (M, N, K)            FLOP     at 790 TF   bytes dense / bits     at 4.2 TB/s
 *   (4096, 3584, 1024)   30.1 G   38.0 µs     74.4 MB / 67.6 MB      17.7 / 16.1 µs
 *   (4096, 1024, 3584)   30.1 G   38.0 µs     53.5 MB / 46.6 MB      12.7 / 11.1 µs
 *   (3584, 1024, 4096)   30.1 G   38.0 µs     52.4 MB / 44.6 MB      12.5 / 10.6 µs
 *   (4096, 6144, 1024)   51.5 G   65.2 µs    121.6 MB / 109.8 MB     29.0 / 26.1 µs
 *
 * (bytes: f16 act M·K + f16 plane N·K (bits: N·K/8) + f32 out M·N). Every shape is
 * compute-bound by ≥ 2×: the f32 output is the largest stream, and a kernel that
 * does not overlap its stores with the next tile's math pays for them on top. */
#include <cublasLt.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <time.h>
#include <vector>

#include "backend/cuda/gemm/common.cuh"
#include "core/rng.h"

using namespace br_gemm_cuda;

namespace {

int g_failures = 0;
int g_runs = 30;
const double kTol = 3e-3;

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "bench_gemm: %s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e_),  \
                    __FILE__, __LINE__);                                                           \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)
#define LT_OK(call)                                                                                \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            fprintf(stderr, "bench_gemm: %s failed: status %d (%s:%d)\n", #call, (int)s_,          \
                    __FILE__, __LINE__);                                                           \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)
#define BR_OK_OR_DIE(ctx, call)                                                                    \
    do {                                                                                           \
        br_status st_ = (call);                                                                    \
        if (st_ != BR_OK) {                                                                        \
            fprintf(stderr, "bench_gemm: %s -> %s: %s\n", #call, br_status_name(st_),              \
                    br_ctx_error(ctx));                                                            \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

/* Option gemm_splitk=<splits> (0 or 1: auto, the picker's within the workspace). */
void set_splitk(br_ctx *ctx, int splits) {
    char opt[32];
    if (splits > 1)
        snprintf(opt, sizeof opt, "gemm_splitk=%d", splits);
    else
        snprintf(opt, sizeof opt, "gemm_splitk=auto");
    BR_OK_OR_DIE(ctx, br_ctx_set_options(ctx, opt));
}

/* ---------------------------------------------------------------- device helpers */

/* bits u32 [rows][k/32] → plane f16 [rows][k] of ±1 (what br_expand does for rows). */
__global__ void expand_rows_kernel(const uint32_t *bits, uint4 *plane, size_t words) {
    for (size_t w = blockIdx.x * (size_t)blockDim.x + threadIdx.x; w < words;
         w += (size_t)gridDim.x * blockDim.x) {
        const uint32_t v = bits[w];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            uint32_t h[4];
#pragma unroll
            for (int e = 0; e < 4; e++)
                h[e] = pm1_pair(v >> (8 * q + 2 * e));
            plane[4 * w + q] = make_uint4(h[0], h[1], h[2], h[3]);
        }
    }
}

/* acc[0] += Σ (got − ref)², acc[1] += Σ ref²; NaN/Inf in got → acc[2] += 1 */
__global__ void rel_err_kernel(const float *got, const float *ref, size_t n, double *acc) {
    double num = 0, den = 0, bad = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const double gv = got[i], rv = ref[i];
        if (!isfinite(gv)) bad += 1;
        num += (gv - rv) * (gv - rv);
        den += rv * rv;
    }
    for (int o = 16; o; o >>= 1) {
        num += __shfl_down_sync(0xffffffffu, num, o);
        den += __shfl_down_sync(0xffffffffu, den, o);
        bad += __shfl_down_sync(0xffffffffu, bad, o);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&acc[0], num);
        atomicAdd(&acc[1], den);
        atomicAdd(&acc[2], bad);
    }
}

double device_rel_err(cudaStream_t st, const float *got, const float *ref, size_t n) {
    double *acc = nullptr, h[3];
    CUDA_OK(cudaMalloc(&acc, 3 * sizeof(double)));
    CUDA_OK(cudaMemsetAsync(acc, 0, 3 * sizeof(double), st));
    rel_err_kernel<<<1024, 256, 0, st>>>(got, ref, n, acc);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpyAsync(h, acc, sizeof h, cudaMemcpyDeviceToHost, st));
    CUDA_OK(cudaStreamSynchronize(st));
    CUDA_OK(cudaFree(acc));
    if (h[2] > 0) return INFINITY;
    return sqrt(h[0] / (h[1] > 1e-300 ? h[1] : 1e-300));
}

/* ---------------------------------------------------------------- cuBLASLt */

struct Lt {
    cublasLtHandle_t h = nullptr;
    void *ws = nullptr;
    size_t ws_bytes = 32u << 20;
};

/* out[M][N] (row-major, f32) = act[M][K] · plane[N][K]ᵀ: in cuBLAS's column-major
 * terms outᵀ[N][M] = op(A)·B with A = plane as K×N (transposed), B = act as K×M. */
struct LtGemm {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo;
    int m, n, k;

    void init(Lt &lt, int m_, int n_, int k_) {
        m = m_, n = n_, k = k_;
        LT_OK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        LT_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        LT_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        LT_OK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16F, k, n, k));
        LT_OK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16F, k, m, k));
        LT_OK(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, n, m, n));
        cublasLtMatmulPreference_t pref;
        LT_OK(cublasLtMatmulPreferenceCreate(&pref));
        LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &lt.ws_bytes, sizeof lt.ws_bytes));
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        LT_OK(cublasLtMatmulAlgoGetHeuristic(lt.h, op, a, b, c, c, pref, 1, &res, &found));
        if (!found) {
            fprintf(stderr, "bench_gemm: cuBLASLt has no algorithm for %d x %d x %d\n", m, n, k);
            exit(2);
        }
        algo = res.algo;
        cublasLtMatmulPreferenceDestroy(pref);
    }
    void run(Lt &lt, cudaStream_t st, const void *act, const void *plane, float *out) {
        const float one = 1.0f, zero = 0.0f;
        LT_OK(cublasLtMatmul(lt.h, op, &one, plane, a, act, b, &zero, out, c, out, c, &algo, lt.ws,
                             lt.ws_bytes, st));
    }
    void destroy() {
        cublasLtMatrixLayoutDestroy(a), cublasLtMatrixLayoutDestroy(b);
        cublasLtMatrixLayoutDestroy(c), cublasLtMatmulDescDestroy(op);
    }
};

/* ---------------------------------------------------------------- host data */

/* Random f16 values in [-scale, scale) and a random sign plane S[n][k] packed both
 * ways: rows [n][k/32] and cols [k][ceil(n/32)] describe the same ±1 plane. */
struct HostData {
    std::vector<uint16_t> act, plane, plane_pm1;
    std::vector<uint32_t> rows, cols;
};

HostData make_data(br_rng *r, size_t m, size_t n, size_t k, size_t act_rows) {
    HostData d;
    d.act.resize(act_rows * k);
    for (auto &v : d.act)
        v = br_half_from_float(br_rng_sym(r));
    d.plane.resize(n * k);
    for (auto &v : d.plane)
        v = br_half_from_float(br_rng_sym(r));
    const size_t wr = k / 32, wc = (n + 31) / 32;
    d.rows.assign(n * wr, 0);
    d.cols.assign(k * wc, 0);
    d.plane_pm1.resize(n * k);
    for (size_t j = 0; j < n; j++)
        for (size_t kk = 0; kk < k; kk++) {
            const int bit = br_rng_sym(r) >= 0.0f;
            d.plane_pm1[j * k + kk] = bit ? 0x3C00 : 0xBC00;
            if (bit) {
                d.rows[j * wr + kk / 32] |= 1u << (kk % 32);
                d.cols[kk * wc + j / 32] |= 1u << (j % 32);
            }
        }
    (void)m;
    return d;
}

br_buf *upload(br_ctx *ctx, br_dtype dt, const void *src, size_t n) {
    br_buf *b = nullptr;
    BR_OK_OR_DIE(ctx, br_buf_new(ctx, dt, n, &b));
    BR_OK_OR_DIE(ctx, br_buf_upload(b, 0, src, n));
    return b;
}

/* ---------------------------------------------------------------- correctness sweep */

struct Variant {
    const char *name;
    PlaneKind kind;
    Family family;
    WgmmaTile tile;
    WgmmaASource src;
    int splits; /* split-K factor forced (option gemm_splitk), 1: none */
};

/* The A sources built for a tile of a plane kind (f16: shared memory only). */
std::vector<WgmmaASource> asources(PlaneKind kind, WgmmaTile tile) {
    if (kind == PLANE_F16) return {A_SMEM};
    if (tile == TILE_256x112 || tile == TILE_128x128 || tile == TILE_128x192 || tile == TILE_256x96)
        return {A_SMEM, A_REG2, A_REG4};
    return {A_SMEM, A_REG2};
}

/* For a failed case: where the wrong outputs are (first few, with the reference
 * positions whose value they hold, if any: a layout bug shows as a permutation) and
 * how they spread over rows and columns mod 16. */
void diagnose(const float *got, const std::vector<double> &ref, size_t m, size_t n, size_t ldo,
              size_t ocol, float oscale) {
    double scale = 0;
    for (double v : ref)
        scale = std::max(scale, fabs(v * oscale));
    const double tol = 1e-3 * (scale > 0 ? scale : 1);
    size_t wrong = 0, shown = 0, by_i[16] = {0}, by_j[16] = {0};
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            const double g = got[i * ldo + ocol + j], want = oscale * ref[i * n + j];
            if (fabs(g - want) <= tol) continue;
            wrong++, by_i[i % 16]++, by_j[j % 16]++;
            if (shown++ < 6) {
                fprintf(stderr, "    out[%zu][%zu] = %.5g, want %.5g; equals ref at:", i, j, g,
                        want);
                int hits = 0;
                for (size_t q = 0; q < m * n && hits < 3; q++)
                    if (fabs(oscale * ref[q] - g) <= tol) {
                        fprintf(stderr, " [%zu][%zu]", q / n, q % n);
                        hits++;
                    }
                fprintf(stderr, "%s\n", hits ? "" : " nowhere");
            }
        }
    fprintf(stderr, "    %zu of %zu wrong; by row %% 16:", wrong, m * n);
    for (int q = 0; q < 16; q++)
        fprintf(stderr, " %zu", by_i[q]);
    fprintf(stderr, "; by column %% 16:");
    for (int q = 0; q < 16; q++)
        fprintf(stderr, " %zu", by_j[q]);
    fprintf(stderr, "\n");
}

/* Every family × kind × tile on awkward shapes against an f64 reference; the output
 * is poisoned (NaN) and the cells outside the block must stay NaN. */
void sweep(br_ctx *ctx, br_rng *r, int has_wgmma) {
    static const struct {
        int m, n, k, ldo, ocol, act_off;
    } shapes[] = {
        {1, 1, 32, 0, 0, 0},
        {7, 33, 96, 0, 0, 0},
        {130, 257, 64, 0, 0, 0},
        {300, 200, 32, 0, 0, 0},
        {129, 300, 160, 310, 5, 0},
        {77, 513, 1024, 0, 0, 0},
        {3000, 2100, 96, 0, 0, 0},
        {1000, 777, 224, 781, 3, 0},
        {257, 129, 4096, 0, 0, 0},
        {64, 96, 64, 100, 4, 1},
        {513, 1030, 64, 1040, 8, 0},
        {4000, 1500, 160, 0, 0, 0}, /* several tiles per CTA, 3 k blocks */
        {600, 768, 2048, 0, 0, 0},  /* a skinny K = tokens GEMM (split-K by AUTO) */
    };
    std::vector<Variant> vars;
    const PlaneKind kinds[] = {PLANE_F16, PLANE_ROWS, PLANE_COLS};
    for (PlaneKind kind : kinds) {
        vars.push_back({"simple", kind, FAMILY_SIMPLE, TILE_AUTO, A_AUTO, 1});
        vars.push_back({"mma", kind, FAMILY_MMA, TILE_AUTO, A_AUTO, 1});
        if (has_wgmma)
            for (int t = 0; t < TILE_COUNT; t++) {
                for (WgmmaASource src : asources(kind, (WgmmaTile)t))
                    vars.push_back({"wgmma", kind, FAMILY_WGMMA, (WgmmaTile)t, src, 1});
                vars.push_back({"wgmma-splitk", kind, FAMILY_WGMMA, (WgmmaTile)t,
                                kind == PLANE_F16 ? A_SMEM : A_REG2, 3});
            }
    }
    double worst = 0;
    int checks = 0;
    for (const auto &s : shapes) {
        const size_t m = s.m, n = s.n, k = s.k, ocol = s.ocol, ldo = s.ldo ? s.ldo : n;
        HostData d = make_data(r, m, n, k, m);
        const uint16_t *act = d.act.data();
        /* references in f64: dense plane and ±1 plane */
        std::vector<double> ref_f16(m * n), ref_pm1(m * n);
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++) {
                double s1 = 0, s2 = 0;
                for (size_t kk = 0; kk < k; kk++) {
                    const double av = br_half_to_float(act[i * k + kk]);
                    s1 += av * br_half_to_float(d.plane[j * k + kk]);
                    s2 += av * br_half_to_float(d.plane_pm1[j * k + kk]);
                }
                ref_f16[i * n + j] = s1, ref_pm1[i * n + j] = s2;
            }
        /* act_off > 0: act is a view starting act_off elements into its allocation
         * (not 16-byte aligned) */
        br_buf *ab = nullptr, *av = nullptr;
        BR_OK_OR_DIE(ctx, br_buf_new(ctx, BR_F16, m * k + s.act_off, &ab));
        BR_OK_OR_DIE(ctx, br_buf_view(ab, (size_t)s.act_off, m * k, &av));
        BR_OK_OR_DIE(ctx, br_buf_upload(av, 0, act, m * k));
        br_buf *pb = upload(ctx, BR_F16, d.plane.data(), d.plane.size());
        br_buf *rb = upload(ctx, BR_U32, d.rows.data(), d.rows.size());
        br_buf *cb = upload(ctx, BR_U32, d.cols.data(), d.cols.size());
        const size_t count = (m - 1) * ldo + ocol + n + 7; /* 7 spare: must stay NaN */
        br_buf *ob = nullptr;
        BR_OK_OR_DIE(ctx, br_buf_new(ctx, BR_F32, count, &ob));
        std::vector<float> got(count);
        const float oscale = (m + n) % 2 ? 1.0f : -0.375f;
        /* every other shape runs the epilogue: colscale, and c = out with beta −0.5
         * (out starts as c inside the block, NaN around it) */
        const bool epi = (&s - shapes) % 2 == 1;
        const float beta = -0.5f;
        std::vector<float> cs(n), init(count);
        for (auto &v : cs)
            v = 1.25f + 0.75f * br_rng_sym(r);
        for (size_t idx = 0; idx < count; idx++) {
            const size_t i = idx / ldo, c = idx % ldo;
            init[idx] = epi && i < m && c >= ocol && c < ocol + n ? 2.0f * br_rng_sym(r) : NAN;
        }
        br_buf *csb = upload(ctx, BR_F32, cs.data(), n);
        for (const auto &v : vars) {
            BR_OK_OR_DIE(ctx, br_buf_upload(ob, 0, init.data(), count));
            br_mm_args a;
            memset(&a, 0, sizeof a);
            a.act = av;
            a.plane = v.kind == PLANE_F16 ? pb : v.kind == PLANE_ROWS ? rb : cb;
            a.out = ob;
            a.g.m = m, a.g.n = n, a.g.k = k, a.g.ldo = ldo, a.g.ocol = ocol, a.g.oscale = oscale;
            a.g.lda = k;
            if (epi) a.g.colscale = csb, a.g.c = ob, a.g.beta = beta;
            a.layout = v.kind == PLANE_COLS ? BR_BITS_COLS : BR_BITS_ROWS;
            a.ws_bytes = v.splits > 1 ? split_ws_bytes(v.splits, m + 255, n) : 0;
            set_splitk(ctx, v.splits);
            BR_OK_OR_DIE(ctx, run(ctx, a, v.kind, v.family, v.tile, v.src));
            set_splitk(ctx, 0);
            BR_OK_OR_DIE(ctx, br_buf_download(ob, 0, got.data(), count));
            const std::vector<double> &ref = v.kind == PLANE_F16 ? ref_f16 : ref_pm1;
            double num = 0, den = 0;
            size_t stray = 0, nan_in = 0;
            for (size_t idx = 0; idx < count; idx++) {
                const size_t i = idx / ldo, c = idx % ldo;
                const bool in = i < m && c >= ocol && c < ocol + n;
                if (!in) {
                    stray += !isnan(got[idx]);
                    continue;
                }
                double want = oscale * ref[i * n + c - ocol];
                if (epi) want = want * cs[c - ocol] + beta * init[idx];
                if (!isfinite(got[idx])) nan_in++;
                num += (got[idx] - want) * (got[idx] - want);
                den += want * want;
            }
            const double err = nan_in ? INFINITY : sqrt(num / (den > 1e-300 ? den : 1e-300));
            checks++;
            if (err > worst) worst = err;
            if (!(err < kTol) || stray) {
                g_failures++;
                fprintf(
                    stderr,
                    "FAIL sweep %s %s tile %s/%s m=%zu n=%zu k=%zu ldo=%zu ocol=%zu act_off=%d%s: "
                    "rel err %.3g, %zu unset outputs, %zu writes outside the block\n",
                    v.name,
                    v.kind == PLANE_F16    ? "f16"
                    : v.kind == PLANE_ROWS ? "rows"
                                           : "cols",
                    tile_name(v.tile), asource_name(v.src), m, n, k, ldo, ocol, s.act_off,
                    epi ? " epilogue" : "", err, nan_in, stray);
                if (g_failures <= 6 && !epi) diagnose(got.data(), ref, m, n, ldo, ocol, oscale);
            }
        }
        br_buf_free(av), br_buf_free(ab), br_buf_free(pb), br_buf_free(rb), br_buf_free(cb);
        br_buf_free(ob), br_buf_free(csb);
    }
    printf("{\"bench\":\"gemm\",\"variant\":\"sweep\",\"cases\":%d,\"rel_err\":%.3g,"
           "\"failures\":%d}\n",
           checks, worst, g_failures);
}

/* ---------------------------------------------------------------- timing */

struct Set {
    br_buf *act, *plane, *rows, *cols, *out;
    uint16_t *expanded; /* scratch of expand-then-cuBLASLt */
};

struct Result {
    std::string name, family, tile; /* tile: "256x112/smem", "-" */
    double us, tflops, err;
};

template <class F> double median_us(cudaStream_t st, int nsets, F &&call) {
    for (int i = 0; i < 5; i++)
        call(i % nsets);
    std::vector<cudaEvent_t> ev(2 * g_runs);
    for (auto &e : ev)
        CUDA_OK(cudaEventCreate(&e));
    for (int i = 0; i < g_runs; i++) {
        CUDA_OK(cudaEventRecord(ev[2 * i], st));
        call(i % nsets);
        CUDA_OK(cudaEventRecord(ev[2 * i + 1], st));
    }
    CUDA_OK(cudaStreamSynchronize(st));
    std::vector<double> t(g_runs);
    for (int i = 0; i < g_runs; i++) {
        float ms = 0;
        CUDA_OK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        t[i] = ms * 1000.0;
    }
    for (auto &e : ev)
        cudaEventDestroy(e);
    std::sort(t.begin(), t.end());
    return g_runs % 2 ? t[g_runs / 2] : 0.5 * (t[g_runs / 2 - 1] + t[g_runs / 2]);
}

void print_json(const char *device, int M, int N, int K, const Result &r, int nsets) {
    printf("{\"bench\":\"gemm\",\"device\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,"
           "\"variant\":\"%s/%s/%s\",\"family\":\"%s\",\"tile\":\"%s\",\"ms\":%.5f,"
           "\"tflops\":%.1f,\"rel_err\":%.3g,\"runs\":%d,\"sets\":%d}\n",
           device, M, N, K, r.name.c_str(), r.family.c_str(), r.tile.c_str(), r.family.c_str(),
           r.tile.c_str(), r.us * 1e-3, r.tflops, r.err, g_runs, nsets);
    fflush(stdout);
}

std::vector<Result> bench_shape(br_ctx *ctx, Lt &lt, br_rng *r, int M, int N, int K, int has_wgmma,
                                bool quick) {
    br_cuda *s = br_cuda_state(ctx);
    cudaStream_t st = s->stream;
    const char *device = br_ctx_device(ctx);
    const double flop = 2.0 * M * N * K;
    HostData d = make_data(r, M, N, K, M);
    const size_t set_bytes = (size_t)M * K * 2 + (size_t)M * N * 4; /* the least a call touches */
    const int nsets = std::max(2, (int)((2 * 60e6 + set_bytes - 1) / set_bytes) + 1);
    std::vector<Set> sets(nsets);
    for (auto &x : sets) {
        x.act = upload(ctx, BR_F16, d.act.data(), d.act.size());
        x.plane = upload(ctx, BR_F16, d.plane.data(), d.plane.size());
        x.rows = upload(ctx, BR_U32, d.rows.data(), d.rows.size());
        x.cols = upload(ctx, BR_U32, d.cols.data(), d.cols.size());
        BR_OK_OR_DIE(ctx, br_buf_new(ctx, BR_F32, (size_t)M * N, &x.out));
        CUDA_OK(cudaMalloc(&x.expanded, (size_t)N * K * 2));
    }
    /* references by cuBLASLt: dense plane and the expanded ±1 plane */
    float *ref_f16 = nullptr, *ref_pm1 = nullptr;
    uint16_t *pm1 = nullptr;
    CUDA_OK(cudaMalloc(&ref_f16, (size_t)M * N * 4));
    CUDA_OK(cudaMalloc(&ref_pm1, (size_t)M * N * 4));
    CUDA_OK(cudaMalloc(&pm1, (size_t)N * K * 2));
    CUDA_OK(cudaMemcpy(pm1, d.plane_pm1.data(), (size_t)N * K * 2, cudaMemcpyHostToDevice));
    LtGemm lg;
    lg.init(lt, M, N, K);
    lg.run(lt, st, br_ptr(sets[0].act), br_ptr(sets[0].plane), ref_f16);
    lg.run(lt, st, br_ptr(sets[0].act), pm1, ref_pm1);
    CUDA_OK(cudaStreamSynchronize(st));

    std::vector<Result> res;
    auto measure = [&](const char *name, const std::string &family, const std::string &tile,
                       const float *ref, auto &&call) {
        CUDA_OK(cudaMemsetAsync(br_ptr(sets[0].out), 0xff, (size_t)M * N * 4, st)); /* NaN */
        call(0);
        const double err =
            device_rel_err(st, (const float *)br_ptr(sets[0].out), ref, (size_t)M * N);
        Result rr = {name, family, tile, 0, 0, err};
        if (!(err < kTol)) {
            g_failures++;
            fprintf(stderr, "FAIL %s (%s %s) at %d x %d x %d: rel err vs cuBLASLt %.3g\n", name,
                    family.c_str(), tile.c_str(), M, N, K, err);
        }
        rr.us = median_us(st, nsets, call);
        rr.tflops = flop / (rr.us * 1e-6) / 1e12;
        print_json(device, M, N, K, rr, nsets);
        res.push_back(rr);
    };
    auto ours = [&](PlaneKind kind, Family fam, WgmmaTile tile, WgmmaASource src) {
        return [&, kind, fam, tile, src](int i) {
            br_mm_args a;
            memset(&a, 0, sizeof a);
            a.act = sets[i].act;
            a.plane = kind == PLANE_F16    ? sets[i].plane
                      : kind == PLANE_ROWS ? sets[i].rows
                                           : sets[i].cols;
            a.out = sets[i].out;
            a.g.m = M, a.g.n = N, a.g.k = K, a.g.ldo = N, a.g.oscale = 1.0f; /* lda 0: k */
            a.layout = kind == PLANE_COLS ? BR_BITS_COLS : BR_BITS_ROWS;
            BR_OK_OR_DIE(ctx, run(ctx, a, kind, fam, tile, src));
        };
    };
    auto label = [](WgmmaTile tile, WgmmaASource src) {
        return std::string(tile_name(tile)) + "/" + asource_name(src);
    };
    static const char *const names[3] = {"mm_f16", "mm_bits_rows", "mm_bits_cols"};
    const PlaneKind kinds[3] = {PLANE_F16, PLANE_ROWS, PLANE_COLS};
    const std::string fam = has_wgmma ? "wgmma" : "mma";
    std::string auto_label[3]; /* what AUTO picks per plane kind */
    for (int q = 0; q < 3; q++) {
        Problem prob;
        memset(&prob, 0, sizeof prob);
        prob.m = M, prob.n = N, prob.k = K, prob.kind = kinds[q];
        WgmmaTile tile = TILE_AUTO;
        WgmmaASource src = A_AUTO;
        pick_wgmma(prob, s->sm_count, &tile, &src);
        auto_label[q] = has_wgmma ? label(tile, src) : "128x128";
    }

    measure("cublaslt_f16", "cublaslt", "-", ref_f16, [&](int i) {
        lg.run(lt, st, br_ptr(sets[i].act), br_ptr(sets[i].plane), (float *)br_ptr(sets[i].out));
    });
    measure("expand_cublaslt", "cublaslt", "-", ref_pm1, [&](int i) {
        const size_t words = (size_t)N * K / 32;
        expand_rows_kernel<<<(unsigned)std::min<size_t>((words + 255) / 256, 4096), 256, 0, st>>>(
            (const uint32_t *)br_ptr(sets[i].rows), (uint4 *)sets[i].expanded, words);
        CUDA_OK(cudaGetLastError());
        lg.run(lt, st, br_ptr(sets[i].act), sets[i].expanded, (float *)br_ptr(sets[i].out));
    });
    for (int q = 0; q < 3; q++)
        measure(names[q], fam, auto_label[q], q ? ref_pm1 : ref_f16,
                ours(kinds[q], FAMILY_AUTO, TILE_AUTO, A_AUTO));
    for (int q = 0; q < 3; q++)
        measure(names[q], "mma", "128x128", q ? ref_pm1 : ref_f16,
                ours(kinds[q], FAMILY_MMA, TILE_AUTO, A_AUTO));
    if (has_wgmma && !quick)
        for (int q = 0; q < 3; q++)
            for (int t = 0; t < TILE_COUNT; t++)
                for (WgmmaASource src : asources(kinds[q], (WgmmaTile)t))
                    measure(names[q], "wgmma", label((WgmmaTile)t, src), q ? ref_pm1 : ref_f16,
                            ours(kinds[q], FAMILY_WGMMA, (WgmmaTile)t, src));

    lg.destroy();
    for (auto &x : sets) {
        br_buf_free(x.act), br_buf_free(x.plane), br_buf_free(x.rows), br_buf_free(x.cols);
        br_buf_free(x.out);
        cudaFree(x.expanded);
    }
    cudaFree(ref_f16), cudaFree(ref_pm1), cudaFree(pm1);
    return res;
}

const Result *find(const std::vector<Result> &v, const char *name, const char *family) {
    for (const auto &r : v)
        if (r.name == name && r.family == family) return &r;
    return nullptr;
}

/* The fastest wgmma variant of `name` measured (any tile, any A source). */
const Result *best(const std::vector<Result> &v, const char *name) {
    const Result *b = nullptr;
    for (const auto &r : v)
        if (r.name == name && r.family == "wgmma" && (!b || r.tflops > b->tflops)) b = &r;
    return b;
}

/* ---------------------------------------------------------------- layer shapes */

/* The workspace br_mm reserves for a split-K run (a copy of src/ops/gemm.c's rule). */
size_t front_end_ws(size_t m, size_t n, size_t k) {
    if (k < 2048 || m * n > ((size_t)4 << 20)) return 0;
    const size_t block = (m + 255) * ((n + 3) / 4 * 4) * sizeof(float);
    size_t splits = ((size_t)64 << 20) / block;
    if (splits > 8) splits = 8;
    return splits >= 2 ? splits * block : 0;
}

/* The GEMMs of one BLR layer step at T = 4096 tokens, P = 2 (src/blr/blr_forward.c
 * and blr_backward.c): A = x16·W_Vᵀ, y = A'·Y_Uᵀ (K = 2r, + c = the target),
 * B = dy16·W_Uᵀ, M_U = dyT·A'T ᵀ, N_V = xT·B'T ᵀ, dx = B'·X_Vᵀ (K = 2r), every one a
 * dense f16 GEMM, timed as br_mm with the epilogue, as the layer calls it, and
 * checked against f64 on sampled rows. */
struct LayerGemm {
    const char *name;
    int M, N, K, lda, act_off;
    PlaneKind kind;
    bool epi;
};

void bench_layer(br_ctx *ctx, br_rng *r) {
    br_cuda *s = br_cuda_state(ctx);
    cudaStream_t st = s->stream;
    const int T = 4096;
    static const int layers[3][3] = {{3584, 1024, 384}, {1024, 3584, 384}, {6144, 1024, 512}};
    fprintf(stderr, "\nlayer GEMMs (T = %d, P = 2), median of %d; bytes at 4.2 TB/s\n", T, g_runs);
    fprintf(stderr, "%-18s %-20s %9s %7s %-18s %8s %9s\n", "m,n,r / GEMM", "M,N,K", "us", "TF/s",
            "tile/splits", "bytes us", "rel err");
    for (const auto &L : layers) {
        const int m = L[0], n = L[1], rk = L[2];
        const LayerGemm gemms[] = {
            {"A", T, 2 * rk, n, 0, 0, PLANE_F16, false},
            {"y", T, m, 2 * rk, 0, 0, PLANE_F16, true},
            {"B", T, 2 * rk, m, 0, 0, PLANE_F16, false},
            {"M_U", m, 2 * rk, T, 0, 0, PLANE_F16, false},
            {"N_V", n, 2 * rk, T, 0, 0, PLANE_F16, false},
            {"dx", T, n, 2 * rk, 0, 0, PLANE_F16, false},
        };
        for (const auto &G : gemms) {
            const size_t M = G.M, N = G.N, K = G.K, lda = G.lda ? G.lda : K;
            const size_t act_count = G.act_off + (M - 1) * lda + K;
            std::vector<uint16_t> act(act_count);
            for (auto &v : act)
                v = br_half_from_float(br_rng_sym(r));
            const size_t nplane = G.kind == PLANE_F16 ? N * K : N * (K / 32);
            std::vector<uint16_t> plane16;
            std::vector<uint32_t> bits;
            if (G.kind == PLANE_F16) {
                plane16.resize(nplane);
                for (auto &v : plane16)
                    v = br_half_from_float(br_rng_sym(r));
            } else {
                bits.resize(nplane);
                for (auto &v : bits)
                    v = (uint32_t)br_rng_u64(r);
            }
            std::vector<float> c0(M * N);
            for (auto &v : c0)
                v = 4.0f * br_rng_sym(r);
            br_buf *ap = upload(ctx, BR_F16, act.data(), act_count), *av = nullptr;
            BR_OK_OR_DIE(ctx, br_buf_view(ap, G.act_off, act_count - G.act_off, &av));
            br_buf *pb = G.kind == PLANE_F16 ? upload(ctx, BR_F16, plane16.data(), nplane)
                                             : upload(ctx, BR_U32, bits.data(), nplane);
            br_buf *ob = upload(ctx, BR_F32, c0.data(), M * N);
            br_gemm g = {};
            g.m = M, g.n = N, g.k = K, g.oscale = 1.0f, g.lda = G.lda;
            if (G.epi) g.c = ob, g.beta = 1.0f; /* the layer's c: y = … + target term */
            auto after = [&](int) {
                if (G.kind == PLANE_F16)
                    BR_OK_OR_DIE(ctx, br_mm(ctx, av, pb, ob, g));
                else
                    BR_OK_OR_DIE(ctx, br_mm_bits(ctx, av, pb, BR_BITS_ROWS, ob, g));
            };
            /* correctness first, on the fresh c */
            after(0);
            std::vector<float> got(M * N);
            BR_OK_OR_DIE(ctx, br_buf_download(ob, 0, got.data(), M * N));
            double num = 0, den = 0;
            std::vector<double> arow(K);
            std::vector<float> pl(N * K); /* the plane's values, f16 or ±1 */
            for (size_t j = 0; j < N; j++)
                for (size_t kk = 0; kk < K; kk++)
                    pl[j * K + kk] =
                        G.kind == PLANE_F16
                            ? br_half_to_float(plane16[j * K + kk])
                            : ((bits[j * (K / 32) + kk / 32] >> (kk % 32)) & 1u ? 1.0f : -1.0f);
            for (size_t q = 0; q <= M / 127; q++) { /* rows 0, 127, 254, …, and the last */
                const size_t i = q == M / 127 ? M - 1 : q * 127;
                for (size_t kk = 0; kk < K; kk++)
                    arow[kk] = br_half_to_float(act[G.act_off + i * lda + kk]);
                for (size_t j = 0; j < N; j++) {
                    double sum = 0;
                    const float *pj = pl.data() + j * K;
                    for (size_t kk = 0; kk < K; kk++)
                        sum += arow[kk] * pj[kk];
                    const double want = G.epi ? sum + c0[i * N + j] : sum;
                    const double gv = got[i * N + j];
                    num += isfinite(gv) ? (gv - want) * (gv - want) : INFINITY;
                    den += want * want;
                }
            }
            const double err = sqrt(num / (den > 1e-300 ? den : 1e-300));
            if (!(err < kTol)) {
                g_failures++;
                fprintf(stderr, "FAIL layer %d,%d,%d %s: rel err vs f64 %.3g\n", m, n, rk, G.name,
                        err);
            }
            /* the picker's choice for the timed call */
            Problem prob;
            memset(&prob, 0, sizeof prob);
            prob.m = (int)M, prob.n = (int)N, prob.k = (int)K, prob.kind = G.kind;
            prob.ws_bytes = front_end_ws(M, N, K);
            WgmmaTile t_new = TILE_AUTO;
            WgmmaASource a_new = A_AUTO;
            int splits = 1;
            pick_wgmma(prob, s->sm_count, &t_new, &a_new, &splits);
            br_mm_args a;
            memset(&a, 0, sizeof a);
            a.act = av, a.plane = pb, a.out = ob, a.layout = BR_BITS_ROWS;
            a.g.m = M, a.g.n = N, a.g.k = K, a.g.ldo = N, a.g.lda = lda, a.g.oscale = 1.0f;
            const double us_after = median_us(st, 1, after);
            const double flop = 2.0 * M * N * K;
            const double bytes = (double)M * K * 2 +
                                 (G.kind == PLANE_F16 ? N * K * 2.0 : N * K / 8.0) +
                                 M * N * 4.0 * (G.epi ? 2 : 1);
            char shape[40], mnk[40], ta[40];
            snprintf(shape, sizeof shape, "%d,%d,%d %s", m, n, rk, G.name);
            snprintf(mnk, sizeof mnk, "%zu,%zu,%zu", M, N, K);
            snprintf(ta, sizeof ta, "%s/%s/%d", tile_name(t_new), asource_name(a_new), splits);
            fprintf(stderr, "%-18s %-20s %9.1f %7.1f %-18s %8.1f %9.2g\n", shape, mnk, us_after,
                    flop / us_after * 1e-6, ta, bytes / 4.2e12 * 1e6, err);
            /* the dense GEMMs: every tile × split measured, for tuning pick_wgmma */
            std::string grid;
            if (s->has_wgmma && G.kind == PLANE_F16) {
                double best_us = 1e30;
                char best_name[40] = "";
                for (int t = 0; t < TILE_COUNT; t++)
                    for (int sp : {1, 2, 3, 4, 6, 8}) {
                        if (sp > 1 && K < 2048) break;
                        a.ws_bytes = sp > 1 ? split_ws_bytes(sp, (int)M + 255, (int)N) : 0;
                        set_splitk(ctx, sp);
                        const double us = median_us(st, 1, [&](int) {
                            BR_OK_OR_DIE(ctx,
                                         run(ctx, a, G.kind, FAMILY_WGMMA, (WgmmaTile)t, A_SMEM));
                        });
                        set_splitk(ctx, 0);
                        char item[48];
                        snprintf(item, sizeof item, " %s/%d:%.1f", tile_name((WgmmaTile)t), sp, us);
                        grid += item;
                        if (us < best_us)
                            best_us = us, snprintf(best_name, sizeof best_name, "%s/%d",
                                                   tile_name((WgmmaTile)t), sp);
                    }
                a.ws_bytes = 0;
                fprintf(stderr, "    grid best %s %.1f us (%.1f TF/s):%s\n", best_name, best_us,
                        flop / best_us * 1e-6, grid.c_str());
            }
            printf("{\"bench\":\"gemm_layer\",\"layer\":\"%d,%d,%d\",\"gemm\":\"%s\",\"m\":%zu,"
                   "\"n\":%zu,\"k\":%zu,\"after_us\":%.2f,\"after_tile\":\"%s\","
                   "\"tflops_after\":%.1f,\"rel_err\":%.3g}\n",
                   m, n, rk, G.name, M, N, K, us_after, ta, flop / us_after * 1e-6, err);
            fflush(stdout);
            br_buf_free(av), br_buf_free(ap), br_buf_free(pb), br_buf_free(ob);
        }
    }
}

} // namespace

int main(int argc, char **argv) {
    bool quick = false, do_sweep = true, no_wgmma = false, sweep_only = false, layer = false,
         layer_only = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            g_runs = std::max(20, atoi(argv[++i]));
        else if (!strcmp(argv[i], "--quick"))
            quick = true;
        else if (!strcmp(argv[i], "--no-sweep"))
            do_sweep = false;
        else if (!strcmp(argv[i], "--no-wgmma"))
            no_wgmma = true;
        else if (!strcmp(argv[i], "--sweep-only"))
            sweep_only = true;
        else if (!strcmp(argv[i], "--layer"))
            layer = true;
        else if (!strcmp(argv[i], "--layer-only"))
            layer = layer_only = true;
        else {
            fprintf(stderr, "usage: bench_gemm [--runs N (>= 20)] [--quick] [--no-sweep] "
                            "[--sweep-only] [--no-wgmma] [--layer] [--layer-only]\n");
            return 2;
        }
    }
    br_ctx *ctx = nullptr;
    char err[256];
    if (br_ctx_new("cuda", &ctx, err, sizeof err) != BR_OK) {
        fprintf(stderr, "bench_gemm: no CUDA device: %s\n", err);
        return 77;
    }
    br_cuda *s = br_cuda_state(ctx);
    if (no_wgmma) {
        s->has_wgmma = 0; /* auto → mma.sync */
        BR_OK_OR_DIE(ctx, br_ctx_set_options(ctx, "gemm=mma"));
    }
    fprintf(stderr, "bench_gemm on %s, %d SMs, wgmma %s\n", br_ctx_device(ctx), s->sm_count,
            s->has_wgmma ? "yes" : "no");
    br_rng r;
    br_rng_seed(&r, (uint64_t)time(NULL));
    if (do_sweep || sweep_only) sweep(ctx, &r, s->has_wgmma);
    if (sweep_only) {
        br_ctx_free(ctx);
        return g_failures ? 1 : 0;
    }

    if (layer_only) {
        bench_layer(ctx, &r);
        br_ctx_free(ctx);
        if (g_failures) fprintf(stderr, "bench_gemm: %d correctness failures\n", g_failures);
        return g_failures ? 1 : 0;
    }

    Lt lt;
    LT_OK(cublasLtCreate(&lt.h));
    CUDA_OK(cudaMalloc(&lt.ws, lt.ws_bytes));
    static const int shapes[4][3] = {
        {4096, 3584, 1024}, {4096, 1024, 3584}, {3584, 1024, 4096}, {4096, 6144, 1024}};
    std::vector<std::vector<Result>> all;
    for (const auto &sh : shapes)
        all.push_back(bench_shape(ctx, lt, &r, sh[0], sh[1], sh[2], s->has_wgmma, quick));

    const char *fam = s->has_wgmma ? "wgmma" : "mma";
    fprintf(stderr, "\nTFLOP/s (2·M·N·K / median time), %s, %d runs\n", br_ctx_device(ctx), g_runs);
    fprintf(stderr, "%-20s %9s %9s %9s %9s %9s %9s %9s %9s  %s\n", "M,N,K", "cublasLt", "f16",
            "rows", "cols", "exp+cbLt", "mma f16", "mma rows", "mma cols",
            "rows/cbLt rows/(exp+cbLt) f16/cbLt");
    for (size_t i = 0; i < all.size(); i++) {
        const auto &v = all[i];
        auto tf = [&](const char *n, const char *f) {
            const Result *x = find(v, n, f);
            return x ? x->tflops : 0.0;
        };
        const double cb = tf("cublaslt_f16", "cublaslt"), ex = tf("expand_cublaslt", "cublaslt");
        const double rows = tf("mm_bits_rows", fam), cols = tf("mm_bits_cols", fam);
        const double f16 = tf("mm_f16", fam);
        char shape[32];
        snprintf(shape, sizeof shape, "%d,%d,%d", shapes[i][0], shapes[i][1], shapes[i][2]);
        fprintf(stderr, "%-20s %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f  %.2f %.2f %.2f\n",
                shape, cb, f16, rows, cols, ex, tf("mm_f16", "mma"), tf("mm_bits_rows", "mma"),
                tf("mm_bits_cols", "mma"), rows / cb, rows / ex, f16 / cb);
    }
    if (s->has_wgmma && !quick) {
        fprintf(stderr, "\nfastest wgmma variant measured (TFLOP/s, tile/A source)\n");
        for (size_t i = 0; i < all.size(); i++) {
            fprintf(stderr, "%d,%d,%d", shapes[i][0], shapes[i][1], shapes[i][2]);
            for (const char *n : {"mm_f16", "mm_bits_rows", "mm_bits_cols"}) {
                const Result *b = best(all[i], n);
                if (b) fprintf(stderr, "   %s %.1f (%s)", n, b->tflops, b->tile.c_str());
            }
            fprintf(stderr, "\n");
        }
    }
    fprintf(stderr, "targets: bits >= cuBLASLt and >= 1.3x expand+cuBLASLt; f16 within 10%% of "
                    "cuBLASLt\n");
    if (layer) bench_layer(ctx, &r);
    cudaFree(lt.ws);
    cublasLtDestroy(lt.h);
    br_ctx_free(ctx);
    if (g_failures) {
        fprintf(stderr, "bench_gemm: %d correctness failures\n", g_failures);
        return 1;
    }
    return 0;
}
