/* Status names, the failure message of a context, and the status of a missing
 * context. */
#include <stdio.h>
#include <string.h>

#include "core/internal.h"

const char *br_status_name(br_status st) {
    switch (st) {
    case BR_OK: return "BR_OK";
    case BR_E_ARG: return "BR_E_ARG";
    case BR_E_SHAPE: return "BR_E_SHAPE";
    case BR_E_DTYPE: return "BR_E_DTYPE";
    case BR_E_SIZE: return "BR_E_SIZE";
    case BR_E_OVERFLOW: return "BR_E_OVERFLOW";
    case BR_E_NOMEM: return "BR_E_NOMEM";
    case BR_E_DEVICE: return "BR_E_DEVICE";
    case BR_E_UNSUPPORTED: return "BR_E_UNSUPPORTED";
    case BR_E_IO: return "BR_E_IO";
    case BR_E_FORMAT: return "BR_E_FORMAT";
    case BR_E_NONFINITE: return "BR_E_NONFINITE";
    case BR_E_STATE: return "BR_E_STATE";
    }
    return "BR_E_UNKNOWN";
}

br_status br_vfail(br_ctx *ctx, br_status st, const char *fmt, va_list ap) {
    if (ctx) vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    return st;
}

br_status br_fail(br_ctx *ctx, br_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    br_vfail(ctx, st, fmt, ap);
    va_end(ap);
    return st;
}

br_status br_check_ctx(const br_ctx *ctx) { return ctx ? BR_OK : BR_E_ARG; }

const char *br_ctx_error(const br_ctx *ctx) { return ctx ? ctx->err : "no context"; }

void br_ctx_clear_error(br_ctx *ctx) {
    if (ctx) ctx->err[0] = '\0';
}
