/* The reformulated layer's ops on CUDA: expand_scaled, sign_rowdot, cvt_both
 * (semantics in ops/layer_ops.h). Bit-identical to the CPU backend
 * (cpu_layer_ops.c): products and sums are the rounding intrinsics (__fmul_rn,
 * __fadd_rn; this file is also compiled with --fmad=false), f16 conversions are
 * br_dev_f16_bits, and sign_rowdot's sum runs in the documented warp order. Each
 * kernel has a vector path (16-byte loads and stores) taken when the shapes and
 * the addresses of the views allow it, and a scalar path with the same values.
 * expand_scaled and sign_rowdot take every path of an op in one launch: blockIdx.y
 * is the path (strided over gridDim.y), each path exactly as a launch of its own.
 * Their two-job kernels (expand_scaled2, sign_rowdot2) split one grid between the
 * jobs, each job's blocks running exactly as they would in its own launch. */
#include "backend/cuda/cuda_internal.h"
#include "ops/layer_ops.h"

#include <algorithm>
#include <stdlib.h>

#define THREADS 256
#define FULL_MASK 0xffffffffu
#define F16_SIGN 0x8000u

/* ---------------------------------------------------------------- expand_scaled */

/* Eight f16 bit patterns packed in pairs (entry 2v in the low half of h[v]) to out:
 * one 16-byte store with VEC (out 16-byte aligned), else eight 2-byte stores.
 * __stwb is the plain store (st.global.wb, L2 kept: the GEMM reads the plane next);
 * through the intrinsic it stays one v4 store, which nvcc split into four 4-byte
 * stores in the rows kernel when written as a uint4 assignment. */
template <bool VEC>
static __device__ __forceinline__ void store8(uint16_t *out, const uint32_t *h) {
    if (VEC) {
        __stwb(reinterpret_cast<uint4 *>(out), make_uint4(h[0], h[1], h[2], h[3]));
    } else {
#pragma unroll
        for (unsigned u = 0; u < 8; u++)
            out[u] = (uint16_t)(h[u / 2] >> (16 * (u % 2)));
    }
}

/* The sign flips of entries 2v, 2v+1 (bits 2v, 2v+1 of x are 0: negative) as the
 * f16 sign bits of a packed pair: magnitudes ^ this = the two signed values. */
static __device__ __forceinline__ uint32_t flip2(uint32_t x0, uint32_t x1, unsigned s) {
    return (~x0 >> s & 1u) * F16_SIGN | ((~x1 >> s & 1u) * F16_SIGN) << 16;
}

/* Most paths one launch's grid spans (gridDim.y ≤ 65535); blocks stride over more. */
#define MAX_GRID_Y 65535u

/* Where path p's operands are: element offsets p·stride from each base. */
typedef struct path_strides {
    size_t bits, scale, out, dsum; /* out: the plane (expand) or grad (rowdot) */
    size_t norm;                   /* rowdot: its gradient's row norms */
    unsigned paths;
} path_strides;

/* One expand as its kernels take it, either orientation: path p's bitmap u32
 * [rows][words], rowscale f32 [rows] and plane at p·(their stride) from the bases. */
typedef struct expand_job {
    const uint32_t *bits0;
    const float *rowscale0;
    uint16_t *plane0; /* by rows: f16 [rows][ld] (a path's columns); else [32·words][ld] */
    float scale;
    unsigned rows, words, ld;
    unsigned wlog; /* transposed: log2 of a tile's bitmap words */
    int by_rows;
    path_strides ps;
} expand_job;

/* Transposed tiles: ES_WORDS_MAX bitmap words at most (32 plane rows each) by
 * THREADS >> log2(words per tile) plane columns: 256 words a tile, one per thread,
 * and 1024 chunks of 8 entries, four 16-byte stores per thread. */
#define ES_WORDS_MAX 8u

/* The transposed body's shared memory, double-buffered: bitmap words at a row pitch
 * of tc + 32/tw words (the fill, tw words of one row per tw threads, is free of bank
 * conflicts, and rows stay 16-byte aligned for the vector reads), and magnitudes.
 * Declared by the kernels, so that a kernel of two jobs holds one set (the rows
 * body needs none): its static shared memory is the larger body's. */
struct __align__(16) es_tiles {
    uint32_t sbits[2][THREADS + 32];
    uint16_t smag[2][THREADS];
};

/* plane_t[k][i] (f16 [r][ld]) = ±f16(rowscale[i]·scale), +0 past rows. A tile is
 * tw = 2^wlog bitmap words w0.. (plane rows 32·w0..) by tc = THREADS/tw columns i0..:
 * thread t loads word w0 + t % tw of bitmap row i0 + t / tw, so that each run of tw
 * threads reads tw consecutive words of one row (whole 32-byte sectors at tw = 8,
 * where a word a thread strided by `words` read one sector per word), and threads
 * t < tc load the magnitudes. Into shared memory, sync, then each thread writes 8
 * consecutive columns of 4 plane rows (16-byte stores with VEC: ld % 8 == 0 and
 * plane_t 16-byte aligned). Shared memory is double-buffered so that one sync a
 * tile suffices (a buffer is rewritten two tiles later, after every thread passed
 * the sync between), and the next tile's loads are issued before this tile's
 * stores. This block is block bx of the job's nbx: tiles bx, bx + nbx, ... (column
 * tiles fastest) of paths y0, y0 + ny, ...; block-uniform, THREADS threads. */
template <bool VEC>
static __device__ __forceinline__ void expand_t_blocks(const expand_job &e, es_tiles &sm,
                                                       unsigned bx, unsigned nbx, unsigned y0,
                                                       unsigned ny) {
    const unsigned rows = e.rows, words = e.words, ld = e.ld, wlog = e.wlog;
    const unsigned tw = 1u << wlog, tc = THREADS >> wlog, pitch = tc + 32 / tw;
    const unsigned glog = 5 - wlog; /* log2 of the tile's 8-column groups: tc / 8 */
    const unsigned t = threadIdx.x, lc = t >> wlog, lw = t & (tw - 1);
    const unsigned itiles = (ld + tc - 1) / tc, tiles = itiles * (words >> wlog);
    unsigned buf = 0;
    for (unsigned p = y0; p < e.ps.paths; p += ny) { /* block-uniform */
        const uint32_t *bits = e.bits0 + p * e.ps.bits;
        const float *rowscale = e.rowscale0 + p * e.ps.scale;
        uint16_t *plane_t = e.plane0 + p * e.ps.out;
        uint32_t b = 0; /* tile tl's word this thread loads; its column's rowscale (t < tc) */
        float s = 0.0f;
        unsigned tl = bx;
        auto load = [&](unsigned tile) {
            unsigned i0 = tile % itiles * tc, w0 = (tile / itiles) << wlog;
            b = i0 + lc < rows ? bits[(size_t)(i0 + lc) * words + w0 + lw] : ~0u; /* pad: + */
            s = t < tc && i0 + t < rows ? rowscale[i0 + t] : 0.0f;
        };
        if (tl < tiles) load(tl);
        for (; tl < tiles; tl += nbx, buf ^= 1) {
            unsigned i0 = tl % itiles * tc, w0 = (tl / itiles) << wlog;
            sm.sbits[buf][lw * pitch + lc] = b;
            if (t < tc) /* pad columns: +0 (the bit is 1) */
                sm.smag[buf][t] = i0 + t < rows ? br_dev_f16_bits(__fmul_rn(s, e.scale)) : 0u;
            __syncthreads();
            if (tl + nbx < tiles) load(tl + nbx); /* in flight under the stores */
            /* chunk q = t + THREADS·j: plane row k = q / (tc/8), columns i0 + 8g..+7 with
             * g = q % (tc/8), the same g for every j (tc/8 divides THREADS) */
            unsigned g = t & ((1u << glog) - 1), i = i0 + 8 * g;
            if (i >= ld) continue; /* ld % 8 == 0: a chunk is wholly in or out */
            uint4 mg = *reinterpret_cast<const uint4 *>(&sm.smag[buf][8 * g]);
            uint32_t mw[4] = {mg.x, mg.y, mg.z, mg.w}; /* packed pairs of magnitudes */
#pragma unroll
            for (unsigned j = 0; j < 4; j++) {
                unsigned k = (t + THREADS * j) >> glog, kb = k & 31;
                const uint4 *sb =
                    reinterpret_cast<const uint4 *>(&sm.sbits[buf][(k >> 5) * pitch + 8 * g]);
                uint4 b0 = sb[0], b1 = sb[1];
                uint32_t h[4] = {mw[0] ^ flip2(b0.x, b0.y, kb), mw[1] ^ flip2(b0.z, b0.w, kb),
                                 mw[2] ^ flip2(b1.x, b1.y, kb), mw[3] ^ flip2(b1.z, b1.w, kb)};
                store8<VEC>(plane_t + (size_t)(32 * w0 + k) * ld + i, h);
            }
        }
    }
}

/* plane[i][k] (f16, row stride ld) = ±f16(rowscale[i]·scale), k < r only. The
 * bitmap taken as one flat run of rows·words words (bits u32 [rows][words]), a warp
 * per 32 consecutive words: lane l loads word q0 + l (one coalesced 128-byte load)
 * and its row's magnitude; store j (< 4) of lane l writes byte l % 4 of word
 * q0 + 8j + l / 4 (shuffled from its lane): 8 entries, one 16-byte store with VEC
 * (ld % 8 == 0 and plane 16-byte aligned), each warp store 512 contiguous bytes
 * where a row has 8 words or more. So a thread writes 64 bytes from one load where it
 * wrote 16. Grid-stride over the job's warps (warp-uniform: the shuffles take every
 * lane), the next words loaded before this round's stores. This block is block bx
 * of the job's nbx, for paths y0, y0 + ny, .... */
template <bool VEC>
static __device__ __forceinline__ void expand_rows_blocks(const expand_job &e, unsigned bx,
                                                          unsigned nbx, unsigned y0, unsigned ny) {
    const unsigned words = e.words, ld = e.ld, n = e.rows * words, lane = threadIdx.x % 32;
    const unsigned stride = nbx * blockDim.x;
    for (unsigned p = y0; p < e.ps.paths; p += ny) {
        const uint32_t *bits = e.bits0 + p * e.ps.bits;
        const float *rowscale = e.rowscale0 + p * e.ps.scale;
        uint16_t *plane = e.plane0 + p * e.ps.out;
        uint32_t b = 0, i = 0; /* word q0 + lane, its row i and that row's rowscale s */
        float s = 0.0f;
        auto load = [&](unsigned q) {
            if (q < n) {
                i = q / words, b = bits[q], s = rowscale[i];
            }
        };
        unsigned q0 = (bx * blockDim.x + threadIdx.x) & ~31u;
        load(q0 + lane);
        for (; q0 < n; q0 += stride) { /* warp-uniform */
            uint32_t mb = b, mi = i, mag = br_dev_f16_bits(__fmul_rn(s, e.scale));
            load(q0 + stride + lane); /* in flight under the stores */
#pragma unroll
            for (unsigned j = 0; j < 4; j++) {
                unsigned src = 8 * j + lane / 4, q = q0 + src;
                uint32_t bj = __shfl_sync(FULL_MASK, mb, src),
                         mj = __shfl_sync(FULL_MASK, mag, src);
                uint32_t ij = __shfl_sync(FULL_MASK, mi, src);
                if (q >= n) continue;
                uint32_t x = bj >> (8 * (lane % 4)), m2 = mj | mj << 16, h[4];
#pragma unroll
                for (unsigned v = 0; v < 4; v++)
                    h[v] = m2 ^ flip2(x >> (2 * v), x >> (2 * v + 1), 0);
                store8<VEC>(plane + (size_t)ij * ld + 32 * (q - ij * words) + 8 * (lane % 4), h);
            }
        }
    }
}

/* The body of the orientation ROWS (the job's by_rows). */
template <bool VEC, bool ROWS>
static __device__ __forceinline__ void expand_blocks(const expand_job &e, es_tiles &sm, unsigned bx,
                                                     unsigned nbx, unsigned y0, unsigned ny) {
    if (ROWS)
        expand_rows_blocks<VEC>(e, bx, nbx, y0, ny);
    else
        expand_t_blocks<VEC>(e, sm, bx, nbx, y0, ny);
}

/* One expand: blockIdx.x over its tiles (transposed) or warps (by rows),
 * blockIdx.y over its paths, each strided over the grid. */
template <bool VEC>
__global__ void __launch_bounds__(THREADS, 8) expand_scaled_kernel(const expand_job e) {
    __shared__ es_tiles sm;
    br_dev_pdl_enter();
    expand_t_blocks<VEC>(e, sm, blockIdx.x, gridDim.x, blockIdx.y, gridDim.y);
}

template <bool VEC>
__global__ void __launch_bounds__(THREADS, 8) expand_scaled_rows_kernel(const expand_job e) {
    br_dev_pdl_enter();
    expand_rows_blocks<VEC>(e, blockIdx.x, gridDim.x, blockIdx.y, gridDim.y);
}

/* Two expands in one launch (two EXPAND_SCALED ops of a unit, cuda_fuse.c): blocks
 * x < bx1 run the first job as its own launch of bx1 blocks by y1 path rows would,
 * the rest the second's (bx2 =
 * gridDim.x − bx1 by y2). Grid rows y ≥ a job's count start past its last path (a
 * count below gridDim.y ≤ MAX_GRID_Y is the job's path count). VEC: both jobs allow
 * it; ROWS1, ROWS2: the jobs' orientations (compiled in: a run-time choice of body
 * per job spilled in the sm_80 code). */
template <bool VEC, bool ROWS1, bool ROWS2>
__global__ void __launch_bounds__(THREADS, 8)
    expand_scaled2_kernel(const expand_job e1, const expand_job e2, unsigned bx1, unsigned y1,
                          unsigned y2) {
    __shared__ es_tiles sm;
    br_dev_pdl_enter();
    if (blockIdx.x < bx1)
        expand_blocks<VEC, ROWS1>(e1, sm, blockIdx.x, bx1, blockIdx.y, y1);
    else
        expand_blocks<VEC, ROWS2>(e2, sm, blockIdx.x - bx1, gridDim.x - bx1, blockIdx.y, y2);
}

/* An op's job and its launch shape: bx blocks (grid.x) by y path rows (grid.y); vec:
 * 16-byte stores allowed. By rows, a warp per 32 words of the flat bitmap;
 * transposed, a block per tile of the most words (≤ 8, a power of two) that divide
 * r/32. */
static expand_job expand_job_of(br_ctx *ctx, const br_expand_scaled_args *a, unsigned *bx,
                                unsigned *y, bool *vec) {
    expand_job e;
    memset(&e, 0, sizeof e);
    e.bits0 = (const uint32_t *)br_ptr(a->bits);
    e.rowscale0 = (const float *)br_ptr(a->rowscale);
    e.plane0 = (uint16_t *)br_ptr(a->plane);
    e.scale = a->scale;
    e.rows = (unsigned)a->rows;
    e.words = (unsigned)(a->r / 32);
    e.ld = (unsigned)a->ld;
    e.by_rows = a->by_rows;
    /* path p's plane: columns p·r.. by rows, else rows p·r.. */
    e.ps = {a->bits_stride, a->scale_stride, a->by_rows ? a->r : a->r * a->ld, 0, 0,
            (unsigned)a->paths};
    /* ld % 8 == 0: every row is aligned with the base; so is every path's plane when
     * its stride is a multiple of 8 halves (r % 32 == 0: always) */
    *vec = br_aligned(16, e.plane0) && e.ps.out % 8 == 0;
    *y = e.ps.paths < MAX_GRID_Y ? e.ps.paths : MAX_GRID_Y;
    if (a->by_rows) {
        *bx = br_cuda_blocks(ctx, ((size_t)e.rows * e.words + 31) / 32 * 32, THREADS);
    } else {
        while ((2u << e.wlog) <= ES_WORDS_MAX && e.words % (2u << e.wlog) == 0)
            e.wlog++;
        unsigned tc = THREADS >> e.wlog;
        size_t tiles = (size_t)((e.ld + tc - 1) / tc) * (e.words >> e.wlog);
        *bx = br_cuda_blocks(ctx, tiles * THREADS, THREADS);
    }
    /* option expand_blocks=<b> caps grid.x (a job's blocks), so that tests can make
     * small planes take the grid-stride loops (several tiles a block) */
    const int cap = ctx->opt.expand_blocks;
    if (cap > 0) *bx = std::max(1u, std::min(*bx, (unsigned)cap));
    return e;
}

extern "C" br_status br_cuda_expand_scaled(br_ctx *ctx, const br_op *op) {
    br_cuda *s = br_cuda_state(ctx);
    unsigned bx, y;
    bool vec;
    const expand_job e = expand_job_of(ctx, &op->u.expand_scaled, &bx, &y, &vec);
    if (e.by_rows) {
        auto k = vec ? expand_scaled_rows_kernel<true> : expand_scaled_rows_kernel<false>;
        BR_CUDA_LAUNCH_WAITING(ctx, s, "expand_scaled_rows_kernel", k, dim3(bx, y), THREADS, 0, e);
    } else {
        auto k = vec ? expand_scaled_kernel<true> : expand_scaled_kernel<false>;
        BR_CUDA_LAUNCH_WAITING(ctx, s, "expand_scaled_kernel", k, dim3(bx, y), THREADS, 0, e);
    }
    return BR_OK;
}

extern "C" br_status br_cuda_expand_scaled2(br_ctx *ctx, const br_op *ops, size_t) {
    br_cuda *s = br_cuda_state(ctx);
    unsigned bx[2], y[2];
    bool vec[2];
    const expand_job e1 = expand_job_of(ctx, &ops[0].u.expand_scaled, &bx[0], &y[0], &vec[0]);
    const expand_job e2 = expand_job_of(ctx, &ops[1].u.expand_scaled, &bx[1], &y[1], &vec[1]);
    typedef void (*kernel2)(const expand_job, const expand_job, unsigned, unsigned, unsigned);
    static const kernel2 ks[2][2][2] = {
        {{expand_scaled2_kernel<false, false, false>, expand_scaled2_kernel<false, false, true>},
         {expand_scaled2_kernel<false, true, false>, expand_scaled2_kernel<false, true, true>}},
        {{expand_scaled2_kernel<true, false, false>, expand_scaled2_kernel<true, false, true>},
         {expand_scaled2_kernel<true, true, false>, expand_scaled2_kernel<true, true, true>}}};
    kernel2 k = ks[vec[0] && vec[1]][e1.by_rows != 0][e2.by_rows != 0];
    BR_CUDA_LAUNCH_WAITING(ctx, s, "expand_scaled2_kernel", k,
                           dim3(bx[0] + bx[1], std::max(y[0], y[1])), THREADS, 0, e1, e2, bx[0],
                           y[0], y[1]);
    return BR_OK;
}

/* ---------------------------------------------------------------- sign_rowdot */

/* Bitmap words (32 columns each) a lane loads before it uses any of them (a whole
 * row's 16, the bits by shuffles from one load a lane: no gain measured, 33b0caa). */
#define RD_BATCH 4

/* One rowdot as its kernels take it: m0 points at column col0 of row 0; path p's
 * columns start r further on per path, its other operands at p·stride (NULL ones
 * stay NULL). */
typedef struct rowdot_job {
    const float *m0;
    size_t ldm;
    const uint32_t *bits0;
    const float *rowscale0;
    float *grad0, *dsum0, *rownorm0;
    unsigned rows, r;
    int accumulate;
    path_strides ps;
} rowdot_job;

static rowdot_job rowdot_job_of(const br_sign_rowdot_args *a) {
    rowdot_job j = {
        (const float *)br_ptr(a->mat) + a->col0,
        a->ldm,
        (const uint32_t *)br_ptr(a->bits),
        (const float *)br_ptr(a->rowscale),
        (float *)br_ptr(a->grad),
        (float *)br_ptr(a->dsum),
        (float *)br_ptr(a->rownorm),
        (unsigned)a->rows,
        (unsigned)a->r,
        a->accumulate,
        {a->bits_stride, a->scale_stride, a->grad_stride, a->dsum_stride, a->rownorm_stride,
         (unsigned)a->paths}};
    return j;
}

/* One warp per row i: lane l takes columns k = l, l+32, ... (coalesced 128-byte
 * loads of M, stores of grad); grad[i][k] = fl(h·M) (+ grad); the signed sum runs
 * in the lane order of layer_ops.h, then the shuffle tree (lane t adds lane t + s
 * for s = 16..1) and dsum[i] (+)= lane 0's total. The squares of the grad values
 * written go the same way into rownorm[i] = sqrt(lane 0's sum). Paths y0, y0 + ny,
 * ... of the job; rows over blockIdx.x (strided over gridDim.x). */
static __device__ void rowdot_rows(const rowdot_job &j, unsigned y0, unsigned ny) {
    unsigned lane = threadIdx.x % 32, warps = blockDim.x / 32, words = j.r / 32;
    for (unsigned p = y0; p < j.ps.paths; p += ny) { /* warp-uniform */
        const float *m = j.m0 + (size_t)p * j.r;
        const uint32_t *bits = j.bits0 ? j.bits0 + p * j.ps.bits : NULL;
        const float *rowscale = j.rowscale0 ? j.rowscale0 + p * j.ps.scale : NULL;
        float *grad = j.grad0 ? j.grad0 + p * j.ps.out : NULL;
        float *dsum = j.dsum0 ? j.dsum0 + p * j.ps.dsum : NULL;
        float *rownorm = j.rownorm0 ? j.rownorm0 + p * j.ps.norm : NULL;
        for (unsigned i = blockIdx.x * warps + threadIdx.x / 32; i < j.rows;
             i += gridDim.x * warps) {
            const float *row = m + (size_t)i * j.ldm;
            float h = grad ? rowscale[i] : 0.0f, acc = 0.0f, sq = 0.0f;
            for (unsigned w0 = 0; w0 < words; w0 += RD_BATCH) {
                float x[RD_BATCH];
                uint32_t b[RD_BATCH];
#pragma unroll
                for (unsigned u = 0; u < RD_BATCH; u++) {
                    if (w0 + u < words) {
                        x[u] = row[32 * (w0 + u) + lane];
                        b[u] = dsum ? bits[(size_t)i * words + w0 + u] : 0u;
                    }
                }
#pragma unroll
                for (unsigned u = 0; u < RD_BATCH; u++) {
                    if (w0 + u < words) {
                        if (grad) {
                            size_t e = (size_t)i * j.r + 32 * (w0 + u) + lane;
                            float pr = __fmul_rn(h, x[u]);
                            const float gv = j.accumulate ? __fadd_rn(grad[e], pr) : pr;
                            grad[e] = gv;
                            sq = __fmaf_rn(gv, gv, sq); /* unused without rownorm */
                        }
                        if (dsum) acc = __fadd_rn(acc, b[u] >> lane & 1u ? x[u] : -x[u]);
                    }
                }
            }
            if (dsum) {
                for (unsigned s = 16; s >= 1; s >>= 1)
                    acc = __fadd_rn(acc, __shfl_down_sync(FULL_MASK, acc, s));
                if (lane == 0) dsum[i] = j.accumulate ? __fadd_rn(dsum[i], acc) : acc;
            }
            if (rownorm) {
                for (unsigned s = 16; s >= 1; s >>= 1)
                    sq = __fadd_rn(sq, __shfl_down_sync(FULL_MASK, sq, s));
                if (lane == 0) rownorm[i] = __fsqrt_rn(sq);
            }
        }
    }
}

__global__ void sign_rowdot_kernel(const rowdot_job j) {
    br_dev_pdl_enter();
    rowdot_rows(j, blockIdx.y, gridDim.y);
}

/* Two rowdots in one launch (br_mm_tn2_rowdot's sides): grid rows [0, y1) take the
 * first's paths, the rest the second's; each row of each path exactly as its own
 * launch computes it. */
__global__ void sign_rowdot2_kernel(const rowdot_job j1, const rowdot_job j2, unsigned y1) {
    br_dev_pdl_enter();
    if (blockIdx.y < y1)
        rowdot_rows(j1, blockIdx.y, y1);
    else
        rowdot_rows(j2, blockIdx.y - y1, gridDim.y - y1);
}

extern "C" br_status br_cuda_sign_rowdot(br_ctx *ctx, const br_op *op) {
    const br_sign_rowdot_args *a = &op->u.sign_rowdot;
    br_cuda *s = br_cuda_state(ctx);
    dim3 grid(br_cuda_blocks(ctx, a->rows * 32, THREADS),
              a->paths < MAX_GRID_Y ? (unsigned)a->paths : MAX_GRID_Y);
    BR_CUDA_LAUNCH_WAITING(ctx, s, "sign_rowdot_kernel", sign_rowdot_kernel, grid, THREADS, 0,
                           rowdot_job_of(a));
    return BR_OK;
}

extern "C" br_status br_cuda_sign_rowdot2(br_ctx *ctx, const br_op *ops, size_t) {
    br_cuda *s = br_cuda_state(ctx);
    const br_sign_rowdot_args *a = &ops[0].u.sign_rowdot, *b = &ops[1].u.sign_rowdot;
    /* each side's paths in grid rows of its own (both within MAX_GRID_Y together) */
    const unsigned half = MAX_GRID_Y / 2;
    const unsigned y1 = a->paths < half ? (unsigned)a->paths : half;
    const unsigned y2 = b->paths < half ? (unsigned)b->paths : half;
    const size_t rows = a->rows > b->rows ? a->rows : b->rows;
    dim3 grid(br_cuda_blocks(ctx, rows * 32, THREADS), y1 + y2);
    BR_CUDA_LAUNCH_WAITING(ctx, s, "sign_rowdot2_kernel", sign_rowdot2_kernel, grid, THREADS, 0,
                           rowdot_job_of(a), rowdot_job_of(b), y1);
    return BR_OK;
}

/* ---------------------------------------------------------------- cvt_both */

/* Tokens and columns of a tile; its transposed bits go through shared memory. */
#define CB_TILE 64
/* Row stride of the shared tile in halves: 33 words, so the transposing writes
 * (8 tokens × 4 column groups per warp) and the 4-byte reads of phase 2 (4 columns
 * × 8 token groups per warp) hit 32 different banks. */
#define CB_STRIDE 66
/* 8-element items of a tile, per thread. */
#define CB_ITEMS (CB_TILE * CB_TILE / 8 / THREADS)

typedef struct cvt_both_job {
    const float *src, *col; /* src f32 [m][k]; col f32 [k] or NULL */
    uint16_t *dst;          /* f16 [mpad][ld] or NULL */
    uint16_t *dst_t;        /* f16 [kpad][tpad] or NULL */
    unsigned m, k, ld, mpad, kpad, tpad;
    unsigned text, cext;            /* tokens and columns the tiles cover */
    unsigned col_group, col_stride; /* col in groups (0: plain [k]) */
    float scale;
    /* RES: the staged value is of fl(fl(src·alpha) + fl(beta·c)) (col NULL): the
     * epilogue of a GEMM with c, applied to its plain product */
    const float *c;     /* RES_F32: f32 [m][k] */
    const uint16_t *ch; /* RES_F16: f16 [m][k], its exact f32 values */
    float *res_out;     /* RES_F16 only, or NULL: the f32 value before scale, [m][k] */
    float alpha, beta;
} cvt_both_job;

/* What a cvt_both stages: src (with col), or a GEMM epilogue with an f32 / f16 c. */
enum { RES_NONE = 0, RES_F32 = 1, RES_F16 = 2 };

/* Eight floats of row s from column c (< k: zeros past k or where !row_ok): two
 * 16-byte loads with VEC (k % 8 == 0, 16-byte aligned rows), else one at a time. */
template <bool VEC>
static __device__ __forceinline__ void load8(float (&x)[8], const float *s, bool row_ok, unsigned c,
                                             unsigned k) {
    if (VEC) {
        float4 lo = make_float4(0.0f, 0.0f, 0.0f, 0.0f), hi = lo;
        if (row_ok && c < k) {
            lo = reinterpret_cast<const float4 *>(s)[0];
            hi = reinterpret_cast<const float4 *>(s)[1];
        }
        x[0] = lo.x, x[1] = lo.y, x[2] = lo.z, x[3] = lo.w;
        x[4] = hi.x, x[5] = hi.y, x[6] = hi.z, x[7] = hi.w;
    } else {
#pragma unroll
        for (unsigned u = 0; u < 8; u++)
            x[u] = row_ok && c + u < k ? s[u] : 0.0f;
    }
}

/* Eight halves of row s from column c as their f32 values (zeros as load8 gives):
 * one 16-byte load with VEC (then 16-byte aligned), else one at a time. */
template <bool VEC>
static __device__ __forceinline__ void load8h(float (&x)[8], const uint16_t *s, bool row_ok,
                                              unsigned c, unsigned k) {
    uint16_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (VEC) {
        if (row_ok && c < k) {
            uint4 v = *reinterpret_cast<const uint4 *>(s);
            uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (unsigned u = 0; u < 8; u++)
                h[u] = (uint16_t)(w[u / 2] >> (16 * (u % 2)));
        }
    } else {
#pragma unroll
        for (unsigned u = 0; u < 8; u++)
            if (row_ok && c + u < k) h[u] = s[u];
    }
#pragma unroll
    for (unsigned u = 0; u < 8; u++)
        x[u] = br_dev_f16_to_f32(h[u]);
}

/* Phase 1 of a tile (t0, c0): item q of 512 is token tt, column group g (8 columns
 * c0 + 8g ..): a warp takes 8 tokens × 4 groups, so it reads 128 contiguous bytes
 * of 8 src rows and writes 64 contiguous bytes of 8 dst rows. The item's 8 staged
 * values go to dst (one 16-byte store with VEC) and, transposed, to the tile.
 * Phase 2 (dst_t): item q is tile column cc, token group g: 4 columns × 8 groups
 * per warp, 128 contiguous bytes of 4 dst_t rows, one 16-byte store each.
 * VEC: k % 8 == 0 and ld % 8 == 0 (a group is wholly inside or outside the data and
 * dst's rows), src, dst, dst_t 16-byte aligned (and c, res_out with RES). RES_F16
 * with res_out also stores the unscaled f32 value there (src may be res_out: each
 * element is read by the thread that writes it, before it writes). Grid-stride
 * over tiles. */
template <bool VEC, int RES>
__global__ void __launch_bounds__(THREADS, 4) cvt_both_kernel(cvt_both_job j) {
    __shared__ __align__(16) uint16_t tile[CB_TILE][CB_STRIDE]; /* [column][token] */
    br_dev_pdl_enter();
    unsigned ctiles = (j.cext + CB_TILE - 1) / CB_TILE;
    unsigned tiles = ctiles * ((j.text + CB_TILE - 1) / CB_TILE);
    for (unsigned tl = blockIdx.x; tl < tiles; tl += gridDim.x) {
        unsigned c0 = (tl % ctiles) * CB_TILE, t0 = (tl / ctiles) * CB_TILE;
        float x[CB_ITEMS][8], xc[RES ? CB_ITEMS : 1][8];
        /* every load of the tile first: 16 floats in flight per thread (32 with RES) */
#pragma unroll
        for (unsigned it = 0; it < CB_ITEMS; it++) {
            unsigned q = threadIdx.x + it * THREADS;
            unsigned g = q % 4 + 4 * (q / 32 % 2), tt = q / 4 % 8 + 8 * (q / 64);
            unsigned t = t0 + tt, c = c0 + 8 * g;
            load8<VEC>(x[it], j.src + (size_t)t * j.k + c, t < j.m, c, j.k);
            if (RES == RES_F32)
                load8<VEC>(xc[RES ? it : 0], j.c + (size_t)t * j.k + c, t < j.m, c, j.k);
            if (RES == RES_F16)
                load8h<VEC>(xc[RES ? it : 0], j.ch + (size_t)t * j.k + c, t < j.m, c, j.k);
        }
#pragma unroll
        for (unsigned it = 0; it < CB_ITEMS; it++) {
            unsigned q = threadIdx.x + it * THREADS;
            unsigned g = q % 4 + 4 * (q / 32 % 2), tt = q / 4 % 8 + 8 * (q / 64);
            unsigned t = t0 + tt, c = c0 + 8 * g;
            uint32_t h[8];
            float res[8];
            /* the group's place of column c once: the 8 columns share a group where
             * groups are whole groups of 8 (a division per element cost as much as
             * the copy) */
            const unsigned cg =
                j.col && j.col_group % 8 == 0 ? br_dev_grouped(c, j.col_group, j.col_stride) : 0u;
#pragma unroll
            for (unsigned u = 0; u < 8; u++) {
                h[u] = 0u;
                res[u] = 0.0f;
                if (t < j.m && c + u < j.k) {
                    if (RES)
                        res[u] = __fadd_rn(__fmul_rn(x[it][u], j.alpha),
                                           __fmul_rn(j.beta, xc[RES ? it : 0][u]));
                    const unsigned ci = j.col_group % 8 == 0
                                            ? cg + u
                                            : br_dev_grouped(c + u, j.col_group, j.col_stride);
                    float v = RES     ? __fmul_rn(res[u], j.scale)
                              : j.col ? __fmul_rn(__fmul_rn(x[it][u], j.col[ci]), j.scale)
                                      : __fmul_rn(x[it][u], j.scale);
                    h[u] = br_dev_f16_bits(v);
                }
            }
            if (RES == RES_F16 && j.res_out && t < j.m) {
                float *o = j.res_out + (size_t)t * j.k + c;
                if (VEC) {
                    if (c < j.k) {
                        reinterpret_cast<float4 *>(o)[0] =
                            make_float4(res[0], res[1], res[2], res[3]);
                        reinterpret_cast<float4 *>(o)[1] =
                            make_float4(res[4], res[5], res[6], res[7]);
                    }
                } else {
#pragma unroll
                    for (unsigned u = 0; u < 8; u++)
                        if (c + u < j.k) o[u] = res[u];
                }
            }
            if (j.dst && t < j.mpad) {
                uint16_t *d = j.dst + (size_t)t * j.ld + c;
                if (VEC) {
                    if (c < j.ld)
                        *reinterpret_cast<uint4 *>(d) =
                            make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16,
                                       h[6] | h[7] << 16);
                } else {
#pragma unroll
                    for (unsigned u = 0; u < 8; u++)
                        if (c + u < j.ld) d[u] = (uint16_t)h[u];
                }
            }
            if (j.dst_t) {
#pragma unroll
                for (unsigned u = 0; u < 8; u++)
                    tile[8 * g + u][tt] = (uint16_t)h[u];
            }
        }
        if (j.dst_t) { /* block-uniform */
            __syncthreads();
#pragma unroll
            for (unsigned it = 0; it < CB_ITEMS; it++) {
                unsigned q = threadIdx.x + it * THREADS;
                unsigned g = q % 8, cc = q / 8, c = c0 + cc, t = t0 + 8 * g;
                if (c >= j.kpad || t >= j.tpad) continue; /* tpad % 32 == 0: groups whole */
                const uint32_t *srow = reinterpret_cast<const uint32_t *>(tile[cc]) + 4 * g;
                uint4 v = make_uint4(srow[0], srow[1], srow[2], srow[3]);
                uint16_t *d = j.dst_t + (size_t)c * j.tpad + t;
                if (VEC) {
                    *reinterpret_cast<uint4 *>(d) = v;
                } else {
                    uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                    for (unsigned u = 0; u < 8; u++)
                        d[u] = (uint16_t)(w[u / 2] >> (16 * (u % 2)));
                }
            }
            __syncthreads();
        }
    }
}

/* The launch of every cvt_both form (c or ch, not both; res_out only with ch). */
static br_status cvt_both_launch(br_ctx *ctx, const float *src, const float *col, uint16_t *dst,
                                 uint16_t *dst_t, size_t m, size_t k, size_t ld, float scale,
                                 const float *c, const uint16_t *ch, float *res_out, float alpha,
                                 float beta, size_t col_group = 0, size_t col_stride = 0) {
    br_cuda *s = br_cuda_state(ctx);
    cvt_both_job j;
    memset(&j, 0, sizeof j);
    j.src = src;
    j.col = col;
    j.dst = dst;
    j.dst_t = dst_t;
    j.m = (unsigned)m;
    j.k = (unsigned)k;
    j.ld = (unsigned)ld;
    j.mpad = (unsigned)br_pad_rows(m);
    j.kpad = (unsigned)br_pad_rows(k);
    j.tpad = (unsigned)br_pad_tokens(m);
    j.text = j.dst ? j.mpad : j.tpad; /* mpad ≥ tpad */
    j.cext = j.dst ? j.ld : 0;
    if (j.dst_t && j.kpad > j.cext) j.cext = j.kpad;
    j.scale = scale;
    j.col_group = (unsigned)col_group;
    j.col_stride = (unsigned)col_stride;
    j.c = c;
    j.ch = ch;
    j.res_out = res_out;
    j.alpha = alpha;
    j.beta = beta;
    size_t tiles = (size_t)((j.cext + CB_TILE - 1) / CB_TILE) * ((j.text + CB_TILE - 1) / CB_TILE);
    unsigned blocks = br_cuda_blocks(ctx, tiles * THREADS, THREADS);
    int vec = j.k % 8 == 0 && j.ld % 8 == 0 && br_aligned(16, j.src, j.dst, j.dst_t) &&
              br_aligned(16, j.c, j.ch, j.res_out);
    auto kern = ch  ? (vec ? cvt_both_kernel<true, RES_F16> : cvt_both_kernel<false, RES_F16>)
                : c ? (vec ? cvt_both_kernel<true, RES_F32> : cvt_both_kernel<false, RES_F32>)
                    : (vec ? cvt_both_kernel<true, RES_NONE> : cvt_both_kernel<false, RES_NONE>);
    BR_CUDA_LAUNCH_WAITING(ctx, s, "cvt_both_kernel", kern, blocks, THREADS, 0, j);
    return BR_OK;
}

extern "C" br_status br_cuda_cvt_both_ptr(br_ctx *ctx, const float *src, const float *col,
                                          uint16_t *dst, uint16_t *dst_t, size_t m, size_t k,
                                          size_t ld, float scale, const float *c, float alpha,
                                          float beta) {
    return cvt_both_launch(ctx, src, col, dst, dst_t, m, k, ld, scale, c, nullptr, nullptr, alpha,
                           beta);
}

extern "C" br_status br_cuda_cvt_both_res16(br_ctx *ctx, const float *src, uint16_t *dst,
                                            uint16_t *dst_t, size_t m, size_t k, size_t ld,
                                            float scale, const uint16_t *c, float alpha, float beta,
                                            float *res_out) {
    return cvt_both_launch(ctx, src, nullptr, dst, dst_t, m, k, ld, scale, nullptr, c, res_out,
                           alpha, beta);
}

extern "C" br_status br_cuda_cvt_both(br_ctx *ctx, const br_op *op) {
    const br_cvt_both_args *a = &op->u.cvt_both;
    return cvt_both_launch(ctx, (const float *)br_ptr(a->src), (const float *)br_ptr(a->col),
                           (uint16_t *)br_ptr(a->dst), (uint16_t *)br_ptr(a->dst_t), a->m, a->k,
                           a->ld, a->scale, nullptr, nullptr, nullptr, 1.0f, 0.0f, a->col_group,
                           a->col_stride);
}
