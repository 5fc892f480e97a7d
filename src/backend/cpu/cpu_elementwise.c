/* STUB: replaced by the real implementation. */
#include "backend/cpu/cpu_ops.h"

br_status br_cpu_scale_acc(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "scale_acc: not yet implemented on the CPU");
}

br_status br_cpu_scale_acc2(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "scale_acc2: not yet implemented on the CPU");
}

br_status br_cpu_f16_to_f32(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "f16_to_f32: not yet implemented on the CPU");
}

br_status br_cpu_add(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "add: not yet implemented on the CPU");
}

br_status br_cpu_split_qg(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "split_qg: not yet implemented on the CPU");
}

