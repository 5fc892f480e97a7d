/* Interop with a host that brings its own memory and stream (PyTorch through
 * ctypes): buffers over caller memory (br_buf_wrap) against the same ops on
 * allocated buffers, bit for bit; a CUDA context on the caller's stream, ordered
 * against the work the caller enqueues there; libbitrank.so loaded as a host would
 * load it; the struct sizes an FFI checks its mirrors against. */
#include <dlfcn.h>

#include "harness.h"

#ifdef BR_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static int t_is_cuda(br_ctx *ctx) { return strcmp(br_ctx_backend(ctx), "cuda") == 0; }

/* ---------------------------------------------------------------- caller memory
 * What a host owns: on a CPU context host memory of exactly `bytes` (16-byte
 * aligned, as a tensor's storage is; exact, so that a sanitizer build catches an
 * access past the count), on a CUDA context cudaMalloc'd memory. Transfers go
 * around the library, as the host's own copies would. */

static void *t_caller_new(br_ctx *ctx, size_t bytes) {
    void *p = NULL;
#ifdef BR_HAVE_CUDA
    if (t_is_cuda(ctx)) {
        if (cudaMalloc(&p, bytes) != cudaSuccess) {
            fprintf(stderr, "cudaMalloc of %zu bytes failed\n", bytes);
            exit(1);
        }
        return p;
    }
#endif
    (void)ctx;
    if (posix_memalign(&p, 16, bytes)) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* 0 on success: a CUDA free of memory the library had freed would fail */
static int t_caller_free(br_ctx *ctx, void *p) {
#ifdef BR_HAVE_CUDA
    if (t_is_cuda(ctx)) return cudaFree(p) != cudaSuccess;
#endif
    (void)ctx;
    free(p);
    return 0;
}

/* The host's synchronous copies; the device-wide sync also orders them against the
 * context's own (non-blocking) stream, which a plain cudaMemcpy would not. */
static void t_caller_put(br_ctx *ctx, void *dst, const void *src, size_t bytes) {
#ifdef BR_HAVE_CUDA
    if (t_is_cuda(ctx)) {
        if (cudaDeviceSynchronize() != cudaSuccess ||
            cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaDeviceSynchronize() != cudaSuccess) {
            fprintf(stderr, "cudaMemcpy to the device failed\n");
            exit(1);
        }
        return;
    }
#endif
    (void)ctx;
    memcpy(dst, src, bytes);
}

static void t_caller_get(br_ctx *ctx, void *dst, const void *src, size_t bytes) {
#ifdef BR_HAVE_CUDA
    if (t_is_cuda(ctx)) {
        if (cudaDeviceSynchronize() != cudaSuccess ||
            cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
            fprintf(stderr, "cudaMemcpy from the device failed\n");
            exit(1);
        }
        return;
    }
#endif
    (void)ctx;
    memcpy(dst, src, bytes);
}

/* Caller memory holding `bytes` of host data, and a buffer over it. */
static void *t_caller_from(br_ctx *ctx, const void *host, size_t bytes) {
    void *p = t_caller_new(ctx, bytes);
    t_caller_put(ctx, p, host, bytes);
    return p;
}

static br_buf *t_wrap(br_ctx *ctx, br_dtype dt, void *p, size_t n) {
    br_buf *b = NULL;
    br_status st = br_buf_wrap(ctx, dt, p, n, &b);
    if (st != BR_OK) {
        fprintf(stderr, "br_buf_wrap: %s: %s\n", br_status_name(st), br_ctx_error(ctx));
        exit(1);
    }
    return b;
}

/* Caller memory of n f32 NaN (the poison). */
static void *t_caller_poisoned(br_ctx *ctx, size_t n) {
    float *nan = t_xmalloc(n * sizeof *nan);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = T_NAN32;
        memcpy(&nan[i], &u, 4);
    }
    void *p = t_caller_from(ctx, nan, n * 4);
    free(nan);
    return p;
}

static uint16_t *t_rand_f16(br_rng *r, size_t n, float scale) {
    uint16_t *v = t_xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = br_half_from_float(br_rng_sym(r) * scale);
    return v;
}

static uint32_t *t_rand_bits(br_rng *r, size_t n) {
    uint32_t *v = t_xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (uint32_t)br_rng_u64(r);
    return v;
}

/* ---------------------------------------------------------------- br_buf_wrap */

/* br_add, br_mm and a BLR forward writing into wrapped outputs from wrapped inputs
 * give the bits they give on allocated buffers; the results are in the caller's
 * memory (no copy), and views of a wrapped buffer work. */
static void wrap_ops_match_allocated(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(1);
    for (int rep = 0; rep < 4; rep++) {
        /* br_add, against the host sum too (so both sides cannot be wrong alike) */
        size_t n = t_rand_size(&r, 1, 6000);
        float *a = t_rand(&r, n, 3.0f), *b = t_rand(&r, n, 3.0f);
        br_buf *A = t_buf_from(ctx, BR_F32, a, n), *B = t_buf_from(ctx, BR_F32, b, n);
        br_buf *O = t_buf_poison(ctx, BR_F32, n, T_NAN32);
        CHECK_OK(ctx, br_add(ctx, A, B, O, n));
        float *want = t_download_f32(ctx, O, n);
        void *pa = t_caller_from(ctx, a, n * 4), *pb = t_caller_from(ctx, b, n * 4);
        void *po = t_caller_poisoned(ctx, n);
        br_buf *WA = t_wrap(ctx, BR_F32, pa, n), *WB = t_wrap(ctx, BR_F32, pb, n);
        br_buf *WO = t_wrap(ctx, BR_F32, po, n);
        CHECK_OK(ctx, br_add(ctx, WA, WB, WO, n));
        CHECK_OK(ctx, br_ctx_sync(ctx));
        float *got = t_xmalloc(n * 4);
        t_caller_get(ctx, got, po, n * 4);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += want[i] != a[i] + b[i];
        CHECK(bad == 0, "br_add on allocated buffers: %zu of %zu sums wrong", bad, n);
        CHECK(t_bits_differ32(got, want, n) == 0,
              "br_add into a wrapped output: %zu of %zu differ from allocated (first %zu)",
              t_bits_differ32(got, want, n), n, t_first_diff32(got, want, n));

        /* a view of the wrapped buffers, from an element past the start */
        if (n > 2) {
            size_t off = t_rand_size(&r, 1, n - 1), cnt = n - off;
            br_buf *VA = NULL, *VO = NULL;
            CHECK_OK(ctx, br_buf_view(WA, off, cnt, &VA));
            CHECK_OK(ctx, br_buf_view(WO, off, cnt, &VO));
            CHECK_OK(ctx, br_buf_fill(WO, 0, n, T_NAN32));
            CHECK_OK(ctx, br_add(ctx, VA, VA, VO, cnt));
            float *v = t_download_f32(ctx, WO, n);
            size_t wrong = 0;
            for (size_t i = 0; i < n; i++) {
                float w = i < off ? NAN : a[i] + a[i];
                wrong += i < off ? !isnan(v[i]) : v[i] != w;
            }
            CHECK(wrong == 0, "br_add on views [%zu, %zu) of wrapped buffers: %zu wrong", off, n,
                  wrong);
            free(v);
            br_buf_free(VA);
            br_buf_free(VO);
        }
        br_buf_free(A), br_buf_free(B), br_buf_free(O);
        br_buf_free(WA), br_buf_free(WB), br_buf_free(WO);
        CHECK(!t_caller_free(ctx, pa) && !t_caller_free(ctx, pb) && !t_caller_free(ctx, po),
              "freeing the caller's memory failed");
        free(a), free(b), free(want), free(got);

        /* br_mm: act f16 [m][k], plane f16 [n][k], out f32 [m][nn] */
        size_t m = t_rand_size(&r, 1, 300), nn = t_rand_size(&r, 1, 160),
               k = 32 * t_rand_size(&r, 1, 8);
        uint16_t *act = t_rand_f16(&r, m * k, 1.0f), *plane = t_rand_f16(&r, nn * k, 1.0f);
        br_gemm g = {.m = m, .n = nn, .k = k, .oscale = 1.0f};
        br_buf *X = t_buf_from(ctx, BR_F16, act, m * k),
               *P = t_buf_from(ctx, BR_F16, plane, nn * k);
        br_buf *Y = t_buf_poison(ctx, BR_F32, m * nn, T_NAN32);
        CHECK_OK(ctx, br_mm(ctx, X, P, Y, g));
        float *ywant = t_download_f32(ctx, Y, m * nn);
        void *px = t_caller_from(ctx, act, m * k * 2), *pp = t_caller_from(ctx, plane, nn * k * 2);
        void *py = t_caller_poisoned(ctx, m * nn);
        br_buf *WX = t_wrap(ctx, BR_F16, px, m * k), *WP = t_wrap(ctx, BR_F16, pp, nn * k);
        br_buf *WY = t_wrap(ctx, BR_F32, py, m * nn);
        CHECK_OK(ctx, br_mm(ctx, WX, WP, WY, g));
        CHECK_OK(ctx, br_ctx_sync(ctx));
        float *ygot = t_xmalloc(m * nn * 4);
        t_caller_get(ctx, ygot, py, m * nn * 4);
        double *ref = t_xmalloc(m * nn * sizeof *ref);
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < nn; j++) {
                double s = 0;
                for (size_t kk = 0; kk < k; kk++)
                    s += t_f16_value(act[i * k + kk]) * t_f16_value(plane[j * k + kk]);
                ref[i * nn + j] = s;
            }
        double err = t_rel_err(ywant, ref, m * nn);
        CHECK(err < 1e-5, "br_mm [%zu][%zu]·[%zu][%zu]ᵀ: relative error %.3g", m, k, nn, k, err);
        CHECK(t_bits_differ32(ygot, ywant, m * nn) == 0,
              "br_mm [%zu][%zu][%zu] into a wrapped output: %zu of %zu differ from allocated", m,
              nn, k, t_bits_differ32(ygot, ywant, m * nn), m * nn);
        br_buf_free(X), br_buf_free(P), br_buf_free(Y);
        br_buf_free(WX), br_buf_free(WP), br_buf_free(WY);
        CHECK(!t_caller_free(ctx, px) && !t_caller_free(ctx, pp) && !t_caller_free(ctx, py),
              "freeing the caller's memory failed");
        free(act), free(plane), free(ywant), free(ygot), free(ref);
    }
    br_ctx_free(ctx);
}

/* A BLR layer's forward on a wrapped input into a wrapped output: the bits of the
 * same forward on allocated buffers. */
static void wrap_blr_forward_matches_allocated(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(2);
    for (int rep = 0; rep < 3; rep++) {
        size_t m = t_rand_size(&r, 1, 200), n = t_rand_size(&r, 1, 200),
               rk = 32 * t_rand_size(&r, 1, 3), paths = t_rand_size(&r, 1, 2),
               ntok = t_rand_size(&r, 1, 150);
        br_blr *l = NULL;
        CHECK_OK(ctx, br_blr_new(ctx, m, n, rk, paths, 0, &l));
        if (!l) break;
        for (size_t p = 0; p < paths; p++) {
            uint32_t *bu = t_rand_bits(&r, m * rk / 32), *bv = t_rand_bits(&r, n * rk / 32);
            float *h = t_rand(&r, m, 1.0f), *lv = t_rand(&r, rk, 1.0f), *gv = t_rand(&r, n, 1.0f);
            CHECK_OK(ctx, br_blr_set_path(l, p, bu, bv, h, lv, gv));
            free(bu), free(bv), free(h), free(lv), free(gv);
        }
        br_blr_scratch *s = NULL;
        CHECK_OK(ctx, br_blr_scratch_new(l, ntok, NULL, &s));
        float *x = t_rand(&r, ntok * n, 2.0f);
        br_buf *X = t_buf_from(ctx, BR_F32, x, ntok * n);
        br_buf *Y = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32);
        CHECK_OK(ctx, fwd_plain(l, s, X, Y, ntok));
        float *want = t_download_f32(ctx, Y, ntok * m);
        void *px = t_caller_from(ctx, x, ntok * n * 4), *py = t_caller_poisoned(ctx, ntok * m);
        br_buf *WX = t_wrap(ctx, BR_F32, px, ntok * n), *WY = t_wrap(ctx, BR_F32, py, ntok * m);
        CHECK_OK(ctx, fwd_plain(l, s, WX, WY, ntok));
        CHECK_OK(ctx, br_ctx_sync(ctx));
        float *got = t_xmalloc(ntok * m * 4);
        t_caller_get(ctx, got, py, ntok * m * 4);
        CHECK(t_count_written32(want, ntok * m) == ntok * m, "the forward left poison in y");
        CHECK(t_bits_differ32(got, want, ntok * m) == 0,
              "BLR forward m %zu n %zu r %zu paths %zu ntok %zu on wrapped buffers: %zu of %zu "
              "differ from allocated",
              m, n, rk, paths, ntok, t_bits_differ32(got, want, ntok * m), ntok * m);
        br_buf_free(WX), br_buf_free(WY), br_buf_free(X), br_buf_free(Y);
        CHECK(!t_caller_free(ctx, px) && !t_caller_free(ctx, py),
              "freeing the caller's memory failed");
        free(x), free(want), free(got);
        br_blr_scratch_free(s);
        br_blr_free(l);
    }
    br_ctx_free(ctx);
}

/* br_buf_free of a wrapped buffer (and of its views) frees the handle only: the
 * memory keeps what the library wrote, takes new writes, wraps again, and the
 * caller's own free of it succeeds. */
static void wrap_free_leaves_memory(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(3);
    size_t n = t_rand_size(&r, 1, 5000);
    void *p = t_caller_new(ctx, n * 4);
    br_buf *W = t_wrap(ctx, BR_F32, p, n), *V = NULL;
    CHECK_OK(ctx, br_buf_view(W, 0, n, &V));
    CHECK_OK(ctx, br_buf_fill(W, 0, n, 0x3fc00000u)); /* 1.5 */
    CHECK_OK(ctx, br_ctx_sync(ctx));
    br_buf_free(V);
    br_buf_free(W);
    float *v = t_xmalloc(n * 4);
    t_caller_get(ctx, v, p, n * 4);
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++)
        wrong += v[i] != 1.5f;
    CHECK(wrong == 0, "after br_buf_free the caller's memory lost %zu of %zu values", wrong, n);
    float *x = t_rand(&r, n, 1.0f);
    t_caller_put(ctx, p, x, n * 4);
    W = t_wrap(ctx, BR_F32, p, n);
    float *back = t_download_f32(ctx, W, n);
    CHECK(t_bits_differ32(back, x, n) == 0, "a second wrap reads %zu of %zu values wrong",
          t_bits_differ32(back, x, n), n);
    br_buf_free(W);
    CHECK(t_caller_free(ctx, p) == 0, "the caller's free failed: the library freed the memory");
    free(v), free(x), free(back);
    br_ctx_free(ctx);
}

/* Every bad argument is refused with a status and a message naming it; *out stays
 * NULL. */
static void wrap_refuses_bad_args(void) {
    br_ctx *ctx = t_ctx();
    void *p = t_caller_new(ctx, 64 * 4);
    br_buf *b = (br_buf *)&b;
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "ptr is NULL", br_buf_wrap(ctx, BR_F32, NULL, 4, &b));
    CHECK(b == NULL, "br_buf_wrap left *out set on failure");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "count is 0", br_buf_wrap(ctx, BR_F32, p, 0, &b));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "out is NULL", br_buf_wrap(ctx, BR_F32, p, 4, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "dtype", br_buf_wrap(ctx, (br_dtype)7, p, 4, &b));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "2^40",
                    br_buf_wrap(ctx, BR_F32, p, ((size_t)1 << 40) + 1, &b));
    CHECK(br_buf_wrap(NULL, BR_F32, p, 4, &b) == BR_E_ARG, "a NULL context was taken");
    for (size_t off = 2; off < 16; off += 2) { /* element-aligned for f16, not 16-aligned */
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "aligned to 16 bytes",
                        br_buf_wrap(ctx, BR_F16, (char *)p + off, 4, &b));
        CHECK(b == NULL, "br_buf_wrap left *out set on failure");
    }
    CHECK_OK(ctx, br_buf_wrap(ctx, BR_F16, (char *)p + 16, 4, &b));
    br_buf_free(b);
#ifdef BR_HAVE_CUDA
    if (t_is_cuda(ctx)) {
        /* host memory, pageable and pinned, is not the GPU's */
        float *host = NULL;
        if (posix_memalign((void **)&host, 64, 64 * 4) == 0) {
            CHECK_FAILS_MSG(ctx, BR_E_ARG, "host memory", br_buf_wrap(ctx, BR_F32, host, 64, &b));
            free(host);
        }
        void *pinned = NULL;
        if (cudaMallocHost(&pinned, 64 * 4) == cudaSuccess) {
            CHECK_FAILS_MSG(ctx, BR_E_ARG, "pinned", br_buf_wrap(ctx, BR_F32, pinned, 64, &b));
            cudaFreeHost(pinned);
        }
        /* managed memory of this GPU is usable */
        void *managed = NULL;
        if (cudaMallocManaged(&managed, 64 * 4, cudaMemAttachGlobal) == cudaSuccess) {
            CHECK_OK(ctx, br_buf_wrap(ctx, BR_F32, managed, 64, &b));
            CHECK_OK(ctx, br_buf_fill(b, 0, 64, 0x40000000u));
            CHECK_OK(ctx, br_ctx_sync(ctx));
            CHECK(((float *)managed)[63] == 2.0f, "fill of wrapped managed memory: %g",
                  ((float *)managed)[63]);
            br_buf_free(b);
            cudaFree(managed);
        }
        /* another GPU's memory */
        int ndev = 0;
        if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 1) {
            int cur = 0;
            cudaGetDevice(&cur);
            int other = strstr(br_ctx_device(ctx), "cuda:0") ? 1 : 0;
            void *q = NULL;
            if (cudaSetDevice(other) == cudaSuccess && cudaMalloc(&q, 256) == cudaSuccess) {
                CHECK_FAILS_MSG(ctx, BR_E_ARG,
                                "memory of cuda:", br_buf_wrap(ctx, BR_F32, q, 64, &b));
                cudaFree(q);
            }
            cudaSetDevice(cur);
        }
    }
#endif
    CHECK(t_caller_free(ctx, p) == 0, "freeing the caller's memory failed");
    br_ctx_free(ctx);
}

/* Overlap checks see through separate wraps of one memory (tensor views): a shifted
 * output is refused, the same address (in place) taken. */
static void wrap_overlap_by_address(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(4);
    const size_t n = 64;
    float *a = t_rand(&r, 2 * n, 1.0f), *b = t_rand(&r, n, 1.0f);
    char *p = t_caller_from(ctx, a, 2 * n * 4);
    void *pb = t_caller_from(ctx, b, n * 4);
    br_buf *W0 = t_wrap(ctx, BR_F32, p, n), *W0b = t_wrap(ctx, BR_F32, p, n);
    br_buf *W4 = t_wrap(ctx, BR_F32, p + 16, n), *WB = t_wrap(ctx, BR_F32, pb, n);
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "overlaps", br_add(ctx, W0, WB, W4, n));
    CHECK_OK(ctx, br_add(ctx, W0, WB, W0b, n)); /* in place, through another handle */
    float *v = t_download_f32(ctx, W0, n);
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++)
        wrong += v[i] != a[i] + b[i];
    CHECK(wrong == 0, "in-place br_add through two wraps: %zu of %zu wrong", wrong, n);
    /* br_mm's c: the out itself through another handle, or refused when shifted */
    br_buf *Act = t_buf_poison(ctx, BR_F16, 32, 0), *Pl = t_buf_poison(ctx, BR_F16, 32, 0);
    br_gemm g = {.m = 1, .n = 1, .k = 32, .oscale = 1.0f, .c = W0b, .beta = 1.0f};
    CHECK_OK(ctx, br_mm(ctx, Act, Pl, W0, g));
    g.c = W4;
    g.m = 8;
    g.n = 8;
    br_buf *Act8 = t_buf_poison(ctx, BR_F16, 8 * 32, 0),
           *Pl8 = t_buf_poison(ctx, BR_F16, 8 * 32, 0);
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "c overlaps out", br_mm(ctx, Act8, Pl8, W0, g));
    /* separate memory is apart */
    br_buf *Wfar = t_wrap(ctx, BR_F32, p + n * 4, n);
    CHECK_OK(ctx, br_add(ctx, W0, WB, Wfar, n));
    br_buf_free(W0), br_buf_free(W0b), br_buf_free(W4), br_buf_free(WB), br_buf_free(Wfar);
    br_buf_free(Act), br_buf_free(Pl), br_buf_free(Act8), br_buf_free(Pl8);
    CHECK_OK(ctx, br_ctx_sync(ctx));
    CHECK(!t_caller_free(ctx, p) && !t_caller_free(ctx, pb), "freeing the caller's memory failed");
    free(a), free(b), free(v);
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- streams */

/* A CPU context has no stream: set_stream is refused, use_own_stream is a no-op,
 * br_ctx_stream is NULL. */
static void stream_cpu_has_none(void) {
    br_ctx *ctx = t_ctx();
    if (!t_is_cuda(ctx)) {
        int dummy = 0;
        CHECK_FAILS_MSG(ctx, BR_E_UNSUPPORTED, "no streams", br_ctx_set_stream(ctx, &dummy));
        CHECK_FAILS_MSG(ctx, BR_E_UNSUPPORTED, "no streams", br_ctx_set_stream(ctx, NULL));
        CHECK_OK(ctx, br_ctx_use_own_stream(ctx));
        CHECK(br_ctx_stream(ctx) == NULL, "a CPU context names a stream");
    }
    CHECK(br_ctx_set_stream(NULL, NULL) == BR_E_ARG, "a NULL context was taken");
    CHECK(br_ctx_use_own_stream(NULL) == BR_E_ARG, "a NULL context was taken");
    CHECK(br_ctx_stream(NULL) == NULL, "a NULL context names a stream");
    /* refused while recording, on either backend */
    CHECK_OK(ctx, br_graph_begin(ctx));
    CHECK_FAILS(ctx, t_is_cuda(ctx) ? BR_E_STATE : BR_E_UNSUPPORTED, br_ctx_set_stream(ctx, NULL));
    if (t_is_cuda(ctx)) CHECK_FAILS_MSG(ctx, BR_E_STATE, "recorded", br_ctx_use_own_stream(ctx));
    br_graph *gr = NULL;
    CHECK_OK(ctx, br_graph_end(ctx, &gr));
    br_graph_free(gr);
    br_ctx_free(ctx);
}

#ifdef BR_HAVE_CUDA
#define T_CUDA_OK(call)                                                                            \
    do {                                                                                           \
        cudaError_t t_e_ = (call);                                                                 \
        CHECK(t_e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(t_e_));                     \
    } while (0)

/* Keeps `st` busy for a while (a few large memsets of scratch): work enqueued after
 * it that ran unordered would run first. */
static void t_busy(cudaStream_t st, void *scratch, size_t bytes) {
    for (int i = 0; i < 6; i++)
        T_CUDA_OK(cudaMemsetAsync(scratch, i, bytes, st));
}

static float t_bytes_f32(unsigned char byte) {
    uint32_t u = 0x01010101u * byte;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* How many of out[0..n) (caller memory, read on `st` after the work before it) are
 * not `want`, with no br_ctx_sync in between. */
static size_t t_wrong_on(cudaStream_t st, const void *out, size_t n, float want) {
    float *h = t_xmalloc(n * 4);
    T_CUDA_OK(cudaMemcpyAsync(h, out, n * 4, cudaMemcpyDeviceToHost, st));
    T_CUDA_OK(cudaStreamSynchronize(st));
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++)
        wrong += h[i] != want;
    free(h);
    return wrong;
}
#endif

/* A CUDA context on the caller's stream (made here, and the legacy stream): ops run
 * there after what the caller enqueued before, and the caller's later work on it
 * sees their results, without a br_ctx_sync in between; a switch orders the new
 * stream after the old; graphs record and replay on either; layer forwards and the
 * device SVD give the bits they give on the context's own stream. */
static void stream_follows_caller(void) {
#ifdef BR_HAVE_CUDA
    br_ctx *ctx = t_ctx();
    if (!t_is_cuda(ctx)) {
        br_ctx_free(ctx);
        return;
    }
    br_rng r = t_rng_for(5);
    const size_t n = (size_t)1 << 22, busy_bytes = (size_t)1 << 30;
    void *busy = NULL;
    T_CUDA_OK(cudaMalloc(&busy, busy_bytes));
    void *own = br_ctx_stream(ctx);
    CHECK(own != NULL, "a CUDA context names no stream of its own");
    cudaStream_t st = NULL;
    T_CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    char *pa = t_caller_new(ctx, n * 4), *pb = t_caller_new(ctx, n * 4),
         *po = t_caller_new(ctx, n * 4);
    T_CUDA_OK(cudaMemset(pa, 0, n * 4));
    T_CUDA_OK(cudaMemset(pb, 0, n * 4));
    T_CUDA_OK(cudaDeviceSynchronize());
    br_buf *WA = t_wrap(ctx, BR_F32, pa, n), *WB = t_wrap(ctx, BR_F32, pb, n),
           *WO = t_wrap(ctx, BR_F32, po, n);
    const float fa = t_bytes_f32(0x3f), fb = t_bytes_f32(0x40), fc = t_bytes_f32(0x3e);

    /* the caller's stream: caller memsets, then a library op, then the caller's read */
    CHECK_OK(ctx, br_ctx_set_stream(ctx, st));
    CHECK(br_ctx_stream(ctx) == (void *)st, "br_ctx_stream is %p, not the stream set %p",
          br_ctx_stream(ctx), (void *)st);
    CHECK_OK(ctx, br_buf_fill(WO, 0, n, T_NAN32));
    t_busy(st, busy, busy_bytes);
    T_CUDA_OK(cudaMemsetAsync(pa, 0x3f, n * 4, st));
    T_CUDA_OK(cudaMemsetAsync(pb, 0x40, n * 4, st));
    CHECK_OK(ctx, br_add(ctx, WA, WB, WO, n));
    size_t wrong = t_wrong_on(st, po, n, fa + fb);
    CHECK(wrong == 0, "br_add on the caller's stream: %zu of %zu not ordered after its memsets",
          wrong, n);

    /* a switch: the library's work on its own stream, then the caller's read on its
     * stream right after br_ctx_set_stream */
    CHECK_OK(ctx, br_ctx_use_own_stream(ctx));
    CHECK(br_ctx_stream(ctx) == own, "use_own_stream did not return to the own stream");
    br_buf *big = NULL;
    CHECK_OK(ctx, br_buf_new(ctx, BR_F32, busy_bytes / 4, &big));
    for (int i = 0; i < 6 && big; i++)
        CHECK_OK(ctx, br_buf_fill(big, 0, busy_bytes / 4, (uint32_t)i));
    CHECK_OK(ctx, br_buf_fill(WO, 0, n, 0x40200000u)); /* 2.5 */
    CHECK_OK(ctx, br_ctx_set_stream(ctx, st));
    wrong = t_wrong_on(st, po, n, 2.5f);
    CHECK(wrong == 0,
          "after set_stream the caller's stream read %zu of %zu before the own "
          "stream's fill",
          wrong, n);
    br_buf_free(big);

    /* a graph recorded while on the caller's stream replays there */
    br_graph *gr = NULL;
    CHECK_OK(ctx, br_graph_begin(ctx));
    CHECK_FAILS_MSG(ctx, BR_E_STATE, "recorded", br_ctx_set_stream(ctx, NULL));
    CHECK_OK(ctx, br_add(ctx, WA, WB, WO, n));
    CHECK_OK(ctx, br_graph_end(ctx, &gr));
    CHECK_OK(ctx, br_buf_fill(WO, 0, n, T_NAN32));
    t_busy(st, busy, busy_bytes);
    T_CUDA_OK(cudaMemsetAsync(pa, 0x3e, n * 4, st));
    CHECK_OK(ctx, br_graph_launch(gr));
    wrong = t_wrong_on(st, po, n, fc + fb);
    CHECK(wrong == 0, "a graph on the caller's stream: %zu of %zu wrong", wrong, n);

    /* the legacy default stream (PyTorch's default): ops and the same graph */
    CHECK_OK(ctx, br_ctx_set_stream(ctx, NULL));
    CHECK(br_ctx_stream(ctx) == NULL, "on the legacy stream br_ctx_stream is %p",
          br_ctx_stream(ctx));
    t_busy(0, busy, busy_bytes);
    T_CUDA_OK(cudaMemsetAsync(pa, 0x3f, n * 4, 0));
    CHECK_OK(ctx, br_graph_launch(gr));
    wrong = t_wrong_on(0, po, n, fa + fb);
    CHECK(wrong == 0, "a graph on the legacy stream: %zu of %zu wrong", wrong, n);
    br_graph_free(gr);
    gr = NULL;
    CHECK_OK(ctx, br_graph_begin(ctx)); /* recorded and captured while on the legacy stream */
    CHECK_OK(ctx, br_add(ctx, WA, WA, WO, n));
    CHECK_OK(ctx, br_graph_end(ctx, &gr));
    CHECK_OK(ctx, br_graph_launch(gr));
    wrong = t_wrong_on(0, po, n, fa + fa);
    CHECK(wrong == 0, "a graph captured on the legacy stream: %zu of %zu wrong", wrong, n);
    br_graph_free(gr);
    T_CUDA_OK(cudaMemsetAsync(pb, 0x3e, n * 4, 0));
    CHECK_OK(ctx, br_add(ctx, WA, WB, WO, n));
    wrong = t_wrong_on(0, po, n, fa + fc);
    CHECK(wrong == 0, "br_add on the legacy stream: %zu of %zu wrong", wrong, n);
    /* host transfers and br_ctx_sync on it */
    float *h = t_download_f32(ctx, WO, 16);
    CHECK(h[15] == fa + fc, "download on the legacy stream: %g", h[15]);
    free(h);
    CHECK_OK(ctx, br_ctx_sync(ctx));

    /* a layer's forward (the GEMMs) on each stream: the same bits */
    size_t m = 256, nin = 320, rk = 64, ntok = 200;
    br_blr *l = NULL;
    br_blr_scratch *s = NULL;
    CHECK_OK(ctx, br_blr_new(ctx, m, nin, rk, 2, 0, &l));
    for (size_t p = 0; p < 2 && l; p++) {
        uint32_t *bu = t_rand_bits(&r, m * rk / 32), *bv = t_rand_bits(&r, nin * rk / 32);
        float *hh = t_rand(&r, m, 1.0f), *lv = t_rand(&r, rk, 1.0f), *gv = t_rand(&r, nin, 1.0f);
        CHECK_OK(ctx, br_blr_set_path(l, p, bu, bv, hh, lv, gv));
        free(bu), free(bv), free(hh), free(lv), free(gv);
    }
    if (l) CHECK_OK(ctx, br_blr_scratch_new(l, ntok, NULL, &s));
    float *x = t_rand(&r, ntok * nin, 1.0f);
    br_buf *X = t_buf_from(ctx, BR_F32, x, ntok * nin);
    float *y[3] = {NULL, NULL, NULL};
    void *streams[3] = {NULL, st, NULL}; /* own (set below), caller's, legacy */
    for (int i = 0; i < 3 && s; i++) {
        if (i == 0)
            CHECK_OK(ctx, br_ctx_use_own_stream(ctx));
        else
            CHECK_OK(ctx, br_ctx_set_stream(ctx, streams[i]));
        br_buf *Y = t_buf_poison(ctx, BR_F32, ntok * m, T_NAN32);
        CHECK_OK(ctx, fwd_plain(l, s, X, Y, ntok));
        y[i] = t_download_f32(ctx, Y, ntok * m);
        br_buf_free(Y);
    }
    for (int i = 1; i < 3 && y[0]; i++)
        CHECK(t_bits_differ32(y[i], y[0], ntok * m) == 0,
              "the forward on stream %d: %zu of %zu differ from the own stream's", i,
              t_bits_differ32(y[i], y[0], ntok * m), ntok * m);
    CHECK(y[0] && t_count_written32(y[0], ntok * m) == ntok * m, "the forward left poison");
    for (int i = 0; i < 3; i++)
        free(y[i]);
    br_buf_free(X);
    free(x);
    br_blr_scratch_free(s);
    br_blr_free(l);

    /* the device SVD (cuBLAS and cuSOLVER handles) on the caller's stream */
    size_t wm = 96, wn = 64;
    float *w = t_rand(&r, wm * wn, 1.0f);
    br_compress_opts o;
    br_compress_opts_default(&o);
    o.steps = 0;
    o.rank = 32;
    o.paths = 1;
    br_blr_host init[2];
    memset(init, 0, sizeof init);
    for (int i = 0; i < 2; i++) {
        if (i == 0)
            CHECK_OK(ctx, br_ctx_use_own_stream(ctx));
        else
            CHECK_OK(ctx, br_ctx_set_stream(ctx, st));
        CHECK_OK(ctx, br_compress_matrix(ctx, "w", w, wm, wn, NULL, 0, NULL, &o, &init[i], NULL));
    }
    if (init[0].path[0].h && init[1].path[0].h) {
        CHECK(t_bits_differ32(init[0].path[0].h, init[1].path[0].h, wm) == 0 &&
                  t_bits_differ32(init[0].path[0].g, init[1].path[0].g, wn) == 0 &&
                  memcmp(init[0].path[0].bits_u, init[1].path[0].bits_u, wm * 4) == 0,
              "the initialization on the caller's stream differs from the own stream's");
    }
    br_blr_host_free(&init[0]);
    br_blr_host_free(&init[1]);
    free(w);

    CHECK_OK(ctx, br_ctx_use_own_stream(ctx));
    br_buf_free(WA), br_buf_free(WB), br_buf_free(WO);
    CHECK_OK(ctx, br_ctx_sync(ctx));
    CHECK(!t_caller_free(ctx, pa) && !t_caller_free(ctx, pb) && !t_caller_free(ctx, po),
          "freeing the caller's memory failed");
    T_CUDA_OK(cudaFree(busy));
    br_ctx_free(ctx);
    T_CUDA_OK(cudaStreamDestroy(st));
#endif
}

/* ---------------------------------------------------------------- libbitrank.so */

/* A symbol of the library as a function pointer (POSIX: the object pointer dlsym
 * returns converts to it). */
#define T_FN(type, var, lib, name)                                                                 \
    type var = NULL;                                                                               \
    do {                                                                                           \
        void *t_p_ = dlsym(lib, name);                                                             \
        CHECK(t_p_ != NULL, "libbitrank.so does not export %s", name);                             \
        memcpy(&var, &t_p_, sizeof var);                                                           \
    } while (0)

typedef size_t (*t_struct_size_fn)(const char *);
typedef br_status (*t_ctx_new_fn)(const char *, br_ctx **, char *, size_t);
typedef void (*t_ctx_free_fn)(br_ctx *);
typedef br_status (*t_wrap_fn)(br_ctx *, br_dtype, void *, size_t, br_buf **);
typedef void (*t_buf_free_fn)(br_buf *);
typedef br_status (*t_add_fn)(br_ctx *, const br_buf *, const br_buf *, br_buf *, size_t);
typedef br_status (*t_set_stream_fn)(br_ctx *, void *);
typedef const char *(*t_ctx_error_fn)(const br_ctx *);

/* The shared library loads alone, exports the API (and not the internals), and runs
 * an op on a wrapped host buffer through it. */
static void shared_library_loads(void) {
    void *lib = dlopen(BR_TEST_SHARED_LIB, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib != NULL, "dlopen(%s): %s", BR_TEST_SHARED_LIB, dlerror());
    if (!lib) return;
    T_FN(t_struct_size_fn, struct_size, lib, "br_struct_size");
    T_FN(t_ctx_new_fn, ctx_new, lib, "br_ctx_new");
    T_FN(t_ctx_free_fn, ctx_free, lib, "br_ctx_free");
    T_FN(t_wrap_fn, wrap, lib, "br_buf_wrap");
    T_FN(t_buf_free_fn, buf_free, lib, "br_buf_free");
    T_FN(t_add_fn, add, lib, "br_add");
    T_FN(t_set_stream_fn, set_stream, lib, "br_ctx_set_stream");
    T_FN(t_ctx_error_fn, ctx_error, lib, "br_ctx_error");
    const char *internal[] = {"br_fail", "br_check_buf", "br_bufs_overlap", "br_cpu_backend",
                              "br_submit"};
    for (size_t i = 0; i < sizeof internal / sizeof internal[0]; i++)
        CHECK(dlsym(lib, internal[i]) == NULL, "libbitrank.so exports the internal %s",
              internal[i]);
    if (struct_size && ctx_new && ctx_free && wrap && buf_free && add && set_stream && ctx_error) {
        CHECK(struct_size("br_opt_cfg") == sizeof(br_opt_cfg), "br_struct_size through the .so");
        br_ctx *c = NULL;
        char err[256] = "";
        CHECK(ctx_new("cpu", &c, err, sizeof err) == BR_OK, "br_ctx_new through the .so: %s", err);
        if (c) {
            br_rng r = t_rng_for(6);
            size_t n = t_rand_size(&r, 1, 1000);
            float *a = t_rand(&r, n, 1.0f), *b = t_rand(&r, n, 1.0f), *o = NULL;
            if (posix_memalign((void **)&o, 16, n * 4)) o = NULL;
            br_buf *A = NULL, *B = NULL, *O = NULL;
            CHECK(o && wrap(c, BR_F32, a, n, &A) == BR_OK && wrap(c, BR_F32, b, n, &B) == BR_OK &&
                      wrap(c, BR_F32, o, n, &O) == BR_OK,
                  "br_buf_wrap through the .so: %s", ctx_error(c));
            if (A && B && O) {
                for (size_t i = 0; i < n; i++)
                    o[i] = NAN;
                CHECK(add(c, A, B, O, n) == BR_OK, "br_add through the .so: %s", ctx_error(c));
                size_t wrong = 0;
                for (size_t i = 0; i < n; i++)
                    wrong += o[i] != a[i] + b[i];
                CHECK(wrong == 0, "br_add through the .so: %zu of %zu wrong", wrong, n);
            }
            CHECK(set_stream(c, NULL) == BR_E_UNSUPPORTED, "a CPU context took a stream");
            buf_free(A), buf_free(B), buf_free(O);
            ctx_free(c);
            free(a), free(b), free(o);
        }
    }
    dlclose(lib);
}

/* ---------------------------------------------------------------- struct sizes */

static void struct_sizes(void) {
    static const struct {
        const char *name;
        size_t size;
    } want[] = {
        {"br_compress_opts", sizeof(br_compress_opts)},
        {"br_layer_report", sizeof(br_layer_report)},
        {"br_blr_host", sizeof(br_blr_host)},
        {"br_blr_path_host", sizeof(br_blr_path_host)},
        {"br_token_err", sizeof(br_token_err)},
        {"br_step_info", sizeof(br_step_info)},
        {"br_opt_cfg", sizeof(br_opt_cfg)},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(br_struct_size(want[i].name) == want[i].size, "br_struct_size(\"%s\") = %zu, not %zu",
              want[i].name, br_struct_size(want[i].name), want[i].size);
    const char *unknown[] = {"", "br_ctx", "br_opt_cfg ", "BR_OPT_CFG", "br_gemm", "br_opt"};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        CHECK(br_struct_size(unknown[i]) == 0, "br_struct_size(\"%s\") = %zu, not 0", unknown[i],
              br_struct_size(unknown[i]));
    CHECK(br_struct_size(NULL) == 0, "br_struct_size(NULL) is not 0");
}

T_RUN("interop", T_CASE(wrap_ops_match_allocated), T_CASE(wrap_blr_forward_matches_allocated),
      T_CASE(wrap_free_leaves_memory), T_CASE(wrap_refuses_bad_args),
      T_CASE(wrap_overlap_by_address), T_CASE(stream_cpu_has_none), T_CASE(stream_follows_caller),
      T_CASE(shared_library_loads), T_CASE(struct_sizes))
