/* Thread counts for the tests that check results do not depend on them: OpenMP's,
 * and OpenBLAS's where the program is linked with it (weak: NULL otherwise; called
 * directly, it is not capped at the core count as OPENBLAS_NUM_THREADS is, so a
 * 2-core machine runs 3 BLAS threads). */
#ifndef BR_TESTS_THREADS_H
#define BR_TESTS_THREADS_H

#ifdef _OPENMP
#include <omp.h>
#endif

extern void openblas_set_num_threads(int num_threads) __attribute__((weak));
extern int openblas_get_num_threads(void) __attribute__((weak));

static inline void set_threads(int omp, int blas) {
#ifdef _OPENMP
    omp_set_num_threads(omp);
#else
    (void)omp;
#endif
    if (openblas_set_num_threads) openblas_set_num_threads(blas);
}

#endif
