/* evstream.c -- the ledger sink's reads and acknowledgements of the ledger streams. */
#include "segments/redis/evstream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/redis/keys.h"
#include "segments/redis/proto.h"
#include "segments/redis/slots.h"
#include "segments/redis/store.h"

const char *rd_ev_stream(char *buf, const char *placed, int i)
{
    _Static_assert(RD_EV_NAME_MAX >= SEG_KEY_MAX, "RD_EV_NAME_MAX");
    return seg_key_ledger_events(buf, placed, i);
}

void rd_ev_free(struct rd_event *ev, int n)
{
    for (int i = 0; i < n; i++)
        free(ev[i].record);
    free(ev);
}

static long long to_ll(const redisReply *v)
{
    return v->type == REDIS_REPLY_STRING ? strtoll(v->str, NULL, 10) : 0;
}

static void copy_str(char *dst, size_t cap, const redisReply *v)
{
    size_t n = v->type == REDIS_REPLY_STRING ? v->len : 0;
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, n ? v->str : "", n);
    dst[n] = '\0';
}

/* One entry {id, {field, value, ...}} (fields nil: deleted since) into `e`: 0, or
 * -1 when the shape is not a stream entry's. */
static int parse_entry(const redisReply *r, struct rd_event *e)
{
    memset(e, 0, sizeof *e);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return -1;
    copy_str(e->id, sizeof e->id, r->element[0]);
    const redisReply *f = r->element[1];
    if (f->type != REDIS_REPLY_ARRAY)
        return 0; /* deleted: kind "" */
    for (size_t j = 0; j + 1 < f->elements; j += 2) {
        const redisReply *k = f->element[j], *v = f->element[j + 1];
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            return -1;
        if (strcmp(k->str, "k") == 0)
            copy_str(e->kind, sizeof e->kind, v);
        else if (strcmp(k->str, "e") == 0)
            e->epoch = to_ll(v);
        else if (strcmp(k->str, "o") == 0)
            copy_str(e->order, sizeof e->order, v);
        else if (strcmp(k->str, "ds") == 0)
            e->d_stock = to_ll(v);
        else if (strcmp(k->str, "dq") == 0)
            e->d_sold = to_ll(v);
        else if (strcmp(k->str, "r") == 0 && v->len > 0 && e->record == NULL)
            e->record = seg_strdup(v->str);
    }
    return 0;
}

/* Entries {{id, {field, value, ...}}, ...} into *out, *n: 0, or -1 (none) when one is
 * not a stream entry's shape. */
static int parse_entries(const redisReply *e, struct rd_event **out, int *n)
{
    if (e->type != REDIS_REPLY_ARRAY)
        return -1;
    struct rd_event *ev = e->elements ? seg_calloc(e->elements, sizeof *ev) : NULL;
    int rc = 0;
    for (size_t j = 0; j < e->elements && rc == 0; j++)
        rc = parse_entry(e->element[j], &ev[j]);
    if (rc != 0) {
        rd_ev_free(ev, (int)e->elements);
        return -1;
    }
    *out = ev;
    *n = (int)e->elements;
    return 0;
}

/* Parse field "placed:i" of the registry, durability `d`, into `e`: 0 or -1. */
static int parse_segment(const redisReply *f, const redisReply *d,
                         struct rd_ev_segment *e)
{
    if (f->type != REDIS_REPLY_STRING || d->type != REDIS_REPLY_STRING)
        return -1;
    const char *colon = strrchr(f->str, ':');
    size_t plen = colon != NULL ? (size_t)(colon - f->str) : 0;
    if (plen == 0 || plen >= sizeof e->placed || colon[1] < '0' || colon[1] > '9')
        return -1;
    memset(e, 0, sizeof *e);
    memcpy(e->placed, f->str, plen);
    size_t slen = strcspn(e->placed, "/");
    if (slen >= sizeof e->sku)
        return -1;
    memcpy(e->sku, e->placed, slen);
    e->i = atoi(colon + 1);
    e->replicated = strcmp(d->str, "replicated") == 0;
    return 0;
}

/* The slots whose registries may have a field, into *slots (malloc'd): how many, or
 * -1. Standalone: slot 0 alone. */
static int registry_slots(rd_conn *c, int **slots)
{
    if (!rd_conn_cluster(c)) {
        *slots = seg_calloc(1, sizeof **slots);
        return 1;
    }
    struct rd_cmd cmd;
    cmd_plain(&cmd, "SMEMBERS");
    cmd_key(&cmd, seg_key_ledger_slots());
    redisReply *r = store_call(c, &cmd);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        if (r != NULL)
            freeReplyObject(r);
        return -1;
    }
    int n = 0;
    *slots = seg_calloc(r->elements + 1, sizeof **slots);
    for (size_t j = 0; j < r->elements; j++) {
        long long s = to_ll(r->element[j]);
        if (s >= 0 && s < 16384)
            (*slots)[n++] = (int)s;
    }
    freeReplyObject(r);
    return n;
}

int rd_ev_segments(rd_conn *c, int max, struct rd_ev_segment **out, int *n)
{
    *out = NULL;
    *n = 0;
    int *slots;
    int nslots = registry_slots(c, &slots);
    if (nslots < 0)
        return -1;
    struct rd_ev_segment *seg = NULL;
    int count = 0, rc = 0;
    for (int k = 0; k < nslots && rc == 0; k++) {
        char key[SEG_KEY_MAX];
        struct rd_cmd cmd;
        cmd_plain(&cmd, "HGETALL");
        cmd_key(&cmd, seg_key_ledger_streams(key, slots[k]));
        redisReply *r = store_call(c, &cmd);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
            rc = -1;
        } else {
            seg = seg_realloc(seg, sizeof *seg * ((size_t)count + r->elements / 2 + 1));
            for (size_t j = 0; j + 1 < r->elements && count < max; j += 2) {
                if (parse_segment(r->element[j], r->element[j + 1], &seg[count]) == 0)
                    count++;
            }
        }
        if (r != NULL)
            freeReplyObject(r);
    }
    free(slots);
    if (rc != 0) {
        free(seg);
        return -1;
    }
    *out = seg;
    *n = count;
    return 0;
}

/* The ledger's registry of the slot of segment i of `placed` (standalone: slot 0's)
 * into buf (SEG_KEY_MAX), and the segment's field there into field (fieldlen). */
static const char *registry_of(rd_conn *c, char *buf, const char *placed, int i,
                               char *field, size_t fieldlen)
{
    seg_key_ledger_events(buf, placed, i);
    int slot = rd_conn_cluster(c) ? rd_key_slot(buf, strlen(buf)) : 0;
    snprintf(field, fieldlen, "%s:%d", placed, i);
    return seg_key_ledger_streams(buf, slot);
}

int rd_ev_adopt(rd_conn *c, const char *placed, int segments, bool replicated)
{
    struct rd_cmd cmd;
    redisReply *r;
    if (rd_conn_cluster(c)) {
        proto_ledger_slots(&cmd, placed, segments);
        if ((r = store_call(c, &cmd)) == NULL)
            return -1;
        freeReplyObject(r);
    }
    int named = 0;
    for (int i = 0; i < segments; i++) {
        char key[SEG_KEY_MAX], field[RD_SKU_PLACED_MAX + 16];
        cmd_script(&cmd, SCRIPT_EV_ADOPT);
        cmd_key(&cmd, seg_key_ledger_flag(key, placed, i));
        cmd_key(&cmd, registry_of(c, key, placed, i, field, sizeof field));
        cmd_arg(&cmd, field);
        cmd_arg(&cmd, replicated ? "replicated" : "async");
        if ((r = store_call(c, &cmd)) == NULL)
            return -1;
        bool ok = r->type == REDIS_REPLY_INTEGER;
        named += ok && r->integer == 1;
        freeReplyObject(r);
        if (!ok)
            return -1;
    }
    return named;
}

int rd_ev_read(rd_conn *c, const char *placed, int i, const char *consumer, int max,
               int idle_ms, struct rd_event **out, int *n, long long *backlog)
{
    char key[SEG_KEY_MAX];
    struct rd_cmd cmd;
    *out = NULL;
    *n = 0;
    cmd_script(&cmd, SCRIPT_EV_READ);
    cmd_key(&cmd, seg_key_ledger_events(key, placed, i));
    cmd_key(&cmd, seg_key_retire(key, placed, i));
    cmd_key(&cmd, seg_key_orders(key, placed, i));
    cmd_key(&cmd, seg_key_parts(key, placed, i));
    cmd_key(&cmd, seg_key_cancelled(key, placed, i));
    cmd_key(&cmd, seg_key_ledger_flag(key, placed, i));
    char field[RD_SKU_PLACED_MAX + 16];
    cmd_key(&cmd, registry_of(c, key, placed, i, field, sizeof field));
    cmd_arg(&cmd, consumer);
    cmd_argll(&cmd, max);
    cmd_argll(&cmd, idle_ms);
    cmd_arg(&cmd, field);
    redisReply *r = store_call(c, &cmd);
    if (r == NULL)
        return -1;
    int rc = -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_INTEGER &&
        r->element[1]->type == REDIS_REPLY_ARRAY) {
        *backlog = r->element[0]->integer;
        rc = parse_entries(r->element[1], out, n);
    }
    freeReplyObject(r);
    if (rc != 0 || *n > 0 || *backlog == 0)
        return rc;
    /* None pending: new entries, by a plain command (ev_read.lua says why). */
    cmd_plain(&cmd, "XREADGROUP");
    cmd_arg(&cmd, "GROUP");
    cmd_arg(&cmd, "ledger");
    cmd_arg(&cmd, consumer);
    cmd_arg(&cmd, "COUNT");
    cmd_argll(&cmd, max);
    cmd_arg(&cmd, "STREAMS");
    cmd_key(&cmd, seg_key_ledger_events(key, placed, i));
    cmd_arg(&cmd, ">");
    if ((r = store_call(c, &cmd)) == NULL)
        return -1;
    /* {{stream, {entry, ...}}}; nil: none new; an error (the stream went since): none */
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->type == REDIS_REPLY_ARRAY && r->element[0]->elements == 2)
        rc = parse_entries(r->element[0]->element[1], out, n);
    else if (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_ERROR)
        rc = -1;
    freeReplyObject(r);
    return rc;
}

/* An event whose order the segment forgets once the retention passed. */
static bool forgets(const struct rd_event *e)
{
    return e->order[0] != '\0' &&
           (strcmp(e->kind, "sale") == 0 || strcmp(e->kind, "cancel") == 0);
}

int rd_ev_done(rd_conn *c, const char *placed, int i, const struct rd_event *ev, int n,
               int retire_s)
{
    if (n == 0)
        return 0;
    char key[SEG_KEY_MAX];
    struct rd_cmd cmd;
    cmd_script(&cmd, SCRIPT_EV_DONE);
    cmd_key(&cmd, seg_key_ledger_events(key, placed, i));
    cmd_key(&cmd, seg_key_retire(key, placed, i));
    cmd_key(&cmd, seg_key_ledger_flag(key, placed, i));
    /* A cluster forgets a field only after its record expired (RETAIN follows this
     * call, by the same retention): with a record still there, a field gone is never
     * one the segment forgot (cancel_segment.lua). */
    if (rd_conn_cluster(c) && retire_s > 0)
        retire_s += retire_s < 60 ? retire_s : 60;
    cmd_argll(&cmd, retire_s);
    cmd_argll(&cmd, n);
    for (int j = 0; j < n; j++)
        cmd_arg(&cmd, ev[j].id);
    for (int j = 0; j < n && retire_s > 0; j++)
        if (forgets(&ev[j]))
            cmd_arg(&cmd, ev[j].order);
    redisReply *r = store_call(c, &cmd);
    if (r == NULL)
        return -1;
    int rc = r->type == REDIS_REPLY_INTEGER ? 0 : -1;
    freeReplyObject(r);
    return rc;
}

int rd_ev_restore(rd_conn *c, const char *id, const char *placed, long long epoch,
                  const char *record, int ttl_s)
{
    char key[SEG_KEY_MAX];
    struct rd_cmd cmd;
    cmd_script(&cmd, SCRIPT_RESTORE);
    cmd_key(&cmd, seg_key_order(key, id));
    cmd_arg(&cmd, record);
    cmd_arg(&cmd, placed);
    cmd_argll(&cmd, epoch);
    cmd_argll(&cmd, rd_conn_cluster(c) ? ttl_s : 0);
    redisReply *r = store_call(c, &cmd);
    if (r == NULL)
        return -1;
    int rc = r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
    freeReplyObject(r);
    return rc;
}

static bool retained(const struct rd_event *e)
{
    return e->record != NULL && e->order[0] != '\0';
}

int rd_ev_retain(rd_conn *c, const char *placed, const struct rd_event *ev, int n,
                 int ttl_s)
{
    bool cluster = rd_conn_cluster(c);
    int *slot = seg_calloc((size_t)n + 1, sizeof *slot);
    char key[SEG_KEY_MAX];
    for (int j = 0; j < n; j++) {
        seg_key_order(key, ev[j].order);
        slot[j] = !retained(&ev[j]) ? -1 : cluster ? rd_key_slot(key, strlen(key)) : 0;
    }
    int total = 0;
    for (int j = 0; j < n && total >= 0; j++) {
        if (slot[j] < 0)
            continue;
        int s = slot[j];
        struct rd_cmd cmd;
        cmd_script(&cmd, SCRIPT_RETAIN);
        for (int k = j; k < n; k++)
            if (slot[k] == s)
                cmd_key(&cmd, seg_key_order(key, ev[k].order));
        cmd_arg(&cmd, placed);
        cmd_argll(&cmd, ttl_s);
        for (int k = j; k < n; k++)
            if (slot[k] == s) {
                cmd_argll(&cmd, ev[k].epoch);
                cmd_arg(&cmd, cluster || strcmp(ev[k].kind, "cancel") == 0 ? "c" : "s");
                slot[k] = -1;
            }
        redisReply *r = store_call(c, &cmd);
        if (r != NULL && r->type == REDIS_REPLY_INTEGER)
            total += (int)r->integer;
        else
            total = -1;
        if (r != NULL)
            freeReplyObject(r);
    }
    free(slot);
    return total;
}
