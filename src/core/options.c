/* The options of a context as text: one table of keys, a parser that refuses what
 * it does not know, and the formatter that prints them back. */
#include "core/options.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const br_gemm_tile_names[BR_GEMM_TILE_COUNT] = {"256x128", "256x112", "128x256",
                                                            "128x128", "128x192", "256x96"};
const char *const br_gemm_asrc_names[BR_GEMM_ASRC_COUNT] = {"smem", "reg2", "reg4"};

typedef enum key_kind {
    KEY_WORDS, /* one of words[], stored as its index */
    KEY_RANGE, /* an integer in [lo, hi], or words[0] for the value 0 */
    KEY_TILE,  /* "auto" (-1) or a tile name; gemm_tile also takes "/<A source>" */
} key_kind;

#define KEY_WORDS_MAX 6

typedef struct key_def {
    const char *name;
    key_kind kind;
    size_t offset;
    /* KEY_WORDS: the values; KEY_RANGE: the word for 0, if any */
    const char *words[KEY_WORDS_MAX];
    int lo, hi;           /* KEY_RANGE */
    const char *what;     /* what it changes, for the error message */
} key_def;

#define OFF(f) offsetof(br_options, f)
static const key_def keys[] = {
    {"bits_gemm", KEY_WORDS, OFF(bits_gemm), {"0", "1"}, 0, 0, "the bitmap GEMM"},
    {"profile", KEY_WORDS, OFF(profile), {"0", "1"}, 0, 0, "the op profiler"},
    {"gemm", KEY_WORDS, OFF(gemm_kernel), {"auto", "mma", "wgmma"}, 0, 0, "the GEMM family"},
    {"gemm_tile", KEY_TILE, OFF(gemm_tile), {0}, 0, 0, "the wgmma tile"},
    {"gemm_splitk", KEY_RANGE, OFF(gemm_splitk), {"auto"}, 1, 64, "the split-K factor"},
    {"gemm_ctas", KEY_RANGE, OFF(gemm_ctas), {"all"}, 1, 1 << 20, "the persistent grid"},
    {"mm_stage16", KEY_WORDS, OFF(mm_stage16), {"0", "1"}, 0, 0, "the fused f16 staging"},
    {"mm_tn", KEY_WORDS, OFF(mm_tn_copy), {"auto", "copy"}, 0, 0, "the MN-major GEMM path"},
    {"mm_tn2", KEY_WORDS, OFF(mm_tn2), {"0", "1"}, 0, 0, "paired MN-major products"},
    {"pdl", KEY_WORDS, OFF(pdl), {"auto", "off", "all"}, 0, 0, "programmatic launches"},
    {"expand_blocks", KEY_RANGE, OFF(expand_blocks), {"all"}, 1, 1 << 20, "expansion grids"},
    {"vk_gemm", KEY_WORDS, OFF(vk_gemm), {"auto", "tiled", "coop", "coop_emulated"}, 0, 0,
     "the Vulkan GEMM shader"},
    {"vk_coop_shape", KEY_WORDS, OFF(vk_coop_shape), {"auto", BR_VK_COOP_SHAPES}, 0, 0,
     "the cooperative-matrix shape"},
};
#undef OFF
#define NKEYS (sizeof keys / sizeof keys[0])

br_options br_options_default(void) {
    br_options o;
    memset(&o, 0, sizeof o);
    o.bits_gemm = 1;
    o.gemm_tile = o.gemm_asrc = -1;
    o.mm_stage16 = 1;
    o.mm_tn2 = 1;
    return o;
}

static int *field(br_options *o, const key_def *k) { return (int *)((char *)o + k->offset); }
static int get(const br_options *o, const key_def *k) {
    return *(const int *)((const char *)o + k->offset);
}

static const key_def *find_key(const char *name, size_t len) {
    for (size_t i = 0; i < NKEYS; i++)
        if (strlen(keys[i].name) == len && !strncmp(keys[i].name, name, len)) return &keys[i];
    return NULL;
}

static int word_index(const char *const *words, size_t n, const char *v, size_t len) {
    for (size_t i = 0; i < n && words[i]; i++)
        if (strlen(words[i]) == len && !strncmp(words[i], v, len)) return (int)i;
    return -1;
}

/* What a key accepts, for messages: "auto, mma or wgmma". */
static void accepted(const key_def *k, char *buf, size_t len) {
    size_t at = 0;
    buf[0] = '\0';
    if (k->kind == KEY_RANGE) {
        snprintf(buf, len, "%s%s%d..%d", k->words[0] ? k->words[0] : "",
                 k->words[0] ? " or " : "", k->lo, k->hi);
        return;
    }
    const char *const *w = k->kind == KEY_WORDS ? k->words : br_gemm_tile_names;
    size_t n = k->kind == KEY_WORDS ? KEY_WORDS_MAX : BR_GEMM_TILE_COUNT;
    if (k->kind == KEY_TILE) at += (size_t)snprintf(buf, len, "auto, ");
    for (size_t i = 0; i < n && w[i] && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? ", " : "", w[i]);
    if (k->kind == KEY_TILE && !strcmp(k->name, "gemm_tile") && at < len)
        snprintf(buf + at, len - at, " (each optionally /smem, /reg2 or /reg4)");
}

/* One "value" of key k into *o; 0 if it is not one the key takes. */
static int set_value(br_options *o, const key_def *k, const char *v, size_t len) {
    switch (k->kind) {
    case KEY_WORDS: {
        int i = word_index(k->words, KEY_WORDS_MAX, v, len);
        if (i < 0) return 0;
        *field(o, k) = i;
        return 1;
    }
    case KEY_RANGE: {
        if (k->words[0] && word_index(k->words, 1, v, len) == 0) {
            *field(o, k) = 0;
            return 1;
        }
        if (len == 0 || len > 9) return 0;
        long x = 0;
        for (size_t i = 0; i < len; i++) {
            if (!isdigit((unsigned char)v[i])) return 0;
            x = 10 * x + (v[i] - '0');
        }
        if (x < k->lo || x > k->hi) return 0;
        *field(o, k) = (int)x;
        return 1;
    }
    case KEY_TILE: {
        const char *slash = memchr(v, '/', len);
        size_t tlen = slash ? (size_t)(slash - v) : len;
        int asrc = -1;
        if (slash) {
            if (strcmp(k->name, "gemm_tile") != 0) return 0;
            asrc = word_index(br_gemm_asrc_names, BR_GEMM_ASRC_COUNT, slash + 1,
                              len - tlen - 1);
            if (asrc < 0) return 0;
        }
        int t = tlen == 4 && !strncmp(v, "auto", 4)
                    ? -1
                    : word_index(br_gemm_tile_names, BR_GEMM_TILE_COUNT, v, tlen);
        if (t < 0 && !(tlen == 4 && !strncmp(v, "auto", 4))) return 0;
        if (t < 0 && asrc >= 0) return 0; /* "auto/reg2" */
        *field(o, k) = t;
        if (!strcmp(k->name, "gemm_tile")) o->gemm_asrc = asrc;
        return 1;
    }
    }
    return 0;
}

br_status br_options_parse(br_options *opt, const char *spec, char *err, size_t err_len) {
    if (err && err_len) err[0] = '\0';
    if (!opt || !spec) {
        if (err && err_len) snprintf(err, err_len, "options: %s is NULL", opt ? "spec" : "opt");
        return BR_E_ARG;
    }
    br_options o = *opt;
    const char *p = spec;
    for (;;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p) break;
        const char *item = p;
        while (*p && *p != ',')
            p++;
        size_t len = (size_t)(p - item);
        while (len && item[len - 1] == ' ')
            len--;
        const char *eq = memchr(item, '=', len);
        if (!eq) {
            if (err && err_len)
                snprintf(err, err_len, "options: \"%.*s\" is not key=value", (int)len, item);
            return BR_E_ARG;
        }
        size_t klen = (size_t)(eq - item);
        while (klen && item[klen - 1] == ' ')
            klen--;
        const key_def *k = find_key(item, klen);
        if (!k) {
            char known[512];
            size_t at = 0;
            for (size_t i = 0; i < NKEYS && at < sizeof known; i++)
                at += (size_t)snprintf(known + at, sizeof known - at, "%s%s", i ? ", " : "",
                                       keys[i].name);
            if (err && err_len)
                snprintf(err, err_len, "options: unknown key \"%.*s\" (the keys: %s)", (int)klen,
                         item, known);
            return BR_E_ARG;
        }
        const char *v = eq + 1;
        while (*v == ' ' && v < item + len)
            v++;
        size_t vlen = (size_t)(item + len - v);
        if (!set_value(&o, k, v, vlen)) {
            char ok[320], what[400];
            accepted(k, ok, sizeof ok);
            snprintf(what, sizeof what, "%s takes %s", k->name, ok);
            if (err && err_len)
                snprintf(err, err_len, "options: \"%.*s\": %s", (int)len, item, what);
            return BR_E_ARG;
        }
    }
    *opt = o;
    return BR_OK;
}

static void value_text(const br_options *o, const key_def *k, char *buf, size_t len) {
    int v = get(o, k);
    switch (k->kind) {
    case KEY_WORDS: snprintf(buf, len, "%s", k->words[v]); return;
    case KEY_RANGE:
        if (v == 0 && k->words[0])
            snprintf(buf, len, "%s", k->words[0]);
        else
            snprintf(buf, len, "%d", v);
        return;
    case KEY_TILE:
        if (v < 0)
            snprintf(buf, len, "auto");
        else if (!strcmp(k->name, "gemm_tile") && o->gemm_asrc >= 0)
            snprintf(buf, len, "%s/%s", br_gemm_tile_names[v], br_gemm_asrc_names[o->gemm_asrc]);
        else
            snprintf(buf, len, "%s", br_gemm_tile_names[v]);
        return;
    }
}

void br_options_format(const br_options *opt, char *buf, size_t len) {
    if (!buf || !len) return;
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < NKEYS && at < len; i++) {
        char v[32];
        value_text(opt, &keys[i], v, sizeof v);
        at += (size_t)snprintf(buf + at, len - at, "%s%s=%s", i ? "," : "", keys[i].name, v);
    }
}

br_status br_options_value(const br_options *opt, const char *key, char *buf, size_t len) {
    const key_def *k = key ? find_key(key, strlen(key)) : NULL;
    if (!k || !buf || !len) return BR_E_ARG;
    value_text(opt, k, buf, len);
    return BR_OK;
}
