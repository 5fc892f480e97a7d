/* Forward of the BLR layer as a sequence of ops (R = P·r, the paths side by side
 * along the rank axis; ℓ = [ℓ_1|ℓ_2|…] read in place from the parameters, a path
 * apart: the ops take it in groups of r):
 *     x16  = f16(x)                          [pad_rows(T)][npad] br_cvt_both (or given:
 *                                            br_blr_stage)
 *     W_V  = [f16(g_p ⊙ S_V,p)]ᵀ             [R][npad]       br_expand_scaled2, ONE
 *     Y_U  = [f16(h_p ⊙ S_U,p)]              [m][R]          launch for both planes
 *     A    = x16 · W_Vᵀ = [a_1|a_2|…]        [T][R]          br_mm, ONE GEMM, K = npad
 *     A'   = f16(A ⊙ ℓ)                      [pad_rows(T)][R] br_cvt_both
 *     out  = α·A'·Y_Uᵀ + β·target            [T][m]          br_mm, ONE GEMM, K = R;
 *            β = −α with a target (out = α(y − target)), else no c (out = y)
 * One GEMM over every path reads and writes out once (a GEMM per path with h in its
 * epilogue moved the [T][m] f32 output through memory P + 1 times); h enters as an
 * f16 factor of the plane, as it does in the backward's W_U. The two planes read
 * only the parameters, so one launch makes both before the A GEMM (a launch's gap
 * fewer in the step than Y_U expanded after A'): W_V into the shared plane, Y_U into
 * plane2 (the A GEMM has yet to read W_V).
 * A, A' and the x16 read stay for the backward, whose token-axis GEMMs (br_mm_tn)
 * read A' and x16 as they are: no transposed copies. */
#include <stdlib.h>

#include "blr/blr_internal.h"
#include "ops/check.h"
#include "ops/layer_ops.h"

size_t br_blr_stage_cols(const br_blr *l) { return l ? l->npad : 0; }

/* Elements of the staged f16(x) and of its (optional) transpose. */
static br_status stage_size(br_ctx *ctx, const char *fn, const br_blr *l, size_t ntok,
                            size_t *n16) {
    return br_check_mul(ctx, fn, "pad_rows(ntok)·stage_cols", br_pad_rows(ntok), l->npad, n16);
}

/* Everything after the staging of x: A, A', and out. gs > 0 (forward_loss): out (may
 * be NULL) is also staged as f16(out·gs) into the shared stage for the backward
 * (br_mm_stage). */
static br_status forward_core(br_blr *l, br_blr_scratch *s, const br_buf *x16,
                              const br_buf *target, float alpha, br_buf *out, size_t ntok,
                              float gs) {
    br_ctx *ctx = l->ctx;
    br_blr_shared *sh = s->shared;
    size_t m = l->m, r = l->r, R = l->paths * r;
    s->dy_staged = 0; /* a new forward: whatever was staged is not its gradient */
    br_buf *const *sp = l->span;
    const size_t *ss = l->span_stride;
    /* W_V [R][npad] (transposed, the A GEMM's) and Y_U [m][R] (by rows, the output
     * GEMM's) in one call */
    const br_expand_job planes[2] = {{.bits = sp[BR_BLR_BITS_V],
                                      .bits_stride = ss[BR_BLR_BITS_V],
                                      .rows = l->n,
                                      .r = r,
                                      .rowscale = sp[BR_BLR_G],
                                      .scale_stride = ss[BR_BLR_G],
                                      .scale = 1.0f,
                                      .plane = sh->plane,
                                      .ld = l->npad,
                                      .paths = l->paths,
                                      .by_rows = 0},
                                     {.bits = sp[BR_BLR_BITS_U],
                                      .bits_stride = ss[BR_BLR_BITS_U],
                                      .rows = m,
                                      .r = r,
                                      .rowscale = sp[BR_BLR_H],
                                      .scale_stride = ss[BR_BLR_H],
                                      .scale = 1.0f,
                                      .plane = sh->plane2,
                                      .ld = R,
                                      .paths = l->paths,
                                      .by_rows = 1}};
    BR_TRY(br_expand_scaled2(ctx, planes));
    br_gemm ga = {.m = ntok, .n = R, .k = l->npad, .oscale = 1.0f};
    BR_TRY(br_mm(ctx, x16, sh->plane, s->a, ga));
    /* ℓ of every path read in place from the parameters: groups of r, a path apart */
    BR_TRY(br_cvt_both_grouped(ctx, s->a, sp[BR_BLR_L], r, ss[BR_BLR_L], s->act16, NULL, ntok, R,
                               R, 1.0f));
    br_gemm gy = {.m = ntok, .n = m, .k = R, .oscale = alpha};
    if (target) gy.c = target, gy.beta = -alpha;
    if (gs > 0) { /* the stage takes f16(dy·gs) */
        sh->stage_writes++;
        BR_TRY(br_mm_stage(ctx, s->act16, sh->plane2, out, gy, sh->stage, NULL, l->mpad, gs));
        s->dy_staged = 1;
        s->dy_gs = gs;
        s->dy_writes = sh->stage_writes;
    } else {
        BR_TRY(br_mm(ctx, s->act16, sh->plane2, out, gy));
    }
    s->x_in = x16;
    s->fwd_ntok = ntok;
    return BR_OK;
}

/* out [ntok][m] f32 (NULL only where loss: the forward_loss forms); target (may be
 * NULL) f32 [ntok][m], out itself or apart from it, or with loss also f16 (apart). */
static br_status check_out(br_blr *l, const char *fn, const br_buf *target, const br_buf *out,
                           int loss, size_t ntok) {
    size_t need;
    BR_TRY(br_check_mul(l->ctx, fn, "ntok·m", ntok, l->m, &need));
    if (out || !loss) BR_TRY(br_check_buf(l->ctx, fn, target ? "out" : "y", out, BR_F32, need));
    if (!target) return BR_OK;
    int t16 = loss && br_buf_dtype(target) == BR_F16;
    BR_TRY(br_check_buf(l->ctx, fn, "target", target, t16 ? BR_F16 : BR_F32, need));
    if (out && !(!t16 && br_ptr(target) == br_ptr(out)))
        BR_TRY(br_check_apart(l->ctx, fn, "out", out, need, "target", target, need));
    return BR_OK;
}

/* gs > 0: forward_loss (out may be NULL) */
static br_status forward_x(br_blr *l, br_blr_scratch *s, const char *fn, const br_buf *x,
                           const br_buf *target, float alpha, br_buf *out, size_t ntok, float gs) {
    BR_TRY(br_blr_check_run(l, s, fn, ntok));
    size_t xn;
    BR_TRY(br_check_mul(l->ctx, fn, "ntok·n", ntok, l->n, &xn));
    BR_TRY(br_check_buf(l->ctx, fn, "x", x, BR_F32, xn));
    BR_TRY(check_out(l, fn, target, out, gs > 0, ntok));
    BR_TRY(br_check_finite(l->ctx, fn, "alpha", alpha));
    br_tag_scope tag;
    br_tag_push(l->ctx, &tag, "blr.fwd");
    br_status st = br_cvt_both(l->ctx, x, NULL, s->x16, NULL, ntok, l->n, l->npad, 1.0f);
    if (st == BR_OK) st = forward_core(l, s, s->x16, target, alpha, out, ntok, gs);
    br_tag_pop(l->ctx, &tag);
    return st;
}

/* The checks of a forward on a staged input: x16 of the staged size, apart from the
 * output and from every transient the forward or its backward writes (x16 is read
 * again by the backward's N_V). */
static br_status check_staged(br_blr *l, const br_blr_scratch *s, const char *fn, const br_buf *x16,
                              const br_buf *out, size_t ntok) {
    br_ctx *ctx = l->ctx;
    size_t n16;
    BR_TRY(stage_size(ctx, fn, l, ntok, &n16));
    BR_TRY(br_check_buf(ctx, fn, "x16", x16, BR_F16, n16));
    const br_blr_shared *sh = s->shared;
    const br_buf *mine[] = {sh->stage, sh->act,    sh->plane, sh->plane2,
                            sh->b,     sh->rowmat, s->mem,    s->act16};
    static const char *const names[] = {"stage", "B'", "plane", "Y_U plane", "B", "M", "A", "A'"};
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
        if (br_bufs_overlap(x16, n16, mine[i], br_buf_count(mine[i])))
            return br_fail(ctx, BR_E_ARG, "%s: the staged input overlaps the scratch's own %s", fn,
                           names[i]);
    if (out && br_bufs_overlap(x16, n16, out, br_buf_count(out)))
        return br_fail(ctx, BR_E_ARG, "%s: the staged input overlaps the output", fn);
    return BR_OK;
}

/* A forward on x16 staged by br_blr_stage: as forward_x without its staging. */
static br_status forward_staged(br_blr *l, br_blr_scratch *s, const char *fn, const br_buf *x16,
                                const br_buf *target, float alpha, br_buf *out, size_t ntok,
                                float gs) {
    BR_TRY(br_blr_check_run(l, s, fn, ntok));
    BR_TRY(check_out(l, fn, target, out, gs > 0, ntok));
    BR_TRY(br_check_finite(l->ctx, fn, "alpha", alpha));
    BR_TRY(check_staged(l, s, fn, x16, out, ntok));
    br_tag_scope tag;
    br_tag_push(l->ctx, &tag, "blr.fwd");
    br_status st = forward_core(l, s, x16, target, alpha, out, ntok, gs);
    br_tag_pop(l->ctx, &tag);
    return st;
}

br_status br_blr_forward(br_blr *l, br_blr_scratch *s, const br_blr_fwd *f) {
    static const char fn[] = "br_blr_forward";
    if (!l) return BR_E_ARG;
    if (!f) return br_fail(l->ctx, BR_E_ARG, "%s: the descriptor is NULL", fn);
    if (!f->x == !f->x16)
        return br_fail(l->ctx, BR_E_ARG, "%s: %s", fn,
                       f->x ? "x and x16 are both given (x16 is x staged: give one)"
                            : "x and x16 are both NULL");
    if (f->gscale != 0.0f) {
        if (!f->target)
            return br_fail(l->ctx, BR_E_ARG, "%s: gscale stages a loss gradient: it needs a target",
                           fn);
        BR_TRY(br_blr_check_gscale(l, fn, f->gscale));
    }
    float alpha = f->target ? f->alpha : 1.0f;
    return f->x ? forward_x(l, s, fn, f->x, f->target, alpha, f->out, f->ntok, f->gscale)
                : forward_staged(l, s, fn, f->x16, f->target, alpha, f->out, f->ntok, f->gscale);
}

br_status br_blr_stage(const br_blr *l, const br_buf *x, br_buf *x16, size_t ntok) {
    static const char fn[] = "br_blr_stage";
    if (!l) return BR_E_ARG;
    br_ctx *ctx = l->ctx;
    BR_TRY(br_check_dim(ctx, fn, "ntok", ntok));
    size_t xn, n16;
    BR_TRY(br_check_mul(ctx, fn, "ntok·n", ntok, l->n, &xn));
    BR_TRY(br_check_buf(ctx, fn, "x", x, BR_F32, xn));
    BR_TRY(stage_size(ctx, fn, l, ntok, &n16));
    BR_TRY(br_check_buf(ctx, fn, "x16", x16, BR_F16, n16));
    return br_cvt_both(ctx, x, NULL, x16, NULL, ntok, l->n, l->npad, 1.0f);
}
