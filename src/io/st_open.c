/* Opening a checkpoint: the plain safetensors reader (st_read.c) reads and checks
 * the file, then the BLR layers its metadata and tensors name are found and checked
 * (st_blr.c). The two steps meet here, above both, so that the reader below knows
 * nothing of the layout above it. */
#include <stddef.h>

#include "io/blr_layout.h"

/* The BLR layers of a file the plain reader opened (st: its status), or the file
 * closed where they fail their checks. */
static br_status with_blr_layers(br_ctx *ctx, br_status st, br_st_file **out) {
    if (st != BR_OK) return st;
    st = br_st_scan_blr(ctx, *out);
    if (st != BR_OK) {
        br_st_close(*out);
        *out = NULL;
    }
    return st;
}

br_status br_st_open(br_ctx *ctx, const char *path, br_st_file **out) {
    return with_blr_layers(ctx, br_st_open_plain(ctx, path, out), out);
}

br_status br_st_open_memory(br_ctx *ctx, const char *name, const void *bytes, size_t size,
                            br_st_file **out) {
    return with_blr_layers(ctx, br_st_open_memory_plain(ctx, name, bytes, size, out), out);
}
