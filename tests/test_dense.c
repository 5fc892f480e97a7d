/* The small dense f32 linear (br_dense_fwd, br_dense_bwd): plain, tiled and auto
 * give the same bits as a scalar reference of the contract's order (one fmaf per
 * term, from 0, in index order), and agree with an f64 product within a rigorous
 * rounding bound. Fresh random data, outputs poisoned first, awkward shapes. */
#include "harness.h"

#include "core/internal.h" /* ctx->stats: the CPU counts one launch per op */

#define EXTRA 5 /* elements past each output that must keep their poison */

/* n values with random signs and magnitudes over 2^-8 .. 2^8: sums whose bits
 * depend on the order of their terms. */
static float *spread_data(br_rng *r, size_t n) {
    float *v = t_xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        float mant = br_rng_sym(r);
        v[i] = ldexpf(mant == 0.0f ? 0.5f : mant, (int)t_rand_size(r, 0, 16) - 8);
    }
    return v;
}

/* out[i][o] (+)= Σ_j a[i][j]·w[o][j]: the contract, one output at a time. */
static float *ref_fwd(const float *a, const float *w, const float *out0, size_t m, size_t k,
                      size_t r, int accumulate) {
    float *out = t_xmalloc(m * r * sizeof *out);
    for (size_t i = 0; i < m; i++)
        for (size_t o = 0; o < r; o++) {
            float acc = 0.0f;
            for (size_t j = 0; j < k; j++)
                acc = fmaf(a[i * k + j], w[o * k + j], acc);
            out[i * r + o] = accumulate ? out0[i * r + o] + acc : acc;
        }
    return out;
}

/* dx[i][j] += Σ_o dy[i][o]·w[o][j], then added to dx0. */
static float *ref_bwd(const float *dy, const float *w, const float *dx0, size_t m, size_t k,
                      size_t r) {
    float *dx = t_xmalloc(m * k * sizeof *dx);
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < k; j++) {
            float acc = 0.0f;
            for (size_t o = 0; o < r; o++)
                acc = fmaf(dy[i * r + o], w[o * k + j], acc);
            dx[i * k + j] = dx0[i * k + j] + acc;
        }
    return dx;
}

/* Each got[i] within (terms + 2)·2^-24·Σ|term| of the f64 sum (fmaf: one rounding
 * per term, one more for the accumulate). Returns the first bad index or n. */
static size_t fwd_vs_f64(const float *got, const float *a, const float *w, const float *out0,
                         size_t m, size_t k, size_t r, int accumulate) {
    for (size_t i = 0; i < m; i++)
        for (size_t o = 0; o < r; o++) {
            double s = accumulate ? out0[i * r + o] : 0.0, mag = fabs(s);
            for (size_t j = 0; j < k; j++) {
                double t = (double)a[i * k + j] * w[o * k + j];
                s += t;
                mag += fabs(t);
            }
            if (!(fabs(got[i * r + o] - s) <= (double)(k + 2) * 0x1p-24 * mag + 1e-37))
                return i * r + o;
        }
    return m * r;
}
static size_t bwd_vs_f64(const float *got, const float *dy, const float *w, const float *dx0,
                         size_t m, size_t k, size_t r) {
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < k; j++) {
            double s = dx0[i * k + j], mag = fabs(s);
            for (size_t o = 0; o < r; o++) {
                double t = (double)dy[i * r + o] * w[o * k + j];
                s += t;
                mag += fabs(t);
            }
            if (!(fabs(got[i * k + j] - s) <= (double)(r + 2) * 0x1p-24 * mag + 1e-37))
                return i * k + j;
        }
    return m * k;
}

/* An f32 buffer of n + EXTRA elements: host values then NaN (host NULL: all NaN). */
static br_buf *out_buf(br_ctx *ctx, const float *host, size_t n) {
    br_buf *b = t_buf_poison(ctx, BR_F32, n + EXTRA, T_NAN32);
    if (host) CHECK_OK(ctx, br_buf_upload(b, 0, host, n));
    return b;
}

/* got[0..n) equals ref bit for bit and the EXTRA elements past it keep the poison. */
static void check_bits(br_ctx *ctx, const br_buf *buf, const float *ref, size_t n, const char *what,
                       size_t m, size_t k, size_t r) {
    float *got = t_download_f32(ctx, buf, n + EXTRA);
    size_t i = t_first_diff32(got, ref, n);
    CHECK(i == n, "%s m=%zu k=%zu r=%zu: %zu of %zu differ (first [%zu]: %a, want %a)", what, m, k,
          r, t_bits_differ32(got, ref, n), n, i, i < n ? got[i] : 0.0f, i < n ? ref[i] : 0.0f);
    for (size_t j = n; j < n + EXTRA; j++) {
        uint32_t u;
        memcpy(&u, &got[j], 4);
        CHECK(u == T_NAN32, "%s m=%zu k=%zu r=%zu: element %zu past the output was written", what,
              m, k, r, j);
    }
    free(got);
}

/* Shapes: 1 row, rows around the tile of 4, k around the chunk of 64 and the
 * column tile of 256, r at the tiled limit of 48 and just past it. */
static void pick_shape(br_rng *rng, int i, size_t *m, size_t *k, size_t *r) {
    static const size_t fixed[][3] = {{1, 1, 1},   {1, 300, 48},  {3, 65, 17},  {5, 64, 16},
                                      {70, 7, 47}, {9, 257, 1},   {4, 129, 49}, {130, 33, 100},
                                      {2, 513, 3}, {1000, 40, 12}};
    t_pick_shape3(rng, fixed, sizeof fixed / sizeof fixed[0], (size_t)i, 1, 200, 1, 400, 1, 60, m,
                  k, r);
}
#define N_SHAPES 18

static const char *impl_name(br_dense_impl impl) {
    return impl == BR_DENSE_PLAIN ? "plain" : impl == BR_DENSE_TILED ? "tiled" : "auto";
}

static void dense_fwd_matches_reference(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(1);
    for (int s = 0; s < N_SHAPES; s++) {
        size_t m, k, r;
        pick_shape(&rng, s, &m, &k, &r);
        float *a = spread_data(&rng, m * k), *w = spread_data(&rng, r * k);
        float *out0 = spread_data(&rng, m * r);
        br_buf *ba = t_buf_from(ctx, BR_F32, a, m * k), *bw = t_buf_from(ctx, BR_F32, w, r * k);
        for (int acc = 0; acc < 2; acc++) {
            float *ref = ref_fwd(a, w, out0, m, k, r, acc);
            size_t bad = fwd_vs_f64(ref, a, w, out0, m, k, r, acc);
            CHECK(bad == m * r, "the reference itself is off the f64 product at %zu", bad);
            for (int impl = 0; impl < 3; impl++) {
                if (impl == BR_DENSE_TILED && r > 48) continue;
                br_buf *out = out_buf(ctx, acc ? out0 : NULL, m * r);
                CHECK_OK(ctx, br_dense_fwd(ctx, ba, bw, out, m, k, r, acc, (br_dense_impl)impl));
                char what[48];
                snprintf(what, sizeof what, "dense_fwd %s acc=%d", impl_name((br_dense_impl)impl),
                         acc);
                check_bits(ctx, out, ref, m * r, what, m, k, r);
                br_buf_free(out);
            }
            free(ref);
        }
        br_buf_free(ba);
        br_buf_free(bw);
        free(a);
        free(w);
        free(out0);
    }
    br_ctx_free(ctx);
}

static void dense_bwd_matches_reference(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(2);
    for (int s = 0; s < N_SHAPES; s++) {
        size_t m, k, r;
        pick_shape(&rng, s, &m, &k, &r);
        float *dy = spread_data(&rng, m * r), *w = spread_data(&rng, r * k);
        float *dx0 = spread_data(&rng, m * k);
        br_buf *bdy = t_buf_from(ctx, BR_F32, dy, m * r), *bw = t_buf_from(ctx, BR_F32, w, r * k);
        float *ref = ref_bwd(dy, w, dx0, m, k, r);
        size_t bad = bwd_vs_f64(ref, dy, w, dx0, m, k, r);
        CHECK(bad == m * k, "the reference itself is off the f64 product at %zu", bad);
        for (int impl = 0; impl < 3; impl++) {
            br_buf *dx = out_buf(ctx, dx0, m * k);
            CHECK_OK(ctx, br_dense_bwd(ctx, bdy, bw, dx, m, k, r, (br_dense_impl)impl));
            char what[48];
            snprintf(what, sizeof what, "dense_bwd %s", impl_name((br_dense_impl)impl));
            check_bits(ctx, dx, ref, m * k, what, m, k, r);
            br_buf_free(dx);
        }
        free(ref);
        br_buf_free(bdy);
        br_buf_free(bw);
        free(dy);
        free(w);
        free(dx0);
    }
    br_ctx_free(ctx);
}

/* Operands and outputs as views at odd offsets into larger buffers. */
static void dense_on_views(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(3);
    size_t m = 13, k = 70, r = 9, off = 3;
    float *a = spread_data(&rng, m * k + off), *w = spread_data(&rng, r * k + off);
    float *dx0 = spread_data(&rng, m * k + off);
    br_buf *big_a = t_buf_from(ctx, BR_F32, a, m * k + off);
    br_buf *big_w = t_buf_from(ctx, BR_F32, w, r * k + off);
    br_buf *big_out = t_buf_poison(ctx, BR_F32, m * r + off + EXTRA, T_NAN32);
    br_buf *big_dx = t_buf_from(ctx, BR_F32, dx0, m * k + off);
    br_buf *va, *vw, *vout, *vdy, *vdx;
    CHECK_OK(ctx, br_buf_view(big_a, off, m * k, &va));
    CHECK_OK(ctx, br_buf_view(big_w, off, r * k, &vw));
    CHECK_OK(ctx, br_buf_view(big_out, off, m * r, &vout));
    CHECK_OK(ctx, br_buf_view(big_a, off, m * r, &vdy));
    CHECK_OK(ctx, br_buf_view(big_dx, off, m * k, &vdx));
    for (int impl = 1; impl < 3; impl++) {
        CHECK_OK(ctx, br_buf_fill(big_out, 0, m * r + off + EXTRA, T_NAN32));
        CHECK_OK(ctx, br_dense_fwd(ctx, va, vw, vout, m, k, r, 0, (br_dense_impl)impl));
        float *ref = ref_fwd(a + off, w + off, NULL, m, k, r, 0);
        float *got = t_download_f32(ctx, big_out, m * r + off + EXTRA);
        CHECK(t_first_diff32(got + off, ref, m * r) == m * r, "dense_fwd %s through views differs",
              impl_name((br_dense_impl)impl));
        for (size_t i = 0; i < off; i++)
            CHECK(isnan(got[i]), "element %zu before the view", i);
        free(got);
        free(ref);
    }
    CHECK_OK(ctx, br_dense_bwd(ctx, vdy, vw, vdx, m, k, r, BR_DENSE_TILED));
    float *ref = ref_bwd(a + off, w + off, dx0 + off, m, k, r);
    float *got = t_download_f32(ctx, big_dx, m * k + off);
    CHECK(t_first_diff32(got + off, ref, m * k) == m * k, "dense_bwd through views differs");
    CHECK(t_first_diff32(got, dx0, off) == off, "dense_bwd wrote before the view");
    free(got);
    free(ref);
    br_buf_free(va);
    br_buf_free(vw);
    br_buf_free(vout);
    br_buf_free(vdy);
    br_buf_free(vdx);
    br_buf_free(big_a);
    br_buf_free(big_w);
    br_buf_free(big_out);
    br_buf_free(big_dx);
    free(a);
    free(w);
    free(dx0);
    br_ctx_free(ctx);
}

/* Large enough for the CPU backend's threads. */
static void dense_large(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(4);
    size_t m = 3001, k = 517, r = 37;
    float *a = spread_data(&rng, m * k), *w = spread_data(&rng, r * k);
    float *dx0 = spread_data(&rng, m * k);
    br_buf *ba = t_buf_from(ctx, BR_F32, a, m * k), *bw = t_buf_from(ctx, BR_F32, w, r * k);
    float *ref = ref_fwd(a, w, NULL, m, k, r, 0);
    for (int impl = 1; impl < 3; impl++) {
        br_buf *out = out_buf(ctx, NULL, m * r);
        CHECK_OK(ctx, br_dense_fwd(ctx, ba, bw, out, m, k, r, 0, (br_dense_impl)impl));
        check_bits(ctx, out, ref, m * r, impl == 1 ? "large fwd plain" : "large fwd tiled", m, k,
                   r);
        br_buf_free(out);
    }
    free(ref);
    br_buf *bdy = t_buf_from(ctx, BR_F32, a, m * r);
    ref = ref_bwd(a, w, dx0, m, k, r);
    for (int impl = 1; impl < 3; impl++) {
        br_buf *dx = out_buf(ctx, dx0, m * k);
        CHECK_OK(ctx, br_dense_bwd(ctx, bdy, bw, dx, m, k, r, (br_dense_impl)impl));
        check_bits(ctx, dx, ref, m * k, impl == 1 ? "large bwd plain" : "large bwd tiled", m, k, r);
        br_buf_free(dx);
    }
    free(ref);
    br_buf_free(ba);
    br_buf_free(bw);
    br_buf_free(bdy);
    free(a);
    free(w);
    free(dx0);
    br_ctx_free(ctx);
}

static void dense_counts_launches(void) {
    br_ctx *ctx = t_ctx();
    if (strcmp(br_ctx_backend(ctx), "cpu") != 0) { /* CUDA counts kernels, not ops */
        br_ctx_free(ctx);
        return;
    }
    br_rng rng = t_rng_for(5);
    size_t m = 6, k = 10, r = 4;
    float *v = spread_data(&rng, m * k);
    br_buf *a = t_buf_from(ctx, BR_F32, v, m * k), *w = t_buf_from(ctx, BR_F32, v, r * k);
    br_buf *out = out_buf(ctx, NULL, m * r), *dx = out_buf(ctx, v, m * k);
    for (int impl = 0; impl < 3; impl++) {
        uint64_t l0 = ctx->stats.launches;
        CHECK_OK(ctx, br_dense_fwd(ctx, a, w, out, m, k, r, 0, (br_dense_impl)impl));
        CHECK_OK(ctx, br_dense_bwd(ctx, out, w, dx, m, k, r, (br_dense_impl)impl));
        CHECK(ctx->stats.launches - l0 == 2, "two ops counted %llu launches",
              (unsigned long long)(ctx->stats.launches - l0));
    }
    br_buf_free(a);
    br_buf_free(w);
    br_buf_free(out);
    br_buf_free(dx);
    free(v);
    br_ctx_free(ctx);
}

static void dense_bad_arguments(void) {
    br_ctx *ctx = t_ctx(), *other = t_cpu_ctx();
    size_t m = 10, k = 20, r = 49;
    br_buf *a = t_buf_poison(ctx, BR_F32, m * k, 0), *w = t_buf_poison(ctx, BR_F32, r * k, 0);
    br_buf *out = t_buf_poison(ctx, BR_F32, m * r, 0), *dy = t_buf_poison(ctx, BR_F32, m * r, 0);
    br_buf *dx = t_buf_poison(ctx, BR_F32, m * k, 0), *half = t_buf_poison(ctx, BR_F16, m * k, 0);
    br_buf *small = t_buf_poison(ctx, BR_F32, m * r - 1, 0);
    br_buf *foreign = t_buf_poison(other, BR_F32, r * k, 0);
    const br_dense_impl P = BR_DENSE_PLAIN, A = BR_DENSE_AUTO;
    const size_t big = (size_t)1 << 16;

    CHECK(br_dense_fwd(NULL, a, w, out, m, k, r, 0, P) == BR_E_ARG, "NULL ctx accepted");
    CHECK(br_dense_bwd(NULL, dy, w, dx, m, k, r, P) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "a is NULL", br_dense_fwd(ctx, NULL, w, out, m, k, r, 0, P));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "w is NULL", br_dense_fwd(ctx, a, NULL, out, m, k, r, 0, P));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "out is NULL", br_dense_fwd(ctx, a, w, NULL, m, k, r, 0, P));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "dy is NULL", br_dense_bwd(ctx, NULL, w, dx, m, k, r, P));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "dx is NULL", br_dense_bwd(ctx, dy, w, NULL, m, k, r, P));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "a is a f16", br_dense_fwd(ctx, half, w, out, m, k, r, 0, P));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "dx is a f16", br_dense_bwd(ctx, dy, w, half, m, k, r, P));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "out holds", br_dense_fwd(ctx, a, w, small, m, k, r, 0, P));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "dy holds", br_dense_bwd(ctx, small, w, dx, m, k, r, P));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "w holds", br_dense_fwd(ctx, a, w, out, m, k, r + 1, 0, A));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "m is 0", br_dense_fwd(ctx, a, w, out, 0, k, r, 0, P));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "k is 0", br_dense_fwd(ctx, a, w, out, m, 0, r, 0, P));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "r is 0", br_dense_bwd(ctx, dy, w, dx, m, k, 0, P));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "m·k", br_dense_fwd(ctx, a, w, out, big, big, 1, 0, P));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "r·k", br_dense_bwd(ctx, dy, w, dx, 1, big, big, P));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "m·r", br_dense_fwd(ctx, a, w, out, big, 1, big, 0, P));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context",
                    br_dense_fwd(ctx, a, foreign, out, m, k, r, 0, P));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context",
                    br_dense_bwd(ctx, dy, foreign, dx, m, k, r, P));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "impl",
                    br_dense_fwd(ctx, a, w, out, m, k, r, 0, (br_dense_impl)3));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "impl",
                    br_dense_bwd(ctx, dy, w, dx, m, k, r, (br_dense_impl)-1));
    /* the tiled forward holds at most 48 outputs per row; auto then picks plain */
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "r ≤ 48",
                    br_dense_fwd(ctx, a, w, out, m, k, r, 0, BR_DENSE_TILED));
    CHECK_OK(ctx, br_dense_fwd(ctx, a, w, out, m, k, r, 0, A));
    CHECK_OK(ctx, br_dense_bwd(ctx, dy, w, dx, m, k, r, BR_DENSE_TILED));

    /* an output sharing memory with an input: rows of out would overwrite a (or w)
     * before other outputs read it */
    {
        br_buf *pool = t_buf_poison(ctx, BR_F32, m * k + m * r + r * k, 0), *pa, *po, *pw;
        CHECK_OK(ctx, br_buf_view(pool, 0, m * k, &pa));                 /* a / dx */
        CHECK_OK(ctx, br_buf_view(pool, m * k - 1, m * r, &po));         /* out / dy: one shared */
        CHECK_OK(ctx, br_buf_view(pool, m * k + m * r - 2, r * k, &pw)); /* w: shares with po */
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "out overlaps a",
                        br_dense_fwd(ctx, pa, w, po, m, k, r, 0, P));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "out overlaps w",
                        br_dense_fwd(ctx, a, pw, po, m, k, r, 1, P));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "out overlaps a",
                        br_dense_fwd(ctx, a, w, a, m, k, 2, 0, BR_DENSE_TILED));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "dx overlaps dy", br_dense_bwd(ctx, po, w, pa, m, k, r, P));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "dx overlaps w",
                        br_dense_bwd(ctx, dy, dx, dx, m, k, 1, BR_DENSE_TILED));
        br_buf_free(pa), br_buf_free(po), br_buf_free(pw), br_buf_free(pool);
    }

    br_buf_free(a);
    br_buf_free(w);
    br_buf_free(out);
    br_buf_free(dy);
    br_buf_free(dx);
    br_buf_free(half);
    br_buf_free(small);
    br_buf_free(foreign);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

T_RUN("dense", T_CASE(dense_fwd_matches_reference), T_CASE(dense_bwd_matches_reference),
      T_CASE(dense_on_views), T_CASE(dense_large), T_CASE(dense_counts_launches),
      T_CASE(dense_bad_arguments))
