/* STUB: replaced by the real implementation. */
#include "backend/cpu/cpu_ops.h"

br_status br_cpu_cvt(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "cvt: not yet implemented on the CPU");
}

br_status br_cpu_cvt_multi(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "cvt_multi: not yet implemented on the CPU");
}

br_status br_cpu_cvt_cols(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "cvt_cols: not yet implemented on the CPU");
}

br_status br_cpu_cvt_t(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "cvt_t: not yet implemented on the CPU");
}

br_status br_cpu_expand(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "expand: not yet implemented on the CPU");
}

