/* The per-layer training loop of the compression. */
#ifndef BR_COMPRESS_TRAIN_H
#define BR_COMPRESS_TRAIN_H

#include "compress/compress.h"

/* Inputs of one layer: training tokens x_train [ntrain][n], held-out x_eval
 * [neval][n] (host f32). */
typedef struct br_train_in {
    const float *x_train;
    size_t ntrain;
    const float *x_eval;
    size_t neval;
} br_train_in;

/* Called after each step (loss < 0 when the step's loss was not measured);
 * non-zero cancels. */
typedef int (*br_train_hook)(void *user, int step, int steps, double loss);

/* Train L (initialized, f32 scales) to reproduce W [m][n] f32 on the inputs; on
 * success L holds the best state seen on the held-out inputs, scales rounded to
 * f16. factors: the initialization's real factors for the sign latents (NULL:
 * latents from the bits). Fills rep's err_init, err_trained, steps and loss curve. */
br_status br_train_layer(br_ctx *ctx, const float *w, const br_train_in *in,
                         const br_compress_opts *opts, br_blr_host *L, const br_svid_factors *f,
                         br_layer_report *rep, br_train_hook hook, void *user);

#endif
