/* The Hopper GEMM kernels (gemm/wgmma_kernel.cuh) for MN-major f16 operands (MM_TN: act
 * [k][m] and plane [k][n], k rows first): the tiles with whole 64-token boxes, plain
 * and full epilogues. A file of their own, so that the build compiles them in
 * parallel with the others. */
#include "backend/cuda/gemm/wgmma_launch.cuh"

namespace br_gemm_cuda {

br_status launch_wgmma_f16_mn(br_ctx *ctx, const Problem &p, WgmmaTile tile, const Problem *p2) {
    if (p2) return launch_wgmma_mn<EPI_PLAIN>(ctx, p, tile, p2); /* checks both are plain */
    return plain_problem(p) ? launch_wgmma_mn<EPI_PLAIN>(ctx, p, tile)
                            : launch_wgmma_mn<EPI_FULL>(ctx, p, tile);
}

} // namespace br_gemm_cuda
