/* async.c -- the Redis seam on an event loop (see async.h): the typed calls, each built
 * and routed (async_conn.c), its reply decoded in async_answer.c. */
#include "segments/redis/async.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "segments/redis/async_internal.h"
#include "segments/redis/keys.h"
#include "segments/redis/proto.h"

/* ---- the calls ------------------------------------------------------------------ */

#define FN(f) ((void (*)(void))(f))

void rda_raw(rda_conn *c, struct rd_cmd *cmd, rda_raw_fn fn, void *arg)
{
    struct req *q = rda_req_new(c, K_RAW, FN(fn), arg);
    q->lq.cmd = *cmd;
    rda_route(q);
}

void rda_raw_blocking(rda_conn *c, struct rd_cmd *cmd, rda_raw_fn fn, void *arg)
{
    struct req *q = rda_req_new(c, K_RAW, FN(fn), arg);
    q->lq.cmd = *cmd;
    q->reroute = true;
    rda_route(q);
}

void rda_step(rda_conn *c, struct rd_cmd *cmd, rda_reply_fn fn, void *arg)
{
    struct req *q = rda_req_new(c, K_REPLY, FN(fn), arg);
    q->lq.cmd = *cmd;
    rda_route(q);
}

void rda_ping(rda_conn *c, rda_int_fn fn, void *arg)
{
    struct req *q = rda_req_new(c, K_PING, FN(fn), arg);
    proto_ping(&q->lq.cmd);
    rda_route(q);
}

void rda_meta_read(rda_conn *c, const char *sku, rda_meta_fn fn, void *arg)
{
    struct req *q = rda_req_new(c, K_META, FN(fn), arg);
    proto_meta_read(&q->lq.cmd, sku);
    rda_route(q);
}

void rda_record_read(rda_conn *c, const char *id, const char *sku, long long epoch,
                     rda_record_fn fn, void *arg)
{
    struct req *q = rda_req_new(c, K_RECORD, FN(fn), arg);
    snprintf(q->sku, sizeof q->sku, "%s", sku);
    q->epoch = epoch;
    snprintf(q->id, sizeof q->id, "%s", id);
    proto_record_read(&q->lq.cmd, id);
    rda_route(q);
}

/* Send a fan-out of f->n parts: part i built by `build`, each to its own slot. */
static void fan_out(rda_conn *c, struct fan *f,
                    void (*build)(struct rd_cmd *cmd, const char *sku, int i,
                                  const char *id),
                    const char *sku, const char *id)
{
    f->left = f->n;
    f->v = seg_calloc((size_t)f->n + 1, sizeof *f->v);
    for (int i = 0; i < f->n; i++) {
        struct req *q = rda_req_new(c, K_PART, NULL, NULL);
        q->fan = f;
        q->part = i;
        build(&q->lq.cmd, sku, i, id);
        rda_route(q);
    }
}

static void build_stock_read(struct rd_cmd *cmd, const char *sku, int i, const char *id)
{
    (void)id;
    proto_stock_read(cmd, sku, i);
}

static void build_order_find(struct rd_cmd *cmd, const char *sku, int i, const char *id)
{
    proto_order_in_segment(cmd, sku, i, id);
}

void rda_stocks_read(rda_conn *c, const char *sku, int n, rda_stocks_fn fn, void *arg)
{
    if (rda_cluster(c) && n > 1) { /* one MGET cannot span the segments' slots */
        struct fan *f = seg_calloc(1, sizeof *f);
        f->n = n;
        f->fn = FN(fn);
        f->arg = arg;
        fan_out(c, f, build_stock_read, sku, NULL);
        return;
    }
    struct req *q = rda_req_new(c, K_STOCKS, FN(fn), arg);
    q->n = n;
    proto_stocks_read(&q->lq.cmd, sku, n);
    rda_route(q);
}

void rda_find_order(rda_conn *c, const char *sku, int n, const char *id, rda_found_fn fn,
                    void *arg)
{
    struct fan *f = seg_calloc(1, sizeof *f);
    f->n = n;
    f->what = FAN_FIND;
    f->fn = FN(fn);
    f->arg = arg;
    fan_out(c, f, build_order_find, sku, id);
}

void rda_claim(rda_conn *c, const char *id, const char *attempt, const char *sku,
               long long epoch, int lease_ms, const char *dead, const char *plan,
               long long dead_epoch, rda_reply_fn fn, void *arg)
{
    struct req *q = rda_req_new(c, K_REPLY, FN(fn), arg);
    proto_claim(&q->lq.cmd, id, attempt, sku, epoch, lease_ms, dead, plan, dead_epoch);
    rda_route(q);
}

void rda_intent(rda_conn *c, const char *id, bool add, rda_int_fn fn, void *arg)
{
    struct req *q = rda_req_new(c, K_PING, FN(fn), arg);
    if (add)
        proto_intent_add(&q->lq.cmd, id, base_wall_ms());
    else
        proto_intent_done(&q->lq.cmd, id);
    rda_route(q);
}

void rda_deduct_part(rda_conn *c, const char *sku, long long epoch, int i,
                     const char *token, long long fence, const char *id, long long qty,
                     long long until, bool first, rda_reply_fn fn, void *arg)
{
    struct req *q = rda_req_new(c, K_REPLY, FN(fn), arg);
    proto_deduct_slot(&q->lq.cmd, sku, epoch, i, token, id, qty, until, first, fence);
    rda_route(q);
}

int rda_undo(rda_conn *c, const char *id, const char *plan, rda_int_fn fn, void *arg)
{
    struct proto_plan p;
    if (proto_plan_parse(plan, &p) != 0)
        return -1;
    struct fan *f = seg_calloc(1, sizeof *f);
    f->n = f->left = p.n;
    f->what = FAN_UNDO;
    f->fn = FN(fn);
    f->arg = arg;
    f->v = seg_calloc((size_t)p.n, sizeof *f->v);
    for (int k = 0; k < p.n; k++) {
        struct req *q = rda_req_new(c, K_PART, NULL, NULL);
        q->fan = f;
        q->part = k;
        proto_undo_part(&q->lq.cmd, p.placed, p.epoch, p.seg[k], id, k == 0);
        rda_route(q);
    }
    proto_plan_free(&p);
    return 0;
}

void rda_confirm(rda_conn *c, const char *id, const char *attempt, const char *record,
                 const char *sku, long long epoch, rda_reply_fn fn, void *arg)
{
    struct req *q = rda_req_new(c, K_REPLY, FN(fn), arg);
    proto_confirm(&q->lq.cmd, id, attempt, record, sku, epoch);
    rda_route(q);
}

/* True when order `id`'s record shares a slot with segment i of `sku` (always on a
 * standalone Redis: one node). */
static bool record_with_segment(const rda_conn *c, const char *sku, int i, const char *id)
{
    if (!rda_cluster(c))
        return true;
    char seg[SEG_KEY_MAX], rec[SEG_KEY_MAX];
    seg_key_stock(seg, sku, i);
    seg_key_order(rec, id);
    return rd_key_slot(seg, strlen(seg)) == rd_key_slot(rec, strlen(rec));
}

void rda_id_for_segment(rda_conn *c, const char *sku, int i, char *id)
{
    if (!rda_cluster(c))
        return;
    char seg[SEG_KEY_MAX];
    seg_key_stock(seg, sku, i);
    rd_name_for_slot(id, strlen(id), rd_key_slot(seg, strlen(seg)));
}

/* One node's part of an rda_wait. */
struct wait_part {
    rda_conn *c;
    struct fan *f;
    int part;
};

static void wait_part_done(void *arg, int rc, int replicas)
{
    struct wait_part *p = arg;
    if (rc < 0) {
        p->f->failed = true;
        rda_want_refresh(p->c); /* a node gone or a slot moved may be a failover */
    } else {
        p->f->v[p->part] = replicas;
    }
    rda_fan_answered(p->f);
    free(p);
}

/* Ask the WAITs of the node that serves `key` (made on the first ask there). */
static void wait_at(rda_conn *c, const char *key, int timeout_ms, struct fan *f, int part)
{
    if (c->closing) { /* a callback calling on a handle being freed: answered -1 */
        struct req *q = rda_req_new(c, K_PART, NULL, NULL);
        q->fan = f;
        q->part = part;
        q->later = c->delayed;
        c->delayed = q;
        return;
    }
    int slot = rd_key_slot(key, strlen(key));
    int i = rda_cluster(c) && c->route[slot] >= 0 ? c->route[slot] : 0;
    if (c->waits[i] == NULL) {
        struct rd_target to = c->to; /* links[0]: the seed, as configured */
        if (i > 0) {
            to.host = link_host(c->links[i]);
            to.port = link_port(c->links[i]);
            to.unix_path = NULL;
        }
        c->waits[i] = waits_create(c->base, &to, &c->own);
    }
    struct wait_part *p = seg_calloc(1, sizeof *p);
    p->c = c;
    p->f = f;
    p->part = part;
    waits_ask(c->waits[i], slot, timeout_ms, wait_part_done, p);
}

void rda_wait(rda_conn *c, const char *sku, int i, const char *id, int timeout_ms,
              rda_int_fn fn, void *arg)
{
    struct fan *f = seg_calloc(1, sizeof *f);
    /* One WAIT per node written: a record in the segment's slot is on its. */
    bool seg = i >= 0, rec = id != NULL && (i < 0 || !record_with_segment(c, sku, i, id));
    f->n = seg + rec;
    f->left = f->n;
    f->what = FAN_LEAST;
    f->fn = FN(fn);
    f->arg = arg;
    f->v = seg_calloc(2, sizeof *f->v);
    char key[SEG_KEY_MAX];
    for (int part = 0; part < f->n; part++) {
        if (part == 0 && seg)
            seg_key_stock(key, sku, i);
        else
            seg_key_order(key, id);
        wait_at(c, key, timeout_ms, f, part);
    }
}

void rda_wait_keys(rda_conn *c, int n, char *const *keys, int timeout_ms, rda_int_fn fn,
                   void *arg)
{
    struct fan *f = seg_calloc(1, sizeof *f);
    f->n = f->left = n;
    f->what = FAN_LEAST;
    f->fn = FN(fn);
    f->arg = arg;
    f->v = seg_calloc((size_t)n + 1, sizeof *f->v);
    for (int part = 0; part < n; part++)
        wait_at(c, keys[part], timeout_ms, f, part);
}

void rda_acquire(rda_conn *c, const char *sku, long long epoch, int i, const char *id,
                 long long qty, const char *token, int ttl_ms, long long fence,
                 rda_reply_fn fn, void *arg)
{
    struct req *q = rda_req_new(c, K_REPLY, FN(fn), arg);
    if (rda_cluster(c)) /* the id was claimed: CLAIM checked the record */
        proto_acquire_slot(&q->lq.cmd, sku, epoch, i, qty, token, ttl_ms, fence);
    else
        proto_acquire(&q->lq.cmd, sku, epoch, i, id, qty, token, ttl_ms, fence);
    rda_route(q);
}

bool rda_deduct(rda_conn *c, const char *sku, long long epoch, int i, const char *token,
                long long fence, const char *attempt, const char *id, long long qty,
                const char *record, long long until, bool keep, rda_reply_fn fn,
                void *arg)
{
    struct req *q = rda_req_new(c, K_REPLY, FN(fn), arg);
    bool whole = until == 0 && record_with_segment(c, sku, i, id);
    if (whole) /* one slot: the record goes with the deduction */
        proto_deduct(&q->lq.cmd, sku, epoch, i, token, attempt, id, qty, record, keep,
                     fence);
    else /* the record is CONFIRM's, in the id's slot */
        proto_deduct_slot(&q->lq.cmd, sku, epoch, i, token, id, qty, until, true, fence);
    rda_route(q);
    return whole;
}

bool rda_deduct_batch(rda_conn *c, const char *sku, long long epoch, int i,
                      const char *token, long long fence, int n,
                      const struct store_batch_order *b, store_batch_fn fn, void *arg)
{
    for (int k = 0; k < n; k++)
        if (!record_with_segment(c, sku, i, b[k].id))
            return false;
    struct req *q = rda_req_new(c, K_BATCH, FN(fn), arg);
    q->n = n;
    proto_deduct_batch(&q->lq.cmd, sku, epoch, i, token, fence, n, b);
    rda_route(q);
    return true;
}

void rda_lock(rda_conn *c, const char *sku, int i, const char *token, int ttl_ms,
              rda_int_fn fn, void *arg)
{
    struct req *q = rda_req_new(c, K_INT_TAKEN, FN(fn), arg);
    snprintf(q->token, sizeof q->token, "%s", token);
    proto_lock(&q->lq.cmd, sku, i, token, ttl_ms);
    rda_route(q);
}

void rda_release(rda_conn *c, const char *sku, int i, const char *token, rda_int_fn fn,
                 void *arg)
{
    struct req *q = rda_req_new(c, K_INT_DONE, FN(fn), arg);
    proto_release(&q->lq.cmd, sku, i, token);
    rda_route(q);
}

void rda_renew(rda_conn *c, const char *sku, int i, const char *token, int ttl_ms,
               rda_int_fn fn, void *arg)
{
    struct req *q = rda_req_new(c, K_INT_DONE, FN(fn), arg);
    proto_renew(&q->lq.cmd, sku, i, token, ttl_ms);
    rda_route(q);
}

void rda_deduct_multi(rda_conn *c, const char *sku, long long epoch, const char *id,
                      const char *record, const char *attempt, const struct rd_parts *p,
                      rda_multi_fn fn, void *arg)
{
    struct req *q = rda_req_new(c, K_MULTI, FN(fn), arg);
    q->n = p->n;
    proto_deduct_multi(&q->lq.cmd, sku, epoch, id, record, attempt, p);
    rda_route(q);
}

void rda_adjust(rda_conn *c, const char *sku, long long epoch, int segments,
                const char *const *tok, const long long *fence, const char *op,
                long long add, long long limit, const char *rid, const char *sig,
                rda_reply_fn fn, void *arg)
{
    struct req *q = rda_req_new(c, K_REPLY, FN(fn), arg);
    proto_adjust(&q->lq.cmd, sku, epoch, segments, tok, fence, op, add, limit, rid, sig);
    rda_route(q);
}
