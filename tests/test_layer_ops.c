/* The reformulated layer's internal ops (ops/layer_ops.h): expand_scaled,
 * sign_rowdot and cvt_both on the device under test, each against a scalar C
 * reference of the exact arithmetic (bit for bit) and an f64 sanity bound, on
 * random inputs and shapes (1 row, sizes that are multiples of nothing, the
 * layer's own), outputs poisoned first, buffers at aligned and odd offsets (the
 * kernels' vector and scalar paths); cvt_both also against br_cvt_pad and
 * br_cvt_t; then every class of bad argument. BITRANK_TEST_QUICK=1 (the
 * compute-sanitizer runs) leaves out the shapes over 2^18 elements. */
#include "harness.h"
#include "ops/layer_ops.h"
#include "ops/sign_ops.h"

/* n elements at element offset `off` of a fresh allocation (poisoned with bits);
 * *parent receives the allocation (free it after the view). */
static br_buf *view_at(br_ctx *ctx, br_dtype dt, size_t n, size_t off, uint32_t bits,
                       br_buf **parent) {
    *parent = t_buf_poison(ctx, dt, n + off, bits);
    if (!off) return *parent;
    br_buf *v = NULL;
    if (br_buf_view(*parent, off, n, &v) != BR_OK) {
        fprintf(stderr, "view failed: %s\n", br_ctx_error(ctx));
        exit(1);
    }
    return v;
}
static void free_view(br_buf *v, br_buf *parent) {
    if (v != parent) br_buf_free(v);
    br_buf_free(parent);
}
static br_buf *input_at(br_ctx *ctx, br_dtype dt, const void *host, size_t n, size_t off,
                        br_buf **parent) {
    br_buf *v = view_at(ctx, dt, n, off, 0, parent);
    if (br_buf_upload(v, 0, host, n) != BR_OK) {
        fprintf(stderr, "upload failed: %s\n", br_ctx_error(ctx));
        exit(1);
    }
    return v;
}

static int too_big(size_t elems) {
    const char *q = getenv("BITRANK_TEST_QUICK");
    return q && strcmp(q, "1") == 0 && elems > ((size_t)1 << 18);
}

static uint32_t *rand_bits(br_rng *r, size_t n) {
    uint32_t *b = t_xmalloc(n * sizeof *b);
    for (size_t i = 0; i < n; i++)
        b[i] = (uint32_t)br_rng_u64(r);
    return b;
}

/* Values a few decades either way, either sign, never zero. */
static float *rand_wide(br_rng *r, size_t n) {
    float *v = t_xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        float x = ldexpf(0.5f + 0.5f * (float)br_rng_unit(r), (int)t_rand_size(r, 0, 12) - 6);
        v[i] = br_rng_u64(r) & 1 ? -x : x;
    }
    return v;
}

/* |f16 value − x| within f16's rounding of x (normal range, half an ulp of 2^-11
 * relative, or 2^-25 absolute among subnormals). */
static int f16_near(uint16_t h, double x) {
    double v = t_f16_value(h);
    return fabs(v - x) <= fabs(x) * 0x1p-11 + 0x1p-25;
}

/* ---------------------------------------------------------------- expand_scaled */

/* Both orientations (ten cases each): the transposed plane of path p's rows of a
 * [paths·r][ld] plane, and the bitmap-oriented plane of path p's columns of a
 * [rows][ld] plane, each through a view with every other element left poisoned;
 * every value bit-exact against f16(rowscale·scale) and near f64. */
static void expand_scaled_matches_reference(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(60);
    static const size_t fixed[][2] = {{1, 32}, {7, 64}, {3584, 384}, {1024, 384}, {129, 96}};
    for (size_t c = 0; c < 2 * (5 + 5); c++) {
        const int by_rows = c >= 10;
        size_t rows, r;
        t_pick_shape2(&rng, fixed, 5, c % 10, 1, 700, 1, 6, &rows, &r);
        if (c % 10 >= 5) r *= 32;
        size_t paths = t_rand_size(&rng, 1, 3), p = t_rand_size(&rng, 0, paths - 1);
        /* by rows: ld ≥ paths·r, path p at column p·r; else ld ≥ rows, path p at row p·r */
        size_t ld = by_rows ? paths * r + 8 * t_rand_size(&rng, 0, 2)
                            : (rows + 7) / 8 * 8 + 8 * t_rand_size(&rng, 0, 3);
        size_t total = by_rows ? rows * ld : paths * r * ld;
        size_t vo = by_rows ? p * r : p * r * ld, vn = by_rows ? (rows - 1) * ld + r : r * ld;
        if (too_big(total)) continue;
        size_t off = c % 2 ? 3 : 0, words = r / 32;
        float scale = c % 3 ? 1.0f : (float)(0.1 + 4 * br_rng_unit(&rng));
        uint32_t *bits = rand_bits(&rng, rows * words);
        float *rs = rand_wide(&rng, rows);
        br_buf *pb, *pr, *pp, *vp = NULL;
        br_buf *bb = input_at(ctx, BR_U32, bits, rows * words, off, &pb);
        br_buf *br = input_at(ctx, BR_F32, rs, rows, off, &pr);
        br_buf *plane = view_at(ctx, BR_F16, total, off, T_NAN16, &pp);
        CHECK(br_buf_view(plane, vo, vn, &vp) == BR_OK, "view of path %zu", p);
        if (by_rows)
            CHECK_OK(ctx, br_expand_scaled_rows(ctx, bb, rows, r, br, scale, vp, ld));
        else
            CHECK_OK(ctx, br_expand_scaled(ctx, bb, rows, r, br, scale, vp, ld));
        uint16_t *got = t_download_f16(ctx, plane, total);
        size_t bad = 0, far = 0, outside = 0;
        for (size_t e = 0; e < total; e++) {
            /* the (i, k) entry element e holds, if it is path p's; else pad or outside */
            size_t i, k, row = e / ld, col = e % ld;
            int mine;
            if (by_rows) {
                i = row, k = col - p * r;
                mine = col >= p * r && col < (p + 1) * r;
            } else {
                i = col, k = row - p * r;
                mine = row >= p * r && row < (p + 1) * r;
            }
            if (!mine) {
                outside += got[e] != T_NAN16;
                continue;
            }
            uint16_t want = 0; /* transposed: +0 in the pad columns i ≥ rows */
            if (i < rows) {
                int bit = bits[i * words + k / 32] >> (k % 32) & 1u;
                uint16_t mag = br_half_from_float(rs[i] * scale);
                want = bit ? mag : (uint16_t)(mag ^ 0x8000u);
                far += !f16_near(got[e], (bit ? 1.0 : -1.0) * (double)rs[i] * scale);
            }
            bad += got[e] != want;
        }
        const char *what = by_rows ? "expand_scaled_rows" : "expand_scaled";
        CHECK(bad == 0, "%s rows=%zu r=%zu ld=%zu off=%zu: %zu of %zu differ", what, rows, r, ld,
              off, bad, vn);
        CHECK(far == 0, "%s rows=%zu r=%zu: %zu values off f64", what, rows, r, far);
        CHECK(outside == 0, "%s rows=%zu r=%zu: %zu written outside path %zu", what, rows, r,
              outside, p);
        free(got), free(bits), free(rs);
        br_buf_free(vp);
        free_view(plane, pp), free_view(bb, pb), free_view(br, pr);
    }
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- sign_rowdot */

/* The contract's order: lanes k ≡ l (mod 32) from +0, then the halving tree. */
static float ref_rowdot(const float *m, const uint32_t *bits, size_t r) {
    float lane[32] = {0};
    for (size_t k = 0; k < r; k++) {
        float x = m[k], sx = bits[k / 32] >> (k % 32) & 1u ? x : -x;
        lane[k % 32] = lane[k % 32] + sx;
    }
    for (int s = 16; s >= 1; s >>= 1)
        for (int t = 0; t < s; t++)
            lane[t] = lane[t] + lane[t + s];
    return lane[0];
}

static void sign_rowdot_matches_reference(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(61);
    static const size_t fixed[][2] = {{1, 32}, {5, 96}, {3584, 384}, {1024, 384}, {77, 160}};
    for (size_t c = 0; c < 5 + 7; c++) {
        size_t rows, r;
        t_pick_shape2(&rng, fixed, 5, c, 1, 900, 1, 9, &rows, &r);
        if (c >= 5) r *= 32;
        if (too_big(rows * r)) continue;
        size_t paths = t_rand_size(&rng, 1, 3), col0 = r * t_rand_size(&rng, 0, paths - 1);
        size_t ldm = paths * r + t_rand_size(&rng, 0, 5), words = r / 32, n = rows * r;
        size_t off = c % 2 ? 3 : 0;
        int accumulate = (int)(c % 3 == 1),
            which = (int)(c % 4); /* 0,1: both, 2: no grad, 3: no dsum */
        float *mat = t_rand(&rng, rows * ldm, 1.0f), *rs = rand_wide(&rng, rows);
        float *g0 = t_rand(&rng, n, 1.0f), *d0 = t_rand(&rng, rows, 1.0f);
        uint32_t *bits = rand_bits(&rng, rows * words);
        br_buf *pm, *pb, *pr, *pg = NULL, *pd = NULL;
        br_buf *bm = input_at(ctx, BR_F32, mat, rows * ldm, off, &pm);
        br_buf *bb = input_at(ctx, BR_U32, bits, rows * words, off, &pb);
        br_buf *br = input_at(ctx, BR_F32, rs, rows, off, &pr);
        br_buf *bg = NULL, *bd = NULL;
        if (which != 2) {
            bg = accumulate ? input_at(ctx, BR_F32, g0, n, off, &pg)
                            : view_at(ctx, BR_F32, n, off, T_NAN32, &pg);
        }
        if (which != 3) bd = input_at(ctx, BR_F32, d0, rows, off, &pd);
        CHECK_OK(ctx, br_sign_rowdot(ctx, bm, ldm, col0, bb, br, bg, bd, rows, r, accumulate));
        size_t bad_g = 0, bad_d = 0, far_g = 0, far_d = 0;
        if (bg) {
            float *got = t_download_f32(ctx, bg, n);
            for (size_t i = 0; i < rows; i++)
                for (size_t k = 0; k < r; k++) {
                    float p = rs[i] * mat[i * ldm + col0 + k];
                    float want = accumulate ? g0[i * r + k] + p : p;
                    bad_g += memcmp(&got[i * r + k], &want, 4) != 0;
                    double w64 = (double)rs[i] * mat[i * ldm + col0 + k] +
                                 (accumulate ? (double)g0[i * r + k] : 0.0);
                    far_g += !(fabs(got[i * r + k] - w64) <= 1e-6 * (fabs(w64) + fabs(p)));
                }
            free(got);
        }
        if (bd) {
            float *got = t_download_f32(ctx, bd, rows);
            for (size_t i = 0; i < rows; i++) {
                const float *m = mat + i * ldm + col0;
                float want = d0[i] + ref_rowdot(m, bits + i * words, r);
                bad_d += memcmp(&got[i], &want, 4) != 0;
                double w64 = d0[i], mag = fabs(d0[i]);
                for (size_t k = 0; k < r; k++) {
                    w64 += (bits[i * words + k / 32] >> (k % 32) & 1u ? 1.0 : -1.0) * m[k];
                    mag += fabs(m[k]);
                }
                far_d += !(fabs(got[i] - w64) <= 1e-6 * mag);
            }
            free(got);
        }
        CHECK(bad_g == 0 && bad_d == 0,
              "sign_rowdot rows=%zu r=%zu ldm=%zu col0=%zu acc=%d which=%d off=%zu: %zu grad, "
              "%zu dsum differ",
              rows, r, ldm, col0, accumulate, which, off, bad_g, bad_d);
        CHECK(far_g == 0 && far_d == 0, "sign_rowdot rows=%zu r=%zu: %zu grad, %zu dsum off f64",
              rows, r, far_g, far_d);
        free(mat), free(rs), free(g0), free(d0), free(bits);
        free_view(bm, pm), free_view(bb, pb), free_view(br, pr);
        if (bg) free_view(bg, pg);
        if (bd) free_view(bd, pd);
    }
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- cvt_both */

static void cvt_both_matches_reference(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(62);
    static const size_t fixed[][2] = {{1, 1},      {1, 37},   {70, 200}, {4096, 1024},
                                      {300, 3584}, {129, 64}, {33, 8}};
    const size_t nfixed = sizeof fixed / sizeof fixed[0];
    for (size_t c = 0; c < nfixed + 6; c++) {
        size_t m, k;
        t_pick_shape2(&rng, fixed, nfixed, c, 1, 700, 1, 700, &m, &k);
        if (too_big(m * k)) continue;
        size_t ld = c % 3 == 2 ? k + t_rand_size(&rng, 1, 40) : k;
        size_t off = c % 4 == 3 ? 3 : 0, which = c % 5; /* 3: no dst_t, 4: no dst */
        size_t mpad = br_pad_rows(m), kpad = br_pad_rows(k), tpad = br_pad_tokens(m);
        size_t nd = mpad * ld, nt = kpad * tpad;
        float scale = c % 2 ? 1.0f : (float)(0.01 + 4 * br_rng_unit(&rng));
        float *src = t_rand(&rng, m * k, 3.0f), *col = rand_wide(&rng, k);
        int with_col = c % 3 != 1;
        br_buf *ps, *pc = NULL, *pd = NULL, *pt = NULL;
        br_buf *bs = input_at(ctx, BR_F32, src, m * k, off, &ps);
        br_buf *bc = with_col ? input_at(ctx, BR_F32, col, k, off, &pc) : NULL;
        br_buf *bd = which != 4 ? view_at(ctx, BR_F16, nd, off, T_NAN16, &pd) : NULL;
        br_buf *bt = which != 3 ? view_at(ctx, BR_F16, nt, off, T_NAN16, &pt) : NULL;
        CHECK_OK(ctx, br_cvt_both(ctx, bs, bc, bd, bt, m, k, ld, scale));
        /* the scalar reference, and the two separate ops */
        uint16_t *want = t_xmalloc(nd * sizeof *want), *want_t = t_xmalloc(nt * sizeof *want_t);
        memset(want, 0, nd * sizeof *want);
        memset(want_t, 0, nt * sizeof *want_t);
        size_t far = 0;
        for (size_t t = 0; t < m; t++)
            for (size_t j = 0; j < k; j++) {
                float x = src[t * k + j];
                uint16_t h = br_half_from_float((with_col ? x * col[j] : x) * scale);
                want[t * ld + j] = want_t[j * tpad + t] = h;
                far += !f16_near(h, (double)x * (with_col ? col[j] : 1.0) * scale);
            }
        CHECK(far == 0, "cvt_both reference: %zu values off f64", far);
        if (bd) {
            uint16_t *got = t_download_f16(ctx, bd, nd);
            br_buf *sep = t_buf_poison(ctx, BR_F16, nd, T_NAN16);
            CHECK_OK(ctx, br_cvt_pad(ctx, bs, bc, sep, m, k, ld, scale));
            uint16_t *got_sep = t_download_f16(ctx, sep, nd);
            CHECK(t_bits_differ16(got, want, nd) == 0,
                  "cvt_both dst m=%zu k=%zu ld=%zu col=%d off=%zu: %zu of %zu differ", m, k, ld,
                  with_col, off, t_bits_differ16(got, want, nd), nd);
            CHECK(t_bits_differ16(got, got_sep, nd) == 0, "cvt_both dst m=%zu k=%zu: ≠ cvt_pad", m,
                  k);
            free(got), free(got_sep);
            br_buf_free(sep);
        }
        if (bt) {
            uint16_t *got = t_download_f16(ctx, bt, nt);
            br_buf *sep = t_buf_poison(ctx, BR_F16, nt, T_NAN16);
            CHECK_OK(ctx, br_cvt_t(ctx, bs, bc, sep, m, k, scale));
            uint16_t *got_sep = t_download_f16(ctx, sep, nt);
            CHECK(t_bits_differ16(got, want_t, nt) == 0,
                  "cvt_both dst_t m=%zu k=%zu col=%d off=%zu: %zu of %zu differ", m, k, with_col,
                  off, t_bits_differ16(got, want_t, nt), nt);
            CHECK(t_bits_differ16(got, got_sep, nt) == 0, "cvt_both dst_t m=%zu k=%zu: ≠ cvt_t", m,
                  k);
            free(got), free(got_sep);
            br_buf_free(sep);
        }
        free(want), free(want_t), free(src), free(col);
        free_view(bs, ps);
        if (bc) free_view(bc, pc);
        if (bd) free_view(bd, pd);
        if (bt) free_view(bt, pt);
    }
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- bad arguments */

static void layer_ops_bad_arguments(void) {
    br_ctx *ctx = t_ctx(), *other = t_cpu_ctx();
    size_t rows = 64, r = 64, ld = 64;
    br_buf *bits = t_buf_poison(ctx, BR_U32, rows * r / 32, 0x5a5a5a5au);
    br_buf *f = t_buf_poison(ctx, BR_F32, 128 * 128, 0x3f800000u);
    br_buf *g = t_buf_poison(ctx, BR_F32, 128 * 128, 0);
    br_buf *d = t_buf_poison(ctx, BR_F32, 128, 0), *small = t_buf_poison(ctx, BR_F32, 10, 0);
    br_buf *h = t_buf_poison(ctx, BR_F16, 128 * 128, 0),
           *h2 = t_buf_poison(ctx, BR_F16, 128 * 128, 0);
    br_buf *fo = NULL, *view = NULL;
    CHECK(br_buf_new(other, BR_F32, 128 * 128, &fo) == BR_OK, "buffer on another context");

    /* expand_scaled */
    CHECK_OK(ctx, br_expand_scaled(ctx, bits, rows, r, f, 1.0f, h, ld));
    CHECK(br_expand_scaled(NULL, bits, rows, r, f, 1.0f, h, ld) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "bits", br_expand_scaled(ctx, NULL, rows, r, f, 1.0f, h, ld));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "rowscale",
                    br_expand_scaled(ctx, bits, rows, r, NULL, 1, h, ld));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "plane_t", br_expand_scaled(ctx, bits, rows, r, f, 1, NULL, ld));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_expand_scaled(ctx, bits, rows, r, f, 1.0f, f, ld));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_expand_scaled(ctx, f, rows, r, f, 1.0f, h, ld));
    CHECK_FAILS(ctx, BR_E_SIZE, br_expand_scaled(ctx, bits, rows, r, small, 1.0f, h, ld));
    CHECK_FAILS(ctx, BR_E_SIZE, br_expand_scaled(ctx, bits, rows, 2 * r, f, 1.0f, h, ld));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_expand_scaled(ctx, bits, 0, r, f, 1.0f, h, ld));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_expand_scaled(ctx, bits, rows, 48, f, 1.0f, h, ld));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "ld", br_expand_scaled(ctx, bits, rows, r, f, 1, h, 60));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "ld", br_expand_scaled(ctx, bits, rows, r, f, 1, h, 68));
    CHECK_FAILS(ctx, BR_E_NONFINITE, br_expand_scaled(ctx, bits, rows, r, f, NAN, h, ld));
    CHECK_FAILS(ctx, BR_E_OVERFLOW,
                br_expand_scaled(ctx, bits, rows, (size_t)1 << 20, f, 1.0f, h, (size_t)1 << 20));
    CHECK_FAILS(ctx, BR_E_ARG, br_expand_scaled(ctx, bits, rows, r, fo, 1.0f, h, ld));

    /* expand_scaled_rows: (rows − 1)·ld + r elements of plane, ld ≥ r */
    CHECK_OK(ctx, br_expand_scaled_rows(ctx, bits, rows, r, f, 1.0f, h, 2 * r));
    CHECK_OK(ctx, br_buf_view(h, 0, (rows - 1) * 2 * r + r, &view));
    CHECK_OK(ctx, br_expand_scaled_rows(ctx, bits, rows, r, f, 1.0f, view, 2 * r));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "plane",
                    br_expand_scaled_rows(ctx, bits, rows, r, f, 1.0f, view, 2 * r + 8));
    br_buf_free(view);
    view = NULL;
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "ld", br_expand_scaled_rows(ctx, bits, rows, r, f, 1, h, 56));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "ld", br_expand_scaled_rows(ctx, bits, rows, r, f, 1, h, 68));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "plane",
                    br_expand_scaled_rows(ctx, bits, rows, r, f, 1, NULL, r));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_expand_scaled_rows(ctx, bits, rows, r, f, 1.0f, f, r));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_expand_scaled_rows(ctx, bits, rows, 48, f, 1.0f, h, r));
    CHECK_FAILS(ctx, BR_E_NONFINITE, br_expand_scaled_rows(ctx, bits, rows, r, f, INFINITY, h, r));

    /* sign_rowdot */
    CHECK_OK(ctx, br_sign_rowdot(ctx, f, 128, 64, bits, d, g, NULL, rows, r, 0));
    CHECK_OK(ctx, br_sign_rowdot(ctx, f, 128, 64, bits, f, g, d, rows, r, 1));
    CHECK_OK(ctx, br_sign_rowdot(ctx, f, 128, 0, bits, NULL, NULL, d, rows, r, 0));
    CHECK_OK(ctx, br_sign_rowdot(ctx, f, 128, 0, NULL, d, g, NULL, rows, r, 0));
    CHECK(br_sign_rowdot(NULL, f, 128, 0, bits, d, g, d, rows, r, 0) == BR_E_ARG,
          "NULL ctx accepted");
    CHECK_FAILS(ctx, BR_E_ARG, br_sign_rowdot(ctx, f, 128, 0, bits, d, NULL, NULL, rows, r, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "mat",
                    br_sign_rowdot(ctx, NULL, 128, 0, bits, d, g, d, 64, r, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "bits", br_sign_rowdot(ctx, f, 128, 0, NULL, d, g, d, 64, r, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "rowscale",
                    br_sign_rowdot(ctx, f, 128, 0, bits, NULL, g, d, rows, r, 0));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_sign_rowdot(ctx, h, 128, 0, bits, d, g, d, rows, r, 0));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_sign_rowdot(ctx, f, 128, 0, f, d, g, d, rows, r, 0));
    CHECK_FAILS(ctx, BR_E_SIZE, br_sign_rowdot(ctx, f, 128, 0, bits, d, g, small, rows, r, 0));
    CHECK_FAILS(ctx, BR_E_SIZE, br_sign_rowdot(ctx, f, 256, 0, bits, d, g, d, 128, r, 0));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_sign_rowdot(ctx, f, 128, 0, bits, d, g, d, 0, r, 0));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_sign_rowdot(ctx, f, 128, 0, bits, d, g, d, rows, 40, 0));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "ldm",
                    br_sign_rowdot(ctx, f, 128, 96, bits, d, g, d, rows, r, 0));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_sign_rowdot(ctx, f, 0, 0, bits, d, g, d, rows, r, 0));
    CHECK_FAILS(ctx, BR_E_OVERFLOW,
                br_sign_rowdot(ctx, f, (size_t)1 << 40, 0, bits, d, g, d, rows, r, 0));
    CHECK_FAILS(ctx, BR_E_ARG, br_sign_rowdot(ctx, fo, 128, 0, bits, d, g, d, rows, r, 0));
    /* outputs overlapping inputs or each other */
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps",
                    br_sign_rowdot(ctx, f, 128, 0, bits, d, f, NULL, rows, r, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps",
                    br_sign_rowdot(ctx, f, 128, 0, bits, d, g, d, rows, r, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps",
                    br_sign_rowdot(ctx, f, 128, 0, bits, d, g, g, rows, r, 0));
    CHECK(br_buf_view(f, 128 * 63, 64, &view) == BR_OK, "view of mat's tail");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps",
                    br_sign_rowdot(ctx, f, 128, 0, bits, NULL, NULL, view, rows, r, 0));
    br_buf_free(view);

    /* cvt_both */
    CHECK_OK(ctx, br_cvt_both(ctx, f, NULL, h, h2, 64, 64, 64, 1.0f));
    CHECK(br_cvt_both(NULL, f, NULL, h, h2, 64, 64, 64, 1.0f) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS(ctx, BR_E_ARG, br_cvt_both(ctx, f, NULL, NULL, NULL, 64, 64, 64, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "src", br_cvt_both(ctx, NULL, NULL, h, h2, 64, 64, 64, 1.0f));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_cvt_both(ctx, h, NULL, h, h2, 64, 64, 64, 1.0f));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_cvt_both(ctx, f, NULL, f, NULL, 64, 64, 64, 1.0f));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_cvt_both(ctx, f, h, h, NULL, 64, 64, 64, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "col", br_cvt_both(ctx, f, small, h, h2, 64, 64, 64, 1.0f));
    CHECK_FAILS(ctx, BR_E_SIZE, br_cvt_both(ctx, f, NULL, h, h2, 64, 64, 256, 1.0f));
    CHECK_FAILS(ctx, BR_E_SIZE, br_cvt_both(ctx, f, NULL, NULL, h2, 200, 64, 64, 1.0f));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_cvt_both(ctx, f, NULL, h, h2, 0, 64, 64, 1.0f));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_cvt_both(ctx, f, NULL, h, h2, 64, 0, 64, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "ld", br_cvt_both(ctx, f, NULL, h, h2, 64, 64, 63, 1.0f));
    CHECK_FAILS(ctx, BR_E_NONFINITE, br_cvt_both(ctx, f, NULL, h, h2, 64, 64, 64, INFINITY));
    CHECK_FAILS(
        ctx, BR_E_OVERFLOW,
        br_cvt_both(ctx, f, NULL, h, h2, (size_t)1 << 30, (size_t)1 << 30, (size_t)1 << 30, 1.0f));
    CHECK_FAILS(ctx, BR_E_ARG, br_cvt_both(ctx, fo, NULL, h, h2, 64, 64, 64, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps", br_cvt_both(ctx, f, NULL, h, h, 64, 64, 64, 1.0f));

    br_buf_free(fo);
    br_ctx_free(other);
    br_buf_free(bits), br_buf_free(f), br_buf_free(g), br_buf_free(d), br_buf_free(small);
    br_buf_free(h), br_buf_free(h2);
    br_ctx_free(ctx);
}

T_RUN("layer_ops", T_CASE(expand_scaled_matches_reference), T_CASE(sign_rowdot_matches_reference),
      T_CASE(cvt_both_matches_reference), T_CASE(layer_ops_bad_arguments))
