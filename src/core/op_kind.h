/* The kinds of op a backend implements, one slot each in its table (core/backend.h).
 * A fusion of ops is not a kind: it is a unit of these (ops/op.h: br_submit_unit),
 * which a backend may run fused (backend/cuda/cuda_fuse.c).
 * Only the list is here, below the op layer, because the table's size needs it; the
 * ops' arguments and front-ends are the op layer's (ops/op.h). */
#ifndef BR_CORE_OP_KIND_H
#define BR_CORE_OP_KIND_H

typedef enum br_op_kind {
    BR_OP_FILL = 0,
    BR_OP_COPY,
    BR_OP_MM,
    BR_OP_MM_BITS,
    BR_OP_CVT,
    BR_OP_CVT_COLS,
    BR_OP_CVT_T,
    BR_OP_EXPAND,
    BR_OP_COLSUM,
    BR_OP_COLSUM_FUSED,
    BR_OP_SCALE_ACC,
    BR_OP_SCALE_ACC2,
    BR_OP_F16_TO_F32,
    BR_OP_ADD,
    BR_OP_SPLIT_QG,
    BR_OP_DENSE_FWD,
    BR_OP_DENSE_BWD,
    BR_OP_ADAM,
    BR_OP_ADAM_CAT,
    BR_OP_SUMSQ,
    BR_OP_SUMSQ_CAT,
    BR_OP_CVT_PAD,       /* sign_ops.c: staging into wider rows, pad columns zero */
    BR_OP_STEP_CTRL,     /* sign_ops.c: gradient norms → step schedule, refusal */
    BR_OP_SIGN_STEP,     /* sign_ops.c: latent Adam / exact-flip scores, budgeted flips */
    BR_OP_EXPAND_SCALED, /* layer_ops.c: sign bitmap → scaled f16 plane, transposed */
    BR_OP_SIGN_ROWDOT,   /* layer_ops.c: sign gradients and Σ_k s·M per row */
    BR_OP_CVT_BOTH,      /* layer_ops.c: staging padded, transposed or both from one read */
    BR_OP_MM_TN,         /* gemm.c: br_mm on act and plane stored k-rows-first */
    /* ops of later layers (sign optimizer, ...) are added above this line */
    BR_OP_COUNT
} br_op_kind;

#endif
