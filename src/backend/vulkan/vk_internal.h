/* The Vulkan backend's state and the helpers its files share.
 *
 * Memory: every buffer is one VkBuffer with a device address (Vulkan 1.2
 * bufferDeviceAddress); that address is the opaque pointer the core keeps in
 * br_buf.mem, so br_ptr() gives the address of element 0 of a view, and the
 * shaders take 64-bit addresses (GL_EXT_buffer_reference). A table sorted by
 * address maps an address back to its VkBuffer for copies and transfers.
 *
 * Work: one queue and one command buffer. Ops record dispatches into it, each
 * followed by a barrier, and it is submitted when the host must see results
 * (sync, download, timers) or before host memory the recorded work reads is
 * reused. Each dispatch reads its arguments from an argument block written into
 * a host-visible arena (push constants carry the block's address), so an op's
 * arguments are not limited by the push-constant size. */
#ifndef BR_BACKEND_VULKAN_INTERNAL_H
#define BR_BACKEND_VULKAN_INTERNAL_H

#include <vulkan/vulkan.h>

#include "backend/vulkan/vk_coopmat_khr.h"
#include "core/backend.h"
#include "ops/op.h"

/* The shaders of the library, one compute pipeline each (shaders/NAME.comp, compiled
 * to SPIR-V at build time and embedded: vk_shaders.c). Two more come from
 * shaders/mm_coop.comp, with pipelines per specialization (vk_coop.c): mm_coop, built
 * only where the build has a glslang with GL_KHR_cooperative_matrix
 * (BR_HAVE_VK_COOPMAT; br_vk_spirv gives NULL for it otherwise), and
 * mm_coop_emulated, always. */
#define BR_VK_SHADERS(X)                                                                           \
    X(fill16)                                                                                      \
    X(fill32)                                                                                      \
    X(stage_rows)                                                                                  \
    X(stage_t)                                                                                     \
    X(expand)                                                                                      \
    X(scale_acc)                                                                                   \
    X(scale_acc2)                                                                                  \
    X(f16_to_f32)                                                                                  \
    X(add)                                                                                         \
    X(split_qg)                                                                                    \
    X(colsum_part)                                                                                 \
    X(colsum_fused_part)                                                                           \
    X(colsum_finish)                                                                               \
    X(mm_tiled)                                                                                    \
    X(expand_scaled)                                                                               \
    X(sign_rowdot)                                                                                 \
    X(dense)                                                                                       \
    X(adam)                                                                                        \
    X(sumsq)                                                                                       \
    X(step_ctrl)                                                                                   \
    X(sign_factored)                                                                               \
    X(sign_lanes)                                                                                  \
    X(sign_scores)                                                                                 \
    X(sign_select)

typedef enum br_vk_shader {
#define BR_VK_ENUM(name) BR_VK_SH_##name,
    BR_VK_SHADERS(BR_VK_ENUM)
#undef BR_VK_ENUM
        BR_VK_SH_mm_coop,
    BR_VK_SH_mm_coop_emulated,
    BR_VK_SHADER_COUNT
} br_vk_shader;

/* The SPIR-V of shader s and its size in bytes (vk_shaders.c); NULL and 0 for a
 * shader this build has not compiled. */
const uint32_t *br_vk_spirv(br_vk_shader s, size_t *bytes);
const char *br_vk_shader_name(br_vk_shader s);

/* Workgroup size of the element-wise shaders (local_size_x in shaders/common.glsl). */
#define BR_VK_GROUP 256
/* Most workgroups in one dimension every Vulkan device takes. */
#define BR_VK_MAX_GROUPS 65535u

/* One allocation: a buffer bound to its own memory. */
typedef struct br_vk_alloc {
    VkDeviceAddress addr;
    VkBuffer buf;
    VkDeviceMemory mem;
    size_t bytes;
} br_vk_alloc;

/* A host-visible buffer, persistently mapped (argument arena, staging). */
typedef struct br_vk_hostbuf {
    VkBuffer buf;
    VkDeviceMemory mem;
    VkDeviceAddress addr;
    void *map;
    size_t bytes, used;
} br_vk_hostbuf;

/* One specialization of shaders/mm_coop.comp made into a pipeline: the matrix shape
 * M×N×K, the operand mode (0-3), the output tile's edge (64 or 128) and the stage
 * buffers (1 or 2). */
typedef struct br_vk_coop_pipe {
    int emulated;
    uint32_t m, n, k, mode, tile, nbuf;
    VkPipeline pipe;
} br_vk_coop_pipe;

#define BR_VK_COOP_MAX_SHAPES 16
/* each shape, built or emulated, in 4 modes and 2 tiles */
#define BR_VK_COOP_MAX_PIPES 128

/* The cooperative-matrix GEMM on a device (vk_coop.c): whether it runs there, in
 * which shapes, and its pipelines. */
typedef struct br_vk_coop {
    int usable;    /* mm_coop: the extension, features and a configuration are there */
    char why[192]; /* when not usable: what is missing */
    int emulable;  /* mm_coop_emulated: full subgroups, f16, subgroup basics */
    char why_emulated[160];
    uint32_t m, n, k; /* the shape auto takes: the device's pick, 16×16×16 without one */
    uint32_t shapes[BR_VK_COOP_MAX_SHAPES][3]; /* the listed ones mm_coop can take */
    uint32_t nshapes;
    uint32_t subgroup;   /* the subgroup size: a workgroup is 4 full subgroups */
    uint32_t big_groups; /* the 128 tile from this many workgroups of it (vk_coop.c) */
    br_vk_coop_pipe pipes[BR_VK_COOP_MAX_PIPES];
    uint32_t npipes;
} br_vk_coop;

typedef struct br_vk {
    VkInstance inst;
    VkPhysicalDevice phys;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfam;
    int index; /* vulkan:N */
    VkPhysicalDeviceProperties props;
    int denorm_preserve; /* shaderDenormPreserveFloat32: the shaders' DenormPreserve mode */
    int subnormals_kept; /* what the device's f32 arithmetic does (br_vk_probe_subnormals) */
    uint32_t mem_device, mem_host; /* memory type indices: device-local, host-visible coherent */

    VkCommandPool pool;
    VkCommandBuffer cmd;
    VkFence fence;
    int recording;   /* cmd is begun */
    size_t recorded; /* commands recorded since the last submit */

    VkPipelineLayout layout;
    VkPipeline pipe[BR_VK_SHADER_COUNT]; /* created on first use */
    br_vk_coop coop;

    br_vk_alloc *allocs; /* sorted by addr */
    size_t nallocs, cap;

    br_vk_hostbuf args;    /* argument blocks of the recorded dispatches */
    br_vk_hostbuf staging; /* host ↔ device transfers */

    br_vk_alloc ws; /* workspace (column-reduction partials, overlapping copies) */

    VkQueryPool timers;
    uint32_t ntimers;
} br_vk;

static inline br_vk *br_vk_of(br_ctx *ctx) { return ctx->be_state; }

/* BR_E_DEVICE with a message naming the call and its VkResult, or BR_OK. */
br_status br_vk_check(br_ctx *ctx, VkResult r, const char *what, const char *file, int line);
#define BR_VK(ctx, call) BR_TRY(br_vk_check((ctx), (call), #call, __FILE__, __LINE__))
const char *br_vk_result_name(VkResult r);

/* vk_device.c: instance, device, queue, command buffer. */
/* index -1: the most capable device that has what the shaders need. */
br_status br_vk_open_device(br_vk *s, int index, char *err, size_t n);
void br_vk_close_device(br_vk *s);
const char *br_vk_type_name(VkPhysicalDeviceType t);

/* vk_coop.c: the cooperative-matrix GEMM's needs. */
/* Fills s->coop for s->phys (s->inst, s->props set): usable and emulable, or why not. */
void br_vk_coop_probe(br_vk *s);
/* What vkCreateDevice enables for it (where s->coop.usable or .emulable): its
 * feature structs, which must live until the device is made. */
typedef struct br_vk_coop_enable {
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR coop;
    VkPhysicalDeviceSubgroupSizeControlFeatures subgroup_size;
} br_vk_coop_enable;
/* Puts e's structs at the front of the chain *pnext, the features into f12 and the
 * extensions at ext[*n_ext] (room for 2) that s->coop's usable parts need. */
void br_vk_coop_enable_on(const br_vk *s, br_vk_coop_enable *e,
                          VkPhysicalDeviceVulkan12Features *f12, void **pnext, const char **ext,
                          uint32_t *n_ext);
/* Shared memory the shader takes at shape m×n in its smallest geometry (a device
 * limit bounds it). */
size_t br_vk_coop_shared_bytes(uint32_t m, uint32_t n);
/* The pipeline of mm_coop (emulated: mm_coop_emulated) specialized for shape[3]
 * (M, N, K) and operand mode (0-3), in the geometry for a rows×cols GEMM, made on
 * first use; *tile the output tile's edge (the grid is ⌈cols/tile⌉×⌈rows/tile⌉). On
 * failure the reason in err. */
br_status br_vk_coop_pipeline(br_vk *s, int emulated, const uint32_t shape[3], uint32_t mode,
                              size_t rows, size_t cols, VkPipeline *out, uint32_t *tile, char *err,
                              size_t n);
/* Destroys the pipelines (device teardown). */
void br_vk_coop_release(br_vk *s);

/* vk_memory.c */
br_status br_vk_alloc_buffer(br_ctx *ctx, size_t bytes, br_vk_alloc *out);
void br_vk_free_buffer(br_vk *s, br_vk_alloc *a);
br_status br_vk_hostbuf_new(br_ctx *ctx, size_t bytes, br_vk_hostbuf *out);
void br_vk_hostbuf_free(br_vk *s, br_vk_hostbuf *h);
/* The allocation holding device address addr (NULL: none), and the byte offset of
 * addr inside it. */
const br_vk_alloc *br_vk_find(const br_vk *s, VkDeviceAddress addr, VkDeviceSize *off);
/* The workspace, at least `bytes` (and at least ctx->ws_need) long. */
br_status br_vk_workspace(br_ctx *ctx, size_t bytes, VkDeviceAddress *addr);

/* vk_queue.c: recording and submitting. */
/* The command buffer, begun if it was not. */
br_status br_vk_cmd(br_ctx *ctx, VkCommandBuffer *out);
/* A barrier making every earlier compute or transfer write visible to every later
 * compute or transfer access. */
void br_vk_barrier(br_vk *s);
/* Submit what is recorded and wait for it; the arenas are free again. */
br_status br_vk_flush(br_ctx *ctx);
/* Room for an argument block of `bytes` in the arena (flushing first when it is
 * full); *host to write it, *addr its device address. */
br_status br_vk_args(br_ctx *ctx, size_t bytes, void **host, VkDeviceAddress *addr);
/* A compute pipeline of shader sh with a specialization (NULL: none) and stage
 * flags; on failure the reason in err. */
br_status br_vk_create_pipeline(br_vk *s, br_vk_shader sh, const VkSpecializationInfo *spec,
                                VkPipelineShaderStageCreateFlags flags, VkPipeline *out, char *err,
                                size_t n);
/* Record shader s on `groups` workgroups (x, y) reading the argument block at args,
 * then a barrier. */
br_status br_vk_dispatch(br_ctx *ctx, br_vk_shader sh, VkDeviceAddress args, uint32_t gx,
                         uint32_t gy);
/* The same with a pipeline made elsewhere (the coop GEMM's). */
br_status br_vk_dispatch_pipeline(br_ctx *ctx, VkPipeline p, VkDeviceAddress args, uint32_t gx,
                                  uint32_t gy);
/* Workgroups for a grid-stride loop over n items, BR_VK_GROUP per group. */
static inline uint32_t br_vk_groups(size_t n) {
    size_t g = (n + BR_VK_GROUP - 1) / BR_VK_GROUP;
    return g == 0 ? 1u : g > BR_VK_MAX_GROUPS ? BR_VK_MAX_GROUPS : (uint32_t)g;
}
/* Address of element 0 of b (0 for NULL). */
static inline VkDeviceAddress br_vk_addr(const br_buf *b) {
    return b ? (VkDeviceAddress)(uintptr_t)br_ptr(b) : 0;
}

/* Op launchers: vk_ops_*.c. */
br_status br_vk_fill(br_ctx *ctx, const br_op *op);
br_status br_vk_copy(br_ctx *ctx, const br_op *op);
br_status br_vk_cvt(br_ctx *ctx, const br_op *op);
br_status br_vk_cvt_cols(br_ctx *ctx, const br_op *op);
br_status br_vk_cvt_t(br_ctx *ctx, const br_op *op);
br_status br_vk_cvt_pad(br_ctx *ctx, const br_op *op);
br_status br_vk_cvt_both(br_ctx *ctx, const br_op *op);
br_status br_vk_expand(br_ctx *ctx, const br_op *op);
br_status br_vk_scale_acc(br_ctx *ctx, const br_op *op);
br_status br_vk_scale_acc2(br_ctx *ctx, const br_op *op);
/* Whether f32 arithmetic keeps subnormal results on this device (a run of scale_acc). */
br_status br_vk_probe_subnormals(br_ctx *ctx, int *kept);
br_status br_vk_f16_to_f32(br_ctx *ctx, const br_op *op);
br_status br_vk_add(br_ctx *ctx, const br_op *op);
br_status br_vk_split_qg(br_ctx *ctx, const br_op *op);
br_status br_vk_colsum(br_ctx *ctx, const br_op *op);
br_status br_vk_colsum_fused(br_ctx *ctx, const br_op *op);
br_status br_vk_mm(br_ctx *ctx, const br_op *op);
br_status br_vk_mm_bits(br_ctx *ctx, const br_op *op);
br_status br_vk_mm_tn(br_ctx *ctx, const br_op *op);
br_status br_vk_expand_scaled(br_ctx *ctx, const br_op *op);
br_status br_vk_sign_rowdot(br_ctx *ctx, const br_op *op);
br_status br_vk_dense_fwd(br_ctx *ctx, const br_op *op);
br_status br_vk_dense_bwd(br_ctx *ctx, const br_op *op);
br_status br_vk_adam(br_ctx *ctx, const br_op *op);
br_status br_vk_sumsq(br_ctx *ctx, const br_op *op);
br_status br_vk_step_ctrl(br_ctx *ctx, const br_op *op);
br_status br_vk_sign_step(br_ctx *ctx, const br_op *op);

#endif
