/* The CUDA backend: one device, its own stream or a caller's, device memory (its
 * own or wrapped), events for the profiler, stream-captured graphs, and the op
 * table (units of ops run through cuda_fuse.c, which fuses their patterns). */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"

br_status br_cuda_check(br_ctx *ctx, cudaError_t e, const char *what, const char *file, int line) {
    const char *base = strrchr(file, '/');
    /* a failed call also sets the runtime's last error; left there, it would be
     * reported again by the next op's launch check (BR_CUDA_LAUNCHED) */
    cudaGetLastError();
    return br_fail(ctx, BR_E_DEVICE, "CUDA error in %s: %s (%s) at %s:%d", what,
                   cudaGetErrorString(e), cudaGetErrorName(e), base ? base + 1 : file, line);
}

/* Why no GPU can be used, in words a user can act on: cudaGetDeviceCount failed
 * with `e` (or found no device). */
static void no_gpu_message(char *err, size_t n, cudaError_t e) {
    if (!err || !n) return;
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (e == cudaSuccess || e == cudaErrorNoDevice) {
        snprintf(err, n, "no NVIDIA driver / GPU usable: the driver sees no CUDA GPU%s%s%s",
                 vis ? " (CUDA_VISIBLE_DEVICES=\"" : "", vis ? vis : "", vis ? "\")" : "");
    } else if (e == cudaErrorInsufficientDriver && drv == 0) {
        snprintf(err, n, "no NVIDIA driver / GPU usable: no NVIDIA driver is installed (%s)",
                 cudaGetErrorName(e));
    } else if (e == cudaErrorInsufficientDriver) {
        snprintf(err, n,
                 "no NVIDIA driver / GPU usable: the driver supports CUDA %d.%d, this build "
                 "needs %d.%d or newer (%s)",
                 drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10, cudaGetErrorName(e));
    } else {
        snprintf(err, n, "no NVIDIA driver / GPU usable: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
    }
}

static br_status cuda_open(br_ctx *ctx, int index, char *err, size_t n) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError(); /* leave no error behind for later calls */
        no_gpu_message(err, n, e);
        return BR_E_UNSUPPORTED;
    }
    if (index < 0) index = 0;
    if (index >= count) {
        if (err && n)
            snprintf(err, n, "cuda:%d does not exist (%d GPU%s found)", index, count,
                     count == 1 ? "" : "s");
        return BR_E_ARG;
    }
    br_cuda *s = calloc(1, sizeof *s);
    if (!s) {
        if (err && n) snprintf(err, n, "out of host memory");
        return BR_E_NOMEM;
    }
    s->device = index;
    if ((e = cudaGetDeviceProperties(&s->prop, index)) != cudaSuccess) {
        cudaGetLastError();
        if (err && n) snprintf(err, n, "cuda:%d: %s", index, cudaGetErrorString(e));
        free(s);
        return BR_E_DEVICE;
    }
    s->cc = s->prop.major * 10 + s->prop.minor;
    if (s->cc < 80) { /* the build carries sm_80 and sm_90a code only */
        if (err && n)
            snprintf(err, n, "cuda:%d %s has compute capability %d.%d; bitrank needs 8.0 or newer",
                     index, s->prop.name, s->prop.major, s->prop.minor);
        free(s);
        return BR_E_UNSUPPORTED;
    }
    if ((e = cudaSetDevice(index)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&s->own_stream, cudaStreamNonBlocking)) != cudaSuccess) {
        cudaGetLastError();
        if (err && n) snprintf(err, n, "cuda:%d: %s", index, cudaGetErrorString(e));
        free(s);
        return BR_E_DEVICE;
    }
    s->stream = s->own_stream;
    if ((e = cudaEventCreateWithFlags(&s->order_event, cudaEventDisableTiming)) != cudaSuccess) {
        cudaGetLastError();
        if (err && n) snprintf(err, n, "cuda:%d: event: %s", index, cudaGetErrorString(e));
        cudaStreamDestroy(s->own_stream);
        free(s);
        return BR_E_DEVICE;
    }
    if ((e = cudaMalloc((void **)&s->tickets, BR_TICKETS * sizeof(uint32_t))) != cudaSuccess ||
        (e = cudaMemset(s->tickets, 0, BR_TICKETS * sizeof(uint32_t))) != cudaSuccess) {
        cudaGetLastError();
        if (err && n) snprintf(err, n, "cuda:%d: tickets: %s", index, cudaGetErrorString(e));
        if (s->tickets) cudaFree(s->tickets);
        cudaEventDestroy(s->order_event);
        cudaStreamDestroy(s->own_stream);
        free(s);
        return BR_E_DEVICE;
    }
    s->sm_count = s->prop.multiProcessorCount;
    s->has_wgmma = s->cc == 90 && br_cuda_built_wgmma();
    ctx->be_state = s;
    snprintf(ctx->device_desc, sizeof ctx->device_desc, "cuda:%d %.100s (sm_%d, %.1f GiB)", index,
             s->prop.name, s->cc, (double)s->prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return BR_OK;
}

static void cuda_close(br_ctx *ctx) {
    br_cuda *s = ctx->be_state;
    if (!s) return;
    cudaSetDevice(s->device);
    /* the caller's stream may carry work of ours the own stream does not wait for */
    cudaStreamSynchronize(s->stream);
    cudaStreamSynchronize(s->own_stream);
    for (size_t i = 0; i < s->nevents; i++)
        if (s->events[i]) cudaEventDestroy(s->events[i]);
    free(s->events);
    for (size_t i = 0; i < s->nretired; i++)
        cudaFree(s->retired[i]);
    free(s->retired);
    cudaFree(s->ws);
    cudaFree(s->tickets);
    cudaEventDestroy(s->order_event);
    cudaStreamDestroy(s->own_stream);
    cudaGetLastError(); /* nothing of the teardown is a later context's error */
    free(s);
    ctx->be_state = NULL;
}

static br_status cuda_alloc(br_ctx *ctx, size_t bytes, void **out) {
    br_cuda *s = br_cuda_state(ctx);
    cudaError_t e = cudaMalloc(out, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky-free error state */
        return br_fail(ctx, e == cudaErrorMemoryAllocation ? BR_E_NOMEM : BR_E_DEVICE,
                       "cudaMalloc of %zu bytes on cuda:%d failed: %s", bytes, s->device,
                       cudaGetErrorString(e));
    }
    return BR_OK;
}

static void cuda_release(br_ctx *ctx, void *mem) {
    br_cuda *s = br_cuda_state(ctx);
    /* ops issued before may still read it */
    cudaStreamSynchronize(s->stream);
    cudaFree(mem);
}

static br_status cuda_upload(br_ctx *ctx, void *dst, const void *src, size_t bytes) {
    br_cuda *s = br_cuda_state(ctx);
    BR_CUDA_TRY(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s->stream));
    BR_CUDA_TRY(ctx, cudaStreamSynchronize(s->stream));
    return BR_OK;
}

static br_status cuda_download(br_ctx *ctx, void *dst, const void *src, size_t bytes) {
    br_cuda *s = br_cuda_state(ctx);
    BR_CUDA_TRY(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s->stream));
    BR_CUDA_TRY(ctx, cudaStreamSynchronize(s->stream));
    return BR_OK;
}

static br_status cuda_sync(br_ctx *ctx) {
    br_cuda *s = br_cuda_state(ctx);
    BR_CUDA_TRY(ctx, cudaStreamSynchronize(s->stream));
    return BR_OK;
}

br_status br_cuda_workspace(br_ctx *ctx, size_t bytes, void **out) {
    br_cuda *s = br_cuda_state(ctx);
    if (bytes < ctx->ws_need) bytes = ctx->ws_need;
    if (bytes <= s->ws_bytes && s->ws) {
        *out = s->ws;
        return BR_OK;
    }
    if (s->capturing)
        return br_fail(ctx, BR_E_STATE, "workspace of %zu bytes not reserved before graph capture",
                       bytes);
    /* a capture by the caller (torch.cuda.graph) on the context's stream: cudaMalloc
     * would invalidate it */
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    BR_CUDA_TRY(ctx, cudaStreamIsCapturing(s->stream, &cap));
    if (cap != cudaStreamCaptureStatusNone)
        return br_fail(ctx, BR_E_STATE,
                       "workspace: %zu bytes needed while the stream is being captured, %zu "
                       "reserved (run the same work once before the capture)",
                       bytes, s->ws_bytes);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* not left for the next launch check */
        return br_fail(ctx, e == cudaErrorMemoryAllocation ? BR_E_NOMEM : BR_E_DEVICE,
                       "workspace: cudaMalloc of %zu bytes on cuda:%d failed: %s", bytes, s->device,
                       cudaGetErrorString(e));
    }
    if (s->ws) { /* a captured graph may still name the old one */
        void **r = realloc(s->retired, (s->nretired + 1) * sizeof *r);
        if (!r) {
            cudaFree(p);
            return br_fail(ctx, BR_E_NOMEM, "out of host memory");
        }
        s->retired = r;
        s->retired[s->nretired++] = s->ws;
    }
    s->ws = p;
    s->ws_bytes = bytes;
    *out = p;
    return BR_OK;
}

unsigned br_cuda_blocks(br_ctx *ctx, size_t items, unsigned threads) {
    br_cuda *s = ctx->be_state;
    size_t want = (items + threads - 1) / threads;
    size_t cap = (size_t)(s->sm_count > 0 ? s->sm_count : 1) * 32;
    if (want > cap) want = cap;
    return want ? (unsigned)want : 1u;
}

static br_status cuda_graph_launch(br_ctx *ctx, br_graph *g) {
    br_cuda *s = br_cuda_state(ctx);
    if (!g->be_graph) {
        void *ws = NULL;
        if (g->ws_need) BR_TRY(br_cuda_workspace(ctx, g->ws_need, &ws));
        /* Captured on the own stream whatever stream the context runs on (CUDA does
         * not capture the legacy stream), as the ops would launch there: the launch
         * then places the whole graph on the current stream. Capture runs nothing, so
         * it needs no order against the work queued on either stream. */
        cudaStream_t run = s->stream;
        int legacy = s->legacy_stream;
        s->stream = s->own_stream;
        s->legacy_stream = 0;
        cudaError_t e = cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal);
        if (e != cudaSuccess) {
            s->stream = run;
            s->legacy_stream = legacy;
            return br_cuda_check(ctx, e, "cudaStreamBeginCapture", __FILE__, __LINE__);
        }
        s->capturing = 1;
        br_status st = BR_OK;
        for (size_t i = 0; i < g->n && st == BR_OK; i += g->ops[i].unit_n)
            st = br_unit_exec(ctx, &g->ops[i]);
        s->capturing = 0;
        cudaGraph_t graph = NULL;
        e = cudaStreamEndCapture(s->stream, &graph);
        s->stream = run;
        s->legacy_stream = legacy;
        if (st != BR_OK) {
            if (graph) cudaGraphDestroy(graph);
            cudaGetLastError(); /* an invalidated capture's error is not the next op's */
            return st;
        }
        if (e != cudaSuccess)
            return br_cuda_check(ctx, e, "cudaStreamEndCapture", __FILE__, __LINE__);
        cudaGraphExec_t exec = NULL;
        e = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        if (e != cudaSuccess)
            return br_cuda_check(ctx, e, "cudaGraphInstantiate", __FILE__, __LINE__);
        g->be_graph = exec;
    }
    BR_CUDA_TRY(ctx, cudaGraphLaunch((cudaGraphExec_t)g->be_graph, s->stream));
    ctx->stats.launches++;
    return BR_OK;
}

static void cuda_graph_release(br_ctx *ctx, br_graph *g) {
    br_cuda *s = br_cuda_state(ctx);
    cudaStreamSynchronize(s->stream);
    cudaGraphExecDestroy((cudaGraphExec_t)g->be_graph);
    g->be_graph = NULL;
}

static br_status cuda_timer_mark(br_ctx *ctx, size_t slot) {
    br_cuda *s = br_cuda_state(ctx);
    if (slot >= s->nevents) {
        size_t n = slot + 1 > 2 * s->nevents ? slot + 1 : 2 * s->nevents;
        cudaEvent_t *ev = realloc(s->events, n * sizeof *ev);
        if (!ev) return br_fail(ctx, BR_E_NOMEM, "profiler: out of host memory for %zu events", n);
        memset(ev + s->nevents, 0, (n - s->nevents) * sizeof *ev);
        s->events = ev;
        s->nevents = n;
    }
    if (!s->events[slot]) BR_CUDA_TRY(ctx, cudaEventCreate(&s->events[slot]));
    BR_CUDA_TRY(ctx, cudaEventRecord(s->events[slot], s->stream));
    return BR_OK;
}

static br_status cuda_timer_elapsed(br_ctx *ctx, size_t from, size_t to, double *ms) {
    br_cuda *s = br_cuda_state(ctx);
    if (from >= s->nevents || to >= s->nevents || !s->events[from] || !s->events[to])
        return br_fail(ctx, BR_E_ARG, "profiler: timer marks %zu and %zu were never recorded", from,
                       to);
    float f = 0;
    BR_CUDA_TRY(ctx, cudaEventSynchronize(s->events[to]));
    BR_CUDA_TRY(ctx, cudaEventElapsedTime(&f, s->events[from], s->events[to]));
    *ms = f;
    return BR_OK;
}

/* A caller's stream handle as the runtime API takes it: cudaStreamLegacy is the
 * legacy stream NULL names. */
static int is_legacy(cudaStream_t st) { return st == NULL || st == cudaStreamLegacy; }

static br_status cuda_set_stream(br_ctx *ctx, void *stream, int own) {
    static const char fn[] = "br_ctx_set_stream";
    br_cuda *s = br_cuda_state(ctx);
    cudaStream_t to = own ? s->own_stream : (cudaStream_t)stream;
    if (to == s->stream) return BR_OK;
    /* Query capture first: a stream some other code (e.g. torch.cuda.graph) is
     * capturing must not see calls that invalidate its capture, such as the device
     * query below on some drivers. */
    enum cudaStreamCaptureStatus cap_to = cudaStreamCaptureStatusNone,
                                 cap_from = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(to, &cap_to);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return br_fail(ctx, BR_E_ARG, "%s: stream %p is not a usable CUDA stream: %s (%s)", fn,
                       stream, cudaGetErrorString(e), cudaGetErrorName(e));
    }
#if CUDART_VERSION >= 12080 /* cudaStreamGetDevice; older runtimes skip the check */
    if (!own && cap_to == cudaStreamCaptureStatusNone && !is_legacy(to) &&
        to != cudaStreamPerThread) {
        int dev = -1;
        e = cudaStreamGetDevice(to, &dev);
        if (e != cudaSuccess) {
            cudaGetLastError();
            return br_fail(ctx, BR_E_ARG, "%s: stream %p is not a usable CUDA stream: %s (%s)", fn,
                           stream, cudaGetErrorString(e), cudaGetErrorName(e));
        }
        if (dev != s->device)
            return br_fail(ctx, BR_E_ARG,
                           "%s: stream %p belongs to cuda:%d, the context is on cuda:%d", fn,
                           stream, dev, s->device);
    }
#endif
    BR_CUDA_TRY(ctx, cudaStreamIsCapturing(s->stream, &cap_from));
    /* Issue order across the switch: the new stream waits for everything issued on
     * the old one. A stream under capture records nothing that runs now: work issued
     * before a capture that begins on the new stream must be done before any replay
     * can start, so the host waits for it instead. */
    if (cap_from == cudaStreamCaptureStatusNone && cap_to == cudaStreamCaptureStatusNone) {
        BR_CUDA_TRY(ctx, cudaEventRecord(s->order_event, s->stream));
        BR_CUDA_TRY(ctx, cudaStreamWaitEvent(to, s->order_event, 0));
    } else if (cap_from == cudaStreamCaptureStatusNone) {
        /* A capture in global mode (torch.cuda.graph's default) forbids a synchronize
         * on any stream of any thread in the process; this thread's relaxed mode
         * exempts this one wait for the old stream, which the capture never sees. */
        enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        BR_CUDA_TRY(ctx, cudaThreadExchangeStreamCaptureMode(&mode));
        const cudaError_t se = cudaStreamSynchronize(s->stream);
        BR_CUDA_TRY(ctx, cudaThreadExchangeStreamCaptureMode(&mode));
        if (se != cudaSuccess)
            return br_cuda_check(ctx, se, "cudaStreamSynchronize(s->stream)", __FILE__, __LINE__);
    } else if (cap_to != cudaStreamCaptureStatusNone) {
        /* both captured: an edge inside the capture (CUDA refuses it between two) */
        BR_CUDA_TRY(ctx, cudaEventRecord(s->order_event, s->stream));
        BR_CUDA_TRY(ctx, cudaStreamWaitEvent(to, s->order_event, 0));
    }
    s->stream = to;
    s->legacy_stream = is_legacy(to);
    return BR_OK;
}

cudaStream_t br_cuda_current_stream(br_ctx *ctx) { return br_cuda_state(ctx)->stream; }

static void *cuda_stream(const br_ctx *ctx) {
    const br_cuda *s = (const br_cuda *)ctx->be_state;
    return s->legacy_stream ? NULL : (void *)s->stream;
}

/* Memory the kernels of ctx's GPU can address: its device memory, or managed memory
 * (the first and the last byte: a range that leaves the allocation is not always
 * caught, the caller vouches for the count). */
static br_status cuda_check_wrap(br_ctx *ctx, const void *ptr, size_t bytes) {
    static const char fn[] = "br_buf_wrap";
    br_cuda *s = br_cuda_state(ctx);
    const void *ends[2] = {ptr, (const char *)ptr + bytes - 1};
    for (int i = 0; i < 2; i++) {
        struct cudaPointerAttributes at;
        memset(&at, 0, sizeof at);
        cudaError_t e = cudaPointerGetAttributes(&at, ends[i]);
        if (e != cudaSuccess) {
            cudaGetLastError();
            return br_fail(ctx, BR_E_ARG, "%s: CUDA does not know %p as memory: %s (%s)", fn,
                           ends[i], cudaGetErrorString(e), cudaGetErrorName(e));
        }
        const char *what = i ? "the last byte of the buffer" : "ptr";
        switch (at.type) {
        case cudaMemoryTypeDevice:
        case cudaMemoryTypeManaged:
            if (at.device != s->device)
                return br_fail(ctx, BR_E_ARG,
                               "%s: %s (%p) is memory of cuda:%d, the context is on cuda:%d", fn,
                               what, ends[i], at.device, s->device);
            break;
        case cudaMemoryTypeHost:
            return br_fail(ctx, BR_E_ARG,
                           "%s: %s (%p) is pinned host memory; a CUDA context needs device "
                           "memory of cuda:%d",
                           fn, what, ends[i], s->device);
        default:
            return br_fail(ctx, BR_E_ARG,
                           "%s: %s (%p) is host memory unknown to CUDA; a CUDA context needs "
                           "device memory of cuda:%d",
                           fn, what, ends[i], s->device);
        }
    }
    return BR_OK;
}

static const br_backend cuda_backend = {
    .name = "cuda",
    .open = cuda_open,
    .close = cuda_close,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .upload = cuda_upload,
    .download = cuda_download,
    .sync = cuda_sync,
    .graph_launch = cuda_graph_launch,
    .graph_release = cuda_graph_release,
    .timer_mark = cuda_timer_mark,
    .timer_elapsed = cuda_timer_elapsed,
    .unit_ws = br_cuda_unit_ws,
    .run_unit = br_cuda_run_unit,
    .check_wrap = cuda_check_wrap,
    .set_stream = cuda_set_stream,
    .stream = cuda_stream,
    .ops =
        {
            [BR_OP_FILL] = br_cuda_fill,
            [BR_OP_COPY] = br_cuda_copy,
            [BR_OP_MM] = br_cuda_mm,
            [BR_OP_MM_BITS] = br_cuda_mm_bits,
            [BR_OP_CVT] = br_cuda_cvt,
            [BR_OP_CVT_COLS] = br_cuda_cvt_cols,
            [BR_OP_CVT_T] = br_cuda_cvt_t,
            [BR_OP_EXPAND] = br_cuda_expand,
            [BR_OP_COLSUM] = br_cuda_colsum,
            [BR_OP_COLSUM_FUSED] = br_cuda_colsum_fused,
            [BR_OP_SCALE_ACC] = br_cuda_scale_acc,
            [BR_OP_SCALE_ACC2] = br_cuda_scale_acc2,
            [BR_OP_F16_TO_F32] = br_cuda_f16_to_f32,
            [BR_OP_ADD] = br_cuda_add,
            [BR_OP_SPLIT_QG] = br_cuda_split_qg,
            [BR_OP_DENSE_FWD] = br_cuda_dense_fwd,
            [BR_OP_DENSE_BWD] = br_cuda_dense_bwd,
            [BR_OP_ADAM] = br_cuda_adam,
            [BR_OP_ADAM_CAT] = br_cuda_adam_cat,
            [BR_OP_SUMSQ] = br_cuda_sumsq,
            [BR_OP_SUMSQ_CAT] = br_cuda_sumsq_cat,
            [BR_OP_CVT_PAD] = br_cuda_cvt_pad,
            [BR_OP_STEP_CTRL] = br_cuda_step_ctrl,
            [BR_OP_SIGN_STEP] = br_cuda_sign_step,
            [BR_OP_EXPAND_SCALED] = br_cuda_expand_scaled,
            [BR_OP_SIGN_ROWDOT] = br_cuda_sign_rowdot,
            [BR_OP_CVT_BOTH] = br_cuda_cvt_both,
            [BR_OP_MM_TN] = br_cuda_mm_tn,
        },
};

const br_backend *br_cuda_backend(void) { return &cuda_backend; }

br_status br_cuda_devices(br_device_info *out, int max, int *count, char *err, size_t n) {
    if (!count) return BR_E_ARG;
    *count = 0;
    int c = 0;
    cudaError_t e = cudaGetDeviceCount(&c);
    if (e != cudaSuccess || c == 0) {
        cudaGetLastError();
        no_gpu_message(err, n, e);
        return BR_E_UNSUPPORTED;
    }
    for (int i = 0; i < c && out && i < max; i++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        br_device_info *d = &out[*count];
        memset(d, 0, sizeof *d);
        snprintf(d->name, sizeof d->name, "%.127s", p.name);
        d->index = i;
        d->cc_major = p.major;
        d->cc_minor = p.minor;
        d->mem_total = p.totalGlobalMem;
        d->sm_count = p.multiProcessorCount;
        (*count)++;
    }
    return BR_OK;
}
