/* Natural order, block index and type of layer names. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cli/layer_name.h"

static int is_digit(char c) { return c >= '0' && c <= '9'; }

int br_cli_name_cmp(const char *a, const char *b) {
    /* first difference in leading zeros, the tie-break of numbers equal in value */
    int zeros = 0;
    while (*a && *b) {
        if (is_digit(*a) && is_digit(*b)) {
            const char *za = a, *zb = b;
            while (*a == '0')
                a++;
            while (*b == '0')
                b++;
            size_t la = 0, lb = 0;
            while (is_digit(a[la]))
                la++;
            while (is_digit(b[lb]))
                lb++;
            /* without leading zeros, the longer run is the larger number */
            if (la != lb) return la < lb ? -1 : 1;
            int c = memcmp(a, b, la);
            if (c) return c;
            if (!zeros && a - za != b - zb) zeros = a - za < b - zb ? -1 : 1;
            a += la;
            b += lb;
            continue;
        }
        unsigned char ca = (unsigned char)*a, cb = (unsigned char)*b;
        if (ca != cb) return ca < cb ? -1 : 1;
        a++;
        b++;
    }
    if (*a || *b) return *a ? 1 : -1;
    return zeros;
}

/* Start and length of the block index component of `name`; 0 if none. */
static int find_block(const char *name, const char **start, size_t *len) {
    for (const char *c = name; *c;) {
        size_t n = strcspn(c, ".");
        size_t d = 0;
        while (d < n && is_digit(c[d]))
            d++;
        if (n > 0 && d == n) {
            *start = c;
            *len = n;
            return 1;
        }
        c += n;
        if (*c == '.') c++;
    }
    return 0;
}

long br_cli_block_index(const char *name) {
    const char *s;
    size_t len;
    if (!find_block(name, &s, &len)) return -1;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (v > (INT_MAX - 9) / 10) return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

void br_cli_layer_type(char *dst, size_t cap, const char *name) {
    if (cap == 0) return;
    const char *s;
    size_t len;
    const char *type = name;
    if (find_block(name, &s, &len)) {
        type = s + len;
        if (*type == '.') type++;
        /* a block index that ends the name: the type is what comes before it */
        if (!*type) type = name;
    }
    size_t n = strlen(type);
    static const char suffix[] = ".weight";
    size_t sl = sizeof suffix - 1;
    if (n > sl && !strcmp(type + n - sl, suffix)) n -= sl;
    if (n >= cap) n = cap - 1;
    memcpy(dst, type, n);
    dst[n] = '\0';
}

static int layer_ptr_cmp(const void *pa, const void *pb) {
    const br_layer_report *a = *(const br_layer_report *const *)pa;
    const br_layer_report *b = *(const br_layer_report *const *)pb;
    int c = br_cli_name_cmp(a->name, b->name);
    if (c) return c;
    return a < b ? -1 : a > b; /* the report's order: one array, so addresses follow it */
}

void br_cli_layer_order(const br_compress_report *rep, size_t *order) {
    size_t n = rep->n_layers;
    const br_layer_report **p = n ? malloc(n * sizeof *p) : NULL;
    if (!p) {
        /* out of memory (or nothing to sort): the report's order */
        for (size_t i = 0; i < n; i++)
            order[i] = i;
        return;
    }
    for (size_t i = 0; i < n; i++)
        p[i] = &rep->layers[i];
    qsort(p, n, sizeof *p, layer_ptr_cmp);
    for (size_t i = 0; i < n; i++)
        order[i] = (size_t)(p[i] - rep->layers);
    free(p);
}
