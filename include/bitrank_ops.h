/* bitrank_ops — the op-level API of bitrank: the lower level under the layer.
 *
 * The GEMMs, staging conversions, column reductions, elementwise ops, the small
 * dense linear, the optimizer ops and the composites built from them, each on a
 * context's buffers, checked and enqueued as bitrank.h's ops are (a status and a
 * message on bad input; br_ctx_sync waits). The BLR layer (bitrank.h) is made of
 * them; a trainer that drives its own layers, or a test of one kernel, uses them
 * directly. These contracts are narrower and change more often than bitrank.h's:
 * most users need only bitrank.h.
 */
#ifndef BITRANK_OPS_H
#define BITRANK_OPS_H

#include "bitrank.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ---------------------------------------------------------------- GEMM */

/* out[i][ocol + j] = (oscale · Σ_k act[i][k] · plane[j][k]) · colscale[j]
 *                    + beta · c[i][ocol + j]                  for i < m, j < n.
 * f16 products, f32 accumulation; the epilogue in f32, each product rounded (no
 * contraction); without colscale its factor is 1, without c its term is absent.
 * act: f16, row i at element i·lda (lda = 0 means k); (m−1)·lda + k elements must
 *   exist (rows past m are never read; no padding to br_pad_rows is needed), so act
 *   may be a view of a column block of a wider matrix.
 * plane: f16 [n][k].
 * out: f32 with row stride ldo (ldo = 0 means n), (m−1)·ldo + ocol + n elements;
 *   only rows < m and columns ocol..ocol+n−1 are written.
 * colscale: f32 [≥ n] or NULL; it must not overlap out.
 * c: f32 or NULL, the same layout as out (row stride ldo, columns ocol..), so
 *   (m−1)·ldo + ocol + n elements. c may be out itself (the same buffer offset: an
 *   in-place out = … + beta·out); any other overlap of c with out is BR_E_ARG.
 * Constraints: m, n ≥ 1; k a multiple of 32; lda ≥ k; ldo ≥ ocol + n; oscale and
 * beta finite. On CUDA the fast kernels need 16-byte aligned act rows (lda % 8 == 0
 * and an aligned base); other operands run a slower kernel with the same results
 * within tolerance. Fields left zero keep the plain product (beta is read only
 * with c). A split-K kernel may use workspace; its sum order is fixed (results do
 * not vary from run to run). */
typedef struct br_gemm {
    size_t m, n, k;
    size_t ldo;             /* output (and c) row stride in floats; 0 = n */
    size_t ocol;            /* first output column */
    float oscale;           /* output multiplier (0 is taken literally) */
    size_t lda;             /* act row stride in elements; 0 = k; ≥ k */
    const br_buf *colscale; /* f32 [≥ n] or NULL: per-column factor */
    const br_buf *c;        /* f32 or NULL: added as beta · c (same layout as out) */
    float beta;             /* used only with c (0 is taken literally) */
} br_gemm;
br_status br_mm(br_ctx *ctx, const br_buf *act, const br_buf *plane, br_buf *out, br_gemm g);

/* Where the ±1 plane of br_mm_bits comes from. */
typedef enum br_bits_layout {
    /* bits u32 [n][k/32]: plane[j][kk] = bit kk%32 of word kk/32 of row j */
    BR_BITS_ROWS = 0,
    /* bits u32 [k][ceil(n/32)]: plane[j][kk] = bit j%32 of word j/32 of row kk
     * (the plane is the bitmap's transpose) */
    BR_BITS_COLS = 1,
} br_bits_layout;
/* br_mm with the plane given as a sign bitmap, expanded to ±1 inside the GEMM (no
 * f16 plane in memory). Results equal br_mm on the expanded plane within GEMM
 * tolerance. Same constraints as br_mm. With the option bits_gemm=0, or on a backend
 * without a bitmap GEMM, the bitmap is expanded into a context-owned f16 plane and
 * br_mm runs on it. */
br_status br_mm_bits(br_ctx *ctx, const br_buf *act, const br_buf *bits, br_bits_layout layout,
                     br_buf *out, br_gemm g);

/* ---------------------------------------------------------------- staging */

/* dst[row][col] = f16(src[row][col] · col_f[col] · scale) for row < m, computed in
 * f32 left to right (without col_f: f16(src · scale)); rows m..br_pad_rows(m)−1 are
 * zero. src f32 [m][k]; col_f f32 [k] or NULL; dst f16 [br_pad_rows(m)][k]. */
br_status br_cvt(br_ctx *ctx, const br_buf *src, const br_buf *col_f, br_buf *dst, size_t m,
                 size_t k, float scale);
/* br_cvt of one src into n_out (1..4) outputs from one read: dsts[i] gets the
 * value br_cvt would write with cols[i] (an entry may be NULL: no column factor).
 * Purely a fusion of those n_out br_cvt calls (one launch on CUDA). */
br_status br_cvt_multi(br_ctx *ctx, const br_buf *src, size_t n_out, const br_buf *const cols[],
                       br_buf *const dsts[], size_t m, size_t k, float scale);
/* A column block of a wider matrix: dst[row][c] = f16(src[row][col0 + c] · scale),
 * src f32 [m][ld_src], c < k, col0 + k ≤ ld_src; dst f16 [br_pad_rows(m)][k],
 * pad rows zero. */
br_status br_cvt_cols(br_ctx *ctx, const br_buf *src, size_t ld_src, size_t col0, br_buf *dst,
                      size_t m, size_t k, float scale);
/* Transposed staging: dst[row][t] = the value br_cvt(src, col_f, scale) stages at
 * [t][row], for t < ntok, row < k; zero where t ≥ ntok or row ≥ k. src f32
 * [ntok][k]; dst f16 [br_pad_rows(k)][br_pad_tokens(ntok)]. Bit-exact. */
br_status br_cvt_t(br_ctx *ctx, const br_buf *src, const br_buf *col_f, br_buf *dst, size_t ntok,
                   size_t k, float scale);
/* Sign bitmap u32 [rows][ceil(r/32)] → f16 ±1 plane [rows][r] and/or its
 * transpose plane_t [r][rows] (either may be NULL, not both). */
br_status br_expand(br_ctx *ctx, const br_buf *bits, size_t rows, size_t r, br_buf *plane,
                    br_buf *plane_t);

/* ---------------------------------------------------------------- column reductions */

/* The term a column reduction sums. */
typedef enum br_colsum_term {
    BR_TERM_AB = 0,  /* a[row][c] · b[row][c]            acc = fmaf(a, b, acc) */
    BR_TERM_ABF = 1, /* a[row][c] · b[row][c] · f[row]   ab = a·b; acc = fmaf(ab, f, acc) */
    BR_TERM_A = 2,   /* a[row][c]                        acc = acc + a */
} br_colsum_term;

/* out[c] (+)= Σ_row term(row, c) for c < k. Deterministic block order: rows are
 * split in blocks of B = max(64, ceil(rows/256)) rows; each block is summed in
 * row order from 0, then the block partials are summed in block order from 0, and
 * that total is stored (accumulate = 0) or added to out[c] (accumulate = 1).
 * a, b f32 [rows][k] (b ignored for BR_TERM_A); f f32 [rows] (BR_TERM_ABF only);
 * out f32 [k]. Bit-exact across backends. */
br_status br_colsum(br_ctx *ctx, const br_buf *a, const br_buf *b, const br_buf *f,
                    br_colsum_term term, br_buf *out, size_t rows, size_t k, int accumulate);

/* The elementwise op a fused column reduction does on an operand it reads anyway. */
typedef enum br_fuse_kind {
    BR_FUSE_CVT_A = 0,   /* dst = br_cvt(a, col, scale): f16 [br_pad_rows(rows)][k] */
    BR_FUSE_CVT_B = 1,   /* dst = br_cvt(b, col, scale): f16 [br_pad_rows(rows)][k] */
    BR_FUSE_SCALE_B = 2, /* dst (+)= b ⊙ col (br_scale_acc of b): f32 [rows][k] */
} br_fuse_kind;
typedef struct br_fuse {
    br_fuse_kind kind;
    const br_buf *col; /* f32 [k] */
    br_buf *dst;
    float scale;    /* CVT_A/CVT_B: the staging scale */
    int accumulate; /* SCALE_B: 1 adds into dst, 0 overwrites */
    /* Optional transposed f16 operand for the sign-gradient GEMM,
     * [br_pad_rows(k)][br_pad_tokens(rows)], exactly what br_cvt_t would write:
     * CVT_A/CVT_B: br_cvt_t of the staged operand (same col and scale);
     * SCALE_B: br_cvt_t(a, col, t_scale). NULL: not written. */
    br_buf *dst_t;
    float t_scale;
} br_fuse;
/* sum[c] += Σ_row a[row][c]·b[row][c] (the BR_TERM_AB reduction, accumulating) and,
 * in the same pass, the elementwise op of `fuse`. Every output is bit-identical to
 * running br_colsum then the separate op (br_cvt / br_scale_acc / br_cvt_t). The
 * outputs sum, fuse->dst, fuse->dst_t must not share memory with each other or with
 * a, b, fuse->col (BR_E_ARG). */
br_status br_colsum_fused(br_ctx *ctx, const br_buf *a, const br_buf *b, br_buf *sum, size_t rows,
                          size_t k, const br_fuse *fuse);

/* ---------------------------------------------------------------- elementwise */

/* out[row][c] = a[row][c] · col[c]  (accumulate: out += …). a, out f32 [m][k]. */
br_status br_scale_acc(br_ctx *ctx, const br_buf *a, const br_buf *col, br_buf *out, size_t m,
                       size_t k, int accumulate);
/* out = fl(fl(a0 · col0) + fl(a1 · col1)) per element, no contraction: bit-identical
 * to br_scale_acc(a0, col0, overwrite) then br_scale_acc(a1, col1, accumulate). */
br_status br_scale_acc2(br_ctx *ctx, const br_buf *a0, const br_buf *col0, const br_buf *a1,
                        const br_buf *col1, br_buf *out, size_t m, size_t k);
/* dst[i] = f32(src[i]) for i < n; src f16, dst f32. */
br_status br_f16_to_f32(br_ctx *ctx, const br_buf *src, br_buf *dst, size_t n);
/* out[i] = a[i] + b[i] for i < n (f32; out may alias a or b). */
br_status br_add(br_ctx *ctx, const br_buf *a, const br_buf *b, br_buf *out, size_t n);
/* Per-head [q(hd); gate(hd)] rows ↔ q and gate. qg f32 [m][heads][2·hd]; q, gate f32
 * [m][heads·hd]. merge = 0: q, gate ← qg; merge = 1: qg ← q, gate. */
br_status br_split_qg(br_ctx *ctx, br_buf *qg, br_buf *q, br_buf *gate, size_t m, size_t heads,
                      size_t hd, int merge);

/* ---------------------------------------------------------------- small dense f32 linear */

typedef enum br_dense_impl {
    BR_DENSE_AUTO = 0,  /* the backend picks (same bits either way) */
    BR_DENSE_PLAIN = 1, /* one output per thread */
    BR_DENSE_TILED = 2, /* tiled through shared memory; dense_fwd needs r ≤ 48 */
} br_dense_impl;
/* out[i][o] (+)= Σ_j a[i][j]·w[o][j], j = 0..k−1 in order, acc = fmaf(a, w, acc)
 * from 0; then stored or added (accumulate). a [m][k], w [r][k], out [m][r], f32.
 * Plain and tiled give the same bits. out must not share memory with a or w (BR_E_ARG). */
br_status br_dense_fwd(br_ctx *ctx, const br_buf *a, const br_buf *w, br_buf *out, size_t m,
                       size_t k, size_t r, int accumulate, br_dense_impl impl);
/* dx[i][j] += Σ_o dy[i][o]·w[o][j], o = 0..r−1 in order, acc = fmaf(dy, w, acc)
 * from 0, then dx += acc. dy [m][r], w [r][k], dx [m][k], f32. dx must not share
 * memory with dy or w (BR_E_ARG). */
br_status br_dense_bwd(br_ctx *ctx, const br_buf *dy, const br_buf *w, br_buf *dx, size_t m,
                       size_t k, size_t r, br_dense_impl impl);

/* ---------------------------------------------------------------- optimizer ops */

/* Adam without weight decay, bias-corrected. For each i < n with mask[i] ≠ 0 (no
 * mask: all): g = grad[i]·grad_mul; m1 = β1·m1 + (1−β1)·g; m2 = β2·m2 + (1−β2)·g²;
 * st = lr · (m1/(1−β1^t)) / (sqrt(m2/(1−β2^t)) + eps); w −= st, or with a
 * relative floor ρ > 0: w −= st · max(|w|, ρ). Agrees across backends within
 * 1e-6 relative. */
typedef struct br_adam_hp {
    float lr, beta1, beta2, eps;
    uint32_t step;   /* t, 1-based */
    float grad_mul;  /* gradient multiplier (unscale, clip) */
    float rel_floor; /* br_adam: ρ (0 = plain steps); br_adam_cat reads it per element */
    /* Optional f32 [4] device buffer {lr, t, grad_mul, skip} read when the op runs
     * instead of the three host values (so a replayed graph sees each step's
     * schedule); skip ≠ 0 makes the op do nothing (a refused step: weights and
     * moments unchanged). */
    const br_buf *sched;
} br_adam_hp;
/* w, grad, m1, m2 f32 [n]; mask f32 [n] or NULL (0 = frozen entry). w, m1, m2 must
 * not share memory with each other, nor with grad, mask, rel_floor or hp->sched
 * (BR_E_ARG). */
br_status br_adam(br_ctx *ctx, br_buf *w, const br_buf *grad, br_buf *m1, br_buf *m2,
                  const br_buf *mask, size_t n, const br_adam_hp *hp);
/* br_adam over a concatenation of parameters in one launch: mask f32 [n] (0 =
 * frozen), rel_floor f32 [n] (per-element ρ, 0 = plain steps); hp->rel_floor unused. */
br_status br_adam_cat(br_ctx *ctx, br_buf *w, const br_buf *grad, br_buf *m1, br_buf *m2,
                      const br_buf *mask, const br_buf *rel_floor, size_t n, const br_adam_hp *hp);

/* Number of partial sums br_sumsq writes per parameter, and the lanes of each. */
#define BR_SUMSQ_PARTS 64
#define BR_SUMSQ_LANES 1024
/* Partial sums of squares of a[0..n) into out f32 [BR_SUMSQ_PARTS]; their sum is
 * Σ a². NaN and Inf propagate into the partials (so a caller can refuse a step).
 * Bit-exact across backends: element i goes to partial j = (i/1024) % 64, lane
 * i % 1024; each lane sums fmaf(x, x, lane) in index order from 0; then for s =
 * 512, 256, …, 1: lane[t] = lane[t] + lane[t+s] for t < s; the partial is lane[0]
 * (1024 lanes: a partial's lanes are one GPU block,
 * and more of them in flight keep few large parameters from being latency-bound). out
 * must not share memory with a (BR_E_ARG; likewise for br_sumsq_cat). */
br_status br_sumsq(br_ctx *ctx, const br_buf *a, size_t n, br_buf *out);
/* br_sumsq of np parameters of a concatenation: tab u32 [2·np] = (offset, length)
 * per parameter; out f32 [np][BR_SUMSQ_PARTS]. */
br_status br_sumsq_cat(br_ctx *ctx, const br_buf *a, const br_buf *tab, size_t np, br_buf *out);
/* Convenience: br_sumsq, wait, and sum the partials in double on the host. */
br_status br_sumsq_host(br_ctx *ctx, const br_buf *a, size_t n, double *out);

/* ---------------------------------------------------------------- composites */

/* Composites check all their arguments before issuing any op. Buffers that one of
 * their ops writes and a later one reads must not overlap (act16 and plane, xt and
 * dyt, acc and tmp: BR_E_ARG); scales must be non-zero with a finite reciprocal.
 *
 * A frozen dense linear: y[ntok][n] = (x · scale)·planeᵀ / scale, through the f16
 * staging buffer act16. plane f16 [n][k]; x f32 [ntok][k]; act16 f16
 * [br_pad_rows(ntok)][k]; y f32 [ntok][n]; k a multiple of 32. y may be x's own
 * buffer (x is staged before y is written). */
br_status br_plane_linear(br_ctx *ctx, const br_buf *plane, const br_buf *x, br_buf *act16,
                          br_buf *y, size_t ntok, size_t n, size_t k, float scale);
/* dw[m][k] = dy[ntok][m]ᵀ · x[ntok][k] (overwritten), the token axis as the GEMM's
 * K: xt f16 [br_pad_rows(k)][br_pad_tokens(ntok)] and dyt f16
 * [br_pad_rows(m)][br_pad_tokens(ntok)] are staging; dy is staged at gscale (a
 * power of two keeping gradients out of f16 subnormals) and divided back out. */
br_status br_weight_grad(br_ctx *ctx, const br_buf *x, const br_buf *dy, br_buf *xt, br_buf *dyt,
                         br_buf *dw, size_t ntok, size_t m, size_t k, float gscale);
/* acc[k][k] += xᵀ·x over x f32 [ntok][k] (the input Gram of a linear): xt f16
 * [br_pad_rows(k)][br_pad_tokens(ntok)] and tmp f32 [k][k] are scratch. */
br_status br_gram_acc(br_ctx *ctx, const br_buf *x, br_buf *xt, br_buf *acc, br_buf *tmp,
                      size_t ntok, size_t k);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif
