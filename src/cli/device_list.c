/* `--devices LIST`: its items checked before any context is opened. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bitrank.h"
#include "cli/device_list.h"

void br_cli_device_list_free(br_cli_device_list *l) {
    if (!l) return;
    free(l->items);
    free(l->text);
    memset(l, 0, sizeof *l);
}

/* The GPU index of "cuda" (0) or "cuda:N"; -1 for anything else. N as br_ctx_new
 * reads it: decimal digits, at most 1024. */
static long cuda_index(const char *item) {
    if (!strcmp(item, "cuda")) return 0;
    if (strncmp(item, "cuda:", 5) != 0 || !item[5]) return -1;
    long v = 0;
    for (const char *c = item + 5; *c; c++) {
        if (*c < '0' || *c > '9') return -1;
        v = v * 10 + (*c - '0');
        if (v > 1024) return -1;
    }
    return v;
}

int br_cli_device_list_parse(const char *list, br_cli_device_list *out, char *err, size_t cap) {
    memset(out, 0, sizeof *out);
    if (!list || !*list) {
        snprintf(err, cap, "--devices: the list is empty: name the devices, e.g. cuda:0,cuda:1");
        return -1;
    }
    size_t n = 1;
    for (const char *c = list; *c; c++)
        n += *c == ',';
    if (n > BR_COMPRESS_MAX_DEVICES) {
        snprintf(err, cap, "--devices: %zu devices listed, at most %d", n, BR_COMPRESS_MAX_DEVICES);
        return -1;
    }
    out->text = malloc(strlen(list) + 1);
    out->items = calloc(n, sizeof *out->items);
    long *gpu = calloc(n, sizeof *gpu);
    if (!out->text || !out->items || !gpu) {
        snprintf(err, cap, "--devices: out of memory");
        free(gpu);
        br_cli_device_list_free(out);
        return -1;
    }
    strcpy(out->text, list);
    char *item = out->text;
    int bad = 0;
    for (size_t k = 0; k < n && !bad; k++) {
        char *comma = strchr(item, ',');
        if (comma) *comma = '\0';
        out->items[k] = item;
        gpu[k] = cuda_index(item);
        bad = 1;
        if (!*item)
            snprintf(err, cap, "--devices '%.200s': item %zu is empty", list, k + 1);
        else if (!strcmp(item, "auto"))
            snprintf(err, cap,
                     "--devices: item %zu 'auto' picks one device by itself: name each device "
                     "(cpu, cuda:N)",
                     k + 1);
        else if (strcmp(item, "cpu") != 0 && gpu[k] < 0)
            snprintf(err, cap,
                     "--devices: item %zu '%.64s' is not a device: expected cpu, cuda or cuda:N",
                     k + 1, item);
        else
            bad = 0;
        if (!bad && k > 0 && (gpu[k] >= 0) != (gpu[0] >= 0)) {
            snprintf(err, cap,
                     "--devices: items 1 '%.64s' and %zu '%.64s' mix the CPU and a GPU: a layer's "
                     "bits depend on the kind of device, so one job's devices are all GPUs or "
                     "all the CPU",
                     out->items[0], k + 1, item);
            bad = 1;
        }
        for (size_t i = 0; i < k && !bad && gpu[k] >= 0; i++)
            if (gpu[i] == gpu[k]) {
                snprintf(err, cap,
                         "--devices: items %zu '%.64s' and %zu '%.64s' are the same GPU, cuda:%ld "
                         "(a GPU runs one layer at a time): list each GPU once",
                         i + 1, out->items[i], k + 1, item, gpu[k]);
                bad = 1;
            }
        item = comma ? comma + 1 : item + strlen(item);
    }
    free(gpu);
    if (bad) {
        br_cli_device_list_free(out);
        return -1;
    }
    out->n = n;
    return 0;
}
