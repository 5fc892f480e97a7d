/* STUB: replaced by the real implementation. */
#include "backend/cpu/cpu_ops.h"

br_status br_cpu_colsum(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "colsum: not yet implemented on the CPU");
}

br_status br_cpu_colsum_fused(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "colsum_fused: not yet implemented on the CPU");
}

