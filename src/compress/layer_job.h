/* One matrix of the compression job: objective, initialization, training, report. */
#ifndef BR_COMPRESS_LAYER_JOB_H
#define BR_COMPRESS_LAYER_JOB_H

#include "compress/calib.h"
#include "compress/train.h"

/* NaN or Inf anywhere in W [m][n] fails with BR_E_NONFINITE naming the element (and
 * the file, when given). */
br_status br_check_weights(br_ctx *ctx, const char *file, const char *name, const float *w,
                           size_t m, size_t n);

/* Compress layer `name` (W [m][n] f32 on the host) at rank `rank` from its
 * calibration set (recorded inputs, or held-out samples and the Gram or channel
 * variances the objective is made of): the objective, the best of the Dual-SVID
 * initializations on the held-out criterion (plain, channel-scaled, whitened),
 * then training. *out is allocated (freed on failure); rep filled. When the
 * trained weight error exceeds 1 (Ŵ further from W than 0 is) rep->outcome is
 * BR_LAYER_SKIPPED with a note and *out still holds the layer. *dev: the job's
 * device Dual-SVID state, made here by the first layer that initializes on the
 * device and reused by the next; the job frees it (br_svid_device_free). */
br_status br_compress_layer(br_ctx *ctx, br_svid_device **dev, const char *name, const float *w,
                            size_t m, size_t n, size_t rank, const br_calib_set *cs,
                            const double *gram, const br_compress_opts *opts, br_blr_host *out,
                            br_layer_report *rep, br_train_hook hook, void *user);

#endif
