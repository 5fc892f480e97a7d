/* Where the compression job reads and where it (or its caller) writes, checked
 * before any work: an output, a checkpoint directory or a report that is one of
 * the input's files would destroy the input. */
#ifndef BR_COMPRESS_PATHS_H
#define BR_COMPRESS_PATHS_H

#include "bitrank.h"

/* 1 if paths a and b name the same file, else 0. Compared by identity, not by
 * string: when both exist, the same device and inode (symbolic links followed, so
 * a link to a file is that file); when neither does, the same resolved path (the
 * real path of the directory, then the last name); when one exists and the other
 * does not, never the same. */
int br_path_same_file(const char *a, const char *b);

/* BR_E_ARG (a message naming `path` and the input file it is) if `path`, a file
 * about to be written that `what` names in the message ("output", "report"), is
 * one of the files `in` was read from: the file itself, a shard, or the index of
 * a sharded checkpoint. */
br_status br_compress_check_not_input(br_ctx *ctx, const br_st_file *in, const char *path,
                                      const char *what);

/* The job's own paths against its input, before any work: BR_E_ARG if out_path is
 * one of the input's files (br_compress_check_not_input), or if the checkpoint
 * directory ckpt_dir (NULL: out_path + ".partial") is one of them or the directory
 * holding one (the job removes layer files and the lock file from it). */
br_status br_compress_check_paths(br_ctx *ctx, const br_st_file *in, const char *out_path,
                                  const char *ckpt_dir);

#endif
