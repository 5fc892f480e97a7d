/* Sizes of the public structs, for foreign-function bindings that mirror them
 * (Python's ctypes) and check their mirror against the library they load. */
#include <string.h>

#include "core/internal.h"

size_t br_struct_size(const char *type_name) {
    if (!type_name) return 0;
    static const struct {
        const char *name;
        size_t size;
    } sizes[] = {
        {"br_compress_opts", sizeof(br_compress_opts)},
        {"br_layer_report", sizeof(br_layer_report)},
        {"br_blr_host", sizeof(br_blr_host)},
        {"br_blr_path_host", sizeof(br_blr_path_host)},
        {"br_token_err", sizeof(br_token_err)},
        {"br_step_info", sizeof(br_step_info)},
        {"br_opt_cfg", sizeof(br_opt_cfg)},
        {"br_blr_fwd", sizeof(br_blr_fwd)},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (strcmp(type_name, sizes[i].name) == 0) return sizes[i].size;
    return 0;
}
