/* STUB: replaced by the real front-end. */
#include "ops/check.h"
#include "ops/op.h"

br_status br_adam(br_ctx *ctx, br_buf *w, const br_buf *grad, br_buf *m1, br_buf *m2, const br_buf *mask, size_t n, const br_adam_hp *hp) {
    (void)w;
    (void)grad;
    (void)m1;
    (void)m2;
    (void)mask;
    (void)n;
    (void)hp;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_adam: not yet implemented");
}

br_status br_adam_cat(br_ctx *ctx, br_buf *w, const br_buf *grad, br_buf *m1, br_buf *m2, const br_buf *mask, const br_buf *rel_floor, size_t n, const br_adam_hp *hp) {
    (void)w;
    (void)grad;
    (void)m1;
    (void)m2;
    (void)mask;
    (void)rel_floor;
    (void)n;
    (void)hp;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_adam_cat: not yet implemented");
}

br_status br_sumsq(br_ctx *ctx, const br_buf *a, size_t n, br_buf *out) {
    (void)a;
    (void)n;
    (void)out;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_sumsq: not yet implemented");
}

br_status br_sumsq_cat(br_ctx *ctx, const br_buf *a, const br_buf *tab, size_t np, br_buf *out) {
    (void)a;
    (void)tab;
    (void)np;
    (void)out;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_sumsq_cat: not yet implemented");
}

br_status br_sumsq_host(br_ctx *ctx, const br_buf *a, size_t n, double *out) {
    (void)a;
    (void)n;
    (void)out;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_sumsq_host: not yet implemented");
}

