/* STUB: replaced by the real implementation. */
#include "backend/cuda/cuda_internal.h"

extern "C" br_status br_cuda_adam(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "adam: not yet implemented on CUDA");
}

extern "C" br_status br_cuda_adam_cat(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "adam_cat: not yet implemented on CUDA");
}

extern "C" br_status br_cuda_sumsq(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "sumsq: not yet implemented on CUDA");
}

extern "C" br_status br_cuda_sumsq_cat(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "sumsq_cat: not yet implemented on CUDA");
}

