/* The Hopper GEMM kernels (gemm/wgmma_kernel.cuh) for an f16 plane [n][k]: every tile
 * shape and A source. One file per plane kind, so that the build compiles them in
 * parallel. */
#include "backend/cuda/gemm/wgmma_launch.cuh"

namespace br_gemm_cuda {

br_status launch_wgmma_f16(br_ctx *ctx, const Problem &p, WgmmaTile tile, WgmmaASource src) {
    return plain_problem(p) ? launch_wgmma_kind<PLANE_F16, EPI_PLAIN>(ctx, p, tile, src)
                            : launch_wgmma_kind<PLANE_F16, EPI_FULL>(ctx, p, tile, src);
}

br_status launch_wgmma_f16_stage16(br_ctx *ctx, const Problem &p, WgmmaTile tile) {
    switch (tile) {
    case TILE_256x128: return launch_wgmma_shape<PLANE_F16, 2, 128, 0, EPI_STAGE16>(ctx, p);
    case TILE_256x112: return launch_wgmma_shape<PLANE_F16, 2, 112, 0, EPI_STAGE16>(ctx, p);
    case TILE_128x256: return launch_wgmma_shape<PLANE_F16, 1, 256, 0, EPI_STAGE16>(ctx, p);
    case TILE_128x128: return launch_wgmma_shape<PLANE_F16, 1, 128, 0, EPI_STAGE16>(ctx, p);
    case TILE_128x192: return launch_wgmma_shape<PLANE_F16, 1, 192, 0, EPI_STAGE16>(ctx, p);
    case TILE_256x96: return launch_wgmma_shape<PLANE_F16, 2, 96, 0, EPI_STAGE16>(ctx, p);
    default: break;
    }
    return br_fail(ctx, BR_E_UNSUPPORTED, "mm_stage: no f16-c staging kernel for the %s tile",
                   tile_name(tile));
}

} // namespace br_gemm_cuda
