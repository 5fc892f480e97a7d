/* STUB: replaced by the real implementation. */
#include "backend/cpu/cpu_ops.h"

br_status br_cpu_dense_fwd(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "dense_fwd: not yet implemented on the CPU");
}

br_status br_cpu_dense_bwd(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "dense_bwd: not yet implemented on the CPU");
}

