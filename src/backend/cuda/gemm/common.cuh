/* Shared by the GEMM kernels: the resolved problem a launcher receives, the
 * ±1 expansion of sign bits into f16 fragment registers, and thin wrappers of the
 * PTX both kernel families use (cp.async, ldmatrix, mma.sync). The Hopper-only PTX
 * (wgmma, TMA, mbarrier) lives in gemm/ptx.cuh and gemm/wgmma_kernel.cuh. */
#ifndef BR_BACKEND_CUDA_GEMM_COMMON_CUH
#define BR_BACKEND_CUDA_GEMM_COMMON_CUH

#include <stdint.h>

#include "backend/cuda/cuda_internal.h"

namespace br_gemm_cuda {

/* Where the plane operand comes from. */
enum PlaneKind {
    PLANE_F16 = 0,  /* f16 [n][k] */
    PLANE_ROWS = 1, /* bitmap u32 [n][k/32] */
    PLANE_COLS = 2, /* bitmap u32 [k][ceil(n/32)] */
};

/* One GEMM, out[i][j] = (oscale · Σ_kk act[i][kk] · plane[j][kk]) · colscale[j]
 * + beta · c[i][j] for i < m, j < n, with every pointer resolved to device memory. */
struct Problem {
    const uint16_t *act;   /* f16, row i at i·lda, k elements each */
    const void *plane;     /* per PlaneKind */
    float *out;            /* element [0][ocol] of the output; row stride ldo */
    const float *colscale; /* [n] or NULL */
    const float *c;        /* element [0][ocol] of c (row stride ldo) or NULL; may be out */
    long long ldo, lda;
    int m, n, k;
    int words; /* u32 words per bitmap row: k/32 (ROWS) or ceil(n/32) (COLS) */
    PlaneKind kind;
    float oscale, beta;
    int splits; /* split-K factor the wgmma kernels use (1: none) */
    float *ws;  /* split-K partials (ws_bytes of them) or NULL */
    size_t ws_bytes;
    /* MM_STAGE with an f16 c (EPI_STAGE16): c16 [m][ldo] instead of c */
    const uint16_t *c16 = nullptr;
    /* MM_TN: act [k][lda] and plane [k][ldp], k rows first (wgmma's MN-major
     * operands); out as always */
    bool mn = false;
    long long ldp = 0;
    /* MM_STAGE (launch_wgmma_f16_stage16): the result staged as f16(out·s16) into
     * o16 [rows16][ld16], +0 outside m × n; o16t: the op's transposed output (the
     * kernel runs only without one) */
    uint16_t *o16 = nullptr, *o16t = nullptr;
    long long ld16 = 0;
    int rows16 = 0;
    float s16 = 1.0f;
};

/* Workspace bytes of a split-K run: `splits` partial blocks of mpad (tokens padded to
 * the tile) rows of n floats rounded up to 4 (16-byte rows for TMA stores). */
inline size_t split_ws_bytes(int splits, int mpad, int n) {
    return (size_t)splits * (size_t)mpad * (size_t)((n + 3) / 4 * 4) * sizeof(float);
}

/* The epilogue of one output: (acc·oscale)·cs + beta·c, each product rounded (no
 * contraction). cs is colscale[j] (ignored without colscale); c_ij is read only with
 * c. A thread reads c[i][j] before it writes out[i][j] and no other thread touches
 * that element, so c may be out itself. */
__device__ __forceinline__ float epilogue_value(float acc, float oscale, bool has_cs, float cs,
                                                const float *c, long long idx, float beta) {
    float v = __fmul_rn(acc, oscale);
    if (has_cs) v = __fmul_rn(v, cs);
    if (c) v = __fadd_rn(v, __fmul_rn(beta, c[idx]));
    return v;
}

/* Kernel families and the Hopper tile shapes (see gemm/wgmma_kernel.cuh). */
enum Family { FAMILY_AUTO = 0, FAMILY_MMA = 1, FAMILY_WGMMA = 2, FAMILY_SIMPLE = 3 };
enum WgmmaTile {
    TILE_AUTO = -1,
    TILE_256x128 = 0, /* 256 plane rows × 128 tokens per CTA */
    TILE_256x112 = 1, /* 256 × 112: fills the last wave where 128 leaves it nearly empty */
    TILE_128x256 = 2, /* 128 × 256 */
    TILE_128x128 = 3, /* 128 × 128: more CTAs for narrow planes */
    TILE_128x192 = 4, /* 128 × 192: 4096 tokens × 768 plane rows fill 132 SMs in one wave */
    TILE_256x96 = 5,  /* 256 × 96: the same area, fewer plane-row tiles */
    TILE_COUNT = 6,
};

/* Where the Hopper bitmap kernels take the ±1 plane (wgmma's A operand) from. */
enum WgmmaASource {
    A_AUTO = -1,
    A_SMEM = 0, /* expanded into shared memory by the producer warpgroup */
    A_REG2 = 2, /* expanded into A-fragment registers, 2 sets in flight */
    A_REG4 = 4, /* the same, 4 sets */
};

/* Launchers: one per file (gemm/mma.cu, gemm/wgmma_*.cu). Each checks its
 * launch and returns a status with a message on failure. */
br_status launch_mma(br_ctx *ctx, const Problem &p);
br_status launch_simple(br_ctx *ctx, const Problem &p);
br_status launch_wgmma_f16(br_ctx *ctx, const Problem &p, WgmmaTile tile, WgmmaASource src);
br_status launch_wgmma_rows(br_ctx *ctx, const Problem &p, WgmmaTile tile, WgmmaASource src);
br_status launch_wgmma_cols(br_ctx *ctx, const Problem &p, WgmmaTile tile, WgmmaASource src);
/* The f16-plane kernels with the EPI_STAGE16 epilogue (p.c16, p.o16 set; no out, no
 * o16t). */
br_status launch_wgmma_f16_stage16(br_ctx *ctx, const Problem &p, WgmmaTile tile);
/* The MN-major f16 kernels (p.mn, MM_TN): tiles of 128, 192 or 256 tokens; with
 * p2 (MM_TN2), p2's product in the same launch, its tiles after p's (both plain, the
 * same k). */
br_status launch_wgmma_f16_mn(br_ctx *ctx, const Problem &p, WgmmaTile tile,
                              const Problem *p2 = nullptr);
/* out[i][j] = epilogue(Σ_s ws[s·mpad + i][j], s = 0, 1, … in order) for a split-K run
 * (gemm/dispatch.cu). */
br_status launch_reduce_splits(br_ctx *ctx, const Problem &p, int splits, int mpad);

/* The whole dispatch (gemm/dispatch.cu): family, tile and A source as given (AUTO: the
 * context's option, then the device and the shape decide). The benchmark calls it
 * directly to time each variant. */
br_status run(br_ctx *ctx, const br_mm_args &args, PlaneKind kind, Family family,
              WgmmaTile tile = TILE_AUTO, WgmmaASource src = A_AUTO);
/* run() on a problem of resolved device pointers (callers that hold no buffers: the
 * inference plan's prefill); ws_bytes is the workspace a split-K run may take (0:
 * none, so the call never allocates). */
br_status run_problem(br_ctx *ctx, Problem &p, size_t ws_bytes, const char *name, Family family,
                      WgmmaTile tile, WgmmaASource src);
/* The tile, A source and split-K factor AUTO picks for a problem on `sm_count`
 * multiprocessors: splits > 1 only where p.ws_bytes holds the partials (splits NULL:
 * never). */
void pick_wgmma(const Problem &p, int sm_count, WgmmaTile *tile, WgmmaASource *src,
                int *splits = nullptr);
/* The tile AUTO picks for two MN-major plain problems of the same k in one launch
 * (MM_TN2): pick_wgmma's cost over both problems' tiles together, no split. */
WgmmaTile pick_wgmma_pair(const Problem &p1, const Problem &p2, int sm_count);
/* Name of a tile ("256x128") and of an A source ("smem", "reg2"). */
const char *tile_name(WgmmaTile tile);
/* Tokens (act rows) per CTA tile: the "128" of "256x128". */
int tile_tokens(WgmmaTile tile);
const char *asource_name(WgmmaASource src);

/* ---------------------------------------------------------------- device helpers */

/* Two sign bits → a half2 of ±1: bit 0 of x → the low half, bit 1 → the high half
 * (bit 1 = +1.0 = 0x3C00, bit 0 = −1.0 = 0xBC00; only the sign bit differs). */
__device__ __forceinline__ uint32_t pm1_pair(uint32_t x) {
    return (((x & 3u) * 0x40008000u) & 0x80008000u) ^ 0xBC00BC00u;
}
/* Bit 0 of lo → the low half, bit 0 of hi → the high half. */
__device__ __forceinline__ uint32_t pm1_pair2(uint32_t lo, uint32_t hi) {
    return (((lo & 1u) << 15) | (hi << 31)) ^ 0xBC00BC00u;
}

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* cp.async of `bytes` (4 or 16) with zero fill: src_bytes = 0 reads nothing and
 * writes zeros. */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ uint2 lds64(uint32_t addr) {
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n"
                 : "=r"(v.x), "=r"(v.y)
                 : "r"(addr)
                 : "memory");
    return v;
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* d += a·b, one m16n8k16 tile, f16 operands, f32 accumulators. */
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

} // namespace br_gemm_cuda

#endif
