/* The checks the BLR layer's forward and backward ops share (blr_internal.h), in
 * one file below both so that neither calls into the other. */
#include <math.h>

#include "blr/blr_internal.h"
#include "ops/check.h"

/* The checks every layer op starts with. */
br_status br_blr_check_run(const br_blr *l, const br_blr_scratch *s, const char *fn, size_t ntok) {
    if (!l) return BR_E_ARG;
    if (!s) return br_fail(l->ctx, BR_E_ARG, "%s: scratch is NULL", fn);
    if (s->layer != l)
        return br_fail(l->ctx, BR_E_ARG, "%s: the scratch was made for another layer", fn);
    BR_TRY(br_check_dim(l->ctx, fn, "ntok", ntok));
    if (ntok > s->ntok)
        return br_fail(l->ctx, BR_E_SIZE, "%s: ntok = %zu exceeds the scratch's %zu tokens", fn,
                       ntok, s->ntok);
    return BR_OK;
}

br_status br_blr_check_gscale(const br_blr *l, const char *fn, float gscale) {
    int e = 0;
    if (!(gscale > 0) || !isfinite(gscale) || frexpf(gscale, &e) != 0.5f)
        return br_fail(l->ctx, BR_E_ARG, "%s: gscale = %g is not a positive power of two", fn,
                       (double)gscale);
    return BR_OK;
}
