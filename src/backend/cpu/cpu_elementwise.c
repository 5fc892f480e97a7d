/* Elementwise ops on the CPU. Each element is computed on its own, every product
 * rounded to f32 before it is added (the build has no contraction), so results do
 * not depend on the thread count and match the CUDA kernels bit for bit. */
#include "backend/cpu/cpu_ops.h"

br_status br_cpu_scale_acc(br_ctx *ctx, const br_op *op) {
    const br_scale_acc_args *a = &op->u.scale_acc;
    const float *in = br_ptr(a->a);    /* [m][k] */
    const float *col = br_ptr(a->col); /* [k] */
    float *out = br_ptr(a->out);       /* [m][k] */
    size_t m = a->m, k = a->k;
    ctx->stats.launches++;
    OMP("omp parallel for schedule(static) if (m * k >= PARALLEL_MIN_ELEMS)")
    for (size_t row = 0; row < m; row++) {
        const float *x = in + row * k;
        float *y = out + row * k;
        if (a->accumulate) {
            for (size_t c = 0; c < k; c++) {
                float v = x[c] * col[c];
                y[c] = y[c] + v;
            }
        } else {
            for (size_t c = 0; c < k; c++)
                y[c] = x[c] * col[c];
        }
    }
    return BR_OK;
}

br_status br_cpu_scale_acc2(br_ctx *ctx, const br_op *op) {
    const br_scale_acc2_args *a = &op->u.scale_acc2;
    const float *a0 = br_ptr(a->a0), *a1 = br_ptr(a->a1);         /* [m][k] */
    const float *col0 = br_ptr(a->col0), *col1 = br_ptr(a->col1); /* [k] */
    float *out = br_ptr(a->out);                                  /* [m][k] */
    size_t m = a->m, k = a->k;
    ctx->stats.launches++;
    OMP("omp parallel for schedule(static) if (m * k >= PARALLEL_MIN_ELEMS)")
    for (size_t row = 0; row < m; row++) {
        size_t o = row * k;
        for (size_t c = 0; c < k; c++) {
            float v0 = a0[o + c] * col0[c];
            float v1 = a1[o + c] * col1[c];
            out[o + c] = v0 + v1;
        }
    }
    return BR_OK;
}

br_status br_cpu_f16_to_f32(br_ctx *ctx, const br_op *op) {
    const br_unary_args *a = &op->u.unary;
    const uint16_t *src = br_ptr(a->a);
    float *dst = br_ptr(a->out);
    size_t n = a->n;
    ctx->stats.launches++;
    /* blocks of 4096 (F16C 8 at a time within each), in parallel when large */
    size_t nb = (n + 4095) / 4096;
    OMP("omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)")
    for (size_t b = 0; b < nb; b++) {
        size_t i0 = b * 4096, len = n - i0 < 4096 ? n - i0 : 4096;
        br_half_to_float_n(src + i0, dst + i0, len);
    }
    return BR_OK;
}

br_status br_cpu_add(br_ctx *ctx, const br_op *op) {
    const br_unary_args *a = &op->u.unary;
    const float *x = br_ptr(a->a), *y = br_ptr(a->b);
    float *out = br_ptr(a->out); /* may be x or y: element i reads only element i */
    size_t n = a->n;
    ctx->stats.launches++;
    OMP("omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)")
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] + y[i];
    return BR_OK;
}

br_status br_cpu_split_qg(br_ctx *ctx, const br_op *op) {
    const br_split_qg_args *a = &op->u.split_qg;
    float *qg = br_ptr(a->qg);                 /* [m][heads][2·hd]: per head q then gate */
    float *q = br_ptr(a->q);                   /* [m][heads·hd] */
    float *gate = br_ptr(a->gate);             /* [m][heads·hd] */
    size_t hd = a->hd, rows = a->m * a->heads; /* one (token, head) pair per row */
    ctx->stats.launches++;
    OMP("omp parallel for schedule(static) if (rows * hd >= PARALLEL_MIN_ELEMS)")
    for (size_t row = 0; row < rows; row++) {
        float *pair = qg + row * 2 * hd, *qr = q + row * hd, *gr = gate + row * hd;
        for (size_t d = 0; d < hd; d++) {
            if (a->merge) {
                pair[d] = qr[d];
                pair[hd + d] = gr[d];
            } else {
                qr[d] = pair[d];
                gr[d] = pair[hd + d];
            }
        }
    }
    return BR_OK;
}
