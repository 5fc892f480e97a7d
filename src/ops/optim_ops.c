/* Front-ends of the optimizer ops: br_adam, br_adam_cat, br_sumsq, br_sumsq_cat,
 * br_sumsq_host. */
#include "ops/check.h"
#include "ops/op.h"

/* Hyperparameters: betas in [0, 1), eps > 0; lr ≥ 0, step ≥ 1 and a finite
 * grad_mul unless a sched buffer supplies them when the op runs. */
static br_status check_adam_hp(br_ctx *ctx, const char *fn, const br_adam_hp *hp) {
    if (!hp) return br_fail(ctx, BR_E_ARG, "%s: hp is NULL", fn);
    BR_TRY(br_check_finite(ctx, fn, "hp->beta1", hp->beta1));
    BR_TRY(br_check_finite(ctx, fn, "hp->beta2", hp->beta2));
    BR_TRY(br_check_finite(ctx, fn, "hp->eps", hp->eps));
    if (!(hp->beta1 >= 0.0f && hp->beta1 < 1.0f))
        return br_fail(ctx, BR_E_ARG, "%s: hp->beta1 is %g, outside [0, 1)", fn, hp->beta1);
    if (!(hp->beta2 >= 0.0f && hp->beta2 < 1.0f))
        return br_fail(ctx, BR_E_ARG, "%s: hp->beta2 is %g, outside [0, 1)", fn, hp->beta2);
    if (!(hp->eps > 0.0f))
        return br_fail(ctx, BR_E_ARG, "%s: hp->eps is %g, must be > 0", fn, hp->eps);
    if (hp->sched) return br_check_buf(ctx, fn, "hp->sched", hp->sched, BR_F32, 4);
    BR_TRY(br_check_finite(ctx, fn, "hp->lr", hp->lr));
    BR_TRY(br_check_finite(ctx, fn, "hp->grad_mul", hp->grad_mul));
    if (!(hp->lr >= 0.0f))
        return br_fail(ctx, BR_E_ARG, "%s: hp->lr is %g, must be ≥ 0", fn, hp->lr);
    if (hp->step < 1) return br_fail(ctx, BR_E_ARG, "%s: hp->step is 0, steps count from 1", fn);
    return BR_OK;
}

/* w, grad, m1, m2 f32 [n]; n ≥ 1; the three the op writes are disjoint (passing a
 * moment twice would silently corrupt both). */
static br_status check_adam_bufs(br_ctx *ctx, const char *fn, const br_buf *w, const br_buf *grad,
                                 const br_buf *m1, const br_buf *m2, size_t n) {
    BR_TRY(br_check_dim(ctx, fn, "n", n));
    BR_TRY(br_check_buf(ctx, fn, "w", w, BR_F32, n));
    BR_TRY(br_check_buf(ctx, fn, "grad", grad, BR_F32, n));
    BR_TRY(br_check_buf(ctx, fn, "m1", m1, BR_F32, n));
    BR_TRY(br_check_buf(ctx, fn, "m2", m2, BR_F32, n));
    if (br_bufs_overlap(w, n, m1, n) || br_bufs_overlap(w, n, m2, n) ||
        br_bufs_overlap(m1, n, m2, n))
        return br_fail(ctx, BR_E_ARG, "%s: w, m1 and m2 overlap; each needs its own memory", fn);
    return BR_OK;
}

/* The operands the op only reads (grad, mask, rel_floor, and hp->sched, which every
 * element reads) must not share memory with w, m1 or m2, which it writes. */
static br_status check_adam_inputs(br_ctx *ctx, const char *fn, const br_buf *w, const br_buf *m1,
                                   const br_buf *m2, size_t n, const br_buf *grad,
                                   const br_buf *mask, const br_buf *rel_floor,
                                   const br_buf *sched) {
    const char *const in_names[4] = {"grad", "mask", "rel_floor", "hp->sched"};
    const br_buf *const ins[4] = {grad, mask, rel_floor, sched};
    const size_t in_counts[4] = {n, n, n, 4};
    const char *const out_names[3] = {"w", "m1", "m2"};
    const br_buf *const outs[3] = {w, m1, m2};
    for (size_t i = 0; i < 4; i++)
        for (size_t j = 0; j < 3; j++)
            BR_TRY(br_check_apart(ctx, fn, in_names[i], ins[i], in_counts[i], out_names[j], outs[j],
                                  n));
    return BR_OK;
}

br_status br_adam(br_ctx *ctx, br_buf *w, const br_buf *grad, br_buf *m1, br_buf *m2,
                  const br_buf *mask, size_t n, const br_adam_hp *hp) {
    static const char fn[] = "br_adam";
    BR_TRY(br_check_ctx(ctx));
    BR_TRY(check_adam_bufs(ctx, fn, w, grad, m1, m2, n));
    BR_TRY(br_check_opt_buf(ctx, fn, "mask", mask, BR_F32, n));
    BR_TRY(check_adam_hp(ctx, fn, hp));
    BR_TRY(br_check_finite(ctx, fn, "hp->rel_floor", hp->rel_floor));
    if (hp->rel_floor < 0.0f)
        return br_fail(ctx, BR_E_ARG, "%s: hp->rel_floor is %g, must be ≥ 0", fn, hp->rel_floor);
    BR_TRY(check_adam_inputs(ctx, fn, w, m1, m2, n, grad, mask, NULL, hp->sched));

    br_op op = {.kind = BR_OP_ADAM};
    op.u.adam = (br_adam_args){
        .w = w, .m1 = m1, .m2 = m2, .grad = grad, .mask = mask, .rel_floor = NULL, .n = n};
    op.u.adam.hp = *hp;
    return br_submit(ctx, &op, 0);
}

br_status br_adam_cat_args_of(br_ctx *ctx, const char *fn, br_buf *w, const br_buf *grad,
                              br_buf *m1, br_buf *m2, const br_buf *mask, const br_buf *rel_floor,
                              size_t n, const br_adam_hp *hp, br_adam_args *out) {
    BR_TRY(check_adam_bufs(ctx, fn, w, grad, m1, m2, n));
    BR_TRY(br_check_buf(ctx, fn, "mask", mask, BR_F32, n));
    BR_TRY(br_check_buf(ctx, fn, "rel_floor", rel_floor, BR_F32, n));
    BR_TRY(check_adam_hp(ctx, fn, hp));
    BR_TRY(check_adam_inputs(ctx, fn, w, m1, m2, n, grad, mask, rel_floor, hp->sched));
    *out = (br_adam_args){
        .w = w, .m1 = m1, .m2 = m2, .grad = grad, .mask = mask, .rel_floor = rel_floor, .n = n};
    out->hp = *hp;
    out->hp.rel_floor = 0.0f; /* per element here */
    return BR_OK;
}

br_status br_adam_cat(br_ctx *ctx, br_buf *w, const br_buf *grad, br_buf *m1, br_buf *m2,
                      const br_buf *mask, const br_buf *rel_floor, size_t n, const br_adam_hp *hp) {
    BR_TRY(br_check_ctx(ctx));
    br_op op = {.kind = BR_OP_ADAM_CAT};
    BR_TRY(br_adam_cat_args_of(ctx, "br_adam_cat", w, grad, m1, m2, mask, rel_floor, n, hp,
                               &op.u.adam));
    return br_submit(ctx, &op, 0);
}

br_status br_sumsq(br_ctx *ctx, const br_buf *a, size_t n, br_buf *out) {
    static const char fn[] = "br_sumsq";
    BR_TRY(br_check_ctx(ctx));
    BR_TRY(br_check_dim(ctx, fn, "n", n));
    BR_TRY(br_check_buf(ctx, fn, "a", a, BR_F32, n));
    BR_TRY(br_check_buf(ctx, fn, "out", out, BR_F32, BR_SUMSQ_PARTS));
    BR_TRY(br_check_apart(ctx, fn, "out", out, BR_SUMSQ_PARTS, "a", a, n));

    br_op op = {.kind = BR_OP_SUMSQ};
    op.u.sumsq = (br_sumsq_args){.a = a, .tab = NULL, .n = n, .np = 1, .out = out};
    return br_submit(ctx, &op, 0);
}

/* The (offset, length) pairs of tab live in device memory, where the front-end
 * cannot read them: they are the caller's to get right. The backends clamp every
 * parameter to the elements a holds, so a bad entry reads no memory outside a. */
br_status br_sumsq_cat(br_ctx *ctx, const br_buf *a, const br_buf *tab, size_t np, br_buf *out) {
    static const char fn[] = "br_sumsq_cat";
    BR_TRY(br_check_ctx(ctx));
    BR_TRY(br_check_dim(ctx, fn, "np", np));
    size_t n_tab, n_out;
    BR_TRY(br_check_mul(ctx, fn, "2·np", 2, np, &n_tab));
    BR_TRY(br_check_mul(ctx, fn, "np·BR_SUMSQ_PARTS", np, BR_SUMSQ_PARTS, &n_out));
    BR_TRY(br_check_buf(ctx, fn, "a", a, BR_F32, 1));
    BR_TRY(br_check_dim(ctx, fn, "a's element count", a->count));
    BR_TRY(br_check_buf(ctx, fn, "tab", tab, BR_U32, n_tab));
    BR_TRY(br_check_buf(ctx, fn, "out", out, BR_F32, n_out));
    BR_TRY(br_check_apart(ctx, fn, "out", out, n_out, "a", a, a->count));

    br_op op = {.kind = BR_OP_SUMSQ_CAT};
    op.u.sumsq = (br_sumsq_args){.a = a, .tab = tab, .n = a->count, .np = np, .out = out};
    return br_submit(ctx, &op, 0);
}

br_status br_sumsq_host(br_ctx *ctx, const br_buf *a, size_t n, double *out) {
    static const char fn[] = "br_sumsq_host";
    BR_TRY(br_check_ctx(ctx));
    if (!out) return br_fail(ctx, BR_E_ARG, "%s: out is NULL", fn);
    *out = 0.0;
    if (ctx->rec)
        return br_fail(ctx, BR_E_STATE, "%s: waits for the device, so it cannot be recorded", fn);
    BR_TRY(br_check_dim(ctx, fn, "n", n));
    BR_TRY(br_check_buf(ctx, fn, "a", a, BR_F32, n));

    br_buf *parts = NULL;
    BR_TRY(br_buf_new(ctx, BR_F32, BR_SUMSQ_PARTS, &parts));
    float host[BR_SUMSQ_PARTS];
    br_status st = br_sumsq(ctx, a, n, parts);
    if (st == BR_OK) st = br_ctx_sync(ctx);
    if (st == BR_OK) st = br_buf_download(parts, 0, host, BR_SUMSQ_PARTS);
    br_buf_free(parts);
    if (st != BR_OK) return st;
    double total = 0.0;
    for (int j = 0; j < BR_SUMSQ_PARTS; j++)
        total += (double)host[j];
    *out = total;
    return BR_OK;
}
