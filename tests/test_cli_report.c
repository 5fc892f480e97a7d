/* What `bitrank compress` shows, from hand-built reports (no compression runs):
 * the natural order of layer names, their block and type, the terminal escape of
 * names, the table (stop reasons, skipped layers, per-token and weight errors,
 * width), the HTML report (curves, options, calibration, the depth plot,
 * escaping), the progress line's ETA (on one device and on several) and the
 * list of `--devices`. */
#include <stdarg.h>
#include <unistd.h>

#include "cli/compress_report.h"
#include "cli/device_list.h"
#include "cli/layer_name.h"
#include "cli/term_escape.h"
#include "harness.h"

/* ---------------------------------------------------------------- helpers */

/* Everything written to `f` (rewound), as a string to free. */
static char *slurp(FILE *f) {
    fflush(f);
    long len = ftell(f);
    char *s = t_xmalloc((size_t)(len > 0 ? len : 0) + 1);
    rewind(f);
    size_t got = len > 0 ? fread(s, 1, (size_t)len, f) : 0;
    s[got] = '\0';
    return s;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    char *s = slurp(f);
    fclose(f);
    return s;
}

/* Offset of `needle` in `hay`, or -1. */
static long find(const char *hay, const char *needle) {
    const char *p = strstr(hay, needle);
    return p ? (long)(p - hay) : -1;
}

/* The line of `text` holding `needle` (copied into buf), "" if none. */
static const char *line_with(char *buf, size_t cap, const char *text, const char *needle) {
    const char *p = strstr(text, needle);
    buf[0] = '\0';
    if (!p) return buf;
    const char *b = p, *e = p;
    while (b > text && b[-1] != '\n')
        b--;
    while (*e && *e != '\n')
        e++;
    snprintf(buf, cap, "%.*s", (int)(e - b), b);
    return buf;
}

static size_t count_bytes(const char *s, char c) {
    size_t n = 0;
    for (; *s; s++)
        n += *s == c;
    return n;
}

static size_t count_str(const char *s, const char *needle) {
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* A compressed layer's report with every new field filled. */
static br_layer_report layer(const char *name, double err_init, double err_trained) {
    br_layer_report l;
    memset(&l, 0, sizeof l);
    snprintf(l.name, sizeof l.name, "%s", name);
    l.m = 4096;
    l.n = 4096;
    l.rank = 1024;
    l.paths = 2;
    l.bpw = 1.0;
    l.outcome = BR_LAYER_COMPRESSED;
    l.err_init = err_init;
    l.err_trained = err_trained;
    l.tok_init = (br_token_err){0.41, 0.55, 0.72};
    l.tok_trained = (br_token_err){0.1875, 0.25, 0.375};
    l.weight_err_init = 0.812;
    l.weight_err = 0.701;
    l.steps = 300;
    l.stop = BR_STOP_STEPS;
    l.best_step = 300;
    l.seconds = 12.5;
    snprintf(l.init_device, sizeof l.init_device, "cpu");
    snprintf(l.init_kind, sizeof l.init_kind, "whitened");
    snprintf(l.calibration, sizeof l.calibration, "gram");
    return l;
}

/* ---------------------------------------------------------------- names */

static int sign(int v) { return (v > 0) - (v < 0); }

static void names_compare_naturally(void) {
    static const struct {
        const char *a, *b;
        int want;
    } cases[] = {
        {"layers.2", "layers.10", -1},
        {"layers.10", "layers.2", 1},
        {"model.layers.2.mlp.up_proj.weight", "model.layers.10.mlp.up_proj.weight", -1},
        {"model.layers.9.self_attn.q_proj.weight", "model.layers.10.mlp.down_proj.weight", -1},
        {"model.layers.0.mlp.up_proj.weight", "model.layers.0.self_attn.q_proj.weight", -1},
        {"h.100.attn", "h.99.attn", 1},
        {"a.1.b", "a.1.b", 0},
        {"a.1", "a.1.b", -1},
        {"a", "b", -1},
        {"fc2", "fc10", -1},
        /* equal in value: the fewer leading zeros first, never "equal" */
        {"x.1", "x.01", -1},
        {"x.01", "x.1", 1},
        {"x.007.b", "x.7.a", 1}, /* the text after the number decides first */
        /* numbers far beyond 64 bits still compare by value */
        {"n.99999999999999999999999", "n.100000000000000000000000", -1},
        /* bytes ≥ 0x80 compare unsigned, after ASCII */
        {"z", "\xc3\xa9", -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = sign(br_cli_name_cmp(cases[i].a, cases[i].b));
        CHECK(got == cases[i].want, "cmp(%s, %s) = %d, expected %d", cases[i].a, cases[i].b, got,
              cases[i].want);
        int back = sign(br_cli_name_cmp(cases[i].b, cases[i].a));
        CHECK(back == -cases[i].want, "cmp(%s, %s) = %d: not antisymmetric", cases[i].b, cases[i].a,
              back);
    }
}

static void layer_order_is_natural(void) {
    static const char *const file_order[] = {
        "model.layers.10.self_attn.q_proj.weight", "model.layers.2.mlp.up_proj.weight",
        "model.layers.1.self_attn.q_proj.weight",  "model.layers.2.mlp.down_proj.weight",
        "model.layers.10.mlp.up_proj.weight",      "model.layers.0.mlp.up_proj.weight",
    };
    static const char *const want[] = {
        "model.layers.0.mlp.up_proj.weight",   "model.layers.1.self_attn.q_proj.weight",
        "model.layers.2.mlp.down_proj.weight", "model.layers.2.mlp.up_proj.weight",
        "model.layers.10.mlp.up_proj.weight",  "model.layers.10.self_attn.q_proj.weight",
    };
    enum { N = sizeof file_order / sizeof file_order[0] };
    br_layer_report layers[N];
    for (size_t i = 0; i < N; i++)
        layers[i] = layer(file_order[i], 0.5, 0.3);
    br_compress_report rep;
    memset(&rep, 0, sizeof rep);
    rep.n_layers = N;
    rep.layers = layers;
    size_t order[N];
    br_cli_layer_order(&rep, order);
    for (size_t i = 0; i < N; i++)
        CHECK(!strcmp(layers[order[i]].name, want[i]), "position %zu: %s, expected %s", i,
              layers[order[i]].name, want[i]);
}

static void block_index_and_type(void) {
    static const struct {
        const char *name;
        long block;
        const char *type;
    } cases[] = {
        {"model.layers.12.self_attn.q_proj.weight", 12, "self_attn.q_proj"},
        {"model.layers.0.mlp.down_proj.weight", 0, "mlp.down_proj"},
        {"encoder.layer.3.attention.self.query.weight", 3, "attention.self.query"},
        {"encoder.layer.3.output.dense.weight", 3, "output.dense"},
        {"transformer.h.7.mlp.c_fc2.weight", 7, "mlp.c_fc2"},
        {"fc1.weight", -1, "fc1"},                /* digits inside a component: no block */
        {"lm_head", -1, "lm_head"},               /* no ".weight" to strip */
        {"blocks.99999999999.q.weight", -1, "q"}, /* too large for a depth */
        {"layers.4", 4, "layers.4"},              /* nothing after the block */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long b = br_cli_block_index(cases[i].name);
        CHECK(b == cases[i].block, "block of %s: %ld, expected %ld", cases[i].name, b,
              cases[i].block);
        char t[64];
        br_cli_layer_type(t, sizeof t, cases[i].name);
        CHECK(!strcmp(t, cases[i].type), "type of %s: '%s', expected '%s'", cases[i].name, t,
              cases[i].type);
    }
    char small[4];
    br_cli_layer_type(small, sizeof small, "model.layers.1.self_attn.q_proj.weight");
    CHECK(!strcmp(small, "sel"), "a type cut to 4 bytes: '%s'", small);
}

/* ---------------------------------------------------------------- escaping */

static void escape_control_bytes(void) {
    char buf[64];
    br_cli_escape(buf, sizeof buf, "a\x1b[2Jb\x7f\n\tc");
    CHECK(!strcmp(buf, "a\\x1b[2Jb\\x7f\\x0a\\x09c"), "escaped: '%s'", buf);
    br_cli_escape(buf, sizeof buf, "plain.name_0");
    CHECK(!strcmp(buf, "plain.name_0"), "plain name changed: '%s'", buf);
    br_cli_escape(buf, sizeof buf, "caf\xc3\xa9");
    CHECK(!strcmp(buf, "caf\xc3\xa9"), "UTF-8 changed: '%s'", buf);
    /* cuts: never inside an escape or a UTF-8 sequence, always terminated */
    br_cli_escape(buf, 6,
                  "ab\x1b"
                  "cd");
    CHECK(!strcmp(buf, "ab"), "cut inside an escape: '%s'", buf);
    br_cli_escape(buf, 7,
                  "ab\x1b"
                  "cd");
    CHECK(!strcmp(buf, "ab\\x1b"), "cut after an escape: '%s'", buf);
    br_cli_escape(buf, 5, "abc\xc3\xa9");
    CHECK(!strcmp(buf, "abc"), "cut inside UTF-8: '%s'", buf);
    memset(buf, 'X', sizeof buf);
    br_cli_escape(buf, 1, "abc");
    CHECK(buf[0] == '\0' && buf[1] == 'X', "cap 1: not just the terminator");
    buf[0] = 'X';
    br_cli_escape(buf, 0, "abc");
    CHECK(buf[0] == 'X', "cap 0 wrote something");
}

/* ---------------------------------------------------------------- the table */

/* A report of layers out of natural order: a plateau, a full run, an init-only
 * layer, a skipped one with huge errors (which must not reach the means) and a
 * name with control characters. */
typedef struct fixture {
    br_layer_report layers[6];
    float loss[6][13], eval[6][13];
    br_compress_report rep;
} fixture;

static void fixture_init(fixture *fx) {
    memset(fx, 0, sizeof *fx);
    br_layer_report *L = fx->layers;
    L[0] = layer("model.layers.10.self_attn.q_proj.weight", 0.5, 0.25);
    L[0].stop = BR_STOP_PLATEAU;
    L[0].steps = 175;
    L[0].best_step = 150;
    L[1] = layer("model.layers.2.mlp.up_proj.weight", 0.6, 0.3);
    L[2] = layer("model.layers.2.self_attn.q_proj.weight", 0.4, 0.4);
    L[2].steps = 0;
    L[2].stop = BR_STOP_NONE;
    L[2].best_step = 0;
    L[3] = layer("model.layers.1.mlp.up_proj.weight", 0, 0);
    L[3].outcome = BR_LAYER_SKIPPED;
    L[3].err_init = 7.0;
    L[3].err_trained = 9.0;
    L[3].rank = 0;
    snprintf(L[3].note, sizeof L[3].note, "the budget cannot hold 4096x4096 at rank 32");
    L[4] = layer("model.layers.3.mlp.up_proj\x1b[2J.weight", 0.5, 0.2);
    L[5] = layer("model.layers.3.self_attn.q_proj.weight", 0.6, 0.45);
    /* curves: loss every 25 steps, held-out every 25 steps from the init */
    for (size_t i = 0; i < 6; i++) {
        br_layer_report *l = &L[i];
        if (l->steps == 0 || l->outcome == BR_LAYER_SKIPPED) continue;
        l->loss_every = 25;
        l->eval_every = 25;
        l->n_loss = (size_t)(l->steps - 1) / 25 + 2;
        l->n_eval = (size_t)l->steps / 25 + 1;
        l->loss = fx->loss[i];
        l->eval = fx->eval[i];
        for (size_t k = 0; k < l->n_loss; k++)
            l->loss[k] = (float)(0.3 * pow(0.8, (double)k));
        for (size_t k = 0; k < l->n_eval; k++)
            l->eval[k] = (float)(0.35 * pow(0.8, (double)k));
    }
    br_compress_report *r = &fx->rep;
    r->n_layers = 6;
    r->layers = L;
    r->n_skipped = 1;
    r->n_passthrough = 12;
    r->params_compressed = 5u * 4096 * 4096;
    r->bytes_before = 5ull * 4096 * 4096 * 2;
    r->bytes_after = 5ull * 4096 * 4096 / 8;
    r->seconds = 75;
    snprintf(r->device, sizeof r->device, "cpu (2 threads)");
    snprintf(r->calibration, sizeof r->calibration, "gram");
    snprintf(r->calib_file, sizeof r->calib_file, "grams/<llama>&co.safetensors");
    snprintf(r->options, sizeof r->options, "bpw=1 paths=2 steps=300 tokens=512 seed=1");
}

static char *table_of(const br_compress_report *rep) {
    FILE *f = tmpfile();
    if (!f) {
        fprintf(stderr, "no temporary file\n");
        exit(1);
    }
    br_cli_print_table(f, rep, "in.safetensors", "out.safetensors");
    char *s = slurp(f);
    fclose(f);
    return s;
}

static void table_in_natural_order(void) {
    fixture fx;
    fixture_init(&fx);
    char *t = table_of(&fx.rep);
    /* the common "model.layers." and ".weight" are left out of the rows */
    static const char *const want[] = {"1.mlp.up_proj ",      "2.mlp.up_proj ",
                                       "2.self_attn.q_proj ", "3.mlp.up_proj",
                                       "3.self_attn.q_proj ", "10.self_attn.q_proj "};
    long last = -1;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        long at = find(t, want[i]);
        CHECK(at > last, "'%s' at %ld, after the previous row at %ld", want[i], at, last);
        if (at > last) last = at;
    }
    CHECK(find(t, "model.layers.*.weight") >= 0, "no header naming the trimmed parts:\n%s", t);
    free(t);
}

static void table_shows_stop_and_errors(void) {
    fixture fx;
    fixture_init(&fx);
    char *t = table_of(&fx.rep);
    char line[512];
    line_with(line, sizeof line, t, "10.self_attn.q_proj");
    CHECK(find(line, "plateau at 175 (best 150)") >= 0, "plateau row: %s", line);
    CHECK(find(line, "0.5000->0.2500") >= 0, "error init -> trained: %s", line);
    CHECK(find(line, "-50.0%") >= 0, "change: %s", line);
    CHECK(find(line, "0.1875") >= 0, "token p50 after training: %s", line);
    CHECK(find(line, "0.812->0.701") >= 0, "weight error init -> trained: %s", line);
    CHECK(find(line, "4096x4096") >= 0 && find(line, "1024") >= 0 && find(line, "1.000") >= 0,
          "shape, rank, bpw: %s", line);
    line_with(line, sizeof line, t, "2.mlp.up_proj");
    CHECK(find(line, "300 steps") >= 0 && find(line, "best") < 0, "full run: %s", line);
    line_with(line, sizeof line, t, "2.self_attn.q_proj");
    CHECK(find(line, "init only") >= 0, "no training: %s", line);
    /* kept the initialization: said so */
    fx.layers[1].best_step = 0;
    free(t);
    t = table_of(&fx.rep);
    line_with(line, sizeof line, t, "2.mlp.up_proj");
    CHECK(find(line, "300 steps (kept the init)") >= 0, "best step 0: %s", line);
    free(t);
}

static void table_shows_skipped_layers(void) {
    fixture fx;
    fixture_init(&fx);
    char *t = table_of(&fx.rep);
    char line[512];
    line_with(line, sizeof line, t, "1.mlp.up_proj");
    CHECK(find(line, "skipped: the budget cannot hold 4096x4096 at rank 32") >= 0,
          "skipped row: %s", line);
    CHECK(find(line, "7.0") < 0 && find(line, "9.0") < 0, "skipped row shows errors: %s", line);
    CHECK(find(t, "5 compressed, 1 skipped (copied unchanged)") >= 0, "totals:\n%s", t);
    /* means over the five compressed layers only: init (0.5+0.6+0.4+0.5+0.6)/5 = 0.52,
     * trained (0.25+0.3+0.4+0.2+0.45)/5 = 0.32 */
    CHECK(find(t, "0.5200 after init, 0.3200 trained") >= 0, "means include skipped:\n%s", t);
    free(t);
}

static void table_escapes_names(void) {
    fixture fx;
    fixture_init(&fx);
    char *t = table_of(&fx.rep);
    CHECK(count_bytes(t, '\x1b') == 0, "a raw ESC reached the table");
    CHECK(find(t, "3.mlp.up_proj\\x1b[2J") >= 0, "escaped name missing:\n%s", t);
    free(t);
}

static void table_fits_120_columns(void) {
    fixture fx;
    fixture_init(&fx);
    char *t = table_of(&fx.rep);
    /* the layer rows and the header (the totals name files, which may be long) */
    size_t lines = 0;
    for (char *p = t, *e; *p; p = *e ? e + 1 : e) {
        e = strchr(p, '\n');
        if (!e) e = p + strlen(p);
        if (e == p) break; /* the blank line before the totals */
        size_t w = 0;
        for (char *c = p; c < e; c++)
            w += ((unsigned char)*c & 0xc0) != 0x80;
        CHECK(w <= 120, "line of %zu columns: %.*s", w, (int)(e - p), p);
        lines++;
    }
    CHECK(lines == 7, "%zu header and layer lines, expected 7", lines);
    /* names that cannot be trimmed (one layer) are cut from the left to fit */
    br_layer_report one = layer("a.very.long.prefix.that.goes.on.and.on.model.layers.31.self_attn."
                                "o_proj.weight",
                                0.5, 0.25);
    one.stop = BR_STOP_PLATEAU;
    one.steps = 1750;
    one.best_step = 1500;
    br_compress_report rep;
    memset(&rep, 0, sizeof rep);
    rep.n_layers = 1;
    rep.layers = &one;
    free(t);
    t = table_of(&rep);
    char line[512];
    line_with(line, sizeof line, t, "o_proj");
    CHECK(strlen(line) <= 120, "row of %zu columns: %s", strlen(line), line);
    CHECK(find(line, "...") == 0 && find(line, "o_proj.weight ") > 0, "cut name: %s", line);
    free(t);
}

/* ---------------------------------------------------------------- HTML */

static char *html_of(const br_compress_report *rep) {
    char dir[] = "/tmp/test_cli_report-XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "no temporary directory\n");
        exit(1);
    }
    char path[128], err[256];
    snprintf(path, sizeof path, "%s/report.html", dir);
    int rc = br_cli_write_html(path, rep, "in<1>.safetensors", "out.safetensors", err, sizeof err);
    CHECK(rc == 0, "br_cli_write_html: %s", err);
    char *s = read_file(path);
    unlink(path);
    rmdir(dir);
    if (!s) s = calloc(1, 1);
    return s;
}

static void html_summary_and_table(void) {
    fixture fx;
    fixture_init(&fx);
    char *h = html_of(&fx.rep);
    CHECK(find(h, "bpw=1 paths=2 steps=300 tokens=512 seed=1") >= 0, "no options string");
    CHECK(find(h, "grams/&lt;llama&gt;&amp;co.safetensors") >= 0, "calibration file not escaped");
    CHECK(find(h, "<th>calibration</th><td>gram from") >= 0, "no calibration kind");
    CHECK(find(h, "in&lt;1&gt;.safetensors") >= 0, "input path not escaped");
    CHECK(find(h, "5 compressed, 1 skipped (copied unchanged)") >= 0, "no counts");
    CHECK(find(h, "0.5200 after init &rarr; 0.3200 trained") >= 0, "means include skipped");
    /* rows in natural order (the first cell of each) */
    static const char *const want[] = {
        "<td>model.layers.1.mlp.up_proj.weight",      "<td>model.layers.2.mlp.up_proj.weight",
        "<td>model.layers.2.self_attn.q_proj.weight", "<td>model.layers.3.mlp.up_proj",
        "<td>model.layers.3.self_attn.q_proj.weight", "<td>model.layers.10.self_attn.q_proj"};
    long last = -1;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        long at = find(h, want[i]);
        CHECK(at > last, "row '%s' at %ld, after %ld", want[i], at, last);
        if (at > last) last = at;
    }
    CHECK(find(h, "<tr class=\"skipped\">") >= 0, "skipped row not marked");
    CHECK(find(h, "the budget cannot hold 4096x4096 at rank 32") >= 0, "no note");
    CHECK(find(h, "plateau at 175 (best 150)") >= 0, "no stop reason");
    CHECK(find(h, "<td>whitened (cpu)</td>") >= 0, "no init kind");
    CHECK(find(h, "0.4100 &rarr; 0.1875") >= 0, "no token p50 init -> trained");
    CHECK(find(h, "0.5500 &rarr; 0.2500") >= 0, "no token p90");
    CHECK(find(h, "0.8120 &rarr; 0.7010") >= 0, "no weight error init -> trained");
    /* the control characters of a name never reach the page raw */
    CHECK(count_bytes(h, '\x1b') == 0, "a raw ESC in the page");
    CHECK(find(h, "up_proj\\x1b[2J") >= 0, "escaped name missing");
    free(h);
}

static void html_escapes_markup(void) {
    br_layer_report l = layer("model.layers.0.<script>alert('x')</script>&.weight", 0.5, 0.3);
    snprintf(l.note, sizeof l.note, "a \"note\" <b>");
    snprintf(l.init_kind, sizeof l.init_kind, "<i>");
    br_compress_report rep;
    memset(&rep, 0, sizeof rep);
    rep.n_layers = 1;
    rep.layers = &l;
    snprintf(rep.device, sizeof rep.device, "dev<ice>");
    snprintf(rep.options, sizeof rep.options, "include=<*>");
    snprintf(rep.calibration, sizeof rep.calibration, "<gram>");
    char *h = html_of(&rep);
    CHECK(find(h, "<script") < 0 && find(h, "<b>") < 0 && find(h, "<i>") < 0 &&
              find(h, "<ice>") < 0 && find(h, "<*>") < 0 && find(h, "<gram>") < 0,
          "markup from the report reached the page");
    CHECK(find(h, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;") >= 0,
          "escaped name missing");
    CHECK(find(h, "a &quot;note&quot; &lt;b&gt;") >= 0, "escaped note missing");
    free(h);
}

static void html_layer_curves(void) {
    fixture fx;
    fixture_init(&fx);
    char *h = html_of(&fx.rep);
    /* one loss and one held-out curve per trained layer (four of them) */
    CHECK(count_str(h, "<polyline class=\"loss\"") == 4, "%zu loss curves",
          count_str(h, "<polyline class=\"loss\""));
    CHECK(count_str(h, "<polyline class=\"eval\"") == 4, "%zu held-out curves",
          count_str(h, "<polyline class=\"eval\""));
    CHECK(count_str(h, "kept: step") == 4, "%zu kept steps labelled", count_str(h, "kept: step"));
    /* every kept step here is a held-out point: ringed */
    CHECK(count_str(h, "class=\"bestpt\"") == 4, "%zu kept points ringed",
          count_str(h, "class=\"bestpt\""));
    CHECK(find(h, "kept: step 150") >= 0, "the plateau layer's kept step is not labelled");
    CHECK(find(h, ">held-out</text>") >= 0 && find(h, ">batch loss</text>") >= 0, "no legend");
    CHECK(find(h, ">step</text>") >= 0, "no x axis label");
    /* the held-out curve's last point is at the last step run: x of the plateau
     * layer's point 7 (step 175) is the right edge of its plot */
    long at = find(h, "<h3>model.layers.10.self_attn.q_proj.weight</h3>");
    CHECK(at >= 0, "no section for the plateau layer");
    if (at >= 0) {
        const char *e = strstr(h + at, "<polyline class=\"eval\" points=\"");
        CHECK(e != NULL, "no held-out curve for the plateau layer");
        if (e) {
            e += strlen("<polyline class=\"eval\" points=\"");
            double x0 = strtod(e, NULL);
            const char *q = strchr(e, '"');
            const char *lastpt = q;
            while (lastpt > e && lastpt[-1] == ' ')
                lastpt--;
            while (lastpt > e && lastpt[-1] != ' ')
                lastpt--;
            double x7 = strtod(lastpt, NULL);
            CHECK(fabs(x0 - 58) < 0.01 && fabs(x7 - 448) < 0.01,
                  "held-out points from x %.1f to %.1f, expected 58 to 448", x0, x7);
        }
    }
    CHECK(find(h, "skipped (copied unchanged): the budget") >= 0, "skipped layer's section");
    free(h);
}

static void html_depth_plot(void) {
    fixture fx;
    fixture_init(&fx);
    char *h = html_of(&fx.rep);
    long at = find(h, "id=\"depth\"");
    CHECK(at >= 0, "no plot of error by depth");
    if (at >= 0) {
        const char *plot = h + at;
        const char *end = strstr(plot, "</svg>");
        size_t len = end ? (size_t)(end - plot) : strlen(plot);
        char *p = t_xmalloc(len + 1);
        memcpy(p, plot, len);
        p[len] = '\0';
        /* three series: self_attn.q_proj (blocks 2, 3, 10), mlp.up_proj (block 2;
         * block 1's is skipped) and the type with control characters (block 3) */
        CHECK(count_str(p, "<g class=\"series\">") == 3, "%zu series",
              count_str(p, "<g class=\"series\">"));
        CHECK(find(p, ">self_attn.q_proj</text>") >= 0, "no self_attn.q_proj series");
        CHECK(find(p, "mlp.up_proj") >= 0, "no mlp.up_proj series");
        CHECK(count_str(p, "<circle") == 5, "%zu points, expected 5", count_str(p, "<circle"));
        CHECK(find(p, "model.layers.1.mlp") < 0, "the skipped layer is plotted");
        CHECK(find(p, ">block</text>") >= 0, "no x axis label");
        CHECK(find(p, ">10</text>") >= 0, "no block 10 tick");
        free(p);
    }
    free(h);
}

/* ---------------------------------------------------------------- ETA */

static br_compress_progress train_progress(void) {
    br_compress_progress pr;
    memset(&pr, 0, sizeof pr);
    pr.phase = BR_PHASE_TRAIN;
    pr.layer = 2;
    pr.layers = 5;
    pr.step = 50;
    pr.steps = 100;
    pr.elapsed = 40;
    return pr;
}

static void eta_weighs_layers_by_work(void) {
    br_cli_progress p;
    br_cli_progress_init(&p, stderr, 1, NULL);
    /* layer 0 resumed (work 300, no time), layer 1 done in this run (work 100 in
     * 10 s), layer 2 half done (work 300 of which 150 done in 15 s): 25 s for 250
     * units; 1400 − 400 − 150 = 850 units left, 85 s */
    p.done_seconds = 10;
    p.done_layers = 1;
    p.done_work = 100;
    p.layer_start = 25;
    br_compress_progress pr = train_progress();
    pr.work_before = 400;
    pr.work_layer = 300;
    pr.work_total = 1400;
    double eta = br_cli_eta(&p, &pr);
    CHECK(fabs(eta - 85) < 1e-9, "ETA %.6f s, expected 85", eta);
    /* without a work estimate: the layer's steps left at its rate (15 s) plus two
     * layers at the mean of the finished one (10 s) */
    pr.work_before = pr.work_layer = pr.work_total = 0;
    eta = br_cli_eta(&p, &pr);
    CHECK(fabs(eta - 35) < 1e-9, "fallback ETA %.6f s, expected 35", eta);
    /* nothing done yet in this run (the first step): no guess */
    br_cli_progress_init(&p, stderr, 1, NULL);
    p.layer_start = 40;
    pr.work_before = 400;
    pr.work_layer = 300;
    pr.work_total = 1400;
    pr.step = 0;
    CHECK(br_cli_eta(&p, &pr) < 0, "ETA with nothing measured: %f", br_cli_eta(&p, &pr));
    /* the last step of the last layer: nothing left */
    pr.step = pr.steps = 100;
    pr.work_before = 1100;
    pr.elapsed = 60;
    CHECK(fabs(br_cli_eta(&p, &pr)) < 1e-9, "ETA at the end: %f", br_cli_eta(&p, &pr));
}

/* The callback keeps the rate's inputs: finished layers count, resumed ones not;
 * the bar shows the work-weighted ETA. */
static void progress_line_eta(void) {
    FILE *f = tmpfile();
    if (!f) {
        fprintf(stderr, "no temporary file\n");
        exit(1);
    }
    br_cli_progress p;
    br_cli_progress_init(&p, f, 0, NULL);
    p.tty = 1; /* draw the bar as on a terminal */
    br_layer_report l0 = layer("blk.0.big.weight", 0.5, 0.3);
    br_layer_report l1 = layer("blk.1.small.weight", 0.5, 0.3);
    br_layer_report l2 = layer("blk.2.big.weight", 0.5, 0.3);
    br_compress_progress pr;
    memset(&pr, 0, sizeof pr);
    pr.layers = 4;
    pr.work_total = 1500; /* layers of work 400, 100, 400 and 600 */
    /* layer 0 (work 400) comes from the checkpoint */
    pr.phase = BR_PHASE_RESUMED;
    pr.report = &l0;
    pr.work_layer = 400;
    l0.resumed = 1;
    br_cli_progress_cb(&pr, &p);
    /* layer 1 (work 100) takes 20 s */
    pr.layer = 1;
    pr.report = &l1;
    pr.work_before = 400;
    pr.work_layer = 100;
    pr.phase = BR_PHASE_INIT;
    pr.elapsed = 1;
    br_cli_progress_cb(&pr, &p);
    pr.phase = BR_PHASE_DONE;
    pr.elapsed = 21;
    br_cli_progress_cb(&pr, &p);
    CHECK(p.done_layers == 1 && fabs(p.done_work - 100) < 1e-12 &&
              fabs(p.done_seconds - 20) < 1e-12,
          "after layer 1: %zu layers, work %f, %f s", p.done_layers, p.done_work, p.done_seconds);
    /* layer 2 (work 400) at step 10 of 100 after 8 s: 28 s for 140 units, 960 left:
     * 192 s (the mean layer time says 72 s for this one + 20 s for the last, which
     * is six times the size of the 20 s one) */
    pr.layer = 2;
    pr.report = &l2;
    pr.work_before = 500;
    pr.work_layer = 400;
    pr.phase = BR_PHASE_INIT;
    pr.elapsed = 21;
    br_cli_progress_cb(&pr, &p);
    pr.phase = BR_PHASE_TRAIN;
    pr.step = 10;
    pr.steps = 100;
    pr.elapsed = 29;
    br_cli_progress_cb(&pr, &p);
    char *s = slurp(f);
    fclose(f);
    CHECK(find(s, "ETA 3:12") >= 0, "no 'ETA 3:12' in the progress:\n%s", s);
    free(s);
}

/* A report of `phase` for layer `layer` (work 100 of 400, 4 layers) at `elapsed`. */
static void feed(br_cli_progress *p, br_compress_phase phase, size_t layer, double elapsed,
                 int step, double work_before) {
    br_compress_progress pr;
    memset(&pr, 0, sizeof pr);
    pr.phase = phase;
    pr.layer = layer;
    pr.layers = 4;
    pr.step = step;
    pr.steps = 100;
    pr.elapsed = elapsed;
    pr.work_before = work_before;
    pr.work_layer = 100;
    pr.work_total = 400;
    br_cli_progress_cb(&pr, p);
}

/* Two devices, each on a layer at once: the rate counts both layers' steps and
 * seconds, the work left is shared between the devices (four layers of work
 * 100). */
static void eta_shares_work_among_devices(void) {
    FILE *f = tmpfile();
    if (!f) {
        fprintf(stderr, "no temporary file\n");
        exit(1);
    }
    br_cli_progress p;
    br_cli_progress_init(&p, f, 0, NULL);
    p.tty = 0;
    p.devices = 2;
    br_compress_progress pr;
    memset(&pr, 0, sizeof pr);
    /* layers 0 and 1 begin at 0 s, each half done at 10 s: 100 units in 10 s on
     * two devices, 300 left: 30 s */
    feed(&p, BR_PHASE_INIT, 0, 0, 0, 0);
    feed(&p, BR_PHASE_INIT, 1, 0, 0, 0);
    feed(&p, BR_PHASE_TRAIN, 0, 10, 50, 0);
    feed(&p, BR_PHASE_TRAIN, 1, 10, 50, 0);
    CHECK(p.n_running == 2, "%zu layers running", p.n_running);
    pr = (br_compress_progress){.phase = BR_PHASE_TRAIN,
                                .layer = 1,
                                .layers = 4,
                                .step = 50,
                                .steps = 100,
                                .elapsed = 10,
                                .work_layer = 100,
                                .work_total = 400};
    double eta = br_cli_eta(&p, &pr);
    CHECK(fabs(eta - 30) < 1e-9, "ETA %.6f s, expected 30", eta);
    /* both done at 20 s (40 device-seconds), layers 2 and 3 a quarter done at
     * 25 s: 250 units in 50 device-seconds, 150 left on two devices: 15 s */
    feed(&p, BR_PHASE_DONE, 0, 20, 100, 0);
    feed(&p, BR_PHASE_DONE, 1, 20, 100, 100);
    CHECK(p.n_running == 0 && p.finished == 2 && fabs(p.done_seconds - 40) < 1e-12,
          "after two layers: %zu running, %zu finished, %f s", p.n_running, p.finished,
          p.done_seconds);
    feed(&p, BR_PHASE_INIT, 2, 20, 0, 200);
    feed(&p, BR_PHASE_INIT, 3, 20, 0, 200);
    feed(&p, BR_PHASE_TRAIN, 2, 25, 25, 200);
    pr = (br_compress_progress){.phase = BR_PHASE_TRAIN,
                                .layer = 3,
                                .layers = 4,
                                .step = 25,
                                .steps = 100,
                                .elapsed = 25,
                                .work_before = 200,
                                .work_layer = 100,
                                .work_total = 400};
    eta = br_cli_eta(&p, &pr);
    CHECK(fabs(eta - 15) < 1e-9, "ETA %.6f s, expected 15", eta);
    /* layer 2 done at 40 s (60 device-seconds for 300 units), layer 3 half done
     * at 45 s (25 s more for 50 units): the last layer runs alone, on one device
     * whatever the count: 50 units left at 85 / 350 s each */
    feed(&p, BR_PHASE_DONE, 2, 40, 100, 200);
    pr.step = 50;
    pr.elapsed = 45;
    pr.work_before = 300;
    eta = br_cli_eta(&p, &pr);
    CHECK(fabs(eta - 85.0 / 350.0 * 50.0) < 1e-9, "ETA %.6f s, expected %.6f", eta,
          85.0 / 350.0 * 50.0);
    fclose(f);
}

/* `--devices`: the items as given, each checked; a message naming the bad one. */
static void device_lists(void) {
    static const struct {
        const char *list;
        size_t n;
        const char *msg; /* NULL: accepted */
    } cases[] = {
        {"cpu,cpu", 2, NULL},
        {"cuda:0,cuda:1,cuda:7", 3, NULL},
        {"cuda:3", 1, NULL},
        {"cuda,cuda:1024", 2, NULL},
        {"vulkan:0,vulkan:1", 2, NULL},
        {"", 0, "the list is empty"},
        {"cpu,,cpu", 0, "item 2 is empty"},
        {",cpu", 0, "item 1 is empty"},
        {"cpu,", 0, "item 2 is empty"},
        {"auto,cpu", 0, "item 1 'auto' picks one device by itself"},
        {"vulkan:0,vulkan", 0, "item 2 'vulkan' picks one device by itself"},
        {"cpu,gpu", 0, "item 2 'gpu' is not a device: expected cpu, cuda, cuda:N or vulkan:N"},
        {"CPU", 0, "item 1 'CPU' is not a device"},
        {"cuda:-1", 0, "item 1 'cuda:-1' is not a device"},
        {"cuda: 1", 0, "item 1 'cuda: 1' is not a device"},
        {"cuda:1025", 0, "item 1 'cuda:1025' is not a device"},
        {"cuda:", 0, "item 1 'cuda:' is not a device"},
        {"cudax", 0, "item 1 'cudax' is not a device"},
        {"vulkan:+1", 0, "item 1 'vulkan:+1' is not a device"},
        {"cuda:0,cuda:1,cpu", 0, "items 1 'cuda:0' and 3 'cpu' are different kinds of device"},
        {"cpu,cuda", 0, "items 1 'cpu' and 2 'cuda' are different kinds of device (cpu, cuda)"},
        {"cuda:0,vulkan:0", 0, "different kinds of device (cuda, vulkan)"},
        {"cuda:0,cuda", 0, "items 1 'cuda:0' and 2 'cuda' are the same device, cuda:0"},
        {"cuda:2,cuda:1,cuda:01", 0,
         "items 2 'cuda:1' and 3 'cuda:01' are the same device, cuda:1"},
        {"vulkan:1,vulkan:1", 0, "items 1 'vulkan:1' and 2 'vulkan:1' are the same device"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        br_cli_device_list l;
        char err[600] = "";
        int rc = br_cli_device_list_parse(cases[i].list, &l, err, sizeof err);
        if (!cases[i].msg) {
            CHECK(rc == 0 && l.n == cases[i].n, "'%s': rc %d, %zu items (%s)", cases[i].list, rc,
                  l.n, err);
        } else {
            CHECK(rc != 0 && l.n == 0 && !l.items && strstr(err, cases[i].msg),
                  "'%s': rc %d, message '%s', expected '%s'", cases[i].list, rc, err, cases[i].msg);
        }
        br_cli_device_list_free(&l);
    }
    br_cli_device_list l;
    char err[600] = "";
    CHECK(br_cli_device_list_parse("cuda,cuda:2", &l, err, sizeof err) == 0 && l.n == 2 &&
              !strcmp(l.items[0], "cuda") && !strcmp(l.items[1], "cuda:2"),
          "items of 'cuda,cuda:2'");
    br_cli_device_list_free(&l);
    /* more than BR_COMPRESS_MAX_DEVICES */
    char many[4 * (BR_COMPRESS_MAX_DEVICES + 1) + 1];
    size_t pos = 0;
    for (int k = 0; k <= BR_COMPRESS_MAX_DEVICES; k++)
        pos += (size_t)snprintf(many + pos, sizeof many - pos, "%scpu", k ? "," : "");
    CHECK(br_cli_device_list_parse(many, &l, err, sizeof err) != 0 && strstr(err, "at most 256"),
          "%d devices: '%s'", BR_COMPRESS_MAX_DEVICES + 1, err);
    br_cli_device_list_free(&l);
}

static void progress_escapes_names(void) {
    for (int tty = 0; tty <= 1; tty++) {
        FILE *f = tmpfile();
        if (!f) {
            fprintf(stderr, "no temporary file\n");
            exit(1);
        }
        br_cli_progress p;
        br_cli_progress_init(&p, f, 0, NULL);
        p.tty = tty;
        br_layer_report l = layer("blk.0.\x1b]0;owned\x07q.weight", 0.5, 0.3);
        br_compress_progress pr;
        memset(&pr, 0, sizeof pr);
        pr.layers = 1;
        pr.report = &l;
        pr.phase = BR_PHASE_INIT;
        br_cli_progress_cb(&pr, &p);
        pr.phase = BR_PHASE_TRAIN;
        pr.step = pr.steps = 10;
        pr.elapsed = 1;
        br_cli_progress_cb(&pr, &p);
        pr.phase = BR_PHASE_DONE;
        br_cli_progress_cb(&pr, &p);
        char *s = slurp(f);
        fclose(f);
        /* the only ESC bytes are the display's own "erase the line" */
        CHECK(count_bytes(s, '\x1b') == count_str(s, "\x1b[K"), "tty %d: a raw ESC from the name",
              tty);
        CHECK(count_bytes(s, '\x07') == 0, "tty %d: a raw BEL from the name", tty);
        CHECK(find(s, "\\x1b]0;owned\\x07q") >= 0, "tty %d: escaped name missing:\n%s", tty, s);
        free(s);
    }
}

static void progress_reports_skipped(void) {
    FILE *f = tmpfile();
    if (!f) {
        fprintf(stderr, "no temporary file\n");
        exit(1);
    }
    br_cli_progress p;
    br_cli_progress_init(&p, f, 0, NULL);
    p.tty = 0;
    br_layer_report l = layer("blk.0.q.weight", 0.5, 0.3);
    l.outcome = BR_LAYER_SKIPPED;
    snprintf(l.note, sizeof l.note, "trained weight error 1.2 > 1");
    br_compress_progress pr;
    memset(&pr, 0, sizeof pr);
    pr.layers = 1;
    pr.report = &l;
    pr.phase = BR_PHASE_DONE;
    br_cli_progress_cb(&pr, &p);
    char *s = slurp(f);
    fclose(f);
    CHECK(find(s, "skipped (copied unchanged): trained weight error 1.2 > 1") >= 0, "%s", s);
    free(s);
}

T_RUN("cli_report", T_CASE(names_compare_naturally), T_CASE(layer_order_is_natural),
      T_CASE(block_index_and_type), T_CASE(escape_control_bytes), T_CASE(table_in_natural_order),
      T_CASE(table_shows_stop_and_errors), T_CASE(table_shows_skipped_layers),
      T_CASE(table_escapes_names), T_CASE(table_fits_120_columns), T_CASE(html_summary_and_table),
      T_CASE(html_escapes_markup), T_CASE(html_layer_curves), T_CASE(html_depth_plot),
      T_CASE(eta_weighs_layers_by_work), T_CASE(progress_line_eta), T_CASE(progress_escapes_names),
      T_CASE(progress_reports_skipped), T_CASE(eta_shares_work_among_devices), T_CASE(device_lists))
