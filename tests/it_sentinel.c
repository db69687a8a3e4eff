/* it_sentinel.c -- Redis Sentinel against real processes: a master, two replicas and
 * three redis-sentinels (quorum 2, with a password of their own) on loopback; the
 * service started with --redis redis-sentinel://.../mymaster follows a failover under
 * load (SIGKILLed master): orders succeed again within a bound, nothing is oversold,
 * the audit holds on the new master and every acknowledged order of a "replicated"
 * SKU is there; then a frozen master (SIGSTOP) is left as soon as the sentinels name
 * another. A wrong sentinel password and a malformed URL are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

#define NAME "mymaster"
#define SPASS "sentinel-secret"
#define NSENTINELS 3
#define NNODES 3 /* a master and two replicas */
#define CLIENTS 4
#define MAX_ACKED 20000

struct fixture {
    h_redis *node[NNODES]; /* node[0]: the first master */
    h_sentinel *sentinels[NSENTINELS];
    char url[256];
    h_svc *svc;
    int port;
};

/* A reply of `cmd` on the sentinel at `port` (after AUTH): its element count when
 * an array, else -1. */
static long sentinel_count(int port, const char *cmd)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    if (c == NULL || c->err) {
        if (c != NULL)
            redisFree(c);
        return -1;
    }
    long n = -1;
    redisReply *r = redisCommand(c, "AUTH %s", SPASS);
    if (r != NULL)
        freeReplyObject(r);
    r = redisCommand(c, cmd);
    if (r != NULL && r->type == REDIS_REPLY_ARRAY)
        n = (long)r->elements;
    if (r != NULL)
        freeReplyObject(r);
    redisFree(c);
    return n;
}

static int group_setup(void **state)
{
    h_deadline(120);
    struct fixture *f = calloc(1, sizeof *f);
    *state = f;
    /* No AOF (see it_durability.c: a replica writing its first AOF ignores SIGTERM),
     * no sync delay: a replica is ready at once. */
    const char *first[] = {"--appendonly", "no", "--repl-diskless-sync-delay", "0", NULL};
    if ((f->node[0] = h_redis_start_args(first)) == NULL)
        return -1;
    char mport[16];
    snprintf(mport, sizeof mport, "%d", h_redis_port(f->node[0]));
    const char *args[] = {"--replicaof", "127.0.0.1",
                          mport,         "--appendonly",
                          "no",          "--repl-diskless-sync-delay",
                          "0",           NULL};
    for (int i = 1; i < NNODES; i++)
        if ((f->node[i] = h_redis_start_args(args)) == NULL)
            return -1;
    for (int i = 0; i < NSENTINELS; i++)
        if ((f->sentinels[i] =
                 h_sentinel_start(h_redis_port(f->node[0]), NAME, 2, SPASS)) == NULL)
            return -1;
    /* A failover needs each sentinel to know the replicas and the other sentinels
     * (found through the master's hello channel, every 2 s). */
    long long end = h_now_ms() + 30000;
    for (int i = 0; i < NSENTINELS; i++) {
        int sp = h_sentinel_port(f->sentinels[i]);
        while (h_now_ms() < end &&
               (sentinel_count(sp, "SENTINEL replicas " NAME) < NNODES - 1 ||
                sentinel_count(sp, "SENTINEL sentinels " NAME) < NSENTINELS - 1))
            h_sleep_ms(100);
        if (sentinel_count(sp, "SENTINEL sentinels " NAME) < NSENTINELS - 1)
            return -1;
    }
    int n = snprintf(f->url, sizeof f->url, "redis-sentinel://");
    for (int i = 0; i < NSENTINELS; i++)
        n += snprintf(f->url + n, sizeof f->url - (size_t)n, "%s127.0.0.1:%d",
                      i ? "," : "", h_sentinel_port(f->sentinels[i]));
    snprintf(f->url + n, sizeof f->url - (size_t)n, "/%s", NAME);
    const char *svc_args[] = {"--redis", f->url, "--redis-timeout-ms", "500", NULL};
    const char *env[] = {"INVENTORY_REDIS_SENTINEL_PASSWORD=" SPASS, NULL};
    struct h_svc_opts o = {.args = svc_args, .env = env};
    if ((f->svc = h_svc_start(NULL, &o)) == NULL)
        return -1;
    f->port = h_svc_port(f->svc);
    h_deadline(0);
    return 0;
}

static int group_teardown(void **state)
{
    struct fixture *f = *state;
    if (f == NULL)
        return 0;
    int rc = h_svc_stop_clean(f->svc);
    h_svc_free(f->svc);
    for (int i = 0; i < NSENTINELS; i++)
        h_sentinel_free(f->sentinels[i]);
    for (int i = 0; i < NNODES; i++)
        h_redis_free(f->node[i]);
    free(f);
    return rc;
}

static void put(int port, const char *sku, const char *durability, long long stock)
{
    char path[128], body[160];
    snprintf(path, sizeof path, "/admin/skus/%s?reset=true", sku);
    snprintf(body, sizeof body,
             "{\"stock\": %lld, \"segments\": 4, \"durability\": \"%s\"}", stock,
             durability);
    struct h_resp r;
    int st = h_req(port, "PUT", path, NULL, body, &r);
    if (st != 200 && st != 201)
        fail_msg("PUT %s: %d %s", path, st, r.body);
    h_resp_free(&r);
}

struct load {
    int port;
    bool replicated; /* orders of the replicated SKU too (every other one) */
    atomic_bool stop;
    _Atomic long long last_ok_ms; /* when an order last got 201 */
    struct client {
        int n_acked; /* 201s of the replicated SKU: their ids in acked */
        char (*acked)[32];
        long long other; /* answers neither 201 nor 503 */
    } c[CLIENTS];
};

/* Orders of qty 1, each with an id of its own, until told to stop. */
static void client(int idx, void *ctx)
{
    struct load *l = ctx;
    struct client *c = &l->c[idx];
    for (int i = 0; !atomic_load(&l->stop); i++) {
        bool replicated = l->replicated && i % 2 == 0;
        char id[32];
        snprintf(id, sizeof id, "c%d-%d", idx, i);
        int st = h_order(l->port, replicated ? "sn-repl" : "sn-async", 1, id, NULL);
        if (st == 201) {
            atomic_store(&l->last_ok_ms, h_now_ms());
            if (replicated && c->n_acked < MAX_ACKED)
                snprintf(c->acked[c->n_acked++], sizeof c->acked[0], "%s", id);
        } else if (st != 503) {
            c->other++;
        } else {
            h_sleep_ms(20); /* the outage: no busy loop */
        }
    }
}

struct driver {
    struct load *l;
    struct fixture *f;
    long long (*fault)(struct fixture *f); /* returns when to count the outage from */
    long long fault_ms, back_ms;
};

/* Thread 0 of h_parallel: the fault after a second of orders, then wait for the
 * first order to succeed after it, let orders run a second more, stop the clients. */
static void drive(int idx, void *ctx)
{
    struct driver *d = ctx;
    if (idx != 0) {
        client(idx - 1, d->l);
        return;
    }
    h_sleep_ms(1000);
    d->fault_ms = d->fault(d->f);
    long long end = d->fault_ms + 30000;
    while (h_now_ms() < end && atomic_load(&d->l->last_ok_ms) <= d->fault_ms + 100)
        h_sleep_ms(50);
    d->back_ms = atomic_load(&d->l->last_ok_ms);
    h_sleep_ms(1000);
    atomic_store(&d->l->stop, true);
}

/* Orders from CLIENTS threads on `svc` while `fault` strikes; then: orders succeeded
 * again within 15 s, no answer but 201 and 503, nothing oversold, remaining + sold =
 * initial on the master now named for both SKUs, and (`replicated`) every 201 of the
 * "replicated" SKU is found there. */
static void orders_through(struct fixture *f, h_svc *svc, bool replicated,
                           long long (*fault)(struct fixture *f))
{
    int port = h_svc_port(svc);
    const long long stock = 1000000;
    put(port, "sn-repl", "replicated", stock);
    put(port, "sn-async", "async", stock);
    assert_int_equal(h_order(port, "sn-repl", 1, NULL, NULL), 201);

    struct load *l = calloc(1, sizeof *l);
    l->port = port;
    l->replicated = replicated;
    for (int i = 0; i < CLIENTS; i++)
        l->c[i].acked = calloc(MAX_ACKED, sizeof *l->c[i].acked);
    struct driver d = {.l = l, .f = f, .fault = fault};
    assert_int_equal(h_parallel(CLIENTS + 1, drive, &d), 0);

    long long outage = d.back_ms - d.fault_ms;
    fprintf(stderr, "sentinel: orders again %lld ms after the fault\n", outage);
    if (d.back_ms <= d.fault_ms + 100) {
        h_svc_dump_log(svc, 4000);
        fail_msg("no order succeeded within 30 s of the fault");
    }
    /* Generous: a failover takes 2-3 s here, leaving a frozen master 0.1-0.5 s;
     * broken is "never", or test_frozen_master_is_left's 20 s deadline. */
    if (outage >= 15000) {
        h_svc_dump_log(svc, 4000);
        fail_msg("orders again only %lld ms after the fault", outage);
    }

    long long acked = 0, other = 0;
    for (int i = 0; i < CLIENTS; i++) {
        other += l->c[i].other;
        for (int k = 0; k < l->c[i].n_acked; k++, acked++)
            if (h_order_status(port, l->c[i].acked[k]) != 200)
                fail_msg("acknowledged order %s of the replicated SKU is lost",
                         l->c[i].acked[k]);
    }
    assert_int_equal(other, 0);
    assert_true(!replicated || acked > 0);
    assert_int_equal(h_audit(port, NULL, "sn-repl", stock, true), 0);
    assert_int_equal(h_audit(port, NULL, "sn-async", stock, false), 0);
    json_t *s = h_get_sku(port, NULL, "sn-repl");
    assert_non_null(s);
    assert_true(h_jint(s, "sold") >= acked + 1); /* + the first order */
    json_decref(s);
    for (int i = 0; i < CLIENTS; i++)
        free(l->c[i].acked);
    free(l);
}

/* A sentinel's reply to `cmd` on a fresh connection (after AUTH); caller frees. */
static redisReply *sentinel_command(const h_sentinel *s, const char *cmd)
{
    redisContext *c = redisConnect("127.0.0.1", h_sentinel_port(s));
    if (c == NULL || c->err) {
        if (c != NULL)
            redisFree(c);
        return NULL;
    }
    redisReply *r = redisCommand(c, "AUTH %s", SPASS);
    if (r != NULL)
        freeReplyObject(r);
    r = redisCommand(c, cmd);
    redisFree(c);
    return r;
}

/* The node sentinel 0 names as the master; -1 when none of ours. */
static int named_node(struct fixture *f)
{
    redisReply *r =
        sentinel_command(f->sentinels[0], "SENTINEL get-master-addr-by-name " NAME);
    int port = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2
                   ? atoi(r->element[1]->str)
                   : -1;
    if (r != NULL)
        freeReplyObject(r);
    for (int i = 0; i < NNODES; i++)
        if (h_redis_port(f->node[i]) == port)
            return i;
    return -1;
}

/* Wait (up to 20 s) until sentinel 0 names a master other than node `old`. */
static int await_new_master(struct fixture *f, int old)
{
    long long end = h_now_ms() + 20000;
    int now;
    while ((now = named_node(f)) == old && h_now_ms() < end)
        h_sleep_ms(20);
    return now;
}

static long long kill_master(struct fixture *f)
{
    long long now = h_now_ms();
    h_redis_kill(f->node[0]);
    return now;
}

/* The master is SIGKILLed under load; the sentinels promote a replica and the
 * service follows them (down-after 1 s, an election, one tick of the resolver). */
static void test_failover_under_load(void **state)
{
    struct fixture *f = *state;
    h_deadline(90);
    orders_through(f, f->svc, true, kill_master);
    int m = await_new_master(f, 0);
    assert_true(m > 0);
    h_deadline(0);
}

/* True when every sentinel lists node `n` as a replica whose link to its master is
 * up and that it holds for neither down nor disconnected. */
static bool replica_known(struct fixture *f, int n)
{
    int good = 0;
    for (int k = 0; k < NSENTINELS; k++) {
        redisReply *r = sentinel_command(f->sentinels[k], "SENTINEL replicas " NAME);
        for (size_t i = 0; r != NULL && r->type == REDIS_REPLY_ARRAY && i < r->elements;
             i++) {
            const redisReply *e = r->element[i];
            bool port = false, flags = false, link = false;
            for (size_t j = 0; e->type == REDIS_REPLY_ARRAY && j + 1 < e->elements;
                 j += 2) {
                const char *key = e->element[j]->str, *val = e->element[j + 1]->str;
                if (key == NULL || val == NULL)
                    continue;
                if (strcmp(key, "port") == 0)
                    port = atoi(val) == h_redis_port(f->node[n]);
                else if (strcmp(key, "flags") == 0)
                    flags = strcmp(val, "slave") == 0;
                else if (strcmp(key, "master-link-status") == 0)
                    link = strcmp(val, "ok") == 0;
            }
            good += port && flags && link;
        }
        if (r != NULL)
            freeReplyObject(r);
    }
    return good == NSENTINELS;
}

/* SIGSTOP the master (a replica since test_failover_under_load); returns once
 * sentinel 0 names the other. */
static long long freeze_master(struct fixture *f)
{
    int m = named_node(f);
    h_redis_pause(f->node[m]);
    await_new_master(f, m);
    return h_now_ms();
}

/* A frozen master (SIGSTOP) keeps every connection open and answers nothing. A
 * service whose redis_timeout_ms is 20 s leaves it as soon as the sentinels name
 * another master: what waited on it is answered 503 at once, and orders go on
 * within 15 s of the switch (0.1-0.5 s here). Before connections were dropped on a
 * change of master they waited out their 20 s deadline first (17 s after the switch).
 * Orders of the async SKU only: the new master's only replica is the frozen one, so
 * WAIT could not be answered. */
static void test_frozen_master_is_left(void **state)
{
    struct fixture *f = *state;
    h_deadline(90);
    int m = named_node(f);
    assert_true(m > 0);
    int other = m == 1 ? 2 : 1;
    /* The other replica must stream from the new master, and every sentinel must
     * know it so, for the sentinels to pick it. Sentinel points it there itself;
     * REPLICAOF here only saves waiting for a slow reconfiguration. */
    char mport[16];
    snprintf(mport, sizeof mport, "%d", h_redis_port(f->node[m]));
    redisReply *r =
        h_port_command(h_redis_port(f->node[other]), "REPLICAOF 127.0.0.1 %s", mport);
    if (r != NULL)
        freeReplyObject(r);
    long long end = h_now_ms() + 30000;
    while (!replica_known(f, other) && h_now_ms() < end)
        h_sleep_ms(100);
    assert_true(replica_known(f, other));
    const char *args[] = {"--redis", f->url, "--redis-timeout-ms", "20000", NULL};
    const char *env[] = {"INVENTORY_REDIS_SENTINEL_PASSWORD=" SPASS, NULL};
    struct h_svc_opts o = {.args = args, .env = env};
    h_svc *s = h_svc_start(NULL, &o);
    assert_non_null(s);
    orders_through(f, s, false, freeze_master);
    assert_int_equal(named_node(f), other);
    h_redis_resume(f->node[m]);
    assert_int_equal(h_svc_stop_clean(s), 0);
    h_svc_free(s);
    h_deadline(0);
}

/* The sentinels' password is their own: a service that gives them a wrong one finds
 * no master, and its orders are 503 (the master itself has no password here). */
static void test_wrong_sentinel_password(void **state)
{
    struct fixture *f = *state;
    const char *args[] = {"--redis", f->url, "--redis-timeout-ms", "300", NULL};
    const char *env[] = {"INVENTORY_REDIS_SENTINEL_PASSWORD=wrong", NULL};
    struct h_svc_opts o = {.args = args, .env = env};
    h_svc *s = h_svc_start(NULL, &o);
    assert_non_null(s);
    struct h_resp r;
    assert_int_equal(h_order(h_svc_port(s), "sn-repl", 1, NULL, &r), 503);
    assert_int_equal(h_expect_error(&r, 503, "backend_unavailable"), 0);
    h_resp_free(&r);
    assert_int_equal(h_svc_stop_clean(s), 0);
    h_svc_free(s);
}

/* A sentinel that names a replica (its stale view, or one still monitoring a demoted
 * master): every connection checks ROLE and refuses it, so the SKU that the replica
 * holds is not served from it (503), let alone written to. Without the check the
 * read came from the replica: 200. */
static void test_replica_named_is_refused(void **state)
{
    struct fixture *f = *state;
    put(f->port, "sn-role", "replicated", 10); /* on node[0] and, by WAIT, node[1] */
    h_sentinel *stale = h_sentinel_start(h_redis_port(f->node[1]), "stale", 2, NULL);
    assert_non_null(stale);
    char url[96];
    snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d/stale",
             h_sentinel_port(stale));
    const char *args[] = {"--redis", url, "--redis-timeout-ms", "300", NULL};
    h_svc *s = h_svc_start(NULL, &(struct h_svc_opts){.args = args});
    assert_non_null(s);
    struct h_resp r;
    int st = h_req(h_svc_port(s), "GET", "/admin/skus/sn-role", NULL, NULL, &r);
    if (st != 503)
        fail_msg("GET a SKU through a replica: %d %s", st, r.body);
    h_resp_free(&r);
    assert_int_equal(h_order(h_svc_port(s), "sn-role", 1, NULL, &r), 503);
    h_resp_free(&r);
    assert_int_equal(h_svc_stop_clean(s), 0);
    h_svc_free(s);
    h_sentinel_free(stale);
}

/* A malformed redis-sentinel:// is a configuration error: exit 2, one line. */
static void test_malformed_url_exits_2(void **state)
{
    (void)state;
    const char *bin = getenv("INVENTORYD");
    const char *urls[][2] = {
        {"redis-sentinel://127.0.0.1:26379", "needs the master's name"},
        {"redis-sentinel://127.0.0.1:70000/mymaster", "port must be an integer"},
        {"redis-sentinel://127.0.0.1:26379,/mymaster", "empty sentinel"},
    };
    for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        const char *argv[] = {bin != NULL && bin[0] ? bin : "build/inventoryd", "--redis",
                              urls[i][0], NULL};
        char *out = NULL, *err = NULL;
        assert_int_equal(h_run_cmd(argv, NULL, 5000, &out, &err), 2);
        if (strstr(err, urls[i][1]) == NULL)
            fail_msg("'%s': stderr '%s' does not say '%s'", urls[i][0], err, urls[i][1]);
        char *nl = strchr(err, '\n');
        assert_true(nl == NULL || nl[1] == '\0');
        free(out);
        free(err);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed_url_exits_2),
        cmocka_unit_test(test_wrong_sentinel_password),
        cmocka_unit_test(test_replica_named_is_refused),
        cmocka_unit_test(test_failover_under_load),
        cmocka_unit_test(test_frozen_master_is_left),
    };
    return h_exit_status(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
