/* Running, recording and replaying checked ops and units of ops (ops/op.h). */
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
    [BR_OP_MM_TN] = "mm_tn",
};

const char *br_op_name(br_op_kind kind) {
    if ((int)kind < 0 || kind >= BR_OP_COUNT || !op_names[kind]) return "op?";
    return op_names[kind];
}

br_status br_op_exec(br_ctx *ctx, const br_op *op) {
    br_op_fn fn = ctx->be->ops[op->kind];
    if (!fn)
        return br_fail(ctx, BR_E_UNSUPPORTED, "%s is not implemented on the %s backend",
                       br_op_name(op->kind), ctx->be->name);
    return fn(ctx, op);
}

br_buf *br_unit_transient(br_ctx *ctx) {
    if (!ctx->unit_transient) {
        br_buf *b = calloc(1, sizeof *b); /* no memory until a unit runs unfused */
        if (!b) return NULL;
        b->ctx = ctx;
        b->dtype = BR_F32;
        ctx->unit_transient = b;
    }
    return ctx->unit_transient;
}

int br_is_unit_transient(const br_ctx *ctx, const br_buf *buf) {
    return buf && buf == ctx->unit_transient;
}

br_status br_unit_reserve_transient(br_ctx *ctx, const br_op *first) {
    const size_t count = first->unit_transient;
    if (!count) return BR_OK;
    br_buf *t = ctx->unit_transient;
    if (t->mem && t->count >= count) return BR_OK;
    void *mem = NULL;
    BR_TRY(ctx->be->alloc(ctx, count * sizeof(float), &mem));
    if (t->mem) ctx->be->release(ctx, t->mem);
    t->mem = mem;
    t->count = count;
    return BR_OK;
}

br_status br_unit_run_ops(br_ctx *ctx, const br_op *first, size_t n) {
    BR_TRY(br_unit_reserve_transient(ctx, first));
    for (size_t i = 0; i < n; i++)
        BR_TRY(br_op_exec(ctx, &first[i]));
    return BR_OK;
}

br_status br_unit_exec(br_ctx *ctx, const br_op *first) {
    if (ctx->be->run_unit) return ctx->be->run_unit(ctx, first, first->unit_n);
    return br_unit_run_ops(ctx, first, first->unit_n);
}

/* The unit's name: its front-end's for a sequence, the op's for a lone op. */
static const char *unit_name(const br_op *first) {
    return first->unit_name ? first->unit_name : br_op_name(first->kind);
}

static br_status run_unit(br_ctx *ctx, const br_op *first) {
    /* the unit's name, which a backend that chooses among kernels refines */
    snprintf(ctx->kernel, sizeof ctx->kernel, "%s", unit_name(first));
    if (!ctx->opt.profile) return br_unit_exec(ctx, first);
    br_prof_mark mark;
    br_prof_begin(ctx, &mark);
    br_status st = br_unit_exec(ctx, first);
    br_prof_end(ctx, &mark, unit_name(first), first->tag);
    return st;
}

br_status br_submit_unit(br_ctx *ctx, br_op *ops, size_t n, const char *name, size_t transient,
                         size_t ws_bytes) {
    for (size_t i = 0; i < n; i++) {
        memset(ops[i].tag, 0, sizeof ops[i].tag);
        memcpy(ops[i].tag, ctx->tag, sizeof ops[i].tag - 1);
        ops[i].unit_n = 0;
        ops[i].unit_name = NULL;
        ops[i].unit_transient = 0;
    }
    ops[0].unit_n = (uint32_t)n;
    ops[0].unit_name = name;
    ops[0].unit_transient = transient;
    br_graph *g = ctx->rec;
    if (g) {
        if (g->cap - g->n < n) {
            size_t cap = g->cap ? 2 * g->cap : 32;
            while (cap - g->n < n)
                cap *= 2;
            br_op *grown = realloc(g->ops, cap * sizeof *grown);
            if (!grown)
                return br_fail(ctx, BR_E_NOMEM, "recording %s: out of host memory",
                               unit_name(&ops[0]));
            g->ops = grown;
            g->cap = cap;
        }
        memcpy(g->ops + g->n, ops, n * sizeof *ops);
        g->n += n;
        if (ws_bytes > g->ws_need) g->ws_need = ws_bytes;
        return BR_OK;
    }
    if (ws_bytes > ctx->ws_need) ctx->ws_need = ws_bytes;
    return run_unit(ctx, &ops[0]);
}

br_status br_submit(br_ctx *ctx, br_op *op, size_t ws_bytes) {
    return br_submit_unit(ctx, op, 1, NULL, 0, ws_bytes);
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
        for (size_t i = 0; i < g->n; i += g->ops[i].unit_n)
            BR_TRY(run_unit(ctx, &g->ops[i]));
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
