/* What `bitrank compress` and `bitrank demo` show: the progress display, the
 * per-layer table with totals, and the HTML report (report_html.c). */
#ifndef BR_CLI_COMPRESS_REPORT_H
#define BR_CLI_COMPRESS_REPORT_H

#include <signal.h>
#include <stdio.h>

#include "bitrank.h"

/* A layer being compressed: one at a time on one device, several at once on
 * several (br_compress_file_on). */
typedef struct br_cli_running {
    size_t layer;
    double start; /* elapsed seconds at its BR_PHASE_INIT */
    double work;  /* its br_compress_progress.work_layer */
    double frac;  /* the fraction of its steps done */
} br_cli_running;

/* State of the progress display on `out`: a bar redrawn in place with \r on a
 * terminal, one plain line per finished layer otherwise, nothing when quiet. */
typedef struct br_cli_progress {
    FILE *out;
    int tty, quiet;
    double last_draw;    /* elapsed seconds of the last redraw */
    double layer_start;  /* elapsed seconds when the latest layer began */
    double done_seconds; /* seconds of the layers finished in this run (per device:
                          * with several, more than the time elapsed) */
    size_t done_layers;  /* layers finished in this run (not resumed) */
    double done_work;    /* their work (br_compress_progress.work_layer) */
    size_t finished;     /* layers finished, resumed or skipped */
    size_t devices;      /* devices compressing at once (init: 1) */
    br_cli_running running[BR_COMPRESS_MAX_DEVICES]; /* the layers begun, not finished */
    size_t n_running;
    volatile sig_atomic_t *cancel; /* set by a signal handler: cancel the job */
} br_cli_progress;

void br_cli_progress_init(br_cli_progress *p, FILE *out, int quiet, volatile sig_atomic_t *cancel);
/* A br_compress_progress_fn; user is a br_cli_progress. */
int br_cli_progress_cb(const br_compress_progress *progress, void *user);
/* Clears a half-drawn bar (before an error message). */
void br_cli_progress_end(br_cli_progress *p);

/* Seconds left in the job at a BR_PHASE_TRAIN report, or -1 when nothing
 * measured yet allows a guess. With the job's work estimate (work_total > 0):
 * the seconds per unit of work of what this run has done (the layers finished in
 * it and the running layers' steps so far; resumed layers took no time and are
 * left out) times the work left, divided among the devices (p->devices, at most
 * the layers not finished): each device's seconds count, so the rate is one
 * device's. Without it: this layer's steps left at its rate plus the layers left
 * at the mean time of those finished (or this one's, projected), those shared
 * among the devices. */
double br_cli_eta(const br_cli_progress *p, const br_compress_progress *pr);

/* How a layer's training ended, for the table and the report: "plateau at 175
 * (best 150)", "300 steps", "300 steps (best 275)", "init only". */
void br_cli_stop_text(char *buf, size_t cap, const br_layer_report *l);

/* The relative change of the output error from init to trained, in percent. */
double br_cli_gain_percent(const br_layer_report *l);

/* The table of layers in natural order of their names, and the totals. */
void br_cli_print_table(FILE *out, const br_compress_report *rep, const char *in_path,
                        const char *out_path);

/* A self-contained HTML page: summary (options and calibration), the table with
 * every field, each layer's training loss and held-out error (inline SVG), and
 * the trained error by layer type and depth. Written to a temporary file and
 * renamed. 0 on success; else -1 with a message in err. */
int br_cli_write_html(const char *path, const br_compress_report *rep, const char *in_path,
                      const char *out_path, char *err, size_t err_len);
/* Whether the report can be written at `path` (its temporary file is made and
 * removed): checked before the job, not after hours of it. 0 or -1 as above. */
int br_cli_html_writable(const char *path, char *err, size_t err_len);

/* Whether ctx's op profiler is on (option profile=1), to print its report at the end. */
int br_cli_profiling(const br_ctx *ctx);

/* Run br_compress_file_on (devices: NULL and 0 for ctx alone) with the progress
 * display (SIGINT/SIGTERM cancel it cleanly), then print the table and write the
 * HTML report (report_path may be NULL). checkpoint_dir: NULL for OUT.partial,
 * which `bitrank compress --resume` continues (an interrupted run says so); else
 * the caller's own directory, which it removes (no resume is offered). Errors go
 * to stderr prefixed by `who`. Returns the exit status. */
int br_cli_run_compress(br_ctx *ctx, br_ctx *const *devices, size_t n_devices, const char *in,
                        const char *out, const br_compress_opts *opts, const char *checkpoint_dir,
                        int resume, int quiet, const char *report_path, const char *who);

#endif
