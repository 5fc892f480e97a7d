/* The layer optimizer's state, shared by the files of src/optim. */
#ifndef BR_OPTIM_INTERNAL_H
#define BR_OPTIM_INTERNAL_H

#include "blr/blr_internal.h"

/* One sign matrix's latent state (BR_SIGN_LATENT), views of opt->sign_mem. */
typedef struct br_sign_mat {
    br_buf *latent; /* f32 [rows][r] */
    br_buf *m1;     /* f32 [rows][r] */
    br_buf *v;      /* f32 [rows][r], or factored [rows + r] */
    size_t rows;
    size_t budget; /* most flips per step */
} br_sign_mat;

struct br_blr_opt {
    br_blr *layer;
    br_ctx *ctx;
    br_opt_cfg cfg;
    size_t paths;     /* the layer's */
    size_t nscale;    /* paths·(m + r + n): the scale parameters */
    br_buf *adam_mem; /* f32 [4][nscale]: m1 | m2 | mask | rel_floor */
    br_buf *adam_m1, *adam_m2, *mask, *floor;
    br_buf **adam_view; /* [2·paths]: m1, m2 of each path */
    /* gradient norms: np parameters of the layer's grads, scale ones first */
    size_t np, nclip;
    br_buf *tab;      /* u32 [2·np] */
    /* u32 [2·np]: tab with G_U's and G_V's entries on their row norms (the layer's,
     * as its backward wrote them): Σ rownorm² = ‖G‖² from m + n floats, not (m + n)·r */
    br_buf *tab_norms;
    br_buf *partials; /* f32 [np][BR_SUMSQ_PARTS] */
    br_buf *ctrl;     /* f32: hyper [4] | state [4] | sched [4] | sign_sched [8] | norms [np+1] */
    br_buf *hyper, *state, *sched, *sign_sched, *norms;
    br_buf *flips;    /* u32 [2·paths] */
    br_buf *sign_mem; /* latent state of every matrix */
    br_sign_mat *mat; /* [2·paths]: S_U,0, S_V,0, S_U,1, ... */
    /* br_blr_opt_info's arrays */
    float *host_norms;    /* [5·paths] */
    uint32_t *host_flips; /* [2·paths] */
};

#endif
