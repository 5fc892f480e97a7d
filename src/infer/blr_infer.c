/* CPU inference of a BLR linear (br_blr_infer, include/bitrank.h): the plan — the
 * signs repacked for the lookup-table kernels, the scales copied — and the driver
 * that runs the two sign stages of every path over a chunk of tokens with OpenMP.
 *
 * The floor. A 4096×4096 layer at 1.0 bpw with P = 2 paths has rank 1006 a path
 * (br_compress_rank): its signs are P·(m + n)·r bits = 2 MB, and one token costs
 * P·(n·r + r·m) = 16.5 M sign multiply-adds. A dense f32 GEMV of the same W reads
 * 64 MB a token, so it is bound by memory bandwidth at 32 times the bytes; the BLR
 * product is bound by arithmetic on its 2 MB (cache-resident in a loop over the
 * layer, streamed at 1/32 of the dense bytes otherwise). One sign at a time (the
 * sign applied by XOR with a lane mask looked up from 8 bits, then an add: 8
 * multiply-adds in two vector operations and three loads) needs about 4 M vector
 * operations and 6 M loads a token; lookup tables of 4-input groups
 * (blr_infer_avx2.c) make two 32-byte shuffles, two unpacks and two adds do
 * 32 rows × 4 inputs: about 1 M vector operations a token, and building the tables
 * is O(n + r) a token. Measured on one core, the sign-flip kernel took several
 * times as long as the tables; it is not kept.
 *
 * Work split: each stage is split over row blocks × tokens (a static schedule of
 * contiguous units), each output is computed by one thread with the same code in
 * the same order whatever the thread count, so the results are bit-identical for
 * any number of threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "infer/blr_infer.h"
#include "io/blr_layout.h"

#if defined(BR_HAVE_OPENMP) && defined(_OPENMP)
#define OMP(directive) _Pragma(directive)
#else
#define OMP(directive)
#endif

/* Tokens a run works on at once: their tables (about K/4·32 bytes a token and path)
 * stay in the L2 cache while each row block's signs are reused for all of them. */
#define CHUNK_TOKENS 8
/* Blocks of one unit of table building (a unit: one token, one path, this many
 * blocks of 32 inputs). */
#define TABLE_UNIT_BLOCKS 16
/* Below this many sign multiply-adds a run stays on the calling thread. */
#define PARALLEL_MIN_MACS ((size_t)1 << 18)
/* Largest m, n or r a plan takes (sizes then fit easily, and indexes in size_t). */
#define MAX_DIM ((size_t)1 << 31)

struct br_blr_infer {
    br_ctx *ctx; /* for messages only (may be NULL) */
    size_t m, n, r, paths;
    size_t k1, k2;   /* inputs of stage 1 (n) and stage 2 (r), padded to blocks of 32 */
    size_t rb1, rb2; /* row blocks of stage 1 (r rows) and stage 2 (m rows) */
    uint8_t *bits1[BR_BLR_MAX_PATHS]; /* S_Vᵀ packed: [rb1][k1/8][32] */
    uint8_t *bits2[BR_BLR_MAX_PATHS]; /* S_U packed:  [rb2][k2/8][32] */
    float *h[BR_BLR_MAX_PATHS], *l[BR_BLR_MAX_PATHS], *g[BR_BLR_MAX_PATHS];
    int avx2; /* the kernel that runs: 1 AVX2, 0 portable */
    /* scratch of one chunk of CHUNK_TOKENS tokens, tables sized for either kernel */
    uint8_t *tab1, *tab2; /* [chunk][paths][k/4][BR_INF_TAB_PORTABLE] */
    float *sc1, *sc2;     /* [chunk][paths][k/16] scales of the AVX2 tables */
    float *a;             /* [chunk][paths][rb1·32] stage-1 outputs */
    float *xf, *yf, *bf;  /* f16 runs: x [chunk][n], y [chunk][m], bias [m] in f32 */
};

static size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

static void *alloc_aligned(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64)) return NULL;
    return p;
}

void br_blr_infer_free(br_blr_infer *p) {
    if (!p) return;
    for (size_t q = 0; q < BR_BLR_MAX_PATHS; q++) {
        free(p->bits1[q]);
        free(p->bits2[q]);
        free(p->h[q]);
        free(p->l[q]);
        free(p->g[q]);
    }
    free(p->tab1);
    free(p->tab2);
    free(p->sc1);
    free(p->sc2);
    free(p->a);
    free(p->xf);
    free(p->yf);
    free(p->bf);
    free(p);
}

/* a[i] bit j ↔ a[j] bit i: the 32×32 bit matrix transposed in place, by swapping
 * the off-diagonal halves of ever smaller blocks. */
static void transpose32(uint32_t a[32]) {
    uint32_t mask = 0x0000ffffu;
    for (unsigned j = 16; j != 0; j >>= 1, mask ^= mask << j)
        for (unsigned k = 0; k < 32; k = (k + j + 1) & ~j) {
            uint32_t t = ((a[k] >> j) ^ a[k + j]) & mask;
            a[k] ^= t << j;
            a[k + j] ^= t;
        }
}

/* Stage 2's signs: S_U rows [m][ceil(r/32)] u32 → [rb2][k2/8][32]: byte q of row i
 * is byte q of its little-endian words. Rows past m are zero bits. */
static void pack_rows(const uint32_t *bits, size_t rows, size_t words, size_t rblocks,
                      uint8_t *out) {
    size_t nq = words * 4;
    for (size_t rb = 0; rb < rblocks; rb++)
        for (size_t t = 0; t < BR_INF_ROWS; t++) {
            size_t i = rb * BR_INF_ROWS + t;
            for (size_t q = 0; q < nq; q++)
                out[(rb * nq + q) * BR_INF_ROWS + t] =
                    i < rows ? (uint8_t)(bits[i * words + q / 4] >> (8 * (q % 4))) : 0;
        }
}

/* Stage 1's signs: S_V [n][ceil(r/32)] transposed (row k holds S_V[j][k] for every
 * input j) and packed as pack_rows does, 32×32 bits at a time. Inputs past n are
 * zero bits (their z is 0 anyway). */
static void pack_transposed(const uint32_t *bits_v, size_t n, size_t words, size_t k1,
                            uint8_t *out) {
    size_t nq = k1 / 8;
    for (size_t kb = 0; kb < words; kb++)
        for (size_t jb = 0; jb < k1 / 32; jb++) {
            uint32_t blk[32];
            for (size_t jj = 0; jj < 32; jj++) {
                size_t j = jb * 32 + jj;
                blk[jj] = j < n ? bits_v[j * words + kb] : 0;
            }
            transpose32(blk); /* blk[kk] bit jj = S_V[32·jb + jj][32·kb + kk] */
            for (size_t kk = 0; kk < 32; kk++)
                for (size_t e = 0; e < 4; e++)
                    out[(kb * nq + jb * 4 + e) * BR_INF_ROWS + kk] = (uint8_t)(blk[kk] >> (8 * e));
        }
}

static br_status copy_scales(br_ctx *ctx, const char *fn, size_t p, const char *what,
                             const float *src, size_t count, float **dst) {
    for (size_t i = 0; i < count; i++)
        if (!isfinite(src[i]))
            return br_fail(ctx, BR_E_NONFINITE, "%s: path %zu: %s[%zu] = %g is not finite", fn, p,
                           what, i, (double)src[i]);
    *dst = malloc(count * sizeof **dst);
    if (!*dst) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    memcpy(*dst, src, count * sizeof **dst);
    return BR_OK;
}

br_status br_blr_infer_new(br_ctx *ctx, const br_blr_host *layer, br_blr_infer **out) {
    static const char *fn = "br_blr_infer_new";
    if (!out) return br_fail(ctx, BR_E_ARG, "%s: out is NULL", fn);
    *out = NULL;
    BR_TRY(br_blr_check_layer(ctx, fn, layer));
    size_t m = layer->m, n = layer->n, r = layer->r, P = layer->paths;
    if (m > MAX_DIM || n > MAX_DIM || r > MAX_DIM)
        return br_fail(ctx, BR_E_OVERFLOW,
                       "%s: a layer of %zu × %zu, rank %zu, is too large (at most 2^31 each)", fn,
                       m, n, r);
    br_blr_infer *p = calloc(1, sizeof *p);
    if (!p) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    *p = (br_blr_infer){.ctx = ctx, .m = m, .n = n, .r = r, .paths = P};
    p->k1 = round_up(n, BR_INF_BLOCK);
    p->k2 = round_up(r, BR_INF_BLOCK);
    p->rb1 = p->k2 / BR_INF_ROWS; /* r rows, in blocks of 32 = the words of a sign row */
    p->rb2 = round_up(m, BR_INF_ROWS) / BR_INF_ROWS;
    p->avx2 = br_inf_have_avx2();
    size_t words = p->k2 / 32;
    br_status st = BR_OK;
    for (size_t q = 0; q < P && st == BR_OK; q++) {
        const br_blr_path_host *ph = &layer->path[q];
        st = copy_scales(ctx, fn, q, "h", ph->h, m, &p->h[q]);
        if (st == BR_OK) st = copy_scales(ctx, fn, q, "l", ph->l, r, &p->l[q]);
        if (st == BR_OK) st = copy_scales(ctx, fn, q, "g", ph->g, n, &p->g[q]);
        if (st != BR_OK) break;
        p->bits1[q] = malloc(p->rb1 * BR_INF_ROWS * (p->k1 / 8));
        p->bits2[q] = malloc(p->rb2 * BR_INF_ROWS * (p->k2 / 8));
        if (!p->bits1[q] || !p->bits2[q]) {
            st = br_fail(ctx, BR_E_NOMEM, "%s: out of host memory for the packed signs", fn);
            break;
        }
        pack_transposed(ph->bits_v, n, words, p->k1, p->bits1[q]);
        pack_rows(ph->bits_u, m, words, p->rb2, p->bits2[q]);
    }
    if (st == BR_OK) {
        size_t units = CHUNK_TOKENS * P;
        p->tab1 = alloc_aligned(units * (p->k1 / BR_INF_GROUP) * BR_INF_TAB_PORTABLE);
        p->tab2 = alloc_aligned(units * (p->k2 / BR_INF_GROUP) * BR_INF_TAB_PORTABLE);
        p->sc1 = malloc(units * (p->k1 / BR_INF_BLOCK) * BR_INF_SCALES_PER_BLOCK * sizeof *p->sc1);
        p->sc2 = malloc(units * (p->k2 / BR_INF_BLOCK) * BR_INF_SCALES_PER_BLOCK * sizeof *p->sc2);
        p->a = malloc(units * p->rb1 * BR_INF_ROWS * sizeof *p->a);
        if (!p->tab1 || !p->tab2 || !p->sc1 || !p->sc2 || !p->a)
            st = br_fail(ctx, BR_E_NOMEM, "%s: out of host memory for the scratch", fn);
    }
    if (st != BR_OK) {
        br_blr_infer_free(p);
        return st;
    }
    *out = p;
    return BR_OK;
}

br_status br_blr_infer_set_kernel(br_blr_infer *p, br_infer_kernel kernel) {
    static const char *fn = "br_blr_infer_set_kernel";
    if (!p) return BR_E_ARG;
    switch (kernel) {
    case BR_INFER_AUTO: p->avx2 = br_inf_have_avx2(); return BR_OK;
    case BR_INFER_PORTABLE: p->avx2 = 0; return BR_OK;
    case BR_INFER_AVX2:
        if (!br_inf_have_avx2())
            return br_fail(p->ctx, BR_E_UNSUPPORTED,
                           "%s: this CPU has no AVX2 and FMA (or the build targets no x86-64)", fn);
        p->avx2 = 1;
        return BR_OK;
    }
    return br_fail(p->ctx, BR_E_ARG, "%s: kernel %d is not a br_infer_kernel", fn, (int)kernel);
}

const char *br_blr_infer_kernel(const br_blr_infer *p) {
    if (!p) return "none";
    return p->avx2 ? "avx2-lut" : "portable";
}

/* Tables of zf ⊙ zs (valid entries, then zeros) for blocks [b0, b0 + nb) of one
 * token's path. */
static void tables(const br_blr_infer *p, const float *zf, const float *zs, size_t valid, size_t b0,
                   size_t nb, uint8_t *tab, float *scale) {
    size_t i0 = b0 * BR_INF_BLOCK, len = nb * BR_INF_BLOCK;
    size_t v = valid > i0 ? valid - i0 : 0; /* valid entries of this unit */
    size_t g0 = i0 / BR_INF_GROUP;
    if (p->avx2)
        br_inf_tables_avx2(zf + (v ? i0 : 0), zs + (v ? i0 : 0), v < len ? v : len, len,
                           (int8_t *)(void *)(tab + g0 * BR_INF_TAB_AVX2),
                           scale + b0 * BR_INF_SCALES_PER_BLOCK);
    else
        br_inf_tables_portable(zf + (v ? i0 : 0), zs + (v ? i0 : 0), v < len ? v : len, len,
                               (float *)(void *)(tab + g0 * BR_INF_TAB_PORTABLE));
}

/* All tables of one stage for nt tokens: z of token t, path q is zf(t, q) ⊙ zs[q]. */
static void stage_tables(const br_blr_infer *p, size_t nt, const float *zf, size_t zf_tok,
                         size_t zf_path, float *const *zs, size_t valid, size_t k, uint8_t *tab,
                         float *scale) {
    size_t P = p->paths, nblk = k / BR_INF_BLOCK;
    size_t per = (nblk + TABLE_UNIT_BLOCKS - 1) / TABLE_UNIT_BLOCKS;
    size_t tbytes = (k / BR_INF_GROUP) * (p->avx2 ? BR_INF_TAB_AVX2 : BR_INF_TAB_PORTABLE);
    size_t units = nt * P * per;
    OMP("omp for schedule(static)")
    for (size_t u = 0; u < units; u++) {
        size_t tq = u / per, b0 = (u % per) * TABLE_UNIT_BLOCKS;
        size_t t = tq / P, q = tq % P;
        size_t nb = nblk - b0 < TABLE_UNIT_BLOCKS ? nblk - b0 : TABLE_UNIT_BLOCKS;
        tables(p, zf + t * zf_tok + q * zf_path, zs[q], valid, b0, nb, tab + tq * tbytes,
               scale + tq * nblk * BR_INF_SCALES_PER_BLOCK);
    }
}

/* out [32] = rows of row block rb of a stage (packed signs `bits` of k inputs) for
 * the tables of one token's path. */
static void stage_rows(const br_blr_infer *p, const uint8_t *bits, size_t k, size_t rb,
                       const uint8_t *tab, const float *scale, float *out) {
    const uint8_t *rbits = bits + rb * (k / 8) * BR_INF_ROWS;
    if (p->avx2)
        br_inf_rows_avx2(rbits, (const int8_t *)(const void *)tab, scale, k / BR_INF_BLOCK, out);
    else
        br_inf_rows_portable(rbits, (const float *)(const void *)tab, k / BR_INF_BLOCK, out);
}

/* y [nt][m] for x [nt][n], nt ≤ CHUNK_TOKENS. */
static void run_chunk(br_blr_infer *p, const float *x, size_t nt, const float *bias, float *y) {
    const size_t P = p->paths, m = p->m, n = p->n, r = p->r, k1 = p->k1, k2 = p->k2;
    const size_t tb = p->avx2 ? BR_INF_TAB_AVX2 : BR_INF_TAB_PORTABLE;
    const size_t tab1_tq = (k1 / BR_INF_GROUP) * tb, tab2_tq = (k2 / BR_INF_GROUP) * tb;
    const size_t nb1 = k1 / BR_INF_BLOCK, nb2 = k2 / BR_INF_BLOCK, ar = p->rb1 * BR_INF_ROWS;
    const size_t macs = nt * P * (n * r + r * m);
    const int parallel = macs >= PARALLEL_MIN_MACS;
    (void)parallel;
    OMP("omp parallel if (parallel)") {
        /* stage 1 tables: z = x_t ⊙ g_q (the same x for every path) */
        stage_tables(p, nt, x, n, 0, p->g, n, k1, p->tab1, p->sc1);
        /* a [t][q][k] = (S_Vᵀ z)[k]: units of one row block and one token */
        OMP("omp for schedule(static)")
        for (size_t u = 0; u < p->rb1 * nt; u++) {
            size_t rb = u / nt, t = u % nt;
            for (size_t q = 0; q < P; q++) {
                size_t tq = t * P + q;
                stage_rows(p, p->bits1[q], k1, rb, p->tab1 + tq * tab1_tq,
                           p->sc1 + tq * nb1 * BR_INF_SCALES_PER_BLOCK,
                           p->a + tq * ar + rb * BR_INF_ROWS);
            }
        }
        /* stage 2 tables: z = a_{t,q} ⊙ ℓ_q (rows of a past r are padding: not read) */
        stage_tables(p, nt, p->a, P * ar, ar, p->l, r, k2, p->tab2, p->sc2);
        /* y [t][i] = Σ_q h_q[i]·c_q[i] (+ bias[i]) */
        OMP("omp for schedule(static)")
        for (size_t u = 0; u < p->rb2 * nt; u++) {
            size_t rb = u / nt, t = u % nt;
            float c[BR_BLR_MAX_PATHS][BR_INF_ROWS];
            for (size_t q = 0; q < P; q++) {
                size_t tq = t * P + q;
                stage_rows(p, p->bits2[q], k2, rb, p->tab2 + tq * tab2_tq,
                           p->sc2 + tq * nb2 * BR_INF_SCALES_PER_BLOCK, c[q]);
            }
            size_t i0 = rb * BR_INF_ROWS, i1 = i0 + BR_INF_ROWS < m ? i0 + BR_INF_ROWS : m;
            float *yt = y + t * m;
            for (size_t i = i0; i < i1; i++) {
                float v = p->h[0][i] * c[0][i - i0];
                if (P > 1) v += p->h[1][i] * c[1][i - i0];
                yt[i] = bias ? v + bias[i] : v;
            }
        }
    }
}

/* The checks of a run: pointers, ntok, sizes, overlap of y with x or bias. */
static br_status check_run(const br_blr_infer *p, const char *fn, const void *x, size_t ntok,
                           const void *bias, const void *y, size_t elsize) {
    if (!p) return BR_E_ARG;
    if (!x) return br_fail(p->ctx, BR_E_ARG, "%s: x is NULL", fn);
    if (!y) return br_fail(p->ctx, BR_E_ARG, "%s: y is NULL", fn);
    if (ntok == 0) return br_fail(p->ctx, BR_E_SHAPE, "%s: ntok = 0, expected ≥ 1", fn);
    size_t big = p->m > p->n ? p->m : p->n;
    if (ntok > SIZE_MAX / 8 / big)
        return br_fail(p->ctx, BR_E_OVERFLOW, "%s: ntok = %zu tokens of %zu values overflow", fn,
                       ntok, big);
    uintptr_t y0 = (uintptr_t)y, y1 = y0 + ntok * p->m * elsize;
    uintptr_t x0 = (uintptr_t)x, x1 = x0 + ntok * p->n * elsize;
    if (y0 < x1 && x0 < y1) return br_fail(p->ctx, BR_E_ARG, "%s: y overlaps x", fn);
    if (bias) {
        uintptr_t b0 = (uintptr_t)bias, b1 = b0 + p->m * elsize;
        if (y0 < b1 && b0 < y1) return br_fail(p->ctx, BR_E_ARG, "%s: y overlaps bias", fn);
    }
    return BR_OK;
}

br_status br_blr_infer_run(br_blr_infer *p, const float *x, size_t ntok, const float *bias,
                           float *y) {
    BR_TRY(check_run(p, "br_blr_infer_run", x, ntok, bias, y, sizeof(float)));
    for (size_t t0 = 0; t0 < ntok; t0 += CHUNK_TOKENS) {
        size_t nt = ntok - t0 < CHUNK_TOKENS ? ntok - t0 : CHUNK_TOKENS;
        run_chunk(p, x + t0 * p->n, nt, bias, y + t0 * p->m);
    }
    return BR_OK;
}

br_status br_blr_infer_run_f16(br_blr_infer *p, const uint16_t *x, size_t ntok,
                               const uint16_t *bias, uint16_t *y) {
    static const char *fn = "br_blr_infer_run_f16";
    BR_TRY(check_run(p, fn, x, ntok, bias, y, sizeof(uint16_t)));
    if (!p->xf) {
        p->xf = malloc(CHUNK_TOKENS * p->n * sizeof *p->xf);
        p->yf = malloc(CHUNK_TOKENS * p->m * sizeof *p->yf);
        p->bf = malloc(p->m * sizeof *p->bf);
        if (!p->xf || !p->yf || !p->bf) {
            free(p->xf);
            free(p->yf);
            free(p->bf);
            p->xf = p->yf = p->bf = NULL;
            return br_fail(p->ctx, BR_E_NOMEM, "%s: out of host memory", fn);
        }
    }
    if (bias) br_half_to_float_n(bias, p->bf, p->m);
    for (size_t t0 = 0; t0 < ntok; t0 += CHUNK_TOKENS) {
        size_t nt = ntok - t0 < CHUNK_TOKENS ? ntok - t0 : CHUNK_TOKENS;
        br_half_to_float_n(x + t0 * p->n, p->xf, nt * p->n);
        run_chunk(p, p->xf, nt, bias ? p->bf : NULL, p->yf);
        br_half_from_float_n(p->yf, y + t0 * p->m, nt * p->m);
    }
    return BR_OK;
}
