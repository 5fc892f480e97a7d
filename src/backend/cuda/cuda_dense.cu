/* The small dense f32 linear on CUDA (dense_fwd, dense_bwd), plain and tiled. Every
 * output sums its terms in the contract's order with one __fmaf_rn each from 0
 * (dense_fwd: j = 0..k−1; dense_bwd: o = 0..r−1, then dx + acc), so the plain and
 * tiled kernels give the same bits as each other and as the CPU backend. */
#include "backend/cuda/cuda_internal.h"

#define THREADS 256

/* ---------------------------------------------------------------- dense_fwd */

/* out[i][o] (+)= Σ_j a[i][j]·w[o][j]; a [m][k], w [r][k], out [m][r]. One thread
 * per output, flat index i·r + o (grid-stride). */
__global__ void dense_fwd_plain_kernel(const float *a, const float *w, float *out, unsigned m,
                                       unsigned k, unsigned r, int accumulate) {
    BR_GRID_STRIDE(idx, m * r) {
        unsigned i = idx / r, o = idx % r;
        const float *ai = a + (size_t)i * k, *wo = w + (size_t)o * k;
        float acc = 0.0f;
        for (unsigned j = 0; j < k; j++)
            acc = __fmaf_rn(ai[j], wo[j], acc);
        out[idx] = accumulate ? __fadd_rn(out[idx], acc) : acc;
    }
}

#define FWD_ROWS 64  /* rows of a block */
#define FWD_K 64     /* k-chunk staged in shared memory */
#define FWD_MAX_R 48 /* outputs the tiled kernel holds (3 per lane of 16) */

/* dense_fwd tiled for r ≤ 48: a block of 256 threads owns 64 rows × all outputs;
 * thread (ty = tid/16: rows 4ty..4ty+3, tx = tid%16: outputs tx, tx+16, tx+32)
 * keeps 12 accumulators. k goes in chunks of 64 through shared memory (a [64][65],
 * w [48][65], padded against bank conflicts, loaded with consecutive threads on
 * consecutive k); each accumulator still takes j = 0..k−1 in order, one fmaf per
 * term. Grid-stride over row blocks. */
__global__ void dense_fwd_tiled_kernel(const float *a, const float *w, float *out, unsigned m,
                                       unsigned k, unsigned r, int accumulate) {
    __shared__ float sa[FWD_ROWS][FWD_K + 1];
    __shared__ float sw[FWD_MAX_R][FWD_K + 1];
    const unsigned tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    for (unsigned r0 = blockIdx.x * FWD_ROWS; r0 < m; r0 += gridDim.x * FWD_ROWS) {
        float acc[4][3];
#pragma unroll
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 3; x++)
                acc[y][x] = 0.0f;
        for (unsigned k0 = 0; k0 < k; k0 += FWD_K) {
            unsigned kn = min(FWD_K, k - k0);
            for (unsigned e = tid; e < FWD_ROWS * FWD_K; e += THREADS) {
                unsigned rr = e / FWD_K, kk = e % FWD_K;
                sa[rr][kk] = r0 + rr < m && kk < kn ? a[(size_t)(r0 + rr) * k + k0 + kk] : 0.0f;
            }
            for (unsigned e = tid; e < FWD_MAX_R * FWD_K; e += THREADS) {
                unsigned o = e / FWD_K, kk = e % FWD_K;
                sw[o][kk] = o < r && kk < kn ? w[(size_t)o * k + k0 + kk] : 0.0f;
            }
            __syncthreads();
            for (unsigned kk = 0; kk < kn; kk++) {
                float x[4], wv[3];
#pragma unroll
                for (int y = 0; y < 4; y++)
                    x[y] = sa[4 * ty + y][kk];
#pragma unroll
                for (int z = 0; z < 3; z++)
                    wv[z] = sw[tx + 16 * z][kk];
#pragma unroll
                for (int y = 0; y < 4; y++)
                    for (int z = 0; z < 3; z++)
                        acc[y][z] = __fmaf_rn(x[y], wv[z], acc[y][z]);
            }
            __syncthreads();
        }
#pragma unroll
        for (int y = 0; y < 4; y++)
            for (int z = 0; z < 3; z++) {
                unsigned i = r0 + 4 * ty + y, o = tx + 16 * z;
                if (i < m && o < r) {
                    float *dst = out + (size_t)i * r + o;
                    *dst = accumulate ? __fadd_rn(*dst, acc[y][z]) : acc[y][z];
                }
            }
    }
}

extern "C" br_status br_cuda_dense_fwd(br_ctx *ctx, const br_op *op) {
    const br_dense_args *a = &op->u.dense;
    br_cuda *s = br_cuda_state(ctx);
    const float *x = (const float *)br_ptr(a->a), *w = (const float *)br_ptr(a->w);
    float *out = (float *)br_ptr(a->out);
    unsigned m = (unsigned)a->m, k = (unsigned)a->k, r = (unsigned)a->r;
    if (a->impl == BR_DENSE_TILED && r <= FWD_MAX_R) {
        dense_fwd_tiled_kernel<<<br_cuda_blocks(
                                     ctx, (size_t)(m + FWD_ROWS - 1) / FWD_ROWS * THREADS, THREADS),
                                 THREADS, 0, s->stream>>>(x, w, out, m, k, r, a->accumulate);
        BR_CUDA_LAUNCHED(ctx, "dense_fwd_tiled_kernel");
    } else {
        dense_fwd_plain_kernel<<<br_cuda_blocks(ctx, (size_t)m * r, THREADS), THREADS, 0,
                                 s->stream>>>(x, w, out, m, k, r, a->accumulate);
        BR_CUDA_LAUNCHED(ctx, "dense_fwd_plain_kernel");
    }
    return BR_OK;
}

/* ---------------------------------------------------------------- dense_bwd */

/* dx[i][j] += Σ_o dy[i][o]·w[o][j]; dy [m][r], w [r][k], dx [m][k]. One thread per
 * element of dx, flat index i·k + j: a warp reads 32 consecutive columns of a row
 * of w and one dy value (broadcast). */
__global__ void dense_bwd_plain_kernel(const float *dy, const float *w, float *dx, unsigned m,
                                       unsigned k, unsigned r) {
    BR_GRID_STRIDE(idx, m * k) {
        unsigned i = idx / k, j = idx % k;
        const float *dyi = dy + (size_t)i * r;
        float acc = 0.0f;
        for (unsigned o = 0; o < r; o++)
            acc = __fmaf_rn(dyi[o], w[(size_t)o * k + j], acc);
        dx[idx] = __fadd_rn(dx[idx], acc);
    }
}

#define BWD_ROWS 4

/* dense_bwd tiled: one thread per (column j, group of 4 rows): each load of w[o][j]
 * serves 4 outputs, each output still summing o = 0..r−1 in order. Thread x walks
 * columns (coalesced), grid-stride over the (row group, column block) pairs. */
__global__ void dense_bwd_tiled_kernel(const float *dy, const float *w, float *dx, unsigned m,
                                       unsigned k, unsigned r) {
    const unsigned col_blocks = (k + THREADS - 1) / THREADS;
    const unsigned groups = (m + BWD_ROWS - 1) / BWD_ROWS;
    for (unsigned b = blockIdx.x; b < groups * col_blocks; b += gridDim.x) {
        unsigned j = (b % col_blocks) * THREADS + threadIdx.x, i0 = (b / col_blocks) * BWD_ROWS;
        if (j >= k) continue;
        unsigned nrows = min(BWD_ROWS, m - i0);
        float acc[BWD_ROWS] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (unsigned o = 0; o < r; o++) {
            float wv = w[(size_t)o * k + j];
#pragma unroll
            for (unsigned y = 0; y < BWD_ROWS; y++)
                if (y < nrows) acc[y] = __fmaf_rn(dy[(size_t)(i0 + y) * r + o], wv, acc[y]);
        }
        for (unsigned y = 0; y < nrows; y++) {
            float *dst = dx + (size_t)(i0 + y) * k + j;
            *dst = __fadd_rn(*dst, acc[y]);
        }
    }
}

extern "C" br_status br_cuda_dense_bwd(br_ctx *ctx, const br_op *op) {
    const br_dense_args *a = &op->u.dense;
    br_cuda *s = br_cuda_state(ctx);
    const float *dy = (const float *)br_ptr(a->a), *w = (const float *)br_ptr(a->w);
    float *dx = (float *)br_ptr(a->out);
    unsigned m = (unsigned)a->m, k = (unsigned)a->k, r = (unsigned)a->r;
    if (a->impl == BR_DENSE_TILED) {
        size_t pairs = (size_t)(m + BWD_ROWS - 1) / BWD_ROWS * ((k + THREADS - 1) / THREADS);
        dense_bwd_tiled_kernel<<<br_cuda_blocks(ctx, pairs * THREADS, THREADS), THREADS, 0,
                                 s->stream>>>(dy, w, dx, m, k, r);
        BR_CUDA_LAUNCHED(ctx, "dense_bwd_tiled_kernel");
    } else {
        dense_bwd_plain_kernel<<<br_cuda_blocks(ctx, (size_t)m * k, THREADS), THREADS, 0,
                                 s->stream>>>(dy, w, dx, m, k, r);
        BR_CUDA_LAUNCHED(ctx, "dense_bwd_plain_kernel");
    }
    return BR_OK;
}
