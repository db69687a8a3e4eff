/* it_ledger_pg.c -- the order ledger (segments/ledger.h) on the PostgreSQL store: two
 * services with `--store` and `--ledger` on one real PostgreSQL 15 (the ledger in the
 * store's database, the common case). Sales, cancels, a restock, a rebalance, a reset
 * and a reservation each reach the ledger once through the store's events table;
 * reconcile drift 0; a service without a ledger writes no events; both sinks SIGKILLed
 * with a batch copied and not yet deleted, then a new one: no double, no loss; the
 * ledger in a server of its own, stopped under load and back; the store's PostgreSQL
 * stopped under load and back: every acknowledged sale in the ledger once, and
 * nothing the store does not have. About 15 s.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "tests/harness.h"
#include "tests/harness_ledger.h"
#include "tests/harness_pg.h"

struct env {
    h_pg *pg;
    h_svc *a, *b; /* two services on the store, each with its sink */
};

/* A service on the store; with its ledger in `ledger` (NULL: none). */
static h_svc *start_on(struct env *e, const h_pg *ledger)
{
    const char *args[] = {"--store",
                          h_pg_conninfo(e->pg),
                          "--threads",
                          "2",
                          "--pg-pool",
                          "2",
                          ledger ? "--ledger" : NULL,
                          ledger ? h_pg_conninfo(ledger) : NULL,
                          NULL};
    struct h_svc_opts o = {.args = args, .no_redis_flag = true};
    return h_svc_start(NULL, &o);
}

/* A service on the store; with its ledger (the same database) when `ledger`. */
static h_svc *start_svc(struct env *e, bool ledger)
{
    return start_on(e, ledger ? e->pg : NULL);
}

static int group_setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    e->pg = h_pg_start();
    if (e->pg != NULL) { /* three services at a time, each with its pools */
        h_pg_set_max_connections(e->pg, 100);
        if (h_pg_restart(e->pg) != 0) {
            h_pg_free(e->pg);
            e->pg = NULL;
        }
    }
    e->a = e->pg ? start_svc(e, true) : NULL;
    e->b = e->a ? start_svc(e, true) : NULL;
    if (e->b == NULL) {
        h_svc_free(e->a);
        h_pg_free(e->pg);
        free(e);
        return -1;
    }
    *state = e;
    return 0;
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    int rc = h_svc_stop_clean(e->a) | (e->b != NULL ? h_svc_stop_clean(e->b) : 0);
    h_svc_free(e->a);
    h_svc_free(e->b);
    h_pg_free(e->pg);
    free(e);
    return rc;
}

static long long scalar(struct env *e, const char *fmt, const char *sku)
{
    return h_ledger_scalar(e->pg, fmt, sku);
}

static void assert_once(struct env *e, const char *sku, long long sales)
{
    h_ledger_assert_once(e->pg, sku, sales);
}

/* The store's events of `sku` not yet copied (and deleted) by a sink. */
static long long left_in_store(struct env *e, const char *sku)
{
    long long left = -1;
    for (int waited = 0; waited < 5000 && left != 0; waited += 100) {
        left = scalar(e, "SELECT count(*) FROM events WHERE sku = '%s'", sku);
        if (left != 0)
            usleep(100 * 1000);
    }
    return left;
}

static void post_ok(int port, const char *path, const char *body)
{
    struct h_resp r;
    assert_int_equal(h_req(port, "POST", path, NULL, body, &r), 200);
    h_resp_free(&r);
}

/* Sales through both services, cancels, a restock, a rebalance: each an event, copied
 * once; the ledger's counts meet the store's (drift 0); then a reset: the new epoch
 * starts from its stock, and the ledger forgets the old epoch's orders. */
static void test_events_and_reconcile(void **state)
{
    struct env *e = *state;
    int pa = h_svc_port(e->a), pb = h_svc_port(e->b);
    assert_int_equal(h_put_sku(pa, NULL, "lp1", 1000, 4, "lock", 0), 0);
    char id[64], path[96];
    for (int i = 0; i < 60; i++) {
        snprintf(id, sizeof id, "lp1-o%d", i);
        h_order_ok(i % 2 ? pb : pa, "lp1", id);
    }
    for (int i = 0; i < 6; i++) {
        struct h_resp r;
        snprintf(path, sizeof path, "/orders/lp1-o%d", i);
        assert_int_equal(h_req(pa, "DELETE", path, NULL, NULL, &r), 200);
        h_resp_free(&r);
    }
    post_ok(pa, "/admin/skus/lp1/restock", "{\"qty\": 40}");
    post_ok(pa, "/admin/skus/lp1/rebalance", NULL);
    assert_int_equal(h_wait_drift(pa, "lp1", 10000), 0);
    assert_once(e, "lp1", 60);
    assert_int_equal(scalar(e,
                            "SELECT count(*) FROM ledger.order_events"
                            " WHERE sku = '%s' AND kind = 'cancel'",
                            "lp1"),
                     6);
    assert_int_equal(scalar(e,
                            "SELECT count(*) FROM ledger.orders WHERE sku = '%s'"
                            " AND status = 'cancelled' AND qty = 0",
                            "lp1"),
                     6);
    assert_int_equal(scalar(e,
                            "SELECT sum(d_stock) FROM ledger.order_events"
                            " WHERE sku = '%s' AND kind = 'restock'",
                            "lp1"),
                     40);
    /* A rebalance moves units between segments (none when they were even already). */
    assert_int_equal(scalar(e,
                            "SELECT coalesce(sum(d_stock), 0) FROM ledger.order_events"
                            " WHERE sku = '%s' AND kind = 'rebalance'",
                            "lp1"),
                     0);
    assert_int_equal(
        scalar(e, "SELECT sold FROM ledger.movements WHERE sku = '%s'", "lp1"), 54);
    assert_int_equal(
        scalar(e, "SELECT stock FROM ledger.movements WHERE sku = '%s'", "lp1"),
        1000 - 54 + 40);
    assert_int_equal(left_in_store(e, "lp1"), 0); /* copied, then deleted */
    /* The command line form says the same, and exits 0. */
    const char *bin = getenv("INVENTORYD") ? getenv("INVENTORYD") : "build/inventoryd";
    const char *argv[] = {
        bin,        "--reconcile",        "lp1",         "--store", h_pg_conninfo(e->pg),
        "--ledger", h_pg_conninfo(e->pg), "--log-level", "error",   NULL};
    char *out = NULL;
    assert_int_equal(h_run_cmd(argv, NULL, 20000, &out, NULL), 0);
    assert_non_null(strstr(out, "\"sold\":54,\"events\""));
    assert_non_null(strstr(out, "\"drift\":0}"));
    free(out);
    /* A reset: its event starts the new epoch at its stock; sales go on from there. */
    assert_int_equal(h_put_sku(pa, NULL, "lp1", 500, 2, "lock", 0), 0);
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof id, "lp1-r%d", i);
        h_order_ok(pb, "lp1", id);
    }
    assert_int_equal(h_wait_drift(pa, "lp1", 10000), 0);
    assert_int_equal(scalar(e,
                            "SELECT sum(d_stock) FROM ledger.order_events"
                            " WHERE sku = '%s' AND kind = 'reset'"
                            " AND epoch = (SELECT epoch FROM skus WHERE sku = 'lp1')",
                            "lp1"),
                     500);
    assert_int_equal(scalar(e,
                            "SELECT sold FROM ledger.movements WHERE sku = '%s'"
                            " AND epoch = (SELECT epoch FROM skus WHERE sku = 'lp1')",
                            "lp1"),
                     5);
    struct h_resp r;
    assert_int_equal(h_req(pa, "GET", "/orders/lp1-o10", NULL, NULL, &r), 404);
    h_resp_free(&r);
}

/* A reservation placed, confirmed: a hold takes the stock, the confirm sells it. */
static void test_reservation_events(void **state)
{
    struct env *e = *state;
    int port = h_svc_port(e->a);
    assert_int_equal(h_put_sku(port, NULL, "lp5", 100, 2, "lock", 0), 0);
    struct h_resp r;
    assert_int_equal(h_req(port, "POST", "/reservations", NULL,
                           "{\"sku\": \"lp5\", \"qty\": 3, \"reservation_id\":"
                           " \"lp5-h1\", \"ttl_s\": 60}",
                           &r),
                     201);
    h_resp_free(&r);
    assert_int_equal(h_req(port, "POST", "/reservations/lp5-h1/confirm", NULL, NULL, &r),
                     201);
    h_resp_free(&r);
    assert_int_equal(h_wait_drift(port, "lp5", 10000), 0);
    assert_int_equal(
        scalar(e, "SELECT sold FROM ledger.movements WHERE sku = '%s'", "lp5"), 3);
    assert_int_equal(
        scalar(e, "SELECT stock FROM ledger.movements WHERE sku = '%s'", "lp5"), 97);
}

/* Two sinks read the one events table: each sale is copied once. */
static void test_two_sinks(void **state)
{
    struct env *e = *state;
    int pa = h_svc_port(e->a), pb = h_svc_port(e->b);
    assert_int_equal(h_put_sku(pa, NULL, "lp2", 100000, 8, "atomic", 0), 0);
    char id[64];
    for (int i = 0; i < 600; i++) {
        snprintf(id, sizeof id, "lp2-o%d", i);
        h_order_ok(i % 2 ? pb : pa, "lp2", id);
    }
    assert_int_equal(h_wait_drift(pb, "lp2", 10000), 0);
    assert_once(e, "lp2", 600);
    assert_int_equal(left_in_store(e, "lp2"), 0);
    /* Both sinks' counters: a sale is two events (its units, its sale). */
    double copied = 0;
    for (int i = 0; i < 2; i++) {
        struct h_resp m;
        assert_int_equal(h_req(i ? pb : pa, "GET", "/metrics", NULL, NULL, &m), 200);
        copied += h_metric(m.body, "inventory_ledger_events_copied_total");
        h_resp_free(&m);
    }
    assert_true(copied >= 1200);
}

/* A service with no ledger: its SKUs write no events, and it answers no reconcile. */
static void test_no_ledger_no_events(void **state)
{
    struct env *e = *state;
    h_svc *c = start_svc(e, false);
    assert_non_null(c);
    int port = h_svc_port(c);
    assert_int_equal(h_put_sku(port, NULL, "lp3", 100, 2, "lock", 0), 0);
    h_order_ok(port, "lp3", "lp3-o1");
    h_order_ok(h_svc_port(e->a), "lp3", "lp3-o2"); /* its flag is the SKU's */
    assert_int_equal(scalar(e, "SELECT count(*) FROM events WHERE sku = '%s'", "lp3"), 0);
    usleep(400 * 1000); /* two passes of the sinks */
    assert_int_equal(
        scalar(e, "SELECT count(*) FROM ledger.order_events WHERE sku = '%s'", "lp3"), 0);
    struct h_resp r;
    assert_int_equal(h_req(port, "GET", "/admin/skus/lp3/reconcile", NULL, NULL, &r),
                     409);
    h_resp_free(&r);
    assert_int_equal(h_svc_stop_clean(c), 0);
    h_svc_free(c);
}

/* Both sinks SIGKILLed while their copy waits on the ledger (a test session holds a
 * lock on it): once the lock goes, the dead sinks' copies commit in the ledger but
 * their transactions on the store, which hold the events, roll back, so the events
 * are still there; a new sink copies them again: no double (the ledger's key), no
 * loss. */
static void test_sinks_killed_mid_batch(void **state)
{
    struct env *e = *state;
    int port = h_svc_port(e->a);
    assert_int_equal(h_put_sku(port, NULL, "lp4", 100000, 4, "atomic", 0), 0);
    char id[64];
    for (int i = 0; i < 40; i++) { /* some copied before */
        snprintf(id, sizeof id, "lp4-o%d", i);
        h_order_ok(port, "lp4", id);
    }
    assert_int_equal(h_wait_drift(port, "lp4", 10000), 0);
    PGconn *hold = PQconnectdb(h_pg_conninfo(e->pg));
    assert_int_equal(PQstatus(hold), CONNECTION_OK);
    PGresult *res = PQexec(hold, "BEGIN; LOCK TABLE ledger.order_events IN SHARE MODE");
    assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
    PQclear(res);
    for (int i = 40; i < 160; i++) {
        snprintf(id, sizeof id, "lp4-o%d", i);
        h_order_ok(i % 2 ? h_svc_port(e->b) : port, "lp4", id);
    }
    /* The sinks' copies wait on the lock, their batches locked in the store. */
    long long waiting = 0;
    for (int waited = 0; waited < 5000 && waiting == 0; waited += 100) {
        usleep(100 * 1000);
        waiting = h_pg_scalar(e->pg, "SELECT count(*) FROM pg_stat_activity"
                                     " WHERE wait_event_type = 'Lock'"
                                     " AND query LIKE '%ledger.order_events%'");
    }
    assert_true(waiting > 0); /* a batch taken and not copied: the case under test */
    h_svc_kill(e->a);
    h_svc_kill(e->b);
    h_svc_free(e->a);
    h_svc_free(e->b);
    e->b = NULL;
    res = PQexec(hold, "COMMIT");
    PQclear(res);
    PQfinish(hold);
    /* The dead sinks' copies commit on their own; their events stay in the store. */
    long long copied = -1;
    for (int waited = 0; waited < 5000; waited += 100) {
        copied = scalar(e,
                        "SELECT count(*) FROM ledger.order_events WHERE sku = '%s'"
                        " AND kind = 'sale'",
                        "lp4");
        if (copied > 40)
            break;
        usleep(100 * 1000);
    }
    assert_true(copied > 40); /* the dead sinks' copies: in the ledger, */
    long long kept = scalar(e, "SELECT count(*) FROM events WHERE sku = '%s'", "lp4");
    assert_true(kept > 0); /* and their events still in the store */
    fprintf(stderr,
            "it_ledger_pg: sinks killed mid-batch: %lld sales copied by the dead sinks,"
            " %lld events left in the store for the next sink\n",
            copied - 40, kept);
    e->a = start_svc(e, true);
    assert_non_null(e->a);
    assert_int_equal(h_wait_drift(h_svc_port(e->a), "lp4", 20000), 0);
    assert_once(e, "lp4", 160);
    assert_int_equal(left_in_store(e, "lp4"), 0);
    e->b = start_svc(e, true);
    assert_non_null(e->b);
}

/* The ledger in a database of its own, and that server stopped under a load, then
 * back: the store goes on selling, its events wait in its table (the copies fail and
 * roll back), and once the ledger is back every sale is in it once. (The other
 * services are stopped meanwhile: every sink on one store copies into one ledger.) */
static void test_separate_ledger_down(void **state)
{
    struct env *e = *state;
    assert_int_equal(h_svc_stop_clean(e->a) | h_svc_stop_clean(e->b), 0);
    h_svc_free(e->a);
    h_svc_free(e->b);
    e->a = e->b = NULL;
    h_pg *lg = h_pg_start();
    assert_non_null(lg);
    h_svc *c = start_on(e, lg);
    assert_non_null(c);
    int port = h_svc_port(c);
    assert_int_equal(h_put_sku(port, NULL, "lp7", 100000, 4, "lock", 0), 0);
    char id[64];
    for (int i = 0; i < 50; i++) {
        snprintf(id, sizeof id, "lp7-o%d", i);
        h_order_ok(port, "lp7", id);
    }
    assert_int_equal(h_wait_drift(port, "lp7", 10000), 0);
    assert_int_equal(h_pg_stop(lg) >= 0, 1);
    for (int i = 50; i < 200; i++) {
        snprintf(id, sizeof id, "lp7-o%d", i);
        h_order_ok(port, "lp7", id); /* the store is up: every order sells */
    }
    h_sleep_ms(600); /* a few passes, each failing */
    struct h_resp m;
    assert_int_equal(h_req(port, "GET", "/metrics", NULL, NULL, &m), 200);
    double failures = h_metric(m.body, "inventory_ledger_failures_total");
    h_resp_free(&m);
    assert_true(failures > 0);
    assert_int_equal(scalar(e, "SELECT count(*) FROM events WHERE sku = '%s'", "lp7"),
                     300); /* 150 sales waiting, two events each */
    assert_int_equal(h_pg_restart(lg), 0);
    assert_int_equal(h_wait_drift(port, "lp7", 15000), 0);
    assert_int_equal(h_pg_scalar(lg, "SELECT count(DISTINCT order_id) FROM"
                                     " ledger.order_events WHERE sku = 'lp7'"
                                     " AND kind = 'sale'"),
                     200);
    assert_int_equal(h_pg_scalar(lg, "SELECT count(*) FROM ledger.order_events"
                                     " WHERE sku = 'lp7' AND kind = 'sale'"),
                     200);
    assert_int_equal(left_in_store(e, "lp7"), 0);
    assert_int_equal(h_svc_stop_clean(c), 0);
    h_svc_free(c);
    h_pg_free(lg);
    e->a = start_svc(e, true);
    e->b = e->a ? start_svc(e, true) : NULL;
    assert_non_null(e->b);
}

/* The store's PostgreSQL stopped under a load through both services for 1.5 s
 * (LEDGER_PG_DOWN_S: seconds, the minute opt-in), then back: every
 * acknowledged sale is in the ledger once, and the ledger has no sale the store has
 * not (an order whose answer was lost may be in both). */
static void test_postgres_restarted_under_load(void **state)
{
    struct env *e = *state;
    const char *env = getenv("LEDGER_PG_DOWN_S");
    long down_ms = env != NULL && atol(env) > 0 ? atol(env) * 1000 : 1500;
    int pa = h_svc_port(e->a), pb = h_svc_port(e->b);
    assert_int_equal(h_put_sku(pa, NULL, "lp6", 10000000, 4, "atomic", 0), 0);
    size_t cap = 1 << 16, len = 0;
    char *acked = malloc(cap);
    len += (size_t)snprintf(acked, cap, "ARRAY[''");
    long long n_acked = 0, other = 0;
    long long t0 = h_now_ms(), stopped_at = -1;
    bool restarted = false;
    char id[64];
    for (int i = 0;; i++) {
        long long now = h_now_ms();
        if (stopped_at < 0 && now - t0 >= 1000) {
            assert_int_equal(h_pg_stop(e->pg) >= 0, 1);
            stopped_at = h_now_ms();
        }
        if (stopped_at >= 0 && !restarted && now - stopped_at >= down_ms) {
            assert_int_equal(h_pg_restart(e->pg), 0);
            restarted = true;
            t0 = h_now_ms();
        }
        if (restarted && now - t0 >= 1500)
            break;
        snprintf(id, sizeof id, "lp6-o%d", i);
        if (h_order(i % 2 ? pb : pa, "lp6", 1, id, NULL) == 201) {
            if (len + 80 > cap)
                acked = realloc(acked, cap *= 2);
            len += (size_t)snprintf(acked + len, cap - len, ",'%s'", id);
            n_acked++;
        } else {
            other++;
            h_sleep_ms(20);
        }
    }
    snprintf(acked + len, cap - len, "]");
    assert_true(n_acked > 0);
    assert_true(other > 0); /* the store was down for a while */
    assert_int_equal(h_wait_drift(pa, "lp6", 30000), 0);
    /* Every acknowledged sale in the ledger. */
    size_t qcap = len + 512;
    char *q = malloc(qcap);
    snprintf(q, qcap,
             "SELECT count(*) FROM unnest(%s) a WHERE a <> '' AND NOT EXISTS"
             " (SELECT 1 FROM ledger.order_events e WHERE e.order_id = a"
             " AND e.kind = 'sale')",
             acked);
    assert_int_equal(h_pg_scalar(e->pg, q), 0);
    free(q);
    free(acked);
    /* Once each, and exactly the store's orders. */
    long long rows = scalar(e, "SELECT count(*) FROM orders WHERE sku = '%s'", "lp6");
    assert_true(rows >= n_acked);
    assert_once(e, "lp6", rows);
    fprintf(stderr,
            "it_ledger_pg: store down %ld ms under load: %lld acknowledged, %lld not, "
            "%lld order rows, all in the ledger once\n",
            down_ms, n_acked, other, rows);
}

int main(void)
{
    const char *down = getenv("LEDGER_PG_DOWN_S");
    h_deadline(180 + (down != NULL && atol(down) > 0 ? (unsigned)atol(down) : 0));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_events_and_reconcile),
        cmocka_unit_test(test_reservation_events),
        cmocka_unit_test(test_two_sinks),
        cmocka_unit_test(test_no_ledger_no_events),
        cmocka_unit_test(test_sinks_killed_mid_batch),
        cmocka_unit_test(test_separate_ledger_down),
        cmocka_unit_test(test_postgres_restarted_under_load),
    };
    int failed =
        cmocka_run_group_tests_name("ledger_pg", tests, group_setup, group_teardown);
    return h_exit_status(failed);
}
