/* Staging ops on CUDA: f32 → f16 operands of the GEMMs (cvt, cvt_multi, cvt_cols,
 * cvt_t) and the ±1 planes of a sign bitmap (expand). Bit-identical to the CPU
 * backend: every value is f16((src·col)·scale) with each product rounded
 * (__fmul_rn), converted by br_dev_f16_bits (round to nearest even, subnormals
 * kept); pads are +0. */
#include "backend/cuda/cuda_internal.h"

#define THREADS 256

/* The f16 bits cvt stages from x in column c (col NULL: no column factor). */
static __device__ __forceinline__ uint16_t stage_bits(float x, const float *col, unsigned c,
                                                      float scale) {
    float v = col ? __fmul_rn(__fmul_rn(x, col[c]), scale) : __fmul_rn(x, scale);
    return br_dev_f16_bits(v);
}

/* ---------------------------------------------------------------- cvt family */

/* One kernel for cvt, cvt_multi and cvt_cols: dst[o][row][c] = the staged value of
 * src[row·ld + c] with column factor col[o] (or none), for row < m, c < k; rows
 * m..mpad−1 are zero. src is the first column of the block (cvt_cols: + col0). */
typedef struct cvt_job {
    const float *src;
    size_t ld;           /* src row stride in floats */
    const float *col[4]; /* NULL: no column factor */
    uint16_t *dst[4];    /* f16 [mpad][k] each */
    int n_out;           /* 1..4 */
    unsigned m, k, mpad;
    float scale;
} cvt_job;

/* One thread per element of [mpad][k] (flat index i = row·k + c). */
__global__ void cvt_kernel(cvt_job j) {
    BR_GRID_STRIDE(i, j.mpad * j.k) {
        unsigned row = i / j.k, c = i % j.k;
        float x = row < j.m ? j.src[(size_t)row * j.ld + c] : 0.0f;
#pragma unroll /* constant indices keep the job's arrays out of local memory */
        for (int o = 0; o < 4; o++)
            if (o < j.n_out)
                j.dst[o][i] = row < j.m ? stage_bits(x, j.col[o], c, j.scale) : (uint16_t)0;
    }
}

/* One thread per 4 elements of a row (k % 4 == 0, ld % 4 == 0, src and every col
 * 16-byte aligned, every dst 8-byte aligned): a float4 load, 4 halves stored as
 * one 8-byte word. q is the flat index of the 4-element group. */
__global__ void cvt_vec_kernel(cvt_job j) {
    unsigned k4 = j.k / 4;
    BR_GRID_STRIDE(q, j.mpad * k4) {
        unsigned row = q / k4, c = (q % k4) * 4;
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (row < j.m) x = *reinterpret_cast<const float4 *>(j.src + (size_t)row * j.ld + c);
#pragma unroll
        for (int o = 0; o < 4; o++) {
            if (o >= j.n_out) break;
            uint2 h = make_uint2(0u, 0u);
            if (row < j.m) {
                const float *col = j.col[o];
                h.x = stage_bits(x.x, col, c, j.scale) |
                      (uint32_t)stage_bits(x.y, col, c + 1, j.scale) << 16;
                h.y = stage_bits(x.z, col, c + 2, j.scale) |
                      (uint32_t)stage_bits(x.w, col, c + 3, j.scale) << 16;
            }
            reinterpret_cast<uint2 *>(j.dst[o])[q] = h;
        }
    }
}

static br_status cvt_run(br_ctx *ctx, cvt_job *j) {
    br_cuda *s = br_cuda_state(ctx);
    size_t n = (size_t)j->mpad * j->k;
    int vec = j->k % 4 == 0 && j->ld % 4 == 0 && br_aligned(16, j->src);
    for (int o = 0; o < j->n_out; o++)
        vec = vec && br_aligned(16, j->col[o]) && br_aligned(8, j->dst[o]);
    if (vec) {
        cvt_vec_kernel<<<br_cuda_blocks(ctx, n / 4, THREADS), THREADS, 0, s->stream>>>(*j);
        BR_CUDA_LAUNCHED(ctx, "cvt_vec_kernel");
    } else {
        cvt_kernel<<<br_cuda_blocks(ctx, n, THREADS), THREADS, 0, s->stream>>>(*j);
        BR_CUDA_LAUNCHED(ctx, "cvt_kernel");
    }
    return BR_OK;
}

/* A job staging m rows of k from src (rows ld apart) at scale; outputs still to set. */
static cvt_job cvt_job_of(const float *src, size_t ld, size_t m, size_t k, float scale) {
    cvt_job j = {};
    j.src = src;
    j.ld = ld;
    j.m = (unsigned)m;
    j.k = (unsigned)k;
    j.mpad = (unsigned)br_pad_rows(m);
    j.scale = scale;
    return j;
}

extern "C" br_status br_cuda_cvt(br_ctx *ctx, const br_op *op) {
    const br_cvt_args *a = &op->u.cvt;
    cvt_job j = cvt_job_of((const float *)br_ptr(a->src), a->k, a->m, a->k, a->scale);
    j.col[0] = (const float *)br_ptr(a->col);
    j.dst[0] = (uint16_t *)br_ptr(a->dst);
    j.n_out = 1;
    return cvt_run(ctx, &j);
}

/* n CVT ops of one source, m, k and scale (cuda_fuse.c): one job of n outputs. */
extern "C" br_status br_cuda_cvt_multi(br_ctx *ctx, const br_op *ops, size_t n) {
    const br_cvt_args *a = &ops[0].u.cvt;
    cvt_job j = cvt_job_of((const float *)br_ptr(a->src), a->k, a->m, a->k, a->scale);
    j.n_out = (int)n;
    for (int o = 0; o < j.n_out; o++) {
        j.col[o] = (const float *)br_ptr(ops[o].u.cvt.col);
        j.dst[o] = (uint16_t *)br_ptr(ops[o].u.cvt.dst);
    }
    return cvt_run(ctx, &j);
}

extern "C" br_status br_cuda_cvt_cols(br_ctx *ctx, const br_op *op) {
    const br_cvt_cols_args *a = &op->u.cvt_cols;
    cvt_job j =
        cvt_job_of((const float *)br_ptr(a->src) + a->col0, a->ld_src, a->m, a->k, a->scale);
    j.dst[0] = (uint16_t *)br_ptr(a->dst); /* no column factor */
    j.n_out = 1;
    return cvt_run(ctx, &j);
}

/* ---------------------------------------------------------------- cvt_t */

/* Transposed staging: dst[row][t] (f16 [kpad][tpad]) = the value cvt stages at
 * src[t][row] (src f32 [ntok][k]), zero where t ≥ ntok or row ≥ k. A block of
 * 32×8 threads moves 32×32 tiles (grid-stride over tiles, row tiles fastest):
 * threadIdx.x walks src rows' columns when reading (128-byte loads) and dst
 * rows' tokens when writing (64-byte stores), through a padded shared tile. */
__global__ void cvt_t_kernel(const float *src, const float *col, uint16_t *dst, unsigned ntok,
                             unsigned k, unsigned kpad, unsigned tpad, float scale) {
    __shared__ uint32_t tile[32][33];
    unsigned row_tiles = kpad / 32, tiles = row_tiles * (tpad / 32);
    unsigned tx = threadIdx.x, ty = threadIdx.y;
    for (unsigned tl = blockIdx.x; tl < tiles; tl += gridDim.x) {
        unsigned r0 = (tl % row_tiles) * 32, t0 = (tl / row_tiles) * 32;
        for (unsigned j = ty; j < 32; j += 8) {
            unsigned t = t0 + j, row = r0 + tx;
            uint16_t h = 0;
            if (t < ntok && row < k) h = stage_bits(src[(size_t)t * k + row], col, row, scale);
            tile[j][tx] = h;
        }
        __syncthreads();
        for (unsigned j = ty; j < 32; j += 8)
            dst[(size_t)(r0 + j) * tpad + t0 + tx] = (uint16_t)tile[tx][j];
        __syncthreads();
    }
}

extern "C" br_status br_cuda_cvt_t(br_ctx *ctx, const br_op *op) {
    const br_cvt_t_args *a = &op->u.cvt_t;
    br_cuda *s = br_cuda_state(ctx);
    unsigned kpad = (unsigned)br_pad_rows(a->k), tpad = (unsigned)br_pad_tokens(a->ntok);
    size_t tiles = (size_t)(kpad / 32) * (tpad / 32);
    cvt_t_kernel<<<br_cuda_blocks(ctx, tiles * 256, 256), dim3(32, 8), 0, s->stream>>>(
        (const float *)br_ptr(a->src), (const float *)br_ptr(a->col), (uint16_t *)br_ptr(a->dst),
        (unsigned)a->ntok, (unsigned)a->k, kpad, tpad, a->scale);
    BR_CUDA_LAUNCHED(ctx, "cvt_t_kernel");
    return BR_OK;
}

/* ---------------------------------------------------------------- expand */

#define F16_PLUS_ONE 0x3C00u
#define F16_MINUS_ONE 0xBC00u

/* plane[row][j] = ±1 from bit j%32 of word j/32 of bitmap row `row` (bits u32
 * [rows][words]); one thread per element. */
__global__ void expand_kernel(const uint32_t *bits, uint16_t *plane, unsigned rows, unsigned r,
                              unsigned words) {
    BR_GRID_STRIDE(i, rows * r) {
        unsigned row = i / r, j = i % r;
        uint32_t bit = bits[(size_t)row * words + j / 32] >> (j % 32) & 1u;
        plane[i] = bit ? F16_PLUS_ONE : F16_MINUS_ONE;
    }
}

/* The same, one thread per 8 elements (r % 8 == 0, plane 16-byte aligned): one byte
 * of a bitmap word becomes one 16-byte store. */
__global__ void expand_vec_kernel(const uint32_t *bits, uint4 *plane, unsigned rows, unsigned r,
                                  unsigned words) {
    unsigned r8 = r / 8;
    BR_GRID_STRIDE(q, rows * r8) {
        unsigned row = q / r8, j8 = q % r8;
        uint32_t byte = bits[(size_t)row * words + j8 / 4] >> (j8 % 4 * 8) & 0xffu;
        uint32_t h[4];
        for (int p = 0; p < 4; p++)
            h[p] = (byte >> (2 * p) & 1u ? F16_PLUS_ONE : F16_MINUS_ONE) |
                   (byte >> (2 * p + 1) & 1u ? F16_PLUS_ONE : F16_MINUS_ONE) << 16;
        plane[q] = make_uint4(h[0], h[1], h[2], h[3]);
    }
}

/* plane_t[j][row] (f16 [r][rows]) = ±1 from bit j of bitmap row `row`. One thread
 * per (word w, bitmap row), rows fastest: it reads one word and writes its 32
 * values down column `row` of plane_t, so a warp's stores for one j are 32
 * consecutive halves. PAIR: two consecutive rows per thread (rows even, plane_t
 * 4-byte aligned), written as half2. */
template <bool PAIR>
__global__ void expand_t_kernel(const uint32_t *bits, uint16_t *plane_t, unsigned rows, unsigned r,
                                unsigned words) {
    unsigned per = PAIR ? 2 : 1, groups = rows / per;
    BR_GRID_STRIDE(i, groups * words) {
        unsigned w = i / groups, row = (i % groups) * per;
        uint32_t b0 = bits[(size_t)row * words + w];
        uint32_t b1 = PAIR ? bits[(size_t)(row + 1) * words + w] : 0u;
        unsigned nj = r - 32 * w < 32 ? r - 32 * w : 32;
        for (unsigned jj = 0; jj < nj; jj++) {
            size_t at = (size_t)(32 * w + jj) * rows + row;
            uint32_t h0 = b0 >> jj & 1u ? F16_PLUS_ONE : F16_MINUS_ONE;
            if (PAIR) {
                uint32_t h1 = b1 >> jj & 1u ? F16_PLUS_ONE : F16_MINUS_ONE;
                *reinterpret_cast<uint32_t *>(plane_t + at) = h0 | h1 << 16;
            } else {
                plane_t[at] = (uint16_t)h0;
            }
        }
    }
}

extern "C" br_status br_cuda_expand(br_ctx *ctx, const br_op *op) {
    const br_expand_args *a = &op->u.expand;
    br_cuda *s = br_cuda_state(ctx);
    const uint32_t *bits = (const uint32_t *)br_ptr(a->bits);
    unsigned rows = (unsigned)a->rows, r = (unsigned)a->r, words = (r + 31) / 32;
    if (a->plane) {
        uint16_t *plane = (uint16_t *)br_ptr(a->plane);
        if (r % 8 == 0 && br_aligned(16, plane)) {
            expand_vec_kernel<<<br_cuda_blocks(ctx, (size_t)rows * r / 8, THREADS), THREADS, 0,
                                s->stream>>>(bits, (uint4 *)plane, rows, r, words);
            BR_CUDA_LAUNCHED(ctx, "expand_vec_kernel");
        } else {
            expand_kernel<<<br_cuda_blocks(ctx, (size_t)rows * r, THREADS), THREADS, 0,
                            s->stream>>>(bits, plane, rows, r, words);
            BR_CUDA_LAUNCHED(ctx, "expand_kernel");
        }
    }
    if (a->plane_t) {
        uint16_t *plane_t = (uint16_t *)br_ptr(a->plane_t);
        if (rows % 2 == 0 && br_aligned(4, plane_t)) {
            expand_t_kernel<true>
                <<<br_cuda_blocks(ctx, (size_t)rows / 2 * words, THREADS), THREADS, 0, s->stream>>>(
                    bits, plane_t, rows, r, words);
        } else {
            expand_t_kernel<false>
                <<<br_cuda_blocks(ctx, (size_t)rows * words, THREADS), THREADS, 0, s->stream>>>(
                    bits, plane_t, rows, r, words);
        }
        BR_CUDA_LAUNCHED(ctx, "expand_t_kernel");
    }
    return BR_OK;
}
