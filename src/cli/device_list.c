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

/* What an item names: a kind of device (its backend) and which one of the kind. */
typedef struct device_item {
    const char *kind; /* "cpu", "cuda", "vulkan"; NULL: not a device */
    long index;       /* cuda:N and vulkan:N: N ("cuda" is 0); -1: the CPU, or bare "vulkan" */
} device_item;

/* "NAME" or "NAME:N" with N as br_ctx_new reads it (decimal digits, at most 1024):
 * 1 with *index (-1 for "NAME"), 0 when item names another backend, -1 malformed. */
static int of_backend(const char *item, const char *name, long *index) {
    size_t len = strlen(name);
    if (strncmp(item, name, len) != 0 || (item[len] && item[len] != ':')) return 0;
    *index = -1;
    if (!item[len]) return 1;
    if (!item[len + 1]) return -1;
    long v = 0;
    for (const char *c = item + len + 1; *c; c++) {
        if (*c < '0' || *c > '9') return -1;
        v = v * 10 + (*c - '0');
        if (v > 1024) return -1;
    }
    *index = v;
    return 1;
}

static device_item item_of(const char *item) {
    device_item d = {NULL, -1};
    long idx = -1;
    if (!strcmp(item, "cpu")) {
        d.kind = "cpu";
    } else if (of_backend(item, "cuda", &idx) == 1) {
        d.kind = "cuda";
        d.index = idx < 0 ? 0 : idx; /* br_ctx_new: "cuda" is cuda:0 */
    } else if (of_backend(item, "vulkan", &idx) == 1) {
        d.kind = "vulkan";
        d.index = idx;
    }
    return d;
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
    device_item *dev = calloc(n, sizeof *dev);
    if (!out->text || !out->items || !dev) {
        snprintf(err, cap, "--devices: out of memory");
        free(dev);
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
        dev[k] = item_of(item);
        bad = 1;
        if (!*item)
            snprintf(err, cap, "--devices '%.200s': item %zu is empty", list, k + 1);
        else if (!strcmp(item, "auto") || !strcmp(item, "vulkan"))
            snprintf(err, cap,
                     "--devices: item %zu '%s' picks one device by itself: name each device "
                     "(cpu, cuda:N, vulkan:N)",
                     k + 1, item);
        else if (!dev[k].kind)
            snprintf(err, cap,
                     "--devices: item %zu '%.64s' is not a device: expected cpu, cuda, cuda:N or "
                     "vulkan:N",
                     k + 1, item);
        else if (strcmp(dev[k].kind, dev[0].kind) != 0)
            snprintf(err, cap,
                     "--devices: items 1 '%.64s' and %zu '%.64s' are different kinds of device "
                     "(%s, %s): a layer's bits depend on the kind, so one job's devices are of "
                     "one kind",
                     out->items[0], k + 1, item, dev[0].kind, dev[k].kind);
        else
            bad = 0;
        for (size_t i = 0; i < k && !bad && dev[k].index >= 0; i++)
            if (dev[i].index == dev[k].index) {
                snprintf(err, cap,
                         "--devices: items %zu '%.64s' and %zu '%.64s' are the same device, "
                         "%s:%ld (a device runs one layer at a time): list each once",
                         i + 1, out->items[i], k + 1, item, dev[k].kind, dev[k].index);
                bad = 1;
            }
        item = comma ? comma + 1 : item + strlen(item);
    }
    free(dev);
    if (bad) {
        br_cli_device_list_free(out);
        return -1;
    }
    out->n = n;
    return 0;
}
