/* proto_reply.c -- the decoders of the seam's replies (a redisReply to C values),
 * rd_reply_clear for what they fill, and a claim's plan read back (see proto.h). */
#include "segments/redis/proto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/redis/recpack.h"

/* ---- decoders ------------------------------------------------------------------ */

long long proto_integer(const redisReply *r, long long dflt)
{
    if (r == NULL)
        return dflt;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING) {
        char *end;
        errno = 0;
        long long v = strtoll(r->str, &end, 10);
        if (errno == 0 && end != r->str && *end == '\0')
            return v;
    }
    return dflt;
}

static bool is_array(const redisReply *r, size_t n)
{
    return r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements >= n;
}

/* Declared in calls.h with struct rd_reply; here, next to the decoders that fill
 * `record`. */
void rd_reply_clear(struct rd_reply *r)
{
    free(r->record);
    free(r->plan);
    r->record = r->plan = NULL;
}

int proto_scripted(const redisReply *r, struct rd_reply *out)
{
    memset(out, 0, sizeof *out);
    if (!is_array(r, 1) || r->element[0]->type != REDIS_REPLY_INTEGER)
        return -1;
    out->code = (int)r->element[0]->integer;
    if (r->elements > 1) {
        const redisReply *val = r->element[1];
        if (val->type == REDIS_REPLY_INTEGER)
            out->value = val->integer;
        else if (val->type == REDIS_REPLY_STRING)
            out->record = seg_strdup(val->str); /* EXISTS: a record; CLAIM: an attempt */
    }
    if (r->elements > 2 && r->element[2]->type == REDIS_REPLY_STRING)
        out->plan = seg_strdup(r->element[2]->str); /* CLAIM MISSING: the plan */
    else if (r->elements > 2 && r->element[2]->type == REDIS_REPLY_INTEGER)
        out->fence = r->element[2]->integer; /* ACQUIRE of a lock service's hold */
    return 0;
}

int proto_batch(const redisReply *r, int n, struct store_reply *out)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)n)
        return -1;
    for (int k = 0; k < n; k++) {
        struct rd_reply one;
        if (proto_scripted(r->element[k], &one) != 0) {
            for (int j = 0; j < k; j++) {
                free(out[j].record);
                out[j].record = NULL;
            }
            return -1;
        }
        free(one.plan);
        out[k] = (struct store_reply){one.code, one.value, one.record, NULL, 0};
    }
    return 0;
}

int proto_multi(const redisReply *r, int n, struct rd_reply *out, long long *stocks)
{
    if (proto_scripted(r, out) != 0)
        return -1;
    if (out->code != RD_OK && out->code != RD_SHORT)
        return 0;
    if (r->elements != (size_t)n + 1) {
        rd_reply_clear(out);
        return -1; /* not the shape the script answers */
    }
    for (int j = 0; j < n; j++)
        stocks[j] = proto_integer(r->element[j + 1], 0);
    return 0;
}

int proto_done(const redisReply *r, int *done)
{
    if (r == NULL || r->type != REDIS_REPLY_INTEGER)
        return -1;
    *done = r->integer == 1;
    return 0;
}

int proto_taken(const redisReply *r, const char *token, int *taken)
{
    if (r == NULL || (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_STRING))
        return -1;
    *taken = r->type == REDIS_REPLY_NIL || strcmp(r->str, token) == 0;
    return 0;
}

int proto_meta(const redisReply *r, struct rd_meta *out, int *found)
{
    if (!is_array(r, 13))
        return -1;
    *found = r->element[0]->type == REDIS_REPLY_STRING;
    if (*found) {
        const redisReply *mode = r->element[1];
        out->segments = (int)proto_integer(r->element[0], 0);
        snprintf(out->mode, sizeof out->mode, "%s",
                 mode->type == REDIS_REPLY_STRING ? mode->str : "");
        out->hold_ms = (int)proto_integer(r->element[2], 0);
        out->initial = proto_integer(r->element[3], 0);
        out->gen = proto_integer(r->element[4], 0);
        out->rebalance = proto_integer(r->element[5], 1) != 0;
        out->epoch = proto_integer(r->element[6], 0);
        const redisReply *d = r->element[7];
        out->replicated =
            d->type == REDIS_REPLY_STRING && strcmp(d->str, "replicated") == 0;
        out->salt = (int)proto_integer(r->element[8], 0);
        out->adjust_until = proto_integer(r->element[9], 0);
        const redisReply *lock = r->element[10];
        snprintf(out->lock, sizeof out->lock, "%s",
                 lock->type == REDIS_REPLY_STRING ? lock->str : "");
        out->unfenced = proto_integer(r->element[11], 1) == 0;
        out->batch = (int)proto_integer(r->element[12], 1);
    }
    return 0;
}

static bool is_string_or_nil(const redisReply *r)
{
    return r != NULL && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL);
}

int proto_record(const redisReply *r, const char *id, char **record, char *sku,
                 long long *epoch)
{
    *record = NULL;
    sku[0] = '\0';
    *epoch = 0;
    if (!is_array(r, 3))
        return -1;
    const redisReply *json = r->element[0], *k = r->element[1], *e = r->element[2];
    if (!is_string_or_nil(json) || !is_string_or_nil(k) || !is_string_or_nil(e))
        return -1;
    if (json->type == REDIS_REPLY_NIL)
        return 0;
    if (k->type == REDIS_REPLY_STRING)
        snprintf(sku, SEG_NAME_MAX + 1, "%s", k->str);
    *epoch = proto_integer(e, 0);
    *record = rd_record_unpack(json->str, id, sku);
    return *record != NULL ? 0 : -1;
}

bool proto_record_restored(const redisReply *r)
{
    const redisReply *t = is_array(r, 4) ? r->element[3] : NULL;
    return t != NULL && t->type == REDIS_REPLY_STRING && strcmp(t->str, "ledger") == 0;
}

bool proto_record_dead(const char *owner, long long owner_epoch, const char *sku,
                       long long epoch)
{
    return owner[0] != '\0' && strcmp(owner, sku) == 0 && owner_epoch != epoch;
}

int proto_scan_page(const redisReply *r, bool hash, char *cursor, size_t cursor_len,
                    char ***names, size_t *n)
{
    *names = NULL;
    *n = 0;
    if (!is_array(r, 2) || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_ARRAY || r->element[0]->len >= cursor_len)
        return -1;
    const redisReply *page = r->element[1];
    size_t step = hash ? 2 : 1; /* HSCAN pages are field, value, field, value, ... */
    if (page->elements > 0)
        *names = seg_calloc(page->elements / step + 1, sizeof **names);
    for (size_t i = 0; i < page->elements; i += step)
        if (page->element[i]->type == REDIS_REPLY_STRING)
            (*names)[(*n)++] = seg_strdup(page->element[i]->str);
    memcpy(cursor, r->element[0]->str, r->element[0]->len + 1);
    return 0;
}

int proto_stocks(const redisReply *r, int n, long long *stock)
{
    if (!is_array(r, (size_t)n))
        return -1;
    for (int i = 0; i < n; i++)
        stock[i] = proto_integer(r->element[i], 0);
    return 0;
}

/* ---- a multi-segment order's plan (the claim's field p) ----------------------- */

int proto_plan_parse(const char *s, struct proto_plan *out)
{
    memset(out, 0, sizeof *out);
    const char *sp = strchr(s, ' ');
    if (sp == NULL || sp == s || (size_t)(sp - s) >= sizeof out->placed)
        return -1;
    memcpy(out->placed, s, (size_t)(sp - s));
    char *end;
    out->epoch = strtoll(sp + 1, &end, 10);
    int cap = 0;
    for (const char *q = end; *q != '\0'; q++)
        cap += *q == ' ';
    if (end == sp + 1 || cap < 1 || cap > SEG_MAX_SEGMENTS)
        return -1;
    out->seg = seg_malloc(sizeof *out->seg * (size_t)cap);
    out->qty = seg_malloc(sizeof *out->qty * (size_t)cap);
    while (*end == ' ') {
        char *colon;
        long seg = strtol(end + 1, &colon, 10);
        if (colon == end + 1 || *colon != ':' || seg < 0 || seg >= SEG_MAX_SEGMENTS)
            break;
        long long qty = strtoll(colon + 1, &end, 10);
        if (end == colon + 1 || qty < 1 || (*end != ' ' && *end != '\0'))
            break;
        out->seg[out->n] = (int)seg;
        out->qty[out->n++] = qty;
    }
    if (*end != '\0' || out->n != cap) {
        proto_plan_free(out);
        return -1;
    }
    return 0;
}

void proto_plan_free(struct proto_plan *p)
{
    free(p->seg);
    free(p->qty);
    p->seg = NULL;
    p->qty = NULL;
    p->n = 0;
}
