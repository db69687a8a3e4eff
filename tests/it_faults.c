/* it_faults.c -- lock holders that freeze, die or lose their Redis connection, and
 * several instances on one Redis: nothing is oversold, nothing is lost.
 *
 * Every case ends with the audit: remaining + sold = initial, no segment below 0,
 * one order record per sale, and the 201s counted by the clients equal what was sold.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

static int group_setup(void **state)
{
    *state = h_env_start_redis();
    return *state != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    return h_env_stop(*state);
}

/* ---- helpers ---------------------------------------------------------------------- */

/* Poll until all `n` segment locks of `sku` exist; false after timeout_ms. */
static bool wait_locks(const h_redis *r, const char *sku, int n, int timeout_ms)
{
    long long end = h_now_ms() + timeout_ms;
    do {
        int held = 0;
        for (int i = 0; i < n; i++) {
            char key[160], buf[128];
            held += h_redis_get(r, h_key_lock(key, sku, i), buf, sizeof buf) == 1;
        }
        if (held == n)
            return true;
        h_sleep_ms(10);
    } while (h_now_ms() < end);
    return false;
}

/* An integer field of GET /admin/skus/SKU, -1 on error. */
static long long sku_field(int port, const char *sku, const char *name)
{
    json_t *j = h_get_sku(port, NULL, sku);
    if (j == NULL)
        return -1;
    json_t *v = json_object_get(j, name);
    long long n = json_is_integer(v) ? json_integer_value(v) : -1;
    json_decref(j);
    return n;
}

/* Wait until no segment lock of `sku` is held; false after timeout_ms. */
static bool wait_unlocked(int port, const char *sku, int timeout_ms)
{
    long long end = h_now_ms() + timeout_ms;
    do {
        if (sku_field(port, sku, "locks_held") == 0)
            return true;
        h_sleep_ms(50);
    } while (h_now_ms() < end);
    return false;
}

/* One order's outcome as a client saw it. */
struct outcome {
    char id[48];
    int status;
    char code[48];
    long long done_ms;
};

static void place(int port, const char *sku, struct outcome *o)
{
    struct h_resp r;
    o->status = h_order(port, sku, 1, o->id, &r);
    o->done_ms = h_now_ms();
    h_error_code(&r, o->code, sizeof o->code);
    h_resp_free(&r);
}

/* ---- frozen holder ----------------------------------------------------------------- */

#define FROZEN_SEGS 6
#define FROZEN_B_ORDERS 10

struct frozen {
    h_redis *redis;
    h_svc *a;
    int port_a, port_b;
    struct outcome a_orders[FROZEN_SEGS];
    struct outcome b_orders[FROZEN_B_ORDERS];
    bool paused, locked;
    long long paused_ms, resumed_ms;
};

static void frozen_b_main(int idx, void *ctx)
{
    struct frozen *f = ctx;
    snprintf(f->b_orders[idx].id, sizeof f->b_orders[idx].id, "frozen-b-%d", idx);
    place(f->port_b, "frozen", &f->b_orders[idx]);
}

static void frozen_main(int idx, void *ctx)
{
    struct frozen *f = ctx;
    if (idx < FROZEN_SEGS) {
        snprintf(f->a_orders[idx].id, sizeof f->a_orders[idx].id, "frozen-a-%d", idx);
        place(f->port_a, "frozen", &f->a_orders[idx]);
        return;
    }
    /* The controller: once A holds every segment, freeze it; B sells out; thaw A. */
    f->locked = wait_locks(f->redis, "frozen", FROZEN_SEGS, 10000);
    if (!f->locked) {
        fprintf(stderr, "A never held all %d segment locks\n", FROZEN_SEGS);
        return;
    }
    f->paused = h_svc_pause(f->a) == 0;
    f->paused_ms = h_now_ms();
    h_parallel(FROZEN_B_ORDERS, frozen_b_main, f);
    h_svc_resume(f->a);
    f->resumed_ms = h_now_ms();
}

/* A holds every segment lock mid-order (hold 1500 ms on a 500 ms lease, renewed by
 * its watchdog) and is frozen with SIGSTOP. Its leases lapse, B takes the segments
 * over and sells everything. A, thawed, must not deduct anything: each of its orders
 * is refused by the fenced write and answers 409 sold_out. */
static void test_frozen_holder_is_fenced(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    const char *args_a[] = {"--lock-ttl-ms", "500", NULL};
    const char *args_b[] = {"--lock-ttl-ms", "500", "--lock-wait-ms", "8000", NULL};
    h_svc *a = h_svc_start_args(e->redis, args_a);
    assert_non_null(a);
    h_svc *b = h_svc_start_args(e->redis, args_b);
    assert_non_null(b);
    struct frozen f;
    memset(&f, 0, sizeof f);
    f.redis = e->redis;
    f.a = a;
    f.port_a = h_svc_port(a);
    f.port_b = h_svc_port(b);
    assert_int_equal(
        h_put_sku(f.port_b, NULL, "frozen", FROZEN_SEGS, FROZEN_SEGS, "lock", 1500), 0);

    assert_int_equal(h_parallel(FROZEN_SEGS + 1, frozen_main, &f), 0);
    assert_true(f.locked);
    assert_true(f.paused);
    fprintf(stderr, "A was frozen for %lld ms\n", f.resumed_ms - f.paused_ms);

    /* B sold everything while A was frozen. */
    int b_sold = 0, b_sold_out = 0;
    for (int i = 0; i < FROZEN_B_ORDERS; i++) {
        struct outcome *o = &f.b_orders[i];
        if (o->status == 201)
            b_sold++;
        else if (o->status == 409 && strcmp(o->code, "sold_out") == 0)
            b_sold_out++;
        else
            fprintf(stderr, "B order %s answered %d %s\n", o->id, o->status, o->code);
    }
    assert_int_equal(b_sold, FROZEN_SEGS);
    assert_int_equal(b_sold_out, FROZEN_B_ORDERS - FROZEN_SEGS);

    /* A's resumed orders: refused, nothing deducted, no record. */
    int recorded = 0, confirmed = 0, not_sold_out = 0;
    for (int i = 0; i < FROZEN_SEGS; i++) {
        struct outcome *o = &f.a_orders[i];
        fprintf(stderr, "A order %s answered %d %s, %lld ms after the thaw\n", o->id,
                o->status, o->code, o->done_ms - f.resumed_ms);
        confirmed += o->status == 201 || o->status == 200;
        not_sold_out += o->status != 409 || strcmp(o->code, "sold_out") != 0;
        if (h_order_status(f.port_b, o->id) != 404) {
            fprintf(stderr, "A order %s has a record\n", o->id);
            recorded++;
        }
    }
    assert_int_equal(confirmed, 0);
    assert_int_equal(recorded, 0);
    long long fenced = h_stat(f.port_a, NULL, "fenced_rejections");
    fprintf(stderr, "A: fenced_rejections %lld, lease_lost %lld, lease_renewals %lld\n",
            fenced, h_stat(f.port_a, NULL, "lease_lost"),
            h_stat(f.port_a, NULL, "lease_renewals"));
    assert_true(fenced > 0);
    assert_int_equal(h_stat(f.port_a, NULL, "orders_confirmed"), 0);

    assert_true(wait_unlocked(f.port_b, "frozen", 5000));
    assert_int_equal(h_audit(f.port_b, NULL, "frozen", FROZEN_SEGS, true), 0);
    assert_int_equal(sku_field(f.port_b, "frozen", "sold"), b_sold);
    assert_int_equal(sku_field(f.port_b, "frozen", "remaining"), 0);
    assert_true(h_svc_alive(a));
    assert_true(h_svc_alive(b));
    h_svc_free(a);
    h_svc_free(b);
    /* The SKU is sold out when A wakes: a retry can never succeed, so "busy, retry
     * later" would mislead the client. */
    if (not_sold_out > 0)
        fail_msg("%d of A's resumed orders did not answer 409 sold_out", not_sold_out);
}

/* ---- killed holder ----------------------------------------------------------------- */

#define KILLED_SEGS 4
#define KILLED_STOCK 10
#define KILLED_TTL 1000
#define KILLED_HOLD 1500
#define KILLED_B_THREADS 6
#define KILLED_B_MAX 8 /* orders per B thread, at most */

struct killed {
    h_redis *redis;
    h_svc *a;
    int port_a, port_b;
    struct outcome a_orders[KILLED_SEGS];
    struct outcome b_orders[KILLED_B_THREADS][KILLED_B_MAX];
    bool locked, killed;
    long long killed_ms;
};

/* Each B thread orders until the SKU is sold out (or it used up its orders). */
static void killed_b_main(int idx, void *ctx)
{
    struct killed *k = ctx;
    for (int n = 0; n < KILLED_B_MAX; n++) {
        struct outcome *o = &k->b_orders[idx][n];
        snprintf(o->id, sizeof o->id, "killed-b-%d-%d", idx, n);
        place(k->port_b, "killed", o);
        if (o->status == 409 || o->status < 0)
            return;
    }
}

static void killed_main(int idx, void *ctx)
{
    struct killed *k = ctx;
    if (idx < KILLED_SEGS) {
        snprintf(k->a_orders[idx].id, sizeof k->a_orders[idx].id, "killed-a-%d", idx);
        place(k->port_a, "killed", &k->a_orders[idx]);
        return;
    }
    k->locked = wait_locks(k->redis, "killed", KILLED_SEGS, 10000);
    if (!k->locked)
        return;
    k->killed = h_svc_kill(k->a) == 128 + 9;
    k->killed_ms = h_now_ms();
}

/* A holds every segment mid-order and is killed with SIGKILL: nobody releases its
 * locks. B must take each over once its lease lapses (within a bound of the TTL)
 * and sell the whole stock; A's orders never deducted. */
static void test_killed_holder_leases_lapse(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", KILLED_TTL);
    const char *args_a[] = {"--lock-ttl-ms", ttl, NULL};
    const char *args_b[] = {"--lock-ttl-ms", ttl, "--lock-wait-ms", "8000", NULL};
    h_svc *a = h_svc_start_args(e->redis, args_a);
    assert_non_null(a);
    h_svc *b = h_svc_start_args(e->redis, args_b);
    assert_non_null(b);
    struct killed k;
    memset(&k, 0, sizeof k);
    k.redis = e->redis;
    k.a = a;
    k.port_a = h_svc_port(a);
    k.port_b = h_svc_port(b);
    assert_int_equal(h_put_sku(k.port_b, NULL, "killed", KILLED_STOCK, KILLED_SEGS,
                               "lock", KILLED_HOLD),
                     0);

    assert_int_equal(h_parallel(KILLED_SEGS + 1, killed_main, &k), 0);
    assert_true(k.locked);
    assert_true(k.killed);
    for (int i = 0; i < KILLED_SEGS; i++)
        assert_true(k.a_orders[i].status < 0); /* the connection died with A */
    /* The dead holder's locks are still there: only their TTL will free them. */
    assert_true(sku_field(k.port_b, "killed", "locks_held") > 0);

    assert_int_equal(h_parallel(KILLED_B_THREADS, killed_b_main, &k), 0);
    int sold = 0, sold_out = 0, busy = 0, other = 0;
    long long first_sale = -1, last_sale = -1;
    for (int t = 0; t < KILLED_B_THREADS; t++) {
        for (int n = 0; n < KILLED_B_MAX && k.b_orders[t][n].id[0]; n++) {
            struct outcome *o = &k.b_orders[t][n];
            if (o->status == 201) {
                sold++;
                if (first_sale < 0 || o->done_ms < first_sale)
                    first_sale = o->done_ms;
                if (o->done_ms > last_sale)
                    last_sale = o->done_ms;
            } else if (o->status == 409 && strcmp(o->code, "sold_out") == 0) {
                sold_out++;
            } else if (o->status == 503 && strcmp(o->code, "busy") == 0) {
                busy++; /* queued behind B's own holds; the client tries again */
            } else {
                other++;
                fprintf(stderr, "B order %s answered %d %s\n", o->id, o->status, o->code);
            }
        }
    }
    fprintf(
        stderr,
        "B: %d sold, %d sold out, %d busy, %d other; first sale %lld ms and last %lld "
        "ms after the kill (ttl %d, hold %d)\n",
        sold, sold_out, busy, other, first_sale - k.killed_ms, last_sale - k.killed_ms,
        KILLED_TTL, KILLED_HOLD);
    assert_int_equal(sold, KILLED_STOCK);
    assert_int_equal(other, 0);
    assert_true(sold_out > 0);
    /* The first takeover waits for a lease to lapse, then holds: bounded by the TTL
     * plus the hold, with generous slack for a loaded machine. */
    assert_true(first_sale - k.killed_ms <= KILLED_TTL + KILLED_HOLD + 5000);
    assert_true(h_stat(k.port_b, NULL, "busy_skips") > 0);

    for (int i = 0; i < KILLED_SEGS; i++)
        assert_int_equal(h_order_status(k.port_b, k.a_orders[i].id), 404);
    assert_true(wait_unlocked(k.port_b, "killed", 5000));
    assert_int_equal(h_audit(k.port_b, NULL, "killed", KILLED_STOCK, true), 0);
    assert_int_equal(sku_field(k.port_b, "killed", "sold"), sold);
    assert_true(h_svc_alive(b));
    h_svc_free(a);
    h_svc_free(b);
}

/* ---- three instances --------------------------------------------------------------- */

#define TRIO_STOCK 600
#define TRIO_THREADS 24
#define TRIO_MAX 200 /* orders per thread, at most */

struct trio {
    int ports[3];
    pthread_mutex_t mu;
    int sold[3];
    int sold_out, other;
    char (*ids)[48]; /* ids of the 201s */
    int nids;
};

static void trio_main(int idx, void *ctx)
{
    struct trio *t = ctx;
    int inst = idx % 3;
    for (int n = 0; n < TRIO_MAX; n++) {
        struct outcome o;
        memset(&o, 0, sizeof o);
        snprintf(o.id, sizeof o.id, "trio-%d-%d", idx, n);
        place(t->ports[inst], "trio", &o);
        pthread_mutex_lock(&t->mu);
        if (o.status == 201) {
            t->sold[inst]++;
            if (t->nids < TRIO_STOCK + 10)
                memcpy(t->ids[t->nids++], o.id, sizeof o.id);
        } else if (o.status == 409 && strcmp(o.code, "sold_out") == 0) {
            t->sold_out++;
        } else if (!(o.status == 503 && strcmp(o.code, "busy") == 0)) {
            t->other++;
            fprintf(stderr, "order %s on instance %d answered %d %s\n", o.id, inst,
                    o.status, o.code);
        }
        pthread_mutex_unlock(&t->mu);
        if (o.status == 409 || o.status < 0)
            return;
    }
}

/* Three instances on one Redis, many clients spread over them, one SKU: exactly the
 * stock is sold, each sale has its record, and the instances' counters agree. */
static void test_three_instances_one_sku(void **state)
{
    struct h_env *e = *state;
    h_deadline(90);
    h_svc *s[3];
    struct trio t;
    memset(&t, 0, sizeof t);
    pthread_mutex_init(&t.mu, NULL);
    t.ids = calloc(TRIO_STOCK + 10, sizeof *t.ids);
    assert_non_null(t.ids);
    const char *args[] = {"--threads", "16", NULL};
    for (int i = 0; i < 3; i++) {
        s[i] = h_svc_start_args(e->redis, args);
        assert_non_null(s[i]);
        t.ports[i] = h_svc_port(s[i]);
    }
    assert_int_equal(h_put_sku(t.ports[0], NULL, "trio", TRIO_STOCK, 16, "lock", 2), 0);

    assert_int_equal(h_parallel(TRIO_THREADS, trio_main, &t), 0);
    int total = t.sold[0] + t.sold[1] + t.sold[2];
    fprintf(stderr, "sold %d + %d + %d = %d, %d sold out, %d other\n", t.sold[0],
            t.sold[1], t.sold[2], total, t.sold_out, t.other);
    assert_int_equal(total, TRIO_STOCK);
    assert_int_equal(t.other, 0);
    assert_int_equal(t.sold_out, TRIO_THREADS);
    for (int i = 0; i < 3; i++) {
        assert_true(t.sold[i] > 0);
        assert_int_equal(h_stat(t.ports[i], NULL, "orders_confirmed"), t.sold[i]);
    }
    /* Every sale has its record, readable from any instance. */
    for (int i = 0; i < t.nids; i++)
        assert_int_equal(h_order_status(t.ports[i % 3], t.ids[i]), 200);
    for (int i = 0; i < 3; i++) {
        struct h_resp r;
        h_order(t.ports[i], "trio", 1, NULL, &r);
        assert_int_equal(h_expect_error(&r, 409, "sold_out"), 0);
        h_resp_free(&r);
    }
    assert_true(wait_unlocked(t.ports[0], "trio", 5000));
    for (int i = 0; i < 3; i++)
        assert_int_equal(h_audit(t.ports[i], NULL, "trio", TRIO_STOCK, true), 0);
    assert_int_equal(sku_field(t.ports[1], "trio", "sold"), TRIO_STOCK);
    for (int i = 0; i < 3; i++) {
        assert_true(h_svc_alive(s[i]));
        h_svc_free(s[i]);
    }
    free(t.ids);
    pthread_mutex_destroy(&t.mu);
}

/* ---- watchdog after a reconnect ------------------------------------------------------
 */

#define WD_TTL 300
#define WD_HOLD 1500 /* five leases long */

struct wd {
    h_redis *redis;
    int port;
    struct outcome order;
    int kills; /* CLIENT KILLs that killed at least one connection */
    long long renewals_after_kill;
    bool token_steady; /* the lock kept one token from acquire to deduct */
    bool locked;
};

static int client_kill_normal(const h_redis *r)
{
    redisContext *c = h_redis_connect(r);
    if (c == NULL)
        return -1;
    redisReply *rep = redisCommand(c, "CLIENT KILL TYPE normal");
    long long n = rep != NULL && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
    if (rep != NULL)
        freeReplyObject(rep);
    redisFree(c);
    return (int)n;
}

static void wd_main(int idx, void *ctx)
{
    struct wd *w = ctx;
    if (idx == 0) {
        snprintf(w->order.id, sizeof w->order.id, "wd-order");
        place(w->port, "wd", &w->order);
        return;
    }
    char key[160], first[128] = "", buf[128];
    h_key_lock(key, "wd", 0);
    long long end = h_now_ms() + 10000;
    while (h_now_ms() < end && h_redis_get(w->redis, key, first, sizeof first) != 1)
        h_sleep_ms(5);
    w->locked = first[0] != '\0';
    if (!w->locked)
        return;
    long long acquired = h_now_ms();
    w->token_steady = true;
    for (;;) {
        long long t = h_now_ms() - acquired;
        /* Two kills: early in the hold, and again a lease and a half later. */
        if ((w->kills == 0 && t >= 100) || (w->kills == 1 && t >= 100 + WD_TTL * 3 / 2)) {
            int n = client_kill_normal(w->redis);
            fprintf(stderr, "CLIENT KILL TYPE normal at %lld ms killed %d\n", t, n);
            if (n > 0)
                w->kills++;
            else
                break;
            if (w->kills == 1)
                w->renewals_after_kill = h_stat(w->port, NULL, "lease_renewals");
        }
        int rc = h_redis_get(w->redis, key, buf, sizeof buf);
        if (rc != 1)
            break; /* released by the deduction (or lost) */
        if (strcmp(buf, first) != 0)
            w->token_steady = false;
        if (t > WD_HOLD + 5000)
            break;
        h_sleep_ms(10);
    }
}

/* A hold five leases long; meanwhile every normal Redis connection -- the watchdog's
 * and the worker's -- is killed, twice. The watchdog must reconnect and keep renewing:
 * the lock keeps its token throughout and the order is confirmed (201), with no
 * fenced rejection and no lost lease. */
static void test_watchdog_renews_after_reconnect(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", WD_TTL);
    const char *args[] = {"--lock-ttl-ms", ttl, "--lock-wait-ms", "500", NULL};
    h_svc *s = h_svc_start_args(e->redis, args);
    assert_non_null(s);
    struct wd w;
    memset(&w, 0, sizeof w);
    w.redis = e->redis;
    w.port = h_svc_port(s);
    assert_int_equal(h_put_sku(w.port, NULL, "wd", 3, 1, "lock", WD_HOLD), 0);
    long long before = h_stat(w.port, NULL, "lease_renewals");

    assert_int_equal(h_parallel(2, wd_main, &w), 0);
    assert_true(w.locked);
    long long after = h_stat(w.port, NULL, "lease_renewals");
    fprintf(
        stderr,
        "order answered %d %s; %d kills; lease_renewals %lld, %lld at the first kill, "
        "%lld after; fenced %lld, lease_lost %lld, redis_errors %lld\n",
        w.order.status, w.order.code, w.kills, before, w.renewals_after_kill, after,
        h_stat(w.port, NULL, "fenced_rejections"), h_stat(w.port, NULL, "lease_lost"),
        h_stat(w.port, NULL, "redis_errors"));
    assert_int_equal(w.kills, 2);
    assert_int_equal(w.order.status, 201);
    assert_true(w.token_steady);
    assert_true(after > w.renewals_after_kill);
    assert_int_equal(h_stat(w.port, NULL, "fenced_rejections"), 0);
    assert_int_equal(h_stat(w.port, NULL, "lease_lost"), 0);
    assert_int_equal(h_order_status(w.port, "wd-order"), 200);
    assert_true(wait_unlocked(w.port, "wd", 5000));
    assert_int_equal(h_audit(w.port, NULL, "wd", 3, true), 0);
    assert_int_equal(sku_field(w.port, "wd", "sold"), 1);
    assert_true(h_svc_alive(s));
    h_svc_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frozen_holder_is_fenced),
        cmocka_unit_test(test_killed_holder_leases_lapse),
        cmocka_unit_test(test_three_instances_one_sku),
        cmocka_unit_test(test_watchdog_renews_after_reconnect),
    };
    return cmocka_run_group_tests_name("faults", tests, group_setup, group_teardown);
}
