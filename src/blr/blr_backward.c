/* Backward of the BLR layer as a sequence of ops (R = P·r, the paths side by side
 * along the rank axis as in the forward; gs the gradient staging scale, a power of
 * two divided back out by the GEMMs' oscale):
 *     dy16 = f16(dy·gs)                         [pad_rows(T)][mpad] br_cvt_both (or staged
 *                                               by forward_loss)
 *     W_U = [f16(h_p ⊙ S_U,p)]ᵀ                 [R][mpad]   br_expand_scaled_paths
 *     B   = dy16 · W_Uᵀ / gs = [b_1|b_2|…]      [T][R]      br_mm_colsum_grouped: ONE op,
 *     dℓ += Σ_t A⊙B;  B' = f16(B⊙ℓ·gs)          [R]           the GEMM (K = mpad) feeding
 *                                                             the column sums (CVT_B)
 *     M_U = (dy·gs)ᵀ · A' / gs                  [m][R]      br_mm_tn2_rowdot: all four
 *     N_V = f16(x)ᵀ · B' / gs                   [n][R]        in one call, K = tokens, dy16
 *                                                             and A', x16 and B' read as
 *                                                             they are
 *     G_U,p (+)= h_p ⊙ M_U[:, p·r..];  dh_p += Σ_k S_U,p ⊙ M_U[:, p·r..]   (its rowdots,
 *     G_V,p (+)= g_p ⊙ N_V[:, p·r..];  dg_p += Σ_k S_V,p ⊙ N_V[:, p·r..]    with the
 *                                               row norms of G as written, for the
 *                                               optimizer's step)
 *     X_V = [f16(g_p ⊙ S_V,p)]                  [n][R]      br_expand_scaled_rows_paths
 *     dx  = B' · X_Vᵀ / gs                      [T][n]      br_mm, ONE GEMM, K = R (dx only)
 * Why M_U gives dh: dh_i = Σ_t dy_ti·c_ti with c = A'·S_Uᵀ, so dh_i = Σ_k S_U[i,k]·
 * (dyᵀA')_ik and the product c is never formed; likewise dg from N_V. dℓ of every
 * path is added in place into its part of the gradients (the sums in groups of r, a
 * path's parameters apart). The token-axis GEMMs read their token-major operands as
 * they are (rows past T zero up to pad_tokens(T)). Every GEMM
 * reads the bits as they are: the input gradient and G come from the forward's bits. */
#include "blr/blr_internal.h"
#include "ops/check.h"
#include "ops/layer_ops.h"

static br_status backward_ops(br_blr *l, br_blr_scratch *s, const br_buf *x, const br_buf *dy,
                              br_buf *dx, size_t ntok, float gs, int accumulate) {
    br_ctx *ctx = l->ctx;
    br_blr_shared *sh = s->shared;
    const int sign = (l->flags & BR_BLR_SIGN_GRADS) != 0;
    size_t m = l->m, n = l->n, r = l->r, P = l->paths, R = P * r, tpad = br_pad_tokens(ntok);
    if (dy) { /* else the loss forward staged it */
        sh->stage_writes++;
        BR_TRY(br_cvt_both(ctx, dy, NULL, sh->stage, NULL, ntok, m, l->mpad, gs));
    }
    br_buf *const *sp = l->span; /* every path's part at once */
    const size_t *ss = l->span_stride;
    BR_TRY(br_expand_scaled_paths(ctx, sp[BR_BLR_BITS_U], ss[BR_BLR_BITS_U], m, r, sp[BR_BLR_H],
                                  ss[BR_BLR_H], 1.0f, sh->plane, l->mpad, P));
    /* B, and from it dℓ of every path written (or, accumulating, added) in place into
     * the layer's gradients, ℓ read in place: groups of r, a path apart (one op, so a
     * backend may form dℓ and B' in the GEMM's epilogue without B going through
     * memory) */
    br_gemm gb = {.m = ntok, .n = R, .k = l->mpad, .oscale = 1.0f / gs};
    br_fuse fl = {.kind = BR_FUSE_CVT_B, .col = sp[BR_BLR_L], .dst = sh->act, .scale = gs};
    BR_TRY(br_mm_colsum_grouped(ctx, sh->stage, sh->plane, sh->b, gb, s->a, sp[BR_BLR_DL], &fl, r,
                                ss[BR_BLR_DL], accumulate));

    /* M_U and N_V and their rowdots in one call (on a GPU the products in one launch:
     * N_V's tiles fill M_U's last wave) */
    br_tag_scope tag;
    br_tag_push(ctx, &tag, "sign");
    const br_tn_rowdot sides[2] = {
        {.act = sh->stage,
         .plane = s->act16,
         .ldp = R,
         .mat = s->mu,
         .g = {.m = m, .n = R, .k = tpad, .lda = l->mpad, .oscale = 1.0f / gs},
         .bits = sp[BR_BLR_BITS_U],
         .bits_stride = ss[BR_BLR_BITS_U],
         .rowscale = sp[BR_BLR_H],
         .scale_stride = ss[BR_BLR_H],
         .grad = sign ? sp[BR_BLR_GU] : NULL,
         .grad_stride = ss[BR_BLR_GU],
         .dsum = sp[BR_BLR_DH],
         .dsum_stride = ss[BR_BLR_DH],
         .rownorm = sign ? l->rownorm_u : NULL,
         .rownorm_stride = m + n,
         .r = r,
         .paths = P,
         .accumulate = accumulate},
        {.act = s->x_in,
         .plane = sh->act,
         .ldp = R,
         .mat = s->nv,
         .g = {.m = n, .n = R, .k = tpad, .lda = l->npad, .oscale = 1.0f / gs},
         .bits = sp[BR_BLR_BITS_V],
         .bits_stride = ss[BR_BLR_BITS_V],
         .rowscale = sp[BR_BLR_G],
         .scale_stride = ss[BR_BLR_G],
         .grad = sign ? sp[BR_BLR_GV] : NULL,
         .grad_stride = ss[BR_BLR_GV],
         .dsum = sp[BR_BLR_DG],
         .dsum_stride = ss[BR_BLR_DG],
         .rownorm = sign ? l->rownorm_v : NULL,
         .rownorm_stride = m + n,
         .r = r,
         .paths = P,
         .accumulate = accumulate}};
    br_status st = br_mm_tn2_rowdot(ctx, sides);
    br_tag_pop(ctx, &tag);
    BR_TRY(st);

    if (l->flags & BR_BLR_CURVATURE) { /* Σ_t a² of every path, side by side; Σ_t x² */
        BR_TRY(br_colsum(ctx, s->a, s->a, NULL, BR_TERM_AB, l->curv, ntok, R, 1));
        BR_TRY(br_colsum(ctx, x, x, NULL, BR_TERM_AB, l->path[0].part[BR_BLR_SUM_X2], ntok, n, 1));
    }
    if (!dx) return BR_OK;
    /* W_U is read: the plane takes X_V */
    BR_TRY(br_expand_scaled_rows_paths(ctx, sp[BR_BLR_BITS_V], ss[BR_BLR_BITS_V], n, r,
                                       sp[BR_BLR_G], ss[BR_BLR_G], 1.0f, sh->plane, R, P));
    br_gemm gx = {.m = ntok, .n = n, .k = R, .oscale = 1.0f / gs};
    BR_TRY(br_mm(ctx, sh->act, sh->plane, dx, gx));
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
    if (dy) BR_TRY(br_check_buf(ctx, fn, "dy", dy, BR_F32, yn));
    BR_TRY(br_check_opt_buf(ctx, fn, "dx", dx, BR_F32, xn));
    BR_TRY(br_blr_check_gscale(l, fn, gscale));
    if (!s->x_in)
        return br_fail(ctx, BR_E_STATE, "%s: no forward has run through this scratch", fn);
    if (ntok != s->fwd_ntok)
        return br_fail(ctx, BR_E_ARG, "%s: ntok = %zu, the last forward had %zu tokens", fn, ntok,
                       s->fwd_ntok);
    if (!dy) { /* the gradient the loss forward staged: still there, same scale */
        if (!s->dy_staged)
            return br_fail(ctx, BR_E_STATE,
                           "%s: dy is NULL but the last forward through this scratch staged no "
                           "gradient (a loss forward: br_blr_fwd.gscale > 0)",
                           fn);
        if (s->dy_writes != s->shared->stage_writes)
            return br_fail(ctx, BR_E_STATE,
                           "%s: dy is NULL but the staged dy was overwritten by another layer's op "
                           "on the shared transients",
                           fn);
        if (gscale != s->dy_gs)
            return br_fail(ctx, BR_E_ARG,
                           "%s: gscale = %g, the forward_loss staged dy under gscale = %g", fn,
                           (double)gscale, (double)s->dy_gs);
    }
    /* dx is written last, but x and dy stay the inputs of record: they must be apart */
    BR_TRY(br_check_apart(ctx, fn, "dx", dx, dx ? xn : 0, "x", x, xn));
    if (dy) BR_TRY(br_check_apart(ctx, fn, "dx", dx, dx ? xn : 0, "dy", dy, yn));
    if (dx)
        BR_TRY(br_check_apart(ctx, fn, "dx", dx, xn, "the staged f16(x)", s->x_in,
                              br_buf_count(s->x_in)));
    /* not accumulating: every gradient is overwritten (dh, dg by the rowdots, dℓ by the
     * column sums, G by the rowdots); the curvature sums restart at 0 */
    if (!accumulate && l->curv) BR_TRY(br_buf_fill(l->curv, 0, br_buf_count(l->curv), 0));
    br_tag_scope tag;
    br_tag_push(ctx, &tag, "blr.bwd");
    br_status st = backward_ops(l, s, x, dy, dx, ntok, gscale, accumulate);
    br_tag_pop(ctx, &tag);
    return st;
}
