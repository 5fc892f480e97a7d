/* OpenBLAS held at one thread: its threaded routines sum in an order that
 * depends on the thread count, so every host BLAS/LAPACK call whose bits must
 * not depend on it runs inside a serial section (blas_threads.c says how). */
#ifndef BR_CORE_BLAS_THREADS_H
#define BR_CORE_BLAS_THREADS_H

/* BLAS and LAPACK calls go between these two: OpenBLAS on one thread, then the
 * thread count it had. begin returns the count it had, which end takes (callers
 * size their own OpenMP team from it). Sections may overlap on several threads;
 * BLAS calls of the process that are not ours run on one thread too while any
 * section lasts. Without OpenBLAS, begin returns 1 and end does nothing. */
int br_blas_serial_begin(void);
void br_blas_serial_end(int prev);

#endif
