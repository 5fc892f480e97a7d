/* STUB: replaced by the real front-end. */
#include "ops/check.h"
#include "ops/op.h"

br_status br_colsum(br_ctx *ctx, const br_buf *a, const br_buf *b, const br_buf *f, br_colsum_term term, br_buf *out, size_t rows, size_t k, int accumulate) {
    (void)a;
    (void)b;
    (void)f;
    (void)term;
    (void)out;
    (void)rows;
    (void)k;
    (void)accumulate;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_colsum: not yet implemented");
}

br_status br_colsum_fused(br_ctx *ctx, const br_buf *a, const br_buf *b, br_buf *sum, size_t rows, size_t k, const br_fuse *fuse) {
    (void)a;
    (void)b;
    (void)sum;
    (void)rows;
    (void)k;
    (void)fuse;
    return br_fail(ctx, BR_E_UNSUPPORTED, "br_colsum_fused: not yet implemented");
}

