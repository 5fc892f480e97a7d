/* Internals of the BLR layout (docs/FORMAT.md), shared by the files that read and
 * write it above the plain safetensors reader and writer (io/io_internal.h): the
 * host form of a layer (blr_host.c), its two encodings (st_blr.c, cortiq.c) and
 * the open that finds a file's layers (st_open.c). */
#ifndef BR_IO_BLR_LAYOUT_H
#define BR_IO_BLR_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "bitrank.h"
#include "io/io_internal.h"

/* Find the BLR layers of an opened file and check their tensors (st_blr.c). */
br_status br_st_scan_blr(br_ctx *ctx, br_st_file *f);

/* Shared by the two BLR encodings (st_blr.c, cortiq.c) from blr_host.c: a layer's
 * arguments checked (fn names the caller in messages); scales f32 → f16 bytes
 * (little-endian, round to nearest even), BR_E_NONFINITE naming layer, array and
 * index if one is not finite or overflows f16. */
br_status br_blr_check_layer(br_ctx *ctx, const char *fn, const br_blr_host *layer);
br_status br_blr_put_f16(br_ctx *ctx, const char *fn, const char *name, const char *what, size_t p,
                         const float *src, size_t n, uint8_t *dst);
/* The cortiq header checked against `len` bytes (cortiq.c). */
br_status br_blr_cortiq_probe(br_ctx *ctx, const char *where, const uint8_t *src, size_t len,
                              size_t *paths, size_t *r, size_t *m, size_t *n);

#endif
