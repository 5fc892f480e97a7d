/* The index of a sharded checkpoint (model.safetensors.index.json):
 *
 *     {"metadata": {...}, "weight_map": {"tensor name": "shard file name", ...}}
 *
 * Only weight_map is read. Shard names come from an untrusted file, so they must
 * be plain names in the index's directory. */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "io/io_internal.h"

static int cmp_str_ptr(const void *a, const void *b) {
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    int c = strcmp(x, y);
    return c ? c : (x < y ? -1 : x > y); /* ties by position: first appearance first */
}

/* Order of strings of one arena by position, i.e. by appearance in the text. */
static int cmp_position(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (const char *const *)a, y = (uintptr_t) * (const char *const *)b;
    return x < y ? -1 : x > y;
}

static br_status check_shard_name(br_ctx *ctx, const char *name, const char *index,
                                  const char *tensor) {
    if (!name[0] || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || strchr(name, '/') ||
        strchr(name, '\\'))
        return br_fail(ctx, BR_E_FORMAT,
                       "%s: weight_map: tensor '%.200s': shard '%.200s' is not a plain file name "
                       "in the index's directory",
                       index, tensor, name);
    return BR_OK;
}

br_status br_st_index_parse(br_ctx *ctx, const char *name, const char *text, size_t len,
                            br_st_index *out) {
    memset(out, 0, sizeof *out);
    char err[200];
    br_status st = br_json_parse(&out->doc, text, len, err, sizeof err);
    if (st != BR_OK) {
        br_st_index_free(out);
        return br_fail(ctx, st, "%s: not valid JSON: %s", name, err);
    }
    const br_json *d = &out->doc;
    if (d->nodes[0].kind != BR_JSON_OBJECT) {
        br_st_index_free(out);
        return br_fail(ctx, BR_E_FORMAT, "%s: not a JSON object", name);
    }
    int dup = 0;
    size_t map = br_json_member(d, 0, "weight_map", &dup);
    if (!map || dup || d->nodes[map].kind != BR_JSON_OBJECT || d->nodes[map].count == 0) {
        const char *why = !map                                   ? "missing"
                          : dup                                  ? "given twice"
                          : d->nodes[map].kind != BR_JSON_OBJECT ? "not a JSON object"
                                                                 : "empty";
        br_st_index_free(out);
        return br_fail(ctx, BR_E_FORMAT, "%s: weight_map is %s", name, why);
    }
    size_t n = d->nodes[map].count;
    out->tensor = malloc(n * sizeof *out->tensor);
    out->shard = malloc(n * sizeof *out->shard);
    out->files = malloc(n * sizeof *out->files);
    const char **sorted = malloc(n * sizeof *sorted);
    if (!out->tensor || !out->shard || !out->files || !sorted) {
        free(sorted);
        br_st_index_free(out);
        return br_fail(ctx, BR_E_NOMEM, "%s: out of host memory", name);
    }
    size_t k = br_json_first(map);
    for (size_t i = 0; i < n && st == BR_OK; i++) {
        size_t v = k + 1;
        out->tensor[i] = br_json_str(d, k);
        if (d->nodes[v].kind != BR_JSON_STRING) {
            st = br_fail(ctx, BR_E_FORMAT, "%s: weight_map: tensor '%.200s': shard is not a string",
                         name, out->tensor[i]);
            break;
        }
        out->shard[i] = br_json_str(d, v);
        st = check_shard_name(ctx, out->shard[i], name, out->tensor[i]);
        out->n = i + 1;
        k = br_json_after(d, v);
    }
    /* a tensor named twice */
    if (st == BR_OK) {
        memcpy(sorted, out->tensor, n * sizeof *sorted);
        qsort(sorted, n, sizeof *sorted, cmp_str_ptr);
        for (size_t i = 1; i < n && st == BR_OK; i++)
            if (strcmp(sorted[i], sorted[i - 1]) == 0)
                st = br_fail(ctx, BR_E_FORMAT, "%s: weight_map: tensor '%.200s' appears twice",
                             name, sorted[i]);
    }
    /* distinct shard names in order of first appearance: sort the names (strings of
     * one arena, so pointer order is appearance order), keep each group's first,
     * then restore appearance order */
    if (st == BR_OK) {
        memcpy(sorted, out->shard, n * sizeof *sorted);
        qsort(sorted, n, sizeof *sorted, cmp_str_ptr);
        for (size_t i = 0; i < n; i++)
            if (i == 0 || strcmp(sorted[i], sorted[i - 1]) != 0)
                out->files[out->nfiles++] = sorted[i];
        qsort(out->files, out->nfiles, sizeof *out->files, cmp_position);
    }
    free(sorted);
    if (st != BR_OK) br_st_index_free(out);
    return st;
}

void br_st_index_free(br_st_index *idx) {
    if (!idx) return;
    br_json_free(&idx->doc);
    free(idx->tensor);
    free(idx->shard);
    free(idx->files);
    memset(idx, 0, sizeof *idx);
}
