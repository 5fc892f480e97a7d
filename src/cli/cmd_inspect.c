/* `bitrank inspect FILE`: what a safetensors file (or sharded checkpoint) holds —
 * metadata, tensors with dtypes, shapes and sizes, the compressed linears of the
 * BLR layout with their rank, paths and bits per weight, and totals. */
#include <stdio.h>
#include <string.h>

#include "bitrank.h"
#include "cli/commands.h"

static const char *usage_text = "usage: bitrank inspect FILE\n"
                                "  FILE: a .safetensors file, a sharded checkpoint's "
                                "index .json, or a directory holding either\n";

/* "12.3 MiB" into buf. */
static const char *human_bytes(char *buf, size_t n, double bytes) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4)
        bytes /= 1024.0, u++;
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

static const char *shape_text(char *buf, size_t n, const br_st_tensor *t) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (size_t d = 0; d < t->ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%llu", d ? ", " : "",
                              (unsigned long long)t->shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* A metadata value on one line: control characters escaped, long values cut. */
static void print_value(const char *v) {
    size_t shown = 0;
    for (const unsigned char *c = (const unsigned char *)v; *c; c++) {
        if (shown >= 100) {
            printf("… (%zu bytes)", strlen(v));
            return;
        }
        if (*c < 0x20)
            printf("\\x%02x", *c);
        else
            putchar(*c);
        shown++;
    }
}

/* Whether tensor `name` belongs to a compressed linear (shown with the layer). */
static int is_blr_part(const br_st_file *f, const char *name) {
    static const char *suffix[] = {".blr.u", ".blr.v", ".blr.h", ".blr.l", ".blr.g", ".blr.cortiq"};
    for (size_t i = 0; i < br_st_blr_count(f); i++) {
        const char *layer = br_st_blr_at(f, i)->name;
        size_t n = strlen(layer);
        if (strncmp(name, layer, n) != 0) continue;
        for (size_t s = 0; s < sizeof suffix / sizeof suffix[0]; s++)
            if (strcmp(name + n, suffix[s]) == 0) return 1;
    }
    return 0;
}

static int is_blr_meta(const br_st_file *f, const char *key) {
    size_t n = strlen(key);
    if (n <= 4 || strcmp(key + n - 4, ".blr") != 0) return 0;
    for (size_t i = 0; i < br_st_blr_count(f); i++) {
        const char *layer = br_st_blr_at(f, i)->name;
        if (strlen(layer) == n - 4 && strncmp(key, layer, n - 4) == 0) return 1;
    }
    return 0;
}

static void print_report(const br_st_file *f) {
    char a[64], b[256];
    size_t nt = br_st_count(f), nl = br_st_blr_count(f);
    uint64_t total_bytes = 0;
    int width = 4;
    for (size_t i = 0; i < nt; i++) {
        const br_st_tensor *t = br_st_tensor_at(f, i);
        total_bytes += t->nbytes;
        int len = (int)strlen(t->name);
        if (!is_blr_part(f, t->name) && len > width) width = len;
    }
    for (size_t i = 0; i < nl; i++) {
        int len = (int)strlen(br_st_blr_at(f, i)->name);
        if (len > width) width = len;
    }
    if (width > 64) width = 64;

    printf("%s: %zu tensors, %s of tensor data\n", br_st_path(f), nt,
           human_bytes(a, sizeof a, (double)total_bytes));
    size_t nmeta = br_st_meta_count(f), shown_meta = 0;
    for (size_t i = 0; i < nmeta; i++) {
        const char *k, *v;
        br_st_meta_at(f, i, &k, &v);
        if (is_blr_meta(f, k)) continue;
        if (!shown_meta++) printf("\nmetadata:\n");
        printf("  %-20s ", k);
        print_value(v);
        putchar('\n');
    }

    uint64_t other_bytes = 0, other_elems = 0;
    size_t nother = 0;
    for (size_t i = 0; i < nt; i++) {
        const br_st_tensor *t = br_st_tensor_at(f, i);
        if (is_blr_part(f, t->name)) continue;
        if (!nother++)
            printf("\n  %-*s  %-8s %-20s %10s\n", width, "tensor", "dtype", "shape", "size");
        printf("  %-*s  %-8s %-20s %10s\n", width, t->name, t->dtype_name,
               shape_text(b, sizeof b, t), human_bytes(a, sizeof a, (double)t->nbytes));
        other_bytes += t->nbytes;
        other_elems += t->numel;
    }

    double weights = 0, bits = 0, layer_bytes = 0;
    if (nl) {
        printf("\n  %-*s  %-15s %5s %6s %8s %10s\n", width, "compressed linear", "out × in",
               "paths", "rank", "bpw", "size");
        for (size_t i = 0; i < nl; i++) {
            const br_blr_info *L = br_st_blr_at(f, i);
            snprintf(b, sizeof b, "%zu × %zu", L->m, L->n);
            printf("  %-*s  %-15s %5zu %6zu %8.4f %10s%s\n", width, L->name, b, L->paths, L->r,
                   L->bpw, human_bytes(a, sizeof a, (double)L->nbytes),
                   L->cortiq ? "  (cortiq payload)" : "");
            weights += (double)L->m * (double)L->n;
            bits += L->bpw * (double)L->m * (double)L->n;
            layer_bytes += (double)L->nbytes;
        }
    }

    printf("\ntotal: %zu tensors, %s", nt, human_bytes(a, sizeof a, (double)total_bytes));
    if (nl)
        printf("; %zu compressed linears: %.0f weights at %.4f bpw in %s (f16 would take %s)", nl,
               weights, bits / weights, human_bytes(a, sizeof a, layer_bytes),
               human_bytes(b, sizeof b, 2.0 * weights));
    if (nother)
        printf("; %zu other tensors: %llu elements in %s", nother, (unsigned long long)other_elems,
               human_bytes(a, sizeof a, (double)other_bytes));
    printf("\n");
}

int br_cmd_inspect(int argc, char **argv) {
    const char *file = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "bitrank inspect: unknown option '%s'\n%s", argv[i], usage_text);
            return 2;
        }
        if (file) {
            fprintf(stderr, "bitrank inspect: one file at a time ('%s' and '%s')\n%s", file,
                    argv[i], usage_text);
            return 2;
        }
        file = argv[i];
    }
    if (!file) {
        fprintf(stderr, "bitrank inspect: no file given\n%s", usage_text);
        return 2;
    }
    br_ctx *ctx = NULL;
    char err[256];
    if (br_ctx_new("cpu", &ctx, err, sizeof err) != BR_OK) {
        fprintf(stderr, "bitrank inspect: %s\n", err);
        return 1;
    }
    br_st_file *f = NULL;
    br_status st = br_st_open(ctx, file, &f);
    if (st != BR_OK) {
        /* the library's message names the file and the field */
        fprintf(stderr, "bitrank inspect: %s\n", br_ctx_error(ctx));
        br_ctx_free(ctx);
        return 1;
    }
    print_report(f);
    br_st_close(f);
    br_ctx_free(ctx);
    return 0;
}
