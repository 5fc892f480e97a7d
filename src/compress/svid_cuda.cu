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

#include "backend/cuda/cuda_handles.h"
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

// Device buffers of one SVD: views into the session's arena.
struct svd_bufs {
    float *m, *omega, *y, *z, *bt, *s, *ub, *vbt, *v, *tau;
};

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

// Floats of a sub-buffer rounded up to 256 bytes, so every view stays aligned.
size_t aligned_floats(size_t n) { return (n + 63) / 64 * 64; }

} // namespace

// The handles and buffers of the Dual-SVIDs of one job on one context: the handles
// are made once (their creation, with the libraries' module loads, cost more than a
// small layer's whole SVD), the buffers grow to the largest layer and are reused.
struct br_svid_device {
    br_ctx *ctx;
    cublasHandle_t blas;
    cusolverDnHandle_t sol;
    float *arena; // the SVD's matrices (svd_bufs), arena_floats long
    size_t arena_floats;
    float *work; // cuSOLVER's workspace, work_floats long
    size_t work_floats;
    int *info;
};

namespace {

// At least `floats` floats in *buf (cap: its size), keeping nothing: the old
// contents are dead between two SVDs.
br_status ensure(br_ctx *ctx, float **buf, size_t *cap, size_t floats) {
    br_status st = BR_OK;
    if (*cap >= floats) return BR_OK;
    if (*buf) SVD_CUDA(cudaFree(*buf));
    *buf = nullptr;
    *cap = 0;
    SVD_CUDA(cudaMalloc(buf, floats * sizeof(float)));
    *cap = floats;
done:
    return st;
}

// The k leading singular triplets of w [m][n] (host, row-major).
br_status cuda_svd_topk(br_ctx *ctx, const float *w, size_t m, size_t n, size_t k, uint64_t seed,
                        float *u, float *s, float *v, void *user) {
    br_svid_device *dev = (br_svid_device *)user;
    br_status st = BR_OK;
    size_t mn = m < n ? m : n;
    size_t l = k + br_svid_oversample(k);
    if (l > mn) l = mn;
    const int R = (int)n, C = (int)m, L = (int)l, K = (int)k; // M = Wᵀ is R × C
    const float one = 1.0f, zero = 0.0f;
    cublasHandle_t blas = dev->blas;
    cusolverDnHandle_t sol = dev->sol;
    svd_bufs d;
    float *host_omega = nullptr, *host_ub = nullptr, *host_v = nullptr;
    int lwork = 0, lw = 0, host_info = 0;
    cudaStream_t stream = br_cuda_current_stream(ctx); // also makes ctx's GPU current
    // the arena's views, in order, each 256-byte aligned
    const size_t sizes[10] = {m * n, (size_t)C * l, (size_t)R * l, (size_t)C * l, (size_t)C * l,
                              l,     (size_t)C * l, l * l,         (size_t)R * k, l};
    float **views[10] = {&d.m, &d.omega, &d.y, &d.z, &d.bt, &d.s, &d.ub, &d.vbt, &d.v, &d.tau};
    size_t total = 0;
    for (int i = 0; i < 10; i++)
        total += aligned_floats(sizes[i]);
    if ((st = ensure(ctx, &dev->arena, &dev->arena_floats, total))) goto done;
    total = 0;
    for (int i = 0; i < 10; i++) {
        *views[i] = dev->arena + total;
        total += aligned_floats(sizes[i]);
    }
    // the handles follow the context's stream as it is now (br_ctx_set_stream may
    // have changed it since they were made)
    SVD_CUBLAS(cublasSetStream(blas, stream));
    SVD_CUSOLVER(cusolverDnSetStream(sol, stream));
    // workspace: the largest of the QRs (R × l and C × l) and the SVD of Bᵀ (C × l)
    SVD_CUSOLVER(cusolverDnSgeqrf_bufferSize(sol, R > C ? R : C, L, d.y, R > C ? R : C, &lw));
    lwork = lw;
    SVD_CUSOLVER(
        cusolverDnSorgqr_bufferSize(sol, R > C ? R : C, L, L, d.y, R > C ? R : C, d.tau, &lw));
    if (lw > lwork) lwork = lw;
    SVD_CUSOLVER(cusolverDnSgesvd_bufferSize(sol, C, L, &lw));
    if (lw > lwork) lwork = lw;
    if ((st = ensure(ctx, &dev->work, &dev->work_floats, (size_t)lwork))) goto done;
    lwork = dev->work_floats > (size_t)INT32_MAX ? INT32_MAX : (int)dev->work_floats;

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
    if ((st = qr_inplace(ctx, sol, stream, d.y, R, L, d.tau, dev->work, lwork, dev->info)))
        goto done;
    for (int it = 0; it < kPowerIters; it++) {
        // Z = Mᵀ·Y (C × l), Y = M·Z
        SVD_CUBLAS(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, C, L, R, &one, d.m, R, d.y, R, &zero,
                               d.z, C));
        if ((st = qr_inplace(ctx, sol, stream, d.z, C, L, d.tau, dev->work, lwork, dev->info)))
            goto done;
        SVD_CUBLAS(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, R, L, C, &one, d.m, R, d.z, C, &zero,
                               d.y, R));
        if ((st = qr_inplace(ctx, sol, stream, d.y, R, L, d.tau, dev->work, lwork, dev->info)))
            goto done;
    }
    // Bᵀ = Mᵀ·Y (C × l) directly, the operand of the SVD
    SVD_CUBLAS(
        cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, C, L, R, &one, d.m, R, d.y, R, &zero, d.bt, C));
    // Bᵀ = U_B·S·V_Bᵀ: U_B C × l, V_Bᵀ l × l
    SVD_CUSOLVER(cusolverDnSgesvd(sol, 'S', 'S', C, L, d.bt, C, d.s, d.ub, C, d.vbt, L, dev->work,
                                  lwork, nullptr, dev->info));
    SVD_CUDA(
        cudaMemcpyAsync(&host_info, dev->info, sizeof host_info, cudaMemcpyDeviceToHost, stream));
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
    // a failed SVD may leave work queued on the stream: wait for it before the
    // buffers are reused or freed (a status already set is kept)
    if (st) {
        cudaStreamSynchronize(stream);
        cudaGetLastError(); // not left for the next launch check to misreport
    }
    free(host_omega);
    free(host_ub);
    free(host_v);
    return st;
}

} // namespace

extern "C" br_status br_svid_device_new(br_ctx *ctx, br_svid_device **out) {
    *out = nullptr;
    if (strcmp(br_ctx_backend(ctx), "cuda") != 0)
        return br_fail(ctx, BR_E_UNSUPPORTED, "Dual-SVID: no device initialization on %s",
                       br_ctx_backend(ctx));
    br_svid_device *dev = (br_svid_device *)calloc(1, sizeof *dev);
    if (!dev) return br_fail(ctx, BR_E_NOMEM, "Dual-SVID on the GPU: out of host memory");
    dev->ctx = ctx;
    br_status st = BR_OK;
    cudaStream_t stream = br_cuda_current_stream(ctx); // handles belong to the current GPU
    if (cublasCreate(&dev->blas) != CUBLAS_STATUS_SUCCESS) {
        dev->blas = nullptr;
        st = br_fail(ctx, BR_E_DEVICE, "Dual-SVID on the GPU: cublasCreate failed");
        goto done;
    }
    if (cusolverDnCreate(&dev->sol) != CUSOLVER_STATUS_SUCCESS) {
        dev->sol = nullptr;
        st = br_fail(ctx, BR_E_DEVICE, "Dual-SVID on the GPU: cusolverDnCreate failed");
        goto done;
    }
    SVD_CUBLAS(cublasSetStream(dev->blas, stream));
    SVD_CUSOLVER(cusolverDnSetStream(dev->sol, stream));
    SVD_CUDA(cudaMalloc(&dev->info, sizeof(int)));
done:
    if (st) {
        br_svid_device_free(dev);
        return st;
    }
    *out = dev;
    return BR_OK;
}

extern "C" void br_svid_device_free(br_svid_device *dev) {
    if (!dev) return;
    br_cuda_current_stream(dev->ctx); // its GPU current, as when they were made
    cudaFree(dev->arena);
    cudaFree(dev->work);
    cudaFree(dev->info);
    if (dev->sol) cusolverDnDestroy(dev->sol);
    if (dev->blas) cublasDestroy(dev->blas);
    cudaGetLastError(); // a failed free is not the next launch's error
    free(dev);
}

/* The device SVD's index arithmetic is 32-bit: larger layers initialize on the host. */
static br_status device_fits(br_ctx *ctx, const br_blr_host *L) {
    size_t mn = L->m < L->n ? L->m : L->n;
    if (L->m > (size_t)INT32_MAX / 4 || L->n > (size_t)INT32_MAX / 4 ||
        L->m * L->n > (size_t)INT32_MAX || mn < 1)
        return br_fail(ctx, BR_E_UNSUPPORTED, "Dual-SVID on the GPU: [%zu][%zu] is too large", L->m,
                       L->n);
    return BR_OK;
}

extern "C" br_status br_svid_init_on(br_svid_device *dev, const float *w, const double *gram,
                                     br_gram_cache *gc, uint64_t seed, br_blr_host *L,
                                     br_svid_factors *factors) {
    BR_TRY(device_fits(dev->ctx, L));
    return br_svid_init_with(dev->ctx, w, gram, gc, seed, L, factors, cuda_svd_topk, dev);
}

extern "C" br_status br_svid_whitened_on(br_svid_device *dev, const float *w,
                                         const br_whitening *wh, uint64_t seed, br_blr_host *L,
                                         br_svid_factors *factors) {
    BR_TRY(device_fits(dev->ctx, L));
    return br_svid_whitened_with(dev->ctx, w, wh, seed, L, factors, cuda_svd_topk, dev);
}

extern "C" br_status br_svid_init_device(br_ctx *ctx, const float *w, const double *gram,
                                         uint64_t seed, br_blr_host *L, br_svid_factors *factors) {
    br_svid_device *dev = nullptr;
    BR_TRY(br_svid_device_new(ctx, &dev));
    br_status st = br_svid_init_on(dev, w, gram, NULL, seed, L, factors);
    br_svid_device_free(dev);
    return st;
}
