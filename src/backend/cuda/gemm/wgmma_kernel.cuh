/* The Hopper GEMM family (sm_90a): warp-specialized, persistent, TMA-fed wgmma.
 *
 * The kernel computes the transposed product, outᵀ[j][i] = Σ_kk plane[j][kk]·act[i][kk]:
 * the plane is wgmma's A operand (M = plane rows j), the activation its K-major B
 * operand (N = tokens i), loaded by TMA as [BT tokens][64 k] tiles (128-byte swizzle).
 *
 * A CTA of 384 threads. Warpgroup 0 produces; warpgroups 1 and 2 consume, each owning
 * 64·kWgM of the CTA's BJ = 128·kWgM plane rows and all BT tokens (kWgM wgmma
 * m64nBTk16 per 16-wide k step). Stages are handed over with mbarriers (full: data
 * landed; empty: both consumers are done with it). CTAs loop over tiles (persistent
 * grid), so the producer fetches the next tile while the consumers store the last.
 *
 * Where the plane (A) comes from, kASets:
 *   0   shared memory, [BJ][64] f16 tiles in the TMA swizzle: an f16 plane by TMA;
 *       a bitmap expanded to ±1 halves there by the producer warpgroup (its 128
 *       threads are otherwise idle), so the consumers run exactly the f16 loop;
 *   ≥2  registers (bitmaps): the producer copies the tile's bit words with cp.async
 *       and each consumer thread expands its bits straight into wgmma A-fragment
 *       registers (register-A wgmma), one wgmma per step with kASets fragment sets
 *       in flight. No shared-memory bandwidth for A, but ptxas gives a consumer
 *       only 168 registers (128 of them accumulators), hence the small sets.
 * On the H200 (bench_gemm) registers with 2 sets and 128 × 256 tiles
 * are the fastest bitmap variant; the shared-memory expansion trails by 0–10 %
 * (ROWS) and 5–10 % (COLS): the single producer warp per SM quarter does not keep
 * the consumers fed.
 *
 * Epilogue: each accumulator becomes (acc·oscale)·colscale[j] (+ beta·c[i][j]) and
 * goes through shared memory in [tokens][32 plane rows] f32 boxes (128-byte
 * swizzled, bank-conflict free) to leave by TMA stores, which clip at m and n. With
 * c, TMA first loads c's boxes into those same boxes (the tile's first ones while
 * its main loop runs) and each thread reads c where it then writes: no c in
 * registers (none spill beside 128 accumulators), no load latency per element.
 * When the output block is not 16-byte aligned, or n·4 bytes is not (TMA clips the
 * inner dimension at 16-byte granularity), or c is not, each thread stores its
 * values directly instead (reading c per element).
 *
 * kEpi: each kernel is built per epilogue. EPI_PLAIN: the plain product (no
 * colscale, no c, no split), out = acc·oscale with the epilogue's features compiled
 * out, so its boxes are filled by straight-line multiplies and stores; runtime
 * tests per element (c or not, colscale or not), unrolled over 128 accumulators,
 * make the epilogue about 3.5× larger in code and branchy. EPI_FULL: colscale, c
 * and split-K. EPI_STAGE16 (f16 planes, the MM_STAGE op with an f16 c): the f16 c
 * of the whole tile loads under its main loop into f16 boxes, and v = acc·oscale +
 * beta·c leaves as f16(v·s16) written over it in place: the layer's loss gradient
 * goes to its backward without an f32 pass through memory. TMA only (the launcher
 * sends unaligned operands to the unfused path).
 *
 * MN-major operands (kMN, the MM_TN op: act [k][m] and plane [k][n], k rows first,
 * as the layer's token-major matrices are stored): TMA loads [64 k][64] boxes along
 * the tokens and the plane rows (128-byte swizzle, 8192 bytes each) and wgmma reads
 * them through MN-major descriptors with its transpose bits set; the rest of the
 * kernel is the same. Tiles with whole boxes of tokens only (kBT % 64 == 0).
 *
 * Split-K (a.splits > 1): the work units are tiles × splits, unit u the tile
 * u % tiles over k blocks [split·nkb_unit, (split+1)·nkb_unit) with split =
 * u / tiles. A unit stores its raw sums (no epilogue) to the workspace, split s at
 * rows s·mpad.. of an f32 [splits·mpad][ldw] matrix; reduce_splits_kernel then adds
 * the splits in order 0, 1, … and applies the epilogue: the result does not depend
 * on which CTA ran which unit when.
 *
 * Shapes: any m, n ≥ 1; k a multiple of 32 (a k tail of 32 is zero-filled by TMA and
 * predicated for bits). Rows past m or n are zero-filled by TMA or never loaded. */
#ifndef BR_BACKEND_CUDA_GEMM_WGMMA_KERNEL_CUH
#define BR_BACKEND_CUDA_GEMM_WGMMA_KERNEL_CUH

#include <cuda.h> /* CUtensorMap (the driver entry point is fetched at run time) */

#include <algorithm>
#include <atomic>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

#include "backend/cuda/gemm/common.cuh"
#include "backend/cuda/gemm/ptx.cuh"
#include "backend/cuda/gemm/wgmma_ops.cuh"

namespace br_gemm_cuda {


/* Encodes a 2-D row-major tensor map: `inner` elements per row (contiguous), `rows`
 * rows `row_bytes` apart, boxes of box_inner × box_rows, 128-byte swizzle unless
 * told, zero fill out of bounds (gemm/dispatch.cu). */
br_status encode_tmap_2d(br_ctx *ctx, CUtensorMap *map, CUtensorMapDataType type, const void *base,
                         uint64_t inner, uint64_t rows, uint64_t row_bytes, uint32_t box_inner,
                         uint32_t box_rows,
                         CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B);

struct WgmmaArgs {
    const uint32_t *bits;      /* the bitmap (ROWS, COLS) */
    float *out;                /* element [0][ocol], or the split-K workspace */
    long long ldo;             /* row stride of out (the workspace's: ldw) */
    const float *colscale, *c; /* the epilogue's (NULL: absent; unused with splits) */
    float beta;
    int m, n, k, words;
    int tiles_j, tiles;         /* tile grid: tiles_j along n, tiles in all */
    int splits, nkb_unit, mpad; /* split-K: units = tiles · splits (1: no split) */
    float oscale;
    int tma_store; /* the output block allows TMA stores (see above) */
    /* EPI_STAGE16: f16(out·s16) to o16 [rows16][ld16] */
    uint16_t *o16;
    long long ld16;
    int rows16;
    float s16;
    int c_at;            /* EPI_STAGE16: the k block of a unit at which c's loads are issued */
    const uint16_t *c16; /* EPI_STAGE16: c [m][ldc16] (read again only for a NaN) */
    long long ldc16;
    /* A second product in the same launch (MN-major plain kernels, br_mm_tn2): units
     * [tiles1, tiles) are its tiles, tiles_j2 along its n2, with its own operand and
     * output maps (tm_act2, tm_plane2, tm_out2) and out2 [m2][ldo2]. tiles1 = tiles
     * without one. */
    int tiles1, tiles_j2, m2, n2;
    float oscale2;
    float *out2;
    long long ldo2;
#ifdef BR_WGMMA_TRACE
    /* debugging builds: consumer thread 0's clock at each phase of its first tiles,
     * [cta][consumer][tile][BR_TRACE_STAMPS] into br_trace_buf (0: none; trace_flag) */
    int trace;
#endif
};
#ifdef BR_WGMMA_TRACE
constexpr int BR_TRACE_CTAS = 160, BR_TRACE_TILES = 16, BR_TRACE_STAMPS = 7;
static __device__ long long br_trace_buf[BR_TRACE_CTAS * 2 * BR_TRACE_TILES * BR_TRACE_STAMPS];
#endif

/* The epilogue a kernel is built with (see the top of this file); the numbers are
 * those BITRANK_TRACE_EPI names. */
enum EpiKind { EPI_PLAIN = 0, EPI_FULL = 1, EPI_STAGE16 = 3 };
/* Sets of epilogue boxes in shared memory: one; 0 for EPI_STAGE16, whose area holds a
 * whole tile of f16 boxes instead. */
constexpr int epi_box_sets(int epi) { return epi == EPI_STAGE16 ? 0 : 1; }

template <int kKind, int kWgM, int kBT, int kASets, int kEpiSets = 1> struct WgmmaCfg {
    static constexpr bool kSmemA = kKind == PLANE_F16 || kASets == 0;
    static constexpr bool kExpand = kKind != PLANE_F16 && kASets == 0; /* producer expands */
    /* plane rows per tile, split between the consumers */
    static constexpr int kBJ = 128 * kWgM;
    static constexpr int kBK = 64; /* k per stage: one 128-byte swizzle row of f16 */
    static constexpr int kActBytes = kBT * kBK * 2;
    static constexpr int kColsRowWords = kBJ / 32 + 1; /* COLS stage row, padded: no conflicts */
    static constexpr int kPlaneBytes = kSmemA                ? kBJ * kBK * 2
                                       : kKind == PLANE_ROWS ? kBJ * 2 * 4
                                                             : kBK * kColsRowWords * 4;
    /* tokens per epilogue box (a divisor of kBT, ≤ 128) and boxes along the tokens */
    static constexpr int kEpiRows = kBT <= 128 ? kBT : kBT % 128 == 0 ? 128 : kBT / 2;
    static constexpr int kEpiRounds = kBT / kEpiRows;
    static constexpr int kEpiBufBytes = kEpiRows * 32 * 4;
    /* [tokens][32 rows] boxes a consumer fills per round: 2 (all its warps at once),
     * or 1 where the expanded bitmap's stages leave no room */
    static constexpr int kEpiBoxes = kKind == PLANE_F16 || !kSmemA ? 2 : 1;
    /* kEpiSets = 0 (EPI_STAGE16): each consumer's whole tile of f16 [kEpiRows][32]
     * boxes, 64·kWgM plane rows × kBT tokens × 2 bytes; 1: one set of a consumer's
     * boxes */
    static constexpr int kEpiBytes =
        kEpiSets == 0 ? 2 * kWgM * kBT * 128 : 2 * kEpiBoxes * kEpiBufBytes;
    static constexpr int kStages = !(kSmemA || kBT > 128) ? 8
                                   : 4 * (kActBytes + kPlaneBytes) + kEpiBytes + 3072 <= 227 * 1024
                                       ? 4
                                       : 3;
    static constexpr int kPlaneOff = kStages * kActBytes;
    static constexpr int kEpiOff = (kPlaneOff + kStages * kPlaneBytes + 1023) / 1024 * 1024;
    static constexpr int kBarOff = kEpiOff + kEpiBytes;
    /* + one c-load barrier per consumer and set, + base alignment slack */
    static constexpr int kSmem = kBarOff + 2 * kStages * 8 + 2 * 8 + 1024;
    /* full barrier: the TMA thread's arrive (+ tx bytes), plus one arrive per
     * expanding producer warp, or one cp.async arrive per copying lane */
    static constexpr int kFullArrivals = kKind == PLANE_F16 ? 1 : kExpand ? 1 + 4 : 1 + 32;
    static constexpr int kTxBytes = kActBytes + (kKind == PLANE_F16 ? kPlaneBytes : 0);
    static_assert(kWgM * kBT <= 256, "128 accumulator registers per thread at most");
    static_assert(kBT % 8 == 0 && kBT <= 256, "wgmma n");
    static_assert(kBT % kEpiRows == 0 && kEpiRows <= 128 && kEpiRows % 8 == 0, "epilogue boxes");
    static_assert(kASets == 0 || (kKind != PLANE_F16 && kASets >= 2 &&
                                  4 * kWgM % (kASets > 0 ? kASets : 1) == 0),
                  "fragment sets must divide a stage's steps");
    static_assert(kSmem <= 227 * 1024, "shared memory");
    static_assert(kEpiSets == 0 || kEpiSets == 1, "box sets");
    static_assert(kStages >= 2, "pipeline stages");
};

/* ---------------------------------------------------------------- bit expansion */

/* Bit words a producer thread expands for one stage: ROWS: rows tid + 128·i, words
 * 2kb, 2kb+1 (k 0..31, 32..63 of the stage); COLS: bitmap rows kb·64 + 32h + lane,
 * word column warp + 4·i (transposed into row words before expanding). */
template <int kWgM> struct StageBits { uint32_t w[kWgM][2]; };

template <int kKind, int kWgM>
__device__ __forceinline__ StageBits<kWgM> load_stage_bits(const WgmmaArgs &a, int j0, int kb,
                                                           int tid) {
    StageBits<kWgM> b;
    const int warp = tid / 32, lane = tid % 32;
#pragma unroll
    for (int i = 0; i < kWgM; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (kKind == PLANE_ROWS) {
                const int gj = j0 + tid + 128 * i, w = 2 * kb + h;
                b.w[i][h] = gj < a.n && w < a.words ? __ldg(a.bits + (size_t)gj * a.words + w) : 0u;
            } else {
                const int gk = 64 * kb + 32 * h + lane, gw = j0 / 32 + warp + 4 * i;
                b.w[i][h] =
                    gk < a.k && gw < a.words ? __ldg(a.bits + (size_t)gk * a.words + gw) : 0u;
            }
        }
    return b;
}

/* A warp's 32 × 32 bit matrix, lane l holding row l (bit b = column b), transposed:
 * lane l gets column l (bit b = row b). Five rounds of swapping the off-diagonal
 * blocks of size d with the lane d apart. */
__device__ __forceinline__ uint32_t transpose32(uint32_t v, int lane) {
    const uint32_t masks[5] = {0x0000FFFFu, 0x00FF00FFu, 0x0F0F0F0Fu, 0x33333333u, 0x55555555u};
#pragma unroll
    for (int r = 0; r < 5; r++) {
        const int d = 16 >> r;
        const uint32_t m = masks[r], other = __shfl_xor_sync(0xffffffffu, v, d);
        v = lane & d ? (v & ~m) | ((other & ~m) >> d) : (v & m) | ((other & m) << d);
    }
    return v;
}

/* Writes a stage's ±1 plane tile, [BJ][64] f16 in the TMA 128-byte swizzle (16-byte
 * chunk c of row r at chunk c ^ (r % 8)), from the bit words of load_stage_bits. */
template <int kKind, int kWgM>
__device__ __forceinline__ void expand_stage(const StageBits<kWgM> &b, uint32_t tile, int tid) {
    const int warp = tid / 32, lane = tid % 32;
#pragma unroll
    for (int i = 0; i < kWgM; i++) {
        uint32_t rw[2]; /* this thread's row: k 0..31, 32..63 */
        int row;
        if (kKind == PLANE_ROWS) {
            rw[0] = b.w[i][0], rw[1] = b.w[i][1];
            row = tid + 128 * i;
        } else {
            /* lane l holds bitmap row k = 32h + l of word column c (bit r: plane row
             * 32c + r); transposing the warp's 32 × 32 bits gives lane r plane row
             * 32c + r over those 32 k */
            rw[0] = transpose32(b.w[i][0], lane), rw[1] = transpose32(b.w[i][1], lane);
            row = 32 * (warp + 4 * i) + lane;
        }
        const uint32_t line = tile + row * 128;
#pragma unroll
        for (int c = 0; c < 8; c++) { /* chunk c: k = 8c .. 8c+7 */
            const uint32_t y = rw[c >> 2] >> (8 * (c & 3));
            sts128(line + ((c ^ (row & 7)) << 4), pm1_pair(y), pm1_pair(y >> 2), pm1_pair(y >> 4),
                   pm1_pair(y >> 6));
        }
    }
}

/* ---------------------------------------------------------------- the kernel */

template <int kKind, int kWgM, int kBT, int kASets, int kEpi, bool kMN>
__global__ void __launch_bounds__(384, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap tm_act,
                      const __grid_constant__ CUtensorMap tm_plane,
                      const __grid_constant__ CUtensorMap tm_out,
                      const __grid_constant__ CUtensorMap tm_c,
                      const __grid_constant__ CUtensorMap tm_16,
                      const __grid_constant__ CUtensorMap tm_act2,
                      const __grid_constant__ CUtensorMap tm_plane2,
                      const __grid_constant__ CUtensorMap tm_out2, const WgmmaArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr bool kFullEpi = kEpi != EPI_PLAIN;
    /* kernels that may run two products (a.tiles1 < a.tiles): MN-major, plain */
    constexpr bool kPair = kMN && !kFullEpi;
    constexpr bool kStage16 = kEpi == EPI_STAGE16;
    static_assert(!kStage16 || kKind == PLANE_F16, "the staging epilogue is built for f16 planes");
    static_assert(!kMN || (kKind == PLANE_F16 && kBT % 64 == 0 && !kStage16),
                  "MN-major operands: f16 planes, whole 64-wide boxes of tokens");
    constexpr int kArea = epi_box_sets(kEpi);
    /* box sets c rotates through */
    constexpr int kSets = kEpi == EPI_FULL ? kArea : 1;
    using Cfg = WgmmaCfg<kKind, kWgM, kBT, kASets, kArea>;
    constexpr int S = Cfg::kStages;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const uint32_t act_s = base, plane_s = base + Cfg::kPlaneOff, epi_s = base + Cfg::kEpiOff;
    const uint32_t full = base + Cfg::kBarOff, empty = full + 8 * S; /* barrier s at +8·s */
    const uint32_t cbar = empty + 8 * S; /* + 8·(consumer·sets + set): c boxes landed */
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    const int warp = tid / 32, lane = tid % 32;
    /* k blocks per work unit (all of k without split), units: tiles × splits */
    const int nkb = kFullEpi ? a.nkb_unit : (a.k + Cfg::kBK - 1) / Cfg::kBK;
    const int units = kFullEpi ? a.tiles * a.splits : a.tiles;

    br_dev_pdl_trigger(); /* the next kernel may take the SMs our CTAs leave */
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) {
            mbar_init(full + 8 * s, Cfg::kFullArrivals);
            /* both consumers' arrivals: per warp, or per thread (release_stage) */
            mbar_init(empty + 8 * s, Cfg::kSmemA ? 8 : 256);
        }
        if (kFullEpi)
            for (int b = 0; b < 2 * kSets; b++)
                mbar_init(cbar + 8 * b, 1);
        mbar_init_fence();
    }
    __syncthreads();
    br_dev_pdl_wait(); /* the barriers are set up while the kernel before finishes */

    if (wg == 0) {
        /* ------------------------------------------------ producer */
        if (Cfg::kExpand)
            regs_release<56>(); /* room for the ring of prefetched bits */
        else
            regs_release<40>();
        if (!Cfg::kExpand && warp != 0) return;      /* TMA (+ cp.async): warp 0 */
        if (kKind == PLANE_F16 && lane != 0) return; /* TMA only: one thread */
        const bool tma_thread = warp == 0 && lane == 0;
        if (tma_thread) {
            tma_prefetch(&tm_act);
            if (kKind == PLANE_F16) tma_prefetch(&tm_plane);
            if (kPair && a.tiles1 < a.tiles) {
                tma_prefetch(&tm_act2);
                tma_prefetch(&tm_plane2);
            }
        }
        /* the grid never exceeds the unit count: every CTA has ≥ 1 unit */
        const int steps = (units - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x * nkb;
        auto unit_of = [&](int it) { return (int)blockIdx.x + (it / nkb) * (int)gridDim.x; };
        /* the tile of step it (units past the tiles only with split-K) */
        auto tile_of = [&](int it) { return kFullEpi ? unit_of(it) % a.tiles : unit_of(it); };
        auto plane_row0 = [&](int it) { return (tile_of(it) % a.tiles_j) * Cfg::kBJ; };
        /* the k block of step it: its unit's split offset plus the step within */
        auto kblock = [&](int it) {
            return kFullEpi ? unit_of(it) / a.tiles * nkb + it % nkb : it % nkb;
        };
        int s = 0;
        uint32_t phase = 0;
        /* One stage: wait until it is free, then fill it (cur: the expand mode's bits) */
        auto fill = [&](int it, const StageBits<kWgM> &cur) {
            const int kb = kblock(it);
            /* the second product's tiles follow the first's */
            const bool two = kPair && tile_of(it) >= a.tiles1;
            const int tile = two ? tile_of(it) - a.tiles1 : tile_of(it);
            const int tj = two ? a.tiles_j2 : a.tiles_j;
            const int j0 = (tile % tj) * Cfg::kBJ, t0 = (tile / tj) * kBT;
            const CUtensorMap *map_act = two ? &tm_act2 : &tm_act;
            const CUtensorMap *map_plane = two ? &tm_plane2 : &tm_plane;
            mbar_wait(empty + 8 * s, phase ^ 1);
            const uint32_t bar = full + 8 * s, pdst = plane_s + s * Cfg::kPlaneBytes;
            if (tma_thread) {
                mbar_arrive_expect_tx(bar, Cfg::kTxBytes);
                if (kMN) { /* [64 k][64] boxes along the tokens, then along the plane rows */
#pragma unroll
                    for (int b = 0; b < kBT / 64; b++)
                        tma_load(act_s + s * Cfg::kActBytes + b * 8192, map_act, bar, t0 + 64 * b,
                                 kb * Cfg::kBK);
#pragma unroll
                    for (int b = 0; b < Cfg::kBJ / 64; b++)
                        tma_load(pdst + b * 8192, map_plane, bar, j0 + 64 * b, kb * Cfg::kBK);
                } else {
                    tma_load(act_s + s * Cfg::kActBytes, &tm_act, bar, kb * Cfg::kBK, t0);
                    if (kKind == PLANE_F16) tma_load(pdst, &tm_plane, bar, kb * Cfg::kBK, j0);
                }
            }
            if (Cfg::kExpand) {
                expand_stage<kKind, kWgM>(cur, pdst, tid);
                fence_proxy_async(); /* our st.shared → the consumers' wgmma */
                __syncwarp();
                if (lane == 0) mbar_arrive(bar);
            } else if (kKind == PLANE_ROWS) {
                /* [BJ][2] words: row j's words 2kb, 2kb+1 (zero past n or k) */
                for (int e = lane; e < 2 * Cfg::kBJ; e += 32) {
                    const int gj = j0 + (e >> 1), w = 2 * kb + (e & 1);
                    const bool ok = gj < a.n && w < a.words;
                    cp_async4(pdst + 4 * e, a.bits + (ok ? (size_t)gj * a.words + w : 0),
                              ok ? 4 : 0);
                }
                cp_async_arrive(bar);
            } else if (kKind == PLANE_COLS) {
                /* [64 k][BJ/32 (+1 pad)] words of bitmap rows kb·64 .. */
                constexpr int W = Cfg::kBJ / 32;
                for (int e = lane; e < Cfg::kBK * W; e += 32) {
                    const int kr = e / W, c = e % W;
                    const int gk = kb * Cfg::kBK + kr, gw = j0 / 32 + c;
                    const bool ok = gk < a.k && gw < a.words;
                    cp_async4(pdst + 4 * (kr * Cfg::kColsRowWords + c),
                              a.bits + (ok ? (size_t)gk * a.words + gw : 0), ok ? 4 : 0);
                }
                cp_async_arrive(bar);
            }
            if (++s == S) s = 0, phase ^= 1;
        };
        if (Cfg::kExpand) {
            /* The bits of stage it + 3 are loaded while stage it is filled: a ring of
             * four, unrolled so that its registers are named statically; L2 latency
             * under load is a large part of a stage's time. */
            constexpr int R = 4;
            StageBits<kWgM> ring[R];
#pragma unroll
            for (int i = 0; i < R - 1; i++)
                if (i < steps)
                    ring[i] = load_stage_bits<kKind, kWgM>(a, plane_row0(i), kblock(i), tid);
            for (int it0 = 0; it0 < steps; it0 += R) {
#pragma unroll
                for (int u = 0; u < R; u++) {
                    const int it = it0 + u;
                    if (it >= steps) break;
                    if (it + R - 1 < steps)
                        ring[(u + R - 1) % R] = load_stage_bits<kKind, kWgM>(
                            a, plane_row0(it + R - 1), kblock(it + R - 1), tid);
                    fill(it, ring[u]);
                }
            }
        } else {
            const StageBits<kWgM> none = {};
            for (int it = 0; it < steps; it++)
                fill(it, none);
            if (kKind != PLANE_F16) cp_async_drain(); /* no copy left in flight */
        }
        return;
    }

    /* ---------------------------------------------------- consumers */
    if (Cfg::kExpand)
        regs_claim<224>();
    else
        regs_claim<232>();
    const int cw = wg - 1; /* which half of the CTA's plane rows */
#ifdef BR_WGMMA_TRACE
    /* stamp st of the consumer's nth tile: 0 start, 1 first stage landed, 2 main loop
     * done, 3 c landed, 4 epilogue values written, 5 stores issued; 6: %globaltimer at
     * the start (ns, to line the CTAs up) */
    auto stamp = [&](int nth_, int st) {
        if (a.trace && tid == 0 && blockIdx.x < BR_TRACE_CTAS && nth_ < BR_TRACE_TILES) {
            long long *t =
                br_trace_buf + ((blockIdx.x * 2 + cw) * BR_TRACE_TILES + nth_) * BR_TRACE_STAMPS;
            t[st] = clock64();
            if (st == 0) {
                unsigned long long g;
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
                t[6] = (long long)g;
            }
        }
    };
#define BR_STAMP(n, st) stamp(n, st)
#else
#define BR_STAMP(n, st) ((void)0)
#endif
    /* this consumer's first plane row in the tile, in 64-row blocks */
    const int wrow = cw * kWgM;
    const int g = lane / 4, t = lane % 4;
    float acc[kWgM][kBT / 2];

    /* c through the epilogue boxes (TMA stores with c, no split): tid 0 loads a
     * round's c boxes by TMA into the boxes the round then fills. One set of boxes:
     * the first round's c at the start of the tile (its load overlaps the main
     * loop), each later round's once the last round's stores have read the boxes.
     * Two sets (kSets = 2, one box per round): rounds alternate between the sets,
     * the first two rounds' c load at the tile start, and round q + 2's as soon as
     * round q's stores have read its set, so a round's c has the whole previous
     * round to land. Round q covers (mi, r, b0) = q in that nesting order. */
    constexpr int kB = Cfg::kEpiBoxes;
    constexpr int kRoundsB = 2 / kB;                      /* rounds per (mi, r) */
    constexpr int kQ = kWgM * Cfg::kEpiRounds * kRoundsB; /* rounds per tile */
    const bool c_tma = kFullEpi && !kStage16 && a.tma_store && a.c != nullptr && a.splits == 1;
    /* EPI_STAGE16: box q = mi·kEpiRounds + r of this consumer's tile area, [kEpiRows
     * tokens][64 plane rows] f16: whole 128-byte lines of c and of the output */
    constexpr int kQ16 = kWgM * Cfg::kEpiRounds, kBox16 = Cfg::kEpiRows * 128;
    auto box16 = [&](int q) { return epi_s + (cw * kQ16 + q) * kBox16; };
    uint32_t cphase = 0; /* bit `set`: the phase of that set's barrier */
    auto box_addr = [&](int set, int i) {
        return epi_s + ((cw * kArea + set) * kB + i) * Cfg::kEpiBufBytes;
    };
    auto load_c = [&](int j0_, int t0_, int q) {
        const int set = q % kSets, b0 = q % kRoundsB * kB, r = q / kRoundsB % Cfg::kEpiRounds,
                  mi = q / kRoundsB / Cfg::kEpiRounds;
        const int jc = j0_ + (wrow + mi) * 64, tc = t0_ + r * Cfg::kEpiRows;
        const uint32_t bar = cbar + 8 * (cw * kSets + set);
        mbar_arrive_expect_tx(bar, kB * Cfg::kEpiBufBytes);
        for (int b = b0; b < b0 + kB; b++) /* boxes past m or n are zero-filled */
            tma_load(box_addr(set, b - b0), &tm_c, bar, jc + 32 * b, tc);
    };

    for (int nth = 0, unit = blockIdx.x; unit < units; nth++, unit += gridDim.x) {
        /* the second product's tiles (kPair) follow the first's: its extents, output */
        const bool two = kPair && unit >= a.tiles1;
        const int tile = kFullEpi ? unit % a.tiles : two ? unit - a.tiles1 : unit;
        const int split = kFullEpi ? unit / a.tiles : 0;
        const int tiles_j = two ? a.tiles_j2 : a.tiles_j, pm = two ? a.m2 : a.m,
                  pn = two ? a.n2 : a.n;
        const CUtensorMap *map_out = two ? &tm_out2 : &tm_out;
        BR_STAMP(nth, 0);
        /* the unit's first stage: the producer fills nkb stages per unit, in order */
        int s = (int)((long long)nth * nkb % S);
        uint32_t phase = (uint32_t)((long long)nth * nkb / S) & 1u;
        const int j0 = (tile % tiles_j) * Cfg::kBJ, t0 = (tile / tiles_j) * kBT;
#pragma unroll
        for (int mi = 0; mi < kWgM; mi++)
#pragma unroll
            for (int r = 0; r < kBT / 2; r++)
                acc[mi][r] = 0.0f;
        if (c_tma && tid == 0) {
            /* the later rounds' c boxes into L2 now: their loads in the epilogue, one
             * round at a time, then wait on L2 rather than on HBM */
#pragma unroll
            for (int mi = 0; mi < kWgM; mi++)
#pragma unroll
                for (int r = 0; r < Cfg::kEpiRounds; r++)
#pragma unroll
                    for (int b = 0; b < 2; b++)
                        if (mi || r || b >= kB)
                            tma_prefetch_l2(&tm_c, j0 + (wrow + mi) * 64 + 32 * b,
                                            t0 + r * Cfg::kEpiRows);
            bulk_wait_read(); /* the last tile's stores have read the boxes */
            load_c(j0, t0, 0);
            if (kSets == 2 && kQ > 1) load_c(j0, t0, 1);
        }
        /* EPI_STAGE16: the whole tile's c, under its main loop at k block a.c_at (late:
         * at the tile start its loads queue before the first stages' and wait for
         * the last tile's stores to read the boxes, which the epilogue turns from c
         * into the output in place) */
        auto load_c16 = [&]() {
            bulk_wait_read();
            const uint32_t bar = cbar + 8 * cw;
            mbar_arrive_expect_tx(bar, kQ16 * kBox16);
#pragma unroll
            for (int q = 0; q < kQ16; q++) /* boxes past m or n: zero-filled */
                tma_load(box16(q), &tm_c, bar, j0 + (wrow + q / Cfg::kEpiRounds) * 64,
                         t0 + q % Cfg::kEpiRounds * Cfg::kEpiRows);
        };
        const int c_at = kStage16 ? std::min(a.c_at, nkb - 1) : -1;

        /* A stage is released once the wgmmas reading it are known complete: wgmma
         * groups stay in flight across steps and k blocks. */
        int held = -1;
        for (int kb = 0; kb < nkb; kb++) {
            if (kStage16 && kb == c_at && tid == 0) load_c16();
            mbar_wait(full + 8 * s, phase);
            if (kb == 0) BR_STAMP(nth, 1);
            __syncwarp();
            const uint32_t act_tile = act_s + s * Cfg::kActBytes;
            const uint32_t plane_tile = plane_s + s * Cfg::kPlaneBytes;
            /* K-major: 16 k are 32 bytes on; MN-major: 16 rows of 128 bytes */
            constexpr int kStep = kMN ? 128 : 2;
            const uint64_t desc_b = kMN ? sw128_mn_desc(act_tile) : sw128_desc(act_tile);
            if (Cfg::kSmemA) {
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < 4; kk++)
#pragma unroll
                    for (int mi = 0; mi < kWgM; mi++) {
                        /* 64 plane rows × 64 k: 8192 bytes in either layout */
                        const uint32_t a_tile = plane_tile + ((wrow + mi) * 64) * 128;
                        const uint64_t desc_a = kMN ? sw128_mn_desc(a_tile) : sw128_desc(a_tile);
                        Wgmma<kBT>::template ss<kMN ? 1 : 0>(acc[mi], desc_a + kStep * kk,
                                                             desc_b + kStep * kk);
                    }
                wgmma_commit();
                wgmma_wait<1>(); /* the previous k block's group is done */
                if (held >= 0) release_stage<false>(empty + 8 * held, lane);
            } else {
                /* One wgmma per step (kk, mi), its A fragment built into one of
                 * kASets register sets: 4 registers per thread, rows j = g, g+8 of
                 * the warp's 16 × k pairs {2t, 2t+1}, {2t+8, 2t+9} of the 16-wide
                 * step, as ±1 halves. Before refilling a set, wait until the wgmma
                 * that last read it is done (at most kASets − 1 groups pending). */
                constexpr int kA = kASets > 0 ? kASets : 2;
                uint32_t fr[kA][4];
#pragma unroll
                for (int q = 0; q < 4 * kWgM; q++) {
                    const int kk = q / kWgM, mi = q % kWgM;
                    uint32_t(&f)[4] = fr[q % kA];
                    wgmma_wait<kA - 1>();
                    /* all groups of the previous k block are done from here on */
                    if (q == kA - 1 && held >= 0) release_stage<true>(empty + 8 * held, lane);
                    if (kKind == PLANE_ROWS) {
                        const int jl = (wrow + mi) * 64 + warp * 16 + g;
                        const uint32_t wl = lds32(plane_tile + 8 * jl + 4 * (kk >> 1));
                        const uint32_t wh = lds32(plane_tile + 8 * (jl + 8) + 4 * (kk >> 1));
                        const int sh = 16 * (kk & 1) + 2 * t;
                        f[0] = pm1_pair(wl >> sh);
                        f[1] = pm1_pair(wh >> sh);
                        f[2] = pm1_pair(wl >> (sh + 8));
                        f[3] = pm1_pair(wh >> (sh + 8));
                    } else {
                        /* this warp's 16 rows share word column c, from bit `bit` */
                        const int c = (wrow + mi) * 2 + warp / 2, bit = 16 * (warp & 1) + g;
                        const int k0 = 16 * kk + 2 * t;
                        const uint32_t col = plane_tile + 4 * c;
                        const uint32_t wa = lds32(col + 4 * Cfg::kColsRowWords * k0);
                        const uint32_t wb = lds32(col + 4 * Cfg::kColsRowWords * (k0 + 1));
                        const uint32_t wc = lds32(col + 4 * Cfg::kColsRowWords * (k0 + 8));
                        const uint32_t wd = lds32(col + 4 * Cfg::kColsRowWords * (k0 + 9));
                        f[0] = pm1_pair2(wa >> bit, wb >> bit);
                        f[1] = pm1_pair2(wa >> (bit + 8), wb >> (bit + 8));
                        f[2] = pm1_pair2(wc >> bit, wd >> bit);
                        f[3] = pm1_pair2(wc >> (bit + 8), wd >> (bit + 8));
                    }
                    wgmma_fence();
                    Wgmma<kBT>::rs(acc[mi], f, desc_b + 2 * kk);
                    wgmma_commit();
                }
            }
            held = s;
            if (++s == S) s = 0, phase ^= 1;
        }
        wgmma_wait<0>();
        BR_STAMP(nth, 2);
        release_stage<!Cfg::kSmemA>(empty + 8 * held, lane);

        /* acc[mi][4c + 2h + e] = outᵀ[row g + 8h of warp's 16][token 8c + 2t + e] */
        const int jw = j0 + wrow * 64 + warp * 16 + g; /* + 64·mi + 8h */
        /* split-K: raw sums to this split's rows of the workspace, no epilogue */
        const bool raw = kFullEpi && a.splits > 1;
        const int row_off = raw ? split * a.mpad : 0;
        const float os = raw ? 1.0f : two ? a.oscale2 : a.oscale;
        const bool has_cs = kFullEpi && !raw && a.colscale != nullptr;
        const float *cin = kFullEpi && !raw ? a.c : nullptr;
        float cs[kWgM][2];
#pragma unroll
        for (int mi = 0; mi < kWgM; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int j = jw + 64 * mi + 8 * h;
                cs[mi][h] = has_cs && j < a.n ? a.colscale[j] : 1.0f;
            }
        /* (acc·oscale)·colscale: all of the epilogue but c's term */
        auto scaled = [&](int mi, int h, float v) {
            const float x = __fmul_rn(v, os);
            return has_cs ? __fmul_rn(x, cs[mi][h]) : x;
        };
        if (kStage16) { /* always by TMA: the launcher checks the alignment */
            /* c (f16) of the whole tile is in this consumer's boxes ([tokens][64 plane
             * rows], 128-byte swizzle). Per warp and 16 tokens, one ldmatrix.trans
             * brings c's four 8 × 8 blocks (plane rows 16w + 8h of the box, tokens
             * 8c.. and 8c+8..) into the accumulators' fragment layout (this
             * thread: plane row g, tokens 2t, 2t+1 as one half2), each value
             * v = (acc·oscale) + beta·c becomes f16(v·s16) two at a time, and one
             * stmatrix.trans writes them over c: 8 values a thread per pair of
             * instructions, where element-wise shared accesses made the epilogue
             * cost as much as a quarter of the main loop. A NaN (never in a sane
             * step) takes the element-wise conversions, whose NaN bits are the
             * definition's. Then the boxes leave by TMA, nothing waited for between
             * them. scripts/gemm-trace times the phases: at the third bench shape
             * (H200) 11.4 µs of main loop per tile and 6.6 µs of this
             * loop with a branch per value pair, 2.5 with a warp vote per 16 tokens
             * (the form below, one vote per tile, saved 2–3 µs more a step). */
            constexpr int kC = Cfg::kEpiRows / 8; /* 8-token groups per box (even) */
            static_assert(kC % 2 == 0, "16 tokens per ldmatrix");
            const int q8 = lane & 7, mat = lane >> 3;
            /* this lane's row of matrix `mat` (h = mat & 1, tokens + 8·(mat >> 1)):
             * token row 8·(mat >> 1) + q8, 16-byte chunk 2w + h, swizzled (chunk ^
             * row % 8: conflict-free, the 8 rows of a matrix in 8 chunks) */
            const uint32_t lane_off = (uint32_t)(8 * (mat >> 1) + q8) * 128 +
                                      ((uint32_t)((2 * warp + (mat & 1)) ^ q8) << 4);
            const float beta = a.beta, s16 = a.s16;
            mbar_wait(cbar + 8 * cw, cphase & 1u);
            cphase ^= 1u;
            BR_STAMP(nth, 3);
            bool nan = false; /* a NaN among this thread's values of the tile */
#pragma unroll
            for (int mi = 0; mi < kWgM; mi++)
#pragma unroll
                for (int r = 0; r < Cfg::kEpiRounds; r++) {
                    const int jc = j0 + (wrow + mi) * 64;
                    const int tc = t0 + r * Cfg::kEpiRows;
                    const uint32_t hb = box16(mi * Cfg::kEpiRounds + r);
                    const int jl = jc + 16 * warp + g; /* + 8h */
                    /* a box with pads past m or n (kEdge: their outputs +0) runs a copy
                     * of its own, so that the common box's loop has no branch at all */
                    auto run = [&](auto edge_tag) {
                        constexpr bool kEdge = decltype(edge_tag)::value;
                        /* c of the next 16 tokens is loaded while these are worked on */
                        uint32_t fnext[4];
                        ldsm_x4_trans(fnext, hb + lane_off);
#pragma unroll
                        for (int c = 0; c < kC; c += 2) {
                            const uint32_t addr = hb + lane_off + (uint32_t)c * 1024;
                            const uint32_t f[4] = {fnext[0], fnext[1], fnext[2], fnext[3]};
                            if (c + 2 < kC) ldsm_x4_trans(fnext, addr + 2048);
                            uint32_t out[4];
#pragma unroll
                            for (int i = 0; i < 4; i++) { /* block (h, c + i/2) */
                                const int h = i & 1, cc = r * kC + c + (i >> 1);
                                const float2 cf =
                                    __half22float2(*reinterpret_cast<const __half2 *>(&f[i]));
                                const float v0 = __fadd_rn(scaled(mi, h, acc[mi][4 * cc + 2 * h]),
                                                           __fmul_rn(beta, cf.x));
                                const float v1 =
                                    __fadd_rn(scaled(mi, h, acc[mi][4 * cc + 2 * h + 1]),
                                              __fmul_rn(beta, cf.y));
                                nan |= (v0 != v0) | (v1 != v1);
                                const __half2 h2 =
                                    __floats2half2_rn(__fmul_rn(v0, s16), __fmul_rn(v1, s16));
                                out[i] = *reinterpret_cast<const uint32_t *>(&h2);
                                if (kEdge) { /* pads past m or n: +0 */
                                    const int tok = tc + 8 * (c + (i >> 1)) + 2 * t;
                                    const bool col_out = jl + 8 * h >= a.n;
                                    if (col_out || tok >= a.m) out[i] &= 0xffff0000u;
                                    if (col_out || tok + 1 >= a.m) out[i] &= 0x0000ffffu;
                                }
                            }
                            stsm_x4_trans(addr, out);
                        }
                    };
                    if (tc + Cfg::kEpiRows > a.m || jc + 64 > a.n)
                        run(std::true_type{});
                    else
                        run(std::false_type{});
                }
            /* A NaN (never in a sane step): the warp redoes its part of the tile
             * element-wise, c read again from global memory (this tile's stores are
             * not issued yet), for the definition's NaN bits; every other value
             * comes out the same either way. One warp-uniform test per tile: a
             * divergent branch per value pair made the loop above 2.6 times slower,
             * and a uniform one per 16 tokens still kept the compiler from
             * interleaving them. */
            if (__any_sync(0xffffffffu, nan)) {
                __syncwarp(); /* the warp's stmatrix writes before these */
#pragma unroll
                for (int mi = 0; mi < kWgM; mi++)
#pragma unroll
                    for (int r = 0; r < Cfg::kEpiRounds; r++) {
                        const int jc = j0 + (wrow + mi) * 64, tc = t0 + r * Cfg::kEpiRows;
                        const uint32_t hb = box16(mi * Cfg::kEpiRounds + r);
#pragma unroll
                        for (int c = 0; c < kC; c++)
#pragma unroll
                            for (int q = 0; q < 4; q++) {
                                const int h = q >> 1, e = q & 1;
                                const int row = 8 * c + 2 * t + e, col = 16 * warp + 8 * h + g;
                                const int tok = tc + row, j = jc + col;
                                const bool in = tok < a.m && j < a.n;
                                const float cv =
                                    in ? br_dev_f16_to_f32(a.c16[(size_t)tok * a.ldc16 + j]) : 0.0f;
                                const float v =
                                    __fadd_rn(scaled(mi, h, acc[mi][4 * (r * kC + c) + 2 * h + e]),
                                              __fmul_rn(beta, cv));
                                const uint32_t o = in ? br_dev_f16_bits(__fmul_rn(v, s16)) : 0u;
                                sts16(hb + (uint32_t)row * 128 +
                                          ((uint32_t)((col >> 3) ^ (row & 7)) << 4) + (col & 7) * 2,
                                      o);
                            }
                    }
            }
            BR_STAMP(nth, 4);
            fence_proxy_async();
            named_barrier(1 + cw, 128);
            if (tid == 0) {
#pragma unroll
                for (int q = 0; q < kQ16; q++) {
                    const int jc = j0 + (wrow + q / Cfg::kEpiRounds) * 64;
                    const int tc = t0 + q % Cfg::kEpiRounds * Cfg::kEpiRows;
                    if (jc < a.ld16 && tc < a.rows16) tma_store(&tm_16, box16(q), jc, tc);
                }
                bulk_commit();
            }
        } else if (a.tma_store) {
            /* warp w fills box w/2 (rows 32·(w/2) .. of its 64-row slice), column
             * 16·(w&1) + g (+ 8 for the row g+8 values) of it; with c the box holds
             * c first (TMA), and each thread adds beta·c at the place it writes */
            constexpr int kC = Cfg::kEpiRows / 8; /* 8-token groups per box */
            const int col = 16 * (warp & 1) + g, box = warp / 2;
            const float beta = a.beta;
#pragma unroll
            for (int mi = 0; mi < kWgM; mi++)
#pragma unroll
                for (int r = 0; r < Cfg::kEpiRounds; r++)
#pragma unroll
                    for (int b0 = 0; b0 < 2; b0 += kB) {
                        const int q = (mi * Cfg::kEpiRounds + r) * kRoundsB + b0 / kB;
                        const int set = c_tma ? q % kSets : 0;
                        /* with c, its boxes were loaded at the tile start or (one set)
                         * are loaded here; without, wait until the stores read them */
                        if (tid == 0 && !(c_tma && (q == 0 || kSets == 2))) {
                            bulk_wait_read(); /* the boxes are free again */
                            if (c_tma) load_c(j0, t0, q);
                        }
                        if (c_tma) {
                            mbar_wait(cbar + 8 * (cw * kSets + set), cphase >> set & 1u);
                            cphase ^= 1u << set;
                        } else {
                            named_barrier(1 + cw, 128);
                        }
                        if (box >= b0 && box < b0 + kB) {
                            const uint32_t buf = box_addr(set, box - b0);
#pragma unroll
                            for (int c = 0; c < kC; c++)
#pragma unroll
                                for (int e = 0; e < 2; e++) {
                                    const int row = 8 * c + 2 * t + e, cc = r * kC + c, x = row & 7;
                                    const uint32_t line = buf + row * 128 + (col & 3) * 4;
                                    const uint32_t a0 = line + (((col >> 2) ^ x) << 4);
                                    const uint32_t a1 = line + ((((col + 8) >> 2) ^ x) << 4);
                                    float v0 = scaled(mi, 0, acc[mi][4 * cc + e]);
                                    float v1 = scaled(mi, 1, acc[mi][4 * cc + 2 + e]);
                                    if (c_tma) {
                                        v0 = __fadd_rn(v0, __fmul_rn(beta, ldsf(a0)));
                                        v1 = __fadd_rn(v1, __fmul_rn(beta, ldsf(a1)));
                                    }
                                    sts32(a0, v0);
                                    sts32(a1, v1);
                                }
                        }
                        fence_proxy_async();
                        named_barrier(1 + cw, 128);
                        if (tid == 0) {
                            const int jc = j0 + (wrow + mi) * 64, tc = t0 + r * Cfg::kEpiRows;
                            for (int b = b0; b < b0 + kB; b++)
                                if (jc + 32 * b < pn && tc < (raw ? a.mpad : pm))
                                    tma_store(map_out, box_addr(set, b - b0), jc + 32 * b,
                                              row_off + tc);
                            bulk_commit();
                            /* two sets: round q + 2's c into this set once it is read */
                            if (kSets == 2 && c_tma && q + 2 < kQ) {
                                bulk_wait_read();
                                load_c(j0, t0, q + 2);
                            }
                        }
                    }
        } else {
            const long long ldo = two ? a.ldo2 : a.ldo;
            float *obase = (two ? a.out2 : a.out) + (long long)row_off * ldo;
#pragma unroll
            for (int mi = 0; mi < kWgM; mi++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int j = jw + 64 * mi + 8 * h;
                    if (j >= pn) continue;
#pragma unroll
                    for (int c = 0; c < kBT / 8; c++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const int i = t0 + 8 * c + 2 * t + e;
                            if (i >= pm) continue;
                            const long long idx = (long long)i * ldo + j;
                            float v = scaled(mi, h, acc[mi][4 * c + 2 * h + e]);
                            if (cin) v = __fadd_rn(v, __fmul_rn(a.beta, cin[idx]));
                            obase[idx] = v;
                        }
                }
        }
        BR_STAMP(nth, 5);
    }
#undef BR_STAMP
    if (a.tma_store && tid == 0) bulk_wait_all();
#endif
}

} // namespace br_gemm_cuda

#endif
