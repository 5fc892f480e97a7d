/* Text from files (tensor names, paths) made safe to print on a terminal. */
#ifndef BR_CLI_TERM_ESCAPE_H
#define BR_CLI_TERM_ESCAPE_H

#include <stddef.h>

/* src into dst (cap bytes, always NUL-terminated when cap > 0) with every control
 * character written as \xNN: the bytes below 0x20, 0x7f, and the C1 controls
 * U+0080..U+009F in their UTF-8 form (C2 80..C2 9F), which a terminal may take
 * for escape sequences (a tensor name holding ESC [ 2 J clears the screen).
 * Other bytes, UTF-8 text included, are copied; the output is cut at a whole
 * character or escape when dst is too small (4·strlen(src) + 1 bytes always
 * suffice). */
void br_cli_escape(char *dst, size_t cap, const char *src);

#endif
