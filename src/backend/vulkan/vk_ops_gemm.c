/* The GEMMs on Vulkan: br_mm, br_mm_bits (the bitmap expanded in the shader) and
 * br_mm_tn, each on one of two shaders with one argument block and a grid of square
 * output tiles (64×64; mm_coop's 128×128 or 64×64, vk_coop.c picks):
 *   shaders/mm_coop.comp   cooperative matrices, where the device has them
 *                          (vk_coop.c); br_ctx_last_kernel "vk_coop MxNxK (OP) tile T"
 *   shaders/mm_tiled.comp  plain f32 arithmetic, everywhere; "vk_tiled(OP)"
 * The option vk_gemm picks: auto (coop where the device can), tiled, coop
 * (BR_E_UNSUPPORTED, saying what is missing, on a device that cannot), or
 * coop_emulated (mm_coop.comp's own code with its matrix operations in plain
 * arithmetic, "vk_coop_emulated MxNxK (OP) tile T": how the shader is checked on
 * devices without cooperative matrices). vk_coop_shape forces the M×N×K (coop: one
 * the device lists). */
#include <stdio.h>
#include <string.h>

#include "backend/vulkan/vk_internal.h"
#include "core/options.h"

/* the shaders' arguments (their Args block) */
typedef struct mm_args {
    uint64_t act, plane, out, colscale, c;
    uint32_t m, n, k, lda, ldp, ldo, ocol;
    uint32_t mode, c_f16, plain;
    float oscale, beta;
} mm_args;

enum { MODE_F16 = 0, MODE_BITS_ROWS = 1, MODE_BITS_COLS = 2, MODE_TN = 3 };

/* What runs a GEMM: the tiled shader, or a coop pipeline of shape[3]; on tiles of
 * tile×tile outputs. */
typedef struct gemm_plan {
    int coop; /* 0 tiled, 1 mm_coop, 2 mm_coop_emulated */
    uint32_t shape[3];
    uint32_t tile;
    VkPipeline pipe;
} gemm_plan;

static const char *const shape_names[BR_VK_COOP_SHAPE_COUNT] = {BR_VK_COOP_SHAPES};

/* Whether the device lists shape (M, N, K) among those mm_coop can take. */
static int listed(const br_vk_coop *c, const uint32_t shape[3]) {
    for (uint32_t i = 0; i < c->nshapes; i++)
        if (!memcmp(c->shapes[i], shape, sizeof c->shapes[i])) return 1;
    return 0;
}

/* The plan the context's options and the device give. A device whose driver refuses
 * a coop pipeline in the shape auto takes loses mm_coop for good (the reason kept in
 * s->coop.why): auto goes on with the tiled shader, a forced coop fails saying why. */
static br_status plan_gemm(br_ctx *ctx, const br_op *op, uint32_t mode, gemm_plan *p) {
    br_vk *s = br_vk_of(ctx);
    br_vk_coop *c = &s->coop;
    const char *name = br_op_name(op->kind);
    const br_gemm *g = &op->u.mm.g;
    int want = ctx->opt.vk_gemm; /* 0 auto, 1 tiled, 2 coop, 3 coop_emulated */
    *p = (gemm_plan){.tile = 64};
    if (want == 1 || (want == 0 && !c->usable)) return BR_OK;
    int emulated = want == 3;
    if (emulated ? !c->emulable : !c->usable)
        return br_fail(ctx, BR_E_UNSUPPORTED, "%s: option vk_gemm=%s: not on %s: %s", name,
                       emulated ? "coop_emulated" : "coop", ctx->device_desc,
                       emulated ? c->why_emulated : c->why);
    p->coop = emulated ? 2 : 1;
    p->shape[0] = c->m, p->shape[1] = c->n, p->shape[2] = c->k;
    int forced = ctx->opt.vk_coop_shape;
    if (forced > 0) {
        const char *sn = shape_names[forced - 1];
        if (sscanf(sn, "%ux%ux%u", &p->shape[0], &p->shape[1], &p->shape[2]) != 3)
            return br_fail(ctx, BR_E_ARG, "%s: vk_coop_shape=%s is not MxNxK", name, sn);
        if (!emulated && !listed(c, p->shape))
            return br_fail(ctx, BR_E_UNSUPPORTED,
                           "%s: option vk_coop_shape=%s: %s does not list it among its "
                           "f16·f16 + f32 cooperative-matrix shapes at subgroup scope",
                           name, sn, ctx->device_desc);
        if (br_vk_coop_shared_bytes(p->shape[0], p->shape[1]) >
            s->props.limits.maxComputeSharedMemorySize)
            return br_fail(ctx, BR_E_UNSUPPORTED,
                           "%s: option vk_coop_shape=%s: its %zu bytes of shared memory are "
                           "more than %s has (%u)",
                           name, sn, br_vk_coop_shared_bytes(p->shape[0], p->shape[1]),
                           ctx->device_desc, s->props.limits.maxComputeSharedMemorySize);
    }
    char err[192];
    br_status st = br_vk_coop_pipeline(s, emulated, p->shape, mode, g->m, g->n, &p->pipe, &p->tile,
                                       err, sizeof err);
    if (st == BR_OK) return BR_OK;
    if (want != 0) return br_fail(ctx, st, "%s: %s", name, err);
    if (forced == 0) {
        c->usable = 0;
        snprintf(c->why, sizeof c->why, "%s", err);
    }
    *p = (gemm_plan){.tile = 64};
    return BR_OK;
}

static br_status run_gemm(br_ctx *ctx, const br_op *op, uint32_t mode) {
    const br_mm_args *a = &op->u.mm;
    const br_gemm *g = &a->g;
    gemm_plan plan;
    BR_TRY(plan_gemm(ctx, op, mode, &plan));
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
    size_t gx = (g->n + plan.tile - 1) / plan.tile, gy = (g->m + plan.tile - 1) / plan.tile;
    if (gx > BR_VK_MAX_GROUPS || gy > BR_VK_MAX_GROUPS)
        return br_fail(ctx, BR_E_UNSUPPORTED,
                       "%s: %zu×%zu outputs is more than the Vulkan GEMM's grid covers",
                       br_op_name(op->kind), g->m, g->n);
    if (!plan.coop) {
        BR_TRY(br_vk_dispatch(ctx, BR_VK_SH_mm_tiled, args, (uint32_t)gx, (uint32_t)gy));
        snprintf(ctx->kernel, sizeof ctx->kernel, "vk_tiled(%s)", br_op_name(op->kind));
        return BR_OK;
    }
    BR_TRY(br_vk_dispatch_pipeline(ctx, plan.pipe, args, (uint32_t)gx, (uint32_t)gy));
    snprintf(ctx->kernel, sizeof ctx->kernel, "%s %ux%ux%u (%s) tile %u",
             plan.coop == 2 ? "vk_coop_emulated" : "vk_coop", plan.shape[0], plan.shape[1],
             plan.shape[2], br_op_name(op->kind), plan.tile);
    return BR_OK;
}

br_status br_vk_mm(br_ctx *ctx, const br_op *op) { return run_gemm(ctx, op, MODE_F16); }

br_status br_vk_mm_bits(br_ctx *ctx, const br_op *op) {
    return run_gemm(ctx, op, op->u.mm.layout == BR_BITS_ROWS ? MODE_BITS_ROWS : MODE_BITS_COLS);
}

br_status br_vk_mm_tn(br_ctx *ctx, const br_op *op) { return run_gemm(ctx, op, MODE_TN); }
