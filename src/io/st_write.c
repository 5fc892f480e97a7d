/* The safetensors writer. Tensors are collected (borrowed or owned bytes) and
 * written at finish: header, then data in the order added, into a temporary file
 * beside the output that is fsync'ed and renamed over it — so the output is either
 * the old file or the complete new one, never a partial one. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "io/io_internal.h"

typedef struct wtensor {
    char *name;
    br_st_dtype dtype;
    size_t ndim;
    uint64_t shape[BR_ST_MAX_DIMS];
    uint64_t nbytes;
    const void *data;
    void *owned; /* freed with the writer */
} wtensor;

struct br_st_writer {
    br_ctx *ctx;
    char *path; /* the output */
    char *dir;  /* its directory */
    char *tmp;  /* the temporary file; NULL once renamed or removed */
    int fd;
    int done; /* finished, or failed: no further calls */
    int blr;  /* holds BLR layers: the format keys are set at finish */
    wtensor *t;
    size_t n, cap;
    char **mkeys, **mvals;
    size_t nmeta, mcap;
};

static const char *W_NEW = "br_st_writer_new";

/* Close and remove the temporary file (after a failure or an abandoned writer). */
static void discard(br_st_writer *w) {
    if (w->fd >= 0) close(w->fd);
    w->fd = -1;
    if (w->tmp) unlink(w->tmp);
    free(w->tmp);
    w->tmp = NULL;
    w->done = 1;
}

/* Create the temporary file "DIR/.BASE.tmp-PID-XXXXXX" (name written into `tmp`)
 * with mode 0666 less the umask, as any tool's new file (mkstemp would make it
 * 0600, and a fixed fchmod would ignore the umask): open(O_EXCL) on fresh random
 * names until one is free. The PID in the name and a lock held on the file while
 * it is written tell a later writer whether the file is a dead process's leftover
 * (br_st_remove_stale_temporary). Returns the descriptor, or −1 with errno set. */
static int create_temporary(char *tmp, const char *dir, const char *base, const void *salt) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 20 ^
                 (uint64_t)(uintptr_t)salt;
    for (int attempt = 0; attempt < 1000; attempt++) {
        char suffix[7];
        for (int i = 0; i < 6; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull; /* LCG step */
            suffix[i] = alphabet[(x >> 33) % (sizeof alphabet - 1)];
        }
        suffix[6] = '\0';
        sprintf(tmp, "%s/.%s.tmp-%ld-%s", dir, base, (long)getpid(), suffix);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0) {
            /* a file system without flock still gets the PID test */
            (void)flock(fd, LOCK_EX | LOCK_NB);
            return fd;
        }
        if (errno != EEXIST) return fd;
    }
    errno = EEXIST;
    return -1;
}

/* The PID of a temporary file's name ".BASE.tmp-PID-XXXXXX" (BASE == base unless
 * base is NULL), or 0 if the name is not one. */
static long temporary_pid(const char *entry, const char *base) {
    size_t len = strlen(entry);
    /* at least ".", ".tmp-", a digit, "-" and the six letters */
    if (len < 1 + 5 + 1 + 1 + 6 || entry[0] != '.' || entry[len - 7] != '-') return 0;
    for (size_t i = len - 6; i < len; i++)
        if (!((entry[i] >= 'A' && entry[i] <= 'Z') || (entry[i] >= 'a' && entry[i] <= 'z') ||
              (entry[i] >= '0' && entry[i] <= '9')))
            return 0;
    size_t digits_end = len - 7, digits = digits_end;
    while (digits > 0 && entry[digits - 1] >= '0' && entry[digits - 1] <= '9')
        digits--;
    if (digits == digits_end || digits_end - digits > 10 || entry[digits] == '0') return 0;
    if (digits < 1 + 5 || strncmp(entry + digits - 5, ".tmp-", 5) != 0) return 0;
    size_t base_len = digits - 5 - 1;
    if (base && (strlen(base) != base_len || strncmp(entry + 1, base, base_len) != 0)) return 0;
    long pid = strtol(entry + digits, NULL, 10);
    return pid <= INT_MAX ? pid : 0;
}

int br_st_remove_stale_temporary(const char *dir, const char *entry, const char *base) {
    long pid = temporary_pid(entry, base);
    if (pid <= 0) return 0;
    /* alive (or another user's: EPERM) is never stale; a reused PID keeps the
     * file, which is only a leftover kept longer */
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) return 0;
    char path[8192];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, entry) >= sizeof path) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return 0;
    struct stat stt;
    int removable = fstat(fd, &stt) == 0 && S_ISREG(stt.st_mode);
    /* a writer of another PID namespace or host sharing the directory holds its
     * lock: the PID test alone would take its file for a dead one */
    if (removable && flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) removable = 0;
    if (removable) removable = unlink(path) == 0;
    close(fd);
    return removable;
}

/* Remove the temporary files that dead writers of `base` left in `dir`. */
static void remove_stale_temporaries(const char *dir, const char *base) {
    DIR *d = opendir(dir);
    if (!d) return; /* then creating the temporary file reports the directory */
    for (struct dirent *e; (e = readdir(d));)
        br_st_remove_stale_temporary(dir, e->d_name, base);
    closedir(d);
}

br_status br_st_writer_new(br_ctx *ctx, const char *path, br_st_writer **out) {
    if (!out) return br_fail(ctx, BR_E_ARG, "%s: out is NULL", W_NEW);
    *out = NULL;
    if (!path || !*path) return br_fail(ctx, BR_E_ARG, "%s: path is NULL or empty", W_NEW);
    size_t len = strlen(path);
    if (path[len - 1] == '/')
        return br_fail(ctx, BR_E_ARG, "%s: %s names a directory", W_NEW, path);
    struct stat existing;
    if (stat(path, &existing) == 0 && S_ISDIR(existing.st_mode))
        return br_fail(ctx, BR_E_IO, "%s: %s is a directory", W_NEW, path);
    br_st_writer *w = calloc(1, sizeof *w);
    if (!w) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", W_NEW);
    w->ctx = ctx;
    w->fd = -1;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dir_len = slash ? (size_t)(slash - path) : 1;
    if (slash && dir_len == 0) dir_len = 1;
    w->path = strdup(path);
    w->dir = malloc(dir_len + 1);
    w->tmp = malloc(dir_len + strlen(base) + 40); /* "/." ".tmp-" PID "-XXXXXX" */
    if (!w->path || !w->dir || !w->tmp) {
        br_st_writer_free(w);
        return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", W_NEW);
    }
    memcpy(w->dir, slash ? path : ".", dir_len);
    w->dir[dir_len] = '\0';
    remove_stale_temporaries(w->dir, base);
    w->fd = create_temporary(w->tmp, w->dir, base, w);
    if (w->fd < 0) {
        br_fail(ctx, BR_E_IO, "%s: %s: cannot create a file in '%s': %s", W_NEW, path, w->dir,
                strerror(errno));
        free(w->tmp);
        w->tmp = NULL;
        br_st_writer_free(w);
        return BR_E_IO;
    }
    *out = w;
    return BR_OK;
}

br_ctx *br_st_writer_ctx(const br_st_writer *w) { return w ? w->ctx : NULL; }

br_status br_st_writer_mark_blr(br_st_writer *w) {
    w->blr = 1;
    return BR_OK;
}

static br_status check_open(const br_st_writer *w, const char *fn) {
    if (!w) return BR_E_ARG;
    if (w->done)
        return br_fail(w->ctx, BR_E_STATE, "%s: %s: the writer has already finished or failed", fn,
                       w->path);
    return BR_OK;
}

static br_status check_text(br_ctx *ctx, const char *fn, const char *what, const char *s) {
    if (!s) return br_fail(ctx, BR_E_ARG, "%s: %s is NULL", fn, what);
    size_t n = strlen(s);
    if (br_utf8_check(s, n) != n)
        return br_fail(ctx, BR_E_ARG, "%s: %s '%.200s' is not valid UTF-8", fn, what, s);
    return BR_OK;
}

br_status br_st_writer_meta(br_st_writer *w, const char *key, const char *value) {
    static const char *fn = "br_st_writer_meta";
    BR_TRY(check_open(w, fn));
    BR_TRY(check_text(w->ctx, fn, "key", key));
    BR_TRY(check_text(w->ctx, fn, "value", value));
    if (!key[0]) return br_fail(w->ctx, BR_E_ARG, "%s: key is empty", fn);
    char *v = strdup(value);
    if (!v) return br_fail(w->ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    for (size_t i = 0; i < w->nmeta; i++)
        if (strcmp(w->mkeys[i], key) == 0) {
            free(w->mvals[i]);
            w->mvals[i] = v;
            return BR_OK;
        }
    if (w->nmeta == w->mcap) {
        size_t cap = w->mcap ? w->mcap * 2 : 8;
        char **k = realloc(w->mkeys, cap * sizeof *k);
        if (k) w->mkeys = k;
        char **vv = k ? realloc(w->mvals, cap * sizeof *vv) : NULL;
        if (vv) w->mvals = vv;
        if (!k || !vv) {
            free(v);
            return br_fail(w->ctx, BR_E_NOMEM, "%s: out of host memory", fn);
        }
        w->mcap = cap;
    }
    w->mkeys[w->nmeta] = strdup(key);
    if (!w->mkeys[w->nmeta]) {
        free(v);
        return br_fail(w->ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    }
    w->mvals[w->nmeta++] = v;
    return BR_OK;
}

br_status br_st_writer_add_owned(br_st_writer *w, const char *name, br_st_dtype dtype, size_t ndim,
                                 const uint64_t *shape, void *data, int owned) {
    static const char *fn = "br_st_writer_add";
    br_status st = check_open(w, fn);
    br_ctx *ctx = w ? w->ctx : NULL;
    uint64_t numel = 1, bits = 0;
    if (st == BR_OK) st = check_text(ctx, fn, "name", name);
    if (st == BR_OK && (!name[0] || strcmp(name, "__metadata__") == 0))
        st = br_fail(ctx, BR_E_ARG, "%s: name '%s' is reserved or empty", fn, name);
    if (st == BR_OK && br_st_dtype_bits(dtype) == 0)
        st = br_fail(ctx, BR_E_ARG, "%s: tensor '%.200s': dtype %d is not a safetensors dtype", fn,
                     name, (int)dtype);
    if (st == BR_OK && ndim > BR_ST_MAX_DIMS)
        st = br_fail(ctx, BR_E_ARG, "%s: tensor '%.200s': %zu dimensions, at most %d", fn, name,
                     ndim, BR_ST_MAX_DIMS);
    if (st == BR_OK && ndim && !shape)
        st = br_fail(ctx, BR_E_ARG, "%s: tensor '%.200s': shape is NULL", fn, name);
    for (size_t i = 0; st == BR_OK && i < ndim; i++)
        if (!br_mul_u64(numel, shape[i], &numel))
            st = br_fail(ctx, BR_E_OVERFLOW, "%s: tensor '%.200s': shape overflows 64 bits", fn,
                         name);
    if (st == BR_OK && !br_mul_u64(numel, br_st_dtype_bits(dtype), &bits))
        st = br_fail(ctx, BR_E_OVERFLOW, "%s: tensor '%.200s': size overflows 64 bits", fn, name);
    if (st == BR_OK && bits % 8)
        st =
            br_fail(ctx, BR_E_SHAPE, "%s: tensor '%.200s': %llu elements of %s are not whole bytes",
                    fn, name, (unsigned long long)numel, br_st_dtype_name(dtype));
    if (st == BR_OK && bits && !data)
        st = br_fail(ctx, BR_E_ARG, "%s: tensor '%.200s': data is NULL", fn, name);
    if (st == BR_OK && w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 32;
        wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t)
            st = br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
        else
            w->t = t, w->cap = cap;
    }
    char *copy = st == BR_OK ? strdup(name) : NULL;
    if (st == BR_OK && !copy) st = br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    if (st != BR_OK) {
        if (owned) free(data);
        return st;
    }
    wtensor *t = &w->t[w->n++];
    *t = (wtensor){.name = copy,
                   .dtype = dtype,
                   .ndim = ndim,
                   .nbytes = bits / 8,
                   .data = data,
                   .owned = owned ? data : NULL};
    if (ndim) memcpy(t->shape, shape, ndim * sizeof *shape);
    return BR_OK;
}

br_status br_st_writer_add(br_st_writer *w, const char *name, br_st_dtype dtype, size_t ndim,
                           const uint64_t *shape, const void *data) {
    return br_st_writer_add_owned(w, name, dtype, ndim, shape, (void *)data, 0);
}

static int cmp_wname(const void *a, const void *b) {
    return strcmp((*(const wtensor *const *)a)->name, (*(const wtensor *const *)b)->name);
}

/* The JSON header, padded with spaces so the data section starts 8-byte aligned. */
static br_status build_header(br_st_writer *w, char **out, size_t *out_len) {
    char *h = NULL;
    size_t len = 0, cap = 0;
    int bad = br_json_put_raw(&h, &len, &cap, "{", 1);
    if (w->nmeta) {
        bad |= br_json_put_raw(&h, &len, &cap, "\"__metadata__\":{", 16);
        for (size_t i = 0; i < w->nmeta; i++) {
            if (i) bad |= br_json_put_raw(&h, &len, &cap, ",", 1);
            bad |= br_json_put_string(&h, &len, &cap, w->mkeys[i]);
            bad |= br_json_put_raw(&h, &len, &cap, ":", 1);
            bad |= br_json_put_string(&h, &len, &cap, w->mvals[i]);
        }
        bad |= br_json_put_raw(&h, &len, &cap, "}", 1);
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < w->n; i++) {
        const wtensor *t = &w->t[i];
        char num[64];
        if (i || w->nmeta) bad |= br_json_put_raw(&h, &len, &cap, ",", 1);
        bad |= br_json_put_string(&h, &len, &cap, t->name);
        bad |= br_json_put_raw(&h, &len, &cap, ":{\"dtype\":", 10);
        bad |= br_json_put_string(&h, &len, &cap, br_st_dtype_name(t->dtype));
        bad |= br_json_put_raw(&h, &len, &cap, ",\"shape\":[", 10);
        for (size_t d = 0; d < t->ndim; d++) {
            int k =
                snprintf(num, sizeof num, "%s%llu", d ? "," : "", (unsigned long long)t->shape[d]);
            bad |= br_json_put_raw(&h, &len, &cap, num, (size_t)k);
        }
        int k = snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}",
                         (unsigned long long)offset, (unsigned long long)(offset + t->nbytes));
        bad |= br_json_put_raw(&h, &len, &cap, num, (size_t)k);
        offset += t->nbytes;
    }
    bad |= br_json_put_raw(&h, &len, &cap, "}", 1);
    while (!bad && (8 + len) % 8)
        bad |= br_json_put_raw(&h, &len, &cap, " ", 1);
    if (bad) {
        free(h);
        return br_fail(w->ctx, BR_E_NOMEM, "br_st_writer_finish: %s: out of host memory", w->path);
    }
    if (len > BR_ST_MAX_HEADER) { /* a file no reader (ours included) would open */
        free(h);
        return br_fail(w->ctx, BR_E_OVERFLOW,
                       "br_st_writer_finish: %s: the header would be %zu bytes, more than the "
                       "%llu a safetensors reader accepts",
                       w->path, len, (unsigned long long)BR_ST_MAX_HEADER);
    }
    *out = h;
    *out_len = len;
    return BR_OK;
}

/* Write n bytes of memory; `tensor` names the tensor they are (NULL: the header). */
static br_status write_all(br_st_writer *w, const void *buf, uint64_t n, const char *tensor) {
    const uint8_t *p = buf;
    while (n) {
        size_t chunk = n > ((uint64_t)1 << 30) ? (size_t)1 << 30 : (size_t)n;
        ssize_t r = write(w->fd, p, chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EFAULT && tensor)
            return br_fail(w->ctx, BR_E_IO,
                           "br_st_writer_finish: %s: tensor '%.200s': its data can no longer be "
                           "read (the file it was mapped from shrank?)",
                           w->path, tensor);
        if (r <= 0)
            return br_fail(w->ctx, BR_E_IO, "br_st_writer_finish: %s: write failed: %s", w->path,
                           r < 0 ? strerror(errno) : "no space written");
        p += r;
        n -= (uint64_t)r;
    }
    return BR_OK;
}

/* A tensor's data: from the file it lies in when it is a tensor of an open file
 * (read with pread, so a file that shrank since it was opened is an error naming
 * it, not a SIGBUS on its mapping), else from memory. */
static br_status write_tensor(br_st_writer *w, const wtensor *t) {
    br_st_source src;
    if (t->owned || !t->nbytes || !br_st_find_source(t->data, t->nbytes, &src))
        return write_all(w, t->data, t->nbytes, t->name);
    size_t cap = t->nbytes < ((uint64_t)4 << 20) ? (size_t)t->nbytes : (size_t)4 << 20;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return br_fail(w->ctx, BR_E_NOMEM, "br_st_writer_finish: %s: out of host memory", w->path);
    br_status st = BR_OK;
    for (uint64_t done = 0; st == BR_OK && done < t->nbytes;) {
        size_t want = t->nbytes - done < cap ? (size_t)(t->nbytes - done) : cap;
        ssize_t got = pread(src.fd, buf, want, (off_t)(src.offset + done));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            st = br_fail(w->ctx, BR_E_IO, "%s: read failed while copying tensor '%.200s': %s",
                         src.path, t->name, strerror(errno));
        else if (got == 0)
            st = br_st_shrank(w->ctx, src.path, src.fd, src.size);
        else
            st = write_all(w, buf, (uint64_t)got, t->name);
        if (got > 0) done += (uint64_t)got;
    }
    free(buf);
    return st;
}

br_status br_st_writer_tensor_bytes(const br_st_writer *w, const char *name, const void **data,
                                    uint64_t *nbytes) {
    if (!w || !name || !data || !nbytes) return BR_E_ARG;
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0) {
            *data = w->t[i].data;
            *nbytes = w->t[i].nbytes;
            return BR_OK;
        }
    return br_fail(w->ctx, BR_E_ARG, "br_st_writer_tensor_bytes: %s: no tensor '%.200s'", w->path,
                   name);
}

br_status br_st_writer_final_meta(br_st_writer *w) {
    BR_TRY(check_open(w, "br_st_writer_final_meta"));
    if (!w->blr) return BR_OK;
    BR_TRY(br_st_writer_meta(w, "format", BR_BLR_FORMAT));
    BR_TRY(br_st_writer_meta(w, "format_version", BR_BLR_FORMAT_VERSION));
    return br_st_writer_meta(w, "writer", "bitrank " BITRANK_VERSION);
}

size_t br_st_writer_meta_count(const br_st_writer *w) { return w ? w->nmeta : 0; }

br_status br_st_writer_meta_at(const br_st_writer *w, size_t i, const char **key,
                               const char **value) {
    if (!w || i >= w->nmeta) return BR_E_ARG;
    if (key) *key = w->mkeys[i];
    if (value) *value = w->mvals[i];
    return BR_OK;
}

br_status br_st_writer_finish(br_st_writer *w) {
    static const char *fn = "br_st_writer_finish";
    BR_TRY(check_open(w, fn));
    br_ctx *ctx = w->ctx;
    br_status st = br_st_writer_final_meta(w);
    if (st != BR_OK) {
        discard(w);
        return st;
    }
    /* names must be unique */
    const wtensor **sorted = malloc((w->n ? w->n : 1) * sizeof *sorted);
    if (!sorted) st = br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", fn);
    for (size_t i = 0; st == BR_OK && i < w->n; i++)
        sorted[i] = &w->t[i];
    if (st == BR_OK) qsort(sorted, w->n, sizeof *sorted, cmp_wname);
    for (size_t i = 1; st == BR_OK && i < w->n; i++)
        if (strcmp(sorted[i]->name, sorted[i - 1]->name) == 0)
            st = br_fail(ctx, BR_E_ARG, "%s: %s: tensor '%.200s' was added twice", fn, w->path,
                         sorted[i]->name);
    free(sorted);

    char *header = NULL;
    size_t hlen = 0;
    if (st == BR_OK) st = build_header(w, &header, &hlen);
    if (st == BR_OK) {
        uint8_t len8[8];
        br_put_le64(len8, hlen);
        st = write_all(w, len8, 8, NULL);
    }
    if (st == BR_OK) st = write_all(w, header, hlen, NULL);
    free(header);
    for (size_t i = 0; st == BR_OK && i < w->n; i++)
        st = write_tensor(w, &w->t[i]);
    if (st == BR_OK && fsync(w->fd) != 0)
        st = br_fail(ctx, BR_E_IO, "%s: %s: fsync failed: %s", fn, w->path, strerror(errno));
    if (st == BR_OK) {
        int fd = w->fd;
        w->fd = -1;
        if (close(fd) != 0)
            st = br_fail(ctx, BR_E_IO, "%s: %s: close failed: %s", fn, w->path, strerror(errno));
    }
    if (st == BR_OK && rename(w->tmp, w->path) != 0)
        st = br_fail(ctx, BR_E_IO, "%s: %s: cannot rename the temporary file into place: %s", fn,
                     w->path, strerror(errno));
    if (st != BR_OK) {
        discard(w);
        return st;
    }
    free(w->tmp);
    w->tmp = NULL;
    w->done = 1;
    /* make the rename itself durable */
    int dfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return br_fail(ctx, BR_E_IO,
                       "%s: %s: written, but its directory cannot be opened to sync: %s", fn,
                       w->path, strerror(errno));
    int synced = fsync(dfd), e = errno;
    close(dfd);
    if (synced != 0 && e != EINVAL && e != ENOTSUP)
        return br_fail(ctx, BR_E_IO, "%s: %s: written, but syncing its directory failed: %s", fn,
                       w->path, strerror(e));
    return BR_OK;
}

void br_st_writer_free(br_st_writer *w) {
    if (!w) return;
    if (w->tmp) discard(w);
    for (size_t i = 0; i < w->n; i++) {
        free(w->t[i].name);
        free(w->t[i].owned);
    }
    free(w->t);
    for (size_t i = 0; i < w->nmeta; i++) {
        free(w->mkeys[i]);
        free(w->mvals[i]);
    }
    free(w->mkeys);
    free(w->mvals);
    free(w->path);
    free(w->dir);
    free(w);
}
