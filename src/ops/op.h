/* Op descriptors: what the front-end hands a backend, and what a graph records.
 * One kind per backend op (core/op_kind.h); composites (plane_linear, weight_grad,
 * gram_acc) are sequences of these, and so are the fused calls (br_mm_stage,
 * br_mm_tn2, br_mm_colsum_grouped, br_expand_scaled2, br_cvt_multi, br_sign_steps),
 * each submitted as one unit (br_submit_unit) that a backend may run as one kernel.
 *
 * Where an op lives: its contract in the header of its front-end
 * (include/bitrank_ops.h, ops/layer_ops.h, ops/sign_ops.h) and its arguments here;
 * its CPU meaning in backend/cpu (the table in cpu_backend.c names the function);
 * its CUDA kernel in backend/cuda (the table in cuda_backend.c names the launcher),
 * and a unit's fused kernel in the fusion table, backend/cuda/cuda_fuse.c.
 *
 * Every size here has been checked by the front-end: element counts fit
 * BR_MAX_ELEMS (except fill and copy counts, bounded only by the buffer: up to 2^40)
 * and every buffer holds what the shapes need. */
#ifndef BR_OPS_OP_H
#define BR_OPS_OP_H

#include "core/internal.h"
#include "core/op_kind.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "cvt", "mm_bits", ... */
const char *br_op_name(br_op_kind kind);

typedef struct br_fill_args {
    br_buf *buf;
    size_t off, count;
    uint32_t bits;
} br_fill_args;

typedef struct br_copy_args {
    br_buf *dst;
    size_t dst_off;
    const br_buf *src;
    size_t src_off, count;
} br_copy_args;

/* MM: act f16 [m][g.lda], plane f16 [n][k]. MM_BITS: plane is the u32 bitmap in
 * `layout`. MM_TN: act f16 [k][g.lda] and plane f16 [k][ldp] (k rows first).
 *   out[i][ocol + j] = fl(fl(oscale · Σ act·plane) · colscale[j]) + fl(beta · c[i][ocol + j])
 * MM's c is f32, or f16 (its exact f32 values) only in br_mm_stage's unit, whose
 * fusion is where the CUDA backend runs an f16 c. */
typedef struct br_mm_args {
    const br_buf *act, *plane;
    br_buf *out;
    br_gemm g;             /* g.ldo, g.lda already resolved (never 0); g.beta 0 without g.c */
    br_bits_layout layout; /* MM_BITS only */
    size_t ws_bytes;       /* workspace reserved for a split-K reduction (0: none) */
    size_t ldp;            /* MM_TN only: plane row stride, resolved (≥ n) */
} br_mm_args;

typedef struct br_cvt_args {
    const br_buf *src, *col; /* col may be NULL */
    br_buf *dst;
    size_t m, k;
    float scale;
} br_cvt_args;

typedef struct br_cvt_cols_args {
    const br_buf *src;
    size_t ld_src, col0;
    br_buf *dst;
    size_t m, k;
    float scale;
} br_cvt_cols_args;

typedef struct br_cvt_t_args {
    const br_buf *src, *col; /* col may be NULL */
    br_buf *dst;
    size_t ntok, k;
    float scale;
} br_cvt_t_args;

typedef struct br_expand_args {
    const br_buf *bits;
    size_t rows, r;
    br_buf *plane, *plane_t; /* either may be NULL */
} br_expand_args;

typedef struct br_colsum_args {
    const br_buf *a, *b, *f;
    br_colsum_term term;
    br_buf *out;
    size_t rows, k;
    int accumulate;
} br_colsum_args;

typedef struct br_colsum_fused_args {
    const br_buf *a, *b;
    br_buf *sum;
    size_t rows, k;
    br_fuse fuse;
    /* fuse.col and sum in groups (0: plain [k]): column c at (c / group)·stride + c % group */
    size_t group, stride;
    int overwrite; /* sum = the totals (br_colsum_fused_grouped with accumulate 0), not += */
} br_colsum_fused_args;

typedef struct br_scale_acc_args {
    const br_buf *a, *col;
    br_buf *out;
    size_t m, k;
    int accumulate;
} br_scale_acc_args;

typedef struct br_scale_acc2_args {
    const br_buf *a0, *col0, *a1, *col1;
    br_buf *out;
    size_t m, k;
} br_scale_acc2_args;

typedef struct br_unary_args {
    const br_buf *a, *b; /* F16_TO_F32: a = src; ADD: a + b */
    br_buf *out;
    size_t n;
} br_unary_args;

typedef struct br_split_qg_args {
    br_buf *qg, *q, *gate;
    size_t m, heads, hd;
    int merge;
} br_split_qg_args;

/* DENSE_FWD: out[m][r] (+)= a[m][k]·w[r][k]ᵀ. DENSE_BWD: out[m][k] += a[m][r]·w[r][k]
 * (a = dy, out = dx). impl is resolved (never AUTO). */
typedef struct br_dense_args {
    const br_buf *a, *w;
    br_buf *out;
    size_t m, k, r;
    int accumulate;
    br_dense_impl impl;
} br_dense_args;

typedef struct br_adam_args {
    br_buf *w, *m1, *m2;
    const br_buf *grad, *mask, *rel_floor; /* ADAM: rel_floor NULL; mask may be NULL */
    size_t n;
    br_adam_hp hp;
} br_adam_args;

/* SUMSQ: tab NULL, np 1, out [64]. SUMSQ_CAT: tab u32 [2·np], out [np][64]. */
typedef struct br_sumsq_args {
    const br_buf *a, *tab;
    size_t n, np;
    br_buf *out;
} br_sumsq_args;

/* The sign optimizer's ops (ops/sign_ops.h documents them). */
typedef struct br_cvt_pad_args {
    const br_buf *src, *col; /* col may be NULL */
    br_buf *dst;             /* f16 [br_pad_rows(m)][ld] */
    size_t m, k, ld;
    float scale;
} br_cvt_pad_args;

typedef struct br_step_ctrl_args {
    const br_buf *partials; /* f32 [np][BR_SUMSQ_PARTS] */
    size_t np, nclip;       /* parameters 0..nclip−1 form the clipped norm */
    const br_buf *hyper;    /* f32 [4]: lr, sign_lr, max_norm, − */
    br_buf *state;          /* f32 [4]: t, β1^t, β2^t (sign betas), − */
    br_buf *sched;          /* f32 [4] {lr, t, grad_mul, skip} of br_adam_cat */
    br_buf *sign_sched;     /* f32 [8] {lr, t, grad_mul, skip, 1−β1^t, 1−β2^t, −, −} */
    br_buf *norms;          /* f32 [np + 1]: per-parameter norms, then the clipped norm */
    float sign_beta1, sign_beta2;
} br_step_ctrl_args;

typedef struct br_sign_step_args {
    int exact;               /* 0: latent Adam, 1: exact-flip scores */
    int factored;            /* latent: factored second moment */
    const br_buf *grad;      /* f32 [rows][r] */
    br_buf *bits;            /* u32 [rows][r/32] */
    br_buf *latent, *m1, *v; /* latent: f32 [rows][r]; v [rows][r] or [rows + r] */
    const br_buf *sched;     /* f32 [8], as br_step_ctrl_args.sign_sched */
    br_buf *flips;           /* u32: flips[slot] = signs flipped */
    size_t slot;
    size_t rows, r;
    size_t budget; /* most flips (rows·r: no limit) */
    float beta1, beta2, eps, clamp, hyst;
    /* exact: quad[i][k] = curv2 · rowf[i]²·rowq[i] · colf[k]²·colq[k] · Σ normsrc² */
    const br_buf *rowf, *rowq, *colf, *colq, *normsrc; /* rowq, colq, normsrc may be NULL */
    size_t nnorm;
    float curv2; /* 2 · curvature */
} br_sign_step_args;

/* The most sign steps one unit of br_sign_steps holds (the CUDA backend runs them as
 * one launch). */
#define BR_SIGN_STEPS_MAX 4

/* The reformulated layer's ops (ops/layer_ops.h documents them). Both run `paths`
 * (≥ 1) independent paths in one op: path p reads its inputs at p·(their stride)
 * elements and writes its own part of the outputs; strides of NULL buffers are 0. */
typedef struct br_expand_scaled_args {
    const br_buf *bits;     /* u32 [rows][r/32] per path, path p at p·bits_stride */
    const br_buf *rowscale; /* f32 [rows] per path, at p·scale_stride */
    br_buf *plane;          /* by_rows: f16 [rows][ld], path p's columns p·r..;
                             * else [paths·r][ld], path p's rows p·r.. */
    size_t rows, r, ld;
    size_t paths, bits_stride, scale_stride;
    float scale;
    int by_rows;
} br_expand_scaled_args;

typedef struct br_sign_rowdot_args {
    const br_buf *mat;      /* f32 [rows][ldm], path p's columns col0 + p·r..+r−1 */
    const br_buf *bits;     /* u32 [rows][r/32] per path; may be NULL without dsum */
    const br_buf *rowscale; /* f32 [rows] per path; may be NULL without grad */
    br_buf *grad;           /* f32 [rows][r] per path or NULL */
    br_buf *dsum;           /* f32 [rows] per path or NULL */
    br_buf *rownorm;        /* f32 [rows] per path or NULL: ‖grad[i]‖ as written */
    size_t rows, r, ldm, col0;
    size_t paths, bits_stride, scale_stride, grad_stride, dsum_stride, rownorm_stride;
    int accumulate; /* grad += instead of = */
} br_sign_rowdot_args;

typedef struct br_cvt_both_args {
    const br_buf *src, *col; /* f32 [m][k]; col f32 [k] or NULL */
    br_buf *dst;             /* f16 [br_pad_rows(m)][ld] or NULL */
    br_buf *dst_t;           /* f16 [br_pad_rows(k)][br_pad_tokens(m)] or NULL */
    size_t m, k, ld;
    float scale;
    size_t col_group, col_stride; /* col in groups, as br_colsum_fused_args (0: plain) */
} br_cvt_both_args;

/* An op, and the unit it belongs to. A front-end submits one op, or a short
 * sequence of them as one unit (br_submit_unit): a fused call such as br_mm_stage is
 * the primitives that define it, in order, and a backend may run a unit's pattern as
 * one kernel (the CUDA backend's fusion table, backend/cuda/cuda_fuse.c) where its
 * result is the same bits as the ops run one after another. Nothing outside the
 * unit sees its ops apart: the front-end has checked them together (what each
 * writes apart from what the others read, where a fused kernel runs them at once). */
typedef struct br_op {
    br_op_kind kind;
    char tag[32];
    /* Set by br_submit_unit on the unit's first op (the others: unit_n 0). */
    uint32_t unit_n;       /* ops in the unit that begins here */
    const char *unit_name; /* "mm_stage": the profiler's and br_ctx_last_kernel's name */
    size_t unit_transient; /* f32 elements of the unit transient its ops name (0: none) */
    union {
        br_fill_args fill;
        br_copy_args copy;
        br_mm_args mm;
        br_cvt_args cvt;
        br_cvt_cols_args cvt_cols;
        br_cvt_t_args cvt_t;
        br_expand_args expand;
        br_colsum_args colsum;
        br_colsum_fused_args colsum_fused;
        br_scale_acc_args scale_acc;
        br_scale_acc2_args scale_acc2;
        br_unary_args unary;
        br_split_qg_args split_qg;
        br_dense_args dense;
        br_adam_args adam;
        br_sumsq_args sumsq;
        br_cvt_pad_args cvt_pad;
        br_step_ctrl_args step_ctrl;
        br_sign_step_args sign_step;
        br_expand_scaled_args expand_scaled;
        br_sign_rowdot_args sign_rowdot;
        br_cvt_both_args cvt_both;
    } u;
} br_op;

/* br_sign_rowdot's checks and its op's arguments (layer_ops.c), for the ops that
 * include a rowdot. */
br_status br_sign_rowdot_args_of(br_ctx *ctx, const char *fn, const br_buf *mat, size_t ldm,
                                 size_t col0, const br_buf *bits, size_t bits_stride,
                                 const br_buf *rowscale, size_t scale_stride, br_buf *grad,
                                 size_t grad_stride, br_buf *dsum, size_t dsum_stride, size_t rows,
                                 size_t r, size_t paths, int accumulate, br_sign_rowdot_args *out);
/* The row norms of a rowdot's gradient (br_tn_rowdot's rownorm) into args made by
 * br_sign_rowdot_args_of: checked against them (grad present, rows floats per path
 * at `stride`, apart from every other operand), then set. */
br_status br_sign_rowdot_rownorm(br_ctx *ctx, const char *fn, br_buf *rownorm, size_t stride,
                                 br_sign_rowdot_args *args);

/* br_adam_cat's checks and its op's arguments (optim_ops.c), for the ops that
 * include an Adam over concatenated parameters. */
br_status br_adam_cat_args_of(br_ctx *ctx, const char *fn, br_buf *w, const br_buf *grad,
                              br_buf *m1, br_buf *m2, const br_buf *mask, const br_buf *rel_floor,
                              size_t n, const br_adam_hp *hp, br_adam_args *out);

/* br_colsum_fused(_grouped)'s checks and its op's arguments (reduce.c), for the ops
 * that include fused column sums; *ws the workspace its submission reserves. */
br_status br_colsum_fused_args_of(br_ctx *ctx, const char *fn, const br_buf *a, const br_buf *b,
                                  br_buf *sum, size_t rows, size_t k, const br_fuse *fuse,
                                  size_t group, size_t stride, int overwrite,
                                  br_colsum_fused_args *out, size_t *ws);

/* Run (or, while recording, record) one checked op. ws_bytes: backend workspace
 * the op needs (the column-reduction partials). */
br_status br_submit(br_ctx *ctx, br_op *op, size_t ws_bytes);

/* Run (or record) the n checked ops as one unit named `name` (a string that lives as
 * long as the program): a backend with a fusion for their pattern runs it fused,
 * else each op in turn. ws_bytes: the workspace the front-end reserves for the unit
 * (the largest any of its ops needs), to which the backend's unit_ws adds. transient:
 * f32 elements of the context's unit transient (br_unit_transient) the ops name. */
br_status br_submit_unit(br_ctx *ctx, br_op *ops, size_t n, const char *name, size_t transient,
                         size_t ws_bytes);

/* The context's unit transient: an f32 buffer that one op of a unit writes and a
 * later op of the same unit reads, and nothing else does (br_mm_stage's product
 * when out is not kept). Its memory exists only where a unit that names it runs
 * unfused (br_unit_run_ops reserves it): a fused kernel never forms the values, so
 * its contents after a unit are unspecified. NULL on out of host memory. */
br_buf *br_unit_transient(br_ctx *ctx);

/* Whether buf is the context's unit transient (a fused launcher then does not keep
 * the values). */
int br_is_unit_transient(const br_ctx *ctx, const br_buf *buf);

/* The unit transient's memory, grown to the first->unit_transient floats the unit
 * names (none: nothing to do). Its ops read br_ptr when they run, so the recorded
 * units that name it follow it when it moves; a backend that replays captured
 * launches runs such units fused, never needing it. */
br_status br_unit_reserve_transient(br_ctx *ctx, const br_op *first);

/* Run one unit (first: its first op) through the backend: its run_unit where it has
 * one, else br_unit_run_ops. For backends replaying recorded units (CUDA capture). */
br_status br_unit_exec(br_ctx *ctx, const br_op *first);

/* Each of the n ops in turn through the backend's op table (the unfused meaning of a
 * unit), the unit transient reserved first where first->unit_transient says so. */
br_status br_unit_run_ops(br_ctx *ctx, const br_op *first, size_t n);

/* One op through the backend's op table, BR_E_UNSUPPORTED where it has none. */
br_status br_op_exec(br_ctx *ctx, const br_op *op);

#ifdef __cplusplus
}
#endif
#endif
