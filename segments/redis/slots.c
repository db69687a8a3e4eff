/* slots.c -- key slots, redirect errors and the cluster slot map (see slots.h). */
#include "segments/redis/slots.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "base/xalloc.h"

/* ---- key slots ------------------------------------------------------------------ */

unsigned rd_slot_crc16(const char *buf, size_t len)
{
    /* Bit by bit: a key is a few dozen bytes, so a table would save nanoseconds
     * against a round trip of tens of microseconds. Bits that move past bit 15 never
     * flow back down; the mask drops them. */
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned)(unsigned char)buf[i] << 8;
        for (int bit = 0; bit < 8; bit++)
            crc = (crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1;
        crc &= 0xffff;
    }
    return crc;
}

int rd_key_slot(const char *key, size_t len)
{
    if (len == 0)
        return 0;
    const char *open = memchr(key, '{', len);
    if (open != NULL) {
        const char *tag = open + 1;
        size_t left = len - (size_t)(tag - key);
        const char *close = left > 0 ? memchr(tag, '}', left) : NULL;
        if (close != NULL && close > tag)
            return (int)(rd_slot_crc16(tag, (size_t)(close - tag)) % RD_SLOTS);
    }
    return (int)(rd_slot_crc16(key, len) % RD_SLOTS);
}

/* Names for a slot. CRC16 with a zero start and no final xor is linear over GF(2)
 * for strings of one length: crc(a ^ b) = crc(a) ^ crc(b), and leading zero bytes
 * change nothing. So flipping bit j of the suffix (bit j % 3 of its character j / 3,
 * each a '0'..'7') flips the CRC by the CRC of a string that is zero but for that
 * bit, whatever the rest of the name holds. Solved once by Gauss-Jordan elimination
 * over the 14 slot bits: flip_for[b] is the set of suffix bits that together flip
 * slot bit b alone. */
#define SUFFIX_BITS (RD_NAME_SUFFIX * 3)
#define SLOT_BITS 14

static uint32_t flip_for[SLOT_BITS];
static pthread_once_t flip_once = PTHREAD_ONCE_INIT;

static void flip_solve(void)
{
    uint32_t val[SUFFIX_BITS], set[SUFFIX_BITS];
    for (int j = 0; j < SUFFIX_BITS; j++) {
        char d[RD_NAME_SUFFIX] = {0};
        d[j / 3] = (char)(1 << (j % 3));
        val[j] = rd_slot_crc16(d, sizeof d) % RD_SLOTS;
        set[j] = 1u << j;
    }
    for (int b = 0; b < SLOT_BITS; b++) { /* row b ends up as exactly slot bit b */
        int p = b;
        while (p < SUFFIX_BITS && !(val[p] >> b & 1))
            p++;
        if (p == SUFFIX_BITS) { /* the CRC's constants rule it out: test_slots */
            fputs("inventoryd: rd_name_for_slot has no solution\n", stderr);
            abort();
        }
        uint32_t tv = val[p], ts = set[p];
        val[p] = val[b], set[p] = set[b];
        val[b] = tv, set[b] = ts;
        for (int r = 0; r < SUFFIX_BITS; r++)
            if (r != b && (val[r] >> b & 1)) {
                val[r] ^= val[b];
                set[r] ^= set[b];
            }
    }
    for (int b = 0; b < SLOT_BITS; b++)
        flip_for[b] = set[b];
}

void rd_name_for_slot(char *name, size_t len, int slot)
{
    pthread_once(&flip_once, flip_solve);
    char *suffix = name + len - RD_NAME_SUFFIX;
    memset(suffix, '0', RD_NAME_SUFFIX);
    unsigned wrong = (rd_slot_crc16(name, len) ^ (unsigned)slot) % RD_SLOTS;
    uint32_t flips = 0;
    for (int b = 0; b < SLOT_BITS; b++)
        if (wrong >> b & 1)
            flips ^= flip_for[b];
    for (int j = 0; j < SUFFIX_BITS; j++)
        if (flips >> j & 1)
            suffix[j / 3] = (char)(suffix[j / 3] ^ (1 << (j % 3)));
}

/* ---- redirect and cluster errors ------------------------------------------------ */

static const struct {
    const char *word;
    enum rd_redirect_kind kind;
} cluster_errors[] = {
    {"MOVED", RD_REDIR_MOVED},       {"ASK", RD_REDIR_ASK},
    {"TRYAGAIN", RD_REDIR_TRYAGAIN}, {"CLUSTERDOWN", RD_REDIR_CLUSTERDOWN},
    {"READONLY", RD_REDIR_READONLY},
};

const char *rd_redirect_name(enum rd_redirect_kind kind)
{
    for (size_t i = 0; i < sizeof cluster_errors / sizeof *cluster_errors; i++)
        if (cluster_errors[i].kind == kind)
            return cluster_errors[i].word;
    return "NONE";
}

/* 1 to 5 decimal digits and nothing else, worth at most `max`: the value, else -1. */
static long small_number(const char *s, size_t len, long max)
{
    if (len == 0 || len > 5)
        return -1;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v <= max ? v : -1;
}

/* "<slot> <endpoint>" of a MOVED or ASK into `out` (kind left to the caller). */
static int parse_target(const char *s, size_t len, struct rd_redirect *out)
{
    const char *space = memchr(s, ' ', len);
    if (space == NULL)
        return -1;
    long slot = small_number(s, (size_t)(space - s), RD_SLOTS - 1);
    const char *ep = space + 1;
    size_t elen = len - (size_t)(ep - s);
    if (slot < 0)
        return -1;
    for (size_t i = 0; i < elen; i++) {
        unsigned char ch = (unsigned char)ep[i];
        if (ch <= ' ' || ch == 0x7f)
            return -1; /* a second space, a control byte, a NUL */
    }
    /* The port follows the last ':', so Redis 7's unbracketed "::1:6381" parses. */
    const char *colon = elen > 0 ? memrchr(ep, ':', elen) : NULL;
    if (colon == NULL)
        return -1;
    long port = small_number(colon + 1, elen - (size_t)(colon + 1 - ep), 65535);
    if (port <= 0)
        return -1;
    const char *host = ep;
    size_t hlen = (size_t)(colon - ep);
    if (hlen > 0 && host[0] == '[') {
        if (hlen < 3 || host[hlen - 1] != ']')
            return -1;
        host++;
        hlen -= 2;
    }
    if (memchr(host, '[', hlen) != NULL || memchr(host, ']', hlen) != NULL ||
        hlen >= RD_HOST_MAX)
        return -1;
    memcpy(out->host, host, hlen);
    out->host[hlen] = '\0';
    out->slot = (int)slot;
    out->port = (int)port;
    return 0;
}

int rd_redirect_parse(const char *err, size_t len, struct rd_redirect *out)
{
    memset(out, 0, sizeof *out);
    out->kind = RD_REDIR_NONE;
    out->slot = -1;
    if (err == NULL)
        return 0;
    if (len > 0 && err[0] == '-') {
        err++;
        len--;
    }
    for (size_t i = 0; i < sizeof cluster_errors / sizeof *cluster_errors; i++) {
        const char *word = cluster_errors[i].word;
        size_t n = strlen(word);
        if (len < n || memcmp(err, word, n) != 0 || (len > n && err[n] != ' '))
            continue;
        enum rd_redirect_kind kind = cluster_errors[i].kind;
        if (kind != RD_REDIR_MOVED && kind != RD_REDIR_ASK) {
            out->kind = kind;
            return 0;
        }
        if (len == n || parse_target(err + n + 1, len - n - 1, out) != 0) {
            memset(out, 0, sizeof *out);
            out->kind = RD_REDIR_NONE;
            out->slot = -1;
            return -1;
        }
        out->kind = kind;
        return 0;
    }
    return 0;
}

/* ---- the slot map --------------------------------------------------------------- */

void rd_slot_map_init(struct rd_slot_map *m)
{
    m->nmasters = 0;
    m->masters = NULL;
    for (int i = 0; i < RD_SLOTS; i++)
        m->slot[i] = -1;
}

void rd_slot_map_clear(struct rd_slot_map *m)
{
    for (int i = 0; i < m->nmasters; i++)
        free(m->masters[i].replicas);
    free(m->masters);
    rd_slot_map_init(m);
}

const struct rd_node *rd_slot_map_master(const struct rd_slot_map *m, int slot)
{
    if (slot < 0 || slot >= RD_SLOTS || m->slot[slot] < 0)
        return NULL;
    return &m->masters[m->slot[slot]].master;
}

int rd_slot_map_find(const struct rd_slot_map *m, const char *host, int port)
{
    for (int i = 0; i < m->nmasters; i++)
        if (m->masters[i].master.port == port &&
            strcmp(m->masters[i].master.host, host) == 0)
            return i;
    return -1;
}

int rd_slot_map_assigned(const struct rd_slot_map *m)
{
    int n = 0;
    for (int i = 0; i < RD_SLOTS; i++)
        n += m->slot[i] >= 0;
    return n;
}

/* A parse in progress: the map being filled and where its error goes. */
struct build {
    struct rd_slot_map *m;
    const char *same_host;
    char *err;
    size_t errlen;
};

static int fail(struct build *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Record why the reply is malformed, empty the map, return -1. */
static int fail(struct build *b, const char *fmt, ...)
{
    if (b->err != NULL && b->errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->err, b->errlen, fmt, ap);
        va_end(ap);
    }
    rd_slot_map_clear(b->m);
    return -1;
}

static bool is_text(const redisReply *r)
{
    return r != NULL &&
           (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
           r->str != NULL;
}

static bool text_is(const redisReply *r, const char *s)
{
    return is_text(r) && r->len == strlen(s) && memcmp(r->str, s, r->len) == 0;
}

static bool is_array(const redisReply *r)
{
    return r != NULL && r->type == REDIS_REPLY_ARRAY && (r->elements == 0 || r->element);
}

/* An integer reply, or a string of decimal digits (at most 18): 0 with *v, else -1. */
static int number_of(const redisReply *r, long long *v)
{
    if (r != NULL && r->type == REDIS_REPLY_INTEGER) {
        *v = r->integer;
        return 0;
    }
    if (!is_text(r) || r->len == 0 || r->len > 18)
        return -1;
    long long n = 0;
    for (size_t i = 0; i < r->len; i++) {
        if (r->str[i] < '0' || r->str[i] > '9')
            return -1;
        n = n * 10 + (r->str[i] - '0');
    }
    *v = n;
    return 0;
}

/* True when `r` is text naming an address: not empty, not "?". */
static bool is_address(const redisReply *r)
{
    return is_text(r) && r->len > 0 && !text_is(r, "?");
}

/* Fill n->host from the first of `cands` that names an address, else same_host;
 * n->port from `port`; n->id from `id` (may be NULL). 0, or -1 via fail. */
static int set_node(struct build *b, struct rd_node *n, const redisReply *const *cands,
                    int ncands, const redisReply *port, const redisReply *id)
{
    memset(n, 0, sizeof *n);
    n->online = true;
    const char *host = b->same_host;
    size_t hlen = strlen(host);
    for (int i = 0; i < ncands; i++) {
        if (is_address(cands[i])) {
            host = cands[i]->str;
            hlen = cands[i]->len;
            break;
        }
    }
    if (hlen >= RD_HOST_MAX || memchr(host, '\0', hlen) != NULL)
        return fail(b, "a node's host is too long or holds a NUL");
    memcpy(n->host, host, hlen);
    n->host[hlen] = '\0';
    long long p;
    if (port == NULL || number_of(port, &p) != 0 || p <= 0 || p > 65535)
        return fail(b, "a node without a plain-text port");
    n->port = (int)p;
    if (id != NULL) {
        if (!is_text(id) || id->len > RD_NODE_ID_LEN || memchr(id->str, '\0', id->len))
            return fail(b, "a node id that is not text of at most 40 characters");
        memcpy(n->id, id->str, id->len);
        n->id[id->len] = '\0';
    }
    return 0;
}

static bool same_node(const struct rd_node *a, const struct rd_node *b)
{
    if (a->id[0] != '\0' && b->id[0] != '\0')
        return strcmp(a->id, b->id) == 0;
    return a->port == b->port && strcmp(a->host, b->host) == 0;
}

/* Append a master: its index, or -1 via fail past what a slot entry can hold. */
static int add_master(struct build *b, const struct rd_node *n)
{
    struct rd_slot_map *m = b->m;
    if (m->nmasters >= INT16_MAX)
        return fail(b, "more than %d masters", INT16_MAX);
    m->masters = seg_realloc(m->masters, (size_t)(m->nmasters + 1) * sizeof *m->masters);
    struct rd_shard *s = &m->masters[m->nmasters];
    memset(s, 0, sizeof *s);
    s->master = *n;
    return m->nmasters++;
}

/* Append a replica to shard `s` unless it is there already. */
static void add_replica(struct rd_shard *s, const struct rd_node *n)
{
    for (int i = 0; i < s->nreplicas; i++)
        if (same_node(&s->replicas[i], n))
            return;
    s->replicas =
        seg_realloc(s->replicas, (size_t)(s->nreplicas + 1) * sizeof *s->replicas);
    s->replicas[s->nreplicas++] = *n;
}

/* Give slots lo..hi to master `master`: 0, or -1 via fail. */
static int assign(struct build *b, const redisReply *lo_r, const redisReply *hi_r,
                  int master)
{
    long long lo, hi;
    if (number_of(lo_r, &lo) != 0 || number_of(hi_r, &hi) != 0)
        return fail(b, "a slot range that is not two numbers");
    if (lo < 0 || hi >= RD_SLOTS || lo > hi)
        return fail(b, "slot range %lld-%lld is out of 0-%d", lo, hi, RD_SLOTS - 1);
    for (long long s = lo; s <= hi; s++) {
        if (b->m->slot[s] >= 0 && b->m->slot[s] != master)
            return fail(b, "slot %lld is claimed by two masters", s);
        b->m->slot[s] = (int16_t)master;
    }
    return 0;
}

/* The value after key `key` in a flattened map (an array of key, value, ...), or
 * NULL. */
static const redisReply *field(const redisReply *map, const char *key)
{
    for (size_t i = 0; i + 1 < map->elements; i += 2)
        if (text_is(map->element[i], key))
            return map->element[i + 1];
    return NULL;
}

/* A flattened map: an array of an even number of elements, every key text. */
static bool is_map(const redisReply *r)
{
    if (!is_array(r) || r->elements % 2 != 0)
        return false;
    for (size_t i = 0; i < r->elements; i += 2)
        if (!is_text(r->element[i]))
            return false;
    return true;
}

/* ---- CLUSTER SHARDS ----
 * [ [ "slots", [lo, hi, lo, hi, ...], "nodes", [ [ "id", ID, "port", P, "ip", IP,
 *     "endpoint", E, ("hostname", H,) "role", "master"|"replica", "health", ... ],
 *     ... ] ], ... ]                                                                */

/* One node of a shard into `n`; *master says whether its role is master. */
static int shards_node(struct build *b, const redisReply *r, struct rd_node *n,
                       bool *master)
{
    if (!is_map(r))
        return fail(b, "a shard's node is not a map");
    const redisReply *role = field(r, "role"), *health = field(r, "health");
    if (!is_text(role))
        return fail(b, "a shard's node without a role");
    const redisReply *cands[] = {field(r, "endpoint"), field(r, "ip")};
    if (set_node(b, n, cands, 2, field(r, "port"), field(r, "id")) != 0)
        return -1;
    n->online = health == NULL || text_is(health, "online");
    *master = text_is(role, "master");
    return 0;
}

static int shards_entry(struct build *b, const redisReply *shard)
{
    if (!is_map(shard))
        return fail(b, "a shard is not a map");
    const redisReply *slots = field(shard, "slots"), *nodes = field(shard, "nodes");
    if (!is_array(slots) || slots->elements % 2 != 0 || !is_array(nodes))
        return fail(b, "a shard without its slots and nodes");
    int master = -1;
    for (size_t i = 0; i < nodes->elements; i++) {
        struct rd_node n;
        bool is_master;
        if (shards_node(b, nodes->element[i], &n, &is_master) != 0)
            return -1;
        if (!is_master)
            continue;
        if (master >= 0) /* seen from servers with shard ids during a failover */
            return fail(b, "a shard with two masters");
        if ((master = add_master(b, &n)) < 0)
            return -1;
    }
    if (master < 0) {
        if (slots->elements > 0)
            return fail(b, "a shard serves slots but has no master");
        return 0; /* replicas of nobody we could route to */
    }
    for (size_t i = 0; i < nodes->elements; i++) {
        struct rd_node n;
        bool is_master;
        if (shards_node(b, nodes->element[i], &n, &is_master) != 0)
            return -1;
        if (!is_master)
            add_replica(&b->m->masters[master], &n);
    }
    for (size_t i = 0; i < slots->elements; i += 2)
        if (assign(b, slots->element[i], slots->element[i + 1], master) != 0)
            return -1;
    return 0;
}

static void build_start(struct build *b, struct rd_slot_map *out, const char *same_host,
                        char *err, size_t errlen)
{
    b->m = out;
    b->same_host = same_host != NULL ? same_host : "";
    b->err = err;
    b->errlen = errlen;
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    rd_slot_map_init(out);
}

/* Each entry of `command`'s array reply `r` into the map: 0, or -1 with the error set
 * (a reply that is no array, or the first entry that does not parse). */
static int build_each(struct build *b, const redisReply *r, const char *command,
                      int (*entry)(struct build *, const redisReply *))
{
    if (!is_array(r))
        return fail(b, "%s did not answer an array", command);
    for (size_t i = 0; i < r->elements; i++)
        if (entry(b, r->element[i]) != 0)
            return -1;
    return 0;
}

int rd_slot_map_from_shards(const struct redisReply *r, const char *same_host,
                            struct rd_slot_map *out, char *err, size_t errlen)
{
    struct build b;
    build_start(&b, out, same_host, err, errlen);
    return build_each(&b, r, "CLUSTER SHARDS", shards_entry);
}

/* ---- CLUSTER SLOTS ----
 * [ [lo, hi, [HOST|nil, PORT, ID, [ "ip", IP, "hostname", H ... ]], replica..., ],
 *   ... ]: one entry per range, a master listed once per range it serves.          */

static int slots_node(struct build *b, const redisReply *r, struct rd_node *n)
{
    if (!is_array(r) || r->elements < 2)
        return fail(b, "a node of CLUSTER SLOTS is not [host, port, ...]");
    const redisReply *meta =
        r->elements > 3 && is_map(r->element[3]) ? r->element[3] : NULL;
    const redisReply *cands[] = {r->element[0], meta != NULL ? field(meta, "ip") : NULL};
    return set_node(b, n, cands, 2, r->element[1],
                    r->elements > 2 ? r->element[2] : NULL);
}

static int slots_entry(struct build *b, const redisReply *e)
{
    if (!is_array(e) || e->elements < 3)
        return fail(b, "an entry of CLUSTER SLOTS is not [lo, hi, master, ...]");
    struct rd_node n;
    if (slots_node(b, e->element[2], &n) != 0)
        return -1;
    int master = -1;
    for (int i = 0; i < b->m->nmasters && master < 0; i++)
        if (same_node(&b->m->masters[i].master, &n))
            master = i;
    if (master < 0 && (master = add_master(b, &n)) < 0)
        return -1;
    for (size_t i = 3; i < e->elements; i++) {
        if (slots_node(b, e->element[i], &n) != 0)
            return -1;
        add_replica(&b->m->masters[master], &n);
    }
    return assign(b, e->element[0], e->element[1], master);
}

int rd_slot_map_from_slots(const struct redisReply *r, const char *same_host,
                           struct rd_slot_map *out, char *err, size_t errlen)
{
    struct build b;
    build_start(&b, out, same_host, err, errlen);
    return build_each(&b, r, "CLUSTER SLOTS", slots_entry);
}

/* ---- fetching from a seed ------------------------------------------------------- */

static int fetch_fail(redisContext *rc, redisReply *r, char *err, size_t errlen,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Write the reason, free what is open, return -1. */
static int fetch_fail(redisContext *rc, redisReply *r, char *err, size_t errlen,
                      const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    if (r != NULL)
        freeReplyObject(r);
    if (rc != NULL)
        redisFree(rc);
    return -1;
}

/* The reason a command got no usable reply: the reply's error text or the
 * connection's. */
static const char *why(const redisContext *rc, const redisReply *r)
{
    if (r == NULL)
        return rc->errstr[0] != '\0' ? rc->errstr : "no reply";
    return r->type == REDIS_REPLY_ERROR && r->str != NULL ? r->str : "unexpected reply";
}

/* A blocking connection to `seed` with AUTH done, or NULL with the reason in err. */
static redisContext *seed_connect(const struct rd_target *seed, const char **host,
                                  char *err, size_t errlen)
{
    *host = seed->host != NULL && seed->host[0] != '\0' ? seed->host : "127.0.0.1";
    int ms = seed->timeout_ms > 0 ? seed->timeout_ms : 1000;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    redisContext *rc = redisConnectWithTimeout(*host, seed->port, tv);
    if (rc == NULL) {
        fetch_fail(NULL, NULL, err, errlen, "connect: out of memory");
        return NULL;
    }
    if (rc->err || redisSetTimeout(rc, tv) != REDIS_OK) {
        fetch_fail(rc, NULL, err, errlen, "connect %s:%d: %s", *host, seed->port,
                   rc->errstr);
        return NULL;
    }
    if (seed->password != NULL && seed->password[0] != '\0') {
        const char *argv[3] = {"AUTH"};
        int argc = 1;
        if (seed->user != NULL && seed->user[0] != '\0')
            argv[argc++] = seed->user;
        argv[argc++] = seed->password;
        redisReply *r = redisCommandArgv(rc, argc, argv, NULL);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            fetch_fail(rc, r, err, errlen, "AUTH: %s", why(rc, r));
            return NULL;
        }
        freeReplyObject(r);
    }
    return rc;
}

int rd_cluster_probe(const struct rd_target *seed, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (seed->unix_path != NULL && seed->unix_path[0] != '\0')
        return 0; /* a cluster node is reached over TCP */
    const char *host;
    redisContext *rc = seed_connect(seed, &host, err, errlen);
    if (rc == NULL)
        return -1;
    redisReply *r = redisCommand(rc, "INFO cluster");
    if (r == NULL || r->type != REDIS_REPLY_STRING)
        return fetch_fail(rc, r, err, errlen, "INFO cluster: %s", why(rc, r));
    int on = strstr(r->str, "cluster_enabled:1") != NULL;
    freeReplyObject(r);
    redisFree(rc);
    return on;
}

bool rd_cluster_error(const char *err, size_t len)
{
    static const char *const words[] = {"MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN",
                                        "CROSSSLOT"};
    if (err == NULL)
        return false;
    if (len > 0 && err[0] == '-') {
        err++;
        len--;
    }
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        size_t n = strlen(words[i]);
        if (len >= n && memcmp(err, words[i], n) == 0)
            return true;
    }
    return false;
}

int rd_pick_seed(struct rd_target *to, const char *seeds, char *host, size_t hostlen,
                 char *err, size_t errlen)
{
    snprintf(host, hostlen, "%s", to->host != NULL ? to->host : "127.0.0.1");
    if (to->unix_path != NULL && to->unix_path[0] != '\0')
        return 0;
    const char *next = seeds != NULL ? seeds : "";
    struct rd_target t = *to;
    char h[RD_HOST_MAX];
    snprintf(h, sizeof h, "%s", host);
    for (;;) {
        t.host = h;
        int on = rd_cluster_probe(&t, err, errlen);
        if (on >= 0) {
            snprintf(host, hostlen, "%s", h);
            to->host = host;
            to->port = t.port;
            to->cluster = to->cluster || on == 1;
            return 0;
        }
        if (*next == '\0')
            return -1;
        /* The next "host:port" (an IPv6 host bracketed: "[::1]:7000"). */
        size_t n = strcspn(next, ",");
        char one[RD_HOST_MAX + 16];
        snprintf(one, sizeof one, "%.*s", (int)(n < sizeof one - 1 ? n : sizeof one - 1),
                 next);
        next += n + (next[n] == ',');
        char *colon = strrchr(one, ':');
        if (colon == NULL)
            continue;
        *colon = '\0';
        t.port = atoi(colon + 1);
        const char *name = one;
        size_t len = strlen(one);
        if (one[0] == '[' && len >= 2 && one[len - 1] == ']') {
            one[len - 1] = '\0';
            name = one + 1;
        }
        snprintf(h, sizeof h, "%.*s", (int)sizeof h - 1, name);
    }
}

redisContext *rd_slot_map_connect(const struct rd_target *seed, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (seed->unix_path != NULL && seed->unix_path[0] != '\0') {
        fetch_fail(NULL, NULL, err, errlen,
                   "a cluster seed is host:port, not a unix socket");
        return NULL;
    }
    if (seed->db != 0) {
        fetch_fail(NULL, NULL, err, errlen, "a cluster has db 0 only, not db %d",
                   seed->db);
        return NULL;
    }
    const char *host;
    return seed_connect(seed, &host, err, errlen);
}

int rd_slot_map_ask(redisContext *rc, const char *host, struct rd_slot_map *out,
                    char *err, size_t errlen)
{
    rd_slot_map_init(out);
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    /* SHARDS first: it lists every replica. SLOTS when SHARDS answers an error (a
     * server before 7.0) or a map the parser refuses (a shard naming two masters,
     * where only SLOTS says which one serves the slots). */
    redisReply *r = redisCommand(rc, "CLUSTER SHARDS");
    if (r == NULL)
        return fetch_fail(NULL, r, err, errlen, "CLUSTER SHARDS: %s", why(rc, r));
    char refused[160];
    if (r->type != REDIS_REPLY_ERROR &&
        rd_slot_map_from_shards(r, host, out, refused, sizeof refused) == 0) {
        freeReplyObject(r);
        return 0;
    }
    if (r->type == REDIS_REPLY_ERROR)
        snprintf(refused, sizeof refused, "%s", why(rc, r));
    freeReplyObject(r);
    r = redisCommand(rc, "CLUSTER SLOTS");
    if (r == NULL || r->type == REDIS_REPLY_ERROR)
        return fetch_fail(NULL, r, err, errlen, "CLUSTER SHARDS: %s; CLUSTER SLOTS: %s",
                          refused, why(rc, r));
    char why_bad[160];
    if (rd_slot_map_from_slots(r, host, out, why_bad, sizeof why_bad) != 0)
        return fetch_fail(NULL, r, err, errlen, "CLUSTER SHARDS: %s; CLUSTER SLOTS: %s",
                          refused, why_bad);
    freeReplyObject(r);
    return 0;
}

int rd_slot_map_fetch(const struct rd_target *seed, struct rd_slot_map *out, char *err,
                      size_t errlen)
{
    rd_slot_map_init(out);
    redisContext *rc = rd_slot_map_connect(seed, err, errlen);
    if (rc == NULL)
        return -1;
    const char *host =
        seed->host != NULL && seed->host[0] != '\0' ? seed->host : "127.0.0.1";
    int rc_ask = rd_slot_map_ask(rc, host, out, err, errlen);
    redisFree(rc);
    return rc_ask;
}
