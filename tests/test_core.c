/* The core: f16 conversion against exact double arithmetic, buffers (new, view,
 * transfers, fill, copy and their bounds), contexts (device strings, options),
 * graph recording and replay, and the op profiler. */
#include <float.h>

#include "core/internal.h"
#include "harness.h"

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t bits_of_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---------------------------------------------------------------- f16 */

/* Every non-negative f16 value by pattern, 0x0000 .. 0x7c00, where 0x7c00 stands
 * for 65536: the value an unbounded exponent range would have there, which makes
 * rounding to Inf fall out of ordinary round-to-nearest-even. Increasing. */
static double f16_ladder[0x7c01];

static void init_ladder(void) {
    for (uint32_t h = 0; h < 0x7c00; h++)
        f16_ladder[h] = t_f16_value((uint16_t)h);
    f16_ladder[0x7c00] = 65536.0;
}

/* f32 → f16, round to nearest even, by search over the exact values in double. */
static uint16_t ref_half(float x) {
    uint32_t u = bits_of_f32(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (isnan(x)) return (uint16_t)(sign | 0x7e00u); /* any NaN: checked apart */
    double a = fabs((double)x);
    if (a >= 65536.0) return (uint16_t)(sign | 0x7c00u);
    size_t lo = 0, hi = 0x7c00; /* ladder[lo] <= a < ladder[hi] */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (f16_ladder[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    double below = a - f16_ladder[lo], above = f16_ladder[hi] - a; /* both exact */
    size_t pick = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
    return (uint16_t)(sign | pick);
}

static int half_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu); }

static void half_every_pattern_round_trips(void) {
    size_t bad_value = 0, bad_trip = 0, bad_nan = 0;
    for (uint32_t p = 0; p < 65536; p++) {
        uint16_t h = (uint16_t)p;
        float f = br_half_to_float(h);
        if (half_is_nan(h)) {
            uint16_t back = br_half_from_float(f);
            /* NaN stays NaN with its sign; a quiet NaN keeps its payload */
            bad_nan += !isnan(f) || !half_is_nan(back) || (back & 0x8000) != (h & 0x8000) ||
                       ((h & 0x200) && back != h);
            continue;
        }
        float want = (float)t_f16_value(h);
        bad_value += bits_of_f32(f) != bits_of_f32(want);
        bad_trip += br_half_from_float(f) != h;
    }
    CHECK(bad_value == 0, "br_half_to_float: %zu patterns decode wrongly", bad_value);
    CHECK(bad_trip == 0, "br_half_from_float(br_half_to_float(h)) != h for %zu patterns", bad_trip);
    CHECK(bad_nan == 0, "%zu NaN patterns lost NaN-ness, sign or payload", bad_nan);
}

/* Compares br_half_from_float with the reference; counts and reports a few misses. */
static size_t check_from_float(float x, size_t *reported) {
    uint16_t got = br_half_from_float(x), want = ref_half(x);
    int ok = isnan(x) ? half_is_nan(got) && (got & 0x8000) == (want & 0x8000) : got == want;
    if (!ok && (*reported)++ < 8)
        fprintf(stderr, "  br_half_from_float(%a = 0x%08x) = 0x%04x, want 0x%04x\n", (double)x,
                bits_of_f32(x), got, want);
    return !ok;
}

/* Every rounding boundary: each f16 value, the midpoint to the next one (a tie),
 * one f32 ulp either side of both; then edges and random patterns. */
static void half_from_float_is_exact_rounding(void) {
    init_ladder();
    size_t bad = 0, reported = 0, n = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        float v = (float)f16_ladder[h];
        float mid = (float)((f16_ladder[h] + f16_ladder[h + 1]) / 2); /* exact in f32 */
        float probes[6] = {v,   nextafterf(v, INFINITY),   nextafterf(v, 0.0f),
                           mid, nextafterf(mid, INFINITY), nextafterf(mid, 0.0f)};
        for (int i = 0; i < 6; i++) {
            bad += check_from_float(probes[i], &reported);
            bad += check_from_float(-probes[i], &reported);
            n += 2;
        }
    }
    const float edges[] = {0.0f,
                           -0.0f,
                           FLT_MIN,
                           FLT_TRUE_MIN,
                           FLT_MAX,
                           -FLT_MAX,
                           INFINITY,
                           -INFINITY,
                           65504.0f,
                           65519.996f,
                           65520.0f,
                           -65520.0f,
                           65536.0f,
                           0x1p-24f,
                           0x1p-25f,
                           0x1.000002p-25f,
                           0x1.8p-24f,
                           0x1.4p-23f,
                           0x1p-14f,
                           0x1.ff8p-15f,
                           0x1.ffcp-15f,
                           0x1p-26f,
                           1.0f,
                           0x1.002p0f,
                           0x1.006p0f,
                           -0x1.002p0f,
                           0x1.fffp15f,
                           2048.0f,
                           2049.0f,
                           2051.0f,
                           1e-8f,
                           3.14159265f,
                           NAN,
                           -NAN,
                           f32_from_bits(0x7f800001u),
                           f32_from_bits(0xff800001u),
                           f32_from_bits(0x7fbfffffu)};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++, n++)
        bad += check_from_float(edges[i], &reported);
    /* signalling NaNs must not become Inf */
    CHECK(half_is_nan(br_half_from_float(f32_from_bits(0x7f800001u))), "sNaN became 0x%04x",
          br_half_from_float(f32_from_bits(0x7f800001u)));
    br_rng r = t_rng_for(21);
    for (int i = 0; i < 400000; i++, n += 2) {
        bad += check_from_float(f32_from_bits((uint32_t)br_rng_u64(&r)), &reported);
        /* and dense over the f16 range, subnormals included */
        bad += check_from_float(ldexpf(br_rng_sym(&r), (int)(br_rng_u64(&r) % 44) - 27), &reported);
    }
    CHECK(bad == 0, "br_half_from_float: %zu of %zu values round wrongly", bad, n);
    CHECK(br_pad_rows(1) == 128 && br_pad_rows(128) == 128 && br_pad_rows(129) == 256,
          "br_pad_rows");
    CHECK(br_pad_tokens(1) == 32 && br_pad_tokens(64) == 64 && br_pad_tokens(70) == 96,
          "br_pad_tokens");
}

/* ---------------------------------------------------------------- buffers */

static void buffer_new_and_views(void) {
    br_ctx *ctx = t_ctx();
    br_buf *b = NULL, *v = NULL, *vv = NULL, *nv = NULL;
    CHECK(br_buf_new(NULL, BR_F32, 4, &b) == BR_E_ARG && b == NULL, "NULL ctx accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "out is NULL", br_buf_new(ctx, BR_F32, 4, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "count is 0", br_buf_new(ctx, BR_F32, 0, &b));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "dtype", br_buf_new(ctx, (br_dtype)7, 4, &b));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "2^40", br_buf_new(ctx, BR_F32, (size_t)1 << 41, &b));
    CHECK_FAILS_MSG(ctx, BR_E_OVERFLOW, "2^40", br_buf_new(ctx, BR_F16, SIZE_MAX, &b));
    CHECK(b == NULL, "a failed br_buf_new left *out set");

    CHECK(br_dtype_size(BR_F32) == 4 && br_dtype_size(BR_F16) == 2 && br_dtype_size(BR_U32) == 4,
          "dtype sizes");
    CHECK(!strcmp(br_dtype_name(BR_F32), "f32") && !strcmp(br_dtype_name(BR_F16), "f16") &&
              !strcmp(br_dtype_name(BR_U32), "u32"),
          "dtype names");
    CHECK(br_buf_count(NULL) == 0, "count of NULL");

    const br_dtype dts[3] = {BR_F32, BR_F16, BR_U32};
    for (int d = 0; d < 3; d++) {
        size_t n = 1000 + (size_t)d, es = br_dtype_size(dts[d]);
        CHECK_OK(ctx, br_buf_new(ctx, dts[d], n, &b));
        CHECK(br_buf_count(b) == n && br_buf_dtype(b) == dts[d], "count/dtype of a new buffer");
        unsigned char *host = t_xmalloc(n * es), *back = t_xmalloc(n * es);
        for (size_t i = 0; i < n * es; i++)
            host[i] = (unsigned char)(i * 7 + 3);
        CHECK_OK(ctx, br_buf_upload(b, 0, host, n));
        /* a view of a view: offsets compose */
        CHECK_OK(ctx, br_buf_view(b, 100, 800, &v));
        CHECK_OK(ctx, br_buf_view(v, 50, 20, &vv));
        CHECK(br_buf_count(vv) == 20 && br_buf_dtype(vv) == dts[d], "view count/dtype");
        CHECK_OK(ctx, br_buf_download(vv, 0, back, 20));
        CHECK(memcmp(back, host + 150 * es, 20 * es) == 0, "view of a view reads the wrong data");
        /* writes through a view land in the parent */
        unsigned char patch[8 * 4];
        for (size_t i = 0; i < sizeof patch; i++)
            patch[i] = (unsigned char)(0xA0 + i);
        CHECK_OK(ctx, br_buf_upload(vv, 3, patch, 8));
        memcpy(host + 153 * es, patch, 8 * es);
        CHECK_OK(ctx, br_buf_download(b, 0, back, n));
        CHECK(memcmp(back, host, n * es) == 0, "upload through a view went astray");
        /* partial transfers at offsets */
        CHECK_OK(ctx, br_buf_download(b, n - 5, back, 5));
        CHECK(memcmp(back, host + (n - 5) * es, 5 * es) == 0, "download at an offset");
        CHECK_OK(ctx, br_buf_upload(b, 0, NULL, 0));
        CHECK_OK(ctx, br_buf_download(b, n, NULL, 0));

        CHECK_FAILS_MSG(ctx, BR_E_SIZE, "outside", br_buf_view(b, n - 3, 4, &nv));
        CHECK_FAILS_MSG(ctx, BR_E_SIZE, "outside", br_buf_view(b, n + 1, 1, &nv));
        CHECK_FAILS_MSG(ctx, BR_E_SIZE, "outside", br_buf_view(b, 0, 0, &nv));
        CHECK_FAILS_MSG(ctx, BR_E_SIZE, "outside", br_buf_view(b, 2, SIZE_MAX, &nv));
        CHECK(nv == NULL, "a failed view left *out set");
        CHECK(br_buf_view(NULL, 0, 1, &nv) == BR_E_ARG, "NULL parent accepted");
        CHECK(br_buf_view(b, 0, 1, NULL) == BR_E_ARG, "NULL out accepted");
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "out is NULL", br_buf_view(b, 0, 1, NULL));
        CHECK_FAILS_MSG(ctx, BR_E_SIZE, "br_buf_upload", br_buf_upload(b, n - 1, host, 2));
        CHECK_FAILS_MSG(ctx, BR_E_SIZE, "br_buf_upload", br_buf_upload(b, 1, host, SIZE_MAX));
        CHECK_FAILS_MSG(ctx, BR_E_SIZE, "br_buf_download", br_buf_download(b, n + 1, back, 0));
        CHECK_FAILS_MSG(ctx, BR_E_SIZE, "br_buf_download", br_buf_download(vv, 0, back, 21));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "src is NULL", br_buf_upload(b, 0, NULL, 1));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "dst is NULL", br_buf_download(b, 0, NULL, 1));
        CHECK(br_buf_upload(NULL, 0, host, 1) == BR_E_ARG, "NULL buffer accepted");
        CHECK(br_buf_download(NULL, 0, back, 1) == BR_E_ARG, "NULL buffer accepted");
        /* the parent is still whole after the failures */
        CHECK_OK(ctx, br_buf_download(b, 0, back, n));
        CHECK(memcmp(back, host, n * es) == 0, "a failed transfer changed the buffer");
        br_buf_free(vv); /* views free only themselves */
        br_buf_free(v);
        v = vv = NULL;
        CHECK_OK(ctx, br_buf_download(b, 0, back, n));
        CHECK(memcmp(back, host, n * es) == 0, "freeing a view changed the parent");
        br_buf_free(b);
        free(host);
        free(back);
    }
    br_buf_free(NULL);
    br_ctx_free(ctx);
}

static void buffer_fill_and_copy(void) {
    br_ctx *ctx = t_ctx(), *other = t_cpu_ctx();
    br_rng r = t_rng_for(22);
    size_t n = 777;
    float *x = t_rand(&r, n, 3.0f);
    br_buf *f = t_buf_from(ctx, BR_F32, x, n);
    CHECK_OK(ctx, br_buf_fill(f, 10, 20, T_NAN32));
    float *got = t_download_f32(ctx, f, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += (i >= 10 && i < 30) ? bits_of_f32(got[i]) != T_NAN32
                                   : bits_of_f32(got[i]) != bits_of_f32(x[i]);
    CHECK(bad == 0, "fill of [10, 30) of an f32 buffer: %zu elements wrong", bad);
    free(got);

    /* f16: the low 16 bits of the pattern */
    br_buf *h = t_buf_poison(ctx, BR_F16, n, 0x1111), *hv;
    CHECK_OK(ctx, br_buf_view(h, 5, n - 5, &hv));
    CHECK_OK(ctx, br_buf_fill(hv, 1, 300, 0xABCD3C00u));
    uint16_t *g16 = t_download_f16(ctx, h, n);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += g16[i] != ((i >= 6 && i < 306) ? 0x3C00 : 0x1111);
    CHECK(bad == 0, "fill of an f16 view: %zu elements wrong", bad);
    free(g16);

    br_buf *u = t_buf_poison(ctx, BR_U32, 33, 0xDEADBEEFu);
    uint32_t u32[33];
    CHECK_OK(ctx, br_buf_download(u, 0, u32, 33));
    bad = 0;
    for (int i = 0; i < 33; i++)
        bad += u32[i] != 0xDEADBEEFu;
    CHECK(bad == 0, "u32 fill");
    CHECK_OK(ctx, br_buf_fill(u, 33, 0, 0));
    CHECK(br_buf_fill(NULL, 0, 1, 0) == BR_E_ARG, "NULL buffer accepted");
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "br_buf_fill", br_buf_fill(u, 30, 4, 0));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "br_buf_fill", br_buf_fill(u, 34, 0, 0));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "br_buf_fill", br_buf_fill(u, 1, SIZE_MAX, 0));

    /* copy between buffers and views, at offsets */
    br_buf *dst = t_buf_poison(ctx, BR_F32, n, T_NAN32);
    CHECK_OK(ctx, br_buf_copy(dst, 100, f, 200, 300));
    CHECK_OK(ctx, br_buf_copy(dst, 0, f, 0, 0));
    got = t_download_f32(ctx, dst, n);
    float *fx = t_download_f32(ctx, f, n);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += (i >= 100 && i < 400) ? bits_of_f32(got[i]) != bits_of_f32(fx[i + 100])
                                     : !isnan(got[i]);
    CHECK(bad == 0, "copy of 300 elements at offsets: %zu wrong", bad);
    free(got);
    free(fx);
    br_buf *ff = t_buf_poison(other, BR_F32, n, 0);
    CHECK(br_buf_copy(NULL, 0, f, 0, 1) == BR_E_ARG, "NULL dst accepted");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "src is NULL", br_buf_copy(dst, 0, NULL, 0, 1));
    CHECK_FAILS_MSG(ctx, BR_E_DTYPE, "src is f16", br_buf_copy(dst, 0, h, 0, 1));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "another context", br_buf_copy(dst, 0, ff, 0, 1));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "dst elements", br_buf_copy(dst, n - 1, f, 0, 2));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "src elements", br_buf_copy(dst, 0, f, n - 1, 2));
    CHECK_FAILS_MSG(ctx, BR_E_SIZE, "dst elements", br_buf_copy(dst, 1, f, 0, SIZE_MAX));

    br_buf *bufs[] = {f, hv, h, u, dst};
    for (size_t i = 0; i < 5; i++)
        br_buf_free(bufs[i]);
    br_buf_free(ff);
    free(x);
    br_ctx_free(other);
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- contexts */

static void context_device_strings(void) {
    static const char *const bad[] = {
        "",          "gpu",       "CPU",      " cpu",       "cpu ",     "cuda:",     "cuda:x",
        "cuda:-1",   "cuda:1x",   "cuda:+",   "cuda:99999", "cuda0",    "cuda::0",   "auto:1",
        "cuda:+1",   "cuda: 1",   "cuda:\t0", "vulkan:",    "vulkan:x", "vulkan:-1", "vulkan0",
        "vulkan::0", "vulkan:+1", "Vulkan",   "vulkan:1x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        static int dummy;
        br_ctx *ctx = (br_ctx *)(void *)&dummy; /* must be reset to NULL */
        char err[128] = "";
        br_status st = br_ctx_new(bad[i], &ctx, err, sizeof err);
        CHECK(st != BR_OK && ctx == NULL && err[0], "device \"%s\": %s, ctx %p, err \"%s\"", bad[i],
              br_status_name(st), (void *)ctx, err);
        CHECK(st == BR_E_ARG, "device \"%s\": %s, expected BR_E_ARG", bad[i], br_status_name(st));
        CHECK(br_ctx_new(bad[i], &ctx, NULL, 0) == st, "no error buffer: a different status");
    }
    /* a tiny error buffer is terminated, not overrun */
    char tiny[6] = {'x', 'x', 'x', 'x', 'x', 'x'};
    br_ctx *ctx = NULL;
    CHECK(br_ctx_new("nope", &ctx, tiny, 4) != BR_OK, "\"nope\" accepted");
    CHECK(tiny[3] == '\0' && tiny[4] == 'x', "error buffer overrun or unterminated");
    CHECK(br_ctx_new("cpu", NULL, tiny, sizeof tiny) == BR_E_ARG, "NULL out accepted");

    /* a CUDA device this build or machine does not have */
    char err[256] = "";
    br_status st = br_ctx_new("cuda:1000", &ctx, err, sizeof err);
    CHECK(st != BR_OK && ctx == NULL && err[0], "cuda:1000 opened (%s)", br_status_name(st));
    /* nor a Vulkan device (a build without Vulkan says so: BR_E_UNSUPPORTED) */
    st = br_ctx_new("vulkan:1000", &ctx, err, sizeof err);
    CHECK(st != BR_OK && ctx == NULL && err[0], "vulkan:1000 opened (%s)", br_status_name(st));

    CHECK_OK(ctx, br_ctx_new("cpu", &ctx, err, sizeof err));
    CHECK(!strcmp(br_ctx_backend(ctx), "cpu") && br_ctx_device(ctx)[0], "cpu backend name");
    CHECK(!strcmp(br_ctx_error(ctx), ""), "fresh context has an error message");
    CHECK_OK(ctx, br_ctx_sync(ctx));
    br_ctx_free(ctx);

    /* auto: CUDA when a CUDA GPU is usable; else a Vulkan GPU, never a software Vulkan
     * device (lavapipe), or the CPU */
    br_device_info info[4];
    int count = -1;
    st = br_cuda_devices(info, 4, &count, err, sizeof err);
    CHECK((st == BR_OK) == (count > 0), "br_cuda_devices: %s with count %d", br_status_name(st),
          count);
    CHECK(st == BR_OK || err[0], "br_cuda_devices failed without a message");
    for (const char *dev = "auto";; dev = NULL) {
        ctx = NULL;
        CHECK_OK(ctx, br_ctx_new(dev, &ctx, err, sizeof err));
        if (ctx) {
            const char *be = br_ctx_backend(ctx);
            CHECK(count > 0 ? !strcmp(be, "cuda") : strcmp(be, "cuda") != 0,
                  "%s picked %s with %d GPUs", dev ? dev : "NULL", be, count);
            CHECK(strcmp(be, "vulkan") != 0 || !strstr(br_ctx_device(ctx), "software"),
                  "%s picked the software Vulkan device %s", dev ? dev : "NULL",
                  br_ctx_device(ctx));
            br_ctx_free(ctx);
        }
        if (!dev) break;
    }
    br_ctx_free(NULL);
    CHECK(br_ctx_sync(NULL) == BR_E_ARG, "sync of NULL");
    CHECK(br_ctx_error(NULL) != NULL, "error message of NULL is NULL");

    static const br_status all[] = {
        BR_OK,         BR_E_ARG,       BR_E_SHAPE,  BR_E_DTYPE,       BR_E_SIZE,
        BR_E_OVERFLOW, BR_E_NOMEM,     BR_E_DEVICE, BR_E_UNSUPPORTED, BR_E_IO,
        BR_E_FORMAT,   BR_E_NONFINITE, BR_E_STATE};
    size_t ns = sizeof all / sizeof all[0];
    for (size_t i = 0; i < ns; i++) {
        CHECK(!strncmp(br_status_name(all[i]), "BR_", 3), "status %d has no name", (int)all[i]);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(br_status_name(all[i]), br_status_name(all[j])), "two statuses share %s",
                  br_status_name(all[i]));
    }
    CHECK(br_status_name((br_status)999) != NULL, "unknown status name is NULL");
}

static void context_options(void) {
    /* defaults, with the environment's override cleared */
    unsetenv("BITRANK_OPTIONS");
    br_ctx *ctx = t_ctx();
    char all[1024];
    CHECK_OK(ctx, br_ctx_options(ctx, all, sizeof all));
    CHECK(!strcmp(all, "bits_gemm=1,profile=0,gemm=auto,gemm_tile=auto,gemm_splitk=auto,"
                       "gemm_ctas=all,mm_stage16=1,mm_tn=auto,mm_tn2=1,pdl=auto,expand_blocks=all,"
                       "vk_gemm=auto,vk_coop_shape=auto"),
          "defaults: %s", all);
    /* every key takes its values, spaces around items and empty items are skipped */
    CHECK_OK(ctx,
             br_ctx_set_options(ctx, " bits_gemm=0, profile=1,,gemm=mma,gemm_tile=128x192/reg4,"
                                     "gemm_splitk=3,gemm_ctas=1,mm_stage16=0,mm_tn=copy,"
                                     "mm_tn2=0,pdl=all,expand_blocks=7,vk_gemm=coop_emulated,"
                                     "vk_coop_shape=16x8x8 "));
    CHECK_OK(ctx, br_ctx_options(ctx, all, sizeof all));
    CHECK(!strcmp(all, "bits_gemm=0,profile=1,gemm=mma,gemm_tile=128x192/reg4,gemm_splitk=3,"
                       "gemm_ctas=1,mm_stage16=0,mm_tn=copy,mm_tn2=0,pdl=all,expand_blocks=7,"
                       "vk_gemm=coop_emulated,vk_coop_shape=16x8x8"),
          "read back: %s", all);
    CHECK_OK(ctx, br_ctx_set_options(ctx, "gemm_tile=256x112,gemm_splitk=auto,gemm_ctas=all"));
    CHECK(option_is(ctx, "gemm_tile", "256x112"), "a tile without /source keeps none");
    CHECK(option_is(ctx, "gemm_splitk", "auto") && option_is(ctx, "gemm_ctas", "all"),
          "the words for 0 read back");
    /* refusals name the item and what the key takes; nothing of a refused spec applies */
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "unknown key \"gemm_til\"",
                    br_ctx_set_options(ctx, "gemm_til=128x128"));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "gemm takes auto, mma, wgmma",
                    br_ctx_set_options(ctx, "gemm=wmma"));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "1..64", br_ctx_set_options(ctx, "gemm_splitk=65"));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "1..64", br_ctx_set_options(ctx, "gemm_splitk=-1"));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "not key=value", br_ctx_set_options(ctx, "pdl"));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "gemm_tile", br_ctx_set_options(ctx, "gemm_tile=128x192/reg3"));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "bits_gemm", br_ctx_set_options(ctx, "bits_gemm=2"));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "expand_blocks", br_ctx_set_options(ctx, "expand_blocks=0"));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "vk_gemm takes auto, tiled, coop, coop_emulated",
                    br_ctx_set_options(ctx, "vk_gemm=wmma"));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "16x16x16, 16x8x16, 16x8x8, 8x16x16, 32x32x32",
                    br_ctx_set_options(ctx, "vk_coop_shape=16x16x8"));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "pdl", br_ctx_set_options(ctx, "profile=0,pdl=sometimes"));
    CHECK(option_is(ctx, "profile", "1"), "a refused spec applied its first item");
    char v[8];
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "unknown key", br_ctx_option(ctx, "nope", v, sizeof v));
    CHECK(br_ctx_set_options(NULL, "profile=1") == BR_E_ARG, "NULL ctx accepted");
    CHECK_FAILS(ctx, BR_E_ARG, br_ctx_set_options(ctx, NULL));
    br_ctx_free(ctx);

    /* the environment's override applies to contexts made afterwards */
    setenv("BITRANK_OPTIONS", "bits_gemm=0,profile=1,gemm=wgmma", 1);
    ctx = t_ctx();
    CHECK(option_is(ctx, "bits_gemm", "0") && option_is(ctx, "profile", "1") &&
              option_is(ctx, "gemm", "wgmma"),
          "BITRANK_OPTIONS ignored");
    br_ctx_free(ctx);
    /* and a bad one makes br_ctx_new fail, saying why */
    setenv("BITRANK_OPTIONS", "gemm=fast", 1);
    char err[512] = "";
    br_ctx *bad = NULL;
    CHECK(br_ctx_new("cpu", &bad, err, sizeof err) == BR_E_ARG && !bad,
          "a bad BITRANK_OPTIONS made a context");
    CHECK(strstr(err, "BITRANK_OPTIONS") && strstr(err, "gemm=fast"), "message: %s", err);
    unsetenv("BITRANK_OPTIONS");
}

/* ---------------------------------------------------------------- graphs */

/* Records fill + cvt + add; checks that nothing runs while recording, that a
 * launch runs them in order, and that a second launch reads the inputs anew. */
static void graph_records_and_replays(void) {
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(23);
    size_t m = 5, k = 40, n = m * k, npad = br_pad_rows(m) * k;
    float *x = t_rand(&r, n, 2.0f), *y = t_rand(&r, n, 2.0f);
    br_buf *bx = t_buf_from(ctx, BR_F32, x, n), *by = t_buf_from(ctx, BR_F32, y, n);
    br_buf *staged = t_buf_poison(ctx, BR_F16, npad, T_NAN16);
    br_buf *sum = t_buf_poison(ctx, BR_F32, n, T_NAN32);
    br_buf *zeroed = t_buf_poison(ctx, BR_F32, n, T_NAN32);

    br_graph *g = NULL;
    CHECK(br_graph_end(ctx, &g) == BR_E_STATE && g == NULL, "end without begin");
    CHECK_OK(ctx, br_graph_begin(ctx));
    CHECK_FAILS_MSG(ctx, BR_E_STATE, "already recording", br_graph_begin(ctx));
    CHECK_OK(ctx, br_buf_fill(zeroed, 0, n, 0));
    CHECK_OK(ctx, br_cvt(ctx, bx, NULL, staged, m, k, 0.5f));
    CHECK_OK(ctx, br_add(ctx, bx, by, sum, n));
    /* a refused op is not recorded; host transfers cannot be */
    CHECK_FAILS(ctx, BR_E_SHAPE, br_add(ctx, bx, by, sum, 0));
    float *tmp = t_xmalloc(n * sizeof *tmp);
    CHECK_FAILS_MSG(ctx, BR_E_STATE, "recorded", br_buf_download(sum, 0, tmp, n));
    CHECK_FAILS_MSG(ctx, BR_E_STATE, "recorded", br_buf_upload(bx, 0, y, n));
    /* allocation is allowed while recording */
    br_buf *extra = NULL;
    CHECK_OK(ctx, br_buf_new(ctx, BR_F32, 8, &extra));
    CHECK_OK(ctx, br_graph_end(ctx, &g));
    CHECK(br_graph_op_count(g) == 3, "graph holds %zu ops, want 3", br_graph_op_count(g));

    /* nothing ran */
    float *s = t_download_f32(ctx, sum, n), *z = t_download_f32(ctx, zeroed, n);
    uint16_t *st = t_download_f16(ctx, staged, npad);
    size_t ran = 0;
    for (size_t i = 0; i < n; i++)
        ran += !isnan(s[i]) + !isnan(z[i]);
    for (size_t i = 0; i < npad; i++)
        ran += st[i] != T_NAN16;
    CHECK(ran == 0, "%zu elements written while recording", ran);
    free(s);
    free(z);
    free(st);

    for (int launch = 0; launch < 2; launch++) {
        if (launch == 1) { /* new inputs: the replay reads them */
            for (size_t i = 0; i < n; i++)
                x[i] = -3.0f * x[i] + 0.25f;
            CHECK_OK(ctx, br_buf_upload(bx, 0, x, n));
            CHECK_OK(ctx, br_buf_fill(zeroed, 0, n, T_NAN32));
        }
        CHECK_OK(ctx, br_graph_launch(g));
        s = t_download_f32(ctx, sum, n);
        z = t_download_f32(ctx, zeroed, n);
        st = t_download_f16(ctx, staged, npad);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            float want = x[i] + y[i];
            bad += bits_of_f32(s[i]) != bits_of_f32(want) || bits_of_f32(z[i]) != 0;
        }
        for (size_t i = 0; i < npad; i++)
            bad += st[i] != (i < n ? br_half_from_float(x[i] * 0.5f) : 0);
        CHECK(bad == 0, "launch %d: %zu elements wrong", launch, bad);
        free(s);
        free(z);
        free(st);
    }

    /* an empty graph; launching while another recording is open */
    br_graph *empty = NULL;
    CHECK_OK(ctx, br_graph_begin(ctx));
    CHECK_FAILS_MSG(ctx, BR_E_STATE, "in progress", br_graph_launch(g));
    CHECK_OK(ctx, br_graph_end(ctx, &empty));
    CHECK(br_graph_op_count(empty) == 0, "empty graph has ops");
    CHECK_OK(ctx, br_graph_launch(empty));
    CHECK(br_graph_launch(NULL) == BR_E_ARG, "NULL graph launched");
    CHECK(br_graph_op_count(NULL) == 0, "ops of NULL");
    CHECK(br_graph_begin(NULL) == BR_E_ARG, "NULL ctx");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "out is NULL", br_graph_end(ctx, NULL));
    br_graph_free(empty);
    br_graph_free(g);
    br_graph_free(NULL);

    /* a context freed in the middle of a recording drops it (no leak under ASan) */
    br_ctx *c2 = t_ctx();
    br_buf *b2 = t_buf_poison(c2, BR_F32, 16, 0);
    CHECK_OK(c2, br_graph_begin(c2));
    CHECK_OK(c2, br_add(c2, b2, b2, b2, 16));
    br_buf_free(b2);
    br_ctx_free(c2);

    br_buf *bufs[] = {bx, by, staged, sum, zeroed, extra};
    for (size_t i = 0; i < 6; i++)
        br_buf_free(bufs[i]);
    free(tmp);
    free(x);
    free(y);
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- profiler */

/* Reads a profile report back: calls and launches of (tag, op), or -1 if absent. */
static long report_calls(const char *text, const char *tag, const char *op, long *launches) {
    const char *line = text;
    while (line && *line) {
        char t[64], o[64];
        long calls, l;
        double total, mean;
        if (sscanf(line, " %63s %63s %ld %lf %lf %ld", t, o, &calls, &total, &mean, &l) == 6 &&
            !strcmp(t, tag) && !strcmp(o, op)) {
            if (launches) *launches = l;
            return calls;
        }
        line = strchr(line, '\n');
        if (line) line++;
    }
    return -1;
}

/* The profile report as a string (via a temporary file). */
static char *report_text(br_ctx *ctx) {
    FILE *f = tmpfile();
    if (!f) {
        fprintf(stderr, "tmpfile failed\n");
        exit(1);
    }
    CHECK_OK(ctx, br_profile_report(ctx, f));
    long len = ftell(f);
    size_t size = len > 0 ? (size_t)len : 0;
    rewind(f);
    char *text = t_xmalloc(size + 1);
    text[fread(text, 1, size, f)] = '\0';
    fclose(f);
    return text;
}

static void profiler_counts_ops(void) {
    unsetenv("BITRANK_OPTIONS");
    br_ctx *ctx = t_ctx();
    br_rng r = t_rng_for(24);
    size_t m = 3, k = 64, n = m * k;
    float *x = t_rand(&r, n, 1.0f);
    br_buf *bx = t_buf_from(ctx, BR_F32, x, n), *out = t_buf_poison(ctx, BR_F32, n, 0);
    br_buf *staged = t_buf_poison(ctx, BR_F16, br_pad_rows(m) * k, 0);

    /* off by default: ops are not recorded */
    CHECK_OK(ctx, br_add(ctx, bx, bx, out, n));
    char *text = report_text(ctx);
    CHECK(report_calls(text, "-", "add", NULL) == -1, "profiled while off:\n%s", text);
    free(text);

    CHECK_OK(ctx, br_ctx_set_options(ctx, "profile=1"));
    br_ctx_set_tag(ctx, "fwd");
    for (int i = 0; i < 3; i++)
        CHECK_OK(ctx, br_cvt(ctx, bx, NULL, staged, m, k, 1.0f));
    for (int i = 0; i < 2; i++)
        CHECK_OK(ctx, br_add(ctx, bx, bx, out, n));
    br_ctx_set_tag(ctx, NULL);
    CHECK_OK(ctx, br_add(ctx, bx, out, out, n));
    /* a tag longer than the profiler keeps is cut, not overrun */
    br_ctx_set_tag(ctx, "a-very-long-tag-name-that-goes-on-and-on-and-on");
    CHECK_OK(ctx, br_add(ctx, bx, out, out, n));
    br_ctx_set_tag(ctx, "");
    /* a refused op is not counted */
    CHECK_FAILS(ctx, BR_E_SHAPE, br_add(ctx, bx, out, out, 0));

    text = report_text(ctx);
    long launches = -1;
    CHECK(report_calls(text, "fwd", "cvt", &launches) == 3, "fwd/cvt not counted 3 times:\n%s",
          text);
    CHECK(launches >= 3, "fwd/cvt: %ld launches", launches);
    CHECK(report_calls(text, "fwd", "add", NULL) == 2, "fwd/add not 2:\n%s", text);
    CHECK(report_calls(text, "-", "add", NULL) == 1, "untagged add not 1:\n%s", text);
    CHECK(report_calls(text, "a-very-long-tag-name-that-goes-", "add", NULL) == 1,
          "long tag not cut to 31 characters:\n%s", text);
    const char *l = strstr(text, "launches ");
    long total = l ? strtol(l + 9, NULL, 10) : -1;
    CHECK(!strcmp(br_ctx_backend(ctx), "cpu") ? total == 7 : total >= 7,
          "report counts %ld launches for 7 ops:\n%s", total, text);
    free(text);

    br_profile_reset(ctx);
    text = report_text(ctx);
    CHECK(strstr(text, "in 0 op rows"), "reset left rows:\n%s", text);
    free(text);
    CHECK(br_profile_report(NULL, stderr) == BR_E_ARG, "NULL ctx");
    CHECK(br_profile_report(ctx, NULL) == BR_E_ARG, "NULL file");
    br_profile_reset(NULL);
    br_ctx_set_tag(NULL, "x");

    br_buf_free(bx);
    br_buf_free(out);
    br_buf_free(staged);
    free(x);
    br_ctx_free(ctx);
}

/* The batch conversion (F16C where the CPU has it) gives br_half_from_float's bits:
 * every rounding boundary of the ladder, the specials, NaNs with payloads, and
 * random patterns, at lengths that leave every tail size (n % 8). */
/* br_half_to_float_n against br_half_to_float for all 65536 patterns (NaNs with their
 * payloads, signaling ones too), at every alignment of a group of 8 and with tails;
 * nothing written past n. */
static void half_to_float_batch_matches(void) {
    size_t cap = 65536 + 16;
    uint16_t *h = t_xmalloc(cap * sizeof *h);
    for (size_t i = 0; i < cap; i++)
        h[i] = (uint16_t)(i * 40503u); /* every pattern, in a scattered order */
    float *got = t_xmalloc(cap * sizeof *got);
    size_t bad = 0;
    for (size_t off = 0; off < 8; off++)
        for (size_t len = cap - 16 - off; len <= cap - off; len += 5) {
            memset(got, 0xab, cap * sizeof *got);
            br_half_to_float_n(h + off, got, len);
            for (size_t i = 0; i < len; i++) {
                float w = br_half_to_float(h[off + i]);
                bad += memcmp(&got[i], &w, 4) != 0;
            }
            uint32_t poison;
            for (size_t i = len; i < cap; i++) {
                memcpy(&poison, &got[i], 4);
                bad += poison != 0xabababab;
            }
        }
    CHECK(bad == 0, "br_half_to_float_n: %zu values differ from br_half_to_float", bad);
    free(h), free(got);
}

static void half_from_float_batch_matches(void) {
    init_ladder();
    br_rng rng = t_rng_for(9);
    size_t cap = 6 * 0x7c00 + 4096, n = 0;
    float *x = t_xmalloc(cap * sizeof *x);
    for (uint32_t h = 0; h < 0x7c00; h++) {
        float v = (float)f16_ladder[h], mid = (float)((f16_ladder[h] + f16_ladder[h + 1]) / 2);
        x[n++] = v, x[n++] = -nextafterf(v, INFINITY), x[n++] = nextafterf(v, 0.0f);
        x[n++] = -mid, x[n++] = nextafterf(mid, INFINITY), x[n++] = nextafterf(mid, 0.0f);
    }
    const uint32_t specials[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
                                 0x7fbfffffu, 0x00000001u, 0x80000000u, 0x477fefffu, 0x477ff000u};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        memcpy(&x[n++], &specials[i], 4);
    while (n < cap) {
        uint32_t u = (uint32_t)br_rng_u64(&rng);
        memcpy(&x[n++], &u, 4);
    }
    uint16_t *got = t_xmalloc(cap * sizeof *got);
    size_t bad = 0;
    for (size_t len = cap - 7; len <= cap; len++) {
        memset(got, 0xab, cap * sizeof *got);
        br_half_from_float_n(x, got, len);
        for (size_t i = 0; i < len; i++)
            bad += got[i] != br_half_from_float(x[i]);
        for (size_t i = len; i < cap; i++)
            bad += got[i] != 0xabab; /* nothing written past n */
    }
    CHECK(bad == 0, "br_half_from_float_n: %zu values differ from br_half_from_float", bad);
    free(x), free(got);
}

T_RUN("core", T_CASE(half_every_pattern_round_trips), T_CASE(half_from_float_is_exact_rounding),
      T_CASE(half_from_float_batch_matches), T_CASE(half_to_float_batch_matches),
      T_CASE(buffer_new_and_views), T_CASE(buffer_fill_and_copy), T_CASE(context_device_strings),
      T_CASE(context_options), T_CASE(graph_records_and_replays), T_CASE(profiler_counts_ops))
