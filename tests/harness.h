/* The test harness: a context on the device under test, fresh random data,
 * poisoned outputs, f64 comparisons, and CHECK macros that count and report.
 *
 * The device under test is BITRANK_TEST_DEVICE (default "cpu"); BITRANK_TEST_CASES
 * (comma-separated case names) runs only those cases. A test binary run
 * with a device it cannot open exits 77, which CTest reports as skipped. */
#ifndef BR_TESTS_HARNESS_H
#define BR_TESTS_HARNESS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bitrank_ops.h"
#include "core/rng.h"

#define T_SKIP 77

static int t_checks, t_failures;
static const char *t_current = "";

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        t_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            t_failures++;                                                                          \
            fprintf(stderr, "FAIL [%s] %s:%d: ", t_current, __FILE__, __LINE__);                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* An op call that must succeed; on failure prints the context's message. */
#define CHECK_OK(ctx, call)                                                                        \
    do {                                                                                           \
        br_status t_st_ = (call);                                                                  \
        CHECK(t_st_ == BR_OK, "%s -> %s: %s", #call, br_status_name(t_st_), br_ctx_error(ctx));    \
    } while (0)

/* An op call that must fail with `want` and leave a message naming something. */
#define CHECK_FAILS(ctx, want, call)                                                               \
    do {                                                                                           \
        br_ctx_clear_error(ctx);                                                                   \
        br_status t_st_ = (call);                                                                  \
        CHECK(t_st_ == (want), "%s -> %s, expected %s", #call, br_status_name(t_st_),              \
              br_status_name(want));                                                               \
        CHECK(t_st_ == BR_OK || br_ctx_error(ctx)[0] != '\0', "%s: no error message", #call);      \
    } while (0)

/* CHECK_FAILS whose message also names `needle` (a stale message from an earlier
 * failure would name something else). */
#define CHECK_FAILS_MSG(ctx, want, needle, call)                                                   \
    do {                                                                                           \
        CHECK_FAILS(ctx, want, call);                                                              \
        CHECK(strstr(br_ctx_error(ctx), needle) != NULL, "%s: message \"%s\" does not name %s",    \
              #call, br_ctx_error(ctx), needle);                                                   \
    } while (0)

/* Fresh seed per run unless BITRANK_TEST_SEED is set; printed so a failure can be
 * replayed. */
static inline uint64_t t_seed(void) {
    static uint64_t seed;
    if (!seed) {
        const char *e = getenv("BITRANK_TEST_SEED");
        seed = e ? strtoull(e, NULL, 0) : ((uint64_t)time(NULL) << 20) ^ (uint64_t)clock();
        if (!seed) seed = 1;
        fprintf(stderr, "seed %llu (BITRANK_TEST_SEED to replay)\n", (unsigned long long)seed);
    }
    return seed;
}

static inline br_rng t_rng_for(uint64_t stream) {
    br_rng r;
    br_rng_seed(&r, t_seed() ^ (stream * 0x9E3779B97F4A7C15ull));
    return r;
}

static inline const char *t_device(void) {
    const char *d = getenv("BITRANK_TEST_DEVICE");
    return d && *d ? d : "cpu";
}

/* Context on the device under test; exits 77 (skip) if it cannot be opened. */
static inline br_ctx *t_ctx(void) {
    br_ctx *ctx = NULL;
    char err[256];
    if (br_ctx_new(t_device(), &ctx, err, sizeof err) != BR_OK) {
        fprintf(stderr, "skip: device %s: %s\n", t_device(), err);
        exit(T_SKIP);
    }
    return ctx;
}

/* Whether ctx's option `key` reads `want`. */
static inline int option_is(const br_ctx *ctx, const char *key, const char *want) {
    char v[64];
    return br_ctx_option(ctx, key, v, sizeof v) == BR_OK && !strcmp(v, want);
}

/* Whether the last op ran as `op`: br_ctx_last_kernel is "op", or names it in
 * parentheses at its end or before a space ("vk_tiled(op)", "vk_coop 16x16x16 (op)
 * tile 64"). */
static inline int ran_op(const br_ctx *ctx, const char *op) {
    const char *k = br_ctx_last_kernel(ctx);
    size_t lo = strlen(op);
    if (!strcmp(k, op)) return 1;
    for (const char *p = strchr(k, '('); p; p = strchr(p + 1, '('))
        if (!strncmp(p + 1, op, lo) && p[lo + 1] == ')' && (p[lo + 2] == '\0' || p[lo + 2] == ' '))
            return 1;
    return 0;
}

/* Whether ctx's GEMMs run on the wgmma kernels (a Hopper GPU and sm_90a code): the
 * kernel a small aligned br_mm runs on, probed once per process (the tests use one
 * device). It runs ops: read br_ctx_last_kernel before calling it. */
static inline int has_wgmma(br_ctx *ctx) {
    static int known = -1;
    if (known >= 0) return known;
    known = 0;
    if (!strcmp(br_ctx_backend(ctx), "cpu")) return known;
    br_buf *a = NULL, *p = NULL, *o = NULL;
    if (br_buf_new(ctx, BR_F16, 64 * 64, &a) == BR_OK && br_buf_new(ctx, BR_F16, 64 * 64, &p) == BR_OK &&
        br_buf_new(ctx, BR_F32, 64 * 64, &o) == BR_OK && br_buf_fill(a, 0, 64 * 64, 0) == BR_OK &&
        br_buf_fill(p, 0, 64 * 64, 0) == BR_OK) {
        br_gemm g = {.m = 64, .n = 64, .k = 64, .oscale = 1.0f};
        if (br_mm(ctx, a, p, o, g) == BR_OK)
            known = !strncmp(br_ctx_last_kernel(ctx), "wgmma", 5);
    }
    br_buf_free(a), br_buf_free(p), br_buf_free(o);
    br_ctx_clear_error(ctx);
    return known;
}

/* Context on the CPU (the reference backend). */
static inline br_ctx *t_cpu_ctx(void) {
    br_ctx *ctx = NULL;
    char err[256];
    if (br_ctx_new("cpu", &ctx, err, sizeof err) != BR_OK) {
        fprintf(stderr, "cannot open the CPU backend: %s\n", err);
        exit(1);
    }
    return ctx;
}

static inline void *t_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* The value of an f16 bit pattern, decoded in double independently of the library
 * (NaN for NaN patterns). */
static inline double t_f16_value(uint16_t h) {
    int e = (h >> 10) & 31, man = h & 1023;
    double v = e == 31  ? (man ? NAN : INFINITY)
               : e == 0 ? ldexp(man, -24)
                        : ldexp(1024 + man, e - 25);
    return h & 0x8000 ? -v : v;
}

/* A size uniform in [lo, hi]. */
static inline size_t t_rand_size(br_rng *r, size_t lo, size_t hi) {
    return lo + (size_t)(br_rng_u64(r) % (uint64_t)(hi - lo + 1));
}

/* Shape i of a test's list: fixed[i] for the first nfixed, then a random one with
 * *a in [lo_a, hi_a] and *b in [lo_b, hi_b]. */
static inline void t_pick_shape2(br_rng *r, const size_t (*fixed)[2], size_t nfixed, size_t i,
                                 size_t lo_a, size_t hi_a, size_t lo_b, size_t hi_b, size_t *a,
                                 size_t *b) {
    if (i < nfixed) {
        *a = fixed[i][0];
        *b = fixed[i][1];
    } else {
        *a = t_rand_size(r, lo_a, hi_a);
        *b = t_rand_size(r, lo_b, hi_b);
    }
}
/* The same with three dimensions, *c in [lo_c, hi_c]. */
static inline void t_pick_shape3(br_rng *r, const size_t (*fixed)[3], size_t nfixed, size_t i,
                                 size_t lo_a, size_t hi_a, size_t lo_b, size_t hi_b, size_t lo_c,
                                 size_t hi_c, size_t *a, size_t *b, size_t *c) {
    if (i < nfixed) {
        *a = fixed[i][0];
        *b = fixed[i][1];
        *c = fixed[i][2];
    } else {
        *a = t_rand_size(r, lo_a, hi_a);
        *b = t_rand_size(r, lo_b, hi_b);
        *c = t_rand_size(r, lo_c, hi_c);
    }
}

/* n floats uniform in [-scale, scale), never all zero. */
static inline float *t_rand(br_rng *r, size_t n, float scale) {
    float *v = t_xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = br_rng_sym(r) * scale;
    return v;
}

/* A buffer holding host data. */
static inline br_buf *t_buf_from(br_ctx *ctx, br_dtype dt, const void *host, size_t n) {
    br_buf *b = NULL;
    if (br_buf_new(ctx, dt, n, &b) != BR_OK || br_buf_upload(b, 0, host, n) != BR_OK) {
        fprintf(stderr, "buffer setup failed: %s\n", br_ctx_error(ctx));
        exit(1);
    }
    return b;
}

/* A buffer of n elements poisoned with `bits` (NaN for f32: 0x7fc00000; f16 NaN:
 * 0x7e00; a u32 pattern). */
static inline br_buf *t_buf_poison(br_ctx *ctx, br_dtype dt, size_t n, uint32_t bits) {
    br_buf *b = NULL;
    if (br_buf_new(ctx, dt, n, &b) != BR_OK || br_buf_fill(b, 0, n, bits) != BR_OK) {
        fprintf(stderr, "buffer setup failed: %s\n", br_ctx_error(ctx));
        exit(1);
    }
    return b;
}
#define T_NAN32 0x7fc00000u
#define T_NAN16 0x7e00u

static inline float *t_download_f32(br_ctx *ctx, const br_buf *b, size_t n) {
    float *v = t_xmalloc(n * sizeof *v);
    if (br_buf_download(b, 0, v, n) != BR_OK) {
        fprintf(stderr, "download failed: %s\n", br_ctx_error(ctx));
        exit(1);
    }
    return v;
}

static inline uint16_t *t_download_f16(br_ctx *ctx, const br_buf *b, size_t n) {
    uint16_t *v = t_xmalloc(n * sizeof *v);
    if (br_buf_download(b, 0, v, n) != BR_OK) {
        fprintf(stderr, "download failed: %s\n", br_ctx_error(ctx));
        exit(1);
    }
    return v;
}

/* ‖got − ref‖ / ‖ref‖ (NaN in got gives +Inf). */
static inline double t_rel_err(const float *got, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return sqrt(num / (den > 1e-300 ? den : 1e-300));
}

/* Number of elements whose bits differ. */
static inline size_t t_bits_differ32(const float *a, const float *b, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += memcmp(&a[i], &b[i], 4) != 0;
    return bad;
}
static inline size_t t_bits_differ16(const uint16_t *a, const uint16_t *b, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += a[i] != b[i];
    return bad;
}

/* Index of the first element whose bits differ, or n. */
static inline size_t t_first_diff32(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0) return i;
    return n;
}
static inline size_t t_first_diff16(const uint16_t *a, const uint16_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return i;
    return n;
}

/* Number of elements an op wrote over the poison: f32 ones no longer NaN, f16 ones
 * no longer T_NAN16. */
static inline size_t t_count_written32(const float *v, size_t n) {
    size_t written = 0;
    for (size_t i = 0; i < n; i++)
        written += !isnan(v[i]);
    return written;
}
static inline size_t t_count_written16(const uint16_t *v, size_t n) {
    size_t written = 0;
    for (size_t i = 0; i < n; i++)
        written += v[i] != T_NAN16;
    return written;
}

typedef void (*t_fn)(void);
typedef struct t_case {
    const char *name;
    t_fn fn;
} t_case;

/* The name at p of a comma-separated list: its length; *next is the name after it
 * (NULL after the last). */
static inline size_t t_item(const char *p, const char **next) {
    const char *end = strchr(p, ',');
    *next = end ? end + 1 : NULL;
    return end ? (size_t)(end - p) : strlen(p);
}
static inline int t_item_is(const char *p, size_t len, const char *name) {
    return strlen(name) == len && strncmp(p, name, len) == 0;
}
/* Whether `name` is in the comma-separated list `list`. */
static inline int t_listed(const char *list, const char *name) {
    for (const char *p = list, *next; p; p = next)
        if (t_item_is(p, t_item(p, &next), name)) return 1;
    return 0;
}

/* Runs every case (BITRANK_TEST_CASES=a,b,…: only those; a name the suite does not
 * have is an error, exit status 2); prints one summary line; exit status 0 only if
 * all passed. */
static inline int t_run(const char *suite, const t_case *cases, size_t n) {
    const char *only = getenv("BITRANK_TEST_CASES");
    if (only && *only)
        for (const char *p = only, *next; p; p = next) {
            size_t len = t_item(p, &next), i = 0;
            while (i < n && !t_item_is(p, len, cases[i].name))
                i++;
            if (i == n) {
                fprintf(stderr, "%s: BITRANK_TEST_CASES names %.*s, which this suite has not\n",
                        suite, (int)len, p);
                return 2;
            }
        }
    t_seed();
    for (size_t i = 0; i < n; i++) {
        if (only && *only && !t_listed(only, cases[i].name)) continue;
        t_current = cases[i].name;
        int before = t_failures;
        cases[i].fn();
        fprintf(stderr, "%s %s/%s\n", t_failures == before ? "ok  " : "FAIL", suite, cases[i].name);
    }
    printf("%s on %s: %d checks, %d failed\n", suite, t_device(), t_checks, t_failures);
    return t_failures ? 1 : 0;
}
#define T_RUN(suite, ...)                                                                          \
    int main(void) {                                                                               \
        static const t_case cases_[] = {__VA_ARGS__};                                              \
        return t_run(suite, cases_, sizeof cases_ / sizeof cases_[0]);                             \
    }
#define T_CASE(fn)                                                                                 \
    { #fn, fn }

/* The forms of br_blr_forward the tests run, each a br_blr_fwd descriptor. */
static inline br_status fwd_plain(br_blr *l, br_blr_scratch *s, const br_buf *x, br_buf *y,
                                  size_t ntok) {
    br_blr_fwd f = {.x = x, .out = y, .ntok = ntok};
    return br_blr_forward(l, s, &f);
}
static inline br_status fwd_residual(br_blr *l, br_blr_scratch *s, const br_buf *x,
                                     const br_buf *target, float alpha, br_buf *out, size_t ntok) {
    br_blr_fwd f = {.x = x, .target = target, .alpha = alpha, .out = out, .ntok = ntok};
    return br_blr_forward(l, s, &f);
}
static inline br_status fwd_loss(br_blr *l, br_blr_scratch *s, const br_buf *x,
                                 const br_buf *target, float alpha, float gscale, br_buf *out,
                                 size_t ntok) {
    br_blr_fwd f = {
        .x = x, .target = target, .alpha = alpha, .gscale = gscale, .out = out, .ntok = ntok};
    return br_blr_forward(l, s, &f);
}
static inline br_status fwd_staged(br_blr *l, br_blr_scratch *s, const br_buf *x16, br_buf *y,
                                   size_t ntok) {
    br_blr_fwd f = {.x16 = x16, .out = y, .ntok = ntok};
    return br_blr_forward(l, s, &f);
}
static inline br_status fwd_loss_staged(br_blr *l, br_blr_scratch *s, const br_buf *x16,
                                        const br_buf *target, float alpha, float gscale,
                                        br_buf *out, size_t ntok) {
    br_blr_fwd f = {
        .x16 = x16, .target = target, .alpha = alpha, .gscale = gscale, .out = out, .ntok = ntok};
    return br_blr_forward(l, s, &f);
}

#endif
