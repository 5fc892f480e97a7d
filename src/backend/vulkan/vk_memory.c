/* Device memory: one VkBuffer with its own memory per allocation, addressed by its
 * device address; the sorted table that maps an address back to its buffer; the
 * host-visible arenas; the workspace. */
#include <stdlib.h>
#include <string.h>

#include "backend/vulkan/vk_internal.h"

static br_status make_buffer(br_ctx *ctx, br_vk *s, size_t bytes, uint32_t mem_type,
                             VkBufferUsageFlags extra, VkBuffer *buf, VkDeviceMemory *mem,
                             VkDeviceAddress *addr) {
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                              .size = bytes,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                                       VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT | extra,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    BR_VK(ctx, vkCreateBuffer(s->dev, &bci, NULL, buf));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(s->dev, *buf, &req);
    if (!(req.memoryTypeBits & (1u << mem_type))) {
        vkDestroyBuffer(s->dev, *buf, NULL);
        return br_fail(ctx, BR_E_DEVICE,
                       "vulkan:%d: a buffer cannot live in memory type %u (types allowed: %#x)",
                       s->index, mem_type, req.memoryTypeBits);
    }
    VkMemoryAllocateFlagsInfo flags = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                                       .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT};
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                .pNext = &flags,
                                .allocationSize = req.size,
                                .memoryTypeIndex = mem_type};
    VkResult r = vkAllocateMemory(s->dev, &mai, NULL, mem);
    if (r != VK_SUCCESS) {
        vkDestroyBuffer(s->dev, *buf, NULL);
        return br_fail(ctx, r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? BR_E_NOMEM : BR_E_DEVICE,
                       "vulkan:%d: allocating %zu bytes failed (%s)", s->index, bytes,
                       br_vk_result_name(r));
    }
    r = vkBindBufferMemory(s->dev, *buf, *mem, 0);
    if (r != VK_SUCCESS) {
        vkDestroyBuffer(s->dev, *buf, NULL);
        vkFreeMemory(s->dev, *mem, NULL);
        return br_vk_check(ctx, r, "vkBindBufferMemory", __FILE__, __LINE__);
    }
    VkBufferDeviceAddressInfo ai = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO,
                                    .buffer = *buf};
    *addr = vkGetBufferDeviceAddress(s->dev, &ai);
    return BR_OK;
}

/* Index of the first allocation whose address is above addr. */
static size_t upper(const br_vk *s, VkDeviceAddress addr) {
    size_t lo = 0, hi = s->nallocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->allocs[mid].addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

br_status br_vk_alloc_buffer(br_ctx *ctx, size_t bytes, br_vk_alloc *out) {
    br_vk *s = br_vk_of(ctx);
    if (s->nallocs == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        br_vk_alloc *a = realloc(s->allocs, cap * sizeof *a);
        if (!a) return br_fail(ctx, BR_E_NOMEM, "out of host memory for the allocation table");
        s->allocs = a;
        s->cap = cap;
    }
    br_vk_alloc a = {.bytes = bytes};
    BR_TRY(make_buffer(ctx, s, bytes, s->mem_device, 0, &a.buf, &a.mem, &a.addr));
    size_t at = upper(s, a.addr);
    memmove(s->allocs + at + 1, s->allocs + at, (s->nallocs - at) * sizeof *s->allocs);
    s->allocs[at] = a;
    s->nallocs++;
    *out = a;
    return BR_OK;
}

void br_vk_free_buffer(br_vk *s, br_vk_alloc *a) {
    if (!a->buf) return;
    size_t at = upper(s, a->addr);
    if (at > 0 && s->allocs[at - 1].addr == a->addr) {
        memmove(s->allocs + at - 1, s->allocs + at, (s->nallocs - at) * sizeof *s->allocs);
        s->nallocs--;
    }
    vkDestroyBuffer(s->dev, a->buf, NULL);
    vkFreeMemory(s->dev, a->mem, NULL);
    memset(a, 0, sizeof *a);
}

const br_vk_alloc *br_vk_find(const br_vk *s, VkDeviceAddress addr, VkDeviceSize *off) {
    size_t at = upper(s, addr);
    if (at == 0) return NULL;
    const br_vk_alloc *a = &s->allocs[at - 1];
    if (addr - a->addr >= a->bytes) return NULL;
    *off = addr - a->addr;
    return a;
}

br_status br_vk_hostbuf_new(br_ctx *ctx, size_t bytes, br_vk_hostbuf *out) {
    br_vk *s = br_vk_of(ctx);
    memset(out, 0, sizeof *out);
    BR_TRY(make_buffer(ctx, s, bytes, s->mem_host, 0, &out->buf, &out->mem, &out->addr));
    VkResult r = vkMapMemory(s->dev, out->mem, 0, VK_WHOLE_SIZE, 0, &out->map);
    if (r != VK_SUCCESS) {
        br_vk_hostbuf_free(s, out);
        return br_vk_check(ctx, r, "vkMapMemory", __FILE__, __LINE__);
    }
    out->bytes = bytes;
    return BR_OK;
}

void br_vk_hostbuf_free(br_vk *s, br_vk_hostbuf *h) {
    if (h->buf) vkDestroyBuffer(s->dev, h->buf, NULL);
    if (h->mem) vkFreeMemory(s->dev, h->mem, NULL); /* unmaps */
    memset(h, 0, sizeof *h);
}

br_status br_vk_workspace(br_ctx *ctx, size_t bytes, VkDeviceAddress *addr) {
    br_vk *s = br_vk_of(ctx);
    if (bytes < ctx->ws_need) bytes = ctx->ws_need;
    if (bytes < 256) bytes = 256;
    if (s->ws.bytes < bytes) {
        /* the recorded work may still use the old one */
        BR_TRY(br_vk_flush(ctx));
        br_vk_free_buffer(s, &s->ws);
        BR_TRY(br_vk_alloc_buffer(ctx, bytes + bytes / 4, &s->ws));
    }
    *addr = s->ws.addr;
    return BR_OK;
}
