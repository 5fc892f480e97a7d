/* Checkpoints of the compression job: each finished layer saved to a directory,
 * tagged with the hash of the options and input and of the layer's own data and
 * with a checksum of its contents, read back (and checked) by a resumed run. The
 * directory is locked while a job uses it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compress/calib.h"
#include "compress/ckpt.h"
#include "io/io_internal.h"

#define CKPT_PREFIX "layer-"
#define CKPT_SUFFIX ".safetensors"
#define CKPT_LOCK "bitrank.lock"

/* The metadata keys of a checkpoint (docs/FORMAT.md section 5); every one but
 * the checksum is required, V_* index their values. */
#define KEY_HASH "bitrank.ckpt.hash"
#define KEY_DATA "bitrank.ckpt.data"
#define KEY_LAYER "bitrank.ckpt.layer"
#define KEY_REPORT "bitrank.ckpt.report"
#define KEY_RESULT "bitrank.ckpt.result"
#define KEY_INIT "bitrank.ckpt.init"
#define KEY_CALIB "bitrank.ckpt.calibration"
#define KEY_NOTE "bitrank.ckpt.note"
#define KEY_LOSS "bitrank.ckpt.loss"
#define KEY_EVAL "bitrank.ckpt.eval"
#define KEY_CHECK "bitrank.ckpt.check"
enum { N_REQUIRED = 10 };
enum { V_HASH, V_DATA, V_LAYER, V_REPORT, V_RESULT, V_INIT, V_CALIB, V_NOTE, V_LOSS, V_EVAL };
static const char *const required_keys[N_REQUIRED] = {KEY_HASH,   KEY_DATA, KEY_LAYER, KEY_REPORT,
                                                      KEY_RESULT, KEY_INIT, KEY_CALIB, KEY_NOTE,
                                                      KEY_LOSS,   KEY_EVAL};

static const char *const blr_suffix[5] = {".blr.u", ".blr.v", ".blr.h", ".blr.l", ".blr.g"};

/* The values each text field may take ("" where a layer may have none: a skipped
 * one never initialized). */
static const char *const outcome_names[] = {"compressed", "skipped"};
static const char *const stop_names[] = {"none", "steps", "plateau"};
static const char *const device_names[] = {"", "cpu", "cuda"}; /* "": "none" in the file */
static const char *const init_names[] = {"", "plain", "scaled", "whitened"};
static const char *const calib_names[] = {"", "activations", "gram", "synthetic isotropic",
                                          "synthetic heavy-tailed"};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

void br_ckpt_path(const br_ckpt *c, size_t index, char *out, size_t cap) {
    snprintf(out, cap, "%s/" CKPT_PREFIX "%05zu" CKPT_SUFFIX, c->dir, index);
}

static void lock_path(const br_ckpt *c, char *out, size_t cap) {
    snprintf(out, cap, "%s/" CKPT_LOCK, c->dir);
}

/* ---------------------------------------------------------------- the lock */

/* The pid a lock file holds, or 0. */
static long lock_owner(int fd) {
    char text[32];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n <= 0) return 0;
    text[n] = '\0';
    char *end = NULL;
    long pid = strtol(text, &end, 10);
    return end != text && pid > 0 ? pid : 0;
}

/* Whether descriptor fd is the file at path (not one removed and made anew). */
static int is_file_at(int fd, const char *path) {
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

br_status br_ckpt_lock(br_ckpt *c) {
    br_ctx *ctx = c->ctx;
    if (c->locked) return BR_OK;
    char path[4400];
    lock_path(c, path, sizeof path);
    /* a holder that finishes removes the file: a lock taken on the removed file
     * is no lock, so take it again on the file now there */
    for (int attempt = 0; attempt < 16; attempt++) {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
        if (fd < 0)
            return br_fail(ctx, BR_E_IO,
                           "%s: cannot create the lock file of the checkpoint "
                           "directory: %s",
                           path, strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            if (e == EWOULDBLOCK) {
                long pid = lock_owner(fd);
                close(fd);
                if (pid)
                    return br_fail(ctx, BR_E_STATE,
                                   "%s: another bitrank compress is using this checkpoint "
                                   "directory (pid %ld)",
                                   c->dir, pid);
                return br_fail(ctx, BR_E_STATE,
                               "%s: another bitrank compress is using this checkpoint directory",
                               c->dir);
            }
            close(fd);
            if (e == ENOLCK || e == EINVAL || e == ENOTSUP || e == EOPNOTSUPP)
                return BR_OK; /* no flock on this file system: unlocked, as documented */
            return br_fail(ctx, BR_E_IO, "%s: cannot lock the checkpoint directory: %s", path,
                           strerror(e));
        }
        if (!is_file_at(fd, path)) {
            close(fd);
            continue;
        }
        char pid[32];
        int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
            int e = errno;
            close(fd);
            return br_fail(ctx, BR_E_IO, "%s: cannot write the lock file: %s", path, strerror(e));
        }
        c->lock_fd = fd;
        c->locked = 1;
        return BR_OK;
    }
    return br_fail(ctx, BR_E_IO,
                   "%s: cannot lock the checkpoint directory: its lock file keeps being replaced",
                   path);
}

void br_ckpt_unlock(br_ckpt *c) {
    if (!c->locked) return;
    char path[4400];
    lock_path(c, path, sizeof path);
    /* removed while still held, so no other job can have taken it: a file at the
     * path that is not ours belongs to the job after us */
    if (is_file_at(c->lock_fd, path)) unlink(path);
    close(c->lock_fd);
    c->locked = 0;
    c->lock_fd = 0;
}

/* Remove the lock file if it is ours or no process holds it. */
static void remove_lock_file(const br_ckpt *c) {
    char path[4400];
    lock_path(c, path, sizeof path);
    if (c->locked) {
        if (is_file_at(c->lock_fd, path)) unlink(path);
        return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return;
    /* held by another process: its file (without flock: nobody's) */
    if ((flock(fd, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK) && is_file_at(fd, path))
        unlink(path);
    close(fd);
}

/* Remove our layer files from the checkpoint directory, and leftovers of dead
 * writers (and, with `rmdir_too`, the lock file and the directory if it is then
 * empty). */
void br_ckpt_clear(const br_ckpt *c, int rmdir_too) {
    DIR *d = opendir(c->dir);
    if (!d) return;
    struct dirent *e;
    char path[4400];
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name), pl = strlen(CKPT_PREFIX), sl = strlen(CKPT_SUFFIX);
        if (len == pl + 5 + sl && !strncmp(e->d_name, CKPT_PREFIX, pl) &&
            !strcmp(e->d_name + len - sl, CKPT_SUFFIX)) {
            snprintf(path, sizeof path, "%s/%s", c->dir, e->d_name);
            unlink(path);
        } else if (!strncmp(e->d_name, "." CKPT_PREFIX, pl + 1)) {
            br_st_remove_stale_temporary(c->dir, e->d_name, NULL);
        }
    }
    closedir(d);
    if (rmdir_too) {
        remove_lock_file(c);
        rmdir(c->dir);
    }
}

/* ---------------------------------------------------------------- the checksum */

/* The checksum of a checkpoint: every metadata entry but the checksum's own, in
 * the order of their keys (strcmp, as br_st_meta_at lists them), then each BLR
 * tensor's name, size and bytes (read by `read`, a chunk at a time). Any one
 * changed byte changes it (each step of br_bytes_hash is a bijection of the
 * running hash for a given word, and every entry is ended by its NUL). */
typedef br_status (*chunk_fn)(void *user, const char *tensor, uint64_t offset, size_t n, void *dst);
typedef struct tensor_src {
    const char *name; /* NAME.blr.X */
    uint64_t nbytes;  /* UINT64_MAX: absent */
} tensor_src;
typedef struct meta_entry {
    const char *key, *value;
} meta_entry;

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const meta_entry *)a)->key, ((const meta_entry *)b)->key);
}

static br_status checksum(meta_entry *meta, size_t nmeta, const tensor_src *tensors, chunk_fn read,
                          void *user, uint64_t *out) {
    qsort(meta, nmeta, sizeof *meta, cmp_entry);
    uint64_t h = br_name_hash("bitrank-ckpt-check-v1");
    for (size_t i = 0; i < nmeta; i++) {
        if (!strcmp(meta[i].key, KEY_CHECK)) continue;
        h = br_bytes_hash(h, meta[i].key, strlen(meta[i].key) + 1);
        h = br_bytes_hash(h, meta[i].value, strlen(meta[i].value) + 1);
    }
    enum { CHUNK = 1 << 16 }; /* a multiple of 8: chunk by chunk hashes as one call */
    uint8_t *buf = malloc(CHUNK);
    if (!buf) return BR_E_NOMEM;
    br_status st = BR_OK;
    for (int i = 0; i < 5 && !st; i++) {
        uint64_t n = tensors[i].nbytes;
        h = br_bytes_hash(h ^ br_name_hash(blr_suffix[i]), &n, sizeof n);
        for (uint64_t at = 0; n != UINT64_MAX && at < n && !st;) {
            size_t k = n - at < CHUNK ? (size_t)(n - at) : CHUNK;
            st = read(user, tensors[i].name, at, k, buf);
            if (!st) h = br_bytes_hash(h, buf, k);
            at += k;
        }
    }
    free(buf);
    *out = h;
    return st;
}

/* The metadata of a writer or a file, for the checksum (malloc'd; NULL: no memory). */
static meta_entry *writer_meta(const br_st_writer *w, size_t *n) {
    *n = br_st_writer_meta_count(w);
    meta_entry *m = malloc((*n ? *n : 1) * sizeof *m);
    for (size_t i = 0; m && i < *n; i++)
        br_st_writer_meta_at(w, i, &m[i].key, &m[i].value);
    return m;
}

static meta_entry *file_meta(const br_st_file *f, size_t *n) {
    *n = br_st_meta_count(f);
    meta_entry *m = malloc((*n ? *n : 1) * sizeof *m);
    for (size_t i = 0; m && i < *n; i++)
        br_st_meta_at(f, i, &m[i].key, &m[i].value);
    return m;
}

static br_status writer_chunk(void *user, const char *tensor, uint64_t offset, size_t n,
                              void *dst) {
    const void *data = NULL;
    uint64_t nbytes = 0;
    BR_TRY(br_st_writer_tensor_bytes(user, tensor, &data, &nbytes));
    memcpy(dst, (const uint8_t *)data + offset, n);
    return BR_OK;
}

typedef struct file_reader {
    br_ctx *ctx;
    const br_st_file *f;
} file_reader;

static br_status file_chunk(void *user, const char *tensor, uint64_t offset, size_t n, void *dst) {
    const file_reader *r = user;
    return br_st_read_bytes(r->ctx, r->f, br_st_find(r->f, tensor), offset, n, dst);
}

/* ---------------------------------------------------------------- saving */

/* A curve as text: numbers separated by single spaces (malloc'd; NULL: no memory). */
static char *curve_text(const float *v, size_t n) {
    size_t cap = n * 18 + 1, pos = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    s[0] = '\0';
    for (size_t i = 0; i < n && pos + 18 < cap; i++)
        pos += (size_t)snprintf(s + pos, cap - pos, "%s%.9g", i ? " " : "", (double)v[i]);
    return s;
}

static const char *name_of(const char *const *names, size_t count, int value) {
    return value >= 0 && (size_t)value < count ? names[value] : "?";
}

static int is_one_of(const char *value, const char *const *names, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (!strcmp(value, names[i])) return 1;
    return 0;
}

/* A report the loader would refuse is not saved: a value outside what a
 * checkpoint may hold is the job's mistake, reported now rather than as a damaged
 * file on the resume. */
static br_status check_report(br_ctx *ctx, const br_layer_report *lr) {
    const char *bad = (unsigned)lr->outcome >= COUNT(outcome_names) ? "outcome"
                      : (unsigned)lr->stop >= COUNT(stop_names)     ? "stop"
                      : !is_one_of(lr->init_device, device_names, COUNT(device_names))
                          ? "init_device"
                      : !is_one_of(lr->init_kind, init_names, COUNT(init_names))     ? "init_kind"
                      : !is_one_of(lr->calibration, calib_names, COUNT(calib_names)) ? "calibration"
                      : (lr->n_loss && !lr->loss) || (lr->n_eval && !lr->eval)       ? "a curve"
                                                                                     : NULL;
    if (bad)
        return br_fail(ctx, BR_E_ARG,
                       "br_ckpt_save: layer '%s': %s is not a value a checkpoint holds", lr->name,
                       bad);
    return BR_OK;
}

br_status br_ckpt_save(br_ckpt *c, size_t index, uint64_t data, const br_blr_host *L,
                       const br_layer_report *lr) {
    br_ctx *ctx = c->ctx;
    if (!lr) return br_fail(ctx, BR_E_ARG, "br_ckpt_save: lr is NULL");
    if (!L && lr->outcome != BR_LAYER_SKIPPED)
        return br_fail(ctx, BR_E_ARG,
                       "br_ckpt_save: layer '%s': L is NULL, but the layer was compressed",
                       lr->name);
    BR_TRY(check_report(ctx, lr));
    char path[4400], report[256], result[768], data_hex[17], names[5][300];
    br_ckpt_path(c, index, path, sizeof path);
    snprintf(data_hex, sizeof data_hex, "%016llx", (unsigned long long)data);
    snprintf(report, sizeof report, "%.17g %.17g %.17g %d %d %.17g %s", lr->err_init,
             lr->err_trained, lr->weight_err, lr->steps, lr->loss_every, lr->seconds,
             lr->init_device[0] ? lr->init_device : "none");
    snprintf(result, sizeof result,
             "outcome=%s stop=%s best_step=%d eval_every=%d weight_err_init=%.17g "
             "tok_init=%.17g,%.17g,%.17g tok_trained=%.17g,%.17g,%.17g calib_tokens=%zu",
             name_of(outcome_names, COUNT(outcome_names), (int)lr->outcome),
             name_of(stop_names, COUNT(stop_names), (int)lr->stop), lr->best_step, lr->eval_every,
             lr->weight_err_init, lr->tok_init.p50, lr->tok_init.p90, lr->tok_init.p99,
             lr->tok_trained.p50, lr->tok_trained.p90, lr->tok_trained.p99, lr->calib_tokens);
    char *loss = curve_text(lr->loss, lr->n_loss), *eval = curve_text(lr->eval, lr->n_eval);
    const char *values[N_REQUIRED] = {c->hash,          data_hex,        lr->name,        report,
                                      result,           lr->init_kind,   lr->calibration, lr->note,
                                      loss ? loss : "", eval ? eval : ""};
    br_st_writer *w = NULL;
    br_status st = loss && eval ? BR_OK : br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", path);
    if (!st) st = br_st_writer_new(ctx, path, &w);
    if (!st && L) st = br_st_writer_add_blr(w, lr->name, L);
    tensor_src tensors[5];
    for (int i = 0; i < 5 && !st; i++) {
        snprintf(names[i], sizeof names[i], "%s%s", lr->name, blr_suffix[i]);
        const void *bytes = NULL;
        tensors[i] = (tensor_src){names[i], UINT64_MAX};
        if (L) st = br_st_writer_tensor_bytes(w, names[i], &bytes, &tensors[i].nbytes);
    }
    for (int i = 0; i < N_REQUIRED && !st; i++)
        st = br_st_writer_meta(w, required_keys[i], values[i]);
    /* the checksum covers the header's metadata as finish writes it */
    if (!st) st = br_st_writer_final_meta(w);
    uint64_t sum = 0;
    size_t nmeta = 0;
    meta_entry *meta = st ? NULL : writer_meta(w, &nmeta);
    if (!st && !meta) st = BR_E_NOMEM;
    if (!st) st = checksum(meta, nmeta, tensors, writer_chunk, w, &sum);
    free(meta);
    if (st == BR_E_NOMEM) st = br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", path);
    char sum_hex[17];
    snprintf(sum_hex, sizeof sum_hex, "%016llx", (unsigned long long)sum);
    if (!st) st = br_st_writer_meta(w, KEY_CHECK, sum_hex);
    if (!st) st = br_st_writer_finish(w);
    br_st_writer_free(w);
    free(loss);
    free(eval);
    return st;
}

/* ---------------------------------------------------------------- loading */

/* A damaged checkpoint: the message names the file and the field, and says how
 * to go on. The job stops (a checkpoint is never silently dropped or used: our
 * writer renames complete files into place, so damage means something outside
 * the job, a disk or a copy, touched them). */
static br_status damaged(br_ctx *ctx, const char *path, const char *layer, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static br_status damaged(br_ctx *ctx, const char *path, const char *layer, const char *fmt, ...) {
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return br_fail(ctx, BR_E_FORMAT,
                   "%s: damaged checkpoint of layer '%s': %s; remove the file to recompute the "
                   "layer",
                   path, layer, what);
}

/* The scales of a layer read from a checkpoint are finite (f16 can hold ±Inf and NaN). */
static br_status check_scales(br_ctx *ctx, const char *path, const char *name,
                              const br_blr_host *L) {
    for (size_t p = 0; p < L->paths; p++) {
        const float *arr[3] = {L->path[p].h, L->path[p].l, L->path[p].g};
        const size_t len[3] = {L->m, L->r, L->n};
        static const char *const suffix[3] = {"h", "l", "g"};
        for (int a = 0; a < 3; a++)
            for (size_t i = 0; i < len[a]; i++)
                if (!isfinite(arr[a][i]))
                    return damaged(ctx, path, name, "tensor '%s.blr.%s' [%zu][%zu] is %s", name,
                                   suffix[a], p, i, isnan(arr[a][i]) ? "NaN" : "infinite");
    }
    return BR_OK;
}

/* The report field: "err_init err_trained weight_err steps loss_every seconds
 * device", each number in range (strtod: no sscanf %d, whose overflow is
 * undefined), single spaces between. */
static br_status parse_report(br_ckpt *c, const char *path, const char *name, const char *rep,
                              br_layer_report *lr) {
    br_ctx *ctx = c->ctx;
    const char *field = KEY_REPORT;
    static const char *const names[6] = {"err_init", "err_trained", "weight_err",
                                         "steps",    "loss_every",  "seconds"};
    double v[6];
    const char *at = rep;
    for (int i = 0; i < 6; i++) {
        char *stop = NULL;
        v[i] = *at != ' ' ? strtod(at, &stop) : 0; /* strtod would skip spaces */
        if (!stop || stop == at || *stop != ' ')
            return damaged(ctx, path, name, "field '%s' is not 7 values: '%.80s'", field, rep);
        at = stop + 1;
    }
    const char *dev = at;
    if (strcmp(dev, "cpu") != 0 && strcmp(dev, "cuda") != 0 && strcmp(dev, "none") != 0)
        return damaged(ctx, path, name, "field '%s': device '%.40s' is not cpu, cuda or none",
                       field, dev);
    int max_steps = c->max_steps > 0 ? c->max_steps : 0;
    const double max[6] = {INFINITY, INFINITY, INFINITY, max_steps, max_steps > 1 ? max_steps : 1,
                           INFINITY};
    for (int i = 0; i < 6; i++) {
        int whole = i == 3 || i == 4;
        if (!(v[i] >= 0) || !isfinite(v[i]) || v[i] > max[i] || (whole && v[i] != floor(v[i])))
            return damaged(ctx, path, name, "field '%s': %s = %g, expected %s in [0, %g]", field,
                           names[i], v[i], whole ? "an integer" : "a finite number", max[i]);
    }
    lr->err_init = v[0];
    lr->err_trained = v[1];
    lr->weight_err = v[2];
    lr->steps = (int)v[3];
    lr->loss_every = (int)v[4];
    lr->seconds = v[5];
    snprintf(lr->init_device, sizeof lr->init_device, "%s", strcmp(dev, "none") ? dev : "");
    return BR_OK;
}

/* Where a parse of the result field ("key=value ...") is, for messages. */
typedef struct result_cursor {
    br_ctx *ctx;
    const char *path, *layer;
    const char *text; /* the whole field */
    const char *at;
} result_cursor;

/* "KEY=" at the cursor (after a single space unless it is the first). */
static br_status expect_key(result_cursor *rc, const char *key) {
    size_t k = strlen(key);
    if (rc->at != rc->text) {
        if (*rc->at != ' ')
            return damaged(rc->ctx, rc->path, rc->layer,
                           "field '" KEY_RESULT "': expected a space before '%s=' at '%.40s'", key,
                           rc->at);
        rc->at++;
    }
    if (strncmp(rc->at, key, k) != 0 || rc->at[k] != '=')
        return damaged(rc->ctx, rc->path, rc->layer,
                       "field '" KEY_RESULT "': expected '%s=' at '%.40s'", key, rc->at);
    rc->at += k + 1;
    return BR_OK;
}

/* A finite number ≥ 0, ending at a space, a comma or the end. */
static br_status take_number(result_cursor *rc, const char *key, double *out) {
    char *stop = NULL;
    double v = *rc->at >= '0' && *rc->at <= '9' ? strtod(rc->at, &stop) : 0;
    if (!stop || stop == rc->at || (*stop && *stop != ' ' && *stop != ',') || !isfinite(v) ||
        !(v >= 0))
        return damaged(rc->ctx, rc->path, rc->layer,
                       "field '" KEY_RESULT "': %s = '%.24s' is not a finite number ≥ 0", key,
                       rc->at);
    rc->at = stop;
    *out = v;
    return BR_OK;
}

/* An integer in [0, max]: digits only, ending at a space or the end. */
static br_status take_count(result_cursor *rc, const char *key, uint64_t max, uint64_t *out) {
    const char *p = rc->at;
    uint64_t v = 0;
    int ok = *p >= '0' && *p <= '9';
    for (; ok && *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (d > max || v > (max - d) / 10) ok = 0;
        v = v * 10 + d;
    }
    if (!ok || (*p && *p != ' '))
        return damaged(rc->ctx, rc->path, rc->layer,
                       "field '" KEY_RESULT "': %s = '%.24s' is not an integer in [0, %llu]", key,
                       rc->at, (unsigned long long)max);
    rc->at = p;
    *out = v;
    return BR_OK;
}

/* A word (up to the next space) that is one of names[]; *out its index. */
static br_status take_word(result_cursor *rc, const char *key, const char *const *names,
                           size_t count, int *out) {
    size_t len = strcspn(rc->at, " ");
    for (size_t i = 0; i < count; i++)
        if (strlen(names[i]) == len && !strncmp(rc->at, names[i], len)) {
            rc->at += len;
            *out = (int)i;
            return BR_OK;
        }
    return damaged(rc->ctx, rc->path, rc->layer,
                   "field '" KEY_RESULT "': %s = '%.*s' is not one of its values", key,
                   (int)(len < 40 ? len : 40), rc->at);
}

/* p50,p90,p99: finite, ≥ 0, in order. */
static br_status take_quantiles(result_cursor *rc, const char *key, br_token_err *out) {
    double v[3];
    for (int i = 0; i < 3; i++) {
        if (i) {
            if (*rc->at != ',')
                return damaged(rc->ctx, rc->path, rc->layer,
                               "field '" KEY_RESULT "': %s is not 3 numbers p50,p90,p99", key);
            rc->at++;
        }
        BR_TRY(take_number(rc, key, &v[i]));
    }
    if (*rc->at == ',' || !(v[0] <= v[1] && v[1] <= v[2]))
        return damaged(rc->ctx, rc->path, rc->layer,
                       "field '" KEY_RESULT "': %s is not 3 quantiles p50 ≤ p90 ≤ p99", key);
    *out = (br_token_err){v[0], v[1], v[2]};
    return BR_OK;
}

/* The result field: every value, in order, each in range (lr->steps is parsed). */
static br_status parse_result(result_cursor *rc, br_layer_report *lr) {
    uint64_t u = 0;
    int word = 0;
    BR_TRY(expect_key(rc, "outcome"));
    BR_TRY(take_word(rc, "outcome", outcome_names, COUNT(outcome_names), &word));
    lr->outcome = (br_layer_outcome)word;
    BR_TRY(expect_key(rc, "stop"));
    BR_TRY(take_word(rc, "stop", stop_names, COUNT(stop_names), &word));
    lr->stop = (br_stop_reason)word;
    BR_TRY(expect_key(rc, "best_step"));
    BR_TRY(take_count(rc, "best_step", (uint64_t)lr->steps, &u));
    lr->best_step = (int)u;
    BR_TRY(expect_key(rc, "eval_every"));
    BR_TRY(take_count(rc, "eval_every", INT32_MAX, &u));
    lr->eval_every = (int)u;
    BR_TRY(expect_key(rc, "weight_err_init"));
    BR_TRY(take_number(rc, "weight_err_init", &lr->weight_err_init));
    if (*rc->at == ',')
        return damaged(rc->ctx, rc->path, rc->layer,
                       "field '" KEY_RESULT "': weight_err_init is not one number");
    BR_TRY(expect_key(rc, "tok_init"));
    BR_TRY(take_quantiles(rc, "tok_init", &lr->tok_init));
    BR_TRY(expect_key(rc, "tok_trained"));
    BR_TRY(take_quantiles(rc, "tok_trained", &lr->tok_trained));
    BR_TRY(expect_key(rc, "calib_tokens"));
    BR_TRY(take_count(rc, "calib_tokens", SIZE_MAX, &u));
    lr->calib_tokens = (size_t)u;
    if (*rc->at)
        return damaged(rc->ctx, rc->path, rc->layer,
                       "field '" KEY_RESULT "': unexpected text after the last value: '%.40s'",
                       rc->at);
    return BR_OK;
}

/* A curve: at most `cap` numbers ≥ 0 (or NaN/Inf: a refused step's loss is logged
 * as it was), single spaces between, into a new array *out. */
static br_status parse_curve(br_ctx *ctx, const char *path, const char *layer, const char *key,
                             const char *text, size_t cap, const char *per, float **out,
                             size_t *n) {
    *n = 0;
    *out = malloc((cap ? cap : 1) * sizeof **out);
    if (!*out) return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", path);
    for (const char *pt = text; *pt;) {
        char *stop = NULL;
        double point = *pt != ' ' ? strtod(pt, &stop) : 0; /* strtod would skip spaces */
        if (!stop || stop == pt || (*stop && *stop != ' ') || point < 0)
            return damaged(ctx, path, layer, "field '%s': point %zu is not a number ≥ 0: '%.20s'",
                           key, *n, pt);
        if (*n == cap)
            return damaged(ctx, path, layer, "field '%s' has more than the %zu points of %s", key,
                           cap, per);
        (*out)[(*n)++] = (float)point;
        pt = *stop ? stop + 1 : stop;
    }
    return BR_OK;
}

/* A text field that must be one of names[]. */
static br_status take_text(br_ctx *ctx, const char *path, const char *layer, const char *key,
                           const char *value, const char *const *names, size_t count, char *dst,
                           size_t cap) {
    for (size_t i = 0; i < count; i++)
        if (!strcmp(value, names[i])) {
            snprintf(dst, cap, "%s", value);
            return BR_OK;
        }
    return damaged(ctx, path, layer, "field '%s' = '%.40s' is not one of its values", key, value);
}

/* Every report field of a checkpoint into lr, each checked. */
static br_status parse_fields(br_ckpt *c, const char *path, const char *layer,
                              const char *const values[N_REQUIRED], br_layer_report *lr) {
    br_ctx *ctx = c->ctx;
    BR_TRY(parse_report(c, path, layer, values[V_REPORT], lr));
    result_cursor rc = {ctx, path, layer, values[V_RESULT], values[V_RESULT]};
    BR_TRY(parse_result(&rc, lr));
    BR_TRY(take_text(ctx, path, layer, KEY_INIT, values[V_INIT], init_names, COUNT(init_names),
                     lr->init_kind, sizeof lr->init_kind));
    BR_TRY(take_text(ctx, path, layer, KEY_CALIB, values[V_CALIB], calib_names, COUNT(calib_names),
                     lr->calibration, sizeof lr->calibration));
    const char *note = values[V_NOTE];
    size_t len = strlen(note);
    if (len >= sizeof lr->note)
        return damaged(ctx, path, layer, "field '" KEY_NOTE "' is %zu bytes, at most %zu", len,
                       sizeof lr->note - 1);
    memcpy(lr->note, note, len + 1); /* UTF-8, as the header parser checked */
    /* the loss curve: a point every loss_every steps (and the last) */
    char per[64];
    snprintf(per, sizeof per, "%d steps", lr->steps);
    size_t cap =
        lr->steps > 0 ? (size_t)lr->steps / (size_t)(lr->loss_every ? lr->loss_every : 1) + 2 : 0;
    BR_TRY(
        parse_curve(ctx, path, layer, KEY_LOSS, values[V_LOSS], cap, per, &lr->loss, &lr->n_loss));
    if ((lr->steps > 0) != (lr->n_loss > 0) || (lr->n_loss > 0) != (lr->loss_every > 0))
        return damaged(ctx, path, layer,
                       "fields '" KEY_LOSS "' and '" KEY_REPORT
                       "' disagree: %zu points, %d steps, loss_every %d",
                       lr->n_loss, lr->steps, lr->loss_every);
    /* the held-out curve: at steps 0, eval_every, 2·eval_every, … and the last */
    cap = (lr->eval_every > 0 ? (size_t)lr->steps / (size_t)lr->eval_every : 0) + 2;
    snprintf(per, sizeof per, "%d steps evaluated every %d", lr->steps, lr->eval_every);
    return parse_curve(ctx, path, layer, KEY_EVAL, values[V_EVAL], cap, per, &lr->eval,
                       &lr->n_eval);
}

/* Whether the checksum field matches the file's contents: 1 yes, 0 no, -1 the
 * file has none; <-1: a read failed (*status set). */
static int checksum_matches(br_ctx *ctx, const char *path, const br_st_file *f, const char *name,
                            br_status *status) {
    const char *sum_hex = br_st_meta(f, KEY_CHECK);
    if (!sum_hex) return -1;
    char names[5][300];
    tensor_src tensors[5];
    for (int i = 0; i < 5; i++) {
        snprintf(names[i], sizeof names[i], "%s%s", name, blr_suffix[i]);
        const br_st_tensor *t = br_st_find(f, names[i]);
        tensors[i] = (tensor_src){names[i], t ? t->nbytes : UINT64_MAX};
    }
    file_reader reader = {ctx, f};
    uint64_t sum = 0;
    size_t nmeta = 0;
    meta_entry *meta = file_meta(f, &nmeta);
    br_status st = meta ? checksum(meta, nmeta, tensors, file_chunk, &reader, &sum) : BR_E_NOMEM;
    free(meta);
    if (st == BR_E_NOMEM) st = br_fail(ctx, st, "%s: out of host memory", path);
    if (st) { /* a read error: the reader's message names the file */
        *status = st;
        return -2;
    }
    char want[17];
    snprintf(want, sizeof want, "%016llx", (unsigned long long)sum);
    return strcmp(want, sum_hex) == 0;
}

/* The checks of an opened checkpoint, then its layer and report into L and lr.
 * A checksum that does not match means damage, whatever else the file says; the
 * checks of each field still come first, to name what is wrong where they can,
 * except those that would call the file one of other options or input (a
 * changed tag is damage then). */
static br_status check_and_read(br_ckpt *c, const char *path, const br_st_file *f, uint64_t data,
                                const char *name, size_t m, size_t n, size_t r, br_blr_host *L,
                                br_layer_report *lr) {
    br_ctx *ctx = c->ctx;
    const char *values[N_REQUIRED];
    const char *missing = NULL;
    for (int i = 0; i < N_REQUIRED; i++) {
        values[i] = br_st_meta(f, required_keys[i]);
        if (!values[i] && !missing) missing = required_keys[i];
    }
    const char *hash = values[V_HASH], *data_hex = values[V_DATA], *layer = values[V_LAYER];
    br_status st = BR_OK;
    int sum_ok = checksum_matches(ctx, path, f, name, &st);
    if (sum_ok < -1) return st;
    char mismatch[160];
    snprintf(mismatch, sizeof mismatch, "its contents do not match its checksum (field '%s' %.16s)",
             KEY_CHECK, sum_ok == 0 ? br_st_meta(f, KEY_CHECK) : "");
    char want_data[17];
    snprintf(want_data, sizeof want_data, "%016llx", (unsigned long long)data);
    int other_hash = !hash || strcmp(hash, c->hash) != 0;
    int other_data = !data_hex || strcmp(data_hex, want_data) != 0;
    if (sum_ok == 0 && (other_hash || other_data)) return damaged(ctx, path, name, "%s", mismatch);
    if (other_hash)
        return br_fail(ctx, BR_E_STATE,
                       "%s: this checkpoint was made with other options or another input (hash "
                       "%.16s, now %s): rerun with the options of the interrupted run, or without "
                       "--resume to start over",
                       path, hash ? hash : "none", c->hash);
    if (other_data)
        return br_fail(ctx, BR_E_STATE,
                       "%s: layer '%s' was fit to another input: its weights or calibration data "
                       "differ from this run's (data %.16s, now %s): remove the file to recompute "
                       "the layer, or rerun without --resume to start over",
                       path, name, data_hex ? data_hex : "none", want_data);
    if (!layer || strcmp(layer, name) != 0)
        return damaged(ctx, path, name, "field '" KEY_LAYER "' is '%.200s'",
                       layer ? layer : "(missing)");
    if (missing) return damaged(ctx, path, name, "field '%s' is missing", missing);
    BR_TRY(parse_fields(c, path, name, values, lr));
    /* a compressed layer holds its BLR tensors; a skipped one may hold none */
    if (lr->outcome != BR_LAYER_SKIPPED || br_st_count(f) != 0) {
        const br_blr_info *info = br_st_blr_count(f) == 1 ? br_st_blr_at(f, 0) : NULL;
        if (!info || strcmp(info->name, name) != 0)
            return damaged(ctx, path, name, "it holds %zu compressed layers, expected '%s' alone",
                           br_st_blr_count(f), name);
        if (info->m != m || info->n != n || info->r != r || info->paths != c->paths)
            return damaged(ctx, path, name,
                           "field '%s.blr': [%zu][%zu], rank %zu, %zu path(s); the layer is "
                           "[%zu][%zu], rank %zu, %zu path(s)",
                           name, info->m, info->n, info->r, info->paths, m, n, r, c->paths);
        BR_TRY(br_st_read_blr(ctx, f, name, L));
        BR_TRY(check_scales(ctx, path, name, L));
    }
    if (sum_ok < 0) return damaged(ctx, path, name, "field '" KEY_CHECK "' is missing");
    if (sum_ok == 0) return damaged(ctx, path, name, "%s", mismatch);
    return BR_OK;
}

int br_ckpt_load(br_ckpt *c, size_t index, uint64_t data, const char *name, size_t m, size_t n,
                 size_t r, br_blr_host *L, br_layer_report *lr, br_status *status) {
    br_ctx *ctx = c->ctx;
    char path[4400];
    br_ckpt_path(c, index, path, sizeof path);
    struct stat sb;
    if (stat(path, &sb) != 0) return 0;
    memset(L, 0, sizeof *L);
    lr->loss = lr->eval = NULL;
    lr->n_loss = lr->n_eval = 0;
    br_st_file *f = NULL;
    br_status st = br_st_open(ctx, path, &f);
    if (st) {
        /* the parser's message names the file and what is wrong with it */
        char msg[sizeof ctx->err];
        snprintf(msg, sizeof msg, "%s", br_ctx_error(ctx));
        *status = br_fail(ctx, st,
                          "%s (a damaged checkpoint of layer '%s': remove the file to "
                          "recompute the layer)",
                          msg, name);
        return -1;
    }
    st = check_and_read(c, path, f, data, name, m, n, r, L, lr);
    br_st_close(f);
    if (st) {
        br_blr_host_free(L);
        free(lr->loss);
        free(lr->eval);
        lr->loss = lr->eval = NULL;
        lr->n_loss = lr->n_eval = 0;
        *status = st;
        return -1;
    }
    lr->resumed = 1;
    return 1;
}
