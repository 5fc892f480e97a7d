/* The training objective of one layer, as a pool of tokens (objective.c says why
 * a pool of this kind). */
#ifndef BR_COMPRESS_OBJECTIVE_H
#define BR_COMPRESS_OBJECTIVE_H

#include "compress/compress.h"

/* J(Ŵ) = tr(E·Σ·Eᵀ), E = W − Ŵ, written as tokens: pool [npool][n] (host f32)
 * with Σ_k pool_k·pool_kᵀ = s·Σ for a scale s > 0 (the pool's mean square is 1).
 * Σ = Σ_data/D + (λ/‖W‖²)·I: the inputs' (per-token weighted) Gram normalized so
 * that its term is the relative output error², and the weight term. */
typedef struct br_objective {
    size_t n;
    float *pool;
    size_t npool;
    int rotated; /* the pool is Σ's factor rotated over the token axis (batches < npool) */
    /* Σ where it is not diagonal: its lower Cholesky factor L (Σ = L·Lᵀ) and L⁻¹,
     * f32 [n][n] (the whitened initialization's), else NULL */
    float *chol, *chol_inv;
    double *diag;  /* [n] Σ's diagonal (the channel-scaled initialization's) */
    int diag_flat; /* every diagonal entry the same (the scaled initialization is the plain one) */
    double floor2; /* per-token weights: ‖y_t‖² below this counts as this (0: aggregate) */
} br_objective;

void br_objective_free(br_objective *obj);

/* Whether per-token weighting applies: opts->token_weighting and recorded inputs. */
int br_objective_per_token(const br_compress_opts *opts, int recorded);

/* The objective of W [m][n] from its recorded inputs x [ntok][n]: Σ_data =
 * Σ_t w_t·x_t·x_tᵀ, w_t = 1/max(‖W·x_t‖², ε·mean) with per-token weighting, else
 * 1; D = Σ_t w_t·‖W·x_t‖². batch: the tokens of one training step (a pool larger
 * than that is rotated). */
br_status br_objective_from_inputs(br_ctx *ctx, const float *w, size_t m, size_t n, const float *x,
                                   size_t ntok, const br_compress_opts *opts, size_t batch,
                                   uint64_t seed, br_objective *out);
/* The objective from an input Gram G f64 [n][n] (any scale): Σ_data = G,
 * D = tr(W·G·Wᵀ). */
br_status br_objective_from_gram(br_ctx *ctx, const float *w, size_t m, size_t n,
                                 const double *gram, const br_compress_opts *opts, size_t batch,
                                 uint64_t seed, br_objective *out);
/* The objective of synthetic inputs of channel variances var [n] (NULL: all 1):
 * Σ_data = diag(var), D = Σ_ij W_ij²·var_j. */
br_status br_objective_from_variances(br_ctx *ctx, const float *w, size_t m, size_t n,
                                      const double *var, const br_compress_opts *opts, size_t batch,
                                      uint64_t seed, br_objective *out);

/* x [rows][n] ← H·S·x/√rows in place over the row (token) axis: rows a power of two,
 * H the Walsh–Hadamard matrix, S a random ±1 diagonal from `seed`. Orthogonal:
 * xᵀ·x is unchanged. */
void br_rotate_tokens(float *x, size_t rows, size_t n, uint64_t seed);

#endif
