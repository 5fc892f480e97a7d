/* STUB: replaced by the real implementation. */
#include "backend/cuda/cuda_internal.h"

extern "C" br_status br_cuda_mm(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "mm: not yet implemented on CUDA");
}

extern "C" br_status br_cuda_mm_bits(br_ctx *ctx, const br_op *op) {
    (void)op;
    return br_fail(ctx, BR_E_UNSUPPORTED, "mm_bits: not yet implemented on CUDA");
}

extern "C" int br_cuda_built_wgmma(void) { return 0; }
