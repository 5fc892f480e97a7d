/* Column reductions on the CPU, written as the plain statement of the contract's
 * order (bitrank.h, "column reductions"), which the CUDA backend reproduces bit
 * for bit:
 *
 *   B = br_colsum_block_rows(rows), nb = br_colsum_blocks(rows)
 *   part[blk][c] = 0; for row in block blk, in order: part[blk][c] += term(row, c)
 *   total[c] = 0;     for blk = 0..nb−1:               total[c] = total[c] + part[blk][c]
 *   out[c] = total[c]  or  out[c] = out[c] + total[c]
 *
 * term: AB   part = fmaf(a, b, part)
 *       ABF  ab = a·b (rounded); part = fmaf(ab, f[row], part)
 *       A    part = part + a
 *
 * Threads take tiles of (row block, column chunk), SIMD lanes take columns: every
 * column keeps its own accumulator, so neither changes a single rounding. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

/* Work items are (row block, chunk of columns): parallel even with one block. */
#define COL_CHUNK ((size_t)1024)

/* part[c] = Σ over rows r0..r1−1 of the term, rows in order, from 0, for the
 * columns c0..c1−1 (part points at column 0 of the block's partial row). */
static void block_partial(const void *args, size_t r0, size_t r1, size_t c0, size_t c1,
                          float *part) {
    const br_colsum_args *x = args;
    const float *a = br_ptr(x->a), *b = br_ptr(x->b), *f = br_ptr(x->f);
    const size_t k = x->k;
    for (size_t c = c0; c < c1; c++)
        part[c] = 0.0f;
    for (size_t row = r0; row < r1; row++) {
        const float *ar = a + row * k;
        switch (x->term) {
        case BR_TERM_AB: {
            const float *br = b + row * k;
            OMP("omp simd")
            for (size_t c = c0; c < c1; c++)
                part[c] = fmaf(ar[c], br[c], part[c]);
            break;
        }
        case BR_TERM_ABF: {
            const float *br = b + row * k;
            const float fr = f[row];
            OMP("omp simd")
            for (size_t c = c0; c < c1; c++) {
                float ab = ar[c] * br[c];
                part[c] = fmaf(ab, fr, part[c]);
            }
            break;
        }
        case BR_TERM_A:
            OMP("omp simd")
            for (size_t c = c0; c < c1; c++)
                part[c] = part[c] + ar[c];
            break;
        }
    }
}

/* out[c] (+)= Σ_blk part[blk][c], blocks in order from 0. total: scratch [k]. */
/* Where column c of a grouped vector is (br_colsum_fused_args.group; 0: plain). */
static size_t grouped(size_t c, size_t group, size_t stride) {
    return group ? c / group * stride + c % group : c;
}

/* total = Σ partials in block order from 0; out[grouped(c)] = (out +) total[c]. */
static void sum_partials(const float *part, size_t nb, size_t k, float *total, float *out,
                         int accumulate, size_t group, size_t stride) {
    for (size_t c = 0; c < k; c++)
        total[c] = 0.0f;
    for (size_t blk = 0; blk < nb; blk++) {
        const float *p = part + blk * k;
        OMP("omp simd")
        for (size_t c = 0; c < k; c++)
            total[c] = total[c] + p[c];
    }
    for (size_t c = 0; c < k; c++) {
        float *o = out + grouped(c, group, stride);
        *o = accumulate ? *o + total[c] : total[c];
    }
}

/* The work on one tile: rows r0..r1−1, columns c0..c1−1 of a row block whose
 * partial row is part. */
typedef void (*tile_fn)(const void *args, size_t r0, size_t r1, size_t c0, size_t c1, float *part);

/* Runs fn on every (row block, column chunk) tile of rows × k, each tile on its
 * block's row of the partials [nb][k]. Tiles write disjoint elements, so the
 * thread count changes no rounding. */
static void run_tiles(tile_fn fn, const void *args, size_t rows, size_t k, float *part) {
    const size_t block = br_colsum_block_rows(rows), nb = br_colsum_blocks(rows);
    const size_t nchunks = (k + COL_CHUNK - 1) / COL_CHUNK;
    const int parallel = rows * k >= PARALLEL_MIN_ELEMS;
    OMP("omp parallel for schedule(static) if(parallel)")
    for (size_t tile = 0; tile < nb * nchunks; tile++) {
        const size_t blk = tile / nchunks, c0 = tile % nchunks * COL_CHUNK;
        const size_t r0 = blk * block, r1 = r0 + block < rows ? r0 + block : rows;
        fn(args, r0, r1, c0, c0 + COL_CHUNK < k ? c0 + COL_CHUNK : k, part + blk * k);
    }
    (void)parallel;
}

/* Partials [nb][k] plus one row for the totals. */
static br_status alloc_partials(br_ctx *ctx, const char *what, size_t nb, size_t k, float **out) {
    *out = malloc((nb + 1) * k * sizeof(float));
    if (!*out)
        return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory for %zu×%zu partials", what, nb, k);
    return BR_OK;
}

br_status br_cpu_colsum(br_ctx *ctx, const br_op *op) {
    const br_colsum_args *x = &op->u.colsum;
    const size_t nb = br_colsum_blocks(x->rows), k = x->k;
    ctx->stats.launches++;
    float *part;
    BR_TRY(alloc_partials(ctx, "colsum", nb, k, &part));
    run_tiles(block_partial, x, x->rows, k, part);
    sum_partials(part, nb, k, part + nb * k, br_ptr(x->out), x->accumulate, 0, 0);
    free(part);
    return BR_OK;
}

/* The fused pass over rows r0..r1−1 and columns c0..c1−1: the AB partial of the
 * block, and the fuse op on every element (what br_cvt / br_scale_acc / br_cvt_t
 * write). */
static void fused_block(const void *args, size_t r0, size_t r1, size_t c0, size_t c1, float *part) {
    const br_colsum_fused_args *x = args;
    const br_fuse *fz = &x->fuse;
    const float *a = br_ptr(x->a), *b = br_ptr(x->b), *gcol = br_ptr(fz->col);
    const size_t k = x->k;
    /* the chunk's column factors, gathered (col may be in groups): col[c] for c0 ≤ c < c1 */
    float colv[COL_CHUNK];
    for (size_t c = c0; c < c1; c++)
        colv[c - c0] = gcol[grouped(c, x->group, x->stride)];
    const size_t ld_t = br_pad_tokens(x->rows); /* row stride of dst_t [pad_rows(k)][ld_t] */
    uint16_t *dst_t = br_ptr(fz->dst_t);
    for (size_t c = c0; c < c1; c++)
        part[c] = 0.0f;
    for (size_t row = r0; row < r1; row++) {
        const float *ar = a + row * k, *br = b + row * k;
        OMP("omp simd")
        for (size_t c = c0; c < c1; c++)
            part[c] = fmaf(ar[c], br[c], part[c]);
        switch (fz->kind) {
        case BR_FUSE_CVT_A:
        case BR_FUSE_CVT_B: {
            /* dst[row][c] = f16(v·col[c]·scale), left to right; dst_t gets the same bits */
            const float *v = fz->kind == BR_FUSE_CVT_A ? ar : br;
            uint16_t *dr = (uint16_t *)br_ptr(fz->dst) + row * k;
            for (size_t c = c0; c < c1; c++) {
                float s = v[c] * colv[c - c0];
                dr[c] = br_half_from_float(s * fz->scale);
            }
            if (dst_t)
                for (size_t c = c0; c < c1; c++)
                    dst_t[c * ld_t + row] = dr[c];
            break;
        }
        case BR_FUSE_SCALE_B: {
            /* dst[row][c] (+)= b·col[c], the product rounded before the add */
            float *dr = (float *)br_ptr(fz->dst) + row * k;
            if (fz->accumulate) {
                OMP("omp simd")
                for (size_t c = c0; c < c1; c++) {
                    float v = br[c] * colv[c - c0];
                    dr[c] = dr[c] + v;
                }
            } else {
                OMP("omp simd")
                for (size_t c = c0; c < c1; c++)
                    dr[c] = br[c] * colv[c - c0];
            }
            /* dst_t = br_cvt_t(a, col, t_scale) */
            if (dst_t)
                for (size_t c = c0; c < c1; c++) {
                    float s = ar[c] * colv[c - c0];
                    dst_t[c * ld_t + row] = br_half_from_float(s * fz->t_scale);
                }
            break;
        }
        }
    }
}

/* Zero what br_cvt / br_cvt_t write as padding: dst rows rows..pad_rows(rows)−1;
 * dst_t columns rows..pad_tokens(rows)−1 of rows c < k, and rows k..pad_rows(k)−1. */
static void fused_pads(const br_colsum_fused_args *x) {
    const br_fuse *fz = &x->fuse;
    const size_t rows = x->rows, k = x->k;
    if (fz->kind != BR_FUSE_SCALE_B) {
        uint16_t *dst = br_ptr(fz->dst);
        memset(dst + rows * k, 0, (br_pad_rows(rows) - rows) * k * sizeof *dst);
    }
    if (fz->dst_t) {
        uint16_t *dst_t = br_ptr(fz->dst_t);
        const size_t ld_t = br_pad_tokens(rows);
        for (size_t c = 0; c < k; c++)
            memset(dst_t + c * ld_t + rows, 0, (ld_t - rows) * sizeof *dst_t);
        memset(dst_t + k * ld_t, 0, (br_pad_rows(k) - k) * ld_t * sizeof *dst_t);
    }
}

br_status br_cpu_colsum_fused(br_ctx *ctx, const br_op *op) {
    const br_colsum_fused_args *x = &op->u.colsum_fused;
    const size_t nb = br_colsum_blocks(x->rows), k = x->k;
    ctx->stats.launches++;
    float *part;
    BR_TRY(alloc_partials(ctx, "colsum_fused", nb, k, &part));
    run_tiles(fused_block, x, x->rows, k, part);
    fused_pads(x);
    sum_partials(part, nb, k, part + nb * k, br_ptr(x->sum), !x->overwrite, x->group, x->stride);
    free(part);
    return BR_OK;
}
