/* holds_parts.c -- a reservation over several segments on a Redis Cluster: its parts'
 * steps, all or nothing across slots with the multi-segment orders' intent, plan and
 * undo (holds_slot.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/redis/holds.h"
#include "segments/redis/holds_slot.h"
#include "segments/redis/proto.h"
#include "segments/redis/store.h"

static const char *const actions[] = {
    [STORE_HOLD_CONFIRM] = "confirm",
    [STORE_HOLD_RELEASE] = "release",
    [STORE_HOLD_READ] = "read",
};

/* The worse of two parts' codes for a step by id: STALE (void), MISSING, CONFLICT,
 * EXISTS, then the rest. */
static int worse(int a, int b)
{
    static const int order[] = {RD_STALE, RD_MISSING, RD_CONFLICT, RD_EXISTS};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        if (a == order[i] || b == order[i])
            return order[i];
    return a != RD_OK ? a : b;
}

/* Read or release of every part as one answer: the parts' states as one; a release
 * refused only when every part is sold (a confirm under way that meets a part
 * released undoes the others). */
static void as_one(enum store_hold_action act, int code, const char (*states)[12], int n,
                   struct store_reply *out, struct store_hold *h)
{
    const char *st = hs_state_of(states, n);
    snprintf(h->state, sizeof h->state, "%s", st);
    if (code == RD_OK || code == RD_CONFLICT)
        out->code = act == STORE_HOLD_RELEASE && strcmp(st, "confirmed") == 0
                        ? RD_CONFLICT
                        : RD_OK;
    else
        out->code = code;
}

/* ---- on a loop ------------------------------------------------------------------ */

static bool placing(const struct hs *x)
{
    return x->n > 0; /* a place read the SKU's segment count; a step by id did not */
}

static void on_undone(void *arg, int rc, int units)
{
    struct hs *x = arg;
    (void)units;
    if (rc < 0) { /* claim, plan and intent stay for the next holder of the claim */
        hs_done(x, -1);
        return;
    }
    x->back = true; /* what the parts held or sold is back in stock */
    struct rd_cmd cmd;
    if (placing(x)) {
        x->state = HS_ABORT; /* the index's claim and the plan's given up */
        hs_id_cmd(&cmd, "abort", x->id, x->attempt);
    } else {
        x->state = HS_DROP; /* the record's claim and the plan given up */
        proto_confirm(&cmd, x->id, x->attempt, NULL, x->w.sku, x->w.epoch);
    }
    hs_send(x, &cmd);
}

static void undo(struct hs *x)
{
    x->state = HS_UNDO;
    if (rda_undo(x->c, x->id, x->plan, on_undone, x) != 0)
        hs_done(x, -1);
}

/* Every part answered. */
static void parts_done(struct hs *x)
{
    struct rd_cmd cmd;
    if (x->lost) { /* an outcome unknown: claim, plan and intent for the sweeper */
        hs_done(x, -1);
        return;
    }
    if (placing(x) && x->fail == RD_OK) {
        char *parts = hs_parts_str(&x->w);
        x->w.seg = x->w.pseg[0];
        hs_commit(x, parts);
        free(parts);
        return;
    }
    if (placing(x)) {
        x->out.code = x->fail;
        undo(x);
        return;
    }
    int settled = x->h.settled;
    memset(&x->h, 0, sizeof x->h);
    x->h.settled = settled;
    hs_hold_from(&x->h, &x->w);
    if (x->act != STORE_HOLD_CONFIRM) {
        as_one(x->act, x->fail, (const char(*)[12])x->pstate, x->w.np, &x->out, &x->h);
        hs_finish(x);
        return;
    }
    const char *st = hs_state_of((const char(*)[12])x->pstate, x->w.np);
    if (x->fail == RD_OK && strcmp(st, "confirmed") == 0) {
        x->out.code = RD_OK;
        snprintf(x->h.state, sizeof x->h.state, "confirmed");
        x->state = HS_RECORD;
        hs_id_cmd(&cmd, "record", x->id, x->attempt);
        cmd_arg(&cmd, x->record);
        cmd_arg(&cmd, x->w.sku);
        cmd_argll(&cmd, x->w.epoch);
        hs_send(x, &cmd);
        return;
    }
    /* Not every part sold (expired, released, void): none is. */
    x->out.code = x->fail == RD_OK ? RD_CONFLICT : x->fail;
    snprintf(x->h.state, sizeof x->h.state, "%s", st);
    undo(x);
}

/* Part p's step answered: folded into its chain's answer. */
static void on_part(void *arg, const struct redisReply *r)
{
    struct hs_part *p = arg;
    struct hs *x = p->x;
    int code = hs_code(r);
    if (code < 0) {
        x->lost = true;
    } else if (placing(x)) {
        /* {OK, stock left, expires, settled} | {BUSY | SHORT, stock, settled} |
         * {CONFLICT | STALE | FENCED, settled} */
        bool ok = code == RD_OK, walked = code == RD_BUSY || code == RD_SHORT;
        x->h.settled += (int)hs_ll(r, ok ? 3 : walked ? 2 : 1);
        if (ok)
            x->out.value += hs_ll(r, 1);
        /* the stock moved since the walk (SHORT, BUSY): the place walks again */
        int f = ok ? RD_OK : code == RD_STALE || code == RD_CONFLICT ? code : RD_BUSY;
        if (f == RD_STALE ||
            (f != RD_OK && x->fail != RD_STALE && x->fail != RD_CONFLICT))
            x->fail = f;
    } else {
        /* {code, state, qty, expires, record or '', settled} */
        snprintf(x->pstate[p->k], sizeof x->pstate[p->k], "%s", hs_str(r, 1));
        x->h.settled += (int)hs_ll(r, 5);
        if (code == RD_FENCED) /* past the claim's end: its next holder undoes */
            x->lost = true;
        else if (x->act != STORE_HOLD_CONFIRM && code == RD_CONFLICT)
            x->fail = worse(x->fail, RD_OK); /* a release meeting a sold part */
        else
            x->fail = worse(x->fail, code);
    }
    if (--x->left == 0)
        parts_done(x);
}

/* Every part's step at once, each in its own slot. */
static void send_parts(struct hs *x)
{
    struct where *w = &x->w;
    x->state = HS_PARTS;
    x->left = w->np;
    x->fail = RD_OK;
    x->lost = false;
    x->pstate = seg_calloc((size_t)w->np, sizeof *x->pstate);
    x->pctx = seg_calloc((size_t)w->np, sizeof *x->pctx);
    for (int k = 0, n = w->np; k < n; k++) {
        struct where pw = *w;
        pw.seg = w->pseg[k];
        pw.qty = w->pqty[k];
        pw.np = 0;
        struct rd_cmd cmd;
        if (placing(x)) { /* listed for the sweeper in the same write (holds_slot.c) */
            hs_holding_cmd(&cmd, "hint", &pw);
            cmd_argll(&cmd, x->h.expires_ms);
            rda_raw(x->c, &cmd, NULL, NULL);
            hs_slot_cmd(&cmd, "place", &pw, x->id, x->ttl_ms, x->attempt, NULL, x->until,
                        x->h.expires_ms, true);
        } else if (x->act == STORE_HOLD_CONFIRM) {
            hs_slot_cmd(&cmd, "confirm", &pw, x->id, 0, x->attempt,
                        k == 0 ? x->record : "", x->until, 0, k == 0);
        } else {
            hs_slot_cmd(&cmd, actions[x->act], &pw, x->id, 0, x->attempt, NULL, 0, 0,
                        true);
        }
        x->pctx[k] = (struct hs_part){x, k};
        rda_raw(x->c, &cmd, on_part, &x->pctx[k]);
    }
}

void hs_parts_on_plan(struct hs *x, int code)
{
    if (code == RD_OK) {
        send_parts(x);
        return;
    }
    if (code == RD_STALE || !placing(x)) { /* the claim is another's now */
        hs_done(x, -1);
        return;
    }
    x->out.code = code; /* BUSY (an order's claim on the id), CONFLICT: nothing placed */
    x->state = HS_ABORT;
    struct rd_cmd cmd;
    hs_id_cmd(&cmd, "abort", x->id, x->attempt);
    hs_send(x, &cmd);
}

/* The id is in the intents set: the plan into the order record's claim. */
static void on_intent(void *arg, int rc, int value)
{
    struct hs *x = arg;
    (void)value;
    if (rc < 0) {
        hs_done(x, -1);
        return;
    }
    x->intent = true; /* taken out again once the plan is settled */
    x->state = HS_PLAN;
    struct rd_cmd cmd;
    hs_id_cmd(&cmd, "plan", x->id, x->attempt);
    cmd_arg(&cmd, x->plan);
    cmd_arg(&cmd, x->w.sku);
    cmd_argll(&cmd, x->w.epoch);
    cmd_argll(&cmd, x->until);
    hs_send(x, &cmd);
}

static void intent_first(struct hs *x)
{
    x->plan = hs_parts_plan(&x->w);
    x->state = HS_INTENT;
    rda_intent(x->c, x->id, true, on_intent, x);
}

void hs_parts_place(struct hs *x, const int *seg, const long long *stock, int n)
{
    struct where *w = &x->w;
    hs_where_clear(w);
    w->pseg = seg_malloc(sizeof *w->pseg * (size_t)n);
    w->pqty = seg_malloc(sizeof *w->pqty * (size_t)n);
    long long left = w->qty;
    for (int k = 0; k < n && left > 0; k++) { /* the walk's order, as on one Redis */
        long long take = stock[k] < left ? stock[k] : left;
        int i = w->np++;
        for (; i > 0 && w->pseg[i - 1] > seg[k]; i--) { /* listed by segment */
            w->pseg[i] = w->pseg[i - 1];
            w->pqty[i] = w->pqty[i - 1];
        }
        w->pseg[i] = seg[k];
        w->pqty[i] = take;
        left -= take;
    }
    /* One expiry for every part: the id's node's clock at the claim, plus ttl. */
    x->h.expires_ms = x->until - HOLD_CLAIM_MS + x->ttl_ms;
    x->out.value = 0;
    intent_first(x);
}

void hs_parts_step(struct hs *x, long long claim_until)
{
    if (x->act != STORE_HOLD_CONFIRM) {
        send_parts(x);
        return;
    }
    x->until = claim_until;
    x->record = hs_record_of(x->id, &x->w);
    intent_first(x);
}

/* ---- on a blocking connection --------------------------------------------------- */

int hs_parts_step_sync(struct rd_conn *c, const struct where *w, const char *id,
                       enum store_hold_action act, const char *attempt,
                       struct store_reply *out, struct store_hold *h)
{
    char(*states)[12] = seg_calloc((size_t)w->np, sizeof *states);
    int code = RD_OK, settled = 0, rc = 0;
    for (int k = 0; k < w->np && rc == 0; k++) {
        struct where pw = *w;
        pw.seg = w->pseg[k];
        pw.qty = w->pqty[k];
        pw.np = 0;
        struct rd_cmd cmd;
        hs_slot_cmd(&cmd, actions[act], &pw, id, 0, attempt, NULL, 0, 0, true);
        redisReply *r = store_call(c, &cmd);
        int got = hs_code(r);
        if (got < 0) {
            rc = -1;
        } else {
            snprintf(states[k], sizeof states[k], "%s", hs_str(r, 1));
            settled += (int)hs_ll(r, 5);
            code = worse(code,
                         act == STORE_HOLD_RELEASE && got == RD_CONFLICT ? RD_OK : got);
        }
        if (r != NULL)
            freeReplyObject(r);
    }
    if (rc == 0) {
        hs_hold_from(h, w);
        h->settled = settled;
        as_one(act, code, (const char(*)[12])states, w->np, out, h);
        if (settled > 0 || (act == STORE_HOLD_RELEASE && out->code == RD_OK &&
                            strcmp(h->state, "released") == 0)) {
            struct rd_cmd cmd; /* best effort: the units are back either way */
            proto_gen_bump(&cmd, w->sku);
            redisReply *g = store_call(c, &cmd);
            if (g != NULL)
                freeReplyObject(g);
        }
    }
    free(states);
    return rc;
}
