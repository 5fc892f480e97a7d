/* The BLR output layout (docs/FORMAT.md): a compressed linear NAME is stored as
 *
 *     NAME.blr.u  U8  [P][m][ceil(r/8)]   sign k of row i: bit k%8 of byte k/8, 1 = +1
 *     NAME.blr.v  U8  [P][n][ceil(r/8)]   likewise for S_V (not transposed)
 *     NAME.blr.h  F16 [P][m]
 *     NAME.blr.l  F16 [P][r]
 *     NAME.blr.g  F16 [P][n]
 *
 * plus __metadata__ "NAME.blr" = {"paths":P,"rank":r,"out_features":m,
 * "in_features":n,"bpw":…} and "format" = "bitrank-blr", "format_version" = "1".
 * The byte rows are the library's u32 words in little-endian order, cut to
 * ceil(r/8) bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "io/blr_layout.h"

static const char *const blr_suffix[5] = {".blr.u", ".blr.v", ".blr.h", ".blr.l", ".blr.g"};
#define CORTIQ_SUFFIX ".blr.cortiq"

static size_t words_of(size_t r) { return (r + 31) / 32; }
static size_t bytes_of(size_t r) { return (r + 7) / 8; }

double br_blr_bpw(size_t m, size_t n, size_t r, size_t paths) {
    if (!m || !n) return 0;
    double mn = (double)m * (double)n;
    return (double)paths *
           ((double)r * ((double)m + (double)n) + 16.0 * ((double)m + (double)n + (double)r)) / mn;
}

/* Rows of u32 sign words → rows of ceil(r/8) bytes, bits ≥ r cleared. */
static void pack_rows(const uint32_t *words, size_t rows, size_t r, uint8_t *dst) {
    size_t nw = words_of(r), nb = bytes_of(r);
    uint8_t last_mask = r % 8 ? (uint8_t)((1u << (r % 8)) - 1u) : 0xffu;
    for (size_t i = 0; i < rows; i++)
        for (size_t b = 0; b < nb; b++) {
            uint8_t byte = (uint8_t)(words[i * nw + b / 4] >> (8 * (b % 4)));
            dst[i * nb + b] = b == nb - 1 ? byte & last_mask : byte;
        }
}

/* The inverse: bytes → words, ignoring any bit ≥ r a file may have set. */
static void unpack_rows(const uint8_t *src, size_t rows, size_t r, uint32_t *words) {
    size_t nw = words_of(r), nb = bytes_of(r);
    uint8_t last_mask = r % 8 ? (uint8_t)((1u << (r % 8)) - 1u) : 0xffu;
    for (size_t i = 0; i < rows; i++) {
        memset(words + i * nw, 0, nw * sizeof *words);
        for (size_t b = 0; b < nb; b++) {
            uint8_t byte = src[i * nb + b];
            if (b == nb - 1) byte &= last_mask;
            words[i * nw + b / 4] |= (uint32_t)byte << (8 * (b % 4));
        }
    }
}

static char *suffixed(const char *name, const char *suffix) {
    size_t a = strlen(name), b = strlen(suffix);
    char *s = malloc(a + b + 1);
    if (!s) return NULL;
    memcpy(s, name, a);
    memcpy(s + a, suffix, b + 1);
    return s;
}

br_status br_st_writer_add_blr(br_st_writer *w, const char *name, const br_blr_host *layer) {
    static const char *fn = "br_st_writer_add_blr";
    if (!w) return BR_E_ARG;
    br_ctx *ctx = br_st_writer_ctx(w);
    if (!name || !*name) return br_fail(ctx, BR_E_ARG, "%s: name is NULL or empty", fn);
    BR_TRY(br_blr_check_layer(ctx, fn, layer));
    size_t P = layer->paths, m = layer->m, n = layer->n, r = layer->r, rb = bytes_of(r);
    /* the five arrays, converted before anything is added */
    size_t bytes[5] = {P * m * rb, P * n * rb, 2 * P * m, 2 * P * r, 2 * P * n};
    uint64_t shapes[5][3] = {{P, m, rb}, {P, n, rb}, {P, m}, {P, r}, {P, n}};
    size_t ndims[5] = {3, 3, 2, 2, 2};
    br_st_dtype dts[5] = {BR_ST_U8, BR_ST_U8, BR_ST_F16, BR_ST_F16, BR_ST_F16};
    uint8_t *buf[5] = {0};
    br_status st = BR_OK;
    for (int i = 0; i < 5 && st == BR_OK; i++)
        if (!(buf[i] = malloc(bytes[i])))
            st = br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    for (size_t p = 0; p < P && st == BR_OK; p++) {
        const br_blr_path_host *ph = &layer->path[p];
        pack_rows(ph->bits_u, m, r, buf[0] + p * m * rb);
        pack_rows(ph->bits_v, n, r, buf[1] + p * n * rb);
        st = br_blr_put_f16(ctx, fn, name, "h", p, ph->h, m, buf[2] + 2 * p * m);
        if (st == BR_OK) st = br_blr_put_f16(ctx, fn, name, "l", p, ph->l, r, buf[3] + 2 * p * r);
        if (st == BR_OK) st = br_blr_put_f16(ctx, fn, name, "g", p, ph->g, n, buf[4] + 2 * p * n);
    }
    char meta[256];
    snprintf(meta, sizeof meta,
             "{\"paths\":%zu,\"rank\":%zu,\"out_features\":%zu,\"in_features\":%zu,\"bpw\":%.6f}",
             P, r, m, n, br_blr_bpw(m, n, r, P));
    char *key = suffixed(name, ".blr");
    if (st == BR_OK && !key) st = br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    int i = 0;
    for (; i < 5 && st == BR_OK; i++) {
        char *tname = suffixed(name, blr_suffix[i]);
        if (!tname) {
            st = br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
            break;
        }
        st = br_st_writer_add_owned(w, tname, dts[i], ndims[i], shapes[i], buf[i], 1);
        buf[i] = NULL; /* the writer owns it now, or freed it */
        free(tname);
    }
    for (int k = 0; k < 5; k++)
        free(buf[k]);
    if (st == BR_OK) st = br_st_writer_meta(w, key, meta);
    if (st == BR_OK) st = br_st_writer_mark_blr(w);
    free(key);
    return st;
}

br_status br_st_writer_add_cortiq(br_st_writer *w, const char *name, const br_blr_host *layer) {
    static const char *fn = "br_st_writer_add_cortiq";
    if (!w) return BR_E_ARG;
    br_ctx *ctx = br_st_writer_ctx(w);
    if (!name || !*name) return br_fail(ctx, BR_E_ARG, "%s: name is NULL or empty", fn);
    size_t size = 0;
    BR_TRY(br_blr_cortiq_encode(ctx, layer, NULL, 0, &size));
    uint8_t *buf = malloc(size);
    char *tname = suffixed(name, CORTIQ_SUFFIX);
    br_status st = BR_OK;
    if (!buf || !tname) st = br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    if (st == BR_OK) st = br_blr_cortiq_encode(ctx, layer, buf, size, &size);
    if (st == BR_OK) {
        uint64_t shape = size;
        st = br_st_writer_add_owned(w, tname, BR_ST_U8, 1, &shape, buf, 1);
        buf = NULL;
    }
    if (st == BR_OK) st = br_st_writer_mark_blr(w);
    free(buf);
    free(tname);
    return st;
}

/* ---- reading */

/* The u64 member `key` of a metadata object, in [1, max]. */
static br_status meta_field(br_ctx *ctx, const char *where, const br_json *d, const char *key,
                            uint64_t max, size_t *out) {
    int dup = 0;
    size_t v = br_json_member(d, 0, key, &dup);
    uint64_t x = 0;
    if (!v || dup || !br_json_u64(d, v, &x) || x < 1 || x > max)
        return br_fail(ctx, BR_E_FORMAT, "%s: field '%s' is %s (expected an integer in [1, %llu])",
                       where, key,
                       !v    ? "missing"
                       : dup ? "given twice"
                             : "invalid",
                       (unsigned long long)max);
    *out = (size_t)x;
    return BR_OK;
}

static int shape_is(const br_st_tensor *t, const uint64_t *shape, size_t ndim) {
    if (t->ndim != ndim) return 0;
    for (size_t i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i]) return 0;
    return 1;
}

/* One "NAME.blr" metadata entry: its JSON and the five tensors it names. */
static br_status scan_layer(br_ctx *ctx, const br_st_file *f, const char *key, const char *value,
                            br_blr_info *info, size_t *order) {
    char where[320];
    size_t name_len = strlen(key) - 4;
    snprintf(where, sizeof where, "%s: __metadata__ '%.200s'", f->path, key);
    br_json d;
    char err[160];
    br_status st = br_json_parse(&d, value, strlen(value), err, sizeof err);
    if (st != BR_OK) {
        br_json_free(&d);
        return br_fail(ctx, st, "%s: not valid JSON: %s", where, err);
    }
    if (d.nodes[0].kind != BR_JSON_OBJECT)
        st = br_fail(ctx, BR_E_FORMAT, "%s: not an object", where);
    /* bounds keep every product below 2^62; the tensor shapes must match anyway */
    const uint64_t lim = (uint64_t)1 << 31;
    if (st == BR_OK) st = meta_field(ctx, where, &d, "paths", BR_BLR_MAX_PATHS, &info->paths);
    if (st == BR_OK) st = meta_field(ctx, where, &d, "rank", lim, &info->r);
    if (st == BR_OK) st = meta_field(ctx, where, &d, "out_features", lim, &info->m);
    if (st == BR_OK) st = meta_field(ctx, where, &d, "in_features", lim, &info->n);
    br_json_free(&d);
    BR_TRY(st);
    uint64_t P = info->paths, m = info->m, n = info->n, r = info->r, rb = bytes_of(info->r);
    const uint64_t shapes[5][3] = {{P, m, rb}, {P, n, rb}, {P, m}, {P, r}, {P, n}};
    const size_t ndims[5] = {3, 3, 2, 2, 2};
    const br_st_dtype dts[5] = {BR_ST_U8, BR_ST_U8, BR_ST_F16, BR_ST_F16, BR_ST_F16};
    char sbuf[2][96];
    /* names as long as the key: the writer puts no limit on a layer's name */
    char *tname = malloc(name_len + 16);
    if (!tname) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", where);
    info->nbytes = 0;
    *order = SIZE_MAX;
    for (int i = 0; i < 5 && st == BR_OK; i++) {
        memcpy(tname, key, name_len);
        strcpy(tname + name_len, blr_suffix[i]);
        const br_st_tensor *t = br_st_find(f, tname);
        if (!t) {
            st = br_fail(ctx, BR_E_FORMAT, "%s: tensor '%.200s' is missing", where, tname);
        } else if (t->dtype != dts[i]) {
            st = br_fail(ctx, BR_E_FORMAT, "%s: tensor '%.200s' is %s, expected %s", where, tname,
                         t->dtype_name, br_st_dtype_name(dts[i]));
        } else if (!shape_is(t, shapes[i], ndims[i])) {
            st = br_fail(ctx, BR_E_FORMAT, "%s: tensor '%.200s' has shape %s, expected %s", where,
                         tname, br_st_fmt_shape(sbuf[0], sizeof sbuf[0], t->shape, t->ndim),
                         br_st_fmt_shape(sbuf[1], sizeof sbuf[1], shapes[i], ndims[i]));
        } else {
            info->nbytes += t->nbytes;
            size_t idx = (size_t)(t - f->tensors);
            if (idx < *order) *order = idx;
        }
    }
    free(tname);
    info->bpw = br_blr_bpw(info->m, info->n, info->r, info->paths);
    return st;
}

typedef struct found_layer {
    br_blr_info info;
    const char *name; /* not NUL-terminated at the right place: name_len bytes */
    size_t name_len, order;
} found_layer;

static int cmp_found(const void *a, const void *b) {
    const found_layer *x = a, *y = b;
    return x->order < y->order ? -1 : x->order > y->order;
}

br_status br_st_scan_blr(br_ctx *ctx, br_st_file *f) {
    const char *format = br_st_meta(f, "format");
    if (!format || strcmp(format, BR_BLR_FORMAT) != 0) return BR_OK;
    const char *version = br_st_meta(f, "format_version");
    if (!version || strcmp(version, BR_BLR_FORMAT_VERSION) != 0)
        return br_fail(ctx, BR_E_FORMAT,
                       "%s: format_version '%.32s' of %s is not supported (version %s is)", f->path,
                       version ? version : "(missing)", BR_BLR_FORMAT, BR_BLR_FORMAT_VERSION);
    size_t cap = f->nmeta + f->ntensors;
    found_layer *found = malloc((cap ? cap : 1) * sizeof *found);
    if (!found) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", f->path);
    size_t nfound = 0, names = 0;
    br_status st = BR_OK;
    for (size_t i = 0; i < f->nmeta && st == BR_OK; i++) {
        const char *key = f->meta_keys[i];
        size_t len = strlen(key);
        if (len <= 4 || strcmp(key + len - 4, ".blr") != 0) continue;
        found_layer *fl = &found[nfound];
        memset(fl, 0, sizeof *fl);
        st = scan_layer(ctx, f, key, f->meta_vals[i], &fl->info, &fl->order);
        fl->name = key;
        fl->name_len = len - 4;
        names += fl->name_len + 1;
        nfound++;
    }
    const size_t slen = strlen(CORTIQ_SUFFIX);
    for (size_t i = 0; i < f->ntensors && st == BR_OK; i++) {
        const br_st_tensor *t = &f->tensors[i];
        size_t len = strlen(t->name);
        if (len <= slen || strcmp(t->name + len - slen, CORTIQ_SUFFIX) != 0) continue;
        char where[320];
        snprintf(where, sizeof where, "%s: tensor '%.200s'", t->file, t->name);
        if (t->dtype != BR_ST_U8 || t->ndim != 1) {
            st = br_fail(ctx, BR_E_FORMAT, "%s: a cortiq payload must be a 1-D U8 tensor", where);
            break;
        }
        /* a name is one layer: NAME.blr.cortiq beside a "NAME.blr" entry is ambiguous */
        char *key = malloc(len - slen + 5);
        if (!key) {
            st = br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", f->path);
            break;
        }
        memcpy(key, t->name, len - slen);
        strcpy(key + len - slen, ".blr");
        int twice = br_st_meta(f, key) != NULL;
        free(key);
        if (twice) {
            st = br_fail(ctx, BR_E_FORMAT,
                         "%s: layer '%.*s' is stored twice, as a cortiq payload and in the BLR "
                         "layout",
                         where, (int)(len - slen > 200 ? 200 : len - slen), t->name);
            break;
        }
        found_layer *fl = &found[nfound];
        memset(fl, 0, sizeof *fl);
        st = br_blr_cortiq_probe(ctx, where, t->data, (size_t)t->nbytes, &fl->info.paths,
                                 &fl->info.r, &fl->info.m, &fl->info.n);
        fl->info.bpw = br_blr_bpw(fl->info.m, fl->info.n, fl->info.r, fl->info.paths);
        fl->info.nbytes = t->nbytes;
        fl->info.cortiq = 1;
        fl->name = t->name;
        fl->name_len = len - slen;
        fl->order = i;
        names += fl->name_len + 1;
        nfound++;
    }
    if (st == BR_OK && nfound) {
        qsort(found, nfound, sizeof *found, cmp_found);
        f->blr = malloc(nfound * sizeof *f->blr);
        f->blr_names = malloc(names);
        if (!f->blr || !f->blr_names)
            st = br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", f->path);
    }
    if (st == BR_OK) {
        char *at = f->blr_names;
        for (size_t i = 0; i < nfound; i++) {
            f->blr[i] = found[i].info;
            memcpy(at, found[i].name, found[i].name_len);
            at[found[i].name_len] = '\0';
            f->blr[i].name = at;
            at += found[i].name_len + 1;
        }
        f->nblr = nfound;
    }
    free(found);
    return st;
}

size_t br_st_blr_count(const br_st_file *f) { return f ? f->nblr : 0; }

const br_blr_info *br_st_blr_at(const br_st_file *f, size_t i) {
    return f && i < f->nblr ? &f->blr[i] : NULL;
}

br_status br_st_read_blr(br_ctx *ctx, const br_st_file *f, const char *name, br_blr_host *out) {
    static const char *fn = "br_st_read_blr";
    if (!f || !name || !out) return br_fail(ctx, BR_E_ARG, "%s: file, name or out is NULL", fn);
    memset(out, 0, sizeof *out);
    const br_blr_info *info = NULL;
    for (size_t i = 0; i < f->nblr && !info; i++)
        if (strcmp(f->blr[i].name, name) == 0) info = &f->blr[i];
    if (!info)
        return br_fail(ctx, BR_E_ARG, "%s: %s has no compressed layer '%.200s'", fn, f->path, name);
    if (info->cortiq) {
        char *tname = suffixed(name, CORTIQ_SUFFIX);
        if (!tname) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
        const br_st_tensor *t = br_st_find(f, tname); /* found by br_st_open */
        free(tname);
        BR_TRY(br_st_check_size(ctx, f, t)); /* a shrunk file would fault (SIGBUS) below */
        return br_blr_cortiq_decode(ctx, t->data, (size_t)t->nbytes, out);
    }
    const uint8_t *data[5];
    for (int i = 0; i < 5; i++) {
        char *tname = suffixed(name, blr_suffix[i]);
        if (!tname) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
        const br_st_tensor *t = br_st_find(f, tname); /* checked by br_st_open */
        free(tname);
        BR_TRY(br_st_check_size(ctx, f, t)); /* a shrunk file would fault (SIGBUS) below */
        data[i] = t->data;
    }
    size_t P = info->paths, m = info->m, n = info->n, r = info->r, rb = bytes_of(r);
    BR_TRY(br_blr_host_alloc(ctx, out, m, n, r, P));
    for (size_t p = 0; p < P; p++) {
        br_blr_path_host *ph = &out->path[p];
        unpack_rows(data[0] + p * m * rb, m, r, ph->bits_u);
        unpack_rows(data[1] + p * n * rb, n, r, ph->bits_v);
        for (size_t i = 0; i < m; i++)
            ph->h[i] = br_half_to_float(br_le16(data[2] + 2 * (p * m + i)));
        for (size_t k = 0; k < r; k++)
            ph->l[k] = br_half_to_float(br_le16(data[3] + 2 * (p * r + k)));
        for (size_t j = 0; j < n; j++)
            ph->g[j] = br_half_to_float(br_le16(data[4] + 2 * (p * n + j)));
    }
    return BR_OK;
}
