/* STUB: replaced by the real front-end. */
#include "ops/check.h"
#include "ops/op.h"

br_status br_cvt(br_ctx *ctx, const br_buf *src, const br_buf *col_f, br_buf *dst, size_t m, size_t k, float scale) {
    (void)src;
    (void)col_f;
    (void)dst;
    (void)m;
    (void)k;
    (void)scale;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_cvt: not yet implemented");
}

br_status br_cvt_multi(br_ctx *ctx, const br_buf *src, size_t n_out, const br_buf *const cols[], br_buf *const dsts[], size_t m, size_t k, float scale) {
    (void)src;
    (void)n_out;
    (void)cols;
    (void)dsts;
    (void)m;
    (void)k;
    (void)scale;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_cvt_multi: not yet implemented");
}

br_status br_cvt_cols(br_ctx *ctx, const br_buf *src, size_t ld_src, size_t col0, br_buf *dst, size_t m, size_t k, float scale) {
    (void)src;
    (void)ld_src;
    (void)col0;
    (void)dst;
    (void)m;
    (void)k;
    (void)scale;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_cvt_cols: not yet implemented");
}

br_status br_cvt_t(br_ctx *ctx, const br_buf *src, const br_buf *col_f, br_buf *dst, size_t ntok, size_t k, float scale) {
    (void)src;
    (void)col_f;
    (void)dst;
    (void)ntok;
    (void)k;
    (void)scale;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_cvt_t: not yet implemented");
}

br_status br_expand(br_ctx *ctx, const br_buf *bits, size_t rows, size_t r, br_buf *plane, br_buf *plane_t) {
    (void)bits;
    (void)rows;
    (void)r;
    (void)plane;
    (void)plane_t;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_expand: not yet implemented");
}

