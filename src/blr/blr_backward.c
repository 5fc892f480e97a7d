/* Backward of the BLR layer as a sequence of ops, per path p (gs the gradient
 * staging scale, a power of two divided back out by the GEMMs' oscale):
 *     dh_p += Σ_t dy⊙c_p; ds = f16(dy⊙h_p·gs)      br_colsum_fused (CVT_A)
 *     b    = ds · S_U,p / gs        [ntok][r]      br_mm_bits, bits [mpad][r/32] as COLS
 *     dℓ_p += Σ_t a_p⊙b; bs = f16(b⊙ℓ_p·gs)        br_colsum_fused (CVT_B)
 *     dx'  = bs · S_V,pᵀ / gs       [ntok][n]      br_mm_bits, bits [n][r/32] as ROWS
 *     dg_p += Σ_t x⊙dx'; dx (+)= g_p⊙dx'           br_colsum_fused (SCALE_B)
 * The same fused passes write the transposed f16 operands of the sign gradients,
 * (dy⊙h·gs)ᵀ, (b⊙ℓ·gs)ᵀ and (x⊙g)ᵀ; with (a⊙ℓ)ᵀ (br_cvt_t):
 *     G_U,p (+)= (dy⊙h·gs)ᵀ·(a⊙ℓ) / gs   [m][r]   br_mm, tokens as K
 *     G_V,p (+)= (x⊙g)ᵀ·(b⊙ℓ·gs) / gs    [n][r]
 * Every GEMM reads the bits as they are: the input gradient and G come from the
 * bits of the forward. */
#include <math.h>

#include "blr/blr_internal.h"
#include "ops/check.h"
#include "ops/sign_ops.h"

/* out = G (accumulate = 0) or out += G: the GEMM writes G into gtmp, then an add. */
static br_status sign_grad(br_blr *l, br_blr_shared *sh, const br_buf *act, const br_buf *plane,
                           br_buf *out, size_t rows, size_t ntok, float gs, int accumulate) {
    br_gemm g = {.m = rows, .n = l->r, .k = br_pad_tokens(ntok), .oscale = 1.0f / gs};
    if (!accumulate) return br_mm(l->ctx, act, plane, out, g);
    BR_TRY(br_mm(l->ctx, act, plane, sh->gtmp, g));
    return br_add(l->ctx, out, sh->gtmp, out, rows * l->r);
}

static br_status path_backward(br_blr *l, br_blr_scratch *s, size_t p, const br_buf *x,
                               const br_buf *dy, br_buf *dx, size_t ntok, float gs,
                               int accumulate) {
    br_ctx *ctx = l->ctx;
    br_blr_shared *sh = s->shared;
    const br_blr_path *bp = &l->path[p];
    br_buf *const *v = bp->part;
    const int sign = (l->flags & BR_BLR_SIGN_GRADS) != 0;
    size_t m = l->m, n = l->n, r = l->r;

    /* dh += Σ dy⊙c; the staged dy⊙h·gs (K = mpad for the next GEMM) */
    if (l->mpad == m) {
        br_fuse fz = {.kind = BR_FUSE_CVT_A,
                      .col = v[BR_BLR_H],
                      .dst = sh->stage,
                      .scale = gs,
                      .dst_t = sign ? sh->t_dy : NULL};
        BR_TRY(br_colsum_fused(ctx, dy, s->c[p], v[BR_BLR_DH], ntok, m, &fz));
    } else {
        BR_TRY(br_colsum(ctx, dy, s->c[p], NULL, BR_TERM_AB, v[BR_BLR_DH], ntok, m, 1));
        BR_TRY(br_cvt_pad(ctx, dy, v[BR_BLR_H], sh->stage, ntok, m, l->mpad, gs));
        if (sign) BR_TRY(br_cvt_t(ctx, dy, v[BR_BLR_H], sh->t_dy, ntok, m, gs));
    }
    br_gemm gb = {.m = ntok, .n = r, .k = l->mpad, .oscale = 1.0f / gs};
    BR_TRY(br_mm_bits(ctx, sh->stage, bp->bits_u_pad, BR_BITS_COLS, sh->t2, gb));

    /* dℓ += Σ a⊙b; the staged b⊙ℓ·gs */
    br_fuse fl = {.kind = BR_FUSE_CVT_B,
                  .col = v[BR_BLR_L],
                  .dst = sh->stage,
                  .scale = gs,
                  .dst_t = sign ? sh->t_b : NULL};
    BR_TRY(br_colsum_fused(ctx, s->a[p], sh->t2, v[BR_BLR_DL], ntok, r, &fl));
    br_gemm gx = {.m = ntok, .n = n, .k = r, .oscale = 1.0f / gs};
    BR_TRY(br_mm_bits(ctx, sh->stage, v[BR_BLR_BITS_V], BR_BITS_ROWS, sh->t1, gx));

    /* dg += Σ x⊙dx'; dx (+)= g⊙dx' */
    if (dx) {
        br_fuse fg = {.kind = BR_FUSE_SCALE_B,
                      .col = v[BR_BLR_G],
                      .dst = dx,
                      .accumulate = p > 0,
                      .dst_t = sign ? sh->t_x : NULL,
                      .t_scale = 1.0f};
        BR_TRY(br_colsum_fused(ctx, x, sh->t1, v[BR_BLR_DG], ntok, n, &fg));
    } else if (sign) {
        /* no dx: the pass over x writes (x⊙g)ᵀ, and f16(x⊙g) into the free stage */
        br_fuse fx = {.kind = BR_FUSE_CVT_A,
                      .col = v[BR_BLR_G],
                      .dst = sh->stage,
                      .scale = 1.0f,
                      .dst_t = sh->t_x};
        BR_TRY(br_colsum_fused(ctx, x, sh->t1, v[BR_BLR_DG], ntok, n, &fx));
    } else {
        BR_TRY(br_colsum(ctx, x, sh->t1, NULL, BR_TERM_AB, v[BR_BLR_DG], ntok, n, 1));
    }

    if (sign) {
        br_tag_scope tag;
        br_tag_push(ctx, &tag, "sign");
        br_status st = br_cvt_t(ctx, s->a[p], v[BR_BLR_L], sh->t_a, ntok, r, 1.0f);
        if (st == BR_OK)
            st = sign_grad(l, sh, sh->t_dy, sh->t_a, v[BR_BLR_GU], m, ntok, gs, accumulate);
        if (st == BR_OK)
            st = sign_grad(l, sh, sh->t_x, sh->t_b, v[BR_BLR_GV], n, ntok, gs, accumulate);
        br_tag_pop(ctx, &tag);
        BR_TRY(st);
    }
    if (l->flags & BR_BLR_CURVATURE)
        BR_TRY(br_colsum(ctx, s->a[p], s->a[p], NULL, BR_TERM_AB, v[BR_BLR_SUM_A2], ntok, r, 1));
    return BR_OK;
}

br_status br_blr_backward(br_blr *l, br_blr_scratch *s, const br_buf *x, const br_buf *dy,
                          br_buf *dx, size_t ntok, float gscale, int accumulate) {
    static const char fn[] = "br_blr_backward";
    BR_TRY(br_blr_check_run(l, s, fn, ntok));
    br_ctx *ctx = l->ctx;
    size_t xn, yn;
    BR_TRY(br_check_mul(ctx, fn, "ntok·n", ntok, l->n, &xn));
    BR_TRY(br_check_mul(ctx, fn, "ntok·m", ntok, l->m, &yn));
    BR_TRY(br_check_buf(ctx, fn, "x", x, BR_F32, xn));
    BR_TRY(br_check_buf(ctx, fn, "dy", dy, BR_F32, yn));
    BR_TRY(br_check_opt_buf(ctx, fn, "dx", dx, BR_F32, xn));
    int e = 0;
    if (!(gscale > 0) || !isfinite(gscale) || frexpf(gscale, &e) != 0.5f)
        return br_fail(ctx, BR_E_ARG, "%s: gscale = %g is not a positive power of two", fn,
                       (double)gscale);
    /* every path reads x and dy after the first path has written dx */
    BR_TRY(br_check_apart(ctx, fn, "dx", dx, dx ? xn : 0, "x", x, xn));
    BR_TRY(br_check_apart(ctx, fn, "dx", dx, dx ? xn : 0, "dy", dy, yn));
    if (!accumulate) {
        /* the scale gradients and curvature sums restart at 0; G is overwritten */
        BR_TRY(br_buf_fill(l->grads, 0, l->paths * l->path_len, 0));
        if (l->curv) BR_TRY(br_buf_fill(l->curv, 0, br_buf_count(l->curv), 0));
    }
    br_tag_scope tag;
    br_tag_push(ctx, &tag, "blr.bwd");
    br_status st = BR_OK;
    for (size_t p = 0; p < l->paths && st == BR_OK; p++)
        st = path_backward(l, s, p, x, dy, dx, ntok, gscale, accumulate);
    if (st == BR_OK && (l->flags & BR_BLR_CURVATURE))
        st = br_colsum(ctx, x, x, NULL, BR_TERM_AB, l->path[0].part[BR_BLR_SUM_X2], ntok, l->n, 1);
    br_tag_pop(ctx, &tag);
    return st;
}
