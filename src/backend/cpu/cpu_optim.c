/* Adam and the partial sums of squares on the CPU (bitrank.h, "optimizer ops").
 *
 * Adam, for each entry i with mask[i] ≠ 0, in f32 with every operation rounded
 * (no contraction):
 *   g  = grad[i]·grad_mul
 *   m1 = β1·m1 + (1−β1)·g
 *   m2 = β2·m2 + ((1−β2)·g)·g
 *   st = (lr·(m1/bc1)) / (sqrt(m2/bc2) + eps)
 *   w  = w − st,   or with a relative floor ρ > 0:   w = w − st·max(|w|, ρ)
 * where bc = 1 − β^t is computed once per op in double and rounded to f32 (in f32,
 * 1 − β2^t loses most of its digits when β2 is near 1 and t is small).
 * With hp.sched, {lr, t, grad_mul, skip} are read from that buffer when the op
 * runs; skip ≠ 0 leaves everything unchanged. t must then be ≥ 1 (the caller's). */
#include <math.h>

#include "backend/cpu/cpu_ops.h"

/* ADAM (rel_floor NULL: hp.rel_floor for every entry) and ADAM_CAT (per entry). */
static br_status adam_run(br_ctx *ctx, const br_adam_args *x) {
    ctx->stats.launches++;
    float lr = x->hp.lr, grad_mul = x->hp.grad_mul;
    double t = (double)x->hp.step;
    if (x->hp.sched) {
        const float *sched = br_ptr(x->hp.sched); /* {lr, t, grad_mul, skip} */
        if (sched[3] != 0.0f) return BR_OK;       /* a refused step */
        lr = sched[0];
        t = (double)sched[1];
        grad_mul = sched[2];
    }
    const float b1 = x->hp.beta1, b2 = x->hp.beta2, eps = x->hp.eps;
    const float one_m_b1 = 1.0f - b1, one_m_b2 = 1.0f - b2;
    const float bc1 = (float)(1.0 - pow((double)b1, t));
    const float bc2 = (float)(1.0 - pow((double)b2, t));
    const float rho_all = x->hp.rel_floor;

    float *w = br_ptr(x->w), *m1 = br_ptr(x->m1), *m2 = br_ptr(x->m2);
    const float *grad = br_ptr(x->grad), *mask = br_ptr(x->mask), *rho = br_ptr(x->rel_floor);
    const size_t n = x->n;
    const int parallel = n >= PARALLEL_MIN_ELEMS;
    OMP("omp parallel for schedule(static) if(parallel)")
    for (size_t i = 0; i < n; i++) {
        if (mask && mask[i] == 0.0f) continue; /* frozen: nothing written */
        const float g = grad[i] * grad_mul;
        const float m1_new = b1 * m1[i] + one_m_b1 * g;
        const float m2_new = b2 * m2[i] + one_m_b2 * g * g;
        m1[i] = m1_new;
        m2[i] = m2_new;
        const float m_hat = m1_new / bc1;
        const float v_hat = m2_new / bc2;
        const float st = lr * m_hat / (sqrtf(v_hat) + eps);
        const float rho_i = rho ? rho[i] : rho_all;
        if (rho_i > 0.0f)
            w[i] = w[i] - st * fmaxf(fabsf(w[i]), rho_i);
        else
            w[i] = w[i] - st;
    }
    (void)parallel;
    return BR_OK;
}

br_status br_cpu_adam(br_ctx *ctx, const br_op *op) { return adam_run(ctx, &op->u.adam); }

br_status br_cpu_adam_cat(br_ctx *ctx, const br_op *op) { return adam_run(ctx, &op->u.adam); }

/* The partition of br_sumsq into BR_SUMSQ_PARTS = 64 partials of BR_SUMSQ_LANES =
 * 1024 lanes, shaped like a GPU reduction (64 blocks × 1024 threads) so a kernel
 * can match it exactly:
 *   element i goes to partial j = (i / 1024) % 64, lane t = i % 1024;
 *   lane[t] = Σ of its elements' squares in index order from 0, fmaf(x, x, lane);
 *   then for s = 512, 256, …, 1: lane[t] = lane[t] + lane[t + s] for t < s;
 *   partial j = lane[0].
 * Every term is ≥ 0, so NaN and Inf reach the partial they fall in. */
enum { SUMSQ_LANES = BR_SUMSQ_LANES };

static float sumsq_partial(const float *a, size_t n, size_t j) {
    float lane[SUMSQ_LANES] = {0.0f};
    const size_t stride = (size_t)BR_SUMSQ_PARTS * SUMSQ_LANES;
    for (size_t c0 = j * SUMSQ_LANES; c0 < n; c0 += stride) {
        const float *chunk = a + c0;
        const size_t len = n - c0 < SUMSQ_LANES ? n - c0 : SUMSQ_LANES;
        OMP("omp simd")
        for (size_t t = 0; t < len; t++)
            lane[t] = fmaf(chunk[t], chunk[t], lane[t]);
    }
    for (size_t s = SUMSQ_LANES / 2; s > 0; s >>= 1)
        for (size_t t = 0; t < s; t++)
            lane[t] = lane[t] + lane[t + s];
    return lane[0];
}

br_status br_cpu_sumsq(br_ctx *ctx, const br_op *op) {
    const br_sumsq_args *x = &op->u.sumsq;
    const float *a = br_ptr(x->a);
    float *out = br_ptr(x->out);
    ctx->stats.launches++;
    const int parallel = x->n >= PARALLEL_MIN_ELEMS;
    OMP("omp parallel for schedule(static) if(parallel)")
    for (size_t j = 0; j < BR_SUMSQ_PARTS; j++)
        out[j] = sumsq_partial(a, x->n, j);
    (void)parallel;
    return BR_OK;
}

/* Parameter p spans a[off, off + len) from tab, clamped to the x->n elements of a:
 * a bad entry (the caller's) reads nothing outside a. */
br_status br_cpu_sumsq_cat(br_ctx *ctx, const br_op *op) {
    const br_sumsq_args *x = &op->u.sumsq;
    const float *a = br_ptr(x->a);
    const uint32_t *tab = br_ptr(x->tab);
    float *out = br_ptr(x->out);
    ctx->stats.launches++;
    const int parallel = x->n >= PARALLEL_MIN_ELEMS || x->np >= 16;
    OMP("omp parallel for schedule(dynamic, 8) if(parallel)")
    for (size_t pj = 0; pj < x->np * BR_SUMSQ_PARTS; pj++) {
        const size_t p = pj / BR_SUMSQ_PARTS, j = pj % BR_SUMSQ_PARTS;
        const size_t off = tab[2 * p], len = tab[2 * p + 1];
        const size_t avail = off < x->n ? x->n - off : 0;
        out[pj] = sumsq_partial(a + (avail ? off : 0), len < avail ? len : avail, j);
    }
    (void)parallel;
    return BR_OK;
}
