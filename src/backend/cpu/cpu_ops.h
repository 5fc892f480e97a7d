/* The CPU backend's op functions, one file per concern. They run synchronously on
 * the calling thread (OpenMP over independent rows where it pays) and are the
 * reference semantics of every op contract in bitrank.h. */
#ifndef BR_BACKEND_CPU_OPS_H
#define BR_BACKEND_CPU_OPS_H

#include "core/backend.h"
#include "ops/op.h"

/* OMP("omp ...") is that OpenMP pragma in a build with OpenMP, nothing without. */
#if defined(BR_HAVE_OPENMP) && defined(_OPENMP)
#define OMP(directive) _Pragma(directive)
#else
#define OMP(directive)
#endif

/* Below this many elements a parallel region costs more than it saves. */
#define PARALLEL_MIN_ELEMS ((size_t)1 << 16)

/* cpu_backend.c */
br_status br_cpu_fill(br_ctx *ctx, const br_op *op);
br_status br_cpu_copy(br_ctx *ctx, const br_op *op);
/* cpu_gemm.c */
br_status br_cpu_mm(br_ctx *ctx, const br_op *op);
br_status br_cpu_mm_bits(br_ctx *ctx, const br_op *op);
br_status br_cpu_mm_tn(br_ctx *ctx, const br_op *op);
/* cpu_stage.c */
br_status br_cpu_cvt(br_ctx *ctx, const br_op *op);
br_status br_cpu_cvt_cols(br_ctx *ctx, const br_op *op);
br_status br_cpu_cvt_t(br_ctx *ctx, const br_op *op);
br_status br_cpu_expand(br_ctx *ctx, const br_op *op);
/* cpu_elementwise.c */
br_status br_cpu_scale_acc(br_ctx *ctx, const br_op *op);
br_status br_cpu_scale_acc2(br_ctx *ctx, const br_op *op);
br_status br_cpu_f16_to_f32(br_ctx *ctx, const br_op *op);
br_status br_cpu_add(br_ctx *ctx, const br_op *op);
br_status br_cpu_split_qg(br_ctx *ctx, const br_op *op);
/* cpu_reduce.c */
br_status br_cpu_colsum(br_ctx *ctx, const br_op *op);
br_status br_cpu_colsum_fused(br_ctx *ctx, const br_op *op);
/* cpu_dense.c */
br_status br_cpu_dense_fwd(br_ctx *ctx, const br_op *op);
br_status br_cpu_dense_bwd(br_ctx *ctx, const br_op *op);
/* cpu_optim.c */
br_status br_cpu_adam(br_ctx *ctx, const br_op *op);
br_status br_cpu_adam_cat(br_ctx *ctx, const br_op *op);
br_status br_cpu_sumsq(br_ctx *ctx, const br_op *op);
br_status br_cpu_sumsq_cat(br_ctx *ctx, const br_op *op);
/* cpu_sign.c */
br_status br_cpu_cvt_pad(br_ctx *ctx, const br_op *op);
br_status br_cpu_step_ctrl(br_ctx *ctx, const br_op *op);
br_status br_cpu_sign_step(br_ctx *ctx, const br_op *op);
/* cpu_layer_ops.c */
br_status br_cpu_expand_scaled(br_ctx *ctx, const br_op *op);
br_status br_cpu_sign_rowdot(br_ctx *ctx, const br_op *op);
br_status br_cpu_cvt_both(br_ctx *ctx, const br_op *op);

#endif
