/* Inference benchmark on a CUDA GPU: br_blr_infer_cuda (the decode kernel up to 64
 * tokens, the prefill GEMMs above) against cuBLAS's f16 GEMM of the dense layer
 * (cublasGemmEx, f16 in and out, f32 compute) at Llama-2-7B's MLP shapes.
 *
 *   bench_infer_cuda [--runs N] [--quick]
 *
 * Shapes m × n: 11008 × 4096, 4096 × 4096, 4096 × 11008 at 1.0 bpw (two paths: the
 * rank br_blr_bpw allows), and 0.55 and 0.1 bpw (--quick: 1.0 only); 1, 8, 16, 64 and
 * 4096 tokens; f16 activations (bf16 too at 1, 8 and 16 tokens).
 *
 * Timing: each measurement is a CUDA graph of one launch per copy of the weights,
 * over enough copies (plans, or dense matrices) that the graph reads at least 2 × the
 * L2 cache (weights come from DRAM, as in a model's forward pass where each layer is
 * read once per step; prefill runs 4 copies, its time being arithmetic); the graph is launched 3 times to warm up, then N times (default
 * 20) between CUDA events; the median per launch, in µs. The ratio is cuBLAS's time
 * over ours; GB/s is the signs' bytes (P·(m + n)·r/8) over our time.
 *
 * Check: before timing, 64 outputs of the first and last token of every plan
 * configuration against an f64 host reference (|err| ≤ 1e-2·max|y|): a failure is
 * exit status 1. cuBLAS multiplies a random dense f16 matrix of the same shape (its
 * time does not depend on the values).
 *
 * One JSON line per measurement on stdout, a table on stderr. */
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "bitrank.h"
#include "core/rng.h"

namespace {

int g_runs = 20, g_failures = 0;

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "bench_infer_cuda: %s failed: %s (%s:%d)\n", #call,                    \
                    cudaGetErrorString(e_), __FILE__, __LINE__);                                   \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)
#define CUBLAS_OK(call)                                                                            \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            fprintf(stderr, "bench_infer_cuda: %s failed: status %d (%s:%d)\n", #call, (int)s_,    \
                    __FILE__, __LINE__);                                                           \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)
#define BR_OK_OR_DIE(ctx, call)                                                                    \
    do {                                                                                           \
        br_status st_ = (call);                                                                    \
        if (st_ != BR_OK) {                                                                        \
            fprintf(stderr, "bench_infer_cuda: %s -> %s: %s\n", #call, br_status_name(st_),        \
                    br_ctx_error(ctx));                                                            \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

/* The largest rank whose two-path layer stays within `bpw` (at least 1). */
size_t rank_for(size_t m, size_t n, double bpw) {
    size_t r = 1;
    while (br_blr_bpw(m, n, r + 1, 2) <= bpw)
        r++;
    return r;
}

/* Median µs per graph launch of `per` launches captured by `issue` on `stream`. */
template <typename F> double time_graph(cudaStream_t stream, int per, F issue) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < per; i++)
        issue(i);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    for (int w = 0; w < 3; w++)
        CUDA_OK(cudaGraphLaunch(exec, stream));
    std::vector<double> t;
    for (int i = 0; i < g_runs; i++) {
        CUDA_OK(cudaEventRecord(e0, stream));
        CUDA_OK(cudaGraphLaunch(exec, stream));
        CUDA_OK(cudaEventRecord(e1, stream));
        CUDA_OK(cudaEventSynchronize(e1));
        float ms = 0;
        CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms * 1e3 / per);
    }
    std::sort(t.begin(), t.end());
    CUDA_OK(cudaEventDestroy(e0));
    CUDA_OK(cudaEventDestroy(e1));
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    return t[t.size() / 2];
}

int sign(const uint32_t *row, size_t k) { return (row[k / 32] >> (k % 32) & 1u) ? 1 : -1; }

/* y_ref[i] for the sampled rows of one token, in f64 from the host layer. */
void reference_rows(const br_blr_host &L, const float *x, const size_t *rows, size_t nrows,
                    double *out) {
    const size_t n = L.n, r = L.r, w = (r + 31) / 32;
    std::vector<double> t(r);
    for (size_t i = 0; i < nrows; i++)
        out[i] = 0;
    for (size_t p = 0; p < L.paths; p++) {
        const br_blr_path_host &ph = L.path[p];
        std::fill(t.begin(), t.end(), 0.0);
        for (size_t j = 0; j < n; j++) {
            const double z = (double)ph.g[j] * x[j];
            for (size_t k = 0; k < r; k++)
                t[k] += sign(ph.bits_v + j * w, k) * z;
        }
        for (size_t k = 0; k < r; k++)
            t[k] *= ph.l[k];
        for (size_t i = 0; i < nrows; i++) {
            double c = 0;
            for (size_t k = 0; k < r; k++)
                c += sign(ph.bits_u + rows[i] * w, k) * t[k];
            out[i] += ph.h[rows[i]] * c;
        }
    }
}

struct Row {
    size_t m, n, r, ntok;
    double bpw;
    const char *type, *kernel;
    double us, cublas_us;
    double bits_mb;
};
std::vector<Row> g_rows;

void bench_shape(br_ctx *ctx, cublasHandle_t blas, cudaStream_t stream, size_t m, size_t n,
                 double bpw, const std::vector<size_t> &toks, size_t l2) {
    const size_t r = rank_for(m, n, bpw), P = 2, w = (r + 31) / 32;
    const double bits_bytes = (double)P * (m + n) * r / 8;
    br_rng rng;
    br_rng_seed(&rng, 1234 + m * 7 + n * 13 + r);
    br_blr_host L;
    BR_OK_OR_DIE(ctx, br_blr_host_alloc(ctx, &L, m, n, r, P));
    for (size_t p = 0; p < P; p++) {
        br_blr_path_host &ph = L.path[p];
        for (size_t i = 0; i < m * w; i++)
            ph.bits_u[i] = (uint32_t)br_rng_u64(&rng);
        for (size_t i = 0; i < n * w; i++)
            ph.bits_v[i] = (uint32_t)br_rng_u64(&rng);
        for (size_t i = 0; i < m; i++)
            ph.h[i] = (float)((0.5 + br_rng_unit(&rng)) / sqrt((double)r));
        for (size_t k = 0; k < r; k++)
            ph.l[k] = (float)(0.5 + br_rng_unit(&rng));
        for (size_t j = 0; j < n; j++)
            ph.g[j] = (float)((0.5 + br_rng_unit(&rng)) / sqrt((double)n));
    }
    /* copies of the plan: at least 2 × L2 of signs per graph (and at least 4) */
    const int copies = (int)std::min<double>(256.0, std::max(4.0, ceil(2.0 * l2 / bits_bytes)));
    std::vector<br_blr_infer_cuda *> plans(copies);
    for (int c = 0; c < copies; c++)
        BR_OK_OR_DIE(ctx, br_blr_infer_cuda_new(ctx, &L, &plans[c]));
    const size_t maxtok = *std::max_element(toks.begin(), toks.end());
    std::vector<float> xf(maxtok * n);
    std::vector<__half> xh(maxtok * n);
    std::vector<uint16_t> xb(maxtok * n);
    for (size_t i = 0; i < maxtok * n; i++) {
        xh[i] = __float2half_rn(2.0f * (float)br_rng_unit(&rng) - 1.0f);
        xf[i] = __half2float(xh[i]);
        uint32_t u;
        memcpy(&u, &xf[i], 4);
        xb[i] = (uint16_t)(u >> 16); /* the bf16 runs' input: xf truncated to bf16 */
    }
    void *dx, *dxb, *dy;
    CUDA_OK(cudaMalloc(&dx, maxtok * n * 2));
    CUDA_OK(cudaMalloc(&dxb, maxtok * n * 2));
    CUDA_OK(cudaMalloc(&dy, maxtok * m * 2));
    CUDA_OK(cudaMemcpy(dx, xh.data(), maxtok * n * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dxb, xb.data(), maxtok * n * 2, cudaMemcpyHostToDevice));
    BR_OK_OR_DIE(ctx, br_ctx_set_stream(ctx, stream));

    /* dense peer: copies of W so that a graph reads ≥ 2 × L2 */
    const size_t wbytes = m * n * 2;
    const int dcopies = (int)std::max<double>(2.0, ceil(2.0 * l2 / (double)wbytes));
    std::vector<void *> W(dcopies);
    {
        std::vector<__half> wh(m * n);
        for (size_t i = 0; i < m * n; i++)
            wh[i] = __float2half_rn((2.0f * (float)br_rng_unit(&rng) - 1.0f) * 0.02f);
        for (int c = 0; c < dcopies; c++) {
            CUDA_OK(cudaMalloc(&W[c], wbytes));
            CUDA_OK(cudaMemcpy(W[c], wh.data(), wbytes, cudaMemcpyHostToDevice));
        }
    }
    CUBLAS_OK(cublasSetStream(blas, stream));

    const size_t nsample = std::min<size_t>(64, m);
    std::vector<size_t> rows(nsample);
    for (size_t i = 0; i < nsample; i++)
        rows[i] = i * m / nsample + (m / nsample) / 2 % m;
    for (size_t ntok : toks)
        for (int bf = 0; bf < 2; bf++) {
            if (bf && ntok > 16) continue;
            const br_act_type type = bf ? BR_ACT_BF16 : BR_ACT_F16;
            const void *xin = bf ? dxb : dx;
            /* check: sampled outputs of the first and last token */
            BR_OK_OR_DIE(ctx, br_blr_infer_cuda_run(plans[0], type, xin, ntok, nullptr, dy));
            CUDA_OK(cudaStreamSynchronize(stream));
            std::vector<uint16_t> y(ntok * m);
            CUDA_OK(cudaMemcpy(y.data(), dy, ntok * m * 2, cudaMemcpyDeviceToHost));
            const char *kernel = br_blr_infer_cuda_kernel(plans[0]);
            for (size_t t : {(size_t)0, ntok - 1}) {
                std::vector<float> xt(n);
                for (size_t j = 0; j < n; j++) {
                    uint32_t u = (uint32_t)(bf ? xb[t * n + j] : 0) << 16;
                    float bv;
                    memcpy(&bv, &u, 4);
                    xt[j] = bf ? bv : xf[t * n + j];
                }
                std::vector<double> ref(nsample);
                reference_rows(L, xt.data(), rows.data(), nsample, ref.data());
                double ymax = 0, emax = 0;
                for (size_t i = 0; i < nsample; i++) {
                    const uint16_t h = y[t * m + rows[i]];
                    float got;
                    if (bf) {
                        uint32_t u = (uint32_t)h << 16;
                        memcpy(&got, &u, 4);
                    } else {
                        got = __half2float(__ushort_as_half(h));
                    }
                    ymax = std::max(ymax, fabs(ref[i]));
                    const double e = fabs((double)got - ref[i]);
                    emax = std::isnan(e) ? INFINITY : std::max(emax, e);
                }
                if (!(emax <= 1e-2 * ymax)) {
                    g_failures++;
                    fprintf(stderr,
                            "CHECK FAILED %zux%zu r%zu %s ntok %zu (%s) token %zu: max err %.3g, "
                            "max |y| %.3g\n",
                            m, n, r, bf ? "bf16" : "f16", ntok, kernel, t, emax, ymax);
                }
            }
            /* ours: one run per plan copy per graph (prefill: 4 copies, its time is the
             * GEMMs' arithmetic, and each copy holds scratch for the tokens); each copy
             * runs once before the capture (a first prefill run grows its scratch) */
            const int per = ntok > 64 ? std::min(copies, 4) : copies;
            for (int i = 0; i < per; i++)
                BR_OK_OR_DIE(ctx, br_blr_infer_cuda_run(plans[i], type, xin, ntok, nullptr, dy));
            const double us = time_graph(stream, per, [&](int i) {
                BR_OK_OR_DIE(ctx, br_blr_infer_cuda_run(plans[i % copies], type, xin, ntok,
                                                        nullptr, dy));
            });
            /* cuBLAS: y [ntok][m] = x [ntok][n] · Wᵀ, column-major Yᵀ = Wᵀᵀ·Xᵀ */
            double cb = NAN;
            if (!bf) {
                const float one = 1.0f, zero = 0.0f;
                cb = time_graph(stream, dcopies * 4, [&](int i) {
                    CUBLAS_OK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)ntok,
                                           (int)n, &one, W[i % dcopies], CUDA_R_16F, (int)n, dx,
                                           CUDA_R_16F, (int)n, &zero, dy, CUDA_R_16F, (int)m,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                });
            }
            g_rows.push_back({m, n, r, ntok, bpw, bf ? "bf16" : "f16", kernel, us, cb,
                              bits_bytes / 1e6});
            printf("{\"bench\":\"infer_cuda\",\"m\":%zu,\"n\":%zu,\"r\":%zu,\"paths\":2,"
                   "\"bpw\":%.3f,\"tokens\":%zu,\"type\":\"%s\",\"kernel\":\"%s\",\"us\":%.3f,"
                   "\"cublas_us\":%.3f,\"speedup\":%.3f,\"gbps\":%.1f,\"plan_mb\":%.2f}\n",
                   m, n, r, br_blr_bpw(m, n, r, 2), ntok, bf ? "bf16" : "f16", kernel, us, cb,
                   cb / us, bits_bytes / (us * 1e3), br_blr_infer_cuda_bytes(plans[0]) / 1e6);
            fflush(stdout);
        }
    BR_OK_OR_DIE(ctx, br_ctx_use_own_stream(ctx));
    for (auto *p : plans)
        br_blr_infer_cuda_free(p);
    for (void *p : W)
        CUDA_OK(cudaFree(p));
    CUDA_OK(cudaFree(dx));
    CUDA_OK(cudaFree(dxb));
    CUDA_OK(cudaFree(dy));
    br_blr_host_free(&L);
}

} // namespace

int main(int argc, char **argv) {
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            g_runs = std::max(1, atoi(argv[++i]));
        else if (!strcmp(argv[i], "--quick"))
            quick = true;
        else {
            fprintf(stderr, "usage: bench_infer_cuda [--runs N] [--quick]\n");
            return 2;
        }
    }
    br_ctx *ctx = nullptr;
    char err[256];
    if (br_ctx_new("cuda", &ctx, err, sizeof err) != BR_OK) {
        fprintf(stderr, "bench_infer_cuda: no CUDA device: %s\n", err);
        return 2;
    }
    int dev = 0;
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaGetDeviceProperties(&prop, dev));
    fprintf(stderr, "bench_infer_cuda on %s\n", br_ctx_device(ctx));
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cublasHandle_t blas;
    CUBLAS_OK(cublasCreate(&blas));
    const size_t shapes[][2] = {{11008, 4096}, {4096, 4096}, {4096, 11008}};
    std::vector<double> bpws = {1.0};
    if (!quick) bpws.push_back(0.55), bpws.push_back(0.1);
    const std::vector<size_t> toks = {1, 8, 16, 64, 4096};
    for (double bpw : bpws)
        for (auto &s : shapes)
            bench_shape(ctx, blas, stream, s[0], s[1], bpw, toks, (size_t)prop.l2CacheSize);
    fprintf(stderr, "\n%-12s %5s %5s %5s %5s %-8s %10s %10s %7s %9s\n", "m x n", "bpw", "r",
            "ntok", "type", "kernel", "ours us", "cuBLAS us", "ratio", "bits GB/s");
    for (const Row &w : g_rows) {
        char shape[32];
        snprintf(shape, sizeof shape, "%zux%zu", w.m, w.n);
        fprintf(stderr, "%-12s %5.2f %5zu %5zu %5s %-8s %10.2f %10.2f %7.2f %9.0f\n", shape, w.bpw,
                w.r, w.ntok, w.type, w.kernel, w.us, w.cublas_us, w.cublas_us / w.us,
                w.bits_mb * 1e3 / w.us);
    }
    cublasDestroy(blas);
    CUDA_OK(cudaStreamDestroy(stream));
    br_ctx_free(ctx);
    if (g_failures) fprintf(stderr, "bench_infer_cuda: %d checks FAILED\n", g_failures);
    return g_failures ? 1 : 0;
}
