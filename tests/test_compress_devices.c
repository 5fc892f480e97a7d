/* One compression job over several contexts (br_compress_file_on): the same
 * output as on one, a device's failure returned as the job's status naming the
 * layer and the device (the other devices stopped), a cancel, a resume, and the
 * refused lists of devices. The devices are contexts on the device under test
 * (two CPU contexts in the CPU run: the several-device path without a GPU). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static char *read_whole(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    *len = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = t_xmalloc((size_t)n + 1);
    *len = fread(buf, 1, (size_t)n, f);
    fclose(f);
    return buf;
}

/* Whether files a and b hold the same bytes (both readable). */
static int same_bytes(const char *a, const char *b) {
    size_t la = 0, lb = 0;
    char *x = read_whole(a, &la), *y = read_whole(b, &lb);
    int same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
}

static void remove_tree(const char *dir) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup of %s", dir);
}

/* A checkpoint of n ≤ 8 linears "blk.I.mlp.weight" of the given shapes [m][n]
 * (values uniform in ±0.05; zero for layer `zero`: nothing to train, the layer
 * is done at once), between a bias and a norm copied unchanged. */
static void write_model(br_ctx *ctx, const char *path, br_rng *rng, const size_t (*shapes)[2],
                        size_t n, size_t zero) {
    br_st_writer *w = NULL;
    CHECK_OK(ctx, br_st_writer_new(ctx, path, &w));
    static float bias[64];
    for (size_t i = 0; i < 64; i++)
        bias[i] = br_rng_sym(rng);
    uint64_t s1[1] = {64};
    CHECK_OK(ctx, br_st_writer_add(w, "blk.0.bias", BR_ST_F32, 1, s1, bias));
    float *v[8]; /* the writer reads them at finish */
    for (size_t i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%zu.mlp.weight", i);
        v[i] = t_rand(rng, shapes[i][0] * shapes[i][1], 0.05f);
        if (i == zero) memset(v[i], 0, shapes[i][0] * shapes[i][1] * sizeof *v[i]);
        uint64_t shape[2] = {shapes[i][0], shapes[i][1]};
        CHECK_OK(ctx, br_st_writer_add(w, name, BR_ST_F32, 2, shape, v[i]));
    }
    CHECK_OK(ctx, br_st_writer_add(w, "norm.weight", BR_ST_F32, 1, s1, bias));
    CHECK_OK(ctx, br_st_writer_finish(w));
    br_st_writer_free(w);
    for (size_t i = 0; i < n; i++)
        free(v[i]);
}

static void small_opts(br_compress_opts *o, br_rng *rng) {
    br_compress_opts_default(o);
    o->rank = 16;
    o->steps = 12;
    o->tokens = 64;
    o->eval_tokens = 64;
    o->eval_every = 4;
    o->seed = br_rng_u64(rng);
}

/* n contexts on the device under test. */
static void open_devices(br_ctx **dev, size_t n) {
    for (size_t k = 0; k < n; k++)
        dev[k] = t_ctx();
}

static void close_devices(br_ctx **dev, size_t n) {
    for (size_t k = 0; k < n; k++)
        br_ctx_free(dev[k]);
}

/* What the progress callback saw: the library makes one call at a time, so
 * `inside` is never above one; `done[l]` counts layer l's DONE, `steps[l]` its
 * last step; cancel when layer `stop_after` is done. */
typedef struct watcher {
    atomic_int inside;
    int overlapped;
    int done[8], resumed[8], steps[8];
    size_t stop_after;
} watcher;

static int watch_cb(const br_compress_progress *p, void *user) {
    watcher *w = user;
    if (atomic_fetch_add(&w->inside, 1) != 0) w->overlapped = 1;
    if (p->layer < 8) {
        if (p->phase == BR_PHASE_DONE) w->done[p->layer]++;
        if (p->phase == BR_PHASE_RESUMED) w->resumed[p->layer]++;
        if (p->phase == BR_PHASE_TRAIN) w->steps[p->layer] = p->step;
    }
    /* widen the window in which an overlap would be seen */
    nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 100000}, NULL);
    int stop = p->phase == BR_PHASE_DONE && p->layer == w->stop_after;
    atomic_fetch_sub(&w->inside, 1);
    return stop;
}

/* Two and three devices write the same bytes as one context; the report is the
 * one context's, its device listing the devices; the callback is never entered
 * twice at once and sees every layer done once. */
static void devices_same_bytes(void) {
    br_ctx *ctx = t_ctx(), *dev[3];
    open_devices(dev, 3);
    char dir[] = "/tmp/bitrank-devices-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char in[128], out1[128], out2[128], out3[128];
    snprintf(in, sizeof in, "%s/in.safetensors", dir);
    snprintf(out1, sizeof out1, "%s/one.safetensors", dir);
    snprintf(out2, sizeof out2, "%s/two.safetensors", dir);
    snprintf(out3, sizeof out3, "%s/three.safetensors", dir);
    static const size_t shapes[6][2] = {{96, 70}, {64, 100}, {120, 40},
                                        {48, 48}, {80, 64},  {33, 65}};
    br_rng rng = t_rng_for(31);
    write_model(ctx, in, &rng, shapes, 6, SIZE_MAX);
    br_compress_opts o;
    small_opts(&o, &rng);
    br_compress_report *r1 = NULL, *r2 = NULL;
    CHECK_OK(ctx, br_compress_file(ctx, in, out1, &o, NULL, 0, NULL, NULL, &r1));
    watcher w = {.stop_after = 99};
    CHECK_OK(ctx, br_compress_file_on(ctx, dev, 2, in, out2, &o, NULL, 0, watch_cb, &w, &r2));
    CHECK(same_bytes(out1, out2), "two devices wrote other bytes than one");
    CHECK(!w.overlapped, "the progress callback was entered twice at once");
    for (size_t l = 0; l < 6; l++)
        CHECK(w.done[l] == 1 && w.steps[l] == o.steps, "layer %zu: %d DONE, last step %d", l,
              w.done[l], w.steps[l]);
    CHECK(r1 && r2 && r2->n_layers == 6 && r2->n_passthrough == 2 &&
              r2->bytes_after == r1->bytes_after && r2->params_compressed == r1->params_compressed,
          "the reports differ");
    for (size_t l = 0; r1 && r2 && l < r2->n_layers; l++)
        CHECK(!strcmp(r1->layers[l].name, r2->layers[l].name) &&
                  !memcmp(&r1->layers[l].err_trained, &r2->layers[l].err_trained, sizeof(double)),
              "layer %zu: %s %.9g vs %s %.9g", l, r1->layers[l].name, r1->layers[l].err_trained,
              r2->layers[l].name, r2->layers[l].err_trained);
    if (r2 && !strcmp(br_ctx_backend(dev[0]), "cpu"))
        CHECK(!strcmp(r2->device, "cpu, cpu"), "report device '%s'", r2->device);
    br_compress_report_free(r1);
    br_compress_report_free(r2);
    CHECK_OK(ctx, br_compress_file_on(ctx, dev, 3, in, out3, &o, NULL, 0, NULL, NULL, NULL));
    CHECK(same_bytes(out1, out3), "three devices wrote other bytes than one");
    /* one device that is the job's own context: br_compress_file */
    CHECK_OK(ctx, br_compress_file_on(ctx, &ctx, 1, in, out3, &o, NULL, 0, NULL, NULL, NULL));
    CHECK(same_bytes(out1, out3), "the job's context as its one device wrote other bytes");
    char partial[160];
    snprintf(partial, sizeof partial, "%s.partial", out2);
    CHECK(!file_exists(partial), "the checkpoint directory of a finished run is left");
    remove_tree(dir);
    close_devices(dev, 3);
    br_ctx_free(ctx);
}

/* Cancelled by the progress callback on a device: "cancelled" (not a device's
 * failure), no output, the finished layers checkpointed; resumed on two
 * devices: the same bytes as one context in one go. */
static void devices_cancel_and_resume(void) {
    br_ctx *ctx = t_ctx(), *dev[2];
    open_devices(dev, 2);
    char dir[] = "/tmp/bitrank-devices-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char in[128], out1[128], out2[128], ck1[200];
    snprintf(in, sizeof in, "%s/in.safetensors", dir);
    snprintf(out1, sizeof out1, "%s/one.safetensors", dir);
    snprintf(out2, sizeof out2, "%s/two.safetensors", dir);
    snprintf(ck1, sizeof ck1, "%s.partial/layer-00001.safetensors", out2);
    static const size_t shapes[5][2] = {{64, 48}, {72, 40}, {40, 72}, {56, 56}, {48, 80}};
    br_rng rng = t_rng_for(32);
    write_model(ctx, in, &rng, shapes, 5, SIZE_MAX);
    br_compress_opts o;
    small_opts(&o, &rng);
    CHECK_OK(ctx, br_compress_file(ctx, in, out1, &o, NULL, 0, NULL, NULL, NULL));
    watcher w = {.stop_after = 1};
    br_compress_report *rep = NULL;
    CHECK_FAILS(ctx, BR_E_STATE,
                br_compress_file_on(ctx, dev, 2, in, out2, &o, NULL, 0, watch_cb, &w, &rep));
    CHECK(!strcmp(br_ctx_error(ctx), "cancelled"), "message: %s", br_ctx_error(ctx));
    CHECK(!w.overlapped, "the progress callback was entered twice at once");
    CHECK(!file_exists(out2), "a cancelled run left an output");
    CHECK(file_exists(ck1), "layer 1 (done when cancelled) not checkpointed");
    CHECK(rep && rep->n_layers >= 2, "report of %zu layers", rep ? rep->n_layers : 0);
    br_compress_report_free(rep);
    w = (watcher){.stop_after = 99};
    CHECK_OK(ctx, br_compress_file_on(ctx, dev, 2, in, out2, &o, NULL, 1, watch_cb, &w, NULL));
    CHECK(w.resumed[1] == 1 && w.done[1] == 0, "layer 1: resumed %d, done %d", w.resumed[1],
          w.done[1]);
    CHECK(same_bytes(out1, out2), "the resumed run on two devices wrote other bytes");
    remove_tree(dir);
    close_devices(dev, 2);
    br_ctx_free(ctx);
}

/* A layer whose checkpoint cannot be written (a directory stands at its file's
 * path, as a hostile or damaged checkpoint directory may hold): the job fails
 * with that device's status and a message naming the layer, the file and the
 * device; the layer running on the other device stops at its next step instead
 * of finishing; nothing is written. Layer 0 takes seconds of steps; layer 1, the
 * failing one, is zero (nothing to train): it fails as soon as it begins. */
static void devices_failure_stops_the_others(void) {
    br_ctx *ctx = t_ctx(), *dev[2];
    open_devices(dev, 2);
    char dir[] = "/tmp/bitrank-devices-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char in[128], out[128], blocker[220];
    snprintf(in, sizeof in, "%s/in.safetensors", dir);
    snprintf(out, sizeof out, "%s/out.safetensors", dir);
    static const size_t shapes[4][2] = {{512, 512}, {24, 40}, {24, 40}, {24, 40}};
    br_rng rng = t_rng_for(33);
    write_model(ctx, in, &rng, shapes, 4, 1);
    br_compress_opts o;
    small_opts(&o, &rng);
    o.steps = 400;
    o.eval_every = 50;
    o.patience = 0; /* no early stop: layer 0 would run every step */
    snprintf(blocker, sizeof blocker, "%s.partial", out);
    CHECK(mkdir(blocker, 0777) == 0, "mkdir %s", blocker);
    snprintf(blocker, sizeof blocker, "%s.partial/layer-00001.safetensors", out);
    CHECK(mkdir(blocker, 0777) == 0, "mkdir %s", blocker);
    watcher w = {.stop_after = 99};
    br_compress_report *rep = NULL;
    CHECK_FAILS(ctx, BR_E_IO,
                br_compress_file_on(ctx, dev, 2, in, out, &o, NULL, 0, watch_cb, &w, &rep));
    const char *msg = br_ctx_error(ctx);
    CHECK(strstr(msg, "layer-00001.safetensors") && strstr(msg, "blk.1.mlp.weight") &&
              (strstr(msg, "device 0 (") || strstr(msg, "device 1 (")),
          "message: %s", msg);
    CHECK(w.done[1] == 0, "the failed layer reported done");
    CHECK(w.done[0] == 0 && w.steps[0] < o.steps,
          "layer 0 ran on to step %d of %d (done %d) after the other device failed", w.steps[0],
          o.steps, w.done[0]);
    CHECK(!file_exists(out), "a failed run left an output");
    /* the report holds the layers the devices took (at least 0 and 1) */
    CHECK(rep && rep->n_layers >= 2 && !strcmp(rep->layers[1].name, "blk.1.mlp.weight"),
          "report of %zu layers", rep ? rep->n_layers : 0);
    br_compress_report_free(rep);
    remove_tree(dir);
    close_devices(dev, 2);
    br_ctx_free(ctx);
}

/* Lists of devices that are refused before anything is opened or created. */
static void devices_refused(void) {
    br_ctx *ctx = t_ctx(), *dev[2];
    open_devices(dev, 2);
    char dir[] = "/tmp/bitrank-devices-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char in[128], out[128], partial[160];
    snprintf(in, sizeof in, "%s/in.safetensors", dir);
    snprintf(out, sizeof out, "%s/out.safetensors", dir);
    snprintf(partial, sizeof partial, "%s.partial", out);
    static const size_t shapes[2][2] = {{32, 40}, {40, 32}};
    br_rng rng = t_rng_for(34);
    write_model(ctx, in, &rng, shapes, 2, SIZE_MAX);
    br_compress_opts o;
    small_opts(&o, &rng);
    br_ctx *with_null[2] = {dev[0], NULL};
    br_ctx *twice[3] = {dev[0], dev[1], dev[0]};
    br_ctx *with_job[2] = {dev[0], ctx};
    br_ctx *many[BR_COMPRESS_MAX_DEVICES + 1];
    for (size_t k = 0; k < BR_COMPRESS_MAX_DEVICES + 1; k++)
        many[k] = dev[k % 2];
    br_compress_report *rep = (br_compress_report *)&rep; /* set to NULL when refused */
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "devices is NULL",
                    br_compress_file_on(ctx, NULL, 2, in, out, &o, NULL, 0, NULL, NULL, &rep));
    CHECK(rep == NULL, "*report not cleared");
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "devices[1] is NULL",
                    br_compress_file_on(ctx, with_null, 2, in, out, &o, NULL, 0, NULL, NULL, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "devices[0] and devices[2] are the same context",
                    br_compress_file_on(ctx, twice, 3, in, out, &o, NULL, 0, NULL, NULL, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "devices[1] is the job's context",
                    br_compress_file_on(ctx, with_job, 2, in, out, &o, NULL, 0, NULL, NULL, NULL));
    CHECK_FAILS_MSG(ctx, BR_E_ARG, "at most",
                    br_compress_file_on(ctx, many, BR_COMPRESS_MAX_DEVICES + 1, in, out, &o, NULL,
                                        0, NULL, NULL, NULL));
    /* the CPU beside a GPU (in the GPU run): their bits differ */
    if (strcmp(br_ctx_backend(dev[0]), "cpu") != 0) {
        br_ctx *cpu = t_cpu_ctx();
        br_ctx *mixed[2] = {dev[0], cpu};
        CHECK_FAILS_MSG(ctx, BR_E_ARG, "of one kind",
                        br_compress_file_on(ctx, mixed, 2, in, out, &o, NULL, 0, NULL, NULL, NULL));
        br_ctx_free(cpu);
    }
    CHECK(!file_exists(out) && !file_exists(partial), "a refused job created files");
    /* the devices were left alone: their own errors untouched, still usable */
    CHECK(br_ctx_error(dev[0])[0] == '\0' && br_ctx_error(dev[1])[0] == '\0',
          "a device context got the job's error");
    CHECK_OK(ctx, br_compress_file_on(ctx, dev, 2, in, out, &o, NULL, 0, NULL, NULL, NULL));
    remove_tree(dir);
    close_devices(dev, 2);
    br_ctx_free(ctx);
}

T_RUN("compress_devices", T_CASE(devices_same_bytes), T_CASE(devices_cancel_and_resume),
      T_CASE(devices_failure_stops_the_others), T_CASE(devices_refused))
