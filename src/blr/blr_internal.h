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
     * [paths][(m + n)·r] (G_U | G_V) and [paths][m + n] (their row norms, as the
     * backward wrote them): one concatenation, so one br_sumsq_cat and one
     * br_adam_cat cover a layer */
    br_buf *grads;
    size_t grads_len;
    /* views of the row norms of G_U (path p's m at p·(m + n)) and of G_V (path p's
     * n at m + p·(m + n)); NULL without BR_BLR_SIGN_GRADS */
    br_buf *rownorm_u, *rownorm_v;
    /* br_blr_buf has handed out G_U or G_V: the caller may have written them, so
     * their row norms no longer stand for them (the optimizer reads G itself) */
    int sign_grads_out;
    br_buf *bits;      /* u32 [paths][(mpad + npad)·words] */
    br_buf *curv;      /* f32 [paths·r + n]: Σ_t a² per path, then Σ_t x² (CURVATURE) */
    br_blr_path *path; /* [paths] */
    /* Views of each part over every path, from path 0's part to the end of path
     * P−1's (path p's at p·span_stride elements): the ops that take all paths in
     * one launch read and write these (NULL where the layer has none) */
    br_buf *span[BR_BLR_NPARTS];
    size_t span_stride[BR_BLR_NPARTS];
};

/* Offset of a path's sign gradients inside grads (elements). */
static inline size_t br_blr_sign_grad_off(const br_blr *l, size_t p) {
    return l->paths * l->path_len + p * (l->m + l->n) * l->r;
}

/* Offset of a path's row norms of G_U (then, m further, of G_V) inside grads. */
static inline size_t br_blr_rownorm_off(const br_blr *l, size_t p) {
    return br_blr_sign_grad_off(l, l->paths) + p * (l->m + l->n);
}

/* Transients of the layer ops, valid within one op (R = paths·r, the total rank
 * the set was made for; a layer of total rank ≤ R lays them out at its own width). */
struct br_blr_shared {
    br_ctx *ctx;
    size_t ntok, m, n, r, paths;
    br_buf *stage;  /* f16 [pad_rows(ntok)][mpad]: f16(dy·gs) */
    br_buf *plane;  /* f16 [R][max(mpad, npad)]: W_V (forward); W_U, then X_V (backward):
                     * X_V [n][R] fits in the same elements */
    br_buf *plane2; /* f16 [m][R]: Y_U (forward), expanded with W_V in one launch while
                     * the A GEMM has yet to read W_V */
    br_buf *act;    /* f16 [pad_rows(ntok)][R]: B' (backward) */
    br_buf *b;      /* f32 [ntok][R]: B */
    br_buf *rowmat; /* f32 [m + n][R]: M_U [m][R], then N_V [n][R] (one GEMM launch) */
    /* ops so far that wrote stage: a dy staged by a loss forward is still there
     * while this is the count its scratch noted */
    unsigned long long stage_writes;
};

/* A layer's scratch: what its forward keeps for its backward (views are made once:
 * graphs record them). The layer's ops use the shared transients at its own shapes
 * from element 0 (their sizes are for the largest layer sharing them). */
struct br_blr_scratch {
    const br_blr *layer;
    size_t ntok, paths;
    br_blr_shared *shared;
    int own_shared;
    br_buf *mem;   /* f32: A [ntok][P·r] */
    br_buf *a;     /* view f32 [ntok][P·r]: A = [a_1|a_2|…] */
    br_buf *act16; /* f16 [pad_rows(ntok)][P·r]: A' (the output GEMM's and M_U's) */
    br_buf *x16;   /* f16 [pad_rows(ntok)][npad]: f16(x) of br_blr_forward */
    /* views of the shared rowmat at the layer's shapes: M_U [m][P·r] from element 0,
     * N_V [n][P·r] right after it */
    br_buf *mu, *nv;
    /* the last forward: the f16(x) it read (x16 or a staged one; N_V reads it again)
     * and its tokens; NULL / 0 before the first */
    const br_buf *x_in;
    size_t fwd_ntok;
    /* a loss forward staged f16(dy·dy_gs) in the shared stage (valid while
     * shared->stage_writes == dy_writes) */
    int dy_staged;
    float dy_gs;
    unsigned long long dy_writes;
};

/* The checks every layer op starts with: layer, scratch made for it, 1 ≤ ntok ≤ the
 * scratch's tokens (blr_check.c). */
br_status br_blr_check_run(const br_blr *l, const br_blr_scratch *s, const char *fn, size_t ntok);
/* gscale is a positive power of two (BR_E_ARG otherwise) (blr_check.c). */
br_status br_blr_check_gscale(const br_blr *l, const char *fn, float gscale);

#endif
