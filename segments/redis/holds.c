/* holds.c -- reservations on a standalone Redis: lua/hold_local.lua's calls and replies
 * (holds.h), whose reply shapes the cluster's hold.lua shares. */
#include "segments/redis/holds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/text.h"
#include "base/xalloc.h"
#include "segments/redis/keys.h"
#include "segments/redis/store.h"

static const char *const actions[] = {
    [STORE_HOLD_CONFIRM] = "confirm",
    [STORE_HOLD_RELEASE] = "release",
    [STORE_HOLD_READ] = "read",
};

static long long elem_ll(const redisReply *r, size_t k)
{
    if (r->elements <= k)
        return 0;
    const redisReply *e = r->element[k];
    if (e->type == REDIS_REPLY_INTEGER)
        return e->integer;
    if (e->type == REDIS_REPLY_STRING)
        return strtoll(e->str, NULL, 10);
    return 0;
}

static const char *elem_str(const redisReply *r, size_t k)
{
    if (r->elements <= k || r->element[k]->type != REDIS_REPLY_STRING)
        return "";
    return r->element[k]->str;
}

/* The script's reply: its code, or -1 when not one. */
static int reply_code(const redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return -1;
    return (int)r->element[0]->integer;
}

void rd_hold_cmd_place_any(struct rd_cmd *cmd, const char *sku, const char *id,
                           long long qty, int ttl_ms, int start, const char *attempt)
{
    char k[SEG_KEY_MAX];
    cmd_script(cmd, SCRIPT_HOLD_LOCAL);
    cmd_key(cmd, seg_key_meta(k, sku));
    cmd_arg(cmd, "place");
    cmd_arg(cmd, sku);
    cmd_argll(cmd, start);
    cmd_arg(cmd, id);
    cmd_argll(cmd, qty);
    cmd_argll(cmd, ttl_ms);
    cmd_arg(cmd, attempt);
    cmd_argll(cmd, ttl_ms + 86400000LL); /* the hold's string: a day past its expiry */
}

/* A hold's string (lua/hold_local.lua: "s c x q e i d t k p[ m]") into h; -1 when not
 * one. The state is left to the caller (a reply names it apart). */
static int hold_from(const char *v, struct store_hold *h)
{
    char f[11][STORE_SKU_PLACED_MAX + 16];
    int n = 0;
    const char *p = v;
    while (n < 10 && *p != '\0') {
        size_t len = strcspn(p, " ");
        if (len >= sizeof f[0])
            return -1;
        memcpy(f[n], p, len);
        f[n][len] = '\0';
        n++;
        p += len;
        if (*p == ' ')
            p++;
    }
    if (n < 10)
        return -1;
    h->expires_ms = strtoll(f[2], NULL, 10);
    h->qty = strtoll(f[3], NULL, 10);
    h->epoch = strtoll(f[4], NULL, 10);
    h->segment = atoi(f[5]);
    h->replicated = strcmp(f[6], "replicated") == 0;
    text_copy(h->sku, sizeof h->sku, f[8]);
    text_copy(h->placed, sizeof h->placed, f[9]);
    if (*p != '\0')
        h->parts = seg_strdup(p);
    return 0;
}

int rd_hold_decode_place_any(const redisReply *r, long long qty, struct store_reply *out,
                             struct store_hold *h)
{
    memset(out, 0, sizeof *out);
    memset(h, 0, sizeof *h);
    int code = reply_code(r);
    if (code < 0)
        return -1;
    out->code = code;
    /* {code, stock (walked; left), settled[, the hold's string]} */
    out->value = elem_ll(r, 1);
    h->settled = (int)elem_ll(r, 2);
    if ((code == RD_OK || code == RD_EXISTS) && hold_from(elem_str(r, 3), h) < 0)
        return -1;
    if (code == RD_OK) {
        h->qty = qty;
        snprintf(h->state, sizeof h->state, "held");
    }
    return 0;
}

void rd_hold_cmd_by_id(struct rd_cmd *cmd, const char *id, enum store_hold_action act,
                       const char *attempt)
{
    char k[SEG_KEY_MAX];
    cmd_script(cmd, SCRIPT_HOLD_LOCAL);
    cmd_key(cmd, seg_key_hold_index(k, id));
    cmd_arg(cmd, actions[act]);
    cmd_arg(cmd, id);
    cmd_arg(cmd, attempt != NULL ? attempt : "");
}

int rd_hold_decode_by_id(const redisReply *r, struct store_reply *out,
                         struct store_hold *h)
{
    memset(out, 0, sizeof *out);
    memset(h, 0, sizeof *h);
    int code = reply_code(r);
    if (code < 0)
        return -1;
    out->code = code;
    if (r->elements < 4) /* {MISSING, settled}, {STALE} */
        return 0;
    /* {code, settled, state, the hold's string, record or ''} */
    h->settled = (int)elem_ll(r, 1);
    snprintf(h->state, sizeof h->state, "%s", elem_str(r, 2));
    if (hold_from(elem_str(r, 3), h) < 0)
        return -1;
    if (elem_str(r, 4)[0] != '\0')
        h->record = seg_strdup(elem_str(r, 4));
    return 0;
}

int rd_hold_by_id(rd_conn *c, const char *id, enum store_hold_action act,
                  const char *attempt, struct store_reply *out, struct store_hold *h)
{
    struct rd_cmd cmd;
    rd_hold_cmd_by_id(&cmd, id, act, attempt);
    redisReply *r = store_call(c, &cmd);
    int rc = r != NULL ? rd_hold_decode_by_id(r, out, h) : -1;
    if (r != NULL)
        freeReplyObject(r);
    return rc;
}

/* Settle one due member "placed i epoch" of the holding list: settled, or -1. */
static int sweep_one(rd_conn *c, const char *m)
{
    char placed[STORE_SKU_PLACED_MAX];
    int i;
    long long epoch;
    char fmt[32];
    snprintf(fmt, sizeof fmt, "%%%ds %%d %%lld", STORE_SKU_PLACED_MAX - 1);
    if (sscanf(m, fmt, placed, &i, &epoch) != 3 || i < 0 || i >= SEG_MAX_SEGMENTS) {
        struct rd_cmd cmd; /* not one of ours: out of the list */
        cmd_plain(&cmd, "ZREM");
        cmd_key(&cmd, seg_key_holding());
        cmd_arg(&cmd, m);
        redisReply *r = store_call(c, &cmd);
        if (r != NULL)
            freeReplyObject(r);
        return 0;
    }
    char sku[SEG_NAME_MAX + 1];
    snprintf(sku, sizeof sku, "%.*s", (int)strcspn(placed, "/"), placed);
    struct rd_cmd cmd;
    cmd_script(&cmd, SCRIPT_HOLD_LOCAL);
    cmd_key(&cmd, seg_key_holding());
    cmd_arg(&cmd, "sweep");
    cmd_arg(&cmd, placed);
    cmd_argll(&cmd, i);
    cmd_argll(&cmd, epoch);
    cmd_arg(&cmd, sku);
    redisReply *r = store_call(c, &cmd);
    int code = reply_code(r);
    int settled = code == RD_OK ? (int)elem_ll(r, 1) : -1;
    if (r != NULL)
        freeReplyObject(r);
    return settled;
}

redisReply *rd_holds_due(rd_conn *c, int limit, bool scores)
{
    /* The store's clock decides what is due (TIME), never this process's. */
    struct rd_cmd cmd;
    cmd_plain(&cmd, "TIME");
    cmd_route_as(&cmd, seg_key_holding());
    redisReply *t = store_call(c, &cmd);
    if (t == NULL || t->type != REDIS_REPLY_ARRAY || t->elements != 2 ||
        t->element[0]->type != REDIS_REPLY_STRING) {
        if (t != NULL)
            freeReplyObject(t);
        return NULL;
    }
    long long now = strtoll(t->element[0]->str, NULL, 10) * 1000 +
                    strtoll(t->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(t);
    cmd_plain(&cmd, "ZRANGEBYSCORE");
    cmd_key(&cmd, seg_key_holding());
    cmd_arg(&cmd, "-inf");
    cmd_argll(&cmd, now);
    if (scores)
        cmd_arg(&cmd, "WITHSCORES");
    cmd_arg(&cmd, "LIMIT");
    cmd_arg(&cmd, "0");
    cmd_argll(&cmd, limit);
    redisReply *r = store_call(c, &cmd);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        if (r != NULL)
            freeReplyObject(r);
        return NULL;
    }
    return r;
}

int rd_holds_sweep(rd_conn *c, int limit, int *settled)
{
    *settled = 0;
    redisReply *r = rd_holds_due(c, limit, false);
    if (r == NULL)
        return -1;
    int rc = 0;
    for (size_t k = 0; k < r->elements; k++) {
        if (r->element[k]->type != REDIS_REPLY_STRING)
            continue;
        int n = sweep_one(c, r->element[k]->str);
        if (n < 0)
            rc = -1;
        else
            *settled += n;
    }
    freeReplyObject(r);
    return rc;
}
