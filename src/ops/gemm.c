/* Front-ends of the GEMM family: br_mm on an f16 plane, br_mm_bits on a sign
 * bitmap, br_mm_tn on an f16 act and plane both stored k-rows-first. All check the
 * shapes once here; br_mm_bits either submits the bitmap GEMM or, when
 * the option bits_gemm is 0 (or the backend has no bitmap GEMM), expands the bitmap
 * into a context-owned f16 plane and submits br_mm's op on it. */
#include <stdint.h>
#include <stdlib.h>

#include "core/backend.h"
#include "ops/check.h"
#include "ops/layer_ops.h"
#include "ops/op.h"

/* act f16 as `rows` rows of `len` elements, lda apart (0: len; resolved into *lda):
 * [m][k] for br_mm, [k][m] for br_mm_tn. Rows past `rows` and elements past `len`
 * are never read, so it spans (rows−1)·lda + len elements, *need. */
static br_status check_act_span(br_ctx *ctx, const char *fn, size_t rows, size_t len,
                                const char *len_name, size_t *lda, size_t *need) {
    size_t stride = *lda ? *lda : len;
    if (stride < len)
        return br_fail(ctx, BR_E_SHAPE, "%s: lda = %zu is less than %s = %zu", fn, stride, len_name,
                       len);
    if (stride > BR_MAX_ELEMS)
        return br_fail(ctx, BR_E_OVERFLOW, "%s: lda = %zu exceeds %zu", fn, stride,
                       (size_t)BR_MAX_ELEMS);
    BR_TRY(br_check_span(ctx, fn, "lda", rows, stride, len, need));
    *lda = stride;
    return BR_OK;
}

/* The checks shared by the front-ends: the shapes, act, out and the epilogue's
 * operands. On success g->ldo and g->lda hold the resolved strides and, where
 * plane_elems is not NULL, *plane_elems n·k (the f16 plane's size, which also
 * bounds the bitmap's). act_t: act is stored k-rows-first, [k][lda] with lda ≥ m
 * (br_mm_tn), not [m][lda] with lda ≥ k. out may be NULL only where out_optional
 * (br_mm_stage). */
static br_status check_gemm(br_ctx *ctx, const char *fn, const br_buf *act, int act_t,
                            const br_buf *out, int out_optional, br_gemm *g, size_t *plane_elems,
                            int c_f16_ok) {
    BR_TRY(br_check_dim(ctx, fn, "m", g->m));
    BR_TRY(br_check_dim(ctx, fn, "n", g->n));
    BR_TRY(br_check_dim(ctx, fn, "k", g->k));
    if (g->k % 32 != 0)
        return br_fail(ctx, BR_E_SHAPE, "%s: k = %zu is not a multiple of 32", fn, g->k);
    if (g->ocol > BR_MAX_ELEMS - g->n)
        return br_fail(ctx, BR_E_OVERFLOW, "%s: ocol + n = %zu + %zu exceeds %zu", fn, g->ocol,
                       g->n, (size_t)BR_MAX_ELEMS);
    size_t stride = g->ldo ? g->ldo : g->n;
    if (stride < g->ocol + g->n)
        return br_fail(ctx, BR_E_SHAPE, "%s: ldo = %zu is less than ocol + n = %zu + %zu", fn,
                       stride, g->ocol, g->n);
    if (stride > BR_MAX_ELEMS)
        return br_fail(ctx, BR_E_OVERFLOW, "%s: ldo = %zu exceeds %zu", fn, stride,
                       (size_t)BR_MAX_ELEMS);
    size_t lda = g->lda, act_need;
    BR_TRY(act_t ? check_act_span(ctx, fn, g->k, g->m, "m", &lda, &act_need)
                 : check_act_span(ctx, fn, g->m, g->k, "k", &lda, &act_need));
    /* out (and c) span (m−1)·ldo + ocol + n floats: the last row ends at its block's end */
    size_t rows_before;
    BR_TRY(br_check_mul(ctx, fn, "(m-1)·ldo", g->m - 1, stride, &rows_before));
    if (rows_before > BR_MAX_ELEMS - (g->ocol + g->n))
        return br_fail(ctx, BR_E_OVERFLOW, "%s: (m-1)·ldo + ocol + n = %zu + %zu exceeds %zu", fn,
                       rows_before, g->ocol + g->n, (size_t)BR_MAX_ELEMS);
    if (plane_elems) BR_TRY(br_check_mul(ctx, fn, "n·k", g->n, g->k, plane_elems));
    size_t out_need = rows_before + g->ocol + g->n;
    BR_TRY(br_check_buf(ctx, fn, "act", act, BR_F16, act_need));
    if (out || !out_optional) BR_TRY(br_check_buf(ctx, fn, "out", out, BR_F32, out_need));
    BR_TRY(br_check_finite(ctx, fn, "oscale", g->oscale));
    BR_TRY(br_check_opt_buf(ctx, fn, "colscale", g->colscale, BR_F32, g->n));
    BR_TRY(br_check_apart(ctx, fn, "colscale", g->colscale, g->n, "out", out, out_need));
    if (g->c) {
        int c16 = c_f16_ok && br_buf_dtype(g->c) == BR_F16;
        BR_TRY(br_check_buf(ctx, fn, "c", g->c, c16 ? BR_F16 : BR_F32, out_need));
        BR_TRY(br_check_finite(ctx, fn, "beta", g->beta));
        /* in place (c is out, element for element) or apart: a shifted overlap would
         * read elements another tile has already written (an f16 c is never out) */
        if (out && !(!c16 && br_ptr(g->c) == br_ptr(out)) &&
            br_bufs_overlap(g->c, out_need, out, out_need))
            return br_fail(ctx, BR_E_ARG,
                           "%s: c overlaps out without being out itself (offsets %zu and %zu)", fn,
                           g->c->offset, out->offset);
    } else {
        g->beta = 0.0f;
    }
    g->ldo = stride;
    g->lda = lda;
    return BR_OK;
}

/* Workspace a backend may use for a split-K run (deterministic: partials summed in a
 * fixed order): reserved for a long k (the token axis of the layer's M_U and N_V)
 * with few outputs (≤ 4M, about one wave of output tiles on a large GPU, where
 * splitting k is what fills the machine). Up to 8 partial blocks of (m + 255) rows
 * (tokens padded to any tile) × n rounded up to 4 floats, at most 64 MiB. */
static size_t split_ws_bytes(const br_gemm *g) {
    if (g->k < 2048 || g->m * g->n > ((size_t)4 << 20)) return 0;
    size_t block = (g->m + 255) * ((g->n + 3) / 4 * 4) * sizeof(float);
    size_t splits = ((size_t)64 << 20) / block;
    if (splits > 8) splits = 8;
    return splits >= 2 ? splits * block : 0;
}

/* br_mm's checks and its op's arguments (args->ws_bytes: its split-K reservation). */
static br_status mm_args_of(br_ctx *ctx, const char *fn, const br_buf *act, const br_buf *plane,
                            br_buf *out, br_gemm g, br_mm_args *args) {
    size_t plane_elems;
    BR_TRY(check_gemm(ctx, fn, act, 0, out, 0, &g, &plane_elems, 0));
    BR_TRY(br_check_buf(ctx, fn, "plane", plane, BR_F16, plane_elems));
    size_t ws = split_ws_bytes(&g);
    *args = (br_mm_args){.act = act, .plane = plane, .out = out, .g = g, .ws_bytes = ws};
    return BR_OK;
}

br_status br_mm(br_ctx *ctx, const br_buf *act, const br_buf *plane, br_buf *out, br_gemm g) {
    BR_TRY(br_check_ctx(ctx));
    br_op op = {.kind = BR_OP_MM};
    BR_TRY(mm_args_of(ctx, "br_mm", act, plane, out, g, &op.u.mm));
    return br_submit(ctx, &op, op.u.mm.ws_bytes);
}

/* The workspace a unit reserves: the front-end's own need, or more where the
 * backend's run of the unit needs more (backend.h: unit_ws). */
static size_t unit_ws_bytes(br_ctx *ctx, const br_op *ops, size_t n, size_t own) {
    const size_t be = ctx->be->unit_ws ? ctx->be->unit_ws(ctx, ops, n) : 0;
    return be > own ? be : own;
}

/* br_mm_tn's checks and its op's arguments (args->ws_bytes: its split-K reservation). */
static br_status mm_tn_args(br_ctx *ctx, const char *fn, const br_buf *act, const br_buf *plane,
                            size_t ldp, br_buf *out, br_gemm g, br_mm_args *args) {
    BR_TRY(check_gemm(ctx, fn, act, 1, out, 0, &g, NULL, 0));
    /* plane [k][ldp]: row kk at kk·ldp, (k−1)·ldp + n elements (columns past n unread) */
    if (!ldp) ldp = g.n;
    if (ldp < g.n)
        return br_fail(ctx, BR_E_SHAPE, "%s: ldp = %zu is less than n = %zu", fn, ldp, g.n);
    size_t plane_elems;
    BR_TRY(br_check_span(ctx, fn, "ldp", g.k, ldp, g.n, &plane_elems));
    BR_TRY(br_check_buf(ctx, fn, "plane", plane, BR_F16, plane_elems));
    size_t ws = split_ws_bytes(&g); /* K = tokens: the shape split-K is for */
    *args =
        (br_mm_args){.act = act, .plane = plane, .out = out, .g = g, .ws_bytes = ws, .ldp = ldp};
    return BR_OK;
}

br_status br_mm_tn(br_ctx *ctx, const br_buf *act, const br_buf *plane, size_t ldp, br_buf *out,
                   br_gemm g) {
    static const char fn[] = "br_mm_tn";
    BR_TRY(br_check_ctx(ctx));
    br_op op = {.kind = BR_OP_MM_TN};
    BR_TRY(mm_tn_args(ctx, fn, act, plane, ldp, out, g, &op.u.mm));
    /* a backend that transposes the operands for its K-major kernels needs room */
    return br_submit(ctx, &op, unit_ws_bytes(ctx, &op, 1, op.u.mm.ws_bytes));
}

/* The elements of out a checked product writes: (m − 1)·ldo + ocol + n. */
static size_t out_span(const br_gemm *g) { return (g->m - 1) * g->ldo + g->ocol + g->n; }

/* A buffer as the op touches it: `paths` pieces of `one` elements, `stride` apart
 * (one piece: the whole span). */
typedef struct pieces {
    const char *name;
    const br_buf *buf;
    size_t paths, stride, one;
} pieces;

/* Whether two sets of pieces share an element: piece by piece (a layer interleaves
 * its paths' dh and dg, G_U and G_V), or on the whole spans past 4096 pairs. */
static int pieces_overlap(const pieces *x, const pieces *y) {
    if (!x->buf || !y->buf) return 0;
    /* spans apart (separate memory): no piece can meet */
    if (!br_bufs_overlap(x->buf, (x->paths - 1) * x->stride + x->one, y->buf,
                         (y->paths - 1) * y->stride + y->one))
        return 0;
    if (x->paths * y->paths > 4096) return 1;
    const size_t ex = br_dtype_size(x->buf->dtype), ey = br_dtype_size(y->buf->dtype);
    const uintptr_t x0 = (uintptr_t)br_ptr(x->buf), y0 = (uintptr_t)br_ptr(y->buf);
    for (size_t p = 0; p < x->paths; p++)
        for (size_t q = 0; q < y->paths; q++) {
            uintptr_t bx = x0 + p * x->stride * ex, by = y0 + q * y->stride * ey;
            if (bx < by + y->one * ey && by < bx + x->one * ex) return 1;
        }
    return 0;
}

/* The checks both products of an mm_tn2 unit (ops: MM_TN, MM_TN, then with rowdot
 * SIGN_ROWDOT on each product) need together, then its submission: the sides may
 * run at once, so each side's outputs (the product, and with rowdot its gradients
 * and sums) are apart from everything the other side reads or writes and the
 * rowdot's outputs from both products' operands (a product and its own operands:
 * as br_mm_tn); one workspace reservation serves both (a backend that runs them
 * apart runs them in turn). */
static br_status submit_tn2(br_ctx *ctx, const char *fn, br_op *ops, size_t n) {
    const int rowdot = n == 4;
    const br_sign_rowdot_args none = {0};
    pieces mat[2], act[2], plane[2], grad[2], dsum[2], rnorm[2], bits[2], scale[2];
    for (int i = 0; i < 2; i++) {
        const br_mm_args *m = &ops[i].u.mm;
        const br_sign_rowdot_args *rd = rowdot ? &ops[2 + i].u.sign_rowdot : &none;
        const size_t P = rowdot ? rd->paths : 1;
        mat[i] = (pieces){rowdot ? (i ? "mat2" : "mat1") : (i ? "out2" : "out1"), m->out, 1, 0,
                          out_span(&m->g)};
        act[i] = (pieces){i ? "act2" : "act1", m->act, 1, 0, (m->g.k - 1) * m->g.lda + m->g.m};
        plane[i] =
            (pieces){i ? "plane2" : "plane1", m->plane, 1, 0, (m->g.k - 1) * m->ldp + m->g.n};
        grad[i] = (pieces){i ? "grad2" : "grad1", rd->grad, P, rd->grad_stride, rd->rows * rd->r};
        dsum[i] = (pieces){i ? "dsum2" : "dsum1", rd->dsum, P, rd->dsum_stride, rd->rows};
        rnorm[i] =
            (pieces){i ? "rownorm2" : "rownorm1", rd->rownorm, P, rd->rownorm_stride, rd->rows};
        bits[i] =
            (pieces){i ? "bits2" : "bits1", rd->bits, P, rd->bits_stride, rd->rows * rd->r / 32};
        scale[i] =
            (pieces){i ? "rowscale2" : "rowscale1", rd->rowscale, P, rd->scale_stride, rd->rows};
    }
    for (int i = 0; i < 2; i++) {
        const int j = 1 - i;
        const pieces *outs[] = {&mat[i], &grad[i], &dsum[i], &rnorm[i]};
        const pieces *others[] = {&act[0],  &act[1],  &plane[0], &plane[1], &mat[j],
                                  &grad[j], &dsum[j], &rnorm[j], &bits[j],  &scale[j]};
        for (size_t u = 0; u < sizeof outs / sizeof outs[0]; u++)
            for (size_t v = 0; v < sizeof others / sizeof others[0]; v++)
                if (!(u == 0 && (others[v] == &act[i] || others[v] == &plane[i])) &&
                    pieces_overlap(outs[u], others[v]))
                    return br_fail(ctx, BR_E_ARG, "%s: %s overlaps %s", fn, outs[u]->name,
                                   others[v]->name);
    }
    const size_t split =
        ops[0].u.mm.ws_bytes > ops[1].u.mm.ws_bytes ? ops[0].u.mm.ws_bytes : ops[1].u.mm.ws_bytes;
    return br_submit_unit(ctx, ops, n, "mm_tn2", 0, unit_ws_bytes(ctx, ops, n, split));
}

br_status br_mm_tn2(br_ctx *ctx, const br_buf *act1, const br_buf *plane1, size_t ldp1,
                    br_buf *out1, br_gemm g1, const br_buf *act2, const br_buf *plane2, size_t ldp2,
                    br_buf *out2, br_gemm g2) {
    static const char fn[] = "br_mm_tn2";
    BR_TRY(br_check_ctx(ctx));
    br_op ops[2] = {{.kind = BR_OP_MM_TN}, {.kind = BR_OP_MM_TN}};
    BR_TRY(mm_tn_args(ctx, fn, act1, plane1, ldp1, out1, g1, &ops[0].u.mm));
    BR_TRY(mm_tn_args(ctx, fn, act2, plane2, ldp2, out2, g2, &ops[1].u.mm));
    return submit_tn2(ctx, fn, ops, 2);
}

br_status br_mm_tn2_rowdot(br_ctx *ctx, const br_tn_rowdot side[2]) {
    static const char fn[] = "br_mm_tn2_rowdot";
    BR_TRY(br_check_ctx(ctx));
    if (!side) return br_fail(ctx, BR_E_ARG, "%s: side is NULL", fn);
    br_op ops[4] = {{.kind = BR_OP_MM_TN},
                    {.kind = BR_OP_MM_TN},
                    {.kind = BR_OP_SIGN_ROWDOT},
                    {.kind = BR_OP_SIGN_ROWDOT}};
    for (int i = 0; i < 2; i++) {
        const br_tn_rowdot *s = &side[i];
        if (s->g.colscale || s->g.c)
            return br_fail(ctx, BR_E_ARG, "%s: side %d's product has colscale or c", fn, i + 1);
        BR_TRY(mm_tn_args(ctx, fn, s->act, s->plane, s->ldp, s->mat, s->g, &ops[i].u.mm));
        size_t cols;
        BR_TRY(br_check_mul(ctx, fn, "paths·r", s->paths, s->r, &cols));
        if (cols != s->g.n)
            return br_fail(ctx, BR_E_SHAPE, "%s: side %d: paths·r = %zu, the product has n = %zu",
                           fn, i + 1, cols, s->g.n);
        const br_gemm *g = &ops[i].u.mm.g; /* strides resolved */
        br_sign_rowdot_args *rd = &ops[2 + i].u.sign_rowdot;
        BR_TRY(br_sign_rowdot_args_of(ctx, fn, s->mat, g->ldo, g->ocol, s->bits, s->bits_stride,
                                      s->rowscale, s->scale_stride, s->grad, s->grad_stride,
                                      s->dsum, s->dsum_stride, g->m, s->r, s->paths, s->accumulate,
                                      rd));
        BR_TRY(br_sign_rowdot_rownorm(ctx, fn, s->rownorm, s->rownorm_stride, rd));
    }
    return submit_tn2(ctx, fn, ops, 4);
}

/* The context's f16 expand plane, grown to at least `count` elements. An outgrown
 * plane that a recording named is retired, not freed: a graph may still run on it
 * (freed with the context); one only eager ops used is freed. */
static br_status expand_plane(br_ctx *ctx, size_t count, br_buf **out) {
    if (ctx->expand_plane && ctx->expand_plane->count >= count) {
        *out = ctx->expand_plane;
        return BR_OK;
    }
    if (ctx->expand_plane && ctx->expand_plane_named) {
        br_buf **list =
            realloc(ctx->expand_retired, (ctx->n_expand_retired + 1) * sizeof *ctx->expand_retired);
        if (!list)
            return br_fail(ctx, BR_E_NOMEM, "br_mm_bits: out of host memory growing the plane");
        ctx->expand_retired = list;
    }
    br_buf *plane = NULL;
    BR_TRY(br_buf_new(ctx, BR_F16, count, &plane));
    if (ctx->expand_plane && ctx->expand_plane_named)
        ctx->expand_retired[ctx->n_expand_retired++] = ctx->expand_plane;
    else
        br_buf_free(ctx->expand_plane); /* eager ops only: the backend waits for them */
    ctx->expand_plane = plane;
    ctx->expand_plane_named = 0;
    *out = plane;
    return BR_OK;
}

br_status br_mm_bits(br_ctx *ctx, const br_buf *act, const br_buf *bits, br_bits_layout layout,
                     br_buf *out, br_gemm g) {
    static const char fn[] = "br_mm_bits";
    BR_TRY(br_check_ctx(ctx));
    size_t plane_elems, bits_need;
    BR_TRY(check_gemm(ctx, fn, act, 0, out, 0, &g, &plane_elems, 0));
    if (layout == BR_BITS_ROWS) { /* bits u32 [n][k/32] */
        BR_TRY(br_check_mul(ctx, fn, "n·(k/32)", g.n, g.k / 32, &bits_need));
    } else if (layout == BR_BITS_COLS) { /* bits u32 [k][ceil(n/32)] */
        BR_TRY(br_check_mul(ctx, fn, "k·ceil(n/32)", g.k, (g.n + 31) / 32, &bits_need));
    } else {
        return br_fail(ctx, BR_E_ARG, "%s: layout %d is neither BR_BITS_ROWS nor BR_BITS_COLS", fn,
                       (int)layout);
    }
    BR_TRY(br_check_buf(ctx, fn, "bits", bits, BR_U32, bits_need));

    if (ctx->opt.bits_gemm && ctx->be->ops[BR_OP_MM_BITS]) {
        br_op op = {.kind = BR_OP_MM_BITS};
        size_t ws = split_ws_bytes(&g);
        op.u.mm = (br_mm_args){
            .act = act, .plane = bits, .out = out, .g = g, .layout = layout, .ws_bytes = ws};
        return br_submit(ctx, &op, ws);
    }

    /* Expand then mm: the ±1 plane [n][k] is the bitmap itself (ROWS: rows n, r = k)
     * or the transpose of the bitmap's expansion (COLS: rows k, r = n). */
    br_buf *plane = NULL;
    BR_TRY(expand_plane(ctx, plane_elems, &plane));
    if (ctx->rec) ctx->expand_plane_named = 1;
    br_op ex = {.kind = BR_OP_EXPAND};
    if (layout == BR_BITS_ROWS)
        ex.u.expand = (br_expand_args){.bits = bits, .rows = g.n, .r = g.k, .plane = plane};
    else
        ex.u.expand = (br_expand_args){.bits = bits, .rows = g.k, .r = g.n, .plane_t = plane};
    BR_TRY(br_submit(ctx, &ex, 0));
    br_op op = {.kind = BR_OP_MM};
    size_t ws = split_ws_bytes(&g);
    op.u.mm = (br_mm_args){.act = act, .plane = plane, .out = out, .g = g, .ws_bytes = ws};
    return br_submit(ctx, &op, ws);
}

br_status br_mm_stage(br_ctx *ctx, const br_buf *act, const br_buf *plane, br_buf *out, br_gemm g,
                      br_buf *dst, br_buf *dst_t, size_t ld, float scale) {
    static const char fn[] = "br_mm_stage";
    BR_TRY(br_check_ctx(ctx));
    size_t plane_elems, n_out, n_dst, n_dst_t;
    BR_TRY(check_gemm(ctx, fn, act, 0, out, 1, &g, &plane_elems, 1));
    BR_TRY(br_check_buf(ctx, fn, "plane", plane, BR_F16, plane_elems));
    if (!g.c) return br_fail(ctx, BR_E_ARG, "%s: c is NULL (the staged GEMM needs c)", fn);
    if (g.ocol != 0 || g.ldo != g.n)
        return br_fail(ctx, BR_E_SHAPE,
                       "%s: out must be a whole [m][n] matrix (ocol = %zu, ldo = %zu, n = %zu)", fn,
                       g.ocol, g.ldo, g.n);
    if (g.colscale) return br_fail(ctx, BR_E_ARG, "%s: colscale is not supported", fn);
    if (ld < g.n) return br_fail(ctx, BR_E_SHAPE, "%s: ld = %zu is less than n = %zu", fn, ld, g.n);
    BR_TRY(br_check_mul(ctx, fn, "m·n", g.m, g.n, &n_out));
    BR_TRY(br_check_mul(ctx, fn, "br_pad_rows(m)·ld", br_pad_rows(g.m), ld, &n_dst));
    BR_TRY(br_check_mul(ctx, fn, "br_pad_rows(n)·br_pad_tokens(m)", br_pad_rows(g.n),
                        br_pad_tokens(g.m), &n_dst_t));
    BR_TRY(br_check_finite(ctx, fn, "scale", scale));
    BR_TRY(br_check_buf(ctx, fn, "dst", dst, BR_F16, n_dst));
    BR_TRY(br_check_opt_buf(ctx, fn, "dst_t", dst_t, BR_F16, n_dst_t));
    /* the outputs are written while act, plane and c are read */
    const br_buf *in[] = {act, plane, g.c, out};
    static const char *const in_names[] = {"act", "plane", "c", "out"};
    const size_t in_n[] = {br_buf_count(act), plane_elems, n_out, n_out};
    br_buf *const outs[] = {dst, dst_t};
    static const char *const out_names[] = {"dst", "dst_t"};
    const size_t outs_n[] = {n_dst, n_dst_t};
    for (size_t o = 0; o < 2; o++)
        for (size_t i = 0; i < 4; i++)
            if (in[i])
                BR_TRY(br_check_apart(ctx, fn, out_names[o], outs[o], outs_n[o], in_names[i], in[i],
                                      in_n[i]));
    BR_TRY(br_check_apart(ctx, fn, "dst", dst, n_dst, "dst_t", dst_t, n_dst_t));
    /* the product (no split-K reservation: its staging reads it whole), into out or,
     * not kept, the unit transient; then staged from there */
    br_buf *product = out ? out : br_unit_transient(ctx);
    if (!product) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    br_op ops[2] = {{.kind = BR_OP_MM}, {.kind = BR_OP_CVT_BOTH}};
    ops[0].u.mm = (br_mm_args){.act = act, .plane = plane, .out = product, .g = g};
    ops[1].u.cvt_both = (br_cvt_both_args){
        .src = product, .dst = dst, .dst_t = dst_t, .m = g.m, .k = g.n, .ld = ld, .scale = scale};
    return br_submit_unit(ctx, ops, 2, "mm_stage", out ? 0 : n_out, unit_ws_bytes(ctx, ops, 2, 0));
}

br_status br_mm_colsum_grouped(br_ctx *ctx, const br_buf *act, const br_buf *plane, br_buf *b,
                               br_gemm g, const br_buf *a, br_buf *sum, const br_fuse *fuse,
                               size_t group, size_t stride, int accumulate) {
    static const char fn[] = "br_mm_colsum_grouped";
    BR_TRY(br_check_ctx(ctx));
    /* the one form the fused epilogue has: a plain whole product, staged as CVT_B */
    if (!fuse) return br_fail(ctx, BR_E_ARG, "%s: fuse is NULL", fn);
    if (fuse->kind != BR_FUSE_CVT_B)
        return br_fail(ctx, BR_E_ARG, "%s: fuse->kind is %d, not BR_FUSE_CVT_B", fn,
                       (int)fuse->kind);
    if (fuse->dst_t) return br_fail(ctx, BR_E_ARG, "%s: fuse->dst_t is not supported", fn);
    if (g.colscale || g.c) return br_fail(ctx, BR_E_ARG, "%s: the product has colscale or c", fn);
    if (g.ocol != 0 || (g.ldo != 0 && g.ldo != g.n)) /* a shape, as br_mm_stage's ldo */
        return br_fail(ctx, BR_E_SHAPE,
                       "%s: b must be a whole [m][n] matrix (ocol = %zu, ldo = %zu, n = %zu)", fn,
                       g.ocol, g.ldo, g.n);
    br_op ops[2] = {{.kind = BR_OP_MM}, {.kind = BR_OP_COLSUM_FUSED}};
    br_mm_args *mm = &ops[0].u.mm;
    size_t cs_ws, n_grp;
    BR_TRY(mm_args_of(ctx, fn, act, plane, b, g, mm));
    BR_TRY(br_colsum_fused_args_of(ctx, fn, a, b, sum, g.m, g.n, fuse, group, stride, !accumulate,
                                   &ops[1].u.colsum_fused, &cs_ws));
    /* The outputs apart from every input: the column sums' checks cover b, sum and dst
     * among themselves and sum and dst against a and col; in one unit b is also written
     * while a and col are read, and sum and dst while act and plane are (a fused
     * backend writes them from the GEMM's epilogue). Counts checked above. */
    const br_gemm *gr = &mm->g; /* lda resolved */
    BR_TRY(br_check_groups(ctx, fn, g.n, group, stride, &n_grp));
    const size_t n_act = (g.m - 1) * gr->lda + g.k, n_mn = g.m * g.n;
    static const char *const in_names[] = {"act", "plane", "a", "fuse->col"};
    const br_buf *const in[] = {act, plane, a, fuse->col};
    const size_t in_n[] = {n_act, g.n * g.k, n_mn, n_grp};
    static const char *const out_names[] = {"b", "sum", "fuse->dst"};
    const br_buf *const outs[] = {b, sum, fuse->dst};
    const size_t outs_n[] = {n_mn, n_grp, br_pad_rows(g.m) * g.n};
    for (size_t o = 0; o < 3; o++)
        for (size_t i = 0; i < 4; i++)
            BR_TRY(br_check_apart(ctx, fn, out_names[o], outs[o], outs_n[o], in_names[i], in[i],
                                  in_n[i]));
    /* one reservation serves both halves (a backend that runs them apart runs them in
     * turn): the larger of br_mm's and br_colsum_fused_grouped's */
    size_t ws = mm->ws_bytes > cs_ws ? mm->ws_bytes : cs_ws;
    return br_submit_unit(ctx, ops, 2, "mm_colsum", 0, unit_ws_bytes(ctx, ops, 2, ws));
}
