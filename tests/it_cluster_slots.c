/* it_cluster_slots.c -- the Redis Cluster routing pieces (segments/redis/slots.h)
 * against a real cluster: 3 masters with a replica each, started by the harness.
 *
 * The map rd_slot_map_fetch reads from any node covers every slot with one of the
 * three masters and agrees with CLUSTER SLOTS and CLUSTER MYID; the slot rd_key_slot
 * computes is the one the server answers to CLUSTER KEYSLOT; a key's mapped master
 * takes a write and every other master answers MOVED naming that master; a slot in
 * migration answers ASK and TRYAGAIN, which parse too; a seed that is no cluster,
 * not there or wants a password is refused with the reason.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/redis/slots.h"
#include "tests/harness.h"

#define MASTERS 3
#define REPLICAS 1

static int group_setup(void **state)
{
    h_deadline(90);
    h_cluster *c = h_cluster_start(MASTERS, REPLICAS);
    *state = c;
    return c != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    h_cluster_free(*state);
    return 0;
}

static struct rd_target seed_of(int port)
{
    return (struct rd_target){.host = "127.0.0.1", .port = port, .timeout_ms = 2000};
}

/* The map as node `port` sees it; fails the test when it cannot be read. */
static void fetch(int port, struct rd_slot_map *m)
{
    struct rd_target seed = seed_of(port);
    char err[256];
    if (rd_slot_map_fetch(&seed, m, err, sizeof err) != 0)
        fail_msg("rd_slot_map_fetch from port %d: %s", port, err);
}

static bool is_cluster_port(const h_cluster *c, int port)
{
    for (int i = 0; i < h_cluster_size(c); i++)
        if (h_cluster_port(c, i) == port)
            return true;
    return false;
}

/* Every slot is routed to the same host:port by both maps. */
static void assert_same_routes(const struct rd_slot_map *a, const struct rd_slot_map *b)
{
    for (int s = 0; s < RD_SLOTS; s++) {
        const struct rd_node *x = rd_slot_map_master(a, s), *y = rd_slot_map_master(b, s);
        assert_non_null(x);
        assert_non_null(y);
        if (x->port != y->port || strcmp(x->host, y->host) != 0)
            fail_msg("slot %d: %s:%d against %s:%d", s, x->host, x->port, y->host,
                     y->port);
    }
}

/* A reply to a command on a fresh connection to `port` (caller frees). */
static redisReply *command(int port, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = h_port_vcommand(port, fmt, ap);
    va_end(ap);
    if (r == NULL)
        fail_msg("no reply from port %d", port);
    return r;
}

static void test_map_covers_every_slot(void **state)
{
    h_cluster *c = *state;
    h_deadline(30);
    struct rd_slot_map m;
    fetch(h_cluster_port(c, 0), &m);

    assert_int_equal(m.nmasters, MASTERS);
    assert_int_equal(rd_slot_map_assigned(&m), RD_SLOTS);
    int served[MASTERS] = {0};
    for (int s = 0; s < RD_SLOTS; s++) {
        assert_in_range(m.slot[s], 0, MASTERS - 1);
        served[m.slot[s]]++;
    }
    int total = 0, seen[2 * MASTERS * (1 + REPLICAS)] = {0}, nseen = 0;
    for (int i = 0; i < MASTERS; i++) {
        const struct rd_shard *sh = &m.masters[i];
        assert_true(served[i] > 0);
        total += served[i];
        assert_string_equal(sh->master.host, "127.0.0.1");
        assert_true(is_cluster_port(c, sh->master.port));
        assert_true(sh->master.online);
        assert_int_equal(strlen(sh->master.id), RD_NODE_ID_LEN);
        assert_int_equal(sh->nreplicas, REPLICAS);
        seen[nseen++] = sh->master.port;
        for (int j = 0; j < sh->nreplicas; j++) {
            assert_true(is_cluster_port(c, sh->replicas[j].port));
            seen[nseen++] = sh->replicas[j].port;
        }
        /* The node there says it is the one the map names. */
        redisReply *id = command(sh->master.port, "CLUSTER MYID");
        assert_int_equal(id->type, REDIS_REPLY_STRING);
        assert_string_equal(id->str, sh->master.id);
        freeReplyObject(id);
    }
    assert_int_equal(total, RD_SLOTS);
    for (int i = 0; i < nseen; i++) /* every node once: masters and replicas distinct */
        for (int j = i + 1; j < nseen; j++)
            assert_int_not_equal(seen[i], seen[j]);
    assert_int_equal(nseen, h_cluster_size(c));

    /* Every node, masters and replicas, gives the same map. */
    for (int i = 1; i < h_cluster_size(c); i++) {
        struct rd_slot_map other;
        fetch(h_cluster_port(c, i), &other);
        assert_int_equal(other.nmasters, MASTERS);
        assert_same_routes(&m, &other);
        rd_slot_map_clear(&other);
    }

    /* CLUSTER SLOTS (the fallback parser) routes every slot the same way. */
    redisReply *r = command(h_cluster_port(c, 0), "CLUSTER SLOTS");
    struct rd_slot_map old;
    char err[128];
    assert_int_equal(rd_slot_map_from_slots(r, "127.0.0.1", &old, err, sizeof err), 0);
    assert_int_equal(old.nmasters, MASTERS);
    assert_same_routes(&m, &old);
    for (int i = 0; i < MASTERS; i++) {
        int j =
            rd_slot_map_find(&m, old.masters[i].master.host, old.masters[i].master.port);
        assert_true(j >= 0);
        assert_string_equal(old.masters[i].master.id, m.masters[j].master.id);
        /* SLOTS leaves out a replica that has replicated nothing yet (offset 0), as
         * those of a cluster that has taken no write: a subset of SHARDS's. */
        assert_true(old.masters[i].nreplicas <= REPLICAS);
        for (int k = 0; k < old.masters[i].nreplicas; k++)
            assert_int_equal(old.masters[i].replicas[k].port,
                             m.masters[j].replicas[0].port);
    }
    rd_slot_map_clear(&old);
    freeReplyObject(r);
    rd_slot_map_clear(&m);
}

/* SET `key` on `port`: the reply (caller frees). */
static redisReply *set_on(int port, const char *key)
{
    return command(port, "SET %s v", key);
}

static void test_keys_route_to_their_master(void **state)
{
    h_cluster *c = *state;
    h_deadline(30);
    struct rd_slot_map m;
    fetch(h_cluster_port(c, 1), &m);
    char keys[32][64];
    int n = 0;
    const char *fixed[] = {"inv:{sku:3}:stock",    "inv:sku:{tv}",
                           "inv:order:{A-1}",      "foo",
                           "{user1000}.following", "{user1000}.followers",
                           "foo{}{bar}",           "foo{{bar}}zap"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        snprintf(keys[n++], sizeof keys[0], "%s", fixed[i]);
    for (int seg = 0; seg < 20; seg++) /* a SKU's segments spread over the masters */
        snprintf(keys[n++], sizeof keys[0], "inv:{tv:%d}:lock", seg);

    int hits[MASTERS] = {0};
    for (int k = 0; k < n; k++) {
        const char *key = keys[k];
        int slot = rd_key_slot(key, strlen(key));
        redisReply *r = command(h_cluster_port(c, 0), "CLUSTER KEYSLOT %s", key);
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        if (r->integer != slot)
            fail_msg("%s: rd_key_slot %d, CLUSTER KEYSLOT %lld", key, slot, r->integer);
        freeReplyObject(r);

        int owner = m.slot[slot];
        assert_in_range(owner, 0, MASTERS - 1);
        hits[owner]++;
        r = set_on(m.masters[owner].master.port, key);
        if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0)
            fail_msg("SET %s on its master: %s", key, r->str != NULL ? r->str : "?");
        freeReplyObject(r);

        for (int other = 0; other < MASTERS; other++) {
            if (other == owner)
                continue;
            r = set_on(m.masters[other].master.port, key);
            assert_int_equal(r->type, REDIS_REPLY_ERROR);
            struct rd_redirect to;
            assert_int_equal(rd_redirect_parse(r->str, r->len, &to), 0);
            assert_int_equal(to.kind, RD_REDIR_MOVED);
            assert_int_equal(to.slot, slot);
            assert_int_equal(rd_slot_map_find(&m, to.host, to.port), owner);
            freeReplyObject(r);
        }
    }
    for (int i = 0; i < MASTERS; i++)
        assert_true(hits[i] > 0); /* every master answered and redirected some key */
    rd_slot_map_clear(&m);
}

/* A slot moving from master A to B: A answers ASK for a key it no longer has and
 * TRYAGAIN for a multi-key read of keys it has only in part. */
static void test_migration_redirects(void **state)
{
    h_cluster *c = *state;
    h_deadline(30);
    struct rd_slot_map m;
    fetch(h_cluster_port(c, 0), &m);
    int slot = rd_key_slot("mig", 3);
    int a = m.slot[slot], b = (a + 1) % MASTERS;
    const struct rd_node *na = &m.masters[a].master, *nb = &m.masters[b].master;

    redisReply *r = set_on(na->port, "{mig}here");
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = command(nb->port, "CLUSTER SETSLOT %d IMPORTING %s", slot, na->id);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = command(na->port, "CLUSTER SETSLOT %d MIGRATING %s", slot, nb->id);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);

    struct rd_redirect to;
    r = command(na->port, "GET {mig}gone");
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_int_equal(rd_redirect_parse(r->str, r->len, &to), 0);
    assert_int_equal(to.kind, RD_REDIR_ASK);
    assert_int_equal(to.slot, slot);
    assert_int_equal(rd_slot_map_find(&m, to.host, to.port), b);
    freeReplyObject(r);

    r = command(na->port, "MGET {mig}here {mig}gone");
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_int_equal(rd_redirect_parse(r->str, r->len, &to), 0);
    if (to.kind != RD_REDIR_TRYAGAIN)
        fail_msg("MGET during migration: %s", r->str);
    freeReplyObject(r);

    /* Back to stable: the slot stays with A, which serves the key again. */
    for (int i = 0; i < 2; i++) {
        r = command(i == 0 ? na->port : nb->port, "CLUSTER SETSLOT %d STABLE", slot);
        assert_int_equal(r->type, REDIS_REPLY_STATUS);
        freeReplyObject(r);
    }
    r = command(na->port, "GET {mig}gone");
    assert_int_equal(r->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    rd_slot_map_clear(&m);
}

/* Expect the fetch from `seed` to fail with `why` in its reason and leave the map
 * empty. */
static void expect_refused(const struct rd_target *seed, const char *why)
{
    struct rd_slot_map m;
    char err[256] = "";
    assert_int_equal(rd_slot_map_fetch(seed, &m, err, sizeof err), -1);
    assert_int_equal(m.nmasters, 0);
    assert_int_equal(rd_slot_map_assigned(&m), 0);
    if (strstr(err, why) == NULL)
        fail_msg("refused with \"%s\", expected \"%s\"", err, why);
}

static void test_fetch_refusals(void **state)
{
    h_cluster *c = *state;
    h_deadline(30);
    int port = h_cluster_port(c, h_cluster_size(c) - 1);

    struct rd_target seed = seed_of(h_free_port());
    expect_refused(&seed, "connect 127.0.0.1:");
    seed = seed_of(port);
    seed.db = 1;
    expect_refused(&seed, "db 0 only");
    seed = seed_of(port);
    seed.unix_path = "/tmp/redis.sock";
    expect_refused(&seed, "not a unix socket");

    h_redis *plain = h_redis_start();
    assert_non_null(plain);
    seed = seed_of(h_redis_port(plain));
    expect_refused(&seed, "cluster support disabled");
    h_redis_free(plain);

    /* A node that wants a password: refused without it, read with it. */
    struct timeval tv = {2, 0};
    redisContext *admin = redisConnectWithTimeout("127.0.0.1", port, tv);
    assert_non_null(admin);
    redisReply *r = redisCommand(admin, "CONFIG SET requirepass s3cret");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    seed = seed_of(port);
    expect_refused(&seed, "NOAUTH");
    seed.password = "wrong";
    expect_refused(&seed, "AUTH: WRONGPASS");
    seed.password = "s3cret";
    struct rd_slot_map m;
    char err[256];
    int rc = rd_slot_map_fetch(&seed, &m, err, sizeof err);
    r = redisCommand(admin, "CONFIG SET requirepass %s", "");
    assert_non_null(r);
    freeReplyObject(r);
    redisFree(admin);
    if (rc != 0)
        fail_msg("fetch with the password: %s", err);
    assert_int_equal(rd_slot_map_assigned(&m), RD_SLOTS);
    rd_slot_map_clear(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_map_covers_every_slot),
        cmocka_unit_test(test_keys_route_to_their_master),
        cmocka_unit_test(test_migration_redirects),
        cmocka_unit_test(test_fetch_refusals),
    };
    int failed =
        cmocka_run_group_tests_name("cluster_slots", tests, group_setup, group_teardown);
    return h_exit_status(failed);
}
