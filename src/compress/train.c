/* Training one BLR layer to minimize its objective (objective.c).
 *
 * The original W becomes a frozen f16 plane (scaled by a power of two so that
 * its largest entry is near 1: the plane can hold any finite weight, and the
 * layer's f16 operands stay in range); its outputs y* on the objective's pool
 * and on the held-out inputs are computed once (br_plane_linear). Each step takes
 * the next batch of the pool (views, no copies), runs the layer forward fused with
 * the loss gradient dy = (ŷ − y*)·c, c = 1/rms(y*) (the loss ½‖ŷ − y*‖² scaled to
 * O(1): Adam and the sign optimizer do not care about the scale, the f16 operands
 * do) and the backward on it, then one optimizer step: Adam on h, ℓ, g with
 * relative steps, latent Adam on the signs. A pass over the batches is the whole
 * objective, so the loss of a batch is an estimate of it, not a fit to a sample.
 * The learning rates warm up linearly and decay on a cosine to 0. Every
 * eval_every steps the held-out criterion (the objective's data term on inputs
 * never trained on) is measured; the best state is kept, and training stops after
 * `patience` evaluations without a 0.1% gain. The result has its scales rounded
 * to f16, as the output stores them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/train.h"

struct br_trainer {
    br_ctx *ctx;
    const br_compress_opts *o;
    size_t m, n, kpad, rank, rpad, paths;
    size_t T, nbatch, last; /* tokens per step; batches; tokens of the last batch */
    double w_scale;         /* the plane holds W / w_scale (a power of two) */
    br_blr *layer;
    br_blr_scratch *scratch;
    br_buf *x_pool, *y_pool; /* [npool][n], [npool][m] */
    br_buf *x_eval, *y_eval; /* [neval][n], [neval][m], each token scaled by √w_t */
    br_buf *dy;              /* [T][m]: the loss gradient, or ŷ − y* when evaluating */
    /* every batch staged once (br_blr_stage) so no step stages x again: f16(x)
     * [nbatch][pad_rows(T)][stage_cols]; NULL when too large to hold twice */
    br_buf *x16_pool;
    br_buf **x16; /* [nbatch] views of the pool */
    size_t npool, neval;
    double *batch_norm2; /* Σ y*² of each batch */
    double eval_norm2;   /* Σ_t ‖ỹ_t‖² of the (scaled) held-out outputs */
    double *eval_y2;     /* [neval] ‖ỹ_t‖² */
    double *eval_w;      /* [neval] the per-token weights w_t (1: aggregate) */
    double eval_q2;      /* Σ_t ‖y_t‖² unscaled */
    float *resid;        /* [T][m] host copy of a residual chunk */
    br_blr_host pad;     /* host staging at the padded rank */
    double c;
    int all_zero; /* y* = 0 on every input: nothing to fit */
};

void br_trainer_free(br_trainer *t) {
    if (!t) return;
    br_blr_scratch_free(t->scratch);
    br_blr_free(t->layer);
    br_buf *bufs[] = {t->x_pool, t->y_pool, t->x_eval, t->y_eval, t->dy, t->x16_pool};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        br_buf_free(bufs[i]);
    for (size_t b = 0; t->x16 && b < t->nbatch; b++)
        br_buf_free(t->x16[b]);
    free(t->x16);
    free(t->batch_norm2);
    free(t->eval_y2);
    free(t->eval_w);
    free(t->resid);
    br_layer_host_free(&t->pad);
    free(t);
}

static br_status new_f32(br_ctx *ctx, size_t count, br_buf **out) {
    return br_buf_new(ctx, BR_F32, count ? count : 1, out);
}

static size_t batch_tokens(const br_trainer *t, size_t b) {
    return b + 1 == t->nbatch ? t->last : t->T;
}

/* y [rows][m] = W·x for x [rows][n], through the f16 plane [m][kpad] in chunks of T
 * rows: from the device copy xdev of x when n is a multiple of 32 (the plane's
 * width), else from the host's x padded to kpad columns with zeros. */
static br_status teacher(br_trainer *t, const br_buf *plane, const float *x, br_buf *xdev,
                         size_t rows, br_buf *y) {
    br_ctx *ctx = t->ctx;
    size_t T = t->T, n = t->n, kpad = t->kpad, m = t->m;
    const int direct = xdev && n == kpad;
    br_buf *xpad = NULL, *act16 = NULL, *xv = NULL, *yv = NULL;
    float *host = direct ? NULL : malloc(T * kpad * sizeof *host);
    br_status st =
        direct || host ? BR_OK : br_fail(ctx, BR_E_NOMEM, "teacher outputs: out of host memory");
    if (!st && !direct) st = new_f32(ctx, T * kpad, &xpad);
    if (!st) st = br_buf_new(ctx, BR_F16, br_pad_rows(T) * kpad, &act16);
    for (size_t r0 = 0; !st && r0 < rows; r0 += T) {
        size_t nr = rows - r0 < T ? rows - r0 : T;
        if (direct) {
            st = br_buf_view(xdev, r0 * n, nr * n, &xv);
        } else {
            for (size_t i = 0; i < nr; i++) {
                memcpy(host + i * kpad, x + (r0 + i) * n, n * sizeof *host);
                for (size_t j = n; j < kpad; j++)
                    host[i * kpad + j] = 0.0f;
            }
            st = br_buf_upload(xpad, 0, host, nr * kpad);
        }
        if (!st) st = br_buf_view(y, r0 * m, nr * m, &yv);
        if (!st) st = br_plane_linear(ctx, plane, direct ? xv : xpad, act16, yv, nr, m, kpad, 1.0f);
        br_buf_free(xv);
        br_buf_free(yv);
        xv = yv = NULL;
    }
    br_buf_free(xpad);
    br_buf_free(act16);
    free(host);
    return st;
}

/* Σ_t ‖ŷ_t − ỹ_t‖² over the held-out inputs for the layer as it is on the device;
 * per_token (NULL: not wanted) [neval] receives each token's sum. */
static br_status eval_sum(br_trainer *t, double *sum, double *per_token) {
    double num = 0;
    for (size_t r0 = 0; r0 < t->neval; r0 += t->T) {
        size_t nr = t->neval - r0 < t->T ? t->neval - r0 : t->T;
        br_buf *xv = NULL, *yv = NULL;
        br_status st = br_buf_view(t->x_eval, r0 * t->n, nr * t->n, &xv);
        if (!st) st = br_buf_view(t->y_eval, r0 * t->m, nr * t->m, &yv);
        /* ŷ − ỹ straight from the forward's epilogue */
        if (!st) {
            br_blr_fwd f = {.x = xv, .target = yv, .alpha = 1.0f, .out = t->dy, .ntok = nr};
            st = br_blr_forward(t->layer, t->scratch, &f);
        }
        double part = 0;
        if (!st && per_token) {
            st = br_buf_download(t->dy, 0, t->resid, nr * t->m);
            for (size_t i = 0; !st && i < nr; i++) {
                double s = 0;
                for (size_t k = 0; k < t->m; k++)
                    s += (double)t->resid[i * t->m + k] * t->resid[i * t->m + k];
                per_token[r0 + i] = s;
                part += s;
            }
        } else if (!st) {
            st = br_sumsq_host(t->ctx, t->dy, nr * t->m, &part);
        }
        br_buf_free(xv);
        br_buf_free(yv);
        BR_TRY(st);
        num += part;
    }
    *sum = num;
    return BR_OK;
}

static double criterion_of(const br_trainer *t, double sum) {
    return isfinite(sum) ? sum / t->eval_norm2 : INFINITY;
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

static double rms_of(const float *v, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)v[i] * v[i];
    return n ? sqrt(s / (double)n) : 0;
}

/* h, ℓ, g of each path scaled to one RMS (their product, Ŵ, unchanged), so none
 * drifts toward the f16 subnormals or overflow when stored. */
static void balance_scales(br_blr_host *L) {
    for (size_t p = 0; p < L->paths; p++) {
        br_blr_path_host *P = &L->path[p];
        double rh = rms_of(P->h, L->m), rg = rms_of(P->g, L->n), rl = rms_of(P->l, L->r);
        if (!(rh > 0) || !(rg > 0) || !(rl > 0)) continue;
        double c = cbrt(rh * rg * rl);
        for (size_t i = 0; i < L->m; i++)
            P->h[i] = (float)(P->h[i] * (c / rh));
        for (size_t j = 0; j < L->n; j++)
            P->g[j] = (float)(P->g[j] * (c / rg));
        for (size_t k = 0; k < L->r; k++)
            P->l[k] = (float)(P->l[k] * (c / rl));
    }
}

/* L (rank r, true scales) onto the device layer: padded to rpad (ℓ = 0 there),
 * h divided by w_scale. */
static br_status upload_layer(br_trainer *t, const br_blr_host *L) {
    size_t words = (t->rank + 31) / 32;
    for (size_t p = 0; p < L->paths; p++) {
        const br_blr_path_host *s = &L->path[p];
        br_blr_path_host *d = &t->pad.path[p];
        memcpy(d->bits_u, s->bits_u, t->m * words * sizeof *d->bits_u);
        memcpy(d->bits_v, s->bits_v, t->n * words * sizeof *d->bits_v);
        for (size_t i = 0; i < t->m; i++)
            d->h[i] = (float)(s->h[i] / t->w_scale);
        memcpy(d->l, s->l, t->rank * sizeof *d->l);
        for (size_t k = t->rank; k < t->rpad; k++)
            d->l[k] = 0.0f;
        memcpy(d->g, s->g, t->n * sizeof *d->g);
        BR_TRY(br_blr_set_path(t->layer, p, d->bits_u, d->bits_v, d->h, d->l, d->g));
    }
    return BR_OK;
}

/* The device layer into L (rank r): ℓ cut to r, bits past r cleared, h times
 * w_scale. */
static br_status download_layer(br_trainer *t, br_blr_host *L) {
    BR_TRY(br_blr_to_host(t->layer, &t->pad));
    size_t words = (t->rank + 31) / 32;
    uint32_t mask = t->rank % 32 ? (1u << (t->rank % 32)) - 1u : 0xffffffffu;
    for (size_t p = 0; p < L->paths; p++) {
        const br_blr_path_host *s = &t->pad.path[p];
        br_blr_path_host *d = &L->path[p];
        for (size_t i = 0; i < t->m * words; i++)
            d->bits_u[i] = (i % words == words - 1) ? s->bits_u[i] & mask : s->bits_u[i];
        for (size_t j = 0; j < t->n * words; j++)
            d->bits_v[j] = (j % words == words - 1) ? s->bits_v[j] & mask : s->bits_v[j];
        for (size_t i = 0; i < t->m; i++)
            d->h[i] = (float)(s->h[i] * t->w_scale);
        memcpy(d->l, s->l, t->rank * sizeof *d->l);
        memcpy(d->g, s->g, t->n * sizeof *d->g);
    }
    return BR_OK;
}

/* Copy of L's arrays into dst (same shapes, already allocated). */
static void copy_host(br_blr_host *dst, const br_blr_host *src) {
    size_t words = (src->r + 31) / 32;
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

/* Most bytes the staged copy of the training pool may take: past that each step
 * stages its own batch. */
#define STAGED_POOL_MAX_BYTES ((size_t)1 << 30)

static br_status stage_pool(br_trainer *t) {
    br_ctx *ctx = t->ctx;
    size_t n16 = br_pad_rows(t->T) * br_blr_stage_cols(t->layer), per = n16 * 2;
    if (per == 0 || t->nbatch > STAGED_POOL_MAX_BYTES / per) return BR_OK;
    t->x16 = calloc(t->nbatch, sizeof *t->x16);
    if (!t->x16) return br_fail(ctx, BR_E_NOMEM, "training: out of host memory");
    BR_TRY(br_buf_new(ctx, BR_F16, t->nbatch * n16, &t->x16_pool));
    for (size_t b = 0; b < t->nbatch; b++) {
        br_buf *xv = NULL;
        size_t nt = batch_tokens(t, b);
        BR_TRY(br_buf_view(t->x16_pool, b * n16, n16, &t->x16[b]));
        br_status st = br_buf_view(t->x_pool, b * t->T * t->n, nt * t->n, &xv);
        if (!st) st = br_blr_stage(t->layer, xv, t->x16[b], nt);
        br_buf_free(xv);
        BR_TRY(st);
    }
    return BR_OK;
}

/* The held-out set: its outputs, per-token weights (each token scaled by √w_t on
 * the device, so that the criterion is one sum of squares there). */
static br_status setup_eval(br_trainer *t, const br_buf *plane, const br_train_data *d) {
    br_ctx *ctx = t->ctx;
    size_t n = t->n, m = t->m, ne = t->neval;
    BR_TRY(new_f32(ctx, ne * n, &t->x_eval));
    BR_TRY(new_f32(ctx, ne * m, &t->y_eval));
    BR_TRY(br_buf_upload(t->x_eval, 0, d->x_eval, ne * n));
    BR_TRY(teacher(t, plane, d->x_eval, t->x_eval, ne, t->y_eval));
    t->eval_y2 = malloc(ne * sizeof *t->eval_y2);
    t->eval_w = malloc(ne * sizeof *t->eval_w);
    float *y = malloc(ne * m * sizeof *y), *x = NULL;
    if (!t->eval_y2 || !t->eval_w || !y) {
        free(y);
        return br_fail(ctx, BR_E_NOMEM, "training: out of host memory");
    }
    br_status st = br_buf_download(t->y_eval, 0, y, ne * m);
    double floor2 = d->floor2 / (t->w_scale * t->w_scale); /* in the plane's units */
    t->eval_q2 = 0;
    t->eval_norm2 = 0;
    for (size_t i = 0; !st && i < ne; i++) {
        double q = 0;
        for (size_t k = 0; k < m; k++)
            q += (double)y[i * m + k] * y[i * m + k];
        t->eval_q2 += q;
        t->eval_w[i] = floor2 > 0 ? 1.0 / (q > floor2 ? q : floor2) : 1.0;
        t->eval_y2[i] = q * t->eval_w[i];
        t->eval_norm2 += t->eval_y2[i];
    }
    if (!st && floor2 > 0) {
        x = malloc(ne * n * sizeof *x);
        if (!x) st = br_fail(ctx, BR_E_NOMEM, "training: out of host memory");
        for (size_t i = 0; !st && i < ne; i++) {
            float s = (float)sqrt(t->eval_w[i]);
            for (size_t j = 0; j < n; j++)
                x[i * n + j] = s * d->x_eval[i * n + j];
            for (size_t k = 0; k < m; k++)
                y[i * m + k] *= s;
        }
        if (!st) st = br_buf_upload(t->x_eval, 0, x, ne * n);
        if (!st) st = br_buf_upload(t->y_eval, 0, y, ne * m);
        /* ỹ² recomputed from the f32 values as uploaded */
        t->eval_norm2 = 0;
        for (size_t i = 0; !st && i < ne; i++) {
            double q = 0;
            for (size_t k = 0; k < m; k++)
                q += (double)y[i * m + k] * y[i * m + k];
            t->eval_y2[i] = q;
            t->eval_norm2 += q;
        }
    }
    free(x);
    free(y);
    return st;
}

br_status br_trainer_new(br_ctx *ctx, const float *w, size_t m, size_t n, size_t rank, size_t paths,
                         const br_train_data *d, const br_compress_opts *o, br_trainer **out) {
    *out = NULL;
    br_trainer *t = calloc(1, sizeof *t);
    if (!t) return br_fail(ctx, BR_E_NOMEM, "training: out of host memory");
    t->ctx = ctx;
    t->o = o;
    t->m = m;
    t->n = n;
    t->rank = rank;
    t->rpad = (rank + 31) / 32 * 32;
    t->paths = paths;
    t->kpad = (n + 31) / 32 * 32;
    t->npool = d->obj->npool;
    t->neval = d->neval;
    size_t T = o->tokens ? o->tokens : 512;
    if (T > t->npool) T = t->npool;
    t->T = T;
    t->nbatch = (t->npool + T - 1) / T;
    t->last = t->npool - (t->nbatch - 1) * T;
    br_status st = br_layer_host_alloc(ctx, &t->pad, m, n, t->rpad, paths);
    t->resid = malloc(T * m * sizeof *t->resid); /* eval chunks are of T tokens too */
    if (!st && !t->resid) st = br_fail(ctx, BR_E_NOMEM, "training: out of host memory");
    /* W / w_scale, w_scale the power of two nearest max|W| */
    double wmax = 0;
    for (size_t i = 0; i < m * n; i++)
        if (fabs(w[i]) > wmax) wmax = fabs(w[i]);
    t->w_scale = wmax > 0 ? exp2(round(log2(wmax))) : 1.0;
    br_buf *plane = NULL;
    uint16_t *w16 = st ? NULL : malloc(m * t->kpad * sizeof *w16);
    if (!st && !w16) st = br_fail(ctx, BR_E_NOMEM, "training: out of host memory");
    float *row = st ? NULL : malloc(n * sizeof *row);
    if (!st && !row) st = br_fail(ctx, BR_E_NOMEM, "training: out of host memory");
    if (!st) {
        const float inv = (float)(1.0 / t->w_scale); /* a power of two: exact */
        for (size_t i = 0; i < m; i++) {
            for (size_t j = 0; j < n; j++)
                row[j] = w[i * n + j] * inv;
            br_half_from_float_n(row, w16 + i * t->kpad, n);
            for (size_t j = n; j < t->kpad; j++)
                w16[i * t->kpad + j] = 0;
        }
        st = br_buf_new(ctx, BR_F16, m * t->kpad, &plane);
    }
    free(row);
    if (!st) st = br_buf_upload(plane, 0, w16, m * t->kpad);
    free(w16);
    if (!st) st = new_f32(ctx, t->npool * n, &t->x_pool);
    if (!st) st = br_buf_upload(t->x_pool, 0, d->obj->pool, t->npool * n);
    if (!st) st = new_f32(ctx, t->npool * m, &t->y_pool);
    if (!st) st = new_f32(ctx, T * m, &t->dy);
    if (!st) st = teacher(t, plane, d->obj->pool, t->x_pool, t->npool, t->y_pool);
    if (!st) st = setup_eval(t, plane, d);
    br_buf_free(plane);
    /* Σ y*² per batch */
    if (!st) {
        t->batch_norm2 = calloc(t->nbatch, sizeof *t->batch_norm2);
        if (!t->batch_norm2) st = br_fail(ctx, BR_E_NOMEM, "training: out of host memory");
    }
    double pool_norm2 = 0;
    for (size_t b = 0; !st && b < t->nbatch; b++) {
        br_buf *yv = NULL;
        st = br_buf_view(t->y_pool, b * T * m, batch_tokens(t, b) * m, &yv);
        if (!st) st = br_sumsq_host(ctx, yv, batch_tokens(t, b) * m, &t->batch_norm2[b]);
        br_buf_free(yv);
        pool_norm2 += t->batch_norm2[b];
    }
    if (!st && (!isfinite(pool_norm2) || !isfinite(t->eval_norm2)))
        st = br_fail(ctx, BR_E_NONFINITE,
                     "training: the original layer's outputs are not finite (Σy² = %g on the "
                     "training objective's inputs, %g held out)",
                     pool_norm2, t->eval_norm2);
    if (!st && pool_norm2 == 0 && t->eval_norm2 == 0) t->all_zero = 1; /* W = 0: exact */
    if (!st && !t->all_zero && (!(pool_norm2 > 0) || !(t->eval_norm2 > 0)))
        st = br_fail(ctx, BR_E_NONFINITE,
                     "training: the original layer's outputs are all zero on the %s inputs",
                     pool_norm2 > 0 ? "held-out" : "training");
    if (!st && !t->all_zero) {
        t->c = 1.0 / sqrt(pool_norm2 / (double)(t->npool * m));
        int train_signs = o->steps > 0 && o->sign_lr > 0;
        st = br_blr_new(ctx, m, n, t->rpad, paths, train_signs ? BR_BLR_SIGN_GRADS : 0, &t->layer);
        if (!st) st = br_blr_scratch_new(t->layer, T, NULL, &t->scratch);
        if (!st) st = stage_pool(t);
    }
    if (st) {
        br_trainer_free(t);
        return st;
    }
    *out = t;
    return BR_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double quantile(const double *sorted, size_t count, double q) {
    if (!count) return 0;
    double pos = q * (double)(count - 1);
    size_t i = (size_t)pos;
    double f = pos - (double)i;
    return i + 1 < count ? sorted[i] * (1 - f) + sorted[i + 1] * f : sorted[count - 1];
}

br_status br_trainer_measure(br_trainer *t, const br_blr_host *L, double *criterion,
                             double *aggregate, br_token_err *tok) {
    if (t->all_zero) {
        if (criterion) *criterion = 0;
        if (aggregate) *aggregate = 0;
        if (tok) memset(tok, 0, sizeof *tok);
        return BR_OK;
    }
    BR_TRY(upload_layer(t, L));
    double *e2 = malloc((t->neval ? t->neval : 1) * sizeof *e2);
    if (!e2) return br_fail(t->ctx, BR_E_NOMEM, "training: out of host memory");
    double sum = 0;
    br_status st = eval_sum(t, &sum, e2);
    if (!st) {
        if (criterion) *criterion = criterion_of(t, sum);
        double agg = 0;
        size_t k = 0;
        for (size_t i = 0; i < t->neval; i++) {
            agg += e2[i] / t->eval_w[i];
            if (t->eval_y2[i] > 0) e2[k++] = sqrt(e2[i] / t->eval_y2[i]);
        }
        if (aggregate) *aggregate = isfinite(agg) ? sqrt(agg / t->eval_q2) : INFINITY;
        qsort(e2, k, sizeof *e2, cmp_double);
        if (tok) {
            tok->p50 = quantile(e2, k, 0.5);
            tok->p90 = quantile(e2, k, 0.9);
            tok->p99 = quantile(e2, k, 0.99);
        }
    }
    free(e2);
    return st;
}

/* Learning-rate multiplier of step s (0-based): linear warm-up, cosine decay to 0. */
static double schedule(int s, int steps, int warmup) {
    if (warmup > 0 && s < warmup) return (double)(s + 1) / (double)warmup;
    double span = (double)(steps - warmup);
    double prog = span > 0 ? (double)(s - warmup) / span : 1.0;
    return 0.5 * (1.0 + cos(3.14159265358979323846 * prog));
}

/* A curve's next point (every `every` steps). */
static br_status log_point(float **curve, size_t *count, int *every_out, int every, size_t cap,
                           double v) {
    if (!*curve) {
        *curve = malloc(cap * sizeof **curve);
        if (!*curve) return BR_E_NOMEM;
        *every_out = every;
    }
    if (*count < cap) (*curve)[(*count)++] = (float)v;
    return BR_OK;
}

/* The optimizer of the device layer, its sign latents from the initialization's
 * factors (columns past the rank: tiny values of their bits' signs). */
static br_status make_opt(br_trainer *t, const br_blr_host *L, const br_svid_factors *f,
                          br_blr_opt **opt) {
    const br_compress_opts *o = t->o;
    int train_signs = o->sign_lr > 0;
    br_opt_cfg cfg = br_opt_defaults();
    cfg.lr = o->lr;
    /* relative steps lr·max(|w|, ρ): ρ a small fraction of the scales' size */
    double c_bal = rms_of(L->path[0].h, t->m) / t->w_scale;
    float rho = (float)(0.02 * (c_bal > 0 ? c_bal : 1.0));
    cfg.rel_floor[0] = cfg.rel_floor[1] = cfg.rel_floor[2] = rho;
    cfg.sign_mode = train_signs ? BR_SIGN_LATENT : BR_SIGN_OFF;
    cfg.sign_lr = o->sign_lr;
    BR_TRY(br_blr_opt_new(t->layer, &cfg, opt));
    if (!train_signs || !f) return BR_OK;
    size_t rows_max = t->m > t->n ? t->m : t->n;
    float *lat = malloc(rows_max * t->rpad * sizeof *lat);
    if (!lat) return br_fail(t->ctx, BR_E_NOMEM, "training: out of host memory");
    br_status st = BR_OK;
    for (size_t p = 0; !st && p < t->paths; p++)
        for (int which = 0; !st && which < 2; which++) {
            const float *src = which ? f->v[p] : f->u[p];
            size_t rows = which ? t->n : t->m, words = t->rpad / 32;
            const uint32_t *bits = which ? t->pad.path[p].bits_v : t->pad.path[p].bits_u;
            if (!src) continue;
            double mean = 0;
            for (size_t e = 0; e < rows * t->rank; e++)
                mean += fabs((double)src[e]);
            float tiny = (float)(1e-3 * (mean > 0 ? mean / (double)(rows * t->rank) : 1.0));
            for (size_t i = 0; i < rows; i++)
                for (size_t k = 0; k < t->rpad; k++)
                    lat[i * t->rpad + k] =
                        k < t->rank ? src[i * t->rank + k] : tiny * br_bit_sign(bits, words, i, k);
            st = br_blr_opt_init_latent(*opt, p, which, lat);
        }
    free(lat);
    return st;
}

/* ℓ of the padding columns back to 0 after a step. */
static br_status zero_padding(br_trainer *t) {
    if (t->rpad == t->rank) return BR_OK;
    for (size_t p = 0; p < t->paths; p++)
        BR_TRY(br_buf_fill(br_blr_buf(t->layer, p, BR_BLR_L), t->rank, t->rpad - t->rank, 0));
    return BR_OK;
}

br_status br_trainer_train(br_trainer *t, br_blr_host *L, const br_svid_factors *f,
                           br_layer_report *rep, br_train_hook hook, void *user) {
    br_ctx *ctx = t->ctx;
    const br_compress_opts *o = t->o;
    rep->steps = 0;
    rep->best_step = 0;
    rep->stop = BR_STOP_NONE;
    if (t->all_zero) {
        rep->err_init = rep->err_trained = 0;
        memset(&rep->tok_init, 0, sizeof rep->tok_init);
        memset(&rep->tok_trained, 0, sizeof rep->tok_trained);
        return BR_OK;
    }
    br_blr_host best = {0};
    br_blr_opt *opt = NULL;
    round_scales(L);
    double crit = 0;
    br_status st = br_trainer_measure(t, L, &crit, &rep->err_init, &rep->tok_init);
    if (!st) st = br_layer_host_alloc(ctx, &best, L->m, L->n, L->r, L->paths);
    if (!st) copy_host(&best, L);
    int steps = o->steps > 0 ? o->steps : 0;
    int eval_every = o->eval_every > 0 ? o->eval_every : 25;
    if (!st) {
        size_t cap = (size_t)(steps / eval_every + 2);
        if (log_point(&rep->eval, &rep->n_eval, &rep->eval_every, eval_every, cap, crit))
            st = br_fail(ctx, BR_E_NOMEM, "training: out of host memory");
    }
    if (!st && steps > 0) st = make_opt(t, L, f, &opt);
    if (st) goto done;
    double best_crit = crit;
    int stale = 0, refused_in_row = 0;
    int warmup = o->warmup >= 0 ? o->warmup : steps / 20;
    if (warmup >= steps) warmup = steps / 2;
    int every = steps > 200 ? (steps + 199) / 200 : 1;
    size_t cap = (size_t)(steps / every + 2);
    /* f16 staging of dy (the backward stages dy·gs; h lives in the other operand): a
     * power of two bringing it near 1, rms(dy) ≈ the relative error */
    double err = sqrt(crit);
    double gs = exp2(round(log2(1.0 / (err > 1e-3 ? err : 1e-3))));
    if (gs < 1.0) gs = 1.0;
    if (gs > 1048576.0) gs = 1048576.0;
    if (steps > 0) rep->stop = BR_STOP_STEPS;

    double lr_mult = 0;
    for (int s = 0; s < steps; s++) {
        size_t b = (size_t)s % t->nbatch, T = batch_tokens(t, b);
        br_buf *xv = NULL, *yv = NULL;
        /* the schedule in steps of 1%: each change is a (synchronous) upload */
        double mult = schedule(s, steps, warmup);
        if (s == 0 || fabs(mult - lr_mult) > 0.01 * (lr_mult > 0.05 ? lr_mult : 0.05)) {
            lr_mult = mult;
            st = br_blr_opt_set_lr(opt, (float)(o->lr * mult), (float)(o->sign_lr * mult));
        }
        if (!st) st = br_buf_view(t->x_pool, b * t->T * t->n, T * t->n, &xv);
        if (!st) st = br_buf_view(t->y_pool, b * t->T * t->m, T * t->m, &yv);
        /* the gradient goes to the backward staged in f16; in f32 only when logged */
        const int logged = s % every == 0 || s == steps - 1;
        if (!st) {
            br_blr_fwd fwd = {.x = t->x16_pool ? NULL : xv,
                              .x16 = t->x16_pool ? t->x16[b] : NULL,
                              .target = yv,
                              .alpha = (float)t->c,
                              .gscale = (float)gs,
                              .out = logged ? t->dy : NULL,
                              .ntok = T};
            st = br_blr_forward(t->layer, t->scratch, &fwd);
        }
        if (!st) st = br_blr_backward(t->layer, t->scratch, xv, NULL, NULL, T, (float)gs, 0);
        double loss = -1;
        if (!st && logged) {
            double sq = 0;
            st = br_sumsq_host(ctx, t->dy, T * t->m, &sq);
            loss = sq / (t->c * t->c * t->batch_norm2[b]);
            if (!st && log_point(&rep->loss, &rep->n_loss, &rep->loss_every, every, cap, loss))
                st = br_fail(ctx, BR_E_NOMEM, "training: out of host memory");
        }
        if (!st) {
            st = br_blr_opt_step(opt);
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
        if (!st) st = zero_padding(t);
        br_buf_free(xv);
        br_buf_free(yv);
        if (st) goto done;
        rep->steps = s + 1;
        if (hook && hook(user, s + 1, steps, loss)) {
            st = br_fail(ctx, BR_E_STATE, "cancelled");
            goto done;
        }
        if ((s + 1) % eval_every == 0 || s + 1 == steps) {
            double sum = 0;
            if ((st = eval_sum(t, &sum, NULL))) goto done;
            crit = criterion_of(t, sum);
            log_point(&rep->eval, &rep->n_eval, &rep->eval_every, eval_every,
                      (size_t)(steps / eval_every + 2), crit);
            if (crit < best_crit * (1.0 - 2e-3)) /* 0.1% of the error: 0.2% of its square */
                stale = 0;
            else
                stale++;
            if (crit < best_crit) {
                best_crit = crit;
                rep->best_step = s + 1;
                if ((st = download_layer(t, &best))) goto done;
            }
            if (o->patience > 0 && stale >= o->patience) {
                rep->stop = BR_STOP_PLATEAU; /* a plateau: stop early */
                break;
            }
        }
    }
    /* the best state, scales balanced and rounded to f16 as stored (the
     * initialization, when no step beat it, as it was) */
    copy_host(L, &best);
    if (rep->best_step > 0) {
        balance_scales(L);
        round_scales(L);
    }
    st = br_trainer_measure(t, L, NULL, &rep->err_trained, &rep->tok_trained);
done:
    br_blr_opt_free(opt);
    br_layer_host_free(&best);
    return st;
}
