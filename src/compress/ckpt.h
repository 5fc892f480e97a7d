/* Checkpoints of the compression job (docs/FORMAT.md section 5). */
#ifndef BR_COMPRESS_CKPT_H
#define BR_COMPRESS_CKPT_H

#include "compress/compress.h"

/* A job's checkpoint directory and what its files must match. Zero-initialized
 * (as the job makes it) it holds no lock: `locked` says whether lock_fd is one. */
typedef struct br_ckpt {
    br_ctx *ctx;
    char dir[4096];
    char hash[17]; /* the options and the input's tensor list, hex */
    int max_steps; /* the options' steps: a report of more steps is damaged */
    size_t paths;  /* the options' paths */
    int locked;    /* 1: lock_fd is the open, flock()ed lock file of dir */
    int lock_fd;
} br_ckpt;

/* The file of layer `index` (the index among the compressed layers). */
void br_ckpt_path(const br_ckpt *c, size_t index, char *out, size_t cap);

/* Take the directory's lock (the file "bitrank.lock" in it, flock(LOCK_EX |
 * LOCK_NB), holding the owner's pid), so that a second job on the same directory
 * is refused at once instead of clearing or overwriting the first one's layers:
 * BR_E_STATE "DIR: another bitrank compress is using this checkpoint directory
 * (pid N)". Call after the directory exists and before anything in it is
 * touched (br_ckpt_clear, br_ckpt_load, br_ckpt_save). The kernel releases the
 * lock when the process ends, however it ends (kill -9 too): a stale lock file is
 * simply taken over. On a file system without flock the directory is used
 * unlocked. Taking it again while held is a no-op. */
br_status br_ckpt_lock(br_ckpt *c);
/* Release the lock and remove the lock file (so the directory can be removed
 * once empty: call it before rmdir). A no-op when not held. */
void br_ckpt_unlock(br_ckpt *c);

/* Remove the layer files from the directory, and the temporary files that dead
 * writers left there; with `rmdir_too` also the lock file (ours, or one no
 * process holds) and then the directory if it is empty. */
void br_ckpt_clear(const br_ckpt *c, int rmdir_too);

/* Save layer `index`: its whole report lr and L (NULL only for a layer whose
 * outcome is BR_LAYER_SKIPPED: the report alone), tagged with `data`, the hash
 * of its weights and calibration bytes, and a checksum of the tensors' bytes and
 * the report's fields. */
br_status br_ckpt_save(br_ckpt *c, size_t index, uint64_t data, const br_blr_host *L,
                       const br_layer_report *lr);
/* Layer `index` (tensor `name`, [m][n] of rank r, tagged `data`) from the
 * directory: 1 if taken (L allocated, or left zeroed for a skipped layer saved
 * without one; lr's report fields filled, lr->loss and lr->eval allocated), 0 if
 * there is none, <0 on error (*status set; a file made with other options or
 * input is BR_E_STATE, a damaged one BR_E_FORMAT naming the file and the field
 * and saying "remove the file to recompute the layer"). lr's name, shape, rank,
 * paths and bpw are the caller's (left as they are). */
int br_ckpt_load(br_ckpt *c, size_t index, uint64_t data, const char *name, size_t m, size_t n,
                 size_t r, br_blr_host *L, br_layer_report *lr, br_status *status);

#endif
