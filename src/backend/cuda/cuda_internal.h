/* State and helpers of the CUDA backend, shared by its C file (cuda_backend.c: the
 * op table, memory, graphs, timers) and its kernels (*.cu, compiled as C++). */
#ifndef BR_BACKEND_CUDA_INTERNAL_H
#define BR_BACKEND_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct br_cuda {
    int device;
    cudaStream_t stream;
    struct cudaDeviceProp prop;
    int cc;                  /* compute capability, 10·major + minor */
    int sm_count;
    int has_wgmma;           /* sm_90a kernels built and device is 9.0 */
    void *ws;                /* workspace (column-reduction partials, ...) */
    size_t ws_bytes;
    void **retired;          /* old workspaces: captured graphs may still name them */
    size_t nretired;
    cudaEvent_t *events;     /* profiler marks */
    size_t nevents;
    int capturing;           /* inside stream capture (no allocation allowed) */
} br_cuda;

static inline br_cuda *br_cuda_state(br_ctx *ctx) { return (br_cuda *)ctx->be_state; }

/* Turn a CUDA error into a failed status with the call and location in the message. */
br_status br_cuda_check(br_ctx *ctx, cudaError_t e, const char *what, const char *file, int line);
#define BR_CUDA_TRY(ctx, call)                                                                   \
    do {                                                                                         \
        cudaError_t br_cuda_e_ = (call);                                                         \
        if (br_cuda_e_ != cudaSuccess)                                                           \
            return br_cuda_check((ctx), br_cuda_e_, #call, __FILE__, __LINE__);                  \
    } while (0)
/* After every kernel launch: counts it and turns a launch error into a status. */
#define BR_CUDA_LAUNCHED(ctx, name)                                                              \
    do {                                                                                         \
        (ctx)->stats.launches++;                                                                 \
        cudaError_t br_cuda_e_ = cudaGetLastError();                                             \
        if (br_cuda_e_ != cudaSuccess)                                                           \
            return br_cuda_check((ctx), br_cuda_e_, "launch of " name, __FILE__, __LINE__);      \
    } while (0)

/* Workspace of at least `bytes` (grown outside capture; inside capture it must have
 * been reserved: br_submit records every op's need in ctx->ws_need). */
br_status br_cuda_workspace(br_ctx *ctx, size_t bytes, void **out);

/* Op functions, one file per concern. */
/* cuda_stage.cu */
br_status br_cuda_cvt(br_ctx *ctx, const br_op *op);
br_status br_cuda_cvt_multi(br_ctx *ctx, const br_op *op);
br_status br_cuda_cvt_cols(br_ctx *ctx, const br_op *op);
br_status br_cuda_cvt_t(br_ctx *ctx, const br_op *op);
br_status br_cuda_expand(br_ctx *ctx, const br_op *op);
/* cuda_elementwise.cu */
br_status br_cuda_fill(br_ctx *ctx, const br_op *op);
br_status br_cuda_copy(br_ctx *ctx, const br_op *op);
br_status br_cuda_scale_acc(br_ctx *ctx, const br_op *op);
br_status br_cuda_scale_acc2(br_ctx *ctx, const br_op *op);
br_status br_cuda_f16_to_f32(br_ctx *ctx, const br_op *op);
br_status br_cuda_add(br_ctx *ctx, const br_op *op);
br_status br_cuda_split_qg(br_ctx *ctx, const br_op *op);
/* cuda_reduce.cu */
br_status br_cuda_colsum(br_ctx *ctx, const br_op *op);
br_status br_cuda_colsum_fused(br_ctx *ctx, const br_op *op);
/* cuda_dense.cu */
br_status br_cuda_dense_fwd(br_ctx *ctx, const br_op *op);
br_status br_cuda_dense_bwd(br_ctx *ctx, const br_op *op);
/* cuda_optim.cu */
br_status br_cuda_adam(br_ctx *ctx, const br_op *op);
br_status br_cuda_adam_cat(br_ctx *ctx, const br_op *op);
br_status br_cuda_sumsq(br_ctx *ctx, const br_op *op);
br_status br_cuda_sumsq_cat(br_ctx *ctx, const br_op *op);
/* cuda_gemm.cu (dispatch to the mma.sync and wgmma kernels) */
br_status br_cuda_mm(br_ctx *ctx, const br_op *op);
br_status br_cuda_mm_bits(br_ctx *ctx, const br_op *op);
/* whether this build carries the sm_90a (wgmma) kernels */
int br_cuda_built_wgmma(void);

#ifdef __cplusplus
}
#endif
#endif
