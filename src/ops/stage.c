/* Front-ends of the staging ops: f32 → f16 activation operands (cvt, cvt_multi,
 * cvt_cols, the transposed cvt_t) and the bitmap → ±1 plane expansion. Each one
 * checks every argument, then hands one descriptor to br_submit. */
#include "ops/check.h"
#include "ops/op.h"

/* The checks of a staged f32 source [rows][k] and its scale; *n_src = rows·k. */
static br_status check_src_shape(br_ctx *ctx, const char *fn, const char *rows_name,
                                 const char *product_name, size_t rows, size_t k, float scale,
                                 size_t *n_src) {
    BR_TRY(br_check_dim(ctx, fn, rows_name, rows));
    BR_TRY(br_check_dim(ctx, fn, "k", k));
    BR_TRY(br_check_mul(ctx, fn, product_name, rows, k, n_src));
    return br_check_finite(ctx, fn, "scale", scale);
}

br_status br_cvt(br_ctx *ctx, const br_buf *src, const br_buf *col_f, br_buf *dst, size_t m,
                 size_t k, float scale) {
    static const char fn[] = "br_cvt";
    BR_TRY(br_check_ctx(ctx));
    size_t n_src, n_dst;
    BR_TRY(check_src_shape(ctx, fn, "m", "m·k", m, k, scale, &n_src));
    BR_TRY(br_check_mul(ctx, fn, "br_pad_rows(m)·k", br_pad_rows(m), k, &n_dst));
    BR_TRY(br_check_buf(ctx, fn, "src", src, BR_F32, n_src));
    BR_TRY(br_check_opt_buf(ctx, fn, "col_f", col_f, BR_F32, k));
    BR_TRY(br_check_buf(ctx, fn, "dst", dst, BR_F16, n_dst));
    br_op op = {.kind = BR_OP_CVT};
    op.u.cvt = (br_cvt_args){.src = src, .col = col_f, .dst = dst, .m = m, .k = k, .scale = scale};
    return br_submit(ctx, &op, 0);
}

br_status br_cvt_multi(br_ctx *ctx, const br_buf *src, size_t n_out, const br_buf *const cols[],
                       br_buf *const dsts[], size_t m, size_t k, float scale) {
    static const char fn[] = "br_cvt_multi";
    static const char *const col_names[4] = {"cols[0]", "cols[1]", "cols[2]", "cols[3]"};
    static const char *const dst_names[4] = {"dsts[0]", "dsts[1]", "dsts[2]", "dsts[3]"};
    BR_TRY(br_check_ctx(ctx));
    if (n_out < 1 || n_out > 4)
        return br_fail(ctx, BR_E_ARG, "br_cvt_multi: n_out is %zu, expected 1..4", n_out);
    if (!dsts) return br_fail(ctx, BR_E_ARG, "br_cvt_multi: dsts is NULL");
    size_t n_src, n_dst;
    BR_TRY(check_src_shape(ctx, fn, "m", "m·k", m, k, scale, &n_src));
    BR_TRY(br_check_mul(ctx, fn, "br_pad_rows(m)·k", br_pad_rows(m), k, &n_dst));
    BR_TRY(br_check_buf(ctx, fn, "src", src, BR_F32, n_src));
    /* n_out br_cvt of one source, as one unit (one launch on CUDA) */
    br_op ops[4];
    for (size_t i = 0; i < n_out; i++) {
        const br_buf *col = cols ? cols[i] : NULL;
        BR_TRY(br_check_opt_buf(ctx, fn, col_names[i], col, BR_F32, k));
        BR_TRY(br_check_buf(ctx, fn, dst_names[i], dsts[i], BR_F16, n_dst));
        /* one element of each output is written by one thread: outputs must not share it */
        for (size_t j = 0; j < i; j++)
            if (br_bufs_overlap(dsts[i], n_dst, dsts[j], n_dst))
                return br_fail(ctx, BR_E_ARG, "br_cvt_multi: %s overlaps %s", dst_names[i],
                               dst_names[j]);
        ops[i] = (br_op){.kind = BR_OP_CVT};
        ops[i].u.cvt =
            (br_cvt_args){.src = src, .col = col, .dst = dsts[i], .m = m, .k = k, .scale = scale};
    }
    return br_submit_unit(ctx, ops, n_out, "cvt_multi", 0, 0);
}

br_status br_cvt_cols(br_ctx *ctx, const br_buf *src, size_t ld_src, size_t col0, br_buf *dst,
                      size_t m, size_t k, float scale) {
    static const char fn[] = "br_cvt_cols";
    BR_TRY(br_check_ctx(ctx));
    size_t n_src, n_dst;
    BR_TRY(br_check_dim(ctx, fn, "m", m));
    BR_TRY(br_check_dim(ctx, fn, "k", k));
    BR_TRY(br_check_dim(ctx, fn, "ld_src", ld_src));
    if (col0 > ld_src || k > ld_src - col0)
        return br_fail(ctx, BR_E_SHAPE, "br_cvt_cols: columns [%zu, %zu+%zu) exceed ld_src = %zu",
                       col0, col0, k, ld_src);
    BR_TRY(br_check_mul(ctx, fn, "m·ld_src", m, ld_src, &n_src));
    BR_TRY(br_check_mul(ctx, fn, "br_pad_rows(m)·k", br_pad_rows(m), k, &n_dst));
    BR_TRY(br_check_finite(ctx, fn, "scale", scale));
    BR_TRY(br_check_buf(ctx, fn, "src", src, BR_F32, n_src));
    BR_TRY(br_check_buf(ctx, fn, "dst", dst, BR_F16, n_dst));
    br_op op = {.kind = BR_OP_CVT_COLS};
    op.u.cvt_cols = (br_cvt_cols_args){
        .src = src, .ld_src = ld_src, .col0 = col0, .dst = dst, .m = m, .k = k, .scale = scale};
    return br_submit(ctx, &op, 0);
}

br_status br_cvt_t(br_ctx *ctx, const br_buf *src, const br_buf *col_f, br_buf *dst, size_t ntok,
                   size_t k, float scale) {
    static const char fn[] = "br_cvt_t";
    BR_TRY(br_check_ctx(ctx));
    size_t n_src, n_dst;
    BR_TRY(check_src_shape(ctx, fn, "ntok", "ntok·k", ntok, k, scale, &n_src));
    BR_TRY(br_check_mul(ctx, fn, "br_pad_rows(k)·br_pad_tokens(ntok)", br_pad_rows(k),
                        br_pad_tokens(ntok), &n_dst));
    BR_TRY(br_check_buf(ctx, fn, "src", src, BR_F32, n_src));
    BR_TRY(br_check_opt_buf(ctx, fn, "col_f", col_f, BR_F32, k));
    BR_TRY(br_check_buf(ctx, fn, "dst", dst, BR_F16, n_dst));
    br_op op = {.kind = BR_OP_CVT_T};
    op.u.cvt_t =
        (br_cvt_t_args){.src = src, .col = col_f, .dst = dst, .ntok = ntok, .k = k, .scale = scale};
    return br_submit(ctx, &op, 0);
}

br_status br_expand(br_ctx *ctx, const br_buf *bits, size_t rows, size_t r, br_buf *plane,
                    br_buf *plane_t) {
    static const char fn[] = "br_expand";
    BR_TRY(br_check_ctx(ctx));
    if (!plane && !plane_t)
        return br_fail(ctx, BR_E_ARG, "br_expand: plane and plane_t are both NULL");
    BR_TRY(br_check_dim(ctx, fn, "rows", rows));
    BR_TRY(br_check_dim(ctx, fn, "r", r));
    size_t n_bits, n_plane;
    BR_TRY(br_check_mul(ctx, fn, "rows·ceil(r/32)", rows, (r + 31) / 32, &n_bits));
    BR_TRY(br_check_mul(ctx, fn, "rows·r", rows, r, &n_plane));
    BR_TRY(br_check_buf(ctx, fn, "bits", bits, BR_U32, n_bits));
    BR_TRY(br_check_opt_buf(ctx, fn, "plane", plane, BR_F16, n_plane));
    BR_TRY(br_check_opt_buf(ctx, fn, "plane_t", plane_t, BR_F16, n_plane));
    if (br_bufs_overlap(plane, n_plane, plane_t, n_plane))
        return br_fail(ctx, BR_E_ARG, "br_expand: plane and plane_t overlap");
    br_op op = {.kind = BR_OP_EXPAND};
    op.u.expand =
        (br_expand_args){.bits = bits, .rows = rows, .r = r, .plane = plane, .plane_t = plane_t};
    return br_submit(ctx, &op, 0);
}
