/* The interface every backend implements: memory, synchronization, graphs,
 * timers, one function per op kind, and the run of a unit of ops (the place a
 * backend fuses). The op front-end (ops/) has checked every
 * argument before a backend sees it. */
#ifndef BR_CORE_BACKEND_H
#define BR_CORE_BACKEND_H

#include "core/internal.h"
#include "core/op_kind.h"

/* The op layer's descriptors (ops/op.h), which the table only passes on: the
 * backends, which read them, include ops/op.h themselves. */
struct br_op;

typedef br_status (*br_op_fn)(br_ctx *ctx, const struct br_op *op);

typedef struct br_backend {
    const char *name; /* "cpu", "cuda" */
    /* Open device `index` (-1: the backend's default) into ctx->be_state and fill
     * ctx->device_desc; on failure write a message to err. */
    br_status (*open)(br_ctx *ctx, int index, char *err, size_t err_len);
    void (*close)(br_ctx *ctx);
    br_status (*alloc)(br_ctx *ctx, size_t bytes, void **out);
    void (*release)(br_ctx *ctx, void *mem);
    /* Synchronous with respect to the ops issued before. */
    br_status (*upload)(br_ctx *ctx, void *dst, const void *src, size_t bytes);
    br_status (*download)(br_ctx *ctx, void *dst, const void *src, size_t bytes);
    br_status (*sync)(br_ctx *ctx);
    /* Replay a recorded graph (NULL: the front-end runs its ops in order). */
    br_status (*graph_launch)(br_ctx *ctx, br_graph *g);
    void (*graph_release)(br_ctx *ctx, br_graph *g);
    /* Profiler timers: record a mark in slot `slot` behind the issued work;
     * elapsed milliseconds between two recorded marks (waits as needed). */
    br_status (*timer_mark)(br_ctx *ctx, size_t slot);
    br_status (*timer_elapsed)(br_ctx *ctx, size_t from, size_t to, double *ms);
    /* Workspace bytes this device's run of the n checked ops as one unit needs beyond
     * the front-end's own reservation (br_submit_unit's ws_bytes): room a fused kernel
     * or a copy of the operands takes (CUDA: the f32 product of a staged GEMM that is
     * not kept, the transposed operands of mm_tn). NULL: none. */
    size_t (*unit_ws)(br_ctx *ctx, const struct br_op *ops, size_t n);
    /* Run a unit of n ops (ops/op.h: br_submit_unit), fused where the backend has a
     * kernel for its pattern. NULL: each op in turn (br_unit_run_ops). */
    br_status (*run_unit)(br_ctx *ctx, const struct br_op *ops, size_t n);
    /* Whether `bytes` at ptr are memory this device's ops can use (br_buf_wrap):
     * BR_OK, or BR_E_ARG with a message saying what the memory is. NULL: any
     * pointer is taken (the caller vouches for host memory). */
    br_status (*check_wrap)(br_ctx *ctx, const void *ptr, size_t bytes);
    /* Issue ctx's work on `stream` from now on (own != 0: the context's own stream,
     * `stream` unused), ordered after everything issued before. NULL: the backend
     * has no streams. */
    br_status (*set_stream)(br_ctx *ctx, void *stream, int own);
    /* The stream ctx's work is issued on now (NULL: none, or the legacy stream). */
    void *(*stream)(const br_ctx *ctx);
    br_op_fn ops[BR_OP_COUNT];
} br_backend;

#endif
