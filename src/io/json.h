/* A small JSON reader for untrusted input (safetensors headers, shard indexes,
 * BLR metadata). No recursion: nesting is tracked on a fixed stack with a depth
 * limit; the document becomes a flat array of nodes in document order.
 *
 * Layout: a container's children follow it; node.next is the index just past its
 * subtree. An object's children alternate key (a string node) and value. */
#ifndef BR_IO_JSON_H
#define BR_IO_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "bitrank.h"

#define BR_JSON_MAX_DEPTH 64
#define BR_JSON_MAX_NODES ((size_t)1 << 24)

typedef enum br_json_kind {
    BR_JSON_NULL = 0,
    BR_JSON_FALSE,
    BR_JSON_TRUE,
    BR_JSON_NUMBER,
    BR_JSON_STRING,
    BR_JSON_ARRAY,
    BR_JSON_OBJECT,
} br_json_kind;

typedef struct br_json_node {
    br_json_kind kind;
    uint32_t count; /* arrays: elements; objects: members (key-value pairs) */
    uint32_t next;  /* index of the first node after this one's subtree */
    uint32_t len;   /* strings: decoded bytes; numbers: characters of text */
    size_t off;     /* strings: offset in doc.strings; numbers: offset in text */
} br_json_node;

typedef struct br_json {
    br_json_node *nodes;
    size_t n, cap;
    char *strings; /* decoded strings, each NUL-terminated */
    size_t slen, scap;
    const char *text; /* the parsed text (borrowed; numbers point into it) */
    size_t text_len;
} br_json;

/* Parse text[0..len) (exactly one value, surrounded by optional whitespace). The
 * text must be valid UTF-8; strings may not contain NUL (\u0000) or lone
 * surrogates. On failure: BR_E_FORMAT (or BR_E_NOMEM) and a message "byte N: what"
 * in err. The doc must be freed with br_json_free either way. */
br_status br_json_parse(br_json *doc, const char *text, size_t len, char *err, size_t err_len);
void br_json_free(br_json *doc);

/* The decoded string of a string node. */
const char *br_json_str(const br_json *doc, size_t node);
/* 1 and *out = the value if the node is a number written as a plain non-negative
 * integer (digits only) that fits u64; 0 otherwise. */
int br_json_u64(const br_json *doc, size_t node, uint64_t *out);
/* 1 and *out = the value if the node is a number (any JSON number), else 0. */
int br_json_double(const br_json *doc, size_t node, double *out);
/* Index of the first child of a container (== node + 1) and of the sibling after
 * `child` inside the same container. */
static inline size_t br_json_first(size_t node) { return node + 1; }
static inline size_t br_json_after(const br_json *doc, size_t child) {
    return doc->nodes[child].next;
}
/* The value of member `key` of an object node, or 0 (never a valid value index)
 * when absent; *dup is set to 1 if the key occurs more than once. */
size_t br_json_member(const br_json *doc, size_t object, const char *key, int *dup);

/* Position of the first byte of text[0..len) that breaks UTF-8 (overlong forms,
 * surrogates and code points above U+10FFFF included), or len if it is valid. */
size_t br_utf8_check(const char *text, size_t len);

/* Append s (NUL-terminated) as a JSON string literal, with quotes and escapes, to
 * the growable buffer *buf (*len used, *cap allocated). 0 on success, -1 when out
 * of memory. */
int br_json_put_string(char **buf, size_t *len, size_t *cap, const char *s);
/* Append raw bytes. 0 on success, -1 when out of memory. */
int br_json_put_raw(char **buf, size_t *len, size_t *cap, const char *s, size_t n);

#endif
