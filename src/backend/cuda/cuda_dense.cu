/* STUB: replaced by the real implementation. */
#include "backend/cuda/cuda_internal.h"

extern "C" br_status br_cuda_dense_fwd(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "dense_fwd: not yet implemented on CUDA");
}

extern "C" br_status br_cuda_dense_bwd(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "dense_bwd: not yet implemented on CUDA");
}

