/* The embedded SPIR-V of every shader (shaders/NAME.comp, compiled and written as C
 * arrays by the build: cmake/embed_spirv.cmake), looked up by br_vk_shader. mm_coop's
 * is there only in a build with a glslang that compiles it (BR_HAVE_VK_COOPMAT);
 * mm_coop_emulated is mm_coop.comp built with BR_COOP_EMULATED. */
#include "backend/vulkan/vk_internal.h"

#define BR_VK_DECLARE(name)                                                                        \
    extern const unsigned char br_vk_spv_##name[];                                                 \
    extern const size_t br_vk_spv_##name##_size;
BR_VK_SHADERS(BR_VK_DECLARE)
BR_VK_DECLARE(mm_coop_emulated)
#ifdef BR_HAVE_VK_COOPMAT
BR_VK_DECLARE(mm_coop)
#else
static const size_t no_code = 0;
#endif
#undef BR_VK_DECLARE

typedef struct spv_entry {
    const char *name;
    const unsigned char *code;
    const size_t *bytes;
} spv_entry;

static const spv_entry table[BR_VK_SHADER_COUNT] = {
#define BR_VK_ENTRY(name) {#name, br_vk_spv_##name, &br_vk_spv_##name##_size},
    BR_VK_SHADERS(BR_VK_ENTRY)
#ifdef BR_HAVE_VK_COOPMAT
    BR_VK_ENTRY(mm_coop)
#else
    {"mm_coop", NULL, &no_code},
#endif
    BR_VK_ENTRY(mm_coop_emulated)
#undef BR_VK_ENTRY
};

const uint32_t *br_vk_spirv(br_vk_shader s, size_t *bytes) {
    *bytes = *table[s].bytes;
    return table[s].code ? (const uint32_t *)(const void *)table[s].code : NULL;
}

const char *br_vk_shader_name(br_vk_shader s) { return table[s].name; }
