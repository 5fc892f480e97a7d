/* STUB: replaced by the real front-end. */
#include "ops/check.h"
#include "ops/op.h"

br_status br_plane_linear(br_ctx *ctx, const br_buf *plane, const br_buf *x, br_buf *act16, br_buf *y, size_t ntok, size_t n, size_t k, float scale) {
    (void)plane;
    (void)x;
    (void)act16;
    (void)y;
    (void)ntok;
    (void)n;
    (void)k;
    (void)scale;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_plane_linear: not yet implemented");
}

br_status br_weight_grad(br_ctx *ctx, const br_buf *x, const br_buf *dy, br_buf *xt, br_buf *dyt, br_buf *dw, size_t ntok, size_t m, size_t k, float gscale) {
    (void)x;
    (void)dy;
    (void)xt;
    (void)dyt;
    (void)dw;
    (void)ntok;
    (void)m;
    (void)k;
    (void)gscale;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_weight_grad: not yet implemented");
}

br_status br_gram_acc(br_ctx *ctx, const br_buf *x, br_buf *xt, br_buf *acc, br_buf *tmp, size_t ntok, size_t k) {
    (void)x;
    (void)xt;
    (void)acc;
    (void)tmp;
    (void)ntok;
    (void)k;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_gram_acc: not yet implemented");
}

