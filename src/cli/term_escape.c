/* Escaping control characters for the terminal. */
#include <stdio.h>
#include <string.h>

#include "cli/term_escape.h"

/* Bytes of the UTF-8 character at p (1 for a byte that does not start a whole one). */
static size_t char_len(const unsigned char *p) {
    size_t n = p[0] >= 0xf0 && p[0] <= 0xf7   ? 4
               : p[0] >= 0xe0 && p[0] <= 0xef ? 3
               : p[0] >= 0xc0 && p[0] <= 0xdf ? 2
                                              : 1;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80) return 1;
    return n;
}

void br_cli_escape(char *dst, size_t cap, const char *src) {
    if (!cap) return;
    size_t at = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p;) {
        size_t n = char_len(p);
        int control = *p < 0x20 || *p == 0x7f || (n == 2 && p[0] == 0xc2 && p[1] <= 0x9f);
        size_t need = control ? 4 * n : n;
        if (at + need >= cap) break;
        if (control) {
            for (size_t i = 0; i < n; i++)
                snprintf(dst + at + 4 * i, cap - at - 4 * i, "\\x%02x", p[i]);
        } else {
            memcpy(dst + at, p, n);
        }
        at += need;
        p += n;
    }
    dst[at] = '\0';
}
