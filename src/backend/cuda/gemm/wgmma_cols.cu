/* The Hopper GEMM kernels (gemm/wgmma_kernel.cuh) for a bitmap u32 [k][ceil(n/32)] (BR_BITS_COLS): every
 * tile shape and A source. One file per plane kind, so that the build compiles them in parallel. */
#include "backend/cuda/gemm/wgmma_launch.cuh"

namespace br_gemm_cuda {

br_status launch_wgmma_cols(br_ctx *ctx, const Problem &p, WgmmaTile tile, WgmmaASource src) {
    return plain_problem(p) ? launch_wgmma_kind<PLANE_COLS, EPI_PLAIN>(ctx, p, tile, src)
                            : launch_wgmma_kind<PLANE_COLS, EPI_FULL>(ctx, p, tile, src);
}

} // namespace br_gemm_cuda
