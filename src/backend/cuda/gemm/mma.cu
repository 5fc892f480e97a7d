/* The portable GEMM family (sm_80 and up): mma.sync m16n8k16 with f16 operands and
 * f32 accumulators, a 4-stage cp.async pipeline, and one operand loader per plane
 * kind (f16 plane, bitmap rows, bitmap cols; bits become ±1 fragment registers in
 * the kernel, never an f16 plane in memory). Also the plain fallback for operands a
 * 16-byte load cannot reach (views that start mid-vector, odd act strides).
 *
 *   out[i][j] = (oscale · Σ_kk act[i][kk] · plane[j][kk]) · colscale[j] + beta · c[i][j]
 *   i < m (tokens), j < n
 *
 * A CTA computes a 128 (tokens) × 128 (plane rows) tile with 8 warps in a 2 × 4
 * grid, 64 × 32 per warp; the k loop runs in steps of 32 (k is a multiple of 32,
 * so there is no k tail). */
#include <atomic>

#include "backend/cuda/gemm/common.cuh"

namespace br_gemm_cuda {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 32, kStages = 4, kThreads = 256;

template <int kKind> struct MmaCfg {
    static constexpr int kActBytes = kBM * kBK * 2; /* [128][32] f16, 64-byte rows */
    /* f16 [128][32]; ROWS: one word per plane row; COLS: [32 k][4 words + 1 pad] */
    static constexpr int kPlaneBytes = kKind == PLANE_F16    ? kBN * kBK * 2
                                       : kKind == PLANE_ROWS ? kBN * 4
                                                             : kBK * 5 * 4;
    static constexpr int kSmem = kStages * (kActBytes + kPlaneBytes);
};

/* Byte offset of 16-byte chunk `ch` (0..3) of row `row` in a [rows][32] f16 tile:
 * chunks are XOR-swizzled by row pairs so that ldmatrix's 8 rows hit 8 distinct
 * bank groups. */
__device__ __forceinline__ uint32_t tile_off(int row, int ch) {
    return (uint32_t)(row * 64 + ((ch ^ ((row >> 1) & 3)) << 4));
}

struct MmaArgs {
    Problem p;
    int tiles_j; /* CTA tiles along n */
    int vec2;    /* out rows and base allow float2 stores */
};

template <int kKind>
__global__ void __launch_bounds__(kThreads, 2) mma_gemm_kernel(const MmaArgs a) {
    using Cfg = MmaCfg<kKind>;
    extern __shared__ uint4 smem_u4[];
    uint8_t *smem = reinterpret_cast<uint8_t *>(smem_u4);
    const Problem &p = a.p;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp >> 2, warp_n = warp & 3, g = lane >> 2, t = lane & 3;
    const int tile_j = blockIdx.x % a.tiles_j, tile_t = blockIdx.x / a.tiles_j;
    const int j0 = tile_j * kBN, t0 = tile_t * kBM;
    const int nkb = p.k / kBK;
    const uint32_t act_s = smem_addr(smem), plane_s = act_s + kStages * Cfg::kActBytes;

    /* Stage `s` ← k block `kb`: rows past m or n are zero-filled, never read. */
    auto load_stage = [&](int s, int kb) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int e = tid + i * kThreads, row = e >> 2, ch = e & 3;
            const int gr = t0 + row;
            const uint16_t *src = p.act + (size_t)(gr < p.m ? gr : 0) * p.lda + kb * kBK + ch * 8;
            cp_async16(act_s + s * Cfg::kActBytes + tile_off(row, ch), src, gr < p.m ? 16 : 0);
        }
        const uint32_t dst = plane_s + s * Cfg::kPlaneBytes;
        if (kKind == PLANE_F16) {
            const uint16_t *plane = static_cast<const uint16_t *>(p.plane);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int e = tid + i * kThreads, row = e >> 2, ch = e & 3;
                const int gj = j0 + row;
                const uint16_t *src = plane + (size_t)(gj < p.n ? gj : 0) * p.k + kb * kBK + ch * 8;
                cp_async16(dst + tile_off(row, ch), src, gj < p.n ? 16 : 0);
            }
        } else if (kKind == PLANE_ROWS) {
            const uint32_t *bits = static_cast<const uint32_t *>(p.plane);
            if (tid < kBN) { /* word kb of plane row j0 + tid */
                const int gj = j0 + tid;
                cp_async4(dst + tid * 4, bits + (size_t)(gj < p.n ? gj : 0) * p.words + kb,
                          gj < p.n ? 4 : 0);
            }
        } else {
            const uint32_t *bits = static_cast<const uint32_t *>(p.plane);
            if (tid < kBK * 4) { /* words j0/32 .. j0/32+3 of bitmap row kb·32 + kr */
                const int kr = tid >> 2, c = tid & 3, gw = j0 / 32 + c;
                cp_async4(dst + (kr * 5 + c) * 4,
                          bits + (size_t)(kb * kBK + kr) * p.words + (gw < p.words ? gw : 0),
                          gw < p.words ? 4 : 0);
            }
        }
    };

    float acc[4][4][4];
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                acc[mt][nt][r] = 0.0f;

#pragma unroll
    for (int s = 0; s < kStages - 1; s++) {
        if (s < nkb) load_stage(s, s);
        cp_async_commit();
    }

    for (int kb = 0; kb < nkb; kb++) {
        cp_async_wait<kStages - 2>();
        __syncthreads(); /* stage kb landed; stage kb−1 is free for the next load */
        const int next = kb + kStages - 1;
        if (next < nkb) load_stage(next % kStages, next);
        cp_async_commit();

        const int s = kb % kStages;
        const uint32_t a_base = act_s + s * Cfg::kActBytes;
        const uint32_t p_base = plane_s + s * Cfg::kPlaneBytes;
        uint32_t row_words[4]; /* ROWS: this thread's word of each of its 4 n tiles */
        if (kKind == PLANE_ROWS) {
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
                row_words[nt] = lds32(p_base + (warp_n * 32 + nt * 8 + g) * 4);
        }
#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
            uint32_t af[4][4];
#pragma unroll
            for (int mt = 0; mt < 4; mt++) {
                const int row = warp_m * 64 + mt * 16 + (lane & 15);
                ldmatrix_x4(af[mt], a_base + tile_off(row, kk * 2 + (lane >> 4)));
            }
            uint32_t bf[4][2];
            if (kKind == PLANE_F16) {
#pragma unroll
                for (int np = 0; np < 2; np++) {
                    const int row = warp_n * 32 + np * 16 + (lane & 7) + ((lane >> 4) << 3);
                    uint32_t r[4];
                    ldmatrix_x4(r, p_base + tile_off(row, kk * 2 + ((lane >> 3) & 1)));
                    bf[2 * np][0] = r[0], bf[2 * np][1] = r[1];
                    bf[2 * np + 1][0] = r[2], bf[2 * np + 1][1] = r[3];
                }
            } else if (kKind == PLANE_ROWS) {
                /* b0: k = 2t, 2t+1; b1: k = 2t+8, 2t+9 of this 16-wide step */
                const int sh = 16 * kk + 2 * t;
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    bf[nt][0] = pm1_pair(row_words[nt] >> sh);
                    bf[nt][1] = pm1_pair(row_words[nt] >> (sh + 8));
                }
            } else {
                /* the four k rows this thread needs; bit (nt·8 + g) of warp_n's word */
                const int k0 = 16 * kk + 2 * t;
                const uint32_t wa = lds32(p_base + (k0 * 5 + warp_n) * 4);
                const uint32_t wb = lds32(p_base + ((k0 + 1) * 5 + warp_n) * 4);
                const uint32_t wc = lds32(p_base + ((k0 + 8) * 5 + warp_n) * 4);
                const uint32_t wd = lds32(p_base + ((k0 + 9) * 5 + warp_n) * 4);
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    const int bit = nt * 8 + g;
                    bf[nt][0] = pm1_pair2(wa >> bit, wb >> bit);
                    bf[nt][1] = pm1_pair2(wc >> bit, wd >> bit);
                }
            }
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
                    mma_16816(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
        }
    }
    cp_async_wait<0>();

    /* acc[mt][nt]: {0,1} row g, columns 2t, 2t+1; {2,3} row g+8 */
    const float os = p.oscale;
    const bool has_cs = p.colscale != nullptr;
    float cs[4][2]; /* colscale of this thread's columns */
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int col = j0 + warp_n * 32 + nt * 8 + 2 * t + e;
            cs[nt][e] = has_cs && col < p.n ? p.colscale[col] : 1.0f;
        }
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int row = t0 + warp_m * 64 + mt * 16 + g + half * 8;
            if (row >= p.m) continue;
            float *orow = p.out + (long long)row * p.ldo;
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                const int col = j0 + warp_n * 32 + nt * 8 + 2 * t;
                const long long idx = (long long)row * p.ldo + col;
                const float *c0 = col < p.n ? p.c : nullptr, *c1 = col + 1 < p.n ? p.c : nullptr;
                const float v0 =
                    epilogue_value(acc[mt][nt][2 * half], os, has_cs, cs[nt][0], c0, idx, p.beta);
                const float v1 = epilogue_value(acc[mt][nt][2 * half + 1], os, has_cs, cs[nt][1],
                                                c1, idx + 1, p.beta);
                if (a.vec2 && col + 1 < p.n) {
                    *reinterpret_cast<float2 *>(orow + col) = make_float2(v0, v1);
                } else {
                    if (col < p.n) orow[col] = v0;
                    if (col + 1 < p.n) orow[col + 1] = v1;
                }
            }
        }
}

/* One output per thread, products summed in f32 in k order: for operands that are
 * not 16-byte aligned (rare views); correct, not fast. */
template <int kKind> __global__ void __launch_bounds__(128) simple_gemm_kernel(const Problem p) {
    const int j = blockIdx.x * 128 + threadIdx.x;
    if (j >= p.n) return;
    const uint16_t *plane16 = static_cast<const uint16_t *>(p.plane);
    const uint32_t *bits = static_cast<const uint32_t *>(p.plane);
    for (int i = blockIdx.y; i < p.m; i += gridDim.y) {
        const uint16_t *arow = p.act + (size_t)i * p.lda;
        float acc = 0.0f;
        for (int kk = 0; kk < p.k; kk++) {
            float b;
            if (kKind == PLANE_F16)
                b = __half2float(__ushort_as_half(plane16[(size_t)j * p.k + kk]));
            else if (kKind == PLANE_ROWS)
                b = (bits[(size_t)j * p.words + kk / 32] >> (kk % 32)) & 1u ? 1.0f : -1.0f;
            else
                b = (bits[(size_t)kk * p.words + j / 32] >> (j % 32)) & 1u ? 1.0f : -1.0f;
            acc += __half2float(__ushort_as_half(arow[kk])) * b;
        }
        const long long idx = (long long)i * p.ldo + j;
        p.out[idx] = epilogue_value(acc, p.oscale, p.colscale != nullptr,
                                    p.colscale ? p.colscale[j] : 1.0f, p.c, idx, p.beta);
    }
}

/* cudaFuncSetAttribute applies to the current device: remember per device. */
bool attr_needed(std::atomic<uint64_t> &done, int device) {
    return device < 0 || device >= 64 || !(done.load() & (1ull << device));
}
void attr_done(std::atomic<uint64_t> &done, int device) {
    if (device >= 0 && device < 64) done.fetch_or(1ull << device);
}

template <int kKind> br_status launch_mma_kind(br_ctx *ctx, const Problem &p) {
    br_cuda *s = br_cuda_state(ctx);
    static std::atomic<uint64_t> attr_set{0};
    if (attr_needed(attr_set, s->device)) {
        BR_CUDA_TRY(ctx, cudaFuncSetAttribute(mma_gemm_kernel<kKind>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              MmaCfg<kKind>::kSmem));
        attr_done(attr_set, s->device);
    }
    MmaArgs a;
    a.p = p;
    a.tiles_j = (p.n + kBN - 1) / kBN;
    a.vec2 = p.ldo % 2 == 0 && br_aligned(8, p.out);
    const unsigned tiles = (unsigned)a.tiles_j * (unsigned)((p.m + kBM - 1) / kBM);
    mma_gemm_kernel<kKind><<<tiles, kThreads, MmaCfg<kKind>::kSmem, s->stream>>>(a);
    BR_CUDA_LAUNCHED(ctx, "mma_gemm_kernel");
    return BR_OK;
}

template <int kKind> br_status launch_simple_kind(br_ctx *ctx, const Problem &p) {
    br_cuda *s = br_cuda_state(ctx);
    dim3 grid((unsigned)((p.n + 127) / 128), (unsigned)(p.m < 65535 ? p.m : 65535));
    simple_gemm_kernel<kKind><<<grid, 128, 0, s->stream>>>(p);
    BR_CUDA_LAUNCHED(ctx, "simple_gemm_kernel");
    return BR_OK;
}

} // namespace

br_status launch_mma(br_ctx *ctx, const Problem &p) {
    switch (p.kind) {
    case PLANE_F16: return launch_mma_kind<PLANE_F16>(ctx, p);
    case PLANE_ROWS: return launch_mma_kind<PLANE_ROWS>(ctx, p);
    case PLANE_COLS: return launch_mma_kind<PLANE_COLS>(ctx, p);
    }
    return br_fail(ctx, BR_E_ARG, "mm: unknown plane kind %d", (int)p.kind);
}

br_status launch_simple(br_ctx *ctx, const Problem &p) {
    switch (p.kind) {
    case PLANE_F16: return launch_simple_kind<PLANE_F16>(ctx, p);
    case PLANE_ROWS: return launch_simple_kind<PLANE_ROWS>(ctx, p);
    case PLANE_COLS: return launch_simple_kind<PLANE_COLS>(ctx, p);
    }
    return br_fail(ctx, BR_E_ARG, "mm: unknown plane kind %d", (int)p.kind);
}

} // namespace br_gemm_cuda
