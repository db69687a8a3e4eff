/* events.c -- migration 7 (the store's events table and the triggers that fill it) and
 * the sink's blocking reads of it (contract: events.h). */
#include "segments/postgres/events.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/postgres/bconn.h"

/* The triggers look the SKU up only for a segment row whose flag is set, and for an
 * order row written by a session of a service with a ledger (inv.ledger on: conn.h
 * pgc_opts.ledger); their WHEN skips the call otherwise, so a store without a ledger
 * pays nothing (the call with its read of skus was ~25% of an atomic deduction's
 * statement under pgbench). */
const char *const pgev_schema[] = {
    "ALTER TABLE skus ADD COLUMN ledger boolean NOT NULL DEFAULT false",
    "ALTER TABLE segments ADD COLUMN ledger boolean NOT NULL DEFAULT false",
    "CREATE TABLE events ("
    " id bigserial PRIMARY KEY,"
    " sku text NOT NULL, seg int NOT NULL, epoch bigint NOT NULL, kind text NOT NULL,"
    " order_id text, d_stock bigint NOT NULL, d_sold bigint NOT NULL, record text,"
    " at timestamptz NOT NULL DEFAULT clock_timestamp())",

    "CREATE FUNCTION inv_ev_segment() RETURNS trigger LANGUAGE plpgsql AS $$\n"
    "DECLARE ep bigint; on_ boolean;\n"
    "BEGIN\n"
    "  SELECT epoch, ledger INTO ep, on_ FROM skus WHERE sku = NEW.sku;\n"
    "  IF NOT coalesce(on_, false) THEN RETURN NULL; END IF;\n"
    "  IF TG_OP = 'INSERT' THEN\n"
    "    INSERT INTO events (sku, seg, epoch, kind, d_stock, d_sold)\n"
    "      VALUES (NEW.sku, NEW.seg, ep, 'reset', NEW.stock, 0);\n"
    "  ELSE\n"
    "    INSERT INTO events (sku, seg, epoch, kind, d_stock, d_sold)\n"
    "      VALUES (NEW.sku, NEW.seg, ep,\n"
    "        coalesce(nullif(current_setting('inv.event', true), ''), 'stock'),\n"
    "        NEW.stock - OLD.stock, 0);\n"
    "  END IF;\n"
    "  RETURN NULL;\n"
    "END $$",
    "CREATE TRIGGER segments_reset_event AFTER INSERT ON segments FOR EACH ROW"
    " WHEN (NEW.ledger) EXECUTE FUNCTION inv_ev_segment()",
    "CREATE TRIGGER segments_stock_event AFTER UPDATE OF stock ON segments FOR EACH ROW"
    " WHEN (NEW.ledger AND NEW.stock <> OLD.stock) EXECUTE FUNCTION inv_ev_segment()",

    "CREATE FUNCTION inv_ev_order() RETURNS trigger LANGUAGE plpgsql AS $$\n"
    "DECLARE ep bigint; on_ boolean;\n"
    "BEGIN\n"
    "  SELECT epoch, ledger INTO ep, on_ FROM skus WHERE sku = NEW.sku;\n"
    "  IF NOT coalesce(on_, false) THEN RETURN NULL; END IF;\n"
    "  IF TG_OP = 'INSERT' THEN\n"
    "    INSERT INTO events (sku, seg, epoch, kind, order_id, d_stock, d_sold, record)\n"
    "      VALUES (NEW.sku, NEW.seg, ep, 'sale', NEW.order_id, 0, NEW.qty, NEW.record);\n"
    "  ELSIF strpos(NEW.record, '\"status\":\"cancelled\"') > 0\n"
    "    AND strpos(OLD.record, '\"status\":\"cancelled\"') = 0 THEN\n"
    "    INSERT INTO events (sku, seg, epoch, kind, order_id, d_stock, d_sold, record)\n"
    "      VALUES (NEW.sku, NEW.seg, ep, 'cancel', NEW.order_id, 0, -NEW.qty,\n"
    "        NEW.record);\n"
    "  END IF;\n"
    "  RETURN NULL;\n"
    "END $$",
    "CREATE TRIGGER orders_event AFTER INSERT OR UPDATE OF record ON orders FOR EACH ROW"
    " WHEN (current_setting('inv.ledger', true) = 'on') EXECUTE FUNCTION inv_ev_order()",
    NULL,
};

struct pgev {
    struct pgbc b; /* bconn.h */
};

pgev *pgev_create(const char *conninfo)
{
    pgev *p = seg_calloc(1, sizeof *p);
    pgbc_init(&p->b, conninfo);
    return p;
}

void pgev_free(pgev *p)
{
    if (p == NULL)
        return;
    pgbc_clear(&p->b);
    free(p);
}

const char *pgev_error(const pgev *p)
{
    return p->b.errstr;
}

static int fail(pgev *p, const char *what)
{
    return pgbc_fail(&p->b, what);
}

/* Run `sql` (no result rows wanted): 0 or -1. */
static int exec(pgev *p, const char *sql, const char *what)
{
    PGresult *r = PQexec(p->b.conn, sql);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    return ok ? 0 : fail(p, what);
}

static int ready(pgev *p)
{
    return pgbc_ready(&p->b) < 0 ? -1 : 0;
}

/* The batch locked in the subquery (SKIP LOCKED: another sink's rows are left to it),
 * then grouped by segment for the ledger's copy (one call per segment). */
static const char take_sql[] =
    "SELECT id, sku, seg, epoch, kind, coalesce(order_id, ''), d_stock, d_sold, record,"
    " (extract(epoch FROM at) * 1000)::bigint FROM (SELECT * FROM events ORDER BY id"
    " LIMIT $1::int FOR UPDATE SKIP LOCKED) e ORDER BY sku, seg, id";

int pgev_take(pgev *p, int max, struct pgev_row **out, int *n)
{
    *out = NULL;
    *n = 0;
    if (ready(p) != 0 || exec(p, "BEGIN", "begin") != 0)
        return -1;
    char lim[16];
    snprintf(lim, sizeof lim, "%d", max);
    const char *params[1] = {lim};
    PGresult *r = PQexecParams(p->b.conn, take_sql, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        PQclear(r);
        return fail(p, "take");
    }
    int rows = PQntuples(r);
    if (rows == 0) {
        PQclear(r);
        return exec(p, "COMMIT", "commit");
    }
    struct pgev_row *e = seg_calloc((size_t)rows, sizeof *e);
    for (int k = 0; k < rows; k++) {
        snprintf(e[k].entry, sizeof e[k].entry, "%s", PQgetvalue(r, k, 0));
        snprintf(e[k].sku, sizeof e[k].sku, "%s", PQgetvalue(r, k, 1));
        e[k].seg = atoi(PQgetvalue(r, k, 2));
        e[k].epoch = strtoll(PQgetvalue(r, k, 3), NULL, 10);
        snprintf(e[k].kind, sizeof e[k].kind, "%s", PQgetvalue(r, k, 4));
        snprintf(e[k].order, sizeof e[k].order, "%s", PQgetvalue(r, k, 5));
        e[k].d_stock = strtoll(PQgetvalue(r, k, 6), NULL, 10);
        e[k].d_sold = strtoll(PQgetvalue(r, k, 7), NULL, 10);
        e[k].record = PQgetisnull(r, k, 8) ? NULL : seg_strdup(PQgetvalue(r, k, 8));
        e[k].at_ms = strtoll(PQgetvalue(r, k, 9), NULL, 10);
    }
    PQclear(r);
    *out = e;
    *n = rows;
    return 0;
}

long long pgev_count(pgev *p, long long cap)
{
    if (p->b.conn == NULL)
        return -1;
    char c[24];
    snprintf(c, sizeof c, "%lld", cap);
    const char *params[1] = {c};
    PGresult *r = PQexecParams(
        p->b.conn, "SELECT count(*) FROM (SELECT 1 FROM events LIMIT $1::bigint) t", 1,
        NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        PQclear(r);
        return fail(p, "count");
    }
    long long n = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return n;
}

int pgev_done(pgev *p, const struct pgev_row *rows, int n)
{
    if (p->b.conn == NULL)
        return -1; /* the transaction was lost: the rows are still there */
    size_t cap = (size_t)n * 24 + 3, len = 0;
    char *ids = seg_malloc(cap);
    len += (size_t)snprintf(ids, cap, "{");
    for (int k = 0; k < n; k++)
        len +=
            (size_t)snprintf(ids + len, cap - len, "%s%s", k ? "," : "", rows[k].entry);
    snprintf(ids + len, cap - len, "}");
    const char *params[1] = {ids};
    PGresult *r =
        PQexecParams(p->b.conn, "DELETE FROM events WHERE id = ANY($1::bigint[])", 1,
                     NULL, params, NULL, NULL, 0);
    free(ids);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok)
        return fail(p, "delete");
    /* A COMMIT the server answers with ROLLBACK (the session lost meanwhile) is not one.
     */
    r = PQexec(p->b.conn, "COMMIT");
    ok = PQresultStatus(r) == PGRES_COMMAND_OK && strcmp(PQcmdStatus(r), "COMMIT") == 0;
    PQclear(r);
    return ok ? 0 : fail(p, "commit");
}

void pgev_abandon(pgev *p)
{
    if (p->b.conn != NULL)
        exec(p, "ROLLBACK", "rollback");
}

void pgev_rows_free(struct pgev_row *rows, int n)
{
    for (int k = 0; k < n; k++)
        free(rows[k].record);
    free(rows);
}
