/* The sign optimizer's ops on the CPU: cvt_pad, step_ctrl and sign_step. The
 * reference semantics of ops/sign_ops.h: every sum runs in the fixed order the
 * CUDA kernels use (lanes, then a halving tree), so both give the same bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "ops/sign_ops.h"

/* ---------------------------------------------------------------- cvt_pad */

br_status br_cpu_cvt_pad(br_ctx *ctx, const br_op *op) {
    const br_cvt_pad_args *a = &op->u.cvt_pad;
    const float *src = br_ptr(a->src);                 /* [m][k] */
    const float *col = a->col ? br_ptr(a->col) : NULL; /* [k] */
    uint16_t *dst = br_ptr(a->dst);                    /* [br_pad_rows(m)][ld] */
    ctx->stats.launches++;
    for (size_t row = 0; row < a->m; row++) {
        const float *s = src + row * a->k;
        uint16_t *d = dst + row * a->ld;
        /* f16((x·col)·scale), each product rounded, as br_cvt */
        for (size_t c = 0; c < a->k; c++)
            d[c] = br_half_from_float((col ? s[c] * col[c] : s[c]) * a->scale);
        memset(d + a->k, 0, (a->ld - a->k) * sizeof *d);
    }
    memset(dst + a->m * a->ld, 0, (br_pad_rows(a->m) - a->m) * a->ld * sizeof *dst);
    return BR_OK;
}

/* ---------------------------------------------------------------- step_ctrl */

br_status br_cpu_step_ctrl(br_ctx *ctx, const br_op *op) {
    const br_step_ctrl_args *a = &op->u.step_ctrl;
    const float *part = br_ptr(a->partials); /* [np][BR_SUMSQ_PARTS] */
    const float *hyper = br_ptr(a->hyper);
    float *state = br_ptr(a->state), *sched = br_ptr(a->sched);
    float *ssched = br_ptr(a->sign_sched), *norms = br_ptr(a->norms);
    ctx->stats.launches++;
    int finite = 1;
    double clip = 0;
    for (size_t i = 0; i < a->np; i++) {
        double s = 0;
        for (size_t j = 0; j < BR_SUMSQ_PARTS; j++)
            s += (double)part[i * BR_SUMSQ_PARTS + j];
        if (!isfinite(s)) finite = 0;
        norms[i] = (float)sqrt(s);
        if (i < a->nclip) clip += s;
    }
    double norm = sqrt(clip);
    norms[a->np] = (float)norm;
    float max_norm = hyper[2];
    float gm = max_norm > 0 && norm > (double)max_norm ? (float)((double)max_norm / norm) : 1.0f;
    if (!finite) {
        sched[2] = gm;
        sched[3] = 1.0f;
        ssched[2] = gm;
        ssched[3] = 1.0f;
        return BR_OK;
    }
    float t = state[0] + 1.0f;
    float b1t = state[1] * a->sign_beta1, b2t = state[2] * a->sign_beta2;
    state[0] = t;
    state[1] = b1t;
    state[2] = b2t;
    sched[0] = hyper[0];
    sched[1] = t;
    sched[2] = gm;
    sched[3] = 0.0f;
    ssched[0] = hyper[1];
    ssched[1] = t;
    ssched[2] = gm;
    ssched[3] = 0.0f;
    ssched[4] = 1.0f - b1t;
    ssched[5] = 1.0f - b2t;
    ssched[6] = 0.0f;
    ssched[7] = 0.0f;
    return BR_OK;
}

/* ---------------------------------------------------------------- sign_step */

/* Σ_k fl(g·g) over one row of r gradients g = fl(G·gm), 32 lanes (lane l sums k = l,
 * l+32, ... in order) then a halving tree: the order of one CUDA warp. */
static float row_sumsq(const float *grad, size_t r, float gm) {
    float p[32] = {0};
    for (size_t k = 0; k < r; k++) {
        float g = grad[k] * gm;
        p[k % 32] = p[k % 32] + g * g;
    }
    for (int off = 16; off >= 1; off >>= 1)
        for (int l = 0; l < off; l++)
            p[l] = p[l] + p[l + off];
    return p[0];
}

/* Σ_i v[i] in BR_SIGN_LANES lanes then a halving tree (one CUDA block's order). */
static float lane_sum(const float *v, size_t n) {
    float p[BR_SIGN_LANES] = {0};
    for (size_t i = 0; i < n; i++)
        p[i % BR_SIGN_LANES] = p[i % BR_SIGN_LANES] + v[i];
    for (int off = BR_SIGN_LANES / 2; off >= 1; off >>= 1)
        for (int l = 0; l < off; l++)
            p[l] = p[l] + p[l + off];
    return p[0];
}

/* Σ_j x[j]² in double, lanes then tree, rounded to f32 once. */
static float lane_sumsq_f64(const float *x, size_t n) {
    double p[BR_SIGN_LANES] = {0};
    for (size_t j = 0; j < n; j++)
        p[j % BR_SIGN_LANES] += (double)x[j] * (double)x[j];
    for (int off = BR_SIGN_LANES / 2; off >= 1; off >>= 1)
        for (int l = 0; l < off; l++)
            p[l] += p[l + off];
    return (float)p[0];
}

/* Factored second moment: vr [rows], vc [r] updated in place; returns mean_i vr.
 * chunk, total: scratch [r] each. */
static float factored_update(const br_sign_step_args *a, const float *grad, float gm, float *vr,
                             float *vc, float *chunk, float *total) {
    size_t rows = a->rows, r = a->r;
    float omb2 = 1.0f - a->beta2;
    for (size_t i = 0; i < rows; i++) {
        float mean = row_sumsq(grad + i * r, r, gm) / (float)r;
        vr[i] = a->beta2 * vr[i] + omb2 * mean;
    }
    memset(total, 0, r * sizeof *total);
    for (size_t c0 = 0; c0 < rows; c0 += BR_SIGN_CHUNK) {
        size_t c1 = c0 + BR_SIGN_CHUNK < rows ? c0 + BR_SIGN_CHUNK : rows;
        memset(chunk, 0, r * sizeof *chunk);
        for (size_t i = c0; i < c1; i++)
            for (size_t k = 0; k < r; k++) {
                float g = grad[i * r + k] * gm;
                chunk[k] = chunk[k] + g * g;
            }
        for (size_t k = 0; k < r; k++)
            total[k] = total[k] + chunk[k];
    }
    for (size_t k = 0; k < r; k++)
        vc[k] = a->beta2 * vc[k] + omb2 * (total[k] / (float)rows);
    return lane_sum(vr, rows) / (float)rows;
}

/* The selection key of entry e with score bits kb (kb = 0: not a candidate): score
 * first, then the lower index; every candidate's key is unique. */
static inline uint64_t sel_key(uint32_t kb, size_t e) {
    return kb ? (uint64_t)kb << 32 | (uint64_t)(0xFFFFFFFFu - (uint32_t)e) : 0;
}

/* The K-th highest key among n (count > K ≥ 1 of them non-zero): 8 passes of 8-bit
 * digits from the top, as the CUDA kernels. */
static uint64_t radix_select(const uint32_t *score, size_t n, size_t K) {
    uint64_t prefix = 0, mask = 0;
    size_t need = K;
    for (int shift = 56; shift >= 0; shift -= 8) {
        size_t hist[256] = {0};
        for (size_t e = 0; e < n; e++) {
            uint64_t k = sel_key(score[e], e);
            if (k && (k & mask) == prefix) hist[(k >> shift) & 255u]++;
        }
        int b = 255;
        for (; b > 0 && hist[b] < need; b--)
            need -= hist[b];
        prefix |= (uint64_t)b << shift;
        mask |= (uint64_t)255u << shift;
    }
    return prefix;
}

br_status br_cpu_sign_step(br_ctx *ctx, const br_op *op) {
    const br_sign_step_args *a = &op->u.sign_step;
    const float *sched = br_ptr(a->sched);
    ctx->stats.launches++;
    if (sched[3] != 0.0f) return BR_OK; /* a refused step */
    size_t rows = a->rows, r = a->r, n = rows * r, words = r / 32;
    const float *grad = br_ptr(a->grad);
    uint32_t *bits = br_ptr(a->bits);
    uint32_t *key = malloc(n * sizeof *key);
    /* factored: column sums of a chunk of rows and their total, [2][r] */
    float *colsums = !a->exact && a->factored ? malloc(2 * r * sizeof *colsums) : NULL;
    if (!key || (!a->exact && a->factored && !colsums)) {
        free(key);
        free(colsums);
        return br_fail(ctx, BR_E_NOMEM, "sign_step: out of host memory (%zu keys)", n);
    }
    size_t count = 0;
    if (!a->exact) {
        float lr = sched[0], gm = sched[2], bc1 = sched[4], bc2 = sched[5];
        float omb1 = 1.0f - a->beta1, omb2 = 1.0f - a->beta2;
        float *lat = br_ptr(a->latent), *m1 = br_ptr(a->m1), *v = br_ptr(a->v);
        float mean = 0;
        if (a->factored) mean = factored_update(a, grad, gm, v, v + rows, colsums, colsums + r);
        /* every entry on its own: rows in parallel, the count summed */
        OMP("omp parallel for reduction(+ : count) schedule(static) if (n >= PARALLEL_MIN_ELEMS)")
        for (size_t i = 0; i < rows; i++)
            for (size_t k = 0; k < r; k++) {
                size_t e = i * r + k;
                float g = grad[e] * gm;
                float m = a->beta1 * m1[e] + omb1 * g;
                m1[e] = m;
                float ve;
                if (a->factored) {
                    ve = mean > 0 ? v[i] * v[rows + k] / mean : 0.0f;
                } else {
                    ve = a->beta2 * v[e] + omb2 * (g * g);
                    v[e] = ve;
                }
                float mh = m / bc1, vh = ve / bc2;
                float upd = lr * mh / (sqrtf(vh) + a->eps);
                /* fminf(fmaxf(x, −clamp), clamp) for clamp finite > 0 (the front-end's
                 * check), NaN to −clamp as there, without the two libm calls */
                float x = lat[e] - upd, l = x >= -a->clamp ? x : -a->clamp;
                l = l <= a->clamp ? l : a->clamp;
                lat[e] = l;
                int bit = (bits[i * words + k / 32] >> (k % 32)) & 1u;
                int cand = (l > 0) != bit && fabsf(l) > a->hyst;
                float score = fabsf(l);
                uint32_t kb;
                memcpy(&kb, &score, 4);
                key[e] = cand ? kb : 0u;
                count += cand;
            }
    } else {
        const float *rowf = br_ptr(a->rowf), *colf = br_ptr(a->colf);
        const float *rowq = a->rowq ? br_ptr(a->rowq) : NULL;
        const float *colq = a->colq ? br_ptr(a->colq) : NULL;
        float c = a->normsrc ? a->curv2 * lane_sumsq_f64(br_ptr(a->normsrc), a->nnorm) : a->curv2;
        OMP("omp parallel for reduction(+ : count) schedule(static) if (n >= PARALLEL_MIN_ELEMS)")
        for (size_t i = 0; i < rows; i++) {
            float qr = rowf[i] * rowf[i];
            if (rowq) qr = qr * rowq[i];
            float cq = c * qr;
            for (size_t k = 0; k < r; k++) {
                size_t e = i * r + k;
                float qc = colf[k] * colf[k];
                if (colq) qc = qc * colq[k];
                float quad = cq * qc, tg = 2.0f * grad[e];
                int bit = (bits[i * words + k / 32] >> (k % 32)) & 1u;
                float dl = bit ? quad - tg : quad + tg;
                float score = -dl;
                uint32_t kb;
                memcpy(&kb, &score, 4);
                key[e] = dl < 0 ? kb : 0u;
                count += dl < 0;
            }
        }
    }
    /* the selected keys are those ≥ thr (1: every candidate) */
    uint64_t thr = 1;
    if (a->budget && count > a->budget) thr = radix_select(key, n, a->budget);
    uint32_t flipped = 0;
    for (size_t w = 0; w < rows * words; w++) {
        uint32_t x = 0;
        for (int j = 0; j < 32; j++) {
            size_t e = w * 32 + (size_t)j;
            if (a->budget && key[e] && sel_key(key[e], e) >= thr) x |= 1u << j;
        }
        bits[w] ^= x;
        flipped += (uint32_t)__builtin_popcount(x);
    }
    ((uint32_t *)br_ptr(a->flips))[a->slot] = flipped;
    free(key);
    free(colsums);
    return BR_OK;
}
