/* The CUDA inference plan (br_blr_infer_cuda, include/bitrank.h): the checks, the
 * signs repacked on the host into the decode kernel's fragment order
 * (infer/blr_infer_cuda.h), their upload, and the choice of kernel per run. The
 * signs are held once: a prefill pass unpacks them into the bitmap GEMMs' layouts
 * in the context's workspace, which holds every run's scratch. The kernels and their launchers
 * are in src/backend/cuda/infer/ (decode.cu, prefill.cu).
 *
 * Which kernel: up to BR_IC_DECODE_MAX tokens the decode kernel (one launch); from
 * PREFILL_MIN tokens the prefill GEMMs; between, decode launches of 32 tokens each
 * (each launch reads the signs once: 5.6 MB at 11008 × 4096, 1 bpw, which the
 * GEMMs' fixed costs outweigh for a few dozen tokens). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "infer/blr_infer_cuda.h"
#include "io/blr_layout.h"

/* Fewest tokens that run the prefill GEMMs. */
#define PREFILL_MIN 65
/* Largest m, n or r a plan takes: the kernels index in 32 bits. */
#define MAX_DIM ((size_t)1 << 28)

struct br_blr_infer_cuda {
    br_ctx *ctx;
    size_t m, n, r, paths;
    br_buf *bits1, *bits2, *tfrag, *sync; /* decode */
    br_buf *scales; /* f32: h [P][m], l [P][r], then g [P][n] from a 16-byte offset */
    br_ic_dev dev;
    br_ic_pre pre;
    size_t bytes;
    const char *kernel;
};

size_t br_ic_bits1_words(const br_ic_dev *d) {
    return (size_t)d->paths * d->rt1 * d->ku1 * 128;
}
size_t br_ic_bits2_words(const br_ic_dev *d) {
    return (size_t)d->rt2 * d->paths * d->ku2 * 128;
}
size_t br_ic_tfrag_words(const br_ic_dev *d) {
    return (size_t)d->paths * d->ku2 * 16 * BR_IC_TT_MAX * 32 * 2;
}
size_t br_ic_res_count_word(const br_ic_dev *d, int bf16) {
    return ((size_t)d->paths * d->rt1 + 2 + 1) / 2 * 2 + 2 * (size_t)bf16;
}
size_t br_ic_sync_words(const br_ic_dev *d) { return br_ic_res_count_word(d, 1) + 2; }

size_t br_ic_prefill_layout(const br_ic_pre *p, size_t ntok, size_t at[6]) {
    const size_t P = (size_t)p->paths, words = (size_t)p->r32 / 32;
    const size_t bytes[6] = {P * p->n32 * words * 4, P * p->m * words * 4, P * ntok * p->n32 * 2,
                             ntok * p->r * 4, P * ntok * p->r32 * 2, ntok * p->m * 4};
    size_t off = 0;
    for (int i = 0; i < 6; i++) {
        at[i] = off;
        off += (bytes[i] + 255) / 256 * 256;
    }
    return off;
}

size_t br_ic_tc_bytes(const br_ic_dev *d) {
    const size_t bytes = (size_t)BR_IC_DECODE_MAX * d->paths * d->rt1 * 16 * 2;
    return (bytes + 255) / 256 * 256;
}

size_t br_ic_decode_bytes(const br_ic_dev *d) {
    size_t need = 0;
    for (int bf = 0; bf < 2; bf++)
        for (int tt = 1; tt <= BR_IC_TT_MAX; tt++) {
            const br_ic_launch *L = &d->launch[bf][tt - 1];
            const size_t f = (size_t)d->paths * d->rt1 * L->ks1 * tt * 128;
            if (L->ks1 > 1 && f * 4 > need) need = f * 4;
        }
    return br_ic_tc_bytes(d) + need;
}

void br_blr_infer_cuda_free(br_blr_infer_cuda *p) {
    if (!p) return;
    br_buf *bufs[] = {p->bits1, p->bits2, p->tfrag, p->sync, p->scales};
    /* freeing a buffer waits for the work issued before on the stream */
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        br_buf_free(bufs[i]);
    free(p);
}

size_t br_blr_infer_cuda_bytes(const br_blr_infer_cuda *p) { return p ? p->bytes : 0; }

const char *br_blr_infer_cuda_kernel(const br_blr_infer_cuda *p) {
    return p && p->kernel ? p->kernel : "none";
}

#ifdef BR_HAVE_CUDA
static size_t cdiv(size_t a, size_t b) { return (a + b - 1) / b; }

/* Sign (row, col) of a matrix given as a bitmap: 1 for +1. */
typedef struct sign_src {
    const uint32_t *bits;
    size_t words; /* u32 words a bitmap row */
    int transposed; /* 0: A[row][col] = bitmap row `row`, bit col; 1: bitmap row col, bit row */
    size_t rows, cols; /* A's extent: signs outside are +1 */
} sign_src;

static unsigned sign_bit(const sign_src *s, size_t row, size_t col) {
    if (row >= s->rows || col >= s->cols) return 1;
    size_t br = s->transposed ? col : row, bc = s->transposed ? row : col;
    return (s->bits[br * s->words + bc / 32] >> (bc % 32)) & 1u;
}

/* The packed A of row tile rt, unit u (infer/blr_infer_cuda.h): 128 words at out. */
static void pack_unit(const sign_src *s, size_t rt, size_t u, uint32_t *out) {
    for (unsigned lane = 0; lane < 32; lane++) {
        unsigned g = lane / 4, c = lane % 4;
        for (unsigned w = 0; w < 4; w++) {
            uint32_t word = 0;
            for (unsigned q = 0; q < 16; q++) {
                unsigned kk = 4 * w + q / 4, i = q % 4;
                size_t row = rt * 16 + g + 8 * (i % 2);
                size_t col = u * BR_IC_UNIT + 16 * kk + 2 * c + 8 * (i / 2);
                /* stored 1 = −1 */
                word |= (uint32_t)(sign_bit(s, row, col) ^ 1u) << (15 - q);
                word |= (uint32_t)(sign_bit(s, row, col + 1) ^ 1u) << (31 - q);
            }
            out[lane * 4 + w] = word;
        }
    }
}

static br_status new_buf(br_blr_infer_cuda *p, br_dtype t, size_t count, br_buf **out) {
    BR_TRY(br_buf_new(p->ctx, t, count ? count : 1, out));
    p->bytes += (count ? count : 1) * br_dtype_size(t);
    return BR_OK;
}

#endif

static br_status check_scales(br_ctx *ctx, const char *fn, size_t q, const char *what,
                              const float *v, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (!isfinite(v[i]))
            return br_fail(ctx, BR_E_NONFINITE, "%s: path %zu: %s[%zu] = %g is not finite", fn, q,
                           what, i, (double)v[i]);
    return BR_OK;
}

#ifdef BR_HAVE_CUDA
/* Everything of the plan that lives on the GPU, packed and uploaded. */
static br_status build(br_blr_infer_cuda *p, const br_blr_host *layer) {
    static const char *fn = "br_blr_infer_cuda_new";
    br_ctx *ctx = p->ctx;
    const size_t m = p->m, n = p->n, r = p->r, P = p->paths, words = cdiv(r, 32);
    br_ic_dev *d = &p->dev;
    *d = (br_ic_dev){.m = (int)m, .n = (int)n, .r = (int)r, .paths = (int)P};
    d->rt1 = (int)cdiv(r, BR_IC_TILE);
    d->ku1 = (int)cdiv(n, BR_IC_UNIT);
    d->rt2 = (int)cdiv(m, BR_IC_TILE);
    d->ku2 = (int)cdiv(r, BR_IC_UNIT);
    BR_TRY(br_ic_decode_setup(ctx, d));

    /* host staging: the larger of the packed arrays */
    size_t w1 = br_ic_bits1_words(d), w2 = br_ic_bits2_words(d);
    size_t n32 = cdiv(n, 32) * 32, r32 = words * 32;
    size_t big = w1 > w2 ? w1 : w2;
    uint32_t *host = malloc(big * sizeof *host);
    /* g at a 16-byte offset: the decode kernel reads it 16 bytes at a time */
    const size_t goff = (P * (m + r) + 3) / 4 * 4, nsc = goff + P * n;
    float *sc = calloc(nsc, sizeof *sc);
    if (!host || !sc) {
        free(host);
        free(sc);
        return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory for the packed signs", fn);
    }
    br_status st = BR_OK;
    /* phase 1: A = S_V,pᵀ (rows latent, cols inputs) */
    for (size_t q = 0; q < P; q++) {
        sign_src s = {layer->path[q].bits_v, words, 1, r, n};
        for (size_t rt = 0; rt < (size_t)d->rt1; rt++)
            for (size_t u = 0; u < (size_t)d->ku1; u++)
                pack_unit(&s, rt, u, host + ((q * d->rt1 + rt) * d->ku1 + u) * 128);
    }
    if ((st = new_buf(p, BR_U32, w1, &p->bits1)) != BR_OK ||
        (st = br_buf_upload(p->bits1, 0, host, w1)) != BR_OK)
        goto done;
    /* phase 2: A = S_U,p (rows outputs, cols latent), tiles [rt][p][u] */
    for (size_t rt = 0; rt < (size_t)d->rt2; rt++)
        for (size_t q = 0; q < P; q++) {
            sign_src s = {layer->path[q].bits_u, words, 0, m, r};
            for (size_t u = 0; u < (size_t)d->ku2; u++)
                pack_unit(&s, rt, u, host + ((rt * P + q) * d->ku2 + u) * 128);
        }
    if ((st = new_buf(p, BR_U32, w2, &p->bits2)) != BR_OK ||
        (st = br_buf_upload(p->bits2, 0, host, w2)) != BR_OK)
        goto done;
    /* scales */
    for (size_t q = 0; q < P; q++) {
        memcpy(sc + q * m, layer->path[q].h, m * sizeof *sc);
        memcpy(sc + P * m + q * r, layer->path[q].l, r * sizeof *sc);
        memcpy(sc + goff + q * n, layer->path[q].g, n * sizeof *sc);
    }
    if ((st = new_buf(p, BR_F32, nsc, &p->scales)) != BR_OK ||
        (st = br_buf_upload(p->scales, 0, sc, nsc)) != BR_OK)
        goto done;
    /* decode scratch: t's pads and the counters start (and stay) zero */
    if ((st = new_buf(p, BR_U32, br_ic_tfrag_words(d), &p->tfrag)) != BR_OK ||
        (st = br_buf_fill(p->tfrag, 0, br_ic_tfrag_words(d), 0)) != BR_OK ||
        (st = new_buf(p, BR_U32, br_ic_sync_words(d), &p->sync)) != BR_OK ||
        (st = br_buf_fill(p->sync, 0, br_ic_sync_words(d), 0)) != BR_OK)
        goto done;
    if ((st = br_ctx_sync(ctx)) != BR_OK) goto done;
    {
        const float *h = br_ptr(p->scales);
        d->bits1 = br_ptr(p->bits1);
        d->bits2 = br_ptr(p->bits2);
        d->h = h;
        d->l = h + P * m;
        d->g = h + goff;
        d->part1 = NULL; /* the workspace's, at each launch */
        d->tc = NULL;
        d->tfrag = br_ptr(p->tfrag);
        d->sync = br_ptr(p->sync);
        p->pre = (br_ic_pre){.m = (int)m,
                             .n = (int)n,
                             .r = (int)r,
                             .paths = (int)P,
                             .n32 = (int)n32,
                             .r32 = (int)r32,
                             .h = d->h,
                             .l = d->l,
                             .g = d->g};
    }
done:
    free(host);
    free(sc);
    return st;
}

#endif

br_status br_blr_infer_cuda_new(br_ctx *ctx, const br_blr_host *layer, br_blr_infer_cuda **out) {
    static const char *fn = "br_blr_infer_cuda_new";
    if (!out) return br_fail(ctx, BR_E_ARG, "%s: out is NULL", fn);
    *out = NULL;
    BR_TRY(br_check_ctx(ctx));
    if (strcmp(br_ctx_backend(ctx), "cuda") != 0)
        return br_fail(ctx, BR_E_UNSUPPORTED,
                       "%s: ctx is a %s context; the plan needs a CUDA context (br_blr_infer_new "
                       "runs on the CPU)",
                       fn, br_ctx_backend(ctx));
    BR_TRY(br_blr_check_layer(ctx, fn, layer));
    size_t m = layer->m, n = layer->n, r = layer->r, P = layer->paths;
    if (m > MAX_DIM || n > MAX_DIM || r > MAX_DIM)
        return br_fail(ctx, BR_E_OVERFLOW,
                       "%s: a layer of %zu × %zu, rank %zu, is too large (at most 2^28 each)", fn,
                       m, n, r);
    for (size_t q = 0; q < P; q++) {
        const br_blr_path_host *ph = &layer->path[q];
        BR_TRY(check_scales(ctx, fn, q, "h", ph->h, m));
        BR_TRY(check_scales(ctx, fn, q, "l", ph->l, r));
        BR_TRY(check_scales(ctx, fn, q, "g", ph->g, n));
    }
#ifdef BR_HAVE_CUDA
    br_blr_infer_cuda *p = calloc(1, sizeof *p);
    if (!p) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    p->ctx = ctx;
    p->m = m, p->n = n, p->r = r, p->paths = P;
    br_status st = build(p, layer);
    if (st != BR_OK) {
        br_blr_infer_cuda_free(p);
        return st;
    }
    *out = p;
    return BR_OK;
#else
    return br_fail(ctx, BR_E_UNSUPPORTED, "%s: this build has no CUDA backend", fn);
#endif
}

br_status br_blr_infer_cuda_run(br_blr_infer_cuda *p, br_act_type type, const void *x, size_t ntok,
                                const void *bias, void *y) {
    static const char *fn = "br_blr_infer_cuda_run";
    if (!p) return BR_E_ARG;
    if (type != BR_ACT_F16 && type != BR_ACT_BF16)
        return br_fail(p->ctx, BR_E_ARG, "%s: type %d is neither BR_ACT_F16 nor BR_ACT_BF16", fn,
                       (int)type);
    if (!x) return br_fail(p->ctx, BR_E_ARG, "%s: x is NULL", fn);
    if (!y) return br_fail(p->ctx, BR_E_ARG, "%s: y is NULL", fn);
    if (ntok == 0) return br_fail(p->ctx, BR_E_SHAPE, "%s: ntok = 0, expected ≥ 1", fn);
    if (((uintptr_t)x | (uintptr_t)y | (uintptr_t)bias) % 2 != 0)
        return br_fail(p->ctx, BR_E_ARG, "%s: x, bias and y must be 2-byte aligned", fn);
    size_t big = p->m > p->n ? p->m : p->n;
    if (ntok > ((size_t)1 << 40) / big)
        return br_fail(p->ctx, BR_E_OVERFLOW, "%s: ntok = %zu tokens of %zu values overflow", fn,
                       ntok, big);
    uintptr_t y0 = (uintptr_t)y, y1 = y0 + ntok * p->m * 2;
    uintptr_t x0 = (uintptr_t)x, x1 = x0 + ntok * p->n * 2;
    if (y0 < x1 && x0 < y1) return br_fail(p->ctx, BR_E_ARG, "%s: y overlaps x", fn);
    if (bias) {
        uintptr_t b0 = (uintptr_t)bias, b1 = b0 + p->m * 2;
        if (y0 < b1 && b0 < y1) return br_fail(p->ctx, BR_E_ARG, "%s: y overlaps bias", fn);
    }
#ifdef BR_HAVE_CUDA
    const uint16_t *xh = x;
    uint16_t *yh = y;
    if (ntok < PREFILL_MIN) {
        for (size_t t0 = 0; t0 < ntok; t0 += BR_IC_DECODE_MAX) {
            size_t nt = ntok - t0 < BR_IC_DECODE_MAX ? ntok - t0 : BR_IC_DECODE_MAX;
            BR_TRY(br_ic_decode(p->ctx, &p->dev, type, xh + t0 * p->n, nt, bias, yh + t0 * p->m,
                                &p->kernel));
        }
        return BR_OK;
    }
    /* passes of at most BR_IC_PREFILL_CHUNK tokens, each within 32-bit indexes */
    size_t widest = p->m > (size_t)p->pre.n32 ? p->m : (size_t)p->pre.n32;
    size_t chunk = ((size_t)1 << 31) / (p->paths * widest);
    if (chunk > BR_IC_PREFILL_CHUNK) chunk = BR_IC_PREFILL_CHUNK;
    for (size_t t0 = 0; t0 < ntok; t0 += chunk) {
        size_t nt = ntok - t0 < chunk ? ntok - t0 : chunk;
        BR_TRY(br_ic_prefill(p->ctx, &p->dev, &p->pre, type, xh + t0 * p->n, nt, bias,
                             yh + t0 * p->m));
    }
    p->kernel = "prefill";
    return BR_OK;
#else
    (void)bias;
    return br_fail(p->ctx, BR_E_UNSUPPORTED, "%s: this build has no CUDA backend", fn);
#endif
}
