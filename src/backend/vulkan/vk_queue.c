/* Recording and submitting: the command buffer ops record into, the barrier after
 * each dispatch, the argument arena, pipelines made on first use (the coop GEMM's,
 * specialized per shape, are kept by vk_coop.c), and the submit that waits for
 * everything recorded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/vulkan/vk_internal.h"

/* Bytes of the argument arena: a few thousand dispatches between submits. */
#define ARGS_BYTES ((size_t)1 << 20)
/* Alignment of each argument block (8-byte addresses, and room for vectors). */
#define ARGS_ALIGN 16

br_status br_vk_check(br_ctx *ctx, VkResult r, const char *what, const char *file, int line) {
    if (r == VK_SUCCESS) return BR_OK;
    const char *base = strrchr(file, '/');
    return br_fail(ctx,
                   r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY
                       ? BR_E_NOMEM
                       : BR_E_DEVICE,
                   "Vulkan error in %s: %s at %s:%d", what, br_vk_result_name(r),
                   base ? base + 1 : file, line);
}

const char *br_vk_result_name(VkResult r) {
    switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_INCOMPLETE: return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FORMAT_NOT_SUPPORTED: return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
    default: return "VkResult (unnamed)";
    }
}

br_status br_vk_cmd(br_ctx *ctx, VkCommandBuffer *out) {
    br_vk *s = br_vk_of(ctx);
    if (!s->recording) {
        VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                       .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
        BR_VK(ctx, vkBeginCommandBuffer(s->cmd, &bi));
        s->recording = 1;
    }
    *out = s->cmd;
    return BR_OK;
}

void br_vk_barrier(br_vk *s) {
    VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                         VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
    VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    vkCmdPipelineBarrier(s->cmd, st, st, 0, 1, &mb, 0, NULL, 0, NULL);
}

br_status br_vk_flush(br_ctx *ctx) {
    br_vk *s = br_vk_of(ctx);
    if (!s->recording) return BR_OK;
    s->recording = 0;
    s->args.used = 0;
    s->staging.used = 0;
    s->recorded = 0;
    BR_VK(ctx, vkEndCommandBuffer(s->cmd));
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .commandBufferCount = 1,
                       .pCommandBuffers = &s->cmd};
    BR_VK(ctx, vkQueueSubmit(s->queue, 1, &si, s->fence));
    BR_VK(ctx, vkWaitForFences(s->dev, 1, &s->fence, VK_TRUE, UINT64_MAX));
    BR_VK(ctx, vkResetFences(s->dev, 1, &s->fence));
    BR_VK(ctx, vkResetCommandBuffer(s->cmd, 0));
    return BR_OK;
}

br_status br_vk_args(br_ctx *ctx, size_t bytes, void **host, VkDeviceAddress *addr) {
    br_vk *s = br_vk_of(ctx);
    if (!s->args.buf) BR_TRY(br_vk_hostbuf_new(ctx, ARGS_BYTES, &s->args));
    size_t need = (bytes + ARGS_ALIGN - 1) / ARGS_ALIGN * ARGS_ALIGN;
    if (need > s->args.bytes)
        return br_fail(ctx, BR_E_ARG, "vulkan: an argument block of %zu bytes is larger than %zu",
                       bytes, s->args.bytes);
    if (s->args.used + need > s->args.bytes) BR_TRY(br_vk_flush(ctx));
    *host = (char *)s->args.map + s->args.used;
    *addr = s->args.addr + s->args.used;
    s->args.used += need;
    return BR_OK;
}

/* SPIR-V words of the instructions common.glsl adds for DenormPreserve */
enum {
    SPV_OP_CAPABILITY = 17,
    SPV_OP_EXECUTION_MODE = 16,
    SPV_CAPABILITY_DENORM_PRESERVE = 4464,
    SPV_EXECUTION_MODE_DENORM_PRESERVE = 4459,
    SPV_HEADER_WORDS = 5,
};

/* A copy of code (words long) without its DenormPreserve capability and execution
 * modes, *out_words long (the caller frees it); NULL where the instruction stream is
 * malformed or memory is short (the module then goes to the driver as it is). */
static uint32_t *strip_denorm_preserve(const uint32_t *code, size_t words, size_t *out_words) {
    uint32_t *o = malloc(words * sizeof *o);
    if (!o || words < SPV_HEADER_WORDS) {
        free(o);
        return NULL;
    }
    memcpy(o, code, SPV_HEADER_WORDS * sizeof *o);
    size_t w = SPV_HEADER_WORDS;
    for (size_t i = SPV_HEADER_WORDS; i < words;) {
        const uint32_t len = code[i] >> 16, op = code[i] & 0xffffu;
        if (len == 0 || i + len > words) {
            free(o);
            return NULL;
        }
        const int drop =
            (op == SPV_OP_CAPABILITY && len == 2 && code[i + 1] == SPV_CAPABILITY_DENORM_PRESERVE) ||
            (op == SPV_OP_EXECUTION_MODE && len >= 3 && code[i + 2] == SPV_EXECUTION_MODE_DENORM_PRESERVE);
        if (!drop) {
            memcpy(o + w, code + i, len * sizeof *o);
            w += len;
        }
        i += len;
    }
    *out_words = w;
    return o;
}

br_status br_vk_create_pipeline(br_vk *s, br_vk_shader sh, const VkSpecializationInfo *spec,
                                VkPipelineShaderStageCreateFlags flags, VkPipeline *out, char *err,
                                size_t n) {
    size_t bytes = 0;
    const uint32_t *code = br_vk_spirv(sh, &bytes);
    if (!code) {
        snprintf(err, n, "vulkan: shader %s is not in this build", br_vk_shader_name(sh));
        return BR_E_UNSUPPORTED;
    }
    uint32_t *stripped = NULL;
    if (!s->denorm_preserve) {
        size_t words = 0;
        stripped = strip_denorm_preserve(code, bytes / 4, &words);
        if (stripped) code = stripped, bytes = words * 4;
    }
    VkShaderModuleCreateInfo mci = {
        .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = bytes, .pCode = code};
    VkShaderModule mod;
    VkResult r = vkCreateShaderModule(s->dev, &mci, NULL, &mod);
    free(stripped);
    if (r != VK_SUCCESS) {
        snprintf(err, n, "vulkan: shader %s: vkCreateShaderModule failed (%s)",
                 br_vk_shader_name(sh), br_vk_result_name(r));
        return BR_E_DEVICE;
    }
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .flags = flags,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = mod,
                  .pName = "main",
                  .pSpecializationInfo = spec},
        .layout = s->layout};
    *out = VK_NULL_HANDLE;
    r = vkCreateComputePipelines(s->dev, VK_NULL_HANDLE, 1, &ci, NULL, out);
    vkDestroyShaderModule(s->dev, mod, NULL);
    if (r != VK_SUCCESS) {
        *out = VK_NULL_HANDLE;
        snprintf(err, n, "vulkan: shader %s: vkCreateComputePipelines failed (%s)",
                 br_vk_shader_name(sh), br_vk_result_name(r));
        return BR_E_DEVICE;
    }
    return BR_OK;
}

br_status br_vk_dispatch(br_ctx *ctx, br_vk_shader sh, VkDeviceAddress args, uint32_t gx,
                         uint32_t gy) {
    br_vk *s = br_vk_of(ctx);
    if (!s->pipe[sh]) {
        char err[192];
        br_status st = br_vk_create_pipeline(s, sh, NULL, 0, &s->pipe[sh], err, sizeof err);
        if (st != BR_OK) return br_fail(ctx, st, "%s", err);
    }
    return br_vk_dispatch_pipeline(ctx, s->pipe[sh], args, gx, gy);
}

br_status br_vk_dispatch_pipeline(br_ctx *ctx, VkPipeline p, VkDeviceAddress args, uint32_t gx,
                                  uint32_t gy) {
    br_vk *s = br_vk_of(ctx);
    VkCommandBuffer cmd;
    BR_TRY(br_vk_cmd(ctx, &cmd));
    uint64_t pc = args;
    vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p);
    vkCmdPushConstants(cmd, s->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof pc, &pc);
    vkCmdDispatch(cmd, gx ? gx : 1, gy ? gy : 1, 1);
    br_vk_barrier(s);
    s->recorded++;
    ctx->stats.launches++;
    return BR_OK;
}
