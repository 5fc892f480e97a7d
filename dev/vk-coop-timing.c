/* The emulated cooperative-matrix GEMM on a Vulkan device without cooperative
 * matrices (lavapipe): per mode, the first call (pipeline made) and a second one
 * (the shader alone), at one shape. A development aid for mm_coop.comp's cost on
 * lavapipe, where test_gemm runs it in every shape and mode.
 *   cc -O2 -Iinclude -Isrc dev/vk-coop-timing.c build-vkh/libbitrank.a -lvulkan -lopenblas \
 *      -llapacke -llapack -fopenmp -lm -o /tmp/vkct
 *   /tmp/vkct [M N K [options]]   (default 300 256 128 vk_gemm=coop_emulated)
 * MESA_SHADER_CACHE_DISABLE=true: the first calls time lavapipe's compiles, not its
 * disk cache. k past about 7000 ends lavapipe's invocations early (out[last] short). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bitrank.h"
#include "bitrank_ops.h"
#include "ops/layer_ops.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
    size_t m = argc > 3 ? strtoul(argv[1], 0, 10) : 300, n = argc > 3 ? strtoul(argv[2], 0, 10) : 256,
           k = argc > 3 ? strtoul(argv[3], 0, 10) : 128;
    const char *opt = argc > 4 ? argv[4] : "vk_gemm=coop_emulated";
    char err[256];
    br_ctx *ctx;
    if (br_ctx_new("vulkan", &ctx, err, sizeof err) != BR_OK) return fprintf(stderr, "%s\n", err), 1;
    if (br_ctx_set_options(ctx, opt) != BR_OK) return fprintf(stderr, "%s\n", br_ctx_error(ctx)), 1;
    br_buf *a, *p, *b, *o;
    size_t big = (m > n ? m : n) * k;
    br_buf_new(ctx, BR_F16, big, &a), br_buf_new(ctx, BR_F16, big, &p);
    size_t words = k * ((n + 31) / 32); /* bits cols; bits rows take n·k/32, no more */
    br_buf_new(ctx, BR_U32, words, &b), br_buf_new(ctx, BR_F32, m * n, &o);
    br_buf_fill(a, 0, big, 0x3C003C00u), br_buf_fill(p, 0, big, 0x3C003C00u);
    br_buf_fill(b, 0, words, 0xffffffffu);
    for (int mode = 0; mode < 4; mode++)
        for (int rep = 0; rep < 2; rep++) {
            br_gemm g = {.m = m, .n = n, .k = k, .oscale = 1.0f};
            double t0 = now();
            br_status st = mode == 0   ? br_mm(ctx, a, p, o, g)
                           : mode == 3 ? br_mm_tn(ctx, a, p, n, o, g)
                                       : br_mm_bits(ctx, a, b, mode == 1 ? BR_BITS_ROWS : BR_BITS_COLS, o, g);
            if (st == BR_OK) st = br_ctx_sync(ctx);
            float v = 0;
            br_buf_download(o, m * n - 1, &v, 1);
            printf("mode %d %s: %.3f s  %s  out[last] %g\n", mode, rep ? "again" : "first", now() - t0,
                   st == BR_OK ? br_ctx_last_kernel(ctx) : br_ctx_error(ctx), v);
        }
    br_buf_free(a), br_buf_free(p), br_buf_free(b), br_buf_free(o);
    br_ctx_free(ctx);
    return 0;
}
