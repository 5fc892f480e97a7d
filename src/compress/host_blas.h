/* Host matrix products of the initialization (row-major f32 and f64): CBLAS
 * where the build has it, plain loops otherwise. Results are the same bits for
 * any thread count (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS): host_blas.c says how. */
#ifndef BR_COMPRESS_HOST_BLAS_H
#define BR_COMPRESS_HOST_BLAS_H

#include <stddef.h>

/* C[M][N] = alpha·op(A)·op(B) + beta·C; op(A) is [M][K], op(B) is [K][N]; ta/tb:
 * 0 = as stored, 1 = transposed (A stored [K][M], B stored [N][K]). */
void br_sgemm(int ta, int tb, size_t M, size_t N, size_t K, float alpha, const float *A, size_t lda,
              const float *B, size_t ldb, float beta, float *C, size_t ldc);
void br_dgemm(int ta, int tb, size_t M, size_t N, size_t K, double alpha, const double *A,
              size_t lda, const double *B, size_t ldb, double beta, double *C, size_t ldc);

/* X = L⁻¹ [n][n] of a lower triangular L [n][n] (row-major f64; its upper triangle
 * is not read; X's is 0): triangular solves L·X = I over fixed panels of X's
 * columns, the same bits for any thread count as the products above. */
void br_dtrinv_lower(size_t n, const double *l, double *x);

/* C[M][N] = A[M][K]·B[N][K]ᵀ + beta·C. */
static inline void br_sgemm_nt(size_t M, size_t N, size_t K, const float *A, size_t lda,
                               const float *B, size_t ldb, float beta, float *C, size_t ldc) {
    br_sgemm(0, 1, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

#endif
