/* Forward of the BLR layer as a sequence of ops, per path p:
 *     xs  = f16(x ⊙ g_p)            [pad_rows(ntok)][npad]   br_cvt (br_cvt_pad if n%32)
 *     a_p = xs · S_V,p               [ntok][r]                br_mm_bits, bits [npad][r/32] as COLS
 *     as  = f16(a_p ⊙ ℓ_p)           [pad_rows(ntok)][r]      br_cvt
 *     c_p = as · S_U,pᵀ              [ntok][m]                br_mm_bits, bits [m][r/32] as ROWS
 *     y   = Σ_p h_p ⊙ c_p            [ntok][m]                br_scale_acc2 / br_scale_acc
 * a_p and c_p stay in the scratch for the backward. */
#include <stdlib.h>

#include "blr/blr_internal.h"
#include "ops/check.h"
#include "ops/sign_ops.h"

/* The checks every layer op starts with. */
br_status br_blr_check_run(const br_blr *l, const br_blr_scratch *s, const char *fn, size_t ntok) {
    if (!l) return BR_E_ARG;
    if (!s) return br_fail(l->ctx, BR_E_ARG, "%s: scratch is NULL", fn);
    if (s->layer != l)
        return br_fail(l->ctx, BR_E_ARG, "%s: the scratch was made for another layer", fn);
    BR_TRY(br_check_dim(l->ctx, fn, "ntok", ntok));
    if (ntok > s->ntok)
        return br_fail(l->ctx, BR_E_SIZE, "%s: ntok = %zu exceeds the scratch's %zu tokens", fn,
                       ntok, s->ntok);
    return BR_OK;
}

size_t br_blr_stage_cols(const br_blr *l) { return l ? l->npad : 0; }

/* xs = f16(x ⊙ g_p) into dst [pad_rows(ntok)][npad] (pad columns zero). */
static br_status stage_path(br_blr *l, size_t p, const br_buf *x, br_buf *dst, size_t ntok) {
    const br_buf *g = l->path[p].part[BR_BLR_G];
    if (l->npad == l->n) return br_cvt(l->ctx, x, g, dst, ntok, l->n, 1.0f);
    return br_cvt_pad(l->ctx, x, g, dst, ntok, l->n, l->npad, 1.0f);
}

/* One path from its staged input: a_p, c_p, and y when the path completes a sum. */
static br_status path_forward(br_blr *l, br_blr_scratch *s, size_t p, const br_buf *xs, br_buf *y,
                              size_t ntok) {
    br_ctx *ctx = l->ctx;
    const br_blr_path *bp = &l->path[p];
    br_buf *stage = s->shared->stage;
    br_gemm ga = {.m = ntok, .n = l->r, .k = l->npad, .oscale = 1.0f};
    BR_TRY(br_mm_bits(ctx, xs, bp->bits_v_pad, BR_BITS_COLS, s->a[p], ga));
    BR_TRY(br_cvt(ctx, s->a[p], bp->part[BR_BLR_L], stage, ntok, l->r, 1.0f));
    br_gemm gc = {.m = ntok, .n = l->m, .k = l->r, .oscale = 1.0f};
    BR_TRY(br_mm_bits(ctx, stage, bp->part[BR_BLR_BITS_U], BR_BITS_ROWS, s->c[p], gc));
    /* y = Σ_p h_p ⊙ c_p: two paths in one pass once the second is done */
    if (l->paths == 1) return br_scale_acc(ctx, s->c[0], bp->part[BR_BLR_H], y, ntok, l->m, 0);
    if (p == 1)
        return br_scale_acc2(ctx, s->c[0], l->path[0].part[BR_BLR_H], s->c[1], bp->part[BR_BLR_H],
                             y, ntok, l->m);
    if (p >= 2) return br_scale_acc(ctx, s->c[p], bp->part[BR_BLR_H], y, ntok, l->m, 1);
    return BR_OK;
}

static br_status check_y(br_blr *l, const char *fn, br_buf *y, size_t ntok) {
    size_t need;
    BR_TRY(br_check_mul(l->ctx, fn, "ntok·m", ntok, l->m, &need));
    return br_check_buf(l->ctx, fn, "y", y, BR_F32, need);
}

br_status br_blr_forward(br_blr *l, br_blr_scratch *s, const br_buf *x, br_buf *y, size_t ntok) {
    static const char fn[] = "br_blr_forward";
    BR_TRY(br_blr_check_run(l, s, fn, ntok));
    size_t xn;
    BR_TRY(br_check_mul(l->ctx, fn, "ntok·n", ntok, l->n, &xn));
    BR_TRY(br_check_buf(l->ctx, fn, "x", x, BR_F32, xn));
    BR_TRY(check_y(l, fn, y, ntok));
    /* the staged input and as share the stage buffer: as is written after a_p is read */
    br_tag_scope tag;
    br_tag_push(l->ctx, &tag, "blr.fwd");
    br_status st = BR_OK;
    for (size_t p = 0; p < l->paths && st == BR_OK; p++) {
        st = stage_path(l, p, x, s->shared->stage, ntok);
        if (st == BR_OK) st = path_forward(l, s, p, s->shared->stage, y, ntok);
    }
    br_tag_pop(l->ctx, &tag);
    return st;
}

br_status br_blr_forward_staged(br_blr *l, br_blr_scratch *s, const br_buf *const xin[], br_buf *y,
                                size_t ntok) {
    static const char fn[] = "br_blr_forward_staged";
    BR_TRY(br_blr_check_run(l, s, fn, ntok));
    if (!xin) return br_fail(l->ctx, BR_E_ARG, "%s: xin is NULL", fn);
    BR_TRY(check_y(l, fn, y, ntok));
    size_t need;
    BR_TRY(
        br_check_mul(l->ctx, fn, "pad_rows(ntok)·stage_cols", br_pad_rows(ntok), l->npad, &need));
    for (size_t p = 0; p < l->paths; p++) {
        if (!xin[p]) return br_fail(l->ctx, BR_E_ARG, "%s: xin[%zu] is NULL", fn, p);
        BR_TRY(br_check_buf(l->ctx, fn, "xin[p]", xin[p], BR_F16, need));
        if (xin[p] == s->shared->stage)
            return br_fail(l->ctx, BR_E_ARG, "%s: xin[%zu] is the scratch's own stage buffer", fn,
                           p);
    }
    br_tag_scope tag;
    br_tag_push(l->ctx, &tag, "blr.fwd");
    br_status st = BR_OK;
    for (size_t p = 0; p < l->paths && st == BR_OK; p++)
        st = path_forward(l, s, p, xin[p], y, ntok);
    br_tag_pop(l->ctx, &tag);
    return st;
}

br_status br_blr_stage(br_blr *const layers[], size_t nlayers, const br_buf *x, br_buf *const xin[],
                       size_t ntok) {
    static const char fn[] = "br_blr_stage";
    if (!layers || !nlayers || !layers[0]) return BR_E_ARG;
    br_blr *l0 = layers[0];
    br_ctx *ctx = l0->ctx;
    if (!xin) return br_fail(ctx, BR_E_ARG, "%s: xin is NULL", fn);
    BR_TRY(br_check_dim(ctx, fn, "ntok", ntok));
    size_t total = 0;
    for (size_t i = 0; i < nlayers; i++) {
        if (!layers[i]) return br_fail(ctx, BR_E_ARG, "%s: layers[%zu] is NULL", fn, i);
        if (layers[i]->ctx != ctx)
            return br_fail(ctx, BR_E_ARG, "%s: layers[%zu] belongs to another context", fn, i);
        if (layers[i]->n != l0->n)
            return br_fail(ctx, BR_E_SHAPE, "%s: layers[%zu] has n = %zu, layers[0] n = %zu", fn, i,
                           layers[i]->n, l0->n);
        total += layers[i]->paths;
    }
    for (size_t i = 0; i < total; i++)
        if (!xin[i]) return br_fail(ctx, BR_E_ARG, "%s: xin[%zu] is NULL", fn, i);
    if (l0->npad != l0->n) { /* unaligned n: one padded staging per path */
        size_t i = 0;
        for (size_t li = 0; li < nlayers; li++)
            for (size_t p = 0; p < layers[li]->paths; p++, i++)
                BR_TRY(stage_path(layers[li], p, x, xin[i], ntok));
        return BR_OK;
    }
    /* up to four outputs per read of x */
    const br_buf *cols[4];
    br_buf *dsts[4];
    size_t nb = 0, i = 0;
    for (size_t li = 0; li < nlayers; li++)
        for (size_t p = 0; p < layers[li]->paths; p++, i++) {
            cols[nb] = layers[li]->path[p].part[BR_BLR_G];
            dsts[nb++] = xin[i];
            if (nb == 4 || i + 1 == total) {
                BR_TRY(br_cvt_multi(ctx, x, nb, cols, dsts, ntok, l0->n, 1.0f));
                nb = 0;
            }
        }
    return BR_OK;
}
