/* keys.c -- Redis key names (schema in keys.h). */
#include "segments/redis/keys.h"

#include <stdio.h>
#include <string.h>

char *seg_key_skus(char *buf)
{
    snprintf(buf, SEG_KEY_MAX, "inv:skus");
    return buf;
}

/* The SKU's name without a placement salt ("tv/7" -> "tv"): its length. */
static int name_len(const char *sku)
{
    const char *slash = strchr(sku, '/');
    return slash != NULL ? (int)(slash - sku) : (int)strlen(sku);
}

char *seg_key_meta(char *buf, const char *sku)
{
    snprintf(buf, SEG_KEY_MAX, "inv:sku:{%.*s}", name_len(sku), sku);
    return buf;
}

/* Append `s` at *p, keeping a NUL within `end` (cut short, as snprintf would). */
static void put(char **p, const char *end, const char *s)
{
    while (*s != '\0' && *p < end - 1)
        *(*p)++ = *s++;
    **p = '\0';
}

/* Every per-segment key shares the hash tag {sku:i}, so one segment is one slot. Built
 * by hand: these names are made for every order (six for a DEDUCT), and snprintf cost
 * ~1,200 instructions each. */
static char *segment_key(char *buf, const char *sku, int i, const char *what)
{
    char num[16], *n = num + sizeof num;
    unsigned u = i < 0 ? 0u - (unsigned)i : (unsigned)i;
    *--n = '\0';
    do
        *--n = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    if (i < 0)
        *--n = '-';
    char *p = buf;
    const char *end = buf + SEG_KEY_MAX;
    put(&p, end, "inv:{");
    put(&p, end, sku);
    put(&p, end, ":");
    put(&p, end, n);
    put(&p, end, "}:");
    put(&p, end, what);
    return buf;
}

char *seg_key_stock(char *buf, const char *sku, int i)
{
    return segment_key(buf, sku, i, "stock");
}

char *seg_key_sold(char *buf, const char *sku, int i)
{
    return segment_key(buf, sku, i, "sold");
}

char *seg_key_lock(char *buf, const char *sku, int i)
{
    return segment_key(buf, sku, i, "lock");
}

char *seg_key_orders(char *buf, const char *sku, int i)
{
    return segment_key(buf, sku, i, "orders");
}

char *seg_key_parts(char *buf, const char *sku, int i)
{
    return segment_key(buf, sku, i, "parts");
}

char *seg_key_cancelled(char *buf, const char *sku, int i)
{
    return segment_key(buf, sku, i, "cancelled");
}

char *seg_key_epoch(char *buf, const char *sku, int i)
{
    return segment_key(buf, sku, i, "epoch");
}

char *seg_key_adjust(char *buf, const char *sku, int i)
{
    return segment_key(buf, sku, i, "adj");
}

char *seg_key_order(char *buf, const char *id)
{
    snprintf(buf, SEG_KEY_MAX, "inv:order:{%s}", id);
    return buf;
}

char *seg_key_request(char *buf, const char *sku, const char *rid)
{
    snprintf(buf, SEG_KEY_MAX, "inv:req:{%.*s}:%s", name_len(sku), sku, rid);
    return buf;
}

const char *seg_key_events(void)
{
    return "inv:events";
}

const char *seg_key_intents(void)
{
    return "inv:intents";
}

char *seg_key_placed(char *buf, const char *sku, int salt)
{
    if (salt > 0)
        snprintf(buf, SEG_NAME_MAX + 16, "%s/%d", sku, salt);
    else
        snprintf(buf, SEG_NAME_MAX + 16, "%s", sku);
    return buf;
}
