/* admin.c -- PostgreSQL's blocking admin operations (segments/admin.h) in SQL. */
#include "segments/postgres/admin.h"

#include <event2/event.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/postgres/fence.h"
#include "segments/postgres/holds.h"
#include "segments/postgres/store.h"
#include "base/xalloc.h"

struct pg_admin {
    struct admin base; /* first */
    char *conninfo;
    int timeout_ms;
    int wait_ms; /* a release's wait for its segment's row */
    PGconn *pg;
    bool in_txn; /* a transaction of ours is open on pg */
    bool ledger; /* its sessions write the order rows' events (events.h) */
    char errstr[200];
};

static struct pg_admin *self(admin *a)
{
    return (struct pg_admin *)a;
}

static void set_error(struct pg_admin *a, const char *what, const char *detail)
{
    snprintf(a->errstr, sizeof a->errstr, "%s: %s", what, detail ? detail : "");
    size_t n = strlen(a->errstr);
    while (n > 0 && (a->errstr[n - 1] == '\n' || a->errstr[n - 1] == ' '))
        a->errstr[--n] = '\0';
}

static PGconn *connect_now(struct pg_admin *a)
{
    if (a->pg != NULL && PQstatus(a->pg) == CONNECTION_OK)
        return a->pg;
    if (a->pg != NULL)
        PQfinish(a->pg);
    char options[128], timeout[16];
    snprintf(options, sizeof options,
             "-c statement_timeout=%d -c lock_timeout=%d -c synchronous_commit=on%s",
             a->timeout_ms, a->timeout_ms, a->ledger ? " -c inv.ledger=on" : "");
    snprintf(timeout, sizeof timeout, "%d", (a->timeout_ms + 999) / 1000);
    const char *keys[] = {"dbname", "options", "connect_timeout", NULL};
    const char *vals[] = {a->conninfo, options, timeout, NULL};
    a->pg = PQconnectdbParams(keys, vals, 1);
    if (PQstatus(a->pg) != CONNECTION_OK) {
        set_error(a, "connect", PQerrorMessage(a->pg));
        PQfinish(a->pg);
        a->pg = NULL;
    }
    return a->pg;
}

/* Run one statement: its result (PQclear it), or NULL when the connection failed
 * (dropped: the next call connects again). An SQL error is a result too. A connection
 * found dead (the server restarted, the session ended) is made again and the
 * statement sent once more, unless it was inside a transaction of ours: that
 * transaction is gone, and its outcome is the caller's -1. */
static PGresult *run(struct pg_admin *a, const char *sql, int n, const char *const *p)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        PGconn *pg = connect_now(a);
        if (pg == NULL)
            return NULL;
        PGresult *r = PQexecParams(pg, sql, n, NULL, p, NULL, NULL, 0);
        ExecStatusType s = PQresultStatus(r);
        if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK)
            set_error(a, "query", PQresultErrorMessage(r));
        if (PQstatus(pg) == CONNECTION_OK)
            return r;
        PQclear(r);
        PQfinish(a->pg);
        a->pg = NULL;
        bool was_in_txn = a->in_txn && strcmp(sql, "BEGIN") != 0;
        a->in_txn = false;
        if (was_in_txn)
            return NULL;
    }
    return NULL;
}

static bool ok(const PGresult *r)
{
    ExecStatusType s = PQresultStatus(r);
    return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
}

/* A statement outside a transaction whose failure is the caller's -1: its result when
 * it succeeded (PQclear it), else NULL (the result, if any, cleared). */
static PGresult *query(struct pg_admin *a, const char *sql, int n, const char *const *p)
{
    PGresult *r = run(a, sql, n, p);
    if (r != NULL && !ok(r)) {
        PQclear(r);
        r = NULL;
    }
    return r;
}

/* A statement whose failure is the store's: 0 with *out (or NULL), -1 (rolled back). */
static int step(struct pg_admin *a, const char *sql, int n, const char *const *p,
                PGresult **out)
{
    PGresult *r = run(a, sql, n, p);
    if (r == NULL)
        return -1;
    if (!ok(r)) {
        PQclear(r);
        if (a->in_txn) {
            a->in_txn = false; /* ROLLBACK, never sent again on a new connection */
            PGresult *rb = run(a, "ROLLBACK", 0, NULL);
            if (rb != NULL)
                PQclear(rb);
        }
        return -1;
    }
    if (out != NULL)
        *out = r;
    else
        PQclear(r);
    return 0;
}

static int begin(struct pg_admin *a)
{
    int rc = step(a, "BEGIN", 0, NULL, NULL);
    a->in_txn = rc == 0;
    return rc;
}

/* End the transaction: COMMIT (when `commit` and nothing failed) or ROLLBACK. */
static int finish(struct pg_admin *a, bool commit)
{
    PGresult *r = run(a, commit ? "COMMIT" : "ROLLBACK", 0, NULL);
    a->in_txn = false;
    int rc =
        r != NULL && ok(r) && (!commit || strcmp(PQcmdStatus(r), "COMMIT") == 0) ? 0 : -1;
    if (r != NULL)
        PQclear(r);
    return rc;
}

static long long cell(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

static unsigned caps(admin *a)
{
    (void)a;
    return ADMIN_CAP_BATCH; /* deduct_batch (postgres/batch.c) */
}

static void admin_free(admin *a)
{
    if (a == NULL)
        return;
    if (self(a)->pg != NULL)
        PQfinish(self(a)->pg);
    free(self(a)->conninfo);
    free(a);
}

static const char *error(const admin *a)
{
    return ((const struct pg_admin *)a)->errstr;
}

static int ping(admin *a)
{
    PGresult *r = query(self(a), "SELECT 1", 0, NULL);
    if (r == NULL)
        return -1;
    PQclear(r);
    return 0;
}

/* The settings columns a read selects (in meta_row's order), of table skus. */
#define META_COLS                                                                        \
    "segments, mode, lock, hold_ms, initial, epoch, gen, rebalance, replicated, batch,"  \
    " unfenced"

/* Row `row` of r, from column col0 on (META_COLS), into *m and lock. */
static void meta_row(const PGresult *r, int row, int col0, struct store_meta *m,
                     char lock[16])
{
    *m = (struct store_meta){
        .segments = (int)cell(r, row, col0),
        .hold_ms = (int)cell(r, row, col0 + 3),
        .initial = cell(r, row, col0 + 4),
        .epoch = cell(r, row, col0 + 5),
        .gen = cell(r, row, col0 + 6),
        .rebalance = strcmp(PQgetvalue(r, row, col0 + 7), "t") == 0,
        .replicated = strcmp(PQgetvalue(r, row, col0 + 8), "t") == 0,
        .batch = (int)cell(r, row, col0 + 9),
        .unfenced = strcmp(PQgetvalue(r, row, col0 + 10), "t") == 0,
    };
    snprintf(m->mode, sizeof m->mode, "%s", PQgetvalue(r, row, col0 + 1));
    snprintf(m->lock, sizeof m->lock, "%s",
             pgf_lock_service(PQgetvalue(r, row, col0 + 2)));
    snprintf(lock, 16, "%s", PQgetvalue(r, row, col0 + 2));
}

static int meta_read(admin *a, const char *sku, struct store_meta *m, char lock[16])
{
    const char *p[] = {sku};
    PGresult *r = query(self(a), "SELECT " META_COLS " FROM skus WHERE sku = $1", 1, p);
    if (r == NULL)
        return -1;
    int found = PQntuples(r) == 1;
    if (found)
        meta_row(r, 0, 0, m, lock);
    PQclear(r);
    return found;
}

static int record_read(admin *a, const char *id, char **record)
{
    const char *p[] = {id};
    PGresult *r = query(self(a), "SELECT record FROM orders WHERE order_id = $1", 1, p);
    if (r == NULL)
        return -1;
    int found = PQntuples(r) == 1;
    if (found)
        *record = seg_strdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return found;
}

/* The view's numbers per segment in ONE statement, so one snapshot (a hold settled
 * meanwhile is either wholly before it or wholly after): stock and lock from the
 * segment rows; sold units and orders from the order rows not cancelled (the units each
 * segment gave, a multi-segment order's parts each in their own: the record's
 * "segments", as on Redis; the orders counted in the segment each took from first, its
 * row's seg); reserved from the epoch's 'held' holds (a hold of several segments: each
 * part in its own, holds.h); and the SKU's settings (its initial) of that snapshot. */
static int segments_read(admin *a, const char *sku, const char *placed, int n,
                         long long epoch, long long *stock, long long *sold,
                         long long *orders, bool *locked, long long *reserved,
                         struct store_meta *meta)
{
    char nbuf[16], ebuf[24];
    snprintf(nbuf, sizeof nbuf, "%d", n);
    snprintf(ebuf, sizeof ebuf, "%lld", epoch);
    const char *p[] = {placed, nbuf, ebuf, sku};
    PGresult *r = query(
        self(a),
        "WITH segs AS (SELECT seg, stock, coalesce(lease_token IS NOT NULL AND"
        " lease_until > now(), false) AS locked FROM segments WHERE sku = $1),"
        " live AS (SELECT seg, record::jsonb AS rec FROM orders WHERE sku = $1"
        " AND record NOT LIKE '%\"status\":\"cancelled\"%'),"
        " parts AS (SELECT (p->>'segment')::int AS seg, sum((p->>'qty')::bigint) AS"
        " units FROM live, jsonb_array_elements(live.rec->'segments') p GROUP BY 1),"
        " firsts AS (SELECT seg, count(*) AS n FROM live GROUP BY seg),"
        " held AS (SELECT p.seg, sum(p.q) AS q FROM holds h,"
        " unnest(coalesce(h.part_segs, ARRAY[h.seg]), coalesce(h.part_qtys,"
        " ARRAY[h.qty])) AS p(seg, q) WHERE h.sku = $1 AND h.epoch = $3::bigint AND"
        " h.state = 'held' GROUP BY p.seg),"
        " meta AS (SELECT " META_COLS " FROM skus WHERE sku = $4)"
        " SELECT i.seg, coalesce(segs.stock, 0), coalesce(segs.locked, false),"
        " coalesce(parts.units, 0), coalesce(firsts.n, 0), coalesce(held.q, 0),"
        " meta.*"
        " FROM generate_series(0, $2::int - 1) AS i(seg)"
        " LEFT JOIN segs ON segs.seg = i.seg LEFT JOIN parts ON parts.seg = i.seg"
        " LEFT JOIN firsts ON firsts.seg = i.seg LEFT JOIN held ON held.seg = i.seg"
        " LEFT JOIN meta ON true",
        4, p);
    if (r == NULL)
        return -1;
    if (PQntuples(r) != n || PQnfields(r) != 17) {
        PQclear(r);
        return -1;
    }
    for (int k = 0; k < n; k++) {
        int i = (int)cell(r, k, 0);
        if (i < 0 || i >= n)
            continue;
        stock[i] = cell(r, k, 1);
        locked[i] = strcmp(PQgetvalue(r, k, 2), "t") == 0;
        sold[i] = cell(r, k, 3);
        orders[i] = cell(r, k, 4);
        reserved[i] = cell(r, k, 5);
    }
    /* The settings of the statement's snapshot (the same on every row). */
    int rc = 0;
    if (meta != NULL) {
        char lock[16];
        rc = PQgetisnull(r, 0, 6) ? 2 : 1;
        if (rc == 1)
            meta_row(r, 0, 6, meta, lock);
    }
    PQclear(r);
    return rc;
}

static int segment_place(admin *a, const char *placed, int i, int *slot, char *node,
                         size_t len)
{
    (void)a;
    (void)placed;
    (void)i;
    *slot = 0;
    if (len > 0)
        node[0] = '\0';
    return 0;
}

static int skus_list(admin *a, char ***names, size_t *n)
{
    PGresult *r = query(self(a), "SELECT sku FROM skus ORDER BY sku", 0, NULL);
    if (r == NULL)
        return -1;
    *n = (size_t)PQntuples(r);
    *names = seg_calloc(*n + 1, sizeof **names);
    for (size_t i = 0; i < *n; i++)
        (*names)[i] = seg_strdup(PQgetvalue(r, (int)i, 0));
    PQclear(r);
    return 0;
}

/* This store's schemes, then the lock services it fences (fence.h). */
static const char *const locks[] = {"row",       "lease",     "optimistic", "redlock",
                                    "memcached", "zookeeper", NULL};

const char *const *pga_locks(void)
{
    return locks;
}

static int wait_durable(admin *a, const char *placed, int n, const int *seg,
                        const char *id, const char *sku, int timeout_ms)
{
    (void)a, (void)placed, (void)n, (void)seg, (void)id, (void)sku, (void)timeout_ms;
    return 1; /* a COMMIT answered is durable: nothing to wait for */
}

/* ---- reservations: holds.h's statements on this connection -------------------- */

/* A release waits for its segment's row (FOR UPDATE: the units go back to its stock),
 * which a `row` holder's transaction keeps for as long as its orders hold it -- one
 * order's hold_ms, a chain handed on within lock_ttl_ms / 3 -- past timeout_ms, this
 * connection's lock and statement bound. So it waits as an order waits for a segment,
 * up to wait_ms (lock_timeout and statement_timeout raised for its own transaction
 * alone), and a wait run out is BUSY, nothing done, not an unknown outcome. */
static int release_step(struct pg_admin *a, const struct pgh_stmt *q,
                        struct store_reply *out, struct store_hold *h)
{
    char set[160];
    snprintf(set, sizeof set,
             "SELECT set_config('lock_timeout', '%d', true),"
             " set_config('statement_timeout', '%d', true)",
             a->wait_ms, a->wait_ms + a->timeout_ms);
    if (begin(a) != 0 || step(a, set, 0, NULL, NULL) != 0)
        return -1;
    PGresult *r = run(a, q->st.sql, q->st.nparams, q->st.params);
    if (r == NULL)
        return -1; /* the connection went, and the transaction with it */
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    bool busy = state != NULL && strcmp(state, "55P03") == 0; /* lock_not_available */
    int rc = busy ? 0 : pgh_decode(r, out, h);
    PQclear(r);
    if (busy) {
        memset(out, 0, sizeof *out);
        memset(h, 0, sizeof *h);
        out->code = STORE_BUSY;
    }
    if (rc != 0 || busy) {
        finish(a, false);
        return rc;
    }
    return finish(a, true);
}

static int hold_by_id(admin *a, const char *id, enum store_hold_action act,
                      const char *attempt, struct store_reply *out, struct store_hold *h)
{
    struct pgh_stmt q;
    pgh_step_stmt(&q, id, act, attempt);
    if (act == STORE_HOLD_RELEASE)
        return release_step(self(a), &q, out, h);
    PGresult *r = run(self(a), q.st.sql, q.st.nparams, q.st.params);
    int rc = pgh_decode(r, out, h);
    if (r != NULL)
        PQclear(r);
    return rc;
}

/* `limit` segments on Redis; here holds, 16 a segment. */
static int holds_sweep(admin *a, int limit, int *settled)
{
    struct pgh_stmt q;
    pgh_sweep_stmt(&q, limit * 16);
    PGresult *r = run(self(a), q.st.sql, q.st.nparams, q.st.params);
    *settled = pgh_decode_sweep(r);
    if (r != NULL)
        PQclear(r);
    if (*settled < 0) {
        *settled = 0;
        return -1;
    }
    return 0;
}

static const struct admin_ops pg_admin_ops = {
    .name = "postgres",
    .caps = caps,
    .free = admin_free,
    .error = error,
    .locks = locks,
    .ping = ping,
    .meta_read = meta_read,
    .record_read = record_read,
    .segments_read = segments_read,
    .segment_place = segment_place,
    .skus_list = skus_list,
    .wait = wait_durable,
    .hold_by_id = hold_by_id,
    .holds_sweep = holds_sweep,
};

admin *pga_create(const char *conninfo, int timeout_ms, int wait_ms, bool ledger)
{
    struct pg_admin *a = seg_calloc(1, sizeof *a);
    a->ledger = ledger;
    a->base.ops = &pg_admin_ops;
    a->conninfo = seg_strdup(conninfo);
    a->timeout_ms = timeout_ms > 0 ? timeout_ms : 3000;
    a->wait_ms = wait_ms > a->timeout_ms ? wait_ms : a->timeout_ms;
    return &a->base;
}

struct mig_wait {
    struct event_base *base;
    int rc, version;
};

static void on_migrated(void *arg, int rc, const struct pgs_res *r)
{
    struct mig_wait *w = arg;
    w->rc = rc;
    w->version = rc == 0 ? (int)r->version : 0;
    event_base_loopbreak(w->base);
}

int pga_migrate(const char *conninfo, int timeout_ms, int *version, char *err,
                size_t errlen)
{
    struct mig_wait w = {event_base_new(), -1, 0};
    const struct pgc_opts o = {.conninfo = conninfo, .call_timeout_ms = timeout_ms};
    pgc_conn *c = pgc_create(w.base, &o);
    pgs_migrate(c, on_migrated, &w);
    event_base_dispatch(w.base);
    if (w.rc != 0)
        snprintf(err, errlen, "schema migration failed: %s",
                 pgc_error(c)[0] ? pgc_error(c) : "a newer schema, or no answer");
    pgc_free(c);
    event_base_free(w.base);
    *version = w.version;
    return w.rc;
}
