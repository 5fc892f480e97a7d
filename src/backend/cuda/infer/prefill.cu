/* The prefill path of the CUDA inference plan: many tokens at once through the
 * library's bitmap GEMMs (gemm/: the wgmma kernels on Hopper, mma.sync elsewhere),
 * whose ±1 operand is expanded from the bitmap inside the GEMM, so no plane of the
 * matrix is ever stored. For a pass of ntok tokens:
 *
 *   unpack    bits_v, bits_u: the plan's signs (the decode kernel's fragment order)
 *             as the bitmap GEMMs take them, in the context's workspace
 *   stage_x   xs_p [ntok][n32] = f16(g_p ⊙ x)                 (all paths, one launch)
 *   per path  T [ntok][r] = (xs_p · S_V,p) ⊙ ℓ_p               (BR_BITS_COLS, colscale ℓ)
 *             T16_p [ntok][r32] = f16(T)                        (stage_t)
 *   per path  Y [ntok][m] = (T16_p · S_U,pᵀ) ⊙ h_p (+ Y)        (BR_BITS_ROWS, colscale h,
 *                                                               c = Y from the second path)
 *   finish    y = type(Y + bias)
 *
 * The GEMMs take their k in multiples of 32, so xs and T16 carry zero columns up to
 * n32 and r32 (and S_V zero rows past n). No split-K: the pass's scratch is the
 * workspace, and its sums have one fixed order. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/gemm/common.cuh"
#include "infer/blr_infer_cuda.h"

namespace {

template <bool kBF> __device__ __forceinline__ float to_f32(uint16_t h) {
    if (kBF) return __uint_as_float((uint32_t)h << 16);
    return __half2float(__ushort_as_half(h));
}

/* The stored bit of (row16, col256) inside one packed unit of 16 rows × 256 columns
 * (the decode kernel's fragment order, infer/blr_infer_cuda.h), 1 for −1; which unit
 * is the caller's. */
__device__ __forceinline__ uint32_t packed_sign(const uint32_t *unit, int row16, int col256) {
    const int kk = col256 / 16, c16 = col256 % 16;
    const int g = row16 % 8, c = (c16 % 8) / 2, i = 2 * (c16 / 8) + row16 / 8;
    const int q = 4 * (kk % 4) + i, w = kk / 4;
    const uint32_t word = unit[(4 * g + c) * 4 + w];
    return (word >> ((c16 % 2 ? 31 : 15) - q)) & 1u;
}

/* The unpack kernels take one warp a job: the job's packed units (512 bytes each) are
 * read once, coalesced, into the warp's shared slice, and each lane assembles its
 * output words from there. kUnpackWords: the slice, two units. */
constexpr int kUnpackWarps = 8, kUnpackWords = 256;

/* bits_v[p][j][w] bit b = 1 for S_V,p[j][32w + b] = +1: from bits1, which packs
 * A = S_V,pᵀ (rows the latent index) in units [p][rt1][ku1]; latent rows past rt1·16
 * and inputs j ≥ n are zero. A job is (p, w, ku): word w's two row tiles 2w, 2w + 1 at
 * inputs ku·256 .. + 256, a lane's inputs lane, lane + 32, ... */
__global__ void __launch_bounds__(256) unpack_v_kernel(br_ic_dev d, int n32, int words,
                                                       uint32_t *bits_v) {
    __shared__ uint32_t slice[kUnpackWarps][kUnpackWords];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    uint32_t *u = slice[warp];
    const int kun = (n32 + 255) / 256; /* input units the output covers */
    const long long jobs = (long long)d.paths * words * kun;
    for (long long job = blockIdx.x * (long long)kUnpackWarps + warp; job < jobs;
         job += (long long)gridDim.x * kUnpackWarps) {
        const int ku = (int)(job % kun), w = (int)(job / kun % words), p = (int)(job / kun / words);
        __syncwarp();
        for (int e = lane; e < kUnpackWords; e += 32) {
            const int rt = 2 * w + e / 128;
            u[e] = rt < d.rt1 && ku < d.ku1
                       ? d.bits1[(((size_t)p * d.rt1 + rt) * d.ku1 + ku) * 128 + e % 128]
                       : 0u;
        }
        __syncwarp();
        for (int c = lane; c < 256; c += 32) {
            const int j = ku * 256 + c;
            if (j >= n32) break;
            uint32_t word = 0;
            if (j < d.n)
                for (int bit = 0; bit < 32; bit++) {
                    const int rt = 2 * w + bit / 16;
                    if (rt < d.rt1) word |= (packed_sign(u + (bit / 16) * 128, bit % 16, c) ^ 1u) << bit;
                }
            bits_v[((size_t)p * n32 + j) * words + w] = word;
        }
    }
}

/* bits_u[p][i][w] bit b = 1 for S_U,p[i][32w + b] = +1: from bits2, which packs
 * A = S_U,p in units [rt2][p][ku2]. A job is one unit: rows rt·16 .. + 16, words
 * ku·8 .. + 8; a lane's words are those of row lane / 2, four of them. */
__global__ void __launch_bounds__(256) unpack_u_kernel(br_ic_dev d, int words, uint32_t *bits_u) {
    __shared__ uint32_t slice[kUnpackWarps][kUnpackWords];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    uint32_t *u = slice[warp];
    const long long jobs = (long long)d.rt2 * d.paths * d.ku2;
    for (long long job = blockIdx.x * (long long)kUnpackWarps + warp; job < jobs;
         job += (long long)gridDim.x * kUnpackWarps) {
        const int ku = (int)(job % d.ku2), p = (int)(job / d.ku2 % d.paths),
                  rt = (int)(job / d.ku2 / d.paths);
        __syncwarp();
        for (int e = lane; e < 128; e += 32) u[e] = d.bits2[(size_t)job * 128 + e];
        __syncwarp();
        const int row16 = lane / 2, i = rt * 16 + row16;
        for (int q = 0; q < 4; q++) {
            const int wq = (lane % 2) * 4 + q, w = ku * 8 + wq;
            if (i >= d.m || w >= words) continue;
            uint32_t word = 0;
            for (int bit = 0; bit < 32; bit++)
                word |= (packed_sign(u, row16, wq * 32 + bit) ^ 1u) << bit;
            bits_u[((size_t)p * d.m + i) * words + w] = word;
        }
    }
}

/* xs[p][t][j] = f16(g_p[j]·x[t][j]) for j < n, 0 for n ≤ j < n32; path p's rows at
 * p·cap·n32. A thread takes 8 inputs (16 bytes of xs), loaded as vectors where n is a
 * multiple of 8 (x's rows and g 16-byte aligned). */
template <bool kBF>
__global__ void __launch_bounds__(256)
    stage_x_kernel(const uint16_t *x, const float *g, uint16_t *xs, int paths, int ntok, int n,
                   int n32, long long cap) {
    const int per_row = n32 / 8;
    const long long items = (long long)paths * ntok * per_row;
    const bool vec = n % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(g) % 16 == 0;
    for (long long it = blockIdx.x * (long long)blockDim.x + threadIdx.x; it < items;
         it += (long long)gridDim.x * blockDim.x) {
        const long long row = it / per_row; /* p·ntok + t */
        const int j0 = (int)(it - row * per_row) * 8, p = (int)(row / ntok);
        const long long t = row - (long long)p * ntok;
        const float *gp = g + (size_t)p * n;
        const uint16_t *xr = x + t * n;
        float v[8];
        if (vec && j0 + 8 <= n) {
            const uint4 xv = __ldg(reinterpret_cast<const uint4 *>(xr + j0));
            const float4 g0 = __ldg(reinterpret_cast<const float4 *>(gp + j0));
            const float4 g1 = __ldg(reinterpret_cast<const float4 *>(gp + j0 + 4));
            const uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w};
            const float gv[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
            for (int i = 0; i < 8; i++)
                v[i] = __fmul_rn(gv[i], to_f32<kBF>((uint16_t)(xw[i / 2] >> (16 * (i % 2)))));
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++)
                v[i] = j0 + i < n ? __fmul_rn(gp[j0 + i], to_f32<kBF>(xr[j0 + i])) : 0.f;
        }
        uint32_t o[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
            o[i] = (uint32_t)__half_as_ushort(__float2half_rn(v[2 * i])) |
                   (uint32_t)__half_as_ushort(__float2half_rn(v[2 * i + 1])) << 16;
        *reinterpret_cast<uint4 *>(xs + ((size_t)p * cap + t) * n32 + j0) =
            make_uint4(o[0], o[1], o[2], o[3]);
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

extern "C" br_status br_ic_prefill(br_ctx *ctx, const br_ic_dev *d, const br_ic_pre *p,
                                   br_act_type type, const void *x, size_t ntok, const void *bias,
                                   void *y) {
    br_cuda *s = br_cuda_state(ctx);
    const bool bf = type == BR_ACT_BF16;
    const int nt = (int)ntok, P = p->paths, words = p->r32 / 32;
    size_t at[6];
    void *ws = nullptr;
    BR_TRY(br_cuda_workspace(ctx, br_ic_prefill_layout(p, ntok, at), &ws));
    char *base = static_cast<char *>(ws);
    uint32_t *bits_v = reinterpret_cast<uint32_t *>(base + at[0]);
    uint32_t *bits_u = reinterpret_cast<uint32_t *>(base + at[1]);
    uint16_t *xs = reinterpret_cast<uint16_t *>(base + at[2]);
    float *t32 = reinterpret_cast<float *>(base + at[3]);
    uint16_t *t16 = reinterpret_cast<uint16_t *>(base + at[4]);
    float *y32 = reinterpret_cast<float *>(base + at[5]);

    /* a warp a job: (path, word, input unit) for V, a packed unit for U */
    const size_t nv = (size_t)P * words * ((p->n32 + 255) / 256) * 32;
    const size_t nu = (size_t)d->rt2 * P * d->ku2 * 32;
    unpack_v_kernel<<<br_cuda_blocks(ctx, nv, 256), 256, 0, s->stream>>>(*d, p->n32, words, bits_v);
    BR_CUDA_LAUNCHED(ctx, "unpack_v_kernel");
    unpack_u_kernel<<<br_cuda_blocks(ctx, nu, 256), 256, 0, s->stream>>>(*d, words, bits_u);
    BR_CUDA_LAUNCHED(ctx, "unpack_u_kernel");

    const uint16_t *x16 = static_cast<const uint16_t *>(x);
    const size_t nx = (size_t)P * ntok * (p->n32 / 8); /* 8 inputs a thread */
    if (bf)
        stage_x_kernel<true><<<br_cuda_blocks(ctx, nx, 256), 256, 0, s->stream>>>(
            x16, p->g, xs, P, nt, p->n, p->n32, (long long)ntok);
    else
        stage_x_kernel<false><<<br_cuda_blocks(ctx, nx, 256), 256, 0, s->stream>>>(
            x16, p->g, xs, P, nt, p->n, p->n32, (long long)ntok);
    BR_CUDA_LAUNCHED(ctx, "stage_x_kernel");
    for (int q = 0; q < P; q++) {
        BR_TRY(gemm(ctx, xs + (size_t)q * ntok * p->n32, bits_v + (size_t)q * p->n32 * words,
                    br_gemm_cuda::PLANE_COLS, words, t32, p->l + (size_t)q * p->r, nullptr, nt,
                    p->r, p->n32));
        const size_t nt16 = ntok * (size_t)p->r32;
        stage_t_kernel<<<br_cuda_blocks(ctx, nt16, 256), 256, 0, s->stream>>>(
            t32, t16 + (size_t)q * ntok * p->r32, nt, p->r, p->r32);
        BR_CUDA_LAUNCHED(ctx, "stage_t_kernel");
    }
    for (int q = 0; q < P; q++)
        BR_TRY(gemm(ctx, t16 + (size_t)q * ntok * p->r32, bits_u + (size_t)q * p->m * words,
                    br_gemm_cuda::PLANE_ROWS, words, y32, p->h + (size_t)q * p->m,
                    q ? y32 : nullptr, nt, p->m, p->r32));
    const long long ny = (long long)ntok * p->m;
    const uint16_t *b16 = static_cast<const uint16_t *>(bias);
    uint16_t *y16 = static_cast<uint16_t *>(y);
    if (bf)
        finish_kernel<true><<<br_cuda_blocks(ctx, (size_t)ny, 256), 256, 0, s->stream>>>(
            y32, b16, y16, ny, p->m);
    else
        finish_kernel<false><<<br_cuda_blocks(ctx, (size_t)ny, 256), 256, 0, s->stream>>>(
            y32, b16, y16, ny, p->m);
    BR_CUDA_LAUNCHED(ctx, "finish_kernel");
    return BR_OK;
}
