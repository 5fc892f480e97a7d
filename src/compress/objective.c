/* The training objective of one layer as a pool of tokens.
 *
 * A layer is trained to minimize
 *     J(Ŵ) = J_data + λ·‖W − Ŵ‖²/‖W‖²
 * J_data the relative output error² on the calibration inputs: per token (each
 * token's error relative to its own output, so that the few tokens with massive
 * activations that carry most of a layer's output energy do not decide the fit
 * for all the others), or in aggregate; the second term holds Ŵ near W in the
 * directions the inputs say little about (a layer with more inputs than
 * calibration tokens has many). Both terms are quadratic in E = W − Ŵ:
 *     J = tr(E·Σ·Eᵀ),   Σ = Σ_t w_t·x_t·x_tᵀ / D + (λ/‖W‖²)·I
 * so any tokens z_k with Σ_k z_k·z_kᵀ = Σ give J exactly as Σ_k ‖E·z_k‖²: the
 * columns of a Cholesky factor of Σ (n tokens), or for a diagonal Σ (synthetic
 * inputs) the scaled unit vectors. Training on them fits the objective itself,
 * not a sample of it, so a layer with many inputs cannot overfit a pool of a few
 * thousand samples. Where a step's batch is smaller than the pool, the pool is
 * rotated over the token axis by a randomized Hadamard transform (orthogonal, so
 * the sum is unchanged): each batch then touches every input channel, and one
 * pass over the batches is the whole objective. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/host_blas.h"
#include "compress/host_chol.h"
#include "compress/objective.h"
#include "core/rng.h"

/* Per-token weights count a token with ‖y_t‖² below this fraction of the mean as
 * that much: its relative error is noise-like, not a reason to weigh it without bound. */
#define TOKEN_FLOOR 0.1

void br_objective_free(br_objective *obj) {
    if (!obj) return;
    free(obj->pool);
    free(obj->chol);
    free(obj->chol_inv);
    free(obj->diag);
    memset(obj, 0, sizeof *obj);
}

int br_objective_per_token(const br_compress_opts *opts, int recorded) {
    return recorded && opts->token_weighting == BR_TOKENS_RELATIVE;
}

static size_t pow2_at_least(size_t v) {
    size_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

void br_rotate_tokens(float *x, size_t rows, size_t n, uint64_t seed) {
    br_rng rng;
    br_rng_seed(&rng, seed ^ 0x4AD4u);
    for (size_t i = 0; i < rows; i++)
        if (br_rng_u64(&rng) >> 63)
            for (size_t j = 0; j < n; j++)
                x[i * n + j] = -x[i * n + j];
    /* butterflies over the rows, columns in independent chunks */
    const size_t chunk = 256;
#ifdef BR_HAVE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (size_t c0 = 0; c0 < n; c0 += chunk) {
        size_t c1 = c0 + chunk < n ? c0 + chunk : n;
        for (size_t h = 1; h < rows; h <<= 1)
            for (size_t i = 0; i < rows; i += 2 * h)
                for (size_t k = i; k < i + h; k++) {
                    float *a = x + k * n, *b = x + (k + h) * n;
                    for (size_t j = c0; j < c1; j++) {
                        float u = a[j], v = b[j];
                        a[j] = u + v;
                        b[j] = u - v;
                    }
                }
    }
    const float s = (float)(1.0 / sqrt((double)rows));
    for (size_t e = 0; e < rows * n; e++)
        x[e] *= s;
}

static double sum_sq(const float *v, size_t count) {
    double s = 0;
    for (size_t i = 0; i < count; i++)
        s += (double)v[i] * v[i];
    return s;
}

/* The pool from Σ (f64 [n][n], lower triangle read; destroyed): its Cholesky
 * factor's columns, scaled to a mean square of 1, rotated where batch < n; L and
 * L⁻¹ kept for the whitened initialization. */
static br_status pool_from_full(br_ctx *ctx, double *sigma, size_t n, size_t batch, uint64_t seed,
                                br_objective *out) {
    out->diag = malloc(n * sizeof *out->diag);
    if (!out->diag) return br_fail(ctx, BR_E_NOMEM, "training objective: out of host memory");
    double tr = 0;
    for (size_t j = 0; j < n; j++) {
        out->diag[j] = sigma[j * n + j];
        tr += out->diag[j];
    }
    out->diag_flat = 0;
    if (!(tr > 0) || !isfinite(tr))
        return br_fail(ctx, BR_E_NONFINITE, "training objective: the input Gram's trace is %g", tr);
    /* a jitter far below the weight term keeps a rank-deficient Σ (λ = 0) factorable */
    for (size_t j = 0; j < n; j++)
        sigma[j * n + j] += 1e-7 * tr / (double)n;
    int info = br_dchol_lower(n, sigma);
    if (info > 0)
        return br_fail(ctx, BR_E_ARG,
                       "training objective: the input Gram is not positive semi-definite (its "
                       "Cholesky factorization fails at column %d)",
                       info - 1);
    if (info < 0)
        return br_fail(ctx, BR_E_SHAPE, "training objective: a [%zu][%zu] Gram is too large", n, n);
    double *inv = malloc(n * n * sizeof *inv);
    out->chol = malloc(n * n * sizeof *out->chol);
    out->chol_inv = malloc(n * n * sizeof *out->chol_inv);
    size_t rows = batch < n ? pow2_at_least(n) : n;
    out->pool = calloc(rows * n, sizeof *out->pool);
    if (!inv || !out->chol || !out->chol_inv || !out->pool) {
        free(inv);
        return br_fail(ctx, BR_E_NOMEM, "training objective [%zu][%zu]: out of host memory", n, n);
    }
    br_dtrinv_lower(n, sigma, inv);
    const double s = sqrt((double)(rows * n) / tr);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            out->chol[i * n + j] = (float)sigma[i * n + j];
            out->chol_inv[i * n + j] = (float)inv[i * n + j];
            out->pool[j * n + i] = (float)(s * sigma[i * n + j]); /* token j = column j of L */
        }
    free(inv);
    out->npool = rows;
    out->rotated = rows > batch;
    if (out->rotated) br_rotate_tokens(out->pool, rows, n, seed);
    return BR_OK;
}

/* The pool of a diagonal Σ = diag(d): the scaled unit vectors. */
static br_status pool_from_diag(br_ctx *ctx, const double *d, size_t n, size_t batch, uint64_t seed,
                                br_objective *out) {
    out->diag = malloc(n * sizeof *out->diag);
    size_t rows = batch < n ? pow2_at_least(n) : n;
    out->pool =
        batch < n ? malloc(rows * n * sizeof *out->pool) : calloc(rows * n, sizeof *out->pool);
    if (!out->diag || !out->pool)
        return br_fail(ctx, BR_E_NOMEM, "training objective [%zu]: out of host memory", n);
    double tr = 0;
    out->diag_flat = 1;
    for (size_t j = 0; j < n; j++) {
        out->diag[j] = d[j];
        tr += d[j];
        if (d[j] != d[0]) out->diag_flat = 0;
    }
    if (!(tr > 0) || !isfinite(tr))
        return br_fail(ctx, BR_E_NONFINITE, "training objective: the channel variances sum to %g",
                       tr);
    const double s = sqrt((double)(rows * n) / tr);
    out->npool = rows;
    out->rotated = rows > batch;
    if (!out->rotated) {
        for (size_t j = 0; j < n; j++)
            out->pool[j * n + j] = (float)(s * sqrt(d[j]));
        return BR_OK;
    }
    /* H·S·[diag(√d); 0]/√rows in closed form: entry [i][j] is
     * (−1)^popcount(i & j)·S_j·√d_j/√rows (what br_rotate_tokens computes by
     * butterflies, without them: a wide layer's pool is most of its set-up time) */
    double *col = malloc(n * sizeof *col);
    if (!col) return br_fail(ctx, BR_E_NOMEM, "training objective [%zu]: out of host memory", n);
    br_rng rng;
    br_rng_seed(&rng, seed ^ 0x4AD4u);
    for (size_t j = 0; j < rows; j++) {
        int flip = (int)(br_rng_u64(&rng) >> 63);
        if (j < n) col[j] = (flip ? -1.0 : 1.0) * s * sqrt(d[j]) / sqrt((double)rows);
    }
#ifdef BR_HAVE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < n; j++)
            out->pool[i * n + j] =
                (float)(__builtin_popcountll((unsigned long long)(i & j)) & 1 ? -col[j] : col[j]);
    free(col);
    return BR_OK;
}

/* λ/‖W‖², the weight term's coefficient on the diagonal of Σ. */
static br_status weight_coef(br_ctx *ctx, const float *w, size_t m, size_t n,
                             const br_compress_opts *o, double *coef) {
    double w2 = sum_sq(w, m * n);
    if (!(w2 > 0) || !isfinite(w2))
        return br_fail(ctx, BR_E_NONFINITE, "training objective: ‖W‖² = %g", w2);
    *coef = (double)o->weight_term / w2;
    return BR_OK;
}

br_status br_objective_from_inputs(br_ctx *ctx, const float *w, size_t m, size_t n, const float *x,
                                   size_t ntok, const br_compress_opts *o, size_t batch,
                                   uint64_t seed, br_objective *out) {
    memset(out, 0, sizeof *out);
    out->n = n;
    double coef = 0;
    BR_TRY(weight_coef(ctx, w, m, n, o, &coef));
    /* ‖W·x_t‖² per token, W·x in chunks of tokens */
    const size_t chunk = 256;
    double *q = malloc(ntok * sizeof *q);
    float *y = malloc(chunk * m * sizeof *y), *xs = malloc(ntok * n * sizeof *xs);
    double *sigma = malloc(n * n * sizeof *sigma);
    float *gram = malloc(n * n * sizeof *gram);
    br_status st = BR_OK;
    if (!q || !y || !xs || !sigma || !gram) {
        st = br_fail(ctx, BR_E_NOMEM, "training objective [%zu][%zu]: out of host memory", m, n);
        goto done;
    }
    double mean = 0;
    for (size_t t0 = 0; t0 < ntok; t0 += chunk) {
        size_t rows = ntok - t0 < chunk ? ntok - t0 : chunk;
        br_sgemm(0, 1, rows, m, n, 1.0f, x + t0 * n, n, w, n, 0.0f, y, m); /* y = x·Wᵀ */
        for (size_t t = 0; t < rows; t++) {
            q[t0 + t] = sum_sq(y + t * m, m);
            mean += q[t0 + t];
        }
    }
    mean /= (double)ntok;
    if (!(mean > 0) || !isfinite(mean)) {
        st = br_fail(ctx, BR_E_NONFINITE,
                     "training objective: the layer's outputs on its recorded inputs have mean "
                     "square %g",
                     mean);
        goto done;
    }
    /* x̃_t = √w_t·x_t, D = Σ_t w_t·q_t */
    const int per_token = br_objective_per_token(o, 1);
    out->floor2 = per_token ? TOKEN_FLOOR * mean : 0;
    double dsum = 0;
    for (size_t t = 0; t < ntok; t++) {
        double wt = per_token ? 1.0 / (q[t] > out->floor2 ? q[t] : out->floor2) : 1.0 / mean;
        dsum += wt * q[t];
        float r = (float)sqrt(wt);
        for (size_t j = 0; j < n; j++)
            xs[t * n + j] = r * x[t * n + j];
    }
    br_sgemm(1, 0, n, n, ntok, 1.0f, xs, n, xs, n, 0.0f, gram, n); /* X̃ᵀ·X̃ */
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            sigma[i * n + j] = (double)gram[i * n + j] / dsum + (i == j ? coef : 0.0);
    free(gram);
    gram = NULL;
    free(xs);
    xs = NULL;
    st = pool_from_full(ctx, sigma, n, batch, seed, out);
done:
    free(q);
    free(y);
    free(xs);
    free(sigma);
    free(gram);
    if (st) br_objective_free(out);
    return st;
}

br_status br_objective_from_gram(br_ctx *ctx, const float *w, size_t m, size_t n, const double *g,
                                 const br_compress_opts *o, size_t batch, uint64_t seed,
                                 br_objective *out) {
    memset(out, 0, sizeof *out);
    out->n = n;
    double coef = 0;
    BR_TRY(weight_coef(ctx, w, m, n, o, &coef));
    /* D = tr(W·G·Wᵀ) = Σ_i (W·G)_i·W_i, in row blocks of W */
    const size_t chunk = 256;
    float *gf = malloc(n * n * sizeof *gf), *wg = malloc(chunk * n * sizeof *wg);
    double *sigma = malloc(n * n * sizeof *sigma);
    br_status st = BR_OK;
    if (!gf || !wg || !sigma) {
        st = br_fail(ctx, BR_E_NOMEM, "training objective [%zu][%zu]: out of host memory", m, n);
        goto done;
    }
    for (size_t e = 0; e < n * n; e++)
        gf[e] = (float)g[e];
    double dsum = 0;
    for (size_t i0 = 0; i0 < m; i0 += chunk) {
        size_t rows = m - i0 < chunk ? m - i0 : chunk;
        br_sgemm(0, 0, rows, n, n, 1.0f, w + i0 * n, n, gf, n, 0.0f, wg, n);
        for (size_t e = 0; e < rows * n; e++)
            dsum += (double)wg[e] * w[i0 * n + e];
    }
    if (!(dsum > 0) || !isfinite(dsum)) {
        st = br_fail(ctx, BR_E_NONFINITE,
                     "training objective: the layer's mean output square under its input Gram "
                     "is %g",
                     dsum);
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            sigma[i * n + j] = g[i * n + j] / dsum + (i == j ? coef : 0.0);
    st = pool_from_full(ctx, sigma, n, batch, seed, out);
done:
    free(gf);
    free(wg);
    free(sigma);
    if (st) br_objective_free(out);
    return st;
}

br_status br_objective_from_variances(br_ctx *ctx, const float *w, size_t m, size_t n,
                                      const double *var, const br_compress_opts *o, size_t batch,
                                      uint64_t seed, br_objective *out) {
    memset(out, 0, sizeof *out);
    out->n = n;
    double coef = 0;
    BR_TRY(weight_coef(ctx, w, m, n, o, &coef));
    double *d = malloc(n * sizeof *d), *col = calloc(n, sizeof *col);
    if (!d || !col) {
        free(d);
        free(col);
        return br_fail(ctx, BR_E_NOMEM, "training objective [%zu]: out of host memory", n);
    }
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++)
            col[j] += (double)w[i * n + j] * w[i * n + j];
    double dsum = 0;
    for (size_t j = 0; j < n; j++)
        dsum += col[j] * (var ? var[j] : 1.0);
    br_status st = BR_OK;
    if (!(dsum > 0) || !isfinite(dsum)) {
        st = br_fail(ctx, BR_E_NONFINITE, "training objective: ‖W‖² under the inputs is %g", dsum);
    } else {
        for (size_t j = 0; j < n; j++)
            d[j] = (var ? var[j] : 1.0) / dsum + coef;
        st = pool_from_diag(ctx, d, n, batch, seed, out);
    }
    free(d);
    free(col);
    if (st) br_objective_free(out);
    return st;
}
