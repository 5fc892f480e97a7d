/* Internals of the CPU inference plan (br_blr_infer, include/bitrank.h "inference
 * on the CPU"): the packed sign layout the kernels share, the lookup tables, and
 * the kernel entry points of the portable and the AVX2 files.
 *
 * Every product the plan computes is one "sign stage": out [R] = S · z for a sign
 * matrix S {±1} [R][K] and a vector z [K]. A layer's path is two of them:
 *     stage 1: a [r] = S_Vᵀ · (g ⊙ x)     R = r, K = n
 *     stage 2: c [m] = S_U  · (ℓ ⊙ a)     R = m, K = r
 * and y = Σ_p h_p ⊙ c_p (+ bias).
 *
 * The inputs of a stage are cut into groups of 4 (BR_INF_GROUP); a group's four
 * signs of one row are a 4-bit index into that group's table of the 16 signed sums
 * ±z0 ± z1 ± z2 ± z3, so one lookup replaces four sign-multiply-adds. Groups come in
 * blocks of 8 (32 inputs, BR_INF_BLOCK): K is padded with zeros to a whole block, R
 * with rows of zero bits to a whole row block of 32 (BR_INF_ROWS).
 *
 * Packed signs of a stage, u8 [R/32][K/8][32]: byte (rb, q, t) is byte q of row
 * 32·rb + t's sign bits (bit i of the row = the sign of input i, 1 = +1), so its low
 * nibble indexes group 2q and its high nibble group 2q+1. A row block's 32 rows are
 * the 32 bytes a vector lookup takes at once; its K/8·32 bytes are contiguous. */
#ifndef BR_INFER_BLR_INFER_H
#define BR_INFER_BLR_INFER_H

#include <stddef.h>
#include <stdint.h>

#include "bitrank.h"

#define BR_INF_GROUP 4  /* inputs per table */
#define BR_INF_BLOCK 32 /* inputs per block of 8 tables (one quantization scale) */
#define BR_INF_ROWS 32  /* rows per row block */

/* AVX2 tables: entries are integers q in units of a scale s shared by 4 groups
 * (BR_INF_SCALE_INPUTS inputs), chosen so that the 4 entries a row takes from
 * them sum to at most BR_INF_QSUM + 2 (the +2: 4 roundings to nearest) in
 * magnitude, within int16: the kernel adds them in 16 bits before scaling the sum
 * into f32. */
#define BR_INF_QSUM 32752
#define BR_INF_SCALE_INPUTS 16
#define BR_INF_SCALES_PER_BLOCK (BR_INF_BLOCK / BR_INF_SCALE_INPUTS)

/* Bytes of one group's table: AVX2, 16 low bytes then 16 high bytes of the 16
 * int16 entries; portable, 16 f32 entries. */
#define BR_INF_TAB_AVX2 32
#define BR_INF_TAB_PORTABLE 64

/* The quantized tables of one vector z [k] (k a multiple of BR_INF_BLOCK):
 * tab [k/4][32] bytes and scale [k/16] f32. scale[i] = S_i / BR_INF_QSUM with S_i
 * the sum of ‖z_g‖₁ over the 4 groups of inputs [16·i, 16·i + 16) (0 when they are
 * 0; NaN or infinite when they hold a NaN or an infinity, so that every output
 * they reach is NaN or infinite). z is formed here as zf[i]·zs[i] (f32 product)
 * for i < valid and 0 above. */
void br_inf_tables_avx2(const float *zf, const float *zs, size_t valid, size_t k, int8_t *tab,
                        float *scale);
/* out [32] = the row block's sums Σ_i scale[i]·(Σ_{g of scale i} q_g[nibble]) over
 * nblk blocks of 32 inputs, from its packed signs (u8 [nblk·4][32]). */
void br_inf_rows_avx2(const uint8_t *bits, const int8_t *tab, const float *scale, size_t nblk,
                      float *out);
/* 1 where the CPU (and OS) run AVX2 and FMA. */
int br_inf_have_avx2(void);

/* The portable kernel: f32 tables [k/4][16] of z = zf ⊙ zs as above (not
 * quantized), and a row block's sums from them (one lookup a group and row). */
void br_inf_tables_portable(const float *zf, const float *zs, size_t valid, size_t k, float *tab);
void br_inf_rows_portable(const uint8_t *bits, const float *tab, size_t nblk, float *out);

#endif
