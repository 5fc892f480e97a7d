/* Argument checking shared by every op front-end: one place decides what a bad
 * argument is and how the message reads ("br_cvt: dst: ..."). */
#ifndef BR_OPS_CHECK_H
#define BR_OPS_CHECK_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* `b` non-NULL, of ctx, of dtype dt, holding at least `need` elements. */
br_status br_check_buf(br_ctx *ctx, const char *fn, const char *arg, const br_buf *b, br_dtype dt,
                       size_t need);
/* Like br_check_buf, but NULL is allowed (returns BR_OK). */
br_status br_check_opt_buf(br_ctx *ctx, const char *fn, const char *arg, const br_buf *b,
                           br_dtype dt, size_t need);

/* *out = a·b, failing with BR_E_OVERFLOW if it exceeds BR_MAX_ELEMS. `what` names
 * the product in the message ("m·k"). */
br_status br_check_mul(br_ctx *ctx, const char *fn, const char *what, size_t a, size_t b,
                       size_t *out);
/* x ≥ 1 and x ≤ BR_MAX_ELEMS. */
br_status br_check_dim(br_ctx *ctx, const char *fn, const char *name, size_t x);
/* Whether elements [0, nx) of x and [0, ny) of y share memory, by address (wrapped
 * buffers over one tensor's memory are separate roots that may overlap; each span
 * is clamped to its buffer's elements, so separate allocations never do). NULL
 * overlaps nothing. */
int br_bufs_overlap(const br_buf *x, size_t nx, const br_buf *y, size_t ny);
/* *out = (count − 1)·stride + need: the elements of count pieces of need elements,
 * stride apart (BR_E_OVERFLOW past BR_MAX_ELEMS, naming stride_name). count ≥ 1. */
br_status br_check_span(br_ctx *ctx, const char *fn, const char *stride_name, size_t count,
                        size_t stride, size_t need, size_t *out);
/* Elements a vector of k spans when stored in groups of `group` at `stride` apart
 * (column c at (c / group)·stride + c % group; group 0: plain, k): BR_E_SHAPE unless
 * group divides k and stride ≥ group. */
br_status br_check_groups(br_ctx *ctx, const char *fn, size_t k, size_t group, size_t stride,
                          size_t *count);
/* BR_E_ARG ("fn: x overlaps y") when br_bufs_overlap(x, nx, y, ny). */
br_status br_check_apart(br_ctx *ctx, const char *fn, const char *x_name, const br_buf *x,
                         size_t nx, const char *y_name, const br_buf *y, size_t ny);
/* x is a finite float. */
br_status br_check_finite(br_ctx *ctx, const char *fn, const char *name, float x);

#ifdef __cplusplus
}
#endif

#endif
