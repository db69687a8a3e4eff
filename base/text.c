/* text.c -- short strings built without printf (see text.h). */
#include "base/text.h"

struct text text_at(char *buf, size_t size)
{
    buf[0] = '\0';
    return (struct text){buf, buf + size - 1};
}

static void put(struct text *t, char c)
{
    if (t->p < t->end)
        *t->p++ = c;
    *t->p = '\0';
}

void text_str(struct text *t, const char *s)
{
    while (*s != '\0' && t->p < t->end)
        *t->p++ = *s++;
    *t->p = '\0';
}

void text_ll(struct text *t, long long v)
{
    char digits[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do
        digits[n++] = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    if (v < 0)
        put(t, '-');
    while (n > 0)
        put(t, digits[--n]);
}

void text_hex64(struct text *t, uint64_t v)
{
    static const char hex[] = "0123456789abcdef";
    for (int shift = 60; shift >= 0; shift -= 4)
        put(t, hex[(v >> shift) & 0xf]);
}

char *text_copy(char *dst, size_t size, const char *src)
{
    struct text t = text_at(dst, size);
    text_str(&t, src);
    return dst;
}
