/* The training objective as a pool of tokens (src/compress/objective.c): the
 * rotation is orthogonal, and the pool reproduces J(Ŵ) = J_data + λ·‖E‖²/‖W‖²
 * exactly (up to its scale) for every kind of calibration, against an f64
 * reference written here. */
#include "compress/objective.h"
#include "harness.h"

static void fill_normal(br_rng *rng, float *x, size_t count, double scale) {
    for (size_t i = 0; i < count; i++)
        x[i] = (float)(scale * br_rng_normal(rng));
}

/* Σ_k z_k·z_kᵀ [n][n] in f64. */
static double *gram_of(const float *z, size_t rows, size_t n) {
    double *g = calloc(n * n, sizeof *g);
    for (size_t k = 0; k < rows; k++)
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < n; j++)
                g[i * n + j] += (double)z[k * n + i] * z[k * n + j];
    return g;
}

static void rotation_is_orthogonal(void) {
    br_rng rng = t_rng_for(1);
    const size_t rows = 64, n = 7;
    float *x = malloc(rows * n * sizeof *x), *y = malloc(rows * n * sizeof *y);
    fill_normal(&rng, x, rows * n, 1.0);
    memcpy(y, x, rows * n * sizeof *y);
    br_rotate_tokens(y, rows, n, 42);
    double *gx = gram_of(x, rows, n), *gy = gram_of(y, rows, n);
    double worst = 0, tr = 0;
    for (size_t e = 0; e < n * n; e++) {
        double d = fabs(gx[e] - gy[e]);
        if (d > worst) worst = d;
    }
    for (size_t j = 0; j < n; j++)
        tr += gx[j * n + j];
    CHECK(worst < 1e-5 * tr, "rotation changed the Gram: worst %g (trace %g)", worst, tr);
    /* every token mixes the others: row 0 of a one-hot pool spreads over all rows */
    memset(x, 0, rows * n * sizeof *x);
    x[0] = 1.0f;
    br_rotate_tokens(x, rows, n, 42);
    size_t touched = 0;
    for (size_t k = 0; k < rows; k++)
        touched += fabsf(fabsf(x[k * n]) - 1.0f / sqrtf((float)rows)) < 1e-6f;
    CHECK(touched == rows, "a unit token spread over %zu of %zu rows", touched, rows);
    free(x);
    free(y);
    free(gx);
    free(gy);
}

/* ‖E·z‖² summed over the pool, E = W − Ŵ [m][n]. */
static double pool_loss(const br_objective *obj, const double *e, size_t m) {
    size_t n = obj->n;
    double s = 0;
    for (size_t k = 0; k < obj->npool; k++)
        for (size_t i = 0; i < m; i++) {
            double acc = 0;
            for (size_t j = 0; j < n; j++)
                acc += e[i * n + j] * obj->pool[k * n + j];
            s += acc * acc;
        }
    return s;
}

/* J of E against the reference Σ [n][n]: tr(E·Σ·Eᵀ). */
static double ref_loss(const double *sigma, const double *e, size_t m, size_t n) {
    double s = 0;
    for (size_t i = 0; i < m; i++)
        for (size_t a = 0; a < n; a++)
            for (size_t b = 0; b < n; b++)
                s += e[i * n + a] * sigma[a * n + b] * e[i * n + b];
    return s;
}

/* The pool is Σ up to its scale: Σ_k ‖E·z_k‖² = s·tr(E·Σ·Eᵀ), s = npool·n/tr(Σ)
 * (mean square 1), for random E. */
static void check_pool(const char *what, const br_objective *obj, const double *sigma, size_t m,
                       br_rng *rng) {
    size_t n = obj->n;
    double tr = 0, ms = 0;
    for (size_t j = 0; j < n; j++)
        tr += sigma[j * n + j];
    for (size_t e = 0; e < obj->npool * n; e++)
        ms += (double)obj->pool[e] * obj->pool[e];
    ms /= (double)(obj->npool * n);
    CHECK(fabs(ms - 1.0) < 1e-4, "%s: the pool's mean square is %g, not 1", what, ms);
    double scale = (double)(obj->npool * n) / tr;
    double *e = malloc(m * n * sizeof *e);
    for (int trial = 0; trial < 3; trial++) {
        for (size_t i = 0; i < m * n; i++)
            e[i] = br_rng_normal(rng) * (trial + 1);
        double got = pool_loss(obj, e, m), want = scale * ref_loss(sigma, e, m, n);
        CHECK(fabs(got - want) <= 2e-4 * want, "%s: pool loss %.9g, reference %.9g", what, got,
              want);
    }
    for (size_t j = 0; j < n; j++)
        CHECK(fabs(obj->diag[j] - sigma[j * n + j]) <= 1e-5 * tr, "%s: diag[%zu] %g, reference %g",
              what, j, obj->diag[j], sigma[j * n + j]);
    free(e);
}

/* f64 Σ of recorded inputs: Σ_t w_t·x_t·x_tᵀ/D + λ/‖W‖²·I, w_t = 1/max(‖Wx_t‖²,
 * 0.1·mean) (per token) or 1/mean (aggregate), D = Σ_t w_t·‖Wx_t‖². */
static double *ref_sigma_inputs(const float *w, size_t m, size_t n, const float *x, size_t ntok,
                                int per_token, double lambda) {
    double *q = malloc(ntok * sizeof *q), mean = 0, w2 = 0;
    for (size_t t = 0; t < ntok; t++) {
        q[t] = 0;
        for (size_t i = 0; i < m; i++) {
            double y = 0;
            for (size_t j = 0; j < n; j++)
                y += (double)w[i * n + j] * x[t * n + j];
            q[t] += y * y;
        }
        mean += q[t] / (double)ntok;
    }
    for (size_t e = 0; e < m * n; e++)
        w2 += (double)w[e] * w[e];
    double *s = calloc(n * n, sizeof *s), dsum = 0;
    for (size_t t = 0; t < ntok; t++) {
        double wt = per_token ? 1.0 / (q[t] > 0.1 * mean ? q[t] : 0.1 * mean) : 1.0 / mean;
        dsum += wt * q[t];
        for (size_t a = 0; a < n; a++)
            for (size_t b = 0; b < n; b++)
                s[a * n + b] += wt * (double)x[t * n + a] * x[t * n + b];
    }
    for (size_t e = 0; e < n * n; e++)
        s[e] /= dsum;
    for (size_t j = 0; j < n; j++)
        s[j * n + j] += lambda / w2;
    free(q);
    return s;
}

static void pool_from_inputs(void) {
    br_ctx *ctx = t_cpu_ctx();
    br_rng rng = t_rng_for(2);
    const size_t m = 9, n = 20, ntok = 50;
    float *w = malloc(m * n * sizeof *w), *x = malloc(ntok * n * sizeof *x);
    fill_normal(&rng, w, m * n, 0.1);
    fill_normal(&rng, x, ntok * n, 1.0);
    /* two massive tokens and two near-silent ones: the weights' floor and range */
    for (size_t j = 0; j < n; j++) {
        x[3 * n + j] *= 40.0f;
        x[17 * n + j] *= 25.0f;
        x[8 * n + j] *= 0.01f;
        x[30 * n + j] *= 0.05f;
    }
    br_compress_opts o;
    br_compress_opts_default(&o);
    o.weight_term = 0.3f;
    const size_t batches[2] = {8, 64}; /* rotated (batch < n) and plain */
    for (int per = 0; per < 2; per++)
        for (int b = 0; b < 2; b++) {
            o.token_weighting = per ? BR_TOKENS_RELATIVE : BR_TOKENS_AGGREGATE;
            br_objective obj;
            CHECK_OK(ctx, br_objective_from_inputs(ctx, w, m, n, x, ntok, &o, batches[b], 5, &obj));
            double *s = ref_sigma_inputs(w, m, n, x, ntok, per, o.weight_term);
            char what[64];
            snprintf(what, sizeof what, "inputs, %s, batch %zu", per ? "per token" : "aggregate",
                     batches[b]);
            CHECK(obj.npool == (batches[b] < n ? 32 : n), "%s: pool of %zu tokens", what,
                  obj.npool);
            CHECK(obj.rotated == (batches[b] < n), "%s: rotated %d", what, obj.rotated);
            CHECK(obj.chol && obj.chol_inv, "%s: no factor kept", what);
            check_pool(what, &obj, s, m, &rng);
            free(s);
            br_objective_free(&obj);
        }
    free(w);
    free(x);
    br_ctx_free(ctx);
}

static void pool_from_gram_and_variances(void) {
    br_ctx *ctx = t_cpu_ctx();
    br_rng rng = t_rng_for(3);
    const size_t m = 6, n = 13;
    float *w = malloc(m * n * sizeof *w), *f = malloc(2 * n * n * sizeof *f);
    fill_normal(&rng, w, m * n, 0.2);
    fill_normal(&rng, f, 2 * n * n, 1.0);
    double *g = gram_of(f, 2 * n, n); /* a Gram of 26 random tokens */
    double w2 = 0, d = 0;
    for (size_t e = 0; e < m * n; e++)
        w2 += (double)w[e] * w[e];
    for (size_t i = 0; i < m; i++)
        for (size_t a = 0; a < n; a++)
            for (size_t b = 0; b < n; b++)
                d += (double)w[i * n + a] * g[a * n + b] * w[i * n + b];
    br_compress_opts o;
    br_compress_opts_default(&o);
    o.weight_term = 0.05f;
    double *s = malloc(n * n * sizeof *s);
    for (size_t e = 0; e < n * n; e++)
        s[e] = g[e] / d + ((e / n == e % n) ? o.weight_term / w2 : 0);
    br_objective obj;
    CHECK_OK(ctx, br_objective_from_gram(ctx, w, m, n, g, &o, 4, 7, &obj));
    check_pool("gram", &obj, s, m, &rng);
    CHECK(!obj.diag_flat, "gram: flat diagonal");
    br_objective_free(&obj);
    /* channel variances: a diagonal Σ, no factor */
    double var[13];
    for (size_t j = 0; j < n; j++)
        var[j] = exp(br_rng_normal(&rng));
    double dv = 0;
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++)
            dv += (double)w[i * n + j] * w[i * n + j] * var[j];
    memset(s, 0, n * n * sizeof *s);
    for (size_t j = 0; j < n; j++)
        s[j * n + j] = var[j] / dv + o.weight_term / w2;
    for (int rot = 0; rot < 2; rot++) {
        CHECK_OK(ctx, br_objective_from_variances(ctx, w, m, n, var, &o, rot ? 4 : 64, 9, &obj));
        check_pool(rot ? "variances, rotated" : "variances", &obj, s, m, &rng);
        CHECK(!obj.chol, "variances: a factor kept");
        CHECK(obj.npool == (rot ? 16 : n), "variances: pool of %zu", obj.npool);
        br_objective_free(&obj);
    }
    /* the rotated diagonal pool (formed in closed form) is the butterflies' one */
    {
        br_objective plain, rot;
        CHECK_OK(ctx, br_objective_from_variances(ctx, w, m, n, var, &o, 64, 9, &plain));
        CHECK_OK(ctx, br_objective_from_variances(ctx, w, m, n, var, &o, 4, 9, &rot));
        size_t rows = rot.npool;
        float *z = calloc(rows * n, sizeof *z);
        double fix = sqrt((double)rows / (double)plain.npool); /* mean square 1 either way */
        for (size_t e = 0; e < plain.npool * n; e++)
            z[e] = (float)(plain.pool[e] * fix);
        br_rotate_tokens(z, rows, n, 9);
        double worst = 0;
        for (size_t e = 0; e < rows * n; e++)
            worst = fmax(worst, fabs((double)z[e] - rot.pool[e]));
        CHECK(worst < 1e-6, "closed-form rotation differs from the butterflies by %g", worst);
        free(z);
        br_objective_free(&plain);
        br_objective_free(&rot);
    }
    /* isotropic: the weight-space objective, a flat diagonal */
    CHECK_OK(ctx, br_objective_from_variances(ctx, w, m, n, NULL, &o, 4, 9, &obj));
    CHECK(obj.diag_flat, "isotropic: diagonal not flat");
    br_objective_free(&obj);
    /* refusals: a Gram that is not positive semi-definite (its last channel's
     * variance negative, so Σ's factorization fails there), W = 0 */
    g[(n - 1) * n + n - 1] = -0.5 * g[(n - 1) * n + n - 1];
    o.weight_term = 0;
    br_status st = br_objective_from_gram(ctx, w, m, n, g, &o, 4, 7, &obj);
    CHECK(st == BR_E_ARG || st == BR_E_NONFINITE, "an indefinite Gram: %s", br_status_name(st));
    CHECK(st == BR_OK || br_ctx_error(ctx)[0], "an indefinite Gram: no message");
    memset(w, 0, m * n * sizeof *w);
    CHECK_FAILS(ctx, BR_E_NONFINITE,
                br_objective_from_variances(ctx, w, m, n, NULL, &o, 4, 9, &obj));
    free(w);
    free(f);
    free(g);
    free(s);
    br_ctx_free(ctx);
}

T_RUN("objective", T_CASE(rotation_is_orthogonal), T_CASE(pool_from_inputs),
      T_CASE(pool_from_gram_and_variances))
