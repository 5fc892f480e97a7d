/* Without CUDA there is no device initialization: the job uses the host's. */
#include "compress/compress.h"

#ifndef BR_HAVE_CUDA
br_status br_svid_device_new(br_ctx *ctx, br_svid_device **out) {
    *out = NULL;
    return br_fail(ctx, BR_E_UNSUPPORTED, "Dual-SVID: this build has no device initialization");
}

void br_svid_device_free(br_svid_device *dev) { (void)dev; }

br_status br_svid_init_on(br_svid_device *dev, const float *w, const double *gram,
                          br_gram_cache *gc, uint64_t seed, br_blr_host *L,
                          br_svid_factors *factors) {
    (void)dev;
    (void)w;
    (void)gram;
    (void)gc;
    (void)seed;
    (void)L;
    (void)factors;
    return BR_E_UNSUPPORTED; /* no device can exist: br_svid_device_new always fails */
}

br_status br_svid_whitened_on(br_svid_device *dev, const float *w, const br_whitening *wh,
                              uint64_t seed, br_blr_host *L, br_svid_factors *factors) {
    (void)dev;
    (void)w;
    (void)wh;
    (void)seed;
    (void)L;
    (void)factors;
    return BR_E_UNSUPPORTED; /* no device can exist: br_svid_device_new always fails */
}

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
