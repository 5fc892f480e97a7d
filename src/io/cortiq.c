/* The cortiq `blr` payload: one BLR linear as the byte string cortiq runtimes map
 * (layout of cortiq-core's blr module, dtype 19; all integers little-endian):
 *
 *     header (16 bytes): u8 0x4C | u8 version 1 | u8 paths | u8 0 | u32 r | u32 m | u32 n
 *     per path:          h f16[m] | g f16[n] | ℓ f16[r]
 *                        S_U: m rows of r/8 bytes,  sign (i,k) = bit k%8 of byte i·r/8 + k/8
 *                        S_V transposed: r rows of n/8 bytes, sign (j,k) = bit j%8 of
 *                        byte k·n/8 + j/8
 *
 * Bit 1 is +1. The dimensions m (outputs, d_out) and n (inputs, d_in) are cortiq's
 * "d_out" and "d_in". */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "io/blr_layout.h"

#define CORTIQ_MAGIC 0x4C
#define CORTIQ_VERSION 1
#define CORTIQ_HEADER 16

/* Payload bytes for the shapes; 0 if it overflows. */
static uint64_t payload_size(uint64_t m, uint64_t n, uint64_t r, uint64_t paths) {
    uint64_t scales = 2 * (m + n + r); /* each < 2^32: no overflow */
    uint64_t u, v, per, all;
    if (!br_mul_u64(m, r / 8, &u) || !br_mul_u64(r, n / 8, &v)) return 0;
    per = scales + u;
    if (per < u || per + v < per) return 0;
    per += v;
    if (!br_mul_u64(per, paths, &all) || all + CORTIQ_HEADER < all) return 0;
    return all + CORTIQ_HEADER;
}

br_status br_blr_cortiq_encode(br_ctx *ctx, const br_blr_host *layer, void *dst, size_t cap,
                               size_t *size) {
    static const char *fn = "br_blr_cortiq_encode";
    BR_TRY(br_blr_check_layer(ctx, fn, layer));
    if (!size) return br_fail(ctx, BR_E_ARG, "%s: size is NULL", fn);
    size_t P = layer->paths, m = layer->m, n = layer->n, r = layer->r;
    if (r % 8 || n % 8)
        return br_fail(ctx, BR_E_UNSUPPORTED,
                       "%s: the cortiq payload needs rank and in_features multiples of 8 (r = %zu, "
                       "n = %zu)",
                       fn, r, n);
    if (m > UINT32_MAX || n > UINT32_MAX || r > UINT32_MAX)
        return br_fail(ctx, BR_E_UNSUPPORTED, "%s: the cortiq payload needs m, n, r < 2^32", fn);
    uint64_t total = payload_size(m, n, r, P);
    if (!total || total > SIZE_MAX)
        return br_fail(ctx, BR_E_OVERFLOW, "%s: payload size overflows", fn);
    *size = (size_t)total;
    if (!dst) return BR_OK;
    if (cap < total)
        return br_fail(ctx, BR_E_SIZE, "%s: dst holds %zu bytes, the payload needs %llu", fn, cap,
                       (unsigned long long)total);
    uint8_t *o = dst;
    memset(o, 0, (size_t)total);
    o[0] = CORTIQ_MAGIC;
    o[1] = CORTIQ_VERSION;
    o[2] = (uint8_t)P;
    o[3] = 0;
    br_put_le32(o + 4, (uint32_t)r);
    br_put_le32(o + 8, (uint32_t)m);
    br_put_le32(o + 12, (uint32_t)n);
    o += CORTIQ_HEADER;
    size_t words = (r + 31) / 32, rb = r / 8, nb = n / 8;
    for (size_t p = 0; p < P; p++) {
        const br_blr_path_host *ph = &layer->path[p];
        BR_TRY(br_blr_put_f16(ctx, fn, "(cortiq)", "h", p, ph->h, m, o));
        o += 2 * m;
        BR_TRY(br_blr_put_f16(ctx, fn, "(cortiq)", "g", p, ph->g, n, o));
        o += 2 * n;
        BR_TRY(br_blr_put_f16(ctx, fn, "(cortiq)", "l", p, ph->l, r, o));
        o += 2 * r;
        /* S_U: the library's rows of words, as bytes */
        for (size_t i = 0; i < m; i++)
            for (size_t b = 0; b < rb; b++)
                o[i * rb + b] = (uint8_t)(ph->bits_u[i * words + b / 4] >> (8 * (b % 4)));
        o += m * rb;
        /* S_V transposed: row k holds sign (j, k) for every input j */
        for (size_t j = 0; j < n; j++) {
            const uint32_t *v = ph->bits_v + j * words;
            for (size_t k = 0; k < r; k++)
                if (v[k / 32] >> (k % 32) & 1u) o[k * nb + j / 8] |= (uint8_t)(1u << (j % 8));
        }
        o += r * nb;
    }
    return BR_OK;
}

br_status br_blr_cortiq_probe(br_ctx *ctx, const char *where, const uint8_t *src, size_t len,
                              size_t *paths, size_t *r, size_t *m, size_t *n) {
    if (!src && len) return br_fail(ctx, BR_E_ARG, "%s: src is NULL", where);
    if (len < CORTIQ_HEADER)
        return br_fail(ctx, BR_E_FORMAT, "%s: %zu bytes is shorter than the 16-byte header", where,
                       len);
    if (src[0] != CORTIQ_MAGIC)
        return br_fail(ctx, BR_E_FORMAT, "%s: magic byte 0x%02x, expected 0x4C", where, src[0]);
    if (src[1] != CORTIQ_VERSION)
        return br_fail(ctx, BR_E_FORMAT, "%s: version %u is not supported (1 is)", where, src[1]);
    if (src[2] < 1 || src[2] > BR_BLR_MAX_PATHS)
        return br_fail(ctx, BR_E_FORMAT, "%s: paths = %u, expected 1 or 2", where, src[2]);
    if (src[3] != 0)
        return br_fail(ctx, BR_E_FORMAT, "%s: reserved header byte 3 is %u, expected 0", where,
                       src[3]);
    uint32_t rr = br_le32(src + 4), mm = br_le32(src + 8), nn = br_le32(src + 12);
    if (!rr || !mm || !nn || rr % 8 || nn % 8)
        return br_fail(ctx, BR_E_FORMAT,
                       "%s: r = %u, d_out = %u, d_in = %u: each must be ≥ 1, r and d_in "
                       "multiples of 8",
                       where, rr, mm, nn);
    uint64_t want = payload_size(mm, nn, rr, src[2]);
    if (want != len)
        return br_fail(ctx, BR_E_FORMAT,
                       "%s: %zu bytes, but r = %u, d_out = %u, d_in = %u, "
                       "paths = %u need %llu",
                       where, len, rr, mm, nn, src[2], (unsigned long long)want);
    *paths = src[2];
    *r = rr;
    *m = mm;
    *n = nn;
    return BR_OK;
}

br_status br_blr_cortiq_decode(br_ctx *ctx, const void *src, size_t len, br_blr_host *out) {
    static const char *fn = "br_blr_cortiq_decode";
    if (!out) return br_fail(ctx, BR_E_ARG, "%s: out is NULL", fn);
    memset(out, 0, sizeof *out);
    size_t P, r, m, n;
    BR_TRY(br_blr_cortiq_probe(ctx, fn, src, len, &P, &r, &m, &n));
    BR_TRY(br_blr_host_alloc(ctx, out, m, n, r, P));
    const uint8_t *s = (const uint8_t *)src + CORTIQ_HEADER;
    size_t words = (r + 31) / 32, rb = r / 8, nb = n / 8;
    for (size_t p = 0; p < P; p++) {
        br_blr_path_host *ph = &out->path[p];
        for (size_t i = 0; i < m; i++)
            ph->h[i] = br_half_to_float(br_le16(s + 2 * i));
        s += 2 * m;
        for (size_t j = 0; j < n; j++)
            ph->g[j] = br_half_to_float(br_le16(s + 2 * j));
        s += 2 * n;
        for (size_t k = 0; k < r; k++)
            ph->l[k] = br_half_to_float(br_le16(s + 2 * k));
        s += 2 * r;
        for (size_t i = 0; i < m; i++)
            for (size_t b = 0; b < rb; b++)
                ph->bits_u[i * words + b / 4] |= (uint32_t)s[i * rb + b] << (8 * (b % 4));
        s += m * rb;
        for (size_t k = 0; k < r; k++)
            for (size_t j = 0; j < n; j++)
                if (s[k * nb + j / 8] >> (j % 8) & 1u)
                    ph->bits_v[j * words + k / 32] |= 1u << (k % 32);
        s += r * nb;
    }
    return BR_OK;
}
