/* bitrank — binary low-rank compression of LLM linear layers.
 *
 * The one public header. A context (br_ctx) owns a device — the CPU or one CUDA
 * GPU — and buffers on it (br_buf). Every op takes a context and buffers of that
 * context, checks its arguments, and either returns a status other than BR_OK with
 * a message (br_ctx_error) or enqueues the work on the context's stream. Ops run
 * in issue order; br_ctx_sync waits for them. Nothing here calls exit() or abort().
 *
 * Shapes are written [rows][cols], row-major. f16 values live in buffers as IEEE
 * binary16 bit patterns (uint16_t on the host). Sign bitmaps are u32 words, bit j of
 * word w of a row is column 32·w + j, bit 1 means +1 and bit 0 means −1.
 *
 * Numerics (R-NUM): f32→f16 rounds to nearest even and keeps subnormals; a sum of
 * products adds each term with one fused multiply-add in the stated order; where a
 * contract says "no contraction" each product is rounded before it is added. The
 * CPU and CUDA backends give the same bits wherever a contract says "bit-exact".
 */
#ifndef BITRANK_H
#define BITRANK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BITRANK_VERSION "0.1.0"

/* ---------------------------------------------------------------- status */

typedef enum br_status {
    BR_OK = 0,
    BR_E_ARG,         /* a NULL pointer or a value out of its range */
    BR_E_SHAPE,       /* shapes that break an op's constraint */
    BR_E_DTYPE,       /* a buffer of the wrong element type */
    BR_E_SIZE,        /* a buffer too small for the shapes given */
    BR_E_OVERFLOW,    /* sizes whose product does not fit */
    BR_E_NOMEM,       /* an allocation failed */
    BR_E_DEVICE,      /* the device or its runtime failed */
    BR_E_UNSUPPORTED, /* not available on this backend or device */
    BR_E_IO,          /* a file could not be read or written */
    BR_E_FORMAT,      /* a file's content is malformed */
    BR_E_NONFINITE,   /* NaN or Inf where finite values are required */
    BR_E_STATE,       /* a call out of order (e.g. ending a graph never begun) */
} br_status;

/* Short name of a status ("BR_E_SHAPE"). Never NULL. */
const char *br_status_name(br_status st);

/* ---------------------------------------------------------------- context */

typedef struct br_ctx br_ctx;

/* Open a context on `device`: "cpu", "cuda" (GPU 0), "cuda:N", or "auto" (the first
 * usable CUDA GPU, else the CPU). NULL means "auto". On failure *out is NULL and, if
 * `err` is given, a message is written there (at most err_len bytes, terminated). */
br_status br_ctx_new(const char *device, br_ctx **out, char *err, size_t err_len);
void br_ctx_free(br_ctx *ctx);

/* "cpu" or "cuda". */
const char *br_ctx_backend(const br_ctx *ctx);
/* Human description of the device, e.g. "cuda:0 NVIDIA H200 (sm_90, 139.8 GiB)". */
const char *br_ctx_device(const br_ctx *ctx);
/* Message of the last call on this context that failed ("" if none). The message
 * names the function, the argument and what was wrong. */
const char *br_ctx_error(const br_ctx *ctx);
/* Wait for every op issued so far; returns the first device error, if any. */
br_status br_ctx_sync(br_ctx *ctx);

/* Options of a context. */
typedef enum br_option {
    /* 1 (default): br_mm_bits runs the bitmap GEMM; 0: it expands the bitmap into
     * an f16 plane and runs br_mm (for checking, and for devices without the
     * bitmap kernels). Also set by the environment: BITRANK_MM_BITS=0. */
    BR_OPT_BITS_GEMM = 0,
    /* 1: the op profiler records per-op device time, launch, allocation and
     * upload counts (off by default; BITRANK_PROFILE=1 turns it on). */
    BR_OPT_PROFILE = 1,
    /* GEMM kernel family on CUDA: 0 auto (wgmma on sm_90a, mma.sync elsewhere),
     * 1 force mma.sync, 2 force wgmma (fails where the device has none). Also
     * BITRANK_GEMM=auto|mma|wgmma. Ignored by the CPU backend. */
    BR_OPT_GEMM_KERNEL = 2,
} br_option;
br_status br_ctx_set_option(br_ctx *ctx, br_option opt, int value);
int br_ctx_get_option(const br_ctx *ctx, br_option opt);

/* Devices this build can see, for `bitrank devices`. */
typedef struct br_device_info {
    char name[128];     /* "NVIDIA H200" */
    int index;          /* CUDA ordinal */
    int cc_major, cc_minor;
    size_t mem_total;   /* bytes */
    int sm_count;
} br_device_info;
/* Fills up to `max` entries and sets *count to the number of usable CUDA GPUs.
 * Returns BR_E_UNSUPPORTED (with a message in err) when this build has no CUDA
 * backend or no GPU is usable; *count is then 0. */
br_status br_cuda_devices(br_device_info *out, int max, int *count, char *err, size_t err_len);

/* ---------------------------------------------------------------- buffers */

typedef enum br_dtype { BR_F32 = 0, BR_F16 = 1, BR_U32 = 2 } br_dtype;

typedef struct br_buf br_buf;

/* A buffer of `count` elements on the context's device (contents undefined). */
br_status br_buf_new(br_ctx *ctx, br_dtype dtype, size_t count, br_buf **out);
/* A view of elements [offset, offset+count) of `parent` (same dtype and device);
 * it must not outlive its parent. Free it with br_buf_free. */
br_status br_buf_view(br_buf *parent, size_t offset, size_t count, br_buf **out);
void br_buf_free(br_buf *buf);
size_t br_buf_count(const br_buf *buf);
br_dtype br_buf_dtype(const br_buf *buf);
size_t br_dtype_size(br_dtype dtype);
const char *br_dtype_name(br_dtype dtype);

/* Copy `count` elements between host memory and elements [offset, offset+count) of
 * the buffer. Synchronous with respect to the ops issued before. */
br_status br_buf_upload(br_buf *buf, size_t offset, const void *src, size_t count);
br_status br_buf_download(const br_buf *buf, size_t offset, void *dst, size_t count);
/* Every element of [offset, offset+count) set to the 32-bit pattern `bits`
 * (its low 16 bits for f16): 0 zeroes, 0x7fc00000 poisons f32 with NaN. An op. */
br_status br_buf_fill(br_buf *buf, size_t offset, size_t count, uint32_t bits);
/* dst[dst_off + i] = src[src_off + i], same dtype. An op. */
br_status br_buf_copy(br_buf *dst, size_t dst_off, const br_buf *src, size_t src_off, size_t count);

/* ---------------------------------------------------------------- f16 */

/* IEEE binary16 conversion: round to nearest even, subnormals kept, NaN stays NaN. */
uint16_t br_half_from_float(float x);
float br_half_to_float(uint16_t h);

/* Rows an f16 activation operand is padded to (a multiple of 128) and the token
 * count a transposed operand is padded to (a multiple of 32). */
size_t br_pad_rows(size_t m);
size_t br_pad_tokens(size_t ntok);

/* ---------------------------------------------------------------- GEMM (R-MM) */

/* out[i][ocol + j] = oscale · Σ_k act[i][k] · plane[j][k]   for i < m, j < n.
 * act: f16 [≥ m][k]; plane f16 [n][k]; out f32 with row stride ldo (ldo = 0 means
 * n), only rows < m and columns ocol..ocol+n−1 written. f16 products, f32
 * accumulation. Constraints: m, n ≥ 1; k a multiple of 32; ldo ≥ ocol + n. */
typedef struct br_gemm {
    size_t m, n, k;
    size_t ldo;    /* output row stride in floats; 0 = n */
    size_t ocol;   /* first output column */
    float oscale;  /* output multiplier (0 is taken literally) */
} br_gemm;
br_status br_mm(br_ctx *ctx, const br_buf *act, const br_buf *plane, br_buf *out, br_gemm g);

/* Where the ±1 plane of br_mm_bits comes from. */
typedef enum br_bits_layout {
    /* bits u32 [n][k/32]: plane[j][kk] = bit kk%32 of word kk/32 of row j */
    BR_BITS_ROWS = 0,
    /* bits u32 [k][ceil(n/32)]: plane[j][kk] = bit j%32 of word j/32 of row kk
     * (the plane is the bitmap's transpose) */
    BR_BITS_COLS = 1,
} br_bits_layout;
/* br_mm with the plane given as a sign bitmap, expanded to ±1 inside the GEMM (no
 * f16 plane in memory). Results equal br_mm on the expanded plane within GEMM
 * tolerance. Same constraints as br_mm. */
br_status br_mm_bits(br_ctx *ctx, const br_buf *act, const br_buf *bits, br_bits_layout layout,
                     br_buf *out, br_gemm g);

/* ---------------------------------------------------------------- staging */

/* dst[row][col] = f16(src[row][col] · col_f[col] · scale) for row < m, computed in
 * f32 left to right (without col_f: f16(src · scale)); rows m..br_pad_rows(m)−1 are
 * zero. src f32 [m][k]; col_f f32 [k] or NULL; dst f16 [br_pad_rows(m)][k]. */
br_status br_cvt(br_ctx *ctx, const br_buf *src, const br_buf *col_f, br_buf *dst, size_t m,
                 size_t k, float scale);
/* br_cvt of one src into n_out (1..4) outputs from one read: dsts[i] gets the
 * value br_cvt would write with cols[i] (an entry may be NULL: no column factor). */
br_status br_cvt_multi(br_ctx *ctx, const br_buf *src, size_t n_out, const br_buf *const cols[],
                       br_buf *const dsts[], size_t m, size_t k, float scale);
/* A column block of a wider matrix: dst[row][c] = f16(src[row][col0 + c] · scale),
 * src f32 [m][ld_src], c < k, col0 + k ≤ ld_src; dst f16 [br_pad_rows(m)][k],
 * pad rows zero. */
br_status br_cvt_cols(br_ctx *ctx, const br_buf *src, size_t ld_src, size_t col0, br_buf *dst,
                      size_t m, size_t k, float scale);
/* Transposed staging: dst[row][t] = the value br_cvt(src, col_f, scale) stages at
 * [t][row], for t < ntok, row < k; zero where t ≥ ntok or row ≥ k. src f32
 * [ntok][k]; dst f16 [br_pad_rows(k)][br_pad_tokens(ntok)]. Bit-exact. */
br_status br_cvt_t(br_ctx *ctx, const br_buf *src, const br_buf *col_f, br_buf *dst, size_t ntok,
                   size_t k, float scale);
/* Sign bitmap u32 [rows][ceil(r/32)] → f16 ±1 plane [rows][r] and/or its
 * transpose plane_t [r][rows] (either may be NULL, not both). */
br_status br_expand(br_ctx *ctx, const br_buf *bits, size_t rows, size_t r, br_buf *plane,
                    br_buf *plane_t);

/* ---------------------------------------------------------------- column reductions */

/* The term a column reduction sums. */
typedef enum br_colsum_term {
    BR_TERM_AB = 0,  /* a[row][c] · b[row][c]            acc = fmaf(a, b, acc) */
    BR_TERM_ABF = 1, /* a[row][c] · b[row][c] · f[row]   ab = a·b; acc = fmaf(ab, f, acc) */
    BR_TERM_A = 2,   /* a[row][c]                        acc = acc + a */
} br_colsum_term;

/* out[c] (+)= Σ_row term(row, c) for c < k. Deterministic block order: rows are
 * split in blocks of B = max(64, ceil(rows/256)) rows; each block is summed in
 * row order from 0, then the block partials are summed in block order from 0, and
 * that total is stored (accumulate = 0) or added to out[c] (accumulate = 1).
 * a, b f32 [rows][k] (b ignored for BR_TERM_A); f f32 [rows] (BR_TERM_ABF only);
 * out f32 [k]. Bit-exact across backends. */
br_status br_colsum(br_ctx *ctx, const br_buf *a, const br_buf *b, const br_buf *f,
                    br_colsum_term term, br_buf *out, size_t rows, size_t k, int accumulate);

/* The elementwise op a fused column reduction does on an operand it reads anyway. */
typedef enum br_fuse_kind {
    BR_FUSE_CVT_A = 0,   /* dst = br_cvt(a, col, scale): f16 [br_pad_rows(rows)][k] */
    BR_FUSE_CVT_B = 1,   /* dst = br_cvt(b, col, scale): f16 [br_pad_rows(rows)][k] */
    BR_FUSE_SCALE_B = 2, /* dst (+)= b ⊙ col (br_scale_acc of b): f32 [rows][k] */
} br_fuse_kind;
typedef struct br_fuse {
    br_fuse_kind kind;
    const br_buf *col; /* f32 [k] */
    br_buf *dst;
    float scale;       /* CVT_A/CVT_B: the staging scale */
    int accumulate;    /* SCALE_B: 1 adds into dst, 0 overwrites */
    /* Optional transposed f16 operand for the sign-gradient GEMM,
     * [br_pad_rows(k)][br_pad_tokens(rows)], exactly what br_cvt_t would write:
     * CVT_A/CVT_B: br_cvt_t of the staged operand (same col and scale);
     * SCALE_B: br_cvt_t(a, col, t_scale). NULL: not written. */
    br_buf *dst_t;
    float t_scale;
} br_fuse;
/* sum[c] += Σ_row a[row][c]·b[row][c] (the BR_TERM_AB reduction, accumulating) and,
 * in the same pass, the elementwise op of `fuse`. Every output is bit-identical to
 * running br_colsum then the separate op (br_cvt / br_scale_acc / br_cvt_t). */
br_status br_colsum_fused(br_ctx *ctx, const br_buf *a, const br_buf *b, br_buf *sum, size_t rows,
                          size_t k, const br_fuse *fuse);

/* ---------------------------------------------------------------- elementwise */

/* out[row][c] = a[row][c] · col[c]  (accumulate: out += …). a, out f32 [m][k]. */
br_status br_scale_acc(br_ctx *ctx, const br_buf *a, const br_buf *col, br_buf *out, size_t m,
                       size_t k, int accumulate);
/* out = fl(fl(a0 · col0) + fl(a1 · col1)) per element, no contraction: bit-identical
 * to br_scale_acc(a0, col0, overwrite) then br_scale_acc(a1, col1, accumulate). */
br_status br_scale_acc2(br_ctx *ctx, const br_buf *a0, const br_buf *col0, const br_buf *a1,
                        const br_buf *col1, br_buf *out, size_t m, size_t k);
/* dst[i] = f32(src[i]) for i < n; src f16, dst f32. */
br_status br_f16_to_f32(br_ctx *ctx, const br_buf *src, br_buf *dst, size_t n);
/* out[i] = a[i] + b[i] for i < n (f32; out may alias a or b). */
br_status br_add(br_ctx *ctx, const br_buf *a, const br_buf *b, br_buf *out, size_t n);
/* Per-head [q(hd); gate(hd)] rows ↔ q and gate. qg f32 [m][heads][2·hd]; q, gate f32
 * [m][heads·hd]. merge = 0: q, gate ← qg; merge = 1: qg ← q, gate. */
br_status br_split_qg(br_ctx *ctx, br_buf *qg, br_buf *q, br_buf *gate, size_t m, size_t heads,
                      size_t hd, int merge);

/* ---------------------------------------------------------------- small dense f32 linear */

typedef enum br_dense_impl {
    BR_DENSE_AUTO = 0,  /* the backend picks (same bits either way) */
    BR_DENSE_PLAIN = 1, /* one output per thread */
    BR_DENSE_TILED = 2, /* tiled through shared memory; dense_fwd needs r ≤ 48 */
} br_dense_impl;
/* out[i][o] (+)= Σ_j a[i][j]·w[o][j], j = 0..k−1 in order, acc = fmaf(a, w, acc)
 * from 0; then stored or added (accumulate). a [m][k], w [r][k], out [m][r], f32.
 * Plain and tiled give the same bits. */
br_status br_dense_fwd(br_ctx *ctx, const br_buf *a, const br_buf *w, br_buf *out, size_t m,
                       size_t k, size_t r, int accumulate, br_dense_impl impl);
/* dx[i][j] += Σ_o dy[i][o]·w[o][j], o = 0..r−1 in order, acc = fmaf(dy, w, acc)
 * from 0, then dx += acc. dy [m][r], w [r][k], dx [m][k], f32. */
br_status br_dense_bwd(br_ctx *ctx, const br_buf *dy, const br_buf *w, br_buf *dx, size_t m,
                       size_t k, size_t r, br_dense_impl impl);

/* ---------------------------------------------------------------- optimizer ops */

/* Adam without weight decay, bias-corrected. For each i < n with mask[i] ≠ 0 (no
 * mask: all): g = grad[i]·grad_mul; m1 = β1·m1 + (1−β1)·g; m2 = β2·m2 + (1−β2)·g²;
 * st = lr · (m1/(1−β1^t)) / (sqrt(m2/(1−β2^t)) + eps); w −= st, or with a
 * relative floor ρ > 0: w −= st · max(|w|, ρ). Agrees across backends within
 * 1e-6 relative. */
typedef struct br_adam_hp {
    float lr, beta1, beta2, eps;
    uint32_t step;    /* t, 1-based */
    float grad_mul;   /* gradient multiplier (unscale, clip) */
    float rel_floor;  /* br_adam: ρ (0 = plain steps); br_adam_cat reads it per element */
    /* Optional f32 [4] device buffer {lr, t, grad_mul, skip} read when the op runs
     * instead of the three host values (so a replayed graph sees each step's
     * schedule); skip ≠ 0 makes the op do nothing (a refused step: weights and
     * moments unchanged). */
    const br_buf *sched;
} br_adam_hp;
/* w, grad, m1, m2 f32 [n]; mask f32 [n] or NULL (0 = frozen entry). */
br_status br_adam(br_ctx *ctx, br_buf *w, const br_buf *grad, br_buf *m1, br_buf *m2,
                  const br_buf *mask, size_t n, const br_adam_hp *hp);
/* br_adam over a concatenation of parameters in one launch: mask f32 [n] (0 =
 * frozen), rel_floor f32 [n] (per-element ρ, 0 = plain steps); hp->rel_floor unused. */
br_status br_adam_cat(br_ctx *ctx, br_buf *w, const br_buf *grad, br_buf *m1, br_buf *m2,
                      const br_buf *mask, const br_buf *rel_floor, size_t n, const br_adam_hp *hp);

/* Number of partial sums br_sumsq writes per parameter. */
#define BR_SUMSQ_PARTS 64
/* Partial sums of squares of a[0..n) into out f32 [BR_SUMSQ_PARTS]; their sum is
 * Σ a². NaN and Inf propagate into the partials (so a caller can refuse a step). */
br_status br_sumsq(br_ctx *ctx, const br_buf *a, size_t n, br_buf *out);
/* br_sumsq of np parameters of a concatenation: tab u32 [2·np] = (offset, length)
 * per parameter; out f32 [np][BR_SUMSQ_PARTS]. */
br_status br_sumsq_cat(br_ctx *ctx, const br_buf *a, const br_buf *tab, size_t np, br_buf *out);
/* Convenience: br_sumsq, wait, and sum the partials in double on the host. */
br_status br_sumsq_host(br_ctx *ctx, const br_buf *a, size_t n, double *out);

/* ---------------------------------------------------------------- composites */

/* A frozen dense linear: y[ntok][n] = (x · scale)·planeᵀ / scale, through the f16
 * staging buffer act16. plane f16 [n][k]; x f32 [ntok][k]; act16 f16
 * [br_pad_rows(ntok)][k]; y f32 [ntok][n]; k a multiple of 32. */
br_status br_plane_linear(br_ctx *ctx, const br_buf *plane, const br_buf *x, br_buf *act16,
                          br_buf *y, size_t ntok, size_t n, size_t k, float scale);
/* dw[m][k] = dy[ntok][m]ᵀ · x[ntok][k] (overwritten), the token axis as the GEMM's
 * K: xt f16 [br_pad_rows(k)][br_pad_tokens(ntok)] and dyt f16
 * [br_pad_rows(m)][br_pad_tokens(ntok)] are staging; dy is staged at gscale (a
 * power of two keeping gradients out of f16 subnormals) and divided back out. */
br_status br_weight_grad(br_ctx *ctx, const br_buf *x, const br_buf *dy, br_buf *xt, br_buf *dyt,
                         br_buf *dw, size_t ntok, size_t m, size_t k, float gscale);
/* acc[k][k] += xᵀ·x over x f32 [ntok][k] (the input Gram of a linear): xt f16
 * [br_pad_rows(k)][br_pad_tokens(ntok)] and tmp f32 [k][k] are scratch. */
br_status br_gram_acc(br_ctx *ctx, const br_buf *x, br_buf *xt, br_buf *acc, br_buf *tmp,
                      size_t ntok, size_t k);

/* ---------------------------------------------------------------- graphs */

/* Record ops instead of running them: between br_graph_begin and br_graph_end the
 * ops are checked and recorded (nothing runs, buffers are not touched). The
 * buffers an op names must outlive the graph. On CUDA a graph is replayed as a
 * CUDA graph; on the CPU its ops run in order. */
typedef struct br_graph br_graph;
br_status br_graph_begin(br_ctx *ctx);
br_status br_graph_end(br_ctx *ctx, br_graph **out);
br_status br_graph_launch(br_graph *graph);
size_t br_graph_op_count(const br_graph *graph);
void br_graph_free(br_graph *graph);

/* ---------------------------------------------------------------- profiler */

/* Ops issued from now on are attributed to `tag` (NULL or "" = untagged); the
 * string is copied. */
void br_ctx_set_tag(br_ctx *ctx, const char *tag);
/* Print the profile (per tag and op: calls, device time; launches, allocations,
 * uploads) to `out`. Waits for the device. */
br_status br_profile_report(br_ctx *ctx, FILE *out);
void br_profile_reset(br_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif /* BITRANK_H */
