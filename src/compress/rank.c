/* The rank of a layer from a bits-per-weight budget (the bit count of br_blr_bpw). */
#include <math.h>

#include "compress/compress.h"

/* Bits per weight of a layer: per path r·(m + n) sign bits and 16·(m + n + r) for the
 * f16 scales, over m·n weights (the same count as br_blr_bpw of the files section). */
static double bpw_of(size_t m, size_t n, size_t r, size_t paths) {
    double md = (double)m, nd = (double)n, rd = (double)r;
    return (double)paths * (rd * (md + nd) + 16.0 * (md + nd + rd)) / (md * nd);
}

br_status br_compress_rank(br_ctx *ctx, const char *name, size_t m, size_t n, size_t paths,
                           double bpw, size_t *rank) {
    const char *nm = name ? name : "layer";
    if (!rank) return br_fail(ctx, BR_E_ARG, "br_compress_rank: rank is NULL");
    *rank = 0;
    if (!m || !n) return br_fail(ctx, BR_E_SHAPE, "%s: shape [%zu][%zu] has no elements", nm, m, n);
    if (paths < 1 || paths > 2)
        return br_fail(ctx, BR_E_ARG, "%s: paths must be 1 or 2 (got %zu)", nm, paths);
    if (!(bpw > 0.0) || !isfinite(bpw))
        return br_fail(ctx, BR_E_ARG, "%s: bits per weight must be a positive number (got %g)", nm,
                       bpw);
    double need1 = bpw_of(m, n, 1, paths);
    if (need1 > bpw)
        return br_fail(ctx, BR_E_SHAPE,
                       "%s: %g bits per weight is too small for shape [%zu][%zu]: rank 1 with %zu "
                       "path%s needs %.4g",
                       nm, bpw, m, n, paths, paths > 1 ? "s" : "", need1);
    /* bpw(r) is increasing in r: solve for the real bound, then step to the
     * largest rank the exact count accepts, at most min(m, n) (a higher rank is
     * not a better approximation, only a larger one) */
    double md = (double)m, nd = (double)n;
    double bound = (bpw * md * nd / (double)paths - 16.0 * (md + nd)) / (md + nd + 16.0);
    size_t cap = m < n ? m : n;
    size_t r = bound >= (double)cap ? cap : bound >= 1.0 ? (size_t)bound : 1;
    while (r > 1 && bpw_of(m, n, r, paths) > bpw)
        r--;
    while (r + 1 <= cap && bpw_of(m, n, r + 1, paths) <= bpw)
        r++;
    *rank = r;
    return BR_OK;
}
