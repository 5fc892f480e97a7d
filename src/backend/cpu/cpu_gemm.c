/* The CPU GEMMs:
 *   out[i][ocol + j] = (oscale · Σ_kk act[i][kk] · plane[j][kk]) · colscale[j]
 *                      + beta · c[i][ocol + j]
 * (mm_tn: act[kk][i] and plane[kk][j], both stored k-rows-first).
 *
 * The ops bring their operands to f32 — act [m][k] (rows lda apart) compacted, the
 * plane transposed to bt [k][n] (from f16, or ±1 from the bitmap); mm_tn's act
 * transposed to [m][k], its plane's rows bt's as they are — and end in the same f32
 * products: OpenBLAS's sgemm where the build has CBLAS, otherwise a cache-blocked
 * loop that adds the terms of each output in k order. f16 values are exact in f32,
 * so the only rounding is the f32 accumulation; then the epilogue, one rounding per
 * product and per add, over the sums in out's block itself, or, where c is out, in
 * a scratch block (each element of c is read before its output is written).
 *
 * Same bits for any thread count (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS): a threaded
 * sgemm sums in an order that depends on its thread count (OpenBLAS 0.3.21 with its
 * Haswell/Zen kernels does for every K; with its SkylakeX/Cooperlake ones for K an
 * odd multiple of 16), so the product is split into the fixed panels of
 * core/gemm_panels.h, each one single-threaded sgemm (OpenBLAS held at one thread
 * by br_blas_serial_begin/end), the panels spread over an OpenMP team as large as
 * OpenBLAS's thread count was. Each panel also converts its act rows and runs its
 * own epilogue, so those run on the team too.
 *
 * A c may be f16 (br_mm_stage's unit): its values enter the epilogue as their exact
 * f32 values, the same bits as an f32 c holding them. */
#include <stdlib.h>
#include <string.h>

#ifdef BR_HAVE_CBLAS
#include <cblas.h>
#endif
#if defined(BR_HAVE_OPENMP) && defined(_OPENMP)
#include <omp.h>
#endif

#include "backend/cpu/cpu_ops.h"
#include "core/blas_threads.h" /* br_blas_serial_begin/end: one lock for the process */
#include "core/gemm_panels.h"

/* Where bt [k][n] comes from: an f16 plane [n][k] (tn: [k][ldp], bt's rows
 * themselves), or a bitmap (bit 1 = +1)
 * ROWS: bits [n][k/32], plane[j][kk] = bit kk%32 of word kk/32 of row j;
 * COLS: bits [k][ceil(n/32)], plane[j][kk] = bit j%32 of word j/32 of row kk.
 * tn also says act is stored k-rows-first ([k][lda], mm_tn). */
typedef struct plane_src {
    const uint16_t *f16; /* NULL for a bitmap */
    const uint32_t *bits;
    br_bits_layout layout;
    int tn;
    size_t ldp;
} plane_src;

/* Columns j0 .. j0+31 (fewer at the end) of bt, in 32×32 tiles. */
static void bt_slice(const plane_src *src, float *bt, size_t n, size_t k, size_t j0) {
    size_t j1 = j0 + 32 < n ? j0 + 32 : n;
    for (size_t k0 = 0; k0 < k; k0 += 32) { /* k is a multiple of 32 for bitmaps */
        size_t k1 = k0 + 32 < k ? k0 + 32 : k;
        if (src->f16) {
            float row[32]; /* a plane row's 32 values, converted 8 at a time, then spread */
            for (size_t j = j0; j < j1; j++) {
                br_half_to_float_n(src->f16 + j * k + k0, row, k1 - k0);
                for (size_t kk = k0; kk < k1; kk++)
                    bt[kk * n + j] = row[kk - k0];
            }
        } else if (src->layout == BR_BITS_ROWS) {
            for (size_t j = j0; j < j1; j++) {
                uint32_t word = src->bits[j * (k / 32) + k0 / 32];
                for (size_t b = 0; b < 32; b++)
                    bt[(k0 + b) * n + j] = (word >> b) & 1u ? 1.0f : -1.0f;
            }
        } else {
            size_t words = (n + 31) / 32;
            for (size_t kk = k0; kk < k1; kk++) {
                uint32_t word = src->bits[kk * words + j0 / 32];
                for (size_t j = j0; j < j1; j++)
                    bt[kk * n + j] = (word >> (j - j0)) & 1u ? 1.0f : -1.0f;
            }
        }
    }
}

/* bt [k][n] whole: mm_tn's plane rows converted as they are, else column slices. */
static void bt_fill(const plane_src *src, float *bt, size_t n, size_t k) {
    if (src->tn) {
        for (size_t kk = 0; kk < k; kk++)
            br_half_to_float_n(src->f16 + kk * src->ldp, bt + kk * n, n);
        return;
    }
    for (size_t j0 = 0; j0 < n; j0 += 32)
        bt_slice(src, bt, n, k, j0);
}

/* Rows i0 .. i1−1 of act (f16, lda apart) → f32 [..][k]. */
static void act_rows(const uint16_t *src, size_t lda, float *act, size_t k, size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i++)
        br_half_to_float_n(src + i * lda, act + i * k, k);
}

/* The same rows from act stored k-rows-first (f16 [k][lda], act[i][kk] at kk·lda + i):
 * the transpose, in 32×32 tiles as bt_slice (k is a multiple of 32). */
static void act_rows_t(const uint16_t *src, size_t lda, float *act, size_t k, size_t i0,
                       size_t i1) {
    for (size_t c0 = i0; c0 < i1; c0 += 32) {
        size_t c1 = c0 + 32 < i1 ? c0 + 32 : i1;
        for (size_t k0 = 0; k0 < k; k0 += 32)
            for (size_t kk = k0; kk < k0 + 32; kk++) {
                float row[32]; /* act[c0..c1−1][kk], converted 8 at a time, then spread */
                br_half_to_float_n(src + kk * lda + c0, row, c1 - c0);
                for (size_t i = c0; i < c1; i++)
                    act[i * k + kk] = row[i - c0];
            }
    }
}

#ifdef BR_HAVE_CBLAS
/* sums [rows][cols] (ldc apart) = a [rows][k] · b [k][cols] (ldb apart): OpenBLAS on
 * the calling thread alone (beta = 0: sums is not read). */
static void block_product(const float *a, const float *b, size_t ldb, float *sums, size_t ldc,
                          size_t rows, size_t cols, size_t k) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)cols, (int)k, 1.0f, a,
                (int)k, b, (int)ldb, 0.0f, sums, (int)ldc);
}
#else
/* The same product without BLAS. A tile of ROWS rows × COLS columns accumulates
 * locally while kk runs 0..k−1 in order (each step adds one term to every output
 * of the tile: a vectorizable axpy over a row of b), then is stored. */
static void block_product(const float *a, const float *b, size_t ldb, float *sums, size_t ldc,
                          size_t rows, size_t cols, size_t k) {
    enum { ROWS = 8, COLS = 256 };
    float acc[ROWS][COLS];
    for (size_t i0 = 0; i0 < rows; i0 += ROWS) {
        size_t nr = rows - i0 < ROWS ? rows - i0 : ROWS;
        for (size_t j0 = 0; j0 < cols; j0 += COLS) {
            size_t nc = cols - j0 < COLS ? cols - j0 : COLS;
            for (size_t r = 0; r < nr; r++)
                memset(acc[r], 0, nc * sizeof(float));
            for (size_t kk = 0; kk < k; kk++) {
                const float *brow = b + kk * ldb + j0;
                for (size_t r = 0; r < nr; r++) {
                    float av = a[(i0 + r) * k + kk];
                    float *c = acc[r];
                    OMP("omp simd")
                    for (size_t j = 0; j < nc; j++)
                        c[j] += av * brow[j];
                }
            }
            for (size_t r = 0; r < nr; r++)
                memcpy(sums + (i0 + r) * ldc + j0, acc[r], nc * sizeof(float));
        }
    }
}
#endif

/* Rows i0..i1−1, columns j0..j1−1 of out's block from the sums (rows lds apart,
 * column j at sums[j]; the sums may be out's block itself):
 * (oscale·sum)·colscale[j] + beta·c, each product rounded to f32 (the build does
 * not contract a*b + c). c is f32, or c16 f16 (one of them or neither). */
static void epilogue(const br_gemm *g, const float *sums, size_t lds, float *out,
                     const float *colscale, const float *c, const uint16_t *c16, size_t i0,
                     size_t i1, size_t j0, size_t j1) {
    for (size_t i = i0; i < i1; i++) {
        const float *srow = sums + i * lds;
        float *orow = out + i * g->ldo + g->ocol;
        const float *crow = c ? c + i * g->ldo + g->ocol : NULL;
        const uint16_t *crow16 = c16 ? c16 + i * g->ldo + g->ocol : NULL;
        for (size_t j = j0; j < j1; j++) {
            float v = g->oscale * srow[j];
            if (colscale) v = v * colscale[j];
            if (crow) v = v + g->beta * crow[j];
            if (crow16) v = v + g->beta * br_half_to_float(crow16[j]);
            orow[j] = v;
        }
    }
}

/* Below this many multiply-adds (about 1.5 ms on one core) the panels run on the
 * calling thread: an OpenMP team's idle threads spin for milliseconds after each
 * region, which on a busy machine (measured: the demo on this 2-core machine with
 * other jobs running) costs more than a small product gains. */
#define PARALLEL_MIN_MADDS ((size_t)1 << 26)

/* The team's size: as many threads as OpenBLAS would have run (prev: its count,
 * held at 1 until br_blas_serial_end); without BLAS, OpenMP's. */
static int team_size(int prev) {
#ifdef BR_HAVE_CBLAS
    return prev > 1 ? prev : 1;
#elif defined(BR_HAVE_OPENMP) && defined(_OPENMP)
    (void)prev;
    return omp_get_max_threads();
#else
    (void)prev;
    return 1;
#endif
}

/* Shared body of the ops: bt from the plane, then the panels of
 * core/gemm_panels.h, each its act rows to f32 (all of act before, for panels of
 * columns), one product and its epilogue. The sums go to out's block itself and
 * the epilogue runs over them in place (1·sum is sum: the plain product needs
 * none), except where c is out: then to a scratch block, so that c is still
 * there to be read. mm_tn differs only in how act and bt are read: the same f32
 * values reach the same products, so it has br_mm's bits on the transposes. */
static br_status run_gemm(br_ctx *ctx, const char *name, const br_mm_args *a,
                          const plane_src *src) {
    const br_gemm *g = &a->g;
    const size_t m = g->m, n = g->n, k = g->k;
    float *out = br_ptr(a->out);
    const float *colscale = g->colscale ? br_ptr(g->colscale) : NULL;
    const int f16_c = g->c && br_buf_dtype(g->c) == BR_F16;
    const float *c = g->c && !f16_c ? br_ptr(g->c) : NULL;
    const uint16_t *c16 = f16_c ? br_ptr(g->c) : NULL;
    const int scratch = c == out;
    const int plain = g->oscale == 1.0f && !colscale && !g->c;
    float *bt = malloc(n * k * sizeof *bt);
    float *act = malloc(m * k * sizeof *act);
    float *sums = scratch ? malloc(m * n * sizeof *sums) : out + g->ocol;
    const size_t lds = scratch ? n : g->ldo;
    if (!bt || !act || !sums) {
        free(bt), free(act);
        if (scratch) free(sums);
        return br_fail(ctx, BR_E_NOMEM,
                       "%s: out of host memory for the f32 plane, act and sums (%zu bytes)", name,
                       (n * k + m * k + (scratch ? m * n : 0)) * sizeof(float));
    }
    const uint16_t *act16 = br_ptr(a->act);
    const br_panels p = br_panels_of(m, n);
    const int parallel = br_panels_parallel(p, m, n, k, PARALLEL_MIN_MADDS);
    /* the operand all panels share, converted before the team starts (a barrier
     * inside would cost a scheduler time slice on a busy machine whenever one of
     * the team is not running) */
    void (*rows_of)(const uint16_t *, size_t, float *, size_t, size_t, size_t) =
        src->tn ? act_rows_t : act_rows;
    bt_fill(src, bt, n, k);
    if (!p.by_rows) rows_of(act16, g->lda, act, k, 0, m);
    const int prev = br_blas_serial_begin(), team = team_size(prev);
    (void)parallel, (void)team;
    OMP("omp parallel for schedule(dynamic, 1) num_threads(team) if (parallel)")
    for (size_t t = 0; t < p.count; t++) {
        size_t f, e;
        br_panel_range(p, t, &f, &e);
        if (p.by_rows) { /* rows f..f+e of act, sums and out */
            rows_of(act16, g->lda, act, k, f, f + e);
            block_product(act + f * k, bt, n, sums + f * lds, lds, e, n, k);
            if (!plain) epilogue(g, sums, lds, out, colscale, c, c16, f, f + e, 0, n);
        } else { /* columns f..f+e of bt, sums and out */
            block_product(act, bt + f, n, sums + f, lds, m, e, k);
            if (!plain) epilogue(g, sums, lds, out, colscale, c, c16, 0, m, f, f + e);
        }
    }
    br_blas_serial_end(prev);
    free(bt);
    free(act);
    if (scratch) free(sums);
    return BR_OK;
}

br_status br_cpu_mm(br_ctx *ctx, const br_op *op) {
    const br_mm_args *a = &op->u.mm;
    ctx->stats.launches++;
    plane_src src = {.f16 = br_ptr(a->plane)};
    return run_gemm(ctx, "mm", a, &src);
}

br_status br_cpu_mm_bits(br_ctx *ctx, const br_op *op) {
    const br_mm_args *a = &op->u.mm;
    ctx->stats.launches++;
    plane_src src = {.bits = br_ptr(a->plane), .layout = a->layout};
    return run_gemm(ctx, "mm_bits", a, &src);
}

br_status br_cpu_mm_tn(br_ctx *ctx, const br_op *op) {
    const br_mm_args *a = &op->u.mm;
    ctx->stats.launches++;
    plane_src src = {.f16 = br_ptr(a->plane), .tn = 1, .ldp = a->ldp};
    return run_gemm(ctx, "mm_tn", a, &src);
}
