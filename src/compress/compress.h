/* Internals of the compression job shared by the files of src/compress: the host form of a
 * layer's factors, the Dual-SVID initialization, calibration inputs and the
 * per-layer training loop. Nothing below compress/ includes this. */
#ifndef BR_COMPRESS_COMPRESS_H
#define BR_COMPRESS_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

#include "bitrank.h"
#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether one of opts' --include patterns matches `name` (the user asked for it). */
int br_compress_included(const br_compress_opts *opts, const char *name);

/* Every option of a compression in range (BR_E_ARG naming the first that is not):
 * br_compress_file and br_compress_matrix check the same way. */
br_status br_compress_check_opts(br_ctx *ctx, const br_compress_opts *opts);

/* Layers on the host are the io layout's br_blr_host (f32 scales while training;
 * a row of signs is ceil(r/32) words, the bits past r 0). These helpers are the
 * job's own, independent of the io implementation. */
br_status br_layer_host_alloc(br_ctx *ctx, br_blr_host *L, size_t m, size_t n, size_t r,
                              size_t paths);
void br_layer_host_free(br_blr_host *L);

/* Sign of S[row][k] (+1 or −1) from a bitmap [rows][r/32]. */
static inline float br_bit_sign(const uint32_t *bits, size_t words, size_t row, size_t k) {
    return (bits[row * words + k / 32] >> (k % 32)) & 1u ? 1.0f : -1.0f;
}

/* Ŵ [m][n] (f32) of the first `paths` paths of L (all of them if 0). */
br_status br_layer_host_reconstruct(br_ctx *ctx, const br_blr_host *L, size_t paths, float *w_hat);

/* The real-valued factors the signs of a Dual-SVID come from, per path: U' [m][r]
 * and V' [n][r] (past min(m, n): tiny values of the random signs there), whose
 * signs are the bits: a sign optimizer's latents start there. */
typedef struct br_svid_factors {
    float *u[2], *v[2];
} br_svid_factors;
br_status br_svid_factors_alloc(br_ctx *ctx, br_svid_factors *f, size_t m, size_t n, size_t r,
                                size_t paths);
void br_svid_factors_free(br_svid_factors *f);

/* The factor of a damped input Gram that the activation-aware Dual-SVID uses (its
 * Cholesky factor L and L⁻¹, f32 [n][n]), kept for the next layer with the same
 * Gram: the layers reading one input (q, k and v of a block; gate and up) share
 * it, and its factorization is most of their initialization's host time. A job
 * owns one; zero-initialized it is empty. The key is a 64-bit hash of the Gram's
 * n·n doubles. */
typedef struct br_gram_cache {
    size_t n;
    uint64_t key;
    float *factor, *factor_inv; /* NULL while empty */
    size_t made;                /* factorizations done (for tests) */
} br_gram_cache;
void br_gram_cache_free(br_gram_cache *c); /* frees the factors and empties it */

/* The Dual-SVID initialization of L (already allocated with m, n, r, paths) from
 * W [m][n] f32 on the host. gram: the input Gram Σ [n][n] (f64, symmetric) for
 * the activation-aware variant, or NULL. gc: where the Gram's factor is kept and
 * looked up (NULL: made for this call alone; the result is the same bits either
 * way). seed: the randomized SVD's test matrix and the signs of unused columns.
 * factors: receives U', V' (NULL: not kept). Fails with BR_E_UNSUPPORTED when
 * this build has no LAPACK. */
br_status br_svid_init_host(br_ctx *ctx, const float *w, const double *gram, br_gram_cache *gc,
                            uint64_t seed, br_blr_host *L, br_svid_factors *factors);

/* The k leading singular triplets of A [m][n] (row-major f32): u [m][k], s [k]
 * (descending), v [n][k]. k ≤ min(m, n). user: the caller's state (device handles). */
typedef br_status (*br_svd_topk_fn)(br_ctx *ctx, const float *a, size_t m, size_t n, size_t k,
                                    uint64_t seed, float *u, float *s, float *v, void *user);
/* br_svid_init_host with the truncated SVD done by `svd` (the rest on the host). */
br_status br_svid_init_with(br_ctx *ctx, const float *w, const double *gram, br_gram_cache *gc,
                            uint64_t seed, br_blr_host *L, br_svid_factors *factors,
                            br_svd_topk_fn svd, void *user);
/* How the activation-aware Dual-SVID weighs the input directions: it factors W·F
 * instead of W and maps the V side back, F·Fᵀ = Σ (the inputs' second moments):
 * full, F the Cholesky factor L of Σ (mapped back by L⁻¹), or diagonal, F =
 * diag(scale) (the channels' RMS; mapped back exactly into g). */
typedef struct br_whitening {
    size_t n;
    const float *factor, *factor_inv; /* full: L and L⁻¹ f32 [n][n] (else NULL) */
    const double *scale;              /* diagonal: [n], each > 0 (when factor is NULL) */
} br_whitening;
/* The Dual-SVID of W [m][n] into L under whitening wh (NULL: plain), the SVD by
 * `svd`; the host's (LAPACK) or dev's. */
br_status br_svid_whitened_with(br_ctx *ctx, const float *w, const br_whitening *wh, uint64_t seed,
                                br_blr_host *L, br_svid_factors *factors, br_svd_topk_fn svd,
                                void *user);
br_status br_svid_whitened_host(br_ctx *ctx, const float *w, const br_whitening *wh, uint64_t seed,
                                br_blr_host *L, br_svid_factors *factors);

/* Extra columns of a randomized range finder for k singular vectors. */
size_t br_svid_oversample(size_t k);

/* What the Dual-SVID needs on a context's device (CUDA: the cuBLAS and cuSOLVER
 * handles, the SVD's device buffers grown to the largest layer), made once and
 * reused by every layer of a job: made per layer, the handles cost more than a
 * small layer's whole SVD. Owned by its maker (the job), freed before the context;
 * bound to one context, so two contexts in one process each have their own.
 * br_svid_device_new fails with BR_E_UNSUPPORTED where the context has no device
 * path (the caller falls back to the host). */
typedef struct br_svid_device br_svid_device;
br_status br_svid_device_new(br_ctx *ctx, br_svid_device **out);
void br_svid_device_free(br_svid_device *dev); /* NULL: nothing */

/* The Dual-SVID initialization (as br_svid_init_host) with the SVD on dev's device. */
br_status br_svid_init_on(br_svid_device *dev, const float *w, const double *gram,
                          br_gram_cache *gc, uint64_t seed, br_blr_host *L,
                          br_svid_factors *factors);
/* br_svid_whitened_with with the SVD on dev's device. */
br_status br_svid_whitened_on(br_svid_device *dev, const float *w, const br_whitening *wh,
                              uint64_t seed, br_blr_host *L, br_svid_factors *factors);
/* The same with a br_svid_device made and freed for this one call. */
br_status br_svid_init_device(br_ctx *ctx, const float *w, const double *gram, uint64_t seed,
                              br_blr_host *L, br_svid_factors *factors);

/* ‖a − b‖ / ‖b‖ over n values, in f64. */
double br_rel_diff(const float *a, const float *b, size_t n);

#ifdef __cplusplus
}
#endif
#endif
