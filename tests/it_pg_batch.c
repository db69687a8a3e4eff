/* it_pg_batch.c -- group commit (a SKU's "batch") on the PostgreSQL store over HTTP:
 * one hold of a segment's lock (row, lease) or one turn of the loop (hold 0, atomic)
 * sells the orders queued for the segment in one statement, exactly, each with its own
 * answer; a holder that lost its lock sells nothing of its batch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "tests/harness_sale.h"
#include "tests/harness_pg.h"

#define TOKEN "pgtoken"

struct env {
    h_pg *pg;
    h_svc *svc; /* one event loop: every order meets the others in its queue */
    int port;
};

static h_svc *start_svc(const h_pg *pg, const char *ttl_ms)
{
    const char *args[] = {"--store",
                          h_pg_conninfo(pg),
                          "--admin-token",
                          TOKEN,
                          "--lock-ttl-ms",
                          ttl_ms,
                          "--threads",
                          "1",
                          "--lock-wait-ms",
                          "8000",
                          NULL};
    struct h_svc_opts o = {.args = args, .no_redis_flag = true};
    return h_svc_start(NULL, &o);
}

static int group_setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    e->pg = h_pg_start();
    if (e->pg == NULL)
        return -1;
    e->svc = start_svc(e->pg, "3000");
    if (e->svc == NULL)
        return -1;
    e->port = h_svc_port(e->svc);
    *state = e;
    return 0;
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    int rc = h_svc_stop_clean(e->svc);
    h_svc_free(e->svc);
    h_pg_free(e->pg);
    free(e);
    return rc;
}

/* PUT the SKU: `mode` "lock" with `lock` (row, lease) or "atomic" (lock NULL). */
static int put_batch(int port, const char *sku, long long stock, int segments,
                     const char *mode, const char *lock, int hold_ms, int batch)
{
    char path[256], body[256];
    snprintf(path, sizeof path, "/admin/skus/%s?reset=true", sku);
    snprintf(body, sizeof body,
             "{\"stock\": %lld, \"segments\": %d, \"mode\": \"%s\", \"hold_ms\": %d,"
             " \"batch\": %d%s%s%s}",
             stock, segments, mode, hold_ms, batch, lock ? ", \"lock\": \"" : "",
             lock ? lock : "", lock ? "\"" : "");
    struct h_resp r;
    int st = h_req(port, "PUT", path, TOKEN, body, &r);
    if (st != 200 && st != 201)
        fprintf(stderr, "PUT %s %s -> %d %s\n", path, body, st, r.body);
    h_resp_free(&r);
    return st == 200 || st == 201 ? 0 : -1;
}

/* From the tables: stock + the units of the order rows == initial, none below zero,
 * and `rows` order rows. */
static void audit_rows(const h_pg *pg, const char *sku, long long initial, long long rows)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT (SELECT sum(stock) FROM segments WHERE sku = '%s') +"
             " (SELECT coalesce(sum(qty), 0) FROM orders WHERE sku = '%s')",
             sku, sku);
    assert_int_equal(h_pg_scalar(pg, sql), initial);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM segments WHERE sku = '%s' AND stock < 0", sku);
    assert_int_equal(h_pg_scalar(pg, sql), 0);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM orders WHERE sku = '%s'", sku);
    assert_int_equal(h_pg_scalar(pg, sql), rows);
}

/* The PostgreSQL store keeps a SKU's batch: a PUT with batch 64 is accepted and read
 * back (it was refused 400 before the store could sell in batches). */
static void test_pg_batch_setting(void **state)
{
    struct env *e = *state;
    assert_int_equal(put_batch(e->port, "pb-set", 10, 2, "lock", "row", 0, 64), 0);
    json_t *j = h_get_sku(e->port, TOKEN, "pb-set");
    assert_non_null(j);
    assert_int_equal(h_jint(j, "batch"), 64);
    json_decref(j);
    assert_int_equal(put_batch(e->port, "pb-set", 10, 2, "lock", "row", 0, 1), 0);
    j = h_get_sku(e->port, TOKEN, "pb-set");
    assert_int_equal(h_jint(j, "batch"), 1);
    json_decref(j);
}

/* 100 orders at once on one segment of 50 with a 100 ms hold and batch 64: the batches
 * overrun the stock, exactly 50 sell, every other order 409; far fewer holds than
 * sales (unbatched: 50 holds, 5 s). */
static void sellout_exact(struct env *e, const char *sku, const char *lock)
{
    h_deadline(60);
    assert_int_equal(put_batch(e->port, sku, 50, 1, "lock", lock, 100, 64), 0);
    long long batches0 = h_stat(e->port, TOKEN, "batches");
    long long batched0 = h_stat(e->port, TOKEN, "batched_orders");
    struct h_crowd c = {.port = e->port, .sku = sku};
    assert_int_equal(h_crowd_run(&c, 100), 0);
    long long batches = h_stat(e->port, TOKEN, "batches") - batches0;
    long long batched = h_stat(e->port, TOKEN, "batched_orders") - batched0;
    fprintf(stderr, "%s: 201 %d, sold out %d, other %d; %lld batches of %lld orders\n",
            lock, c.created, c.sold_out, c.other + c.unavailable, batches, batched);
    assert_int_equal(c.created, 50);
    assert_int_equal(c.sold_out, 50);
    assert_int_equal(c.other + c.unavailable, 0);
    assert_int_equal(h_audit(e->port, TOKEN, sku, 50, true), 0);
    audit_rows(e->pg, sku, 50, 50);
    assert_true(batches >= 1);
    assert_true(batched >= 2 * batches);
    assert_true(batches <= 25);
}

static void test_pg_batch_sellout_row(void **state)
{
    sellout_exact(*state, "pb-row", "row");
}

static void test_pg_batch_sellout_lease(void **state)
{
    sellout_exact(*state, "pb-lease", "lease");
}

/* optimistic: the batch is conditional on the version the holder's ACQUIRE read */
static void test_pg_batch_sellout_optimistic(void **state)
{
    sellout_exact(*state, "pb-opt", "optimistic");
}

/* The same order id sent by 30 clients at once into batches: one sale, every other
 * answer the replay of its record (200). */
static void test_pg_batch_duplicate_ids(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    static const char *const locks[] = {"row", "lease"};
    for (int k = 0; k < 2; k++) {
        char sku[32], id[48];
        snprintf(sku, sizeof sku, "pb-dup-%s", locks[k]);
        snprintf(id, sizeof id, "pb-dup-order-%s", locks[k]);
        assert_int_equal(put_batch(e->port, sku, 10, 1, "lock", locks[k], 100, 64), 0);
        long long batched0 = h_stat(e->port, TOKEN, "batched_orders");
        struct h_crowd c = {.port = e->port, .sku = sku, .id = id};
        assert_int_equal(h_crowd_run(&c, 30), 0);
        fprintf(stderr, "%s: 201 %d, 200 %d, other %d; %lld batched\n", locks[k],
                c.created, c.replayed, c.other + c.unavailable,
                h_stat(e->port, TOKEN, "batched_orders") - batched0);
        assert_int_equal(c.created, 1);
        assert_int_equal(c.replayed, 29);
        assert_int_equal(c.other + c.unavailable, 0);
        assert_true(h_stat(e->port, TOKEN, "batched_orders") - batched0 >= 2);
        audit_rows(e->pg, sku, 10, 1);
    }
}

/* Hold 0 (lock: row, lease, optimistic) and atomic: the orders that meet in one turn of
 * the loop go in one statement (no stock limit there: batches overrun the 50 units, the
 * statement sells what fits and the rest answer 409); exactly 50 sell. */
static void hold0(struct env *e, const char *sku, const char *mode, const char *lock)
{
    assert_int_equal(put_batch(e->port, sku, 50, 1, mode, lock, 0, 64), 0);
    long long batches0 = h_stat(e->port, TOKEN, "batches");
    long long batched0 = h_stat(e->port, TOKEN, "batched_orders");
    struct h_crowd c = {.port = e->port, .sku = sku};
    assert_int_equal(h_crowd_run(&c, 100), 0);
    long long batches = h_stat(e->port, TOKEN, "batches") - batches0;
    long long batched = h_stat(e->port, TOKEN, "batched_orders") - batched0;
    fprintf(stderr, "%s: 201 %d, sold out %d, other %d; %lld batches of %lld orders\n",
            sku, c.created, c.sold_out, c.other + c.unavailable, batches, batched);
    assert_int_equal(c.created, 50);
    assert_int_equal(c.sold_out, 50);
    assert_int_equal(c.other + c.unavailable, 0);
    assert_int_equal(h_audit(e->port, TOKEN, sku, 50, true), 0);
    audit_rows(e->pg, sku, 50, 50);
    assert_true(batches >= 1);
}

static void test_pg_batch_hold0(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    hold0(e, "pb-h0-row", "lock", "row");
    hold0(e, "pb-h0-lease", "lock", "lease");
    hold0(e, "pb-h0-opt", "lock", "optimistic");
    hold0(e, "pb-h0-atomic", "atomic", NULL);
}

/* Three clients in four order 7 units (more than a segment's 5: several segments in
 * one statement), the others 1 unit (batched), at once on 4 segments of 5: nothing
 * oversold, every unit a 201 sold is in the tables. */
static long long mixed_qty(int idx)
{
    return idx % 4 ? 7 : 1;
}

static void multi_beside(struct env *e, const char *lock, int batch)
{
    h_deadline(60);
    char sku[48];
    snprintf(sku, sizeof sku, "pb-multi-%s-%d", lock, batch);
    assert_int_equal(put_batch(e->port, sku, 20, 4, "lock", lock, 20, batch), 0);
    struct h_crowd c = {.port = e->port, .sku = sku, .qty = mixed_qty};
    assert_int_equal(h_crowd_run(&c, 40), 0);
    fprintf(stderr, "%s: 201 %d (%lld units), sold out %d, insufficient %d, other %d\n",
            sku, c.created, c.units, c.sold_out, c.insufficient, c.other + c.unavailable);
    assert_int_equal(c.other + c.unavailable, 0);
    assert_int_equal(h_audit(e->port, TOKEN, sku, 20, false), 0);
    audit_rows(e->pg, sku, 20, c.created);
    json_t *j = h_get_sku(e->port, TOKEN, sku);
    assert_int_equal(h_jint(j, "sold"), c.units);
    json_decref(j);
    assert_true(c.units >= 14);
    assert_true(c.units <= 20);
}

static void test_pg_batch_beside_multi_segment_orders(void **state)
{
    multi_beside(*state, "row", 16);
    multi_beside(*state, "lease", 16);
}

/* The same crowd unbatched on `lease`: a multi-segment deduction that sells nothing
 * (a part short by the time it runs) gives its parts' leases back, as the engine
 * expects of every store (a Redis script releases its tokens' locks whatever it
 * answers); kept until they expired, they made the orders after them wait out
 * lock_wait_ms and answer 503 busy. */
static void test_pg_lease_multi_gives_leases_back(void **state)
{
    multi_beside(*state, "lease", 1);
}

/* ---- a holder that lost its lock ------------------------------------------------ */

struct lost {
    struct env *e;
    h_svc *a;
    const char *sku;
    struct h_crowd on_a, on_b;
    void (*lose)(struct lost *l); /* A's holder loses its lock, B sells everything */
    bool held;
};

static void lost_b(int idx, void *ctx)
{
    h_crowd_order(idx, &((struct lost *)ctx)->on_b);
}

static void lost_main(int idx, void *ctx)
{
    struct lost *l = ctx;
    if (idx > 0) {
        h_crowd_order(idx, &l->on_a);
        return;
    }
    /* The controller: A holds the segment with its other orders queued behind it. */
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM segments WHERE sku = '%s' AND lease_until > now()"
             " UNION ALL SELECT count(*) FROM pg_stat_activity WHERE"
             " state = 'idle in transaction' ORDER BY 1 DESC LIMIT 1",
             l->sku);
    long long end = h_now_ms() + 10000;
    while (!(l->held = h_pg_scalar(l->e->pg, sql) > 0) && h_now_ms() < end)
        h_sleep_ms(5);
    if (!l->held)
        return;
    h_sleep_ms(150); /* A's other orders queue up behind the holder */
    l->lose(l);
    pthread_mutex_init(&l->on_b.mu, NULL);
    h_parallel(12, lost_b, l);
    pthread_mutex_destroy(&l->on_b.mu);
    h_svc_resume(l->a);
}

/* lease: A frozen (SIGSTOP) past its 500 ms lease. */
static void freeze_a(struct lost *l)
{
    assert_int_equal(h_svc_pause(l->a), 0);
    h_sleep_ms(700);
}

/* row: the backend of A's open transaction terminated (A goes on running). */
static void terminate_a(struct lost *l)
{
    assert_true(
        h_pg_scalar(l->e->pg,
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE state = 'idle in transaction'") >= 1);
}

/* A's holder (hold 1500 ms) has 9 orders of its loop queued when it loses its lock;
 * B sells all 10 units. A's batch then goes to a lock it no longer holds: none of it
 * is sold or recorded (lease: FENCED, 409; row: the transaction is gone, 503). */
static void lost_batch(struct env *e, const char *sku, const char *lock, const char *ttl,
                       void (*lose)(struct lost *l))
{
    h_deadline(90);
    h_svc *a = start_svc(e->pg, ttl);
    assert_non_null(a);
    h_svc *b = start_svc(e->pg, ttl);
    assert_non_null(b);
    struct lost l;
    memset(&l, 0, sizeof l);
    l.e = e;
    l.a = a;
    l.sku = sku;
    l.lose = lose;
    l.on_a = (struct h_crowd){.port = h_svc_port(a), .sku = sku};
    l.on_b = (struct h_crowd){.port = h_svc_port(b), .sku = sku};
    pthread_mutex_init(&l.on_a.mu, NULL);
    assert_int_equal(put_batch(l.on_b.port, sku, 10, 1, "lock", lock, 1500, 64), 0);
    assert_int_equal(h_parallel(11, lost_main, &l), 0);
    pthread_mutex_destroy(&l.on_a.mu);
    assert_true(l.held);
    fprintf(stderr,
            "%s: A: 201 %d, sold out %d, 503 %d, other %d; B: 201 %d, sold out %d\n",
            lock, l.on_a.created, l.on_a.sold_out, l.on_a.unavailable, l.on_a.other,
            l.on_b.created, l.on_b.sold_out);
    assert_int_equal(l.on_b.created, 10);
    assert_int_equal(l.on_a.created, 0);
    assert_int_equal(l.on_a.sold_out + l.on_a.unavailable + l.on_a.other, 10);
    assert_true(h_stat(l.on_a.port, TOKEN, "batches") >= 1); /* the batch was sent */
    assert_int_equal(h_stat(l.on_a.port, TOKEN, "orders_confirmed"), 0);
    assert_int_equal(h_audit(l.on_b.port, TOKEN, sku, 10, true), 0);
    audit_rows(e->pg, sku, 10, 10);
    assert_int_equal(h_svc_stop_clean(a), 0);
    assert_int_equal(h_svc_stop_clean(b), 0);
    h_svc_free(a);
    h_svc_free(b);
}

static void test_pg_batch_frozen_lease(void **state)
{
    lost_batch(*state, "pb-frozen", "lease", "500", freeze_a);
}

/* A TTL of 5 s: no renewal falls inside the 1.5 s hold (one would find the session
 * gone and send no batch at all). */
static void test_pg_batch_row_backend_terminated(void **state)
{
    lost_batch(*state, "pb-killed", "row", "5000", terminate_a);
}

/* ---- a row lock kept from one order to the next --------------------------------- */

struct kept {
    struct env *e;
    struct h_crowd on;
    bool held;
    int locked; /* the probe: 1 the row was locked during the second order's hold */
    long long sold_then;
};

static void kept_main(int idx, void *ctx)
{
    struct kept *k = ctx;
    if (idx > 0) {
        h_crowd_order(idx, &k->on);
        return;
    }
    long long end = h_now_ms() + 10000;
    while (!(k->held = h_pg_scalar(k->e->pg, "SELECT count(*) FROM pg_stat_activity WHERE"
                                             " state = 'idle in transaction'") > 0) &&
           h_now_ms() < end)
        h_sleep_ms(5);
    if (!k->held)
        return;
    /* the first order's 400 ms hold is over and its sale committed: the second order
     * holds the lock kept for it (until ~800 ms) */
    h_sleep_ms(600);
    k->sold_then =
        h_pg_scalar(k->e->pg, "SELECT count(*) FROM orders WHERE sku = 'pb-keep'");
    k->locked = h_pg_exec(k->e->pg, "SELECT 1 FROM segments WHERE sku = 'pb-keep' AND"
                                    " seg = 0 FOR UPDATE NOWAIT") != 0;
}

/* `row` with a hold: the lock handed to the next order of the loop (STORE_CAP_KEEP)
 * stays a row lock. The deduction that keeps it commits the sale and locks the row
 * again in the same call, so while the next order holds it nobody else can take the
 * row (before, COMMIT let it go for the whole hold: another loop or instance took the
 * row, and the kept holder's deduction was FENCED after a hold for nothing). Probed
 * from another session with FOR UPDATE NOWAIT during the second order's hold. */
static void test_pg_row_lock_kept_across_orders(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    assert_int_equal(put_batch(e->port, "pb-keep", 10, 1, "lock", "row", 400, 1), 0);
    struct kept k;
    memset(&k, 0, sizeof k);
    k.e = e;
    k.on = (struct h_crowd){.port = e->port, .sku = "pb-keep"};
    pthread_mutex_init(&k.on.mu, NULL);
    assert_int_equal(h_parallel(3, kept_main, &k), 0);
    pthread_mutex_destroy(&k.on.mu);
    fprintf(stderr, "row keep: 201 %d, other %d; sold at the probe %lld, row locked %d\n",
            k.on.created, k.on.other + k.on.unavailable, k.sold_then, k.locked);
    assert_true(k.held);
    assert_int_equal(k.sold_then, 1); /* the first sale committed, the second not yet */
    assert_int_equal(k.locked, 1);
    assert_int_equal(k.on.created, 2);
    audit_rows(e->pg, "pb-keep", 10, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pg_batch_setting),
        cmocka_unit_test(test_pg_batch_sellout_row),
        cmocka_unit_test(test_pg_batch_sellout_lease),
        cmocka_unit_test(test_pg_batch_sellout_optimistic),
        cmocka_unit_test(test_pg_batch_duplicate_ids),
        cmocka_unit_test(test_pg_batch_hold0),
        cmocka_unit_test(test_pg_lease_multi_gives_leases_back),
        cmocka_unit_test(test_pg_batch_beside_multi_segment_orders),
        cmocka_unit_test(test_pg_batch_frozen_lease),
        cmocka_unit_test(test_pg_batch_row_backend_terminated),
        cmocka_unit_test(test_pg_row_lock_kept_across_orders),
    };
    return h_exit_status(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
