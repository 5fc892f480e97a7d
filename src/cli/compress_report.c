/* The progress display and the table of a compression. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/compress_report.h"
#include "cli/layer_name.h"
#include "cli/term_escape.h"

void br_cli_progress_init(br_cli_progress *p, FILE *out, int quiet, volatile sig_atomic_t *cancel) {
    memset(p, 0, sizeof *p);
    p->out = out;
    p->quiet = quiet;
    p->tty = isatty(fileno(out));
    p->last_draw = -1;
    p->devices = 1;
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

/* Bytes that start a character (not UTF-8 continuation bytes). */
static int starts_char(char c) { return ((unsigned char)c & 0xc0) != 0x80; }

/* Characters of a UTF-8 string (its width on a terminal, for the names we show). */
static size_t text_width(const char *s) {
    size_t w = 0;
    for (; *s; s++)
        w += starts_char(*s);
    return w;
}

/* The last `width` characters of an (escaped) name, a leading "..." when cut;
 * the cut falls on a character boundary. */
static void tail_name(char *buf, size_t cap, const char *name, size_t width) {
    size_t w = text_width(name);
    if (w <= width || width <= 3) {
        snprintf(buf, cap, "%s", name);
        return;
    }
    const char *s = name;
    for (size_t skip = w - (width - 3); *s && skip > 0; s++)
        if (starts_char(*s)) skip--;
    while (*s && !starts_char(*s))
        s++;
    snprintf(buf, cap, "...%s", s);
}

/* `s` then spaces up to `width` characters. */
static void put_padded(FILE *out, const char *s, size_t width) {
    fputs(s, out);
    for (size_t w = text_width(s); w < width; w++)
        fputc(' ', out);
}

/* The running layer `layer`'s slot, or NULL. */
static br_cli_running *running_of(br_cli_progress *p, size_t layer) {
    for (size_t i = 0; i < p->n_running; i++)
        if (p->running[i].layer == layer) return &p->running[i];
    return NULL;
}

/* Layer `layer` began (or reports a step): its slot, made at `elapsed` if new;
 * NULL when every slot is taken (more layers at once than devices allowed). */
static br_cli_running *running_at(br_cli_progress *p, size_t layer, double elapsed, double work) {
    br_cli_running *r = running_of(p, layer);
    if (r) return r;
    if (p->n_running == sizeof p->running / sizeof p->running[0]) return NULL;
    r = &p->running[p->n_running++];
    *r = (br_cli_running){.layer = layer, .start = elapsed, .work = work};
    return r;
}

double br_cli_eta(const br_cli_progress *p, const br_compress_progress *pr) {
    /* this layer from the report; the others running beside it from their slots */
    double start = p->layer_start, others_work = 0, others_seconds = 0;
    for (size_t i = 0; i < p->n_running; i++) {
        const br_cli_running *r = &p->running[i];
        if (r->layer == pr->layer) {
            start = r->start;
            continue;
        }
        others_work += r->work * r->frac;
        if (pr->elapsed > r->start) others_seconds += pr->elapsed - r->start;
    }
    double spent = pr->elapsed - start;
    if (spent < 0) spent = 0;
    /* the devices that can still work at once: no more than the layers left */
    size_t left_layers = pr->layers > p->finished ? pr->layers - p->finished : 1;
    double devices = (double)(p->devices < 1             ? 1
                              : p->devices < left_layers ? p->devices
                                                         : left_layers);
    if (pr->work_total > 0) {
        double frac = pr->steps > 0 ? (double)pr->step / (double)pr->steps : 1.0;
        double done = p->done_work + pr->work_layer * frac + others_work;
        double seconds = p->done_seconds + spent + others_seconds;
        if (!(done > 0) || !(seconds > 0)) return -1;
        double left = pr->work_total - pr->work_before - pr->work_layer * frac - others_work;
        return seconds / done * (left > 0 ? left : 0) / devices;
    }
    /* no work estimate: this layer's remaining steps at its rate, plus the layers
     * left at the mean time of the layers done (or of this one, projected) */
    double per_step = pr->step > 0 ? spent / pr->step : 0;
    double layer_left = per_step * (pr->steps - pr->step);
    double mean_layer =
        p->done_layers ? p->done_seconds / (double)p->done_layers : spent + layer_left;
    /* one device: those after this one; several: those neither finished nor begun */
    double ahead = (double)(pr->layers - pr->layer - 1);
    if (p->devices > 1) {
        size_t busy = p->n_running ? p->n_running : 1;
        ahead = left_layers > busy ? (double)(left_layers - busy) : 0;
    }
    return layer_left + mean_layer * ahead / devices;
}

int br_cli_progress_cb(const br_compress_progress *pr, void *user) {
    br_cli_progress *p = user;
    if (p->cancel && *p->cancel) return 1;
    if (p->quiet) return 0;
    const br_layer_report *lr = pr->report;
    char name[1100], shown[80], eta[32];
    shown[0] = '\0';
    if (lr) {
        br_cli_escape(name, sizeof name, lr->name);
        tail_name(shown, sizeof shown, name, 44);
    }
    /* the layers running at once (the ETA's rate counts each) */
    if (pr->phase == BR_PHASE_INIT || pr->phase == BR_PHASE_TRAIN) {
        br_cli_running *r = running_at(p, pr->layer, pr->elapsed, pr->work_layer);
        if (r && pr->phase == BR_PHASE_TRAIN)
            r->frac = pr->steps > 0 ? (double)pr->step / (double)pr->steps : 1.0;
    }
    switch (pr->phase) {
    case BR_PHASE_INIT:
        p->layer_start = pr->elapsed;
        if (p->tty && lr) {
            fprintf(p->out, "\r\033[K[%zu/%zu] %s [%zu][%zu] rank %zu: initializing", pr->layer + 1,
                    pr->layers, shown, lr->m, lr->n, lr->rank);
            fflush(p->out);
        }
        break;
    case BR_PHASE_TRAIN: {
        if (!p->tty || (pr->elapsed - p->last_draw < 0.1 && pr->step != pr->steps)) break;
        p->last_draw = pr->elapsed;
        fmt_time(eta, sizeof eta, br_cli_eta(p, pr));
        int width = 20, fill = pr->steps ? (int)((double)width * pr->step / pr->steps) : width;
        char bar[32];
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[width] = '\0';
        fprintf(p->out, "\r\033[K[%zu/%zu] %s [%s] step %d/%d loss %.4f ETA %s", pr->layer + 1,
                pr->layers, shown, bar, pr->step, pr->steps, pr->loss, eta);
        fflush(p->out);
        break;
    }
    case BR_PHASE_DONE:
    case BR_PHASE_RESUMED: {
        /* a layer that began (INIT) took the time since; a skipped one, none */
        br_cli_running *r = running_of(p, pr->layer);
        if (pr->phase == BR_PHASE_DONE) {
            if (r) p->done_seconds += pr->elapsed - r->start;
            p->done_layers++;
            p->done_work += pr->work_layer;
        }
        if (r) *r = p->running[--p->n_running];
        p->finished++;
        if (!lr) break;
        fmt_time(eta, sizeof eta, lr->seconds);
        fprintf(p->out, "%s[%zu/%zu] %s [%zu][%zu] ", p->tty ? "\r\033[K" : "", pr->layer + 1,
                pr->layers, shown, lr->m, lr->n);
        if (lr->outcome == BR_LAYER_SKIPPED) {
            char note[1100];
            br_cli_escape(note, sizeof note, lr->note);
            fprintf(p->out, "skipped (copied unchanged)%s%s", note[0] ? ": " : "", note);
        } else {
            fprintf(p->out, "rank %zu: error %.4f -> %.4f", lr->rank, lr->err_init,
                    lr->err_trained);
        }
        fprintf(p->out, "%s (%s)\n", pr->phase == BR_PHASE_RESUMED ? ", from the checkpoint" : "",
                eta);
        fflush(p->out);
        break;
    }
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

/* ---------------------------------------------------------------- the table */

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

double br_cli_gain_percent(const br_layer_report *l) {
    return l->err_init > 0 ? 100.0 * (l->err_trained - l->err_init) / l->err_init : 0.0;
}

void br_cli_stop_text(char *buf, size_t cap, const br_layer_report *l) {
    char best[48] = "";
    if (l->stop != BR_STOP_NONE && l->best_step != l->steps) {
        if (l->best_step == 0)
            snprintf(best, sizeof best, " (kept the init)");
        else
            snprintf(best, sizeof best, " (best %d)", l->best_step);
    }
    if (l->stop == BR_STOP_PLATEAU)
        snprintf(buf, cap, "plateau at %d%s", l->steps, best);
    else if (l->stop == BR_STOP_STEPS || l->steps > 0)
        /* steps run without a reason: a report from before stop reasons existed */
        snprintf(buf, cap, "%d steps%s", l->steps, best);
    else
        snprintf(buf, cap, "init only");
}

/* The table stays within this many columns where the names allow it. */
enum { TABLE_COLUMNS = 120, NAME_MIN = 16 };

/* What the table leaves out of every name: a common leading part ending in '.'
 * ("model.layers.") and a common ".weight", so that what tells the layers apart
 * fits. Only with two layers or more, and never a whole name. */
typedef struct name_trim {
    size_t prefix, suffix;
} name_trim;

static name_trim common_trim(const br_compress_report *rep) {
    name_trim t = {0, 0};
    if (rep->n_layers < 2) return t;
    const char *first = rep->layers[0].name;
    size_t p = strlen(first);
    for (size_t i = 1; i < rep->n_layers; i++) {
        const char *s = rep->layers[i].name;
        size_t k = 0;
        while (k < p && s[k] && s[k] == first[k])
            k++;
        p = k;
    }
    while (p > 0 && first[p - 1] != '.')
        p--;
    static const char weight[] = ".weight";
    size_t sl = sizeof weight - 1, s = sl;
    for (size_t i = 0; i < rep->n_layers; i++) {
        const char *name = rep->layers[i].name;
        size_t len = strlen(name);
        if (len < sl || strcmp(name + len - sl, weight)) s = 0;
    }
    for (size_t i = 0; i < rep->n_layers; i++) {
        size_t len = strlen(rep->layers[i].name);
        if (len <= p + s) s = 0;
        if (len <= p + s) p = 0;
    }
    t.prefix = p;
    t.suffix = s;
    return t;
}

/* A layer's name as the table shows it: trimmed, then escaped. */
static void table_name(char *buf, size_t cap, const char *name, name_trim t) {
    char part[256];
    size_t len = strlen(name) - t.prefix - t.suffix;
    if (len >= sizeof part) len = sizeof part - 1;
    memcpy(part, name + t.prefix, len);
    part[len] = '\0';
    br_cli_escape(buf, cap, part);
}

/* "0.4123->0.2211": a value after the initialization and after training; the
 * trained one alone when the initial one is not known (0). */
static void init_to_trained(char *buf, size_t cap, double init, double trained, int digits) {
    if (init > 0)
        snprintf(buf, cap, "%.*f->%.*f", digits, init, digits, trained);
    else
        snprintf(buf, cap, "%.*f", digits, trained);
}

void br_cli_print_table(FILE *out, const br_compress_report *rep, const char *in_path,
                        const char *out_path) {
    size_t n = rep->n_layers;
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    if (!order) {
        fprintf(out, "(no memory for the table)\n");
        return;
    }
    br_cli_layer_order(rep, order);
    name_trim trim = common_trim(rep);
    /* the name column's header: the trimmed parts around a '*' */
    char header[1100] = "layer";
    if (trim.prefix || trim.suffix) {
        char pre[256], esc[1030];
        snprintf(pre, sizeof pre, "%.*s", (int)trim.prefix, rep->layers[0].name);
        br_cli_escape(esc, sizeof esc, pre);
        snprintf(header, sizeof header, "%s*%s", esc, trim.suffix ? ".weight" : "");
    }
    size_t name_w = text_width(header), shape_w = 5, stop_w = 4;
    for (size_t i = 0; i < n; i++) {
        const br_layer_report *l = &rep->layers[i];
        char buf[1100];
        table_name(buf, sizeof buf, l->name, trim);
        if (text_width(buf) > name_w) name_w = text_width(buf);
        int sw = snprintf(buf, sizeof buf, "%zux%zu", l->m, l->n);
        if ((size_t)sw > shape_w) shape_w = (size_t)sw;
        br_cli_stop_text(buf, sizeof buf, l);
        size_t stw = strlen(buf) + (l->resumed ? 10 : 0); /* " (resumed)" */
        if (l->outcome != BR_LAYER_SKIPPED && stw > stop_w) stop_w = stw;
    }
    /* the columns after the name: "  shape rank bpw err change p50 werr  stop" */
    size_t rest = 2 + shape_w + 6 + 7 + 18 + 8 + 8 + 13 + 2 + stop_w;
    size_t cap = rest + NAME_MIN < TABLE_COLUMNS ? TABLE_COLUMNS - rest : NAME_MIN;
    if (name_w > cap) name_w = cap;
    char cell[1100];
    tail_name(cell, sizeof cell, header, name_w);
    put_padded(out, cell, name_w);
    fprintf(out, "  %-*s %5s %6s %17s %7s %7s %12s  %s\n", (int)shape_w, "shape", "rank", "bpw",
            "err init->trained", "change", "tok p50", "weight err", "stop");

    size_t compressed = 0, skipped = 0, n_tok = 0, n_werr0 = 0;
    double sum_init = 0, sum_trained = 0, sum_tok = 0, sum_werr = 0, sum_werr0 = 0;
    for (size_t k = 0; k < n; k++) {
        const br_layer_report *l = &rep->layers[order[k]];
        char name[1100], shape[48], rank[24], bpw[24];
        table_name(name, sizeof name, l->name, trim);
        tail_name(cell, sizeof cell, name, name_w);
        put_padded(out, cell, name_w);
        snprintf(shape, sizeof shape, "%zux%zu", l->m, l->n);
        snprintf(rank, sizeof rank, "%zu", l->rank);
        snprintf(bpw, sizeof bpw, "%.3f", l->bpw);
        if (l->outcome == BR_LAYER_SKIPPED) {
            /* its rank and bpw are those it would have had, if the budget holds one */
            char note[1100];
            br_cli_escape(note, sizeof note, l->note);
            fprintf(out, "  %-*s %5s %6s  skipped%s%s\n", (int)shape_w, shape, l->rank ? rank : "-",
                    l->rank ? bpw : "-", note[0] ? ": " : "", note);
            skipped++;
            continue;
        }
        char err[64], gain[24], tok[24], werr[64], stop[96];
        init_to_trained(err, sizeof err, l->err_init, l->err_trained, 4);
        snprintf(gain, sizeof gain, "%.1f%%", br_cli_gain_percent(l));
        /* the quantiles of a report that has none are all zero */
        int has_tok = l->tok_trained.p50 > 0 || l->tok_trained.p90 > 0;
        if (has_tok)
            snprintf(tok, sizeof tok, "%.4f", l->tok_trained.p50);
        else
            snprintf(tok, sizeof tok, "-");
        init_to_trained(werr, sizeof werr, l->weight_err_init, l->weight_err, 3);
        br_cli_stop_text(stop, sizeof stop, l);
        fprintf(out, "  %-*s %5s %6s %17s %7s %7s %12s  %s%s\n", (int)shape_w, shape, rank, bpw,
                err, gain, tok, werr, stop, l->resumed ? " (resumed)" : "");
        compressed++;
        sum_init += l->err_init;
        sum_trained += l->err_trained;
        if (has_tok) {
            sum_tok += l->tok_trained.p50;
            n_tok++;
        }
        sum_werr += l->weight_err;
        if (l->weight_err_init > 0) {
            sum_werr0 += l->weight_err_init;
            n_werr0++;
        }
    }
    free(order);

    fprintf(out,
            "\n%zu compressed, %zu skipped (copied unchanged); %llu weights compressed, %zu "
            "tensors copied\n",
            compressed, skipped, (unsigned long long)rep->params_compressed, rep->n_passthrough);
    if (compressed) {
        double c = (double)compressed;
        /* means of the compressed layers (a skipped one has no error of its own) */
        fprintf(out, "mean relative output error %.4f after init, %.4f trained (%.1f%%)",
                sum_init / c, sum_trained / c,
                sum_init > 0 ? 100.0 * (sum_trained - sum_init) / sum_init : 0.0);
        if (n_tok) fprintf(out, ", token p50 %.4f", sum_tok / (double)n_tok);
        if (n_werr0 == compressed)
            fprintf(out, ", weight error %.3f -> %.3f", sum_werr0 / c, sum_werr / c);
        else
            fprintf(out, ", weight error %.3f", sum_werr / c);
        fputc('\n', out);
    }
    double before = (double)rep->bytes_before, after = (double)rep->bytes_after;
    char b0[32], b1[32], f0[32], f1[32], tt[32];
    human_bytes(b0, sizeof b0, before);
    human_bytes(b1, sizeof b1, after);
    human_bytes(f0, sizeof f0, (double)rep->file_in);
    human_bytes(f1, sizeof f1, (double)rep->file_out);
    fmt_time(tt, sizeof tt, rep->seconds);
    fprintf(out, "layers %s -> %s (%.1fx, %.3f bits per weight)", b0, b1,
            after > 0 ? before / after : 0.0,
            rep->params_compressed ? 8.0 * after / (double)rep->params_compressed : 0.0);
    if (rep->file_out) {
        char in_esc[4200], out_esc[4200];
        br_cli_escape(in_esc, sizeof in_esc, in_path ? in_path : "");
        br_cli_escape(out_esc, sizeof out_esc, out_path ? out_path : "");
        fprintf(out, "; file %s %s -> %s %s", in_esc, f0, out_esc, f1);
    }
    char device[700], calib[200];
    br_cli_escape(device, sizeof device, rep->device);
    br_cli_escape(calib, sizeof calib, rep->calibration);
    fprintf(out, "\ntime %s on %s, %s calibration inputs\n", tt, device, calib);
}
