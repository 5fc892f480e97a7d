/* The cooperative-matrix GEMM's device side (shaders/mm_coop.comp, dispatched by
 * vk_ops_gemm.c): whether a device can run it, in which shapes, what vkCreateDevice
 * enables for it, and its pipelines, one per specialization.
 *
 * Beyond what every shader needs (vk_device.c), both of its builds need
 *   - subgroups in compute shaders with the basic operations (gl_SubgroupID), and
 *     full subgroups (VK_EXT_subgroup_size_control's computeFullSubgroups): a
 *     cooperative matrix is spread over every invocation of its subgroup, and the
 *     shader's 2×2 grid of quarters needs exactly 4 subgroups of the size the device
 *     reports (SPIR-V 1.5 without the varying-size flag runs at that size). The
 *     instance is made for Vulkan 1.2, so subgroup size control is the extension;
 *   - shaderFloat16 (f16 shared memory, and the matrix elements);
 *   - a workgroup of 4 subgroups and the shader's shared memory within the limits.
 * mm_coop itself needs VK_KHR_cooperative_matrix: the cooperativeMatrix feature,
 * compute among the cooperativeMatrixSupportedStages, and a listed configuration
 * with f16 A and B, f32 C and result, subgroup scope, no saturating accumulation,
 * and M, N, K each 8, 16 or 32 (they divide a subgroup's 32×32 or 64×64 quarter and
 * the k step of 32, and every piece starts on a 16-byte boundary of the stage); and
 * vulkanMemoryModel (a module with SPV_KHR_cooperative_matrix uses the Vulkan memory
 * model). Where something is missing the GEMMs run on the tiled shader, and
 * s->coop.why (why_emulated) says what was missing.
 *
 * The geometry (mm_coop.comp's BT and NBUF) is picked per GEMM: the 128×128 tile,
 * where both edges pass 64 and its grid has at least c->big_groups workgroups (on a
 * GPU 128, about one per multiprocessor of a large one: fewer, and the 64 tile's
 * four times as many workgroups keep more of the device busy; on a CPU, whose few
 * cores any grid fills, 1), else the 64×64 one; two stage buffers where the shared
 * memory allows, else one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/vulkan/vk_internal.h"

/* The shader's subgroups per workgroup, and its stage's row stride in halves for a
 * step of 32 k (mm_coop.comp: LDK). */
#define SUBGROUPS 4u
#define STAGE_STRIDE 40u
/* GPUs: the 128 tile from this many of its workgroups (see the top) */
#define BIG_GROUPS_GPU 128u

static int has_extension(VkPhysicalDevice p, const char *name) {
    uint32_t n = 0;
    if (vkEnumerateDeviceExtensionProperties(p, NULL, &n, NULL) != VK_SUCCESS || n == 0) return 0;
    VkExtensionProperties *e = calloc(n, sizeof *e);
    if (!e) return 0;
    int found = 0;
    VkResult r = vkEnumerateDeviceExtensionProperties(p, NULL, &n, e);
    for (uint32_t i = 0; (r == VK_SUCCESS || r == VK_INCOMPLETE) && i < n; i++)
        if (!strcmp(e[i].extensionName, name)) found = 1;
    free(e);
    return found;
}

/* Shared memory of the shader at shape m×n, tile and nbuf stage buffers: As and Bs,
 * f16 [tile][40] each per buffer, and 4 f32 stages of m×n. */
static size_t geometry_bytes(uint32_t m, uint32_t n, uint32_t tile, uint32_t nbuf) {
    return (size_t)nbuf * 2u * tile * STAGE_STRIDE * 2u + (size_t)SUBGROUPS * m * n * 4u;
}

size_t br_vk_coop_shared_bytes(uint32_t m, uint32_t n) { return geometry_bytes(m, n, 64, 1); }

/* The configurations of the device's list mm_coop can take, into c->shapes, and the
 * one auto takes: 16×16×16 where it is there (what every implementation of the
 * extension lists), else the first (the list is in the device's order of
 * preference). 0 and c->why when there is none. */
static int list_shapes(br_vk *s, PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR list) {
    br_vk_coop *c = &s->coop;
    uint32_t n = 0;
    VkResult r = list(s->phys, &n, NULL);
    if (r != VK_SUCCESS || n == 0) {
        snprintf(c->why, sizeof c->why,
                 "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR lists no configuration (%s)",
                 br_vk_result_name(r));
        return 0;
    }
    VkCooperativeMatrixPropertiesKHR *p = calloc(n, sizeof *p);
    if (!p) {
        snprintf(c->why, sizeof c->why, "out of host memory listing cooperative-matrix shapes");
        return 0;
    }
    for (uint32_t i = 0; i < n; i++)
        p[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR;
    r = list(s->phys, &n, p);
    c->nshapes = 0;
    int pick = -1;
    for (uint32_t i = 0; (r == VK_SUCCESS || r == VK_INCOMPLETE) && i < n; i++) {
        const VkCooperativeMatrixPropertiesKHR *q = &p[i];
        int divides = (q->MSize == 8 || q->MSize == 16 || q->MSize == 32) &&
                      (q->NSize == 8 || q->NSize == 16 || q->NSize == 32) &&
                      (q->KSize == 8 || q->KSize == 16 || q->KSize == 32);
        if (q->AType != VK_COMPONENT_TYPE_FLOAT16_KHR ||
            q->BType != VK_COMPONENT_TYPE_FLOAT16_KHR ||
            q->CType != VK_COMPONENT_TYPE_FLOAT32_KHR ||
            q->ResultType != VK_COMPONENT_TYPE_FLOAT32_KHR || q->scope != VK_SCOPE_SUBGROUP_KHR ||
            q->saturatingAccumulation || !divides ||
            br_vk_coop_shared_bytes(q->MSize, q->NSize) >
                s->props.limits.maxComputeSharedMemorySize ||
            c->nshapes == BR_VK_COOP_MAX_SHAPES)
            continue;
        uint32_t *sh = c->shapes[c->nshapes];
        sh[0] = q->MSize, sh[1] = q->NSize, sh[2] = q->KSize;
        if (pick < 0 || (sh[0] == 16 && sh[1] == 16 && sh[2] == 16 &&
                         !(c->m == 16 && c->n == 16 && c->k == 16)))
            pick = (int)c->nshapes, c->m = sh[0], c->n = sh[1], c->k = sh[2];
        c->nshapes++;
    }
    if (r != VK_SUCCESS && r != VK_INCOMPLETE)
        snprintf(c->why, sizeof c->why,
                 "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR "
                 "failed (%s)",
                 br_vk_result_name(r));
    else if (pick < 0)
        snprintf(c->why, sizeof c->why,
                 "none of its %u cooperative-matrix configurations is f16 A, B and f32 C, result "
                 "at subgroup scope with M, N, K each 8, 16 or 32 and fitting %u bytes of shared "
                 "memory",
                 n, s->props.limits.maxComputeSharedMemorySize);
    free(p);
    return pick >= 0;
}

/* What both builds of the shader need (c->subgroup set): "" or what is missing. */
static const char *missing_common(br_vk *s, int has_size_control) {
    if (!has_size_control) return "VK_EXT_subgroup_size_control (full subgroups)";
    VkPhysicalDeviceSubgroupSizeControlFeatures fs = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
    VkPhysicalDeviceVulkan12Features f12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .pNext = &fs};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                   .pNext = &f12};
    vkGetPhysicalDeviceFeatures2(s->phys, &f);
    if (!fs.computeFullSubgroups) return "the feature computeFullSubgroups";
    if (!f12.shaderFloat16) return "the feature shaderFloat16";
    VkPhysicalDeviceSubgroupProperties psub = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 p = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                     .pNext = &psub};
    vkGetPhysicalDeviceProperties2(s->phys, &p);
    if (!(psub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) ||
        !(psub.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT))
        return "basic subgroup operations in compute shaders";
    const VkPhysicalDeviceLimits *lim = &s->props.limits;
    uint32_t sub = psub.subgroupSize;
    if (sub == 0 || sub > 256 || SUBGROUPS * sub > lim->maxComputeWorkGroupInvocations ||
        SUBGROUPS * sub > lim->maxComputeWorkGroupSize[0])
        return "room for a workgroup of 4 subgroups";
    if (br_vk_coop_shared_bytes(16, 16) > lim->maxComputeSharedMemorySize)
        return "the shared memory of a 16×16 stage";
    s->coop.subgroup = sub;
    return "";
}

/* What mm_coop needs beyond missing_common: "" or what is missing. */
static const char *missing_coop(br_vk *s) {
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR fc = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
    VkPhysicalDeviceVulkan12Features f12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .pNext = &fc};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                   .pNext = &f12};
    vkGetPhysicalDeviceFeatures2(s->phys, &f);
    if (!fc.cooperativeMatrix) return "the feature cooperativeMatrix";
    if (!f12.vulkanMemoryModel) return "the feature vulkanMemoryModel";
    VkPhysicalDeviceCooperativeMatrixPropertiesKHR pc = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_KHR};
    VkPhysicalDeviceProperties2 p = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                     .pNext = &pc};
    vkGetPhysicalDeviceProperties2(s->phys, &p);
    if (!(pc.cooperativeMatrixSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT))
        return "cooperative matrices in compute shaders";
    return "";
}

void br_vk_coop_probe(br_vk *s) {
    br_vk_coop *c = &s->coop;
    memset(c, 0, sizeof *c);
    c->m = c->n = c->k = 16;
    c->big_groups = s->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? 1u : BIG_GROUPS_GPU;
    int size_control = has_extension(s->phys, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    const char *miss = missing_common(s, size_control);
    c->emulable = !miss[0];
    if (miss[0]) snprintf(c->why_emulated, sizeof c->why_emulated, "device has no %s", miss);

    size_t bytes = 0;
    if (!br_vk_spirv(BR_VK_SH_mm_coop, &bytes)) {
        snprintf(c->why, sizeof c->why,
                 "this build has no cooperative-matrix shader (its glslang predates "
                 "GL_KHR_cooperative_matrix; scripts/install-deps fetches one into .deps/glslang)");
        return;
    }
    if (!has_extension(s->phys, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME)) {
        snprintf(c->why, sizeof c->why, "device has no VK_KHR_cooperative_matrix");
        return;
    }
    if (miss[0] || (miss = missing_coop(s))[0]) {
        snprintf(c->why, sizeof c->why, "device has VK_KHR_cooperative_matrix but no %s", miss);
        return;
    }
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR list =
        (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)vkGetInstanceProcAddr(
            s->inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
    if (!list) {
        snprintf(c->why, sizeof c->why,
                 "the Vulkan loader has no vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
        return;
    }
    c->usable = list_shapes(s, list);
    if (!c->usable) c->m = c->n = c->k = 16;
}

void br_vk_coop_enable_on(const br_vk *s, br_vk_coop_enable *e,
                          VkPhysicalDeviceVulkan12Features *f12, void **pnext, const char **ext,
                          uint32_t *n_ext) {
    memset(e, 0, sizeof *e);
    if (!s->coop.emulable) return; /* mm_coop needs all of this too */
    e->subgroup_size.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES;
    e->subgroup_size.computeFullSubgroups = VK_TRUE;
    e->subgroup_size.pNext = *pnext;
    *pnext = &e->subgroup_size;
    f12->shaderFloat16 = VK_TRUE;
    ext[(*n_ext)++] = VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME;
    if (!s->coop.usable) return;
    e->coop.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR;
    e->coop.cooperativeMatrix = VK_TRUE;
    e->coop.pNext = *pnext;
    *pnext = &e->coop;
    f12->vulkanMemoryModel = VK_TRUE;
    ext[(*n_ext)++] = VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME;
}

/* The geometry of a rows×cols GEMM in shape (see the top): tile and buffers. */
static void pick_geometry(const br_vk *s, const uint32_t shape[3], size_t rows, size_t cols,
                          uint32_t *tile, uint32_t *nbuf) {
    const br_vk_coop *c = &s->coop;
    uint32_t limit = s->props.limits.maxComputeSharedMemorySize;
    size_t groups = ((rows + 127) / 128) * ((cols + 127) / 128);
    *tile = rows > 64 && cols > 64 && groups >= c->big_groups &&
                    geometry_bytes(shape[0], shape[1], 128, 1) <= limit
                ? 128u
                : 64u;
    *nbuf = geometry_bytes(shape[0], shape[1], *tile, 2) <= limit ? 2u : 1u;
}

br_status br_vk_coop_pipeline(br_vk *s, int emulated, const uint32_t shape[3], uint32_t mode,
                              size_t rows, size_t cols, VkPipeline *out, uint32_t *tile, char *err,
                              size_t n) {
    br_vk_coop *c = &s->coop;
    uint32_t nbuf;
    pick_geometry(s, shape, rows, cols, tile, &nbuf);
    for (uint32_t i = 0; i < c->npipes; i++) {
        const br_vk_coop_pipe *p = &c->pipes[i];
        if (p->emulated == emulated && p->m == shape[0] && p->n == shape[1] && p->k == shape[2] &&
            p->mode == mode && p->tile == *tile && p->nbuf == nbuf) {
            *out = p->pipe;
            return BR_OK;
        }
    }
    if (c->npipes == BR_VK_COOP_MAX_PIPES) {
        snprintf(err, n, "vulkan: more than %d cooperative-matrix pipelines", BR_VK_COOP_MAX_PIPES);
        return BR_E_UNSUPPORTED;
    }
    /* constant_id 0: the workgroup size; 1, 2, 3: CM, CN, CK; 4 the mode; 5 the tile;
     * 6 the stage buffers */
    const uint32_t value[7] = {
        SUBGROUPS * c->subgroup, shape[0], shape[1], shape[2], mode, *tile, nbuf};
    VkSpecializationMapEntry map[7];
    for (uint32_t i = 0; i < 7; i++)
        map[i] = (VkSpecializationMapEntry){
            .constantID = i, .offset = i * (uint32_t)sizeof(uint32_t), .size = sizeof(uint32_t)};
    VkSpecializationInfo spec = {
        .mapEntryCount = 7, .pMapEntries = map, .dataSize = sizeof value, .pData = value};
    VkPipeline p = VK_NULL_HANDLE;
    BR_TRY(br_vk_create_pipeline(s, emulated ? BR_VK_SH_mm_coop_emulated : BR_VK_SH_mm_coop, &spec,
                                 VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT_EXT, &p,
                                 err, n));
    c->pipes[c->npipes++] = (br_vk_coop_pipe){.emulated = emulated,
                                              .m = shape[0],
                                              .n = shape[1],
                                              .k = shape[2],
                                              .mode = mode,
                                              .tile = *tile,
                                              .nbuf = nbuf,
                                              .pipe = p};
    *out = p;
    return BR_OK;
}

void br_vk_coop_release(br_vk *s) {
    for (uint32_t i = 0; i < s->coop.npipes; i++)
        vkDestroyPipeline(s->dev, s->coop.pipes[i].pipe, NULL);
    s->coop.npipes = 0;
}
