/* The decode kernel of the CUDA inference plan (src/infer/blr_infer_cuda.h has the
 * layouts): a BLR linear for 1..32 tokens in one launch.
 *
 * A persistent grid of co-resident blocks (a cooperative launch: the runtime refuses
 * a grid that cannot all be resident instead of letting it hang) runs both phases:
 *
 *   phase 1  jobs (path p, k segment, chunk of row tiles): each warp starts the loads
 *            of its first row tile's signs and ℓ, then the block stages z = g_p⊙x of
 *            its segment in shared memory as mma B fragments (f32 product, rounded
 *            once to the activation type); each warp takes row tiles of the chunk,
 *            expands their signs from 16-byte loads into A fragments and sums the
 *            segment on the tensor cores, the next units' loads in flight while it
 *            sums. A row tile's ks1 segment sums go to global scratch; the warp that
 *            arrives last at the tile's counter adds them in segment order (whatever
 *            the arrival order: the same bits every run), scales by ℓ, rounds t to the
 *            activation type and writes it as phase 2's B fragments (or compact,
 *            where phase 2 copies t to shared memory: below).
 *   barrier  each block loads what phase 2 needs first and does not depend on t (its
 *            first item's signs per warp, its first job's h and bias), then arrives
 *            once at a grid barrier (a counter and a generation word) and waits.
 *   phase 2  jobs (chunk of output row tiles): warps sum (row tile, path, k segment)
 *            items from t's fragments into shared memory, and the block adds them in
 *            a fixed order, applies h_p and the bias, and stores y.
 *
 * Two variants, by what fits shared memory (br_blr_infer_cuda_kernel names them):
 *   decode         t's B fragments are read from L2 by every warp that needs them.
 *   decode_t_smem  t, compact ([ntok][paths][r] f16), is copied to each block's
 *                  shared memory once after the barrier and the fragments are read
 *                  from there. A fragment carries 8 token columns, so for one token
 *                  the L2 path reads 8× t's bytes, and every item of every block
 *                  reads them again.
 * Up to 8 tokens, where it fits, br_ic_decode runs decode_resident.cu's kernel instead.
 *
 * Every step of a launch that waits on memory is a latency (hundreds of ns) on the
 * critical path of a microsecond-scale kernel, so loads that do not depend on an
 * earlier step are issued before it. The counters reset themselves: a tile's arrival
 * counter by its last arriver, the barrier's by the last block to arrive, and the
 * generation word only grows, so every launch (graph replays too) finds them ready.
 * Nothing here allocates. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/cuda_internal.h"
#include "infer/blr_infer_cuda.h"
#include "backend/cuda/infer/decode_common.cuh"

namespace {

/* phase 1's segment partials of a row tile read at once by its last arriver */
constexpr int kRedBatch = 8;
/* shared memory: phase 1's z fragments or phase 2's partial sums (the same bytes),
 * then a 16×8 transpose scratch per warp, then phase 2's h (each path) and bias of a
 * job's rows, f32 */
constexpr int kRegionBytes = 32768;
/* row tiles of a phase-2 job at most: its h and bias fit the cache */
constexpr int kRpc2Max = 16;
constexpr int kHbRows = kRpc2Max * 16;
constexpr int kHbBytes = 3 * kHbRows * 4;
/* phase 2's copy of t where it fits (Args::tsmem): [ntok][paths][ku2·256] f16 at a row
 * stride of paths·ku2·256 + 8 halves, so the 8 tokens of a B fragment fall in
 * different banks */
constexpr int kTsBytes = 32768;
constexpr int kTsOff = kRegionBytes + kWarps * 256 + kHbBytes;
constexpr int kSmemBytes = kTsOff + kTsBytes;
static_assert(kTsOff % 16 == 0, "t's copy is written 16 bytes at a time");
static_assert(kHbRows <= kThreads, "a thread holds one row's h and bias across the barrier");
/* phase-2 items a job may hold: their partials fill the region at 4 token tiles */
constexpr int kItemsMax4 = kRegionBytes / (BR_IC_TT_MAX * 512);

struct Args {
    br_ic_dev d;
    br_ic_launch L;
    const uint16_t *x, *bias;
    uint16_t *y;
    int ntok;
    /* t goes compact through d.tc and phase 2 reads it from a copy in shared memory
     * (else as B fragments through d.tfrag, from L2) */
    int tsmem;
};

/* Row stride (halves) of phase 2's copy of t. */
__host__ __device__ inline int ts_stride(const br_ic_dev &d) { return d.paths * d.ku2 * 256 + 8; }

/* acc = (signs of units [0, nu) of a row tile) · B, B's fragment of unit u, k step
 * kk, token tile tt from bfrag(u, kk, tt). `a` holds the first kPF units' signs on
 * entry (load_units); each batch's successor is loaded before the batch is summed, so
 * a warp has two batches of loads in flight, not one. */
template <bool kBF, int TT, class BFrag>
__device__ __forceinline__ void sum_units(const uint32_t *bits, int nu, uint4 (&a)[kPF],
                                          BFrag bfrag, float (&acc)[TT][4]) {
#pragma unroll
    for (int tt = 0; tt < TT; tt++) acc[tt][0] = acc[tt][1] = acc[tt][2] = acc[tt][3] = 0.f;
    for (int uc = 0; uc < nu; uc += kPF) {
        uint4 nx[kPF];
#pragma unroll
        for (int j = 0; j < kPF; j++)
            nx[j] = uc + kPF + j < nu ? ld_stream(bits + (size_t)(uc + kPF + j) * 128)
                                      : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < kPF; j++) {
            if (uc + j >= nu) break;
#pragma unroll
            for (int kk = 0; kk < 16; kk++) {
                uint32_t af[4];
                expand<kBF>(word_of(a[j], kk), kk, af);
#pragma unroll
                for (int tt = 0; tt < TT; tt++) {
                    const uint2 b = bfrag(uc + j, kk, tt);
                    mma<kBF>(acc[tt], af, b.x, b.y);
                }
            }
        }
#pragma unroll
        for (int j = 0; j < kPF; j++) a[j] = nx[j];
    }
}

/* Whether this warp is the last of `total` to arrive at `counter` (resetting it then).
 * Every lane's stores before the call are visible to the last warp's lanes after it
 * (read them with __ldcg). */
__device__ __forceinline__ bool warp_last_arrival(uint32_t *counter, uint32_t total, int lane) {
    __syncwarp();
    uint32_t last = 0;
    if (lane == 0) {
        last = atom_add_acq_rel(counter, 1u) == total - 1;
        if (last) *counter = 0;
    }
    last = __shfl_sync(0xffffffffu, last, 0);
    __syncwarp(); /* the lanes' reads of the partials after lane 0's acquire */
    return last != 0;
}

/* ---------------------------------------------------------------- phase 1 */

/* Row tile rt of path p is complete in `sum`: t = ℓ⊙sum rounded, into the compact t
 * (d.tc [ntok][paths][rt1·16]) for the launch's tokens. */
template <bool kBF>
__device__ void write_tc(const Args &A, int p, int rt, int tt, const float4 &sum, const float (&lv)[2],
                         int lane) {
    const int g = lane / 4, c = lane % 4, rows = A.d.rt1 * 16;
    const float s[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int tok = tt * 8 + 2 * c + j % 2;
        if (tok < A.ntok)
            A.d.tc[((size_t)tok * A.d.paths + p) * rows + rt * 16 + g + 8 * (j / 2)] =
                round1<kBF>(__fmul_rn(s[j], lv[j / 2]));
    }
}

/* The z fragments of `nks` k steps from k step ks0 (of path p's inputs) into zs
 * [nks][TT][32] uint2: b0 holds inputs 2c, 2c+1, b1 inputs 2c+8, 2c+9 of the step,
 * token tt·8 + g, where lane = 4g + c. Zero past n and past ntok.
 * A thread takes chunks of 8 inputs of one token (half a k step: four lanes' b0 or
 * b1), consecutive threads consecutive chunks, so x and g are read 16 bytes at a
 * time where n, x and g allow; kZBatch chunks' loads are issued before any is used,
 * since each load is a memory round trip on the kernel's critical path. */
constexpr int kZBatch = 4;
template <bool kBF, int TT>
__device__ void stage_z(const Args &A, int p, int ks0, int nks, uint2 *zs) {
    const int n = A.d.n, ntok = A.ntok, chunks = nks * 2, k_base = ks0 * 16;
    const float *g = A.d.g + (size_t)p * n;
    const bool vec = n % 8 == 0 && reinterpret_cast<uintptr_t>(g) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(A.x) % 16 == 0;
    uint32_t *zw = reinterpret_cast<uint32_t *>(zs);
    const int total = TT * 8 * chunks;
    for (int e0 = threadIdx.x; e0 < total; e0 += kZBatch * kThreads) {
        uint4 xv[kZBatch];
        float4 gv[kZBatch][2];
#pragma unroll
        for (int b = 0; b < kZBatch; b++) {
            const int e = e0 + b * kThreads, tok = e / chunks, k0 = k_base + e % chunks * 8;
            if (e < total && tok < ntok && vec && k0 + 8 <= n) {
                xv[b] = __ldg(reinterpret_cast<const uint4 *>(A.x + (size_t)tok * n + k0));
                gv[b][0] = __ldg(reinterpret_cast<const float4 *>(g + k0));
                gv[b][1] = __ldg(reinterpret_cast<const float4 *>(g + k0 + 4));
            }
        }
#pragma unroll
        for (int b = 0; b < kZBatch; b++) {
            const int e = e0 + b * kThreads;
            if (e >= total) break;
            const int tok = e / chunks, ch = e % chunks, k0 = k_base + ch * 8;
            float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
            if (tok < ntok && vec && k0 + 8 <= n)
                gx8<kBF>(xv[b], gv[b][0], gv[b][1], v);
            else if (tok < ntok)
                gx8_edge<kBF>(A.x + (size_t)tok * n, g, n, k0, v);
            /* half h of k step ks: word h of lanes 4·(tok % 8) + c, inputs 2c, 2c + 1 */
            const int ks = ch / 2, h = ch % 2;
            uint32_t *w = zw + (((size_t)ks * TT + tok / 8) * 32 + 4 * (tok % 8)) * 2 + h;
#pragma unroll
            for (int c = 0; c < 4; c++) w[2 * c] = pack2<kBF>(v[2 * c], v[2 * c + 1]);
        }
    }
}

/* Row tile rt of path p is complete in `sum` (lane's C fragment, token tile tt): t =
 * ℓ⊙sum rounded (lv: ℓ of the lane's rows g and g + 8, 0 past r), transposed through
 * the warp's scratch into B-fragment order. */
template <bool kBF>
__device__ void write_t(const Args &A, int p, int rt, int tt, const float4 &sum, const float (&lv)[2],
                        int lane, uint16_t *tsh) {
    const int g = lane / 4, c = lane % 4;
    const float s[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int tok = tt * 8 + 2 * c + j % 2;
        const float v = tok < A.ntok ? __fmul_rn(s[j], lv[j / 2]) : 0.f;
        tsh[(g + 8 * (j / 2)) * 8 + 2 * c + j % 2] = round1<kBF>(v);
    }
    __syncwarp();
    /* B fragment: b0 = t[2c, 2c+1][g], b1 = t[2c+8, 2c+9][g] (k = row of the tile) */
    const uint32_t b0 = tsh[(2 * c) * 8 + g] | (uint32_t)tsh[(2 * c + 1) * 8 + g] << 16;
    const uint32_t b1 = tsh[(2 * c + 8) * 8 + g] | (uint32_t)tsh[(2 * c + 9) * 8 + g] << 16;
    const size_t ks2 = (size_t)A.d.ku2 * 16;
    reinterpret_cast<uint2 *>(A.d.tfrag)[(((size_t)p * ks2 + rt) * BR_IC_TT_MAX + tt) * 32 + lane] =
        make_uint2(b0, b1);
    __syncwarp(); /* the scratch is reused */
}

template <bool kBF, int TT>
__device__ void phase1(const Args &A, unsigned char *smem) {
    const br_ic_dev &d = A.d;
    const br_ic_launch &L = A.L;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    uint2 *zs = reinterpret_cast<uint2 *>(smem);
    uint16_t *tsh = reinterpret_cast<uint16_t *>(smem + kRegionBytes) + warp * 128;
    const int chunks = (d.rt1 + L.rpc1 - 1) / L.rpc1;
    const int jobs = d.paths * L.ks1 * chunks;
    for (int job = blockIdx.x; job < jobs; job += gridDim.x) {
        const int col = job / chunks, ch = job % chunks;
        const int p = col / L.ks1, ks = col % L.ks1;
        const int u0 = ks * L.seg1, nu = std::min(L.seg1, d.ku1 - u0);
        const int rt_lo = ch * L.rpc1, rt_hi = std::min(d.rt1, rt_lo + L.rpc1);
        const float *l = d.l + (size_t)p * d.r;
        /* the first row tile's signs: in flight while z is staged */
        uint4 a[kPF];
        if (rt_lo + warp < rt_hi)
            load_units(d.bits1 + (((size_t)p * d.rt1 + rt_lo + warp) * d.ku1 + u0) * 128 + lane * 4,
                       nu, a);
        __syncthreads(); /* the previous job's fragments are no longer read */
        stage_z<kBF, TT>(A, p, u0 * 16, nu * 16, zs);
        __syncthreads();
        for (int rt = rt_lo + warp; rt < rt_hi; rt += kWarps) {
            const uint32_t *bits = d.bits1 + (((size_t)p * d.rt1 + rt) * d.ku1 + u0) * 128 + lane * 4;
            if (rt != rt_lo + warp) load_units(bits, nu, a);
            float lv[2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int row = rt * 16 + lane / 4 + 8 * i;
                lv[i] = row < d.r ? __ldg(l + row) : 0.f;
            }
            float acc[TT][4];
            sum_units<kBF, TT>(bits, nu, a,
                               [&](int u, int kk, int tt) {
                                   return zs[((size_t)(u * 16 + kk) * TT + tt) * 32 + lane];
                               },
                               acc);
            float4 *part = reinterpret_cast<float4 *>(d.part1) +
                           ((((size_t)p * d.rt1 + rt) * L.ks1) * TT) * 32 + lane;
            bool last = true;
            if (L.ks1 > 1) {
#pragma unroll
                for (int tt = 0; tt < TT; tt++)
                    part[((size_t)ks * TT + tt) * 32] =
                        make_float4(acc[tt][0], acc[tt][1], acc[tt][2], acc[tt][3]);
                last = warp_last_arrival(d.sync + (size_t)p * d.rt1 + rt, (uint32_t)L.ks1, lane);
            }
            if (!last) continue;
#pragma unroll
            for (int tt = 0; tt < TT; tt++) {
                float4 sum = make_float4(acc[tt][0], acc[tt][1], acc[tt][2], acc[tt][3]);
                if (L.ks1 > 1) { /* the segments in order 0, 1, ...: the same bits every run */
                    sum = __ldcg(part + (size_t)tt * 32);
                    /* kRedBatch loads in flight before their adds: one after another
                     * they would cost an L2 round trip each */
                    for (int s0 = 1; s0 < L.ks1; s0 += kRedBatch) {
                        float4 v[kRedBatch];
#pragma unroll
                        for (int j = 0; j < kRedBatch; j++)
                            if (s0 + j < L.ks1) v[j] = __ldcg(part + ((size_t)(s0 + j) * TT + tt) * 32);
#pragma unroll
                        for (int j = 0; j < kRedBatch; j++)
                            if (s0 + j < L.ks1) {
                                sum.x = __fadd_rn(sum.x, v[j].x), sum.y = __fadd_rn(sum.y, v[j].y);
                                sum.z = __fadd_rn(sum.z, v[j].z), sum.w = __fadd_rn(sum.w, v[j].w);
                            }
                    }
                }
                if (A.tsmem)
                    write_tc<kBF>(A, p, rt, tt, sum, lv, lane);
                else
                    write_t<kBF>(A, p, rt, tt, sum, lv, lane, tsh);
            }
        }
    }
}
/* ---------------------------------------------------------------- the barrier */

/* Every block of the grid past this point once all have reached it, their global
 * stores before it visible after it. The last to arrive resets the counter and bumps
 * the generation word; the others wait for the bump. gen0: the generation word as this
 * block's thread 0 read it before arriving (it cannot change before every block has
 * arrived); only thread 0 reads it here. */
__device__ __forceinline__ void grid_barrier(uint32_t *arrive, uint32_t *gen, const uint32_t &gen0_of_block) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const uint32_t gen0 = gen0_of_block;
        if (atom_add_acq_rel(arrive, 1u) == gridDim.x - 1) {
            *arrive = 0; /* read again only by the next launch */
            st_release(gen, gen0 + 1);
        } else {
            while (ld_acquire(gen) == gen0) {
            }
        }
    }
    __syncthreads();
}

/* ---------------------------------------------------------------- phase 2 */

/* h of each path and the bias (f32, 0 without one) of the rows of job `job` into hb
 * [3][kHbRows]. */
template <bool kBF>
__device__ __forceinline__ void load_hb(const Args &A, int job, float *hb) {
    const br_ic_dev &d = A.d;
    const int row0 = job * A.L.rpc2 * 16, rows = std::min(d.m - row0, A.L.rpc2 * 16);
    for (int e = threadIdx.x; e < rows; e += kThreads) {
        for (int p = 0; p < d.paths; p++) hb[p * kHbRows + e] = __ldg(d.h + (size_t)p * d.m + row0 + e);
        hb[2 * kHbRows + e] = A.bias ? to_f32<kBF>(__ldg(A.bias + row0 + e)) : 0.f;
    }
}

template <bool kBF, int TT>
__device__ void phase2(const Args &A, unsigned char *smem, const uint32_t &gen0) {
    const br_ic_dev &d = A.d;
    const br_ic_launch &L = A.L;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float4 *ps = reinterpret_cast<float4 *>(smem);
    float *hb = reinterpret_cast<float *>(smem + kRegionBytes + kWarps * 256);
    const int jobs = (d.rt2 + L.rpc2 - 1) / L.rpc2;
    const int per_rt = d.paths * L.ks2;
    /* what does not depend on t, loaded before the barrier: each warp's first item's
     * signs, the first job's h and bias (a row a thread, held in registers until the
     * epilogue: stored to shared memory before the barrier, they would hold the
     * block's arrival for a memory round trip) */
    uint4 a[kPF];
    float hreg[3] = {0.f, 0.f, 0.f};
    if ((int)blockIdx.x < jobs) {
        const int rt_lo = blockIdx.x * L.rpc2;
        const int items = (std::min(d.rt2, rt_lo + L.rpc2) - rt_lo) * per_rt;
        if (warp < items) {
            const int rt = rt_lo + warp / per_rt, p = warp / L.ks2 % d.paths, ks = warp % L.ks2;
            const int u0 = ks * L.seg2, nu = std::max(0, std::min(L.seg2, d.ku2 - u0));
            load_units(d.bits2 + (((size_t)rt * d.paths + p) * d.ku2 + u0) * 128 + lane * 4, nu, a);
        }
        const int row0 = blockIdx.x * L.rpc2 * 16, rows = std::min(d.m - row0, L.rpc2 * 16);
        if ((int)threadIdx.x < rows) {
            for (int p = 0; p < d.paths; p++) hreg[p] = __ldg(d.h + (size_t)p * d.m + row0 + threadIdx.x);
            if (A.bias) hreg[2] = to_f32<kBF>(__ldg(A.bias + row0 + threadIdx.x));
        }
    }
    grid_barrier(d.sync + (size_t)d.paths * d.rt1, d.sync + (size_t)d.paths * d.rt1 + 1, gen0);
    /* t into shared memory once, rather than each warp reading its items' fragments
     * from L2: there 8 token columns a fragment are read for each token, and every
     * block reads them again */
    uint16_t *ts = reinterpret_cast<uint16_t *>(smem + kTsOff);
    const int rpad = d.ku2 * 256, S = ts_stride(d);
    if (A.tsmem) {
        const int rows = d.rt1 * 16, per_tok = d.paths * rpad / 8; /* 16-byte pieces */
        for (int e = threadIdx.x; e < A.ntok * per_tok; e += kThreads) {
            const int tok = e / per_tok, q = e % per_tok, p = q / (rpad / 8), k = q % (rpad / 8) * 8;
            uint4 v = make_uint4(0, 0, 0, 0); /* rows past rt1·16: zero */
            if (k < rows)
                v = __ldcg(reinterpret_cast<const uint4 *>(d.tc + ((size_t)tok * d.paths + p) * rows + k));
            *reinterpret_cast<uint4 *>(ts + (size_t)tok * S + p * rpad + k) = v;
        }
        __syncthreads();
    }
    for (int job = blockIdx.x; job < jobs; job += gridDim.x) {
        const int rt_lo = job * L.rpc2, nrt = std::min(d.rt2, rt_lo + L.rpc2) - rt_lo;
        const int items = nrt * per_rt;
        if (job != (int)blockIdx.x) load_hb<kBF>(A, job, hb);
        for (int it = warp; it < items; it += kWarps) {
            const int rt = rt_lo + it / per_rt, p = it / L.ks2 % d.paths, ks = it % L.ks2;
            const int u0 = ks * L.seg2, nu = std::max(0, std::min(L.seg2, d.ku2 - u0));
            const uint32_t *bits = d.bits2 + (((size_t)rt * d.paths + p) * d.ku2 + u0) * 128 + lane * 4;
            if (job != (int)blockIdx.x || it != warp) load_units(bits, nu, a);
            const uint2 *tf = reinterpret_cast<const uint2 *>(d.tfrag) +
                              ((size_t)p * d.ku2 * 16 + (size_t)u0 * 16) * BR_IC_TT_MAX * 32 + lane;
            float acc[TT][4];
            if (A.tsmem) {
                const uint16_t *tk = ts + p * rpad + u0 * 256 + 2 * (lane % 4);
                sum_units<kBF, TT>(bits, nu, a,
                                   [&](int u, int kk, int tt) {
                                       return frag_compact(tk, S, tt * 8 + lane / 4, A.ntok, u, kk);
                                   },
                                   acc);
            } else {
                sum_units<kBF, TT>(bits, nu, a,
                                   [&](int u, int kk, int tt) {
                                       return __ldcg(tf + ((size_t)(u * 16 + kk) * BR_IC_TT_MAX + tt) * 32);
                                   },
                                   acc);
            }
#pragma unroll
            for (int tt = 0; tt < TT; tt++)
                ps[((size_t)it * TT + tt) * 32 + lane] =
                    make_float4(acc[tt][0], acc[tt][1], acc[tt][2], acc[tt][3]);
        }
        if (job == (int)blockIdx.x && (int)threadIdx.x < nrt * 16)
            for (int i = 0; i < 3; i++) hb[i * kHbRows + threadIdx.x] = hreg[i];
        __syncthreads();
        /* y[tok][row] = Σ_p h_p[row]·(Σ_ks item sums) + bias[row]: paths and segments in
         * order; consecutive threads take consecutive rows (coalesced stores) */
        const float *pf = reinterpret_cast<const float *>(ps);
        const int rows = nrt * 16;
        for (int e = threadIdx.x; e < A.ntok * rows; e += kThreads) {
            const int tok = e / rows, rr = e % rows, row = rt_lo * 16 + rr;
            if (row >= d.m) continue;
            const int rtl = rr / 16, i = rr % 16, tt = tok / 8, tk = tok % 8;
            const int ln = (i % 8) * 4 + tk / 2, comp = (i / 8) * 2 + tk % 2;
            float v = 0.f;
            for (int p = 0; p < d.paths; p++) {
                const int it0 = rtl * per_rt + p * L.ks2;
                float c = pf[(((size_t)it0 * TT + tt) * 32 + ln) * 4 + comp];
                for (int s = 1; s < L.ks2; s++)
                    c = __fadd_rn(c, pf[(((size_t)(it0 + s) * TT + tt) * 32 + ln) * 4 + comp]);
                const float hc = __fmul_rn(hb[p * kHbRows + rr], c);
                v = p == 0 ? hc : __fadd_rn(v, hc);
            }
            if (A.bias) v = __fadd_rn(v, hb[2 * kHbRows + rr]);
            A.y[(size_t)tok * d.m + row] = round1<kBF>(v);
        }
        __syncthreads();
    }
}

template <bool kBF, int TT>
__global__ void __launch_bounds__(kThreads, 2) decode_kernel(const Args A) {
    extern __shared__ __align__(16) unsigned char smem[];
    /* the barrier's generation before this block arrives (read first: every block's
     * arrival comes after its own read) */
    __shared__ uint32_t gen0;
    if (threadIdx.x == 0) gen0 = ld_relaxed(A.d.sync + (size_t)A.d.paths * A.d.rt1 + 1);
    phase1<kBF, TT>(A, smem);
    phase2<kBF, TT>(A, smem, gen0);
}

using KernelFn = void (*)(const Args);

KernelFn kernel_of(int bf16, int tt) {
    static const KernelFn k[2][BR_IC_TT_MAX] = {
        {decode_kernel<false, 1>, decode_kernel<false, 2>, decode_kernel<false, 3>,
         decode_kernel<false, 4>},
        {decode_kernel<true, 1>, decode_kernel<true, 2>, decode_kernel<true, 3>,
         decode_kernel<true, 4>}};
    return k[bf16][tt - 1];
}

int ceil_div(long long a, long long b) { return (int)((a + b - 1) / b); }

/* The geometry of a launch of `grid` blocks for TT token tiles: the least estimated
 * time of the busiest warp, each phase in units of one unit's mma work (16 k steps). */
br_ic_launch choose(const br_ic_dev &d, int grid, int TT) {
    br_ic_launch L = {};
    L.grid = grid;
    /* phase 1: segments of seg1 units (their z fragments fit the region) */
    const int seg_max = std::max(1, kRegionBytes / (16 * TT * 256));
    double best = -1;
    for (int seg = 1; seg <= std::min(seg_max, d.ku1); seg++) {
        const int ks = ceil_div(d.ku1, seg);
        if (seg > 1 && ceil_div(d.ku1, seg - 1) == ks) continue; /* same split, longer segments */
        const int cols = d.paths * ks;
        const int per_col = std::max(1, grid / cols);
        const int rpc = ceil_div(d.rt1, per_col);
        const int jobs = cols * ceil_div(d.rt1, rpc);
        /* a warp's units, plus staging z (about a unit's worth a segment) and the
         * reduction of the segments (a tenth of a unit each) */
        const double cost = (double)ceil_div(jobs, grid) *
                            ((double)ceil_div(rpc, kWarps) * seg + 1.0 + 0.1 * ks);
        if (best < 0 || cost < best) best = cost, L.ks1 = ks, L.seg1 = seg, L.rpc1 = rpc;
    }
    /* phase 2: one job a block where the partials fit, k segments to busy the warps */
    const int items_max = kRegionBytes / (TT * 512);
    L.rpc2 = std::max(1, std::min({ceil_div(d.rt2, grid), items_max / d.paths, kRpc2Max}));
    const int jobs2 = ceil_div(d.rt2, L.rpc2);
    best = -1;
    for (int ks = 1; ks <= d.ku2; ks++) {
        const int seg = ceil_div(d.ku2, ks), kse = ceil_div(d.ku2, seg);
        if (kse != ks) continue;
        if (L.rpc2 * d.paths * ks > items_max) break;
        const double cost = (double)ceil_div(jobs2, grid) *
                            ((double)ceil_div(L.rpc2 * d.paths * ks, kWarps) * seg + 0.05 * ks);
        if (best < 0 || cost < best) best = cost, L.ks2 = ks, L.seg2 = seg;
    }
    return L;
}

} // namespace

static_assert(kItemsMax4 >= 2 * 1, "a job holds both paths of a row tile");

extern "C" br_status br_ic_decode_setup(br_ctx *ctx, br_ic_dev *d) {
    br_cuda *s = br_cuda_state(ctx);
    for (int bf = 0; bf < 2; bf++)
        for (int tt = 1; tt <= BR_IC_TT_MAX; tt++) {
            KernelFn k = kernel_of(bf, tt);
            BR_CUDA_TRY(ctx, cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  kSmemBytes));
            int per_sm = 0;
            BR_CUDA_TRY(ctx, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads,
                                                                          kSmemBytes));
            if (per_sm < 1)
                return br_fail(ctx, BR_E_DEVICE,
                               "br_blr_infer_cuda_new: the decode kernel does not fit an SM of "
                               "cuda:%d", s->device);
            d->launch[bf][tt - 1] = choose(*d, per_sm * s->sm_count, tt);
        }
    BR_TRY(br_ic_resident_setup(ctx, d));
    const size_t need = br_ic_decode_bytes(d);
    void *ws = nullptr;
    return need ? br_cuda_workspace(ctx, need, &ws) : BR_OK;
}

extern "C" br_status br_ic_decode(br_ctx *ctx, const br_ic_dev *d, br_act_type type, const void *x,
                                  size_t ntok, const void *bias, void *y, const char **kernel) {
    if (br_ic_resident_fits(d, type, ntok))
        return br_ic_decode_resident(ctx, d, type, x, ntok, bias, y, kernel);
    const int bf = type == BR_ACT_BF16, tt = (int)((ntok + 7) / 8);
    Args a;
    a.d = *d;
    a.L = d->launch[bf][tt - 1];
    /* the partials: within what br_ic_decode_setup reserved, so no allocation here */
    const size_t part1_bytes = (size_t)d->paths * d->rt1 * a.L.ks1 * tt * 128 * sizeof(float);
    const size_t tc_bytes = br_ic_tc_bytes(d);
    void *ws = nullptr;
    BR_TRY(br_cuda_workspace(ctx, tc_bytes + (a.L.ks1 > 1 ? part1_bytes : 0), &ws));
    a.d.tc = static_cast<uint16_t *>(ws);
    a.d.part1 = a.L.ks1 > 1 ? reinterpret_cast<float *>(static_cast<unsigned char *>(ws) + tc_bytes)
                            : nullptr;
    a.tsmem = (size_t)ntok * ts_stride(*d) * 2 <= (size_t)kTsBytes;
    a.x = static_cast<const uint16_t *>(x);
    a.bias = static_cast<const uint16_t *>(bias);
    a.y = static_cast<uint16_t *>(y);
    a.ntok = (int)ntok;
    BR_TRY(launch_persistent(ctx, kernel_of(bf, tt), a.L.grid, kThreads, kSmemBytes, a,
                             "launch of the decode kernel"));
    *kernel = a.tsmem ? "decode_t_smem" : "decode";
    return BR_OK;
}
