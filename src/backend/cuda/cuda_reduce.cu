/* Column reductions on CUDA: colsum and colsum_fused (with the optional transposed
 * f16 operand). Deterministic and bit-identical to the CPU backend: rows are cut in
 * blocks of B = br_colsum_block_rows(rows); one thread per (column, block) sums its
 * block's rows in order from 0 into a partial (workspace [nb][k]); a second kernel,
 * one thread per column, adds the partials in block order from 0 and stores or
 * accumulates the total. No atomics. Products and sums are the intrinsics
 * __fmaf_rn / __fmul_rn / __fadd_rn, so no contraction can change a bit. */
#include "backend/cuda/cuda_internal.h"

#define THREADS 256

/* Partials a colsum_fin thread loads before it adds any of them. */
#define FIN_BATCH 16

/* out[c] = total (ACC: out[c] + total) where total = 0 + part[0][c] + part[1][c] + …
 * (part [nb][k]); one thread per column c < k; out in groups (group 0: plain). The
 * partials load FIN_BATCH at a time before the adds (the same adds in the same
 * order): one load round trip per batch, where a load per add made the 64 partials
 * of 4096 tokens a chain of 64 round trips. */
__global__ void colsum_fin_kernel(const float *part, float *out, unsigned k, unsigned nb,
                                  int accumulate, unsigned group, unsigned stride) {
    br_dev_pdl_enter();
    unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= k) return;
    float total = 0.0f;
    unsigned blk = 0;
    for (; blk + FIN_BATCH <= nb; blk += FIN_BATCH) {
        float v[FIN_BATCH];
#pragma unroll
        for (unsigned u = 0; u < FIN_BATCH; u++)
            v[u] = part[(size_t)(blk + u) * k + c];
#pragma unroll
        for (unsigned u = 0; u < FIN_BATCH; u++)
            total = __fadd_rn(total, v[u]);
    }
    for (; blk < nb; blk++)
        total = __fadd_rn(total, part[(size_t)blk * k + c]);
    float *o = out + br_dev_grouped(c, group, stride);
    *o = accumulate ? __fadd_rn(*o, total) : total;
}

/* Pass 1 of colsum: part[blk][c] = Σ over rows r0..r1−1 of block blk (in order, from
 * 0) of the term: AB fmaf(a, b, acc); ABF fmaf(fl(a·b), f[row], acc); A acc + a.
 * a, b f32 [rows][k]; f f32 [rows]. Grid (ceil(k/256), nb): a warp reads 32
 * consecutive columns of a row (128 bytes). With nb == 1 (SINGLE) the thread also
 * finishes the column (total = 0 + acc, stored or added), saving the second pass. */
template <int TERM, bool SINGLE>
__global__ void colsum_part_kernel(const float *a, const float *b, const float *f, float *part,
                                   float *out, int accumulate, unsigned rows, unsigned k,
                                   unsigned brows) {
    unsigned c = blockIdx.x * blockDim.x + threadIdx.x, blk = blockIdx.y;
    if (c >= k) return;
    unsigned r0 = blk * brows, r1 = min(r0 + brows, rows);
    float acc = 0.0f;
#pragma unroll 8
    for (unsigned row = r0; row < r1; row++) {
        size_t i = (size_t)row * k + c;
        if (TERM == BR_TERM_AB) acc = __fmaf_rn(a[i], b[i], acc);
        if (TERM == BR_TERM_ABF) acc = __fmaf_rn(__fmul_rn(a[i], b[i]), f[row], acc);
        if (TERM == BR_TERM_A) acc = __fadd_rn(acc, a[i]);
    }
    if (SINGLE) {
        float total = __fadd_rn(0.0f, acc);
        out[c] = accumulate ? __fadd_rn(out[c], total) : total;
    } else {
        part[(size_t)blk * k + c] = acc;
    }
}

template <int TERM>
static br_status colsum_launch(br_ctx *ctx, const br_colsum_args *a, float *part, unsigned nb) {
    br_cuda *s = br_cuda_state(ctx);
    unsigned rows = (unsigned)a->rows, k = (unsigned)a->k;
    unsigned brows = (unsigned)br_colsum_block_rows(a->rows);
    dim3 grid((k + THREADS - 1) / THREADS, nb);
    const float *x = (const float *)br_ptr(a->a), *y = (const float *)br_ptr(a->b);
    const float *f = (const float *)br_ptr(a->f);
    float *out = (float *)br_ptr(a->out);
    if (nb == 1)
        colsum_part_kernel<TERM, true>
            <<<grid, THREADS, 0, s->stream>>>(x, y, f, part, out, a->accumulate, rows, k, brows);
    else
        colsum_part_kernel<TERM, false>
            <<<grid, THREADS, 0, s->stream>>>(x, y, f, part, out, a->accumulate, rows, k, brows);
    BR_CUDA_LAUNCHED(ctx, "colsum_part_kernel");
    return BR_OK;
}

extern "C" br_status br_cuda_colsum(br_ctx *ctx, const br_op *op) {
    const br_colsum_args *a = &op->u.colsum;
    br_cuda *s = br_cuda_state(ctx);
    unsigned nb = (unsigned)br_colsum_blocks(a->rows), k = (unsigned)a->k;
    void *part = NULL;
    if (nb > 1) BR_TRY(br_cuda_workspace(ctx, (size_t)nb * k * sizeof(float), &part));
    switch (a->term) {
    case BR_TERM_AB: BR_TRY(colsum_launch<BR_TERM_AB>(ctx, a, (float *)part, nb)); break;
    case BR_TERM_ABF: BR_TRY(colsum_launch<BR_TERM_ABF>(ctx, a, (float *)part, nb)); break;
    case BR_TERM_A: BR_TRY(colsum_launch<BR_TERM_A>(ctx, a, (float *)part, nb)); break;
    default: return br_fail(ctx, BR_E_ARG, "colsum: unknown term %d", (int)a->term);
    }
    if (nb == 1) return BR_OK;
    BR_CUDA_LAUNCH_WAITING(ctx, s, "colsum_fin_kernel", colsum_fin_kernel,
                           (k + THREADS - 1) / THREADS, THREADS, 0, (const float *)part,
                           (float *)br_ptr(a->out), k, nb, a->accumulate, 0u, 0u);
    return BR_OK;
}

/* ---------------------------------------------------------------- colsum_fused */

typedef struct fused_job {
    const float *a, *b;
    const float *col;  /* NULL: no column factor (same bits as a factor of 1) */
    float *part, *sum; /* part [nb][k] (unused when nb == 1); sum [k] */
    uint16_t *dst16;   /* CVT_A / CVT_B: f16 [rpad][k] */
    float *dst32;      /* SCALE_B: f32 [rows][k] */
    uint16_t *dst_t;   /* NULL or f16 [kpad][tpad] */
    float scale, t_scale;
    int accumulate; /* SCALE_B: dst32 += b·col */
    unsigned rows, k, brows, nb;
    unsigned rpad, tpad, kpad; /* br_pad_rows(rows), br_pad_tokens(rows), br_pad_rows(k) */
    unsigned group, stride;    /* col and sum in groups (0: plain [k]) */
    int overwrite;             /* sum = total, not sum + total */
} fused_job;

/* The element op of a fused reduction at flat index i (row < rows) on the loaded
 * a and b: sums a·b into acc, writes dst, returns the f16 bits of the transposed
 * operand. */
template <int KIND>
static __device__ __forceinline__ uint16_t fused_element(const fused_job &j, size_t i, float a,
                                                         float b, float cf, float &acc) {
    acc = __fmaf_rn(a, b, acc);
    if (KIND == BR_FUSE_CVT_A || KIND == BR_FUSE_CVT_B) {
        uint16_t h =
            br_dev_f16_bits(__fmul_rn(__fmul_rn(KIND == BR_FUSE_CVT_A ? a : b, cf), j.scale));
        j.dst16[i] = h;
        return h;
    }
    float v = __fmul_rn(b, cf);
    j.dst32[i] = j.accumulate ? __fadd_rn(j.dst32[i], v) : v;
    return br_dev_f16_bits(__fmul_rn(__fmul_rn(a, cf), j.t_scale));
}

#define FUSED_BATCH 16
/* Columns (threads) of a colsum_fused block. The row blocks are fixed by the
 * contract (64 rows at 4096 tokens: 64 of them), so narrow blocks are what spreads
 * a few hundred columns evenly over the SMs (256-column blocks: 192 blocks on 132
 * SMs at R = 768, half the SMs with two, half with one). */
#define FUSED_THREADS 128

/* Rows lo..hi−1 (all < rows) of column c, in order: each batch of FUSED_BATCH rows
 * loads its a and b before any of its stores (the compiler may not move loads past
 * stores to pointers that could alias, so the batching is explicit: 32 loads in
 * flight per thread, which the ~500 threads an SM holds at 4096 tokens need to keep
 * the memory busy), then does the element op. t (or NULL) receives the transposed bits of
 * row `row` at t[row − base]. */
template <int KIND>
static __device__ __forceinline__ void fused_rows(const fused_job &j, unsigned c, float cf,
                                                  unsigned lo, unsigned hi, float &acc, uint16_t *t,
                                                  unsigned base) {
    for (unsigned row = lo; row < hi; row += FUSED_BATCH) {
        float av[FUSED_BATCH], bv[FUSED_BATCH];
#pragma unroll
        for (unsigned u = 0; u < FUSED_BATCH; u++) {
            if (row + u < hi) {
                size_t i = (size_t)(row + u) * j.k + c;
                av[u] = j.a[i];
                bv[u] = j.b[i];
            }
        }
#pragma unroll
        for (unsigned u = 0; u < FUSED_BATCH; u++) {
            if (row + u < hi) {
                uint16_t h =
                    fused_element<KIND>(j, (size_t)(row + u) * j.k + c, av[u], bv[u], cf, acc);
                if (t) t[row + u - base] = h;
            }
        }
    }
}

/* Pass 1 of colsum_fused: block blk of rows [r0, r1), one thread per column (grid
 * (ceil(ncols/FUSED_THREADS), nb)), the AB partial summed exactly as colsum sums it, and the
 * element op of KIND on every element read. The last row block also writes the
 * pads: zero rows rows..rpad−1 of a CVT dst and (WITH_T) zero tokens rows..tpad−1
 * of dst_t.
 *
 * WITH_T: the grid covers columns up to kpad (columns ≥ k only contribute zeros, so
 * dst_t's pad rows get written too). The block's rows go in chunks of 32 through a
 * shared tile [FUSED_THREADS columns][32 rows (+2 against bank conflicts)] of f16
 * bits; after each chunk warp w of W writes columns w, w+W, …: its 32 lanes store 32 consecutive
 * tokens of one dst_t row (64 contiguous bytes). With nb == 1 the thread adds its
 * total to sum directly (no second pass). */
template <int KIND, bool WITH_T> __global__ void colsum_fused_kernel(fused_job j) {
    __shared__ uint16_t tile[WITH_T ? FUSED_THREADS : 1][34];
    br_dev_pdl_enter();
    const bool cvt = KIND != BR_FUSE_SCALE_B;
    unsigned c = blockIdx.x * blockDim.x + threadIdx.x, blk = blockIdx.y;
    bool live = c < j.k;
    if (!WITH_T && !live) return;
    unsigned r0 = blk * j.brows, r1 = min(r0 + j.brows, j.rows), rend = r1;
    if (blk == j.nb - 1) {
        if (cvt) rend = max(rend, j.rpad);
        if (WITH_T) rend = max(rend, j.tpad);
    }
    float cf = live && j.col ? j.col[br_dev_grouped(c, j.group, j.stride)] : 1.0f;
    float acc = 0.0f;
    if (!WITH_T) {
        fused_rows<KIND>(j, c, cf, r0, r1, acc, NULL, 0);
        if (cvt)
            for (unsigned row = r1; row < rend; row++)
                j.dst16[(size_t)row * j.k + c] = 0;
    } else {
        unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, c0 = blockIdx.x * blockDim.x;
        uint16_t *t = tile[threadIdx.x];
        for (unsigned base = r0; base < rend; base += 32) {
            unsigned n = min(32u, rend - base), data_end = min(base + n, r1);
            unsigned pad0 = live ? max(base, data_end) : base; /* first row written as zero */
            if (live) fused_rows<KIND>(j, c, cf, base, data_end, acc, t, base);
            for (unsigned row = pad0; row < base + n; row++) {
                if (live && cvt && row < j.rpad) j.dst16[(size_t)row * j.k + c] = 0;
                t[row - base] = 0;
            }
            __syncthreads();
            unsigned nt = base < j.tpad ? min(n, j.tpad - base) : 0;
            for (unsigned cl = warp; cl < FUSED_THREADS; cl += FUSED_THREADS / 32)
                if (c0 + cl < j.kpad && lane < nt)
                    j.dst_t[(size_t)(c0 + cl) * j.tpad + base + lane] = tile[cl][lane];
            __syncthreads();
        }
        if (!live) return;
    }
    if (j.nb == 1) {
        float *o = j.sum + br_dev_grouped(c, j.group, j.stride);
        const float total = __fadd_rn(0.0f, acc);
        *o = j.overwrite ? total : __fadd_rn(*o, total);
    } else {
        j.part[(size_t)blk * j.k + c] = acc;
    }
}

template <int KIND> static br_status fused_launch(br_ctx *ctx, const fused_job &j) {
    br_cuda *s = br_cuda_state(ctx);
    unsigned ncols = j.dst_t ? j.kpad : j.k;
    dim3 grid((ncols + FUSED_THREADS - 1) / FUSED_THREADS, j.nb);
    auto k = j.dst_t ? colsum_fused_kernel<KIND, true> : colsum_fused_kernel<KIND, false>;
    BR_CUDA_LAUNCH_WAITING(ctx, s, "colsum_fused_kernel", k, grid, FUSED_THREADS, 0, j);
    return BR_OK;
}

extern "C" br_status br_cuda_colsum_fused(br_ctx *ctx, const br_op *op) {
    const br_colsum_fused_args *a = &op->u.colsum_fused;
    br_cuda *s = br_cuda_state(ctx);
    fused_job j = {};
    j.a = (const float *)br_ptr(a->a);
    j.b = (const float *)br_ptr(a->b);
    j.col = (const float *)br_ptr(a->fuse.col);
    j.sum = (float *)br_ptr(a->sum);
    j.dst_t = (uint16_t *)br_ptr(a->fuse.dst_t);
    j.scale = a->fuse.scale;
    j.t_scale = a->fuse.t_scale;
    j.accumulate = a->fuse.accumulate;
    j.rows = (unsigned)a->rows;
    j.k = (unsigned)a->k;
    j.brows = (unsigned)br_colsum_block_rows(a->rows);
    j.nb = (unsigned)br_colsum_blocks(a->rows);
    j.rpad = (unsigned)br_pad_rows(a->rows);
    j.tpad = (unsigned)br_pad_tokens(a->rows);
    j.kpad = (unsigned)br_pad_rows(a->k);
    j.group = (unsigned)a->group;
    j.stride = (unsigned)a->stride;
    j.overwrite = a->overwrite;
    if (j.nb > 1) {
        void *part = NULL;
        BR_TRY(br_cuda_workspace(ctx, (size_t)j.nb * j.k * sizeof(float), &part));
        j.part = (float *)part;
    }
    switch (a->fuse.kind) {
    case BR_FUSE_CVT_A:
        j.dst16 = (uint16_t *)br_ptr(a->fuse.dst);
        BR_TRY(fused_launch<BR_FUSE_CVT_A>(ctx, j));
        break;
    case BR_FUSE_CVT_B:
        j.dst16 = (uint16_t *)br_ptr(a->fuse.dst);
        BR_TRY(fused_launch<BR_FUSE_CVT_B>(ctx, j));
        break;
    case BR_FUSE_SCALE_B:
        j.dst32 = (float *)br_ptr(a->fuse.dst);
        BR_TRY(fused_launch<BR_FUSE_SCALE_B>(ctx, j));
        break;
    default: return br_fail(ctx, BR_E_ARG, "colsum_fused: unknown fuse kind %d", (int)a->fuse.kind);
    }
    if (j.nb == 1) return BR_OK;
    BR_CUDA_LAUNCH_WAITING(ctx, s, "colsum_fin_kernel", colsum_fin_kernel,
                           (j.k + THREADS - 1) / THREADS, THREADS, 0, j.part, j.sum, j.k, j.nb,
                           !j.overwrite, j.group, j.stride);
    return BR_OK;
}
