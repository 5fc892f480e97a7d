/* The CUDA backend's fusions: where a unit of primitive ops (ops/op.h:
 * br_submit_unit) runs as fewer kernels than its ops. The one table below is every
 * fusion the backend has: a pattern of op kinds, the test that the ops are the form
 * its launcher takes, and the launcher, which gives the same bits as the ops run in
 * turn. A unit is matched from its first op on, the first fitting pattern of the
 * table taking its ops; an op no pattern takes runs alone through the op table.
 *
 * Only the ops of one unit are matched together: its front-end checked them as one
 * call (what a fused kernel writes apart from what it reads at the same time), and
 * no op outside the unit reads the values a fusion does not form. */
#include "backend/cuda/cuda_internal.h"

#define FUSION_MAX_OPS 2

typedef struct fusion {
    const char *name; /* the front-end call whose unit it fuses */
    br_op_kind kinds[FUSION_MAX_OPS];
    size_t n;
    int (*match)(br_ctx *ctx, const br_op *ops);         /* NULL: the kinds suffice */
    br_status (*launch)(br_ctx *ctx, const br_op *ops);  /* the fused run */
    size_t (*ws)(br_ctx *ctx, const br_op *ops);         /* NULL: none beyond the unit's */
} fusion;

static const fusion fusions[] = {
    /* br_mm_stage: the product staged from the GEMM's epilogue (gemm/dispatch.cu:
     * launch_wgmma_f16_stage16), else the GEMM and one staging pass applying c */
    {"mm_stage", {BR_OP_MM, BR_OP_CVT_BOTH}, 2, br_cuda_mm_stage_match, br_cuda_mm_stage,
     br_cuda_mm_stage_ws},
    /* br_mm_tn2: both products in one launch of the MN-major wgmma kernel
     * (gemm/dispatch.cu: launch_wgmma_f16_mn with a second problem) */
    {"mm_tn2", {BR_OP_MM_TN, BR_OP_MM_TN}, 2, br_cuda_mm_tn_pair_match, br_cuda_mm_tn_pair, NULL},
    /* br_mm_tn2_rowdot: both sides' rowdots in one launch (cuda_layer_ops.cu:
     * sign_rowdot2_kernel) */
    {"mm_tn2_rowdot", {BR_OP_SIGN_ROWDOT, BR_OP_SIGN_ROWDOT}, 2, NULL, br_cuda_sign_rowdot2, NULL},
    /* br_expand_scaled2: both planes in one launch (cuda_layer_ops.cu:
     * expand_scaled2_kernel) */
    {"expand_scaled2", {BR_OP_EXPAND_SCALED, BR_OP_EXPAND_SCALED}, 2, NULL, br_cuda_expand_scaled2,
     NULL},
};

/* The fusion that takes the ops at ops[0..left), or NULL. */
static const fusion *fusion_at(br_ctx *ctx, const br_op *ops, size_t left) {
    for (size_t f = 0; f < sizeof fusions / sizeof fusions[0]; f++) {
        const fusion *x = &fusions[f];
        if (x->n > left) continue;
        size_t i = 0;
        while (i < x->n && ops[i].kind == x->kinds[i])
            i++;
        if (i == x->n && (!x->match || x->match(ctx, ops))) return x;
    }
    return NULL;
}

br_status br_cuda_run_unit(br_ctx *ctx, const br_op *ops, size_t n) {
    if (n == 1) return br_op_exec(ctx, ops);
    int reserved = 0;
    for (size_t i = 0; i < n;) {
        const fusion *x = fusion_at(ctx, ops + i, n - i);
        if (x) {
            BR_TRY(x->launch(ctx, ops + i));
            i += x->n;
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
        const fusion *x = fusion_at(ctx, ops + i, n - i);
        size_t w = 0;
        if (x) {
            w = x->ws ? x->ws(ctx, ops + i) : 0;
            i += x->n;
        } else {
            if (ops[i].kind == BR_OP_MM_TN) w = br_cuda_mm_tn_ws(ctx, &ops[i].u.mm);
            i++;
        }
        if (w > need) need = w;
    }
    return need;
}
