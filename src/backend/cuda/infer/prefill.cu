/* The prefill path of the CUDA inference plan: many tokens at once through the
 * library's bitmap GEMMs (gemm/: the wgmma kernels on Hopper, mma.sync elsewhere),
 * whose ±1 operand is expanded from the bitmap inside the GEMM, so no plane of the
 * matrix is ever stored. For a pass of ntok tokens:
 *
 *   stage_x   xs_p [ntok][n32] = f16(g_p ⊙ x)                 (all paths, one launch)
 *   per path  T [ntok][r] = (xs_p · S_V,p) ⊙ ℓ_p               (BR_BITS_COLS, colscale ℓ)
 *             T16_p [ntok][r32] = f16(T)                        (stage_t)
 *   per path  Y [ntok][m] = (T16_p · S_U,pᵀ) ⊙ h_p (+ Y)        (BR_BITS_ROWS, colscale h,
 *                                                               c = Y from the second path)
 *   finish    y = type(Y + bias)
 *
 * The GEMMs take their k in multiples of 32, so xs and T16 carry zero columns up to
 * n32 and r32 (and S_V zero rows past n). No split-K (no workspace): a pass never
 * allocates, and its sums have one fixed order. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/gemm/common.cuh"
#include "infer/blr_infer_cuda.h"

namespace {

template <bool kBF> __device__ __forceinline__ float to_f32(uint16_t h) {
    if (kBF) return __uint_as_float((uint32_t)h << 16);
    return __half2float(__ushort_as_half(h));
}

/* xs[p][t][j] = f16(g_p[j]·x[t][j]) for j < n, 0 for n ≤ j < n32; path p's rows at
 * p·cap·n32 */
template <bool kBF>
__global__ void __launch_bounds__(256)
    stage_x_kernel(const uint16_t *x, const float *g, uint16_t *xs, int paths, int ntok, int n,
                   int n32, long long cap) {
    const long long per_path = (long long)ntok * n32, items = per_path * paths;
    for (long long it = blockIdx.x * (long long)blockDim.x + threadIdx.x; it < items;
         it += (long long)gridDim.x * blockDim.x) {
        const int p = (int)(it / per_path), j = (int)(it % n32);
        const long long t = it % per_path / n32;
        float v = 0.f;
        if (j < n) v = __fmul_rn(g[(size_t)p * n + j], to_f32<kBF>(x[t * n + j]));
        xs[(p * cap + t) * n32 + j] = __half_as_ushort(__float2half_rn(v));
    }
}

/* t16[t][k] = f16(t32[t][k]) for k < r, 0 for r ≤ k < r32 */
__global__ void __launch_bounds__(256)
    stage_t_kernel(const float *t32, uint16_t *t16, int ntok, int r, int r32) {
    const long long items = (long long)ntok * r32;
    for (long long it = blockIdx.x * (long long)blockDim.x + threadIdx.x; it < items;
         it += (long long)gridDim.x * blockDim.x) {
        const int k = (int)(it % r32);
        const long long t = it / r32;
        t16[it] = __half_as_ushort(__float2half_rn(k < r ? t32[t * r + k] : 0.f));
    }
}

/* y[t][i] = type(y32[t][i] + bias[i]) */
template <bool kBF>
__global__ void __launch_bounds__(256)
    finish_kernel(const float *y32, const uint16_t *bias, uint16_t *y, long long items, int m) {
    for (long long it = blockIdx.x * (long long)blockDim.x + threadIdx.x; it < items;
         it += (long long)gridDim.x * blockDim.x) {
        float v = y32[it];
        if (bias) v = __fadd_rn(v, to_f32<kBF>(bias[it % m]));
        y[it] = kBF ? __bfloat16_as_ushort(__float2bfloat16_rn(v))
                    : __half_as_ushort(__float2half_rn(v));
    }
}

/* out [ntok][n_out] (row stride ldo) = (act [ntok][k] · planeᵀ) ⊙ colscale (+ c) */
br_status gemm(br_ctx *ctx, const uint16_t *act, const uint32_t *bits, br_gemm_cuda::PlaneKind kind,
               int words, float *out, const float *colscale, const float *c, int ntok, int n_out,
               int k) {
    br_gemm_cuda::Problem p;
    p.act = act;
    p.plane = bits;
    p.out = out;
    p.colscale = colscale;
    p.c = c;
    p.ldo = n_out;
    p.lda = k;
    p.m = ntok, p.n = n_out, p.k = k;
    p.words = words;
    p.kind = kind;
    p.oscale = 1.0f;
    p.beta = c ? 1.0f : 0.0f;
    p.splits = 1;
    p.ws = nullptr;
    p.ws_bytes = 0;
    return br_gemm_cuda::run_problem(ctx, p, 0, "infer prefill", br_gemm_cuda::FAMILY_AUTO,
                                     br_gemm_cuda::TILE_AUTO, br_gemm_cuda::A_AUTO);
}

} // namespace

extern "C" br_status br_ic_prefill(br_ctx *ctx, const br_ic_pre *p, br_act_type type,
                                   const void *x, size_t ntok, const void *bias, void *y) {
    br_cuda *s = br_cuda_state(ctx);
    const bool bf = type == BR_ACT_BF16;
    const int nt = (int)ntok, P = p->paths, words = p->r32 / 32;
    const uint16_t *x16 = static_cast<const uint16_t *>(x);
    const size_t nx = (size_t)P * ntok * p->n32;
    if (bf)
        stage_x_kernel<true><<<br_cuda_blocks(ctx, nx, 256), 256, 0, s->stream>>>(
            x16, p->g, p->xs, P, nt, p->n, p->n32, (long long)p->cap);
    else
        stage_x_kernel<false><<<br_cuda_blocks(ctx, nx, 256), 256, 0, s->stream>>>(
            x16, p->g, p->xs, P, nt, p->n, p->n32, (long long)p->cap);
    BR_CUDA_LAUNCHED(ctx, "stage_x_kernel");
    for (int q = 0; q < P; q++) {
        BR_TRY(gemm(ctx, p->xs + (size_t)q * p->cap * p->n32, p->bits_v + (size_t)q * p->n32 * words,
                    br_gemm_cuda::PLANE_COLS, words, p->t32, p->l + (size_t)q * p->r, nullptr, nt,
                    p->r, p->n32));
        const size_t nt16 = ntok * (size_t)p->r32;
        stage_t_kernel<<<br_cuda_blocks(ctx, nt16, 256), 256, 0, s->stream>>>(
            p->t32, p->t16 + (size_t)q * p->cap * p->r32, nt, p->r, p->r32);
        BR_CUDA_LAUNCHED(ctx, "stage_t_kernel");
    }
    for (int q = 0; q < P; q++)
        BR_TRY(gemm(ctx, p->t16 + (size_t)q * p->cap * p->r32, p->bits_u + (size_t)q * p->m * words,
                    br_gemm_cuda::PLANE_ROWS, words, p->y32, p->h + (size_t)q * p->m,
                    q ? p->y32 : nullptr, nt, p->m, p->r32));
    const long long ny = (long long)ntok * p->m;
    const uint16_t *b16 = static_cast<const uint16_t *>(bias);
    uint16_t *y16 = static_cast<uint16_t *>(y);
    if (bf)
        finish_kernel<true><<<br_cuda_blocks(ctx, (size_t)ny, 256), 256, 0, s->stream>>>(
            p->y32, b16, y16, ny, p->m);
    else
        finish_kernel<false><<<br_cuda_blocks(ctx, (size_t)ny, 256), 256, 0, s->stream>>>(
            p->y32, b16, y16, ny, p->m);
    BR_CUDA_LAUNCHED(ctx, "finish_kernel");
    return BR_OK;
}
