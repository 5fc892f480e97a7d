/* Blocked right-looking Cholesky factorization over a fixed decomposition.
 *
 * Why not LAPACK's dpotrf: a threaded OpenBLAS sums in an order that depends on
 * the thread count (core/blas_threads.h), and on one thread it takes ~40 s for
 * an [11008][11008] Gram. Here, for each diagonal block of NB columns (a fixed
 * width, so the blocks depend on n alone):
 *   L11 = chol(A11)              one serial dpotrf of [NB][NB]
 *   L21 = A21·L11⁻ᵀ              fixed panels of PANEL_ROWS rows, each one
 *                                single-threaded dtrsm, shared by OpenMP
 *   A22 −= L21·L21ᵀ              lower triangle only: one br_dgemm (fixed panels)
 *                                per block row of A22
 * Every element is computed by one call of a fixed shape, whichever thread runs
 * it, so the bits are the same for any thread count. */
#include "compress/host_chol.h"
#include "compress/host_blas.h"
#include "core/blas_threads.h"

#include <limits.h>

#ifdef BR_HAVE_OPENMP
#include <omp.h>
#endif

#if defined(BR_HAVE_CBLAS) && defined(BR_HAVE_LAPACK)
#include <cblas.h>
#include <lapacke.h>

#define NB ((size_t)256)
#define PANEL_ROWS ((size_t)256)

/* L21 = A21·L11⁻ᵀ for A21 [rows][nb] below the diagonal block L11 [nb][nb]
 * (both with row stride n), in fixed panels of rows. */
static void solve_panel(size_t n, const double *l11, double *a21, size_t rows, size_t nb) {
    size_t count = (rows + PANEL_ROWS - 1) / PANEL_ROWS;
    const int parallel = count > 1;
    const int prev = br_blas_serial_begin(), team = prev > 1 ? prev : 1;
#ifdef BR_HAVE_OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(team) if (parallel)
#endif
    for (size_t t = 0; t < count; t++) {
        size_t f = t * PANEL_ROWS, e = rows - f < PANEL_ROWS ? rows - f : PANEL_ROWS;
        cblas_dtrsm(CblasRowMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, (int)e,
                    (int)nb, 1.0, l11, (int)n, a21 + f * n, (int)n);
    }
    br_blas_serial_end(prev);
    (void)parallel;
    (void)team;
}

int br_dchol_lower(size_t n, double *a) {
    if (n > INT_MAX / 2) return -1;
    for (size_t j = 0; j < n; j += NB) {
        size_t nb = n - j < NB ? n - j : NB, rest = n - j - nb;
        double *a11 = a + j * n + j;
        /* row-major lower L11 is column-major upper L11ᵀ: dpotrf 'U' in place, no
         * transposed copy */
        const int prev = br_blas_serial_begin();
        lapack_int info =
            LAPACKE_dpotrf_work(LAPACK_COL_MAJOR, 'U', (lapack_int)nb, a11, (lapack_int)n);
        br_blas_serial_end(prev);
        if (info > 0) return (int)(j + (size_t)info);
        if (info < 0) return (int)info;
        if (!rest) break;
        double *a21 = a + (j + nb) * n + j;
        solve_panel(n, a11, a21, rest, nb);
        /* A22 −= L21·L21ᵀ, block row by block row: rows [i, i + h) of A22 and
         * its columns up to the end of that block's diagonal */
        for (size_t i = 0; i < rest; i += NB) {
            size_t h = rest - i < NB ? rest - i : NB;
            br_dgemm(0, 1, h, i + h, nb, -1.0, a21 + i * n, n, a21, n, 1.0,
                     a + (j + nb + i) * n + j + nb, n);
        }
    }
    for (size_t i = 0; i < n; i++)
        for (size_t c = i + 1; c < n; c++)
            a[i * n + c] = 0;
    return 0;
}

#else

/* Without CBLAS or LAPACK: column by column (Cholesky–Crout), each element one
 * sum in a fixed order, on one thread. */
#include <math.h>

int br_dchol_lower(size_t n, double *a) {
    if (n > INT_MAX / 2) return -1;
    for (size_t c = 0; c < n; c++) {
        double d = a[c * n + c];
        for (size_t k = 0; k < c; k++)
            d -= a[c * n + k] * a[c * n + k];
        if (!(d > 0)) return (int)c + 1;
        double root = sqrt(d);
        a[c * n + c] = root;
        for (size_t i = c + 1; i < n; i++) {
            double s = a[i * n + c];
            for (size_t k = 0; k < c; k++)
                s -= a[i * n + k] * a[c * n + k];
            a[i * n + c] = s / root;
        }
    }
    for (size_t i = 0; i < n; i++)
        for (size_t c = i + 1; c < n; c++)
            a[i * n + c] = 0;
    return 0;
}

#endif
