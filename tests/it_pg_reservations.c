/* it_pg_reservations.c -- reservations on the PostgreSQL store over real HTTP on a real
 * PostgreSQL 15: place, replay, confirm, release, expiry by PostgreSQL's clock (a
 * confirm too late sells nothing), the sweeper returning a hold nobody touches, bad
 * input, restock/rebalance/reset/delete with holds outstanding, every lock scheme, and
 * a concurrent mix audited from the database itself. */
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
#include "tests/harness_view.h"
#include "tests/resv_env.h"

#define TOKEN "pgtoken"

static h_pg *pg;
static h_svc *svc; /* one instance for the group */

static int put_sku_hold(int port, const char *sku, long long stock, int segments,
                        const char *mode, const char *lock, int hold_ms)
{
    return h_put_sku_lock(port, TOKEN, sku, stock, segments, mode, lock, hold_ms);
}

static int put_sku(int port, const char *sku, long long stock, int segments,
                   const char *mode, const char *lock)
{
    return put_sku_hold(port, sku, stock, segments, mode, lock, 0);
}

/* The invariant from the database alone, per segment: stock + held + sold = the
 * segment's share, and over the SKU = skus.initial. 0, or the number of segments off
 * (-1: the SKU has no row). */
static long long db_audit(const char *sku)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT (SELECT initial FROM skus WHERE sku = '%s')"
             " - (SELECT coalesce(sum(stock), 0) FROM segments WHERE sku = '%s')"
             " - (SELECT coalesce(sum(h.qty), 0) FROM holds h JOIN skus k ON"
             " k.sku = h.sku AND k.epoch = h.epoch WHERE h.sku = '%s' AND"
             " h.state = 'held')"
             " - (SELECT coalesce(sum(qty), 0) FROM orders WHERE sku = '%s' AND"
             " record NOT LIKE '%%cancelled%%')",
             sku, sku, sku, sku);
    return h_pg_scalar(pg, sql);
}

static long long db(const char *fmt, const char *arg)
{
    char sql[512];
    snprintf(sql, sizeof sql, fmt, arg);
    return h_pg_scalar(pg, sql);
}

/* Until PostgreSQL's own clock has passed hold `id`'s expiry (up to 10 s). */
static void wait_expired(const char *id)
{
    for (int k = 0; k < 200; k++) {
        if (db("SELECT count(*) FROM holds WHERE hold_id = '%s' AND now() >= expires_at",
               id) == 1)
            return;
        usleep(50 * 1000);
    }
    fail_msg("hold %s never expired by PostgreSQL's clock", id);
}

/* ---- the tests ------------------------------------------------------------------ */

static void test_place_confirm_replay_release(void **state)
{
    (void)state;
    int port = h_svc_port(svc);
    assert_int_equal(put_sku(port, "r1", 10, 2, "lock", "row"), 0);

    struct h_resp r;
    assert_int_equal(rve_reserve(port, "r1", 3, 60, "h1", &r), 201);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "held");
    long long at = h_jint(j, "expires_at_ms");
    json_decref(j);
    h_resp_free(&r);
    /* the store's clock set it: now() + 60 s, to the millisecond */
    assert_int_equal(
        db("SELECT (extract(epoch FROM expires_at) * 1000)::bigint FROM holds"
           " WHERE hold_id = '%s'",
           "h1"),
        at);
    assert_int_equal(db("SELECT count(*) FROM holds WHERE hold_id = '%s' AND expires_at"
                        " BETWEEN now() + interval '50 s' AND now() + interval '61 s'",
                        "h1"),
                     1);

    /* a replay is the same hold; the id with another qty or SKU is refused */
    rve_replayed(port, "r1", "h1", 3, -1, 2);
    struct rve_nums n = rve_sku_nums(port, TOKEN, "r1");
    assert_int_equal(n.remaining, 7);
    assert_int_equal(n.reserved, 3);
    assert_int_equal(rve_on_resv(port, "GET", "h1", "", NULL), 200);

    /* confirm: the order (201), again 200, the order readable; release refused */
    rve_confirmed(port, port, "h1");
    assert_int_equal(h_order_status(port, "h1"), 200);
    assert_int_equal(db("SELECT count(*) FROM orders WHERE order_id = '%s'", "h1"), 1);
    n = rve_sku_nums(port, TOKEN, "r1");
    assert_int_equal(n.reserved, 0);
    assert_int_equal(n.sold, 3);
    assert_int_equal(db_audit("r1"), 0);

    /* release: the units back, idempotent; a confirm after it refused */
    assert_int_equal(rve_reserve(port, "r1", 2, 60, "h2", NULL), 201);
    assert_int_equal(rve_released(port, port, TOKEN, "r1", "h2").remaining, 7);

    /* an order's id cannot be a reservation's; a confirmed hold cancels as an order */
    assert_int_equal(h_order(port, "r1", 1, "ord-x", NULL), 201);
    assert_int_equal(rve_reserve(port, "r1", 1, 60, "ord-x", &r), 409);
    assert_int_equal(h_expect_error(&r, 409, "reservation_conflict"), 0);
    h_resp_free(&r);
    assert_int_equal(h_req(port, "DELETE", "/orders/h1", NULL, NULL, &r), 200);
    h_resp_free(&r);
    n = rve_sku_nums(port, TOKEN, "r1");
    assert_int_equal(n.remaining, 9);
    assert_int_equal(n.sold, 1);
    assert_int_equal(db_audit("r1"), 0);
}

/* A confirm at or past expires_at (PostgreSQL's now()) is refused in the transaction
 * that would sell: 410, no order row, the units back. */
static void test_confirm_after_expiry(void **state)
{
    (void)state;
    int port = h_svc_port(svc);
    assert_int_equal(put_sku(port, "ex", 5, 1, "lock", "row"), 0);
    assert_int_equal(rve_reserve(port, "ex", 2, 1, "e1", NULL), 201);
    wait_expired("e1");
    char code[64];
    assert_int_equal(rve_on_resv(port, "POST", "e1", "/confirm", code), 410);
    assert_string_equal(code, "reservation_expired");
    assert_int_equal(db("SELECT count(*) FROM orders WHERE order_id = '%s'", "e1"), 0);
    assert_int_equal(rve_on_resv(port, "POST", "e1", "/confirm", code), 410);
    assert_int_equal(db("SELECT count(*) FROM holds WHERE hold_id = '%s' AND"
                        " state = 'expired'",
                        "e1"),
                     1);
    struct rve_nums n = rve_sku_nums(port, TOKEN, "ex");
    assert_int_equal(n.remaining, 5);
    assert_int_equal(n.sold, 0);
    assert_int_equal(n.reserved, 0);
    /* a release of an expired hold answers what it became */
    assert_int_equal(rve_on_resv(port, "DELETE", "e1", "", NULL), 200);
    assert_int_equal(db_audit("ex"), 0);
}

/* Nobody touches the hold: the background sweep gives its units back. */
static void test_sweep_returns_expired(void **state)
{
    (void)state;
    int port = h_svc_port(svc);
    assert_int_equal(put_sku(port, "sw", 8, 2, "lock", "lease"), 0);
    assert_int_equal(rve_reserve(port, "sw", 4, 1, "s1", NULL), 201);
    assert_int_equal(db("SELECT sum(stock) FROM segments WHERE sku = '%s'", "sw"), 4);
    wait_expired("s1");
    bool back = false;
    for (int k = 0; k < 100 && !back; k++) { /* the sweeper looks every 250 ms */
        back = db("SELECT count(*) FROM holds WHERE hold_id = '%s' AND state = 'expired'",
                  "s1") == 1;
        if (!back)
            usleep(100 * 1000);
    }
    assert_true(back);
    assert_int_equal(db("SELECT sum(stock) FROM segments WHERE sku = '%s'", "sw"), 8);
    struct rve_nums n = rve_sku_nums(port, TOKEN, "sw");
    assert_int_equal(n.reserved, 0);
    assert_int_equal(n.remaining, 8);
    assert_int_equal(db_audit("sw"), 0);
    struct h_resp r;
    assert_int_equal(h_req(port, "GET", "/metrics", TOKEN, NULL, &r), 200);
    assert_true(h_metric(r.body, "inventory_reservations_expired_total") >= 1);
    h_resp_free(&r);
}

/* /metrics: the per-SKU gauge of held units follows the holds table. */
static void test_reserved_gauge(void **state)
{
    (void)state;
    int port = h_svc_port(svc);
    assert_int_equal(put_sku(port, "gm", 6, 2, "lock", "row"), 0);
    assert_int_equal(rve_reserve(port, "gm", 2, 60, "g1", NULL), 201);
    double v = -1;
    for (int k = 0; k < 100 && v != 2; k++) { /* the gauges' refresher catches up */
        struct h_resp r;
        assert_int_equal(h_req(port, "GET", "/metrics", TOKEN, NULL, &r), 200);
        v = h_metric(r.body, "inventory_sku_reserved{sku=\"gm\"}");
        h_resp_free(&r);
        if (v != 2)
            usleep(100 * 1000);
    }
    assert_true(v == 2);
    assert_int_equal(rve_on_resv(port, "DELETE", "g1", "", NULL), 200);
}

static void test_bad_input(void **state)
{
    (void)state;
    int port = h_svc_port(svc);
    assert_int_equal(put_sku(port, "bad", 4, 2, "lock", "row"), 0);
    struct h_resp r;
    assert_int_equal(rve_reserve(port, "bad", 1, 0, NULL, &r), 400); /* ttl 0 */
    h_resp_free(&r);
    assert_int_equal(rve_reserve(port, "bad", 1, 86401, NULL, &r), 400); /* past a day */
    h_resp_free(&r);
    assert_int_equal(rve_reserve(port, "bad", 0, 60, NULL, &r), 400);
    h_resp_free(&r);
    assert_int_equal(rve_reserve(port, "bad", 1, 60, "no spaces", &r), 400);
    h_resp_free(&r);
    assert_int_equal(rve_reserve(port, "nosuch", 1, 60, NULL, &r), 404);
    h_resp_free(&r);
    char code[64];
    assert_int_equal(rve_on_resv(port, "GET", "unknown-id", "", code), 404);
    assert_int_equal(rve_on_resv(port, "POST", "unknown-id", "/confirm", NULL), 404);
    assert_int_equal(rve_on_resv(port, "DELETE", "unknown-id", "", NULL), 404);
    /* 5 units are more than the SKU holds (a hold may span its segments) */
    assert_int_equal(rve_reserve(port, "bad", 5, 60, NULL, &r), 409);
    assert_int_equal(h_expect_error(&r, 409, "insufficient_stock"), 0);
    h_resp_free(&r);
    assert_int_equal(rve_reserve(port, "bad", 2, 60, "b1", NULL), 201);
    assert_int_equal(rve_reserve(port, "bad", 2, 60, "b2", NULL), 201);
    assert_int_equal(rve_reserve(port, "bad", 1, 60, NULL, &r), 409);
    assert_int_equal(h_expect_error(&r, 409, "sold_out"), 0);
    h_resp_free(&r);
    assert_int_equal(db_audit("bad"), 0);
    assert_int_equal(db("SELECT count(*) FROM holds WHERE sku = '%s'", "bad"), 2);
}

/* Restock and rebalance leave holds alone; reset and delete void them. */
static void test_admin_with_holds(void **state)
{
    (void)state;
    int port = h_svc_port(svc);
    assert_int_equal(put_sku(port, "adm", 8, 2, "lock", "row"), 0);
    assert_int_equal(rve_reserve(port, "adm", 3, 60, "a1", NULL), 201);
    struct h_resp r;
    assert_int_equal(
        h_req(port, "POST", "/admin/skus/adm/restock", TOKEN, "{\"qty\":4}", &r), 200);
    h_resp_free(&r);
    struct rve_nums n = rve_sku_nums(port, TOKEN, "adm");
    assert_int_equal(n.initial, 12);
    assert_int_equal(n.reserved, 3);
    assert_int_equal(n.remaining, 9);
    assert_int_equal(h_req(port, "POST", "/admin/skus/adm/rebalance", TOKEN, "{}", &r),
                     200);
    h_resp_free(&r);
    n = rve_sku_nums(port, TOKEN, "adm");
    assert_int_equal(n.reserved, 3);
    assert_int_equal(n.remaining, 9);
    assert_int_equal(db_audit("adm"), 0);
    assert_int_equal(rve_on_resv(port, "POST", "a1", "/confirm", NULL), 201);
    n = rve_sku_nums(port, TOKEN, "adm");
    assert_int_equal(n.sold, 3);
    assert_int_equal(db_audit("adm"), 0);

    /* reset: the old sale's holds are void (410), their units not part of the new one */
    char code[64];
    assert_int_equal(rve_reserve(port, "adm", 2, 60, "a2", NULL), 201);
    assert_int_equal(put_sku(port, "adm", 6, 3, "lock", "row"), 0);
    assert_int_equal(rve_on_resv(port, "GET", "a2", "", code), 410);
    assert_string_equal(code, "reservation_void");
    assert_int_equal(rve_on_resv(port, "POST", "a2", "/confirm", NULL), 410);
    assert_int_equal(rve_on_resv(port, "DELETE", "a2", "", NULL), 410);
    n = rve_sku_nums(port, TOKEN, "adm");
    assert_int_equal(n.remaining, 6);
    assert_int_equal(n.reserved, 0);
    /* the id is free again in the new sale */
    assert_int_equal(rve_reserve(port, "adm", 1, 60, "a2", NULL), 201);
    assert_int_equal(db_audit("adm"), 0);

    /* delete with a hold outstanding: void; the SKU made again does not see it */
    assert_int_equal(h_req(port, "DELETE", "/admin/skus/adm", TOKEN, NULL, &r), 200);
    h_resp_free(&r);
    assert_int_equal(rve_on_resv(port, "GET", "a2", "", code), 410);
    assert_int_equal(rve_on_resv(port, "POST", "a2", "/confirm", NULL), 410);
    assert_int_equal(put_sku(port, "adm", 5, 1, "atomic", NULL), 0);
    assert_int_equal(rve_on_resv(port, "POST", "a2", "/confirm", NULL), 410);
    n = rve_sku_nums(port, TOKEN, "adm");
    assert_int_equal(n.remaining, 5);
    assert_int_equal(n.reserved, 0);
    assert_int_equal(db_audit("adm"), 0);
}

/* Every lock scheme: a hold, a confirm, a release, orders between them. */
static void test_every_scheme(void **state)
{
    (void)state;
    int port = h_svc_port(svc);
    static const char *const lock[][2] = {
        {"lock", "row"}, {"lock", "lease"}, {"lock", "optimistic"}, {"atomic", NULL}};
    for (size_t i = 0; i < sizeof lock / sizeof lock[0]; i++) {
        char sku[32], id1[32], id2[32];
        snprintf(sku, sizeof sku, "sch-%zu", i);
        snprintf(id1, sizeof id1, "sch-%zu-a", i);
        snprintf(id2, sizeof id2, "sch-%zu-b", i);
        assert_int_equal(put_sku(port, sku, 9, 3, lock[i][0], lock[i][1]), 0);
        assert_int_equal(rve_reserve(port, sku, 2, 60, id1, NULL), 201);
        assert_int_equal(h_order(port, sku, 2, NULL, NULL), 201);
        assert_int_equal(rve_reserve(port, sku, 3, 60, id2, NULL), 201);
        assert_int_equal(rve_on_resv(port, "POST", id1, "/confirm", NULL), 201);
        assert_int_equal(rve_on_resv(port, "DELETE", id2, "", NULL), 200);
        struct rve_nums n = rve_sku_nums(port, TOKEN, sku);
        assert_int_equal(n.sold, 4);
        assert_int_equal(n.remaining, 5);
        assert_int_equal(db_audit(sku), 0);
    }
}

struct held_sale {
    int port;
    const char *sku;
    int order_status, reserve_status;
};

/* idx 0: an order of the whole stock, holding the segment's lock 1 s; idx 1, 300 ms
 * into that hold: a reservation of one unit. */
static void order_vs_hold(int idx, void *arg)
{
    struct held_sale *h = arg;
    if (idx == 0) {
        h->order_status = h_order(h->port, h->sku, 5, NULL, NULL);
    } else {
        usleep(300 * 1000);
        h->reserve_status = rve_reserve(h->port, h->sku, 1, 60, NULL, NULL);
    }
}

/* A hold takes no units from a segment whose lock an order holds (row: its open
 * transaction; lease: its lease): the order sells what it saw, the hold waits and
 * then finds the SKU sold out (409) or gives up (503). */
static void test_hold_respects_segment_lock(void **state)
{
    (void)state;
    int port = h_svc_port(svc);
    static const char *const lock[] = {"row", "lease"};
    for (size_t i = 0; i < sizeof lock / sizeof lock[0]; i++) {
        char sku[32];
        snprintf(sku, sizeof sku, "lk-%s", lock[i]);
        assert_int_equal(put_sku_hold(port, sku, 5, 1, "lock", lock[i], 1000), 0);
        struct held_sale h = {.port = port, .sku = sku};
        assert_int_equal(h_parallel(2, order_vs_hold, &h), 0);
        assert_int_equal(h.order_status, 201);
        assert_true(h.reserve_status == 409 || h.reserve_status == 503);
        struct rve_nums n = rve_sku_nums(port, TOKEN, sku);
        assert_int_equal(n.sold, 5);
        assert_int_equal(n.reserved, 0);
        assert_int_equal(db_audit(sku), 0);
    }
}

/* idx 0: an order of one unit holding the only segment's row 1.5 s (longer than
 * redis_timeout_ms, the worker's statement bound, 1 s here); idx 1, 300 ms into that
 * hold: the release of hold `id` on that segment. */
struct held_release {
    int port;
    int order_status, release_status;
    char code[64];
};

static void order_vs_release(int idx, void *arg)
{
    struct held_release *h = arg;
    if (idx == 0) {
        h->order_status = h_order(h->port, "rl", 1, NULL, NULL);
    } else {
        usleep(300 * 1000);
        h->release_status = rve_on_resv(h->port, "DELETE", "rl-1", "", h->code);
    }
}

/* A release waits for its segment's row as an order waits for a segment (up to
 * lock_wait_ms, 2 s), not a network timeout (redis_timeout_ms): a `row` holder (an
 * order holding 1.5 s here; a chain of orders handed on within ttl/3 alike) made it
 * 503 backend_unavailable while PostgreSQL was up. */
static void test_release_waits_for_row_holder(void **state)
{
    (void)state;
    int port = h_svc_port(svc);
    assert_int_equal(put_sku_hold(port, "rl", 10, 1, "lock", "row", 1500), 0);
    assert_int_equal(rve_reserve(port, "rl", 2, 60, "rl-1", NULL), 201);
    struct held_release h = {.port = port};
    assert_int_equal(h_parallel(2, order_vs_release, &h), 0);
    if (h.release_status != 200)
        print_message("release: %d %s\n", h.release_status, h.code);
    assert_int_equal(h.order_status, 201);
    assert_int_equal(h.release_status, 200);
    struct rve_nums n = rve_sku_nums(port, TOKEN, "rl");
    assert_int_equal(n.remaining, 9);
    assert_int_equal(n.reserved, 0);
    assert_int_equal(n.sold, 1);
    assert_int_equal(db_audit("rl"), 0);
}

struct mix {
    int port;
    _Atomic long long placed, confirmed, released, ordered, failed;
};

/* Holds, confirms, releases, 1 s holds left to expire, and orders, all at once. A 503
 * of a place or an order is an outcome the client does not know (the audit then
 * judges what the store holds); a confirm or a release answers (a release waits for a
 * `row` order chain holding its segment's row: test_release_waits_for_row_holder).
 * Anything else is a failure, printed. */
static void mixer(int idx, void *arg)
{
    struct mix *m = arg;
    for (int k = 0; k < 60; k++) {
        char id[48];
        snprintf(id, sizeof id, "mx-%d-%d", idx, k);
        int st = rve_reserve(m->port, "mix", 1 + k % 2, k % 5 == 0 ? 1 : 30, id, NULL);
        if (st == 201) {
            atomic_fetch_add(&m->placed, 1);
            char code[64] = "";
            int c = k % 3 == 0   ? rve_on_resv(m->port, "DELETE", id, "", code)
                    : k % 5 == 0 ? 0
                                 : rve_on_resv(m->port, "POST", id, "/confirm", code);
            if (c == 200 && k % 3 == 0) {
                atomic_fetch_add(&m->released, 1);
            } else if (c == 201) {
                atomic_fetch_add(&m->confirmed, 1);
            } else if (c != 0) {
                atomic_fetch_add(&m->failed, 1);
                fprintf(stderr, "mix: %s of %s: %d %s\n",
                        k % 3 == 0 ? "release" : "confirm", id, c, code);
            }
        } else if (st != 409 && st != 503) {
            atomic_fetch_add(&m->failed, 1);
            fprintf(stderr, "mix: reserve %s: %d\n", id, st);
        }
        st = h_order(m->port, "mix", 1, NULL, NULL);
        if (st == 201) {
            atomic_fetch_add(&m->ordered, 1);
        } else if (st != 409 && st != 503) {
            atomic_fetch_add(&m->failed, 1);
            fprintf(stderr, "mix: order: %d\n", st);
        }
    }
}

static void test_concurrent_mix_audited(void **state)
{
    (void)state;
    int port = h_svc_port(svc);
    assert_int_equal(put_sku(port, "mix", 400, 4, "lock", "row"), 0);
    struct mix m = {.port = port};
    assert_int_equal(h_parallel(6, mixer, &m), 0);
    print_message("mix: %lld placed, %lld confirmed, %lld released, %lld orders, "
                  "%lld failed\n",
                  (long long)m.placed, (long long)m.confirmed, (long long)m.released,
                  (long long)m.ordered, (long long)m.failed);
    assert_int_equal(m.failed, 0);
    assert_true(m.placed > 0 && m.confirmed > 0 && m.released > 0);
    assert_int_equal(db_audit("mix"), 0);
    /* every confirm sold once: the order rows of holds are the confirmed holds */
    assert_int_equal(db("SELECT count(*) FROM orders o JOIN holds h ON h.hold_id ="
                        " o.order_id WHERE o.sku = '%s'",
                        "mix"),
                     m.confirmed);
    assert_int_equal(db("SELECT count(*) FROM holds WHERE sku = '%s' AND state ="
                        " 'confirmed'",
                        "mix"),
                     m.confirmed);
    struct rve_nums n = rve_sku_nums(port, TOKEN, "mix");
    assert_int_equal(n.initial, 400);
}

/* ---- holds over several segments ------------------------------------------------ */

/* The parts of a hold's or an order's JSON (r's body): their qty summed, their count
 * in *n. */
static long long parts_sum(const struct h_resp *r, size_t *n)
{
    json_t *j = json_loads(r->body, 0, NULL);
    long long sum = rve_parts_sum(j, n);
    json_decref(j);
    return sum;
}

/* A hold no one segment can give takes parts of several in one transaction, all or
 * nothing: confirm sells every part (one order over those segments; a cancel returns
 * them), release returns every part, restock/rebalance/reset keep the sums. */
static void test_multi_segment_hold(void **state)
{
    (void)state;
    int port = h_svc_port(svc);
    assert_int_equal(put_sku(port, "mp", 10, 2, "lock", "row"), 0);
    struct h_resp r;
    size_t n;
    assert_int_equal(rve_reserve(port, "mp", 7, 60, "mp1", &r), 201);
    assert_int_equal(parts_sum(&r, &n), 7);
    assert_int_equal(n, 2);
    h_resp_free(&r);
    struct rve_nums s = rve_sku_nums(port, TOKEN, "mp");
    assert_int_equal(s.reserved, 7);
    assert_int_equal(s.remaining, 3);
    assert_int_equal(db_audit("mp"), 0);
    assert_int_equal(rve_reserve(port, "mp", 7, 60, "mp1", &r), 200);
    assert_int_equal(parts_sum(&r, &n), 7);
    h_resp_free(&r);
    assert_int_equal(rve_reserve(port, "mp", 6, 60, "mp1", NULL), 409);
    assert_int_equal(h_req(port, "GET", "/reservations/mp1", NULL, NULL, &r), 200);
    assert_int_equal(parts_sum(&r, &n), 7);
    assert_int_equal(n, 2);
    h_resp_free(&r);
    /* confirm: one order of 7 over both segments; again 200 */
    rve_confirmed(port, port, "mp1");
    assert_int_equal(h_req(port, "GET", "/orders/mp1", NULL, NULL, &r), 200);
    assert_int_equal(parts_sum(&r, &n), 7);
    assert_int_equal(n, 2);
    h_resp_free(&r);
    s = rve_sku_nums(port, TOKEN, "mp");
    assert_int_equal(s.reserved, 0);
    assert_int_equal(s.sold, 7);
    assert_int_equal(db_audit("mp"), 0);
    assert_int_equal(h_req(port, "DELETE", "/orders/mp1", NULL, NULL, &r), 200);
    h_resp_free(&r);
    s = rve_sku_nums(port, TOKEN, "mp");
    assert_int_equal(s.sold, 0);
    assert_int_equal(s.remaining, 10);

    /* restock and rebalance with a multi-part hold outstanding, then release */
    assert_int_equal(rve_reserve(port, "mp", 9, 60, "mp2", NULL), 201);
    assert_int_equal(
        h_req(port, "POST", "/admin/skus/mp/restock", TOKEN, "{\"qty\":4}", &r), 200);
    h_resp_free(&r);
    assert_int_equal(h_req(port, "POST", "/admin/skus/mp/rebalance", TOKEN, NULL, &r),
                     200);
    h_resp_free(&r);
    s = rve_sku_nums(port, TOKEN, "mp");
    assert_int_equal(s.reserved, 9);
    assert_int_equal(s.remaining, 5);
    assert_int_equal(db_audit("mp"), 0);
    assert_int_equal(rve_released(port, port, TOKEN, "mp", "mp2").remaining, 14);
    /* all or nothing: more than the SKU holds takes nothing */
    assert_int_equal(rve_reserve(port, "mp", 15, 60, "mp3", NULL), 409);
    assert_int_equal(rve_on_resv(port, "GET", "mp3", "", NULL), 404);
    /* a reset voids every part */
    assert_int_equal(rve_reserve(port, "mp", 12, 60, "mp4", NULL), 201);
    assert_int_equal(put_sku(port, "mp", 10, 2, "lock", "row"), 0);
    assert_int_equal(rve_on_resv(port, "POST", "mp4", "/confirm", NULL), 410);
    s = rve_sku_nums(port, TOKEN, "mp");
    assert_int_equal(s.reserved, 0);
    assert_int_equal(s.remaining, 10);
    assert_int_equal(db_audit("mp"), 0);
}

/* idx 0: an order of one segment's whole stock (3), holding that segment's lock 1 s;
 * idx 1, 300 ms into that hold: a reservation of 4, which only both segments hold. */
static void order_vs_multi_hold(int idx, void *arg)
{
    struct held_sale *h = arg;
    if (idx == 0) {
        h->order_status = h_order(h->port, h->sku, 3, NULL, NULL);
    } else {
        usleep(300 * 1000);
        h->reserve_status = rve_reserve(h->port, h->sku, 4, 60, NULL, NULL);
    }
}

/* A multi-part hold takes no part from a segment whose lock an order holds: the order
 * sells its segment, the hold (which would need both) waits and then finds too little
 * (409) or gives up (503); never a part of the locked segment. */
static void test_multi_segment_hold_respects_lock(void **state)
{
    (void)state;
    int port = h_svc_port(svc);
    static const char *const lock[] = {"row", "lease"};
    for (size_t i = 0; i < sizeof lock / sizeof lock[0]; i++) {
        char sku[32];
        snprintf(sku, sizeof sku, "mlk-%s", lock[i]);
        assert_int_equal(put_sku_hold(port, sku, 6, 2, "lock", lock[i], 1000), 0);
        struct held_sale h = {.port = port, .sku = sku};
        assert_int_equal(h_parallel(2, order_vs_multi_hold, &h), 0);
        assert_int_equal(h.order_status, 201);
        assert_true(h.reserve_status == 409 || h.reserve_status == 503);
        struct rve_nums n = rve_sku_nums(port, TOKEN, sku);
        assert_int_equal(n.sold, 3);
        assert_int_equal(n.reserved, 0);
        assert_int_equal(n.remaining, 3);
        assert_int_equal(db_audit(sku), 0);
    }
}

/* A multi-part hold expires as one (PostgreSQL's clock): a confirm too late sells
 * nothing and every part is back; one nobody touches is returned by the sweeper. */
static void test_multi_segment_expiry(void **state)
{
    (void)state;
    int port = h_svc_port(svc);
    assert_int_equal(put_sku(port, "mx", 6, 3, "lock", "lease"), 0);
    assert_int_equal(rve_reserve(port, "mx", 5, 1, "mx1", NULL), 201);
    assert_int_equal(rve_sku_nums(port, TOKEN, "mx").reserved, 5);
    wait_expired("mx1");
    char code[64];
    assert_int_equal(rve_on_resv(port, "POST", "mx1", "/confirm", code), 410);
    assert_string_equal(code, "reservation_expired");
    assert_int_equal(db("SELECT count(*) FROM orders WHERE order_id = '%s'", "mx1"), 0);
    struct rve_nums s = rve_sku_nums(port, TOKEN, "mx");
    assert_int_equal(s.remaining, 6);
    assert_int_equal(s.reserved, 0);
    assert_int_equal(db_audit("mx"), 0);
    /* the sweeper: all 6 held for 1 s, nobody asks */
    assert_int_equal(rve_reserve(port, "mx", 6, 1, "mx2", NULL), 201);
    assert_int_equal(db("SELECT sum(stock) FROM segments WHERE sku = '%s'", "mx"), 0);
    wait_expired("mx2");
    bool back = false;
    for (int k = 0; k < 100 && !back; k++) { /* the sweeper looks every 250 ms */
        back = db("SELECT count(*) FROM holds WHERE hold_id = '%s' AND state = 'expired'",
                  "mx2") == 1;
        if (!back)
            usleep(100 * 1000);
    }
    assert_true(back);
    assert_int_equal(db("SELECT sum(stock) FROM segments WHERE sku = '%s'", "mx"), 6);
    s = rve_sku_nums(port, TOKEN, "mx");
    assert_int_equal(s.reserved, 0);
    assert_int_equal(s.remaining, 6);
    assert_int_equal(db_audit("mx"), 0);
    assert_int_equal(rve_on_resv(port, "POST", "mx2", "/confirm", NULL), 410);
}

static int setup(void **state)
{
    (void)state;
    pg = h_pg_start();
    if (pg == NULL)
        return -1;
    const char *args[] = {"--store",
                          h_pg_conninfo(pg),
                          "--admin-token",
                          TOKEN,
                          "--lock-ttl-ms",
                          "3000",
                          "--threads",
                          "2",
                          NULL};
    struct h_svc_opts o = {.args = args, .no_redis_flag = true};
    svc = h_svc_start(NULL, &o);
    return svc != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    int rc = svc != NULL ? h_svc_stop_clean(svc) : 0;
    h_svc_free(svc);
    h_pg_free(pg);
    return rc;
}

/* Every view read while holds are placed, released, confirmed and expire adds up:
 * remaining + reserved + sold = initial (issue 25). */
static void test_view_consistent_under_holds(void **state)
{
    (void)state;
    int port = h_svc_port(svc);
    assert_int_equal(put_sku(port, "view", 100000, 4, "lock", "row"), 0);
    struct h_view_storm v;
    assert_int_equal(h_view_storm(&port, 1, TOKEN, "view", 4, 1500, &v), 0);
    print_message("view storm: %d views, %d off, %lld hold steps\n", v.views, v.bad,
                  v.steps);
    assert_true(v.views > 20 && v.steps > 20);
    if (v.bad > 0)
        fail_msg("%d of %d views broke the invariant; first: %s", v.bad, v.views,
                 v.first);
    rve_sku_nums(port, TOKEN, "view");
}

/* The same while restocks run: initial is read in the view's one statement, so a
 * restock never falls between the settings and the numbers. */
static void test_view_consistent_under_restocks(void **state)
{
    (void)state;
    int port = h_svc_port(svc);
    assert_int_equal(put_sku(port, "view2", 100000, 4, "lock", "row"), 0);
    struct h_view_storm v;
    assert_int_equal(h_view_storm_restocks(&port, 1, TOKEN, "view2", 3, 1500, &v), 0);
    print_message("view storm with restocks: %d views, %d off, %lld steps\n", v.views,
                  v.bad, v.steps);
    assert_true(v.views > 20 && v.steps > 20);
    if (v.bad > 0)
        fail_msg("%d of %d views broke the invariant; first: %s", v.bad, v.views,
                 v.first);
    rve_sku_nums(port, TOKEN, "view2");
}

/* An order under a live hold's id (the order path does not look at holds): the order
 * is an order, the hold a hold that cannot be confirmed (409), GET and release true;
 * the tables agree. */
static void test_order_under_hold_id(void **state)
{
    (void)state;
    int port = h_svc_port(svc);
    assert_int_equal(put_sku(port, "r-oid", 10, 2, "lock", "row"), 0);
    rve_order_under_hold(port, TOKEN, "r-oid", "poid-1", 2);
    assert_int_equal(db_audit("r-oid"), 0);
    assert_int_equal(db("SELECT count(*) FROM holds WHERE hold_id = '%s' AND"
                        " state = 'released'",
                        "poid-1"),
                     1);
    /* a hold over both segments */
    assert_int_equal(put_sku(port, "r-oidm", 10, 2, "lock", "row"), 0);
    rve_order_under_hold(port, TOKEN, "r-oidm", "poidm-1", 7);
    assert_int_equal(db_audit("r-oidm"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_place_confirm_replay_release),
        cmocka_unit_test(test_order_under_hold_id),
        cmocka_unit_test(test_confirm_after_expiry),
        cmocka_unit_test(test_sweep_returns_expired),
        cmocka_unit_test(test_reserved_gauge),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_admin_with_holds),
        cmocka_unit_test(test_every_scheme),
        cmocka_unit_test(test_hold_respects_segment_lock),
        cmocka_unit_test(test_release_waits_for_row_holder),
        cmocka_unit_test(test_concurrent_mix_audited),
        cmocka_unit_test(test_view_consistent_under_holds),
        cmocka_unit_test(test_view_consistent_under_restocks),
        cmocka_unit_test(test_multi_segment_hold),
        cmocka_unit_test(test_multi_segment_expiry),
        cmocka_unit_test(test_multi_segment_hold_respects_lock),
    };
    return h_exit_status(cmocka_run_group_tests(tests, setup, teardown));
}
