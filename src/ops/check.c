/* Argument checks shared by every op front-end. */
#include <math.h>
#include <stdint.h>

#include "ops/check.h"

br_status br_check_buf(br_ctx *ctx, const char *fn, const char *arg, const br_buf *b, br_dtype dt,
                       size_t need) {
    if (!b) return br_fail(ctx, BR_E_ARG, "%s: %s is NULL", fn, arg);
    if (b->ctx != ctx) return br_fail(ctx, BR_E_ARG, "%s: %s belongs to another context", fn, arg);
    if (b->dtype != dt)
        return br_fail(ctx, BR_E_DTYPE, "%s: %s is a %s buffer, expected %s", fn, arg,
                       br_dtype_name(b->dtype), br_dtype_name(dt));
    if (b->count < need)
        return br_fail(ctx, BR_E_SIZE, "%s: %s holds %zu %s elements, the shapes need %zu", fn, arg,
                       b->count, br_dtype_name(dt), need);
    return BR_OK;
}

br_status br_check_opt_buf(br_ctx *ctx, const char *fn, const char *arg, const br_buf *b,
                           br_dtype dt, size_t need) {
    return b ? br_check_buf(ctx, fn, arg, b, dt, need) : BR_OK;
}

br_status br_check_mul(br_ctx *ctx, const char *fn, const char *what, size_t a, size_t b,
                       size_t *out) {
    if (a != 0 && b > BR_MAX_ELEMS / a)
        return br_fail(ctx, BR_E_OVERFLOW, "%s: %s = %zu·%zu exceeds %zu elements", fn, what, a, b,
                       (size_t)BR_MAX_ELEMS);
    *out = a * b;
    return BR_OK;
}

br_status br_check_dim(br_ctx *ctx, const char *fn, const char *name, size_t x) {
    if (x == 0) return br_fail(ctx, BR_E_SHAPE, "%s: %s is 0", fn, name);
    if (x > BR_MAX_ELEMS)
        return br_fail(ctx, BR_E_OVERFLOW, "%s: %s = %zu exceeds %zu", fn, name, x,
                       (size_t)BR_MAX_ELEMS);
    return BR_OK;
}

br_status br_check_finite(br_ctx *ctx, const char *fn, const char *name, float x) {
    if (!isfinite(x)) return br_fail(ctx, BR_E_NONFINITE, "%s: %s is not finite", fn, name);
    return BR_OK;
}

int br_bufs_overlap(const br_buf *x, size_t nx, const br_buf *y, size_t ny) {
    if (!x || !y) return 0;
    if (nx > x->count) nx = x->count;
    if (ny > y->count) ny = y->count;
    uintptr_t bx = (uintptr_t)br_ptr(x), by = (uintptr_t)br_ptr(y);
    uintptr_t ex = bx + nx * br_dtype_size(x->dtype), ey = by + ny * br_dtype_size(y->dtype);
    return bx < ey && by < ex;
}

br_status br_check_span(br_ctx *ctx, const char *fn, const char *stride_name, size_t count,
                        size_t stride, size_t need, size_t *out) {
    size_t lead = 0;
    BR_TRY(br_check_mul(ctx, fn, stride_name, count - 1, stride, &lead));
    if (need > BR_MAX_ELEMS - lead)
        return br_fail(ctx, BR_E_OVERFLOW, "%s: (%zu − 1)·%s + %zu exceeds %zu elements", fn, count,
                       stride_name, need, (size_t)BR_MAX_ELEMS);
    *out = lead + need;
    return BR_OK;
}

br_status br_check_groups(br_ctx *ctx, const char *fn, size_t k, size_t group, size_t stride,
                          size_t *count) {
    if (!group) {
        *count = k;
        return BR_OK;
    }
    if (k % group || stride < group)
        return br_fail(ctx, BR_E_SHAPE,
                       "%s: groups of %zu at stride %zu do not tile k = %zu (the group must "
                       "divide k, the stride be at least the group)",
                       fn, group, stride, k);
    return br_check_span(ctx, fn, "the groups' stride", k / group, stride, group, count);
}

br_status br_check_apart(br_ctx *ctx, const char *fn, const char *x_name, const br_buf *x,
                         size_t nx, const char *y_name, const br_buf *y, size_t ny) {
    if (br_bufs_overlap(x, nx, y, ny))
        return br_fail(ctx, BR_E_ARG, "%s: %s overlaps %s", fn, x_name, y_name);
    return BR_OK;
}
