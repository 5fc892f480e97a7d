/* Cross-backend test: every non-GEMM op runs on the same fresh random inputs on the
 * device under test (a CUDA or Vulkan context) and on the CPU context, and the
 * outputs are compared — bit for bit where the contract says bit-exact (staging, expand,
 * column reductions incl. the fused transposed operand, elementwise, dense plain
 * and tiled, fill, copy, and sumsq, whose partition the kernels reproduce), within
 * 1e-6 relative for Adam. Each side's outputs are poisoned first with a different
 * NaN pattern, so an element either backend leaves unwritten cannot compare equal.
 * Every op also runs on views at an odd element offset, which takes the kernels'
 * scalar (unaligned) paths.
 *
 * It compares two backends, so it is skipped (exit 77) unless BITRANK_TEST_DEVICE
 * is "cuda", "cuda:N", "vulkan" or "vulkan:N". BITRANK_CROSS_SELFTEST=1 runs it CPU
 * against CPU, to check the test itself on a machine without a GPU. */
#include "harness.h"
#include "ops/layer_ops.h"

enum { DUT = 0, REF = 1 }; /* side: the device under test, the CPU reference */
static const char *side_name[2] = {"cuda", "cpu"}; /* [DUT]: the backend's name */

static br_ctx *g_ctx[2];
/* Element offset of every buffer inside its allocation: 0 keeps allocations'
 * 16-byte alignment (vector paths), an odd offset breaks it (scalar paths). */
static size_t g_off;

/* Buffers of the current comparison, freed together (views before parents). */
#define MAX_BUFS 96
static br_buf *g_bufs[2][MAX_BUFS];
static int g_nbufs[2];

static void die(int s, const char *what) {
    fprintf(stderr, "%s on %s failed: %s\n", what, side_name[s], br_ctx_error(g_ctx[s]));
    exit(1);
}

static br_buf *track(int s, br_buf *b) {
    if (g_nbufs[s] == MAX_BUFS) {
        fprintf(stderr, "test: more than %d buffers\n", MAX_BUFS);
        exit(1);
    }
    g_bufs[s][g_nbufs[s]++] = b;
    return b;
}

static void free_bufs(void) {
    for (int s = 0; s < 2; s++) {
        while (g_nbufs[s] > 0)
            br_buf_free(g_bufs[s][--g_nbufs[s]]);
    }
}

/* n elements at offset g_off of a fresh allocation. */
static br_buf *alloc_at(int s, br_dtype dt, size_t n) {
    br_buf *parent = NULL, *view = NULL;
    if (br_buf_new(g_ctx[s], dt, n + g_off, &parent) != BR_OK) die(s, "br_buf_new");
    track(s, parent);
    if (!g_off) return parent;
    if (br_buf_view(parent, g_off, n, &view) != BR_OK) die(s, "br_buf_view");
    return track(s, view);
}

/* An input (or in-out) buffer holding host data. */
static br_buf *buf_in(int s, br_dtype dt, const void *host, size_t n) {
    br_buf *b = alloc_at(s, dt, n);
    if (br_buf_upload(b, 0, host, n) != BR_OK) die(s, "br_buf_upload");
    return b;
}

/* An output buffer poisoned with this side's NaN pattern. */
static const uint32_t poison32[2] = {0x7fc00000u, 0x7fc0deadu};
static const uint32_t poison16[2] = {0x7e00u, 0x7e5au};
static br_buf *buf_out(int s, br_dtype dt, size_t n) {
    br_buf *b = alloc_at(s, dt, n);
    if (br_buf_fill(b, 0, n, dt == BR_F16 ? poison16[s] : poison32[s]) != BR_OK)
        die(s, "br_buf_fill");
    return b;
}

static void *dl(int s, const br_buf *b, size_t n) {
    size_t es = br_dtype_size(br_buf_dtype(b));
    void *v = t_xmalloc(n * es);
    if (br_buf_download(b, 0, v, n) != BR_OK) die(s, "br_buf_download");
    return v;
}

/* ---------------------------------------------------------------- comparisons */

static char g_what[200]; /* the comparison in words, for failure messages */
#define WHAT(...) snprintf(g_what, sizeof g_what, __VA_ARGS__)

static void same32(const char *out, const void *dut, const void *ref, size_t n) {
    const uint32_t *x = dut, *y = ref;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i] && !bad++) first = i;
    CHECK(bad == 0, "%s %s: %zu of %zu differ (first [%zu]: %s %08x, cpu %08x)", g_what, out, bad,
          n, first, side_name[DUT], bad ? x[first] : 0u, bad ? y[first] : 0u);
}

static void same16(const char *out, const uint16_t *x, const uint16_t *y, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i] && !bad++) first = i;
    CHECK(bad == 0, "%s %s: %zu of %zu differ (first [%zu]: %s %04x, cpu %04x)", g_what, out, bad,
          n, first, side_name[DUT], bad ? x[first] : 0u, bad ? y[first] : 0u);
}

/* |dut − ref| ≤ rel·max(|ref|, |scale|) per element (scale NULL: 0; NaN anywhere
 * fails). Adam's w is compared relative to the step it took as well: a weight the
 * step brings near zero keeps the step's own rounding. */
static void close32_scaled(const char *out, const float *x, const float *y, const float *scale,
                           size_t n, double rel) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - (double)y[i]), ref = fabs((double)y[i]);
        if (scale && fabs((double)scale[i]) > ref) ref = fabs((double)scale[i]);
        if (!(d <= rel * ref) && !bad++) first = i;
    }
    CHECK(bad == 0, "%s %s: %zu of %zu beyond %g relative (first [%zu]: %s %.9g, cpu %.9g)", g_what,
          out, bad, n, rel, first, side_name[DUT], bad ? x[first] : 0.0, bad ? y[first] : 0.0);
}
static void close32(const char *out, const float *x, const float *y, size_t n, double rel) {
    close32_scaled(out, x, y, NULL, n, rel);
}

/* Downloads buffer `b[s]` of both sides and compares bit for bit. */
static void same_bufs(const char *out, br_buf *const b[2], size_t n) {
    void *x = dl(DUT, b[DUT], n), *y = dl(REF, b[REF], n);
    if (br_buf_dtype(b[DUT]) == BR_F16)
        same16(out, x, y, n);
    else
        same32(out, x, y, n);
    free(x);
    free(y);
}

/* ---------------------------------------------------------------- data */

/* Values that exercise f16 rounding: ordinary ones, magnitudes from f16
 * subnormals to past f16's range, exact ties between f16 neighbours, and small
 * exact values. */
static float *rand_wide(br_rng *r, size_t n) {
    float *v = t_xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        uint64_t u = br_rng_u64(r);
        float sign = u >> 63 ? -1.0f : 1.0f;
        switch (u & 3) {
        case 0: v[i] = br_rng_sym(r); break;
        case 1: v[i] = ldexpf(br_rng_sym(r), (int)(u >> 8 & 63) - 36); break;
        case 2: { /* halfway between f16 h and h+1: a tie the conversion must round to even */
            uint16_t h = (uint16_t)((u >> 16) % 0x7bffu);
            float lo = br_half_to_float(h), hi = br_half_to_float((uint16_t)(h + 1));
            v[i] = sign * (lo + (hi - lo) * 0.5f);
            break;
        }
        default: v[i] = (float)((int)(u >> 8 & 255) - 128) * 0.125f; break;
        }
    }
    return v;
}

/* Column factors: never zero, a few decades either way. */
static float *rand_cols(br_rng *r, size_t n) {
    float *v = t_xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        float x = ldexpf(0.5f + 0.5f * (float)br_rng_unit(r), (int)t_rand_size(r, 0, 8) - 4);
        v[i] = br_rng_u64(r) & 1 ? -x : x;
    }
    return v;
}

static float rand_scale(br_rng *r) {
    switch (br_rng_u64(r) % 3) {
    case 0: return 1.0f;
    case 1: return ldexpf(1.0f, (int)t_rand_size(r, 0, 20) - 10);
    default: return 0.1f + 3.0f * (float)br_rng_unit(r);
    }
}

/* Runs `body` once with aligned buffers and once with buffers at an odd offset. */
#define FOR_OFFSETS for (g_off = 0; g_off <= 3; g_off += 3)

/* BITRANK_TEST_QUICK=1 (the compute-sanitizer runs): shapes up to QUICK_MAX
 * elements and one random shape per list instead of four. */
static int g_quick;
#define QUICK_MAX ((size_t)1 << 18)
#define N_RANDOM (g_quick ? 1u : 4u)
#define TOO_BIG(elems) (g_quick && (elems) > QUICK_MAX)

/* ---------------------------------------------------------------- fill, copy */

static void fill_and_copy(void) {
    br_rng r = t_rng_for(1);
    static const br_dtype dts[] = {BR_F32, BR_F16, BR_U32};
    FOR_OFFSETS for (int d = 0; d < 3; d++) for (int i = 0; i < 6; i++) {
        br_dtype dt = dts[d];
        size_t n = i == 0 ? 1 : t_rand_size(&r, 2, i < 3 ? 100 : 300000);
        size_t off = t_rand_size(&r, 0, n - 1), cnt = t_rand_size(&r, 1, n - off);
        uint32_t bits = (uint32_t)br_rng_u64(&r);
        uint32_t *host = t_xmalloc(n * 4);
        for (size_t j = 0; j < n; j++)
            host[j] = (uint32_t)br_rng_u64(&r);
        WHAT("fill %s n=%zu [%zu, +%zu) off=%zu", br_dtype_name(dt), n, off, cnt, g_off);
        br_buf *b[2];
        for (int s = 0; s < 2; s++) {
            b[s] = buf_in(s, dt, host, n); /* f16: the low halves of the first n/2 words */
            CHECK_OK(g_ctx[s], br_buf_fill(b[s], off, cnt, bits));
        }
        same_bufs("buf", b, n);

        /* copy into a second buffer, then within one buffer (overlapping ranges, both
         * directions, distances short and long) */
        size_t src_off = t_rand_size(&r, 0, n - 1), len = t_rand_size(&r, 1, n - src_off);
        size_t dst_off = t_rand_size(&r, 0, n - len);
        WHAT("copy %s n=%zu src [%zu, +%zu) dst %zu off=%zu", br_dtype_name(dt), n, src_off, len,
             dst_off, g_off);
        uint32_t *host2 = t_xmalloc(n * 4);
        for (size_t j = 0; j < n; j++)
            host2[j] = (uint32_t)br_rng_u64(&r);
        br_buf *c[2];
        for (int s = 0; s < 2; s++) {
            c[s] = buf_in(s, dt, host2, n);
            CHECK_OK(g_ctx[s], br_buf_copy(c[s], dst_off, b[s], src_off, len));
            CHECK_OK(g_ctx[s], br_buf_copy(b[s], dst_off, b[s], src_off, len));
        }
        same_bufs("dst", c, n);
        same_bufs("overlap", b, n);
        if (n > 1000) { /* a shift by one element: 1000s of pieces, through the workspace */
            for (int s = 0; s < 2; s++) {
                CHECK_OK(g_ctx[s], br_buf_copy(b[s], 1, b[s], 0, n - 1));
                CHECK_OK(g_ctx[s], br_buf_copy(b[s], 0, b[s], 7, n - 7));
            }
            WHAT("copy %s n=%zu shifted by +1 and −7 off=%zu", br_dtype_name(dt), n, g_off);
            same_bufs("buf", b, n);
        }
        free(host);
        free(host2);
        free_bufs();
    }
}

/* ---------------------------------------------------------------- staging */

static const size_t stage_shapes[][2] = {{1, 1},      {1, 37},    {70, 200},    {1000, 77},
                                         {20000, 13}, {129, 256}, {4100, 1160}, {3, 3000}};
#define N_STAGE_SHAPES (sizeof stage_shapes / sizeof stage_shapes[0])

static void cvt_family(void) {
    br_rng r = t_rng_for(2);
    FOR_OFFSETS for (size_t i = 0; i < N_STAGE_SHAPES + N_RANDOM; i++) {
        size_t m, k;
        t_pick_shape2(&r, stage_shapes, N_STAGE_SHAPES, i, 1, 700, 1, 700, &m, &k);
        if (TOO_BIG(m * k)) continue;
        size_t mpad = br_pad_rows(m), n_out = t_rand_size(&r, 1, 4);
        float scale = rand_scale(&r);
        int with_col = (int)(i % 2);
        float *src = rand_wide(&r, m * k), *cols[4];
        for (int o = 0; o < 4; o++)
            cols[o] = rand_cols(&r, k);

        WHAT("cvt m=%zu k=%zu scale=%g col=%d off=%zu", m, k, scale, with_col, g_off);
        br_buf *dst[2];
        for (int s = 0; s < 2; s++) {
            br_buf *bs = buf_in(s, BR_F32, src, m * k);
            br_buf *bc = with_col ? buf_in(s, BR_F32, cols[0], k) : NULL;
            dst[s] = buf_out(s, BR_F16, mpad * k);
            CHECK_OK(g_ctx[s], br_cvt(g_ctx[s], bs, bc, dst[s], m, k, scale));
        }
        same_bufs("dst", dst, mpad * k);
        free_bufs();

        WHAT("cvt_multi m=%zu k=%zu n_out=%zu off=%zu", m, k, n_out, g_off);
        br_buf *md[2][4];
        for (int s = 0; s < 2; s++) {
            br_buf *bs = buf_in(s, BR_F32, src, m * k);
            const br_buf *bc[4];
            br_buf *bd[4];
            for (size_t o = 0; o < n_out; o++) {
                bc[o] = (o + i) % 3 == 0 ? NULL : buf_in(s, BR_F32, cols[o], k); /* some NULL */
                bd[o] = md[s][o] = buf_out(s, BR_F16, mpad * k);
            }
            CHECK_OK(g_ctx[s], br_cvt_multi(g_ctx[s], bs, n_out, bc, bd, m, k, scale));
        }
        for (size_t o = 0; o < n_out; o++) {
            br_buf *pair[2] = {md[DUT][o], md[REF][o]};
            same_bufs(o == 0   ? "dst[0]"
                      : o == 1 ? "dst[1]"
                      : o == 2 ? "dst[2]"
                               : "dst[3]",
                      pair, mpad * k);
        }
        free_bufs();

        /* a column block [col0, col0 + kb) of src seen as [m][k] */
        size_t kb = t_rand_size(&r, 1, k), col0 = t_rand_size(&r, 0, k - kb);
        WHAT("cvt_cols m=%zu ld=%zu col0=%zu k=%zu off=%zu", m, k, col0, kb, g_off);
        for (int s = 0; s < 2; s++) {
            br_buf *bs = buf_in(s, BR_F32, src, m * k);
            dst[s] = buf_out(s, BR_F16, mpad * kb);
            CHECK_OK(g_ctx[s], br_cvt_cols(g_ctx[s], bs, k, col0, dst[s], m, kb, scale));
        }
        same_bufs("dst", dst, mpad * kb);
        free_bufs();

        /* transposed: src [ntok = m][k] → dst [pad_rows(k)][pad_tokens(m)] */
        size_t nt = br_pad_rows(k) * br_pad_tokens(m);
        WHAT("cvt_t ntok=%zu k=%zu scale=%g col=%d off=%zu", m, k, scale, with_col, g_off);
        for (int s = 0; s < 2; s++) {
            br_buf *bs = buf_in(s, BR_F32, src, m * k);
            br_buf *bc = with_col ? buf_in(s, BR_F32, cols[1], k) : NULL;
            dst[s] = buf_out(s, BR_F16, nt);
            CHECK_OK(g_ctx[s], br_cvt_t(g_ctx[s], bs, bc, dst[s], m, k, scale));
        }
        same_bufs("dst", dst, nt);
        free_bufs();
        free(src);
        for (int o = 0; o < 4; o++)
            free(cols[o]);
    }
}

static void expand_planes(void) {
    br_rng r = t_rng_for(3);
    static const size_t fixed[][2] = {{1, 1},     {1, 32},   {7, 33},     {384, 128},
                                      {1000, 77}, {2, 4096}, {1023, 512}, {3584, 384}};
    const size_t nfixed = sizeof fixed / sizeof fixed[0];
    FOR_OFFSETS for (size_t i = 0; i < nfixed + N_RANDOM; i++) {
        size_t rows, rk;
        t_pick_shape2(&r, fixed, nfixed, i, 1, 600, 1, 300, &rows, &rk);
        size_t words = (rk + 31) / 32, which = i % 3; /* 0 both, 1 plane, 2 plane_t */
        uint32_t *bits = t_xmalloc(rows * words * 4);
        for (size_t j = 0; j < rows * words; j++)
            bits[j] = (uint32_t)br_rng_u64(&r);
        WHAT("expand rows=%zu r=%zu which=%zu off=%zu", rows, rk, which, g_off);
        br_buf *pl[2] = {NULL, NULL}, *pt[2] = {NULL, NULL};
        for (int s = 0; s < 2; s++) {
            br_buf *bb = buf_in(s, BR_U32, bits, rows * words);
            if (which != 2) pl[s] = buf_out(s, BR_F16, rows * rk);
            if (which != 1) pt[s] = buf_out(s, BR_F16, rows * rk);
            CHECK_OK(g_ctx[s], br_expand(g_ctx[s], bb, rows, rk, pl[s], pt[s]));
        }
        if (pl[0]) same_bufs("plane", pl, rows * rk);
        if (pt[0]) same_bufs("plane_t", pt, rows * rk);
        free_bufs();
        free(bits);
    }
}

/* ---------------------------------------------------------------- column reductions */

static const size_t reduce_shapes[][2] = {{1, 1},     {1, 300},   {63, 13},   {64, 77},
                                          {65, 7},    {70, 200},  {1000, 77}, {20000, 13},
                                          {70000, 5}, {4096, 384}};
#define N_REDUCE_SHAPES (sizeof reduce_shapes / sizeof reduce_shapes[0])

static void colsum_terms(void) {
    br_rng r = t_rng_for(4);
    FOR_OFFSETS for (size_t i = 0; i < N_REDUCE_SHAPES + N_RANDOM; i++) {
        size_t rows, k;
        t_pick_shape2(&r, reduce_shapes, N_REDUCE_SHAPES, i, 1, 3000, 1, 300, &rows, &k);
        if (TOO_BIG(rows * k)) continue;
        float *a = t_rand(&r, rows * k, 1.0f), *b = t_rand(&r, rows * k, 2.0f);
        float *f = t_rand(&r, rows, 1.5f), *out0 = t_rand(&r, k, 4.0f);
        for (int term = BR_TERM_AB; term <= BR_TERM_A; term++)
            for (int acc = 0; acc <= 1; acc++) {
                WHAT("colsum rows=%zu k=%zu term=%d accumulate=%d off=%zu", rows, k, term, acc,
                     g_off);
                br_buf *out[2];
                for (int s = 0; s < 2; s++) {
                    br_buf *ba = buf_in(s, BR_F32, a, rows * k);
                    br_buf *bb = buf_in(s, BR_F32, b, rows * k);
                    br_buf *bf = buf_in(s, BR_F32, f, rows);
                    out[s] = acc ? buf_in(s, BR_F32, out0, k) : buf_out(s, BR_F32, k);
                    CHECK_OK(g_ctx[s], br_colsum(g_ctx[s], ba, bb, bf, (br_colsum_term)term, out[s],
                                                 rows, k, acc));
                }
                same_bufs("out", out, k);
                free_bufs();
            }
        free(a);
        free(b);
        free(f);
        free(out0);
    }
}

static void colsum_fused_ops(void) {
    br_rng r = t_rng_for(5);
    FOR_OFFSETS for (size_t i = 0; i < N_REDUCE_SHAPES + N_RANDOM; i++) {
        size_t rows, k;
        t_pick_shape2(&r, reduce_shapes, N_REDUCE_SHAPES, i, 1, 3000, 1, 300, &rows, &k);
        if (TOO_BIG(rows * k)) continue;
        size_t n = rows * k, nd = br_pad_rows(rows) * k;
        size_t nt = br_pad_rows(k) * br_pad_tokens(rows);
        float *a = rand_wide(&r, n), *b = rand_wide(&r, n), *col = rand_cols(&r, k);
        float *sum0 = t_rand(&r, k, 4.0f), *dst0 = t_rand(&r, n, 1.0f);
        for (int kind = BR_FUSE_CVT_A; kind <= BR_FUSE_SCALE_B; kind++)
            for (int with_t = 0; with_t <= 1; with_t++) {
                int acc = kind == BR_FUSE_SCALE_B && (i + (size_t)with_t) % 2;
                br_fuse fz = {.kind = (br_fuse_kind)kind,
                              .scale = rand_scale(&r),
                              .accumulate = acc,
                              .t_scale = rand_scale(&r)};
                WHAT("colsum_fused rows=%zu k=%zu kind=%d dst_t=%d accumulate=%d off=%zu", rows, k,
                     kind, with_t, acc, g_off);
                br_buf *sum[2], *dst[2], *dt[2];
                for (int s = 0; s < 2; s++) {
                    br_buf *ba = buf_in(s, BR_F32, a, n), *bb = buf_in(s, BR_F32, b, n);
                    sum[s] = buf_in(s, BR_F32, sum0, k);
                    fz.col = buf_in(s, BR_F32, col, k);
                    if (kind == BR_FUSE_SCALE_B)
                        dst[s] = acc ? buf_in(s, BR_F32, dst0, n) : buf_out(s, BR_F32, n);
                    else
                        dst[s] = buf_out(s, BR_F16, nd);
                    fz.dst = dst[s];
                    fz.dst_t = dt[s] = with_t ? buf_out(s, BR_F16, nt) : NULL;
                    CHECK_OK(g_ctx[s], br_colsum_fused(g_ctx[s], ba, bb, sum[s], rows, k, &fz));
                }
                same_bufs("sum", sum, k);
                same_bufs("dst", dst, kind == BR_FUSE_SCALE_B ? n : nd);
                if (with_t) same_bufs("dst_t", dt, nt);
                free_bufs();
            }
        free(a);
        free(b);
        free(col);
        free(sum0);
        free(dst0);
    }
}

/* ---------------------------------------------------------------- elementwise */

static void elementwise_ops(void) {
    br_rng r = t_rng_for(6);
    FOR_OFFSETS for (size_t i = 0; i < N_STAGE_SHAPES + N_RANDOM; i++) {
        size_t m, k;
        t_pick_shape2(&r, stage_shapes, N_STAGE_SHAPES, i, 1, 700, 1, 700, &m, &k);
        if (TOO_BIG(m * k)) continue;
        size_t n = m * k;
        float *a0 = t_rand(&r, n, 3.0f), *a1 = t_rand(&r, n, 1.0f), *o0 = t_rand(&r, n, 2.0f);
        float *c0 = rand_cols(&r, k), *c1 = rand_cols(&r, k);
        br_buf *out[2];
        for (int acc = 0; acc <= 1; acc++) {
            WHAT("scale_acc m=%zu k=%zu accumulate=%d off=%zu", m, k, acc, g_off);
            for (int s = 0; s < 2; s++) {
                br_buf *ba = buf_in(s, BR_F32, a0, n), *bc = buf_in(s, BR_F32, c0, k);
                out[s] = acc ? buf_in(s, BR_F32, o0, n) : buf_out(s, BR_F32, n);
                CHECK_OK(g_ctx[s], br_scale_acc(g_ctx[s], ba, bc, out[s], m, k, acc));
            }
            same_bufs("out", out, n);
            free_bufs();
        }
        WHAT("scale_acc2 m=%zu k=%zu off=%zu", m, k, g_off);
        for (int s = 0; s < 2; s++) {
            br_buf *b0 = buf_in(s, BR_F32, a0, n), *b1 = buf_in(s, BR_F32, a1, n);
            br_buf *d0 = buf_in(s, BR_F32, c0, k), *d1 = buf_in(s, BR_F32, c1, k);
            out[s] = buf_out(s, BR_F32, n);
            CHECK_OK(g_ctx[s], br_scale_acc2(g_ctx[s], b0, d0, b1, d1, out[s], m, k));
        }
        same_bufs("out", out, n);
        free_bufs();

        WHAT("add n=%zu off=%zu (out = a, then out fresh)", n, g_off);
        br_buf *alias[2];
        for (int s = 0; s < 2; s++) {
            br_buf *ba = buf_in(s, BR_F32, a0, n), *bb = buf_in(s, BR_F32, a1, n);
            out[s] = buf_out(s, BR_F32, n);
            CHECK_OK(g_ctx[s], br_add(g_ctx[s], ba, bb, out[s], n));
            CHECK_OK(g_ctx[s], br_add(g_ctx[s], ba, bb, ba, n));
            alias[s] = ba;
        }
        same_bufs("out", out, n);
        same_bufs("a (aliased out)", alias, n);
        free_bufs();

        /* split_qg: m tokens, heads·2·hd = k rounded down to even (hd ≥ 1) */
        size_t heads = t_rand_size(&r, 1, 4), hd = (k + 1) / 2, nh = m * heads * hd;
        float *qg = t_rand(&r, 2 * nh, 1.0f), *q = t_rand(&r, nh, 1.0f), *g = t_rand(&r, nh, 1.0f);
        WHAT("split_qg m=%zu heads=%zu hd=%zu off=%zu", m, heads, hd, g_off);
        br_buf *bq[2], *bg[2], *bqg[2];
        for (int s = 0; s < 2; s++) {
            br_buf *src = buf_in(s, BR_F32, qg, 2 * nh);
            bq[s] = buf_out(s, BR_F32, nh);
            bg[s] = buf_out(s, BR_F32, nh);
            CHECK_OK(g_ctx[s], br_split_qg(g_ctx[s], src, bq[s], bg[s], m, heads, hd, 0));
            br_buf *q2 = buf_in(s, BR_F32, q, nh), *g2 = buf_in(s, BR_F32, g, nh);
            bqg[s] = buf_out(s, BR_F32, 2 * nh);
            CHECK_OK(g_ctx[s], br_split_qg(g_ctx[s], bqg[s], q2, g2, m, heads, hd, 1));
        }
        same_bufs("q", bq, nh);
        same_bufs("gate", bg, nh);
        same_bufs("qg (merged)", bqg, 2 * nh);
        free_bufs();
        free(qg);
        free(q);
        free(g);
        free(a0);
        free(a1);
        free(o0);
        free(c0);
        free(c1);
    }
}

/* Every f16 bit pattern (NaNs with their payloads, infinities, subnormals), then
 * random lengths. */
static void f16_to_f32_all(void) {
    br_rng r = t_rng_for(7);
    FOR_OFFSETS for (int i = 0; i < 4; i++) {
        size_t n = i == 0 ? 65536 : t_rand_size(&r, 1, 100000);
        uint16_t *h = t_xmalloc(n * 2);
        for (size_t j = 0; j < n; j++)
            h[j] = i == 0 ? (uint16_t)j : (uint16_t)br_rng_u64(&r);
        WHAT("f16_to_f32 n=%zu off=%zu", n, g_off);
        br_buf *out[2];
        for (int s = 0; s < 2; s++) {
            br_buf *src = buf_in(s, BR_F16, h, n);
            out[s] = buf_out(s, BR_F32, n);
            CHECK_OK(g_ctx[s], br_f16_to_f32(g_ctx[s], src, out[s], n));
        }
        same_bufs("dst", out, n);
        free_bufs();
        free(h);
    }
}

/* ---------------------------------------------------------------- dense */

static void dense_ops(void) {
    br_rng r = t_rng_for(8);
    static const size_t fixed[][3] = {{1, 1, 1},     {70, 200, 48}, {1000, 77, 13}, {5, 300, 100},
                                      {130, 64, 47}, {1, 1000, 3},  {1001, 33, 7},  {257, 129, 49}};
    const size_t nfixed = sizeof fixed / sizeof fixed[0];
    FOR_OFFSETS for (size_t i = 0; i < nfixed + N_RANDOM; i++) {
        size_t m, k, rr;
        t_pick_shape3(&r, fixed, nfixed, i, 1, 400, 1, 300, 1, 64, &m, &k, &rr);
        float *a = t_rand(&r, m * k, 1.0f), *w = t_rand(&r, rr * k, 1.0f);
        float *o0 = t_rand(&r, m * rr, 1.0f), *dy = t_rand(&r, m * rr, 1.0f);
        float *dx0 = t_rand(&r, m * k, 1.0f);
        /* forward: cuda plain, cuda tiled against cpu plain, cpu tiled against cpu plain */
        for (int acc = 0; acc <= 1; acc++) {
            WHAT("dense_fwd m=%zu k=%zu r=%zu accumulate=%d off=%zu", m, k, rr, acc, g_off);
            br_buf *out[2][2] = {{NULL, NULL}, {NULL, NULL}}; /* [impl plain, tiled][side] */
            for (int s = 0; s < 2; s++) {
                br_buf *ba = buf_in(s, BR_F32, a, m * k), *bw = buf_in(s, BR_F32, w, rr * k);
                for (int t = 0; t < (rr <= 48 ? 2 : 1); t++) {
                    out[t][s] = acc ? buf_in(s, BR_F32, o0, m * rr) : buf_out(s, BR_F32, m * rr);
                    CHECK_OK(g_ctx[s], br_dense_fwd(g_ctx[s], ba, bw, out[t][s], m, k, rr, acc,
                                                    t ? BR_DENSE_TILED : BR_DENSE_PLAIN));
                }
            }
            same_bufs("out (plain)", out[0], m * rr);
            if (rr <= 48) {
                br_buf *tiled_dut[2] = {out[1][DUT], out[0][REF]};
                br_buf *tiled_ref[2] = {out[1][REF], out[0][REF]};
                same_bufs("out (cuda tiled vs cpu plain)", tiled_dut, m * rr);
                /* the CPU's own tiled variant: compared as if it were the device */
                void *x = dl(REF, tiled_ref[0], m * rr), *y = dl(REF, tiled_ref[1], m * rr);
                same32("out (cpu tiled vs cpu plain)", x, y, m * rr);
                free(x);
                free(y);
            }
            free_bufs();
        }
        WHAT("dense_bwd m=%zu k=%zu r=%zu off=%zu", m, k, rr, g_off);
        br_buf *dx[2][2];
        for (int s = 0; s < 2; s++) {
            br_buf *bdy = buf_in(s, BR_F32, dy, m * rr), *bw = buf_in(s, BR_F32, w, rr * k);
            for (int t = 0; t < 2; t++) {
                dx[t][s] = buf_in(s, BR_F32, dx0, m * k);
                CHECK_OK(g_ctx[s], br_dense_bwd(g_ctx[s], bdy, bw, dx[t][s], m, k, rr,
                                                t ? BR_DENSE_TILED : BR_DENSE_PLAIN));
            }
        }
        same_bufs("dx (plain)", dx[0], m * k);
        br_buf *tiled_vs_plain[2] = {dx[1][DUT], dx[0][REF]};
        same_bufs("dx (cuda tiled vs cpu plain)", tiled_vs_plain, m * k);
        same_bufs("dx (tiled)", dx[1], m * k);
        free_bufs();
        free(a);
        free(w);
        free(o0);
        free(dy);
        free(dx0);
    }
}

/* ---------------------------------------------------------------- optimizer ops */

/* Several Adam steps on both sides from the same state; after each, w, m1, m2
 * within 1e-6 relative. Variants: mask, relative floor, sched buffer (and a
 * refused step, which must leave everything as it was). */
static void adam_steps(void) {
    br_rng r = t_rng_for(9);
    static const size_t sizes[] = {1, 1000, 100003};
    FOR_OFFSETS for (size_t si = 0; si < 3; si++) for (int variant = 0; variant < 4; variant++) {
        size_t n = sizes[si];
        int cat = variant == 3, use_mask = variant >= 1, use_sched = variant >= 2;
        float *w = t_rand(&r, n, 1.0f), *m1 = t_rand(&r, n, 0.01f), *m2 = t_xmalloc(n * 4);
        float *mask = t_xmalloc(n * 4), *rho = t_xmalloc(n * 4);
        for (size_t j = 0; j < n; j++) {
            m2[j] = 1e-4f * (float)br_rng_unit(&r);
            mask[j] = br_rng_unit(&r) < 0.2 ? 0.0f : 1.0f;
            rho[j] = br_rng_unit(&r) < 0.5 ? 0.0f : 1e-3f * (float)(1 + j % 7);
        }
        br_adam_hp hp = {.lr = 1e-3f,
                         .beta1 = 0.9f,
                         .beta2 = 0.999f,
                         .eps = 1e-8f,
                         .grad_mul = 0.5f,
                         .rel_floor = variant == 1 ? 2e-3f : 0.0f};
        br_buf *bw[2], *bm1[2], *bm2[2], *bmask[2], *brho[2], *bsched[2];
        for (int s = 0; s < 2; s++) {
            bw[s] = buf_in(s, BR_F32, w, n);
            bm1[s] = buf_in(s, BR_F32, m1, n);
            bm2[s] = buf_in(s, BR_F32, m2, n);
            bmask[s] = use_mask ? buf_in(s, BR_F32, mask, n) : NULL;
            brho[s] = buf_in(s, BR_F32, rho, n);
            float sched0[4] = {0, 0, 0, 0};
            bsched[s] = buf_in(s, BR_F32, sched0, 4);
        }
        for (uint32_t step = 1; step <= 4; step++) {
            float *grad = t_rand(&r, n, 2.0f);
            float sched[4] = {2e-3f / (float)step, (float)(step + 10), 0.25f,
                              step == 3 ? 1.0f : 0.0f}; /* step 3 refused */
            int refused = use_sched && step == 3;
            WHAT("adam%s n=%zu variant=%d step=%u off=%zu", cat ? "_cat" : "", n, variant, step,
                 g_off);
            float *before = refused ? dl(DUT, bw[DUT], n) : NULL;
            float *w_ref_old = dl(REF, bw[REF], n);
            for (int s = 0; s < 2; s++) {
                br_ctx *c = g_ctx[s];
                br_buf *bg = buf_in(s, BR_F32, grad, n);
                hp.step = step;
                hp.sched = NULL;
                if (use_sched) {
                    CHECK_OK(c, br_buf_upload(bsched[s], 0, sched, 4));
                    hp.sched = bsched[s];
                }
                if (cat)
                    CHECK_OK(c,
                             br_adam_cat(c, bw[s], bg, bm1[s], bm2[s], bmask[s], brho[s], n, &hp));
                else
                    CHECK_OK(c, br_adam(c, bw[s], bg, bm1[s], bm2[s], bmask[s], n, &hp));
            }
            float *x, *y;
            const char *names[3] = {"w", "m1", "m2"};
            br_buf **bufs[3] = {bw, bm1, bm2};
            for (int v = 0; v < 3; v++) {
                x = dl(DUT, bufs[v][DUT], n);
                y = dl(REF, bufs[v][REF], n);
                if (v == 0) { /* the step w_new − w_old of the reference */
                    for (size_t j = 0; j < n; j++)
                        w_ref_old[j] = y[j] - w_ref_old[j];
                    close32_scaled(names[v], x, y, w_ref_old, n, 1e-6);
                } else {
                    close32(names[v], x, y, n, 1e-6);
                }
                if (v == 0 && before) same32("w (refused step changes nothing)", x, before, n);
                free(x);
                free(y);
            }
            free(before);
            free(w_ref_old);
            free(grad);
        }
        free_bufs();
        free(w);
        free(m1);
        free(m2);
        free(mask);
        free(rho);
    }
}

/* sumsq partials (the kernels reproduce the CPU's partition and order: compared
 * bit for bit, which also holds the contract's tolerance), NaN and Inf landing in
 * the partial their element belongs to, and sumsq_cat with entries past the end
 * of a (clamped by both backends). */
static void sumsq_parts(void) {
    br_rng r = t_rng_for(10);
    static const size_t sizes[] = {1, 255, 1025, 65537, 1000003, 70};
    FOR_OFFSETS for (size_t si = 0; si < 6; si++) for (int special = 0; special < 3; special++) {
        size_t n = sizes[si], at = t_rand_size(&r, 0, n - 1);
        if (TOO_BIG(n)) continue;
        float *a = t_rand(&r, n, 3.0f);
        if (special) a[at] = special == 1 ? NAN : -INFINITY;
        WHAT("sumsq n=%zu special=%d at=%zu off=%zu", n, special, at, g_off);
        br_buf *out[2];
        for (int s = 0; s < 2; s++) {
            br_buf *ba = buf_in(s, BR_F32, a, n);
            out[s] = buf_out(s, BR_F32, BR_SUMSQ_PARTS);
            CHECK_OK(g_ctx[s], br_sumsq(g_ctx[s], ba, n, out[s]));
        }
        float *x = dl(DUT, out[DUT], BR_SUMSQ_PARTS), *y = dl(REF, out[REF], BR_SUMSQ_PARTS);
        size_t part = at / BR_SUMSQ_LANES % BR_SUMSQ_PARTS;
        if (special) {
            CHECK(special == 1 ? isnan(x[part]) : isinf(x[part]),
                  "%s: partial %zu is %g on %s, not %s", g_what, part, x[part], side_name[DUT],
                  special == 1 ? "NaN" : "Inf");
            x[part] = y[part] = 0.0f; /* NaN payloads may differ; the rest must not */
        }
        same32("partials", x, y, BR_SUMSQ_PARTS);
        close32("partials", x, y, BR_SUMSQ_PARTS, 1e-5);
        free(x);
        free(y);
        free(a);
        free_bufs();
    }
    /* sumsq_cat over 6 parameters of a, two of them running past its end */
    FOR_OFFSETS for (int rep = 0; rep < 3; rep++) {
        size_t n = t_rand_size(&r, 1000, 300000), np = 6;
        float *a = t_rand(&r, n, 1.0f);
        uint32_t tab[12];
        for (size_t p = 0; p < 4; p++) {
            size_t off = t_rand_size(&r, 0, n - 1);
            tab[2 * p] = (uint32_t)off;
            tab[2 * p + 1] = (uint32_t)t_rand_size(&r, 1, n - off);
        }
        tab[8] = (uint32_t)(n - 10); /* length past the end: clamped to 10 */
        tab[9] = 1000;
        tab[10] = (uint32_t)(n + 5); /* offset past the end: nothing */
        tab[11] = 3;
        WHAT("sumsq_cat n=%zu np=%zu off=%zu", n, np, g_off);
        br_buf *out[2];
        for (int s = 0; s < 2; s++) {
            br_buf *ba = buf_in(s, BR_F32, a, n), *bt = buf_in(s, BR_U32, tab, 2 * np);
            out[s] = buf_out(s, BR_F32, np * BR_SUMSQ_PARTS);
            CHECK_OK(g_ctx[s], br_sumsq_cat(g_ctx[s], ba, bt, np, out[s]));
        }
        same_bufs("partials", out, np * BR_SUMSQ_PARTS);
        free(a);
        free_bufs();
    }
    g_off = 0;
}

/* ---------------------------------------------------------------- graphs */

/* A recorded sequence (a colsum needing the workspace, cvt_t, adam reading its
 * schedule from a buffer) replayed twice — the second time as a refused step —
 * on both sides; replays see the schedule uploaded between them. */
static void graph_replay(void) {
    br_rng r = t_rng_for(11);
    size_t rows = 20000, k = 37, n = rows * k, nt = br_pad_rows(k) * br_pad_tokens(rows);
    float *a = t_rand(&r, n, 1.0f), *b = t_rand(&r, n, 1.0f), *grad = t_rand(&r, k, 1.0f);
    float *w = t_rand(&r, k, 1.0f), *m0 = t_rand(&r, k, 0.01f), *v0 = t_xmalloc(k * 4);
    for (size_t j = 0; j < k; j++)
        v0[j] = 1e-4f;
    br_buf *sum[2], *xt[2], *bw[2], *bm1[2], *bm2[2];
    br_graph *g[2] = {NULL, NULL};
    br_buf *sched[2];
    g_off = 0;
    for (int s = 0; s < 2; s++) {
        br_ctx *c = g_ctx[s];
        br_buf *ba = buf_in(s, BR_F32, a, n), *bb = buf_in(s, BR_F32, b, n);
        br_buf *bg = buf_in(s, BR_F32, grad, k);
        sum[s] = buf_out(s, BR_F32, k);
        xt[s] = buf_out(s, BR_F16, nt);
        bw[s] = buf_in(s, BR_F32, w, k);
        bm1[s] = buf_in(s, BR_F32, m0, k);
        bm2[s] = buf_in(s, BR_F32, v0, k);
        float s0[4] = {1e-3f, 1.0f, 1.0f, 0.0f};
        sched[s] = buf_in(s, BR_F32, s0, 4);
        br_adam_hp hp = {.beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .sched = sched[s]};
        CHECK_OK(c, br_graph_begin(c));
        CHECK_OK(c, br_colsum(c, ba, bb, NULL, BR_TERM_AB, sum[s], rows, k, 0));
        CHECK_OK(c, br_cvt_t(c, ba, NULL, xt[s], rows, k, 0.5f));
        CHECK_OK(c, br_adam(c, bw[s], bg, bm1[s], bm2[s], NULL, k, &hp));
        CHECK_OK(c, br_graph_end(c, &g[s]));
    }
    for (int launch = 0; launch < 3; launch++) {
        float s1[4] = {2e-3f, (float)(launch + 1), 1.0f, launch == 1 ? 1.0f : 0.0f};
        for (int s = 0; s < 2; s++) {
            CHECK_OK(g_ctx[s], br_buf_upload(sched[s], 0, s1, 4));
            CHECK_OK(g_ctx[s], br_graph_launch(g[s]));
            CHECK_OK(g_ctx[s], br_ctx_sync(g_ctx[s]));
        }
        WHAT("graph launch %d", launch);
        same_bufs("colsum", sum, k);
        same_bufs("cvt_t", xt, nt);
        float *x = dl(DUT, bw[DUT], k), *y = dl(REF, bw[REF], k);
        close32("adam w", x, y, k, 1e-6);
        free(x);
        free(y);
    }
    for (int s = 0; s < 2; s++)
        br_graph_free(g[s]);
    free_bufs();
    free(a);
    free(b);
    free(grad);
    free(w);
    free(m0);
    free(v0);
}

/* ---------------------------------------------------------------- layer ops */

/* The reformulated layer's ops (ops/layer_ops.h): expand_scaled into a path's rows
 * of a wider plane, expand_scaled_rows into a path's columns, sign_rowdot (both outputs, grad
 * accumulating or not, dsum only), cvt_both (both outputs, or one), bit for bit. */
static void layer_ops(void) {
    br_rng r = t_rng_for(12);
    static const size_t fixed[][2] = {{1, 32}, {7, 64}, {3584, 384}, {1024, 384}, {129, 96}};
    const size_t nfixed = sizeof fixed / sizeof fixed[0];
    FOR_OFFSETS for (size_t i = 0; i < nfixed + N_RANDOM; i++) {
        size_t rows, rk;
        t_pick_shape2(&r, fixed, nfixed, i, 1, 900, 1, 8, &rows, &rk);
        if (i >= nfixed) rk *= 32;
        if (TOO_BIG(rows * rk * 3)) continue;
        size_t words = rk / 32, ld = (rows + 7) / 8 * 8 + 8 * t_rand_size(&r, 0, 2);
        uint32_t *bits = t_xmalloc(rows * words * 4);
        for (size_t j = 0; j < rows * words; j++)
            bits[j] = (uint32_t)br_rng_u64(&r);
        float *rs = rand_cols(&r, rows), scale = rand_scale(&r);
        WHAT("expand_scaled rows=%zu r=%zu ld=%zu off=%zu", rows, rk, ld, g_off);
        br_buf *pl[2]; /* path 1's rows of a two-path plane (path 0's stay poisoned) */
        for (int s = 0; s < 2; s++) {
            br_buf *bb = buf_in(s, BR_U32, bits, rows * words), *br = buf_in(s, BR_F32, rs, rows);
            br_buf *plane = buf_out(s, BR_F16, 2 * rk * ld);
            if (br_buf_view(plane, rk * ld, rk * ld, &pl[s]) != BR_OK) die(s, "br_buf_view");
            track(s, pl[s]);
            CHECK_OK(g_ctx[s], br_expand_scaled(g_ctx[s], bb, rows, rk, br, scale, pl[s], ld));
        }
        same_bufs("plane_t", pl, rk * ld);
        free_bufs();
        size_t ldr = 2 * rk + 8 * t_rand_size(&r, 0, 1); /* path 1's columns of [rows][ldr] */
        WHAT("expand_scaled_rows rows=%zu r=%zu ld=%zu off=%zu", rows, rk, ldr, g_off);
        for (int s = 0; s < 2; s++) {
            br_buf *bb = buf_in(s, BR_U32, bits, rows * words), *br = buf_in(s, BR_F32, rs, rows);
            br_buf *plane = buf_out(s, BR_F16, rows * ldr);
            if (br_buf_view(plane, rk, (rows - 1) * ldr + rk, &pl[s]) != BR_OK)
                die(s, "br_buf_view");
            track(s, pl[s]);
            CHECK_OK(g_ctx[s],
                     br_expand_scaled_rows(g_ctx[s], bb, rows, rk, br, scale, pl[s], ldr));
        }
        { /* only the path's columns: the poisons between them differ per backend */
            size_t nv = (rows - 1) * ldr + rk;
            uint16_t *got[2], *col[2];
            for (int s = 0; s < 2; s++) {
                got[s] = dl(s, pl[s], nv);
                col[s] = t_xmalloc(rows * rk * 2);
                for (size_t row = 0; row < rows; row++)
                    memcpy(col[s] + row * rk, got[s] + row * ldr, rk * 2);
            }
            same16("plane", col[DUT], col[REF], rows * rk);
            for (int s = 0; s < 2; s++)
                free(got[s]), free(col[s]);
        }
        free_bufs();

        size_t ldm = 2 * rk + t_rand_size(&r, 0, 3), col0 = i % 2 ? rk : 0;
        float *mat = rand_wide(&r, rows * ldm), *g0 = t_rand(&r, rows * rk, 1.0f);
        float *d0 = t_rand(&r, rows, 1.0f);
        int accumulate = (int)(i % 3 == 1), dsum_only = i % 4 == 3;
        WHAT("sign_rowdot rows=%zu r=%zu ldm=%zu col0=%zu acc=%d dsum_only=%d off=%zu", rows, rk,
             ldm, col0, accumulate, dsum_only, g_off);
        br_buf *gr[2] = {NULL, NULL}, *ds[2];
        for (int s = 0; s < 2; s++) {
            br_buf *bm = buf_in(s, BR_F32, mat, rows * ldm),
                   *bb = buf_in(s, BR_U32, bits, rows * words);
            br_buf *br = buf_in(s, BR_F32, rs, rows);
            if (!dsum_only)
                gr[s] =
                    accumulate ? buf_in(s, BR_F32, g0, rows * rk) : buf_out(s, BR_F32, rows * rk);
            ds[s] = buf_in(s, BR_F32, d0, rows);
            CHECK_OK(g_ctx[s], br_sign_rowdot(g_ctx[s], bm, ldm, col0, bb, br, gr[s], ds[s], rows,
                                              rk, accumulate));
        }
        if (!dsum_only) same_bufs("grad", gr, rows * rk);
        same_bufs("dsum", ds, rows);
        free_bufs();
        free(bits), free(rs), free(mat), free(g0), free(d0);
    }
    FOR_OFFSETS for (size_t i = 0; i < N_STAGE_SHAPES + N_RANDOM; i++) {
        size_t m, k;
        t_pick_shape2(&r, stage_shapes, N_STAGE_SHAPES, i, 1, 700, 1, 700, &m, &k);
        if (TOO_BIG(m * k)) continue;
        size_t ld = i % 3 == 2 ? k + t_rand_size(&r, 1, 20) : k,
               which = i % 3; /* 1: no dst_t, 2: no dst */
        size_t nd = br_pad_rows(m) * ld, nt = br_pad_rows(k) * br_pad_tokens(m);
        float *src = rand_wide(&r, m * k), *col = rand_cols(&r, k), scale = rand_scale(&r);
        int with_col = (int)(i % 2);
        WHAT("cvt_both m=%zu k=%zu ld=%zu col=%d which=%zu off=%zu", m, k, ld, with_col, which,
             g_off);
        br_buf *d[2] = {NULL, NULL}, *t[2] = {NULL, NULL};
        for (int s = 0; s < 2; s++) {
            br_buf *bs = buf_in(s, BR_F32, src, m * k);
            br_buf *bc = with_col ? buf_in(s, BR_F32, col, k) : NULL;
            if (which != 2) d[s] = buf_out(s, BR_F16, nd);
            if (which != 1) t[s] = buf_out(s, BR_F16, nt);
            CHECK_OK(g_ctx[s], br_cvt_both(g_ctx[s], bs, bc, d[s], t[s], m, k, ld, scale));
        }
        if (d[0]) same_bufs("dst", d, nd);
        if (t[0]) same_bufs("dst_t", t, nt);
        free_bufs();
        free(src), free(col);
    }
}

/* ---------------------------------------------------------------- bad arguments */

/* A buffer of the other backend's context is refused by every op family, with a
 * message, before either backend sees it. */
static void foreign_buffers(void) {
    br_ctx *c = g_ctx[DUT];
    g_off = 0;
    float host[256 * 4];
    for (int i = 0; i < 256 * 4; i++)
        host[i] = (float)i;
    br_buf *own = buf_in(DUT, BR_F32, host, 256 * 4), *own16 = buf_out(DUT, BR_F16, 128 * 4);
    br_buf *other = buf_in(REF, BR_F32, host, 256 * 4);
    br_adam_hp hp = {
        .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .step = 1, .grad_mul = 1.0f};
    CHECK_FAILS(c, BR_E_ARG, br_cvt(c, other, NULL, own16, 1, 4, 1.0f));
    CHECK_FAILS(c, BR_E_ARG, br_colsum(c, own, other, NULL, BR_TERM_AB, own, 1, 4, 0));
    CHECK_FAILS(c, BR_E_ARG, br_scale_acc(c, own, other, own, 1, 4, 0));
    CHECK_FAILS(c, BR_E_ARG, br_dense_fwd(c, own, other, own, 1, 4, 1, 0, BR_DENSE_PLAIN));
    CHECK_FAILS(c, BR_E_ARG, br_adam(c, own, other, own, own, NULL, 4, &hp));
    CHECK_FAILS(c, BR_E_ARG, br_sumsq(c, other, 4, own));
    CHECK_FAILS(c, BR_E_ARG, br_buf_copy(own, 0, other, 0, 4));
    free_bufs();
}

int main(void) {
    const char *self = getenv("BITRANK_CROSS_SELFTEST");
    int selftest = self && strcmp(self, "1") == 0;
    const char *quick = getenv("BITRANK_TEST_QUICK");
    g_quick = quick && strcmp(quick, "1") == 0;
    if (!selftest && strncmp(t_device(), "cuda", 4) != 0 && strncmp(t_device(), "vulkan", 6) != 0) {
        fprintf(stderr,
                "skip: compares a CUDA or Vulkan context with the CPU; device under test is %s\n",
                t_device());
        return T_SKIP;
    }
    g_ctx[DUT] = selftest ? t_cpu_ctx() : t_ctx();
    side_name[DUT] = br_ctx_backend(g_ctx[DUT]);
    g_ctx[REF] = t_cpu_ctx();
    fprintf(stderr, "comparing %s with %s\n", br_ctx_device(g_ctx[DUT]), br_ctx_device(g_ctx[REF]));
    static const t_case cases[] = {
        T_CASE(fill_and_copy),   T_CASE(cvt_family),       T_CASE(expand_planes),
        T_CASE(colsum_terms),    T_CASE(colsum_fused_ops), T_CASE(elementwise_ops),
        T_CASE(f16_to_f32_all),  T_CASE(dense_ops),        T_CASE(adam_steps),
        T_CASE(sumsq_parts),     T_CASE(graph_replay),     T_CASE(layer_ops),
        T_CASE(foreign_buffers),
    };
    int rc = t_run("cross_backend", cases, sizeof cases / sizeof cases[0]);
    br_ctx_free(g_ctx[DUT]);
    br_ctx_free(g_ctx[REF]);
    return rc;
}
