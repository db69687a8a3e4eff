/* text.h -- short strings built without printf, for the order path.
 *
 * printf's format machinery costs ~1,000 instructions a call, and an order made a
 * dozen such calls for key names, its record, its token and plain copies. These
 * append to a fixed buffer instead. Like snprintf they never write past the buffer
 * and always leave it NUL-terminated (what does not fit is cut off); unlike it they
 * do not report how much was cut: callers size their buffers for the names they
 * build (names.h limits).
 */
#ifndef BASE_TEXT_H
#define BASE_TEXT_H

#include <stddef.h>
#include <stdint.h>

struct text {
    char *p;   /* where the next character goes */
    char *end; /* the buffer's last byte, kept for the NUL */
};

/* Start writing at buf[0..size), size >= 1 (buf becomes ""). */
struct text text_at(char *buf, size_t size);
void text_str(struct text *t, const char *s);
void text_ll(struct text *t, long long v);
/* `v` as 16 lowercase hexadecimal digits. */
void text_hex64(struct text *t, uint64_t v);

/* Copy `src` into dst[0..size), cut to fit; returns dst. */
char *text_copy(char *dst, size_t size, const char *src);

#endif
