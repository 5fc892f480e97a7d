/* Internal state of contexts and buffers, shared by core/, ops/ and the backends.
 * Nothing above ops/ includes this. */
#ifndef BR_CORE_INTERNAL_H
#define BR_CORE_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>

#include "bitrank_ops.h"
#include "core/options.h"

#ifdef __cplusplus
extern "C" {
#endif

struct br_backend;
struct br_op;
struct br_prof;

/* Largest element count any op shape may reach: kernels index with 32-bit ints
 * after the front-end has checked this bound. */
#define BR_MAX_ELEMS ((size_t)INT32_MAX)

typedef struct br_stats {
    uint64_t launches; /* kernel launches (CPU: op executions) */
    uint64_t allocs;   /* buffer allocations */
    uint64_t uploads;  /* host → device copies */
    uint64_t upload_bytes;
    uint64_t downloads; /* device → host copies */
} br_stats;

struct br_ctx {
    const struct br_backend *be;
    void *be_state; /* the backend's own state */
    char device_desc[224];
    char err[512];
    br_options opt;       /* br_ctx_set_options, parsed (core/options.h) */
    char kernel[96];      /* the last kernel the backend chose (br_ctx_last_kernel) */
    char tag[32];         /* profiler tag of ops issued now */
    struct br_graph *rec; /* non-NULL while recording */
    struct br_prof *prof; /* profiler state (allocated on first use) */
    br_stats stats;
    size_t ws_need;          /* bytes of backend workspace the issued ops need */
    br_buf *expand_plane;    /* f16 scratch of the expand-then-mm path */
    int expand_plane_named;  /* a recording named expand_plane: keep it when outgrown */
    br_buf **expand_retired; /* outgrown expand planes that recorded graphs may name */
    size_t n_expand_retired;
    br_buf *unit_transient; /* ops/op.h: br_unit_transient (NULL until a unit names it) */
};

struct br_buf {
    br_ctx *ctx;
    br_dtype dtype;
    size_t count;   /* elements visible through this buffer */
    size_t offset;  /* elements from the start of the allocation */
    void *mem;      /* start of the allocation (device or host memory) */
    br_buf *parent; /* NULL for an allocation, the root for a view */
    int borrowed;   /* mem is the caller's (br_buf_wrap): freeing the root keeps it */
};

struct br_graph {
    br_ctx *ctx;
    struct br_op *ops;
    size_t n, cap;
    size_t ws_need;
    void *be_graph; /* the backend's replayable form (CUDA: cudaGraphExec_t) */
};

/* Shorthand for early return. */
#define BR_TRY(expr)                                                                               \
    do {                                                                                           \
        br_status br_try_st_ = (expr);                                                             \
        if (br_try_st_ != BR_OK) return br_try_st_;                                                \
    } while (0)

/* Record a failure on ctx (printf-style message) and return st. ctx may be NULL. */
br_status br_fail(br_ctx *ctx, br_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
br_status br_vfail(br_ctx *ctx, br_status st, const char *fmt, va_list ap);

/* ctx non-NULL (returns BR_E_ARG without a message otherwise). Here, below the op
 * front-ends that use it most, because core's buffer functions check their context
 * the same way (core/status.c: a file that calls nothing above core). */
br_status br_check_ctx(const br_ctx *ctx);

/* Address of element 0 of a buffer (device or host memory). */
static inline void *br_ptr(const br_buf *b) {
    return b ? (char *)b->mem + b->offset * br_dtype_size(b->dtype) : (void *)0;
}

/* A profiler tag for a region of ops (br_ctx_set_tag), restoring the caller's tag
 * after it: `br_tag_scope t; br_tag_push(ctx, &t, "sign"); ...; br_tag_pop(ctx, &t);` */
typedef struct br_tag_scope {
    char saved[32];
} br_tag_scope;
static inline void br_tag_push(br_ctx *ctx, br_tag_scope *t, const char *tag) {
    for (size_t i = 0; i < sizeof t->saved; i++)
        t->saved[i] = ctx->tag[i];
    br_ctx_set_tag(ctx, tag);
}
static inline void br_tag_pop(br_ctx *ctx, const br_tag_scope *t) { br_ctx_set_tag(ctx, t->saved); }

/* out[i] = br_half_from_float(x[i]) for i < n, bit for bit: with the CPU's F16C
 * conversion where it has one (8 at a time), else one by one. */
void br_half_from_float_n(const float *x, uint16_t *out, size_t n);
/* out[i] = br_half_to_float(h[i]) for i < n, bit for bit (NaN payloads kept): with
 * F16C where the CPU has it. */
void br_half_to_float_n(const uint16_t *h, float *out, size_t n);

/* Column-reduction block: rows per block, and block count (≤ 256). */
static inline size_t br_colsum_block_rows(size_t rows) {
    size_t b = (rows + 255) / 256;
    return b < 64 ? 64 : b;
}
static inline size_t br_colsum_blocks(size_t rows) {
    size_t b = br_colsum_block_rows(rows);
    size_t n = (rows + b - 1) / b;
    return n ? n : 1;
}

/* Backends this build has. br_cuda_backend() is NULL without CUDA,
 * br_vulkan_backend() without Vulkan. */
const struct br_backend *br_cpu_backend(void);
const struct br_backend *br_cuda_backend(void);
const struct br_backend *br_vulkan_backend(void);
/* Whether a Vulkan GPU (hardware, not a software device such as lavapipe) has what
 * the Vulkan backend needs: "auto" takes Vulkan only then. 0 without Vulkan. */
int br_vulkan_gpu_present(void);

/* Profiler hooks (core/profile.c). */
void br_prof_free(br_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
