/* The files of the compression job: its paths checked against the input by
 * identity, the checkpoint directory's lock, checkpoints that carry the whole
 * layer report and a checksum, stale temporary files of dead writers, and input
 * files that shrink while they are read. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compress/ckpt.h"
#include "compress/paths.h"
#include "harness.h"

static char t_dir[64];

/* A fresh directory for one case. */
static const char *fresh_dir(void) {
    const char *base = getenv("TMPDIR");
    snprintf(t_dir, sizeof t_dir, "%s/bitrank-jf-XXXXXX",
             base && *base && strlen(base) < 40 ? base : "/tmp");
    if (!mkdtemp(t_dir)) {
        fprintf(stderr, "mkdtemp %s: %s\n", t_dir, strerror(errno));
        exit(1);
    }
    return t_dir;
}

static void remove_dir(const char *dir) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

static int exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* A safetensors file of one F32 tensor `name` [rows][cols] of random values. */
static void write_tensor_file(br_ctx *ctx, const char *path, const char *name, size_t rows,
                              size_t cols, br_rng *r) {
    float *x = t_rand(r, rows * cols, 1.0f);
    uint64_t shape[2] = {rows, cols};
    br_st_writer *w = NULL;
    CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
    CHECK_OK(ctx, br_st_writer_add(w, name, BR_ST_F32, 2, shape, x));
    CHECK_OK(ctx, br_st_writer_finish(w));
    br_st_writer_free(w);
    free(x);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f && fputs(text, f) >= 0, "cannot write %s", path);
    if (f) fclose(f);
}

/* A pid that was a process and is not one any more. */
static pid_t dead_pid(void) {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    waitpid(pid, NULL, 0);
    return pid;
}

/* ---------------------------------------------------------------- paths */

/* Two paths are one file by identity: the same inode when both exist (links of
 * either kind, "./" spellings), the same resolved path when neither does. */
static void same_file_by_identity(void) {
    br_ctx *ctx = t_cpu_ctx();
    const char *dir = fresh_dir();
    br_rng r = t_rng_for(1);
    char in[128], dotted[128], soft[128], hard[128], other[128], sub[128];
    snprintf(in, sizeof in, "%s/in.safetensors", dir);
    snprintf(dotted, sizeof dotted, "%s/./in.safetensors", dir);
    snprintf(soft, sizeof soft, "%s/soft.safetensors", dir);
    snprintf(hard, sizeof hard, "%s/hard.safetensors", dir);
    snprintf(other, sizeof other, "%s/other.safetensors", dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    write_tensor_file(ctx, in, "a.weight", 4, 4, &r);
    write_tensor_file(ctx, other, "a.weight", 4, 4, &r);
    CHECK(symlink("in.safetensors", soft) == 0 && link(in, hard) == 0 && mkdir(sub, 0777) == 0,
          "links: %s", strerror(errno));
    CHECK(br_path_same_file(in, in) && br_path_same_file(in, dotted), "a spelling of the file");
    CHECK(br_path_same_file(in, soft) && br_path_same_file(hard, in), "links to the file");
    CHECK(!br_path_same_file(in, other), "another file of the same contents");
    char fresh_a[160], fresh_b[160], fresh_c[160];
    snprintf(fresh_a, sizeof fresh_a, "%s/new.html", dir);
    snprintf(fresh_b, sizeof fresh_b, "%s/sub/../new.html", dir);
    snprintf(fresh_c, sizeof fresh_c, "%s/sub/new.html", dir);
    CHECK(br_path_same_file(fresh_a, fresh_b), "one new file, two spellings");
    CHECK(!br_path_same_file(fresh_a, fresh_c), "two new files");
    CHECK(!br_path_same_file(fresh_a, in), "a new file is not an existing one");
    remove_dir(dir);
    br_ctx_free(ctx);
}

/* The job's output and checkpoint directory against the input's files: the file
 * itself (any spelling or link), a shard or the index of a sharded checkpoint;
 * the checkpoint directory neither an input file nor the directory holding one. */
static void check_paths_refuses_inputs(void) {
    br_ctx *ctx = t_cpu_ctx();
    const char *dir = fresh_dir();
    br_rng r = t_rng_for(2);
    char in[128], soft[128], out[128], model[128];
    snprintf(in, sizeof in, "%s/in.safetensors", dir);
    snprintf(soft, sizeof soft, "%s/soft.safetensors", dir);
    snprintf(out, sizeof out, "%s/out.safetensors", dir);
    write_tensor_file(ctx, in, "a.weight", 8, 8, &r);
    CHECK(symlink(in, soft) == 0, "symlink");
    br_st_file *f = NULL;
    CHECK_OK(ctx, br_st_open(ctx, in, &f));
    if (f) {
        CHECK_OK(ctx, br_compress_check_paths(ctx, f, out, NULL));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "the input file itself",
                        br_compress_check_paths(ctx, f, in, NULL));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "soft.safetensors",
                        br_compress_check_paths(ctx, f, soft, NULL));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "checkpoint directory is the input file",
                        br_compress_check_paths(ctx, f, out, in));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "directory of the input file",
                        br_compress_check_paths(ctx, f, out, dir));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "report", br_compress_check_not_input(ctx, f, in, "report"));
        br_st_close(f);
    }
    /* a sharded checkpoint, opened by its directory */
    snprintf(model, sizeof model, "%s/model", dir);
    CHECK(mkdir(model, 0777) == 0, "mkdir");
    char shard1[200], shard2[200], index[200];
    snprintf(shard1, sizeof shard1, "%s/model-00001-of-00002.safetensors", model);
    snprintf(shard2, sizeof shard2, "%s/model-00002-of-00002.safetensors", model);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", model);
    write_tensor_file(ctx, shard1, "a.weight", 8, 8, &r);
    write_tensor_file(ctx, shard2, "b.weight", 8, 8, &r);
    write_text(index, "{\"metadata\":{},\"weight_map\":{"
                      "\"a.weight\":\"model-00001-of-00002.safetensors\","
                      "\"b.weight\":\"model-00002-of-00002.safetensors\"}}");
    CHECK_OK(ctx, br_st_open(ctx, model, &f));
    if (f) {
        CHECK_OK(ctx, br_compress_check_paths(ctx, f, out, NULL));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "model-00002-of-00002.safetensors",
                        br_compress_check_paths(ctx, f, shard2, NULL));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "model.safetensors.index.json",
                        br_compress_check_paths(ctx, f, index, NULL));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "model-00001-of-00002.safetensors",
                        br_compress_check_not_input(ctx, f, shard1, "report"));
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "directory of the input file",
                        br_compress_check_paths(ctx, f, out, model));
        br_st_close(f);
    }
    remove_dir(dir);
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- the lock */

static br_ckpt ckpt_in(br_ctx *ctx, const char *dir) {
    br_ckpt c;
    memset(&c, 0, sizeof c); /* as the job makes it */
    c.ctx = ctx;
    snprintf(c.dir, sizeof c.dir, "%s", dir);
    snprintf(c.hash, sizeof c.hash, "0123456789abcdef");
    c.max_steps = 40;
    c.paths = 2;
    return c;
}

/* A second job on a checkpoint directory in use is refused at once, naming the
 * first one's pid; the lock goes with its holder, also one killed with SIGKILL. */
static void ckpt_lock_excludes_a_second_job(void) {
    br_ctx *ctx = t_cpu_ctx();
    const char *dir = fresh_dir();
    char ck[128], lock[160], pid[64];
    snprintf(ck, sizeof ck, "%s/out.partial", dir);
    snprintf(lock, sizeof lock, "%s/bitrank.lock", ck);
    CHECK(mkdir(ck, 0777) == 0, "mkdir");
    br_ckpt a = ckpt_in(ctx, ck), b = ckpt_in(ctx, ck);
    CHECK_OK(ctx, br_ckpt_lock(&a));
    CHECK_OK(ctx, br_ckpt_lock(&a)); /* held: a no-op */
    snprintf(pid, sizeof pid, "(pid %ld)", (long)getpid());
    CHECK_FAILS_MSG(ctx, BR_E_STATE, "another bitrank compress is using this checkpoint directory",
                    br_ckpt_lock(&b));
    CHECK(strstr(br_ctx_error(ctx), pid) && strstr(br_ctx_error(ctx), ck), "message: %s",
          br_ctx_error(ctx));
    br_ckpt_unlock(&a);
    CHECK(!exists(lock), "the lock file stays after unlock");
    CHECK_OK(ctx, br_ckpt_lock(&b));
    br_ckpt_unlock(&b);
    br_ckpt_unlock(&b); /* not held: a no-op */
    CHECK(rmdir(ck) == 0, "the directory cannot be removed after unlock: %s", strerror(errno));

    /* held by a process that is then killed: refused while it lives, taken after */
    CHECK(mkdir(ck, 0777) == 0, "mkdir");
    int ready[2];
    CHECK(pipe(ready) == 0, "pipe");
    pid_t child = fork();
    if (child == 0) {
        br_ckpt c = ckpt_in(NULL, ck);
        char ok = br_ckpt_lock(&c) == BR_OK ? 'y' : 'n';
        if (write(ready[1], &ok, 1) != 1) _exit(1);
        for (;;)
            pause();
    }
    char got = 0;
    CHECK(read(ready[0], &got, 1) == 1 && got == 'y', "the child did not take the lock");
    snprintf(pid, sizeof pid, "(pid %ld)", (long)child);
    CHECK_FAILS_MSG(ctx, BR_E_STATE, pid, br_ckpt_lock(&a));
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    CHECK(exists(lock), "a killed holder cannot remove its lock file");
    CHECK_OK(ctx, br_ckpt_lock(&a));
    br_ckpt_unlock(&a);
    close(ready[0]);
    close(ready[1]);
    remove_dir(dir);
    br_ctx_free(ctx);
}

/* br_ckpt_clear(c, 0) keeps the lock (and its file); br_ckpt_clear(c, 1) removes
 * layers, dead writers' leftovers and the lock file, and then the directory. */
static void ckpt_clear_removes_the_lock(void) {
    br_ctx *ctx = t_cpu_ctx();
    const char *dir = fresh_dir();
    char ck[128], lock[160], stale[200], layer[200];
    snprintf(ck, sizeof ck, "%s/out.partial", dir);
    snprintf(lock, sizeof lock, "%s/bitrank.lock", ck);
    CHECK(mkdir(ck, 0777) == 0, "mkdir");
    br_ckpt a = ckpt_in(ctx, ck), b = ckpt_in(ctx, ck);
    CHECK_OK(ctx, br_ckpt_lock(&a));
    snprintf(layer, sizeof layer, "%s/layer-00000.safetensors", ck);
    write_text(layer, "x");
    snprintf(stale, sizeof stale, "%s/.layer-00001.safetensors.tmp-%ld-AbCdEf", ck,
             (long)dead_pid());
    write_text(stale, "");
    br_ckpt_clear(&a, 0);
    CHECK(!exists(layer) && !exists(stale) && exists(lock), "clear(0): %d %d %d", exists(layer),
          exists(stale), exists(lock));
    CHECK_FAILS(ctx, BR_E_STATE, br_ckpt_lock(&b));
    br_ckpt_clear(&a, 1);
    CHECK(!exists(ck), "clear(1) left the directory");
    br_ckpt_unlock(&a);
    remove_dir(dir);
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- checkpoints */

#define LAYER "blk.0.attn.q.weight"

/* A layer [40][48] of rank 32, two paths, of random signs and f16-exact scales. */
static void make_layer(br_ctx *ctx, br_blr_host *L, br_rng *r) {
    CHECK_OK(ctx, br_blr_host_alloc(ctx, L, 40, 48, 32, 2));
    for (size_t p = 0; p < 2; p++) {
        for (size_t i = 0; i < 40; i++)
            L->path[p].bits_u[i] = (uint32_t)br_rng_u64(r);
        for (size_t j = 0; j < 48; j++)
            L->path[p].bits_v[j] = (uint32_t)br_rng_u64(r);
        for (size_t i = 0; i < 40; i++)
            L->path[p].h[i] = (float)(1 + br_rng_u64(r) % 64) / 64.0f;
        for (size_t k = 0; k < 32; k++)
            L->path[p].l[k] = (float)(1 + br_rng_u64(r) % 64) / 16.0f;
        for (size_t j = 0; j < 48; j++)
            L->path[p].g[j] = (float)(1 + br_rng_u64(r) % 64) / 32.0f;
    }
}

/* A report with every field set to a value of its own. */
static void full_report(br_layer_report *lr) {
    memset(lr, 0, sizeof *lr);
    snprintf(lr->name, sizeof lr->name, LAYER);
    lr->outcome = BR_LAYER_COMPRESSED;
    snprintf(lr->note, sizeof lr->note, "kept the scaled initialization: 3%% better");
    lr->err_init = 0.31234567890123457;
    lr->err_trained = 0.12345678901234568;
    lr->tok_init = (br_token_err){0.21, 0.33, 0.5};
    lr->tok_trained = (br_token_err){0.08, 0.11, 0.2500000000000001};
    lr->weight_err_init = 0.71;
    lr->weight_err = 0.6049382716049383;
    lr->steps = 40;
    lr->stop = BR_STOP_PLATEAU;
    lr->best_step = 36;
    lr->loss_every = 2;
    lr->n_loss = 21;
    lr->loss = t_xmalloc(lr->n_loss * sizeof *lr->loss);
    for (size_t i = 0; i < lr->n_loss; i++)
        lr->loss[i] = 0.5f / (float)(i + 1);
    lr->eval_every = 4;
    lr->n_eval = 11;
    lr->eval = t_xmalloc(lr->n_eval * sizeof *lr->eval);
    for (size_t i = 0; i < lr->n_eval; i++)
        lr->eval[i] = 0.25f / (float)(i + 3);
    lr->seconds = 1.2345678901234567;
    snprintf(lr->init_device, sizeof lr->init_device, "cuda");
    snprintf(lr->init_kind, sizeof lr->init_kind, "whitened");
    snprintf(lr->calibration, sizeof lr->calibration, "synthetic heavy-tailed");
    lr->calib_tokens = 123456789;
}

static void free_report(br_layer_report *lr) {
    free(lr->loss);
    free(lr->eval);
    lr->loss = lr->eval = NULL;
}

static int same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Every report field of `got` is the one of `want`, bit for bit. */
static void check_same_report(const br_layer_report *got, const br_layer_report *want) {
    CHECK(got->outcome == want->outcome && !strcmp(got->note, want->note), "outcome, note '%s'",
          got->note);
    CHECK(same_bits(got->err_init, want->err_init) &&
              same_bits(got->err_trained, want->err_trained) &&
              same_bits(got->weight_err_init, want->weight_err_init) &&
              same_bits(got->weight_err, want->weight_err) &&
              same_bits(got->seconds, want->seconds),
          "errors, seconds: %.17g %.17g %.17g %.17g %.17g", got->err_init, got->err_trained,
          got->weight_err_init, got->weight_err, got->seconds);
    CHECK(same_bits(got->tok_init.p50, want->tok_init.p50) &&
              same_bits(got->tok_init.p90, want->tok_init.p90) &&
              same_bits(got->tok_init.p99, want->tok_init.p99) &&
              same_bits(got->tok_trained.p50, want->tok_trained.p50) &&
              same_bits(got->tok_trained.p90, want->tok_trained.p90) &&
              same_bits(got->tok_trained.p99, want->tok_trained.p99),
          "token quantiles");
    CHECK(got->steps == want->steps && got->stop == want->stop &&
              got->best_step == want->best_step && got->loss_every == want->loss_every &&
              got->eval_every == want->eval_every && got->calib_tokens == want->calib_tokens,
          "steps %d stop %d best %d loss_every %d eval_every %d tokens %zu", got->steps,
          (int)got->stop, got->best_step, got->loss_every, got->eval_every, got->calib_tokens);
    CHECK(!strcmp(got->init_device, want->init_device) &&
              !strcmp(got->init_kind, want->init_kind) &&
              !strcmp(got->calibration, want->calibration),
          "texts '%s' '%s' '%s'", got->init_device, got->init_kind, got->calibration);
    CHECK(got->n_loss == want->n_loss && got->loss &&
              !memcmp(got->loss, want->loss, want->n_loss * sizeof *want->loss),
          "loss curve of %zu points", got->n_loss);
    CHECK(got->n_eval == want->n_eval && got->eval &&
              !memcmp(got->eval, want->eval, want->n_eval * sizeof *want->eval),
          "eval curve of %zu points", got->n_eval);
}

/* The caller's part of a report (the job fills it from its plan before a load). */
static void plan_report(br_layer_report *lr) {
    memset(lr, 0, sizeof *lr);
    snprintf(lr->name, sizeof lr->name, LAYER);
    lr->m = 40;
    lr->n = 48;
    lr->rank = 32;
    lr->paths = 2;
}

/* A saved layer loads back with its whole report, every field as saved. */
static void ckpt_roundtrip_whole_report(void) {
    br_ctx *ctx = t_cpu_ctx();
    const char *dir = fresh_dir();
    br_rng r = t_rng_for(3);
    br_ckpt c = ckpt_in(ctx, dir);
    br_blr_host L = {0}, got = {0};
    make_layer(ctx, &L, &r);
    br_layer_report lr, back;
    full_report(&lr);
    CHECK_OK(ctx, br_ckpt_save(&c, 7, 0x1234, &L, &lr));
    plan_report(&back);
    br_status st = BR_OK;
    int taken = br_ckpt_load(&c, 7, 0x1234, LAYER, 40, 48, 32, &got, &back, &st);
    CHECK(taken == 1, "load: %d %s", taken, br_ctx_error(ctx));
    if (taken == 1) {
        check_same_report(&back, &lr);
        CHECK(back.resumed == 1 && back.m == 40 && back.rank == 32, "the caller's fields");
        CHECK(got.paths == 2 && got.r == 32, "layer shape");
        for (size_t p = 0; p < 2 && got.paths == 2; p++)
            CHECK(!memcmp(got.path[p].bits_u, L.path[p].bits_u, 40 * 4) &&
                      !memcmp(got.path[p].bits_v, L.path[p].bits_v, 48 * 4) &&
                      !memcmp(got.path[p].h, L.path[p].h, 40 * 4) &&
                      !memcmp(got.path[p].l, L.path[p].l, 32 * 4) &&
                      !memcmp(got.path[p].g, L.path[p].g, 48 * 4),
                  "path %zu differs", p);
    }
    /* empty texts (a layer never initialized) come back empty */
    lr.init_device[0] = lr.init_kind[0] = lr.calibration[0] = lr.note[0] = '\0';
    CHECK_OK(ctx, br_ckpt_save(&c, 7, 0x1234, &L, &lr));
    br_blr_host_free(&got);
    free_report(&back);
    plan_report(&back);
    CHECK(br_ckpt_load(&c, 7, 0x1234, LAYER, 40, 48, 32, &got, &back, &st) == 1, "load: %s",
          br_ctx_error(ctx));
    check_same_report(&back, &lr);
    /* a text the loader would refuse is refused when saved */
    snprintf(lr.init_kind, sizeof lr.init_kind, "magic");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "init_kind", br_ckpt_save(&c, 8, 0x1234, &L, &lr));
    br_blr_host_free(&got);
    br_blr_host_free(&L);
    free_report(&back);
    free_report(&lr);
    remove_dir(dir);
    br_ctx_free(ctx);
}

/* A skipped layer is saved without tensors (L NULL) and loads with L zeroed. */
static void ckpt_skipped_layer_without_tensors(void) {
    br_ctx *ctx = t_cpu_ctx();
    const char *dir = fresh_dir();
    br_ckpt c = ckpt_in(ctx, dir);
    br_layer_report lr, back;
    full_report(&lr);
    lr.outcome = BR_LAYER_SKIPPED;
    snprintf(lr.note, sizeof lr.note, "the budget cannot hold [40][48]");
    CHECK_OK(ctx, br_ckpt_save(&c, 0, 99, NULL, &lr));
    plan_report(&back);
    br_blr_host got;
    memset(&got, 0x5a, sizeof got); /* must come back zeroed */
    br_status st = BR_OK;
    CHECK(br_ckpt_load(&c, 0, 99, LAYER, 40, 48, 32, &got, &back, &st) == 1, "load: %s",
          br_ctx_error(ctx));
    CHECK(got.paths == 0 && got.path[0].h == NULL, "L of a skipped layer: %zu paths", got.paths);
    check_same_report(&back, &lr);
    free_report(&back);
    /* a compressed layer must hold its tensors */
    lr.outcome = BR_LAYER_COMPRESSED;
    CHECK_FAILS(ctx, BR_E_ARG, br_ckpt_save(&c, 1, 99, NULL, &lr));
    free_report(&lr);
    remove_dir(dir);
    br_ctx_free(ctx);
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = t_xmalloc((size_t)n);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

static void spill(const char *path, const unsigned char *b, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b, 1, len, f) == len, "cannot write %s", path);
    if (f) fclose(f);
}

/* Any one byte of a checkpoint changed (every one is tried, of the data section
 * and of the header) is refused as damage, naming the file and the way on; so is
 * a changed value of a report field that still parses. */
static void ckpt_flipped_byte_refused(void) {
    br_ctx *ctx = t_cpu_ctx();
    const char *dir = fresh_dir();
    br_rng r = t_rng_for(4);
    br_ckpt c = ckpt_in(ctx, dir);
    br_blr_host L = {0};
    make_layer(ctx, &L, &r);
    br_layer_report lr;
    full_report(&lr);
    CHECK_OK(ctx, br_ckpt_save(&c, 2, 5, &L, &lr));
    char path[4400];
    br_ckpt_path(&c, 2, path, sizeof path);
    size_t len = 0;
    unsigned char *good = slurp(path, &len);
    CHECK(good && len > 8, "cannot read %s", path);
    size_t data_start = len;
    if (good) {
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--)
            hlen = hlen << 8 | good[i];
        data_start = 8 + (size_t)hlen;
    }
    CHECK(data_start + 1000 < len, "a data section of %zu bytes", len - data_start);
    size_t accepted = 0, unnamed = 0;
    for (size_t at = 0; at < len; at++) {
        good[at] ^= 0x10;
        spill(path, good, len);
        good[at] ^= 0x10;
        br_layer_report back;
        plan_report(&back);
        br_blr_host got = {0};
        br_status st = BR_OK;
        br_ctx_clear_error(ctx);
        int taken = br_ckpt_load(&c, 2, 5, LAYER, 40, 48, 32, &got, &back, &st);
        if (taken >= 0) {
            accepted++;
            br_blr_host_free(&got);
            free_report(&back);
        } else if (st != BR_E_FORMAT || !strstr(br_ctx_error(ctx), "layer-00002.safetensors") ||
                   !strstr(br_ctx_error(ctx), "remove the file to recompute the layer")) {
            if (!unnamed++) fprintf(stderr, "byte %zu: %s\n", at, br_ctx_error(ctx));
        }
    }
    CHECK(accepted == 0, "%zu of %zu changed bytes were taken", accepted, len);
    CHECK(unnamed == 0, "%zu refusals not as damage", unnamed);
    /* a value of the report that still parses, changed in place (same length) */
    unsigned char *at = good ? (unsigned char *)strstr((char *)good + 8, "best_step=36") : NULL;
    CHECK(at != NULL, "best_step not found in the header");
    if (at) {
        at[strlen("best_step=3")] = '1';
        spill(path, good, len);
        br_layer_report back;
        plan_report(&back);
        br_blr_host got = {0};
        br_status st = BR_OK;
        CHECK(br_ckpt_load(&c, 2, 5, LAYER, 40, 48, 32, &got, &back, &st) < 0 &&
                  st == BR_E_FORMAT && strstr(br_ctx_error(ctx), "checksum"),
              "a changed best_step: %s", br_ctx_error(ctx));
    }
    free(good);
    br_blr_host_free(&L);
    free_report(&lr);
    remove_dir(dir);
    br_ctx_free(ctx);
}

/* Report values out of range (saved as they are: the checksum matches) are
 * refused when loaded, naming the field. */
static void ckpt_report_ranges(void) {
    br_ctx *ctx = t_cpu_ctx();
    const char *dir = fresh_dir();
    br_rng r = t_rng_for(5);
    br_ckpt c = ckpt_in(ctx, dir);
    br_blr_host L = {0};
    make_layer(ctx, &L, &r);
    struct {
        const char *what, *expect;
        int field;
    } cases[] = {
        {"negative error", "err_init", 0},
        {"infinite weight error", "weight_err_init", 1},
        {"quantiles out of order", "tok_trained", 2},
        {"best step past the steps", "best_step", 3},
        {"more held-out points than evaluations", "bitrank.ckpt.eval", 4},
        {"more steps than the options'", "steps = 40", 5},
        {"a negative held-out point", "bitrank.ckpt.eval", 6},
        {"a NaN per-token error", "tok_init", 7},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        br_layer_report lr;
        full_report(&lr);
        br_ckpt loader = c;
        switch (cases[k].field) {
        case 0: lr.err_init = -0.5; break;
        case 1: lr.weight_err_init = INFINITY; break;
        case 2: lr.tok_trained.p90 = 0.3; break;
        case 3: lr.best_step = 41; break;
        case 4: lr.eval_every = 20; break; /* 11 points of 40 steps every 20 */
        case 5: loader.max_steps = 30; break;
        case 6: lr.eval[3] = -1; break;
        case 7: lr.tok_init.p50 = NAN; break;
        }
        CHECK_OK(ctx, br_ckpt_save(&c, 0, 1, &L, &lr));
        br_layer_report back;
        plan_report(&back);
        br_blr_host got = {0};
        br_status st = BR_OK;
        int taken = br_ckpt_load(&loader, 0, 1, LAYER, 40, 48, 32, &got, &back, &st);
        CHECK(taken < 0 && st == BR_E_FORMAT && strstr(br_ctx_error(ctx), cases[k].expect) &&
                  strstr(br_ctx_error(ctx), "remove the file"),
              "%s: %d, %s", cases[k].what, taken, br_ctx_error(ctx));
        CHECK(back.loss == NULL && back.eval == NULL && got.paths == 0, "%s: left allocated",
              cases[k].what);
        if (taken > 0) {
            br_blr_host_free(&got);
            free_report(&back);
        }
        free_report(&lr);
    }
    br_blr_host_free(&L);
    remove_dir(dir);
    br_ctx_free(ctx);
}

/* ---------------------------------------------------------------- the writer's files */

/* A writer removes the temporary files dead writers of the same output left
 * beside it, never a live writer's (by pid, or by its lock), nor another output's
 * or a name not of that form; its own temporary file carries its pid. */
static void stale_temporaries_removed(void) {
    br_ctx *ctx = t_cpu_ctx();
    const char *dir = fresh_dir();
    char out[128], dead[200], live[200], locked[200], other[200], old[200], short5[200];
    long gone = (long)dead_pid();
    snprintf(out, sizeof out, "%s/out.safetensors", dir);
    snprintf(dead, sizeof dead, "%s/.out.safetensors.tmp-%ld-AbC123", dir, gone);
    snprintf(live, sizeof live, "%s/.out.safetensors.tmp-%ld-XyZ789", dir, (long)getppid());
    snprintf(locked, sizeof locked, "%s/.out.safetensors.tmp-%ld-LoCkEd", dir, gone);
    snprintf(other, sizeof other, "%s/.other.safetensors.tmp-%ld-AbC123", dir, gone);
    snprintf(old, sizeof old, "%s/.out.safetensors.tmp-AbC123", dir);
    snprintf(short5, sizeof short5, "%s/.out.safetensors.tmp-%ld-AbC12", dir, gone);
    const char *files[] = {dead, live, locked, other, old, short5};
    for (size_t i = 0; i < 6; i++)
        write_text(files[i], "");
    int held = open(locked, O_RDONLY); /* a writer of another pid namespace */
    CHECK(held >= 0 && flock(held, LOCK_EX | LOCK_NB) == 0, "cannot lock %s", locked);
    br_st_writer *w = NULL;
    CHECK_OK(ctx, br_st_writer_new(ctx, out, &w));
    CHECK(!exists(dead), "a dead writer's file stays");
    CHECK(exists(live) && exists(locked) && exists(other) && exists(old) && exists(short5),
          "removed: live %d locked %d other %d old %d short %d", !exists(live), !exists(locked),
          !exists(other), !exists(old), !exists(short5));
    char mine[200];
    snprintf(mine, sizeof mine, "ls -A %s | grep -c '^\\.out\\.safetensors\\.tmp-%ld-'", dir,
             (long)getpid());
    FILE *ls = popen(mine, "r");
    int count = -1;
    if (ls) {
        if (fscanf(ls, "%d", &count) != 1) count = -1;
        pclose(ls);
    }
    CHECK(count == 1, "%d temporary files of this process", count);
    br_st_writer_free(w);
    close(held);
    remove_dir(dir);
    br_ctx_free(ctx);
}

/* A file truncated after it was opened: reading a tensor, copying one through a
 * writer and reading a BLR layer fail naming the file and its sizes, with no
 * SIGBUS (the bytes past the new end are no longer mapped). */
static void truncated_file_read_is_an_error(void) {
    br_ctx *ctx = t_cpu_ctx();
    const char *dir = fresh_dir();
    br_rng r = t_rng_for(6);
    char in[128], out[128];
    snprintf(in, sizeof in, "%s/in.safetensors", dir);
    snprintf(out, sizeof out, "%s/out.safetensors", dir);
    size_t rows = 256, cols = 256;
    float *x = t_rand(&r, rows * cols, 1.0f);
    uint16_t *h = t_xmalloc(rows * cols * sizeof *h);
    for (size_t i = 0; i < rows * cols; i++)
        h[i] = 0x3c00; /* 1.0 */
    br_blr_host L = {0};
    make_layer(ctx, &L, &r);
    uint64_t shape[2] = {rows, cols};
    br_st_writer *w = NULL;
    CHECK_OK(ctx, br_st_writer_new(ctx, in, &w));
    CHECK_OK(ctx, br_st_writer_add(w, "a.weight", BR_ST_F32, 2, shape, x));
    CHECK_OK(ctx, br_st_writer_add(w, "b.weight", BR_ST_F16, 2, shape, h));
    CHECK_OK(ctx, br_st_writer_add_blr(w, LAYER, &L));
    CHECK_OK(ctx, br_st_writer_finish(w));
    br_st_writer_free(w);
    br_st_file *f = NULL;
    CHECK_OK(ctx, br_st_open(ctx, in, &f));
    if (f) {
        const br_st_tensor *a = br_st_find(f, "a.weight"), *b = br_st_find(f, "b.weight");
        float *dst = t_xmalloc(rows * cols * sizeof *dst);
        CHECK_OK(ctx, br_st_read_f32(ctx, f, b, 0, rows * cols, dst));
        CHECK(dst[rows * cols - 1] == 1.0f, "F16 read before the truncation");
        CHECK(truncate(in, 4096) == 0, "truncate: %s", strerror(errno));
        CHECK_FAILS_MSG(ctx, BR_E_IO, "shrank", br_st_read_f32(ctx, f, a, 0, rows * cols, dst));
        CHECK(strstr(br_ctx_error(ctx), "in.safetensors") && strstr(br_ctx_error(ctx), "4096"),
              "message: %s", br_ctx_error(ctx));
        CHECK_FAILS_MSG(ctx, BR_E_IO, "shrank", br_st_read_f32(ctx, f, b, rows * cols - 8, 8, dst));
        br_blr_host got = {0};
        CHECK_FAILS_MSG(ctx, BR_E_IO, "shrank", br_st_read_blr(ctx, f, LAYER, &got));
        br_blr_host_free(&got);
        /* a tensor of the file passed through a writer */
        CHECK_OK(ctx, br_st_writer_new(ctx, out, &w));
        CHECK_OK(ctx, br_st_writer_add(w, a->name, a->dtype, a->ndim, a->shape, a->data));
        CHECK_FAILS_MSG(ctx, BR_E_IO, "shrank", br_st_writer_finish(w));
        CHECK(strstr(br_ctx_error(ctx), "in.safetensors"), "message: %s", br_ctx_error(ctx));
        br_st_writer_free(w);
        CHECK(!exists(out), "an output was written");
        free(dst);
        br_st_close(f);
    }
    /* intact, the copy through a writer is the file's bytes */
    CHECK_OK(ctx, br_st_writer_new(ctx, in, &w));
    CHECK_OK(ctx, br_st_writer_add(w, "a.weight", BR_ST_F32, 2, shape, x));
    CHECK_OK(ctx, br_st_writer_finish(w));
    br_st_writer_free(w);
    CHECK_OK(ctx, br_st_open(ctx, in, &f));
    if (f) {
        const br_st_tensor *a = br_st_find(f, "a.weight");
        CHECK_OK(ctx, br_st_writer_new(ctx, out, &w));
        CHECK_OK(ctx, br_st_writer_add(w, a->name, a->dtype, a->ndim, a->shape, a->data));
        CHECK_OK(ctx, br_st_writer_finish(w));
        br_st_writer_free(w);
        br_st_close(f);
        size_t la = 0, lb = 0;
        unsigned char *ba = slurp(in, &la), *bb = slurp(out, &lb);
        CHECK(ba && bb && la == lb && !memcmp(ba, bb, la), "the copy differs");
        free(ba);
        free(bb);
    }
    br_blr_host_free(&L);
    free(x);
    free(h);
    remove_dir(dir);
    br_ctx_free(ctx);
}

T_RUN("job_files", T_CASE(same_file_by_identity), T_CASE(check_paths_refuses_inputs),
      T_CASE(ckpt_lock_excludes_a_second_job), T_CASE(ckpt_clear_removes_the_lock),
      T_CASE(ckpt_roundtrip_whole_report), T_CASE(ckpt_skipped_layer_without_tensors),
      T_CASE(ckpt_flipped_byte_refused), T_CASE(ckpt_report_ranges),
      T_CASE(stale_temporaries_removed), T_CASE(truncated_file_read_is_an_error))
