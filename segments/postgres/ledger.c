/* ledger.c -- the order ledger's schema, copy and reads in PostgreSQL (ledger.h). */
#include "segments/postgres/ledger.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

struct pgl {
    char *conninfo;
    PGconn *conn; /* NULL: made at the next call */
    char errstr[256];
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

/* One event: its row, and only when the row is new, the SKU's movements and the
 * order's row (data-modifying CTEs: one statement, one snapshot). */
static const char copy_sql[] =
    "WITH ins AS (INSERT INTO ledger.order_events (stream, entry, sku, epoch, seg, kind,"
    " order_id, d_stock, d_sold, record) VALUES ($1, $2, $3, $4::bigint, $5::int, $6,"
    " NULLIF($7, ''), $8::bigint, $9::bigint, $10) ON CONFLICT DO NOTHING"
    " RETURNING sku, epoch, kind, order_id, d_stock, d_sold, record),"
    " mv AS (INSERT INTO ledger.movements (sku, epoch, stock, sold, events)"
    " SELECT sku, epoch, d_stock, d_sold, 1 FROM ins ON CONFLICT (sku, epoch) DO UPDATE"
    " SET stock = movements.stock + EXCLUDED.stock, sold = movements.sold + "
    "EXCLUDED.sold,"
    " events = movements.events + 1)"
    " INSERT INTO ledger.orders (order_id, sku, epoch, qty, status, record)"
    " SELECT order_id, sku, epoch, d_sold,"
    " CASE WHEN kind = 'cancel' THEN 'cancelled' ELSE 'sold' END, record FROM ins"
    " WHERE order_id IS NOT NULL ON CONFLICT (order_id, sku, epoch) DO UPDATE"
    " SET qty = orders.qty + EXCLUDED.qty,"
    " status = CASE WHEN orders.status = 'cancelled' OR EXCLUDED.status = 'cancelled'"
    " THEN 'cancelled' ELSE orders.status END,"
    " record = CASE WHEN EXCLUDED.record IS NULL THEN orders.record"
    " WHEN orders.status = 'cancelled' AND EXCLUDED.status <> 'cancelled'"
    " AND orders.record IS NOT NULL THEN orders.record ELSE EXCLUDED.record END,"
    " updated_at = now()";

pgl *pgl_create(const char *conninfo)
{
    pgl *p = seg_calloc(1, sizeof *p);
    p->conninfo = seg_strdup(conninfo);
    return p;
}

void pgl_free(pgl *p)
{
    if (p == NULL)
        return;
    if (p->conn != NULL)
        PQfinish(p->conn);
    free(p->conninfo);
    free(p);
}

const char *pgl_error(const pgl *p)
{
    return p->errstr;
}

static int fail(pgl *p, const char *what)
{
    const char *msg = p->conn != NULL ? PQerrorMessage(p->conn) : "";
    snprintf(p->errstr, sizeof p->errstr, "%s: %.*s", what, (int)strcspn(msg, "\n"), msg);
    if (p->conn != NULL)
        PQfinish(p->conn);
    p->conn = NULL;
    return -1;
}

/* Connected, the schema made: 0 or -1. */
static int ready(pgl *p)
{
    if (p->conn != NULL && PQstatus(p->conn) == CONNECTION_OK)
        return 0;
    if (p->conn != NULL)
        PQfinish(p->conn);
    const char *keys[] = {"dbname", "connect_timeout", NULL};
    const char *vals[] = {p->conninfo, "3", NULL};
    p->conn = PQconnectdbParams(keys, vals, 1);
    if (p->conn == NULL || PQstatus(p->conn) != CONNECTION_OK)
        return fail(p, "connect");
    PGresult *r = PQexec(p->conn, "SET statement_timeout = 10000");
    PQclear(r);
    r = PQexec(p->conn, schema_sql); /* one implicit transaction: the lock holds */
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    return ok ? 0 : fail(p, "schema");
}

static int exec_ok(pgl *p, const char *sql)
{
    PGresult *r = PQexec(p->conn, sql);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    return ok ? 0 : -1;
}

int pgl_copy(pgl *p, const char *stream, const char *sku, int seg,
             const struct pgl_event *ev, int n)
{
    if (ready(p) != 0)
        return -1;
    if (exec_ok(p, "BEGIN") != 0)
        return fail(p, "begin");
    char epoch[24], sg[16], ds[24], dq[24];
    snprintf(sg, sizeof sg, "%d", seg);
    for (int i = 0; i < n; i++) {
        snprintf(epoch, sizeof epoch, "%lld", ev[i].epoch);
        snprintf(ds, sizeof ds, "%lld", ev[i].d_stock);
        snprintf(dq, sizeof dq, "%lld", ev[i].d_sold);
        const char *params[10] = {stream,     ev[i].entry, sku, epoch, sg,
                                  ev[i].kind, ev[i].order, ds,  dq,    ev[i].record};
        PGresult *r = PQexecParams(p->conn, copy_sql, 10, NULL, params, NULL, NULL, 0);
        int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
        if (!ok)
            return fail(p, "insert"); /* the connection goes: the server rolls back */
    }
    PGresult *r = PQexec(p->conn, "COMMIT");
    /* COMMIT of a failed transaction answers ROLLBACK (COMMAND_OK): read the tag. */
    int ok =
        PQresultStatus(r) == PGRES_COMMAND_OK && strcmp(PQcmdStatus(r), "COMMIT") == 0;
    PQclear(r);
    return ok ? 0 : fail(p, "commit");
}

int pgl_order(pgl *p, const char *id, char **record, char *sku, size_t skulen,
              long long *epoch, int *cancelled)
{
    *record = NULL;
    if (ready(p) != 0)
        return -1;
    const char *params[1] = {id};
    PGresult *r = PQexecParams(p->conn,
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
    PGresult *r = PQexecParams(p->conn,
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
