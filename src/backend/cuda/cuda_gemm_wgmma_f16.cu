/* The Hopper GEMM kernels (gemm_wgmma.cuh) for an f16 plane [n][k]: every tile
 * shape and A source. One file per plane kind, so that the build compiles them in
 * parallel. */
#include "backend/cuda/gemm_wgmma.cuh"

namespace br_gemm_cuda {

br_status launch_wgmma_f16(br_ctx *ctx, const Problem &p, WgmmaTile tile, WgmmaASource src) {
    return plain_problem(p) ? launch_wgmma_kind<PLANE_F16, EPI_PLAIN>(ctx, p, tile, src)
                            : launch_wgmma_kind<PLANE_F16, EPI_FULL>(ctx, p, tile, src);
}

br_status launch_wgmma_f16_stage(br_ctx *ctx, const Problem &p, WgmmaTile tile) {
    return launch_wgmma_kind<PLANE_F16, EPI_STAGE>(ctx, p, tile, A_SMEM);
}

} // namespace br_gemm_cuda
