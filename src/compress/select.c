/* Which tensors of a checkpoint the compression replaces: 2-D linear weights by
 * default, adjusted by include and exclude glob patterns. */
#include <ctype.h>
#include <fnmatch.h>
#include <string.h>

#include "compress/compress.h"

/* Case-insensitive substring test. */
static int contains_ci(const char *s, const char *needle) {
    size_t n = strlen(needle);
    for (; *s; s++) {
        size_t i = 0;
        while (i < n && s[i] && tolower((unsigned char)s[i]) == needle[i])
            i++;
        if (i == n) return 1;
    }
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && memcmp(s + a - b, suffix, b) == 0;
}

static int matches_any(const char *const *pats, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (pats && pats[i] && fnmatch(pats[i], name, 0) == 0) return 1;
    return 0;
}

/* The default rule: a linear layer's weight, not an embedding, head or norm. */
static int default_selects(const char *name) {
    static const char *const skip[] = {"embed", "wte", "wpe", "lm_head", "norm", "ln_"};
    if (!ends_with(name, ".weight")) return 0;
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        if (contains_ci(name, skip[i])) return 0;
    return 1;
}

int br_compress_selects(const br_compress_opts *opts, const char *name, size_t ndim) {
    if (!name || ndim != 2) return 0;
    if (opts && matches_any(opts->exclude, opts->n_exclude, name)) return 0;
    if (default_selects(name)) return 1;
    return opts && matches_any(opts->include, opts->n_include, name);
}

int br_compress_included(const br_compress_opts *opts, const char *name) {
    return opts && name && matches_any(opts->include, opts->n_include, name);
}
