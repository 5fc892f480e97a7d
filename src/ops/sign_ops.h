/* Internal ops of the BLR layer and its optimizers (front-ends in sign_ops.c):
 * staging into padded rows, the step controller that turns gradient norms into a
 * step schedule (or a refusal), and the sign optimizer's step. Not in the public
 * header: br_blr and br_blr_opt are their users. */
#ifndef BR_OPS_SIGN_OPS_H
#define BR_OPS_SIGN_OPS_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Elements of the step controller's buffers. */
#define BR_CTRL_HYPER 4 /* hyper f32: lr, sign_lr, max_norm, − */
#define BR_CTRL_STATE 4 /* state f32: t, β1^t, β2^t, − (init 0, 1, 1, 0) */
#define BR_SIGN_SCHED 8 /* sign_sched f32: lr, t, grad_mul, skip, 1−β1^t, 1−β2^t, −, − */

/* br_cvt into wider rows: dst[row][c] = f16(src[row][c]·col[c]·scale) (f32, left
 * to right; without col f16(src·scale)) for row < m, c < k; zero for k ≤ c < ld and
 * for rows m..br_pad_rows(m)−1. src f32 [m][k], col f32 [k] or NULL, dst f16
 * [br_pad_rows(m)][ld], ld ≥ k. Bit-identical to br_cvt on the first k columns. */
br_status br_cvt_pad(br_ctx *ctx, const br_buf *src, const br_buf *col, br_buf *dst, size_t m,
                     size_t k, size_t ld, float scale);

/* The step controller, one op. For i < np: S_i = Σ_j partials[i][j] in double, j
 * in order; norms[i] = √S_i; C = Σ_{i<nclip} S_i in order, norms[np] = √C. If any S_i
 * is not finite: sched[3] = sign_sched[3] = 1 (skip), state unchanged. Else t =
 * state[0] + 1, β1^t = state[1]·β1, β2^t = state[2]·β2 (f32) are stored back and
 * grad_mul = max_norm/√C where max_norm > 0 and √C > max_norm (else 1);
 * sched = {hyper[0], t, grad_mul, 0}, sign_sched = {hyper[1], t, grad_mul, 0,
 * 1−β1^t, 1−β2^t, 0, 0}. Deterministic and bit-identical across backends. */
br_status br_step_ctrl(br_ctx *ctx, const br_step_ctrl_args *args);

/* The sign optimizer's step on one sign matrix (see op.h for the fields). Does
 * nothing (flips[slot] untouched) when sched[3] ≠ 0. Else:
 * latent (exact = 0), per entry with g = G·grad_mul:
 *     m1 = β1·m1 + (1−β1)·g;  full: v = β2·v + (1−β2)·g²
 *     factored: vr[i] = β2·vr[i] + (1−β2)·mean_k g²,  vc[k] = β2·vc[k] + (1−β2)·mean_i g²,
 *               v = vr[i]·vc[k] / mean_i vr (0 when that mean is 0)
 *     Λ = clamp(Λ − lr·(m1/bc1) / (√(v/bc2) + eps), ±clamp)
 *     candidate: (Λ > 0) ≠ bit and |Λ| > hyst, score |Λ|
 * exact (exact = 1), per entry with s = ±1 its sign:
 *     ΔL = quad − 2·s·G, candidate ΔL < 0, score −ΔL
 * then min(budget, candidates) of them flip: the highest scores, ties broken by the
 * lower index (row-major) — the highest 64-bit keys (score bits << 32 | ~index).
 * flips[slot] = flips made.
 * The orders of every sum are fixed (sign_ops.c), so backends agree bit for bit. */
br_status br_sign_step(br_ctx *ctx, const br_sign_step_args *args);

/* The sign steps of n matrices, each exactly as br_sign_step does it (bit for
 * bit), possibly at once: no buffer a step writes (bits, latent, m1, v) may share
 * memory with a buffer of another step, and no two steps may report to the same
 * flips slot (BR_E_ARG). n = 0 does nothing. */
br_status br_sign_steps(br_ctx *ctx, const br_sign_step_args *args, size_t n);

/* br_sign_steps(args, n), then br_adam_cat(w, grad, m1, m2, mask, rel_floor, nadam,
 * hp), bit for bit, in as few launches as a backend can (CUDA: the Adam blocks join
 * the last steps' finish launch). Every check of the two, and: the Adam operands
 * (w, grad, m1, m2, mask, rel_floor, hp->sched) apart from what a step writes
 * (bits, latent, m1, v, flips up to its slot), and w, m1, m2 apart from each step's
 * sched (BR_E_ARG, naming both). What the steps only read, Adam may write (the
 * exact steps read h, ℓ, g): the steps read it first. n = 0: br_adam_cat alone. */
br_status br_sign_steps_adam(br_ctx *ctx, const br_sign_step_args *args, size_t n, br_buf *w,
                             const br_buf *grad, br_buf *m1, br_buf *m2, const br_buf *mask,
                             const br_buf *rel_floor, size_t nadam, const br_adam_hp *hp);

/* Workspace bytes a sign step of rows × r entries uses on a device. */
size_t br_sign_step_workspace(size_t rows, size_t r);

/* Blocks of the CUDA selection passes and most blocks of the per-entry kernels
 * (fixed so the workspace is known up front), rows per column-sum chunk of the
 * factored moment, lanes of the fixed-order sums. */
#define BR_SIGN_BLOCKS 256
#define BR_SIGN_GRID 8192
#define BR_SIGN_CHUNK 64
#define BR_SIGN_LANES 256

/* Whether ctx is recording a graph (ops are recorded, not run). */
int br_ctx_recording(const br_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
