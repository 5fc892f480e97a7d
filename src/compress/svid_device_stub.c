/* Without CUDA there is no device initialization: the job uses the host's. */
#include "compress/compress.h"

#ifndef BR_HAVE_CUDA
br_status br_svid_init_device(br_ctx *ctx, const float *w, const double *gram, uint64_t seed,
                              br_blr_host *L, br_svid_factors *factors) {
    (void)w;
    (void)gram;
    (void)seed;
    (void)L;
    (void)factors;
    return br_fail(ctx, BR_E_UNSUPPORTED, "Dual-SVID: this build has no device initialization");
}
#endif
