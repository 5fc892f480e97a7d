/* Memory-bound ops benchmark: the staging, elementwise, column-reduction and
 * optimizer ops at the sizes of a layer training step (4096–8192 tokens × 3584
 * features), timed as recorded graphs, against the bytes each op must move.
 *
 *   bench_ops [--device cuda|cpu] [--runs N] [--quick]
 *
 * Each measurement records REPS calls of one op into a graph (on CUDA a CUDA graph:
 * no launch overhead between them), replays it after a warm-up, and takes the
 * median over N (default 20) replays of the wall time from launch to sync,
 * divided by REPS. gbps = the op's compulsory bytes (below) / time; the H200's
 * device copy reaches ≈ 4.2 TB/s, the target for these kernels is > 2.5 TB/s.
 * Operands are ≥ 58 MB each, so most of every op's traffic misses the 50 MB L2.
 * One JSON line per measurement on stdout.
 *
 * Compulsory bytes per element (f32 = 4, f16 = 2):
 *   fill 4 · copy 8 · cvt 4+2 (col [k] is noise) · cvt_multi(2) 4+2+2 · cvt_t 4+2
 *   expand (plane and plane_t) 2+2 per sign (+ 1/8 for the bits)
 *   colsum AB 4+4 · colsum_fused CVT_A + dst_t 4+4+2+2 · SCALE_B accumulate + dst_t
 *   4+4+4+4+2 · scale_acc accumulate 4+4+4 · scale_acc2 4+4+4 · add 4+4+4
 *   f16_to_f32 2+4 · split_qg 8+8 per q element · adam 4·4 read + 3·4 written
 *   sumsq 4
 *   cvt_both (dst and dst_t) 4+2+2
 *   sign_step, the 4 calls of a layer step (rows × r = 3584×384 and 1024×384, two
 *   paths each): latent full moment 4 (grad) + 3·(4+4) (m1, v, latent) + 1/4
 *   (bits) = 28.25 per latent; factored 20.25; exact with a binding budget (every
 *   selection pass, ties on purpose) 4.25 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bitrank_ops.h"
#include "ops/layer_ops.h"
#include "ops/sign_ops.h"
#include "bench_clock.h"

#define REPS 10

static br_ctx *g_ctx;
static int g_runs = 20;

static void fail(const char *what) {
    fprintf(stderr, "bench_ops: %s: %s\n", what, br_ctx_error(g_ctx));
    exit(1);
}
#define OK(call)                                                                                   \
    do {                                                                                           \
        if ((call) != BR_OK) fail(#call);                                                          \
    } while (0)

static br_buf *new_buf(br_dtype dt, size_t n, uint32_t bits) {
    br_buf *b = NULL;
    OK(br_buf_new(g_ctx, dt, n, &b));
    OK(br_buf_fill(b, 0, n, bits));
    return b;
}

typedef void (*op_fn)(void *arg);

/* Median ms of one call of fn, from graph replays of REPS calls. */
static double time_op(op_fn fn, void *arg) {
    br_graph *g = NULL;
    OK(br_graph_begin(g_ctx));
    for (int i = 0; i < REPS; i++)
        fn(arg);
    OK(br_graph_end(g_ctx, &g));
    for (int i = 0; i < 3; i++)
        OK(br_graph_launch(g));
    OK(br_ctx_sync(g_ctx));
    double *t = malloc(g_runs * sizeof *t);
    for (int i = 0; i < g_runs; i++) {
        double t0 = bench_now_ms();
        OK(br_graph_launch(g));
        OK(br_ctx_sync(g_ctx));
        t[i] = (bench_now_ms() - t0) / REPS;
    }
    qsort(t, g_runs, sizeof *t, bench_cmp_double);
    double med = t[g_runs / 2];
    free(t);
    br_graph_free(g);
    return med;
}

static void report(const char *variant, size_t m, size_t k, double bytes, double ms) {
    printf("{\"bench\":\"ops\",\"device\":\"%s\",\"variant\":\"%s\",\"m\":%zu,\"k\":%zu,"
           "\"ms\":%.5f,\"gbps\":%.1f}\n",
           br_ctx_device(g_ctx), variant, m, k, ms, bytes / (ms * 1e-3) / 1e9);
    fflush(stdout);
}

/* ---------------------------------------------------------------- the ops */

typedef struct bufs {
    size_t m, k;
    br_buf *a, *b, *c, *d, *col, *col2, *h16, *h16b, *t16, *bits, *plane, *plane_t, *sum;
    br_buf *mask, *sched, *parts;
    br_fuse fuse;
} bufs;

static void op_fill(void *p) {
    bufs *x = p;
    OK(br_buf_fill(x->a, 0, x->m * x->k, 0));
}
static void op_copy(void *p) {
    bufs *x = p;
    OK(br_buf_copy(x->c, 0, x->a, 0, x->m * x->k));
}
static void op_cvt(void *p) {
    bufs *x = p;
    OK(br_cvt(g_ctx, x->a, x->col, x->h16, x->m, x->k, 0.5f));
}
static void op_cvt_multi(void *p) {
    bufs *x = p;
    const br_buf *cols[2] = {x->col, x->col2};
    br_buf *dsts[2] = {x->h16, x->h16b};
    OK(br_cvt_multi(g_ctx, x->a, 2, cols, dsts, x->m, x->k, 0.5f));
}
static void op_cvt_t(void *p) {
    bufs *x = p;
    OK(br_cvt_t(g_ctx, x->a, x->col, x->t16, x->m, x->k, 0.5f));
}
static void op_expand(void *p) {
    bufs *x = p;
    OK(br_expand(g_ctx, x->bits, x->k, 384, x->plane, x->plane_t));
}
static void op_colsum(void *p) {
    bufs *x = p;
    OK(br_colsum(g_ctx, x->a, x->b, NULL, BR_TERM_AB, x->sum, x->m, x->k, 1));
}
static void op_colsum_fused(void *p) {
    bufs *x = p;
    OK(br_colsum_fused(g_ctx, x->a, x->b, x->sum, x->m, x->k, &x->fuse));
}
static void op_scale_acc(void *p) {
    bufs *x = p;
    OK(br_scale_acc(g_ctx, x->a, x->col, x->c, x->m, x->k, 1));
}
static void op_scale_acc2(void *p) {
    bufs *x = p;
    OK(br_scale_acc2(g_ctx, x->a, x->col, x->b, x->col2, x->c, x->m, x->k));
}
static void op_add(void *p) {
    bufs *x = p;
    OK(br_add(g_ctx, x->a, x->b, x->c, x->m * x->k));
}
static void op_f16_to_f32(void *p) {
    bufs *x = p;
    OK(br_f16_to_f32(g_ctx, x->h16, x->c, x->m * x->k));
}
static void op_split_qg(void *p) { /* qg = a [m][k/256 heads][2·128] → q = b, gate = d */
    bufs *x = p;
    OK(br_split_qg(g_ctx, x->a, x->b, x->d, x->m, x->k / 256, 128, 0));
}
static void op_adam(void *p) {
    bufs *x = p;
    br_adam_hp hp = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .sched = x->sched};
    size_t n = x->m * x->k / 4;
    OK(br_adam(g_ctx, x->a, x->b, x->c, x->d, NULL, n, &hp));
}
static void op_sumsq(void *p) {
    bufs *x = p;
    OK(br_sumsq(g_ctx, x->a, x->m * x->k, x->parts));
}
static void op_cvt_both(void *p) {
    bufs *x = p;
    OK(br_cvt_both(g_ctx, x->a, x->col, x->h16, x->t16, x->m, x->k, x->k, 0.5f));
}

/* The sign matrices of one layer step: S_U (3584 × 384) and S_V (1024 × 384) of
 * two paths. */
#define SIGN_MATS 4
typedef struct sign_bufs {
    size_t rows[SIGN_MATS], r;
    br_buf *grad[SIGN_MATS], *bits[SIGN_MATS], *lat[SIGN_MATS], *m1[SIGN_MATS], *v[SIGN_MATS];
    br_buf *rowf[SIGN_MATS], *colf, *sched, *flips;
    int exact, factored;
} sign_bufs;

static void op_sign_step(void *p) {
    sign_bufs *x = p;
    for (size_t i = 0; i < SIGN_MATS; i++) {
        size_t n = x->rows[i] * x->r;
        br_sign_step_args a = {.exact = x->exact,
                               .factored = x->factored,
                               .grad = x->grad[i],
                               .bits = x->bits[i],
                               .latent = x->lat[i],
                               .m1 = x->m1[i],
                               .v = x->v[i],
                               .sched = x->sched,
                               .flips = x->flips,
                               .slot = i,
                               .rows = x->rows[i],
                               .r = x->r,
                               .budget = x->exact ? n / 1000 : n,
                               .beta1 = 0.9f,
                               .beta2 = 0.999f,
                               .eps = 1e-8f,
                               .clamp = 1.0f,
                               .hyst = 0.01f,
                               .rowf = x->rowf[i],
                               .colf = x->colf,
                               .curv2 = 2.0f};
        OK(br_sign_step(g_ctx, &a));
    }
}

static void bench_sign_step(void) {
    sign_bufs x = {.rows = {3584, 1024, 3584, 1024}, .r = 384};
    double latents = 0;
    for (size_t i = 0; i < SIGN_MATS; i++) {
        size_t n = x.rows[i] * x.r;
        latents += (double)n;
        x.grad[i] = new_buf(BR_F32, n, 0x3a83126fu); /* 1e-3 */
        x.bits[i] = new_buf(BR_U32, n / 32, 0x5a5a5a5au);
        x.lat[i] = new_buf(BR_F32, n, 0);
        x.m1[i] = new_buf(BR_F32, n, 0);
        x.v[i] = new_buf(BR_F32, n, 0);
        x.rowf[i] = new_buf(BR_F32, x.rows[i], 0x3a83126fu);
    }
    x.colf = new_buf(BR_F32, x.r, 0x3a83126fu);
    x.sched = new_buf(BR_F32, BR_SIGN_SCHED, 0);
    x.flips = new_buf(BR_U32, SIGN_MATS, 0);
    float sched[BR_SIGN_SCHED] = {1e-3f, 10.0f, 1.0f, 0.0f, 0.65f, 0.01f, 0.0f, 0.0f};
    OK(br_buf_upload(x.sched, 0, sched, BR_SIGN_SCHED));
    report("sign_step_latent", 9216, 384, 28.25 * latents, time_op(op_sign_step, &x));
    x.factored = 1;
    report("sign_step_factored", 9216, 384, 20.25 * latents, time_op(op_sign_step, &x));
    x.factored = 0;
    x.exact = 1;
    report("sign_step_exact_budget", 9216, 384, 4.25 * latents, time_op(op_sign_step, &x));
    for (size_t i = 0; i < SIGN_MATS; i++) {
        br_buf_free(x.grad[i]), br_buf_free(x.bits[i]), br_buf_free(x.lat[i]);
        br_buf_free(x.m1[i]), br_buf_free(x.v[i]), br_buf_free(x.rowf[i]);
    }
    br_buf_free(x.colf), br_buf_free(x.sched), br_buf_free(x.flips);
}

int main(int argc, char **argv) {
    const char *device = "cuda";
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = argv[++i];
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc && atoi(argv[i + 1]) >= 3)
            g_runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else {
            fprintf(stderr, "usage: bench_ops [--device cuda|cpu] [--runs N (>= 3)] [--quick]\n");
            return 2;
        }
    }
    char err[256];
    if (br_ctx_new(device, &g_ctx, err, sizeof err) != BR_OK) {
        fprintf(stderr, "bench_ops: cannot open %s: %s\n", device, err);
        return 1;
    }
    if (quick) g_runs = 3;
    const size_t m = quick ? 256 : 8192, k = 3584, n = m * k;
    const size_t kpad = br_pad_rows(k), tpad = br_pad_tokens(m);
    bufs x = {.m = m, .k = k};
    x.a = new_buf(BR_F32, n, 0x3f800000u); /* 1.0f */
    x.b = new_buf(BR_F32, n, 0x3f000000u);
    x.c = new_buf(BR_F32, n, 0x3e800000u);
    x.d = new_buf(BR_F32, n, 0x3e000000u);
    x.col = new_buf(BR_F32, k, 0x3fc00000u);
    x.col2 = new_buf(BR_F32, k, 0x3f400000u);
    x.h16 = new_buf(BR_F16, br_pad_rows(m) * k, 0x3c00u);
    x.h16b = new_buf(BR_F16, br_pad_rows(m) * k, 0);
    x.t16 = new_buf(BR_F16, kpad * tpad, 0);
    x.bits = new_buf(BR_U32, k * 384 / 32, 0x5a5a5a5au);
    x.plane = new_buf(BR_F16, k * 384, 0);
    x.plane_t = new_buf(BR_F16, k * 384, 0);
    x.sum = new_buf(BR_F32, k, 0);
    x.parts = new_buf(BR_F32, BR_SUMSQ_PARTS, 0);
    x.sched = new_buf(BR_F32, 4, 0);
    float sched[4] = {1e-6f, 10.0f, 1.0f, 0.0f};
    OK(br_buf_upload(x.sched, 0, sched, 4));

    const double e = (double)n;
    report("fill", m, k, 4 * e, time_op(op_fill, &x));
    report("copy", m, k, 8 * e, time_op(op_copy, &x));
    report("cvt", m, k, 6 * e, time_op(op_cvt, &x));
    report("cvt_multi2", m, k, 8 * e, time_op(op_cvt_multi, &x));
    report("cvt_t", m, k, 6 * e, time_op(op_cvt_t, &x));
    report("expand_both", k, 384, 4.125 * (double)(k * 384), time_op(op_expand, &x));
    report("colsum_ab", m, k, 8 * e, time_op(op_colsum, &x));
    x.fuse =
        (br_fuse){.kind = BR_FUSE_CVT_A, .col = x.col, .dst = x.h16, .scale = 0.5f, .dst_t = x.t16};
    report("colsum_fused_cvt_t", m, k, 12 * e, time_op(op_colsum_fused, &x));
    x.fuse = (br_fuse){.kind = BR_FUSE_SCALE_B,
                       .col = x.col,
                       .dst = x.c,
                       .accumulate = 1,
                       .dst_t = x.t16,
                       .t_scale = 0.5f};
    report("colsum_fused_scale_t", m, k, 18 * e, time_op(op_colsum_fused, &x));
    x.fuse.dst_t = NULL;
    report("colsum_fused_scale", m, k, 16 * e, time_op(op_colsum_fused, &x));
    report("scale_acc", m, k, 12 * e, time_op(op_scale_acc, &x));
    report("scale_acc2", m, k, 12 * e, time_op(op_scale_acc2, &x));
    report("add", m, k, 12 * e, time_op(op_add, &x));
    report("f16_to_f32", m, k, 6 * e, time_op(op_f16_to_f32, &x));
    report("split_qg", m, k, 8 * e, time_op(op_split_qg, &x));
    report("adam", m, k / 4, 28 * e / 4, time_op(op_adam, &x));
    report("sumsq", m, k, 4 * e, time_op(op_sumsq, &x));
    report("cvt_both", m, k, 8 * e, time_op(op_cvt_both, &x));
    x.m = quick ? 256 : 4096; /* dy of a layer step */
    report("cvt_both", x.m, k, 8 * (double)(x.m * k), time_op(op_cvt_both, &x));
    report("cvt_t", x.m, k, 6 * (double)(x.m * k), time_op(op_cvt_t, &x));
    bench_sign_step();

    br_buf *all[] = {x.a,   x.b,    x.c,     x.d,       x.col, x.col2,  x.h16,  x.h16b,
                     x.t16, x.bits, x.plane, x.plane_t, x.sum, x.parts, x.sched};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        br_buf_free(all[i]);
    br_ctx_free(g_ctx);
    return 0;
}
