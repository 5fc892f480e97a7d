/* safetensors in and out, the BLR layout, the cortiq payload: round trips of every
 * dtype, f32 conversion against references, sharded indexes, hostile files (each
 * must fail with BR_E_FORMAT and a message naming the file and the field), the
 * writer's failure modes (nothing partial is ever left), and a mutation loop over
 * the parsers. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "io/io_internal.h"
#include "io/json.h"

/* ---------------------------------------------------------------- helpers */

static char t_dir[200];
static br_ctx *ctx;

static void rm_tree(const char *dir);

static void cleanup(void) {
    rm_tree(t_dir);
    br_ctx_free(ctx);
}

/* The context and a scratch directory, made once, removed at exit. */
static void init(void) {
    if (ctx) return;
    ctx = t_ctx();
    const char *base = getenv("TMPDIR");
    snprintf(t_dir, sizeof t_dir, "%s/bitrank-st-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(t_dir)) {
        fprintf(stderr, "mkdtemp %s: %s\n", t_dir, strerror(errno));
        exit(1);
    }
    atexit(cleanup);
}

/* A fresh subdirectory of the scratch directory. */
static const char *subdir(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", t_dir, name);
    if (mkdir(buf, 0755) != 0) {
        fprintf(stderr, "mkdir %s: %s\n", buf, strerror(errno));
        exit(1);
    }
    return buf;
}

static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            chmod(p, 0755);
            rm_tree(p);
        } else {
            unlink(p);
        }
    }
    closedir(d);
    rmdir(dir);
}

/* dir/name into buf. */
static const char *path_in(char *buf, size_t n, const char *dir, const char *name) {
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static uint8_t *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = t_xmalloc((size_t)len);
    if (fread(b, 1, (size_t)len, f) != (size_t)len) len = -1;
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* A safetensors image: declared header length, header text, data_len random bytes. */
static uint8_t *make_image(uint64_t declared, const char *header, size_t hlen, size_t data_len,
                           size_t *size) {
    br_rng r = t_rng_for(77);
    *size = 8 + hlen + data_len;
    uint8_t *b = t_xmalloc(*size);
    br_put_le64(b, declared);
    memcpy(b + 8, header, hlen);
    for (size_t i = 0; i < data_len; i++)
        b[8 + hlen + i] = (uint8_t)br_rng_u64(&r);
    return b;
}

static void make_st(const char *path, const char *header, size_t data_len) {
    size_t n, hlen = strlen(header);
    uint8_t *b = make_image(hlen, header, hlen, data_len, &n);
    write_file(path, b, n);
    free(b);
}

static int file_exists(const char *path) { return access(path, F_OK) == 0; }

/* Entries of a directory other than . and .. */
static int dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

/* f32 → bf16, round to nearest even (finite inputs). */
static uint16_t bf16_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + (u >> 16 & 1u);
    return (uint16_t)(u >> 16);
}

static int has(const char *msg, const char *part) { return strstr(msg, part) != NULL; }

/* ---------------------------------------------------------------- JSON */

static void json_parses(void) {
    init();
    br_json d;
    char err[200];
    const char *ok = " {\"a\\u00e9\\ud83d\\ude00\\n\": [1, -2.5e+3, 0, true, false, null, {}, []],"
                     " \"b\": \"x\\\"y\\\\z\\/\"} ";
    CHECK(br_json_parse(&d, ok, strlen(ok), err, sizeof err) == BR_OK, "valid JSON: %s", err);
    if (d.n) {
        CHECK(d.nodes[0].kind == BR_JSON_OBJECT && d.nodes[0].count == 2, "root object");
        CHECK(!strcmp(br_json_str(&d, 1), "a\xc3\xa9\xf0\x9f\x98\x80\n"), "escapes decoded: %s",
              br_json_str(&d, 1));
        CHECK(d.nodes[2].kind == BR_JSON_ARRAY && d.nodes[2].count == 8, "array of 8");
        int dup = 1;
        size_t b = br_json_member(&d, 0, "b", &dup);
        CHECK(b && !dup && !strcmp(br_json_str(&d, b), "x\"y\\z/"), "member b");
        CHECK(br_json_member(&d, 0, "zz", &dup) == 0, "absent member");
        CHECK(d.nodes[0].next == d.n, "root subtree spans every node");
    }
    br_json_free(&d);

    static const struct {
        const char *text;
        int ok;
        uint64_t value;
    } nums[] = {{"0", 1, 0},
                {"18446744073709551615", 1, UINT64_MAX},
                {"18446744073709551616", 0, 0},
                {"-0", 0, 0},
                {"1e3", 0, 0},
                {"1.0", 0, 0},
                {"4096", 1, 4096}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        uint64_t v = 7;
        CHECK(br_json_parse(&d, nums[i].text, strlen(nums[i].text), err, sizeof err) == BR_OK,
              "%s parses", nums[i].text);
        int got = d.n ? br_json_u64(&d, 0, &v) : -1;
        CHECK(got == nums[i].ok && (!got || v == nums[i].value), "u64 of %s: %d %llu", nums[i].text,
              got, (unsigned long long)v);
        br_json_free(&d);
    }

    static const char *bad[] = {"",
                                "   ",
                                "01",
                                "[1,]",
                                "{\"a\":1,}",
                                "{\"a\" 1}",
                                "[1 2]",
                                "{1:2}",
                                "\"abc",
                                "\"\\x\"",
                                "\"\\u12\"",
                                "\"\\ud800\"",
                                "\"\\udc00\"",
                                "\"\\u0000\"",
                                "\"a\tb\"",
                                "tru",
                                "nul",
                                "-",
                                "1.",
                                "1e",
                                "{} {}",
                                "[",
                                "]",
                                "\xff",
                                "\"\xc0\xaf\"",
                                "\"\xed\xa0\x80\"",
                                "\"\xf4\x90\x80\x80\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        br_status st = br_json_parse(&d, bad[i], strlen(bad[i]), err, sizeof err);
        CHECK(st == BR_E_FORMAT && has(err, "byte "), "bad JSON #%zu rejected (%s): %s", i,
              br_status_name(st), err);
        br_json_free(&d);
    }

    /* nesting: 64 levels parse, 65 do not, 100000 fail without recursion */
    char *deep = t_xmalloc(200002);
    for (size_t depth = 64; depth <= 65; depth++) {
        memset(deep, '[', depth);
        memset(deep + depth, ']', depth);
        br_status st = br_json_parse(&d, deep, 2 * depth, err, sizeof err);
        CHECK((st == BR_OK) == (depth == 64), "depth %zu: %s %s", depth, br_status_name(st), err);
        br_json_free(&d);
    }
    memset(deep, '[', 100000);
    memset(deep + 100000, ']', 100000);
    CHECK(br_json_parse(&d, deep, 200000, err, sizeof err) == BR_E_FORMAT && has(err, "nested"),
          "deep nesting rejected: %s", err);
    br_json_free(&d);
    free(deep);

    /* the writer's escaping reads back */
    char *buf = NULL;
    size_t len = 0, cap = 0;
    const char *s = "q\"b\\s\n\r\t\x01\x1f end \xc3\xa9";
    CHECK(br_json_put_string(&buf, &len, &cap, s) == 0, "put_string");
    CHECK(br_json_parse(&d, buf, len, err, sizeof err) == BR_OK && !strcmp(br_json_str(&d, 0), s),
          "escaped string reads back: %s", buf);
    br_json_free(&d);
    free(buf);
}

/* ---------------------------------------------------------------- round trips */

static const br_st_dtype all_dtypes[] = {
    BR_ST_BOOL, BR_ST_U8,  BR_ST_I8,   BR_ST_F8_E5M2, BR_ST_F8_E4M3, BR_ST_F8_E8M0, BR_ST_I16,
    BR_ST_U16,  BR_ST_F16, BR_ST_BF16, BR_ST_I32,     BR_ST_U32,     BR_ST_F32,     BR_ST_I64,
    BR_ST_U64,  BR_ST_F64, BR_ST_C64,  BR_ST_F4,      BR_ST_F6_E2M3, BR_ST_F6_E3M2};
#define N_DTYPES (sizeof all_dtypes / sizeof all_dtypes[0])

typedef struct ref_tensor {
    char name[64];
    br_st_dtype dtype;
    size_t ndim;
    uint64_t shape[BR_ST_MAX_DIMS];
    uint64_t nbytes;
    uint8_t *data;
} ref_tensor;

static void ref_random(br_rng *r, ref_tensor *t, const char *name, br_st_dtype dt) {
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dt;
    t->ndim = 1 + br_rng_u64(r) % 3;
    uint64_t numel = 1;
    for (size_t d = 0; d < t->ndim; d++) {
        t->shape[d] = 1 + br_rng_u64(r) % 11;
        numel *= t->shape[d];
    }
    /* sub-byte dtypes need whole bytes: make the last dimension a multiple of 4 */
    size_t bits = br_st_dtype_bits(dt);
    if (bits * numel % 8) {
        numel /= t->shape[t->ndim - 1];
        t->shape[t->ndim - 1] *= 4;
        numel *= t->shape[t->ndim - 1];
    }
    t->nbytes = numel * bits / 8;
    t->data = t_xmalloc(t->nbytes);
    for (uint64_t i = 0; i < t->nbytes; i++)
        t->data[i] = (uint8_t)br_rng_u64(r);
}

static void check_tensor(const br_st_file *f, const ref_tensor *want) {
    const br_st_tensor *t = br_st_find(f, want->name);
    CHECK(t != NULL, "tensor %s found", want->name);
    if (!t) return;
    CHECK(t->dtype == want->dtype && !strcmp(t->dtype_name, br_st_dtype_name(want->dtype)),
          "%s: dtype %s, want %s", want->name, t->dtype_name, br_st_dtype_name(want->dtype));
    CHECK(t->ndim == want->ndim, "%s: ndim %zu, want %zu", want->name, t->ndim, want->ndim);
    for (size_t d = 0; d < want->ndim && d < t->ndim; d++)
        CHECK(t->shape[d] == want->shape[d], "%s: shape[%zu]", want->name, d);
    CHECK(t->nbytes == want->nbytes, "%s: %llu bytes, want %llu", want->name,
          (unsigned long long)t->nbytes, (unsigned long long)want->nbytes);
    CHECK(t->nbytes == want->nbytes && !memcmp(t->data, want->data, want->nbytes),
          "%s: data differ", want->name);
}

static void roundtrip_every_dtype(void) {
    init();
    br_rng r = t_rng_for(1);
    char dir[400], path[600];
    subdir(dir, sizeof dir, "roundtrip");
    path_in(path, sizeof path, dir, "all.safetensors");
    ref_tensor refs[N_DTYPES + 2];
    br_st_writer *w = NULL;
    CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
    if (!w) return;
    for (size_t i = 0; i < N_DTYPES; i++) {
        char name[64];
        snprintf(name, sizeof name, "layers.%zu.%s", i, br_st_dtype_name(all_dtypes[i]));
        ref_random(&r, &refs[i], name, all_dtypes[i]);
    }
    /* a scalar and an empty tensor */
    ref_random(&r, &refs[N_DTYPES], "scalar \"quoted\" \xc3\xa9", BR_ST_F32);
    refs[N_DTYPES].ndim = 0;
    refs[N_DTYPES].nbytes = 4;
    ref_random(&r, &refs[N_DTYPES + 1], "empty", BR_ST_F16);
    refs[N_DTYPES + 1].ndim = 2;
    refs[N_DTYPES + 1].shape[0] = 0;
    refs[N_DTYPES + 1].shape[1] = 5;
    refs[N_DTYPES + 1].nbytes = 0;
    for (size_t i = 0; i < N_DTYPES + 2; i++)
        CHECK_OK(ctx, br_st_writer_add(w, refs[i].name, refs[i].dtype, refs[i].ndim, refs[i].shape,
                                       refs[i].data));
    const char *odd = "line\nbreak \"q\" \\ tab\t \x01 \xe2\x82\xac";
    CHECK_OK(ctx, br_st_writer_meta(w, "source", "model.safetensors"));
    CHECK_OK(ctx, br_st_writer_meta(w, "odd", odd));
    CHECK_OK(ctx, br_st_writer_meta(w, "source", "other.safetensors")); /* last value wins */
    CHECK_OK(ctx, br_st_writer_finish(w));
    CHECK_FAILS(ctx, BR_E_STATE, br_st_writer_finish(w));
    br_st_writer_free(w);

    br_st_file *f = NULL;
    CHECK_OK(ctx, br_st_open(ctx, path, &f));
    if (!f) return;
    CHECK(br_st_count(f) == N_DTYPES + 2, "%zu tensors", br_st_count(f));
    for (size_t i = 0; i < N_DTYPES + 2; i++)
        check_tensor(f, &refs[i]);
    /* header order is the order added */
    for (size_t i = 0; i < br_st_count(f); i++)
        CHECK(!strcmp(br_st_tensor_at(f, i)->name, refs[i].name), "order %zu", i);
    CHECK(br_st_tensor_at(f, br_st_count(f)) == NULL, "tensor_at past the end");
    CHECK(br_st_find(f, "nope") == NULL, "absent tensor");
    CHECK(((uintptr_t)br_st_tensor_at(f, 0)->data & 7) == 0, "data section 8-byte aligned");
    CHECK(br_st_meta_count(f) == 2, "two metadata entries");
    CHECK(br_st_meta(f, "source") && !strcmp(br_st_meta(f, "source"), "other.safetensors"),
          "metadata source");
    CHECK(br_st_meta(f, "odd") && !strcmp(br_st_meta(f, "odd"), odd), "metadata with escapes");
    const char *k = NULL, *v = NULL;
    CHECK(br_st_meta_at(f, 0, &k, &v) == BR_OK && !strcmp(k, "odd"), "meta_at sorted by key");
    CHECK(br_st_meta_at(f, 2, &k, &v) == BR_E_ARG, "meta_at out of range");
    CHECK(br_st_blr_count(f) == 0, "no BLR layers in a plain file");
    CHECK(!strcmp(br_st_path(f), path), "path kept");
    br_st_close(f);
    for (size_t i = 0; i < N_DTYPES + 2; i++)
        free(refs[i].data);
    CHECK(dir_entries(dir) == 1, "only the output in the directory (no temporary left)");
    rm_tree(dir);
}

static void convert_to_f32(void) {
    init();
    br_rng r = t_rng_for(2);
    char path[600];
    path_in(path, sizeof path, t_dir, "conv.safetensors");
    size_t n = 1 + br_rng_u64(&r) % 300;
    float *src = t_rand(&r, n, 3.0f);
    /* specials at the front: signed zero, subnormals, infinities, NaN, largest f16 */
    const float specials[] = {-0.0f, 6e-8f, -3e-5f, 65504.0f, INFINITY, -INFINITY, NAN, 1e-40f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0] && i < n; i++)
        src[i] = specials[i];
    uint16_t *h16 = t_xmalloc(2 * n), *b16 = t_xmalloc(2 * n);
    int32_t *i32 = t_xmalloc(4 * n);
    for (size_t i = 0; i < n; i++) {
        h16[i] = br_half_from_float(src[i]);
        b16[i] = isfinite(src[i]) ? bf16_of(src[i])
                                  : (uint16_t)(isnan(src[i]) ? 0x7fc0
                                               : src[i] > 0  ? 0x7f80
                                                             : 0xff80);
        i32[i] = (int32_t)i;
    }
    br_st_writer *w = NULL;
    CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
    uint64_t shape[2] = {1, n};
    CHECK_OK(ctx, br_st_writer_add(w, "f32", BR_ST_F32, 2, shape, src));
    CHECK_OK(ctx, br_st_writer_add(w, "f16", BR_ST_F16, 2, shape, h16));
    CHECK_OK(ctx, br_st_writer_add(w, "bf16", BR_ST_BF16, 2, shape, b16));
    CHECK_OK(ctx, br_st_writer_add(w, "i32", BR_ST_I32, 2, shape, i32));
    CHECK_OK(ctx, br_st_writer_finish(w));
    br_st_writer_free(w);
    br_st_file *f = NULL;
    CHECK_OK(ctx, br_st_open(ctx, path, &f));
    if (!f) return;
    float *got = t_xmalloc((n + 4) * sizeof *got);
    const char *names[3] = {"f32", "f16", "bf16"};
    for (int kind = 0; kind < 3; kind++) {
        const br_st_tensor *t = br_st_find(f, names[kind]);
        for (size_t i = 0; i < n + 4; i++)
            got[i] = NAN;
        CHECK_OK(ctx, br_st_read_f32(ctx, f, t, 0, n, got));
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            double want;
            if (kind == 0)
                want = src[i];
            else if (kind == 1)
                want = t_f16_value(h16[i]);
            else {
                uint32_t u = (uint32_t)b16[i] << 16;
                float x;
                memcpy(&x, &u, 4);
                want = x;
            }
            int same = isnan(want) ? isnan(got[i])
                                   : (double)got[i] == want && !!signbit(got[i]) == !!signbit(want);
            bad += !same;
            /* bf16 keeps 8 significant bits of the original */
            if (kind == 2 && isfinite(src[i]) && fabsf(src[i]) > 1e-30f)
                bad += fabs((double)got[i] - src[i]) > fabs(src[i]) * 0x1p-8;
        }
        CHECK(bad == 0, "%s → f32: %zu of %zu elements wrong", names[kind], bad, n);
        CHECK(isnan(got[n]) && isnan(got[n + 3]), "%s: nothing written past count", names[kind]);
        /* a slice */
        size_t first = br_rng_u64(&r) % n, count = br_rng_u64(&r) % (n - first + 1);
        for (size_t i = 0; i < n + 4; i++)
            got[i] = NAN;
        CHECK_OK(ctx, br_st_read_f32(ctx, f, t, first, count, got));
        float *all = t_xmalloc(n * sizeof *all);
        br_st_read_f32(ctx, f, t, 0, n, all);
        CHECK(!t_bits_differ32(got, all + first, count) && (count == n + 4 || isnan(got[count])),
              "%s: slice [%zu, +%zu)", names[kind], first, count);
        free(all);
        CHECK_FAILS(ctx, BR_E_ARG, br_st_read_f32(ctx, f, t, first, n - first + 1, got));
        CHECK_FAILS(ctx, BR_E_ARG, br_st_read_f32(ctx, f, t, n + 1, 0, got));
        CHECK_FAILS(ctx, BR_E_ARG, br_st_read_f32(ctx, f, t, 0, 1, NULL));
    }
    CHECK_FAILS(ctx, BR_E_UNSUPPORTED, br_st_read_f32(ctx, f, br_st_find(f, "i32"), 0, 1, got));
    CHECK(has(br_ctx_error(ctx), "i32") && has(br_ctx_error(ctx), "I32"), "message: %s",
          br_ctx_error(ctx));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_read_f32(ctx, f, NULL, 0, 1, got));
    br_st_tensor alien = *br_st_find(f, "f32");
    CHECK_FAILS(ctx, BR_E_ARG, br_st_read_f32(ctx, f, &alien, 0, 1, got));
    br_st_close(f);

    /* an unknown dtype opens; converting it fails */
    make_st(path, "{\"q\":{\"dtype\":\"Q9_FUTURE\",\"shape\":[3],\"data_offsets\":[0,5]}}", 5);
    f = NULL;
    CHECK_OK(ctx, br_st_open(ctx, path, &f));
    if (f) {
        const br_st_tensor *t = br_st_find(f, "q");
        CHECK(t && t->dtype == BR_ST_UNKNOWN && !strcmp(t->dtype_name, "Q9_FUTURE") &&
                  t->nbytes == 5,
              "unknown dtype kept by name");
        CHECK_FAILS(ctx, BR_E_FORMAT, br_st_read_f32(ctx, f, t, 0, 1, got));
        CHECK(has(br_ctx_error(ctx), "Q9_FUTURE"), "message names the dtype: %s",
              br_ctx_error(ctx));
        br_st_close(f);
    }
    unlink(path);
    free(got);
    free(src);
    free(h16);
    free(b16);
    free(i32);
}

/* ---------------------------------------------------------------- hostile files */

typedef struct bad_header {
    const char *header;
    size_t data_len;
    const char *expect; /* a part of the message */
} bad_header;

static void hostile_headers(void) {
    init();
    char path[600];
    path_in(path, sizeof path, t_dir, "bad.safetensors");
    static const bad_header cases[] = {
        /* offsets */
        {"{\"x.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[10,99999999]}}", 4096,
         "data_offsets [10, 99999999] past the end of the 4096-byte data section"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}",
         6, "overlap tensor 'a'"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,0]}}", 4, "out of order"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[6,8]}}",
         8, "gap of 2 bytes"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 9, "trailing bytes"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0]}}", 4, "data_offsets has 1"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4.0]}}", 4, "not integers"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[-1,4]}}", 4, "not integers"},
        /* size ≠ shape·dtype */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3,5],\"data_offsets\":[0,59]}}", 59,
         "hold 59 bytes, but shape [3, 5] of F32 needs 60"},
        {"{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2,
         "not a whole number of bytes"},
        /* shapes */
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,2],\"data_offsets\":[0,0]}}", 0,
         "more than 2^64 elements"},
        {"{\"a\":{\"dtype\":\"F64\",\"shape\":[1152921504606846976,2],\"data_offsets\":[0,0]}}", 0,
         "more than 2^64 bits"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[18446744073709551616],\"data_offsets\":[0,0]}}", 0,
         "shape[0] is not an integer"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[-4],\"data_offsets\":[0,0]}}", 0, "shape[0]"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1e3],\"data_offsets\":[0,1000]}}", 1000, "shape[0]"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
         "9 dimensions"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":4,\"data_offsets\":[0,4]}}", 4, "'shape' is not"},
        /* fields and names */
        {"{\"a\":{\"shape\":[4],\"data_offsets\":[0,4]}}", 4, "missing field 'dtype'"},
        {"{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
         "'dtype' appears twice"},
        {"{\"a\":{\"dtype\":7,\"shape\":[4],\"data_offsets\":[0,4]}}", 4, "'dtype' is not"},
        {"{\"a\":[1,2]}", 0, "entry is not a JSON object"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}",
         4, "tensor 'a' appears twice"},
        {"{\"\\u0061\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}",
         4, "tensor 'a' appears twice"},
        {"{\"\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, "empty name"},
        {"{\"__metadata__\":{\"k\":5}}", 0, "'k': value is not a string"},
        {"{\"__metadata__\":[]}", 0, "__metadata__ is not a JSON object"},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "__metadata__ appears twice"},
        {"{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "key 'k' appears twice"},
        /* JSON */
        {"[1,2,3]", 0, "not a JSON object"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}", 2, "not valid JSON"},
        {"{\"a\":1} trailing", 0, "not valid JSON"},
        {"{\"a\\u0000b\":1}", 0, "NUL"},
        {"{\"a\\ud800\":1}", 0, "surrogate"},
        {"{\"a\xff\":1}", 0, "UTF-8"},
        {"{\"a\xc0\x80\":1}", 0, "UTF-8"},
        {"{\"a\x01\":1}", 0, "control character"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        make_st(path, cases[i].header, cases[i].data_len);
        br_st_file *f = (br_st_file *)1;
        br_status st = br_st_open(ctx, path, &f);
        const char *msg = br_ctx_error(ctx);
        CHECK(st == BR_E_FORMAT && f == NULL, "case %zu: %s, expected BR_E_FORMAT", i,
              br_status_name(st));
        CHECK(has(msg, path) && has(msg, cases[i].expect), "case %zu: message \"%s\" lacks \"%s\"",
              i, msg, cases[i].expect);
        if (st == BR_OK) br_st_close(f);
    }

    /* header length larger than the file, or too small; a file shorter than 8 bytes */
    const char *hdr = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";
    size_t hlen = strlen(hdr), n;
    struct {
        uint64_t declared;
        size_t data;
        const char *expect;
    } lies[] = {{hlen + 5, 4, "is larger than the file"},
                {UINT64_MAX, 4, "is larger than the file"},
                {0, 4, "too short"},
                {hlen - 1, 4, "not valid JSON"}};
    for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
        uint8_t *img = make_image(lies[i].declared, hdr, hlen, lies[i].data, &n);
        write_file(path, img, n);
        free(img);
        br_st_file *f = NULL;
        CHECK_FAILS(ctx, BR_E_FORMAT, br_st_open(ctx, path, &f));
        CHECK(has(br_ctx_error(ctx), lies[i].expect) && has(br_ctx_error(ctx), path),
              "length lie %zu: %s", i, br_ctx_error(ctx));
    }
    write_file(path, "\x02\0\0\0", 4);
    CHECK_FAILS(ctx, BR_E_FORMAT, br_st_open(ctx, path, &(br_st_file *){NULL}));
    CHECK(has(br_ctx_error(ctx), "too short"), "tiny file: %s", br_ctx_error(ctx));
    write_file(path, "", 0);
    CHECK_FAILS(ctx, BR_E_FORMAT, br_st_open(ctx, path, &(br_st_file *){NULL}));

    /* a valid file truncated by one byte, and by its whole data section */
    size_t full;
    uint8_t *img = make_image(hlen, hdr, hlen, 4, &full);
    for (size_t cut = 1; cut <= 4; cut += 3) { /* into the data, then all of it */
        write_file(path, img, full - cut);
        CHECK_FAILS(ctx, BR_E_FORMAT, br_st_open(ctx, path, &(br_st_file *){NULL}));
        CHECK(has(br_ctx_error(ctx), "past the end"), "truncated by %zu: %s", cut,
              br_ctx_error(ctx));
    }
    write_file(path, img, full);
    br_st_file *f = NULL;
    CHECK_OK(ctx, br_st_open(ctx, path, &f)); /* the untruncated one is fine */
    br_st_close(f);
    free(img);

    /* a huge header must not be read into memory: declared 2 GB, file small */
    img = make_image((uint64_t)2 << 30, hdr, hlen, 4, &n);
    write_file(path, img, n);
    free(img);
    CHECK_FAILS(ctx, BR_E_FORMAT, br_st_open(ctx, path, &(br_st_file *){NULL}));
    unlink(path);
}

static void open_errors(void) {
    init();
    char path[600];
    br_st_file *f = NULL;
    CHECK_FAILS(ctx, BR_E_ARG, br_st_open(ctx, "x", NULL));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_open(ctx, NULL, &f));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_open(ctx, "", &f));
    path_in(path, sizeof path, t_dir, "missing.safetensors");
    CHECK_FAILS(ctx, BR_E_IO, br_st_open(ctx, path, &f));
    CHECK(has(br_ctx_error(ctx), path), "message names the file: %s", br_ctx_error(ctx));
    char sub[600];
    path_in(sub, sizeof sub, t_dir, "emptydir");
    mkdir(sub, 0755);
    CHECK_FAILS(ctx, BR_E_IO, br_st_open(ctx, sub, &f));
    CHECK(has(br_ctx_error(ctx), "neither"), "empty directory: %s", br_ctx_error(ctx));
    rmdir(sub);
    CHECK_FAILS(ctx, BR_E_IO, br_st_open(ctx, "/dev/null", &f));
    path_in(path, sizeof path, t_dir, "fifo.safetensors");
    if (mkfifo(path, 0600) == 0) { /* must fail at once, not wait for a writer */
        CHECK_FAILS(ctx, BR_E_IO, br_st_open(ctx, path, &f));
        CHECK(has(br_ctx_error(ctx), "not a regular file"), "%s", br_ctx_error(ctx));
        unlink(path);
    }
    CHECK(br_st_count(NULL) == 0 && br_st_find(NULL, "a") == NULL &&
              br_st_meta(NULL, "a") == NULL && br_st_blr_count(NULL) == 0 &&
              br_st_blr_at(NULL, 0) == NULL,
          "NULL file accessors");
    br_st_close(NULL);
}

/* ---------------------------------------------------------------- sharded checkpoints */

static void write_shard(const char *path, const char *const *names, size_t n, ref_tensor *refs) {
    br_st_writer *w = NULL;
    CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
    br_rng r = t_rng_for(3 + n);
    for (size_t i = 0; i < n; i++) {
        ref_random(&r, &refs[i], names[i], BR_ST_BF16);
        CHECK_OK(ctx, br_st_writer_add(w, names[i], BR_ST_BF16, refs[i].ndim, refs[i].shape,
                                       refs[i].data));
    }
    char meta[32];
    snprintf(meta, sizeof meta, "shard-%zu", n);
    CHECK_OK(ctx, br_st_writer_meta(w, "who", meta));
    CHECK_OK(ctx, br_st_writer_finish(w));
    br_st_writer_free(w);
}

static void sharded_index(void) {
    init();
    char dir[400], p1[600], p2[600], idx[600];
    subdir(dir, sizeof dir, "sharded");
    path_in(p1, sizeof p1, dir, "model-00001-of-00002.safetensors");
    path_in(p2, sizeof p2, dir, "model-00002-of-00002.safetensors");
    path_in(idx, sizeof idx, dir, "model.safetensors.index.json");
    const char *n1[] = {"a.weight", "b.weight"}, *n2[] = {"c.weight"};
    ref_tensor r1[2], r2[1];
    write_shard(p1, n1, 2, r1);
    write_shard(p2, n2, 1, r2);
    const char *index = "{\"metadata\":{\"total_size\":123},\"weight_map\":{"
                        "\"a.weight\":\"model-00001-of-00002.safetensors\","
                        "\"c.weight\":\"model-00002-of-00002.safetensors\","
                        "\"b.weight\":\"model-00001-of-00002.safetensors\"}}";
    write_file(idx, index, strlen(index));
    for (int via_dir = 0; via_dir < 2; via_dir++) {
        br_st_file *f = NULL;
        CHECK_OK(ctx, br_st_open(ctx, via_dir ? dir : idx, &f));
        if (!f) continue;
        CHECK(br_st_count(f) == 3, "3 tensors over 2 shards");
        check_tensor(f, &r1[0]);
        check_tensor(f, &r1[1]);
        check_tensor(f, &r2[0]);
        const br_st_tensor *c = br_st_find(f, "c.weight");
        CHECK(c && !strcmp(c->file, p2), "c.weight from shard 2: %s", c ? c->file : "");
        CHECK(br_st_meta(f, "who") && !strcmp(br_st_meta(f, "who"), "shard-2"),
              "first shard's metadata wins");
        float x;
        CHECK_OK(ctx, br_st_read_f32(ctx, f, c, 0, 1, &x));
        br_st_close(f);
    }

    /* hostile indexes */
    static const struct {
        const char *text;
        br_status st;
        const char *expect;
    } bad[] = {
        {"{\"weight_map\":{\"a.weight\":\"../model-00001-of-00002.safetensors\"}}", BR_E_FORMAT,
         "not a plain file name"},
        {"{\"weight_map\":{\"a.weight\":\"/etc/passwd\"}}", BR_E_FORMAT, "not a plain file name"},
        {"{\"weight_map\":{\"a.weight\":\"..\"}}", BR_E_FORMAT, "not a plain file name"},
        {"{\"weight_map\":{\"a.weight\":\"\"}}", BR_E_FORMAT, "not a plain file name"},
        {"{\"weight_map\":{\"a.weight\":\"gone.safetensors\"}}", BR_E_IO, "gone.safetensors"},
        {"{\"metadata\":{}}", BR_E_FORMAT, "weight_map is missing"},
        {"{\"weight_map\":[]}", BR_E_FORMAT, "not a JSON object"},
        {"{\"weight_map\":{}}", BR_E_FORMAT, "empty"},
        {"{\"weight_map\":{\"a.weight\":7}}", BR_E_FORMAT, "not a string"},
        {"{\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\","
         "\"a.weight\":\"model-00001-of-00002.safetensors\"}}",
         BR_E_FORMAT, "appears twice"},
        {"{\"weight_map\":{\"zz.weight\":\"model-00001-of-00002.safetensors\"}}", BR_E_FORMAT,
         "tensor 'zz.weight' is not in"},
        {"{\"weight_map\":{\"a.weight\":\"model-00002-of-00002.safetensors\","
         "\"c.weight\":\"model-00001-of-00002.safetensors\"}}",
         BR_E_FORMAT, "but it is in"},
        {"{\"weight_map\":", BR_E_FORMAT, "not valid JSON"},
    };
    char bidx[600];
    path_in(bidx, sizeof bidx, dir, "bad.index.json");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(bidx, bad[i].text, strlen(bad[i].text));
        br_st_file *f = NULL;
        br_status st = br_st_open(ctx, bidx, &f);
        CHECK(st == bad[i].st, "bad index %zu: %s, expected %s", i, br_status_name(st),
              br_status_name(bad[i].st));
        CHECK(has(br_ctx_error(ctx), bad[i].expect), "bad index %zu: message \"%s\"", i,
              br_ctx_error(ctx));
        if (f) br_st_close(f);
    }
    /* the same tensor in two shards */
    char p3[600];
    path_in(p3, sizeof p3, dir, "dup.safetensors");
    ref_tensor r3[1];
    const char *n3[] = {"a.weight"};
    write_shard(p3, n3, 1, r3);
    const char *dup = "{\"weight_map\":{\"a.weight\":\"dup.safetensors\","
                      "\"b.weight\":\"model-00001-of-00002.safetensors\"}}";
    write_file(bidx, dup, strlen(dup));
    CHECK_FAILS(ctx, BR_E_FORMAT, br_st_open(ctx, bidx, &(br_st_file *){NULL}));
    CHECK(has(br_ctx_error(ctx), "is in both"), "duplicate across shards: %s", br_ctx_error(ctx));

    /* a directory with a single model.safetensors */
    char single_dir[400], single[600];
    subdir(single_dir, sizeof single_dir, "single");
    path_in(single, sizeof single, single_dir, "model.safetensors");
    free(r3[0].data);
    write_shard(single, n2, 1, r3);
    br_st_file *f = NULL;
    CHECK_OK(ctx, br_st_open(ctx, single_dir, &f));
    CHECK(f && br_st_count(f) == 1, "directory with model.safetensors");
    br_st_close(f);
    for (int i = 0; i < 2; i++)
        free(r1[i].data);
    free(r2[0].data);
    free(r3[0].data);
    rm_tree(dir);
    rm_tree(single_dir);
}

/* ---------------------------------------------------------------- the writer's failures */

static void writer_errors(void) {
    init();
    char dir[400], path[600], bad[800];
    subdir(dir, sizeof dir, "writer");
    path_in(path, sizeof path, dir, "w.safetensors");
    br_st_writer *w = NULL;
    /* unwritable locations: a missing directory, a "directory" that is a file */
    path_in(bad, sizeof bad, dir, "no/such/dir/out.safetensors");
    CHECK_FAILS(ctx, BR_E_IO, br_st_writer_new(ctx, bad, &w));
    CHECK(w == NULL && has(br_ctx_error(ctx), bad), "message names the output: %s",
          br_ctx_error(ctx));
    write_file(path, "x", 1);
    path_in(bad, sizeof bad, path, "out.safetensors");
    CHECK_FAILS(ctx, BR_E_IO, br_st_writer_new(ctx, bad, &w));
    CHECK_FAILS(ctx, BR_E_IO, br_st_writer_new(ctx, "/proc/bitrank-test/out.safetensors", &w));
    CHECK_FAILS(ctx, BR_E_IO, br_st_writer_new(ctx, dir, &w)); /* an existing directory */
    CHECK(has(br_ctx_error(ctx), "is a directory"), "%s", br_ctx_error(ctx));
    unlink(path);
    if (geteuid() != 0) { /* permission bits do not stop root */
        char ro[450];
        path_in(ro, sizeof ro, dir, "readonly");
        mkdir(ro, 0555);
        path_in(bad, sizeof bad, ro, "out.safetensors");
        CHECK_FAILS(ctx, BR_E_IO, br_st_writer_new(ctx, bad, &w));
        CHECK(has(br_ctx_error(ctx), "Permission denied"), "%s", br_ctx_error(ctx));
        rmdir(ro);
    }
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_new(ctx, NULL, &w));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_new(ctx, "", &w));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_new(ctx, "dir/", &w));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_new(ctx, path, NULL));

    /* bad tensors */
    CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
    uint8_t data[64] = {1};
    uint64_t shape[BR_ST_MAX_DIMS + 1] = {2, 2, 1, 1, 1, 1, 1, 1, 1};
    uint64_t huge[2] = {(uint64_t)1 << 40, (uint64_t)1 << 40};
    uint64_t three = 3, bits_overflow = (uint64_t)1 << 60;
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_add(w, NULL, BR_ST_U8, 1, shape, data));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_add(w, "", BR_ST_U8, 1, shape, data));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_add(w, "__metadata__", BR_ST_U8, 1, shape, data));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_add(w, "bad\xff", BR_ST_U8, 1, shape, data));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_add(w, "x", BR_ST_UNKNOWN, 1, shape, data));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_add(w, "x", (br_st_dtype)999, 1, shape, data));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_add(w, "x", BR_ST_U8, BR_ST_MAX_DIMS + 1, shape, data));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_add(w, "x", BR_ST_U8, 2, NULL, data));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_add(w, "x", BR_ST_U8, 2, shape, NULL));
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_st_writer_add(w, "x", BR_ST_U8, 2, huge, data));
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_st_writer_add(w, "x", BR_ST_F64, 1, &bits_overflow, data));
    CHECK_FAILS(ctx, BR_E_SHAPE, br_st_writer_add(w, "x", BR_ST_F4, 1, &three, data));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_meta(w, "", "v"));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_meta(w, "k", NULL));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_meta(w, "k", "\xc3"));
    /* a name added twice fails at finish, leaving nothing */
    CHECK_OK(ctx, br_st_writer_add(w, "t", BR_ST_U8, 1, shape, data));
    CHECK_OK(ctx, br_st_writer_add(w, "t", BR_ST_U8, 1, shape, data));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_finish(w));
    CHECK(has(br_ctx_error(ctx), "'t' was added twice"), "%s", br_ctx_error(ctx));
    CHECK_FAILS(ctx, BR_E_STATE, br_st_writer_add(w, "u", BR_ST_U8, 1, shape, data));
    br_st_writer_free(w);
    CHECK(!file_exists(path) && dir_entries(dir) == 0, "nothing left after a failed finish");

    /* a header readers would refuse (over BR_ST_MAX_HEADER bytes) is not written */
    size_t huge_n = (size_t)BR_ST_MAX_HEADER;
    char *huge_value = t_xmalloc(huge_n + 1);
    memset(huge_value, 'v', huge_n);
    huge_value[huge_n] = '\0';
    CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
    CHECK_OK(ctx, br_st_writer_meta(w, "k", huge_value));
    free(huge_value);
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_st_writer_finish(w));
    CHECK(has(br_ctx_error(ctx), "header would be") && has(br_ctx_error(ctx), path), "%s",
          br_ctx_error(ctx));
    br_st_writer_free(w);
    CHECK(!file_exists(path) && dir_entries(dir) == 0, "nothing left after a too-large header");

    /* abandoned writer: nothing left */
    CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
    CHECK(dir_entries(dir) == 1, "the temporary file exists while writing");
    br_st_writer_free(w);
    CHECK(!file_exists(path) && dir_entries(dir) == 0, "nothing left after free without finish");

    /* a full disk (the file size limit makes write fail with EFBIG), over an existing
     * good file: the failure is BR_E_IO, the old file survives, no temporary stays */
    uint8_t old[3] = {7, 8, 9};
    write_file(path, old, 3);
    size_t big_n = 1 << 20;
    uint8_t *big = t_xmalloc(big_n);
    memset(big, 0x5a, big_n);
    struct rlimit saved;
    getrlimit(RLIMIT_FSIZE, &saved);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = {.rlim_cur = 64 * 1024, .rlim_max = saved.rlim_max};
    if (setrlimit(RLIMIT_FSIZE, &small) == 0) {
        CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
        uint64_t bn = big_n;
        CHECK_OK(ctx, br_st_writer_add(w, "big", BR_ST_U8, 1, &bn, big));
        CHECK_FAILS(ctx, BR_E_IO, br_st_writer_finish(w));
        CHECK(has(br_ctx_error(ctx), "write failed") && has(br_ctx_error(ctx), path), "%s",
              br_ctx_error(ctx));
        br_st_writer_free(w);
        setrlimit(RLIMIT_FSIZE, &saved);
        size_t n = 0;
        uint8_t *back = read_file(path, &n);
        CHECK(back && n == 3 && !memcmp(back, old, 3), "the old file is intact");
        free(back);
        CHECK(dir_entries(dir) == 1, "no temporary file left after a full disk");
    } else {
        fprintf(stderr, "note: setrlimit(RLIMIT_FSIZE) failed, disk-full case skipped\n");
    }
    signal(SIGXFSZ, prev);
    free(big);
    rm_tree(dir);
}

/* The output's mode is 0666 less the umask, as for any tool's new file (also over an
 * existing file of another mode), with the rename still atomic: no temporary left. */
static void writer_file_mode(void) {
    init();
    char dir[400], path[600];
    subdir(dir, sizeof dir, "mode");
    path_in(path, sizeof path, dir, "m.safetensors");
    static const mode_t masks[] = {022, 027, 002, 077, 0};
    mode_t saved = umask(022);
    uint8_t data[5] = {1, 2, 3, 4, 5};
    uint64_t shape = 5;
    for (size_t i = 0; i < sizeof masks / sizeof masks[0]; i++) {
        umask(masks[i]);
        br_st_writer *w = NULL;
        CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
        CHECK_OK(ctx, br_st_writer_add(w, "t", BR_ST_U8, 1, &shape, data));
        CHECK_OK(ctx, br_st_writer_finish(w));
        br_st_writer_free(w);
        struct stat sb;
        CHECK(stat(path, &sb) == 0, "stat %s", path);
        CHECK((sb.st_mode & 07777) == (0666 & ~masks[i]), "umask %03o: mode %03o, expected %03o",
              (unsigned)masks[i], (unsigned)(sb.st_mode & 07777), (unsigned)(0666 & ~masks[i]));
        CHECK(dir_entries(dir) == 1, "umask %03o: %d entries, expected the output only",
              (unsigned)masks[i], dir_entries(dir));
    }
    umask(saved);
    br_st_file *f = NULL;
    CHECK_OK(ctx, br_st_open(ctx, path, &f));
    const br_st_tensor *t = f ? br_st_find(f, "t") : NULL;
    CHECK(t && t->nbytes == 5 && !memcmp(t->data, data, 5), "the last file reads back");
    br_st_close(f);
    rm_tree(dir);
}

/* ---------------------------------------------------------------- BLR layout */

static void random_layer(br_rng *r, br_blr_host *L, size_t m, size_t n, size_t rank, size_t P) {
    CHECK_OK(ctx, br_blr_host_alloc(ctx, L, m, n, rank, P));
    size_t words = (rank + 31) / 32;
    for (size_t p = 0; p < P; p++) {
        br_blr_path_host *ph = &L->path[p];
        /* every bit random, also those past r (the writer must drop them) */
        for (size_t i = 0; i < m * words; i++)
            ph->bits_u[i] = (uint32_t)br_rng_u64(r);
        for (size_t i = 0; i < n * words; i++)
            ph->bits_v[i] = (uint32_t)br_rng_u64(r);
        for (size_t i = 0; i < m; i++)
            ph->h[i] = br_rng_sym(r) * 0.5f;
        for (size_t k = 0; k < rank; k++)
            ph->l[k] = br_rng_sym(r) * 4.0f;
        for (size_t j = 0; j < n; j++)
            ph->g[j] = br_rng_sym(r) * 2e-5f; /* f16 subnormals too */
    }
}

static int bit_of(const uint32_t *words, size_t row, size_t r, size_t k) {
    return (int)(words[row * ((r + 31) / 32) + k / 32] >> (k % 32) & 1u);
}

/* Ŵ in f64 from the layer's bits and f16-rounded scales. */
static double *reference_w(const br_blr_host *L) {
    double *w = calloc(L->m * L->n, sizeof *w);
    for (size_t p = 0; p < L->paths; p++) {
        const br_blr_path_host *ph = &L->path[p];
        for (size_t i = 0; i < L->m; i++)
            for (size_t j = 0; j < L->n; j++) {
                double s = 0;
                for (size_t k = 0; k < L->r; k++) {
                    double su = bit_of(ph->bits_u, i, L->r, k) ? 1 : -1;
                    double sv = bit_of(ph->bits_v, j, L->r, k) ? 1 : -1;
                    s += su * t_f16_value(br_half_from_float(ph->l[k])) * sv;
                }
                w[i * L->n + j] += t_f16_value(br_half_from_float(ph->h[i])) * s *
                                   t_f16_value(br_half_from_float(ph->g[j]));
            }
    }
    return w;
}

/* Bits and f16-rounded scales of `got` equal those of `want`. */
static void check_same_layer(const br_blr_host *got, const br_blr_host *want, const char *what) {
    CHECK(got->m == want->m && got->n == want->n && got->r == want->r && got->paths == want->paths,
          "%s: shapes", what);
    if (got->m != want->m || got->n != want->n || got->r != want->r || got->paths != want->paths)
        return;
    size_t bad = 0, r = want->r;
    for (size_t p = 0; p < want->paths; p++) {
        const br_blr_path_host *a = &got->path[p], *b = &want->path[p];
        size_t words = (r + 31) / 32;
        for (size_t i = 0; i < want->m; i++) {
            for (size_t k = 0; k < r; k++)
                bad += bit_of(a->bits_u, i, r, k) != bit_of(b->bits_u, i, r, k);
            for (size_t k = r; k < words * 32; k++)
                bad += bit_of(a->bits_u, i, r, k); /* pad bits 0 */
            bad += a->h[i] != (float)t_f16_value(br_half_from_float(b->h[i]));
        }
        for (size_t j = 0; j < want->n; j++) {
            for (size_t k = 0; k < r; k++)
                bad += bit_of(a->bits_v, j, r, k) != bit_of(b->bits_v, j, r, k);
            bad += a->g[j] != (float)t_f16_value(br_half_from_float(b->g[j]));
        }
        for (size_t k = 0; k < r; k++)
            bad += a->l[k] != (float)t_f16_value(br_half_from_float(b->l[k]));
    }
    CHECK(bad == 0, "%s: %zu bits or scales differ", what, bad);
}

static void blr_layout(void) {
    init();
    br_rng r = t_rng_for(4);
    char path[600], src_path[600];
    path_in(path, sizeof path, t_dir, "blr.safetensors");
    path_in(src_path, sizeof src_path, t_dir, "src.safetensors");
    struct {
        size_t m, n, r, P;
    } shapes[6] = {{1, 1, 1, 1},    {7, 13, 5, 2}, {33, 17, 40, 1},
                   {64, 96, 32, 2}, {0, 0, 0, 0},  {0, 0, 0, 0}};
    for (int i = 4; i < 6; i++) {
        shapes[i].m = 1 + br_rng_u64(&r) % 70;
        shapes[i].n = 1 + br_rng_u64(&r) % 70;
        shapes[i].r = 1 + br_rng_u64(&r) % 70;
        shapes[i].P = 1 + br_rng_u64(&r) % 2;
    }
    br_blr_host layers[6];
    char names[6][64];
    for (int i = 0; i < 6; i++) {
        random_layer(&r, &layers[i], shapes[i].m, shapes[i].n, shapes[i].r, shapes[i].P);
        snprintf(names[i], sizeof names[i], "model.layers.%d.mlp.down_proj", i);
    }
    /* a passthrough tensor straight from an open file (borrowed mapping) */
    ref_tensor emb;
    ref_random(&r, &emb, "model.embed_tokens.weight", BR_ST_F16);
    br_st_writer *w = NULL;
    CHECK_OK(ctx, br_st_writer_new(ctx, src_path, &w));
    CHECK_OK(ctx, br_st_writer_add(w, emb.name, emb.dtype, emb.ndim, emb.shape, emb.data));
    CHECK_OK(ctx, br_st_writer_finish(w));
    br_st_writer_free(w);
    br_st_file *src = NULL;
    CHECK_OK(ctx, br_st_open(ctx, src_path, &src));
    if (!src) return;
    const br_st_tensor *pt = br_st_find(src, emb.name);

    CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
    CHECK_OK(ctx, br_st_writer_meta(w, "format", "pt")); /* overridden by the BLR layout */
    CHECK_OK(ctx, br_st_writer_meta(w, "source", "src.safetensors"));
    CHECK_OK(ctx, br_st_writer_add(w, pt->name, pt->dtype, pt->ndim, pt->shape, pt->data));
    for (int i = 0; i < 6; i++)
        CHECK_OK(ctx, br_st_writer_add_blr(w, names[i], &layers[i]));
    CHECK_OK(ctx, br_st_writer_finish(w));
    br_st_writer_free(w);
    br_st_close(src);

    br_st_file *f = NULL;
    CHECK_OK(ctx, br_st_open(ctx, path, &f));
    if (!f) return;
    CHECK(!strcmp(br_st_meta(f, "format"), "bitrank-blr") &&
              !strcmp(br_st_meta(f, "format_version"), "1"),
          "format keys");
    check_tensor(f, &emb);
    CHECK(br_st_count(f) == 1 + 5 * 6, "1 passthrough + 5 tensors per layer");
    CHECK(br_st_blr_count(f) == 6, "6 layers found, got %zu", br_st_blr_count(f));
    for (int i = 0; i < 6 && i < (int)br_st_blr_count(f); i++) {
        const br_blr_host *L = &layers[i];
        const br_blr_info *info = br_st_blr_at(f, (size_t)i);
        size_t rb = (L->r + 7) / 8;
        double bpw = (double)L->paths *
                     ((double)L->r * (double)(L->m + L->n) + 16.0 * (double)(L->m + L->n + L->r)) /
                     ((double)L->m * (double)L->n);
        CHECK(!strcmp(info->name, names[i]) && info->m == L->m && info->n == L->n &&
                  info->r == L->r && info->paths == L->paths && !info->cortiq,
              "layer %d info", i);
        CHECK(fabs(info->bpw - bpw) <= 1e-12 * bpw &&
                  fabs(br_blr_bpw(L->m, L->n, L->r, L->paths) - bpw) <= 1e-12 * bpw,
              "layer %d bpw %g, want %g", i, info->bpw, bpw);
        CHECK(info->nbytes == L->paths * ((L->m + L->n) * rb + 2 * (L->m + L->n + L->r)),
              "layer %d bytes", i);

        /* the documented layout, checked byte by byte against the original */
        char tn[128];
        snprintf(tn, sizeof tn, "%s.blr.u", names[i]);
        const br_st_tensor *tu = br_st_find(f, tn);
        snprintf(tn, sizeof tn, "%s.blr.v", names[i]);
        const br_st_tensor *tv = br_st_find(f, tn);
        snprintf(tn, sizeof tn, "%s.blr.h", names[i]);
        const br_st_tensor *th = br_st_find(f, tn);
        snprintf(tn, sizeof tn, "%s.blr.l", names[i]);
        const br_st_tensor *tl = br_st_find(f, tn);
        snprintf(tn, sizeof tn, "%s.blr.g", names[i]);
        const br_st_tensor *tg = br_st_find(f, tn);
        CHECK(tu && tv && th && tl && tg, "layer %d: five tensors", i);
        if (!tu || !tv || !th || !tl || !tg) continue;
        CHECK(tu->dtype == BR_ST_U8 && tu->ndim == 3 && tu->shape[0] == L->paths &&
                  tu->shape[1] == L->m && tu->shape[2] == rb && th->dtype == BR_ST_F16 &&
                  th->ndim == 2 && th->shape[1] == L->m && tl->shape[1] == L->r &&
                  tg->shape[1] == L->n && tv->shape[1] == L->n,
              "layer %d: tensor shapes", i);
        const uint8_t *u = tu->data, *v = tv->data, *h = th->data, *l = tl->data, *g = tg->data;
        size_t bad = 0;
        for (size_t p = 0; p < L->paths; p++) {
            for (size_t row = 0; row < L->m; row++) {
                for (size_t k = 0; k < rb * 8; k++) {
                    int fb = u[(p * L->m + row) * rb + k / 8] >> (k % 8) & 1;
                    bad += fb != (k < L->r ? bit_of(L->path[p].bits_u, row, L->r, k) : 0);
                }
                bad += br_le16(h + 2 * (p * L->m + row)) != br_half_from_float(L->path[p].h[row]);
            }
            for (size_t row = 0; row < L->n; row++) {
                for (size_t k = 0; k < rb * 8; k++) {
                    int fb = v[(p * L->n + row) * rb + k / 8] >> (k % 8) & 1;
                    bad += fb != (k < L->r ? bit_of(L->path[p].bits_v, row, L->r, k) : 0);
                }
                bad += br_le16(g + 2 * (p * L->n + row)) != br_half_from_float(L->path[p].g[row]);
            }
            for (size_t k = 0; k < L->r; k++)
                bad += br_le16(l + 2 * (p * L->r + k)) != br_half_from_float(L->path[p].l[k]);
        }
        CHECK(bad == 0, "layer %d: %zu bits/scales in the file differ from FORMAT.md's layout", i,
              bad);
        snprintf(tn, sizeof tn, "%s.blr", names[i]);
        CHECK(br_st_meta(f, tn) && has(br_st_meta(f, tn), "\"rank\":"), "layer %d metadata", i);

        /* read back and rebuild Ŵ */
        br_blr_host back;
        CHECK_OK(ctx, br_st_read_blr(ctx, f, names[i], &back));
        check_same_layer(&back, L, names[i]);
        float *wgot = t_xmalloc(L->m * L->n * sizeof *wgot);
        for (size_t e = 0; e < L->m * L->n; e++)
            wgot[e] = NAN;
        CHECK_OK(ctx, br_blr_reconstruct(ctx, &back, wgot));
        double *wref = reference_w(L);
        double err = t_rel_err(wgot, wref, L->m * L->n);
        CHECK(err < 1e-6, "layer %d: reconstruction error %g", i, err);
        free(wgot);
        free(wref);
        br_blr_host_free(&back);
    }
    br_blr_host dummy;
    CHECK_FAILS(ctx, BR_E_ARG, br_st_read_blr(ctx, f, "no.such.layer", &dummy));
    br_st_close(f);

    /* scales that do not fit f16, and bad layers */
    CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
    float keep = layers[1].path[1].l[3];
    layers[1].path[1].l[3] = 1e6f;
    CHECK_FAILS(ctx, BR_E_NONFINITE, br_st_writer_add_blr(w, "x", &layers[1]));
    CHECK(has(br_ctx_error(ctx), "l[3]") && has(br_ctx_error(ctx), "path 1"), "%s",
          br_ctx_error(ctx));
    layers[1].path[1].l[3] = NAN;
    CHECK_FAILS(ctx, BR_E_NONFINITE, br_st_writer_add_blr(w, "x", &layers[1]));
    layers[1].path[1].l[3] = keep;
    br_blr_host broken = layers[1];
    broken.paths = 3;
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_add_blr(w, "x", &broken));
    broken = layers[1];
    broken.r = 0;
    CHECK_FAILS(ctx, BR_E_SHAPE, br_st_writer_add_blr(w, "x", &broken));
    broken = layers[1];
    broken.path[1].g = NULL;
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_add_blr(w, "x", &broken));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_add_blr(w, "", &layers[1]));
    CHECK_FAILS(ctx, BR_E_ARG, br_st_writer_add_blr(w, "x", NULL));
    br_st_writer_free(w);
    CHECK_FAILS(ctx, BR_E_SHAPE, br_blr_host_alloc(ctx, &dummy, 0, 3, 3, 1));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_host_alloc(ctx, &dummy, 3, 3, 3, 0));
    CHECK_FAILS(ctx, BR_E_OVERFLOW, br_blr_host_alloc(ctx, &dummy, SIZE_MAX / 2, 3, 64, 1));
    CHECK_FAILS(ctx, BR_E_ARG, br_blr_reconstruct(ctx, &layers[0], NULL));

    /* a file that claims the layout but whose tensors disagree with the metadata */
    struct {
        const char *meta, *expect;
    } lies[] = {
        {"{\"paths\":1,\"rank\":9,\"out_features\":7,\"in_features\":13}",
         "has shape [2, 7, 1], expected [1, 7, 2]"},
        {"{\"paths\":3,\"rank\":5,\"out_features\":7,\"in_features\":13}", "field 'paths'"},
        {"{\"paths\":2,\"rank\":5,\"out_features\":7}", "'in_features' is missing"},
        {"{\"paths\":2,\"rank\":5,\"out_features\":7,\"in_features\":13,\"rank\":5}",
         "given twice"},
        {"[]", "not an object"},
        {"{", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
        CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
        CHECK_OK(ctx, br_st_writer_add_blr(w, "x", &layers[1]));
        CHECK_OK(ctx, br_st_writer_meta(w, "x.blr", lies[i].meta));
        CHECK_OK(ctx, br_st_writer_finish(w));
        br_st_writer_free(w);
        CHECK_FAILS(ctx, BR_E_FORMAT, br_st_open(ctx, path, &(br_st_file *){NULL}));
        CHECK(has(br_ctx_error(ctx), lies[i].expect) && has(br_ctx_error(ctx), path), "lie %zu: %s",
              i, br_ctx_error(ctx));
    }
    CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
    CHECK_OK(ctx, br_st_writer_meta(w, "format", "bitrank-blr"));
    CHECK_OK(ctx, br_st_writer_meta(w, "format_version", "1"));
    CHECK_OK(ctx, br_st_writer_meta(
                      w, "y.blr", "{\"paths\":1,\"rank\":8,\"out_features\":1,\"in_features\":1}"));
    CHECK_OK(ctx, br_st_writer_finish(w));
    br_st_writer_free(w);
    CHECK_FAILS(ctx, BR_E_FORMAT, br_st_open(ctx, path, &(br_st_file *){NULL}));
    CHECK(has(br_ctx_error(ctx), "'y.blr.u' is missing"), "%s", br_ctx_error(ctx));
    CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
    CHECK_OK(ctx, br_st_writer_meta(w, "format", "bitrank-blr"));
    CHECK_OK(ctx, br_st_writer_meta(w, "format_version", "2"));
    CHECK_OK(ctx, br_st_writer_finish(w));
    br_st_writer_free(w);
    CHECK_FAILS(ctx, BR_E_FORMAT, br_st_open(ctx, path, &(br_st_file *){NULL}));
    CHECK(has(br_ctx_error(ctx), "format_version"), "%s", br_ctx_error(ctx));

    /* layer names longer than any fixed buffer round-trip, in both encodings */
    static char long_blr[1200], long_cortiq[1200];
    memset(long_blr, 'b', sizeof long_blr - 1);
    memset(long_cortiq, 'c', sizeof long_cortiq - 1);
    CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
    CHECK_OK(ctx, br_st_writer_add_blr(w, long_blr, &layers[1]));
    CHECK_OK(ctx, br_st_writer_add_cortiq(w, long_cortiq, &layers[3])); /* n, r multiples of 8 */
    CHECK_OK(ctx, br_st_writer_finish(w));
    br_st_writer_free(w);
    f = NULL;
    CHECK_OK(ctx, br_st_open(ctx, path, &f));
    CHECK(f && br_st_blr_count(f) == 2, "long names: 2 layers, got %zu", br_st_blr_count(f));
    const char *long_names[2] = {long_blr, long_cortiq};
    const br_blr_host *long_layers[2] = {&layers[1], &layers[3]};
    for (int i = 0; f && i < 2; i++) {
        br_blr_host back;
        CHECK_OK(ctx, br_st_read_blr(ctx, f, long_names[i], &back));
        check_same_layer(&back, long_layers[i], i ? "long cortiq name" : "long blr name");
        br_blr_host_free(&back);
    }
    br_st_close(f);

    /* one name stored both as a cortiq payload and in the BLR layout is ambiguous */
    CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
    CHECK_OK(ctx, br_st_writer_add_blr(w, "twice", &layers[3]));
    CHECK_OK(ctx, br_st_writer_add_cortiq(w, "twice", &layers[3]));
    CHECK_OK(ctx, br_st_writer_finish(w));
    br_st_writer_free(w);
    f = NULL;
    CHECK_FAILS(ctx, BR_E_FORMAT, br_st_open(ctx, path, &f));
    CHECK(f == NULL && has(br_ctx_error(ctx), "'twice' is stored twice") &&
              has(br_ctx_error(ctx), path),
          "%s", br_ctx_error(ctx));
    br_st_close(f);

    for (int i = 0; i < 6; i++)
        br_blr_host_free(&layers[i]);
    free(emb.data);
    unlink(path);
    unlink(src_path);
}

/* ---------------------------------------------------------------- cortiq payload */

static void cortiq_payload(void) {
    init();
    br_rng r = t_rng_for(5);
    struct {
        size_t m, n, r, P;
    } shapes[4] = {{1, 8, 8, 1}, {5, 24, 16, 2}, {0, 0, 0, 0}, {0, 0, 0, 0}};
    for (int i = 2; i < 4; i++) {
        shapes[i].m = 1 + br_rng_u64(&r) % 50;
        shapes[i].n = 8 * (1 + br_rng_u64(&r) % 8);
        shapes[i].r = 8 * (1 + br_rng_u64(&r) % 9);
        shapes[i].P = 1 + br_rng_u64(&r) % 2;
    }
    char path[600];
    path_in(path, sizeof path, t_dir, "cortiq.safetensors");
    br_st_writer *w = NULL;
    CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
    br_blr_host layers[4];
    for (int t = 0; t < 4; t++) {
        br_blr_host *L = &layers[t];
        random_layer(&r, L, shapes[t].m, shapes[t].n, shapes[t].r, shapes[t].P);
        size_t m = L->m, n = L->n, rk = L->r, P = L->paths;
        size_t want = 16 + P * (2 * (m + n + rk) + m * rk / 8 + rk * n / 8), size = 0;
        CHECK_OK(ctx, br_blr_cortiq_encode(ctx, L, NULL, 0, &size));
        CHECK(size == want, "payload size %zu, want %zu", size, want);
        uint8_t *buf = t_xmalloc(size + 1);
        memset(buf, 0xee, size + 1);
        CHECK_FAILS(ctx, BR_E_SIZE, br_blr_cortiq_encode(ctx, L, buf, size - 1, &size));
        CHECK_OK(ctx, br_blr_cortiq_encode(ctx, L, buf, size, &size));
        CHECK(buf[size] == 0xee, "nothing written past the payload");
        /* the header and every field at the documented place */
        CHECK(buf[0] == 0x4C && buf[1] == 1 && buf[2] == P && buf[3] == 0 &&
                  br_le32(buf + 4) == rk && br_le32(buf + 8) == m && br_le32(buf + 12) == n,
              "cortiq header");
        size_t bad = 0;
        const uint8_t *o = buf + 16;
        for (size_t p = 0; p < P; p++) {
            const br_blr_path_host *ph = &L->path[p];
            for (size_t i = 0; i < m; i++)
                bad += br_le16(o + 2 * i) != br_half_from_float(ph->h[i]);
            o += 2 * m;
            for (size_t j = 0; j < n; j++)
                bad += br_le16(o + 2 * j) != br_half_from_float(ph->g[j]);
            o += 2 * n;
            for (size_t k = 0; k < rk; k++)
                bad += br_le16(o + 2 * k) != br_half_from_float(ph->l[k]);
            o += 2 * rk;
            for (size_t i = 0; i < m; i++)
                for (size_t k = 0; k < rk; k++)
                    bad += (o[i * rk / 8 + k / 8] >> (k % 8) & 1) != bit_of(ph->bits_u, i, rk, k);
            o += m * rk / 8;
            for (size_t k = 0; k < rk; k++)
                for (size_t j = 0; j < n; j++)
                    bad += (o[k * n / 8 + j / 8] >> (j % 8) & 1) != bit_of(ph->bits_v, j, rk, k);
            o += rk * n / 8;
        }
        CHECK(bad == 0 && o == buf + size, "shape %d: %zu fields differ from the cortiq layout", t,
              bad);
        br_blr_host back;
        CHECK_OK(ctx, br_blr_cortiq_decode(ctx, buf, size, &back));
        check_same_layer(&back, L, "cortiq decode");
        br_blr_host_free(&back);

        /* hostile payloads */
        struct {
            size_t at;
            uint8_t value;
            const char *expect;
        } pokes[] = {{0, 0x4D, "magic"},
                     {1, 2, "version"},
                     {2, 0, "paths"},
                     {2, 3, "paths"},
                     {3, 1, "reserved"},
                     {4, 0, "r = 0"},
                     {4, (uint8_t)(rk + 1), "multiples of 8"},
                     {12, (uint8_t)(n + 8), "need"}};
        for (size_t i = 0; i < sizeof pokes / sizeof pokes[0]; i++) {
            uint8_t keep = buf[pokes[i].at];
            buf[pokes[i].at] = pokes[i].value;
            CHECK_FAILS(ctx, BR_E_FORMAT, br_blr_cortiq_decode(ctx, buf, size, &back));
            CHECK(has(br_ctx_error(ctx), pokes[i].expect), "poke %zu: %s", i, br_ctx_error(ctx));
            buf[pokes[i].at] = keep;
        }
        CHECK_FAILS(ctx, BR_E_FORMAT, br_blr_cortiq_decode(ctx, buf, size - 1, &back));
        CHECK_FAILS(ctx, BR_E_FORMAT, br_blr_cortiq_decode(ctx, buf, size + 1, &back));
        CHECK_FAILS(ctx, BR_E_FORMAT, br_blr_cortiq_decode(ctx, buf, 15, &back));
        free(buf);
        char name[32];
        snprintf(name, sizeof name, "layer%d.q_proj", t);
        CHECK_OK(ctx, br_st_writer_add_cortiq(w, name, L));
    }
    CHECK_OK(ctx, br_st_writer_finish(w));
    br_st_writer_free(w);
    br_st_file *f = NULL;
    CHECK_OK(ctx, br_st_open(ctx, path, &f));
    CHECK(f && br_st_blr_count(f) == 4, "4 cortiq layers listed");
    for (int t = 0; f && t < 4; t++) {
        const br_blr_info *info = br_st_blr_at(f, (size_t)t);
        CHECK(info && info->cortiq && info->m == layers[t].m && info->n == layers[t].n &&
                  info->r == layers[t].r && info->paths == layers[t].paths,
              "cortiq info %d", t);
        br_blr_host back;
        CHECK_OK(ctx, br_st_read_blr(ctx, f, info->name, &back));
        check_same_layer(&back, &layers[t], "cortiq from file");
        br_blr_host_free(&back);
    }
    br_st_close(f);

    /* shapes the payload cannot hold */
    br_blr_host odd;
    size_t size;
    random_layer(&r, &odd, 3, 16, 12, 1);
    CHECK_FAILS(ctx, BR_E_UNSUPPORTED, br_blr_cortiq_encode(ctx, &odd, NULL, 0, &size));
    br_blr_host_free(&odd);
    random_layer(&r, &odd, 3, 12, 16, 1);
    CHECK_FAILS(ctx, BR_E_UNSUPPORTED, br_blr_cortiq_encode(ctx, &odd, NULL, 0, &size));
    br_blr_host_free(&odd);
    for (int t = 0; t < 4; t++)
        br_blr_host_free(&layers[t]);
    unlink(path);
}

/* ---------------------------------------------------------------- mutations */

/* Random edits of valid inputs: every parser must answer OK or BR_E_FORMAT, and
 * whatever it accepts must be readable in full (ASan watches the bounds). */
static void mutated_inputs(void) {
    init();
    br_rng r = t_rng_for(6);
    char path[600];
    path_in(path, sizeof path, t_dir, "seed.safetensors");
    br_st_writer *w = NULL;
    CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
    br_blr_host L;
    random_layer(&r, &L, 5, 16, 8, 2);
    uint64_t shape[2] = {2, 3};
    float vals[6] = {1, 2, 3, 4, 5, 6};
    CHECK_OK(ctx, br_st_writer_add(w, "norm.weight", BR_ST_F32, 2, shape, vals));
    CHECK_OK(ctx, br_st_writer_add_blr(w, "lin", &L));
    CHECK_OK(ctx, br_st_writer_add_cortiq(w, "lin2", &L));
    CHECK_OK(ctx, br_st_writer_finish(w));
    br_st_writer_free(w);
    size_t seed_n = 0;
    uint8_t *seed = read_file(path, &seed_n);
    unlink(path);
    const char *index = "{\"metadata\":{\"total_size\":10},\"weight_map\":{\"a\":\"x.safetensors\","
                        "\"b\":\"y.safetensors\",\"c\":\"x.safetensors\"}}";
    size_t index_n = strlen(index);
    const char structural[] = "{}[]\",:0123456789-.eE\\u \xff\x80";
    size_t unexpected = 0, accepted = 0;
    float *tmp = t_xmalloc(64 * 1024 * sizeof *tmp);
    for (int it = 0; it < 20000; it++) {
        int which = it % 3;
        const uint8_t *base = which == 0 ? seed : (const uint8_t *)index;
        size_t n = which == 0 ? seed_n : index_n;
        if (which == 2) { /* a cortiq payload */
            size_t sz;
            br_blr_cortiq_encode(ctx, &L, NULL, 0, &sz);
            uint8_t *pl = t_xmalloc(sz);
            br_blr_cortiq_encode(ctx, &L, pl, sz, &sz);
            int edits = 1 + (int)(br_rng_u64(&r) % 3);
            for (int e = 0; e < edits; e++)
                pl[br_rng_u64(&r) % (sz < 16 ? sz : 16)] = (uint8_t)br_rng_u64(&r);
            size_t len = br_rng_u64(&r) % 4 ? sz : br_rng_u64(&r) % (sz + 1);
            uint8_t *exact = t_xmalloc(len);
            memcpy(exact, pl, len);
            br_blr_host out;
            br_status st = br_blr_cortiq_decode(ctx, exact, len, &out);
            unexpected += st != BR_OK && st != BR_E_FORMAT;
            if (st == BR_OK) br_blr_host_free(&out);
            free(exact);
            free(pl);
            continue;
        }
        uint8_t *m = t_xmalloc(n + 16);
        memcpy(m, base, n);
        size_t len = n;
        int edits = 1 + (int)(br_rng_u64(&r) % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = br_rng_u64(&r) % len;
            switch (br_rng_u64(&r) % 4) {
            case 0: m[at] = (uint8_t)br_rng_u64(&r); break;
            case 1: m[at] = (uint8_t)structural[br_rng_u64(&r) % (sizeof structural - 1)]; break;
            case 2: len = at + 1; break; /* truncate */
            default: m[at] ^= (uint8_t)(1u << (br_rng_u64(&r) % 8)); break;
            }
        }
        uint8_t *exact = t_xmalloc(len); /* exact size so ASan sees any overread */
        memcpy(exact, m, len);
        free(m);
        br_status st;
        if (which == 0) {
            br_st_file *f = NULL;
            st = br_st_open_memory(ctx, "mutant", exact, len, &f);
            if (st == BR_OK) {
                accepted++;
                unsigned sum = 0;
                for (size_t i = 0; i < br_st_count(f); i++) {
                    const br_st_tensor *t = br_st_tensor_at(f, i);
                    for (uint64_t b = 0; b < t->nbytes; b++)
                        sum += ((const uint8_t *)t->data)[b];
                    if (t->numel <= 64 * 1024) br_st_read_f32(ctx, f, t, 0, (size_t)t->numel, tmp);
                }
                for (size_t i = 0; i < br_st_blr_count(f); i++) {
                    br_blr_host out;
                    if (br_st_read_blr(ctx, f, br_st_blr_at(f, i)->name, &out) == BR_OK)
                        br_blr_host_free(&out);
                }
                (void)sum;
                br_st_close(f);
            }
        } else {
            br_st_index idx;
            st = br_st_index_parse(ctx, "mutant.json", (const char *)exact, len, &idx);
            if (st == BR_OK) br_st_index_free(&idx);
        }
        unexpected += st != BR_OK && st != BR_E_FORMAT;
        free(exact);
    }
    CHECK(unexpected == 0, "%zu mutants got a status other than OK / BR_E_FORMAT", unexpected);
    CHECK(accepted > 0, "some mutants (e.g. of data bytes) are still valid files");
    free(tmp);
    free(seed);
    br_blr_host_free(&L);
}

T_RUN("safetensors", T_CASE(json_parses), T_CASE(roundtrip_every_dtype), T_CASE(convert_to_f32),
      T_CASE(hostile_headers), T_CASE(open_errors), T_CASE(sharded_index), T_CASE(writer_errors),
      T_CASE(writer_file_mode), T_CASE(blr_layout), T_CASE(cortiq_payload), T_CASE(mutated_inputs))
