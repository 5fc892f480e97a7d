/* Built when nvcc is absent: there is no CUDA backend, and asking for one says so. */
#include <stdio.h>

#include "core/internal.h"

const struct br_backend *br_cuda_backend(void) { return NULL; }

br_status br_cuda_devices(br_device_info *out, int max, int *count, char *err, size_t n) {
    (void)out;
    (void)max;
    if (count) *count = 0;
    if (err && n)
        snprintf(err, n, "this build of bitrank has no CUDA backend (nvcc was not found)");
    return BR_E_UNSUPPORTED;
}
