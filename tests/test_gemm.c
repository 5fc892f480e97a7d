/* The GEMM family: br_mm and br_mm_bits against f64 references computed from
 * the exact f16 operands, the output block (ldo, ocol) against a poisoned output,
 * both bitmap layouts, the expand-then-mm path, graphs, and bad arguments; br_mm_tn
 * (ops/layer_ops.h) against f64 and against br_mm on transposed copies; on Vulkan,
 * each GEMM shader (tiled, cooperative matrices, their emulation) apart. */
#include "core/backend.h"
#include "core/internal.h"
#include "harness.h"
#include "ops/layer_ops.h"
#include "threads.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* The contract's tolerance; f32 accumulation on the CPU lands near 1e-6. */
#define MM_TOL 3e-3

/* BITRANK_TEST_SMALL=1 (the racecheck run): fewer and smaller shapes, still every
 * kernel family, plane kind, wgmma tile and A source, split-K and epilogue variant,
 * and one GEMM per plane kind with more tiles than a 132-SM GPU has CTAs. */
static int t_small(void) {
    const char *e = getenv("BITRANK_TEST_SMALL");
    return e && strcmp(e, "1") == 0;
}

/* Small mode: seconds since the first call, printed beside each epilogue GEMM (the
 * racecheck run's log shows where its time goes). */
static double t_elapsed(void) {
    static struct timespec t0;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (!t0.tv_sec && !t0.tv_nsec) t0 = t;
    return (double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec);
}

/* n f16 values, uniform in [-scale, scale) before rounding. */
static uint16_t *rand_f16(br_rng *r, size_t n, float scale) {
    uint16_t *v = t_xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = br_half_from_float(br_rng_sym(r) * scale);
    return v;
}

static uint32_t *rand_words(br_rng *r, size_t n) {
    uint32_t *v = t_xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (uint32_t)br_rng_u64(r);
    return v;
}

/* The ±1 plane [n][k] (f16 patterns) a bitmap stands for, read the way the header
 * states each layout. */
static uint16_t *plane_of_bits(const uint32_t *bits, br_bits_layout layout, size_t n, size_t k) {
    uint16_t *p = t_xmalloc(n * k * sizeof *p);
    size_t words = layout == BR_BITS_ROWS ? k / 32 : (n + 31) / 32;
    for (size_t j = 0; j < n; j++)
        for (size_t kk = 0; kk < k; kk++) {
            uint32_t bit = layout == BR_BITS_ROWS ? bits[j * words + kk / 32] >> (kk % 32)
                                                  : bits[kk * words + j / 32] >> (j % 32);
            p[j * k + kk] = (bit & 1u) ? 0x3C00u : 0xBC00u;
        }
    return p;
}

/* ref[i][j] = oscale · Σ act[i][kk]·plane[j][kk] in f64. */
static double *ref_mm(const uint16_t *act, const uint16_t *plane, size_t m, size_t n, size_t k,
                      float oscale) {
    double *ref = t_xmalloc(m * n * sizeof *ref);
    double *pl = t_xmalloc(n * k * sizeof *pl);
    for (size_t i = 0; i < n * k; i++)
        pl[i] = br_half_to_float(plane[i]);
    for (size_t i = 0; i < m; i++) {
        double *ai = t_xmalloc(k * sizeof *ai);
        for (size_t kk = 0; kk < k; kk++)
            ai[kk] = br_half_to_float(act[i * k + kk]);
        for (size_t j = 0; j < n; j++) {
            double s = 0;
            for (size_t kk = 0; kk < k; kk++)
                s += ai[kk] * pl[j * k + kk];
            ref[i * n + j] = (double)oscale * s;
        }
        free(ai);
    }
    free(pl);
    return ref;
}

/* Downloads out (count floats), checks the block [m][ocol..ocol+n) against ref and
 * that every other element still holds the NaN poison. Returns the relative error. */
static double check_block(br_ctx *ctx, const br_buf *out, size_t count, const double *ref, size_t m,
                          size_t n, size_t ldo, size_t ocol, const char *what) {
    float *o = t_download_f32(ctx, out, count);
    float *blk = t_xmalloc(m * n * sizeof *blk);
    for (size_t i = 0; i < m * n; i++)
        blk[i] = NAN;
    size_t untouched_bad = 0;
    for (size_t idx = 0; idx < count; idx++) {
        size_t i = idx / ldo, c = idx % ldo;
        if (i < m && c >= ocol && c < ocol + n)
            blk[i * n + c - ocol] = o[idx];
        else {
            uint32_t u;
            memcpy(&u, &o[idx], 4);
            untouched_bad += u != T_NAN32;
        }
    }
    double err = t_rel_err(blk, ref, m * n);
    CHECK(err < MM_TOL, "%s: relative error %.3g", what, err);
    CHECK(untouched_bad == 0, "%s: %zu elements outside the block were written", what,
          untouched_bad);
    free(o);
    free(blk);
    return err;
}

static void mm_shapes(void) {
    if (t_small()) return; /* the plain paths: full suite only */
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(1);
    static const size_t ms[] = {1, 7, 128, 300}, ns[] = {1, 33, 128, 200}, ks[] = {32, 96, 256};
    double worst = 0;
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t c = 0; c < 3; c++) {
                size_t m = ms[a], n = ns[b], k = ks[c];
                float oscale = (a + b + c) % 2 ? 1.0f : 0.37f;
                uint16_t *act = rand_f16(&r, m * k, 2.0f), *plane = rand_f16(&r, n * k, 1.0f);
                br_buf *ab = t_buf_from(ctx, BR_F16, act, m * k);
                br_buf *pb = t_buf_from(ctx, BR_F16, plane, n * k);
                br_buf *ob = t_buf_poison(ctx, BR_F32, m * n, T_NAN32);
                br_gemm g = {.m = m, .n = n, .k = k, .oscale = oscale};
                CHECK_OK(ctx, br_mm(ctx, ab, pb, ob, g));
                double *ref = ref_mm(act, plane, m, n, k, oscale);
                char what[64];
                snprintf(what, sizeof what, "mm m=%zu n=%zu k=%zu", m, n, k);
                double err = check_block(ctx, ob, m * n, ref, m, n, n, 0, what);
                if (err > worst) worst = err;
                free(act), free(plane), free(ref);
                br_buf_free(ab), br_buf_free(pb), br_buf_free(ob);
            }
    fprintf(stderr, "  mm: worst relative error %.3g over 48 shapes\n", worst);
    br_ctx_free(ctx);
}

/* Output blocks inside wider rows; act with more rows than m whose extra rows hold
 * NaN (they must not be read into the result). */
static void mm_ldo_ocol(void) {
    if (t_small()) return; /* the plain paths: full suite only */
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(2);
    static const struct {
        size_t m, n, k, ldo, ocol;
    } cases[] = {
        {5, 33, 64, 100, 17}, {130, 64, 32, 64 + 40, 40}, {1, 7, 96, 7, 0},
        {70, 200, 128, 0, 0}, {33, 1, 32, 3, 2},          {9, 100, 160, 1000, 900},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        size_t m = cases[ci].m, n = cases[ci].n, k = cases[ci].k, ocol = cases[ci].ocol;
        size_t ldo = cases[ci].ldo ? cases[ci].ldo : n;
        size_t act_rows = br_pad_rows(m) + 1;
        float oscale = -1.5f;
        uint16_t *act = rand_f16(&r, act_rows * k, 1.0f), *plane = rand_f16(&r, n * k, 1.0f);
        for (size_t i = m * k; i < act_rows * k; i++)
            act[i] = T_NAN16;
        br_buf *ab = t_buf_from(ctx, BR_F16, act, act_rows * k);
        br_buf *pb = t_buf_from(ctx, BR_F16, plane, n * k);
        size_t count = m * ldo + 50; /* room past the last row: must stay poisoned */
        br_buf *ob = t_buf_poison(ctx, BR_F32, count, T_NAN32);
        br_gemm g = {.m = m, .n = n, .k = k, .ldo = cases[ci].ldo, .ocol = ocol, .oscale = oscale};
        CHECK_OK(ctx, br_mm(ctx, ab, pb, ob, g));
        double *ref = ref_mm(act, plane, m, n, k, oscale);
        char what[80];
        snprintf(what, sizeof what, "mm m=%zu n=%zu k=%zu ldo=%zu ocol=%zu", m, n, k, ldo, ocol);
        check_block(ctx, ob, count, ref, m, n, ldo, ocol, what);
        free(act), free(plane), free(ref);
        br_buf_free(ab), br_buf_free(pb), br_buf_free(ob);
    }
    br_ctx_free(ctx);
}

/* oscale is applied (negative, tiny, zero taken literally). */
static void mm_oscale(void) {
    if (t_small()) return; /* the plain paths: full suite only */
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(3);
    size_t m = 19, n = 45, k = 64;
    uint16_t *act = rand_f16(&r, m * k, 1.0f), *plane = rand_f16(&r, n * k, 1.0f);
    br_buf *ab = t_buf_from(ctx, BR_F16, act, m * k);
    br_buf *pb = t_buf_from(ctx, BR_F16, plane, n * k);
    static const float scales[] = {-2.0f, 1.0f / 1024, 3.0e4f, 0.0f};
    for (size_t s = 0; s < 4; s++) {
        br_buf *ob = t_buf_poison(ctx, BR_F32, m * n, T_NAN32);
        br_gemm g = {.m = m, .n = n, .k = k, .oscale = scales[s]};
        CHECK_OK(ctx, br_mm(ctx, ab, pb, ob, g));
        double *ref = ref_mm(act, plane, m, n, k, scales[s]);
        float *o = t_download_f32(ctx, ob, m * n);
        if (scales[s] == 0.0f) {
            size_t nonzero = 0;
            for (size_t i = 0; i < m * n; i++)
                nonzero += o[i] != 0.0f;
            CHECK(nonzero == 0, "oscale 0: %zu outputs are not 0", nonzero);
        } else {
            double err = t_rel_err(o, ref, m * n);
            CHECK(err < MM_TOL, "oscale %g: relative error %.3g", scales[s], err);
        }
        free(ref), free(o);
        br_buf_free(ob);
    }
    free(act), free(plane);
    br_buf_free(ab), br_buf_free(pb);
    br_ctx_free(ctx);
}

/* f16 operands at the edges of the format: subnormals (they must not be flushed)
 * and the largest normals, row by row against f64. */
static void mm_special_values(void) {
    if (t_small()) return; /* the plain paths: full suite only */
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(9);
    size_t m = 4, n = 40, k = 64;
    uint16_t *act = t_xmalloc(m * k * sizeof *act), *plane = t_xmalloc(n * k * sizeof *plane);
    for (size_t kk = 0; kk < k; kk++) {
        uint16_t sign = (uint16_t)((br_rng_u64(&r) & 1u) << 15);
        act[0 * k + kk] = sign | (uint16_t)(1 + br_rng_u64(&r) % 0x3ffu);   /* subnormal */
        act[1 * k + kk] = sign | (uint16_t)(0x7bffu - br_rng_u64(&r) % 64); /* near 65504 */
        act[2 * k + kk] = br_half_from_float(br_rng_sym(&r));
        act[3 * k + kk] = sign | (uint16_t)(1 + br_rng_u64(&r) % 0x3ffu);
    }
    for (size_t i = 0; i < n * k; i++) {
        uint16_t sign = (uint16_t)((br_rng_u64(&r) & 1u) << 15);
        plane[i] = i % 3 == 0 ? sign | (uint16_t)(1 + br_rng_u64(&r) % 0x3ffu)
                              : br_half_from_float(br_rng_sym(&r));
    }
    for (size_t j = 0; j < n; j++) /* odd plane rows all subnormal: row 3 meets products ~2^-40 */
        for (size_t kk = 0; kk < k; kk++)
            if (j % 2) plane[j * k + kk] = (uint16_t)(plane[j * k + kk] & 0x83ffu) | 1u;
    br_buf *ab = t_buf_from(ctx, BR_F16, act, m * k), *pb = t_buf_from(ctx, BR_F16, plane, n * k);
    br_buf *ob = t_buf_poison(ctx, BR_F32, m * n, T_NAN32);
    CHECK_OK(ctx, br_mm(ctx, ab, pb, ob, (br_gemm){.m = m, .n = n, .k = k, .oscale = 1.0f}));
    double *ref = ref_mm(act, plane, m, n, k, 1.0f);
    float *o = t_download_f32(ctx, ob, m * n);
    /* per row, and per column parity (odd columns of row 3 are the tiny ones) */
    for (size_t i = 0; i < m; i++)
        for (size_t parity = 0; parity < 2; parity++) {
            float got[20];
            double want[20];
            for (size_t j = parity; j < n; j += 2) {
                got[j / 2] = o[i * n + j];
                want[j / 2] = ref[i * n + j];
            }
            double err = t_rel_err(got, want, n / 2);
            CHECK(err < MM_TOL, "special values, row %zu, parity %zu: relative error %.3g", i,
                  parity, err);
        }
    free(act), free(plane), free(ref), free(o);
    br_buf_free(ab), br_buf_free(pb), br_buf_free(ob);
    br_ctx_free(ctx);
}

/* One bitmap GEMM checked against f64 on its ±1 plane and against br_mm on the same
 * plane expanded on the host. Returns the relative error vs br_mm. */
static double bits_case(br_ctx *ctx, br_rng *r, br_bits_layout layout, size_t m, size_t n, size_t k,
                        size_t ldo, size_t ocol, float oscale) {
    size_t nbits = layout == BR_BITS_ROWS ? n * (k / 32) : k * ((n + 31) / 32);
    size_t stride = ldo ? ldo : n, count = (m - 1) * stride + ocol + n;
    uint16_t *act = rand_f16(r, m * k, 1.0f);
    uint32_t *bits = rand_words(r, nbits); /* COLS: pad bits past n are random too */
    uint16_t *plane = plane_of_bits(bits, layout, n, k);
    br_buf *ab = t_buf_from(ctx, BR_F16, act, m * k);
    br_buf *bb = t_buf_from(ctx, BR_U32, bits, nbits);
    br_buf *pb = t_buf_from(ctx, BR_F16, plane, n * k);
    br_buf *ob = t_buf_poison(ctx, BR_F32, count, T_NAN32);
    br_buf *om = t_buf_poison(ctx, BR_F32, count, T_NAN32);
    br_gemm g = {.m = m, .n = n, .k = k, .ldo = ldo, .ocol = ocol, .oscale = oscale};
    CHECK_OK(ctx, br_mm_bits(ctx, ab, bb, layout, ob, g));
    CHECK_OK(ctx, br_mm(ctx, ab, pb, om, g));
    double *ref = ref_mm(act, plane, m, n, k, oscale);
    char what[96];
    snprintf(what, sizeof what, "mm_bits %s m=%zu n=%zu k=%zu ldo=%zu ocol=%zu",
             layout == BR_BITS_ROWS ? "rows" : "cols", m, n, k, stride, ocol);
    check_block(ctx, ob, count, ref, m, n, stride, ocol, what);
    float *got = t_download_f32(ctx, ob, count), *viamm = t_download_f32(ctx, om, count);
    double *mmd = t_xmalloc(count * sizeof *mmd);
    for (size_t i = 0; i < count; i++)
        mmd[i] = isnan(viamm[i]) ? 0 : viamm[i];
    for (size_t i = 0; i < count; i++)
        if (isnan(got[i]) && isnan(viamm[i])) got[i] = 0; /* both untouched */
    double err = t_rel_err(got, mmd, count);
    CHECK(err < MM_TOL, "%s vs br_mm on the expanded plane: relative error %.3g", what, err);
    free(act), free(bits), free(plane), free(ref), free(got), free(viamm), free(mmd);
    br_buf_free(ab), br_buf_free(bb), br_buf_free(pb), br_buf_free(ob), br_buf_free(om);
    return err;
}

static const struct {
    size_t m, n, k, ldo, ocol;
    float oscale;
} bits_shapes[] = {
    {1, 1, 32, 0, 0, 1.0f},       {7, 33, 96, 0, 0, 0.5f},      {128, 128, 256, 0, 0, 1.0f},
    {300, 200, 64, 0, 0, -0.25f}, {70, 40, 128, 90, 50, 2.0f},  {3, 31, 32, 40, 5, 1.0f},
    {65, 97, 160, 0, 0, 1.0f},    {129, 64, 32, 64, 0, 0.125f},
};
#define N_BITS_SHAPES (sizeof bits_shapes / sizeof bits_shapes[0])

static void mm_bits_layouts(void) {
    if (t_small()) return; /* the plain paths: full suite only */
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(4);
    double worst = 0;
    for (int layout = 0; layout < 2; layout++)
        for (size_t s = 0; s < N_BITS_SHAPES; s++) {
            double e = bits_case(ctx, &r, (br_bits_layout)layout, bits_shapes[s].m,
                                 bits_shapes[s].n, bits_shapes[s].k, bits_shapes[s].ldo,
                                 bits_shapes[s].ocol, bits_shapes[s].oscale);
            if (e > worst) worst = e;
        }
    fprintf(stderr, "  mm_bits: worst relative difference from br_mm %.3g\n", worst);
    br_ctx_free(ctx);
}

/* Option bits_gemm=0 (expand then mm) against the bitmap GEMM on the same data. */
static void mm_bits_expand_path(void) {
    if (t_small()) return; /* the plain paths: full suite only */
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(5);
    CHECK(option_is(ctx, "bits_gemm", "1"), "bits_gemm defaults to 1");
    double worst = 0;
    for (int layout = 0; layout < 2; layout++)
        for (size_t s = 0; s < N_BITS_SHAPES; s++) {
            size_t m = bits_shapes[s].m, n = bits_shapes[s].n, k = bits_shapes[s].k;
            size_t nbits = layout == BR_BITS_ROWS ? n * (k / 32) : k * ((n + 31) / 32);
            uint16_t *act = rand_f16(&r, m * k, 1.0f);
            uint32_t *bits = rand_words(&r, nbits);
            br_buf *ab = t_buf_from(ctx, BR_F16, act, m * k);
            br_buf *bb = t_buf_from(ctx, BR_U32, bits, nbits);
            br_buf *o1 = t_buf_poison(ctx, BR_F32, m * n, T_NAN32);
            br_buf *o0 = t_buf_poison(ctx, BR_F32, m * n, T_NAN32);
            br_gemm g = {.m = m, .n = n, .k = k, .oscale = bits_shapes[s].oscale};
            CHECK_OK(ctx, br_ctx_set_options(ctx, "bits_gemm=1"));
            CHECK_OK(ctx, br_mm_bits(ctx, ab, bb, (br_bits_layout)layout, o1, g));
            CHECK(ran_op(ctx, "mm_bits"), "bits_gemm=1 ran %s", br_ctx_last_kernel(ctx));
            CHECK_OK(ctx, br_ctx_set_options(ctx, "bits_gemm=0"));
            CHECK_OK(ctx, br_mm_bits(ctx, ab, bb, (br_bits_layout)layout, o0, g));
            CHECK(ran_op(ctx, "mm"), "bits_gemm=0 ran %s", br_ctx_last_kernel(ctx));
            uint16_t *plane = plane_of_bits(bits, (br_bits_layout)layout, n, k);
            double *ref = ref_mm(act, plane, m, n, k, g.oscale);
            float *got0 = t_download_f32(ctx, o0, m * n), *got1 = t_download_f32(ctx, o1, m * n);
            double *d1 = t_xmalloc(m * n * sizeof *d1);
            for (size_t i = 0; i < m * n; i++)
                d1[i] = got1[i];
            double e_ref = t_rel_err(got0, ref, m * n), e_bits = t_rel_err(got0, d1, m * n);
            CHECK(e_ref < MM_TOL, "expand path %d m=%zu n=%zu k=%zu vs f64: %.3g", layout, m, n, k,
                  e_ref);
            CHECK(e_bits < MM_TOL, "expand path %d m=%zu n=%zu k=%zu vs bits path: %.3g", layout, m,
                  n, k, e_bits);
            if (e_bits > worst) worst = e_bits;
            free(act), free(bits), free(plane), free(ref), free(got0), free(got1), free(d1);
            br_buf_free(ab), br_buf_free(bb), br_buf_free(o1), br_buf_free(o0);
        }
    fprintf(stderr, "  expand path vs bitmap GEMM: worst relative difference %.3g\n", worst);
    br_ctx_free(ctx);

    /* the environment's override sets the option for new contexts */
    setenv("BITRANK_OPTIONS", "bits_gemm=0", 1);
    ctx = t_ctx();
    CHECK(option_is(ctx, "bits_gemm", "0"), "BITRANK_OPTIONS=bits_gemm=0 ignored");
    unsetenv("BITRANK_OPTIONS");
    double e = bits_case(ctx, &r, BR_BITS_COLS, 20, 50, 64, 0, 0, 1.0f);
    CHECK(e < MM_TOL, "env expand path: %.3g", e);
    br_ctx_free(ctx);
}

/* A graph recorded on the expand path keeps its plane after the context's plane grew. */
static void mm_bits_expand_graph(void) {
    if (t_small()) return; /* the plain paths: full suite only */
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(6);
    CHECK_OK(ctx, br_ctx_set_options(ctx, "bits_gemm=0"));
    size_t m = 9, n = 33, k = 64, words = k / 32;
    uint16_t *act = rand_f16(&r, m * k, 1.0f);
    uint32_t *bits = rand_words(&r, n * words);
    br_buf *ab = t_buf_from(ctx, BR_F16, act, m * k);
    br_buf *bb = t_buf_from(ctx, BR_U32, bits, n * words);
    br_buf *ob = t_buf_poison(ctx, BR_F32, m * n, T_NAN32);
    br_gemm g = {.m = m, .n = n, .k = k, .oscale = 1.0f};
    br_graph *graph = NULL;
    CHECK_OK(ctx, br_graph_begin(ctx));
    CHECK_OK(ctx, br_mm_bits(ctx, ab, bb, BR_BITS_ROWS, ob, g));
    CHECK_OK(ctx, br_graph_end(ctx, &graph));
    CHECK(br_graph_op_count(graph) == 2, "expand path records 2 ops, got %zu",
          br_graph_op_count(graph));
    float *o = t_download_f32(ctx, ob, m * n);
    size_t written = t_count_written32(o, m * n);
    CHECK(written == 0, "recording wrote %zu outputs", written);
    free(o);

    /* a larger eager call grows the context's plane */
    br_buf *plane_before = ctx->expand_plane;
    size_t big_m = 4, big_n = 300, big_k = 256, big_words = big_k / 32;
    uint16_t *big_act = rand_f16(&r, big_m * big_k, 1.0f);
    uint32_t *big_bits = rand_words(&r, big_n * big_words);
    br_buf *bab = t_buf_from(ctx, BR_F16, big_act, big_m * big_k);
    br_buf *bbb = t_buf_from(ctx, BR_U32, big_bits, big_n * big_words);
    br_buf *bob = t_buf_poison(ctx, BR_F32, big_m * big_n, T_NAN32);
    br_gemm bg = {.m = big_m, .n = big_n, .k = big_k, .oscale = 1.0f};
    CHECK_OK(ctx, br_mm_bits(ctx, bab, bbb, BR_BITS_ROWS, bob, bg));
    CHECK(ctx->expand_plane != plane_before && ctx->n_expand_retired >= 1,
          "the expand plane grew and the old one was retired");
    uint16_t *big_plane = plane_of_bits(big_bits, BR_BITS_ROWS, big_n, big_k);
    double *big_ref = ref_mm(big_act, big_plane, big_m, big_n, big_k, 1.0f);
    check_block(ctx, bob, big_m * big_n, big_ref, big_m, big_n, big_n, 0, "grown expand plane");

    /* the graph still runs on the plane it named */
    for (int rep = 0; rep < 2; rep++) {
        CHECK_OK(ctx, br_buf_fill(ob, 0, m * n, T_NAN32));
        CHECK_OK(ctx, br_graph_launch(graph));
        CHECK_OK(ctx, br_ctx_sync(ctx));
        uint16_t *plane = plane_of_bits(bits, BR_BITS_ROWS, n, k);
        double *ref = ref_mm(act, plane, m, n, k, 1.0f);
        check_block(ctx, ob, m * n, ref, m, n, n, 0, "graph on the retired plane");
        free(plane), free(ref);
    }
    br_graph_free(graph);
    free(act), free(bits), free(big_act), free(big_bits), free(big_plane), free(big_ref);
    br_buf_free(ab), br_buf_free(bb), br_buf_free(ob);
    br_buf_free(bab), br_buf_free(bbb), br_buf_free(bob);
    br_ctx_free(ctx);
}

/* Eager calls on ever larger shapes keep one expand plane: an outgrown plane that
 * no recording named is freed at once, not kept until the context is freed. */
static void mm_bits_expand_eager_growth(void) {
    if (t_small()) return; /* the plain paths: full suite only */
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(10);
    CHECK_OK(ctx, br_ctx_set_options(ctx, "bits_gemm=0"));
    for (size_t i = 0; i < 6; i++) { /* every call needs a larger plane */
        double e = bits_case(ctx, &r, i % 2 ? BR_BITS_COLS : BR_BITS_ROWS, 5, 20 + 30 * i,
                             32 * (i + 1), 0, 0, 1.0f);
        CHECK(e < MM_TOL, "eager growth %zu: %.3g", i, e);
    }
    CHECK(ctx->n_expand_retired == 0, "%zu outgrown planes kept though no graph named them",
          ctx->n_expand_retired);

    /* a recording names the plane: outgrown, it is kept for the graph (once) */
    size_t m = 4, n = 40, k = 64, words = k / 32;
    uint16_t *act = rand_f16(&r, m * k, 1.0f);
    uint32_t *bits = rand_words(&r, n * words);
    br_buf *ab = t_buf_from(ctx, BR_F16, act, m * k),
           *bb = t_buf_from(ctx, BR_U32, bits, n * words);
    br_buf *ob = t_buf_poison(ctx, BR_F32, m * n, T_NAN32);
    br_gemm g = {.m = m, .n = n, .k = k, .oscale = 1.0f};
    br_graph *graph = NULL;
    CHECK_OK(ctx, br_graph_begin(ctx));
    CHECK_OK(ctx, br_mm_bits(ctx, ab, bb, BR_BITS_ROWS, ob, g));
    CHECK_OK(ctx, br_graph_end(ctx, &graph));
    for (size_t i = 0; i < 2; i++) {
        double e = bits_case(ctx, &r, BR_BITS_ROWS, 3, 300 + 100 * i, 256, 0, 0, 1.0f);
        CHECK(e < MM_TOL, "growth after a recording %zu: %.3g", i, e);
    }
    CHECK(ctx->n_expand_retired == 1, "%zu planes retired, want the one the graph names",
          ctx->n_expand_retired);
    CHECK_OK(ctx, br_graph_launch(graph));
    uint16_t *plane = plane_of_bits(bits, BR_BITS_ROWS, n, k);
    double *ref = ref_mm(act, plane, m, n, k, 1.0f);
    check_block(ctx, ob, m * n, ref, m, n, n, 0, "graph on its retired plane");
    br_graph_free(graph);
    free(act), free(bits), free(plane), free(ref);
    br_buf_free(ab), br_buf_free(bb), br_buf_free(ob);
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- epilogue, lda */

/* One GEMM with the epilogue: plane kind 0 (br_mm on an f16 plane), 1 (bits ROWS) or
 * 2 (bits COLS); act rows lda apart in a view that starts act_off elements into its
 * parent (the gaps hold NaN: reading them shows); cmode 0 no c, 1 c apart from out,
 * 2 c = out (in place). */
typedef struct epi_spec {
    int kind;
    size_t m, n, k, lda, act_off, ldo, ocol;
    float oscale;
    int colscale, cmode;
    float beta;
    const char *ran; /* non-NULL: br_ctx_last_kernel after the GEMM must contain it */
} epi_spec;

static float rand_scale(br_rng *r) { /* ±[0.5, 2): a wrong or missing factor shows */
    float v = 1.25f + 0.75f * br_rng_sym(r);
    return br_rng_u64(r) & 1u ? v : -v;
}

/* epi_run, keeping a copy of out (count floats) in *kept where kept is not NULL. */
static void epi_run_keep(br_ctx *ctx, br_rng *r, const epi_spec *sp, const char *label,
                         float **kept, size_t *kept_count) {
    size_t m = sp->m, n = sp->n, k = sp->k;
    size_t lda = sp->lda ? sp->lda : k, stride = sp->ldo ? sp->ldo : n;
    size_t act_count = sp->act_off + (m - 1) * lda + k + 5;
    uint16_t *act = rand_f16(r, m * k, 1.0f);
    uint16_t *act_all = t_xmalloc(act_count * sizeof *act_all);
    for (size_t i = 0; i < act_count; i++)
        act_all[i] = T_NAN16;
    for (size_t i = 0; i < m; i++)
        memcpy(act_all + sp->act_off + i * lda, act + i * k, k * sizeof *act);
    br_buf *act_parent = t_buf_from(ctx, BR_F16, act_all, act_count), *ab = NULL;
    CHECK_OK(ctx, br_buf_view(act_parent, sp->act_off, act_count - sp->act_off, &ab));

    size_t nbits = sp->kind == 1 ? n * (k / 32) : k * ((n + 31) / 32);
    uint32_t *bits = NULL;
    uint16_t *plane;
    br_buf *pb;
    if (sp->kind == 0) {
        plane = rand_f16(r, n * k, 1.0f);
        pb = t_buf_from(ctx, BR_F16, plane, n * k);
    } else {
        bits = rand_words(r, nbits);
        plane = plane_of_bits(bits, sp->kind == 1 ? BR_BITS_ROWS : BR_BITS_COLS, n, k);
        pb = t_buf_from(ctx, BR_U32, bits, nbits);
    }
    float *cs = t_xmalloc((n + 3) * sizeof *cs);
    for (size_t j = 0; j < n + 3; j++)
        cs[j] = rand_scale(r);
    br_buf *csb = sp->colscale ? t_buf_from(ctx, BR_F32, cs, n + 3) : NULL;

    /* c: random in the block (about the size of the products), NaN around it */
    size_t count = (m - 1) * stride + sp->ocol + n + 7;
    float *c_host = t_xmalloc(count * sizeof *c_host);
    uint32_t nan_bits = T_NAN32;
    float nanf_;
    memcpy(&nanf_, &nan_bits, 4);
    for (size_t idx = 0; idx < count; idx++) {
        size_t i = idx / stride, col = idx % stride;
        int in = i < m && col >= sp->ocol && col < sp->ocol + n;
        c_host[idx] = in || sp->cmode == 1 ? 4.0f * br_rng_sym(r) : nanf_;
    }
    br_buf *ob = sp->cmode == 2 ? t_buf_from(ctx, BR_F32, c_host, count)
                                : t_buf_poison(ctx, BR_F32, count, T_NAN32);
    br_buf *cb = sp->cmode == 1   ? t_buf_from(ctx, BR_F32, c_host, count)
                 : sp->cmode == 2 ? ob
                                  : NULL;
    br_gemm g = {.m = m,
                 .n = n,
                 .k = k,
                 .ldo = sp->ldo,
                 .ocol = sp->ocol,
                 .oscale = sp->oscale,
                 .lda = sp->lda,
                 .colscale = csb,
                 .c = cb,
                 .beta = sp->beta};
    if (sp->kind == 0)
        CHECK_OK(ctx, br_mm(ctx, ab, pb, ob, g));
    else
        CHECK_OK(ctx, br_mm_bits(ctx, ab, pb, sp->kind == 1 ? BR_BITS_ROWS : BR_BITS_COLS, ob, g));
    if (sp->ran)
        CHECK(strstr(br_ctx_last_kernel(ctx), sp->ran), "%s: ran %s, not %s", label,
              br_ctx_last_kernel(ctx), sp->ran);

    double *ref = ref_mm(act, plane, m, n, k, sp->oscale);
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            double v = ref[i * n + j];
            if (sp->colscale) v *= cs[j];
            if (sp->cmode) v += (double)sp->beta * c_host[i * stride + sp->ocol + j];
            ref[i * n + j] = v;
        }
    char what[200];
    snprintf(what, sizeof what,
             "%s: %s m=%zu n=%zu k=%zu lda=%zu@%zu ldo=%zu ocol=%zu oscale=%g%s%s beta=%g", label,
             sp->kind == 0   ? "mm"
             : sp->kind == 1 ? "bits rows"
                             : "bits cols",
             m, n, k, lda, sp->act_off, stride, sp->ocol, sp->oscale,
             sp->colscale ? " colscale" : "",
             sp->cmode == 1   ? " c"
             : sp->cmode == 2 ? " c=out"
                              : "",
             sp->beta);
    check_block(ctx, ob, count, ref, m, n, stride, sp->ocol, what);
    if (t_small()) fprintf(stderr, "  [%.1f s] %s\n", t_elapsed(), what);
    if (kept) *kept = t_download_f32(ctx, ob, count), *kept_count = count;
    if (sp->cmode == 1) { /* c is only read */
        float *c_after = t_download_f32(ctx, cb, count);
        CHECK(t_bits_differ32(c_after, c_host, count) == 0, "%s: c was written", what);
        free(c_after);
    }
    free(act), free(act_all), free(bits), free(plane), free(cs), free(c_host), free(ref);
    br_buf_free(ab), br_buf_free(act_parent), br_buf_free(pb), br_buf_free(csb);
    br_buf_free(ob);
    if (sp->cmode == 1) br_buf_free(cb);
}

static void epi_run(br_ctx *ctx, br_rng *r, const epi_spec *sp, const char *label) {
    epi_run_keep(ctx, r, sp, label, NULL, NULL);
}

/* colscale alone, c alone, c = out with beta 1 and −0.5, everything with oscale ≠ 1,
 * act as a column block of a wider matrix (the layer's [T][2r] operand), an act
 * stride no 16-byte kernel can take, one row; n both a multiple of 4 (TMA stores)
 * and not. */
static const epi_spec epi_cases[] = {
    {.m = 37, .n = 70, .k = 96, .oscale = 1.0f, .colscale = 1},
    {.m = 130, .n = 200, .k = 64, .ldo = 230, .ocol = 20, .oscale = 1.0f, .cmode = 1, .beta = 1.0f},
    {.m = 65, .n = 97, .k = 160, .oscale = 1.0f, .cmode = 2, .beta = 1.0f},
    {.m = 300, .n = 256, .k = 128, .oscale = 1.0f, .cmode = 2, .beta = -0.5f},
    {.m = 129,
     .n = 33,
     .k = 32,
     .ldo = 50,
     .ocol = 7,
     .oscale = -1.5f,
     .colscale = 1,
     .cmode = 1,
     .beta = 0.75f},
    {.m = 200, .n = 128, .k = 256, .oscale = 0.37f, .colscale = 1, .cmode = 2, .beta = -0.5f},
    {.m = 77,
     .n = 96,
     .k = 96,
     .lda = 192,
     .act_off = 96,
     .oscale = 0.5f,
     .colscale = 1,
     .cmode = 2,
     .beta = 1.0f},
    {.m = 20,
     .n = 40,
     .k = 64,
     .lda = 70,
     .act_off = 3,
     .oscale = 2.0f,
     .colscale = 1,
     .cmode = 1,
     .beta = -1.0f},
    {.m = 1,
     .n = 5,
     .k = 32,
     .lda = 40,
     .act_off = 8,
     .oscale = 1.0f,
     .colscale = 1,
     .cmode = 2,
     .beta = 0.25f},
};
#define N_EPI_CASES (sizeof epi_cases / sizeof epi_cases[0])

/* Every case on every plane kind; on CUDA also on the mma.sync family, and the
 * bitmap kinds through the expand-then-mm path. */
static void mm_epilogue(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(11);
    int cuda = strcmp(br_ctx_backend(ctx), "cpu") != 0;
    for (int kernel = 0; kernel < (cuda ? 2 : 1); kernel++) {
        CHECK_OK(ctx, br_ctx_set_options(ctx, kernel ? "gemm=mma" : "gemm=auto"));
        for (int kind = 0; kind < 3; kind++)
            for (size_t ci = 0; ci < N_EPI_CASES; ci++) {
                /* small (the tiles case covers auto): the simple kernel (case 7) and
                 * direct stores (case 2) on auto, one case per kind on mma.sync */
                static const unsigned small_auto[3] = {0x80u, 0x04u, 0x00u};
                if (t_small() &&
                    (kernel ? ci != (size_t)(1 + 3 * kind) : !((small_auto[kind] >> ci) & 1u)))
                    continue;
                epi_spec sp = epi_cases[ci];
                sp.kind = kind;
                epi_run(ctx, &r, &sp, kernel ? "mma.sync" : "auto");
            }
    }
    CHECK_OK(ctx, br_ctx_set_options(ctx, "gemm=auto,bits_gemm=0"));
    for (int kind = t_small() ? 2 : 1; kind < 3; kind++)
        for (size_t ci = t_small() ? 6 : 0; ci < N_EPI_CASES; ci += t_small() ? N_EPI_CASES : 2) {
            epi_spec sp = epi_cases[ci];
            sp.kind = kind;
            epi_run(ctx, &r, &sp, "expand path");
        }
    br_ctx_free(ctx);
}

/* Every Hopper tile and A source (option gemm_tile), split-K (gemm_splitk,
 * with k blocks that the splits do not divide evenly, and as AUTO picks it for a
 * skinny K = tokens shape), each with the epilogue; GEMMs with more tiles than CTAs
 * (a persistent CTA runs several). Where the hooks do not apply (the CPU, mma.sync)
 * the same cases check the plain path. */
static void mm_tiles_splitk(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(12);
    const int wgmma = has_wgmma(ctx);
    static const char *const tiles[] = {"256x128", "256x112", "128x256",
                                        "128x128", "128x192", "256x96"};
    /* A sources built per tile (bitmaps; f16 planes take the plane from shared memory):
     * smem and reg2 everywhere, reg4 where built */
    static const int reg4[] = {0, 1, 0, 1, 1, 1};
    /* small: every tile once, every (plane kind, A source) once: bit 3·kind + src of
     * the tile's mask (f16 256x128, rows reg4 256x112, rows and cols reg2 128x256,
     * rows smem 128x128, cols reg4 128x192, cols smem 256x96) */
    static const unsigned small_set[] = {1u << 0, 1u << 5, 1u << 4 | 1u << 7,
                                         1u << 3, 1u << 8, 1u << 6};
    const size_t nt = sizeof tiles / sizeof tiles[0];
    for (size_t t = 0; t < nt; t++)
        for (int kind = 0; kind < 3; kind++)
            for (int src = 0; src < (kind ? 2 + reg4[t] : 1); src++) {
                static const char *const srcs[] = {"smem", "reg2", "reg4"};
                if (t_small() && !((small_set[t] >> (3 * kind + src)) & 1u)) continue;
                char tile[32], opt[48], label[48];
                snprintf(tile, sizeof tile, "%s/%s", tiles[t], srcs[src]);
                snprintf(opt, sizeof opt, "gemm_tile=%s", tile);
                CHECK_OK(ctx, br_ctx_set_options(ctx, opt));
                snprintf(label, sizeof label, "tile %s", tile);
                /* two k blocks, the second half empty (k = 96); act a column block */
                epi_spec sp = {.kind = kind,
                               .m = t_small() ? 150 : 300,
                               .n = t_small() ? 200 : 520,
                               .k = 96,
                               .lda = 160,
                               .act_off = 64,
                               .oscale = -0.75f,
                               .colscale = 1,
                               .cmode = 2,
                               .beta = -0.5f,
                               .ran = wgmma ? tile : NULL};
                epi_run(ctx, &r, &sp, label);
                if (t_small()) continue;
                sp.n = 97, sp.ldo = 130, sp.ocol = 9, sp.cmode = 1,
                sp.beta = 2.0f; /* direct stores */
                epi_run(ctx, &r, &sp, label);
            }
    CHECK_OK(ctx, br_ctx_set_options(ctx, "gemm_tile=auto"));

    /* several units per CTA (the grid capped by gemm_ctas) on the picked
     * tile, with more k blocks per unit (10, or 32 split 11 + 11 + 10) than pipeline
     * stages: the stage ring's phases carried from unit to unit; plain and full
     * epilogues, bitmaps, split-K (k ≥ 2048: the ops reserve split room only there) */
    for (int v = 0; v < 5; v++) {
        if (t_small() && v > 1) break;
        const int kind = v == 2 ? 1 : v == 3 ? 2 : 0, plain = v == 1 || v == 3;
        char ctas[8], opt[48];
        snprintf(ctas, sizeof ctas, "%d", t_small() ? 1 : 1 + v % 3);
        snprintf(opt, sizeof opt, "gemm_ctas=%s,gemm_splitk=%s", ctas, v == 4 ? "3" : "auto");
        CHECK_OK(ctx, br_ctx_set_options(ctx, opt));
        epi_spec sp = {.kind = kind,
                       .m = t_small() ? 150 : 300,
                       .n = t_small() ? 260 : 520,
                       .k = v == 4 ? 2048 : 640,
                       .oscale = plain ? 0.25f : -0.5f,
                       .colscale = !plain,
                       .cmode = plain    ? 0
                                : v == 2 ? 2
                                         : 1,
                       .beta = 0.75f,
                       .ran = wgmma && v == 4 ? "split 3" : NULL};
        char label[64];
        snprintf(label, sizeof label, "auto tile on %s CTA(s)%s", ctas,
                 v == 4 ? ", split-K 3" : "");
        epi_run(ctx, &r, &sp, label);
    }
    CHECK_OK(ctx, br_ctx_set_options(ctx, "gemm_ctas=all,gemm_splitk=auto"));

    /* split-K: forced 3 (32 k blocks: 11 + 11 + 10), on the default and two other tiles */
    CHECK_OK(ctx, br_ctx_set_options(ctx, "gemm_splitk=3"));
    for (int kind = 0; kind < 3; kind++)
        for (int t = 0; t < 3; t++) {
            static const char *const split_tiles[] = {"", "256x96", "128x192"};
            if (t_small() && (kind != 1 || t != 1)) continue; /* rows on 256x96 */
            char opt[48], ran[48];
            snprintf(opt, sizeof opt, "gemm_tile=%s", t ? split_tiles[t] : "auto");
            snprintf(ran, sizeof ran, "%s/", t ? split_tiles[t] : "");
            CHECK_OK(ctx, br_ctx_set_options(ctx, opt));
            epi_spec sp = {.kind = kind,
                           .m = 200,
                           .n = 136,
                           .k = 2048,
                           .oscale = 0.5f,
                           .colscale = t != 1,
                           .cmode = t == 2 ? 2 : 1,
                           .beta = 0.75f,
                           .ran = !wgmma ? NULL : t ? ran : "split 3"};
            char label[48];
            snprintf(label, sizeof label, "split-K 3 %s", t ? split_tiles[t] : "auto tile");
            epi_run(ctx, &r, &sp, label);
            if (wgmma && t) /* the tile and the split both */
                CHECK(strstr(br_ctx_last_kernel(ctx), "split 3"), "%s ran %s", label,
                      br_ctx_last_kernel(ctx));
        }
    CHECK_OK(ctx, br_ctx_set_options(ctx, "gemm_tile=auto,gemm_splitk=auto"));
    /* as AUTO picks it: a K = tokens GEMM with few outputs, n not a multiple of 4 */
    for (int kind = 0; kind < (t_small() ? 1 : 3); kind++) {
        epi_spec sp = {.kind = kind,
                       .m = 96,
                       .n = 70,
                       .k = 4096,
                       .oscale = 1.0f / 64,
                       .colscale = 1,
                       .cmode = kind == 1 ? 0 : 2,
                       .beta = 1.0f};
        epi_run(ctx, &r, &sp, "split-K auto");
    }

    /* more tiles than a 132-SM GPU has persistent CTAs (17 × 9 of 128 × 256) */
    for (int kind = t_small() ? 2 : 0; kind < 3; kind++) {
        epi_spec sp = {.kind = kind,
                       .m = 2100,
                       .n = 2100,
                       .k = 32,
                       .oscale = 1.0f,
                       .colscale = kind == 0,
                       .cmode = kind == 2 ? 2 : 0,
                       .beta = 1.0f};
        epi_run(ctx, &r, &sp, "many tiles");
    }
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- threads */

/* The same GEMMs on 1 thread and on 3 (OpenMP and OpenBLAS) give the same bits.
 * A threaded OpenBLAS sgemm does not: with the kernels OpenBLAS 0.3.21 picks on
 * AMD Zen and Intel Haswell/Broadwell, its sums differ between 1 and 3 threads for
 * every K; with its SkylakeX/Cooperlake kernels only for K an odd multiple of 16,
 * which br_mm never has (OPENBLAS_CORETYPE=Haswell shows the first kind on any x86
 * with AVX2). Shapes: panels of rows and of columns, ragged last panels, k an odd
 * multiple of 32, the epilogue (colscale, c, c = out, lda, ldo, ocol); the first
 * three large enough for the CPU backend's team, the last run on one thread. */
static void mm_same_bits_any_thread_count(void) {
    if (t_small()) return; /* nothing of the CUDA kernels' own */
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(13);
    static const epi_spec cases[] = {
        {.kind = 0,
         .m = 300,
         .n = 420,
         .k = 544,
         .oscale = 0.37f,
         .colscale = 1,
         .cmode = 2,
         .beta = -0.5f},
        {.kind = 1,
         .m = 190,
         .n = 520,
         .k = 736,
         .lda = 800,
         .act_off = 5,
         .ldo = 530,
         .ocol = 7,
         .oscale = 1.0f,
         .cmode = 1,
         .beta = 1.0f},
        {.kind = 2, .m = 700, .n = 180, .k = 544, .oscale = -2.0f, .colscale = 1},
        {.kind = 0, .m = 45, .n = 333, .k = 736, .oscale = 1.0f, .cmode = 2, .beta = 1.0f},
    };
    int prev_omp = 1, prev_blas = openblas_get_num_threads ? openblas_get_num_threads() : 1;
#ifdef _OPENMP
    prev_omp = omp_get_max_threads();
#endif
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const epi_spec *sp = &cases[ci];
        float *one = NULL, *three = NULL;
        size_t count = 0;
        br_rng r1 = r; /* the same inputs for both runs */
        set_threads(1, 1);
        epi_run_keep(ctx, &r1, sp, "1 thread", &one, &count);
        set_threads(3, 3);
        epi_run_keep(ctx, &r, sp, "3 threads", &three, &count);
        set_threads(prev_omp, prev_blas);
        size_t differ = t_bits_differ32(one, three, count);
        CHECK(differ == 0,
              "case %zu (m=%zu n=%zu k=%zu): %zu of %zu outputs differ between 1 and 3 threads", ci,
              sp->m, sp->n, sp->k, differ, count);
        free(one), free(three);
    }
    br_ctx_free(ctx);
}

/* Bad epilogue and stride arguments: each fails with its status and a message, and
 * no failed call writes out. */
static void mm_epilogue_bad_args(void) {
    br_ctx *ctx = t_ctx(), *other = t_ctx();
    size_t m = 10, n = 40, k = 64;
    br_buf *act = t_buf_poison(ctx, BR_F16, m * k, 0x3C00u);
    br_buf *plane = t_buf_poison(ctx, BR_F16, n * k, 0x3C00u);
    br_buf *rows = t_buf_poison(ctx, BR_U32, n * (k / 32), 0x5555u);
    br_buf *big = t_buf_poison(ctx, BR_F32, m * n + n + 8, T_NAN32);
    br_buf *out = NULL, *shifted = NULL, *same = NULL, *cs_in_out = NULL;
    CHECK_OK(ctx, br_buf_view(big, 0, m * n, &out));
    CHECK_OK(ctx, br_buf_view(big, 1, m * n, &shifted));
    CHECK_OK(ctx, br_buf_view(big, 0, m * n, &same));
    CHECK_OK(ctx, br_buf_view(big, m * n - 4, n, &cs_in_out)); /* f32, overlaps out's tail */
    br_buf *cs = t_buf_poison(ctx, BR_F32, n, 0x3f800000u);
    br_buf *cs_small = t_buf_poison(ctx, BR_F32, n - 1, 0x3f800000u);
    br_buf *cs16 = t_buf_poison(ctx, BR_F16, n, 0x3C00u);
    br_buf *c = t_buf_poison(ctx, BR_F32, m * n, 0);
    br_buf *c_small = t_buf_poison(ctx, BR_F32, m * n - 1, 0);
    br_buf *c16 = t_buf_poison(ctx, BR_F16, m * n, 0);
    br_buf *cs_foreign = t_buf_poison(other, BR_F32, n, 0);
    br_buf *c_foreign = t_buf_poison(other, BR_F32, m * n, 0);
    const br_gemm g = {.m = m, .n = n, .k = k, .oscale = 1.0f};
    br_gemm b;

    /* colscale */
    b = g, b.colscale = cs_small;
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "colscale", br_mm(ctx, act, plane, out, b));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "colscale", br_mm_bits(ctx, act, rows, BR_BITS_ROWS, out, b));
    b = g, b.colscale = cs16;
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "colscale", br_mm(ctx, act, plane, out, b));
    b = g, b.colscale = cs_foreign;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "colscale", br_mm(ctx, act, plane, out, b));
    b = g, b.colscale = cs_in_out;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "colscale", br_mm(ctx, act, plane, out, b));
    /* c */
    b = g, b.c = c_small, b.beta = 1.0f;
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "c", br_mm(ctx, act, plane, out, b));
    b = g, b.c = c16, b.beta = 1.0f;
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "c", br_mm_bits(ctx, act, rows, BR_BITS_ROWS, out, b));
    b = g, b.c = c_foreign, b.beta = 1.0f;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "c", br_mm(ctx, act, plane, out, b));
    b = g, b.c = shifted, b.beta = 1.0f; /* overlaps out one element off */
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps", br_mm(ctx, act, plane, out, b));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps", br_mm_bits(ctx, act, rows, BR_BITS_ROWS, out, b));
    b = g, b.c = c, b.beta = NAN;
    CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "beta", br_mm(ctx, act, plane, out, b));
    b = g, b.c = c, b.beta = -INFINITY;
    CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "beta", br_mm_bits(ctx, act, rows, BR_BITS_ROWS, out, b));
    /* lda */
    b = g, b.lda = k - 1;
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "lda", br_mm(ctx, act, plane, out, b));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "lda", br_mm_bits(ctx, act, rows, BR_BITS_ROWS, out, b));
    b = g, b.lda = k + 8; /* act holds m·k < (m−1)·lda + k */
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "act", br_mm(ctx, act, plane, out, b));
    b = g, b.lda = (size_t)1 << 40;
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_mm(ctx, act, plane, out, b));
    b = g, b.lda = (size_t)1 << 28;
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_mm(ctx, act, plane, out, b));

    /* no failed call wrote out */
    CHECK_OK(ctx, br_ctx_sync(ctx));
    float *o = t_download_f32(ctx, big, m * n + n + 8);
    size_t written = t_count_written32(o, m * n + n + 8);
    CHECK(written == 0, "failed calls wrote %zu outputs", written);
    free(o);

    /* accepted: c a different view of out's exact elements; beta not finite without c;
     * lda = k spelled out */
    if (!t_small()) {
        b = g, b.c = same, b.beta = 1.0f, b.colscale = cs;
        CHECK_OK(ctx, br_mm(ctx, act, plane, out, b));
        b = g, b.beta = NAN, b.lda = k;
        CHECK_OK(ctx, br_mm_bits(ctx, act, rows, BR_BITS_ROWS, out, b));
    }

    br_buf *all[] = {act,      plane, rows, out,     shifted, same,       cs_in_out, cs,
                     cs_small, cs16,  c,    c_small, c16,     cs_foreign, c_foreign, big};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        br_buf_free(all[i]);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

/* br_mm and br_mm_bits record into graphs: nothing runs while recording, each
 * launch runs them again. */
static void mm_graph(void) {
    if (t_small()) return; /* the plain paths: full suite only */
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(7);
    size_t m = 37, n = 70, k = 96, ldo = 150, ocol = 75;
    uint16_t *act = rand_f16(&r, m * k, 1.0f), *plane = rand_f16(&r, n * k, 1.0f);
    uint32_t *bits = rand_words(&r, k * ((n + 31) / 32));
    br_buf *ab = t_buf_from(ctx, BR_F16, act, m * k);
    br_buf *pb = t_buf_from(ctx, BR_F16, plane, n * k);
    br_buf *bb = t_buf_from(ctx, BR_U32, bits, k * ((n + 31) / 32));
    size_t count = m * ldo;
    br_buf *ob = t_buf_poison(ctx, BR_F32, count, T_NAN32);
    br_graph *graph = NULL;
    CHECK_OK(ctx, br_graph_begin(ctx));
    /* columns 0..69 from the plane, columns 75..144 from the bitmap */
    CHECK_OK(ctx,
             br_mm(ctx, ab, pb, ob, (br_gemm){.m = m, .n = n, .k = k, .ldo = ldo, .oscale = 1}));
    CHECK_OK(ctx, br_mm_bits(
                      ctx, ab, bb, BR_BITS_COLS, ob,
                      (br_gemm){.m = m, .n = n, .k = k, .ldo = ldo, .ocol = ocol, .oscale = 0.5f}));
    CHECK_OK(ctx, br_graph_end(ctx, &graph));
    float *o = t_download_f32(ctx, ob, count);
    size_t written = t_count_written32(o, count);
    CHECK(written == 0, "recording wrote %zu outputs", written);
    free(o);
    uint16_t *bplane = plane_of_bits(bits, BR_BITS_COLS, n, k);
    double *r1 = ref_mm(act, plane, m, n, k, 1.0f), *r2 = ref_mm(act, bplane, m, n, k, 0.5f);
    for (int rep = 0; rep < 2; rep++) {
        CHECK_OK(ctx, br_buf_fill(ob, 0, count, T_NAN32));
        CHECK_OK(ctx, br_graph_launch(graph));
        CHECK_OK(ctx, br_ctx_sync(ctx));
        /* the two blocks, and the gap between them still poisoned */
        /* the two blocks; the gap between them and the row tails still poisoned */
        o = t_download_f32(ctx, ob, count);
        float *b1 = t_xmalloc(m * n * sizeof *b1), *b2 = t_xmalloc(m * n * sizeof *b2);
        size_t stray = 0;
        for (size_t i = 0; i < m; i++) {
            for (size_t j = 0; j < n; j++) {
                b1[i * n + j] = o[i * ldo + j];
                b2[i * n + j] = o[i * ldo + ocol + j];
            }
            for (size_t j = n; j < ocol; j++)
                stray += !isnan(o[i * ldo + j]);
            for (size_t j = ocol + n; j < ldo; j++)
                stray += !isnan(o[i * ldo + j]);
        }
        double e1 = t_rel_err(b1, r1, m * n), e2 = t_rel_err(b2, r2, m * n);
        CHECK(e1 < MM_TOL, "graph: plane block relative error %.3g", e1);
        CHECK(e2 < MM_TOL, "graph: bits block relative error %.3g", e2);
        CHECK(stray == 0, "graph: %zu elements outside the blocks written", stray);
        free(b1), free(b2);
        free(o);
    }
    br_graph_free(graph);
    free(act), free(plane), free(bits), free(bplane), free(r1), free(r2);
    br_buf_free(ab), br_buf_free(pb), br_buf_free(bb), br_buf_free(ob);
    br_ctx_free(ctx);
}

/* One op per op execution on the CPU backend (the expand path is two ops); one
 * dispatch per op on Vulkan, each GEMM on the tiled shader when forced (option
 * vk_gemm=tiled; vk_gemm_shaders checks the cooperative-matrix one). */
static void mm_launch_counts(void) {
    br_ctx *ctx = t_ctx();
    const int vulkan = !strcmp(br_ctx_backend(ctx), "vulkan");
    if (strcmp(br_ctx_backend(ctx), "cpu") != 0 && !vulkan) {
        br_ctx_free(ctx);
        return;
    }
    CHECK_OK(ctx, br_ctx_set_options(ctx, "vk_gemm=tiled"));
    br_rng r = t_rng_for(8);
    size_t m = 3, n = 5, k = 32;
    uint16_t *act = rand_f16(&r, m * k, 1.0f), *plane = rand_f16(&r, n * k, 1.0f);
    uint32_t *bits = rand_words(&r, n);
    br_buf *ab = t_buf_from(ctx, BR_F16, act, m * k), *pb = t_buf_from(ctx, BR_F16, plane, n * k);
    br_buf *bb = t_buf_from(ctx, BR_U32, bits, n), *ob = t_buf_poison(ctx, BR_F32, m * n, 0);
    br_gemm g = {.m = m, .n = n, .k = k, .oscale = 1};
    uint64_t l0 = ctx->stats.launches;
    CHECK_OK(ctx, br_mm(ctx, ab, pb, ob, g));
    CHECK(ctx->stats.launches == l0 + 1, "mm: %llu launches",
          (unsigned long long)(ctx->stats.launches - l0));
    CHECK(!vulkan || !strcmp(br_ctx_last_kernel(ctx), "vk_tiled(mm)"), "mm ran %s",
          br_ctx_last_kernel(ctx));
    l0 = ctx->stats.launches;
    CHECK_OK(ctx, br_mm_bits(ctx, ab, bb, BR_BITS_ROWS, ob, g));
    CHECK(ctx->stats.launches == l0 + 1, "mm_bits: %llu launches",
          (unsigned long long)(ctx->stats.launches - l0));
    CHECK(!vulkan || !strcmp(br_ctx_last_kernel(ctx), "vk_tiled(mm_bits)"), "mm_bits ran %s",
          br_ctx_last_kernel(ctx));
    CHECK_OK(ctx, br_ctx_set_options(ctx, "bits_gemm=0"));
    l0 = ctx->stats.launches;
    CHECK_OK(ctx, br_mm_bits(ctx, ab, bb, BR_BITS_ROWS, ob, g));
    CHECK(ctx->stats.launches == l0 + 2, "expand path: %llu launches",
          (unsigned long long)(ctx->stats.launches - l0));
    CHECK(!vulkan || !strcmp(br_ctx_last_kernel(ctx), "vk_tiled(mm)"), "expand path ran %s",
          br_ctx_last_kernel(ctx));
    free(act), free(plane), free(bits);
    br_buf_free(ab), br_buf_free(pb), br_buf_free(bb), br_buf_free(ob);
    br_ctx_free(ctx);
}

static void mm_bad_args(void) {
    br_ctx *ctx = t_ctx(), *other = t_ctx();
    size_t m = 10, n = 40, k = 64;
    br_buf *act = t_buf_poison(ctx, BR_F16, m * k, 0x3C00u);
    br_buf *plane = t_buf_poison(ctx, BR_F16, n * k, 0x3C00u);
    br_buf *rows = t_buf_poison(ctx, BR_U32, n * (k / 32), 0x5555u);
    br_buf *cols = t_buf_poison(ctx, BR_U32, k * ((n + 31) / 32), 0x5555u);
    br_buf *out = t_buf_poison(ctx, BR_F32, m * n, T_NAN32);
    br_buf *act32 = t_buf_poison(ctx, BR_F32, m * k, 0);
    br_buf *out16 = t_buf_poison(ctx, BR_F16, m * n, 0);
    br_buf *small_act = t_buf_poison(ctx, BR_F16, m * k - 1, 0);
    br_buf *small_plane = t_buf_poison(ctx, BR_F16, n * k - 1, 0);
    br_buf *small_out = t_buf_poison(ctx, BR_F32, m * n - 1, 0);
    br_buf *small_rows = t_buf_poison(ctx, BR_U32, n * (k / 32) - 1, 0);
    br_buf *small_cols = t_buf_poison(ctx, BR_U32, k * ((n + 31) / 32) - 1, 0);
    br_buf *foreign = t_buf_poison(other, BR_F16, m * k, 0);
    br_buf *foreign_out = t_buf_poison(other, BR_F32, m * n, 0);
    const br_gemm g = {.m = m, .n = n, .k = k, .oscale = 1.0f};
    br_gemm b;

    CHECK(br_mm(NULL, act, plane, out, g) == BR_E_ARG, "NULL ctx");
    CHECK(br_mm_bits(NULL, act, rows, BR_BITS_ROWS, out, g) == BR_E_ARG, "NULL ctx (bits)");
    /* NULL buffers */
    CHECK_FAILS(ctx, BR_E_ARG, br_mm(ctx, NULL, plane, out, g));
    CHECK_FAILS(ctx, BR_E_ARG, br_mm(ctx, act, NULL, out, g));
    CHECK_FAILS(ctx, BR_E_ARG, br_mm(ctx, act, plane, NULL, g));
    CHECK_FAILS(ctx, BR_E_ARG, br_mm_bits(ctx, act, NULL, BR_BITS_ROWS, out, g));
    CHECK_FAILS(ctx, BR_E_ARG, br_mm_bits(ctx, NULL, rows, BR_BITS_ROWS, out, g));
    CHECK_FAILS(ctx, BR_E_ARG, br_mm_bits(ctx, act, cols, BR_BITS_COLS, NULL, g));
    /* wrong dtypes */
    CHECK_FAILS(ctx, BR_E_DTYPE, br_mm(ctx, act32, plane, out, g));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_mm(ctx, act, act32, out, g));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_mm(ctx, act, plane, out16, g));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_mm_bits(ctx, act, plane, BR_BITS_ROWS, out, g));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_mm_bits(ctx, act32, rows, BR_BITS_ROWS, out, g));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_mm_bits(ctx, act, cols, BR_BITS_COLS, out16, g));
    /* buffers too small */
    CHECK_FAILS(ctx, BR_E_SIZE, br_mm(ctx, small_act, plane, out, g));
    CHECK_FAILS(ctx, BR_E_SIZE, br_mm(ctx, act, small_plane, out, g));
    CHECK_FAILS(ctx, BR_E_SIZE, br_mm(ctx, act, plane, small_out, g));
    CHECK_FAILS(ctx, BR_E_SIZE, br_mm_bits(ctx, act, small_rows, BR_BITS_ROWS, out, g));
    CHECK_FAILS(ctx, BR_E_SIZE, br_mm_bits(ctx, act, small_cols, BR_BITS_COLS, out, g));
    CHECK_FAILS(ctx, BR_E_SIZE, br_mm_bits(ctx, small_act, cols, BR_BITS_COLS, out, g));
    b = g, b.ldo = n + 1; /* the last row ends at (m−1)·ldo + n */
    CHECK_FAILS(ctx, BR_E_SIZE, br_mm(ctx, act, plane, out, b));
    b = g, b.ocol = 1, b.ldo = n + 1;
    CHECK_FAILS(ctx, BR_E_SIZE, br_mm_bits(ctx, act, rows, BR_BITS_ROWS, out, b));
    /* shapes */
    b = g, b.k = 48;
    CHECK_FAILS(ctx, BR_E_SHAPE, br_mm(ctx, act, plane, out, b));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_mm_bits(ctx, act, rows, BR_BITS_ROWS, out, b));
    b = g, b.k = 0;
    CHECK_FAILS(ctx, BR_E_SHAPE, br_mm(ctx, act, plane, out, b));
    b = g, b.m = 0;
    CHECK_FAILS(ctx, BR_E_SHAPE, br_mm(ctx, act, plane, out, b));
    b = g, b.n = 0;
    CHECK_FAILS(ctx, BR_E_SHAPE, br_mm_bits(ctx, act, cols, BR_BITS_COLS, out, b));
    b = g, b.ldo = n - 1;
    CHECK_FAILS(ctx, BR_E_SHAPE, br_mm(ctx, act, plane, out, b));
    b = g, b.ldo = n, b.ocol = 1;
    CHECK_FAILS(ctx, BR_E_SHAPE, br_mm(ctx, act, plane, out, b));
    b = g, b.ocol = 3; /* ldo 0 = n < ocol + n */
    CHECK_FAILS(ctx, BR_E_SHAPE, br_mm_bits(ctx, act, rows, BR_BITS_ROWS, out, b));
    CHECK_FAILS(ctx, BR_E_ARG, br_mm_bits(ctx, act, rows, (br_bits_layout)2, out, g));
    /* overflowing sizes */
    b = g, b.m = (size_t)1 << 20, b.k = (size_t)1 << 12;
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_mm(ctx, act, plane, out, b));
    b = g, b.n = (size_t)1 << 20, b.k = (size_t)1 << 12, b.m = 1;
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_mm(ctx, act, plane, out, b));
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_mm_bits(ctx, act, cols, BR_BITS_COLS, out, b));
    b = g, b.ocol = SIZE_MAX - 5, b.ldo = SIZE_MAX;
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_mm(ctx, act, plane, out, b));
    b = g, b.m = 1, b.ldo = (size_t)1 << 40;
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_mm(ctx, act, plane, out, b));
    b = g, b.m = 1 << 16, b.ldo = 1 << 16;
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_mm(ctx, act, plane, out, b));
    b = g, b.m = SIZE_MAX;
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_mm_bits(ctx, act, rows, BR_BITS_ROWS, out, b));
    /* buffers of another context */
    CHECK_FAILS(ctx, BR_E_ARG, br_mm(ctx, foreign, plane, out, g));
    CHECK_FAILS(ctx, BR_E_ARG, br_mm(ctx, act, foreign, out, g));
    CHECK_FAILS(ctx, BR_E_ARG, br_mm(ctx, act, plane, foreign_out, g));
    CHECK_FAILS(ctx, BR_E_ARG, br_mm_bits(ctx, foreign, rows, BR_BITS_ROWS, out, g));
    /* oscale must be finite */
    b = g, b.oscale = NAN;
    CHECK_FAILS(ctx, BR_E_NONFINITE, br_mm(ctx, act, plane, out, b));
    b = g, b.oscale = INFINITY;
    CHECK_FAILS(ctx, BR_E_NONFINITE, br_mm_bits(ctx, act, rows, BR_BITS_ROWS, out, b));
    /* the expand path checks the same way, before touching its plane */
    CHECK_OK(ctx, br_ctx_set_options(ctx, "bits_gemm=0"));
    CHECK_FAILS(ctx, BR_E_SIZE, br_mm_bits(ctx, act, small_cols, BR_BITS_COLS, out, g));
    b = g, b.k = 40;
    CHECK_FAILS(ctx, BR_E_SHAPE, br_mm_bits(ctx, act, rows, BR_BITS_ROWS, out, b));
    CHECK(ctx->expand_plane == NULL, "a failed call allocated the expand plane");

    /* no failed call wrote the output */
    CHECK_OK(ctx, br_ctx_sync(ctx));
    float *o = t_download_f32(ctx, out, m * n);
    size_t written = t_count_written32(o, m * n);
    CHECK(written == 0, "failed calls wrote %zu outputs", written);
    free(o);

    br_buf *all[] = {act,        plane,      rows,      cols,        out,
                     act32,      out16,      small_act, small_plane, small_out,
                     small_rows, small_cols, foreign,   foreign_out};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        br_buf_free(all[i]);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- mm_tn */

/* One br_mm_tn: act [k][lda] and plane [k][ldp] with NaN in every element past m (n)
 * of a row and before the view (act_off), buffers exactly as long as the spans; c
 * as in epi_run (cmode 0 none, 1 apart, 2 out itself). Checked against f64 (the
 * block, and the poison around it surviving) and against br_mm on explicitly
 * transposed copies with the same g: the same bits on the CPU, within the
 * tolerance elsewhere. */
typedef struct tn_spec {
    size_t m, n, k, lda, ldp, act_off, ldo, ocol;
    float oscale;
    int colscale, cmode;
    float beta;
    const char *ran; /* non-NULL: br_ctx_last_kernel after br_mm_tn must contain it */
} tn_spec;

static void tn_run(br_ctx *ctx, br_rng *r, const tn_spec *sp) {
    const size_t m = sp->m, n = sp->n, k = sp->k;
    const size_t lda = sp->lda ? sp->lda : m, ldp = sp->ldp ? sp->ldp : n;
    const size_t stride = sp->ldo ? sp->ldo : n;
    const size_t act_span = (k - 1) * lda + m, plane_span = (k - 1) * ldp + n;
    /* the operands as the op reads them, NaN where it must not read */
    uint16_t *act = t_xmalloc((sp->act_off + act_span) * sizeof *act);
    uint16_t *plane = t_xmalloc(plane_span * sizeof *plane);
    for (size_t i = 0; i < sp->act_off + act_span; i++)
        act[i] = T_NAN16;
    for (size_t i = 0; i < plane_span; i++)
        plane[i] = T_NAN16;
    uint16_t *a0 = act + sp->act_off;
    for (size_t kk = 0; kk < k; kk++) {
        for (size_t i = 0; i < m; i++)
            a0[kk * lda + i] = br_half_from_float(2.0f * br_rng_sym(r));
        for (size_t j = 0; j < n; j++)
            plane[kk * ldp + j] = br_half_from_float(br_rng_sym(r));
    }
    /* the transposed copies br_mm takes: actT [m][k], planeT [n][k] */
    uint16_t *act_t = t_xmalloc(m * k * sizeof *act_t),
             *plane_t = t_xmalloc(n * k * sizeof *plane_t);
    for (size_t kk = 0; kk < k; kk++) {
        for (size_t i = 0; i < m; i++)
            act_t[i * k + kk] = a0[kk * lda + i];
        for (size_t j = 0; j < n; j++)
            plane_t[j * k + kk] = plane[kk * ldp + j];
    }
    float *cs = t_xmalloc(n * sizeof *cs);
    for (size_t j = 0; j < n; j++)
        cs[j] = rand_scale(r);
    /* c: random in the block, NaN around it (random everywhere when apart); out one
     * row and a few elements longer than its block, poisoned past it */
    const size_t count = (m + 1) * stride + 7;
    float *c_host = t_xmalloc(count * sizeof *c_host);
    uint32_t nan_bits = T_NAN32;
    float nanf_;
    memcpy(&nanf_, &nan_bits, 4);
    for (size_t idx = 0; idx < count; idx++) {
        size_t i = idx / stride, col = idx % stride;
        int in = i < m && col >= sp->ocol && col < sp->ocol + n;
        c_host[idx] = in || sp->cmode == 1 ? 4.0f * br_rng_sym(r) : nanf_;
    }

    br_buf *act_parent = t_buf_from(ctx, BR_F16, act, sp->act_off + act_span), *ab = NULL;
    CHECK_OK(ctx, br_buf_view(act_parent, sp->act_off, act_span, &ab));
    br_buf *pb = t_buf_from(ctx, BR_F16, plane, plane_span);
    br_buf *atb = t_buf_from(ctx, BR_F16, act_t, m * k),
           *ptb = t_buf_from(ctx, BR_F16, plane_t, n * k);
    br_buf *csb = sp->colscale ? t_buf_from(ctx, BR_F32, cs, n) : NULL;
    br_buf *ob = sp->cmode == 2 ? t_buf_from(ctx, BR_F32, c_host, count)
                                : t_buf_poison(ctx, BR_F32, count, T_NAN32);
    br_buf *om = sp->cmode == 2 ? t_buf_from(ctx, BR_F32, c_host, count)
                                : t_buf_poison(ctx, BR_F32, count, T_NAN32);
    br_buf *cb = sp->cmode == 1 ? t_buf_from(ctx, BR_F32, c_host, count) : NULL;
    br_gemm g = {.m = m,
                 .n = n,
                 .k = k,
                 .ldo = sp->ldo,
                 .ocol = sp->ocol,
                 .oscale = sp->oscale,
                 .lda = sp->lda,
                 .colscale = csb,
                 .c = sp->cmode == 1   ? cb
                      : sp->cmode == 2 ? ob
                                       : NULL,
                 .beta = sp->beta};
    CHECK_OK(ctx, br_mm_tn(ctx, ab, pb, sp->ldp, ob, g));
    if (sp->ran)
        CHECK(strstr(br_ctx_last_kernel(ctx), sp->ran), "mm_tn m=%zu n=%zu k=%zu: ran %s, not %s",
              m, n, k, br_ctx_last_kernel(ctx), sp->ran);
    br_gemm gm = g; /* the same GEMM on the transposed copies */
    gm.lda = 0;
    if (sp->cmode == 2) gm.c = om;
    CHECK_OK(ctx, br_mm(ctx, atb, ptb, om, gm));

    /* f64: Σ over kk of act[kk][i]·plane[kk][j], then the epilogue */
    double *ref = t_xmalloc(m * n * sizeof *ref), *pl = t_xmalloc(k * n * sizeof *pl);
    double *ai = t_xmalloc(k * sizeof *ai);
    for (size_t kk = 0; kk < k; kk++)
        for (size_t j = 0; j < n; j++)
            pl[kk * n + j] = t_f16_value(plane[kk * ldp + j]);
    for (size_t i = 0; i < m; i++) {
        for (size_t kk = 0; kk < k; kk++)
            ai[kk] = t_f16_value(a0[kk * lda + i]);
        for (size_t j = 0; j < n; j++) {
            double s = 0;
            for (size_t kk = 0; kk < k; kk++)
                s += ai[kk] * pl[kk * n + j];
            double v = (double)sp->oscale * s;
            if (sp->colscale) v *= cs[j];
            if (sp->cmode) v += (double)sp->beta * c_host[i * stride + sp->ocol + j];
            ref[i * n + j] = v;
        }
    }
    char what[200];
    snprintf(what, sizeof what,
             "mm_tn m=%zu n=%zu k=%zu lda=%zu@%zu ldp=%zu ldo=%zu ocol=%zu oscale=%g%s%s beta=%g",
             m, n, k, lda, sp->act_off, ldp, stride, sp->ocol, sp->oscale,
             sp->colscale ? " colscale" : "",
             sp->cmode == 1   ? " c"
             : sp->cmode == 2 ? " c=out"
                              : "",
             sp->beta);
    check_block(ctx, ob, count, ref, m, n, stride, sp->ocol, what);

    float *got = t_download_f32(ctx, ob, count), *viamm = t_download_f32(ctx, om, count);
    if (strcmp(br_ctx_backend(ctx), "cpu") == 0) {
        size_t differ = t_bits_differ32(got, viamm, count);
        CHECK(differ == 0, "%s: %zu of %zu outputs differ in bits from br_mm on the transposes",
              what, differ, count);
    } else {
        double *mmd = t_xmalloc(count * sizeof *mmd);
        for (size_t i = 0; i < count; i++) {
            mmd[i] = isnan(viamm[i]) ? 0 : viamm[i];
            if (isnan(got[i]) && isnan(viamm[i])) got[i] = 0; /* both untouched */
        }
        double err = t_rel_err(got, mmd, count);
        CHECK(err < MM_TOL, "%s vs br_mm on the transposes: relative error %.3g", what, err);
        free(mmd);
    }
    if (sp->cmode == 1) { /* c is only read */
        float *c_after = t_download_f32(ctx, cb, count);
        CHECK(t_bits_differ32(c_after, c_host, count) == 0, "%s: c was written", what);
        free(c_after);
    }
    if (t_small()) fprintf(stderr, "  [%.1f s] %s\n", t_elapsed(), what);
    free(act), free(plane), free(act_t), free(plane_t), free(cs), free(c_host);
    free(ref), free(pl), free(ai), free(got), free(viamm);
    br_buf *all[] = {ab, act_parent, pb, atb, ptb, csb, ob, om, cb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        br_buf_free(all[i]);
}

/* Options gemm_tile=<tile> and gemm_ctas=1 (one) or all. */
static void force_tile(br_ctx *ctx, const char *tile, int one) {
    char opt[64];
    snprintf(opt, sizeof opt, "gemm_tile=%s,gemm_ctas=%s", tile, one ? "1" : "all");
    CHECK_OK(ctx, br_ctx_set_options(ctx, opt));
}

/* run(ctx, r, arg) with every MN-major tile forced (option gemm_tile) and, in the
 * full suite, with the grid on one CTA too (several tiles per CTA). */
static void each_mn_tile(br_ctx *ctx, br_rng *r, void (*run)(br_ctx *, br_rng *, const void *),
                         const void *arg) {
    static const char *const tiles[] = {"256x128", "128x256", "128x128", "128x192"};
    for (size_t t = 0; t < sizeof tiles / sizeof tiles[0]; t++)
        for (int one = 0; one < 2; one++) {
            if (t_small() && one) continue;
            const int wgmma = has_wgmma(ctx);
            force_tile(ctx, tiles[t], one);
            run(ctx, r, arg);
            if (wgmma)
                CHECK(strstr(br_ctx_last_kernel(ctx), tiles[t]), "tile %s: ran %s", tiles[t],
                      br_ctx_last_kernel(ctx));
            force_tile(ctx, "auto", 0);
        }
}

/* tn_run on the last two of mm_tn_shapes' cases (arg: the first of them). */
static void tn_last_two(br_ctx *ctx, br_rng *r, const void *arg) {
    const tn_spec *two = arg;
    tn_run(ctx, r, &two[1]);
    tn_run(ctx, r, &two[0]);
}

/* Sizes that are multiples of nothing, padded strides (lda > m, ldp > n), an act
 * view at an offset, output blocks in wider rows, every epilogue operand, panels of
 * rows and of columns (the CPU team for the largest), and the K = tokens shapes
 * with few outputs that take split-K on a GPU. */
static void mm_tn_shapes(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(14);
    static const tn_spec cases[] = {
        {.m = 97, .n = 70, .k = 64, .oscale = 1.0f},
        {.m = 97,
         .n = 70,
         .k = 96,
         .lda = 100,
         .ldp = 75,
         .act_off = 3,
         .oscale = -0.75f,
         .colscale = 1},
        {.m = 1, .n = 1, .k = 32, .oscale = 1.0f},
        {.m = 33,
         .n = 5,
         .k = 32,
         .lda = 40,
         .ldp = 8,
         .ldo = 50,
         .ocol = 7,
         .oscale = -1.5f,
         .colscale = 1,
         .cmode = 1,
         .beta = 0.75f},
        {.m = 7,
         .n = 200,
         .k = 160,
         .lda = 9,
         .ldp = 203,
         .ldo = 230,
         .ocol = 20,
         .oscale = 1.0f,
         .cmode = 1,
         .beta = 2.0f},
        {.m = 300,
         .n = 520,
         .k = 96,
         .lda = 320,
         .ldp = 530,
         .act_off = 64,
         .oscale = 0.37f,
         .colscale = 1,
         .cmode = 2,
         .beta = -0.5f},
        {.m = 520,
         .n = 300,
         .k = 96,
         .lda = 521,
         .ldo = 310,
         .ocol = 5,
         .oscale = 2.0f,
         .cmode = 1,
         .beta = -1.0f},
        {.m = 300,
         .n = 520,
         .k = 512,
         .lda = 301,
         .ldp = 522,
         .oscale = 0.5f,
         .colscale = 1,
         .cmode = 2,
         .beta = 1.0f},
        {.m = 96, .n = 70, .k = 4096, .oscale = 1.0f / 64, .colscale = 1, .cmode = 2, .beta = 1.0f},
        {.m = 96,
         .n = 70,
         .k = 4096,
         .lda = 100,
         .ldp = 72,
         .ldo = 90,
         .ocol = 9,
         .oscale = -0.25f,
         .cmode = 1,
         .beta = 0.5f},
        /* 16-byte rows (CUDA on Hopper: the MN-major kernels): the layer's sign
         * GEMMs (K = tokens, split-K) and a k tail of half a 64-row box */
        {.m = 512, .n = 1024, .k = 4096, .lda = 544, .oscale = 1.0f / 1024},
        {.m = 200, .n = 256, .k = 4160, .lda = 200, .ldp = 264, .act_off = 8, .oscale = 0.5f},
        {.m = 72, .n = 64, .k = 96, .oscale = 2.0f, .colscale = 1, .cmode = 2, .beta = -1.0f},
        {.m = 300, .n = 520, .k = 96, .lda = 304, .oscale = 1.0f, .cmode = 1, .beta = 0.25f},
    };
    const size_t nc = sizeof cases / sizeof cases[0];
    /* CUDA: as picked, then every operand through the transposed copies */
    for (int copy = 0; copy < 2; copy++) {
        CHECK_OK(ctx, br_ctx_set_options(ctx, copy ? "mm_tn=copy" : "mm_tn=auto"));
        for (size_t ci = 0; ci < nc; ci++) {
            if (t_small() && ci != 1 && ci != 8 && ci != nc - 1) continue;
            if (ci == nc - 4 && (t_small() || copy)) continue; /* the large one once */
            tn_run(ctx, &r, &cases[ci]);
        }
        CHECK_OK(ctx, br_ctx_set_options(ctx, "mm_tn=auto"));
    }
    /* CUDA: the mma.sync family (the transposed copies, then its K-major kernels: what
     * a GPU without wgmma runs) */
    if (strcmp(br_ctx_backend(ctx), "cpu") != 0) {
        CHECK_OK(ctx, br_ctx_set_options(ctx, "gemm=mma"));
        tn_run(ctx, &r, &cases[1]);
        tn_run(ctx, &r, &cases[nc - 1]);
        if (!t_small()) tn_run(ctx, &r, &cases[8]);
        CHECK_OK(ctx, br_ctx_set_options(ctx, "gemm=auto"));
    }
    /* every MN-major tile, with the grid on one CTA too (several tiles per CTA) */
    each_mn_tile(ctx, &r, tn_last_two, cases + nc - 2);
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- mm_tn2 */

/* One product of a br_mm_tn2 test: act [k][lda] and plane [k][ldp] random, NaN past
 * m (n) in each row; its output block [m][ocol..ocol+n) in rows of ldo; the f64
 * reference. */
typedef struct tn2_side {
    size_t m, n, k, lda, ldp, ldo, ocol;
    float oscale;
} tn2_side;

typedef struct tn2_data {
    br_buf *act, *plane;
    double *ref;
    size_t count; /* out elements the block spans: (m − 1)·ldo + ocol + n */
} tn2_data;

static tn2_data tn2_make(br_ctx *ctx, br_rng *r, const tn2_side *sd) {
    const size_t m = sd->m, n = sd->n, k = sd->k;
    const size_t act_span = (k - 1) * sd->lda + m, plane_span = (k - 1) * sd->ldp + n;
    uint16_t *act = t_xmalloc(act_span * sizeof *act), *plane = t_xmalloc(plane_span * 2);
    for (size_t i = 0; i < act_span; i++)
        act[i] = T_NAN16;
    for (size_t i = 0; i < plane_span; i++)
        plane[i] = T_NAN16;
    for (size_t kk = 0; kk < k; kk++) {
        for (size_t i = 0; i < m; i++)
            act[kk * sd->lda + i] = br_half_from_float(2.0f * br_rng_sym(r));
        for (size_t j = 0; j < n; j++)
            plane[kk * sd->ldp + j] = br_half_from_float(br_rng_sym(r));
    }
    tn2_data d = {.act = t_buf_from(ctx, BR_F16, act, act_span),
                  .plane = t_buf_from(ctx, BR_F16, plane, plane_span),
                  .ref = t_xmalloc(m * n * sizeof(double)),
                  .count = (m - 1) * sd->ldo + sd->ocol + n};
    double *pl = t_xmalloc(k * n * sizeof *pl), *ai = t_xmalloc(k * sizeof *ai);
    for (size_t kk = 0; kk < k; kk++)
        for (size_t j = 0; j < n; j++)
            pl[kk * n + j] = t_f16_value(plane[kk * sd->ldp + j]);
    for (size_t i = 0; i < m; i++) {
        for (size_t kk = 0; kk < k; kk++)
            ai[kk] = t_f16_value(act[kk * sd->lda + i]);
        for (size_t j = 0; j < n; j++) {
            double acc = 0;
            for (size_t kk = 0; kk < k; kk++)
                acc += ai[kk] * pl[kk * n + j];
            d.ref[i * n + j] = (double)sd->oscale * acc;
        }
    }
    free(act), free(plane), free(pl), free(ai);
    return d;
}

/* br_mm_tn2 on two products whose outputs lie side by side in one poisoned buffer
 * (as the layer's M_U and N_V do), a few elements of poison after the second:
 * each block against f64, the poison around both intact, and each against its own
 * br_mm_tn (the same bits on the CPU, within the tolerance elsewhere). */
static void tn2_run(br_ctx *ctx, br_rng *r, const tn2_side sd[2]) {
    tn2_data d[2];
    for (int i = 0; i < 2; i++)
        d[i] = tn2_make(ctx, r, &sd[i]);
    const size_t total = d[0].count + d[1].count + 9;
    br_buf *whole = t_buf_poison(ctx, BR_F32, total, T_NAN32), *o[2] = {NULL, NULL}, *tail = NULL;
    CHECK_OK(ctx, br_buf_view(whole, 0, d[0].count, &o[0]));
    CHECK_OK(ctx, br_buf_view(whole, d[0].count, d[1].count, &o[1]));
    CHECK_OK(ctx, br_buf_view(whole, d[0].count, d[1].count + 9, &tail));
    br_gemm g[2];
    for (int i = 0; i < 2; i++)
        g[i] = (br_gemm){.m = sd[i].m,
                         .n = sd[i].n,
                         .k = sd[i].k,
                         .lda = sd[i].lda,
                         .ldo = sd[i].ldo,
                         .ocol = sd[i].ocol,
                         .oscale = sd[i].oscale};
    const int wgmma = has_wgmma(ctx);
    CHECK_OK(ctx, br_mm_tn2(ctx, d[0].act, d[0].plane, sd[0].ldp, o[0], g[0], d[1].act, d[1].plane,
                            sd[1].ldp, o[1], g[1]));
    char tile[32], ctas[16], apart[8];
    CHECK_OK(ctx, br_ctx_option(ctx, "gemm_tile", tile, sizeof tile));
    CHECK_OK(ctx, br_ctx_option(ctx, "gemm_ctas", ctas, sizeof ctas));
    CHECK_OK(ctx, br_ctx_option(ctx, "mm_tn2", apart, sizeof apart));
    /* on Hopper two plain products of one k with 16-byte rows run in one launch,
     * unless mm_tn2=0 */
    int pairable = wgmma && apart[0] == '1' && sd[0].k == sd[1].k;
    for (int i = 0; i < 2; i++) {
        const size_t lda = sd[i].lda ? sd[i].lda : sd[i].m, ldp = sd[i].ldp ? sd[i].ldp : sd[i].n;
        pairable = pairable && lda % 8 == 0 && ldp % 8 == 0;
    }
    CHECK(!strstr(br_ctx_last_kernel(ctx), "pair") == !pairable, "mm_tn2=%s: %s ran %s", apart,
          pairable ? "a pair" : "two products", br_ctx_last_kernel(ctx));
    for (int i = 0; i < 2; i++) {
        char what[200];
        snprintf(what, sizeof what,
                 "mm_tn2 product %d of (m,n)=(%zu,%zu),(%zu,%zu) k=%zu,%zu lda=%zu ldp=%zu ldo=%zu "
                 "ocol=%zu tile=%s ctas=%s tn2=%s",
                 i + 1, sd[0].m, sd[0].n, sd[1].m, sd[1].n, sd[0].k, sd[1].k, sd[i].lda, sd[i].ldp,
                 sd[i].ldo, sd[i].ocol, tile, ctas, apart);
        check_block(ctx, i ? tail : o[0], i ? d[1].count + 9 : d[0].count, d[i].ref, sd[i].m,
                    sd[i].n, sd[i].ldo, sd[i].ocol, what);
        /* the product alone, by br_mm_tn */
        br_buf *one = t_buf_poison(ctx, BR_F32, d[i].count, T_NAN32);
        CHECK_OK(ctx, br_mm_tn(ctx, d[i].act, d[i].plane, sd[i].ldp, one, g[i]));
        float *got = t_download_f32(ctx, o[i], d[i].count);
        float *alone = t_download_f32(ctx, one, d[i].count);
        if (strcmp(br_ctx_backend(ctx), "cpu") == 0) {
            size_t differ = t_bits_differ32(got, alone, d[i].count);
            CHECK(differ == 0, "%s: %zu outputs differ in bits from br_mm_tn's", what, differ);
        } else {
            double *ad = t_xmalloc(d[i].count * sizeof *ad);
            for (size_t e = 0; e < d[i].count; e++) {
                ad[e] = isnan(alone[e]) ? 0 : alone[e];
                if (isnan(got[e]) && isnan(alone[e])) got[e] = 0; /* both untouched */
            }
            double err = t_rel_err(got, ad, d[i].count);
            CHECK(err < MM_TOL, "%s vs br_mm_tn alone: relative error %.3g", what, err);
            free(ad);
        }
        if (t_small()) fprintf(stderr, "  [%.1f s] %s\n", t_elapsed(), what);
        free(got), free(alone);
        br_buf_free(one);
    }
    for (int i = 0; i < 2; i++) {
        br_buf_free(o[i]), br_buf_free(d[i].act), br_buf_free(d[i].plane);
        free(d[i].ref);
    }
    br_buf_free(tail), br_buf_free(whole);
}

/* tn2_run on the first two of mm_tn2_pairs' cases (arg: the case array). */
static void tn2_first_two(br_ctx *ctx, br_rng *r, const void *arg) {
    const tn2_side(*cases)[2] = arg;
    tn2_run(ctx, r, cases[0]);
    tn2_run(ctx, r, cases[1]);
}

/* The layer's pairing (the same n, the second product small), products of different
 * shapes and strides (an output block in wider rows), several tiles per CTA (the
 * grid on one CTA: a CTA crosses from the first product's tiles to the second's),
 * every MN-major tile, k that differ (a GPU runs them apart), and option mm_tn2=0. */
static void mm_tn2_pairs(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(15);
    static const tn2_side cases[][2] = {
        {{.m = 520, .n = 256, .k = 96, .lda = 520, .ldp = 256, .ldo = 256, .oscale = 0.5f},
         {.m = 200, .n = 256, .k = 96, .lda = 200, .ldp = 256, .ldo = 256, .oscale = 0.5f}},
        {{.m = 97, .n = 70, .k = 64, .lda = 100, .ldp = 75, .ldo = 80, .ocol = 3, .oscale = 1.0f},
         {.m = 300, .n = 520, .k = 64, .lda = 304, .ldp = 528, .ldo = 520, .oscale = -0.75f}},
        {{.m = 512, .n = 256, .k = 4096, .lda = 544, .ldp = 256, .ldo = 256, .oscale = 1.0f / 64},
         {.m = 128, .n = 256, .k = 4096, .lda = 128, .ldp = 256, .ldo = 256, .oscale = 1.0f / 64}},
        {{.m = 33, .n = 40, .k = 96, .lda = 40, .ldp = 40, .ldo = 40, .oscale = 2.0f},
         {.m = 72, .n = 64, .k = 160, .lda = 72, .ldp = 64, .ldo = 64, .oscale = 0.25f}},
    };
    const size_t nc = sizeof cases / sizeof cases[0];
    for (size_t ci = 0; ci < nc; ci++) {
        if (t_small() && ci == 2) continue;
        tn2_run(ctx, &r, cases[ci]);
    }
    CHECK_OK(ctx, br_ctx_set_options(ctx, "mm_tn2=0"));
    tn2_run(ctx, &r, cases[0]);
    CHECK_OK(ctx, br_ctx_set_options(ctx, "mm_tn2=1"));
    each_mn_tile(ctx, &r, tn2_first_two, cases);
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- mm_tn2_rowdot */

/* One side of a br_mm_tn2_rowdot test: its product as tn2_side (n = paths·r), its
 * rowdot's paths, and whether it has sign gradients. */
typedef struct rd_side {
    tn2_side mm;
    size_t r, paths;
    int with_grad;
} rd_side;

/* Both sides as the layer lays them out: bits and h per path at padded strides,
 * grad per path at a padded stride (random when accumulating, else NaN), dsum of
 * both sides interleaved in one buffer (the layer's dh and dg), likewise the row
 * norms of the sides with grad (poisoned), mats side by side in one buffer. Checked
 * against f64 (grad = h·M (+ grad), dsum = Σ ±M (+ dsum), rownorm = ‖grad row‖ of
 * the grad as written), rownorm bit for bit against its documented order (on the
 * downloaded grad), the gaps between the pieces untouched, and on the CPU bit for bit
 * against br_mm_tn2 then two br_sign_rowdot_paths on copies. */
static int rd_odd_stride; /* grad's path stride m·r + 7 instead of + 8 */

/* ‖g‖ of a row of r as layer_ops.h documents rownorm: 32 lanes of fmaf in k order,
 * the halving tree, sqrtf. */
static float rd_row_norm(const float *g, size_t r) {
    float lane[32] = {0};
    for (size_t k = 0; k < r; k++)
        lane[k % 32] = fmaf(g[k], g[k], lane[k % 32]);
    for (int s = 16; s >= 1; s >>= 1)
        for (int t = 0; t < s; t++)
            lane[t] = lane[t] + lane[t + s];
    return sqrtf(lane[0]);
}

static void rowdot2_run(br_ctx *ctx, br_rng *r, const rd_side sd[2], int accumulate) {
    tn2_data d[2];
    tn2_side mm[2];
    for (int i = 0; i < 2; i++) {
        mm[i] = sd[i].mm;
        d[i] = tn2_make(ctx, r, &mm[i]);
    }
    const size_t m1 = mm[0].m, m2 = mm[1].m;
    const size_t P = sd[0].paths > sd[1].paths ? sd[0].paths : sd[1].paths;
    const size_t pstride = m1 + m2 + 3; /* dsum1 at 0, dsum2 at m1 + 1 of each piece */
    const size_t nd = P * pstride;
    float *dsum0 = t_xmalloc(nd * sizeof *dsum0);
    for (size_t e = 0; e < nd; e++)
        dsum0[e] = accumulate ? br_rng_sym(r) : NAN;
    br_buf *dall = t_buf_from(ctx, BR_F32, dsum0, nd), *dv[2] = {NULL, NULL};
    CHECK_OK(ctx, br_buf_view(dall, 0, (sd[0].paths - 1) * pstride + m1, &dv[0]));
    CHECK_OK(ctx, br_buf_view(dall, m1 + 1, (sd[1].paths - 1) * pstride + m2, &dv[1]));
    /* the row norms as the dsums: side 1's at 0, side 2's at m1 + 1 of each piece */
    br_buf *nall = t_buf_poison(ctx, BR_F32, nd, T_NAN32), *nv[2] = {NULL, NULL};
    CHECK_OK(ctx, br_buf_view(nall, 0, (sd[0].paths - 1) * pstride + m1, &nv[0]));
    CHECK_OK(ctx, br_buf_view(nall, m1 + 1, (sd[1].paths - 1) * pstride + m2, &nv[1]));
    br_buf *mats = t_buf_poison(ctx, BR_F32, d[0].count + d[1].count, T_NAN32), *mv[2] = {0, 0};
    CHECK_OK(ctx, br_buf_view(mats, 0, d[0].count, &mv[0]));
    CHECK_OK(ctx, br_buf_view(mats, d[0].count, d[1].count, &mv[1]));
    br_buf *bits[2], *hs[2], *grad[2];
    uint32_t *hb[2];
    float *hh[2], *g0[2];
    size_t bstr[2], hstr[2], gstr[2], ng[2];
    br_tn_rowdot side[2];
    for (int i = 0; i < 2; i++) {
        const size_t m = mm[i].m, rr = sd[i].r, Pi = sd[i].paths, w = rr / 32;
        /* grad's paths 16-byte aligned unless rd_odd_stride */
        bstr[i] = m * w + 3, hstr[i] = m + 5, gstr[i] = m * rr + (rd_odd_stride ? 7 : 8);
        hb[i] = t_xmalloc(Pi * bstr[i] * sizeof(uint32_t));
        for (size_t e = 0; e < Pi * bstr[i]; e++)
            hb[i][e] = (uint32_t)br_rng_u64(r);
        hh[i] = t_xmalloc(Pi * hstr[i] * sizeof(float));
        for (size_t e = 0; e < Pi * hstr[i]; e++)
            hh[i][e] = 0.5f + br_rng_unit(r);
        ng[i] = Pi * gstr[i];
        g0[i] = t_xmalloc(ng[i] * sizeof(float));
        for (size_t e = 0; e < ng[i]; e++)
            g0[i][e] = accumulate ? br_rng_sym(r) : NAN;
        bits[i] = t_buf_from(ctx, BR_U32, hb[i], Pi * bstr[i]);
        hs[i] = t_buf_from(ctx, BR_F32, hh[i], Pi * hstr[i]);
        grad[i] = sd[i].with_grad ? t_buf_from(ctx, BR_F32, g0[i], ng[i]) : NULL;
        side[i] = (br_tn_rowdot){.act = d[i].act,
                                 .plane = d[i].plane,
                                 .ldp = mm[i].ldp,
                                 .mat = mv[i],
                                 .g = {.m = m,
                                       .n = mm[i].n,
                                       .k = mm[i].k,
                                       .lda = mm[i].lda,
                                       .ldo = mm[i].ldo,
                                       .ocol = mm[i].ocol,
                                       .oscale = mm[i].oscale},
                                 .bits = bits[i],
                                 .bits_stride = bstr[i],
                                 .rowscale = hs[i],
                                 .scale_stride = hstr[i],
                                 .grad = grad[i],
                                 .grad_stride = gstr[i],
                                 .dsum = dv[i],
                                 .dsum_stride = pstride,
                                 .rownorm = sd[i].with_grad ? nv[i] : NULL,
                                 .rownorm_stride = pstride,
                                 .r = rr,
                                 .paths = Pi,
                                 .accumulate = accumulate};
    }
    CHECK_OK(ctx, br_mm_tn2_rowdot(ctx, side));

    char tile[32];
    CHECK_OK(ctx, br_ctx_option(ctx, "gemm_tile", tile, sizeof tile));
    float *dgot = t_download_f32(ctx, dall, nd), *ngot = t_download_f32(ctx, nall, nd);
    for (int i = 0; i < 2; i++) {
        const size_t m = mm[i].m, rr = sd[i].r, Pi = sd[i].paths, w = rr / 32;
        const size_t doff = i ? m1 + 1 : 0;
        char what[200];
        snprintf(what, sizeof what, "mm_tn2_rowdot side %d m=%zu r=%zu P=%zu k=%zu%s%s tile=%s",
                 i + 1, m, rr, Pi, mm[i].k, accumulate ? " accumulate" : "",
                 grad[i] ? "" : " no grad", tile);
        double *gref = t_xmalloc(m * rr * sizeof *gref), *dref = t_xmalloc(m * sizeof *dref);
        float *ggot = grad[i] ? t_download_f32(ctx, grad[i], ng[i]) : NULL;
        float *gblk = t_xmalloc(m * rr * sizeof *gblk), *dblk = t_xmalloc(m * sizeof *dblk);
        size_t gaps_bad = 0;
        for (size_t p = 0; p < Pi; p++) {
            for (size_t row = 0; row < m; row++) {
                double acc = 0;
                for (size_t k = 0; k < rr; k++) {
                    const double mv_ = d[i].ref[row * mm[i].n + p * rr + k];
                    const uint32_t word = hb[i][p * bstr[i] + row * w + k / 32];
                    acc += (word >> (k % 32) & 1u) ? mv_ : -mv_;
                    gref[row * rr + k] = (double)hh[i][p * hstr[i] + row] * mv_ +
                                         (accumulate ? g0[i][p * gstr[i] + row * rr + k] : 0.0);
                    if (ggot) gblk[row * rr + k] = ggot[p * gstr[i] + row * rr + k];
                }
                dref[row] = acc + (accumulate ? dsum0[p * pstride + doff + row] : 0.0);
                dblk[row] = dgot[p * pstride + doff + row];
            }
            if (ggot) {
                double err = t_rel_err(gblk, gref, m * rr);
                CHECK(err < MM_TOL, "%s path %zu: grad relative error %.3g", what, p, err);
                /* the row norms of the grad as written: f64, and the documented bits */
                size_t norm_bits = 0;
                double *nref = t_xmalloc(m * sizeof *nref);
                float *nblk = t_xmalloc(m * sizeof *nblk);
                for (size_t row = 0; row < m; row++) {
                    double q = 0;
                    for (size_t k = 0; k < rr; k++)
                        q += (double)gblk[row * rr + k] * gblk[row * rr + k];
                    nref[row] = sqrt(q);
                    nblk[row] = ngot[p * pstride + doff + row];
                    const float want = rd_row_norm(gblk + row * rr, rr);
                    norm_bits += memcmp(&want, &nblk[row], 4) != 0;
                }
                err = t_rel_err(nblk, nref, m);
                CHECK(err < 1e-5, "%s path %zu: rownorm relative error %.3g", what, p, err);
                CHECK(norm_bits == 0, "%s path %zu: %zu row norms differ in bits from the order "
                      "layer_ops.h documents", what, p, norm_bits);
                free(nref), free(nblk);
                /* the gap after the piece: never written */
                for (size_t e = m * rr; e < gstr[i] && p + 1 < Pi; e++) {
                    uint32_t u;
                    memcpy(&u, &ggot[p * gstr[i] + e], 4);
                    uint32_t u0;
                    memcpy(&u0, &g0[i][p * gstr[i] + e], 4);
                    gaps_bad += u != u0;
                }
            }
            double err = t_rel_err(dblk, dref, m);
            CHECK(err < MM_TOL, "%s path %zu: dsum relative error %.3g", what, p, err);
        }
        CHECK(gaps_bad == 0, "%s: %zu grad elements between the paths were written", what,
              gaps_bad);
        if (t_small()) fprintf(stderr, "  [%.1f s] %s\n", t_elapsed(), what);
        free(gref), free(dref), free(ggot), free(gblk), free(dblk);
    }
    /* dsum's gaps (neither side's) untouched */
    size_t dgaps = 0;
    for (size_t e = 0; e < nd; e++) {
        const size_t p = e / pstride, o = e % pstride;
        const int in1 = p < sd[0].paths && o < m1, in2 = p < sd[1].paths && o > m1 && o <= m1 + m2;
        uint32_t u, u0;
        memcpy(&u, &dgot[e], 4);
        memcpy(&u0, &dsum0[e], 4);
        if (!in1 && !in2) dgaps += u != u0;
    }
    CHECK(dgaps == 0, "mm_tn2_rowdot: %zu dsum elements outside both sides were written", dgaps);
    size_t ngaps = 0; /* rownorm: written only at the pieces of the sides with grad */
    for (size_t e = 0; e < nd; e++) {
        const size_t p = e / pstride, o = e % pstride;
        const int in1 = sd[0].with_grad && p < sd[0].paths && o < m1,
                  in2 = sd[1].with_grad && p < sd[1].paths && o > m1 && o <= m1 + m2;
        uint32_t u;
        memcpy(&u, &ngot[e], 4);
        if (!in1 && !in2) ngaps += u != T_NAN32;
    }
    CHECK(ngaps == 0, "mm_tn2_rowdot: %zu rownorm elements outside the sides were written", ngaps);
    if (strcmp(br_ctx_backend(ctx), "cpu") == 0) { /* the same bits as the ops apart */
        br_buf *dall2 = t_buf_from(ctx, BR_F32, dsum0, nd);
        for (int i = 0; i < 2; i++) {
            br_buf *g2 = grad[i] ? t_buf_from(ctx, BR_F32, g0[i], ng[i]) : NULL, *dv2 = NULL;
            br_buf *mat2 = t_buf_poison(ctx, BR_F32, d[i].count, T_NAN32);
            CHECK_OK(ctx, br_buf_view(dall2, i ? m1 + 1 : 0, (sd[i].paths - 1) * pstride + mm[i].m,
                                      &dv2));
            CHECK_OK(ctx, br_mm_tn(ctx, d[i].act, d[i].plane, mm[i].ldp, mat2, side[i].g));
            CHECK_OK(ctx, br_sign_rowdot_paths(ctx, mat2, mm[i].ldo, mm[i].ocol, bits[i], bstr[i],
                                               hs[i], hstr[i], g2, gstr[i], dv2, pstride, mm[i].m,
                                               sd[i].r, sd[i].paths, accumulate));
            if (g2) {
                float *a = t_download_f32(ctx, g2, ng[i]), *b = t_download_f32(ctx, grad[i], ng[i]);
                CHECK(t_bits_differ32(a, b, ng[i]) == 0,
                      "mm_tn2_rowdot side %d: grad bits differ "
                      "from br_mm_tn + br_sign_rowdot_paths",
                      i + 1);
                free(a), free(b);
            }
            br_buf_free(g2), br_buf_free(dv2), br_buf_free(mat2);
        }
        float *a = t_download_f32(ctx, dall2, nd);
        CHECK(t_bits_differ32(a, dgot, nd) == 0,
              "mm_tn2_rowdot: dsum bits differ from br_mm_tn + br_sign_rowdot_paths");
        free(a);
        br_buf_free(dall2);
    }
    free(dgot), free(ngot), free(dsum0);
    for (int i = 0; i < 2; i++) {
        br_buf_free(bits[i]), br_buf_free(hs[i]), br_buf_free(grad[i]), br_buf_free(mv[i]);
        br_buf_free(dv[i]), br_buf_free(d[i].act), br_buf_free(d[i].plane);
        free(d[i].ref), free(hb[i]), free(hh[i]), free(g0[i]);
    }
    br_buf_free(nv[0]), br_buf_free(nv[1]), br_buf_free(nall);
    br_buf_free(mats), br_buf_free(dall);
}

/* The layer's shapes in small (two paths a side, both sides n = 256), a side of one
 * path narrower than a tile and one of three paths whose tile straddles two, no sign
 * gradients on a side, accumulating, a long k, gradients at an unaligned stride;
 * other tiles and several tiles per CTA. */
static void mm_tn2_rowdot_sides(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(16);
#define RD_MM(m_, n_, k_)                                                                          \
    { .m = m_, .n = n_, .k = k_, .lda = m_ + 8, .ldp = n_, .ldo = n_, .oscale = 0.5f }
    static const rd_side cases[][2] = {
        {{RD_MM(300, 256, 96), 128, 2, 1}, {RD_MM(130, 256, 96), 128, 2, 1}},
        {{RD_MM(77, 96, 64), 96, 1, 1}, {RD_MM(50, 192, 64), 64, 3, 0}},
        {{RD_MM(512, 256, 4096), 128, 2, 1}, {RD_MM(128, 256, 4096), 128, 2, 1}},
    };
#undef RD_MM
    for (int acc = 0; acc < 2; acc++)
        for (size_t ci = 0; ci < 3; ci++) {
            if (ci == 2 && (acc || t_small())) continue;
            rowdot2_run(ctx, &r, cases[ci], acc);
        }
    rd_odd_stride = 1;
    rowdot2_run(ctx, &r, cases[0], 0);
    rd_odd_stride = 0;
    static const char *const tiles[] = {"128x256", "256x128"};
    for (size_t t = 0; t < 2; t++)
        for (int one = 0; one < 2; one++) {
            force_tile(ctx, tiles[t], one);
            rowdot2_run(ctx, &r, cases[1], one);
            force_tile(ctx, "auto", 0);
        }
    br_ctx_free(ctx);
}

/* br_mm_tn2's own refusals (each product's arguments are br_mm_tn's checks): the
 * outputs overlapping each other, or an output over the other product's act or
 * plane; nothing is written. */
static void mm_tn2_bad_args(void) {
    br_ctx *ctx = t_ctx();
    const size_t m = 10, n = 40, k = 64;
    br_buf *act = t_buf_poison(ctx, BR_F16, k * m, 0x3C00u);
    br_buf *plane = t_buf_poison(ctx, BR_F16, k * n, 0x3C00u);
    br_buf *whole = t_buf_poison(ctx, BR_F32, 2 * m * n, T_NAN32), *o1 = NULL, *o2 = NULL;
    CHECK_OK(ctx, br_buf_view(whole, 0, m * n, &o1));
    CHECK_OK(ctx, br_buf_view(whole, m * n - 1, m * n, &o2));
    br_gemm g = {.m = m, .n = n, .k = k, .oscale = 1.0f};
    CHECK(br_mm_tn2(NULL, act, plane, n, o1, g, act, plane, n, o2, g) == BR_E_ARG, "NULL ctx");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "out1 overlaps out2",
                    br_mm_tn2(ctx, act, plane, n, o1, g, act, plane, n, o2, g));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "out1 overlaps out2",
                    br_mm_tn2(ctx, act, plane, n, o1, g, act, plane, n, o1, g));
    br_gemm bad = g;
    bad.k = 48;
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "br_mm_tn2: k = 48",
                    br_mm_tn2(ctx, act, plane, n, o1, g, act, plane, n, whole, bad));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "plane",
                    br_mm_tn2(ctx, act, plane, n, o1, g, act, NULL, n, whole, g));
    float *after = t_download_f32(ctx, whole, 2 * m * n);
    size_t written = 0;
    for (size_t i = 0; i < 2 * m * n; i++) {
        uint32_t u;
        memcpy(&u, &after[i], 4);
        written += u != T_NAN32;
    }
    CHECK(written == 0, "mm_tn2 refusals wrote %zu outputs", written);
    free(after);
    br_buf *all[] = {o1, o2, whole, act, plane};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        br_buf_free(all[i]);
    br_ctx_free(ctx);
}

/* Bad arguments: each fails with its status and a message naming the argument, no
 * failed call writes out; exact spans are accepted; a backend without the op fails
 * cleanly, eagerly and from a graph. */
static void mm_tn_bad_args(void) {
    br_ctx *ctx = t_ctx(), *other = t_ctx();
    const size_t m = 10, n = 40, k = 64, lda = 13, ldp = 44;
    const size_t act_span = (k - 1) * lda + m, plane_span = (k - 1) * ldp + n;
    br_buf *act = t_buf_poison(ctx, BR_F16, act_span, 0x3C00u);
    br_buf *plane = t_buf_poison(ctx, BR_F16, plane_span, 0x3C00u);
    br_buf *act_short = t_buf_poison(ctx, BR_F16, act_span - 1, 0x3C00u);
    br_buf *plane_short = t_buf_poison(ctx, BR_F16, plane_span - 1, 0x3C00u);
    br_buf *act32 = t_buf_poison(ctx, BR_F32, act_span, 0);
    br_buf *plane32 = t_buf_poison(ctx, BR_F32, plane_span, 0);
    br_buf *big = t_buf_poison(ctx, BR_F32, m * n + 8, T_NAN32);
    br_buf *out = NULL, *shifted = NULL, *same = NULL;
    CHECK_OK(ctx, br_buf_view(big, 0, m * n, &out));
    CHECK_OK(ctx, br_buf_view(big, 1, m * n, &shifted));
    CHECK_OK(ctx, br_buf_view(big, 0, m * n, &same));
    br_buf *out_short = t_buf_poison(ctx, BR_F32, m * n - 1, T_NAN32);
    br_buf *out16 = t_buf_poison(ctx, BR_F16, m * n, 0);
    br_buf *c16 = t_buf_poison(ctx, BR_F16, m * n, 0);
    br_buf *c = t_buf_poison(ctx, BR_F32, m * n, 0);
    br_buf *cs16 = t_buf_poison(ctx, BR_F16, n, 0x3C00u);
    br_buf *cs_short = t_buf_poison(ctx, BR_F32, n - 1, 0x3f800000u);
    br_buf *foreign = t_buf_poison(other, BR_F16, act_span, 0);
    const br_gemm g = {.m = m, .n = n, .k = k, .lda = lda, .oscale = 1.0f};
    br_gemm b;

    CHECK(br_mm_tn(NULL, act, plane, ldp, out, g) == BR_E_ARG, "NULL ctx");
    /* NULL buffers */
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "br_mm_tn: act", br_mm_tn(ctx, NULL, plane, ldp, out, g));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "plane", br_mm_tn(ctx, act, NULL, ldp, out, g));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "out", br_mm_tn(ctx, act, plane, ldp, NULL, g));
    /* shapes */
    b = g, b.k = 48;
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "k = 48", br_mm_tn(ctx, act, plane, ldp, out, b));
    b = g, b.k = 0;
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "k is 0", br_mm_tn(ctx, act, plane, ldp, out, b));
    b = g, b.m = 0;
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "m is 0", br_mm_tn(ctx, act, plane, ldp, out, b));
    b = g, b.n = 0;
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "n is 0", br_mm_tn(ctx, act, plane, ldp, out, b));
    b = g, b.lda = m - 1; /* lda bounds m here, not k */
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "lda = 9 is less than m",
                    br_mm_tn(ctx, act, plane, ldp, out, b));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "ldp = 39 is less than n",
                    br_mm_tn(ctx, act, plane, n - 1, out, g));
    b = g, b.ldo = n - 1;
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "ldo", br_mm_tn(ctx, act, plane, ldp, out, b));
    /* spans one element short: act (k−1)·lda + m, plane (k−1)·ldp + n, out */
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "act", br_mm_tn(ctx, act_short, plane, ldp, out, g));
    b = g, b.lda = lda + 1;
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "act", br_mm_tn(ctx, act, plane, ldp, out, b));
    b = g, b.lda = 0; /* m: holds (k−1)·m + m ≤ act_span, fine; then the plane */
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "plane", br_mm_tn(ctx, act, plane_short, ldp, out, b));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "plane", br_mm_tn(ctx, act, plane, ldp + 1, out, g));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "out", br_mm_tn(ctx, act, plane, ldp, out_short, g));
    /* overflowing strides */
    b = g, b.lda = (size_t)1 << 28;
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "lda", br_mm_tn(ctx, act, plane, ldp, out, b));
    b = g, b.lda = (size_t)1 << 40;
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "lda", br_mm_tn(ctx, act, plane, ldp, out, b));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "ldp", br_mm_tn(ctx, act, plane, (size_t)1 << 28, out, g));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "ldp", br_mm_tn(ctx, act, plane, SIZE_MAX, out, g));
    /* dtypes */
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "act", br_mm_tn(ctx, act32, plane, ldp, out, g));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "plane", br_mm_tn(ctx, act, plane32, ldp, out, g));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "out", br_mm_tn(ctx, act, plane, ldp, out16, g));
    b = g, b.c = c16, b.beta = 1.0f;
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "c", br_mm_tn(ctx, act, plane, ldp, out, b));
    b = g, b.colscale = cs16;
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "colscale", br_mm_tn(ctx, act, plane, ldp, out, b));
    b = g, b.colscale = cs_short;
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "colscale", br_mm_tn(ctx, act, plane, ldp, out, b));
    /* c overlapping out one element off; finiteness; another context's buffer */
    b = g, b.c = shifted, b.beta = 1.0f;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "c overlaps out", br_mm_tn(ctx, act, plane, ldp, out, b));
    b = g, b.c = c, b.beta = NAN;
    CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "beta", br_mm_tn(ctx, act, plane, ldp, out, b));
    b = g, b.oscale = INFINITY;
    CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "oscale", br_mm_tn(ctx, act, plane, ldp, out, b));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "act", br_mm_tn(ctx, foreign, plane, ldp, out, g));

    /* no failed call wrote out (nor past it) */
    CHECK_OK(ctx, br_ctx_sync(ctx));
    float *o = t_download_f32(ctx, big, m * n + 8);
    size_t written = t_count_written32(o, m * n + 8);
    CHECK(written == 0, "failed calls wrote %zu outputs", written);
    free(o);

    /* exact spans, c a different view of out's exact elements, ldp 0 = n, lda = m */
    b = g, b.c = same, b.beta = 0.5f;
    CHECK_OK(ctx, br_mm_tn(ctx, act, plane, ldp, out, b));
    b = g, b.lda = m;
    CHECK_OK(ctx, br_mm_tn(ctx, act, plane, 0, out, b));

    /* a backend without the op: br_submit says so, eagerly and when a graph runs */
    const br_backend *be = ctx->be;
    br_backend without = *be;
    without.ops[BR_OP_MM_TN] = NULL;
    ctx->be = &without;
    CHECK_FAILS_MSG(ctx, BR_E_UNSUPPORTED, "mm_tn", br_mm_tn(ctx, act, plane, ldp, out, g));
    br_graph *graph = NULL;
    CHECK_OK(ctx, br_graph_begin(ctx));
    CHECK_OK(ctx, br_mm_tn(ctx, act, plane, ldp, out, g));
    CHECK_OK(ctx, br_graph_end(ctx, &graph));
    CHECK_FAILS_MSG(ctx, BR_E_UNSUPPORTED, "mm_tn", br_graph_launch(graph));
    br_graph_free(graph);
    ctx->be = be;

    br_buf *all[] = {act, plane,   act_short, plane_short, act32, plane32,
                     out, shifted, same,      out_short,   out16, c16,
                     c,   cs16,    cs_short,  foreign,     big};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        br_buf_free(all[i]);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

/* br_mm_tn2_rowdot's refusals beyond each side's own checks: no sides, an epilogue
 * on a product, paths·r ≠ n, one side's gradient over the other side's product, dh
 * and dg interleaved with one element shared (interleaved without one is the
 * layer's layout: accepted); nothing is written by a refused call. */
static void mm_tn2_rowdot_bad_args(void) {
    br_ctx *ctx = t_ctx();
    const size_t m = 10, r = 32, P = 2, n = P * r, k = 64;
    br_buf *act = t_buf_poison(ctx, BR_F16, k * m, 0x3C00u);
    br_buf *plane = t_buf_poison(ctx, BR_F16, k * n, 0x3C00u);
    br_buf *bits = t_buf_poison(ctx, BR_U32, P * m * r / 32, 0x5555u);
    br_buf *h = t_buf_poison(ctx, BR_F32, P * m, 0x3F800000u);
    /* one f32 buffer: mat1, mat2, grad1, grad2, then the paths' [dh | dg] pieces,
     * then the paths' row norms of grad1 and grad2, pieces alike */
    const size_t nm = m * n, ng = P * m * r, ps = 2 * m; /* a path's dh then its dg */
    const size_t total = 2 * nm + 2 * ng + 2 * P * ps;
    br_buf *all = t_buf_poison(ctx, BR_F32, total, T_NAN32), *mat1 = NULL, *mat2 = NULL;
    br_buf *g1 = NULL, *g2 = NULL, *d1 = NULL, *d2 = NULL, *d2bad = NULL, *g1bad = NULL;
    CHECK_OK(ctx, br_buf_view(all, 0, nm, &mat1));
    CHECK_OK(ctx, br_buf_view(all, nm, nm, &mat2));
    CHECK_OK(ctx, br_buf_view(all, 2 * nm, ng, &g1));
    CHECK_OK(ctx, br_buf_view(all, 2 * nm + ng, ng, &g2));
    const size_t dbase = 2 * nm + 2 * ng;
    CHECK_OK(ctx, br_buf_view(all, dbase, (P - 1) * ps + m, &d1));
    CHECK_OK(ctx, br_buf_view(all, dbase + m, (P - 1) * ps + m, &d2));
    CHECK_OK(ctx, br_buf_view(all, dbase + m - 1, (P - 1) * ps + m, &d2bad));
    CHECK_OK(ctx, br_buf_view(all, nm + 5, ng, &g1bad)); /* over mat2 */
    const size_t nbase = dbase + P * ps;
    br_buf *n1 = NULL, *n2 = NULL, *n1short = NULL, *n1_on_g1 = NULL, *n1_on_d2 = NULL;
    CHECK_OK(ctx, br_buf_view(all, nbase, (P - 1) * ps + m, &n1));
    CHECK_OK(ctx, br_buf_view(all, nbase + m, (P - 1) * ps + m, &n2));
    CHECK_OK(ctx, br_buf_view(all, nbase, m, &n1short));
    CHECK_OK(ctx, br_buf_view(all, 2 * nm + 3, (P - 1) * ps + m, &n1_on_g1));
    CHECK_OK(ctx, br_buf_view(all, dbase + m, (P - 1) * ps + m, &n1_on_d2));
    br_tn_rowdot side[2];
    for (int i = 0; i < 2; i++)
        side[i] = (br_tn_rowdot){.act = act,
                                 .plane = plane,
                                 .ldp = n,
                                 .mat = i ? mat2 : mat1,
                                 .g = {.m = m, .n = n, .k = k, .oscale = 1.0f},
                                 .bits = bits,
                                 .bits_stride = m * r / 32,
                                 .rowscale = h,
                                 .scale_stride = m,
                                 .grad = i ? g2 : g1,
                                 .grad_stride = m * r,
                                 .dsum = i ? d2 : d1,
                                 .dsum_stride = ps,
                                 .rownorm = i ? n2 : n1,
                                 .rownorm_stride = ps,
                                 .r = r,
                                 .paths = P};
    CHECK(br_mm_tn2_rowdot(NULL, side) == BR_E_ARG, "NULL ctx");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "side is NULL", br_mm_tn2_rowdot(ctx, NULL));
    br_tn_rowdot bad[2] = {side[0], side[1]};
    bad[1].g.colscale = h;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "side 2's product has colscale", br_mm_tn2_rowdot(ctx, bad));
    bad[1] = side[1];
    bad[0].r = 64;
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "paths·r = 128", br_mm_tn2_rowdot(ctx, bad));
    bad[0] = side[0];
    bad[0].grad = g1bad;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "grad1 overlaps mat2", br_mm_tn2_rowdot(ctx, bad));
    bad[0] = side[0];
    bad[1].dsum = d2bad;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "dsum1 overlaps dsum2", br_mm_tn2_rowdot(ctx, bad));
    bad[1] = side[1];
    bad[0].grad = NULL; /* the row norms are the grad's */
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "rownorm without grad", br_mm_tn2_rowdot(ctx, bad));
    bad[0] = side[0];
    bad[0].rownorm_stride = m - 1;
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "rownorm_stride", br_mm_tn2_rowdot(ctx, bad));
    bad[0] = side[0];
    bad[0].rownorm = n1short;
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "rownorm", br_mm_tn2_rowdot(ctx, bad));
    bad[0] = side[0];
    bad[0].rownorm = n1_on_g1;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "rownorm overlaps grad", br_mm_tn2_rowdot(ctx, bad));
    bad[0] = side[0];
    bad[0].rownorm = n1_on_d2; /* on side 1's own dsum's span too */
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "rownorm overlaps dsum", br_mm_tn2_rowdot(ctx, bad));
    float *after = t_download_f32(ctx, all, total);
    size_t written = 0;
    for (size_t i = 0; i < total; i++) {
        uint32_t u;
        memcpy(&u, &after[i], 4);
        written += u != T_NAN32;
    }
    CHECK(written == 0, "mm_tn2_rowdot refusals wrote %zu outputs", written);
    free(after);
    /* the layer's interleaved dh and dg: accepted */
    CHECK_OK(ctx, br_mm_tn2_rowdot(ctx, side));
    br_buf *bufs[] = {mat1, mat2, g1,      g2,       d1,       d2,  d2bad, g1bad, n1, n2,
                      n1short, n1_on_g1, n1_on_d2, all, act, plane, bits, h};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        br_buf_free(bufs[i]);
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- Vulkan shaders */

/* br_mm_stage with an f16 c (the one GEMM whose c is f16) on the shader the options
 * give: its f32 out against f64. */
static void vk_stage16_run(br_ctx *ctx, br_rng *r, const char *label) {
    const size_t m = 70, n = 96, k = 96;
    const float oscale = 0.5f, beta = -0.75f;
    uint16_t *act = rand_f16(r, m * k, 1.0f), *plane = rand_f16(r, n * k, 1.0f);
    uint16_t *c = rand_f16(r, m * n, 4.0f);
    br_buf *ab = t_buf_from(ctx, BR_F16, act, m * k), *pb = t_buf_from(ctx, BR_F16, plane, n * k);
    br_buf *cb = t_buf_from(ctx, BR_F16, c, m * n);
    br_buf *ob = t_buf_poison(ctx, BR_F32, m * n, T_NAN32);
    br_buf *db = t_buf_poison(ctx, BR_F16, br_pad_rows(m) * n, T_NAN16);
    br_gemm g = {.m = m, .n = n, .k = k, .oscale = oscale, .c = cb, .beta = beta};
    CHECK_OK(ctx, br_mm_stage(ctx, ab, pb, ob, g, db, NULL, n, 1.0f));
    double *ref = ref_mm(act, plane, m, n, k, oscale);
    for (size_t i = 0; i < m * n; i++)
        ref[i] += (double)beta * t_f16_value(c[i]);
    char what[160];
    snprintf(what, sizeof what, "%s: mm_stage m=%zu n=%zu k=%zu, f16 c", label, m, n, k);
    check_block(ctx, ob, m * n, ref, m, n, n, 0, what);
    free(act), free(plane), free(c), free(ref);
    br_buf_free(ab), br_buf_free(pb), br_buf_free(cb), br_buf_free(ob), br_buf_free(db);
}

/* One shader variant (options opt; br_ctx_last_kernel containing ran): every
 * epilogue case on the three plane kinds (f16, bits rows, bits cols), br_mm_tn with
 * strides, offsets and output blocks, and an f16 c; m and n mostly not multiples of
 * the 64×64 or 128×128 tile or of any cooperative-matrix shape, k not of 64. Then
 * the coop shader's own paths: long k (many steps through the stage buffers, and
 * lavapipe's cap on loop iterations), its 16-byte reads (16-byte aligned act offset
 * and strides) beside element reads at ragged edges, plain products stored straight
 * to a 16-byte aligned out beside staged ragged edges. big: also GEMMs whose grid of
 * 128×128 tiles is large enough for a GPU to take that tile (vk_coop.c), with
 * ragged edges, aligned and unaligned strides, staged and straight stores. */
static void vk_variant(br_ctx *ctx, br_rng *r, const char *opt, const char *ran, int big) {
    static const tn_spec tn_cases[] = {
        {.m = 97, .n = 70, .k = 64, .oscale = 1.0f},
        {.m = 97,
         .n = 70,
         .k = 96,
         .lda = 100,
         .ldp = 75,
         .act_off = 3,
         .oscale = -0.75f,
         .colscale = 1},
        {.m = 1, .n = 1, .k = 32, .oscale = 1.0f},
        {.m = 33,
         .n = 5,
         .k = 32,
         .lda = 40,
         .ldp = 8,
         .ldo = 50,
         .ocol = 7,
         .oscale = -1.5f,
         .colscale = 1,
         .cmode = 1,
         .beta = 0.75f},
        {.m = 7,
         .n = 200,
         .k = 160,
         .lda = 9,
         .ldp = 203,
         .ldo = 230,
         .ocol = 20,
         .oscale = 1.0f,
         .cmode = 1,
         .beta = 2.0f},
        {.m = 72, .n = 64, .k = 96, .oscale = 2.0f, .colscale = 1, .cmode = 2, .beta = -1.0f},
        {.m = 100, .n = 90, .k = 64, .lda = 104, .ldp = 96, .oscale = 1.0f, .cmode = 1, .beta = -0.5f},
        {.m = 70,
         .n = 130,
         .k = 1024,
         .lda = 72,
         .ldp = 136,
         .ldo = 136,
         .ocol = 4,
         .oscale = 1.0f},
    };
    static const epi_spec vk_cases[] = {
        {.m = 130, .n = 60, .k = 2048, .oscale = 1.0f},
        {.m = 100, .n = 130, .k = 1024, .oscale = 1.0f, .colscale = 1},
        {.m = 200,
         .n = 136,
         .k = 64,
         .lda = 72,
         .act_off = 8,
         .oscale = 0.5f,
         .colscale = 1,
         .cmode = 2,
         .beta = 0.5f},
    };
    static const epi_spec big_cases[] = {
        {.m = 1500, .n = 1400, .k = 96, .lda = 104, .oscale = 1.0f, .cmode = 1, .beta = 0.25f},
    };
    static const tn_spec big_tn = {.m = 1400, .n = 1500, .k = 64, .oscale = 1.0f};
    fprintf(stderr, "  %s: the GEMMs on %s...)\n", opt, ran);
    CHECK_OK(ctx, br_ctx_set_options(ctx, opt));
    for (int kind = 0; kind < 3; kind++)
        for (size_t ci = 0; ci < N_EPI_CASES; ci++) {
            epi_spec sp = epi_cases[ci];
            sp.kind = kind;
            sp.ran = ran;
            epi_run(ctx, r, &sp, opt);
        }
    for (size_t ci = 0; ci < sizeof tn_cases / sizeof tn_cases[0]; ci++) {
        tn_spec sp = tn_cases[ci];
        sp.ran = ran;
        tn_run(ctx, r, &sp);
    }
    vk_stage16_run(ctx, r, opt);
    for (int kind = 0; kind < 3; kind++)
        for (size_t ci = 0; ci < sizeof vk_cases / sizeof vk_cases[0]; ci++) {
            epi_spec sp = vk_cases[ci];
            sp.kind = kind;
            sp.ran = ran;
            epi_run(ctx, r, &sp, opt);
        }
    if (!big) return;
    for (int kind = 0; kind < 3; kind++)
        for (size_t ci = 0; ci < sizeof big_cases / sizeof big_cases[0]; ci++) {
            epi_spec sp = big_cases[ci];
            sp.kind = kind;
            sp.ran = ran;
            epi_run(ctx, r, &sp, opt);
        }
    fprintf(stderr, "  %s: %zu×%zu×%zu on %s\n", opt, big_cases[0].m, big_cases[0].n,
            big_cases[0].k, br_ctx_last_kernel(ctx));
    tn_spec sp = big_tn;
    sp.ran = ran;
    tn_run(ctx, r, &sp);
}

/* A 1×1×32 br_mm with options opt: its status, and in what the kernel that ran or
 * the message of the refusal. */
static br_status vk_try(br_ctx *ctx, const char *opt, char *what, size_t len) {
    br_buf *a = t_buf_poison(ctx, BR_F16, 32, 0x3C00u), *p = t_buf_poison(ctx, BR_F16, 32, 0x3C00u);
    br_buf *o = t_buf_poison(ctx, BR_F32, 1, T_NAN32);
    CHECK_OK(ctx, br_ctx_set_options(ctx, opt));
    br_ctx_clear_error(ctx);
    br_gemm g = {.m = 1, .n = 1, .k = 32, .oscale = 1.0f};
    br_status st = br_mm(ctx, a, p, o, g);
    snprintf(what, len, "%s", st == BR_OK ? br_ctx_last_kernel(ctx) : br_ctx_error(ctx));
    if (st == BR_OK) {
        float *v = t_download_f32(ctx, o, 1);
        CHECK(v[0] == 32.0f, "%s: 1×1×32 of ones gave %g", opt, v[0]);
        free(v);
    }
    br_buf_free(a), br_buf_free(p), br_buf_free(o);
    return st;
}

/* The Vulkan GEMM shaders one by one (option vk_gemm): tiled; coop in the shape the
 * device's pick and in each vk_coop_shape the device lists; coop_emulated (the coop
 * shader's own code, its matrix operations in plain arithmetic) in each
 * vk_coop_shape; and auto, which must take coop exactly where coop runs. Where the
 * device has no cooperative matrices (lavapipe) the coop runs report "skipped:" and
 * why; with BITRANK_TEST_EXPECT_COOP=1 (a device known to have them) that fails. */
static void vk_gemm_shaders(void) {
    br_ctx *ctx = t_ctx();
    if (strcmp(br_ctx_backend(ctx), "vulkan") != 0) {
        br_ctx_free(ctx);
        return;
    }
    br_rng r = t_rng_for(21);
    const char *e = getenv("BITRANK_TEST_EXPECT_COOP");
    const int expect_coop = e && !strcmp(e, "1");
    static const char *const shapes[] = {"16x16x16", "16x8x16", "16x8x8", "8x16x16", "32x32x32"};
    char what[400], opt[96], ran[64];
    fprintf(stderr, "  on %s\n", br_ctx_device(ctx));

    br_status st = vk_try(ctx, "vk_gemm=tiled,vk_coop_shape=auto", what, sizeof what);
    CHECK(st == BR_OK && !strcmp(what, "vk_tiled(mm)"), "vk_gemm=tiled: %s", what);
    vk_variant(ctx, &r, "vk_gemm=tiled,vk_coop_shape=auto", "vk_tiled(", 0);

    st = vk_try(ctx, "vk_gemm=coop,vk_coop_shape=auto", what, sizeof what);
    const int coop = st == BR_OK;
    char coop_ran[64] = "vk_tiled(";
    if (coop) {
        const char *paren = strchr(what, '(');
        CHECK(!strncmp(what, "vk_coop ", 8) && paren, "vk_gemm=coop ran %s", what);
        snprintf(coop_ran, sizeof coop_ran, "%.*s", paren ? (int)(paren - what + 1) : 0, what);
        vk_variant(ctx, &r, "vk_gemm=coop,vk_coop_shape=auto", coop_ran, 1);
    } else {
        CHECK(st == BR_E_UNSUPPORTED, "vk_gemm=coop: %s: %s", br_status_name(st), what);
        CHECK(!expect_coop, "BITRANK_TEST_EXPECT_COOP=1, but %s", what);
        fprintf(stderr, "  vk_gemm=coop: skipped: %s\n", what);
    }
    st = vk_try(ctx, "vk_gemm=auto,vk_coop_shape=auto", what, sizeof what);
    CHECK(st == BR_OK && !strncmp(what, coop_ran, strlen(coop_ran)),
          "vk_gemm=auto ran %s, not %s...", what, coop_ran);

    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        for (int emulated = coop ? 0 : 1; emulated < 2; emulated++) {
            const char *kind = emulated ? "coop_emulated" : "coop";
            snprintf(opt, sizeof opt, "vk_gemm=%s,vk_coop_shape=%s", kind, shapes[si]);
            snprintf(ran, sizeof ran, "vk_%s %s (", kind, shapes[si]);
            st = vk_try(ctx, opt, what, sizeof what);
            if (st == BR_OK) {
                CHECK(!strncmp(what, ran, strlen(ran)), "%s ran %s", opt, what);
                /* big on the device's matrices, and emulated in the first shape */
                vk_variant(ctx, &r, opt, ran, !emulated || si == 0);
            } else if (st == BR_E_UNSUPPORTED && (emulated || strstr(what, "does not list"))) {
                fprintf(stderr, "  %s: skipped: %s\n", opt, what);
            } else {
                CHECK(0, "%s: %s: %s", opt, br_status_name(st), what);
            }
        }
    }
    CHECK_OK(ctx, br_ctx_set_options(ctx, "vk_gemm=auto,vk_coop_shape=auto"));
    br_ctx_free(ctx);
}

T_RUN("gemm", T_CASE(mm_shapes), T_CASE(mm_ldo_ocol), T_CASE(mm_oscale), T_CASE(mm_special_values),
      T_CASE(mm_bits_layouts), T_CASE(mm_bits_expand_path), T_CASE(mm_bits_expand_graph),
      T_CASE(mm_bits_expand_eager_growth), T_CASE(mm_graph), T_CASE(mm_launch_counts),
      T_CASE(mm_bad_args), T_CASE(mm_epilogue), T_CASE(mm_epilogue_bad_args),
      T_CASE(mm_tiles_splitk), T_CASE(mm_same_bits_any_thread_count), T_CASE(mm_tn_shapes),
      T_CASE(mm_tn_bad_args), T_CASE(mm_tn2_pairs), T_CASE(mm_tn2_bad_args),
      T_CASE(mm_tn2_rowdot_sides), T_CASE(mm_tn2_rowdot_bad_args), T_CASE(vk_gemm_shaders))
