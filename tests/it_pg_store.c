/* it_pg_store.c -- the PostgreSQL store (segments/postgres/) against a real PostgreSQL
 * 15 started by the harness (harness_pg.h, pg_env.h).
 *
 * The schema is created by two instances migrating at once, migrating again is a
 * no-op, and a newer database is refused. An order id sells once, whatever the
 * scheme, also when two connections send it at the same moment. row: a holder frozen
 * (its loop not run) past idle_in_transaction_session_timeout loses its session and
 * its row lock to another seller, and its late COMMIT fails. lease: a holder past its
 * expiry is fenced, and only the owner releases. optimistic: a lost race is reported
 * as CONFLICT and writes nothing. The connection: a backend killed with
 * pg_terminate_backend answers -1 and the connection comes back; a call's deadline;
 * every call answered once, never inside the call, -1 on close; a restarted server;
 * the order statements prepared again in the session after a terminated one; the
 * table of prepared names bounded, and a name the server forgot prepared again.
 * (The sell-outs under concurrency: it_pg_sellout.c.)
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

#include <event2/event.h>

#include "segments/postgres/conn.h"
#include "segments/postgres/store.h"
#include "tests/harness.h"
#include "tests/pg_env.h"

static void test_migrate(void **state)
{
    struct pg_env *e = *state;
    assert_int_equal(h_pg_scalar(e->pg, "SELECT max(version) FROM schema_version"),
                     pgs_schema_latest());
    assert_int_equal(h_pg_scalar(e->pg, "SELECT count(*) FROM schema_version"), 1);
    struct pge_migrated m = {0};
    pgs_migrate(e->c[0], pge_on_migrated, &m);
    assert_true(pge_run_until(e->base, &m.done, 1, 10000));
    assert_int_equal(m.ok, 1);
    assert_int_equal(m.version[0], pgs_schema_latest());
    assert_int_equal(h_pg_scalar(e->pg, "SELECT count(*) FROM schema_version"), 1);
    /* A database a newer build migrated is refused, and left as it is. */
    assert_int_equal(h_pg_exec(e->pg, "UPDATE schema_version SET version = version + 1"),
                     0);
    struct pge_migrated newer = {0};
    pgs_migrate(e->c[0], pge_on_migrated, &newer);
    assert_true(pge_run_until(e->base, &newer.done, 1, 10000));
    assert_int_equal(newer.ok, 0);
    assert_int_equal(h_pg_scalar(e->pg, "SELECT max(version) FROM schema_version"),
                     pgs_schema_latest() + 1);
    assert_int_equal(h_pg_exec(e->pg, "UPDATE schema_version SET version = version - 1"),
                     0);
    assert_int_equal(h_pg_scalar(e->pg, "SELECT count(*) FROM pg_tables WHERE tablename"
                                        " IN ('skus', 'segments', 'orders')"),
                     3);
}

struct got {
    int done, found;
    char sku[16], record[32];
    long long qty;
};

static void on_got(void *arg, int rc, const struct pgs_order *ord)
{
    struct got *g = arg;
    if (rc == 0 && ord != NULL) {
        g->found++;
        snprintf(g->sku, sizeof g->sku, "%s", ord->sku);
        snprintf(g->record, sizeof g->record, "%s", ord->record);
        g->qty = ord->qty;
    }
    g->done++;
}

/* ---- idempotent order ids ---------------------------------------------------------- */

static void test_idempotent_ids(void **state)
{
    struct pg_env *e = *state;
    pge_put_sku(e, "idem", 10, 1, "atomic", "");
    /* The same id from both connections at the same moment: one sale. */
    struct pge_wait a = {0}, b = {0};
    pgs_atomic_deduct(e->c[0], "idem", 0, "idem-1", 1, "{\"n\":1}", pge_on_res, &a);
    pgs_atomic_deduct(e->c[1], "idem", 0, "idem-1", 1, "{\"n\":1}", pge_on_res, &b);
    pge_wait_for(e->base, &a);
    pge_wait_for(e->base, &b);
    assert_int_equal(a.rc, 0);
    assert_int_equal(b.rc, 0);
    assert_true((a.r.code == PGS_OK && b.r.code == PGS_EXISTS) ||
                (a.r.code == PGS_EXISTS && b.r.code == PGS_OK));
    pge_audit(e, "idem", 10, 1);

    /* A replay of it through each other scheme writes nothing either. */
    struct pge_wait w = {0};
    pgs_lease_take(e->c[0], "idem", 0, "tok", 2000, pge_on_res, &w);
    pge_wait_for(e->base, &w);
    assert_int_equal(w.r.code, PGS_OK);
    w = (struct pge_wait){0};
    pgs_lease_deduct(e->c[0], "idem", 0, "tok", "idem-1", 1, "{}", 1, pge_on_res, &w);
    pge_wait_for(e->base, &w);
    assert_int_equal(w.rc, 0);
    assert_int_equal(w.r.code, PGS_EXISTS);

    w = (struct pge_wait){0};
    pgs_opt_read(e->c[0], "idem", 0, pge_on_res, &w);
    pge_wait_for(e->base, &w);
    long long v = w.r.version;
    w = (struct pge_wait){0};
    pgs_opt_deduct(e->c[0], "idem", 0, v, "idem-1", 1, "{}", pge_on_res, &w);
    pge_wait_for(e->base, &w);
    assert_int_equal(w.r.code, PGS_EXISTS);

    w = (struct pge_wait){0};
    pgs_row_take(e->c[0], "idem", 0, 1, pge_on_res, &w);
    pge_wait_for(e->base, &w);
    assert_int_equal(w.r.code, PGS_OK);
    unsigned long long txn = w.r.txn;
    w = (struct pge_wait){0};
    pgs_row_deduct(e->c[0], txn, "idem", 0, "idem-1", 1, "{}", pge_on_res, &w);
    pge_wait_for(e->base, &w);
    assert_int_equal(w.rc, 0);
    assert_int_equal(w.r.code, PGS_EXISTS);
    pge_audit(e, "idem", 10, 1);

    /* The record reads back as written; an unknown id reads as none. */
    struct got g = {0};
    pgs_order_read(e->c[1], "idem-1", on_got, &g);
    pgs_order_read(e->c[1], "idem-none", on_got, &g);
    assert_true(pge_run_until(e->base, &g.done, 2, 10000));
    assert_int_equal(g.found, 1);
    assert_string_equal(g.sku, "idem");
    assert_string_equal(g.record, "{\"n\":1}");
    assert_int_equal(g.qty, 1);
    /* The connection is free again after the rolled-back transaction. */
    w = (struct pge_wait){0};
    pgs_atomic_deduct(e->c[0], "idem", 0, "idem-2", 1, "{}", pge_on_res, &w);
    pge_wait_for(e->base, &w);
    assert_int_equal(w.r.code, PGS_OK);
    pge_audit(e, "idem", 10, 2);
}

/* ---- row: a frozen holder -----------------------------------------------------------
 */

#define FROZEN_TTL_MS 400

static void test_row_frozen_holder(void **state)
{
    struct pg_env *e = *state;
    pge_put_sku(e, "frozen", 5, 1, "lock", "row");
    /* The holder: its own loop, so that not running it is a frozen process. */
    struct event_base *hb = event_base_new();
    pgc_conn *holder = pge_connect(hb, e->pg, FROZEN_TTL_MS);
    struct pge_wait w = {0};
    pgs_row_take(holder, "frozen", 0, 1, pge_on_res, &w);
    pge_wait_for(hb, &w);
    assert_int_equal(w.rc, 0);
    assert_int_equal(w.r.code, PGS_OK);
    unsigned long long txn = w.r.txn;
    long long frozen_at = h_now_ms();

    /* Held: another seller is refused at once. */
    struct pge_wait b = {0};
    pgs_row_take(e->c[0], "frozen", 0, 1, pge_on_res, &b);
    pge_wait_for(e->base, &b);
    assert_int_equal(b.r.code, PGS_BUSY);

    /* The server ends the idle holder's session: the other sells everything. */
    int sold = 0;
    while (sold < 5 && h_now_ms() - frozen_at < 5000) {
        struct pge_wait t = {0};
        pgs_row_take(e->c[0], "frozen", 0, 1, pge_on_res, &t);
        pge_wait_for(e->base, &t);
        if (t.rc != 0 || t.r.code != PGS_OK) {
            pge_run_for(e->base, 20);
            continue;
        }
        char id[32];
        snprintf(id, sizeof id, "frozen-%d", sold);
        struct pge_wait d = {0};
        pgs_row_deduct(e->c[0], t.r.txn, "frozen", 0, id, 1, "{}", pge_on_res, &d);
        pge_wait_for(e->base, &d);
        assert_int_equal(d.rc, 0);
        assert_int_equal(d.r.code, PGS_OK);
        sold++;
    }
    assert_int_equal(sold, 5);
    assert_true(h_now_ms() - frozen_at >= FROZEN_TTL_MS - 50);
    /* It was the server that ended the holder's session (the holder never ran). */
    assert_int_equal(h_pg_scalar(e->pg, "SELECT count(*) FROM pg_stat_activity"
                                        " WHERE state LIKE 'idle in transaction%'"),
                     0);

    /* The holder wakes up and commits: it fails, and writes nothing. */
    struct pge_wait late = {0};
    pgs_row_deduct(holder, txn, "frozen", 0, "frozen-late", 1, "{}", pge_on_res, &late);
    pge_wait_for(hb, &late);
    printf("late commit: rc %d (%s)\n", late.rc, pgc_error(holder));
    assert_int_equal(late.rc, -1);
    assert_int_equal(
        h_pg_scalar(e->pg, "SELECT count(*) FROM orders WHERE order_id = 'frozen-late'"),
        0);
    pge_audit(e, "frozen", 5, 5);
    pgc_free(holder);
    event_base_free(hb);
}

/* ---- lease: expiry and fencing ------------------------------------------------------
 */

static struct pgs_res lease_call(struct pg_env *e, int op, const char *token,
                                 const char *id)
{
    struct pge_wait w = {0};
    switch (op) {
    case 0:
        pgs_lease_take(e->c[0], "lease", 0, token, 1000, pge_on_res, &w);
        break;
    case 1:
        pgs_lease_deduct(e->c[0], "lease", 0, token, id, 1, "{}", 1, pge_on_res, &w);
        break;
    case 2:
        pgs_lease_release(e->c[0], "lease", 0, token, pge_on_res, &w);
        break;
    default:
        pgs_lease_renew(e->c[0], "lease", 0, token, 1000, pge_on_res, &w);
        break;
    }
    pge_wait_for(e->base, &w);
    assert_int_equal(w.rc, 0);
    return w.r;
}

static void test_lease_fenced(void **state)
{
    struct pg_env *e = *state;
    pge_put_sku(e, "lease", 10, 1, "lock", "lease");
    struct pgs_res a = lease_call(e, 0, "A", NULL);
    assert_int_equal(a.code, PGS_OK);
    assert_int_equal(lease_call(e, 0, "B", NULL).code, PGS_BUSY);
    assert_int_equal(lease_call(e, 1, "B", "lease-b0").code, PGS_FENCED);
    assert_int_equal(lease_call(e, 2, "B", NULL).code, PGS_FENCED); /* owner only */
    assert_int_equal(lease_call(e, 1, "A", "lease-a1").code, PGS_OK);
    assert_int_equal(lease_call(e, 3, "A", NULL).code, PGS_OK);

    /* A stops (past its 1000 ms): its next write is fenced, though nobody took over. */
    pge_run_for(e->base, 1200);
    assert_int_equal(lease_call(e, 1, "A", "lease-a2").code, PGS_FENCED);
    assert_int_equal(lease_call(e, 3, "A", NULL).code, PGS_FENCED);
    struct pgs_res b = lease_call(e, 0, "B", NULL);
    assert_int_equal(b.code, PGS_OK);
    assert_true(b.fence > a.fence);
    assert_int_equal(lease_call(e, 1, "A", "lease-a3").code, PGS_FENCED);
    assert_int_equal(lease_call(e, 1, "B", "lease-b1").code, PGS_OK);
    assert_int_equal(lease_call(e, 2, "A", NULL).code, PGS_FENCED);
    assert_int_equal(lease_call(e, 2, "B", NULL).code, PGS_OK);
    assert_int_equal(h_pg_scalar(e->pg, "SELECT count(*) FROM orders WHERE sku = 'lease'"
                                        " AND order_id IN ('lease-a2', 'lease-a3', "
                                        "'lease-b0')"),
                     0);
    pge_audit(e, "lease", 10, 2);
}

/* ---- optimistic: a lost race ------------------------------------------------------- */

static void test_optimistic_conflict(void **state)
{
    struct pg_env *e = *state;
    pge_put_sku(e, "opt", 10, 1, "lock", "optimistic");
    struct pge_wait r0 = {0}, r1 = {0};
    pgs_opt_read(e->c[0], "opt", 0, pge_on_res, &r0);
    pgs_opt_read(e->c[1], "opt", 0, pge_on_res, &r1);
    pge_wait_for(e->base, &r0);
    pge_wait_for(e->base, &r1);
    assert_int_equal(r0.r.version, r1.r.version);
    /* Both deduct against the version they read, at the same moment. */
    struct pge_wait d0 = {0}, d1 = {0};
    pgs_opt_deduct(e->c[0], "opt", 0, r0.r.version, "opt-0", 3, "{}", pge_on_res, &d0);
    pgs_opt_deduct(e->c[1], "opt", 0, r1.r.version, "opt-1", 3, "{}", pge_on_res, &d1);
    pge_wait_for(e->base, &d0);
    pge_wait_for(e->base, &d1);
    assert_int_equal(d0.rc, 0);
    assert_int_equal(d1.rc, 0);
    struct pge_wait *won = d0.r.code == PGS_OK ? &d0 : &d1;
    struct pge_wait *lost = won == &d0 ? &d1 : &d0;
    assert_int_equal(won->r.code, PGS_OK);
    assert_int_equal(lost->r.code, PGS_CONFLICT);
    assert_int_equal(won->r.stock, 7);
    assert_int_equal(won->r.version, r0.r.version + 1);
    assert_int_equal(
        h_pg_scalar(e->pg, "SELECT sum(stock) FROM segments WHERE sku = 'opt'"), 7);
    assert_int_equal(h_pg_scalar(e->pg, "SELECT count(*) FROM orders WHERE sku = 'opt'"),
                     1);
    /* The loser reads again and wins; short is short, not a conflict. */
    struct pge_wait again = {0};
    pgs_opt_read(e->c[0], "opt", 0, pge_on_res, &again);
    pge_wait_for(e->base, &again);
    struct pge_wait d2 = {0};
    pgs_opt_deduct(e->c[0], "opt", 0, again.r.version, "opt-2", 3, "{}", pge_on_res, &d2);
    pge_wait_for(e->base, &d2);
    assert_int_equal(d2.r.code, PGS_OK);
    struct pge_wait d3 = {0};
    pgs_opt_deduct(e->c[0], "opt", 0, d2.r.version, "opt-3", 5, "{}", pge_on_res, &d3);
    pge_wait_for(e->base, &d3);
    assert_int_equal(d3.r.code, PGS_SHORT);
    assert_int_equal(d3.r.stock, 4);
    pge_audit_rows(e, "opt", 10, 6, 2);
}

/* ---- a backend killed ----------------------------------------------------------------
 */

static void test_backend_killed(void **state)
{
    struct pg_env *e = *state;
    pge_put_sku(e, "killed", 10, 1, "atomic", "");
    /* A call stuck behind a lock, then its backend killed by another session. */
    struct event_base *hb = event_base_new();
    pgc_conn *holder = pge_connect(hb, e->pg, 5000);
    struct pge_wait t = {0};
    pgs_row_take(holder, "killed", 0, 1, pge_on_res, &t);
    pge_wait_for(hb, &t);
    assert_int_equal(t.r.code, PGS_OK);
    struct pge_wait w = {0};
    pgs_atomic_deduct(e->c[1], "killed", 0, "killed-1", 1, "{}", pge_on_res, &w);
    pge_run_for(e->base, 100);
    assert_int_equal(w.done, 0); /* waiting for the row lock */
    assert_int_equal(h_pg_exec(e->pg, "SELECT pg_terminate_backend(pid) FROM"
                                      " pg_stat_activity WHERE wait_event_type = 'Lock'"),
                     0);
    pge_wait_for(e->base, &w);
    assert_int_equal(w.rc, -1);
    pgs_row_release(holder, t.r.txn, NULL, NULL);
    pge_run_for(hb, 50);
    /* The connection comes back; the id makes the retry safe. */
    struct pge_wait r = {0};
    pgs_atomic_deduct(e->c[1], "killed", 0, "killed-1", 1, "{}", pge_on_res, &r);
    pge_wait_for(e->base, &r);
    assert_int_equal(r.rc, 0);
    assert_true(r.r.code == PGS_OK || r.r.code == PGS_EXISTS);
    pge_audit(e, "killed", 10, 1);
    pgc_free(holder);
    event_base_free(hb);
}

/* ---- a call's deadline, and a restarted server ---------------------------------------
 */

static void test_call_deadline(void **state)
{
    struct pg_env *e = *state;
    pge_put_sku(e, "deadline", 10, 1, "atomic", "");
    struct event_base *hb = event_base_new();
    pgc_conn *holder = pge_connect(hb, e->pg, 5000);
    struct pge_wait t = {0};
    pgs_row_take(holder, "deadline", 0, 1, pge_on_res, &t);
    pge_wait_for(hb, &t);
    assert_int_equal(t.r.code, PGS_OK);

    const struct pgc_opts o = {.conninfo = h_pg_conninfo(e->pg), .call_timeout_ms = 300};
    pgc_conn *d = pgc_create(e->base, &o);
    struct pge_wait w = {0};
    long long t0 = h_now_ms();
    pgs_atomic_deduct(d, "deadline", 0, "dl-1", 1, "{}", pge_on_res, &w);
    pge_wait_for(e->base, &w);
    long long took = h_now_ms() - t0;
    /* Answered at its deadline, not when the lock goes: a bound 10x the deadline. */
    assert_int_equal(w.rc, -1);
    assert_true(took >= 250 && took < 3000);
    struct pgc_stats st;
    pgc_stats(d, &st);
    assert_int_equal(st.timeouts, 1);

    pgs_row_release(holder, t.r.txn, NULL, NULL);
    pge_run_for(hb, 50);
    /* The outcome was unknown: the statement may have run once the lock went. The same
     * id makes the retry safe either way. */
    struct pge_wait r = {0};
    pgs_atomic_deduct(d, "deadline", 0, "dl-1", 1, "{}", pge_on_res, &r);
    pge_wait_for(e->base, &r);
    assert_int_equal(r.rc, 0);
    assert_true(r.r.code == PGS_OK || r.r.code == PGS_EXISTS);
    pge_audit(e, "deadline", 10, 1);
    pgc_free(d);
    pgc_free(holder);
    event_base_free(hb);
}

static void test_server_restart(void **state)
{
    struct pg_env *e = *state;
    pge_put_sku(e, "restart", 10, 1, "atomic", "");
    struct pgc_stats before;
    pgc_stats(e->c[0], &before);
    assert_int_equal(h_pg_stop(e->pg), 0);
    pge_run_for(e->base, 100); /* the connections see it close */
    assert_false(pgc_ready(e->c[0]));
    /* A call made while the server is down waits for the next connection. */
    struct pge_wait w = {0};
    pgs_atomic_deduct(e->c[0], "restart", 0, "rs-1", 1, "{}", pge_on_res, &w);
    pge_run_for(e->base, 200);
    assert_int_equal(w.done, 0);
    assert_int_equal(h_pg_restart(e->pg), 0);
    pge_wait_for(e->base, &w);
    assert_int_equal(w.rc, 0);
    assert_int_equal(w.r.code, PGS_OK);
    struct pgc_stats after;
    pgc_stats(e->c[0], &after);
    assert_true(after.connects > before.connects);
    assert_true(after.failures > before.failures);
    pge_audit(e, "restart", 10, 1);
}

/* ---- answered once, never inside the call, and on close ---------------------------- */

static void test_answered_on_close(void **state)
{
    struct pg_env *e = *state;
    pge_put_sku(e, "close", 10, 1, "atomic", "");
    struct event_base *b = event_base_new();
    pgc_conn *c = pge_connect(b, e->pg, 5000);
    struct pge_wait w[4] = {{0}};
    /* Queued before the connection is up: none is answered from inside the call. */
    pgs_atomic_deduct(c, "close", 0, "close-0", 1, "{}", pge_on_res, &w[0]);
    pgs_opt_read(c, "close", 0, pge_on_res, &w[1]);
    assert_int_equal(w[0].done + w[1].done, 0);
    pge_wait_for(b, &w[0]);
    pge_wait_for(b, &w[1]);
    assert_int_equal(w[0].r.code, PGS_OK);
    /* Sent and unsent calls alike are answered -1, once, when the handle is freed. */
    pgs_row_take(c, "close", 0, 1, pge_on_res, &w[2]);
    pgs_atomic_deduct(c, "close", 0, "close-1", 1, "{}", pge_on_res, &w[3]);
    event_base_loop(b, EVLOOP_NONBLOCK); /* sends them */
    /* A fast server may have answered one within that turn (it then has its answer,
     * rc 0): those still owed one are answered -1 by the free. */
    int owed[4] = {0};
    for (int i = 2; i < 4; i++)
        owed[i] = !w[i].done;
    pgc_free(c);
    for (int i = 2; i < 4; i++) {
        assert_int_equal(w[i].done, 1);
        if (owed[i])
            assert_int_equal(w[i].rc, -1);
    }
    pge_run_for(b, 50);
    assert_int_equal(w[2].done + w[3].done, 2);
    event_base_free(b);
}

/* ---- prepared statements across sessions ---------------------------------------------
 */

/* One order through each scheme's prepared statements on `c` (atomic, row taken and
 * rolled back then taken and sold, lease, optimistic, row without a hold): each must
 * sell at its first try. Returns the units sold (5). */
static int sell_each_scheme(struct pg_env *e, struct event_base *b, pgc_conn *c,
                            const char *round)
{
    char id[32];
    struct pge_wait w = {0};
    snprintf(id, sizeof id, "%s-atomic", round);
    pgs_atomic_deduct(c, "reprep", 0, id, 1, "{}", pge_on_res, &w);
    pge_wait_for(b, &w);
    if (w.rc != 0 || w.r.code != PGS_OK)
        fail_msg("%s: atomic rc %d code %d: %s", round, w.rc, w.r.code, pgc_error(c));

    /* A statement prepared inside a transaction that rolls back stays prepared. */
    for (int i = 0; i < 2; i++) {
        w = (struct pge_wait){0};
        pgs_row_take(c, "reprep", 1, 1, pge_on_res, &w);
        pge_wait_for(b, &w);
        if (w.rc != 0 || w.r.code != PGS_OK)
            fail_msg("%s: row take rc %d code %d", round, w.rc, w.r.code);
        if (i == 1)
            break;
        struct pge_wait rb = {0};
        pgs_row_release(c, w.r.txn, pge_on_res, &rb);
        pge_wait_for(b, &rb);
    }
    unsigned long long txn = w.r.txn;
    snprintf(id, sizeof id, "%s-row", round);
    w = (struct pge_wait){0};
    pgs_row_deduct(c, txn, "reprep", 1, id, 1, "{}", pge_on_res, &w);
    pge_wait_for(b, &w);
    if (w.rc != 0 || w.r.code != PGS_OK)
        fail_msg("%s: row deduct rc %d code %d", round, w.rc, w.r.code);

    w = (struct pge_wait){0};
    pgs_lease_take(c, "reprep", 0, "tok", 2000, pge_on_res, &w);
    pge_wait_for(b, &w);
    if (w.rc != 0 || w.r.code != PGS_OK)
        fail_msg("%s: lease take rc %d code %d", round, w.rc, w.r.code);
    snprintf(id, sizeof id, "%s-lease", round);
    w = (struct pge_wait){0};
    pgs_lease_deduct(c, "reprep", 0, "tok", id, 1, "{}", 0, pge_on_res, &w);
    pge_wait_for(b, &w);
    if (w.rc != 0 || w.r.code != PGS_OK)
        fail_msg("%s: lease deduct rc %d code %d", round, w.rc, w.r.code);

    w = (struct pge_wait){0};
    pgs_opt_read(c, "reprep", 1, pge_on_res, &w);
    pge_wait_for(b, &w);
    if (w.rc != 0 || w.r.code != PGS_OK)
        fail_msg("%s: optimistic read rc %d code %d", round, w.rc, w.r.code);
    long long v = w.r.version;
    snprintf(id, sizeof id, "%s-opt", round);
    w = (struct pge_wait){0};
    pgs_opt_deduct(c, "reprep", 1, v, id, 1, "{}", pge_on_res, &w);
    pge_wait_for(b, &w);
    if (w.rc != 0 || w.r.code != PGS_OK)
        fail_msg("%s: optimistic deduct rc %d code %d", round, w.rc, w.r.code);

    snprintf(id, sizeof id, "%s-now", round);
    w = (struct pge_wait){0};
    pgs_row_deduct_now(c, "reprep", 0, id, 1, "{}", pge_on_res, &w);
    pge_wait_for(b, &w);
    if (w.rc != 0 || w.r.code != PGS_OK)
        fail_msg("%s: row deduct now rc %d code %d", round, w.rc, w.r.code);
    (void)e;
    return 5;
}

/* The order statements are prepared once per session (conn.h): a connection whose
 * backend is terminated prepares them again in its next session, and every order
 * sells at its first try there (a name kept from the old session would answer
 * "prepared statement does not exist"). */
static void test_prepared_again_after_reconnect(void **state)
{
    struct pg_env *e = *state;
    pge_put_sku(e, "reprep", 100, 2, "atomic", "");
    const struct pgc_opts o = {.conninfo = h_pg_conninfo(e->pg),
                               .lock_ttl_ms = 5000,
                               .call_timeout_ms = 10000,
                               .app_name = "inventoryd reprep"};
    pgc_conn *c = pgc_create(e->base, &o);
    int sold = sell_each_scheme(e, e->base, c, "s1");
    sold += sell_each_scheme(e, e->base, c, "s1b"); /* the prepared names reused */
    struct pgc_stats s1;
    pgc_stats(c, &s1);
    assert_true(s1.prepares >= 8);
    assert_int_equal(s1.connects, 1);

    assert_int_equal(h_pg_exec(e->pg, "SELECT pg_terminate_backend(pid) FROM"
                                      " pg_stat_activity WHERE application_name ="
                                      " 'inventoryd reprep'"),
                     0);
    struct pgc_stats s2 = s1;
    for (int i = 0; i < 250 && (s2.connects < 2 || !pgc_ready(c)); i++) {
        pge_run_for(e->base, 20);
        pgc_stats(c, &s2);
    }
    assert_int_equal(s2.connects, 2);
    assert_true(pgc_ready(c));

    sold += sell_each_scheme(e, e->base, c, "s2");
    pgc_stats(c, &s2);
    assert_int_equal(s2.prepares, 2 * s1.prepares); /* the same set, once more */
    pge_audit(e, "reprep", 100, sold);
    pgc_free(c);
}

struct sum_wait {
    int done, ok, bad;
    long long sum;
};

static void on_sum(void *arg, int rc, PGresult *const *res, int n)
{
    struct sum_wait *w = arg;
    w->done++;
    if (rc == 0 && n == 1 && PQresultStatus(res[0]) == PGRES_TUPLES_OK) {
        w->ok++;
        w->sum += atoll(PQgetvalue(res[0], 0, 0));
    } else {
        w->bad++;
    }
}

/* The table of prepared names is bounded (PGC_PREPARED_MAX; past it, statements go
 * unprepared and still run), and a name the server forgot (DEALLOCATE ALL) fails one
 * call with SQLSTATE 26000 and is prepared again by the next. */
static void test_prepared_table_bounded_and_healed(void **state)
{
    struct pg_env *e = *state;
    pgc_conn *c = pge_connect(e->base, e->pg, 5000);
    enum { N = PGC_PREPARED_MAX + 8 };
    static char text[N][64];
    struct sum_wait w = {0};
    const char *one[] = {"1"};
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < N; i++) {
            snprintf(text[i], sizeof text[i], "SELECT $1::int + %d", i);
            const struct pgc_stmt q = {text[i], 1, one};
            pgc_call(c, 0, PGC_PREPARE, &q, 1, on_sum, &w);
        }
    assert_true(pge_run_until(e->base, &w.done, 2 * N, 10000));
    assert_int_equal(w.ok, 2 * N);
    assert_int_equal(w.sum, 2 * (N + (long long)N * (N - 1) / 2));
    struct pgc_stats st;
    pgc_stats(c, &st);
    assert_int_equal(st.prepares, PGC_PREPARED_MAX);

    const struct pgc_stmt forget = {"DEALLOCATE ALL", 0, NULL};
    const struct pgc_stmt q = {text[0], 1, one};
    w = (struct sum_wait){0};
    pgc_call(c, 0, 0, &forget, 1, on_sum, &w); /* no tuples: counted bad */
    pgc_call(c, 0, PGC_PREPARE, &q, 1, on_sum, &w);
    assert_true(pge_run_until(e->base, &w.done, 2, 10000));
    assert_int_equal(w.bad, 2); /* the prepared name is gone: 26000 */
    w = (struct sum_wait){0};
    pgc_call(c, 0, PGC_PREPARE, &q, 1, on_sum, &w);
    assert_true(pge_run_until(e->base, &w.done, 1, 10000));
    assert_int_equal(w.ok, 1);
    assert_int_equal(w.sum, 1);
    pgc_stats(c, &st);
    assert_int_equal(st.prepares, PGC_PREPARED_MAX + 1);
    pgc_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migrate),
        cmocka_unit_test(test_idempotent_ids),
        cmocka_unit_test(test_row_frozen_holder),
        cmocka_unit_test(test_lease_fenced),
        cmocka_unit_test(test_optimistic_conflict),
        cmocka_unit_test(test_backend_killed),
        cmocka_unit_test(test_call_deadline),
        cmocka_unit_test(test_answered_on_close),
        cmocka_unit_test(test_prepared_again_after_reconnect),
        cmocka_unit_test(test_prepared_table_bounded_and_healed),
        cmocka_unit_test(test_server_restart),
    };
    int failed = cmocka_run_group_tests_name("pg_store", tests, pge_group_setup,
                                             pge_group_teardown);
    return h_exit_status(failed);
}
