/* reset.c -- create, reset or delete a SKU on the event loop (async.h rda_reset,
 * store.h reset): one script on a standalone Redis, a state machine of steps on a
 * cluster; then the records its old segments' graveyards name dropped, page by page. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "segments/redis/async_internal.h"
#include "segments/redis/keys.h"
#include "segments/redis/proto.h"
#include "segments/redis/slots.h"

/* How long a cluster reset may take before another may take it over (its process
 * is taken for dead). */
#define RESET_LEASE_MS 15000
/* Room for the epochs of the dead resets a reset takes over (reset_begin.lua keeps
 * at most 32, each at most 16 digits). */
#define RESET_DEAD_MAX 600
/* Records dropped per DROP_RECORDS call on a standalone Redis (a cluster: one each,
 * every record its own slot), and ids per page of a graveyard. */
#define DROP_BATCH 512
/* Salts tried for an even placement. With 20 segments over 3 masters about one in
 * nine is even; with 1024, about one in a thousand. */
#define PLACE_TRIES 20000

/* Where a reset stands. Each state names what is out; `advance` sends the next. A
 * step of a cluster reset with wait_ms > 0 is answered once its WAIT is too. */
enum reset_state {
    RS_SCRIPT,  /* standalone: the RESET script (every key at once) */
    RS_MAP,     /* cluster, a new SKU: the slot map awaited, to place its segments */
    RS_LEDGER,  /* cluster, events on: the new segments' slots added to the index */
    RS_BEGIN,   /* RESET_BEGIN: the reset marked pending in the meta (or a replay) */
    RS_SEGMENT, /* RESET_SEGMENT of segment x->k (old, dead and new alike) */
    RS_COMMIT,  /* RESET_COMMIT: the new meta */
    RS_SKUS,    /* the SKU set's SADD or SREM, then (wait_ms) meta and set on replicas */
    RS_YIELD,   /* a step not on a replica: the lease (or the mark) given up */
    RS_SCAN,    /* a page of graveyard x->k (x->hash: orders, then cancelled) */
    RS_DROP,    /* that page's records dropped (x->left calls still out) */
    RS_UNLINK,  /* the graveyard itself deleted */
};

/* One reset on its way (freed once answered). */
struct rs {
    rda_conn *c;
    enum reset_state state;
    rda_reply_fn fn;
    void *arg;
    char sku[SEG_NAME_MAX + 1];
    char placed[RD_SKU_PLACED_MAX]; /* the new segments' (the old keep the salt) */
    struct rd_reset to;             /* its strings the caller's until answered */
    const char *rid, *sig;          /* likewise */
    long long old_epoch;
    int old_segments;
    int m;                     /* segments reset: old, new and dead ones' */
    char dead[RESET_DEAD_MAX]; /* the epochs of dead resets taken over ("0") */
    int k;                     /* RS_SEGMENT: the segment; RS_SCAN..: graveyard */
    bool hash;                 /* RS_SCAN..: the orders hash (else cancelled set) */
    char cursor[32];           /* RS_SCAN: where the next page starts */
    char **ids;                /* RS_DROP: the page's ids */
    size_t nids;
    int left;    /* RS_DROP: calls still out */
    bool waited; /* x->code is a WAIT's (else the step's) */
    bool failed; /* RS_DROP: one had no answer */
    int code;    /* the step's answer: RD_*, or -1 */
    int answer;  /* the reset's, sent once the graveyards are done */
    long long created;
    long long map_until; /* RS_MAP: placed without a map past it (ms) */
};

static void advance(struct rs *x);

static void free_ids(struct rs *x)
{
    for (size_t i = 0; i < x->nids; i++)
        free(x->ids[i]);
    free(x->ids);
    x->ids = NULL;
    x->nids = 0;
}

static void rs_answer(struct rs *x, int code)
{
    struct store_reply r = {.code = code < 0 ? 0 : code, .value = x->created};
    if (x->fn != NULL)
        x->fn(x->arg, code < 0 ? -1 : 0, &r);
    free_ids(x);
    free(x);
}

static void on_waited(void *arg, int rc, int replicas)
{
    struct rs *x = arg;
    if (rc < 0)
        x->code = -1;
    else if (replicas < 1)
        x->code = RD_NOT_REPLICATED;
    advance(x);
}

/* WAIT for a replica of every node of keys[0..n-1] (each SEG_KEY_MAX). */
static void wait_keys(struct rs *x, int n, char **keys)
{
    x->waited = true;
    rda_wait_keys(x->c, n, keys, x->to.wait_ms, on_waited, x);
    for (int j = 0; j < n; j++)
        free(keys[j]);
    free(keys);
}

static char **key_array(int n)
{
    char **keys = seg_malloc(sizeof *keys * (size_t)n);
    for (int j = 0; j < n; j++)
        keys[j] = seg_malloc(SEG_KEY_MAX);
    return keys;
}

/* After a step that wrote: the nodes it wrote on a replica, when wait_ms asks it.
 * false: nothing to wait for. */
static bool wait_written(struct rs *x)
{
    if (x->to.wait_ms <= 0)
        return false;
    char **keys;
    switch (x->state) {
    case RS_BEGIN: /* the mark (or, REPLAYED, the commit) */
        keys = key_array(1);
        seg_key_meta(keys[0], x->sku);
        wait_keys(x, 1, keys);
        return true;
    case RS_SEGMENT: /* after the last one: every segment's node */
        if (x->k + 1 < x->m)
            return false;
        keys = key_array(x->m);
        for (int i = 0; i < x->m; i++)
            seg_key_stock(keys[i], x->placed, i);
        wait_keys(x, x->m, keys);
        return true;
    case RS_SKUS: /* the meta's and the SKU set's */
        keys = key_array(2);
        seg_key_meta(keys[0], x->sku);
        seg_key_skus(keys[1]);
        wait_keys(x, 2, keys);
        return true;
    default:
        return false;
    }
}

/* A step answered: its code (and what the state reads of it), then its WAIT. */
static void on_step(void *arg, const struct redisReply *r)
{
    struct rs *x = arg;
    struct rd_reply out = {0};
    x->waited = false;
    x->code = r != NULL && proto_scripted(r, &out) == 0 ? out.code : -1;
    if (x->code >= 0)
        rd_reply_clear(&out);
    bool ok = x->code == RD_OK || (x->state == RS_BEGIN && x->code == RD_REPLAYED);
    /* Created: the script's value as it is; a cluster's COMMIT's, or a replay's. */
    if (x->state == RS_SCRIPT ||
        (ok && (x->state == RS_COMMIT || x->code == RD_REPLAYED)))
        x->created = out.value;
    if (ok && x->state == RS_BEGIN && x->code == RD_OK) {
        snprintf(x->dead, sizeof x->dead, "0");
        if (r->elements > 2 && r->element[1]->type == REDIS_REPLY_STRING &&
            r->element[1]->len < sizeof x->dead)
            memcpy(x->dead, r->element[1]->str, r->element[1]->len + 1);
        int dead_n = r->elements > 2 ? (int)proto_integer(r->element[2], 0) : 0;
        if (dead_n > x->m && dead_n <= SEG_MAX_SEGMENTS)
            x->m = dead_n;
    }
    if (ok && wait_written(x))
        return;
    advance(x);
}

/* A reply whose content does not matter (the ledger's index, the SKU set, UNLINK):
 * answered or not. */
static void on_raw(void *arg, const struct redisReply *r)
{
    struct rs *x = arg;
    x->waited = false;
    x->code = r != NULL ? RD_OK : -1;
    if (x->code == RD_OK && x->state == RS_SKUS && wait_written(x))
        return;
    advance(x);
}

static void on_page(void *arg, const struct redisReply *r)
{
    struct rs *x = arg;
    x->code = r != NULL && proto_scan_page(r, x->hash, x->cursor, sizeof x->cursor,
                                           &x->ids, &x->nids) == 0
                  ? RD_OK
                  : -1;
    advance(x);
}

static void on_dropped(void *arg, const struct redisReply *r)
{
    struct rs *x = arg;
    x->failed |= r == NULL;
    if (--x->left == 0)
        advance(x);
}

/* Segment x->k's RESET_SEGMENT, or once every one is done, the COMMIT. */
static void send_segment(struct rs *x)
{
    struct rd_cmd cmd;
    if (x->k >= x->m) {
        x->state = RS_COMMIT;
        proto_reset_commit(&cmd, x->sku, &x->to, x->rid, x->sig);
        rda_raw(x->c, &cmd, on_step, x);
        return;
    }
    x->state = RS_SEGMENT;
    int n = x->to.segments, i = x->k;
    long long share = n ? x->to.stock / n + (i < x->to.stock % n) : 0;
    proto_reset_segment(&cmd, x->placed, i, x->old_epoch, x->dead, x->to.epoch,
                        i < n ? share : -1, x->to.ledger, x->to.replicated);
    rda_raw(x->c, &cmd, on_step, x);
}

/* The reset stops part way with `code`: its lease given up, or its mark when it
 * touched nothing (best effort: unanswered, the lease runs out as a dead one's). */
static void stop(struct rs *x, int code, bool untouched)
{
    struct rd_cmd cmd;
    x->answer = code;
    x->state = RS_YIELD;
    proto_reset_yield(&cmd, x->sku, x->to.epoch, untouched);
    rda_raw(x->c, &cmd, on_raw, x);
}

/* The records of graveyard x->k (x->hash) from x->cursor: a page read. */
static void send_scan(struct rs *x)
{
    char key[SEG_KEY_MAX];
    struct rd_cmd cmd;
    x->state = RS_SCAN;
    seg_key_gone(key, x->placed, x->k, x->old_epoch, x->hash ? "orders" : "cancelled");
    proto_scan(&cmd, key, x->hash, x->cursor, DROP_BATCH);
    rda_raw(x->c, &cmd, on_page, x);
}

/* The next graveyard from x->k, x->hash on, or the answer when none is left. After a
 * reset, the graveyards its segments left (keys.h inv:{sku:i}:gone:E:*) read a page
 * at a time, the records they name dropped, then the graveyards themselves: each
 * step one short command, so a sale of millions of orders never holds Redis up for
 * long. Best effort: a failure leaves dead records and a graveyard, and is logged. */
static void next_grave(struct rs *x)
{
    if (x->k < x->m) {
        snprintf(x->cursor, sizeof x->cursor, "0");
        send_scan(x);
        return;
    }
    rs_answer(x, x->answer);
}

static void graves_failed(struct rs *x)
{
    char detail[160];
    snprintf(detail, sizeof detail, "%s: segment %d's graveyard left: %s", x->sku, x->k,
             rda_error(x->c));
    rd_log(true, "drop records", detail);
    rs_answer(x, x->answer);
}

static void send_begin(struct rs *x)
{
    struct rd_cmd cmd;
    x->state = RS_BEGIN;
    proto_reset_begin(&cmd, x->sku, x->old_epoch, x->old_segments, x->to.epoch,
                      x->to.segments, RESET_LEASE_MS, x->to.expect, x->rid, x->sig,
                      x->to.retake);
    rda_raw(x->c, &cmd, on_step, x);
}

/* The cluster's steps. A WAIT that finds no replica (or no answer) after BEGIN's mark
 * or the segments stops the reset as one that died there, its lease given up. */
static void cluster_advance(struct rs *x)
{
    struct rd_cmd cmd;
    switch (x->state) {
    case RS_LEDGER:
        if (x->code != RD_OK) {
            rs_answer(x, -1);
            return;
        }
        send_begin(x);
        return;
    case RS_BEGIN:
        if (x->waited && x->code != RD_OK && x->dead[0] != '\0') { /* the mark's WAIT */
            stop(x, x->code, strcmp(x->dead, "0") == 0);
            return;
        }
        if (x->code != RD_OK ||
            x->dead[0] == '\0') { /* REPLAYED (on a replica), or not */
            rs_answer(x, x->code);
            return;
        }
        x->k = 0;
        send_segment(x);
        return;
    case RS_SEGMENT:
        if (x->waited && x->code != RD_OK) {
            stop(x, x->code, false);
            return;
        }
        if (x->code != RD_OK) {
            rs_answer(x, x->code);
            return;
        }
        x->k++;
        send_segment(x);
        return;
    case RS_COMMIT:
        if (x->code != RD_OK) {
            rs_answer(x, x->code);
            return;
        }
        x->state = RS_SKUS;
        proto_skus_change(&cmd, x->sku, x->to.segments > 0);
        rda_raw(x->c, &cmd, on_raw, x);
        return;
    case RS_SKUS:
        if (!x->waited && x->code < 0) {
            rs_answer(x, -1);
            return;
        }
        x->answer = x->code; /* OK, or NOT_REPLICATED: the graveyards all the same */
        x->k = 0;
        x->hash = true;
        next_grave(x);
        return;
    default:
        return;
    }
}

/* The transitions, in one place: x->code holds what the state's step answered. */
static void advance(struct rs *x)
{
    struct rd_cmd cmd;
    char key[SEG_KEY_MAX];
    switch (x->state) {
    case RS_SCRIPT:
        if (x->code != RD_OK) {
            rs_answer(x, x->code);
            return;
        }
        x->answer = RD_OK;
        x->m = x->old_segments;
        x->k = 0;
        x->hash = true;
        next_grave(x);
        return;
    case RS_YIELD:
        rs_answer(x, x->answer);
        return;
    case RS_SCAN:
        if (x->code != RD_OK) {
            graves_failed(x);
            return;
        }
        x->state = RS_DROP;
        x->failed = false;
        if (x->nids == 0) {
            advance(x); /* an empty page */
            return;
        }
        size_t batch = rda_cluster(x->c) ? 1 : DROP_BATCH;
        x->left = (int)((x->nids + batch - 1) / batch);
        for (size_t i = 0; i < x->nids; i += batch) {
            proto_drop_records(&cmd, x->sku, x->old_epoch, x->ids + i,
                               x->nids - i < batch ? x->nids - i : batch);
            rda_raw(x->c, &cmd, on_dropped, x);
        }
        return;
    case RS_DROP:
        free_ids(x);
        if (x->failed) {
            graves_failed(x);
            return;
        }
        if (strcmp(x->cursor, "0") != 0) {
            send_scan(x);
            return;
        }
        x->state = RS_UNLINK;
        cmd_plain(&cmd, "UNLINK");
        cmd_key(&cmd, seg_key_gone(key, x->placed, x->k, x->old_epoch,
                                   x->hash ? "orders" : "cancelled"));
        rda_raw(x->c, &cmd, on_raw, x);
        return;
    case RS_UNLINK:
        if (x->hash) {
            x->hash = false;
        } else {
            x->hash = true;
            x->k++;
        }
        next_grave(x);
        return;
    default:
        cluster_advance(x);
        return;
    }
}

/* The placement salt for a new SKU of n segments on a cluster: the first (0 = no
 * salt, then 1, 2, ...) that spreads its segments over the masters of the handle's
 * map with most minus fewest <= 1, or the most even one seen in PLACE_TRIES.
 * Deterministic for one map, so a retried create picks the same. 0 without a map. */
static int placement(const rda_conn *c, const char *sku, int n)
{
    char key[SEG_KEY_MAX], placed[RD_SKU_PLACED_MAX];
    seg_key_stock(key, sku, 0);
    if (c->route[rd_key_slot(key, strlen(key))] < 0)
        return 0; /* no map: the plain tags */
    int nodes = c->nlinks;
    bool *master = seg_calloc((size_t)nodes + 1, sizeof *master);
    for (int s = 0; s < RD_SLOTS; s++)
        if (c->route[s] >= 0 && c->route[s] < nodes)
            master[c->route[s]] = true;
    int *count = seg_calloc((size_t)nodes + 1, sizeof *count);
    int best = 0, best_spread = n + 1;
    for (int salt = 0; salt < PLACE_TRIES && best_spread > 1; salt++) {
        memset(count, 0, sizeof *count * (size_t)nodes);
        rd_sku_placed(placed, sku, salt);
        for (int i = 0; i < n; i++) {
            seg_key_stock(key, placed, i);
            int at = c->route[rd_key_slot(key, strlen(key))];
            if (at >= 0 && at < nodes)
                count[at]++;
        }
        int most = 0, fewest = n + 1;
        for (int k = 0; k < nodes; k++) {
            if (!master[k])
                continue;
            most = count[k] > most ? count[k] : most;
            fewest = count[k] < fewest ? count[k] : fewest;
        }
        if (most - fewest < best_spread) {
            best_spread = most - fewest;
            best = salt;
        }
    }
    free(count);
    free(master);
    return best;
}

/* The cluster's first steps, the placement known: the ledger's index, then BEGIN. */
static void cluster_start(struct rs *x)
{
    struct rd_cmd cmd;
    rd_sku_placed(x->placed, x->sku, x->to.salt);
    int n = x->to.segments;
    x->m = x->old_segments > n ? x->old_segments : n;
    if (x->to.ledger && n > 0) { /* the sink must find the registries */
        x->state = RS_LEDGER;
        proto_ledger_slots(&cmd, x->placed, n);
        rda_raw(x->c, &cmd, on_raw, x);
        return;
    }
    send_begin(x);
}

/* True once the handle's map routes segment 0's slot of the plain tags. */
static bool mapped(const struct rs *x)
{
    char key[SEG_KEY_MAX];
    seg_key_stock(key, x->sku, 0);
    return x->c->route[rd_key_slot(key, strlen(key))] >= 0;
}

/* RS_MAP: look again every 10 ms (the map is asked for), until the timeout. */
static void on_map_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct rs *x = arg;
    if (!mapped(x) && !x->c->closing && base_now_ms() < x->map_until) {
        const struct timeval tv = {0, 10000};
        event_base_once(x->c->base, -1, EV_TIMEOUT, on_map_tick, x, &tv);
        return;
    }
    x->to.salt = placement(x->c, x->sku, x->to.segments);
    cluster_start(x);
}

void rda_reset(rda_conn *c, const char *sku, long long old_epoch, int old_segments,
               const struct rd_reset *to, const char *rid, const char *sig,
               rda_reply_fn fn, void *arg)
{
    struct rs *x = seg_calloc(1, sizeof *x);
    x->c = c;
    x->fn = fn;
    x->arg = arg;
    snprintf(x->sku, sizeof x->sku, "%s", sku);
    x->to = *to;
    x->rid = rid;
    x->sig = sig;
    x->old_epoch = old_epoch;
    x->old_segments = old_segments;
    struct rd_cmd cmd;
    if (!rda_cluster(c)) {
        snprintf(x->placed, sizeof x->placed, "%s", sku);
        x->state = RS_SCRIPT;
        proto_reset(&cmd, sku, old_epoch, old_segments, to, rid, sig);
        rda_raw(c, &cmd, on_step, x);
        return;
    }
    if (x->to.salt < 0) { /* a new SKU: spread its segments over the masters */
        x->state = RS_MAP;
        x->map_until = base_now_ms() + c->to.timeout_ms;
        if (!mapped(x))
            rda_want_refresh(c);
        const struct timeval tv = {0, 0}; /* not from inside this call */
        event_base_once(c->base, -1, EV_TIMEOUT, on_map_tick, x, &tv);
        return;
    }
    cluster_start(x);
}
