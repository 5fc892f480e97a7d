/* The reformulated layer's ops on the CPU: expand_scaled, sign_rowdot, cvt_both.
 * The reference semantics of ops/layer_ops.h: each element on its own, and the one
 * sum (sign_rowdot's Σ_k s·M) in the 32-lane-then-tree order of a CUDA warp, so the
 * results are the same on any number of threads and bit-identical to the kernels.
 * An op of several paths runs them one after another, each exactly as alone; so
 * does an op of two expands. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

/* ---------------------------------------------------------------- expand_scaled */

/* One path: plane [rows][ld] (its r columns) by rows, else plane [r][ld]; mag
 * [rows] is room for the magnitudes. */
static void expand_scaled_path(const br_expand_scaled_args *a, const uint32_t *bits,
                               const float *rowscale, uint16_t *plane, uint16_t *mag) {
    size_t rows = a->rows, r = a->r, ld = a->ld, words = r / 32;
    if (a->by_rows) {
        OMP("omp parallel for schedule(static) if (rows * r >= PARALLEL_MIN_ELEMS)")
        for (size_t i = 0; i < rows; i++) {
            uint16_t m = br_half_from_float(rowscale[i] * a->scale), *out = plane + i * ld;
            for (size_t k = 0; k < r; k++) {
                uint32_t bit = bits[i * words + k / 32] >> (k % 32) & 1u;
                out[k] = bit ? m : (uint16_t)(m ^ 0x8000u);
            }
        }
        return;
    }
    for (size_t i = 0; i < rows; i++)
        mag[i] = br_half_from_float(rowscale[i] * a->scale);
    OMP("omp parallel for schedule(static) if (rows * r >= PARALLEL_MIN_ELEMS)")
    for (size_t k = 0; k < r; k++) {
        uint16_t *out = plane + k * ld;
        for (size_t i = 0; i < rows; i++) {
            uint32_t bit = bits[i * words + k / 32] >> (k % 32) & 1u;
            out[i] = bit ? mag[i] : (uint16_t)(mag[i] ^ 0x8000u); /* −x: the sign bit */
        }
        memset(out + rows, 0, (ld - rows) * sizeof *out);
    }
}

/* One EXPAND_SCALED op, every path. */
static br_status expand_scaled(br_ctx *ctx, const br_expand_scaled_args *a) {
    const uint32_t *bits = br_ptr(a->bits);      /* [rows][r/32] per path */
    const float *rowscale = br_ptr(a->rowscale); /* [rows] per path */
    uint16_t *plane = br_ptr(a->plane);          /* [rows][ld] by rows, else [paths·r][ld] */
    /* path p's plane: columns p·r.. by rows, else rows p·r.. */
    size_t plane_stride = a->by_rows ? a->r : a->r * a->ld;
    uint16_t *mag = NULL;
    if (!a->by_rows && !(mag = malloc(a->rows * sizeof *mag)))
        return br_fail(ctx, BR_E_NOMEM, "expand_scaled: out of host memory (%zu rows)", a->rows);
    for (size_t p = 0; p < a->paths; p++)
        expand_scaled_path(a, bits + p * a->bits_stride, rowscale + p * a->scale_stride,
                           plane + p * plane_stride, mag);
    free(mag);
    return BR_OK;
}

br_status br_cpu_expand_scaled(br_ctx *ctx, const br_op *op) {
    ctx->stats.launches++;
    return expand_scaled(ctx, &op->u.expand_scaled);
}

/* ---------------------------------------------------------------- sign_rowdot */

/* Σ_k s(k)·m[k] over one row of r (a multiple of 32): lane l sums k ≡ l (mod 32)
 * in increasing k from +0, then the halving tree of layer_ops.h. Word by word, the
 * 32 lanes side by side (vectorizable: each lane keeps its own order); s = −1 flips
 * the sign bit of m[k], exactly as −m[k]. */
static float row_sign_dot(const float *m, const uint32_t *bits, size_t r) {
    float lane[32];
    for (int l = 0; l < 32; l++)
        lane[l] = 0.0f;
    for (size_t w = 0; w < r / 32; w++) {
        uint32_t word = bits[w];
        const float *x = m + 32 * w;
        for (unsigned l = 0; l < 32; l++) {
            uint32_t u;
            float v;
            memcpy(&u, &x[l], sizeof u);
            u ^= (~word >> l & 1u) << 31;
            memcpy(&v, &u, sizeof v);
            lane[l] = lane[l] + v;
        }
    }
    for (int s = 16; s >= 1; s >>= 1)
        for (int t = 0; t < s; t++)
            lane[t] = lane[t] + lane[t + s];
    return lane[0];
}

/* ‖g‖ of one gradient row of r (a multiple of 32), as layer_ops.h's rownorm: lane l
 * sums fmaf(g, g, lane) over k ≡ l (mod 32) in increasing k from +0, then the
 * halving tree, then sqrtf (correctly rounded, as the GPU's). */
static float row_norm(const float *g, size_t r) {
    float lane[32];
    for (int l = 0; l < 32; l++)
        lane[l] = 0.0f;
    for (size_t w = 0; w < r / 32; w++)
        for (unsigned l = 0; l < 32; l++)
            lane[l] = fmaf(g[32 * w + l], g[32 * w + l], lane[l]);
    for (int s = 16; s >= 1; s >>= 1)
        for (int t = 0; t < s; t++)
            lane[t] = lane[t] + lane[t + s];
    return sqrtf(lane[0]);
}

/* One path: mat points at its first column of row 0 (row stride ldm). */
static void sign_rowdot_path(const br_sign_rowdot_args *a, const float *mat, const uint32_t *bits,
                             const float *rowscale, float *grad, float *dsum, float *rownorm) {
    size_t rows = a->rows, r = a->r, words = r / 32;
    OMP("omp parallel for schedule(static) if (rows * r >= PARALLEL_MIN_ELEMS)")
    for (size_t i = 0; i < rows; i++) {
        const float *m = mat + i * a->ldm;
        if (grad) {
            float h = rowscale[i], *g = grad + i * r;
            if (a->accumulate)
                for (size_t k = 0; k < r; k++)
                    g[k] = g[k] + h * m[k];
            else
                for (size_t k = 0; k < r; k++)
                    g[k] = h * m[k];
            if (rownorm) rownorm[i] = row_norm(g, r);
        }
        if (dsum) {
            float total = row_sign_dot(m, bits + i * words, r);
            dsum[i] = a->accumulate ? dsum[i] + total : total;
        }
    }
}

br_status br_cpu_sign_rowdot(br_ctx *ctx, const br_op *op) {
    const br_sign_rowdot_args *a = &op->u.sign_rowdot;
    const float *mat = br_ptr(a->mat);                                /* [rows][ldm] */
    const uint32_t *bits = a->bits ? br_ptr(a->bits) : NULL;          /* [rows][r/32] per path */
    const float *rowscale = a->rowscale ? br_ptr(a->rowscale) : NULL; /* [rows] per path */
    float *grad = a->grad ? br_ptr(a->grad) : NULL;                   /* [rows][r] per path */
    float *dsum = a->dsum ? br_ptr(a->dsum) : NULL;                   /* [rows] per path */
    float *rownorm = a->rownorm ? br_ptr(a->rownorm) : NULL;          /* [rows] per path */
    ctx->stats.launches++;
    for (size_t p = 0; p < a->paths; p++) /* NULL stays NULL: no arithmetic on it */
        sign_rowdot_path(a, mat + a->col0 + p * a->r, bits ? bits + p * a->bits_stride : NULL,
                         rowscale ? rowscale + p * a->scale_stride : NULL,
                         grad ? grad + p * a->grad_stride : NULL,
                         dsum ? dsum + p * a->dsum_stride : NULL,
                         rownorm ? rownorm + p * a->rownorm_stride : NULL);
    return BR_OK;
}

/* ---------------------------------------------------------------- cvt_both */

/* A tile of src handled together: COL_BLOCK columns (the values a token gives them
 * share cache lines) by ROW_TILE tokens (each transposed row gets ROW_TILE
 * consecutive halves per write, not one). */
#define COL_BLOCK 32
#define ROW_TILE 16

br_status br_cpu_cvt_both(br_ctx *ctx, const br_op *op) {
    const br_cvt_both_args *a = &op->u.cvt_both;
    const float *src = br_ptr(a->src);                    /* [m][k] */
    const float *col = a->col ? br_ptr(a->col) : NULL;    /* [k] */
    uint16_t *dst = a->dst ? br_ptr(a->dst) : NULL;       /* [br_pad_rows(m)][ld] */
    uint16_t *dst_t = a->dst_t ? br_ptr(a->dst_t) : NULL; /* [br_pad_rows(k)][tpad] */
    size_t m = a->m, k = a->k, ld = a->ld, tpad = br_pad_tokens(m), kpad = br_pad_rows(k);
    size_t nblocks = (k + COL_BLOCK - 1) / COL_BLOCK;
    ctx->stats.launches++;
    OMP("omp parallel for schedule(static) if (m * k >= PARALLEL_MIN_ELEMS)")
    for (size_t b = 0; b < nblocks; b++) {
        size_t c0 = b * COL_BLOCK, nc = c0 + COL_BLOCK < k ? COL_BLOCK : k - c0;
        float v[COL_BLOCK], colv[COL_BLOCK];
        uint16_t h[ROW_TILE][COL_BLOCK];
        for (size_t c = 0; col && c < nc; c++) { /* col[c0 + c], in groups or not */
            size_t i = c0 + c;
            colv[c] = col[a->col_group ? i / a->col_group * a->col_stride + i % a->col_group : i];
        }
        for (size_t t0 = 0; t0 < m; t0 += ROW_TILE) {
            size_t nt = t0 + ROW_TILE < m ? ROW_TILE : m - t0;
            for (size_t u = 0; u < nt; u++) {
                const float *s = src + (t0 + u) * k + c0;
                /* f16((x·col)·scale), each product rounded, as br_cvt_pad and br_cvt_t */
                for (size_t c = 0; c < nc; c++)
                    v[c] = (col ? s[c] * colv[c] : s[c]) * a->scale;
                br_half_from_float_n(v, h[u], nc);
                if (dst) memcpy(dst + (t0 + u) * ld + c0, h[u], nc * sizeof *dst);
            }
            if (dst_t)
                for (size_t c = 0; c < nc; c++) {
                    uint16_t *out = dst_t + (c0 + c) * tpad + t0;
                    for (size_t u = 0; u < nt; u++)
                        out[u] = h[u][c];
                }
        }
        if (dst_t)
            for (size_t c = c0; c < c0 + nc; c++)
                memset(dst_t + c * tpad + m, 0, (tpad - m) * sizeof *dst_t);
    }
    if (dst) {
        for (size_t t = 0; t < m; t++)
            memset(dst + t * ld + k, 0, (ld - k) * sizeof *dst);
        memset(dst + m * ld, 0, (br_pad_rows(m) - m) * ld * sizeof *dst);
    }
    if (dst_t) memset(dst_t + k * tpad, 0, (kpad - k) * tpad * sizeof *dst_t);
    return BR_OK;
}
