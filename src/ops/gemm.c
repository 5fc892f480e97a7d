/* STUB: replaced by the real front-end. */
#include "ops/check.h"
#include "ops/op.h"

br_status br_mm(br_ctx *ctx, const br_buf *act, const br_buf *plane, br_buf *out, br_gemm g) {
    (void)act;
    (void)plane;
    (void)out;
    (void)g;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_mm: not yet implemented");
}

br_status br_mm_bits(br_ctx *ctx, const br_buf *act, const br_buf *bits, br_bits_layout layout, br_buf *out, br_gemm g) {
    (void)act;
    (void)bits;
    (void)layout;
    (void)out;
    (void)g;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_mm_bits: not yet implemented");
}

