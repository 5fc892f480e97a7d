/* The resident decode kernel of the CUDA inference plan: a BLR linear for 1..8 tokens
 * (one token tile) in one launch, for plans whose signs a warp reads in a phase fit
 * its registers (br_ic_resident_fits). infer/blr_infer_cuda.h has the layouts.
 *
 * One token reads every sign once: 5.6 MB at 11008×4096, 1 bpw, two paths, 1.3 µs at
 * the H200's bandwidth, far less than the latency of a few dependent memory round
 * trips in a row. So every load of signs is issued at the kernel's start, and the
 * launch pays the memory's latency about once instead of once per step:
 *
 *   start    each warp loads its phase-1 signs (of its block's first job) into
 *            registers and issues the loads of its z inputs, then asks L2 for its
 *            phase-2 signs and its block's h and bias (prefetch: no registers held
 *            across phase 1; they arrive while phase 1 runs).
 *   phase 1  a job is one row tile of t (path p, rt); its ku1 units are split over the
 *            8 warps in runs of upw1. Each warp stages z = g_p⊙x of its own run in its
 *            own slice of shared memory (f32 product rounded once), sums its units on
 *            the tensor cores (a chain of 16 k steps a unit, the units' chains
 *            interleaved), and the block adds the warps' sums in warp order, scales by
 *            ℓ and writes t ([ntok][paths][rt1·16], in the permuted order below). No
 *            partial sum leaves the block.
 *   barrier  a 64-bit arrival counter that only grows: a block arrives with one
 *            release add, which needs no reply, and waits until the counter reaches
 *            the end of this launch's round. Every launch adds exactly its grid's
 *            size and starts after the one before it ended, so the value a block
 *            reads before it arrives lies within the round, which starts at that
 *            value rounded down to a multiple of the grid.
 *   phase 2  a job is rpc2 output row tiles; its items (row tile, path, unit) go to
 *            the warps round robin. Their signs (from L2 now) load while the block
 *            copies t to shared memory; each item is summed into a partial in shared
 *            memory, and the block adds them in a fixed order, applies h_p and the
 *            bias, and stores y.
 * Every order of additions is fixed, so two runs give the same bits. */
#include <algorithm>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/infer/decode_common.cuh"
#include "infer/blr_infer_cuda.h"

namespace {

/* units a warp holds in registers: phase 1's run of one row tile, phase 2's items */
constexpr int kU1 = BR_IC_RES_U1, kU2 = BR_IC_RES_U2;
/* shared memory: the warps' phase-1 sums [kWarps][32] float4; phase 2's h (each path)
 * and bias [3][kHbRows] f32; then one region: phase 1's z slices, or phase 2's item
 * partials [kWarps·kU2][32] float4 followed by t's copy */
constexpr int kRedBytes = kWarps * 32 * 16;
constexpr int kRpc2Max = 16, kHbRows = kRpc2Max * 16, kHbBytes = 3 * kHbRows * 4;
constexpr int kPsBytes = kWarps * kU2 * 512;
constexpr int kRegionOff = kRedBytes + kHbBytes;
constexpr int kSmemBytes = kRegionOff + BR_IC_RES_REGION;
static_assert(kRegionOff % 16 == 0 && kPsBytes % 16 == 0, "z and t are stored 16 bytes at a time");
static_assert(kHbRows <= kThreads, "a thread loads one row's h and bias");
static_assert(BR_IC_RES_T_BYTES == BR_IC_RES_REGION - kPsBytes, "t's room after the partials");

struct Args {
    br_ic_dev d;
    int upw1, rpc2;
    const uint16_t *x, *bias;
    uint16_t *y;
    int ntok;
    unsigned long long *count; /* the barrier's arrivals */
};

__device__ __forceinline__ unsigned long long ld_relaxed64(const unsigned long long *p) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ unsigned long long ld_acquire64(const unsigned long long *p) {
    unsigned long long v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

/* releases this thread's earlier stores (and, through a barrier before it, its
 * block's); no reply */
__device__ __forceinline__ void red_release_add64(unsigned long long *p, unsigned long long v) {
    asm volatile("red.release.gpu.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* B operands in shared memory. z's slices and t's copy are [token][k] f16 rows with
 * each 16 inputs of a k step permuted so that a lane's b0 (inputs 2c, 2c + 1) and b1
 * (2c + 8, 2c + 9) are adjacent: one 8-byte load a k step. In a group of 16, words
 * (input pairs) 0..7 are stored in the order 0 4 1 5 2 6 3 7. A row's stride is 16
 * halves past a multiple of 256, so the 8 rows of a fragment's loads fall in different
 * banks; one more row, all zero, stands for the tokens past ntok, so no lane needs a
 * test or a predicated load. */
constexpr int kRowPad = 16;

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ uint2 lds64(uint32_t addr) {
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr));
    return v;
}

/* a group of 16 inputs (8 pairs w[0..7], in input order) in the permuted order */
__device__ __forceinline__ void store_group(uint16_t *dst, const uint32_t (&w)[8]) {
    uint4 *d = reinterpret_cast<uint4 *>(dst);
    d[0] = make_uint4(w[0], w[4], w[1], w[5]);
    d[1] = make_uint4(w[2], w[6], w[3], w[7]);
}

/* The A fragment of k step kk of a unit from its packed word, one 3-input logic
 * operation a register after the shift: (word << q) & mask | one, mask and one in
 * registers (as immediates they take two operations). */
__device__ __forceinline__ void expand_lop3(uint32_t w, int kk, uint32_t mask, uint32_t one, uint32_t (&a)[4]) {
    const int q0 = (kk % 4) * 4;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t v = w << (q0 + i);
        asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(a[i]) : "r"(v), "r"(mask), "r"(one));
    }
}

/* acc[q] = (signs of unit a[q]) · B for q < N, B's k step kk at byte address
 * brow + boff[q] + 32·kk; the N chains of 16 steps interleaved. */
template <bool kBF, int N, int K>
__device__ __forceinline__ void chains(const uint4 (&a)[K], uint32_t brow, const uint32_t (&boff)[K],
                                       float (&acc)[K][4]) {
    uint32_t mask = 0x80008000u, one = kBF ? 0x3F803F80u : 0x3C003C00u;
    asm("" : "+r"(mask), "+r"(one)); /* kept in registers */
#pragma unroll
    for (int q = 0; q < N; q++) acc[q][0] = acc[q][1] = acc[q][2] = acc[q][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < 16; kk++)
#pragma unroll
        for (int q = 0; q < N; q++) {
            uint32_t af[4];
            expand_lop3(word_of(a[q], kk), kk, mask, one, af);
            const uint2 b = lds64(brow + boff[q] + 32 * kk);
            mma<kBF>(acc[q], af, b.x, b.y);
        }
}

/* chains<N> for a count known only at run time (0..K): straight-line code each */
template <bool kBF, int K>
__device__ __forceinline__ void chains_n(int n, const uint4 (&a)[K], uint32_t brow, const uint32_t (&boff)[K],
                                         float (&acc)[K][4]) {
    static_assert(K == 6, "one case a count");
    switch (n) {
    case 1: chains<kBF, 1>(a, brow, boff, acc); break;
    case 2: chains<kBF, 2>(a, brow, boff, acc); break;
    case 3: chains<kBF, 3>(a, brow, boff, acc); break;
    case 4: chains<kBF, 4>(a, brow, boff, acc); break;
    case 5: chains<kBF, 5>(a, brow, boff, acc); break;
    case 6: chains<kBF, 6>(a, brow, boff, acc); break;
    default: break;
    }
}

/* One chunk of z's inputs: 16 inputs (a k step) of a token from x (32 bytes) and g (64). */
struct ZChunk {
    uint4 x[2];
    float4 g[4];
};

/* A warp's z slice: path p's inputs of units [u0, u0 + upw1) for every token, rows of
 * zs = upw1·256 + kRowPad halves at zw, row ntok zero, zero past n. Chunk c of the
 * slice is token c / (upw1·16), k step c % (upw1·16); lane l takes chunks l, l + 32, ... */
template <bool kBF> struct ZSlice {
    const Args &A;
    const float *g;
    int k_base, per_tok, chunks, zs;
    bool vec;
    uint16_t *zw;

    __device__ ZSlice(const Args &a, int p, int u0, uint16_t *w)
        : A(a), g(a.d.g + (size_t)p * a.d.n), k_base(u0 * 256), per_tok(a.upw1 * 16),
          chunks(a.ntok * a.upw1 * 16), zs(a.upw1 * 256 + kRowPad), zw(w) {
        vec = a.d.n % 8 == 0 && reinterpret_cast<uintptr_t>(g) % 16 == 0 &&
              reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
    }
    __device__ bool fast(int c, int &tok, int &k0) const {
        tok = c / per_tok, k0 = k_base + c % per_tok * 16;
        return vec && k0 + 16 <= A.d.n;
    }
    __device__ void issue(int c, ZChunk &z) const {
        int tok, k0;
        if (c < chunks && fast(c, tok, k0)) {
            const uint4 *x = reinterpret_cast<const uint4 *>(A.x + (size_t)tok * A.d.n + k0);
            const float4 *gv = reinterpret_cast<const float4 *>(g + k0);
            z.x[0] = __ldg(x), z.x[1] = __ldg(x + 1);
#pragma unroll
            for (int i = 0; i < 4; i++) z.g[i] = __ldg(gv + i);
        }
    }
    __device__ void store(int c, const ZChunk &z) const {
        if (c >= chunks) return;
        int tok, k0;
        float lo[8], hi[8];
        if (fast(c, tok, k0)) {
            gx8<kBF>(z.x[0], z.g[0], z.g[1], lo);
            gx8<kBF>(z.x[1], z.g[2], z.g[3], hi);
        } else {
            gx8_edge<kBF>(A.x + (size_t)tok * A.d.n, g, A.d.n, k0, lo);
            gx8_edge<kBF>(A.x + (size_t)tok * A.d.n, g, A.d.n, k0 + 8, hi);
        }
        uint32_t w[8];
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = pack2<kBF>(lo[2 * i], lo[2 * i + 1]);
#pragma unroll
        for (int i = 0; i < 4; i++) w[4 + i] = pack2<kBF>(hi[2 * i], hi[2 * i + 1]);
        store_group(zw + (size_t)tok * zs + (k0 - k_base), w);
    }
    /* row ntok: zero */
    __device__ void zero_row(int lane) const {
        uint4 *r = reinterpret_cast<uint4 *>(zw + (size_t)A.ntok * zs);
        for (int i = lane; i < zs / 8; i += 32) r[i] = make_uint4(0, 0, 0, 0);
    }
};

/* Phase 2's items of job `job` this warp takes (items warp, warp + kWarps, ...): their
 * signs into a2 and their t offsets (bytes, path p's unit u of a row) into boff;
 * returns how many. */
__device__ __forceinline__ int load_items(const Args &A, int job, int warp, int lane, uint4 (&a2)[kU2],
                                          uint32_t (&boff)[kU2]) {
    const br_ic_dev &d = A.d;
    const int per_rt = d.paths * d.ku2, rt_lo = job * A.rpc2;
    const int items = (std::min(d.rt2, rt_lo + A.rpc2) - rt_lo) * per_rt;
    /* bits2 is [rt2][paths][ku2]: a job's items are consecutive units */
    const uint32_t *bits = d.bits2 + (size_t)rt_lo * per_rt * 128 + lane * 4;
    int nq = 0;
#pragma unroll
    for (int q = 0; q < kU2; q++) {
        const int it = warp + q * kWarps;
        if (it < items) {
            a2[q] = ld_stream(bits + (size_t)it * 128);
            boff[q] = (uint32_t)((it / d.ku2 % d.paths) * d.ku2 + it % d.ku2) * 512u;
            nq = q + 1;
        }
    }
    return nq;
}

/* The lines of job `job`'s items this warp takes and of the job's h and bias, into
 * L2: issued at the start, they arrive during phase 1, and phase 2 finds them there
 * without holding registers across phase 1. */
__device__ __forceinline__ void prefetch_job(const Args &A, int job, int warp, int lane) {
    const br_ic_dev &d = A.d;
    const int per_rt = d.paths * d.ku2, rt_lo = job * A.rpc2;
    const int items = (std::min(d.rt2, rt_lo + A.rpc2) - rt_lo) * per_rt;
    const uint32_t *bits = d.bits2 + (size_t)rt_lo * per_rt * 128;
    /* a unit is 512 bytes: four 128-byte lines, lanes 0..3 */
    for (int q = 0; q < kU2; q++) {
        const int it = warp + q * kWarps;
        if (it < items && lane < 4)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(bits + (size_t)it * 128 + lane * 32));
    }
    const int row0 = job * A.rpc2 * 16, rows = std::min(d.m - row0, A.rpc2 * 16);
    const int e = warp * 32 + lane;
    if (e * 32 < rows)
        for (int p = 0; p < d.paths; p++)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(d.h + (size_t)p * d.m + row0 + e * 32));
    if (A.bias && e * 64 < rows) asm volatile("prefetch.global.L2 [%0];" ::"l"(A.bias + row0 + e * 64));
}

/* h of each path and the bias (f32, 0 without one) of row `e` of job `job` (a thread a
 * row). */
template <bool kBF>
__device__ __forceinline__ void load_hrow(const Args &A, int job, int e, float (&hr)[3]) {
    const br_ic_dev &d = A.d;
    const int row0 = job * A.rpc2 * 16, rows = std::min(d.m - row0, A.rpc2 * 16);
    hr[0] = hr[1] = hr[2] = 0.f;
    if (e < rows) {
        hr[0] = __ldg(d.h + row0 + e);
        if (d.paths > 1) hr[1] = __ldg(d.h + (size_t)d.m + row0 + e);
        if (A.bias) hr[2] = to_f32<kBF>(__ldg(A.bias + row0 + e));
    }
}

template <bool kBF>
__global__ void __launch_bounds__(kThreads, 2) resident_kernel(const Args A) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ unsigned long long round_end;
    const br_ic_dev &d = A.d;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, ntok = A.ntok;
    float4 *red = reinterpret_cast<float4 *>(smem);
    float *hb = reinterpret_cast<float *>(smem + kRedBytes);
    unsigned char *region = smem + kRegionOff;
    if (threadIdx.x == 0) {
        const unsigned long long c = ld_relaxed64(A.count);
        round_end = c - c % gridDim.x + gridDim.x;
    }
    /* the lane's B row: its token g = lane/4, or the zero row past ntok; c = lane%4's
     * 8 bytes of each group */
    const int brow_tok = std::min(lane / 4, ntok), bcol = (lane % 4) * 8;

    /* ---- start: every warp's loads, in the order they are needed */
    const int jobs1 = d.paths * d.rt1, jobs2 = (d.rt2 + A.rpc2 - 1) / A.rpc2;
    const int u0 = warp * A.upw1, nu1 = std::max(0, std::min(A.upw1, d.ku1 - u0));
    uint4 a1[kU1];
    uint32_t boff1[kU1];
#pragma unroll
    for (int i = 0; i < kU1; i++) boff1[i] = (uint32_t)i * 512u;
    const int first1 = blockIdx.x;
    if (first1 < jobs1) {
        const uint32_t *bits = d.bits1 + ((size_t)first1 * d.ku1 + u0) * 128 + lane * 4;
#pragma unroll
        for (int i = 0; i < kU1; i++)
            if (i < nu1) a1[i] = ld_stream(bits + (size_t)i * 128);
    }
    const int zs = A.upw1 * 256 + kRowPad;
    uint16_t *zw = reinterpret_cast<uint16_t *>(region) + (size_t)warp * (ntok + 1) * zs;
    ZChunk zc;
    const ZSlice<kBF> z0(A, first1 < jobs1 ? first1 / d.rt1 : 0, u0, zw);
    if (first1 < jobs1 && nu1 > 0) z0.issue(lane, zc);
    if ((int)blockIdx.x < jobs2) prefetch_job(A, blockIdx.x, warp, lane);

    /* ---- phase 1: t = ℓ⊙(S_Vᵀ·z), a row tile a job */
    int staged_p = -1;
    for (int job = first1; job < jobs1; job += gridDim.x) {
        const int p = job / d.rt1, rt = job % d.rt1;
        if (job != first1) {
            const uint32_t *bits = d.bits1 + ((size_t)job * d.ku1 + u0) * 128 + lane * 4;
#pragma unroll
            for (int i = 0; i < kU1; i++)
                if (i < nu1) a1[i] = ld_stream(bits + (size_t)i * 128);
        }
        float lv[2] = {0.f, 0.f}; /* warp 0's: ℓ of its lane's rows g, g + 8 */
        if (warp == 0)
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int row = rt * 16 + lane / 4 + 8 * i;
                lv[i] = row < d.r ? __ldg(d.l + (size_t)p * d.r + row) : 0.f;
            }
        if (p != staged_p && nu1 > 0) {
            const ZSlice<kBF> zsl(A, p, u0, zw);
            __syncwarp(); /* the previous path's slice is no longer read */
            int c0 = 0;
            if (job == first1) { /* the loads issued at the start */
                zsl.store(lane, zc);
                zsl.zero_row(lane);
                c0 = 32;
            }
            for (; c0 < zsl.chunks; c0 += 32) {
                zsl.issue(c0 + lane, zc);
                zsl.store(c0 + lane, zc);
            }
            __syncwarp();
            staged_p = p;
        }
        /* the warp's units, their 16-step chains interleaved, then added in unit order */
        float acc[kU1][4];
        chains_n<kBF>(nu1, a1, smem_addr(zw + (size_t)brow_tok * zs) + bcol, boff1, acc);
        float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
        if (nu1 > 0) sum = make_float4(acc[0][0], acc[0][1], acc[0][2], acc[0][3]);
#pragma unroll
        for (int i = 1; i < kU1; i++)
            if (i < nu1) {
                sum.x = __fadd_rn(sum.x, acc[i][0]), sum.y = __fadd_rn(sum.y, acc[i][1]);
                sum.z = __fadd_rn(sum.z, acc[i][2]), sum.w = __fadd_rn(sum.w, acc[i][3]);
            }
        red[warp * 32 + lane] = sum;
        __syncthreads();
        if (warp == 0) {
            const int nw = (d.ku1 + A.upw1 - 1) / A.upw1; /* warps with units */
            float4 t = red[lane];
            for (int w = 1; w < nw; w++) {
                const float4 v = red[w * 32 + lane];
                t.x = __fadd_rn(t.x, v.x), t.y = __fadd_rn(t.y, v.y);
                t.z = __fadd_rn(t.z, v.z), t.w = __fadd_rn(t.w, v.w);
            }
            /* t = ℓ⊙sum rounded, into d.tc [ntok][paths][rt1·16] in the permuted group
             * order; the lane's C fragment is rows g, g + 8, tokens 2c, 2c + 1, and
             * row i of a tile is input i of phase 2's k step */
            const int g = lane / 4, c = lane % 4, rows = d.rt1 * 16;
            const float s[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int tok = 2 * c + j % 2, i = g + 8 * (j / 2);
                const int pos = (i % 8) / 2 * 4 + (i / 8) * 2 + i % 2;
                if (tok < ntok)
                    d.tc[((size_t)tok * d.paths + p) * rows + rt * 16 + pos] =
                        round1<kBF>(__fmul_rn(s[j], lv[j / 2]));
            }
        }
        __syncthreads(); /* red is written again by the next job */
    }

    /* ---- the barrier: this block's t stores before the add, every block's after */
    __syncthreads();
    if (threadIdx.x == 0) {
        red_release_add64(A.count, 1ull);
        while (ld_acquire64(A.count) < round_end) {
        }
    }
    __syncthreads();

    /* ---- phase 2: y = Σ_p h_p ⊙ (S_U,p·t_p) + bias; the first job's signs, h and bias
     * (in L2 by now) load while t is copied */
    uint4 a2[kU2];
    uint32_t boff2[kU2];
    int nq = 0;
    float hr[3] = {0.f, 0.f, 0.f};
    if ((int)blockIdx.x < jobs2) {
        nq = load_items(A, blockIdx.x, warp, lane, a2, boff2);
        load_hrow<kBF>(A, blockIdx.x, threadIdx.x, hr);
    }
    float4 *ps = reinterpret_cast<float4 *>(region);
    uint16_t *ts = reinterpret_cast<uint16_t *>(region + kPsBytes);
    const int rpad = d.ku2 * 256, S = d.paths * rpad + kRowPad, per_rt = d.paths * d.ku2;
    {
        /* t's rows as phase 1 wrote them (already permuted), zero past rt1·16, and the
         * zero row ntok */
        const int rows = d.rt1 * 16, per_tok = S / 8; /* 16-byte pieces */
        for (int e = threadIdx.x; e < (ntok + 1) * per_tok; e += kThreads) {
            const int tok = e / per_tok, q = e % per_tok, p = q / (rpad / 8), k = q % (rpad / 8) * 8;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (tok < ntok && p < d.paths && k < rows)
                v = __ldcg(reinterpret_cast<const uint4 *>(d.tc + ((size_t)tok * d.paths + p) * rows + k));
            *reinterpret_cast<uint4 *>(ts + (size_t)tok * S + q * 8) = v;
        }
    }
    __syncthreads();
    const uint32_t trow = smem_addr(ts + (size_t)brow_tok * S) + bcol;
    for (int job = blockIdx.x; job < jobs2; job += gridDim.x) {
        const int rt_lo = job * A.rpc2, nrt = std::min(d.rt2, rt_lo + A.rpc2) - rt_lo;
        if (job != (int)blockIdx.x) {
            nq = load_items(A, job, warp, lane, a2, boff2);
            load_hrow<kBF>(A, job, threadIdx.x, hr);
        }
        float acc[kU2][4];
        chains_n<kBF>(nq, a2, trow, boff2, acc);
#pragma unroll
        for (int q = 0; q < kU2; q++)
            if (q < nq)
                ps[(warp + q * kWarps) * 32 + lane] = make_float4(acc[q][0], acc[q][1], acc[q][2], acc[q][3]);
        if ((int)threadIdx.x < nrt * 16)
            for (int i = 0; i < 3; i++) hb[i * kHbRows + threadIdx.x] = hr[i];
        __syncthreads();
        /* y[tok][row] = Σ_p h_p[row]·(Σ_u item sums) + bias[row]: paths and units in
         * order; consecutive threads take consecutive rows (coalesced stores) */
        const float *pf = reinterpret_cast<const float *>(ps);
        const int rows = nrt * 16;
        for (int e = threadIdx.x; e < ntok * rows; e += kThreads) {
            const int tok = e / rows, rr = e % rows, row = rt_lo * 16 + rr;
            if (row >= d.m) continue;
            const int rtl = rr / 16, i = rr % 16;
            const int ln = (i % 8) * 4 + tok / 2, comp = (i / 8) * 2 + tok % 2;
            float v = 0.f;
            for (int p = 0; p < d.paths; p++) {
                const int it0 = rtl * per_rt + p * d.ku2;
                float c = pf[((size_t)it0 * 32 + ln) * 4 + comp];
                for (int u = 1; u < d.ku2; u++) c = __fadd_rn(c, pf[((size_t)(it0 + u) * 32 + ln) * 4 + comp]);
                const float hc = __fmul_rn(hb[p * kHbRows + rr], c);
                v = p == 0 ? hc : __fadd_rn(v, hc);
            }
            if (A.bias) v = __fadd_rn(v, hb[2 * kHbRows + rr]);
            A.y[(size_t)tok * d.m + row] = round1<kBF>(v);
        }
        __syncthreads();
    }
}

using KernelFn = void (*)(const Args);
KernelFn kernel_of(int bf16) { return bf16 ? resident_kernel<true> : resident_kernel<false>; }

} // namespace

extern "C" br_status br_ic_resident_setup(br_ctx *ctx, br_ic_dev *d) {
    br_cuda *s = br_cuda_state(ctx);
    const int upw1 = (d->ku1 + kWarps - 1) / kWarps, per_rt = d->paths * d->ku2;
    for (int bf = 0; bf < 2; bf++) {
        br_ic_resident *R = &d->res[bf];
        *R = (br_ic_resident){0, 0, 0};
        if (upw1 > kU1 || per_rt > kWarps * kU2) continue;
        KernelFn k = kernel_of(bf);
        BR_CUDA_TRY(ctx, cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
        int per_sm = 0;
        BR_CUDA_TRY(ctx, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, kSmemBytes));
        if (per_sm < 1) continue; /* the other kernels take the plan */
        const int grid = per_sm * s->sm_count;
        R->grid = grid;
        R->upw1 = upw1;
        R->rpc2 = std::max(1, std::min({(d->rt2 + grid - 1) / grid, kRpc2Max, kWarps * kU2 / per_rt}));
    }
    return BR_OK;
}

extern "C" int br_ic_resident_fits(const br_ic_dev *d, br_act_type type, size_t ntok) {
    const br_ic_resident *R = &d->res[type == BR_ACT_BF16];
    if (R->grid == 0 || ntok == 0 || ntok > 8) return 0;
    const size_t z = (ntok + 1) * ((size_t)R->upw1 * 256 + kRowPad) * 2 * kWarps;
    const size_t t = (ntok + 1) * ((size_t)d->paths * d->ku2 * 256 + kRowPad) * 2;
    return z <= (size_t)BR_IC_RES_REGION && t <= (size_t)BR_IC_RES_T_BYTES;
}

extern "C" br_status br_ic_decode_resident(br_ctx *ctx, const br_ic_dev *d, br_act_type type,
                                           const void *x, size_t ntok, const void *bias, void *y,
                                           const char **kernel) {
    const int bf = type == BR_ACT_BF16;
    const br_ic_resident *R = &d->res[bf];
    Args a;
    a.d = *d;
    void *ws = nullptr; /* the compact t: within what br_ic_decode_setup reserved */
    BR_TRY(br_cuda_workspace(ctx, br_ic_tc_bytes(d), &ws));
    a.d.tc = static_cast<uint16_t *>(ws);
    a.upw1 = R->upw1;
    a.rpc2 = R->rpc2;
    a.x = static_cast<const uint16_t *>(x);
    a.bias = static_cast<const uint16_t *>(bias);
    a.y = static_cast<uint16_t *>(y);
    a.ntok = (int)ntok;
    a.count = reinterpret_cast<unsigned long long *>(d->sync + br_ic_res_count_word(d, bf));
    BR_TRY(launch_persistent(ctx, kernel_of(bf), R->grid, kThreads, kSmemBytes, a,
                             "launch of the resident decode kernel"));
    *kernel = "decode_resident";
    return BR_OK;
}
