/* The AVX2 kernel of CPU inference: 16-entry lookup tables of 16-bit integers, 32
 * rows per vector lookup (vpshufb), in the layout of infer/blr_infer.h.
 *
 * Why tables: a sign stage out = S·z is a sum of ±z terms, and four of them (one
 * group) take one of 16 values for a given z: looked up by the row's 4 sign bits,
 * one byte shuffle produces those four terms' sum for 32 rows at once.
 * Why 16-bit entries: 8-bit entries (a step of about 1/127 of a group's ‖z_g‖₁)
 * would leave errors near 1% of a typical output at K = 4096, past the f16-level
 * tolerance the plan promises; 16-bit entries cost a second shuffle (the high
 * bytes) and leave about 1e-4.
 *
 * Per 4 groups (16 inputs, one scale) a row's 4 entries are summed in an int16
 * lane, then converted to f32 and added with one fused multiply-add by the scale:
 * out += s_i · acc_i, in input order, so each output's bits depend on the data
 * alone, never on threads. The scale is sized by the sum of its groups' ‖z_g‖₁
 * (not 4 times the largest): the int16 sum cannot overflow either way, and one
 * large input leaves a fine step for the other groups. Why 4 groups a scale, not
 * 8: half the step (half the error) for a few percent more time; the shuffles, not
 * the conversions, bound the loop.
 *
 * Error of one stage (derivation; tests/test_blr_infer.c checks it). With u = 2^-24
 * the unit roundoff of f32, Q = BR_INF_QSUM, M_g = ‖z_g‖₁ and S_i = Σ_{g of i} M_g
 * (as rounded in f32), s_i = fl(S_i/Q):
 *  - z = zf ⊙ zs is rounded once: u·‖z‖₁ in all;
 *  - a table entry T = (±z0 ± z1) + (±z2 ± z3) in f32 is within 2.01·u·M_g of its
 *    exact value, and |T| ≤ M_g (rounding is monotone, and M_g is the same sum of
 *    the absolute values, paired the same way);
 *  - q = round(T · fl(Q/S_i)) is within 1/2 + 2uQ of T·Q/S_i, so |s_i·q − T| ≤
 *    s_i·(1/2 + 2uQ) + u·M_g; summed over the 4 groups of each scale, at most
 *    (2 + 8uQ)/Q·(1 + u)·S_i + u·S_i, in all ≤ ‖z‖₁/16240 + u·‖z‖₁; and
 *    Σ_{g of i} |q_g| ≤ Q·(1 + 9u) + 2 < 2^15: the int16 sums never overflow;
 *  - the FMA chain over the K/16 scales adds at most u·|partial sum| each, every
 *    partial sum at most 1.001·‖z‖₁.
 * So |out − S·z_exact| ≤ E(z) := (1/16000 + (K/16 + 5)·u)·‖z‖₁. Since the roundings
 * of different groups are independent and of either sign, the typical error is
 * about √(K/4) times smaller than this worst case. */
#include "infer/blr_infer.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AVX2 __attribute__((target("avx2,fma")))

int br_inf_have_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* The 16 entries of one group's table as two vectors of 8 f32 (entries 0..7 and
 * 8..15; entry c takes +z_t where bit t of c is 1, −z_t where it is 0), summed as
 * (±z0 ± z1) + (±z2 ± z3), the pairing of group_norms' ‖z_g‖₁. */
AVX2 static inline void group_table(const float *z, __m256 *lo, __m256 *hi) {
    /* sign flips: lane c's sign bit set where bit t of c (c = lane, or lane + 8) is 0 */
    const __m256 m0 = _mm256_castsi256_ps(_mm256_setr_epi32(
        (int)0x80000000, 0, (int)0x80000000, 0, (int)0x80000000, 0, (int)0x80000000, 0));
    const __m256 m1 = _mm256_castsi256_ps(_mm256_setr_epi32(
        (int)0x80000000, (int)0x80000000, 0, 0, (int)0x80000000, (int)0x80000000, 0, 0));
    const __m256 m2 = _mm256_castsi256_ps(_mm256_setr_epi32(
        (int)0x80000000, (int)0x80000000, (int)0x80000000, (int)0x80000000, 0, 0, 0, 0));
    __m256 z0 = _mm256_broadcast_ss(z), z1 = _mm256_broadcast_ss(z + 1);
    __m256 z2 = _mm256_broadcast_ss(z + 2), z3 = _mm256_broadcast_ss(z + 3);
    __m256 a = _mm256_add_ps(_mm256_xor_ps(z0, m0), _mm256_xor_ps(z1, m1));
    __m256 b = _mm256_xor_ps(z2, m2);
    *lo = _mm256_add_ps(a, _mm256_sub_ps(b, z3)); /* bit 3 of c = 0: −z3 */
    *hi = _mm256_add_ps(a, _mm256_add_ps(b, z3)); /* bit 3 of c = 1: +z3 */
}

/* The ‖z_g‖₁ of the 8 groups of z [32], each summed as (|z0| + |z1|) + (|z2| + |z3|),
 * into l1[8] in group order. */
AVX2 static void group_norms(const float *z, float *l1) {
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 a0 = _mm256_and_ps(_mm256_loadu_ps(z), abs);
    __m256 a1 = _mm256_and_ps(_mm256_loadu_ps(z + 8), abs);
    __m256 a2 = _mm256_and_ps(_mm256_loadu_ps(z + 16), abs);
    __m256 a3 = _mm256_and_ps(_mm256_loadu_ps(z + 24), abs);
    /* hadd adds neighbours in order: pairs, then pairs of pairs; lanes hold groups
     * 0, 2, 4, 6 | 1, 3, 5, 7 */
    __m256 g = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    float v[8];
    _mm256_storeu_ps(v, g);
    for (int i = 0; i < 4; i++) {
        l1[2 * i] = v[i];
        l1[2 * i + 1] = v[4 + i];
    }
}

/* Entries · pre · inv rounded to integers, stored as 16 low bytes then 16 high bytes. */
AVX2 static inline void quantize_store(__m256 lo, __m256 hi, __m256 pre, __m256 inv, int8_t *dst) {
#define NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
    lo = _mm256_mul_ps(_mm256_mul_ps(lo, pre), inv);
    hi = _mm256_mul_ps(_mm256_mul_ps(hi, pre), inv);
    __m256i qlo = _mm256_cvttps_epi32(_mm256_round_ps(lo, NEAREST));
    __m256i qhi = _mm256_cvttps_epi32(_mm256_round_ps(hi, NEAREST));
#undef NEAREST
    /* packs works per 128-bit lane: entries 0-3, 8-11 | 4-7, 12-15; reorder to 0..15 */
    __m256i q = _mm256_permute4x64_epi64(_mm256_packs_epi32(qlo, qhi), 0xd8);
    /* per lane: the low bytes of its 8 entries, then their high bytes */
    const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0,
                                           2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    __m256i b = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(q, split), 0xd8);
    _mm256_storeu_si256((__m256i *)(void *)dst, b);
}

AVX2 void br_inf_tables_avx2(const float *zf, const float *zs, size_t valid, size_t k, int8_t *tab,
                             float *scale) {
    float z[BR_INF_BLOCK];
    for (size_t b = 0; b * BR_INF_BLOCK < k; b++) {
        size_t i0 = b * BR_INF_BLOCK;
        if (i0 + BR_INF_BLOCK <= valid) {
            for (size_t i = 0; i < BR_INF_BLOCK; i += 8)
                _mm256_storeu_ps(z + i, _mm256_mul_ps(_mm256_loadu_ps(zf + i0 + i),
                                                      _mm256_loadu_ps(zs + i0 + i)));
        } else {
            for (size_t i = 0; i < BR_INF_BLOCK; i++)
                z[i] = i0 + i < valid ? zf[i0 + i] * zs[i0 + i] : 0.0f;
        }
        float l1[8];
        group_norms(z, l1);
        for (size_t h = 0; h < BR_INF_SCALES_PER_BLOCK; h++) {
            const size_t gps = BR_INF_SCALE_INPUTS / BR_INF_GROUP; /* groups a scale */
            float sb = 0;
            for (size_t g = h * gps; g < (h + 1) * gps; g++)
                sb += l1[g];
            /* s = S/Q; S = 0: every entry is 0; S NaN or infinite: s too, so that every
             * output of the stage is NaN or infinite, never a finite wrong number. Below
             * 2^-96, Q/S could overflow: the entries and S are scaled by 2^96 first
             * (exactly, powers of two), which leaves q as it would be; s may then be
             * subnormal, off by at most 2^-150, an absolute error of 2^-135 a scale. */
            scale[b * BR_INF_SCALES_PER_BLOCK + h] = sb / (float)BR_INF_QSUM;
            const float tiny = 0x1p-96f, lift = sb < tiny ? 0x1p96f : 1.0f;
            const __m256 pre = _mm256_set1_ps(lift);
            const __m256 inv = _mm256_set1_ps(sb > 0.0f ? (float)BR_INF_QSUM / (sb * lift) : 0.0f);
            for (size_t gi = h * gps; gi < (h + 1) * gps; gi++) {
                __m256 lo, hi;
                group_table(z + gi * BR_INF_GROUP, &lo, &hi);
                quantize_store(lo, hi, pre, inv,
                               tab + (b * (BR_INF_BLOCK / BR_INF_GROUP) + gi) * BR_INF_TAB_AVX2);
            }
        }
    }
}

/* One group pair (32 bytes of signs: group g in the low nibbles, g+1 in the high)
 * looked up in the two groups' tables and added to the row block's int16 sums:
 * acc0 holds rows 0-7 | 16-23, acc1 rows 8-15 | 24-31. */
AVX2 static inline __attribute__((always_inline)) void
lookup_pair(const uint8_t *bits, const int8_t *tab, __m256i *acc0, __m256i *acc1) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)bits);
    __m256i idx[2] = {_mm256_and_si256(v, low4), _mm256_and_si256(_mm256_srli_epi16(v, 4), low4)};
    for (int h = 0; h < 2; h++) {
        const int8_t *t = tab + h * BR_INF_TAB_AVX2;
        __m256i tl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)t));
        __m256i th =
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(t + 16)));
        __m256i lo = _mm256_shuffle_epi8(tl, idx[h]), hi = _mm256_shuffle_epi8(th, idx[h]);
        /* interleaving the low and high bytes gives the int16 entries of 8 rows a lane */
        *acc0 = _mm256_add_epi16(*acc0, _mm256_unpacklo_epi8(lo, hi));
        *acc1 = _mm256_add_epi16(*acc1, _mm256_unpackhi_epi8(lo, hi));
    }
}

AVX2 static inline __m256 widen(__m128i x) { return _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(x)); }

/* f[0..3] += s · the int16 sums acc0 (rows 0-7 | 16-23), acc1 (rows 8-15 | 24-31) in
 * f32: f[i] holds rows 8i..8i+7. (Widening by multiply-adds with (1, 0), (0, 1)
 * instead of the sign extensions measured slower.) */
AVX2 static inline __attribute__((always_inline)) void scale_add(__m256i acc0, __m256i acc1,
                                                                 const float *scale, __m256 *f) {
    __m256 s = _mm256_broadcast_ss(scale);
    f[0] = _mm256_fmadd_ps(widen(_mm256_castsi256_si128(acc0)), s, f[0]);
    f[1] = _mm256_fmadd_ps(widen(_mm256_castsi256_si128(acc1)), s, f[1]);
    f[2] = _mm256_fmadd_ps(widen(_mm256_extracti128_si256(acc0, 1)), s, f[2]);
    f[3] = _mm256_fmadd_ps(widen(_mm256_extracti128_si256(acc1, 1)), s, f[3]);
}

AVX2 void br_inf_rows_avx2(const uint8_t *bits, const int8_t *tab, const float *scale, size_t nblk,
                           float *out) {
    __m256 f[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
    for (size_t b = 0; b < nblk; b++) {
        __m256i acc0 = _mm256_setzero_si256(), acc1 = acc0;
        lookup_pair(bits, tab, &acc0, &acc1);
        lookup_pair(bits + 32, tab + 2 * BR_INF_TAB_AVX2, &acc0, &acc1);
        scale_add(acc0, acc1, scale + 2 * b, f);
        acc0 = acc1 = _mm256_setzero_si256();
        lookup_pair(bits + 64, tab + 4 * BR_INF_TAB_AVX2, &acc0, &acc1);
        lookup_pair(bits + 96, tab + 6 * BR_INF_TAB_AVX2, &acc0, &acc1);
        scale_add(acc0, acc1, scale + 2 * b + 1, f);
        bits += 128;
        tab += 8 * BR_INF_TAB_AVX2;
    }
    for (int i = 0; i < 4; i++)
        _mm256_storeu_ps(out + 8 * i, f[i]);
}

#else /* not x86-64 with GCC or clang: the portable kernel runs */

int br_inf_have_avx2(void) { return 0; }
void br_inf_tables_avx2(const float *zf, const float *zs, size_t valid, size_t k, int8_t *tab,
                        float *scale) {
    (void)zf, (void)zs, (void)valid, (void)k, (void)tab, (void)scale;
}
void br_inf_rows_avx2(const uint8_t *bits, const int8_t *tab, const float *scale, size_t nblk,
                      float *out) {
    (void)bits, (void)tab, (void)scale, (void)nblk, (void)out;
}

#endif
