/* holds_slot.c -- reservations on a Redis Cluster (holds.h): the id's steps
 * (lua/hold_id.lua) around the segment's (lua/hold.lua in slot mode), chained on a
 * loop's connection; read, release and the sweep on a worker's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "segments/redis/async.h"
#include "segments/redis/cmd.h"
#include "segments/redis/holds.h"
#include "segments/redis/keys.h"
#include "segments/redis/proto.h"
#include "segments/redis/store.h"

/* The claim of a place or a confirm on the id: far longer than its chain of calls
 * (a few round trips, each bounded by the connection's timeout, which ends the chain),
 * short enough that a retry after a crash waits little for it (BUSY until then). */
#define HOLD_CLAIM_MS 5000

static const char *const actions[] = {
    [STORE_HOLD_CONFIRM] = "confirm",
    [STORE_HOLD_RELEASE] = "release",
    [STORE_HOLD_READ] = "read",
};

/* What a step needs to name its segment's keys, from the meta or the index. */
struct where {
    char sku[SEG_NAME_MAX + 1];
    char placed[STORE_SKU_PLACED_MAX];
    int seg;
    long long epoch, qty, expires;
    bool replicated;
};

/* hold.lua in slot mode on segment w->seg: every key in its slot (7, 8, 9, 12 stand in
 * for the meta, the sweeper's list, the index and the order record, which it leaves
 * alone). */
static void slot_cmd(struct rd_cmd *cmd, const char *act, const struct where *w,
                     const char *id, int ttl_ms, const char *attempt, const char *record,
                     long long until)
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
    cmd_key(cmd, seg_key_orders(k, placed, i));
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
    cmd_arg(cmd, "");
    cmd_argll(cmd, until);
}

/* hold_id.lua's `act` for reservation `id`; its further arguments follow. */
static void id_cmd(struct rd_cmd *cmd, const char *act, const char *id,
                   const char *attempt)
{
    char k[SEG_KEY_MAX];
    cmd_script(cmd, SCRIPT_HOLD_ID);
    cmd_key(cmd, seg_key_hold_index(k, id));
    cmd_key(cmd, seg_key_order(k, id));
    cmd_arg(cmd, act);
    cmd_arg(cmd, attempt);
}

/* holding.lua's `act` on segment w->seg's entry of the sweeper's list. */
static void holding_cmd(struct rd_cmd *cmd, const char *act, const struct where *w)
{
    char m[STORE_SKU_PLACED_MAX + 48];
    snprintf(m, sizeof m, "%s %d %lld", w->placed, w->seg, w->epoch);
    cmd_script(cmd, SCRIPT_HOLDING);
    cmd_key(cmd, seg_key_holding());
    cmd_arg(cmd, act);
    cmd_arg(cmd, m);
}

static int code_of(const redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return -1;
    return (int)r->element[0]->integer;
}

static const char *str_at(const redisReply *r, size_t k)
{
    if (r->elements <= k || r->element[k]->type != REDIS_REPLY_STRING)
        return "";
    return r->element[k]->str;
}

static long long ll_at(const redisReply *r, size_t k)
{
    if (r->elements <= k)
        return 0;
    const redisReply *e = r->element[k];
    if (e->type == REDIS_REPLY_INTEGER)
        return e->integer;
    return e->type == REDIS_REPLY_STRING ? strtoll(e->str, NULL, 10) : 0;
}

/* The index as find/confirm answer it: {code, sku, placed, seg, epoch, qty, expires,
 * durability, parts, confirmed by, record}. 0, or -1 when r is not such a reply or
 * names a hold of several segments (none is placed on a cluster). */
static int where_of(const redisReply *r, struct where *w, char **record)
{
    if (r->elements < 11 || str_at(r, 8)[0] != '\0')
        return -1;
    snprintf(w->sku, sizeof w->sku, "%s", str_at(r, 1));
    snprintf(w->placed, sizeof w->placed, "%s", str_at(r, 2));
    w->seg = (int)ll_at(r, 3);
    w->epoch = ll_at(r, 4);
    w->qty = ll_at(r, 5);
    w->expires = ll_at(r, 6);
    w->replicated = strcmp(str_at(r, 7), "replicated") == 0;
    *record = str_at(r, 10)[0] != '\0' ? seg_strdup(str_at(r, 10)) : NULL;
    return 0;
}

/* A segment's step as hold.lua answers it in slot mode: {code, state, qty, expires,
 * record or '', settled}; 0, or -1 when r is not a reply. */
static int step_of(const redisReply *r, struct store_reply *out, struct store_hold *h)
{
    memset(out, 0, sizeof *out);
    memset(h, 0, sizeof *h);
    int code = code_of(r);
    if (code < 0)
        return -1;
    out->code = code;
    if (r->elements >= 6) {
        snprintf(h->state, sizeof h->state, "%s", str_at(r, 1));
        h->qty = ll_at(r, 2);
        h->expires_ms = ll_at(r, 3);
        if (str_at(r, 4)[0] != '\0')
            h->record = seg_strdup(str_at(r, 4));
        h->settled = (int)ll_at(r, 5);
    }
    return 0;
}

static void hold_from(struct store_hold *h, const struct where *w)
{
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

/* The order record of a confirmed hold, as hold.lua (and record.c) write it. */
static char *record_of(const char *id, const struct where *w)
{
    char buf[512];
    snprintf(buf, sizeof buf,
             "{\"order_id\":\"%s\",\"sku\":\"%s\",\"qty\":%lld,\"segment\":%d,"
             "\"segments\":[{\"segment\":%d,\"qty\":%lld}],\"status\":\"confirmed\"}",
             id, w->sku, w->qty, w->seg, w->seg, w->qty);
    return seg_strdup(buf);
}

/* ---- on a loop: one chain of calls per place or by-id step ---------------------- */

struct hs {
    rda_conn *c;
    store_hold_fn fn;
    void *arg;
    enum hs_state {
        HS_META,   /* the SKU's settings read (a place) */
        HS_BEGIN,  /* the id claimed in its index */
        HS_WALK,   /* a segment asked to take the hold; the next after BUSY/SHORT */
        HS_COMMIT, /* the index written under the claim */
        HS_ABORT,  /* the claim given up: the place took nothing */
        HS_FIND,   /* the index read (a confirm: and the order record claimed) */
        HS_STEP,   /* the segment's step by id */
        HS_RECORD, /* a confirm's order record written */
        HS_DROP,   /* a confirm that sold nothing gave the record's claim up */
        HS_GEN,    /* the SKU's gen bumped: units came back */
    } state;
    enum store_hold_action act;
    char id[SEG_NAME_MAX + 1];
    char attempt[48];
    struct where w;
    int ttl_ms, start, n, k;
    long long until, total;
    bool busy;
    char *record;
    struct store_reply out;
    struct store_hold h;
};

static void hs_next(struct hs *x, const struct redisReply *r);

static void hs_reply(void *arg, const struct redisReply *r)
{
    hs_next(arg, r);
}

static void hs_send(struct hs *x, struct rd_cmd *cmd)
{
    rda_raw(x->c, cmd, hs_reply, x);
}

static void hs_done(struct hs *x, int rc)
{
    if (rc < 0) {
        free(x->h.record);
        memset(&x->out, 0, sizeof x->out);
        memset(&x->h, 0, sizeof x->h);
    }
    x->fn(x->arg, rc, &x->out, &x->h);
    free(x->h.record);
    free(x->h.parts);
    free(x->record);
    free(x);
}

/* Done, after bumping the SKU's gen when units came back (expired, released): every
 * process's cached settings and sold-out flags go, as after a cancel. */
static void hs_finish(struct hs *x)
{
    bool back =
        x->h.settled > 0 || (x->act == STORE_HOLD_RELEASE && x->out.code == RD_OK &&
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

static void walk(struct hs *x)
{
    if (x->k >= x->n) { /* every segment busy or short: nothing taken */
        x->out.code = x->busy ? RD_BUSY : RD_SHORT;
        x->out.value = x->total;
        x->state = HS_ABORT;
        struct rd_cmd cmd;
        id_cmd(&cmd, "abort", x->id, x->attempt);
        hs_send(x, &cmd);
        return;
    }
    x->w.seg = (x->start + x->k) % x->n;
    x->state = HS_WALK;
    /* The segment listed for the sweeper with its step, in the same write: a process
     * that dies leaves a hold listed (or none); a segment listed for nothing is
     * looked at once and unlisted. */
    struct rd_cmd cmd;
    holding_cmd(&cmd, "hint", &x->w);
    cmd_argll(&cmd, base_wall_ms() + x->ttl_ms);
    rda_raw(x->c, &cmd, NULL, NULL);
    slot_cmd(&cmd, "place", &x->w, x->id, x->ttl_ms, x->attempt, NULL, x->until);
    hs_send(x, &cmd);
}

static void on_walk(struct hs *x, const redisReply *r, int code)
{
    switch (code) {
    case RD_OK: { /* {OK, stock left, expires, settled} */
        x->out.value = ll_at(r, 1);
        x->h.expires_ms = ll_at(r, 2);
        x->h.settled += (int)ll_at(r, 3);
        x->state = HS_COMMIT;
        struct rd_cmd cmd;
        id_cmd(&cmd, "commit", x->id, x->attempt);
        cmd_arg(&cmd, x->w.sku);
        cmd_argll(&cmd, x->w.epoch);
        cmd_arg(&cmd, x->w.placed);
        cmd_argll(&cmd, x->w.seg);
        cmd_argll(&cmd, x->w.qty);
        cmd_argll(&cmd, x->h.expires_ms);
        cmd_arg(&cmd, x->w.replicated ? "replicated" : "async");
        hs_send(x, &cmd);
        return;
    }
    case RD_BUSY:
    case RD_SHORT: /* {code, stock, settled}: the next segment */
        x->busy |= code == RD_BUSY;
        x->total += ll_at(r, 1);
        x->h.settled += (int)ll_at(r, 2);
        x->k++;
        walk(x);
        return;
    default: /* CONFLICT (the id held here with another qty), STALE: nothing taken */
        x->out.code = code;
        x->h.settled += r->elements > 1 ? (int)ll_at(r, 1) : 0;
        x->state = HS_ABORT;
        struct rd_cmd cmd;
        id_cmd(&cmd, "abort", x->id, x->attempt);
        hs_send(x, &cmd);
        return;
    }
}

static void on_begin(struct hs *x, const redisReply *r, int code)
{
    switch (code) {
    case RD_OK: /* {OK, until}: claimed; the walk */
        x->until = ll_at(r, 1);
        walk(x);
        return;
    case RD_REPLAYED: /* {REPLAYED, seg, qty, expires}: this attempt placed it */
        x->out.code = RD_OK;
        x->w.seg = (int)ll_at(r, 1);
        x->w.qty = ll_at(r, 2);
        x->h.expires_ms = ll_at(r, 3);
        snprintf(x->h.state, sizeof x->h.state, "held");
        hold_from(&x->h, &x->w);
        hs_done(x, 0);
        return;
    case RD_EXISTS: /* {EXISTS, sku, epoch, seg, qty, expires}: the id is a hold */
        x->out.code = RD_EXISTS;
        snprintf(x->h.sku, sizeof x->h.sku, "%s", str_at(r, 1));
        x->h.epoch = ll_at(r, 2);
        x->h.segment = (int)ll_at(r, 3);
        x->h.qty = ll_at(r, 4);
        x->h.expires_ms = ll_at(r, 5);
        hs_done(x, 0);
        return;
    default: /* CONFLICT, BUSY */
        x->out.code = code;
        hs_done(x, 0);
        return;
    }
}

/* The segment's step by id answered: a confirm's record next (or its claim given
 * up), else done. */
static void on_step(struct hs *x, const redisReply *r)
{
    int settled_before = x->h.settled;
    struct store_hold got;
    if (step_of(r, &x->out, &got) != 0) {
        hs_done(x, -1);
        return;
    }
    free(got.record);
    free(got.parts);
    got.record = got.parts = NULL;
    got.settled += settled_before;
    x->h = got;
    hold_from(&x->h, &x->w);
    if (x->act != STORE_HOLD_CONFIRM) {
        hs_finish(x);
        return;
    }
    struct rd_cmd cmd;
    bool sold = (x->out.code == RD_OK || x->out.code == RD_EXISTS) &&
                strcmp(x->h.state, "confirmed") == 0;
    if (sold) {
        x->state = HS_RECORD;
        id_cmd(&cmd, "record", x->id, x->attempt);
        cmd_arg(&cmd, x->record);
        cmd_arg(&cmd, x->w.sku);
        cmd_argll(&cmd, x->w.epoch);
    } else {
        x->state = HS_DROP;
        proto_confirm(&cmd, x->id, x->attempt, NULL, x->w.sku, x->w.epoch);
    }
    hs_send(x, &cmd);
}

static void on_find(struct hs *x, const redisReply *r, int code)
{
    if (code == RD_MISSING || code == RD_BUSY) {
        x->out.code = code;
        hs_done(x, 0);
        return;
    }
    char *rec = NULL;
    if (where_of(r, &x->w, &rec) != 0) {
        hs_done(x, -1);
        return;
    }
    if (code != RD_OK) { /* a confirm: confirmed already (REPLAYED: by this attempt) */
        x->out.code = code == RD_REPLAYED ? RD_OK : code;
        snprintf(x->h.state, sizeof x->h.state, "%s",
                 code == RD_CONFLICT ? "order" : "confirmed");
        x->h.record = code == RD_CONFLICT ? NULL : rec;
        if (code == RD_CONFLICT)
            free(rec);
        hold_from(&x->h, &x->w);
        hs_done(x, 0);
        return;
    }
    free(rec);
    if (x->act == STORE_HOLD_CONFIRM)
        x->record = record_of(x->id, &x->w);
    x->state = HS_STEP;
    struct rd_cmd cmd;
    slot_cmd(&cmd, actions[x->act], &x->w, x->id, 0, x->attempt, x->record, 0);
    hs_send(x, &cmd);
}

static void hs_next(struct hs *x, const struct redisReply *r)
{
    int code = code_of(r);
    if (code < 0 && x->state != HS_GEN) {
        hs_done(x, -1); /* no answer: the outcome is unknown (a claim runs out) */
        return;
    }
    switch (x->state) {
    case HS_BEGIN:
        on_begin(x, r, code);
        return;
    case HS_WALK:
        on_walk(x, r, code);
        return;
    case HS_COMMIT:
        if (code != RD_OK) { /* taken over: the hold is the other attempt's now */
            hs_done(x, -1);
            return;
        }
        snprintf(x->h.state, sizeof x->h.state, "held");
        hold_from(&x->h, &x->w);
        hs_finish(x);
        return;
    case HS_ABORT:
    case HS_DROP:
        hs_finish(x);
        return;
    case HS_FIND:
        on_find(x, r, code);
        return;
    case HS_STEP:
        on_step(x, r);
        return;
    case HS_RECORD:
        if (code != RD_OK) {
            hs_done(x, -1);
            return;
        }
        x->h.record = seg_strdup(x->record);
        hs_finish(x);
        return;
    case HS_GEN: /* best effort: the units are back either way */
    case HS_META:
        hs_done(x, 0);
        return;
    }
}

static void on_meta(void *arg, int rc, int found, const struct store_meta *m)
{
    struct hs *x = arg;
    if (rc < 0) {
        hs_done(x, -1);
        return;
    }
    if (!found || m->lock[0] != '\0' || m->segments < 1) {
        x->out.code = !found || m->segments < 1 ? RD_MISSING : RD_MISMATCH;
        hs_done(x, 0);
        return;
    }
    x->w.epoch = m->epoch;
    x->w.replicated = m->replicated;
    store_sku_placed(x->w.placed, x->w.sku, m->salt);
    x->n = m->segments;
    x->start %= x->n;
    x->state = HS_BEGIN;
    struct rd_cmd cmd;
    id_cmd(&cmd, "begin", x->id, x->attempt);
    cmd_arg(&cmd, x->w.sku);
    cmd_argll(&cmd, x->w.epoch);
    cmd_argll(&cmd, HOLD_CLAIM_MS);
    hs_send(x, &cmd);
}

static struct hs *hs_new(rda_conn *c, const char *id, const char *attempt,
                         store_hold_fn fn, void *arg)
{
    struct hs *x = seg_calloc(1, sizeof *x);
    x->c = c;
    x->fn = fn;
    x->arg = arg;
    snprintf(x->id, sizeof x->id, "%s", id);
    snprintf(x->attempt, sizeof x->attempt, "%s", attempt != NULL ? attempt : "");
    return x;
}

void rd_hold_slot_place(rda_conn *c, const char *sku, const char *id, long long qty,
                        int ttl_ms, int start, const char *attempt, store_hold_fn fn,
                        void *arg)
{
    struct hs *x = hs_new(c, id, attempt, fn, arg);
    snprintf(x->w.sku, sizeof x->w.sku, "%s", sku);
    x->w.qty = qty;
    x->ttl_ms = ttl_ms;
    x->start = start < 0 ? 0 : start;
    x->act = STORE_HOLD_READ;
    x->state = HS_META;
    rda_meta_read(c, sku, on_meta, x);
}

void rd_hold_slot_by_id(rda_conn *c, const char *id, enum store_hold_action act,
                        const char *attempt, store_hold_fn fn, void *arg)
{
    struct hs *x = hs_new(c, id, attempt, fn, arg);
    x->act = act;
    x->state = HS_FIND;
    struct rd_cmd cmd;
    id_cmd(&cmd, act == STORE_HOLD_CONFIRM ? "confirm" : "find", x->id, x->attempt);
    if (act == STORE_HOLD_CONFIRM)
        cmd_argll(&cmd, HOLD_CLAIM_MS);
    hs_send(x, &cmd);
}

/* ---- on a worker's blocking connection ------------------------------------------ */

int rd_hold_slot_by_id_sync(rd_conn *c, const char *id, enum store_hold_action act,
                            const char *attempt, struct store_reply *out,
                            struct store_hold *h)
{
    memset(out, 0, sizeof *out);
    memset(h, 0, sizeof *h);
    if (act == STORE_HOLD_CONFIRM)
        return -1; /* on the loops only (rd_hold_slot_by_id) */
    struct rd_cmd cmd;
    id_cmd(&cmd, "find", id, attempt != NULL ? attempt : "");
    redisReply *r = store_call(c, &cmd);
    int code = code_of(r);
    struct where w;
    char *rec = NULL;
    int rc = code < 0 ? -1 : 0;
    if (code == RD_MISSING) {
        out->code = RD_MISSING;
    } else if (code == RD_OK && where_of(r, &w, &rec) == 0) {
        free(rec);
        slot_cmd(&cmd, actions[act], &w, id, 0, attempt != NULL ? attempt : "", NULL, 0);
        redisReply *s = store_call(c, &cmd);
        rc = s != NULL ? step_of(s, out, h) : -1;
        if (s != NULL)
            freeReplyObject(s);
        if (rc == 0) {
            hold_from(h, &w);
            bool back =
                h->settled > 0 || (act == STORE_HOLD_RELEASE && out->code == RD_OK &&
                                   strcmp(h->state, "released") == 0);
            if (back) { /* best effort: the units are back either way */
                proto_gen_bump(&cmd, w.sku);
                redisReply *g = store_call(c, &cmd);
                if (g != NULL)
                    freeReplyObject(g);
            }
        }
    } else if (code >= 0) {
        rc = -1;
    }
    if (r != NULL)
        freeReplyObject(r);
    return rc;
}

/* Settle one due entry "placed i epoch" (listed at `score`) of the sweeper's list:
 * the holds settled, or -1. */
static int sweep_one(rd_conn *c, const char *member, const char *score)
{
    struct where w = {0};
    char fmt[32];
    snprintf(fmt, sizeof fmt, "%%%ds %%d %%lld", STORE_SKU_PLACED_MAX - 1);
    struct rd_cmd cmd;
    if (sscanf(member, fmt, w.placed, &w.seg, &w.epoch) != 3 || w.seg < 0 ||
        w.seg >= SEG_MAX_SEGMENTS) {
        cmd_plain(&cmd, "ZREM"); /* not one of ours: out of the list */
        cmd_key(&cmd, seg_key_holding());
        cmd_arg(&cmd, member);
        redisReply *r = store_call(c, &cmd);
        if (r != NULL)
            freeReplyObject(r);
        return 0;
    }
    snprintf(w.sku, sizeof w.sku, "%.*s", (int)strcspn(w.placed, "/"), w.placed);
    slot_cmd(&cmd, "sweep", &w, "", 0, "", NULL, 0);
    redisReply *r = store_call(c, &cmd);
    if (code_of(r) != RD_OK) {
        if (r != NULL)
            freeReplyObject(r);
        return -1;
    }
    int settled = (int)ll_at(r, 1);
    holding_cmd(&cmd, "look", &w);
    cmd_arg(&cmd, score);
    cmd_arg(&cmd, str_at(r, 2));
    freeReplyObject(r);
    redisReply *l = store_call(c, &cmd);
    if (l != NULL)
        freeReplyObject(l);
    if (settled > 0) { /* best effort: the units are back either way */
        proto_gen_bump(&cmd, w.sku);
        redisReply *g = store_call(c, &cmd);
        if (g != NULL)
            freeReplyObject(g);
    }
    return settled;
}

int rd_holds_sweep_slots(rd_conn *c, int limit, int *settled)
{
    *settled = 0;
    redisReply *r = rd_holds_due(c, limit, true);
    if (r == NULL)
        return -1;
    int rc = 0;
    for (size_t k = 0; k + 1 < r->elements; k += 2) {
        if (r->element[k]->type != REDIS_REPLY_STRING ||
            r->element[k + 1]->type != REDIS_REPLY_STRING)
            continue;
        int n = sweep_one(c, r->element[k]->str, r->element[k + 1]->str);
        if (n < 0)
            rc = -1;
        else
            *settled += n;
    }
    freeReplyObject(r);
    return rc;
}
