/* order.c -- order lookups and cancels for a worker's connection (see order.h). */
#include "segments/order.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/clock.h"
#include "segments/internal.h"
#include "segments/ledger.h"
#include "segments/engine.h"
#include "segments/record.h"
#include "segments/ltab.h"
#include "base/xalloc.h"

/* How many views a cancel tries before answering busy. */
#define STALE_TRIES 4
/* cancel_once's answer when the order or its SKU changed since it was read. */
#define CANCEL_STALE (-2)

/* GET the record of order `id`: INV_OK (*record malloc'd), INV_NOT_FOUND,
 * INV_UNAVAILABLE. */
static inv_status read_record(inv_conn *c, const char *id, char **record)
{
    int found = ADMIN_CALL(c->adm, record_read, id, record);
    return found < 0 ? INV_UNAVAILABLE : found ? INV_OK : INV_NOT_FOUND;
}

inv_status order_get(inv_conn *c, const char *id, char **record)
{
    *record = NULL;
    if (!seg_valid_name(id))
        return INV_INVALID;
    inv_status s = read_record(c, id, record);
    /* Past record_retention_s Redis has forgotten it; the ledger has it (ledger.h). */
    return s == INV_NOT_FOUND && c->v->ledger != NULL ? ledger_order(c, id, record) : s;
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

struct answer {
    bool done;
    inv_status st;
};

static void answered(void *arg, struct order_result *res)
{
    struct answer *a = arg;
    a->done = true;
    a->st = res->status;
}

/* One try at cancelling order `id` whose record reads `rec`: INV_OK with *record,
 * INV_NOT_FOUND, INV_BUSY, INV_UNAVAILABLE, or CANCEL_STALE when the order or its SKU
 * changed since `rec` was read (read it again). The cancel runs on the engine's code
 * on c's own loop (engine.h engine_cancel), as a restock does. */
static int cancel_once(inv_conn *c, const char *id, const char *rec, char **record)
{
    struct parsed *p = seg_malloc(sizeof *p);
    lsku *s = NULL;
    struct sku_view view;
    inv_status st = INV_UNAVAILABLE;
    bool ok = parse_record(rec, p) == 0;
    if (ok && (!p->cancelled || (ADMIN_CALL0(c->adm, caps) & ADMIN_CAP_CLUSTER)))
        st = ltab_get(c, p->sku, &s, &view);
    /* A record cancelled already is the answer, except for a "replicated" SKU on a
     * cluster: there the segments' part is checked (and redone, if a failover lost
     * it) before the 200 (store.h cancel). */
    if (!ok || (p->cancelled && (st != INV_OK || !view.cfg.replicated))) {
        ltab_release(ltab_of_conn(c), s);
        free(p);
        *record = seg_strdup(rec); /* already cancelled (or nothing we can read) */
        return INV_OK;
    }
    if (st != INV_OK) {
        free(p);
        return st == INV_UNKNOWN_SKU ? INV_NOT_FOUND : st;
    }
    char *cancelled = p->cancelled ? seg_strdup(rec)
                                   : record_build(id, p->sku, p->qty, p->n, p->seg,
                                                  p->part, "cancelled");
    struct engine_cancel x = {.id = id,
                              .expected = rec,
                              .cancelled = cancelled,
                              .n = p->n,
                              .seg = p->seg,
                              .part = p->part};
    struct answer a = {0};
    engine_cancel(engine_of_conn(c), p->sku, &x, answered, &a);
    inv_conn_wait(c, &a.done);
    int code = a.st == INV_OK ? x.code : -1;
    if (code == STORE_EXISTS) /* cancelled already: that record */
        *record = x.record;
    else
        free(x.record);
    if (x.applied && ltab_shared(s) != NULL)
        skutab_count(ltab_shared(s), STAT_ORDERS_CANCELLED);
    ltab_release(ltab_of_conn(c), s);
    if (x.applied) {
        /* The store bumped the generation: sold-out flags here go at once. */
        skutab_invalidate(c->v, p->sku);
        stat_add(c->v, STAT_ORDERS_CANCELLED, 1);
    }
    if (code == STORE_OK)
        *record = cancelled;
    else
        free(cancelled);
    if (code == STORE_STALE) /* the next try must not trust the cached view */
        skutab_invalidate(c->v, p->sku);
    free(p);
    if (a.st != INV_OK) /* the locks not had, the SKU gone, no answer */
        return a.st == INV_UNKNOWN_SKU ? INV_NOT_FOUND : a.st;
    switch (code) {
    case STORE_OK:
        return INV_OK;
    case STORE_EXISTS:
        return *record != NULL ? INV_OK : INV_UNAVAILABLE;
    case STORE_MISSING:
        return INV_NOT_FOUND;
    case STORE_FENCED:
        return INV_BUSY;
    case STORE_NOT_REPLICATED:
        return INV_NOT_REPLICATED;
    case STORE_STALE:
        return CANCEL_STALE;
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
    int st = CANCEL_STALE;
    for (int try = 0; st == CANCEL_STALE && try < STALE_TRIES; try++) {
        char *rec = NULL;
        st = read_record(c, id, &rec);
        if (st == INV_NOT_FOUND && c->v->ledger != NULL && try == 0) {
            /* Past record_retention_s: the ledger's record, back in Redis (ledger.h). */
            st = ledger_restore(c, id, record);
            if (st == -1)
                st = read_record(c, id, &rec);
            else
                break;
        }
        if (st != INV_OK)
            break;
        st = cancel_once(c, id, rec, record);
        free(rec);
    }
    return st == CANCEL_STALE ? INV_BUSY : (inv_status)st;
}

void order_result_clear(struct order_result *res)
{
    free(res->record);
    res->record = NULL;
}
