/* Internals of the CUDA inference plan (br_blr_infer_cuda, include/bitrank.h
 * "inference on a CUDA device"): the device state the host side (blr_infer_cuda.c)
 * builds and the kernels' launchers (src/backend/cuda/infer/) read, and the layouts
 * the host packs the signs into.
 *
 * The decode kernel runs the two sign products of every path as tensor-core
 * matrix-vector products, m16n8k16 (mma.sync): 16 sign rows × 16 inputs (the A
 * operand, expanded from bits in registers) times 16 inputs × 8 tokens (B: z or t
 * rounded to the activation type), f32 sums.
 *     phase 1: t_p [r] = ℓ_p ⊙ (S_V,pᵀ · z_p)     rows: latent index, K = n
 *     phase 2: y   [m] = Σ_p h_p ⊙ (S_U,p · t_p)  rows: outputs,      K = r per path
 * Rows come in tiles of 16 (BR_IC_TILE), K in units of 256 (BR_IC_UNIT: 16 mma k
 * steps), tokens in tiles of 8 (up to BR_IC_TT_MAX of them).
 *
 * Packed A of one (row tile, unit): u32 [32 lanes][4 words], 512 contiguous bytes, so
 * a warp reads it with one 16-byte load per lane. Lane l (g = l/4, c = l%4) holds in
 * word w, for k step kk = 4w + q/4 (q = 0..15) and fragment register i = q%4, the two
 * signs of A[row][col], A[row][col + 1] with row = g + 8·(i%2), col = 16·kk + 2c +
 * 8·(i/2) — mma's A fragment order — at bits 15 − q and 31 − q. A bit is 1 for −1
 * (the library's bitmaps have 1 for +1): then the register (word << q) & 0x80008000
 * | one (one = ±1's magnitude bits in both halves) is the fragment, two operations.
 * Signs past the matrix are 0 (+1): their inputs are zero or their rows unused. */
#ifndef BR_INFER_BLR_INFER_CUDA_H
#define BR_INFER_BLR_INFER_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "bitrank.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BR_IC_TILE 16      /* rows of a tile (mma M) */
#define BR_IC_UNIT 256     /* inputs of a unit: 16 k steps of 16 */
#define BR_IC_TT_MAX 4     /* token tiles of 8 a decode launch takes */
#define BR_IC_DECODE_MAX 32 /* tokens of one decode launch: BR_IC_TT_MAX · 8 */

/* One decode launch's geometry, chosen for a token-tile count and activation type
 * (br_ic_decode_setup). Phase 1: jobs of (path, k segment of seg1 units, up to rpc1
 * row tiles); ks1 segments per row tile. Phase 2: jobs of up to rpc2 row tiles, each
 * row tile's K cut into ks2 segments of seg2 units per path. */
typedef struct br_ic_launch {
    int grid; /* blocks: all co-resident (cooperative launch) */
    int ks1, seg1, rpc1;
    int rpc2, ks2, seg2;
} br_ic_launch;

/* The resident decode kernel (decode_resident.cu): units of signs a warp holds in
 * registers, phase 1's (a row tile's ku1 units over 8 warps) and phase 2's (items of
 * its block's job); its shared region's bytes (z's slices in phase 1; the items'
 * partials, then t's copy, in phase 2) and t's share of it. */
#define BR_IC_RES_U1 6
#define BR_IC_RES_U2 6
#define BR_IC_RES_REGION 102400
#define BR_IC_RES_T_BYTES (BR_IC_RES_REGION - 8 * BR_IC_RES_U2 * 512)

/* The resident kernel's geometry for one activation type (br_ic_resident_setup). */
typedef struct br_ic_resident {
    int grid; /* blocks, all co-resident; 0: the kernel does not take the plan */
    int upw1; /* phase-1 units a warp: ceil(ku1 / 8) */
    int rpc2; /* phase-2 row tiles a job */
} br_ic_resident;

/* The decode kernel's view of a plan (device pointers). */
typedef struct br_ic_dev {
    int m, n, r, paths;
    int rt1; /* phase-1 row tiles per path: ceil(r/16) */
    int ku1; /* phase-1 units: ceil(n/256) */
    int rt2; /* phase-2 row tiles: ceil(m/16) */
    int ku2; /* phase-2 units per path: ceil(r/256) */
    const uint32_t *bits1; /* S_V,pᵀ packed: [paths][rt1][ku1][32][4] */
    const uint32_t *bits2; /* S_U,p packed:  [rt2][paths][ku2][32][4] */
    const float *h, *l, *g; /* [paths][m], [paths][r], [paths][n] */
    float *part1;      /* phase-1 partial sums: [paths][rt1][ks1][tt][32][4], in the
                        * context's workspace (set at each launch) */
    uint32_t *tfrag;   /* t as B fragments: [paths][ku2·16][BR_IC_TT_MAX][32][2], pads 0 */
    uint16_t *tc;      /* t compact, for launches whose t fits a block's shared memory:
                        * [ntok][paths][rt1·16], in the context's workspace before the
                        * partials (set at each launch) */
    uint32_t *sync;    /* [paths·rt1] arrival counters, then the grid barrier's arrival
                        * counter (all 0 between runs) and generation word, then (from
                        * br_ic_res_count_word) the resident kernel's 64-bit arrival
                        * counters, one per type */
    br_ic_launch launch[2][BR_IC_TT_MAX]; /* [bf16][token tiles − 1] */
    br_ic_resident res[2];                /* [bf16] */
} br_ic_dev;

/* Words of the device arrays the host allocates for the decode kernel. */
size_t br_ic_bits1_words(const br_ic_dev *d);
size_t br_ic_bits2_words(const br_ic_dev *d);
size_t br_ic_tfrag_words(const br_ic_dev *d);
size_t br_ic_sync_words(const br_ic_dev *d);
/* The word of sync where the resident kernel's counter for type bf16 (0, 1) starts
 * (8-byte aligned). */
size_t br_ic_res_count_word(const br_ic_dev *d, int bf16);

/* The prefill path's view of a plan: its shape and scales. The plan keeps the signs
 * once, in the decode kernel's order (br_ic_dev's bits1, bits2); a pass unpacks them
 * into the bitmaps br_mm_bits takes, in the context's workspace beside the pass's
 * f16/f32 intermediates, so every plan of a context shares one scratch (the
 * workspace only grows, and a grown one's predecessor stays allocated for graphs
 * that captured it). A pass of ntok tokens lays out, each 256-byte aligned:
 *     bits_v u32 [paths][n32][r32/32]  S_V, rows past n zero (BR_BITS_COLS)
 *     bits_u u32 [paths][m][r32/32]    S_U (BR_BITS_ROWS)
 *     xs     f16 [paths][ntok][n32]    g_p ⊙ x
 *     t32    f32 [ntok][r]             one path's ℓ ⊙ (S_Vᵀ·xs)
 *     t16    f16 [paths][ntok][r32]
 *     y32    f32 [ntok][m] */
typedef struct br_ic_pre {
    int m, n, r, paths;
    int n32, r32;            /* n, r rounded up to 32 (the GEMMs' k) */
    const float *h, *l, *g;  /* as br_ic_dev's */
} br_ic_pre;

/* Largest token count one prefill pass takes. */
#define BR_IC_PREFILL_CHUNK 4096
/* The arrays of a prefill pass of ntok tokens, in the order above: their byte
 * offsets in the workspace (at[6]); returns the bytes the pass needs. */
size_t br_ic_prefill_layout(const br_ic_pre *p, size_t ntok, size_t at[6]);
/* Bytes of the compact t (br_ic_dev's tc) at the workspace's start; the partials
 * follow it. */
size_t br_ic_tc_bytes(const br_ic_dev *d);
/* Workspace bytes of the decode kernel: the compact t and the phase-1 partials, the
 * most any launch of the plan takes. */
size_t br_ic_decode_bytes(const br_ic_dev *d);

#ifdef BR_HAVE_CUDA
/* Choose d->launch for every token-tile count and type (occupancy of this device)
 * and reserve the context's workspace for the largest launch's partials, so decode
 * runs never allocate (a CUDA graph may capture them). */
br_status br_ic_decode_setup(br_ctx *ctx, br_ic_dev *d);
/* Choose d->res (occupancy of this device); called by br_ic_decode_setup. */
br_status br_ic_resident_setup(br_ctx *ctx, br_ic_dev *d);
/* Whether a launch of ntok tokens runs the resident kernel: up to 8 tokens, the plan's
 * per-warp work within BR_IC_RES_U1 and _U2 units, z's slices within the region
 * ((ntok + 1)·(upw1·256 + 16)·2 bytes a warp: a row a token and a zero row) and t's
 * copy within BR_IC_RES_T_BYTES ((ntok + 1)·(paths·ku2·256 + 16)·2). */
int br_ic_resident_fits(const br_ic_dev *d, br_act_type type, size_t ntok);
br_status br_ic_decode_resident(br_ctx *ctx, const br_ic_dev *d, br_act_type type, const void *x,
                                size_t ntok, const void *bias, void *y, const char **kernel);
/* One decode launch for 1..32 tokens on the context's stream; *kernel: its variant's
 * name ("decode_resident" where br_ic_resident_fits, else "decode_t_smem" where t fits
 * a block's shared memory, else "decode"). */
br_status br_ic_decode(br_ctx *ctx, const br_ic_dev *d, br_act_type type, const void *x,
                       size_t ntok, const void *bias, void *y, const char **kernel);
/* The prefill path for ntok ≤ BR_IC_PREFILL_CHUNK tokens (one pass) on the context's
 * stream, its scratch in the context's workspace (grown first where it is smaller). */
br_status br_ic_prefill(br_ctx *ctx, const br_ic_dev *d, const br_ic_pre *p, br_act_type type,
                        const void *x, size_t ntok, const void *bias, void *y);
#endif

#ifdef __cplusplus
}
#endif
#endif
