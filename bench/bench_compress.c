/* The compression of single layers over the shapes of real LLMs: synthetic
 * structured weights (a decaying spectrum, heavy-tailed noise and a few outlier
 * input channels), the job's own path (br_compress_matrix) at the given options
 * (the defaults unless told). Prints a table, then one JSON line per shape: the
 * initialization's and the trained layer's output and weight errors, the steps,
 * why training stopped, and the seconds of the layer (initialization included).
 * What it checks is that training improves every shape over its initialization.
 *
 * usage: bench_compress [--device D] [--shapes [NAME=]MxN,...] [--bpw X]
 *                       [--paths P] [--steps S] [--tokens T] [--lr X] [--sign-lr X]
 *                       [--weight-term X] [--synthetic iso|heavy] [--gram]
 *                       [--write FILE]
 *   --gram: the layer gets an input Gram with spread channel scales (σ = 1.5 in
 *   log space, and correlations) instead of synthetic inputs
 *   --write FILE: write the weights (f16, tensors NAME or "bench.MxN.weight") to a
 *   safetensors file instead, e.g. a Llama-2-7B-shaped block for `bitrank compress`:
 *     --shapes model.layers.0.self_attn.q_proj.weight=4096x4096,... */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bitrank.h"
#include "compress/host_blas.h"
#include "core/rng.h"

/* FNV-1a of a name: each named weight of a written file gets its own values. */
static uint64_t name_seed(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* W = 0.02·(A·diag(σ)·Bᵀ/√k + noise), σ_k = (k+1)^−0.6, the noise Student-t(4) at a
 * third of the low-rank part's RMS, and 1% of the input channels (columns) 6× as
 * large: what trained LLM weights look like to a low-rank fit. */
static float *make_weight(size_t m, size_t n, uint64_t seed) {
    size_t k = m < n ? m : n;
    float *a = malloc(m * k * sizeof *a), *b = malloc(n * k * sizeof *b),
          *w = malloc(m * n * sizeof *w);
    if (!a || !b || !w) {
        free(a);
        free(b);
        free(w);
        return NULL;
    }
    br_rng rng;
    br_rng_seed(&rng, seed);
    for (size_t i = 0; i < m; i++)
        for (size_t c = 0; c < k; c++)
            a[i * k + c] = (float)(br_rng_normal(&rng) * pow((double)c + 1, -0.6));
    for (size_t i = 0; i < n * k; i++)
        b[i] = (float)br_rng_normal(&rng);
    br_sgemm(0, 1, m, n, k, (float)(1.0 / sqrt((double)k)), a, k, b, k, 0.0f, w, n);
    double s2 = 0;
    for (size_t i = 0; i < m * n; i++)
        s2 += (double)w[i] * w[i];
    double rms = sqrt(s2 / (double)(m * n));
    for (size_t i = 0; i < m * n; i++) {
        /* Student-t(4) = z / √(χ²₄/4) */
        double z = br_rng_normal(&rng), chi = 0;
        for (int d = 0; d < 4; d++) {
            double g = br_rng_normal(&rng);
            chi += g * g;
        }
        w[i] += (float)(rms / 3.0 * z / sqrt(chi / 4.0) / sqrt(2.0));
    }
    for (size_t j = 0; j < n; j++)
        if (br_rng_u64(&rng) % 100 == 0)
            for (size_t i = 0; i < m; i++)
                w[i * n + j] *= 6.0f;
    for (size_t i = 0; i < m * n; i++)
        w[i] = (float)(0.02 * w[i] / rms);
    free(a);
    free(b);
    return w;
}

/* An input Gram [n][n] with log-normal channel scales (σ = 1.5) and correlations:
 * Σ = D·(0.7·I + 0.3·C)·D, C the Gram of 32 random directions, normalized. */
static double *make_gram(size_t n, uint64_t seed) {
    const size_t q = 32;
    double *g = calloc(n * n, sizeof *g), *d = malloc(n * sizeof *d),
           *z = malloc(n * q * sizeof *z);
    if (!g || !d || !z) {
        free(g);
        free(d);
        free(z);
        return NULL;
    }
    br_rng rng;
    br_rng_seed(&rng, seed ^ 0x6a4a);
    for (size_t j = 0; j < n; j++)
        d[j] = exp(1.5 * br_rng_normal(&rng));
    for (size_t e = 0; e < n * q; e++)
        z[e] = br_rng_normal(&rng) / sqrt((double)q);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            double c = 0;
            for (size_t t = 0; t < q; t++)
                c += z[i * q + t] * z[j * q + t];
            g[i * n + j] = d[i] * d[j] * (0.3 * c + (i == j ? 0.7 : 0.0));
        }
    free(d);
    free(z);
    return g;
}

/* "NAME=MxN" or "MxN" (then NAME is "bench.MxN.weight"). */
static int parse_shape(const char *tok, char *name, size_t cap, size_t *m, size_t *n) {
    const char *eq = strchr(tok, '=');
    const char *dims = eq ? eq + 1 : tok;
    if (sscanf(dims, "%zux%zu", m, n) != 2 || !*m || !*n) return -1;
    if (eq)
        snprintf(name, cap, "%.*s", (int)(eq - tok), tok);
    else
        snprintf(name, cap, "bench.%zux%zu.weight", *m, *n);
    return 0;
}

/* The weights of every shape into a safetensors file, as f16. */
static int write_weights(br_ctx *ctx, const char *shapes, const char *path) {
    char *list = strdup(shapes);
    br_st_writer *wr = NULL;
    if (!list || br_st_writer_new(ctx, path, &wr) != BR_OK) {
        fprintf(stderr, "bench_compress: %s\n", list ? br_ctx_error(ctx) : "out of memory");
        return 1;
    }
    int rc = 0;
    uint16_t *kept[64]; /* the writer reads the data at finish */
    size_t nkept = 0;
    for (char *tok = strtok(list, ","); tok && !rc; tok = strtok(NULL, ",")) {
        char name[256];
        if (nkept == sizeof kept / sizeof kept[0]) {
            fprintf(stderr, "bench_compress: at most %zu shapes\n", nkept);
            rc = 2;
            break;
        }
        size_t m = 0, n = 0;
        if (parse_shape(tok, name, sizeof name, &m, &n)) {
            fprintf(stderr, "bench_compress: bad shape '%s' ([NAME=]MxN)\n", tok);
            rc = 2;
            break;
        }
        float *w = make_weight(m, n, 1000003 * m + n + name_seed(name));
        uint16_t *h = w ? malloc(m * n * sizeof *h) : NULL;
        if (!h) {
            fprintf(stderr, "bench_compress: out of memory\n");
            free(w);
            rc = 1;
            break;
        }
        for (size_t i = 0; i < m * n; i++)
            h[i] = br_half_from_float(w[i]);
        uint64_t shape[2] = {m, n};
        if (br_st_writer_add(wr, name, BR_ST_F16, 2, shape, h) != BR_OK) {
            fprintf(stderr, "bench_compress: %s\n", br_ctx_error(ctx));
            rc = 1;
        }
        free(w);
        kept[nkept++] = h;
    }
    if (!rc && br_st_writer_finish(wr) != BR_OK) {
        fprintf(stderr, "bench_compress: %s\n", br_ctx_error(ctx));
        rc = 1;
    }
    br_st_writer_free(wr);
    for (size_t i = 0; i < nkept; i++)
        free(kept[i]);
    free(list);
    br_ctx_free(ctx);
    if (!rc) printf("wrote %s\n", path);
    return rc;
}

static const char *stop_name(br_stop_reason s) {
    return s == BR_STOP_PLATEAU ? "plateau" : s == BR_STOP_STEPS ? "steps" : "none";
}

int main(int argc, char **argv) {
    const char *device = "auto", *shapes = "256x3072,1024x3584,3584x1024", *write = NULL;
    int use_gram = 0;
    br_compress_opts o;
    br_compress_opts_default(&o);
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--gram")) {
            use_gram = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "bench_compress: %s needs a value\n", k);
            return 2;
        }
        i++;
        if (!strcmp(k, "--device"))
            device = v;
        else if (!strcmp(k, "--shapes"))
            shapes = v;
        else if (!strcmp(k, "--write"))
            write = v;
        else if (!strcmp(k, "--steps"))
            o.steps = atoi(v);
        else if (!strcmp(k, "--tokens"))
            o.tokens = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--bpw"))
            o.bpw = atof(v);
        else if (!strcmp(k, "--paths"))
            o.paths = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--lr"))
            o.lr = (float)atof(v);
        else if (!strcmp(k, "--sign-lr"))
            o.sign_lr = (float)atof(v);
        else if (!strcmp(k, "--weight-term"))
            o.weight_term = (float)atof(v);
        else if (!strcmp(k, "--synthetic"))
            o.synthetic = !strcmp(v, "heavy") ? BR_SYNTH_HEAVY : BR_SYNTH_ISOTROPIC;
        else {
            fprintf(stderr, "bench_compress: unknown option %s\n", k);
            return 2;
        }
    }
    br_ctx *ctx = NULL;
    char err[256];
    if (br_ctx_new(write ? "cpu" : device, &ctx, err, sizeof err) != BR_OK) {
        fprintf(stderr, "bench_compress: %s\n", err);
        return 1;
    }
    if (write) return write_weights(ctx, shapes, write);
    printf("bench_compress on %s: bpw %g, %zu paths, %d steps of %zu tokens, %s inputs\n",
           br_ctx_device(ctx), o.bpw, o.paths, o.steps, o.tokens,
           use_gram                        ? "Gram"
           : o.synthetic == BR_SYNTH_HEAVY ? "heavy synthetic"
                                           : "isotropic");
    printf("%-12s %5s %6s %8s %8s %7s %15s %8s %7s %8s %7s\n", "shape", "rank", "bpw", "err0",
           "err", "gain", "weight err", "tok p50", "steps", "stop", "sec");
    int failures = 0;
    char *list = strdup(shapes);
    char *json = NULL;
    size_t json_len = 0;
    FILE *js = open_memstream(&json, &json_len);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        size_t m = 0, n = 0;
        char name[256];
        if (parse_shape(tok, name, sizeof name, &m, &n)) {
            fprintf(stderr, "bench_compress: bad shape '%s' ([NAME=]MxN)\n", tok);
            return 2;
        }
        float *w = make_weight(m, n, 1000003 * m + n);
        double *gram = use_gram ? make_gram(n, n) : NULL;
        if (!w || (use_gram && !gram)) {
            fprintf(stderr, "bench_compress: out of memory\n");
            return 1;
        }
        br_blr_host L;
        br_layer_report rep;
        memset(&rep, 0, sizeof rep);
        double t0 = now();
        br_status st = br_compress_matrix(ctx, tok, w, m, n, NULL, 0, gram, &o, &L, &rep);
        double sec = now() - t0;
        if (st) {
            fprintf(stderr, "bench_compress: %s: %s\n", tok, br_ctx_error(ctx));
            return 1;
        }
        double gain = rep.err_init > 0 ? 100.0 * (rep.err_trained / rep.err_init - 1.0) : 0;
        if (!(rep.err_trained < rep.err_init)) failures++;
        printf("%-12s %5zu %6.3f %8.4f %8.4f %6.1f%% %7.3f→%6.3f %8.4f %7d %8s %7.2f\n", tok,
               rep.rank, rep.bpw, rep.err_init, rep.err_trained, gain, rep.weight_err_init,
               rep.weight_err, rep.tok_trained.p50, rep.steps, stop_name(rep.stop), sec);
        fprintf(js,
                "{\"bench\":\"compress_layer\",\"device\":\"%s\",\"m\":%zu,\"n\":%zu,"
                "\"rank\":%zu,\"paths\":%zu,\"bpw\":%.4f,\"inputs\":\"%s\",\"init\":\"%s\","
                "\"init_on\":\"%s\",\"err_init\":%.5f,\"err_trained\":%.5f,"
                "\"weight_err_init\":%.5f,\"weight_err\":%.5f,\"tok_p50\":%.5f,\"steps\":%d,"
                "\"best_step\":%d,\"stop\":\"%s\",\"init_s\":%.3f,\"seconds\":%.3f}\n",
                br_ctx_device(ctx), m, n, rep.rank, rep.paths, rep.bpw, rep.calibration,
                rep.init_kind, rep.init_device, rep.err_init, rep.err_trained, rep.weight_err_init,
                rep.weight_err, rep.tok_trained.p50, rep.steps, rep.best_step, stop_name(rep.stop),
                rep.init_seconds, sec);
        free(rep.loss);
        free(rep.eval);
        br_blr_host_free(&L);
        free(w);
        free(gram);
    }
    fclose(js);
    fputs(json, stdout);
    free(json);
    free(list);
    printf("%s\n", failures ? "SOME SHAPES DID NOT IMPROVE OVER THEIR INIT"
                            : "every shape improved over its initialization");
    br_ctx_free(ctx);
    return failures ? 3 : 0;
}
