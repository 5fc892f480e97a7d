/* Calibration inputs of a layer: recorded activations, Gaussian samples shaped by a
 * recorded input Gram, or synthetic inputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/calib.h"
#include "compress/host_blas.h"
#include "compress/host_chol.h"
#include "core/blas_threads.h"
#include "core/rng.h"
#include "io/io_internal.h"

#ifdef BR_HAVE_LAPACK
#include <lapacke.h>
#endif

uint64_t br_name_hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; s && *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t br_bytes_hash(uint64_t h, const void *data, size_t len) {
    const unsigned char *b = data;
    while (len) {
        uint64_t x = 0;
        size_t k = len < 8 ? len : 8;
        memcpy(&x, b, k);
        h = (h ^ x) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 32;
        b += k;
        len -= k;
    }
    return h;
}

/* A Gram [n][n], or its factor [k][n] (k < n); activations [...][n]. */
static int fits(const br_st_tensor *t, size_t n, int gram) {
    if (gram) return t->ndim == 2 && t->shape[0] >= 1 && t->shape[0] <= n && t->shape[1] == n;
    return t->ndim >= 2 && t->shape[t->ndim - 1] == n;
}

/* The tensor of `file` for layer `name` with n inputs: NAME, else NAME less
 * ".weight" (the module whose input was recorded) — these two are taken whatever
 * their shape (a wrong one is an error later) — else the nearest enclosing module
 * (NAME cut at its last dots) whose tensor fits, so that one recording serves all
 * the linears reading the same input (e.g. "attention.self" for q, k and v). */
static const br_st_tensor *find_for_layer(const br_st_file *file, const char *name, size_t n,
                                          int gram) {
    const br_st_tensor *t = br_st_find(file, name);
    if (t) return t;
    size_t len = strlen(name);
    char base[512];
    if (len >= sizeof base) return NULL;
    memcpy(base, name, len + 1);
    if (len > 7 && strcmp(base + len - 7, ".weight") == 0) {
        base[len - 7] = '\0';
        if ((t = br_st_find(file, base))) return t;
    }
    for (char *dot = strrchr(base, '.'); dot; dot = strrchr(base, '.')) {
        *dot = '\0';
        t = br_st_find(file, base);
        if (t && fits(t, n, gram)) return t;
    }
    return NULL;
}

void br_calib_memo_free(br_calib_memo *memo) {
    free(memo->tensor);
    free(memo->hash);
    free(memo->checked);
    memset(memo, 0, sizeof *memo);
}

/* The hash of tensor t's description and bytes, from the memo or computed. */
static br_status tensor_hash(br_ctx *ctx, br_calib_memo *memo, const br_st_file *file,
                             const br_st_tensor *t, uint64_t *out) {
    for (size_t i = 0; i < memo->n; i++)
        if (memo->tensor[i] == t) {
            *out = memo->hash[i];
            return BR_OK;
        }
    uint64_t h = br_name_hash(t->name) ^ (uint64_t)t->dtype * 0x100000001b3ull;
    for (size_t d = 0; d < t->ndim; d++)
        h = h * 17 + t->shape[d];
    /* read with pread in chunks, not from the mapping: a file truncated while the
     * job runs is an error, not a SIGBUS (chunks of 8-byte multiples hash as one) */
    const size_t chunk = (size_t)1 << 22;
    unsigned char *buf = malloc(chunk);
    if (!buf) return br_fail(ctx, BR_E_NOMEM, "calibration hash: out of host memory");
    for (uint64_t off = 0; off < t->nbytes; off += chunk) {
        size_t len = t->nbytes - off < chunk ? (size_t)(t->nbytes - off) : chunk;
        br_status st = br_st_read_bytes(ctx, file, t, off, len, buf);
        if (st) {
            free(buf);
            return st;
        }
        h = br_bytes_hash(h, buf, len);
    }
    free(buf);
    if (memo->n == memo->cap) {
        size_t cap = memo->cap ? 2 * memo->cap : 16;
        const br_st_tensor **tt = realloc(memo->tensor, cap * sizeof *tt);
        if (tt) memo->tensor = tt;
        uint64_t *hh = tt ? realloc(memo->hash, cap * sizeof *hh) : NULL;
        if (hh) memo->hash = hh;
        if (!tt || !hh) return br_fail(ctx, BR_E_NOMEM, "calibration hash: out of host memory");
        memo->cap = cap;
    }
    memo->tensor[memo->n] = t;
    memo->hash[memo->n++] = h;
    *out = h;
    return BR_OK;
}

br_status br_calib_hash(br_ctx *ctx, const br_calib_src *src, const char *name, size_t n,
                        br_calib_memo *memo, uint64_t *h) {
    const br_st_file *files[2] = {src->acts, src->gram};
    for (int i = 0; i < 2; i++) {
        const br_st_tensor *t = files[i] ? find_for_layer(files[i], name, n, i == 1) : NULL;
        uint64_t th = 0x5eed + (uint64_t)i; /* no file, or nothing for this layer */
        if (t) BR_TRY(tensor_hash(ctx, memo, files[i], t, &th));
        *h = (*h ^ th) * 0x100000001b3ull + (uint64_t)i;
    }
    return BR_OK;
}

static br_status check_finite(br_ctx *ctx, const char *file, const char *tensor, const float *v,
                              size_t count) {
    for (size_t i = 0; i < count; i++)
        if (!isfinite(v[i]))
            return br_fail(ctx, BR_E_NONFINITE, "%s: tensor '%s': element %zu is %s", file, tensor,
                           i, isnan(v[i]) ? "NaN" : "infinite");
    return BR_OK;
}

/* Synthetic inputs: x[t][j] = s_j·z, z ~ N(0, 1) (s_j = 1, or exp(N(0, 1))). */
static void gaussian_inputs(br_rng *rng, const double *chan, float *x, size_t ntok, size_t n) {
    for (size_t t = 0; t < ntok; t++)
        for (size_t j = 0; j < n; j++)
            x[t * n + j] = (float)(chan[j] * br_rng_normal(rng));
}

/* The factor Gaussian inputs are shaped by: the Gram normalized to a mean channel
 * variance of 1, Σ', with 1e-6 added to its diagonal, factored as Σ' = L·Lᵀ
 * (Cholesky; *full = 1, *chol = L [n][n], its upper triangle 0), or, where the
 * build has no LAPACK or Σ' is not positive definite, Σ' itself (*full = 0: its
 * diagonal gives per-channel standard deviations). free() *chol. Made once per
 * layer for its training and held-out inputs (n³/3, serial: seconds at n = 11008). */
static br_status gram_sampler(br_ctx *ctx, const double *gram, size_t n, double **chol_out,
                              int *full_out) {
    *chol_out = NULL;
    *full_out = 0;
    double mean = 0;
    for (size_t j = 0; j < n; j++)
        mean += gram[j * n + j];
    mean /= (double)n;
    if (!(mean > 0) || !isfinite(mean))
        return br_fail(ctx, BR_E_FORMAT, "input Gram: its diagonal is not positive (mean %g)",
                       mean);
    double *chol = malloc(n * n * sizeof *chol);
    if (!chol) return br_fail(ctx, BR_E_NOMEM, "input Gram [%zu][%zu]: out of host memory", n, n);
    for (size_t i = 0; i < n * n; i++)
        chol[i] = gram[i] / mean;
    int full = 0;
#ifdef BR_HAVE_LAPACK
    for (size_t j = 0; j < n; j++)
        chol[j * n + j] += 1e-6;
    int threads = br_blas_serial_begin();
    full = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', (lapack_int)n, chol, (lapack_int)n) == 0;
    br_blas_serial_end(threads);
    if (!full)
        for (size_t i = 0; i < n * n; i++)
            chol[i] = gram[i] / mean;
    else /* dpotrf leaves the upper triangle as it was: L is the lower one alone */
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++)
                chol[i * n + j] = 0;
#endif
    *chol_out = chol;
    *full_out = full;
    return BR_OK;
}

/* ntok Gaussian inputs x [ntok][n] whose covariance is Σ' (gram_sampler's): x = z·Lᵀ,
 * or per-channel standard deviations where it has no L (full = 0). z is drawn
 * token by token (channel by channel within one) whatever the path. */
static br_status from_gram(br_ctx *ctx, br_rng *rng, const double *chol, int full, size_t n,
                           float *x, size_t ntok) {
    /* tokens per GEMM: Z and X chunks [chunk][n] f64 of at most 8 MiB each */
    size_t chunk = ((size_t)1 << 20) / n;
    chunk = chunk < 1 ? 1 : chunk > ntok ? (ntok ? ntok : 1) : chunk;
    double *z = malloc(chunk * n * sizeof *z), *xd = malloc(chunk * n * sizeof *xd);
    if (!z || !xd) {
        free(z);
        free(xd);
        return br_fail(ctx, BR_E_NOMEM, "input Gram [%zu][%zu]: out of host memory", n, n);
    }
    for (size_t t0 = 0; t0 < ntok; t0 += chunk) {
        size_t rows = ntok - t0 < chunk ? ntok - t0 : chunk;
        for (size_t e = 0; e < rows * n; e++)
            z[e] = br_rng_normal(rng);
        if (full) {
#ifdef BR_HAVE_CBLAS
            /* X = Z·Lᵀ [rows][n]: one GEMM (the per-token loops took most of a
             * small job's time: 6·10⁹ multiply-adds for a 1536-input layer) */
            br_dgemm(0, 1, rows, n, n, 1.0, z, n, chol, n, 0.0, xd, n);
            for (size_t e = 0; e < rows * n; e++)
                x[t0 * n + e] = (float)xd[e];
#else
            /* without BLAS the triangle alone, half the work of a plain GEMM */
            for (size_t t = 0; t < rows; t++)
                for (size_t i = 0; i < n; i++) {
                    double acc = 0;
                    for (size_t j = 0; j <= i; j++)
                        acc += chol[i * n + j] * z[t * n + j];
                    x[(t0 + t) * n + i] = (float)acc;
                }
#endif
        } else {
            for (size_t t = 0; t < rows; t++)
                for (size_t i = 0; i < n; i++) {
                    double d = chol[i * n + i];
                    x[(t0 + t) * n + i] = (float)(sqrt(d > 0 ? d : 0) * z[t * n + i]);
                }
        }
    }
    free(z);
    free(xd);
    return BR_OK;
}

br_status br_calib_gram(br_ctx *ctx, const br_st_file *file, const char *name, size_t n,
                        double **gram) {
    *gram = NULL;
    if (!file) return BR_OK;
    const br_st_tensor *t = find_for_layer(file, name, n, 1);
    if (!t) return BR_OK;
    const char *path = br_st_path(file);
    if (!fits(t, n, 1))
        return br_fail(ctx, BR_E_SHAPE,
                       "%s: tensor '%s': the Gram of layer '%s' must be [%zu][%zu] (its input "
                       "size), or a factor [k][%zu] with k < %zu",
                       path, t->name, name, n, n, n, n);
    size_t k = (size_t)t->shape[0];
    float *f = malloc(k * n * sizeof *f);
    double *g = calloc(n * n, sizeof *g);
    if (!f || !g) {
        free(f);
        free(g);
        return br_fail(ctx, BR_E_NOMEM, "%s: tensor '%s': out of host memory", path, t->name);
    }
    br_status st = br_st_read_f32(ctx, file, t, 0, k * n, f);
    if (!st) st = check_finite(ctx, path, t->name, f, k * n);
    if (st) {
        free(f);
        free(g);
        return st;
    }
    if (k == n) {
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < n; j++)
                g[i * n + j] = 0.5 * ((double)f[i * n + j] + f[j * n + i]);
    } else {
        /* Σ = FᵀF */
#ifdef BR_HAVE_CBLAS
        /* one GEMM in f64 (k·n² multiply-adds: 9·10⁸ for a [384][1536] factor) */
        double *fd = malloc(k * n * sizeof *fd);
        if (!fd) {
            free(f);
            free(g);
            return br_fail(ctx, BR_E_NOMEM, "%s: tensor '%s': out of host memory", path, t->name);
        }
        for (size_t e = 0; e < k * n; e++)
            fd[e] = f[e];
        br_dgemm(1, 0, n, n, k, 1.0, fd, n, fd, n, 0.0, g, n);
        free(fd);
#else
        for (size_t r = 0; r < k; r++)
            for (size_t i = 0; i < n; i++) {
                double fi = f[r * n + i];
                for (size_t j = 0; j < n; j++)
                    g[i * n + j] += fi * f[r * n + j];
            }
#endif
    }
    free(f);
    /* a Gram XᵀX has a non-negative diagonal, not all zero */
    double trace = 0;
    for (size_t j = 0; j < n; j++) {
        double d = g[j * n + j];
        if (d < 0) {
            free(g);
            return br_fail(ctx, BR_E_FORMAT,
                           "%s: tensor '%s': not an input Gram of layer '%s': diagonal element "
                           "[%zu][%zu] = %g is negative",
                           path, t->name, name, j, j, d);
        }
        trace += d;
    }
    if (!(trace > 0) || !isfinite(trace)) {
        free(g);
        return br_fail(ctx, BR_E_FORMAT,
                       "%s: tensor '%s': not an input Gram of layer '%s': its diagonal is %s", path,
                       t->name, name, trace > 0 ? "not finite" : "all zero");
    }
    *gram = g;
    return BR_OK;
}

/* Recorded inputs of a layer: [tokens][n] of at least 2 tokens (some are held out). */
static br_status check_acts_shape(br_ctx *ctx, const br_st_file *file, const br_st_tensor *t,
                                  const char *name, size_t n) {
    const char *path = br_st_path(file);
    if (t->ndim < 2 || t->shape[t->ndim - 1] != n)
        return br_fail(ctx, BR_E_SHAPE,
                       "%s: tensor '%s': activations of layer '%s' must be [tokens][%zu], its "
                       "last dimension is %llu",
                       path, t->name, name, n,
                       (unsigned long long)(t->ndim ? t->shape[t->ndim - 1] : 0));
    if (t->numel / n < 2)
        return br_fail(ctx, BR_E_SHAPE,
                       "%s: tensor '%s': %zu token(s) of activations of layer '%s'; at least 2 "
                       "are needed (some are held out)",
                       path, t->name, (size_t)(t->numel / n), name);
    return BR_OK;
}

const br_st_tensor *br_calib_find_acts(const br_calib_src *src, const char *name, size_t n) {
    return src && src->acts ? find_for_layer(src->acts, name, n, 0) : NULL;
}

const br_st_tensor *br_calib_find_gram(const br_calib_src *src, const char *name, size_t n) {
    return src && src->gram ? find_for_layer(src->gram, name, n, 1) : NULL;
}

br_status br_calib_inputs(br_ctx *ctx, const br_calib_src *src, const char *name, size_t n,
                          size_t neval_want, uint64_t seed, const double *gram, int synthetic,
                          br_calib_set *out) {
    memset(out, 0, sizeof *out);
    br_rng rng;
    br_rng_seed(&rng, seed ^ br_name_hash(name));
    const br_st_tensor *t = br_calib_find_acts(src, name, n);
    if (t) {
        const char *path = br_st_path(src->acts);
        BR_TRY(check_acts_shape(ctx, src->acts, t, name, n));
        size_t ntok = (size_t)(t->numel / n);
        size_t neval = neval_want < ntok / 4 ? neval_want : ntok / 4;
        if (!neval) neval = 1;
        float *x = malloc(ntok * n * sizeof *x);
        if (!x)
            return br_fail(ctx, BR_E_NOMEM, "%s: tensor '%s': out of host memory", path, t->name);
        br_status st = br_st_read_f32(ctx, src->acts, t, 0, ntok * n, x);
        if (!st) st = check_finite(ctx, path, t->name, x, ntok * n);
        if (st) {
            free(x);
            return st;
        }
        out->x_train = x;
        out->ntrain = ntok - neval;
        out->x_eval = x + out->ntrain * n;
        out->neval = neval;
        out->owns_eval = 0;
        out->recorded = 1;
        out->kind = "activations";
        return BR_OK;
    }
    out->x_eval = malloc(neval_want * n * sizeof(float));
    out->neval = neval_want;
    out->owns_eval = 1;
    if (!out->x_eval) {
        br_calib_free(out);
        return br_fail(ctx, BR_E_NOMEM, "calibration inputs of '%s': out of host memory", name);
    }
    br_status st = BR_OK;
    if (gram) {
        out->kind = "gram";
        double *chol = NULL;
        int full = 0;
        st = gram_sampler(ctx, gram, n, &chol, &full);
        if (!st) st = from_gram(ctx, &rng, chol, full, n, out->x_eval, neval_want);
        free(chol);
    } else {
        out->kind = synthetic == BR_SYNTH_HEAVY ? "synthetic heavy-tailed" : "synthetic isotropic";
        double *chan = malloc(n * sizeof *chan);
        out->var = malloc(n * sizeof *out->var);
        if (!chan || !out->var) {
            free(chan);
            br_calib_free(out);
            return br_fail(ctx, BR_E_NOMEM, "calibration inputs of '%s': out of host memory", name);
        }
        for (size_t j = 0; j < n; j++) {
            chan[j] = synthetic == BR_SYNTH_HEAVY ? exp(br_rng_normal(&rng)) : 1.0;
            out->var[j] = chan[j] * chan[j];
        }
        gaussian_inputs(&rng, chan, out->x_eval, neval_want, n);
        free(chan);
    }
    if (st) br_calib_free(out);
    return st;
}

void br_calib_free(br_calib_set *set) {
    if (!set) return;
    free(set->x_train);
    free(set->var);
    if (set->owns_eval) free(set->x_eval);
    memset(set, 0, sizeof *set);
}

static int was_checked(const br_calib_memo *memo, const br_st_tensor *t) {
    for (size_t i = 0; i < memo->n_checked; i++)
        if (memo->checked[i] == t) return 1;
    return 0;
}

static br_status mark_checked(br_ctx *ctx, br_calib_memo *memo, const br_st_tensor *t) {
    if (memo->n_checked == memo->cap_checked) {
        size_t cap = memo->cap_checked ? 2 * memo->cap_checked : 16;
        const br_st_tensor **c = realloc(memo->checked, cap * sizeof *c);
        if (!c) return br_fail(ctx, BR_E_NOMEM, "calibration check: out of host memory");
        memo->checked = c;
        memo->cap_checked = cap;
    }
    memo->checked[memo->n_checked++] = t;
    return BR_OK;
}

/* Recorded inputs of a layer: shape, dtype and finite values, in chunks. */
static br_status check_acts(br_ctx *ctx, const br_st_file *file, const br_st_tensor *t,
                            const char *name, size_t n) {
    const char *path = br_st_path(file);
    if (t->dtype != BR_ST_F32 && t->dtype != BR_ST_F16 && t->dtype != BR_ST_BF16)
        return br_fail(ctx, BR_E_UNSUPPORTED,
                       "%s: tensor '%s': activations of layer '%s' must be F32, F16 or BF16, "
                       "not %s",
                       path, t->name, name, t->dtype_name);
    BR_TRY(check_acts_shape(ctx, file, t, name, n));
    size_t ntok = (size_t)(t->numel / n);
    const size_t chunk = (size_t)1 << 20;
    float *buf = malloc((ntok * n < chunk ? ntok * n : chunk) * sizeof *buf);
    if (!buf) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", path);
    br_status st = BR_OK;
    for (size_t e0 = 0; !st && e0 < ntok * n; e0 += chunk) {
        size_t cnt = ntok * n - e0 < chunk ? ntok * n - e0 : chunk;
        st = br_st_read_f32(ctx, file, t, e0, cnt, buf);
        for (size_t i = 0; !st && i < cnt; i++)
            if (!isfinite(buf[i]))
                st = br_fail(ctx, BR_E_NONFINITE,
                             "%s: tensor '%s': activations of layer '%s': element [%zu][%zu] is "
                             "%s",
                             path, t->name, name, (e0 + i) / n, (e0 + i) % n,
                             isnan(buf[i]) ? "NaN" : "infinite");
    }
    free(buf);
    return st;
}

/* A Gram of a layer: br_calib_gram's checks, then positive semi-definiteness. */
static br_status check_gram(br_ctx *ctx, const br_st_file *file, const br_st_tensor *t,
                            const char *name, size_t n) {
    double *g = NULL;
    BR_TRY(br_calib_gram(ctx, file, name, n, &g));
    if (!g) return BR_OK;
    double tr = 0;
    for (size_t j = 0; j < n; j++)
        tr += g[j * n + j];
    for (size_t j = 0; j < n; j++)
        g[j * n + j] += 0.01 * tr / (double)n;
    int info = br_dchol_lower(n, g);
    free(g);
    if (info > 0)
        return br_fail(ctx, BR_E_FORMAT,
                       "%s: tensor '%s': not an input Gram of layer '%s': it is not positive "
                       "semi-definite (with 1%% of its mean diagonal added, its Cholesky "
                       "factorization fails at column %d)",
                       br_st_path(file), t->name, name, info - 1);
    if (info < 0)
        return br_fail(ctx, BR_E_SHAPE, "%s: tensor '%s': a [%zu][%zu] Gram is too large",
                       br_st_path(file), t->name, n, n);
    return BR_OK;
}

br_status br_calib_check(br_ctx *ctx, const br_calib_src *src, const char *name, size_t n,
                         br_calib_memo *memo, int *acts, int *gram) {
    const br_st_tensor *ta = br_calib_find_acts(src, name, n);
    const br_st_tensor *tg = br_calib_find_gram(src, name, n);
    *acts = ta != NULL;
    *gram = tg != NULL;
    if (ta && !was_checked(memo, ta)) {
        BR_TRY(check_acts(ctx, src->acts, ta, name, n));
        BR_TRY(mark_checked(ctx, memo, ta));
    }
    if (tg && !was_checked(memo, tg)) {
        BR_TRY(check_gram(ctx, src->gram, tg, name, n));
        BR_TRY(mark_checked(ctx, memo, tg));
    }
    return BR_OK;
}
