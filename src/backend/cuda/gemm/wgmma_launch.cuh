/* The host side of the wgmma kernels: the tensor maps, the persistent grid, the
 * launch of one instantiation (launch_wgmma_shape) and the choice of instantiation by
 * tile and A source (launch_wgmma_asets / _kind / _mn), which the per-plane-kind
 * files instantiate. */
#ifndef BR_BACKEND_CUDA_GEMM_WGMMA_LAUNCH_CUH
#define BR_BACKEND_CUDA_GEMM_WGMMA_LAUNCH_CUH

#include "backend/cuda/gemm/wgmma_kernel.cuh"

namespace br_gemm_cuda {

/* EPI_STAGE16's: an f16 c with 16-byte rows (ldo, n multiples of 8), no f32 out, no
 * transposed output, o16 with 16-byte rows; every base 16-byte aligned. */
inline bool stage16_aligned(const Problem &p) {
    return p.c16 && !p.out && !p.o16t && p.o16 && (uintptr_t)p.c16 % 16 == 0 && p.ldo % 8 == 0 &&
           p.n % 8 == 0 && (uintptr_t)p.o16 % 16 == 0 && p.ld16 % 8 == 0;
}

/* Whether a problem is the plain product out = oscale·act·planeᵀ (no colscale, no
 * c, no split-K): it runs the kFullEpi = false kernels. */
inline bool plain_problem(const Problem &p) {
    return p.colscale == nullptr && p.c == nullptr && p.splits <= 1;
}

#ifdef BR_WGMMA_TRACE
/* Debugging builds (-DBR_WGMMA_TRACE): the kernels with epilogue BITRANK_TRACE_EPI
 * (a number), of n BITRANK_TRACE_N (any where unset) and MN-major only with
 * BITRANK_TRACE_MN=1, stamp their phases into this file's (translation unit's)
 * buffer; at exit its last contents go to BITRANK_TRACE_FILE (default
 * wgmma-trace.txt), one line per consumer and tile: cta consumer tile stamps 0..6.
 * A device array, no allocation: the first launch may be in a graph capture. */
static bool trace_used = false;
static void trace_dump() {
    static long long h[BR_TRACE_CTAS * 2 * BR_TRACE_TILES * BR_TRACE_STAMPS];
    if (cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpyFromSymbol(h, br_trace_buf, sizeof h) != cudaSuccess)
        return;
    const char *f = getenv("BITRANK_TRACE_FILE");
    FILE *o = fopen(f ? f : "wgmma-trace.txt", "w");
    if (!o) return;
    const long long *t = h;
    for (int i = 0; i < BR_TRACE_CTAS * 2 * BR_TRACE_TILES; i++, t += BR_TRACE_STAMPS) {
        if (!t[0]) continue;
        fprintf(o, "%d %d %d", i / (2 * BR_TRACE_TILES), i / BR_TRACE_TILES % 2,
                i % BR_TRACE_TILES);
        for (int st = 0; st < BR_TRACE_STAMPS; st++)
            fprintf(o, " %lld", t[st]);
        fprintf(o, "\n");
    }
    fclose(o);
}
static int trace_flag(int epi, int n, bool mn) {
    const char *e = getenv("BITRANK_TRACE_EPI"), *en = getenv("BITRANK_TRACE_N");
    const char *em = getenv("BITRANK_TRACE_MN");
    if (!e || atoi(e) != epi || (en && atoi(en) != n) || (em && atoi(em) != 0) != mn) return 0;
    if (!trace_used) trace_used = true, atexit(trace_dump);
    return 1;
}
#endif

/* One launch of problem p, and with p2 (MN-major plain kernels only: both problems
 * plain, MN-major, the same k) of p2 too, its tiles after p's. */
template <int kKind, int kWgM, int kBT, int kASets, int kEpi, bool kMN = false>
br_status launch_wgmma_shape(br_ctx *ctx, const Problem &p, const Problem *p2 = nullptr) {
    constexpr bool kFullEpi = kEpi != EPI_PLAIN, kStage16 = kEpi == EPI_STAGE16;
    using Cfg = WgmmaCfg<kKind, kWgM, kBT, kASets, epi_box_sets(kEpi)>;
    br_cuda *s = br_cuda_state(ctx);
    auto kernel = wgmma_gemm_kernel<kKind, kWgM, kBT, kASets, kEpi, kMN>;
    if (kMN != p.mn)
        return br_fail(ctx, BR_E_STATE, "mm: operand layout does not match the kernel's");
    if (kStage16 && (p.splits > 1 || !stage16_aligned(p)))
        return br_fail(ctx, BR_E_STATE, "mm_stage: operands not fit for the f16-c staging kernel");
    static std::atomic<uint64_t> attr_set{0}; /* per device: the attribute is per device */
    const uint64_t dev_bit = s->device >= 0 && s->device < 64 ? 1ull << s->device : 0;
    if (!dev_bit || !(attr_set.load() & dev_bit)) {
        BR_CUDA_TRY(ctx, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              Cfg::kSmem));
        attr_set.fetch_or(dev_bit);
    }
    if (p2 &&
        (!kMN || kFullEpi || !p2->mn || !plain_problem(p) || !plain_problem(*p2) || p2->k != p.k))
        return br_fail(ctx, BR_E_STATE, "mm_tn2: the two products do not fit one launch");
    CUtensorMap tm_act, tm_plane, tm_out, tm_c, tm_16, tm_act2, tm_plane2, tm_out2;
    memset(&tm_act2, 0, sizeof tm_act2);
    memset(&tm_plane2, 0, sizeof tm_plane2);
    memset(&tm_out2, 0, sizeof tm_out2);
    memset(&tm_plane, 0, sizeof tm_plane);
    memset(&tm_out, 0, sizeof tm_out);
    memset(&tm_c, 0, sizeof tm_c);
    memset(&tm_16, 0, sizeof tm_16);
    if (kMN) { /* act [k][lda], plane [k][ldp]: [64 k][64] boxes, the tokens or rows inner */
        auto operand_maps = [&](const Problem &q, CUtensorMap *ma, CUtensorMap *mp) -> br_status {
            BR_TRY(encode_tmap_2d(ctx, ma, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, q.act, (uint64_t)q.m,
                                  (uint64_t)q.k, (uint64_t)q.lda * 2, 64, Cfg::kBK));
            return encode_tmap_2d(ctx, mp, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, q.plane, (uint64_t)q.n,
                                  (uint64_t)q.k, (uint64_t)q.ldp * 2, 64, Cfg::kBK);
        };
        BR_TRY(operand_maps(p, &tm_act, &tm_plane));
        if (p2) BR_TRY(operand_maps(*p2, &tm_act2, &tm_plane2));
    } else {
        BR_TRY(encode_tmap_2d(ctx, &tm_act, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, p.act, (uint64_t)p.k,
                              (uint64_t)p.m, (uint64_t)p.lda * 2, Cfg::kBK, kBT));
        if (kKind == PLANE_F16)
            BR_TRY(encode_tmap_2d(ctx, &tm_plane, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, p.plane,
                                  (uint64_t)p.k, (uint64_t)p.n, (uint64_t)p.k * 2, Cfg::kBK,
                                  Cfg::kBJ));
    }
    WgmmaArgs a;
    a.bits = kKind == PLANE_F16 ? nullptr : static_cast<const uint32_t *>(p.plane);
    a.colscale = p.colscale;
    a.c = p.c;
    a.beta = p.beta;
    a.m = p.m, a.n = p.n, a.k = p.k, a.words = p.words;
    a.o16 = p.o16, a.ld16 = p.ld16, a.rows16 = p.rows16, a.s16 = p.s16;
    /* c's loads three quarters into the main loop. On the H200 (bench_layer):
     * 0 % 0.2776 / 0.2337 / 0.4671 ms, 33 % 0.2762 / 0.2332 / 0.4675, 66 % 0.2761 /
     * 0.2340 / 0.4619, 90 % 0.2753 / 0.2331 / 0.4619. */
    a.c_at = 0;
    a.c16 = p.c16;
    a.ldc16 = p.ldo;
    if (kStage16) {
        const int pct = 75;
        a.c_at = (int)((long long)((p.k + Cfg::kBK - 1) / Cfg::kBK) * pct / 100);
    }
    /* the staging's tiles also cover its outputs' pads (zero operands there: +0) */
    const int grid_m = kStage16 ? std::max(p.m, p.rows16) : p.m;
    const int grid_n = kStage16 ? std::max(p.n, (int)p.ld16) : p.n;
    a.tiles_j = (grid_n + Cfg::kBJ - 1) / Cfg::kBJ;
    const int tiles_t = (grid_m + kBT - 1) / kBT;
    a.tiles = a.tiles_j * tiles_t;
    a.oscale = p.oscale;
    const int nkb = (p.k + Cfg::kBK - 1) / Cfg::kBK;
    /* k blocks past the end (splits not dividing nkb) read zero-filled act: adding 0 */
    a.splits = p.splits > 1 ? p.splits : 1;
    a.nkb_unit = (nkb + a.splits - 1) / a.splits;
    a.mpad = tiles_t * kBT;
    const long long ldw = (p.n + 3) / 4 * 4; /* workspace rows: 16-byte multiples */
    if (a.splits > 1) {
        const size_t need = split_ws_bytes(a.splits, a.mpad, p.n);
        if (!p.ws || need > p.ws_bytes)
            return br_fail(ctx, BR_E_STATE, "mm: split-K needs %zu bytes of workspace, has %zu",
                           need, p.ws ? p.ws_bytes : (size_t)0);
        /* raw sums: split s at rows s·mpad.. of [splits·mpad][ldw] (ldw·4 % 16 == 0) */
        a.out = p.ws;
        a.ldo = ldw;
        a.tma_store = 1;
        BR_TRY(encode_tmap_2d(ctx, &tm_out, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.ws, (uint64_t)ldw,
                              (uint64_t)a.splits * a.mpad, (uint64_t)ldw * 4, 32, Cfg::kEpiRows));
    } else {
        a.out = p.out;
        a.ldo = p.ldo;
        /* TMA stores clip the inner dimension at 16 bytes: n·4 must be a multiple */
        auto tma_ok = [](const Problem &q) {
            return (uintptr_t)q.out % 16 == 0 && q.ldo % 4 == 0 && q.n % 4 == 0 &&
                   (uintptr_t)q.c % 16 == 0; /* c's rows are read as float4 */
        };
        a.tma_store = tma_ok(p) && (!p2 || tma_ok(*p2));
        if (a.tma_store && p2)
            BR_TRY(encode_tmap_2d(ctx, &tm_out2, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p2->out,
                                  (uint64_t)p2->n, (uint64_t)p2->m, (uint64_t)p2->ldo * 4, 32,
                                  Cfg::kEpiRows));
        if (a.tma_store && p.out)
            BR_TRY(encode_tmap_2d(ctx, &tm_out, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.out,
                                  (uint64_t)p.n, (uint64_t)p.m, (uint64_t)p.ldo * 4, 32,
                                  Cfg::kEpiRows));
        /* EPI_STAGE16: [tokens][64] f16 boxes, 128-byte swizzle, c's boxes the output's
         * geometry (written over in place) */
        if (kStage16) {
            BR_TRY(encode_tmap_2d(ctx, &tm_16, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, p.o16,
                                  (uint64_t)p.ld16, (uint64_t)p.rows16, (uint64_t)p.ld16 * 2, 64,
                                  Cfg::kEpiRows, CU_TENSOR_MAP_SWIZZLE_128B));
            BR_TRY(encode_tmap_2d(ctx, &tm_c, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, p.c16, (uint64_t)p.n,
                                  (uint64_t)p.m, (uint64_t)p.ldo * 2, 64, Cfg::kEpiRows,
                                  CU_TENSOR_MAP_SWIZZLE_128B));
        }
        if (a.tma_store && p.c) /* c's boxes land where the epilogue writes out's */
            BR_TRY(encode_tmap_2d(ctx, &tm_c, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.c, (uint64_t)p.n,
                                  (uint64_t)p.m, (uint64_t)p.ldo * 4, 32, Cfg::kEpiRows));
    }
    a.tiles1 = a.tiles;
    a.tiles_j2 = 1, a.m2 = 0, a.n2 = 0, a.oscale2 = 1.0f, a.out2 = nullptr, a.ldo2 = 0;
    if (p2) {
        a.tiles_j2 = (p2->n + Cfg::kBJ - 1) / Cfg::kBJ;
        a.tiles += a.tiles_j2 * ((p2->m + kBT - 1) / kBT);
        a.m2 = p2->m, a.n2 = p2->n, a.oscale2 = p2->oscale, a.out2 = p2->out, a.ldo2 = p2->ldo;
    }
    const int units = a.tiles * a.splits;
    if (!kFullEpi && (p.colscale || p.c || a.splits > 1))
        return br_fail(ctx, BR_E_STATE, "mm: the plain wgmma kernel got an epilogue");
    int grid = std::min(units, s->sm_count);
    /* option gemm_ctas=<c> caps the persistent grid, so that tests can make small
     * problems run many units per CTA */
    if (ctx->opt.gemm_ctas > 0) grid = std::min(grid, ctx->opt.gemm_ctas);
#ifdef BR_WGMMA_TRACE
    a.trace = trace_flag(kEpi, p.n, kMN);
#endif
    BR_CUDA_LAUNCH_PDL(ctx, s, "wgmma_gemm_kernel", kernel, grid, 384, Cfg::kSmem, tm_act, tm_plane,
                       tm_out, tm_c, tm_16, tm_act2, tm_plane2, tm_out2, a);
    if (a.splits > 1) return launch_reduce_splits(ctx, p, a.splits, a.mpad);
    return BR_OK;
}

/* The A source of the bitmap kernels: 0 = expanded into shared memory by the
 * producer, 2 or 4 = register fragments with that many sets in flight (4 only
 * beside fewer than 128 accumulators: ptxas would serialize the wgmmas). */
template <int kKind, int kWgM, int kBT, int kEpi>
br_status launch_wgmma_asets(br_ctx *ctx, const Problem &p, WgmmaASource src) {
    constexpr bool kBits = kKind != PLANE_F16;
    constexpr int kReg2 = kBits ? 2 : 0, kReg4 = kBits && kWgM * kBT < 256 ? 4 : 0;
    if (!kBits || src == A_SMEM) return launch_wgmma_shape<kKind, kWgM, kBT, 0, kEpi>(ctx, p);
    if (src == A_REG2) return launch_wgmma_shape<kKind, kWgM, kBT, kReg2, kEpi>(ctx, p);
    if constexpr (kReg4 != 0)
        if (src == A_REG4) return launch_wgmma_shape<kKind, kWgM, kBT, kReg4, kEpi>(ctx, p);
    return br_fail(ctx, BR_E_UNSUPPORTED, "mm_bits: A source %d is not built for this tile",
                   (int)src);
}

/* The kernels of one plane kind and epilogue: EPI_PLAIN for the plain product,
 * EPI_FULL for colscale, c or split-K (see the top of this file). */
template <int kKind, int kEpi>
br_status launch_wgmma_kind(br_ctx *ctx, const Problem &p, WgmmaTile tile, WgmmaASource src) {
    switch (tile) {
    case TILE_256x128: return launch_wgmma_asets<kKind, 2, 128, kEpi>(ctx, p, src);
    case TILE_256x112: return launch_wgmma_asets<kKind, 2, 112, kEpi>(ctx, p, src);
    case TILE_128x256: return launch_wgmma_asets<kKind, 1, 256, kEpi>(ctx, p, src);
    case TILE_128x128: return launch_wgmma_asets<kKind, 1, 128, kEpi>(ctx, p, src);
    case TILE_128x192: return launch_wgmma_asets<kKind, 1, 192, kEpi>(ctx, p, src);
    case TILE_256x96: return launch_wgmma_asets<kKind, 2, 96, kEpi>(ctx, p, src);
    default: break;
    }
    return br_fail(ctx, BR_E_ARG, "mm: unknown wgmma tile %d", (int)tile);
}

/* The MN-major kernels (p.mn: MM_TN, both operands k rows first) of one epilogue:
 * the tiles whose tokens are whole 64-wide boxes. */
template <int kEpi>
br_status launch_wgmma_mn(br_ctx *ctx, const Problem &p, WgmmaTile tile,
                          const Problem *p2 = nullptr) {
    switch (tile) {
    case TILE_256x128: return launch_wgmma_shape<PLANE_F16, 2, 128, 0, kEpi, true>(ctx, p, p2);
    case TILE_128x256: return launch_wgmma_shape<PLANE_F16, 1, 256, 0, kEpi, true>(ctx, p, p2);
    case TILE_128x128: return launch_wgmma_shape<PLANE_F16, 1, 128, 0, kEpi, true>(ctx, p, p2);
    case TILE_128x192: return launch_wgmma_shape<PLANE_F16, 1, 192, 0, kEpi, true>(ctx, p, p2);
    default: break;
    }
    return br_fail(ctx, BR_E_UNSUPPORTED, "mm_tn: no MN-major kernel for the %s tile",
                   tile_name(tile));
}

} // namespace br_gemm_cuda

#endif
