/* order.c -- the order path: ring walk, per-segment attempt, multi-segment orders,
 * replay detection and cancel (see order.h). */
#include "segments/order.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "segments/internal.h"
#include "segments/lockset.h"
#include "segments/record.h"
#include "segments/ring.h"
#include "segments/sku.h"
#include "segments/skutab.h"
#include "segments/watchdog.h"
#include "segments/xalloc.h"

/* What one visit to a segment came to. V_CLAIMED: another worker of this process
 * has it (a release hands it to a waiter); V_BUSY: locked elsewhere, or lost;
 * V_STALE: the SKU is not what this walk's view of it says (reset, deleted). */
enum visit { V_DONE, V_CLAIMED, V_BUSY, V_SHORT, V_ERROR, V_STALE };

/* walk_ring's answer when the view went stale: re-read the settings, walk again. */
#define WALK_STALE (-2)
/* How many views an order, cancel or admin write tries before answering busy. */
#define STALE_TRIES 4

struct walk {
    inv_conn *c;
    const struct order_request *req;
    struct order_result *res;
    sku_local *e;
    struct sku_view view;
    int64_t started_ms;
    bool stock_left;                  /* some segment held stock, though less than qty */
    long long seen[SEG_MAX_SEGMENTS]; /* stock last seen per segment, -1 unknown */
};

/* An order id met again: the same order (REPLAYED, record kept) or a clash. */
static enum visit replayed(struct walk *w, char *record)
{
    if (record_same_order(record, w->req->sku, w->req->qty)) {
        w->res->status = INV_REPLAYED;
        w->res->record = record;
    } else {
        w->res->status = INV_CONFLICT;
        free(record);
    }
    return V_DONE;
}

static enum visit short_of_stock(struct walk *w, int i, long long stock, bool known)
{
    stat_add(w->c->v, STAT_FALL_THROUGHS, 1);
    w->seen[i] = known ? stock : 0;
    if (known)
        skutab_note_stock(w->e, w->view.gen, i, stock);
    if (stock > 0)
        w->stock_left = true;
    return V_SHORT;
}

/* Deduct from segment i (under `token`'s lock, or none when token is ""). */
static enum visit deduct(struct walk *w, int i, const char *token)
{
    long long qty = w->req->qty;
    char *record =
        record_build(w->res->order_id, w->req->sku, qty, 1, &i, &qty, "confirmed");
    char attempt[33]; /* the lock's token, or a fresh id for an atomic attempt */
    if (token[0] != '\0')
        snprintf(attempt, sizeof attempt, "%s", token);
    else
        inv_new_token(w->c, attempt);
    struct rd_reply r;
    if (rd_deduct(w->c->rd, w->req->sku, w->view.epoch, i, token, attempt,
                  w->res->order_id, qty, record, &r) != 0) {
        free(record);
        return V_ERROR;
    }
    if (r.code == RD_OK) {
        skutab_note_stock(w->e, w->view.gen, i, r.value);
        w->res->record = record;
        w->res->status = INV_OK;
        w->res->segment = i;
        return V_DONE;
    }
    free(record);
    switch (r.code) {
    case RD_FENCED:
        stat_add(w->c->v, STAT_FENCED_REJECTIONS, 1);
        return V_BUSY;
    case RD_STALE:
        return V_STALE;
    case RD_EXISTS:
        return replayed(w, r.record);
    case RD_SHORT:
        return short_of_stock(w, i, r.value, true);
    default:
        return short_of_stock(w, i, 0, false);
    }
}

/* Mode lock: claim locally (unless `claimed` already), lock in Redis, do the work
 * under a renewed lease, deduct. */
static enum visit visit_locked(struct walk *w, int i, bool claimed)
{
    inv *v = w->c->v;
    if (!claimed && !skutab_claim(w->e, i)) {
        stat_add(v, STAT_BUSY_SKIPS, 1);
        return V_CLAIMED;
    }
    struct lease lease;
    inv_new_token(w->c, lease.token);
    stat_add(v, STAT_LOCK_ATTEMPTS, 1);
    struct rd_reply r;
    enum visit out;
    if (rd_acquire(w->c->rd, w->req->sku, w->view.epoch, i, w->res->order_id, w->req->qty,
                   lease.token, v->opt.lock_ttl_ms, &r) != 0) {
        out = V_ERROR;
    } else if (r.code == RD_STALE) {
        out = V_STALE;
    } else if (r.code == RD_OK) {
        stat_add(v, STAT_LOCK_ACQUIRED, 1);
        stat_observe(v, HIST_LOCK_WAIT, (inv_now_ms() - w->started_ms) * 1000);
        snprintf(lease.sku, sizeof lease.sku, "%s", w->req->sku);
        lease.seg = i;
        watchdog_add(v->wd, &lease);
        if (w->view.cfg.hold_ms > 0)
            inv_sleep_ms(w->view.cfg.hold_ms);
        if (watchdog_remove(v->wd, &lease)) {
            /* The lease lapsed while we worked; the fenced write would refuse us. */
            stat_add(v, STAT_FENCED_REJECTIONS, 1);
            out = V_BUSY;
        } else {
            out = deduct(w, i, lease.token);
        }
    } else if (r.code == RD_BUSY) {
        skutab_note_stock(w->e, w->view.gen, i, r.value);
        stat_add(v, STAT_BUSY_SKIPS, 1);
        out = V_BUSY;
    } else if (r.code == RD_EXISTS) {
        out = replayed(w, r.record);
    } else {
        out = short_of_stock(w, i, r.value, r.code == RD_SHORT);
    }
    skutab_unclaim(w->e, i);
    return out;
}

/* No segment holds qty: take it from several, largest first, locked in index order.
 * Returns INV_OK/REPLAYED/CONFLICT/INSUFFICIENT/BUSY/UNAVAILABLE, -1 to walk again,
 * or WALK_STALE. */
static int multi_segment(struct walk *w, int64_t deadline)
{
    int seg[SEG_MAX_SEGMENTS];
    long long part[SEG_MAX_SEGMENTS];
    int k = ring_plan_parts(w->seen, w->view.cfg.segments, w->req->qty, seg, part);
    if (k == 0)
        return INV_INSUFFICIENT;

    bool locked = w->view.cfg.mode == SKU_MODE_LOCK;
    inv_status why = INV_OK;
    struct lockset *set = NULL;
    if (locked &&
        (set = lockset_take(w->c, w->e, w->req->sku, seg, k, deadline, &why)) == NULL)
        return why;

    char *record = record_build(w->res->order_id, w->req->sku, w->req->qty, k, seg, part,
                                "confirmed");
    char attempt[33];
    inv_new_token(w->c, attempt);
    const char **tok = seg_malloc(sizeof *tok * (size_t)k);
    for (int j = 0; j < k; j++)
        tok[j] = set != NULL ? lockset_token(set, j) : "";
    const struct rd_parts parts = {k, seg, part, tok};
    long long left[SEG_MAX_SEGMENTS];
    struct rd_reply r;
    int code = rd_deduct_multi(w->c->rd, w->req->sku, w->view.epoch, w->res->order_id,
                               record, attempt, &parts, &r, left) < 0
                   ? -1
                   : r.code;
    free(tok);
    if (set != NULL)
        lockset_drop(w->c, set, code < 0);
    if (code == RD_OK || code == RD_SHORT)
        for (int j = 0; j < k; j++) /* what each segment holds now */
            skutab_note_stock(w->e, w->view.gen, seg[j], left[j]);
    int out = -1;
    if (code == RD_OK) {
        stat_add(w->c->v, STAT_MULTI_SEGMENT, 1);
        w->res->record = record;
        record = NULL;
        w->res->segment = seg[0];
        out = INV_OK;
    } else if (code == RD_EXISTS && r.record != NULL) {
        replayed(w, r.record);
        r.record = NULL;
        out = w->res->status;
    } else if (code < 0) {
        out = INV_UNAVAILABLE;
    } else if (code == RD_FENCED) {
        stat_add(w->c->v, STAT_FENCED_REJECTIONS, 1);
    } else if (code == RD_STALE) {
        out = WALK_STALE;
    }
    rd_reply_clear(&r);
    free(record);
    return out;
}

/* Lock mode, most segments seen empty, stock left: even it out once per generation so
 * the end of a sale keeps every segment working. */
static void maybe_rebalance(struct walk *w)
{
    const int n = w->view.cfg.segments;
    if (w->view.cfg.mode != SKU_MODE_LOCK || !w->view.cfg.rebalance || n < 2)
        return;
    int empty = skutab_empty_count(w->e, w->view.gen);
    if (empty * 2 < n || empty == n || !skutab_rebalance_begin(w->e, w->view.gen))
        return;
    sku_spread(w->c, w->req->sku);
    skutab_rebalance_done(w->e);
    skutab_get(w->c, w->req->sku, &w->e, &w->view);
}

/* lock_wait_ms is over and some segments were busy. Busy with what? When the stock
 * of every segment together cannot fill the order, the honest answer is sold out or
 * insufficient, not "busy, retry": a retry could never succeed. */
static inv_status verdict_at_deadline(struct walk *w)
{
    const int n = w->view.cfg.segments;
    long long *stock = seg_malloc(sizeof *stock * (size_t)n), total = 0;
    int rc = rd_segments_read(w->c->rd, w->req->sku, n, stock, NULL, NULL, NULL);
    for (int i = 0; i < n && rc == 0; i++)
        total += stock[i];
    free(stock);
    if (rc != 0)
        return INV_UNAVAILABLE;
    return total == 0 ? INV_SOLD_OUT : total < w->req->qty ? INV_INSUFFICIENT : INV_BUSY;
}

/* Walk the ring until the order is placed, refused, or lock_wait_ms has passed.
 * A round that finds every candidate busy waits: for a claim handed over by a local
 * worker when only local workers were in the way (no polling; a fair queue), else a
 * jittered backoff, since a lock held elsewhere sends no signal here. A handed claim
 * is visited first in the next round. Returns an inv_status or WALK_STALE. */
static int walk_ring(struct walk *w)
{
    const int64_t deadline = w->started_ms + w->c->v->opt.lock_wait_ms;
    int handed = -1, remote_rounds = 0;
    for (;;) {
        if (handed >= w->view.cfg.segments) { /* the SKU shrank: not ours to visit */
            skutab_unclaim(w->e, handed);
            handed = -1;
        }
        if (handed < 0 && skutab_sold_out(w->e, w->view.gen)) {
            stat_add(w->c->v, STAT_SOLD_OUT_FAST, 1);
            return INV_SOLD_OUT;
        }
        if (handed < 0)
            maybe_rebalance(w);
        const int n = w->view.cfg.segments;
        int start = handed >= 0 && handed < n ? handed : (int)inv_rand(w->c, (uint32_t)n);
        int claimed = 0, busy = 0;
        w->stock_left = false;
        for (int k = 0; k < n; k++) {
            int i = ring_segment(start, k, n);
            bool mine = k == 0 && i == handed;
            long long hint = skutab_hint(w->e, i);
            w->seen[i] = hint;
            if (hint >= 0 && hint < w->req->qty) { /* cannot fill it: no need to ask */
                w->stock_left |= hint > 0;
                if (mine)
                    skutab_unclaim(w->e, i);
                continue;
            }
            enum visit r = w->view.cfg.mode == SKU_MODE_LOCK ? visit_locked(w, i, mine)
                                                             : deduct(w, i, "");
            if (r == V_DONE)
                return w->res->status;
            if (r == V_ERROR)
                return INV_UNAVAILABLE;
            if (r == V_STALE)
                return WALK_STALE;
            claimed += r == V_CLAIMED;
            busy += r == V_BUSY;
        }
        handed = -1;
        if (claimed + busy == 0 && !w->stock_left)
            return INV_SOLD_OUT;
        if (claimed + busy == 0) {
            int st = n > 1 ? multi_segment(w, deadline) : INV_INSUFFICIENT;
            if (st != -1)
                return st;
        }
        int remaining = (int)(deadline - inv_now_ms());
        if (remaining <= 0)
            return verdict_at_deadline(w);
        if (claimed + busy > 0) {
            stat_add(w->c->v, STAT_LOCK_WAITS, 1);
            int ms = busy > 0 ? ring_backoff_ms(remote_rounds++,
                                                inv_rand(w->c, UINT32_MAX), remaining)
                              : remaining;
            handed = skutab_wait(w->e, n, w->req->qty, busy == 0, ms);
        }
    }
}

bool order_sold_out_fast(inv *v, const char *sku)
{
    sku_local *e = seg_valid_name(sku) ? skutab_sold_out_now(v, sku) : NULL;
    if (e == NULL)
        return false;
    stat_add(v, STAT_ORDERS_SOLD_OUT, 1);
    stat_add(v, STAT_SOLD_OUT_FAST, 1);
    skutab_count(e, STAT_ORDERS_SOLD_OUT);
    stat_observe(v, HIST_ORDER, 0);
    return true;
}

/* GET the record of order `id`: INV_OK (*record malloc'd), INV_NOT_FOUND,
 * INV_UNAVAILABLE. */
static inv_status read_record(inv_conn *c, const char *id, char **record)
{
    int found = rd_record_read(c->rd, id, record);
    return found < 0 ? INV_UNAVAILABLE : found ? INV_OK : INV_NOT_FOUND;
}

enum stat_id order_outcome_stat(inv_status s)
{
    switch (s) {
    case INV_OK:
        return STAT_ORDERS_CONFIRMED;
    case INV_REPLAYED:
        return STAT_ORDERS_REPLAYED;
    case INV_SOLD_OUT:
        return STAT_ORDERS_SOLD_OUT;
    case INV_INSUFFICIENT:
        return STAT_ORDERS_INSUFFICIENT;
    case INV_UNKNOWN_SKU:
        return STAT_ORDERS_UNKNOWN_SKU;
    case INV_CONFLICT:
        return STAT_ORDERS_CONFLICT;
    case INV_BUSY:
        return STAT_ORDERS_BUSY;
    default:
        return STAT_ORDERS_UNAVAILABLE;
    }
}

inv_status order_place(inv_conn *c, const struct order_request *req,
                       struct order_result *res)
{
    memset(res, 0, sizeof *res);
    res->segment = -1;
    bool has_id = req->order_id != NULL && req->order_id[0] != '\0';
    if (!seg_valid_name(req->sku) || req->qty < 1 || req->qty > ORDER_QTY_MAX ||
        (has_id && !seg_valid_name(req->order_id)))
        return res->status = INV_INVALID;
    if (has_id)
        snprintf(res->order_id, sizeof res->order_id, "%s", req->order_id);
    else
        inv_random_hex(res->order_id);

    struct walk *w = seg_calloc(1, sizeof *w);
    w->c = c;
    w->req = req;
    w->res = res;
    w->started_ms = inv_now_ms();
    /* A walk refused as stale (the SKU was reset or deleted under this process's
     * cached view) re-reads the settings and walks again. */
    int st = WALK_STALE;
    for (int try = 0; st == WALK_STALE && try < STALE_TRIES; try++) {
        if (try > 0)
            skutab_invalidate(c->v, req->sku);
        st = skutab_get(c, req->sku, &w->e, &w->view);
        if (st == INV_OK)
            st = walk_ring(w);
    }
    if (st == WALK_STALE)
        st = INV_BUSY;
    if ((st == INV_SOLD_OUT || st == INV_INSUFFICIENT) && has_id) {
        /* Segments known empty were skipped without Redis, so the scripts that spot
         * a replay may not have run: a retry of a confirmed order must still get it. */
        char *rec = NULL;
        inv_status got = read_record(c, res->order_id, &rec);
        if (got == INV_OK) {
            replayed(w, rec);
            st = res->status;
        } else if (got == INV_UNAVAILABLE) {
            st = INV_UNAVAILABLE;
        }
    }
    if (st != INV_OK && st != INV_REPLAYED) {
        free(res->record);
        res->record = NULL;
    }
    res->status = st;
    stat_add(c->v, order_outcome_stat(st), 1);
    if (st != INV_UNKNOWN_SKU && w->e != NULL)
        skutab_count(w->e, order_outcome_stat(st));
    stat_observe(c->v, HIST_ORDER, (inv_now_ms() - w->started_ms) * 1000);
    free(w);
    return st;
}

inv_status order_get(inv_conn *c, const char *id, char **record)
{
    *record = NULL;
    return seg_valid_name(id) ? read_record(c, id, record) : INV_INVALID;
}

/* What a record says: SKU, qty, status and the segments it took from. */
struct parsed {
    char sku[SEG_NAME_MAX + 1];
    long long qty;
    bool cancelled;
    int n;
    int seg[SEG_MAX_SEGMENTS];
    long long part[SEG_MAX_SEGMENTS];
};

static int parse_record(const char *record, struct parsed *p)
{
    json_t *o = json_loads(record, 0, NULL), *segs = json_object_get(o, "segments");
    const char *sku = json_string_value(json_object_get(o, "sku"));
    const char *status = json_string_value(json_object_get(o, "status"));
    int rc = -1;
    if (sku && status && seg_valid_name(sku) && json_is_array(segs) &&
        json_array_size(segs) >= 1 && json_array_size(segs) <= SEG_MAX_SEGMENTS) {
        snprintf(p->sku, sizeof p->sku, "%s", sku);
        p->qty = json_integer_value(json_object_get(o, "qty"));
        p->cancelled = strcmp(status, "cancelled") == 0;
        p->n = (int)json_array_size(segs);
        rc = 0;
        for (int k = 0; k < p->n; k++) {
            json_t *e = json_array_get(segs, (size_t)k);
            p->seg[k] = (int)json_integer_value(json_object_get(e, "segment"));
            p->part[k] = json_integer_value(json_object_get(e, "qty"));
            if (p->seg[k] < 0 || p->seg[k] >= SEG_MAX_SEGMENTS ||
                (k && p->seg[k] <= p->seg[k - 1]))
                rc = -1;
        }
    }
    json_decref(o);
    return rc;
}

/* One try at cancelling order `id` whose record reads `rec`: INV_OK with *record,
 * INV_NOT_FOUND, INV_BUSY, INV_UNAVAILABLE, or WALK_STALE when the order or its SKU
 * changed since `rec` was read (read it again). */
static int cancel_once(inv_conn *c, const char *id, const char *rec, char **record)
{
    struct parsed *p = seg_malloc(sizeof *p);
    if (parse_record(rec, p) != 0 || p->cancelled) {
        free(p);
        *record = seg_strdup(rec); /* already cancelled (or nothing we can read) */
        return INV_OK;
    }
    sku_local *e;
    struct sku_view view;
    inv_status st = skutab_get(c, p->sku, &e, &view);
    struct lockset *set = NULL;
    if (st == INV_OK)
        set = lockset_take(c, e, p->sku, p->seg, p->n,
                           inv_now_ms() + c->v->opt.lock_wait_ms, &st);
    if (set == NULL) {
        free(p);
        return st == INV_UNKNOWN_SKU ? INV_NOT_FOUND : st;
    }
    char *cancelled =
        record_build(id, p->sku, p->qty, p->n, p->seg, p->part, "cancelled");
    const char **tok = seg_malloc(sizeof *tok * (size_t)p->n);
    for (int j = 0; j < p->n; j++)
        tok[j] = lockset_token(set, j);
    const struct rd_parts parts = {p->n, p->seg, NULL, tok};
    struct rd_reply r;
    int code = rd_cancel(c->rd, p->sku, view.epoch, id, cancelled, rec, &parts, &r) < 0
                   ? -1
                   : r.code;
    free(tok);
    if (code == RD_EXISTS) { /* cancelled already: that record */
        *record = r.record;
        r.record = NULL;
    }
    rd_reply_clear(&r);
    lockset_drop(c, set, code < 0);
    if (code == RD_OK) {
        /* The script bumped the generation: sold-out flags here go at once. */
        skutab_invalidate(c->v, p->sku);
        stat_add(c->v, STAT_ORDERS_CANCELLED, 1);
        skutab_count(e, STAT_ORDERS_CANCELLED);
        *record = cancelled;
    } else {
        free(cancelled);
    }
    if (code == RD_STALE) /* the next try must not trust the cached view */
        skutab_invalidate(c->v, p->sku);
    free(p);
    switch (code) {
    case RD_OK:
        return INV_OK;
    case RD_EXISTS:
        return *record != NULL ? INV_OK : INV_UNAVAILABLE;
    case RD_MISSING:
        return INV_NOT_FOUND;
    case RD_FENCED:
        return INV_BUSY;
    case RD_STALE:
        return WALK_STALE;
    default:
        return INV_UNAVAILABLE;
    }
}

inv_status order_cancel(inv_conn *c, const char *id, char **record)
{
    *record = NULL;
    if (!seg_valid_name(id))
        return INV_INVALID;
    /* The units given back are the ones Redis holds for the order, and only while
     * the order is still the one read here (the script checks): when it is not (the
     * SKU was reset and the id placed again meanwhile), read it again. */
    int st = WALK_STALE;
    for (int try = 0; st == WALK_STALE && try < STALE_TRIES; try++) {
        char *rec = NULL;
        st = read_record(c, id, &rec);
        if (st != INV_OK)
            break;
        st = cancel_once(c, id, rec, record);
        free(rec);
    }
    return st == WALK_STALE ? INV_BUSY : (inv_status)st;
}

void order_result_clear(struct order_result *res)
{
    free(res->record);
    res->record = NULL;
}
