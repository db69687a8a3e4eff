/* batch.c -- the PostgreSQL store's group commit: the orders one hold of a segment's
 * lock sells (or one turn of the loop's, hold 0), each with its own answer, in one
 * statement (store.h deduct_batch). */
#include "segments/postgres/handle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

/* The statement. $1 sku, $2 seg, $3 token, $4 the epoch believed, $5 ids, $6 qtys,
 * $7 records (arrays in the orders' order), $8 the version an optimistic holder read
 * ($3 and $8 typed in `s` for the schemes that do not use them).
 * `s` locks the segment's row (row without a hold: NOWAIT, busy is an error) and says
 * whether the lock is still the caller's (MINE) and the SKU still of that epoch; `w`
 * walks the orders in turn (a recursive CTE), each selling when it fits what the ones
 * before it left, its id is neither recorded (`p`) nor sold earlier in the batch; `o`
 * inserts the rows of those that sell (ON CONFLICT DO NOTHING: an id another
 * transaction recorded meanwhile sells nothing); `u` takes what `o` inserted from the
 * stock and (SET_MORE) gives the lease back, when the lock is the caller's, whatever
 * sold. Nothing is sold when the lock is not the caller's or the SKU was reset: `w` is
 * empty then. Columns per order, in order: sold, left after it, the record its id has;
 * for the batch: the segment found, MINE, fresh, whether `u` ran; and whether the
 * order would have sold (fitted, its id new as of the statement's snapshot). */
#define BATCH_SQL(MINE, LOCK, SET_MORE)                                                  \
    "WITH RECURSIVE i AS (SELECT * FROM unnest($5::text[], $6::bigint[], $7::text[])"    \
    " WITH ORDINALITY AS t(id, qty, rec, k)),"                                           \
    " s AS MATERIALIZED (SELECT stock, coalesce(" MINE ", false) AS mine,"               \
    " coalesce((SELECT epoch FROM skus WHERE sku = $1) = $4::bigint, false) AS fresh,"   \
    " $3::text AS tok, $8::bigint AS ver FROM segments WHERE sku = $1 AND seg = "        \
    "$2::int " LOCK "),"                                                                 \
    " p AS (SELECT order_id, record FROM orders WHERE order_id = ANY($5::text[])),"      \
    " w(k, left_, ok, ids) AS (SELECT 0::bigint, stock, false, '{}'::text[] FROM s"      \
    " WHERE mine AND fresh UNION ALL SELECT i.k,"                                        \
    " w.left_ - CASE WHEN x.ok THEN i.qty ELSE 0 END, x.ok,"                             \
    " CASE WHEN x.ok THEN w.ids || i.id ELSE w.ids END FROM w JOIN i ON i.k = w.k + 1,"  \
    " LATERAL (SELECT i.qty <= w.left_ AND i.id <> ALL (w.ids) AND NOT EXISTS"           \
    " (SELECT 1 FROM p WHERE p.order_id = i.id) AS ok) x),"                              \
    " o AS (INSERT INTO orders (order_id, sku, seg, qty, record)"                        \
    " SELECT i.id, $1, $2::int, i.qty, i.rec FROM w JOIN i USING (k) WHERE w.ok"         \
    " ON CONFLICT (order_id) DO NOTHING RETURNING order_id, qty),"                       \
    " u AS (UPDATE segments SET stock = stock - (SELECT coalesce(sum(qty), 0) FROM o),"  \
    " version = version + 1" SET_MORE " WHERE sku = $1 AND seg = $2::int"                \
    " AND (SELECT mine FROM s) RETURNING 1)"                                             \
    " SELECT coalesce(w.ok AND i.id IN (SELECT order_id FROM o), false), w.left_,"       \
    " coalesce(p.record, (SELECT j.rec FROM i j JOIN w v USING (k) WHERE v.ok"           \
    " AND j.id = i.id AND j.id IN (SELECT order_id FROM o) LIMIT 1)),"                   \
    " (SELECT count(*) FROM s), coalesce((SELECT mine FROM s), false),"                  \
    " coalesce((SELECT fresh FROM s), false), (SELECT count(*) FROM u),"                 \
    " coalesce(w.ok, false)"                                                             \
    " FROM i LEFT JOIN w USING (k) LEFT JOIN p ON p.order_id = i.id ORDER BY i.k"

/* atomic, a row held by the caller's transaction, optimistic without a version read */
static const char sql_plain[] = BATCH_SQL("true", "FOR UPDATE", "");
/* row with no hold: the row lock taken in the statement, NOWAIT */
static const char sql_row_now[] = BATCH_SQL("true", "FOR UPDATE NOWAIT", "");
static const char sql_lease[] =
    BATCH_SQL("lease_token = $3 AND lease_until > now()", "FOR UPDATE",
              ", lease_token = NULL, lease_until = NULL");
static const char sql_version[] = BATCH_SQL("version = $8::bigint", "FOR UPDATE", "");

struct bcall {
    store_batch_fn fn;
    void *arg;
    struct pg_store *s;
    int n;
    bool txn; /* the statement ran in the holder's transaction, then COMMIT */
    struct store_reply *r;
    char **id;
};

static void bcall_free(struct bcall *b)
{
    for (int k = 0; k < b->n; k++) {
        free(b->r[k].record);
        free(b->id[k]);
    }
    free(b->r);
    free(b->id);
    free(b);
}

static void answer(struct bcall *b, int rc)
{
    b->fn(b->arg, rc, b->n, rc == 0 ? b->r : NULL);
    bcall_free(b);
}

static void answer_all(struct bcall *b, int code)
{
    for (int k = 0; k < b->n; k++)
        b->r[k].code = code;
    answer(b, 0);
}

/* EXISTS answers without a record (an id recorded by another transaction while the
 * statement ran): the records read. */
static void on_records(void *arg, int rc, PGresult *const *res, int n)
{
    struct bcall *b = arg;
    if (!pgb_results_ok(rc, res, n)) {
        answer(b, -1);
        return;
    }
    for (int k = 0; k < b->n; k++) {
        if (b->r[k].code != STORE_EXISTS || b->r[k].record != NULL)
            continue;
        for (int j = 0; j < PQntuples(res[0]); j++)
            if (strcmp(PQgetvalue(res[0], j, 0), b->id[k]) == 0)
                b->r[k].record = seg_strdup(PQgetvalue(res[0], j, 1));
        if (b->r[k].record == NULL) { /* (not expected: the row cannot go away) */
            answer(b, -1);
            return;
        }
    }
    answer(b, 0);
}

/* A text[] literal ({"a","b"}) of str(o, 0..n-1), `"` and `\` escaped. */
static char *array_text(const void *o, int n, const char *(*str)(const void *o, int k))
{
    size_t cap = 3;
    for (int k = 0; k < n; k++)
        cap += 2 * strlen(str(o, k)) + 3;
    char *a = seg_malloc(cap), *p = a;
    *p++ = '{';
    for (int k = 0; k < n; k++) {
        if (k > 0)
            *p++ = ',';
        *p++ = '"';
        for (const char *c = str(o, k); *c != '\0'; c++) {
            if (*c == '"' || *c == '\\')
                *p++ = '\\';
            *p++ = *c;
        }
        *p++ = '"';
    }
    *p++ = '}';
    *p = '\0';
    return a;
}

static const char *order_id(const void *o, int k)
{
    return ((const struct store_batch_order *)o)[k].id;
}

static const char *order_record(const void *o, int k)
{
    return ((const struct store_batch_order *)o)[k].record;
}

static const char *call_id(const void *b, int k)
{
    return ((const struct bcall *)b)->id[k];
}

static char *array_ids(const struct bcall *b)
{
    return array_text(b, b->n, call_id);
}

static char *array_qty(const struct store_batch_order *o, int n)
{
    size_t cap = (size_t)n * 24 + 3, len = 0;
    char *a = seg_malloc(cap);
    a[len++] = '{';
    for (int k = 0; k < n; k++)
        len += (size_t)snprintf(a + len, cap - len, "%s%lld", k ? "," : "", o[k].qty);
    snprintf(a + len, cap - len, "}");
    return a;
}

static void on_batch(void *arg, int rc, PGresult *const *res, int n)
{
    struct bcall *b = arg;
    if (rc != 0 || n != (b->txn ? 2 : 1)) {
        answer(b, -1);
        return;
    }
    const PGresult *r = res[0];
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        /* row with no hold: the row is locked by another holder (NOWAIT), nothing
         * was written; anything else is the store's failure */
        if (!b->txn && pgs_code_of_error(r) == PGS_BUSY)
            answer_all(b, STORE_FENCED);
        else
            answer(b, -1);
        return;
    }
    /* a COMMIT of a transaction the server had failed says ROLLBACK: nothing sold */
    if (PQntuples(r) != b->n || (b->txn && strcmp(PQcmdStatus(res[1]), "COMMIT") != 0)) {
        answer(b, -1);
        return;
    }
    if (pgb_cell(r, 0, 3) == 0) {
        answer_all(b, STORE_MISSING);
        return;
    }
    if (strcmp(PQgetvalue(r, 0, 4), "t") != 0 || pgb_cell(r, 0, 6) != 1) {
        answer_all(b, STORE_FENCED);
        return;
    }
    if (strcmp(PQgetvalue(r, 0, 5), "t") != 0) {
        answer_all(b, STORE_STALE); /* (a lease of ours given back all the same) */
        return;
    }
    bool reread = false;
    for (int k = 0; k < b->n; k++) {
        struct store_reply *x = &b->r[k];
        x->value = pgb_cell(r, k, 1);
        if (strcmp(PQgetvalue(r, k, 0), "t") == 0) {
            x->code = STORE_OK;
        } else if (!PQgetisnull(r, k, 2)) {
            x->code = STORE_EXISTS; /* recorded before, or sold earlier in the batch */
            x->record = seg_strdup(PQgetvalue(r, k, 2));
        } else if (strcmp(PQgetvalue(r, k, 7), "t") == 0) {
            x->code = STORE_EXISTS; /* recorded by another transaction meanwhile */
            reread = true;
        } else {
            x->code = STORE_SHORT; /* more than the orders before it left */
        }
    }
    if (reread) {
        char *ids = array_ids(b);
        const char *p[] = {ids};
        const struct pgc_stmt q = {
            "SELECT order_id, record FROM orders WHERE order_id = ANY($1::text[])", 1, p};
        pgc_call(b->s->plain, 0, 0, &q, 1, on_records, b);
        free(ids);
        return;
    }
    answer(b, 0);
}

bool pgb_deduct_batch(store *st, const char *sku, long long epoch, int i,
                      const char *token, long long fence, int n,
                      const struct store_batch_order *o, store_batch_fn fn, void *arg)
{
    if (fence != STORE_NO_FENCE)
        return false; /* a lock service's holds sell one order each (the engine sends
                         them no batch): this statement checks no fence */
    struct pg_store *s = (struct pg_store *)st;
    struct bcall *b = seg_calloc(1, sizeof *b);
    b->fn = fn;
    b->arg = arg;
    b->s = s;
    b->n = n;
    b->r = seg_calloc((size_t)n, sizeof *b->r);
    b->id = seg_calloc((size_t)n, sizeof *b->id);
    for (int k = 0; k < n; k++)
        b->id[k] = seg_strdup(o[k].id);
    const char *sql = sql_plain;
    pgc_conn *c = s->plain;
    unsigned long long txn = 0;
    char version[24] = "-1";
    if (token[0] != '\0') {
        enum scheme sc = pgb_scheme_of(s, sku);
        struct held *h = pgb_held_find(s, token, true);
        if (sc == SCHEME_LEASE) {
            sql = sql_lease;
        } else if (sc == SCHEME_ROW && h != NULL && h->scheme == SCHEME_ROW) {
            c = h->c; /* in the holder's transaction; COMMIT ends it */
            txn = h->txn;
            b->txn = true;
        } else if (sc == SCHEME_ROW) {
            sql = sql_row_now;
        } else if (h != NULL && h->scheme == SCHEME_OPT) {
            sql = sql_version;
            snprintf(version, sizeof version, "%lld", h->version);
        }
        free(h);
    }
    char seg[16], ep[24];
    snprintf(seg, sizeof seg, "%d", i);
    snprintf(ep, sizeof ep, "%lld", epoch);
    char *ids = array_text(o, n, order_id), *recs = array_text(o, n, order_record);
    char *qtys = array_qty(o, n);
    const char *p[] = {sku, seg, token, ep, ids, qtys, recs, version};
    const struct pgc_stmt q[] = {{sql, 8, p}, {"COMMIT", 0, NULL}};
    pgc_call(c, txn, PGC_PREPARE | (b->txn ? PGC_END : 0), q, b->txn ? 2 : 1, on_batch,
             b);
    free(ids);
    free(recs);
    free(qtys);
    return true;
}
