/* The Adam step on CUDA, shared by adam_kernel (cuda_optim.cu: the adam and
 * adam_cat ops) and the sign steps' finish launch (cuda_sign.cu: br_sign_steps_adam
 * runs its Adam blocks there, one launch fewer). Both files are compiled alike
 * (--fmad=false), so either launch gives the same bits. */
#ifndef BR_BACKEND_CUDA_ADAM_CUH
#define BR_BACKEND_CUDA_ADAM_CUH

#include <math.h>

#include "backend/cuda/cuda_internal.h"
#include "ops/op.h"

#define ADAM_THREADS 256

typedef struct adam_job {
    float *w, *m1, *m2;
    const float *grad;
    const float *mask;  /* NULL: every entry; 0 = frozen */
    const float *rho;   /* adam_cat: per-entry relative floor; NULL: rho_all */
    const float *sched; /* NULL or f32 [4] {lr, t, grad_mul, skip} */
    float rho_all;
    float lr, grad_mul, bc1, bc2; /* used when sched is NULL */
    float b1, b2, eps;
    unsigned n;
} adam_job;

/* The job of an adam or adam_cat op. */
static inline adam_job br_adam_job_of(const br_adam_args *a) {
    adam_job j = {};
    j.w = (float *)br_ptr(a->w);
    j.m1 = (float *)br_ptr(a->m1);
    j.m2 = (float *)br_ptr(a->m2);
    j.grad = (const float *)br_ptr(a->grad);
    j.mask = (const float *)br_ptr(a->mask);
    j.rho = (const float *)br_ptr(a->rel_floor);
    j.sched = (const float *)br_ptr(a->hp.sched);
    j.rho_all = a->hp.rel_floor;
    j.lr = a->hp.lr;
    j.grad_mul = a->hp.grad_mul;
    /* the CPU backend's formula, on the host's pow: the same bits */
    j.bc1 = (float)(1.0 - pow((double)a->hp.beta1, (double)a->hp.step));
    j.bc2 = (float)(1.0 - pow((double)a->hp.beta2, (double)a->hp.step));
    j.b1 = a->hp.beta1;
    j.b2 = a->hp.beta2;
    j.eps = a->hp.eps;
    j.n = (unsigned)a->n;
    return j;
}

/* Blocks of ADAM_THREADS for a job of n entries. */
static inline unsigned br_adam_blocks(br_ctx *ctx, size_t n) {
    return br_cuda_blocks(ctx, n, ADAM_THREADS);
}

/* One Adam step of entries i < n, as block blk of a grid of nblk blocks (one thread
 * per entry, grid-stride; the grid is the Adam job's own, whatever launch it is in):
 *   g = grad·grad_mul;  m1 = β1·m1 + (1−β1)·g;  m2 = β2·m2 + ((1−β2)·g)·g
 *   st = (lr·(m1/bc1)) / (sqrt(m2/bc2) + eps);  w −= st  or  w −= st·max(|w|, ρ)
 * With sched, thread 0 of the block reads {lr, t, grad_mul, skip} and forms
 * bc = 1 − β^t once for the block (shared memory); skip ≠ 0 returns before anything
 * is written. Every thread of the block calls it (it syncs the block). */
static __device__ __forceinline__ void adam_entries(const adam_job &j, unsigned blk,
                                                    unsigned nblk) {
    __shared__ float hp[5]; /* lr, grad_mul, bc1, bc2, skip */
    if (j.sched) {
        if (threadIdx.x == 0) {
            double t = (double)j.sched[1];
            hp[0] = j.sched[0];
            hp[1] = j.sched[2];
            hp[2] = (float)(1.0 - pow((double)j.b1, t));
            hp[3] = (float)(1.0 - pow((double)j.b2, t));
            hp[4] = j.sched[3];
        }
        __syncthreads();
        if (hp[4] != 0.0f) return; /* a refused step */
    }
    const float lr = j.sched ? hp[0] : j.lr, gm = j.sched ? hp[1] : j.grad_mul;
    const float bc1 = j.sched ? hp[2] : j.bc1, bc2 = j.sched ? hp[3] : j.bc2;
    const float one_m_b1 = __fsub_rn(1.0f, j.b1), one_m_b2 = __fsub_rn(1.0f, j.b2);
    for (unsigned i = blk * blockDim.x + threadIdx.x; i < j.n; i += nblk * blockDim.x) {
        if (j.mask && j.mask[i] == 0.0f) continue; /* frozen: nothing written */
        float g = __fmul_rn(j.grad[i], gm);
        float m1 = __fadd_rn(__fmul_rn(j.b1, j.m1[i]), __fmul_rn(one_m_b1, g));
        float m2 = __fadd_rn(__fmul_rn(j.b2, j.m2[i]), __fmul_rn(__fmul_rn(one_m_b2, g), g));
        j.m1[i] = m1;
        j.m2[i] = m2;
        float m_hat = __fdiv_rn(m1, bc1), v_hat = __fdiv_rn(m2, bc2);
        float st = __fdiv_rn(__fmul_rn(lr, m_hat), __fadd_rn(__fsqrt_rn(v_hat), j.eps));
        float rho = j.rho ? j.rho[i] : j.rho_all, w = j.w[i];
        j.w[i] = rho > 0.0f ? __fsub_rn(w, __fmul_rn(st, fmaxf(fabsf(w), rho))) : __fsub_rn(w, st);
    }
}

#endif
