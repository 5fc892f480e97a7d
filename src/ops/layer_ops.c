/* Front-ends of the reformulated layer's internal ops: expand_scaled, sign_rowdot,
 * cvt_both. Each checks every argument, then hands one descriptor to br_submit. */
#include "ops/layer_ops.h"

#include <stdint.h>

#include "ops/check.h"

/* Both orientations: the checks, then one descriptor. by_rows: plane [rows][ld]
 * with (rows − 1)·ld + r elements (ld ≥ r); else plane_t [r][ld] (ld ≥ rows). */
static br_status expand_scaled(br_ctx *ctx, const char *fn, const br_buf *bits, size_t rows,
                               size_t r, const br_buf *rowscale, float scale, br_buf *plane,
                               size_t ld, int by_rows) {
    BR_TRY(br_check_ctx(ctx));
    BR_TRY(br_check_dim(ctx, fn, "rows", rows));
    BR_TRY(br_check_dim(ctx, fn, "r", r));
    if (r % 32) return br_fail(ctx, BR_E_SHAPE, "%s: r = %zu is not a multiple of 32", fn, r);
    size_t need = by_rows ? r : rows;
    if (ld < need || ld % 8)
        return br_fail(ctx, BR_E_SHAPE, "%s: ld = %zu must be ≥ %s = %zu and a multiple of 8", fn,
                       ld, by_rows ? "r" : "rows", need);
    size_t n_bits, n_plane;
    BR_TRY(br_check_mul(ctx, fn, "rows·r/32", rows, r / 32, &n_bits));
    if (by_rows) {
        BR_TRY(br_check_mul(ctx, fn, "(rows−1)·ld", rows - 1, ld, &n_plane));
        if (n_plane > SIZE_MAX - r)
            return br_fail(ctx, BR_E_SIZE, "%s: (rows−1)·ld + r overflows", fn);
        n_plane += r;
    } else {
        BR_TRY(br_check_mul(ctx, fn, "r·ld", r, ld, &n_plane));
    }
    BR_TRY(br_check_finite(ctx, fn, "scale", scale));
    BR_TRY(br_check_buf(ctx, fn, "bits", bits, BR_U32, n_bits));
    BR_TRY(br_check_buf(ctx, fn, "rowscale", rowscale, BR_F32, rows));
    BR_TRY(br_check_buf(ctx, fn, by_rows ? "plane" : "plane_t", plane, BR_F16, n_plane));
    br_op op = {.kind = BR_OP_EXPAND_SCALED};
    op.u.expand_scaled = (br_expand_scaled_args){.bits = bits,
                                                 .rowscale = rowscale,
                                                 .plane = plane,
                                                 .rows = rows,
                                                 .r = r,
                                                 .ld = ld,
                                                 .scale = scale,
                                                 .by_rows = by_rows};
    return br_submit(ctx, &op, 0);
}

br_status br_expand_scaled(br_ctx *ctx, const br_buf *bits, size_t rows, size_t r,
                           const br_buf *rowscale, float scale, br_buf *plane_t, size_t ld) {
    return expand_scaled(ctx, "br_expand_scaled", bits, rows, r, rowscale, scale, plane_t, ld, 0);
}

br_status br_expand_scaled_rows(br_ctx *ctx, const br_buf *bits, size_t rows, size_t r,
                                const br_buf *rowscale, float scale, br_buf *plane, size_t ld) {
    return expand_scaled(ctx, "br_expand_scaled_rows", bits, rows, r, rowscale, scale, plane, ld,
                         1);
}

br_status br_sign_rowdot(br_ctx *ctx, const br_buf *mat, size_t ldm, size_t col0,
                         const br_buf *bits, const br_buf *rowscale, br_buf *grad, br_buf *dsum,
                         size_t rows, size_t r, int accumulate) {
    static const char fn[] = "br_sign_rowdot";
    BR_TRY(br_check_ctx(ctx));
    if (!grad && !dsum) return br_fail(ctx, BR_E_ARG, "%s: grad and dsum are both NULL", fn);
    BR_TRY(br_check_dim(ctx, fn, "rows", rows));
    BR_TRY(br_check_dim(ctx, fn, "r", r));
    if (r % 32) return br_fail(ctx, BR_E_SHAPE, "%s: r = %zu is not a multiple of 32", fn, r);
    BR_TRY(br_check_dim(ctx, fn, "ldm", ldm));
    if (col0 > ldm || r > ldm - col0)
        return br_fail(ctx, BR_E_SHAPE, "%s: columns [%zu, %zu+%zu) exceed ldm = %zu", fn, col0,
                       col0, r, ldm);
    size_t n_mat, n_grad, n_bits;
    BR_TRY(br_check_mul(ctx, fn, "rows·ldm", rows, ldm, &n_mat));
    BR_TRY(br_check_mul(ctx, fn, "rows·r", rows, r, &n_grad));
    n_bits = n_grad / 32;
    BR_TRY(br_check_buf(ctx, fn, "mat", mat, BR_F32, n_mat));
    if (dsum) {
        BR_TRY(br_check_buf(ctx, fn, "bits", bits, BR_U32, n_bits));
        BR_TRY(br_check_buf(ctx, fn, "dsum", dsum, BR_F32, rows));
    } else {
        BR_TRY(br_check_opt_buf(ctx, fn, "bits", bits, BR_U32, n_bits));
    }
    if (grad) {
        BR_TRY(br_check_buf(ctx, fn, "rowscale", rowscale, BR_F32, rows));
        BR_TRY(br_check_buf(ctx, fn, "grad", grad, BR_F32, n_grad));
    } else {
        BR_TRY(br_check_opt_buf(ctx, fn, "rowscale", rowscale, BR_F32, rows));
    }
    /* one thread reads an input element, another may write an output there */
    BR_TRY(br_check_apart(ctx, fn, "grad", grad, n_grad, "mat", mat, n_mat));
    BR_TRY(br_check_apart(ctx, fn, "grad", grad, n_grad, "rowscale", rowscale, rows));
    BR_TRY(br_check_apart(ctx, fn, "grad", grad, n_grad, "bits", bits, n_bits));
    BR_TRY(br_check_apart(ctx, fn, "dsum", dsum, rows, "mat", mat, n_mat));
    BR_TRY(br_check_apart(ctx, fn, "dsum", dsum, rows, "rowscale", rowscale, rows));
    BR_TRY(br_check_apart(ctx, fn, "dsum", dsum, rows, "bits", bits, n_bits));
    BR_TRY(br_check_apart(ctx, fn, "dsum", dsum, rows, "grad", grad, n_grad));
    br_op op = {.kind = BR_OP_SIGN_ROWDOT};
    op.u.sign_rowdot = (br_sign_rowdot_args){.mat = mat,
                                             .bits = dsum ? bits : NULL,
                                             .rowscale = grad ? rowscale : NULL,
                                             .grad = grad,
                                             .dsum = dsum,
                                             .rows = rows,
                                             .r = r,
                                             .ldm = ldm,
                                             .col0 = col0,
                                             .accumulate = accumulate != 0};
    return br_submit(ctx, &op, 0);
}

br_status br_cvt_both(br_ctx *ctx, const br_buf *src, const br_buf *col, br_buf *dst, br_buf *dst_t,
                      size_t m, size_t k, size_t ld, float scale) {
    static const char fn[] = "br_cvt_both";
    BR_TRY(br_check_ctx(ctx));
    if (!dst && !dst_t) return br_fail(ctx, BR_E_ARG, "%s: dst and dst_t are both NULL", fn);
    BR_TRY(br_check_dim(ctx, fn, "m", m));
    BR_TRY(br_check_dim(ctx, fn, "k", k));
    if (ld < k) return br_fail(ctx, BR_E_SHAPE, "%s: ld = %zu is less than k = %zu", fn, ld, k);
    size_t n_src, n_dst, n_dst_t;
    BR_TRY(br_check_mul(ctx, fn, "m·k", m, k, &n_src));
    BR_TRY(br_check_mul(ctx, fn, "br_pad_rows(m)·ld", br_pad_rows(m), ld, &n_dst));
    BR_TRY(br_check_mul(ctx, fn, "br_pad_rows(k)·br_pad_tokens(m)", br_pad_rows(k),
                        br_pad_tokens(m), &n_dst_t));
    BR_TRY(br_check_finite(ctx, fn, "scale", scale));
    BR_TRY(br_check_buf(ctx, fn, "src", src, BR_F32, n_src));
    BR_TRY(br_check_opt_buf(ctx, fn, "col", col, BR_F32, k));
    BR_TRY(br_check_opt_buf(ctx, fn, "dst", dst, BR_F16, n_dst));
    BR_TRY(br_check_opt_buf(ctx, fn, "dst_t", dst_t, BR_F16, n_dst_t));
    BR_TRY(br_check_apart(ctx, fn, "dst", dst, n_dst, "dst_t", dst_t, n_dst_t));
    br_op op = {.kind = BR_OP_CVT_BOTH};
    op.u.cvt_both = (br_cvt_both_args){.src = src,
                                       .col = col,
                                       .dst = dst,
                                       .dst_t = dst_t,
                                       .m = m,
                                       .k = k,
                                       .ld = ld,
                                       .scale = scale};
    return br_submit(ctx, &op, 0);
}
