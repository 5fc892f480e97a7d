/* A stand-in for the library's CUDA inference plan (br_blr_infer_cuda_*), for
 * exercising the Python side (BLRLinear's CUDA plan path, CUDA graph capture,
 * pack_for_inference, bench/bench_generate.py) on a GPU before the real plan is in
 * the library. Same API and contract as the real one: a plan holds its own device
 * copy of the signs and scales, runs asynchronously on the context's current stream,
 * and allocates nothing once a run of at least that many tokens has happened. Its
 * kernels are plain reductions (one block per output), correct and slow: its speed
 * means nothing.
 *
 * Built as a shared library over libbitrank.so; ctypes finds the library's own
 * symbols through it (dlsym searches a library's dependencies):
 *
 *   nvcc -O2 -shared -Xcompiler -fPIC -Iinclude -gencode=arch=compute_90,code=sm_90 \
 *        dev/infer_cuda_standin.cu -o DIR/libstandin.so -LDIR -lbitrank \
 *        -Xlinker -rpath,'$ORIGIN'
 *   BITRANK_LIBRARY=DIR/libstandin.so python -m pytest python/tests -k cuda
 */
#include <bitrank.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
typedef struct br_blr_infer_cuda br_blr_infer_cuda;
typedef enum br_act_type { BR_ACT_F16 = 0, BR_ACT_BF16 = 1 } br_act_type;
__attribute__((visibility("default"))) br_status br_blr_infer_cuda_new(br_ctx *, const br_blr_host *, br_blr_infer_cuda **);
__attribute__((visibility("default"))) br_status br_blr_infer_cuda_run(br_blr_infer_cuda *, br_act_type, const void *, size_t, const void *, void *);
__attribute__((visibility("default"))) size_t br_blr_infer_cuda_bytes(const br_blr_infer_cuda *);
__attribute__((visibility("default"))) const char *br_blr_infer_cuda_kernel(const br_blr_infer_cuda *);
__attribute__((visibility("default"))) void br_blr_infer_cuda_free(br_blr_infer_cuda *);
}

struct br_blr_infer_cuda {
    br_ctx *ctx;
    size_t m, n, r, P, words;
    uint32_t *bu, *bv; /* [P][m|n][words] */
    float *h, *l, *g;  /* [P][m], [P][r], [P][n] */
    float *a;          /* [cap][P][r] */
    size_t cap, bytes;
    const char *kernel;
};

template <typename T> __device__ float ld(const T *p, size_t i);
template <> __device__ float ld<__half>(const __half *p, size_t i) { return __half2float(p[i]); }
template <> __device__ float ld<__nv_bfloat16>(const __nv_bfloat16 *p, size_t i) {
    return __bfloat162float(p[i]);
}
template <typename T> __device__ T st(float v);
template <> __device__ __half st<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __nv_bfloat16 st<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

__device__ float block_sum(float v) {
    __shared__ float part[32];
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (!lane) part[w] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.f;
    if (w == 0)
        for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v; /* in thread 0 */
}

/* a[t][p][k] = l[p][k] · Σ_j ±1(S_V[p][j][k]) · g[p][j] · x[t][j]; grid (r, P, ntok) */
template <typename T>
__global__ void k_a(const br_blr_infer_cuda p, const T *x, float *a) {
    size_t k = blockIdx.x, q = blockIdx.y, t = blockIdx.z;
    float s = 0.f;
    for (size_t j = threadIdx.x; j < p.n; j += blockDim.x) {
        uint32_t w = p.bv[(q * p.n + j) * p.words + k / 32];
        float z = p.g[q * p.n + j] * ld(x, t * p.n + j);
        s += (w >> (k % 32)) & 1u ? z : -z;
    }
    s = block_sum(s);
    if (!threadIdx.x) a[(t * p.P + q) * p.r + k] = p.l[q * p.r + k] * s;
}

/* y[t][i] = Σ_p h[p][i] · Σ_k ±1(S_U[p][i][k]) · a[t][p][k] (+ bias[i]); grid (m, ntok) */
template <typename T>
__global__ void k_y(const br_blr_infer_cuda p, const float *a, const T *bias, T *y) {
    size_t i = blockIdx.x, t = blockIdx.y;
    float s = 0.f;
    for (size_t e = threadIdx.x; e < p.P * p.r; e += blockDim.x) {
        size_t q = e / p.r, k = e % p.r;
        uint32_t w = p.bu[(q * p.m + i) * p.words + k / 32];
        float v = p.h[q * p.m + i] * a[(t * p.P + q) * p.r + k];
        s += (w >> (k % 32)) & 1u ? v : -v;
    }
    s = block_sum(s);
    if (!threadIdx.x) y[t * p.m + i] = st<T>(s + (bias ? ld(bias, i) : 0.f));
}

static br_status up(void **dst, const void *src, size_t bytes, size_t *total) {
    if (cudaMalloc(dst, bytes) != cudaSuccess) return BR_E_NOMEM;
    *total += bytes;
    return cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess ? BR_OK
                                                                              : BR_E_DEVICE;
}

br_status br_blr_infer_cuda_new(br_ctx *ctx, const br_blr_host *L, br_blr_infer_cuda **out) {
    if (!ctx || !L || !out || L->paths < 1 || L->paths > 2) return BR_E_ARG;
    br_blr_infer_cuda *p = (br_blr_infer_cuda *)calloc(1, sizeof *p);
    p->ctx = ctx, p->m = L->m, p->n = L->n, p->r = L->r, p->P = L->paths;
    p->words = (L->r + 31) / 32;
    p->kernel = "none";
    size_t P = p->P, m = p->m, n = p->n, r = p->r, W = p->words;
    uint32_t *bu = (uint32_t *)malloc(P * m * W * 4), *bv = (uint32_t *)malloc(P * n * W * 4);
    float *h = (float *)malloc(P * m * 4), *l = (float *)malloc(P * r * 4),
          *g = (float *)malloc(P * n * 4);
    for (size_t q = 0; q < P; q++) {
        memcpy(bu + q * m * W, L->path[q].bits_u, m * W * 4);
        memcpy(bv + q * n * W, L->path[q].bits_v, n * W * 4);
        memcpy(h + q * m, L->path[q].h, m * 4);
        memcpy(l + q * r, L->path[q].l, r * 4);
        memcpy(g + q * n, L->path[q].g, n * 4);
    }
    br_status s = up((void **)&p->bu, bu, P * m * W * 4, &p->bytes);
    if (!s) s = up((void **)&p->bv, bv, P * n * W * 4, &p->bytes);
    if (!s) s = up((void **)&p->h, h, P * m * 4, &p->bytes);
    if (!s) s = up((void **)&p->l, l, P * r * 4, &p->bytes);
    if (!s) s = up((void **)&p->g, g, P * n * 4, &p->bytes);
    free(bu), free(bv), free(h), free(l), free(g);
    if (s) {
        br_blr_infer_cuda_free(p);
        return s;
    }
    *out = p;
    return BR_OK;
}

br_status br_blr_infer_cuda_run(br_blr_infer_cuda *p, br_act_type type, const void *x,
                                size_t ntok, const void *bias, void *y) {
    if (!p || !x || !y || ntok < 1 || (type != BR_ACT_F16 && type != BR_ACT_BF16))
        return BR_E_ARG;
    if (ntok > p->cap) {
        if (p->a) cudaFree(p->a), p->bytes -= p->cap * p->P * p->r * 4;
        p->a = NULL, p->cap = 0;
        if (cudaMalloc((void **)&p->a, ntok * p->P * p->r * 4) != cudaSuccess) return BR_E_NOMEM;
        p->cap = ntok, p->bytes += ntok * p->P * p->r * 4;
    }
    cudaStream_t s = (cudaStream_t)br_ctx_stream(p->ctx);
    dim3 ga((unsigned)p->r, (unsigned)p->P, (unsigned)ntok), gy((unsigned)p->m, (unsigned)ntok);
    if (type == BR_ACT_F16) {
        k_a<__half><<<ga, 128, 0, s>>>(*p, (const __half *)x, p->a);
        k_y<__half><<<gy, 128, 0, s>>>(*p, p->a, (const __half *)bias, (__half *)y);
    } else {
        k_a<__nv_bfloat16><<<ga, 128, 0, s>>>(*p, (const __nv_bfloat16 *)x, p->a);
        k_y<__nv_bfloat16><<<gy, 128, 0, s>>>(*p, p->a, (const __nv_bfloat16 *)bias,
                                              (__nv_bfloat16 *)y);
    }
    p->kernel = ntok <= 8 ? "decode" : "prefill";
    return cudaGetLastError() == cudaSuccess ? BR_OK : BR_E_DEVICE;
}

size_t br_blr_infer_cuda_bytes(const br_blr_infer_cuda *p) { return p ? p->bytes : 0; }
const char *br_blr_infer_cuda_kernel(const br_blr_infer_cuda *p) { return p ? p->kernel : "none"; }

void br_blr_infer_cuda_free(br_blr_infer_cuda *p) {
    if (!p) return;
    cudaFree(p->bu), cudaFree(p->bv), cudaFree(p->h), cudaFree(p->l), cudaFree(p->g);
    cudaFree(p->a);
    free(p);
}
