/* STUB: replaced by the real front-end. */
#include "ops/check.h"
#include "ops/op.h"

br_status br_dense_fwd(br_ctx *ctx, const br_buf *a, const br_buf *w, br_buf *out, size_t m, size_t k, size_t r, int accumulate, br_dense_impl impl) {
    (void)a;
    (void)w;
    (void)out;
    (void)m;
    (void)k;
    (void)r;
    (void)accumulate;
    (void)impl;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_dense_fwd: not yet implemented");
}

br_status br_dense_bwd(br_ctx *ctx, const br_buf *dy, const br_buf *w, br_buf *dx, size_t m, size_t k, size_t r, br_dense_impl impl) {
    (void)dy;
    (void)w;
    (void)dx;
    (void)m;
    (void)k;
    (void)r;
    (void)impl;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_dense_bwd: not yet implemented");
}

