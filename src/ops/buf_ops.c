/* Front-ends of the buffer ops fill and copy (ops so that graphs record them). */
#include "ops/check.h"
#include "ops/op.h"

br_status br_buf_fill(br_buf *buf, size_t offset, size_t count, uint32_t bits) {
    if (!buf) return BR_E_ARG;
    br_ctx *ctx = buf->ctx;
    if (offset > buf->count || count > buf->count - offset)
        return br_fail(ctx, BR_E_SIZE,
                       "br_buf_fill: elements [%zu, %zu+%zu) are outside a buffer of %zu", offset,
                       offset, count, buf->count);
    if (!count) return BR_OK;
    br_op op = {.kind = BR_OP_FILL};
    op.u.fill = (br_fill_args){.buf = buf, .off = offset, .count = count, .bits = bits};
    return br_submit(ctx, &op, 0);
}

br_status br_buf_copy(br_buf *dst, size_t dst_off, const br_buf *src, size_t src_off,
                      size_t count) {
    if (!dst) return BR_E_ARG;
    br_ctx *ctx = dst->ctx;
    if (!src) return br_fail(ctx, BR_E_ARG, "br_buf_copy: src is NULL");
    if (src->ctx != ctx)
        return br_fail(ctx, BR_E_ARG, "br_buf_copy: src belongs to another context");
    if (src->dtype != dst->dtype)
        return br_fail(ctx, BR_E_DTYPE, "br_buf_copy: src is %s, dst is %s",
                       br_dtype_name(src->dtype), br_dtype_name(dst->dtype));
    if (dst_off > dst->count || count > dst->count - dst_off)
        return br_fail(ctx, BR_E_SIZE,
                       "br_buf_copy: dst elements [%zu, %zu+%zu) are outside a buffer of %zu",
                       dst_off, dst_off, count, dst->count);
    if (src_off > src->count || count > src->count - src_off)
        return br_fail(ctx, BR_E_SIZE,
                       "br_buf_copy: src elements [%zu, %zu+%zu) are outside a buffer of %zu",
                       src_off, src_off, count, src->count);
    if (!count) return BR_OK;
    br_op op = {.kind = BR_OP_COPY};
    op.u.copy = (br_copy_args){
        .dst = dst, .dst_off = dst_off, .src = src, .src_off = src_off, .count = count};
    /* overlapping ranges move through the backend's workspace (memmove semantics) */
    br_buf s = *src, d = *dst;
    s.offset += src_off;
    d.offset += dst_off;
    size_t ws = br_bufs_overlap(&d, count, &s, count) ? count * br_dtype_size(dst->dtype) : 0;
    return br_submit(ctx, &op, ws);
}
