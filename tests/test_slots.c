/* test_slots.c -- Redis Cluster routing pieces (segments/redis/slots.c): CRC16 and key
 * slots, redirect errors (a table and a seeded fuzz), and the slot map from hand-built
 * CLUSTER SHARDS / CLUSTER SLOTS replies, malformed ones included.
 *
 * The key slots expected below were answered by a redis-server 7.0.15 in cluster mode
 * (CLUSTER KEYSLOT); the CRC16 vectors by Python's binascii.crc_hqx(data, 0), which
 * is the same XMODEM CRC. Buffers handed to the parsers are malloc'd to their exact
 * length, without a NUL, so a sanitized build catches any read past the end.
 * rd_slot_map_fetch's choice between SHARDS and SLOTS is driven by a fake node on a
 * thread that answers canned bytes; tests/it_cluster_slots.c fetches from real ones.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "segments/redis/slots.h"

/* ---- helpers -------------------------------------------------------------------- */

/* A copy of s[0..len) in a buffer of exactly len bytes (caller frees). */
static char *exact(const char *s, size_t len)
{
    char *p = malloc(len > 0 ? len : 1);
    assert_non_null(p);
    memcpy(p, s, len);
    return p;
}

static unsigned crc_of(const char *s)
{
    char *p = exact(s, strlen(s));
    unsigned crc = rd_slot_crc16(p, strlen(s));
    free(p);
    return crc;
}

static int slot_of(const char *s, size_t len)
{
    char *p = exact(s, len);
    int slot = rd_key_slot(p, len);
    free(p);
    return slot;
}

static int redirect_of(const char *s, size_t len, struct rd_redirect *out)
{
    char *p = exact(s, len);
    int rc = rd_redirect_parse(p, len, out);
    free(p);
    return rc;
}

/* Hand-built replies, freed by freeReplyObject as hiredis's own. */
static redisReply *r_new(int type)
{
    redisReply *r = calloc(1, sizeof *r);
    assert_non_null(r);
    r->type = type;
    return r;
}

static redisReply *r_int(long long v)
{
    redisReply *r = r_new(REDIS_REPLY_INTEGER);
    r->integer = v;
    return r;
}

static redisReply *r_str(const char *s)
{
    redisReply *r = r_new(REDIS_REPLY_STRING);
    r->len = strlen(s);
    r->str = malloc(r->len + 1);
    assert_non_null(r->str);
    memcpy(r->str, s, r->len + 1);
    return r;
}

static redisReply *r_nil(void)
{
    return r_new(REDIS_REPLY_NIL);
}

/* An array of the `n` replies that follow. */
static redisReply *r_arr(size_t n, ...)
{
    redisReply *r = r_new(REDIS_REPLY_ARRAY);
    r->elements = n;
    r->element = calloc(n > 0 ? n : 1, sizeof *r->element);
    assert_non_null(r->element);
    va_list ap;
    va_start(ap, n);
    for (size_t i = 0; i < n; i++)
        r->element[i] = va_arg(ap, redisReply *);
    va_end(ap);
    return r;
}

/* A node of CLUSTER SHARDS as Redis 7.0 writes it. */
static redisReply *shard_node(const char *id, int port, const char *ip,
                              const char *endpoint, const char *role, const char *health)
{
    return r_arr(14, r_str("id"), r_str(id), r_str("port"), r_int(port), r_str("ip"),
                 r_str(ip), r_str("endpoint"), r_str(endpoint), r_str("role"),
                 r_str(role), r_str("replication-offset"), r_int(42), r_str("health"),
                 r_str(health));
}

static redisReply *shard(redisReply *slots, redisReply *nodes)
{
    return r_arr(4, r_str("slots"), slots, r_str("nodes"), nodes);
}

#define ID_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define ID_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define ID_C "cccccccccccccccccccccccccccccccccccccccc"
#define ID_D "dddddddddddddddddddddddddddddddddddddddd"
#define ID_E "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"
#define ID_F "ffffffffffffffffffffffffffffffffffffffff"

/* Three masters (7000: 0-99 and 200-5460, 7001: 100-199 and 5461-10922, 7002:
 * 10923-16383), each with one replica (7003..7005); the replica of 7002 failed. */
static redisReply *three_shards(void)
{
    return r_arr(
        3,
        shard(
            r_arr(4, r_int(0), r_int(99), r_int(200), r_int(5460)),
            r_arr(2,
                  shard_node(ID_D, 7003, "127.0.0.1", "127.0.0.1", "replica", "online"),
                  shard_node(ID_A, 7000, "127.0.0.1", "127.0.0.1", "master", "online"))),
        shard(r_arr(4, r_int(100), r_int(199), r_int(5461), r_int(10922)),
              r_arr(2,
                    shard_node(ID_B, 7001, "127.0.0.1", "127.0.0.1", "master", "online"),
                    shard_node(ID_E, 7004, "127.0.0.1", "127.0.0.1", "replica",
                               "loading"))),
        shard(r_arr(2, r_int(10923), r_int(16383)),
              r_arr(2,
                    shard_node(ID_C, 7002, "127.0.0.1", "127.0.0.1", "master", "online"),
                    shard_node(ID_F, 7005, "127.0.0.1", "127.0.0.1", "replica",
                               "failed"))));
}

/* A node of CLUSTER SLOTS: host (NULL: nil), port, id, and the 7.0 metadata. */
static redisReply *slots_node(const char *host, int port, const char *id, const char *ip)
{
    redisReply *meta = ip != NULL ? r_arr(2, r_str("ip"), r_str(ip)) : r_arr(0);
    return r_arr(4, host != NULL ? r_str(host) : r_nil(), r_int(port), r_str(id), meta);
}

/* The same cluster as three_shards, as CLUSTER SLOTS answers: a master listed once
 * per range, failed replicas left out (and those with replication offset 0, which
 * this one does not show). */
static redisReply *three_slots(void)
{
#define M_A slots_node("127.0.0.1", 7000, ID_A, NULL)
#define M_B slots_node("127.0.0.1", 7001, ID_B, NULL)
#define R_D slots_node("127.0.0.1", 7003, ID_D, NULL)
#define R_E slots_node("127.0.0.1", 7004, ID_E, NULL)
    return r_arr(
        5, r_arr(4, r_int(0), r_int(99), M_A, R_D),
        r_arr(4, r_int(100), r_int(199), M_B, R_E),
        r_arr(4, r_int(200), r_int(5460), M_A, R_D),
        r_arr(4, r_int(5461), r_int(10922), M_B, R_E),
        r_arr(3, r_int(10923), r_int(16383), slots_node("127.0.0.1", 7002, ID_C, NULL)));
#undef M_A
#undef M_B
#undef R_D
#undef R_E
}

/* Every slot points at a master or is -1; returns how many are assigned. */
static int check_consistent(const struct rd_slot_map *m)
{
    int n = 0;
    for (int s = 0; s < RD_SLOTS; s++) {
        assert_true(m->slot[s] >= -1 && m->slot[s] < m->nmasters);
        n += m->slot[s] >= 0;
    }
    for (int i = 0; i < m->nmasters; i++) {
        assert_true(strlen(m->masters[i].master.host) < RD_HOST_MAX);
        assert_true(m->masters[i].nreplicas >= 0);
    }
    return n;
}

static void assert_empty(const struct rd_slot_map *m)
{
    assert_int_equal(m->nmasters, 0);
    assert_null(m->masters);
    assert_int_equal(rd_slot_map_assigned(m), 0);
}

/* The port of the master serving `slot`. */
static int port_of(const struct rd_slot_map *m, int slot)
{
    const struct rd_node *n = rd_slot_map_master(m, slot);
    assert_non_null(n);
    return n->port;
}

/* ---- key slots ------------------------------------------------------------------ */

static void crc16_vectors(void **state)
{
    (void)state;
    assert_int_equal(crc_of("123456789"), 0x31C3); /* the cluster spec's check value */
    assert_int_equal(crc_of(""), 0);
    assert_int_equal(crc_of("A"), 0x58E5);
    assert_int_equal(crc_of("foo"), 0xAF96);
    assert_int_equal(crc_of("The quick brown fox jumps over the lazy dog"), 0xF0C8);
    assert_int_equal(rd_slot_crc16("\xff\xff\xff\xff", 4), 0x99CF);
    assert_int_equal(rd_slot_crc16("\0", 1), 0);
}

static void key_slots_match_redis(void **state)
{
    (void)state;
    static const struct {
        const char *key;
        size_t len; /* 0: strlen */
        int slot;
    } table[] = {
        {"foo", 0, 12182},
        {"bar", 0, 5061},
        {"123456789", 0, 12739},
        {"{user1000}.following", 0, 3443},
        {"{user1000}.followers", 0, 3443},
        {"{user1000}", 0, 3443},
        {"user1000", 0, 3443},
        {"foo{}{bar}", 0, 8363},    /* an empty first tag: the whole key */
        {"foo{{bar}}zap", 0, 4015}, /* the tag is "{bar" */
        {"{bar", 0, 4015},
        {"foo{bar}{zap}", 0, 5061}, /* the first tag only */
        {"{}", 0, 15257},
        {"{}}", 0, 14790},
        {"{}{a}", 0, 13650},
        {"{{}}", 0, 4092}, /* the tag is "{" */
        {"{", 0, 4092},
        {"}", 0, 12090},
        {"}{", 0, 12793},
        {"}{a}", 0, 15495},
        {"{a", 0, 10276},
        {"a}", 0, 5921},
        {"a{b", 0, 13340},
        {"foo}bar{", 0, 11073},
        {"a{b}c", 0, 3300},
        {"{b}", 0, 3300},
        {"a\0b", 3, 8383},
        {"{a\0b}x", 6, 8383},
        {"\xff\xfe{\x80}", 0, 4488},
        {"inv:{sku:3}:stock", 0, 11023},
        {"inv:{tv:0}:lock", 0, 15905},
        {"inv:{tv:19}:stock", 0, 8918},
        {"inv:sku:{tv}", 0, 6860},
        {"inv:order:{A-1}", 0, 15445},
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        size_t len = table[i].len ? table[i].len : strlen(table[i].key);
        int got = slot_of(table[i].key, len);
        if (got != table[i].slot)
            fail_msg("slot of key %zu (%s): %d, Redis says %d", i, table[i].key, got,
                     table[i].slot);
    }
    assert_int_equal(rd_key_slot("", 0), 0);
    assert_int_equal(rd_key_slot(NULL, 0), 0);

    char x[300], y[206];
    memset(x, 'x', sizeof x);
    assert_int_equal(slot_of(x, sizeof x), 11216);
    y[0] = '{';
    memset(y + 1, 'y', 200);
    memcpy(y + 201, "}tail", 5);
    assert_int_equal(slot_of(y, sizeof y), 7891);
}

/* Keys of one segment share its slot (keys.h's hash tag). */
static void segment_keys_share_a_slot(void **state)
{
    (void)state;
    const char *keys[] = {"inv:{tv:7}:stock", "inv:{tv:7}:lock", "inv:{tv:7}:sold",
                          "inv:{tv:7}:orders", "inv:{tv:7}:epoch"};
    int slot = rd_key_slot(keys[0], strlen(keys[0]));
    for (size_t i = 1; i < sizeof keys / sizeof *keys; i++)
        assert_int_equal(rd_key_slot(keys[i], strlen(keys[i])), slot);
    assert_int_equal(slot, rd_key_slot("tv:7", 4));
}

/* Every slot is reached from any name, only the suffix changes, and it is made of
 * octal digits (so a fresh hex order id stays a valid name). */
static void names_for_every_slot(void **state)
{
    (void)state;
    static const char *const bases[] = {"0123456789abcdef0123456789abcdef", "zzzzzz",
                                        "order-1-000000", "ffffffffffffffffffffffffff"};
    for (size_t b = 0; b < sizeof bases / sizeof *bases; b++) {
        size_t len = strlen(bases[b]);
        char name[64], key[96];
        for (int slot = 0; slot < RD_SLOTS; slot++) {
            memcpy(name, bases[b], len + 1);
            rd_name_for_slot(name, len, slot);
            assert_int_equal(rd_slot_crc16(name, len) % RD_SLOTS, slot);
            assert_memory_equal(name, bases[b], len - RD_NAME_SUFFIX);
            for (size_t k = len - RD_NAME_SUFFIX; k < len; k++)
                assert_true(name[k] >= '0' && name[k] <= '7');
            snprintf(key, sizeof key, "inv:order:{%s}", name); /* as keys.h names it */
            assert_int_equal(rd_key_slot(key, strlen(key)), slot);
        }
    }
}

/* ---- redirects ------------------------------------------------------------------ */

static void redirects_parse(void **state)
{
    (void)state;
    static const struct {
        const char *err;
        enum rd_redirect_kind kind;
        int slot;
        const char *host;
        int port;
    } table[] = {
        {"MOVED 3999 127.0.0.1:6381", RD_REDIR_MOVED, 3999, "127.0.0.1", 6381},
        {"-MOVED 3999 127.0.0.1:6381", RD_REDIR_MOVED, 3999, "127.0.0.1", 6381},
        {"ASK 3999 127.0.0.1:6381", RD_REDIR_ASK, 3999, "127.0.0.1", 6381},
        {"-ASK 0 10.0.0.2:1", RD_REDIR_ASK, 0, "10.0.0.2", 1},
        /* What redis-server 7.0.15 printed with IPv6 nodes, and the bracketed form. */
        {"MOVED 12182 ::1:30012", RD_REDIR_MOVED, 12182, "::1", 30012},
        {"MOVED 0 [::1]:6381", RD_REDIR_MOVED, 0, "::1", 6381},
        {"ASK 16383 [2001:db8::1]:65535", RD_REDIR_ASK, 16383, "2001:db8::1", 65535},
        {"MOVED 16383 2001:db8::1:7000", RD_REDIR_MOVED, 16383, "2001:db8::1", 7000},
        /* cluster-preferred-endpoint-type unknown-endpoint, and hostname without one */
        {"MOVED 12182 :30012", RD_REDIR_MOVED, 12182, "", 30012},
        {"MOVED 12182 ?:30012", RD_REDIR_MOVED, 12182, "?", 30012},
        {"MOVED 12182 node12.example:30012", RD_REDIR_MOVED, 12182, "node12.example",
         30012},
        {"TRYAGAIN Multiple keys request during rehashing of slot", RD_REDIR_TRYAGAIN, -1,
         "", 0},
        {"TRYAGAIN", RD_REDIR_TRYAGAIN, -1, "", 0},
        {"CLUSTERDOWN The cluster is down", RD_REDIR_CLUSTERDOWN, -1, "", 0},
        {"-CLUSTERDOWN Hash slot not served", RD_REDIR_CLUSTERDOWN, -1, "", 0},
        {"READONLY You can't write against a read only replica.", RD_REDIR_READONLY, -1,
         "", 0},
        /* not cluster errors */
        {"ERR unknown command 'FOO'", RD_REDIR_NONE, -1, "", 0},
        {"WRONGTYPE Operation against a key holding the wrong kind of value",
         RD_REDIR_NONE, -1, "", 0},
        {"CROSSSLOT Keys in request don't hash to the same slot", RD_REDIR_NONE, -1, "",
         0},
        {"MOVEDX 1 a:1", RD_REDIR_NONE, -1, "", 0},
        {"ASKING", RD_REDIR_NONE, -1, "", 0},
        {"moved 1 a:1", RD_REDIR_NONE, -1, "", 0},
        {"READONLYX", RD_REDIR_NONE, -1, "", 0},
        {"", RD_REDIR_NONE, -1, "", 0},
        {"-", RD_REDIR_NONE, -1, "", 0},
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        struct rd_redirect r;
        if (redirect_of(table[i].err, strlen(table[i].err), &r) != 0)
            fail_msg("\"%s\" did not parse", table[i].err);
        assert_int_equal(r.kind, table[i].kind);
        assert_int_equal(r.slot, table[i].slot);
        assert_string_equal(r.host, table[i].host);
        assert_int_equal(r.port, table[i].port);
    }
    struct rd_redirect r;
    assert_int_equal(rd_redirect_parse(NULL, 0, &r), 0);
    assert_int_equal(r.kind, RD_REDIR_NONE);
    assert_string_equal(rd_redirect_name(RD_REDIR_MOVED), "MOVED");
    assert_string_equal(rd_redirect_name(RD_REDIR_CLUSTERDOWN), "CLUSTERDOWN");
    assert_string_equal(rd_redirect_name(RD_REDIR_NONE), "NONE");
}

/* The answers only a cluster gives, which make a standalone connection ask whether
 * its Redis became one (the words as redis-server 7.0.15 sends them). */
static void cluster_errors_recognised(void **state)
{
    (void)state;
    const char *yes[] = {"MOVED 3999 127.0.0.1:6381", "-ASK 3999 127.0.0.1:6381",
                         "TRYAGAIN Multiple keys request during rehashing of slot",
                         "CLUSTERDOWN Hash slot not served",
                         "CROSSSLOT Keys in request don't hash to the same slot"};
    const char *no[] = {"ERR unknown command",
                        "NOSCRIPT No matching script",
                        "MOVEDX 1 h:1",
                        "ASKING",
                        "LOADING Redis is loading",
                        ""};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        if (!rd_cluster_error(yes[i], strlen(yes[i])))
            fail_msg("\"%s\" not recognised", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        if (rd_cluster_error(no[i], strlen(no[i])))
            fail_msg("\"%s\" taken for a cluster's", no[i]);
    assert_false(rd_cluster_error(NULL, 0));
    assert_false(rd_cluster_error("CROSSSLOT", 5)); /* never read past len */
}

static void malformed_redirects_refused(void **state)
{
    (void)state;
    char long_host[400];
    snprintf(long_host, sizeof long_host, "MOVED 1 %0300d:6379", 0);
    const char *bad[] = {
        "MOVED",
        "MOVED ",
        "ASK",
        "MOVED 3999",
        "MOVED 3999 ",
        "MOVED  3999 h:1",
        "MOVED 3999  h:1",
        "MOVED 16384 h:1",
        "MOVED 99999 h:1",
        "MOVED 123456 h:1",
        "MOVED -1 h:1",
        "MOVED +1 h:1",
        "MOVED 39a9 h:1",
        "MOVED 3999 host",
        "MOVED 3999 host:",
        "MOVED 3999 host:0",
        "MOVED 3999 host:65536",
        "MOVED 3999 host:123456",
        "MOVED 3999 host:63a1",
        "MOVED 3999 host:-1",
        "ASK 1 h:+1",
        "MOVED 3999 host:6381 extra",
        "MOVED 3999 host:6381 ",
        "MOVED 3999 host:6381\r\n",
        "MOVED 3999 h\tst:6381",
        "MOVED 3999 [::1:6381",
        "MOVED 3999 []:6381",
        "MOVED 3999 [:6381",
        "MOVED 3999 ::1]:6381",
        "MOVED 3999 [::1]x:6381",
        "MOVED 3999 a[b]:6381",
        long_host,
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct rd_redirect r;
        memset(&r, 0x5a, sizeof r);
        if (redirect_of(bad[i], strlen(bad[i]), &r) != -1)
            fail_msg("\"%.60s\" was accepted", bad[i]);
        assert_int_equal(r.kind, RD_REDIR_NONE);
        assert_int_equal(r.slot, -1);
        assert_string_equal(r.host, "");
    }
    /* A NUL inside the endpoint (the length says there is more). */
    struct rd_redirect r;
    assert_int_equal(redirect_of("MOVED 1 a\0b:1", 13, &r), -1);
    assert_int_equal(redirect_of("MOVED 1 ab:1\0", 13, &r), -1);
}

/* What any answer must look like, whatever the input. */
static void check_redirect(int rc, const struct rd_redirect *r)
{
    assert_true(rc == 0 || rc == -1);
    assert_non_null(memchr(r->host, '\0', sizeof r->host));
    if (r->kind == RD_REDIR_MOVED || r->kind == RD_REDIR_ASK) {
        assert_int_equal(rc, 0);
        assert_in_range(r->slot, 0, RD_SLOTS - 1);
        assert_in_range(r->port, 1, 65535);
    } else {
        assert_int_equal(r->slot, -1);
        assert_int_equal(r->port, 0);
    }
}

/* Every prefix of good inputs, then seeded random mutations and random bytes: every
 * answer is well formed and nothing reads past the buffer (see the file comment). */
static void redirect_fuzz(void **state)
{
    (void)state;
    static const char *const seeds[] = {
        "MOVED 3999 127.0.0.1:6381",
        "ASK 16383 [2001:db8::1]:65535",
        "MOVED 12182 ::1:30012",
        "-ASK 0 :1",
        "TRYAGAIN x",
        "CLUSTERDOWN",
    };
    static const char alphabet[] = "MOVEDASK0123456789:[] ?-\t\r\n\0\xff";
    size_t nseeds = sizeof seeds / sizeof *seeds;
    struct rd_redirect r;
    for (size_t s = 0; s < nseeds; s++)
        for (size_t len = 0; len <= strlen(seeds[s]); len++)
            check_redirect(redirect_of(seeds[s], len, &r), &r);

    uint64_t x = 0x9e3779b97f4a7c15ull; /* xorshift64*, fixed seed: reproducible */
#define NEXT() (x ^= x >> 12, x ^= x << 25, x ^= x >> 27, x * 0x2545f4914f6cdd1dull)
    char buf[96];
    int moved = 0;
    for (int iter = 0; iter < 50000; iter++) {
        size_t len;
        if (iter % 10 == 9) { /* random bytes */
            len = NEXT() % sizeof buf;
            for (size_t i = 0; i < len; i++)
                buf[i] = (char)NEXT();
        } else {
            const char *seed = seeds[NEXT() % nseeds];
            len = strlen(seed);
            memcpy(buf, seed, len);
            int edits = 1 + (int)(NEXT() % 3);
            for (int e = 0; e < edits; e++) {
                size_t at = len > 0 ? NEXT() % len : 0;
                char ch = alphabet[NEXT() % (sizeof alphabet - 1)];
                switch (NEXT() % 3) {
                case 0: /* replace */
                    if (len > 0)
                        buf[at] = ch;
                    break;
                case 1: /* insert */
                    if (len < sizeof buf) {
                        memmove(buf + at + 1, buf + at, len - at);
                        buf[at] = ch;
                        len++;
                    }
                    break;
                default: /* cut */
                    len = at;
                }
            }
        }
        int rc = redirect_of(buf, len, &r);
        check_redirect(rc, &r);
        moved += r.kind == RD_REDIR_MOVED || r.kind == RD_REDIR_ASK;
    }
#undef NEXT
    assert_true(moved > 1000); /* the mutations still reach the parser's far end */
}

/* ---- the slot map from CLUSTER SHARDS ------------------------------------------- */

static void shards_three_masters(void **state)
{
    (void)state;
    redisReply *r = three_shards();
    struct rd_slot_map m;
    char err[128];
    assert_int_equal(rd_slot_map_from_shards(r, "seed", &m, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_int_equal(check_consistent(&m), RD_SLOTS);
    assert_int_equal(m.nmasters, 3);
    assert_int_equal(port_of(&m, 0), 7000);
    assert_int_equal(port_of(&m, 99), 7000);
    assert_int_equal(port_of(&m, 100), 7001);
    assert_int_equal(port_of(&m, 199), 7001);
    assert_int_equal(port_of(&m, 200), 7000);
    assert_int_equal(port_of(&m, 5460), 7000);
    assert_int_equal(port_of(&m, 5461), 7001);
    assert_int_equal(port_of(&m, 10922), 7001);
    assert_int_equal(port_of(&m, 10923), 7002);
    assert_int_equal(port_of(&m, 16383), 7002);
    assert_null(rd_slot_map_master(&m, -1));
    assert_null(rd_slot_map_master(&m, RD_SLOTS));

    int a = rd_slot_map_find(&m, "127.0.0.1", 7000);
    assert_true(a >= 0);
    assert_string_equal(m.masters[a].master.id, ID_A);
    assert_string_equal(m.masters[a].master.host, "127.0.0.1");
    assert_true(m.masters[a].master.online);
    /* The replica listed before its master is still its replica. */
    assert_int_equal(m.masters[a].nreplicas, 1);
    assert_int_equal(m.masters[a].replicas[0].port, 7003);
    assert_string_equal(m.masters[a].replicas[0].id, ID_D);
    assert_true(m.masters[a].replicas[0].online);
    int b = rd_slot_map_find(&m, "127.0.0.1", 7001);
    assert_false(m.masters[b].replicas[0].online); /* loading */
    int c = rd_slot_map_find(&m, "127.0.0.1", 7002);
    assert_false(m.masters[c].replicas[0].online);                 /* failed */
    assert_int_equal(rd_slot_map_find(&m, "127.0.0.1", 7003), -1); /* a replica */
    assert_int_equal(rd_slot_map_find(&m, "127.0.0.2", 7000), -1);

    rd_slot_map_clear(&m);
    assert_empty(&m);
    rd_slot_map_clear(&m); /* twice is fine */
    freeReplyObject(r);
}

/* Which host a node gets: the endpoint, else its IP, else the host that answered. */
static void shards_hosts(void **state)
{
    (void)state;
    redisReply *no_ip = r_arr(10, r_str("id"), r_str(ID_C), r_str("port"), r_int(7002),
                              r_str("endpoint"), r_str(""), r_str("role"),
                              r_str("master"), r_str("health"), r_str("online"));
    redisReply *r = r_arr(
        3,
        shard(r_arr(2, r_int(0), r_int(5000)),
              r_arr(1, shard_node(ID_A, 7000, "::1", "", "master", "online"))),
        shard(r_arr(2, r_int(5001), r_int(10000)),
              r_arr(1, shard_node(ID_B, 7001, "10.0.0.2", "?", "master", "online"))),
        shard(r_arr(2, r_int(10001), r_int(16383)), r_arr(1, no_ip)));
    struct rd_slot_map m;
    assert_int_equal(rd_slot_map_from_shards(r, "seed.example", &m, NULL, 0), 0);
    assert_string_equal(rd_slot_map_master(&m, 0)->host, "::1");
    assert_string_equal(rd_slot_map_master(&m, 5001)->host, "10.0.0.2");
    assert_string_equal(rd_slot_map_master(&m, 16383)->host, "seed.example");
    assert_int_equal(rd_slot_map_assigned(&m), RD_SLOTS);
    rd_slot_map_clear(&m);
    freeReplyObject(r);

    /* A hostname endpoint wins over the IP. */
    r = r_arr(1, shard(r_arr(2, r_int(0), r_int(16383)),
                       r_arr(1, shard_node(ID_A, 7000, "10.0.0.1", "node-a.example",
                                           "master", "online"))));
    assert_int_equal(rd_slot_map_from_shards(r, NULL, &m, NULL, 0), 0);
    assert_string_equal(rd_slot_map_master(&m, 77)->host, "node-a.example");
    rd_slot_map_clear(&m);
    freeReplyObject(r);
}

/* A cluster being set up: a master without slots, slots without a master. */
static void shards_partial(void **state)
{
    (void)state;
    redisReply *r =
        r_arr(3,
              shard(r_arr(2, r_int(0), r_int(99)),
                    r_arr(1, shard_node(ID_A, 7000, "127.0.0.1", "127.0.0.1", "master",
                                        "online"))),
              shard(r_arr(0), r_arr(1, shard_node(ID_B, 7001, "127.0.0.1", "127.0.0.1",
                                                  "master", "online"))),
              /* replicas whose master is gone from view, serving nothing: skipped */
              shard(r_arr(0), r_arr(1, shard_node(ID_C, 7002, "127.0.0.1", "127.0.0.1",
                                                  "replica", "online"))));
    struct rd_slot_map m;
    assert_int_equal(rd_slot_map_from_shards(r, "h", &m, NULL, 0), 0);
    assert_int_equal(m.nmasters, 2);
    assert_int_equal(rd_slot_map_assigned(&m), 100);
    assert_null(rd_slot_map_master(&m, 100));
    assert_int_equal(check_consistent(&m), 100);
    rd_slot_map_clear(&m);
    freeReplyObject(r);

    r = r_arr(0);
    assert_int_equal(rd_slot_map_from_shards(r, "h", &m, NULL, 0), 0);
    assert_empty(&m);
    freeReplyObject(r);
}

/* Parse `r` as SHARDS (or SLOTS), expect -1 with an empty map and a reason holding
 * `why`; frees `r`. */
static void expect_malformed(redisReply *r, bool shards, const char *why)
{
    struct rd_slot_map m;
    char err[128] = "unset";
    int rc = shards ? rd_slot_map_from_shards(r, "h", &m, err, sizeof err)
                    : rd_slot_map_from_slots(r, "h", &m, err, sizeof err);
    if (rc != -1)
        fail_msg("accepted; expected \"%s\"", why);
    assert_empty(&m);
    if (strstr(err, why) == NULL)
        fail_msg("error \"%s\" does not say \"%s\"", err, why);
    if (r != NULL)
        freeReplyObject(r);
}

static redisReply *one_master(redisReply *slots)
{
    return shard(slots, r_arr(1, shard_node(ID_A, 7000, "127.0.0.1", "127.0.0.1",
                                            "master", "online")));
}

static void shards_malformed(void **state)
{
    (void)state;
    expect_malformed(NULL, true, "not answer an array");
    expect_malformed(r_nil(), true, "not answer an array");
    expect_malformed(r_str("x"), true, "not answer an array");
    expect_malformed(r_arr(1, r_int(1)), true, "a shard is not a map");
    expect_malformed(r_arr(1, r_arr(3, r_str("slots"), r_arr(0), r_str("nodes"))), true,
                     "a shard is not a map");
    expect_malformed(r_arr(1, r_arr(2, r_str("slots"), r_arr(0))), true,
                     "without its slots and nodes");
    expect_malformed(r_arr(1, one_master(r_arr(1, r_int(0)))), true,
                     "without its slots and nodes");
    expect_malformed(r_arr(1, one_master(r_arr(2, r_int(0), r_int(RD_SLOTS)))), true,
                     "out of 0-16383");
    expect_malformed(r_arr(1, one_master(r_arr(2, r_int(-1), r_int(5)))), true,
                     "out of 0-16383");
    expect_malformed(r_arr(1, one_master(r_arr(2, r_int(9), r_int(5)))), true,
                     "out of 0-16383");
    expect_malformed(r_arr(1, one_master(r_arr(2, r_str("a"), r_int(5)))), true,
                     "not two numbers");
    expect_malformed(
        r_arr(2, one_master(r_arr(2, r_int(0), r_int(10))),
              shard(r_arr(2, r_int(10), r_int(20)),
                    r_arr(1, shard_node(ID_B, 7001, "h", "h", "master", "online")))),
        true, "slot 10 is claimed by two masters");
    expect_malformed(
        r_arr(1, shard(r_arr(2, r_int(0), r_int(5)),
                       r_arr(1, shard_node(ID_B, 7001, "h", "h", "replica", "online")))),
        true, "serves slots but has no master");
    expect_malformed(
        r_arr(1, shard(r_arr(0),
                       r_arr(2, shard_node(ID_A, 7000, "h", "h", "master", "online"),
                             shard_node(ID_B, 7001, "h", "h", "master", "online")))),
        true, "two masters");
    expect_malformed(r_arr(1, shard(r_arr(0), r_arr(1, shard_node(ID_A, 0, "h", "h",
                                                                  "master", "online")))),
                     true, "without a plain-text port");
    expect_malformed(r_arr(1, shard(r_arr(0), r_arr(1, shard_node(ID_A, 70000, "h", "h",
                                                                  "master", "online")))),
                     true, "without a plain-text port");
    /* A TLS-only node: tls-port, no port. */
    expect_malformed(
        r_arr(1, shard(r_arr(0),
                       r_arr(1, r_arr(6, r_str("id"), r_str(ID_A), r_str("tls-port"),
                                      r_int(7000), r_str("role"), r_str("master"))))),
        true, "without a plain-text port");
    expect_malformed(r_arr(1, shard(r_arr(0), r_arr(1, r_arr(4, r_str("id"), r_str(ID_A),
                                                             r_str("port"), r_int(1))))),
                     true, "without a role");
    expect_malformed(
        r_arr(1, shard(r_arr(0), r_arr(1, shard_node(ID_A "0", 7000, "h", "h", "master",
                                                     "online")))),
        true, "node id");
    char long_host[300];
    memset(long_host, 'h', sizeof long_host - 1);
    long_host[sizeof long_host - 1] = '\0';
    expect_malformed(r_arr(1, shard(r_arr(0), r_arr(1, shard_node(ID_A, 1, long_host, "",
                                                                  "master", "online")))),
                     true, "too long");
    expect_malformed(r_arr(1, shard(r_arr(0), r_arr(1, r_int(3)))), true, "not a map");
}

/* ---- the slot map from CLUSTER SLOTS -------------------------------------------- */

static void slots_three_masters(void **state)
{
    (void)state;
    redisReply *r = three_slots();
    struct rd_slot_map m;
    char err[128];
    assert_int_equal(rd_slot_map_from_slots(r, "seed", &m, err, sizeof err), 0);
    assert_int_equal(check_consistent(&m), RD_SLOTS);
    assert_int_equal(m.nmasters, 3); /* a master listed for two ranges is one master */
    for (int i = 0; i < m.nmasters; i++) {
        const struct rd_shard *s = &m.masters[i];
        assert_int_equal(s->nreplicas, s->master.port == 7002 ? 0 : 1);
        if (s->nreplicas > 0)
            assert_int_equal(s->replicas[0].port, s->master.port + 3);
    }

    /* The same cluster from SHARDS routes every slot to the same node. */
    redisReply *sh = three_shards();
    struct rd_slot_map n;
    assert_int_equal(rd_slot_map_from_shards(sh, "seed", &n, NULL, 0), 0);
    for (int s = 0; s < RD_SLOTS; s++) {
        const struct rd_node *x = rd_slot_map_master(&m, s),
                             *y = rd_slot_map_master(&n, s);
        assert_int_equal(x->port, y->port);
        assert_string_equal(x->host, y->host);
        assert_string_equal(x->id, y->id);
    }
    rd_slot_map_clear(&n);
    rd_slot_map_clear(&m);
    freeReplyObject(sh);
    freeReplyObject(r);
}

static void slots_hosts(void **state)
{
    (void)state;
    redisReply *r =
        r_arr(4, r_arr(3, r_int(0), r_int(10), slots_node(NULL, 7000, ID_A, "::1")),
              r_arr(3, r_int(11), r_int(20), slots_node(NULL, 7001, ID_B, NULL)),
              r_arr(3, r_int(21), r_int(30), slots_node("?", 7002, ID_C, "10.1.1.1")),
              /* Redis before 7.0 (and 3.x without the id): [host, port] only */
              r_arr(4, r_int(31), r_int(40), r_arr(2, r_str("10.2.2.2"), r_int(7003)),
                    r_arr(2, r_str("10.2.2.3"), r_int(7004))));
    struct rd_slot_map m;
    assert_int_equal(rd_slot_map_from_slots(r, "seed.example", &m, NULL, 0), 0);
    assert_string_equal(rd_slot_map_master(&m, 0)->host, "::1");
    assert_string_equal(rd_slot_map_master(&m, 11)->host, "seed.example");
    assert_string_equal(rd_slot_map_master(&m, 21)->host, "10.1.1.1");
    assert_string_equal(rd_slot_map_master(&m, 40)->host, "10.2.2.2");
    assert_string_equal(rd_slot_map_master(&m, 40)->id, "");
    int i = m.slot[40];
    assert_int_equal(m.masters[i].nreplicas, 1);
    assert_string_equal(m.masters[i].replicas[0].host, "10.2.2.3");
    assert_int_equal(rd_slot_map_assigned(&m), 41);
    rd_slot_map_clear(&m);
    freeReplyObject(r);
}

static void slots_malformed(void **state)
{
    (void)state;
    expect_malformed(r_nil(), false, "not answer an array");
    expect_malformed(r_arr(1, r_arr(2, r_int(0), r_int(5))), false,
                     "not [lo, hi, master");
    expect_malformed(r_arr(1, r_arr(3, r_int(0), r_int(5), r_str("x"))), false,
                     "not [host, port");
    expect_malformed(r_arr(1, r_arr(3, r_int(0), r_int(5), r_arr(1, r_str("h")))), false,
                     "not [host, port");
    expect_malformed(
        r_arr(1, r_arr(3, r_int(0), r_int(16384), slots_node("h", 1, ID_A, NULL))), false,
        "out of 0-16383");
    expect_malformed(
        r_arr(1, r_arr(3, r_nil(), r_int(5), slots_node("h", 1, ID_A, NULL))), false,
        "not two numbers");
    expect_malformed(r_arr(2,
                           r_arr(3, r_int(0), r_int(5), slots_node("h", 1, ID_A, NULL)),
                           r_arr(3, r_int(5), r_int(9), slots_node("h", 2, ID_B, NULL))),
                     false, "slot 5 is claimed by two masters");
    expect_malformed(r_arr(1, r_arr(4, r_int(0), r_int(5), slots_node("h", 1, ID_A, NULL),
                                    r_arr(2, r_str("h"), r_str("port")))),
                     false, "without a plain-text port");
}

/* ---- damaged trees -------------------------------------------------------------- */

/* Collect the address of every element pointer in the tree below `r`. */
static size_t collect(redisReply *r, redisReply ***out, size_t n, size_t cap)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY)
        return n;
    for (size_t i = 0; i < r->elements; i++) {
        if (n < cap)
            out[n] = &r->element[i];
        n++;
        n = collect(r->element[i], out, n, cap);
    }
    return n;
}

/* Replace each element of a good reply, one at a time, with each of a few wrong
 * things (NULL included: hiredis never makes one, a hand-built tree might): the
 * parser answers 0 with a consistent map or -1 with an empty one, and never
 * crashes. */
static void damaged_replies(void **state)
{
    (void)state;
    for (int which = 0; which < 2; which++) {
        redisReply *r = which == 0 ? three_shards() : three_slots();
        redisReply **slots[512];
        size_t n = collect(r, slots, 0, 512);
        assert_true(n > 20 && n <= 512);
        int ok = 0, refused = 0;
        for (size_t i = 0; i < n; i++) {
            for (int kind = 0; kind < 6; kind++) {
                redisReply *bad = kind == 0   ? r_nil()
                                  : kind == 1 ? r_int(-1)
                                  : kind == 2 ? r_str("")
                                  : kind == 3 ? r_arr(0)
                                  : kind == 4 ? r_int(RD_SLOTS)
                                              : NULL;
                redisReply *saved = *slots[i];
                *slots[i] = bad;
                struct rd_slot_map m;
                char err[128];
                int rc = which == 0 ? rd_slot_map_from_shards(r, "h", &m, err, sizeof err)
                                    : rd_slot_map_from_slots(r, "h", &m, err, sizeof err);
                if (rc == 0) {
                    check_consistent(&m);
                    ok++;
                } else {
                    assert_int_equal(rc, -1);
                    assert_empty(&m);
                    assert_true(err[0] != '\0');
                    refused++;
                }
                rd_slot_map_clear(&m);
                *slots[i] = saved;
                if (bad != NULL)
                    freeReplyObject(bad);
            }
        }
        assert_true(ok > 0 && refused > 0);
        freeReplyObject(r);
    }
}

/* ---- fetching: SHARDS, else SLOTS --------------------------------------------- */

/* A node on loopback that serves one connection on a thread, answering CLUSTER
 * SHARDS and CLUSTER SLOTS with canned RESP. */
struct fake {
    int fd, port;
    const char *shards, *slots;
    pthread_t thread;
};

static void *fake_serve(void *arg)
{
    struct fake *f = arg;
    int fd = accept(f->fd, NULL, NULL); /* SO_RCVTIMEO bounds the wait */
    if (fd < 0)
        return NULL;
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[4096];
    size_t len = 0;
    ssize_t n;
    while ((n = recv(fd, buf + len, sizeof buf - 1 - len, 0)) > 0) {
        len += (size_t)n;
        buf[len] = '\0';
        const char *answer = strstr(buf, "SHARDS\r\n") != NULL  ? f->shards
                             : strstr(buf, "SLOTS\r\n") != NULL ? f->slots
                                                                : NULL;
        if (answer != NULL) {
            send(fd, answer, strlen(answer), MSG_NOSIGNAL);
            len = 0;
        }
    }
    close(fd);
    return NULL;
}

static void fake_start(struct fake *f, const char *shards, const char *slots)
{
    f->shards = shards;
    f->slots = slots;
    f->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(f->fd >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t salen = sizeof sa;
    struct timeval tv = {5, 0};
    setsockopt(f->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    assert_int_equal(bind(f->fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(f->fd, 4), 0);
    assert_int_equal(getsockname(f->fd, (struct sockaddr *)&sa, &salen), 0);
    f->port = ntohs(sa.sin_port);
    assert_int_equal(pthread_create(&f->thread, NULL, fake_serve, f), 0);
}

/* rd_slot_map_fetch from the fake: its result, `m` and `err` filled. */
static int fake_fetch(struct fake *f, struct rd_slot_map *m, char *err, size_t errlen)
{
    struct rd_target seed = {.host = "127.0.0.1", .port = f->port, .timeout_ms = 2000};
    int rc = rd_slot_map_fetch(&seed, m, err, errlen);
    pthread_join(f->thread, NULL);
    close(f->fd);
    return rc;
}

/* Canned answers, in RESP. CLUSTER SHARDS: one shard over every slot, whose two
 * nodes both say master; one shard of slots 0-99 whose master gives no ip. */
static const char shards_two_masters[] =
    "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*2\r\n"
    "*6\r\n$4\r\nport\r\n:7000\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n"
    "$4\r\nrole\r\n$6\r\nmaster\r\n"
    "*6\r\n$4\r\nport\r\n:7001\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n"
    "$4\r\nrole\r\n$6\r\nmaster\r\n";
static const char shards_no_ip[] =
    "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:99\r\n$5\r\nnodes\r\n*1\r\n"
    "*6\r\n$4\r\nport\r\n:7002\r\n$2\r\nip\r\n$0\r\n\r\n"
    "$4\r\nrole\r\n$6\r\nmaster\r\n";
/* CLUSTER SLOTS: every slot on 127.0.0.1:7001. */
static const char slots_7001[] =
    "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:7001\r\n";

static void fetch_falls_back_to_slots(void **state)
{
    (void)state;
    struct fake f;
    struct rd_slot_map m;
    char err[256];

    /* A shard naming two masters: SLOTS says which serves the slots. */
    fake_start(&f, shards_two_masters, slots_7001);
    assert_int_equal(fake_fetch(&f, &m, err, sizeof err), 0);
    assert_int_equal(m.nmasters, 1);
    assert_int_equal(port_of(&m, 0), 7001);
    assert_int_equal(rd_slot_map_assigned(&m), RD_SLOTS);
    rd_slot_map_clear(&m);

    /* A server that does not know SHARDS. */
    fake_start(&f, "-ERR unknown subcommand 'SHARDS'. Try CLUSTER HELP.\r\n", slots_7001);
    assert_int_equal(fake_fetch(&f, &m, err, sizeof err), 0);
    assert_int_equal(port_of(&m, 16383), 7001);
    rd_slot_map_clear(&m);

    /* Neither answer usable: both reasons, and an empty map. */
    fake_start(&f, "-ERR unknown subcommand 'SHARDS'\r\n", ":5\r\n");
    assert_int_equal(fake_fetch(&f, &m, err, sizeof err), -1);
    assert_empty(&m);
    assert_non_null(strstr(err, "CLUSTER SHARDS: ERR unknown subcommand 'SHARDS'"));
    assert_non_null(strstr(err, "CLUSTER SLOTS: CLUSTER SLOTS did not answer an array"));

    /* SHARDS usable: SLOTS is not asked; a node with no address is the seed's host. */
    fake_start(&f, shards_no_ip, "-ERR SLOTS was not to be asked\r\n");
    assert_int_equal(fake_fetch(&f, &m, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_string_equal(rd_slot_map_master(&m, 99)->host, "127.0.0.1");
    assert_int_equal(port_of(&m, 99), 7002);
    assert_int_equal(rd_slot_map_assigned(&m), 100);
    rd_slot_map_clear(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crc16_vectors),
        cmocka_unit_test(key_slots_match_redis),
        cmocka_unit_test(segment_keys_share_a_slot),
        cmocka_unit_test(names_for_every_slot),
        cmocka_unit_test(redirects_parse),
        cmocka_unit_test(cluster_errors_recognised),
        cmocka_unit_test(malformed_redirects_refused),
        cmocka_unit_test(redirect_fuzz),
        cmocka_unit_test(shards_three_masters),
        cmocka_unit_test(shards_hosts),
        cmocka_unit_test(shards_partial),
        cmocka_unit_test(shards_malformed),
        cmocka_unit_test(slots_three_masters),
        cmocka_unit_test(slots_hosts),
        cmocka_unit_test(slots_malformed),
        cmocka_unit_test(damaged_replies),
        cmocka_unit_test(fetch_falls_back_to_slots),
    };
    return cmocka_run_group_tests_name("slots", tests, NULL, NULL);
}
