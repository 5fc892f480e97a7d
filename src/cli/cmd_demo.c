/* `bitrank demo`: for now a short op chain on built-in data (the compression issue
 * turns it into the main job on the embedded default). */
#include <stdio.h>
#include <string.h>

#include "bitrank.h"
#include "cli/commands.h"

int br_cmd_demo(int argc, char **argv) {
    const char *device = "auto";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            device = argv[++i];
        } else {
            fprintf(stderr, "bitrank demo: unknown option '%s'\nusage: bitrank demo [--device D]\n",
                    argv[i]);
            return 2;
        }
    }
    br_ctx *ctx = NULL;
    char err[256];
    if (br_ctx_new(device, &ctx, err, sizeof err) != BR_OK) {
        fprintf(stderr, "bitrank demo: %s\n", err);
        return 1;
    }
    printf("bitrank %s on %s\n", BITRANK_VERSION, br_ctx_device(ctx));
    br_ctx_free(ctx);
    return 0;
}
