/* Front-ends of the column reductions: br_colsum and br_colsum_fused. */
#include "ops/check.h"
#include "ops/layer_ops.h"
#include "ops/op.h"

/* Workspace of a column reduction: the block partials f32 [nb][k] (CUDA keeps
 * them between its two passes; the CPU may use its own memory). */
static size_t colsum_ws_bytes(size_t rows, size_t k) {
    return br_colsum_blocks(rows) * k * sizeof(float);
}

br_status br_colsum(br_ctx *ctx, const br_buf *a, const br_buf *b, const br_buf *f,
                    br_colsum_term term, br_buf *out, size_t rows, size_t k, int accumulate) {
    static const char fn[] = "br_colsum";
    BR_TRY(br_check_ctx(ctx));
    if (term != BR_TERM_AB && term != BR_TERM_ABF && term != BR_TERM_A)
        return br_fail(ctx, BR_E_ARG, "%s: term is %d, not a br_colsum_term", fn, (int)term);
    BR_TRY(br_check_dim(ctx, fn, "rows", rows));
    BR_TRY(br_check_dim(ctx, fn, "k", k));
    size_t n;
    BR_TRY(br_check_mul(ctx, fn, "rows·k", rows, k, &n));
    BR_TRY(br_check_buf(ctx, fn, "a", a, BR_F32, n));
    if (term == BR_TERM_A)
        b = NULL; /* ignored: the descriptor never names a buffer the op does not read */
    else
        BR_TRY(br_check_buf(ctx, fn, "b", b, BR_F32, n));
    if (term == BR_TERM_ABF)
        BR_TRY(br_check_buf(ctx, fn, "f", f, BR_F32, rows));
    else
        f = NULL;
    BR_TRY(br_check_buf(ctx, fn, "out", out, BR_F32, k));

    br_op op = {.kind = BR_OP_COLSUM};
    op.u.colsum = (br_colsum_args){.a = a,
                                   .b = b,
                                   .f = f,
                                   .term = term,
                                   .out = out,
                                   .rows = rows,
                                   .k = k,
                                   .accumulate = accumulate != 0};
    return br_submit(ctx, &op, colsum_ws_bytes(rows, k));
}

br_status br_colsum_fused_args_of(br_ctx *ctx, const char *fn, const br_buf *a, const br_buf *b,
                                  br_buf *sum, size_t rows, size_t k, const br_fuse *fuse,
                                  size_t group, size_t stride, int overwrite,
                                  br_colsum_fused_args *out, size_t *ws) {
    BR_TRY(br_check_ctx(ctx));
    if (!fuse) return br_fail(ctx, BR_E_ARG, "%s: fuse is NULL", fn);
    br_fuse fz = *fuse;
    if (fz.kind != BR_FUSE_CVT_A && fz.kind != BR_FUSE_CVT_B && fz.kind != BR_FUSE_SCALE_B)
        return br_fail(ctx, BR_E_ARG, "%s: fuse->kind is %d, not a br_fuse_kind", fn, (int)fz.kind);
    BR_TRY(br_check_dim(ctx, fn, "rows", rows));
    BR_TRY(br_check_dim(ctx, fn, "k", k));
    const int staged = fz.kind != BR_FUSE_SCALE_B;
    size_t n, n_dst, n_t = 0;
    BR_TRY(br_check_mul(ctx, fn, "rows·k", rows, k, &n));
    n_dst = n;
    if (staged) BR_TRY(br_check_mul(ctx, fn, "br_pad_rows(rows)·k", br_pad_rows(rows), k, &n_dst));
    if (fz.dst_t)
        BR_TRY(br_check_mul(ctx, fn, "br_pad_rows(k)·br_pad_tokens(rows)", br_pad_rows(k),
                            br_pad_tokens(rows), &n_t));
    size_t n_grp;
    BR_TRY(br_check_groups(ctx, fn, k, group, stride, &n_grp));
    BR_TRY(br_check_buf(ctx, fn, "a", a, BR_F32, n));
    BR_TRY(br_check_buf(ctx, fn, "b", b, BR_F32, n));
    BR_TRY(br_check_buf(ctx, fn, "sum", sum, BR_F32, n_grp));
    BR_TRY(br_check_buf(ctx, fn, "fuse->col", fz.col, BR_F32, n_grp));
    BR_TRY(br_check_buf(ctx, fn, "fuse->dst", fz.dst, staged ? BR_F16 : BR_F32, n_dst));
    BR_TRY(br_check_opt_buf(ctx, fn, "fuse->dst_t", fz.dst_t, BR_F16, n_t));
    if (staged) {
        BR_TRY(br_check_finite(ctx, fn, "fuse->scale", fz.scale));
    } else if (fz.dst_t) {
        BR_TRY(br_check_finite(ctx, fn, "fuse->t_scale", fz.t_scale));
    }
    /* The outputs are written while the inputs are still read: an output that shares
     * memory with another operand gives results that depend on the order of the
     * writes (and differ from the separate ops). */
    static const char *const names[6] = {"sum", "fuse->dst", "fuse->dst_t", "a", "b", "fuse->col"};
    const br_buf *const bufs[6] = {sum, fz.dst, fz.dst_t, a, b, fz.col};
    const size_t counts[6] = {n_grp, n_dst, n_t, n, n, n_grp};
    for (size_t i = 0; i < 3; i++) /* each output against every later operand */
        for (size_t j = i + 1; j < 6; j++)
            BR_TRY(br_check_apart(ctx, fn, names[i], bufs[i], counts[i], names[j], bufs[j],
                                  counts[j]));
    /* fields the kind does not use are cleared, so a recorded op never depends on them */
    if (staged)
        fz.accumulate = 0;
    else
        fz.scale = 1.0f;
    fz.accumulate = fz.accumulate != 0;
    if (staged || !fz.dst_t) fz.t_scale = 0.0f;

    *out = (br_colsum_fused_args){.a = a,
                                  .b = b,
                                  .sum = sum,
                                  .rows = rows,
                                  .k = k,
                                  .fuse = fz,
                                  .group = group,
                                  .stride = group ? stride : 0,
                                  .overwrite = overwrite != 0};
    *ws = colsum_ws_bytes(rows, k);
    return BR_OK;
}

static br_status colsum_fused(br_ctx *ctx, const char *fn, const br_buf *a, const br_buf *b,
                              br_buf *sum, size_t rows, size_t k, const br_fuse *fuse, size_t group,
                              size_t stride, int overwrite) {
    br_op op = {.kind = BR_OP_COLSUM_FUSED};
    size_t ws;
    BR_TRY(br_colsum_fused_args_of(ctx, fn, a, b, sum, rows, k, fuse, group, stride, overwrite,
                                   &op.u.colsum_fused, &ws));
    return br_submit(ctx, &op, ws);
}

br_status br_colsum_fused(br_ctx *ctx, const br_buf *a, const br_buf *b, br_buf *sum, size_t rows,
                          size_t k, const br_fuse *fuse) {
    return colsum_fused(ctx, "br_colsum_fused", a, b, sum, rows, k, fuse, 0, 0, 0);
}

br_status br_colsum_fused_grouped(br_ctx *ctx, const br_buf *a, const br_buf *b, br_buf *sum,
                                  size_t rows, size_t k, const br_fuse *fuse, size_t group,
                                  size_t stride, int accumulate) {
    return colsum_fused(ctx, "br_colsum_fused_grouped", a, b, sum, rows, k, fuse, group, stride,
                        !accumulate);
}
