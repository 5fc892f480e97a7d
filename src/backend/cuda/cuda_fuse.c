/* The CUDA backend's fusions: where a unit of primitive ops (ops/op.h:
 * br_submit_unit) runs as fewer kernels than its ops. The one table below is every
 * fusion the backend has: a pattern of op kinds, the test that the ops are the form
 * its launcher takes (both in the fusion's take function), and the launcher, which
 * gives the same bits as the ops run in turn. A unit is matched from its first op
 * on, the first fitting pattern of the table taking its ops; an op no pattern takes
 * runs alone through the op table.
 *
 * Only the ops of one unit are matched together: its front-end checked them as one
 * call (what a fused kernel writes apart from what it reads at the same time), and
 * no op outside the unit reads the values a fusion does not form. */
#include "backend/cuda/cuda_internal.h"

typedef struct fusion {
    const char *name; /* the front-end call whose unit it fuses */
    /* the ops it takes at ops[0..left): 2 or more, or 0 where its pattern is not there */
    size_t (*take)(br_ctx *ctx, const br_op *ops, size_t left);
    br_status (*launch)(br_ctx *ctx, const br_op *ops, size_t n); /* the fused run */
    size_t (*ws)(br_ctx *ctx, const br_op *ops);                  /* NULL: none beyond the unit's */
} fusion;

/* Whether the ops at ops[0..left) begin with kinds a, b. */
static int begins(const br_op *ops, size_t left, br_op_kind a, br_op_kind b) {
    return left >= 2 && ops[0].kind == a && ops[1].kind == b;
}

/* MM, CVT_BOTH of its product (br_mm_stage) */
static size_t take_mm_stage(br_ctx *ctx, const br_op *ops, size_t left) {
    return begins(ops, left, BR_OP_MM, BR_OP_CVT_BOTH) && br_cuda_mm_stage_match(ctx, ops) ? 2 : 0;
}

/* MM_TN, MM_TN that pair (br_mm_tn2) */
static size_t take_mm_tn_pair(br_ctx *ctx, const br_op *ops, size_t left) {
    return begins(ops, left, BR_OP_MM_TN, BR_OP_MM_TN) && br_cuda_mm_tn_pair_match(ctx, ops) ? 2
                                                                                             : 0;
}

/* SIGN_ROWDOT, SIGN_ROWDOT (br_mm_tn2_rowdot's sides) */
static size_t take_rowdot2(br_ctx *ctx, const br_op *ops, size_t left) {
    (void)ctx;
    return begins(ops, left, BR_OP_SIGN_ROWDOT, BR_OP_SIGN_ROWDOT) ? 2 : 0;
}

/* EXPAND_SCALED, EXPAND_SCALED (br_expand_scaled2) */
static size_t take_expand2(br_ctx *ctx, const br_op *ops, size_t left) {
    (void)ctx;
    return begins(ops, left, BR_OP_EXPAND_SCALED, BR_OP_EXPAND_SCALED) ? 2 : 0;
}

/* 2 to 4 CVT of one source (br_cvt_multi) */
static size_t take_cvt_multi(br_ctx *ctx, const br_op *ops, size_t left) {
    (void)ctx;
    size_t n = 0;
    while (n < left && n < 4 && ops[n].kind == BR_OP_CVT && ops[n].u.cvt.src == ops[0].u.cvt.src &&
           ops[n].u.cvt.m == ops[0].u.cvt.m && ops[n].u.cvt.k == ops[0].u.cvt.k &&
           ops[n].u.cvt.scale == ops[0].u.cvt.scale)
        n++;
    return n >= 2 ? n : 0;
}

/* 2 to BR_SIGN_STEPS_MAX SIGN_STEP that flip directly, and the ADAM_CAT after them
 * if there is one (br_sign_steps, br_sign_steps_adam) */
static size_t take_sign_steps(br_ctx *ctx, const br_op *ops, size_t left) {
    (void)ctx;
    size_t n = 0;
    while (n < left && n < BR_SIGN_STEPS_MAX && ops[n].kind == BR_OP_SIGN_STEP)
        n++;
    if (n < 2 || !br_cuda_sign_steps_together(ops, n)) return 0;
    return n < left && ops[n].kind == BR_OP_ADAM_CAT ? n + 1 : n;
}

static const fusion fusions[] = {
    /* the product staged from the GEMM's epilogue (gemm/dispatch.cu:
     * launch_wgmma_f16_stage16), else the GEMM and one staging pass applying c */
    {"mm_stage", take_mm_stage, br_cuda_mm_stage, br_cuda_mm_stage_ws},
    /* both products in one launch of the MN-major wgmma kernel (gemm/dispatch.cu:
     * launch_wgmma_f16_mn with a second problem) */
    {"mm_tn2", take_mm_tn_pair, br_cuda_mm_tn_pair, NULL},
    /* both sides' rowdots in one launch (cuda_layer_ops.cu: sign_rowdot2_kernel) */
    {"mm_tn2_rowdot", take_rowdot2, br_cuda_sign_rowdot2, NULL},
    /* both planes in one launch (cuda_layer_ops.cu: expand_scaled2_kernel) */
    {"expand_scaled2", take_expand2, br_cuda_expand_scaled2, NULL},
    /* every output from one read of the source (cuda_stage.cu: cvt_kernel) */
    {"cvt_multi", take_cvt_multi, br_cuda_cvt_multi, NULL},
    /* the steps' updates in one launch, their finish and the Adam job in one more or
     * in the same (cuda_sign.cu: update_n_kernel, finish_n_kernel) */
    {"sign_steps", take_sign_steps, br_cuda_sign_steps, NULL},
};

/* The fusion that takes ops at ops[0..left), *n its count; NULL where none does. */
static const fusion *fusion_at(br_ctx *ctx, const br_op *ops, size_t left, size_t *n) {
    for (size_t f = 0; f < sizeof fusions / sizeof fusions[0]; f++)
        if ((*n = fusions[f].take(ctx, ops, left)) != 0) return &fusions[f];
    return NULL;
}

br_status br_cuda_run_unit(br_ctx *ctx, const br_op *ops, size_t n) {
    if (n == 1) return br_op_exec(ctx, ops);
    int reserved = 0;
    for (size_t i = 0; i < n;) {
        size_t taken;
        const fusion *x = fusion_at(ctx, ops + i, n - i, &taken);
        if (x) {
            BR_TRY(x->launch(ctx, ops + i, taken));
            i += taken;
            continue;
        }
        /* an op alone: where it names the unit transient, that needs memory now */
        if (ops[0].unit_transient && !reserved) {
            BR_TRY(br_unit_reserve_transient(ctx, ops));
            reserved = 1;
        }
        BR_TRY(br_op_exec(ctx, ops + i));
        i++;
    }
    return BR_OK;
}

size_t br_cuda_unit_ws(br_ctx *ctx, const br_op *ops, size_t n) {
    size_t need = 0;
    for (size_t i = 0; i < n;) {
        size_t taken, w = 0;
        const fusion *x = fusion_at(ctx, ops + i, n - i, &taken);
        if (x) {
            w = x->ws ? x->ws(ctx, ops + i) : 0;
            i += taken;
        } else {
            if (ops[i].kind == BR_OP_MM_TN) w = br_cuda_mm_tn_ws(ctx, &ops[i].u.mm);
            i++;
        }
        if (w > need) need = w;
    }
    return need;
}
