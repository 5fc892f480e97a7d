/* A small deterministic random generator (xoshiro256**, seeded by splitmix64) for
 * tests, synthetic calibration data and initialization. Header-only. */
#ifndef BR_CORE_RNG_H
#define BR_CORE_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct br_rng {
    uint64_t s[4];
} br_rng;

static inline uint64_t br_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline void br_rng_seed(br_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++)
        r->s[i] = br_splitmix64(&seed);
}

static inline uint64_t br_rng_u64(br_rng *r) {
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5;
    uint64_t out = ((x << 7) | (x >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return out;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double br_rng_unit(br_rng *r) { return (double)(br_rng_u64(r) >> 11) * 0x1.0p-53; }

/* Uniform in [-1, 1). */
static inline float br_rng_sym(br_rng *r) { return (float)(2.0 * br_rng_unit(r) - 1.0); }

/* Standard normal (Box–Muller, one value per call). */
static inline double br_rng_normal(br_rng *r) {
    double u = br_rng_unit(r), v = br_rng_unit(r);
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#endif
