/* Elementwise ops (scale_acc, scale_acc2, f16_to_f32, add, split_qg) against
 * scalar C references of the exact arithmetic, bit for bit, on fresh random data
 * (magnitudes reaching the f32 subnormals); outputs poisoned first. */
#include <float.h>

#include "harness.h"

/* n finite nonzero floats, random signs; one in eight with a magnitude down to
 * 2^-66 so that products reach the f32 subnormals (kept, unless the device says it
 * flushes them: g_ftz below). */
static float *wide_data(br_rng *r, size_t n) {
    float *v = t_xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        float mant = br_rng_sym(r);
        if (mant == 0.0f) mant = 0.75f;
        int e = br_rng_u64(r) % 8 == 0 ? (int)t_rand_size(r, 0, 86) - 66
                                       : (int)t_rand_size(r, 0, 16) - 8;
        v[i] = ldexpf(mant, e);
    }
    return v;
}

static void pick_shape(br_rng *r, int i, size_t *m, size_t *k) {
    static const size_t fixed[][2] = {{1, 1}, {1, 1000}, {257, 1}, {64, 1024}, {3, 31}};
    t_pick_shape2(r, fixed, sizeof fixed / sizeof fixed[0], (size_t)i, 1, 300, 1, 300, m, k);
}

/* Whether the device under test flushes f32 subnormal results to zero (its
 * description says so: a Vulkan driver may, whatever the shader asks); the references
 * then flush each rounded result as the device does, and still match bit for bit. */
static int g_ftz;

static void note_ftz(br_ctx *ctx) {
    g_ftz = strstr(br_ctx_device(ctx), "f32 subnormals flushed") != NULL;
    if (g_ftz) fprintf(stderr, "  %s: references flush subnormal results too\n", br_ctx_device(ctx));
}

static float ftz(float x) { return g_ftz && x != 0.0f && fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }

/* got[0..n) equals want bit for bit; got[n..n+extra) still NaN-poisoned. */
static void check_bits32(const float *got, const float *want, size_t n, size_t extra,
                         const char *what, size_t m, size_t k) {
    size_t bad = t_bits_differ32(got, want, n), i = t_first_diff32(got, want, n);
    CHECK(bad == 0, "%s m=%zu k=%zu: %zu of %zu differ (first at %zu: %a, want %a)", what, m, k,
          bad, n, i, i < n ? (double)got[i] : 0.0, i < n ? (double)want[i] : 0.0);
    size_t touched = t_count_written32(got + n, extra);
    CHECK(touched == 0, "%s m=%zu k=%zu: %zu elements past the output were written", what, m, k,
          touched);
}

static void scale_acc_matches_reference(void) {
    br_ctx *ctx = t_ctx();
    note_ftz(ctx);
    br_rng r = t_rng_for(11);
    for (int i = 0; i < 12; i++) {
        size_t m, k;
        pick_shape(&r, i, &m, &k);
        size_t n = m * k, extra = 5;
        float *a = wide_data(&r, n), *col = wide_data(&r, k), *prev = wide_data(&r, n);
        br_buf *ba = t_buf_from(ctx, BR_F32, a, n), *bcol = t_buf_from(ctx, BR_F32, col, k);
        float *want = t_xmalloc(n * sizeof *want);
        for (int acc = 0; acc < 2; acc++) {
            br_buf *out = t_buf_poison(ctx, BR_F32, n + extra, T_NAN32);
            if (acc) CHECK_OK(ctx, br_buf_upload(out, 0, prev, n));
            CHECK_OK(ctx, br_scale_acc(ctx, ba, bcol, out, m, k, acc));
            for (size_t e = 0; e < n; e++) {
                float v = ftz(a[e] * col[e % k]);
                want[e] = acc ? ftz(prev[e] + v) : v;
            }
            float *got = t_download_f32(ctx, out, n + extra);
            check_bits32(got, want, n, extra, acc ? "scale_acc accumulate" : "scale_acc", m, k);
            free(got);
            br_buf_free(out);
        }
        /* in place: out is a itself */
        CHECK_OK(ctx, br_scale_acc(ctx, ba, bcol, ba, m, k, 1));
        for (size_t e = 0; e < n; e++) {
            float v = ftz(a[e] * col[e % k]);
            want[e] = ftz(a[e] + v);
        }
        float *got = t_download_f32(ctx, ba, n);
        check_bits32(got, want, n, 0, "scale_acc in place", m, k);
        free(got);
        free(want);
        free(a);
        free(col);
        free(prev);
        br_buf_free(ba);
        br_buf_free(bcol);
    }
    br_ctx_free(ctx);
}

/* scale_acc2 gives the bits of scale_acc then scale_acc(accumulate). */
static void scale_acc2_is_two_passes(void) {
    br_ctx *ctx = t_ctx();
    note_ftz(ctx);
    br_rng r = t_rng_for(12);
    for (int i = 0; i < 10; i++) {
        size_t m, k;
        if (i == 0) {
            m = 64;
            k = 1024;
        } else {
            pick_shape(&r, i, &m, &k);
        }
        size_t n = m * k;
        float *a0 = wide_data(&r, n), *a1 = wide_data(&r, n);
        float *c0 = wide_data(&r, k), *c1 = wide_data(&r, k);
        br_buf *ba0 = t_buf_from(ctx, BR_F32, a0, n), *ba1 = t_buf_from(ctx, BR_F32, a1, n);
        br_buf *bc0 = t_buf_from(ctx, BR_F32, c0, k), *bc1 = t_buf_from(ctx, BR_F32, c1, k);
        br_buf *two = t_buf_poison(ctx, BR_F32, n, T_NAN32);
        br_buf *one = t_buf_poison(ctx, BR_F32, n + 3, T_NAN32);
        CHECK_OK(ctx, br_scale_acc(ctx, ba0, bc0, two, m, k, 0));
        CHECK_OK(ctx, br_scale_acc(ctx, ba1, bc1, two, m, k, 1));
        CHECK_OK(ctx, br_scale_acc2(ctx, ba0, bc0, ba1, bc1, one, m, k));
        float *want = t_download_f32(ctx, two, n), *got = t_download_f32(ctx, one, n + 3);
        check_bits32(got, want, n, 3, "scale_acc2 vs two scale_acc", m, k);
        /* and both are the reference: fl(fl(a0·c0) + fl(a1·c1)) */
        float *ref = t_xmalloc(n * sizeof *ref);
        for (size_t e = 0; e < n; e++) {
            float v0 = ftz(a0[e] * c0[e % k]), v1 = ftz(a1[e] * c1[e % k]);
            ref[e] = ftz(v0 + v1);
        }
        check_bits32(want, ref, n, 0, "two scale_acc vs reference", m, k);
        /* in place over a1 */
        CHECK_OK(ctx, br_scale_acc2(ctx, ba0, bc0, ba1, bc1, ba1, m, k));
        float *inplace = t_download_f32(ctx, ba1, n);
        check_bits32(inplace, ref, n, 0, "scale_acc2 in place", m, k);
        free(inplace);
        free(ref);
        free(want);
        free(got);
        free(a0);
        free(a1);
        free(c0);
        free(c1);
        br_buf *bufs[] = {ba0, ba1, bc0, bc1, two, one};
        for (size_t j = 0; j < 6; j++)
            br_buf_free(bufs[j]);
    }
    br_ctx_free(ctx);
}

/* f16 → f32 of every one of the 65536 patterns, against a decode in double. */
static void f16_to_f32_every_pattern(void) {
    br_ctx *ctx = t_ctx();
    size_t n = 65536, off = 3;
    uint16_t *h = t_xmalloc((n + off) * sizeof *h);
    for (size_t i = 0; i < n + off; i++)
        h[i] = (uint16_t)((i + 12345) & 0xffff);
    br_buf *src = t_buf_from(ctx, BR_F16, h, n + off), *view;
    CHECK_OK(ctx, br_buf_view(src, off, n, &view));
    br_buf *dst = t_buf_poison(ctx, BR_F32, n + 4, T_NAN32);
    CHECK_OK(ctx, br_f16_to_f32(ctx, view, dst, n));
    float *got = t_download_f32(ctx, dst, n + 4);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = (float)t_f16_value(h[off + i]);
        if (isnan(want)) { /* a NaN pattern: any NaN will do */
            bad += !isnan(got[i]);
            continue;
        }
        bad += memcmp(&want, &got[i], 4) != 0;
    }
    CHECK(bad == 0, "f16_to_f32: %zu of 65536 patterns wrong", bad);
    for (size_t i = n; i < n + 4; i++)
        CHECK(isnan(got[i]), "element %zu past n was written", i);
    free(got);
    free(h);
    br_buf_free(view);
    br_buf_free(src);
    br_buf_free(dst);
    br_ctx_free(ctx);
}

static void add_matches_reference(void) {
    br_ctx *ctx = t_ctx();
    note_ftz(ctx);
    br_rng r = t_rng_for(13);
    static const size_t sizes[] = {1, 17, 1000, 65537, 0};
    for (int i = 0; i < 8; i++) {
        size_t n = i < 4 ? sizes[i] : t_rand_size(&r, 1, 5000);
        float *a = wide_data(&r, n), *b = wide_data(&r, n), *want = t_xmalloc(n * sizeof *want);
        for (size_t e = 0; e < n; e++)
            want[e] = ftz(a[e] + b[e]);
        /* 0: separate out, 1: out = a, 2: out = b */
        for (int alias = 0; alias < 3; alias++) {
            br_buf *ba = t_buf_from(ctx, BR_F32, a, n), *bb = t_buf_from(ctx, BR_F32, b, n);
            br_buf *own = t_buf_poison(ctx, BR_F32, n + 2, T_NAN32);
            br_buf *out = alias == 0 ? own : alias == 1 ? ba : bb;
            CHECK_OK(ctx, br_add(ctx, ba, bb, out, n));
            float *got = t_download_f32(ctx, out, n);
            check_bits32(got, want, n, 0, "add", n, (size_t)alias);
            free(got);
            if (alias == 0) {
                float *tail = t_download_f32(ctx, own, n + 2);
                CHECK(isnan(tail[n]) && isnan(tail[n + 1]), "add wrote past n");
                free(tail);
            }
            br_buf_free(ba);
            br_buf_free(bb);
            br_buf_free(own);
        }
        /* a = b = out: doubling */
        br_buf *ba = t_buf_from(ctx, BR_F32, a, n);
        CHECK_OK(ctx, br_add(ctx, ba, ba, ba, n));
        float *got = t_download_f32(ctx, ba, n);
        for (size_t e = 0; e < n; e++)
            want[e] = ftz(a[e] + a[e]);
        check_bits32(got, want, n, 0, "add a+a into a", n, 3);
        free(got);
        br_buf_free(ba);
        free(a);
        free(b);
        free(want);
    }
    br_ctx_free(ctx);
}

static void split_qg_matches_reference(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(14);
    static const size_t fixed[][3] = {{1, 1, 1}, {1, 3, 5}, {70, 2, 64}, {5, 16, 1}};
    for (int i = 0; i < 10; i++) {
        size_t m, heads, hd;
        t_pick_shape3(&r, fixed, sizeof fixed / sizeof fixed[0], (size_t)i, 1, 80, 1, 9, 1, 70, &m,
                      &heads, &hd);
        size_t half = m * heads * hd, full = 2 * half;
        float *qg = t_rand(&r, full, 4.0f), *q = t_rand(&r, half, 4.0f);
        float *gate = t_rand(&r, half, 4.0f);
        float *want_q = t_xmalloc(half * sizeof *want_q),
              *want_g = t_xmalloc(half * sizeof *want_g);
        float *want_qg = t_xmalloc(full * sizeof *want_qg);
        for (size_t t = 0; t < m; t++)
            for (size_t h = 0; h < heads; h++)
                for (size_t d = 0; d < hd; d++) {
                    size_t o = t * heads * hd + h * hd + d;         /* [m][heads·hd] */
                    size_t s = t * heads * 2 * hd + h * 2 * hd + d; /* [m][heads][2·hd] */
                    want_q[o] = qg[s];
                    want_g[o] = qg[s + hd];
                    want_qg[s] = q[o];
                    want_qg[s + hd] = gate[o];
                }
        /* split */
        br_buf *bqg = t_buf_from(ctx, BR_F32, qg, full);
        br_buf *bq = t_buf_poison(ctx, BR_F32, half + 2, T_NAN32);
        br_buf *bg = t_buf_poison(ctx, BR_F32, half + 2, T_NAN32);
        CHECK_OK(ctx, br_split_qg(ctx, bqg, bq, bg, m, heads, hd, 0));
        float *got_q = t_download_f32(ctx, bq, half + 2),
              *got_g = t_download_f32(ctx, bg, half + 2);
        check_bits32(got_q, want_q, half, 2, "split_qg q", m, heads * hd);
        check_bits32(got_g, want_g, half, 2, "split_qg gate", m, heads * hd);
        /* merge is the exact inverse: back into a poisoned qg */
        br_buf *back = t_buf_poison(ctx, BR_F32, full + 2, T_NAN32);
        CHECK_OK(ctx, br_split_qg(ctx, back, bq, bg, m, heads, hd, 1));
        float *got_back = t_download_f32(ctx, back, full + 2);
        check_bits32(got_back, qg, full, 2, "split then merge", m, heads * hd);
        /* merge of independent q, gate */
        br_buf *bq2 = t_buf_from(ctx, BR_F32, q, half), *bg2 = t_buf_from(ctx, BR_F32, gate, half);
        CHECK_OK(ctx, br_split_qg(ctx, back, bq2, bg2, m, heads, hd, 1));
        float *got_qg = t_download_f32(ctx, back, full);
        check_bits32(got_qg, want_qg, full, 0, "merge_qg", m, heads * hd);
        free(got_qg);
        free(got_back);
        free(got_q);
        free(got_g);
        br_buf *bufs[] = {bqg, bq, bg, back, bq2, bg2};
        for (size_t j = 0; j < 6; j++)
            br_buf_free(bufs[j]);
        free(qg);
        free(q);
        free(gate);
        free(want_q);
        free(want_g);
        free(want_qg);
    }
    br_ctx_free(ctx);
}

/* Bad arguments of scale_acc and scale_acc2: NULL, dtype, size, shape, overflow,
 * another context, aliasing that would make results order-dependent. */
static void scale_acc_bad_arguments(void) {
    br_ctx *ctx = t_ctx(), *other = t_cpu_ctx();
    size_t m = 6, k = 10, n = m * k;
    br_rng r = t_rng_for(15);
    float *data = t_rand(&r, 2 * n, 1.0f);
    br_buf *a = t_buf_from(ctx, BR_F32, data, n), *col = t_buf_from(ctx, BR_F32, data, k);
    br_buf *out = t_buf_poison(ctx, BR_F32, n, T_NAN32);
    br_buf *a16 = t_buf_poison(ctx, BR_F16, n, 0), *colu = t_buf_poison(ctx, BR_U32, k, 0);
    br_buf *short_a = t_buf_poison(ctx, BR_F32, n - 1, 0),
           *short_col = t_buf_poison(ctx, BR_F32, k - 1, 0);
    br_buf *foreign = t_buf_from(other, BR_F32, data, n);
    br_buf *big = t_buf_from(ctx, BR_F32, data, 2 * n), *lo, *shifted, *tail;
    CHECK_OK(ctx, br_buf_view(big, 0, n, &lo));
    CHECK_OK(ctx, br_buf_view(big, 1, n, &shifted));
    CHECK_OK(ctx, br_buf_view(big, n - 3, k, &tail));

    CHECK(br_scale_acc(NULL, a, col, out, m, k, 0) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "br_scale_acc: a is NULL",
                    br_scale_acc(ctx, NULL, col, out, m, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "col is NULL", br_scale_acc(ctx, a, NULL, out, m, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "out is NULL", br_scale_acc(ctx, a, col, NULL, m, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "a is a f16", br_scale_acc(ctx, a16, col, out, m, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "col is a u32", br_scale_acc(ctx, a, colu, out, m, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "a holds", br_scale_acc(ctx, short_a, col, out, m, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "col holds", br_scale_acc(ctx, a, short_col, out, m, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "out holds", br_scale_acc(ctx, a, col, short_a, m, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "m is 0", br_scale_acc(ctx, a, col, out, 0, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "k is 0", br_scale_acc(ctx, a, col, out, m, 0, 0));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "m·k",
                    br_scale_acc(ctx, a, col, out, (size_t)1 << 20, (size_t)1 << 20, 0));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "k =", br_scale_acc(ctx, a, col, out, 1, SIZE_MAX, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context",
                    br_scale_acc(ctx, foreign, col, out, m, k, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "different offset",
                    br_scale_acc(ctx, lo, col, shifted, m, k, 1));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "out overlaps col", br_scale_acc(ctx, a, tail, lo, m, k, 1));

    CHECK(br_scale_acc2(NULL, a, col, a, col, out, m, k) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "a1 is NULL", br_scale_acc2(ctx, a, col, NULL, col, out, m, k));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "col1 is NULL", br_scale_acc2(ctx, a, col, a, NULL, out, m, k));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "a0 is a f16",
                    br_scale_acc2(ctx, a16, col, a, col, out, m, k));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "col0 holds",
                    br_scale_acc2(ctx, a, short_col, a, col, out, m, k));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "out holds", br_scale_acc2(ctx, a, col, a, col, short_a, m, k));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "k is 0", br_scale_acc2(ctx, a, col, a, col, out, m, 0));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "m·k",
                    br_scale_acc2(ctx, a, col, a, col, out, (size_t)1 << 16, (size_t)1 << 16));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context",
                    br_scale_acc2(ctx, a, col, foreign, col, out, m, k));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps a1",
                    br_scale_acc2(ctx, a, col, lo, col, shifted, m, k));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps col1", br_scale_acc2(ctx, a, col, a, tail, lo, m, k));

    float *o = t_download_f32(ctx, out, n);
    size_t written = t_count_written32(o, n);
    CHECK(written == 0, "a failed call wrote %zu elements of out", written);
    free(o);
    br_buf *bufs[] = {a, col, out, a16, colu, short_a, short_col, lo, shifted, tail, big};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        br_buf_free(bufs[i]);
    br_buf_free(foreign);
    free(data);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

static void unary_bad_arguments(void) {
    br_ctx *ctx = t_ctx(), *other = t_cpu_ctx();
    size_t n = 40;
    br_buf *h = t_buf_poison(ctx, BR_F16, n, 0x3C00), *f = t_buf_poison(ctx, BR_F32, n, T_NAN32);
    br_buf *g = t_buf_poison(ctx, BR_F32, n, 0), *short_f = t_buf_poison(ctx, BR_F32, n - 1, 0);
    br_buf *short_h = t_buf_poison(ctx, BR_F16, n - 1, 0);
    br_buf *foreign = t_buf_poison(other, BR_F32, n, 0);
    br_buf *big = t_buf_poison(ctx, BR_F32, 2 * n, 0), *lo, *shifted;
    CHECK_OK(ctx, br_buf_view(big, 0, n, &lo));
    CHECK_OK(ctx, br_buf_view(big, 2, n, &shifted));

    CHECK(br_f16_to_f32(NULL, h, f, n) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "br_f16_to_f32: src is NULL", br_f16_to_f32(ctx, NULL, f, n));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "dst is NULL", br_f16_to_f32(ctx, h, NULL, n));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "src is a f32", br_f16_to_f32(ctx, g, f, n));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "dst is a f16", br_f16_to_f32(ctx, h, h, n));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "src holds", br_f16_to_f32(ctx, short_h, f, n));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "dst holds", br_f16_to_f32(ctx, h, short_f, n));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "n is 0", br_f16_to_f32(ctx, h, f, 0));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "n =", br_f16_to_f32(ctx, h, f, (size_t)1 << 33));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context", br_f16_to_f32(ctx, h, foreign, n));

    CHECK(br_add(NULL, g, g, f, n) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "br_add: b is NULL", br_add(ctx, g, NULL, f, n));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "out is NULL", br_add(ctx, g, g, NULL, n));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "a is a f16", br_add(ctx, h, g, f, n));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "b holds", br_add(ctx, g, short_f, f, n));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "n is 0", br_add(ctx, g, g, f, 0));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "n =", br_add(ctx, g, g, f, SIZE_MAX));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context", br_add(ctx, g, foreign, f, n));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps b", br_add(ctx, g, lo, shifted, n));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps a", br_add(ctx, shifted, g, lo, n));

    float *o = t_download_f32(ctx, f, n);
    size_t written = t_count_written32(o, n);
    CHECK(written == 0, "a failed call wrote %zu elements", written);
    free(o);
    br_buf *bufs[] = {h, f, g, short_f, short_h, lo, shifted, big};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        br_buf_free(bufs[i]);
    br_buf_free(foreign);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

static void split_qg_bad_arguments(void) {
    br_ctx *ctx = t_ctx(), *other = t_cpu_ctx();
    size_t m = 3, heads = 2, hd = 5, half = m * heads * hd;
    br_buf *qg = t_buf_poison(ctx, BR_F32, 2 * half, 0), *q = t_buf_poison(ctx, BR_F32, half, 0);
    br_buf *gate = t_buf_poison(ctx, BR_F32, half, 0), *q16 = t_buf_poison(ctx, BR_F16, half, 0);
    br_buf *short_qg = t_buf_poison(ctx, BR_F32, 2 * half - 1, 0);
    br_buf *short_q = t_buf_poison(ctx, BR_F32, half - 1, 0);
    br_buf *foreign = t_buf_poison(other, BR_F32, half, 0);
    br_buf *big = t_buf_poison(ctx, BR_F32, 4 * half, 0), *front, *inside, *back;
    CHECK_OK(ctx, br_buf_view(big, 0, 2 * half, &front));
    CHECK_OK(ctx, br_buf_view(big, half, half, &inside));
    CHECK_OK(ctx, br_buf_view(big, 2 * half, half, &back));

    CHECK(br_split_qg(NULL, qg, q, gate, m, heads, hd, 0) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "qg is NULL", br_split_qg(ctx, NULL, q, gate, m, heads, hd, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "gate is NULL", br_split_qg(ctx, qg, q, NULL, m, heads, hd, 1));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "q is a f16",
                    br_split_qg(ctx, qg, q16, gate, m, heads, hd, 0));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "qg holds",
                    br_split_qg(ctx, short_qg, q, gate, m, heads, hd, 0));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "q holds",
                    br_split_qg(ctx, qg, short_q, gate, m, heads, hd, 1));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "heads is 0", br_split_qg(ctx, qg, q, gate, m, 0, hd, 0));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "hd is 0", br_split_qg(ctx, qg, q, gate, m, heads, 0, 0));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "heads·hd",
                    br_split_qg(ctx, qg, q, gate, m, (size_t)1 << 20, (size_t)1 << 20, 0));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "m·heads·2·hd",
                    br_split_qg(ctx, qg, q, gate, (size_t)1 << 15, 1, (size_t)1 << 15, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context",
                    br_split_qg(ctx, qg, q, foreign, m, heads, hd, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "q overlaps qg",
                    br_split_qg(ctx, front, inside, gate, m, heads, hd, 0));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "gate overlaps q", br_split_qg(ctx, qg, q, q, m, heads, hd, 1));
    /* qg and its neighbours in one allocation, disjoint: fine */
    CHECK_OK(ctx, br_split_qg(ctx, front, back, gate, m, heads, hd, 0));

    br_buf *bufs[] = {qg, q, gate, q16, short_qg, short_q, front, inside, back, big};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        br_buf_free(bufs[i]);
    br_buf_free(foreign);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

T_RUN("elementwise", T_CASE(scale_acc_matches_reference), T_CASE(scale_acc2_is_two_passes),
      T_CASE(f16_to_f32_every_pattern), T_CASE(add_matches_reference),
      T_CASE(split_qg_matches_reference), T_CASE(scale_acc_bad_arguments),
      T_CASE(unary_bad_arguments), T_CASE(split_qg_bad_arguments))
