/* The safetensors reader: map the file, parse and check its header (every offset,
 * size and shape against the file), build the tensor table. A safetensors file is
 *
 *     u64 N (little-endian) | N bytes of JSON header | data section
 *
 * and the header maps each tensor name to {dtype, shape, data_offsets [begin, end)}
 * relative to the data section, plus an optional "__metadata__" of strings. What
 * the metadata say of BLR layers is read above this file (st_open.c, st_blr.c). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"
#include "io/io_internal.h"

const char *br_st_fmt_shape(char *buf, size_t n, const uint64_t *shape, size_t ndim) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (size_t i = 0; i < ndim && k < n; i++)
        k +=
            (size_t)snprintf(buf + k, n - k, "%s%llu", i ? ", " : "", (unsigned long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* A metadata entry while the table is being built. */
typedef struct meta_entry {
    const char *key, *val;
    size_t shard, seq;
} meta_entry;

typedef struct builder {
    br_ctx *ctx;
    br_st_file *f;
    size_t tcap;
    meta_entry *meta;
    size_t nmeta, mcap;
} builder;

static br_status nomem(br_ctx *ctx, const char *what) {
    return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", what);
}

static br_status add_meta(builder *b, const char *key, const char *val, size_t shard) {
    if (b->nmeta == b->mcap) {
        size_t cap = b->mcap ? b->mcap * 2 : 16;
        meta_entry *m = realloc(b->meta, cap * sizeof *m);
        if (!m) return nomem(b->ctx, "safetensors metadata");
        b->meta = m;
        b->mcap = cap;
    }
    b->meta[b->nmeta] = (meta_entry){key, val, shard, b->nmeta};
    b->nmeta++;
    return BR_OK;
}

static br_status parse_metadata(builder *b, const br_st_shard *sh, size_t shard, size_t obj) {
    const br_json *d = &sh->header;
    if (d->nodes[obj].kind != BR_JSON_OBJECT)
        return br_fail(b->ctx, BR_E_FORMAT, "%s: __metadata__ is not a JSON object", sh->path);
    size_t k = br_json_first(obj);
    for (uint32_t i = 0; i < d->nodes[obj].count; i++) {
        size_t v = k + 1;
        if (d->nodes[v].kind != BR_JSON_STRING)
            return br_fail(b->ctx, BR_E_FORMAT, "%s: __metadata__ '%.200s': value is not a string",
                           sh->path, br_json_str(d, k));
        BR_TRY(add_meta(b, br_json_str(d, k), br_json_str(d, v), shard));
        k = br_json_after(d, v);
    }
    return BR_OK;
}

/* A required member of a tensor entry, appearing once. */
static br_status field(builder *b, const br_st_shard *sh, const char *name, size_t entry,
                       const char *key, br_json_kind kind, size_t *out) {
    int dup = 0;
    size_t v = br_json_member(&sh->header, entry, key, &dup);
    if (!v)
        return br_fail(b->ctx, BR_E_FORMAT, "%s: tensor '%.200s': missing field '%s'", sh->path,
                       name, key);
    if (dup)
        return br_fail(b->ctx, BR_E_FORMAT, "%s: tensor '%.200s': field '%s' appears twice",
                       sh->path, name, key);
    if (sh->header.nodes[v].kind != kind)
        return br_fail(b->ctx, BR_E_FORMAT, "%s: tensor '%.200s': field '%s' is not %s", sh->path,
                       name, key, kind == BR_JSON_STRING ? "a string" : "an array");
    *out = v;
    return BR_OK;
}

static br_status parse_tensor(builder *b, const br_st_shard *sh, const char *name, size_t entry,
                              const uint8_t *data, uint64_t data_size, br_st_tensor *t) {
    const br_json *d = &sh->header;
    const char *fn = sh->path;
    char sbuf[256];
    if (d->nodes[entry].kind != BR_JSON_OBJECT)
        return br_fail(b->ctx, BR_E_FORMAT, "%s: tensor '%.200s': entry is not a JSON object", fn,
                       name);
    size_t vd, vs, vo;
    BR_TRY(field(b, sh, name, entry, "dtype", BR_JSON_STRING, &vd));
    BR_TRY(field(b, sh, name, entry, "shape", BR_JSON_ARRAY, &vs));
    BR_TRY(field(b, sh, name, entry, "data_offsets", BR_JSON_ARRAY, &vo));
    *t = (br_st_tensor){.name = name, .file = fn};
    t->dtype_name = br_json_str(d, vd);
    t->dtype = br_st_dtype_from_name(t->dtype_name);

    uint32_t ndim = d->nodes[vs].count;
    if (ndim > BR_ST_MAX_DIMS)
        return br_fail(b->ctx, BR_E_FORMAT,
                       "%s: tensor '%.200s': shape has %u dimensions, at most %d are supported", fn,
                       name, ndim, BR_ST_MAX_DIMS);
    t->ndim = ndim;
    t->numel = 1;
    size_t c = br_json_first(vs);
    for (uint32_t i = 0; i < ndim; i++, c = br_json_after(d, c)) {
        if (!br_json_u64(d, c, &t->shape[i]))
            return br_fail(b->ctx, BR_E_FORMAT,
                           "%s: tensor '%.200s': shape[%u] is not an integer in [0, 2^64)", fn,
                           name, i);
    }
    for (uint32_t i = 0; i < ndim; i++)
        if (!br_mul_u64(t->numel, t->shape[i], &t->numel))
            return br_fail(b->ctx, BR_E_FORMAT,
                           "%s: tensor '%.200s': shape %s has more than 2^64 elements", fn, name,
                           br_st_fmt_shape(sbuf, sizeof sbuf, t->shape, t->ndim));

    if (d->nodes[vo].count != 2)
        return br_fail(b->ctx, BR_E_FORMAT,
                       "%s: tensor '%.200s': data_offsets has %u entries, expected 2", fn, name,
                       d->nodes[vo].count);
    uint64_t begin, end;
    size_t o0 = br_json_first(vo), o1 = br_json_after(d, o0);
    if (!br_json_u64(d, o0, &begin) || !br_json_u64(d, o1, &end))
        return br_fail(b->ctx, BR_E_FORMAT,
                       "%s: tensor '%.200s': data_offsets are not integers in [0, 2^64)", fn, name);
    if (begin > end)
        return br_fail(b->ctx, BR_E_FORMAT,
                       "%s: tensor '%.200s': data_offsets [%llu, %llu] are out of order", fn, name,
                       (unsigned long long)begin, (unsigned long long)end);
    if (end > data_size)
        return br_fail(b->ctx, BR_E_FORMAT,
                       "%s: tensor '%.200s': data_offsets [%llu, %llu] past the end of the "
                       "%llu-byte data section",
                       fn, name, (unsigned long long)begin, (unsigned long long)end,
                       (unsigned long long)data_size);
    t->nbytes = end - begin;
    t->data = data + begin;
    if (t->dtype != BR_ST_UNKNOWN) {
        uint64_t bits;
        if (!br_mul_u64(t->numel, br_st_dtype_bits(t->dtype), &bits))
            return br_fail(b->ctx, BR_E_FORMAT,
                           "%s: tensor '%.200s': shape %s of %s has more than 2^64 bits", fn, name,
                           br_st_fmt_shape(sbuf, sizeof sbuf, t->shape, t->ndim), t->dtype_name);
        if (bits % 8)
            return br_fail(b->ctx, BR_E_FORMAT,
                           "%s: tensor '%.200s': shape %s of %s is not a whole number of bytes", fn,
                           name, br_st_fmt_shape(sbuf, sizeof sbuf, t->shape, t->ndim),
                           t->dtype_name);
        if (bits / 8 != t->nbytes)
            return br_fail(b->ctx, BR_E_FORMAT,
                           "%s: tensor '%.200s': data_offsets [%llu, %llu] hold %llu bytes, but "
                           "shape %s of %s needs %llu",
                           fn, name, (unsigned long long)begin, (unsigned long long)end,
                           (unsigned long long)t->nbytes,
                           br_st_fmt_shape(sbuf, sizeof sbuf, t->shape, t->ndim), t->dtype_name,
                           (unsigned long long)(bits / 8));
    }
    return BR_OK;
}

typedef struct span {
    uint64_t begin, end;
    size_t idx;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* The tensors [first, last) of a shard must tile its data section exactly: no
 * overlap, no gap, nothing after the last one (as the reference reader demands). */
static br_status check_tiling(builder *b, const br_st_shard *sh, const uint8_t *data,
                              uint64_t data_size, size_t first, size_t last) {
    br_st_file *f = b->f;
    size_t n = last - first;
    span *s = malloc((n ? n : 1) * sizeof *s);
    if (!s) return nomem(b->ctx, sh->path);
    for (size_t i = 0; i < n; i++) {
        const br_st_tensor *t = &f->tensors[first + i];
        uint64_t begin = (uint64_t)((const uint8_t *)t->data - data);
        s[i] = (span){begin, begin + t->nbytes, first + i};
    }
    qsort(s, n, sizeof *s, cmp_span);
    uint64_t at = 0;
    size_t prev = SIZE_MAX;
    br_status st = BR_OK;
    for (size_t i = 0; i < n && st == BR_OK; i++) {
        const br_st_tensor *t = &f->tensors[s[i].idx];
        if (s[i].begin < at)
            st = br_fail(b->ctx, BR_E_FORMAT,
                         "%s: tensor '%.200s': data_offsets [%llu, %llu] overlap tensor '%.200s' "
                         "(which ends at %llu)",
                         sh->path, t->name, (unsigned long long)s[i].begin,
                         (unsigned long long)s[i].end, f->tensors[prev].name,
                         (unsigned long long)at);
        else if (s[i].begin > at)
            st = br_fail(b->ctx, BR_E_FORMAT,
                         "%s: tensor '%.200s': data_offsets [%llu, %llu] leave a gap of %llu "
                         "bytes before them",
                         sh->path, t->name, (unsigned long long)s[i].begin,
                         (unsigned long long)s[i].end, (unsigned long long)(s[i].begin - at));
        at = s[i].end;
        prev = s[i].idx;
    }
    free(s);
    if (st == BR_OK && at != data_size)
        st = br_fail(b->ctx, BR_E_FORMAT,
                     "%s: the data section is %llu bytes but its tensors end at byte %llu "
                     "(truncated header or trailing bytes)",
                     sh->path, (unsigned long long)data_size, (unsigned long long)at);
    return st;
}

/* Parse the header of shard `shard` (its bytes are in place) and append its tensors. */
static br_status parse_shard(builder *b, size_t shard) {
    br_st_file *f = b->f;
    br_st_shard *sh = &f->shards[shard];
    const char *fn = sh->path;
    if (sh->size < 8)
        return br_fail(b->ctx, BR_E_FORMAT,
                       "%s: %zu bytes is too short for a safetensors file (8-byte header length "
                       "+ header)",
                       fn, sh->size);
    uint64_t hlen = br_le64(sh->bytes);
    if (hlen > sh->size - 8)
        return br_fail(b->ctx, BR_E_FORMAT,
                       "%s: header length %llu is larger than the file (%zu bytes): not a "
                       "safetensors file, or a truncated one",
                       fn, (unsigned long long)hlen, sh->size);
    if (hlen > BR_ST_MAX_HEADER)
        return br_fail(b->ctx, BR_E_FORMAT, "%s: header length %llu exceeds the limit of %llu", fn,
                       (unsigned long long)hlen, (unsigned long long)BR_ST_MAX_HEADER);
    if (hlen < 2)
        return br_fail(b->ctx, BR_E_FORMAT, "%s: header length %llu is too short for a header", fn,
                       (unsigned long long)hlen);
    const char *text = (const char *)sh->bytes + 8;
    char err[200];
    br_status st = br_json_parse(&sh->header, text, (size_t)hlen, err, sizeof err);
    if (st != BR_OK) return br_fail(b->ctx, st, "%s: header is not valid JSON: %s", fn, err);
    const br_json *d = &sh->header;
    if (d->nodes[0].kind != BR_JSON_OBJECT)
        return br_fail(b->ctx, BR_E_FORMAT, "%s: header is not a JSON object", fn);
    const uint8_t *data = sh->bytes + 8 + hlen;
    uint64_t data_size = (uint64_t)sh->size - 8 - hlen;

    size_t first = f->ntensors;
    int have_meta = 0;
    size_t k = br_json_first(0);
    for (uint32_t i = 0; i < d->nodes[0].count; i++) {
        size_t v = k + 1;
        const char *name = br_json_str(d, k);
        if (strcmp(name, "__metadata__") == 0) {
            if (have_meta)
                return br_fail(b->ctx, BR_E_FORMAT, "%s: __metadata__ appears twice", fn);
            have_meta = 1;
            BR_TRY(parse_metadata(b, sh, shard, v));
        } else {
            if (name[0] == '\0')
                return br_fail(b->ctx, BR_E_FORMAT, "%s: a tensor has an empty name", fn);
            if (f->ntensors == b->tcap) {
                size_t cap = b->tcap ? b->tcap * 2 : 64;
                br_st_tensor *ts = realloc(f->tensors, cap * sizeof *ts);
                if (!ts) return nomem(b->ctx, fn);
                f->tensors = ts;
                b->tcap = cap;
            }
            BR_TRY(parse_tensor(b, sh, name, v, data, data_size, &f->tensors[f->ntensors]));
            f->ntensors++;
        }
        k = br_json_after(d, v);
    }
    return check_tiling(b, sh, data, data_size, first, f->ntensors);
}

static int cmp_meta(const void *a, const void *b) {
    const meta_entry *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->seq < y->seq ? -1 : x->seq > y->seq);
}

/* Sort the metadata by key; a key twice in one shard is an error, across shards
 * the first shard's value wins. */
static br_status finish_meta(builder *b) {
    br_st_file *f = b->f;
    if (!b->nmeta) return BR_OK;
    qsort(b->meta, b->nmeta, sizeof *b->meta, cmp_meta);
    f->meta_keys = malloc(b->nmeta * sizeof *f->meta_keys);
    f->meta_vals = malloc(b->nmeta * sizeof *f->meta_vals);
    if (!f->meta_keys || !f->meta_vals) return nomem(b->ctx, f->path);
    for (size_t i = 0; i < b->nmeta; i++) {
        if (i && strcmp(b->meta[i].key, b->meta[i - 1].key) == 0) {
            if (b->meta[i].shard == b->meta[i - 1].shard)
                return br_fail(b->ctx, BR_E_FORMAT, "%s: __metadata__ key '%.200s' appears twice",
                               f->shards[b->meta[i].shard].path, b->meta[i].key);
            continue;
        }
        f->meta_keys[f->nmeta] = b->meta[i].key;
        f->meta_vals[f->nmeta] = b->meta[i].val;
        f->nmeta++;
    }
    return BR_OK;
}

static int cmp_tensor_ptr(const void *a, const void *b) {
    const br_st_tensor *x = *(const br_st_tensor *const *)a, *y = *(const br_st_tensor *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x < y ? -1 : x > y);
}

/* The name index; a name twice (in one shard or across shards) is an error. */
static br_status index_names(builder *b) {
    br_st_file *f = b->f;
    size_t n = f->ntensors;
    const br_st_tensor **p = malloc((n ? n : 1) * sizeof *p);
    f->by_name = malloc((n ? n : 1) * sizeof *f->by_name);
    if (!p || !f->by_name) {
        free(p);
        return nomem(b->ctx, f->path);
    }
    for (size_t i = 0; i < n; i++)
        p[i] = &f->tensors[i];
    qsort(p, n, sizeof *p, cmp_tensor_ptr);
    br_status st = BR_OK;
    for (size_t i = 0; i < n; i++) {
        f->by_name[i] = (size_t)(p[i] - f->tensors);
        if (st == BR_OK && i && strcmp(p[i]->name, p[i - 1]->name) == 0) {
            if (strcmp(p[i]->file, p[i - 1]->file) == 0)
                st = br_fail(b->ctx, BR_E_FORMAT, "%s: tensor '%.200s' appears twice", p[i]->file,
                             p[i]->name);
            else
                st = br_fail(b->ctx, BR_E_FORMAT, "%s: tensor '%.200s' is in both %s and %s",
                             f->path, p[i]->name, p[i - 1]->file, p[i]->file);
        }
    }
    free(p);
    return st;
}

/* The mappings of every open file of the process, so that the writer can find the
 * file a passed-through tensor's bytes come from (br_st_find_source) and copy them
 * with pread instead of touching a mapping that faults if the file shrinks. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static br_st_shard *live_head;

static void live_add(br_st_shard *sh) {
    pthread_mutex_lock(&live_lock);
    sh->live_prev = NULL;
    sh->live_next = live_head;
    if (live_head) live_head->live_prev = sh;
    live_head = sh;
    pthread_mutex_unlock(&live_lock);
}

static void live_remove(br_st_shard *sh) {
    pthread_mutex_lock(&live_lock);
    if (sh->live_prev)
        sh->live_prev->live_next = sh->live_next;
    else
        live_head = sh->live_next;
    if (sh->live_next) sh->live_next->live_prev = sh->live_prev;
    sh->live_prev = sh->live_next = NULL;
    pthread_mutex_unlock(&live_lock);
}

int br_st_find_source(const void *data, uint64_t nbytes, br_st_source *out) {
    uintptr_t p = (uintptr_t)data;
    int found = 0;
    pthread_mutex_lock(&live_lock);
    for (const br_st_shard *sh = live_head; sh && !found; sh = sh->live_next) {
        uintptr_t base = (uintptr_t)sh->bytes;
        if (p < base || p - base > sh->size || nbytes > sh->size - (p - base)) continue;
        *out = (br_st_source){sh->fd, (uint64_t)(p - base), sh->path, sh->size};
        found = 1;
    }
    pthread_mutex_unlock(&live_lock);
    return found;
}

static br_status map_file(br_ctx *ctx, br_st_shard *sh) {
    int fd = open(sh->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
    if (fd < 0) return br_fail(ctx, BR_E_IO, "%s: cannot open: %s", sh->path, strerror(errno));
    struct stat stt;
    if (fstat(fd, &stt) != 0) {
        int e = errno;
        close(fd);
        return br_fail(ctx, BR_E_IO, "%s: cannot stat: %s", sh->path, strerror(e));
    }
    if (!S_ISREG(stt.st_mode)) {
        close(fd);
        return br_fail(ctx, BR_E_IO, "%s: not a regular file", sh->path);
    }
    if (stt.st_size < 8) {
        close(fd);
        return br_fail(ctx, BR_E_FORMAT,
                       "%s: %lld bytes is too short for a safetensors file (8-byte header length "
                       "+ header)",
                       sh->path, (long long)stt.st_size);
    }
    if ((uint64_t)stt.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return br_fail(ctx, BR_E_IO, "%s: too large to map", sh->path);
    }
    size_t size = (size_t)stt.st_size;
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return br_fail(ctx, BR_E_IO, "%s: cannot map: %s", sh->path, strerror(e));
    }
    /* the descriptor stays open: tensor bytes are read with pread (see br_st_shard) */
    sh->bytes = p;
    sh->size = size;
    sh->fd = fd;
    sh->mapped = 1;
    live_add(sh);
    return BR_OK;
}

/* Read a whole (small) file into a malloc'd buffer. */
static br_status read_all(br_ctx *ctx, const char *path, uint64_t limit, char **out, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
    if (fd < 0) return br_fail(ctx, BR_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat stt;
    if (fstat(fd, &stt) != 0 || !S_ISREG(stt.st_mode)) {
        close(fd);
        return br_fail(ctx, BR_E_IO, "%s: not a readable regular file", path);
    }
    if ((uint64_t)stt.st_size > limit) {
        close(fd);
        return br_fail(ctx, BR_E_FORMAT, "%s: %lld bytes exceeds the limit of %llu for an index",
                       path, (long long)stt.st_size, (unsigned long long)limit);
    }
    size_t n = (size_t)stt.st_size, got = 0;
    char *buf = malloc(n ? n : 1);
    if (!buf) {
        close(fd);
        return nomem(ctx, path);
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            free(buf);
            return br_fail(ctx, BR_E_IO, "%s: read failed: %s", path,
                           e ? strerror(e) : "file shrank while reading");
        }
        got += (size_t)r;
    }
    close(fd);
    *out = buf;
    *len = n;
    return BR_OK;
}

static char *join_path(const char *dir, size_t dir_len, const char *name) {
    size_t n = strlen(name);
    char *p = malloc(dir_len + 1 + n + 1);
    if (!p) return NULL;
    memcpy(p, dir, dir_len);
    p[dir_len] = '/';
    memcpy(p + dir_len + 1, name, n + 1);
    return p;
}

static br_status add_shard(builder *b, const char *path, size_t path_len, const char *name) {
    br_st_file *f = b->f;
    br_st_shard *sh = &f->shards[f->nshards];
    memset(sh, 0, sizeof *sh);
    sh->path = name ? join_path(path, path_len, name) : strdup(path);
    if (!sh->path) return nomem(b->ctx, path);
    f->nshards++;
    BR_TRY(map_file(b->ctx, sh));
    return parse_shard(b, f->nshards - 1);
}

static br_status open_single(builder *b, const char *path) {
    b->f->shards = calloc(1, sizeof *b->f->shards);
    if (!b->f->shards) return nomem(b->ctx, path);
    return add_shard(b, path, 0, NULL);
}

static br_status open_index(builder *b, const char *path) {
    br_st_file *f = b->f;
    if (!(f->index_path = strdup(path))) return nomem(b->ctx, path);
    char *text = NULL;
    size_t len = 0;
    BR_TRY(read_all(b->ctx, path, BR_ST_MAX_INDEX, &text, &len));
    br_st_index idx;
    br_status st = br_st_index_parse(b->ctx, path, text, len, &idx);
    if (st != BR_OK) {
        free(text);
        return st;
    }
    const char *slash = strrchr(path, '/');
    const char *dir = slash ? path : ".";
    size_t dir_len = slash ? (size_t)(slash - path) : 1;
    if (slash && dir_len == 0) dir_len = 1; /* an index at "/" */
    f->shards = calloc(idx.nfiles, sizeof *f->shards);
    if (!f->shards) st = nomem(b->ctx, path);
    for (size_t i = 0; st == BR_OK && i < idx.nfiles; i++)
        st = add_shard(b, dir, dir_len, idx.files[i]);
    if (st == BR_OK) st = index_names(b);
    for (size_t i = 0; st == BR_OK && i < idx.n; i++) {
        const br_st_tensor *t = br_st_find(f, idx.tensor[i]);
        const char *fs = strrchr(t ? t->file : "", '/');
        fs = fs ? fs + 1 : (t ? t->file : "");
        if (!t)
            st = br_fail(b->ctx, BR_E_FORMAT, "%s: weight_map: tensor '%.200s' is not in %s", path,
                         idx.tensor[i], idx.shard[i]);
        else if (strcmp(fs, idx.shard[i]) != 0)
            st = br_fail(b->ctx, BR_E_FORMAT,
                         "%s: weight_map puts tensor '%.200s' in %s, but it is in %s", path,
                         idx.tensor[i], idx.shard[i], t->file);
    }
    br_st_index_free(&idx);
    free(text);
    return st;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static br_status finish_open(builder *b) {
    BR_TRY(finish_meta(b));
    if (!b->f->by_name) BR_TRY(index_names(b));
    return BR_OK;
}

/* The end of every open: on success so far the file is finished and handed to
 * *out; on any failure it is closed. */
static br_status end_open(builder *b, br_status st, br_st_file **out) {
    if (st == BR_OK) st = finish_open(b);
    free(b->meta);
    if (st != BR_OK) {
        br_st_close(b->f);
        return st;
    }
    *out = b->f;
    return BR_OK;
}

br_status br_st_open_plain(br_ctx *ctx, const char *path, br_st_file **out) {
    if (!out) return br_fail(ctx, BR_E_ARG, "br_st_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return br_fail(ctx, BR_E_ARG, "br_st_open: path is NULL or empty");
    struct stat stt;
    if (stat(path, &stt) != 0)
        return br_fail(ctx, BR_E_IO, "%s: cannot open: %s", path, strerror(errno));
    br_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return nomem(ctx, path);
    }
    builder b = {.ctx = ctx, .f = f};
    br_status st;
    if (S_ISDIR(stt.st_mode)) {
        size_t n = strlen(path);
        char *index = join_path(path, n, "model.safetensors.index.json");
        char *single = join_path(path, n, "model.safetensors");
        if (!index || !single)
            st = nomem(ctx, path);
        else if (access(index, F_OK) == 0)
            st = open_index(&b, index);
        else if (access(single, F_OK) == 0)
            st = open_single(&b, single);
        else
            st = br_fail(ctx, BR_E_IO,
                         "%s: directory holds neither model.safetensors.index.json nor "
                         "model.safetensors",
                         path);
        free(index);
        free(single);
    } else if (ends_with(path, ".json")) {
        st = open_index(&b, path);
    } else {
        st = open_single(&b, path);
    }
    return end_open(&b, st, out);
}

br_status br_st_open_memory_plain(br_ctx *ctx, const char *name, const void *bytes, size_t size,
                                  br_st_file **out) {
    *out = NULL;
    br_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(name)) || !(f->shards = calloc(1, sizeof *f->shards)) ||
        !(f->shards[0].path = strdup(name))) {
        br_st_close(f);
        return nomem(ctx, name);
    }
    f->nshards = 1;
    f->shards[0].bytes = bytes;
    f->shards[0].size = size;
    builder b = {.ctx = ctx, .f = f};
    br_status st = parse_shard(&b, 0);
    return end_open(&b, st, out);
}

void br_st_close(br_st_file *f) {
    if (!f) return;
    for (size_t i = 0; f->shards && i < f->nshards; i++) {
        br_st_shard *sh = &f->shards[i];
        if (sh->mapped) {
            live_remove(sh);
            munmap((void *)sh->bytes, sh->size);
            close(sh->fd);
        }
        br_json_free(&sh->header);
        free(sh->path);
    }
    free(f->shards);
    free(f->tensors);
    free(f->by_name);
    free(f->meta_keys);
    free(f->meta_vals);
    free(f->blr);
    free(f->blr_names);
    free(f->index_path);
    free(f->path);
    free(f);
}

const char *br_st_path(const br_st_file *f) { return f ? f->path : ""; }

size_t br_st_file_count(const br_st_file *f) {
    return f ? (f->index_path != NULL) + f->nshards : 0;
}

const char *br_st_file_at(const br_st_file *f, size_t i) {
    if (!f) return NULL;
    if (f->index_path && i == 0) return f->index_path;
    i -= f->index_path != NULL;
    return i < f->nshards ? f->shards[i].path : NULL;
}
size_t br_st_count(const br_st_file *f) { return f ? f->ntensors : 0; }

const br_st_tensor *br_st_tensor_at(const br_st_file *f, size_t i) {
    return f && i < f->ntensors ? &f->tensors[i] : NULL;
}

const br_st_tensor *br_st_find(const br_st_file *f, const char *name) {
    if (!f || !name || !f->by_name) return NULL;
    size_t lo = 0, hi = f->ntensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const br_st_tensor *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(t->name, name);
        if (c == 0) return t;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *br_st_meta(const br_st_file *f, const char *key) {
    if (!f || !key) return NULL;
    size_t lo = 0, hi = f->nmeta;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->meta_keys[mid], key);
        if (c == 0) return f->meta_vals[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

size_t br_st_meta_count(const br_st_file *f) { return f ? f->nmeta : 0; }

br_status br_st_meta_at(const br_st_file *f, size_t i, const char **key, const char **value) {
    if (!f || i >= f->nmeta) return BR_E_ARG;
    if (key) *key = f->meta_keys[i];
    if (value) *value = f->meta_vals[i];
    return BR_OK;
}

/* The shard holding tensor t (t->file is its path). */
static const br_st_shard *shard_of(const br_st_file *f, const br_st_tensor *t) {
    for (size_t i = 0; i < f->nshards; i++)
        if (f->shards[i].path == t->file) return &f->shards[i];
    return NULL;
}

br_status br_st_shrank(br_ctx *ctx, const char *path, int fd, uint64_t size_was) {
    struct stat stt;
    if (fstat(fd, &stt) == 0 && (uint64_t)stt.st_size < size_was)
        return br_fail(ctx, BR_E_IO,
                       "%s: the file shrank from %llu to %llu bytes while being read (another "
                       "program truncated or rewrote it)",
                       path, (unsigned long long)size_was, (unsigned long long)stt.st_size);
    return br_fail(ctx, BR_E_IO, "%s: read failed: the file ended early (it had %llu bytes)", path,
                   (unsigned long long)size_was);
}

br_status br_st_check_size(br_ctx *ctx, const br_st_file *f, const br_st_tensor *t) {
    const br_st_shard *sh = f && t ? shard_of(f, t) : NULL;
    if (!sh) return br_fail(ctx, BR_E_ARG, "br_st_check_size: tensor is not one of the file's");
    struct stat stt;
    if (!sh->mapped) return BR_OK; /* a memory image cannot shrink */
    if (fstat(sh->fd, &stt) != 0)
        return br_fail(ctx, BR_E_IO, "%s: cannot stat: %s", sh->path, strerror(errno));
    if ((uint64_t)stt.st_size < (uint64_t)sh->size)
        return br_st_shrank(ctx, sh->path, sh->fd, sh->size);
    return BR_OK;
}

br_status br_st_read_bytes(br_ctx *ctx, const br_st_file *f, const br_st_tensor *t, uint64_t offset,
                           size_t n, void *dst) {
    static const char *fn = "br_st_read_bytes";
    const br_st_shard *sh = f && t ? shard_of(f, t) : NULL;
    if (!sh) return br_fail(ctx, BR_E_ARG, "%s: tensor is not one of the file's", fn);
    if (offset > t->nbytes || n > t->nbytes - offset)
        return br_fail(ctx, BR_E_ARG,
                       "%s: bytes [%llu, %llu+%zu) are outside tensor '%.200s' of %llu", fn,
                       (unsigned long long)offset, (unsigned long long)offset, n, t->name,
                       (unsigned long long)t->nbytes);
    if (n && !dst) return br_fail(ctx, BR_E_ARG, "%s: dst is NULL", fn);
    uint64_t at = (uint64_t)((const uint8_t *)t->data - sh->bytes) + offset;
    if (!sh->mapped) {
        if (n) memcpy(dst, sh->bytes + at, n);
        return BR_OK;
    }
    uint8_t *out = dst;
    while (n) {
        size_t chunk = n > ((size_t)1 << 30) ? (size_t)1 << 30 : n;
        ssize_t got = pread(sh->fd, out, chunk, (off_t)at);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return br_fail(ctx, BR_E_IO, "%s: read failed at byte %llu: %s", sh->path,
                           (unsigned long long)at, strerror(errno));
        if (got == 0) return br_st_shrank(ctx, sh->path, sh->fd, sh->size);
        out += got;
        at += (uint64_t)got;
        n -= (size_t)got;
    }
    return BR_OK;
}

br_status br_st_read_f32(br_ctx *ctx, const br_st_file *f, const br_st_tensor *t, size_t first,
                         size_t count, float *dst) {
    static const char *fn = "br_st_read_f32";
    if (!f || !t) return br_fail(ctx, BR_E_ARG, "%s: file or tensor is NULL", fn);
    if (t < f->tensors || t >= f->tensors + f->ntensors)
        return br_fail(ctx, BR_E_ARG, "%s: tensor is not one of %s", fn, f->path);
    if (count && !dst) return br_fail(ctx, BR_E_ARG, "%s: dst is NULL", fn);
    if (first > t->numel || count > t->numel - first)
        return br_fail(ctx, BR_E_ARG,
                       "%s: elements [%zu, %zu+%zu) are outside tensor '%.200s' of %llu", fn, first,
                       first, count, t->name, (unsigned long long)t->numel);
    /* read with pread in chunks (br_st_shard says why), widened in place */
    uint8_t chunk[16384];
    switch (t->dtype) {
    case BR_ST_F32: return br_st_read_bytes(ctx, f, t, (uint64_t)first * 4, count * 4, dst);
    case BR_ST_F16:
    case BR_ST_BF16:
        for (size_t done = 0; done < count;) {
            size_t k = count - done < sizeof chunk / 2 ? count - done : sizeof chunk / 2;
            BR_TRY(br_st_read_bytes(ctx, f, t, (uint64_t)(first + done) * 2, k * 2, chunk));
            if (t->dtype == BR_ST_F16) {
                for (size_t i = 0; i < k; i++)
                    dst[done + i] = br_half_to_float(br_le16(chunk + 2 * i));
            } else {
                for (size_t i = 0; i < k; i++) {
                    uint32_t u = (uint32_t)br_le16(chunk + 2 * i) << 16;
                    memcpy(&dst[done + i], &u, 4);
                }
            }
            done += k;
        }
        return BR_OK;
    case BR_ST_UNKNOWN:
        return br_fail(ctx, BR_E_FORMAT,
                       "%s: tensor '%.200s': dtype '%.64s' is unknown to this build and cannot be "
                       "converted to f32",
                       t->file, t->name, t->dtype_name);
    default:
        return br_fail(
            ctx, BR_E_UNSUPPORTED,
            "%s: tensor '%.200s': dtype %s cannot be converted to f32 (F32, F16 and BF16 "
            "can)",
            t->file, t->name, t->dtype_name);
    }
}
