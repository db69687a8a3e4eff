/* keys.c -- Redis key names (schema in keys.h). */
#include "segments/redis/keys.h"

#include <stdio.h>
#include <string.h>

#include "base/text.h"
#include "segments/redis/slots.h"
#include "segments/store.h"

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

/* Every per-segment key shares the hash tag {sku:i}, so one segment is one slot.
 * (Made for every order, six for a DEDUCT: built without printf, base/text.h.) */
static char *segment_key(char *buf, const char *sku, int i, const char *what)
{
    struct text t = text_at(buf, SEG_KEY_MAX);
    text_str(&t, "inv:{");
    text_str(&t, sku);
    text_str(&t, ":");
    text_ll(&t, i);
    text_str(&t, "}:");
    text_str(&t, what);
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

char *seg_key_fence(char *buf, const char *sku, int i)
{
    return segment_key(buf, sku, i, "fence");
}

char *seg_key_adjust(char *buf, const char *sku, int i)
{
    return segment_key(buf, sku, i, "adj");
}

char *seg_key_gone(char *buf, const char *sku, int i, long long epoch, const char *what)
{
    char tail[48];
    struct text t = text_at(tail, sizeof tail);
    text_str(&t, "gone:");
    text_ll(&t, epoch);
    text_str(&t, ":");
    text_str(&t, what);
    return segment_key(buf, sku, i, tail);
}

char *seg_key_order(char *buf, const char *id)
{
    struct text t = text_at(buf, SEG_KEY_MAX);
    text_str(&t, "inv:order:{");
    text_str(&t, id);
    text_str(&t, "}");
    return buf;
}

char *seg_key_request(char *buf, const char *sku, const char *rid)
{
    snprintf(buf, SEG_KEY_MAX, "inv:req:{%.*s}:%s", name_len(sku), sku, rid);
    return buf;
}

char *seg_key_ack(char *buf, int slot)
{
    char tag[RD_NAME_SUFFIX + 1] = "000000";
    rd_name_for_slot(tag, RD_NAME_SUFFIX, slot); /* the tag alone is hashed */
    snprintf(buf, SEG_KEY_MAX, "inv:ack:{%s}", tag);
    return buf;
}

const char *seg_key_events(void)
{
    return "inv:events";
}

char *seg_key_ledger_events(char *buf, const char *sku, int i)
{
    return segment_key(buf, sku, i, "events");
}

char *seg_key_ledger_flag(char *buf, const char *sku, int i)
{
    return segment_key(buf, sku, i, "ledger");
}

char *seg_key_retire(char *buf, const char *sku, int i)
{
    return segment_key(buf, sku, i, "retire");
}

char *seg_key_ledger_streams(char *buf, int slot)
{
    char tag[RD_NAME_SUFFIX + 1] = "000000";
    rd_name_for_slot(tag, RD_NAME_SUFFIX, slot); /* the tag alone is hashed */
    snprintf(buf, SEG_KEY_MAX, "inv:ledger:{%s}", tag);
    return buf;
}

const char *seg_key_ledger_slots(void)
{
    return "inv:ledger:slots";
}

const char *seg_key_intents(void)
{
    return "inv:intents";
}

char *seg_key_placed(char *buf, const char *sku, int salt)
{
    store_sku_placed(buf, sku, salt); /* the seam's name: written once */
    return buf;
}

/* ---- reservations -------------------------------------------------------------- */

static char *epoch_key(char *buf, const char *sku, int i, const char *what, long long e)
{
    segment_key(buf, sku, i, what);
    struct text t = text_at(buf + strlen(buf), SEG_KEY_MAX - strlen(buf));
    text_str(&t, ":");
    text_ll(&t, e);
    return buf;
}

char *seg_key_reserved(char *buf, const char *sku, int i, long long epoch)
{
    return epoch_key(buf, sku, i, "reserved", epoch);
}

char *seg_key_holds(char *buf, const char *sku, int i, long long epoch)
{
    return epoch_key(buf, sku, i, "holds", epoch);
}

char *seg_key_hold(char *buf, const char *sku, int i, const char *id)
{
    segment_key(buf, sku, i, "hold:");
    struct text t = text_at(buf + strlen(buf), SEG_KEY_MAX - strlen(buf));
    text_str(&t, id);
    return buf;
}

char *seg_key_hold_index(char *buf, const char *id)
{
    struct text t = text_at(buf, SEG_KEY_MAX);
    text_str(&t, "inv:hold:{");
    text_str(&t, id);
    text_str(&t, "}");
    return buf;
}

const char *seg_key_holding(void)
{
    return "inv:holding";
}
