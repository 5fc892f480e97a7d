/* Built without the Vulkan backend (BITRANK_VULKAN=OFF, or no Vulkan headers and
 * glslangValidator): asking for it says so. */
#include "core/internal.h"

const struct br_backend *br_vulkan_backend(void) { return NULL; }
int br_vulkan_gpu_present(void) { return 0; }
