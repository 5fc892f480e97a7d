/* The reformulated layer's internal ops (ops/layer_ops.h): expand_scaled,
 * sign_rowdot and cvt_both on the device under test, each against a scalar C
 * reference of the exact arithmetic (bit for bit) and an f64 sanity bound, on
 * random inputs and shapes (1 row, sizes that are multiples of nothing, the
 * layer's own), outputs poisoned first, buffers at aligned and odd offsets (the
 * kernels' vector and scalar paths); the ops of several paths against as many
 * single-path calls and the reference; two expands in one op against the two
 * ops apart; cvt_both also against br_cvt_pad and br_cvt_t; mm_stage against mm +
 * cvt_both and mm_colsum against mm + colsum_fused (their definitions); then every
 * class of bad argument. BITRANK_TEST_QUICK=1 (the compute-sanitizer runs) leaves out
 * the shapes over 2^18 elements. */
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
    /* {3, 1088}: 34 bitmap words a row, past the 32 a warp's lanes hold at once */
    static const size_t fixed[][2] = {{1, 32},   {5, 96},   {3584, 384},
                                      {1024, 384}, {77, 160}, {3, 1088}};
    for (size_t c = 0; c < 6 + 7; c++) {
        size_t rows, r;
        t_pick_shape2(&rng, fixed, 6, c, 1, 900, 1, 9, &rows, &r);
        if (c >= 6) r *= 32;
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
                float total = ref_rowdot(m, bits + i * words, r);
                float want = accumulate ? d0[i] + total : total;
                bad_d += memcmp(&got[i], &want, 4) != 0;
                double w64 = accumulate ? d0[i] : 0.0, mag = fabs(w64);
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

/* ---------------------------------------------------------------- every path in one op */

/* v = a view of n elements of b from element `off` (exits if it cannot be made). */
static br_buf *sub(br_buf *b, size_t off, size_t n) {
    br_buf *v = NULL;
    if (br_buf_view(b, off, n, &v) != BR_OK) {
        fprintf(stderr, "view [%zu, %zu+%zu) failed\n", off, off, n);
        exit(1);
    }
    return v;
}

/* An input stride: one path's n elements plus an odd gap, or 0 (paths sharing it). */
static size_t in_stride(br_rng *rng, size_t n, int shared) {
    return shared ? 0 : n + 2 * t_rand_size(rng, 0, 20) + 1;
}

/* br_expand_scaled_paths and br_expand_scaled_rows_paths (P ∈ {1, 2, 3}, cycled)
 * against P single-path calls on views of a second plane on the same device, bit for
 * bit over the whole plane (pads and what no path owns included, poisoned first),
 * and against the scalar reference: rows multiples of nothing, odd input strides
 * larger than needed (or 0: every path reads the same inputs), plane rows past the
 * paths', buffers at aligned and odd offsets; one launch per op. */
static void expand_scaled_paths_match_single(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(64);
    for (size_t c = 0; c < 30; c++) {
        const int by_rows = c % 2;
        size_t P = 1 + c / 2 % 3, rows = c < 2 ? 1 : t_rand_size(&rng, 1, 700);
        size_t r = 32 * t_rand_size(&rng, 1, 6), words = r / 32, nb = rows * words;
        size_t bs = in_stride(&rng, nb, c % 10 == 7), ss = in_stride(&rng, rows, c % 10 == 7);
        size_t ld = by_rows ? P * r + 8 * t_rand_size(&rng, 0, 2)
                            : (rows + 7) / 8 * 8 + 8 * t_rand_size(&rng, 0, 3);
        size_t need = by_rows ? (rows - 1) * ld + P * r : P * r * ld;
        size_t total = need + ld * t_rand_size(&rng, 0, 2); /* past the paths: untouched */
        if (too_big(total)) continue;
        size_t off = c % 4 >= 2 ? 3 : 0, nbits = (P - 1) * bs + nb, nscale = (P - 1) * ss + rows;
        float scale = c % 3 ? 1.0f : (float)(0.1 + 4 * br_rng_unit(&rng));
        uint32_t *bits = rand_bits(&rng, nbits);
        float *rs = rand_wide(&rng, nscale);
        br_buf *pb, *pr, *pp, *ps;
        br_buf *bb = input_at(ctx, BR_U32, bits, nbits, off, &pb);
        br_buf *br = input_at(ctx, BR_F32, rs, nscale, off, &pr);
        br_buf *plane = view_at(ctx, BR_F16, total, off, T_NAN16, &pp);
        br_buf *single = view_at(ctx, BR_F16, total, off, T_NAN16, &ps);
        unsigned long long l0 = ctx->stats.launches;
        if (by_rows)
            CHECK_OK(ctx, br_expand_scaled_rows_paths(ctx, bb, bs, rows, r, br, ss, scale, plane,
                                                      ld, P));
        else
            CHECK_OK(ctx,
                     br_expand_scaled_paths(ctx, bb, bs, rows, r, br, ss, scale, plane, ld, P));
        unsigned long long launches = ctx->stats.launches - l0;
        for (size_t p = 0; p < P; p++) {
            br_buf *vb = sub(bb, p * bs, nb), *vr = sub(br, p * ss, rows);
            br_buf *vp =
                by_rows ? sub(single, p * r, (rows - 1) * ld + r) : sub(single, p * r * ld, r * ld);
            if (by_rows)
                CHECK_OK(ctx, br_expand_scaled_rows(ctx, vb, rows, r, vr, scale, vp, ld));
            else
                CHECK_OK(ctx, br_expand_scaled(ctx, vb, rows, r, vr, scale, vp, ld));
            br_buf_free(vb), br_buf_free(vr), br_buf_free(vp);
        }
        uint16_t *got = t_download_f16(ctx, plane, total),
                 *one = t_download_f16(ctx, single, total);
        size_t bad = 0, far = 0;
        for (size_t e = 0; e < total; e++) {
            /* path p's entry (i, k) at element e, or an element no path owns */
            size_t row = e / ld, col = e % ld, p, i, k;
            int owned;
            if (by_rows) {
                owned = row < rows && col < P * r;
                p = col / r, k = col % r, i = row;
            } else {
                owned = row < P * r;
                p = row / r, k = row % r, i = col;
            }
            uint16_t want = T_NAN16;
            if (owned && i < rows) {
                int bit = bits[p * bs + i * words + k / 32] >> (k % 32) & 1u;
                float h = rs[p * ss + i];
                uint16_t mag = br_half_from_float(h * scale);
                want = bit ? mag : (uint16_t)(mag ^ 0x8000u);
                far += !f16_near(got[e], (bit ? 1.0 : -1.0) * (double)h * scale);
            } else if (owned) {
                want = 0; /* transposed: +0 in the pad columns i ≥ rows */
            }
            bad += got[e] != want;
        }
        const char *what = by_rows ? "expand_scaled_rows_paths" : "expand_scaled_paths";
        size_t differ = t_bits_differ16(got, one, total);
        CHECK(differ == 0,
              "%s P=%zu rows=%zu r=%zu ld=%zu off=%zu: %zu of %zu differ from %zu "
              "single-path calls (first %zu)",
              what, P, rows, r, ld, off, differ, total, P, t_first_diff16(got, one, total));
        CHECK(bad == 0,
              "%s P=%zu rows=%zu r=%zu ld=%zu strides %zu, %zu: %zu of %zu differ from "
              "the reference",
              what, P, rows, r, ld, bs, ss, bad, total);
        CHECK(far == 0, "%s P=%zu rows=%zu r=%zu: %zu values off f64", what, P, rows, r, far);
        CHECK(launches == 1, "%s P=%zu: %llu launches", what, P, launches);
        free(got), free(one), free(bits), free(rs);
        free_view(plane, pp), free_view(single, ps), free_view(bb, pb), free_view(br, pr);
    }
    br_ctx_free(ctx);
}

/* Option expand_blocks=<cap> (NULL: all). */
static void expand_cap(br_ctx *ctx, const char *cap) {
    char opt[48];
    snprintf(opt, sizeof opt, "expand_blocks=%s", cap ? cap : "all");
    CHECK_OK(ctx, br_ctx_set_options(ctx, opt));
}

/* Both orientations of br_expand_scaled_*_paths (P = 2) at the widths that pick each
 * CUDA tile (r/32 = 1..24 words: 1, 2, 4 or 8 words a transposed tile; rows·words
 * not a multiple of a warp's 32 words by rows), pad columns past whole tiles (ld
 * well past rows), the bench's third shape, and the grid capped to 1 and 3 blocks
 * (option expand_blocks, CUDA: several tiles a block through the grid-stride loops
 * and the double-buffered tiles) — bit for bit against the reference over the
 * whole plane, poisoned first, at aligned and odd offsets (the scalar path). */
static void expand_scaled_tiles_match_reference(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(66);
    static const size_t shapes[][2] = {{1, 1},    {33, 2},   {257, 3}, {700, 4}, {129, 6},  {77, 8},
                                       {300, 12}, {511, 16}, {95, 24}, {1, 16},  {6144, 16}};
    static const char *caps[] = {NULL, "1", "3"};
    const size_t nshapes = sizeof shapes / sizeof *shapes, P = 2;
    for (size_t c = 0; c < 2 * 3 * nshapes; c++) {
        const int by_rows = c % 2;
        const char *cap = caps[c / 2 % 3];
        size_t rows = shapes[c / 6][0], words = shapes[c / 6][1], r = 32 * words;
        size_t nb = rows * words, bs = nb + 2 * t_rand_size(&rng, 0, 20) + 1;
        size_t ss = rows + 2 * t_rand_size(&rng, 0, 20) + 1;
        size_t ld = by_rows ? P * r + 8 * t_rand_size(&rng, 0, 2)
                            : (rows + 7) / 8 * 8 + 8 * t_rand_size(&rng, 0, 40);
        size_t total = by_rows ? (rows - 1) * ld + P * r : P * r * ld;
        if (too_big(total) || (cap && total > ((size_t)1 << 22))) continue;
        size_t off = c / 6 % 2 ? 3 : 0, nbits = bs + nb, nscale = ss + rows;
        float scale = c % 3 ? 1.0f : (float)(0.1 + 4 * br_rng_unit(&rng));
        uint32_t *bits = rand_bits(&rng, nbits);
        float *rs = rand_wide(&rng, nscale);
        br_buf *pb, *pr, *pp;
        br_buf *bb = input_at(ctx, BR_U32, bits, nbits, off, &pb);
        br_buf *br = input_at(ctx, BR_F32, rs, nscale, off, &pr);
        br_buf *plane = view_at(ctx, BR_F16, total, off, T_NAN16, &pp);
        expand_cap(ctx, cap);
        if (by_rows)
            CHECK_OK(ctx, br_expand_scaled_rows_paths(ctx, bb, bs, rows, r, br, ss, scale, plane,
                                                      ld, P));
        else
            CHECK_OK(ctx,
                     br_expand_scaled_paths(ctx, bb, bs, rows, r, br, ss, scale, plane, ld, P));
        expand_cap(ctx, NULL);
        uint16_t *got = t_download_f16(ctx, plane, total);
        size_t bad = 0;
        for (size_t e = 0; e < total; e++) {
            size_t row = e / ld, col = e % ld, p, i, k;
            int owned;
            if (by_rows) {
                owned = col < P * r;
                p = col / r, k = col % r, i = row;
            } else {
                owned = 1;
                p = row / r, k = row % r, i = col;
            }
            uint16_t want = T_NAN16;
            if (owned && i < rows) {
                int bit = bits[p * bs + i * words + k / 32] >> (k % 32) & 1u;
                uint16_t mag = br_half_from_float(rs[p * ss + i] * scale);
                want = bit ? mag : (uint16_t)(mag ^ 0x8000u);
            } else if (owned) {
                want = 0; /* transposed: +0 in the pad columns i ≥ rows */
            }
            bad += got[e] != want;
        }
        CHECK(bad == 0, "%s rows=%zu r=%zu ld=%zu off=%zu cap=%s: %zu of %zu differ",
              by_rows ? "expand_scaled_rows_paths" : "expand_scaled_paths", rows, r, ld, off,
              cap ? cap : "none", bad, total);
        free(got), free(bits), free(rs);
        free_view(plane, pp), free_view(bb, pb), free_view(br, pr);
    }
    br_ctx_free(ctx);
}

/* br_expand_scaled2 (both orientations, in either order, and either twice) against
 * its two jobs as br_expand_scaled_paths / br_expand_scaled_rows_paths calls on the
 * same device, bit for bit over one allocation holding both planes and a poisoned
 * gap between them (0: the planes adjacent), and against the scalar reference:
 * P ∈ {1, 2, 3} per job, rows multiples of nothing (neither 32 nor 128), each job
 * its own r, ld and odd input strides (or 0), some with the grid capped
 * (BITRANK_EXPAND_BLOCKS: each job's grid-stride loops over its own blocks),
 * buffers at aligned and odd offsets; one launch. */
typedef struct expand_case {
    int by_rows;
    size_t P, rows, r, bs, ss, ld, total;
    uint32_t *bits;
    float *rs;
    br_buf *bb, *pb, *br, *pr;
} expand_case;

/* Elements of got (one job's plane, total elements) that differ from the reference. */
static size_t expand_ref_differ(const expand_case *x, const uint16_t *got, float scale) {
    size_t bad = 0, words = x->r / 32;
    for (size_t e = 0; e < x->total; e++) {
        size_t row = e / x->ld, col = e % x->ld, p, i, k;
        int owned;
        if (x->by_rows) {
            owned = col < x->P * x->r;
            p = col / x->r, k = col % x->r, i = row;
        } else {
            owned = 1;
            p = row / x->r, k = row % x->r, i = col;
        }
        uint16_t want = T_NAN16;
        if (owned && i < x->rows) {
            int bit = x->bits[p * x->bs + i * words + k / 32] >> (k % 32) & 1u;
            uint16_t mag = br_half_from_float(x->rs[p * x->ss + i] * scale);
            want = bit ? mag : (uint16_t)(mag ^ 0x8000u);
        } else if (owned) {
            want = 0; /* transposed: +0 in the pad columns i ≥ rows */
        }
        bad += got[e] != want;
    }
    return bad;
}

static void expand_scaled2_matches_two_ops(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(67);
    static const char *caps[] = {NULL, NULL, "1", "3"};
    for (size_t c = 0; c < 32; c++) {
        /* c < 16: both planes 16-byte aligned (the vector stores), every pair of
         * orientations under every cap; then plane 0 or plane 1 at an odd offset */
        const char *cap = caps[c / 4 % 4];
        size_t off = c >= 16 && c % 2 ? 3 : 0, gap = c % 5 ? 8 * t_rand_size(&rng, 0, 3) : 0;
        if (c >= 16 && c % 2 == 0) gap++;
        float scale = c % 5 ? 1.0f : (float)(0.1 + 4 * br_rng_unit(&rng));
        expand_case x[2];
        int skip = 0;
        for (int i = 0; i < 2; i++) {
            expand_case *e = &x[i];
            e->by_rows = (int)(c >> i & 1); /* c % 4: t t, rows t, t rows, rows rows */
            e->P = t_rand_size(&rng, 1, 3);
            e->rows = c < 4 ? 1 : t_rand_size(&rng, 2, c % 8 == 7 ? 3000 : 700);
            if (e->rows % 32 == 0) e->rows++; /* a multiple of nothing */
            e->r = 32 * t_rand_size(&rng, 1, 6);
            size_t nb = e->rows * (e->r / 32);
            e->bs = in_stride(&rng, nb, c % 7 == 3);
            e->ss = in_stride(&rng, e->rows, c % 7 == 3);
            e->ld = e->by_rows ? e->P * e->r + 8 * t_rand_size(&rng, 0, 2)
                               : (e->rows + 7) / 8 * 8 + 8 * t_rand_size(&rng, 0, 3);
            e->total = e->by_rows ? (e->rows - 1) * e->ld + e->P * e->r : e->P * e->r * e->ld;
            skip |= too_big(e->total);
        }
        size_t total = x[0].total + gap + x[1].total; /* plane 0, the gap, plane 1 */
        if (skip || too_big(total)) continue;
        br_buf *pp, *ps;
        br_buf *pair = view_at(ctx, BR_F16, total, off, T_NAN16, &pp);
        br_buf *apart = view_at(ctx, BR_F16, total, off, T_NAN16, &ps);
        br_buf *vp[2], *va[2];
        br_expand_job job[2];
        for (int i = 0; i < 2; i++) {
            expand_case *e = &x[i];
            size_t nbits = (e->P - 1) * e->bs + e->rows * (e->r / 32);
            size_t nscale = (e->P - 1) * e->ss + e->rows, at = i ? x[0].total + gap : 0;
            e->bits = rand_bits(&rng, nbits);
            e->rs = rand_wide(&rng, nscale);
            e->bb = input_at(ctx, BR_U32, e->bits, nbits, c % 2 ? 0 : 1 + (size_t)i, &e->pb);
            e->br = input_at(ctx, BR_F32, e->rs, nscale, c % 2 ? 0 : 3, &e->pr);
            vp[i] = sub(pair, at, e->total);
            va[i] = sub(apart, at, e->total);
            job[i] = (br_expand_job){.bits = e->bb,
                                     .bits_stride = e->bs,
                                     .rows = e->rows,
                                     .r = e->r,
                                     .rowscale = e->br,
                                     .scale_stride = e->ss,
                                     .scale = scale,
                                     .plane = vp[i],
                                     .ld = e->ld,
                                     .paths = e->P,
                                     .by_rows = e->by_rows};
        }
        expand_cap(ctx, cap);
        unsigned long long l0 = ctx->stats.launches;
        CHECK_OK(ctx, br_expand_scaled2(ctx, job));
        unsigned long long launches = ctx->stats.launches - l0;
        for (int i = 0; i < 2; i++) {
            const expand_case *e = &x[i];
            if (e->by_rows)
                CHECK_OK(ctx, br_expand_scaled_rows_paths(ctx, e->bb, e->bs, e->rows, e->r, e->br,
                                                          e->ss, scale, va[i], e->ld, e->P));
            else
                CHECK_OK(ctx, br_expand_scaled_paths(ctx, e->bb, e->bs, e->rows, e->r, e->br, e->ss,
                                                     scale, va[i], e->ld, e->P));
        }
        expand_cap(ctx, NULL);
        uint16_t *got = t_download_f16(ctx, pair, total), *two = t_download_f16(ctx, apart, total);
        size_t differ = t_bits_differ16(got, two, total);
        CHECK(differ == 0,
              "expand_scaled2 %s(P=%zu rows=%zu r=%zu ld=%zu) %s(P=%zu rows=%zu r=%zu ld=%zu) "
              "gap=%zu off=%zu cap=%s: %zu of %zu differ from the two ops (first %zu)",
              x[0].by_rows ? "rows" : "t", x[0].P, x[0].rows, x[0].r, x[0].ld,
              x[1].by_rows ? "rows" : "t", x[1].P, x[1].rows, x[1].r, x[1].ld, gap, off,
              cap ? cap : "none", differ, total, t_first_diff16(got, two, total));
        size_t bad0 = expand_ref_differ(&x[0], got, scale),
               bad1 = expand_ref_differ(&x[1], got + x[0].total + gap, scale), gap_bad = 0;
        for (size_t e = 0; e < gap; e++)
            gap_bad += got[x[0].total + e] != T_NAN16;
        CHECK(bad0 == 0 && bad1 == 0 && gap_bad == 0,
              "expand_scaled2 (%s, %s) cap=%s: %zu, %zu and %zu (gap) differ from the reference",
              x[0].by_rows ? "rows" : "t", x[1].by_rows ? "rows" : "t", cap ? cap : "none", bad0,
              bad1, gap_bad);
        /* CUDA fuses the unit into one launch; the CPU and Vulkan run its two primitives */
        const unsigned long long want = strcmp(br_ctx_backend(ctx), "cuda") ? 2 : 1;
        CHECK(launches == want, "expand_scaled2: %llu launches, want %llu", launches, want);
        free(got), free(two);
        for (int i = 0; i < 2; i++) {
            br_buf_free(vp[i]), br_buf_free(va[i]);
            free_view(x[i].bb, x[i].pb), free_view(x[i].br, x[i].pr);
            free(x[i].bits), free(x[i].rs);
        }
        free_view(pair, pp), free_view(apart, ps);
    }
    br_ctx_free(ctx);
}

/* br_sign_rowdot_paths (P ∈ {1, 2, 3}, cycled) against P single-path calls on views
 * on the same device, bit for bit over the outputs' whole spans (the gaps between
 * paths must keep what they held), and against the scalar reference and f64:
 * col0 > 0 (mostly), odd strides larger than needed (input strides 0 too), grad or
 * dsum NULL, accumulate 0 and 1, buffers at aligned and odd offsets; one launch. */
static void sign_rowdot_paths_match_single(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(65);
    for (size_t c = 0; c < 36; c++) {
        size_t P = 1 + c / 4 % 3, rows = c < 4 ? 1 : t_rand_size(&rng, 1, 900);
        size_t r = 32 * t_rand_size(&rng, 1, 6), words = r / 32, nb = rows * words, n = rows * r;
        if (too_big(P * n)) continue;
        /* which 0, 1: both outputs, 2: no grad, 3: no dsum */
        int which = (int)(c % 4), accumulate = (int)(br_rng_u64(&rng) & 1);
        const int with_grad = which != 2, with_dsum = which != 3;
        size_t col0 = c % 5 == 0 ? 0 : t_rand_size(&rng, 1, 40);
        size_t ldm = col0 + P * r + t_rand_size(&rng, 0, 5);
        size_t bs = in_stride(&rng, nb, c % 7 == 5), ss = in_stride(&rng, rows, c % 7 == 5);
        size_t gs = n + 2 * t_rand_size(&rng, 0, 20) + 1,
               ds = rows + 2 * t_rand_size(&rng, 0, 20) + 1;
        size_t nbits = (P - 1) * bs + nb, nscale = (P - 1) * ss + rows;
        size_t ngrad = (P - 1) * gs + n, ndsum = (P - 1) * ds + rows, off = c % 8 >= 4 ? 3 : 0;
        float *mat = t_rand(&rng, rows * ldm, 1.0f), *rs = rand_wide(&rng, nscale);
        float *d0 = t_rand(&rng, ndsum, 1.0f), *g0 = t_rand(&rng, ngrad, 1.0f);
        if (!accumulate) { /* what it holds is overwritten: NaN, so a missed write shows */
            for (size_t e = 0; e < ngrad; e++)
                memcpy(&g0[e], &(uint32_t){T_NAN32}, 4);
            for (size_t p = 0; p < P; p++) /* the paths' dsum too; the gaps keep their values */
                for (size_t i = 0; i < rows; i++)
                    memcpy(&d0[p * ds + i], &(uint32_t){T_NAN32}, 4);
        }
        uint32_t *bits = rand_bits(&rng, nbits);
        br_buf *pm, *pb, *pr, *pg[2] = {NULL, NULL}, *pd[2] = {NULL, NULL};
        br_buf *bm = input_at(ctx, BR_F32, mat, rows * ldm, off, &pm);
        br_buf *bb = input_at(ctx, BR_U32, bits, nbits, off, &pb);
        br_buf *br = input_at(ctx, BR_F32, rs, nscale, off, &pr);
        br_buf *bg[2] = {NULL, NULL}, *bd[2] = {NULL, NULL}; /* [0] paths op, [1] single */
        for (int s = 0; s < 2; s++) {
            if (with_grad) bg[s] = input_at(ctx, BR_F32, g0, ngrad, off, &pg[s]);
            if (with_dsum) bd[s] = input_at(ctx, BR_F32, d0, ndsum, off, &pd[s]);
        }
        /* unused inputs may be given or NULL */
        const br_buf *ib = with_dsum || c % 2 ? bb : NULL, *ir = with_grad || c % 2 ? br : NULL;
        unsigned long long l0 = ctx->stats.launches;
        CHECK_OK(ctx, br_sign_rowdot_paths(ctx, bm, ldm, col0, ib, bs, ir, ss, bg[0], gs, bd[0], ds,
                                           rows, r, P, accumulate));
        unsigned long long launches = ctx->stats.launches - l0;
        for (size_t p = 0; p < P; p++) {
            br_buf *vb = ib ? sub(bb, p * bs, nb) : NULL, *vr = ir ? sub(br, p * ss, rows) : NULL;
            br_buf *vg = with_grad ? sub(bg[1], p * gs, n) : NULL;
            br_buf *vd = with_dsum ? sub(bd[1], p * ds, rows) : NULL;
            CHECK_OK(ctx, br_sign_rowdot(ctx, bm, ldm, col0 + p * r, vb, vr, vg, vd, rows, r,
                                         accumulate));
            br_buf_free(vb), br_buf_free(vr), br_buf_free(vg), br_buf_free(vd);
        }
        size_t differ = 0, bad_g = 0, bad_d = 0, far_g = 0, far_d = 0;
        if (with_grad) {
            float *got = t_download_f32(ctx, bg[0], ngrad),
                  *one = t_download_f32(ctx, bg[1], ngrad);
            differ += t_bits_differ32(got, one, ngrad);
            float *want = t_xmalloc(ngrad * sizeof *want); /* the gaps keep g0 */
            memcpy(want, g0, ngrad * sizeof *want);
            for (size_t p = 0; p < P; p++)
                for (size_t i = 0; i < rows; i++)
                    for (size_t k = 0; k < r; k++) {
                        float h = rs[p * ss + i], x = mat[i * ldm + col0 + p * r + k];
                        size_t e = p * gs + i * r + k;
                        want[e] = accumulate ? g0[e] + h * x : h * x;
                        double w64 = (double)h * x + (accumulate ? (double)g0[e] : 0.0);
                        far_g += !(fabs(got[e] - w64) <= 1e-6 * (fabs(w64) + fabs(h * x)));
                    }
            bad_g = t_bits_differ32(got, want, ngrad);
            free(got), free(one), free(want);
        }
        if (with_dsum) {
            float *got = t_download_f32(ctx, bd[0], ndsum),
                  *one = t_download_f32(ctx, bd[1], ndsum);
            differ += t_bits_differ32(got, one, ndsum);
            float *want = t_xmalloc(ndsum * sizeof *want);
            memcpy(want, d0, ndsum * sizeof *want);
            for (size_t p = 0; p < P; p++)
                for (size_t i = 0; i < rows; i++) {
                    const float *m = mat + i * ldm + col0 + p * r;
                    const uint32_t *b = bits + p * bs + i * words;
                    size_t e = p * ds + i;
                    want[e] = accumulate ? d0[e] + ref_rowdot(m, b, r) : ref_rowdot(m, b, r);
                    double w64 = accumulate ? d0[e] : 0.0, mag = fabs(w64);
                    for (size_t k = 0; k < r; k++) {
                        w64 += (b[k / 32] >> (k % 32) & 1u ? 1.0 : -1.0) * m[k];
                        mag += fabs(m[k]);
                    }
                    far_d += !(fabs(got[e] - w64) <= 1e-6 * mag);
                }
            bad_d = t_bits_differ32(got, want, ndsum);
            free(got), free(one), free(want);
        }
        CHECK(differ == 0,
              "sign_rowdot_paths P=%zu rows=%zu r=%zu ldm=%zu col0=%zu acc=%d which=%d off=%zu: "
              "%zu elements differ from %zu single-path calls",
              P, rows, r, ldm, col0, accumulate, which, off, differ, P);
        CHECK(bad_g == 0 && bad_d == 0,
              "sign_rowdot_paths P=%zu rows=%zu r=%zu strides %zu, %zu, %zu, %zu acc=%d "
              "which=%d: %zu grad, %zu dsum differ from the reference",
              P, rows, r, bs, ss, gs, ds, accumulate, which, bad_g, bad_d);
        CHECK(far_g == 0 && far_d == 0,
              "sign_rowdot_paths P=%zu rows=%zu r=%zu: %zu grad, %zu dsum off f64", P, rows, r,
              far_g, far_d);
        CHECK(launches == 1, "sign_rowdot_paths P=%zu: %llu launches", P, launches);
        free(mat), free(rs), free(d0), free(g0), free(bits);
        free_view(bm, pm), free_view(bb, pb), free_view(br, pr);
        for (int s = 0; s < 2; s++) {
            if (bg[s]) free_view(bg[s], pg[s]);
            if (bd[s]) free_view(bd[s], pd[s]);
        }
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

/* ---------------------------------------------------------------- grouped columns */

/* br_cvt_both_grouped and br_colsum_fused_grouped read col (and add into sum) in
 * groups — column c at (c / g)·stride + c % g — exactly as the plain ops on the
 * gathered col (and scattered sum) do, bit for bit: g = r of 1..3 paths, strides
 * wider than the group with poison between the groups (which must survive), sum
 * starting from random values when it accumulates, from NaN when it is overwritten
 * (against the plain op on a zero sum); then the argument checks. */
static void grouped_columns_match_gathered(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(71);
    for (int c = 0; c < 8; c++) {
        const int accumulate = c % 2;
        size_t g = 32 * t_rand_size(&rng, 1, 3), P = 1 + (size_t)c % 3, k = P * g;
        size_t stride = g + t_rand_size(&rng, 0, 50), m = t_rand_size(&rng, 1, 300);
        size_t span = (P - 1) * stride + g, nd = br_pad_rows(m) * k,
               nt = br_pad_rows(k) * br_pad_tokens(m);
        float *a = t_rand(&rng, m * k, 2.0f), *b = t_rand(&rng, m * k, 2.0f);
        float *colg = t_rand(&rng, span, 1.5f), *sumg = t_rand(&rng, span, 1.0f);
        float *col = t_xmalloc(k * sizeof *col), *sum = t_xmalloc(k * sizeof *sum);
        for (size_t i = 0; i < k; i++) {
            col[i] = colg[i / g * stride + i % g];
            if (!accumulate) memcpy(&sumg[i / g * stride + i % g], &(uint32_t){T_NAN32}, 4);
            sum[i] = accumulate ? sumg[i / g * stride + i % g] : 0.0f;
        }
        br_buf *ba = t_buf_from(ctx, BR_F32, a, m * k), *bb = t_buf_from(ctx, BR_F32, b, m * k);
        br_buf *bcg = t_buf_from(ctx, BR_F32, colg, span), *bc = t_buf_from(ctx, BR_F32, col, k);
        br_buf *bsg = t_buf_from(ctx, BR_F32, sumg, span), *bs = t_buf_from(ctx, BR_F32, sum, k);
        br_buf *d[2], *dt[2];
        for (int v = 0; v < 2; v++) {
            d[v] = t_buf_poison(ctx, BR_F16, nd, T_NAN16);
            dt[v] = t_buf_poison(ctx, BR_F16, nt, T_NAN16);
        }
        /* cvt_both */
        CHECK_OK(ctx, br_cvt_both(ctx, ba, bc, d[0], dt[0], m, k, k, 4.0f));
        CHECK_OK(ctx, br_cvt_both_grouped(ctx, ba, bcg, g, stride, d[1], dt[1], m, k, k, 4.0f));
        uint16_t *x0 = t_download_f16(ctx, d[0], nd), *x1 = t_download_f16(ctx, d[1], nd);
        uint16_t *t0 = t_download_f16(ctx, dt[0], nt), *t1 = t_download_f16(ctx, dt[1], nt);
        CHECK(t_bits_differ16(x0, x1, nd) == 0 && t_bits_differ16(t0, t1, nt) == 0,
              "cvt_both_grouped m=%zu k=%zu g=%zu stride=%zu: differs from the gathered col", m, k,
              g, stride);
        free(x0), free(x1), free(t0), free(t1);
        /* colsum_fused (CVT_B) */
        br_fuse f0 = {.kind = BR_FUSE_CVT_B, .col = bc, .dst = d[0], .scale = 8.0f, .dst_t = dt[0]};
        br_fuse f1 = f0;
        f1.col = bcg, f1.dst = d[1], f1.dst_t = dt[1];
        CHECK_OK(ctx, br_colsum_fused(ctx, ba, bb, bs, m, k, &f0));
        CHECK_OK(ctx, br_colsum_fused_grouped(ctx, ba, bb, bsg, m, k, &f1, g, stride, accumulate));
        x0 = t_download_f16(ctx, d[0], nd), x1 = t_download_f16(ctx, d[1], nd);
        t0 = t_download_f16(ctx, dt[0], nt), t1 = t_download_f16(ctx, dt[1], nt);
        float *s0 = t_download_f32(ctx, bs, k), *s1 = t_download_f32(ctx, bsg, span);
        size_t bad = 0, moved = 0;
        for (size_t i = 0; i < span; i++) {
            int in = i % stride < g;
            float want = in ? s0[i / stride * g + i % stride] : sumg[i];
            bad += memcmp(&s1[i], &want, sizeof want) != 0;
            moved += in && memcmp(&s1[i], &sumg[i], sizeof want) != 0;
        }
        CHECK(bad == 0 && moved > 0 && t_bits_differ16(x0, x1, nd) == 0 &&
                  t_bits_differ16(t0, t1, nt) == 0,
              "colsum_fused_grouped m=%zu k=%zu g=%zu stride=%zu acc=%d: %zu sums differ (%zu "
              "moved)",
              m, k, g, stride, accumulate, bad, moved);
        free(x0), free(x1), free(t0), free(t1), free(s0), free(s1);
        free(a), free(b), free(colg), free(sumg), free(col), free(sum);
        br_buf_free(ba), br_buf_free(bb), br_buf_free(bcg), br_buf_free(bc), br_buf_free(bsg),
            br_buf_free(bs);
        for (int v = 0; v < 2; v++)
            br_buf_free(d[v]), br_buf_free(dt[v]);
    }
    { /* the checks: group not dividing k, stride below the group, a span too short */
        size_t m = 40, k = 64, nd = br_pad_rows(m) * k, nt = br_pad_rows(k) * br_pad_tokens(m);
        br_buf *a = t_buf_poison(ctx, BR_F32, m * k, 0), *col = t_buf_poison(ctx, BR_F32, 100, 0);
        br_buf *d = t_buf_poison(ctx, BR_F16, nd, 0), *dt = t_buf_poison(ctx, BR_F16, nt, 0);
        br_buf *sum = t_buf_poison(ctx, BR_F32, 100, 0);
        CHECK_OK(ctx, br_cvt_both_grouped(ctx, a, col, 32, 68, d, dt, m, k, k, 1.0f));
        CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "groups",
                        br_cvt_both_grouped(ctx, a, col, 48, 48, d, dt, m, k, k, 1.0f));
        CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "groups",
                        br_cvt_both_grouped(ctx, a, col, 32, 31, d, dt, m, k, k, 1.0f));
        CHECK_FAILS_MSG(ctx, BR_E_SIZE, "col",
                        br_cvt_both_grouped(ctx, a, col, 32, 69, d, dt, m, k, k, 1.0f));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "col",
                        br_cvt_both_grouped(ctx, a, NULL, 32, 68, d, dt, m, k, k, 1.0f));
        br_fuse f = {.kind = BR_FUSE_CVT_B, .col = col, .dst = d, .scale = 1.0f, .dst_t = dt};
        CHECK_OK(ctx, br_colsum_fused_grouped(ctx, a, a, sum, m, k, &f, 32, 68, 1));
        CHECK_FAILS_MSG(ctx, BR_E_SIZE, "sum",
                        br_colsum_fused_grouped(ctx, a, a, sum, m, k, &f, 32, 69, 1));
        CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "groups",
                        br_colsum_fused_grouped(ctx, a, a, sum, m, k, &f, 40, 50, 0));
        f.col = sum; /* sum over col */
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps",
                        br_colsum_fused_grouped(ctx, a, a, sum, m, k, &f, 32, 68, 1));
        br_buf_free(a), br_buf_free(col), br_buf_free(d), br_buf_free(dt), br_buf_free(sum);
    }
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- mm_stage */

/* f16 bits of n random values in [-scale, scale) (never all zero). */
static uint16_t *rand_f16(br_rng *r, size_t n, float scale) {
    uint16_t *h = t_xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = br_half_from_float(br_rng_sym(r) * scale);
    return h;
}

/* br_mm_stage against br_mm + br_cvt_both on the same device (its definition), bit
 * for bit: dst and dst_t whole (poisoned first, so pads must be written +0), out when
 * kept (apart, in place over c, or NULL); and the staged values against an f64 product.
 * Shapes of every tile size's remainders, the layer's output GEMM, buffers at odd
 * offsets and widths that are not multiples of 4 (the composed path on CUDA), then
 * every wgmma tile forced through option gemm_tile at one shape. c16: c
 * given as f16 (at the same offset), against the definition on an f32 c holding
 * its values (keep 2, in place over c, is not one of its forms); no_t: dst_t NULL
 * (with c16 and out NULL the CUDA f16-c staging kernel, where aligned), and dst_t's
 * poison must survive. */
static void mm_stage_case(br_ctx *ctx, br_rng *rng, size_t m, size_t n, size_t k, size_t ld,
                          size_t off, int keep, float alpha, float scale, const char *tile, int c16,
                          int no_t) {
    size_t nd = br_pad_rows(m) * ld, nt = br_pad_rows(n) * br_pad_tokens(m);
    uint16_t *act = rand_f16(rng, m * k, 1.0f), *plane = rand_f16(rng, n * k, 1.0f);
    uint16_t *ch = c16 ? rand_f16(rng, m * n, 4.0f) : NULL;
    float *c = ch ? t_xmalloc(m * n * sizeof *c) : t_rand(rng, m * n, 4.0f);
    for (size_t i = 0; ch && i < m * n; i++)
        c[i] = (float)t_f16_value(ch[i]);
    br_buf *pa, *pp, *pc, *pch = NULL, *po = NULL, *pd, *pt;
    br_buf *ba = input_at(ctx, BR_F16, act, m * k, off, &pa);
    br_buf *bp = input_at(ctx, BR_F16, plane, n * k, off, &pp);
    br_buf *bc = input_at(ctx, BR_F32, c, m * n, off, &pc);
    br_buf *bch = ch ? input_at(ctx, BR_F16, ch, m * n, off, &pch) : NULL;
    br_buf *bo = keep == 1 ? view_at(ctx, BR_F32, m * n, off, T_NAN32, &po) : keep == 2 ? bc : NULL;
    br_buf *bd = view_at(ctx, BR_F16, nd, off, T_NAN16, &pd);
    br_buf *bt = view_at(ctx, BR_F16, nt, off, T_NAN16, &pt);
    br_gemm g = {.m = m, .n = n, .k = k, .oscale = alpha, .c = bc, .beta = -alpha};
    br_gemm gh = g;
    if (bch) gh.c = bch;
    /* the definition first (c is read before an in-place run overwrites it) */
    br_buf *ro = t_buf_poison(ctx, BR_F32, m * n, T_NAN32);
    br_buf *rd = t_buf_poison(ctx, BR_F16, nd, T_NAN16),
           *rt = t_buf_poison(ctx, BR_F16, nt, T_NAN16);
    CHECK_OK(ctx, br_mm(ctx, ba, bp, ro, g));
    CHECK_OK(ctx, br_cvt_both(ctx, ro, NULL, rd, rt, m, n, ld, scale));
    CHECK_OK(ctx, br_mm_stage(ctx, ba, bp, bo, gh, bd, no_t ? NULL : bt, ld, scale));
    uint16_t *got = t_download_f16(ctx, bd, nd), *got_t = t_download_f16(ctx, bt, nt);
    uint16_t *want = t_download_f16(ctx, rd, nd), *want_t = t_download_f16(ctx, rt, nt);
    if (no_t) /* dst_t untouched: its poison */
        for (size_t i = 0; i < nt; i++)
            want_t[i] = T_NAN16;
    size_t bad = t_bits_differ16(got, want, nd), bad_t = t_bits_differ16(got_t, want_t, nt);
    CHECK(bad == 0,
          "mm_stage %zux%zux%zu ld=%zu off=%zu keep=%d tile=%s c16=%d no_t=%d: dst differs in %zu "
          "of %zu (first %zu)",
          m, n, k, ld, off, keep, tile, c16, no_t, bad, nd, t_first_diff16(got, want, nd));
    CHECK(
        bad_t == 0,
        "mm_stage %zux%zux%zu off=%zu keep=%d tile=%s c16=%d no_t=%d: dst_t differs in %zu of %zu "
        "(first %zu)",
        m, n, k, off, keep, tile, c16, no_t, bad_t, nt, t_first_diff16(got_t, want_t, nt));
    if (bo) {
        float *go = t_download_f32(ctx, bo, m * n), *wo = t_download_f32(ctx, ro, m * n);
        bad = t_bits_differ32(go, wo, m * n);
        CHECK(bad == 0, "mm_stage %zux%zux%zu keep=%d tile=%s c16=%d: out differs in %zu of %zu", m,
              n, k, keep, tile, c16, bad, m * n);
        free(go), free(wo);
    }
    /* f64: every 7th value near alpha·(act·planeᵀ − c)·scale */
    size_t far = 0;
    for (size_t i = 0; i < m; i += 7)
        for (size_t j = i % 5; j < n; j += 5) {
            double acc = 0, mag = 0;
            for (size_t q = 0; q < k; q++) {
                double t = t_f16_value(act[i * k + q]) * t_f16_value(plane[j * k + q]);
                acc += t, mag += fabs(t);
            }
            double v = alpha * (acc - c[i * n + j]) * scale;
            /* f32 sums (k roundings of up to mag), the epilogue's, f16's half ulp */
            double tol =
                fabs(alpha * scale) * (mag * (double)k * 0x1p-24 + fabs(c[i * n + j]) * 0x1p-22) +
                fabs(v) * 0x1p-11 * 1.01 + 0x1p-25;
            far += fabs(t_f16_value(got[i * ld + j]) - v) > tol;
        }
    CHECK(far == 0, "mm_stage %zux%zux%zu: %zu values off the f64 product", m, n, k, far);
    free(got), free(got_t), free(want), free(want_t), free(act), free(plane), free(c), free(ch);
    br_buf_free(ro), br_buf_free(rd), br_buf_free(rt);
    free_view(ba, pa), free_view(bp, pp), free_view(bc, pc), free_view(bd, pd), free_view(bt, pt);
    if (bch) free_view(bch, pch);
    if (keep == 1) free_view(bo, po);
}

static void mm_stage_matches_mm_then_cvt_both(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(63);
    /* (tokens, n, k): the layer's output GEMMs, remainders of every tile, tiny ones */
    static const size_t fixed[][3] = {{4096, 3584, 768}, {1, 8, 32},     {100, 36, 64},
                                      {300, 1000, 96},   {129, 64, 32},  {512, 520, 128},
                                      {260, 448, 192},   {45, 100, 128}, {1000, 257, 64}};
    const size_t nfixed = sizeof fixed / sizeof fixed[0];
    for (size_t c = 0; c < nfixed + 4; c++) {
        size_t m, n, k;
        if (c < nfixed)
            m = fixed[c][0], n = fixed[c][1], k = fixed[c][2];
        else
            m = t_rand_size(&rng, 1, 700), n = t_rand_size(&rng, 1, 700),
            k = 32 * t_rand_size(&rng, 1, 8);
        if (too_big(m * n)) continue;
        size_t ld = c % 3 == 2 ? n + t_rand_size(&rng, 1, 40) : (n + 31) / 32 * 32;
        size_t off = c % 4 == 3 ? 3 : 0;
        int keep = (int)(c % 3); /* 0: out NULL, 1: out apart, 2: in place over c */
        float alpha = (c % 2 ? -1.0f : 1.0f) * (float)(0.1 + br_rng_unit(&rng));
        float scale = c % 2 ? 64.0f : (float)(0.5 + br_rng_unit(&rng)); /* |v·scale| < 65504 */
        mm_stage_case(ctx, &rng, m, n, k, ld, off, keep, alpha, scale, "auto", 0, 0);
        /* an f16 c (with dst_t: the composed path) */
        if (c > 0)
            mm_stage_case(ctx, &rng, m, n, k, ld, off, keep == 2 ? (int)(c % 2) : keep, alpha,
                          scale, "auto", 1, 0);
        /* an f16 c, out not kept, no dst_t: the layer's form (mm_stage16=0: the
         * composed path on CUDA, the GEMM then the staging pass) */
        for (int composed = 0; composed < 2; composed++) {
            CHECK_OK(ctx, br_ctx_set_options(ctx, composed ? "mm_stage16=0" : "mm_stage16=1"));
            mm_stage_case(ctx, &rng, m, n, k, ld, off, 0, alpha, scale,
                          composed ? "stage16 off" : "auto", 1, 1);
            if (composed)
                CHECK(!strstr(br_ctx_last_kernel(ctx), "stage16"), "mm_stage16=0 ran %s",
                      br_ctx_last_kernel(ctx));
        }
        CHECK_OK(ctx, br_ctx_set_options(ctx, "mm_stage16=1"));
    }
    static const char *const tiles[] = {"256x128", "256x112", "128x256",
                                        "128x128", "128x192", "256x96"};
    for (size_t i = 0; i < sizeof tiles / sizeof tiles[0]; i++) {
        char opt[64];
        snprintf(opt, sizeof opt, "gemm_tile=%s", tiles[i]);
        CHECK_OK(ctx, br_ctx_set_options(ctx, opt));
        mm_stage_case(ctx, &rng, 333, 300, 96, 320, 0, (int)(i % 2), -0.3f, 512.0f, tiles[i], 0, 0);
        /* the f16-c staging kernel on this tile (n a multiple of 8), then with every
         * tile of the grid on one CTA */
        mm_stage_case(ctx, &rng, 333, 296, 96, 320, 0, 0, -0.3f, 512.0f, tiles[i], 1, 1);
        CHECK_OK(ctx, br_ctx_set_options(ctx, "gemm_ctas=1"));
        mm_stage_case(ctx, &rng, 333, 296, 160, 296, 0, 0, 0.6f, 64.0f, tiles[i], 1, 1);
        CHECK_OK(ctx, br_ctx_set_options(ctx, "gemm_ctas=all,gemm_tile=auto"));
    }
    br_ctx_free(ctx);
}

static void mm_stage_bad_arguments(void) {
    br_ctx *ctx = t_ctx();
    br_buf *a = t_buf_poison(ctx, BR_F16, 64 * 64, 0), *p = t_buf_poison(ctx, BR_F16, 64 * 64, 0);
    br_buf *c = t_buf_poison(ctx, BR_F32, 64 * 64, 0), *o = t_buf_poison(ctx, BR_F32, 64 * 64, 0);
    br_buf *d = t_buf_poison(ctx, BR_F16, 128 * 64, 0), *t = t_buf_poison(ctx, BR_F16, 128 * 64, 0);
    br_gemm g = {.m = 64, .n = 64, .k = 64, .oscale = 1.0f, .c = c, .beta = -1.0f};
    CHECK_OK(ctx, br_mm_stage(ctx, a, p, NULL, g, d, t, 64, 1.0f));
    CHECK_OK(ctx, br_mm_stage(ctx, a, p, o, g, d, t, 64, 1.0f));
    br_gemm nc = g;
    nc.c = NULL;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "c", br_mm_stage(ctx, a, p, o, nc, d, t, 64, 1.0f));
    br_buf *c65 = t_buf_poison(ctx, BR_F32, 64 * 65, 0),
           *o65 = t_buf_poison(ctx, BR_F32, 64 * 65, 0);
    br_gemm wide = g;
    wide.ldo = 65, wide.c = c65;
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "ldo", br_mm_stage(ctx, a, p, o65, wide, d, t, 64, 1.0f));
    br_buf_free(c65), br_buf_free(o65);
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "ld", br_mm_stage(ctx, a, p, o, g, d, t, 63, 1.0f));
    CHECK_OK(ctx, br_mm_stage(ctx, a, p, o, g, d, NULL, 64, 1.0f)); /* dst_t is optional */
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "dst", br_mm_stage(ctx, a, p, o, g, NULL, t, 64, 1.0f));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps", br_mm_stage(ctx, a, p, o, g, d, d, 64, 1.0f));
    br_buf *big = t_buf_poison(ctx, BR_F16, 128 * 64, 0); /* act in its first half */
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "act", br_mm_stage(ctx, big, p, o, g, d, big, 64, 1.0f));
    br_buf_free(big);
    CHECK_FAILS(ctx, BR_E_NONFINITE, br_mm_stage(ctx, a, p, o, g, d, t, 64, NAN));
    CHECK_FAILS(ctx, BR_E_SIZE, br_mm_stage(ctx, a, p, o, g, d, t, 128, 1.0f));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_mm_stage(ctx, a, p, o, g, c, t, 64, 1.0f));
    /* an f16 c: accepted, never in place (out is f32), the wrong size named; br_mm
     * itself takes only an f32 c */
    br_buf *ch = t_buf_poison(ctx, BR_F16, 64 * 64, 0),
           *ch_small = t_buf_poison(ctx, BR_F16, 64, 0);
    br_gemm gh = g;
    gh.c = ch;
    CHECK_OK(ctx, br_mm_stage(ctx, a, p, o, gh, d, t, 64, 1.0f));
    CHECK_OK(ctx, br_mm_stage(ctx, a, p, NULL, gh, d, t, 64, 1.0f));
    gh.c = d;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps", br_mm_stage(ctx, a, p, o, gh, d, t, 64, 1.0f));
    gh.c = ch_small;
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "c", br_mm_stage(ctx, a, p, o, gh, d, t, 64, 1.0f));
    gh.c = ch;
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "c", br_mm(ctx, a, p, o, gh));
    br_buf_free(ch), br_buf_free(ch_small);
    br_buf_free(a), br_buf_free(p), br_buf_free(c), br_buf_free(o), br_buf_free(d), br_buf_free(t);
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- mm_colsum */

/* n f16 values of either sign, magnitudes in [2^-3, 1): never zero, so a term left
 * out or added twice changes a sum. */
static uint16_t *rand_f16_nz(br_rng *r, size_t n) {
    uint16_t *h = t_xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        float x = ldexpf(0.5f + 0.5f * (float)br_rng_unit(r), -(int)t_rand_size(r, 0, 2));
        h[i] = br_half_from_float(br_rng_u64(r) & 1 ? -x : x);
    }
    return h;
}

/* One shape of br_mm_colsum_grouped against br_mm + br_colsum_fused_grouped (its
 * definition) on the same device, sum and dst compared bit for bit on separate
 * outputs that start alike: sum random (accumulate) or NaN (overwritten) in its
 * groups, random between them (must survive); dst NaN (its pad rows must be written
 * +0). act has br_pad_rows(m) rows of lda with NaN past row m and column k (never to
 * be read: a sum over a row past m gives NaN), col NaN between its groups. graph:
 * the fused op recorded and launched as a graph. */
static void mm_colsum_case(br_ctx *ctx, br_rng *rng, size_t m, size_t n, size_t k, size_t group,
                           size_t stride, size_t lda, size_t off, int accumulate, int graph) {
    const float gs = 16.0f; /* the layer's gradient scale: oscale 1/gs, dst's scale gs */
    const size_t ld = lda ? lda : k, na = br_pad_rows(m) * ld, nd = br_pad_rows(m) * n;
    const size_t span = group ? (n / group - 1) * stride + group : n;
    uint16_t *act = t_xmalloc(na * sizeof *act), *vals = rand_f16_nz(rng, m * k);
    for (size_t i = 0; i < na; i++)
        act[i] = T_NAN16;
    for (size_t i = 0; i < m; i++)
        memcpy(act + i * ld, vals + i * k, k * sizeof *act);
    uint16_t *plane = rand_f16_nz(rng, n * k);
    float *a = rand_wide(rng, m * n), *col = rand_wide(rng, span), *sum0 = rand_wide(rng, span);
    for (size_t i = 0; i < span; i++) {
        const int in = !group || i % stride < group;
        if (!in) memcpy(&col[i], &(uint32_t){T_NAN32}, 4);
        if (in && !accumulate) memcpy(&sum0[i], &(uint32_t){T_NAN32}, 4);
    }
    br_buf *pa, *pp, *pab, *pc;
    br_buf *bact = input_at(ctx, BR_F16, act, na, off, &pa);
    br_buf *bplane = input_at(ctx, BR_F16, plane, n * k, off, &pp);
    br_buf *ba = input_at(ctx, BR_F32, a, m * n, off, &pab);
    br_buf *bcol = input_at(ctx, BR_F32, col, span, off, &pc);
    br_buf *b[2], *sum[2], *dst[2], *pb[2], *ps[2], *pd[2]; /* 0: the definition, 1: fused */
    for (int v = 0; v < 2; v++) {
        b[v] = view_at(ctx, BR_F32, m * n, off, T_NAN32, &pb[v]);
        sum[v] = input_at(ctx, BR_F32, sum0, span, off, &ps[v]);
        dst[v] = view_at(ctx, BR_F16, nd, off, T_NAN16, &pd[v]);
    }
    br_gemm g = {.m = m, .n = n, .k = k, .lda = lda, .oscale = 1.0f / gs};
    br_fuse f[2];
    for (int v = 0; v < 2; v++)
        f[v] = (br_fuse){.kind = BR_FUSE_CVT_B, .col = bcol, .dst = dst[v], .scale = gs};
    CHECK_OK(ctx, br_mm(ctx, bact, bplane, b[0], g));
    CHECK_OK(ctx, br_colsum_fused_grouped(ctx, ba, b[0], sum[0], m, n, &f[0], group, stride,
                                          accumulate));
    if (graph) {
        br_graph *gr = NULL;
        CHECK_OK(ctx, br_graph_begin(ctx));
        CHECK_OK(ctx, br_mm_colsum_grouped(ctx, bact, bplane, b[1], g, ba, sum[1], &f[1], group,
                                           stride, accumulate));
        CHECK_OK(ctx, br_graph_end(ctx, &gr));
        CHECK_OK(ctx, br_graph_launch(gr));
        br_graph_free(gr);
    } else {
        CHECK_OK(ctx, br_mm_colsum_grouped(ctx, bact, bplane, b[1], g, ba, sum[1], &f[1], group,
                                           stride, accumulate));
    }
    float *s0 = t_download_f32(ctx, sum[0], span), *s1 = t_download_f32(ctx, sum[1], span);
    uint16_t *d0 = t_download_f16(ctx, dst[0], nd), *d1 = t_download_f16(ctx, dst[1], nd);
    size_t bad = t_bits_differ32(s0, s1, span), bad_d = t_bits_differ16(d0, d1, nd), kept = 0;
    for (size_t i = 0; group && i < span; i++) /* between the groups: the preset */
        kept += i % stride >= group && memcmp(&s1[i], &sum0[i], 4) != 0;
    CHECK(bad == 0 && kept == 0,
          "mm_colsum %zux%zux%zu group=%zu stride=%zu lda=%zu off=%zu acc=%d graph=%d: "
          "sum differs in %zu of %zu (first %zu), %zu between the groups written",
          m, n, k, group, stride, lda, off, accumulate, graph, bad, span,
          t_first_diff32(s0, s1, span), kept);
    CHECK(bad_d == 0,
          "mm_colsum %zux%zux%zu group=%zu stride=%zu lda=%zu off=%zu acc=%d graph=%d: "
          "dst differs in %zu of %zu (first %zu)",
          m, n, k, group, stride, lda, off, accumulate, graph, bad_d, nd,
          t_first_diff16(d0, d1, nd));
    free(s0), free(s1), free(d0), free(d1);
    free(act), free(vals), free(plane), free(a), free(col), free(sum0);
    free_view(bact, pa), free_view(bplane, pp), free_view(ba, pab), free_view(bcol, pc);
    for (int v = 0; v < 2; v++)
        free_view(b[v], pb[v]), free_view(sum[v], ps[v]), free_view(dst[v], pd[v]);
}

/* The layer's B and dℓ shapes (T × P·r, K = mpad, ℓ in groups of r a path apart),
 * plain columns (one with lda past k), tiny and odd ones (buffers at odd offsets); each
 * accumulating and overwriting, directly and as a graph. */
static void mm_colsum_matches_mm_then_colsum_fused(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(72);
    /* m, n, k, group, stride, lda, off */
    static const size_t shapes[][7] = {{700, 256, 2048, 128, 200, 0, 0},
                                       {4096, 1024, 512, 512, 600, 0, 0},
                                       {300, 384, 64, 0, 0, 72, 0},
                                       {64, 128, 32, 0, 0, 0, 3},
                                       {129, 200, 96, 100, 130, 104, 3}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const size_t *s = shapes[c];
        if (too_big(s[0] * s[1])) continue;
        for (int acc = 0; acc < 2; acc++)
            for (int graph = 0; graph < 2; graph++)
                mm_colsum_case(ctx, &rng, s[0], s[1], s[2], s[3], s[4], s[5], s[6], acc, graph);
    }
    br_ctx_free(ctx);
}

/* Every refusal of what the fused form lacks (BR_E_ARG, or BR_E_SHAPE for b not a
 * whole matrix; naming it), the two front-ends' own checks under the fused op's name,
 * and outputs overlapping inputs; none writes anything (b, sum and dst keep their
 * poison). */
static void mm_colsum_bad_arguments(void) {
    br_ctx *ctx = t_ctx();
    const size_t m = 64, n = 128, k = 64, group = 64, stride = 100, span = stride + group;
    const size_t nd = br_pad_rows(m) * n;
    br_buf *act = t_buf_poison(ctx, BR_F16, m * k, 0x3c00u),
           *plane = t_buf_poison(ctx, BR_F16, n * k, 0x3c00u);
    br_buf *a = t_buf_poison(ctx, BR_F32, m * n, 0x3f800000u),
           *col = t_buf_poison(ctx, BR_F32, span, 0x3f800000u);
    br_buf *b = t_buf_poison(ctx, BR_F32, m * n + 8 * m, T_NAN32),
           *sum = t_buf_poison(ctx, BR_F32, span, T_NAN32);
    br_buf *dst = t_buf_poison(ctx, BR_F16, nd, T_NAN16), *big = t_buf_poison(ctx, BR_F16, nd, 0);
    br_buf *cs = t_buf_poison(ctx, BR_F32, n, 0x3f800000u),
           *c = t_buf_poison(ctx, BR_F32, m * n, 0);
    br_gemm g = {.m = m, .n = n, .k = k, .oscale = 0.0625f};
    br_fuse f = {.kind = BR_FUSE_CVT_B, .col = col, .dst = dst, .scale = 16.0f};
#define MMCS(gg, ff, bb, aa, ss)                                                                   \
    br_mm_colsum_grouped(ctx, act, plane, bb, gg, aa, ss, ff, group, stride, 1)
    CHECK(br_mm_colsum_grouped(NULL, act, plane, b, g, a, sum, &f, group, stride, 1) == BR_E_ARG,
          "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "fuse", MMCS(g, NULL, b, a, sum));
    br_fuse bad = f;
    bad.kind = BR_FUSE_CVT_A;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "BR_FUSE_CVT_B", MMCS(g, &bad, b, a, sum));
    bad.kind = BR_FUSE_SCALE_B;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "BR_FUSE_CVT_B", MMCS(g, &bad, b, a, sum));
    bad = f;
    bad.dst_t = big;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "dst_t", MMCS(g, &bad, b, a, sum));
    br_gemm gg = g;
    gg.colscale = cs;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "colscale", MMCS(gg, &f, b, a, sum));
    gg = g;
    gg.c = c, gg.beta = 1.0f;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "or c", MMCS(gg, &f, b, a, sum));
    gg = g;
    gg.ocol = 8, gg.ldo = n + 8; /* a product br_mm itself would take (b holds it) */
    CHECK_OK(ctx, br_mm(ctx, act, plane, b, gg));
    CHECK(br_buf_fill(b, 0, m * n + 8 * m, T_NAN32) == BR_OK, "b re-poisoned");
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "ocol", MMCS(gg, &f, b, a, sum));
    gg.ocol = 0;
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "ldo", MMCS(gg, &f, b, a, sum));
    /* each front-end's own checks, named as the fused op's */
    gg = g;
    gg.k = 48;
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "br_mm_colsum_grouped: k", MMCS(gg, &f, b, a, sum));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "groups",
                    br_mm_colsum_grouped(ctx, act, plane, b, g, a, sum, &f, 48, 48, 1));
    bad = f;
    bad.scale = NAN;
    CHECK_FAILS(ctx, BR_E_NONFINITE, MMCS(g, &bad, b, a, sum));
    br_buf *v = sub(sum, 0, span - 1);
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "sum", MMCS(g, &f, b, a, v));
    br_buf_free(v);
    /* outputs over inputs, and over each other */
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "b overlaps a", MMCS(g, &f, a, a, sum));
    v = sub(b, 3, span);
    bad = f;
    bad.col = v;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "b overlaps fuse->col", MMCS(g, &bad, b, a, sum));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "sum overlaps b", MMCS(g, &f, b, a, v));
    br_buf_free(v);
    bad = f;
    bad.dst = big;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "fuse->dst overlaps act",
                    br_mm_colsum_grouped(ctx, big, plane, b, g, a, sum, &bad, group, stride, 1));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "fuse->dst overlaps plane",
                    br_mm_colsum_grouped(ctx, act, big, b, g, a, sum, &bad, group, stride, 1));
    v = sub(a, 5, span);
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "sum overlaps a", MMCS(g, &f, b, a, v));
    br_buf_free(v);
#undef MMCS
    float *gb = t_download_f32(ctx, b, m * n + 8 * m), *gs = t_download_f32(ctx, sum, span);
    uint16_t *gd = t_download_f16(ctx, dst, nd);
    CHECK(t_count_written32(gb, m * n + 8 * m) == 0 && t_count_written32(gs, span) == 0 &&
              t_count_written16(gd, nd) == 0,
          "a refused call wrote its outputs");
    free(gb), free(gs), free(gd);
    /* the arguments refused above were the only fault: ldo 0 or n both whole */
    CHECK_OK(ctx, br_mm_colsum_grouped(ctx, act, plane, b, g, a, sum, &f, group, stride, 1));
    gg = g;
    gg.ldo = n;
    CHECK_OK(ctx, br_mm_colsum_grouped(ctx, act, plane, b, gg, a, sum, &f, group, stride, 0));
    br_buf_free(act), br_buf_free(plane), br_buf_free(a), br_buf_free(col), br_buf_free(b),
        br_buf_free(sum), br_buf_free(dst), br_buf_free(big), br_buf_free(cs), br_buf_free(c);
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

/* The checks the paths ops add: paths 0, strides that let outputs overlap, buffers
 * too small for the last path, stride overflow, spans of outputs overlapping
 * inputs or each other; strides that do not matter (paths = 1, input strides 0,
 * NULL buffers) are accepted. */
static void layer_ops_paths_bad_arguments(void) {
    br_ctx *ctx = t_ctx();
    const size_t rows = 64, r = 64, P = 2, nb = rows * r / 32, n = rows * r, huge = (size_t)1 << 40;
    br_buf *bits = t_buf_poison(ctx, BR_U32, 2 * nb + 10, 0x5a5a5a5au);
    br_buf *f = t_buf_poison(ctx, BR_F32, 128 * 128, 0x3f800000u); /* mat, rowscale */
    br_buf *g = t_buf_poison(ctx, BR_F32, 128 * 128, 0), *d = t_buf_poison(ctx, BR_F32, 128, 0);
    br_buf *h = t_buf_poison(ctx, BR_F16, 128 * 128, 0), *v = NULL, *w = NULL;

    /* expand_scaled_paths: plane_t [P·r][ld], bits (P−1)·stride + rows·r/32 */
    CHECK_OK(ctx, br_expand_scaled_paths(ctx, bits, nb + 5, rows, r, f, rows + 1, 1, h, 64, P));
    CHECK_OK(ctx, br_expand_scaled_paths(ctx, bits, 0, rows, r, d, 0, 1, h, 64, 3));
    CHECK_OK(ctx, br_expand_scaled_paths(ctx, bits, huge, rows, r, f, huge, 1, h, 64, 1));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "paths",
                    br_expand_scaled_paths(ctx, bits, nb, rows, r, f, rows, 1, h, 64, 0));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "bits",
                    br_expand_scaled_paths(ctx, bits, nb + 11, rows, r, f, rows, 1, h, 64, P));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "rowscale",
                    br_expand_scaled_paths(ctx, bits, nb, rows, r, d, rows + 1, 1, h, 64, P));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "bits_stride",
                    br_expand_scaled_paths(ctx, bits, huge, rows, r, f, rows, 1, h, 64, P));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "scale_stride",
                    br_expand_scaled_paths(ctx, bits, nb, rows, r, f, huge, 1, h, 64, P));
    v = sub(h, 0, P * r * 64 - 1);
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "plane_t",
                    br_expand_scaled_paths(ctx, bits, nb, rows, r, f, rows, 1, v, 64, P));
    br_buf_free(v);
    /* expand_scaled_rows_paths: plane [rows][ld], ld ≥ P·r, (rows − 1)·ld + P·r */
    CHECK_OK(ctx, br_expand_scaled_rows_paths(ctx, bits, nb, rows, r, f, rows, 1, h, P * r, P));
    v = sub(h, 0, (rows - 1) * 136 + P * r);
    CHECK_OK(ctx, br_expand_scaled_rows_paths(ctx, bits, nb, rows, r, f, rows, 1, v, 136, P));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "plane",
                    br_expand_scaled_rows_paths(ctx, bits, nb, rows, r, f, rows, 1, v, 144, P));
    br_buf_free(v);
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "paths·r",
                    br_expand_scaled_rows_paths(ctx, bits, nb, rows, r, f, rows, 1, h, 120, P));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "bits",
                    br_expand_scaled_rows_paths(ctx, bits, 2 * nb, rows, r, f, rows, 1, h, 128, P));

    /* sign_rowdot_paths: mat [rows][128], columns col0 + p·r.. */
    CHECK_OK(ctx, br_sign_rowdot_paths(ctx, f, 128, 0, bits, nb + 5, f, rows + 1, g, n + 1, d, rows,
                                       rows, r, P, 0));
    CHECK_OK(ctx,
             br_sign_rowdot_paths(ctx, f, 128, 64, bits, huge, f, huge, g, 0, d, 0, rows, r, 1, 1));
    CHECK_OK(ctx,
             br_sign_rowdot_paths(ctx, f, 128, 0, NULL, huge, f, 0, g, n, NULL, 0, rows, r, P, 0));
    CHECK_FAILS_MSG(
        ctx, BR_E_SHAPE, "paths",
        br_sign_rowdot_paths(ctx, f, 128, 0, bits, nb, f, rows, g, n, d, rows, rows, r, 0, 0));
    CHECK_FAILS_MSG(
        ctx, BR_E_SHAPE, "ldm",
        br_sign_rowdot_paths(ctx, f, 128, 8, bits, nb, f, rows, g, n, d, rows, rows, r, P, 0));
    CHECK_FAILS_MSG(
        ctx, BR_E_SHAPE, "grad_stride",
        br_sign_rowdot_paths(ctx, f, 128, 0, bits, nb, f, rows, g, n - 1, d, rows, rows, r, P, 0));
    CHECK_FAILS_MSG(
        ctx, BR_E_SHAPE, "grad_stride",
        br_sign_rowdot_paths(ctx, f, 128, 0, bits, nb, f, rows, g, 0, NULL, 0, rows, r, P, 1));
    CHECK_FAILS_MSG(
        ctx, BR_E_SHAPE, "dsum_stride",
        br_sign_rowdot_paths(ctx, f, 128, 0, bits, nb, f, rows, g, n, d, rows - 1, rows, r, P, 0));
    CHECK_FAILS_MSG(
        ctx, BR_E_SIZE, "grad",
        br_sign_rowdot_paths(ctx, f, 128, 0, bits, nb, f, rows, g, 4 * n, d, rows, rows, r, P, 0));
    CHECK_FAILS_MSG(
        ctx, BR_E_SIZE, "dsum",
        br_sign_rowdot_paths(ctx, f, 128, 0, bits, nb, f, rows, g, n, d, rows + 1, rows, r, P, 0));
    CHECK_FAILS_MSG(
        ctx, BR_E_SIZE, "bits",
        br_sign_rowdot_paths(ctx, f, 128, 0, bits, nb + 11, f, rows, g, n, d, rows, rows, r, P, 0));
    CHECK_FAILS_MSG(
        ctx, BR_E_SIZE, "rowscale",
        br_sign_rowdot_paths(ctx, f, 128, 0, bits, nb, d, rows + 1, g, n, d, rows, rows, r, P, 0));
    CHECK_FAILS_MSG(
        ctx, BR_E_OVERFLOW, "grad_stride",
        br_sign_rowdot_paths(ctx, f, 128, 0, bits, nb, f, rows, g, huge, NULL, 0, rows, r, P, 0));
    /* grad and dsum in one buffer: apart (as the layer's G and dh) is fine; dsum inside
     * path 1's grad is not; nor is dsum in the gaps between the paths' grads (their
     * spans overlap: checked on spans, not on elements) */
    v = sub(g, 3 * n, 2 * rows);
    CHECK_OK(ctx, br_sign_rowdot_paths(ctx, f, 128, 0, bits, nb, f, rows, g, n + 5, v, rows, rows,
                                       r, P, 1));
    br_buf_free(v);
    v = sub(g, n + rows, 2 * rows);
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps",
                    br_sign_rowdot_paths(ctx, f, 128, 0, bits, nb, f, rows, g, n + rows, v, rows,
                                         rows, r, P, 0));
    br_buf_free(v);
    v = sub(g, n, n + 2 * rows);
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps",
                    br_sign_rowdot_paths(ctx, f, 128, 0, bits, nb, f, rows, g, n + rows, v,
                                         n + rows, rows, r, P, 0));
    br_buf_free(v);
    /* outputs over inputs: grad over mat's tail; dsum over path 1's rowscale */
    v = sub(f, 128 * rows - 10, n);
    CHECK_FAILS_MSG(
        ctx, BR_E_ARG, "mat",
        br_sign_rowdot_paths(ctx, f, 128, 0, bits, nb, d, 0, v, n, NULL, 0, rows, r, 1, 0));
    br_buf_free(v);
    v = sub(g, 0, 200 + rows);     /* rowscale of path 1 at 200.. */
    w = sub(g, 250, 2 * rows + 8); /* dsum: from 250 */
    br_buf *g2 = t_buf_poison(ctx, BR_F32, 2 * n, 0);
    CHECK_FAILS_MSG(
        ctx, BR_E_ARG, "rowscale",
        br_sign_rowdot_paths(ctx, f, 128, 0, bits, nb, v, 200, g2, n, w, rows + 8, rows, r, P, 0));
    br_buf_free(w);
    w = sub(g, 264, 2 * rows + 8); /* just past rowscale's span: apart */
    CHECK_OK(ctx, br_sign_rowdot_paths(ctx, f, 128, 0, bits, nb, v, 200, g2, n, w, rows + 8, rows,
                                       r, P, 0));
    br_buf_free(w), br_buf_free(v), br_buf_free(g2);

    br_buf_free(bits), br_buf_free(f), br_buf_free(g), br_buf_free(d), br_buf_free(h);
    br_ctx_free(ctx);
}

/* br_expand_scaled2: each job's own checks (messages naming the job), then the
 * planes apart from each other (adjacent views are fine, one element shared is
 * not; a rows plane's whole span counts, gaps between its rows included). */
static void expand_scaled2_bad_arguments(void) {
    br_ctx *ctx = t_ctx();
    const size_t rows = 64, r = 64, P = 2, nb = rows * r / 32, nt = P * r * 64;
    const size_t nr = (rows - 1) * 200 + P * r; /* rows plane at ld = 200 */
    br_buf *bits = t_buf_poison(ctx, BR_U32, 2 * nb, 0x5a5a5a5au);
    br_buf *f = t_buf_poison(ctx, BR_F32, 2 * rows, 0x3f800000u);
    br_buf *h = t_buf_poison(ctx, BR_F16, nt + nr, 0), *g = t_buf_poison(ctx, BR_F32, nt, 0);
    br_buf *pt = sub(h, 0, nt), *prow = sub(h, nt, nr), *v = NULL;
    br_expand_job job[2] = {{.bits = bits,
                             .bits_stride = nb,
                             .rows = rows,
                             .r = r,
                             .rowscale = f,
                             .scale_stride = rows,
                             .scale = 1.0f,
                             .plane = pt,
                             .ld = 64,
                             .paths = P,
                             .by_rows = 0}};
    job[1] = job[0]; /* the same inputs, by rows into the plane after it */
    job[1].plane = prow, job[1].ld = 200, job[1].by_rows = 1;
    br_expand_job bad[2];
    CHECK_OK(ctx, br_expand_scaled2(ctx, job)); /* adjacent planes, shared inputs */
    CHECK(br_expand_scaled2(NULL, job) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "job", br_expand_scaled2(ctx, NULL));
    /* each job's checks, naming the job */
    memcpy(bad, job, sizeof bad);
    bad[1].ld = 120; /* < paths·r */
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "job 1", br_expand_scaled2(ctx, bad));
    CHECK(strstr(br_ctx_error(ctx), "ld") != NULL, "message \"%s\" does not name ld",
          br_ctx_error(ctx));
    memcpy(bad, job, sizeof bad);
    bad[0].r = 48;
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "job 0", br_expand_scaled2(ctx, bad));
    memcpy(bad, job, sizeof bad);
    bad[1].plane = g;
    CHECK_FAILS(ctx, BR_E_DTYPE, br_expand_scaled2(ctx, bad));
    memcpy(bad, job, sizeof bad);
    bad[0].plane = NULL;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "plane_t", br_expand_scaled2(ctx, bad));
    memcpy(bad, job, sizeof bad);
    bad[1].bits_stride = 2 * nb; /* path 1's bitmap past the buffer */
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "bits", br_expand_scaled2(ctx, bad));
    memcpy(bad, job, sizeof bad);
    bad[0].scale = NAN;
    CHECK_FAILS(ctx, BR_E_NONFINITE, br_expand_scaled2(ctx, bad));
    memcpy(bad, job, sizeof bad);
    bad[1].paths = 0;
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "paths", br_expand_scaled2(ctx, bad));
    /* the planes: the same buffer; one element shared; a plane between the rows
     * plane's rows (its columns past paths·r: unwritten, still refused) */
    memcpy(bad, job, sizeof bad);
    bad[1] = job[0];
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps", br_expand_scaled2(ctx, bad));
    memcpy(bad, job, sizeof bad);
    v = sub(h, nt - 1, nr);
    bad[1].plane = v;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps", br_expand_scaled2(ctx, bad));
    br_buf_free(v);
    br_buf *w = sub(h, nt + P * r, 32);
    memcpy(bad, job, sizeof bad);
    bad[0] = (br_expand_job){.bits = bits,
                             .rows = 1,
                             .r = 32,
                             .rowscale = f,
                             .scale = 1.0f,
                             .plane = w,
                             .ld = 32,
                             .paths = 1,
                             .by_rows = 1};
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps", br_expand_scaled2(ctx, bad));
    br_buf_free(w);
    br_buf_free(pt), br_buf_free(prow);
    br_buf_free(bits), br_buf_free(f), br_buf_free(h), br_buf_free(g);
    br_ctx_free(ctx);
}

T_RUN("layer_ops", T_CASE(expand_scaled_matches_reference), T_CASE(sign_rowdot_matches_reference),
      T_CASE(expand_scaled_paths_match_single), T_CASE(expand_scaled_tiles_match_reference),
      T_CASE(expand_scaled2_matches_two_ops), T_CASE(expand_scaled2_bad_arguments),
      T_CASE(sign_rowdot_paths_match_single), T_CASE(layer_ops_paths_bad_arguments),
      T_CASE(cvt_both_matches_reference), T_CASE(mm_stage_matches_mm_then_cvt_both),
      T_CASE(mm_stage_bad_arguments), T_CASE(mm_colsum_matches_mm_then_colsum_fused),
      T_CASE(mm_colsum_bad_arguments), T_CASE(layer_ops_bad_arguments),
      T_CASE(grouped_columns_match_gathered))
