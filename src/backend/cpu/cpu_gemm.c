/* The CPU GEMMs (R-MM):
 *   out[i][ocol + j] = (oscale · Σ_kk act[i][kk] · plane[j][kk]) · colscale[j] + beta · c[i][ocol +
 * j]
 *
 * Both ops bring their operands to f32 — act [m][k] (rows lda apart) compacted, the
 * plane transposed to bt [k][n] (from f16, or ±1 from the bitmap) — and end in one
 * f32 product into a scratch block: OpenBLAS's sgemm where the build has CBLAS,
 * otherwise a cache-blocked loop that adds the terms of each output in k order. f16
 * values are exact in f32, so the only rounding is the f32 accumulation; then the
 * epilogue, one rounding per product and per add. The scratch block lets c be out
 * itself (each element of c is read before its output is written). */
#include <stdlib.h>
#include <string.h>

#ifdef BR_HAVE_CBLAS
#include <cblas.h>
#endif

#include "backend/cpu/cpu_ops.h"

/* f16 bit pattern → f32, exactly br_half_to_float (all 65536 patterns checked) but
 * without its loop for subnormals: the 15 magnitude bits placed under f32's exponent
 * field, then an exact multiply by 2^112 rebiases the exponent (f16 subnormals enter
 * as f32 subnormals and leave normal). Inf and NaN get the all-ones exponent. */
static inline float half_to_f32(uint16_t h) {
    uint32_t mag = (uint32_t)(h & 0x7fffu) << 13, u;
    float f;
    if ((h & 0x7c00u) == 0x7c00u) {
        u = mag | 0x7f800000u;
    } else {
        memcpy(&f, &mag, 4);
        f *= 0x1p112f;
        memcpy(&u, &f, 4);
    }
    u |= (uint32_t)(h & 0x8000u) << 16;
    memcpy(&f, &u, 4);
    return f;
}

static void f16_to_f32_rows(const uint16_t *src, float *dst, size_t count) {
    for (size_t i = 0; i < count; i++)
        dst[i] = half_to_f32(src[i]);
}

/* bt[kk][j] = plane[j][kk]: f16 [n][k] → f32 [k][n], in 32×32 tiles. */
static void plane_to_bt(const uint16_t *plane, float *bt, size_t n, size_t k) {
    enum { T = 32 };
    for (size_t j0 = 0; j0 < n; j0 += T)
        for (size_t k0 = 0; k0 < k; k0 += T) {
            size_t j1 = j0 + T < n ? j0 + T : n, k1 = k0 + T < k ? k0 + T : k;
            for (size_t j = j0; j < j1; j++)
                for (size_t kk = k0; kk < k1; kk++)
                    bt[kk * n + j] = half_to_f32(plane[j * k + kk]);
        }
}

/* The ±1 plane of a bitmap as bt [k][n] (bit 1 = +1):
 * ROWS: bits [n][k/32], plane[j][kk] = bit kk%32 of word kk/32 of row j;
 * COLS: bits [k][ceil(n/32)], plane[j][kk] = bit j%32 of word j/32 of row kk. */
static void bits_to_bt(const uint32_t *bits, br_bits_layout layout, float *bt, size_t n, size_t k) {
    if (layout == BR_BITS_ROWS) {
        size_t words = k / 32;
        for (size_t j = 0; j < n; j++)
            for (size_t kk = 0; kk < k; kk++)
                bt[kk * n + j] = (bits[j * words + kk / 32] >> (kk % 32)) & 1u ? 1.0f : -1.0f;
    } else {
        size_t words = (n + 31) / 32;
        for (size_t kk = 0; kk < k; kk++)
            for (size_t j = 0; j < n; j++)
                bt[kk * n + j] = (bits[kk * words + j / 32] >> (j % 32)) & 1u ? 1.0f : -1.0f;
    }
}

#ifdef BR_HAVE_CBLAS
/* sums[i][j] = Σ a[i][kk]·bt[kk][j] through OpenBLAS (beta = 0: sums is not read). */
static void product(const float *a, const float *bt, float *sums, size_t m, size_t n, size_t k) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)k,
                bt, (int)n, 0.0f, sums, (int)n);
}
#else
/* The same product without BLAS. A block of ROWS rows × COLS columns accumulates in
 * a local tile while kk runs 0..k−1 in order (each step adds one term to every
 * output of the tile: a vectorizable axpy over a row of bt), then is stored. Blocks
 * are independent, so the result does not depend on threading. */
static void product(const float *a, const float *bt, float *sums, size_t m, size_t n, size_t k) {
    enum { ROWS = 8, COLS = 256 };
    size_t row_blocks = (m + ROWS - 1) / ROWS;
    OMP("omp parallel for schedule(static) if (m * n * k > (size_t)1 << 20)")
    for (size_t rb = 0; rb < row_blocks; rb++) {
        size_t i0 = rb * ROWS, rows = m - i0 < ROWS ? m - i0 : ROWS;
        float acc[ROWS][COLS];
        for (size_t j0 = 0; j0 < n; j0 += COLS) {
            size_t cols = n - j0 < COLS ? n - j0 : COLS;
            for (size_t r = 0; r < rows; r++)
                memset(acc[r], 0, cols * sizeof(float));
            for (size_t kk = 0; kk < k; kk++) {
                const float *brow = bt + kk * n + j0;
                for (size_t r = 0; r < rows; r++) {
                    float av = a[(i0 + r) * k + kk];
                    float *c = acc[r];
                    OMP("omp simd")
                    for (size_t j = 0; j < cols; j++)
                        c[j] += av * brow[j];
                }
            }
            for (size_t r = 0; r < rows; r++)
                memcpy(sums + (i0 + r) * n + j0, acc[r], cols * sizeof(float));
        }
    }
}
#endif

/* out's block from the sums [m][n]: (oscale·sum)·colscale[j] + beta·c, each product
 * rounded to f32 (the build does not contract a*b + c). */
static void epilogue(const br_gemm *g, const float *sums, float *out, const float *colscale,
                     const float *c) {
    for (size_t i = 0; i < g->m; i++) {
        const float *srow = sums + i * g->n;
        float *orow = out + i * g->ldo + g->ocol;
        const float *crow = c ? c + i * g->ldo + g->ocol : NULL;
        for (size_t j = 0; j < g->n; j++) {
            float v = g->oscale * srow[j];
            if (colscale) v = v * colscale[j];
            if (crow) v = v + g->beta * crow[j];
            orow[j] = v;
        }
    }
}

/* Shared tail of both ops: act to f32, the product, the epilogue. bt [k][n] is the
 * caller's (freed here). */
static br_status run_gemm(br_ctx *ctx, const char *name, const br_mm_args *a, float *bt) {
    const br_gemm *g = &a->g;
    float *act = malloc(g->m * g->k * sizeof *act);
    float *sums = malloc(g->m * g->n * sizeof *sums);
    if (!act || !sums) {
        free(act), free(sums), free(bt);
        return br_fail(ctx, BR_E_NOMEM,
                       "%s: out of host memory for the f32 act and sums (%zu bytes)", name,
                       (g->m * g->k + g->m * g->n) * sizeof(float));
    }
    const uint16_t *src = br_ptr(a->act);
    for (size_t i = 0; i < g->m; i++)
        f16_to_f32_rows(src + i * g->lda, act + i * g->k, g->k);
    product(act, bt, sums, g->m, g->n, g->k);
    epilogue(g, sums, br_ptr(a->out), g->colscale ? br_ptr(g->colscale) : NULL,
             g->c ? br_ptr(g->c) : NULL);
    free(act);
    free(sums);
    free(bt);
    return BR_OK;
}

static float *alloc_bt(br_ctx *ctx, const char *name, const br_gemm *g) {
    float *bt = malloc(g->n * g->k * sizeof *bt);
    if (!bt)
        br_fail(ctx, BR_E_NOMEM, "%s: out of host memory for the f32 plane (%zu bytes)", name,
                g->n * g->k * sizeof *bt);
    return bt;
}

br_status br_cpu_mm(br_ctx *ctx, const br_op *op) {
    const br_mm_args *a = &op->u.mm;
    ctx->stats.launches++;
    float *bt = alloc_bt(ctx, "mm", &a->g);
    if (!bt) return BR_E_NOMEM;
    plane_to_bt(br_ptr(a->plane), bt, a->g.n, a->g.k);
    return run_gemm(ctx, "mm", a, bt);
}

br_status br_cpu_mm_bits(br_ctx *ctx, const br_op *op) {
    const br_mm_args *a = &op->u.mm;
    ctx->stats.launches++;
    float *bt = alloc_bt(ctx, "mm_bits", &a->g);
    if (!bt) return BR_E_NOMEM;
    bits_to_bt(br_ptr(a->plane), a->layout, bt, a->g.n, a->g.k);
    return run_gemm(ctx, "mm_bits", a, bt);
}
