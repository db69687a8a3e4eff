/* backend.c -- the Redis store: segments/store.h's operations over async.h. */
#include "segments/redis/backend.h"

#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/redis/adjust.h"
#include "segments/redis/cmd.h"
#include "segments/redis/holds.h"

/* The seam's codes and layouts are Redis's own. */
_Static_assert(STORE_OK == RD_OK && STORE_BUSY == RD_BUSY && STORE_SHORT == RD_SHORT &&
                   STORE_EXISTS == RD_EXISTS && STORE_MISSING == RD_MISSING &&
                   STORE_FENCED == RD_FENCED && STORE_STALE == RD_STALE &&
                   STORE_NOT_REPLICATED == RD_NOT_REPLICATED,
               "store codes are the scripts' codes");
_Static_assert(STORE_SKU_PLACED_MAX == RD_SKU_PLACED_MAX, "placed names");

struct rd_store {
    struct store base; /* first: a store * is a struct rd_store * */
    rda_conn *c;
};

static rda_conn *conn(const store *s)
{
    return ((const struct rd_store *)s)->c;
}

static unsigned caps(const store *s)
{
    return STORE_CAP_FENCE | STORE_CAP_BATCH |
           (rda_cluster(conn(s)) ? STORE_CAP_RECORD_APART
                                 : STORE_CAP_MULTI_ONE | STORE_CAP_KEEP);
}

static void store_free(store *s)
{
    if (s == NULL)
        return;
    rda_free(conn(s));
    free(s);
}

static const char *error(const store *s)
{
    return rda_error(conn(s));
}

static void stats(const store *s, struct store_stats *out)
{
    struct rda_stats st;
    rda_stats(conn(s), &st);
    out->commands = st.commands;
    out->writes = st.writes;
}

static bool mode_behind(const store *s)
{
    return rda_mode_behind(conn(s));
}

static void mode_follow(store *s)
{
    rda_mode_follow(conn(s));
}

static void meta_read(store *s, const char *sku, store_meta_fn fn, void *arg)
{
    rda_meta_read(conn(s), sku, fn, arg);
}

static void record_read(store *s, const char *id, const char *sku, long long epoch,
                        store_record_fn fn, void *arg)
{
    rda_record_read(conn(s), id, sku, epoch, fn, arg);
}

static void stocks_read(store *s, const char *sku, int n, store_stocks_fn fn, void *arg)
{
    rda_stocks_read(conn(s), sku, n, fn, arg);
}

static void find_order(store *s, const char *sku, int n, const char *id,
                       store_found_fn fn, void *arg)
{
    rda_find_order(conn(s), sku, n, id, fn, arg);
}

static void acquire(store *s, const char *sku, long long epoch, int i, const char *id,
                    long long qty, const char *token, int ttl_ms, store_reply_fn fn,
                    void *arg)
{
    rda_acquire(conn(s), sku, epoch, i, id, qty, token, ttl_ms, 0, fn, arg);
}

/* ACQUIRE with no token: lua/acquire.lua registers (or issues) the fence. */
static void hold(store *s, const char *sku, long long epoch, int i, const char *id,
                 long long qty, long long fence, store_reply_fn fn, void *arg)
{
    rda_acquire(conn(s), sku, epoch, i, id, qty, "", 0, fence, fn, arg);
}

static void lock(store *s, const char *sku, int i, const char *token, int ttl_ms,
                 store_int_fn fn, void *arg)
{
    rda_lock(conn(s), sku, i, token, ttl_ms, fn, arg);
}

static void renew(store *s, const char *sku, int i, const char *token, int ttl_ms,
                  store_int_fn fn, void *arg)
{
    rda_renew(conn(s), sku, i, token, ttl_ms, fn, arg);
}

static void release(store *s, const char *sku, int i, const char *token, store_int_fn fn,
                    void *arg)
{
    rda_release(conn(s), sku, i, token, fn, arg);
}

static bool deduct(store *s, const char *sku, long long epoch, int i, const char *token,
                   long long fence, const char *attempt, const char *id, long long qty,
                   const char *record, long long until, bool keep, store_reply_fn fn,
                   void *arg)
{
    return rda_deduct(conn(s), sku, epoch, i, token, fence, attempt, id, qty, record,
                      until, keep, fn, arg);
}

static bool deduct_batch(store *s, const char *sku, long long epoch, int i,
                         const char *token, long long fence, int n,
                         const struct store_batch_order *b, store_batch_fn fn, void *arg)
{
    return rda_deduct_batch(conn(s), sku, epoch, i, token, fence, n, b, fn, arg);
}

static void deduct_multi(store *s, const char *sku, long long epoch, const char *id,
                         const char *record, const char *attempt,
                         const struct store_parts *p, store_multi_fn fn, void *arg)
{
    const struct rd_parts parts = {p->n, p->seg, p->part, p->tok, p->fence};
    rda_deduct_multi(conn(s), sku, epoch, id, record, attempt, &parts, fn, arg);
}

static void adjust(store *s, const char *sku, long long epoch, int segments,
                   const char *const *tok, const long long *fence, const char *op,
                   long long add, long long limit, const char *rid, const char *sig,
                   int wait_ms, store_reply_fn fn, void *arg)
{
    if (rda_cluster(conn(s))) /* steps over the segments' slots, without locks */
        rda_adjust_cluster(conn(s), sku, epoch, segments, op, add, limit, rid, sig,
                           wait_ms, fn, arg);
    else
        rda_adjust(conn(s), sku, epoch, segments, tok, fence, op, add, limit, rid, sig,
                   fn, arg); /* one script: its caller WAITs after it */
}

/* (The caller waits for the answer: `rt` borrows to's strings.) */
static void reset(store *s, const char *sku, long long old_epoch, int old_segments,
                  const struct store_reset *to, const char *rid, const char *sig,
                  store_reply_fn fn, void *arg)
{
    const struct rd_reset rt = {
        .segments = to->segments,
        .mode = to->mode,
        .hold_ms = to->hold_ms,
        .batch = to->batch,
        .stock = to->stock,
        .rebalance = to->rebalance,
        .replicated = to->replicated,
        .lock = to->lock != NULL && strcmp(to->lock, "redis") != 0 ? to->lock : "",
        .unfenced = to->unfenced,
        .epoch = to->epoch,
        .salt = to->salt,
        .wait_ms = to->wait_ms,
        .expect = to->expect,
        .ledger = to->ledger,
        .retake = to->retake,
    };
    rda_reset(conn(s), sku, old_epoch, old_segments, &rt, rid, sig, fn, arg);
}

static void cancel(store *s, const char *placed, long long epoch, const char *id,
                   const char *cancelled, const char *expected,
                   const struct store_parts *p, int wait_ms, store_reply_fn fn, void *arg)
{
    const struct rd_parts parts = {p->n, p->seg, p->part, p->tok, NULL};
    rda_cancel(conn(s), placed, epoch, id, cancelled, expected, &parts, wait_ms, fn, arg);
}

static void claim(store *s, const char *id, const char *attempt, const char *sku,
                  long long epoch, int lease_ms, const char *dead, const char *plan,
                  long long dead_epoch, store_reply_fn fn, void *arg)
{
    /* STORE_PLAN_KEEP is RD_PLAN_KEEP ("-"): the script reads it so */
    rda_claim(conn(s), id, attempt, sku, epoch, lease_ms, dead, plan, dead_epoch, fn,
              arg);
}

static void confirm(store *s, const char *id, const char *attempt, const char *record,
                    const char *sku, long long epoch, store_reply_fn fn, void *arg)
{
    rda_confirm(conn(s), id, attempt, record, sku, epoch, fn, arg);
}

static void intent(store *s, const char *id, bool add, store_int_fn fn, void *arg)
{
    rda_intent(conn(s), id, add, fn, arg);
}

static void intents_due(store *s, long long before_ms, int limit, store_intents_fn fn,
                        void *arg)
{
    rda_intents_due(conn(s), before_ms, limit, fn, arg);
}

static void deduct_part(store *s, const char *sku, long long epoch, int i,
                        const char *token, long long fence, const char *id, long long qty,
                        long long until, bool first, store_reply_fn fn, void *arg)
{
    rda_deduct_part(conn(s), sku, epoch, i, token, fence, id, qty, until, first, fn, arg);
}

static int undo(store *s, const char *id, const char *plan, store_int_fn fn, void *arg)
{
    return rda_undo(conn(s), id, plan, fn, arg);
}

static char *plan_build(store *s, const char *sku, long long epoch,
                        const struct store_parts *p)
{
    (void)s;
    const struct rd_parts parts = {p->n, p->seg, p->part, p->tok, NULL};
    return rd_plan_build(sku, epoch, &parts);
}

static void id_for_segment(store *s, const char *sku, int i, char *id)
{
    rda_id_for_segment(conn(s), sku, i, id);
}

static void wait_durable(store *s, const char *sku, int i, const char *id, int timeout_ms,
                         store_int_fn fn, void *arg)
{
    rda_wait(conn(s), sku, i, id, timeout_ms, fn, arg);
}

/* A reservation's call on its way: the caller's callback and what decoding needs. */
struct hold_call {
    store_hold_fn fn;
    void *arg;
    long long qty; /* by SKU: the qty placed */
    bool by_sku;
};

static void hold_answered(void *arg, const struct redisReply *r)
{
    struct hold_call *hc = arg;
    struct store_reply out;
    struct store_hold h;
    int rc = -1;
    memset(&h, 0, sizeof h);
    memset(&out, 0, sizeof out);
    if (r != NULL)
        rc = hc->by_sku ? rd_hold_decode_place_any(r, hc->qty, &out, &h)
                        : rd_hold_decode_by_id(r, &out, &h);
    hc->fn(hc->arg, rc, &out, &h);
    free(h.record);
    free(h.parts);
    free(hc);
}

static void hold_place_any(store *s, const char *sku, const char *id, long long qty,
                           int ttl_ms, int start, const char *attempt, store_hold_fn fn,
                           void *arg)
{
    if (rda_cluster(conn(s))) {
        rd_hold_slot_place(conn(s), sku, id, qty, ttl_ms, start, attempt, fn, arg);
        return;
    }
    struct hold_call *hc = seg_calloc(1, sizeof *hc);
    *hc = (struct hold_call){fn, arg, qty, true};
    struct rd_cmd cmd;
    rd_hold_cmd_place_any(&cmd, sku, id, qty, ttl_ms, start, attempt);
    rda_raw(conn(s), &cmd, hold_answered, hc);
}

static void hold_by_id(store *s, const char *id, enum store_hold_action act,
                       const char *attempt, store_hold_fn fn, void *arg)
{
    if (rda_cluster(conn(s))) {
        rd_hold_slot_by_id(conn(s), id, act, attempt, fn, arg);
        return;
    }
    struct hold_call *hc = seg_calloc(1, sizeof *hc);
    *hc = (struct hold_call){fn, arg, 0, false};
    struct rd_cmd cmd;
    rd_hold_cmd_by_id(&cmd, id, act, attempt);
    rda_raw(conn(s), &cmd, hold_answered, hc);
}

static const struct store_ops redis_ops = {
    .name = "redis",
    .caps = caps,
    .free = store_free,
    .error = error,
    .stats = stats,
    .mode_behind = mode_behind,
    .mode_follow = mode_follow,
    .meta_read = meta_read,
    .record_read = record_read,
    .stocks_read = stocks_read,
    .find_order = find_order,
    .acquire = acquire,
    .hold = hold,
    .lock = lock,
    .renew = renew,
    .release = release,
    .deduct = deduct,
    .deduct_batch = deduct_batch,
    .deduct_multi = deduct_multi,
    .adjust = adjust,
    .reset = reset,
    .cancel = cancel,
    .claim = claim,
    .confirm = confirm,
    .intent = intent,
    .intents_due = intents_due,
    .deduct_part = deduct_part,
    .undo = undo,
    .plan_build = plan_build,
    .id_for_segment = id_for_segment,
    .wait = wait_durable,
    .hold_place_any = hold_place_any,
    .hold_by_id = hold_by_id,
};

store *rd_store_create(struct event_base *base, const struct rd_target *to,
                       const struct rda_counters *counts)
{
    struct rd_store *s = seg_calloc(1, sizeof *s);
    s->base.ops = &redis_ops;
    s->c = rda_create(base, to, counts);
    return &s->base;
}
