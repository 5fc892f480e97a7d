/* Front-ends of the internal ops of the BLR layer and its optimizers: cvt_pad,
 * step_ctrl, sign_step, sign_steps (and sign_steps_adam, with the layer's Adam).
 * They check every argument and hand a descriptor to the backend (or the
 * recording graph). */
#include <math.h>
#include <stdio.h>

#include "ops/check.h"
#include "ops/sign_ops.h"

int br_ctx_recording(const br_ctx *ctx) { return ctx && ctx->rec != NULL; }

br_status br_cvt_pad(br_ctx *ctx, const br_buf *src, const br_buf *col, br_buf *dst, size_t m,
                     size_t k, size_t ld, float scale) {
    static const char fn[] = "br_cvt_pad";
    BR_TRY(br_check_ctx(ctx));
    BR_TRY(br_check_dim(ctx, fn, "m", m));
    BR_TRY(br_check_dim(ctx, fn, "k", k));
    if (ld < k) return br_fail(ctx, BR_E_SHAPE, "%s: ld = %zu is less than k = %zu", fn, ld, k);
    size_t mk, mpl;
    BR_TRY(br_check_mul(ctx, fn, "m·k", m, k, &mk));
    BR_TRY(br_check_mul(ctx, fn, "br_pad_rows(m)·ld", br_pad_rows(m), ld, &mpl));
    BR_TRY(br_check_finite(ctx, fn, "scale", scale));
    BR_TRY(br_check_buf(ctx, fn, "src", src, BR_F32, mk));
    BR_TRY(br_check_opt_buf(ctx, fn, "col", col, BR_F32, k));
    BR_TRY(br_check_buf(ctx, fn, "dst", dst, BR_F16, mpl));
    br_op op = {.kind = BR_OP_CVT_PAD};
    op.u.cvt_pad = (br_cvt_pad_args){
        .src = src, .col = col, .dst = dst, .m = m, .k = k, .ld = ld, .scale = scale};
    return br_submit(ctx, &op, 0);
}

br_status br_step_ctrl(br_ctx *ctx, const br_step_ctrl_args *a) {
    static const char fn[] = "br_step_ctrl";
    BR_TRY(br_check_ctx(ctx));
    if (!a) return br_fail(ctx, BR_E_ARG, "%s: args is NULL", fn);
    BR_TRY(br_check_dim(ctx, fn, "np", a->np));
    if (a->nclip > a->np)
        return br_fail(ctx, BR_E_ARG, "%s: nclip = %zu exceeds np = %zu", fn, a->nclip, a->np);
    size_t nparts;
    BR_TRY(br_check_mul(ctx, fn, "np·BR_SUMSQ_PARTS", a->np, BR_SUMSQ_PARTS, &nparts));
    BR_TRY(br_check_buf(ctx, fn, "partials", a->partials, BR_F32, nparts));
    BR_TRY(br_check_buf(ctx, fn, "hyper", a->hyper, BR_F32, BR_CTRL_HYPER));
    BR_TRY(br_check_buf(ctx, fn, "state", a->state, BR_F32, BR_CTRL_STATE));
    BR_TRY(br_check_buf(ctx, fn, "sched", a->sched, BR_F32, 4));
    BR_TRY(br_check_buf(ctx, fn, "sign_sched", a->sign_sched, BR_F32, BR_SIGN_SCHED));
    BR_TRY(br_check_buf(ctx, fn, "norms", a->norms, BR_F32, a->np + 1));
    if (!(a->sign_beta1 >= 0 && a->sign_beta1 < 1) || !(a->sign_beta2 >= 0 && a->sign_beta2 < 1))
        return br_fail(ctx, BR_E_ARG, "%s: sign betas %g, %g are not in [0, 1)", fn,
                       (double)a->sign_beta1, (double)a->sign_beta2);
    br_op op = {.kind = BR_OP_STEP_CTRL};
    op.u.step_ctrl = *a;
    return br_submit(ctx, &op, 0);
}

size_t br_sign_step_workspace(size_t rows, size_t r) {
    size_t chunks = (rows + BR_SIGN_CHUNK - 1) / BR_SIGN_CHUNK;
    size_t words = rows * r               /* keys */
                   + BR_SIGN_BLOCKS * 256 /* per-block digit histograms */
                   + 16                   /* selection state */
                   + chunks * r           /* factored: column chunk partials */
                   + 16                   /* factored: mean; Σ normsrc² */
                   + BR_SIGN_GRID         /* per-block counts */
                   + 16;                  /* arrival tickets */
    return words * 4;
}

/* Every check of one sign step's arguments (fn names the caller). */
static br_status check_sign_step(br_ctx *ctx, const char *fn, const br_sign_step_args *a) {
    if (!a) return br_fail(ctx, BR_E_ARG, "%s: args is NULL", fn);
    BR_TRY(br_check_dim(ctx, fn, "rows", a->rows));
    BR_TRY(br_check_dim(ctx, fn, "r", a->r));
    if (a->r % 32) return br_fail(ctx, BR_E_SHAPE, "%s: r = %zu is not a multiple of 32", fn, a->r);
    size_t n, chunks = (a->rows + BR_SIGN_CHUNK - 1) / BR_SIGN_CHUNK, cr;
    BR_TRY(br_check_mul(ctx, fn, "rows·r", a->rows, a->r, &n));
    BR_TRY(br_check_mul(ctx, fn, "chunks·r", chunks, a->r, &cr));
    if (n + cr + BR_SIGN_GRID + BR_SIGN_BLOCKS * 300 > BR_MAX_ELEMS)
        return br_fail(ctx, BR_E_OVERFLOW, "%s: rows·r = %zu leaves no room for the workspace", fn,
                       n);
    BR_TRY(br_check_buf(ctx, fn, "grad", a->grad, BR_F32, n));
    BR_TRY(br_check_buf(ctx, fn, "bits", a->bits, BR_U32, n / 32));
    BR_TRY(br_check_buf(ctx, fn, "sched", a->sched, BR_F32, BR_SIGN_SCHED));
    BR_TRY(br_check_buf(ctx, fn, "flips", a->flips, BR_U32, 1));
    if (a->slot >= a->flips->count) /* not slot + 1 as a size: it could wrap to 0 */
        return br_fail(ctx, BR_E_SIZE, "%s: slot %zu is outside flips of %zu entries", fn, a->slot,
                       a->flips->count);
    if (a->budget > n)
        return br_fail(ctx, BR_E_ARG, "%s: budget %zu exceeds rows·r = %zu", fn, a->budget, n);
    if (!a->exact) {
        BR_TRY(br_check_buf(ctx, fn, "latent", a->latent, BR_F32, n));
        BR_TRY(br_check_buf(ctx, fn, "m1", a->m1, BR_F32, n));
        BR_TRY(br_check_buf(ctx, fn, "v", a->v, BR_F32, a->factored ? a->rows + a->r : n));
        if (!(a->beta1 >= 0 && a->beta1 < 1) || !(a->beta2 >= 0 && a->beta2 < 1))
            return br_fail(ctx, BR_E_ARG, "%s: betas %g, %g are not in [0, 1)", fn,
                           (double)a->beta1, (double)a->beta2);
        if (!(a->eps > 0) || !isfinite(a->eps))
            return br_fail(ctx, BR_E_ARG, "%s: eps = %g must be finite and > 0", fn,
                           (double)a->eps);
        if (!(a->clamp > 0) || !isfinite(a->clamp))
            return br_fail(ctx, BR_E_ARG, "%s: clamp = %g must be finite and > 0", fn,
                           (double)a->clamp);
        if (!(a->hyst >= 0) || !(a->hyst < a->clamp))
            return br_fail(ctx, BR_E_ARG, "%s: hyst = %g must be in [0, clamp = %g)", fn,
                           (double)a->hyst, (double)a->clamp);
    } else {
        BR_TRY(br_check_buf(ctx, fn, "rowf", a->rowf, BR_F32, a->rows));
        BR_TRY(br_check_opt_buf(ctx, fn, "rowq", a->rowq, BR_F32, a->rows));
        BR_TRY(br_check_buf(ctx, fn, "colf", a->colf, BR_F32, a->r));
        BR_TRY(br_check_opt_buf(ctx, fn, "colq", a->colq, BR_F32, a->r));
        if (a->normsrc) {
            BR_TRY(br_check_dim(ctx, fn, "nnorm", a->nnorm));
            BR_TRY(br_check_buf(ctx, fn, "normsrc", a->normsrc, BR_F32, a->nnorm));
        }
        if (!(a->curv2 > 0) || !isfinite(a->curv2))
            return br_fail(ctx, BR_E_ARG, "%s: 2·curvature = %g must be finite and > 0", fn,
                           (double)a->curv2);
    }
    return BR_OK;
}

br_status br_sign_step(br_ctx *ctx, const br_sign_step_args *a) {
    BR_TRY(br_check_ctx(ctx));
    BR_TRY(check_sign_step(ctx, "br_sign_step", a));
    br_op op = {.kind = BR_OP_SIGN_STEP};
    op.u.sign_step = *a;
    return br_submit(ctx, &op, br_sign_step_workspace(a->rows, a->r));
}

/* The buffers a step writes, then those it only reads (NULL where absent); with
 * their element counts. */
enum { STEP_WRITES = 4, STEP_BUFS = 5 };
static void step_bufs(const br_sign_step_args *a, const br_buf *b[STEP_BUFS],
                      size_t cnt[STEP_BUFS]) {
    size_t n = a->rows * a->r;
    b[0] = a->bits, cnt[0] = n / 32;
    b[1] = a->exact ? NULL : a->latent, cnt[1] = n;
    b[2] = a->exact ? NULL : a->m1, cnt[2] = n;
    b[3] = a->exact ? NULL : a->v, cnt[3] = a->factored ? a->rows + a->r : n;
    b[4] = a->grad, cnt[4] = n;
}

/* Every check of br_sign_steps (fn names the caller). */
static br_status check_sign_steps(br_ctx *ctx, const char *fn, const br_sign_step_args *a,
                                  size_t n) {
    if (n && !a) return br_fail(ctx, BR_E_ARG, "%s: args is NULL", fn);
    for (size_t i = 0; i < n; i++) {
        BR_TRY(check_sign_step(ctx, fn, &a[i]));
        /* they may run at once: what one writes must be apart from what another uses */
        const br_buf *bi[STEP_BUFS], *bj[STEP_BUFS];
        size_t ci[STEP_BUFS], cj[STEP_BUFS];
        step_bufs(&a[i], bi, ci);
        for (size_t j = 0; j < i; j++) {
            step_bufs(&a[j], bj, cj);
            for (int x = 0; x < STEP_BUFS; x++)
                for (int y = 0; y < STEP_BUFS; y++)
                    if ((x < STEP_WRITES || y < STEP_WRITES) && bi[x] && bj[y] &&
                        br_bufs_overlap(bi[x], ci[x], bj[y], cj[y]))
                        return br_fail(ctx, BR_E_ARG,
                                       "%s: matrices %zu and %zu share memory (a buffer one "
                                       "step writes)",
                                       fn, j, i);
            if (a[j].flips == a[i].flips && a[j].slot == a[i].slot)
                return br_fail(ctx, BR_E_ARG, "%s: matrices %zu and %zu report to one flips slot",
                               fn, j, i);
        }
    }
    return BR_OK;
}

/* The checked steps in units of up to BR_SIGN_STEPS_MAX SIGN_STEP ops; adam (or
 * NULL) rides on the last as its ADAM_CAT op. */
static br_status submit_sign_steps(br_ctx *ctx, const br_sign_step_args *a, size_t n,
                                   const br_adam_args *adam) {
    for (size_t i0 = 0; i0 < n; i0 += BR_SIGN_STEPS_MAX) {
        br_op ops[BR_SIGN_STEPS_MAX + 1];
        size_t ws = 0, cnt = n - i0 < BR_SIGN_STEPS_MAX ? n - i0 : BR_SIGN_STEPS_MAX;
        for (size_t i = 0; i < cnt; i++) {
            ops[i] = (br_op){.kind = BR_OP_SIGN_STEP};
            ops[i].u.sign_step = a[i0 + i];
            size_t w = br_sign_step_workspace(a[i0 + i].rows, a[i0 + i].r);
            if (w > ws) ws = w;
        }
        size_t nops = cnt;
        if (adam && i0 + cnt == n) {
            ops[nops] = (br_op){.kind = BR_OP_ADAM_CAT};
            ops[nops++].u.adam = *adam;
        }
        /* one step at a time needs the largest step's; together, a count row each */
        BR_TRY(br_submit_unit(ctx, ops, nops, "sign_step", 0,
                              ws + BR_SIGN_STEPS_MAX * BR_SIGN_GRID * sizeof(uint32_t)));
    }
    return BR_OK;
}

br_status br_sign_steps(br_ctx *ctx, const br_sign_step_args *a, size_t n) {
    BR_TRY(br_check_ctx(ctx));
    BR_TRY(check_sign_steps(ctx, "br_sign_steps", a, n));
    return submit_sign_steps(ctx, a, n, NULL);
}

br_status br_sign_steps_adam(br_ctx *ctx, const br_sign_step_args *a, size_t n, br_buf *w,
                             const br_buf *grad, br_buf *m1, br_buf *m2, const br_buf *mask,
                             const br_buf *rel_floor, size_t nadam, const br_adam_hp *hp) {
    static const char fn[] = "br_sign_steps_adam";
    BR_TRY(br_check_ctx(ctx));
    BR_TRY(check_sign_steps(ctx, fn, a, n));
    br_adam_args adam;
    BR_TRY(br_adam_cat_args_of(ctx, fn, w, grad, m1, m2, mask, rel_floor, nadam, hp, &adam));
    /* Adam may run while the last steps finish (count their flips): what it uses
     * must be apart from what a step writes, and what it writes from each sched */
    const char *const an[7] = {"w", "grad", "m1", "m2", "mask", "rel_floor", "hp->sched"};
    const br_buf *const ab[7] = {w, grad, m1, m2, mask, rel_floor, hp->sched};
    const size_t ac[7] = {nadam, nadam, nadam, nadam, nadam, nadam, 4};
    static const char *const sn[STEP_WRITES] = {"bits", "latent", "m1", "v"};
    for (size_t i = 0; i < n; i++) {
        const br_buf *sb[STEP_BUFS];
        size_t sc[STEP_BUFS];
        step_bufs(&a[i], sb, sc);
        char x[40], y[48];
        for (int k = 0; k < 7; k++) {
            snprintf(x, sizeof x, "Adam's %s", an[k]);
            for (int s = 0; s < STEP_WRITES; s++) {
                snprintf(y, sizeof y, "matrix %zu's %s", i, sn[s]);
                BR_TRY(br_check_apart(ctx, fn, x, ab[k], ac[k], y, sb[s], sc[s]));
            }
            snprintf(y, sizeof y, "matrix %zu's flips", i);
            BR_TRY(br_check_apart(ctx, fn, x, ab[k], ac[k], y, a[i].flips, a[i].slot + 1));
            if (k == 0 || k == 2 || k == 3) { /* w, m1, m2: written */
                snprintf(y, sizeof y, "matrix %zu's sched", i);
                BR_TRY(br_check_apart(ctx, fn, x, ab[k], ac[k], y, a[i].sched, BR_SIGN_SCHED));
            }
        }
    }
    if (!n) { /* no step to ride on */
        br_op op = {.kind = BR_OP_ADAM_CAT};
        op.u.adam = adam;
        return br_submit(ctx, &op, 0);
    }
    return submit_sign_steps(ctx, a, n, &adam);
}
