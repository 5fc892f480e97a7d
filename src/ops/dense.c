/* Front-ends of the small dense f32 linear: br_dense_fwd and br_dense_bwd. */
#include "ops/check.h"
#include "ops/op.h"

/* Outputs per row the tiled dense_fwd holds in registers (bitrank.h). */
#define DENSE_FWD_TILED_MAX_R 48

/* Checks shared by both directions: dims, products, the implementation choice.
 * n_mk, n_rk, n_mr receive m·k, r·k, m·r. */
static br_status check_dense(br_ctx *ctx, const char *fn, size_t m, size_t k, size_t r,
                             br_dense_impl impl, size_t *n_mk, size_t *n_rk, size_t *n_mr) {
    BR_TRY(br_check_ctx(ctx));
    if (impl != BR_DENSE_AUTO && impl != BR_DENSE_PLAIN && impl != BR_DENSE_TILED)
        return br_fail(ctx, BR_E_ARG, "%s: impl is %d, not a br_dense_impl", fn, (int)impl);
    BR_TRY(br_check_dim(ctx, fn, "m", m));
    BR_TRY(br_check_dim(ctx, fn, "k", k));
    BR_TRY(br_check_dim(ctx, fn, "r", r));
    BR_TRY(br_check_mul(ctx, fn, "m·k", m, k, n_mk));
    BR_TRY(br_check_mul(ctx, fn, "r·k", r, k, n_rk));
    BR_TRY(br_check_mul(ctx, fn, "m·r", m, r, n_mr));
    return BR_OK;
}

br_status br_dense_fwd(br_ctx *ctx, const br_buf *a, const br_buf *w, br_buf *out, size_t m,
                       size_t k, size_t r, int accumulate, br_dense_impl impl) {
    static const char fn[] = "br_dense_fwd";
    size_t n_mk, n_rk, n_mr;
    BR_TRY(check_dense(ctx, fn, m, k, r, impl, &n_mk, &n_rk, &n_mr));
    if (impl == BR_DENSE_TILED && r > DENSE_FWD_TILED_MAX_R)
        return br_fail(ctx, BR_E_SHAPE, "%s: the tiled variant needs r ≤ %d, r is %zu", fn,
                       DENSE_FWD_TILED_MAX_R, r);
    BR_TRY(br_check_buf(ctx, fn, "a", a, BR_F32, n_mk));
    BR_TRY(br_check_buf(ctx, fn, "w", w, BR_F32, n_rk));
    BR_TRY(br_check_buf(ctx, fn, "out", out, BR_F32, n_mr));
    /* an output row is written while other rows of a and all of w are still read */
    BR_TRY(br_check_apart(ctx, fn, "out", out, n_mr, "a", a, n_mk));
    BR_TRY(br_check_apart(ctx, fn, "out", out, n_mr, "w", w, n_rk));
    if (impl == BR_DENSE_AUTO) impl = r <= DENSE_FWD_TILED_MAX_R ? BR_DENSE_TILED : BR_DENSE_PLAIN;

    br_op op = {.kind = BR_OP_DENSE_FWD};
    op.u.dense = (br_dense_args){.a = a,
                                 .w = w,
                                 .out = out,
                                 .m = m,
                                 .k = k,
                                 .r = r,
                                 .accumulate = accumulate != 0,
                                 .impl = impl};
    return br_submit(ctx, &op, 0);
}

br_status br_dense_bwd(br_ctx *ctx, const br_buf *dy, const br_buf *w, br_buf *dx, size_t m,
                       size_t k, size_t r, br_dense_impl impl) {
    static const char fn[] = "br_dense_bwd";
    size_t n_mk, n_rk, n_mr;
    BR_TRY(check_dense(ctx, fn, m, k, r, impl, &n_mk, &n_rk, &n_mr));
    BR_TRY(br_check_buf(ctx, fn, "dy", dy, BR_F32, n_mr));
    BR_TRY(br_check_buf(ctx, fn, "w", w, BR_F32, n_rk));
    BR_TRY(br_check_buf(ctx, fn, "dx", dx, BR_F32, n_mk));
    BR_TRY(br_check_apart(ctx, fn, "dx", dx, n_mk, "dy", dy, n_mr));
    BR_TRY(br_check_apart(ctx, fn, "dx", dx, n_mk, "w", w, n_rk));
    /* the tiled backward has no shape limit: it is the default */
    if (impl == BR_DENSE_AUTO) impl = BR_DENSE_TILED;

    br_op op = {.kind = BR_OP_DENSE_BWD};
    op.u.dense = (br_dense_args){
        .a = dy, .w = w, .out = dx, .m = m, .k = k, .r = r, .accumulate = 1, .impl = impl};
    return br_submit(ctx, &op, 0);
}
