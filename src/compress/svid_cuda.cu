// Dual-SVID on a CUDA context: the truncated SVD, the expensive part, runs on the
// GPU (cuBLAS GEMMs + cuSOLVER QR and SVD); signs and rank-1 magnitudes stay on the
// host (svid.c), so both devices share one definition of the initialization.
//
// Randomized range finder on M = Wᵀ, which is W [m][n] row-major read as a
// column-major n×m matrix (no transpose needed):
//     Y = M·Ω (n×l), Q = qr(Y); twice: Z = qr(Mᵀ·Y), Y = qr(M·Z)
//     B = Yᵀ·M (l×m);  Bᵀ = U_B·S·V_Bᵀ (cusolverDnSgesvd needs rows ≥ cols)
//     M ≈ (Y·V_B)·S·U_Bᵀ   so   W = Mᵀ ≈ U_B·S·(Y·V_B)ᵀ
// i.e. W's left singular vectors are U_B (m×k), its right ones Y·V_B (n×k).
#include <cublas_v2.h>
#include <cusolverDn.h>

#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "compress/compress.h"
#include "core/rng.h"

namespace {

const char *cublas_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    default: return "cuBLAS error";
    }
}

#define SVD_CUBLAS(call)                                                                           \
    do {                                                                                           \
        cublasStatus_t e_ = (call);                                                                \
        if (e_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            st = br_fail(ctx, BR_E_DEVICE, "Dual-SVID on the GPU: %s failed: %s (%d)", #call,      \
                         cublas_name(e_), (int)e_);                                                \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)
#define SVD_CUSOLVER(call)                                                                         \
    do {                                                                                           \
        cusolverStatus_t e_ = (call);                                                              \
        if (e_ != CUSOLVER_STATUS_SUCCESS) {                                                       \
            st = br_fail(ctx, BR_E_DEVICE, "Dual-SVID on the GPU: %s failed (cuSOLVER %d)", #call, \
                         (int)e_);                                                                 \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)
#define SVD_CUDA(call)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            st = br_cuda_check(ctx, e_, #call, __FILE__, __LINE__);                                \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

const int kPowerIters = 2;

// Device buffers of one SVD, freed together.
struct svd_bufs {
    float *m = nullptr, *omega = nullptr, *y = nullptr, *z = nullptr, *b = nullptr, *bt = nullptr,
          *s = nullptr, *ub = nullptr, *vbt = nullptr, *v = nullptr, *tau = nullptr,
          *work = nullptr;
    int *info = nullptr;
};

void free_bufs(svd_bufs &d) {
    float *all[] = {d.m, d.omega, d.y, d.z, d.b, d.bt, d.s, d.ub, d.vbt, d.v, d.tau, d.work};
    for (float *p : all)
        cudaFree(p);
    cudaFree(d.info);
}

// Orthonormal columns of a (rows × cols, column-major, rows ≥ cols), in place.
br_status qr_inplace(br_ctx *ctx, cusolverDnHandle_t sol, cudaStream_t stream, float *a, int rows,
                     int cols, float *tau, float *work, int lwork, int *info) {
    br_status st = BR_OK;
    int host_info = 0;
    SVD_CUSOLVER(cusolverDnSgeqrf(sol, rows, cols, a, rows, tau, work, lwork, info));
    SVD_CUSOLVER(cusolverDnSorgqr(sol, rows, cols, cols, a, rows, tau, work, lwork, info));
    // on the solver's stream: the context's stream is non-blocking, so a plain
    // cudaMemcpy (legacy default stream) would not wait for the QR
    SVD_CUDA(cudaMemcpyAsync(&host_info, info, sizeof host_info, cudaMemcpyDeviceToHost, stream));
    SVD_CUDA(cudaStreamSynchronize(stream));
    if (host_info != 0)
        st = br_fail(ctx, BR_E_DEVICE, "Dual-SVID on the GPU: QR of %d×%d failed (info %d)", rows,
                     cols, host_info);
done:
    return st;
}

// The k leading singular triplets of w [m][n] (host, row-major).
br_status cuda_svd_topk(br_ctx *ctx, const float *w, size_t m, size_t n, size_t k, uint64_t seed,
                        float *u, float *s, float *v) {
    br_status st = BR_OK;
    size_t mn = m < n ? m : n;
    size_t l = k + br_svid_oversample(k);
    if (l > mn) l = mn;
    const int R = (int)n, C = (int)m, L = (int)l, K = (int)k; // M = Wᵀ is R × C
    const float one = 1.0f, zero = 0.0f;
    cublasHandle_t blas = nullptr;
    cusolverDnHandle_t sol = nullptr;
    svd_bufs d;
    float *host_omega = nullptr, *host_ub = nullptr, *host_v = nullptr;
    int lwork = 0, lw = 0, host_info = 0;
    cudaStream_t stream = br_cuda_state(ctx)->stream;

    if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
        st = br_fail(ctx, BR_E_DEVICE, "Dual-SVID on the GPU: cublasCreate failed");
        goto done;
    }
    if (cusolverDnCreate(&sol) != CUSOLVER_STATUS_SUCCESS) {
        st = br_fail(ctx, BR_E_DEVICE, "Dual-SVID on the GPU: cusolverDnCreate failed");
        goto done;
    }
    SVD_CUBLAS(cublasSetStream(blas, stream));
    SVD_CUSOLVER(cusolverDnSetStream(sol, stream));
    SVD_CUDA(cudaMalloc(&d.m, m * n * sizeof(float)));
    SVD_CUDA(cudaMalloc(&d.omega, (size_t)C * l * sizeof(float)));
    SVD_CUDA(cudaMalloc(&d.y, (size_t)R * l * sizeof(float)));
    SVD_CUDA(cudaMalloc(&d.z, (size_t)C * l * sizeof(float)));
    SVD_CUDA(cudaMalloc(&d.b, l * (size_t)C * sizeof(float)));
    SVD_CUDA(cudaMalloc(&d.bt, (size_t)C * l * sizeof(float)));
    SVD_CUDA(cudaMalloc(&d.s, l * sizeof(float)));
    SVD_CUDA(cudaMalloc(&d.ub, (size_t)C * l * sizeof(float)));
    SVD_CUDA(cudaMalloc(&d.vbt, l * l * sizeof(float)));
    SVD_CUDA(cudaMalloc(&d.v, (size_t)R * k * sizeof(float)));
    SVD_CUDA(cudaMalloc(&d.tau, l * sizeof(float)));
    SVD_CUDA(cudaMalloc(&d.info, sizeof(int)));
    // workspace: the largest of the QRs (R × l and C × l) and the SVD of Bᵀ (C × l)
    SVD_CUSOLVER(cusolverDnSgeqrf_bufferSize(sol, R > C ? R : C, L, d.y, R > C ? R : C, &lw));
    lwork = lw;
    SVD_CUSOLVER(
        cusolverDnSorgqr_bufferSize(sol, R > C ? R : C, L, L, d.y, R > C ? R : C, d.tau, &lw));
    if (lw > lwork) lwork = lw;
    SVD_CUSOLVER(cusolverDnSgesvd_bufferSize(sol, C, L, &lw));
    if (lw > lwork) lwork = lw;
    SVD_CUDA(cudaMalloc(&d.work, (size_t)lwork * sizeof(float)));

    // Ω from the host generator, so CPU and GPU initializations draw the same test
    // matrix for a seed
    host_omega = (float *)malloc((size_t)C * l * sizeof(float));
    host_ub = (float *)malloc((size_t)C * k * sizeof(float));
    host_v = (float *)malloc((size_t)R * k * sizeof(float));
    if (!host_omega || !host_ub || !host_v) {
        st = br_fail(ctx, BR_E_NOMEM, "Dual-SVID on the GPU: out of host memory");
        goto done;
    }
    {
        br_rng rng;
        br_rng_seed(&rng, seed ^ 0x5D1Dull);
        for (size_t i = 0; i < (size_t)C * l; i++)
            host_omega[i] = (float)br_rng_normal(&rng);
    }
    SVD_CUDA(cudaMemcpyAsync(d.m, w, m * n * sizeof(float), cudaMemcpyHostToDevice, stream));
    SVD_CUDA(cudaMemcpyAsync(d.omega, host_omega, (size_t)C * l * sizeof(float),
                             cudaMemcpyHostToDevice, stream));
    // Y = M·Ω (R × l)
    SVD_CUBLAS(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, R, L, C, &one, d.m, R, d.omega, C, &zero,
                           d.y, R));
    if ((st = qr_inplace(ctx, sol, stream, d.y, R, L, d.tau, d.work, lwork, d.info))) goto done;
    for (int it = 0; it < kPowerIters; it++) {
        // Z = Mᵀ·Y (C × l), Y = M·Z
        SVD_CUBLAS(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, C, L, R, &one, d.m, R, d.y, R, &zero,
                               d.z, C));
        if ((st = qr_inplace(ctx, sol, stream, d.z, C, L, d.tau, d.work, lwork, d.info))) goto done;
        SVD_CUBLAS(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, R, L, C, &one, d.m, R, d.z, C, &zero,
                               d.y, R));
        if ((st = qr_inplace(ctx, sol, stream, d.y, R, L, d.tau, d.work, lwork, d.info))) goto done;
    }
    // Bᵀ = Mᵀ·Y (C × l) directly, the operand of the SVD
    SVD_CUBLAS(
        cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, C, L, R, &one, d.m, R, d.y, R, &zero, d.bt, C));
    // Bᵀ = U_B·S·V_Bᵀ: U_B C × l, V_Bᵀ l × l
    SVD_CUSOLVER(cusolverDnSgesvd(sol, 'S', 'S', C, L, d.bt, C, d.s, d.ub, C, d.vbt, L, d.work,
                                  lwork, nullptr, d.info));
    SVD_CUDA(cudaMemcpyAsync(&host_info, d.info, sizeof host_info, cudaMemcpyDeviceToHost, stream));
    SVD_CUDA(cudaStreamSynchronize(stream));
    if (host_info != 0) {
        st = br_fail(ctx, BR_E_DEVICE,
                     "Dual-SVID on the GPU: SVD of %d×%d did not converge "
                     "(info %d)",
                     C, L, host_info);
        goto done;
    }
    // right vectors of W: Y·V_B, the first k columns: (R × l)·(l × k) with V_B = (V_Bᵀ)ᵀ
    SVD_CUBLAS(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, R, K, L, &one, d.y, R, d.vbt, L, &zero,
                           d.v, R));
    SVD_CUDA(cudaMemcpyAsync(s, d.s, k * sizeof(float), cudaMemcpyDeviceToHost, stream));
    SVD_CUDA(cudaMemcpyAsync(host_ub, d.ub, (size_t)C * k * sizeof(float), cudaMemcpyDeviceToHost,
                             stream));
    SVD_CUDA(cudaMemcpyAsync(host_v, d.v, (size_t)R * k * sizeof(float), cudaMemcpyDeviceToHost,
                             stream));
    SVD_CUDA(cudaStreamSynchronize(stream));
    // column-major → the row-major u [m][k], v [n][k] of the host code
    for (size_t i = 0; i < m; i++)
        for (size_t c = 0; c < k; c++)
            u[i * k + c] = host_ub[c * m + i];
    for (size_t j = 0; j < n; j++)
        for (size_t c = 0; c < k; c++)
            v[j * k + c] = host_v[c * n + j];
done:
    free_bufs(d);
    if (sol) cusolverDnDestroy(sol);
    if (blas) cublasDestroy(blas);
    free(host_omega);
    free(host_ub);
    free(host_v);
    return st;
}

} // namespace

extern "C" br_status br_svid_init_device(br_ctx *ctx, const float *w, const double *gram,
                                         uint64_t seed, br_blr_host *L, br_svid_factors *factors) {
    if (strcmp(br_ctx_backend(ctx), "cuda") != 0)
        return br_fail(ctx, BR_E_UNSUPPORTED, "Dual-SVID: no device initialization on %s",
                       br_ctx_backend(ctx));
    size_t mn = L->m < L->n ? L->m : L->n;
    if (L->m > (size_t)INT32_MAX / 4 || L->n > (size_t)INT32_MAX / 4 ||
        L->m * L->n > (size_t)INT32_MAX || mn < 1)
        return br_fail(ctx, BR_E_UNSUPPORTED, "Dual-SVID on the GPU: [%zu][%zu] is too large", L->m,
                       L->n);
    return br_svid_init_with(ctx, w, gram, seed, L, factors, cuda_svd_topk);
}
