/* Running, recording and replaying checked ops. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/profile.h"
#include "ops/check.h"
#include "ops/op.h"

static const char *const op_names[BR_OP_COUNT] = {
    [BR_OP_FILL] = "fill",
    [BR_OP_COPY] = "copy",
    [BR_OP_MM] = "mm",
    [BR_OP_MM_BITS] = "mm_bits",
    [BR_OP_CVT] = "cvt",
    [BR_OP_CVT_MULTI] = "cvt_multi",
    [BR_OP_CVT_COLS] = "cvt_cols",
    [BR_OP_CVT_T] = "cvt_t",
    [BR_OP_EXPAND] = "expand",
    [BR_OP_COLSUM] = "colsum",
    [BR_OP_COLSUM_FUSED] = "colsum_fused",
    [BR_OP_SCALE_ACC] = "scale_acc",
    [BR_OP_SCALE_ACC2] = "scale_acc2",
    [BR_OP_F16_TO_F32] = "f16_to_f32",
    [BR_OP_ADD] = "add",
    [BR_OP_SPLIT_QG] = "split_qg",
    [BR_OP_DENSE_FWD] = "dense_fwd",
    [BR_OP_DENSE_BWD] = "dense_bwd",
    [BR_OP_ADAM] = "adam",
    [BR_OP_ADAM_CAT] = "adam_cat",
    [BR_OP_SUMSQ] = "sumsq",
    [BR_OP_SUMSQ_CAT] = "sumsq_cat",
    [BR_OP_CVT_PAD] = "cvt_pad",
    [BR_OP_STEP_CTRL] = "step_ctrl",
    [BR_OP_SIGN_STEP] = "sign_step",
    [BR_OP_EXPAND_SCALED] = "expand_scaled",
    [BR_OP_SIGN_ROWDOT] = "sign_rowdot",
    [BR_OP_CVT_BOTH] = "cvt_both",
    [BR_OP_SIGN_STEPS] = "sign_step",
    [BR_OP_MM_STAGE] = "mm_stage",
    [BR_OP_MM_TN] = "mm_tn",
    [BR_OP_MM_TN2] = "mm_tn2",
    [BR_OP_EXPAND_SCALED2] = "expand_scaled2",
    [BR_OP_MM_COLSUM] = "mm_colsum",
};

const char *br_op_name(br_op_kind kind) {
    if ((int)kind < 0 || kind >= BR_OP_COUNT || !op_names[kind]) return "op?";
    return op_names[kind];
}

static br_status run_op(br_ctx *ctx, const br_op *op) {
    br_op_fn fn = ctx->be->ops[op->kind];
    if (!fn)
        return br_fail(ctx, BR_E_UNSUPPORTED, "%s is not implemented on the %s backend",
                       br_op_name(op->kind), ctx->be->name);
    /* the op's name, which a backend that chooses among kernels refines */
    snprintf(ctx->kernel, sizeof ctx->kernel, "%s", br_op_name(op->kind));
    if (!ctx->opt.profile) return fn(ctx, op);
    br_prof_mark mark;
    br_prof_begin(ctx, &mark);
    br_status st = fn(ctx, op);
    br_prof_end(ctx, &mark, br_op_name(op->kind), op->tag);
    return st;
}

br_status br_submit(br_ctx *ctx, br_op *op, size_t ws_bytes) {
    memset(op->tag, 0, sizeof op->tag);
    memcpy(op->tag, ctx->tag, sizeof op->tag - 1);
    br_graph *g = ctx->rec;
    if (g) {
        if (g->n == g->cap) {
            size_t cap = g->cap ? 2 * g->cap : 32;
            br_op *ops = realloc(g->ops, cap * sizeof *ops);
            if (!ops)
                return br_fail(ctx, BR_E_NOMEM, "recording %s: out of host memory",
                               br_op_name(op->kind));
            g->ops = ops;
            g->cap = cap;
        }
        g->ops[g->n++] = *op;
        if (ws_bytes > g->ws_need) g->ws_need = ws_bytes;
        return BR_OK;
    }
    if (ws_bytes > ctx->ws_need) ctx->ws_need = ws_bytes;
    return run_op(ctx, op);
}

br_status br_graph_begin(br_ctx *ctx) {
    BR_TRY(br_check_ctx(ctx));
    if (ctx->rec) return br_fail(ctx, BR_E_STATE, "br_graph_begin: already recording");
    br_graph *g = calloc(1, sizeof *g);
    if (!g) return br_fail(ctx, BR_E_NOMEM, "br_graph_begin: out of host memory");
    g->ctx = ctx;
    ctx->rec = g;
    return BR_OK;
}

br_status br_graph_end(br_ctx *ctx, br_graph **out) {
    BR_TRY(br_check_ctx(ctx));
    if (!out) return br_fail(ctx, BR_E_ARG, "br_graph_end: out is NULL");
    *out = NULL;
    if (!ctx->rec) return br_fail(ctx, BR_E_STATE, "br_graph_end: no recording in progress");
    *out = ctx->rec;
    ctx->rec = NULL;
    return BR_OK;
}

br_status br_graph_launch(br_graph *g) {
    if (!g) return BR_E_ARG;
    br_ctx *ctx = g->ctx;
    if (ctx->rec) return br_fail(ctx, BR_E_STATE, "br_graph_launch: a recording is in progress");
    if (g->ws_need > ctx->ws_need) ctx->ws_need = g->ws_need;
    if (!ctx->be->graph_launch) {
        for (size_t i = 0; i < g->n; i++)
            BR_TRY(run_op(ctx, &g->ops[i]));
        return BR_OK;
    }
    if (!ctx->opt.profile) return ctx->be->graph_launch(ctx, g);
    br_prof_mark mark;
    br_prof_begin(ctx, &mark);
    br_status st = ctx->be->graph_launch(ctx, g);
    br_prof_end(ctx, &mark, "graph", ctx->tag);
    return st;
}

size_t br_graph_op_count(const br_graph *g) { return g ? g->n : 0; }

void br_graph_free(br_graph *g) {
    if (!g) return;
    if (g->be_graph && g->ctx->be->graph_release) g->ctx->be->graph_release(g->ctx, g);
    free(g->ops);
    free(g);
}
