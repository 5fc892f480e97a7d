/* The per-layer trainer of the compression. */
#ifndef BR_COMPRESS_TRAIN_H
#define BR_COMPRESS_TRAIN_H

#include "compress/compress.h"
#include "compress/objective.h"

/* What one layer trains and is judged on. */
typedef struct br_train_data {
    const br_objective *obj; /* the training objective's pool */
    const float *x_eval;     /* held-out inputs [neval][n] (never trained on) */
    size_t neval;
    /* The held-out criterion weighs each token by 1/max(‖y_t‖², floor2) as the
     * objective's data term does (floor2 > 0), else it is the aggregate relative
     * output error² (floor2 = 0). */
    double floor2;
} br_train_data;

/* Called after each step (loss < 0 when the step's loss was not measured);
 * non-zero cancels. */
typedef int (*br_train_hook)(void *user, int step, int steps, double loss);

/* A layer's trainer on a context: the original W as a frozen f16 plane, its
 * outputs on the pool and the held-out inputs, a BLR layer of rank `rank` (padded
 * to a multiple of 32 inside: the padding's ℓ stays 0) and its optimizer. */
typedef struct br_trainer br_trainer;
br_status br_trainer_new(br_ctx *ctx, const float *w, size_t m, size_t n, size_t rank, size_t paths,
                         const br_train_data *data, const br_compress_opts *opts, br_trainer **out);
void br_trainer_free(br_trainer *t);

/* How a layer state L (host, f32 scales) does on the held-out inputs: the
 * criterion (what early stopping and the choice of initialization compare), the
 * aggregate relative output error ‖ŷ − y‖/‖y‖ and the per-token quantiles (either
 * may be NULL). */
br_status br_trainer_measure(br_trainer *t, const br_blr_host *L, double *criterion,
                             double *aggregate, br_token_err *tok);

/* Train from L (initialized): on success L holds the best state seen on the
 * held-out inputs, scales rounded to f16. f: the initialization's real factors for
 * the sign latents (NULL: latents from the bits). Fills rep's err_init, tok_init
 * (of L with its scales rounded), err_trained, tok_trained, steps, stop,
 * best_step, loss and eval curves. */
br_status br_trainer_train(br_trainer *t, br_blr_host *L, const br_svid_factors *f,
                           br_layer_report *rep, br_train_hook hook, void *user);

#endif
