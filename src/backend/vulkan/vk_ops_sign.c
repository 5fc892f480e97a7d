/* The sign optimizer's ops on Vulkan: step_ctrl (one thread) and sign_step as four
 * passes (shaders/sign_*.comp): the factored moments, the one lane-summed scalar,
 * the per-entry scores into the workspace's keys, and the selection and flips in
 * one workgroup. Each pass reads the schedule and does nothing on a refused step.
 * Bit-identical to the CPU backend (backend/cpu/cpu_sign.c). */
#include "backend/vulkan/vk_internal.h"

typedef struct step_ctrl_args {
    uint64_t partials, hyper, state, sched, sign_sched, norms;
    uint32_t np, nclip;
    float sign_beta1, sign_beta2;
} step_ctrl_args;

br_status br_vk_step_ctrl(br_ctx *ctx, const br_op *op) {
    const br_step_ctrl_args *a = &op->u.step_ctrl;
    step_ctrl_args *h;
    VkDeviceAddress args;
    BR_TRY(br_vk_args(ctx, sizeof *h, (void **)&h, &args));
    *h = (step_ctrl_args){.partials = br_vk_addr(a->partials),
                          .hyper = br_vk_addr(a->hyper),
                          .state = br_vk_addr(a->state),
                          .sched = br_vk_addr(a->sched),
                          .sign_sched = br_vk_addr(a->sign_sched),
                          .norms = br_vk_addr(a->norms),
                          .np = (uint32_t)a->np,
                          .nclip = (uint32_t)a->nclip,
                          .sign_beta1 = a->sign_beta1,
                          .sign_beta2 = a->sign_beta2};
    return br_vk_dispatch(ctx, BR_VK_SH_step_ctrl, args, 1, 1);
}

/* shaders/sign_step.glsl's arguments */
typedef struct sign_args {
    uint64_t grad, bits, latent, m1, v, sched, flips;
    uint64_t rowf, rowq, colf, colq, normsrc;
    uint64_t ws;
    uint32_t exact, factored, slot, rows, r, budget, nnorm;
    float beta1, beta2, eps, clamp, hyst, curv2;
} sign_args;

br_status br_vk_sign_step(br_ctx *ctx, const br_op *op) {
    const br_sign_step_args *a = &op->u.sign_step;
    size_t n = a->rows * a->r;
    VkDeviceAddress ws;
    BR_TRY(br_vk_workspace(ctx, (n + 16) * sizeof(uint32_t), &ws));
    sign_args *h;
    VkDeviceAddress args;
    BR_TRY(br_vk_args(ctx, sizeof *h, (void **)&h, &args));
    *h = (sign_args){.grad = br_vk_addr(a->grad),
                     .bits = br_vk_addr(a->bits),
                     .latent = br_vk_addr(a->latent),
                     .m1 = br_vk_addr(a->m1),
                     .v = br_vk_addr(a->v),
                     .sched = br_vk_addr(a->sched),
                     .flips = br_vk_addr(a->flips),
                     .rowf = br_vk_addr(a->rowf),
                     .rowq = br_vk_addr(a->rowq),
                     .colf = br_vk_addr(a->colf),
                     .colq = br_vk_addr(a->colq),
                     .normsrc = br_vk_addr(a->normsrc),
                     .ws = ws,
                     .exact = (uint32_t)a->exact,
                     .factored = (uint32_t)a->factored,
                     .slot = (uint32_t)a->slot,
                     .rows = (uint32_t)a->rows,
                     .r = (uint32_t)a->r,
                     .budget = (uint32_t)a->budget,
                     .nnorm = (uint32_t)a->nnorm,
                     .beta1 = a->beta1,
                     .beta2 = a->beta2,
                     .eps = a->eps,
                     .clamp = a->clamp,
                     .hyst = a->hyst,
                     .curv2 = a->curv2};
    if (!a->exact && a->factored) {
        size_t most = a->rows > a->r ? a->rows : a->r;
        BR_TRY(br_vk_dispatch(ctx, BR_VK_SH_sign_factored, args, br_vk_groups(most), 2));
    }
    if (a->exact || a->factored) BR_TRY(br_vk_dispatch(ctx, BR_VK_SH_sign_lanes, args, 1, 1));
    BR_TRY(br_vk_dispatch(ctx, BR_VK_SH_sign_scores, args, br_vk_groups(n), 1));
    return br_vk_dispatch(ctx, BR_VK_SH_sign_select, args, 1, 1);
}
