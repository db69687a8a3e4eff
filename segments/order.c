/* order.c -- the order path: ring walk, per-segment attempt, replay detection. */
#include "segments/order.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "segments/internal.h"
#include "segments/lock.h"
#include "segments/ring.h"
#include "segments/skutab.h"
#include "segments/store.h"
#include "segments/watchdog.h"

/* What one visit to a segment came to. */
enum visit { V_DONE, V_BUSY, V_SHORT, V_ERROR };

struct walk {
    inv_conn *c;
    const struct order_request *req;
    struct order_result *res;
    sku_local *e;
    struct sku_view view;
    bool stock_left;            /* some segment held stock, though less than qty */
};

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* An order id met again: the same order (REPLAYED, record kept) or a clash. */
static enum visit replayed(struct walk *w, char *record)
{
    json_t *o = json_loads(record, 0, NULL);
    const char *sku = json_string_value(json_object_get(o, "sku"));
    json_int_t qty = json_integer_value(json_object_get(o, "qty"));
    bool same = sku != NULL && strcmp(sku, w->req->sku) == 0 && qty == w->req->qty;
    json_decref(o);
    if (same) {
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
    if (known && stock == 0)
        skutab_mark_empty(w->e, w->view.gen, i);
    if (stock > 0)
        w->stock_left = true;
    return V_SHORT;
}

/* Deduct from segment i (under `token`'s lock, or none when token is ""). */
static enum visit deduct(struct walk *w, int i, const char *token)
{
    char record[256];
    snprintf(record, sizeof record,
             "{\"order_id\":\"%s\",\"sku\":\"%s\",\"qty\":%lld,\"segment\":%d,"
             "\"status\":\"confirmed\"}",
             w->res->order_id, w->req->sku, w->req->qty, i);
    struct lock_reply r;
    if (lock_deduct(w->c, w->req->sku, i, token, w->res->order_id, w->req->qty, record,
                    &r) != 0)
        return V_ERROR;
    switch (r.code) {
    case SCRIPT_R_OK:
        if (r.stock == 0)
            skutab_mark_empty(w->e, w->view.gen, i);
        if ((w->res->record = strdup(record)) == NULL) {
            fprintf(stderr, "out of memory\n");
            abort();
        }
        w->res->status = INV_OK;
        w->res->segment = i;
        return V_DONE;
    case SCRIPT_R_FENCED:
        stat_add(w->c->v, STAT_FENCED_REJECTIONS, 1);
        return V_BUSY;
    case SCRIPT_R_EXISTS:
        return replayed(w, r.record);
    case SCRIPT_R_SHORT:
        return short_of_stock(w, i, r.stock, true);
    default:
        return short_of_stock(w, i, 0, false);
    }
}

/* Mode lock: claim locally, lock in Redis, do the work under a renewed lease, deduct. */
static enum visit visit_locked(struct walk *w, int i)
{
    inv *v = w->c->v;
    if (!skutab_claim(w->e, i)) {
        stat_add(v, STAT_BUSY_SKIPS, 1);
        return V_BUSY;
    }
    struct lease lease;
    lock_new_token(w->c, lease.token);
    stat_add(v, STAT_LOCK_ATTEMPTS, 1);
    struct lock_reply r;
    enum visit out;
    if (lock_acquire(w->c, w->req->sku, i, w->res->order_id, w->req->qty, lease.token,
                     &r) != 0) {
        out = V_ERROR;
    } else if (r.code == SCRIPT_R_OK) {
        stat_add(v, STAT_LOCK_ACQUIRED, 1);
        seg_key_lock(lease.key, w->req->sku, i);
        watchdog_add(v->wd, &lease);
        if (w->view.cfg.hold_ms > 0)
            sleep_ms(w->view.cfg.hold_ms);
        if (watchdog_remove(v->wd, &lease)) {
            /* The lease lapsed while we worked; the fenced write would refuse us. */
            stat_add(v, STAT_FENCED_REJECTIONS, 1);
            out = V_BUSY;
        } else {
            out = deduct(w, i, lease.token);
        }
    } else if (r.code == SCRIPT_R_BUSY) {
        stat_add(v, STAT_BUSY_SKIPS, 1);
        out = V_BUSY;
    } else if (r.code == SCRIPT_R_EXISTS) {
        out = replayed(w, r.record);
    } else {
        out = short_of_stock(w, i, r.stock, r.code == SCRIPT_R_SHORT);
    }
    skutab_unclaim(w->e, i);
    return out;
}

/* Walk the ring until the order is placed, refused, or lock_wait_ms has passed. */
static inv_status walk_ring(struct walk *w)
{
    const int n = w->view.cfg.segments;
    const int64_t deadline = inv_now_ms() + w->c->v->opt.lock_wait_ms;
    for (int round = 0;; round++) {
        if (skutab_sold_out(w->e, w->view.gen))
            return INV_SOLD_OUT;
        int start = (int)inv_rand(w->c, (uint32_t)n), busy = 0;
        w->stock_left = false;
        for (int k = 0; k < n; k++) {
            int i = ring_segment(start, k, n);
            if (skutab_is_empty(w->e, i))
                continue;
            enum visit r = w->view.cfg.mode == SKU_MODE_LOCK ? visit_locked(w, i)
                                                              : deduct(w, i, "");
            if (r == V_DONE)
                return w->res->status;
            if (r == V_ERROR)
                return INV_UNAVAILABLE;
            busy += r == V_BUSY;
        }
        if (busy == 0)
            return w->stock_left ? INV_INSUFFICIENT : INV_SOLD_OUT;
        int remaining = (int)(deadline - inv_now_ms());
        if (remaining <= 0)
            return INV_BUSY;
        stat_add(w->c->v, STAT_LOCK_WAITS, 1);
        skutab_wait(w->e, ring_backoff_ms(round, inv_rand(w->c, UINT32_MAX), remaining));
    }
}

static enum stat_id outcome_stat(inv_status s)
{
    switch (s) {
    case INV_OK: return STAT_ORDERS_CONFIRMED;
    case INV_REPLAYED: return STAT_ORDERS_REPLAYED;
    case INV_SOLD_OUT: return STAT_ORDERS_SOLD_OUT;
    case INV_INSUFFICIENT: return STAT_ORDERS_INSUFFICIENT;
    case INV_UNKNOWN_SKU: return STAT_ORDERS_UNKNOWN_SKU;
    case INV_CONFLICT: return STAT_ORDERS_CONFLICT;
    case INV_BUSY: return STAT_ORDERS_BUSY;
    default: return STAT_ORDERS_UNAVAILABLE;
    }
}

inv_status order_place(inv_conn *c, const struct order_request *req, struct order_result *res)
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

    struct walk w = {.c = c, .req = req, .res = res};
    inv_status st = skutab_get(c, req->sku, &w.e, &w.view);
    if (st == INV_OK)
        st = walk_ring(&w);
    if (st != INV_OK && st != INV_REPLAYED) {
        free(res->record);
        res->record = NULL;
    }
    res->status = st;
    stat_add(c->v, outcome_stat(st), 1);
    return st;
}

inv_status order_get(inv_conn *c, const char *id, char **record)
{
    *record = NULL;
    if (!seg_valid_name(id))
        return INV_INVALID;
    char key[SEG_KEY_MAX];
    redisReply *r = store_command(c, "GET %s", seg_key_order(key, id));
    if (r == NULL)
        return INV_UNAVAILABLE;
    inv_status st = INV_NOT_FOUND;
    if (r->type == REDIS_REPLY_STRING) {
        if ((*record = strdup(r->str)) == NULL) {
            fprintf(stderr, "out of memory\n");
            abort();
        }
        st = INV_OK;
    }
    freeReplyObject(r);
    return st;
}

void order_result_clear(struct order_result *res)
{
    free(res->record);
    res->record = NULL;
}
