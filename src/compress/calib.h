/* Calibration inputs of the compression (see br_compress_opts in bitrank.h). */
#ifndef BR_COMPRESS_CALIB_H
#define BR_COMPRESS_CALIB_H

#include "compress/compress.h"

/* Where inputs come from: files (either may be NULL). */
typedef struct br_calib_src {
    const br_st_file *acts; /* per layer NAME: tensor NAME (or NAME less ".weight") [tokens][n] */
    const br_st_file *gram; /* per layer NAME: tensor NAME [n][n] */
} br_calib_src;

/* One layer's inputs: x_train [ntrain][n] and held-out x_eval [neval][n] (host f32). */
typedef struct br_calib_set {
    float *x_train, *x_eval;
    size_t ntrain, neval;
    int owns_eval;    /* x_eval is its own allocation (else a part of x_train's) */
    int recorded;     /* x_train holds recorded inputs (else none: ntrain = 0) */
    double *var;      /* synthetic inputs: the channel variances [n] (else NULL) */
    const char *kind; /* "activations", "gram", "synthetic isotropic", "synthetic heavy-tailed" */
} br_calib_set;

/* FNV-1a of a string: per-layer seeds, option hashes. */
uint64_t br_name_hash(const char *s);

/* h updated with `len` raw bytes, 8 at a time (fast beside reading them): the
 * resume tag's hash of weights and calibration data. */
uint64_t br_bytes_hash(uint64_t h, const void *data, size_t len);

/* Tensors already hashed by br_calib_hash, so a recording that serves several
 * layers (q, k and v) is read once. Zero-initialized; br_calib_memo_free frees it. */
typedef struct br_calib_memo {
    const br_st_tensor **tensor;
    uint64_t *hash;
    size_t n, cap;
    const br_st_tensor **checked; /* tensors br_calib_check has passed */
    size_t n_checked, cap_checked;
} br_calib_memo;
void br_calib_memo_free(br_calib_memo *memo);

/* h updated with what layer `name` (n inputs) takes from the calibration files of
 * src: for each file, the name, dtype, shape and bytes of the tensor the lookup
 * picks, or a mark for none. Keys a resume on the contents of the calibration
 * data, not on their path. */
br_status br_calib_hash(br_ctx *ctx, const br_calib_src *src, const char *name, size_t n,
                        br_calib_memo *memo, uint64_t *h);

/* Check what layer `name` (n inputs) takes from the calibration files, before any
 * layer trains: recorded inputs [tokens][n] of a float dtype with at least 2
 * tokens, every value finite; a Gram [n][n] (or factor [k][n]) with finite values,
 * a diagonal ≥ 0 and not all zero, positive semi-definite (its Cholesky
 * factorization with 1% of its mean diagonal added succeeds, the damping of the
 * whitened initialization). Each tensor is checked once (memo). *acts, *gram:
 * whether the layer has each. */
br_status br_calib_check(br_ctx *ctx, const br_calib_src *src, const char *name, size_t n,
                         br_calib_memo *memo, int *acts, int *gram);

/* The input Gram of layer `name` (n inputs) from `file` (NULL, or no such tensor:
 * *gram = NULL), symmetrized, f64 [n][n]; free() it. */
br_status br_calib_gram(br_ctx *ctx, const br_st_file *file, const char *name, size_t n,
                        double **gram);

/* Inputs of layer `name`: its recorded activations if src->acts has them (the last
 * min(neval_want, tokens/4) tokens held out), else neval_want held-out Gaussian
 * tokens shaped by `gram` when given, else synthetic ones of kind `synthetic` (a
 * br_synthetic, their channel variances in var); only recorded inputs are trained
 * on (the others' objective is exact: objective.c). Seeded by seed and the name. */
br_status br_calib_inputs(br_ctx *ctx, const br_calib_src *src, const char *name, size_t n,
                          size_t neval_want, uint64_t seed, const double *gram, int synthetic,
                          br_calib_set *out);
/* Whether src has recorded inputs for layer `name` (n inputs), and which tensor:
 * the lookup br_calib_inputs makes (NULL: none). */
const br_st_tensor *br_calib_find_acts(const br_calib_src *src, const char *name, size_t n);
const br_st_tensor *br_calib_find_gram(const br_calib_src *src, const char *name, size_t n);
void br_calib_free(br_calib_set *set);

#endif
