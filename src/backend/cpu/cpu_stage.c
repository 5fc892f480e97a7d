/* Staging on the CPU: f32 → f16 activation operands and the bitmap → ±1 plane
 * expansion. Every element is computed on its own (one or two f32 products, then
 * one rounding to f16), so the result is the same on any number of threads and
 * bit-identical to the CUDA kernels. */
#include <string.h>

#include "backend/cpu/cpu_ops.h"

#define F16_PLUS_ONE 0x3C00u
#define F16_MINUS_ONE 0xBC00u

/* The staged value of one element: f16((x·col)·scale), each product rounded
 * to f32 (the build has no contraction); without a column factor f16(x·scale). */
static inline uint16_t stage_one(float x, const float *col, size_t c, float scale) {
    if (!col) return br_half_from_float(x * scale);
    float xc = x * col[c];
    return br_half_from_float(xc * scale);
}

/* dst[row][c] = stage(src[row][col0 + c]) for row < m, c < k, src rows ld_src apart;
 * rows m..br_pad_rows(m)−1 of dst zero. dst [br_pad_rows(m)][k]. */
static void stage_rows(const float *src, size_t ld_src, size_t col0, const float *col,
                       uint16_t *dst, size_t m, size_t k, float scale) {
    OMP("omp parallel for schedule(static) if (m * k >= PARALLEL_MIN_ELEMS)")
    for (size_t row = 0; row < m; row++) {
        const float *s = src + row * ld_src + col0;
        uint16_t *d = dst + row * k;
        for (size_t c = 0; c < k; c++)
            d[c] = stage_one(s[c], col, c, scale);
    }
    size_t mpad = br_pad_rows(m);
    memset(dst + m * k, 0, (mpad - m) * k * sizeof *dst);
}

br_status br_cpu_cvt(br_ctx *ctx, const br_op *op) {
    const br_cvt_args *a = &op->u.cvt;
    ctx->stats.launches++;
    stage_rows(br_ptr(a->src), a->k, 0, br_ptr(a->col), br_ptr(a->dst), a->m, a->k, a->scale);
    return BR_OK;
}

br_status br_cpu_cvt_cols(br_ctx *ctx, const br_op *op) {
    const br_cvt_cols_args *a = &op->u.cvt_cols;
    ctx->stats.launches++;
    stage_rows(br_ptr(a->src), a->ld_src, a->col0, NULL, br_ptr(a->dst), a->m, a->k, a->scale);
    return BR_OK;
}

/* Rows of the transposed output handled together: the 32 source values a token
 * contributes to them share cache lines. */
#define T_BLOCK 32

br_status br_cpu_cvt_t(br_ctx *ctx, const br_op *op) {
    const br_cvt_t_args *a = &op->u.cvt_t;
    const float *src = br_ptr(a->src); /* [ntok][k] */
    const float *col = br_ptr(a->col); /* [k] */
    uint16_t *dst = br_ptr(a->dst);    /* [br_pad_rows(k)][tpad] */
    size_t ntok = a->ntok, k = a->k, tpad = br_pad_tokens(ntok), kpad = br_pad_rows(k);
    size_t nblocks = (k + T_BLOCK - 1) / T_BLOCK;
    ctx->stats.launches++;
    OMP("omp parallel for schedule(static) if (ntok * k >= PARALLEL_MIN_ELEMS)")
    for (size_t b = 0; b < nblocks; b++) {
        size_t r0 = b * T_BLOCK, r1 = r0 + T_BLOCK < k ? r0 + T_BLOCK : k;
        for (size_t t = 0; t < ntok; t++) {
            const float *s = src + t * k;
            for (size_t row = r0; row < r1; row++)
                dst[row * tpad + t] = stage_one(s[row], col, row, a->scale);
        }
        for (size_t row = r0; row < r1; row++)
            memset(dst + row * tpad + ntok, 0, (tpad - ntok) * sizeof *dst);
    }
    memset(dst + k * tpad, 0, (kpad - k) * tpad * sizeof *dst);
    return BR_OK;
}

br_status br_cpu_expand(br_ctx *ctx, const br_op *op) {
    const br_expand_args *a = &op->u.expand;
    const uint32_t *bits = br_ptr(a->bits); /* [rows][words] */
    uint16_t *plane = br_ptr(a->plane);     /* [rows][r] */
    uint16_t *plane_t = br_ptr(a->plane_t); /* [r][rows] */
    size_t rows = a->rows, r = a->r, words = (r + 31) / 32;
    ctx->stats.launches++;
    OMP("omp parallel for schedule(static) if (rows * r >= PARALLEL_MIN_ELEMS)")
    for (size_t row = 0; row < rows; row++) {
        const uint32_t *w = bits + row * words;
        for (size_t j = 0; j < r; j++) {
            uint16_t v = (w[j / 32] >> (j % 32)) & 1u ? F16_PLUS_ONE : F16_MINUS_ONE;
            if (plane) plane[row * r + j] = v;
            if (plane_t) plane_t[j * rows + row] = v;
        }
    }
    return BR_OK;
}
