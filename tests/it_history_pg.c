/* it_history_pg.c -- the history checker of it_history.c on the PostgreSQL store: 3
 * instances with `--store postgres://...` on one database, a SKU per scheme, while
 * backends are terminated and PostgreSQL is restarted once; the end state is also read
 * from the tables themselves.
 *
 * One checker. This file defines HISTORY_PG and includes tests/it_history.c, so the
 * clients, the log and every check are that file's, compiled once more; what is this
 * file's own is the fixture (a PostgreSQL from harness_pg.h, max_connections raised
 * for 3 instances, and the instances on it), the chaos and check_pg. What differs
 * under HISTORY_PG there: the SKUs (p-row, p-lease, p-opt: `"mode": "lock"` with that
 * `"lock"`; p-atomic: `"mode": "atomic"`; each reset keeps the scheme and may flip the
 * mode, and picks 1, 4 or 20 segments), and each reset sends its "lock".
 *
 * What is sent: every kind the PostgreSQL store has (orders with ids, sent to 2-3
 * instances at once and retried; cancels; restocks with request ids; rebalances;
 * resets; delete + create; reservations held 1-2 s, confirmed and released), as
 * it_history does on Redis.
 *
 * The chaos, on the test's main thread: every 200-500 ms pg_terminate_backend of one
 * random client backend (an instance's loop, pool or worker connection, maybe inside a
 * transaction), and once, at a random point of the run's middle, a fast restart of
 * PostgreSQL (SIGINT: the server rolls back what is open and stops; every connection
 * is cut). The services must reconnect by themselves. (The summary's "CLIENT KILLs"
 * count the backends terminated, its "Redis restart(s)" the PostgreSQL restart.)
 *
 * check_pg, after checks 1-5 (which read the end state through the admin API): from
 * the tables, each SKU's row, segment rows and order rows agree with what the admin
 * API answered; no segment below 0; sum(stock) + the held holds' qty (of the SKU's
 * epoch) + the live order rows' qty == initial, the held qty per segment (a hold's
 * parts each in their own) being the API's segment_reserved;
 * each live order row is a record of an order id of this history with its sku and
 * qty, its first segment and its parts summing to qty; the live rows' parts per
 * segment equal segment_sold; every order answered 2xx surely after the last reset and
 * never cancelled has its live row (one per sale: order_id is the key); a deleted SKU
 * has no rows left, and no order row outlives its SKU.
 *
 * The instances run with `--ledger` to the store's own database (HISTORY_LEDGER=0: not),
 * and check 6 audits the ledger as on Redis: with backends terminated (the sinks' too,
 * mid-batch) and the restart, each SKU reconciles to drift 0 and its ledger rows of
 * the epoch are its order records.
 *
 * `make soak PG=1` runs it round after round (tests/soak.sh --pg).
 */
#include <libpq-fe.h>

#include "tests/harness_pg.h"

#define HISTORY_PG 1
#define HISTORY_NAME "it_history_pg"
#define DEFAULT_OPS OPS_ALL
#define RETRY_UNKNOWN false
#define DEADLINE_EXTRA 90 /* PostgreSQL's start and restart, the settling, the checks */

#include "tests/it_history.c"

#define PG_MAX_CONNECTIONS 150 /* 3 instances: loops, pools, workers */

/* The instances' arguments: it_history's (lock waits and TTLs differ) with fewer
 * event loops, each with its own connections, and the store. */
static h_svc *start_instance(const h_pg *pg, bool ledger, int i)
{
    const char *args[16];
    int n = 0;
    for (; svc_args[i][n] != NULL; n++)
        args[n] = strcmp(svc_args[i][n], "16") == 0 ? "2" : svc_args[i][n];
    args[n++] = "--store";
    args[n++] = h_pg_conninfo(pg);
    if (ledger) { /* the ledger in the store's database (check 6) */
        args[n++] = "--ledger";
        args[n++] = h_pg_conninfo(pg);
    }
    args[n] = NULL;
    struct h_svc_opts o = {.args = args, .no_redis_flag = true};
    return h_svc_start(NULL, &o);
}

static int group_setup(void **state)
{
    h_deadline(120);
    struct fixture *f = xmalloc(sizeof *f);
    memset(f, 0, sizeof *f);
    *state = f;
    if ((f->pg = h_pg_start()) == NULL)
        return -1;
    h_pg_set_max_connections(f->pg, PG_MAX_CONNECTIONS);
    if (h_pg_restart(f->pg) != 0)
        return -1;
    const char *ledger = getenv("HISTORY_LEDGER");
    f->ledger = ledger == NULL || strcmp(ledger, "0") != 0 ? f->pg : NULL;
    for (int i = 0; i < N_INST; i++)
        if ((f->svc[i] = start_instance(f->pg, f->ledger != NULL, i)) == NULL)
            return -1;
    return 0;
}

/* ---- chaos ------------------------------------------------------------------------- */

/* Terminate one random client backend but ours: how many were (0 or 1), -1 when the
 * server did not answer. */
static void chaos_terminate(struct run *run)
{
    long long sent = run_now(run);
    long long n = h_pg_scalar(
        run->pg, "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM"
                 " pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type ="
                 " 'client backend' ORDER BY random() LIMIT 1) t");
    chaos_log(run, K_KILL, sent, (int)n);
}

static void chaos_restart(struct run *run)
{
    long long sent = run_now(run);
    int rc = h_pg_restart(run->pg);
    run->restart_failed = rc != 0;
    chaos_log(run, K_RESTART, sent, rc);
}

/* A backend terminated every 200-500 ms until the end; PostgreSQL restarted once. */
static void chaos_main(struct run *run)
{
    uint64_t rng = rng_seed(run->seed, N_CLIENTS);
    bool restarted = false;
    for (;;) {
        long long wake = run_now(run) + rng_range(&rng, 200, 500) * 1000LL;
        if (wake >= run->end)
            break;
        if (wake > run_now(run))
            sleep_us(wake - run_now(run));
        if (!restarted && run_now(run) >= run->restart_at) {
            chaos_restart(run);
            restarted = true;
        } else {
            chaos_terminate(run);
        }
    }
}

/* ---- check_pg: the end state in the tables ----------------------------------------- */

static PGresult *pg_rows(struct checker *k, PGconn *c, const char *sql, const char *sku)
{
    const char *p[] = {sku};
    PGresult *r = PQexecParams(c, sql, sku != NULL ? 1 : 0, NULL, p, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        report(k, "pg-read", NULL, 0, "%s: %s", sql, PQerrorMessage(c));
        PQclear(r);
        return NULL;
    }
    return r;
}

static long long cell(const PGresult *r, int row, int col)
{
    return strtoll(PQgetvalue(r, row, col), NULL, 10);
}

/* What SKU s's order rows add up to. */
struct row_sums {
    long long qty, count, seg[MAX_SEGS];
};

/* One order row of SKU s: a record of an order of this history; into `sums` when
 * live. */
static void check_order_row(struct checker *k, int s, const PGresult *r, int row,
                            struct row_sums *sums)
{
    const char *id = PQgetvalue(r, row, 0), *text = PQgetvalue(r, row, 3);
    int seg = (int)cell(r, row, 1);
    long long qty = cell(r, row, 2);
    struct group *g = group_of(k, id);
    struct order_view v;
    char why[200];
    if (view_parse(text, &v, why, sizeof why) != 0) {
        report(k, "pg-order-row", NULL, 0, "%s: order row %s: record %.300s: %s",
               specs[s].name, id, text, why);
        return;
    }
    if (g == NULL || g->sku != s || g->qty != qty || strcmp(v.id, id) != 0 ||
        strcmp(v.sku, specs[s].name) != 0 || v.qty != qty || v.segment != seg) {
        report(k, "pg-order-row", g != NULL ? g->op : NULL, g != NULL ? g->n : 0,
               "%s: order row (%s, seg %d, qty %lld) %.300s is not a record of an order "
               "of this history",
               specs[s].name, id, seg, qty, text);
        return;
    }
    if (strcmp(v.status, "confirmed") != 0)
        return;
    sums->qty += qty;
    sums->count++;
    for (int p = 0; p < v.n; p++)
        if (v.seg[p] < k->sku[s].segments)
            sums->seg[v.seg[p]] += v.part[p];
        else
            report(k, "pg-order-row", g->op, g->n,
                   "%s: order row %s names segment %d of %d", specs[s].name, id, v.seg[p],
                   k->sku[s].segments);
}

static int by_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every order of SKU s answered 2xx surely after its last reset, with no cancel of
 * its id sent, has a live row among live[0..n-1] (sorted). */
static void check_sales_have_rows(struct checker *k, int s, const char **live, size_t n)
{
    for (size_t i = 0; i < k->ng; i++) {
        struct group *g = &k->g[i];
        bool sale = false, cancelled = false;
        for (int o = 0; o < g->n; o++) {
            const struct entry *e = g->op[o];
            cancelled |= e->q.kind == K_CANCEL;
            sale |= e->q.kind == K_ORDER && is_2xx(e) && surely_after_reset(k, e);
        }
        if (g->sku != s || !sale || cancelled)
            continue;
        if (bsearch(&g->id, live, n, sizeof *live, by_str) == NULL)
            report(k, "pg-sale-row", g->op, g->n, "%s: no live order row for %s",
                   specs[s].name, g->id);
    }
}

/* SKU s in the tables against what the admin API answered (k->sku[s]). */
static void check_pg_sku(struct checker *k, PGconn *c, int s)
{
    const struct sku_state *st = &k->sku[s];
    const char *name = specs[s].name;
    PGresult *sku =
        pg_rows(k, c, "SELECT segments, initial FROM skus WHERE sku = $1", name);
    PGresult *segs = pg_rows(
        k, c, "SELECT seg, stock FROM segments WHERE sku = $1 ORDER BY seg", name);
    PGresult *ord = pg_rows(
        k, c, "SELECT order_id, seg, qty, record FROM orders WHERE sku = $1", name);
    PGresult *held = pg_rows(k, c,
                             "SELECT p.seg, sum(p.q) FROM holds h JOIN skus s ON"
                             " s.sku = h.sku AND s.epoch = h.epoch,"
                             " unnest(coalesce(h.part_segs, ARRAY[h.seg]),"
                             " coalesce(h.part_qtys, ARRAY[h.qty])) AS p(seg, q)"
                             " WHERE h.sku = $1 AND h.state = 'held' GROUP BY p.seg",
                             name);
    if (sku == NULL || segs == NULL || ord == NULL || held == NULL)
        goto out;
    if (st->status != 200) {
        if (PQntuples(sku) + PQntuples(segs) + PQntuples(ord) != 0)
            report(k, "pg-sku", NULL, 0,
                   "%s: the admin API answered %d, the tables hold %d sku, %d segment "
                   "and %d order rows",
                   name, st->status, PQntuples(sku), PQntuples(segs), PQntuples(ord));
        goto out;
    }
    if (PQntuples(sku) != 1 || cell(sku, 0, 0) != st->segments ||
        cell(sku, 0, 1) != st->initial || PQntuples(segs) != st->segments) {
        report(
            k, "pg-sku", NULL, 0,
            "%s: %d sku rows (segments %s, initial %s), %d segment rows; the admin API "
            "says %d segments, initial %lld",
            name, PQntuples(sku), PQntuples(sku) ? PQgetvalue(sku, 0, 0) : "-",
            PQntuples(sku) ? PQgetvalue(sku, 0, 1) : "-", PQntuples(segs), st->segments,
            st->initial);
        goto out;
    }
    long long stock = 0;
    for (int i = 0; i < st->segments; i++) {
        long long v = cell(segs, i, 1);
        if (cell(segs, i, 0) != i || v < 0 || v != st->stock[i])
            report(k, "pg-segment", NULL, 0,
                   "%s: segment row %d is (seg %s, stock %lld); the admin API says stock "
                   "%lld",
                   name, i, PQgetvalue(segs, i, 0), v, st->stock[i]);
        stock += v;
    }
    struct row_sums sums;
    memset(&sums, 0, sizeof sums);
    const char **live = xmalloc(((size_t)PQntuples(ord) + 1) * sizeof *live);
    size_t nlive = 0;
    for (int row = 0; row < PQntuples(ord); row++) {
        long long before = sums.count;
        check_order_row(k, s, ord, row, &sums);
        if (sums.count > before)
            live[nlive++] = PQgetvalue(ord, row, 0);
    }
    long long reserved = 0, seg_held[MAX_SEGS] = {0};
    for (int row = 0; row < PQntuples(held); row++) {
        int i = (int)cell(held, row, 0);
        if (i >= 0 && i < st->segments && i < MAX_SEGS)
            seg_held[i] = cell(held, row, 1);
        reserved += cell(held, row, 1);
    }
    for (int i = 0; i < st->segments && i < MAX_SEGS; i++)
        if (seg_held[i] != st->seg_reserved[i])
            report(k, "pg-segment-held", NULL, 0,
                   "%s segment %d: the held rows hold %lld units; segment_reserved says "
                   "%lld",
                   name, i, seg_held[i], st->seg_reserved[i]);
    if (stock + reserved + sums.qty != st->initial || sums.qty != st->sold ||
        sums.count != st->orders || reserved != st->reserved)
        report(k, "pg-conserved", NULL, 0,
               "%s: in the tables stock %lld + held %lld + live order rows' qty %lld "
               "(%lld rows) vs initial %lld; the admin API says sold %lld, orders %lld, "
               "reserved %lld",
               name, stock, reserved, sums.qty, sums.count, st->initial, st->sold,
               st->orders, st->reserved);
    for (int i = 0; i < st->segments; i++)
        if (sums.seg[i] != st->seg_sold[i])
            report(k, "pg-segment-sold", NULL, 0,
                   "%s segment %d: the live order rows' parts take %lld units from it; "
                   "segment_sold says %lld",
                   name, i, sums.seg[i], st->seg_sold[i]);
    qsort(live, nlive, sizeof *live, by_str);
    check_sales_have_rows(k, s, live, nlive);
    free(live);
out:
    PQclear(sku);
    PQclear(segs);
    PQclear(ord);
    PQclear(held);
}

/* Holds last 1-2 s and the sweepers look every 250 ms: none is left held 10 s on
 * (else a violation: the sweep does not return them). */
static void pg_holds_settle(struct checker *k)
{
    long long left = -1;
    for (int i = 0; i < 100 && left != 0; i++) {
        left = h_pg_scalar(k->run->pg, "SELECT count(*) FROM holds WHERE state = 'held'");
        if (left != 0)
            h_sleep_ms(100);
    }
    if (left != 0)
        report(k, "pg-holds-left", NULL, 0,
               "%lld holds still held 10 s after the run (the sweep returns none)", left);
}

static void check_pg(struct checker *k)
{
    PGconn *c = PQconnectdb(h_pg_conninfo(k->run->pg));
    if (PQstatus(c) != CONNECTION_OK) {
        report(k, "pg-read", NULL, 0, "cannot connect: %s", PQerrorMessage(c));
        PQfinish(c);
        return;
    }
    for (int s = 0; s < N_SKUS; s++)
        check_pg_sku(k, c, s);
    PGresult *r = pg_rows(k, c,
                          "SELECT sku, count(*) FROM orders WHERE sku NOT IN"
                          " (SELECT sku FROM skus) GROUP BY sku",
                          NULL);
    for (int i = 0; r != NULL && i < PQntuples(r); i++)
        report(k, "pg-orphan", NULL, 0, "%s order rows of %s, a SKU not in skus",
               PQgetvalue(r, i, 1), PQgetvalue(r, i, 0));
    PQclear(r);
    PQfinish(c);
}
