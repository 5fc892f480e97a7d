/* The small dense f32 linear on the CPU, in two loop nests that give the same bits
 * because every output sums its terms in the contract's order with one fmaf each,
 * from 0 (bitrank.h, "small dense f32 linear"):
 *
 *   dense_fwd  out[i][o] (+)= Σ_j a[i][j]·w[o][j],   j = 0..k−1
 *   dense_bwd  dx[i][j]   += Σ_o dy[i][o]·w[o][j],   o = 0..r−1, then dx = dx + acc
 *
 * The plain variants are the one-output-at-a-time statement of that; the tiled
 * ones block over rows, outputs and k and keep a tile of accumulators, which only
 * reorders independent sums, never the terms of one. */
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/cpu_ops.h"

/* Below this many multiply-adds a parallel region costs more than it saves. */
#define PARALLEL_MIN_FMAS ((size_t)1 << 18)

enum {
    FWD_TILE_ROWS = 4, /* rows of a per-thread accumulator tile */
    FWD_TILE_K = 64,   /* k-chunk kept in L1 */
    FWD_MAX_R = 48,    /* outputs per row the tiled forward holds (front-end checked) */
    BWD_TILE_ROWS = 4,
    BWD_TILE_COLS = 256,
};

/* out[i][o] (+)= Σ_j a[i][j]·w[o][j], one output at a time. */
static void dense_fwd_plain(const br_dense_args *x) {
    const float *a = br_ptr(x->a), *w = br_ptr(x->w);
    float *out = br_ptr(x->out);
    const size_t m = x->m, k = x->k, r = x->r;
    const int parallel = m * k * r >= PARALLEL_MIN_FMAS;
    OMP("omp parallel for schedule(static) if(parallel)")
    for (size_t i = 0; i < m; i++) {
        const float *ai = a + i * k;
        for (size_t o = 0; o < r; o++) {
            const float *wo = w + o * k;
            float acc = 0.0f;
            for (size_t j = 0; j < k; j++)
                acc = fmaf(ai[j], wo[j], acc);
            float *y = out + i * r + o;
            *y = x->accumulate ? *y + acc : acc;
        }
    }
    (void)parallel;
}

/* The same sums over tiles of FWD_TILE_ROWS rows × all r ≤ 48 outputs, k in chunks
 * of FWD_TILE_K, from wt = wᵀ [k][r] so the inner loop runs over outputs. */
static br_status dense_fwd_tiled(br_ctx *ctx, const br_dense_args *x) {
    const float *a = br_ptr(x->a), *w = br_ptr(x->w);
    float *out = br_ptr(x->out);
    const size_t m = x->m, k = x->k, r = x->r;
    float *wt = malloc(k * r * sizeof *wt);
    if (!wt) return br_fail(ctx, BR_E_NOMEM, "dense_fwd: out of host memory for %zu×%zu", k, r);
    for (size_t o = 0; o < r; o++)
        for (size_t j = 0; j < k; j++)
            wt[j * r + o] = w[o * k + j];

    const size_t ntiles = (m + FWD_TILE_ROWS - 1) / FWD_TILE_ROWS;
    const int parallel = m * k * r >= PARALLEL_MIN_FMAS;
    OMP("omp parallel for schedule(static) if(parallel)")
    for (size_t tile = 0; tile < ntiles; tile++) {
        const size_t i0 = tile * FWD_TILE_ROWS;
        const size_t nrows = m - i0 < FWD_TILE_ROWS ? m - i0 : FWD_TILE_ROWS;
        float acc[FWD_TILE_ROWS][FWD_MAX_R] = {{0.0f}};
        for (size_t j0 = 0; j0 < k; j0 += FWD_TILE_K) {
            const size_t j1 = j0 + FWD_TILE_K < k ? j0 + FWD_TILE_K : k;
            for (size_t j = j0; j < j1; j++) {
                const float *wtj = wt + j * r;
                for (size_t ii = 0; ii < nrows; ii++) {
                    const float xij = a[(i0 + ii) * k + j];
                    float *acc_i = acc[ii];
                    OMP("omp simd")
                    for (size_t o = 0; o < r; o++)
                        acc_i[o] = fmaf(xij, wtj[o], acc_i[o]);
                }
            }
        }
        for (size_t ii = 0; ii < nrows; ii++) {
            float *y = out + (i0 + ii) * r;
            if (x->accumulate)
                for (size_t o = 0; o < r; o++)
                    y[o] = y[o] + acc[ii][o];
            else
                for (size_t o = 0; o < r; o++)
                    y[o] = acc[ii][o];
        }
    }
    (void)parallel;
    free(wt);
    return BR_OK;
}

br_status br_cpu_dense_fwd(br_ctx *ctx, const br_op *op) {
    const br_dense_args *x = &op->u.dense;
    ctx->stats.launches++;
    /* r ≤ 48 is the front-end's check; the guard keeps the tile in bounds regardless */
    if (x->impl == BR_DENSE_TILED && x->r <= FWD_MAX_R) return dense_fwd_tiled(ctx, x);
    dense_fwd_plain(x);
    return BR_OK;
}

/* dx[i][j] += Σ_o dy[i][o]·w[o][j], one output at a time. */
static void dense_bwd_plain(const br_dense_args *x) {
    const float *dy = br_ptr(x->a), *w = br_ptr(x->w);
    float *dx = br_ptr(x->out);
    const size_t m = x->m, k = x->k, r = x->r;
    const int parallel = m * k * r >= PARALLEL_MIN_FMAS;
    OMP("omp parallel for schedule(static) if(parallel)")
    for (size_t i = 0; i < m; i++) {
        const float *dyi = dy + i * r;
        for (size_t j = 0; j < k; j++) {
            float acc = 0.0f;
            for (size_t o = 0; o < r; o++)
                acc = fmaf(dyi[o], w[o * k + j], acc);
            dx[i * k + j] = dx[i * k + j] + acc;
        }
    }
    (void)parallel;
}

/* The same sums over tiles of BWD_TILE_ROWS rows × BWD_TILE_COLS columns: each row
 * of w is read once per tile and serves every row of it. */
static void dense_bwd_tiled(const br_dense_args *x) {
    const float *dy = br_ptr(x->a), *w = br_ptr(x->w);
    float *dx = br_ptr(x->out);
    const size_t m = x->m, k = x->k, r = x->r;
    const size_t row_tiles = (m + BWD_TILE_ROWS - 1) / BWD_TILE_ROWS;
    const size_t col_tiles = (k + BWD_TILE_COLS - 1) / BWD_TILE_COLS;
    const int parallel = m * k * r >= PARALLEL_MIN_FMAS;
    OMP("omp parallel for schedule(static) if(parallel)")
    for (size_t tile = 0; tile < row_tiles * col_tiles; tile++) {
        const size_t i0 = tile / col_tiles * BWD_TILE_ROWS;
        const size_t j0 = tile % col_tiles * BWD_TILE_COLS;
        const size_t nrows = m - i0 < BWD_TILE_ROWS ? m - i0 : BWD_TILE_ROWS;
        const size_t ncols = k - j0 < BWD_TILE_COLS ? k - j0 : BWD_TILE_COLS;
        float acc[BWD_TILE_ROWS][BWD_TILE_COLS] = {{0.0f}};
        for (size_t o = 0; o < r; o++) {
            const float *wo = w + o * k + j0;
            for (size_t ii = 0; ii < nrows; ii++) {
                const float d = dy[(i0 + ii) * r + o];
                float *acc_i = acc[ii];
                OMP("omp simd")
                for (size_t jj = 0; jj < ncols; jj++)
                    acc_i[jj] = fmaf(d, wo[jj], acc_i[jj]);
            }
        }
        for (size_t ii = 0; ii < nrows; ii++) {
            float *dxi = dx + (i0 + ii) * k + j0;
            for (size_t jj = 0; jj < ncols; jj++)
                dxi[jj] = dxi[jj] + acc[ii][jj];
        }
    }
    (void)parallel;
}

br_status br_cpu_dense_bwd(br_ctx *ctx, const br_op *op) {
    const br_dense_args *x = &op->u.dense;
    ctx->stats.launches++;
    if (x->impl == BR_DENSE_TILED)
        dense_bwd_tiled(x);
    else
        dense_bwd_plain(x);
    return BR_OK;
}
