/* Internal state of the safetensors reader and writer, shared by the src/io files, the
 * tests and the fuzz harness. */
#ifndef BR_IO_INTERNAL_H
#define BR_IO_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "bitrank.h"
#include "io/json.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "bitrank's file formats are little-endian; this build assumes a little-endian host"
#endif

/* Largest header a safetensors file may declare (the reference reader's limit). */
#define BR_ST_MAX_HEADER ((uint64_t)100000000)
/* Largest index (.json) of a sharded checkpoint we read. */
#define BR_ST_MAX_INDEX ((uint64_t)100000000)

/* Names and values of the BLR layout (docs/FORMAT.md). */
#define BR_BLR_FORMAT "bitrank-blr"
#define BR_BLR_FORMAT_VERSION "1"

/* One mapped file of a checkpoint. */
typedef struct br_st_shard {
    char *path;
    const uint8_t *bytes; /* the whole file */
    size_t size;
    int mapped;     /* 1: bytes is an mmap to unmap on close */
    br_json header; /* the parsed header; names point into it */
} br_st_shard;

struct br_st_file {
    char *path;
    br_st_shard *shards;
    size_t nshards;
    br_st_tensor *tensors; /* in header order, shard after shard */
    size_t ntensors;
    size_t *by_name; /* tensor indices sorted by name */
    const char **meta_keys, **meta_vals;
    size_t nmeta;
    br_blr_info *blr; /* compressed linears (format "bitrank-blr") */
    size_t nblr;
    char *blr_names; /* storage of blr[i].name */
};

/* The dtype a file names ("BF16"), or BR_ST_UNKNOWN. */
br_st_dtype br_st_dtype_from_name(const char *name);

/* "[3, 4096]" into buf (n bytes); returns buf. */
const char *br_st_fmt_shape(char *buf, size_t n, const uint64_t *shape, size_t ndim);

/* Parse a safetensors image held in memory (borrowed: it must outlive the file)
 * as if it were the file `name`. The fuzz harness's entry point. */
br_status br_st_open_memory(br_ctx *ctx, const char *name, const void *bytes, size_t size,
                            br_st_file **out);

/* A sharded checkpoint's index: weight_map entries (tensor → shard file name), the
 * shard names in order of first appearance. */
typedef struct br_st_index {
    br_json doc;
    size_t n;
    const char **tensor, **shard; /* [n], pointing into doc */
    const char **files;           /* distinct shard names */
    size_t nfiles;
} br_st_index;
/* Parse the text of an index (untrusted); `name` names it in messages. Shard names
 * must be plain file names (no '/', no "..", not empty). */
br_status br_st_index_parse(br_ctx *ctx, const char *name, const char *text, size_t len,
                            br_st_index *out);
void br_st_index_free(br_st_index *idx);

/* Find the BLR layers of an opened file and check their tensors (st_blr.c). */
br_status br_st_scan_blr(br_ctx *ctx, br_st_file *f);

/* The writer's tensor adder with an ownership flag: owned data are freed by the
 * writer (st_write.c). */
br_status br_st_writer_add_owned(br_st_writer *w, const char *name, br_st_dtype dtype, size_t ndim,
                                 const uint64_t *shape, void *data, int owned);
/* The context a writer reports to, and marking a file as the BLR layout. */
br_ctx *br_st_writer_ctx(const br_st_writer *w);
br_status br_st_writer_mark_blr(br_st_writer *w);

/* Shared by the two BLR encodings (st_blr.c, cortiq.c): a layer's arguments
 * checked (fn names the caller in messages); scales f32 → f16 bytes (little-endian,
 * round to nearest even), BR_E_NONFINITE naming layer, array and index if one is
 * not finite or overflows f16; the cortiq header checked against `len` bytes. */
br_status br_blr_check_layer(br_ctx *ctx, const char *fn, const br_blr_host *layer);
br_status br_blr_put_f16(br_ctx *ctx, const char *fn, const char *name, const char *what, size_t p,
                         const float *src, size_t n, uint8_t *dst);
br_status br_blr_cortiq_probe(br_ctx *ctx, const char *where, const uint8_t *src, size_t len,
                              size_t *paths, size_t *r, size_t *m, size_t *n);

/* Little-endian loads and stores of unaligned bytes. */
static inline uint16_t br_le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t br_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t br_le64(const uint8_t *p) {
    return (uint64_t)br_le32(p) | (uint64_t)br_le32(p + 4) << 32;
}
static inline void br_put_le16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void br_put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void br_put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* a·b into *out; 0 if it overflows u64. */
static inline int br_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (a != 0 && b > UINT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}

#endif
