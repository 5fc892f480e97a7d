/* The op profiler: per (tag, op) device time and counts, resolved lazily so that
 * profiling does not synchronize after every op. */
#ifndef BR_CORE_PROFILE_H
#define BR_CORE_PROFILE_H

#include "core/internal.h"

typedef struct br_prof_mark {
    size_t slot;       /* timer slot of the start mark */
    uint64_t launches; /* ctx->stats.launches at the start */
    int ok;
} br_prof_mark;

void br_prof_begin(br_ctx *ctx, br_prof_mark *m);
void br_prof_end(br_ctx *ctx, const br_prof_mark *m, const char *name, const char *tag);

#endif
