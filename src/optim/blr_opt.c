/* The optimizer of one BLR layer: Adam over the concatenation of its scales (one
 * br_adam_cat), the sign optimizer over its sign matrices (br_sign_steps), and the
 * step controller between them that measures every gradient (br_sumsq_cat) and
 * refuses a step on the device when one is not finite. One step is a fixed op
 * sequence, so it records into a graph and refuses correctly on every replay:
 *     sumsq_cat(grads) → step_ctrl → sign_steps (up to BR_SIGN_STEPS_MAX matrices
 *     an op) → adam_cat
 * With sign training the Adam rides on the last sign_steps op (br_sign_steps_adam:
 * the same effects in the same order, one launch fewer on CUDA, where its blocks
 * join the steps' finish launch); with sign_mode OFF it is its own adam_cat. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/check.h"
#include "ops/sign_ops.h"
#include "optim/optim_internal.h"

br_opt_cfg br_opt_defaults(void) {
    br_opt_cfg c = {0};
    c.lr = 1e-3f;
    c.beta1 = 0.9f;
    c.beta2 = 0.999f;
    c.eps = 1e-8f;
    c.sign_mode = BR_SIGN_LATENT;
    c.sign_lr = 1e-2f;
    c.sign_beta1 = 0.9f;
    c.sign_beta2 = 0.999f;
    c.sign_eps = 1e-8f;
    c.sign_clamp = 1.0f;
    c.sign_tau = 0.1f;
    c.curvature = 1.0f;
    return c;
}

static int in01(float b) { return b >= 0.0f && b < 1.0f; }
static int finite_ge0(float x) { return isfinite(x) && x >= 0.0f; }

static br_status check_cfg(br_ctx *ctx, const br_blr *l, const br_opt_cfg *c) {
    static const char fn[] = "br_blr_opt_new";
    if (!finite_ge0(c->lr)) return br_fail(ctx, BR_E_ARG, "%s: cfg->lr = %g", fn, (double)c->lr);
    if (!in01(c->beta1) || !in01(c->beta2))
        return br_fail(ctx, BR_E_ARG, "%s: cfg->beta1, beta2 = %g, %g are not in [0, 1)", fn,
                       (double)c->beta1, (double)c->beta2);
    if (!(c->eps > 0) || !isfinite(c->eps))
        return br_fail(ctx, BR_E_ARG, "%s: cfg->eps = %g must be > 0", fn, (double)c->eps);
    for (int i = 0; i < 3; i++)
        if (!finite_ge0(c->rel_floor[i]))
            return br_fail(ctx, BR_E_ARG, "%s: cfg->rel_floor[%d] = %g", fn, i,
                           (double)c->rel_floor[i]);
    if (!finite_ge0(c->max_grad_norm))
        return br_fail(ctx, BR_E_ARG, "%s: cfg->max_grad_norm = %g", fn, (double)c->max_grad_norm);
    if (c->sign_mode != BR_SIGN_OFF && c->sign_mode != BR_SIGN_LATENT &&
        c->sign_mode != BR_SIGN_EXACT)
        return br_fail(ctx, BR_E_ARG, "%s: cfg->sign_mode = %d is not a br_sign_mode", fn,
                       (int)c->sign_mode);
    if (c->sign_mode == BR_SIGN_OFF) return BR_OK;
    if (!(l->flags & BR_BLR_SIGN_GRADS))
        return br_fail(ctx, BR_E_ARG, "%s: sign training needs a layer made with BR_BLR_SIGN_GRADS",
                       fn);
    if (c->sign_mode == BR_SIGN_EXACT && !(l->flags & BR_BLR_CURVATURE))
        return br_fail(ctx, BR_E_ARG, "%s: BR_SIGN_EXACT needs a layer made with BR_BLR_CURVATURE",
                       fn);
    if (!(c->flip_budget >= 0.0f && c->flip_budget <= 1.0f))
        return br_fail(ctx, BR_E_ARG, "%s: cfg->flip_budget = %g is not in [0, 1]", fn,
                       (double)c->flip_budget);
    if (c->sign_mode == BR_SIGN_EXACT) {
        if (!(c->flip_budget > 0))
            return br_fail(ctx, BR_E_ARG,
                           "%s: BR_SIGN_EXACT needs a flip budget (cfg->flip_budget > 0, e.g. "
                           "1e-3): its predictions hold for one flip at a time",
                           fn);
        if (!(c->curvature > 0) || !isfinite(c->curvature))
            return br_fail(ctx, BR_E_ARG, "%s: cfg->curvature = %g must be > 0", fn,
                           (double)c->curvature);
        return BR_OK;
    }
    if (!finite_ge0(c->sign_lr))
        return br_fail(ctx, BR_E_ARG, "%s: cfg->sign_lr = %g", fn, (double)c->sign_lr);
    if (!in01(c->sign_beta1) || !in01(c->sign_beta2))
        return br_fail(ctx, BR_E_ARG, "%s: cfg->sign_beta1, sign_beta2 = %g, %g are not in [0, 1)",
                       fn, (double)c->sign_beta1, (double)c->sign_beta2);
    if (!(c->sign_eps > 0) || !isfinite(c->sign_eps))
        return br_fail(ctx, BR_E_ARG, "%s: cfg->sign_eps = %g must be > 0", fn,
                       (double)c->sign_eps);
    if (!(c->sign_clamp > 0) || !isfinite(c->sign_clamp))
        return br_fail(ctx, BR_E_ARG, "%s: cfg->sign_clamp = %g must be > 0", fn,
                       (double)c->sign_clamp);
    if (!(c->sign_hyst >= 0) || !(c->sign_hyst < c->sign_clamp))
        return br_fail(ctx, BR_E_ARG, "%s: cfg->sign_hyst = %g is not in [0, sign_clamp)", fn,
                       (double)c->sign_hyst);
    if (!(c->sign_tau > 0) || !(c->sign_tau <= c->sign_clamp))
        return br_fail(ctx, BR_E_ARG, "%s: cfg->sign_tau = %g is not in (0, sign_clamp]", fn,
                       (double)c->sign_tau);
    return BR_OK;
}

void br_blr_opt_free(br_blr_opt *o) {
    if (!o) return;
    if (o->mat)
        for (size_t i = 0; i < 2 * o->paths; i++) {
            br_buf_free(o->mat[i].latent);
            br_buf_free(o->mat[i].m1);
            br_buf_free(o->mat[i].v);
        }
    if (o->adam_view)
        for (size_t i = 0; i < 2 * o->paths; i++)
            br_buf_free(o->adam_view[i]);
    br_buf *bufs[] = {o->adam_m1,    o->adam_m2,  o->mask,  o->floor, o->adam_mem,
                      o->tab,        o->tab_norms, o->partials, o->hyper, o->state, o->sched,
                      o->sign_sched, o->norms,    o->ctrl,  o->flips, o->sign_mem};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        br_buf_free(bufs[i]);
    free(o->mat);
    free(o->adam_view);
    free(o->host_norms);
    free(o->host_flips);
    free(o);
}

/* Mask and relative floors per element; the gradient-norm table. */
static br_status upload_tables(br_blr_opt *o) {
    br_blr *l = o->layer;
    size_t P = l->paths;
    float *mask = malloc(o->nscale * sizeof *mask), *fl = malloc(o->nscale * sizeof *fl);
    uint32_t *tab = malloc(4 * o->np * sizeof *tab), *tabn = tab + 2 * o->np;
    br_status st = BR_OK;
    if (!mask || !fl || !tab) {
        st = br_fail(o->ctx, BR_E_NOMEM, "br_blr_opt_new: out of host memory");
        goto done;
    }
    size_t len[3] = {l->m, l->r, l->n}, e = 0;
    for (size_t p = 0; p < P; p++)
        for (int kind = 0; kind < 3; kind++) {
            tab[2 * (3 * p + kind)] = (uint32_t)e;
            tab[2 * (3 * p + kind) + 1] = (uint32_t)len[kind];
            for (size_t i = 0; i < len[kind]; i++, e++) {
                mask[e] = o->cfg.freeze[kind] ? 0.0f : 1.0f;
                fl[e] = o->cfg.rel_floor[kind];
            }
        }
    for (size_t p = 0; p < P && o->np > 3 * P; p++) {
        size_t go = br_blr_sign_grad_off(l, p);
        tab[2 * (3 * P + 2 * p)] = (uint32_t)go;
        tab[2 * (3 * P + 2 * p) + 1] = (uint32_t)(l->m * l->r);
        tab[2 * (3 * P + 2 * p + 1)] = (uint32_t)(go + l->m * l->r);
        tab[2 * (3 * P + 2 * p + 1) + 1] = (uint32_t)(l->n * l->r);
    }
    /* the same table on the row norms of G_U and G_V */
    memcpy(tabn, tab, 6 * P * sizeof *tab);
    for (size_t p = 0; p < P && o->np > 3 * P; p++) {
        size_t no = br_blr_rownorm_off(l, p);
        tabn[2 * (3 * P + 2 * p)] = (uint32_t)no;
        tabn[2 * (3 * P + 2 * p) + 1] = (uint32_t)l->m;
        tabn[2 * (3 * P + 2 * p + 1)] = (uint32_t)(no + l->m);
        tabn[2 * (3 * P + 2 * p + 1) + 1] = (uint32_t)l->n;
    }
    if ((st = br_buf_upload(o->mask, 0, mask, o->nscale)) == BR_OK &&
        (st = br_buf_upload(o->floor, 0, fl, o->nscale)) == BR_OK &&
        (st = br_buf_upload(o->tab, 0, tab, 2 * o->np)) == BR_OK)
        st = br_buf_upload(o->tab_norms, 0, tabn, 2 * o->np);
done:
    free(mask);
    free(fl);
    free(tab);
    return st;
}

/* The controller's buffers at step 0. */
static br_status reset_ctrl(br_blr_opt *o) {
    float hyper[BR_CTRL_HYPER] = {o->cfg.lr, o->cfg.sign_lr, o->cfg.max_grad_norm, 0};
    float state[BR_CTRL_STATE] = {0, 1, 1, 0};
    float sched[4] = {o->cfg.lr, 0, 1, 0};
    float ssched[BR_SIGN_SCHED] = {o->cfg.sign_lr, 0, 1, 0, 0, 0, 0, 0};
    BR_TRY(br_buf_upload(o->hyper, 0, hyper, BR_CTRL_HYPER));
    BR_TRY(br_buf_upload(o->state, 0, state, BR_CTRL_STATE));
    BR_TRY(br_buf_upload(o->sched, 0, sched, 4));
    BR_TRY(br_buf_upload(o->sign_sched, 0, ssched, BR_SIGN_SCHED));
    BR_TRY(br_buf_fill(o->norms, 0, o->np + 1, 0));
    return br_buf_fill(o->flips, 0, 2 * o->layer->paths, 0);
}

/* Latent state of every sign matrix: one allocation, views per matrix. */
static br_status make_sign_state(br_blr_opt *o) {
    br_blr *l = o->layer;
    size_t P = l->paths, total = 0;
    int fact = o->cfg.sign_factored;
    for (size_t i = 0; i < 2 * P; i++) {
        br_sign_mat *mt = &o->mat[i];
        mt->rows = i % 2 ? l->n : l->m;
        size_t n = mt->rows * l->r;
        float f = o->cfg.flip_budget;
        mt->budget = f > 0 && f < 1 ? (size_t)floor((double)f * (double)n) : n;
        if (mt->budget == 0) mt->budget = 1;
        if (o->cfg.sign_mode == BR_SIGN_LATENT) total += 2 * n + (fact ? mt->rows + l->r : n);
    }
    if (!total) return BR_OK;
    if (total > BR_MAX_ELEMS)
        return br_fail(o->ctx, BR_E_OVERFLOW, "br_blr_opt_new: sign state of %zu elements", total);
    BR_TRY(br_buf_new(o->ctx, BR_F32, total, &o->sign_mem));
    size_t off = 0;
    for (size_t i = 0; i < 2 * P; i++) {
        br_sign_mat *mt = &o->mat[i];
        size_t n = mt->rows * l->r, nv = fact ? mt->rows + l->r : n;
        BR_TRY(br_buf_view(o->sign_mem, off, n, &mt->latent));
        BR_TRY(br_buf_view(o->sign_mem, off + n, n, &mt->m1));
        BR_TRY(br_buf_view(o->sign_mem, off + 2 * n, nv, &mt->v));
        off += 2 * n + nv;
    }
    for (size_t p = 0; p < P; p++)
        for (int which = 0; which < 2; which++)
            BR_TRY(br_blr_opt_init_latent(o, p, which, NULL));
    return BR_OK;
}

br_status br_blr_opt_new(br_blr *l, const br_opt_cfg *cfg, br_blr_opt **out) {
    static const char fn[] = "br_blr_opt_new";
    if (!l) return BR_E_ARG;
    br_ctx *ctx = l->ctx;
    if (!out) return br_fail(ctx, BR_E_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!cfg) return br_fail(ctx, BR_E_ARG, "%s: cfg is NULL", fn);
    BR_TRY(check_cfg(ctx, l, cfg));
    br_blr_opt *o = calloc(1, sizeof *o);
    if (!o) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    o->layer = l;
    o->ctx = ctx;
    o->cfg = *cfg;
    o->paths = l->paths;
    size_t P = l->paths;
    o->nscale = P * l->path_len;
    o->nclip = 3 * P;
    o->np = (l->flags & BR_BLR_SIGN_GRADS) ? 5 * P : 3 * P;
    br_status st = BR_E_NOMEM;
    o->mat = calloc(2 * P, sizeof *o->mat);
    o->adam_view = calloc(2 * P, sizeof *o->adam_view);
    o->host_norms = calloc(5 * P, sizeof *o->host_norms);
    o->host_flips = calloc(2 * P, sizeof *o->host_flips);
    if (!o->mat || !o->adam_view || !o->host_norms || !o->host_flips) {
        br_fail(ctx, st, "%s: out of host memory", fn);
        goto fail;
    }
    size_t nctrl = BR_CTRL_HYPER + BR_CTRL_STATE + 4 + BR_SIGN_SCHED + o->np + 1, off = 0;
    if ((st = br_buf_new(ctx, BR_F32, 4 * o->nscale, &o->adam_mem)) ||
        (st = br_buf_view(o->adam_mem, 0, o->nscale, &o->adam_m1)) ||
        (st = br_buf_view(o->adam_mem, o->nscale, o->nscale, &o->adam_m2)) ||
        (st = br_buf_view(o->adam_mem, 2 * o->nscale, o->nscale, &o->mask)) ||
        (st = br_buf_view(o->adam_mem, 3 * o->nscale, o->nscale, &o->floor)) ||
        (st = br_buf_new(ctx, BR_U32, 2 * o->np, &o->tab)) ||
        (st = br_buf_new(ctx, BR_U32, 2 * o->np, &o->tab_norms)) ||
        (st = br_buf_new(ctx, BR_F32, o->np * BR_SUMSQ_PARTS, &o->partials)) ||
        (st = br_buf_new(ctx, BR_F32, nctrl, &o->ctrl)) ||
        (st = br_buf_view(o->ctrl, off, BR_CTRL_HYPER, &o->hyper)) ||
        (st = br_buf_view(o->ctrl, off += BR_CTRL_HYPER, BR_CTRL_STATE, &o->state)) ||
        (st = br_buf_view(o->ctrl, off += BR_CTRL_STATE, 4, &o->sched)) ||
        (st = br_buf_view(o->ctrl, off += 4, BR_SIGN_SCHED, &o->sign_sched)) ||
        (st = br_buf_view(o->ctrl, off += BR_SIGN_SCHED, o->np + 1, &o->norms)) ||
        (st = br_buf_new(ctx, BR_U32, 2 * P, &o->flips)))
        goto fail;
    for (size_t p = 0; p < P; p++)
        if ((st = br_buf_view(o->adam_m1, p * l->path_len, l->path_len, &o->adam_view[2 * p])) ||
            (st = br_buf_view(o->adam_m2, p * l->path_len, l->path_len, &o->adam_view[2 * p + 1])))
            goto fail;
    if ((st = br_buf_fill(o->adam_mem, 0, 2 * o->nscale, 0)) || (st = upload_tables(o)) ||
        (st = reset_ctrl(o)) || (st = make_sign_state(o)))
        goto fail;
    *out = o;
    return BR_OK;
fail:
    br_blr_opt_free(o);
    return st;
}

br_status br_blr_opt_set_lr(br_blr_opt *o, float lr, float sign_lr) {
    if (!o) return BR_E_ARG;
    if (!finite_ge0(lr) || !finite_ge0(sign_lr))
        return br_fail(o->ctx, BR_E_ARG, "br_blr_opt_set_lr: lr = %g, sign_lr = %g", (double)lr,
                       (double)sign_lr);
    if (br_ctx_recording(o->ctx))
        return br_fail(o->ctx, BR_E_STATE, "br_blr_opt_set_lr: called while recording a graph");
    o->cfg.lr = lr;
    o->cfg.sign_lr = sign_lr;
    float two[2] = {lr, sign_lr};
    return br_buf_upload(o->hyper, 0, two, 2);
}

/* The sign step of matrix i (path i/2, S_U for even i, S_V for odd). */
static br_sign_step_args sign_args(br_blr_opt *o, size_t i) {
    br_blr *l = o->layer;
    size_t p = i / 2;
    int is_v = (int)(i % 2);
    br_buf *const *v = l->path[p].part;
    const br_sign_mat *mt = &o->mat[i];
    br_sign_step_args a = {
        .exact = o->cfg.sign_mode == BR_SIGN_EXACT,
        .factored = o->cfg.sign_factored != 0,
        .grad = v[is_v ? BR_BLR_GV : BR_BLR_GU],
        .bits = v[is_v ? BR_BLR_BITS_V : BR_BLR_BITS_U],
        .latent = mt->latent,
        .m1 = mt->m1,
        .v = mt->v,
        .sched = o->sign_sched,
        .flips = o->flips,
        .slot = i,
        .rows = mt->rows,
        .r = l->r,
        .budget = mt->budget,
        .beta1 = o->cfg.sign_beta1,
        .beta2 = o->cfg.sign_beta2,
        .eps = o->cfg.sign_eps,
        .clamp = o->cfg.sign_clamp,
        .hyst = o->cfg.sign_hyst,
    };
    if (a.exact) {
        /* U: 2κ·h_i²·ℓ_k²·Σ_t a_tk²;  V: 2κ·g_j²·Σ_t x_tj²·ℓ_k²·Σ_i h_i² */
        a.rowf = v[is_v ? BR_BLR_G : BR_BLR_H];
        a.rowq = is_v ? v[BR_BLR_SUM_X2] : NULL;
        a.colf = v[BR_BLR_L];
        a.colq = is_v ? NULL : v[BR_BLR_SUM_A2];
        a.normsrc = is_v ? v[BR_BLR_H] : NULL;
        a.nnorm = is_v ? l->m : 0;
        a.curv2 = 2.0f * o->cfg.curvature;
    }
    return a;
}

static br_status opt_step(br_blr_opt *o) {
    br_ctx *ctx = o->ctx;
    br_blr *l = o->layer;
    /* the sign gradients' norms from the row norms their backward wrote, unless
     * br_blr_buf handed them out (then they may have been written since) */
    const int rows = !l->sign_grads_out;
    const br_buf *tab = rows ? o->tab_norms : o->tab;
    BR_TRY(br_sumsq_cat(ctx, l->grads, tab, o->np, o->partials));
    br_step_ctrl_args c = {.partials = o->partials,
                           .np = o->np,
                           .nclip = o->nclip,
                           .hyper = o->hyper,
                           .state = o->state,
                           .sched = o->sched,
                           .sign_sched = o->sign_sched,
                           .norms = o->norms,
                           .sign_beta1 = o->cfg.sign_beta1,
                           .sign_beta2 = o->cfg.sign_beta2};
    BR_TRY(br_step_ctrl(ctx, &c));
    br_adam_hp hp = {.lr = o->cfg.lr,
                     .beta1 = o->cfg.beta1,
                     .beta2 = o->cfg.beta2,
                     .eps = o->cfg.eps,
                     .step = 1,
                     .grad_mul = 1.0f,
                     .sched = o->sched};
    /* signs first: exact-flip predictions read h, ℓ, g as the gradients saw them */
    if (o->cfg.sign_mode != BR_SIGN_OFF) {
        br_tag_scope tag;
        br_tag_push(ctx, &tag, "sign");
        /* every sign matrix in as few ops as br_sign_steps takes (one launch pair
         * on CUDA for up to four directly flipping matrices); the last op then runs
         * the Adam over the scales (in the pair's second launch on CUDA) */
        br_sign_step_args a[BR_SIGN_STEPS_MAX];
        br_status st = BR_OK;
        for (size_t i0 = 0; i0 < 2 * l->paths && st == BR_OK; i0 += BR_SIGN_STEPS_MAX) {
            size_t cnt = 0;
            for (size_t i = i0; i < 2 * l->paths && cnt < BR_SIGN_STEPS_MAX; i++)
                a[cnt++] = sign_args(o, i);
            if (i0 + cnt < 2 * l->paths)
                st = br_sign_steps(ctx, a, cnt);
            else
                st = br_sign_steps_adam(ctx, a, cnt, l->params, l->grads, o->adam_m1, o->adam_m2,
                                        o->mask, o->floor, o->nscale, &hp);
        }
        br_tag_pop(ctx, &tag);
        BR_TRY(st);
    } else {
        BR_TRY(br_adam_cat(ctx, l->params, l->grads, o->adam_m1, o->adam_m2, o->mask, o->floor,
                           o->nscale, &hp));
    }
    if (br_ctx_recording(ctx)) return BR_OK;
    float sched[4];
    BR_TRY(br_buf_download(o->sched, 0, sched, 4));
    if (sched[3] == 0.0f) return BR_OK;
    /* name the first gradient that is not finite */
    float *norms = o->host_norms;
    BR_TRY(br_buf_download(o->norms, 0, norms, o->np));
    static const char *const kind[5] = {"dh", "dl", "dg", "G_U", "G_V"};
    for (size_t i = 0; i < o->np; i++)
        if (!isfinite(norms[i])) {
            size_t p = i < 3 * l->paths ? i / 3 : (i - 3 * l->paths) / 2;
            int k = i < 3 * l->paths ? (int)(i % 3) : 3 + (int)((i - 3 * l->paths) % 2);
            return br_fail(ctx, BR_E_NONFINITE,
                           "br_blr_opt_step: the gradient %s of path %zu is not finite (norm "
                           "%g); step refused, nothing changed",
                           kind[k], p, (double)norms[i]);
        }
    return br_fail(ctx, BR_E_NONFINITE,
                   "br_blr_opt_step: a gradient is not finite; step refused, nothing changed");
}

br_status br_blr_opt_step(br_blr_opt *o) {
    if (!o) return BR_E_ARG;
    br_tag_scope tag;
    br_tag_push(o->ctx, &tag, "opt");
    br_status st = opt_step(o);
    br_tag_pop(o->ctx, &tag);
    return st;
}

br_status br_blr_opt_info(br_blr_opt *o, br_step_info *info) {
    if (!o) return BR_E_ARG;
    if (!info) return br_fail(o->ctx, BR_E_ARG, "br_blr_opt_info: info is NULL");
    if (br_ctx_recording(o->ctx))
        return br_fail(o->ctx, BR_E_STATE, "br_blr_opt_info: called while recording a graph");
    br_blr *l = o->layer;
    size_t P = l->paths;
    float sched[4], state[BR_CTRL_STATE];
    float *raw = malloc((o->np + 1) * sizeof *raw);
    if (!raw) return br_fail(o->ctx, BR_E_NOMEM, "br_blr_opt_info: out of host memory");
    br_status st;
    if ((st = br_buf_download(o->sched, 0, sched, 4)) ||
        (st = br_buf_download(o->state, 0, state, BR_CTRL_STATE)) ||
        (st = br_buf_download(o->norms, 0, raw, o->np + 1)) ||
        (st = br_buf_download(o->flips, 0, o->host_flips, 2 * P))) {
        free(raw);
        return st;
    }
    /* per path: dh, dℓ, dg, G_U, G_V */
    for (size_t p = 0; p < P; p++) {
        for (int k = 0; k < 3; k++)
            o->host_norms[5 * p + (size_t)k] = raw[3 * p + (size_t)k];
        for (int k = 0; k < 2; k++)
            o->host_norms[5 * p + 3 + (size_t)k] =
                o->np > 3 * P ? raw[3 * P + 2 * p + (size_t)k] : 0.0f;
    }
    memset(info, 0, sizeof *info);
    info->refused = sched[3] != 0.0f;
    info->steps = (uint64_t)state[0];
    info->grad_norm = raw[o->np];
    info->grad_mul = sched[2];
    info->nparams = 5 * P;
    info->norms = o->host_norms;
    info->nmats = 2 * P;
    if (info->refused || o->cfg.sign_mode == BR_SIGN_OFF)
        memset(o->host_flips, 0, 2 * P * sizeof *o->host_flips);
    info->flips = o->host_flips;
    free(raw);
    return BR_OK;
}

br_buf *br_blr_opt_buf(br_blr_opt *o, size_t path, int which, br_opt_part part) {
    if (!o || path >= o->layer->paths || which < 0 || which > 1) return NULL;
    const br_sign_mat *mt = &o->mat[2 * path + (size_t)which];
    switch (part) {
    case BR_OPT_LATENT: return mt->latent;
    case BR_OPT_M1: return mt->m1;
    case BR_OPT_V: return mt->v;
    case BR_OPT_ADAM_M1: return o->adam_view[2 * path];
    case BR_OPT_ADAM_M2: return o->adam_view[2 * path + 1];
    }
    return NULL;
}
