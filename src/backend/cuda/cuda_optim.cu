/* Optimizer ops on CUDA: adam, adam_cat, sumsq, sumsq_cat. The arithmetic is the
 * CPU backend's, operation for operation (cpu_optim.c states it), written with
 * round-to-nearest intrinsics so nothing is contracted; the one transcendental,
 * the bias corrections 1 − β^t, is computed in double and rounded to f32 (on the
 * host from hp.step, or once per block from the sched buffer), so the results
 * match the CPU to the last bit or within an ulp of that pow. */
#include <math.h>

#include "backend/cuda/cuda_adam.cuh"

/* ---------------------------------------------------------------- adam */

/* The whole grid on one Adam job (cuda_adam.cuh). */
__global__ void adam_kernel(adam_job j) {
    br_dev_pdl_enter();
    adam_entries(j, blockIdx.x, gridDim.x);
}

extern "C" br_status br_cuda_adam_launch(br_ctx *ctx, const br_adam_args *a) {
    br_cuda *s = br_cuda_state(ctx);
    BR_CUDA_LAUNCH_WAITING(ctx, s, "adam_kernel", adam_kernel, br_adam_blocks(ctx, a->n),
                           ADAM_THREADS, 0, br_adam_job_of(a));
    return BR_OK;
}

extern "C" br_status br_cuda_adam(br_ctx *ctx, const br_op *op) {
    return br_cuda_adam_launch(ctx, &op->u.adam);
}

extern "C" br_status br_cuda_adam_cat(br_ctx *ctx, const br_op *op) {
    return br_cuda_adam_launch(ctx, &op->u.adam);
}

/* ---------------------------------------------------------------- sumsq */

#define SUMSQ_LANES BR_SUMSQ_LANES

/* (Block rows taking the parameters longest first, so that the long ones' blocks
 * start one an SM: no gain measured on the layer step, 33b0caa.)
 * Partial sums of squares, partitioned as the CPU backend partitions them:
 * partial j (block x = j < 64) takes the 1024-element chunks c = j, j+64, j+128, …
 * of its parameter; lane t (thread t) sums element 1024·c + t of each chunk in
 * order with fmaf from 0; then lane[t] += lane[t + s] for s = 512, 256, …, 1 in
 * shared memory; out[p][j] = lane[0]. Bit-identical to the CPU. Block y walks
 * the parameters p (sumsq: one, the whole of a; sumsq_cat: tab[2p] = offset,
 * tab[2p+1] = length, clamped to a's n_a elements so nothing outside a is read). */
/* A lane's chunks c0, c0 + step, … B at a time while all B are whole: the same fmas
 * in the same order as one at a time, each batch's loads issued before the fmas of
 * the batch before it (so a lane's next loads are in flight while it adds). */
template <unsigned B>
static __device__ __forceinline__ float sumsq_batches(const float *x, unsigned n, unsigned step,
                                                      unsigned t, unsigned &c0, float acc) {
    auto whole = [&](unsigned c) { return (size_t)c + (B - 1) * (size_t)step + SUMSQ_LANES <= n; };
    if (!whole(c0)) return acc;
    float v[B];
#pragma unroll
    for (unsigned u = 0; u < B; u++)
        v[u] = x[c0 + u * step + t];
    for (;;) {
        const unsigned next = c0 + B * step;
        const bool more = whole(next);
        float w[B];
        if (more) {
#pragma unroll
            for (unsigned u = 0; u < B; u++)
                w[u] = x[next + u * step + t];
        }
#pragma unroll
        for (unsigned u = 0; u < B; u++)
            acc = __fmaf_rn(v[u], v[u], acc);
        c0 = next;
        if (!more) return acc;
#pragma unroll
        for (unsigned u = 0; u < B; u++)
            v[u] = w[u];
    }
}

__global__ void __launch_bounds__(SUMSQ_LANES, 2)
    sumsq_kernel(const float *a, unsigned n_a, const uint32_t *tab, unsigned np, float *out) {
    __shared__ float lane[SUMSQ_LANES];
    br_dev_pdl_enter();
    const unsigned j = blockIdx.x, t = threadIdx.x;
    for (unsigned p = blockIdx.y; p < np; p += gridDim.y) {
        const float *x = a;
        unsigned n = n_a;
        if (tab) {
            uint32_t off = tab[2 * (size_t)p], len = tab[2 * (size_t)p + 1];
            uint32_t avail = off < n_a ? n_a - off : 0;
            x = a + (avail ? off : 0);
            n = len < avail ? len : avail;
        }
        unsigned c0 = j * SUMSQ_LANES;
        /* a partial past the parameter's elements: every lane +0, so the tree's sum is
         * +0 (the same bits without the tree's ten block barriers; most partials of
         * the small parameters, e.g. a layer's scale gradients and row norms) */
        if (c0 >= n) {
            if (t == 0) out[(size_t)p * BR_SUMSQ_PARTS + j] = 0.0f;
            continue;
        }
        float acc = 0.0f;
        const unsigned step = BR_SUMSQ_PARTS * SUMSQ_LANES;
        /* eight chunks at a time while they are whole, the next eight in flight
         * (few blocks carry the large parameters, so a lane's loads in flight set
         * the speed; 32 registers keep two blocks an SM) */
        acc = sumsq_batches<8>(x, n, step, t, c0, acc);
        acc = sumsq_batches<4>(x, n, step, t, c0, acc);
        for (; c0 < n; c0 += step)
            if (c0 + t < n) acc = __fmaf_rn(x[c0 + t], x[c0 + t], acc);
        lane[t] = acc;
        __syncthreads();
        for (unsigned s = SUMSQ_LANES / 2; s > 0; s >>= 1) {
            if (t < s) lane[t] = __fadd_rn(lane[t], lane[t + s]);
            __syncthreads();
        }
        if (t == 0) out[(size_t)p * BR_SUMSQ_PARTS + j] = lane[0];
        __syncthreads(); /* lane is reused by the next parameter */
    }
}

static br_status sumsq_launch(br_ctx *ctx, const br_sumsq_args *a) {
    br_cuda *s = br_cuda_state(ctx);
    unsigned np = a->tab ? (unsigned)a->np : 1u;
    dim3 grid(BR_SUMSQ_PARTS, np < 65535u ? np : 65535u);
    BR_CUDA_LAUNCH_WAITING(ctx, s, "sumsq_kernel", sumsq_kernel, grid, SUMSQ_LANES, 0,
                           (const float *)br_ptr(a->a), (unsigned)a->n,
                           (const uint32_t *)br_ptr(a->tab), np, (float *)br_ptr(a->out));
    return BR_OK;
}

extern "C" br_status br_cuda_sumsq(br_ctx *ctx, const br_op *op) {
    return sumsq_launch(ctx, &op->u.sumsq);
}

extern "C" br_status br_cuda_sumsq_cat(br_ctx *ctx, const br_op *op) {
    return sumsq_launch(ctx, &op->u.sumsq);
}
