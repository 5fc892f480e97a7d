/* Host matrix products: CBLAS, or loops with the same meaning, with results
 * independent of the thread count.
 *
 * Why not simply call a threaded BLAS: OpenBLAS's result depends on how many
 * threads it runs. Measured with 0.3.21 (pthreads) on this repository's machine:
 * sgemm/dgemm differ between 1 thread and 2, 3 or 4 for many shapes (those whose
 * K is not a multiple of 32, e.g. K = 529, 700, 1000), and geqrf, orgqr, gesdd,
 * syevd and potrf differ between 1 and 2 threads, syevd also between 2, 3 and 4.
 * A job resumed on a machine with another core count, or run with another
 * OMP_NUM_THREADS / OPENBLAS_NUM_THREADS, then got other bits, where `--resume`
 * promises the same.
 *
 * So OpenBLAS runs on one thread here (core/blas_threads.h), and we split each
 * product ourselves into panels of C (core/gemm_panels.h) taken by an OpenMP
 * team of as many threads as OpenBLAS would have run: the panels depend on the
 * shape alone, each is one
 * single-threaded GEMM of a fixed shape, and every element of C is computed in
 * exactly one of them, so the bits depend neither on which thread runs which
 * panel nor on how many threads there are, and the products still use the
 * cores they used before.
 *
 * LAPACK cannot be split from outside: its calls run between
 * br_blas_serial_begin/end, on one thread. That is the price of this guarantee:
 * the demo's [1536][1536] Gram eigendecomposition took 0.64 s instead of 0.40 s
 * on 2 cores (it is now a Cholesky factorization, ~0.1 s, whose triangular
 * inverse is split in panels like the products; QR and SVD at its sizes cost the
 * same either way); the panels cost
 * 3-25% on one thread (repacking), and match OpenBLAS's threads on two. In all,
 * the demo's host initialization went from 1.7 s to 2.0 s with
 * OMP_NUM_THREADS=2, and `bitrank demo --steps 0` takes the same time. */
#include "compress/host_blas.h"
#include "core/blas_threads.h"
#include "core/gemm_panels.h"

#ifdef BR_HAVE_OPENMP
#include <omp.h>
#endif

#ifdef BR_HAVE_CBLAS
#include <cblas.h>

/* Worth more than one thread: two panels or more, 2·10⁶ multiply-adds or more. */
#define PARALLEL_MIN_MADDS ((size_t)1 << 21)

/* br_sgemm and br_dgemm: the same panel loop over cblas_sgemm / cblas_dgemm. Rows
 * f.. of op(A) and C, or columns f.. of op(B) and C, per panel; as many threads as
 * OpenBLAS would have run (OPENBLAS_NUM_THREADS, else OMP_NUM_THREADS, else the core
 * count; an OpenMP OpenBLAS: OpenMP's count). */
#ifdef BR_HAVE_OPENMP
#define PANEL_LOOP _Pragma("omp parallel for schedule(dynamic, 1) num_threads(team) if (parallel)")
#else
#define PANEL_LOOP
#endif
#define DEFINE_HOST_GEMM(name, T, cblas_gemm)                                                      \
    void name(int ta, int tb, size_t M, size_t N, size_t K, T alpha, const T *A, size_t lda,       \
              const T *B, size_t ldb, T beta, T *C, size_t ldc) {                                  \
        if (!M || !N) return;                                                                      \
        const br_panels p = br_panels_of(M, N);                                                    \
        const int parallel = br_panels_parallel(p, M, N, K, PARALLEL_MIN_MADDS);                   \
        const int prev = br_blas_serial_begin(), team = prev > 1 ? prev : 1;                       \
        PANEL_LOOP                                                                                 \
        for (size_t t = 0; t < p.count; t++) {                                                     \
            size_t f, e;                                                                           \
            br_panel_range(p, t, &f, &e);                                                          \
            const T *a = p.by_rows ? (ta ? A + f : A + f * lda) : A;                               \
            const T *b = p.by_rows ? B : (tb ? B + f * ldb : B + f);                               \
            T *c = p.by_rows ? C + f * ldc : C + f;                                                \
            cblas_gemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,                              \
                       tb ? CblasTrans : CblasNoTrans, (int)(p.by_rows ? e : M),                   \
                       (int)(p.by_rows ? N : e), (int)K, alpha, a, (int)lda, b, (int)ldb, beta, c, \
                       (int)ldc);                                                                  \
        }                                                                                          \
        br_blas_serial_end(prev);                                                                  \
        (void)parallel;                                                                            \
        (void)team;                                                                                \
    }
DEFINE_HOST_GEMM(br_sgemm, float, cblas_sgemm)
DEFINE_HOST_GEMM(br_dgemm, double, cblas_dgemm)

/* Column panels of the inverse: a fixed width, so a panel's arithmetic depends on
 * n alone. Panel [f, f + e) of L⁻¹ is 0 above row f and solves
 * L[f:][f:]·X[f:][f:f+e] = I: (n − f)²·e multiply-adds, the first panels the most
 * (the dynamic schedule balances them). */
#define INV_PANEL ((size_t)256)

void br_dtrinv_lower(size_t n, const double *l, double *x) {
    if (!n) return;
    const br_panels p = {
        .by_rows = 0, .len = n, .size = INV_PANEL, .count = (n + INV_PANEL - 1) / INV_PANEL};
    for (size_t i = 0; i < n * n; i++)
        x[i] = i % (n + 1) == 0 ? 1.0 : 0.0;
    const int parallel = br_panels_parallel(p, n, n, n / 3, PARALLEL_MIN_MADDS);
    const int prev = br_blas_serial_begin(), team = prev > 1 ? prev : 1;
#ifdef BR_HAVE_OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(team) if (parallel)
#endif
    for (size_t t = 0; t < p.count; t++) {
        size_t f, e;
        br_panel_range(p, t, &f, &e);
        cblas_dtrsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, (int)(n - f),
                    (int)e, 1.0, l + f * n + f, (int)n, x + f * n + f, (int)n);
    }
    br_blas_serial_end(prev);
    (void)parallel;
    (void)team;
}

#else

/* Each element is one sum in k order, whichever thread computes it. */
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

/* Forward substitution, column by column: each column one fixed order of sums. */
void br_dtrinv_lower(size_t n, const double *l, double *x) {
#ifdef BR_HAVE_OPENMP
#pragma omp parallel for schedule(dynamic, 16)
#endif
    for (size_t j = 0; j < n; j++) {
        for (size_t i = 0; i < j; i++)
            x[i * n + j] = 0;
        for (size_t i = j; i < n; i++) {
            double acc = i == j ? 1.0 : 0.0;
            for (size_t c = j; c < i; c++)
                acc -= l[i * n + c] * x[c * n + j];
            x[i * n + j] = acc / l[i * n + i];
        }
    }
}
#endif
