/* The devices of `bitrank compress --devices LIST`: "cuda:0,cuda:1", "cpu,cpu". */
#ifndef BR_CLI_DEVICE_LIST_H
#define BR_CLI_DEVICE_LIST_H

#include <stddef.h>

/* The items of a device list, each as br_ctx_new takes it. */
typedef struct br_cli_device_list {
    size_t n;
    char **items; /* [n], pointing into text */
    char *text;   /* the list, its commas made terminators */
} br_cli_device_list;

/* Split `list` at its commas into out (free with br_cli_device_list_free): every
 * item "cpu", "cuda", "cuda:N" or "vulkan:N" (N decimal), at most
 * BR_COMPRESS_MAX_DEVICES of them. Refused, with a message in err naming the item
 * (its position from 1): an empty list or item; "auto" and "vulkan", which pick
 * one device by themselves; anything else; devices of different kinds (their bits
 * differ, and which device takes which layer would decide the output); and a GPU
 * or Vulkan device listed twice ("cuda" is cuda:0; a device runs one layer at a
 * time, two contexts on it would only share it). The CPU may be listed more than
 * once: its contexts share the cores, and the result is the same (which is how
 * the several-device job is tested without a GPU). 0, or -1 with out empty. */
int br_cli_device_list_parse(const char *list, br_cli_device_list *out, char *err, size_t cap);
void br_cli_device_list_free(br_cli_device_list *l);

#endif
