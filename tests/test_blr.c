/* The BLR layer (SPEC §1, §5 item 2): forward and backward against an f64
 * reference on random layers of every shape class, paths 1..3, the two-path sum,
 * staged inputs, graphs, host transfers and bad arguments. */
#include "blr_ref.h"

#define TOL 3e-3

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
    CHECK_OK(ctx, br_blr_forward(l, s, bx, by, ntok));
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
            /* SPEC §5 item 2 (strict): ‖got − ref‖/‖ref‖; vectors of a few entries
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

/* SPEC §5 item 2: m=256 n=384 r=128 ntok=70, two paths. */
static void spec_two_path_layer(void) { check_layer(256, 384, 128, 2, 70, 1, 0, 1, 1); }

/* Shapes that are multiples of nothing; 1 row; 1..3 paths; no dx. */
static void awkward_shapes(void) {
    check_layer(37, 50, 32, 1, 1, 1, BR_BLR_SIGN_GRADS, 2, 0);
    check_layer(100, 33, 64, 3, 45, 1, BR_BLR_SIGN_GRADS, 3, 0);
    check_layer(1, 65, 32, 2, 130, 0, BR_BLR_SIGN_GRADS, 4, 0);
    check_layer(250, 7, 96, 2, 3, 1, 0, 5, 0);
    check_layer(64, 96, 32, 3, 129, 0, 0, 6, 0);
}

/* A two-path layer equals the sum of its paths as one-path layers, bit for bit:
 * y and dx are fl(part0 + part1), the per-path gradients identical. */
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
        CHECK_OK(ctx, br_blr_forward(l, s, bx, by, ntok));
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
    size_t bad_y = 0, bad_dx = 0;
    for (size_t i = 0; i < ntok * m; i++) {
        float want = y[0][i] + y[1][i];
        bad_y += memcmp(&want, &y[2][i], 4) != 0;
    }
    for (size_t i = 0; i < ntok * n; i++) {
        float want = dx[0][i] + dx[1][i];
        bad_dx += memcmp(&want, &dx[2][i], 4) != 0;
    }
    CHECK(bad_y == 0, "y: %zu of %zu differ from the sum of the halves", bad_y, ntok * m);
    CHECK(bad_dx == 0, "dx: %zu of %zu differ from the sum of the halves", bad_dx, ntok * n);
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < 5; i++) {
            size_t bad = t_bits_differ32(grads[p][0][i], grads[2][p][i], len[i]);
            CHECK(bad == 0, "path %d gradient %d: %zu of %zu differ", p, i, bad, len[i]);
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

/* br_blr_stage + br_blr_forward_staged give the bits of br_blr_forward (aligned n
 * through br_cvt_multi, unaligned through padded staging); two layers share x and
 * one br_blr_shared. */
static void staged_and_shared(void) {
    br_ctx *ctx = t_ctx();
    size_t ns[2] = {64, 45};
    for (int v = 0; v < 2; v++) {
        br_rng rng = t_rng_for(8 + (uint64_t)v);
        size_t n = ns[v], ntok = 21, r = 32;
        size_t ms[2] = {40, 96}, P[2] = {2, 3};
        ref_layer L[2];
        br_blr *l[2];
        br_blr_shared *sh = NULL;
        CHECK_OK(ctx, br_blr_shared_new(ctx, ntok, 96, n, r, 0, &sh));
        float *x = t_rand(&rng, ntok * n, 2.0f);
        br_buf *bx = t_buf_from(ctx, BR_F32, x, ntok * n);
        br_buf *xin[5];
        for (int i = 0; i < 5; i++)
            xin[i] = t_buf_poison(ctx, BR_F16, br_pad_rows(ntok) * ((n + 31) / 32 * 32), T_NAN16);
        for (int i = 0; i < 2; i++) {
            L[i] = ref_random(&rng, ms[i], n, r, P[i], 0);
            l[i] = ref_upload(ctx, &L[i], 0);
        }
        CHECK(br_blr_stage_cols(l[1]) == (n + 31) / 32 * 32, "stage cols %zu",
              br_blr_stage_cols(l[1]));
        CHECK_OK(ctx, br_blr_stage(l, 2, bx, xin, ntok));
        size_t used = 0;
        for (int i = 0; i < 2; i++) {
            size_t m = ms[i];
            br_blr_scratch *s1 = NULL, *s2 = NULL;
            CHECK_OK(ctx, br_blr_scratch_new(l[i], ntok, sh, &s1));
            CHECK_OK(ctx, br_blr_scratch_new(l[i], ntok, NULL, &s2));
            br_buf *y1 = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32);
            br_buf *y2 = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32);
            CHECK_OK(ctx,
                     br_blr_forward_staged(l[i], s1, (const br_buf *const *)xin + used, y1, ntok));
            CHECK_OK(ctx, br_blr_forward(l[i], s2, bx, y2, ntok));
            float *a = t_download_f32(ctx, y1, ntok * m), *b = t_download_f32(ctx, y2, ntok * m);
            size_t bad = t_bits_differ32(a, b, ntok * m);
            CHECK(bad == 0, "n=%zu layer %d: staged forward differs in %zu of %zu", n, i, bad,
                  ntok * m);
            ref_out o;
            ref_run(&L[i], x, NULL, ntok, &o);
            double e = t_rel_err(a, o.y, ntok * m);
            CHECK(e < TOL, "n=%zu layer %d: staged y rel err %.3g", n, i, e);
            ref_out_free(&o);
            free(a), free(b);
            br_buf_free(y1), br_buf_free(y2);
            br_blr_scratch_free(s1), br_blr_scratch_free(s2);
            used += P[i];
        }
        for (int i = 0; i < 2; i++)
            br_blr_free(l[i]), ref_free(&L[i]);
        for (int i = 0; i < 5; i++)
            br_buf_free(xin[i]);
        br_buf_free(bx);
        br_blr_shared_free(sh);
        free(x);
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
    CHECK_OK(ctx, br_blr_forward(l, s, bx, by, ntok));
    CHECK_OK(ctx, br_blr_backward(l, s, bx, bdy, bdx, ntok, 1024.0f, 0));
    float *y0 = t_download_f32(ctx, by, ntok * m), *dx0 = t_download_f32(ctx, bdx, ntok * n);
    float *gv0 = ref_part(ctx, l, 1, BR_BLR_GV, n * r);
    br_graph *g = NULL;
    CHECK_OK(ctx, br_graph_begin(ctx));
    CHECK_OK(ctx, br_blr_forward(l, s, bx, by, ntok));
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
    CHECK_OK(ctx, br_blr_shared_new(ctx, ntok, m, n - 1, r, BR_BLR_SIGN_GRADS, &sh));
    br_blr_scratch *bad = NULL;
    CHECK_FAILS(ctx, BR_E_SIZE, br_blr_scratch_new(l, ntok, sh, &bad));
    br_blr_shared_free(sh);
    CHECK_OK(ctx, br_blr_shared_new(ctx, ntok, m, n, r, 0, &sh));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_scratch_new(l, ntok, sh, &bad));
    br_blr_shared_free(sh);
    CHECK_FAILS(ctx, BR_E_SHAPE, br_blr_shared_new(ctx, ntok, m, n, 48, 0, &sh));
    br_buf *x = t_buf_poison(ctx, BR_F32, ntok * n, 0), *y = t_buf_poison(ctx, BR_F32, ntok * m, 0);
    br_buf *dy = t_buf_poison(ctx, BR_F32, ntok * m, 0),
           *dx = t_buf_poison(ctx, BR_F32, ntok * n, 0);
    br_buf *x16 = t_buf_poison(ctx, BR_F16, ntok * n, 0);
    br_buf *small = t_buf_poison(ctx, BR_F32, ntok * n - 1, 0);
    br_buf *xo = NULL;
    CHECK(br_buf_new(other, BR_F32, ntok * n, &xo) == BR_OK, "other buffer");
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_forward(l, NULL, x, y, ntok));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_forward(l, s2, x, y, ntok));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_forward(l, s, NULL, y, ntok));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_blr_forward(l, s, x16, y, ntok));
    CHECK_FAILS(ctx, BR_E_SIZE, br_blr_forward(l, s, small, y, ntok));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_forward(l, s, xo, y, ntok));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_blr_forward(l, s, x, y, 0));
    CHECK_FAILS(ctx, BR_E_SIZE, br_blr_forward(l, s, x, y, ntok + 1));
    CHECK(br_blr_forward(NULL, s, x, y, ntok) == BR_E_ARG, "NULL layer");
    CHECK_OK(ctx, br_blr_forward(l, s, x, y, ntok));
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
    br_buf *xin[2] = {x16, x16};
    CHECK_FAILS(ctx, BR_E_SIZE, br_blr_forward_staged(l, s, (const br_buf *const *)xin, y, ntok));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_forward_staged(l, s, NULL, y, ntok));
    br_blr *both[2] = {l, l2};
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_stage(both, 2, x, NULL, ntok));
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
      T_CASE(staged_and_shared), T_CASE(graph_replay), T_CASE(host_transfers),
      T_CASE(bad_arguments))
