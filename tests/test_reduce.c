/* Column reductions (br_colsum, br_colsum_fused) against a scalar C reference of
 * the contract's block order, bit for bit, and against an f64 sum within a
 * rigorous rounding bound; the fused op also against the separate ops it fuses
 * (br_colsum, br_cvt, br_scale_acc, br_cvt_t). Fresh random data, outputs
 * poisoned first, awkward shapes (1 row, one block, one row past a block, blocks
 * of more than 64 rows, k a multiple of nothing). */
#include "harness.h"

#include "core/internal.h" /* ctx->stats: the CPU counts one launch per op */

#define EXTRA 5 /* elements past each output that must keep their poison */

/* Rows per block, written from the contract's words: max(64, ceil(rows/256)). */
static size_t ref_block_rows(size_t rows) {
    size_t b = rows / 256 + (rows % 256 != 0);
    return b > 64 ? b : 64;
}

static float ref_term(const float *a, const float *b, const float *f, br_colsum_term term, size_t k,
                      size_t row, size_t c, float acc) {
    float x = a[row * k + c];
    switch (term) {
    case BR_TERM_AB: return fmaf(x, b[row * k + c], acc);
    case BR_TERM_ABF: {
        float ab = x * b[row * k + c];
        return fmaf(ab, f[row], acc);
    }
    case BR_TERM_A: return acc + x;
    }
    return NAN;
}

/* Column c's total in the contract's order, one column at a time (the opposite
 * loop order of the CPU backend). */
static float ref_colsum_col(const float *a, const float *b, const float *f, br_colsum_term term,
                            size_t rows, size_t k, size_t c) {
    size_t block = ref_block_rows(rows);
    float total = 0.0f;
    for (size_t r0 = 0; r0 < rows; r0 += block) {
        float part = 0.0f;
        for (size_t row = r0; row < rows && row < r0 + block; row++)
            part = ref_term(a, b, f, term, k, row, c, part);
        total = total + part;
    }
    return total;
}

/* out0 (+)= the reference totals, as the op must write them. */
static float *ref_colsum(const float *a, const float *b, const float *f, br_colsum_term term,
                         size_t rows, size_t k, const float *out0, int accumulate) {
    float *out = t_xmalloc(k * sizeof *out);
    for (size_t c = 0; c < k; c++) {
        float total = ref_colsum_col(a, b, f, term, rows, k, c);
        out[c] = accumulate ? out0[c] + total : total;
    }
    return out;
}

/* |got − Σ in f64| within the worst-case rounding of the block order:
 * (B + nb + 1)·2^-24·(Σ|term| + |out0|), one rounding per add of each level. */
static int colsum_within_f64(const float *a, const float *b, const float *f, br_colsum_term term,
                             size_t rows, size_t k, const float *out0, int accumulate,
                             const float *got, size_t *bad_col) {
    size_t block = ref_block_rows(rows), nb = (rows + block - 1) / block;
    for (size_t c = 0; c < k; c++) {
        double sum = accumulate ? out0[c] : 0.0, mag = accumulate ? fabs(out0[c]) : 0.0;
        for (size_t row = 0; row < rows; row++) {
            double t = a[row * k + c];
            if (term != BR_TERM_A) t *= b[row * k + c];
            if (term == BR_TERM_ABF) t *= f[row];
            sum += t;
            mag += fabs(t);
        }
        double bound = (double)(block + nb + 2) * 0x1p-24 * mag + 1e-37;
        if (!(fabs((double)got[c] - sum) <= bound)) {
            *bad_col = c;
            return 0;
        }
    }
    return 1;
}

/* got[0..n) equals ref bit for bit and got[n..n+EXTRA) still holds the poison. */
static void check_bits32(br_ctx *ctx, const br_buf *buf, const float *ref, size_t n,
                         const char *what, size_t rows, size_t k) {
    float *got = t_download_f32(ctx, buf, n + EXTRA);
    size_t i = t_first_diff32(got, ref, n);
    CHECK(i == n, "%s rows=%zu k=%zu: %zu of %zu differ (first [%zu]: %a, want %a)", what, rows, k,
          t_bits_differ32(got, ref, n), n, i, i < n ? got[i] : 0.0f, i < n ? ref[i] : 0.0f);
    for (size_t j = n; j < n + EXTRA; j++) {
        uint32_t u;
        memcpy(&u, &got[j], 4);
        CHECK(u == T_NAN32, "%s rows=%zu k=%zu: element %zu past the output was written", what,
              rows, k, j);
    }
    free(got);
}
static void check_bits16(br_ctx *ctx, const br_buf *buf, const uint16_t *ref, size_t n,
                         const char *what, size_t rows, size_t k) {
    uint16_t *got = t_download_f16(ctx, buf, n + EXTRA);
    size_t i = t_first_diff16(got, ref, n);
    CHECK(i == n, "%s rows=%zu k=%zu: %zu of %zu differ (first [%zu]: 0x%04x, want 0x%04x)", what,
          rows, k, t_bits_differ16(got, ref, n), n, i, i < n ? got[i] : 0, i < n ? ref[i] : 0);
    for (size_t j = n; j < n + EXTRA; j++)
        CHECK(got[j] == T_NAN16, "%s rows=%zu k=%zu: element %zu past the output was written", what,
              rows, k, j);
    free(got);
}

/* An f32 buffer of n + EXTRA elements: host values then NaN (host NULL: all NaN). */
static br_buf *out_buf(br_ctx *ctx, const float *host, size_t n) {
    br_buf *b = t_buf_poison(ctx, BR_F32, n + EXTRA, T_NAN32);
    if (host) CHECK_OK(ctx, br_buf_upload(b, 0, host, n));
    return b;
}

/* Shapes: the block edges first (rows 1, 63, 64, 65, 70, 1000, and 20000 where a
 * block is 79 rows; k past the CPU's column chunk of 1024), then random ones; k a
 * multiple of nothing. */
static void pick_shape(br_rng *r, int i, size_t *rows, size_t *k) {
    static const size_t fixed[][2] = {{1, 1},    {1, 37},    {63, 5},     {64, 129},  {65, 3},
                                      {70, 300}, {1000, 33}, {20000, 37}, {16447, 2}, {97, 2049}};
    t_pick_shape2(r, fixed, sizeof fixed / sizeof fixed[0], (size_t)i, 1, 3000, 1, 150, rows, k);
}
#define N_SHAPES 14

static const char *term_name(br_colsum_term t) {
    return t == BR_TERM_AB ? "AB" : t == BR_TERM_ABF ? "ABF" : "A";
}

static void colsum_matches_block_order(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(1);
    for (int s = 0; s < N_SHAPES; s++) {
        size_t rows, k;
        pick_shape(&r, s, &rows, &k);
        size_t n = rows * k;
        float *a = t_rand(&r, n, 1.0f), *b = t_rand(&r, n, 2.0f), *f = t_rand(&r, rows, 3.0f);
        float *out0 = t_rand(&r, k, 50.0f);
        br_buf *ba = t_buf_from(ctx, BR_F32, a, n), *bb = t_buf_from(ctx, BR_F32, b, n);
        br_buf *bf = t_buf_from(ctx, BR_F32, f, rows);
        for (int term = 0; term < 3; term++) {
            for (int acc = 0; acc < 2; acc++) {
                const char *what = term_name((br_colsum_term)term);
                br_buf *out = out_buf(ctx, acc ? out0 : NULL, k);
                CHECK_OK(ctx, br_colsum(ctx, ba, bb, bf, (br_colsum_term)term, out, rows, k, acc));
                float *ref = ref_colsum(a, b, f, (br_colsum_term)term, rows, k, out0, acc);
                check_bits32(ctx, out, ref, k, what, rows, k);
                float *got = t_download_f32(ctx, out, k);
                size_t bad = 0;
                CHECK(
                    colsum_within_f64(a, b, f, (br_colsum_term)term, rows, k, out0, acc, got, &bad),
                    "%s acc=%d rows=%zu k=%zu: column %zu is %g, off the f64 sum", what, acc, rows,
                    k, bad, got[bad]);
                free(got);
                free(ref);
                br_buf_free(out);
            }
        }
        br_buf_free(ba);
        br_buf_free(bb);
        br_buf_free(bf);
        free(a);
        free(b);
        free(f);
        free(out0);
    }
    br_ctx_free(ctx);
}

/* A term that is not AB ignores b (and f): NULL or a wrong buffer is fine. */
static void colsum_ignores_unused_operands(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(2);
    size_t rows = 130, k = 7;
    float *a = t_rand(&r, rows * k, 1.0f), *b = t_rand(&r, rows * k, 1.0f);
    float *f = t_rand(&r, rows, 1.0f);
    br_buf *ba = t_buf_from(ctx, BR_F32, a, rows * k), *bb = t_buf_from(ctx, BR_F32, b, rows * k);
    br_buf *tiny = t_buf_poison(ctx, BR_F16, 1, 0);
    br_buf *out = out_buf(ctx, NULL, k);
    CHECK_OK(ctx, br_colsum(ctx, ba, NULL, NULL, BR_TERM_A, out, rows, k, 0));
    float *ref = ref_colsum(a, NULL, NULL, BR_TERM_A, rows, k, NULL, 0);
    check_bits32(ctx, out, ref, k, "A without b", rows, k);
    CHECK_OK(ctx, br_colsum(ctx, ba, tiny, tiny, BR_TERM_A, out, rows, k, 0));
    check_bits32(ctx, out, ref, k, "A with unused wrong b", rows, k);
    free(ref);
    CHECK_OK(ctx, br_colsum(ctx, ba, bb, tiny, BR_TERM_AB, out, rows, k, 0));
    ref = ref_colsum(a, b, NULL, BR_TERM_AB, rows, k, NULL, 0);
    check_bits32(ctx, out, ref, k, "AB with unused wrong f", rows, k);
    free(ref);
    br_buf_free(ba);
    br_buf_free(bb);
    br_buf_free(tiny);
    br_buf_free(out);
    free(a);
    free(b);
    free(f);
    br_ctx_free(ctx);
}

/* Operands and output as views at odd offsets into larger buffers. */
static void colsum_on_views(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(3);
    size_t rows = 333, k = 11, off = 7;
    size_t n = rows * k;
    float *a = t_rand(&r, n + off, 1.0f), *b = t_rand(&r, n + off, 1.0f);
    float *f = t_rand(&r, rows + off, 1.0f);
    br_buf *big_a = t_buf_from(ctx, BR_F32, a, n + off),
           *big_b = t_buf_from(ctx, BR_F32, b, n + off);
    br_buf *big_f = t_buf_from(ctx, BR_F32, f, rows + off);
    br_buf *big_out = t_buf_poison(ctx, BR_F32, k + 2 * off, T_NAN32);
    br_buf *va, *vb, *vf, *vout;
    CHECK_OK(ctx, br_buf_view(big_a, off, n, &va));
    CHECK_OK(ctx, br_buf_view(big_b, off, n, &vb));
    CHECK_OK(ctx, br_buf_view(big_f, off, rows, &vf));
    CHECK_OK(ctx, br_buf_view(big_out, off, k, &vout));
    CHECK_OK(ctx, br_colsum(ctx, va, vb, vf, BR_TERM_ABF, vout, rows, k, 0));
    float *ref = ref_colsum(a + off, b + off, f + off, BR_TERM_ABF, rows, k, NULL, 0);
    float *got = t_download_f32(ctx, big_out, k + 2 * off);
    CHECK(t_first_diff32(got + off, ref, k) == k, "colsum through views differs");
    for (size_t i = 0; i < k + 2 * off; i++) {
        if (i >= off && i < off + k) continue;
        uint32_t u;
        memcpy(&u, &got[i], 4);
        CHECK(u == T_NAN32, "element %zu outside the view was written", i);
    }
    free(got);
    free(ref);
    br_buf_free(va);
    br_buf_free(vb);
    br_buf_free(vf);
    br_buf_free(vout);
    br_buf_free(big_a);
    br_buf_free(big_b);
    br_buf_free(big_f);
    br_buf_free(big_out);
    free(a);
    free(b);
    free(f);
    br_ctx_free(ctx);
}

/* ------------------------------------------------------------------ fused */

static uint16_t ref_stage(float x, float col, float scale) {
    float xc = x * col;
    return br_half_from_float(xc * scale);
}

/* What br_cvt(src, col, scale) writes: [pad_rows(rows)][k], pad rows zero. */
static uint16_t *ref_cvt(const float *src, const float *col, size_t rows, size_t k, float scale) {
    size_t n = br_pad_rows(rows) * k;
    uint16_t *d = t_xmalloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++)
        d[i] = i < rows * k ? ref_stage(src[i], col[i % k], scale) : 0;
    return d;
}

/* What br_cvt_t(src, col, scale) writes: [pad_rows(k)][pad_tokens(rows)], pads zero. */
static uint16_t *ref_cvt_t(const float *src, const float *col, size_t rows, size_t k, float scale) {
    size_t ld = br_pad_tokens(rows), n = br_pad_rows(k) * ld;
    uint16_t *d = t_xmalloc(n * sizeof *d);
    for (size_t c = 0; c < br_pad_rows(k); c++)
        for (size_t t = 0; t < ld; t++)
            d[c * ld + t] = c < k && t < rows ? ref_stage(src[t * k + c], col[c], scale) : 0;
    return d;
}

/* What br_scale_acc(b, col) writes into out0 (NULL: overwrite). */
static float *ref_scale_acc(const float *b, const float *col, size_t rows, size_t k,
                            const float *out0) {
    float *d = t_xmalloc(rows * k * sizeof *d);
    for (size_t i = 0; i < rows * k; i++) {
        float v = b[i] * col[i % k];
        d[i] = out0 ? out0[i] + v : v;
    }
    return d;
}

/* Column factors near 1 with some powers of two; staging scales that reach the
 * f16 subnormals, the normals, and overflow to Inf. */
static float *col_data(br_rng *r, size_t k) {
    float *v = t_xmalloc(k * sizeof *v);
    for (size_t i = 0; i < k; i++)
        v[i] = i % 4 == 0 ? ldexpf(1.0f, (int)t_rand_size(r, 0, 6) - 3)
                          : 0.25f + 1.5f * (float)br_rng_unit(r);
    return v;
}
static float rand_scale(br_rng *r) {
    switch (br_rng_u64(r) % 4) {
    case 0: return 1.0f;
    case 1: return ldexpf(1.0f, -20);                          /* subnormals */
    case 2: return 30000.0f + 9000.0f * (float)br_rng_unit(r); /* some overflow */
    default: return 0.1f + 3.0f * (float)br_rng_unit(r);
    }
}

typedef struct fused_case {
    br_fuse_kind kind;
    int with_t, accumulate;
} fused_case;

static const char *fuse_name(br_fuse_kind kind) {
    return kind == BR_FUSE_CVT_A ? "CVT_A" : kind == BR_FUSE_CVT_B ? "CVT_B" : "SCALE_B";
}

/* One fused run: every output against the scalar reference and against the
 * separate ops run on the same inputs. */
static void run_fused_case(br_ctx *ctx, br_rng *r, size_t rows, size_t k, fused_case fc) {
    size_t n = rows * k, n_staged = br_pad_rows(rows) * k;
    size_t n_t = br_pad_rows(k) * br_pad_tokens(rows);
    int cvt = fc.kind != BR_FUSE_SCALE_B;
    float *a = t_rand(r, n, 1.0f), *b = t_rand(r, n, 2.0f), *col = col_data(r, k);
    float *sum0 = t_rand(r, k, 10.0f), *dst0 = t_rand(r, n, 3.0f);
    float scale = rand_scale(r), t_scale = rand_scale(r);
    br_buf *ba = t_buf_from(ctx, BR_F32, a, n), *bb = t_buf_from(ctx, BR_F32, b, n);
    br_buf *bcol = t_buf_from(ctx, BR_F32, col, k);
    br_buf *sum = out_buf(ctx, sum0, k);
    br_buf *dst = cvt ? t_buf_poison(ctx, BR_F16, n_staged + EXTRA, T_NAN16)
                      : out_buf(ctx, fc.accumulate ? dst0 : NULL, n);
    br_buf *dst_t = fc.with_t ? t_buf_poison(ctx, BR_F16, n_t + EXTRA, T_NAN16) : NULL;
    br_fuse fz = {.kind = fc.kind,
                  .col = bcol,
                  .dst = dst,
                  .scale = scale,
                  .accumulate = fc.accumulate,
                  .dst_t = dst_t,
                  .t_scale = t_scale};
    char what[64];
    snprintf(what, sizeof what, "fused %s%s acc=%d", fuse_name(fc.kind), fc.with_t ? "+t" : "",
             fc.accumulate);
    CHECK_OK(ctx, br_colsum_fused(ctx, ba, bb, sum, rows, k, &fz));

    /* the scalar references */
    float *ref_sum = ref_colsum(a, b, NULL, BR_TERM_AB, rows, k, sum0, 1);
    check_bits32(ctx, sum, ref_sum, k, what, rows, k);
    const float *staged_src = fc.kind == BR_FUSE_CVT_A ? a : b;
    if (cvt) {
        uint16_t *ref = ref_cvt(staged_src, col, rows, k, scale);
        check_bits16(ctx, dst, ref, n_staged, what, rows, k);
        free(ref);
    } else {
        float *ref = ref_scale_acc(b, col, rows, k, fc.accumulate ? dst0 : NULL);
        check_bits32(ctx, dst, ref, n, what, rows, k);
        free(ref);
    }
    if (dst_t) {
        uint16_t *ref =
            cvt ? ref_cvt_t(staged_src, col, rows, k, scale) : ref_cvt_t(a, col, rows, k, t_scale);
        check_bits16(ctx, dst_t, ref, n_t, what, rows, k);
        free(ref);
    }

    /* the separate ops on the same inputs give the same bits */
    br_buf *sum_sep = out_buf(ctx, sum0, k);
    CHECK_OK(ctx, br_colsum(ctx, ba, bb, NULL, BR_TERM_AB, sum_sep, rows, k, 1));
    float *got_sep = t_download_f32(ctx, sum_sep, k);
    check_bits32(ctx, sum, got_sep, k, "fused sum vs br_colsum", rows, k);
    free(got_sep);
    br_buf_free(sum_sep);
    if (cvt) {
        br_buf *sep = t_buf_poison(ctx, BR_F16, n_staged, T_NAN16);
        CHECK_OK(ctx, br_cvt(ctx, fc.kind == BR_FUSE_CVT_A ? ba : bb, bcol, sep, rows, k, scale));
        uint16_t *want = t_download_f16(ctx, sep, n_staged);
        check_bits16(ctx, dst, want, n_staged, "fused dst vs br_cvt", rows, k);
        free(want);
        br_buf_free(sep);
    } else {
        br_buf *sep = out_buf(ctx, fc.accumulate ? dst0 : NULL, n);
        CHECK_OK(ctx, br_scale_acc(ctx, bb, bcol, sep, rows, k, fc.accumulate));
        float *want = t_download_f32(ctx, sep, n);
        check_bits32(ctx, dst, want, n, "fused dst vs br_scale_acc", rows, k);
        free(want);
        br_buf_free(sep);
    }
    if (dst_t) {
        br_buf *sep = t_buf_poison(ctx, BR_F16, n_t, T_NAN16);
        const br_buf *src = fc.kind == BR_FUSE_CVT_B ? bb : ba;
        CHECK_OK(ctx, br_cvt_t(ctx, src, bcol, sep, rows, k, cvt ? scale : t_scale));
        uint16_t *want = t_download_f16(ctx, sep, n_t);
        check_bits16(ctx, dst_t, want, n_t, "fused dst_t vs br_cvt_t", rows, k);
        free(want);
        br_buf_free(sep);
    }

    free(ref_sum);
    br_buf_free(ba);
    br_buf_free(bb);
    br_buf_free(bcol);
    br_buf_free(sum);
    br_buf_free(dst);
    br_buf_free(dst_t);
    free(a);
    free(b);
    free(col);
    free(sum0);
    free(dst0);
}

static void colsum_fused_matches_separate_ops(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(4);
    static const fused_case cases[] = {
        {BR_FUSE_CVT_A, 0, 0},   {BR_FUSE_CVT_A, 1, 0},   {BR_FUSE_CVT_B, 0, 0},
        {BR_FUSE_CVT_B, 1, 0},   {BR_FUSE_SCALE_B, 0, 0}, {BR_FUSE_SCALE_B, 0, 1},
        {BR_FUSE_SCALE_B, 1, 0}, {BR_FUSE_SCALE_B, 1, 1},
    };
    for (int s = 0; s < N_SHAPES; s++) {
        size_t rows, k;
        pick_shape(&r, s, &rows, &k);
        /* every kind on the edge shapes; one random kind on each of the others */
        size_t ncase = sizeof cases / sizeof cases[0];
        if (rows * k > 200000 || s >= 10) {
            run_fused_case(ctx, &r, rows, k, cases[br_rng_u64(&r) % ncase]);
            continue;
        }
        for (size_t c = 0; c < ncase; c++)
            run_fused_case(ctx, &r, rows, k, cases[c]);
    }
    /* the big shape with every kind once more, with the transposed output */
    run_fused_case(ctx, &r, 20000, 37, (fused_case){BR_FUSE_CVT_A, 1, 0});
    run_fused_case(ctx, &r, 20000, 37, (fused_case){BR_FUSE_CVT_B, 1, 0});
    run_fused_case(ctx, &r, 20000, 37, (fused_case){BR_FUSE_SCALE_B, 1, 1});
    br_ctx_free(ctx);
}

/* Recorded ops run only when the graph is launched, and then give the same bits. */
static void colsum_in_a_graph(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(5);
    size_t rows = 1500, k = 45, n = rows * k;
    float *a = t_rand(&r, n, 1.0f), *b = t_rand(&r, n, 1.0f), *col = col_data(&r, k);
    br_buf *ba = t_buf_from(ctx, BR_F32, a, n), *bb = t_buf_from(ctx, BR_F32, b, n);
    br_buf *bcol = t_buf_from(ctx, BR_F32, col, k);
    br_buf *out = out_buf(ctx, NULL, k), *sum = t_buf_poison(ctx, BR_F32, k + EXTRA, 0);
    br_buf *dst = t_buf_poison(ctx, BR_F16, br_pad_rows(rows) * k + EXTRA, T_NAN16);
    br_fuse fz = {.kind = BR_FUSE_CVT_A, .col = bcol, .dst = dst, .scale = 2.0f};
    br_graph *g = NULL;
    CHECK_OK(ctx, br_graph_begin(ctx));
    CHECK_OK(ctx, br_colsum(ctx, ba, NULL, NULL, BR_TERM_A, out, rows, k, 0));
    CHECK_OK(ctx, br_colsum_fused(ctx, ba, bb, sum, rows, k, &fz));
    CHECK_OK(ctx, br_graph_end(ctx, &g));
    CHECK(br_graph_op_count(g) == 2, "graph holds %zu ops, want 2", br_graph_op_count(g));
    float *before = t_download_f32(ctx, out, 1);
    uint32_t u;
    memcpy(&u, before, 4);
    CHECK(u == T_NAN32, "a recorded colsum ran before the launch");
    free(before);
    for (int rep = 0; rep < 2; rep++) {
        CHECK_OK(ctx, br_graph_launch(g));
        float *ref = ref_colsum(a, NULL, NULL, BR_TERM_A, rows, k, NULL, 0);
        check_bits32(ctx, out, ref, k, "graph colsum", rows, k);
        free(ref);
        /* sum accumulates: after rep+1 launches it holds the total added rep+1 times */
        float *zero = t_xmalloc(k * sizeof *zero), *want = t_xmalloc(k * sizeof *want);
        for (size_t c = 0; c < k; c++)
            zero[c] = 0.0f;
        float *once = ref_colsum(a, b, NULL, BR_TERM_AB, rows, k, zero, 1);
        for (size_t c = 0; c < k; c++)
            want[c] = rep ? once[c] + once[c] : once[c];
        float *got = t_download_f32(ctx, sum, k);
        CHECK(t_first_diff32(got, want, k) == k, "graph colsum_fused sum after %d launches",
              rep + 1);
        free(got);
        free(zero);
        free(want);
        free(once);
    }
    br_graph_free(g);
    br_buf_free(ba);
    br_buf_free(bb);
    br_buf_free(bcol);
    br_buf_free(out);
    br_buf_free(sum);
    br_buf_free(dst);
    free(a);
    free(b);
    free(col);
    br_ctx_free(ctx);
}

/* One launch per op on the CPU; every op declares its partials' workspace. */
static void colsum_counts_and_workspace(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(6);
    size_t rows = 20000, k = 9, n = rows * k;
    float *a = t_rand(&r, n, 1.0f);
    br_buf *ba = t_buf_from(ctx, BR_F32, a, n), *bcol = t_buf_from(ctx, BR_F32, a, k);
    br_buf *out = out_buf(ctx, NULL, k), *dst = out_buf(ctx, NULL, n);
    br_fuse fz = {.kind = BR_FUSE_SCALE_B, .col = bcol, .dst = dst};
    size_t want_ws = ((rows + 78) / 79) * k * sizeof(float); /* 254 blocks of 79 rows */
    uint64_t l0 = ctx->stats.launches;
    CHECK_OK(ctx, br_colsum(ctx, ba, ba, NULL, BR_TERM_AB, out, rows, k, 0));
    CHECK(ctx->ws_need >= want_ws, "colsum declared %zu workspace bytes, needs %zu", ctx->ws_need,
          want_ws);
    uint64_t l1 = ctx->stats.launches;
    CHECK_OK(ctx, br_colsum_fused(ctx, ba, ba, out, rows, k, &fz));
    uint64_t l2 = ctx->stats.launches;
    if (strcmp(br_ctx_backend(ctx), "cpu") == 0) {
        CHECK(l1 - l0 == 1, "colsum counted %llu launches", (unsigned long long)(l1 - l0));
        CHECK(l2 - l1 == 1, "colsum_fused counted %llu launches", (unsigned long long)(l2 - l1));
    } else {
        CHECK(l1 > l0 && l2 > l1, "launches not counted");
    }
    br_buf_free(ba);
    br_buf_free(bcol);
    br_buf_free(out);
    br_buf_free(dst);
    free(a);
    br_ctx_free(ctx);
}

static void colsum_bad_arguments(void) {
    br_ctx *ctx = t_ctx(), *other = t_cpu_ctx();
    size_t rows = 100, k = 6, n = rows * k;
    br_buf *a = t_buf_poison(ctx, BR_F32, n, 0), *b = t_buf_poison(ctx, BR_F32, n, 0);
    br_buf *f = t_buf_poison(ctx, BR_F32, rows, 0), *out = t_buf_poison(ctx, BR_F32, k, 0);
    br_buf *half = t_buf_poison(ctx, BR_F16, n, 0), *small = t_buf_poison(ctx, BR_F32, k - 1, 0);
    br_buf *short_f = t_buf_poison(ctx, BR_F32, rows - 1, 0);
    br_buf *foreign = t_buf_poison(other, BR_F32, n, 0);
    const br_colsum_term AB = BR_TERM_AB, ABF = BR_TERM_ABF;

    CHECK(br_colsum(NULL, a, b, NULL, AB, out, rows, k, 0) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "a is NULL", br_colsum(ctx, NULL, b, NULL, AB, out, rows, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "b is NULL", br_colsum(ctx, a, NULL, NULL, AB, out, rows, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "f is NULL", br_colsum(ctx, a, b, NULL, ABF, out, rows, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "out is NULL", br_colsum(ctx, a, b, f, ABF, NULL, rows, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "term",
                    br_colsum(ctx, a, b, f, (br_colsum_term)3, out, rows, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "term",
                    br_colsum(ctx, a, b, f, (br_colsum_term)-1, out, rows, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "a is a f16", br_colsum(ctx, half, b, f, AB, out, rows, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "b is a f16", br_colsum(ctx, a, half, f, AB, out, rows, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "out holds", br_colsum(ctx, a, b, f, AB, small, rows, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "f holds", br_colsum(ctx, a, b, short_f, ABF, out, rows, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "a holds", br_colsum(ctx, small, b, f, AB, out, rows, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "rows is 0", br_colsum(ctx, a, b, f, AB, out, 0, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "k is 0", br_colsum(ctx, a, b, f, AB, out, rows, 0, 0));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "rows·k",
                    br_colsum(ctx, a, b, f, AB, out, (size_t)1 << 20, (size_t)1 << 12, 0));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "rows",
                    br_colsum(ctx, a, b, f, AB, out, (size_t)1 << 40, 1, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context",
                    br_colsum(ctx, foreign, b, f, AB, out, rows, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context",
                    br_colsum(ctx, a, b, foreign, ABF, out, rows, k, 0));

    br_buf_free(a);
    br_buf_free(b);
    br_buf_free(f);
    br_buf_free(out);
    br_buf_free(half);
    br_buf_free(small);
    br_buf_free(short_f);
    br_buf_free(foreign);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

static void colsum_fused_bad_arguments(void) {
    br_ctx *ctx = t_ctx(), *other = t_cpu_ctx();
    size_t rows = 100, k = 6, n = rows * k, n_staged = br_pad_rows(rows) * k;
    size_t n_t = br_pad_rows(k) * br_pad_tokens(rows);
    br_buf *a = t_buf_poison(ctx, BR_F32, n, 0), *b = t_buf_poison(ctx, BR_F32, n, 0);
    br_buf *sum = t_buf_poison(ctx, BR_F32, k, 0), *col = t_buf_poison(ctx, BR_F32, k, 0);
    br_buf *small_sum = t_buf_poison(ctx, BR_F32, k - 1, 0);
    br_buf *staged = t_buf_poison(ctx, BR_F16, n_staged, 0);
    br_buf *staged_short = t_buf_poison(ctx, BR_F16, n, 0); /* no pad rows */
    br_buf *dst32 = t_buf_poison(ctx, BR_F32, n_staged, 0);
    br_buf *dst_t = t_buf_poison(ctx, BR_F16, n_t, 0),
           *dst_t_short = t_buf_poison(ctx, BR_F16, n_t - 1, 0);
    br_buf *foreign = t_buf_poison(other, BR_F32, n, 0);
    br_fuse cvt = {.kind = BR_FUSE_CVT_A, .col = col, .dst = staged, .scale = 1.0f};
    br_fuse scl = {.kind = BR_FUSE_SCALE_B, .col = col, .dst = dst32, .t_scale = 1.0f};
    br_fuse bad;

    CHECK(br_colsum_fused(NULL, a, b, sum, rows, k, &cvt) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "fuse is NULL", br_colsum_fused(ctx, a, b, sum, rows, k, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "a is NULL", br_colsum_fused(ctx, NULL, b, sum, rows, k, &cvt));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "b is NULL", br_colsum_fused(ctx, a, NULL, sum, rows, k, &cvt));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "sum is NULL", br_colsum_fused(ctx, a, b, NULL, rows, k, &cvt));
    bad = cvt, bad.kind = (br_fuse_kind)3;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "fuse->kind", br_colsum_fused(ctx, a, b, sum, rows, k, &bad));
    bad = cvt, bad.col = NULL;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "fuse->col is NULL",
                    br_colsum_fused(ctx, a, b, sum, rows, k, &bad));
    bad = cvt, bad.dst = NULL;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "fuse->dst is NULL",
                    br_colsum_fused(ctx, a, b, sum, rows, k, &bad));
    bad = cvt, bad.dst = dst32;
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "fuse->dst is a f32",
                    br_colsum_fused(ctx, a, b, sum, rows, k, &bad));
    bad = scl, bad.dst = staged;
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "fuse->dst is a f16",
                    br_colsum_fused(ctx, a, b, sum, rows, k, &bad));
    bad = cvt, bad.dst = staged_short; /* the staging needs its pad rows */
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "fuse->dst holds",
                    br_colsum_fused(ctx, a, b, sum, rows, k, &bad));
    bad = cvt, bad.dst_t = dst_t_short;
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "fuse->dst_t holds",
                    br_colsum_fused(ctx, a, b, sum, rows, k, &bad));
    bad = scl, bad.dst_t = dst32;
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "fuse->dst_t is a f32",
                    br_colsum_fused(ctx, a, b, sum, rows, k, &bad));
    bad = cvt, bad.scale = NAN;
    CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "fuse->scale",
                    br_colsum_fused(ctx, a, b, sum, rows, k, &bad));
    bad = scl, bad.dst_t = dst_t, bad.t_scale = INFINITY;
    CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "fuse->t_scale",
                    br_colsum_fused(ctx, a, b, sum, rows, k, &bad));
    bad = scl, bad.t_scale = INFINITY, bad.scale = NAN; /* both unused here */
    CHECK_OK(ctx, br_colsum_fused(ctx, a, b, sum, rows, k, &bad));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "sum holds",
                    br_colsum_fused(ctx, a, b, small_sum, rows, k, &scl));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "rows is 0", br_colsum_fused(ctx, a, b, sum, 0, k, &cvt));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "k is 0", br_colsum_fused(ctx, a, b, sum, rows, 0, &cvt));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "rows·k",
                    br_colsum_fused(ctx, a, b, sum, (size_t)1 << 16, (size_t)1 << 16, &cvt));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "br_pad_rows(rows)·k",
                    br_colsum_fused(ctx, a, b, sum, 1, (size_t)1 << 30, &cvt));
    bad = scl, bad.dst_t = dst_t;
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "br_pad_rows(k)·br_pad_tokens(rows)",
                    br_colsum_fused(ctx, a, b, sum, (size_t)1 << 26, 16, &bad));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context",
                    br_colsum_fused(ctx, a, foreign, sum, rows, k, &cvt));
    bad = scl, bad.dst = foreign;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context",
                    br_colsum_fused(ctx, a, b, sum, rows, k, &bad));

    /* outputs sharing memory with another operand (the fused pass writes them while it
     * still reads the inputs); adjacent views are fine */
    {
        br_buf *pool32 = t_buf_poison(ctx, BR_F32, n + k, 0), *p_dst, *p_col, *p_col_next;
        br_buf *pool16 = t_buf_poison(ctx, BR_F16, n_staged + n_t, 0), *p_st, *p_t;
        br_buf *sum_in_a, *sum_in_dst;
        CHECK_OK(ctx, br_buf_view(pool32, 0, n, &p_dst));
        CHECK_OK(ctx, br_buf_view(pool32, n - 1, k, &p_col)); /* shares p_dst's last element */
        CHECK_OK(ctx, br_buf_view(pool32, n, k, &p_col_next));
        CHECK_OK(ctx, br_buf_view(pool16, 0, n_staged, &p_st));
        CHECK_OK(ctx, br_buf_view(pool16, n_staged - 1, n_t, &p_t));
        CHECK_OK(ctx, br_buf_view(a, n - k, k, &sum_in_a));
        CHECK_OK(ctx, br_buf_view(dst32, 5, k, &sum_in_dst));
        bad = scl, bad.dst = p_dst, bad.col = p_col;
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "fuse->dst overlaps fuse->col",
                        br_colsum_fused(ctx, a, b, sum, rows, k, &bad));
        bad.col = p_col_next;
        CHECK_OK(ctx, br_colsum_fused(ctx, a, b, sum, rows, k, &bad));
        bad = scl, bad.dst = b;
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "fuse->dst overlaps b",
                        br_colsum_fused(ctx, a, b, sum, rows, k, &bad));
        bad = scl, bad.dst = a, bad.dst_t = dst_t;
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "fuse->dst overlaps a",
                        br_colsum_fused(ctx, a, b, sum, rows, k, &bad));
        bad = cvt, bad.dst = p_st, bad.dst_t = p_t;
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "fuse->dst overlaps fuse->dst_t",
                        br_colsum_fused(ctx, a, b, sum, rows, k, &bad));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "sum overlaps a",
                        br_colsum_fused(ctx, a, b, sum_in_a, rows, k, &cvt));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "sum overlaps fuse->dst",
                        br_colsum_fused(ctx, a, b, sum_in_dst, rows, k, &scl));
        br_buf *views[] = {p_dst, p_col, p_col_next, p_st, p_t, sum_in_a, sum_in_dst};
        for (size_t i = 0; i < sizeof views / sizeof views[0]; i++)
            br_buf_free(views[i]);
        br_buf_free(pool32);
        br_buf_free(pool16);
    }

    br_buf_free(a);
    br_buf_free(b);
    br_buf_free(sum);
    br_buf_free(small_sum);
    br_buf_free(col);
    br_buf_free(staged);
    br_buf_free(staged_short);
    br_buf_free(dst32);
    br_buf_free(dst_t);
    br_buf_free(dst_t_short);
    br_buf_free(foreign);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

T_RUN("reduce", T_CASE(colsum_matches_block_order), T_CASE(colsum_ignores_unused_operands),
      T_CASE(colsum_on_views), T_CASE(colsum_fused_matches_separate_ops), T_CASE(colsum_in_a_graph),
      T_CASE(colsum_counts_and_workspace), T_CASE(colsum_bad_arguments),
      T_CASE(colsum_fused_bad_arguments))
