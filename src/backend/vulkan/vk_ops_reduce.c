/* Column reductions on Vulkan, in the contract's order (backend/cpu/cpu_reduce.c):
 * one thread per (row block, column) sums its block into the workspace's partials
 * [nb][k] (colsum_part, or colsum_fused_part with the fused elementwise op), then
 * one thread per column sums the partials in block order (colsum_finish). */
#include <string.h>

#include "backend/vulkan/vk_internal.h"

typedef struct finish_args {
    uint64_t part, out;
    uint32_t nb, k, accumulate, group, stride;
} finish_args;

static br_status finish(br_ctx *ctx, const finish_args *x) {
    finish_args *h;
    VkDeviceAddress args;
    BR_TRY(br_vk_args(ctx, sizeof *h, (void **)&h, &args));
    *h = *x;
    return br_vk_dispatch(ctx, BR_VK_SH_colsum_finish, args, br_vk_groups(x->k), 1);
}

br_status br_vk_colsum(br_ctx *ctx, const br_op *op) {
    const br_colsum_args *a = &op->u.colsum;
    size_t nb = br_colsum_blocks(a->rows), k = a->k;
    VkDeviceAddress part;
    BR_TRY(br_vk_workspace(ctx, nb * k * sizeof(float), &part));
    struct {
        uint64_t a, b, f, part;
        uint32_t rows, k, block, nb, term;
    } * h;
    VkDeviceAddress args;
    BR_TRY(br_vk_args(ctx, sizeof *h, (void **)&h, &args));
    h->a = br_vk_addr(a->a);
    h->b = br_vk_addr(a->b);
    h->f = br_vk_addr(a->f);
    h->part = part;
    h->rows = (uint32_t)a->rows;
    h->k = (uint32_t)k;
    h->block = (uint32_t)br_colsum_block_rows(a->rows);
    h->nb = (uint32_t)nb;
    h->term = (uint32_t)a->term;
    BR_TRY(br_vk_dispatch(ctx, BR_VK_SH_colsum_part, args, br_vk_groups(nb * k), 1));
    return finish(ctx, &(finish_args){.part = part,
                                      .out = br_vk_addr(a->out),
                                      .nb = (uint32_t)nb,
                                      .k = (uint32_t)k,
                                      .accumulate = (uint32_t)a->accumulate});
}

br_status br_vk_colsum_fused(br_ctx *ctx, const br_op *op) {
    const br_colsum_fused_args *a = &op->u.colsum_fused;
    const br_fuse *fz = &a->fuse;
    size_t nb = br_colsum_blocks(a->rows), k = a->k;
    VkDeviceAddress part;
    BR_TRY(br_vk_workspace(ctx, nb * k * sizeof(float), &part));
    struct {
        uint64_t a, b, col, dst, dst_t, part;
        uint32_t rows, k, block, nb;
        uint32_t kind, accumulate, group, stride;
        uint32_t ld_t, mpad, kpad;
        float scale, t_scale;
    } * h;
    VkDeviceAddress args;
    BR_TRY(br_vk_args(ctx, sizeof *h, (void **)&h, &args));
    memset(h, 0, sizeof *h);
    h->a = br_vk_addr(a->a);
    h->b = br_vk_addr(a->b);
    h->col = br_vk_addr(fz->col);
    h->dst = br_vk_addr(fz->dst);
    h->dst_t = br_vk_addr(fz->dst_t);
    h->part = part;
    h->rows = (uint32_t)a->rows;
    h->k = (uint32_t)k;
    h->block = (uint32_t)br_colsum_block_rows(a->rows);
    h->nb = (uint32_t)nb;
    h->kind = (uint32_t)fz->kind;
    h->accumulate = (uint32_t)fz->accumulate;
    h->group = (uint32_t)a->group;
    h->stride = (uint32_t)a->stride;
    h->ld_t = (uint32_t)br_pad_tokens(a->rows);
    h->mpad = (uint32_t)br_pad_rows(a->rows);
    h->kpad = (uint32_t)br_pad_rows(k);
    h->scale = fz->scale;
    h->t_scale = fz->t_scale;
    BR_TRY(br_vk_dispatch(ctx, BR_VK_SH_colsum_fused_part, args, br_vk_groups(nb * k), 1));
    if (fz->dst_t && br_pad_rows(k) > k) { /* dst_t's rows k..pad_rows(k)−1: zero */
        br_op zero = {.kind = BR_OP_FILL};
        zero.u.fill = (br_fill_args){.buf = fz->dst_t,
                                     .off = k * br_pad_tokens(a->rows),
                                     .count = (br_pad_rows(k) - k) * br_pad_tokens(a->rows)};
        BR_TRY(br_vk_fill(ctx, &zero));
    }
    return finish(ctx, &(finish_args){.part = part,
                                      .out = br_vk_addr(a->sum),
                                      .nb = (uint32_t)nb,
                                      .k = (uint32_t)k,
                                      .accumulate = (uint32_t)!a->overwrite,
                                      .group = (uint32_t)a->group,
                                      .stride = (uint32_t)a->stride});
}
