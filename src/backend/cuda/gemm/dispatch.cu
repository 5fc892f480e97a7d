/* The GEMM ops of the CUDA backend: br_cuda_mm and br_cuda_mm_bits pick a
 * kernel family and tile and launch it on the context's stream; br_cuda_mm_tn runs
 * the k-rows-first product. The GEMM fusions of cuda_fuse.c are here too: the staged
 * product (MM then CVT_BOTH: br_cuda_mm_stage) and the pair of MM_TN products in one
 * launch (br_cuda_mm_tn_pair).
 *
 *   wgmma     Hopper (sm_90a code on a 9.0 device): gemm/wgmma_kernel.cuh and
 *             wgmma_launch.cuh, per plane kind in gemm/wgmma_{f16,rows,cols,mn}.cu
 *   mma.sync  every other GPU of compute capability ≥ 8.0: gemm/mma.cu
 *   simple    operands that are not 16-byte aligned (views that start mid-vector,
 *             act strides lda % 8 ≠ 0)
 *
 * The option gemm chooses the family (auto, mma: mma.sync, wgmma: wgmma or
 * BR_E_UNSUPPORTED); on wgmma the tile, the bitmap's A source and a split-K factor
 * follow the shape (pick_wgmma). A split-K run writes its partials to the backend
 * workspace the front-end reserved (br_submit's ws_bytes: grown before a graph is
 * captured, never inside) and reduce_splits_kernel adds them in a fixed order and
 * applies the epilogue. Nothing here synchronizes: ops are captured into CUDA
 * graphs; TMA descriptors are encoded on the host per call and passed by value. */
#include <cudaTypedefs.h> /* PFN_cuTensorMapEncodeTiled */

#include <stdlib.h>
#include <string.h>

#include "backend/cuda/gemm/wgmma_launch.cuh"

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

/* One thread per 4 consecutive outputs of a row (a float4 of every split: the
 * workspace rows are 16-byte multiples); the splits are added in order 0, 1, … */
__global__ void __launch_bounds__(256) reduce_splits_kernel(const Problem p, int splits, int mpad) {
    const long long ldw = (p.n + 3) / 4 * 4, quads = ldw / 4;
    const long long items = (long long)p.m * quads;
    const size_t split_stride = (size_t)mpad * (size_t)ldw;
    for (long long it = blockIdx.x * (long long)blockDim.x + threadIdx.x; it < items;
         it += (long long)gridDim.x * blockDim.x) {
        const long long i = it / quads, j0 = (it % quads) * 4;
        const float *w = p.ws + i * ldw + j0;
        float4 sum = *reinterpret_cast<const float4 *>(w);
        for (int sp = 1; sp < splits; sp++) {
            const float4 v = *reinterpret_cast<const float4 *>(w + sp * split_stride);
            sum.x = __fadd_rn(sum.x, v.x), sum.y = __fadd_rn(sum.y, v.y);
            sum.z = __fadd_rn(sum.z, v.z), sum.w = __fadd_rn(sum.w, v.w);
        }
        const float vals[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const long long j = j0 + e;
            if (j >= p.n) break;
            const long long idx = i * p.ldo + j;
            p.out[idx] = epilogue_value(vals[e], p.oscale, p.colscale != nullptr,
                                        p.colscale ? p.colscale[j] : 1.0f, p.c, idx, p.beta);
        }
    }
}

} // namespace

br_status launch_reduce_splits(br_ctx *ctx, const Problem &p, int splits, int mpad) {
    br_cuda *s = br_cuda_state(ctx);
    const size_t items = (size_t)p.m * (size_t)((p.n + 3) / 4);
    reduce_splits_kernel<<<br_cuda_blocks(ctx, items, 256), 256, 0, s->stream>>>(p, splits, mpad);
    BR_CUDA_LAUNCHED(ctx, "reduce_splits_kernel");
    return BR_OK;
}

br_status encode_tmap_2d(br_ctx *ctx, CUtensorMap *map, CUtensorMapDataType type, const void *base,
                         uint64_t inner, uint64_t rows, uint64_t row_bytes, uint32_t box_inner,
                         uint32_t box_rows, CUtensorMapSwizzle swizzle) {
    PFN_cuTensorMapEncodeTiled_v12000 fn = encode_fn();
    if (!fn)
        return br_fail(ctx, BR_E_DEVICE,
                       "mm: the driver has no cuTensorMapEncodeTiled (CUDA driver too old?)");
    const cuuint64_t dims[2] = {inner, rows}, strides[1] = {row_bytes};
    const cuuint32_t box[2] = {box_inner, box_rows}, unit[2] = {1, 1};
    CUresult r = fn(map, type, 2, const_cast<void *>(base), dims, strides, box, unit,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
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
    case TILE_128x192: return "128x192";
    case TILE_256x96: return "256x96";
    default: return "auto";
    }
}

int tile_tokens(WgmmaTile tile) {
    switch (tile) {
    case TILE_256x112: return 112;
    case TILE_256x128:
    case TILE_128x128: return 128;
    case TILE_128x192: return 192;
    case TILE_256x96: return 96;
    default: return 256;
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

/* The (tile, split) with the least estimated time, ties to the earlier candidate:
 *   waves · (a unit's k blocks · 64 · 2·BJ·BT flops at the tile's relative speed of
 *   an SM's share of 600 TFLOP/s + 0.5 µs of pipeline fill and store)
 *   + with splits > 1: the partials read back at 3 TB/s + 2 µs for the second kernel,
 * waves = ⌈tiles · splits / SMs⌉. The speeds were measured on the H200 with
 * bench_gemm (128x192 and 256x96 estimated from their shared-memory
 * traffic per flop). Splits 2..8 where the workspace holds the partials and every
 * unit keeps ≥ 4 k blocks. Bitmaps expand into A-fragment registers, 2 sets. */
void pick_wgmma(const Problem &p, int sm_count, WgmmaTile *tile, WgmmaASource *src, int *splits) {
    struct Cand {
        WgmmaTile tile;
        int bj, bt;
        double speed;
    };
    static const Cand dense[] = {{TILE_128x256, 128, 256, 1.0},  {TILE_256x128, 256, 128, 1.0},
                                 {TILE_256x112, 256, 112, 1.0},  {TILE_128x128, 128, 128, 0.8},
                                 {TILE_128x192, 128, 192, 0.97}, {TILE_256x96, 256, 96, 0.95}};
    static const Cand bits[] = {{TILE_128x256, 128, 256, 1.0},  {TILE_256x128, 256, 128, 0.78},
                                {TILE_256x112, 256, 112, 0.75}, {TILE_128x128, 128, 128, 0.67},
                                {TILE_128x192, 128, 192, 0.95}, {TILE_256x96, 256, 96, 0.72}};
    static_assert(sizeof dense / sizeof dense[0] == TILE_COUNT, "one candidate per tile");
    const Cand *cand = p.kind == PLANE_F16 ? dense : bits;
    const long long sms = sm_count > 0 ? sm_count : 1;
    const double sm_flops = 600e12 / 132, bandwidth = 3e12;
    const int nkb = (p.k + 63) / 64;
    WgmmaTile best = cand[0].tile;
    int best_splits = 1;
    double best_cost = 0;
    for (int i = 0; i < TILE_COUNT; i++) {
        /* MN-major: whole 64-token boxes (the tiles its kernels are built for) */
        if (p.mn && cand[i].bt % 64 != 0) continue;
        const long long tiles_t = (p.m + cand[i].bt - 1) / cand[i].bt;
        const long long tiles = (long long)((p.n + cand[i].bj - 1) / cand[i].bj) * tiles_t;
        for (int sp = 1; sp <= (splits ? 8 : 1); sp++) {
            const int unit_kb = (nkb + sp - 1) / sp;
            if (sp > 1 &&
                (unit_kb < 4 || split_ws_bytes(sp, (int)(tiles_t * cand[i].bt), p.n) > p.ws_bytes))
                break;
            const double unit_s =
                2.0 * cand[i].bj * cand[i].bt * 64.0 * unit_kb / (sm_flops * cand[i].speed) +
                0.5e-6;
            const long long ctas = std::min(tiles * sp, sms);
            double cost = (double)((tiles * sp + ctas - 1) / ctas) * unit_s;
            if (sp > 1) cost += (double)sp * p.m * ((p.n + 3) / 4 * 4) * 4 / bandwidth + 2e-6;
            if ((i == 0 && sp == 1) || cost < best_cost)
                best = cand[i].tile, best_splits = sp, best_cost = cost;
        }
    }
    *tile = best;
    *src = p.kind == PLANE_F16 ? A_SMEM : A_REG2;
    if (splits) *splits = best_splits;
}

WgmmaTile pick_wgmma_pair(const Problem &p1, const Problem &p2, int sm_count) {
    /* the MN-major tiles pick_wgmma weighs (dense speeds), in its order */
    static const struct {
        WgmmaTile tile;
        int bj, bt;
        double speed;
    } cand[] = {{TILE_128x256, 128, 256, 1.0},
                {TILE_256x128, 256, 128, 1.0},
                {TILE_128x128, 128, 128, 0.8},
                {TILE_128x192, 128, 192, 0.97}};
    const long long sms = sm_count > 0 ? sm_count : 1;
    const double sm_flops = 600e12 / 132;
    const int nkb = (p1.k + 63) / 64;
    WgmmaTile best = cand[0].tile;
    double best_cost = 0;
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
        auto tiles_of = [&](const Problem &p) {
            return (long long)((p.n + cand[i].bj - 1) / cand[i].bj) *
                   ((p.m + cand[i].bt - 1) / cand[i].bt);
        };
        const long long tiles = tiles_of(p1) + tiles_of(p2);
        const double unit_s =
            2.0 * cand[i].bj * cand[i].bt * 64.0 * nkb / (sm_flops * cand[i].speed) + 0.5e-6;
        const long long ctas = std::min(tiles, sms);
        const double cost = (double)((tiles + ctas - 1) / ctas) * unit_s;
        if (i == 0 || cost < best_cost) best = cand[i].tile, best_cost = cost;
    }
    return best;
}

static_assert(TILE_COUNT == BR_GEMM_TILE_COUNT, "core/options.c names every wgmma tile");

/* The context's forced wgmma tile (option gemm_tile=<tile>[/<A source>]) and split-K
 * factor (gemm_splitk, within the workspace the op reserved; 1 = none), where set;
 * unset, the picker's stand. */
void option_overrides(const br_ctx *ctx, WgmmaTile *tile, WgmmaASource *src, int *splits) {
    static const WgmmaASource asrc[BR_GEMM_ASRC_COUNT] = {A_SMEM, A_REG2, A_REG4};
    const br_options &o = ctx->opt;
    if (o.gemm_tile >= 0) *tile = (WgmmaTile)o.gemm_tile;
    if (o.gemm_asrc >= 0) *src = asrc[o.gemm_asrc];
    if (o.gemm_splitk > 0) *splits = o.gemm_splitk;
}

/* What ran, for br_ctx_last_kernel: "wgmma 128x192/reg4 split 2 (mm_bits)". */
static void note_kernel(br_ctx *ctx, const char *family, const char *name, WgmmaTile tile,
                        WgmmaASource src, int splits) {
    if (tile == TILE_AUTO)
        snprintf(ctx->kernel, sizeof ctx->kernel, "%s (%s)", family, name);
    else
        snprintf(ctx->kernel, sizeof ctx->kernel, "%s %s/%s split %d (%s)", family,
                 tile_name(tile), src == A_AUTO ? "-" : asource_name(src), splits, name);
}

/* The resolved problem of an op's arguments (no split, no staging). */
static Problem problem_of(const br_mm_args &args, PlaneKind kind) {
    Problem p;
    p.act = static_cast<const uint16_t *>(br_ptr(args.act));
    p.plane = br_ptr(args.plane);
    p.out = args.out ? static_cast<float *>(br_ptr(args.out)) + args.g.ocol : nullptr;
    p.colscale = args.g.colscale ? static_cast<const float *>(br_ptr(args.g.colscale)) : nullptr;
    p.c = args.g.c ? static_cast<const float *>(br_ptr(args.g.c)) + args.g.ocol : nullptr;
    p.ldo = (long long)args.g.ldo;
    /* lda = 0 means k, as the front-end resolves it (bench_gemm calls run() directly) */
    p.lda = (long long)(args.g.lda ? args.g.lda : args.g.k);
    p.m = (int)args.g.m, p.n = (int)args.g.n, p.k = (int)args.g.k;
    p.words = kind == PLANE_ROWS ? p.k / 32 : kind == PLANE_COLS ? (p.n + 31) / 32 : 0;
    p.kind = kind;
    p.oscale = args.g.oscale;
    p.beta = args.g.c ? args.g.beta : 0.0f;
    p.splits = 1;
    p.ws = nullptr;
    p.ws_bytes = 0;
    return p;
}

/* The family a problem runs on: AUTO resolved by the context's option and the device
 * (wgmma where it can), SIMPLE for operands not 16-byte aligned; BR_E_UNSUPPORTED
 * for a forced wgmma where there is none. */
static br_status pick_family(br_ctx *ctx, const Problem &p, const char *name, Family *family) {
    br_cuda *s = br_cuda_state(ctx);
    Family f = *family;
    if (f == FAMILY_AUTO)
        f = ctx->opt.gemm_kernel == 1   ? FAMILY_MMA
            : ctx->opt.gemm_kernel == 2 ? FAMILY_WGMMA
            : s->has_wgmma              ? FAMILY_WGMMA
                                        : FAMILY_MMA;
    if (f == FAMILY_WGMMA && !s->has_wgmma)
        return br_fail(ctx, BR_E_UNSUPPORTED,
                       "%s: the wgmma kernels (option gemm=wgmma) need a compute capability "
                       "9.0 GPU and sm_90a code; cuda:%d is sm_%d and this build %s sm_90a code",
                       name, s->device, s->cc, br_cuda_built_wgmma() ? "has" : "has no");
    /* 16-byte loads (cp.async, TMA) need 16-byte aligned operand rows: the base and
     * the act row stride (plane rows are k·2 bytes apart, k % 32 == 0) */
    if (f == FAMILY_SIMPLE || !aligned16(p.act) || p.lda % 8 != 0 ||
        (p.kind == PLANE_F16 && !aligned16(p.plane)))
        f = FAMILY_SIMPLE;
    *family = f;
    return BR_OK;
}

br_status run(br_ctx *ctx, const br_mm_args &args, PlaneKind kind, Family family, WgmmaTile tile,
              WgmmaASource src) {
    const char *name = kind == PLANE_F16 ? "mm" : "mm_bits";
    Problem p = problem_of(args, kind);
    return run_problem(ctx, p, args.ws_bytes, name, family, tile, src);
}

/* The wgmma tile, A source and split-K factor run_problem takes for p: TILE_AUTO /
 * A_AUTO the pick, then the context's options; a split (*splits > 1) only where
 * ws_bytes, the workspace the op reserved, holds its partials (else 1). */
static void plan_wgmma(br_ctx *ctx, const Problem &p, size_t ws_bytes, WgmmaTile *tile,
                       WgmmaASource *src, int *splits) {
    Problem q = p;
    q.ws_bytes = ws_bytes;
    *splits = 1;
    if (*tile == TILE_AUTO || *src == A_AUTO) {
        WgmmaTile t;
        WgmmaASource a;
        pick_wgmma(q, br_cuda_state(ctx)->sm_count, &t, &a, *tile == TILE_AUTO ? splits : nullptr);
        if (*tile == TILE_AUTO) *tile = t;
        if (*src == A_AUTO) *src = a;
    }
    option_overrides(ctx, tile, src, splits);
    const int nkb = (p.k + 63) / 64;
    if (*splits > nkb) *splits = nkb;
    if (*splits > 1 && (*tile < 0 || *tile >= TILE_COUNT ||
                        split_ws_bytes(*splits, (p.m + tile_tokens(*tile) - 1) /
                                                    tile_tokens(*tile) * tile_tokens(*tile),
                                       p.n) > ws_bytes))
        *splits = 1;
}

/* run() on a resolved problem; ws_bytes: the workspace the op reserved (split-K). */
br_status run_problem(br_ctx *ctx, Problem &p, size_t ws_bytes, const char *name, Family family,
                      WgmmaTile tile, WgmmaASource src) {
    const PlaneKind kind = p.kind;
    BR_TRY(pick_family(ctx, p, name, &family));
    if (family == FAMILY_SIMPLE) {
        note_kernel(ctx, "simple", name, TILE_AUTO, A_AUTO, 1);
        return launch_simple(ctx, p);
    }
    if (family == FAMILY_MMA) {
        note_kernel(ctx, "mma", name, TILE_AUTO, A_AUTO, 1);
        return launch_mma(ctx, p);
    }
    p.ws_bytes = ws_bytes;
    int splits;
    plan_wgmma(ctx, p, ws_bytes, &tile, &src, &splits);
    if (splits > 1) { /* the partials' room, as plan_wgmma found it in ws_bytes */
        const int bt = tile_tokens(tile);
        const size_t need = split_ws_bytes(splits, (p.m + bt - 1) / bt * bt, p.n);
        void *ws = nullptr;
        BR_TRY(br_cuda_workspace(ctx, need, &ws));
        p.ws = static_cast<float *>(ws);
        p.ws_bytes = need;
        p.splits = splits;
    }
    note_kernel(ctx, p.mn ? "wgmma-mn" : "wgmma", name, tile, p.mn ? A_SMEM : src, splits);
    if (p.mn) return launch_wgmma_f16_mn(ctx, p, tile);
    switch (kind) {
    case PLANE_F16: return launch_wgmma_f16(ctx, p, tile, src);
    case PLANE_ROWS: return launch_wgmma_rows(ctx, p, tile, src);
    case PLANE_COLS: return launch_wgmma_cols(ctx, p, tile, src);
    }
    return br_fail(ctx, BR_E_ARG, "%s: unknown plane kind %d", name, (int)kind);
}

/* The problem of a staged product, staging outputs included. */
static Problem stage_problem(const br_mm_stage_args &a) {
    const size_t m = a.mm.g.m;
    Problem p = problem_of(a.mm, PLANE_F16);
    p.o16 = static_cast<uint16_t *>(br_ptr(a.dst));
    p.o16t = a.dst_t ? static_cast<uint16_t *>(br_ptr(a.dst_t)) : nullptr;
    p.ld16 = (long long)a.ld;
    p.rows16 = (int)br_pad_rows(m);
    p.s16 = a.scale;
    return p;
}

/* Whether a staged product with an f16 c runs in one kernel, on the EPI_STAGE16 kernel (the
 * f16 c of a whole tile loaded under its main loop, the f16 output written over it):
 * where out is not kept, no transposed output is asked for and the operands suit
 * TMA. Option mm_stage16=0 runs the unfused path instead (for checking). On success
 * *tile holds the tile. */
static bool stage16_fused(br_ctx *ctx, const Problem &p, WgmmaTile *tile) {
    if (!ctx->opt.mm_stage16) return false;
    Family f = FAMILY_AUTO;
    if (pick_family(ctx, p, "mm_stage", &f) != BR_OK || f != FAMILY_WGMMA || !stage16_aligned(p))
        return false;
    WgmmaASource src;
    int splits = 1;
    pick_wgmma(p, br_cuda_state(ctx)->sm_count, tile, &src);
    option_overrides(ctx, tile, &src, &splits);
    return true;
}

} // namespace br_gemm_cuda

/* An f16 c: the EPI_STAGE16 kernel where it applies (stage16_fused), else the plain
 * product and the staging pass applying c. An f32 c: always the latter. */
static bool c_is_f16(const br_mm_stage_args &a) { return br_buf_dtype(a.mm.g.c) == BR_F16; }

/* The problem of a staged product with an f16 c for the EPI_STAGE16 kernel. */
static br_gemm_cuda::Problem stage16_problem(const br_mm_stage_args &a) {
    br_gemm_cuda::Problem p = br_gemm_cuda::stage_problem(a);
    p.c = nullptr;
    p.c16 = static_cast<const uint16_t *>(br_ptr(a.mm.g.c));
    return p;
}

extern "C" int br_cuda_mm_stage_match(br_ctx *ctx, const br_op *ops) {
    (void)ctx;
    const br_mm_args &mm = ops[0].u.mm;
    const br_cvt_both_args &cb = ops[1].u.cvt_both;
    return mm.g.c && !mm.g.colscale && mm.g.ocol == 0 && mm.g.ldo == mm.g.n && cb.src == mm.out &&
           !cb.col && cb.col_group == 0 && cb.m == mm.g.m && cb.k == mm.g.n;
}

/* The staged product of a matched unit (MM, CVT_BOTH): mm.out NULL where the unit
 * does not keep it (the unit transient). */
static br_mm_stage_args stage_of(br_ctx *ctx, const br_op *ops) {
    br_mm_stage_args a;
    a.mm = ops[0].u.mm;
    if (br_is_unit_transient(ctx, a.mm.out)) a.mm.out = nullptr;
    const br_cvt_both_args &cb = ops[1].u.cvt_both;
    a.dst = cb.dst;
    a.dst_t = cb.dst_t;
    a.ld = cb.ld;
    a.scale = cb.scale;
    return a;
}

extern "C" size_t br_cuda_mm_stage_ws(br_ctx *ctx, const br_op *ops) {
    const br_mm_stage_args a = stage_of(ctx, ops);
    br_gemm_cuda::WgmmaTile tile;
    if (a.mm.out || (c_is_f16(a) && br_gemm_cuda::stage16_fused(ctx, stage16_problem(a), &tile)))
        return 0;
    return a.mm.g.m * a.mm.g.n * sizeof(float); /* room for the product */
}

extern "C" br_status br_cuda_mm_stage(br_ctx *ctx, const br_op *ops, size_t) {
    using namespace br_gemm_cuda;
    const br_mm_stage_args a = stage_of(ctx, ops);
    const size_t m = a.mm.g.m, n = a.mm.g.n;
    const bool c16 = c_is_f16(a);
    uint16_t *dst = static_cast<uint16_t *>(br_ptr(a.dst));
    uint16_t *dst_t = a.dst_t ? static_cast<uint16_t *>(br_ptr(a.dst_t)) : nullptr;
    if (c16) {
        const Problem staged = stage16_problem(a);
        WgmmaTile tile;
        if (stage16_fused(ctx, staged, &tile)) {
            note_kernel(ctx, "wgmma stage16", "mm_stage", tile, A_SMEM, 1);
            return launch_wgmma_f16_stage16(ctx, staged, tile);
        }
    } else if (a.mm.out) { /* the product with c in out, then staged */
        Problem p = problem_of(a.mm, PLANE_F16);
        BR_TRY(run_problem(ctx, p, 0, "mm_stage", FAMILY_AUTO, TILE_AUTO, A_AUTO));
        return br_cuda_cvt_both_ptr(ctx, p.out, nullptr, dst, dst_t, m, n, a.ld, a.scale, nullptr,
                                    1.0f, 0.0f);
    }
    /* The plain product (acc exactly: oscale 1, no c) in out, or the workspace when out
     * is not kept; the staging pass applies c's epilogue, reading c there instead of in
     * the GEMM (whose f32-c epilogue does not overlap its main loop). With an f16 c and
     * out kept, the pass also writes the f32 result to out. */
    br_mm_args plain_args = a.mm;
    plain_args.g.c = nullptr;
    Problem plain = problem_of(plain_args, PLANE_F16);
    plain.oscale = 1.0f;
    plain.beta = 0.0f;
    if (!plain.out) {
        void *ws = nullptr;
        BR_TRY(br_cuda_workspace(ctx, m * n * sizeof(float), &ws));
        plain.out = static_cast<float *>(ws);
    }
    BR_TRY(run_problem(ctx, plain, 0, "mm_stage", FAMILY_AUTO, TILE_AUTO, A_AUTO));
    const float alpha = a.mm.g.oscale, beta = a.mm.g.beta;
    if (c16)
        return br_cuda_cvt_both_res16(ctx, plain.out, dst, dst_t, m, n, a.ld, a.scale,
                                      static_cast<const uint16_t *>(br_ptr(a.mm.g.c)), alpha, beta,
                                      a.mm.out ? plain.out : nullptr);
    return br_cuda_cvt_both_ptr(ctx, plain.out, nullptr, dst, dst_t, m, n, a.ld, a.scale,
                                static_cast<const float *>(br_ptr(a.mm.g.c)), alpha, beta);
}

extern "C" br_status br_cuda_mm(br_ctx *ctx, const br_op *op) {
    if (op->u.mm.g.c && br_buf_dtype(op->u.mm.g.c) == BR_F16)
        return br_fail(ctx, BR_E_UNSUPPORTED,
                       "mm: an f16 c runs only staged (br_mm_stage's fusion), not alone");
    return br_gemm_cuda::run(ctx, op->u.mm, br_gemm_cuda::PLANE_F16, br_gemm_cuda::FAMILY_AUTO,
                             br_gemm_cuda::TILE_AUTO);
}

/* MM_TN (out = actᵀ·plane, act [k][lda] and plane [k][ldp]): the MN-major wgmma
 * kernels where they run (Hopper, 16-byte aligned bases and rows); elsewhere both
 * operands transposed into the workspace ([m][k] and [n][k]) for the K-major path.
 * Option mm_tn=copy takes the second way anywhere (tests). */
namespace {
bool mm_tn_direct(br_ctx *ctx, const br_mm_args &a) {
    if (ctx->opt.mm_tn_copy) return false;
    br_cuda *s = br_cuda_state(ctx);
    const bool wgmma = ctx->opt.gemm_kernel == 2 || (ctx->opt.gemm_kernel == 0 && s->has_wgmma);
    return wgmma && s->has_wgmma && br_gemm_cuda::aligned16(br_ptr(a.act)) &&
           br_gemm_cuda::aligned16(br_ptr(a.plane)) && a.g.lda % 8 == 0 && a.ldp % 8 == 0;
}
size_t mm_tn_copy_bytes(const br_mm_args &a) { return (a.g.m + a.g.n) * a.g.k * sizeof(uint16_t); }

/* dst [cols][rows] = srcᵀ, src [rows][lds] f16: 32 × 32 tiles through shared memory */
__global__ void __launch_bounds__(256)
    transpose_f16_kernel(const uint16_t *src, long long lds, uint16_t *dst, int rows, int cols) {
    __shared__ uint16_t tile[32][33];
    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    for (int y = threadIdx.y; y < 32; y += 8) {
        const int r = r0 + y, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[y][threadIdx.x] = src[(long long)r * lds + c];
    }
    __syncthreads();
    for (int y = threadIdx.y; y < 32; y += 8) {
        const int c = c0 + y, r = r0 + threadIdx.x;
        if (r < rows && c < cols) dst[(long long)c * rows + r] = tile[threadIdx.x][y];
    }
}

br_status transpose_f16(br_ctx *ctx, const uint16_t *src, long long lds, uint16_t *dst, int rows,
                        int cols) {
    const dim3 grid((unsigned)((cols + 31) / 32), (unsigned)((rows + 31) / 32)), block(32, 8);
    if (grid.y > 65535)
        return br_fail(ctx, BR_E_UNSUPPORTED, "mm_tn: k = %d is too long for the transpose", rows);
    transpose_f16_kernel<<<grid, block, 0, br_cuda_state(ctx)->stream>>>(src, lds, dst, rows, cols);
    BR_CUDA_LAUNCHED(ctx, "transpose_f16_kernel");
    return BR_OK;
}
} // namespace

extern "C" size_t br_cuda_mm_tn_ws(br_ctx *ctx, const br_mm_args *a) {
    return mm_tn_direct(ctx, *a) ? 0 : mm_tn_copy_bytes(*a);
}

extern "C" br_status br_cuda_mm_tn(br_ctx *ctx, const br_op *op) {
    using namespace br_gemm_cuda;
    const br_mm_args &a = op->u.mm;
    Problem p = problem_of(a, PLANE_F16);
    if (mm_tn_direct(ctx, a)) {
        p.mn = true;
        p.lda = (long long)a.g.lda;
        p.ldp = (long long)a.ldp;
        return run_problem(ctx, p, a.ws_bytes, "mm_tn", FAMILY_WGMMA, TILE_AUTO, A_AUTO);
    }
    void *ws = nullptr;
    BR_TRY(br_cuda_workspace(ctx, mm_tn_copy_bytes(a), &ws));
    uint16_t *act_t = static_cast<uint16_t *>(ws), *plane_t = act_t + a.g.m * a.g.k;
    BR_TRY(transpose_f16(ctx, p.act, (long long)a.g.lda, act_t, p.k, p.m));
    BR_TRY(transpose_f16(ctx, static_cast<const uint16_t *>(p.plane), (long long)a.ldp, plane_t,
                         p.k, p.n));
    p.act = act_t;
    p.plane = plane_t;
    p.lda = p.k;
    /* no split-K: the workspace holds the copies */
    return run_problem(ctx, p, 0, "mm_tn", FAMILY_AUTO, TILE_AUTO, A_AUTO);
}

/* Two MM_TN products in one launch of the MN-major plain kernel where each would run
 * on it unsplit and plain with the same k, the second's tiles after the first's:
 * M_U's last wave leaves SMs idle that N_V's tiles then fill. Option mm_tn2=0 (for
 * checking) leaves them to run as MM_TN each, in turn. The two outputs are apart
 * from each other and from the other's operands (br_mm_tn2 checked the unit). */
static bool tn_pair_problems(br_ctx *ctx, const br_op *ops, br_gemm_cuda::Problem p[2]) {
    using namespace br_gemm_cuda;
    const br_mm_args &m0 = ops[0].u.mm, &m1 = ops[1].u.mm;
    bool pair = ctx->opt.mm_tn2 && m0.g.k == m1.g.k;
    for (int i = 0; i < 2 && pair; i++) {
        const br_mm_args &m = ops[i].u.mm;
        p[i] = problem_of(m, PLANE_F16);
        p[i].mn = true;
        p[i].lda = (long long)m.g.lda;
        p[i].ldp = (long long)m.ldp;
        pair = mm_tn_direct(ctx, m) && plain_problem(p[i]);
    }
    return pair;
}

extern "C" int br_cuda_mm_tn_pair_match(br_ctx *ctx, const br_op *ops) {
    br_gemm_cuda::Problem p[2];
    return tn_pair_problems(ctx, ops, p);
}

extern "C" br_status br_cuda_mm_tn_pair(br_ctx *ctx, const br_op *ops, size_t) {
    using namespace br_gemm_cuda;
    Problem p[2];
    tn_pair_problems(ctx, ops, p);
    WgmmaTile tile = pick_wgmma_pair(p[0], p[1], br_cuda_state(ctx)->sm_count);
    WgmmaASource src = A_SMEM;
    int splits = 1; /* gemm_splitk's factor: not used here */
    option_overrides(ctx, &tile, &src, &splits);
    note_kernel(ctx, "wgmma-mn pair", "mm_tn2", tile, A_SMEM, 1);
    return launch_wgmma_f16_mn(ctx, p[0], tile, &p[1]);
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
