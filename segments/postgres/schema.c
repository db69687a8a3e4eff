/* schema.c -- the numbered migrations of the PostgreSQL store, applied by pgs_migrate. */
#include "segments/postgres/store.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/xalloc.h"
#include "segments/postgres/events.h"
#include "segments/postgres/fence.h"
#include "segments/postgres/holds.h"

/* Migration N is migrations[N - 1]: statements run in one transaction with the
 * version bump. Never edit one that has shipped; add the next. */
static const char *const m1[] = {
    "CREATE TABLE skus ("
    " sku text PRIMARY KEY,"
    " segments int NOT NULL CHECK (segments BETWEEN 1 AND 1024),"
    " initial bigint NOT NULL CHECK (initial >= 0),"
    " mode text NOT NULL,"
    " lock text NOT NULL,"
    " hold_ms int NOT NULL DEFAULT 0,"
    " epoch bigint NOT NULL DEFAULT 1)",
    "CREATE TABLE segments ("
    " sku text NOT NULL REFERENCES skus ON DELETE CASCADE,"
    " seg int NOT NULL,"
    " stock bigint NOT NULL CHECK (stock >= 0),"
    " version bigint NOT NULL DEFAULT 0,"
    " lease_token text,"
    " lease_until timestamptz,"
    " fence bigint NOT NULL DEFAULT 0,"
    " PRIMARY KEY (sku, seg))",
    "CREATE TABLE orders ("
    " order_id text PRIMARY KEY,"
    " sku text NOT NULL,"
    " seg int NOT NULL,"
    " qty bigint NOT NULL CHECK (qty > 0),"
    " record text NOT NULL,"
    " created_at timestamptz NOT NULL DEFAULT now())",
    "CREATE INDEX orders_sku ON orders (sku)",
    NULL,
};

/* 2: what the service's admin operations keep (postgres/admin.h): the SKU's gen
 * (bumped by restock, rebalance, cancel), its rebalance and durability settings, and
 * the request ids of admin writes. */
static const char *const m2[] = {
    "ALTER TABLE skus ADD COLUMN gen bigint NOT NULL DEFAULT 0,"
    " ADD COLUMN rebalance boolean NOT NULL DEFAULT false,"
    " ADD COLUMN replicated boolean NOT NULL DEFAULT false",
    "CREATE TABLE requests ("
    " rid text PRIMARY KEY,"
    " sig text NOT NULL,"
    " created_at timestamptz NOT NULL DEFAULT now())",
    NULL,
};

/* 3: reservations (holds.h; its statements in holds_sql.c). */
/* 4: a SKU's group commit, "batch" (the orders one hold of a segment's lock sells). */
static const char *const m4[] = {
    "ALTER TABLE skus ADD COLUMN batch int NOT NULL DEFAULT 1",
    NULL,
};

/* 5: holds over several segments (holds_parts_sql.c). */
/* 6: the lock services' fences (fence_sql.c). */
/* 7: the ledger's events (events.c). */
static const char *const *const migrations[] = {
    m1, m2, pgh_schema, m4, pgh_schema_parts, pgf_schema, pgev_schema};
#define LATEST ((int)(sizeof migrations / sizeof migrations[0]))

/* Serializes migrations of several instances on one database. */
#define MIGRATE_LOCK "7236011"

int pgs_schema_latest(void)
{
    return LATEST;
}

struct mig {
    pgc_conn *c;
    pgs_fn fn;
    void *arg;
    unsigned long long txn;
    int from;
};

static void finish(struct mig *m, int rc, int version)
{
    struct pgs_res r = {.code = PGS_OK, .version = version};
    if (m->fn != NULL)
        m->fn(m->arg, rc, rc == 0 ? &r : NULL);
    free(m);
}

static void on_applied(void *arg, int rc, PGresult *const *res, int n)
{
    struct mig *m = arg;
    for (int i = 0; rc == 0 && i < n; i++) {
        if (PQresultStatus(res[i]) != PGRES_COMMAND_OK)
            rc = -1;
    }
    finish(m, rc, LATEST);
}

static void on_version(void *arg, int rc, PGresult *const *res, int n)
{
    struct mig *m = arg;
    if (rc != 0 || n != 3 || PQresultStatus(res[2]) != PGRES_TUPLES_OK ||
        PQntuples(res[2]) != 1) {
        finish(m, -1, 0);
        return;
    }
    m->from = atoi(PQgetvalue(res[2], 0, 0));
    if (m->from > LATEST) {
        /* A newer build migrated this database: refuse rather than guess. */
        static const struct pgc_stmt rb = {"ROLLBACK", 0, NULL};
        pgc_call(m->c, m->txn, PGC_END, &rb, 1, NULL, NULL);
        finish(m, -1, m->from);
        return;
    }
    int count = 0;
    for (int v = m->from + 1; v <= LATEST; v++)
        for (const char *const *s = migrations[v - 1]; *s != NULL; s++)
            count++;
    struct pgc_stmt *st = seg_calloc((size_t)count + 3, sizeof *st);
    int k = 0;
    for (int v = m->from + 1; v <= LATEST; v++)
        for (const char *const *s = migrations[v - 1]; *s != NULL; s++)
            st[k++].sql = *s;
    char latest[16];
    snprintf(latest, sizeof latest, "%d", LATEST);
    const char *p[] = {latest};
    if (count > 0) {
        st[k++].sql = "DELETE FROM schema_version";
        st[k++] = (struct pgc_stmt){"INSERT INTO schema_version VALUES ($1::int)", 1, p};
    }
    st[k++].sql = "COMMIT";
    pgc_call(m->c, m->txn, PGC_END, st, k, on_applied, m);
    free(st);
}

void pgs_migrate(pgc_conn *c, pgs_fn fn, void *arg)
{
    struct mig *m = seg_calloc(1, sizeof *m);
    m->c = c;
    m->fn = fn;
    m->arg = arg;
    const struct pgc_stmt st[] = {
        {"SELECT pg_advisory_xact_lock(" MIGRATE_LOCK ")", 0, NULL},
        {"CREATE TABLE IF NOT EXISTS schema_version (version int NOT NULL)", 0, NULL},
        {"SELECT coalesce(max(version), 0) FROM schema_version", 0, NULL},
    };
    m->txn = pgc_call(c, 0, PGC_BEGIN, st, 3, on_version, m);
}
