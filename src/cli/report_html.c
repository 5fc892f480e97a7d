/* The HTML report of a compression: one self-contained page (inline CSS and SVG,
 * nothing fetched), readable offline and attachable to an issue. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/compress_report.h"
#include "cli/layer_name.h"

/* Text as HTML: the markup characters as entities, control bytes as the visible
 * \xNN (as on the terminal). */
static void html_text(FILE *f, const char *s) {
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default:
            if (*c < 0x20 || *c == 0x7f)
                fprintf(f, "\\x%02x", *c);
            else
                fputc(*c, f);
        }
    }
}

/* Colours of the plot series (cycled). */
static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
enum { N_COLORS = sizeof palette / sizeof palette[0] };

static int plottable(double v) { return v > 0 && isfinite(v); }

/* ---------------------------------------------------------------- one layer's curves */

/* The step of point i of the held-out curve: every eval_every steps from 0, the
 * last one at the last step run. */
static double eval_step(const br_layer_report *l, size_t i) {
    /* a report without the interval: the points spread over the steps run */
    double every = l->eval_every > 0 ? l->eval_every
                   : l->n_eval > 1   ? (double)l->steps / (double)(l->n_eval - 1)
                                     : 0;
    double s = (double)i * every;
    if (i + 1 == l->n_eval && l->steps > 0 && i > 0) s = l->steps;
    return s;
}

/* The step of point i of the loss curve: the batch loss of the state after that
 * many steps, every loss_every steps from 0, and the last step's. */
static double loss_step(const br_layer_report *l, size_t i) {
    int every = l->loss_every > 0 ? l->loss_every : 1;
    if (i > 0 && i + 1 == l->n_loss && l->steps > 0 && (l->steps - 1) % every != 0)
        return l->steps - 1;
    return (double)i * every;
}

/* A plot's box in pixels, its x axis (steps 0..x_max) and log-scale y axis. */
typedef struct log_plot {
    int left, top, width, height;
    double x_max, log_lo, log_hi;
} log_plot;

static double plot_x(const log_plot *p, double step) {
    return p->left + p->width * step / p->x_max;
}
static double plot_y(const log_plot *p, double v) {
    return p->top + p->height * (1.0 - (log10(v) - p->log_lo) / (p->log_hi - p->log_lo));
}

/* The training loss and the held-out error of one layer on one log-scale plot,
 * the kept step marked. */
static void svg_layer_curves(FILE *f, const br_layer_report *l) {
    const int W = 460, H = 186, L = 58, R = 12, T = 10, B = 40;
    fprintf(f, "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">", W, H, W, H);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"plot\"/>", L, T,
            W - L - R, H - T - B);
    double lo = INFINITY, hi = -INFINITY, x_max = 0;
    size_t points = 0;
    for (size_t i = 0; i < l->n_loss; i++)
        if (plottable(l->loss[i])) {
            lo = fmin(lo, l->loss[i]);
            hi = fmax(hi, l->loss[i]);
            x_max = fmax(x_max, loss_step(l, i));
            points++;
        }
    for (size_t i = 0; i < l->n_eval; i++)
        if (plottable(l->eval[i])) {
            lo = fmin(lo, l->eval[i]);
            hi = fmax(hi, l->eval[i]);
            x_max = fmax(x_max, eval_step(l, i));
            points++;
        }
    if (points < 2 || !(lo <= hi)) {
        fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text></svg>", L + 8, H / 2,
                l->n_loss || l->n_eval ? "not enough points to plot" : "no training steps");
        return;
    }
    if (x_max <= 0) x_max = 1;
    log_plot p = {L, T, W - L - R, H - T - B, x_max, log10(lo), log10(hi)};
    /* a flat curve gets a tenth of a decade around it */
    if (p.log_hi - p.log_lo < 0.1) {
        double mid = 0.5 * (p.log_hi + p.log_lo);
        p.log_lo = mid - 0.05;
        p.log_hi = mid + 0.05;
    }
    /* grid lines at the decades inside the range, labelled; else the ends */
    int decades = 0;
    for (double d = ceil(p.log_lo); d <= p.log_hi; d += 1.0) {
        double y = plot_y(&p, pow(10, d));
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>", L, W - R,
                y, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"ax\" text-anchor=\"end\">1e%d</text>", L - 4,
                y + 4, (int)d);
        decades++;
    }
    if (decades < 2) {
        fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"ax\" text-anchor=\"end\">%.3g</text>", L - 4,
                T + 10, pow(10, p.log_hi));
        fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"ax\" text-anchor=\"end\">%.3g</text>", L - 4,
                H - B, pow(10, p.log_lo));
    }
    fputs("<polyline class=\"loss\" points=\"", f);
    for (size_t i = 0; i < l->n_loss; i++)
        if (plottable(l->loss[i]))
            fprintf(f, "%.1f,%.1f ", plot_x(&p, loss_step(l, i)), plot_y(&p, l->loss[i]));
    fputs("\"/>", f);
    if (l->n_eval) {
        fputs("<polyline class=\"eval\" points=\"", f);
        for (size_t i = 0; i < l->n_eval; i++)
            if (plottable(l->eval[i]))
                fprintf(f, "%.1f,%.1f ", plot_x(&p, eval_step(l, i)), plot_y(&p, l->eval[i]));
        fputs("\"/>", f);
        for (size_t i = 0; i < l->n_eval; i++)
            if (plottable(l->eval[i]))
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2\" class=\"evalpt\"/>",
                        plot_x(&p, eval_step(l, i)), plot_y(&p, l->eval[i]));
    }
    /* the kept state: a line at its step, a ring on its held-out point */
    int kept = l->steps > 0 && l->best_step >= 0 && l->best_step <= x_max;
    if (kept) {
        double x = plot_x(&p, l->best_step);
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" class=\"best\"/>", x, x, T,
                H - B);
        for (size_t i = 0; i < l->n_eval; i++)
            if (eval_step(l, i) == l->best_step && plottable(l->eval[i]))
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" class=\"bestpt\"/>", x,
                        plot_y(&p, l->eval[i]));
    }
    /* axes: the step range and its title on one row under the plot */
    int ty = H - B + 13;
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"ax\">0</text>", L, ty);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"ax\" text-anchor=\"end\">%.0f</text>", W - R, ty,
            x_max);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"ax\" text-anchor=\"middle\">step</text>",
            L + (W - L - R) / 2, ty);
    fprintf(
        f,
        "<text transform=\"translate(12,%d) rotate(-90)\" class=\"ax\" "
        "text-anchor=\"middle\">&#8214;&#375;&#8722;y&#8214;&#178;/&#8214;y&#8214;&#178;</text>",
        T + (H - T - B) / 2);
    /* the legend on the last row, clear of the curves */
    int ly = H - 6;
    fprintf(f,
            "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" class=\"loss\"/>"
            "<text x=\"%d\" y=\"%d\" class=\"ax\">batch loss</text>",
            L, L + 16, ly - 4, ly - 4, L + 20, ly);
    fprintf(f,
            "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" class=\"eval\"/>"
            "<text x=\"%d\" y=\"%d\" class=\"ax\">held-out</text>",
            L + 95, L + 111, ly - 4, ly - 4, L + 115, ly);
    if (kept)
        fprintf(f,
                "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" class=\"best\"/>"
                "<text x=\"%d\" y=\"%d\" class=\"ax\">kept: step %d</text>",
                L + 180, L + 196, ly - 4, ly - 4, L + 200, ly, l->best_step);
    fputs("</svg>", f);
}

/* ---------------------------------------------------------------- error by type and depth */

/* The trained error of every compressed layer with a block index: x the block,
 * one series (colour, line through its blocks) per layer type. `order` is the
 * natural order of the layers, so each series runs by depth. */
static void svg_depth_plot(FILE *f, const br_compress_report *rep, const size_t *order) {
    size_t n = rep->n_layers, n_types = 0, n_points = 0, no_block = 0;
    char(*types)[256] = malloc((n ? n : 1) * sizeof *types);
    size_t *type_of = malloc((n ? n : 1) * sizeof *type_of);
    long *block = malloc((n ? n : 1) * sizeof *block);
    if (!types || !type_of || !block) {
        fputs("<p>(no memory for the plot)</p>", f);
        free(types);
        free(type_of);
        free(block);
        return;
    }
    long b_lo = 0, b_hi = 0;
    double e_hi = 0;
    for (size_t k = 0; k < n; k++) {
        const br_layer_report *l = &rep->layers[order[k]];
        block[k] = -1;
        if (l->outcome == BR_LAYER_SKIPPED || !isfinite(l->err_trained)) continue;
        long b = br_cli_block_index(l->name);
        if (b < 0) {
            no_block++;
            continue;
        }
        char t[256];
        br_cli_layer_type(t, sizeof t, l->name);
        size_t ti = 0;
        while (ti < n_types && strcmp(types[ti], t))
            ti++;
        if (ti == n_types) memcpy(types[n_types++], t, sizeof t);
        type_of[k] = ti;
        block[k] = b;
        b_lo = n_points ? (b < b_lo ? b : b_lo) : b;
        b_hi = n_points ? (b > b_hi ? b : b_hi) : b;
        e_hi = fmax(e_hi, l->err_trained);
        n_points++;
    }
    if (!n_points) {
        fputs("<p>No compressed layer has a block index in its name (a component of digits, "
              "as in <code>layers.3.</code>).</p>\n",
              f);
        free(types);
        free(type_of);
        free(block);
        return;
    }
    const int L = 58, T = 14, PW = 480, PH = 220, B = 36, LEG = 230;
    int H = T + PH + B, legend_h = T + 16 * (int)n_types + 8;
    if (legend_h > H) H = legend_h;
    int W = L + PW + 20 + LEG;
    double x_lo = (double)b_lo - 0.5, x_hi = (double)b_hi + 0.5;
    /* the error axis from 0 in round steps (1, 2 or 5 times a power of ten) */
    double raw = (e_hi > 0 ? e_hi : 1.0) / 4, mag = pow(10, floor(log10(raw)));
    double tick = raw <= mag ? mag : raw <= 2 * mag ? 2 * mag : raw <= 5 * mag ? 5 * mag : 10 * mag;
    int n_ticks = (int)ceil(e_hi * 1.02 / tick);
    if (n_ticks < 1) n_ticks = 1;
    double y_hi = tick * n_ticks;
    fprintf(f, "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" id=\"depth\">",
            W, H, W, H);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"plot\"/>", L, T, PW, PH);
    for (int i = 0; i <= n_ticks; i++) {
        double v = tick * i, y = T + PH * (1.0 - v / y_hi);
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>", L, L + PW,
                y, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"ax\" text-anchor=\"end\">%g</text>", L - 4,
                y + 4, v);
    }
    /* at most about 12 block labels */
    long span = b_hi - b_lo + 1, every = span > 12 ? (span + 11) / 12 : 1;
    for (long b = b_lo; b <= b_hi; b += every) {
        double x = L + PW * ((double)b - x_lo) / (x_hi - x_lo);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"ax\" text-anchor=\"middle\">%ld</text>", x,
                T + PH + 14, b);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"ax\" text-anchor=\"middle\">block</text>",
            L + PW / 2, T + PH + 30);
    fprintf(f,
            "<text transform=\"translate(12,%d) rotate(-90)\" class=\"ax\" "
            "text-anchor=\"middle\">trained output error</text>",
            T + PH / 2);
    for (size_t ti = 0; ti < n_types; ti++) {
        const char *color = palette[ti % N_COLORS];
        fprintf(f, "<g class=\"series\"><polyline fill=\"none\" stroke=\"%s\" points=\"", color);
        for (size_t k = 0; k < n; k++)
            if (block[k] >= 0 && type_of[k] == ti)
                fprintf(f, "%.1f,%.1f ", L + PW * ((double)block[k] - x_lo) / (x_hi - x_lo),
                        T + PH * (1.0 - rep->layers[order[k]].err_trained / y_hi));
        fputs("\"/>", f);
        for (size_t k = 0; k < n; k++) {
            if (block[k] < 0 || type_of[k] != ti) continue;
            const br_layer_report *l = &rep->layers[order[k]];
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>",
                    L + PW * ((double)block[k] - x_lo) / (x_hi - x_lo),
                    T + PH * (1.0 - l->err_trained / y_hi), color);
            html_text(f, l->name);
            fprintf(f, ": %.4f</title></circle>", l->err_trained);
        }
        int ly = T + 12 + 16 * (int)ti, lx = L + PW + 20;
        fprintf(f,
                "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>"
                "<text x=\"%d\" y=\"%d\" class=\"ax\">",
                lx, lx + 16, ly - 4, ly - 4, color, lx + 22, ly);
        html_text(f, types[ti]);
        fputs("</text></g>", f);
    }
    fputs("</svg>\n", f);
    if (no_block)
        fprintf(f,
                "<p>%zu compressed layer%s without a block index in the name %s not shown.</p>\n",
                no_block, no_block == 1 ? "" : "s", no_block == 1 ? "is" : "are");
    free(types);
    free(type_of);
    free(block);
}

/* ---------------------------------------------------------------- the page */

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

static void summary_row(FILE *f, const char *label) { fprintf(f, "<tr><th>%s</th><td>", label); }

static void write_summary(FILE *f, const br_compress_report *rep, const char *in_path,
                          const char *out_path) {
    size_t compressed = 0, skipped = 0;
    double sum_init = 0, sum_trained = 0;
    for (size_t i = 0; i < rep->n_layers; i++) {
        const br_layer_report *l = &rep->layers[i];
        if (l->outcome == BR_LAYER_SKIPPED) {
            skipped++;
            continue;
        }
        compressed++;
        sum_init += l->err_init;
        sum_trained += l->err_trained;
    }
    fputs("<table class=\"summary\">\n", f);
    summary_row(f, "input");
    fputs("<code>", f);
    html_text(f, in_path ? in_path : "");
    fputs("</code></td></tr>\n", f);
    summary_row(f, "output");
    fputs("<code>", f);
    html_text(f, out_path ? out_path : "");
    fputs("</code></td></tr>\n", f);
    summary_row(f, "layers");
    fprintf(f,
            "%zu compressed, %zu skipped (copied unchanged); %zu other tensors copied</td></tr>\n",
            compressed, skipped, rep->n_passthrough);
    summary_row(f, "calibration");
    html_text(f, rep->calibration[0] ? rep->calibration : "unknown");
    if (rep->calib_file[0]) {
        fputs(" from <code>", f);
        html_text(f, rep->calib_file);
        fputs("</code>", f);
    }
    fputs("</td></tr>\n", f);
    summary_row(f, "options");
    fputs("<code>", f);
    html_text(f, rep->options[0] ? rep->options : "(not recorded)");
    fputs("</code></td></tr>\n", f);
    summary_row(f, "device");
    html_text(f, rep->device);
    fprintf(f, "; %.1f s</td></tr>\n", rep->seconds);
    summary_row(f, "size");
    fprintf(f,
            "layer weights %llu bytes before, %llu after (%.1f&times;); file %llu &rarr; %llu "
            "bytes</td></tr>\n",
            (unsigned long long)rep->bytes_before, (unsigned long long)rep->bytes_after,
            rep->bytes_after ? (double)rep->bytes_before / (double)rep->bytes_after : 0.0,
            (unsigned long long)rep->file_in, (unsigned long long)rep->file_out);
    if (compressed) {
        summary_row(f, "mean error");
        fprintf(
            f,
            "%.4f after init &rarr; %.4f trained (%.1f%%), over the compressed layers</td></tr>\n",
            sum_init / (double)compressed, sum_trained / (double)compressed,
            sum_init > 0 ? 100.0 * (sum_trained - sum_init) / sum_init : 0.0);
    }
    fputs("</table>\n", f);
}

/* "a &rarr; b", or b alone when a is unknown (0); a dash when neither is known
 * (a report from a job that did not measure them). */
static void cell_init_trained(FILE *f, double init, double trained, int digits) {
    if (!(init > 0) && !(trained > 0))
        fputs("<td>&ndash;</td>", f);
    else if (init > 0)
        fprintf(f, "<td>%.*f &rarr; %.*f</td>", digits, init, digits, trained);
    else
        fprintf(f, "<td>%.*f</td>", digits, trained);
}

static void write_layer_table(FILE *f, const br_compress_report *rep, const size_t *order) {
    fputs("<table class=\"layers\"><tr><th>layer</th><th>shape</th><th>rank</th><th>paths</th>"
          "<th>bpw</th><th>init</th><th>inputs</th><th>error init</th><th>error trained</th>"
          "<th>change</th><th>token p50</th><th>token p90</th><th>token p99</th>"
          "<th>weight error</th><th>stop</th><th>time (s)</th><th>note</th></tr>\n",
          f);
    for (size_t k = 0; k < rep->n_layers; k++) {
        const br_layer_report *l = &rep->layers[order[k]];
        int skipped = l->outcome == BR_LAYER_SKIPPED;
        fprintf(f, "<tr%s><td>", skipped ? " class=\"skipped\"" : "");
        html_text(f, l->name);
        fprintf(f, "</td><td>%zu&times;%zu</td><td>%zu</td><td>%zu</td><td>%.3f</td>", l->m, l->n,
                l->rank, l->paths, l->bpw);
        if (skipped) {
            fputs("<td colspan=\"11\">skipped (copied unchanged)</td><td>", f);
            html_text(f, l->note);
            fputs("</td></tr>\n", f);
            continue;
        }
        fputs("<td>", f);
        html_text(f, l->init_kind);
        if (l->init_device[0]) {
            fputs(" (", f);
            html_text(f, l->init_device);
            fputs(")", f);
        }
        fputs("</td><td>", f);
        html_text(f, l->calibration);
        if (l->calib_tokens) fprintf(f, " (%zu tokens)", l->calib_tokens);
        fprintf(f, "</td><td>%.4f</td><td>%.4f</td><td>%.1f%%</td>", l->err_init, l->err_trained,
                br_cli_gain_percent(l));
        cell_init_trained(f, l->tok_init.p50, l->tok_trained.p50, 4);
        cell_init_trained(f, l->tok_init.p90, l->tok_trained.p90, 4);
        cell_init_trained(f, l->tok_init.p99, l->tok_trained.p99, 4);
        cell_init_trained(f, l->weight_err_init, l->weight_err, 4);
        char stop[96];
        br_cli_stop_text(stop, sizeof stop, l);
        fputs("<td>", f);
        html_text(f, stop);
        fputs("</td>", f);
        if (l->resumed)
            fputs("<td>checkpoint</td>", f);
        else
            fprintf(f, "<td>%.1f</td>", l->seconds);
        fputs("<td>", f);
        html_text(f, l->note);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

int br_cli_write_html(const char *path, const br_compress_report *rep, const char *in_path,
                      const char *out_path, char *err, size_t err_len) {
    size_t *order = malloc((rep->n_layers ? rep->n_layers : 1) * sizeof *order);
    if (!order) {
        snprintf(err, err_len, "%s: cannot write the report: out of memory", path);
        return -1;
    }
    br_cli_layer_order(rep, order);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, err_len, "%s: cannot write the report: %s", path, strerror(errno));
        free(order);
        return -1;
    }
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
          "<title>bitrank compression report</title><style>"
          "body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#222}"
          "table{border-collapse:collapse;margin:1em 0}"
          "td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}"
          "td:first-child,th:first-child{text-align:left;font-family:monospace}"
          ".summary td,.summary th{text-align:left}.summary td{font-family:inherit}"
          "tr.skipped{background:#fdf1e6;color:#8a4b08}"
          ".plot{fill:#fafafa;stroke:#ccc}.grid{stroke:#e4e4e4}"
          ".loss{fill:none;stroke:#1f77b4;stroke-width:1.5}"
          ".eval{fill:none;stroke:#ff7f0e;stroke-width:1.5}.evalpt{fill:#ff7f0e}"
          ".best{stroke:#2ca02c;stroke-dasharray:4 3}.bestpt{fill:none;stroke:#2ca02c;"
          "stroke-width:2}.series polyline{stroke-width:1.5}"
          ".ax{font-size:11px;fill:#666}.layer{display:inline-block;margin:0 1.5em 1.5em 0}"
          ".layer h3{font:12px monospace;margin:0 0 4px}"
          "</style></head><body>\n<h1>bitrank compression report</h1>\n",
          f);
    write_summary(f, rep, in_path, out_path);
    fputs("<h2>Layers</h2>\n<p>Relative output error &Vert;&#375; &minus; y&Vert;/&Vert;y&Vert; "
          "on held-out inputs (never trained on), after the Dual-SVID initialization and after "
          "training; per-token quantiles of &Vert;&#375;<sub>t</sub> &minus; y<sub>t</sub>&Vert;/"
          "&Vert;y<sub>t</sub>&Vert; on the same tokens and the weight error &Vert;&Wcirc; "
          "&minus; W&Vert;/&Vert;W&Vert;, init &rarr; trained. Skipped layers are written "
          "unchanged and left out of the means.</p>\n",
          f);
    write_layer_table(f, rep, order);
    fputs("<h2>Trained error by layer type and depth</h2>\n", f);
    svg_depth_plot(f, rep, order);
    fputs("<h2>Training per layer</h2>\n<p>Batch loss &Vert;&#375; &minus; y&Vert;&sup2;/"
          "&Vert;y&Vert;&sup2; and the held-out error (the training objective on inputs never "
          "trained on; point 0 is the initialization), log scale; the dashed line marks the step "
          "whose state was kept.</p>\n",
          f);
    for (size_t k = 0; k < rep->n_layers; k++) {
        const br_layer_report *l = &rep->layers[order[k]];
        fputs("<div class=\"layer\"><h3>", f);
        html_text(f, l->name);
        fputs("</h3>", f);
        if (l->outcome == BR_LAYER_SKIPPED) {
            fputs("<p>skipped (copied unchanged): ", f);
            html_text(f, l->note);
            fputs("</p>", f);
        } else {
            svg_layer_curves(f, l);
        }
        fputs("</div>\n", f);
    }
    fputs("</body></html>\n", f);
    free(order);
    int bad = ferror(f);
    if (fclose(f) != 0) bad = 1;
    if (bad || rename(tmp, path) != 0) {
        snprintf(err, err_len, "%s: cannot write the report: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}
