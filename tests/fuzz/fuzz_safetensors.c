/* libFuzzer target: the parsers that read untrusted bytes. The same input is read
 * as a whole safetensors file (header, tensor table, BLR layout check), as the
 * index of a sharded checkpoint, and as a cortiq blr payload. Whatever a parser
 * accepts is then read in full, so an offset that escapes the input shows up as
 * an ASan error. Build and run: scripts/fuzz. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bitrank.h"
#include "io/io_internal.h"

static br_ctx *fuzz_ctx(void) {
    static br_ctx *ctx;
    if (!ctx) {
        char err[256];
        if (br_ctx_new("cpu", &ctx, err, sizeof err) != BR_OK) ctx = NULL; /* messages dropped */
    }
    return ctx;
}

/* Touch every byte and convert what converts. */
static void read_everything(br_ctx *ctx, const br_st_file *f) {
    static float scratch[1 << 16];
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < br_st_count(f); i++) {
        const br_st_tensor *t = br_st_tensor_at(f, i);
        const uint8_t *p = t->data;
        for (uint64_t b = 0; b < t->nbytes; b++)
            sink ^= p[b];
        if (t->numel <= sizeof scratch / sizeof scratch[0])
            br_st_read_f32(ctx, f, t, 0, (size_t)t->numel, scratch);
        (void)br_st_find(f, t->name);
    }
    for (size_t i = 0; i < br_st_meta_count(f); i++) {
        const char *k, *v;
        br_st_meta_at(f, i, &k, &v);
        sink ^= (uint8_t)(strlen(k) + strlen(v));
    }
    for (size_t i = 0; i < br_st_blr_count(f); i++) {
        br_blr_host layer;
        if (br_st_read_blr(ctx, f, br_st_blr_at(f, i)->name, &layer) == BR_OK)
            br_blr_host_free(&layer);
    }
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    br_ctx *ctx = fuzz_ctx();
    /* an exact-size copy: reading one byte past the input is an ASan error */
    uint8_t *bytes = malloc(size ? size : 1);
    if (!bytes) return 0;
    memcpy(bytes, data, size);

    br_st_file *f = NULL;
    if (br_st_open_memory(ctx, "fuzz.safetensors", bytes, size, &f) == BR_OK) {
        read_everything(ctx, f);
        br_st_close(f);
    }

    br_st_index idx;
    if (br_st_index_parse(ctx, "fuzz.index.json", (const char *)bytes, size, &idx) == BR_OK)
        br_st_index_free(&idx);

    br_blr_host layer;
    if (br_blr_cortiq_decode(ctx, bytes, size, &layer) == BR_OK) br_blr_host_free(&layer);

    free(bytes);
    return 0;
}
