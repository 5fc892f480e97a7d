/* Staging (f32 → f16 operands, row-major and transposed) and the bitmap expansion
 * on Vulkan: shaders stage_rows, stage_t, expand. Bit-identical to the CPU backend
 * (backend/cpu/cpu_stage.c): each element on its own, the f16 rounding in integer
 * arithmetic (shaders/common.glsl). */
#include "backend/vulkan/vk_internal.h"

/* shaders/stage_rows.comp's arguments */
typedef struct stage_rows_args {
    uint64_t src, col, dst;
    uint32_t ld_src, col0, m, k, ld, mpad;
    uint32_t col_group, col_stride;
    float scale;
} stage_rows_args;

/* shaders/stage_t.comp's arguments */
typedef struct stage_t_args {
    uint64_t src, col, dst;
    uint32_t ntok, k, tpad, kpad;
    uint32_t col_group, col_stride;
    float scale;
} stage_t_args;

static br_status stage_rows(br_ctx *ctx, const stage_rows_args *x) {
    stage_rows_args *h;
    VkDeviceAddress args;
    BR_TRY(br_vk_args(ctx, sizeof *h, (void **)&h, &args));
    *h = *x;
    return br_vk_dispatch(ctx, BR_VK_SH_stage_rows, args, br_vk_groups((size_t)x->mpad * x->ld), 1);
}

static br_status stage_t(br_ctx *ctx, const stage_t_args *x) {
    stage_t_args *h;
    VkDeviceAddress args;
    BR_TRY(br_vk_args(ctx, sizeof *h, (void **)&h, &args));
    *h = *x;
    return br_vk_dispatch(ctx, BR_VK_SH_stage_t, args, br_vk_groups((size_t)x->kpad * x->tpad), 1);
}

br_status br_vk_cvt(br_ctx *ctx, const br_op *op) {
    const br_cvt_args *a = &op->u.cvt;
    return stage_rows(ctx, &(stage_rows_args){.src = br_vk_addr(a->src),
                                              .col = br_vk_addr(a->col),
                                              .dst = br_vk_addr(a->dst),
                                              .ld_src = (uint32_t)a->k,
                                              .m = (uint32_t)a->m,
                                              .k = (uint32_t)a->k,
                                              .ld = (uint32_t)a->k,
                                              .mpad = (uint32_t)br_pad_rows(a->m),
                                              .scale = a->scale});
}

br_status br_vk_cvt_cols(br_ctx *ctx, const br_op *op) {
    const br_cvt_cols_args *a = &op->u.cvt_cols;
    return stage_rows(ctx, &(stage_rows_args){.src = br_vk_addr(a->src),
                                              .dst = br_vk_addr(a->dst),
                                              .ld_src = (uint32_t)a->ld_src,
                                              .col0 = (uint32_t)a->col0,
                                              .m = (uint32_t)a->m,
                                              .k = (uint32_t)a->k,
                                              .ld = (uint32_t)a->k,
                                              .mpad = (uint32_t)br_pad_rows(a->m),
                                              .scale = a->scale});
}

br_status br_vk_cvt_pad(br_ctx *ctx, const br_op *op) {
    const br_cvt_pad_args *a = &op->u.cvt_pad;
    return stage_rows(ctx, &(stage_rows_args){.src = br_vk_addr(a->src),
                                              .col = br_vk_addr(a->col),
                                              .dst = br_vk_addr(a->dst),
                                              .ld_src = (uint32_t)a->k,
                                              .m = (uint32_t)a->m,
                                              .k = (uint32_t)a->k,
                                              .ld = (uint32_t)a->ld,
                                              .mpad = (uint32_t)br_pad_rows(a->m),
                                              .scale = a->scale});
}

br_status br_vk_cvt_t(br_ctx *ctx, const br_op *op) {
    const br_cvt_t_args *a = &op->u.cvt_t;
    return stage_t(ctx, &(stage_t_args){.src = br_vk_addr(a->src),
                                        .col = br_vk_addr(a->col),
                                        .dst = br_vk_addr(a->dst),
                                        .ntok = (uint32_t)a->ntok,
                                        .k = (uint32_t)a->k,
                                        .tpad = (uint32_t)br_pad_tokens(a->ntok),
                                        .kpad = (uint32_t)br_pad_rows(a->k),
                                        .scale = a->scale});
}

br_status br_vk_cvt_both(br_ctx *ctx, const br_op *op) {
    const br_cvt_both_args *a = &op->u.cvt_both;
    if (a->dst)
        BR_TRY(stage_rows(ctx, &(stage_rows_args){.src = br_vk_addr(a->src),
                                                  .col = br_vk_addr(a->col),
                                                  .dst = br_vk_addr(a->dst),
                                                  .ld_src = (uint32_t)a->k,
                                                  .m = (uint32_t)a->m,
                                                  .k = (uint32_t)a->k,
                                                  .ld = (uint32_t)a->ld,
                                                  .mpad = (uint32_t)br_pad_rows(a->m),
                                                  .col_group = (uint32_t)a->col_group,
                                                  .col_stride = (uint32_t)a->col_stride,
                                                  .scale = a->scale}));
    if (a->dst_t)
        BR_TRY(stage_t(ctx, &(stage_t_args){.src = br_vk_addr(a->src),
                                            .col = br_vk_addr(a->col),
                                            .dst = br_vk_addr(a->dst_t),
                                            .ntok = (uint32_t)a->m,
                                            .k = (uint32_t)a->k,
                                            .tpad = (uint32_t)br_pad_tokens(a->m),
                                            .kpad = (uint32_t)br_pad_rows(a->k),
                                            .col_group = (uint32_t)a->col_group,
                                            .col_stride = (uint32_t)a->col_stride,
                                            .scale = a->scale}));
    return BR_OK;
}

/* shaders/expand.comp's arguments */
typedef struct expand_args {
    uint64_t bits, plane, plane_t;
    uint32_t rows, r;
} expand_args;

br_status br_vk_expand(br_ctx *ctx, const br_op *op) {
    const br_expand_args *a = &op->u.expand;
    expand_args *h;
    VkDeviceAddress args;
    BR_TRY(br_vk_args(ctx, sizeof *h, (void **)&h, &args));
    *h = (expand_args){.bits = br_vk_addr(a->bits),
                       .plane = br_vk_addr(a->plane),
                       .plane_t = br_vk_addr(a->plane_t),
                       .rows = (uint32_t)a->rows,
                       .r = (uint32_t)a->r};
    return br_vk_dispatch(ctx, BR_VK_SH_expand, args, br_vk_groups(a->rows * a->r), 1);
}
