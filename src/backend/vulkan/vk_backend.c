/* The Vulkan backend: open and close, buffers and host transfers, timestamps for
 * the profiler, fill and copy, and the op table (every op kind; an op without an
 * entry would be refused by the front-end, BR_E_UNSUPPORTED naming it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/vulkan/vk_internal.h"

/* Bytes of the staging buffer: transfers larger than this go in pieces. */
#define STAGING_BYTES ((size_t)16 << 20)
/* Timestamp slots: as many as the profiler keeps pending (core/profile.c). */
#define TIMER_SLOTS 8192u

static void vk_close(br_ctx *ctx);

static br_status vk_open(br_ctx *ctx, int index, char *err, size_t n) {
    br_vk *s = calloc(1, sizeof *s);
    if (!s) {
        if (err && n) snprintf(err, n, "out of host memory");
        return BR_E_NOMEM;
    }
    br_status st = br_vk_open_device(s, index, err, n);
    if (st != BR_OK) {
        br_vk_close_device(s);
        free(s);
        return st;
    }
    ctx->be_state = s;
    /* the elementwise ops are the CPU backend's bits only where f32 subnormal results
     * are kept: a device that flushes them says so in its description */
    st = br_vk_probe_subnormals(ctx, &s->subnormals_kept);
    if (st != BR_OK) {
        if (err && n) snprintf(err, n, "%s", br_ctx_error(ctx));
        vk_close(ctx);
        return st;
    }
    const char *ftz = s->subnormals_kept ? ""
                      : s->denorm_preserve ? ", f32 subnormals flushed despite DenormPreserve"
                                           : ", f32 subnormals flushed, DenormPreserve not listed";
    char coop[40] = "";
    if (s->coop.usable)
        snprintf(coop, sizeof coop, ", coopmat %ux%ux%u", s->coop.m, s->coop.n, s->coop.k);
    snprintf(ctx->device_desc, sizeof ctx->device_desc, "vulkan:%d %.90s (%s, Vulkan %u.%u%s%s)",
             s->index, s->props.deviceName, br_vk_type_name(s->props.deviceType),
             VK_API_VERSION_MAJOR(s->props.apiVersion), VK_API_VERSION_MINOR(s->props.apiVersion),
             coop, ftz);
    return BR_OK;
}

static void vk_close(br_ctx *ctx) {
    br_vk *s = br_vk_of(ctx);
    if (!s) return;
    br_vk_flush(ctx);
    br_vk_free_buffer(s, &s->ws);
    br_vk_hostbuf_free(s, &s->args);
    br_vk_hostbuf_free(s, &s->staging);
    while (s->nallocs) { /* buffers the caller did not free */
        br_vk_alloc a = s->allocs[s->nallocs - 1];
        br_vk_free_buffer(s, &a);
    }
    free(s->allocs);
    br_vk_close_device(s);
    free(s);
    ctx->be_state = NULL;
}

static br_status vk_alloc(br_ctx *ctx, size_t bytes, void **out) {
    br_vk_alloc a;
    BR_TRY(br_vk_alloc_buffer(ctx, bytes, &a));
    *out = (void *)(uintptr_t)a.addr;
    return BR_OK;
}

static void vk_release(br_ctx *ctx, void *mem) {
    br_vk *s = br_vk_of(ctx);
    VkDeviceSize off;
    const br_vk_alloc *found = br_vk_find(s, (VkDeviceAddress)(uintptr_t)mem, &off);
    if (!found) return;
    /* recorded work may still use it: release returns nothing, so a failed flush
     * leaves its message on the context */
    if (s->recording) br_vk_flush(ctx);
    br_vk_alloc a = *found;
    br_vk_free_buffer(s, &a);
}

/* The buffer and offset of `bytes` at device address addr, all inside one allocation. */
static br_status locate(br_ctx *ctx, const void *addr, size_t bytes, VkBuffer *buf,
                        VkDeviceSize *off) {
    const br_vk_alloc *a = br_vk_find(br_vk_of(ctx), (VkDeviceAddress)(uintptr_t)addr, off);
    if (!a || bytes > a->bytes - *off)
        return br_fail(ctx, BR_E_ARG, "vulkan: %zu bytes at %p are not inside one allocation",
                       bytes, addr);
    *buf = a->buf;
    return BR_OK;
}

static br_status staging(br_ctx *ctx) {
    br_vk *s = br_vk_of(ctx);
    if (!s->staging.buf) BR_TRY(br_vk_hostbuf_new(ctx, STAGING_BYTES, &s->staging));
    return BR_OK;
}

static br_status record_copy(br_ctx *ctx, VkBuffer src, VkDeviceSize soff, VkBuffer dst,
                             VkDeviceSize doff, size_t bytes) {
    br_vk *s = br_vk_of(ctx);
    VkCommandBuffer cmd;
    BR_TRY(br_vk_cmd(ctx, &cmd));
    VkBufferCopy r = {.srcOffset = soff, .dstOffset = doff, .size = bytes};
    vkCmdCopyBuffer(cmd, src, dst, 1, &r);
    br_vk_barrier(s);
    s->recorded++;
    return BR_OK;
}

/* Recorded behind the issued ops: the piece goes through the staging buffer, which
 * is reused only after a submit. */
static br_status vk_upload(br_ctx *ctx, void *dst, const void *src, size_t bytes) {
    br_vk *s = br_vk_of(ctx);
    VkBuffer buf = VK_NULL_HANDLE;
    VkDeviceSize off;
    BR_TRY(locate(ctx, dst, bytes, &buf, &off));
    BR_TRY(staging(ctx));
    for (size_t done = 0; done < bytes;) {
        if (s->staging.used == s->staging.bytes) BR_TRY(br_vk_flush(ctx));
        size_t room = s->staging.bytes - s->staging.used;
        size_t len = bytes - done < room ? bytes - done : room;
        memcpy((char *)s->staging.map + s->staging.used, (const char *)src + done, len);
        BR_TRY(record_copy(ctx, s->staging.buf, s->staging.used, buf, off + done, len));
        s->staging.used += (len + 15) / 16 * 16;
        if (s->staging.used > s->staging.bytes) s->staging.used = s->staging.bytes;
        done += len;
    }
    return BR_OK;
}

static br_status vk_download(br_ctx *ctx, void *dst, const void *src, size_t bytes) {
    br_vk *s = br_vk_of(ctx);
    VkBuffer buf = VK_NULL_HANDLE;
    VkDeviceSize off;
    BR_TRY(locate(ctx, src, bytes, &buf, &off));
    BR_TRY(staging(ctx));
    for (size_t done = 0; done < bytes;) {
        BR_TRY(br_vk_flush(ctx)); /* the staging buffer whole, and the ops before done */
        size_t len = bytes - done < s->staging.bytes ? bytes - done : s->staging.bytes;
        BR_TRY(record_copy(ctx, buf, off + done, s->staging.buf, 0, len));
        BR_TRY(br_vk_flush(ctx));
        memcpy((char *)dst + done, s->staging.map, len);
        done += len;
    }
    return BR_OK;
}

static br_status vk_sync(br_ctx *ctx) { return br_vk_flush(ctx); }

/* Only this context's own device memory can be wrapped: a pointer is a device
 * address here, and the shaders would fault on anything else. */
static br_status vk_check_wrap(br_ctx *ctx, const void *ptr, size_t bytes) {
    VkDeviceSize off;
    const br_vk_alloc *a = br_vk_find(br_vk_of(ctx), (VkDeviceAddress)(uintptr_t)ptr, &off);
    if (!a || bytes > a->bytes - off)
        return br_fail(ctx, BR_E_ARG,
                       "br_buf_wrap: %zu bytes at %p are not memory of this Vulkan context (a "
                       "Vulkan context wraps only device addresses of its own buffers)",
                       bytes, ptr);
    return BR_OK;
}

static br_status vk_timer_mark(br_ctx *ctx, size_t slot) {
    br_vk *s = br_vk_of(ctx);
    if (slot >= TIMER_SLOTS)
        return br_fail(ctx, BR_E_ARG, "vulkan: timer slot %zu is past the %u the backend keeps",
                       slot, TIMER_SLOTS);
    if (!s->timers) {
        VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                    .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                    .queryCount = TIMER_SLOTS};
        BR_VK(ctx, vkCreateQueryPool(s->dev, &qi, NULL, &s->timers));
    }
    VkCommandBuffer cmd;
    BR_TRY(br_vk_cmd(ctx, &cmd));
    vkCmdResetQueryPool(cmd, s->timers, (uint32_t)slot, 1);
    vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, s->timers, (uint32_t)slot);
    s->recorded++;
    return BR_OK;
}

static br_status vk_timer_elapsed(br_ctx *ctx, size_t from, size_t to, double *ms) {
    br_vk *s = br_vk_of(ctx);
    if (!s->timers || from >= TIMER_SLOTS || to >= TIMER_SLOTS)
        return br_fail(ctx, BR_E_ARG, "vulkan: timer slots %zu, %zu were never marked", from, to);
    BR_TRY(br_vk_flush(ctx));
    uint64_t t[2];
    BR_VK(ctx,
          vkGetQueryPoolResults(s->dev, s->timers, (uint32_t)from, 1, sizeof t[0], &t[0],
                                sizeof t[0], VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
    BR_VK(ctx,
          vkGetQueryPoolResults(s->dev, s->timers, (uint32_t)to, 1, sizeof t[1], &t[1], sizeof t[1],
                                VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
    *ms = (double)(int64_t)(t[1] - t[0]) * (double)s->props.limits.timestampPeriod * 1e-6;
    return BR_OK;
}

/* ---------------------------------------------------------------- fill, copy */

typedef struct fill_args {
    uint64_t dst;
    uint32_t count, bits;
} fill_args;

br_status br_vk_fill(br_ctx *ctx, const br_op *op) {
    const br_fill_args *a = &op->u.fill;
    size_t es = br_dtype_size(a->buf->dtype);
    VkDeviceAddress base = br_vk_addr(a->buf) + a->off * es;
    /* pieces the shader indexes with 32-bit ints */
    const size_t piece = (size_t)1 << 30;
    for (size_t done = 0; done < a->count; done += piece) {
        size_t len = a->count - done < piece ? a->count - done : piece;
        fill_args *h;
        VkDeviceAddress args;
        BR_TRY(br_vk_args(ctx, sizeof *h, (void **)&h, &args));
        *h = (fill_args){.dst = base + done * es, .count = (uint32_t)len, .bits = a->bits};
        BR_TRY(br_vk_dispatch(ctx, es == 2 ? BR_VK_SH_fill16 : BR_VK_SH_fill32, args,
                              br_vk_groups(len), 1));
    }
    return BR_OK;
}

br_status br_vk_copy(br_ctx *ctx, const br_op *op) {
    const br_copy_args *a = &op->u.copy;
    size_t es = br_dtype_size(a->dst->dtype), bytes = a->count * es;
    VkBuffer sb = VK_NULL_HANDLE, db = VK_NULL_HANDLE;
    VkDeviceSize so, dof;
    BR_TRY(locate(ctx, (const char *)br_ptr(a->src) + a->src_off * es, bytes, &sb, &so));
    BR_TRY(locate(ctx, (char *)br_ptr(a->dst) + a->dst_off * es, bytes, &db, &dof));
    ctx->stats.launches++;
    if (sb != db || so + bytes <= dof || dof + bytes <= so)
        return record_copy(ctx, sb, so, db, dof, bytes);
    /* overlapping ranges of one buffer: through the workspace */
    VkDeviceAddress ws;
    BR_TRY(br_vk_workspace(ctx, bytes, &ws));
    VkBuffer wb = VK_NULL_HANDLE;
    VkDeviceSize wo;
    BR_TRY(locate(ctx, (void *)(uintptr_t)ws, bytes, &wb, &wo));
    BR_TRY(record_copy(ctx, sb, so, wb, wo, bytes));
    return record_copy(ctx, wb, wo, db, dof, bytes);
}

static const br_backend vulkan_backend = {
    .name = "vulkan",
    .open = vk_open,
    .close = vk_close,
    .alloc = vk_alloc,
    .release = vk_release,
    .upload = vk_upload,
    .download = vk_download,
    .sync = vk_sync,
    .graph_launch = NULL,
    .graph_release = NULL,
    .timer_mark = vk_timer_mark,
    .timer_elapsed = vk_timer_elapsed,
    .check_wrap = vk_check_wrap,
    .ops =
        {
            [BR_OP_FILL] = br_vk_fill,
            [BR_OP_COPY] = br_vk_copy,
            [BR_OP_MM] = br_vk_mm,
            [BR_OP_MM_BITS] = br_vk_mm_bits,
            [BR_OP_MM_TN] = br_vk_mm_tn,
            [BR_OP_CVT] = br_vk_cvt,
            [BR_OP_CVT_COLS] = br_vk_cvt_cols,
            [BR_OP_CVT_T] = br_vk_cvt_t,
            [BR_OP_EXPAND] = br_vk_expand,
            [BR_OP_COLSUM] = br_vk_colsum,
            [BR_OP_COLSUM_FUSED] = br_vk_colsum_fused,
            [BR_OP_SCALE_ACC] = br_vk_scale_acc,
            [BR_OP_SCALE_ACC2] = br_vk_scale_acc2,
            [BR_OP_F16_TO_F32] = br_vk_f16_to_f32,
            [BR_OP_ADD] = br_vk_add,
            [BR_OP_SPLIT_QG] = br_vk_split_qg,
            [BR_OP_CVT_PAD] = br_vk_cvt_pad,
            [BR_OP_CVT_BOTH] = br_vk_cvt_both,
            [BR_OP_EXPAND_SCALED] = br_vk_expand_scaled,
            [BR_OP_SIGN_ROWDOT] = br_vk_sign_rowdot,
            [BR_OP_DENSE_FWD] = br_vk_dense_fwd,
            [BR_OP_DENSE_BWD] = br_vk_dense_bwd,
            [BR_OP_ADAM] = br_vk_adam,
            [BR_OP_ADAM_CAT] = br_vk_adam,
            [BR_OP_SUMSQ] = br_vk_sumsq,
            [BR_OP_SUMSQ_CAT] = br_vk_sumsq,
            [BR_OP_STEP_CTRL] = br_vk_step_ctrl,
            [BR_OP_SIGN_STEP] = br_vk_sign_step,
        },
};

const br_backend *br_vulkan_backend(void) { return &vulkan_backend; }
