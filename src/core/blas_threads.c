/* OpenBLAS's thread count, held at one for serial sections.
 *
 * Why: OpenBLAS's result depends on how many threads it runs. Measured with
 * 0.3.21 (pthreads) on this repository's machine: sgemm/dgemm differ between 1
 * thread and 2, 3 or 4 for many shapes (those whose K is not a multiple of 32),
 * and geqrf, orgqr, gesdd, syevd and potrf differ between 1 and 2 threads. So
 * the callers run OpenBLAS on one thread and split their products themselves
 * into fixed panels (core/gemm_panels.h) over an OpenMP team as large as the
 * count OpenBLAS had; LAPACK, which cannot be split from outside, just runs on
 * one thread. */
#include "core/blas_threads.h"

#ifdef BR_HAVE_OPENMP
#include <omp.h>
#endif

#ifdef BR_HAVE_CBLAS
#include <pthread.h>

/* OpenBLAS's thread control, declared here so that any cblas.h will do. */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
int openblas_get_parallel(void); /* 0 sequential, 1 pthreads, 2 OpenMP */

/* Serial sections may run on several threads at once (two jobs of one
 * process): a pthreads OpenBLAS has one thread count for the whole process, so
 * the first section to begin sets it to 1 and the last to end restores it. An
 * OpenMP OpenBLAS reads the calling thread's OpenMP count, which each section
 * sets and restores for its own thread. */
static pthread_mutex_t serial_lock = PTHREAD_MUTEX_INITIALIZER;
static int serial_depth, serial_saved;

int br_blas_serial_begin(void) {
#ifdef BR_HAVE_OPENMP
    if (openblas_get_parallel() == 2) {
        int prev = omp_get_max_threads();
        if (prev != 1) openblas_set_num_threads(1);
        return prev;
    }
#endif
    pthread_mutex_lock(&serial_lock);
    if (serial_depth++ == 0) {
        serial_saved = openblas_get_num_threads();
        if (serial_saved != 1) openblas_set_num_threads(1);
    }
    int prev = serial_saved;
    pthread_mutex_unlock(&serial_lock);
    return prev;
}

void br_blas_serial_end(int prev) {
#ifdef BR_HAVE_OPENMP
    if (openblas_get_parallel() == 2) {
        if (prev != 1) openblas_set_num_threads(prev);
        return;
    }
#endif
    (void)prev;
    pthread_mutex_lock(&serial_lock);
    if (--serial_depth == 0 && serial_saved != 1) openblas_set_num_threads(serial_saved);
    pthread_mutex_unlock(&serial_lock);
}

#else

/* Without OpenBLAS there is no thread pool to quiet (LAPACK, if any, runs on
 * whatever BLAS it was linked with). */
int br_blas_serial_begin(void) { return 1; }
void br_blas_serial_end(int prev) { (void)prev; }

#endif
