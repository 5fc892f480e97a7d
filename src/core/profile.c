/* The op profiler. Each profiled op records two timer marks; marks are resolved
 * into per-(tag, op) totals when the report is asked for or the slots run out. */
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/profile.h"

#define PROF_SLOTS 8192 /* timer marks pending before a forced resolve */

typedef struct prof_row {
    char tag[32];
    char name[24];
    uint64_t calls;
    uint64_t launches;
    double ms;
} prof_row;

typedef struct prof_pending {
    size_t row;
    size_t from, to;
} prof_pending;

struct br_prof {
    prof_row *rows;
    size_t nrows, caprows;
    prof_pending pend[PROF_SLOTS / 2];
    size_t npend;
    br_stats base; /* counters at the last reset */
};

static struct br_prof *prof_get(br_ctx *ctx) {
    if (!ctx->prof) {
        ctx->prof = calloc(1, sizeof *ctx->prof);
        if (ctx->prof) ctx->prof->base = ctx->stats;
    }
    return ctx->prof;
}

static size_t row_for(struct br_prof *p, const char *tag, const char *name) {
    for (size_t i = 0; i < p->nrows; i++)
        if (!strcmp(p->rows[i].tag, tag) && !strcmp(p->rows[i].name, name)) return i;
    if (p->nrows == p->caprows) {
        size_t cap = p->caprows ? 2 * p->caprows : 32;
        prof_row *r = realloc(p->rows, cap * sizeof *r);
        if (!r) return (size_t)-1;
        p->rows = r;
        p->caprows = cap;
    }
    prof_row *r = &p->rows[p->nrows];
    memset(r, 0, sizeof *r);
    snprintf(r->tag, sizeof r->tag, "%s", tag);
    snprintf(r->name, sizeof r->name, "%s", name);
    return p->nrows++;
}

/* Turn every pending pair of marks into time on its row (waits for the device). */
static br_status resolve(br_ctx *ctx, struct br_prof *p) {
    br_status st = BR_OK;
    for (size_t i = 0; i < p->npend; i++) {
        double ms = 0;
        br_status s = ctx->be->timer_elapsed(ctx, p->pend[i].from, p->pend[i].to, &ms);
        if (s != BR_OK && st == BR_OK) st = s;
        if (s == BR_OK) p->rows[p->pend[i].row].ms += ms;
    }
    p->npend = 0;
    return st;
}

void br_prof_begin(br_ctx *ctx, br_prof_mark *m) {
    m->ok = 0;
    struct br_prof *p = prof_get(ctx);
    if (!p || !ctx->be->timer_mark) return;
    if (p->npend == PROF_SLOTS / 2) resolve(ctx, p);
    m->slot = 2 * p->npend;
    m->launches = ctx->stats.launches;
    m->ok = ctx->be->timer_mark(ctx, m->slot) == BR_OK;
}

void br_prof_end(br_ctx *ctx, const br_prof_mark *m, const char *name, const char *tag) {
    struct br_prof *p = ctx->prof;
    if (!m->ok || !p) return;
    size_t row = row_for(p, tag ? tag : "", name);
    if (row == (size_t)-1) return;
    p->rows[row].calls++;
    p->rows[row].launches += ctx->stats.launches - m->launches;
    if (ctx->be->timer_mark(ctx, m->slot + 1) != BR_OK) return;
    p->pend[p->npend].row = row;
    p->pend[p->npend].from = m->slot;
    p->pend[p->npend].to = m->slot + 1;
    p->npend++;
}

static int by_tag_then_time(const void *a, const void *b) {
    const prof_row *x = a, *y = b;
    int c = strcmp(x->tag, y->tag);
    if (c) return c;
    return x->ms < y->ms ? 1 : x->ms > y->ms ? -1 : 0;
}

br_status br_profile_report(br_ctx *ctx, FILE *out) {
    if (!ctx || !out) return BR_E_ARG;
    struct br_prof *p = prof_get(ctx);
    if (!p) return br_fail(ctx, BR_E_NOMEM, "br_profile_report: out of host memory");
    br_status st = ctx->be->sync(ctx);
    if (st != BR_OK) return st;
    st = resolve(ctx, p);
    if (p->nrows) qsort(p->rows, p->nrows, sizeof *p->rows, by_tag_then_time);
    double total = 0;
    for (size_t i = 0; i < p->nrows; i++)
        total += p->rows[i].ms;
    br_stats d = ctx->stats;
    fprintf(out, "bitrank profile on %s: %.3f ms of device time in %zu op rows\n", ctx->device_desc,
            total, p->nrows);
    fprintf(out, "  launches %llu, allocations %llu, uploads %llu (%.1f MiB), downloads %llu\n",
            (unsigned long long)(d.launches - p->base.launches),
            (unsigned long long)(d.allocs - p->base.allocs),
            (unsigned long long)(d.uploads - p->base.uploads),
            (double)(d.upload_bytes - p->base.upload_bytes) / (1024.0 * 1024.0),
            (unsigned long long)(d.downloads - p->base.downloads));
    fprintf(out, "  %-12s %-14s %8s %10s %10s %9s %6s\n", "tag", "op", "calls", "total ms",
            "mean us", "launches", "share");
    for (size_t i = 0; i < p->nrows; i++) {
        const prof_row *r = &p->rows[i];
        fprintf(out, "  %-12s %-14s %8llu %10.3f %10.2f %9llu %5.1f%%\n", r->tag[0] ? r->tag : "-",
                r->name, (unsigned long long)r->calls, r->ms,
                r->calls ? 1000.0 * r->ms / (double)r->calls : 0.0, (unsigned long long)r->launches,
                total > 0 ? 100.0 * r->ms / total : 0.0);
    }
    return st;
}

void br_profile_reset(br_ctx *ctx) {
    if (!ctx || !ctx->prof) return;
    ctx->prof->nrows = 0;
    ctx->prof->npend = 0;
    ctx->prof->base = ctx->stats;
}

void br_prof_free(br_ctx *ctx) {
    if (!ctx->prof) return;
    free(ctx->prof->rows);
    free(ctx->prof);
    ctx->prof = NULL;
}
