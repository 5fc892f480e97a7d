/* The BLR layer's state, shared by src/blr (layer, scratch, forward, backward) and
 * src/optim (the optimizer reads the layer's gradients and steps its parameters). */
#ifndef BR_BLR_INTERNAL_H
#define BR_BLR_INTERNAL_H

#include "bitrank.h"

#define BR_BLR_NPARTS 12 /* br_blr_part values */

/* Views of one path's parts (NULL where the layer has none). bits_u_pad / bits_v_pad
 * hold the bitmaps with their rows padded to a multiple of 32 (pad rows are read
 * by the GEMMs whose K is m or n, against zero operands). */
typedef struct br_blr_path {
    br_buf *part[BR_BLR_NPARTS];
    br_buf *bits_u_pad; /* u32 [mpad][words] */
    br_buf *bits_v_pad; /* u32 [npad][words] */
} br_blr_path;

struct br_blr {
    br_ctx *ctx;
    size_t m, n, r, paths;
    size_t words;      /* r/32 */
    size_t mpad, npad; /* m, n rounded up to a multiple of 32 */
    unsigned flags;
    size_t path_len; /* m + r + n: one path's h | ℓ | g */
    br_buf *params;  /* f32 [paths][m + r + n] */
    /* f32 [paths][m + r + n] (dh | dℓ | dg), then with BR_BLR_SIGN_GRADS
     * [paths][(m + n)·r] (G_U | G_V): one concatenation, so one br_sumsq_cat
     * and one br_adam_cat cover a layer */
    br_buf *grads;
    size_t grads_len;
    br_buf *bits;      /* u32 [paths][(mpad + npad)·words] */
    br_buf *curv;      /* f32 [paths·r + n]: Σ_t a² per path, then Σ_t x² (CURVATURE) */
    br_blr_path *path; /* [paths] */
};

/* Offsets of a path's parts inside params / grads (elements). */
static inline size_t br_blr_param_off(const br_blr *l, size_t p) { return p * l->path_len; }
static inline size_t br_blr_sign_grad_off(const br_blr *l, size_t p) {
    return l->paths * l->path_len + p * (l->m + l->n) * l->r;
}

struct br_blr_shared {
    br_ctx *ctx;
    size_t ntok, m, n, r;
    unsigned flags;
    br_buf *stage; /* f16 [br_pad_rows(ntok)][max(mpad, npad, r)]: the GEMMs' activations */
    br_buf *t1;    /* f32 [ntok][n]: dx' of one path */
    br_buf *t2;    /* f32 [ntok][r]: b of one path */
    /* sign gradients: transposed operands [br_pad_rows(rows)][br_pad_tokens(ntok)] */
    br_buf *t_dy, *t_a, *t_x, *t_b;
    br_buf *gtmp; /* f32 [max(m, n)][r]: a new G before it is added (accumulate) */
};

struct br_blr_scratch {
    const br_blr *layer;
    size_t ntok, paths;
    br_blr_shared *shared;
    int own_shared;
    br_buf *mem; /* f32 [paths][ntok·(r + m)] */
    br_buf **a;  /* [paths] views f32 [ntok][r] */
    br_buf **c;  /* [paths] views f32 [ntok][m] */
};

/* The checks every layer op starts with: layer, scratch made for it, 1 ≤ ntok ≤ the
 * scratch's tokens (blr_forward.c). */
br_status br_blr_check_run(const br_blr *l, const br_blr_scratch *s, const char *fn, size_t ntok);

#endif
