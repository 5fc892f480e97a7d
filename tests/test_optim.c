/* The layer optimizer: the latent sign step and Adam over the scales against host
 * references, exact-flip descent, the input gradient from the bits before the step,
 * deferred (accumulated) steps, refused non-finite steps, graphs, a short training
 * run, and bad configurations. */
#include "blr_ref.h"

/* Everything a step may change, downloaded for bitwise comparisons. */
typedef struct snap {
    size_t nparts;
    float *f[64];
    size_t nf[64];
    uint32_t *u[16];
    size_t nu[16], nparts_u;
} snap;

static void snap_add_f(br_ctx *ctx, snap *s, br_buf *b) {
    if (!b) return;
    s->nf[s->nparts] = br_buf_count(b);
    s->f[s->nparts++] = t_download_f32(ctx, b, br_buf_count(b));
}

static snap take_snap(br_ctx *ctx, br_blr *l, br_blr_opt *o) {
    snap s;
    memset(&s, 0, sizeof s);
    size_t P;
    br_blr_shape(l, NULL, NULL, NULL, &P);
    for (size_t p = 0; p < P; p++) {
        for (int part = BR_BLR_H; part <= BR_BLR_G; part++)
            snap_add_f(ctx, &s, br_blr_buf(l, p, part));
        for (int which = 0; which < 2; which++)
            for (int part = BR_OPT_LATENT; part <= BR_OPT_V; part++)
                snap_add_f(ctx, &s, br_blr_opt_buf(o, p, which, (br_opt_part)part));
        snap_add_f(ctx, &s, br_blr_opt_buf(o, p, 0, BR_OPT_ADAM_M1));
        snap_add_f(ctx, &s, br_blr_opt_buf(o, p, 0, BR_OPT_ADAM_M2));
        for (int part = BR_BLR_BITS_U; part <= BR_BLR_BITS_V; part++) {
            br_buf *b = br_blr_buf(l, p, part);
            s.nu[s.nparts_u] = br_buf_count(b);
            s.u[s.nparts_u] = t_xmalloc(br_buf_count(b) * 4);
            CHECK_OK(ctx, br_buf_download(b, 0, s.u[s.nparts_u], br_buf_count(b)));
            s.nparts_u++;
        }
    }
    return s;
}

/* Number of parts that differ (bitwise). */
static size_t snap_diff(const snap *a, const snap *b) {
    size_t bad = 0;
    for (size_t i = 0; i < a->nparts; i++)
        bad += t_bits_differ32(a->f[i], b->f[i], a->nf[i]) != 0;
    for (size_t i = 0; i < a->nparts_u; i++)
        bad += memcmp(a->u[i], b->u[i], a->nu[i] * 4) != 0;
    return bad;
}

static void snap_free(snap *s) {
    for (size_t i = 0; i < s->nparts; i++)
        free(s->f[i]);
    for (size_t i = 0; i < s->nparts_u; i++)
        free(s->u[i]);
}

/* A layer with data and one forward + backward done. */
typedef struct rig {
    br_ctx *ctx;
    ref_layer L;
    br_blr *l;
    br_blr_scratch *s;
    size_t ntok;
    float *x, *dy;
    br_buf *bx, *bdy, *by, *bdx;
} rig;

static rig make_rig(br_ctx *ctx, uint64_t stream, size_t m, size_t n, size_t r, size_t P,
                    size_t ntok, unsigned flags) {
    rig g;
    memset(&g, 0, sizeof g);
    g.ctx = ctx;
    br_rng rng = t_rng_for(stream);
    g.L = ref_random(&rng, m, n, r, P, 0);
    g.l = ref_upload(ctx, &g.L, flags);
    CHECK_OK(ctx, br_blr_scratch_new(g.l, ntok, NULL, &g.s));
    g.ntok = ntok;
    g.x = t_rand(&rng, ntok * n, 2.0f);
    g.dy = t_rand(&rng, ntok * m, 1e-3f);
    g.bx = t_buf_from(ctx, BR_F32, g.x, ntok * n);
    g.bdy = t_buf_from(ctx, BR_F32, g.dy, ntok * m);
    g.by = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32);
    g.bdx = t_buf_poison(ctx, BR_F32, ntok * n, T_NAN32);
    return g;
}

static void rig_pass(rig *g, int accumulate) {
    CHECK_OK(g->ctx, fwd_plain(g->l, g->s, g->bx, g->by, g->ntok));
    CHECK_OK(g->ctx,
             br_blr_backward(g->l, g->s, g->bx, g->bdy, g->bdx, g->ntok, 1024.0f, accumulate));
}

static void free_rig(rig *g) {
    br_buf_free(g->bx), br_buf_free(g->bdy), br_buf_free(g->by), br_buf_free(g->bdx);
    free(g->x), free(g->dy);
    br_blr_scratch_free(g->s);
    br_blr_free(g->l);
    ref_free(&g->L);
}

/* ---------------------------------------------------------------- reference step */

/* One latent Adam step on the host in double: latents, and the flips predicted. */
static void host_latent_step(const br_opt_cfg *c, size_t rows, size_t r, const float *G,
                             const float *lat0, const uint32_t *bits, double gm, int t, double *lat,
                             int *flip) {
    double bc1 = 1 - pow(c->sign_beta1, t), bc2 = 1 - pow(c->sign_beta2, t);
    double *vr = t_xmalloc(rows * sizeof *vr), *vc = t_xmalloc(r * sizeof *vc), mean = 0;
    for (size_t i = 0; i < rows; i++) {
        double s = 0;
        for (size_t k = 0; k < r; k++)
            s += pow(G[i * r + k] * gm, 2);
        vr[i] = (1 - (double)c->sign_beta2) * s / (double)r;
        mean += vr[i] / (double)rows;
    }
    for (size_t k = 0; k < r; k++) {
        double s = 0;
        for (size_t i = 0; i < rows; i++)
            s += pow(G[i * r + k] * gm, 2);
        vc[k] = (1 - (double)c->sign_beta2) * s / (double)rows;
    }
    for (size_t i = 0; i < rows; i++)
        for (size_t k = 0; k < r; k++) {
            size_t e = i * r + k;
            double g = G[e] * gm, m = (1 - (double)c->sign_beta1) * g;
            double v =
                c->sign_factored ? vr[i] * vc[k] / mean : (1 - (double)c->sign_beta2) * g * g;
            double l = lat0[e] - c->sign_lr * (m / bc1) / (sqrt(v / bc2) + c->sign_eps);
            l = fmin(fmax(l, -c->sign_clamp), c->sign_clamp);
            lat[e] = l;
            int bit = (bits[e / 32] >> (e % 32)) & 1u;
            flip[e] = (l > 0) != bit && fabs(l) > c->sign_hyst;
        }
    free(vr), free(vc);
}

/* The first Adam step of the scales on the host: w − lr·ĝ/(|ĝ|+eps)·max(|w|, ρ). */
static double host_adam_first(const br_opt_cfg *c, double w, double g, int kind) {
    if (c->freeze[kind]) return w;
    double m = (1 - (double)c->beta1) * g, v = (1 - (double)c->beta2) * g * g;
    double st = c->lr * (m / (1 - c->beta1)) / (sqrt(v / (1 - c->beta2)) + c->eps);
    return w - (c->rel_floor[kind] > 0 ? st * fmax(fabs(w), c->rel_floor[kind]) : st);
}

/* The optimizer's first step against the host: latents, flips (every matrix),
 * flip counts, Adam on h, ℓ, g with freezing, relative floors and clipping. */
static void first_step_vs_host(int factored, float budget, float max_norm) {
    br_ctx *ctx = t_ctx();
    size_t m = 67, n = 45, r = 64, P = 2, ntok = 50;
    rig g = make_rig(ctx, 30 + (uint64_t)factored, m, n, r, P, ntok, BR_BLR_SIGN_GRADS);
    br_opt_cfg c = br_opt_defaults();
    c.sign_factored = factored;
    c.sign_lr = 0.05f;
    c.sign_tau = 0.02f;
    c.sign_hyst = 0.01f;
    c.flip_budget = budget;
    c.freeze[1] = 1;
    c.rel_floor[0] = 0.05f;
    c.max_grad_norm = max_norm;
    br_blr_opt *o = NULL;
    CHECK_OK(ctx, br_blr_opt_new(g.l, &c, &o));
    rig_pass(&g, 0);
    /* host copies before the step */
    size_t lens[3] = {m, r, n};
    float *w0[2][3], *gr[2][3], *G[2][2], *lat0[2][2];
    uint32_t *bits0[2][2];
    double clip = 0;
    for (size_t p = 0; p < P; p++) {
        for (int k = 0; k < 3; k++) {
            w0[p][k] = ref_part(ctx, g.l, p, (br_blr_part)(BR_BLR_H + k), lens[k]);
            gr[p][k] = ref_part(ctx, g.l, p, (br_blr_part)(BR_BLR_DH + k), lens[k]);
            for (size_t i = 0; i < lens[k]; i++)
                clip += (double)gr[p][k][i] * gr[p][k][i];
        }
        for (int which = 0; which < 2; which++) {
            size_t rows = which ? n : m;
            G[p][which] = ref_part(ctx, g.l, p, which ? BR_BLR_GV : BR_BLR_GU, rows * r);
            lat0[p][which] =
                t_download_f32(ctx, br_blr_opt_buf(o, p, which, BR_OPT_LATENT), rows * r);
            bits0[p][which] = t_xmalloc(rows * r / 32 * 4);
            CHECK_OK(ctx, br_buf_download(br_blr_buf(g.l, p, which ? BR_BLR_BITS_V : BR_BLR_BITS_U),
                                          0, bits0[p][which], rows * r / 32));
        }
    }
    double norm = sqrt(clip), gm = max_norm > 0 && norm > max_norm ? max_norm / norm : 1.0;
    CHECK_OK(ctx, br_blr_opt_step(o));
    br_step_info info;
    CHECK_OK(ctx, br_blr_opt_info(o, &info));
    CHECK(!info.refused && info.steps == 1, "info: refused %d steps %llu", info.refused,
          (unsigned long long)info.steps);
    CHECK(fabs(info.grad_norm - norm) <= 1e-5 * norm, "grad norm %g vs %g", info.grad_norm, norm);
    CHECK(fabs(info.grad_mul - gm) <= 1e-6 * gm, "grad_mul %g vs %g", info.grad_mul, gm);
    CHECK(info.nparams == 5 * P && info.nmats == 2 * P, "info sizes");
    for (size_t p = 0; p < P; p++) {
        /* scales */
        for (int k = 0; k < 3; k++) {
            float *w1 = ref_part(ctx, g.l, p, (br_blr_part)(BR_BLR_H + k), lens[k]);
            double worst = 0, gsq = 0;
            for (size_t i = 0; i < lens[k]; i++) {
                double want = host_adam_first(&c, w0[p][k][i], gr[p][k][i] * gm, k);
                double err = fabs(w1[i] - want) / fmax(fabs(want), 1e-3);
                if (err > worst) worst = err;
                gsq += (double)gr[p][k][i] * gr[p][k][i];
            }
            CHECK(worst < 1e-5, "path %zu scale %d: Adam off by %.3g relative", p, k, worst);
            CHECK(fabs(info.norms[5 * p + (size_t)k] - sqrt(gsq)) <= 1e-5 * sqrt(gsq),
                  "norm of scale %d: %g vs %g", k, info.norms[5 * p + (size_t)k], sqrt(gsq));
            if (k == 1) CHECK(!memcmp(w1, w0[p][k], lens[k] * 4), "frozen ℓ changed");
            free(w1);
        }
        /* signs */
        for (int which = 0; which < 2; which++) {
            size_t rows = which ? n : m, nn = rows * r;
            double *lat = t_xmalloc(nn * sizeof *lat);
            int *flip = t_xmalloc(nn * sizeof *flip);
            host_latent_step(&c, rows, r, G[p][which], lat0[p][which], bits0[p][which], gm, 1, lat,
                             flip);
            float *lat1 = t_download_f32(ctx, br_blr_opt_buf(o, p, which, BR_OPT_LATENT), nn);
            uint32_t *bits1 = t_xmalloc(nn / 32 * 4);
            CHECK_OK(ctx, br_buf_download(br_blr_buf(g.l, p, which ? BR_BLR_BITS_V : BR_BLR_BITS_U),
                                          0, bits1, nn / 32));
            double worst = 0;
            size_t predicted = 0, changed = 0, wrong = 0, unpredicted = 0;
            for (size_t e = 0; e < nn; e++) {
                double err = fabs(lat1[e] - lat[e]);
                if (err > worst) worst = err;
                int ch = ((bits0[p][which][e / 32] ^ bits1[e / 32]) >> (e % 32)) & 1u;
                predicted += flip[e];
                changed += ch;
                int near = fabs(fabs(lat[e]) - c.sign_hyst) < 1e-6 || fabs(lat[e]) < 1e-6;
                if (ch && !flip[e] && !near) unpredicted++;
                if (budget == 0 && ch != flip[e] && !near) wrong++;
            }
            size_t budget_n = budget > 0 ? (size_t)floor(budget * (double)nn) : nn;
            if (!budget_n) budget_n = 1;
            CHECK(worst < 1e-6, "path %zu %s: latent off by %.3g", p, which ? "V" : "U", worst);
            CHECK(changed == info.flips[2 * p + (size_t)which],
                  "path %zu %s: %zu bits changed, info says %u", p, which ? "V" : "U", changed,
                  info.flips[2 * p + (size_t)which]);
            CHECK(unpredicted == 0 && wrong == 0, "path %zu %s: %zu unpredicted, %zu wrong flips",
                  p, which ? "V" : "U", unpredicted, wrong);
            CHECK(changed == (predicted < budget_n ? predicted : budget_n),
                  "path %zu %s: %zu flips, %zu predicted, budget %zu", p, which ? "V" : "U",
                  changed, predicted, budget_n);
            CHECK(predicted > 0, "path %zu %s: the step predicts no flip (test too weak)", p,
                  which ? "V" : "U");
            free(lat), free(flip), free(lat1), free(bits1);
        }
    }
    for (size_t p = 0; p < P; p++) {
        for (int k = 0; k < 3; k++)
            free(w0[p][k]), free(gr[p][k]);
        for (int w = 0; w < 2; w++)
            free(G[p][w]), free(lat0[p][w]), free(bits0[p][w]);
    }
    br_blr_opt_free(o);
    free_rig(&g);
    br_ctx_free(ctx);
}

static void latent_full_step(void) { first_step_vs_host(0, 0, 0); }
static void latent_factored_step(void) { first_step_vs_host(1, 0, 1e-4f); }
static void latent_budgeted_step(void) { first_step_vs_host(0, 0.01f, 0); }

/* The input gradient of a step comes from the bits before the step's flips, also
 * when forward, backward and step are one recorded graph; the next forward uses
 * the new bits. */
static void input_grad_before_flips(void) {
    br_ctx *ctx = t_ctx();
    size_t m = 64, n = 96, r = 32, P = 2, ntok = 40;
    rig g = make_rig(ctx, 32, m, n, r, P, ntok, BR_BLR_SIGN_GRADS);
    br_opt_cfg c = br_opt_defaults();
    c.sign_tau = 1e-3f;
    c.sign_lr = 0.1f;
    br_blr_opt *o = NULL;
    CHECK_OK(ctx, br_blr_opt_new(g.l, &c, &o));
    br_graph *gr = NULL;
    CHECK_OK(ctx, br_graph_begin(ctx));
    rig_pass(&g, 0);
    CHECK_OK(ctx, br_blr_opt_step(o));
    CHECK_OK(ctx, br_graph_end(ctx, &gr));
    CHECK_OK(ctx, br_graph_launch(gr));
    br_step_info info;
    CHECK_OK(ctx, br_blr_opt_info(o, &info));
    uint32_t total = 0;
    for (size_t i = 0; i < info.nmats; i++)
        total += info.flips[i];
    CHECK(total > 0, "no flips: the test cannot tell old bits from new");
    ref_out old;
    ref_run(&g.L, g.x, g.dy, ntok, &old);
    float *dx = t_download_f32(ctx, g.bdx, ntok * n);
    double e = t_rel_err(dx, old.dx, ntok * n);
    CHECK(e < 3e-3, "dx vs the old bits: rel err %.3g", e);
    /* the new bits and scales give the next forward */
    ref_layer now = ref_random(&(br_rng){{1, 2, 3, 4}}, m, n, r, P, 0);
    for (size_t p = 0; p < P; p++) {
        CHECK_OK(ctx, br_blr_get_path(g.l, p, now.p[p].bu, now.p[p].bv, now.p[p].h, now.p[p].l,
                                      now.p[p].g));
        for (size_t e2 = 0; e2 < m * r; e2++)
            now.p[p].su[e2] = (now.p[p].bu[e2 / 32] >> (e2 % 32)) & 1u ? 1.0f : -1.0f;
        for (size_t e2 = 0; e2 < n * r; e2++)
            now.p[p].sv[e2] = (now.p[p].bv[e2 / 32] >> (e2 % 32)) & 1u ? 1.0f : -1.0f;
    }
    ref_out next, was;
    ref_run(&now, g.x, g.dy, ntok, &next);
    CHECK(t_rel_err(dx, next.dx, ntok * n) > 3e-2 || total < 3,
          "dx matches the new bits as well (%u flips): the test cannot tell", total);
    CHECK_OK(ctx, fwd_plain(g.l, g.s, g.bx, g.by, ntok));
    float *y = t_download_f32(ctx, g.by, ntok * m);
    e = t_rel_err(y, next.y, ntok * m);
    CHECK(e < 3e-3, "next forward vs the new bits: rel err %.3g", e);
    ref_run(&g.L, g.x, NULL, ntok, &was);
    CHECK(t_rel_err(y, was.y, ntok * m) > e, "next forward does not follow the flips");
    ref_out_free(&old), ref_out_free(&next), ref_out_free(&was);
    ref_free(&now);
    free(dx), free(y);
    br_graph_free(gr);
    br_blr_opt_free(o);
    free_rig(&g);
    br_ctx_free(ctx);
}

/* Deferred: k backwards accumulate into exactly fl(fl(G1 + G2) + G3) (and the same
 * for dh, dℓ, dg); one step on that equals one step of an identical layer whose
 * gradients are set to the sum, bit for bit. */
static void deferred_equals_summed(void) {
    br_ctx *ctx = t_ctx();
    size_t m = 50, n = 64, r = 32, P = 2, ntok = 30, k = 3;
    rig a = make_rig(ctx, 33, m, n, r, P, ntok, BR_BLR_SIGN_GRADS);
    rig b = make_rig(ctx, 33, m, n, r, P, ntok, BR_BLR_SIGN_GRADS);
    br_opt_cfg c = br_opt_defaults();
    c.sign_tau = 1e-3f;
    c.sign_factored = 1;
    br_blr_opt *oa = NULL, *ob = NULL;
    CHECK_OK(ctx, br_blr_opt_new(a.l, &c, &oa));
    CHECK_OK(ctx, br_blr_opt_new(b.l, &c, &ob));
    br_rng rng = t_rng_for(34);
    size_t lens[5] = {m, r, n, m * r, n * r};
    br_blr_part parts[5] = {BR_BLR_DH, BR_BLR_DL, BR_BLR_DG, BR_BLR_GU, BR_BLR_GV};
    float *sum[2][5] = {{0}};
    for (size_t mb = 0; mb < k; mb++) {
        float *x = t_rand(&rng, ntok * n, 2.0f), *dy = t_rand(&rng, ntok * m, 1e-3f);
        CHECK_OK(ctx, br_buf_upload(a.bx, 0, x, ntok * n));
        CHECK_OK(ctx, br_buf_upload(a.bdy, 0, dy, ntok * m));
        CHECK_OK(ctx, br_buf_upload(b.bx, 0, x, ntok * n));
        CHECK_OK(ctx, br_buf_upload(b.bdy, 0, dy, ntok * m));
        rig_pass(&a, mb > 0); /* accumulates */
        rig_pass(&b, 0);      /* this micro-batch alone */
        for (size_t p = 0; p < P; p++)
            for (int i = 0; i < 5; i++) {
                float *v = ref_part(ctx, b.l, p, parts[i], lens[i]);
                if (!sum[p][i]) {
                    sum[p][i] = v;
                    continue;
                }
                for (size_t e = 0; e < lens[i]; e++)
                    sum[p][i][e] = sum[p][i][e] + v[e];
                free(v);
            }
        free(x), free(dy);
    }
    for (size_t p = 0; p < P; p++)
        for (int i = 0; i < 5; i++) {
            float *v = ref_part(ctx, a.l, p, parts[i], lens[i]);
            size_t bad = t_bits_differ32(v, sum[p][i], lens[i]);
            CHECK(bad == 0, "path %zu gradient %d: %zu of %zu differ from the sum", p, i, bad,
                  lens[i]);
            CHECK_OK(ctx, br_buf_upload(br_blr_buf(b.l, p, parts[i]), 0, sum[p][i], lens[i]));
            free(v), free(sum[p][i]);
        }
    CHECK_OK(ctx, br_blr_opt_step(oa));
    CHECK_OK(ctx, br_blr_opt_step(ob));
    snap sa = take_snap(ctx, a.l, oa), sb = take_snap(ctx, b.l, ob);
    CHECK(snap_diff(&sa, &sb) == 0, "deferred step differs from the step on the sum in %zu parts",
          snap_diff(&sa, &sb));
    br_step_info info;
    CHECK_OK(ctx, br_blr_opt_info(oa, &info));
    CHECK(info.flips[0] + info.flips[1] + info.flips[2] + info.flips[3] > 0, "no flips");
    snap_free(&sa), snap_free(&sb);
    br_blr_opt_free(oa), br_blr_opt_free(ob);
    free_rig(&a), free_rig(&b);
    br_ctx_free(ctx);
}

/* A gradient that is not finite refuses the step: BR_E_NONFINITE with a message,
 * and bits, latents, moments, scales and the step count all unchanged — run
 * directly and inside a replayed graph (where the next good replay steps again). */
static void nonfinite_refused(void) {
    br_ctx *ctx = t_ctx();
    for (int mode = BR_SIGN_LATENT; mode <= BR_SIGN_EXACT; mode++) {
        size_t m = 40, n = 33, r = 32, P = 2, ntok = 20;
        rig g = make_rig(ctx, 35, m, n, r, P, ntok, BR_BLR_CURVATURE);
        br_opt_cfg c = br_opt_defaults();
        c.sign_mode = (br_sign_mode)mode;
        c.sign_tau = 1e-3f;
        c.flip_budget = 0.01f;
        br_blr_opt *o = NULL;
        CHECK_OK(ctx, br_blr_opt_new(g.l, &c, &o));
        rig_pass(&g, 0);
        CHECK_OK(ctx, br_blr_opt_step(o)); /* moments are no longer zero */
        float bad_vals[3] = {NAN, INFINITY, -INFINITY};
        br_blr_part where[3] = {BR_BLR_DG, BR_BLR_GV, BR_BLR_DL};
        for (int v = 0; v < 3; v++) {
            rig_pass(&g, 0);
            snap before = take_snap(ctx, g.l, o);
            CHECK_OK(ctx,
                     br_buf_upload(br_blr_buf(g.l, (size_t)v % P, where[v]), 5, &bad_vals[v], 1));
            CHECK_FAILS(ctx, BR_E_NONFINITE, br_blr_opt_step(o));
            snap after = take_snap(ctx, g.l, o);
            CHECK(snap_diff(&before, &after) == 0, "mode %d: a refused step changed %zu parts",
                  mode, snap_diff(&before, &after));
            br_step_info info;
            CHECK_OK(ctx, br_blr_opt_info(o, &info));
            CHECK(info.refused == 1 && info.steps == 1, "mode %d: refused %d, steps %llu", mode,
                  info.refused, (unsigned long long)info.steps);
            snap_free(&before), snap_free(&after);
        }
        /* in a graph: a NaN dy refuses the replay, a finite one steps */
        br_graph *gr = NULL;
        CHECK_OK(ctx, br_graph_begin(ctx));
        rig_pass(&g, 0);
        CHECK(br_blr_opt_step(o) == BR_OK, "recording a step returns BR_OK");
        CHECK_OK(ctx, br_graph_end(ctx, &gr));
        float nan = NAN;
        CHECK_OK(ctx, br_buf_upload(g.bdy, 7, &nan, 1));
        snap before = take_snap(ctx, g.l, o);
        CHECK_OK(ctx, br_graph_launch(gr));
        snap after = take_snap(ctx, g.l, o);
        CHECK(snap_diff(&before, &after) == 0, "mode %d: a refused replay changed %zu parts", mode,
              snap_diff(&before, &after));
        br_step_info info;
        CHECK_OK(ctx, br_blr_opt_info(o, &info));
        CHECK(info.refused == 1 && info.steps == 1, "graph: refused %d steps %llu", info.refused,
              (unsigned long long)info.steps);
        CHECK_OK(ctx, br_buf_upload(g.bdy, 7, &g.dy[7], 1));
        CHECK_OK(ctx, br_graph_launch(gr));
        CHECK_OK(ctx, br_blr_opt_info(o, &info));
        CHECK(info.refused == 0 && info.steps == 2,
              "graph: after a good replay refused %d steps %llu", info.refused,
              (unsigned long long)info.steps);
        snap_free(&before), snap_free(&after);
        br_graph_free(gr);
        br_blr_opt_free(o);
        free_rig(&g);
    }
    br_ctx_free(ctx);
}

/* Exact-flip mode: with one flip per matrix and frozen scales, the flipped entry is
 * the one of most negative predicted ΔL (host, from f64 G and curvature), and the
 * loss falls. */
static void exact_flip_picks_best(void) {
    br_ctx *ctx = t_ctx();
    size_t m = 48, n = 40, r = 32, P = 1, ntok = 64;
    rig g = make_rig(ctx, 36, m, n, r, P, ntok, BR_BLR_CURVATURE);
    br_rng rng = t_rng_for(37);
    float *ystar = t_rand(&rng, ntok * m, 1.0f);
    CHECK_OK(ctx, fwd_plain(g.l, g.s, g.bx, g.by, ntok));
    float *y = t_download_f32(ctx, g.by, ntok * m);
    double l0 = 0;
    for (size_t i = 0; i < ntok * m; i++) {
        g.dy[i] = y[i] - ystar[i];
        l0 += 0.5 * (double)g.dy[i] * g.dy[i];
    }
    CHECK_OK(ctx, br_buf_upload(g.bdy, 0, g.dy, ntok * m));
    CHECK_OK(ctx, br_blr_backward(g.l, g.s, g.bx, g.bdy, NULL, ntok, 64.0f, 0));
    br_opt_cfg c = br_opt_defaults();
    c.sign_mode = BR_SIGN_EXACT;
    c.flip_budget = 1e-6f; /* one flip per matrix */
    c.freeze[0] = c.freeze[1] = c.freeze[2] = 1;
    br_blr_opt *o = NULL;
    CHECK_OK(ctx, br_blr_opt_new(g.l, &c, &o));
    CHECK_OK(ctx, br_blr_opt_step(o));
    ref_out ref;
    ref_run(&g.L, g.x, g.dy, ntok, &ref);
    const ref_path *q = &g.L.p[0];
    double sh2 = 0;
    for (size_t i = 0; i < m; i++)
        sh2 += (double)q->h[i] * q->h[i];
    for (int which = 0; which < 2; which++) {
        size_t rows = which ? n : m, best = 0;
        double best_dl = INFINITY, second = INFINITY;
        double *dl = t_xmalloc(rows * r * sizeof *dl);
        for (size_t i = 0; i < rows; i++)
            for (size_t k = 0; k < r; k++) {
                size_t e = i * r + k;
                double quad, G, s;
                if (!which) {
                    double sa = 0;
                    for (size_t t = 0; t < ntok; t++)
                        sa += ref.a[t * r + k] * ref.a[t * r + k];
                    quad = 2 * (double)q->h[i] * q->h[i] * q->l[k] * q->l[k] * sa;
                    G = ref.gu[e];
                    s = q->su[e];
                } else {
                    double sx = 0;
                    for (size_t t = 0; t < ntok; t++)
                        sx += (double)g.x[t * n + i] * g.x[t * n + i];
                    quad = 2 * (double)q->g[i] * q->g[i] * q->l[k] * q->l[k] * sx * sh2;
                    G = ref.gv[e];
                    s = q->sv[e];
                }
                dl[e] = quad - 2 * s * G;
                if (dl[e] < best_dl)
                    second = best_dl, best_dl = dl[e], best = e;
                else if (dl[e] < second)
                    second = dl[e];
            }
        uint32_t *bits = t_xmalloc(rows * r / 32 * 4);
        CHECK_OK(ctx, br_buf_download(br_blr_buf(g.l, 0, which ? BR_BLR_BITS_V : BR_BLR_BITS_U), 0,
                                      bits, rows * r / 32));
        const uint32_t *b0 = which ? q->bv : q->bu;
        size_t flipped = 0, at = 0;
        for (size_t e = 0; e < rows * r; e++)
            if (((bits[e / 32] ^ b0[e / 32]) >> (e % 32)) & 1u) flipped++, at = e;
        CHECK(best_dl < 0, "%s: no entry predicts a gain", which ? "V" : "U");
        CHECK(flipped == 1, "%s: %zu flips, want 1", which ? "V" : "U", flipped);
        int clear = (second - best_dl) > 1e-3 * fabs(best_dl);
        CHECK(!clear || at == best, "%s: flipped %zu (ΔL %.4g), best %zu (ΔL %.4g)",
              which ? "V" : "U", at, dl[at], best, best_dl);
        free(dl), free(bits);
    }
    CHECK_OK(ctx, fwd_plain(g.l, g.s, g.bx, g.by, ntok));
    free(y);
    y = t_download_f32(ctx, g.by, ntok * m);
    double l1 = 0;
    for (size_t i = 0; i < ntok * m; i++)
        l1 += 0.5 * ((double)y[i] - ystar[i]) * ((double)y[i] - ystar[i]);
    CHECK(l1 < l0, "loss %.6g → %.6g after the greedy flips", l0, l1);
    ref_out_free(&ref);
    free(ystar), free(y);
    br_blr_opt_free(o);
    free_rig(&g);
    br_ctx_free(ctx);
}

/* A short training run on a random dense target lowers the loss a lot, with each
 * sign mode; the steps replay from one recorded graph with a learning-rate schedule
 * set between replays. */
static void training_reduces_loss(void) {
    br_ctx *ctx = t_ctx();
    size_t m = 64, n = 96, r = 32, P = 2, ntok = 128, steps = 60;
    br_rng rng = t_rng_for(38);
    float *wt = t_rand(&rng, m * n, 0.1f), *x = t_rand(&rng, ntok * n, 1.0f);
    float *ystar = t_xmalloc(ntok * m * sizeof *ystar);
    for (size_t t = 0; t < ntok; t++)
        for (size_t i = 0; i < m; i++) {
            double s = 0;
            for (size_t j = 0; j < n; j++)
                s += (double)x[t * n + j] * wt[i * n + j];
            ystar[t * m + i] = (float)s;
        }
    br_buf *bx = t_buf_from(ctx, BR_F32, x, ntok * n),
           *bys = t_buf_from(ctx, BR_F32, ystar, ntok * m);
    br_buf *by = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32),
           *bdy = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32);
    /* dy = (y − y*)/N through br_scale_acc2 with constant columns */
    float *pos = t_xmalloc(m * 4), *neg = t_xmalloc(m * 4);
    float inv = 1.0f / (float)(ntok * m);
    for (size_t i = 0; i < m; i++)
        pos[i] = inv, neg[i] = -inv;
    br_buf *bpos = t_buf_from(ctx, BR_F32, pos, m), *bneg = t_buf_from(ctx, BR_F32, neg, m);
    for (int mode = BR_SIGN_OFF; mode <= BR_SIGN_EXACT; mode++) {
        br_rng lr = t_rng_for(39);
        ref_layer L = ref_random(&lr, m, n, r, P, 0);
        for (size_t p = 0; p < P; p++) {
            for (size_t i = 0; i < m; i++)
                L.p[p].h[i] = 0.01f;
            for (size_t j = 0; j < n; j++)
                L.p[p].g[j] = 0.1f;
        }
        br_blr *l = ref_upload(ctx, &L, BR_BLR_CURVATURE);
        br_blr_scratch *s = NULL;
        CHECK_OK(ctx, br_blr_scratch_new(l, ntok, NULL, &s));
        br_opt_cfg c = br_opt_defaults();
        c.sign_mode = (br_sign_mode)mode;
        c.lr = 0.02f;
        c.sign_lr = 0.02f;
        c.sign_tau = 0.01f;
        c.flip_budget = mode == BR_SIGN_EXACT ? 0.01f : 0.0f;
        c.curvature = inv;
        br_blr_opt *o = NULL;
        CHECK_OK(ctx, br_blr_opt_new(l, &c, &o));
        br_graph *gr = NULL;
        CHECK_OK(ctx, br_graph_begin(ctx));
        CHECK_OK(ctx, fwd_plain(l, s, bx, by, ntok));
        CHECK_OK(ctx, br_scale_acc2(ctx, by, bpos, bys, bneg, bdy, ntok, m));
        CHECK_OK(ctx, br_blr_backward(l, s, bx, bdy, NULL, ntok, 65536.0f, 0));
        CHECK_OK(ctx, br_blr_opt_step(o));
        CHECK_OK(ctx, br_graph_end(ctx, &gr));
        double first = 0, last = 0;
        for (size_t it = 0; it < steps; it++) {
            float sched = 0.5f * (1.0f + cosf(3.14159265f * (float)it / (float)steps));
            CHECK_OK(ctx, br_blr_opt_set_lr(o, c.lr * sched, c.sign_lr * sched));
            CHECK_OK(ctx, br_graph_launch(gr));
            if (it == 0 || it + 1 == steps) {
                float *y = t_download_f32(ctx, by, ntok * m);
                double e = 0, d = 0;
                for (size_t i = 0; i < ntok * m; i++) {
                    e += ((double)y[i] - ystar[i]) * ((double)y[i] - ystar[i]);
                    d += (double)ystar[i] * ystar[i];
                }
                *(it == 0 ? &first : &last) = sqrt(e / d);
                free(y);
            }
        }
        br_step_info info;
        CHECK_OK(ctx, br_blr_opt_info(o, &info));
        fprintf(stderr, "  mode %d: relative error %.4f → %.4f in %zu steps\n", mode, first, last,
                steps);
        CHECK(info.steps == steps && !info.refused, "mode %d: %llu steps", mode,
              (unsigned long long)info.steps);
        /* scales alone cannot fit a random target; with the signs it must fall far */
        double want = mode == BR_SIGN_OFF ? 0.95 : 0.7;
        CHECK(last < want * first, "mode %d: relative error %.4f → %.4f", mode, first, last);
        br_graph_free(gr);
        br_blr_opt_free(o);
        br_blr_scratch_free(s);
        br_blr_free(l);
        ref_free(&L);
    }
    free(wt), free(x), free(ystar), free(pos), free(neg);
    br_buf_free(bx), br_buf_free(bys), br_buf_free(by), br_buf_free(bdy), br_buf_free(bpos),
        br_buf_free(bneg);
    br_ctx_free(ctx);
}

/* Latents from a real factor: Λ = f·tau/mean|f| (clamped), bits = sign(f). */
static void latent_from_factor(void) {
    br_ctx *ctx = t_ctx();
    size_t m = 40, n = 35, r = 32;
    br_blr *l = NULL;
    CHECK_OK(ctx, br_blr_new(ctx, m, n, r, 1, BR_BLR_SIGN_GRADS, &l));
    br_opt_cfg c = br_opt_defaults();
    c.sign_tau = 0.1f;
    c.sign_clamp = 0.3f;
    br_blr_opt *o = NULL;
    CHECK_OK(ctx, br_blr_opt_new(l, &c, &o));
    br_rng rng = t_rng_for(40);
    float *f = t_rand(&rng, n * r, 2.0f);
    f[3] = 0.0f;
    CHECK_OK(ctx, br_blr_opt_init_latent(o, 0, 1, f));
    float *lat = t_download_f32(ctx, br_blr_opt_buf(o, 0, 1, BR_OPT_LATENT), n * r);
    uint32_t *bits = t_xmalloc(n * 4);
    CHECK_OK(ctx, br_buf_download(br_blr_buf(l, 0, BR_BLR_BITS_V), 0, bits, n));
    double mean = 0;
    for (size_t e = 0; e < n * r; e++)
        mean += fabs(f[e]) / (double)(n * r);
    size_t bad_lat = 0, bad_bit = 0;
    for (size_t e = 0; e < n * r; e++) {
        double want = fmin(fmax(f[e] * 0.1 / mean, -0.3), 0.3);
        bad_lat += fabs(lat[e] - want) > 1e-6;
        bad_bit += (int)((bits[e / 32] >> (e % 32)) & 1u) != (f[e] >= 0);
    }
    CHECK(bad_lat == 0 && bad_bit == 0, "%zu latents, %zu bits wrong", bad_lat, bad_bit);
    /* U untouched: ±tau from its (all +1) bits */
    float *lu = t_download_f32(ctx, br_blr_opt_buf(o, 0, 0, BR_OPT_LATENT), m * r);
    size_t not_tau = 0;
    for (size_t e = 0; e < m * r; e++)
        not_tau += lu[e] != 0.1f;
    CHECK(not_tau == 0, "%zu latents of U are not +tau", not_tau);
    f[7] = NAN;
    CHECK_FAILS(ctx, BR_E_NONFINITE, br_blr_opt_init_latent(o, 0, 1, f));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_opt_init_latent(o, 0, 2, NULL));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_opt_init_latent(o, 1, 0, NULL));
    free(f), free(lat), free(bits), free(lu);
    br_blr_opt_free(o);
    br_blr_free(l);
    br_ctx_free(ctx);
}

static void bad_configurations(void) {
    br_ctx *ctx = t_ctx();
    br_blr *plain = NULL, *sg = NULL;
    CHECK_OK(ctx, br_blr_new(ctx, 40, 40, 32, 1, 0, &plain));
    CHECK_OK(ctx, br_blr_new(ctx, 40, 40, 32, 1, BR_BLR_SIGN_GRADS, &sg));
    br_blr_opt *o = NULL;
    br_opt_cfg c = br_opt_defaults();
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_opt_new(plain, &c, &o)); /* signs need G */
    c.sign_mode = BR_SIGN_EXACT;
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_opt_new(sg, &c, &o)); /* exact needs curvature */
    {
        br_blr *cv = NULL;
        CHECK_OK(ctx, br_blr_new(ctx, 40, 40, 32, 1, BR_BLR_CURVATURE, &cv));
        c.flip_budget = 0; /* exact needs a budget: its predictions hold for one flip */
        CHECK_FAILS(ctx, BR_E_ARG, br_blr_opt_new(cv, &c, &o));
        CHECK(o == NULL && strstr(br_ctx_error(ctx), "flip_budget"), "%s", br_ctx_error(ctx));
        c.flip_budget = 1e-3f;
        CHECK_OK(ctx, br_blr_opt_new(cv, &c, &o));
        br_blr_opt_free(o);
        o = NULL;
        br_blr_free(cv);
    }
    c = br_opt_defaults();
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_opt_new(sg, NULL, &o));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_opt_new(sg, &c, NULL));
    struct {
        float *field, value;
    } bad[] = {{&c.lr, -1},
               {&c.lr, NAN},
               {&c.beta1, 1},
               {&c.beta2, -0.1f},
               {&c.eps, 0},
               {&c.rel_floor[2], -1},
               {&c.max_grad_norm, INFINITY},
               {&c.sign_lr, -1},
               {&c.sign_beta2, 1},
               {&c.sign_eps, 0},
               {&c.sign_clamp, 0},
               {&c.sign_hyst, 5},
               {&c.sign_tau, 0},
               {&c.sign_tau, 2},
               {&c.flip_budget, 1.5f}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = br_opt_defaults();
        float *f = (float *)((char *)&c + ((char *)bad[i].field - (char *)&c));
        *f = bad[i].value;
        CHECK_FAILS(ctx, BR_E_ARG, br_blr_opt_new(sg, &c, &o));
        CHECK(o == NULL, "case %zu left an optimizer", i);
    }
    c = br_opt_defaults();
    c.sign_mode = (br_sign_mode)7;
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_opt_new(sg, &c, &o));
    c = br_opt_defaults();
    c.sign_mode = BR_SIGN_OFF;
    CHECK_OK(ctx, br_blr_opt_new(plain, &c, &o)); /* scales only: fine without G */
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_opt_set_lr(o, -1, 0));
    CHECK_OK(ctx, br_graph_begin(ctx));
    CHECK_FAILS(ctx, BR_E_STATE, br_blr_opt_set_lr(o, 0.1f, 0.1f));
    br_step_info info;
    CHECK_FAILS(ctx, BR_E_STATE, br_blr_opt_info(o, &info));
    br_graph *g = NULL;
    CHECK_OK(ctx, br_graph_end(ctx, &g));
    br_graph_free(g);
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_opt_info(o, NULL));
    CHECK(br_blr_opt_buf(o, 0, 0, BR_OPT_LATENT) == NULL, "latent without sign training");
    CHECK(br_blr_opt_buf(o, 1, 0, BR_OPT_ADAM_M1) == NULL, "path out of range");
    CHECK(br_blr_opt_step(NULL) == BR_E_ARG, "NULL optimizer");
    br_blr_opt_free(o);
    br_blr_free(plain), br_blr_free(sg);
    br_ctx_free(ctx);
}

/* The sign gradients' norms from the row norms the backward wrote (the step's
 * default while br_blr_buf has not handed out G_U or G_V): two rigs of the same data,
 * one stepping on the row norms and one whose G the test read first (so its step
 * reads G in full). The steps change every part bit for bit alike (the sign norms
 * only report and refuse); each reported norm of G within 1e-5 of f64 over G as
 * the backward left it, accumulating included; a step whose gradients are not finite
 * is refused on the row norms too. */
static void sign_norms_from_row_norms(void) {
    br_ctx *ctx = t_ctx();
    const size_t m = 70, n = 45, r = 64, P = 2, ntok = 40;
    for (int accumulate = 0; accumulate < 2; accumulate++) {
        rig g[2];
        br_blr_opt *o[2] = {NULL, NULL};
        br_opt_cfg c = br_opt_defaults();
        c.sign_lr = 0.05f;
        c.sign_tau = 0.02f;
        br_step_info info[2];
        for (int v = 0; v < 2; v++) {
            g[v] = make_rig(ctx, 41, m, n, r, P, ntok, BR_BLR_SIGN_GRADS);
            CHECK_OK(ctx, br_blr_opt_new(g[v].l, &c, &o[v]));
            rig_pass(&g[v], 0);
            if (accumulate) rig_pass(&g[v], 1);
        }
        /* rig 1: its G read before the step, as a caller that may write them would */
        double want[2][2] = {{0, 0}, {0, 0}};
        for (size_t p = 0; p < P; p++)
            for (int which = 0; which < 2; which++) {
                const size_t nn = (which ? n : m) * r;
                float *G = ref_part(ctx, g[1].l, p, which ? BR_BLR_GV : BR_BLR_GU, nn);
                double q = 0;
                for (size_t e = 0; e < nn; e++)
                    q += (double)G[e] * G[e];
                want[p][which] = sqrt(q);
                free(G);
            }
        for (int v = 0; v < 2; v++) {
            CHECK_OK(ctx, br_blr_opt_step(o[v]));
            CHECK_OK(ctx, br_blr_opt_info(o[v], &info[v]));
        }
        snap a = take_snap(ctx, g[0].l, o[0]), b = take_snap(ctx, g[1].l, o[1]);
        CHECK(snap_diff(&a, &b) == 0, "accumulate %d: %zu parts differ between the steps on row "
              "norms and on G", accumulate, snap_diff(&a, &b));
        snap_free(&a), snap_free(&b);
        for (size_t p = 0; p < P; p++)
            for (int which = 0; which < 2; which++)
                for (int v = 0; v < 2; v++) {
                    const double got = info[v].norms[5 * p + 3 + (size_t)which];
                    CHECK(fabs(got - want[p][which]) <= 1e-5 * want[p][which] && want[p][which] > 0,
                          "accumulate %d path %zu %s, %s: norm %.9g, f64 %.9g", accumulate, p,
                          which ? "G_V" : "G_U", v ? "from G" : "from row norms", got,
                          want[p][which]);
                }
        for (int v = 0; v < 2; v++) {
            br_blr_opt_free(o[v]);
            free_rig(&g[v]);
        }
    }
    /* not finite: dy with a NaN, G never handed out, the step refused */
    rig g = make_rig(ctx, 42, m, n, r, P, ntok, BR_BLR_SIGN_GRADS);
    br_opt_cfg c = br_opt_defaults();
    br_blr_opt *o = NULL;
    CHECK_OK(ctx, br_blr_opt_new(g.l, &c, &o));
    float nan = NAN;
    CHECK_OK(ctx, br_buf_upload(g.bdy, 3, &nan, 1));
    rig_pass(&g, 0);
    snap before = take_snap(ctx, g.l, o);
    CHECK_FAILS(ctx, BR_E_NONFINITE, br_blr_opt_step(o));
    snap after = take_snap(ctx, g.l, o);
    CHECK(snap_diff(&before, &after) == 0, "a refused step changed %zu parts",
          snap_diff(&before, &after));
    br_step_info info;
    CHECK_OK(ctx, br_blr_opt_info(o, &info));
    CHECK(info.refused == 1 && info.steps == 0, "refused %d steps %llu", info.refused,
          (unsigned long long)info.steps);
    CHECK(!isfinite(info.norms[3]) && !isfinite(info.norms[4]),
          "the row norms carry the NaN: G_U %g, G_V %g", info.norms[3], info.norms[4]);
    snap_free(&before), snap_free(&after);
    br_blr_opt_free(o);
    free_rig(&g);
    br_ctx_free(ctx);
}

/* Kernels launched as programmatic dependents (PDL, sm_90) start while the one
 * before finishes and must wait for its results: a missing wait reads stale data.
 * Three steps of forward, backward and optimizer step, with option pdl=off (each
 * kernel after the last has finished), with the default (the GEMMs as dependents),
 * with pdl=all (every kernel that can be), eagerly, and with the default as a graph
 * replayed: every part, y and dx bit for bit alike. The shape keeps the GEMMs and
 * reductions long enough for a stale read to show. CUDA only: the CPU backend has
 * no launches to order. */
static void pdl_on_off_agree(void) {
    if (strncmp(t_device(), "cuda", 4) != 0) {
        fprintf(stderr, "  PDL orders CUDA launches: nothing to compare on %s\n", t_device());
        return;
    }
    br_ctx *ctx = t_ctx();
    const size_t m = 1536, n = 1024, r = 256, P = 2;
    const size_t ntok = 2048;
    enum { V = 4 };
    static const char *const pdl[V] = {"pdl=off", "pdl=auto", "pdl=all", "pdl=auto"};
    static const char *const name[V] = {"no PDL", "PDL on GEMMs", "PDL everywhere",
                                        "PDL on GEMMs in a graph"};
    rig g[V];
    br_blr_opt *o[V];
    float *y[V], *dx[V];
    snap sn[V];
    br_opt_cfg c = br_opt_defaults();
    c.sign_lr = 0.05f;
    c.sign_tau = 0.02f;
    for (int v = 0; v < V; v++) {
        CHECK_OK(ctx, br_ctx_set_options(ctx, pdl[v]));
        g[v] = make_rig(ctx, 43, m, n, r, P, ntok, BR_BLR_SIGN_GRADS);
        o[v] = NULL;
        CHECK_OK(ctx, br_blr_opt_new(g[v].l, &c, &o[v]));
        if (v < V - 1) {
            for (int step = 0; step < 3; step++) {
                rig_pass(&g[v], 0);
                CHECK_OK(ctx, br_blr_opt_step(o[v]));
            }
        } else {
            br_graph *gr = NULL;
            CHECK_OK(ctx, br_graph_begin(ctx));
            rig_pass(&g[v], 0);
            CHECK_OK(ctx, br_blr_opt_step(o[v]));
            CHECK_OK(ctx, br_graph_end(ctx, &gr));
            for (int step = 0; step < 3; step++)
                CHECK_OK(ctx, br_graph_launch(gr));
            br_graph_free(gr);
        }
        y[v] = t_download_f32(ctx, g[v].by, ntok * m);
        dx[v] = t_download_f32(ctx, g[v].bdx, ntok * n);
        sn[v] = take_snap(ctx, g[v].l, o[v]);
    }
    CHECK_OK(ctx, br_ctx_set_options(ctx, "pdl=auto"));
    for (int v = 1; v < V; v++) {
        CHECK(snap_diff(&sn[0], &sn[v]) == 0, "%s: %zu parts differ from no PDL", name[v],
              snap_diff(&sn[0], &sn[v]));
        CHECK(t_bits_differ32(y[0], y[v], ntok * m) == 0, "%s: y differs from no PDL", name[v]);
        CHECK(t_bits_differ32(dx[0], dx[v], ntok * n) == 0, "%s: dx differs from no PDL", name[v]);
    }
    br_step_info info;
    CHECK_OK(ctx, br_blr_opt_info(o[0], &info));
    CHECK(info.steps == 3 && !info.refused, "no PDL: %llu steps, refused %d",
          (unsigned long long)info.steps, info.refused);
    for (int v = 0; v < V; v++) {
        free(y[v]), free(dx[v]);
        snap_free(&sn[v]);
        br_blr_opt_free(o[v]);
        free_rig(&g[v]);
    }
    br_ctx_free(ctx);
}

T_RUN("optim", T_CASE(latent_full_step), T_CASE(latent_factored_step), T_CASE(latent_budgeted_step),
      T_CASE(input_grad_before_flips), T_CASE(deferred_equals_summed), T_CASE(nonfinite_refused),
      T_CASE(exact_flip_picks_best), T_CASE(training_reduces_loss), T_CASE(latent_from_factor),
      T_CASE(sign_norms_from_row_norms), T_CASE(pdl_on_off_agree), T_CASE(bad_configurations))
