/* A context's tuning and checking switches (br_ctx_set_options): one struct, parsed
 * once from "key=value" text, read by the front-ends and the backends where they
 * choose a path. Nothing reads the environment for these but options.c (the
 * BITRANK_OPTIONS override, applied when a context is made). */
#ifndef BR_CORE_OPTIONS_H
#define BR_CORE_OPTIONS_H

#include <stddef.h>

#include "bitrank.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The wgmma tiles of the CUDA backend by name, in the order of its WgmmaTile enum
 * (backend/cuda/gemm/common.cuh asserts the count), and the sources of the A
 * operand (WgmmaASource). Here so that a name is checked when it is set, on any
 * backend. */
#define BR_GEMM_TILE_COUNT 6
#define BR_GEMM_ASRC_COUNT 3
extern const char *const br_gemm_tile_names[BR_GEMM_TILE_COUNT];
extern const char *const br_gemm_asrc_names[BR_GEMM_ASRC_COUNT];

/* The cooperative-matrix shapes (M×N×K) the option vk_coop_shape forces on the
 * Vulkan GEMM (backend/vulkan/vk_ops_gemm.c reads them in this order): the one
 * every device with the extension lists, NVIDIA's others, and ones whose 1 to 4
 * accumulators per dimension and 8-, 16- and 32-deep steps exercise the shader's
 * loops on the emulated path. */
#define BR_VK_COOP_SHAPES "16x16x16", "16x8x16", "16x8x8", "8x16x16", "32x32x32"
#define BR_VK_COOP_SHAPE_COUNT 5

typedef enum br_pdl_mode { BR_PDL_AUTO = 0, BR_PDL_OFF, BR_PDL_ALL } br_pdl_mode;

typedef struct br_options {
    int bits_gemm;     /* bits_gemm: 1 the bitmap GEMM, 0 expand then the f16 GEMM */
    int profile;       /* profile: the op profiler records */
    int gemm_kernel;   /* gemm: 0 auto, 1 mma.sync, 2 wgmma */
    int gemm_tile;     /* gemm_tile: -1 the picker's, else an index of br_gemm_tile_names */
    int gemm_asrc;     /* the "/smem" of gemm_tile: -1 the picker's, else br_gemm_asrc_names */
    int gemm_splitk;   /* gemm_splitk: 0 the picker's, else 1..64 (within the workspace) */
    int gemm_ctas;     /* gemm_ctas: 0 as many as the work fills, else a cap of the grid */
    int mm_stage16;    /* mm_stage16: 1 the fused f16 staging epilogue where it fits */
    int mm_tn_copy;    /* mm_tn: 0 auto, 1 "copy": operands transposed into the workspace */
    int mm_tn2;        /* mm_tn2: 1 two MN-major products in one launch where they can */
    int pdl;           /* pdl: br_pdl_mode */
    int expand_blocks; /* expand_blocks: 0 none, else a cap of an expansion's blocks */
    int vk_gemm;       /* vk_gemm: 0 auto, 1 tiled, 2 coop, 3 coop_emulated */
    int vk_coop_shape; /* vk_coop_shape: 0 the device's pick, i the (i−1)-th BR_VK_COOP_SHAPES */
} br_options;

/* The defaults: what runs when nothing is set. */
br_options br_options_default(void);

/* Apply "key=value[,key=value...]" to *opt: all items or none. On a bad item,
 * BR_E_ARG with the reason in err (naming the item and what it accepts). */
br_status br_options_parse(br_options *opt, const char *spec, char *err, size_t err_len);

/* Every key with its value, "key=value,..." (truncated to len). */
void br_options_format(const br_options *opt, char *buf, size_t len);

/* The text of one key's value into buf; BR_E_ARG if the key is unknown. */
br_status br_options_value(const br_options *opt, const char *key, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
