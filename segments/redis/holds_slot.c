/* holds_slot.c -- reservations on a Redis Cluster (holds.h): the id's steps
 * (lua/hold_id.lua) around the segment's (lua/hold.lua in slot mode), chained on a
 * loop's connection; read, release and the sweep on a worker's. A hold over several
 * segments goes on in holds_parts.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "segments/redis/async.h"
#include "segments/redis/cmd.h"
#include "segments/redis/holds.h"
#include "segments/redis/holds_slot.h"
#include "segments/redis/keys.h"
#include "segments/redis/proto.h"
#include "segments/redis/store.h"

static const char *const actions[] = {
    [STORE_HOLD_CONFIRM] = "confirm",
    [STORE_HOLD_RELEASE] = "release",
    [STORE_HOLD_READ] = "read",
};

/* The index as find/confirm answer it: {code, sku, placed, seg, epoch, qty, expires,
 * durability, parts, confirmed by, record}. 0, or -1 when r is not such a reply. */
static int where_of(const redisReply *r, struct where *w, char **record)
{
    if (r->elements < 11 || hs_parts_parse(w, hs_str(r, 8)) != 0)
        return -1;
    snprintf(w->sku, sizeof w->sku, "%s", hs_str(r, 1));
    snprintf(w->placed, sizeof w->placed, "%s", hs_str(r, 2));
    w->seg = (int)hs_ll(r, 3);
    w->epoch = hs_ll(r, 4);
    w->qty = hs_ll(r, 5);
    w->expires = hs_ll(r, 6);
    w->replicated = strcmp(hs_str(r, 7), "replicated") == 0;
    *record = hs_str(r, 10)[0] != '\0' ? seg_strdup(hs_str(r, 10)) : NULL;
    return 0;
}

/* A segment's step as hold.lua answers it in slot mode: {code, state, qty, expires,
 * record or '', settled}; 0, or -1 when r is not a reply. */
static int step_of(const redisReply *r, struct store_reply *out, struct store_hold *h)
{
    memset(out, 0, sizeof *out);
    memset(h, 0, sizeof *h);
    int code = hs_code(r);
    if (code < 0)
        return -1;
    out->code = code;
    if (r->elements >= 6) {
        snprintf(h->state, sizeof h->state, "%s", hs_str(r, 1));
        h->qty = hs_ll(r, 2);
        h->expires_ms = hs_ll(r, 3);
        if (hs_str(r, 4)[0] != '\0')
            h->record = seg_strdup(hs_str(r, 4));
        h->settled = (int)hs_ll(r, 5);
    }
    return 0;
}

static void walk(struct hs *x)
{
    if (x->k >= x->n && x->avail >= x->w.qty && x->nshort > 1) {
        /* no one segment holds qty, the free ones together do: parts of them */
        hs_parts_place(x, x->sseg, x->sstock, x->nshort);
        return;
    }
    if (x->k >= x->n) { /* every segment busy or short: nothing taken */
        x->out.code = x->busy ? RD_BUSY : RD_SHORT;
        x->out.value = x->total;
        x->state = HS_ABORT;
        struct rd_cmd cmd;
        hs_id_cmd(&cmd, "abort", x->id, x->attempt);
        hs_send(x, &cmd);
        return;
    }
    x->w.seg = (x->start + x->k) % x->n;
    x->state = HS_WALK;
    /* The segment listed for the sweeper with its step, in the same write: a process
     * that dies leaves a hold listed (or none); a segment listed for nothing is
     * looked at once and unlisted. */
    struct rd_cmd cmd;
    hs_holding_cmd(&cmd, "hint", &x->w);
    cmd_argll(&cmd, base_wall_ms() + x->ttl_ms);
    rda_raw(x->c, &cmd, NULL, NULL);
    hs_slot_cmd(&cmd, "place", &x->w, x->id, x->ttl_ms, x->attempt, NULL, x->until, 0,
                true);
    hs_send(x, &cmd);
}

static void on_walk(struct hs *x, const redisReply *r, int code)
{
    switch (code) {
    case RD_OK: { /* {OK, stock left, expires, settled} */
        x->out.value = hs_ll(r, 1);
        x->h.expires_ms = hs_ll(r, 2);
        x->h.settled += (int)hs_ll(r, 3);
        hs_commit(x, "");
        return;
    }
    case RD_BUSY:
    case RD_SHORT: /* {code, stock, settled}: the next segment */
        x->busy |= code == RD_BUSY;
        x->total += hs_ll(r, 1);
        if (code == RD_SHORT && hs_ll(r, 1) > 0) { /* free, short: a part, maybe */
            x->sseg[x->nshort] = x->w.seg;
            x->sstock[x->nshort++] = hs_ll(r, 1);
            x->avail += hs_ll(r, 1);
        }
        x->h.settled += (int)hs_ll(r, 2);
        x->k++;
        walk(x);
        return;
    default: /* CONFLICT (the id held here with another qty), STALE: nothing taken */
        x->out.code = code;
        x->h.settled += r->elements > 1 ? (int)hs_ll(r, 1) : 0;
        x->state = HS_ABORT;
        struct rd_cmd cmd;
        hs_id_cmd(&cmd, "abort", x->id, x->attempt);
        hs_send(x, &cmd);
        return;
    }
}

static void on_begin(struct hs *x, const redisReply *r, int code)
{
    switch (code) {
    case RD_OK: /* {OK, until}: claimed; the walk */
        x->until = hs_ll(r, 1);
        walk(x);
        return;
    case RD_REPLAYED: /* {REPLAYED, seg, qty, expires, parts}: this attempt placed it */
        x->out.code = RD_OK;
        x->w.seg = (int)hs_ll(r, 1);
        x->w.qty = hs_ll(r, 2);
        x->h.expires_ms = hs_ll(r, 3);
        if (hs_parts_parse(&x->w, hs_str(r, 4)) != 0) {
            hs_done(x, -1);
            return;
        }
        snprintf(x->h.state, sizeof x->h.state, "held");
        hs_hold_from(&x->h, &x->w);
        hs_done(x, 0);
        return;
    case RD_EXISTS: /* {EXISTS, sku, epoch, seg, qty, expires, parts}: a hold */
        x->out.code = RD_EXISTS;
        snprintf(x->h.sku, sizeof x->h.sku, "%s", hs_str(r, 1));
        x->h.epoch = hs_ll(r, 2);
        x->h.segment = (int)hs_ll(r, 3);
        x->h.qty = hs_ll(r, 4);
        x->h.expires_ms = hs_ll(r, 5);
        if (hs_str(r, 6)[0] != '\0')
            x->h.parts = seg_strdup(hs_str(r, 6));
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
    hs_hold_from(&x->h, &x->w);
    if (x->act != STORE_HOLD_CONFIRM) {
        hs_finish(x);
        return;
    }
    struct rd_cmd cmd;
    bool sold = (x->out.code == RD_OK || x->out.code == RD_EXISTS) &&
                strcmp(x->h.state, "confirmed") == 0;
    if (sold) {
        x->state = HS_RECORD;
        hs_id_cmd(&cmd, "record", x->id, x->attempt);
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
    if (code == RD_CONFLICT) {
        /* A confirm: the id's record is an order's (the order path does not look at
         * holds), so nothing can be sold under it. The hold read as it stands answers
         * (hs_done: held -> 409 conflict; released, expired -> as such), never a
         * replay of that order. */
        free(rec);
        x->ordered = true;
        x->act = STORE_HOLD_READ;
        code = RD_OK;
        rec = NULL;
    }
    if (code != RD_OK) { /* a confirm: confirmed already (REPLAYED: by this attempt) */
        x->out.code = code == RD_REPLAYED ? RD_OK : code;
        snprintf(x->h.state, sizeof x->h.state, "confirmed");
        x->h.record = rec;
        hs_hold_from(&x->h, &x->w);
        hs_done(x, 0);
        return;
    }
    free(rec);
    if (x->w.np > 0) { /* several segments: each part's step, then as one */
        hs_parts_step(x, x->act == STORE_HOLD_CONFIRM ? hs_ll(r, 11) : 0);
        return;
    }
    if (x->act == STORE_HOLD_CONFIRM)
        x->record = hs_record_of(x->id, &x->w);
    x->state = HS_STEP;
    struct rd_cmd cmd;
    hs_slot_cmd(&cmd, actions[x->act], &x->w, x->id, 0, x->attempt, x->record, 0, 0,
                true);
    hs_send(x, &cmd);
}

/* The chain's next step after a reply of hs_send. */
static void hs_next(struct hs *x, const struct redisReply *r)
{
    int code = hs_code(r);
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
        hs_hold_from(&x->h, &x->w);
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
    case HS_PLAN:
        hs_parts_on_plan(x, code);
        return;
    case HS_GEN: /* best effort: the units are back either way */
    case HS_META:
        hs_done(x, 0);
        return;
    case HS_INTENT: /* answered through their own callbacks (holds_parts.c) */
    case HS_PARTS:
    case HS_UNDO:
        hs_done(x, -1);
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
    x->sseg = seg_malloc(sizeof *x->sseg * (size_t)x->n);
    x->sstock = seg_malloc(sizeof *x->sstock * (size_t)x->n);
    x->state = HS_BEGIN;
    struct rd_cmd cmd;
    hs_id_cmd(&cmd, "begin", x->id, x->attempt);
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
    x->next = hs_next;
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
    hs_id_cmd(&cmd, act == STORE_HOLD_CONFIRM ? "confirm" : "find", x->id, x->attempt);
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
    hs_id_cmd(&cmd, "find", id, attempt != NULL ? attempt : "");
    redisReply *r = store_call(c, &cmd);
    int code = hs_code(r);
    struct where w = {0};
    char *rec = NULL;
    int rc = code < 0 ? -1 : 0;
    if (code == RD_MISSING) {
        out->code = RD_MISSING;
    } else if (code == RD_OK && where_of(r, &w, &rec) == 0 && w.np > 0) {
        free(rec);
        rc = hs_parts_step_sync(c, &w, id, act, attempt != NULL ? attempt : "", out, h);
    } else if (code == RD_OK && w.sku[0] != '\0') { /* one segment's (where_of'd) */
        free(rec);
        hs_slot_cmd(&cmd, actions[act], &w, id, 0, attempt != NULL ? attempt : "", NULL,
                    0, 0, true);
        redisReply *s = store_call(c, &cmd);
        rc = s != NULL ? step_of(s, out, h) : -1;
        if (s != NULL)
            freeReplyObject(s);
        if (rc == 0) {
            hs_hold_from(h, &w);
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
    hs_where_clear(&w);
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
    hs_slot_cmd(&cmd, "sweep", &w, "", 0, "", NULL, 0, 0, true);
    redisReply *r = store_call(c, &cmd);
    if (hs_code(r) != RD_OK) {
        if (r != NULL)
            freeReplyObject(r);
        return -1;
    }
    int settled = (int)hs_ll(r, 1);
    hs_holding_cmd(&cmd, "look", &w);
    cmd_arg(&cmd, score);
    cmd_arg(&cmd, hs_str(r, 2));
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
