/* The GEMMs on Vulkan: br_mm, br_mm_bits (the bitmap expanded in the shader) and
 * br_mm_tn on the tiled shader (shaders/mm_tiled.comp); br_ctx_last_kernel names it
 * "vk_tiled(OP)". */
#include <stdio.h>

#include "backend/vulkan/vk_internal.h"

/* shaders/mm_tiled.comp's arguments */
typedef struct mm_args {
    uint64_t act, plane, out, colscale, c;
    uint32_t m, n, k, lda, ldp, ldo, ocol;
    uint32_t mode, c_f16, plain;
    float oscale, beta;
} mm_args;

enum { MODE_F16 = 0, MODE_BITS_ROWS = 1, MODE_BITS_COLS = 2, MODE_TN = 3 };

static br_status run_tiled(br_ctx *ctx, const br_op *op, uint32_t mode) {
    const br_mm_args *a = &op->u.mm;
    const br_gemm *g = &a->g;
    mm_args *h;
    VkDeviceAddress args;
    BR_TRY(br_vk_args(ctx, sizeof *h, (void **)&h, &args));
    *h = (mm_args){.act = br_vk_addr(a->act),
                   .plane = br_vk_addr(a->plane),
                   .out = br_vk_addr(a->out),
                   .colscale = br_vk_addr(g->colscale),
                   .c = br_vk_addr(g->c),
                   .m = (uint32_t)g->m,
                   .n = (uint32_t)g->n,
                   .k = (uint32_t)g->k,
                   .lda = (uint32_t)g->lda,
                   .ldp = (uint32_t)a->ldp,
                   .ldo = (uint32_t)g->ldo,
                   .ocol = (uint32_t)g->ocol,
                   .mode = mode,
                   .c_f16 = g->c && br_buf_dtype(g->c) == BR_F16,
                   .plain = g->oscale == 1.0f && !g->colscale && !g->c,
                   .oscale = g->oscale,
                   .beta = g->beta};
    size_t gx = (g->n + 63) / 64, gy = (g->m + 63) / 64;
    if (gx > BR_VK_MAX_GROUPS || gy > BR_VK_MAX_GROUPS)
        return br_fail(ctx, BR_E_UNSUPPORTED,
                       "%s: %zu×%zu outputs is more than the Vulkan GEMM's grid covers",
                       br_op_name(op->kind), g->m, g->n);
    BR_TRY(br_vk_dispatch(ctx, BR_VK_SH_mm_tiled, args, (uint32_t)gx, (uint32_t)gy));
    snprintf(ctx->kernel, sizeof ctx->kernel, "vk_tiled(%s)", br_op_name(op->kind));
    return BR_OK;
}

br_status br_vk_mm(br_ctx *ctx, const br_op *op) { return run_tiled(ctx, op, MODE_F16); }

br_status br_vk_mm_bits(br_ctx *ctx, const br_op *op) {
    return run_tiled(ctx, op, op->u.mm.layout == BR_BITS_ROWS ? MODE_BITS_ROWS : MODE_BITS_COLS);
}

br_status br_vk_mm_tn(br_ctx *ctx, const br_op *op) { return run_tiled(ctx, op, MODE_TN); }
