/* STUB: replaced by the real front-end. */
#include "ops/check.h"
#include "ops/op.h"

br_status br_scale_acc(br_ctx *ctx, const br_buf *a, const br_buf *col, br_buf *out, size_t m, size_t k, int accumulate) {
    (void)a;
    (void)col;
    (void)out;
    (void)m;
    (void)k;
    (void)accumulate;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_scale_acc: not yet implemented");
}

br_status br_scale_acc2(br_ctx *ctx, const br_buf *a0, const br_buf *col0, const br_buf *a1, const br_buf *col1, br_buf *out, size_t m, size_t k) {
    (void)a0;
    (void)col0;
    (void)a1;
    (void)col1;
    (void)out;
    (void)m;
    (void)k;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_scale_acc2: not yet implemented");
}

br_status br_f16_to_f32(br_ctx *ctx, const br_buf *src, br_buf *dst, size_t n) {
    (void)src;
    (void)dst;
    (void)n;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_f16_to_f32: not yet implemented");
}

br_status br_add(br_ctx *ctx, const br_buf *a, const br_buf *b, br_buf *out, size_t n) {
    (void)a;
    (void)b;
    (void)out;
    (void)n;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_add: not yet implemented");
}

br_status br_split_qg(br_ctx *ctx, br_buf *qg, br_buf *q, br_buf *gate, size_t m, size_t heads, size_t hd, int merge) {
    (void)qg;
    (void)q;
    (void)gate;
    (void)m;
    (void)heads;
    (void)hd;
    (void)merge;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_split_qg: not yet implemented");
}

