/* The BLR layer object: its device buffers (parameters, gradients, bitmaps,
 * curvature sums) as one allocation each with per-path views and views of each
 * part over every path, host transfers of a path's factors, and zeroing the
 * gradients. */
#include <stdlib.h>
#include <string.h>

#include "blr/blr_internal.h"
#include "ops/check.h"

static size_t round32(size_t x) { return (x + 31) / 32 * 32; }

void br_blr_free(br_blr *l) {
    if (!l) return;
    if (l->path)
        for (size_t p = 0; p < l->paths; p++) {
            for (int i = 0; i < BR_BLR_NPARTS; i++)
                br_buf_free(l->path[p].part[i]);
            br_buf_free(l->path[p].bits_u_pad);
            br_buf_free(l->path[p].bits_v_pad);
        }
    free(l->path);
    for (int i = 0; i < BR_BLR_NPARTS; i++)
        br_buf_free(l->span[i]);
    br_buf_free(l->params);
    br_buf_free(l->rownorm_u);
    br_buf_free(l->rownorm_v);
    br_buf_free(l->grads);
    br_buf_free(l->bits);
    br_buf_free(l->curv);
    free(l);
}

/* Where a part lies: path p's is `count` elements of buf from off + p·stride
 * (stride 0: one part the paths share); buf NULL where the layer has none. */
typedef struct part_place {
    br_buf *buf;
    size_t off, count, stride;
} part_place;

static part_place place(const br_blr *l, br_blr_part part) {
    size_t m = l->m, n = l->n, r = l->r, w = l->words, pl = l->path_len;
    size_t bs = (l->mpad + l->npad) * w, gs = (m + n) * r, go = br_blr_sign_grad_off(l, 0);
    int sign = (l->flags & BR_BLR_SIGN_GRADS) != 0, curv = (l->flags & BR_BLR_CURVATURE) != 0;
    part_place none = {NULL, 0, 0, 0};
    switch (part) {
    case BR_BLR_H: return (part_place){l->params, 0, m, pl};
    case BR_BLR_L: return (part_place){l->params, m, r, pl};
    case BR_BLR_G: return (part_place){l->params, m + r, n, pl};
    case BR_BLR_DH: return (part_place){l->grads, 0, m, pl};
    case BR_BLR_DL: return (part_place){l->grads, m, r, pl};
    case BR_BLR_DG: return (part_place){l->grads, m + r, n, pl};
    case BR_BLR_BITS_U: return (part_place){l->bits, 0, m * w, bs};
    case BR_BLR_BITS_V: return (part_place){l->bits, l->mpad * w, n * w, bs};
    case BR_BLR_GU: return sign ? (part_place){l->grads, go, m * r, gs} : none;
    case BR_BLR_GV: return sign ? (part_place){l->grads, go + m * r, n * r, gs} : none;
    case BR_BLR_SUM_A2: return curv ? (part_place){l->curv, 0, r, r} : none;
    case BR_BLR_SUM_X2: return curv ? (part_place){l->curv, l->paths * r, n, 0} : none;
    }
    return none;
}

static br_status make_views(br_blr *l) {
    for (int i = 0; i < BR_BLR_NPARTS; i++) {
        part_place pl = place(l, (br_blr_part)i);
        if (!pl.buf) continue;
        for (size_t p = 0; p < l->paths; p++)
            BR_TRY(br_buf_view(pl.buf, pl.off + p * pl.stride, pl.count, &l->path[p].part[i]));
        BR_TRY(br_buf_view(pl.buf, pl.off, (l->paths - 1) * pl.stride + pl.count, &l->span[i]));
        l->span_stride[i] = pl.stride;
    }
    if (l->flags & BR_BLR_SIGN_GRADS) {
        size_t no = br_blr_rownorm_off(l, 0), mn = l->m + l->n, last = (l->paths - 1) * mn;
        BR_TRY(br_buf_view(l->grads, no, last + l->m, &l->rownorm_u));
        BR_TRY(br_buf_view(l->grads, no + l->m, last + l->n, &l->rownorm_v));
    }
    size_t w = l->words;
    for (size_t p = 0; p < l->paths; p++) {
        size_t bo = p * (l->mpad + l->npad) * w;
        BR_TRY(br_buf_view(l->bits, bo, l->mpad * w, &l->path[p].bits_u_pad));
        BR_TRY(br_buf_view(l->bits, bo + l->mpad * w, l->npad * w, &l->path[p].bits_v_pad));
    }
    return BR_OK;
}

br_status br_blr_new(br_ctx *ctx, size_t m, size_t n, size_t r, size_t paths, unsigned flags,
                     br_blr **out) {
    static const char fn[] = "br_blr_new";
    BR_TRY(br_check_ctx(ctx));
    if (!out) return br_fail(ctx, BR_E_ARG, "%s: out is NULL", fn);
    *out = NULL;
    BR_TRY(br_check_dim(ctx, fn, "m", m));
    BR_TRY(br_check_dim(ctx, fn, "n", n));
    BR_TRY(br_check_dim(ctx, fn, "r", r));
    BR_TRY(br_check_dim(ctx, fn, "paths", paths));
    if (r % 32) return br_fail(ctx, BR_E_SHAPE, "%s: r = %zu is not a multiple of 32", fn, r);
    if (flags & ~(BR_BLR_SIGN_GRADS | BR_BLR_CURVATURE))
        return br_fail(ctx, BR_E_ARG, "%s: unknown flags 0x%x", fn, flags);
    if (flags & BR_BLR_CURVATURE) flags |= BR_BLR_SIGN_GRADS;
    /* every size the layer and its scratch use must stay below BR_MAX_ELEMS */
    size_t mn = m + n, path_len = m + r + n, plen, mnr, sgl = 0, bits_len, cur = 0, tmp;
    if (m > BR_MAX_ELEMS / 4 || n > BR_MAX_ELEMS / 4 || r > BR_MAX_ELEMS / 4)
        return br_fail(ctx, BR_E_OVERFLOW, "%s: m, n, r = %zu, %zu, %zu are too large", fn, m, n,
                       r);
    BR_TRY(br_check_mul(ctx, fn, "paths·(m+r+n)", paths, path_len, &plen));
    BR_TRY(br_check_mul(ctx, fn, "(m+n)·r", mn, r, &mnr));
    BR_TRY(br_check_mul(ctx, fn, "(mpad+npad)·r/32", round32(m) + round32(n), r / 32, &tmp));
    BR_TRY(br_check_mul(ctx, fn, "paths·(mpad+npad)·r/32", paths, tmp, &bits_len));
    if (flags & BR_BLR_SIGN_GRADS) {
        BR_TRY(br_check_mul(ctx, fn, "paths·(m+n)·r", paths, mnr, &sgl));
        size_t norms; /* the row norms of G_U and G_V: paths·(m + n) ≤ paths·(m+n)·r */
        BR_TRY(br_check_mul(ctx, fn, "paths·(m+n)", paths, mn, &norms));
        if (norms > BR_MAX_ELEMS - sgl)
            return br_fail(ctx, BR_E_OVERFLOW, "%s: the sign gradients exceed %zu", fn,
                           (size_t)BR_MAX_ELEMS);
        sgl += norms;
        if (sgl > BR_MAX_ELEMS - plen)
            return br_fail(ctx, BR_E_OVERFLOW, "%s: the gradients (%zu + %zu) exceed %zu", fn, plen,
                           sgl, (size_t)BR_MAX_ELEMS);
    }
    if (flags & BR_BLR_CURVATURE) {
        BR_TRY(br_check_mul(ctx, fn, "paths·r", paths, r, &cur));
        cur += n;
    }
    br_blr *l = calloc(1, sizeof *l);
    if (!l) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    l->ctx = ctx;
    l->m = m;
    l->n = n;
    l->r = r;
    l->paths = paths;
    l->words = r / 32;
    l->mpad = round32(m);
    l->npad = round32(n);
    l->flags = flags;
    l->path_len = path_len;
    l->grads_len = plen + sgl;
    br_status st = BR_E_NOMEM;
    l->path = calloc(paths, sizeof *l->path);
    if (!l->path) {
        br_fail(ctx, st, "%s: out of host memory", fn);
        goto fail;
    }
    if ((st = br_buf_new(ctx, BR_F32, plen, &l->params)) != BR_OK ||
        (st = br_buf_new(ctx, BR_F32, l->grads_len, &l->grads)) != BR_OK ||
        (st = br_buf_new(ctx, BR_U32, bits_len, &l->bits)) != BR_OK ||
        (cur && (st = br_buf_new(ctx, BR_F32, cur, &l->curv)) != BR_OK) ||
        (st = make_views(l)) != BR_OK)
        goto fail;
    if ((st = br_buf_fill(l->params, 0, plen, 0)) != BR_OK ||
        (st = br_buf_fill(l->bits, 0, bits_len, 0xFFFFFFFFu)) != BR_OK ||
        (st = br_blr_zero_grad(l)) != BR_OK)
        goto fail;
    *out = l;
    return BR_OK;
fail:
    br_blr_free(l);
    return st;
}

void br_blr_shape(const br_blr *l, size_t *m, size_t *n, size_t *r, size_t *paths) {
    if (m) *m = l ? l->m : 0;
    if (n) *n = l ? l->n : 0;
    if (r) *r = l ? l->r : 0;
    if (paths) *paths = l ? l->paths : 0;
}

br_ctx *br_blr_ctx(const br_blr *l) { return l ? l->ctx : NULL; }

br_buf *br_blr_buf(br_blr *l, size_t path, br_blr_part part) {
    if (!l || path >= l->paths || (int)part < 0 || (int)part >= BR_BLR_NPARTS) return NULL;
    if (part == BR_BLR_GU || part == BR_BLR_GV) l->sign_grads_out = 1;
    return l->path[path].part[part];
}

br_status br_blr_zero_grad(br_blr *l) {
    if (!l) return BR_E_ARG;
    BR_TRY(br_buf_fill(l->grads, 0, l->grads_len, 0));
    if (l->curv) BR_TRY(br_buf_fill(l->curv, 0, br_buf_count(l->curv), 0));
    return BR_OK;
}

static br_status check_path(const br_blr *l, const char *fn, size_t path) {
    if (path >= l->paths)
        return br_fail(l->ctx, BR_E_ARG, "%s: path %zu of a layer of %zu path%s", fn, path,
                       l->paths, l->paths == 1 ? "" : "s");
    return BR_OK;
}

br_status br_blr_set_path(br_blr *l, size_t path, const uint32_t *bits_u, const uint32_t *bits_v,
                          const float *h, const float *lv, const float *g) {
    if (!l) return BR_E_ARG;
    BR_TRY(check_path(l, "br_blr_set_path", path));
    br_buf **v = l->path[path].part;
    if (bits_u) BR_TRY(br_buf_upload(v[BR_BLR_BITS_U], 0, bits_u, l->m * l->words));
    if (bits_v) BR_TRY(br_buf_upload(v[BR_BLR_BITS_V], 0, bits_v, l->n * l->words));
    if (h) BR_TRY(br_buf_upload(v[BR_BLR_H], 0, h, l->m));
    if (lv) BR_TRY(br_buf_upload(v[BR_BLR_L], 0, lv, l->r));
    if (g) BR_TRY(br_buf_upload(v[BR_BLR_G], 0, g, l->n));
    return BR_OK;
}

br_status br_blr_get_path(const br_blr *l, size_t path, uint32_t *bits_u, uint32_t *bits_v,
                          float *h, float *lv, float *g) {
    if (!l) return BR_E_ARG;
    BR_TRY(check_path(l, "br_blr_get_path", path));
    br_buf *const *v = l->path[path].part;
    if (bits_u) BR_TRY(br_buf_download(v[BR_BLR_BITS_U], 0, bits_u, l->m * l->words));
    if (bits_v) BR_TRY(br_buf_download(v[BR_BLR_BITS_V], 0, bits_v, l->n * l->words));
    if (h) BR_TRY(br_buf_download(v[BR_BLR_H], 0, h, l->m));
    if (lv) BR_TRY(br_buf_download(v[BR_BLR_L], 0, lv, l->r));
    if (g) BR_TRY(br_buf_download(v[BR_BLR_G], 0, g, l->n));
    return BR_OK;
}

br_status br_blr_from_host(br_ctx *ctx, const br_blr_host *host, unsigned flags, br_blr **out) {
    BR_TRY(br_check_ctx(ctx));
    if (!out) return br_fail(ctx, BR_E_ARG, "br_blr_from_host: out is NULL");
    *out = NULL;
    if (!host) return br_fail(ctx, BR_E_ARG, "br_blr_from_host: host is NULL");
    if (host->paths > BR_BLR_MAX_PATHS)
        return br_fail(ctx, BR_E_ARG, "br_blr_from_host: host->paths = %zu exceeds %d", host->paths,
                       BR_BLR_MAX_PATHS);
    br_blr *l = NULL;
    BR_TRY(br_blr_new(ctx, host->m, host->n, host->r, host->paths, flags, &l));
    for (size_t p = 0; p < host->paths; p++) {
        const br_blr_path_host *hp = &host->path[p];
        br_status st = br_blr_set_path(l, p, hp->bits_u, hp->bits_v, hp->h, hp->l, hp->g);
        if (st != BR_OK) {
            br_blr_free(l);
            return st;
        }
    }
    *out = l;
    return BR_OK;
}

br_status br_blr_to_host(const br_blr *l, br_blr_host *host) {
    if (!l) return BR_E_ARG;
    if (!host) return br_fail(l->ctx, BR_E_ARG, "br_blr_to_host: host is NULL");
    if (host->m != l->m || host->n != l->n || host->r != l->r || host->paths != l->paths)
        return br_fail(l->ctx, BR_E_SHAPE,
                       "br_blr_to_host: host is %zu×%zu rank %zu, %zu paths; the layer %zu×%zu "
                       "rank %zu, %zu paths",
                       host->m, host->n, host->r, host->paths, l->m, l->n, l->r, l->paths);
    if (l->paths > BR_BLR_MAX_PATHS)
        return br_fail(l->ctx, BR_E_ARG, "br_blr_to_host: %zu paths exceed %d", l->paths,
                       BR_BLR_MAX_PATHS);
    for (size_t p = 0; p < l->paths; p++) {
        br_blr_path_host *hp = &host->path[p];
        BR_TRY(br_blr_get_path(l, p, hp->bits_u, hp->bits_v, hp->h, hp->l, hp->g));
    }
    return BR_OK;
}
