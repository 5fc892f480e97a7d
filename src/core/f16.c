/* IEEE binary16 <-> binary32, round to nearest even, subnormals kept. Written out
 * bit by bit so the CPU backend does not depend on the compiler's _Float16. */
#include <string.h>

#include "core/internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#define BR_F16C_DISPATCH 1
#endif

uint16_t br_half_from_float(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t exp = (u >> 23) & 0xffu;
    uint32_t man = u & 0x7fffffu;
    if (exp == 0xffu) /* Inf, or NaN kept quiet with its top payload bits */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int e = (int)exp - 127 + 15; /* biased f16 exponent */
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        /* subnormal (or zero): value = m · 2^-24 with m = mant / 2^(14 - e) */
        if (e < -10) return (uint16_t)sign; /* below half the smallest subnormal */
        uint32_t full = man | 0x800000u;    /* 24-bit significand */
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t q = full >> shift;
        uint32_t rem = full & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q); /* q may carry into the smallest normal: correct */
    }
    uint32_t q = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) q++; /* may carry into Inf: correct */
    return (uint16_t)(sign | q);
}

float br_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

size_t br_pad_rows(size_t m) { return (m + 127) / 128 * 128; }
size_t br_pad_tokens(size_t ntok) { return (ntok + 31) / 32 * 32; }

#ifdef BR_F16C_DISPATCH
/* vcvtps2ph with round to nearest even gives br_half_from_float's bits for every
 * one of the 2^32 floats (checked exhaustively; NaNs included: quiet
 * bit set, top payload bits kept), 8 at a time. */
__attribute__((target("avx,f16c"))) static void half_from_float_f16c(const float *x, uint16_t *out,
                                                                     size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h =
            _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(void *)(out + i), h);
    }
    for (; i < n; i++)
        out[i] = br_half_from_float(x[i]);
}

/* Whether the CPU converts with F16C (and the OS saves the AVX registers it uses):
 * CPUID leaf 1, then XGETBV. Asked once (relaxed atomics: any thread may ask
 * first, all get the same answer). */
static int have_f16c(void) {
    static _Atomic int known = -1;
    int v = atomic_load_explicit(&known, memory_order_relaxed);
    if (v >= 0) return v;
    unsigned a, b, c, d;
    v = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) && (c & bit_AVX) && (c & bit_OSXSAVE)) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        v = (lo & 6u) == 6u; /* XMM and YMM state enabled */
    }
    atomic_store_explicit(&known, v, memory_order_relaxed);
    return v;
}
#endif

#ifdef BR_F16C_DISPATCH
/* vcvtph2ps is exact for every f16 but quiets a signaling NaN; br_half_to_float
 * keeps NaN payloads as they are, so a group of 8 holding a NaN goes one by one. */
__attribute__((target("avx,f16c"))) static void half_to_float_f16c(const uint16_t *h, float *out,
                                                                   size_t n) {
    const __m128i mag = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(h + i));
        if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(v, mag), inf))) {
            for (size_t j = i; j < i + 8; j++)
                out[j] = br_half_to_float(h[j]);
        } else {
            _mm256_storeu_ps(out + i, _mm256_cvtph_ps(v));
        }
    }
    for (; i < n; i++)
        out[i] = br_half_to_float(h[i]);
}
#endif

void br_half_to_float_n(const uint16_t *h, float *out, size_t n) {
#ifdef BR_F16C_DISPATCH
    if (have_f16c()) {
        half_to_float_f16c(h, out, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        out[i] = br_half_to_float(h[i]);
}

void br_half_from_float_n(const float *x, uint16_t *out, size_t n) {
#ifdef BR_F16C_DISPATCH
    if (have_f16c()) {
        half_from_float_f16c(x, out, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        out[i] = br_half_from_float(x[i]);
}
