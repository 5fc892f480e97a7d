/* STUB: replaced by the real implementation. */
#include "backend/cpu/cpu_ops.h"

br_status br_cpu_mm(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "mm: not yet implemented on the CPU");
}

br_status br_cpu_mm_bits(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "mm_bits: not yet implemented on the CPU");
}

