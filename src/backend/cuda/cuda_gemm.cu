/* The GEMM ops of the CUDA backend (R-MM): br_cuda_mm and br_cuda_mm_bits pick a
 * kernel family and tile and launch it on the context's stream.
 *
 *   wgmma     Hopper (sm_90a code on a 9.0 device): gemm_wgmma.cuh, per plane kind
 *             in cuda_gemm_wgmma_{f16,rows,cols}.cu
 *   mma.sync  every other GPU of compute capability ≥ 8.0: cuda_gemm_mma.cu
 *   simple    operands that are not 16-byte aligned (views that start mid-vector)
 *
 * BR_OPT_GEMM_KERNEL chooses the family (0 auto, 1 mma.sync, 2 wgmma or
 * BR_E_UNSUPPORTED); on wgmma the tile and the bitmap's A source follow the shape
 * (pick_wgmma). Nothing here allocates or synchronizes: ops are captured into CUDA
 * graphs; TMA descriptors are encoded on the host per call and passed by value. */
#include <cudaTypedefs.h> /* PFN_cuTensorMapEncodeTiled */

#include "backend/cuda/gemm_wgmma.cuh"

namespace br_gemm_cuda {
namespace {

/* sm_90a code carries a static shared array here; other code none. */
__global__ void wgmma_probe_kernel(int *out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __shared__ int probe[32];
    probe[threadIdx.x % 32] = (int)threadIdx.x;
    __syncthreads();
    if (out) out[threadIdx.x] = probe[(threadIdx.x + 1) % 32];
#else
    if (out) out[threadIdx.x] = 0;
#endif
}

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
    /* thread-safe once: the driver's entry point, fetched through the runtime so that
     * libcuda is not linked directly */
    static PFN_cuTensorMapEncodeTiled_v12000 fn = []() -> PFN_cuTensorMapEncodeTiled_v12000 {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                             &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess) {
            cudaGetLastError();
            return nullptr;
        }
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }();
    return fn;
}

bool aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

} // namespace

br_status encode_tmap_2d(br_ctx *ctx, CUtensorMap *map, CUtensorMapDataType type, const void *base,
                         uint64_t inner, uint64_t rows, uint64_t row_bytes, uint32_t box_inner,
                         uint32_t box_rows) {
    PFN_cuTensorMapEncodeTiled_v12000 fn = encode_fn();
    if (!fn)
        return br_fail(ctx, BR_E_DEVICE,
                       "mm: the driver has no cuTensorMapEncodeTiled (CUDA driver too old?)");
    const cuuint64_t dims[2] = {inner, rows}, strides[1] = {row_bytes};
    const cuuint32_t box[2] = {box_inner, box_rows}, unit[2] = {1, 1};
    CUresult r = fn(map, type, 2, const_cast<void *>(base), dims, strides, box, unit,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return br_fail(ctx, BR_E_DEVICE,
                       "mm: cuTensorMapEncodeTiled failed (error %d) for a [%llu][%llu] tensor at "
                       "%p, row stride %llu bytes, box %u x %u",
                       (int)r, (unsigned long long)rows, (unsigned long long)inner, base,
                       (unsigned long long)row_bytes, box_rows, box_inner);
    return BR_OK;
}

const char *tile_name(WgmmaTile tile) {
    switch (tile) {
    case TILE_256x128: return "256x128";
    case TILE_256x112: return "256x112";
    case TILE_128x256: return "128x256";
    case TILE_128x128: return "128x128";
    default: return "auto";
    }
}

const char *asource_name(WgmmaASource src) {
    switch (src) {
    case A_SMEM: return "smem";
    case A_REG2: return "reg2";
    case A_REG4: return "reg4";
    default: return "auto";
    }
}

/* The tile with the least estimated time: ⌈tiles / SMs⌉ waves of a tile's area over
 * the tile's relative speed (measured on the H200 with bench_gemm, 2026-11-29); ties
 * go to the earlier candidate. Bitmaps expand into A-fragment registers, 2 sets. */
void pick_wgmma(const Problem &p, int sm_count, WgmmaTile *tile, WgmmaASource *src) {
    struct Cand {
        WgmmaTile tile;
        int bj, bt;
        double speed;
    };
    static const Cand dense[] = {{TILE_128x256, 128, 256, 1.0},
                                 {TILE_256x128, 256, 128, 1.0},
                                 {TILE_256x112, 256, 112, 1.0},
                                 {TILE_128x128, 128, 128, 0.8}};
    static const Cand bits[] = {{TILE_128x256, 128, 256, 1.0},
                                {TILE_256x128, 256, 128, 0.78},
                                {TILE_256x112, 256, 112, 0.75},
                                {TILE_128x128, 128, 128, 0.67}};
    const Cand *cand = p.kind == PLANE_F16 ? dense : bits;
    const long long sms = sm_count > 0 ? sm_count : 1;
    WgmmaTile best = cand[0].tile;
    double best_cost = 0;
    for (int i = 0; i < 4; i++) {
        const long long tiles = (long long)((p.n + cand[i].bj - 1) / cand[i].bj) *
                                ((p.m + cand[i].bt - 1) / cand[i].bt);
        const double cost =
            (double)((tiles + sms - 1) / sms) * cand[i].bj * cand[i].bt / cand[i].speed;
        if (i == 0 || cost < best_cost) best = cand[i].tile, best_cost = cost;
    }
    *tile = best;
    *src = p.kind == PLANE_F16 ? A_SMEM : A_REG2;
}

br_status run(br_ctx *ctx, const br_mm_args &args, PlaneKind kind, Family family, WgmmaTile tile,
              WgmmaASource src) {
    br_cuda *s = br_cuda_state(ctx);
    const char *name = kind == PLANE_F16 ? "mm" : "mm_bits";
    Problem p;
    p.act = static_cast<const uint16_t *>(br_ptr(args.act));
    p.plane = br_ptr(args.plane);
    p.out = static_cast<float *>(br_ptr(args.out)) + args.g.ocol;
    p.ldo = (long long)args.g.ldo;
    p.m = (int)args.g.m, p.n = (int)args.g.n, p.k = (int)args.g.k;
    p.words = kind == PLANE_ROWS ? p.k / 32 : kind == PLANE_COLS ? (p.n + 31) / 32 : 0;
    p.kind = kind;
    p.oscale = args.g.oscale;

    if (family == FAMILY_AUTO)
        family = ctx->opt_gemm_kernel == 1   ? FAMILY_MMA
                 : ctx->opt_gemm_kernel == 2 ? FAMILY_WGMMA
                 : s->has_wgmma              ? FAMILY_WGMMA
                                             : FAMILY_MMA;
    if (family == FAMILY_WGMMA && !s->has_wgmma)
        return br_fail(ctx, BR_E_UNSUPPORTED,
                       "%s: the wgmma kernels (BR_OPT_GEMM_KERNEL = 2) need a compute capability "
                       "9.0 GPU and sm_90a code; cuda:%d is sm_%d and this build %s sm_90a code",
                       name, s->device, s->cc, br_cuda_built_wgmma() ? "has" : "has no");
    /* 16-byte loads (cp.async, TMA) need 16-byte aligned operand rows; rows are k·2
     * bytes apart (k % 32 == 0), so the base decides */
    if (family == FAMILY_SIMPLE || !aligned16(p.act) || (kind == PLANE_F16 && !aligned16(p.plane)))
        return launch_simple(ctx, p);
    if (family == FAMILY_MMA) return launch_mma(ctx, p);
    if (tile == TILE_AUTO || src == A_AUTO) {
        WgmmaTile t;
        WgmmaASource a;
        pick_wgmma(p, s->sm_count, &t, &a);
        if (tile == TILE_AUTO) tile = t;
        if (src == A_AUTO) src = a;
    }
    switch (kind) {
    case PLANE_F16: return launch_wgmma_f16(ctx, p, tile, src);
    case PLANE_ROWS: return launch_wgmma_rows(ctx, p, tile, src);
    case PLANE_COLS: return launch_wgmma_cols(ctx, p, tile, src);
    }
    return br_fail(ctx, BR_E_ARG, "%s: unknown plane kind %d", name, (int)kind);
}

} // namespace br_gemm_cuda

extern "C" br_status br_cuda_mm(br_ctx *ctx, const br_op *op) {
    return br_gemm_cuda::run(ctx, op->u.mm, br_gemm_cuda::PLANE_F16, br_gemm_cuda::FAMILY_AUTO,
                             br_gemm_cuda::TILE_AUTO);
}

extern "C" br_status br_cuda_mm_bits(br_ctx *ctx, const br_op *op) {
    const br_gemm_cuda::PlaneKind kind =
        op->u.mm.layout == BR_BITS_ROWS ? br_gemm_cuda::PLANE_ROWS : br_gemm_cuda::PLANE_COLS;
    return br_gemm_cuda::run(ctx, op->u.mm, kind, br_gemm_cuda::FAMILY_AUTO,
                             br_gemm_cuda::TILE_AUTO);
}

/* Whether the kernels the runtime would load on the current device are the sm_90a
 * ones (a static shared array only they carry), i.e. this build has wgmma code for
 * it. No launch, no synchronization. */
extern "C" int br_cuda_built_wgmma(void) {
    cudaFuncAttributes attr;
    if (cudaFuncGetAttributes(&attr, br_gemm_cuda::wgmma_probe_kernel) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return attr.sharedSizeBytes >= 32 * sizeof(int);
}
