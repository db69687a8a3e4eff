/* holds_chain.c -- a Redis Cluster's reservations: the commands, reply readers and
 * the chain of calls on a loop (its sending and its end) that holds_slot.c and
 * holds_parts.c share (holds_slot.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/redis/async.h"
#include "segments/redis/calls.h"
#include "segments/redis/cmd.h"
#include "segments/redis/holds_slot.h"
#include "segments/redis/keys.h"
#include "segments/redis/proto.h"
#include "segments/redis/scripts.h"

/* Every key in the segment's slot (7, 8, 9, 12 stand in for the meta, the sweeper's
 * list, the index and the order record, which it leaves alone). */
void hs_slot_cmd(struct rd_cmd *cmd, const char *act, const struct where *w,
                 const char *id, int ttl_ms, const char *attempt, const char *record,
                 long long until, long long at, bool first)
{
    char k[SEG_KEY_MAX], rk[SEG_KEY_MAX], m[STORE_SKU_PLACED_MAX + 48];
    const char *placed = w->placed;
    int i = w->seg;
    seg_key_hold(rk, placed, i, id);
    cmd_script(cmd, SCRIPT_HOLD);
    cmd_key(cmd, seg_key_stock(k, placed, i));
    cmd_key(cmd, seg_key_sold(k, placed, i));
    cmd_key(cmd, seg_key_reserved(k, placed, i, w->epoch));
    cmd_key(cmd, seg_key_holds(k, placed, i, w->epoch));
    cmd_key(cmd, seg_key_epoch(k, placed, i));
    cmd_key(cmd, seg_key_lock(k, placed, i));
    cmd_key(cmd, rk);
    cmd_key(cmd, rk);
    cmd_key(cmd, rk);
    cmd_key(cmd, rk);
    cmd_key(cmd, first ? seg_key_orders(k, placed, i) : seg_key_parts(k, placed, i));
    cmd_key(cmd, rk);
    cmd_arg(cmd, act);
    cmd_argll(cmd, w->epoch);
    cmd_arg(cmd, w->sku);
    cmd_argll(cmd, i);
    snprintf(m, sizeof m, "%s %d %lld", placed, i, w->epoch);
    cmd_arg(cmd, m);
    cmd_arg(cmd, seg_key_hold(k, placed, i, ""));
    cmd_arg(cmd, id);
    cmd_argll(cmd, w->qty);
    cmd_argll(cmd, ttl_ms);
    cmd_arg(cmd, "");
    cmd_arg(cmd, attempt);
    cmd_arg(cmd, record != NULL ? record : "");
    cmd_arg(cmd, placed);
    cmd_arg(cmd, w->replicated ? "replicated" : "async");
    if (at > 0)
        cmd_argll(cmd, at);
    else
        cmd_arg(cmd, "");
    cmd_argll(cmd, until);
}

void hs_id_cmd(struct rd_cmd *cmd, const char *act, const char *id, const char *attempt)
{
    char k[SEG_KEY_MAX];
    cmd_script(cmd, SCRIPT_HOLD_ID);
    cmd_key(cmd, seg_key_hold_index(k, id));
    cmd_key(cmd, seg_key_order(k, id));
    cmd_arg(cmd, act);
    cmd_arg(cmd, attempt);
}

void hs_holding_cmd(struct rd_cmd *cmd, const char *act, const struct where *w)
{
    char m[STORE_SKU_PLACED_MAX + 48];
    snprintf(m, sizeof m, "%s %d %lld", w->placed, w->seg, w->epoch);
    cmd_script(cmd, SCRIPT_HOLDING);
    cmd_key(cmd, seg_key_holding());
    cmd_arg(cmd, act);
    cmd_arg(cmd, m);
}

int hs_code(const redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return -1;
    return (int)r->element[0]->integer;
}

const char *hs_str(const redisReply *r, size_t k)
{
    if (r->elements <= k || r->element[k]->type != REDIS_REPLY_STRING)
        return "";
    return r->element[k]->str;
}

long long hs_ll(const redisReply *r, size_t k)
{
    if (r->elements <= k)
        return 0;
    const redisReply *e = r->element[k];
    if (e->type == REDIS_REPLY_INTEGER)
        return e->integer;
    return e->type == REDIS_REPLY_STRING ? strtoll(e->str, NULL, 10) : 0;
}

void hs_hold_from(struct store_hold *h, const struct where *w)
{
    if (w->np > 0 && h->parts == NULL)
        h->parts = hs_parts_str(w);
    snprintf(h->sku, sizeof h->sku, "%s", w->sku);
    snprintf(h->placed, sizeof h->placed, "%s", w->placed);
    h->segment = w->seg;
    h->epoch = w->epoch;
    h->replicated = w->replicated;
    if (h->qty == 0)
        h->qty = w->qty;
    if (h->expires_ms == 0)
        h->expires_ms = w->expires;
}

/* ---- on a loop: one chain of calls per place or by-id step ---------------------- */

static void hs_reply(void *arg, const struct redisReply *r)
{
    struct hs *x = arg;
    x->next(x, r);
}

void hs_send(struct hs *x, struct rd_cmd *cmd)
{
    rda_raw(x->c, cmd, hs_reply, x);
}

void hs_commit(struct hs *x, const char *parts)
{
    struct rd_cmd cmd;
    x->state = HS_COMMIT;
    hs_id_cmd(&cmd, "commit", x->id, x->attempt);
    cmd_arg(&cmd, x->w.sku);
    cmd_argll(&cmd, x->w.epoch);
    cmd_arg(&cmd, x->w.placed);
    cmd_argll(&cmd, x->w.seg);
    cmd_argll(&cmd, x->w.qty);
    cmd_argll(&cmd, x->h.expires_ms);
    cmd_arg(&cmd, x->w.replicated ? "replicated" : "async");
    cmd_arg(&cmd, parts);
    hs_send(x, &cmd);
}

void hs_done(struct hs *x, int rc)
{
    if (rc == 0 && x->ordered && x->out.code == RD_OK) {
        /* the hold as read: still held, it is refused for the order's id; released or
         * expired, the refusal says so (as on one Redis and on PostgreSQL) */
        x->out.code = RD_CONFLICT;
        if (strcmp(x->h.state, "held") == 0)
            snprintf(x->h.state, sizeof x->h.state, "order");
        free(x->h.record);
        x->h.record = NULL;
    }
    if (rc < 0) {
        free(x->h.record);
        free(x->h.parts);
        memset(&x->out, 0, sizeof x->out);
        memset(&x->h, 0, sizeof x->h);
    }
    if (rc == 0 && x->intent) /* the plan is settled: the id out of the intents set */
        rda_intent(x->c, x->id, false, NULL, NULL);
    x->fn(x->arg, rc, &x->out, &x->h);
    free(x->h.record);
    free(x->h.parts);
    free(x->record);
    free(x->plan);
    free(x->pstate);
    free(x->pctx);
    free(x->sseg);
    free(x->sstock);
    hs_where_clear(&x->w);
    free(x);
}

/* Done, after bumping the SKU's gen when units came back (expired, released): every
 * process's cached settings and sold-out flags go, as after a cancel. */
void hs_finish(struct hs *x)
{
    bool back = x->back || x->h.settled > 0 ||
                (x->act == STORE_HOLD_RELEASE && x->out.code == RD_OK &&
                 strcmp(x->h.state, "released") == 0);
    if (back && x->state != HS_GEN) {
        x->state = HS_GEN;
        struct rd_cmd cmd;
        proto_gen_bump(&cmd, x->w.sku);
        hs_send(x, &cmd);
        return;
    }
    hs_done(x, 0);
}

/* ---- the parts: parsed, written, as a plan and a record ------------------------- */

int hs_parts_parse(struct where *w, const char *s)
{
    hs_where_clear(w);
    if (s[0] == '\0')
        return 0;
    int cap = 1;
    for (const char *p = s; *p != '\0'; p++)
        cap += *p == ',';
    if (cap > SEG_MAX_SEGMENTS)
        return -1;
    w->pseg = seg_malloc(sizeof *w->pseg * (size_t)cap);
    w->pqty = seg_malloc(sizeof *w->pqty * (size_t)cap);
    const char *p = s;
    while (w->np < cap) {
        char *colon, *end;
        long seg = strtol(p, &colon, 10);
        if (colon == p || *colon != ':' || seg < 0 || seg >= SEG_MAX_SEGMENTS)
            break;
        long long qty = strtoll(colon + 1, &end, 10);
        if (end == colon + 1 || qty < 1 || (*end != ',' && *end != '\0'))
            break;
        w->pseg[w->np] = (int)seg;
        w->pqty[w->np++] = qty;
        p = *end == ',' ? end + 1 : end;
    }
    if (w->np != cap || *p != '\0') {
        hs_where_clear(w);
        return -1;
    }
    return 0;
}

char *hs_parts_str(const struct where *w)
{
    size_t cap = (size_t)w->np * 32 + 1, len = 0;
    char *s = seg_malloc(cap);
    s[0] = '\0';
    for (int k = 0; k < w->np; k++)
        len += (size_t)snprintf(s + len, cap - len, "%s%d:%lld", k ? "," : "", w->pseg[k],
                                w->pqty[k]);
    return s;
}

char *hs_parts_plan(const struct where *w)
{
    const struct rd_parts p = {w->np, w->pseg, w->pqty, NULL, NULL};
    return rd_plan_build(w->placed, w->epoch, &p);
}

void hs_where_clear(struct where *w)
{
    free(w->pseg);
    free(w->pqty);
    w->pseg = NULL;
    w->pqty = NULL;
    w->np = 0;
}

char *hs_record_of(const char *id, const struct where *w)
{
    size_t cap = 256 + strlen(id) + strlen(w->sku) + (size_t)(w->np + 1) * 48, len;
    char *s = seg_malloc(cap);
    len = (size_t)snprintf(
        s, cap,
        "{\"order_id\":\"%s\",\"sku\":\"%s\",\"qty\":%lld,\"segment\":%d,"
        "\"segments\":[",
        id, w->sku, w->qty, w->np > 0 ? w->pseg[0] : w->seg);
    if (w->np == 0)
        len += (size_t)snprintf(s + len, cap - len, "{\"segment\":%d,\"qty\":%lld}",
                                w->seg, w->qty);
    for (int k = 0; k < w->np; k++)
        len += (size_t)snprintf(s + len, cap - len, "%s{\"segment\":%d,\"qty\":%lld}",
                                k ? "," : "", w->pseg[k], w->pqty[k]);
    snprintf(s + len, cap - len, "],\"status\":\"confirmed\"}");
    return s;
}

const char *hs_state_of(const char (*states)[12], int n)
{
    static const char *const rank[] = {"confirmed", "held", "released", "expired"};
    int best = 0;
    for (int k = 0; k < n; k++)
        for (int i = 3; i > best; i--)
            if (strcmp(states[k], rank[i]) == 0)
                best = i;
    return rank[best];
}
