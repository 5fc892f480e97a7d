/* Contexts: choosing a backend from the device string, options, lifetime. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/internal.h"

static void put_err(char *err, size_t n, const char *msg) {
    if (err && n) snprintf(err, n, "%s", msg);
}

/* "N" → N; -2 if malformed. */
static int parse_index(const char *digits) {
    if (digits[0] < '0' || digits[0] > '9') return -2;
    char *end = NULL;
    errno = 0;
    long v = strtol(digits, &end, 10);
    if (errno || *end != '\0' || v < 0 || v > 1024) return -2;
    return (int)v;
}

/* Whether dev names backend `name`: "NAME" (*index = -1, the backend's default
 * device) or "NAME:N" (*index = N; -2 if malformed: N is decimal digits only, as
 * strtol alone would also take "+1" and " 1"). */
static int names_backend(const char *dev, const char *name, int *index) {
    size_t len = strlen(name);
    if (strncmp(dev, name, len) != 0 || (dev[len] != '\0' && dev[len] != ':')) return 0;
    *index = dev[len] == '\0' ? -1 : parse_index(dev + len + 1);
    return 1;
}

/* The one place the environment sets options: BITRANK_OPTIONS, in br_ctx_set_options'
 * form, for every context made (a bad value makes br_ctx_new fail, saying so). */
static br_status apply_env_options(br_ctx *ctx, char *err, size_t n) {
    const char *e = getenv("BITRANK_OPTIONS");
    if (!e) return BR_OK;
    char why[600];
    if (br_options_parse(&ctx->opt, e, why, sizeof why) == BR_OK) return BR_OK;
    if (err && n) snprintf(err, n, "BITRANK_OPTIONS=\"%.64s\": %s", e, why);
    return BR_E_ARG;
}

static br_status open_on(const br_backend *be, int index, br_ctx **out, char *err, size_t n) {
    br_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        put_err(err, n, "out of host memory for the context");
        return BR_E_NOMEM;
    }
    ctx->be = be;
    ctx->opt = br_options_default();
    br_status st = apply_env_options(ctx, err, n);
    if (st != BR_OK) {
        free(ctx);
        return st;
    }
    st = be->open(ctx, index, err, n);
    if (st != BR_OK) {
        free(ctx);
        return st;
    }
    *out = ctx;
    return BR_OK;
}

br_status br_ctx_new(const char *device, br_ctx **out, char *err, size_t err_len) {
    if (!out) {
        put_err(err, err_len, "br_ctx_new: out is NULL");
        return BR_E_ARG;
    }
    *out = NULL;
    if (!device || strcmp(device, "auto") == 0) {
        /* CUDA, then a Vulkan GPU (a software Vulkan device is slower than the CPU
         * backend: "vulkan" names it), then the CPU */
        const br_backend *cuda = br_cuda_backend(), *vk = br_vulkan_backend();
        if (cuda && open_on(cuda, -1, out, NULL, 0) == BR_OK) return BR_OK;
        if (vk && br_vulkan_gpu_present() && open_on(vk, -1, out, NULL, 0) == BR_OK) return BR_OK;
        return open_on(br_cpu_backend(), -1, out, err, err_len);
    }
    if (strcmp(device, "cpu") == 0) return open_on(br_cpu_backend(), -1, out, err, err_len);
    int cuda_idx = -2, vk_idx = -2;
    int is_cuda = names_backend(device, "cuda", &cuda_idx);
    int is_vk = names_backend(device, "vulkan", &vk_idx);
    if (!(is_cuda && cuda_idx != -2) && !(is_vk && vk_idx != -2)) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "unknown device \"%.64s\": expected cpu, cuda, cuda:N, vulkan, vulkan:N or auto",
                 device);
        put_err(err, err_len, msg);
        return BR_E_ARG;
    }
    if (is_vk) {
        const br_backend *vk = br_vulkan_backend();
        if (!vk) {
            put_err(err, err_len,
                    "this build of bitrank has no Vulkan backend (it needs the Vulkan headers and "
                    "loader, libvulkan-dev, and glslangValidator, glslang-tools, at build time)");
            return BR_E_UNSUPPORTED;
        }
        return open_on(vk, vk_idx, out, err, err_len); /* -1: the best device there is */
    }
    const br_backend *cuda = br_cuda_backend();
    if (!cuda) {
        put_err(err, err_len, "this build of bitrank has no CUDA backend (nvcc was not found)");
        return BR_E_UNSUPPORTED;
    }
    return open_on(cuda, cuda_idx < 0 ? 0 : cuda_idx, out, err, err_len);
}

void br_ctx_free(br_ctx *ctx) {
    if (!ctx) return;
    if (ctx->rec) { /* an unfinished recording is dropped */
        br_graph *g = ctx->rec;
        ctx->rec = NULL;
        br_graph_free(g);
    }
    br_buf_free(ctx->expand_plane);
    for (size_t i = 0; i < ctx->n_expand_retired; i++)
        br_buf_free(ctx->expand_retired[i]);
    free(ctx->expand_retired);
    br_buf_free(ctx->unit_transient);
    br_prof_free(ctx);
    ctx->be->close(ctx);
    free(ctx);
}

const char *br_ctx_backend(const br_ctx *ctx) { return ctx ? ctx->be->name : "none"; }
const char *br_ctx_device(const br_ctx *ctx) { return ctx ? ctx->device_desc : "none"; }

br_status br_ctx_sync(br_ctx *ctx) {
    if (!ctx) return BR_E_ARG;
    return ctx->be->sync(ctx);
}

br_status br_ctx_set_options(br_ctx *ctx, const char *spec) {
    if (!ctx) return BR_E_ARG;
    char why[600];
    if (br_options_parse(&ctx->opt, spec, why, sizeof why) != BR_OK)
        return br_fail(ctx, BR_E_ARG, "br_ctx_set_options: %s", why);
    return BR_OK;
}

br_status br_ctx_options(const br_ctx *ctx, char *buf, size_t len) {
    if (!ctx || !buf || !len) return BR_E_ARG;
    br_options_format(&ctx->opt, buf, len);
    return BR_OK;
}

br_status br_ctx_option(const br_ctx *ctx, const char *key, char *buf, size_t len) {
    if (!ctx) return BR_E_ARG;
    if (br_options_value(&ctx->opt, key, buf, len) != BR_OK)
        return br_fail((br_ctx *)ctx, BR_E_ARG, "br_ctx_option: unknown key \"%.64s\"",
                       key ? key : "(null)");
    return BR_OK;
}

const char *br_ctx_last_kernel(const br_ctx *ctx) { return ctx ? ctx->kernel : ""; }

void br_ctx_set_tag(br_ctx *ctx, const char *tag) {
    if (!ctx) return;
    snprintf(ctx->tag, sizeof ctx->tag, "%s", tag ? tag : "");
}

br_status br_ctx_set_stream(br_ctx *ctx, void *cuda_stream) {
    if (!ctx) return BR_E_ARG;
    if (!ctx->be->set_stream)
        return br_fail(ctx, BR_E_UNSUPPORTED,
                       "br_ctx_set_stream: the %s backend has no streams (a CUDA context has)",
                       ctx->be->name);
    if (ctx->rec)
        return br_fail(ctx, BR_E_STATE,
                       "br_ctx_set_stream: a graph is being recorded (set the stream before "
                       "br_graph_begin or after br_graph_end)");
    return ctx->be->set_stream(ctx, cuda_stream, 0);
}

br_status br_ctx_use_own_stream(br_ctx *ctx) {
    if (!ctx) return BR_E_ARG;
    if (!ctx->be->set_stream) return BR_OK;
    if (ctx->rec)
        return br_fail(ctx, BR_E_STATE,
                       "br_ctx_use_own_stream: a graph is being recorded (change the stream "
                       "before br_graph_begin or after br_graph_end)");
    return ctx->be->set_stream(ctx, NULL, 1);
}

void *br_ctx_stream(const br_ctx *ctx) {
    return ctx && ctx->be->stream ? ctx->be->stream(ctx) : NULL;
}
