/* The JSON reader of json.h: one pass over the text, an explicit stack instead of
 * recursion, every length checked before it is used. */
#include "io/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    br_json *doc;
    const unsigned char *s;
    size_t len, pos;
    char *err;
    size_t err_len;
} parser;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static br_status
fail(parser *p, const char *fmt, ...) {
    if (p->err && p->err_len) {
        int k = snprintf(p->err, p->err_len, "byte %zu: ", p->pos);
        if (k >= 0 && (size_t)k < p->err_len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(p->err + k, p->err_len - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return BR_E_FORMAT;
}

static br_status out_of_memory(parser *p) {
    if (p->err && p->err_len) snprintf(p->err, p->err_len, "out of memory parsing JSON");
    return BR_E_NOMEM;
}

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static br_status add_node(parser *p, br_json_kind kind, size_t *idx) {
    br_json *d = p->doc;
    if (d->n >= BR_JSON_MAX_NODES) return fail(p, "more than %zu JSON values", BR_JSON_MAX_NODES);
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 64;
        br_json_node *nodes = realloc(d->nodes, cap * sizeof *nodes);
        if (!nodes) return out_of_memory(p);
        d->nodes = nodes;
        d->cap = cap;
    }
    d->nodes[d->n] = (br_json_node){.kind = kind, .next = (uint32_t)(d->n + 1)};
    *idx = d->n++;
    return BR_OK;
}

int br_json_put_raw(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (n > SIZE_MAX / 2 - *len - 1) return -1;
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1)
            c *= 2;
        char *b = realloc(*buf, c);
        if (!b) return -1;
        *buf = b;
        *cap = c;
    }
    if (n) memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

static br_status put_bytes(parser *p, const void *s, size_t n) {
    br_json *d = p->doc;
    return br_json_put_raw(&d->strings, &d->slen, &d->scap, s, n) ? out_of_memory(p) : BR_OK;
}

static int hex_value(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Four hex digits after "\u" at p->pos. */
static br_status read_hex4(parser *p, uint32_t *out) {
    if (p->len - p->pos < 4) return fail(p, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex_value(p->s[p->pos + (size_t)i]);
        if (h < 0) return fail(p, "invalid hex digit in a \\u escape");
        v = v << 4 | (uint32_t)h;
    }
    p->pos += 4;
    *out = v;
    return BR_OK;
}

static br_status put_utf8(parser *p, uint32_t cp) {
    unsigned char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | cp >> 6);
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | cp >> 12);
        b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (unsigned char)(0xF0 | cp >> 18);
        b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        b[3] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return put_bytes(p, b, n);
}

/* A \uXXXX escape (p->pos just past the 'u'), a surrogate pair included. */
static br_status parse_unicode_escape(parser *p) {
    uint32_t cp;
    br_status st = read_hex4(p, &cp);
    if (st != BR_OK) return st;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(p, "lone low surrogate in a \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
            return fail(p, "high surrogate not followed by a low one");
        p->pos += 2;
        uint32_t lo;
        st = read_hex4(p, &lo);
        if (st != BR_OK) return st;
        if (lo < 0xDC00 || lo > 0xDFFF) return fail(p, "high surrogate not followed by a low one");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (cp == 0) return fail(p, "\\u0000 (NUL) in a string");
    return put_utf8(p, cp);
}

static br_status parse_string(parser *p, size_t *idx) {
    br_status st = add_node(p, BR_JSON_STRING, idx);
    if (st != BR_OK) return st;
    size_t start = p->doc->slen;
    p->pos++; /* the opening quote */
    for (;;) {
        if (p->pos >= p->len) return fail(p, "unterminated string");
        unsigned char c = p->s[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20) return fail(p, "control character 0x%02x in a string", c);
        if (c != '\\') {
            /* a run of plain bytes (the text is valid UTF-8 already) */
            size_t run = p->pos;
            while (run < p->len && p->s[run] != '"' && p->s[run] != '\\' && p->s[run] >= 0x20)
                run++;
            st = put_bytes(p, p->s + p->pos, run - p->pos);
            if (st != BR_OK) return st;
            p->pos = run;
            continue;
        }
        if (++p->pos >= p->len) return fail(p, "unterminated escape");
        unsigned char e = p->s[p->pos++];
        char out;
        switch (e) {
        case '"': out = '"'; break;
        case '\\': out = '\\'; break;
        case '/': out = '/'; break;
        case 'b': out = '\b'; break;
        case 'f': out = '\f'; break;
        case 'n': out = '\n'; break;
        case 'r': out = '\r'; break;
        case 't': out = '\t'; break;
        case 'u':
            st = parse_unicode_escape(p);
            if (st != BR_OK) return st;
            continue;
        default: p->pos--; return fail(p, "invalid escape '\\%c'", e >= 0x20 && e < 0x7f ? e : '?');
        }
        st = put_bytes(p, &out, 1);
        if (st != BR_OK) return st;
    }
    br_json *d = p->doc;
    size_t n = d->slen - start;
    if (n >= UINT32_MAX) return fail(p, "string of %zu bytes is too long", n);
    st = put_bytes(p, "", 0); /* make sure the arena exists even for "" */
    if (st != BR_OK) return st;
    d->slen++; /* keep the terminating NUL */
    d->nodes[*idx].off = start;
    d->nodes[*idx].len = (uint32_t)n;
    return BR_OK;
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static br_status parse_number(parser *p, size_t *idx) {
    size_t start = p->pos;
    if (p->s[p->pos] == '-') p->pos++;
    if (p->pos < p->len && p->s[p->pos] == '0') {
        p->pos++;
    } else if (p->pos < p->len && is_digit(p->s[p->pos])) {
        while (p->pos < p->len && is_digit(p->s[p->pos]))
            p->pos++;
    } else {
        return fail(p, "invalid number");
    }
    if (p->pos < p->len && p->s[p->pos] == '.') {
        p->pos++;
        if (p->pos >= p->len || !is_digit(p->s[p->pos])) return fail(p, "invalid number");
        while (p->pos < p->len && is_digit(p->s[p->pos]))
            p->pos++;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->len || !is_digit(p->s[p->pos])) return fail(p, "invalid number");
        while (p->pos < p->len && is_digit(p->s[p->pos]))
            p->pos++;
    }
    if (p->pos - start >= UINT32_MAX) return fail(p, "number too long");
    br_status st = add_node(p, BR_JSON_NUMBER, idx);
    if (st != BR_OK) return st;
    p->doc->nodes[*idx].off = start;
    p->doc->nodes[*idx].len = (uint32_t)(p->pos - start);
    return BR_OK;
}

static br_status parse_literal(parser *p, const char *word, br_json_kind kind, size_t *idx) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return fail(p, "invalid literal (expected %s)", word);
    p->pos += n;
    return add_node(p, kind, idx);
}

size_t br_utf8_check(const char *text, size_t len) {
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0) {
            n = 1, cp = c & 0x1Fu, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2, cp = c & 0x0Fu, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3, cp = c & 0x07u, min = 0x10000;
        } else {
            return i;
        }
        if (len - i - 1 < n) return i;
        for (size_t k = 1; k <= n; k++) {
            unsigned char b = s[i + k];
            if ((b & 0xC0) != 0x80) return i;
            cp = cp << 6 | (b & 0x3Fu);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += n + 1;
    }
    return len;
}

enum { WANT_VALUE, WANT_KEY, AFTER_VALUE };

br_status br_json_parse(br_json *doc, const char *text, size_t len, char *err, size_t err_len) {
    memset(doc, 0, sizeof *doc);
    doc->text = text;
    doc->text_len = len;
    if (err && err_len) err[0] = '\0';
    parser p = {
        .doc = doc, .s = (const unsigned char *)text, .len = len, .err = err, .err_len = err_len};
    if (!text && len) return fail(&p, "no text");
    size_t bad = br_utf8_check(text, len);
    if (bad < len) {
        p.pos = bad;
        return fail(&p, "invalid UTF-8 (0x%02x)", p.s[bad]);
    }
    size_t stack[BR_JSON_MAX_DEPTH];
    size_t depth = 0;
    int state = WANT_VALUE;
    br_status st;
    for (;;) {
        skip_ws(&p);
        if (state == WANT_KEY) {
            if (p.pos >= len || p.s[p.pos] != '"') return fail(&p, "expected a string key");
            size_t key;
            if ((st = parse_string(&p, &key)) != BR_OK) return st;
            skip_ws(&p);
            if (p.pos >= len || p.s[p.pos] != ':') return fail(&p, "expected ':' after a key");
            p.pos++;
            state = WANT_VALUE;
            continue;
        }
        if (state == WANT_VALUE) {
            if (p.pos >= len) return fail(&p, "unexpected end of the text");
            unsigned char c = p.s[p.pos];
            size_t idx;
            if (c == '{' || c == '[') {
                if (depth == BR_JSON_MAX_DEPTH)
                    return fail(&p, "nested deeper than %d levels", BR_JSON_MAX_DEPTH);
                if ((st = add_node(&p, c == '{' ? BR_JSON_OBJECT : BR_JSON_ARRAY, &idx)) != BR_OK)
                    return st;
                stack[depth++] = idx;
                p.pos++;
                skip_ws(&p);
                if (p.pos < len && p.s[p.pos] == (c == '{' ? '}' : ']')) { /* empty */
                    p.pos++;
                    doc->nodes[idx].next = (uint32_t)doc->n;
                    depth--;
                    state = AFTER_VALUE;
                } else {
                    state = c == '{' ? WANT_KEY : WANT_VALUE;
                }
                continue;
            }
            if (c == '"')
                st = parse_string(&p, &idx);
            else if (c == '-' || is_digit(c))
                st = parse_number(&p, &idx);
            else if (c == 't')
                st = parse_literal(&p, "true", BR_JSON_TRUE, &idx);
            else if (c == 'f')
                st = parse_literal(&p, "false", BR_JSON_FALSE, &idx);
            else if (c == 'n')
                st = parse_literal(&p, "null", BR_JSON_NULL, &idx);
            else if (c >= 0x20 && c < 0x7f)
                st = fail(&p, "unexpected character '%c'", c);
            else
                st = fail(&p, "unexpected byte 0x%02x", c);
            if (st != BR_OK) return st;
            state = AFTER_VALUE;
            continue;
        }
        /* AFTER_VALUE: a value has ended */
        if (depth == 0) {
            if (p.pos != len) return fail(&p, "unexpected text after the end of the JSON value");
            return BR_OK;
        }
        size_t top = stack[depth - 1];
        br_json_node *t = &doc->nodes[top];
        t->count++;
        if (p.pos >= len) return fail(&p, "unexpected end of the text");
        unsigned char c = p.s[p.pos];
        if (c == ',') {
            p.pos++;
            state = t->kind == BR_JSON_OBJECT ? WANT_KEY : WANT_VALUE;
        } else if ((c == '}' && t->kind == BR_JSON_OBJECT) ||
                   (c == ']' && t->kind == BR_JSON_ARRAY)) {
            p.pos++;
            t->next = (uint32_t)doc->n;
            depth--;
        } else {
            return fail(&p, "expected ',' or '%c'", t->kind == BR_JSON_OBJECT ? '}' : ']');
        }
    }
}

void br_json_free(br_json *doc) {
    if (!doc) return;
    free(doc->nodes);
    free(doc->strings);
    memset(doc, 0, sizeof *doc);
}

const char *br_json_str(const br_json *doc, size_t node) {
    return doc->strings + doc->nodes[node].off;
}

int br_json_u64(const br_json *doc, size_t node, uint64_t *out) {
    const br_json_node *nd = &doc->nodes[node];
    if (nd->kind != BR_JSON_NUMBER || nd->len == 0) return 0;
    const char *s = doc->text + nd->off;
    uint64_t v = 0;
    for (size_t i = 0; i < nd->len; i++) {
        if (!is_digit((unsigned char)s[i])) return 0;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

int br_json_double(const br_json *doc, size_t node, double *out) {
    const br_json_node *nd = &doc->nodes[node];
    if (nd->kind != BR_JSON_NUMBER || nd->len == 0 || nd->len >= 128) return 0;
    char buf[128];
    memcpy(buf, doc->text + nd->off, nd->len);
    buf[nd->len] = '\0';
    *out = strtod(buf, NULL);
    return 1;
}

size_t br_json_member(const br_json *doc, size_t object, const char *key, int *dup) {
    const br_json_node *o = &doc->nodes[object];
    size_t found = 0;
    if (dup) *dup = 0;
    if (o->kind != BR_JSON_OBJECT) return 0;
    size_t k = br_json_first(object);
    for (uint32_t i = 0; i < o->count; i++) {
        size_t v = k + 1;
        if (strcmp(br_json_str(doc, k), key) == 0) {
            if (found && dup) *dup = 1;
            if (!found) found = v;
        }
        k = br_json_after(doc, v);
    }
    return found;
}

int br_json_put_string(char **buf, size_t *len, size_t *cap, const char *s) {
    if (br_json_put_raw(buf, len, cap, "\"", 1)) return -1;
    const char *run = s;
    for (const char *c = s;; c++) {
        unsigned char u = (unsigned char)*c;
        if (u != '\0' && u != '"' && u != '\\' && u >= 0x20) continue;
        if (br_json_put_raw(buf, len, cap, run, (size_t)(c - run))) return -1;
        if (u == '\0') break;
        char esc[8];
        switch (u) {
        case '"': memcpy(esc, "\\\"", 3); break;
        case '\\': memcpy(esc, "\\\\", 3); break;
        case '\n': memcpy(esc, "\\n", 3); break;
        case '\r': memcpy(esc, "\\r", 3); break;
        case '\t': memcpy(esc, "\\t", 3); break;
        default: snprintf(esc, sizeof esc, "\\u%04x", u); break;
        }
        if (br_json_put_raw(buf, len, cap, esc, strlen(esc))) return -1;
        run = c + 1;
    }
    return br_json_put_raw(buf, len, cap, "\"", 1);
}
