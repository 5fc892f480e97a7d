/* `bitrank devices`: the CPU, and each usable CUDA GPU or why there is none. */
#include <stdio.h>
#include <string.h>

#include "bitrank.h"
#include "cli/commands.h"

int br_cmd_devices(int argc, char **argv) {
    if (argc > 1) {
        fprintf(stderr, "bitrank devices: unexpected argument '%s'\nusage: bitrank devices\n",
                argv[1]);
        return 2;
    }
    printf("cpu      the host CPU (always available)\n");
    br_device_info info[16];
    int n = 0;
    char err[256] = "";
    if (br_cuda_devices(info, 16, &n, err, sizeof err) != BR_OK || n == 0) {
        printf("cuda     %s\n", err[0] ? err : "no usable CUDA GPU: no device found");
        return 0;
    }
    for (int i = 0; i < n; i++)
        printf("cuda:%-3d %s, %.1f GiB, compute capability %d.%d, %d SMs\n", info[i].index,
               info[i].name, (double)info[i].mem_total / (1024.0 * 1024.0 * 1024.0),
               info[i].cc_major, info[i].cc_minor, info[i].sm_count);
    return 0;
}
