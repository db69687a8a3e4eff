/* it_history.c -- randomized history checker: a seeded random mix of every write the
 * API has, sent by client threads to 3 instances on one Redis while Redis connections
 * are killed and Redis is restarted once; every request and its answer is logged, and
 * the log is then checked against itself and against what Redis holds.
 *
 * Running it. HISTORY_SEED (default DEFAULT_SEED) and HISTORY_SECONDS (default 20)
 * choose the history; HISTORY_LOG_DIR keeps the log there (default: a temp dir,
 * removed when the run passes). `make soak` runs it round after round with fresh
 * seeds (tests/soak.sh). Requests are bounded (REQUESTS_PER_SECOND), everything goes
 * to 127.0.0.1, and h_deadline ends a run that hangs.
 *
 * The history. N_CLIENTS threads, each with its own PRNG drawn from (seed, thread),
 * so a seed names the same requests (the interleaving is the machine's), over N_SKUS
 * SKUs of 1 to 20 segments in mode lock or atomic, some small enough to sell out, two
 * with group commit ("batch"):
 *  - orders with client ids, qty mostly 1, sometimes more than a segment holds; some
 *    sent to 2-3 instances at once, some retried later, some raced by their cancel;
 *  - cancels of earlier orders;
 *  - restocks with a request id (in the body as "request_id", or as Idempotency-Key),
 *    some sent to two instances at once, retried after a 503, or re-sent later;
 *  - rebalances with an Idempotency-Key, some sent twice at once;
 *  - resets (PUT, maybe another segment count or mode) and delete + create. The test
 *    runs one reset of a SKU at a time, retried with the same key until 200 or 4xx,
 *    and none in the last third of the run, so that late ops can be judged;
 *  - chaos (on the test's main thread, see run_history): CLIENT KILL TYPE normal
 *    every 200-500 ms, and one graceful Redis restart (AOF kept: nothing acknowledged
 *    may be lost; the services must reconnect by themselves).
 *
 * The log. One entry per request: op, SKU, order id / request id / key, qty (reset:
 * stock, segments, mode, hold_ms), instance, thread, monotonic send and receive time
 * (us since the start), status, error code, Retry-After, body.
 *
 * Time. A reset or delete forgets the SKU's orders and starts a new sale, so an op is
 * judged against Redis only when it is "surely after the last reset" of its SKU: sent
 * after every reset/delete of that SKU was answered (one without an answer never is).
 *
 * The checks, once the clients have stopped:
 *  1 answers: only the README's statuses and codes for each request; no 5xx but 503,
 *    and a 503 carries Retry-After and a JSON error; every request is answered; 2xx
 *    order and cancel bodies are well-formed records of the request.
 *  2 each SKU (GET /admin/skus/S): remaining + sold == initial, no segment below 0,
 *    sum(segment_stock) == remaining, sum(segment_sold) == sold.
 *  3 the records (GET /orders/{id} for every id in the log) against each SKU: the
 *    confirmed records of S sum to sold(S), per segment to segment_sold, and count to
 *    orders; a deleted SKU has no records left.
 *  4 each order id: a 2xx surely after the last reset has its record (same sku and
 *    qty; confirmed, or cancelled when a cancel of it was sent), a 201's body is the
 *    record but for status, there is at most one such 201, and every such 2xx has the
 *    record's segments; a 200 (replay) needs another request of the id sent before it
 *    was answered; a 200 cancel surely after the last reset left the record cancelled
 *    with the order's qty; a cancel sent after such a 201 was received is not a 404;
 *    a record is cancelled only when a cancel of it was sent.
 *  5 initial(S) lies between the stock of the reset in force plus the restocks surely
 *    applied after it (answered 200, every request of the key surely after) and that
 *    stock plus every restock that may have been applied (answered after the reset was
 *    sent, not refused with a 4xx); each request id counts once.
 * Each violation is printed with the log lines involved (and all of them written to
 * the log file); any violation fails the test.
 *
 * HISTORY_OPS (a list such as "order,cancel,restock") limits the kinds the clients
 * send; orders are always sent. tests/it_history_cluster.c compiles this file again
 * with HISTORY_CLUSTER defined: the same clients and checks on a Redis Cluster with
 * replicated SKUs and failovers (its header says what differs); it_history_pg.c with
 * HISTORY_PG: on the PostgreSQL store, with checks of its tables; it_history_locks.c
 * with HISTORY_LOCKS: SKUs whose locks live in ZooKeeper, RedLock and memcached, each
 * service faulted during the run.
 *
 * The ledger (standalone and PostgreSQL, there in the store's database;
 * HISTORY_LEDGER=0 turns it off): every instance runs
 * with `--ledger` to a PostgreSQL the fixture starts (~2 s of a 22 s run), so every SKU
 * is followed, and check 6 audits the order ledger (docs/DESIGN.md "The order ledger")
 * once the clients have stopped: each SKU's reconcile reaches drift 0 (bounded), and
 * its ledger rows of the SKU's epoch are exactly its order records in Redis, one row
 * per record, `sold` with the record's qty or `cancelled` with 0 -- with check 4 (every
 * acknowledged sale has its record), every acknowledged sale is in the ledger once,
 * its cancel as the ledger records it, and nothing else.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include <libpq-fe.h>

#include "tests/harness.h"
#include "tests/harness_pg.h"

#define N_CLIENTS 8
#define N_INST 3
#define N_SKUS 4
#define MAX_SEGS 32
#define ID_MAX 40
#define ORDER_MEMORY 512  /* orders a client remembers for retries and cancels */
#define RESTOCK_MEMORY 64 /* restocks a client remembers for re-sending */
#define RESV_MEMORY 64    /* reservations a client remembers to confirm or release */
#define EXPIRY_SLACK_MS                                                                  \
    5 /* clock reads (Redis TIME, this process) a ms apart, rounded                      \
       */
#define DEFAULT_SEED 20261123ULL
#define DEFAULT_SECONDS 20
#define REQUESTS_PER_SECOND 4000 /* the log's cap: bounds the load and the check */
#define PACE_US 3000             /* a client pauses 0..PACE_US between ops */
#define SHOW_PER_CATEGORY 8      /* violations printed per category (all go to the log) */
#define NEVER LLONG_MAX
#ifndef MODE_FLIP_PERCENT
#define MODE_FLIP_PERCENT 15 /* resets that flip the SKU's mode (lock <-> atomic) */
#endif

/* The variant: this file alone is the standalone checker; tests/it_history_cluster.c
 * defines HISTORY_CLUSTER (it_history_pg.c HISTORY_PG, it_history_locks.c
 * HISTORY_LOCKS), includes it and adds its own fixture and chaos. */
#if !defined(HISTORY_CLUSTER) && !defined(HISTORY_PG) && !defined(HISTORY_LOCKS)
#define HISTORY_NAME "it_history"
#define DEFAULT_OPS OPS_ALL /* kinds the clients send unless HISTORY_OPS says */
#define RETRY_UNKNOWN false /* retry an order or cancel answered 503 under its id */
#define DEADLINE_EXTRA 60   /* seconds past HISTORY_SECONDS before h_deadline fires */
#endif

enum kind {
    K_ORDER,
    K_CANCEL,
    K_RESTOCK,
    K_REBALANCE,
    K_RESET, /* PUT /admin/skus/S: create or reset */
    K_DELETE,
    K_RESERVE,  /* POST /reservations */
    K_CONFIRM,  /* POST /reservations/{id}/confirm */
    K_RELEASE,  /* DELETE /reservations/{id} */
    K_KILL,     /* chaos: CLIENT KILL; status = clients killed */
    K_RESTART,  /* chaos: Redis restart; status 0 or -1 */
    K_FAILOVER, /* chaos (cluster): a master SIGKILLed, its replica promoted; 0 or -1 */
    K_FREEZE,   /* chaos (cluster): a replica frozen and its link cut; 0 or -1 */
    K__COUNT
};

static const char *const kind_name[K__COUNT] = {
    "order",   "cancel",  "restock", "rebalance", "reset",    "delete", "reserve",
    "confirm", "release", "kill",    "restart",   "failover", "freeze"};

/* Sets of the kinds clients send (bit 1 << kind); orders are always sent. */
#define OPS_ORDERS                                                                       \
    ((1u << K_ORDER) | (1u << K_CANCEL) | (1u << K_RESTOCK) | (1u << K_REBALANCE) |      \
     (1u << K_RESET) | (1u << K_DELETE))
/* Reservations: a standalone Redis and PostgreSQL (it_history_pg.c's HISTORY_PG) so
 * far (docs/DESIGN.md "Reservations"; not on a cluster). */
#define OPS_RESV ((1u << K_RESERVE) | (1u << K_CONFIRM) | (1u << K_RELEASE))
#if !defined(HISTORY_CLUSTER) && !defined(HISTORY_LOCKS)
#define OPS_ALL (OPS_ORDERS | OPS_RESV)
#else
#define OPS_ALL OPS_ORDERS
#endif

/* A SKU of the history and how its resets look. */
struct sku_spec {
    const char *name;
    long long stock;        /* a reset's stock: this, +-25% */
    int segs[3];            /* segment counts a reset picks from; the first at setup */
    const char *mode;       /* mode at setup; a reset flips it now and then */
    int hold_max;           /* hold_ms 0..hold_max */
    const char *durability; /* sent with every reset; NULL: none (the setting's) */
#if defined(HISTORY_PG) || defined(HISTORY_LOCKS)
    const char *lock; /* sent with every reset: the PostgreSQL scheme; the lock service */
#endif
    int batch; /* sent with every reset when > 0 (group commit) */
};

#ifdef HISTORY_PG
/* One SKU per PostgreSQL scheme; a reset keeps the scheme (a flip to atomic and back
 * too), so each meets one and several segments and multi-segment orders; row, lease
 * and atomic with group commit (postgres/batch.c). */
static const struct sku_spec specs[N_SKUS] = {
    {"p-row", 40, {1, 4, 20}, "lock", 2, NULL, "row", 8},
    {"p-lease", 60, {4, 1, 20}, "lock", 3, NULL, "lease", 4},
    {"p-opt", 200, {20, 4, 1}, "lock", 0, NULL, "optimistic", 0},
    {"p-atomic", 30, {4, 1, 20}, "atomic", 0, NULL, "row", 8},
};
#elif defined(HISTORY_LOCKS)
/* One SKU per lock service (two on ZooKeeper, the service with fences of its own), in
 * mode lock for good: mode atomic is refused with a lock service, so no reset flips
 * it (MODE_FLIP_PERCENT). */
static const struct sku_spec specs[N_SKUS] = {
    {"l-zk", 40, {4, 1, 20}, "lock", 10, NULL, "zookeeper", 0},
    {"l-redlock", 60, {1, 4, 20}, "lock", 10, NULL, "redlock", 0},
    {"l-mc", 40, {4, 20, 1}, "lock", 10, NULL, "memcached", 0},
    {"l-zk-twenty", 200, {20, 4, 1}, "lock", 3, NULL, "zookeeper", 0},
};
#elif !defined(HISTORY_CLUSTER)
static const struct sku_spec specs[N_SKUS] = {
    {"h-one", 24, {1, 1, 4}, "lock", 2, NULL, 8},
    {"h-four", 40, {4, 4, 20}, "lock", 5, NULL, 4},
    {"h-twenty", 200, {20, 20, 4}, "lock", 3, NULL, 0},
    {"h-atomic", 30, {4, 1, 20}, "atomic", 0, NULL, 0},
};
#else
/* Every SKU replicated, so that nothing acknowledged may be lost to a failover. More
 * stock than above, so that failovers meet SKUs with stock left also when no cancel or
 * restock brings any back (the default kinds); c-atomic sells out. */
static const struct sku_spec specs[N_SKUS] = {
    {"c-one", 12000, {1, 1, 4}, "lock", 2, "replicated", 0},
    {"c-four", 30000, {4, 4, 20}, "lock", 5, "replicated", 0},
    {"c-twenty", 120000, {20, 20, 4}, "lock", 3, "replicated", 0},
    {"c-atomic", 300, {4, 1, 20}, "atomic", 0, "replicated", 0},
};
#endif

/* ---- small helpers ----------------------------------------------------------------- */

static void *xmalloc(size_t n)
{
    void *p = calloc(1, n);
    if (p == NULL) {
        fprintf(stderr, HISTORY_NAME ": out of memory\n");
        abort();
    }
    return p;
}

static char *xstrdup(const char *s)
{
    char *p = xmalloc(strlen(s) + 1);
    memcpy(p, s, strlen(s) + 1);
    return p;
}

static long long mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_us(long long us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/* splitmix64: a small, well-mixed PRNG; one state per thread. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in 0..n-1 (n >= 1). */
static int rng_below(uint64_t *s, int n)
{
    return (int)(rng_next(s) % (uint64_t)n);
}

/* Uniform in lo..hi. */
static int rng_range(uint64_t *s, int lo, int hi)
{
    return lo + rng_below(s, hi - lo + 1);
}

static uint64_t rng_seed(unsigned long long seed, int stream)
{
    uint64_t s = seed ^ (0x5851f42d4c957f2dULL * (uint64_t)(stream + 1));
    rng_next(&s);
    return s;
}

static unsigned long long env_ull(const char *name, unsigned long long dflt)
{
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0')
        return dflt;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0') {
        fprintf(stderr, HISTORY_NAME ": %s=%s is not a number; using %llu\n", name, v,
                dflt);
        return dflt;
    }
    return n;
}

static int sku_index(const char *name)
{
    for (int s = 0; s < N_SKUS; s++)
        if (strcmp(specs[s].name, name) == 0)
            return s;
    return -1;
}

/* ---- the log ----------------------------------------------------------------------- */

/* One request as the client meant it. */
struct req {
    enum kind kind;
    int sku, inst, thread; /* thread: client index; -1 setup; N_CLIENTS chaos */
    char id[ID_MAX];       /* order_id, request id or Idempotency-Key */
    long long qty;         /* order or restock qty; reset: stock */
    int segments, hold_ms; /* reset */
    const char *mode;      /* reset */
    bool key_header;       /* restock/reset: key as Idempotency-Key, not "request_id" */
};

/* One request and its answer. */
struct entry {
    struct req q;
    long long sent, recv; /* us since the run started */
    int status;           /* HTTP status, -1 none; chaos: see enum kind */
    bool retry_after;     /* a Retry-After header came with it */
    bool json;            /* Content-Type application/json */
    char code[32];        /* "error" of an error body ("?" when it has none) */
    char *body;           /* malloc'd; for status -1 why there was none */
    size_t seq;           /* position in send order, set once the run is over */
};

/* Every request sent is in the log: a sender reserves its entry first, and once
 * `max` are reserved nothing more is sent (the checks need the whole history). */
struct hlog {
    pthread_mutex_t mu;
    struct entry *e;
    size_t n, cap, reserved, max;
    bool full;
};

/* Reserve an entry; false (and nothing may be sent) once the log is full. */
static bool log_reserve(struct hlog *l)
{
    pthread_mutex_lock(&l->mu);
    bool ok = l->reserved < l->max;
    l->reserved += ok;
    l->full |= !ok;
    pthread_mutex_unlock(&l->mu);
    return ok;
}

/* Append a copy of `e` into a reserved entry (the log takes its body). */
static void log_add(struct hlog *l, struct entry *e)
{
    pthread_mutex_lock(&l->mu);
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4096;
        struct entry *grown = realloc(l->e, l->cap * sizeof *grown);
        if (grown == NULL) {
            fprintf(stderr, HISTORY_NAME ": out of memory\n");
            abort();
        }
        l->e = grown;
    }
    l->e[l->n++] = *e;
    pthread_mutex_unlock(&l->mu);
}

static bool log_full(struct hlog *l)
{
    pthread_mutex_lock(&l->mu);
    bool full = l->full;
    pthread_mutex_unlock(&l->mu);
    return full;
}

static void log_free(struct hlog *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->e[i].body);
    free(l->e);
    pthread_mutex_destroy(&l->mu);
}

static int by_send_time(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    return x->sent < y->sent ? -1 : x->sent > y->sent;
}

/* One line for entry `e`; the body cut at `body_max` characters. */
static const char *entry_line(const struct entry *e, char *buf, size_t len,
                              size_t body_max)
{
    const struct req *q = &e->q;
    char who[16];
    if (q->thread < 0)
        snprintf(who, sizeof who, "setup");
    else if (q->thread == N_CLIENTS)
        snprintf(who, sizeof who, "chaos");
    else
        snprintf(who, sizeof who, "t%d i%d", q->thread, q->inst);
    int n = snprintf(buf, len, "#%zu %.3f..%.3fms %s %s", e->seq, e->sent / 1000.0,
                     e->recv / 1000.0, who, kind_name[q->kind]);
    if (q->kind >= K_KILL) {
        snprintf(buf + n, len - (size_t)n, " -> %d", e->status);
        return buf;
    }
    n += snprintf(buf + n, len - (size_t)n, " %s id=%s", specs[q->sku].name, q->id);
    if (q->kind == K_ORDER || q->kind == K_CANCEL || q->kind == K_RESTOCK)
        n += snprintf(buf + n, len - (size_t)n, " qty=%lld", q->qty);
    if (q->kind == K_RESET)
        n += snprintf(buf + n, len - (size_t)n, " stock=%lld segments=%d %s hold=%d",
                      q->qty, q->segments, q->mode, q->hold_ms);
    if (q->kind == K_RESTOCK || q->kind == K_RESET)
        n += snprintf(buf + n, len - (size_t)n, " key=%s",
                      q->key_header ? "header" : "body");
    snprintf(buf + n, len - (size_t)n, " -> %d%s%s %.*s", e->status,
             e->retry_after ? " (Retry-After)" : "", e->status < 0 ? ":" : "",
             (int)body_max, e->body != NULL ? e->body : "");
    return buf;
}

/* ---- the run ----------------------------------------------------------------------- */

struct run {
    h_redis *redis;     /* standalone: the Redis (NULL on a cluster) */
    h_cluster *cluster; /* the cluster variant's cluster (NULL standalone) */
#ifdef HISTORY_PG
    h_pg *pg; /* the PostgreSQL variant's server */
#endif
    h_pg *ledger; /* the ledger's PostgreSQL (standalone, unless HISTORY_LEDGER=0) */
#ifdef HISTORY_LOCKS
    struct lock_servers *locks; /* the lock services (tests/it_history_locks.c) */
    h_svc *svc[N_INST];         /* the instances, which its chaos freezes */
#endif
    unsigned ops; /* the kinds clients send (OPS_ALL, HISTORY_OPS) */
    int port[N_INST];
    unsigned long long seed;
    int seconds;
    long long t0;           /* monotonic us at the start; the log's times count from it */
    long long wall0_ms;     /* CLOCK_REALTIME ms at t0: a hold's expiry (Redis TIME, the
                               same host's clock) against the log's times */
    long long end;          /* clients start no op after this (us since t0) */
    long long resets_until; /* no reset or delete is started after this */
    long long restart_at;   /* the chaos thread restarts Redis at its first wake after */
    long long check_until;  /* reads of the check stop retrying 503s after this */
    struct hlog log;
    pthread_mutex_t reset_mu[N_SKUS]; /* one reset of a SKU at a time */
    pthread_rwlock_t pause; /* each client op holds it shared: the chaos may take it to
                               run a fault with no op in flight (writers first) */
    bool restart_failed;    /* written by the chaos thread, read after join */
    char chaos_error[160];  /* cluster: a fault that did not go as planned */
};

static long long run_now(const struct run *run)
{
    return mono_us() - run->t0;
}

/* Send `q` as HTTP to `port`; fills `r` (h_resp_free) and returns its status. */
static int http_send(int port, const struct req *q, struct h_resp *r)
{
    const char *sku = specs[q->sku].name, *method = "POST";
    char path[160], body[320] = "", hdr[200] = "";
    bool has_body = true, key_header = false;
    switch (q->kind) {
    case K_ORDER:
        snprintf(path, sizeof path, "/orders");
        snprintf(body, sizeof body, "{\"sku\":\"%s\",\"qty\":%lld,\"order_id\":\"%s\"}",
                 sku, q->qty, q->id);
        break;
    case K_CANCEL:
        method = "DELETE";
        snprintf(path, sizeof path, "/orders/%s", q->id);
        has_body = false;
        break;
    case K_RESTOCK:
        snprintf(path, sizeof path, "/admin/skus/%s/restock", sku);
        if (q->key_header)
            snprintf(body, sizeof body, "{\"qty\":%lld}", q->qty);
        else
            snprintf(body, sizeof body, "{\"qty\":%lld,\"request_id\":\"%s\"}", q->qty,
                     q->id);
        key_header = q->key_header;
        break;
    case K_REBALANCE:
        snprintf(path, sizeof path, "/admin/skus/%s/rebalance", sku);
        has_body = false;
        key_header = true;
        break;
    case K_RESET:
        method = "PUT";
        snprintf(path, sizeof path, "/admin/skus/%s?reset=true", sku);
        int n = snprintf(body, sizeof body,
                         "{\"stock\":%lld,\"segments\":%d,\"mode\":\"%s\",\"hold_ms\":%d",
                         q->qty, q->segments, q->mode, q->hold_ms);
        if (!q->key_header)
            n += snprintf(body + n, sizeof body - (size_t)n, ",\"request_id\":\"%s\"",
                          q->id);
        if (specs[q->sku].durability != NULL)
            n += snprintf(body + n, sizeof body - (size_t)n, ",\"durability\":\"%s\"",
                          specs[q->sku].durability);
#if defined(HISTORY_PG) || defined(HISTORY_LOCKS)
        n += snprintf(body + n, sizeof body - (size_t)n, ",\"lock\":\"%s\"",
                      specs[q->sku].lock);
#endif
        if (specs[q->sku].batch > 0)
            n += snprintf(body + n, sizeof body - (size_t)n, ",\"batch\":%d",
                          specs[q->sku].batch);
        snprintf(body + n, sizeof body - (size_t)n, "}");
        key_header = q->key_header;
        break;
    case K_DELETE:
        method = "DELETE";
        snprintf(path, sizeof path, "/admin/skus/%s", sku);
        has_body = false;
        key_header = true;
        break;
    case K_RESERVE: /* hold_ms carries the hold's ttl_s */
        snprintf(path, sizeof path, "/reservations");
        snprintf(body, sizeof body,
                 "{\"sku\":\"%s\",\"qty\":%lld,\"ttl_s\":%d,\"reservation_id\":\"%s\"}",
                 sku, q->qty, q->hold_ms, q->id);
        break;
    case K_CONFIRM:
        snprintf(path, sizeof path, "/reservations/%s/confirm", q->id);
        has_body = false;
        break;
    case K_RELEASE:
        method = "DELETE";
        snprintf(path, sizeof path, "/reservations/%s", q->id);
        has_body = false;
        break;
    default:
        return -1;
    }
    size_t n = 0;
    if (has_body)
        n += (size_t)snprintf(hdr, sizeof hdr, "Content-Type: application/json\r\n");
    if (key_header)
        snprintf(hdr + n, sizeof hdr - n, "Idempotency-Key: %s\r\n", q->id);
    return h_http(port, method, path, hdr, has_body ? body : NULL,
                  has_body ? strlen(body) : 0, r);
}

/* Send `q`, log it with its answer, return the status (-1: no answer; -2: not sent,
 * the log is full). */
static int send_one(struct run *run, const struct req *q)
{
    if (!log_reserve(&run->log))
        return -2;
    struct entry e;
    memset(&e, 0, sizeof e);
    e.q = *q;
    struct h_resp r;
    e.sent = run_now(run);
    e.status = http_send(run->port[q->inst], q, &r);
    e.recv = run_now(run);
    e.retry_after = r.retry_after[0] != '\0';
    e.json = strncasecmp(r.content_type, "application/json", 16) == 0;
    e.body = xstrdup(e.status >= 0 ? r.body : r.err);
    if (e.status >= 400)
        h_error_code(&r, e.code, sizeof e.code);
    h_resp_free(&r);
    log_add(&run->log, &e);
    return e.status;
}

struct together {
    struct run *run;
    struct req q;
    pthread_t th;
    bool started;
};

static void *together_main(void *p)
{
    struct together *t = p;
    send_one(t->run, &t->q);
    return NULL;
}

/* Send qs[0..n-1] (n <= 4) at once, each from its own thread. */
static void send_together(struct run *run, const struct req *qs, int n)
{
    struct together t[4];
    for (int i = 1; i < n; i++) {
        t[i] = (struct together){.run = run, .q = qs[i]};
        t[i].started = pthread_create(&t[i].th, NULL, together_main, &t[i]) == 0;
        if (!t[i].started)
            send_one(run, &qs[i]);
    }
    send_one(run, &qs[0]);
    for (int i = 1; i < n; i++)
        if (t[i].started)
            pthread_join(t[i].th, NULL);
}

/* The same request to `n` different instances at once. */
static void send_to_instances(struct run *run, const struct req *q, int n)
{
    struct req qs[N_INST];
    for (int i = 0; i < n && i < N_INST; i++) {
        qs[i] = *q;
        qs[i].inst = (q->inst + i) % N_INST;
    }
    send_together(run, qs, n < N_INST ? n : N_INST);
}

/* ---- clients ----------------------------------------------------------------------- */

/* An earlier request a client may send again (order, cancel target or restock). */
struct remembered {
    int sku;
    long long qty;
    char id[ID_MAX];
    bool key_header;
};

struct client {
    struct run *run;
    int idx;
    uint64_t rng;
    int seq; /* numbers this client's ids */
    struct remembered orders[ORDER_MEMORY], restocks[RESTOCK_MEMORY], holds[RESV_MEMORY];
    int norders, nrestocks, nholds;
};

static struct req new_req(struct client *c, enum kind kind, int sku)
{
    struct req q = {
        .kind = kind, .sku = sku, .inst = rng_below(&c->rng, N_INST), .thread = c->idx};
    return q;
}

/* A fresh id "t<client>-<tag><n>", unique in the run. */
static void new_id(struct client *c, char *id, char tag)
{
    snprintf(id, ID_MAX, "t%d-%c%d", c->idx, tag, ++c->seq);
}

static void remember(struct remembered *ring, int cap, int *n, const struct req *q)
{
    struct remembered *m = &ring[*n % cap];
    m->sku = q->sku;
    m->qty = q->qty;
    m->key_header = q->key_header;
    snprintf(m->id, sizeof m->id, "%s", q->id);
    ++*n;
}

/* A request like a remembered one (same sku, qty, id), to a random instance; false
 * when nothing is remembered. */
static bool recall(struct client *c, const struct remembered *ring, int cap, int n,
                   enum kind kind, struct req *q)
{
    if (n == 0)
        return false;
    const struct remembered *m = &ring[rng_below(&c->rng, n < cap ? n : cap)];
    *q = new_req(c, kind, m->sku);
    q->qty = m->qty;
    q->key_header = m->key_header;
    snprintf(q->id, sizeof q->id, "%s", m->id);
    return true;
}

/* Mostly 1; sometimes more than a segment holds, which takes several segments. */
static long long pick_qty(uint64_t *rng)
{
    int r = rng_below(rng, 100);
    if (r < 78)
        return 1;
    if (r < 92)
        return rng_range(rng, 2, 4);
    return rng_range(rng, 5, 14);
}

/* Send `q` until it gets a definite answer (2xx-4xx), at most `attempts` times,
 * moving to the next instance after a 503 or no answer. Returns the last status. */
static int send_until_definite(struct client *c, struct req *q, int attempts)
{
    int st = -1;
    for (int i = 0; i < attempts; i++) {
        st = send_one(c->run, q);
        if ((st >= 200 && st < 500) || st == -2)
            break;
        h_sleep_ms(rng_range(&c->rng, 30, 120));
        q->inst = (q->inst + 1) % N_INST;
    }
    return st;
}

static bool op_on(const struct client *c, enum kind kind)
{
    return (c->run->ops >> kind) & 1u;
}

/* Send an order or cancel once; with RETRY_UNKNOWN, again under its id after a 503
 * or no answer, until the answer is definite. */
static void send_order_or_cancel(struct client *c, struct req *q)
{
    if (RETRY_UNKNOWN)
        send_until_definite(c, q, 4);
    else
        send_one(c->run, q);
}

static void op_new_order(struct client *c)
{
    struct req q = new_req(c, K_ORDER, rng_below(&c->rng, N_SKUS));
    q.qty = pick_qty(&c->rng);
    new_id(c, q.id, 'o');
    remember(c->orders, ORDER_MEMORY, &c->norders, &q);
    int r = rng_below(&c->rng, 100);
    if (r < 8) {
        send_to_instances(c->run, &q, rng_range(&c->rng, 2, 3));
    } else if (r < 13 && op_on(c, K_CANCEL)) { /* raced by its own cancel */
        struct req pair[2] = {q, q};
        pair[1].kind = K_CANCEL;
        pair[1].inst = rng_below(&c->rng, N_INST);
        send_together(c->run, pair, 2);
    } else {
        send_order_or_cancel(c, &q);
    }
}

static void op_retry_order(struct client *c)
{
    struct req q;
    if (recall(c, c->orders, ORDER_MEMORY, c->norders, K_ORDER, &q))
        send_order_or_cancel(c, &q);
    else
        op_new_order(c);
}

static void op_cancel(struct client *c)
{
    struct req q;
    if (recall(c, c->orders, ORDER_MEMORY, c->norders, K_CANCEL, &q))
        send_order_or_cancel(c, &q);
    else
        op_new_order(c);
}

static void op_restock(struct client *c)
{
    struct req q = new_req(c, K_RESTOCK, rng_below(&c->rng, N_SKUS));
    q.qty = rng_range(&c->rng, 1, 16);
    q.key_header = rng_below(&c->rng, 100) < 30;
    new_id(c, q.id, 'r');
    remember(c->restocks, RESTOCK_MEMORY, &c->nrestocks, &q);
    if (rng_below(&c->rng, 100) < 20)
        send_to_instances(c->run, &q, 2);
    else
        send_until_definite(c, &q, 3);
}

/* A restock sent before, again: applied once in all. */
static void op_restock_again(struct client *c)
{
    struct req q;
    if (recall(c, c->restocks, RESTOCK_MEMORY, c->nrestocks, K_RESTOCK, &q))
        send_one(c->run, &q);
    else
        op_restock(c);
}

static void op_rebalance(struct client *c)
{
    struct req q = new_req(c, K_REBALANCE, rng_below(&c->rng, N_SKUS));
    new_id(c, q.id, 'b');
    if (rng_below(&c->rng, 100) < 20)
        send_to_instances(c->run, &q, 2);
    else
        send_one(c->run, &q);
}

/* A PUT of SKU `s` with a fresh sale drawn from its spec. */
static struct req reset_req(struct client *c, int s)
{
    const struct sku_spec *sp = &specs[s];
    struct req q = new_req(c, K_RESET, s);
    long long spread = sp->stock / 4;
    q.qty = sp->stock + rng_range(&c->rng, -(int)spread, (int)spread);
    q.segments = sp->segs[rng_below(&c->rng, 3)];
    q.hold_ms = rng_range(&c->rng, 0, sp->hold_max);
    bool flip = rng_below(&c->rng, 100) < MODE_FLIP_PERCENT;
    q.mode = (strcmp(sp->mode, "lock") == 0) != flip ? "lock" : "atomic";
    q.key_header = rng_below(&c->rng, 100) < 70;
    new_id(c, q.id, 'p');
    return q;
}

static void op_reset(struct client *c)
{
    int s = rng_below(&c->rng, N_SKUS);
    struct req q = reset_req(c, s);
    pthread_mutex_lock(&c->run->reset_mu[s]);
    send_until_definite(c, &q, 12);
    pthread_mutex_unlock(&c->run->reset_mu[s]);
}

static void op_recreate(struct client *c)
{
    int s = rng_below(&c->rng, N_SKUS);
    struct req del = new_req(c, K_DELETE, s);
    new_id(c, del.id, 'd');
    struct req put = reset_req(c, s);
    pthread_mutex_lock(&c->run->reset_mu[s]);
    send_until_definite(c, &del, 12);
    h_sleep_ms(rng_range(&c->rng, 0, 50)); /* orders meanwhile meet no SKU */
    send_until_definite(c, &put, 12);
    pthread_mutex_unlock(&c->run->reset_mu[s]);
}

/* A hold of 1-3 units for 1-2 s, so that confirms race its expiry; now and then sent
 * to two instances at once. */
static void op_reserve(struct client *c)
{
    struct req q = new_req(c, K_RESERVE, rng_below(&c->rng, N_SKUS));
    q.qty = rng_range(&c->rng, 1, 3);
    q.hold_ms = rng_range(&c->rng, 1, 2);
    new_id(c, q.id, 'v');
    remember(c->holds, RESV_MEMORY, &c->nholds, &q);
    if (rng_below(&c->rng, 100) < 10)
        send_to_instances(c->run, &q, 2);
    else
        send_one(c->run, &q);
}

/* A confirm (or release) of a remembered hold; sometimes both at once, or a confirm to
 * two instances at once. */
static void op_settle_hold(struct client *c, enum kind kind)
{
    struct req q;
    if (!recall(c, c->holds, RESV_MEMORY, c->nholds, kind, &q)) {
        op_reserve(c);
        return;
    }
    int r = rng_below(&c->rng, 100);
    if (r < 10) {
        struct req pair[2] = {q, q};
        pair[1].kind = r < 5 ? K_RELEASE : K_CONFIRM;
        pair[1].inst = rng_below(&c->rng, N_INST);
        send_together(c->run, pair, 2);
    } else {
        send_one(c->run, &q);
    }
}

/* An order under a remembered hold's id (its SKU and qty): the order path does not
 * look at holds, so it may sell under a live hold's id; that hold then cannot be
 * confirmed (409 reservation_conflict) and must not be sold (docs/DESIGN.md
 * "Reservations"). Not remembered as an order: no cancel of it. The hold's confirm
 * follows, to another instance. */
static void op_order_under_hold(struct client *c)
{
    struct req q;
    if (!recall(c, c->holds, RESV_MEMORY, c->nholds, K_ORDER, &q)) {
        op_new_order(c);
        return;
    }
    send_one(c->run, &q);
    q.kind = K_CONFIRM;
    q.inst = (q.inst + 1) % N_INST;
    send_one(c->run, &q);
}

static void op_confirm(struct client *c)
{
    op_settle_hold(c, K_CONFIRM);
}

static void op_release(struct client *c)
{
    op_settle_hold(c, K_RELEASE);
}

/* The mix (per 10 000, cumulative): at ~1500 ops/s about one reset a second and a
 * delete + create every few seconds, spread over the SKUs; the rest new orders. */
static const struct {
    int upto;
    enum kind kind; /* the op runs when run->ops has it; else a new order */
    void (*op)(struct client *);
} mix[] = {
    {800, K_ORDER, op_retry_order},         {2000, K_CANCEL, op_cancel},
    {2900, K_RESTOCK, op_restock},          {3100, K_RESTOCK, op_restock_again},
    {3500, K_REBALANCE, op_rebalance},      {3508, K_RESET, op_reset},
    {3511, K_DELETE, op_recreate},          {4300, K_RESERVE, op_reserve},
    {4900, K_CONFIRM, op_confirm},          {5100, K_RELEASE, op_release},
    {5200, K_RESERVE, op_order_under_hold},
};

/* One op drawn from the mix; no reset or delete after resets_until. */
static void client_step(struct client *c)
{
    bool resets = run_now(c->run) < c->run->resets_until;
    int r = rng_below(&c->rng, 10000);
    for (size_t i = 0; i < sizeof mix / sizeof mix[0]; i++) {
        if (r >= mix[i].upto)
            continue;
        bool late = (mix[i].kind == K_RESET || mix[i].kind == K_DELETE) && !resets;
        if (op_on(c, mix[i].kind) && !late) {
            mix[i].op(c);
            return;
        }
        break;
    }
    op_new_order(c);
}

static void client_main(struct run *run, int idx)
{
    struct client *c = xmalloc(sizeof *c);
    c->run = run;
    c->idx = idx;
    c->rng = rng_seed(run->seed, idx);
    while (run_now(run) < run->end && !log_full(&run->log)) {
        pthread_rwlock_rdlock(&run->pause);
        client_step(c);
        pthread_rwlock_unlock(&run->pause);
        sleep_us(rng_below(&c->rng, PACE_US + 1));
    }
    free(c);
}

/* ---- chaos ------------------------------------------------------------------------- */

static void chaos_log(struct run *run, enum kind kind, long long sent, int status)
{
    if (!log_reserve(&run->log))
        return;
    struct entry e;
    memset(&e, 0, sizeof e);
    e.q.kind = kind;
    e.q.thread = N_CLIENTS;
    e.sent = sent;
    e.recv = run_now(run);
    e.status = status;
    e.body = xstrdup("");
    log_add(&run->log, &e);
}

#if !defined(HISTORY_CLUSTER) && !defined(HISTORY_PG) && !defined(HISTORY_LOCKS)
/* CLIENT KILL every normal client but ours; -1 when the connection failed. */
static int chaos_kill(struct run *run, redisContext *rc)
{
    long long sent = run_now(run);
    redisReply *r = redisCommand(rc, "CLIENT KILL TYPE normal SKIPME yes");
    int killed = r != NULL && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
    if (r != NULL)
        freeReplyObject(r);
    chaos_log(run, K_KILL, sent, killed);
    return r != NULL ? 0 : -1;
}

static void chaos_restart(struct run *run)
{
    long long sent = run_now(run);
    int rc = h_redis_restart(run->redis);
    run->restart_failed = rc != 0;
    chaos_log(run, K_RESTART, sent, rc);
}

/* Kill Redis clients every 200-500 ms until the end; restart Redis once. */
static void chaos_main(struct run *run)
{
    uint64_t rng = rng_seed(run->seed, N_CLIENTS);
    redisContext *rc = NULL;
    bool restarted = false;
    for (;;) {
        long long wake = run_now(run) + rng_range(&rng, 200, 500) * 1000LL;
        if (wake >= run->end)
            break;
        if (wake > run_now(run))
            sleep_us(wake - run_now(run));
        if (!restarted && run_now(run) >= run->restart_at) {
            if (rc != NULL)
                redisFree(rc);
            rc = NULL;
            chaos_restart(run);
            restarted = true;
            continue;
        }
        if (rc == NULL)
            rc = h_redis_connect(run->redis);
        if (rc != NULL && chaos_kill(run, rc) != 0) {
            redisFree(rc);
            rc = NULL;
        }
    }
    if (rc != NULL)
        redisFree(rc);
}

#else
/* The variant's faults until run->end (tests/it_history_cluster.c, it_history_pg.c). */
static void chaos_main(struct run *run);
#endif

static void client_thread(int idx, void *ctx)
{
    client_main(ctx, idx);
}

static void *clients_main(void *ctx)
{
    h_parallel(N_CLIENTS, client_thread, ctx);
    return NULL;
}

/* Run the history: the clients on threads of their own, the chaos on the calling
 * thread. That must be the test's main thread, which outlives the restarted
 * redis-server: the harness gives every child PR_SET_PDEATHSIG, and that signal
 * comes when the *thread* that forked the child ends. Returns 0 or -1. */
static int run_history(struct run *run)
{
    pthread_t th;
    if (pthread_create(&th, NULL, clients_main, run) != 0)
        return -1;
    chaos_main(run);
    pthread_join(th, NULL);
    return 0;
}

/* ---- reading the outcome ----------------------------------------------------------- */

/* An order record, or the body of a 2xx order or cancel. */
struct order_view {
    char id[80], sku[80], status[16];
    long long qty;
    int segment, n;
    int seg[MAX_SEGS];
    long long part[MAX_SEGS];
};

static const char *jstr(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s != NULL ? s : "";
}

/* The "segments" parts of `o` into `v`: 0, or -1 with the reason in `why`. */
static int view_parts(const json_t *o, struct order_view *v, char *why, size_t len)
{
    json_t *parts = json_object_get(o, "segments");
    if (!json_is_array(parts) || json_array_size(parts) < 1 ||
        json_array_size(parts) > MAX_SEGS) {
        snprintf(why, len, "\"segments\" missing, empty or too long");
        return -1;
    }
    v->n = (int)json_array_size(parts);
    long long sum = 0;
    for (int k = 0; k < v->n; k++) {
        json_t *p = json_array_get(parts, (size_t)k);
        v->seg[k] = (int)h_jint(p, "segment");
        v->part[k] = h_jint(p, "qty");
        if (v->seg[k] < 0 || v->seg[k] >= MAX_SEGS || v->part[k] < 1 ||
            (k > 0 && v->seg[k] <= v->seg[k - 1])) {
            snprintf(why, len, "part %d (segment %d, qty %lld) is out of range or order",
                     k, v->seg[k], v->part[k]);
            return -1;
        }
        sum += v->part[k];
    }
    if (sum != v->qty || v->segment != v->seg[0]) {
        snprintf(why, len, "parts sum to %lld for qty %lld, or segment %d is not %d", sum,
                 v->qty, v->segment, v->seg[0]);
        return -1;
    }
    return 0;
}

/* Parse and validate an order record: 0, or -1 with the reason in `why`. */
static int view_parse(const char *text, struct order_view *v, char *why, size_t len)
{
    memset(v, 0, sizeof *v);
    json_t *o = json_loads(text != NULL ? text : "", 0, NULL);
    int rc = -1;
    if (!json_is_object(o)) {
        snprintf(why, len, "not a JSON object");
    } else {
        snprintf(v->id, sizeof v->id, "%s", jstr(o, "order_id"));
        snprintf(v->sku, sizeof v->sku, "%s", jstr(o, "sku"));
        snprintf(v->status, sizeof v->status, "%s", jstr(o, "status"));
        v->qty = h_jint(o, "qty");
        v->segment = (int)h_jint(o, "segment");
        if (strcmp(v->status, "confirmed") != 0 && strcmp(v->status, "cancelled") != 0)
            snprintf(why, len, "status \"%s\"", v->status);
        else if (v->id[0] == '\0' || v->sku[0] == '\0' || v->qty < 1)
            snprintf(why, len, "order_id, sku or qty missing");
        else
            rc = view_parts(o, v, why, len);
    }
    json_decref(o);
    return rc;
}

/* The same sale: everything but the status equal. */
static bool view_same_sale(const struct order_view *a, const struct order_view *b)
{
    if (strcmp(a->id, b->id) != 0 || strcmp(a->sku, b->sku) != 0 || a->qty != b->qty ||
        a->segment != b->segment || a->n != b->n)
        return false;
    for (int k = 0; k < a->n; k++)
        if (a->seg[k] != b->seg[k] || a->part[k] != b->part[k])
            return false;
    return true;
}

/* GET `path` until it is neither a 503 nor unanswered (at most 20 tries over the
 * instances, starting at `first`, and one once run->check_until has passed). Returns
 * the status; *body malloc'd. */
static int get_settled(const struct run *run, int first, const char *path, char **body)
{
    int st = -1;
    *body = NULL;
    for (int i = 0; i < 20 && (i == 0 || run_now(run) < run->check_until); i++) {
        struct h_resp r;
        st = h_req(run->port[(first + i) % N_INST], "GET", path, NULL, NULL, &r);
        free(*body);
        *body = xstrdup(r.body != NULL ? r.body : "");
        h_resp_free(&r);
        if (st > 0 && st != 503)
            break;
        h_sleep_ms(100);
    }
    return st;
}

/* What GET /admin/skus/S says at the end, and when S was last reset. */
struct sku_state {
    int status; /* 200, 404, else unreadable */
    char *text; /* the body, for messages */
    int segments;
    long long initial, remaining, sold, orders, reserved;
    long long stock[MAX_SEGS], seg_sold[MAX_SEGS], seg_reserved[MAX_SEGS];
    long long
        last_reset_recv; /* latest answer to a reset/delete; NEVER if one had none */
};

/* Parse state->text into the fields: 0, or -1 when it is not a SKU. */
static int sku_state_parse(struct sku_state *st)
{
    json_t *j = json_loads(st->text, 0, NULL);
    json_t *stock = json_object_get(j, "segment_stock"),
           *sold = json_object_get(j, "segment_sold"),
           *reserved = json_object_get(j, "segment_reserved");
    st->segments = (int)h_jint(j, "segments");
    st->initial = h_jint(j, "initial");
    st->remaining = h_jint(j, "remaining");
    st->sold = h_jint(j, "sold");
    st->orders = h_jint(j, "orders");
    st->reserved = h_jint(j, "reserved");
    int rc = -1;
    if (st->segments >= 1 && st->segments <= MAX_SEGS && json_is_array(stock) &&
        json_is_array(sold) && json_array_size(stock) == (size_t)st->segments &&
        json_array_size(sold) == (size_t)st->segments) {
        for (int i = 0; i < st->segments; i++) {
            st->stock[i] = json_integer_value(json_array_get(stock, (size_t)i));
            st->seg_sold[i] = json_integer_value(json_array_get(sold, (size_t)i));
            st->seg_reserved[i] =
                json_integer_value(json_array_get(reserved, (size_t)i)); /* 0: none */
        }
        rc = 0;
    }
    json_decref(j);
    return rc;
}

/* ---- the checker ------------------------------------------------------------------- */

/* Every order and cancel of one order id, in send order, and its record now. */
struct group {
    const char *id;
    int sku;
    long long qty;
    struct entry **op;
    int n;
    int rec_status; /* GET /orders/{id}: 200, 404, else unreadable */
    char *rec;
};

struct checker {
    struct run *run;
    struct entry *e; /* the log in send order */
    size_t n;
    struct sku_state sku[N_SKUS];
    struct group *g;
    size_t ng;
    struct entry **gop; /* the groups' op lists */
    FILE *out;          /* the log file; violations are appended as found */
    int violations;
    const char *cat[32];
    int cat_count[32], ncat;
    long long judged[K__COUNT]; /* ops judged against Redis, by kind */
    long long records;          /* order records read back */
    long long ledger_rows;      /* check 6: records found in the ledger */
    long long ledger_drain_ms;  /* check 6: reconciling every SKU took */
    pthread_mutex_t mu;         /* guards `next` while records are fetched */
    size_t next;
};

/* Count a violation of category `cat`: print it with the lines of ops[0..nops-1] (the
 * first SHOW_PER_CATEGORY of a category on stderr, all in the log file). */
static void report(struct checker *k, const char *cat, struct entry *const *ops, int nops,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void report(struct checker *k, const char *cat, struct entry *const *ops, int nops,
                   const char *fmt, ...)
{
    char msg[600], line[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int c = 0;
    while (c < k->ncat && strcmp(k->cat[c], cat) != 0)
        c++;
    if (c == k->ncat && k->ncat < 32)
        k->cat[k->ncat++] = cat;
    bool show = c < 32 && ++k->cat_count[c] <= SHOW_PER_CATEGORY;
    k->violations++;
    if (show)
        fprintf(stderr, "VIOLATION [%s] %s\n", cat, msg);
    fprintf(k->out, "VIOLATION [%s] %s\n", cat, msg);
    for (int i = 0; i < nops; i++) {
        if (show)
            fprintf(stderr, "    %s\n", entry_line(ops[i], line, sizeof line, 300));
        fprintf(k->out, "    %s\n", entry_line(ops[i], line, sizeof line, 1000));
    }
}

/* Sent after every reset and delete of its SKU was answered. */
static bool surely_after_reset(const struct checker *k, const struct entry *e)
{
    return e->sent > k->sku[e->q.sku].last_reset_recv;
}

static bool is_2xx(const struct entry *e)
{
    return e->status >= 200 && e->status < 300;
}

static bool is_4xx(const struct entry *e)
{
    return e->status >= 400 && e->status < 500;
}

/* ---- check 1: every answer on its own ---------------------------------------------- */

static bool code_is(const struct entry *e, const char *a, const char *b)
{
    return strcmp(e->code, a) == 0 || (b != NULL && strcmp(e->code, b) == 0);
}

/* The README's table: may request `e` get this status and code? Our requests are all
 * well-formed and an order id only ever goes with one sku and qty, so a 400 or an
 * order_id_conflict is a fault, not an answer. A write to a "replicated" SKU may also
 * be 503 not_replicated. */
static bool answer_allowed(const struct entry *e)
{
    int st = e->status;
    const char *durability = specs[e->q.sku].durability;
    if (st == 503)
        return code_is(e, "busy", "backend_unavailable") ||
               (durability != NULL && strcmp(durability, "replicated") == 0 &&
                code_is(e, "not_replicated", NULL));
    switch (e->q.kind) {
    case K_ORDER:
        return st == 201 || st == 200 ||
               (st == 409 && code_is(e, "sold_out", "insufficient_stock")) ||
               (st == 404 && code_is(e, "unknown_sku", NULL));
    case K_CANCEL:
        return st == 200 || (st == 404 && code_is(e, "not_found", NULL));
    case K_RESTOCK:
    case K_REBALANCE:
    case K_DELETE:
        return st == 200 || (st == 404 && code_is(e, "unknown_sku", NULL));
    case K_RESET:
        return st == 200 || st == 201; /* reset, created */
    case K_RESERVE:
        return st == 201 || st == 200 ||
               (st == 409 && code_is(e, "sold_out", "insufficient_stock")) ||
               (st == 404 && code_is(e, "unknown_sku", NULL));
    case K_CONFIRM:
        return st == 201 || st == 200 ||
               (st == 410 && code_is(e, "reservation_expired", "reservation_void")) ||
               (st == 409 &&
                code_is(e, "reservation_released", "reservation_conflict")) ||
               (st == 404 && code_is(e, "not_found", NULL));
    case K_RELEASE:
        return st == 200 || (st == 409 && code_is(e, "reservation_confirmed", NULL)) ||
               (st == 410 && code_is(e, "reservation_void", NULL)) ||
               (st == 404 && code_is(e, "not_found", NULL));
    default:
        return true;
    }
}

/* An error answer is JSON {"error": "<code>", "detail": "..."}. */
static bool error_body_ok(const struct entry *e)
{
    json_t *j = json_loads(e->body, 0, NULL);
    bool ok = e->json && json_is_object(j) &&
              json_is_string(json_object_get(j, "error")) &&
              json_is_string(json_object_get(j, "detail")) && jstr(j, "error")[0] != '\0';
    json_decref(j);
    return ok;
}

/* A 2xx order or cancel body is a record of the request, in a fitting status. */
static void check_record_body(struct checker *k, struct entry *e)
{
    struct order_view v;
    char why[200] = "";
    bool cancel = e->q.kind == K_CANCEL;
    if (view_parse(e->body, &v, why, sizeof why) == 0) {
        if (strcmp(v.id, e->q.id) != 0 || strcmp(v.sku, specs[e->q.sku].name) != 0 ||
            v.qty != e->q.qty)
            snprintf(why, sizeof why, "order_id/sku/qty are not the request's");
        else if ((cancel || e->status == 201) &&
                 strcmp(v.status, cancel ? "cancelled" : "confirmed") != 0)
            snprintf(why, sizeof why, "status \"%s\" after a %d %s", v.status, e->status,
                     kind_name[e->q.kind]);
    }
    if (why[0] != '\0')
        report(k, cancel ? "cancel-body" : "order-body", &e, 1, "%d body: %s", e->status,
               why);
}

static void check_answer(struct checker *k, struct entry *e)
{
    if (e->q.kind >= K_KILL || e->q.thread < 0)
        return;
    if (e->status < 0) {
        report(k, "no-answer", &e, 1, "no HTTP answer");
        return;
    }
    if (!answer_allowed(e))
        report(k, "status", &e, 1, "%d %s is not an answer a valid %s may get", e->status,
               e->code, kind_name[e->q.kind]);
    if (e->status >= 400 && !error_body_ok(e))
        report(k, "error-body", &e, 1, "a %d must be a JSON {\"error\",\"detail\"}",
               e->status);
    if (e->status == 503 && !e->retry_after)
        report(k, "retry-after", &e, 1, "a 503 without Retry-After");
    if (is_2xx(e) &&
        (e->q.kind == K_ORDER || e->q.kind == K_CANCEL || e->q.kind == K_CONFIRM))
        check_record_body(k, e);
}

/* ---- check 2: each SKU adds up ----------------------------------------------------- */

static void read_skus(struct checker *k)
{
    for (int s = 0; s < N_SKUS; s++) {
        char path[128];
        snprintf(path, sizeof path, "/admin/skus/%s", specs[s].name);
        struct sku_state *st = &k->sku[s];
        st->status = get_settled(k->run, s, path, &st->text);
        if (st->status == 200 && sku_state_parse(st) != 0)
            st->status = -1;
    }
}

static void check_sku(struct checker *k, int s)
{
    const struct sku_state *st = &k->sku[s];
    const char *name = specs[s].name;
    if (st->status != 200) {
        if (st->status != 404)
            report(k, "sku-audit", NULL, 0, "%s: GET /admin/skus answered %d %.300s",
                   name, st->status, st->text);
        return;
    }
    long long stock = 0, sold = 0, reserved = 0;
    for (int i = 0; i < st->segments; i++) {
        if (st->stock[i] < 0 || st->seg_sold[i] < 0 || st->seg_reserved[i] < 0)
            report(k, "sku-audit", NULL, 0,
                   "%s: segment %d has stock %lld, sold %lld, reserved %lld", name, i,
                   st->stock[i], st->seg_sold[i], st->seg_reserved[i]);
        stock += st->stock[i];
        sold += st->seg_sold[i];
        reserved += st->seg_reserved[i];
    }
    /* Reservations: remaining + reserved + sold = initial. */
    if (st->remaining + st->reserved + st->sold != st->initial ||
        stock != st->remaining || sold != st->sold || reserved != st->reserved)
        report(k, "sku-audit", NULL, 0,
               "%s: remaining %lld + reserved %lld + sold %lld vs initial %lld; "
               "sum(segment_stock) %lld, sum(segment_reserved) %lld, sum(segment_sold) "
               "%lld: %.600s",
               name, st->remaining, st->reserved, st->sold, st->initial, stock, reserved,
               sold, st->text);
}

/* ---- check 3: the records against each SKU ----------------------------------------- */

static int by_id_then_time(const void *a, const void *b)
{
    const struct entry *x = *(struct entry *const *)a, *y = *(struct entry *const *)b;
    int c = strcmp(x->q.id, y->q.id);
    return c != 0 ? c : x->sent < y->sent ? -1 : x->sent > y->sent;
}

/* Group the orders and cancels of the log by order id. */
static void build_groups(struct checker *k)
{
    size_t m = 0;
    k->gop = xmalloc((k->n + 1) * sizeof *k->gop);
    for (size_t i = 0; i < k->n; i++)
        if (k->e[i].q.kind == K_ORDER || k->e[i].q.kind == K_CANCEL ||
            k->e[i].q.kind == K_RESERVE || k->e[i].q.kind == K_CONFIRM ||
            k->e[i].q.kind == K_RELEASE)
            k->gop[m++] = &k->e[i];
    qsort(k->gop, m, sizeof *k->gop, by_id_then_time);
    k->g = xmalloc((m + 1) * sizeof *k->g);
    for (size_t i = 0; i < m;) {
        struct group *g = &k->g[k->ng++];
        g->id = k->gop[i]->q.id;
        g->sku = k->gop[i]->q.sku;
        g->qty = k->gop[i]->q.qty;
        g->op = &k->gop[i];
        while (i < m && strcmp(k->gop[i]->q.id, g->id) == 0) {
            g->n++;
            i++;
        }
    }
}

/* h_parallel body: GET /orders/{id} for the groups, shared out one at a time. */
static void fetch_records(int idx, void *ctx)
{
    struct checker *k = ctx;
    for (;;) {
        pthread_mutex_lock(&k->mu);
        size_t i = k->next++;
        pthread_mutex_unlock(&k->mu);
        if (i >= k->ng)
            return;
        char path[128];
        snprintf(path, sizeof path, "/orders/%s", k->g[i].id);
        k->g[i].rec_status = get_settled(k->run, idx, path, &k->g[i].rec);
    }
}

/* What the confirmed records of one SKU add up to. */
struct record_sums {
    long long qty, count, seg[MAX_SEGS];
};

/* Add group g's record to `sums`, reporting a record that cannot be there. */
static void add_record(struct checker *k, struct group *g, struct record_sums *sums)
{
    struct order_view v;
    char why[200];
    if (g->rec_status != 200) {
        if (g->rec_status != 404)
            report(k, "record", g->op, g->n, "GET /orders/%s answered %d", g->id,
                   g->rec_status);
        return;
    }
    k->records++;
    if (view_parse(g->rec, &v, why, sizeof why) != 0) {
        report(k, "record", g->op, g->n, "record %.300s: %s", g->rec, why);
        return;
    }
    int s = sku_index(v.sku);
    if (s < 0 || k->sku[s].status != 200 || strcmp(v.id, g->id) != 0) {
        report(k, "record", g->op, g->n, "record %.300s: %s", g->rec,
               s < 0 || strcmp(v.id, g->id) != 0 ? "not an order of this history"
                                                 : "its SKU was deleted");
        return;
    }
    if (strcmp(v.status, "confirmed") != 0)
        return;
    sums[s].qty += v.qty;
    sums[s].count++;
    for (int p = 0; p < v.n; p++) {
        if (v.seg[p] >= k->sku[s].segments)
            report(k, "record", g->op, g->n, "record %.300s: segment %d of %d", g->rec,
                   v.seg[p], k->sku[s].segments);
        else
            sums[s].seg[v.seg[p]] += v.part[p];
    }
}

/* A command to the node at `port`, following one MOVED: the reply (caller frees) or
 * NULL. For the explanations below, which read Redis behind the service's back. */
static redisReply *diag_command(int port, const char *fmt, const char *a, const char *b)
{
    redisReply *r = h_port_command(port, fmt, a, b);
    if (r != NULL && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "MOVED ", 6) == 0) {
        const char *colon = strrchr(r->str, ':');
        int to = colon != NULL ? atoi(colon + 1) : 0;
        freeReplyObject(r);
        r = to > 0 ? h_port_command(to, fmt, a, b) : NULL;
    }
    return r;
}

/* One line about `what`: the fields of a hash reply, or what it was. */
static void diag_hash(char *out, size_t size, const redisReply *r)
{
    size_t n = 0;
    out[0] = '\0';
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        snprintf(out, size, "%s",
                 r != NULL && r->type == REDIS_REPLY_ERROR ? r->str : "?");
        return;
    }
    for (size_t i = 0; i + 1 < r->elements && n + 1 < size; i += 2)
        n += (size_t)snprintf(out + n, size - n, "%s%s=%.200s", i > 0 ? " " : "",
                              r->element[i]->str, r->element[i + 1]->str);
}

static struct group *group_of(struct checker *k, const char *id)
{
    size_t lo = 0, hi = k->ng;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(k->g[mid].id, id);
        if (c == 0)
            return &k->g[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The part a confirmed record `rec` of SKU s names for segment i (0: none). */
static long long record_part(struct checker *k, int s, const struct group *g, int i)
{
    struct order_view v;
    char why[200];
    long long q = 0;
    if (g->rec_status != 200 || view_parse(g->rec, &v, why, sizeof why) != 0 ||
        strcmp(v.status, "confirmed") != 0 || sku_index(v.sku) != s)
        return 0;
    (void)k;
    for (int p = 0; p < v.n; p++)
        if (v.seg[p] == i)
            q += v.part[p];
    return q;
}

/* One id that segment i's hashes and the records disagree on: the line, its claim
 * (the record's hash, read from Redis) and its requests, to the log and stderr. */
static void explain_id(struct checker *k, int port, const char *id, const char *what)
{
    struct group *g = group_of(k, id);
    char claim[600], msg[1600], line[1200];
    redisReply *c = diag_command(port, "HGETALL inv:order:{%s}%s", id, "");
    diag_hash(claim, sizeof claim, c);
    if (c != NULL)
        freeReplyObject(c);
    snprintf(msg, sizeof msg, "    %s %s: record %d %.300s; its hash in Redis {%s}", id,
             what, g != NULL ? g->rec_status : 0,
             g != NULL && g->rec != NULL ? g->rec : "(not in the log)", claim);
    fprintf(stderr, "%s\n", msg);
    fprintf(k->out, "%s\n", msg);
    for (int o = 0; g != NULL && o < g->n; o++) {
        fprintf(stderr, "        %s\n", entry_line(g->op[o], line, sizeof line, 300));
        fprintf(k->out, "        %s\n", entry_line(g->op[o], line, sizeof line, 1000));
    }
}

/* Segment i of SKU s sold other than its confirmed records say: name the ids its
 * orders and parts hashes hold (read from Redis at the end) with no confirmed record
 * naming that part, and the confirmed records naming a part the hashes do not hold.
 * Not a violation of its own: it says which ids the record-sums one is about. */
static void explain_segment(struct checker *k, int s, int i)
{
    json_t *j = json_loads(k->sku[s].text, 0, NULL);
    const char *placed = json_string_value(json_object_get(j, "placed_as"));
    const char *node =
        json_string_value(json_array_get(json_object_get(j, "segment_node"), (size_t)i));
    const char *colon = node != NULL ? strrchr(node, ':') : NULL;
    int port = colon != NULL ? atoi(colon + 1) : 0;
    redisReply *hash[2] = {NULL, NULL};
    static const char *const names[2] = {"orders", "parts"};
    for (int h = 0; placed != NULL && port > 0 && h < 2; h++) {
        char key[200], what[300];
        snprintf(key, sizeof key, "inv:{%s:%d}:%s", placed, i, names[h]);
        hash[h] = diag_command(port, "HGETALL %s%s", key, "");
        if (hash[h] == NULL || hash[h]->type != REDIS_REPLY_ARRAY) {
            fprintf(stderr, "    (HGETALL %s: %s)\n", key,
                    hash[h] != NULL && hash[h]->type == REDIS_REPLY_ERROR ? hash[h]->str
                                                                          : "no answer");
            continue;
        }
        for (size_t e = 0; e + 1 < hash[h]->elements; e += 2) {
            const char *id = hash[h]->element[e]->str;
            long long q = atoll(hash[h]->element[e + 1]->str);
            struct group *g = group_of(k, id);
            long long named = g != NULL ? record_part(k, s, g, i) : 0;
            if (named == q)
                continue;
            snprintf(what, sizeof what, "is in %s with %lld units, its record names %lld",
                     key, q, named);
            explain_id(k, port, id, what);
        }
    }
    for (size_t n = 0; port > 0 && n < k->ng; n++) {
        long long named = record_part(k, s, &k->g[n], i);
        bool held = false;
        for (int h = 0; named > 0 && h < 2; h++)
            for (size_t e = 0; hash[h] != NULL && hash[h]->type == REDIS_REPLY_ARRAY &&
                               e + 1 < hash[h]->elements;
                 e += 2)
                held |= strcmp(hash[h]->element[e]->str, k->g[n].id) == 0;
        if (named > 0 && !held) {
            char what[160];
            snprintf(what, sizeof what,
                     "has a confirmed record naming %lld units of segment %d, which "
                     "holds no such id",
                     named, i);
            explain_id(k, port, k->g[n].id, what);
        }
    }
    for (int h = 0; h < 2; h++)
        if (hash[h] != NULL)
            freeReplyObject(hash[h]);
    json_decref(j);
}

static void check_records_vs_skus(struct checker *k)
{
    struct record_sums sums[N_SKUS];
    memset(sums, 0, sizeof sums);
    for (size_t i = 0; i < k->ng; i++)
        add_record(k, &k->g[i], sums);
    for (int s = 0; s < N_SKUS; s++) {
        const struct sku_state *st = &k->sku[s];
        if (st->status != 200)
            continue;
        if (sums[s].qty != st->sold || sums[s].count != st->orders)
            report(k, "record-sums", NULL, 0,
                   "%s: confirmed records hold %lld units in %lld orders; the SKU says "
                   "sold %lld, orders %lld",
                   specs[s].name, sums[s].qty, sums[s].count, st->sold, st->orders);
        for (int i = 0; i < st->segments; i++)
            if (sums[s].seg[i] != st->seg_sold[i]) {
                report(k, "record-sums", NULL, 0,
                       "%s segment %d: confirmed records took %lld, segment_sold %lld",
                       specs[s].name, i, sums[s].seg[i], st->seg_sold[i]);
                explain_segment(k, s, i);
            }
    }
}

/* ---- check 4: each order id -------------------------------------------------------- */

/* Another order request of g sent before `e` was answered: what a 200 replays. */
static bool sent_before_answer(const struct group *g, const struct entry *e)
{
    for (int i = 0; i < g->n; i++)
        if (g->op[i] != e && g->op[i]->sent < e->recv &&
            (g->op[i]->q.kind == K_ORDER || g->op[i]->q.kind == K_CONFIRM))
            return true; /* a confirm of a hold of the id makes its order too */
    return false;
}

/* An order of g's id sent before `e` was answered. */
static bool ordered_before(const struct group *g, const struct entry *e)
{
    for (int i = 0; i < g->n; i++)
        if (g->op[i]->q.kind == K_ORDER && g->op[i]->sent < e->recv)
            return true;
    return false;
}

/* A judged 2xx of an order against the record (parsed into `rec`, NULL when absent)
 * and against `first`, the first judged 2xx body of the id that parsed (NULL: none
 * yet). A record cancelled without a cancel is check_cancel_cause's. */
static void check_order_vs_record(struct checker *k, struct group *g, struct entry *e,
                                  const struct order_view *rec,
                                  const struct order_view *first)
{
    struct order_view v;
    char why[200];
    if (rec == NULL) {
        report(k, "order-lost", &e, 1, "a %d order has no record (GET answered %d)",
               e->status, g->rec_status);
        return;
    }
    if (strcmp(rec->sku, specs[g->sku].name) != 0 || rec->qty != g->qty)
        report(k, "order-record", &e, 1, "the record is %.300s", g->rec);
    if (view_parse(e->body, &v, why, sizeof why) != 0)
        return; /* reported by check 1 */
    if (e->status == 201 && !view_same_sale(&v, rec))
        report(k, "order-record", &e, 1, "the 201 body is not the record %.300s", g->rec);
    else if (first != NULL && !view_same_sale(&v, first))
        report(k, "order-segments", &e, 1, "segments differ from an earlier 2xx");
}

/* The orders of g: replays need an earlier request; the judged ones need the record,
 * and at most one of them is a 201. */
static void check_orders_of(struct checker *k, struct group *g,
                            const struct order_view *rec)
{
    struct entry *created = NULL;
    struct order_view first;
    bool have_first = false;
    char why[200];
    for (int i = 0; i < g->n; i++) {
        struct entry *e = g->op[i];
        if (e->q.kind != K_ORDER || !is_2xx(e))
            continue;
        if (e->status == 200 && !sent_before_answer(g, e))
            report(k, "replay-first", &e, 1,
                   "200 (replay) though no other request of %s was sent before", g->id);
        if (!surely_after_reset(k, e))
            continue;
        k->judged[K_ORDER]++;
        if (e->status == 201 && created != NULL) {
            struct entry *both[2] = {created, e};
            report(k, "double-201", both, 2, "two 201s for %s in one sale", g->id);
        }
        if (e->status == 201 && created == NULL)
            created = e;
        check_order_vs_record(k, g, e, rec, have_first ? &first : NULL);
        if (!have_first)
            have_first = view_parse(e->body, &first, why, sizeof why) == 0;
    }
}

/* A judged order of g answered 2xx before `e` was sent. */
static struct entry *confirmed_before(const struct checker *k, const struct group *g,
                                      const struct entry *e)
{
    for (int i = 0; i < g->n; i++) {
        struct entry *o = g->op[i];
        if (o->q.kind == K_ORDER && is_2xx(o) && o->recv < e->sent &&
            surely_after_reset(k, o))
            return o;
    }
    return NULL;
}

/* The cancels of g: a judged 200 left the record cancelled with the order's qty; a
 * judged 404 must not follow a confirmed order. */
static void check_cancels_of(struct checker *k, struct group *g,
                             const struct order_view *rec)
{
    for (int i = 0; i < g->n; i++) {
        struct entry *e = g->op[i];
        if (e->q.kind != K_CANCEL || !surely_after_reset(k, e) ||
            (e->status != 200 && e->status != 404))
            continue;
        k->judged[K_CANCEL]++;
        struct entry *o = e->status == 404 ? confirmed_before(k, g, e) : NULL;
        if (o != NULL) {
            struct entry *both[2] = {o, e};
            report(k, "cancel-404", both, 2, "404 to a cancel of a confirmed order");
        }
        if (e->status == 200 &&
            (rec == NULL || strcmp(rec->status, "cancelled") != 0 || rec->qty != g->qty))
            report(k, "cancel-lost", &e, 1, "after this 200 the record is %.300s",
                   rec != NULL ? g->rec : "gone");
    }
}

/* A cancelled record needs a cancel answered after the order was first sent. */
static void check_cancel_cause(struct checker *k, struct group *g,
                               const struct order_view *rec)
{
    if (rec == NULL || strcmp(rec->status, "cancelled") != 0)
        return;
    long long first_order = NEVER;
    for (int i = 0; i < g->n; i++)
        if (g->op[i]->q.kind == K_ORDER && g->op[i]->sent < first_order)
            first_order = g->op[i]->sent;
    for (int i = 0; i < g->n; i++)
        if (g->op[i]->q.kind == K_CANCEL && g->op[i]->recv > first_order)
            return;
    report(k, "phantom-cancel", g->op, g->n, "record %.300s, but no cancel could do it",
           g->rec);
}

/* The hold of g's id: a confirm's 2xx needs the record (confirmed, the hold's qty),
 * at most one 201; an expiry (410) and a sale never both in one sale; a release that
 * gave the units back ("released") and a sale never both; a confirmed record needs a
 * confirm that may have made it. Judged: requests surely after the last reset. */
static void check_holds_of(struct checker *k, struct group *g,
                           const struct order_view *rec)
{
    struct entry *created = NULL, *sold = NULL, *expired = NULL, *released = NULL,
                 *placed = NULL;
    bool may_sell = false, hold = false;
    long long x = 0; /* the hold's expiry, Redis's clock (ms) */
    long long first_confirm_ms = 0;
    for (int i = 0; i < g->n; i++) {
        struct entry *e = g->op[i];
        hold |= e->q.kind == K_RESERVE;
        if (e->q.kind == K_RESERVE && is_2xx(e) && x == 0) {
            json_t *j = json_loads(e->body, 0, NULL);
            x = h_jint(j, "expires_at_ms");
            placed = e;
            json_decref(j);
        }
        if (e->q.kind == K_CONFIRM && (is_2xx(e) || e->status < 0 || e->status == 503))
            may_sell = true;
        if ((e->q.kind != K_CONFIRM && e->q.kind != K_RELEASE) ||
            !surely_after_reset(k, e))
            continue;
        k->judged[e->q.kind]++;
        if (e->q.kind == K_RELEASE) {
            if (e->status == 200 && strstr(e->body, "\"status\":\"released\"") != NULL)
                released = e;
            continue;
        }
        if (e->status == 410 && code_is(e, "reservation_expired", NULL))
            expired = e;
        /* The id's record an order's: only an order of the id can have made it. */
        if (e->status == 409 && code_is(e, "reservation_conflict", NULL) &&
            !ordered_before(g, e))
            report(k, "resv-conflict-no-order", &e, 1,
                   "409 reservation_conflict though no order of %s was sent", g->id);
        /* Expiry is exact by Redis's clock, this host's: a confirm sent past it cannot
         * sell, and one answered before it cannot be refused as expired. */
        long long sent_ms = k->run->wall0_ms + e->sent / 1000,
                  recv_ms = k->run->wall0_ms + e->recv / 1000;
        struct entry *pair[2] = {placed, e};
        /* A 200 replays a sale made by an earlier confirm: judge the first one sent. */
        if (e->q.kind == K_CONFIRM && first_confirm_ms == 0)
            first_confirm_ms = sent_ms;
        long long sale_ms = e->status == 200 ? first_confirm_ms : sent_ms;
        if (x > 0 && is_2xx(e) && sale_ms > x + EXPIRY_SLACK_MS)
            report(k, "resv-sold-late", pair, 2,
                   "%d: a confirm sent %lld ms after the expiry", e->status, sale_ms - x);
        if (x > 0 && e == expired && recv_ms < x - EXPIRY_SLACK_MS)
            report(k, "resv-expired-early", pair, 2,
                   "refused as expired %lld ms before the expiry", x - recv_ms);
        if (!is_2xx(e))
            continue;
        sold = e;
        if (e->status == 201 && created != NULL) {
            struct entry *both[2] = {created, e};
            report(k, "resv-double-201", both, 2, "two 201 confirms for %s", g->id);
        }
        if (e->status == 201)
            created = e;
        if (rec == NULL || strcmp(rec->status, "confirmed") != 0 || rec->qty != g->qty)
            report(k, "resv-lost", &e, 1, "a %d confirm, and the record is %.300s",
                   e->status, rec != NULL ? g->rec : "gone");
    }
    if (sold != NULL && expired != NULL) {
        struct entry *both[2] = {sold, expired};
        report(k, "resv-expired-sold", both, 2, "%s sold and expired", g->id);
    }
    if (sold != NULL && released != NULL) {
        struct entry *both[2] = {sold, released};
        report(k, "resv-released-sold", both, 2, "%s sold and released", g->id);
    }
    bool ordered = false; /* an order under the hold's id may make the record */
    struct entry *order201 = NULL;
    for (int i = 0; i < g->n; i++) {
        struct entry *e = g->op[i];
        ordered |= e->q.kind == K_ORDER;
        if (e->q.kind == K_ORDER && e->status == 201 && surely_after_reset(k, e))
            order201 = e;
    }
    /* An order that made the id's record (201) and a confirm that sold (2xx): the
     * confirm replayed an order it never made, or sold a second time under the id. */
    if (sold != NULL && order201 != NULL) {
        struct entry *both[2] = {order201, sold};
        report(k, "resv-sold-under-order", both, 2,
               "%s: an order's 201 and a confirm's %d", g->id, sold->status);
    }
    if (rec != NULL && !may_sell && hold && !ordered)
        report(k, "resv-phantom-sale", g->op, g->n,
               "record %.300s, but no confirm could make it", g->rec);
}

static void check_group(struct checker *k, struct group *g)
{
    struct order_view rec;
    char why[200];
    bool have = g->rec_status == 200 && view_parse(g->rec, &rec, why, sizeof why) == 0;
    check_holds_of(k, g, have ? &rec : NULL);
    check_orders_of(k, g, have ? &rec : NULL);
    check_cancels_of(k, g, have ? &rec : NULL);
    check_cancel_cause(k, g, have ? &rec : NULL);
}

/* ---- check 5: initial stock within what the restocks allow ------------------------- */

static bool is_reset(const struct entry *e, int s)
{
    return (e->q.kind == K_RESET || e->q.kind == K_DELETE) && e->q.sku == s;
}

/* The latest answer to a reset or delete of each SKU (NEVER when one had none). */
static void find_last_resets(struct checker *k)
{
    for (int s = 0; s < N_SKUS; s++)
        k->sku[s].last_reset_recv = 0;
    for (size_t i = 0; i < k->n; i++) {
        const struct entry *e = &k->e[i];
        if (e->q.kind != K_RESET && e->q.kind != K_DELETE)
            continue;
        long long t = e->status < 0 ? NEVER : e->recv;
        if (t > k->sku[e->q.sku].last_reset_recv)
            k->sku[e->q.sku].last_reset_recv = t;
    }
}

/* The resets of s that may be in force: from the last one back to the latest that
 * answered 200, skipping those refused with a 4xx. Returns how many (<= cap). */
static int reset_candidates(struct checker *k, int s, struct entry **cand, int cap)
{
    int n = 0;
    for (size_t i = k->n; i-- > 0 && n < cap;) {
        struct entry *e = &k->e[i];
        if (!is_reset(e, s) || is_4xx(e))
            continue;
        cand[n++] = e;
        if (is_2xx(e))
            break;
    }
    return n;
}

/* One restock key of a SKU: its qty and how its requests went. */
struct restock_key {
    const char *id;
    long long qty;
    int requests;
    bool any_200, all_4xx, all_judged;
    long long last_recv; /* NEVER when a request had no answer */
};

/* Fold the restocks of s into keys (at most `cap`); returns how many. */
static int restock_keys(struct checker *k, int s, struct restock_key *keys, int cap)
{
    int n = 0;
    for (size_t i = 0; i < k->n; i++) {
        const struct entry *e = &k->e[i];
        if (e->q.kind != K_RESTOCK || e->q.sku != s)
            continue;
        int j = 0;
        while (j < n && strcmp(keys[j].id, e->q.id) != 0)
            j++;
        if (j == n) {
            if (n == cap)
                continue;
            keys[n++] = (struct restock_key){e->q.id, e->q.qty, 0, false, true, true, 0};
        }
        keys[j].requests++;
        keys[j].any_200 |= e->status == 200;
        keys[j].all_4xx &= is_4xx(e);
        keys[j].all_judged &= surely_after_reset(k, e);
        long long t = e->status < 0 ? NEVER : e->recv;
        if (t > keys[j].last_recv)
            keys[j].last_recv = t;
    }
    return n;
}

/* The bounds of initial(s) when reset `c` is in force. */
static void initial_bounds(const struct restock_key *keys, int nkeys,
                           const struct entry *c, long long *lo, long long *hi)
{
    *lo = *hi = c->q.qty;
    for (int j = 0; j < nkeys; j++) {
        if (keys[j].any_200 && keys[j].all_judged)
            *lo += keys[j].qty;
        if (!keys[j].all_4xx && keys[j].last_recv > c->sent)
            *hi += keys[j].qty;
    }
}

/* For a message: the candidate resets, then the restocks of s answered after the
 * earliest of them was sent, not refused with a 4xx, whose key was sent more than once
 * or that were not answered 200 (the ones that can make initial wrong). Returns how
 * many (<= cap). */
static int restock_suspects(struct checker *k, int s, const struct restock_key *keys,
                            int nkeys, struct entry *const *cand, int nc,
                            struct entry **ops, int cap)
{
    int n = 0;
    long long from = NEVER;
    for (int i = 0; i < nc && n < cap; i++) {
        ops[n++] = cand[i];
        from = cand[i]->sent < from ? cand[i]->sent : from;
    }
    for (size_t i = 0; i < k->n && n < cap; i++) {
        struct entry *e = &k->e[i];
        if (e->q.kind != K_RESTOCK || e->q.sku != s || e->recv <= from)
            continue;
        int j = 0;
        while (j < nkeys && strcmp(keys[j].id, e->q.id) != 0)
            j++;
        if (j < nkeys && !is_4xx(e) && (keys[j].requests > 1 || e->status != 200))
            ops[n++] = e;
    }
    return n;
}

static void check_initial(struct checker *k, int s)
{
    struct entry *cand[64];
    int nc = reset_candidates(k, s, cand, 64), puts = 0;
    for (int i = 0; i < nc; i++)
        puts += cand[i]->q.kind == K_RESET;
    int status = k->sku[s].status;
    if ((puts == 0 && status == 200) || (puts == nc && status == 404))
        report(k, "sku-exists", cand, nc, "%s: GET /admin/skus answered %d after these",
               specs[s].name, status);
    if (status != 200 || puts == 0)
        return;
    int cap = (int)(k->n < 100000 ? k->n + 1 : 100000);
    struct restock_key *keys = xmalloc((size_t)cap * sizeof *keys);
    int nkeys = restock_keys(k, s, keys, cap);
    long long lo = NEVER, hi = -1;
    for (int i = 0; i < nc; i++) {
        long long l, h;
        if (cand[i]->q.kind != K_RESET)
            continue;
        initial_bounds(keys, nkeys, cand[i], &l, &h);
        lo = l < lo ? l : lo;
        hi = h > hi ? h : hi;
    }
    for (int j = 0; j < nkeys; j++)
        if (keys[j].any_200 && keys[j].all_judged)
            k->judged[K_RESTOCK]++;
    if (k->sku[s].initial < lo || k->sku[s].initial > hi) {
        struct entry *ops[64];
        int nops = restock_suspects(k, s, keys, nkeys, cand, nc, ops, 64);
        report(k, "initial", ops, nops,
               "%s: initial %lld outside [%lld, %lld] (the reset in force plus the "
               "restocks surely / possibly applied, each request id once); shown: the "
               "candidate resets, then restocks sent again or not answered 200",
               specs[s].name, k->sku[s].initial, lo, hi);
    }
    free(keys);
}

/* ---- the log file ------------------------------------------------------------------ */

/* Where the log goes: $HISTORY_LOG_DIR/history-<seed>.log, else a new directory under
 * $TMPDIR, returned in *tmp_dir (malloc'd) so that a passing run can remove it.
 * Returns the malloc'd path, NULL when no directory could be made. */
static char *log_file_path(unsigned long long seed, char **tmp_dir)
{
    char dir[512], path[600];
    const char *keep = getenv("HISTORY_LOG_DIR");
    *tmp_dir = NULL;
    if (keep != NULL && keep[0] != '\0') {
        snprintf(dir, sizeof dir, "%s", keep);
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return NULL;
    } else {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/inv-history-XXXXXX",
                 base != NULL && base[0] != '\0' ? base : "/tmp");
        if (mkdtemp(dir) == NULL)
            return NULL;
        *tmp_dir = xstrdup(dir);
    }
    snprintf(path, sizeof path, "%s/history-%llu.log", dir, seed);
    return xstrdup(path);
}

static void write_log_head(struct checker *k)
{
    const struct run *run = k->run;
    char line[8192];
    fprintf(k->out, "# " HISTORY_NAME " seed=%llu seconds=%d instances=%d,%d,%d\n",
            run->seed, run->seconds, run->port[0], run->port[1], run->port[2]);
    fprintf(k->out, "# times in ms since the start; resets until %.3f, end %.3f\n",
            run->resets_until / 1000.0, run->end / 1000.0);
    for (size_t i = 0; i < k->n; i++)
        fprintf(k->out, "%s\n", entry_line(&k->e[i], line, sizeof line, 4096));
    fprintf(k->out, "# ---- violations ----\n");
}

static void write_log_tail(struct checker *k)
{
    fprintf(k->out, "# ---- SKUs at the end ----\n");
    for (int s = 0; s < N_SKUS; s++)
        fprintf(k->out, "%s: %d %s (last reset answered at %.3f ms)\n", specs[s].name,
                k->sku[s].status, k->sku[s].text ? k->sku[s].text : "",
                k->sku[s].last_reset_recv == NEVER ? -1.0
                                                   : k->sku[s].last_reset_recv / 1000.0);
    /* On a cluster, each SKU's meta hash as Redis holds it (a pending reset or
     * adjust that keeps answering busy shows here). */
    for (int s = 0; s < N_SKUS; s++) {
        json_t *j = k->sku[s].text != NULL ? json_loads(k->sku[s].text, 0, NULL) : NULL;
        const char *node =
            json_string_value(json_array_get(json_object_get(j, "segment_node"), 0));
        const char *colon = node != NULL ? strrchr(node, ':') : NULL;
        if (colon != NULL) {
            char meta[1200];
            redisReply *r = diag_command(atoi(colon + 1), "HGETALL inv:sku:{%s}%s",
                                         specs[s].name, "");
            diag_hash(meta, sizeof meta, r);
            if (r != NULL)
                freeReplyObject(r);
            fprintf(k->out, "%s meta: {%s}\n", specs[s].name, meta);
        }
        json_decref(j);
    }
    fprintf(k->out, "# ---- order records at the end ----\n");
    for (size_t i = 0; i < k->ng; i++)
        fprintf(k->out, "%s: %d %s\n", k->g[i].id, k->g[i].rec_status,
                k->g[i].rec ? k->g[i].rec : "");
}

/* ---- check 6: the order ledger (unless HISTORY_LEDGER=0) --------------------------- */

/* GET /admin/skus/S/reconcile until drift 0 (within LEDGER_DRAIN_MS: the sinks copy
 * every 200 ms); *epoch the SKU's epoch. The last drift, or -1 unreadable. */
#define LEDGER_DRAIN_MS 30000
static long long ledger_drain(struct checker *k, int s, long long *epoch, char **body)
{
    char path[128];
    snprintf(path, sizeof path, "/admin/skus/%s/reconcile", specs[s].name);
    long long drift = -1, until = h_now_ms() + LEDGER_DRAIN_MS;
    do {
        struct h_resp r;
        drift = -1;
        if (h_req(k->run->port[0], "GET", path, NULL, NULL, &r) == 200) {
            json_t *o = h_resp_json(&r);
            drift =
                json_is_integer(json_object_get(o, "drift")) ? h_jint(o, "drift") : -1;
            *epoch = h_jint(o, "epoch");
            json_decref(o);
        }
        free(*body);
        *body = r.body != NULL ? xstrdup(r.body) : NULL;
        h_resp_free(&r);
        if (drift != 0)
            h_sleep_ms(200);
    } while (drift != 0 && h_now_ms() < until);
    return drift;
}

static int ledger_id_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The ledger of SKU s, epoch `epoch`, against its records in Redis (fetched by check
 * 3): one `orders` row per record, with the record's qty and status, and no other. */
static void ledger_vs_records(struct checker *k, PGconn *pg, int s, long long epoch)
{
    char ep[32];
    snprintf(ep, sizeof ep, "%lld", epoch);
    const char *params[2] = {specs[s].name, ep};
    PGresult *r = PQexecParams(pg,
                               "SELECT order_id, qty, status FROM ledger.orders"
                               " WHERE sku = $1 AND epoch = $2::bigint ORDER BY order_id",
                               2, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        report(k, "ledger", NULL, 0, "%s: reading the ledger: %s", specs[s].name,
               PQerrorMessage(pg));
        PQclear(r);
        return;
    }
    int rows = PQntuples(r);
    char **ids = xmalloc(((size_t)rows + 1) * sizeof *ids);
    for (int i = 0; i < rows; i++) {
        const char *id = PQgetvalue(r, i, 0);
        long long qty = strtoll(PQgetvalue(r, i, 1), NULL, 10);
        const char *status = PQgetvalue(r, i, 2);
        ids[i] = (char *)id;
        struct group *g = group_of(k, id);
        struct order_view v;
        char why[200];
        if (g == NULL || g->rec_status != 200 ||
            view_parse(g->rec, &v, why, sizeof why) != 0 ||
            strcmp(v.sku, specs[s].name) != 0) {
            report(k, "ledger", g ? g->op : NULL, g ? g->n : 0,
                   "%s epoch %lld: the ledger has order %s (%s, qty %lld), Redis has no "
                   "record of it for this SKU",
                   specs[s].name, epoch, id, status, qty);
            continue;
        }
        bool sold = strcmp(v.status, "confirmed") == 0;
        if (sold ? strcmp(status, "sold") != 0 || qty != v.qty
                 : strcmp(status, "cancelled") != 0 || qty != 0)
            report(k, "ledger", g->op, g->n,
                   "%s epoch %lld: the ledger has order %s %s qty %lld; Redis's record "
                   "%.300s",
                   specs[s].name, epoch, id, status, qty, g->rec);
    }
    qsort(ids, (size_t)rows, sizeof *ids,
          ledger_id_cmp); /* ORDER BY's collation may differ */
    for (size_t i = 0; i < k->ng; i++) {
        struct group *g = &k->g[i];
        struct order_view v;
        char why[200];
        if (g->rec_status != 200 || view_parse(g->rec, &v, why, sizeof why) != 0 ||
            strcmp(v.sku, specs[s].name) != 0)
            continue;
        const char *key = g->id;
        if (bsearch(&key, ids, (size_t)rows, sizeof *ids, ledger_id_cmp) == NULL)
            report(k, "ledger", g->op, g->n,
                   "%s epoch %lld: Redis's record %.300s is not in the ledger",
                   specs[s].name, epoch, g->rec);
        else
            k->ledger_rows++;
    }
    free(ids);
    PQclear(r);
}

/* Check 6: each SKU's reconcile drains to drift 0, and its ledger is its records. */
static void check_ledger(struct checker *k)
{
    PGconn *pg = PQconnectdb(h_pg_conninfo(k->run->ledger));
    if (PQstatus(pg) != CONNECTION_OK) {
        report(k, "ledger", NULL, 0, "cannot connect to the ledger: %s",
               PQerrorMessage(pg));
        PQfinish(pg);
        return;
    }
    long long t0 = h_now_ms();
    for (int s = 0; s < N_SKUS; s++) {
        if (k->sku[s].status != 200)
            continue;
        long long epoch = 0;
        char *body = NULL;
        long long drift = ledger_drain(k, s, &epoch, &body);
        if (drift != 0)
            report(k, "ledger-drift", NULL, 0,
                   "%s: reconcile still says drift %lld after %d ms: %.400s",
                   specs[s].name, drift, LEDGER_DRAIN_MS, body ? body : "(no answer)");
        else
            ledger_vs_records(k, pg, s, epoch);
        free(body);
    }
    k->ledger_drain_ms = h_now_ms() - t0;
    PQfinish(pg);
}

/* ---- running the checks ------------------------------------------------------------ */

#ifdef HISTORY_PG
/* The end state read from PostgreSQL itself (tests/it_history_pg.c). */
static void check_pg(struct checker *k);
/* Every hold left settled by the sweepers before the end state is read, so the API's
 * numbers and the tables' are of one moment (tests/it_history_pg.c). */
static void pg_holds_settle(struct checker *k);
#endif

/* Every check over the finished run's log; the log file is written as it goes. */
static void run_checks(struct checker *k)
{
    struct hlog *l = &k->run->log;
    qsort(l->e, l->n, sizeof *l->e, by_send_time);
    for (size_t i = 0; i < l->n; i++)
        l->e[i].seq = i;
    k->e = l->e;
    k->n = l->n;
    k->run->check_until = run_now(k->run) + 20 * 1000000LL;
    write_log_head(k);
    find_last_resets(k);
    for (size_t i = 0; i < k->n; i++)
        check_answer(k, &k->e[i]);
#ifdef HISTORY_PG
    pg_holds_settle(k);
#endif
    read_skus(k);
    for (int s = 0; s < N_SKUS; s++)
        check_sku(k, s);
    build_groups(k);
    pthread_mutex_init(&k->mu, NULL);
    h_parallel(8, fetch_records, k);
    pthread_mutex_destroy(&k->mu);
    check_records_vs_skus(k);
    for (size_t i = 0; i < k->ng; i++)
        check_group(k, &k->g[i]);
    for (int s = 0; s < N_SKUS; s++)
        check_initial(k, s);
#ifdef HISTORY_PG
    check_pg(k);
#endif
    if (k->run->ledger != NULL)
        check_ledger(k);
    write_log_tail(k);
}

static void checker_free(struct checker *k)
{
    for (int s = 0; s < N_SKUS; s++)
        free(k->sku[s].text);
    for (size_t i = 0; i < k->ng; i++)
        free(k->g[i].rec);
    free(k->g);
    free(k->gop);
}

static int by_id_kind_time(const void *a, const void *b)
{
    const struct entry *x = *(struct entry *const *)a, *y = *(struct entry *const *)b;
    int c = strcmp(x->q.id, y->q.id);
    if (c == 0)
        c = (int)x->q.kind - (int)y->q.kind;
    return c != 0 ? c : x->sent < y->sent ? -1 : x->sent > y->sent;
}

/* Requests whose outcome the client could not know (503 or no answer), and how many
 * of them a later request of the same kind and id answered definitely (2xx-4xx): the
 * retry's answer is what checks 4 and 5 judge. */
static bool is_unknown(const struct entry *e)
{
    return e->status < 0 || e->status == 503;
}

/* The clients' requests of e[0..n-1] sorted by id, kind and send time (*m of them;
 * caller frees). */
static const struct entry **by_id_kind(const struct entry *e, size_t n, size_t *m)
{
    const struct entry **v = xmalloc((n + 1) * sizeof *v);
    *m = 0;
    for (size_t i = 0; i < n; i++)
        if (e[i].q.kind < K_KILL && e[i].q.thread >= 0)
            v[(*m)++] = &e[i];
    qsort(v, *m, sizeof *v, by_id_kind_time);
    return v;
}

static void count_unknown(const struct checker *k, long long *unknown,
                          long long *resolved)
{
    size_t m;
    const struct entry **v = by_id_kind(k->e, k->n, &m);
    *unknown = *resolved = 0;
    for (size_t i = 0; i < m; i++) {
        if (!is_unknown(v[i]))
            continue;
        ++*unknown;
        for (size_t j = i + 1;
             j < m && v[j]->q.kind == v[i]->q.kind && strcmp(v[j]->q.id, v[i]->q.id) == 0;
             j++) {
            if (!is_unknown(v[j])) {
                ++*resolved;
                break;
            }
        }
    }
    free(v);
}

/* What ran and what was judged, ending with the line tests/soak.sh reads. */
static void print_summary(const struct checker *k)
{
    const struct run *run = k->run;
    long long by_kind[K__COUNT] = {0}, by_status[10] = {0}, requests = 0, judged = 0;
    for (size_t i = 0; i < k->n; i++) {
        const struct entry *e = &k->e[i];
        by_kind[e->q.kind]++;
        if (e->q.kind < K_KILL && e->q.thread >= 0) {
            requests++;
            by_status[e->status < 0 || e->status > 999 ? 0 : e->status / 100]++;
        }
    }
    for (int i = 0; i < K__COUNT; i++)
        judged += k->judged[i];
    int skus = 0;
    for (int s = 0; s < N_SKUS; s++)
        skus += k->sku[s].status == 200;
    long long unknown, resolved;
    count_unknown(k, &unknown, &resolved);
    fprintf(stderr,
            HISTORY_NAME ": seed %llu, %d s, %lld requests: order %lld, cancel %lld, "
                         "restock %lld, rebalance %lld, reset %lld, delete %lld; chaos: "
                         "%lld CLIENT KILLs, %lld Redis restart(s), %lld failovers, %lld "
                         "replica freezes%s\n",
            run->seed, run->seconds, requests, by_kind[K_ORDER], by_kind[K_CANCEL],
            by_kind[K_RESTOCK], by_kind[K_REBALANCE], by_kind[K_RESET], by_kind[K_DELETE],
            by_kind[K_KILL], by_kind[K_RESTART], by_kind[K_FAILOVER], by_kind[K_FREEZE],
            run->log.full ? " (request cap reached: stopped early)" : "");
    fprintf(stderr,
            HISTORY_NAME
            ": requests of unknown outcome (503 or none): %lld, %lld of them followed "
            "by a definite answer to the same kind and id\n",
            unknown, resolved);
    fprintf(stderr,
            HISTORY_NAME
            ": answers: 2xx %lld, 4xx %lld, 5xx %lld, none %lld; judged "
            "against Redis: %lld order answers, %lld cancel answers, %lld restock ids, "
            "%lld order records, %d SKUs\n",
            by_status[2], by_status[4], by_status[5], by_status[0], k->judged[K_ORDER],
            k->judged[K_CANCEL], k->judged[K_RESTOCK], k->records, skus);
    long long batches = 0, batched = 0; /* group commits (SKUs with "batch") */
    for (int i = 0; i < N_INST; i++) {
        batches += h_stat(k->run->port[i], NULL, "batches");
        batched += h_stat(k->run->port[i], NULL, "batched_orders");
    }
    fprintf(stderr, HISTORY_NAME ": group commits %lld, of %lld orders\n", batches,
            batched);
    if (by_kind[K_RESERVE] > 0) {
        long long held = 0, sold = 0, expired = 0;
        for (size_t i = 0; i < k->n; i++) {
            const struct entry *e = &k->e[i];
            held += e->q.kind == K_RESERVE && e->status == 201;
            sold += e->q.kind == K_CONFIRM && e->status == 201;
            expired += e->q.kind == K_CONFIRM && e->status == 410 &&
                       strcmp(e->code, "reservation_expired") == 0;
        }
        fprintf(stderr,
                HISTORY_NAME
                ": reservations: reserve %lld (%lld held), confirm %lld (%lld "
                "sold, %lld refused as expired), release %lld; judged %lld "
                "confirms, %lld releases\n",
                by_kind[K_RESERVE], held, by_kind[K_CONFIRM], sold, expired,
                by_kind[K_RELEASE], k->judged[K_CONFIRM], k->judged[K_RELEASE]);
    }
    if (run->ledger != NULL)
        fprintf(stderr,
                HISTORY_NAME ": ledger: %lld records found in it, every SKU reconciled "
                             "(drift 0 checked) in %lld ms\n",
                k->ledger_rows, k->ledger_drain_ms);
    for (int c = 0; c < k->ncat; c++)
        fprintf(stderr, HISTORY_NAME ": violations [%s]: %d\n", k->cat[c],
                k->cat_count[c]);
    fprintf(stderr, HISTORY_NAME ": violations %d\n", k->violations);
    fprintf(stderr,
            "history-result seed=%llu seconds=%d requests=%lld judged=%lld "
            "failovers=%lld violations=%d\n",
            run->seed, run->seconds, requests, judged + k->records, by_kind[K_FAILOVER],
            k->violations);
}

/* ---- the test ---------------------------------------------------------------------- */

struct fixture {
    h_redis *redis;     /* standalone */
    h_cluster *cluster; /* the cluster variant */
#ifdef HISTORY_PG
    h_pg *pg; /* the PostgreSQL variant */
#endif
    h_pg *ledger; /* standalone, unless HISTORY_LEDGER=0: the ledger's PostgreSQL */
#ifdef HISTORY_LOCKS
    struct lock_servers *locks; /* the lock services' servers */
#endif
    h_svc *svc[N_INST];
};

/* The instances' arguments. Different lock waits, so that 503 busy and long waits
 * both happen. */
static const char *const svc_args[N_INST][9] = {
    {"--threads", "16", "--lock-wait-ms", "300", "--lock-ttl-ms", "1000",
     "--redis-timeout-ms", "1000", NULL},
    {"--threads", "16", "--lock-wait-ms", "800", "--lock-ttl-ms", "1000",
     "--redis-timeout-ms", "1000", NULL},
    {"--threads", "16", "--lock-wait-ms", "1500", "--lock-ttl-ms", "1500",
     "--redis-timeout-ms", "1000", NULL},
};

#if !defined(HISTORY_CLUSTER) && !defined(HISTORY_PG) && !defined(HISTORY_LOCKS)
static int group_setup(void **state)
{
    struct fixture *f = xmalloc(sizeof *f);
    *state = f;
    memset(f, 0, sizeof *f);
    f->redis = h_redis_start();
    if (f->redis == NULL)
        return -1;
    const char *ledger = getenv("HISTORY_LEDGER");
    if ((ledger == NULL || strcmp(ledger, "0") != 0) &&
        (f->ledger = h_pg_start()) == NULL)
        return -1;
    for (int i = 0; i < N_INST; i++) {
        const char *args[16];
        int n = 0;
        while (svc_args[i][n] != NULL) {
            args[n] = svc_args[i][n];
            n++;
        }
        if (f->ledger != NULL) {
            args[n++] = "--ledger";
            args[n++] = h_pg_conninfo(f->ledger);
        }
        args[n] = NULL;
        if ((f->svc[i] = h_svc_start_args(f->redis, args)) == NULL)
            return -1;
    }
    return 0;
}
#else
/* The variant's servers and the instances on them (it_history_cluster.c, _pg.c,
 * _locks.c). */
static int group_setup(void **state);
#endif
#ifdef HISTORY_LOCKS
/* Stop the lock services' servers and free them (it_history_locks.c); NULL is fine. */
static void lock_servers_free(struct lock_servers *l);
#endif

static int group_teardown(void **state)
{
    struct fixture *f = *state;
    if (f == NULL)
        return 0;
    int rc = 0;
    for (int i = 0; i < N_INST; i++) {
        rc |= h_svc_stop_clean(f->svc[i]);
        h_svc_free(f->svc[i]);
    }
    h_redis_free(f->redis);
    h_cluster_free(f->cluster);
#ifdef HISTORY_PG
    if (f->ledger == f->pg) /* the ledger in the store's database: one server */
        f->ledger = NULL;
    h_pg_free(f->pg);
#endif
#ifdef HISTORY_LOCKS
    lock_servers_free(f->locks);
#endif
    h_pg_free(f->ledger);
    free(f);
    return rc;
}

/* The kinds the clients send: HISTORY_OPS (a comma-separated list of kind names, e.g.
 * "order,cancel"), else DEFAULT_OPS; HISTORY_CLUSTER_ALL=1 turns every kind on. */
static unsigned ops_from_env(void)
{
    const char *all = getenv("HISTORY_CLUSTER_ALL"), *list = getenv("HISTORY_OPS");
    if (all != NULL && strcmp(all, "1") == 0)
        return OPS_ALL;
    if (list == NULL || list[0] == '\0')
        return DEFAULT_OPS;
    unsigned ops = 1u << K_ORDER;
    for (int k = 0; k < K_KILL; k++) {
        size_t n = strlen(kind_name[k]);
        for (const char *p = list; (p = strstr(p, kind_name[k])) != NULL; p += n)
            if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
                ops |= 1u << k;
    }
    return ops;
}

static void run_init(struct run *run, struct fixture *f)
{
    memset(run, 0, sizeof *run);
    run->redis = f->redis;
    run->cluster = f->cluster;
    run->ledger = f->ledger;
#ifdef HISTORY_PG
    run->pg = f->pg;
#endif
#ifdef HISTORY_LOCKS
    run->locks = f->locks;
    for (int i = 0; i < N_INST; i++)
        run->svc[i] = f->svc[i];
#endif
    run->ops = ops_from_env();
    for (int i = 0; i < N_INST; i++)
        run->port[i] = h_svc_port(f->svc[i]);
    run->seed = env_ull("HISTORY_SEED", DEFAULT_SEED);
    run->seconds = (int)env_ull("HISTORY_SECONDS", DEFAULT_SECONDS);
    if (run->seconds < 1 || run->seconds > 86400)
        run->seconds = DEFAULT_SECONDS;
    uint64_t rng = rng_seed(run->seed, N_CLIENTS + 1);
    long long us = run->seconds * 1000000LL;
    run->end = us;
    run->resets_until = us * 2 / 3;
    run->restart_at = us * rng_range(&rng, 25, 60) / 100;
    pthread_mutex_init(&run->log.mu, NULL);
    run->log.max = (size_t)REQUESTS_PER_SECOND * (size_t)run->seconds + 1000;
    for (int s = 0; s < N_SKUS; s++)
        pthread_mutex_init(&run->reset_mu[s], NULL);
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&run->pause, &attr);
    pthread_rwlockattr_destroy(&attr);
    run->t0 = mono_us();
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    run->wall0_ms = (long long)wall.tv_sec * 1000 + wall.tv_nsec / 1000000;
}

static void run_free(struct run *run)
{
    for (int s = 0; s < N_SKUS; s++)
        pthread_mutex_destroy(&run->reset_mu[s]);
    pthread_rwlock_destroy(&run->pause);
    log_free(&run->log);
}

/* Create every SKU as its spec says, logged as resets of the setup. */
static void create_skus(struct run *run)
{
    for (int s = 0; s < N_SKUS; s++) {
        struct req q = {.kind = K_RESET,
                        .sku = s,
                        .inst = s % N_INST,
                        .thread = -1,
                        .qty = specs[s].stock,
                        .segments = specs[s].segs[0],
                        .hold_ms = specs[s].hold_max,
                        .mode = specs[s].mode,
                        .key_header = true};
        snprintf(q.id, sizeof q.id, "setup-%d", s);
        int st = send_one(run, &q);
        if (st != 200 && st != 201) /* 201 created; 200 reset (a SKU left over) */
            fail_msg("creating %s answered %d", specs[s].name, st);
    }
}

/* Let the services finish what they still do: requests without an answer may still
 * run until lock and Redis timeouts have passed. */
static void wait_quiet(struct run *run)
{
    bool unanswered = false;
    for (size_t i = 0; i < run->log.n; i++)
        unanswered |= run->log.e[i].status < 0 && run->log.e[i].q.kind < K_KILL;
    h_sleep_ms(unanswered ? 4000 : 300);
}

/* The requests settle_unknown sends again, shared out one at a time. */
struct settle {
    struct run *run;
    struct req *q;
    size_t n, next;
    long long until; /* us since t0 */
    pthread_mutex_t mu;
    int left; /* still without a definite answer at the end */
};

static void settle_worker(int idx, void *ctx)
{
    struct settle *st = ctx;
    for (;;) {
        pthread_mutex_lock(&st->mu);
        size_t i = st->next++;
        pthread_mutex_unlock(&st->mu);
        if (i >= st->n)
            return;
        struct req *q = &st->q[i];
        int status = -1;
        for (int t = 0; run_now(st->run) < st->until; t++) {
            q->inst = (idx + t) % N_INST;
            status = send_one(st->run, q);
            if ((status >= 200 && status < 500) || status == -2)
                break;
            h_sleep_ms(250);
        }
        if (status < 200 || status >= 500) {
            pthread_mutex_lock(&st->mu);
            st->left++;
            pthread_mutex_unlock(&st->mu);
        }
    }
}

/* The last reset or delete of each SKU when its outcome is unknown, into q (room for
 * N_SKUS): a client must send it again under its id as it must an order, or a reset
 * that died half way (a failover) leaves the SKU half reset (restocks busy, orders on
 * the segments it reached STALE) until another reset finishes it. Returns how many. */
static size_t unknown_resets(const struct run *run, struct req *q)
{
    size_t n = 0;
    for (int s = 0; s < N_SKUS; s++) {
        const struct entry *last = NULL;
        for (size_t i = 0; i < run->log.n; i++) {
            const struct entry *e = &run->log.e[i];
            if ((e->q.kind == K_RESET || e->q.kind == K_DELETE) && e->q.sku == s &&
                e->q.thread >= 0 && e->q.thread < N_CLIENTS &&
                (last == NULL || e->sent > last->sent))
                last = e;
        }
        if (last != NULL && is_unknown(last))
            q[n++] = last->q;
    }
    return n;
}

/* RETRY_UNKNOWN: once the clients have stopped, every order, cancel and restock id
 * whose last request got an unknown outcome (503 or none) is sent again under its id
 * until a definite answer comes (every 250 ms, over the instances, for SETTLE_SECONDS
 * at most), as a client must: a dead attempt's claim or plan is settled by that
 * retry, and only then can the records be judged against the SKUs. (A definite answer
 * before the unknown one does not settle it: a reset may have come between, and the
 * unknown request started a new sale.) Before them, each SKU's last reset or delete
 * when its outcome is unknown (unknown_resets), within SETTLE_SECONDS of its own.
 * Returns how many got none. */
#define SETTLE_SECONDS 30
static int settle_unknown(struct run *run)
{
    size_t m;
    const struct entry **v = by_id_kind(run->log.e, run->log.n, &m);
    struct settle first = {.run = run, .q = xmalloc((N_SKUS + 1) * sizeof *first.q)};
    first.n = unknown_resets(run, first.q);
    first.until = run_now(run) + SETTLE_SECONDS * 1000000LL;
    pthread_mutex_init(&first.mu, NULL);
    h_parallel(N_CLIENTS, settle_worker, &first);
    pthread_mutex_destroy(&first.mu);
    free(first.q);
    struct settle st = {.run = run, .q = xmalloc((m + 1) * sizeof *st.q)};
    for (size_t i = 0; i < m;) {
        size_t j = i;
        while (j < m && v[j]->q.kind == v[i]->q.kind &&
               strcmp(v[j]->q.id, v[i]->q.id) == 0)
            j++;
        enum kind kind = v[i]->q.kind;
        if (is_unknown(v[j - 1]) &&
            (kind == K_ORDER || kind == K_CANCEL || kind == K_RESTOCK))
            st.q[st.n++] = v[j - 1]->q;
        i = j;
    }
    free(v);
    st.until = run_now(run) + SETTLE_SECONDS * 1000000LL;
    pthread_mutex_init(&st.mu, NULL);
    h_parallel(N_CLIENTS, settle_worker, &st);
    pthread_mutex_destroy(&st.mu);
    fprintf(stderr,
            HISTORY_NAME ": %zu ids without a definite answer sent again (%zu resets "
                         "first): %d left\n",
            first.n + st.n, first.n, first.left + st.left);
    free(st.q);
    return first.left + st.left;
}

static void test_history(void **state)
{
    struct fixture *f = *state;
    struct run run;
    run_init(&run, f);
    h_deadline((unsigned)run.seconds + DEADLINE_EXTRA);
    h_http_set_timeout(10000);
    char ops[80] = "";
    for (int i = 0; i < K_KILL; i++)
        if ((run.ops >> i) & 1u)
            snprintf(ops + strlen(ops), sizeof ops - strlen(ops), "%s%s",
                     ops[0] ? "," : "", kind_name[i]);
    fprintf(stderr,
            HISTORY_NAME ": seed %llu, %d s, ops %s (reproduce: HISTORY_SEED=%llu "
                         "HISTORY_SECONDS=%d HISTORY_OPS=%s build/tests/" HISTORY_NAME
                         ")\n",
            run.seed, run.seconds, ops, run.seed, run.seconds, ops);
    create_skus(&run);
    assert_int_equal(run_history(&run), 0);
    wait_quiet(&run);
    int unsettled = RETRY_UNKNOWN ? settle_unknown(&run) : 0;

    char *tmp_dir = NULL, *path = log_file_path(run.seed, &tmp_dir);
    struct checker k;
    memset(&k, 0, sizeof k);
    k.run = &run;
    k.out = path != NULL ? fopen(path, "w") : NULL;
    if (k.out == NULL)
        fail_msg("cannot write the log %s", path ? path : "(no directory)");
    for (int i = 0; i < N_INST; i++)
        if (!h_svc_alive(f->svc[i]))
            report(&k, "instance-died", NULL, 0, "instance %d exited", i);
    if (run.restart_failed)
        report(&k, "redis-restart", NULL, 0, "Redis did not come back");
    if (unsettled > 0)
        report(
            &k, "unsettled", NULL, 0,
            "%d ids got no definite answer within %d s after the run (all 503 or none)",
            unsettled, SETTLE_SECONDS);
    if (run.chaos_error[0] != '\0')
        report(&k, "fault", NULL, 0, "%s", run.chaos_error);
    run_checks(&k);
    fclose(k.out);
    print_summary(&k);
    int violations = k.violations;
    checker_free(&k);
    run_free(&run);
    if (violations > 0)
        fprintf(stderr,
                HISTORY_NAME
                ": FAILED with seed %llu; log: %s\nreproduce: HISTORY_SEED=%llu "
                "HISTORY_SECONDS=%d HISTORY_OPS=%s build/tests/" HISTORY_NAME "\n",
                run.seed, path, run.seed, run.seconds, ops);
    else if (tmp_dir != NULL)
        h_rmtree(tmp_dir);
    free(tmp_dir);
    free(path);
    assert_int_equal(violations, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_history),
    };
    int failed =
        cmocka_run_group_tests_name("history", tests, group_setup, group_teardown);
    return h_exit_status(failed);
}
