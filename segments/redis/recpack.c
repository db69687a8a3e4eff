/* recpack.c -- the order record packed for Redis and unpacked (see recpack.h). */
#include "segments/redis/recpack.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/names.h"
#include "base/text.h"
#include "base/xalloc.h"

/* The literal `lit` at *p: advance past it. */
static bool skip(const char **p, const char *lit)
{
    size_t n = strlen(lit);
    if (strncmp(*p, lit, n) != 0)
        return false;
    *p += n;
    return true;
}

/* An integer as text_ll writes it at *p: advance past it and, with `t`, append it
 * there after `sep`. */
static bool number(const char **p, struct text *t, const char *sep)
{
    const char *s = *p;
    if (*s == '-')
        s++;
    if (*s < '0' || *s > '9')
        return false;
    while (*s >= '0' && *s <= '9')
        s++;
    char digits[24];
    size_t n = (size_t)(s - *p);
    if (n >= sizeof digits)
        return false;
    memcpy(digits, *p, n);
    digits[n] = '\0';
    if (t != NULL) {
        text_str(t, sep);
        text_str(t, digits);
    }
    *p = s;
    return true;
}

char *rd_record_pack(const char *json, const char *id, const char *sku, char *buf,
                     size_t cap)
{
    struct text t = text_at(buf, cap);
    const char *p = json;
    text_str(&t, "#");
    if (!skip(&p, "{\"order_id\":\"") || !skip(&p, id) || !skip(&p, "\",\"sku\":\"") ||
        !skip(&p, sku) || !skip(&p, "\",\"qty\":") || !number(&p, &t, "") ||
        !skip(&p, ",\"segment\":"))
        return NULL;
    const char *first = p;
    if (!number(&p, NULL, ""))
        return NULL;
    size_t first_len = (size_t)(p - first);
    if (!skip(&p, ",\"segments\":["))
        return NULL;
    for (int k = 0;; k++) {
        if (!skip(&p, k ? ",{\"segment\":" : "{\"segment\":"))
            return NULL;
        /* "segment" is the first part's: unpacked from it */
        if (k == 0 && (strncmp(p, first, first_len) != 0 || p[first_len] != ','))
            return NULL;
        if (!number(&p, &t, " ") || !skip(&p, ",\"qty\":") || !number(&p, &t, " ") ||
            !skip(&p, "}"))
            return NULL;
        if (skip(&p, "],\"status\":\"confirmed\"}"))
            break;
    }
    /* Not the whole text, or cut off (cap too small): keep the JSON. */
    if (*p != '\0' || t.p >= t.end)
        return NULL;
    return buf;
}

const char *rd_record_stored(const char *record, const char *id, const char *placed,
                             char *buf, size_t cap)
{
    char name[SEG_NAME_MAX + 1];
    text_copy(name, sizeof name, placed);
    name[strcspn(name, "/")] = '\0';
    const char *packed = rd_record_pack(record, id, name, buf, cap);
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
