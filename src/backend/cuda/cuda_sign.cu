/* The sign optimizer's ops on CUDA: cvt_pad, step_ctrl and sign_step (semantics in
 * ops/sign_ops.h). Bit-identical to the CPU backend (cpu_sign.c): the same f32
 * operations in the same order (this file is compiled with --fmad=false; divisions
 * and square roots are the IEEE ones), every sum in the fixed lane-then-tree order
 * the CPU reproduces, and no float atomics: the only atomics add integers (counts,
 * digit histograms, arrival tickets), whose sums do not depend on the order.
 *
 * A sign step is a short kernel sequence on the stream:
 *   [exact + norm source] norm_kernel        Σ normsrc² (double, 256 lanes, tree)
 *   [factored]            factored_sums      vr per row (one warp per row) and the
 *                                            column chunk partials of g², one launch
 *                         colfin_kernel      vc per column, mean of vr
 *   update_kernel         latents and moments, or exact scores; selection keys (no
 *                         binding budget: the flips themselves, by warp ballots or
 *                         shuffles); up to GRID_MAX blocks, four entries per thread
 *                         per round (16-byte accesses) where aligned, else one
 *   [no budget]           finish_kernel      flips[slot] from the per-block counts
 *                         (br_sign_steps of directly flipping steps: update_n_kernel
 *                         alone, whose last block of each step stores its flips and
 *                         whose blocks past the steps' run the Adam job of
 *                         br_sign_steps_adam: two launches fewer)
 *   [budget < entries]    select_init, 8 × hist_kernel (per-block histograms; the
 *                         last block of each pass adds them and picks the digit; the
 *                         selection stops early once the digit's bin holds exactly
 *                         the keys still needed), apply_kernel
 *                         (flips by warp ballots; its last block stores flips[slot])
 * Every kernel returns at once when the schedule's skip flag is set. */
#include "backend/cuda/cuda_adam.cuh"
#include "backend/cuda/cuda_internal.h"
#include "ops/check.h"
#include "ops/sign_ops.h"

#define THREADS 256
#define BLOCKS BR_SIGN_BLOCKS
#define FULL_MASK 0xffffffffu

/* ---------------------------------------------------------------- cvt_pad */

__global__ void cvt_pad_kernel(const float *src, const float *col, uint16_t *dst, unsigned m,
                               unsigned k, unsigned ld, unsigned mpad, float scale) {
    BR_GRID_STRIDE(i, mpad * ld) {
        unsigned row = i / ld, c = i % ld;
        uint16_t h = 0;
        if (row < m && c < k) {
            float x = src[(size_t)row * k + c];
            float v = col ? __fmul_rn(__fmul_rn(x, col[c]), scale) : __fmul_rn(x, scale);
            h = br_dev_f16_bits(v);
        }
        dst[i] = h;
    }
}

extern "C" br_status br_cuda_cvt_pad(br_ctx *ctx, const br_op *op) {
    const br_cvt_pad_args *a = &op->u.cvt_pad;
    br_cuda *s = br_cuda_state(ctx);
    size_t mpad = br_pad_rows(a->m), n = mpad * a->ld;
    cvt_pad_kernel<<<br_cuda_blocks(ctx, n, THREADS), THREADS, 0, s->stream>>>(
        (const float *)br_ptr(a->src), (const float *)br_ptr(a->col), (uint16_t *)br_ptr(a->dst),
        (unsigned)a->m, (unsigned)a->k, (unsigned)a->ld, (unsigned)mpad, a->scale);
    BR_CUDA_LAUNCHED(ctx, "cvt_pad_kernel");
    return BR_OK;
}

/* ---------------------------------------------------------------- step_ctrl */

/* Lane i sums parameter i's partials (each sum in the CPU's order, its loads all
 * issued first: one chain of dependent adds per lane, the lanes in parallel); lane
 * 0 then takes the sums in parameter order for the finiteness and the clip norm. */
__global__ void step_ctrl_kernel(const float *part, unsigned np, unsigned nclip, const float *hyper,
                                 float *state, float *sched, float *ssched, float *norms,
                                 float beta1, float beta2) {
    __shared__ double sums[32];
    br_dev_pdl_enter();
    if (blockIdx.x) return;
    int finite = 1;
    double clip = 0;
    for (unsigned i0 = 0; i0 < np; i0 += 32) {
        const unsigned i = i0 + threadIdx.x;
        double s = 0;
        if (i < np) {
            float v[BR_SUMSQ_PARTS];
#pragma unroll
            for (unsigned j = 0; j < BR_SUMSQ_PARTS; j++)
                v[j] = part[(size_t)i * BR_SUMSQ_PARTS + j];
#pragma unroll
            for (unsigned j = 0; j < BR_SUMSQ_PARTS; j++)
                s += (double)v[j];
            norms[i] = (float)sqrt(s);
        }
        sums[threadIdx.x] = s;
        __syncwarp();
        if (threadIdx.x == 0)
            for (unsigned k = 0; k < 32 && i0 + k < np; k++) {
                if (!isfinite(sums[k])) finite = 0;
                if (i0 + k < nclip) clip += sums[k];
            }
        __syncwarp();
    }
    if (threadIdx.x) return;
    double norm = sqrt(clip);
    norms[np] = (float)norm;
    float max_norm = hyper[2];
    float gm = max_norm > 0 && norm > (double)max_norm ? (float)((double)max_norm / norm) : 1.0f;
    if (!finite) {
        sched[2] = gm;
        sched[3] = 1.0f;
        ssched[2] = gm;
        ssched[3] = 1.0f;
        return;
    }
    float t = __fadd_rn(state[0], 1.0f);
    float b1t = __fmul_rn(state[1], beta1), b2t = __fmul_rn(state[2], beta2);
    state[0] = t;
    state[1] = b1t;
    state[2] = b2t;
    sched[0] = hyper[0];
    sched[1] = t;
    sched[2] = gm;
    sched[3] = 0.0f;
    ssched[0] = hyper[1];
    ssched[1] = t;
    ssched[2] = gm;
    ssched[3] = 0.0f;
    ssched[4] = __fsub_rn(1.0f, b1t);
    ssched[5] = __fsub_rn(1.0f, b2t);
    ssched[6] = 0.0f;
    ssched[7] = 0.0f;
}

extern "C" br_status br_cuda_step_ctrl(br_ctx *ctx, const br_op *op) {
    const br_step_ctrl_args *a = &op->u.step_ctrl;
    br_cuda *s = br_cuda_state(ctx);
    BR_CUDA_LAUNCH_PDL(ctx, s, "step_ctrl_kernel", step_ctrl_kernel, 1, 32, 0,
                       (const float *)br_ptr(a->partials), (unsigned)a->np, (unsigned)a->nclip,
                       (const float *)br_ptr(a->hyper), (float *)br_ptr(a->state),
                       (float *)br_ptr(a->sched), (float *)br_ptr(a->sign_sched),
                       (float *)br_ptr(a->norms), a->sign_beta1, a->sign_beta2);
    return BR_OK;
}

/* ---------------------------------------------------------------- sign_step */

/* Most blocks of the per-entry kernels (update, apply): one count per block. */
#define GRID_MAX BR_SIGN_GRID
/* Selection passes: 8-bit digits of the 64-bit keys, from the top. */
#define PASSES 8

/* The workspace, in 4-byte words (br_sign_step_workspace sizes it). */
typedef struct sign_ws {
    uint32_t *key;           /* [n] score bits of the candidates, 0 elsewhere */
    uint32_t *hist;          /* [BLOCKS][256] digit histograms of a pass, per block */
    unsigned long long *sel; /* [8]: thr, prefix, mask, need, done */
    float *chunk;            /* [chunks][r] */
    float *scalar;           /* [16]: [0] Σ normsrc² (f32), [1] mean of vr */
    uint32_t *cnt;           /* [GRID_MAX] candidates or flips per block */
    uint32_t *ticket;        /* [16]: [pass] blocks done with a pass, [PASSES] with apply */
} sign_ws;

enum { SEL_THR = 0, SEL_PREFIX, SEL_MASK, SEL_NEED, SEL_DONE };

/* The step's constants, passed by value to every kernel. */
typedef struct sign_job {
    const float *grad;
    uint32_t *bits;
    float *lat, *m1, *v;
    const float *sched;
    uint32_t *flips;
    unsigned slot, rows, r, n, chunks;
    unsigned long long budget;
    int exact, factored, direct;
    float beta1, beta2, omb1, omb2, eps, clamp, hyst, curv2;
    const float *rowf, *rowq, *colf, *colq, *normsrc;
    unsigned nnorm;
    sign_ws ws;
} sign_job;

static __device__ __forceinline__ int skipped(const sign_job &j) { return j.sched[3] != 0.0f; }

static __device__ __forceinline__ unsigned long long sel_key(uint32_t kb, unsigned e) {
    return kb ? (unsigned long long)kb << 32 | (unsigned long long)(0xFFFFFFFFu - e) : 0ull;
}

/* Sum of one int per thread over the block (integers: any order gives the same):
 * warp sums by shuffles, then the warps' sums. Every thread of the block calls it. */
static __device__ unsigned block_sum(unsigned x) {
    __shared__ unsigned s[THREADS / 32];
    for (int off = 16; off > 0; off >>= 1)
        x += __shfl_xor_sync(FULL_MASK, x, off);
    if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = x;
    __syncthreads();
    unsigned total = 0;
    for (unsigned w = 0; w < THREADS / 32; w++)
        total += s[w];
    __syncthreads();
    return total;
}

/* This thread's share of cnt[0..n): entries tid, tid + blockDim, …, eight loads in
 * flight at a time (a loop of dependent load-adds waited on L2 once per entry). */
static __device__ unsigned strided_count(const uint32_t *cnt, unsigned n) {
    unsigned part = 0, b = threadIdx.x;
    const unsigned step = blockDim.x;
    for (; b + 7 * step < n; b += 8 * step) {
        unsigned v[8];
#pragma unroll
        for (unsigned u = 0; u < 8; u++)
            v[u] = __ldcg(&cnt[b + u * step]);
#pragma unroll
        for (unsigned u = 0; u < 8; u++)
            part += v[u];
    }
    for (; b < n; b += step)
        part += __ldcg(&cnt[b]);
    return part;
}

/* Whether this block is the last of the grid to get here (ticket counts arrivals;
 * zeroed by select_init). Every write of the block before the call is visible to
 * the last block after it. */
static __device__ bool last_block(uint32_t *ticket) {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    __syncthreads();
    if (last) __threadfence();
    return last;
}

/* Σ normsrc² in double: lane l sums j = l, l+256, ...; then a halving tree. */
__global__ void norm_kernel(sign_job j) {
    if (skipped(j)) return;
    __shared__ double p[BR_SIGN_LANES];
    unsigned l = threadIdx.x;
    double acc = 0;
    for (unsigned i = l; i < j.nnorm; i += BR_SIGN_LANES) {
        double x = (double)j.normsrc[i];
        acc = acc + x * x;
    }
    p[l] = acc;
    __syncthreads();
    for (unsigned off = BR_SIGN_LANES / 2; off >= 1; off >>= 1) {
        if (l < off) p[l] = p[l] + p[l + off];
        __syncthreads();
    }
    if (l == 0) j.ws.scalar[0] = (float)p[0];
}

/* Loads a lane issues before it sums any of them (the order of the sums is kept). */
#define SUM_BATCH 8

/* Factored moment, both sums of g² in one launch (they read the same gradients and
 * write different outputs). Blocks [0, row_blocks): one warp per row; lane l sums
 * k = l, l+32, ... then the warp's halving tree; vr[i] = β2·vr[i] + (1−β2)·(Σ/r).
 * The other blocks: one thread per (chunk c, column k), the chunk's BR_SIGN_CHUNK
 * rows summed in row order into chunk[c][k]. */
__global__ void factored_sums_kernel(sign_job j, unsigned row_blocks) {
    if (skipped(j)) return;
    float gm = j.sched[2];
    if (blockIdx.x < row_blocks) {
        unsigned lane = threadIdx.x % 32, warps = blockDim.x / 32;
        for (unsigned i = blockIdx.x * warps + threadIdx.x / 32; i < j.rows;
             i += row_blocks * warps) {
            const float *row = j.grad + (size_t)i * j.r;
            float p = 0.0f;
            for (unsigned k0 = lane; k0 < j.r; k0 += 32 * SUM_BATCH) {
                float x[SUM_BATCH];
#pragma unroll
                for (unsigned u = 0; u < SUM_BATCH; u++)
                    x[u] = k0 + 32 * u < j.r ? row[k0 + 32 * u] : 0.0f;
#pragma unroll
                for (unsigned u = 0; u < SUM_BATCH; u++) {
                    if (k0 + 32 * u < j.r) {
                        float g = __fmul_rn(x[u], gm);
                        p = __fadd_rn(p, __fmul_rn(g, g));
                    }
                }
            }
            for (unsigned off = 16; off >= 1; off >>= 1)
                p = __fadd_rn(p, __shfl_down_sync(FULL_MASK, p, off));
            if (lane == 0) {
                float mean = __fdiv_rn(p, (float)j.r);
                j.v[i] = __fadd_rn(__fmul_rn(j.beta2, j.v[i]), __fmul_rn(j.omb2, mean));
            }
        }
        return;
    }
    unsigned b = blockIdx.x - row_blocks, nb = gridDim.x - row_blocks;
    for (unsigned q = b * blockDim.x + threadIdx.x; q < j.chunks * j.r; q += nb * blockDim.x) {
        unsigned c = q / j.r, k = q % j.r;
        unsigned i0 = c * BR_SIGN_CHUNK, i1 = min(i0 + BR_SIGN_CHUNK, j.rows);
        float p = 0.0f;
        for (unsigned base = i0; base < i1; base += SUM_BATCH) {
            float x[SUM_BATCH];
#pragma unroll
            for (unsigned u = 0; u < SUM_BATCH; u++)
                x[u] = base + u < i1 ? j.grad[(size_t)(base + u) * j.r + k] : 0.0f;
#pragma unroll
            for (unsigned u = 0; u < SUM_BATCH; u++) {
                if (base + u < i1) {
                    float g = __fmul_rn(x[u], gm);
                    p = __fadd_rn(p, __fmul_rn(g, g));
                }
            }
        }
        j.ws.chunk[q] = p;
    }
}

/* One block: vc[k] from the chunk partials in chunk order; the mean of vr in 256
 * lanes then a halving tree. */
__global__ void colfin_kernel(sign_job j) {
    if (skipped(j)) return;
    __shared__ float p[BR_SIGN_LANES];
    unsigned l = threadIdx.x;
    float *vc = j.v + j.rows;
    for (unsigned k = l; k < j.r; k += BR_SIGN_LANES) {
        float total = 0.0f;
        for (unsigned c = 0; c < j.chunks; c++)
            total = __fadd_rn(total, j.ws.chunk[c * j.r + k]);
        vc[k] = __fadd_rn(__fmul_rn(j.beta2, vc[k]),
                          __fmul_rn(j.omb2, __fdiv_rn(total, (float)j.rows)));
    }
    float acc = 0.0f;
    for (unsigned i = l; i < j.rows; i += BR_SIGN_LANES)
        acc = __fadd_rn(acc, j.v[i]);
    p[l] = acc;
    __syncthreads();
    for (unsigned off = BR_SIGN_LANES / 2; off >= 1; off >>= 1) {
        if (l < off) p[l] = __fadd_rn(p[l], p[l + off]);
        __syncthreads();
    }
    if (l == 0) j.ws.scalar[1] = __fdiv_rn(p[0], (float)j.rows);
}

/* Entry groups a thread takes per round (W consecutive entries, one W-wide access
 * per array) and rounds whose loads it issues together (B): the vector form (4, 1)
 * where the host finds every W-wide access 16-byte aligned (vec_aligned), else the
 * scalar one (1, 4). Both keep 4 × 4 B of each array in flight per thread; the vector
 * form issues a quarter of the memory instructions. On the H200 (the
 * layer step at the third bench shape, ab-many): scalar 0.4204 ms, (4, 1) 0.4110,
 * (4, 2) 0.4162 (80 registers: 3 blocks an SM instead of 4); with br_sign_steps'
 * one-wave grid, (4, 2) 0.4032 against (4, 1) 0.4003. */
#define VEC_W 4
#define VEC_BATCH 1
#define SCALAR_BATCH 4

/* W consecutive f32 read once (grad: dead after this step; latent state: next read
 * a step later, and larger than L2): streaming loads and stores, evict-first in L2,
 * so the kernels after the step keep their operands there. The keys stay normal:
 * the selection passes read them next. */
template <unsigned W> static __device__ __forceinline__ void load_stream(const float *p, float *x) {
    if constexpr (W == 4) {
        float4 q = __ldcs(reinterpret_cast<const float4 *>(p));
        x[0] = q.x, x[1] = q.y, x[2] = q.z, x[3] = q.w;
    } else {
        static_assert(W == 1, "W is 1 or 4");
        x[0] = __ldcs(p);
    }
}
template <unsigned W>
static __device__ __forceinline__ void store_stream(float *p, const float *x) {
    if constexpr (W == 4)
        __stcs(reinterpret_cast<float4 *>(p), make_float4(x[0], x[1], x[2], x[3]));
    else
        __stcs(p, x[0]);
}
template <unsigned W>
static __device__ __forceinline__ void store_keys(uint32_t *p, const uint32_t *x) {
    if constexpr (W == 4)
        *reinterpret_cast<uint4 *>(p) = make_uint4(x[0], x[1], x[2], x[3]);
    else
        p[0] = x[0];
}

/* The flips of one bitmap word, on the lane of each word's group whose entries come
 * first: cand holds this lane's W candidates from bit 0; a word is 32 / W lanes. */
template <unsigned W>
static __device__ __forceinline__ uint32_t flip_word(unsigned cand, unsigned e0) {
    if constexpr (W == 1) {
        return __ballot_sync(FULL_MASK, cand);
    } else {
        uint32_t x = cand << (e0 % 32);
        for (unsigned off = 1; off < 32 / W; off <<= 1)
            x |= __shfl_xor_sync(FULL_MASK, x, off);
        return x;
    }
}

/* Per entry: the latent update (or the exact score) and the selection key; with no
 * budget (direct) the flips themselves. Per block: candidates (flips if direct)
 * into cnt[block]. A grid of up to GRID_MAX blocks (one per B·W·THREADS entries); a
 * thread loads the W-entry groups of B grid-stride rounds before it updates any
 * (the stores could alias the loads, so the compiler would not move a load past
 * one), so that several groups' loads are in flight per thread. A warp's round
 * covers 32·W consecutive entries, W whole bitmap words (r % 32 == 0); the loop
 * runs per warp, since with W = 4 the last round's warp may be only 8, 16 or 24
 * groups full (n % 32 == 0 makes the groups a multiple of 8: whole words). */
template <unsigned W, unsigned B>
static __device__ __forceinline__ void update_entries(const sign_job &j, unsigned blk,
                                                      unsigned nblk) {
    if (skipped(j)) return;
    float lr = j.sched[0], gm = j.sched[2], bc1 = j.sched[4], bc2 = j.sched[5];
    float mean = j.factored ? j.ws.scalar[1] : 0.0f;
    float c = j.normsrc ? __fmul_rn(j.curv2, j.ws.scalar[0]) : j.curv2;
    /* 32-bit indices: n ≤ BR_MAX_ELEMS < 2^31 and the grid is at most GRID_MAX
     * blocks, so q0 + B·stride and W·q cannot wrap. (A 64-bit e / r per entry, for
     * the bit's place, took more issue slots than the rest of the update.) */
    const unsigned groups = j.n / W, stride = nblk * blockDim.x, lane = threadIdx.x % 32;
    unsigned count = 0;
    for (unsigned q0 = blk * blockDim.x + threadIdx.x - lane; q0 < groups; q0 += B * stride) {
        uint32_t wv[B];
        float gv[B][W], mv[B][W], vv[B][W], lv[B][W];
#pragma unroll
        for (unsigned u = 0; u < B; u++) {
            const unsigned q = q0 + u * stride + lane, e0 = q * W;
            if (q0 + u * stride >= groups) break; /* the whole warp */
            if (q >= groups) continue;
            wv[u] = j.bits[e0 / 32];
            load_stream<W>(j.grad + e0, gv[u]);
            if (!j.exact) {
                load_stream<W>(j.m1 + e0, mv[u]);
                load_stream<W>(j.lat + e0, lv[u]);
                if (j.factored)
#pragma unroll
                    for (unsigned s = 0; s < W; s++)
                        vv[u][s] = 0.0f;
                else
                    load_stream<W>(j.v + e0, vv[u]);
            }
        }
#pragma unroll
        for (unsigned u = 0; u < B; u++) {
            const unsigned q = q0 + u * stride + lane, e0 = q * W;
            if (q0 + u * stride >= groups) break; /* the whole warp */
            unsigned cands = 0;                   /* bit s: entry e0 + s is a candidate */
            if (q < groups) {
                float mo[W], vo[W], lo[W];
                uint32_t ko[W];
#pragma unroll
                for (unsigned s = 0; s < W; s++) {
                    const unsigned e = e0 + s;
                    const int bit = (wv[u] >> (e % 32)) & 1u; /* r % 32 == 0: k % 32 == e % 32 */
                    float score;
                    int cand;
                    if (!j.exact) {
                        float g = __fmul_rn(gv[u][s], gm);
                        float m = __fadd_rn(__fmul_rn(j.beta1, mv[u][s]), __fmul_rn(j.omb1, g));
                        float ve;
                        if (j.factored) {
                            const unsigned i = e / j.r, k = e % j.r;
                            ve = mean > 0 ? __fdiv_rn(__fmul_rn(j.v[i], j.v[j.rows + k]), mean)
                                          : 0.0f;
                        } else {
                            ve = __fadd_rn(__fmul_rn(j.beta2, vv[u][s]),
                                           __fmul_rn(j.omb2, __fmul_rn(g, g)));
                        }
                        float mh = __fdiv_rn(m, bc1), vh = __fdiv_rn(ve, bc2);
                        float upd = __fdiv_rn(__fmul_rn(lr, mh), __fadd_rn(__fsqrt_rn(vh), j.eps));
                        float l = fminf(fmaxf(__fsub_rn(lv[u][s], upd), -j.clamp), j.clamp);
                        mo[s] = m;
                        vo[s] = ve;
                        lo[s] = l;
                        cand = (l > 0) != bit && fabsf(l) > j.hyst;
                        score = fabsf(l);
                    } else {
                        const unsigned i = e / j.r, k = e % j.r;
                        float qr = __fmul_rn(j.rowf[i], j.rowf[i]);
                        if (j.rowq) qr = __fmul_rn(qr, j.rowq[i]);
                        float qc = __fmul_rn(j.colf[k], j.colf[k]);
                        if (j.colq) qc = __fmul_rn(qc, j.colq[k]);
                        float quad = __fmul_rn(__fmul_rn(c, qr), qc),
                              tg = __fmul_rn(2.0f, gv[u][s]);
                        float dl = bit ? __fsub_rn(quad, tg) : __fadd_rn(quad, tg);
                        cand = dl < 0;
                        score = -dl;
                    }
                    ko[s] = cand ? __float_as_uint(score) : 0u;
                    cands |= (unsigned)cand << s;
                }
                if (!j.exact) {
                    store_stream<W>(j.m1 + e0, mo);
                    if (!j.factored) store_stream<W>(j.v + e0, vo);
                    store_stream<W>(j.lat + e0, lo);
                }
                if (!j.direct) store_keys<W>(j.ws.key + e0, ko);
            }
            if (j.direct) { /* no budget: every candidate flips, here (one lane per word) */
                uint32_t word = flip_word<W>(cands, e0);
                if (lane % (32 / W) == 0 && word) {
                    /* the word as this lane read it: the word's lanes all read it before
                     * their candidates reached this lane, and no other thread writes it */
                    j.bits[e0 / 32] = wv[u] ^ word;
                    count += __popc(word);
                }
            } else {
                count += __popc(cands);
            }
        }
    }
    unsigned total = block_sum(count);
    if (threadIdx.x == 0) j.ws.cnt[blk] = total;
}

template <unsigned W, unsigned B> __global__ void update_kernel(sign_job j) {
    update_entries<W, B>(j, blockIdx.x, gridDim.x);
}

/* Several direct steps at once (br_sign_steps): job i takes blocks start[i] ..
 * start[i+1]−1 and its own row of counts; the same entries, the same values. With
 * `ticket` (a row of per-job arrival tickets) the last block of job i to finish adds
 * its counts and stores flips[slot] (resetting the ticket), and the blocks past
 * start[n] run the Adam job A (adam_kernel's grid of gridDim.x − start[n] blocks)
 * at the same time: one launch for all of it. Else finish_n_kernel follows. */
typedef struct sign_jobs {
    sign_job job[BR_SIGN_STEPS_MAX];
    unsigned start[BR_SIGN_STEPS_MAX + 1];
    unsigned n;
    uint32_t *ticket; /* NULL: counts finished by finish_n_kernel */
} sign_jobs;
static_assert(BR_TICKET_SIGN_STEPS + BR_SIGN_STEPS_MAX <= BR_TICKETS,
              "a ticket per job of an update launch");

template <unsigned W, unsigned B>
__global__ void update_n_kernel(const __grid_constant__ sign_jobs J,
                                const __grid_constant__ adam_job A) {
    br_dev_pdl_enter();
    if (blockIdx.x >= J.start[J.n]) { /* only with a ticket row: the Adam job */
        adam_entries(A, blockIdx.x - J.start[J.n], gridDim.x - J.start[J.n]);
        return;
    }
    unsigned i = 0;
    while (i + 1 < J.n && blockIdx.x >= J.start[i + 1])
        i++;
    const sign_job &j = J.job[i];
    const unsigned blk = blockIdx.x - J.start[i], nblk = J.start[i + 1] - J.start[i];
    update_entries<W, B>(j, blk, nblk);
    if (!J.ticket || skipped(j) || !br_dev_last_arrival(&J.ticket[i], nblk)) return;
    unsigned total = block_sum(strided_count(j.ws.cnt, nblk));
    if (threadIdx.x == 0) j.flips[j.slot] = total;
}

/* Block i < J.n: flips[slot] of job i from its counts. Blocks J.n.. (with
 * br_sign_steps_adam): the Adam job, as adam_kernel's grid of gridDim.x − J.n
 * blocks would run it (a launch saved; the update, which it must follow, is done). */
__global__ void finish_n_kernel(const __grid_constant__ sign_jobs J,
                                const __grid_constant__ adam_job A) {
    br_dev_pdl_enter();
    if (blockIdx.x >= J.n) {
        adam_entries(A, blockIdx.x - J.n, gridDim.x - J.n);
        return;
    }
    const sign_job &j = J.job[blockIdx.x];
    if (skipped(j)) return;
    unsigned total =
        block_sum(strided_count(j.ws.cnt, J.start[blockIdx.x + 1] - J.start[blockIdx.x]));
    if (threadIdx.x == 0) j.flips[j.slot] = total;
}

/* One block: the candidates counted, the tickets zeroed, and every candidate taken
 * or the radix selection started. */
__global__ void select_init_kernel(sign_job j, unsigned nblocks) {
    if (skipped(j)) return;
    unsigned part = strided_count(j.ws.cnt, nblocks);
    if (threadIdx.x < 16) j.ws.ticket[threadIdx.x] = 0;
    unsigned long long total = block_sum(part);
    if (threadIdx.x) return;
    unsigned long long *sel = j.ws.sel;
    sel[SEL_PREFIX] = 0;
    sel[SEL_MASK] = 0;
    sel[SEL_NEED] = j.budget;
    if (j.budget == 0) {
        sel[SEL_THR] = ~0ull;
        sel[SEL_DONE] = 1;
    } else if (total <= j.budget) {
        sel[SEL_THR] = 1;
        sel[SEL_DONE] = 1;
    } else {
        sel[SEL_DONE] = 0;
    }
}

/* One selection pass: each of the BLOCKS blocks counts digit (key >> shift) & 255
 * of the keys matching the prefix into its own histogram (shared-memory integer
 * atomics); the last block to finish adds the BLOCKS histograms bin by bin and
 * picks the digit of the K-th highest key. When the digit's bin holds exactly the
 * keys still needed, every key at or above prefix·0… is selected: the selection
 * is done early (the same keys the remaining passes would find). */
__global__ void hist_kernel(sign_job j, unsigned shift, unsigned pass) {
    if (skipped(j)) return;
    unsigned long long *sel = j.ws.sel;
    if (sel[SEL_DONE]) return;
    __shared__ unsigned h[256];
    unsigned b = threadIdx.x;
    h[b] = 0;
    __syncthreads();
    unsigned long long prefix = sel[SEL_PREFIX], mask = sel[SEL_MASK];
    BR_GRID_STRIDE(e, j.n) {
        unsigned long long key = sel_key(j.ws.key[e], e);
        if (key && (key & mask) == prefix) atomicAdd(&h[(unsigned)(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    j.ws.hist[blockIdx.x * 256 + b] = h[b];
    if (!last_block(&j.ws.ticket[pass])) return;
    unsigned total = 0; /* bin b of every block (thread b alone reads and writes h[b]) */
#pragma unroll 8
    for (unsigned blk = 0; blk < gridDim.x; blk++)
        total += __ldcg(&j.ws.hist[blk * 256 + b]);
    h[b] = total;
    __syncthreads();
    if (b) return;
    unsigned long long need = sel[SEL_NEED];
    int d = 255;
    for (; d > 0 && h[d] < need; d--)
        need -= h[d];
    sel[SEL_NEED] = need;
    sel[SEL_PREFIX] = prefix | (unsigned long long)d << shift;
    sel[SEL_MASK] = mask | 255ull << shift;
    if (shift == 0 || h[d] == need) {
        sel[SEL_THR] = sel[SEL_PREFIX];
        sel[SEL_DONE] = 1;
    }
}

/* Flip the selected entries: one warp per 32 entries (one bitmap word; r % 32 == 0
 * and n % 32 == 0 keep the warps whole), flips counted per block; the last block
 * adds the counts and stores flips[slot]. */
__global__ void apply_kernel(sign_job j) {
    if (skipped(j)) return;
    unsigned long long thr = j.ws.sel[SEL_THR];
    unsigned count = 0;
    BR_GRID_STRIDE(e, j.n) {
        uint32_t kb = j.ws.key[e];
        int take = j.budget && kb && sel_key(kb, e) >= thr;
        unsigned word = __ballot_sync(FULL_MASK, take);
        if ((threadIdx.x % 32) == 0 && word) {
            j.bits[e / 32] ^= word;
            count += __popc(word);
        }
    }
    unsigned total = block_sum(count);
    if (threadIdx.x == 0) j.ws.cnt[blockIdx.x] = total;
    if (!last_block(&j.ws.ticket[PASSES])) return;
    unsigned flips = block_sum(strided_count(j.ws.cnt, gridDim.x));
    if (threadIdx.x == 0) j.flips[j.slot] = flips;
}

/* Direct steps: flips[slot] = the flips counted per block by the update. */
__global__ void finish_kernel(sign_job j, unsigned nblocks) {
    if (skipped(j)) return;
    unsigned total = block_sum(strided_count(j.ws.cnt, nblocks));
    if (threadIdx.x == 0) j.flips[j.slot] = total;
}

/* Blocks of THREADS for a per-entry kernel over n entries: one entry per thread
 * where GRID_MAX blocks allow it. */
static unsigned entry_blocks(size_t n) {
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < GRID_MAX ? b : GRID_MAX);
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Whether the update may take the vector form for job j: every 16-byte access it
 * makes aligned (grad; latent, m1 and a full v where it updates them; the keys where
 * it writes them). Not always so: the layer's sign gradients follow paths·(m+r+n)
 * parameters in one buffer, and a factored v of rows + r elements shifts the latent
 * state of the next matrix. */
static int vec_aligned(const sign_job &j) {
    int ok = aligned16(j.grad);
    if (!j.exact) ok = ok && aligned16(j.lat) && aligned16(j.m1) && (j.factored || aligned16(j.v));
    if (!j.direct) ok = ok && aligned16(j.ws.key);
    return ok;
}

/* Blocks of the update over n entries in the vector form or the scalar one. */
static unsigned update_blocks(size_t n, int vec) {
    size_t per = vec ? VEC_W * VEC_BATCH : SCALAR_BATCH;
    return entry_blocks((n + per - 1) / per);
}

/* The job of one step over its workspace w (br_sign_step_workspace words). */
static sign_job make_job(const br_sign_step_args *a, uint32_t *w) {
    size_t n = a->rows * a->r, chunks = (a->rows + BR_SIGN_CHUNK - 1) / BR_SIGN_CHUNK;
    sign_job j;
    memset(&j, 0, sizeof j);
    j.ws.key = w;
    j.ws.hist = w + n;
    j.ws.sel = (unsigned long long *)(j.ws.hist + BLOCKS * 256); /* even offset: 8-aligned */
    j.ws.chunk = (float *)(j.ws.hist + BLOCKS * 256 + 16);
    j.ws.scalar = j.ws.chunk + chunks * a->r;
    j.ws.cnt = (uint32_t *)(j.ws.scalar + 16);
    j.ws.ticket = j.ws.cnt + GRID_MAX;
    j.grad = (const float *)br_ptr(a->grad);
    j.bits = (uint32_t *)br_ptr(a->bits);
    j.lat = (float *)br_ptr(a->latent);
    j.m1 = (float *)br_ptr(a->m1);
    j.v = (float *)br_ptr(a->v);
    j.sched = (const float *)br_ptr(a->sched);
    j.flips = (uint32_t *)br_ptr(a->flips);
    j.slot = (unsigned)a->slot;
    j.rows = (unsigned)a->rows;
    j.r = (unsigned)a->r;
    j.n = (unsigned)n;
    j.chunks = (unsigned)chunks;
    j.budget = a->budget;
    j.exact = a->exact;
    j.factored = !a->exact && a->factored;
    j.beta1 = a->beta1;
    j.beta2 = a->beta2;
    j.omb1 = 1.0f - a->beta1;
    j.omb2 = 1.0f - a->beta2;
    j.eps = a->eps;
    j.clamp = a->clamp;
    j.hyst = a->hyst;
    j.curv2 = a->curv2;
    if (a->exact) {
        j.rowf = (const float *)br_ptr(a->rowf);
        j.rowq = (const float *)br_ptr(a->rowq);
        j.colf = (const float *)br_ptr(a->colf);
        j.colq = (const float *)br_ptr(a->colq);
        j.normsrc = (const float *)br_ptr(a->normsrc);
        j.nnorm = (unsigned)a->nnorm;
    }
    /* without a binding budget the update kernel flips directly */
    j.direct = a->budget >= n;
    return j;
}

static br_status launch_step(br_ctx *ctx, const br_sign_step_args *a, sign_job j) {
    br_cuda *s = br_cuda_state(ctx);
    size_t n = a->rows * a->r, chunks = (a->rows + BR_SIGN_CHUNK - 1) / BR_SIGN_CHUNK;
    cudaStream_t st = s->stream;
    if (j.normsrc) {
        norm_kernel<<<1, BR_SIGN_LANES, 0, st>>>(j);
        BR_CUDA_LAUNCHED(ctx, "norm_kernel");
    }
    if (j.factored) {
        unsigned row_blocks = br_cuda_blocks(ctx, (size_t)a->rows * 32, THREADS);
        unsigned col_blocks = br_cuda_blocks(ctx, chunks * a->r, THREADS);
        factored_sums_kernel<<<row_blocks + col_blocks, THREADS, 0, st>>>(j, row_blocks);
        BR_CUDA_LAUNCHED(ctx, "factored_sums_kernel");
        colfin_kernel<<<1, BR_SIGN_LANES, 0, st>>>(j);
        BR_CUDA_LAUNCHED(ctx, "colfin_kernel");
    }
    const int vec = vec_aligned(j);
    unsigned ublocks = update_blocks(n, vec), blocks = entry_blocks(n);
    if (vec)
        update_kernel<VEC_W, VEC_BATCH><<<ublocks, THREADS, 0, st>>>(j);
    else
        update_kernel<1, SCALAR_BATCH><<<ublocks, THREADS, 0, st>>>(j);
    BR_CUDA_LAUNCHED(ctx, "update_kernel");
    if (j.direct) {
        finish_kernel<<<1, THREADS, 0, st>>>(j, ublocks);
        BR_CUDA_LAUNCHED(ctx, "finish_kernel");
        return BR_OK;
    }
    select_init_kernel<<<1, THREADS, 0, st>>>(j, ublocks);
    BR_CUDA_LAUNCHED(ctx, "select_init_kernel");
    for (unsigned pass = 0; pass < PASSES; pass++) {
        hist_kernel<<<BLOCKS, 256, 0, st>>>(j, 56 - 8 * pass, pass);
        BR_CUDA_LAUNCHED(ctx, "hist_kernel");
    }
    apply_kernel<<<blocks, THREADS, 0, st>>>(j);
    BR_CUDA_LAUNCHED(ctx, "apply_kernel");
    return BR_OK;
}

extern "C" br_status br_cuda_sign_step(br_ctx *ctx, const br_op *op) {
    const br_sign_step_args *a = &op->u.sign_step;
    void *mem = NULL;
    BR_TRY(br_cuda_workspace(ctx, br_sign_step_workspace(a->rows, a->r), &mem));
    return launch_step(ctx, a, make_job(a, (uint32_t *)mem));
}

/* The steps of a unit of br_sign_steps and, with_adam, the Adam job riding on them. */
typedef struct br_sign_steps_args {
    br_sign_step_args m[BR_SIGN_STEPS_MAX];
    size_t n;
    int with_adam;
    br_adam_args adam; /* as br_adam_cat builds it (rel_floor per element) */
} br_sign_steps_args;

/* Whether the n steps all flip directly (latent, full second moment, no binding
 * budget): then their updates run as one launch and their finish (with the Adam job
 * if there is one) as one more or in the same. Any other mix runs as its ops, one
 * step after another over the same workspace, then the Adam job's own launch. */
extern "C" int br_cuda_sign_steps_together(const br_op *ops, size_t n) {
    int together = n > 1;
    for (size_t i = 0; i < n; i++) {
        const br_sign_step_args *m = &ops[i].u.sign_step;
        together = together && !m->exact && !m->factored && m->budget >= m->rows * m->r;
    }
    return together;
}

/* The steps and the Adam job of a matched unit: SIGN_STEP ops, then ADAM_CAT or not. */
static br_sign_steps_args steps_of(const br_op *ops, size_t n) {
    br_sign_steps_args a;
    memset(&a, 0, sizeof a);
    a.with_adam = ops[n - 1].kind == BR_OP_ADAM_CAT;
    a.n = n - (size_t)a.with_adam;
    for (size_t i = 0; i < a.n; i++)
        a.m[i] = ops[i].u.sign_step;
    if (a.with_adam) a.adam = ops[n - 1].u.adam;
    return a;
}

extern "C" br_status br_cuda_sign_steps(br_ctx *ctx, const br_op *ops, size_t n) {
    const br_sign_steps_args steps = steps_of(ops, n), *a = &steps;
    size_t ws = 0;
    for (size_t i = 0; i < a->n; i++) {
        const br_sign_step_args *m = &a->m[i];
        size_t w = br_sign_step_workspace(m->rows, m->r);
        if (w > ws) ws = w;
    }
    void *mem = NULL;
    BR_TRY(br_cuda_workspace(ctx, ws + BR_SIGN_STEPS_MAX * GRID_MAX * sizeof(uint32_t), &mem));
    /* each job's counts in a row of its own past the shared workspace; its grid share
     * as one step alone would have, at most GRID_MAX / BR_SIGN_STEPS_MAX blocks */
    uint32_t *cnt = (uint32_t *)((char *)mem + ws);
    sign_jobs J;
    memset(&J, 0, sizeof J);
    J.n = (unsigned)a->n;
    int vec = 1; /* one form for the launch: the vector one where every job allows it */
    for (size_t i = 0; i < a->n; i++) {
        J.job[i] = make_job(&a->m[i], (uint32_t *)mem);
        vec = vec && vec_aligned(J.job[i]);
    }
    br_cuda *s = br_cuda_state(ctx);
    /* The update grid: one full wave of the GPU (the blocks it holds at once),
     * shared by the jobs in proportion to their entries; each block then strides
     * over its job's share. A block per 1024 entries (up to 2048 a job: 5120 blocks,
     * ten waves, at the third bench shape) measured 11 µs slower on the H200 with the
     * finish in the same launch (one machine start: the
     * layer step 0.4203 against 0.4089 ms) and 5.7 µs slower as it was, with a finish
     * launch of its own (0.4146): every block pays its start, its count and, with the
     * finish in the launch, its arrival. So: one wave. The entries' values do not
     * depend on the grid (only the per-block counts do, and their sum does not). */
    void (*kernel)(sign_jobs, adam_job) =
        vec ? update_n_kernel<VEC_W, VEC_BATCH> : update_n_kernel<1, SCALAR_BATCH>;
    size_t budget = 0, entries = 0;
    int *per_sm = &s->sign_update_per_sm[vec != 0]; /* asked once per context */
    if (*per_sm == 0) {
        BR_CUDA_TRY(ctx, cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kernel, THREADS, 0));
        if (*per_sm < 1) *per_sm = 1;
    }
    budget = (size_t)*per_sm * (size_t)s->sm_count;
    for (size_t i = 0; i < a->n; i++)
        entries += a->m[i].rows * a->m[i].r;
    for (size_t i = 0; i < a->n; i++) {
        const br_sign_step_args *m = &a->m[i];
        J.job[i].ws.cnt = cnt + i * GRID_MAX;
        size_t nb = update_blocks(m->rows * m->r, vec);
        if (nb > GRID_MAX / BR_SIGN_STEPS_MAX) nb = GRID_MAX / BR_SIGN_STEPS_MAX;
        if (budget) {
            size_t share = (budget * m->rows * m->r + entries / 2) / entries;
            if (share < 1) share = 1;
            if (nb > share) nb = share;
        }
        J.start[i + 1] = J.start[i] + (unsigned)nb;
    }
    /* the Adam blocks after the steps' (or the finish blocks): the grid adam_kernel
     * would have (first, with the updates in the rest of the wave: no gain measured,
     * 33b0caa) */
    adam_job A = {};
    unsigned adam_blocks = 0;
    if (a->with_adam) {
        A = br_adam_job_of(&a->adam);
        adam_blocks = br_adam_blocks(ctx, a->adam.n);
    }
    static_assert(ADAM_THREADS == THREADS, "the Adam blocks are the steps' size");
    /* One launch where the Adam job may run beside the updates: the front-end keeps
     * what Adam uses apart from what a step writes and Adam's writes from the scheds;
     * a direct step also reads its grad, which Adam must then not write. */
    int one = 1;
    for (size_t i = 0; i < a->n && a->with_adam; i++) {
        const br_adam_args *d = &a->adam;
        const br_buf *g = a->m[i].grad;
        size_t ng = a->m[i].rows * a->m[i].r;
        one = one && !br_bufs_overlap(d->w, d->n, g, ng) && !br_bufs_overlap(d->m1, d->n, g, ng) &&
              !br_bufs_overlap(d->m2, d->n, g, ng);
    }
    if (one) J.ticket = s->tickets + BR_TICKET_SIGN_STEPS;
    const unsigned grid = J.start[J.n] + (one ? adam_blocks : 0);
    snprintf(ctx->kernel, sizeof ctx->kernel, "update_n %s", one ? "one launch" : "two launches");
    BR_CUDA_LAUNCH_WAITING(ctx, s, "update_n_kernel", kernel, grid, THREADS, 0, J, A);
    if (one) return BR_OK;
    BR_CUDA_LAUNCH_WAITING(ctx, s, "finish_n_kernel", finish_n_kernel, J.n + adam_blocks, THREADS,
                           0, J, A);
    return BR_OK;
}
