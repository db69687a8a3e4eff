/* it_pg_batch.c -- orders crowding one SKU's segments on the PostgreSQL store over
 * HTTP: multi-segment orders beside single ones, nothing oversold, no lock kept. */
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

/* What a crowd of orders got. */
struct crowd {
    int port;
    const char *sku;
    const char *id; /* every order's id (NULL: none) */
    long long (*qty)(int idx);
    pthread_mutex_t mu;
    int created, replayed, sold_out, insufficient, unavailable, other;
    long long units; /* sold by the 201s */
};

static void crowd_order(int idx, void *ctx)
{
    struct crowd *c = ctx;
    long long q = c->qty(idx);
    struct h_resp r;
    int st = h_order(c->port, c->sku, q, c->id, &r);
    char code[64];
    h_error_code(&r, code, sizeof code);
    pthread_mutex_lock(&c->mu);
    if (st == 201) {
        c->created++;
        c->units += q;
    } else if (st == 200) {
        c->replayed++;
    } else if (st == 409 && strcmp(code, "sold_out") == 0) {
        c->sold_out++;
    } else if (st == 409 && strcmp(code, "insufficient_stock") == 0) {
        c->insufficient++;
    } else if (st == 503) {
        c->unavailable++;
        fprintf(stderr, "order %d: %d %s\n", idx, st, r.body);
    } else {
        c->other++;
        fprintf(stderr, "order %d: %d %s\n", idx, st, r.body);
    }
    pthread_mutex_unlock(&c->mu);
    h_resp_free(&r);
}

static void crowd_run(struct crowd *c, int n)
{
    pthread_mutex_init(&c->mu, NULL);
    assert_int_equal(h_parallel(n, crowd_order, c), 0);
    pthread_mutex_destroy(&c->mu);
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
    struct crowd c = {.port = e->port, .sku = sku, .qty = mixed_qty};
    crowd_run(&c, 40);
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

/* Multi-segment orders beside single ones, unbatched, on `lease`: a multi-segment
 * deduction that sells nothing (a part short by the time it runs) gives its parts' leases
 * back, as the engine expects of every store (a Redis script releases its tokens' locks
 * whatever it answers); kept until they expired, they made the orders after them wait out
 * lock_wait_ms and answer 503 busy. */
static void test_pg_lease_multi_gives_leases_back(void **state)
{
    multi_beside(*state, "lease", 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pg_lease_multi_gives_leases_back),
    };
    return h_exit_status(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
