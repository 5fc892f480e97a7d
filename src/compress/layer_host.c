/* The host form of a layer's factors: allocation, reconstruction of Ŵ. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compress.h"
#include "compress/host_blas.h"

br_status br_layer_host_alloc(br_ctx *ctx, br_blr_host *L, size_t m, size_t n, size_t r,
                              size_t paths) {
    memset(L, 0, sizeof *L);
    if (!m || !n || !r || paths < 1 || paths > 2)
        return br_fail(ctx, BR_E_SHAPE,
                       "layer factors: bad shape m=%zu n=%zu r=%zu paths=%zu (1 or 2 paths)", m, n,
                       r, paths);
    L->m = m;
    L->n = n;
    L->r = r;
    L->paths = paths;
    size_t words = (r + 31) / 32;
    for (size_t p = 0; p < paths; p++) {
        br_blr_path_host *P = &L->path[p];
        P->bits_u = calloc(m * words, sizeof *P->bits_u);
        P->bits_v = calloc(n * words, sizeof *P->bits_v);
        P->h = calloc(m, sizeof *P->h);
        P->l = calloc(r, sizeof *P->l);
        P->g = calloc(n, sizeof *P->g);
        if (!P->bits_u || !P->bits_v || !P->h || !P->l || !P->g) {
            br_layer_host_free(L);
            return br_fail(ctx, BR_E_NOMEM, "layer factors [%zu][%zu] rank %zu: out of host memory",
                           m, n, r);
        }
    }
    return BR_OK;
}

void br_layer_host_free(br_blr_host *L) {
    if (!L) return;
    for (size_t p = 0; p < 2; p++) {
        free(L->path[p].bits_u);
        free(L->path[p].bits_v);
        free(L->path[p].h);
        free(L->path[p].l);
        free(L->path[p].g);
    }
    memset(L, 0, sizeof *L);
}

br_status br_layer_host_reconstruct(br_ctx *ctx, const br_blr_host *L, size_t paths, float *w_hat) {
    size_t m = L->m, n = L->n, r = L->r, words = (r + 31) / 32;
    if (!paths || paths > L->paths) paths = L->paths;
    /* Ŵ = Σ_p A_p·B_pᵀ with A = diag(h)·S_U·diag(ℓ) [m][r] and B = diag(g)·S_V [n][r] */
    float *a = malloc(m * r * sizeof *a), *b = malloc(n * r * sizeof *b);
    if (!a || !b) {
        free(a);
        free(b);
        return br_fail(ctx, BR_E_NOMEM, "reconstructing a [%zu][%zu] layer: out of host memory", m,
                       n);
    }
    for (size_t p = 0; p < paths; p++) {
        const br_blr_path_host *P = &L->path[p];
        for (size_t i = 0; i < m; i++)
            for (size_t k = 0; k < r; k++)
                a[i * r + k] = P->h[i] * br_bit_sign(P->bits_u, words, i, k) * P->l[k];
        for (size_t j = 0; j < n; j++)
            for (size_t k = 0; k < r; k++)
                b[j * r + k] = P->g[j] * br_bit_sign(P->bits_v, words, j, k);
        br_sgemm_nt(m, n, r, a, r, b, r, p ? 1.0f : 0.0f, w_hat, n);
    }
    free(a);
    free(b);
    return BR_OK;
}

double br_rel_diff(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    if (!isfinite(num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

br_status br_svid_factors_alloc(br_ctx *ctx, br_svid_factors *f, size_t m, size_t n, size_t r,
                                size_t paths) {
    memset(f, 0, sizeof *f);
    for (size_t p = 0; p < paths && p < 2; p++) {
        f->u[p] = calloc(m * r, sizeof *f->u[p]);
        f->v[p] = calloc(n * r, sizeof *f->v[p]);
        if (!f->u[p] || !f->v[p]) {
            br_svid_factors_free(f);
            return br_fail(ctx, BR_E_NOMEM,
                           "Dual-SVID factors [%zu][%zu] rank %zu: out of host memory", m, n, r);
        }
    }
    return BR_OK;
}

void br_svid_factors_free(br_svid_factors *f) {
    if (!f) return;
    for (size_t p = 0; p < 2; p++) {
        free(f->u[p]);
        free(f->v[p]);
    }
    memset(f, 0, sizeof *f);
}
