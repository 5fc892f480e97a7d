/* Host matrix products: CBLAS, or loops with the same meaning. */
#include "compress/host_blas.h"

#ifdef BR_HAVE_CBLAS
#include <cblas.h>

void br_sgemm(int ta, int tb, size_t M, size_t N, size_t K, float alpha, const float *A, size_t lda,
              const float *B, size_t ldb, float beta, float *C, size_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

void br_dgemm(int ta, int tb, size_t M, size_t N, size_t K, double alpha, const double *A,
              size_t lda, const double *B, size_t ldb, double beta, double *C, size_t ldc) {
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

#else

#define GEMM_LOOP(T, ACC)                                                                          \
    for (size_t i = 0; i < M; i++)                                                                 \
        for (size_t j = 0; j < N; j++) {                                                           \
            ACC acc = 0;                                                                           \
            for (size_t k = 0; k < K; k++) {                                                       \
                T a = ta ? A[k * lda + i] : A[i * lda + k];                                        \
                T b = tb ? B[j * ldb + k] : B[k * ldb + j];                                        \
                acc += (ACC)a * (ACC)b;                                                            \
            }                                                                                      \
            C[i * ldc + j] = (T)(alpha * acc + (beta != 0 ? beta * C[i * ldc + j] : 0));           \
        }

void br_sgemm(int ta, int tb, size_t M, size_t N, size_t K, float alpha, const float *A, size_t lda,
              const float *B, size_t ldb, float beta, float *C, size_t ldc) {
#ifdef BR_HAVE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    GEMM_LOOP(float, double)
}

void br_dgemm(int ta, int tb, size_t M, size_t N, size_t K, double alpha, const double *A,
              size_t lda, const double *B, size_t ldb, double beta, double *C, size_t ldc) {
#ifdef BR_HAVE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    GEMM_LOOP(double, double)
}
#endif
