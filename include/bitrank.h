/* bitrank — binary low-rank compression of LLM linear layers.
 *
 * The public header: contexts, buffers, the BLR layer with its backward and
 * optimizers, compression, files, graphs and the profiler. The op-level API the
 * layer is built from (GEMMs, staging, reductions, optimizer ops) is the lower
 * level in bitrank_ops.h. A context (br_ctx) owns a device — the CPU or one CUDA
 * GPU — and buffers on it (br_buf). Every op takes a context and buffers of that
 * context, checks its arguments, and either returns a status other than BR_OK with
 * a message (br_ctx_error) or enqueues the work on the context's stream. Ops run
 * in issue order; br_ctx_sync waits for them. Nothing here calls exit() or abort().
 *
 * Shapes are written [rows][cols], row-major. f16 values live in buffers as IEEE
 * binary16 bit patterns (uint16_t on the host). Sign bitmaps are u32 words, bit j of
 * word w of a row is column 32·w + j, bit 1 means +1 and bit 0 means −1.
 *
 * Numerics: f32→f16 rounds to nearest even and keeps subnormals; a sum of
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

/* Every declaration of this header and of bitrank_ops.h is the library's exported
 * API: libbitrank.so is built with hidden visibility, so only what is declared in
 * them leaves it. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
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

/* Open a context on `device`: "cpu", "cuda" (GPU 0), "cuda:N", "vulkan" (the most
 * capable Vulkan device: a discrete GPU before an integrated one, a software device
 * such as lavapipe last), "vulkan:N" (the loader's device N), or "auto" (the first
 * usable CUDA GPU, else a Vulkan GPU, never a software device, else the CPU). NULL
 * means "auto". A build without the backend asked for answers BR_E_UNSUPPORTED. On
 * failure *out is NULL and, if
 * `err` is given, a message is written there (at most err_len bytes, terminated). */
br_status br_ctx_new(const char *device, br_ctx **out, char *err, size_t err_len);
/* Free the context's buffers, graphs and the objects holding them (layers,
 * scratches, optimizers) first: they use the context when they are freed. */
void br_ctx_free(br_ctx *ctx);

/* "cpu", "cuda" or "vulkan". */
const char *br_ctx_backend(const br_ctx *ctx);
/* Human description of the device, e.g. "cuda:0 NVIDIA H200 (sm_90, 139.8 GiB)". */
const char *br_ctx_device(const br_ctx *ctx);
/* Message of the last call on this context that failed ("" if none). The message
 * names the function, the argument and what was wrong. */
const char *br_ctx_error(const br_ctx *ctx);
/* Forget the last message (br_ctx_error returns "" until the next failure). */
void br_ctx_clear_error(br_ctx *ctx);
/* Wait for every op issued so far; returns the first device error, if any. */
br_status br_ctx_sync(br_ctx *ctx);

/* Options of a context: its tuning and checking switches, as text of "key=value"
 * items separated by commas, e.g. "bits_gemm=0,gemm=mma". All items are applied or
 * none: an unknown key or a value the key does not take is BR_E_ARG with a message
 * naming it and what it accepts. The environment variable BITRANK_OPTIONS, in the
 * same form, is applied to every context br_ctx_new makes (a bad one makes
 * br_ctx_new fail). Every key is taken by every backend; the CPU backend has no
 * use for the GEMM and launch keys (README, "Options", says what each does):
 *   bits_gemm=1|0         0: br_mm_bits expands its bitmap, then runs br_mm
 *   profile=0|1           the op profiler (br_profile_report)
 *   gemm=auto|mma|wgmma   the CUDA GEMM family
 *   gemm_tile=auto|<tile>[/smem|/reg2|/reg4]   force a wgmma tile (and A source)
 *   gemm_splitk=auto|1..64                      force a split-K factor
 *   gemm_ctas=all|1..                           cap the persistent GEMM grid
 *   mm_stage16=1|0        0: br_mm_stage with an f16 c as GEMM + staging pass
 *   mm_tn=auto|copy       copy: br_mm_tn through transposed copies
 *   mm_tn2=1|0            0: br_mm_tn2 as two launches
 *   pdl=auto|off|all      programmatic dependent launches on Hopper
 *   expand_blocks=all|1.. cap the grid of the sign expansions
 *   vk_gemm=auto|tiled|coop|coop_emulated   the Vulkan GEMM shader (coop: cooperative
 *                         matrices, BR_E_UNSUPPORTED on a device without them)
 *   vk_coop_shape=auto|16x16x16|16x8x16|16x8x8|8x16x16|32x32x32   force its M×N×K */
br_status br_ctx_set_options(br_ctx *ctx, const char *spec);
/* The value of one key as text ("auto", "128x192/reg4", "1", ...) into buf. */
br_status br_ctx_option(const br_ctx *ctx, const char *key, char *buf, size_t len);
/* Every key with its value, "key=value,..." (truncated to len). */
br_status br_ctx_options(const br_ctx *ctx, char *buf, size_t len);
/* What ran for the last op run eagerly (not by a graph launch): the op's name
 * ("mm_bits", "expand", ...), or where the backend chose among kernels, the kernel
 * and its variant with the op in parentheses (CUDA: "wgmma 128x192/reg4 split 2
 * (mm_bits)", "mma (mm)", "update_n one launch"), so that a test that forces a
 * variant through the options can check that it ran. "" before any op. */
const char *br_ctx_last_kernel(const br_ctx *ctx);

/* Devices this build can see, for `bitrank devices`. */
typedef struct br_device_info {
    char name[128]; /* "NVIDIA H200" */
    int index;      /* CUDA ordinal */
    int cc_major, cc_minor;
    size_t mem_total; /* bytes */
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

/* ---------------------------------------------------------------- interop */

/* For hosts that bring their own memory and stream (e.g. PyTorch through ctypes). */

/* Alignment (bytes) br_buf_wrap requires of its pointer: what br_buf_new gives and
 * what the fast kernels need (16-byte vector loads and stores, TMA bases). */
#define BR_WRAP_ALIGN 16

/* A buffer of `count` elements of `dtype` at `ptr`, memory the caller owns: host
 * memory for a CPU context; device memory (or managed memory) of the context's GPU
 * for a CUDA context (checked with cudaPointerGetAttributes: host memory, pinned or
 * not, and another GPU's memory are BR_E_ARG). Nothing is copied and the buffer does
 * not own the memory: br_buf_free frees the handle only. The memory must hold count
 * elements and stay valid while the buffer, its views or a graph naming them are in
 * use, and until the ops issued on it have run (br_ctx_sync). Constraints: ptr not
 * NULL and a multiple of BR_WRAP_ALIGN bytes (BR_E_ARG otherwise); 1 ≤ count ≤ 2^40.
 * Views of it work and every op takes it as it takes a buffer of br_buf_new; overlap
 * checks compare addresses, so wrapped buffers over shared memory (two views of one
 * tensor) are checked against each other as views of one buffer are. */
br_status br_buf_wrap(br_ctx *ctx, br_dtype dtype, void *ptr, size_t count, br_buf **out);

/* Run the context on the caller's CUDA stream `cuda_stream` (a cudaStream_t; NULL is
 * CUDA's legacy default stream, PyTorch's default stream; torch gives the handle as
 * torch.cuda.current_stream().cuda_stream): from now on every op, transfer, graph
 * launch and br_ctx_sync of ctx is issued on it, in order after the work the caller
 * enqueued on it before, and after every op the context issued before the call (the
 * stream waits on an event of the previous stream). The caller keeps the stream
 * alive until the context is back on its own stream, on another one, or freed. The
 * stream must belong to the context's GPU (BR_E_ARG). Graphs are still captured on
 * the context's own stream (a capture on the legacy stream is not allowed by CUDA)
 * and launched on this one, so br_graph_begin/end/launch work on any stream. A CPU
 * context has no streams: BR_E_UNSUPPORTED. BR_E_STATE while recording a graph. */
br_status br_ctx_set_stream(br_ctx *ctx, void *cuda_stream);
/* Back to the context's own stream (ordered after the work issued so far, as
 * br_ctx_set_stream). No-op success on a CPU context; BR_E_STATE while recording. */
br_status br_ctx_use_own_stream(br_ctx *ctx);
/* The cudaStream_t the context's ops run on now (NULL for a CPU context, and for a
 * CUDA context set to the legacy default stream). */
void *br_ctx_stream(const br_ctx *ctx);

/* sizeof of a public struct an FFI mirrors, by its name: "br_compress_opts",
 * "br_layer_report", "br_blr_host", "br_blr_path_host", "br_token_err",
 * "br_step_info", "br_opt_cfg"; 0 for any other name (and NULL). */
size_t br_struct_size(const char *type_name);

/* ---------------------------------------------------------------- f16 */

/* IEEE binary16 conversion: round to nearest even, subnormals kept, NaN stays NaN. */
uint16_t br_half_from_float(float x);
float br_half_to_float(uint16_t h);

/* Rows an f16 activation operand is padded to (a multiple of 128) and the token
 * count a transposed operand is padded to (a multiple of 32). */
size_t br_pad_rows(size_t m);
size_t br_pad_tokens(size_t ntok);

/* ---------------------------------------------------------------- files: safetensors */

/* Reading and writing Hugging Face safetensors files, and the BLR output layout of
 * docs/FORMAT.md. Every function takes a context only to report errors: a failure
 * returns a status and leaves a message naming the file and the field in
 * br_ctx_error(ctx) (ctx may be NULL: the message is then dropped). Files are
 * untrusted: every size, offset and shape is checked against the file before it is
 * used. Multi-byte values in files are little-endian (this build assumes a
 * little-endian host). */

/* Element types of safetensors. Every one is recognized (its tensors can be listed
 * and copied as bytes); only F32, F16 and BF16 convert to f32. */
typedef enum br_st_dtype {
    BR_ST_UNKNOWN = 0, /* a dtype string this build does not know, kept by name */
    BR_ST_BOOL,
    BR_ST_U8,
    BR_ST_I8,
    BR_ST_F8_E5M2,
    BR_ST_F8_E4M3,
    BR_ST_F8_E8M0,
    BR_ST_I16,
    BR_ST_U16,
    BR_ST_F16,
    BR_ST_BF16,
    BR_ST_I32,
    BR_ST_U32,
    BR_ST_F32,
    BR_ST_I64,
    BR_ST_U64,
    BR_ST_F64,
    BR_ST_C64,
    BR_ST_F4,
    BR_ST_F6_E2M3,
    BR_ST_F6_E3M2,
} br_st_dtype;
/* The dtype's name in files ("BF16"); "unknown" for BR_ST_UNKNOWN. */
const char *br_st_dtype_name(br_st_dtype dtype);
/* Bits per element (4 for F4, 6 for F6_*, 16 for BF16); 0 for BR_ST_UNKNOWN. */
size_t br_st_dtype_bits(br_st_dtype dtype);

/* Most dimensions a tensor may have. */
#define BR_ST_MAX_DIMS 8

/* One tensor of an open file; owned by the file, valid until br_st_close. */
typedef struct br_st_tensor {
    const char *name;
    br_st_dtype dtype;
    const char *dtype_name; /* as written in the file (also for BR_ST_UNKNOWN) */
    size_t ndim;
    uint64_t shape[BR_ST_MAX_DIMS];
    uint64_t numel;   /* product of shape (1 for a scalar) */
    uint64_t nbytes;  /* bytes of data */
    const void *data; /* the mapped bytes (read-only) */
    const char *file; /* the file (shard) holding it */
} br_st_tensor;

/* A read-only safetensors checkpoint: one file, or the shards of a sharded one. */
typedef struct br_st_file br_st_file;

/* Open `path`: a .safetensors file (memory-mapped), a sharded checkpoint's index
 * (a path ending in ".json", e.g. model.safetensors.index.json: every shard of its
 * weight_map, resolved beside it, is opened), or a directory holding
 * model.safetensors.index.json or model.safetensors. Errors: BR_E_IO (cannot open
 * or map), BR_E_FORMAT (the header or index is malformed: its length, JSON, UTF-8,
 * a dtype/shape/offsets field, data_offsets past the end, overlapping or leaving
 * gaps, a size that is not shape·dtype, a duplicate name, a shard name leaving the
 * directory, a BLR layer whose tensors do not match its metadata). A tensor of an
 * unknown dtype is not an error here (only when converted). */
br_status br_st_open(br_ctx *ctx, const char *path, br_st_file **out);
void br_st_close(br_st_file *file);
/* The path given to br_st_open. */
const char *br_st_path(const br_st_file *file);
/* Tensors, in the order of the header(s); NULL when i is out of range. */
size_t br_st_count(const br_st_file *file);
const br_st_tensor *br_st_tensor_at(const br_st_file *file, size_t i);
/* The tensor named `name`, or NULL. */
const br_st_tensor *br_st_find(const br_st_file *file, const char *name);
/* __metadata__ entries (of every shard; the first shard that has a key wins):
 * br_st_meta returns the value of `key` or NULL; br_st_meta_at the i-th entry
 * (BR_E_ARG when i is out of range). */
const char *br_st_meta(const br_st_file *file, const char *key);
size_t br_st_meta_count(const br_st_file *file);
br_status br_st_meta_at(const br_st_file *file, size_t i, const char **key, const char **value);

/* dst[i] = element first + i of tensor t (of `file`) as f32, for i < count: F32
 * copied, F16 and BF16 widened exactly. BR_E_ARG for [first, first+count) outside
 * the tensor or t not of the file; BR_E_UNSUPPORTED for a dtype other than F32,
 * F16, BF16; BR_E_FORMAT for a dtype unknown to this build. */
br_status br_st_read_f32(br_ctx *ctx, const br_st_file *file, const br_st_tensor *t, size_t first,
                         size_t count, float *dst);

/* A safetensors file being written. The output appears at `path` only when
 * br_st_writer_finish succeeds: the data go to a temporary file in the same
 * directory, which is flushed to disk (fsync) and then renamed over `path`; on any
 * failure, or br_st_writer_free without a finish, the temporary file is removed and
 * an existing file at `path` is left as it was. */
typedef struct br_st_writer br_st_writer;

/* Start a file at `path`; the temporary file is created now, so an unwritable
 * location fails here with BR_E_IO and a message naming it. */
br_status br_st_writer_new(br_ctx *ctx, const char *path, br_st_writer **out);
/* Set a __metadata__ entry (UTF-8 strings, copied; a key set twice keeps the last
 * value). When the file holds BLR layers, finish sets "format" = "bitrank-blr",
 * "format_version" = "1" and "writer" = "bitrank VERSION", replacing values given
 * here. */
br_status br_st_writer_meta(br_st_writer *w, const char *key, const char *value);
/* Add a tensor: name (copied; unique, not "__metadata__"), a known dtype, ndim ≤
 * BR_ST_MAX_DIMS dimensions, and its numel·bits/8 bytes at `data`, which are NOT
 * copied: they must stay valid until br_st_writer_finish (a tensor of an open
 * br_st_file may be passed straight through: t->name, t->dtype, t->ndim, t->shape,
 * t->data). Tensors are stored in the order added. */
br_status br_st_writer_add(br_st_writer *w, const char *name, br_st_dtype dtype, size_t ndim,
                           const uint64_t *shape, const void *data);
/* Write the header and the data, fsync, close and rename into place. BR_E_IO (with
 * the system's reason) if a write, fsync, close or rename fails, e.g. a full disk;
 * BR_E_OVERFLOW if the header would exceed what readers accept (100 MB). On failure
 * the temporary file is removed and an existing file at `path` is left untouched. */
br_status br_st_writer_finish(br_st_writer *w);
void br_st_writer_free(br_st_writer *w);

/* ---- the BLR layout (docs/FORMAT.md) */

#define BR_BLR_MAX_PATHS 2

/* One path of a BLR linear on the host, as the library stores it: sign bitmaps of
 * ceil(r/32) u32 words per row (bit k%32 of word k/32 is sign k; 1 = +1) and f32
 * scales. */
typedef struct br_blr_path_host {
    uint32_t *bits_u; /* S_U [m][ceil(r/32)] */
    uint32_t *bits_v; /* S_V [n][ceil(r/32)] */
    float *h;         /* [m] output scales */
    float *l;         /* [r] latent scales (ℓ) */
    float *g;         /* [n] input scales */
} br_blr_path_host;

/* A BLR linear W [m][n] ≈ Σ_p diag(h_p)·S_U,p·diag(ℓ_p)·S_V,pᵀ·diag(g_p). */
typedef struct br_blr_host {
    size_t m, n, r; /* outputs, inputs, rank */
    size_t paths;   /* 1..BR_BLR_MAX_PATHS */
    br_blr_path_host path[BR_BLR_MAX_PATHS];
} br_blr_host;

/* Bits per weight of a layer with 16-bit scales:
 * paths·(r·(m+n) + 16·(m+n+r)) / (m·n); 0 if m or n is 0. */
double br_blr_bpw(size_t m, size_t n, size_t r, size_t paths);
/* Allocate every array of *layer (zero-filled) for the shapes given; free with
 * br_blr_host_free. */
br_status br_blr_host_alloc(br_ctx *ctx, br_blr_host *layer, size_t m, size_t n, size_t r,
                            size_t paths);
/* Free arrays allocated by br_blr_host_alloc / br_st_read_blr / br_blr_cortiq_decode
 * and zero *layer. */
void br_blr_host_free(br_blr_host *layer);
/* Ŵ [m][n] of the layer into w (f32, row-major), each entry summed in double:
 * a reference for tests and tools, O(paths·m·n·r) on the host. */
br_status br_blr_reconstruct(br_ctx *ctx, const br_blr_host *layer, float *w);

/* Add a compressed linear NAME to the file: tensors NAME.blr.u, .v (U8 sign bytes),
 * .h, .l, .g (F16, rounded to nearest even) and the metadata entry "NAME.blr"; marks
 * the file as format "bitrank-blr". The data are converted and copied now (the
 * layer need not outlive the call). BR_E_NONFINITE if a scale is not finite or
 * does not fit f16. */
br_status br_st_writer_add_blr(br_st_writer *w, const char *name, const br_blr_host *layer);

/* A compressed linear found in a file of format "bitrank-blr". */
typedef struct br_blr_info {
    const char *name; /* NAME */
    size_t m, n, r, paths;
    double bpw;      /* br_blr_bpw of the shapes */
    uint64_t nbytes; /* bytes of its tensors in the file */
    int cortiq;      /* 1: stored as a cortiq payload (tensor NAME.blr.cortiq) */
} br_blr_info;
/* The compressed linears of a file (validated by br_st_open); NULL when out of range. */
size_t br_st_blr_count(const br_st_file *file);
const br_blr_info *br_st_blr_at(const br_st_file *file, size_t i);
/* Read compressed linear `name` (either form) into *out, allocating its arrays
 * (free with br_blr_host_free). BR_E_ARG if the file has no such layer. */
br_status br_st_read_blr(br_ctx *ctx, const br_st_file *file, const char *name, br_blr_host *out);

/* ---- the cortiq `blr` payload (docs/FORMAT.md): one layer as the byte string
 * cortiq runtimes read: a 16-byte header (0x4C, version 1, paths, 0, then r, m, n
 * as u32), then per path h | g | ℓ (f16), S_U as m rows of r/8 bytes and S_V
 * transposed, r rows of n/8 bytes (bit k%8 of a byte; 1 = +1). Needs r and n
 * multiples of 8 (else BR_E_UNSUPPORTED) and r, m, n < 2^32. */

/* Encode into dst (capacity `cap` bytes); *size receives the payload's size. With
 * dst NULL only *size is set. BR_E_SIZE if cap is too small. */
br_status br_blr_cortiq_encode(br_ctx *ctx, const br_blr_host *layer, void *dst, size_t cap,
                               size_t *size);
/* Decode a payload of exactly `len` bytes (untrusted) into *out (allocated; free
 * with br_blr_host_free). BR_E_FORMAT names the first field that is wrong. */
br_status br_blr_cortiq_decode(br_ctx *ctx, const void *src, size_t len, br_blr_host *out);
/* Add a compressed linear as one U8 tensor NAME.blr.cortiq holding its payload
 * (copied now); marks the file as format "bitrank-blr". */
br_status br_st_writer_add_cortiq(br_st_writer *w, const char *name, const br_blr_host *layer);

/* ---------------------------------------------------------------- the BLR layer */

/* A binary low-rank linear of m outputs and n inputs:
 *     y[t] = Ŵ · x[t],   Ŵ = Σ_p diag(h_p) · S_U,p · diag(ℓ_p) · S_V,pᵀ · diag(g_p)
 * with P ≥ 1 paths of rank r (a multiple of 32), sign bitmaps S_U u32 [m][r/32] and
 * S_V u32 [n][r/32] (bit k%32 of word k/32 of a row is sign k, 1 = +1) and f32 scales
 * h [m], ℓ [r], g [n]. Any m, n ≥ 1: where a GEMM needs a multiple of 32 the layer
 * pads internally (zero operands), never reading past a buffer.
 *
 * The layer owns its parameters and their gradients: dh, dℓ, dg, and with
 * BR_BLR_SIGN_GRADS the sign gradients G_U [m][r], G_V [n][r] (∂L/∂S taken as real),
 * with BR_BLR_CURVATURE the sums Σ_t a[t][k]² per path and Σ_t x[t][j]²
 * that the exact-flip predictions need. Transient buffers live in a br_blr_scratch.
 * Every function here only issues ops (or records them into a graph), except the
 * host transfers br_blr_set_path / br_blr_get_path. */
typedef struct br_blr br_blr;

#define BR_BLR_SIGN_GRADS 1u /* backward also forms G_U, G_V of every path */
#define BR_BLR_CURVATURE 2u  /* backward also sums Σ_t a², Σ_t x² (implies SIGN_GRADS) */

/* A layer on ctx: every sign +1, every scale and gradient 0 (Ŵ = 0). r a multiple
 * of 32; m, n, r, paths ≥ 1; flags a combination of BR_BLR_*. */
br_status br_blr_new(br_ctx *ctx, size_t m, size_t n, size_t r, size_t paths, unsigned flags,
                     br_blr **out);
/* Frees the layer; free its scratches and optimizer first. */
void br_blr_free(br_blr *layer);
/* Shape of a layer (any pointer may be NULL). */
void br_blr_shape(const br_blr *layer, size_t *m, size_t *n, size_t *r, size_t *paths);
br_ctx *br_blr_ctx(const br_blr *layer);

/* Host transfers of path `path`'s factors: bits_u u32 [m][r/32], bits_v u32
 * [n][r/32], h f32 [m], l f32 [r], g f32 [n]. A NULL pointer skips that factor.
 * Synchronous (like br_buf_upload). After changing bits of a layer trained by a
 * br_blr_opt, re-initialize its latents (br_blr_opt_init_latent). */
br_status br_blr_set_path(br_blr *layer, size_t path, const uint32_t *bits_u,
                          const uint32_t *bits_v, const float *h, const float *l, const float *g);
br_status br_blr_get_path(const br_blr *layer, size_t path, uint32_t *bits_u, uint32_t *bits_v,
                          float *h, float *l, float *g);
/* The same for every path through the io layout's br_blr_host (shapes must match;
 * paths ≤ BR_BLR_MAX_PATHS). br_blr_from_host creates the layer. */
br_status br_blr_from_host(br_ctx *ctx, const br_blr_host *host, unsigned flags, br_blr **out);
br_status br_blr_to_host(const br_blr *layer, br_blr_host *host);

/* Parts of a layer, as device buffers (views the layer owns). */
typedef enum br_blr_part {
    BR_BLR_H = 0,       /* f32 [m] */
    BR_BLR_L = 1,       /* f32 [r] (ℓ) */
    BR_BLR_G = 2,       /* f32 [n] */
    BR_BLR_DH = 3,      /* f32 [m]  gradient of h */
    BR_BLR_DL = 4,      /* f32 [r]  gradient of ℓ */
    BR_BLR_DG = 5,      /* f32 [n]  gradient of g */
    BR_BLR_BITS_U = 6,  /* u32 [m][r/32] */
    BR_BLR_BITS_V = 7,  /* u32 [n][r/32] */
    BR_BLR_GU = 8,      /* f32 [m][r]  G_U (BR_BLR_SIGN_GRADS) */
    BR_BLR_GV = 9,      /* f32 [n][r]  G_V (BR_BLR_SIGN_GRADS) */
    BR_BLR_SUM_A2 = 10, /* f32 [r]  Σ_t a[t][k]² of this path (BR_BLR_CURVATURE) */
    BR_BLR_SUM_X2 = 11, /* f32 [n]  Σ_t x[t][j]², shared by the paths (BR_BLR_CURVATURE) */
} br_blr_part;
/* NULL when the layer has no such part or path. Ops and uploads on it change the
 * layer; it lives as long as the layer. Handing out G_U or G_V (BR_BLR_GU, BR_BLR_GV)
 * makes the optimizer's steps measure them in full from then on (see
 * br_blr_opt_step). */
br_buf *br_blr_buf(br_blr *layer, size_t path, br_blr_part part);

/* Every gradient and curvature sum to zero. An op. */
br_status br_blr_zero_grad(br_blr *layer);

/* Transient buffers of the layer ops, shareable by every layer that runs one op at
 * a time: the f16 staging of dy, the expanded sign planes (W_V, W_U and X_V in one,
 * the forward's Y_U in a second), B' and B, M_U / N_V. Sized for up to
 * `ntok` tokens and layers of at most m outputs, n inputs and total rank paths·r
 * (a layer of P paths of rank r' fits when P·r' ≤ paths·r). */
typedef struct br_blr_shared br_blr_shared;
br_status br_blr_shared_new(br_ctx *ctx, size_t ntok, size_t m, size_t n, size_t r, size_t paths,
                            br_blr_shared **out);
void br_blr_shared_free(br_blr_shared *shared);

/* A layer's scratch for up to `ntok` tokens: what a forward keeps for the backward —
 * A = [a_1|…|a_P] f32 [ntok][P·r], A'ᵀ = f16(A⊙ℓ)ᵀ and, for br_blr_forward, its own
 * f16(x)ᵀ (f16 [br_pad_rows(n)][br_pad_tokens(ntok)]) — and the transients of `shared`
 * (NULL: its own; a shared set must fit the layer's shape and outlive the scratch).
 * The product c = A'·S_Uᵀ is not kept (the backward never needs it): P·ntok·m f32
 * fewer than a scratch of earlier versions held. Use a scratch with the layer it was
 * made for. */
typedef struct br_blr_scratch br_blr_scratch;
br_status br_blr_scratch_new(const br_blr *layer, size_t ntok, br_blr_shared *shared,
                             br_blr_scratch **out);
void br_blr_scratch_free(br_blr_scratch *scratch);

/* What one forward computes. Fields left zero give the plain forward of x into out. */
typedef struct br_blr_fwd {
    /* The input: x f32 [ntok][n], or x16, x staged by br_blr_stage (exactly one). */
    const br_buf *x;
    const br_buf *x16;
    /* NULL: out = y. Else the residual out = alpha·(y − target), target f32 [ntok][m]
     * (f16 too where gscale > 0), out being target itself or apart from it. */
    const br_buf *target;
    float alpha; /* with a target: finite (0 is taken literally); else not read */
    /* With a target, a positive power of two: the loss gradient out is also staged
     * for br_blr_backward (dy = NULL, the same gscale); 0: not staged. */
    float gscale;
    br_buf *out; /* f32 [ntok][m]; may be NULL only where gscale > 0 */
    size_t ntok; /* 1 ≤ ntok ≤ the scratch's tokens */
} br_blr_fwd;

/* Forward: y [ntok][m] = Σ_p h_p ⊙ c_p for the input x f32 [ntok][n], with (f16
 * operands, f32 accumulation)
 *     A = [a_1|…|a_P] = f16(x)·[f16(g_p⊙S_V,p)]ᵀ          (one GEMM, K = n)
 *     y = [f16(a_p⊙ℓ_p)]_p · [f16(h_p⊙S_U,p)]_pᵀ           (one GEMM, K = P·r)
 * (h enters as an f16 factor of the sign plane: every path's product and their sum
 * are one f32 accumulation), written to out (f->out overwritten) as the descriptor
 * says:
 *   - plain: out = y.
 *   - residual (a target): out = alpha·(y − target), formed in the output GEMM's
 *     epilogue as fl(fl(alpha·acc) + fl(−alpha·target)) (acc the f32 sum y is made
 *     of). For L = ½·alpha·‖y − target‖² (e.g. alpha = 1/N for a mean) out is
 *     ∂L/∂y: pass it as dy to br_blr_backward.
 *   - loss (a target and gscale > 0): as residual, and the gradient is also staged
 *     for the backward — f16(dy·gscale) and its transpose, bit for bit what
 *     br_blr_backward would stage from out — straight from the GEMM's epilogue, so
 *     the f32 gradient need not go through memory: out may be NULL (not written;
 *     give it to read the loss). Then call br_blr_backward with dy = NULL and the
 *     same gscale; the result is bit-identical to the residual forward followed by
 *     br_blr_backward on its out. The staged gradient lives in the scratch's shared
 *     transients: an op of another layer sharing them in between overwrites it (the
 *     backward then fails with BR_E_STATE). The target may be f16 here: it enters
 *     as its exact f32 values, so the result is bit for bit that of an f32 target
 *     holding them, from half the bytes (a fixed training target stored once as
 *     f16, as a bf16 trainer would).
 * With x16 instead of x (the training step on a fixed batch stages x once and skips
 * that pass on every step) the result is bit-identical to the same forward of the x
 * that was staged; x16 is read again by the backward of this forward (keep it
 * unchanged until then) and may not overlap the scratch's own buffers. A, A'ᵀ =
 * f16(A⊙ℓ)ᵀ and the staged input stay in the scratch for br_blr_backward. */
br_status br_blr_forward(br_blr *layer, br_blr_scratch *s, const br_blr_fwd *f);
/* Columns of the staged input f16(x): n rounded up to a multiple of 32. */
size_t br_blr_stage_cols(const br_blr *layer);
/* The staged input of any layers reading the same x f32 [ntok][n] (e.g. q, k, v):
 * x16 = f16(x) as f16 [br_pad_rows(ntok)][br_blr_stage_cols], pads zero, from one
 * read of x. It depends only on x (any layer with these n inputs may be passed), and
 * is bit-identical to the staging br_blr_forward does itself. */
br_status br_blr_stage(const br_blr *layer, const br_buf *x, br_buf *x16, size_t ntok);

/* Backward of the last forward through scratch `s` (same x, same ntok; BR_E_STATE
 * before any forward): for dy f32 [ntok][m] = ∂L/∂y, the gradients of every path
 *     dh += Σ_t dy⊙c,  b = f16(dy·gs)·f16(h⊙S_U) / gs,  dℓ += Σ_t a⊙b,
 *     dx' = f16(b⊙ℓ·gs)·S_Vᵀ / gs,  dg += Σ_t x⊙dx',   dx = Σ_p g_p⊙dx'_p
 * with dh and dg formed through the token-axis products M = dyᵀ·f16(a⊙ℓ) and
 * N = xᵀ·f16(b⊙ℓ) (dh_i = Σ_k S_U[i,k]·M[i][k], dg_j = Σ_k S_V[j,k]·N[j][k]: c and dx'
 * are never formed), and, with BR_BLR_SIGN_GRADS, G_U = diag(h)·M, G_V = diag(g)·N
 * (= diag(h)·dyᵀ·a·diag(ℓ), diag(g)·xᵀ·b·diag(ℓ); token axis as the GEMM's K, f16
 * operands staged under gs), with BR_BLR_CURVATURE Σ_t a² and Σ_t x². accumulate = 1
 * adds into the layer's gradients, 0 overwrites them. dx f32 [ntok][n] is
 * overwritten (NULL: not formed, and its GEMMs skipped); it must not overlap x, dy
 * or a staged xt. gscale (gs) is a power of two that keeps dy·gs and b⊙ℓ·gs out of
 * the f16 subnormals and below the f16 maximum 65504 (e.g. 1024 for |dy| ~ 1e-3;
 * dy itself is staged now, not dy⊙h as before); it is divided back out. dy = NULL:
 * the gradient the last forward through `s` staged, which must have been
 * a loss forward (br_blr_fwd.gscale > 0) under the same gscale (BR_E_STATE / BR_E_ARG otherwise).
 * Everything is formed from the bits as they are: an optimizer step afterwards flips
 * bits for the next forward. */
br_status br_blr_backward(br_blr *layer, br_blr_scratch *s, const br_buf *x, const br_buf *dy,
                          br_buf *dx, size_t ntok, float gscale, int accumulate);

/* ---------------------------------------------------------------- optimizers */

/* How the signs of a layer train. */
typedef enum br_sign_mode {
    BR_SIGN_OFF = 0, /* signs frozen: only h, ℓ, g train */
    /* Adam on a latent real Λ per sign: m ← β1·m + (1−β1)·G; v ← β2·v + (1−β2)·G²
     * (full, or factored: row × column running means of G², Adafactor-style);
     * Λ ← clamp(Λ − η·m̂/(√v̂ + ε), ±clamp); a bit flips where sign(Λ) disagrees
     * with it and |Λ| > hyst, the largest |Λ| first within the flip budget. */
    BR_SIGN_LATENT = 1,
    /* Greedy descent without latents: the predicted change of the loss of flipping
     * each sign alone (scaled by `curvature`) ΔL = −2s·G + quad; the
     * entries with ΔL < 0 flip, the most negative first, within the flip budget. */
    BR_SIGN_EXACT = 2,
} br_sign_mode;

/* Options of a layer's optimizer (br_opt_defaults gives the values noted). */
typedef struct br_opt_cfg {
    /* Adam over h, ℓ, g of every path (one br_adam_cat). */
    float lr;            /* 1e-3 */
    float beta1, beta2;  /* 0.9, 0.999 */
    float eps;           /* 1e-8 */
    float rel_floor[3];  /* ρ of h, ℓ, g: relative steps lr·…·max(|w|, ρ) (0: plain) (0) */
    int freeze[3];       /* 1: h / ℓ / g frozen (0) */
    float max_grad_norm; /* clip the norm of all scale gradients to this (0: no clip) (0) */
    /* Signs. */
    br_sign_mode sign_mode;                 /* BR_SIGN_LATENT */
    int sign_factored;                      /* latent: 1 = factored second moment (0) */
    float sign_lr;                          /* η (1e-2) */
    float sign_beta1, sign_beta2, sign_eps; /* 0.9, 0.999, 1e-8 */
    float sign_clamp;                       /* |Λ| ≤ clamp (1) */
    float sign_hyst;                        /* hysteresis: a bit flips only where |Λ| > hyst (0) */
    float sign_tau;                         /* latent init from the bits: Λ = ±tau (0.1) */
    /* Most flips per step, as a fraction of a sign matrix's entries, at least one
     * (0: no limit) (0); the highest scores flip, ties to the lower index.
     * BR_SIGN_EXACT needs one (e.g. 1e-3): its predictions hold for one flip. */
    float flip_budget;
    /* BR_SIGN_EXACT: the loss's second derivative in y, 1 for L = ½‖y − y*‖²; a
     * loss divided by N (dy divided by N) needs 1/N. (1) */
    float curvature;
} br_opt_cfg;
br_opt_cfg br_opt_defaults(void);

/* An optimizer for one layer: Adam over its scales and the sign optimizer over its
 * S_U, S_V. It reads the layer's gradients and updates the layer in place. */
typedef struct br_blr_opt br_blr_opt;
/* Sign modes other than BR_SIGN_OFF need a layer made with BR_BLR_SIGN_GRADS,
 * BR_SIGN_EXACT one with BR_BLR_CURVATURE. Latents start at ±sign_tau from the bits. */
br_status br_blr_opt_new(br_blr *layer, const br_opt_cfg *cfg, br_blr_opt **out);
void br_blr_opt_free(br_blr_opt *opt);
/* (Re)initialize the latent of S_U (which = 0) or S_V (which = 1) of a path:
 * factor NULL: Λ = ±sign_tau from the current bits; else factor f32 [rows][r] (the
 * real-valued factor of an initialization, e.g. U√S): Λ = factor · sign_tau /
 * mean|factor|, and the bits are set to sign(factor) (0 → +1). Moments reset to 0.
 * Synchronous. No-op success in BR_SIGN_EXACT / BR_SIGN_OFF when factor is NULL. */
br_status br_blr_opt_init_latent(br_blr_opt *opt, size_t path, int which, const float *factor);
/* Learning rates of the next steps (e.g. a schedule). Written to the device now:
 * a recorded step reads them when it runs. Call outside a recording. */
br_status br_blr_opt_set_lr(br_blr_opt *opt, float lr, float sign_lr);

/* One step from the layer's current gradients (e.g. several backwards accumulated:
 * the deferred mode): per-parameter gradient norms; if any gradient is not finite
 * the step is refused — weights, bits, latents, moments and the step count stay as
 * they were; else the scale gradients are clipped to max_grad_norm, the signs step
 * (and flip), then Adam steps h, ℓ, g. The decision is taken on the device, so a
 * recorded step refuses correctly on every replay. Run directly, it waits for the
 * device and returns BR_E_NONFINITE for a refused step; while recording it returns
 * BR_OK (read the outcome with br_blr_opt_info after the replay). Gradients are not
 * zeroed (br_blr_zero_grad). The norms of G_U and G_V come from the row norms the
 * backward wrote with them (m + n floats a path, not (m + n)·r): the layer's own ops
 * are the only writers of G until br_blr_buf hands G_U or G_V out; from then on (and
 * in steps recorded after that) the step reads G itself. A step recorded before G was
 * handed out keeps the row norms: write G only through the layer's ops while such a
 * graph is in use. The sign gradients' norms only report and refuse (the clipping is
 * over the scale gradients), so either way the step changes the same bits. */
br_status br_blr_opt_step(br_blr_opt *opt);

/* What the last step did (waits for the device). Arrays are owned by the
 * optimizer, valid until its next call. */
typedef struct br_step_info {
    int refused;           /* 1: the gradients were not finite, nothing changed */
    uint64_t steps;        /* steps taken so far (refused ones not counted) */
    float grad_norm;       /* norm of all scale gradients before clipping */
    float grad_mul;        /* clipping multiplier applied (1: none) */
    size_t nparams;        /* 5·paths: per path dh, dℓ, dg, G_U, G_V */
    const float *norms;    /* [nparams] per-parameter gradient norms (G: 0 if absent) */
    size_t nmats;          /* 2·paths */
    const uint32_t *flips; /* [nmats] signs flipped by the step: S_U,0, S_V,0, S_U,1, ... */
} br_step_info;
br_status br_blr_opt_info(br_blr_opt *opt, br_step_info *info);

/* Optimizer state, as device buffers (NULL when absent). */
typedef enum br_opt_part {
    BR_OPT_LATENT = 0,  /* f32 [rows][r]: Λ of S_U (which 0) / S_V (which 1) of a path */
    BR_OPT_M1 = 1,      /* f32 [rows][r]: first moment of Λ */
    BR_OPT_V = 2,       /* f32 second moment of Λ: [rows][r], or factored [rows + r] */
    BR_OPT_ADAM_M1 = 3, /* f32: Adam moments of the path's h | ℓ | g, [m + r + n] */
    BR_OPT_ADAM_M2 = 4,
} br_opt_part;
br_buf *br_blr_opt_buf(br_blr_opt *opt, size_t path, int which, br_opt_part part);

/* ---- compression ---- */

/* The rank the compression gives a layer [m][n] for `bpw` bits per weight: the
 * largest rank whose br_blr_bpw (section "files") is ≤ bpw, capped at min(m, n)
 * (more rank is a larger layer, not a better one). Any rank ≥ 1: the layer pads it
 * internally to the multiple of 32 its kernels work in, so the budget is used
 * whole. When even rank 1 exceeds the budget, fails with BR_E_SHAPE and a message
 * naming the layer (`name`, may be NULL), its shape and the bpw rank 1 needs. */
br_status br_compress_rank(br_ctx *ctx, const char *name, size_t m, size_t n, size_t paths,
                           double bpw, size_t *rank);

/* Synthetic calibration inputs, used where no recorded ones are given. */
typedef enum br_synthetic {
    /* x ~ N(0, I). With the input statistics unknown no channel is special, so the
     * training minimizes the expected output error over inputs whose channel
     * scales are unknown: ‖W − Ŵ‖_F, the weights' own error. The safe default. */
    BR_SYNTH_ISOTROPIC = 0,
    /* x[t][j] = s_j·z, z ~ N(0, 1), s_j = exp(N(0, 1)) per channel, seeded per
     * layer: heavy-tailed channel magnitudes like those of LLM activations. The
     * layer is fit to these random channel weights: a stand-in for recorded
     * inputs in tests, benchmarks and the demo, not for a model you will use. */
    BR_SYNTH_HEAVY = 1,
} br_synthetic;

/* How the training objective counts the calibration tokens (recorded inputs). */
typedef enum br_token_weighting {
    /* each token's output error relative to its own output ‖y_t‖ (floored at a
     * tenth of the mean): a few tokens with massive activations, which can carry
     * most of a layer's output energy, do not decide the fit for the rest */
    BR_TOKENS_RELATIVE = 0,
    BR_TOKENS_AGGREGATE = 1, /* ‖Ŷ − Y‖²/‖Y‖² over all tokens together */
} br_token_weighting;

/* Options of a compression; br_compress_opts_default fills the defaults noted. */
typedef struct br_compress_opts {
    double bpw;   /* target bits per weight per layer (1.0); unused when rank > 0 */
    size_t rank;  /* fixed rank (0: the largest within bpw); at most min(m, n) of a layer */
    size_t paths; /* 1 or 2 (2: the second path fits the first one's residual) */
    /* Tensors compressed: by default the 2-D ones whose name ends in ".weight",
     * except embeddings and heads (names containing "embed", "wte", "wpe",
     * "lm_head") and norms ("norm", "ln_"). `include` glob patterns (fnmatch, '*'
     * also matches '.') add 2-D tensors; `exclude` patterns remove tensors and win
     * over everything. */
    const char *const *include;
    size_t n_include;
    const char *const *exclude;
    size_t n_exclude;
    /* Calibration inputs. activations: a safetensors file with, per compressed
     * layer NAME, a tensor NAME (or NAME less ".weight", or the nearest enclosing
     * module's, e.g. one "…attention.self" for q, k and v) [tokens][n] of that
     * layer's inputs (f32/f16/bf16); the last min(eval_tokens, tokens/4) are held
     * out. gram: a safetensors file with such a tensor [n][n], the input Gram
     * Σ = XᵀX (any scale), or a factor F [k][n], k < n, of it (Σ = FᵀF: e.g. a
     * big Gram's top eigenpairs Λ^½·Vᵀ): Gaussian inputs of that covariance; it
     * also makes the initialization activation-aware. A layer found in neither
     * gets `synthetic` inputs. */
    const char *activations;
    const char *gram;
    int synthetic; /* a br_synthetic (BR_SYNTH_ISOTROPIC) */
    /* A layer that a given activations or Gram file has no tensor for is refused
     * before any work (a file whose names do not match is a mistake, not a reason
     * to train on synthetic inputs); with allow_uncalibrated (0) such layers train
     * on `synthetic` inputs instead, each with a note in the report. A file that
     * matches no layer at all is refused either way. */
    int allow_uncalibrated;
    /* Training per layer: Adam on h, ℓ, g and the sign optimizer on S_U, S_V, to
     * minimize J = J_data + weight_term·‖W − Ŵ‖²/‖W‖², J_data the relative output
     * error² on the calibration inputs (weighted as token_weighting says). J is a
     * quadratic form in W − Ŵ, so the layer trains on a pool of tokens that is J
     * exactly (a factor of the inputs' Gram), in batches of `tokens`; with recorded
     * inputs early stopping and the report judge on held-out tokens. */
    float weight_term;   /* λ (0.03); it holds Ŵ near W where the inputs say little */
    int token_weighting; /* a br_token_weighting (BR_TOKENS_RELATIVE) */
    int steps;           /* steps per layer (300); 0: initialization only */
    size_t tokens;       /* tokens per step (512) */
    float lr;            /* peak Adam step for the scales, relative to |w| (2e-2) */
    float sign_lr;       /* peak step of the sign latents (1e-2; 0: signs frozen) */
    int warmup;          /* linear warm-up steps (-1: steps/20), then cosine decay to 0 */
    int patience;        /* early stop after this many evaluations without a 0.1% gain (5) */
    int eval_every;      /* steps between held-out evaluations (25) */
    size_t eval_tokens;  /* held-out tokens for the relative output error (1024) */
    uint64_t seed;       /* every random choice; per layer derived from seed and name (1) */
    int init_on_device;  /* 1 (default): the SVD runs on a CUDA context's GPU */
} br_compress_opts;
void br_compress_opts_default(br_compress_opts *opts);

/* Whether the compression selects tensor `name` of `ndim` dimensions (see
 * br_compress_opts: the default rule, include, exclude). */
int br_compress_selects(const br_compress_opts *opts, const char *name, size_t ndim);

/* Why a layer's training ended. */
typedef enum br_stop_reason {
    BR_STOP_NONE = 0,    /* no training (steps = 0, or nothing to fit: y = 0) */
    BR_STOP_STEPS = 1,   /* every step ran */
    BR_STOP_PLATEAU = 2, /* `patience` evaluations without a 0.1% gain on held-out inputs */
} br_stop_reason;

/* What happened to a selected layer. */
typedef enum br_layer_outcome {
    BR_LAYER_COMPRESSED = 0, /* written as a BLR layer */
    /* written unchanged (its original tensor copied), the reason in `note`: the
     * budget cannot hold its shape, or compression failed (a trained weight error
     * above 1: Ŵ further from W than 0 is) */
    BR_LAYER_SKIPPED = 1,
} br_layer_outcome;

/* Quantiles of the per-token relative output error ‖ŷ_t − y_t‖/‖y_t‖ over the
 * held-out tokens (a few tokens with massive outputs dominate the aggregate error;
 * these show what the typical token keeps). */
typedef struct br_token_err {
    double p50, p90, p99;
} br_token_err;

/* What the job did to one selected layer. */
typedef struct br_layer_report {
    char name[256];
    size_t m, n, rank, paths;
    double bpw; /* br_blr_bpw of the shapes */
    br_layer_outcome outcome;
    char note[256]; /* BR_LAYER_SKIPPED: why; else empty or a remark */
    /* Relative output error ‖ŷ − y‖/‖y‖ on held-out calibration inputs (never
     * trained on), y = W·x the original layer's outputs: after the Dual-SVID
     * initialization, and after training (scales rounded to f16, as written). */
    double err_init, err_trained;
    br_token_err tok_init, tok_trained; /* per-token errors on the same inputs */
    double weight_err_init;             /* ‖Ŵ − W‖/‖W‖ after the initialization */
    double weight_err;                  /* ‖Ŵ − W‖/‖W‖ after training */
    int steps;                          /* training steps run (fewer than asked: early stop) */
    br_stop_reason stop;
    int best_step;  /* the step whose state was kept (0: the initialization) */
    int loss_every; /* steps between two points of the loss curve */
    size_t n_loss;
    float *loss;    /* [n_loss] training loss of the batch, as ‖ŷ − y‖²/‖y‖² */
    int eval_every; /* steps between two held-out evaluations */
    size_t n_eval;
    float *eval;          /* [n_eval] the held-out criterion (the training objective's data
                           * term) at steps 0, eval_every, 2·eval_every, … (the last: the
                           * last step run) */
    double seconds;       /* initialization + training */
    double init_seconds;  /* of which the objective, the original's outputs, the initialization */
    int resumed;          /* 1: taken from the checkpoint of an interrupted run */
    char init_device[16]; /* where the SVD ran: "cpu" or "cuda" */
    char init_kind[16];   /* which initialization was kept: "plain", "scaled" (channel-
                           * scaled by the inputs' RMS) or "whitened" (by the inputs' Gram) */
    char calibration[32]; /* this layer's inputs: "activations", "gram", "synthetic
                           * isotropic", "synthetic heavy-tailed" */
    size_t calib_tokens;  /* recorded tokens it trained on (activations), else 0 */
} br_layer_report;

/* Where the job is, for a progress display. */
typedef enum br_compress_phase {
    BR_PHASE_INIT = 0,    /* a layer's initialization begins */
    BR_PHASE_TRAIN = 1,   /* a training step of the layer finished (step, loss) */
    BR_PHASE_DONE = 2,    /* the layer is finished: its report is complete */
    BR_PHASE_RESUMED = 3, /* the layer was read back from the checkpoint */
    BR_PHASE_WRITE = 4,   /* every layer is done; the output is being written */
} br_compress_phase;
typedef struct br_compress_progress {
    br_compress_phase phase;
    size_t layer, layers;          /* this layer's index (from 0) and how many are compressed */
    const br_layer_report *report; /* the layer's report so far (name, shape, rank, ...) */
    int step, steps;               /* BR_PHASE_TRAIN: steps done, steps planned */
    double loss;                   /* BR_PHASE_TRAIN: the last logged batch loss */
    double elapsed;                /* seconds since the job began */
    /* The job's work in units of estimated cost (a layer's steps × tokens × the
     * FLOPs of one token through it, plus its initialization), for an ETA that
     * weighs each layer by its size: the work of the layers finished or resumed
     * before this one, of this layer, and of all the selected layers. */
    double work_before, work_layer, work_total;
} br_compress_progress;
/* Called from the job's thread; returning non-zero cancels the job (it then fails
 * with BR_E_STATE and writes no output; finished layers stay in the checkpoint). */
typedef int (*br_compress_progress_fn)(const br_compress_progress *progress, void *user);

/* The whole job's report. */
typedef struct br_compress_report {
    size_t n_layers;
    br_layer_report *layers;    /* in the order of the input file */
    size_t n_passthrough;       /* tensors copied unchanged */
    uint64_t params_compressed; /* weights of the compressed layers */
    uint64_t bytes_before;      /* data bytes of the compressed layers in the input */
    uint64_t bytes_after;       /* data bytes of their BLR tensors in the output */
    uint64_t file_in, file_out; /* sizes of the input and output files */
    size_t n_skipped;           /* selected layers written unchanged (BR_LAYER_SKIPPED) */
    double seconds;
    char device[160];      /* br_ctx_device of the context */
    char calibration[32];  /* "activations", "gram", "synthetic isotropic" or
                            * "synthetic heavy-tailed" (the options') */
    char calib_file[1024]; /* the activations or Gram file given, else empty */
    char options[512];     /* the options that decide the result, as "key=value …" */
} br_compress_report;
void br_compress_report_free(br_compress_report *report);

/* Compress the safetensors checkpoint `in_path` (a file, a sharded index or a
 * directory, as br_st_open) into `out_path`: every selected linear becomes a BLR
 * layer (docs/FORMAT.md) initialized by Dual-SVID and trained on calibration
 * inputs; every other tensor is copied unchanged. The output is written to a
 * temporary file and renamed at the end: a failed or cancelled run leaves no
 * output. Each finished layer is checkpointed in the directory `checkpoint_dir`
 * (NULL: out_path + ".partial"), tagged with a hash of the options and the input;
 * with `resume` the layers found there are taken instead of recomputed (a
 * checkpoint made with other options or input is refused, BR_E_STATE), and the
 * directory is removed after a successful run. Checks everything it can before
 * the first layer: the input's tensors and dtypes, every layer's rank budget, NaN
 * or Inf in a weight, the output location. progress may be NULL. *report (may be NULL) receives the
 * report (free with br_compress_report_free), also on failure when some layers
 * finished. */
br_status br_compress_file(br_ctx *ctx, const char *in_path, const char *out_path,
                           const br_compress_opts *opts, const char *checkpoint_dir, int resume,
                           br_compress_progress_fn progress, void *user,
                           br_compress_report **report);
/* br_compress_file with the layers spread over several contexts, one thread each
 * (typically one per GPU: "cuda:0", "cuda:1", ...): each thread takes the next
 * layer in plan order, the caller's thread writes them in the input's order. The
 * output is the same file as with one context of the same kind: a layer's result
 * depends on its inputs and the options alone (its seeds derive from its name).
 * ctx is the job's context (the files, the plan, the writer and the errors; any
 * backend: it does host work only); devices[0..n_devices) must be distinct, none
 * of them ctx, all of one backend (a layer's bits depend on the kind of device
 * that computes it), at most BR_COMPRESS_MAX_DEVICES (else BR_E_ARG). GPUs of
 * different models may run different kernels: for the same file as one GPU's,
 * use GPUs of one model. The first failure on a device stops
 * the others at their next step and is the job's status, its message on ctx
 * naming the device ("device 1 (cuda:1): ...", its index in `devices`) and the
 * layer. n_devices 0, or one device that is ctx, is br_compress_file. progress
 * is called from the device threads, one call at a time, the layers' calls
 * interleaved (its `layer` says which); work_before is then the work of the
 * layers finished so far. The report's `device` lists the devices. */
#define BR_COMPRESS_MAX_DEVICES 256
br_status br_compress_file_on(br_ctx *ctx, br_ctx *const *devices, size_t n_devices,
                              const char *in_path, const char *out_path,
                              const br_compress_opts *opts, const char *checkpoint_dir, int resume,
                              br_compress_progress_fn progress, void *user,
                              br_compress_report **report);

/* One matrix, for library users with their own trainer or file handling: W f32
 * [m][n] on the host, its inputs x f32 [ntok][n] (NULL: Gaussian inputs of the
 * Gram's covariance, else opts->synthetic ones), the input Gram f64 [n][n] (NULL:
 * none; given, the initialization is activation-aware). The last
 * min(opts->eval_tokens, ntok/4) tokens of x are held out for the report's errors.
 * *out receives the layer (allocated; free with br_blr_host_free), report (may be
 * NULL) its report (free its loss and eval curves with free()). */
br_status br_compress_matrix(br_ctx *ctx, const char *name, const float *w, size_t m, size_t n,
                             const float *x, size_t ntok, const double *gram,
                             const br_compress_opts *opts, br_blr_host *out,
                             br_layer_report *report);

/* ---------------------------------------------------------------- graphs */

/* Record ops instead of running them: between br_graph_begin and br_graph_end the
 * ops are checked and recorded (nothing runs, buffers are not touched). The
 * buffers an op names, and the context, must outlive the graph. Host transfers
 * (br_buf_upload, br_buf_download, br_sumsq_host) fail with BR_E_STATE while
 * recording. On CUDA a graph is replayed as a CUDA graph; on the CPU its ops run
 * in order. */
typedef struct br_graph br_graph;
br_status br_graph_begin(br_ctx *ctx);
br_status br_graph_end(br_ctx *ctx, br_graph **out);
br_status br_graph_launch(br_graph *graph);
size_t br_graph_op_count(const br_graph *graph);
void br_graph_free(br_graph *graph);

/* ---------------------------------------------------------------- profiler */

/* Ops issued from now on are attributed to `tag` (NULL or "" = untagged); its
 * first 31 bytes are copied. */
void br_ctx_set_tag(br_ctx *ctx, const char *tag);
/* Print the profile (per tag and op: calls, device time; launches, allocations,
 * uploads) to `out`. Waits for the device. */
br_status br_profile_report(br_ctx *ctx, FILE *out);
void br_profile_reset(br_ctx *ctx);

/* ---------------------------------------------------------------- inference on the CPU */

/* A BLR linear (br_blr_host) prepared for inference on the host CPU: for tokens
 * x [ntok][n], y [ntok][m] = Σ_p h_p ⊙ (S_U,p · (ℓ_p ⊙ (S_V,pᵀ · (g_p ⊙ x)))) (+ bias),
 * straight from the signs, Ŵ never formed. The plan holds the signs repacked for
 * lookup-table kernels (each group of 4 inputs of a product indexes a 16-entry
 * table of its ± sums) and copies of the scales: the layer it was made from may
 * change or go once br_blr_infer_new returns. A plan is used by one caller at a
 * time (a run writes its scratch); runs use OpenMP's threads, and give the same
 * bits for any thread count.
 *
 * Accuracy. Each product S·z (z = g⊙x of n entries, then z = ℓ⊙a of r entries;
 * K its length rounded up to 32, u = 2^-24) is within E(z) of its exact value for
 * the z given (the rounding of z's own f32 products counted): "portable" (f32
 * tables) E(z) = (K/8 + 5)·u·‖z‖₁; "avx2-lut" (16-bit integer tables, one scale per
 * 16 inputs) E(z) = (1/16000 + (K/16 + 5)·u)·‖z‖₁. These are worst cases
 * (every rounding the same way), and compose to
 *     |y_i − y_exact_i| ≤ Σ_p |h_p,i|·(E(ℓ_p⊙a_p) + ‖ℓ_p‖₁·E(g_p⊙x))
 *                         + 2^-22·(Σ_p |h_p,i·c_p,i| + |bias_i|)
 * (src/infer says why). The roundings of different groups are independent and of
 * either sign, so the typical error is about √(K/4) times smaller: on random layers
 * and inputs of spread-out magnitudes, with m ≥ 16 outputs and rank r ≥ 16, both
 * kernels keep max_i |y_i − y_exact_i| ≤ 2e-3·max_i |y_exact_i| per token, an f16
 * rounding of the largest output or two (tests/test_blr_infer.c checks the bound
 * and this; with fewer outputs or a smaller rank all outputs can cancel together,
 * and no rounded sum keeps an error relative to its result). A token whose x holds
 * a NaN or an infinity gets NaN or infinite outputs. */
typedef struct br_blr_infer br_blr_infer;

/* The kernels of a plan. */
typedef enum br_infer_kernel {
    BR_INFER_AUTO = 0,     /* the fastest this CPU runs (a new plan's choice) */
    BR_INFER_PORTABLE = 1, /* plain C, f32 tables: any CPU ("portable") */
    BR_INFER_AVX2 = 2,     /* AVX2 shuffles of 16-bit tables ("avx2-lut"): x86-64 with AVX2, FMA */
} br_infer_kernel;

/* A plan for `layer` (checked: arrays not NULL, m, n, r in [1, 2^31], paths 1 or 2,
 * every scale finite, else BR_E_ARG / BR_E_SHAPE / BR_E_OVERFLOW / BR_E_NONFINITE;
 * BR_E_NOMEM). ctx is any context (CPU or CUDA) and only receives the messages of
 * this call and of the plan's later failures; it may be NULL (messages dropped),
 * else it must outlive the plan. */
br_status br_blr_infer_new(br_ctx *ctx, const br_blr_host *layer, br_blr_infer **out);
/* Choose the kernel of the next runs: BR_E_UNSUPPORTED for BR_INFER_AVX2 on a CPU
 * without it. */
br_status br_blr_infer_set_kernel(br_blr_infer *p, br_infer_kernel kernel);
/* The kernel the next run uses: "avx2-lut" or "portable" ("none" for NULL). */
const char *br_blr_infer_kernel(const br_blr_infer *p);
/* y [ntok][m] for x [ntok][n] (f32, row-major), bias f32 [m] or NULL. y must not
 * overlap x or bias (BR_E_ARG); ntok ≥ 1 (BR_E_SHAPE). */
br_status br_blr_infer_run(br_blr_infer *p, const float *x, size_t ntok, const float *bias,
                           float *y);
/* The same with x, bias and y as IEEE f16 bit patterns: computed in f32, y rounded
 * to nearest even. */
br_status br_blr_infer_run_f16(br_blr_infer *p, const uint16_t *x, size_t ntok,
                               const uint16_t *bias, uint16_t *y);
void br_blr_infer_free(br_blr_infer *p);

/* ---------------------------------------------------------------- inference on a CUDA device */

/* A BLR linear prepared for inference on a context's GPU: the same product as the CPU
 * plan, y [ntok][m] = Σ_p h_p ⊙ (S_U,p · (ℓ_p ⊙ (S_V,pᵀ · (g_p ⊙ x)))) (+ bias), on
 * activations of 16-bit types in device memory, straight from the signs (Ŵ never
 * formed). The plan holds, on the GPU, the signs repacked as the kernels read them,
 * the scales (f32) and its scratch; the layer it was made from may change or go once
 * br_blr_infer_cuda_new returns. A plan is used by one caller at a time (a run writes
 * its scratch and counters), and its runs are ordered on one stream.
 *
 * Kernels. Up to 64 tokens ("decode"): one launch of a persistent grid per 32 tokens,
 * both products fused, the signs expanded to ±1 tensor-core operands in registers:
 * z = g⊙x and t = ℓ⊙(S_Vᵀz) are rounded to the activation type (f16 or bf16) as the
 * operands of the products; sums in f32 in a fixed order. 65 tokens and more ("prefill"): the
 * bitmap GEMMs of br_mm_bits on f16 operands (g⊙x and t rounded to f16 whatever the
 * activation type, so their values must lie within f16's range), f32 sums. Either
 * way the result is rounded once to the activation type, and two runs on the same
 * inputs give the same bits.
 *
 * Accuracy. With u the unit roundoff of the operand type (f16 2^-11, bf16 2^-8;
 * prefill: f16's) and u_y that of the activation type, each output is within
 *     Σ_p |h_p,i|·u·(‖ℓ_p‖₁·‖z_p‖₁ + ‖t_p‖₁) + u_y·|y_i|   (+ f32 rounding, ~2^-22 of it)
 * of the exact product of the given x, a worst case; the roundings are independent,
 * so the typical error is that bound with the 1-norms replaced by 2-norms over √3
 * (tests/test_blr_infer_cuda.c checks both). */
typedef struct br_blr_infer_cuda br_blr_infer_cuda;

/* The element type of x, bias and y (IEEE binary16 or bfloat16 bit patterns). */
typedef enum br_act_type { BR_ACT_F16 = 0, BR_ACT_BF16 = 1 } br_act_type;

/* A plan of `layer` resident on ctx's GPU: the signs once, repacked as the decode
 * kernel reads them, and the scales. The runs' scratch is the context's workspace,
 * shared by every plan of the context. ctx must be a CUDA context (BR_E_UNSUPPORTED
 * for a CPU context or a build without CUDA) and outlive the plan. Same checks as
 * br_blr_infer_new (arrays, shapes, finite scales: BR_E_ARG / BR_E_SHAPE /
 * BR_E_OVERFLOW / BR_E_NONFINITE), BR_E_NOMEM, BR_E_DEVICE. */
br_status br_blr_infer_cuda_new(br_ctx *ctx, const br_blr_host *layer, br_blr_infer_cuda **out);
/* y [ntok][m] = layer(x [ntok][n]) (+ bias [m] or NULL): device pointers of `type`,
 * row-major, asynchronous on the context's current stream (br_ctx_set_stream: the
 * caller's, e.g. torch's). x, bias and y must be 2-byte aligned and y must not
 * overlap x or bias (BR_E_ARG); ntok ≥ 1 (BR_E_SHAPE). Decode runs (≤ 64 tokens)
 * never allocate; a prefill run allocates nothing once a run of at least this ntok
 * has run on the context (so steps can be captured in a CUDA graph), else it grows
 * the workspace first (BR_E_STATE while the stream is being captured). */
br_status br_blr_infer_cuda_run(br_blr_infer_cuda *p, br_act_type type, const void *x, size_t ntok,
                                const void *bias, void *y);
/* Device bytes the plan holds (its signs, scales and decode-kernel state; not the
 * context's workspace); 0 for NULL. */
size_t br_blr_infer_cuda_bytes(const br_blr_infer_cuda *p);
/* What the last run ran: "decode_resident" (up to 8 tokens where the plan's shape
 * allows: every sign load issued at the kernel's start), "decode_t_smem" (the decode
 * kernel, t staged in shared memory: few tokens), "decode" (the same kernel, t read
 * from L2) or "prefill" ("none" before any run, and for NULL); for 33..64 tokens, the
 * second launch's. */
const char *br_blr_infer_cuda_kernel(const br_blr_infer_cuda *p);
/* Waits for the plan's runs issued so far, then frees it (NULL: nothing). */
void br_blr_infer_cuda_free(br_blr_infer_cuda *p);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* BITRANK_H */
