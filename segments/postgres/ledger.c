/* ledger.c -- the order ledger's schema, copy and reads in PostgreSQL (ledger.h). */
#include "segments/postgres/ledger.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/postgres/bconn.h"

struct pgl {
    struct pgbc b; /* bconn.h */
};

static const char schema_sql[] =
    "SELECT pg_advisory_xact_lock(7236024);"
    "CREATE SCHEMA IF NOT EXISTS ledger;"
    "CREATE TABLE IF NOT EXISTS ledger.order_events ("
    " stream text NOT NULL, entry text NOT NULL, sku text NOT NULL,"
    " epoch bigint NOT NULL, seg int NOT NULL, kind text NOT NULL, order_id text,"
    " d_stock bigint NOT NULL, d_sold bigint NOT NULL, record text,"
    " copied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (stream, entry));"
    "CREATE INDEX IF NOT EXISTS order_events_order ON ledger.order_events (order_id);"
    "CREATE TABLE IF NOT EXISTS ledger.movements ("
    " sku text NOT NULL, epoch bigint NOT NULL, stock bigint NOT NULL,"
    " sold bigint NOT NULL, events bigint NOT NULL, PRIMARY KEY (sku, epoch));"
    "CREATE TABLE IF NOT EXISTS ledger.orders ("
    " order_id text NOT NULL, sku text NOT NULL, epoch bigint NOT NULL,"
    " qty bigint NOT NULL, status text NOT NULL, record text,"
    " updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (order_id, sku, "
    "epoch));";

/* A batch of events of one stream: their rows, and only for the rows that are new,
 * the SKU's movements and the orders' rows, summed per epoch and per order within the
 * batch (data-modifying CTEs: one statement, one snapshot; an upsert may touch a row
 * once). $1 stream, $2 sku, $3 segment, then one array per column, in stream order. */
static const char copy_sql[] =
    "WITH src AS (SELECT * FROM unnest($4::text[], $5::bigint[], $6::text[], $7::text[],"
    " $8::bigint[], $9::bigint[], $10::text[]) WITH ORDINALITY"
    " AS t(entry, epoch, kind, order_id, d_stock, d_sold, record, n)),"
    " ins AS (INSERT INTO ledger.order_events (stream, entry, sku, epoch, seg, kind,"
    " order_id, d_stock, d_sold, record) SELECT $1, entry, $2, epoch, $3::int, kind,"
    " NULLIF(order_id, ''), d_stock, d_sold, record FROM src ON CONFLICT DO NOTHING"
    " RETURNING entry, epoch, kind, order_id, d_sold, d_stock, record),"
    " mv AS (INSERT INTO ledger.movements (sku, epoch, stock, sold, events)"
    " SELECT $2, epoch, sum(d_stock), sum(d_sold), count(*) FROM ins GROUP BY epoch"
    " ON CONFLICT (sku, epoch) DO UPDATE SET stock = movements.stock + EXCLUDED.stock,"
    " sold = movements.sold + EXCLUDED.sold, events = movements.events + EXCLUDED.events)"
    " INSERT INTO ledger.orders (order_id, sku, epoch, qty, status, record)"
    " SELECT i.order_id, $2, i.epoch, sum(i.d_sold),"
    " CASE WHEN bool_or(i.kind = 'cancel') THEN 'cancelled' ELSE 'sold' END,"
    " (array_agg(i.record ORDER BY s.n DESC) FILTER (WHERE i.record IS NOT NULL))[1]"
    " FROM ins i JOIN src s ON s.entry = i.entry WHERE i.order_id IS NOT NULL"
    " GROUP BY i.order_id, i.epoch ON CONFLICT (order_id, sku, epoch) DO UPDATE"
    " SET qty = orders.qty + EXCLUDED.qty,"
    " status = CASE WHEN orders.status = 'cancelled' OR EXCLUDED.status = 'cancelled'"
    " THEN 'cancelled' ELSE orders.status END,"
    " record = CASE WHEN EXCLUDED.record IS NULL THEN orders.record"
    " WHEN orders.status = 'cancelled' AND EXCLUDED.status <> 'cancelled'"
    " AND orders.record IS NOT NULL THEN orders.record ELSE EXCLUDED.record END,"
    " updated_at = now()";

/* A growing string: PostgreSQL array literals. */
struct sbuf {
    char *p;
    size_t len, cap;
};

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = seg_realloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* One element of a text array literal: NULL, or the text quoted, with " and \
 * escaped; `first` says whether a comma goes before it. */
static void sb_text(struct sbuf *b, const char *s, bool first)
{
    if (!first)
        sb_put(b, ",", 1);
    if (s == NULL) {
        sb_put(b, "NULL", 4);
        return;
    }
    sb_put(b, "\"", 1);
    /* A run at a time: a call per character was a sixth of the sink's instructions. */
    while (*s != '\0') {
        size_t run = strcspn(s, "\"\\");
        sb_put(b, s, run);
        s += run;
        if (*s != '\0') {
            sb_put(b, "\\", 1);
            sb_put(b, s++, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static void sb_ll(struct sbuf *b, long long v, bool first)
{
    char num[24];
    int n = snprintf(num, sizeof num, "%s%lld", first ? "" : ",", v);
    sb_put(b, num, (size_t)n);
}

pgl *pgl_create(const char *conninfo)
{
    pgl *p = seg_calloc(1, sizeof *p);
    pgbc_init(&p->b, conninfo);
    return p;
}

void pgl_free(pgl *p)
{
    if (p == NULL)
        return;
    pgbc_clear(&p->b);
    free(p);
}

const char *pgl_error(const pgl *p)
{
    return p->b.errstr;
}

static int fail(pgl *p, const char *what)
{
    return pgbc_fail(&p->b, what);
}

/* Connected, the schema made: 0 or -1. */
static int ready(pgl *p)
{
    int made = pgbc_ready(&p->b);
    if (made <= 0)
        return made;
    PGresult *r =
        PQexec(p->b.conn, schema_sql); /* one implicit transaction: the lock holds */
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok)
        return fail(p, "schema");
    /* Prepared once per connection: parsed once, and planned once when PostgreSQL
     * settles on the generic plan (its arrays' sizes do not change the plan). */
    r = PQprepare(p->b.conn, "ledger_copy", copy_sql, 10, NULL);
    ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    return ok ? 0 : fail(p, "prepare");
}

int pgl_copy_send(pgl *p, const char *stream, const char *sku, int seg,
                  const struct pgl_event *ev, int n)
{
    if (ready(p) != 0)
        return -1;
    /* One statement for the batch: a statement per event ran the sink at ~10,000
     * events/s, behind the orders. */
    struct sbuf col[7] = {{NULL, 0, 0}};
    for (int c = 0; c < 7; c++)
        sb_put(&col[c], "{", 1);
    for (int i = 0; i < n; i++) {
        bool first = i == 0;
        sb_text(&col[0], ev[i].entry, first);
        sb_ll(&col[1], ev[i].epoch, first);
        sb_text(&col[2], ev[i].kind, first);
        sb_text(&col[3], ev[i].order, first);
        sb_ll(&col[4], ev[i].d_stock, first);
        sb_ll(&col[5], ev[i].d_sold, first);
        sb_text(&col[6], ev[i].record, first);
    }
    for (int c = 0; c < 7; c++)
        sb_put(&col[c], "}", 1);
    char sg[16];
    snprintf(sg, sizeof sg, "%d", seg);
    const char *params[10] = {stream,   sku,      sg,       col[0].p, col[1].p,
                              col[2].p, col[3].p, col[4].p, col[5].p, col[6].p};
    /* The parameters are in libpq's output buffer once this returns. */
    int sent = PQsendQueryPrepared(p->b.conn, "ledger_copy", 10, params, NULL, NULL, 0);
    for (int c = 0; c < 7; c++)
        free(col[c].p);
    return sent ? 0 : fail(p, "copy");
}

int pgl_copy_wait(pgl *p)
{
    if (p->b.conn == NULL)
        return -1;
    bool ok = false, any = false;
    PGresult *r;
    while ((r = PQgetResult(p->b.conn)) != NULL) {
        ok = !any && PQresultStatus(r) == PGRES_COMMAND_OK;
        any = true;
        PQclear(r);
    }
    return ok ? 0 : fail(p, "copy"); /* one statement: all of it or none */
}

int pgl_copy(pgl *p, const char *stream, const char *sku, int seg,
             const struct pgl_event *ev, int n)
{
    if (pgl_copy_send(p, stream, sku, seg, ev, n) != 0)
        return -1;
    return pgl_copy_wait(p);
}

int pgl_order(pgl *p, const char *id, char **record, char *sku, size_t skulen,
              long long *epoch, int *cancelled)
{
    *record = NULL;
    if (ready(p) != 0)
        return -1;
    const char *params[1] = {id};
    PGresult *r = PQexecParams(p->b.conn,
                               "SELECT record, sku, epoch, status = 'cancelled'"
                               " FROM ledger.orders WHERE order_id = $1"
                               " AND record IS NOT NULL ORDER BY updated_at DESC LIMIT 1",
                               1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        PQclear(r);
        return fail(p, "order");
    }
    int found = PQntuples(r) == 1;
    if (found) {
        *record = seg_strdup(PQgetvalue(r, 0, 0));
        snprintf(sku, skulen, "%s", PQgetvalue(r, 0, 1));
        *epoch = strtoll(PQgetvalue(r, 0, 2), NULL, 10);
        *cancelled = PQgetvalue(r, 0, 3)[0] == 't';
    }
    PQclear(r);
    return found;
}

int pgl_counts(pgl *p, const char *sku, long long epoch, long long *stock,
               long long *sold, long long *events)
{
    *stock = *sold = *events = 0;
    if (ready(p) != 0)
        return -1;
    char e[24];
    snprintf(e, sizeof e, "%lld", epoch);
    const char *params[2] = {sku, e};
    PGresult *r = PQexecParams(p->b.conn,
                               "SELECT stock, sold, events FROM ledger.movements"
                               " WHERE sku = $1 AND epoch = $2::bigint",
                               2, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        PQclear(r);
        return fail(p, "counts");
    }
    int found = PQntuples(r) == 1;
    if (found) {
        *stock = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        *sold = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
        *events = strtoll(PQgetvalue(r, 0, 2), NULL, 10);
    }
    PQclear(r);
    return found;
}
