/* The CPU backend: host memory, wall-clock timers, and the op table. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu_ops.h"

typedef struct cpu_state {
    double *marks; /* profiler timer marks, ms */
    size_t nmarks;
} cpu_state;

static br_status cpu_open(br_ctx *ctx, int index, char *err, size_t n) {
    if (index > 0) {
        if (err && n) snprintf(err, n, "the CPU backend has one device, not %d", index);
        return BR_E_ARG;
    }
    cpu_state *s = calloc(1, sizeof *s);
    if (!s) {
        if (err && n) snprintf(err, n, "out of host memory");
        return BR_E_NOMEM;
    }
    ctx->be_state = s;
    snprintf(ctx->device_desc, sizeof ctx->device_desc, "cpu");
    return BR_OK;
}

static void cpu_close(br_ctx *ctx) {
    cpu_state *s = ctx->be_state;
    if (s) free(s->marks);
    free(s);
    ctx->be_state = NULL;
}

static br_status cpu_alloc(br_ctx *ctx, size_t bytes, void **out) {
    /* 64-byte aligned for vector loads */
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) return br_fail(ctx, BR_E_NOMEM, "out of host memory allocating %zu bytes", bytes);
    *out = p;
    return BR_OK;
}

static void cpu_release(br_ctx *ctx, void *mem) {
    (void)ctx;
    free(mem);
}

static br_status cpu_upload(br_ctx *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    memmove(dst, src, bytes);
    return BR_OK;
}

static br_status cpu_download(br_ctx *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    memmove(dst, src, bytes);
    return BR_OK;
}

static br_status cpu_sync(br_ctx *ctx) {
    (void)ctx;
    return BR_OK;
}

static br_status cpu_timer_mark(br_ctx *ctx, size_t slot) {
    cpu_state *s = ctx->be_state;
    if (slot >= s->nmarks) {
        size_t n = slot + 1 > 2 * s->nmarks ? slot + 1 : 2 * s->nmarks;
        double *m = realloc(s->marks, n * sizeof *m);
        if (!m) return BR_E_NOMEM;
        s->marks = m;
        s->nmarks = n;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    s->marks[slot] = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
    return BR_OK;
}

static br_status cpu_timer_elapsed(br_ctx *ctx, size_t from, size_t to, double *ms) {
    cpu_state *s = ctx->be_state;
    if (from >= s->nmarks || to >= s->nmarks) return BR_E_ARG;
    *ms = s->marks[to] - s->marks[from];
    return BR_OK;
}

br_status br_cpu_fill(br_ctx *ctx, const br_op *op) {
    const br_fill_args *a = &op->u.fill;
    ctx->stats.launches++;
    if (a->buf->dtype == BR_F16) {
        uint16_t *p = (uint16_t *)br_ptr(a->buf) + a->off;
        for (size_t i = 0; i < a->count; i++)
            p[i] = (uint16_t)a->bits;
    } else {
        uint32_t *p = (uint32_t *)br_ptr(a->buf) + a->off;
        for (size_t i = 0; i < a->count; i++)
            p[i] = a->bits;
    }
    return BR_OK;
}

br_status br_cpu_copy(br_ctx *ctx, const br_op *op) {
    const br_copy_args *a = &op->u.copy;
    size_t es = br_dtype_size(a->dst->dtype);
    ctx->stats.launches++;
    memmove((char *)br_ptr(a->dst) + a->dst_off * es,
            (const char *)br_ptr(a->src) + a->src_off * es, a->count * es);
    return BR_OK;
}

static const br_backend cpu_backend = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_upload,
    .download = cpu_download,
    .sync = cpu_sync,
    .graph_launch = NULL,
    .graph_release = NULL,
    .timer_mark = cpu_timer_mark,
    .timer_elapsed = cpu_timer_elapsed,
    .ops =
        {
            [BR_OP_FILL] = br_cpu_fill,
            [BR_OP_COPY] = br_cpu_copy,
            [BR_OP_MM] = br_cpu_mm,
            [BR_OP_MM_BITS] = br_cpu_mm_bits,
            [BR_OP_CVT] = br_cpu_cvt,
            [BR_OP_CVT_COLS] = br_cpu_cvt_cols,
            [BR_OP_CVT_T] = br_cpu_cvt_t,
            [BR_OP_EXPAND] = br_cpu_expand,
            [BR_OP_COLSUM] = br_cpu_colsum,
            [BR_OP_COLSUM_FUSED] = br_cpu_colsum_fused,
            [BR_OP_SCALE_ACC] = br_cpu_scale_acc,
            [BR_OP_SCALE_ACC2] = br_cpu_scale_acc2,
            [BR_OP_F16_TO_F32] = br_cpu_f16_to_f32,
            [BR_OP_ADD] = br_cpu_add,
            [BR_OP_SPLIT_QG] = br_cpu_split_qg,
            [BR_OP_DENSE_FWD] = br_cpu_dense_fwd,
            [BR_OP_DENSE_BWD] = br_cpu_dense_bwd,
            [BR_OP_ADAM] = br_cpu_adam,
            [BR_OP_ADAM_CAT] = br_cpu_adam_cat,
            [BR_OP_SUMSQ] = br_cpu_sumsq,
            [BR_OP_SUMSQ_CAT] = br_cpu_sumsq_cat,
            [BR_OP_CVT_PAD] = br_cpu_cvt_pad,
            [BR_OP_STEP_CTRL] = br_cpu_step_ctrl,
            [BR_OP_SIGN_STEP] = br_cpu_sign_step,
            [BR_OP_EXPAND_SCALED] = br_cpu_expand_scaled,
            [BR_OP_SIGN_ROWDOT] = br_cpu_sign_rowdot,
            [BR_OP_CVT_BOTH] = br_cpu_cvt_both,
            [BR_OP_MM_TN] = br_cpu_mm_tn,
        },
};

const br_backend *br_cpu_backend(void) { return &cpu_backend; }
