/* The reformulated layer's ops on Vulkan: expand_scaled (shaders/expand_scaled.comp)
 * and sign_rowdot (shaders/sign_rowdot.comp), bit-identical to the CPU backend
 * (backend/cpu/cpu_layer_ops.c). cvt_both is with the staging ops (vk_ops_stage.c). */
#include "backend/vulkan/vk_internal.h"

typedef struct expand_scaled_args {
    uint64_t bits, rowscale, plane;
    uint32_t rows, r, ld, paths, bits_stride, scale_stride, by_rows;
    float scale;
} expand_scaled_args;

br_status br_vk_expand_scaled(br_ctx *ctx, const br_op *op) {
    const br_expand_scaled_args *a = &op->u.expand_scaled;
    expand_scaled_args *h;
    VkDeviceAddress args;
    BR_TRY(br_vk_args(ctx, sizeof *h, (void **)&h, &args));
    *h = (expand_scaled_args){.bits = br_vk_addr(a->bits),
                              .rowscale = br_vk_addr(a->rowscale),
                              .plane = br_vk_addr(a->plane),
                              .rows = (uint32_t)a->rows,
                              .r = (uint32_t)a->r,
                              .ld = (uint32_t)a->ld,
                              .paths = (uint32_t)a->paths,
                              .bits_stride = (uint32_t)a->bits_stride,
                              .scale_stride = (uint32_t)a->scale_stride,
                              .by_rows = (uint32_t)a->by_rows,
                              .scale = a->scale};
    size_t items = a->paths * a->r * (a->by_rows ? a->rows : a->ld);
    return br_vk_dispatch(ctx, BR_VK_SH_expand_scaled, args, br_vk_groups(items), 1);
}

typedef struct sign_rowdot_args {
    uint64_t mat, bits, rowscale, grad, dsum, rownorm;
    uint32_t rows, r, ldm, col0, paths;
    uint32_t bits_stride, scale_stride, grad_stride, dsum_stride, rownorm_stride;
    uint32_t accumulate;
} sign_rowdot_args;

br_status br_vk_sign_rowdot(br_ctx *ctx, const br_op *op) {
    const br_sign_rowdot_args *a = &op->u.sign_rowdot;
    sign_rowdot_args *h;
    VkDeviceAddress args;
    BR_TRY(br_vk_args(ctx, sizeof *h, (void **)&h, &args));
    *h = (sign_rowdot_args){.mat = br_vk_addr(a->mat),
                            .bits = br_vk_addr(a->bits),
                            .rowscale = br_vk_addr(a->rowscale),
                            .grad = br_vk_addr(a->grad),
                            .dsum = br_vk_addr(a->dsum),
                            .rownorm = br_vk_addr(a->rownorm),
                            .rows = (uint32_t)a->rows,
                            .r = (uint32_t)a->r,
                            .ldm = (uint32_t)a->ldm,
                            .col0 = (uint32_t)a->col0,
                            .paths = (uint32_t)a->paths,
                            .bits_stride = (uint32_t)a->bits_stride,
                            .scale_stride = (uint32_t)a->scale_stride,
                            .grad_stride = (uint32_t)a->grad_stride,
                            .dsum_stride = (uint32_t)a->dsum_stride,
                            .rownorm_stride = (uint32_t)a->rownorm_stride,
                            .accumulate = (uint32_t)a->accumulate};
    return br_vk_dispatch(ctx, BR_VK_SH_sign_rowdot, args, br_vk_groups(a->paths * a->rows), 1);
}
