/* Internal state of the safetensors reader and writer, shared by the src/io files, the
 * tests and the fuzz harness. The BLR layout's own internals, which sit above the
 * reader and writer, are io/blr_layout.h's. */
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

/* One mapped file of a checkpoint. A mapping faults with SIGBUS where its file
 * has shrunk since it was made (another process truncated or rewrote it in place),
 * so tensor bytes are read with pread() from `fd`, which returns short instead;
 * only the header (parsed at open) is read from the mapping. */
typedef struct br_st_shard {
    char *path;
    const uint8_t *bytes; /* the whole file */
    size_t size;          /* its size when opened */
    int mapped;           /* 1: bytes is an mmap of fd: unmapped and closed on close */
    int fd;               /* with mapped: the file, open for reading */
    /* with mapped: the process's list of live mappings (st_read.c), which the
     * writer consults to copy a tensor of an open file with pread */
    struct br_st_shard *live_prev, *live_next;
    br_json header; /* the parsed header; names point into it */
} br_st_shard;

struct br_st_file {
    char *path;
    char *index_path; /* the sharded checkpoint's index read (NULL: a single file) */
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

/* The files an open checkpoint was read from: its index (when sharded), then
 * every shard, as opened (the index's directory joined to the shard's name).
 * NULL when i is out of range. */
size_t br_st_file_count(const br_st_file *f);
const char *br_st_file_at(const br_st_file *f, size_t i);

/* The dtype a file names ("BF16"), or BR_ST_UNKNOWN. */
br_st_dtype br_st_dtype_from_name(const char *name);

/* "[3, 4096]" into buf (n bytes); returns buf. */
const char *br_st_fmt_shape(char *buf, size_t n, const uint64_t *shape, size_t ndim);

/* Parse a safetensors image held in memory (borrowed: it must outlive the file)
 * as if it were the file `name`, its BLR layers checked as br_st_open checks them
 * (st_open.c). The fuzz harness's entry point. */
br_status br_st_open_memory(br_ctx *ctx, const char *name, const void *bytes, size_t size,
                            br_st_file **out);
/* br_st_open and br_st_open_memory without the BLR layers (st_read.c): the file's
 * tensors and metadata, read and checked; f->blr is left empty for st_open.c. */
br_status br_st_open_plain(br_ctx *ctx, const char *path, br_st_file **out);
br_status br_st_open_memory_plain(br_ctx *ctx, const char *name, const void *bytes, size_t size,
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

/* Bytes [offset, offset + n) of tensor t of f into dst, read with pread (a
 * memory image: copied). BR_E_ARG if the range is outside the tensor; BR_E_IO
 * naming the file if it cannot be read or has shrunk since it was opened. */
br_status br_st_read_bytes(br_ctx *ctx, const br_st_file *f, const br_st_tensor *t, uint64_t offset,
                           size_t n, void *dst);
/* BR_OK if the file holding tensor t still has the size it had when opened, else
 * BR_E_IO naming it (br_st_shrank's message): for code that reads t->data from
 * the mapping. It narrows the window, not closes it: a file truncated between
 * this check and the read still faults (SIGBUS); br_st_read_bytes has no window. */
br_status br_st_check_size(br_ctx *ctx, const br_st_file *f, const br_st_tensor *t);
/* The failure for a file at `path` (open as fd) that had `size_was` bytes and
 * now has fewer: "PATH: the file shrank from X to Y bytes while being read". */
br_status br_st_shrank(br_ctx *ctx, const char *path, int fd, uint64_t size_was);

/* Where `nbytes` bytes at `data` lie in the mapping of an open file: its
 * descriptor, the offset in it, its path and its size when opened. 1 if found,
 * 0 if the bytes are not (wholly) inside one. Thread-safe; the answer stays valid
 * while that file is open. */
typedef struct br_st_source {
    int fd;
    uint64_t offset;
    const char *path;
    uint64_t size;
} br_st_source;
int br_st_find_source(const void *data, uint64_t nbytes, br_st_source *out);

/* Remove directory entry `entry` of `dir` if it is a temporary file that a writer
 * of the output named `base` (any base if NULL) left behind when its process
 * died: a name ".BASE.tmp-PID-XXXXXX" whose process PID is gone (kill(PID, 0)
 * fails with ESRCH) and which no writer holds locked. Never a live process's
 * file. Returns 1 if it was removed. */
int br_st_remove_stale_temporary(const char *dir, const char *entry, const char *base);

/* A writer's metadata as the header will hold it: br_st_writer_final_meta sets
 * now the entries finish would add (the format keys of a BLR file; finish sets
 * them again, to the same values), then br_st_writer_meta_at lists every entry
 * (in the order set; BR_E_ARG when i is out of range). For a checksum of a file's
 * contents stored in its own header. */
br_status br_st_writer_final_meta(br_st_writer *w);
size_t br_st_writer_meta_count(const br_st_writer *w);
br_status br_st_writer_meta_at(const br_st_writer *w, size_t i, const char **key,
                               const char **value);
/* The bytes of tensor `name` added to a writer so far (BR_E_ARG if none was):
 * for a checksum over a file's tensors stored in its own header. */
br_status br_st_writer_tensor_bytes(const br_st_writer *w, const char *name, const void **data,
                                    uint64_t *nbytes);

/* The writer's tensor adder with an ownership flag: owned data are freed by the
 * writer (st_write.c). */
br_status br_st_writer_add_owned(br_st_writer *w, const char *name, br_st_dtype dtype, size_t ndim,
                                 const uint64_t *shape, void *data, int owned);
/* The context a writer reports to, and marking a file as the BLR layout. */
br_ctx *br_st_writer_ctx(const br_st_writer *w);
br_status br_st_writer_mark_blr(br_st_writer *w);

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
