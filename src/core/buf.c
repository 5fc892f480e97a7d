/* Buffers: allocation, views, host transfers. Fill and copy are ops (ops/buf_ops.c)
 * so that graphs can record them. */
#include <stdint.h>
#include <stdlib.h>

#include "core/backend.h"
#include "core/internal.h"

size_t br_dtype_size(br_dtype dt) { return dt == BR_F16 ? 2 : 4; }

const char *br_dtype_name(br_dtype dt) {
    switch (dt) {
    case BR_F32: return "f32";
    case BR_F16: return "f16";
    case BR_U32: return "u32";
    }
    return "?";
}

br_status br_buf_new(br_ctx *ctx, br_dtype dtype, size_t count, br_buf **out) {
    BR_TRY(br_check_ctx(ctx));
    if (!out) return br_fail(ctx, BR_E_ARG, "br_buf_new: out is NULL");
    *out = NULL;
    if (dtype != BR_F32 && dtype != BR_F16 && dtype != BR_U32)
        return br_fail(ctx, BR_E_DTYPE, "br_buf_new: unknown dtype %d", (int)dtype);
    if (count == 0) return br_fail(ctx, BR_E_ARG, "br_buf_new: count is 0");
    if (count > ((size_t)1 << 40))
        return br_fail(ctx, BR_E_OVERFLOW, "br_buf_new: %zu elements is more than 2^40", count);
    br_buf *b = calloc(1, sizeof *b);
    if (!b) return br_fail(ctx, BR_E_NOMEM, "br_buf_new: out of host memory");
    size_t bytes = count * br_dtype_size(dtype);
    bytes = (bytes + 15) / 16 * 16; /* whole 16-byte vectors for the kernels */
    br_status st = ctx->be->alloc(ctx, bytes, &b->mem);
    if (st != BR_OK) {
        free(b);
        return st;
    }
    b->ctx = ctx;
    b->dtype = dtype;
    b->count = count;
    ctx->stats.allocs++;
    *out = b;
    return BR_OK;
}

br_status br_buf_wrap(br_ctx *ctx, br_dtype dtype, void *ptr, size_t count, br_buf **out) {
    BR_TRY(br_check_ctx(ctx));
    if (!out) return br_fail(ctx, BR_E_ARG, "br_buf_wrap: out is NULL");
    *out = NULL;
    if (dtype != BR_F32 && dtype != BR_F16 && dtype != BR_U32)
        return br_fail(ctx, BR_E_DTYPE, "br_buf_wrap: unknown dtype %d", (int)dtype);
    if (!ptr) return br_fail(ctx, BR_E_ARG, "br_buf_wrap: ptr is NULL");
    if (count == 0) return br_fail(ctx, BR_E_ARG, "br_buf_wrap: count is 0");
    if (count > ((size_t)1 << 40))
        return br_fail(ctx, BR_E_OVERFLOW, "br_buf_wrap: %zu elements is more than 2^40", count);
    /* what br_buf_new's memory gives the kernels (their vector paths check again per
     * op, but an unaligned base would send every op to the slow ones) */
    if ((uintptr_t)ptr % BR_WRAP_ALIGN)
        return br_fail(ctx, BR_E_ARG,
                       "br_buf_wrap: ptr %p is not aligned to %d bytes (it is %zu bytes past a "
                       "multiple of %d)",
                       ptr, BR_WRAP_ALIGN, (size_t)((uintptr_t)ptr % BR_WRAP_ALIGN), BR_WRAP_ALIGN);
    if (ctx->be->check_wrap) BR_TRY(ctx->be->check_wrap(ctx, ptr, count * br_dtype_size(dtype)));
    br_buf *b = calloc(1, sizeof *b);
    if (!b) return br_fail(ctx, BR_E_NOMEM, "br_buf_wrap: out of host memory");
    b->ctx = ctx;
    b->dtype = dtype;
    b->count = count;
    b->mem = ptr;
    b->borrowed = 1;
    *out = b;
    return BR_OK;
}

br_status br_buf_view(br_buf *parent, size_t offset, size_t count, br_buf **out) {
    if (!parent) return BR_E_ARG;
    br_ctx *ctx = parent->ctx;
    if (!out) return br_fail(ctx, BR_E_ARG, "br_buf_view: out is NULL");
    *out = NULL;
    if (count == 0 || offset > parent->count || count > parent->count - offset)
        return br_fail(ctx, BR_E_SIZE,
                       "br_buf_view: elements [%zu, %zu+%zu) are outside a buffer of %zu", offset,
                       offset, count, parent->count);
    br_buf *b = calloc(1, sizeof *b);
    if (!b) return br_fail(ctx, BR_E_NOMEM, "br_buf_view: out of host memory");
    b->ctx = ctx;
    b->dtype = parent->dtype;
    b->count = count;
    b->offset = parent->offset + offset;
    b->mem = parent->mem;
    b->parent = parent->parent ? parent->parent : parent;
    *out = b;
    return BR_OK;
}

void br_buf_free(br_buf *b) {
    if (!b) return;
    if (!b->parent && !b->borrowed) b->ctx->be->release(b->ctx, b->mem);
    free(b);
}

size_t br_buf_count(const br_buf *b) { return b ? b->count : 0; }
br_dtype br_buf_dtype(const br_buf *b) { return b ? b->dtype : BR_F32; }

static br_status check_range(const br_buf *b, const char *fn, size_t offset, size_t count) {
    if (offset > b->count || count > b->count - offset)
        return br_fail(b->ctx, BR_E_SIZE, "%s: elements [%zu, %zu+%zu) are outside a buffer of %zu",
                       fn, offset, offset, count, b->count);
    if (b->ctx->rec)
        return br_fail(b->ctx, BR_E_STATE, "%s: host transfers cannot be recorded in a graph", fn);
    return BR_OK;
}

br_status br_buf_upload(br_buf *b, size_t offset, const void *src, size_t count) {
    if (!b) return BR_E_ARG;
    if (!src && count) return br_fail(b->ctx, BR_E_ARG, "br_buf_upload: src is NULL");
    BR_TRY(check_range(b, "br_buf_upload", offset, count));
    if (!count) return BR_OK;
    size_t es = br_dtype_size(b->dtype);
    b->ctx->stats.uploads++;
    b->ctx->stats.upload_bytes += count * es;
    return b->ctx->be->upload(b->ctx, (char *)br_ptr(b) + offset * es, src, count * es);
}

br_status br_buf_download(const br_buf *b, size_t offset, void *dst, size_t count) {
    if (!b) return BR_E_ARG;
    if (!dst && count) return br_fail(b->ctx, BR_E_ARG, "br_buf_download: dst is NULL");
    BR_TRY(check_range(b, "br_buf_download", offset, count));
    if (!count) return BR_OK;
    size_t es = br_dtype_size(b->dtype);
    b->ctx->stats.downloads++;
    return b->ctx->be->download(b->ctx, dst, (const char *)br_ptr(b) + offset * es, count * es);
}
