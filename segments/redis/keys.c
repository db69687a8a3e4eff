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

/* Every per-segment key shares the hash tag {sku:i}, so one segment is one slot. */
static char *segment_key(char *buf, const char *sku, int i, const char *what)
{
    snprintf(buf, SEG_KEY_MAX, "inv:{%s:%d}:%s", sku, i, what);
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
