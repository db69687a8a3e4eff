/* it_cluster_reservations.c -- reservations on a real Redis Cluster (3 masters with a
 * replica each): place, replay, confirm, release, expiry by Redis's clock and the
 * sweeper, confirms racing expiry, restock, rebalance, reset and delete with holds,
 * a concurrent mix; every step audited as
 * remaining + reserved + sold = initial, per SKU and per segment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/harness.h"
#include "tests/resv_env.h"

static long long jint(json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

/* Place, replay, conflict, confirm, replay, cancel, release, and the ids of orders
 * and reservations kept apart, each across the slots of a cluster. */
static void test_hold_confirm_replay(void **state)
{
    struct h_cluster_env *f = *state;
    int a = f->port;
    assert_int_equal(h_put_sku(a, NULL, "cr-life", 10, 4, "lock", 0), 0);
    struct h_resp r;
    assert_int_equal(rve_reserve(a, "cr-life", 3, 60, "clife-1", &r), 201);
    json_t *j = h_resp_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "held");
    assert_int_equal(jint(j, "qty"), 3);
    long long x = jint(j, "expires_at_ms");
    assert_true(x > rve_wall_ms() + 50000 && x <= rve_wall_ms() + 61000);
    json_decref(j);
    h_resp_free(&r);
    /* the same id again: the same hold; another qty: 409 */
    rve_replayed(a, "cr-life", "clife-1", 3, x, 4);
    assert_int_equal(rve_on_resv(a, "GET", "clife-1", "", NULL), 200);
    struct rve_nums n = rve_sku_nums(a, NULL, "cr-life");
    assert_int_equal(n.reserved, 3);
    assert_int_equal(n.remaining, 7);

    /* confirm: 201 the order, again 200, not released; the order readable, cancelled
     * as one */
    rve_confirmed(a, a, "clife-1");
    assert_int_equal(h_http(a, "GET", "/orders/clife-1", NULL, NULL, 0, &r), 200);
    j = h_resp_json(&r);
    assert_int_equal(jint(j, "qty"), 3);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "confirmed");
    json_decref(j);
    h_resp_free(&r);
    n = rve_sku_nums(a, NULL, "cr-life");
    assert_int_equal(n.reserved, 0);
    assert_int_equal(n.sold, 3);
    assert_int_equal(h_http(a, "DELETE", "/orders/clife-1", NULL, NULL, 0, &r), 200);
    h_resp_free(&r);
    n = rve_sku_nums(a, NULL, "cr-life");
    assert_int_equal(n.sold, 0);
    assert_int_equal(n.remaining, 10);

    /* release: the units back, idempotent; a confirm after it is 409 */
    assert_int_equal(rve_reserve(a, "cr-life", 2, 60, "clife-2", NULL), 201);
    assert_int_equal(rve_sku_nums(a, NULL, "cr-life").reserved, 2);
    assert_int_equal(rve_released(a, a, NULL, "cr-life", "clife-2").remaining, 10);

    /* an order's id is not a reservation's; an unknown id is 404 */
    assert_int_equal(h_order(a, "cr-life", 1, "clife-o", NULL), 201);
    assert_int_equal(rve_reserve(a, "cr-life", 1, 60, "clife-o", &r), 409);
    assert_int_equal(h_expect_error(&r, 409, "reservation_conflict"), 0);
    h_resp_free(&r);
    assert_int_equal(rve_on_resv(a, "GET", "clife-none", "", NULL), 404);
    assert_int_equal(rve_on_resv(a, "POST", "clife-none", "/confirm", NULL), 404);
    n = rve_sku_nums(a, NULL, "cr-life");
    assert_int_equal(n.sold, 1);
    assert_int_equal(n.remaining, 9);
}

/* A hold nobody touches comes back by itself: the sweeper (which walks the SKUs'
 * segments on a cluster) settles it after its expiry, and a confirm then is 410 with
 * nothing sold. */
static void test_expiry_returns_units(void **state)
{
    struct h_cluster_env *f = *state;
    int a = f->port;
    assert_int_equal(h_put_sku(a, NULL, "cr-exp", 6, 3, "lock", 0), 0);
    assert_int_equal(rve_reserve(a, "cr-exp", 2, 1, "cexp-1", NULL), 201);
    assert_int_equal(rve_reserve(a, "cr-exp", 2, 1, "cexp-2", NULL), 201);
    assert_int_equal(rve_sku_nums(a, NULL, "cr-exp").reserved, 4);
    /* 1 s holds, a 250 ms sweeper: 2 s is plenty */
    struct rve_nums n = rve_until_unreserved(a, NULL, "cr-exp", 4000);
    assert_int_equal(n.reserved, 0);
    assert_int_equal(n.remaining, 6);
    char code[64];
    assert_int_equal(rve_on_resv(a, "POST", "cexp-1", "/confirm", code), 410);
    assert_string_equal(code, "reservation_expired");
    assert_int_equal(rve_on_resv(a, "DELETE", "cexp-2", "", NULL), 200); /* expired */
    n = rve_sku_nums(a, NULL, "cr-exp");
    assert_int_equal(n.sold, 0);
    assert_int_equal(n.remaining, 6);
    assert_int_equal(h_order(a, "cr-exp", 6, NULL, NULL), 201);
}

/* Confirms racing expiry: n holds of qty units (1 s) on `sku` (of `initial`), each
 * confirmed twice, 2 ms apart, around expiry + first_ms + step_ms * (k % span) (this
 * host's clock is the cluster's); each judged (rve_race_confirms: sold once, or
 * expired for both) and, once the sweeper returned the expired ones, the SKU audited
 * against the sales. Each hold takes at least min_parts segments. How many sold. */
static int race_holds(int a, const char *sku, long long initial, long long qty,
                      int min_parts, int n, int first_ms, int step_ms, int span)
{
    char(*ids)[32] = calloc((size_t)n, sizeof *ids);
    struct rve_race *race = calloc((size_t)n, sizeof *race);
    assert_non_null(ids);
    assert_non_null(race);
    for (int k = 0; k < n; k++) {
        snprintf(ids[k], sizeof ids[k], "%.16s-%d", sku, k);
        struct h_resp r;
        assert_int_equal(rve_reserve(a, sku, qty, 1, ids[k], &r), 201);
        json_t *j = h_resp_json(&r);
        size_t parts;
        assert_int_equal(rve_parts_sum(j, &parts), qty);
        assert_true((int)parts >= min_parts);
        race[k] =
            (struct rve_race){{a, a},
                              ids[k],
                              jint(j, "expires_at_ms") + first_ms + step_ms * (k % span),
                              {0, 0}};
        json_decref(j);
        h_resp_free(&r);
    }
    int sold = rve_race_confirms(race, n);
    print_message("%s: confirm vs expiry: %d sold of %d\n", sku, sold, n);
    free(race);
    free(ids);
    struct rve_nums m = rve_until_unreserved(a, NULL, sku, 4000);
    assert_int_equal(m.reserved, 0);
    assert_int_equal(m.sold, qty * sold);
    assert_int_equal(m.remaining, initial - qty * sold);
    return sold;
}

static void test_confirm_races_expiry(void **state)
{
    struct h_cluster_env *f = *state;
    assert_int_equal(h_put_sku(f->port, NULL, "cr-race", 1000, 4, "lock", 0), 0);
    /* -5 .. +1 ms: a confirm here is three calls, so the segment's step (whose TIME
     * decides) lands a few ms after the request is sent */
    race_holds(f->port, "cr-race", 1000, 2, 1, 12, -5, 1, 7);
}

/* Restock and rebalance (per-slot steps on a cluster) leave the holds where they
 * are; the holds then confirm and release as before. */
static void test_restock_with_holds(void **state)
{
    struct h_cluster_env *f = *state;
    int a = f->port;
    assert_int_equal(h_put_sku(a, NULL, "cr-adm", 10, 2, "lock", 0), 0);
    assert_int_equal(rve_reserve(a, "cr-adm", 5, 60, "cadm-1", NULL), 201);
    assert_int_equal(rve_reserve(a, "cr-adm", 3, 60, "cadm-2", NULL), 201);
    struct h_resp r;
    assert_int_equal(
        h_req(a, "POST", "/admin/skus/cr-adm/restock", NULL, "{\"qty\":10}", &r), 200);
    h_resp_free(&r);
    struct rve_nums n = rve_sku_nums(a, NULL, "cr-adm");
    assert_int_equal(n.initial, 20);
    assert_int_equal(n.reserved, 8);
    assert_int_equal(h_req(a, "POST", "/admin/skus/cr-adm/rebalance", NULL, NULL, &r),
                     200);
    h_resp_free(&r);
    n = rve_sku_nums(a, NULL, "cr-adm");
    assert_int_equal(n.reserved, 8);
    assert_int_equal(n.remaining, 12);
    assert_int_equal(rve_on_resv(a, "POST", "cadm-1", "/confirm", NULL), 201);
    assert_int_equal(rve_on_resv(a, "DELETE", "cadm-2", "", NULL), 200);
    n = rve_sku_nums(a, NULL, "cr-adm");
    assert_int_equal(n.reserved, 0);
    assert_int_equal(n.sold, 5);
    assert_int_equal(n.remaining, 15);
}

/* A reset starts a new sale: the old one's holds are void (410), their id free again;
 * a delete voids them too. */
static void test_reset_and_delete_void_holds(void **state)
{
    struct h_cluster_env *f = *state;
    int a = f->port;
    assert_int_equal(h_put_sku(a, NULL, "cr-reset", 10, 2, "lock", 0), 0);
    assert_int_equal(rve_reserve(a, "cr-reset", 4, 1, "creset-1", NULL), 201);
    assert_int_equal(h_put_sku(a, NULL, "cr-reset", 10, 2, "lock", 0), 0);
    struct rve_nums n = rve_sku_nums(a, NULL, "cr-reset");
    assert_int_equal(n.reserved, 0);
    assert_int_equal(n.remaining, 10);
    char code[64];
    assert_int_equal(rve_on_resv(a, "POST", "creset-1", "/confirm", code), 410);
    assert_string_equal(code, "reservation_void");
    assert_int_equal(rve_on_resv(a, "GET", "creset-1", "", NULL), 410);
    assert_int_equal(rve_reserve(a, "cr-reset", 1, 1, "creset-1", NULL), 201);
    assert_int_equal(rve_sku_nums(a, NULL, "cr-reset").reserved, 1);
    struct h_resp r;
    assert_int_equal(h_http(a, "DELETE", "/admin/skus/cr-reset", NULL, NULL, 0, &r), 200);
    h_resp_free(&r);
    assert_int_equal(rve_on_resv(a, "DELETE", "creset-1", "", NULL), 410);
    assert_int_equal(h_order(a, "cr-reset", 1, NULL, NULL), 404);
}

/* A place whose process died between its segment's step and its index (made here by
 * turning a placed hold's index back into a claim run out): the next place of that id
 * takes the claim over and takes the hold it finds in the segment as its own, rather
 * than holding the units twice; with another qty, 409. */
static void test_dead_place_taken_over(void **state)
{
    struct h_cluster_env *f = *state;
    int a = f->port;
    assert_int_equal(h_put_sku(a, NULL, "cr-dead", 10, 1, "lock", 0), 0);
    assert_int_equal(rve_reserve(a, "cr-dead", 3, 60, "cdead-1", NULL), 201);
    const char *ix = "inv:hold:{cdead-1}";
    int node = h_cluster_master_of(f->cluster, ix);
    assert_true(node >= 0);
    redisReply *r =
        h_port_command(h_cluster_port(f->cluster, node), "HDEL %s k p i e q x t d", ix);
    assert_non_null(r);
    assert_int_equal(r->integer, 8);
    freeReplyObject(r);
    r = h_port_command(h_cluster_port(f->cluster, node), "HSET %s c dead u 1", ix);
    assert_non_null(r);
    freeReplyObject(r);
    assert_int_equal(rve_on_resv(a, "GET", "cdead-1", "", NULL), 404); /* no index */
    assert_int_equal(rve_reserve(a, "cr-dead", 4, 60, "cdead-1", NULL), 409);
    assert_int_equal(rve_reserve(a, "cr-dead", 3, 60, "cdead-1", NULL), 201);
    struct rve_nums n = rve_sku_nums(a, NULL, "cr-dead");
    assert_int_equal(n.reserved, 3);
    assert_int_equal(n.remaining, 7);
    assert_int_equal(rve_on_resv(a, "POST", "cdead-1", "/confirm", NULL), 201);
    n = rve_sku_nums(a, NULL, "cr-dead");
    assert_int_equal(n.reserved, 0);
    assert_int_equal(n.sold, 3);
    assert_int_equal(n.remaining, 7);
}

/* ---- holds over several segments ------------------------------------------------- */

/* A hold no one segment can give takes parts of several, whose keys live in other
 * slots, all or nothing (as a multi-segment order): placed, replayed, confirmed as
 * one order over its segments (cancelled as one), released, voided by a reset,
 * refused whole when the SKU holds too little; every step audited. */
static void test_multi_segment_hold(void **state)
{
    struct h_cluster_env *f = *state;
    int a = f->port;
    rve_multi_segment_hold(a, a, "cr-multi", "cmulti");
    struct h_resp r;
    /* Durability "replicated": the place and the confirm WAIT on every part's node. */
    assert_int_equal(h_req(a, "PUT", "/admin/skus/cr-mrepl", NULL,
                           "{\"stock\": 4, \"segments\": 2, \"durability\": "
                           "\"replicated\"}",
                           &r),
                     201);
    h_resp_free(&r);
    assert_int_equal(rve_reserve(a, "cr-mrepl", 3, 60, "cmulti-r", NULL), 201);
    assert_int_equal(rve_on_resv(a, "POST", "cmulti-r", "/confirm", NULL), 201);
    struct rve_nums s = rve_sku_nums(a, NULL, "cr-mrepl");
    assert_int_equal(s.sold, 3);
    assert_int_equal(s.remaining, 1);
}

/* A multi-part hold expires as one: nobody touches it and the sweeper returns every
 * part (410 then, nothing sold); confirms racing its expiry sell every part or none. */
static void test_multi_segment_expiry(void **state)
{
    struct h_cluster_env *f = *state;
    int a = f->port;
    assert_int_equal(h_put_sku(a, NULL, "cr-mexp", 6, 3, "lock", 0), 0);
    assert_int_equal(rve_reserve(a, "cr-mexp", 6, 1, "cmexp-1", NULL), 201);
    assert_int_equal(rve_sku_nums(a, NULL, "cr-mexp").remaining, 0);
    /* 1 s holds, a 250 ms sweeper: 2 s is plenty */
    struct rve_nums n = rve_until_unreserved(a, NULL, "cr-mexp", 4000);
    assert_int_equal(n.reserved, 0);
    assert_int_equal(n.remaining, 6);
    char st[16];
    size_t parts;
    assert_int_equal(rve_resv_parts(a, "cmexp-1", st, &parts), 6);
    assert_string_equal(st, "expired");
    char code[64];
    assert_int_equal(rve_on_resv(a, "POST", "cmexp-1", "/confirm", code), 410);
    assert_string_equal(code, "reservation_expired");
    n = rve_sku_nums(a, NULL, "cr-mexp");
    assert_int_equal(n.sold, 0);
    assert_int_equal(n.remaining, 6);

    /* Two confirms of each multi-part hold 2 ms apart around its expiry: one sale of
     * every part, or nothing sold (410 both) and every part back. */
    assert_int_equal(h_put_sku(a, NULL, "cr-mrace", 40, 8, "lock", 0), 0);
    race_holds(a, "cr-mrace", 40, 8, 2, 4, -3, 2, 4);
}

/* A command on the master of `key`: the reply's integer, 0 for a status, -1 else. */
static long long on_master(struct h_cluster_env *f, const char *key, const char *cmd)
{
    int node = h_cluster_master_of(f->cluster, key);
    assert_true(node >= 0);
    redisReply *r = h_port_command(h_cluster_port(f->cluster, node), cmd, key);
    long long v = r == NULL                        ? -1
                  : r->type == REDIS_REPLY_INTEGER ? r->integer
                  : r->type == REDIS_REPLY_STATUS  ? 0
                                                   : -1;
    if (r != NULL)
        freeReplyObject(r);
    return v;
}

/* Polled until nothing is held or sold (the intent sweeper's tick: 1 s, intents 2 s
 * old, a claim's 5 s lease), every look audited. */
static struct rve_nums settled_back(int port, const char *sku)
{
    struct rve_nums n = {0};
    for (long long until = rve_wall_ms() + 20000; rve_wall_ms() < until;
         usleep(200 * 1000)) {
        n = rve_sku_nums(port, NULL, sku);
        if (n.reserved == 0 && n.sold == 0)
            break;
    }
    return n;
}

struct confirming {
    int port;
    const char *id;
    int status;
};

static void *confirm_one(void *arg)
{
    struct confirming *c = arg;
    c->status = rve_on_resv(c->port, "POST", c->id, "/confirm", NULL);
    return NULL;
}

/* A service dies in the middle of a multi-part hold's step. A place that died with
 * every part landed and no index (planted here: the index's claim and the plan's run
 * out, the id in the intents set) is undone by the intent sweeper and the id placed
 * afresh; a confirm SIGKILLed with one part sold (the other part's master paused)
 * leaves its plan to the sweeper, which gives every part back: nothing sold, no
 * record, 409 released. The invariant holds at every look. */
static void test_multi_segment_dead(void **state)
{
    struct h_cluster_env *f = *state;
    int a = f->port;
    h_deadline(90);
    assert_int_equal(h_put_sku(a, NULL, "cr-mdead", 4, 2, "lock", 0), 0);
    json_t *j = h_get_sku(a, NULL, "cr-mdead");
    assert_non_null(j);
    char placed[96], key[2][160], cmd[512];
    snprintf(placed, sizeof placed, "%s",
             json_string_value(json_object_get(j, "placed_as")));
    json_decref(j);
    for (int i = 0; i < 2; i++)
        snprintf(key[i], sizeof key[i], "inv:{%s:%d}:%s", placed, i,
                 i == 0 ? "orders" : "parts");
    int node[2] = {h_cluster_master_of(f->cluster, key[0]),
                   h_cluster_master_of(f->cluster, key[1])};
    assert_int_not_equal(node[0], node[1]); /* placement spread them */
    char ek[160];
    snprintf(ek, sizeof ek, "inv:{%s:0}:epoch", placed);
    redisReply *e = h_port_command(h_cluster_port(f->cluster, node[0]), "GET %s", ek);
    assert_non_null(e);
    assert_int_equal(e->type, REDIS_REPLY_STRING);
    long long epoch = strtoll(e->str, NULL, 10);
    freeReplyObject(e);

    /* The place: 3 of 2 + 2, both parts landed, then its index and plan planted back
     * as a process that died before COMMIT leaves them. */
    struct h_resp r;
    assert_int_equal(rve_reserve(a, "cr-mdead", 3, 60, "cmdead-p", &r), 201);
    j = h_resp_json(&r);
    json_t *ps = json_object_get(j, "segments");
    assert_int_equal(json_array_size(ps), 2);
    long long q0 = jint(json_array_get(ps, 0), "qty"),
              q1 = jint(json_array_get(ps, 1), "qty");
    json_decref(j);
    h_resp_free(&r);
    assert_true(on_master(f, "inv:hold:{cmdead-p}", "HDEL %s k p i e q x t d m") >= 8);
    assert_int_equal(on_master(f, "inv:hold:{cmdead-p}", "HSET %s c dead u 1"), 2);
    snprintf(cmd, sizeof cmd, "HSET %%s c dead u 1 k cr-mdead e %lld p %%s", epoch);
    char plan[160];
    snprintf(plan, sizeof plan, "%s %lld 0:%lld 1:%lld", placed, epoch, q0, q1);
    int rn = h_cluster_master_of(f->cluster, "inv:order:{cmdead-p}");
    redisReply *pr =
        h_port_command(h_cluster_port(f->cluster, rn), cmd, "inv:order:{cmdead-p}", plan);
    assert_non_null(pr);
    freeReplyObject(pr);
    assert_int_equal(on_master(f, "inv:intents", "ZADD %s 1 cmdead-p"), 1);
    assert_int_equal(rve_sku_nums(a, NULL, "cr-mdead").reserved, 3);
    assert_int_equal(rve_on_resv(a, "GET", "cmdead-p", "", NULL), 404); /* no index */
    struct rve_nums n = settled_back(a, "cr-mdead");
    assert_int_equal(n.reserved, 0);
    assert_int_equal(n.remaining, 4);
    assert_int_equal(rve_reserve(a, "cr-mdead", 3, 60, "cmdead-p", NULL), 201);
    assert_int_equal(rve_sku_nums(a, NULL, "cr-mdead").reserved, 3);
    assert_int_equal(rve_on_resv(a, "DELETE", "cmdead-p", "", NULL), 200);

    /* The confirm: an id whose index and record live on neither the paused master
     * nor the intents set's, so the chain reaches its parts. */
    int intents = h_cluster_master_of(f->cluster, "inv:intents");
    int paused = node[1] != intents ? 1 : 0, landed = 1 - paused;
    assert_int_not_equal(node[paused], intents);
    char id[64];
    for (int k = 0;; k++) {
        char rec[96];
        snprintf(id, sizeof id, "cmdead-c%d", k);
        snprintf(rec, sizeof rec, "inv:order:{%s}", id);
        if (h_cluster_master_of(f->cluster, rec) != node[paused])
            break;
    }
    assert_int_equal(rve_reserve(a, "cr-mdead", 3, 60, id, NULL), 201);
    const char *const one_loop[] = {"--threads", "1", NULL};
    h_svc *second = h_svc_start_args(h_cluster_node(f->cluster, 1), one_loop);
    assert_non_null(second);
    int pp = h_cluster_port(f->cluster, node[paused]);
    redisReply *pz = h_port_command(pp, "CLIENT PAUSE 4000 WRITE");
    assert_non_null(pz);
    freeReplyObject(pz);
    struct confirming c = {h_svc_port(second), id, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, confirm_one, &c), 0);
    bool seen = false;
    snprintf(cmd, sizeof cmd, "HEXISTS %%s %s", id);
    for (long long until = rve_wall_ms() + 3000; !seen && rve_wall_ms() < until;) {
        seen = on_master(f, key[landed], cmd) == 1;
        if (!seen)
            usleep(2000);
    }
    assert_true(h_svc_kill(second) >= 0);
    pthread_join(t, NULL);
    h_svc_free(second);
    pz = h_port_command(pp, "CLIENT UNPAUSE");
    if (pz != NULL)
        freeReplyObject(pz);
    assert_true(seen); /* one part sold, the other held up, the service gone */
    n = settled_back(a, "cr-mdead");
    assert_int_equal(n.reserved, 0);
    assert_int_equal(n.sold, 0);
    assert_int_equal(n.remaining, 4);
    char path[96];
    snprintf(path, sizeof path, "/orders/%s", id);
    assert_int_equal(h_http(a, "GET", path, NULL, NULL, 0, &r), 404); /* no record */
    h_resp_free(&r);
    char code[64];
    assert_int_equal(rve_on_resv(a, "POST", id, "/confirm", code), 409);
    assert_string_equal(code, "reservation_released");
    assert_int_equal(rve_sku_nums(a, NULL, "cr-mdead").remaining, 4);
}

/* Holds, confirms, releases, 1 s holds left to expire, and orders, all at once from
 * 4 clients: every answer is one the client can act on (a place or an order may be
 * 409 or 503 busy), and once the sweeper has returned the expired holds, sold is
 * exactly the confirmed holds' and the orders' units. */
struct mix {
    int port;
    _Atomic long long placed, confirmed, released, sold_units, failed;
};

static void mixer(int idx, void *arg)
{
    struct mix *m = arg;
    for (int k = 0; k < 20; k++) {
        char id[48];
        snprintf(id, sizeof id, "cmx-%d-%d", idx, k);
        long long q = 1 + k % 2;
        int st = rve_reserve(m->port, "cr-mix", q, k % 5 == 0 ? 1 : 30, id, NULL);
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
                atomic_fetch_add(&m->sold_units, q);
            } else if (c != 0) {
                atomic_fetch_add(&m->failed, 1);
                fprintf(stderr, "mix: %s of %s: %d %s\n",
                        k % 3 == 0 ? "release" : "confirm", id, c, code);
            }
        } else if (st != 409 && st != 503) {
            atomic_fetch_add(&m->failed, 1);
            fprintf(stderr, "mix: reserve %s: %d\n", id, st);
        }
        st = h_order(m->port, "cr-mix", 1, NULL, NULL);
        if (st == 201) {
            atomic_fetch_add(&m->sold_units, 1);
        } else if (st != 409 && st != 503) {
            atomic_fetch_add(&m->failed, 1);
            fprintf(stderr, "mix: order: %d\n", st);
        }
    }
}

static void test_concurrent_mix_audited(void **state)
{
    struct h_cluster_env *f = *state;
    int a = f->port;
    assert_int_equal(h_put_sku(a, NULL, "cr-mix", 200, 4, "lock", 0), 0);
    struct mix m = {.port = a};
    assert_int_equal(h_parallel(4, mixer, &m), 0);
    print_message("mix: %lld placed, %lld confirmed, %lld released, %lld failed\n",
                  (long long)m.placed, (long long)m.confirmed, (long long)m.released,
                  (long long)m.failed);
    assert_int_equal(m.failed, 0);
    assert_true(m.placed > 0 && m.confirmed > 0 && m.released > 0);
    /* the 1 s holds returned by the sweeper */
    struct rve_nums n = rve_until_unreserved(a, NULL, "cr-mix", 4000);
    assert_int_equal(n.reserved, 0);
    assert_int_equal(n.initial, 200);
    assert_int_equal(n.sold, m.sold_units);
}

/* An order under a live hold's id (the order path does not look at holds): the order
 * is an order, the hold a hold that cannot be confirmed (409), GET and release true. */
static void test_order_under_hold_id(void **state)
{
    struct h_cluster_env *f = *state;
    assert_int_equal(h_put_sku(f->port, NULL, "cr-oid", 10, 2, "lock", 0), 0);
    rve_order_under_hold(f->port, NULL, "cr-oid", "coid-1", 2);
    /* a hold over both segments */
    assert_int_equal(h_put_sku(f->port, NULL, "cr-oidm", 10, 2, "lock", 0), 0);
    rve_order_under_hold(f->port, NULL, "cr-oidm", "coidm-1", 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hold_confirm_replay),
        cmocka_unit_test(test_order_under_hold_id),
        cmocka_unit_test(test_expiry_returns_units),
        cmocka_unit_test(test_confirm_races_expiry),
        cmocka_unit_test(test_restock_with_holds),
        cmocka_unit_test(test_reset_and_delete_void_holds),
        cmocka_unit_test(test_dead_place_taken_over),
        cmocka_unit_test(test_multi_segment_hold),
        cmocka_unit_test(test_multi_segment_expiry),
        cmocka_unit_test(test_multi_segment_dead),
        cmocka_unit_test(test_concurrent_mix_audited),
    };
    int failed = cmocka_run_group_tests_name(
        "cluster_reservations", tests, h_cluster_group_setup, h_cluster_group_teardown);
    return h_exit_status(failed);
}
