/* The Hopper GEMM kernels (gemm/wgmma_kernel.cuh) for a bitmap u32 [n][k/32] (BR_BITS_ROWS): every tile
 * shape and A source. One file per plane kind, so that the build compiles them in
 * parallel. */
#include "backend/cuda/gemm/wgmma_launch.cuh"

namespace br_gemm_cuda {

br_status launch_wgmma_rows(br_ctx *ctx, const Problem &p, WgmmaTile tile, WgmmaASource src) {
    return plain_problem(p) ? launch_wgmma_kind<PLANE_ROWS, EPI_PLAIN>(ctx, p, tile, src)
                            : launch_wgmma_kind<PLANE_ROWS, EPI_FULL>(ctx, p, tile, src);
}

} // namespace br_gemm_cuda
