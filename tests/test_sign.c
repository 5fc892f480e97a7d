/* Sign gradients and the sign optimizer's ops: G_U, G_V against f64, the exact-flip
 * prediction of a single flip's effect on the loss on an exact grid, and the internal ops cvt_pad,
 * step_ctrl and sign_step against scalar references and across backends. */
#include "blr_ref.h"
#include "ops/sign_ops.h"

/* G_U, G_V of the two-path layer m=256 n=384 r=128 ntok=70 within
 * 3e-3 of f64; the curvature sums Σ_t a², Σ_t x² too. */
static void spec_sign_grads(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(20);
    size_t m = 256, n = 384, r = 128, ntok = 70, P = 2;
    ref_layer L = ref_random(&rng, m, n, r, P, 0);
    float *x = t_rand(&rng, ntok * n, 2.0f), *dy = t_rand(&rng, ntok * m, 1e-3f);
    br_blr *l = ref_upload(ctx, &L, BR_BLR_CURVATURE);
    br_blr_scratch *s = NULL;
    CHECK_OK(ctx, br_blr_scratch_new(l, ntok, NULL, &s));
    br_buf *bx = t_buf_from(ctx, BR_F32, x, ntok * n), *bdy = t_buf_from(ctx, BR_F32, dy, ntok * m);
    br_buf *by = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32);
    CHECK_OK(ctx, fwd_plain(l, s, bx, by, ntok));
    CHECK_OK(ctx, br_blr_backward(l, s, bx, bdy, NULL, ntok, 1024.0f, 0));
    ref_out o;
    ref_run(&L, x, dy, ntok, &o);
    for (size_t p = 0; p < P; p++) {
        float *gu = ref_part(ctx, l, p, BR_BLR_GU, m * r),
              *gv = ref_part(ctx, l, p, BR_BLR_GV, n * r);
        double eu = t_rel_err(gu, o.gu + p * m * r, m * r),
               ev = t_rel_err(gv, o.gv + p * n * r, n * r);
        fprintf(stderr, "  path %zu: G_U rel err %.3g, G_V rel err %.3g\n", p, eu, ev);
        CHECK(eu < 3e-3, "path %zu: G_U rel err %.3g", p, eu);
        CHECK(ev < 3e-3, "path %zu: G_V rel err %.3g", p, ev);
        float *a2 = ref_part(ctx, l, p, BR_BLR_SUM_A2, r);
        double *want = t_xmalloc(r * sizeof *want);
        for (size_t k = 0; k < r; k++) {
            want[k] = 0;
            for (size_t t = 0; t < ntok; t++)
                want[k] += o.a[(p * ntok + t) * r + k] * o.a[(p * ntok + t) * r + k];
        }
        double e = t_rel_err(a2, want, r);
        CHECK(e < 3e-3, "path %zu: Σ a² rel err %.3g", p, e); /* a from f16 operands */
        free(gu), free(gv), free(a2), free(want);
    }
    float *x2 = ref_part(ctx, l, 0, BR_BLR_SUM_X2, n);
    double *want = t_xmalloc(n * sizeof *want);
    for (size_t j = 0; j < n; j++) {
        want[j] = 0;
        for (size_t t = 0; t < ntok; t++)
            want[j] += (double)x[t * n + j] * x[t * n + j];
    }
    CHECK(t_rel_err(x2, want, n) < 1e-5, "Σ x² rel err %.3g", t_rel_err(x2, want, n));
    free(x2), free(want);
    ref_out_free(&o);
    free(x), free(dy);
    br_buf_free(bx), br_buf_free(bdy), br_buf_free(by);
    br_blr_scratch_free(s);
    br_blr_free(l);
    ref_free(&L);
    br_ctx_free(ctx);
}

/* ½‖y − y*‖² per element, in double. */
static double loss_of(const float *y, const float *ystar, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += 0.5 * ((double)y[i] - ystar[i]) * ((double)y[i] - ystar[i]);
    return s;
}

/* The exact-flip prediction: on an exact grid (ℓ, g, h powers of two, x multiples of
 * 1/8, so every f16 operand of the forward is exact; dy on a grid of 1/16, so the
 * staged f16(dy·gs) is too, and so is the backward's B' = f16(B⊙ℓ·gs) as long as
 * |B| < 4, B = dy·W_U on a grid of 1/512), single flips change L = ½‖y − y*‖² by
 * −2s·G + quad. Each flip rewrites the bitmap and reruns the forward. Worst error
 * relative to 2|G| + quad: < 5e-4 with f64 G, < 2e-3 with the layer's G. (With dy
 * off the grid the layer's G carries the f16 rounding of dy·gs too and its worst
 * error spreads to ~4e-3 over fresh seeds; with dy on 1/64, B needed 13 bits and B'
 * rounded: worst 2.7e-3 once in 150+ seeds (CI), max 1.4e-3 in 150 more;
 * on 1/16: median 1.7e-4, max 8.3e-4 in 150.) */
static void spec_flip_exact(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(21);
    size_t m = 256, n = 384, r = 128, ntok = 70, P = 2, w = r / 32;
    ref_layer L = ref_random(&rng, m, n, r, P, 1);
    float *x = t_xmalloc(ntok * n * sizeof *x);
    for (size_t i = 0; i < ntok * n; i++)
        x[i] = roundf(br_rng_sym(&rng) * 4.0f) / 8.0f;
    br_blr *l = ref_upload(ctx, &L, BR_BLR_SIGN_GRADS);
    br_blr_scratch *s = NULL;
    CHECK_OK(ctx, br_blr_scratch_new(l, ntok, NULL, &s));
    br_buf *bx = t_buf_from(ctx, BR_F32, x, ntok * n);
    br_buf *by = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32);
    CHECK_OK(ctx, fwd_plain(l, s, bx, by, ntok));
    float *y0 = t_download_f32(ctx, by, ntok * m);
    double ms = 0;
    for (size_t i = 0; i < ntok * m; i++)
        ms += (double)y0[i] * y0[i];
    float rms = (float)sqrt(ms / (double)(ntok * m));
    float *ystar = t_xmalloc(ntok * m * sizeof *ystar), *dy = t_xmalloc(ntok * m * sizeof *dy);
    for (size_t i = 0; i < ntok * m; i++) {
        /* dy on a grid of 1/16 (and ystar = y0 − dy) */
        dy[i] = roundf(0.7f * rms * br_rng_sym(&rng) * 16.0f) / 16.0f;
        ystar[i] = y0[i] - dy[i];
    }
    double l0 = loss_of(y0, ystar, ntok * m);
    br_buf *bdy = t_buf_from(ctx, BR_F32, dy, ntok * m);
    CHECK_OK(ctx, br_blr_backward(l, s, bx, bdy, NULL, ntok, 1024.0f, 0));
    ref_out o;
    ref_run(&L, x, dy, ntok, &o);
    double worst_dev = 0, worst_host = 0;
    static const size_t picks[8][2] = {{0, 0},   {1, 31},   {2, 32},   {255, 127},
                                       {17, 63}, {100, 64}, {200, 95}, {5, 96}};
    double sum_h2[2] = {0, 0};
    for (size_t p = 0; p < P; p++)
        for (size_t i = 0; i < m; i++)
            sum_h2[p] += (double)L.p[p].h[i] * L.p[p].h[i];
    for (size_t p = 0; p < P; p++) {
        float *gu = ref_part(ctx, l, p, BR_BLR_GU, m * r),
              *gv = ref_part(ctx, l, p, BR_BLR_GV, n * r);
        const ref_path *q = &L.p[p];
        for (int side = 0; side < 2; side++) {
            size_t rows = side ? n : m;
            uint32_t *base = side ? q->bv : q->bu;
            uint32_t *fl = t_xmalloc(rows * w * sizeof *fl);
            for (size_t qi = 0; qi < 8; qi++) {
                size_t i = (picks[qi][0] + 37 * qi * (size_t)side) % rows;
                size_t k = (picks[qi][1] + 11 * p) % r;
                double s0 = side ? q->sv[i * r + k] : q->su[i * r + k], gd, gh, quad;
                if (!side) {
                    double sa = 0;
                    for (size_t t = 0; t < ntok; t++)
                        sa += o.a[(p * ntok + t) * r + k] * o.a[(p * ntok + t) * r + k];
                    gd = gu[i * r + k];
                    gh = o.gu[(p * m + i) * r + k];
                    quad = 2.0 * q->h[i] * q->h[i] * q->l[k] * q->l[k] * sa;
                } else {
                    double sx = 0;
                    for (size_t t = 0; t < ntok; t++)
                        sx += (double)x[t * n + i] * x[t * n + i];
                    gd = gv[i * r + k];
                    gh = o.gv[(p * n + i) * r + k];
                    quad = 2.0 * q->g[i] * q->g[i] * q->l[k] * q->l[k] * sx * sum_h2[p];
                }
                memcpy(fl, base, rows * w * sizeof *fl);
                fl[i * w + k / 32] ^= 1u << (k % 32);
                CHECK_OK(ctx, br_blr_set_path(l, p, side ? NULL : fl, side ? fl : NULL, NULL, NULL,
                                              NULL));
                CHECK_OK(ctx, fwd_plain(l, s, bx, by, ntok));
                float *y1 = t_download_f32(ctx, by, ntok * m);
                CHECK_OK(ctx, br_blr_set_path(l, p, side ? NULL : base, side ? base : NULL, NULL,
                                              NULL, NULL));
                double meas = loss_of(y1, ystar, ntok * m) - l0;
                double scale = 2.0 * fabs(gh) + quad;
                double ed = fabs(meas - (-2.0 * s0 * gd + quad)) / scale;
                double eh = fabs(meas - (-2.0 * s0 * gh + quad)) / scale;
                if (ed > worst_dev) worst_dev = ed;
                if (eh > worst_host) worst_host = eh;
                free(y1);
            }
            free(fl);
        }
        free(gu), free(gv);
    }
    fprintf(stderr, "  flip ΔL vs prediction: worst %.3g (layer G), %.3g (f64 G)\n", worst_dev,
            worst_host);
    CHECK(worst_host < 5e-4, "exact-flip prediction with f64 G: worst %.3g", worst_host);
    CHECK(worst_dev < 2e-3, "exact-flip prediction with the layer's G: worst %.3g", worst_dev);
    ref_out_free(&o);
    free(x), free(y0), free(ystar), free(dy);
    br_buf_free(bx), br_buf_free(by), br_buf_free(bdy);
    br_blr_scratch_free(s);
    br_blr_free(l);
    ref_free(&L);
    br_ctx_free(ctx);
}

/* cvt_pad equals br_cvt on the first k columns bit for bit; pad columns and rows 0. */
static void cvt_pad_matches_cvt(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(22);
    size_t shapes[3][3] = {{70, 45, 64}, {1, 200, 224}, {129, 32, 96}};
    for (int v = 0; v < 3; v++) {
        size_t m = shapes[v][0], k = shapes[v][1], ld = shapes[v][2], mp = br_pad_rows(m);
        float *src = t_rand(&rng, m * k, 3.0f), *col = t_rand(&rng, k, 2.0f);
        br_buf *bs = t_buf_from(ctx, BR_F32, src, m * k), *bc = t_buf_from(ctx, BR_F32, col, k);
        for (int withcol = 0; withcol < 2; withcol++) {
            float scale = withcol ? 1024.0f : 0.5f;
            br_buf *a = t_buf_poison(ctx, BR_F16, mp * k, T_NAN16);
            br_buf *pd = t_buf_poison(ctx, BR_F16, mp * ld, T_NAN16);
            CHECK_OK(ctx, br_cvt(ctx, bs, withcol ? bc : NULL, a, m, k, scale));
            CHECK_OK(ctx, br_cvt_pad(ctx, bs, withcol ? bc : NULL, pd, m, k, ld, scale));
            uint16_t *av = t_download_f16(ctx, a, mp * k), *pv = t_download_f16(ctx, pd, mp * ld);
            size_t bad = 0;
            for (size_t row = 0; row < mp; row++)
                for (size_t c = 0; c < ld; c++) {
                    uint16_t want = c < k ? av[row * k + c] : 0;
                    bad += pv[row * ld + c] != want;
                }
            CHECK(bad == 0, "cvt_pad %zux%zu ld %zu col %d: %zu of %zu differ", m, k, ld, withcol,
                  bad, mp * ld);
            free(av), free(pv);
            br_buf_free(a), br_buf_free(pd);
        }
        free(src), free(col);
        br_buf_free(bs), br_buf_free(bc);
    }
    br_ctx_free(ctx);
}

/* The step controller against its formula, bit for bit: norms, t, β^t, the clip
 * multiplier, and a refusal that leaves the state alone. */
static void step_ctrl_formula(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(23);
    size_t np = 7, nclip = 4;
    float *part = t_rand(&rng, np * BR_SUMSQ_PARTS, 1.0f);
    for (size_t i = 0; i < np * BR_SUMSQ_PARTS; i++)
        part[i] = fabsf(part[i]);
    float hyper[4] = {0.01f, 0.2f, 3.0f, 0}, state[4] = {5, 0.5f, 0.9f, 0};
    br_buf *bp = t_buf_from(ctx, BR_F32, part, np * BR_SUMSQ_PARTS);
    br_buf *bh = t_buf_from(ctx, BR_F32, hyper, 4), *bs = t_buf_from(ctx, BR_F32, state, 4);
    br_buf *sched = t_buf_poison(ctx, BR_F32, 4, T_NAN32);
    br_buf *ssched = t_buf_poison(ctx, BR_F32, BR_SIGN_SCHED, T_NAN32);
    br_buf *norms = t_buf_poison(ctx, BR_F32, np + 1, T_NAN32);
    br_step_ctrl_args a = {.partials = bp,
                           .np = np,
                           .nclip = nclip,
                           .hyper = bh,
                           .state = bs,
                           .sched = sched,
                           .sign_sched = ssched,
                           .norms = norms,
                           .sign_beta1 = 0.8f,
                           .sign_beta2 = 0.95f};
    CHECK_OK(ctx, br_step_ctrl(ctx, &a));
    double S[7], clip = 0;
    for (size_t i = 0; i < np; i++) {
        S[i] = 0;
        for (size_t j = 0; j < BR_SUMSQ_PARTS; j++)
            S[i] += (double)part[i * BR_SUMSQ_PARTS + j];
        if (i < nclip) clip += S[i];
    }
    float *nv = t_download_f32(ctx, norms, np + 1), *sv = t_download_f32(ctx, sched, 4);
    float *ssv = t_download_f32(ctx, ssched, BR_SIGN_SCHED), *st = t_download_f32(ctx, bs, 4);
    for (size_t i = 0; i < np; i++)
        CHECK(nv[i] == (float)sqrt(S[i]), "norm %zu", i);
    CHECK(nv[np] == (float)sqrt(clip), "clipped norm %g vs %g", nv[np], sqrt(clip));
    float gm = sqrt(clip) > 3.0 ? (float)(3.0 / sqrt(clip)) : 1.0f;
    float b1t = 0.5f * 0.8f, b2t = 0.9f * 0.95f;
    CHECK(sv[0] == 0.01f && sv[1] == 6.0f && sv[2] == gm && sv[3] == 0.0f, "sched %g %g %g %g",
          sv[0], sv[1], sv[2], sv[3]);
    CHECK(ssv[0] == 0.2f && ssv[1] == 6.0f && ssv[2] == gm && ssv[3] == 0.0f &&
              ssv[4] == 1.0f - b1t && ssv[5] == 1.0f - b2t,
          "sign sched %g %g %g %g %g %g", ssv[0], ssv[1], ssv[2], ssv[3], ssv[4], ssv[5]);
    CHECK(st[0] == 6.0f && st[1] == b1t && st[2] == b2t, "state %g %g %g", st[0], st[1], st[2]);
    free(nv), free(sv), free(ssv), free(st);
    /* one Inf partial (in a parameter outside the clip): refused, state unchanged */
    float inf = INFINITY;
    CHECK_OK(ctx, br_buf_upload(bp, 6 * BR_SUMSQ_PARTS + 3, &inf, 1));
    CHECK_OK(ctx, br_step_ctrl(ctx, &a));
    sv = t_download_f32(ctx, sched, 4);
    ssv = t_download_f32(ctx, ssched, BR_SIGN_SCHED);
    st = t_download_f32(ctx, bs, 4);
    CHECK(sv[3] == 1.0f && ssv[3] == 1.0f, "refusal: skip %g %g", sv[3], ssv[3]);
    CHECK(st[0] == 6.0f && st[1] == b1t && st[2] == b2t, "refusal changed the state");
    free(sv), free(ssv), free(st);
    /* bad arguments */
    a.nclip = np + 1;
    CHECK_FAILS(ctx, BR_E_ARG, br_step_ctrl(ctx, &a));
    a.nclip = nclip;
    a.norms = sched;
    CHECK_FAILS(ctx, BR_E_SIZE, br_step_ctrl(ctx, &a));
    a.norms = norms;
    a.sign_beta1 = 1.0f;
    CHECK_FAILS(ctx, BR_E_ARG, br_step_ctrl(ctx, &a));
    CHECK_FAILS(ctx, BR_E_ARG, br_step_ctrl(ctx, NULL));
    free(part);
    br_buf_free(bp), br_buf_free(bh), br_buf_free(bs), br_buf_free(sched), br_buf_free(ssched),
        br_buf_free(norms);
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- sign_step */

/* Inputs of one sign step, on the host. */
typedef struct step_case {
    size_t rows, r;
    int exact, factored;
    float *grad, *lat, *m1, *v; /* v: [rows][r] or [rows + r] */
    uint32_t *bits;
    float sched[BR_SIGN_SCHED];
    float *rowf, *rowq, *colf, *colq, *normsrc;
    size_t nnorm, budget;
    float beta1, beta2, eps, clamp, hyst, curv2;
} step_case;

static step_case make_case(br_rng *rng, size_t rows, size_t r, int exact, int factored) {
    step_case c = {.rows = rows, .r = r, .exact = exact, .factored = factored};
    size_t n = rows * r, nv = factored ? rows + r : n;
    c.grad = t_rand(rng, n, 1.0f);
    c.lat = t_rand(rng, n, 0.3f);
    c.m1 = t_rand(rng, n, 0.1f);
    c.v = t_rand(rng, nv, 0.1f);
    for (size_t i = 0; i < nv; i++)
        c.v[i] = c.v[i] * c.v[i] + 1e-3f;
    c.bits = t_xmalloc(n / 32 * sizeof *c.bits);
    for (size_t i = 0; i < n / 32; i++)
        c.bits[i] = (uint32_t)br_rng_u64(rng);
    float s[BR_SIGN_SCHED] = {
        0.05f, 3, 0.7f, 0, 1 - 0.9f * 0.9f * 0.9f, 1 - 0.999f * 0.999f * 0.999f, 0, 0};
    memcpy(c.sched, s, sizeof s);
    c.rowf = t_rand(rng, rows, 1.0f);
    c.rowq = t_rand(rng, rows, 1.0f);
    c.colf = t_rand(rng, r, 1.0f);
    c.colq = t_rand(rng, r, 1.0f);
    for (size_t i = 0; i < rows; i++)
        c.rowq[i] = fabsf(c.rowq[i]) * 30;
    for (size_t k = 0; k < r; k++)
        c.colq[k] = fabsf(c.colq[k]) * 30;
    c.nnorm = 77;
    c.normsrc = t_rand(rng, c.nnorm, 0.1f);
    c.budget = n;
    c.beta1 = 0.9f, c.beta2 = 0.999f, c.eps = 1e-8f, c.clamp = 0.5f, c.hyst = 0.05f;
    c.curv2 = 2.0f;
    return c;
}

static void free_case(step_case *c) {
    free(c->grad), free(c->lat), free(c->m1), free(c->v), free(c->bits), free(c->rowf),
        free(c->rowq), free(c->colf), free(c->colq), free(c->normsrc);
}

/* Device outputs of a step. */
typedef struct step_out {
    float *lat, *m1, *v;
    uint32_t *bits, flips;
} step_out;

/* A case's step arguments but its buffers (the caller sets grad, bits, latent, m1,
 * v, sched, flips, slot and the exact mode's operands). */
static br_sign_step_args case_args(const step_case *c) {
    return (br_sign_step_args){.exact = c->exact,
                               .factored = c->factored,
                               .rows = c->rows,
                               .r = c->r,
                               .budget = c->budget,
                               .beta1 = c->beta1,
                               .beta2 = c->beta2,
                               .eps = c->eps,
                               .clamp = c->clamp,
                               .hyst = c->hyst,
                               .nnorm = c->nnorm,
                               .curv2 = c->curv2};
}

static step_out run_case(br_ctx *ctx, const step_case *c, int with_q) {
    size_t n = c->rows * c->r, nv = c->factored ? c->rows + c->r : n;
    br_buf *g = t_buf_from(ctx, BR_F32, c->grad, n), *lat = t_buf_from(ctx, BR_F32, c->lat, n);
    br_buf *m1 = t_buf_from(ctx, BR_F32, c->m1, n), *v = t_buf_from(ctx, BR_F32, c->v, nv);
    br_buf *bits = t_buf_from(ctx, BR_U32, c->bits, n / 32);
    br_buf *sched = t_buf_from(ctx, BR_F32, c->sched, BR_SIGN_SCHED);
    br_buf *flips = t_buf_poison(ctx, BR_U32, 3, 0xdeadbeefu);
    br_buf *rowf = t_buf_from(ctx, BR_F32, c->rowf, c->rows),
           *rowq = t_buf_from(ctx, BR_F32, c->rowq, c->rows);
    br_buf *colf = t_buf_from(ctx, BR_F32, c->colf, c->r),
           *colq = t_buf_from(ctx, BR_F32, c->colq, c->r);
    br_buf *ns = t_buf_from(ctx, BR_F32, c->normsrc, c->nnorm);
    br_sign_step_args a = case_args(c);
    a.grad = g, a.bits = bits, a.latent = lat, a.m1 = m1, a.v = v;
    a.sched = sched, a.flips = flips, a.slot = 2;
    a.rowf = rowf, a.colf = colf;
    a.rowq = with_q ? rowq : NULL, a.colq = with_q ? colq : NULL, a.normsrc = with_q ? ns : NULL;
    CHECK_OK(ctx, br_sign_step(ctx, &a));
    step_out o;
    o.lat = t_download_f32(ctx, lat, n);
    o.m1 = t_download_f32(ctx, m1, n);
    o.v = t_download_f32(ctx, v, nv);
    o.bits = t_xmalloc(n / 32 * sizeof *o.bits);
    uint32_t fl[3];
    CHECK_OK(ctx, br_buf_download(bits, 0, o.bits, n / 32));
    CHECK_OK(ctx, br_buf_download(flips, 0, fl, 3));
    o.flips = fl[2];
    CHECK(fl[0] == 0xdeadbeefu && fl[1] == 0xdeadbeefu, "sign_step wrote outside its slot");
    br_buf *bufs[] = {g, lat, m1, v, bits, sched, flips, rowf, rowq, colf, colq, ns};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        br_buf_free(bufs[i]);
    return o;
}

static void free_out(step_out *o) { free(o->lat), free(o->m1), free(o->v), free(o->bits); }

/* Scores of the reference step in double: latent |Λ'| of the candidates, exact −ΔL.
 * Returns the updated latent etc. through *ref. */
static double *ref_scores(const step_case *c, int with_q, double *lat_out) {
    size_t rows = c->rows, r = c->r, n = rows * r;
    double *score = t_xmalloc(n * sizeof *score);
    double lr = c->sched[0], gm = c->sched[2], bc1 = c->sched[4], bc2 = c->sched[5];
    double *vr = NULL, *vc = NULL, mean = 0;
    if (!c->exact && c->factored) {
        vr = t_xmalloc(rows * sizeof *vr);
        vc = t_xmalloc(r * sizeof *vc);
        for (size_t i = 0; i < rows; i++) {
            double s = 0;
            for (size_t k = 0; k < r; k++)
                s += pow(c->grad[i * r + k] * gm, 2);
            vr[i] = c->beta2 * (double)c->v[i] + (1 - (double)c->beta2) * s / (double)r;
            mean += vr[i] / (double)rows;
        }
        for (size_t k = 0; k < r; k++) {
            double s = 0;
            for (size_t i = 0; i < rows; i++)
                s += pow(c->grad[i * r + k] * gm, 2);
            vc[k] = c->beta2 * (double)c->v[rows + k] + (1 - (double)c->beta2) * s / (double)rows;
        }
    }
    double S = 0;
    for (size_t j = 0; j < c->nnorm; j++)
        S += (double)c->normsrc[j] * c->normsrc[j];
    for (size_t i = 0; i < rows; i++)
        for (size_t k = 0; k < r; k++) {
            size_t e = i * r + k;
            int bit = (c->bits[e / 32] >> (e % 32)) & 1u;
            if (!c->exact) {
                double g = c->grad[e] * gm;
                double m = c->beta1 * (double)c->m1[e] + (1 - (double)c->beta1) * g;
                double v = c->factored
                               ? vr[i] * vc[k] / mean
                               : c->beta2 * (double)c->v[e] + (1 - (double)c->beta2) * g * g;
                double l = c->lat[e] - lr * (m / bc1) / (sqrt(v / bc2) + c->eps);
                l = l > c->clamp ? c->clamp : l < -c->clamp ? -c->clamp : l;
                lat_out[e] = l;
                score[e] = ((l > 0) != bit && fabs(l) > c->hyst) ? fabs(l) : 0;
            } else {
                double quad = c->curv2 * (double)c->rowf[i] * c->rowf[i] * c->colf[k] * c->colf[k];
                if (with_q) quad *= (double)c->rowq[i] * c->colq[k] * S;
                double dl = quad - 2.0 * (bit ? 1 : -1) * c->grad[e];
                score[e] = dl < 0 ? -dl : 0;
            }
        }
    free(vr), free(vc);
    return score;
}

/* One sign-step case: the device against the CPU bit for bit, and both against the
 * f64 reference (latents within 1e-5 of the clamp range, flips = the reference's
 * selection except where a score sits within 1e-5 of a decision boundary). */
static void check_step(step_case *c, int with_q, const char *what) {
    br_ctx *ctx = t_ctx(), *cpu = t_cpu_ctx();
    size_t n = c->rows * c->r, nv = c->factored ? c->rows + c->r : n;
    step_out d = run_case(ctx, c, with_q), h = run_case(cpu, c, with_q);
    if (!c->exact) {
        CHECK(t_bits_differ32(d.lat, h.lat, n) == 0, "%s: latent differs from the CPU", what);
        CHECK(t_bits_differ32(d.m1, h.m1, n) == 0, "%s: m1 differs from the CPU", what);
        CHECK(t_bits_differ32(d.v, h.v, nv) == 0, "%s: v differs from the CPU", what);
    }
    CHECK(!memcmp(d.bits, h.bits, n / 32 * 4) && d.flips == h.flips,
          "%s: bits differ from the CPU (%u vs %u flips)", what, d.flips, h.flips);
    double *lat = t_xmalloc(n * sizeof *lat);
    double *score = ref_scores(c, with_q, lat);
    if (!c->exact) {
        double worst = 0;
        for (size_t e = 0; e < n; e++) {
            double err = fabs(d.lat[e] - lat[e]);
            if (err > worst) worst = err;
        }
        CHECK(worst < 1e-5 * c->clamp + 1e-7, "%s: latent off by %.3g", what, worst);
    }
    /* the reference selection: all candidates, or the budget highest */
    size_t cand = 0;
    for (size_t e = 0; e < n; e++)
        cand += score[e] > 0;
    double thr = 0;
    if (cand > c->budget) {
        double *sorted = t_xmalloc(cand * sizeof *sorted);
        size_t j = 0;
        for (size_t e = 0; e < n; e++)
            if (score[e] > 0) sorted[j++] = score[e];
        for (size_t a = 0; a < c->budget; a++) /* partial selection sort: budget is small */
            for (size_t b = a + 1; b < cand; b++)
                if (sorted[b] > sorted[a]) {
                    double t = sorted[a];
                    sorted[a] = sorted[b];
                    sorted[b] = t;
                }
        thr = c->budget ? sorted[c->budget - 1] : INFINITY;
        free(sorted);
    }
    size_t flipped = 0, disagree = 0, unclear = 0;
    for (size_t e = 0; e < n; e++) {
        int was = (c->bits[e / 32] >> (e % 32)) & 1u, now = (d.bits[e / 32] >> (e % 32)) & 1u;
        flipped += was != now;
        int want = score[e] > 0 && (cand <= c->budget || score[e] >= thr);
        double margin = fabs(score[e] - thr) / (thr > 0 ? thr : 1);
        double edge = c->exact ? 1e-5 : fabs(fabs(lat[e]) - c->hyst) + fabs(lat[e]);
        if ((was != now) != want) {
            if (margin < 1e-5 || edge < 1e-5)
                unclear++;
            else
                disagree++;
        }
    }
    CHECK(flipped == d.flips, "%s: %zu bits changed, flips says %u", what, flipped, d.flips);
    CHECK(d.flips <= c->budget, "%s: %u flips over the budget %zu", what, d.flips, c->budget);
    CHECK(disagree == 0, "%s: %zu flips disagree with the reference (%zu near a boundary)", what,
          disagree, unclear);
    CHECK(cand == 0 || d.flips > 0, "%s: %zu candidates, no flip", what, cand);
    fprintf(stderr, "  %s: %zu candidates, %u flipped (budget %zu)\n", what, cand, d.flips,
            c->budget);
    free(lat), free(score);
    free_out(&d), free_out(&h);
    br_ctx_free(cpu);
    br_ctx_free(ctx);
}

static void sign_step_latent(void) {
    br_rng rng = t_rng_for(24);
    step_case c = make_case(&rng, 70, 96, 0, 0);
    check_step(&c, 0, "latent full");
    c.budget = 25;
    check_step(&c, 0, "latent full, budget 25");
    free_case(&c);
    c = make_case(&rng, 131, 64, 0, 1);
    check_step(&c, 0, "latent factored");
    c.budget = 1;
    check_step(&c, 0, "latent factored, budget 1");
    free_case(&c);
}

static void sign_step_exact(void) {
    br_rng rng = t_rng_for(25);
    step_case c = make_case(&rng, 45, 128, 1, 0);
    for (size_t i = 0; i < 45 * 128; i++)
        c.grad[i] *= 40.0f;
    check_step(&c, 1, "exact with curvature sums");
    c.budget = 17;
    check_step(&c, 1, "exact, budget 17");
    check_step(&c, 0, "exact without sums, budget 17");
    free_case(&c);
}

/* Layer-sized steps: many blocks per kernel on a device (the per-block counts, the
 * selection passes' shared histograms and last-block tickets), each against the
 * CPU bit for bit and the f64 reference. */
static void sign_step_large(void) {
    br_rng rng = t_rng_for(27);
    step_case c = make_case(&rng, 1024, 384, 0, 0);
    check_step(&c, 0, "latent full 1024×384");
    c.budget = 1024 * 384 - 1; /* a budget that does not bind: the selection path */
    check_step(&c, 0, "latent full 1024×384, budget n − 1");
    c.budget = 100;
    check_step(&c, 0, "latent full 1024×384, budget 100");
    free_case(&c);
    c = make_case(&rng, 777, 160, 0, 1);
    c.budget = 300;
    check_step(&c, 0, "latent factored 777×160, budget 300");
    free_case(&c);
    c = make_case(&rng, 1000, 96, 1, 0);
    c.budget = 64;
    check_step(&c, 1, "exact 1000×96, budget 64");
    free_case(&c);
}

/* Ties at the K-th score are broken by the lower index: exactly min(K, candidates)
 * flips, the best first. Scores come from a few values (rowf = 0: ΔL = −2s·G). */
static void sign_step_ties(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(26);
    size_t rows = 8, r = 32, n = rows * r;
    step_case c = make_case(&rng, rows, r, 1, 0);
    for (size_t i = 0; i < rows; i++)
        c.rowf[i] = 0;
    /* candidates: bit +1 and G > 0 (ΔL = −2G); scores 2·{3, 2, 2, 2, 1, ...} */
    memset(c.bits, 0xFF, n / 32 * 4);
    for (size_t e = 0; e < n; e++)
        c.grad[e] = -1.0f;
    float vals[6] = {3, 2, 2, 2, 1, 1};
    size_t at[6] = {5, 40, 77, 200, 3, 250};
    for (int i = 0; i < 6; i++)
        c.grad[at[i]] = vals[i];
    struct {
        size_t budget, want;
    } cases[] = {{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6}, {7, 6}, {0, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c.budget = cases[i].budget;
        step_out o = run_case(ctx, &c, 0);
        CHECK(o.flips == cases[i].want, "budget %zu: %u flips, want %zu", c.budget, o.flips,
              cases[i].want);
        /* the flipped ones are the best: score descending, then index ascending */
        for (int j = 0; j < 6; j++) {
            int flipped = !((o.bits[at[j] / 32] >> (at[j] % 32)) & 1u);
            int want = (size_t)j < cases[i].want;
            CHECK(flipped == want, "budget %zu: entry of score %g flipped %d", c.budget,
                  (double)vals[j], flipped);
        }
        free_out(&o);
    }
    /* a refused step (skip) changes nothing and leaves the flip count alone */
    c.sched[3] = 1.0f;
    c.budget = n;
    step_out o = run_case(ctx, &c, 0);
    CHECK(o.flips == 0xdeadbeefu && !memcmp(o.bits, c.bits, n / 32 * 4), "skip changed the bits");
    free_out(&o);
    free_case(&c);
    br_ctx_free(ctx);
}

/* A NaN in the factored moment's state is data, not a failure: the step runs (the
 * CPU step once took a NaN row mean for its out-of-memory sentinel). */
static void sign_step_nan_factored_state(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(47);
    step_case c = make_case(&rng, 70, 64, 0, 1);
    c.v[3] = NAN; /* vr[3]: the mean over rows is NaN */
    step_out o = run_case(ctx, &c, 0);
    CHECK(isnan(o.v[3]), "the NaN moment did not stay NaN");
    free_out(&o);
    free_case(&c);
    br_ctx_free(ctx);
}

/* br_sign_steps equals br_sign_step on each matrix, bit for bit: four directly
 * flipping matrices (one launch pair on CUDA), a mix with a factored and a budgeted
 * one (one step after another), and six matrices (two ops). Then its own argument
 * checks: shared memory between matrices, one flips slot for two. */
static void sign_steps_equal_single_steps(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(31);
    static const size_t shapes[6][2] = {{96, 64}, {33, 32}, {200, 128},
                                        {64, 96}, {7, 32},  {130, 64}};
    enum { NB = 5 };
    for (int set = 0; set < 3; set++) {
        size_t nm = set == 2 ? 6 : 4;
        step_case c[6];
        step_out one[6];
        for (size_t i = 0; i < nm; i++) {
            c[i] = make_case(&rng, shapes[i][0], shapes[i][1], 0, set == 1 && i == 1);
            if (set == 1 && i == 2) c[i].budget = 5;
            one[i] = run_case(ctx, &c[i], 0);
        }
        br_buf *b[6][NB], *sched = t_buf_from(ctx, BR_F32, c[0].sched, BR_SIGN_SCHED);
        br_buf *flips = t_buf_poison(ctx, BR_U32, nm + 1, 0xdeadbeefu);
        br_sign_step_args a[6];
        for (size_t i = 0; i < nm; i++) {
            size_t n = c[i].rows * c[i].r, nv = c[i].factored ? c[i].rows + c[i].r : n;
            b[i][0] = t_buf_from(ctx, BR_F32, c[i].grad, n);
            b[i][1] = t_buf_from(ctx, BR_U32, c[i].bits, n / 32);
            b[i][2] = t_buf_from(ctx, BR_F32, c[i].lat, n);
            b[i][3] = t_buf_from(ctx, BR_F32, c[i].m1, n);
            b[i][4] = t_buf_from(ctx, BR_F32, c[i].v, nv);
            a[i] = (br_sign_step_args){.factored = c[i].factored,
                                       .grad = b[i][0],
                                       .bits = b[i][1],
                                       .latent = b[i][2],
                                       .m1 = b[i][3],
                                       .v = b[i][4],
                                       .sched = sched,
                                       .flips = flips,
                                       .slot = i + 1,
                                       .rows = c[i].rows,
                                       .r = c[i].r,
                                       .budget = c[i].budget,
                                       .beta1 = c[i].beta1,
                                       .beta2 = c[i].beta2,
                                       .eps = c[i].eps,
                                       .clamp = c[i].clamp,
                                       .hyst = c[i].hyst};
        }
        CHECK_OK(ctx, br_sign_steps(ctx, a, nm));
        /* on CUDA the fusion table runs directly flipping steps as update_n; the mix
         * of set 1 runs as its primitives, one step after another */
        if (strcmp(br_ctx_backend(ctx), "cuda") == 0)
            CHECK(!strncmp(br_ctx_last_kernel(ctx), "update_n", 8) == (set != 1),
                  "set %d: the last unit ran %s", set, br_ctx_last_kernel(ctx));
        uint32_t fl[7];
        CHECK_OK(ctx, br_buf_download(flips, 0, fl, nm + 1));
        CHECK(fl[0] == 0xdeadbeefu, "set %d: a step wrote flips slot 0", set);
        for (size_t i = 0; i < nm; i++) {
            size_t n = c[i].rows * c[i].r, nv = c[i].factored ? c[i].rows + c[i].r : n;
            float *lat = t_download_f32(ctx, b[i][2], n), *m1 = t_download_f32(ctx, b[i][3], n);
            float *v = t_download_f32(ctx, b[i][4], nv);
            uint32_t *bits = t_xmalloc(n / 32 * sizeof *bits);
            CHECK_OK(ctx, br_buf_download(b[i][1], 0, bits, n / 32));
            CHECK(!memcmp(lat, one[i].lat, n * 4) && !memcmp(m1, one[i].m1, n * 4) &&
                      !memcmp(v, one[i].v, nv * 4),
                  "set %d matrix %zu (%zu×%zu): moments or latents differ from its own step", set,
                  i, c[i].rows, c[i].r);
            CHECK(!memcmp(bits, one[i].bits, n / 32 * 4) && fl[i + 1] == one[i].flips,
                  "set %d matrix %zu: bits or flips (%u vs %u) differ from its own step", set, i,
                  fl[i + 1], one[i].flips);
            free(lat), free(m1), free(v), free(bits);
        }
        if (set == 0) { /* the checks of several matrices */
            a[1].slot = a[0].slot;
            CHECK_FAILS_MSG(ctx, BR_E_ARG, "slot", br_sign_steps(ctx, a, 2));
            a[1].slot = 2;
            a[1].m1 = a[0].latent;
            CHECK_FAILS_MSG(ctx, BR_E_ARG, "share", br_sign_steps(ctx, a, 2));
            a[1].m1 = b[1][3];
            a[1].grad = a[0].latent; /* read by one, written by the other */
            CHECK_FAILS(ctx, BR_E_ARG, br_sign_steps(ctx, a, 2));
            a[1].grad = a[0].grad; /* read by both: allowed */
            CHECK_OK(ctx, br_sign_steps(ctx, a, 2));
            CHECK_FAILS(ctx, BR_E_ARG, br_sign_steps(ctx, NULL, 2));
            CHECK_OK(ctx, br_sign_steps(ctx, NULL, 0));
        }
        for (size_t i = 0; i < nm; i++) {
            for (int k = 0; k < NB; k++)
                br_buf_free(b[i][k]);
            free_out(&one[i]);
            free_case(&c[i]);
        }
        br_buf_free(sched), br_buf_free(flips);
    }
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- sign_steps_adam */

/* One br_sign_steps_adam problem: up to six sign steps and the Adam over nadam
 * scales, on the host. */
enum { FA_MATS = 6 };
typedef struct fused_case {
    size_t nm, nadam;
    step_case c[FA_MATS];
    float *w, *g, *m1, *m2, *mask, *rho, sched[4];
    int exact_reads_w; /* exact steps: rowf and normsrc are views of Adam's w */
} fused_case;

/* Its buffers on a device: the steps' (one sign sched, one flips of nm + 1 slots,
 * slot 0 never written), Adam's moments, mask and floors as views of one
 * allocation (as the layer's optimizer has them). */
typedef struct fused_bufs {
    br_buf *grad[FA_MATS], *bits[FA_MATS], *lat[FA_MATS], *m1[FA_MATS], *v[FA_MATS];
    br_buf *rowf[FA_MATS], *colf[FA_MATS], *rowq[FA_MATS], *colq[FA_MATS], *ns[FA_MATS];
    br_buf *sched, *flips;
    br_buf *w, *g, *mem, *am1, *am2, *mask, *rho, *asched;
    br_sign_step_args a[FA_MATS];
    br_adam_hp hp;
} fused_bufs;

static fused_bufs fused_upload(br_ctx *ctx, const fused_case *f) {
    fused_bufs b;
    memset(&b, 0, sizeof b);
    size_t na = f->nadam, off = 0;
    b.sched = t_buf_from(ctx, BR_F32, f->c[0].sched, BR_SIGN_SCHED);
    b.flips = t_buf_poison(ctx, BR_U32, f->nm + 1, 0xdeadbeefu);
    b.w = t_buf_from(ctx, BR_F32, f->w, na);
    b.g = t_buf_from(ctx, BR_F32, f->g, na);
    b.mem = t_buf_poison(ctx, BR_F32, 4 * na, T_NAN32);
    CHECK_OK(ctx, br_buf_view(b.mem, 0, na, &b.am1));
    CHECK_OK(ctx, br_buf_view(b.mem, na, na, &b.am2));
    CHECK_OK(ctx, br_buf_view(b.mem, 2 * na, na, &b.mask));
    CHECK_OK(ctx, br_buf_view(b.mem, 3 * na, na, &b.rho));
    CHECK_OK(ctx, br_buf_upload(b.am1, 0, f->m1, na));
    CHECK_OK(ctx, br_buf_upload(b.am2, 0, f->m2, na));
    CHECK_OK(ctx, br_buf_upload(b.mask, 0, f->mask, na));
    CHECK_OK(ctx, br_buf_upload(b.rho, 0, f->rho, na));
    b.asched = t_buf_from(ctx, BR_F32, f->sched, 4);
    b.hp = (br_adam_hp){.lr = 1e-3f,
                        .beta1 = 0.9f,
                        .beta2 = 0.999f,
                        .eps = 1e-8f,
                        .step = 1,
                        .grad_mul = 1.0f,
                        .sched = b.asched};
    for (size_t i = 0; i < f->nm; i++) {
        const step_case *c = &f->c[i];
        size_t n = c->rows * c->r, nv = c->factored ? c->rows + c->r : n;
        b.grad[i] = t_buf_from(ctx, BR_F32, c->grad, n);
        b.bits[i] = t_buf_from(ctx, BR_U32, c->bits, n / 32);
        if (!c->exact) {
            b.lat[i] = t_buf_from(ctx, BR_F32, c->lat, n);
            b.m1[i] = t_buf_from(ctx, BR_F32, c->m1, n);
            b.v[i] = t_buf_from(ctx, BR_F32, c->v, nv);
        } else if (f->exact_reads_w) { /* as the layer's h: scales Adam then steps */
            CHECK_OK(ctx, br_buf_view(b.w, off, c->rows, &b.rowf[i]));
            CHECK_OK(ctx, br_buf_view(b.w, off + c->rows, c->nnorm, &b.ns[i]));
            off += c->rows + c->nnorm;
        } else {
            b.rowf[i] = t_buf_from(ctx, BR_F32, c->rowf, c->rows);
            b.ns[i] = t_buf_from(ctx, BR_F32, c->normsrc, c->nnorm);
        }
        if (c->exact) {
            b.colf[i] = t_buf_from(ctx, BR_F32, c->colf, c->r);
            b.rowq[i] = t_buf_from(ctx, BR_F32, c->rowq, c->rows);
            b.colq[i] = t_buf_from(ctx, BR_F32, c->colq, c->r);
        }
        br_sign_step_args *a = &b.a[i];
        *a = case_args(c);
        a->grad = b.grad[i], a->bits = b.bits[i], a->latent = b.lat[i], a->m1 = b.m1[i];
        a->v = b.v[i], a->sched = b.sched, a->flips = b.flips, a->slot = i + 1;
        a->rowf = b.rowf[i], a->rowq = b.rowq[i], a->colf = b.colf[i], a->colq = b.colq[i];
        a->normsrc = b.ns[i];
    }
    return b;
}

static void fused_free(fused_bufs *b) {
    for (size_t i = 0; i < FA_MATS; i++) {
        br_buf *x[] = {b->grad[i], b->bits[i], b->lat[i],  b->m1[i],   b->v[i],
                       b->rowf[i], b->colf[i], b->rowq[i], b->colq[i], b->ns[i]};
        for (size_t k = 0; k < sizeof x / sizeof x[0]; k++)
            br_buf_free(x[k]);
    }
    br_buf *y[] = {b->sched, b->flips, b->am1, b->am2, b->mask,
                   b->rho,   b->mem,   b->w,   b->g,   b->asched};
    for (size_t k = 0; k < sizeof y / sizeof y[0]; k++)
        br_buf_free(y[k]);
}

/* Host copies of every output of a run (f32 and u32 alike as 32-bit words). */
typedef struct fused_out {
    uint32_t *words;
    size_t count;
} fused_out;

static void out_append(br_ctx *ctx, fused_out *o, const br_buf *b, size_t n) {
    if (!b) return;
    o->words = realloc(o->words, (o->count + n) * sizeof *o->words);
    if (!o->words) exit(1);
    CHECK_OK(ctx, br_buf_download(b, 0, o->words + o->count, n));
    o->count += n;
}

/* Every output in a fixed order: per matrix latent, m1, v, bits; flips (all nm + 1
 * slots, slot 0 poison); Adam's w, m1, m2. */
static fused_out fused_download(br_ctx *ctx, const fused_case *f, const fused_bufs *b) {
    fused_out o = {0};
    for (size_t i = 0; i < f->nm; i++) {
        const step_case *c = &f->c[i];
        size_t n = c->rows * c->r, nv = c->factored ? c->rows + c->r : n;
        out_append(ctx, &o, b->lat[i], n);
        out_append(ctx, &o, b->m1[i], n);
        out_append(ctx, &o, b->v[i], nv);
        out_append(ctx, &o, b->bits[i], n / 32);
    }
    out_append(ctx, &o, b->flips, f->nm + 1);
    out_append(ctx, &o, b->w, f->nadam);
    out_append(ctx, &o, b->am1, f->nadam);
    out_append(ctx, &o, b->am2, f->nadam);
    return o;
}

static void fused_case_free(fused_case *f) {
    for (size_t i = 0; i < f->nm; i++)
        free_case(&f->c[i]);
    free(f->w), free(f->g), free(f->m1), free(f->m2), free(f->mask), free(f->rho);
}

/* Nonzero uniform values in ±[lo, lo + span). */
static float *nonzero(br_rng *rng, size_t n, float lo, float span) {
    float *v = t_rand(rng, n, span);
    for (size_t i = 0; i < n; i++)
        v[i] = v[i] < 0 ? v[i] - lo : v[i] + lo;
    return v;
}

/* br_sign_steps_adam equals br_sign_steps then br_adam_cat on copies of one state,
 * bit for bit in every output (latents, moments, bits, flips, Adam's w, m1, m2):
 * four directly flipping matrices (CUDA: the Adam blocks join the finish launch;
 * also recorded in a graph and replayed), a mix with a factored and a budgeted one
 * (one step after another, then Adam's own launch), six matrices (two ops, Adam
 * on the second), refused steps (the sign sched's skip, Adam's, both), exact steps
 * that read what Adam then writes (the layer's h), and no steps at all. */
static void sign_steps_adam_equal_apart(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(48);
    static const size_t shapes[FA_MATS][2] = {{96, 64}, {33, 32}, {200, 128},
                                              {64, 96}, {7, 32},  {130, 64}};
    enum { DIRECT, MIX, SIX, SIGN_SKIP, ADAM_SKIP, BOTH_SKIP, EXACT, NONE, NSETS };
    static const char *const names[NSETS] = {"direct",    "mix",       "six",   "sign skip",
                                             "adam skip", "both skip", "exact", "no steps"};
    for (int set = 0; set < NSETS; set++) {
        fused_case f;
        memset(&f, 0, sizeof f);
        f.nm = set == SIX ? 6 : set == NONE ? 0 : set == EXACT ? 2 : 4;
        f.nadam = 15003; /* ~P·(m+r+n) of a layer; not a multiple of the blocks */
        f.exact_reads_w = set == EXACT;
        for (size_t i = 0; i < f.nm; i++) {
            f.c[i] =
                make_case(&rng, shapes[i][0], shapes[i][1], set == EXACT, set == MIX && i == 1);
            if ((set == MIX && i == 2) || (set == EXACT && i == 1)) f.c[i].budget = 5;
            if (set == SIGN_SKIP || set == BOTH_SKIP) f.c[0].sched[3] = 1.0f;
        }
        if (!f.nm) f.c[0] = make_case(&rng, 8, 32, 0, 0); /* only its sched is used */
        size_t na = f.nadam;
        f.w = nonzero(&rng, na, 1e-3f, 1.0f);
        f.g = nonzero(&rng, na, 1e-4f, 0.1f);
        f.m1 = nonzero(&rng, na, 1e-5f, 0.01f);
        f.m2 = nonzero(&rng, na, 1e-6f, 1e-3f);
        f.mask = t_xmalloc(na * sizeof *f.mask);
        f.rho = t_xmalloc(na * sizeof *f.rho);
        for (size_t i = 0; i < na; i++) {
            f.m2[i] = fabsf(f.m2[i]);
            f.mask[i] = i % 11 == 4 ? 0.0f : 1.0f; /* a few frozen entries */
            f.rho[i] = i % 3 == 0 ? 0.0f : 0.05f;
        }
        /* exact: a step large enough that steps reading Adam's result would flip
         * other signs (the order is seen) */
        float as[4] = {set == EXACT ? 1.0f : 2e-3f, 3, 0.7f,
                       set == ADAM_SKIP || set == BOTH_SKIP ? 1.0f : 0.0f};
        memcpy(f.sched, as, sizeof as);

        fused_bufs apart = fused_upload(ctx, &f), fused = fused_upload(ctx, &f);
        CHECK_OK(ctx, br_sign_steps(ctx, apart.a, f.nm));
        CHECK_OK(ctx, br_adam_cat(ctx, apart.w, apart.g, apart.am1, apart.am2, apart.mask,
                                  apart.rho, na, &apart.hp));
        br_graph *g = NULL;
        if (set == DIRECT) CHECK_OK(ctx, br_graph_begin(ctx));
        CHECK_OK(ctx, br_sign_steps_adam(ctx, fused.a, f.nm, fused.w, fused.g, fused.am1, fused.am2,
                                         fused.mask, fused.rho, na, &fused.hp));
        if (set == DIRECT) {
            CHECK_OK(ctx, br_graph_end(ctx, &g));
            CHECK_OK(ctx, br_graph_launch(g));
        }
        fused_out x = fused_download(ctx, &f, &apart), y = fused_download(ctx, &f, &fused);
        CHECK(x.count == y.count && !memcmp(x.words, y.words, x.count * 4),
              "%s: %zu of %zu output words differ from the two ops apart (first at %zu)",
              names[set], t_bits_differ32((float *)x.words, (float *)y.words, x.count), x.count,
              t_first_diff32((float *)x.words, (float *)y.words, x.count));
        /* the flips: slot 0 never written; a refused sign step writes none */
        size_t at = x.count - 3 * na - (f.nm + 1);
        CHECK(y.words[at] == 0xdeadbeefu, "%s: flips slot 0 written", names[set]);
        for (size_t i = 1; i <= f.nm && (set == SIGN_SKIP || set == BOTH_SKIP); i++)
            CHECK(y.words[at + i] == 0xdeadbeefu, "%s: refused step %zu wrote flips", names[set],
                  i - 1);
        /* the Adam ran (or, refused, did not) */
        size_t changed = 0;
        for (size_t i = 0; i < na; i++)
            changed += memcmp(&y.words[at + f.nm + 1 + i], &f.w[i], 4) != 0;
        if (set == ADAM_SKIP || set == BOTH_SKIP)
            CHECK(changed == 0, "%s: %zu weights changed", names[set], changed);
        else
            CHECK(changed > na / 2, "%s: only %zu of %zu weights changed", names[set], changed, na);
        free(x.words), free(y.words);
        br_graph_free(g);
        fused_free(&apart), fused_free(&fused);
        if (!f.nm) free_case(&f.c[0]);
        fused_case_free(&f);
    }
    br_ctx_free(ctx);
}

/* br_sign_steps_adam's own checks: an Adam operand sharing memory with what a step
 * writes (or Adam's writes with a step's sched) fails, naming both; what the steps
 * only read, Adam may use or write; the two ops' own checks still apply. */
static void sign_steps_adam_bad_arguments(void) {
    br_ctx *ctx = t_ctx();
    br_rng rng = t_rng_for(49);
    fused_case f;
    memset(&f, 0, sizeof f);
    f.nm = 2, f.nadam = 500;
    for (size_t i = 0; i < 2; i++)
        f.c[i] = make_case(&rng, 64, 32, 0, 0);
    f.w = nonzero(&rng, 500, 1e-3f, 1), f.g = nonzero(&rng, 500, 1e-3f, 1);
    f.m1 = nonzero(&rng, 500, 1e-3f, 1), f.m2 = nonzero(&rng, 500, 1e-3f, 1);
    f.mask = nonzero(&rng, 500, 1, 0), f.rho = nonzero(&rng, 500, 1e-3f, 0);
    float as[4] = {1e-3f, 1, 1, 0};
    memcpy(f.sched, as, sizeof as);
    fused_bufs b = fused_upload(ctx, &f);
    br_sign_step_args *a = b.a;
    br_adam_hp *hp = &b.hp;
#define FUSED(w_, g_, m1_, m2_, mask_, rho_, n_)                                                   \
    br_sign_steps_adam(ctx, a, 2, w_, g_, m1_, m2_, mask_, rho_, n_, hp)
    CHECK_OK(ctx, FUSED(b.w, b.g, b.am1, b.am2, b.mask, b.rho, 500));
    /* the latent state of matrix 1 (64·32 entries) as Adam's operands */
    br_buf *lat_view = NULL, *m1_view = NULL, *sched_view = NULL;
    CHECK_OK(ctx, br_buf_view(b.lat[1], 100, 500, &lat_view));
    CHECK_OK(ctx, br_buf_view(b.m1[0], 0, 500, &m1_view));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "Adam's w overlaps matrix 1's latent",
                    FUSED(lat_view, b.g, b.am1, b.am2, b.mask, b.rho, 500));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "Adam's grad overlaps matrix 1's latent",
                    FUSED(b.w, lat_view, b.am1, b.am2, b.mask, b.rho, 500));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "Adam's m2 overlaps matrix 0's m1",
                    FUSED(b.w, b.g, b.am1, m1_view, b.mask, b.rho, 500));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "Adam's rel_floor overlaps matrix 1's latent",
                    FUSED(b.w, b.g, b.am1, b.am2, b.mask, lat_view, 500));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "Adam's mask overlaps matrix 0's v",
                    FUSED(b.w, b.g, b.am1, b.am2, b.v[0], b.rho, 500));
    /* Adam's sched inside a step's latent; a step's sched inside Adam's w */
    br_buf *lat_sched = NULL;
    CHECK_OK(ctx, br_buf_view(b.lat[0], 8, 4, &lat_sched));
    hp->sched = lat_sched;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "Adam's hp->sched overlaps matrix 0's latent",
                    FUSED(b.w, b.g, b.am1, b.am2, b.mask, b.rho, 500));
    hp->sched = b.asched;
    CHECK_OK(ctx, br_buf_view(b.w, 10, BR_SIGN_SCHED, &sched_view));
    a[1].sched = sched_view;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "Adam's w overlaps matrix 1's sched",
                    FUSED(b.w, b.g, b.am1, b.am2, b.mask, b.rho, 500));
    CHECK_OK(ctx, FUSED(b.g, b.w, b.am1, b.am2, b.mask, b.rho, 500)); /* read by both: allowed */
    a[1].sched = b.sched;
    /* what the steps only read (a gradient), Adam may read or write */
    CHECK_OK(ctx, FUSED(b.w, b.grad[0], b.am1, b.am2, b.mask, b.rho, 500));
    CHECK_OK(ctx, FUSED(b.grad[1], b.g, b.am1, b.am2, b.mask, b.rho, 500));
    /* the two ops' own checks, under this op's name */
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "br_sign_steps_adam: w, m1 and m2 overlap",
                    FUSED(b.w, b.g, b.am1, b.am1, b.mask, b.rho, 500));
    CHECK_FAILS(ctx, BR_E_SIZE, FUSED(b.w, b.g, b.am1, b.am2, b.mask, b.rho, 501 + 3 * 500));
    CHECK_FAILS(ctx, BR_E_ARG,
                br_sign_steps_adam(ctx, a, 2, b.w, b.g, b.am1, b.am2, b.mask, b.rho, 500, NULL));
    a[1].slot = a[0].slot;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "slot", FUSED(b.w, b.g, b.am1, b.am2, b.mask, b.rho, 500));
    a[1].slot = 2;
    CHECK_FAILS(ctx, BR_E_ARG,
                br_sign_steps_adam(ctx, NULL, 2, b.w, b.g, b.am1, b.am2, b.mask, b.rho, 500, hp));
    CHECK(br_sign_steps_adam(NULL, a, 2, b.w, b.g, b.am1, b.am2, b.mask, b.rho, 500, hp) ==
              BR_E_ARG,
          "NULL ctx accepted");
#undef FUSED
    br_buf_free(lat_view), br_buf_free(m1_view), br_buf_free(sched_view), br_buf_free(lat_sched);
    fused_free(&b);
    fused_case_free(&f);
    br_ctx_free(ctx);
}

static void sign_ops_bad_arguments(void) {
    br_ctx *ctx = t_ctx();
    br_buf *f = t_buf_poison(ctx, BR_F32, 64 * 32, 0), *u = t_buf_poison(ctx, BR_U32, 64, 0);
    br_buf *h = t_buf_poison(ctx, BR_F16, 128 * 64, 0), *small = t_buf_poison(ctx, BR_F32, 10, 0);
    br_sign_step_args a = {.grad = f,
                           .bits = u,
                           .latent = f,
                           .m1 = f,
                           .v = f,
                           .sched = small,
                           .flips = u,
                           .rows = 64,
                           .r = 32,
                           .budget = 10,
                           .beta1 = 0.9f,
                           .beta2 = 0.99f,
                           .eps = 1e-8f,
                           .clamp = 1,
                           .hyst = 0};
    CHECK_OK(ctx, br_sign_step(ctx, &a));
    /* a slot past flips (SIZE_MAX once wrapped the size check to 0: a write far away) */
    a.slot = SIZE_MAX;
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "slot", br_sign_step(ctx, &a));
    a.slot = 64;
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "slot", br_sign_step(ctx, &a));
    a.slot = 63;
    CHECK_OK(ctx, br_sign_step(ctx, &a));
    a.slot = 0;
    a.r = 48;
    CHECK_FAILS(ctx, BR_E_SHAPE, br_sign_step(ctx, &a));
    a.r = 32;
    a.rows = 0;
    CHECK_FAILS(ctx, BR_E_SHAPE, br_sign_step(ctx, &a));
    a.rows = 65;
    CHECK_FAILS(ctx, BR_E_SIZE, br_sign_step(ctx, &a));
    a.rows = 64;
    a.budget = 64 * 32 + 1;
    CHECK_FAILS(ctx, BR_E_ARG, br_sign_step(ctx, &a));
    a.budget = 1;
    a.grad = u;
    CHECK_FAILS(ctx, BR_E_DTYPE, br_sign_step(ctx, &a));
    a.grad = f;
    a.hyst = 1;
    CHECK_FAILS(ctx, BR_E_ARG, br_sign_step(ctx, &a));
    a.hyst = 0;
    a.exact = 1;
    CHECK_FAILS(ctx, BR_E_ARG, br_sign_step(ctx, &a)); /* rowf NULL */
    a.rowf = f, a.colf = f, a.curv2 = 0;
    CHECK_FAILS(ctx, BR_E_ARG, br_sign_step(ctx, &a));
    a.curv2 = 2;
    a.rows = (size_t)1 << 40;
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_sign_step(ctx, &a));
    CHECK_FAILS(ctx, BR_E_ARG, br_sign_step(ctx, NULL));
    a.rows = 64;
    br_ctx *other = t_cpu_ctx();
    br_buf *fo = NULL;
    CHECK(br_buf_new(other, BR_F32, 64 * 32, &fo) == BR_OK, "buffer on another context");
    a.grad = fo;
    CHECK_FAILS(ctx, BR_E_ARG, br_sign_step(ctx, &a));
    CHECK_FAILS(ctx, BR_E_ARG, br_cvt_pad(ctx, fo, NULL, h, 64, 32, 32, 1.0f));
    br_buf_free(fo);
    br_ctx_free(other);
    CHECK_FAILS(ctx, BR_E_SHAPE, br_cvt_pad(ctx, f, NULL, h, 64, 32, 16, 1.0f));
    CHECK_FAILS(ctx, BR_E_SIZE, br_cvt_pad(ctx, small, NULL, h, 64, 32, 32, 1.0f));
    CHECK_FAILS(ctx, BR_E_DTYPE, br_cvt_pad(ctx, f, NULL, f, 64, 32, 32, 1.0f));
    CHECK_FAILS(ctx, BR_E_NONFINITE, br_cvt_pad(ctx, f, NULL, h, 64, 32, 32, NAN));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_cvt_pad(ctx, f, NULL, h, 0, 32, 32, 1.0f));
    br_buf_free(f), br_buf_free(u), br_buf_free(h), br_buf_free(small);
    br_ctx_free(ctx);
}

T_RUN("sign", T_CASE(spec_sign_grads), T_CASE(sign_steps_equal_single_steps),
      T_CASE(spec_flip_exact), T_CASE(cvt_pad_matches_cvt), T_CASE(step_ctrl_formula),
      T_CASE(sign_step_latent), T_CASE(sign_step_exact), T_CASE(sign_step_large),
      T_CASE(sign_step_ties), T_CASE(sign_step_nan_factored_state), T_CASE(sign_ops_bad_arguments),
      T_CASE(sign_steps_adam_equal_apart), T_CASE(sign_steps_adam_bad_arguments))
