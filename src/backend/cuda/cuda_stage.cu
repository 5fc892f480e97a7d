/* STUB: replaced by the real implementation. */
#include "backend/cuda/cuda_internal.h"

extern "C" br_status br_cuda_cvt(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "cvt: not yet implemented on CUDA");
}

extern "C" br_status br_cuda_cvt_multi(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "cvt_multi: not yet implemented on CUDA");
}

extern "C" br_status br_cuda_cvt_cols(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "cvt_cols: not yet implemented on CUDA");
}

extern "C" br_status br_cuda_cvt_t(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "cvt_t: not yet implemented on CUDA");
}

extern "C" br_status br_cuda_expand(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "expand: not yet implemented on CUDA");
}

