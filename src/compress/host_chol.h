/* Cholesky factorization on the host whose bits do not depend on the thread
 * count (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS), yet uses every core. */
#ifndef BR_COMPRESS_HOST_CHOL_H
#define BR_COMPRESS_HOST_CHOL_H

#include <stddef.h>

/* A = L·Lᵀ for a symmetric positive definite A [n][n] (row-major f64, its lower
 * triangle read; its upper one not read): L in place of A's lower triangle, 0
 * above it. Returns LAPACK's info: 0, or c + 1 when the pivot of column c is not
 * positive (A's leading [c+1][c+1] block is not positive definite; A is then
 * partly overwritten), or a negative number when n is too large for LAPACK. */
int br_dchol_lower(size_t n, double *a);

#endif
