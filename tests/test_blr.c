/* The BLR layer: forward and backward against an f64
 * reference on random layers of every shape class, paths 1..3, the two-path sum,
 * the fused-loss forward, dh/dg through the token-axis products, staged inputs,
 * graphs, host transfers and bad arguments.
 *
 * BITRANK_TEST_SMALL=1: fewer and smaller shapes, every path through the layer
 * still taken (for compute-sanitizer racecheck on the GPU). */
#include "blr_ref.h"

#define TOL 3e-3

static int small_mode(void) {
    const char *e = getenv("BITRANK_TEST_SMALL");
    return e && *e && strcmp(e, "0") != 0;
}

/* Runs forward + backward of a random layer on the device under test and checks
 * y, dx, dh, dℓ, dg (and G_U, G_V with sign gradients) against f64. */
static void check_layer(size_t m, size_t n, size_t r, size_t P, size_t ntok, int with_dx,
                        unsigned flags, uint64_t stream, int strict) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(stream);
    ref_layer L = ref_random(&rng, m, n, r, P, 0);
    float *x = t_rand(&rng, ntok * n, 2.0f), *dy = t_rand(&rng, ntok * m, 1e-3f);
    br_blr *l = ref_upload(ctx, &L, flags);
    br_blr_scratch *s = NULL;
    CHECK_OK(ctx, br_blr_scratch_new(l, ntok, NULL, &s));
    br_buf *bx = t_buf_from(ctx, BR_F32, x, ntok * n), *bdy = t_buf_from(ctx, BR_F32, dy, ntok * m);
    br_buf *by = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32);
    br_buf *bdx = with_dx ? t_buf_poison(ctx, BR_F32, ntok * n, T_NAN32) : NULL;
    /* gradients poisoned: accumulate = 0 must overwrite them */
    for (size_t p = 0; p < P; p++)
        for (int part = BR_BLR_DH; part <= BR_BLR_GV; part++) {
            br_buf *b = br_blr_buf(l, p, (br_blr_part)part);
            if (b && part != BR_BLR_BITS_U && part != BR_BLR_BITS_V)
                CHECK_OK(ctx, br_buf_fill(b, 0, br_buf_count(b), T_NAN32));
        }
    CHECK_OK(ctx, fwd_plain(l, s, bx, by, ntok));
    CHECK_OK(ctx, br_blr_backward(l, s, bx, bdy, bdx, ntok, 1024.0f, 0));
    ref_out o;
    ref_run(&L, x, dy, ntok, &o);
    float *y = t_download_f32(ctx, by, ntok * m);
    double e = t_rel_err(y, o.y, ntok * m);
    CHECK(e < TOL, "%zux%zu r%zu P%zu ntok%zu: y rel err %.3g", m, n, r, P, ntok, e);
    if (with_dx) {
        float *dx = t_download_f32(ctx, bdx, ntok * n);
        e = t_rel_err(dx, o.dx, ntok * n);
        CHECK(e < TOL, "%zux%zu r%zu P%zu ntok%zu: dx rel err %.3g", m, n, r, P, ntok, e);
        free(dx);
    }
    for (size_t p = 0; p < P; p++) {
        struct {
            br_blr_part part;
            const char *name;
            const double *ref, *abs;
            size_t len;
        } g[] = {
            {BR_BLR_DH, "dh", o.dh + p * m, o.dh_abs + p * m, m},
            {BR_BLR_DL, "dl", o.dl + p * r, o.dl_abs + p * r, r},
            {BR_BLR_DG, "dg", o.dg + p * n, o.dg_abs + p * n, n},
            {BR_BLR_GU, "G_U", o.gu + p * m * r, NULL, m * r},
            {BR_BLR_GV, "G_V", o.gv + p * n * r, NULL, n * r},
        };
        size_t ng = (flags & BR_BLR_SIGN_GRADS) ? 5 : 3;
        for (size_t i = 0; i < ng; i++) {
            float *v = ref_part(ctx, l, p, g[i].part, g[i].len);
            /* strict: ‖got − ref‖/‖ref‖; vectors of a few entries
             * may cancel, so elsewhere the error is relative to the terms' size */
            e = t_rel_err(v, g[i].ref, g[i].len);
            if (!strict && g[i].abs) e = ref_err_scaled(v, g[i].ref, g[i].abs, g[i].len);
            CHECK(e < TOL, "%zux%zu r%zu P%zu ntok%zu path %zu: %s rel err %.3g", m, n, r, P, ntok,
                  p, g[i].name, e);
            free(v);
        }
    }
    /* a second backward with accumulate = 1 doubles every gradient */
    CHECK_OK(ctx, br_blr_backward(l, s, bx, bdy, bdx, ntok, 1024.0f, 1));
    for (size_t p = 0; p < P; p++) {
        float *dh = ref_part(ctx, l, p, BR_BLR_DH, m);
        double *twice = t_xmalloc(2 * m * sizeof *twice);
        for (size_t i = 0; i < m; i++)
            twice[i] = 2 * o.dh[p * m + i], twice[m + i] = 2 * o.dh_abs[p * m + i];
        e = strict ? t_rel_err(dh, twice, m) : ref_err_scaled(dh, twice, twice + m, m);
        CHECK(e < TOL, "accumulate: dh rel err %.3g", e);
        if (flags & BR_BLR_SIGN_GRADS) {
            float *gv = ref_part(ctx, l, p, BR_BLR_GV, n * r);
            double *g2 = t_xmalloc(n * r * sizeof *g2);
            for (size_t i = 0; i < n * r; i++)
                g2[i] = 2 * o.gv[p * n * r + i];
            e = t_rel_err(gv, g2, n * r);
            CHECK(e < TOL, "accumulate: G_V rel err %.3g", e);
            free(gv), free(g2);
        }
        free(dh), free(twice);
    }
    if (with_dx) { /* dx is overwritten, not accumulated */
        float *dx = t_download_f32(ctx, bdx, ntok * n);
        e = t_rel_err(dx, o.dx, ntok * n);
        CHECK(e < TOL, "second backward: dx rel err %.3g", e);
        free(dx);
    }
    ref_out_free(&o);
    free(x), free(dy), free(y);
    br_buf_free(bx), br_buf_free(bdy), br_buf_free(by), br_buf_free(bdx);
    br_blr_scratch_free(s);
    br_blr_free(l);
    ref_free(&L);
    br_ctx_free(ctx);
}

/* m=256 n=384 r=128 ntok=70, two paths. */
static void spec_two_path_layer(void) {
    if (small_mode()) /* the same classes, fewer tokens and a smaller layer */
        check_layer(96, 128, 64, 2, 20, 1, 0, 1, 1);
    else
        check_layer(256, 384, 128, 2, 70, 1, 0, 1, 1);
}

/* Shapes that are multiples of nothing; 1 row; 1..3 paths; no dx. */
static void awkward_shapes(void) {
    check_layer(37, 50, 32, 1, 1, 1, BR_BLR_SIGN_GRADS, 2, 0);
    check_layer(100, 33, 64, 3, 45, 1, BR_BLR_SIGN_GRADS, 3, 0);
    if (small_mode()) return;
    check_layer(1, 65, 32, 2, 130, 0, BR_BLR_SIGN_GRADS, 4, 0);
    check_layer(250, 7, 96, 2, 3, 1, 0, 5, 0);
    check_layer(64, 96, 32, 3, 129, 0, 0, 6, 0);
}

/* A two-path layer equals the sum of its paths as one-path layers: the per-path
 * gradients within f32 rounding of the one-path layers' (every GEMM keeps the
 * paths' columns apart; a BLAS may still sum a column in another order where it
 * sits at another offset of a wider product, as OpenBLAS's AVX2 kernels do), y and
 * dx within f32 rounding of fl(part0 + part1) (one GEMM sums both paths' K range,
 * so the order of the f32 sums differs): ‖got − sum‖ ≤ 1e-4·‖|part0| + |part1|‖.
 * The bound is relative to the outputs, not to the sums of |terms| that set the
 * rounding, so cancellation inside a GEMM's sum moves the ratio with the seed:
 * over 300 seeds it reached 3.7e-5. */
static void two_paths_are_two_halves(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(7);
    size_t m = 96, n = 75, r = 64, ntok = 33;
    ref_layer L = ref_random(&rng, m, n, r, 2, 0);
    ref_layer half[2] = {{m, n, r, 1, &L.p[0]}, {m, n, r, 1, &L.p[1]}};
    float *x = t_rand(&rng, ntok * n, 2.0f), *dy = t_rand(&rng, ntok * m, 1e-3f);
    br_buf *bx = t_buf_from(ctx, BR_F32, x, ntok * n), *bdy = t_buf_from(ctx, BR_F32, dy, ntok * m);
    float *y[3], *dx[3], *grads[3][2][5];
    size_t len[5] = {m, r, n, m * r, n * r};
    br_blr_part parts[5] = {BR_BLR_DH, BR_BLR_DL, BR_BLR_DG, BR_BLR_GU, BR_BLR_GV};
    for (int v = 0; v < 3; v++) {
        const ref_layer *lay = v == 2 ? &L : &half[v];
        br_blr *l = ref_upload(ctx, lay, BR_BLR_SIGN_GRADS);
        br_blr_scratch *s = NULL;
        CHECK_OK(ctx, br_blr_scratch_new(l, ntok, NULL, &s));
        br_buf *by = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32);
        br_buf *bdx = t_buf_poison(ctx, BR_F32, ntok * n, T_NAN32);
        CHECK_OK(ctx, fwd_plain(l, s, bx, by, ntok));
        CHECK_OK(ctx, br_blr_backward(l, s, bx, bdy, bdx, ntok, 1024.0f, 0));
        y[v] = t_download_f32(ctx, by, ntok * m);
        dx[v] = t_download_f32(ctx, bdx, ntok * n);
        for (size_t p = 0; p < lay->paths; p++)
            for (int i = 0; i < 5; i++)
                grads[v][p][i] = ref_part(ctx, l, p, parts[i], len[i]);
        br_buf_free(by), br_buf_free(bdx);
        br_blr_scratch_free(s);
        br_blr_free(l);
    }
    for (int w = 0; w < 2; w++) {
        float *const *v = w ? dx : y;
        size_t len_w = ntok * (w ? n : m);
        double d2 = 0, s2 = 0;
        for (size_t i = 0; i < len_w; i++) {
            double want = (double)v[0][i] + (double)v[1][i], mag = fabs(v[0][i]) + fabs(v[1][i]);
            d2 += (v[2][i] - want) * (v[2][i] - want);
            s2 += mag * mag;
        }
        CHECK(s2 > 0 && sqrt(d2) <= 1e-4 * sqrt(s2),
              "%s: ‖P=2 − (half 0 + half 1)‖ = %.3g of ‖|half 0| + |half 1|‖ = %.3g",
              w ? "dx" : "y", sqrt(d2), sqrt(s2));
    }
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < 5; i++) {
            double d2 = 0, s2 = 0;
            for (size_t k = 0; k < len[i]; k++) {
                double a = grads[p][0][i][k], b = grads[2][p][i][k];
                d2 += (a - b) * (a - b);
                s2 += a * a;
            }
            CHECK(s2 > 0 && sqrt(d2) <= 1e-4 * sqrt(s2),
                  "path %d gradient %d: ‖two-path − one-path‖ = %.3g of %.3g", p, i, sqrt(d2),
                  sqrt(s2));
        }
    for (int v = 0; v < 3; v++) {
        free(y[v]), free(dx[v]);
        for (size_t p = 0; p < (v == 2 ? 2u : 1u); p++)
            for (int i = 0; i < 5; i++)
                free(grads[v][p][i]);
    }
    free(x), free(dy);
    br_buf_free(bx), br_buf_free(bdy);
    ref_free(&L);
    br_ctx_free(ctx);
}

/* Downloads every gradient of a layer: [path][dh, dℓ, dg, G_U, G_V]. */
static void grads_of(br_ctx *ctx, br_blr *l, const ref_layer *L, float *out[][5]) {
    size_t len[5] = {L->m, L->r, L->n, L->m * L->r, L->n * L->r};
    br_blr_part parts[5] = {BR_BLR_DH, BR_BLR_DL, BR_BLR_DG, BR_BLR_GU, BR_BLR_GV};
    for (size_t p = 0; p < L->paths; p++)
        for (int i = 0; i < 5; i++)
            out[p][i] = ref_part(ctx, l, p, parts[i], len[i]);
}

/* br_blr_stage + the staged forward give the bits of the plain forward (aligned and
 * unaligned n); two layers read one staged x through one br_blr_shared, both
 * forwards before either backward (as q, k, v do), and each backward, which reads
 * the staged f16(x)ᵀ, gives the bits of a plain forward + backward. */
static void staged_and_shared(void) {
    br_ctx *ctx = t_ctx();
    size_t ns[2] = {64, 45};
    for (int v = 0; v < 2; v++) {
        br_rng rng = t_rng_for(8 + (uint64_t)v);
        size_t n = ns[v], ntok = 21, r = 32, cols = (n + 31) / 32 * 32;
        size_t ms[2] = {40, 96}, P[2] = {2, 3};
        ref_layer L[2];
        br_blr *l[2];
        br_blr_scratch *s1[2], *s2[2];
        br_blr_shared *sh = NULL;
        CHECK_OK(ctx, br_blr_shared_new(ctx, ntok, 96, n, r, 3, &sh));
        float *x = t_rand(&rng, ntok * n, 2.0f);
        br_buf *bx = t_buf_from(ctx, BR_F32, x, ntok * n);
        br_buf *x16 = t_buf_poison(ctx, BR_F16, br_pad_rows(ntok) * cols, T_NAN16);
        br_buf *y1[2], *dy[2], *dx1[2];
        for (int i = 0; i < 2; i++) {
            L[i] = ref_random(&rng, ms[i], n, r, P[i], 0);
            l[i] = ref_upload(ctx, &L[i], BR_BLR_SIGN_GRADS);
            CHECK_OK(ctx, br_blr_scratch_new(l[i], ntok, sh, &s1[i]));
            CHECK_OK(ctx, br_blr_scratch_new(l[i], ntok, NULL, &s2[i]));
            y1[i] = t_buf_poison(ctx, BR_F32, ntok * ms[i], T_NAN32);
            float *d = t_rand(&rng, ntok * ms[i], 1e-3f);
            dy[i] = t_buf_from(ctx, BR_F32, d, ntok * ms[i]);
            free(d);
            dx1[i] = t_buf_poison(ctx, BR_F32, ntok * n, T_NAN32);
        }
        CHECK(br_blr_stage_cols(l[1]) == cols, "stage cols %zu", br_blr_stage_cols(l[1]));
        CHECK_OK(ctx, br_blr_stage(l[0], bx, x16, ntok));
        for (int i = 0; i < 2; i++)
            CHECK_OK(ctx, fwd_staged(l[i], s1[i], x16, y1[i], ntok));
        float *g1[2][3][5];
        for (int i = 0; i < 2; i++) {
            CHECK_OK(ctx, br_blr_backward(l[i], s1[i], bx, dy[i], dx1[i], ntok, 1024.0f, 0));
            grads_of(ctx, l[i], &L[i], g1[i]);
        }
        for (int i = 0; i < 2; i++) {
            size_t m = ms[i];
            br_buf *y2 = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32);
            br_buf *dx2 = t_buf_poison(ctx, BR_F32, ntok * n, T_NAN32);
            CHECK_OK(ctx, fwd_plain(l[i], s2[i], bx, y2, ntok));
            CHECK_OK(ctx, br_blr_backward(l[i], s2[i], bx, dy[i], dx2, ntok, 1024.0f, 0));
            float *a = t_download_f32(ctx, y1[i], ntok * m), *b = t_download_f32(ctx, y2, ntok * m);
            size_t bad = t_bits_differ32(a, b, ntok * m);
            CHECK(bad == 0, "n=%zu layer %d: staged forward differs in %zu of %zu", n, i, bad,
                  ntok * m);
            ref_out o;
            ref_run(&L[i], x, NULL, ntok, &o);
            double e = t_rel_err(a, o.y, ntok * m);
            CHECK(e < TOL, "n=%zu layer %d: staged y rel err %.3g", n, i, e);
            float *da = t_download_f32(ctx, dx1[i], ntok * n),
                  *db = t_download_f32(ctx, dx2, ntok * n);
            bad = t_bits_differ32(da, db, ntok * n);
            CHECK(bad == 0, "n=%zu layer %d: dx after a staged forward differs in %zu", n, i, bad);
            float *g2[3][5];
            grads_of(ctx, l[i], &L[i], g2);
            size_t len[5] = {m, r, n, m * r, n * r};
            for (size_t p = 0; p < P[i]; p++)
                for (int k = 0; k < 5; k++) {
                    bad = t_bits_differ32(g1[i][p][k], g2[p][k], len[k]);
                    CHECK(bad == 0, "n=%zu layer %d path %zu gradient %d: %zu of %zu differ", n, i,
                          p, k, bad, len[k]);
                    free(g1[i][p][k]), free(g2[p][k]);
                }
            ref_out_free(&o);
            free(a), free(b), free(da), free(db);
            br_buf_free(y2), br_buf_free(dx2);
        }
        for (int i = 0; i < 2; i++) {
            br_blr_scratch_free(s1[i]), br_blr_scratch_free(s2[i]);
            br_blr_free(l[i]), ref_free(&L[i]);
            br_buf_free(y1[i]), br_buf_free(dy[i]), br_buf_free(dx1[i]);
        }
        br_buf_free(x16), br_buf_free(bx);
        br_blr_shared_free(sh);
        free(x);
    }
    br_ctx_free(ctx);
}

/* The fused-loss forward: out = alpha·(y − target) against f64, into a separate
 * buffer and in place over the target; with target 0 and alpha 1 it is the plain
 * forward bit for bit (the epilogue adds −0). */
static void residual_forward(void) {
    br_ctx *ctx = t_ctx();
    static const size_t shapes[][5] = {
        {37, 50, 32, 1, 1}, {100, 33, 64, 3, 45}, {96, 75, 64, 2, 33}};
    size_t nshapes = small_mode() ? 2 : 3;
    for (size_t c = 0; c < nshapes; c++) {
        size_t m = shapes[c][0], n = shapes[c][1], r = shapes[c][2], P = shapes[c][3],
               ntok = shapes[c][4];
        br_rng rng = t_rng_for(20 + c);
        ref_layer L = ref_random(&rng, m, n, r, P, 0);
        br_blr *l = ref_upload(ctx, &L, 0);
        br_blr_scratch *s = NULL;
        CHECK_OK(ctx, br_blr_scratch_new(l, ntok, NULL, &s));
        float *x = t_rand(&rng, ntok * n, 2.0f);
        ref_out o;
        ref_run(&L, x, NULL, ntok, &o);
        /* a target of the size of y, so out does not cancel to nothing */
        float *tg = t_xmalloc(ntok * m * sizeof *tg), alpha = 0.37f;
        double ysz = 0;
        for (size_t i = 0; i < ntok * m; i++)
            ysz += o.y[i] * o.y[i];
        ysz = sqrt(ysz / (double)(ntok * m));
        for (size_t i = 0; i < ntok * m; i++)
            tg[i] = (float)(ysz * br_rng_sym(&rng));
        double *want = t_xmalloc(ntok * m * sizeof *want);
        for (size_t i = 0; i < ntok * m; i++)
            want[i] = alpha * (o.y[i] - (double)tg[i]);
        br_buf *bx = t_buf_from(ctx, BR_F32, x, ntok * n),
               *btg = t_buf_from(ctx, BR_F32, tg, ntok * m);
        br_buf *out = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32);
        CHECK_OK(ctx, fwd_residual(l, s, bx, btg, alpha, out, ntok));
        float *got = t_download_f32(ctx, out, ntok * m);
        double e = t_rel_err(got, want, ntok * m);
        CHECK(e < TOL, "%zux%zu r%zu P%zu ntok%zu: residual rel err %.3g", m, n, r, P, ntok, e);
        float *tg_after = t_download_f32(ctx, btg, ntok * m);
        CHECK(!memcmp(tg_after, tg, ntok * m * 4), "the target was changed");
        /* in place: out is the target */
        CHECK_OK(ctx, fwd_residual(l, s, bx, btg, alpha, btg, ntok));
        float *inplace = t_download_f32(ctx, btg, ntok * m);
        size_t bad = t_bits_differ32(inplace, got, ntok * m);
        CHECK(bad == 0, "%zux%zu P%zu: in place differs in %zu of %zu", m, n, P, bad, ntok * m);
        /* target 0, alpha 1: the plain forward's bits */
        CHECK_OK(ctx, br_buf_fill(btg, 0, ntok * m, 0));
        CHECK_OK(ctx, fwd_residual(l, s, bx, btg, 1.0f, out, ntok));
        br_buf *y = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32);
        CHECK_OK(ctx, fwd_plain(l, s, bx, y, ntok));
        float *a = t_download_f32(ctx, out, ntok * m), *b = t_download_f32(ctx, y, ntok * m);
        bad = t_bits_differ32(a, b, ntok * m);
        CHECK(bad == 0, "%zux%zu P%zu: y − 0 differs from y in %zu of %zu", m, n, P, bad, ntok * m);
        free(a), free(b), free(got), free(inplace), free(tg_after), free(want), free(tg), free(x);
        ref_out_free(&o);
        br_buf_free(bx), br_buf_free(btg), br_buf_free(out), br_buf_free(y);
        br_blr_scratch_free(s);
        br_blr_free(l);
        ref_free(&L);
    }
    br_ctx_free(ctx);
}

/* The loss forward + br_blr_backward(dy = NULL) against the residual forward +
 * br_blr_backward(out), the same layer and inputs: every gradient, dx and out (when
 * asked for) bit for bit, with out NULL and given, at a shape whose every size is a
 * multiple of nothing and at the bench's first shape scaled down; then what may not
 * follow a loss forward: a backward of another gscale, a backward after the staged
 * gradient was overwritten through the shared transients by another layer's op,
 * and a backward with dy = NULL after a forward that staged nothing. */
static void loss_forward_stages_dy(void) {
    br_ctx *ctx = t_ctx();
    static const size_t shapes[][5] = {
        {100, 70, 64, 2, 45}, {448, 128, 96, 2, 260}, {37, 50, 32, 1, 1}};
    const float gs = 4096.0f;
    for (size_t c = 0; c < (small_mode() ? 1u : 3u); c++) {
        size_t m = shapes[c][0], n = shapes[c][1], r = shapes[c][2], P = shapes[c][3],
               ntok = shapes[c][4];
        br_rng rng = t_rng_for(40 + c);
        ref_layer L = ref_random(&rng, m, n, r, P, 0);
        br_blr *l = ref_upload(ctx, &L, BR_BLR_SIGN_GRADS);
        br_blr_scratch *s = NULL;
        CHECK_OK(ctx, br_blr_scratch_new(l, ntok, NULL, &s));
        float *x = t_rand(&rng, ntok * n, 2.0f), *tg = t_rand(&rng, ntok * m, 0.05f);
        /* targets f16 can hold: an f16 target of the same values must give the same bits */
        uint16_t *tg16 = t_xmalloc(ntok * m * sizeof *tg16);
        for (size_t i = 0; i < ntok * m; i++) {
            tg16[i] = br_half_from_float(tg[i]);
            tg[i] = br_half_to_float(tg16[i]);
        }
        float alpha = -0.75f / (float)ntok;
        br_buf *bx = t_buf_from(ctx, BR_F32, x, ntok * n),
               *btg = t_buf_from(ctx, BR_F32, tg, ntok * m),
               *btg16 = t_buf_from(ctx, BR_F16, tg16, ntok * m);
        br_buf *out = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32);
        br_buf *dx = t_buf_poison(ctx, BR_F32, ntok * n, T_NAN32);
        CHECK_OK(ctx, fwd_residual(l, s, bx, btg, alpha, out, ntok));
        CHECK_OK(ctx, br_blr_backward(l, s, bx, out, dx, ntok, gs, 0));
        float *want_out = t_download_f32(ctx, out, ntok * m),
              *want_dx = t_download_f32(ctx, dx, ntok * n);
        float *want[BR_BLR_MAX_PATHS][5];
        grads_of(ctx, l, &L, want);
        /* x staged by the caller (the loss forward on x16): the same bits */
        size_t n16 = br_pad_rows(ntok) * br_blr_stage_cols(l);
        br_buf *x16 = t_buf_poison(ctx, BR_F16, n16, T_NAN16);
        for (int v = 0; v < 8; v++) {
            int keep = v & 1, staged = (v >> 1) & 1, t16 = v >= 4;
            const br_buf *target = t16 ? btg16 : btg;
            br_buf *o2 = keep ? t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32) : NULL;
            CHECK_OK(ctx, br_buf_fill(dx, 0, ntok * n, T_NAN32));
            if (staged) {
                CHECK_OK(ctx, br_blr_stage(l, bx, x16, ntok));
                CHECK_OK(ctx, fwd_loss_staged(l, s, x16, target, alpha, gs, o2, ntok));
            } else {
                CHECK_OK(ctx, fwd_loss(l, s, bx, target, alpha, gs, o2, ntok));
            }
            CHECK_OK(ctx, br_blr_backward(l, s, bx, NULL, dx, ntok, gs, 0));
            float *got_dx = t_download_f32(ctx, dx, ntok * n);
            size_t bad = t_bits_differ32(got_dx, want_dx, ntok * n);
            CHECK(bad == 0, "%zux%zu P%zu keep=%d staged=%d t16=%d: dx differs in %zu of %zu", m, n,
                  P, keep, staged, t16, bad, ntok * n);
            if (o2) {
                float *got = t_download_f32(ctx, o2, ntok * m);
                bad = t_bits_differ32(got, want_out, ntok * m);
                CHECK(bad == 0, "%zux%zu P%zu t16=%d: out differs in %zu of %zu", m, n, P, t16, bad,
                      ntok * m);
                free(got);
            }
            float *got[BR_BLR_MAX_PATHS][5];
            grads_of(ctx, l, &L, got);
            static const char *const names[5] = {"dh", "dl", "dg", "G_U", "G_V"};
            size_t len[5] = {m, r, n, m * r, n * r};
            for (size_t p = 0; p < P; p++)
                for (int i = 0; i < 5; i++) {
                    bad = t_bits_differ32(got[p][i], want[p][i], len[i]);
                    CHECK(bad == 0,
                          "%zux%zu P%zu keep=%d staged=%d t16=%d: path %zu %s differs in %zu of "
                          "%zu",
                          m, n, P, keep, staged, t16, p, names[i], bad, len[i]);
                    free(got[p][i]);
                }
            free(got_dx);
            br_buf_free(o2);
        }
        /* a backward of another gscale; of no staged gradient */
        CHECK_OK(ctx, fwd_loss(l, s, bx, btg, alpha, gs, NULL, ntok));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "gscale",
                        br_blr_backward(l, s, bx, NULL, dx, ntok, 2 * gs, 0));
        CHECK_OK(ctx, fwd_residual(l, s, bx, btg, alpha, out, ntok));
        CHECK_FAILS(ctx, BR_E_STATE, br_blr_backward(l, s, bx, NULL, dx, ntok, gs, 0));
        CHECK_FAILS(ctx, BR_E_ARG, fwd_loss(l, s, bx, NULL, alpha, gs, NULL, ntok));
        /* an f16 target only for the loss forms */
        CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "target",
                        fwd_residual(l, s, bx, btg16, alpha, out, ntok));
        CHECK_FAILS(ctx, BR_E_ARG, fwd_loss(l, s, bx, btg, alpha, 1000.0f, NULL, ntok));
        CHECK_FAILS(ctx, BR_E_ARG, fwd_loss_staged(l, s, x16, NULL, alpha, gs, NULL, ntok));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "gscale",
                        fwd_loss_staged(l, s, x16, btg, alpha, 3.0f, NULL, ntok));
        CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "alpha",
                        fwd_loss_staged(l, s, x16, btg, NAN, gs, NULL, ntok));
        br_buf *tiny = t_buf_poison(ctx, BR_F16, 1, T_NAN16);
        CHECK_FAILS_MSG(ctx, BR_E_SIZE, "x16",
                        fwd_loss_staged(l, s, tiny, btg, alpha, gs, NULL, ntok));
        CHECK_FAILS(ctx, BR_E_DTYPE,
                    fwd_loss_staged(l, s, x16, btg, alpha, gs, x16, ntok));
        CHECK_FAILS(ctx, BR_E_DTYPE,
                    fwd_loss_staged(l, s, bx, btg, alpha, gs, NULL, ntok));
        br_buf_free(x16), br_buf_free(tiny);
        for (size_t p = 0; p < P; p++)
            for (int i = 0; i < 5; i++)
                free(want[p][i]);
        free(want_out), free(want_dx), free(x), free(tg), free(tg16);
        br_buf_free(bx), br_buf_free(btg), br_buf_free(btg16), br_buf_free(out), br_buf_free(dx);
        br_blr_scratch_free(s);
        br_blr_free(l);
        ref_free(&L);
    }
    /* two layers on one shared set: the second one's loss forward overwrites the
     * staged gradient; its plain forward does not (it writes none of the shared
     * stage) */
    {
        br_rng rng = t_rng_for(49);
        size_t m = 64, n = 40, r = 32, ntok = 20;
        ref_layer L = ref_random(&rng, m, n, r, 1, 0);
        br_blr *l1 = ref_upload(ctx, &L, 0), *l2 = ref_upload(ctx, &L, 0);
        br_blr_shared *sh = NULL;
        br_blr_scratch *s1 = NULL, *s2 = NULL;
        CHECK_OK(ctx, br_blr_shared_new(ctx, ntok, m, n, r, 1, &sh));
        CHECK_OK(ctx, br_blr_scratch_new(l1, ntok, sh, &s1));
        CHECK_OK(ctx, br_blr_scratch_new(l2, ntok, sh, &s2));
        float *x = t_rand(&rng, ntok * n, 1.0f), *tg = t_rand(&rng, ntok * m, 1.0f);
        br_buf *bx = t_buf_from(ctx, BR_F32, x, ntok * n),
               *btg = t_buf_from(ctx, BR_F32, tg, ntok * m);
        br_buf *y = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32);
        CHECK_OK(ctx, fwd_loss(l1, s1, bx, btg, 1.0f, 1.0f, NULL, ntok));
        CHECK_OK(ctx, fwd_loss(l2, s2, bx, btg, 1.0f, 1.0f, NULL, ntok));
        CHECK_FAILS_MSG(ctx, BR_E_STATE, "overwritten",
                        br_blr_backward(l1, s1, bx, NULL, NULL, ntok, 1.0f, 0));
        CHECK_OK(ctx, fwd_loss(l1, s1, bx, btg, 1.0f, 1.0f, NULL, ntok));
        CHECK_OK(ctx, fwd_plain(l2, s2, bx, y, ntok));
        CHECK_OK(ctx, br_blr_backward(l1, s1, bx, NULL, NULL, ntok, 1.0f, 0));
        CHECK_OK(ctx, fwd_loss(l1, s1, bx, btg, 1.0f, 1.0f, NULL, ntok));
        CHECK_OK(ctx, br_blr_backward(l1, s1, bx, NULL, NULL, ntok, 1.0f, 0));
        free(x), free(tg);
        br_buf_free(bx), br_buf_free(btg), br_buf_free(y);
        br_blr_scratch_free(s1), br_blr_scratch_free(s2);
        br_blr_shared_free(sh);
        br_blr_free(l1), br_blr_free(l2);
        ref_free(&L);
    }
    br_ctx_free(ctx);
}

/* dh and dg come from the token-axis products M_U = dyᵀ·A', N_V = xᵀ·B' taken apart
 * into the paths (br_sign_rowdot_paths), with and without sign gradients: against
 * f64 at m, n not multiples of 32 and three paths; the curvature sums Σ_t a², Σ_t x²
 * too. */
static void scale_grads_from_token_products(void) {
    br_ctx *ctx = t_ctx();
    size_t m = 45, n = 70, r = 64, P = 3, ntok = small_mode() ? 37 : 77;
    unsigned flagsets[2] = {0, BR_BLR_CURVATURE};
    for (int f = 0; f < 2; f++) {
        br_rng rng = t_rng_for(30 + (uint64_t)f);
        ref_layer L = ref_random(&rng, m, n, r, P, 0);
        br_blr *l = ref_upload(ctx, &L, flagsets[f]);
        br_blr_scratch *s = NULL;
        CHECK_OK(ctx, br_blr_scratch_new(l, ntok, NULL, &s));
        float *x = t_rand(&rng, ntok * n, 2.0f), *dy = t_rand(&rng, ntok * m, 1e-3f);
        br_buf *bx = t_buf_from(ctx, BR_F32, x, ntok * n),
               *bdy = t_buf_from(ctx, BR_F32, dy, ntok * m);
        br_buf *by = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32);
        for (size_t p = 0; p < P; p++) {
            CHECK_OK(ctx, br_buf_fill(br_blr_buf(l, p, BR_BLR_DH), 0, m, T_NAN32));
            CHECK_OK(ctx, br_buf_fill(br_blr_buf(l, p, BR_BLR_DG), 0, n, T_NAN32));
        }
        CHECK_OK(ctx, fwd_plain(l, s, bx, by, ntok));
        CHECK_OK(ctx, br_blr_backward(l, s, bx, bdy, NULL, ntok, 1024.0f, 0));
        ref_out o;
        ref_run(&L, x, dy, ntok, &o);
        for (size_t p = 0; p < P; p++) {
            float *dh = ref_part(ctx, l, p, BR_BLR_DH, m), *dg = ref_part(ctx, l, p, BR_BLR_DG, n);
            double e = t_rel_err(dh, o.dh + p * m, m);
            CHECK(e < TOL, "flags %u path %zu: dh rel err %.3g", flagsets[f], p, e);
            e = t_rel_err(dg, o.dg + p * n, n);
            CHECK(e < TOL, "flags %u path %zu: dg rel err %.3g", flagsets[f], p, e);
            free(dh), free(dg);
        }
        if (flagsets[f] & BR_BLR_CURVATURE) {
            double *a2 = ref_zeros(P * r), *x2 = ref_zeros(n);
            for (size_t p = 0; p < P; p++)
                for (size_t t = 0; t < ntok; t++)
                    for (size_t k = 0; k < r; k++) {
                        double a = o.a[(p * ntok + t) * r + k];
                        a2[p * r + k] += a * a;
                    }
            for (size_t t = 0; t < ntok; t++)
                for (size_t j = 0; j < n; j++)
                    x2[j] += (double)x[t * n + j] * x[t * n + j];
            for (size_t p = 0; p < P; p++) {
                float *got = ref_part(ctx, l, p, BR_BLR_SUM_A2, r);
                double e = t_rel_err(got, a2 + p * r, r);
                CHECK(e < TOL, "path %zu: Σ a² rel err %.3g", p, e);
                free(got);
            }
            float *got = ref_part(ctx, l, 0, BR_BLR_SUM_X2, n);
            double e = t_rel_err(got, x2, n);
            CHECK(e < 1e-5, "Σ x² rel err %.3g", e);
            free(got), free(a2), free(x2);
        }
        ref_out_free(&o);
        free(x), free(dy);
        br_buf_free(bx), br_buf_free(bdy), br_buf_free(by);
        br_blr_scratch_free(s);
        br_blr_free(l);
        ref_free(&L);
    }
    br_ctx_free(ctx);
}

/* Forward + backward recorded once and replayed give the eager results bit for bit,
 * and follow new inputs uploaded between replays. */
static void graph_replay(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(10);
    size_t m = 70, n = 96, r = 64, ntok = 40, P = 2;
    ref_layer L = ref_random(&rng, m, n, r, P, 0);
    br_blr *l = ref_upload(ctx, &L, BR_BLR_SIGN_GRADS);
    br_blr_scratch *s = NULL;
    CHECK_OK(ctx, br_blr_scratch_new(l, ntok, NULL, &s));
    float *x = t_rand(&rng, ntok * n, 2.0f), *dy = t_rand(&rng, ntok * m, 1e-3f);
    br_buf *bx = t_buf_from(ctx, BR_F32, x, ntok * n), *bdy = t_buf_from(ctx, BR_F32, dy, ntok * m);
    br_buf *by = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32);
    br_buf *bdx = t_buf_poison(ctx, BR_F32, ntok * n, T_NAN32);
    CHECK_OK(ctx, fwd_plain(l, s, bx, by, ntok));
    CHECK_OK(ctx, br_blr_backward(l, s, bx, bdy, bdx, ntok, 1024.0f, 0));
    float *y0 = t_download_f32(ctx, by, ntok * m), *dx0 = t_download_f32(ctx, bdx, ntok * n);
    float *gv0 = ref_part(ctx, l, 1, BR_BLR_GV, n * r);
    br_graph *g = NULL;
    CHECK_OK(ctx, br_graph_begin(ctx));
    CHECK_OK(ctx, fwd_plain(l, s, bx, by, ntok));
    CHECK_OK(ctx, br_blr_backward(l, s, bx, bdy, bdx, ntok, 1024.0f, 0));
    CHECK_OK(ctx, br_graph_end(ctx, &g));
    CHECK(br_graph_op_count(g) > 10, "graph of %zu ops", br_graph_op_count(g));
    CHECK_OK(ctx, br_buf_fill(by, 0, ntok * m, T_NAN32));
    CHECK_OK(ctx, br_buf_fill(bdx, 0, ntok * n, T_NAN32));
    CHECK_OK(ctx, br_graph_launch(g));
    float *y1 = t_download_f32(ctx, by, ntok * m), *dx1 = t_download_f32(ctx, bdx, ntok * n);
    float *gv1 = ref_part(ctx, l, 1, BR_BLR_GV, n * r);
    CHECK(t_bits_differ32(y0, y1, ntok * m) == 0, "replayed y differs");
    CHECK(t_bits_differ32(dx0, dx1, ntok * n) == 0, "replayed dx differs");
    CHECK(t_bits_differ32(gv0, gv1, n * r) == 0, "replayed G_V differs");
    /* new x between replays */
    float *x2 = t_rand(&rng, ntok * n, 2.0f);
    CHECK_OK(ctx, br_buf_upload(bx, 0, x2, ntok * n));
    CHECK_OK(ctx, br_graph_launch(g));
    float *y2 = t_download_f32(ctx, by, ntok * m);
    ref_out o;
    ref_run(&L, x2, NULL, ntok, &o);
    double e = t_rel_err(y2, o.y, ntok * m);
    CHECK(e < TOL, "replay on new x: y rel err %.3g", e);
    ref_out_free(&o);
    br_graph_free(g);
    free(x), free(dy), free(x2), free(y0), free(dx0), free(gv0), free(y1), free(dx1), free(gv1),
        free(y2);
    br_buf_free(bx), br_buf_free(bdy), br_buf_free(by), br_buf_free(bdx);
    br_blr_scratch_free(s);
    br_blr_free(l);
    ref_free(&L);
    br_ctx_free(ctx);
}

/* Host transfers: a new layer is Ŵ = 0 with every sign +1; set/get and the
 * br_blr_host forms round-trip exactly; views have the documented sizes. */
static void host_transfers(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(11);
    size_t m = 45, n = 70, r = 64, w = r / 32;
    br_blr *l = NULL;
    CHECK_OK(ctx, br_blr_new(ctx, m, n, r, 2, BR_BLR_CURVATURE, &l));
    size_t sm, sn, sr, sp;
    br_blr_shape(l, &sm, &sn, &sr, &sp);
    CHECK(sm == m && sn == n && sr == r && sp == 2, "shape %zu %zu %zu %zu", sm, sn, sr, sp);
    CHECK(br_blr_ctx(l) == ctx, "br_blr_ctx");
    uint32_t *bu = t_xmalloc(m * w * 4), *bv = t_xmalloc(n * w * 4);
    float *h = t_xmalloc(m * 4), *lv = t_xmalloc(r * 4), *g = t_xmalloc(n * 4);
    CHECK_OK(ctx, br_blr_get_path(l, 1, bu, bv, h, lv, g));
    size_t ones = 0, zeros = 0;
    for (size_t i = 0; i < m * w; i++)
        ones += bu[i] == 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        zeros += g[i] == 0.0f;
    CHECK(ones == m * w && zeros == n, "new layer: %zu of %zu words all +1, %zu of %zu g zero",
          ones, m * w, zeros, n);
    size_t sizes[12] = {m, r, n, m, r, n, m * w, n * w, m * r, n * r, r, n};
    for (int part = 0; part < 12; part++) {
        br_buf *b = br_blr_buf(l, 1, (br_blr_part)part);
        CHECK(b && br_buf_count(b) == sizes[part], "part %d: %zu elements, want %zu", part,
              b ? br_buf_count(b) : 0, sizes[part]);
    }
    CHECK(br_blr_buf(l, 2, BR_BLR_H) == NULL, "path 2 of a 2-path layer");
    ref_layer L = ref_random(&rng, m, n, r, 2, 0);
    br_blr_host host = {m, n, r, 2, {{0}}};
    for (size_t p = 0; p < 2; p++)
        host.path[p] = (br_blr_path_host){L.p[p].bu, L.p[p].bv, L.p[p].h, L.p[p].l, L.p[p].g};
    br_blr *l2 = NULL;
    CHECK_OK(ctx, br_blr_from_host(ctx, &host, 0, &l2));
    br_blr_host back = {m, n, r, 2, {{0}}};
    for (size_t p = 0; p < 2; p++)
        back.path[p] = (br_blr_path_host){t_xmalloc(m * w * 4), t_xmalloc(n * w * 4),
                                          t_xmalloc(m * 4), t_xmalloc(r * 4), t_xmalloc(n * 4)};
    CHECK_OK(ctx, br_blr_to_host(l2, &back));
    for (size_t p = 0; p < 2; p++) {
        CHECK(!memcmp(back.path[p].bits_u, L.p[p].bu, m * w * 4), "bits_u round trip");
        CHECK(!memcmp(back.path[p].bits_v, L.p[p].bv, n * w * 4), "bits_v round trip");
        CHECK(!memcmp(back.path[p].h, L.p[p].h, m * 4), "h round trip");
        CHECK(!memcmp(back.path[p].l, L.p[p].l, r * 4), "l round trip");
        CHECK(!memcmp(back.path[p].g, L.p[p].g, n * 4), "g round trip");
        free(back.path[p].bits_u), free(back.path[p].bits_v), free(back.path[p].h),
            free(back.path[p].l), free(back.path[p].g);
    }
    br_blr_host wrong = back;
    wrong.m = m + 1;
    CHECK_FAILS(ctx, BR_E_SHAPE, br_blr_to_host(l2, &wrong));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_set_path(l2, 2, NULL, NULL, h, NULL, NULL));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_get_path(l2, 5, NULL, NULL, h, NULL, NULL));
    free(bu), free(bv), free(h), free(lv), free(g);
    br_blr_free(l), br_blr_free(l2);
    ref_free(&L);
    br_ctx_free(ctx);
}

/* Every class of bad argument, each with a status and a message. */
static void bad_arguments(void) {
    /* host-side checks, covered by the plain run; under racecheck this case did not
     * finish in 240 s on the H200 */
    if (small_mode()) return;
    br_ctx *ctx = t_ctx(), *other = t_cpu_ctx();
    br_blr *l = NULL, *l2 = NULL;
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_new(ctx, 10, 10, 32, 1, 0, NULL));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_blr_new(ctx, 10, 10, 33, 1, 0, &l));
    CHECK(l == NULL, "failed new leaves *out NULL");
    CHECK_FAILS(ctx, BR_E_SHAPE, br_blr_new(ctx, 0, 10, 32, 1, 0, &l));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_blr_new(ctx, 10, 10, 32, 0, 0, &l));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_new(ctx, 10, 10, 32, 1, 0x80, &l));
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_blr_new(ctx, (size_t)1 << 40, 10, 32, 1, 0, &l));
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_blr_new(ctx, 1u << 20, 1u << 20, 1024, 2, 0, &l));
    CHECK(br_blr_new(NULL, 10, 10, 32, 1, 0, &l) == BR_E_ARG, "NULL ctx");
    size_t m = 40, n = 50, r = 32, ntok = 8;
    CHECK_OK(ctx, br_blr_new(ctx, m, n, r, 2, BR_BLR_SIGN_GRADS, &l));
    CHECK_OK(ctx, br_blr_new(ctx, m, n, r, 1, 0, &l2));
    br_blr_scratch *s = NULL, *s2 = NULL, *bad0 = NULL;
    br_blr_shared *sh = NULL;
    CHECK_OK(ctx, br_blr_scratch_new(l, ntok, NULL, &s));
    CHECK_OK(ctx, br_blr_scratch_new(l2, ntok, NULL, &s2));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_scratch_new(l, ntok, NULL, NULL));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_blr_scratch_new(l, 0, NULL, &bad0));
    CHECK_OK(ctx, br_blr_shared_new(ctx, ntok, m, n - 1, r, 2, &sh));
    br_blr_scratch *bad = NULL;
    CHECK_FAILS(ctx, BR_E_SIZE, br_blr_scratch_new(l, ntok, sh, &bad));
    br_blr_shared_free(sh);
    /* a shared set for one path of rank r is too narrow for two */
    CHECK_OK(ctx, br_blr_shared_new(ctx, ntok, m, n, r, 1, &sh));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "paths·r", br_blr_scratch_new(l, ntok, sh, &bad));
    br_blr_shared_free(sh);
    CHECK_OK(ctx, br_blr_shared_new(ctx, ntok, m, n, 2 * r, 1, &sh));
    CHECK_OK(ctx, br_blr_scratch_new(l, ntok, sh, &bad)); /* 2 paths of r fit rank 2r */
    br_blr_scratch_free(bad);
    bad = NULL;
    br_blr_shared_free(sh);
    {
        br_ctx *c2 = t_cpu_ctx();
        CHECK_OK(c2, br_blr_shared_new(c2, ntok, m, n, r, 2, &sh));
        CHECK_FAILS(ctx, BR_E_ARG, br_blr_scratch_new(l, ntok, sh, &bad));
        br_blr_shared_free(sh);
        br_ctx_free(c2);
    }
    CHECK_FAILS(ctx, BR_E_SHAPE, br_blr_shared_new(ctx, ntok, m, n, 48, 1, &sh));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_blr_shared_new(ctx, ntok, m, n, r, 0, &sh));
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_blr_shared_new(ctx, ntok, m, n, r, (size_t)1 << 60, &sh));
    br_buf *x = t_buf_poison(ctx, BR_F32, ntok * n, 0), *y = t_buf_poison(ctx, BR_F32, ntok * m, 0);
    br_buf *dy = t_buf_poison(ctx, BR_F32, ntok * m, 0),
           *dx = t_buf_poison(ctx, BR_F32, ntok * n, 0);
    br_buf *x16 = t_buf_poison(ctx, BR_F16, ntok * n, 0);
    br_buf *small = t_buf_poison(ctx, BR_F32, ntok * n - 1, 0);
    br_buf *xo = NULL;
    CHECK(br_buf_new(other, BR_F32, ntok * n, &xo) == BR_OK, "other buffer");
    CHECK_FAILS(ctx, BR_E_ARG, fwd_plain(l, NULL, x, y, ntok));
    CHECK_FAILS(ctx, BR_E_ARG, fwd_plain(l, s2, x, y, ntok));
    CHECK_FAILS(ctx, BR_E_ARG, fwd_plain(l, s, NULL, y, ntok));
    CHECK_FAILS(ctx, BR_E_DTYPE, fwd_plain(l, s, x16, y, ntok));
    CHECK_FAILS(ctx, BR_E_SIZE, fwd_plain(l, s, small, y, ntok));
    CHECK_FAILS(ctx, BR_E_ARG, fwd_plain(l, s, xo, y, ntok));
    CHECK_FAILS(ctx, BR_E_SHAPE, fwd_plain(l, s, x, y, 0));
    CHECK_FAILS(ctx, BR_E_SIZE, fwd_plain(l, s, x, y, ntok + 1));
    CHECK(fwd_plain(NULL, s, x, y, ntok) == BR_E_ARG, "NULL layer");
    /* a backward needs a forward through the scratch first, with its ntok */
    CHECK_FAILS_MSG(ctx, BR_E_STATE, "no forward",
                    br_blr_backward(l, s, x, dy, dx, ntok, 1024.0f, 0));
    CHECK_OK(ctx, fwd_plain(l, s, x, y, ntok));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_backward(l, s, x, dy, dx, ntok - 1, 1024.0f, 0));
    /* the descriptor's own mistakes: no input, two inputs, gscale without a target */
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "descriptor", br_blr_forward(l, s, NULL));
    {
        br_blr_fwd f = {.out = y, .ntok = ntok};
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "both NULL", br_blr_forward(l, s, &f));
        f.x = x, f.x16 = x16;
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "both given", br_blr_forward(l, s, &f));
        f.x16 = NULL, f.gscale = 1024.0f;
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "needs a target", br_blr_forward(l, s, &f));
        CHECK(br_blr_forward(NULL, s, &f) == BR_E_ARG, "NULL layer");
    }
    /* the fused-loss forward */
    CHECK_FAILS(ctx, BR_E_NONFINITE, fwd_residual(l, s, x, dy, NAN, y, ntok));
    CHECK_FAILS(ctx, BR_E_DTYPE, fwd_residual(l, s, x, x16, 1.0f, y, ntok));
    {
        br_buf *short_t = t_buf_poison(ctx, BR_F32, ntok * m - 1, 0);
        CHECK_FAILS_MSG(ctx, BR_E_SIZE, "target",
                        fwd_residual(l, s, x, short_t, 1.0f, y, ntok));
        CHECK_FAILS_MSG(ctx, BR_E_SIZE, "out",
                        fwd_residual(l, s, x, dy, 1.0f, short_t, ntok));
        br_buf_free(short_t);
    }
    {
        br_buf *both = t_buf_poison(ctx, BR_F32, ntok * m + 1, 0), *tv = NULL, *ov = NULL;
        CHECK(br_buf_view(both, 0, ntok * m, &tv) == BR_OK, "view");
        CHECK(br_buf_view(both, 1, ntok * m, &ov) == BR_OK, "view");
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps",
                        fwd_residual(l, s, x, tv, 1.0f, ov, ntok));
        br_buf_free(ov), br_buf_free(tv), br_buf_free(both);
    }
    CHECK_OK(ctx, fwd_residual(l, s, x, dy, 1.0f, y, ntok));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_backward(l, s, x, dy, dx, ntok, 1000.0f, 0));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_backward(l, s, x, dy, dx, ntok, 0.0f, 0));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_backward(l, s, x, dy, dx, ntok, INFINITY, 0));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_backward(l, s, x, dy, x, ntok, 1024.0f, 0));
    { /* dx sharing one element with dy: the second path would read a dy overwritten */
        br_buf *both = t_buf_poison(ctx, BR_F32, ntok * (m + n), 0), *dyv = NULL, *dxv = NULL;
        CHECK(br_buf_view(both, 0, ntok * m, &dyv) == BR_OK, "view");
        CHECK(br_buf_view(both, ntok * m - 1, ntok * n, &dxv) == BR_OK, "view");
        CHECK_FAILS(ctx, BR_E_ARG, br_blr_backward(l, s, x, dyv, dxv, ntok, 1024.0f, 0));
        CHECK(strstr(br_ctx_error(ctx), "dx overlaps dy") != NULL, "message: %s",
              br_ctx_error(ctx));
        br_buf_free(dxv), br_buf_free(dyv), br_buf_free(both);
    }
    CHECK_FAILS(ctx, BR_E_SIZE, br_blr_backward(l, s, x, dy, small, ntok, 1024.0f, 0));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_blr_backward(l, s, x, x16, dx, ntok, 1024.0f, 0));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_backward(l, s, x, dy, xo, ntok, 1024.0f, 0));
    CHECK_OK(ctx, br_blr_backward(l, s, x, dy, dx, ntok, 0.25f, 0));
    { /* staged inputs: too small, missing, wrong dtype, the scratch's own buffer */
        size_t n16 = br_pad_rows(ntok) * br_blr_stage_cols(l);
        br_buf *s16 = t_buf_poison(ctx, BR_F16, n16, 0), *s15 = NULL;
        CHECK_OK(ctx, br_buf_view(s16, 0, n16 - 1, &s15));
        CHECK_FAILS_MSG(ctx, BR_E_SIZE, "x16", fwd_staged(l, s, s15, y, ntok));
        CHECK_FAILS(ctx, BR_E_ARG, fwd_staged(l, s, NULL, y, ntok));
        CHECK_FAILS(ctx, BR_E_DTYPE, fwd_staged(l, s, x, y, ntok));
        CHECK_FAILS(ctx, BR_E_ARG, br_blr_stage(l, x, NULL, ntok));
        CHECK_FAILS_MSG(ctx, BR_E_SIZE, "x16", br_blr_stage(l, x, s15, ntok));
        CHECK_FAILS(ctx, BR_E_SIZE, br_blr_stage(l, small, s16, ntok));
        CHECK_FAILS(ctx, BR_E_SHAPE, br_blr_stage(l, x, s16, 0));
        CHECK(br_blr_stage(NULL, x, s16, ntok) == BR_E_ARG, "NULL layer");
        CHECK_OK(ctx, br_blr_stage(l, x, s16, ntok));
        CHECK_OK(ctx, fwd_staged(l, s, s16, y, ntok));
        br_buf_free(s15), br_buf_free(s16);
    }
    CHECK(br_blr_buf(l, 0, (br_blr_part)99) == NULL, "part out of range");
    CHECK(br_blr_buf(l2, 0, BR_BLR_GU) == NULL, "no G without SIGN_GRADS");
    br_buf_free(x), br_buf_free(y), br_buf_free(dy), br_buf_free(dx), br_buf_free(x16),
        br_buf_free(small), br_buf_free(xo);
    br_blr_scratch_free(s), br_blr_scratch_free(s2);
    br_blr_free(l), br_blr_free(l2);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

T_RUN("blr", T_CASE(spec_two_path_layer), T_CASE(awkward_shapes), T_CASE(two_paths_are_two_halves),
      T_CASE(staged_and_shared), T_CASE(residual_forward), T_CASE(loss_forward_stages_dy),
      T_CASE(scale_grads_from_token_products), T_CASE(graph_replay), T_CASE(host_transfers),
      T_CASE(bad_arguments))
