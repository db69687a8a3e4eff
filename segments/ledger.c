/* ledger.c -- the sink thread that copies the ledger streams into PostgreSQL, and the
 * reads answered from the ledger (contract: ledger.h). */
#include "segments/ledger.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/periodic.h"
#include "base/xalloc.h"
#include "segments/internal.h"
#include "segments/postgres/events.h"
#include "segments/postgres/ledger.h"
#include "segments/redis/calls.h"
#include "segments/redis/evstream.h"

#define BATCH 1024   /* events per transaction */
#define IDLE_MS 5000 /* another reader's batch is taken over after this */
/* A pass every so often, at once only after a full batch: a sink that went round as
 * soon as it had copied anything copied a few events per batch, and its reads,
 * acknowledgements and TTLs cost Redis more per order than the order itself. */
#define PERIOD_MS 200
#define LIST_MS 1000              /* the registry read this often */
#define KNOWN_MAX 65536           /* segments followed at most */
#define BACKLOG_COUNT_MAX 1000000 /* the store's events counted at most (PostgreSQL) */

struct ledger {
    inv *v;
    int retention_s;
    periodic *thread; /* the sink; NULL when reads_only */
    inv_conn *c;      /* the thread's, made on its first pass (Redis) */
    pgev *store;      /* the thread's: the store's events (PostgreSQL) */
    pgl *pg;          /* the thread's, made on its first pass */
    long long listed; /* the thread's: when it last read the registry */
    bool adopted;     /* the thread's: every SKU's flagged segments named (adopt) */
    pgl *reads;       /* ledger_order / ledger_reconcile, under mu_reads */
    pthread_mutex_t mu_reads;
    char *conninfo;
    char consumer[48];
    /* The thread's own: the segments the ledger's registry named at its last read
     * (evstream.h rd_ev_segments), each drained at every pass. */
    struct rd_ev_segment *known;
    int nknown;
    bool failing; /* the thread's: the last copy failed (logged once) */
    _Atomic long long copied, batches, failures, retained, backlog, lag_ms;
};

/* Once, when the sink starts: every segment of every SKU whose ledger flag is set
 * is named in the registry if it is not (one flagged by a version before the
 * registry, or its entry lost), so its stream is drained. 0, or -1 (again next pass). */
static int adopt(rd_conn *rd)
{
    char **names = NULL;
    size_t n = 0;
    if (rd_skus_list(rd, &names, &n) != 0)
        return -1;
    int rc = 0, named = 0;
    for (size_t j = 0; j < n; j++) {
        struct rd_meta m;
        int found = rc == 0 ? rd_meta_read(rd, names[j], &m) : 0;
        if (found < 0)
            rc = -1;
        if (found > 0 && m.segments > 0) {
            char placed[RD_SKU_PLACED_MAX];
            rd_sku_placed(placed, names[j], m.salt);
            int got = rd_ev_adopt(rd, placed, m.segments, m.replicated);
            rc = got < 0 ? -1 : rc;
            named += got > 0 ? got : 0;
        }
        free(names[j]);
    }
    free(names);
    if (named > 0)
        log_info("ledger: %d segments with a ledger named in its registry", named);
    return rc;
}

/* Read the registry into `known` (kept as it was when Redis did not answer). */
static void refresh(ledger *l, rd_conn *rd)
{
    struct rd_ev_segment *seg;
    int n;
    if (rd_ev_segments(rd, KNOWN_MAX, &seg, &n) != 0)
        return;
    free(l->known);
    l->known = seg;
    l->nknown = n;
}

/* One segment's batch on its way: read from Redis, its copy sent to PostgreSQL, then
 * acknowledged. The pass overlaps them: a segment's copy runs in PostgreSQL while the
 * sink acknowledges the one before and reads the next, so a batch costs the sink
 * about the longer of the two, not their sum (the copy was ~60% of its time). */
struct batch {
    const struct rd_ev_segment *e; /* NULL: none */
    struct rd_event *ev;
    int n;
    struct pgl_event *pe; /* the events to copy (pointing into ev), m of them */
    int m;
    bool sent; /* its copy is in PostgreSQL: wait for it before acknowledging */
    int rc;    /* 1 full batch copied, 0 less or nothing, -1 failed (stays pending) */
};

/* Read a batch of segment `e` into *b, b->rc -1 when Redis failed. *backlog, *oldest:
 * the stream's length and the oldest entry read (wall ms), for the lag. */
static void read_batch(ledger *l, rd_conn *rd, const struct rd_ev_segment *e,
                       struct batch *b, long long *backlog, long long *oldest)
{
    *b = (struct batch){e, NULL, 0, NULL, 0, false, -1};
    int i = e->i;
    long long len = 0;
    if (rd_ev_read(rd, e->placed, i, l->consumer, BATCH, IDLE_MS, &b->ev, &b->n, &len) !=
        0)
        return;
    *backlog += len;
    b->rc = 0;
    if (b->n == 0)
        return;
    long long first = strtoll(b->ev[0].id, NULL, 10);
    if (*oldest == 0 || first < *oldest)
        *oldest = first;
    b->rc = -1;
    if (e->replicated &&
        rd_wait(rd, e->placed, 1, &i, NULL, NULL, l->v->opt.redis_timeout_ms / 2) < 1)
        return; /* not on a replica yet: a failover could still lose it */
    struct rd_event *ev = b->ev;
    struct pgl_event *pe = b->pe = seg_calloc((size_t)b->n, sizeof *pe);
    int m = 0;
    for (int j = 0; j < b->n; j++) {
        if (ev[j].kind[0] == '\0')
            continue; /* deleted since it was read: acknowledged below */
        /* A sale on a cluster under a client's id: its record is CONFIRMed apart. */
        if (ev[j].record == NULL && ev[j].order[0] != '\0' &&
            strcmp(ev[j].kind, "sale") == 0) {
            char *rec = NULL;
            if (rd_record_read(rd, ev[j].order, &rec) == 1)
                ev[j].record = rec;
        }
        pe[m++] =
            (struct pgl_event){ev[j].id,      ev[j].kind,   ev[j].epoch, ev[j].order,
                               ev[j].d_stock, ev[j].d_sold, ev[j].record};
    }
    b->m = m;
    b->rc = 0;
}

/* A copy of `what` failed: logged once per outage, not once per batch and pass. */
static void copy_failing(ledger *l, const char *what, const char *why)
{
    if (!l->failing)
        log_warn("ledger: copy of %s failed: %s (retried until it works)", what, why);
    l->failing = true;
}

/* b's copy failed: b->rc -1 (counted as a failure by its pass, ack_batch). */
static void batch_failed(ledger *l, pgl *pg, struct batch *b)
{
    char what[SEG_NAME_MAX + 32];
    snprintf(what, sizeof what, "segment %d of %s", b->e->i, b->e->sku);
    b->rc = -1;
    copy_failing(l, what, pgl_error(pg));
}

/* Send b's copy to PostgreSQL (when it has events to copy). */
static void send_batch(ledger *l, pgl *pg, struct batch *b)
{
    if (b->e == NULL || b->rc < 0 || b->m == 0)
        return;
    char stream[RD_EV_NAME_MAX];
    rd_ev_stream(stream, b->e->placed, b->e->i);
    b->sent = pgl_copy_send(pg, stream, b->e->sku, b->e->i, b->pe, b->m) == 0;
    if (!b->sent)
        batch_failed(l, pg, b);
}

/* Wait for b's copy (when sent): b->rc -1 when it failed. */
static void wait_batch(ledger *l, pgl *pg, struct batch *b)
{
    if (b->e == NULL || !b->sent)
        return;
    b->sent = false;
    if (pgl_copy_wait(pg) != 0)
        batch_failed(l, pg, b);
}

/* Acknowledge b once copied (wait_batch), give its records their TTL, free it:
 * b->rc as struct batch says. */
static int ack_batch(ledger *l, rd_conn *rd, struct batch *b)
{
    if (b->e == NULL)
        return 0;
    int rc = b->rc, m = b->m;
    const struct rd_ev_segment *e = b->e;
    if (rc == 0 && b->n > 0) {
        if (m > 0 && l->failing)
            log_info("ledger: copying again (segment %d of %s)", e->i, e->sku);
        l->failing = l->failing && m == 0;
        rc = -1; /* copied: acknowledged by the next pass, once more */
        if (rd_ev_done(rd, e->placed, e->i, b->ev, b->n, l->retention_s) == 0) {
            atomic_fetch_add(&l->copied, m);
            atomic_fetch_add(&l->batches, 1);
            int kept = rd_ev_retain(rd, e->placed, b->ev, b->n, l->retention_s);
            if (kept > 0)
                atomic_fetch_add(&l->retained, kept);
            rc = b->n >= BATCH; /* a full batch: more may be waiting */
        }
    }
    free(b->pe);
    rd_ev_free(b->ev, b->n);
    b->e = NULL;
    return rc;
}

/* One pass over every segment the registry named: true when more may be waiting. */
static bool pass(ledger *l, rd_conn *rd, pgl *pg, long long *listed)
{
    long long now = base_now_ms();
    if (now - *listed >= LIST_MS) {
        if (!l->adopted)
            l->adopted = adopt(rd) == 0;
        refresh(l, rd);
        *listed = now;
    }
    bool more = false;
    long long backlog = 0, oldest = 0;
    struct batch prev = {0}, cur;
    for (int k = 0; k <= l->nknown; k++) {
        /* Read k while PostgreSQL copies k-1, then acknowledge k-1 while it copies k:
         * one statement at a time on the connection, each batch acknowledged only
         * once its copy committed. */
        cur = (struct batch){0};
        if (k < l->nknown)
            read_batch(l, rd, &l->known[k], &cur, &backlog, &oldest);
        wait_batch(l, pg, &prev);
        send_batch(l, pg, &cur);
        int rc = ack_batch(l, rd, &prev);
        more |= rc > 0;
        if (rc < 0)
            atomic_fetch_add(&l->failures, 1);
        prev = cur;
    }
    atomic_store(&l->backlog, backlog);
    atomic_store(&l->lag_ms, oldest > 0 ? base_wall_ms() - oldest : 0);
    return more;
}

/* A copy of the PostgreSQL store's events failed: logged once, counted. */
static void copy_failed(ledger *l, const char *what, const char *why)
{
    copy_failing(l, what, why);
    atomic_fetch_add(&l->failures, 1);
}

/* Copy rows[0..n-1] (grouped by segment, as pgev_take gives them) into the ledger, a
 * segment's events per call: 0, or -1 (those copied stay copied: the ledger's key
 * makes the next copy of them a no-op). */
static int copy_rows(ledger *l, const struct pgev_row *rows, int n)
{
    struct pgl_event *pe = seg_calloc((size_t)n, sizeof *pe);
    int rc = 0;
    for (int from = 0, to; from < n && rc == 0; from = to) {
        for (to = from; to < n && rows[to].seg == rows[from].seg &&
                        strcmp(rows[to].sku, rows[from].sku) == 0;
             to++) {
            const struct pgev_row *r = &rows[to];
            pe[to - from] = (struct pgl_event){r->entry,   r->kind,   r->epoch, r->order,
                                               r->d_stock, r->d_sold, r->record};
        }
        char stream[RD_EV_NAME_MAX];
        snprintf(stream, sizeof stream, "pg:%s:%d", rows[from].sku, rows[from].seg);
        rc = pgl_copy(l->pg, stream, rows[from].sku, rows[from].seg, pe, to - from);
        if (rc != 0)
            copy_failed(l, stream, pgl_error(l->pg));
    }
    free(pe);
    return rc;
}

/* One batch of the PostgreSQL store's events (postgres/events.h): taken (locked),
 * copied into the ledger, then deleted: true when more may be waiting. */
static bool pass_pg(ledger *l)
{
    struct pgev_row *rows;
    int n;
    if (pgev_take(l->store, BATCH, &rows, &n) != 0) {
        copy_failed(l, "the store's events", pgev_error(l->store));
        return false;
    }
    long long oldest = 0;
    for (int k = 0; k < n; k++)
        oldest = oldest == 0 || rows[k].at_ms < oldest ? rows[k].at_ms : oldest;
    /* A full batch: how many wait behind it (counted up to a bound: a backlog of
     * millions is not read at every pass). */
    long long backlog = n >= BATCH ? pgev_count(l->store, BACKLOG_COUNT_MAX) : n;
    if (backlog < 0) {
        copy_failed(l, "the store's events", pgev_error(l->store));
        pgev_rows_free(rows, n);
        return false;
    }
    atomic_store(&l->backlog, backlog);
    atomic_store(&l->lag_ms, oldest > 0 ? base_wall_ms() - oldest : 0);
    if (n == 0) {
        pgev_rows_free(rows, n);
        return false;
    }
    int rc = copy_rows(l, rows, n);
    if (rc != 0)
        pgev_abandon(l->store);
    else if (pgev_done(l->store, rows, n) != 0)
        copy_failed(l, "the store's events", pgev_error(l->store));
    else {
        if (l->failing)
            log_info("ledger: copying again");
        l->failing = false;
        atomic_fetch_add(&l->copied, n);
        atomic_fetch_add(&l->batches, 1);
        atomic_store(&l->backlog, backlog - n);
        if (backlog <= n)
            atomic_store(&l->lag_ms, 0);
        rc = n >= BATCH ? 1 : 0;
    }
    pgev_rows_free(rows, n);
    return rc > 0;
}

/* The sink's round (periodic.h): one pass, then another at once while there is more,
 * else one after PERIOD_MS. */
static int sink(periodic *p, void *arg)
{
    (void)p;
    ledger *l = arg;
    if (l->pg == NULL) {
        if (l->v->postgres)
            l->store = pgev_create(l->v->opt.store);
        else
            l->c = inv_conn_create(l->v);
        l->pg = pgl_create(l->conninfo);
        l->listed = -LIST_MS;
    }
    if (l->v->postgres)
        return pass_pg(l) ? 0 : PERIOD_MS;
    return pass(l, l->c->rd, l->pg, &l->listed) ? 0 : PERIOD_MS;
}

ledger *ledger_create(inv *v, const struct ledger_options *o, char *err, size_t errlen)
{
    ledger *l = seg_calloc(1, sizeof *l);
    l->v = v;
    l->retention_s = o->retention_s > 0 ? o->retention_s : 604800;
    l->conninfo = seg_strdup(o->conninfo);
    l->reads = pgl_create(o->conninfo);
    char hex[33];
    inv_random_hex(hex);
    snprintf(l->consumer, sizeof l->consumer, "sink-%.16s", hex);
    pthread_mutex_init(&l->mu_reads, NULL);
    v->ledger = l;
    char why[128];
    if (!o->reads_only &&
        (l->thread = periodic_start(sink, l, 0, why, sizeof why)) == NULL) {
        snprintf(err, errlen, "cannot start the ledger's thread");
        v->ledger = NULL;
        pthread_mutex_destroy(&l->mu_reads);
        pgl_free(l->reads);
        free(l->conninfo);
        free(l);
        return NULL;
    }
    return l;
}

void ledger_free(ledger *l)
{
    if (l == NULL)
        return;
    periodic_stop(l->thread);
    pgl_free(l->pg);
    pgev_free(l->store);
    inv_conn_free(l->c);
    l->v->ledger = NULL;
    pgl_free(l->reads);
    free(l->known);
    free(l->conninfo);
    pthread_mutex_destroy(&l->mu_reads);
    free(l);
}

int ledger_stats_of(inv *v, struct ledger_stats *out)
{
    memset(out, 0, sizeof *out);
    ledger *l = v->ledger;
    if (l == NULL)
        return 0;
    out->copied = atomic_load(&l->copied);
    out->batches = atomic_load(&l->batches);
    out->failures = atomic_load(&l->failures);
    out->retained = atomic_load(&l->retained);
    out->backlog = atomic_load(&l->backlog);
    out->lag_ms = atomic_load(&l->lag_ms);
    return 1;
}

/* The ledger's row of order `id`: as pgl_order, under the reads' mutex. */
static int order_row(ledger *l, const char *id, char **record, char *sku, size_t skulen,
                     long long *epoch, int *cancelled)
{
    pthread_mutex_lock(&l->mu_reads);
    int rc = pgl_order(l->reads, id, record, sku, skulen, epoch, cancelled);
    pthread_mutex_unlock(&l->mu_reads);
    return rc;
}

/* The ledger's row of order `id`, only when it is a sale of its SKU's current epoch (a
 * reset or delete forgets the SKU's orders, README): 1 with *record (malloc'd), *m the
 * SKU's meta and *cancelled; 0 none; -1 unavailable. */
static int current_row(inv_conn *c, const char *id, char **record, char *sku,
                       size_t skulen, struct rd_meta *m, int *cancelled)
{
    long long epoch;
    int rc = order_row(c->v->ledger, id, record, sku, skulen, &epoch, cancelled);
    if (rc <= 0)
        return rc;
    int found = rd_meta_read(c->rd, sku, m);
    if (found <= 0 || m->epoch != epoch) { /* reset since: that sale is no order now */
        free(*record);
        *record = NULL;
        return found < 0 ? -1 : 0;
    }
    return 1;
}

inv_status ledger_order(inv_conn *c, const char *id, char **record)
{
    *record = NULL;
    if (c->v->ledger == NULL || c->v->postgres) /* PostgreSQL keeps every order row */
        return INV_NOT_FOUND;
    char sku[SEG_NAME_MAX + 1];
    struct rd_meta m;
    int cancelled;
    int rc = current_row(c, id, record, sku, sizeof sku, &m, &cancelled);
    return rc > 0 ? INV_OK : rc == 0 ? INV_NOT_FOUND : INV_UNAVAILABLE;
}

int ledger_restore(inv_conn *c, const char *id, char **record)
{
    *record = NULL;
    if (c->v->ledger == NULL || c->v->postgres) /* PostgreSQL keeps every order row */
        return INV_NOT_FOUND;
    char sku[SEG_NAME_MAX + 1];
    struct rd_meta m;
    int cancelled;
    int rc = current_row(c, id, record, sku, sizeof sku, &m, &cancelled);
    if (rc <= 0)
        return rc == 0 ? INV_NOT_FOUND : INV_UNAVAILABLE;
    if (cancelled)
        return INV_OK; /* as a cancel of a cancelled order answers */
    char placed[RD_SKU_PLACED_MAX];
    rd_sku_placed(placed, sku, m.salt);
    rc = rd_ev_restore(c->rd, id, placed, m.epoch, *record, c->v->ledger->retention_s);
    free(*record);
    *record = NULL;
    return rc < 0 ? INV_UNAVAILABLE : -1;
}

static long long absll(long long x)
{
    return x < 0 ? -x : x;
}

/* The store's stock and sold of SKU `sku` as *m names it, into out, through the
 * store's admin seam (admin.h segments_read: one read, the settings with it where the
 * store can): 0; 1 when a reset moved the epoch, salt or segments since *m; 2 no such
 * SKU now; -1. */
static int store_counts(inv_conn *c, const char *sku, const struct store_meta *m,
                        struct ledger_recon *out)
{
    char placed[STORE_SKU_PLACED_MAX];
    store_sku_placed(placed, sku, m->salt);
    int n = m->segments;
    long long *stock = seg_calloc((size_t)n, sizeof *stock);
    long long *sold = seg_calloc((size_t)n, sizeof *sold);
    long long *orders = seg_calloc((size_t)n, sizeof *orders);
    long long *reserved = seg_calloc((size_t)n, sizeof *reserved);
    bool *locked = seg_calloc((size_t)n, sizeof *locked);
    struct store_meta now;
    int rc = ADMIN_CALL(c->adm, segments_read, sku, placed, n, m->epoch, stock, sold,
                        orders, locked, reserved, &now);
    if (rc == 1) /* the settings of the read's instant: still the keys read? */
        rc = now.epoch == m->epoch && now.salt == m->salt && now.segments == m->segments
                 ? 0
                 : 1;
    out->store_stock = out->store_sold = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        out->store_stock += stock[i];
        out->store_sold += sold[i];
    }
    free(stock);
    free(sold);
    free(orders);
    free(reserved);
    free(locked);
    return rc;
}

inv_status ledger_reconcile(inv_conn *c, const char *sku, struct ledger_recon *out)
{
    memset(out, 0, sizeof *out);
    ledger *l = c->v->ledger;
    if (l == NULL)
        return INV_INVALID;
    /* The store's counts from the SKU view's one-step read, read again when a reset
     * moved the keys between the settings read and the view's. */
    struct store_meta m;
    int rc = -1;
    for (int try = 0; try < 4 && rc != 0; try++) {
        char lock[16];
        int found = ADMIN_CALL(c->adm, meta_read, sku, &m, lock);
        if (found <= 0)
            return found < 0 ? INV_UNAVAILABLE : INV_UNKNOWN_SKU;
        rc = store_counts(c, sku, &m, out);
        if (rc == 2)
            return INV_UNKNOWN_SKU;
        if (rc < 0)
            return INV_UNAVAILABLE;
    }
    if (rc != 0)
        return INV_BUSY;
    out->epoch = m.epoch;
    pthread_mutex_lock(&l->mu_reads);
    rc = pgl_counts(l->reads, sku, m.epoch, &out->ledger_stock, &out->ledger_sold,
                    &out->ledger_events);
    pthread_mutex_unlock(&l->mu_reads);
    if (rc < 0)
        return INV_UNAVAILABLE;
    out->drift = absll(out->store_stock - out->ledger_stock) +
                 absll(out->store_sold - out->ledger_sold);
    return INV_OK;
}
