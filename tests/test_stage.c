/* Staging ops (cvt, cvt_multi, cvt_cols, cvt_t, expand) against a scalar C
 * reference of the exact arithmetic, bit for bit, on fresh random data whose
 * magnitudes reach the f16 subnormals and overflow; outputs poisoned first. */
#include "harness.h"

/* n floats with random signs and magnitudes spread over 2^-30 .. 2^17: staged at
 * scale ~1 they cover f16 zeros, subnormals, normals and overflow to Inf. */
static float *stage_data(br_rng *r, size_t n) {
    float *v = t_xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        float mant = br_rng_sym(r);
        if (mant == 0.0f) mant = 0.5f;
        v[i] = ldexpf(mant, (int)t_rand_size(r, 0, 47) - 30);
    }
    return v;
}

/* Column factors: mostly near 1, some powers of two. */
static float *col_data(br_rng *r, size_t n) {
    float *v = t_xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (i % 5 == 0) ? ldexpf(1.0f, (int)t_rand_size(r, 0, 8) - 4)
                            : 0.25f + 1.5f * (float)br_rng_unit(r);
    return v;
}

static float rand_scale(br_rng *r) {
    switch (br_rng_u64(r) % 4) {
    case 0: return 1.0f;
    case 1: return ldexpf(1.0f, (int)t_rand_size(r, 0, 12) - 6);
    default: return 0.1f + 3.0f * (float)br_rng_unit(r);
    }
}

/* Every 4th element of src [rows][k] moved next to an f16 rounding tie: the
 * staged product (with the column factor for every other one of them, without
 * for the rest) lands within a few f32 ulps of a midpoint between two f16
 * values, so the f16 result hinges on the exact f32 arithmetic (the product
 * order, one rounding per product, ties to even). */
static void aim_at_ties(br_rng *r, float *src, size_t rows, size_t k, const float *col,
                        float scale) {
    for (size_t i = 0; i < rows * k; i += 4) {
        /* midpoint of two adjacent f16 normals: 11 significant bits plus one */
        double mid = ldexp(1.0 + (2.0 * (double)t_rand_size(r, 0, 1023) + 1.0) / 2048.0,
                           (int)t_rand_size(r, 0, 29) - 14);
        if (br_rng_u64(r) & 1) mid = -mid;
        double f = (double)scale * (col && i % 8 == 0 ? (double)col[i % k] : 1.0);
        src[i] = (float)(mid / f);
    }
}

/* The contract's arithmetic: f16((x·col)·scale), each product rounded to f32. */
static uint16_t ref_stage(float x, const float *col, size_t c, float scale) {
    if (!col) return br_half_from_float(x * scale);
    float xc = x * col[c];
    return br_half_from_float(xc * scale);
}

/* dst [pad_rows(m)][k] as br_cvt writes it, from src rows ld apart starting at col0. */
static uint16_t *ref_cvt(const float *src, size_t ld, size_t col0, const float *col, size_t m,
                         size_t k, float scale) {
    size_t mpad = br_pad_rows(m);
    uint16_t *d = t_xmalloc(mpad * k * sizeof *d);
    for (size_t i = 0; i < mpad; i++)
        for (size_t c = 0; c < k; c++)
            d[i * k + c] = i < m ? ref_stage(src[i * ld + col0 + c], col, c, scale) : 0;
    return d;
}

/* Downloads `n + extra` elements of dst; the first n must equal ref bit for bit and
 * the `extra` elements past them must still hold the poison. */
static void check_staged(br_ctx *ctx, const br_buf *dst, const uint16_t *ref, size_t n,
                         size_t extra, const char *what, size_t m, size_t k) {
    uint16_t *got = t_download_f16(ctx, dst, n + extra);
    size_t bad = t_bits_differ16(got, ref, n);
    size_t i = t_first_diff16(got, ref, n);
    CHECK(bad == 0,
          "%s m=%zu k=%zu: %zu of %zu elements differ (first at %zu: 0x%04x, want 0x%04x)", what, m,
          k, bad, n, i, i < n ? got[i] : 0, i < n ? ref[i] : 0);
    for (size_t j = n; j < n + extra; j++)
        CHECK(got[j] == T_NAN16, "%s m=%zu k=%zu: element %zu past the output was written", what, m,
              k, j);
    free(got);
}

/* Awkward shapes first (1 row, one past a multiple of 128, odd k), then random. */
static void pick_shape(br_rng *r, int i, size_t *m, size_t *k) {
    /* the last one is large enough for the CPU backend's threads */
    static const size_t fixed[][2] = {{1, 1},    {1, 37},   {129, 1},  {128, 64},
                                      {127, 33}, {70, 200}, {260, 300}};
    t_pick_shape2(r, fixed, sizeof fixed / sizeof fixed[0], (size_t)i, 1, 300, 1, 300, m, k);
}

static void cvt_matches_reference(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(1);
    for (int i = 0; i < 14; i++) {
        size_t m, k;
        pick_shape(&r, i, &m, &k);
        size_t n = br_pad_rows(m) * k, extra = 7;
        float *src = stage_data(&r, m * k), *col = col_data(&r, k);
        float scale = rand_scale(&r);
        aim_at_ties(&r, src, m, k, col, scale);
        br_buf *bsrc = t_buf_from(ctx, BR_F32, src, m * k);
        br_buf *bcol = t_buf_from(ctx, BR_F32, col, k);
        for (int with_col = 0; with_col < 2; with_col++) {
            br_buf *dst = t_buf_poison(ctx, BR_F16, n + extra, T_NAN16);
            const float *c = with_col ? col : NULL;
            CHECK_OK(ctx, br_cvt(ctx, bsrc, with_col ? bcol : NULL, dst, m, k, scale));
            uint16_t *ref = ref_cvt(src, k, 0, c, m, k, scale);
            check_staged(ctx, dst, ref, n, extra, with_col ? "cvt col" : "cvt", m, k);
            free(ref);
            br_buf_free(dst);
        }
        br_buf_free(bsrc);
        br_buf_free(bcol);
        free(src);
        free(col);
    }
    br_ctx_free(ctx);
}

/* Sources and outputs that are views into larger buffers (nonzero offsets). */
static void cvt_on_views(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(2);
    size_t m = 45, k = 19, off_src = 13, off_dst = 5, n = br_pad_rows(m) * k;
    float *src = stage_data(&r, m * k + off_src), *col = col_data(&r, k + 3);
    br_buf *big_src = t_buf_from(ctx, BR_F32, src, m * k + off_src);
    br_buf *big_col = t_buf_from(ctx, BR_F32, col, k + 3);
    br_buf *big_dst = t_buf_poison(ctx, BR_F16, n + off_dst + 4, T_NAN16);
    br_buf *vsrc, *vcol, *vdst;
    CHECK_OK(ctx, br_buf_view(big_src, off_src, m * k, &vsrc));
    CHECK_OK(ctx, br_buf_view(big_col, 3, k, &vcol));
    CHECK_OK(ctx, br_buf_view(big_dst, off_dst, n, &vdst));
    CHECK_OK(ctx, br_cvt(ctx, vsrc, vcol, vdst, m, k, 0.75f));
    uint16_t *ref = ref_cvt(src + off_src, k, 0, col + 3, m, k, 0.75f);
    uint16_t *got = t_download_f16(ctx, big_dst, n + off_dst + 4);
    for (size_t i = 0; i < off_dst; i++)
        CHECK(got[i] == T_NAN16, "element %zu before the view", i);
    CHECK(t_bits_differ16(got + off_dst, ref, n) == 0, "cvt through views differs");
    for (size_t i = n + off_dst; i < n + off_dst + 4; i++)
        CHECK(got[i] == T_NAN16, "element %zu after the view was written", i);
    free(got);
    free(ref);
    free(src);
    free(col);
    br_buf_free(vsrc);
    br_buf_free(vcol);
    br_buf_free(vdst);
    br_buf_free(big_src);
    br_buf_free(big_col);
    br_buf_free(big_dst);
    br_ctx_free(ctx);
}

static void cvt_multi_matches_cvt(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(3);
    for (int i = 0; i < 10; i++) {
        size_t m, k;
        pick_shape(&r, i, &m, &k);
        size_t n = br_pad_rows(m) * k, n_out = 1 + (size_t)i % 4;
        float *src = stage_data(&r, m * k);
        float scale = rand_scale(&r);
        br_buf *bsrc = t_buf_from(ctx, BR_F32, src, m * k);
        float *col[4];
        const br_buf *cols[4];
        br_buf *colbuf[4], *dsts[4], *singles[4];
        /* every third case passes no column array; otherwise entry 1 has no factor */
        int no_cols = i % 3 == 2;
        for (size_t j = 0; j < 4; j++) {
            col[j] = col_data(&r, k);
            colbuf[j] = (no_cols || j == 1) ? NULL : t_buf_from(ctx, BR_F32, col[j], k);
            cols[j] = colbuf[j];
            dsts[j] = t_buf_poison(ctx, BR_F16, n + 3, T_NAN16);
            singles[j] = t_buf_poison(ctx, BR_F16, n, T_NAN16);
        }
        aim_at_ties(&r, src, m, k, col[0], scale);
        CHECK_OK(ctx, br_buf_upload(bsrc, 0, src, m * k));
        CHECK_OK(ctx, br_cvt_multi(ctx, bsrc, n_out, no_cols ? NULL : cols, dsts, m, k, scale));
        for (size_t j = 0; j < 4; j++) {
            const br_buf *c = no_cols ? NULL : cols[j];
            if (j < n_out) {
                CHECK_OK(ctx, br_cvt(ctx, bsrc, c, singles[j], m, k, scale));
                uint16_t *one = t_download_f16(ctx, singles[j], n);
                check_staged(ctx, dsts[j], one, n, 3, "cvt_multi vs cvt", m, k);
                uint16_t *ref = ref_cvt(src, k, 0, c ? col[j] : NULL, m, k, scale);
                CHECK(t_bits_differ16(one, ref, n) == 0, "cvt differs from the reference");
                free(ref);
                free(one);
            } else { /* outputs past n_out are not touched */
                uint16_t *got = t_download_f16(ctx, dsts[j], n + 3);
                size_t touched = t_count_written16(got, n + 3);
                CHECK(touched == 0, "cvt_multi n_out=%zu wrote dsts[%zu]", n_out, j);
                free(got);
            }
        }
        for (size_t j = 0; j < 4; j++) {
            br_buf_free(colbuf[j]);
            br_buf_free(dsts[j]);
            br_buf_free(singles[j]);
            free(col[j]);
        }
        br_buf_free(bsrc);
        free(src);
    }
    br_ctx_free(ctx);
}

static void cvt_cols_matches_reference(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(4);
    for (int i = 0; i < 12; i++) {
        size_t m, k;
        pick_shape(&r, i, &m, &k);
        /* the block at the start, at the very end, or anywhere */
        size_t ld = k + t_rand_size(&r, 0, 90);
        size_t col0 = i % 3 == 0 ? 0 : i % 3 == 1 ? ld - k : t_rand_size(&r, 0, ld - k);
        size_t n = br_pad_rows(m) * k;
        float *src = stage_data(&r, m * ld);
        float scale = rand_scale(&r);
        aim_at_ties(&r, src, m, ld, NULL, scale);
        br_buf *bsrc = t_buf_from(ctx, BR_F32, src, m * ld);
        br_buf *dst = t_buf_poison(ctx, BR_F16, n + 5, T_NAN16);
        CHECK_OK(ctx, br_cvt_cols(ctx, bsrc, ld, col0, dst, m, k, scale));
        uint16_t *ref = ref_cvt(src, ld, col0, NULL, m, k, scale);
        check_staged(ctx, dst, ref, n, 5, "cvt_cols", m, k);
        free(ref);
        free(src);
        br_buf_free(bsrc);
        br_buf_free(dst);
    }
    br_ctx_free(ctx);
}

/* cvt_t is cvt transposed, bit for bit, every pad zero. */
static void cvt_t_is_cvt_transposed(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(5);
    for (int i = 0; i < 12; i++) {
        size_t ntok, k;
        if (i == 0) {
            ntok = 70;
            k = 200;
        } else {
            pick_shape(&r, i, &ntok, &k);
        }
        size_t tpad = br_pad_tokens(ntok), kpad = br_pad_rows(k), n = kpad * tpad;
        float *src = stage_data(&r, ntok * k), *col = col_data(&r, k);
        float scale = rand_scale(&r);
        aim_at_ties(&r, src, ntok, k, col, scale);
        br_buf *bsrc = t_buf_from(ctx, BR_F32, src, ntok * k);
        br_buf *bcol = t_buf_from(ctx, BR_F32, col, k);
        for (int with_col = 0; with_col < 2; with_col++) {
            const br_buf *c = with_col ? bcol : NULL;
            br_buf *staged = t_buf_poison(ctx, BR_F16, br_pad_rows(ntok) * k, T_NAN16);
            br_buf *dst = t_buf_poison(ctx, BR_F16, n + 6, T_NAN16);
            CHECK_OK(ctx, br_cvt(ctx, bsrc, c, staged, ntok, k, scale));
            CHECK_OK(ctx, br_cvt_t(ctx, bsrc, c, dst, ntok, k, scale));
            uint16_t *s = t_download_f16(ctx, staged, ntok * k);
            uint16_t *want = t_xmalloc(n * sizeof *want);
            for (size_t row = 0; row < kpad; row++)
                for (size_t t = 0; t < tpad; t++)
                    want[row * tpad + t] = (row < k && t < ntok) ? s[t * k + row] : 0;
            check_staged(ctx, dst, want, n, 6, with_col ? "cvt_t col" : "cvt_t", ntok, k);
            /* and the staged values themselves are the reference's */
            uint16_t *ref = ref_cvt(src, k, 0, with_col ? col : NULL, ntok, k, scale);
            CHECK(t_bits_differ16(s, ref, ntok * k) == 0, "cvt differs from the reference");
            free(ref);
            free(want);
            free(s);
            br_buf_free(staged);
            br_buf_free(dst);
        }
        br_buf_free(bsrc);
        br_buf_free(bcol);
        free(src);
        free(col);
    }
    br_ctx_free(ctx);
}

static void expand_matches_bits(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(6);
    static const size_t fixed[][2] = {{1, 1}, {1, 32}, {3, 33}, {64, 128}, {130, 70}, {300, 250}};
    for (int i = 0; i < 12; i++) {
        size_t rows, rk;
        t_pick_shape2(&r, fixed, sizeof fixed / sizeof fixed[0], (size_t)i, 1, 200, 1, 200, &rows,
                      &rk);
        size_t words = (rk + 31) / 32, n = rows * rk;
        /* every bit random, including the unused high bits of each row's last word */
        uint32_t *bits = t_xmalloc(rows * words * sizeof *bits);
        for (size_t j = 0; j < rows * words; j++)
            bits[j] = (uint32_t)br_rng_u64(&r);
        br_buf *bbits = t_buf_from(ctx, BR_U32, bits, rows * words);
        uint16_t *want = t_xmalloc(n * sizeof *want), *want_t = t_xmalloc(n * sizeof *want_t);
        for (size_t row = 0; row < rows; row++)
            for (size_t j = 0; j < rk; j++) {
                int plus = (bits[row * words + j / 32] >> (j % 32)) & 1u;
                want[row * rk + j] = want_t[j * rows + row] = plus ? 0x3C00 : 0xBC00;
            }
        for (int which = 0; which < 3; which++) { /* both, plane only, plane_t only */
            br_buf *plane = which != 2 ? t_buf_poison(ctx, BR_F16, n + 2, T_NAN16) : NULL;
            br_buf *plane_t = which != 1 ? t_buf_poison(ctx, BR_F16, n + 2, T_NAN16) : NULL;
            CHECK_OK(ctx, br_expand(ctx, bbits, rows, rk, plane, plane_t));
            if (plane) check_staged(ctx, plane, want, n, 2, "expand plane", rows, rk);
            if (plane_t) check_staged(ctx, plane_t, want_t, n, 2, "expand plane_t", rows, rk);
            br_buf_free(plane);
            br_buf_free(plane_t);
        }
        br_buf_free(bbits);
        free(bits);
        free(want);
        free(want_t);
    }
    br_ctx_free(ctx);
}

/* Every class of bad argument of the cvt family: NULL, dtype, size, shape,
 * overflow, another context, non-finite scale. Nothing is written on failure. */
static void cvt_bad_arguments(void) {
    br_ctx *ctx = t_ctx(), *other = t_cpu_ctx();
    size_t m = 5, k = 7, n = br_pad_rows(m) * k;
    br_rng r = t_rng_for(7);
    float *data = t_rand(&r, m * k, 1.0f);
    br_buf *src = t_buf_from(ctx, BR_F32, data, m * k);
    br_buf *col = t_buf_from(ctx, BR_F32, data, k);
    br_buf *dst = t_buf_poison(ctx, BR_F16, n, T_NAN16);
    br_buf *src16 = t_buf_poison(ctx, BR_F16, m * k, 0);
    br_buf *dst32 = t_buf_poison(ctx, BR_F32, n, 0);
    br_buf *short_src = t_buf_poison(ctx, BR_F32, m * k - 1, 0);
    br_buf *short_col = t_buf_poison(ctx, BR_F32, k - 1, 0);
    br_buf *unpadded_dst = t_buf_poison(ctx, BR_F16, m * k, 0);
    br_buf *foreign = t_buf_from(other, BR_F32, data, m * k);

    CHECK(br_cvt(NULL, src, col, dst, m, k, 1.0f) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "br_cvt: src", br_cvt(ctx, NULL, col, dst, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "br_cvt: dst", br_cvt(ctx, src, col, NULL, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "src", br_cvt(ctx, src16, col, dst, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "dst", br_cvt(ctx, src, col, dst32, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "col_f", br_cvt(ctx, src, dst, dst, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "src", br_cvt(ctx, short_src, col, dst, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "col_f", br_cvt(ctx, src, short_col, dst, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "dst", br_cvt(ctx, src, col, unpadded_dst, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "m is 0", br_cvt(ctx, src, col, dst, 0, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "k is 0", br_cvt(ctx, src, col, dst, m, 0, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "m·k",
                    br_cvt(ctx, src, col, dst, (size_t)1 << 20, (size_t)1 << 20, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "m =", br_cvt(ctx, src, col, dst, SIZE_MAX, 1, 1.0f));
    /* m·k fits, the padded row count does not */
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "br_pad_rows",
                    br_cvt(ctx, src, col, dst, (size_t)INT32_MAX - 5, 1, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context", br_cvt(ctx, foreign, col, dst, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "scale", br_cvt(ctx, src, col, dst, m, k, NAN));
    CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "scale", br_cvt(ctx, src, NULL, dst, m, k, INFINITY));

    /* cvt_multi */
    br_buf *dst2 = t_buf_poison(ctx, BR_F16, 2 * n, T_NAN16);
    br_buf *half_a, *half_b, *shifted;
    CHECK_OK(ctx, br_buf_view(dst2, 0, n, &half_a));
    CHECK_OK(ctx, br_buf_view(dst2, n, n, &half_b));
    CHECK_OK(ctx, br_buf_view(dst2, n / 2, n, &shifted));
    const br_buf *cols[4] = {col, NULL, col, col};
    br_buf *dsts[4] = {dst, half_a, half_b, NULL};
    CHECK(br_cvt_multi(NULL, src, 1, cols, dsts, m, k, 1.0f) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "n_out is 0", br_cvt_multi(ctx, src, 0, cols, dsts, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "n_out is 5", br_cvt_multi(ctx, src, 5, cols, dsts, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "dsts is NULL",
                    br_cvt_multi(ctx, src, 2, cols, NULL, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "dsts[3]", br_cvt_multi(ctx, src, 4, cols, dsts, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "br_cvt_multi: src",
                    br_cvt_multi(ctx, NULL, 2, cols, dsts, m, k, 1.0f));
    br_buf *bad_dsts[2] = {dst, dst32};
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "dsts[1]",
                    br_cvt_multi(ctx, src, 2, cols, bad_dsts, m, k, 1.0f));
    const br_buf *bad_cols[2] = {col, short_col};
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "cols[1]",
                    br_cvt_multi(ctx, src, 2, bad_cols, dsts, m, k, 1.0f));
    br_buf *small_dsts[2] = {dst, unpadded_dst};
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "dsts[1]",
                    br_cvt_multi(ctx, src, 2, cols, small_dsts, m, k, 1.0f));
    br_buf *same[2] = {dst, dst};
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps", br_cvt_multi(ctx, src, 2, NULL, same, m, k, 1.0f));
    br_buf *overlapping[3] = {dst, half_a, shifted};
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "dsts[2] overlaps dsts[1]",
                    br_cvt_multi(ctx, src, 3, NULL, overlapping, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "k is 0", br_cvt_multi(ctx, src, 2, cols, dsts, m, 0, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "m·k",
                    br_cvt_multi(ctx, src, 2, cols, dsts, (size_t)1 << 30, 64, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context",
                    br_cvt_multi(ctx, foreign, 2, cols, dsts, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "scale",
                    br_cvt_multi(ctx, src, 2, cols, dsts, m, k, -INFINITY));
    /* two adjacent, disjoint views are fine */
    br_buf *adjacent[2] = {half_a, half_b};
    CHECK_OK(ctx, br_cvt_multi(ctx, src, 2, NULL, adjacent, m, k, 1.0f));

    /* cvt_cols: src is [m][ld_src] */
    CHECK(br_cvt_cols(NULL, src, k, 0, dst, m, k, 1.0f) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "br_cvt_cols: src",
                    br_cvt_cols(ctx, NULL, k, 0, dst, m, 3, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "exceed ld_src", br_cvt_cols(ctx, src, k, 5, dst, m, 3, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "exceed ld_src",
                    br_cvt_cols(ctx, src, k, SIZE_MAX, dst, m, 3, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "ld_src is 0", br_cvt_cols(ctx, src, 0, 0, dst, m, 3, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "src", br_cvt_cols(ctx, src, k + 1, 0, dst, m, 3, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "dst", br_cvt_cols(ctx, src, k, 0, dst32, m, 3, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "dst", br_cvt_cols(ctx, src, k, 0, unpadded_dst, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "m·ld_src",
                    br_cvt_cols(ctx, src, (size_t)1 << 30, 0, dst, 64, 3, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context",
                    br_cvt_cols(ctx, foreign, k, 0, dst, m, 3, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "scale", br_cvt_cols(ctx, src, k, 0, dst, m, 3, NAN));

    /* cvt_t: dst is [pad_rows(k)][pad_tokens(ntok)] = [128][32] here */
    br_buf *tdst = t_buf_poison(ctx, BR_F16, br_pad_rows(k) * br_pad_tokens(m), T_NAN16);
    CHECK(br_cvt_t(NULL, src, col, tdst, m, k, 1.0f) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "br_cvt_t: src", br_cvt_t(ctx, NULL, col, tdst, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "br_cvt_t: dst", br_cvt_t(ctx, src, col, NULL, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "dst", br_cvt_t(ctx, src, col, dst32, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "dst", br_cvt_t(ctx, src, col, unpadded_dst, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "col_f", br_cvt_t(ctx, src, short_col, tdst, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "ntok is 0", br_cvt_t(ctx, src, col, tdst, 0, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "ntok·k",
                    br_cvt_t(ctx, src, col, tdst, (size_t)1 << 16, (size_t)1 << 16, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "br_pad_rows(k)·br_pad_tokens(ntok)",
                    br_cvt_t(ctx, src, NULL, tdst, 1, (size_t)1 << 26, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context",
                    br_cvt_t(ctx, foreign, col, tdst, m, k, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "scale", br_cvt_t(ctx, src, col, tdst, m, k, INFINITY));

    /* dst of the failed calls above was never written */
    uint16_t *d = t_download_f16(ctx, dst, n);
    size_t written = t_count_written16(d, n);
    CHECK(written == 0, "a failed call wrote %zu elements of dst", written);
    free(d);

    br_buf *bufs[] = {src,          col,    dst,    src16,   dst32, short_src, short_col,
                      unpadded_dst, half_a, half_b, shifted, dst2,  tdst};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        br_buf_free(bufs[i]);
    br_buf_free(foreign);
    free(data);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

static void expand_bad_arguments(void) {
    br_ctx *ctx = t_ctx(), *other = t_cpu_ctx();
    size_t rows = 9, rk = 40, words = 2, n = rows * rk;
    br_buf *bits = t_buf_poison(ctx, BR_U32, rows * words, 0x5a5a5a5au);
    br_buf *plane = t_buf_poison(ctx, BR_F16, n, T_NAN16);
    br_buf *plane_t = t_buf_poison(ctx, BR_F16, n, T_NAN16);
    br_buf *bits32 = t_buf_poison(ctx, BR_F32, rows * words, 0);
    br_buf *short_bits = t_buf_poison(ctx, BR_U32, rows * words - 1, 0);
    br_buf *short_plane = t_buf_poison(ctx, BR_F16, n - 1, 0);
    br_buf *plane32 = t_buf_poison(ctx, BR_F32, n, 0);
    br_buf *both = t_buf_poison(ctx, BR_F16, 2 * n, 0), *lo, *hi;
    CHECK_OK(ctx, br_buf_view(both, 0, n, &lo));
    CHECK_OK(ctx, br_buf_view(both, n - 1, n + 1, &hi));
    br_buf *foreign = t_buf_poison(other, BR_U32, rows * words, 0);

    CHECK(br_expand(NULL, bits, rows, rk, plane, plane_t) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "both NULL", br_expand(ctx, bits, rows, rk, NULL, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "bits is NULL", br_expand(ctx, NULL, rows, rk, plane, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "bits", br_expand(ctx, bits32, rows, rk, plane, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "plane", br_expand(ctx, bits, rows, rk, plane32, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "bits", br_expand(ctx, short_bits, rows, rk, plane, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "plane_t", br_expand(ctx, bits, rows, rk, plane, short_plane));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "r is 0", br_expand(ctx, bits, rows, 0, plane, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "rows is 0", br_expand(ctx, bits, 0, rk, plane, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "rows·r",
                    br_expand(ctx, bits, (size_t)1 << 20, (size_t)1 << 12, plane, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context",
                    br_expand(ctx, foreign, rows, rk, plane, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlap", br_expand(ctx, bits, rows, rk, lo, hi));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlap", br_expand(ctx, bits, rows, rk, plane, plane));
    uint16_t *p = t_download_f16(ctx, plane, n);
    size_t written = t_count_written16(p, n);
    CHECK(written == 0, "a failed expand wrote %zu elements", written);
    free(p);

    br_buf *bufs[] = {bits, plane, plane_t, bits32, short_bits, short_plane, plane32, lo, hi, both};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        br_buf_free(bufs[i]);
    br_buf_free(foreign);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

T_RUN("stage", T_CASE(cvt_matches_reference), T_CASE(cvt_on_views), T_CASE(cvt_multi_matches_cvt),
      T_CASE(cvt_cols_matches_reference), T_CASE(cvt_t_is_cvt_transposed),
      T_CASE(expand_matches_bits), T_CASE(cvt_bad_arguments), T_CASE(expand_bad_arguments))
