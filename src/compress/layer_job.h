/* One matrix of the compression job: initialization, training, report. */
#ifndef BR_COMPRESS_LAYER_JOB_H
#define BR_COMPRESS_LAYER_JOB_H

#include "compress/train.h"

/* NaN or Inf anywhere in W [m][n] fails with BR_E_NONFINITE naming the element (and
 * the file, when given). */
br_status br_check_weights(br_ctx *ctx, const char *file, const char *name, const float *w,
                           size_t m, size_t n);

/* Tokens of synthetic or Gram-shaped training inputs a layer gets: 8 batches, at
 * most 32768 (at least one batch). */
size_t br_train_pool_tokens(const br_compress_opts *opts);

/* Initialize (Dual-SVID, on the device where possible) and train layer `name` of
 * rank `rank`; *out is allocated (freed on failure); rep filled. */
br_status br_compress_one(br_ctx *ctx, const char *name, const float *w, size_t m, size_t n,
                          size_t rank, const br_train_in *in, const double *gram,
                          const br_compress_opts *opts, br_blr_host *out, br_layer_report *rep,
                          br_train_hook hook, void *user);

/* br_compress_one for a job of many layers: *dev is the job's device Dual-SVID
 * state, made here by the first layer that initializes on the device and reused
 * by the next ones; the job frees it (br_svid_device_free) when it ends. gc: the
 * job's Gram factor, reused by the next layer with the same Gram (may be NULL). */
br_status br_compress_layer(br_ctx *ctx, br_svid_device **dev, br_gram_cache *gc, const char *name,
                            const float *w, size_t m, size_t n, size_t rank, const br_train_in *in,
                            const double *gram, const br_compress_opts *opts, br_blr_host *out,
                            br_layer_report *rep, br_train_hook hook, void *user);

#endif
