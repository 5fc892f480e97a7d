/* STUB: replaced by the real implementation. */
#include "backend/cpu/cpu_ops.h"

br_status br_cpu_adam(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "adam: not yet implemented on the CPU");
}

br_status br_cpu_adam_cat(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "adam_cat: not yet implemented on the CPU");
}

br_status br_cpu_sumsq(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "sumsq: not yet implemented on the CPU");
}

br_status br_cpu_sumsq_cat(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "sumsq_cat: not yet implemented on the CPU");
}

