/* recpack.c -- the order record packed for Redis and unpacked (see recpack.h). */
#include "segments/redis/recpack.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/names.h"
#include "base/text.h"
#include "base/xalloc.h"

/* The JSON being packed, read from `p` up to `end` (its NUL), and the packed text. */
struct scan {
    const char *p, *end;
    char *out, *out_end; /* out_end: one past the last byte the NUL may take */
};

/* The n bytes of `lit` at the scan's place: advance past them. */
static bool skip(struct scan *s, const char *lit, size_t n)
{
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, lit, n) != 0)
        return false;
    s->p += n;
    return true;
}

#define SKIP(s, lit) skip((s), (lit), sizeof(lit) - 1)

/* Append n bytes to the packed text; false when they do not fit. */
static bool put(struct scan *s, const char *src, size_t n)
{
    if ((size_t)(s->out_end - s->out) <= n)
        return false;
    memcpy(s->out, src, n);
    s->out += n;
    return true;
}

/* An integer as text_ll writes it at the scan's place: advance past it and, when
 * `sep` is not 0, append `sep` and it (sep ' ': a word; '#': the first). */
static bool number(struct scan *s, char sep)
{
    const char *q = s->p;
    if (q < s->end && *q == '-')
        q++;
    if (q == s->end || *q < '0' || *q > '9')
        return false;
    while (q < s->end && *q >= '0' && *q <= '9')
        q++;
    size_t n = (size_t)(q - s->p);
    if (n >= 24 || (sep != 0 && (!put(s, &sep, 1) || !put(s, s->p, n))))
        return false;
    s->p = q;
    return true;
}

char *rd_record_pack(const char *json, const char *id, const char *sku, size_t sku_len,
                     char *buf, size_t cap)
{
    struct scan s = {json, json + strlen(json), buf, buf + cap};
    if (cap == 0 || !SKIP(&s, "{\"order_id\":\"") || !skip(&s, id, strlen(id)) ||
        !SKIP(&s, "\",\"sku\":\"") || !skip(&s, sku, sku_len) ||
        !SKIP(&s, "\",\"qty\":") || !number(&s, '#') || !SKIP(&s, ",\"segment\":"))
        return NULL;
    const char *first = s.p;
    if (!number(&s, 0))
        return NULL;
    size_t first_len = (size_t)(s.p - first);
    if (!SKIP(&s, ",\"segments\":[{\"segment\":"))
        return NULL;
    /* "segment" is the first part's: unpacked from it */
    if ((size_t)(s.end - s.p) <= first_len || memcmp(s.p, first, first_len) != 0 ||
        s.p[first_len] != ',')
        return NULL;
    for (;;) {
        if (!number(&s, ' ') || !SKIP(&s, ",\"qty\":") || !number(&s, ' ') ||
            !SKIP(&s, "}"))
            return NULL;
        if (SKIP(&s, "],\"status\":\"confirmed\"}"))
            break;
        if (!SKIP(&s, ",{\"segment\":"))
            return NULL;
    }
    /* Not the whole text: keep the JSON. */
    if (s.p != s.end)
        return NULL;
    *s.out = '\0';
    return buf;
}

const char *rd_record_stored(const char *record, const char *id, const char *placed,
                             char *buf, size_t cap)
{
    const char *packed =
        rd_record_pack(record, id, placed, strcspn(placed, "/"), buf, cap);
    return packed != NULL ? packed : record;
}

/* The next word of a packed record at *p, a number (its length; 0 at the end or at
 * anything else). */
static size_t word(const char **p)
{
    while (**p == ' ')
        (*p)++;
    size_t n = strspn(*p, "-0123456789");
    return n < 24 && ((*p)[n] == ' ' || (*p)[n] == '\0') ? n : 0;
}

char *rd_record_unpack(const char *stored, const char *id, const char *sku)
{
    if (stored[0] != '#')
        return seg_strdup(stored);
    char name[SEG_NAME_MAX + 1];
    text_copy(name, sizeof name, sku);
    name[strcspn(name, "/")] = '\0';
    sku = name;
    /* The words as they are, as lua/prelude.lua's RECORD does: record_pack copied them
     * from record_build's text. */
    const char *p = stored + 1;
    size_t cap = 256 + strlen(stored) * 8;
    char *buf = seg_malloc(cap);
    struct text t = text_at(buf, cap);
    char w[24];
    size_t n = word(&p);
    if (n == 0)
        goto bad;
    text_str(&t, "{\"order_id\":\"");
    text_str(&t, id);
    text_str(&t, "\",\"sku\":\"");
    text_str(&t, sku);
    text_str(&t, "\",\"qty\":");
    text_str(&t, text_copy(w, n + 1, p));
    p += n;
    const char *parts = p;
    if ((n = word(&p)) == 0)
        goto bad;
    text_str(&t, ",\"segment\":");
    text_str(&t, text_copy(w, n + 1, p));
    text_str(&t, ",\"segments\":[");
    p = parts;
    for (int k = 0; (n = word(&p)) > 0; k++) {
        text_str(&t, k ? ",{\"segment\":" : "{\"segment\":");
        text_str(&t, text_copy(w, n + 1, p));
        p += n;
        if ((n = word(&p)) == 0)
            goto bad;
        text_str(&t, ",\"qty\":");
        text_str(&t, text_copy(w, n + 1, p));
        p += n;
        text_str(&t, "}");
    }
    if (*p != '\0')
        goto bad;
    text_str(&t, "],\"status\":\"confirmed\"}");
    return buf;
bad:
    free(buf);
    return NULL;
}
