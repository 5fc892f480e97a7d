/* The progress display, table and HTML report of a compression. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/compress_report.h"

void br_cli_progress_init(br_cli_progress *p, FILE *out, int quiet, volatile sig_atomic_t *cancel) {
    memset(p, 0, sizeof *p);
    p->out = out;
    p->quiet = quiet;
    p->tty = isatty(fileno(out));
    p->last_draw = -1;
    p->cancel = cancel;
}

static void fmt_time(char *buf, size_t cap, double s) {
    if (!(s >= 0) || s > 360000) {
        snprintf(buf, cap, "--:--");
        return;
    }
    int t = (int)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, cap, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, cap, "%d:%02d", t / 60, t % 60);
}

/* The last `width` characters of a name (a leading "…" when cut). */
static void tail_name(char *buf, size_t cap, const char *name, size_t width) {
    size_t len = strlen(name);
    if (len <= width)
        snprintf(buf, cap, "%s", name);
    else
        snprintf(buf, cap, "...%s", name + len - (width - 3));
}

int br_cli_progress_cb(const br_compress_progress *pr, void *user) {
    br_cli_progress *p = user;
    if (p->cancel && *p->cancel) return 1;
    if (p->quiet) return 0;
    const br_layer_report *lr = pr->report;
    char name[64], eta[32];
    if (lr) tail_name(name, sizeof name, lr->name, 44);
    switch (pr->phase) {
    case BR_PHASE_INIT:
        p->layer_start = pr->elapsed;
        if (p->tty) {
            fprintf(p->out, "\r\033[K[%zu/%zu] %s [%zu][%zu] rank %zu: initializing", pr->layer + 1,
                    pr->layers, name, lr->m, lr->n, lr->rank);
            fflush(p->out);
        }
        break;
    case BR_PHASE_TRAIN: {
        if (!p->tty || (pr->elapsed - p->last_draw < 0.1 && pr->step != pr->steps)) break;
        p->last_draw = pr->elapsed;
        /* ETA: this layer's remaining steps at its rate, plus the layers left at
         * the mean time of the layers done (or of this one, projected) */
        double spent = pr->elapsed - p->layer_start;
        double per_step = pr->step > 0 ? spent / pr->step : 0;
        double layer_left = per_step * (pr->steps - pr->step);
        double mean_layer =
            p->done_layers ? p->done_seconds / (double)p->done_layers : spent + layer_left;
        fmt_time(eta, sizeof eta, layer_left + mean_layer * (double)(pr->layers - pr->layer - 1));
        int width = 20, fill = pr->steps ? (int)((double)width * pr->step / pr->steps) : width;
        char bar[32];
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[width] = '\0';
        fprintf(p->out, "\r\033[K[%zu/%zu] %s [%s] step %d/%d loss %.4f ETA %s", pr->layer + 1,
                pr->layers, name, bar, pr->step, pr->steps, pr->loss, eta);
        fflush(p->out);
        break;
    }
    case BR_PHASE_DONE:
    case BR_PHASE_RESUMED:
        if (pr->phase == BR_PHASE_DONE) {
            p->done_seconds += pr->elapsed - p->layer_start;
            p->done_layers++;
        }
        fmt_time(eta, sizeof eta, lr->seconds);
        fprintf(p->out, "%s[%zu/%zu] %s [%zu][%zu] rank %zu: error %.4f -> %.4f%s (%s)\n",
                p->tty ? "\r\033[K" : "", pr->layer + 1, pr->layers, name, lr->m, lr->n, lr->rank,
                lr->err_init, lr->err_trained,
                pr->phase == BR_PHASE_RESUMED ? ", from the checkpoint" : "", eta);
        fflush(p->out);
        break;
    case BR_PHASE_WRITE:
        if (p->tty) {
            fprintf(p->out, "\r\033[Kwriting the output");
            fflush(p->out);
        }
        break;
    }
    return 0;
}

void br_cli_progress_end(br_cli_progress *p) {
    if (p->tty && !p->quiet) {
        fprintf(p->out, "\r\033[K");
        fflush(p->out);
    }
}

static void human_bytes(char *buf, size_t cap, double b) {
    if (b >= 1024.0 * 1024 * 1024)
        snprintf(buf, cap, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024)
        snprintf(buf, cap, "%.2f MiB", b / (1024.0 * 1024));
    else if (b >= 1024.0)
        snprintf(buf, cap, "%.1f KiB", b / 1024.0);
    else
        snprintf(buf, cap, "%.0f B", b);
}

static double gain_percent(const br_layer_report *l) {
    return l->err_init > 0 ? 100.0 * (l->err_trained - l->err_init) / l->err_init : 0.0;
}

void br_cli_print_table(FILE *out, const br_compress_report *rep, const char *in_path,
                        const char *out_path) {
    size_t w = 5;
    for (size_t i = 0; i < rep->n_layers; i++) {
        size_t len = strlen(rep->layers[i].name);
        if (len > w) w = len;
    }
    if (w > 56) w = 56;
    fprintf(out, "%-*s  %-12s %5s %6s %9s %9s %7s %8s\n", (int)w, "layer", "shape", "rank", "bpw",
            "err init", "err train", "change", "time");
    double before = 0, after = 0, sum_init = 0, sum_trained = 0;
    for (size_t i = 0; i < rep->n_layers; i++) {
        const br_layer_report *l = &rep->layers[i];
        char name[64], shape[32], t[32];
        tail_name(name, sizeof name, l->name, w);
        snprintf(shape, sizeof shape, "%zux%zu", l->m, l->n);
        if (l->resumed)
            snprintf(t, sizeof t, "ckpt");
        else
            fmt_time(t, sizeof t, l->seconds);
        fprintf(out, "%-*s  %-12s %5zu %6.3f %9.4f %9.4f %6.1f%% %8s\n", (int)w, name, shape,
                l->rank, l->bpw, l->err_init, l->err_trained, gain_percent(l), t);
        sum_init += l->err_init;
        sum_trained += l->err_trained;
    }
    before = (double)rep->bytes_before;
    after = (double)rep->bytes_after;
    char b0[32], b1[32], f0[32], f1[32], tt[32];
    human_bytes(b0, sizeof b0, before);
    human_bytes(b1, sizeof b1, after);
    human_bytes(f0, sizeof f0, (double)rep->file_in);
    human_bytes(f1, sizeof f1, (double)rep->file_out);
    fmt_time(tt, sizeof tt, rep->seconds);
    size_t n = rep->n_layers ? rep->n_layers : 1;
    fprintf(out,
            "\n%zu layers (%llu weights), %zu tensors copied; mean relative output error %.4f "
            "after init, %.4f trained (%.1f%%)\n",
            rep->n_layers, (unsigned long long)rep->params_compressed, rep->n_passthrough,
            sum_init / (double)n, sum_trained / (double)n,
            sum_init > 0 ? 100.0 * (sum_trained - sum_init) / sum_init : 0.0);
    fprintf(out, "layers %s -> %s (%.1fx, %.3f bits per weight)", b0, b1,
            after > 0 ? before / after : 0.0,
            rep->params_compressed ? 8.0 * after / (double)rep->params_compressed : 0.0);
    if (rep->file_out)
        fprintf(out, "; file %s %s -> %s %s", in_path ? in_path : "", f0, out_path ? out_path : "",
                f1);
    fprintf(out, "\ntime %s on %s, %s calibration inputs\n", tt, rep->device, rep->calibration);
}

/* ---------------------------------------------------------------- HTML */

static void html_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* The loss curve of one layer: log-scale y, steps on x. */
static void svg_curve(FILE *f, const br_layer_report *l) {
    const int W = 420, H = 150, L = 52, R = 10, T = 10, B = 24;
    fprintf(f, "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">", W, H, W, H);
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < l->n_loss; i++) {
        double v = l->loss[i];
        if (v > 0 && isfinite(v)) {
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
    }
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"plot\"/>", L, T,
            W - L - R, H - T - B);
    if (!(lo < hi) || l->n_loss < 2) {
        fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text></svg>", L + 8, H / 2,
                l->n_loss ? "flat loss" : "no training steps");
        return;
    }
    double llo = log10(lo), lhi = log10(hi);
    if (lhi - llo < 1e-3) lhi = llo + 1e-3;
    double last_step = (double)(l->n_loss - 1) * l->loss_every;
    if (last_step <= 0) last_step = 1;
    fputs("<polyline class=\"curve\" points=\"", f);
    for (size_t i = 0; i < l->n_loss; i++) {
        double v = l->loss[i];
        if (!(v > 0) || !isfinite(v)) continue;
        double x = L + (W - L - R) * ((double)i * l->loss_every / last_step);
        double y = T + (H - T - B) * (1.0 - (log10(v) - llo) / (lhi - llo));
        fprintf(f, "%.1f,%.1f ", x, y);
    }
    fputs("\"/>", f);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"ax\" text-anchor=\"end\">%.3g</text>", L - 4,
            T + 10, hi);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"ax\" text-anchor=\"end\">%.3g</text>", L - 4, H - B,
            lo);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"ax\">0</text>", L, H - 6);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"ax\" text-anchor=\"end\">step %.0f</text>", W - R,
            H - 6, last_step);
    fputs("</svg>", f);
}

int br_cli_html_writable(const char *path, char *err, size_t err_len) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, err_len, "%s: cannot write the report: %s", path, strerror(errno));
        return -1;
    }
    fclose(f);
    unlink(tmp);
    return 0;
}

int br_cli_write_html(const char *path, const br_compress_report *rep, const char *in_path,
                      const char *out_path, char *err, size_t err_len) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, err_len, "%s: cannot write the report: %s", path, strerror(errno));
        return -1;
    }
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
          "<title>bitrank compression report</title><style>"
          "body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#222}"
          "table{border-collapse:collapse;margin:1em 0}"
          "td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}"
          "td:first-child,th:first-child{text-align:left;font-family:monospace}"
          ".plot{fill:#fafafa;stroke:#ccc}.curve{fill:none;stroke:#1f77b4;stroke-width:1.5}"
          ".ax{font-size:11px;fill:#666}.layer{display:inline-block;margin:0 1.5em 1.5em 0}"
          ".layer h3{font:12px monospace;margin:0 0 4px}"
          "</style></head><body>\n<h1>bitrank compression report</h1>\n<p>",
          f);
    fputs("Input <code>", f);
    html_text(f, in_path ? in_path : "");
    fputs("</code>, output <code>", f);
    html_text(f, out_path ? out_path : "");
    fprintf(f, "</code>. %zu layers compressed, %zu tensors copied. Device: ", rep->n_layers,
            rep->n_passthrough);
    html_text(f, rep->device);
    fprintf(f, "; calibration inputs: %s; %.1f s.</p>\n", rep->calibration, rep->seconds);
    fprintf(f,
            "<p>Layer weights: %llu bytes before, %llu after (%.1f&times;). Relative output "
            "error &Vert;&#375; &minus; y&Vert;/&Vert;y&Vert; on held-out inputs, after the "
            "Dual-SVID initialization and after training.</p>\n",
            (unsigned long long)rep->bytes_before, (unsigned long long)rep->bytes_after,
            rep->bytes_after ? (double)rep->bytes_before / (double)rep->bytes_after : 0.0);
    fputs("<table><tr><th>layer</th><th>shape</th><th>rank</th><th>bpw</th><th>error init</th>"
          "<th>error trained</th><th>change</th><th>weight error</th><th>steps</th>"
          "<th>time (s)</th></tr>\n",
          f);
    for (size_t i = 0; i < rep->n_layers; i++) {
        const br_layer_report *l = &rep->layers[i];
        fputs("<tr><td>", f);
        html_text(f, l->name);
        char t[32];
        if (l->resumed)
            snprintf(t, sizeof t, "checkpoint");
        else
            snprintf(t, sizeof t, "%.1f", l->seconds);
        fprintf(f,
                "</td><td>%zu&times;%zu</td><td>%zu</td><td>%.3f</td><td>%.4f</td><td>%.4f</td>"
                "<td>%.1f%%</td><td>%.4f</td><td>%d</td><td>%s</td></tr>\n",
                l->m, l->n, l->rank, l->bpw, l->err_init, l->err_trained, gain_percent(l),
                l->weight_err, l->steps, t);
    }
    fputs("</table>\n<h2>Training loss per layer</h2>\n<p>&frac12;&Vert;&#375; &minus; "
          "y&Vert;&sup2; / &frac12;&Vert;y&Vert;&sup2; of each batch, log scale.</p>\n",
          f);
    for (size_t i = 0; i < rep->n_layers; i++) {
        fputs("<div class=\"layer\"><h3>", f);
        html_text(f, rep->layers[i].name);
        fputs("</h3>", f);
        svg_curve(f, &rep->layers[i]);
        fputs("</div>\n", f);
    }
    fputs("</body></html>\n", f);
    int bad = ferror(f);
    if (fclose(f) != 0) bad = 1;
    if (bad || rename(tmp, path) != 0) {
        snprintf(err, err_len, "%s: cannot write the report: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}
