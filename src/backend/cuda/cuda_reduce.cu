/* STUB: replaced by the real implementation. */
#include "backend/cuda/cuda_internal.h"

extern "C" br_status br_cuda_colsum(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "colsum: not yet implemented on CUDA");
}

extern "C" br_status br_cuda_colsum_fused(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "colsum_fused: not yet implemented on CUDA");
}

