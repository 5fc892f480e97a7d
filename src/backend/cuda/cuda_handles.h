/* What code outside the CUDA backend that issues CUDA work of its own on a context
 * (the compression's device SVD, compress/svid_cuda.cu) needs of the backend: the
 * context's stream and the backend's form of a CUDA error. A narrow header, so that
 * such code does not see the backend's state (cuda_internal.h). */
#ifndef BR_BACKEND_CUDA_HANDLES_H
#define BR_BACKEND_CUDA_HANDLES_H

#include <cuda_runtime_api.h>

#include "bitrank.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The stream ctx's work is issued on now (a CUDA context), after making ctx's GPU
 * the calling thread's current device, as every op does (cuda_backend.c). */
cudaStream_t br_cuda_current_stream(br_ctx *ctx);

/* Turn a CUDA error into a failed status with the call and location in the message. */
br_status br_cuda_check(br_ctx *ctx, cudaError_t e, const char *what, const char *file, int line);

#ifdef __cplusplus
}
#endif
#endif
