/* The paths of a compression checked against its input files, by identity. */
/* realpath() is an XSI function */
#define _XOPEN_SOURCE 700
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compress/paths.h"
#include "core/internal.h"
#include "io/io_internal.h"

/* The real path of the directory of `path` followed by its last name (the file
 * need not exist, its directory must); NULL when the directory cannot be resolved
 * or out of memory. Free the result. */
static char *resolve_parent(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) return realpath(path, NULL);
    char *dir = NULL;
    if (!slash)
        dir = strdup(".");
    else if (slash == path)
        dir = strdup("/");
    else if ((dir = malloc((size_t)(slash - path) + 1))) {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
    }
    char *real = dir ? realpath(dir, NULL) : NULL;
    free(dir);
    if (!real) return NULL;
    size_t n = strlen(real) + 1 + strlen(base) + 1;
    char *out = malloc(n);
    if (out) snprintf(out, n, "%s/%s", strcmp(real, "/") ? real : "", base);
    free(real);
    return out;
}

int br_path_same_file(const char *a, const char *b) {
    if (!a || !b) return 0;
    struct stat sa, sb;
    int has_a = stat(a, &sa) == 0, has_b = stat(b, &sb) == 0;
    if (has_a && has_b) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (has_a || has_b) return 0;
    char *ra = resolve_parent(a), *rb = resolve_parent(b);
    /* a directory that does not resolve: the strings are all there is to compare */
    int same = ra && rb ? !strcmp(ra, rb) : !strcmp(a, b);
    free(ra);
    free(rb);
    return same;
}

/* Whether directory `dir` is the one holding the file `file`. */
static int holds(const char *dir, const char *file) {
    struct stat sd, sf;
    if (stat(dir, &sd) != 0 || !S_ISDIR(sd.st_mode)) return 0;
    const char *slash = strrchr(file, '/');
    char parent[4096];
    if (!slash)
        snprintf(parent, sizeof parent, ".");
    else if ((size_t)(slash - file) < sizeof parent)
        snprintf(parent, sizeof parent, "%.*s", slash == file ? 1 : (int)(slash - file), file);
    else
        return 0;
    return stat(parent, &sf) == 0 && sd.st_dev == sf.st_dev && sd.st_ino == sf.st_ino;
}

br_status br_compress_check_not_input(br_ctx *ctx, const br_st_file *in, const char *path,
                                      const char *what) {
    if (!in || !path)
        return br_fail(ctx, BR_E_ARG, "br_compress_check_not_input: in or path is NULL");
    for (size_t i = 0; i < br_st_file_count(in); i++) {
        const char *file = br_st_file_at(in, i);
        if (!br_path_same_file(path, file)) continue;
        if (!strcmp(file, br_st_path(in)))
            return br_fail(ctx, BR_E_ARG,
                           "%s: the %s is the input file itself: writing it would destroy the "
                           "input; choose another path",
                           path, what);
        return br_fail(ctx, BR_E_ARG,
                       "%s: the %s is %s, one of the files of the input %s: writing it would "
                       "destroy the input; choose another path",
                       path, what, file, br_st_path(in));
    }
    return BR_OK;
}

br_status br_compress_check_paths(br_ctx *ctx, const br_st_file *in, const char *out_path,
                                  const char *ckpt_dir) {
    if (!in || !out_path)
        return br_fail(ctx, BR_E_ARG, "br_compress_check_paths: in or out_path is NULL");
    BR_TRY(br_compress_check_not_input(ctx, in, out_path, "output"));
    char partial[4200];
    if (!ckpt_dir) {
        if ((size_t)snprintf(partial, sizeof partial, "%s.partial", out_path) >= sizeof partial)
            return br_fail(ctx, BR_E_ARG, "%s: the output path is too long", out_path);
        ckpt_dir = partial;
    }
    for (size_t i = 0; i < br_st_file_count(in); i++) {
        const char *file = br_st_file_at(in, i);
        if (br_path_same_file(ckpt_dir, file))
            return br_fail(ctx, BR_E_ARG,
                           "%s: the checkpoint directory is the input file %s: choose another "
                           "output path or checkpoint directory",
                           ckpt_dir, file);
        if (holds(ckpt_dir, file))
            return br_fail(ctx, BR_E_ARG,
                           "%s: the checkpoint directory is the directory of the input file %s "
                           "(the job removes files from it): choose another output path or "
                           "checkpoint directory",
                           ckpt_dir, file);
    }
    return BR_OK;
}
