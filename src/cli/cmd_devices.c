/* `bitrank devices`: the CPU, each usable CUDA GPU or why there is none, and each
 * Vulkan device (opened in turn: its context says what it is or why it cannot be
 * used). */
#include <stdio.h>
#include <string.h>

#include "bitrank.h"
#include "cli/commands.h"

static void cuda_devices(void) {
    br_device_info info[16];
    int n = 0;
    char err[256] = "";
    if (br_cuda_devices(info, 16, &n, err, sizeof err) != BR_OK || n == 0) {
        printf("cuda     %s\n", err[0] ? err : "no usable CUDA GPU: no device found");
        return;
    }
    for (int i = 0; i < n; i++)
        printf("cuda:%-3d %s, %.1f GiB, compute capability %d.%d, %d SMs\n", info[i].index,
               info[i].name, (double)info[i].mem_total / (1024.0 * 1024.0 * 1024.0),
               info[i].cc_major, info[i].cc_minor, info[i].sm_count);
}

static void vulkan_devices(void) {
    for (int i = 0; i < 16; i++) {
        char dev[16], err[256] = "";
        snprintf(dev, sizeof dev, "vulkan:%d", i);
        br_ctx *ctx = NULL;
        br_status st = br_ctx_new(dev, &ctx, err, sizeof err);
        if (st == BR_OK) {
            printf("%s\n", br_ctx_device(ctx));
            br_ctx_free(ctx);
            continue;
        }
        if (st == BR_E_ARG) return; /* past the last device */
        /* no backend, driver or device at all: said once */
        if (!strncmp(err, "this build", 10) || !strncmp(err, "no Vulkan", 9)) {
            printf("vulkan   %s\n", err);
            return;
        }
        printf("%-8s %s\n", dev, err); /* a device without what the shaders need */
    }
}

int br_cmd_devices(int argc, char **argv) {
    if (argc > 1) {
        fprintf(stderr, "bitrank devices: unexpected argument '%s'\nusage: bitrank devices\n",
                argv[1]);
        return 2;
    }
    printf("cpu      the host CPU (always available)\n");
    cuda_devices();
    vulkan_devices();
    return 0;
}
