/* Scratch of the BLR layer ops: the transients shared by every layer that runs one
 * at a time (br_blr_shared) and a layer's own a and c per path (br_blr_scratch),
 * which the backward reads after the forward. */
#include <stdlib.h>

#include "blr/blr_internal.h"
#include "ops/check.h"

static size_t round32(size_t x) { return (x + 31) / 32 * 32; }
static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

void br_blr_shared_free(br_blr_shared *sh) {
    if (!sh) return;
    br_buf *bufs[] = {sh->stage, sh->t1, sh->t2, sh->t_dy, sh->t_a, sh->t_x, sh->t_b, sh->gtmp};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        br_buf_free(bufs[i]);
    free(sh);
}

/* A new buffer of a·b elements (overflow-checked). */
static br_status new_buf(br_ctx *ctx, const char *fn, const char *what, br_dtype dt, size_t a,
                         size_t b, br_buf **out) {
    size_t n;
    BR_TRY(br_check_mul(ctx, fn, what, a, b, &n));
    return br_buf_new(ctx, dt, n, out);
}

br_status br_blr_shared_new(br_ctx *ctx, size_t ntok, size_t m, size_t n, size_t r, unsigned flags,
                            br_blr_shared **out) {
    static const char fn[] = "br_blr_shared_new";
    BR_TRY(br_check_ctx(ctx));
    if (!out) return br_fail(ctx, BR_E_ARG, "%s: out is NULL", fn);
    *out = NULL;
    BR_TRY(br_check_dim(ctx, fn, "ntok", ntok));
    BR_TRY(br_check_dim(ctx, fn, "m", m));
    BR_TRY(br_check_dim(ctx, fn, "n", n));
    BR_TRY(br_check_dim(ctx, fn, "r", r));
    if (r % 32) return br_fail(ctx, BR_E_SHAPE, "%s: r = %zu is not a multiple of 32", fn, r);
    if (ntok > BR_MAX_ELEMS / 2 || m > BR_MAX_ELEMS / 2 || n > BR_MAX_ELEMS / 2)
        return br_fail(ctx, BR_E_OVERFLOW, "%s: ntok, m, n = %zu, %zu, %zu are too large", fn, ntok,
                       m, n);
    if (flags & ~(BR_BLR_SIGN_GRADS | BR_BLR_CURVATURE))
        return br_fail(ctx, BR_E_ARG, "%s: unknown flags 0x%x", fn, flags);
    if (flags & BR_BLR_CURVATURE) flags |= BR_BLR_SIGN_GRADS;
    br_blr_shared *sh = calloc(1, sizeof *sh);
    if (!sh) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    sh->ctx = ctx;
    sh->ntok = ntok;
    sh->m = m;
    sh->n = n;
    sh->r = r;
    sh->flags = flags;
    size_t prows = br_pad_rows(ntok), tpad = br_pad_tokens(ntok);
    size_t wide = max2(max2(round32(m), round32(n)), r);
    br_status st;
    if ((st = new_buf(ctx, fn, "pad_rows(ntok)·max(m, n, r)", BR_F16, prows, wide, &sh->stage)) ||
        (st = new_buf(ctx, fn, "ntok·n", BR_F32, ntok, n, &sh->t1)) ||
        (st = new_buf(ctx, fn, "ntok·r", BR_F32, ntok, r, &sh->t2)))
        goto fail;
    if (flags & BR_BLR_SIGN_GRADS) {
        if ((st = new_buf(ctx, fn, "pad_rows(m)·pad_tokens(ntok)", BR_F16, br_pad_rows(m), tpad,
                          &sh->t_dy)) ||
            (st = new_buf(ctx, fn, "pad_rows(r)·pad_tokens(ntok)", BR_F16, br_pad_rows(r), tpad,
                          &sh->t_a)) ||
            (st = new_buf(ctx, fn, "pad_rows(n)·pad_tokens(ntok)", BR_F16, br_pad_rows(n), tpad,
                          &sh->t_x)) ||
            (st = new_buf(ctx, fn, "pad_rows(r)·pad_tokens(ntok)", BR_F16, br_pad_rows(r), tpad,
                          &sh->t_b)) ||
            (st = new_buf(ctx, fn, "max(m, n)·r", BR_F32, max2(m, n), r, &sh->gtmp)))
            goto fail;
    }
    *out = sh;
    return BR_OK;
fail:
    br_blr_shared_free(sh);
    return st;
}

void br_blr_scratch_free(br_blr_scratch *s) {
    if (!s) return;
    if (s->a)
        for (size_t p = 0; p < s->paths; p++)
            br_buf_free(s->a[p]);
    if (s->c)
        for (size_t p = 0; p < s->paths; p++)
            br_buf_free(s->c[p]);
    free(s->a);
    free(s->c);
    br_buf_free(s->mem);
    if (s->own_shared) br_blr_shared_free(s->shared);
    free(s);
}

br_status br_blr_scratch_new(const br_blr *l, size_t ntok, br_blr_shared *shared,
                             br_blr_scratch **out) {
    static const char fn[] = "br_blr_scratch_new";
    if (!l) return BR_E_ARG;
    br_ctx *ctx = l->ctx;
    if (!out) return br_fail(ctx, BR_E_ARG, "%s: out is NULL", fn);
    *out = NULL;
    BR_TRY(br_check_dim(ctx, fn, "ntok", ntok));
    if (shared) {
        if (shared->ctx != ctx)
            return br_fail(ctx, BR_E_ARG, "%s: shared belongs to another context", fn);
        if (shared->ntok < ntok || shared->m < l->m || shared->n < l->n || shared->r < l->r)
            return br_fail(ctx, BR_E_SIZE,
                           "%s: shared is for %zu tokens, m ≤ %zu, n ≤ %zu, r ≤ %zu; the scratch "
                           "needs %zu tokens, m = %zu, n = %zu, r = %zu",
                           fn, shared->ntok, shared->m, shared->n, shared->r, ntok, l->m, l->n,
                           l->r);
        if ((l->flags & BR_BLR_SIGN_GRADS) && !(shared->flags & BR_BLR_SIGN_GRADS))
            return br_fail(ctx, BR_E_ARG,
                           "%s: the layer forms sign gradients, shared was made without "
                           "BR_BLR_SIGN_GRADS",
                           fn);
    }
    br_blr_scratch *s = calloc(1, sizeof *s);
    if (!s) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    s->layer = l;
    s->ntok = ntok;
    s->paths = l->paths;
    br_status st = BR_E_NOMEM;
    s->a = calloc(l->paths, sizeof *s->a);
    s->c = calloc(l->paths, sizeof *s->c);
    if (!s->a || !s->c) {
        br_fail(ctx, st, "%s: out of host memory", fn);
        goto fail;
    }
    if (shared) {
        s->shared = shared;
    } else {
        if ((st = br_blr_shared_new(ctx, ntok, l->m, l->n, l->r, l->flags, &s->shared)) != BR_OK)
            goto fail;
        s->own_shared = 1;
    }
    size_t per, ar, cm;
    if ((st = br_check_mul(ctx, fn, "ntok·r", ntok, l->r, &ar)) ||
        (st = br_check_mul(ctx, fn, "ntok·m", ntok, l->m, &cm)) ||
        (st = br_check_mul(ctx, fn, "paths·ntok·(r+m)", l->paths, ar + cm, &per)) ||
        (st = br_buf_new(ctx, BR_F32, per, &s->mem)))
        goto fail;
    for (size_t p = 0; p < l->paths; p++)
        if ((st = br_buf_view(s->mem, p * (ar + cm), ar, &s->a[p])) ||
            (st = br_buf_view(s->mem, p * (ar + cm) + ar, cm, &s->c[p])))
            goto fail;
    *out = s;
    return BR_OK;
fail:
    br_blr_scratch_free(s);
    return st;
}
