/* The small dense linear, Adam and the partial sums of squares on Vulkan (shaders
 * dense, adam, sumsq): dense and sumsq bit-identical to the CPU backend
 * (their sums in its order, fmaf exact), Adam within rounding of it. */
#include <math.h>

#include "backend/vulkan/vk_internal.h"

typedef struct dense_args {
    uint64_t a, w, out;
    uint32_t m, k, r, accumulate, bwd;
} dense_args;

static br_status dense(br_ctx *ctx, const br_op *op, int bwd) {
    const br_dense_args *a = &op->u.dense;
    dense_args *h;
    VkDeviceAddress args;
    BR_TRY(br_vk_args(ctx, sizeof *h, (void **)&h, &args));
    *h = (dense_args){.a = br_vk_addr(a->a),
                      .w = br_vk_addr(a->w),
                      .out = br_vk_addr(a->out),
                      .m = (uint32_t)a->m,
                      .k = (uint32_t)a->k,
                      .r = (uint32_t)a->r,
                      .accumulate = (uint32_t)a->accumulate,
                      .bwd = (uint32_t)bwd};
    return br_vk_dispatch(ctx, BR_VK_SH_dense, args, br_vk_groups(a->m * (bwd ? a->k : a->r)), 1);
}

/* Both impls (plain, tiled) are one shader: they are the same bits by contract. */
br_status br_vk_dense_fwd(br_ctx *ctx, const br_op *op) { return dense(ctx, op, 0); }
br_status br_vk_dense_bwd(br_ctx *ctx, const br_op *op) { return dense(ctx, op, 1); }

typedef struct adam_args {
    uint64_t w, m1, m2, grad, mask, rel_floor, sched;
    uint32_t n;
    float lr, step, grad_mul, beta1, beta2, eps, rho_all, bc1, bc2;
} adam_args;

br_status br_vk_adam(br_ctx *ctx, const br_op *op) {
    const br_adam_args *a = &op->u.adam;
    const br_adam_hp *hp = &a->hp;
    adam_args *h;
    VkDeviceAddress args;
    BR_TRY(br_vk_args(ctx, sizeof *h, (void **)&h, &args));
    *h = (adam_args){.w = br_vk_addr(a->w),
                     .m1 = br_vk_addr(a->m1),
                     .m2 = br_vk_addr(a->m2),
                     .grad = br_vk_addr(a->grad),
                     .mask = br_vk_addr(a->mask),
                     .rel_floor = br_vk_addr(a->rel_floor),
                     .sched = br_vk_addr(hp->sched),
                     .n = (uint32_t)a->n,
                     .lr = hp->lr,
                     .step = (float)hp->step,
                     .grad_mul = hp->grad_mul,
                     .beta1 = hp->beta1,
                     .beta2 = hp->beta2,
                     .eps = hp->eps,
                     .rho_all = hp->rel_floor,
                     .bc1 = (float)(1.0 - pow((double)hp->beta1, (double)hp->step)),
                     .bc2 = (float)(1.0 - pow((double)hp->beta2, (double)hp->step))};
    return br_vk_dispatch(ctx, BR_VK_SH_adam, args, br_vk_groups(a->n), 1);
}

typedef struct sumsq_args {
    uint64_t a, tab, out;
    uint32_t n;
} sumsq_args;

br_status br_vk_sumsq(br_ctx *ctx, const br_op *op) {
    const br_sumsq_args *a = &op->u.sumsq;
    size_t np = a->tab ? a->np : 1;
    if (np > BR_VK_MAX_GROUPS)
        return br_fail(ctx, BR_E_UNSUPPORTED, "sumsq_cat: %zu parameters is more than %u", np,
                       BR_VK_MAX_GROUPS);
    sumsq_args *h;
    VkDeviceAddress args;
    BR_TRY(br_vk_args(ctx, sizeof *h, (void **)&h, &args));
    *h = (sumsq_args){.a = br_vk_addr(a->a),
                      .tab = br_vk_addr(a->tab),
                      .out = br_vk_addr(a->out),
                      .n = (uint32_t)a->n};
    return br_vk_dispatch(ctx, BR_VK_SH_sumsq, args, BR_SUMSQ_PARTS, (uint32_t)np);
}
