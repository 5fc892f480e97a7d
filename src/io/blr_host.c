/* The host form of a BLR layer (br_blr_host): its arrays allocated, freed and
 * checked, its scales as the f16 bytes both encodings store (st_blr.c, cortiq.c),
 * and the dense weight it stands for. Below both encodings, so that neither calls
 * into the other for these. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "io/blr_layout.h"

static size_t words_of(size_t r) { return (r + 31) / 32; }

/* Element counts of a layer's arrays per path, overflow-checked. */
static br_status layer_sizes(br_ctx *ctx, const char *fn, size_t m, size_t n, size_t r,
                             size_t paths, size_t *u_words, size_t *v_words) {
    if (!m || !n || !r)
        return br_fail(ctx, BR_E_SHAPE, "%s: m, n, r must be ≥ 1 (got %zu, %zu, %zu)", fn, m, n, r);
    if (paths < 1 || paths > BR_BLR_MAX_PATHS)
        return br_fail(ctx, BR_E_ARG, "%s: paths = %zu, expected 1 or 2", fn, paths);
    uint64_t u, v, ub, vb;
    if (!br_mul_u64(m, words_of(r), &u) || !br_mul_u64(n, words_of(r), &v) ||
        !br_mul_u64(u, 4 * paths, &ub) || !br_mul_u64(v, 4 * paths, &vb) || ub > SIZE_MAX / 2 ||
        vb > SIZE_MAX / 2 || m > SIZE_MAX / 8 || n > SIZE_MAX / 8 || r > SIZE_MAX / 8)
        return br_fail(ctx, BR_E_OVERFLOW, "%s: a layer of %zu × %zu, rank %zu, is too large", fn,
                       m, n, r);
    *u_words = (size_t)u;
    *v_words = (size_t)v;
    return BR_OK;
}

br_status br_blr_check_layer(br_ctx *ctx, const char *fn, const br_blr_host *layer) {
    if (!layer) return br_fail(ctx, BR_E_ARG, "%s: layer is NULL", fn);
    size_t uw, vw;
    BR_TRY(layer_sizes(ctx, fn, layer->m, layer->n, layer->r, layer->paths, &uw, &vw));
    for (size_t p = 0; p < layer->paths; p++) {
        const br_blr_path_host *ph = &layer->path[p];
        if (!ph->bits_u || !ph->bits_v || !ph->h || !ph->l || !ph->g)
            return br_fail(ctx, BR_E_ARG, "%s: path %zu has a NULL array", fn, p);
    }
    return BR_OK;
}

br_status br_blr_put_f16(br_ctx *ctx, const char *fn, const char *name, const char *what, size_t p,
                         const float *src, size_t n, uint8_t *dst) {
    for (size_t i = 0; i < n; i++) {
        uint16_t h = br_half_from_float(src[i]);
        if (!isfinite(src[i]) || (h & 0x7c00u) == 0x7c00u)
            return br_fail(ctx, BR_E_NONFINITE,
                           "%s: layer '%.200s': path %zu: %s[%zu] = %g is not finite or does not "
                           "fit f16",
                           fn, name, p, what, i, (double)src[i]);
        br_put_le16(dst + 2 * i, h);
    }
    return BR_OK;
}

br_status br_blr_host_alloc(br_ctx *ctx, br_blr_host *layer, size_t m, size_t n, size_t r,
                            size_t paths) {
    static const char *fn = "br_blr_host_alloc";
    if (!layer) return br_fail(ctx, BR_E_ARG, "%s: layer is NULL", fn);
    memset(layer, 0, sizeof *layer);
    size_t uw, vw;
    BR_TRY(layer_sizes(ctx, fn, m, n, r, paths, &uw, &vw));
    *layer = (br_blr_host){.m = m, .n = n, .r = r, .paths = paths};
    for (size_t p = 0; p < paths; p++) {
        br_blr_path_host *ph = &layer->path[p];
        ph->bits_u = calloc(uw, sizeof *ph->bits_u);
        ph->bits_v = calloc(vw, sizeof *ph->bits_v);
        ph->h = calloc(m, sizeof *ph->h);
        ph->l = calloc(r, sizeof *ph->l);
        ph->g = calloc(n, sizeof *ph->g);
        if (!ph->bits_u || !ph->bits_v || !ph->h || !ph->l || !ph->g) {
            br_blr_host_free(layer);
            return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory for a %zu × %zu layer", fn, m,
                           n);
        }
    }
    return BR_OK;
}

void br_blr_host_free(br_blr_host *layer) {
    if (!layer) return;
    for (size_t p = 0; p < BR_BLR_MAX_PATHS; p++) {
        br_blr_path_host *ph = &layer->path[p];
        free(ph->bits_u);
        free(ph->bits_v);
        free(ph->h);
        free(ph->l);
        free(ph->g);
    }
    memset(layer, 0, sizeof *layer);
}

br_status br_blr_reconstruct(br_ctx *ctx, const br_blr_host *layer, float *w) {
    static const char *fn = "br_blr_reconstruct";
    BR_TRY(br_blr_check_layer(ctx, fn, layer));
    if (!w) return br_fail(ctx, BR_E_ARG, "%s: w is NULL", fn);
    size_t m = layer->m, n = layer->n, r = layer->r, words = words_of(r);
    double *t = malloc(r * sizeof *t);
    double *acc = malloc(n * sizeof *acc);
    if (!t || !acc) {
        free(t);
        free(acc);
        return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    }
    for (size_t i = 0; i < m; i++) {
        for (size_t j = 0; j < n; j++)
            acc[j] = 0;
        for (size_t p = 0; p < layer->paths; p++) {
            const br_blr_path_host *ph = &layer->path[p];
            const uint32_t *u = ph->bits_u + i * words;
            /* t[k] = h_i · S_U[i][k] · ℓ_k */
            for (size_t k = 0; k < r; k++)
                t[k] =
                    (u[k / 32] >> (k % 32) & 1u ? 1.0 : -1.0) * (double)ph->h[i] * (double)ph->l[k];
            for (size_t j = 0; j < n; j++) {
                const uint32_t *v = ph->bits_v + j * words;
                double s = 0;
                for (size_t k = 0; k < r; k++)
                    s += v[k / 32] >> (k % 32) & 1u ? t[k] : -t[k];
                acc[j] += s * (double)ph->g[j];
            }
        }
        for (size_t j = 0; j < n; j++)
            w[i * n + j] = (float)acc[j];
    }
    free(t);
    free(acc);
    return BR_OK;
}
