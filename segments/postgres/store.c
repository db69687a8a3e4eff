/* store.c -- SKUs, reads and the four deduction schemes as SQL on a pgc connection. */
#include "segments/postgres/store.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

/* What a call's answer is decoded by, and for whom. */
struct op {
    pgs_fn fn;
    void *arg;
    pgc_conn *c;
    unsigned long long txn;
    int seg;
    long long qty;
    long long version;
};

static struct op *op_new(pgc_conn *c, pgs_fn fn, void *arg)
{
    struct op *o = seg_calloc(1, sizeof *o);
    o->c = c;
    o->fn = fn;
    o->arg = arg;
    return o;
}

static void reply(struct op *o, int rc, struct pgs_res *r)
{
    if (o->fn != NULL)
        o->fn(o->arg, rc, rc == 0 ? r : NULL);
    free(o);
}

const char *pgs_code_name(int code)
{
    static const char *const names[] = {"OK",     "SHORT",  "BUSY", "CONFLICT",
                                        "FENCED", "EXISTS", "NOSKU"};
    return code >= 0 && code <= PGS_NOSKU ? names[code] : "?";
}

int pgs_code_of_error(const PGresult *res)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    if (state == NULL)
        return -1;
    if (strcmp(state, "23505") == 0) /* unique_violation: the order id */
        return PGS_EXISTS;
    if (strcmp(state, "23514") == 0) /* check_violation: stock >= 0 */
        return PGS_SHORT;
    if (strcmp(state, "55P03") == 0) /* lock_not_available: FOR UPDATE NOWAIT */
        return PGS_BUSY;
    return -1;
}

/* The first error among a call's results decoded (0 when none failed). */
static int first_error(PGresult *const *res, int n, int *code)
{
    for (int i = 0; i < n; i++) {
        ExecStatusType s = PQresultStatus(res[i]);
        if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK)
            continue;
        *code = pgs_code_of_error(res[i]);
        return -1;
    }
    return 0;
}

static long long cell(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? -1 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

static bool is_null(const PGresult *r, int col)
{
    return PQgetisnull(r, 0, col);
}

/* Decode a one-statement call: rc -1 unless it answered rows (or a known error). */
static int one_result(int rc, PGresult *const *res, int n, struct pgs_res *r,
                      const PGresult **out)
{
    if (rc != 0 || n < 1)
        return -1;
    int code = 0;
    if (first_error(res, n, &code) != 0) {
        if (code < 0)
            return -1;
        r->code = code;
        *out = NULL;
        return 0;
    }
    *out = res[0];
    return 0;
}

/* ---- SKUs and reads ----------------------------------------------------------- */

static void on_put(void *arg, int rc, PGresult *const *res, int n)
{
    struct op *o = arg;
    struct pgs_res r = {0};
    if (rc == 0) {
        int code = 0;
        if (first_error(res, n, &code) != 0 ||
            strcmp(PQcmdStatus(res[n - 1]), "COMMIT") != 0)
            rc = -1;
        else
            r.version = cell(res[0], 0, 0); /* the epoch */
    }
    reply(o, rc, &r);
}

void pgs_sku_put(pgc_conn *c, const char *sku, long long initial, int segments,
                 const char *mode, const char *lock, int hold_ms, pgs_fn fn, void *arg)
{
    char ini[24], segs[16], hold[16];
    snprintf(ini, sizeof ini, "%lld", initial);
    snprintf(segs, sizeof segs, "%d", segments);
    snprintf(hold, sizeof hold, "%d", hold_ms);
    const char *up[] = {sku, segs, ini, mode, lock, hold};
    const char *one[] = {sku};
    const char *split[] = {sku, ini, segs};
    const struct pgc_stmt st[] = {
        {"INSERT INTO skus (sku, segments, initial, mode, lock, hold_ms)"
         " VALUES ($1, $2::int, $3::bigint, $4, $5, $6::int)"
         " ON CONFLICT (sku) DO UPDATE SET segments = excluded.segments,"
         " initial = excluded.initial, mode = excluded.mode, lock = excluded.lock,"
         " hold_ms = excluded.hold_ms, epoch = skus.epoch + 1 RETURNING epoch",
         6, up},
        {"DELETE FROM segments WHERE sku = $1", 1, one},
        {"DELETE FROM orders WHERE sku = $1", 1, one},
        {"INSERT INTO segments (sku, seg, stock) SELECT $1, g,"
         " $2::bigint / $3::int + CASE WHEN g < $2::bigint % $3::int THEN 1 ELSE 0 END"
         " FROM generate_series(0, $3::int - 1) g",
         3, split},
        {"COMMIT", 0, NULL},
    };
    pgc_call(c, 0, PGC_BEGIN | PGC_END, st, 5, on_put, op_new(c, fn, arg));
}

struct stocks_op {
    pgs_stocks_fn fn;
    void *arg;
};

static void on_stocks(void *arg, int rc, PGresult *const *res, int n)
{
    struct stocks_op *o = arg;
    if (rc != 0 || n != 1 || PQresultStatus(res[0]) != PGRES_TUPLES_OK) {
        o->fn(o->arg, -1, 0, NULL);
        free(o);
        return;
    }
    int rows = PQntuples(res[0]);
    long long *s = seg_calloc((size_t)rows + 1, sizeof *s);
    for (int i = 0; i < rows; i++)
        s[i] = cell(res[0], i, 0);
    o->fn(o->arg, 0, rows, s);
    free(s);
    free(o);
}

void pgs_stocks_read(pgc_conn *c, const char *sku, pgs_stocks_fn fn, void *arg)
{
    struct stocks_op *o = seg_calloc(1, sizeof *o);
    o->fn = fn;
    o->arg = arg;
    const char *p[] = {sku};
    const struct pgc_stmt st = {"SELECT stock FROM segments WHERE sku = $1 ORDER BY seg",
                                1, p};
    pgc_call(c, 0, 0, &st, 1, on_stocks, o);
}

struct order_op {
    pgs_order_fn fn;
    void *arg;
};

static void on_order(void *arg, int rc, PGresult *const *res, int n)
{
    struct order_op *o = arg;
    if (rc != 0 || n != 1 || PQresultStatus(res[0]) != PGRES_TUPLES_OK) {
        o->fn(o->arg, -1, NULL);
    } else if (PQntuples(res[0]) == 0) {
        o->fn(o->arg, 0, NULL);
    } else {
        struct pgs_order ord = {
            .id = PQgetvalue(res[0], 0, 0),
            .sku = PQgetvalue(res[0], 0, 1),
            .seg = (int)cell(res[0], 0, 2),
            .qty = cell(res[0], 0, 3),
            .record = PQgetvalue(res[0], 0, 4),
        };
        o->fn(o->arg, 0, &ord);
    }
    free(o);
}

void pgs_order_read(pgc_conn *c, const char *id, pgs_order_fn fn, void *arg)
{
    struct order_op *o = seg_calloc(1, sizeof *o);
    o->fn = fn;
    o->arg = arg;
    const char *p[] = {id};
    const struct pgc_stmt st = {
        "SELECT order_id, sku, seg, qty, record FROM orders WHERE order_id = $1", 1, p};
    pgc_call(c, 0, 0, &st, 1, on_order, o);
}

/* ---- row ------------------------------------------------------------------------ */

static void on_row_take(void *arg, int rc, PGresult *const *res, int n)
{
    struct op *o = arg;
    struct pgs_res r = {.seg = o->seg, .txn = o->txn};
    const PGresult *t = NULL;
    if (one_result(rc, res, n, &r, &t) != 0) {
        reply(o, -1, &r);
        return;
    }
    /* An error (BUSY) has ended the transaction already (conn.h). */
    if (t == NULL)
        r.txn = 0;
    if (t != NULL) {
        if (PQntuples(t) == 0) {
            r.code = o->seg < 0 ? PGS_SHORT : PGS_NOSKU;
        } else {
            r.seg = (int)cell(t, 0, 0);
            r.stock = cell(t, 0, 1);
            r.code = r.stock >= o->qty ? PGS_OK : PGS_SHORT;
        }
        if (r.code != PGS_OK) {
            pgs_row_release(o->c, o->txn, NULL, NULL);
            r.txn = 0;
        }
    }
    reply(o, 0, &r);
}

void pgs_row_take(pgc_conn *c, const char *sku, int seg, long long qty, pgs_fn fn,
                  void *arg)
{
    struct op *o = op_new(c, fn, arg);
    o->seg = seg;
    o->qty = qty;
    char a[24];
    struct pgc_stmt st;
    if (seg >= 0) {
        snprintf(a, sizeof a, "%d", seg);
        const char *p[] = {sku, a};
        st = (struct pgc_stmt){"SELECT seg, stock FROM segments WHERE sku = $1"
                               " AND seg = $2::int FOR UPDATE NOWAIT",
                               2, p};
        o->txn = pgc_call(c, 0, PGC_BEGIN | PGC_PREPARE, &st, 1, on_row_take, o);
    } else {
        snprintf(a, sizeof a, "%lld", qty);
        const char *p[] = {sku, a};
        st = (struct pgc_stmt){"SELECT seg, stock FROM segments WHERE sku = $1"
                               " AND stock >= $2::bigint ORDER BY seg LIMIT 1"
                               " FOR UPDATE SKIP LOCKED",
                               2, p};
        o->txn = pgc_call(c, 0, PGC_BEGIN | PGC_PREPARE, &st, 1, on_row_take, o);
    }
}

/* o->txn: the transaction when the call keeps it (pgs_row_deduct_keep), else 0. */
static void on_row_deduct(void *arg, int rc, PGresult *const *res, int n)
{
    struct op *o = arg;
    struct pgs_res r = {.seg = o->seg};
    if (rc != 0 || n != (o->txn != 0 ? 5 : 3)) {
        reply(o, -1, &r);
        return;
    }
    int code = 0;
    if (first_error(res, 3, &code) != 0) { /* the sale's statements */
        if (code < 0 || code == PGS_BUSY) {
            reply(o, -1, &r);
            return;
        }
        r.code = code;
        reply(o, 0, &r);
        return;
    }
    /* A COMMIT of a transaction the server had already failed says ROLLBACK. */
    if (strcmp(PQcmdStatus(res[2]), "COMMIT") != 0 || PQntuples(res[0]) != 1) {
        reply(o, -1, &r);
        return;
    }
    r.code = PGS_OK;
    r.stock = cell(res[0], 0, 0);
    /* kept: the row locked again in the next transaction (an error there, NOWAIT
     * busy, has ended it: the sale stands, the lock is lost) */
    if (o->txn != 0 && PQresultStatus(res[4]) == PGRES_TUPLES_OK &&
        PQntuples(res[4]) == 1)
        r.txn = o->txn;
    reply(o, 0, &r);
}

/* The row deduction's statements: the sale, COMMIT, and (keep) the next transaction
 * with the row locked again. */
static void row_deduct(pgc_conn *c, unsigned long long txn, bool keep, const char *sku,
                       int seg, const char *id, long long qty, const char *record,
                       pgs_fn fn, void *arg)
{
    struct op *o = op_new(c, fn, arg);
    o->seg = seg;
    o->txn = keep ? txn : 0;
    char s[16], q[24];
    snprintf(s, sizeof s, "%d", seg);
    snprintf(q, sizeof q, "%lld", qty);
    const char *up[] = {sku, s, q};
    const char *ins[] = {id, sku, s, q, record};
    const char *lk[] = {sku, s};
    const struct pgc_stmt st[] = {
        {"UPDATE segments SET stock = stock - $3::bigint WHERE sku = $1 AND seg = $2::int"
         " RETURNING stock",
         3, up},
        {"INSERT INTO orders (order_id, sku, seg, qty, record)"
         " VALUES ($1, $2, $3::int, $4::bigint, $5)",
         5, ins},
        {"COMMIT", 0, NULL},
        {"BEGIN", 0, NULL},
        {"SELECT seg FROM segments WHERE sku = $1 AND seg = $2::int FOR UPDATE NOWAIT", 2,
         lk},
    };
    pgc_call(c, txn, PGC_PREPARE | (keep ? 0 : PGC_END), st, keep ? 5 : 3, on_row_deduct,
             o);
}

void pgs_row_deduct_keep(pgc_conn *c, unsigned long long txn, const char *sku, int seg,
                         const char *id, long long qty, const char *record, pgs_fn fn,
                         void *arg)
{
    row_deduct(c, txn, true, sku, seg, id, qty, record, fn, arg);
}

void pgs_row_deduct(pgc_conn *c, unsigned long long txn, const char *sku, int seg,
                    const char *id, long long qty, const char *record, pgs_fn fn,
                    void *arg)
{
    row_deduct(c, txn, false, sku, seg, id, qty, record, fn, arg);
}

static void on_row_release(void *arg, int rc, PGresult *const *res, int n)
{
    (void)res;
    (void)n;
    struct pgs_res r = {.code = PGS_OK};
    reply(arg, rc, &r);
}

void pgs_row_release(pgc_conn *c, unsigned long long txn, pgs_fn fn, void *arg)
{
    static const struct pgc_stmt rb = {"ROLLBACK", 0, NULL};
    pgc_call(c, txn, PGC_END, &rb, 1, fn ? on_row_release : NULL,
             fn ? op_new(c, fn, arg) : NULL);
}

/* ---- lease ---------------------------------------------------------------------- */

/* A statement whose one row (if any) is the outcome: OK with its columns, else
 * `none` (BUSY / FENCED). */
static void on_lease(void *arg, int rc, PGresult *const *res, int n)
{
    struct op *o = arg;
    struct pgs_res r = {.seg = o->seg};
    const PGresult *t = NULL;
    if (one_result(rc, res, n, &r, &t) != 0) {
        reply(o, -1, &r);
        return;
    }
    if (t != NULL) {
        if (PQntuples(t) == 1) {
            r.code = PGS_OK;
            r.stock = cell(t, 0, 0);
            r.fence = cell(t, 0, 1);
        } else {
            r.code = (int)o->version; /* the code for "no row" */
        }
    }
    reply(o, 0, &r);
}

/* Run a lease statement on (sku $1, seg $2, token $3[, ttl_ms $4 when `timed`]): its
 * row is OK, no row answers `none`. */
static void lease_call(pgc_conn *c, const char *sql, const char *sku, int seg,
                       const char *token, bool timed, int ttl_ms, int none, pgs_fn fn,
                       void *arg)
{
    struct op *o = op_new(c, fn, arg);
    o->seg = seg;
    o->version = none;
    char s[16], t[16];
    snprintf(s, sizeof s, "%d", seg);
    snprintf(t, sizeof t, "%d", ttl_ms);
    const char *p[] = {sku, s, token, t};
    const struct pgc_stmt st = {sql, timed ? 4 : 3, p};
    pgc_call(c, 0, PGC_PREPARE, &st, 1, on_lease, o);
}

void pgs_lease_take(pgc_conn *c, const char *sku, int seg, const char *token, int ttl_ms,
                    pgs_fn fn, void *arg)
{
    lease_call(
        c,
        "UPDATE segments SET lease_token = $3,"
        " lease_until = now() + $4::int * interval '1 millisecond', fence = fence + 1"
        " WHERE sku = $1 AND seg = $2::int AND (lease_token IS NULL"
        " OR lease_until <= now() OR lease_token = $3) RETURNING stock, fence",
        sku, seg, token, true, ttl_ms, PGS_BUSY, fn, arg);
}

void pgs_lease_renew(pgc_conn *c, const char *sku, int seg, const char *token, int ttl_ms,
                     pgs_fn fn, void *arg)
{
    lease_call(
        c,
        "UPDATE segments SET lease_until = now() + $4::int * interval '1 millisecond'"
        " WHERE sku = $1 AND seg = $2::int AND lease_token = $3 AND lease_until > now()"
        " RETURNING stock, fence",
        sku, seg, token, true, ttl_ms, PGS_FENCED, fn, arg);
}

void pgs_lease_release(pgc_conn *c, const char *sku, int seg, const char *token,
                       pgs_fn fn, void *arg)
{
    lease_call(c,
               "UPDATE segments SET lease_token = NULL, lease_until = NULL"
               " WHERE sku = $1 AND seg = $2::int AND lease_token = $3"
               " RETURNING stock, fence",
               sku, seg, token, false, 0, PGS_FENCED, fn, arg);
}

/* The deductions below are one statement: a data-modifying CTE `d` (the conditional
 * UPDATE), `o` (the order row, inserted only when d changed a row), and an outer
 * SELECT of the segment as it stood (the statement's snapshot) beside d's row, to
 * tell why nothing changed. Columns: d's stock, d's second column, the segment's
 * stock, the segment's version, and whether the lease was ours. */
#define DEDUCT_SQL(update, dcol)                                                         \
    "WITH d AS (" update " RETURNING stock, " dcol "),"                                  \
    " o AS (INSERT INTO orders (order_id, sku, seg, qty, record)"                        \
    " SELECT $4::text, $1, $2::int, $5::bigint, $6::text FROM d RETURNING 1)"            \
    " SELECT d.stock, d." dcol ", s.stock, s.version,"                                   \
    " coalesce(s.lease_token = $3::text AND s.lease_until > now(), false)"               \
    " FROM segments s LEFT JOIN d ON true WHERE s.sku = $1 AND s.seg = $2::int"

enum { SCHEME_LEASE, SCHEME_OPT, SCHEME_ATOMIC };

static void on_deduct(void *arg, int rc, PGresult *const *res, int n)
{
    struct op *o = arg;
    struct pgs_res r = {.seg = o->seg};
    const PGresult *t = NULL;
    if (one_result(rc, res, n, &r, &t) != 0) {
        reply(o, -1, &r);
        return;
    }
    if (t == NULL) { /* EXISTS (or SHORT from the CHECK) */
        reply(o, 0, &r);
        return;
    }
    if (PQntuples(t) != 1) {
        r.code = PGS_NOSKU;
        reply(o, 0, &r);
        return;
    }
    int scheme = (int)o->txn;
    if (!is_null(t, 0)) {
        r.code = PGS_OK;
        r.stock = cell(t, 0, 0);
        if (scheme == SCHEME_LEASE)
            r.fence = cell(t, 0, 1);
        else
            r.version = cell(t, 0, 1);
        reply(o, 0, &r);
        return;
    }
    r.stock = cell(t, 0, 2);
    r.version = cell(t, 0, 3);
    bool ours = strcmp(PQgetvalue(t, 0, 4), "t") == 0;
    if (scheme == SCHEME_LEASE)
        r.code = ours ? PGS_SHORT : PGS_FENCED;
    else if (scheme == SCHEME_OPT)
        /* As of the snapshot unchanged and enough: the row moved under the UPDATE. */
        r.code = r.version == o->version && r.stock < o->qty ? PGS_SHORT : PGS_CONFLICT;
    else
        r.code = PGS_SHORT;
    reply(o, 0, &r);
}

static void deduct(pgc_conn *c, int scheme, const char *sql, const char *sku, int seg,
                   const char *third, long long version, const char *id, long long qty,
                   const char *record, const char *keep, pgs_fn fn, void *arg)
{
    struct op *o = op_new(c, fn, arg);
    o->seg = seg;
    o->qty = qty;
    o->version = version;
    o->txn = (unsigned long long)scheme;
    char s[16], q[24];
    snprintf(s, sizeof s, "%d", seg);
    snprintf(q, sizeof q, "%lld", qty);
    const char *p[] = {sku, s, third, id, q, record, keep};
    const struct pgc_stmt st = {sql, keep != NULL ? 7 : 6, p};
    pgc_call(c, 0, PGC_PREPARE, &st, 1, on_deduct, o);
}

void pgs_lease_deduct(pgc_conn *c, const char *sku, int seg, const char *token,
                      const char *id, long long qty, const char *record, int keep,
                      pgs_fn fn, void *arg)
{
    static const char sql[] = DEDUCT_SQL(
        "UPDATE segments SET stock = stock - $5::bigint,"
        " lease_token = CASE WHEN $7::boolean THEN lease_token END,"
        " lease_until = CASE WHEN $7::boolean THEN lease_until END"
        " WHERE sku = $1 AND seg = $2::int AND lease_token = $3 AND lease_until > now()"
        " AND stock >= $5::bigint",
        "fence");
    deduct(c, SCHEME_LEASE, sql, sku, seg, token, 0, id, qty, record,
           keep ? "true" : "false", fn, arg);
}

static void on_opt_read(void *arg, int rc, PGresult *const *res, int n)
{
    struct op *o = arg;
    struct pgs_res r = {.seg = o->seg};
    if (rc != 0 || n != 1 || PQresultStatus(res[0]) != PGRES_TUPLES_OK) {
        reply(o, -1, &r);
        return;
    }
    if (PQntuples(res[0]) == 1) {
        r.code = PGS_OK;
        r.stock = cell(res[0], 0, 0);
        r.version = cell(res[0], 0, 1);
    } else {
        r.code = PGS_NOSKU;
    }
    reply(o, 0, &r);
}

void pgs_opt_read(pgc_conn *c, const char *sku, int seg, pgs_fn fn, void *arg)
{
    struct op *o = op_new(c, fn, arg);
    o->seg = seg;
    char s[16];
    snprintf(s, sizeof s, "%d", seg);
    const char *p[] = {sku, s};
    const struct pgc_stmt st = {
        "SELECT stock, version FROM segments WHERE sku = $1 AND seg = $2::int", 2, p};
    pgc_call(c, 0, PGC_PREPARE, &st, 1, on_opt_read, o);
}

void pgs_opt_deduct(pgc_conn *c, const char *sku, int seg, long long version,
                    const char *id, long long qty, const char *record, pgs_fn fn,
                    void *arg)
{
    static const char sql[] =
        DEDUCT_SQL("UPDATE segments SET stock = stock - $5::bigint, version = version + 1"
                   " WHERE sku = $1 AND seg = $2::int AND version = $3::bigint"
                   " AND stock >= $5::bigint",
                   "version");
    char v[24];
    snprintf(v, sizeof v, "%lld", version);
    deduct(c, SCHEME_OPT, sql, sku, seg, v, version, id, qty, record, NULL, fn, arg);
}

void pgs_row_deduct_now(pgc_conn *c, const char *sku, int seg, const char *id,
                        long long qty, const char *record, pgs_fn fn, void *arg)
{
    static const char sql[] =
        DEDUCT_SQL("UPDATE segments SET stock = stock - $5::bigint, version = version + 1"
                   " WHERE sku = $1 AND seg = $2::int AND stock >= $5::bigint"
                   " AND (SELECT count(*) FROM (SELECT 1 FROM segments WHERE sku = $1"
                   " AND seg = $2::int FOR UPDATE NOWAIT) l) = 1",
                   "version");
    deduct(c, SCHEME_ATOMIC, sql, sku, seg, "", 0, id, qty, record, NULL, fn, arg);
}

void pgs_atomic_deduct(pgc_conn *c, const char *sku, int seg, const char *id,
                       long long qty, const char *record, pgs_fn fn, void *arg)
{
    static const char sql[] =
        DEDUCT_SQL("UPDATE segments SET stock = stock - $5::bigint"
                   " WHERE sku = $1 AND seg = $2::int AND stock >= $5::bigint",
                   "version");
    deduct(c, SCHEME_ATOMIC, sql, sku, seg, "", 0, id, qty, record, NULL, fn, arg);
}
