/* it_pg_ops.c -- inventoryd on a real PostgreSQL 15, its operations side: the loops'
 * connection pool sized by `pg_pool` (bad values refused, the count seen in
 * pg_stat_activity, a pool of 1 still sells exactly, a `row` lock handed on without
 * being kept opens on its holder's connection: no BUSY), `pg_prepare off` (nothing
 * prepared, as the server's statement log shows) and the automatic rebalance of
 * every lock scheme (a SKU drained unevenly is spread by the order that finds it due,
 * stock conserved, nothing oversold); and /metrics' help texts store-neutral.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness.h"
#include "tests/harness_pg.h"
#include "tests/harness_sale.h"

#define TOKEN "pgtoken"

static h_pg *pg;

/* The service on the test's PostgreSQL with `threads` loops and `pool` (NULL: the
 * default) connections per loop for `row` holds. */
static h_svc *start_svc(const char *threads, const char *pool)
{
    const char *args[] = {
        "--store",   h_pg_conninfo(pg), "--admin-token",           TOKEN,
        "--threads", threads,           pool ? "--pg-pool" : NULL, pool,
        NULL};
    struct h_svc_opts o = {.args = args, .no_redis_flag = true};
    return h_svc_start(NULL, &o);
}

static int put_sku(int port, const char *sku, long long stock, int segments,
                   const char *lock, int hold_ms)
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"stock\":%lld,\"segments\":%d,\"mode\":\"lock\",\"hold_ms\":%d,"
             "\"lock\":\"%s\",\"rebalance\":true}",
             stock, segments, hold_ms, lock);
    return h_put_sku_body(port, TOKEN, sku, body);
}

/* A number from the tables about `sku`: `sql` with one %s for it. */
static long long about(const char *sql, const char *sku)
{
    char q[320];
    snprintf(q, sizeof q, sql, sku);
    return h_pg_scalar(pg, q);
}

static long long stock_left(const char *sku)
{
    return about("SELECT coalesce(sum(stock), 0) FROM segments WHERE sku = '%s'", sku);
}

static long long units_sold(const char *sku)
{
    return about("SELECT coalesce(sum(qty), 0) FROM orders WHERE sku = '%s'", sku);
}

static long long segments_at(const char *sku, long long stock)
{
    char q[200];
    snprintf(q, sizeof q,
             "SELECT count(*) FROM segments WHERE sku = '%%s' AND stock = %lld", stock);
    return about(q, sku);
}

/* 8 buyers of one unit each until sold out: exactly `initial` sold, one order row per
 * sale, no stock left, the audit clean. */
static void sell_out(int port, const char *sku, long long initial)
{
    struct h_sale s;
    assert_int_equal(h_sell_out(&port, 1, sku, 8, &s), 0);
    fprintf(stderr, "%s: %lld sold (201), %lld order units, %lld left, %lld failed\n",
            sku, s.sold, units_sold(sku), stock_left(sku), s.failed);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.sold, initial);
    assert_int_equal(units_sold(sku), initial);
    assert_int_equal(stock_left(sku), 0);
    assert_int_equal(h_audit(port, TOKEN, sku, initial, false), 0);
}

/* ---- pg_pool ------------------------------------------------------------------ */

/* Out of 1..64, or not a number: refused at start (exit 2) with a line naming it. */
static void test_pool_bad_values(void **state)
{
    (void)state;
    const char *bin = getenv("INVENTORYD") ? getenv("INVENTORYD") : "build/inventoryd";
    const char *bad[] = {"0", "65", "four", "-1"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        const char *argv[] = {bin,         "--store", h_pg_conninfo(pg),
                              "--pg-pool", bad[k],    "--check-config",
                              NULL};
        char *err = NULL;
        assert_int_equal(h_run_cmd(argv, NULL, 20000, NULL, &err), 2);
        assert_non_null(err);
        assert_non_null(strstr(err, "pg-pool"));
        assert_non_null(strstr(err, "1..64"));
        free(err);
    }
    const char *env[] = {"INVENTORY_PG_POOL=100", NULL};
    const char *argv[] = {bin, "--store", h_pg_conninfo(pg), "--check-config", NULL};
    assert_int_equal(h_run_cmd(argv, env, 20000, NULL, NULL), 2);
    const char *good[] = {
        bin, "--store", h_pg_conninfo(pg), "--pg-pool", "7", "--check-config", NULL};
    char *out = NULL;
    assert_int_equal(h_run_cmd(good, NULL, 20000, &out, NULL), 0);
    const char *line = strstr(out, "\npg_pool ");
    assert_non_null(line);
    assert_int_equal(atoi(line + strlen("\npg_pool ")), 7);
    free(out);
}

/* The loops' pool connections as pg_stat_activity shows them (application_name),
 * once `want` of them are there (within 10 s); the count seen last otherwise. */
static long long pool_sessions(long long want)
{
    const char *q = "SELECT count(*) FROM pg_stat_activity WHERE application_name ="
                    " 'inventoryd pool'";
    long long n = h_pg_scalar(pg, q);
    for (long long until = h_now_ms() + 10000; n != want && h_now_ms() < until;) {
        h_sleep_ms(50);
        n = h_pg_scalar(pg, q);
    }
    return n;
}

/* `--pg-pool 3` on 2 loops: 6 pool sessions; the default: 4 per loop. */
static void test_pool_size_configured(void **state)
{
    (void)state;
    h_svc *svc = start_svc("2", "3");
    assert_non_null(svc);
    assert_int_equal(pool_sessions(6), 6);
    assert_int_equal(h_svc_stop_clean(svc), 0);
    h_svc_free(svc);
    assert_int_equal(pool_sessions(0), 0);
    svc = start_svc("2", NULL);
    assert_non_null(svc);
    assert_int_equal(pool_sessions(8), 8);
    assert_int_equal(h_svc_stop_clean(svc), 0);
    h_svc_free(svc);
}

/* A pool of 1 per loop, `row` holds of 3 ms by 8 concurrent buyers: the holds queue
 * for the one connection and the sale is still exact. */
static void test_pool_of_one_sells_exactly(void **state)
{
    (void)state;
    h_svc *svc = start_svc("2", "1");
    assert_non_null(svc);
    int port = h_svc_port(svc);
    assert_int_equal(pool_sessions(2), 2);
    assert_int_equal(put_sku(port, "pool1", 90, 4, "row", 3), 0);
    sell_out(port, "pool1", 90);
    assert_int_equal(h_svc_stop_clean(svc), 0);
    h_svc_free(svc);
}

struct handed {
    int port;
    _Atomic long long sold, other;
};

static void handed_buyer(int idx, void *arg)
{
    (void)idx;
    struct handed *h = arg;
    for (int i = 0; i < 20; i++) {
        int st = h_order(h->port, "handed", 1, NULL, NULL);
        atomic_fetch_add(st == 201 ? &h->sold : &h->other, 1);
    }
}

/* One loop, a pool of 2 (so a row lock is never kept: kept only while 2 other
 * connections are free), 4 buyers of 20 orders on one segment, hold 20 ms: a DEDUCT
 * that ends its transaction and its chain of orders (16 at most are passed the lock,
 * handover.c) hands the segment's claim to the next order of the loop at once.
 * That order's ACQUIRE must open on the holder's connection, behind its COMMIT: on
 * the other connection its NOWAIT met the row still locked (BUSY, a backoff, the
 * segment idle meanwhile: 20 / 1 segments at hold 20 ms sold 13.6-18.4x). Every
 * ACQUIRE takes the lock. */
static void test_row_handed_on_no_busy(void **state)
{
    (void)state;
    h_svc *svc = start_svc("1", "2");
    assert_non_null(svc);
    int port = h_svc_port(svc);
    assert_int_equal(put_sku(port, "handed", 1000, 1, "row", 20), 0);
    struct handed h = {.port = port};
    assert_int_equal(h_parallel(4, handed_buyer, &h), 0);
    long long attempts = h_stat(port, TOKEN, "lock_attempts");
    long long acquired = h_stat(port, TOKEN, "lock_acquired");
    fprintf(stderr, "handed: %lld sold, %lld other, %lld lock attempts, %lld acquired\n",
            (long long)atomic_load(&h.sold), (long long)atomic_load(&h.other), attempts,
            acquired);
    assert_int_equal(atomic_load(&h.sold), 80);
    assert_int_equal(attempts - acquired, 0);
    assert_int_equal(units_sold("handed"), 80);
    assert_int_equal(h_svc_stop_clean(svc), 0);
    h_svc_free(svc);
}

/* ---- pg_prepare ----------------------------------------------------------------- */

/* Not on or off: refused at start (exit 2) with a line naming it; off is reported. */
static void test_prepare_bad_values(void **state)
{
    (void)state;
    const char *bin = getenv("INVENTORYD") ? getenv("INVENTORYD") : "build/inventoryd";
    const char *bad[] = {"maybe", "1", ""};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        const char *argv[] = {
            bin, "--store", h_pg_conninfo(pg), "--pg-prepare", bad[k], "--check-config",
            NULL};
        char *err = NULL;
        assert_int_equal(h_run_cmd(argv, NULL, 20000, NULL, &err), 2);
        assert_non_null(err);
        assert_non_null(strstr(err, "pg-prepare"));
        assert_non_null(strstr(err, "off|on"));
        free(err);
    }
    const char *env[] = {"INVENTORY_PG_PREPARE=no", NULL};
    const char *argv[] = {bin, "--store", h_pg_conninfo(pg), "--check-config", NULL};
    assert_int_equal(h_run_cmd(argv, env, 20000, NULL, NULL), 2);
    const char *envoff[] = {"INVENTORY_PG_PREPARE=off", NULL};
    char *out = NULL;
    assert_int_equal(h_run_cmd(argv, envoff, 20000, &out, NULL), 0);
    assert_non_null(out);
    const char *line = strstr(out, "\npg_prepare ");
    assert_non_null(line);
    line += strlen("\npg_prepare ");
    line += strspn(line, " ");
    assert_int_equal(strncmp(line, "off\n", 4), 0);
    free(out);
}

/* The server's log (postgres.log, beside its data directory), in bytes. */
static long long log_size(void)
{
    return h_pg_scalar(pg, "SELECT size FROM pg_stat_file('../postgres.log')");
}

/* Lines of the server's log from byte `from` on that contain `pattern` (LIKE). */
static long long log_lines(long long from, const char *pattern)
{
    char q[400];
    snprintf(q, sizeof q,
             "SELECT count(*) FROM regexp_split_to_table(pg_read_file('../postgres.log',"
             " %lld, (SELECT size FROM pg_stat_file('../postgres.log')) - %lld), E'\\n')"
             " l WHERE l LIKE '%s' AND l NOT LIKE '%%pg_read_file%%'",
             from, from, pattern);
    return h_pg_scalar(pg, q);
}

/* With every statement logged (log_statement = all: an extended-protocol statement
 * logs "execute NAME: ..."): `--pg-prepare off` sells exactly through `row` holds
 * and optimistic orders and no statement runs prepared (no "execute inv_", every one
 * "execute <unnamed>"); the default, on the same server, does prepare. */
static void test_prepare_off_sells_unprepared(void **state)
{
    (void)state;
    assert_int_equal(h_pg_exec(pg, "ALTER DATABASE postgres SET log_statement = 'all'"),
                     0);
    long long from = log_size();
    assert_true(from > 0);
    const char *args[] = {
        "--store", h_pg_conninfo(pg), "--admin-token", TOKEN, "--threads",
        "2",       "--pg-prepare",    "off",           NULL};
    struct h_svc_opts o = {.args = args, .no_redis_flag = true};
    h_svc *svc = h_svc_start(NULL, &o);
    assert_non_null(svc);
    int port = h_svc_port(svc);
    assert_int_equal(put_sku(port, "noprep-row", 40, 4, "row", 1), 0);
    sell_out(port, "noprep-row", 40);
    assert_int_equal(put_sku(port, "noprep-opt", 40, 4, "optimistic", 0), 0);
    sell_out(port, "noprep-opt", 40);
    assert_int_equal(h_svc_stop_clean(svc), 0);
    h_svc_free(svc);
    long long prepared = log_lines(from, "%execute inv\\_%");
    long long unnamed = log_lines(from, "%execute <unnamed>%");
    fprintf(stderr, "pg_prepare off: %lld prepared executions, %lld unnamed\n", prepared,
            unnamed);

    /* the default on the same server: the order path's statements are prepared */
    long long from_on = log_size();
    svc = start_svc("1", NULL);
    assert_non_null(svc);
    port = h_svc_port(svc);
    assert_int_equal(put_sku(port, "prep-on", 4, 2, "optimistic", 0), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(h_order(port, "prep-on", 1, NULL, NULL), 201);
    assert_int_equal(h_svc_stop_clean(svc), 0);
    h_svc_free(svc);
    long long prepared_on = log_lines(from_on, "%execute inv\\_%");
    fprintf(stderr, "pg_prepare on: %lld prepared executions\n", prepared_on);
    assert_int_equal(h_pg_exec(pg, "ALTER DATABASE postgres RESET log_statement"), 0);

    assert_int_equal(prepared, 0);
    assert_true(unnamed >= 80); /* at least one statement per order sold */
    assert_true(prepared_on >= 4);
}

/* ---- the automatic rebalance ------------------------------------------------------ */

/* One loop (the rebalance is due once per generation per loop): 8 units over 4
 * segments, two orders of 2 empty two of them; the next order finds most segments
 * empty with stock left and spreads the 4 over all 4 first (then takes 1): 3 segments
 * of 1, one empty, the stock conserved. Then a fresh SKU drained unevenly under 8
 * concurrent buyers sells out exactly, rebalanced along the way. */
static void auto_rebalance(const char *lock)
{
    h_svc *svc = start_svc("1", NULL);
    assert_non_null(svc);
    int port = h_svc_port(svc);
    char sku[32];
    snprintf(sku, sizeof sku, "reb-%s", lock);
    assert_int_equal(put_sku(port, sku, 8, 4, lock, 0), 0);
    json_t *j = h_get_sku(port, TOKEN, sku);
    assert_non_null(j);
    assert_true(json_is_true(json_object_get(j, "rebalance")));
    json_decref(j);
    assert_int_equal(h_order(port, sku, 2, NULL, NULL), 201);
    assert_int_equal(h_order(port, sku, 2, NULL, NULL), 201);
    assert_int_equal(segments_at(sku, 0), 2);
    assert_int_equal(segments_at(sku, 2), 2);
    long long rebal0 = h_stat(port, TOKEN, "rebalances");
    assert_int_equal(h_order(port, sku, 1, NULL, NULL), 201);
    long long rebal1 = h_stat(port, TOKEN, "rebalances");
    long long one = segments_at(sku, 1), empty = segments_at(sku, 0);
    fprintf(stderr,
            "postgres %s automatic rebalance: %lld rebalances, %lld segments of 1, "
            "%lld empty\n",
            lock, rebal1 - rebal0, one, empty);
    assert_int_equal(rebal1 - rebal0, 1);
    assert_int_equal(one, 3);
    assert_int_equal(empty, 1);
    assert_int_equal(stock_left(sku) + units_sold(sku), 8);
    assert_int_equal(h_audit(port, TOKEN, sku, 8, false), 0);

    /* 4 of 8 segments get 60 units, the others 4: the small ones empty first */
    snprintf(sku, sizeof sku, "rebc-%s", lock);
    assert_int_equal(put_sku(port, sku, 256, 8, lock, 1), 0);
    char q[200];
    snprintf(q, sizeof q,
             "UPDATE segments SET stock = CASE WHEN seg < 4 THEN 60 ELSE 4 END"
             " WHERE sku = '%s'",
             sku);
    assert_int_equal(h_pg_exec(pg, q), 0);
    assert_int_equal(stock_left(sku), 256);
    rebal0 = h_stat(port, TOKEN, "rebalances");
    sell_out(port, sku, 256);
    long long more = h_stat(port, TOKEN, "rebalances") - rebal0;
    fprintf(stderr, "postgres %s, 8 buyers: %lld rebalances on the way\n", lock, more);
    assert_true(more > 0);
    assert_int_equal(h_svc_stop_clean(svc), 0);
    h_svc_free(svc);
}

static void test_auto_rebalance_row(void **state)
{
    (void)state;
    auto_rebalance("row");
}

static void test_auto_rebalance_lease(void **state)
{
    (void)state;
    auto_rebalance("lease");
}

static void test_auto_rebalance_optimistic(void **state)
{
    (void)state;
    auto_rebalance("optimistic");
}

/* ---- /metrics ------------------------------------------------------------------- */

/* On PostgreSQL no family's HELP names Redis as the store: a line that names Redis
 * names PostgreSQL too (the text is store-neutral, or says which store counts). */
static void test_metrics_help_store_neutral(void **state)
{
    (void)state;
    h_svc *svc = start_svc("1", NULL);
    assert_non_null(svc);
    int port = h_svc_port(svc);
    assert_int_equal(put_sku(port, "metr", 4, 2, "row", 0), 0);
    assert_int_equal(h_order(port, "metr", 1, NULL, NULL), 201);
    struct h_resp r;
    assert_int_equal(h_req(port, "GET", "/metrics", TOKEN, NULL, &r), 200);
    int helps = 0, redis_only = 0;
    for (const char *l = r.body; l != NULL && *l != '\0';) {
        const char *end = strchr(l, '\n');
        size_t len = end != NULL ? (size_t)(end - l) : strlen(l);
        char line[512];
        snprintf(line, sizeof line, "%.*s",
                 (int)(len < sizeof line ? len : sizeof line - 1), l);
        if (strncmp(line, "# HELP ", 7) == 0) {
            helps++;
            if (strstr(line, "Redis") != NULL && strstr(line, "PostgreSQL") == NULL) {
                fprintf(stderr, "names Redis alone: %s\n", line);
                redis_only++;
            }
        }
        l = end != NULL ? end + 1 : NULL;
    }
    /* promtool (when on PATH) accepts the PostgreSQL scrape as it_metrics the Redis one
     */
    int promtool = -1;
    if (system("command -v promtool >/dev/null 2>&1") == 0) {
        char path[] = "/tmp/it_pg_ops_metrics.XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        FILE *f = fdopen(fd, "w");
        fputs(r.body, f);
        fclose(f);
        const char *argv[] = {"/bin/sh", "-c", "exec promtool check metrics < \"$1\"",
                              "sh",      path, NULL};
        char *out = NULL;
        promtool = h_run_cmd(argv, NULL, 30000, NULL, &out);
        if (promtool != 0)
            fprintf(stderr, "promtool check metrics: %s\n", out ? out : "");
        free(out);
        unlink(path);
        assert_int_equal(promtool, 0);
    }
    fprintf(stderr, "postgres /metrics: %d families, %d name Redis alone, promtool %s\n",
            helps, redis_only, promtool == 0 ? "clean" : "not on PATH");
    h_resp_free(&r);
    assert_true(helps > 20);
    assert_int_equal(redis_only, 0);
    assert_int_equal(h_svc_stop_clean(svc), 0);
    h_svc_free(svc);
}

static int setup(void **state)
{
    (void)state;
    pg = h_pg_start();
    return pg != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    h_pg_free(pg);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_bad_values),
        cmocka_unit_test(test_pool_size_configured),
        cmocka_unit_test(test_pool_of_one_sells_exactly),
        cmocka_unit_test(test_row_handed_on_no_busy),
        cmocka_unit_test(test_prepare_bad_values),
        cmocka_unit_test(test_prepare_off_sells_unprepared),
        cmocka_unit_test(test_auto_rebalance_row),
        cmocka_unit_test(test_auto_rebalance_lease),
        cmocka_unit_test(test_auto_rebalance_optimistic),
        cmocka_unit_test(test_metrics_help_store_neutral),
    };
    return h_exit_status(cmocka_run_group_tests(tests, setup, teardown));
}
