/* Elementwise ops on CUDA: fill, copy, scale_acc, scale_acc2, f16_to_f32, add,
 * split_qg. Memory-bound: each kernel is a grid-stride loop, with a 16-byte vector
 * path taken when every pointer it touches is aligned for it (buffers are at their
 * allocation, views may not be) and a scalar path otherwise. The arithmetic is the
 * CPU backend's, product by product: __fmul_rn / __fadd_rn are never contracted,
 * so the results are bit-identical (this file is also built with --fmad=false). */
#include "backend/cuda/cuda_internal.h"

#define THREADS 256

/* ---------------------------------------------------------------- fill */

/* p[0..n) = v for an element type T (u16 for f16, u32 for f32/u32), written as
 * `head` scalars up to the first 16-byte boundary, `nvec` uint4 vectors, then the
 * scalars that remain. One thread per vector or scalar. */
template <typename T>
__global__ void fill_kernel(T *p, unsigned head, unsigned nvec, unsigned n, T v, uint4 vv) {
    BR_GRID_STRIDE(i, nvec) { reinterpret_cast<uint4 *>(p + head)[i] = vv; }
    unsigned tail0 = head + nvec * (unsigned)(16 / sizeof(T));
    unsigned nscalar = head + (n - tail0);
    BR_GRID_STRIDE(j, nscalar) { p[j < head ? j : tail0 + (j - head)] = v; }
}

template <typename T> static br_status fill_typed(br_ctx *ctx, T *p, size_t n, T v) {
    br_cuda *s = br_cuda_state(ctx);
    const unsigned per = 16 / sizeof(T);
    /* elements before the first 16-byte boundary (the buffer is element-aligned) */
    size_t head = ((16 - (uintptr_t)p % 16) % 16) / sizeof(T);
    if (head > n) head = n;
    size_t nvec = (n - head) / per;
    uint32_t w = sizeof(T) == 2 ? ((uint32_t)v | (uint32_t)v << 16) : (uint32_t)v;
    uint4 vv = make_uint4(w, w, w, w);
    size_t items = nvec > n - nvec * per ? nvec : n - nvec * per;
    fill_kernel<T><<<br_cuda_blocks(ctx, items, THREADS), THREADS, 0, s->stream>>>(
        p, (unsigned)head, (unsigned)nvec, (unsigned)n, v, vv);
    BR_CUDA_LAUNCHED(ctx, "fill_kernel");
    return BR_OK;
}

/* A buffer may hold more than BR_MAX_ELEMS elements (fill is not an op shape): it
 * is filled in pieces the 32-bit kernel indices can count. */
extern "C" br_status br_cuda_fill(br_ctx *ctx, const br_op *op) {
    const br_fill_args *a = &op->u.fill;
    const size_t piece = (size_t)1 << 30;
    for (size_t done = 0; done < a->count; done += piece) {
        size_t n = a->count - done < piece ? a->count - done : piece;
        if (a->buf->dtype == BR_F16)
            BR_TRY(fill_typed<uint16_t>(ctx, (uint16_t *)br_ptr(a->buf) + a->off + done, n,
                                        (uint16_t)a->bits));
        else
            BR_TRY(
                fill_typed<uint32_t>(ctx, (uint32_t *)br_ptr(a->buf) + a->off + done, n, a->bits));
    }
    return BR_OK;
}

/* ---------------------------------------------------------------- copy */

/* Device-to-device memcpy on the stream (captured into graphs as a memcpy node).
 * Overlapping ranges of one allocation get memmove semantics, as on the CPU: moved
 * in pieces no longer than the distance between them (each piece then reads only
 * elements not yet overwritten), or through the workspace when that would take too
 * many pieces. */
extern "C" br_status br_cuda_copy(br_ctx *ctx, const br_op *op) {
    const br_copy_args *a = &op->u.copy;
    br_cuda *s = br_cuda_state(ctx);
    size_t es = br_dtype_size(a->dst->dtype);
    size_t bytes = a->count * es;
    char *dst = (char *)br_ptr(a->dst) + a->dst_off * es;
    const char *src = (const char *)br_ptr(a->src) + a->src_off * es;
    if (!bytes || dst == src) return BR_OK;
    size_t dist = dst > src ? (size_t)(dst - src) : (size_t)(src - dst);
    ctx->stats.launches++;
    if (dist >= bytes) {
        BR_CUDA_TRY(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s->stream));
        return BR_OK;
    }
    size_t pieces = (bytes + dist - 1) / dist;
    if (pieces <= 16) {
        for (size_t i = 0; i < pieces; i++) {
            /* moving up: the highest piece first; moving down: the lowest first */
            size_t lo = dst > src ? (pieces - 1 - i) * dist : i * dist;
            size_t len = bytes - lo < dist ? bytes - lo : dist;
            BR_CUDA_TRY(
                ctx, cudaMemcpyAsync(dst + lo, src + lo, len, cudaMemcpyDeviceToDevice, s->stream));
        }
        return BR_OK;
    }
    void *tmp = NULL;
    br_status st = br_cuda_workspace(ctx, bytes, &tmp);
    if (st != BR_OK) {
        char why[sizeof ctx->err];
        snprintf(why, sizeof why, "%s", ctx->err);
        return br_fail(ctx, st, "copy: overlapping ranges of %zu bytes need a workspace: %s", bytes,
                       why);
    }
    BR_CUDA_TRY(ctx, cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, s->stream));
    BR_CUDA_TRY(ctx, cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, s->stream));
    return BR_OK;
}

/* ---------------------------------------------------------------- scale_acc */

/* out[row][c] = a[row][c]·col[c] (ACC: out[row][c] + that), a, out [m][k] flat as
 * n = m·k elements. Vector form: one thread per float4 of a row (k % 4 == 0). */
template <bool ACC>
__global__ void scale_acc_kernel(const float *a, const float *col, float *out, unsigned n,
                                 unsigned k) {
    BR_GRID_STRIDE(i, n) {
        float v = __fmul_rn(a[i], col[i % k]);
        out[i] = ACC ? __fadd_rn(out[i], v) : v;
    }
}
template <bool ACC>
__global__ void scale_acc_vec_kernel(const float4 *a, const float4 *col, float4 *out, unsigned n4,
                                     unsigned k4) {
    BR_GRID_STRIDE(i, n4) {
        float4 x = a[i], c = col[i % k4], v;
        v.x = __fmul_rn(x.x, c.x);
        v.y = __fmul_rn(x.y, c.y);
        v.z = __fmul_rn(x.z, c.z);
        v.w = __fmul_rn(x.w, c.w);
        if (ACC) {
            float4 o = out[i];
            v.x = __fadd_rn(o.x, v.x);
            v.y = __fadd_rn(o.y, v.y);
            v.z = __fadd_rn(o.z, v.z);
            v.w = __fadd_rn(o.w, v.w);
        }
        out[i] = v;
    }
}

extern "C" br_status br_cuda_scale_acc(br_ctx *ctx, const br_op *op) {
    const br_scale_acc_args *a = &op->u.scale_acc;
    br_cuda *s = br_cuda_state(ctx);
    const float *x = (const float *)br_ptr(a->a), *col = (const float *)br_ptr(a->col);
    float *out = (float *)br_ptr(a->out);
    size_t n = a->m * a->k;
    if (a->k % 4 == 0 && br_aligned(16, x, col, out)) {
        unsigned blocks = br_cuda_blocks(ctx, n / 4, THREADS);
        if (a->accumulate)
            scale_acc_vec_kernel<true><<<blocks, THREADS, 0, s->stream>>>(
                (const float4 *)x, (const float4 *)col, (float4 *)out, (unsigned)(n / 4),
                (unsigned)(a->k / 4));
        else
            scale_acc_vec_kernel<false><<<blocks, THREADS, 0, s->stream>>>(
                (const float4 *)x, (const float4 *)col, (float4 *)out, (unsigned)(n / 4),
                (unsigned)(a->k / 4));
        BR_CUDA_LAUNCHED(ctx, "scale_acc_vec_kernel");
        return BR_OK;
    }
    unsigned blocks = br_cuda_blocks(ctx, n, THREADS);
    if (a->accumulate)
        scale_acc_kernel<true>
            <<<blocks, THREADS, 0, s->stream>>>(x, col, out, (unsigned)n, (unsigned)a->k);
    else
        scale_acc_kernel<false>
            <<<blocks, THREADS, 0, s->stream>>>(x, col, out, (unsigned)n, (unsigned)a->k);
    BR_CUDA_LAUNCHED(ctx, "scale_acc_kernel");
    return BR_OK;
}

/* ---------------------------------------------------------------- scale_acc2 */

/* out[row][c] = fl(fl(a0·col0[c]) + fl(a1·col1[c])) over [m][k] flat: scale_acc of
 * path 0 (overwrite) then of path 1 (accumulate) in one pass, same bits. */
__global__ void scale_acc2_kernel(const float *a0, const float *c0, const float *a1,
                                  const float *c1, float *out, unsigned n, unsigned k) {
    BR_GRID_STRIDE(i, n) {
        unsigned c = i % k;
        out[i] = __fadd_rn(__fmul_rn(a0[i], c0[c]), __fmul_rn(a1[i], c1[c]));
    }
}
/* The same, one thread per float4 of a row (k % 4 == 0). */
__global__ void scale_acc2_vec_kernel(const float4 *a0, const float4 *c0, const float4 *a1,
                                      const float4 *c1, float4 *out, unsigned n4, unsigned k4) {
    BR_GRID_STRIDE(i, n4) {
        unsigned c = i % k4;
        float4 x0 = a0[i], x1 = a1[i], f0 = c0[c], f1 = c1[c], v;
        v.x = __fadd_rn(__fmul_rn(x0.x, f0.x), __fmul_rn(x1.x, f1.x));
        v.y = __fadd_rn(__fmul_rn(x0.y, f0.y), __fmul_rn(x1.y, f1.y));
        v.z = __fadd_rn(__fmul_rn(x0.z, f0.z), __fmul_rn(x1.z, f1.z));
        v.w = __fadd_rn(__fmul_rn(x0.w, f0.w), __fmul_rn(x1.w, f1.w));
        out[i] = v;
    }
}

extern "C" br_status br_cuda_scale_acc2(br_ctx *ctx, const br_op *op) {
    const br_scale_acc2_args *a = &op->u.scale_acc2;
    br_cuda *s = br_cuda_state(ctx);
    const float *a0 = (const float *)br_ptr(a->a0), *c0 = (const float *)br_ptr(a->col0);
    const float *a1 = (const float *)br_ptr(a->a1), *c1 = (const float *)br_ptr(a->col1);
    float *out = (float *)br_ptr(a->out);
    size_t n = a->m * a->k;
    if (a->k % 4 == 0 && br_aligned(16, a0, c0, a1, c1, out)) {
        scale_acc2_vec_kernel<<<br_cuda_blocks(ctx, n / 4, THREADS), THREADS, 0, s->stream>>>(
            (const float4 *)a0, (const float4 *)c0, (const float4 *)a1, (const float4 *)c1,
            (float4 *)out, (unsigned)(n / 4), (unsigned)(a->k / 4));
        BR_CUDA_LAUNCHED(ctx, "scale_acc2_vec_kernel");
        return BR_OK;
    }
    scale_acc2_kernel<<<br_cuda_blocks(ctx, n, THREADS), THREADS, 0, s->stream>>>(
        a0, c0, a1, c1, out, (unsigned)n, (unsigned)a->k);
    BR_CUDA_LAUNCHED(ctx, "scale_acc2_kernel");
    return BR_OK;
}

/* ---------------------------------------------------------------- f16_to_f32 */

/* dst[i] = f32(src[i]) for i < n; vector form: 4 halves (8 bytes) → one float4 per
 * thread for i < 4·n4, the scalar loop finishing the rest. */
__global__ void f16_to_f32_kernel(const uint16_t *src, float *dst, unsigned n, unsigned n4) {
    BR_GRID_STRIDE(q, n4) {
        uint2 h = reinterpret_cast<const uint2 *>(src)[q];
        float4 v;
        v.x = br_dev_f16_to_f32((uint16_t)(h.x & 0xffffu));
        v.y = br_dev_f16_to_f32((uint16_t)(h.x >> 16));
        v.z = br_dev_f16_to_f32((uint16_t)(h.y & 0xffffu));
        v.w = br_dev_f16_to_f32((uint16_t)(h.y >> 16));
        reinterpret_cast<float4 *>(dst)[q] = v;
    }
    BR_GRID_STRIDE(j, n - 4 * n4) { dst[4 * n4 + j] = br_dev_f16_to_f32(src[4 * n4 + j]); }
}

extern "C" br_status br_cuda_f16_to_f32(br_ctx *ctx, const br_op *op) {
    const br_unary_args *a = &op->u.unary;
    br_cuda *s = br_cuda_state(ctx);
    const uint16_t *src = (const uint16_t *)br_ptr(a->a);
    float *dst = (float *)br_ptr(a->out);
    size_t n4 = br_aligned(8, src) && br_aligned(16, dst) ? a->n / 4 : 0;
    size_t items = n4 > a->n - 4 * n4 ? n4 : a->n - 4 * n4;
    f16_to_f32_kernel<<<br_cuda_blocks(ctx, items, THREADS), THREADS, 0, s->stream>>>(
        src, dst, (unsigned)a->n, (unsigned)n4);
    BR_CUDA_LAUNCHED(ctx, "f16_to_f32_kernel");
    return BR_OK;
}

/* ---------------------------------------------------------------- add */

/* out[i] = a[i] + b[i] for i < n (out may be a or b: each element is read before it
 * is written by the same thread); float4 per thread for i < 4·n4, then scalars. */
__global__ void add_kernel(const float *a, const float *b, float *out, unsigned n, unsigned n4) {
    BR_GRID_STRIDE(q, n4) {
        float4 x = reinterpret_cast<const float4 *>(a)[q];
        float4 y = reinterpret_cast<const float4 *>(b)[q];
        float4 v = make_float4(__fadd_rn(x.x, y.x), __fadd_rn(x.y, y.y), __fadd_rn(x.z, y.z),
                               __fadd_rn(x.w, y.w));
        reinterpret_cast<float4 *>(out)[q] = v;
    }
    BR_GRID_STRIDE(j, n - 4 * n4) {
        unsigned i = 4 * n4 + j;
        out[i] = __fadd_rn(a[i], b[i]);
    }
}

extern "C" br_status br_cuda_add(br_ctx *ctx, const br_op *op) {
    const br_unary_args *a = &op->u.unary;
    br_cuda *s = br_cuda_state(ctx);
    const float *x = (const float *)br_ptr(a->a), *y = (const float *)br_ptr(a->b);
    float *out = (float *)br_ptr(a->out);
    size_t n4 = br_aligned(16, x, y, out) ? a->n / 4 : 0;
    size_t items = n4 > a->n - 4 * n4 ? n4 : a->n - 4 * n4;
    add_kernel<<<br_cuda_blocks(ctx, items, THREADS), THREADS, 0, s->stream>>>(
        x, y, out, (unsigned)a->n, (unsigned)n4);
    BR_CUDA_LAUNCHED(ctx, "add_kernel");
    return BR_OK;
}

/* ---------------------------------------------------------------- split_qg */

/* qg [m][heads][2·hd] ↔ q, gate [m][heads·hd]. Element i of q (and gate) is
 * (g = i / hd, d = i % hd) with g = row·heads + head; its pair in qg is
 * qg[g·2hd + d] (q) and qg[g·2hd + hd + d] (gate). One thread per element of q,
 * or per float4 of q when hd % 4 == 0 (V = float4, hd and i counted in V). */
template <typename V, bool MERGE>
__global__ void split_qg_kernel(V *qg, V *q, V *gate, unsigned n, unsigned hd) {
    BR_GRID_STRIDE(i, n) {
        size_t g = i / hd, d = i % hd;
        size_t src = g * 2 * hd + d;
        if (MERGE) {
            qg[src] = q[i];
            qg[src + hd] = gate[i];
        } else {
            q[i] = qg[src];
            gate[i] = qg[src + hd];
        }
    }
}

template <typename V>
static br_status split_qg_launch(br_ctx *ctx, const br_split_qg_args *a, size_t width) {
    br_cuda *s = br_cuda_state(ctx);
    V *qg = (V *)br_ptr(a->qg), *q = (V *)br_ptr(a->q), *gate = (V *)br_ptr(a->gate);
    size_t n = a->m * a->heads * a->hd / width;
    unsigned hd = (unsigned)(a->hd / width), blocks = br_cuda_blocks(ctx, n, THREADS);
    if (a->merge)
        split_qg_kernel<V, true><<<blocks, THREADS, 0, s->stream>>>(qg, q, gate, (unsigned)n, hd);
    else
        split_qg_kernel<V, false><<<blocks, THREADS, 0, s->stream>>>(qg, q, gate, (unsigned)n, hd);
    BR_CUDA_LAUNCHED(ctx, "split_qg_kernel");
    return BR_OK;
}

extern "C" br_status br_cuda_split_qg(br_ctx *ctx, const br_op *op) {
    const br_split_qg_args *a = &op->u.split_qg;
    if (a->hd % 4 == 0 && br_aligned(16, br_ptr(a->qg), br_ptr(a->q), br_ptr(a->gate)))
        return split_qg_launch<float4>(ctx, a, 4);
    return split_qg_launch<float>(ctx, a, 1);
}
