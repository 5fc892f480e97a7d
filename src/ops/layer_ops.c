/* Front-ends of the reformulated layer's internal ops: expand_scaled (one path or
 * several, one expand or two), sign_rowdot (one path or several), cvt_both. Each
 * checks every argument, then hands one descriptor to br_submit. */
#include "ops/layer_ops.h"

#include <stdint.h>

#include "ops/check.h"

/* The elements of a buffer holding every path: br_check_span over the paths; the
 * stride of a NULL buffer is ignored. */
static br_status span(br_ctx *ctx, const char *fn, const char *stride_name, const br_buf *b,
                      size_t paths, size_t stride, size_t need, size_t *out) {
    return br_check_span(ctx, fn, stride_name, b ? paths : 1, stride, need, out);
}

/* An output's stride must keep the paths apart: stride ≥ one path's elements. */
static br_status check_out_stride(br_ctx *ctx, const char *fn, const char *name, const br_buf *b,
                                  size_t paths, size_t stride, const char *need_name, size_t need) {
    if (b && paths > 1 && stride < need)
        return br_fail(ctx, BR_E_SHAPE, "%s: %s = %zu is less than %s = %zu: the paths overlap", fn,
                       name, stride, need_name, need);
    return BR_OK;
}

/* What an expand's plane, bits and rowscale span (elements), for "apart". */
typedef struct expand_spans {
    size_t plane, bits, scale;
} expand_spans;

/* Both orientations: the checks, then the op's arguments. by_rows: plane
 * [rows][ld] with (rows − 1)·ld + paths·r elements (ld ≥ paths·r); else plane_t
 * [paths·r][ld] (ld ≥ rows). */
static br_status expand_args_of(br_ctx *ctx, const char *fn, const br_buf *bits, size_t bits_stride,
                                size_t rows, size_t r, const br_buf *rowscale, size_t scale_stride,
                                float scale, br_buf *plane, size_t ld, size_t paths, int by_rows,
                                br_expand_scaled_args *out, expand_spans *sp) {
    BR_TRY(br_check_dim(ctx, fn, "rows", rows));
    BR_TRY(br_check_dim(ctx, fn, "r", r));
    BR_TRY(br_check_dim(ctx, fn, "paths", paths));
    if (r % 32) return br_fail(ctx, BR_E_SHAPE, "%s: r = %zu is not a multiple of 32", fn, r);
    size_t pr; /* the plane's rank extent: paths·r */
    BR_TRY(br_check_mul(ctx, fn, "paths·r", paths, r, &pr));
    size_t need = by_rows ? pr : rows;
    if (ld < need || ld % 8)
        return br_fail(ctx, BR_E_SHAPE, "%s: ld = %zu must be ≥ %s = %zu and a multiple of 8", fn,
                       ld, by_rows ? (paths > 1 ? "paths·r" : "r") : "rows", need);
    size_t n_bits, n_plane;
    BR_TRY(br_check_mul(ctx, fn, "rows·r/32", rows, r / 32, &n_bits));
    if (by_rows) {
        BR_TRY(br_check_mul(ctx, fn, "(rows−1)·ld", rows - 1, ld, &n_plane));
        if (n_plane > SIZE_MAX - pr)
            return br_fail(ctx, BR_E_SIZE, "%s: (rows−1)·ld + paths·r overflows", fn);
        n_plane += pr;
    } else {
        BR_TRY(br_check_mul(ctx, fn, paths > 1 ? "paths·r·ld" : "r·ld", pr, ld, &n_plane));
    }
    BR_TRY(br_check_finite(ctx, fn, "scale", scale));
    size_t s_bits, s_scale;
    BR_TRY(span(ctx, fn, "bits_stride", bits, paths, bits_stride, n_bits, &s_bits));
    BR_TRY(span(ctx, fn, "scale_stride", rowscale, paths, scale_stride, rows, &s_scale));
    BR_TRY(br_check_buf(ctx, fn, "bits", bits, BR_U32, s_bits));
    BR_TRY(br_check_buf(ctx, fn, "rowscale", rowscale, BR_F32, s_scale));
    BR_TRY(br_check_buf(ctx, fn, by_rows ? "plane" : "plane_t", plane, BR_F16, n_plane));
    *out = (br_expand_scaled_args){.bits = bits,
                                   .rowscale = rowscale,
                                   .plane = plane,
                                   .rows = rows,
                                   .r = r,
                                   .ld = ld,
                                   .paths = paths,
                                   .bits_stride = paths > 1 ? bits_stride : 0,
                                   .scale_stride = paths > 1 ? scale_stride : 0,
                                   .scale = scale,
                                   .by_rows = by_rows};
    *sp = (expand_spans){n_plane, s_bits, s_scale};
    return BR_OK;
}

static br_status expand_scaled(br_ctx *ctx, const char *fn, const br_buf *bits, size_t bits_stride,
                               size_t rows, size_t r, const br_buf *rowscale, size_t scale_stride,
                               float scale, br_buf *plane, size_t ld, size_t paths, int by_rows) {
    BR_TRY(br_check_ctx(ctx));
    br_op op = {.kind = BR_OP_EXPAND_SCALED};
    expand_spans sp;
    BR_TRY(expand_args_of(ctx, fn, bits, bits_stride, rows, r, rowscale, scale_stride, scale, plane,
                          ld, paths, by_rows, &op.u.expand_scaled, &sp));
    return br_submit(ctx, &op, 0);
}

br_status br_expand_scaled(br_ctx *ctx, const br_buf *bits, size_t rows, size_t r,
                           const br_buf *rowscale, float scale, br_buf *plane_t, size_t ld) {
    return expand_scaled(ctx, "br_expand_scaled", bits, 0, rows, r, rowscale, 0, scale, plane_t, ld,
                         1, 0);
}

br_status br_expand_scaled_rows(br_ctx *ctx, const br_buf *bits, size_t rows, size_t r,
                                const br_buf *rowscale, float scale, br_buf *plane, size_t ld) {
    return expand_scaled(ctx, "br_expand_scaled_rows", bits, 0, rows, r, rowscale, 0, scale, plane,
                         ld, 1, 1);
}

br_status br_expand_scaled_paths(br_ctx *ctx, const br_buf *bits, size_t bits_stride, size_t rows,
                                 size_t r, const br_buf *rowscale, size_t scale_stride, float scale,
                                 br_buf *plane_t, size_t ld, size_t paths) {
    return expand_scaled(ctx, "br_expand_scaled_paths", bits, bits_stride, rows, r, rowscale,
                         scale_stride, scale, plane_t, ld, paths, 0);
}

br_status br_expand_scaled_rows_paths(br_ctx *ctx, const br_buf *bits, size_t bits_stride,
                                      size_t rows, size_t r, const br_buf *rowscale,
                                      size_t scale_stride, float scale, br_buf *plane, size_t ld,
                                      size_t paths) {
    return expand_scaled(ctx, "br_expand_scaled_rows_paths", bits, bits_stride, rows, r, rowscale,
                         scale_stride, scale, plane, ld, paths, 1);
}

br_status br_expand_scaled2(br_ctx *ctx, const br_expand_job job[2]) {
    static const char fn[] = "br_expand_scaled2";
    static const char *const job_fn[2] = {"br_expand_scaled2 (job 0)", "br_expand_scaled2 (job 1)"};
    BR_TRY(br_check_ctx(ctx));
    if (!job) return br_fail(ctx, BR_E_ARG, "%s: job is NULL", fn);
    br_op ops[2] = {{.kind = BR_OP_EXPAND_SCALED}, {.kind = BR_OP_EXPAND_SCALED}};
    br_expand_scaled_args e[2];
    expand_spans sp[2];
    for (int i = 0; i < 2; i++) {
        const br_expand_job *j = &job[i];
        BR_TRY(expand_args_of(ctx, job_fn[i], j->bits, j->bits_stride, j->rows, j->r, j->rowscale,
                              j->scale_stride, j->scale, j->plane, j->ld, j->paths, j->by_rows != 0,
                              &e[i], &sp[i]));
        ops[i].u.expand_scaled = e[i];
    }
    /* the two run at once: a plane over anything either job reads or the other
     * writes is a race (the dtypes keep a plane off the inputs today; a view of
     * another dtype would not) */
    static const char *const plane_name[2] = {"job 0's plane", "job 1's plane"};
    static const char *const bits_name[2] = {"job 0's bits", "job 1's bits"};
    static const char *const scale_name[2] = {"job 0's rowscale", "job 1's rowscale"};
    BR_TRY(br_check_apart(ctx, fn, plane_name[0], e[0].plane, sp[0].plane, plane_name[1],
                          e[1].plane, sp[1].plane));
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++) {
            BR_TRY(br_check_apart(ctx, fn, plane_name[i], e[i].plane, sp[i].plane, bits_name[k],
                                  e[k].bits, sp[k].bits));
            BR_TRY(br_check_apart(ctx, fn, plane_name[i], e[i].plane, sp[i].plane, scale_name[k],
                                  e[k].rowscale, sp[k].scale));
        }
    return br_submit_unit(ctx, ops, 2, "expand_scaled2", 0, 0);
}

br_status br_sign_rowdot_args_of(br_ctx *ctx, const char *fn, const br_buf *mat, size_t ldm,
                                 size_t col0, const br_buf *bits, size_t bits_stride,
                                 const br_buf *rowscale, size_t scale_stride, br_buf *grad,
                                 size_t grad_stride, br_buf *dsum, size_t dsum_stride, size_t rows,
                                 size_t r, size_t paths, int accumulate, br_sign_rowdot_args *out) {
    BR_TRY(br_check_ctx(ctx));
    if (!grad && !dsum) return br_fail(ctx, BR_E_ARG, "%s: grad and dsum are both NULL", fn);
    BR_TRY(br_check_dim(ctx, fn, "rows", rows));
    BR_TRY(br_check_dim(ctx, fn, "r", r));
    BR_TRY(br_check_dim(ctx, fn, "paths", paths));
    if (r % 32) return br_fail(ctx, BR_E_SHAPE, "%s: r = %zu is not a multiple of 32", fn, r);
    BR_TRY(br_check_dim(ctx, fn, "ldm", ldm));
    size_t pr; /* the columns of every path: paths·r */
    BR_TRY(br_check_mul(ctx, fn, "paths·r", paths, r, &pr));
    if (col0 > ldm || pr > ldm - col0)
        return br_fail(ctx, BR_E_SHAPE, "%s: columns [%zu, %zu+%zu) exceed ldm = %zu", fn, col0,
                       col0, pr, ldm);
    size_t n_mat, n_grad, n_bits;
    BR_TRY(br_check_mul(ctx, fn, "rows·ldm", rows, ldm, &n_mat));
    BR_TRY(br_check_mul(ctx, fn, "rows·r", rows, r, &n_grad));
    n_bits = n_grad / 32;
    BR_TRY(check_out_stride(ctx, fn, "grad_stride", grad, paths, grad_stride, "rows·r", n_grad));
    BR_TRY(check_out_stride(ctx, fn, "dsum_stride", dsum, paths, dsum_stride, "rows", rows));
    /* every buffer's span over the paths: its checks, and "apart" on whole spans */
    size_t s_bits, s_scale, s_grad, s_dsum;
    BR_TRY(span(ctx, fn, "bits_stride", bits, paths, bits_stride, n_bits, &s_bits));
    BR_TRY(span(ctx, fn, "scale_stride", rowscale, paths, scale_stride, rows, &s_scale));
    BR_TRY(span(ctx, fn, "grad_stride", grad, paths, grad_stride, n_grad, &s_grad));
    BR_TRY(span(ctx, fn, "dsum_stride", dsum, paths, dsum_stride, rows, &s_dsum));
    BR_TRY(br_check_buf(ctx, fn, "mat", mat, BR_F32, n_mat));
    if (dsum) {
        BR_TRY(br_check_buf(ctx, fn, "bits", bits, BR_U32, s_bits));
        BR_TRY(br_check_buf(ctx, fn, "dsum", dsum, BR_F32, s_dsum));
    } else {
        BR_TRY(br_check_opt_buf(ctx, fn, "bits", bits, BR_U32, s_bits));
    }
    if (grad) {
        BR_TRY(br_check_buf(ctx, fn, "rowscale", rowscale, BR_F32, s_scale));
        BR_TRY(br_check_buf(ctx, fn, "grad", grad, BR_F32, s_grad));
    } else {
        BR_TRY(br_check_opt_buf(ctx, fn, "rowscale", rowscale, BR_F32, s_scale));
    }
    /* one thread reads an input element, another may write an output there */
    BR_TRY(br_check_apart(ctx, fn, "grad", grad, s_grad, "mat", mat, n_mat));
    BR_TRY(br_check_apart(ctx, fn, "grad", grad, s_grad, "rowscale", rowscale, s_scale));
    BR_TRY(br_check_apart(ctx, fn, "grad", grad, s_grad, "bits", bits, s_bits));
    BR_TRY(br_check_apart(ctx, fn, "dsum", dsum, s_dsum, "mat", mat, n_mat));
    BR_TRY(br_check_apart(ctx, fn, "dsum", dsum, s_dsum, "rowscale", rowscale, s_scale));
    BR_TRY(br_check_apart(ctx, fn, "dsum", dsum, s_dsum, "bits", bits, s_bits));
    BR_TRY(br_check_apart(ctx, fn, "dsum", dsum, s_dsum, "grad", grad, s_grad));
    const int many = paths > 1;
    *out = (br_sign_rowdot_args){.mat = mat,
                                 .bits = dsum ? bits : NULL,
                                 .rowscale = grad ? rowscale : NULL,
                                 .grad = grad,
                                 .dsum = dsum,
                                 .rows = rows,
                                 .r = r,
                                 .ldm = ldm,
                                 .col0 = col0,
                                 .paths = paths,
                                 .bits_stride = many && dsum ? bits_stride : 0,
                                 .scale_stride = many && grad ? scale_stride : 0,
                                 .grad_stride = many && grad ? grad_stride : 0,
                                 .dsum_stride = many && dsum ? dsum_stride : 0,
                                 .accumulate = accumulate != 0};
    return BR_OK;
}

br_status br_sign_rowdot_rownorm(br_ctx *ctx, const char *fn, br_buf *rownorm, size_t stride,
                                 br_sign_rowdot_args *a) {
    if (!rownorm) return BR_OK;
    if (!a->grad) return br_fail(ctx, BR_E_ARG, "%s: rownorm without grad", fn);
    const size_t paths = a->paths, rows = a->rows;
    BR_TRY(check_out_stride(ctx, fn, "rownorm_stride", rownorm, paths, stride, "rows", rows));
    size_t s_norm, s_grad, s_bits, s_scale, s_dsum, n_mat;
    BR_TRY(span(ctx, fn, "rownorm_stride", rownorm, paths, stride, rows, &s_norm));
    BR_TRY(br_check_buf(ctx, fn, "rownorm", rownorm, BR_F32, s_norm));
    /* the spans the args were checked with (strides 0 with one path) */
    BR_TRY(span(ctx, fn, "grad_stride", a->grad, paths, a->grad_stride, rows * a->r, &s_grad));
    BR_TRY(span(ctx, fn, "bits_stride", a->bits, paths, a->bits_stride, rows * a->r / 32, &s_bits));
    BR_TRY(span(ctx, fn, "scale_stride", a->rowscale, paths, a->scale_stride, rows, &s_scale));
    BR_TRY(span(ctx, fn, "dsum_stride", a->dsum, paths, a->dsum_stride, rows, &s_dsum));
    n_mat = rows * a->ldm;
    BR_TRY(br_check_apart(ctx, fn, "rownorm", rownorm, s_norm, "mat", a->mat, n_mat));
    BR_TRY(br_check_apart(ctx, fn, "rownorm", rownorm, s_norm, "rowscale", a->rowscale, s_scale));
    BR_TRY(br_check_apart(ctx, fn, "rownorm", rownorm, s_norm, "bits", a->bits, s_bits));
    BR_TRY(br_check_apart(ctx, fn, "rownorm", rownorm, s_norm, "grad", a->grad, s_grad));
    BR_TRY(br_check_apart(ctx, fn, "rownorm", rownorm, s_norm, "dsum", a->dsum, s_dsum));
    a->rownorm = rownorm;
    a->rownorm_stride = paths > 1 ? stride : 0;
    return BR_OK;
}

static br_status sign_rowdot(br_ctx *ctx, const char *fn, const br_buf *mat, size_t ldm,
                             size_t col0, const br_buf *bits, size_t bits_stride,
                             const br_buf *rowscale, size_t scale_stride, br_buf *grad,
                             size_t grad_stride, br_buf *dsum, size_t dsum_stride, size_t rows,
                             size_t r, size_t paths, int accumulate) {
    br_op op = {.kind = BR_OP_SIGN_ROWDOT};
    BR_TRY(br_sign_rowdot_args_of(ctx, fn, mat, ldm, col0, bits, bits_stride, rowscale,
                                  scale_stride, grad, grad_stride, dsum, dsum_stride, rows, r,
                                  paths, accumulate, &op.u.sign_rowdot));
    return br_submit(ctx, &op, 0);
}

br_status br_sign_rowdot(br_ctx *ctx, const br_buf *mat, size_t ldm, size_t col0,
                         const br_buf *bits, const br_buf *rowscale, br_buf *grad, br_buf *dsum,
                         size_t rows, size_t r, int accumulate) {
    return sign_rowdot(ctx, "br_sign_rowdot", mat, ldm, col0, bits, 0, rowscale, 0, grad, 0, dsum,
                       0, rows, r, 1, accumulate);
}

br_status br_sign_rowdot_paths(br_ctx *ctx, const br_buf *mat, size_t ldm, size_t col0,
                               const br_buf *bits, size_t bits_stride, const br_buf *rowscale,
                               size_t scale_stride, br_buf *grad, size_t grad_stride, br_buf *dsum,
                               size_t dsum_stride, size_t rows, size_t r, size_t paths,
                               int accumulate) {
    return sign_rowdot(ctx, "br_sign_rowdot_paths", mat, ldm, col0, bits, bits_stride, rowscale,
                       scale_stride, grad, grad_stride, dsum, dsum_stride, rows, r, paths,
                       accumulate);
}

static br_status cvt_both(br_ctx *ctx, const char *fn, const br_buf *src, const br_buf *col,
                          size_t col_group, size_t col_stride, br_buf *dst, br_buf *dst_t, size_t m,
                          size_t k, size_t ld, float scale) {
    BR_TRY(br_check_ctx(ctx));
    if (!dst && !dst_t) return br_fail(ctx, BR_E_ARG, "%s: dst and dst_t are both NULL", fn);
    BR_TRY(br_check_dim(ctx, fn, "m", m));
    BR_TRY(br_check_dim(ctx, fn, "k", k));
    if (ld < k) return br_fail(ctx, BR_E_SHAPE, "%s: ld = %zu is less than k = %zu", fn, ld, k);
    size_t n_src, n_dst, n_dst_t;
    BR_TRY(br_check_mul(ctx, fn, "m·k", m, k, &n_src));
    BR_TRY(br_check_mul(ctx, fn, "br_pad_rows(m)·ld", br_pad_rows(m), ld, &n_dst));
    BR_TRY(br_check_mul(ctx, fn, "br_pad_rows(k)·br_pad_tokens(m)", br_pad_rows(k),
                        br_pad_tokens(m), &n_dst_t));
    BR_TRY(br_check_finite(ctx, fn, "scale", scale));
    BR_TRY(br_check_buf(ctx, fn, "src", src, BR_F32, n_src));
    size_t n_col = k;
    if (col) BR_TRY(br_check_groups(ctx, fn, k, col_group, col_stride, &n_col));
    BR_TRY(br_check_opt_buf(ctx, fn, "col", col, BR_F32, n_col));
    BR_TRY(br_check_opt_buf(ctx, fn, "dst", dst, BR_F16, n_dst));
    BR_TRY(br_check_opt_buf(ctx, fn, "dst_t", dst_t, BR_F16, n_dst_t));
    BR_TRY(br_check_apart(ctx, fn, "dst", dst, n_dst, "dst_t", dst_t, n_dst_t));
    br_op op = {.kind = BR_OP_CVT_BOTH};
    op.u.cvt_both = (br_cvt_both_args){.src = src,
                                       .col = col,
                                       .dst = dst,
                                       .dst_t = dst_t,
                                       .m = m,
                                       .k = k,
                                       .ld = ld,
                                       .scale = scale,
                                       .col_group = col ? col_group : 0,
                                       .col_stride = col && col_group ? col_stride : 0};
    return br_submit(ctx, &op, 0);
}

br_status br_cvt_both(br_ctx *ctx, const br_buf *src, const br_buf *col, br_buf *dst, br_buf *dst_t,
                      size_t m, size_t k, size_t ld, float scale) {
    return cvt_both(ctx, "br_cvt_both", src, col, 0, 0, dst, dst_t, m, k, ld, scale);
}

br_status br_cvt_both_grouped(br_ctx *ctx, const br_buf *src, const br_buf *col, size_t col_group,
                              size_t col_stride, br_buf *dst, br_buf *dst_t, size_t m, size_t k,
                              size_t ld, float scale) {
    static const char fn[] = "br_cvt_both_grouped";
    if (ctx && !col) return br_fail(ctx, BR_E_ARG, "%s: col is NULL", fn);
    return cvt_both(ctx, fn, src, col, col_group, col_stride, dst, dst_t, m, k, ld, scale);
}
