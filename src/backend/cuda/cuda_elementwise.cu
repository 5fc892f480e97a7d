/* STUB: replaced by the real implementation. */
#include "backend/cuda/cuda_internal.h"

extern "C" br_status br_cuda_fill(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "fill: not yet implemented on CUDA");
}

extern "C" br_status br_cuda_copy(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "copy: not yet implemented on CUDA");
}

extern "C" br_status br_cuda_scale_acc(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "scale_acc: not yet implemented on CUDA");
}

extern "C" br_status br_cuda_scale_acc2(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "scale_acc2: not yet implemented on CUDA");
}

extern "C" br_status br_cuda_f16_to_f32(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "f16_to_f32: not yet implemented on CUDA");
}

extern "C" br_status br_cuda_add(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "add: not yet implemented on CUDA");
}

extern "C" br_status br_cuda_split_qg(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "split_qg: not yet implemented on CUDA");
}

