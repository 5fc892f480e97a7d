/* Optimizer ops: br_adam and br_adam_cat against an f64 reference within the
 * contract's 1e-6 relative (each step checked from the device's own state, and a
 * whole trajectory against a pure f64 one), masks (frozen entries bit for bit
 * unchanged), relative floors, the sched buffer (read when the op runs, in a graph
 * too; skip ≠ 0 changes nothing); br_sumsq, br_sumsq_cat, br_sumsq_host against
 * f64 sums, with NaN and Inf propagating; bad arguments of every family. */
#include "harness.h"

#include "core/internal.h" /* ctx->stats: the CPU counts one launch per op */

/* ------------------------------------------------------------------ adam */

/* The state of one Adam run on the host: parameters, moments, and the per-entry
 * mask and floor (NULL: none). */
typedef struct adam_state {
    size_t n;
    float *w, *m1, *m2, *mask, *rho;
} adam_state;

/* Weights in [-1, 1) with some tiny ones (below any floor), moments as after a few
 * steps, masks with zeros (some -0) and a few NaN gradients at frozen entries. */
static adam_state adam_state_new(br_rng *r, size_t n, int masked, int floors) {
    adam_state s = {.n = n};
    s.w = t_rand(r, n, 1.0f);
    s.m1 = t_rand(r, n, 0.1f);
    s.m2 = t_rand(r, n, 0.01f);
    for (size_t i = 0; i < n; i++) {
        s.m2[i] = fabsf(s.m2[i]);
        if (i % 7 == 3) s.w[i] *= 1e-4f;
    }
    if (masked) {
        s.mask = t_xmalloc(n * sizeof *s.mask);
        for (size_t i = 0; i < n; i++) {
            uint64_t u = br_rng_u64(r) % 5;
            s.mask[i] = u == 0 ? 0.0f : u == 1 ? -0.0f : 1.0f;
        }
    }
    if (floors) {
        s.rho = t_xmalloc(n * sizeof *s.rho);
        for (size_t i = 0; i < n; i++)
            s.rho[i] = i % 3 == 0 ? 0.0f : 0.05f;
    }
    return s;
}

static void adam_state_free(adam_state *s) {
    free(s->w);
    free(s->m1);
    free(s->m2);
    free(s->mask);
    free(s->rho);
}

typedef struct adam_sched {
    double lr, t, grad_mul;
} adam_sched;

/* Checks one step from `before` (the device's state before the op) to `after`
 * against the update computed in f64 from `before`: each of w, m1, m2 within 1e-6
 * of the magnitudes that make it (w: |w| + |step|; m1: |β1·m1| + |(1−β1)·g|).
 * Frozen entries must be bit for bit unchanged. rho_all: br_adam's floor. */
static void check_adam_step(const adam_state *before, const adam_state *after, const float *grad,
                            const br_adam_hp *hp, adam_sched sc, float rho_all, const char *what) {
    const double b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps;
    const double bc1 = 1.0 - pow(b1, sc.t), bc2 = 1.0 - pow(b2, sc.t);
    size_t bad_w = 0, bad_m = 0, bad_frozen = 0, first = before->n;
    for (size_t i = 0; i < before->n; i++) {
        if (before->mask && before->mask[i] == 0.0f) {
            int same = memcmp(&before->w[i], &after->w[i], 4) == 0 &&
                       memcmp(&before->m1[i], &after->m1[i], 4) == 0 &&
                       memcmp(&before->m2[i], &after->m2[i], 4) == 0;
            if (!same) bad_frozen++, first = first < i ? first : i;
            continue;
        }
        double g = (double)grad[i] * sc.grad_mul;
        double m1 = b1 * before->m1[i] + (1.0 - b1) * g;
        double m2 = b2 * before->m2[i] + (1.0 - b2) * g * g;
        double st = sc.lr * (m1 / bc1) / (sqrt(m2 / bc2) + eps);
        double w = before->w[i];
        double rho = before->rho ? before->rho[i] : rho_all;
        double step = rho > 0 ? st * fmax(fabs(w), rho) : st;
        double w_new = w - step;
        /* the step's magnitude with m1's terms taken absolutely: what the rounding
         * of m1 (which may cancel) can move the step by */
        double mag_m1 = fabs(b1 * before->m1[i]) + fabs((1.0 - b1) * g);
        double mag_step = sc.lr * (mag_m1 / bc1) / (sqrt(m2 / bc2) + eps);
        if (rho > 0) mag_step *= fmax(fabs(w), rho);
        if (!(fabs(after->w[i] - w_new) <= 1e-6 * (fabs(w) + mag_step) + 1e-30))
            bad_w++, first = first < i ? first : i;
        if (!(fabs(after->m1[i] - m1) <= 1e-6 * mag_m1 + 1e-30) ||
            !(fabs(after->m2[i] - m2) <= 1e-6 * m2 + 1e-30))
            bad_m++, first = first < i ? first : i;
    }
    CHECK(bad_w + bad_m + bad_frozen == 0,
          "%s: %zu weights, %zu moments off the f64 step, %zu frozen entries written (first %zu)",
          what, bad_w, bad_m, bad_frozen, first);
}

typedef struct adam_bufs {
    br_buf *w, *grad, *m1, *m2, *mask, *rho;
} adam_bufs;

static adam_bufs adam_bufs_new(br_ctx *ctx, const adam_state *s) {
    adam_bufs b = {0};
    b.w = t_buf_from(ctx, BR_F32, s->w, s->n);
    b.m1 = t_buf_from(ctx, BR_F32, s->m1, s->n);
    b.m2 = t_buf_from(ctx, BR_F32, s->m2, s->n);
    b.grad = t_buf_poison(ctx, BR_F32, s->n, 0);
    if (s->mask) b.mask = t_buf_from(ctx, BR_F32, s->mask, s->n);
    if (s->rho) b.rho = t_buf_from(ctx, BR_F32, s->rho, s->n);
    return b;
}

static void adam_bufs_free(adam_bufs *b) {
    br_buf_free(b->w);
    br_buf_free(b->grad);
    br_buf_free(b->m1);
    br_buf_free(b->m2);
    br_buf_free(b->mask);
    br_buf_free(b->rho);
}

/* The device's state, with the host's mask and floors. */
static adam_state adam_download(br_ctx *ctx, const adam_bufs *b, const adam_state *host) {
    adam_state s = *host;
    s.w = t_download_f32(ctx, b->w, host->n);
    s.m1 = t_download_f32(ctx, b->m1, host->n);
    s.m2 = t_download_f32(ctx, b->m2, host->n);
    return s;
}
static void adam_download_free(adam_state *s) {
    free(s->w);
    free(s->m1);
    free(s->m2);
}

/* Fresh gradients (NaN at frozen entries: they must not leak). */
static float *adam_grads(br_rng *r, const adam_state *s, float scale) {
    float *g = t_rand(r, s->n, scale);
    if (s->mask)
        for (size_t i = 0; i < s->n; i++)
            if (s->mask[i] == 0.0f && i % 2) g[i] = NAN;
    return g;
}

/* Five steps of br_adam / br_adam_cat from step t0, each checked from the device's
 * own state, and the trajectory against a pure f64 one. */
static void run_adam(br_ctx *ctx, br_rng *r, size_t n, int cat, int masked, float rho_all,
                     uint32_t t0) {
    adam_state host = adam_state_new(r, n, masked || cat, cat);
    if (cat && !masked)
        for (size_t i = 0; i < n; i++)
            host.mask[i] = 1.0f;
    adam_bufs b = adam_bufs_new(ctx, &host);
    br_adam_hp hp = {.lr = 1e-2f,
                     .beta1 = 0.9f,
                     .beta2 = 0.999f,
                     .eps = 1e-8f,
                     .step = t0,
                     .grad_mul = 0.75f,
                     .rel_floor = cat ? 0.0f : rho_all};
    /* the pure f64 trajectory */
    double *w = t_xmalloc(n * sizeof *w), *m1 = t_xmalloc(n * sizeof *m1),
           *m2 = t_xmalloc(n * sizeof *m2);
    /* magnitudes the f32 roundings scale with: |m1|'s companion without
     * cancellation, and |w0| + Σ|step| computed from it */
    double *mag_m1 = t_xmalloc(n * sizeof *mag_m1), *mag_w = t_xmalloc(n * sizeof *mag_w);
    for (size_t i = 0; i < n; i++) {
        w[i] = host.w[i], m1[i] = host.m1[i], m2[i] = host.m2[i];
        mag_m1[i] = fabs(m1[i]), mag_w[i] = fabs(w[i]);
    }
    char what[96];
    for (int s = 0; s < 5; s++, hp.step++) {
        float *grad = adam_grads(r, &host, s == 2 ? 1e-3f : 1.0f);
        CHECK_OK(ctx, br_buf_upload(b.grad, 0, grad, n));
        adam_state before = adam_download(ctx, &b, &host);
        if (cat)
            CHECK_OK(ctx, br_adam_cat(ctx, b.w, b.grad, b.m1, b.m2, b.mask, b.rho, n, &hp));
        else
            CHECK_OK(ctx, br_adam(ctx, b.w, b.grad, b.m1, b.m2, b.mask, n, &hp));
        adam_state after = adam_download(ctx, &b, &host);
        snprintf(what, sizeof what, "%s n=%zu mask=%d rho=%g step %u", cat ? "adam_cat" : "adam", n,
                 masked, (double)rho_all, hp.step);
        adam_sched sc = {hp.lr, hp.step, hp.grad_mul};
        check_adam_step(&before, &after, grad, &hp, sc, rho_all, what);
        for (size_t i = 0; i < n; i++) {
            if (host.mask && host.mask[i] == 0.0f) continue;
            double g = (double)grad[i] * hp.grad_mul;
            m1[i] = hp.beta1 * m1[i] + (1.0 - hp.beta1) * g;
            m2[i] = hp.beta2 * m2[i] + (1.0 - hp.beta2) * g * g;
            mag_m1[i] = hp.beta1 * mag_m1[i] + (1.0 - hp.beta1) * fabs(g);
            double den = (1.0 - pow(hp.beta1, hp.step)) *
                         (sqrt(m2[i] / (1.0 - pow(hp.beta2, hp.step))) + hp.eps);
            double rho = host.rho ? host.rho[i] : rho_all;
            double floor_mul = rho > 0 ? fmax(fabs(w[i]), rho) : 1.0;
            w[i] -= hp.lr * m1[i] / den * floor_mul;
            mag_w[i] += hp.lr * mag_m1[i] / den * floor_mul;
        }
        adam_download_free(&before);
        adam_download_free(&after);
        free(grad);
    }
    float *got = t_download_f32(ctx, b.w, n);
    size_t bad = 0, first = n;
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - w[i]) <= 2e-6 * mag_w[i] + 1e-30)) bad++, first = first < i ? first : i;
    CHECK(bad == 0, "%s: after 5 steps %zu weights are off the f64 trajectory (first %zu)", what,
          bad, first);
    CHECK(t_rel_err(got, w, n) < 1e-6 || n < 10, "%s: ‖w − w_f64‖/‖w_f64‖ = %.3g", what,
          t_rel_err(got, w, n));
    free(got);
    free(mag_m1);
    free(mag_w);
    free(w);
    free(m1);
    free(m2);
    adam_bufs_free(&b);
    adam_state_free(&host);
}

static void adam_matches_f64(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(1);
    static const size_t sizes[] = {1, 37, 1000, 70001};
    for (size_t s = 0; s < 4; s++) {
        run_adam(ctx, &r, sizes[s], 0, 0, 0.0f, 1);
        run_adam(ctx, &r, sizes[s], 0, 1, 0.0f, 3);
        run_adam(ctx, &r, sizes[s], 0, 0, 0.05f, 1);
        run_adam(ctx, &r, sizes[s], 0, 1, 0.05f, 9);
    }
    br_ctx_free(ctx);
}

static void adam_cat_matches_f64(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(2);
    static const size_t sizes[] = {1, 37, 1000, 70001};
    for (size_t s = 0; s < 4; s++) {
        run_adam(ctx, &r, sizes[s], 1, 0, 0.0f, 1);
        run_adam(ctx, &r, sizes[s], 1, 1, 0.0f, 2);
    }
    br_ctx_free(ctx);
}

/* hp->sched replaces lr, t and grad_mul (the host values are not even checked);
 * skip ≠ 0 leaves w, m1 and m2 bit for bit unchanged. */
static void adam_sched_buffer(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(3);
    size_t n = 777;
    for (int cat = 0; cat < 2; cat++) {
        adam_state host = adam_state_new(&r, n, 1, cat);
        adam_bufs b = adam_bufs_new(ctx, &host);
        float sched[4] = {3e-3f, 4.0f, 1.5f, 0.0f};
        br_buf *bsched = t_buf_from(ctx, BR_F32, sched, 4);
        br_adam_hp hp = {.lr = NAN,
                         .beta1 = 0.8f,
                         .beta2 = 0.99f,
                         .eps = 1e-6f,
                         .step = 0,
                         .grad_mul = INFINITY,
                         .rel_floor = cat ? 0.0f : 0.02f,
                         .sched = bsched};
        float *grad = adam_grads(&r, &host, 1.0f);
        CHECK_OK(ctx, br_buf_upload(b.grad, 0, grad, n));
        for (int s = 0; s < 3; s++) {
            /* step 2 is refused: skip = 1 (then NaN, which is ≠ 0 too) */
            sched[0] = 3e-3f * (float)(s + 1);
            sched[1] = (float)(4 + s);
            sched[3] = s == 1 ? 1.0f : 0.0f;
            CHECK_OK(ctx, br_buf_upload(bsched, 0, sched, 4));
            adam_state before = adam_download(ctx, &b, &host);
            if (cat)
                CHECK_OK(ctx, br_adam_cat(ctx, b.w, b.grad, b.m1, b.m2, b.mask, b.rho, n, &hp));
            else
                CHECK_OK(ctx, br_adam(ctx, b.w, b.grad, b.m1, b.m2, b.mask, n, &hp));
            adam_state after = adam_download(ctx, &b, &host);
            if (s == 1) {
                CHECK(t_first_diff32(before.w, after.w, n) == n &&
                          t_first_diff32(before.m1, after.m1, n) == n &&
                          t_first_diff32(before.m2, after.m2, n) == n,
                      "%s: a skipped step changed the state", cat ? "adam_cat" : "adam");
                sched[3] = NAN;
                CHECK_OK(ctx, br_buf_upload(bsched, 0, sched, 4));
                if (cat)
                    CHECK_OK(ctx, br_adam_cat(ctx, b.w, b.grad, b.m1, b.m2, b.mask, b.rho, n, &hp));
                else
                    CHECK_OK(ctx, br_adam(ctx, b.w, b.grad, b.m1, b.m2, b.mask, n, &hp));
                float *w = t_download_f32(ctx, b.w, n);
                CHECK(t_first_diff32(before.w, w, n) == n, "skip = NaN changed the weights");
                free(w);
            } else {
                adam_sched sc = {sched[0], sched[1], sched[2]};
                check_adam_step(&before, &after, grad, &hp, sc, hp.rel_floor,
                                cat ? "adam_cat sched" : "adam sched");
            }
            adam_download_free(&before);
            adam_download_free(&after);
        }
        free(grad);
        br_buf_free(bsched);
        adam_bufs_free(&b);
        adam_state_free(&host);
    }
    br_ctx_free(ctx);
}

/* A graph records the op once; each launch reads that moment's schedule. */
static void adam_sched_in_a_graph(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(4);
    size_t n = 3000;
    adam_state host = adam_state_new(&r, n, 1, 1);
    adam_bufs b = adam_bufs_new(ctx, &host);
    float sched[4] = {0};
    br_buf *bsched = t_buf_from(ctx, BR_F32, sched, 4);
    br_adam_hp hp = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .sched = bsched};
    float *grad = adam_grads(&r, &host, 1.0f);
    CHECK_OK(ctx, br_buf_upload(b.grad, 0, grad, n));
    br_graph *g = NULL;
    CHECK_OK(ctx, br_graph_begin(ctx));
    CHECK_OK(ctx, br_adam_cat(ctx, b.w, b.grad, b.m1, b.m2, b.mask, b.rho, n, &hp));
    CHECK_OK(ctx, br_graph_end(ctx, &g));
    adam_state untouched = adam_download(ctx, &b, &host);
    CHECK(t_first_diff32(untouched.w, host.w, n) == n, "recording ran the op");
    adam_download_free(&untouched);
    for (int s = 1; s <= 4; s++) {
        float now[4] = {1e-3f * (float)s, (float)s, 0.5f, s == 3 ? 1.0f : 0.0f};
        CHECK_OK(ctx, br_buf_upload(bsched, 0, now, 4));
        adam_state before = adam_download(ctx, &b, &host);
        CHECK_OK(ctx, br_graph_launch(g));
        adam_state after = adam_download(ctx, &b, &host);
        if (s == 3) {
            CHECK(t_first_diff32(before.w, after.w, n) == n &&
                      t_first_diff32(before.m1, after.m1, n) == n,
                  "a skipped replay changed the state");
        } else {
            adam_sched sc = {now[0], now[1], now[2]};
            check_adam_step(&before, &after, grad, &hp, sc, 0.0f, "adam_cat graph");
        }
        adam_download_free(&before);
        adam_download_free(&after);
    }
    br_graph_free(g);
    free(grad);
    br_buf_free(bsched);
    adam_bufs_free(&b);
    adam_state_free(&host);
    br_ctx_free(ctx);
}

static void adam_bad_arguments(void) {
    br_ctx *ctx = t_ctx(), *other = t_cpu_ctx();
    size_t n = 50;
    br_buf *w = t_buf_poison(ctx, BR_F32, n, 0), *g = t_buf_poison(ctx, BR_F32, n, 0);
    br_buf *m1 = t_buf_poison(ctx, BR_F32, n, 0), *m2 = t_buf_poison(ctx, BR_F32, n, 0);
    br_buf *mask = t_buf_poison(ctx, BR_F32, n, 0), *rho = t_buf_poison(ctx, BR_F32, n, 0);
    br_buf *half = t_buf_poison(ctx, BR_F16, n, 0), *small = t_buf_poison(ctx, BR_F32, n - 1, 0);
    br_buf *sched3 = t_buf_poison(ctx, BR_F32, 3, 0), *sched_u = t_buf_poison(ctx, BR_U32, 4, 0);
    br_buf *foreign = t_buf_poison(other, BR_F32, n, 0);
    const br_adam_hp ok = {
        .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 1, .grad_mul = 1.0f};
    br_adam_hp hp;

    CHECK(br_adam(NULL, w, g, m1, m2, NULL, n, &ok) == BR_E_ARG, "NULL ctx accepted");
    CHECK(br_adam_cat(NULL, w, g, m1, m2, mask, rho, n, &ok) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "w is NULL", br_adam(ctx, NULL, g, m1, m2, NULL, n, &ok));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "grad is NULL", br_adam(ctx, w, NULL, m1, m2, NULL, n, &ok));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "m1 is NULL", br_adam(ctx, w, g, NULL, m2, NULL, n, &ok));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "m2 is NULL",
                    br_adam_cat(ctx, w, g, m1, NULL, mask, rho, n, &ok));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "mask is NULL",
                    br_adam_cat(ctx, w, g, m1, m2, NULL, rho, n, &ok));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "rel_floor is NULL",
                    br_adam_cat(ctx, w, g, m1, m2, mask, NULL, n, &ok));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "hp is NULL", br_adam(ctx, w, g, m1, m2, NULL, n, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "grad is a f16", br_adam(ctx, w, half, m1, m2, NULL, n, &ok));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "mask is a f16", br_adam(ctx, w, g, m1, m2, half, n, &ok));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "m2 holds", br_adam(ctx, w, g, m1, small, NULL, n, &ok));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "rel_floor holds",
                    br_adam_cat(ctx, w, g, m1, m2, mask, small, n, &ok));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "n is 0", br_adam(ctx, w, g, m1, m2, NULL, 0, &ok));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "n",
                    br_adam(ctx, w, g, m1, m2, NULL, (size_t)1 << 40, &ok));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context",
                    br_adam(ctx, w, g, foreign, m2, NULL, n, &ok));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context",
                    br_adam_cat(ctx, w, g, m1, m2, mask, foreign, n, &ok));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlap", br_adam(ctx, w, g, m1, m1, NULL, n, &ok));
    br_buf *w_tail = NULL;
    CHECK_OK(ctx, br_buf_view(m2, 1, n - 1, &w_tail)); /* one element apart */
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlap",
                    br_adam_cat(ctx, w_tail, g, m1, m2, mask, rho, n - 1, &ok));
    br_buf_free(w_tail);
    { /* adjacent views of one allocation are fine */
        br_buf *state = t_buf_poison(ctx, BR_F32, 3 * n, 0), *vw, *v1, *v2;
        CHECK_OK(ctx, br_buf_view(state, 0, n, &vw));
        CHECK_OK(ctx, br_buf_view(state, n, n, &v1));
        CHECK_OK(ctx, br_buf_view(state, 2 * n, n, &v2));
        CHECK_OK(ctx, br_adam(ctx, vw, g, v1, v2, NULL, n, &ok));
        /* what the op only reads must not share memory with what it writes: a
         * shifted grad would be read after w was written, and every element reads
         * the sched buffer */
        br_buf *shifted, *sched_in_m2;
        CHECK_OK(ctx, br_buf_view(state, n / 2, n, &shifted));
        CHECK_OK(ctx, br_buf_view(state, 2 * n + 3, 4, &sched_in_m2));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "grad overlaps w",
                        br_adam(ctx, vw, shifted, v1, v2, NULL, n, &ok));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "mask overlaps w",
                        br_adam(ctx, vw, g, v1, v2, shifted, n, &ok));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "rel_floor overlaps w",
                        br_adam_cat(ctx, vw, g, v1, v2, mask, shifted, n, &ok));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "grad overlaps w", br_adam(ctx, w, w, m1, m2, NULL, n, &ok));
        hp = ok, hp.sched = sched_in_m2;
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "hp->sched overlaps m2",
                        br_adam_cat(ctx, vw, g, v1, v2, mask, rho, n, &hp));
        br_buf_free(shifted);
        br_buf_free(sched_in_m2);
        br_buf_free(vw);
        br_buf_free(v1);
        br_buf_free(v2);
        br_buf_free(state);
    }
    hp = ok, hp.lr = -1e-3f;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "hp->lr", br_adam(ctx, w, g, m1, m2, NULL, n, &hp));
    hp = ok, hp.lr = NAN;
    CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "hp->lr", br_adam(ctx, w, g, m1, m2, NULL, n, &hp));
    hp = ok, hp.beta1 = 1.0f;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "hp->beta1", br_adam(ctx, w, g, m1, m2, NULL, n, &hp));
    hp = ok, hp.beta2 = -0.1f;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "hp->beta2", br_adam(ctx, w, g, m1, m2, NULL, n, &hp));
    hp = ok, hp.eps = 0.0f;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "hp->eps", br_adam_cat(ctx, w, g, m1, m2, mask, rho, n, &hp));
    hp = ok, hp.step = 0;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "hp->step", br_adam(ctx, w, g, m1, m2, NULL, n, &hp));
    hp = ok, hp.grad_mul = INFINITY;
    CHECK_FAILS_MSG(ctx, BR_E_NONFINITE, "hp->grad_mul", br_adam(ctx, w, g, m1, m2, NULL, n, &hp));
    hp = ok, hp.rel_floor = -0.5f;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "hp->rel_floor", br_adam(ctx, w, g, m1, m2, NULL, n, &hp));
    hp = ok, hp.rel_floor = -0.5f; /* br_adam_cat reads its floors per element */
    CHECK_OK(ctx, br_adam_cat(ctx, w, g, m1, m2, mask, rho, n, &hp));
    hp = ok, hp.sched = sched3;
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "hp->sched holds", br_adam(ctx, w, g, m1, m2, NULL, n, &hp));
    hp = ok, hp.sched = sched_u;
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "hp->sched is a u32",
                    br_adam(ctx, w, g, m1, m2, NULL, n, &hp));
    hp = ok, hp.sched = foreign;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context", br_adam(ctx, w, g, m1, m2, NULL, n, &hp));

    br_buf *bufs[] = {w, g, m1, m2, mask, rho, half, small, sched3, sched_u, foreign};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        br_buf_free(bufs[i]);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

/* ------------------------------------------------------------------ sumsq */

/* |got − Σ a² in f64| within the rounding of 64 partials of 1024 lanes (each lane
 * ⌈n/65536⌉ fmaf, then a 10-level tree) and the host's sum of the partials. */
static int sumsq_close(double got, const float *a, size_t n, double *want) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * a[i];
    *want = s;
    double terms = (double)(n / (BR_SUMSQ_PARTS * BR_SUMSQ_LANES) + 1) + 10 + 1;
    return fabs(got - s) <= terms * 0x1p-24 * s + 1e-37;
}

static double sum_parts(const float *parts) {
    double s = 0;
    for (int j = 0; j < BR_SUMSQ_PARTS; j++)
        s += parts[j];
    return s;
}

/* The CPU's partition, scalar: partial j sums lanes t < 1024 of the elements
 * i = (64q + j)·1024 + t (fmaf, q ascending), then adds the lanes as a tree. */
static void ref_sumsq_parts(const float *a, size_t n, float *parts) {
    for (size_t j = 0; j < 64; j++) {
        float lane[1024];
        for (size_t t = 0; t < 1024; t++) {
            lane[t] = 0.0f;
            for (size_t i = j * 1024 + t; i < n; i += 64 * 1024)
                lane[t] = fmaf(a[i], a[i], lane[t]);
        }
        for (size_t s = 512; s > 0; s /= 2)
            for (size_t t = 0; t < s; t++)
                lane[t] = lane[t] + lane[t + s];
        parts[j] = lane[0];
    }
}

static void sumsq_matches_f64(void) {
    br_ctx *ctx = t_ctx();
    int cpu = strcmp(br_ctx_backend(ctx), "cpu") == 0;
    br_rng r = t_rng_for(5);
    static const size_t sizes[] = {1, 255, 256, 1023, 1024, 16385, 65535, 65537, 100003, 1234567};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        float *a = t_rand(&r, n, 3.0f);
        br_buf *ba = t_buf_from(ctx, BR_F32, a, n);
        br_buf *out = t_buf_poison(ctx, BR_F32, BR_SUMSQ_PARTS + 3, T_NAN32);
        CHECK_OK(ctx, br_sumsq(ctx, ba, n, out));
        float *parts = t_download_f32(ctx, out, BR_SUMSQ_PARTS + 3);
        double want;
        CHECK(sumsq_close(sum_parts(parts), a, n, &want), "sumsq n=%zu: %.9g, want %.9g", n,
              sum_parts(parts), want);
        for (int j = BR_SUMSQ_PARTS; j < BR_SUMSQ_PARTS + 3; j++)
            CHECK(isnan(parts[j]), "sumsq n=%zu wrote past its 64 partials", n);
        if (cpu) { /* the documented partition, bit for bit */
            float ref[BR_SUMSQ_PARTS];
            ref_sumsq_parts(a, n, ref);
            CHECK(t_first_diff32(parts, ref, BR_SUMSQ_PARTS) == BR_SUMSQ_PARTS,
                  "sumsq n=%zu: partials differ from the documented partition", n);
        }
        double host;
        CHECK_OK(ctx, br_sumsq_host(ctx, ba, n, &host));
        CHECK(sumsq_close(host, a, n, &want), "sumsq_host n=%zu: %.9g, want %.9g", n, host, want);
        /* a prefix of the buffer */
        if (n > 10) {
            CHECK_OK(ctx, br_sumsq_host(ctx, ba, n / 2, &host));
            CHECK(sumsq_close(host, a, n / 2, &want), "sumsq_host of a prefix");
        }
        free(parts);
        free(a);
        br_buf_free(ba);
        br_buf_free(out);
    }
    br_ctx_free(ctx);
}

/* A NaN anywhere makes the sum NaN; an Inf (or a square that overflows) makes it
 * +Inf — the signal that lets a caller refuse a step. */
static void sumsq_propagates_nonfinite(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(6);
    size_t n = 50000;
    float *a = t_rand(&r, n, 1.0f);
    br_buf *ba = t_buf_from(ctx, BR_F32, a, n);
    static const float bad[] = {NAN, INFINITY, -INFINITY, 1e30f, -3e19f};
    for (size_t v = 0; v < sizeof bad / sizeof bad[0]; v++) {
        for (int rep = 0; rep < 3; rep++) {
            size_t at = rep == 0 ? 0 : rep == 1 ? n - 1 : t_rand_size(&r, 0, n - 1);
            CHECK_OK(ctx, br_buf_upload(ba, at, &bad[v], 1));
            double host;
            CHECK_OK(ctx, br_sumsq_host(ctx, ba, n, &host));
            if (isnan(bad[v]))
                CHECK(isnan(host), "a NaN at %zu gave sumsq %g", at, host);
            else
                CHECK(isinf(host) && host > 0, "%g at %zu gave sumsq %g", (double)bad[v], at, host);
            /* sumsq_cat sees it too, in the parameter that holds it */
            uint32_t tab[4] = {0, (uint32_t)at, (uint32_t)at, (uint32_t)(n - at)};
            br_buf *btab = t_buf_from(ctx, BR_U32, tab, 4);
            br_buf *out = t_buf_poison(ctx, BR_F32, 2 * BR_SUMSQ_PARTS, T_NAN32);
            CHECK_OK(ctx, br_sumsq_cat(ctx, ba, btab, 2, out));
            float *parts = t_download_f32(ctx, out, 2 * BR_SUMSQ_PARTS);
            double s0 = sum_parts(parts), s1 = sum_parts(parts + BR_SUMSQ_PARTS);
            CHECK(isfinite(s0), "sumsq_cat: the clean parameter is %g", s0);
            CHECK(isnan(bad[v]) ? isnan(s1) : (isinf(s1) && s1 > 0),
                  "sumsq_cat: the parameter holding %g sums to %g", (double)bad[v], s1);
            free(parts);
            br_buf_free(out);
            br_buf_free(btab);
            CHECK_OK(ctx, br_buf_upload(ba, at, &a[at], 1));
        }
    }
    free(a);
    br_buf_free(ba);
    br_ctx_free(ctx);
}

/* np parameters of a concatenation, each against f64 (and on the CPU bit for bit
 * against the documented partition); empty parameters, and entries that
 * reach past a (clamped to it: nothing outside a is read). */
static void sumsq_cat_matches_f64(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(7);
    size_t n = 300007, np = 9;
    float *a = t_rand(&r, n, 2.0f);
    br_buf *ba = t_buf_from(ctx, BR_F32, a, n);
    uint32_t tab[2 * 9] = {
        0,      1,     /* one element */
        1,      70000, /* a big one */
        70001,  0,     /* empty */
        70001,  256,   /* one lane row exactly */
        5,      16385, /* overlaps the second: parameters may share elements */
        299000, 1007,  /* the tail, exactly to the end */
        299500, 5000,  /* past the end: clamped to 507 */
        400000, 10,    /* starts past the end: empty */
        123,    99999,
    };
    br_buf *btab = t_buf_from(ctx, BR_U32, tab, 2 * np);
    br_buf *out = t_buf_poison(ctx, BR_F32, np * BR_SUMSQ_PARTS + 2, T_NAN32);
    CHECK_OK(ctx, br_sumsq_cat(ctx, ba, btab, np, out));
    float *parts = t_download_f32(ctx, out, np * BR_SUMSQ_PARTS + 2);
    for (size_t p = 0; p < np; p++) {
        size_t off = tab[2 * p], len = tab[2 * p + 1];
        size_t avail = off < n ? n - off : 0;
        if (len > avail) len = avail;
        double got = sum_parts(parts + p * BR_SUMSQ_PARTS), want;
        CHECK(sumsq_close(got, a + (len ? off : 0), len, &want), "parameter %zu: %.9g, want %.9g",
              p, got, want);
        if (len == 0)
            for (int j = 0; j < BR_SUMSQ_PARTS; j++)
                CHECK(parts[p * BR_SUMSQ_PARTS + j] == 0.0f, "empty parameter %zu: partial %d", p,
                      j);
        if (strcmp(br_ctx_backend(ctx), "cpu") == 0) {
            float ref[BR_SUMSQ_PARTS];
            ref_sumsq_parts(a + (len ? off : 0), len, ref);
            CHECK(t_first_diff32(parts + p * BR_SUMSQ_PARTS, ref, BR_SUMSQ_PARTS) == BR_SUMSQ_PARTS,
                  "parameter %zu: partials differ from the documented partition", p);
        }
    }
    CHECK(isnan(parts[np * BR_SUMSQ_PARTS]) && isnan(parts[np * BR_SUMSQ_PARTS + 1]),
          "sumsq_cat wrote past np·64 partials");
    free(parts);
    free(a);
    br_buf_free(ba);
    br_buf_free(btab);
    br_buf_free(out);
    br_ctx_free(ctx);
}

static void optim_counts_launches(void) {
    br_ctx *ctx = t_ctx();
    if (strcmp(br_ctx_backend(ctx), "cpu") != 0) { /* CUDA counts kernels, not ops */
        br_ctx_free(ctx);
        return;
    }
    br_rng r = t_rng_for(8);
    size_t n = 100;
    adam_state host = adam_state_new(&r, n, 1, 1);
    adam_bufs b = adam_bufs_new(ctx, &host);
    br_adam_hp hp = {
        .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 1, .grad_mul = 1.0f};
    uint32_t tab[2] = {0, 100};
    br_buf *btab = t_buf_from(ctx, BR_U32, tab, 2), *out = t_buf_poison(ctx, BR_F32, 64, 0);
    uint64_t l0 = ctx->stats.launches;
    CHECK_OK(ctx, br_adam(ctx, b.w, b.grad, b.m1, b.m2, NULL, n, &hp));
    CHECK_OK(ctx, br_adam_cat(ctx, b.w, b.grad, b.m1, b.m2, b.mask, b.rho, n, &hp));
    CHECK_OK(ctx, br_sumsq(ctx, b.w, n, out));
    CHECK_OK(ctx, br_sumsq_cat(ctx, b.w, btab, 1, out));
    CHECK(ctx->stats.launches - l0 == 4, "four ops counted %llu launches",
          (unsigned long long)(ctx->stats.launches - l0));
    br_buf_free(btab);
    br_buf_free(out);
    adam_bufs_free(&b);
    adam_state_free(&host);
    br_ctx_free(ctx);
}

static void sumsq_bad_arguments(void) {
    br_ctx *ctx = t_ctx(), *other = t_cpu_ctx();
    size_t n = 300;
    br_buf *a = t_buf_poison(ctx, BR_F32, n, 0), *out = t_buf_poison(ctx, BR_F32, 2 * 64, 0);
    br_buf *out63 = t_buf_poison(ctx, BR_F32, 63, 0), *half = t_buf_poison(ctx, BR_F16, n, 0);
    br_buf *tab = t_buf_poison(ctx, BR_U32, 4, 0), *tab_f = t_buf_poison(ctx, BR_F32, 4, 0);
    br_buf *foreign = t_buf_poison(other, BR_F32, n, 0);
    double host = 1.0;

    CHECK(br_sumsq(NULL, a, n, out) == BR_E_ARG, "NULL ctx accepted");
    CHECK(br_sumsq_host(NULL, a, n, &host) == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "a is NULL", br_sumsq(ctx, NULL, n, out));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "out is NULL", br_sumsq(ctx, a, n, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "a is a f16", br_sumsq(ctx, half, n, out));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "a holds", br_sumsq(ctx, a, n + 1, out));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "out holds", br_sumsq(ctx, a, n, out63));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "n is 0", br_sumsq(ctx, a, 0, out));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context", br_sumsq(ctx, foreign, n, out));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "tab is NULL", br_sumsq_cat(ctx, a, NULL, 2, out));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "tab is a f32", br_sumsq_cat(ctx, a, tab_f, 2, out));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "tab holds", br_sumsq_cat(ctx, a, tab, 3, out));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "out holds", br_sumsq_cat(ctx, a, tab, 2, out63));
    CHECK_FAILS_MSG(ctx, BR_E_SHAPE, "np is 0", br_sumsq_cat(ctx, a, tab, 0, out));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "np", br_sumsq_cat(ctx, a, tab, (size_t)1 << 30, out));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context", br_sumsq_cat(ctx, a, tab, 2, foreign));
    { /* the partials must not land in the elements being summed */
        br_buf *tail = NULL;
        CHECK_OK(ctx, br_buf_view(a, n - 64, 64, &tail));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "out overlaps a", br_sumsq(ctx, a, n, tail));
        CHECK_OK(ctx, br_sumsq(ctx, a, n - 64, tail));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "out overlaps a", br_sumsq_cat(ctx, a, tab, 1, tail));
        br_buf_free(tail);
    }
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "out is NULL", br_sumsq_host(ctx, a, n, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "a holds", br_sumsq_host(ctx, a, n + 1, &host));
    CHECK(host == 0.0, "a failed br_sumsq_host left %g in *out", host);
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context", br_sumsq_host(ctx, foreign, n, &host));
    /* it waits for the device, so a recording refuses it */
    CHECK_OK(ctx, br_graph_begin(ctx));
    CHECK_FAILS_MSG(ctx, BR_E_STATE, "recorded", br_sumsq_host(ctx, a, n, &host));
    br_graph *g = NULL;
    CHECK_OK(ctx, br_graph_end(ctx, &g));
    br_graph_free(g);

    br_buf *bufs[] = {a, out, out63, half, tab, tab_f, foreign};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        br_buf_free(bufs[i]);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

T_RUN("optim_ops", T_CASE(adam_matches_f64), T_CASE(adam_cat_matches_f64),
      T_CASE(adam_sched_buffer), T_CASE(adam_sched_in_a_graph), T_CASE(adam_bad_arguments),
      T_CASE(sumsq_matches_f64), T_CASE(sumsq_propagates_nonfinite), T_CASE(sumsq_cat_matches_f64),
      T_CASE(optim_counts_launches), T_CASE(sumsq_bad_arguments))
