/* Elementwise ops on Vulkan (shaders scale_acc, scale_acc2, f16_to_f32, add,
 * split_qg): each element on its own, every product rounded before it is added, so
 * the results are the CPU backend's bits (backend/cpu/cpu_elementwise.c). */
#include <string.h>

#include "backend/vulkan/vk_internal.h"

/* Writes the n-byte argument block x and dispatches shader sh over `items`. */
static br_status launch(br_ctx *ctx, br_vk_shader sh, const void *x, size_t n, size_t items) {
    void *h;
    VkDeviceAddress args;
    BR_TRY(br_vk_args(ctx, n, &h, &args));
    memcpy(h, x, n);
    return br_vk_dispatch(ctx, sh, args, br_vk_groups(items), 1);
}

/* scale_acc's shader over m × k elements at device addresses a, col and out (its
 * argument block, stated once for the op and the subnormal probe) */
static br_status run_scale_acc(br_ctx *ctx, VkDeviceAddress a, VkDeviceAddress col,
                               VkDeviceAddress out, size_t m, size_t k, int accumulate) {
    struct {
        uint64_t a, col, out;
        uint32_t m, k, accumulate;
    } x = {a, col, out, (uint32_t)m, (uint32_t)k, (uint32_t)accumulate};
    return launch(ctx, BR_VK_SH_scale_acc, &x, sizeof x, m * k);
}

br_status br_vk_scale_acc(br_ctx *ctx, const br_op *op) {
    const br_scale_acc_args *a = &op->u.scale_acc;
    return run_scale_acc(ctx, br_vk_addr(a->a), br_vk_addr(a->col), br_vk_addr(a->out), a->m,
                         a->k, a->accumulate);
}

/* Whether the device's f32 arithmetic keeps subnormal results: scale_acc's shader on
 * one element, 2^-70 · 2^-70 = 2^-140, read back from the argument memory (host
 * visible). A driver may flush them whatever the shaders ask (DenormPreserve), so
 * the backend says what the device does, not what it lists. */
br_status br_vk_probe_subnormals(br_ctx *ctx, int *kept) {
    float *v;
    VkDeviceAddress at;
    BR_TRY(br_vk_args(ctx, 3 * sizeof *v, (void **)&v, &at));
    v[0] = 0x1p-70f, v[1] = 0x1p-70f, v[2] = -1.0f;
    BR_TRY(run_scale_acc(ctx, at, at + sizeof *v, at + 2 * sizeof *v, 1, 1, 0));
    BR_TRY(br_vk_flush(ctx));
    const float got = v[2];
    if (got != 0x1p-140f && got != 0.0f)
        return br_fail(ctx, BR_E_DEVICE, "vulkan: the subnormal probe computed %a for 2^-140",
                       (double)got);
    *kept = got != 0.0f;
    return BR_OK;
}

br_status br_vk_scale_acc2(br_ctx *ctx, const br_op *op) {
    const br_scale_acc2_args *a = &op->u.scale_acc2;
    struct {
        uint64_t a0, col0, a1, col1, out;
        uint32_t m, k;
    } x = {br_vk_addr(a->a0),  br_vk_addr(a->col0), br_vk_addr(a->a1), br_vk_addr(a->col1),
           br_vk_addr(a->out), (uint32_t)a->m,      (uint32_t)a->k};
    return launch(ctx, BR_VK_SH_scale_acc2, &x, sizeof x, a->m * a->k);
}

br_status br_vk_f16_to_f32(br_ctx *ctx, const br_op *op) {
    const br_unary_args *a = &op->u.unary;
    struct {
        uint64_t src, dst;
        uint32_t n;
    } x = {br_vk_addr(a->a), br_vk_addr(a->out), (uint32_t)a->n};
    return launch(ctx, BR_VK_SH_f16_to_f32, &x, sizeof x, a->n);
}

br_status br_vk_add(br_ctx *ctx, const br_op *op) {
    const br_unary_args *a = &op->u.unary;
    struct {
        uint64_t a, b, out;
        uint32_t n;
    } x = {br_vk_addr(a->a), br_vk_addr(a->b), br_vk_addr(a->out), (uint32_t)a->n};
    return launch(ctx, BR_VK_SH_add, &x, sizeof x, a->n);
}

br_status br_vk_split_qg(br_ctx *ctx, const br_op *op) {
    const br_split_qg_args *a = &op->u.split_qg;
    struct {
        uint64_t qg, q, gate;
        uint32_t rows, hd, merge;
    } x = {br_vk_addr(a->qg),           br_vk_addr(a->q), br_vk_addr(a->gate),
           (uint32_t)(a->m * a->heads), (uint32_t)a->hd,  (uint32_t)a->merge};
    return launch(ctx, BR_VK_SH_split_qg, &x, sizeof x, a->m * a->heads * a->hd);
}
