/* Test helpers of the BLR layer: random layers on the host, their upload, and an
 * f64 reference of forward, backward and sign gradients, written
 * straight from the formulas. Included by test_blr.c, test_sign.c, test_optim.c. */
#ifndef BR_TESTS_BLR_REF_H
#define BR_TESTS_BLR_REF_H

#include "harness.h"

typedef struct ref_path {
    float *su, *sv;    /* ±1 [m][r], [n][r] */
    uint32_t *bu, *bv; /* their bitmaps [m][r/32], [n][r/32] */
    float *h, *l, *g;  /* [m], [r], [n] */
} ref_path;

typedef struct ref_layer {
    size_t m, n, r, paths;
    ref_path *p;
} ref_layer;

/* Bitmap of ±1 signs s [rows][r] (bit 1 = +1). */
static inline void ref_pack(const float *s, size_t rows, size_t r, uint32_t *bits) {
    size_t w = r / 32;
    memset(bits, 0, rows * w * sizeof *bits);
    for (size_t i = 0; i < rows; i++)
        for (size_t k = 0; k < r; k++)
            if (s[i * r + k] > 0) bits[i * w + k / 32] |= 1u << (k % 32);
}

static inline float *ref_signs(br_rng *rng, size_t n) {
    float *s = t_xmalloc(n * sizeof *s);
    for (size_t i = 0; i < n; i++)
        s[i] = br_rng_sym(rng) >= 0 ? 1.0f : -1.0f;
    return s;
}

/* A random layer. grid = 1: ℓ ∈ {0.5, 1, 2}, g ∈ {0.5, 1}, h ∈ {1/32, 1/16} (powers
 * of two, so every f16 operand of a forward on inputs that are multiples of 1/8 is
 * exact, and so is the staged dy⊙h·gs of a dy on a grid of 1/64). */
static inline ref_layer ref_random(br_rng *rng, size_t m, size_t n, size_t r, size_t paths,
                                   int grid) {
    ref_layer L = {m, n, r, paths, t_xmalloc(paths * sizeof(ref_path))};
    for (size_t p = 0; p < paths; p++) {
        ref_path *q = &L.p[p];
        q->su = ref_signs(rng, m * r);
        q->sv = ref_signs(rng, n * r);
        q->bu = t_xmalloc(m * (r / 32) * sizeof *q->bu);
        q->bv = t_xmalloc(n * (r / 32) * sizeof *q->bv);
        ref_pack(q->su, m, r, q->bu);
        ref_pack(q->sv, n, r, q->bv);
        q->h = t_xmalloc(m * sizeof *q->h);
        q->l = t_xmalloc(r * sizeof *q->l);
        q->g = t_xmalloc(n * sizeof *q->g);
        for (size_t i = 0; i < m; i++) {
            float u = fabsf(br_rng_sym(rng));
            q->h[i] = grid ? (u < 0.5f ? 0.03125f : 0.0625f) : 0.02f + u * 0.05f;
        }
        for (size_t k = 0; k < r; k++) {
            float u = fabsf(br_rng_sym(rng));
            q->l[k] = grid ? (u < 1.0f / 3 ? 0.5f : u < 2.0f / 3 ? 1.0f : 2.0f) : 0.5f + u;
        }
        for (size_t j = 0; j < n; j++) {
            float u = br_rng_sym(rng);
            q->g[j] = grid ? (u >= 0 ? 1.0f : 0.5f) : 0.1f + fabsf(u) * 0.2f;
        }
    }
    return L;
}

static inline void ref_free(ref_layer *L) {
    for (size_t p = 0; p < L->paths; p++) {
        ref_path *q = &L->p[p];
        free(q->su), free(q->sv), free(q->bu), free(q->bv), free(q->h), free(q->l), free(q->g);
    }
    free(L->p);
    L->p = NULL;
}

/* The layer on ctx (exits on failure: a setup error, not a finding). */
static inline br_blr *ref_upload(br_ctx *ctx, const ref_layer *L, unsigned flags) {
    br_blr *l = NULL;
    if (br_blr_new(ctx, L->m, L->n, L->r, L->paths, flags, &l) != BR_OK) {
        fprintf(stderr, "br_blr_new failed: %s\n", br_ctx_error(ctx));
        exit(1);
    }
    for (size_t p = 0; p < L->paths; p++) {
        const ref_path *q = &L->p[p];
        if (br_blr_set_path(l, p, q->bu, q->bv, q->h, q->l, q->g) != BR_OK) {
            fprintf(stderr, "br_blr_set_path failed: %s\n", br_ctx_error(ctx));
            exit(1);
        }
    }
    return l;
}

/* f64 results of one forward + backward. Per path arrays are [paths][...]. */
typedef struct ref_out {
    double *y, *dx;       /* [ntok][m], [ntok][n] */
    double *dh, *dl, *dg; /* [paths][m], [paths][r], [paths][n] */
    /* Σ_t |term| of dh, dℓ, dg: the scale of a reduction that may cancel */
    double *dh_abs, *dl_abs, *dg_abs;
    double *gu, *gv; /* [paths][m][r], [paths][n][r] */
    double *a;       /* [paths][ntok][r] */
} ref_out;

static inline void ref_out_free(ref_out *o) {
    free(o->y), free(o->dx), free(o->dh), free(o->dl), free(o->dg), free(o->gu), free(o->gv),
        free(o->a), free(o->dh_abs), free(o->dl_abs), free(o->dg_abs);
    memset(o, 0, sizeof *o);
}

static inline double *ref_zeros(size_t n) {
    double *v = t_xmalloc(n * sizeof *v);
    memset(v, 0, n * sizeof *v);
    return v;
}

/* y = Σ_p h⊙((a⊙ℓ)·S_Uᵀ), a = (x⊙g)·S_V; with dy (may be NULL: forward only) the
 * gradients. */
static inline void ref_run(const ref_layer *L, const float *x, const float *dy, size_t ntok,
                           ref_out *o) {
    size_t m = L->m, n = L->n, r = L->r, P = L->paths;
    memset(o, 0, sizeof *o);
    o->y = ref_zeros(ntok * m);
    o->dx = ref_zeros(ntok * n);
    o->dh = ref_zeros(P * m);
    o->dl = ref_zeros(P * r);
    o->dg = ref_zeros(P * n);
    o->dh_abs = ref_zeros(P * m);
    o->dl_abs = ref_zeros(P * r);
    o->dg_abs = ref_zeros(P * n);
    o->gu = ref_zeros(P * m * r);
    o->gv = ref_zeros(P * n * r);
    o->a = ref_zeros(P * ntok * r);
    double *c = ref_zeros(m), *b = ref_zeros(ntok * r), *dxp = ref_zeros(n);
    for (size_t p = 0; p < P; p++) {
        const ref_path *q = &L->p[p];
        double *a = o->a + p * ntok * r;
        for (size_t t = 0; t < ntok; t++) {
            double *at = a + t * r;
            for (size_t j = 0; j < n; j++) {
                double xg = (double)x[t * n + j] * q->g[j];
                for (size_t k = 0; k < r; k++)
                    at[k] += xg * q->sv[j * r + k];
            }
            for (size_t i = 0; i < m; i++) {
                double s = 0;
                for (size_t k = 0; k < r; k++)
                    s += at[k] * q->l[k] * q->su[i * r + k];
                c[i] = s;
                o->y[t * m + i] += q->h[i] * s;
            }
            if (!dy) continue;
            double *bt = b + t * r;
            memset(bt, 0, r * sizeof *bt);
            for (size_t i = 0; i < m; i++) {
                double d = dy[t * m + i];
                o->dh[p * m + i] += d * c[i];
                o->dh_abs[p * m + i] += fabs(d * c[i]);
                double dh = d * q->h[i];
                for (size_t k = 0; k < r; k++)
                    bt[k] += dh * q->su[i * r + k];
            }
            for (size_t k = 0; k < r; k++) {
                o->dl[p * r + k] += at[k] * bt[k];
                o->dl_abs[p * r + k] += fabs(at[k] * bt[k]);
            }
            for (size_t j = 0; j < n; j++) {
                double s = 0;
                for (size_t k = 0; k < r; k++)
                    s += bt[k] * q->l[k] * q->sv[j * r + k];
                dxp[j] = s;
                o->dg[p * n + j] += (double)x[t * n + j] * s;
                o->dg_abs[p * n + j] += fabs((double)x[t * n + j] * s);
                o->dx[t * n + j] += q->g[j] * s;
            }
        }
        if (!dy) continue;
        for (size_t i = 0; i < m; i++)
            for (size_t k = 0; k < r; k++) {
                double s = 0;
                for (size_t t = 0; t < ntok; t++)
                    s += (double)dy[t * m + i] * a[t * r + k];
                o->gu[(p * m + i) * r + k] = q->h[i] * (double)q->l[k] * s;
            }
        for (size_t j = 0; j < n; j++)
            for (size_t k = 0; k < r; k++) {
                double s = 0;
                for (size_t t = 0; t < ntok; t++)
                    s += (double)x[t * n + j] * b[t * r + k];
                o->gv[(p * n + j) * r + k] = q->g[j] * (double)q->l[k] * s;
            }
    }
    free(c), free(b), free(dxp);
}

/* ‖got − ref‖ / ‖scale‖: the error of a reduction over tokens relative to the size
 * of its terms (scale = Σ_t |term|), for vectors so short that ‖ref‖ may cancel. */
static inline double ref_err_scaled(const float *got, const double *ref, const double *scale,
                                    size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        den += scale[i] * scale[i];
    }
    return sqrt(num / (den > 1e-300 ? den : 1e-300));
}

/* Download n floats of a layer part. */
static inline float *ref_part(br_ctx *ctx, br_blr *l, size_t p, br_blr_part part, size_t n) {
    br_buf *b = br_blr_buf(l, p, part);
    if (!b) {
        fprintf(stderr, "layer part %d of path %zu missing\n", (int)part, p);
        exit(1);
    }
    return t_download_f32(ctx, b, n);
}

#endif
