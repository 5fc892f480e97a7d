/* Fixed panels of a matrix product C [M][N], for results that do not depend on
 * the thread count: a threaded BLAS sums in an order that depends on how many
 * threads it runs (OpenBLAS 0.3.21 does for many shapes), so a caller runs each
 * panel as one single-threaded product of a fixed shape, the panels spread over
 * an OpenMP team. Every element of C belongs to exactly one panel and the panels
 * are a function of the shape alone, so its bits depend neither on which thread
 * runs its panel nor on how many threads there are.
 *
 * The split: along M when M ≥ N, else along N; at most BR_PANELS_MAX panels, each
 * at least BR_PANEL_MIN rows (or columns) and a multiple of 64, the last one
 * shorter. Each panel repacks the operand it shares with the others (BLAS packs
 * its operands), hence the bounds: with 16 panels that costs a few percent, and
 * 16 panels keep 16 threads busy. Users: compress/host_blas.c, backend/cpu/cpu_gemm.c. */
#ifndef BR_CORE_GEMM_PANELS_H
#define BR_CORE_GEMM_PANELS_H

#include <stddef.h>

#define BR_PANEL_MIN ((size_t)128)
#define BR_PANELS_MAX ((size_t)16)

typedef struct br_panels {
    int by_rows;             /* 1: panels of rows of C, 0: of columns */
    size_t len, size, count; /* the split extent (M or N), one panel's, how many */
} br_panels;

static inline br_panels br_panels_of(size_t M, size_t N) {
    br_panels p = {.by_rows = M >= N};
    p.len = p.by_rows ? M : N;
    size_t size = ((p.len + BR_PANELS_MAX - 1) / BR_PANELS_MAX + 63) / 64 * 64;
    p.size = size > BR_PANEL_MIN ? size : BR_PANEL_MIN;
    p.count = p.len ? (p.len + p.size - 1) / p.size : 0;
    return p;
}

/* Panel t: its first row (or column) and its extent. */
static inline void br_panel_range(br_panels p, size_t t, size_t *first, size_t *extent) {
    *first = t * p.size;
    *extent = p.len - *first < p.size ? p.len - *first : p.size;
}

/* Worth more than one thread: two panels or more, min_madds multiply-adds or more
 * (compress/host_blas.c: 2·10⁶). */
static inline int br_panels_parallel(br_panels p, size_t M, size_t N, size_t K, size_t min_madds) {
    return p.count > 1 && M * N * K >= min_madds;
}

#endif
