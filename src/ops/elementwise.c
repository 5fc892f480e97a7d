/* Front-ends of the elementwise ops: per-column scaling (scale_acc, the two-path
 * scale_acc2), f16 → f32, add, and the per-head q/gate split and merge. */
#include "ops/check.h"
#include "ops/op.h"

/* An elementwise output may be its input itself (element i reads only element i),
 * but not a shifted view of it: the result would depend on the order of the
 * elements. */
static br_status check_alias(br_ctx *ctx, const char *fn, const char *out_name, const br_buf *out,
                             const char *in_name, const br_buf *in, size_t n) {
    if (br_bufs_overlap(out, n, in, n) && br_ptr(out) != br_ptr(in))
        return br_fail(ctx, BR_E_ARG, "%s: %s overlaps %s at a different offset", fn, out_name,
                       in_name);
    return BR_OK;
}

/* m, k ≥ 1 and *n = m·k. */
static br_status check_rows_cols(br_ctx *ctx, const char *fn, size_t m, size_t k, size_t *n) {
    BR_TRY(br_check_dim(ctx, fn, "m", m));
    BR_TRY(br_check_dim(ctx, fn, "k", k));
    return br_check_mul(ctx, fn, "m·k", m, k, n);
}

br_status br_scale_acc(br_ctx *ctx, const br_buf *a, const br_buf *col, br_buf *out, size_t m,
                       size_t k, int accumulate) {
    static const char fn[] = "br_scale_acc";
    BR_TRY(br_check_ctx(ctx));
    size_t n;
    BR_TRY(check_rows_cols(ctx, fn, m, k, &n));
    BR_TRY(br_check_buf(ctx, fn, "a", a, BR_F32, n));
    BR_TRY(br_check_buf(ctx, fn, "col", col, BR_F32, k));
    BR_TRY(br_check_buf(ctx, fn, "out", out, BR_F32, n));
    BR_TRY(check_alias(ctx, fn, "out", out, "a", a, n));
    BR_TRY(br_check_apart(ctx, fn, "out", out, n, "col", col, k)); /* col is read by every row */
    br_op op = {.kind = BR_OP_SCALE_ACC};
    op.u.scale_acc = (br_scale_acc_args){
        .a = a, .col = col, .out = out, .m = m, .k = k, .accumulate = accumulate != 0};
    return br_submit(ctx, &op, 0);
}

br_status br_scale_acc2(br_ctx *ctx, const br_buf *a0, const br_buf *col0, const br_buf *a1,
                        const br_buf *col1, br_buf *out, size_t m, size_t k) {
    static const char fn[] = "br_scale_acc2";
    BR_TRY(br_check_ctx(ctx));
    size_t n;
    BR_TRY(check_rows_cols(ctx, fn, m, k, &n));
    BR_TRY(br_check_buf(ctx, fn, "a0", a0, BR_F32, n));
    BR_TRY(br_check_buf(ctx, fn, "col0", col0, BR_F32, k));
    BR_TRY(br_check_buf(ctx, fn, "a1", a1, BR_F32, n));
    BR_TRY(br_check_buf(ctx, fn, "col1", col1, BR_F32, k));
    BR_TRY(br_check_buf(ctx, fn, "out", out, BR_F32, n));
    BR_TRY(check_alias(ctx, fn, "out", out, "a0", a0, n));
    BR_TRY(check_alias(ctx, fn, "out", out, "a1", a1, n));
    BR_TRY(br_check_apart(ctx, fn, "out", out, n, "col0", col0, k));
    BR_TRY(br_check_apart(ctx, fn, "out", out, n, "col1", col1, k));
    br_op op = {.kind = BR_OP_SCALE_ACC2};
    op.u.scale_acc2 = (br_scale_acc2_args){
        .a0 = a0, .col0 = col0, .a1 = a1, .col1 = col1, .out = out, .m = m, .k = k};
    return br_submit(ctx, &op, 0);
}

br_status br_f16_to_f32(br_ctx *ctx, const br_buf *src, br_buf *dst, size_t n) {
    static const char fn[] = "br_f16_to_f32";
    BR_TRY(br_check_ctx(ctx));
    BR_TRY(br_check_dim(ctx, fn, "n", n));
    BR_TRY(br_check_buf(ctx, fn, "src", src, BR_F16, n));
    BR_TRY(br_check_buf(ctx, fn, "dst", dst, BR_F32, n));
    br_op op = {.kind = BR_OP_F16_TO_F32};
    op.u.unary = (br_unary_args){.a = src, .out = dst, .n = n};
    return br_submit(ctx, &op, 0);
}

br_status br_add(br_ctx *ctx, const br_buf *a, const br_buf *b, br_buf *out, size_t n) {
    static const char fn[] = "br_add";
    BR_TRY(br_check_ctx(ctx));
    BR_TRY(br_check_dim(ctx, fn, "n", n));
    BR_TRY(br_check_buf(ctx, fn, "a", a, BR_F32, n));
    BR_TRY(br_check_buf(ctx, fn, "b", b, BR_F32, n));
    BR_TRY(br_check_buf(ctx, fn, "out", out, BR_F32, n));
    BR_TRY(check_alias(ctx, fn, "out", out, "a", a, n));
    BR_TRY(check_alias(ctx, fn, "out", out, "b", b, n));
    br_op op = {.kind = BR_OP_ADD};
    op.u.unary = (br_unary_args){.a = a, .b = b, .out = out, .n = n};
    return br_submit(ctx, &op, 0);
}

br_status br_split_qg(br_ctx *ctx, br_buf *qg, br_buf *q, br_buf *gate, size_t m, size_t heads,
                      size_t hd, int merge) {
    static const char fn[] = "br_split_qg";
    BR_TRY(br_check_ctx(ctx));
    BR_TRY(br_check_dim(ctx, fn, "m", m));
    BR_TRY(br_check_dim(ctx, fn, "heads", heads));
    BR_TRY(br_check_dim(ctx, fn, "hd", hd));
    size_t width, n_half, n_qg;
    BR_TRY(br_check_mul(ctx, fn, "heads·hd", heads, hd, &width));
    BR_TRY(br_check_mul(ctx, fn, "m·heads·hd", m, width, &n_half));
    BR_TRY(br_check_mul(ctx, fn, "m·heads·2·hd", n_half, 2, &n_qg));
    BR_TRY(br_check_buf(ctx, fn, "qg", qg, BR_F32, n_qg));
    BR_TRY(br_check_buf(ctx, fn, "q", q, BR_F32, n_half));
    BR_TRY(br_check_buf(ctx, fn, "gate", gate, BR_F32, n_half));
    /* elements move between different positions: no two of the three may share memory */
    if (br_bufs_overlap(qg, n_qg, q, n_half))
        return br_fail(ctx, BR_E_ARG, "%s: q overlaps qg", fn);
    if (br_bufs_overlap(qg, n_qg, gate, n_half))
        return br_fail(ctx, BR_E_ARG, "%s: gate overlaps qg", fn);
    if (br_bufs_overlap(q, n_half, gate, n_half))
        return br_fail(ctx, BR_E_ARG, "%s: gate overlaps q", fn);
    br_op op = {.kind = BR_OP_SPLIT_QG};
    op.u.split_qg = (br_split_qg_args){
        .qg = qg, .q = q, .gate = gate, .m = m, .heads = heads, .hd = hd, .merge = merge != 0};
    return br_submit(ctx, &op, 0);
}
