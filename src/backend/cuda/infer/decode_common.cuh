/* Device helpers the decode kernels share (decode.cu, decode_resident.cu): the
 * packed signs' loads and their expansion into mma A fragments, the tensor-core
 * product, B fragments from a compact [token][k] copy in shared memory, z = g⊙x in
 * f32, the activation types' conversions, the atomics of the kernels' counters and
 * their cooperative launch.
 * infer/blr_infer_cuda.h has the layouts. */
#ifndef BR_BACKEND_CUDA_INFER_DECODE_COMMON_CUH
#define BR_BACKEND_CUDA_INFER_DECODE_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "backend/cuda/cuda_internal.h"

namespace {

/* One launch of a persistent decode kernel on the context's stream: cooperative, so
 * the runtime refuses a grid that cannot be resident all at once instead of letting
 * its barrier hang. `what` names the kernel in the error. */
template <class Args>
br_status launch_persistent(br_ctx *ctx, void (*kernel)(const Args), int grid, int threads, int smem,
                            const Args &a, const char *what) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)grid);
    cfg.blockDim = dim3((unsigned)threads);
    cfg.dynamicSmemBytes = (size_t)smem;
    cfg.stream = br_cuda_state(ctx)->stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    ctx->stats.launches++;
    cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, a);
    if (e == cudaSuccess) e = cudaGetLastError();
    return e == cudaSuccess ? BR_OK : br_cuda_check(ctx, e, what, __FILE__, __LINE__);
}

constexpr int kWarps = 8, kThreads = kWarps * 32;
/* units of signs loaded at once per warp (16 bytes a lane each) */
constexpr int kPF = 4;


/* 16 bytes read once: no L1 allocation, the non-coherent path (bits never change) */
__device__ __forceinline__ uint4 ld_stream(const uint32_t *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

__device__ __forceinline__ uint32_t ld_acquire(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* an add that releases this thread's earlier stores (and, through a barrier or
 * __syncwarp before it, its block's or warp's) and acquires those released by the
 * adds before it: the release and acquire that __threadfence around an atomicAdd
 * gave, without the fences' full ordering */
__device__ __forceinline__ uint32_t atom_add_acq_rel(uint32_t *p, uint32_t v) {
    uint32_t old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

__device__ __forceinline__ void st_release(uint32_t *p, uint32_t v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t ld_relaxed(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

template <bool kBF> __device__ __forceinline__ float to_f32(uint16_t h) {
    if (kBF) return __uint_as_float((uint32_t)h << 16);
    return __half2float(__ushort_as_half(h));
}

/* two f32 → the activation type, round to nearest even; lo in the low half */
template <bool kBF> __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    if (kBF) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

template <bool kBF> __device__ __forceinline__ uint16_t round1(float v) {
    if (kBF) return __bfloat16_as_ushort(__float2bfloat16_rn(v));
    return __half_as_ushort(__float2half_rn(v));
}

/* The A fragment of k step kk (0..15) of a unit from its packed word w = kk/4. */
template <bool kBF>
__device__ __forceinline__ void expand(uint32_t w, int kk, uint32_t (&a)[4]) {
    constexpr uint32_t one = kBF ? 0x3F803F80u : 0x3C003C00u;
    const int q0 = (kk % 4) * 4;
#pragma unroll
    for (int i = 0; i < 4; i++)
        a[i] = ((w << (q0 + i)) & 0x80008000u) | one;
}

template <bool kBF>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
    if (kBF)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The word of unit data `a` that holds k step kk. */
__device__ __forceinline__ uint32_t word_of(const uint4 &a, int kk) {
    const int w = kk / 4;
    return w == 0 ? a.x : w == 1 ? a.y : w == 2 ? a.z : a.w;
}

/* The first min(kPF, nu) units of a row tile's signs (lane's 16 bytes each) into a. */
__device__ __forceinline__ void load_units(const uint32_t *bits, int nu, uint4 (&a)[kPF]) {
#pragma unroll
    for (int j = 0; j < kPF; j++)
        a[j] = j < nu ? ld_stream(bits + (size_t)j * 128) : make_uint4(0, 0, 0, 0);
}


/* The B fragment of k step kk of unit u from a compact f16 [token][k] array in shared
 * memory (z's or t's copy): base is the run's unit 0 at token 0 plus 2c, stride a
 * token's row; b0 = inputs 2c, 2c+1 of token tok, b1 the same + 8; 0 past ntok. */
__device__ __forceinline__ uint2 frag_compact(const uint16_t *base, int stride, int tok, int ntok,
                                              int u, int kk) {
    if (tok >= ntok) return make_uint2(0, 0);
    const uint32_t *w = reinterpret_cast<const uint32_t *>(base + (size_t)tok * stride + u * 256 + kk * 16);
    return make_uint2(w[0], w[4]);
}


/* z = g⊙x of 8 inputs from x's 16 bytes and g's 32 (products in f32). */
template <bool kBF>
__device__ __forceinline__ void gx8(const uint4 &xv, const float4 &g0, const float4 &g1, float (&v)[8]) {
    const uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w};
    const float gf[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] = __fmul_rn(gf[i], to_f32<kBF>((uint16_t)(xw[i / 2] >> (16 * (i % 2)))));
}

/* The same one input at a time, 0 past n (x: the token's row). */
template <bool kBF>
__device__ __forceinline__ void gx8_edge(const uint16_t *x, const float *g, int n, int k0, float (&v)[8]) {
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] = k0 + i < n ? __fmul_rn(__ldg(g + k0 + i), to_f32<kBF>(__ldg(x + k0 + i))) : 0.f;
}

} // namespace

#endif
