/* Training one BLR layer to reproduce the original linear's outputs.
 *
 * The original W [m][n] becomes a frozen f16 plane; its outputs y* on a pool of
 * calibration inputs are computed once (br_plane_linear). Each step takes the
 * next batch of the pool (views, no copies), runs the layer forward fused with the
 * loss gradient dy = (ŷ − y*)·c, c = 1/rms(y*) (br_blr_forward_loss: the loss
 * ½‖ŷ − y*‖² scaled to O(1): Adam and the sign optimizer do not care about the
 * scale, the f16 operands do) and the backward on it, then one optimizer step:
 * Adam on h, ℓ, g with relative steps, latent Adam on the signs. The learning
 * rates warm up linearly and decay on a cosine to 0. Every eval_every steps the
 * relative output error on held-out inputs is measured; the best state is kept,
 * and training stops after `patience` evaluations without a 0.1% gain. The result
 * has its scales rounded to f16, as the output stores them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/train.h"

typedef struct trainer {
    br_ctx *ctx;
    size_t m, n, kpad, r, paths, T;
    br_blr *layer;
    br_blr_scratch *scratch;
    br_blr_opt *opt;
    br_buf *x_pool, *y_pool; /* [npool][n], [npool][m] */
    br_buf *x_eval, *y_eval; /* [neval][n], [neval][m] */
    br_buf *dy;              /* [T][m]: the loss gradient, or ŷ − y* when evaluating */
    /* every training batch staged once (br_blr_stage), so no step stages x again:
     * [nbatch] of f16(x) [pad_rows(T)][stage_cols] and of f16(x)ᵀ [pad_rows(n)][pad_tokens(T)];
     * NULL when the pool is too large to hold twice (each step then stages its batch) */
    br_buf *x16_pool;
    br_buf **x16; /* [nbatch] views of the pool, made once (the scratch keeps x16) */
    size_t npool, neval, nbatch;
    double *batch_norm2; /* Σ y*² of each batch */
    double eval_norm2;
    double c;
    int all_zero; /* y* = 0 on every input: nothing to fit */
} trainer;

static void trainer_free(trainer *t) {
    br_blr_opt_free(t->opt);
    br_blr_scratch_free(t->scratch);
    br_blr_free(t->layer);
    br_buf *bufs[] = {t->x_pool, t->y_pool, t->x_eval, t->y_eval, t->dy, t->x16_pool};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        br_buf_free(bufs[i]);
    for (size_t b = 0; t->x16 && b < t->nbatch; b++)
        br_buf_free(t->x16[b]);
    free(t->x16);
    free(t->batch_norm2);
}

static br_status new_f32(br_ctx *ctx, size_t count, br_buf **out) {
    return br_buf_new(ctx, BR_F32, count ? count : 1, out);
}

/* y [rows][m] = W·x for x [rows][n] on the host, through the f16 plane [m][kpad]
 * (chunks of T rows, the input padded to kpad columns with zeros). */
static br_status teacher(trainer *t, const br_buf *plane, const float *x, size_t rows, br_buf *y) {
    br_ctx *ctx = t->ctx;
    size_t T = t->T, n = t->n, kpad = t->kpad, m = t->m;
    br_buf *xpad = NULL, *act16 = NULL, *yv = NULL;
    float *host = malloc(T * kpad * sizeof *host);
    br_status st = host ? BR_OK : br_fail(ctx, BR_E_NOMEM, "teacher outputs: out of host memory");
    if (!st) st = new_f32(ctx, T * kpad, &xpad);
    if (!st) st = br_buf_new(ctx, BR_F16, br_pad_rows(T) * kpad, &act16);
    for (size_t r0 = 0; !st && r0 < rows; r0 += T) {
        size_t nr = rows - r0 < T ? rows - r0 : T;
        for (size_t i = 0; i < nr; i++) {
            memcpy(host + i * kpad, x + (r0 + i) * n, n * sizeof *host);
            for (size_t j = n; j < kpad; j++)
                host[i * kpad + j] = 0.0f;
        }
        st = br_buf_upload(xpad, 0, host, nr * kpad);
        if (!st) st = br_buf_view(y, r0 * m, nr * m, &yv);
        if (!st) st = br_plane_linear(ctx, plane, xpad, act16, yv, nr, m, kpad, 1.0f);
        br_buf_free(yv);
        yv = NULL;
    }
    br_buf_free(xpad);
    br_buf_free(act16);
    free(host);
    return st;
}

/* Relative output error of the layer as it is, on the held-out inputs. */
static br_status eval_error(trainer *t, double *err) {
    double num = 0;
    for (size_t r0 = 0; r0 < t->neval; r0 += t->T) {
        size_t nr = t->neval - r0 < t->T ? t->neval - r0 : t->T;
        br_buf *xv = NULL, *yv = NULL;
        br_status st = br_buf_view(t->x_eval, r0 * t->n, nr * t->n, &xv);
        if (!st) st = br_buf_view(t->y_eval, r0 * t->m, nr * t->m, &yv);
        /* ŷ − y* straight from the forward's epilogue, then Σ of its squares */
        if (!st) st = br_blr_forward_residual(t->layer, t->scratch, xv, yv, 1.0f, t->dy, nr);
        double part = 0;
        if (!st) st = br_sumsq_host(t->ctx, t->dy, nr * t->m, &part);
        br_buf_free(xv);
        br_buf_free(yv);
        BR_TRY(st);
        num += part;
    }
    *err = isfinite(num) ? sqrt(num / t->eval_norm2) : INFINITY;
    return BR_OK;
}

static float round_f16(float v) { return br_half_to_float(br_half_from_float(v)); }

/* Scales of L rounded to f16 (what the output file holds). */
static void round_scales(br_blr_host *L) {
    for (size_t p = 0; p < L->paths; p++) {
        br_blr_path_host *P = &L->path[p];
        for (size_t i = 0; i < L->m; i++)
            P->h[i] = round_f16(P->h[i]);
        for (size_t k = 0; k < L->r; k++)
            P->l[k] = round_f16(P->l[k]);
        for (size_t j = 0; j < L->n; j++)
            P->g[j] = round_f16(P->g[j]);
    }
}

static br_status upload_layer(trainer *t, const br_blr_host *L) {
    for (size_t p = 0; p < L->paths; p++) {
        const br_blr_path_host *P = &L->path[p];
        BR_TRY(br_blr_set_path(t->layer, p, P->bits_u, P->bits_v, P->h, P->l, P->g));
    }
    return BR_OK;
}

static double rms_of(const float *v, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)v[i] * v[i];
    return n ? sqrt(s / (double)n) : 0;
}

/* Learning-rate multiplier of step s (0-based): linear warm-up, cosine decay to 0. */
static double schedule(int s, int steps, int warmup) {
    if (warmup > 0 && s < warmup) return (double)(s + 1) / (double)warmup;
    double span = (double)(steps - warmup);
    double prog = span > 0 ? (double)(s - warmup) / span : 1.0;
    return 0.5 * (1.0 + cos(3.14159265358979323846 * prog));
}

/* Copy of L's arrays into dst (same shapes, already allocated). */
static void copy_host(br_blr_host *dst, const br_blr_host *src) {
    size_t words = src->r / 32;
    for (size_t p = 0; p < src->paths; p++) {
        const br_blr_path_host *s = &src->path[p];
        br_blr_path_host *d = &dst->path[p];
        memcpy(d->bits_u, s->bits_u, src->m * words * sizeof *d->bits_u);
        memcpy(d->bits_v, s->bits_v, src->n * words * sizeof *d->bits_v);
        memcpy(d->h, s->h, src->m * sizeof *d->h);
        memcpy(d->l, s->l, src->r * sizeof *d->l);
        memcpy(d->g, s->g, src->n * sizeof *d->g);
    }
}

/* Most bytes the staged copy of the training pool may take (it is as large as the
 * f32 pool): past that each step stages its own batch. */
#define STAGED_POOL_MAX_BYTES ((size_t)1 << 30)

static br_status stage_pool(trainer *t) {
    br_ctx *ctx = t->ctx;
    size_t n16 = br_pad_rows(t->T) * br_blr_stage_cols(t->layer), per = n16 * 2;
    if (per == 0 || t->nbatch > STAGED_POOL_MAX_BYTES / per) return BR_OK;
    t->x16 = calloc(t->nbatch, sizeof *t->x16);
    if (!t->x16) return br_fail(ctx, BR_E_NOMEM, "training: out of host memory");
    BR_TRY(br_buf_new(ctx, BR_F16, t->nbatch * n16, &t->x16_pool));
    for (size_t b = 0; b < t->nbatch; b++) {
        br_buf *xv = NULL;
        BR_TRY(br_buf_view(t->x16_pool, b * n16, n16, &t->x16[b]));
        br_status st = br_buf_view(t->x_pool, b * t->T * t->n, t->T * t->n, &xv);
        if (!st) st = br_blr_stage(t->layer, xv, t->x16[b], NULL, t->T);
        br_buf_free(xv);
        BR_TRY(st);
    }
    return BR_OK;
}

static br_status setup(trainer *t, const float *w, const br_train_in *in, const br_compress_opts *o,
                       const br_blr_host *L, const br_svid_factors *f) {
    br_ctx *ctx = t->ctx;
    size_t m = t->m, n = t->n;
    /* the training pool: whole batches of T tokens */
    t->nbatch = in->ntrain / t->T;
    if (!t->nbatch) t->nbatch = 1;
    t->npool = t->nbatch * t->T;
    if (t->npool > in->ntrain) t->npool = in->ntrain; /* fewer tokens than one batch */
    if (t->T > t->npool) t->T = t->npool;
    t->neval = in->neval;
    size_t T = t->T;

    /* the frozen teacher: f16(W) [m][kpad] */
    br_buf *plane = NULL;
    uint16_t *w16 = malloc(m * t->kpad * sizeof *w16);
    if (!w16) return br_fail(ctx, BR_E_NOMEM, "training: out of host memory");
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < t->kpad; j++)
            w16[i * t->kpad + j] = j < n ? br_half_from_float(w[i * n + j]) : 0;
    br_status st = br_buf_new(ctx, BR_F16, m * t->kpad, &plane);
    if (!st) st = br_buf_upload(plane, 0, w16, m * t->kpad);
    free(w16);
    if (!st) st = new_f32(ctx, t->npool * n, &t->x_pool);
    if (!st) st = br_buf_upload(t->x_pool, 0, in->x_train, t->npool * n);
    if (!st) st = new_f32(ctx, t->npool * m, &t->y_pool);
    if (!st) st = new_f32(ctx, t->neval * n, &t->x_eval);
    if (!st) st = br_buf_upload(t->x_eval, 0, in->x_eval, t->neval * n);
    if (!st) st = new_f32(ctx, t->neval * m, &t->y_eval);
    if (!st) st = new_f32(ctx, T * m, &t->dy);
    if (!st) st = teacher(t, plane, in->x_train, t->npool, t->y_pool);
    if (!st) st = teacher(t, plane, in->x_eval, t->neval, t->y_eval);
    br_buf_free(plane);
    BR_TRY(st);

    /* norms: Σ y*² per batch and of the held-out set */
    t->batch_norm2 = calloc(t->nbatch, sizeof *t->batch_norm2);
    if (!t->batch_norm2) return br_fail(ctx, BR_E_NOMEM, "training: out of host memory");
    double pool_norm2 = 0;
    for (size_t b = 0; b < t->nbatch; b++) {
        br_buf *yv = NULL;
        BR_TRY(br_buf_view(t->y_pool, b * T * m, T * m, &yv));
        st = br_sumsq_host(ctx, yv, T * m, &t->batch_norm2[b]);
        br_buf_free(yv);
        BR_TRY(st);
        pool_norm2 += t->batch_norm2[b];
    }
    BR_TRY(br_sumsq_host(ctx, t->y_eval, t->neval * m, &t->eval_norm2));
    if (!isfinite(pool_norm2) || !isfinite(t->eval_norm2))
        return br_fail(ctx, BR_E_NONFINITE,
                       "training: the original layer's outputs are not finite (Σy² = %g on the "
                       "training inputs, %g held out)",
                       pool_norm2, t->eval_norm2);
    if (pool_norm2 == 0 && t->eval_norm2 == 0) {
        t->all_zero = 1; /* e.g. W = 0: the initialization is exact, nothing to train */
        return BR_OK;
    }
    if (!(pool_norm2 > 0) || !(t->eval_norm2 > 0))
        return br_fail(ctx, BR_E_NONFINITE,
                       "training: the original layer's outputs are all zero on the %s inputs",
                       pool_norm2 > 0 ? "held-out" : "training");
    t->c = 1.0 / sqrt(pool_norm2 / (double)(t->npool * m));

    /* the layer, its scratch and optimizer */
    int train_signs = o->steps > 0 && o->sign_lr > 0;
    unsigned flags = train_signs ? BR_BLR_SIGN_GRADS : 0;
    BR_TRY(br_blr_new(ctx, m, n, t->r, t->paths, flags, &t->layer));
    BR_TRY(upload_layer(t, L));
    size_t scratch_tok = T;
    BR_TRY(br_blr_scratch_new(t->layer, scratch_tok, NULL, &t->scratch));
    BR_TRY(stage_pool(t));
    if (o->steps > 0) {
        br_opt_cfg cfg = br_opt_defaults();
        cfg.lr = o->lr;
        /* relative steps lr·max(|w|, ρ): ρ a small fraction of the scales' size */
        double c_bal = rms_of(L->path[0].h, m);
        float rho = (float)(0.02 * (c_bal > 0 ? c_bal : 1.0));
        cfg.rel_floor[0] = cfg.rel_floor[1] = cfg.rel_floor[2] = rho;
        cfg.sign_mode = train_signs ? BR_SIGN_LATENT : BR_SIGN_OFF;
        cfg.sign_lr = o->sign_lr;
        BR_TRY(br_blr_opt_new(t->layer, &cfg, &t->opt));
        if (train_signs && f)
            for (size_t p = 0; p < t->paths; p++) {
                if (f->u[p]) BR_TRY(br_blr_opt_init_latent(t->opt, p, 0, f->u[p]));
                if (f->v[p]) BR_TRY(br_blr_opt_init_latent(t->opt, p, 1, f->v[p]));
            }
    }
    return BR_OK;
}

/* Log of the loss curve: every `every` steps. */
static br_status log_loss(br_layer_report *rep, int every, size_t cap, double loss) {
    if (!rep->loss) {
        rep->loss = malloc(cap * sizeof *rep->loss);
        if (!rep->loss) return BR_E_NOMEM;
        rep->loss_every = every;
    }
    if (rep->n_loss < cap) rep->loss[rep->n_loss++] = (float)loss;
    return BR_OK;
}

br_status br_train_layer(br_ctx *ctx, const float *w, const br_train_in *in,
                         const br_compress_opts *o, br_blr_host *L, const br_svid_factors *f,
                         br_layer_report *rep, br_train_hook hook, void *user) {
    trainer t = {.ctx = ctx, .m = L->m, .n = L->n, .r = L->r, .paths = L->paths};
    t.kpad = (t.n + 31) / 32 * 32;
    t.T = o->tokens ? o->tokens : 512;
    br_blr_host best = {0};
    round_scales(L);
    br_status st = setup(&t, w, in, o, L, f);
    if (!st && t.all_zero) {
        rep->err_init = rep->err_trained = 0;
        rep->steps = 0;
        goto done;
    }
    if (!st) st = br_layer_host_alloc(ctx, &best, L->m, L->n, L->r, L->paths);
    if (!st) copy_host(&best, L);
    double err = 0;
    if (!st) st = eval_error(&t, &err);
    if (st) goto done;
    rep->err_init = err;
    rep->steps = 0;
    double best_err = err;
    int stale = 0, refused_in_row = 0;
    int steps = o->steps > 0 ? o->steps : 0;
    int warmup = o->warmup >= 0 ? o->warmup : steps / 20;
    if (warmup >= steps) warmup = steps / 2;
    int eval_every = o->eval_every > 0 ? o->eval_every : 25;
    int every = steps > 200 ? (steps + 199) / 200 : 1;
    size_t cap = (size_t)(steps / every + 2);
    /* f16 staging of dy (the backward stages dy·gs; h lives in the other operand): a
     * power of two bringing it near 1, rms(dy) ≈ the relative error */
    double gs = exp2(round(log2(1.0 / (err > 1e-3 ? err : 1e-3))));
    if (gs < 1.0) gs = 1.0;
    if (gs > 1048576.0) gs = 1048576.0;

    double lr_mult = 0;
    for (int s = 0; s < steps; s++) {
        size_t b = (size_t)s % t.nbatch, T = t.T;
        br_buf *xv = NULL, *yv = NULL;
        /* the schedule in steps of 1%: each change is a (synchronous) upload */
        double mult = schedule(s, steps, warmup);
        if (s == 0 || fabs(mult - lr_mult) > 0.01 * (lr_mult > 0.05 ? lr_mult : 0.05)) {
            lr_mult = mult;
            st = br_blr_opt_set_lr(t.opt, (float)(o->lr * mult), (float)(o->sign_lr * mult));
        }
        if (!st) st = br_buf_view(t.x_pool, b * T * t.n, T * t.n, &xv);
        if (!st) st = br_buf_view(t.y_pool, b * T * t.m, T * t.m, &yv);
        /* the gradient goes to the backward staged in f16; in f32 only when logged */
        const int logged = s % every == 0 || s == steps - 1;
        if (!st && t.x16_pool)
            st = br_blr_forward_loss_staged(t.layer, t.scratch, t.x16[b], NULL, yv, (float)t.c,
                                            (float)gs, logged ? t.dy : NULL, T);
        else if (!st)
            st = br_blr_forward_loss(t.layer, t.scratch, xv, yv, (float)t.c, (float)gs,
                                     logged ? t.dy : NULL, T);
        if (!st) st = br_blr_backward(t.layer, t.scratch, xv, NULL, NULL, T, (float)gs, 0);
        double loss = -1;
        if (!st && logged) {
            double sq = 0;
            st = br_sumsq_host(ctx, t.dy, T * t.m, &sq);
            loss = sq / (t.c * t.c * t.batch_norm2[b]);
            if (!st && log_loss(rep, every, cap, loss))
                st = br_fail(ctx, BR_E_NOMEM, "training: out of host memory");
        }
        if (!st) {
            st = br_blr_opt_step(t.opt);
            if (st == BR_E_NONFINITE) {
                st = BR_OK;
                if (++refused_in_row >= 3)
                    st = br_fail(ctx, BR_E_NONFINITE,
                                 "training diverged: gradients not finite for 3 steps in a row "
                                 "(step %d; try a smaller --lr)",
                                 s + 1);
            } else {
                refused_in_row = 0;
            }
        }
        br_buf_free(xv);
        br_buf_free(yv);
        if (st) goto done;
        rep->steps = s + 1;
        if (hook && hook(user, s + 1, steps, loss)) {
            st = br_fail(ctx, BR_E_STATE, "cancelled");
            goto done;
        }
        if ((s + 1) % eval_every == 0 || s + 1 == steps) {
            if ((st = eval_error(&t, &err))) goto done;
            if (err < best_err * (1.0 - 1e-3)) {
                stale = 0;
            } else {
                stale++;
            }
            if (err < best_err) {
                best_err = err;
                if ((st = br_blr_to_host(t.layer, &best))) goto done;
            }
            if (o->patience > 0 && stale >= o->patience) break; /* a plateau: stop early */
        }
    }
    /* the best state, scales rounded to f16 as stored */
    copy_host(L, &best);
    round_scales(L);
    if ((st = upload_layer(&t, L))) goto done;
    if ((st = eval_error(&t, &err))) goto done;
    rep->err_trained = err;
done:
    br_layer_host_free(&best);
    trainer_free(&t);
    return st;
}
