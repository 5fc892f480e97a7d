/* Internal ops of the reformulated BLR layer (front-ends in layer_ops.c): the
 * scaled, transposed sign plane of the dense GEMMs, the sign gradients with the
 * scale gradient from one GEMM result, and staging with its transpose from one
 * read. Not in the public header: src/blr is their user. Every op is bit-identical
 * across backends; the order of every sum is written below. */
#ifndef BR_OPS_LAYER_OPS_H
#define BR_OPS_LAYER_OPS_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A sign bitmap as a scaled f16 plane, transposed:
 *     plane_t[k][i] = +f16(rowscale[i]·scale) where bit (i, k) is 1,
 *                     −f16(rowscale[i]·scale) where it is 0        (i < rows, k < r)
 *     plane_t[k][i] = +0                                           (rows ≤ i < ld)
 * The f32 product is rounded once to f16 (round to nearest even, subnormals kept);
 * the sign is then applied exactly (the f16 sign bit flipped, NaN too). bits u32
 * [rows][r/32] (bit k%32 of word k/32 of row i is entry (i, k)); rowscale f32
 * [rows]; plane_t f16 [r][ld] (a view: path p writes rows p·r.. of a [P·r][ld]
 * plane). r a multiple of 32, ld ≥ rows, ld a multiple of 8, scale finite. */
br_status br_expand_scaled(br_ctx *ctx, const br_buf *bits, size_t rows, size_t r,
                           const br_buf *rowscale, float scale, br_buf *plane_t, size_t ld);

/* The same scaled signs in the bitmap's own orientation (the plane operand of a
 * GEMM whose K is the rank):
 *     plane[i][k] = ±f16(rowscale[i]·scale), as br_expand_scaled   (i < rows, k < r)
 * at row stride ld; nothing else is written, so plane may be a view from column
 * p·r of a [rows][P·r] plane (path p's columns). plane f16 with (rows − 1)·ld + r
 * elements; r a multiple of 32, ld ≥ r, ld a multiple of 8, scale finite. */
br_status br_expand_scaled_rows(br_ctx *ctx, const br_buf *bits, size_t rows, size_t r,
                                const br_buf *rowscale, float scale, br_buf *plane, size_t ld);

/* Sign gradients and the scale gradient of rows × r signs from one GEMM result M
 * (columns col0..col0+r−1 of mat f32 [rows][ldm]), s(i, k) = ±1 from bits:
 *     grad[i][k]  = fl(rowscale[i]·M[i][k])      (accumulate: grad[i][k] + that)
 *     dsum[i]     = total_i                      (accumulate: dsum[i] + total_i)
 *     total_i     = Σ_k s(i, k)·M[i][k], in this order (a CUDA warp's): 32 lanes,
 *                   lane l sums k = l, l+32, l+64, ... in increasing k from +0
 *                   (acc = acc + s·M, the sign flip exact); then the lanes combine
 *                   by a halving tree, for s = 16, 8, 4, 2, 1: lane[t] = lane[t] +
 *                   lane[t + s] for t < s; total_i = lane[0].
 * bits u32 [rows][r/32], rowscale f32 [rows], grad f32 [rows][r], dsum f32 [rows].
 * grad or dsum may be NULL, not both; bits may be NULL without dsum, rowscale
 * without grad. r a multiple of 32, col0 + r ≤ ldm. grad and dsum must not share
 * memory with mat, bits, rowscale or each other (BR_E_ARG). */
br_status br_sign_rowdot(br_ctx *ctx, const br_buf *mat, size_t ldm, size_t col0,
                         const br_buf *bits, const br_buf *rowscale, br_buf *grad, br_buf *dsum,
                         size_t rows, size_t r, int accumulate);

/* The three ops above for `paths` paths in one op (one kernel launch where the
 * backend launches kernels): every bit as the `paths` single-path calls on views
 * would write it. Path p (< paths) reads
 *     bits     from element p·bits_stride  (u32 [rows][r/32])
 *     rowscale from element p·scale_stride (f32 [rows])
 * and writes
 *     br_expand_scaled_paths:      rows p·r..p·r+r−1 of plane_t f16 [paths·r][ld]
 *     br_expand_scaled_rows_paths: columns p·r..p·r+r−1 of plane f16 [rows][ld],
 *                                  (rows − 1)·ld + paths·r elements, ld ≥ paths·r
 *     br_sign_rowdot_paths:        grad from p·grad_stride (f32 [rows][r]) and dsum
 *                                  from p·dsum_stride (f32 [rows]) out of columns
 *                                  col0 + p·r..col0 + p·r + r−1 of mat (col0 + paths·r
 *                                  ≤ ldm)
 * Each buffer holds (paths − 1)·stride + one path's elements; input strides may be
 * anything (paths may share inputs), output strides are at least one path's
 * elements (grad_stride ≥ rows·r, dsum_stride ≥ rows: BR_E_SHAPE otherwise) so the
 * paths write apart; "apart" in br_sign_rowdot is checked on those whole spans
 * (grad and dsum whose paths interleave are refused though no element is shared).
 * Strides are ignored with paths = 1 and for NULL buffers. The single-path ops are
 * these with paths = 1. */
br_status br_expand_scaled_paths(br_ctx *ctx, const br_buf *bits, size_t bits_stride, size_t rows,
                                 size_t r, const br_buf *rowscale, size_t scale_stride, float scale,
                                 br_buf *plane_t, size_t ld, size_t paths);
br_status br_expand_scaled_rows_paths(br_ctx *ctx, const br_buf *bits, size_t bits_stride,
                                      size_t rows, size_t r, const br_buf *rowscale,
                                      size_t scale_stride, float scale, br_buf *plane, size_t ld,
                                      size_t paths);
br_status br_sign_rowdot_paths(br_ctx *ctx, const br_buf *mat, size_t ldm, size_t col0,
                               const br_buf *bits, size_t bits_stride, const br_buf *rowscale,
                               size_t scale_stride, br_buf *grad, size_t grad_stride, br_buf *dsum,
                               size_t dsum_stride, size_t rows, size_t r, size_t paths,
                               int accumulate);

/* One expand of br_expand_scaled2: the arguments of br_expand_scaled_rows_paths
 * (by_rows 1) or br_expand_scaled_paths (by_rows 0), plane being plane or plane_t. */
typedef struct br_expand_job {
    const br_buf *bits;
    size_t bits_stride, rows, r;
    const br_buf *rowscale;
    size_t scale_stride;
    float scale;
    br_buf *plane;
    size_t ld, paths;
    int by_rows;
} br_expand_job;

/* Two expands as one unit of two EXPAND_SCALED ops (ops/op.h; one kernel launch on
 * CUDA, its fusion table's expand_scaled2),
 * every bit as the two calls job[0], job[1] write them (the order does not matter:
 * neither reads what the other writes). Each job is checked as its own call; then
 * each plane, as the whole span it may write ((rows − 1)·ld + paths·r elements by
 * rows, paths·r·ld transposed), must be apart from the other plane and from both
 * jobs' bits and rowscale (BR_E_ARG): the two may run at once. The layer's forward
 * expands W_V and Y_U with it, before the A GEMM. */
br_status br_expand_scaled2(br_ctx *ctx, const br_expand_job job[2]);

/* br_cvt_pad(src, col, dst, m, k, ld, scale) and br_cvt_t(src, col, dst_t, m, k,
 * scale) from one read of src, every bit as the two separate ops write it:
 *     dst[t][c]   = f16(fl(src[t][c]·col[c])·scale)  (without col f16(src·scale))
 *                   for t < m, c < k; +0 for k ≤ c < ld and rows m..br_pad_rows(m)−1
 *     dst_t[c][t] = the same value for c < k, t < m; +0 where t ≥ m or c ≥ k
 * src f32 [m][k]; col f32 [k] or NULL; dst f16 [br_pad_rows(m)][ld] (ld ≥ k);
 * dst_t f16 [br_pad_rows(k)][br_pad_tokens(m)]. Either output may be NULL, not
 * both; they must not share memory (BR_E_ARG). */
br_status br_cvt_both(br_ctx *ctx, const br_buf *src, const br_buf *col, br_buf *dst, br_buf *dst_t,
                      size_t m, size_t k, size_t ld, float scale);
/* br_cvt_both with col (required) stored in groups: col[c] is the element at
 * (c / col_group)·col_stride + c % col_group (the ℓ of every path read in place from
 * the layer's parameters: group r, stride one path's parameters). col_group must
 * divide k and col_stride ≥ col_group (BR_E_SHAPE); 0 for both: a plain col [k]. */
br_status br_cvt_both_grouped(br_ctx *ctx, const br_buf *src, const br_buf *col, size_t col_group,
                              size_t col_stride, br_buf *dst, br_buf *dst_t, size_t m, size_t k,
                              size_t ld, float scale);
/* br_colsum_fused with fuse->col and sum in groups as br_cvt_both_grouped's col: the
 * column sums of every path added in place into the layer's gradients (accumulate 0:
 * sum[c] = the total, 0 + its block partials in order, instead of sum[c] + it). */
br_status br_colsum_fused_grouped(br_ctx *ctx, const br_buf *a, const br_buf *b, br_buf *sum,
                                  size_t rows, size_t k, const br_fuse *fuse, size_t group,
                                  size_t stride, int accumulate);
/* br_mm feeding br_colsum_fused_grouped as one unit, MM then COLSUM_FUSED (the
 * layer's B and dℓ): every bit
 * of sum and fuse->dst as
 *     br_mm(ctx, act, plane, b, g)
 *     br_colsum_fused_grouped(ctx, a, b, sum, g.m, g.n, fuse, group, stride, accumulate)
 * write them — from the GEMM's epilogue where the backend can, so the f32 product B
 * need not go through memory (no backend does so today): b f32 [m][n] is a
 * workspace, its contents after the unit unspecified. Every check of those two calls, and BR_E_ARG for what the fused form
 * lacks: fuse NULL or not BR_FUSE_CVT_B, fuse->dst_t set, g.colscale or g.c set;
 * BR_E_SHAPE for g.ocol not 0 or g.ldo neither 0 nor n (b whole, as br_mm_stage's out);
 * b, sum and fuse->dst apart from each other and from act, plane, a and fuse->col. */
br_status br_mm_colsum_grouped(br_ctx *ctx, const br_buf *act, const br_buf *plane, br_buf *b,
                               br_gemm g, const br_buf *a, br_buf *sum, const br_fuse *fuse,
                               size_t group, size_t stride, int accumulate);

/* br_mm with c (out = oscale·act·planeᵀ + beta·c, f32, as br_mm computes it),
 * staged for the GEMMs that read it next — the unit MM then CVT_BOTH — exactly as
 *     br_cvt_both(ctx, out, NULL, dst, dst_t, g.m, g.n, ld, scale)
 * would stage it (every bit, pads +0) — from the GEMM's epilogue where the backend
 * can, so the f32 product need not go through memory: out may be NULL (not kept).
 * g.c is required, f32 or f16 (an f16 c enters as its exact f32 value: the same bits
 * as the f32 c holding those values, from half the bytes); no colscale; out (and c)
 * whole [m][n] matrices (ldo = n, ocol = 0); dst f16 [br_pad_rows(m)][ld] (ld ≥ n), dst_t f16
 * [br_pad_rows(n)][br_pad_tokens(m)] or NULL (not written: the layer's GEMMs read dst
 * in either layout), both apart from each other and from act, plane, c and out. */
br_status br_mm_stage(br_ctx *ctx, const br_buf *act, const br_buf *plane, br_buf *out, br_gemm g,
                      br_buf *dst, br_buf *dst_t, size_t ld, float scale);

/* br_mm with both operands stored k-rows-first (the sign-gradient GEMMs, K = tokens,
 * read token-major as they are, without transposed copies):
 *     out[i][ocol + j] = (oscale · Σ_kk act[kk][i]·plane[kk][j]) · colscale[j]
 *                        + beta · c[i][ocol + j]            (i < m, j < n, kk < k)
 * act f16 [k][lda]: row kk at kk·lda, lda ≥ m (0: m), (k − 1)·lda + m elements;
 * plane f16 [k][ldp]: row kk at kk·ldp, ldp ≥ n (0: n), (k − 1)·ldp + n elements;
 * elements past m (act) and n (plane) of a row are never read. out, c, colscale,
 * oscale, beta, ocol and ldo as br_mm (c f32, out itself or apart from it); g.lda is
 * act's row stride; k a multiple of 32. Same values as br_mm on the transposed
 * operands within GEMM tolerance; on the CPU the same bits. */
br_status br_mm_tn(br_ctx *ctx, const br_buf *act, const br_buf *plane, size_t ldp, br_buf *out,
                   br_gemm g);

/* Two br_mm_tn products as one unit of two MM_TN ops, each within GEMM tolerance of br_mm_tn's (on the
 * CPU the same bits): the layer's M_U and N_V, which share k (the tokens), so that a
 * GPU runs both in one launch and the second's tiles fill the first's last wave. Each out must
 * be apart from the other out and from the other product's act and plane (the two
 * may run at once). Backends that cannot pair them run them one after the other. */
br_status br_mm_tn2(br_ctx *ctx, const br_buf *act1, const br_buf *plane1, size_t ldp1,
                    br_buf *out1, br_gemm g1, const br_buf *act2, const br_buf *plane2, size_t ldp2,
                    br_buf *out2, br_gemm g2);

/* One side of br_mm_tn2_rowdot: the plain product mat = br_mm_tn(act, plane, ldp, g)
 * (no colscale, no c; g.n = paths·r), then br_sign_rowdot_paths(mat, g.ldo (0: g.n),
 * g.ocol, bits, bits_stride, rowscale, scale_stride, grad, grad_stride, dsum,
 * dsum_stride, g.m, r, paths, accumulate) on it. And, where rownorm is not NULL
 * (it needs grad), the norm of every gradient row as written (after accumulate):
 *     rownorm[i] = sqrtf(q_i),  q_i = Σ_k grad[i][k]² in the order of total_i
 *                  (lane l: fmaf(g, g, lane) over k = l, l+32, ... from +0; then
 *                  the halving tree), sqrtf correctly rounded
 * at p·rownorm_stride for path p (f32 [rows] each; stride ≥ rows where paths > 1),
 * bit for bit the same on every backend. A gradient's squared norm is then Σ_i
 * rownorm[i]², from rows floats instead of rows·r (the optimizer's step). */
typedef struct br_tn_rowdot {
    const br_buf *act, *plane;
    size_t ldp;
    br_buf *mat;
    br_gemm g;
    const br_buf *bits, *rowscale;
    br_buf *grad, *dsum, *rownorm;
    size_t bits_stride, scale_stride, grad_stride, dsum_stride, rownorm_stride;
    size_t r, paths;
    int accumulate;
} br_tn_rowdot;

/* The layer's sign gradients as one unit, MM_TN, MM_TN, SIGN_ROWDOT, SIGN_ROWDOT:
 * br_mm_tn2 on the two sides' products, then each side's rowdot, as the side says. grad and dsum within GEMM tolerance of those
 * calls'; on the CPU the same bits. mat's contents are unspecified after, so that a
 * backend may form grad and dsum in the GEMM's epilogue without storing the product
 * (none does today: on CUDA that measured slower, docs/PERFORMANCE.md). Each side's
 * outputs must be apart from every buffer of the other side and from both products'
 * operands (piece by piece over the paths: interleaved paths are fine). */
br_status br_mm_tn2_rowdot(br_ctx *ctx, const br_tn_rowdot side[2]);

#ifdef __cplusplus
}
#endif
#endif
