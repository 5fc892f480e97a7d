/* The Vulkan device: instance, the physical device vulkan:N names, the features the
 * shaders need (checked, refused with a message naming the missing one), those the
 * cooperative-matrix GEMM needs where the device has them (vk_coop.c), one compute
 * queue, its command buffer and fence, and the pipeline layout every shader shares. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/vulkan/vk_internal.h"

#define ERR(...)                                                                                   \
    do {                                                                                           \
        if (err && n) snprintf(err, n, __VA_ARGS__);                                               \
    } while (0)

static const char *type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU (software)";
    default: return "other";
    }
}

/* The first compute-capable queue family of p, or -1. */
static int compute_family(VkPhysicalDevice p) {
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(p, &nq, NULL);
    VkQueueFamilyProperties q[32];
    if (nq > 32) nq = 32;
    vkGetPhysicalDeviceQueueFamilyProperties(p, &nq, q);
    for (uint32_t i = 0; i < nq; i++)
        if (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) return (int)i;
    return -1;
}

/* Rank of a device for the default choice: discrete, integrated, virtual, other, CPU. */
static int preference(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 4;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 3;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 0;
    default: return 1;
    }
}

/* What the shaders need that p lacks ("" when nothing). */
static const char *missing_feature(VkPhysicalDevice p, const VkPhysicalDeviceProperties *pr) {
    if (pr->apiVersion < VK_API_VERSION_1_2) return "Vulkan 1.2";
    VkPhysicalDeviceVulkan11Features f11 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceVulkan12Features f12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .pNext = &f11};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                   .pNext = &f12};
    vkGetPhysicalDeviceFeatures2(p, &f);
    if (!f12.bufferDeviceAddress) return "bufferDeviceAddress";
    if (!f11.storageBuffer16BitAccess) return "storageBuffer16BitAccess";
    if (!f.features.shaderInt64) return "shaderInt64";
    if (!f.features.shaderInt16) return "shaderInt16";
    if (!f.features.shaderFloat64) return "shaderFloat64";
    if (compute_family(p) < 0) return "a compute queue";
    return "";
}

static uint32_t memory_type(VkPhysicalDevice p, VkMemoryPropertyFlags want, int *found) {
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(p, &mp);
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
        if ((mp.memoryTypes[i].propertyFlags & want) == want) {
            *found = 1;
            return i;
        }
    *found = 0;
    return 0;
}

static br_status make_instance(VkInstance *inst, char *err, size_t n) {
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .pApplicationName = "bitrank",
                             .pEngineName = "bitrank",
                             .apiVersion = VK_API_VERSION_1_2};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pApplicationInfo = &app};
    VkResult r = vkCreateInstance(&ci, NULL, inst);
    if (r != VK_SUCCESS) {
        ERR("no Vulkan driver usable: vkCreateInstance failed (%s)", br_vk_result_name(r));
        return BR_E_UNSUPPORTED;
    }
    return BR_OK;
}

/* s->dev on s->phys with one queue of s->qfam and the features every shader needs,
 * and with coop, those of the cooperative-matrix GEMM that s->coop found. */
static VkResult create_device(br_vk *s, int coop) {
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                   .queueFamilyIndex = s->qfam,
                                   .queueCount = 1,
                                   .pQueuePriorities = &prio};
    VkPhysicalDeviceVulkan11Features f11 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
        .storageBuffer16BitAccess = VK_TRUE};
    VkPhysicalDeviceVulkan12Features f12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
        .pNext = &f11,
        .bufferDeviceAddress = VK_TRUE};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                   .pNext = &f12};
    f.features.shaderInt64 = VK_TRUE;
    f.features.shaderInt16 = VK_TRUE;
    f.features.shaderFloat64 = VK_TRUE;
    const char *ext[2];
    uint32_t n_ext = 0;
    br_vk_coop_enable ce;
    if (coop) br_vk_coop_enable_on(s, &ce, &f12, &f.pNext, ext, &n_ext);
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .pNext = &f,
                              .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci,
                              .enabledExtensionCount = n_ext,
                              .ppEnabledExtensionNames = n_ext ? ext : NULL};
    VkResult r = vkCreateDevice(s->phys, &dci, NULL, &s->dev);
    if (r != VK_SUCCESS) s->dev = VK_NULL_HANDLE;
    return r;
}

br_status br_vk_open_device(br_vk *s, int index, char *err, size_t n) {
    BR_TRY(make_instance(&s->inst, err, n));
    uint32_t np = 0;
    VkResult r = vkEnumeratePhysicalDevices(s->inst, &np, NULL);
    VkPhysicalDevice devs[16];
    if (np > 16) np = 16;
    if (r == VK_SUCCESS) r = vkEnumeratePhysicalDevices(s->inst, &np, devs);
    if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || np == 0) {
        ERR("no Vulkan device: the loader lists none (%s)", br_vk_result_name(r));
        return BR_E_UNSUPPORTED;
    }
    if (index >= (int)np) {
        ERR("vulkan:%d does not exist (%u Vulkan device%s found)", index, np, np == 1 ? "" : "s");
        return BR_E_ARG;
    }
    if (index < 0) { /* the most capable kind of device that has what the shaders need */
        int best = -1, best_pref = -1;
        for (uint32_t i = 0; i < np; i++) {
            VkPhysicalDeviceProperties pr;
            vkGetPhysicalDeviceProperties(devs[i], &pr);
            int pref = preference(pr.deviceType);
            if (missing_feature(devs[i], &pr)[0]) continue;
            if (pref > best_pref) best = (int)i, best_pref = pref;
        }
        if (best < 0) {
            ERR("no Vulkan device has what bitrank's shaders need (Vulkan 1.2, "
                "bufferDeviceAddress, "
                "16-bit storage, 64- and 16-bit integers, 64-bit floats)");
            return BR_E_UNSUPPORTED;
        }
        index = best;
    }
    s->index = index;
    s->phys = devs[index];
    vkGetPhysicalDeviceProperties(s->phys, &s->props);
    const char *miss = missing_feature(s->phys, &s->props);
    if (miss[0]) {
        ERR("vulkan:%d %s has no %s, which bitrank's shaders need", index, s->props.deviceName,
            miss);
        return BR_E_UNSUPPORTED;
    }
    int have_dev = 0, have_host = 0;
    s->mem_device = memory_type(s->phys, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, &have_dev);
    s->mem_host = memory_type(
        s->phys, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
        &have_host);
    if (!have_dev || !have_host) {
        ERR("vulkan:%d %s has no %s memory type", index, s->props.deviceName,
            have_dev ? "host-visible coherent" : "device-local");
        return BR_E_UNSUPPORTED;
    }
    s->qfam = (uint32_t)compute_family(s->phys);
    {
        VkPhysicalDeviceFloatControlsProperties fc = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES};
        VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                          .pNext = &fc};
        vkGetPhysicalDeviceProperties2(s->phys, &p2);
        s->denorm_preserve = fc.shaderDenormPreserveFloat32 == VK_TRUE;
    }
    br_vk_coop_probe(s);
    r = create_device(s, 1);
    if (r != VK_SUCCESS && s->coop.emulable) {
        /* the cooperative-matrix GEMM's features are the only optional part: without
         * them the device still runs everything, its GEMMs on the tiled shader */
        snprintf(s->coop.why, sizeof s->coop.why,
                 "vkCreateDevice with the cooperative-matrix GEMM's features failed (%s)",
                 br_vk_result_name(r));
        snprintf(s->coop.why_emulated, sizeof s->coop.why_emulated,
                 "vkCreateDevice with the cooperative-matrix GEMM's features failed (%s)",
                 br_vk_result_name(r));
        s->coop.usable = s->coop.emulable = 0;
        r = create_device(s, 0);
    }
    if (r != VK_SUCCESS) {
        ERR("vulkan:%d %s: vkCreateDevice failed (%s)", index, s->props.deviceName,
            br_vk_result_name(r));
        return BR_E_DEVICE;
    }
    vkGetDeviceQueue(s->dev, s->qfam, 0, &s->queue);

    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = s->qfam};
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkPushConstantRange pc = {
        .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = sizeof(uint64_t)};
    VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .pushConstantRangeCount = 1,
                                      .pPushConstantRanges = &pc};
    if ((r = vkCreateCommandPool(s->dev, &pci, NULL, &s->pool)) != VK_SUCCESS ||
        (r = vkCreateFence(s->dev, &fci, NULL, &s->fence)) != VK_SUCCESS ||
        (r = vkCreatePipelineLayout(s->dev, &lci, NULL, &s->layout)) != VK_SUCCESS) {
        ERR("vulkan:%d %s: creating the command pool, fence or pipeline layout failed (%s)", index,
            s->props.deviceName, br_vk_result_name(r));
        return BR_E_DEVICE;
    }
    VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                       .commandPool = s->pool,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                       .commandBufferCount = 1};
    if ((r = vkAllocateCommandBuffers(s->dev, &cai, &s->cmd)) != VK_SUCCESS) {
        ERR("vulkan:%d: vkAllocateCommandBuffers failed (%s)", index, br_vk_result_name(r));
        return BR_E_DEVICE;
    }
    return BR_OK;
}

void br_vk_close_device(br_vk *s) {
    if (s->dev) {
        vkDeviceWaitIdle(s->dev);
        for (int i = 0; i < BR_VK_SHADER_COUNT; i++)
            if (s->pipe[i]) vkDestroyPipeline(s->dev, s->pipe[i], NULL);
        br_vk_coop_release(s);
        if (s->timers) vkDestroyQueryPool(s->dev, s->timers, NULL);
        if (s->layout) vkDestroyPipelineLayout(s->dev, s->layout, NULL);
        if (s->fence) vkDestroyFence(s->dev, s->fence, NULL);
        if (s->pool) vkDestroyCommandPool(s->dev, s->pool, NULL);
        vkDestroyDevice(s->dev, NULL);
    }
    if (s->inst) vkDestroyInstance(s->inst, NULL);
}

/* Whether a Vulkan GPU (not a software device) with what the shaders need is there:
 * "auto" takes the Vulkan backend only then, since a software device (lavapipe) is
 * slower than the CPU backend. */
int br_vulkan_gpu_present(void) {
    VkInstance inst;
    if (make_instance(&inst, NULL, 0) != BR_OK) return 0;
    uint32_t np = 0;
    VkPhysicalDevice devs[16];
    int found = 0;
    if (vkEnumeratePhysicalDevices(inst, &np, NULL) == VK_SUCCESS) {
        if (np > 16) np = 16;
        VkResult r = vkEnumeratePhysicalDevices(inst, &np, devs);
        for (uint32_t i = 0; (r == VK_SUCCESS || r == VK_INCOMPLETE) && i < np; i++) {
            VkPhysicalDeviceProperties pr;
            vkGetPhysicalDeviceProperties(devs[i], &pr);
            if (preference(pr.deviceType) > 0 && !missing_feature(devs[i], &pr)[0]) found = 1;
        }
    }
    vkDestroyInstance(inst, NULL);
    return found;
}

const char *br_vk_type_name(VkPhysicalDeviceType t) { return type_name(t); }
