/* State and helpers of the CUDA backend, shared by its C file (cuda_backend.c: the
 * op table, memory, graphs, timers) and its kernels (*.cu, compiled as C++). */
#ifndef BR_BACKEND_CUDA_INTERNAL_H
#define BR_BACKEND_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_handles.h"
#include "core/backend.h"
#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct br_cuda {
    int device;
    /* The stream every op, transfer and graph launch is issued on: own_stream, or a
     * caller's (br_ctx_set_stream). Graphs are captured on own_stream (capture on
     * the legacy stream is not allowed) and launched on this one. */
    cudaStream_t stream;
    cudaStream_t own_stream; /* created at open, non-blocking */
    int legacy_stream;       /* stream is the legacy default stream (NULL) */
    cudaEvent_t order_event; /* orders a new stream after the previous one */
    struct cudaDeviceProp prop;
    int cc; /* compute capability, 10·major + minor */
    int sm_count;
    int has_wgmma; /* sm_90a kernels built and device is 9.0 */
    void *ws;      /* workspace (column-reduction partials, ...) */
    size_t ws_bytes;
    void **retired; /* old workspaces: captured graphs may still name them */
    size_t nretired;
    cudaEvent_t *events; /* profiler marks */
    size_t nevents;
    int capturing; /* inside stream capture (no allocation allowed) */
    /* arrival tickets of kernels whose last block finishes an op (zeroed at open;
     * the last block to arrive resets its ticket, so every launch finds it 0) */
    uint32_t *tickets;
    /* blocks of the sign update kernel an SM holds, scalar and vector form (0: not
     * asked yet; cuda_sign.cu) */
    int sign_update_per_sm[2];
} br_cuda;

/* The ticket slots: one per job of a sign_steps update launch. */
#define BR_TICKET_SIGN_STEPS 0
#define BR_TICKETS 8

/* The backend state of ctx. Also makes ctx's GPU the calling thread's current
 * device (a cheap check), so that contexts on different GPUs can be used from one
 * thread: every op function starts with it. */
static inline br_cuda *br_cuda_state(br_ctx *ctx) {
    br_cuda *s = (br_cuda *)ctx->be_state;
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != s->device) cudaSetDevice(s->device);
    return s;
}

/* Return br_cuda_check's failed status (cuda_handles.h) where `call` fails. */
#define BR_CUDA_TRY(ctx, call)                                                                     \
    do {                                                                                           \
        cudaError_t br_cuda_e_ = (call);                                                           \
        if (br_cuda_e_ != cudaSuccess)                                                             \
            return br_cuda_check((ctx), br_cuda_e_, #call, __FILE__, __LINE__);                    \
    } while (0)
/* After every kernel launch: counts it and turns a launch error into a status. */
#define BR_CUDA_LAUNCHED(ctx, name)                                                                \
    do {                                                                                           \
        (ctx)->stats.launches++;                                                                   \
        cudaError_t br_cuda_e_ = cudaGetLastError();                                               \
        if (br_cuda_e_ != cudaSuccess)                                                             \
            return br_cuda_check((ctx), br_cuda_e_, "launch of " name, __FILE__, __LINE__);        \
    } while (0)

/* Workspace of at least `bytes` (grown outside capture; inside capture it must have
 * been reserved: br_submit records every op's need in ctx->ws_need). */
br_status br_cuda_workspace(br_ctx *ctx, size_t bytes, void **out);

/* Blocks of `threads` threads for a grid-stride loop over `items` work items:
 * enough to fill the GPU several times over, never more than the items need, at
 * least 1. */
unsigned br_cuda_blocks(br_ctx *ctx, size_t items, unsigned threads);

/* Op functions, one file per concern. */
/* cuda_stage.cu */
br_status br_cuda_cvt(br_ctx *ctx, const br_op *op);
br_status br_cuda_cvt_cols(br_ctx *ctx, const br_op *op);
br_status br_cuda_cvt_t(br_ctx *ctx, const br_op *op);
br_status br_cuda_expand(br_ctx *ctx, const br_op *op);
/* cuda_elementwise.cu */
br_status br_cuda_fill(br_ctx *ctx, const br_op *op);
br_status br_cuda_copy(br_ctx *ctx, const br_op *op);
br_status br_cuda_scale_acc(br_ctx *ctx, const br_op *op);
br_status br_cuda_scale_acc2(br_ctx *ctx, const br_op *op);
br_status br_cuda_f16_to_f32(br_ctx *ctx, const br_op *op);
br_status br_cuda_add(br_ctx *ctx, const br_op *op);
br_status br_cuda_split_qg(br_ctx *ctx, const br_op *op);
/* cuda_reduce.cu */
br_status br_cuda_colsum(br_ctx *ctx, const br_op *op);
br_status br_cuda_colsum_fused(br_ctx *ctx, const br_op *op);
/* cuda_dense.cu */
br_status br_cuda_dense_fwd(br_ctx *ctx, const br_op *op);
br_status br_cuda_dense_bwd(br_ctx *ctx, const br_op *op);
/* cuda_optim.cu */
br_status br_cuda_adam(br_ctx *ctx, const br_op *op);
br_status br_cuda_adam_cat(br_ctx *ctx, const br_op *op);
/* adam / adam_cat's launch on its arguments (the sign steps' Adam job where it
 * does not join their finish launch) */
br_status br_cuda_adam_launch(br_ctx *ctx, const br_adam_args *a);
br_status br_cuda_sumsq(br_ctx *ctx, const br_op *op);
br_status br_cuda_sumsq_cat(br_ctx *ctx, const br_op *op);
/* cuda_sign.cu */
br_status br_cuda_cvt_pad(br_ctx *ctx, const br_op *op);
br_status br_cuda_step_ctrl(br_ctx *ctx, const br_op *op);
br_status br_cuda_sign_step(br_ctx *ctx, const br_op *op);
/* cuda_layer_ops.cu */
br_status br_cuda_expand_scaled(br_ctx *ctx, const br_op *op);
br_status br_cuda_sign_rowdot(br_ctx *ctx, const br_op *op);
br_status br_cuda_cvt_both(br_ctx *ctx, const br_op *op);
/* cvt_both on device pointers (br_mm_stage's fusion stages with it where the GEMM
 * cannot); with c (col NULL) the value staged is fl(fl(src·alpha) + fl(beta·c)), a
 * GEMM epilogue with c applied to the plain product src. */
br_status br_cuda_cvt_both_ptr(br_ctx *ctx, const float *src, const float *col, uint16_t *dst,
                               uint16_t *dst_t, size_t m, size_t k, size_t ld, float scale,
                               const float *c, float alpha, float beta);
/* The same with an f16 c (its exact f32 values); res_out (or NULL) also receives the
 * f32 value fl(fl(src·alpha) + fl(beta·c)) before the scale (res_out may be src). */
br_status br_cuda_cvt_both_res16(br_ctx *ctx, const float *src, uint16_t *dst, uint16_t *dst_t,
                                 size_t m, size_t k, size_t ld, float scale, const uint16_t *c,
                                 float alpha, float beta, float *res_out);
/* gemm/dispatch.cu (dispatch to the mma.sync and wgmma kernels) */
br_status br_cuda_mm_tn(br_ctx *ctx, const br_op *op);
/* room for the transposed operands where an MM_TN op runs on K-major kernels */
size_t br_cuda_mm_tn_ws(br_ctx *ctx, const br_mm_args *a);
br_status br_cuda_mm(br_ctx *ctx, const br_op *op);
br_status br_cuda_mm_bits(br_ctx *ctx, const br_op *op);
/* whether this build carries the sm_90a (wgmma) kernels */
int br_cuda_built_wgmma(void);

/* ---------------------------------------------------------------- fusions
 * The fused launchers of cuda_fuse.c's table: each takes the ops of the pattern it
 * matched, in unit order, and runs them with the same bits as those ops in turn
 * (the unit's front-end checked them apart where a kernel runs them at once).
 * *_match: whether the ops (of the pattern's kinds) are the form the launcher takes;
 * *_ws: the workspace it needs beyond the unit's reservation; n: the ops taken. */

/* MM then CVT_BOTH of its product (br_mm_stage): the product staged from the GEMM's
 * epilogue where it can (EPI_STAGE16, gemm/dispatch.cu), else the plain product and
 * the staging pass applying c (br_cuda_cvt_both_ptr / _res16). */
typedef struct br_mm_stage_args {
    br_mm_args mm; /* mm.out NULL: not kept (the unit transient) */
    br_buf *dst;   /* f16 [br_pad_rows(g.m)][ld] */
    br_buf *dst_t; /* f16 [br_pad_rows(g.n)][br_pad_tokens(g.m)] or NULL */
    size_t ld;
    float scale;
} br_mm_stage_args;
int br_cuda_mm_stage_match(br_ctx *ctx, const br_op *ops);
size_t br_cuda_mm_stage_ws(br_ctx *ctx, const br_op *ops);
br_status br_cuda_mm_stage(br_ctx *ctx, const br_op *ops, size_t n);
/* MM_TN, MM_TN sharing k (br_mm_tn2): one launch of the MN-major kernel. */
int br_cuda_mm_tn_pair_match(br_ctx *ctx, const br_op *ops);
br_status br_cuda_mm_tn_pair(br_ctx *ctx, const br_op *ops, size_t n);
/* SIGN_ROWDOT, SIGN_ROWDOT (br_mm_tn2_rowdot's sides): one launch (cuda_layer_ops.cu). */
br_status br_cuda_sign_rowdot2(br_ctx *ctx, const br_op *ops, size_t n);
/* EXPAND_SCALED, EXPAND_SCALED (br_expand_scaled2): one launch (cuda_layer_ops.cu). */
br_status br_cuda_expand_scaled2(br_ctx *ctx, const br_op *ops, size_t n);
/* 2 to 4 CVT of one source, m, k and scale (br_cvt_multi): one launch (cuda_stage.cu). */
br_status br_cuda_cvt_multi(br_ctx *ctx, const br_op *ops, size_t n);
/* n_steps SIGN_STEP (2 ..BR_SIGN_STEPS_MAX) then, where ops[n_steps] is ADAM_CAT (n =
 * n_steps + 1), the Adam job (br_sign_steps, br_sign_steps_adam; cuda_sign.cu): their
 * updates in one launch, where every step flips directly (latent, full second
 * moment, no binding budget: br_cuda_sign_steps_together). */
int br_cuda_sign_steps_together(const br_op *ops, size_t n_steps);
br_status br_cuda_sign_steps(br_ctx *ctx, const br_op *ops, size_t n);

/* cuda_fuse.c: the backend's run_unit and unit_ws */
br_status br_cuda_run_unit(br_ctx *ctx, const br_op *ops, size_t n);
size_t br_cuda_unit_ws(br_ctx *ctx, const br_op *ops, size_t n);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
/* ---------------------------------------------------------------- device helpers
 * Shared by the kernels of the bit-exact files (compiled with --fmad=false). */
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <utility>

/* f32 → f16 bits exactly as br_half_from_float: the hardware's round-to-nearest-even
 * conversion (subnormals kept) for numbers, and br_half_from_float's NaN pattern
 * (quiet bit set, top payload bits kept) instead of the hardware's canonical NaN. */
static __device__ __forceinline__ uint16_t br_dev_f16_bits(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u | ((u & 0x7fffffu) >> 13));
    return __half_as_ushort(__float2half_rn(x));
}

/* f16 bits → f32 exactly as br_half_to_float (NaN payloads kept, never quieted). */
static __device__ __forceinline__ float br_dev_f16_to_f32(uint16_t h) {
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu))
        return __uint_as_float(((uint32_t)(h & 0x8000u) << 16) | 0x7f800000u |
                               ((uint32_t)(h & 0x3ffu) << 13));
    return __half2float(__ushort_as_half(h));
}

/* Where column c of a vector stored in groups is (group 0: plain, c). */
static __device__ __forceinline__ unsigned br_dev_grouped(unsigned c, unsigned group,
                                                          unsigned stride) {
    return group ? c / group * stride + c % group : c;
}

/* Whether this block is the last of the `nblk` blocks that call it to arrive at
 * `ticket` (one of br_cuda.tickets; the last resets it for the next launch). Every
 * block of those calls it; what thread 0 of a block wrote before its call is
 * visible to the last block after it (read it with __ldcg). Only thread 0 fences:
 * a fence in every thread held each block for its stores' round trip. */
static __device__ __forceinline__ bool br_dev_last_arrival(uint32_t *ticket, unsigned nblk) {
    __shared__ bool last;
    __syncthreads(); /* thread 0's writes of the block are made (block_sum, ...) */
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(ticket, 1u) == nblk - 1;
        if (last) *ticket = 0; /* every block has arrived */
    }
    __syncthreads();
    if (last) __threadfence();
    return last;
}

/* A grid-stride loop over [0, n): with n ≤ BR_MAX_ELEMS < 2^31 and a grid of fewer
 * than 2^31 threads (br_cuda_blocks gives far fewer), the 32-bit index cannot wrap. */
#define BR_GRID_STRIDE(i, n)                                                                       \
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (unsigned)(n);                    \
         i += gridDim.x * blockDim.x)

/* ---------------------------------------------------------------- programmatic
 * dependent launch. On sm_90 a kernel launched with BR_CUDA_LAUNCH_PDL may be
 * placed on the SMs while the kernel before it in the stream is still finishing:
 * its launch and its blocks' start overlap the other's tail (in graphs too, as a
 * programmatic edge). Such a kernel must call br_dev_pdl_wait before it touches
 * global memory (reads what the kernel before wrote, or writes what it reads): the
 * wait returns once that kernel has completed and its writes are visible, and
 * since every kernel waits so, every earlier kernel has too. Without the launch
 * attribute both instructions do nothing, so any launch may run these kernels. */
static __device__ __forceinline__ void br_dev_pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Lets the next kernel be launched once every block of this one has called it (or
 * exited): its blocks then take SM room as ours leave, never before ours have all
 * started, so blocks that wait for others of their grid cannot be starved. */
static __device__ __forceinline__ void br_dev_pdl_trigger(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Both, at a kernel's entry: the usual start of a kernel launched with PDL. */
static __device__ __forceinline__ void br_dev_pdl_enter(void) {
    br_dev_pdl_trigger();
    br_dev_pdl_wait();
}

/* Whether a launch asks for PDL: only where the sm_90a kernels run (their wait is
 * compiled in; a PTX build for an older target has none), and by default only for
 * kernels of at most one block per SM (the persistent GEMMs, `one_per_sm`). A
 * grid-stride kernel sized to fill the GPU would have its blocks placed early on
 * the SMs the kernel before frees first, unevenly: colsum and cvt_both lost about
 * 4 µs each that way on the H200, while the GEMMs gained 3 µs of the step.
 * Option pdl (br_pdl_mode): off none, all every kernel launched through here. */
static inline bool br_cuda_pdl_on(const br_cuda *s, int pdl, bool one_per_sm) {
    /* the legacy stream's implicit barriers with the other streams are not
     * documented to combine with programmatic edges: plain launches there */
    if (!s->has_wgmma || s->legacy_stream || pdl == BR_PDL_OFF) return false;
    return one_per_sm || pdl == BR_PDL_ALL;
}

/* kernel<<<grid, block, smem, s->stream>>>(args...), as a programmatic dependent
 * where br_cuda_pdl_on. */
template <typename... P, typename... A>
static inline cudaError_t br_cuda_launch_pdl(const br_cuda *s, int pdl, bool one_per_sm,
                                             void (*kernel)(P...), dim3 grid, dim3 block,
                                             size_t smem, A &&...args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s->stream;
    cfg.attrs = attr;
    cfg.numAttrs = br_cuda_pdl_on(s, pdl, one_per_sm) ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

/* Launches a kernel that starts with br_dev_pdl_wait (br_dev_pdl_enter) and checks
 * it as BR_CUDA_LAUNCHED does: BR_CUDA_LAUNCH_PDL for grids of at most one block
 * per SM, BR_CUDA_LAUNCH_WAITING for the rest. A kernel name with template commas
 * goes in parentheses. */
#define BR_CUDA_LAUNCH_AS(ctx, s, one_per_sm, name, kernel, grid, block, smem, ...)                \
    do {                                                                                           \
        (ctx)->stats.launches++;                                                                   \
        cudaError_t br_cuda_e_ =                                                                   \
            br_cuda_launch_pdl((s), (ctx)->opt.pdl, (one_per_sm), (kernel), (grid), (block), (smem), __VA_ARGS__); \
        cudaError_t br_cuda_last_ = cudaGetLastError();                                            \
        if (br_cuda_e_ == cudaSuccess) br_cuda_e_ = br_cuda_last_;                                 \
        if (br_cuda_e_ != cudaSuccess)                                                             \
            return br_cuda_check((ctx), br_cuda_e_, "launch of " name, __FILE__, __LINE__);        \
    } while (0)
#define BR_CUDA_LAUNCH_PDL(ctx, s, name, ...) BR_CUDA_LAUNCH_AS(ctx, s, true, name, __VA_ARGS__)
#define BR_CUDA_LAUNCH_WAITING(ctx, s, name, ...)                                                  \
    BR_CUDA_LAUNCH_AS(ctx, s, false, name, __VA_ARGS__)

/* Whether every given address is a multiple of `align` bytes (NULL counts as
 * aligned): views may start anywhere, so vector paths check at run time. */
static inline int br_aligned(size_t align, const void *a, const void *b = 0, const void *c = 0,
                             const void *d = 0, const void *e = 0) {
    return ((uintptr_t)a % align | (uintptr_t)b % align | (uintptr_t)c % align |
            (uintptr_t)d % align | (uintptr_t)e % align) == 0;
}
#endif

#endif
