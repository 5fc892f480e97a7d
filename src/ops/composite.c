/* Composites: short sequences of public ops (staging, GEMM, add), so that they run
 * on every backend and record into graphs like any op. Each checks its own shapes
 * first, so that a bad call fails before any op is issued and names the composite,
 * not the op inside it. */
#include "ops/check.h"
#include "ops/op.h"

/* A buffer one op of a composite writes must not share elements with one a later op
 * reads (act16 and plane, xt and dyt, tmp and acc). Inputs read only by the first op
 * (x, dy) may overlap the output: they are consumed before it is written. */
static br_status check_disjoint(br_ctx *ctx, const char *fn, const char *name_a, const br_buf *a,
                                const char *name_b, const br_buf *b) {
    if (br_bufs_overlap(a, a->count, b, b->count))
        return br_fail(ctx, BR_E_ARG, "%s: %s and %s overlap", fn, name_a, name_b);
    return BR_OK;
}

br_status br_plane_linear(br_ctx *ctx, const br_buf *plane, const br_buf *x, br_buf *act16,
                          br_buf *y, size_t ntok, size_t n, size_t k, float scale) {
    static const char fn[] = "br_plane_linear";
    BR_TRY(br_check_ctx(ctx));
    BR_TRY(br_check_dim(ctx, fn, "ntok", ntok));
    BR_TRY(br_check_dim(ctx, fn, "n", n));
    BR_TRY(br_check_dim(ctx, fn, "k", k));
    if (k % 32 != 0) return br_fail(ctx, BR_E_SHAPE, "%s: k = %zu is not a multiple of 32", fn, k);
    BR_TRY(br_check_finite(ctx, fn, "scale", scale));
    if (scale == 0.0f) return br_fail(ctx, BR_E_ARG, "%s: scale is 0", fn);
    float oscale = 1.0f / scale;
    BR_TRY(br_check_finite(ctx, fn, "1/scale", oscale));
    size_t x_need, act_need, y_need, plane_need;
    BR_TRY(br_check_mul(ctx, fn, "ntok·k", ntok, k, &x_need));
    BR_TRY(br_check_mul(ctx, fn, "pad_rows(ntok)·k", br_pad_rows(ntok), k, &act_need));
    BR_TRY(br_check_mul(ctx, fn, "ntok·n", ntok, n, &y_need));
    BR_TRY(br_check_mul(ctx, fn, "n·k", n, k, &plane_need));
    BR_TRY(br_check_buf(ctx, fn, "plane", plane, BR_F16, plane_need));
    BR_TRY(br_check_buf(ctx, fn, "x", x, BR_F32, x_need));
    BR_TRY(br_check_buf(ctx, fn, "act16", act16, BR_F16, act_need));
    BR_TRY(br_check_buf(ctx, fn, "y", y, BR_F32, y_need));
    BR_TRY(check_disjoint(ctx, fn, "act16", act16, "plane", plane));

    /* act16 = f16(x·scale) [pad_rows(ntok)][k]; y = act16·planeᵀ / scale */
    BR_TRY(br_cvt(ctx, x, NULL, act16, ntok, k, scale));
    br_gemm g = {.m = ntok, .n = n, .k = k, .oscale = oscale};
    return br_mm(ctx, act16, plane, y, g);
}

br_status br_weight_grad(br_ctx *ctx, const br_buf *x, const br_buf *dy, br_buf *xt, br_buf *dyt,
                         br_buf *dw, size_t ntok, size_t m, size_t k, float gscale) {
    static const char fn[] = "br_weight_grad";
    BR_TRY(br_check_ctx(ctx));
    BR_TRY(br_check_dim(ctx, fn, "ntok", ntok));
    BR_TRY(br_check_dim(ctx, fn, "m", m));
    BR_TRY(br_check_dim(ctx, fn, "k", k));
    BR_TRY(br_check_finite(ctx, fn, "gscale", gscale));
    if (gscale == 0.0f) return br_fail(ctx, BR_E_ARG, "%s: gscale is 0", fn);
    float oscale = 1.0f / gscale;
    BR_TRY(br_check_finite(ctx, fn, "1/gscale", oscale));
    size_t kpad = br_pad_tokens(ntok);
    size_t x_need, dy_need, xt_need, dyt_need, dw_need;
    BR_TRY(br_check_mul(ctx, fn, "ntok·k", ntok, k, &x_need));
    BR_TRY(br_check_mul(ctx, fn, "ntok·m", ntok, m, &dy_need));
    BR_TRY(br_check_mul(ctx, fn, "pad_rows(k)·pad_tokens(ntok)", br_pad_rows(k), kpad, &xt_need));
    BR_TRY(br_check_mul(ctx, fn, "pad_rows(m)·pad_tokens(ntok)", br_pad_rows(m), kpad, &dyt_need));
    BR_TRY(br_check_mul(ctx, fn, "m·k", m, k, &dw_need));
    BR_TRY(br_check_buf(ctx, fn, "x", x, BR_F32, x_need));
    BR_TRY(br_check_buf(ctx, fn, "dy", dy, BR_F32, dy_need));
    BR_TRY(br_check_buf(ctx, fn, "xt", xt, BR_F16, xt_need));
    BR_TRY(br_check_buf(ctx, fn, "dyt", dyt, BR_F16, dyt_need));
    BR_TRY(br_check_buf(ctx, fn, "dw", dw, BR_F32, dw_need));
    BR_TRY(check_disjoint(ctx, fn, "xt", xt, "dyt", dyt));

    /* xt = f16(x)ᵀ, dyt = f16(dy·gscale)ᵀ, both [rows][kpad] with zero token pads;
     * dw[m][k] = dyt·xtᵀ / gscale: the token axis is the GEMM's K */
    BR_TRY(br_cvt_t(ctx, x, NULL, xt, ntok, k, 1.0f));
    BR_TRY(br_cvt_t(ctx, dy, NULL, dyt, ntok, m, gscale));
    br_gemm g = {.m = m, .n = k, .k = kpad, .oscale = oscale};
    return br_mm(ctx, dyt, xt, dw, g);
}

br_status br_gram_acc(br_ctx *ctx, const br_buf *x, br_buf *xt, br_buf *acc, br_buf *tmp,
                      size_t ntok, size_t k) {
    static const char fn[] = "br_gram_acc";
    BR_TRY(br_check_ctx(ctx));
    BR_TRY(br_check_dim(ctx, fn, "ntok", ntok));
    BR_TRY(br_check_dim(ctx, fn, "k", k));
    size_t kpad = br_pad_tokens(ntok);
    size_t x_need, xt_need, kk_need;
    BR_TRY(br_check_mul(ctx, fn, "ntok·k", ntok, k, &x_need));
    BR_TRY(br_check_mul(ctx, fn, "pad_rows(k)·pad_tokens(ntok)", br_pad_rows(k), kpad, &xt_need));
    BR_TRY(br_check_mul(ctx, fn, "k·k", k, k, &kk_need));
    BR_TRY(br_check_buf(ctx, fn, "x", x, BR_F32, x_need));
    BR_TRY(br_check_buf(ctx, fn, "xt", xt, BR_F16, xt_need));
    BR_TRY(br_check_buf(ctx, fn, "acc", acc, BR_F32, kk_need));
    BR_TRY(br_check_buf(ctx, fn, "tmp", tmp, BR_F32, kk_need));
    BR_TRY(check_disjoint(ctx, fn, "acc", acc, "tmp", tmp));

    /* xt = f16(x)ᵀ [pad_rows(k)][kpad]; tmp[k][k] = xt·xtᵀ; acc += tmp */
    BR_TRY(br_cvt_t(ctx, x, NULL, xt, ntok, k, 1.0f));
    br_gemm g = {.m = k, .n = k, .k = kpad, .oscale = 1.0f};
    BR_TRY(br_mm(ctx, xt, xt, tmp, g));
    return br_add(ctx, acc, tmp, acc, kk_need);
}
