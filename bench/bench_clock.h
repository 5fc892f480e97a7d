/* The host clock and medians of the C benchmarks. */
#ifndef BR_BENCH_CLOCK_H
#define BR_BENCH_CLOCK_H

#include <stdlib.h>
#include <time.h>

/* Milliseconds of the monotonic clock. */
static inline double bench_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* qsort's order of doubles. */
static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#endif
