/* Scratch of the BLR layer ops: the transients shared by every layer that runs one
 * at a time (br_blr_shared) and what a layer's forward keeps for its backward
 * (br_blr_scratch: A, A', f16(x)). */
#include <stdlib.h>

#include "blr/blr_internal.h"
#include "ops/check.h"

static size_t round32(size_t x) { return (x + 31) / 32 * 32; }
static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

void br_blr_shared_free(br_blr_shared *sh) {
    if (!sh) return;
    br_buf *bufs[] = {sh->stage, sh->plane, sh->plane2, sh->act, sh->b, sh->rowmat};
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

br_status br_blr_shared_new(br_ctx *ctx, size_t ntok, size_t m, size_t n, size_t r, size_t paths,
                            br_blr_shared **out) {
    static const char fn[] = "br_blr_shared_new";
    BR_TRY(br_check_ctx(ctx));
    if (!out) return br_fail(ctx, BR_E_ARG, "%s: out is NULL", fn);
    *out = NULL;
    BR_TRY(br_check_dim(ctx, fn, "ntok", ntok));
    BR_TRY(br_check_dim(ctx, fn, "m", m));
    BR_TRY(br_check_dim(ctx, fn, "n", n));
    BR_TRY(br_check_dim(ctx, fn, "r", r));
    BR_TRY(br_check_dim(ctx, fn, "paths", paths));
    if (r % 32) return br_fail(ctx, BR_E_SHAPE, "%s: r = %zu is not a multiple of 32", fn, r);
    if (ntok > BR_MAX_ELEMS / 2 || m > BR_MAX_ELEMS / 2 || n > BR_MAX_ELEMS / 2)
        return br_fail(ctx, BR_E_OVERFLOW, "%s: ntok, m, n = %zu, %zu, %zu are too large", fn, ntok,
                       m, n);
    size_t R;
    BR_TRY(br_check_mul(ctx, fn, "paths·r", paths, r, &R));
    if (R > BR_MAX_ELEMS / 2)
        return br_fail(ctx, BR_E_OVERFLOW, "%s: paths·r = %zu is too large", fn, R);
    br_blr_shared *sh = calloc(1, sizeof *sh);
    if (!sh) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    sh->ctx = ctx;
    sh->ntok = ntok;
    sh->m = m;
    sh->n = n;
    sh->r = r;
    sh->paths = paths;
    size_t prows = br_pad_rows(ntok);
    size_t wide = max2(round32(m), round32(n));
    br_status st;
    if ((st = new_buf(ctx, fn, "pad_rows(ntok)·mpad", BR_F16, prows, round32(m), &sh->stage)) ||
        (st = new_buf(ctx, fn, "paths·r·max(mpad, npad)", BR_F16, R, wide, &sh->plane)) ||
        (st = new_buf(ctx, fn, "m·paths·r", BR_F16, m, R, &sh->plane2)) ||
        (st = new_buf(ctx, fn, "pad_rows(ntok)·paths·r", BR_F16, prows, R, &sh->act)) ||
        (st = new_buf(ctx, fn, "ntok·paths·r", BR_F32, ntok, R, &sh->b)) ||
        (st = new_buf(ctx, fn, "(m + n)·paths·r", BR_F32, m + n, R, &sh->rowmat)))
        goto fail;
    *out = sh;
    return BR_OK;
fail:
    br_blr_shared_free(sh);
    return st;
}

void br_blr_scratch_free(br_blr_scratch *s) {
    if (!s) return;
    br_buf_free(s->a);
    br_buf_free(s->mem);
    br_buf_free(s->act16);
    br_buf_free(s->x16);
    br_buf_free(s->mu);
    br_buf_free(s->nv);
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
    if (ntok > BR_MAX_ELEMS / 2)
        return br_fail(ctx, BR_E_OVERFLOW, "%s: ntok = %zu is too large", fn, ntok);
    size_t R = l->paths * l->r; /* < BR_MAX_ELEMS: br_blr_new checked paths·(m+r+n) */
    if (shared) {
        if (shared->ctx != ctx)
            return br_fail(ctx, BR_E_ARG, "%s: shared belongs to another context", fn);
        if (shared->ntok < ntok || shared->m < l->m || shared->n < l->n ||
            shared->paths * shared->r < R)
            return br_fail(ctx, BR_E_SIZE,
                           "%s: shared is for %zu tokens, m ≤ %zu, n ≤ %zu, paths·r ≤ %zu; the "
                           "scratch needs %zu tokens, m = %zu, n = %zu, paths·r = %zu",
                           fn, shared->ntok, shared->m, shared->n, shared->paths * shared->r, ntok,
                           l->m, l->n, R);
    }
    br_blr_scratch *s = calloc(1, sizeof *s);
    if (!s) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    s->layer = l;
    s->ntok = ntok;
    s->paths = l->paths;
    br_status st = BR_E_NOMEM;
    if (shared) {
        s->shared = shared;
    } else {
        if ((st = br_blr_shared_new(ctx, ntok, l->m, l->n, l->r, l->paths, &s->shared)) != BR_OK)
            goto fail;
        s->own_shared = 1;
    }
    size_t ar, prows = br_pad_rows(ntok);
    if ((st = br_check_mul(ctx, fn, "ntok·paths·r", ntok, R, &ar)) ||
        (st = br_buf_new(ctx, BR_F32, ar, &s->mem)) || (st = br_buf_view(s->mem, 0, ar, &s->a)) ||
        (st = new_buf(ctx, fn, "pad_rows(ntok)·paths·r", BR_F16, prows, R, &s->act16)) ||
        (st = new_buf(ctx, fn, "pad_rows(ntok)·npad", BR_F16, prows, l->npad, &s->x16)) ||
        (st = br_buf_view(s->shared->rowmat, 0, l->m * R, &s->mu)) ||
        (st = br_buf_view(s->shared->rowmat, l->m * R, l->n * R, &s->nv)))
        goto fail;
    *out = s;
    return BR_OK;
fail:
    br_blr_scratch_free(s);
    return st;
}
