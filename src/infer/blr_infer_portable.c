/* The portable kernel of CPU inference: plain C, f32 lookup tables in the layout
 * of infer/blr_infer.h. It runs where the CPU has no AVX2 (or when a plan is told
 * to), and is the simpler of the two to trust: its tables are not quantized.
 *
 * A group's 16 entries are (±z0 ± z1) + (±z2 ± z3) in f32; a row's output sums its
 * groups' entries in two chains (even and odd groups, each in order), added at the
 * end. Error of one stage, u = 2^-24: z = zf ⊙ zs is rounded once (u·‖z‖₁ in all),
 * each entry is within 2.01·u·‖z_g‖₁ of its exact value, each step of a chain of
 * K/8 terms adds at most u times the ‖·‖₁ of that chain's groups, and the final
 * addition u·‖z‖₁; so
 *     |out − S·z| ≤ E(z) := (K/8 + 5)·u·‖z‖₁        (K the padded length). */
#include <string.h>

#include "infer/blr_infer.h"

void br_inf_tables_portable(const float *zf, const float *zs, size_t valid, size_t k, float *tab) {
    for (size_t i0 = 0; i0 < k; i0 += BR_INF_GROUP) {
        float z[BR_INF_GROUP];
        for (size_t t = 0; t < BR_INF_GROUP; t++)
            z[t] = i0 + t < valid ? zf[i0 + t] * zs[i0 + t] : 0.0f;
        float *e = tab + (i0 / BR_INF_GROUP) * 16;
        for (unsigned c = 0; c < 16; c++) {
            float a = (c & 1u ? z[0] : -z[0]) + (c & 2u ? z[1] : -z[1]);
            float b = (c & 4u ? z[2] : -z[2]) + (c & 8u ? z[3] : -z[3]);
            e[c] = a + b;
        }
    }
}

void br_inf_rows_portable(const uint8_t *bits, const float *tab, size_t nblk, float *out) {
    float even[BR_INF_ROWS], odd[BR_INF_ROWS];
    memset(even, 0, sizeof even);
    memset(odd, 0, sizeof odd);
    /* pairs of groups (one byte of signs per row) in order; rows innermost, so the
     * 32 independent chains hide the latency of each addition */
    for (size_t q = 0; q < nblk * (BR_INF_BLOCK / 8); q++) {
        const uint8_t *row = bits + q * BR_INF_ROWS;
        const float *te = tab + 2 * q * 16, *to = te + 16;
        for (size_t t = 0; t < BR_INF_ROWS; t++) {
            even[t] += te[row[t] & 15u];
            odd[t] += to[row[t] >> 4];
        }
    }
    for (size_t t = 0; t < BR_INF_ROWS; t++)
        out[t] = even[t] + odd[t];
}
