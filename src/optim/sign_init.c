/* Initialization of the sign latents on the host: Λ = ±tau from the bits, or the
 * scaled real-valued factor of an initialization (whose signs become the bits). */
#include <math.h>
#include <stdlib.h>

#include "ops/check.h"
#include "ops/sign_ops.h"
#include "optim/optim_internal.h"

br_status br_blr_opt_init_latent(br_blr_opt *o, size_t path, int which, const float *factor) {
    static const char fn[] = "br_blr_opt_init_latent";
    if (!o) return BR_E_ARG;
    br_blr *l = o->layer;
    br_ctx *ctx = o->ctx;
    if (path >= l->paths)
        return br_fail(ctx, BR_E_ARG, "%s: path %zu of a layer of %zu", fn, path, l->paths);
    if (which != 0 && which != 1)
        return br_fail(ctx, BR_E_ARG, "%s: which = %d is neither 0 (S_U) nor 1 (S_V)", fn, which);
    if (br_ctx_recording(ctx))
        return br_fail(ctx, BR_E_STATE, "%s: called while recording a graph", fn);
    const br_sign_mat *mt = &o->mat[2 * path + (size_t)which];
    int latent = o->cfg.sign_mode == BR_SIGN_LATENT;
    if (!factor && !latent) return BR_OK;
    size_t rows = mt->rows, r = l->r, w = l->words, n = rows * r;
    br_buf *bits = l->path[path].part[which ? BR_BLR_BITS_V : BR_BLR_BITS_U];
    uint32_t *b = malloc(rows * w * sizeof *b);
    float *lat = malloc(n * sizeof *lat);
    br_status st = BR_OK;
    if (!b || !lat) {
        st = br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
        goto done;
    }
    float tau = o->cfg.sign_tau;
    if (!factor) {
        if ((st = br_buf_download(bits, 0, b, rows * w))) goto done;
        for (size_t i = 0; i < rows; i++)
            for (size_t k = 0; k < r; k++)
                lat[i * r + k] = (b[i * w + k / 32] >> (k % 32)) & 1u ? tau : -tau;
    } else {
        double sum = 0;
        for (size_t e = 0; e < n; e++) {
            if (!isfinite(factor[e])) {
                st = br_fail(ctx, BR_E_NONFINITE, "%s: factor[%zu] = %g is not finite", fn, e,
                             (double)factor[e]);
                goto done;
            }
            sum += fabs((double)factor[e]);
        }
        double scale = sum > 0 ? tau / (sum / (double)n) : 1.0;
        float clamp = o->cfg.sign_clamp;
        for (size_t i = 0; i < rows; i++) {
            for (size_t j = 0; j < w; j++)
                b[i * w + j] = 0;
            for (size_t k = 0; k < r; k++) {
                float f = factor[i * r + k];
                float v = (float)(f * scale);
                lat[i * r + k] = v > clamp ? clamp : v < -clamp ? -clamp : v;
                if (f >= 0) b[i * w + k / 32] |= 1u << (k % 32);
            }
        }
        if ((st = br_buf_upload(bits, 0, b, rows * w))) goto done;
    }
    if (latent) {
        if ((st = br_buf_upload(mt->latent, 0, lat, n)) || (st = br_buf_fill(mt->m1, 0, n, 0)) ||
            (st = br_buf_fill(mt->v, 0, br_buf_count(mt->v), 0)))
            goto done;
    }
done:
    free(b);
    free(lat);
    return st;
}
