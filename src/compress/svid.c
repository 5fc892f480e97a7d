/* Dual-SVID initialization (LittleBit) on the host, with LAPACK.
 *
 * Per path, from the matrix still to explain (W, then the residual W − Ŵ₁):
 *   truncated SVD  W ≈ U·diag(s)·Vᵀ              U [m][k], V [n][k], k ≤ r
 *   U' = U·diag(√s), V' = V·diag(√s)            so W ≈ U'·V'ᵀ
 *   S_U = sign(U'), S_V = sign(V')               (sign(0) = +1)
 *   |U'| ≈ h·ℓ_uᵀ, |V'| ≈ g·ℓ_vᵀ                 rank-1 fits (Perron vectors)
 *   ℓ = ℓ_u ⊙ ℓ_v                                so U'·V'ᵀ ≈ diag(h)·S_U·diag(ℓ)·S_Vᵀ·diag(g)
 * Activation-aware (an input Gram Σ = XᵀX is known): factor W·L instead, L the
 * Cholesky factor of Σ (damped) = L·Lᵀ, which ranks directions by their effect
 * on the outputs ‖(W − Ŵ)·X‖ = ‖(W − Ŵ)·L‖, and map the V side back:
 * Ŵ = Ũ·diag(s)·Ṽᵀ·L⁻¹, so V' = L⁻ᵀ·Ṽ·diag(√s).
 *
 * The truncated SVD is randomized (a Gaussian range finder with two power
 * iterations, Halko–Martinsson–Tropp) when k is well below min(m, n), so a
 * 3584×1024 layer initializes in well under a second; a full SVD otherwise. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/calib.h"
#include "compress/compress.h"
#include "compress/host_blas.h"
#include "compress/host_chol.h"
#include "core/blas_threads.h"
#include "core/rng.h"

#ifdef BR_HAVE_LAPACK
#include <lapacke.h>
#endif

size_t br_svid_oversample(size_t k) { return k / 4 > 16 ? k / 4 : 16; }

#ifdef BR_HAVE_LAPACK

/* Power iterations of the randomized range finder and the extra columns it keeps. */
#define SVD_POWER_ITERS 2

/* Orthonormal columns of Y [rows][cols] (rows ≥ cols), in place (QR's Q). */
static br_status orthonormalize(br_ctx *ctx, float *y, size_t rows, size_t cols) {
    float *tau = malloc(cols * sizeof *tau);
    if (!tau) return br_fail(ctx, BR_E_NOMEM, "Dual-SVID: out of host memory");
    int threads = br_blas_serial_begin();
    lapack_int info = LAPACKE_sgeqrf(LAPACK_ROW_MAJOR, (lapack_int)rows, (lapack_int)cols, y,
                                     (lapack_int)cols, tau);
    if (!info)
        info = LAPACKE_sorgqr(LAPACK_ROW_MAJOR, (lapack_int)rows, (lapack_int)cols,
                              (lapack_int)cols, y, (lapack_int)cols, tau);
    br_blas_serial_end(threads);
    free(tau);
    if (info)
        return br_fail(ctx, BR_E_DEVICE, "Dual-SVID: QR of [%zu][%zu] failed (LAPACK info %d)",
                       rows, cols, (int)info);
    return BR_OK;
}

/* Full thin SVD of a [rows][cols] (destroyed): the first k triplets into
 * u [rows][k], s [k], v [cols][k]. */
static br_status svd_full(br_ctx *ctx, float *a, size_t rows, size_t cols, size_t k, float *u,
                          float *s, float *v) {
    size_t mn = rows < cols ? rows : cols;
    float *uu = malloc(rows * mn * sizeof *uu), *vt = malloc(mn * cols * sizeof *vt),
          *ss = malloc(mn * sizeof *ss);
    br_status st = BR_OK;
    if (!uu || !vt || !ss) {
        st = br_fail(ctx, BR_E_NOMEM, "Dual-SVID: out of host memory for an SVD of [%zu][%zu]",
                     rows, cols);
        goto done;
    }
    int threads = br_blas_serial_begin();
    lapack_int info =
        LAPACKE_sgesdd(LAPACK_ROW_MAJOR, 'S', (lapack_int)rows, (lapack_int)cols, a,
                       (lapack_int)cols, ss, uu, (lapack_int)mn, vt, (lapack_int)cols);
    br_blas_serial_end(threads);
    if (info) {
        st = br_fail(ctx, BR_E_DEVICE, "Dual-SVID: SVD of [%zu][%zu] did not converge (info %d)",
                     rows, cols, (int)info);
        goto done;
    }
    for (size_t i = 0; i < rows; i++)
        memcpy(u + i * k, uu + i * mn, k * sizeof *u);
    for (size_t c = 0; c < k; c++) {
        s[c] = ss[c];
        for (size_t j = 0; j < cols; j++)
            v[j * k + c] = vt[c * cols + j];
    }
done:
    free(uu);
    free(vt);
    free(ss);
    return st;
}

/* The k leading singular triplets of A [m][n]: u [m][k], s [k], v [n][k]. */
static br_status svd_topk(br_ctx *ctx, const float *A, size_t m, size_t n, size_t k, uint64_t seed,
                          float *u, float *s, float *v, void *user) {
    (void)user;
    size_t mn = m < n ? m : n;
    size_t l = k + br_svid_oversample(k);
    if (l * 10 >= mn * 6) {
        float *a = malloc(m * n * sizeof *a);
        if (!a) return br_fail(ctx, BR_E_NOMEM, "Dual-SVID: out of host memory");
        memcpy(a, A, m * n * sizeof *a);
        br_status st = svd_full(ctx, a, m, n, k, u, s, v);
        free(a);
        return st;
    }
    float *y = malloc(m * l * sizeof *y), *z = malloc(n * l * sizeof *z),
          *b = malloc(l * n * sizeof *b), *ub = malloc(l * k * sizeof *ub);
    br_status st = BR_OK;
    if (!y || !z || !b || !ub) {
        st = br_fail(ctx, BR_E_NOMEM, "Dual-SVID: out of host memory");
        goto done;
    }
    br_rng rng;
    br_rng_seed(&rng, seed ^ 0x5D1Dull);
    for (size_t i = 0; i < n * l; i++)
        z[i] = (float)br_rng_normal(&rng);
    br_sgemm(0, 0, m, l, n, 1.0f, A, n, z, l, 0.0f, y, l); /* Y = A·Ω */
    if ((st = orthonormalize(ctx, y, m, l))) goto done;
    for (int it = 0; it < SVD_POWER_ITERS; it++) {
        br_sgemm(1, 0, n, l, m, 1.0f, A, n, y, l, 0.0f, z, l); /* Z = Aᵀ·Y */
        if ((st = orthonormalize(ctx, z, n, l))) goto done;
        br_sgemm(0, 0, m, l, n, 1.0f, A, n, z, l, 0.0f, y, l); /* Y = A·Z */
        if ((st = orthonormalize(ctx, y, m, l))) goto done;
    }
    br_sgemm(1, 0, l, n, m, 1.0f, y, l, A, n, 0.0f, b, n); /* B = Yᵀ·A [l][n] */
    if ((st = svd_full(ctx, b, l, n, k, ub, s, v))) goto done;
    br_sgemm(0, 0, m, k, l, 1.0f, y, l, ub, k, 0.0f, u, k); /* U = Y·U_B */
done:
    free(y);
    free(z);
    free(b);
    free(ub);
    return st;
}

/* A factor of the damped input Gram Σ_d = Σ + δ·I, δ = 1% of its mean eigenvalue
 * (trace/n), so a rank-deficient Σ (fewer tokens than channels) stays invertible:
 * its lower Cholesky factor L [n][n] (Σ_d = L·Lᵀ) and L⁻¹ [n][n], both f32.
 * Any F with F·Fᵀ = Σ_d has the same best rank-k Ŵ in ‖(W − Ŵ)·F‖ (F = Σ_d^½·Q
 * for an orthogonal Q). L and L⁻¹ cost n³/3 each where Σ_d^½ took an
 * eigendecomposition (~10·n³, serial like every LAPACK call here: 4 minutes at
 * n = 11008, where L takes seconds). */
static br_status gram_factor(br_ctx *ctx, const double *gram, size_t n, float *factor,
                             float *factor_inv) {
    double *l = malloc(n * n * sizeof *l), *inv = malloc(n * n * sizeof *inv);
    br_status st = BR_OK;
    if (!l || !inv) {
        st = br_fail(ctx, BR_E_NOMEM, "Dual-SVID: out of host memory for a [%zu][%zu] Gram", n, n);
        goto done;
    }
    double trace = 0;
    for (size_t j = 0; j < n; j++)
        trace += gram[j * n + j];
    if (!(trace > 0) || !isfinite(trace)) {
        st = br_fail(ctx, BR_E_NONFINITE,
                     "Dual-SVID: the [%zu][%zu] input Gram's trace is %g, not a positive number", n,
                     n, trace);
        goto done;
    }
    double damp = 0.01 * trace / (double)n;
    memcpy(l, gram, n * n * sizeof *l);
    for (size_t j = 0; j < n; j++)
        l[j * n + j] += damp;
    lapack_int info = br_dchol_lower(n, l); /* blocked: all cores, the same bits for any count */
    if (info > 0) {
        st = br_fail(ctx, BR_E_ARG,
                     "Dual-SVID: the [%zu][%zu] input Gram is not positive semi-definite: with "
                     "%g added to its diagonal its Cholesky factorization fails at column %d",
                     n, n, damp, (int)info - 1);
        goto done;
    }
    if (info) { /* an argument LAPACK refused */
        st = br_fail(ctx, BR_E_DEVICE,
                     "Dual-SVID: Cholesky factorization of the [%zu][%zu] input Gram failed "
                     "(LAPACK info %d)",
                     n, n, (int)info);
        goto done;
    }
    /* dpotrf leaves the upper triangle as it was: L is the lower one alone */
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            l[i * n + j] = 0;
    /* L's diagonal is positive: L⁻¹ exists (panels of triangular solves: all
     * cores, the same bits for any count) */
    br_dtrinv_lower(n, l, inv);
    for (size_t i = 0; i < n * n; i++) {
        factor[i] = (float)l[i];
        factor_inv[i] = (float)inv[i];
    }
done:
    free(l);
    free(inv);
    return st;
}

#endif /* BR_HAVE_LAPACK */

/* |M| ≈ a·bᵀ for M [rows][k]: the Perron vectors of diag(wt)·|M| by power
 * iteration (a ≥ 0, b ≥ 0, balanced), then a ← a/wt. Row weights wt (NULL: all 1)
 * make the fit count each row by its importance: √Σ_jj, the input channel's RMS,
 * for the V side of an activation-aware initialization. Each pass is a set of
 * independent dot products (rows of |M| for a, rows of |M|ᵀ for b), spread over
 * the cores, each summed in one order: the same bits for any thread count. */
static void rank1_abs(const float *M, const double *wt, size_t rows, size_t k, double *a,
                      double *b) {
    float *am = malloc(rows * k * sizeof *am), *at = malloc(rows * k * sizeof *at);
    if (!am || !at) { /* out of memory: the scales of a flat fit */
        free(am);
        free(at);
        for (size_t i = 0; i < rows; i++)
            a[i] = 1.0;
        for (size_t c = 0; c < k; c++)
            b[c] = 0;
        return;
    }
    /* |M|, row-weighted (diag(wt)·|M|), and its transpose */
#ifdef BR_HAVE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (size_t i = 0; i < rows; i++)
        for (size_t c = 0; c < k; c++) {
            float v = (float)(fabs((double)M[i * k + c]) * (wt ? wt[i] : 1.0));
            am[i * k + c] = v;
            at[c * rows + i] = v;
        }
    for (size_t c = 0; c < k; c++)
        b[c] = 1.0;
    double sigma = 0;
    for (int it = 0; it < 60; it++) {
#ifdef BR_HAVE_OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (size_t i = 0; i < rows; i++) {
            double acc = 0;
            for (size_t c = 0; c < k; c++)
                acc += (double)am[i * k + c] * b[c];
            a[i] = acc;
        }
        double na = 0;
        for (size_t i = 0; i < rows; i++)
            na += a[i] * a[i];
        na = sqrt(na);
        if (!(na > 0)) {
            memset(a, 0, rows * sizeof *a);
            memset(b, 0, k * sizeof *b);
            free(am);
            free(at);
            return;
        }
        for (size_t i = 0; i < rows; i++)
            a[i] /= na;
#ifdef BR_HAVE_OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (size_t c = 0; c < k; c++) {
            double acc = 0;
            for (size_t i = 0; i < rows; i++)
                acc += (double)at[c * rows + i] * a[i];
            b[c] = acc;
        }
        double nb = 0;
        for (size_t c = 0; c < k; c++)
            nb += b[c] * b[c];
        nb = sqrt(nb);
        /* converged far past what the f16 scales keep */
        int done = fabs(nb - sigma) <= 1e-7 * nb;
        sigma = nb;
        if (done) break;
    }
    free(am);
    free(at);
    /* a and b from the weighted |M|: a's rows back to M's (a ← a/wt) */
    double root = sqrt(sigma);
    for (size_t i = 0; i < rows; i++)
        a[i] = wt ? a[i] * root / wt[i] : a[i] * root;
    for (size_t c = 0; c < k; c++)
        b[c] = root > 0 ? b[c] / root : 0;
}

static double rms(const float *v, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)v[i] * v[i];
    return sqrt(s / (double)n);
}

/* One path from U' [m][k] and V' [n][k] (k ≤ r; columns k..r−1 get random signs
 * and ℓ = 0, so they start silent and training can grow them). */
static void binarize_path(const float *up, const float *vp, const double *v_weight, size_t m,
                          size_t n, size_t k, size_t r, br_rng *rng, double *tmp_rows, double *lu,
                          double *lv, br_blr_path_host *P) {
    size_t words = (r + 31) / 32;
    memset(P->bits_u, 0, m * words * sizeof *P->bits_u);
    memset(P->bits_v, 0, n * words * sizeof *P->bits_v);
    for (size_t i = 0; i < m; i++)
        for (size_t c = 0; c < r; c++) {
            int plus = c < k ? up[i * k + c] >= 0.0f : (int)(br_rng_u64(rng) >> 63);
            if (plus) P->bits_u[i * words + c / 32] |= 1u << (c % 32);
        }
    for (size_t j = 0; j < n; j++)
        for (size_t c = 0; c < r; c++) {
            int plus = c < k ? vp[j * k + c] >= 0.0f : (int)(br_rng_u64(rng) >> 63);
            if (plus) P->bits_v[j * words + c / 32] |= 1u << (c % 32);
        }
    rank1_abs(up, NULL, m, k, tmp_rows, lu);
    for (size_t i = 0; i < m; i++)
        P->h[i] = (float)tmp_rows[i];
    rank1_abs(vp, v_weight, n, k, tmp_rows, lv);
    for (size_t j = 0; j < n; j++)
        P->g[j] = (float)tmp_rows[j];
    for (size_t c = 0; c < r; c++)
        P->l[c] = c < k ? (float)(lu[c] * lv[c]) : 0.0f;
    /* The product h_i·ℓ_k·g_j is what counts; give the three vectors one RMS so
     * none drifts toward f16's subnormals or overflow when stored. */
    double rh = rms(P->h, m), rg = rms(P->g, n), rl = rms(P->l, r);
    if (rh > 0 && rg > 0 && rl > 0) {
        double c = cbrt(rh * rg * rl);
        for (size_t i = 0; i < m; i++)
            P->h[i] = (float)(P->h[i] * (c / rh));
        for (size_t j = 0; j < n; j++)
            P->g[j] = (float)(P->g[j] * (c / rg));
        for (size_t q = 0; q < r; q++)
            P->l[q] = (float)(P->l[q] * (c / rl));
    }
}

/* The real factor [rows][r] of one side from X' [rows][k]; the columns past k, which
 * have no singular vector, get their random bit's sign at 1e-3 of the mean |X'|:
 * latents started from the factor keep those signs (a zero reads as +1, and
 * columns that are all +1 alike would train alike). */
static void keep_factor(const float *xp, const uint32_t *bits, size_t rows, size_t k, size_t r,
                        float *out) {
    double mean = 0;
    for (size_t e = 0; e < rows * k; e++)
        mean += fabs((double)xp[e]);
    mean = mean > 0 ? mean / (double)(rows * k) : 1.0;
    float tiny = (float)(1e-3 * mean);
    for (size_t i = 0; i < rows; i++)
        for (size_t c = 0; c < r; c++)
            out[i * r + c] = c < k ? xp[i * k + c] : tiny * br_bit_sign(bits, (r + 31) / 32, i, c);
}

void br_gram_cache_free(br_gram_cache *c) {
    if (!c) return;
    free(c->factor);
    free(c->factor_inv);
    c->factor = c->factor_inv = NULL;
    c->n = 0;
    c->key = 0;
}

#ifdef BR_HAVE_LAPACK
/* gc's factors for this Gram, made (into gc) unless gc already holds them. keep:
 * gc outlives the call (a private one is never looked up: no key is needed). */
static br_status cached_factor(br_ctx *ctx, const double *gram, size_t n, br_gram_cache *gc,
                               int keep) {
    uint64_t key = keep ? br_bytes_hash(0x6772616dull ^ n, gram, n * n * sizeof *gram) : 0;
    if (keep && gc->factor && gc->n == n && gc->key == key) return BR_OK;
    br_gram_cache_free(gc);
    gc->factor = malloc(n * n * sizeof *gc->factor);
    gc->factor_inv = malloc(n * n * sizeof *gc->factor_inv);
    br_status st = gc->factor && gc->factor_inv
                       ? gram_factor(ctx, gram, n, gc->factor, gc->factor_inv)
                       : br_fail(ctx, BR_E_NOMEM,
                                 "Dual-SVID: out of host memory for a [%zu][%zu] "
                                 "Gram factor",
                                 n, n);
    if (st) {
        br_gram_cache_free(gc);
        return st;
    }
    gc->n = n;
    gc->key = key;
    gc->made++;
    return BR_OK;
}
#endif

br_status br_svid_whitened_with(br_ctx *ctx, const float *w, const br_whitening *wh, uint64_t seed,
                                br_blr_host *L, br_svid_factors *factors, br_svd_topk_fn svd,
                                void *user) {
    size_t m = L->m, n = L->n, r = L->r, mn = m < n ? m : n;
    size_t k = r < mn ? r : mn;
    if (wh && wh->n != n)
        return br_fail(ctx, BR_E_SHAPE, "Dual-SVID: a whitening of %zu inputs for a [%zu][%zu] W",
                       wh->n, m, n);
    const int full = wh && wh->factor, diag = wh && !full && wh->scale;
    float *target = malloc(m * n * sizeof *target), *work = malloc(m * n * sizeof *work),
          *u = malloc(m * k * sizeof *u), *v = malloc(n * k * sizeof *v),
          *s = malloc(k * sizeof *s);
    double *tmp = malloc((m > n ? m : n) * sizeof *tmp), *lu = malloc(k * sizeof *lu),
           *lv = malloc(k * sizeof *lv);
    double *v_weight = full || diag ? malloc(n * sizeof *v_weight) : NULL;
    br_status st = BR_OK;
    if (!target || !work || !u || !v || !s || !tmp || !lu || !lv || ((full || diag) && !v_weight)) {
        st = br_fail(ctx, BR_E_NOMEM, "Dual-SVID of [%zu][%zu]: out of host memory", m, n);
        goto done;
    }
    /* the V side's rank-1 fit counts each input by its RMS under the whitening:
     * the row norm of the factor (√Σ_jj), or the channel scale */
    for (size_t j = 0; full && j < n; j++) {
        double acc = 0;
        for (size_t c = 0; c <= j; c++)
            acc += (double)wh->factor[j * n + c] * wh->factor[j * n + c];
        v_weight[j] = sqrt(acc);
    }
    for (size_t j = 0; diag && j < n; j++) {
        if (!(wh->scale[j] > 0) || !isfinite(wh->scale[j])) {
            st = br_fail(ctx, BR_E_ARG, "Dual-SVID: channel scale %zu is %g, not positive", j,
                         wh->scale[j]);
            goto done;
        }
        v_weight[j] = wh->scale[j];
    }
    br_rng rng;
    br_rng_seed(&rng, seed);
    memcpy(target, w, m * n * sizeof *target);
    for (size_t p = 0; p < L->paths; p++) {
        if (p > 0) {
            /* the next path fits what the previous ones left: W − Ŵ */
            if ((st = br_layer_host_reconstruct(ctx, L, p, work))) goto done;
            for (size_t i = 0; i < m * n; i++)
                target[i] = w[i] - work[i];
        }
        const float *a = target;
        if (full) {
            br_sgemm(0, 0, m, n, n, 1.0f, target, n, wh->factor, n, 0.0f, work, n); /* W·L */
            a = work;
        } else if (diag) {
            for (size_t i = 0; i < m; i++)
                for (size_t j = 0; j < n; j++)
                    work[i * n + j] = (float)(target[i * n + j] * wh->scale[j]); /* W·D */
            a = work;
        }
        if ((st = svd(ctx, a, m, n, k, seed + 7919 * p, u, s, v, user))) goto done;
        for (size_t c = 0; c < k; c++) {
            float root = sqrtf(s[c] > 0 ? s[c] : 0);
            for (size_t i = 0; i < m; i++)
                u[i * k + c] *= root;
            for (size_t j = 0; j < n; j++)
                v[j * k + c] *= root;
        }
        if (full) {
            /* V' = L⁻ᵀ·Ṽ·diag(√s) */
            br_sgemm(1, 0, n, k, n, 1.0f, wh->factor_inv, n, v, k, 0.0f, work, k);
            memcpy(v, work, n * k * sizeof *v);
        } else if (diag) {
            for (size_t j = 0; j < n; j++)
                for (size_t c = 0; c < k; c++)
                    v[j * k + c] = (float)(v[j * k + c] / wh->scale[j]); /* V' = D⁻¹·Ṽ·diag(√s) */
        }
        binarize_path(u, v, v_weight, m, n, k, r, &rng, tmp, lu, lv, &L->path[p]);
        if (factors && factors->u[p] && factors->v[p]) {
            keep_factor(u, L->path[p].bits_u, m, k, r, factors->u[p]);
            keep_factor(v, L->path[p].bits_v, n, k, r, factors->v[p]);
        }
    }
done:
    free(target);
    free(work);
    free(u);
    free(v);
    free(s);
    free(tmp);
    free(lu);
    free(lv);
    free(v_weight);
    return st;
}

br_status br_svid_init_with(br_ctx *ctx, const float *w, const double *gram, br_gram_cache *gc,
                            uint64_t seed, br_blr_host *L, br_svid_factors *factors,
                            br_svd_topk_fn svd, void *user) {
    if (!gram) return br_svid_whitened_with(ctx, w, NULL, seed, L, factors, svd, user);
#ifdef BR_HAVE_LAPACK
    br_gram_cache own = {0}; /* the Gram's factor when the caller keeps none */
    int keep = gc != NULL;
    if (!gc) gc = &own;
    br_status st = cached_factor(ctx, gram, L->n, gc, keep);
    br_whitening wh = {.n = L->n, .factor = gc->factor, .factor_inv = gc->factor_inv};
    if (!st) st = br_svid_whitened_with(ctx, w, &wh, seed, L, factors, svd, user);
    br_gram_cache_free(&own);
    return st;
#else
    (void)gc;
    (void)seed;
    (void)L;
    (void)factors;
    (void)svd;
    (void)user;
    (void)w;
    return br_fail(ctx, BR_E_UNSUPPORTED,
                   "Dual-SVID: the activation-aware initialization (an input Gram) needs "
                   "LAPACK, which this build lacks");
#endif
}

br_status br_svid_whitened_host(br_ctx *ctx, const float *w, const br_whitening *wh, uint64_t seed,
                                br_blr_host *L, br_svid_factors *factors) {
#ifdef BR_HAVE_LAPACK
    return br_svid_whitened_with(ctx, w, wh, seed, L, factors, svd_topk, NULL);
#else
    (void)w;
    (void)wh;
    (void)seed;
    (void)L;
    (void)factors;
    return br_fail(ctx, BR_E_UNSUPPORTED,
                   "Dual-SVID initialization on the CPU needs LAPACK: this build has none "
                   "(install liblapacke-dev and reconfigure, or use a CUDA device)");
#endif
}

br_status br_svid_init_host(br_ctx *ctx, const float *w, const double *gram, br_gram_cache *gc,
                            uint64_t seed, br_blr_host *L, br_svid_factors *factors) {
#ifdef BR_HAVE_LAPACK
    return br_svid_init_with(ctx, w, gram, gc, seed, L, factors, svd_topk, NULL);
#else
    (void)w;
    (void)gram;
    (void)gc;
    (void)seed;
    (void)L;
    (void)factors;
    return br_fail(ctx, BR_E_UNSUPPORTED,
                   "Dual-SVID initialization on the CPU needs LAPACK: this build has none "
                   "(install liblapacke-dev and reconfigure, or use a CUDA device)");
#endif
}
