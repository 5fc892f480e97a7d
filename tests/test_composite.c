/* Composites: br_plane_linear, br_weight_grad and br_gram_acc against two f64
 * references, with every scratch and output poisoned first: of the unrounded inputs
 * at the contract's tolerance (‖got − ref‖/‖ref‖, where there are enough outputs for
 * that ratio not to hinge on one cancelling sum), and of the exact f16 values the
 * staging must produce, where only f32 accumulation is left: ‖got − ref‖ relative to
 * the norm of the sums of |terms| (robust to cancellation, and still ~1000 times
 * larger than the error of a result that is wrong in any way). Graphs; bad arguments. */
#include "harness.h"

#define TOL 3e-3       /* the contract, against f64 of the unrounded inputs */
#define TOL_F16 1e-4   /* against f64 of the exact f16 operands, relative to Σ|terms| */
#define MIN_OUTPUTS 20 /* fewer outputs: ‖ref‖ may be one cancelling sum; skip the ratio */

/* f32 → f16 → f64, the value staging gives x·scale. */
static double staged(float x, float scale) {
    return br_half_to_float(br_half_from_float(x * scale));
}

/* Poisoned f16 scratch: the ops must write every element the GEMM reads. */
static br_buf *poison16(br_ctx *ctx, size_t n) { return t_buf_poison(ctx, BR_F16, n, T_NAN16); }
static br_buf *poison32(br_ctx *ctx, size_t n) { return t_buf_poison(ctx, BR_F32, n, T_NAN32); }

/* Three f64 references of one result: of the unrounded inputs, of the staged f16
 * values, and the magnitude Σ|terms| (plus |initial value| where one is added). */
typedef struct refs {
    double *exact, *staged, *mag;
    size_t n;
} refs;

static refs refs_new(size_t n) {
    refs r = {t_xmalloc(n * sizeof(double)), t_xmalloc(n * sizeof(double)),
              t_xmalloc(n * sizeof(double)), n};
    memset(r.exact, 0, n * sizeof(double));
    memset(r.staged, 0, n * sizeof(double));
    memset(r.mag, 0, n * sizeof(double));
    return r;
}

static void refs_free(refs *r) { free(r->exact), free(r->staged), free(r->mag); }

/* Checks got against both references; *worst and *worst16 keep the largest errors. */
static void check_refs(const float *got, const refs *r, const char *what, double *worst,
                       double *worst16) {
    if (r->n >= MIN_OUTPUTS) {
        double err = t_rel_err(got, r->exact, r->n);
        CHECK(err < TOL, "%s: relative error %.3g vs f64 (tolerance %.0e)", what, err, TOL);
        if (err > *worst) *worst = err;
    }
    double num = 0, den = 0;
    for (size_t i = 0; i < r->n; i++) {
        double d = (double)got[i] - r->staged[i];
        num += isfinite(got[i]) ? d * d : INFINITY;
        den += r->mag[i] * r->mag[i];
    }
    double err16 = sqrt(num / (den > 1e-300 ? den : 1e-300));
    CHECK(err16 < TOL_F16, "%s: error %.3g vs f64 of the staged f16 values (tolerance %.0e)", what,
          err16, TOL_F16);
    if (err16 > *worst16) *worst16 = err16;
}

/* y[t][j] = Σ_kk x[t][kk]·plane[j][kk]. */
static void ref_plane_linear(const float *x, const uint16_t *plane, size_t ntok, size_t n, size_t k,
                             float scale, refs *r) {
    for (size_t t = 0; t < ntok; t++)
        for (size_t j = 0; j < n; j++) {
            double e = 0, s = 0, a = 0;
            for (size_t kk = 0; kk < k; kk++) {
                double p = br_half_to_float(plane[j * k + kk]);
                e += (double)x[t * k + kk] * p;
                s += staged(x[t * k + kk], scale) * p;
                a += fabs(staged(x[t * k + kk], scale) * p);
            }
            r->exact[t * n + j] = e;
            r->staged[t * n + j] = s / scale;
            r->mag[t * n + j] = a / fabs(scale);
        }
}

static void plane_linear(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(11);
    static const size_t ntoks[] = {1, 70, 300}, ns[] = {1, 33, 200}, ks[] = {32, 96, 256};
    static const float scales[] = {1.0f, 8.0f, 0.25f};
    double worst = 0, worst16 = 0;
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 3; b++)
            for (size_t c = 0; c < 3; c++) {
                size_t ntok = ntoks[a], n = ns[b], k = ks[c];
                float scale = scales[(a + b + c) % 3];
                float *x = t_rand(&r, ntok * k, 3.0f);
                uint16_t *plane = t_xmalloc(n * k * sizeof *plane);
                for (size_t i = 0; i < n * k; i++)
                    plane[i] = br_half_from_float(br_rng_sym(&r));
                br_buf *xb = t_buf_from(ctx, BR_F32, x, ntok * k);
                br_buf *pb = t_buf_from(ctx, BR_F16, plane, n * k);
                br_buf *act16 = poison16(ctx, br_pad_rows(ntok) * k);
                br_buf *yb = poison32(ctx, ntok * n + 7);
                CHECK_OK(ctx, br_plane_linear(ctx, pb, xb, act16, yb, ntok, n, k, scale));
                refs ref = refs_new(ntok * n);
                ref_plane_linear(x, plane, ntok, n, k, scale, &ref);
                float *y = t_download_f32(ctx, yb, ntok * n + 7);
                char what[80];
                snprintf(what, sizeof what, "plane_linear ntok=%zu n=%zu k=%zu scale=%g", ntok, n,
                         k, scale);
                check_refs(y, &ref, what, &worst, &worst16);
                for (size_t i = ntok * n; i < ntok * n + 7; i++)
                    CHECK(isnan(y[i]), "%s: y[%zu] past the end was written", what, i);
                free(x), free(plane), free(y);
                refs_free(&ref);
                br_buf_free(xb), br_buf_free(pb), br_buf_free(act16), br_buf_free(yb);
            }
    fprintf(stderr, "  plane_linear: worst relative error %.3g (vs staged f16: %.3g)\n", worst,
            worst16);
    br_ctx_free(ctx);
}

/* y may be x's own buffer: x is staged before y is written. */
static void plane_linear_in_place(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(15);
    size_t ntok = 50, n = 40, k = 64;
    float *x = t_rand(&r, ntok * k, 1.0f);
    uint16_t *plane = t_xmalloc(n * k * sizeof *plane);
    for (size_t i = 0; i < n * k; i++)
        plane[i] = br_half_from_float(br_rng_sym(&r));
    br_buf *xb = t_buf_from(ctx, BR_F32, x, ntok * k);
    br_buf *pb = t_buf_from(ctx, BR_F16, plane, n * k);
    br_buf *act16 = poison16(ctx, br_pad_rows(ntok) * k);
    CHECK_OK(ctx, br_plane_linear(ctx, pb, xb, act16, xb, ntok, n, k, 4.0f));
    refs ref = refs_new(ntok * n);
    ref_plane_linear(x, plane, ntok, n, k, 4.0f, &ref);
    float *y = t_download_f32(ctx, xb, ntok * n);
    double worst = 0, worst16 = 0;
    check_refs(y, &ref, "plane_linear in place", &worst, &worst16);
    free(x), free(plane), free(y);
    refs_free(&ref);
    br_buf_free(xb), br_buf_free(pb), br_buf_free(act16);
    br_ctx_free(ctx);
}

/* dw[i][j] = Σ_t dy[t][i]·x[t][j]. */
static void ref_weight_grad(const float *x, const float *dy, size_t ntok, size_t m, size_t k,
                            float gscale, refs *r) {
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < k; j++) {
            double e = 0, s = 0, a = 0;
            for (size_t t = 0; t < ntok; t++) {
                double term = staged(dy[t * m + i], gscale) * staged(x[t * k + j], 1.0f);
                e += (double)dy[t * m + i] * x[t * k + j];
                s += term;
                a += fabs(term);
            }
            r->exact[i * k + j] = e;
            r->staged[i * k + j] = s / gscale;
            r->mag[i * k + j] = a / fabs(gscale);
        }
}

static void weight_grad(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(12);
    static const size_t ntoks[] = {1, 70, 129}, ms[] = {1, 33, 200}, ks[] = {1, 40, 128};
    double worst = 0, worst16 = 0;
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 3; b++)
            for (size_t c = 0; c < 3; c++) {
                size_t ntok = ntoks[a], m = ms[b], k = ks[c], kpad = br_pad_tokens(ntok);
                /* small gradients brought out of the f16 subnormals by gscale */
                float gscale = (a + b + c) % 2 ? 4096.0f : 1.0f;
                float dy_mag = gscale > 1 ? 1e-4f : 0.5f;
                float *x = t_rand(&r, ntok * k, 2.0f), *dy = t_rand(&r, ntok * m, dy_mag);
                br_buf *xb = t_buf_from(ctx, BR_F32, x, ntok * k);
                br_buf *dyb = t_buf_from(ctx, BR_F32, dy, ntok * m);
                br_buf *xt = poison16(ctx, br_pad_rows(k) * kpad);
                br_buf *dyt = poison16(ctx, br_pad_rows(m) * kpad);
                br_buf *dw = poison32(ctx, m * k);
                CHECK_OK(ctx, br_weight_grad(ctx, xb, dyb, xt, dyt, dw, ntok, m, k, gscale));
                refs ref = refs_new(m * k);
                ref_weight_grad(x, dy, ntok, m, k, gscale, &ref);
                float *got = t_download_f32(ctx, dw, m * k);
                char what[80];
                snprintf(what, sizeof what, "weight_grad ntok=%zu m=%zu k=%zu gscale=%g", ntok, m,
                         k, gscale);
                check_refs(got, &ref, what, &worst, &worst16);
                free(x), free(dy), free(got);
                refs_free(&ref);
                br_buf_free(xb), br_buf_free(dyb), br_buf_free(xt), br_buf_free(dyt);
                br_buf_free(dw);
            }
    fprintf(stderr, "  weight_grad: worst relative error %.3g (vs staged f16: %.3g)\n", worst,
            worst16);
    br_ctx_free(ctx);
}

/* acc[i][j] += Σ_t x[t][i]·x[t][j] (r holds the running references). */
static void ref_gram(const float *x, size_t ntok, size_t k, refs *r) {
    for (size_t i = 0; i < k; i++)
        for (size_t j = 0; j < k; j++) {
            double e = 0, s = 0, a = 0;
            for (size_t t = 0; t < ntok; t++) {
                double term = staged(x[t * k + i], 1.0f) * staged(x[t * k + j], 1.0f);
                e += (double)x[t * k + i] * x[t * k + j];
                s += term;
                a += fabs(term);
            }
            r->exact[i * k + j] += e;
            r->staged[i * k + j] += s;
            r->mag[i * k + j] += a;
        }
}

/* The references of an accumulator that starts at acc0. */
static refs refs_from(const float *acc0, size_t n) {
    refs r = refs_new(n);
    for (size_t i = 0; i < n; i++) {
        r.exact[i] = r.staged[i] = acc0[i];
        r.mag[i] = fabs(acc0[i]);
    }
    return r;
}

static void gram_acc(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(13);
    static const size_t ntoks[] = {1, 70, 300}, ks[] = {1, 33, 100};
    double worst = 0, worst16 = 0;
    for (size_t a = 0; a < 3; a++)
        for (size_t c = 0; c < 3; c++) {
            size_t ntok = ntoks[a], k = ks[c], kpad = br_pad_tokens(ntok);
            float *acc0 = t_rand(&r, k * k, 1.0f);
            br_buf *acc = t_buf_from(ctx, BR_F32, acc0, k * k);
            refs ref = refs_from(acc0, k * k);
            br_buf *xt = poison16(ctx, br_pad_rows(k) * kpad);
            br_buf *tmp = poison32(ctx, k * k);
            /* two batches accumulate */
            for (int batch = 0; batch < 2; batch++) {
                float *x = t_rand(&r, ntok * k, 1.5f);
                br_buf *xb = t_buf_from(ctx, BR_F32, x, ntok * k);
                CHECK_OK(ctx, br_gram_acc(ctx, xb, xt, acc, tmp, ntok, k));
                ref_gram(x, ntok, k, &ref);
                free(x);
                br_buf_free(xb);
            }
            float *got = t_download_f32(ctx, acc, k * k);
            char what[64];
            snprintf(what, sizeof what, "gram_acc ntok=%zu k=%zu", ntok, k);
            check_refs(got, &ref, what, &worst, &worst16);
            free(acc0), free(got);
            refs_free(&ref);
            br_buf_free(acc), br_buf_free(xt), br_buf_free(tmp);
        }
    fprintf(stderr, "  gram_acc: worst relative error %.3g (vs staged f16: %.3g)\n", worst,
            worst16);
    br_ctx_free(ctx);
}

/* The three composites recorded into one graph: nothing runs while recording; each
 * launch runs them all (gram_acc accumulates once per launch). */
static void composite_graph(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(14);
    size_t ntok = 45, n = 20, k = 64, m = 30, kpad = br_pad_tokens(ntok);
    float *x = t_rand(&r, ntok * k, 1.0f), *dy = t_rand(&r, ntok * m, 1.0f);
    uint16_t *plane = t_xmalloc(n * k * sizeof *plane);
    for (size_t i = 0; i < n * k; i++)
        plane[i] = br_half_from_float(br_rng_sym(&r));
    float *acc0 = t_rand(&r, k * k, 1.0f);
    br_buf *xb = t_buf_from(ctx, BR_F32, x, ntok * k), *dyb = t_buf_from(ctx, BR_F32, dy, ntok * m);
    br_buf *pb = t_buf_from(ctx, BR_F16, plane, n * k);
    br_buf *acc = t_buf_from(ctx, BR_F32, acc0, k * k);
    br_buf *act16 = poison16(ctx, br_pad_rows(ntok) * k), *y = poison32(ctx, ntok * n);
    br_buf *xt = poison16(ctx, br_pad_rows(k) * kpad), *dyt = poison16(ctx, br_pad_rows(m) * kpad);
    br_buf *dw = poison32(ctx, m * k), *tmp = poison32(ctx, k * k);
    br_graph *graph = NULL;
    CHECK_OK(ctx, br_graph_begin(ctx));
    CHECK_OK(ctx, br_plane_linear(ctx, pb, xb, act16, y, ntok, n, k, 2.0f));
    CHECK_OK(ctx, br_weight_grad(ctx, xb, dyb, xt, dyt, dw, ntok, m, k, 16.0f));
    CHECK_OK(ctx, br_gram_acc(ctx, xb, xt, acc, tmp, ntok, k));
    CHECK_OK(ctx, br_graph_end(ctx, &graph));
    CHECK(br_graph_op_count(graph) == 2 + 3 + 3, "graph holds %zu ops, expected 8",
          br_graph_op_count(graph));
    float *got = t_download_f32(ctx, y, ntok * n);
    size_t written = t_count_written32(got, ntok * n);
    free(got);
    got = t_download_f32(ctx, acc, k * k);
    for (size_t i = 0; i < k * k; i++)
        written += got[i] != acc0[i];
    free(got);
    CHECK(written == 0, "recording changed %zu outputs", written);

    refs y_ref = refs_new(ntok * n), dw_ref = refs_new(m * k), g_ref = refs_from(acc0, k * k);
    ref_plane_linear(x, plane, ntok, n, k, 2.0f, &y_ref);
    ref_weight_grad(x, dy, ntok, m, k, 16.0f, &dw_ref);
    double worst = 0, worst16 = 0;
    for (int launch = 0; launch < 2; launch++) {
        CHECK_OK(ctx, br_buf_fill(y, 0, ntok * n, T_NAN32));
        CHECK_OK(ctx, br_buf_fill(dw, 0, m * k, T_NAN32));
        CHECK_OK(ctx, br_graph_launch(graph));
        CHECK_OK(ctx, br_ctx_sync(ctx));
        ref_gram(x, ntok, k, &g_ref);
        float *gy = t_download_f32(ctx, y, ntok * n), *gdw = t_download_f32(ctx, dw, m * k);
        float *gacc = t_download_f32(ctx, acc, k * k);
        check_refs(gy, &y_ref, "graph: plane_linear", &worst, &worst16);
        check_refs(gdw, &dw_ref, "graph: weight_grad", &worst, &worst16);
        check_refs(gacc, &g_ref, "graph: gram_acc", &worst, &worst16);
        free(gy), free(gdw), free(gacc);
    }
    br_graph_free(graph);
    free(x), free(dy), free(plane), free(acc0);
    refs_free(&y_ref), refs_free(&dw_ref), refs_free(&g_ref);
    br_buf *all[] = {xb, dyb, pb, acc, act16, y, xt, dyt, dw, tmp};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        br_buf_free(all[i]);
    br_ctx_free(ctx);
}

static void plane_linear_bad_args(void) {
    br_ctx *ctx = t_ctx(), *other = t_ctx();
    size_t ntok = 5, n = 20, k = 64, act_n = br_pad_rows(ntok) * k;
    br_buf *plane = poison16(ctx, n * k), *x = poison32(ctx, ntok * k);
    br_buf *act16 = poison16(ctx, act_n), *y = poison32(ctx, ntok * n);
    br_buf *small_act = poison16(ctx, ntok * k); /* holds ntok rows, not the padded count */
    br_buf *small_plane = poison16(ctx, n * k - 1), *small_x = poison32(ctx, ntok * k - 1);
    br_buf *small_y = poison32(ctx, ntok * n - 1), *x16 = poison16(ctx, ntok * k);
    br_buf *foreign = t_buf_poison(other, BR_F32, ntok * k, 0);
    /* a plane and an act16 that share one element */
    br_buf *shared = poison16(ctx, n * k + act_n), *plane_part = NULL, *act_part = NULL;
    CHECK_OK(ctx, br_buf_view(shared, 0, n * k, &plane_part));
    CHECK_OK(ctx, br_buf_view(shared, n * k - 1, act_n, &act_part));

    CHECK(br_plane_linear(NULL, plane, x, act16, y, ntok, n, k, 1) == BR_E_ARG, "NULL ctx");
    CHECK_FAILS(ctx, BR_E_ARG, br_plane_linear(ctx, NULL, x, act16, y, ntok, n, k, 1));
    CHECK_FAILS(ctx, BR_E_ARG, br_plane_linear(ctx, plane, NULL, act16, y, ntok, n, k, 1));
    CHECK_FAILS(ctx, BR_E_ARG, br_plane_linear(ctx, plane, x, NULL, y, ntok, n, k, 1));
    CHECK_FAILS(ctx, BR_E_ARG, br_plane_linear(ctx, plane, x, act16, NULL, ntok, n, k, 1));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_plane_linear(ctx, plane, x16, act16, y, ntok, n, k, 1));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_plane_linear(ctx, x, x, act16, y, ntok, n, k, 1));
    CHECK_FAILS(ctx, BR_E_SIZE, br_plane_linear(ctx, plane, x, small_act, y, ntok, n, k, 1));
    CHECK_FAILS(ctx, BR_E_SIZE, br_plane_linear(ctx, small_plane, x, act16, y, ntok, n, k, 1));
    CHECK_FAILS(ctx, BR_E_SIZE, br_plane_linear(ctx, plane, small_x, act16, y, ntok, n, k, 1));
    CHECK_FAILS(ctx, BR_E_SIZE, br_plane_linear(ctx, plane, x, act16, small_y, ntok, n, k, 1));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_plane_linear(ctx, plane, x, act16, y, ntok, n, 48, 1));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_plane_linear(ctx, plane, x, act16, y, 0, n, k, 1));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_plane_linear(ctx, plane, x, act16, y, ntok, 0, k, 1));
    CHECK_FAILS(ctx, BR_E_OVERFLOW,
                br_plane_linear(ctx, plane, x, act16, y, (size_t)1 << 26, n, 1024, 1));
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_plane_linear(ctx, plane, x, act16, y, SIZE_MAX, n, k, 1));
    CHECK_FAILS(ctx, BR_E_ARG, br_plane_linear(ctx, plane, foreign, act16, y, ntok, n, k, 1));
    CHECK_FAILS(ctx, BR_E_NONFINITE, br_plane_linear(ctx, plane, x, act16, y, ntok, n, k, NAN));
    CHECK_FAILS(ctx, BR_E_ARG, br_plane_linear(ctx, plane, x, act16, y, ntok, n, k, 0));
    CHECK_FAILS(ctx, BR_E_NONFINITE, br_plane_linear(ctx, plane, x, act16, y, ntok, n, k, 1e-40f));
    CHECK_FAILS(ctx, BR_E_ARG, br_plane_linear(ctx, plane_part, x, act_part, y, ntok, n, k, 1));
    float *got = t_download_f32(ctx, y, ntok * n);
    size_t written = t_count_written32(got, ntok * n);
    CHECK(written == 0, "failed calls wrote %zu outputs", written);
    free(got);
    br_buf *all[] = {plane,   x,   act16,   y,      small_act,  small_plane, small_x,
                     small_y, x16, foreign, shared, plane_part, act_part};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        br_buf_free(all[i]);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

static void weight_grad_bad_args(void) {
    br_ctx *ctx = t_ctx(), *other = t_ctx();
    size_t ntok = 40, m = 10, k = 20, kpad = br_pad_tokens(ntok);
    size_t xt_n = br_pad_rows(k) * kpad, dyt_n = br_pad_rows(m) * kpad;
    br_buf *x = poison32(ctx, ntok * k), *dy = poison32(ctx, ntok * m);
    br_buf *xt = poison16(ctx, xt_n), *dyt = poison16(ctx, dyt_n), *dw = poison32(ctx, m * k);
    br_buf *small_xt = poison16(ctx, k * kpad), *small_dyt = poison16(ctx, dyt_n - 1);
    br_buf *small_dy = poison32(ctx, ntok * m - 1), *small_dw = poison32(ctx, m * k - 1);
    br_buf *dw16 = poison16(ctx, m * k), *foreign = t_buf_poison(other, BR_F16, xt_n, 0);
    br_buf *both = poison16(ctx, xt_n + dyt_n), *xt_part = NULL, *dyt_part = NULL;
    CHECK_OK(ctx, br_buf_view(both, 0, xt_n, &xt_part));
    CHECK_OK(ctx, br_buf_view(both, xt_n - 1, dyt_n, &dyt_part)); /* one element shared */

    CHECK(br_weight_grad(NULL, x, dy, xt, dyt, dw, ntok, m, k, 1) == BR_E_ARG, "NULL ctx");
    CHECK_FAILS(ctx, BR_E_ARG, br_weight_grad(ctx, NULL, dy, xt, dyt, dw, ntok, m, k, 1));
    CHECK_FAILS(ctx, BR_E_ARG, br_weight_grad(ctx, x, dy, xt, NULL, dw, ntok, m, k, 1));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_weight_grad(ctx, x, dy, xt, dyt, dw16, ntok, m, k, 1));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_weight_grad(ctx, x, dy, dw, dyt, dw, ntok, m, k, 1));
    CHECK_FAILS(ctx, BR_E_SIZE, br_weight_grad(ctx, x, dy, small_xt, dyt, dw, ntok, m, k, 1));
    CHECK_FAILS(ctx, BR_E_SIZE, br_weight_grad(ctx, x, dy, xt, small_dyt, dw, ntok, m, k, 1));
    CHECK_FAILS(ctx, BR_E_SIZE, br_weight_grad(ctx, x, small_dy, xt, dyt, dw, ntok, m, k, 1));
    CHECK_FAILS(ctx, BR_E_SIZE, br_weight_grad(ctx, x, dy, xt, dyt, small_dw, ntok, m, k, 1));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_weight_grad(ctx, x, dy, xt, dyt, dw, 0, m, k, 1));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_weight_grad(ctx, x, dy, xt, dyt, dw, ntok, 0, k, 1));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_weight_grad(ctx, x, dy, xt, dyt, dw, ntok, m, 0, 1));
    CHECK_FAILS(ctx, BR_E_OVERFLOW,
                br_weight_grad(ctx, x, dy, xt, dyt, dw, (size_t)1 << 24, m, 1024, 1));
    CHECK_FAILS(ctx, BR_E_OVERFLOW,
                br_weight_grad(ctx, x, dy, xt, dyt, dw, ntok, (size_t)1 << 40, k, 1));
    CHECK_FAILS(ctx, BR_E_ARG, br_weight_grad(ctx, x, dy, foreign, dyt, dw, ntok, m, k, 1));
    CHECK_FAILS(ctx, BR_E_NONFINITE, br_weight_grad(ctx, x, dy, xt, dyt, dw, ntok, m, k, INFINITY));
    CHECK_FAILS(ctx, BR_E_ARG, br_weight_grad(ctx, x, dy, xt, dyt, dw, ntok, m, k, 0));
    CHECK_FAILS(ctx, BR_E_ARG, br_weight_grad(ctx, x, dy, xt, xt, dw, ntok, m, k, 1));
    CHECK_FAILS(ctx, BR_E_ARG, br_weight_grad(ctx, x, dy, xt_part, dyt_part, dw, ntok, m, k, 1));
    float *got = t_download_f32(ctx, dw, m * k);
    size_t written = t_count_written32(got, m * k);
    CHECK(written == 0, "failed calls wrote %zu outputs", written);
    free(got);
    br_buf *all[] = {x,        dy,       xt,   dyt,     dw,   small_xt, small_dyt,
                     small_dy, small_dw, dw16, foreign, both, xt_part,  dyt_part};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        br_buf_free(all[i]);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

static void gram_acc_bad_args(void) {
    br_ctx *ctx = t_ctx(), *other = t_ctx();
    size_t ntok = 33, k = 24, kpad = br_pad_tokens(ntok), xt_n = br_pad_rows(k) * kpad;
    br_buf *x = poison32(ctx, ntok * k), *xt = poison16(ctx, xt_n);
    br_buf *acc = poison32(ctx, k * k), *tmp = poison32(ctx, k * k);
    br_buf *small_x = poison32(ctx, ntok * k - 1), *small_xt = poison16(ctx, xt_n - 1);
    br_buf *small_acc = poison32(ctx, k * k - 1), *small_tmp = poison32(ctx, k * k - 1);
    br_buf *xt32 = poison32(ctx, xt_n), *foreign = t_buf_poison(other, BR_F32, k * k, 0);

    CHECK(br_gram_acc(NULL, x, xt, acc, tmp, ntok, k) == BR_E_ARG, "NULL ctx");
    CHECK_FAILS(ctx, BR_E_ARG, br_gram_acc(ctx, x, xt, NULL, tmp, ntok, k));
    CHECK_FAILS(ctx, BR_E_ARG, br_gram_acc(ctx, x, NULL, acc, tmp, ntok, k));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_gram_acc(ctx, x, xt32, acc, tmp, ntok, k));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_gram_acc(ctx, xt, xt, acc, tmp, ntok, k));
    CHECK_FAILS(ctx, BR_E_SIZE, br_gram_acc(ctx, small_x, xt, acc, tmp, ntok, k));
    CHECK_FAILS(ctx, BR_E_SIZE, br_gram_acc(ctx, x, small_xt, acc, tmp, ntok, k));
    CHECK_FAILS(ctx, BR_E_SIZE, br_gram_acc(ctx, x, xt, small_acc, tmp, ntok, k));
    CHECK_FAILS(ctx, BR_E_SIZE, br_gram_acc(ctx, x, xt, acc, small_tmp, ntok, k));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_gram_acc(ctx, x, xt, acc, tmp, 0, k));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_gram_acc(ctx, x, xt, acc, tmp, ntok, 0));
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_gram_acc(ctx, x, xt, acc, tmp, ntok, (size_t)1 << 16));
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_gram_acc(ctx, x, xt, acc, tmp, SIZE_MAX - 3, k));
    CHECK_FAILS(ctx, BR_E_ARG, br_gram_acc(ctx, x, xt, acc, foreign, ntok, k));
    CHECK_FAILS(ctx, BR_E_ARG, br_gram_acc(ctx, x, xt, acc, acc, ntok, k));
    float *got = t_download_f32(ctx, acc, k * k);
    size_t written = t_count_written32(got, k * k);
    CHECK(written == 0, "failed calls wrote %zu outputs", written);
    free(got);
    br_buf *all[] = {x, xt, acc, tmp, small_x, small_xt, small_acc, small_tmp, xt32, foreign};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        br_buf_free(all[i]);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

T_RUN("composite", T_CASE(plane_linear), T_CASE(plane_linear_in_place), T_CASE(weight_grad),
      T_CASE(gram_acc), T_CASE(composite_graph), T_CASE(plane_linear_bad_args),
      T_CASE(weight_grad_bad_args), T_CASE(gram_acc_bad_args))
