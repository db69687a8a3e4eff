/* test_lock.c -- segment locks and fenced writes, their scripts sent on the seam's
 * blocking connection (store.h), and the order path through the event-driven engine
 * on the test's own loop (its leases renewed by lease.c), against a real redis-server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "segments/engine.h"
#include "segments/inventory.h"
#include "segments/redis/calls.h"
#include "segments/redis/proto.h"
#include "segments/redis/store.h"
#include "segments/skutab.h"
#include "segments/order.h"
#include "segments/sku.h"
#include "segments/stats.h"
#include "tests/engine_sync.h"
#include "tests/harness.h"

#define TTL_MS 300

struct fixture {
    h_redis *redis;
    inv *v;
    inv_conn *c;
    struct event_base *base; /* the order tests' loop, turned by place_order */
    engine *e;               /* the order tests' engine on it (loop_up) */
};

static int setup(void **state)
{
    static struct fixture f;
    f.redis = h_redis_start();
    if (f.redis == NULL)
        return -1;
    struct inv_options opt = {.redis_host = "127.0.0.1",
                              .redis_port = h_redis_port(f.redis),
                              .redis_timeout_ms = 2000,
                              .lock_ttl_ms = TTL_MS,
                              .lock_wait_ms = 200,
                              .meta_cache_ms = 100};
    char err[128];
    f.v = inv_create(&opt, err, sizeof err);
    if (f.v == NULL)
        return -1;
    f.c = inv_conn_create(f.v);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    inv_conn_free(f->c);
    inv_free(f->v);
    h_redis_free(f->redis);
    return 0;
}

/* A loop and an engine of its own for one order test. Not one for the group:
 * lease_renews_after_reconnect kills every client, and an engine whose loop did not
 * turn meanwhile learns of it only at its next order, which it answers INV_UNAVAILABLE
 * (as every order until its reconnect, 50 ms later) instead of waiting for the new
 * connection. */
static int loop_up(void **state)
{
    struct fixture *f = *state;
    if ((f->base = event_base_new()) == NULL)
        return -1;
    f->e = engine_create(f->v, f->base, 0, 1);
    return 0;
}

static int loop_down(void **state)
{
    struct fixture *f = *state;
    engine_free(f->e);
    event_base_free(f->base);
    f->e = NULL;
    f->base = NULL;
    return 0;
}

/* Create or reset `sku`; returns its (new) epoch. */
static long long put(struct fixture *f, const char *sku, long long stock, int segments)
{
    struct sku_config cfg = {.stock = stock, .segments = segments, .mode = SKU_MODE_LOCK};
    assert_int_equal(sku_put(f->c, sku, &cfg, SKU_REPLACE_ANY, NULL, NULL, NULL), INV_OK);
    struct sku_view view;
    assert_int_equal(skutab_read(f->c, sku, &view), INV_OK);
    assert_true(view.epoch > 0);
    return view.epoch;
}

/* ACQUIRE with the fixture's lease, on the connection's router (store.h). */
static int acquire(struct fixture *f, const char *sku, long long epoch, int i,
                   const char *id, long long qty, const char *token, struct rd_reply *out)
{
    struct rd_cmd cmd;
    proto_acquire(&cmd, sku, epoch, i, id, qty, token, TTL_MS, 0);
    return store_script(f->c->rd, &cmd, out);
}

/* RELEASE segment i's lock if `token` owns it: 1 released, 0 not ours, -1. */
static int release(struct fixture *f, const char *sku, int i, const char *token)
{
    struct rd_cmd cmd;
    proto_release(&cmd, sku, i, token);
    redisReply *r = store_call(f->c->rd, &cmd);
    int done = 0;
    int rc = r != NULL ? proto_done(r, &done) : -1;
    if (r != NULL)
        freeReplyObject(r);
    return rc < 0 ? -1 : done;
}

/* DEDUCT (lua/deduct.lua) of `qty` from segment i, fenced by `token` ("": none),
 * recording `record` for order `id` as `attempt`, the lock released. */
static int deduct(struct fixture *f, const char *sku, long long epoch, int i,
                  const char *token, const char *attempt, const char *id, long long qty,
                  struct rd_reply *out)
{
    struct rd_cmd cmd;
    proto_deduct(&cmd, sku, epoch, i, token, attempt, id, qty, "{}", false, 0);
    return store_script(f->c->rd, &cmd, out);
}

static long long counter(struct fixture *f, enum stat_id id)
{
    long long s[STAT__COUNT];
    stat_snapshot(f->v, s);
    return s[id];
}

static void lock_is_exclusive_and_released_by_owner_only(void **state)
{
    struct fixture *f = *state;
    long long ep = put(f, "ex", 10, 1);
    char t1[33], t2[33];
    inv_new_token(f->c, t1);
    inv_new_token(f->c, t2);
    assert_string_not_equal(t1, t2);
    struct rd_reply r;
    assert_int_equal(acquire(f, "ex", ep, 0, "o-ex", 1, t1, &r), 0);
    assert_int_equal(r.code, RD_OK);
    assert_int_equal(r.value, 10);
    assert_int_equal(acquire(f, "ex", ep, 0, "o-ex", 1, t2, &r), 0);
    assert_int_equal(r.code, RD_BUSY);
    assert_int_equal(release(f, "ex", 0, t2), 0);
    assert_int_equal(release(f, "ex", 0, t1), 1);
    assert_int_equal(acquire(f, "ex", ep, 0, "o-ex", 1, t2, &r), 0);
    assert_int_equal(r.code, RD_OK);
    assert_int_equal(release(f, "ex", 0, t2), 1);
}

static void stalled_holder_is_fenced(void **state)
{
    struct fixture *f = *state;
    long long ep = put(f, "fence", 1, 1);
    char stale[33], fresh[33];
    inv_new_token(f->c, stale);
    inv_new_token(f->c, fresh);
    struct rd_reply r;
    assert_int_equal(acquire(f, "fence", ep, 0, "o-stale", 1, stale, &r), 0);
    assert_int_equal(r.code, RD_OK);
    usleep((TTL_MS + 100) * 1000); /* stalled past the lease, no watchdog */
    assert_int_equal(acquire(f, "fence", ep, 0, "o-fresh", 1, fresh, &r), 0);
    assert_int_equal(r.code, RD_OK);
    assert_int_equal(deduct(f, "fence", ep, 0, stale, stale, "o-stale", 1, &r), 0);
    assert_int_equal(r.code, RD_FENCED);
    assert_int_equal(deduct(f, "fence", ep, 0, fresh, fresh, "o-fresh", 1, &r), 0);
    assert_int_equal(r.code, RD_OK);
    assert_int_equal(r.value, 0);

    struct sku_status st;
    assert_int_equal(sku_get(f->c, "fence", &st), INV_OK);
    assert_int_equal(st.remaining, 0);
    assert_int_equal(st.sold, 1);
    assert_int_equal(st.orders, 1);
    assert_int_equal(st.locks_held, 0);
    char *rec;
    assert_int_equal(order_get(f->c, "o-stale", &rec), INV_NOT_FOUND);
}

/* A caller whose view of the SKU predates a reset is refused, not obeyed. */
static void stale_epoch_is_refused(void **state)
{
    struct fixture *f = *state;
    long long old = put(f, "epo", 5, 2);
    long long now = put(f, "epo", 5, 2);
    assert_true(old != now);
    char t[33];
    inv_new_token(f->c, t);
    struct rd_reply r;
    assert_int_equal(acquire(f, "epo", old, 0, "o-epo", 1, t, &r), 0);
    assert_int_equal(r.code, RD_STALE);
    assert_int_equal(deduct(f, "epo", old, 1, "", t, "o-epo", 1, &r), 0);
    assert_int_equal(r.code, RD_STALE);
    assert_int_equal(deduct(f, "epo", now, 1, "", t, "o-epo", 1, &r), 0);
    assert_int_equal(r.code, RD_OK);
}

/* A deduct sent again after its reply was lost finds its own order: OK, once. */
static void resent_deduct_is_its_own(void **state)
{
    struct fixture *f = *state;
    long long ep = put(f, "again", 5, 1);
    char t[33], other[33];
    inv_new_token(f->c, t);
    inv_new_token(f->c, other);
    struct rd_reply r;
    assert_int_equal(acquire(f, "again", ep, 0, "o-again", 2, t, &r), 0);
    assert_int_equal(r.code, RD_OK);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(deduct(f, "again", ep, 0, t, t, "o-again", 2, &r), 0);
        assert_int_equal(r.code, RD_OK);
    }
    /* Another attempt at the same order id is a replay, not a second sale. */
    assert_int_equal(deduct(f, "again", ep, 0, "", other, "o-again", 2, &r), 0);
    assert_int_equal(r.code, RD_EXISTS);
    rd_reply_clear(&r);
    struct sku_status st;
    assert_int_equal(sku_get(f->c, "again", &st), INV_OK);
    assert_int_equal(st.remaining, 3);
    assert_int_equal(st.sold, 2);
    assert_int_equal(st.locks_held, 0);
}

static void (*between_fn)(void);

/* One lease into the hold, `between_fn` runs (beside the loop, which keeps turning). */
static void *after_one_lease(void *arg)
{
    (void)arg;
    usleep(TTL_MS * 1000);
    between_fn();
    return NULL;
}

/* An order that holds its lock for three leases (hold_ms): the engine renews the
 * lease every ttl/3 (lease.c), so the lock stays its own and the order is sold, with
 * no lease lost; `between` runs one lease in, beside the loop. */
static void hold_three_leases(struct fixture *f, const char *sku, void (*between)(void))
{
    struct sku_config cfg = {
        .stock = 1, .segments = 1, .mode = SKU_MODE_LOCK, .hold_ms = 3 * TTL_MS};
    assert_int_equal(sku_put(f->c, sku, &cfg, SKU_REPLACE_ANY, NULL, NULL, NULL), INV_OK);
    long long before = counter(f, STAT_LEASE_RENEWALS);
    long long lost = counter(f, STAT_LEASE_LOST);
    pthread_t t;
    between_fn = between;
    if (between != NULL)
        assert_int_equal(pthread_create(&t, NULL, after_one_lease, NULL), 0);
    struct order_request req = {.sku = sku, .qty = 1};
    struct order_result res;
    assert_int_equal(place_order(f->e, f->base, &req, &res), INV_OK);
    order_result_clear(&res);
    if (between != NULL)
        pthread_join(t, NULL);
    assert_true(counter(f, STAT_LEASE_RENEWALS) >= before + 3);
    assert_int_equal(counter(f, STAT_LEASE_LOST), lost);
    struct sku_status st;
    assert_int_equal(sku_get(f->c, sku, &st), INV_OK);
    assert_int_equal(st.sold, 1);
    assert_int_equal(st.locks_held, 0);
}

static void lease_renews_past_the_ttl(void **state)
{
    hold_three_leases(*state, "wd", NULL);
}

static h_redis *killer_target;

static void kill_all_clients(void)
{
    redisContext *rc = h_redis_connect(killer_target);
    assert_non_null(rc);
    redisReply *r = redisCommand(rc, "CLIENT KILL TYPE normal SKIPME yes");
    assert_non_null(r);
    assert_true(r->type == REDIS_REPLY_INTEGER && r->integer >= 1);
    freeReplyObject(r);
    redisFree(rc);
}

static void lease_renews_after_reconnect(void **state)
{
    struct fixture *f = *state;
    killer_target = f->redis;
    hold_three_leases(f, "wdre", kill_all_clients);
}

static void order_falls_through_to_every_unit(void **state)
{
    struct fixture *f = *state;
    put(f, "few", 3, 20);
    struct order_request req = {.sku = "few", .qty = 1};
    struct order_result res;
    int seen[20] = {0};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(place_order(f->e, f->base, &req, &res), INV_OK);
        assert_in_range(res.segment, 0, 2); /* 3 over 20: segments 0..2 hold one each */
        assert_int_equal(seen[res.segment]++, 0);
        order_result_clear(&res);
    }
    assert_int_equal(place_order(f->e, f->base, &req, &res), INV_SOLD_OUT);
    assert_null(res.record);
    assert_true(counter(f, STAT_FALL_THROUGHS) > 0);
}

static void order_replay_conflict_and_insufficient(void **state)
{
    struct fixture *f = *state;
    put(f, "rep", 10, 5); /* 2 per segment */
    struct order_request req = {.sku = "rep", .qty = 2, .order_id = "same-1"};
    struct order_result a, b;
    assert_int_equal(place_order(f->e, f->base, &req, &a), INV_OK);
    assert_int_equal(place_order(f->e, f->base, &req, &b), INV_REPLAYED);
    assert_string_equal(a.record, b.record);
    char *rec;
    assert_int_equal(order_get(f->c, "same-1", &rec), INV_OK);
    assert_string_equal(rec, a.record);
    free(rec);
    order_result_clear(&a);
    order_result_clear(&b);

    struct order_request other = {.sku = "rep", .qty = 1, .order_id = "same-1"};
    assert_int_equal(place_order(f->e, f->base, &other, &b), INV_CONFLICT);
    struct order_request big = {.sku = "rep", .qty = 9}; /* 8 left in all */
    assert_int_equal(place_order(f->e, f->base, &big, &b), INV_INSUFFICIENT);
    struct order_request bad = {.sku = "rep", .qty = 0};
    assert_int_equal(place_order(f->e, f->base, &bad, &b), INV_INVALID);
    struct order_request none = {.sku = "nope", .qty = 1};
    assert_int_equal(place_order(f->e, f->base, &none, &b), INV_UNKNOWN_SKU);

    struct sku_status st;
    assert_int_equal(sku_get(f->c, "rep", &st), INV_OK);
    assert_int_equal(st.sold, 2);
    assert_int_equal(st.remaining, 8);
    assert_int_equal(st.orders, 1);
}

static void reset_and_delete_drop_records(void **state)
{
    struct fixture *f = *state;
    put(f, "rs", 4, 2);
    struct order_request req = {.sku = "rs", .qty = 1, .order_id = "rs-1"};
    struct order_result res;
    assert_int_equal(place_order(f->e, f->base, &req, &res), INV_OK);
    order_result_clear(&res);
    put(f, "rs", 7, 3);
    struct sku_status st;
    assert_int_equal(sku_get(f->c, "rs", &st), INV_OK);
    assert_int_equal(st.cfg.stock, 7);
    assert_int_equal(st.remaining, 7);
    assert_int_equal(st.segment_stock[0], 3);
    assert_int_equal(st.segment_stock[2], 2);
    char *rec;
    assert_int_equal(order_get(f->c, "rs-1", &rec), INV_NOT_FOUND);
    assert_int_equal(sku_delete(f->c, "rs", NULL), INV_OK);
    assert_int_equal(sku_get(f->c, "rs", &st), INV_UNKNOWN_SKU);
    assert_int_equal(sku_delete(f->c, "rs", NULL), INV_UNKNOWN_SKU);
}

static void stock_near_2_pow_53_is_exact(void **state)
{
    struct fixture *f = *state;
    put(f, "huge", SKU_STOCK_MAX, 2);
    struct sku_status st;
    assert_int_equal(sku_get(f->c, "huge", &st), INV_OK);
    assert_int_equal(st.remaining, SKU_STOCK_MAX);
    assert_int_equal(st.segment_stock[0], SKU_STOCK_MAX / 2 + 1);
    assert_int_equal(st.segment_stock[1], SKU_STOCK_MAX / 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lock_is_exclusive_and_released_by_owner_only),
        cmocka_unit_test(stalled_holder_is_fenced),
        cmocka_unit_test(stale_epoch_is_refused),
        cmocka_unit_test(resent_deduct_is_its_own),
        cmocka_unit_test_setup_teardown(lease_renews_past_the_ttl, loop_up, loop_down),
        cmocka_unit_test_setup_teardown(lease_renews_after_reconnect, loop_up, loop_down),
        cmocka_unit_test_setup_teardown(order_falls_through_to_every_unit, loop_up,
                                        loop_down),
        cmocka_unit_test_setup_teardown(order_replay_conflict_and_insufficient, loop_up,
                                        loop_down),
        cmocka_unit_test_setup_teardown(reset_and_delete_drop_records, loop_up,
                                        loop_down),
        cmocka_unit_test(stock_near_2_pow_53_is_exact),
    };
    h_deadline(120);
    return cmocka_run_group_tests_name("lock", tests, setup, teardown);
}
