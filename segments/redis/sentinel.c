/* sentinel.c -- the current master as Redis Sentinel names it, kept by one thread
 * (see sentinel.h). */
#include "segments/redis/sentinel.h"

#include "base/clock.h"
#include "base/periodic.h"
#include "base/xalloc.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/redis/slots.h"

struct addr {
    char host[RD_HOST_MAX];
    int port;
};

struct rd_sentinel {
    struct addr *sentinels; /* read-only after create */
    int nsentinels;
    char name[256], password[256];
    int timeout_ms;
    periodic *thread; /* runs sentinel_round; set before any rd_sentinel_refresh */
    /* The thread's own (no lock): */
    redisContext *rc;  /* to sentinels[at], or NULL */
    int at;            /* the sentinel asked first */
    long long last_ms; /* when its last round ended (base_now_ms); 0: none */
    /* Shared: */
    pthread_mutex_t mu;
    struct addr master;    /* under mu: the newest answer */
    _Atomic long long gen; /* master's generation, for lock-free reads; 0: none */
    char err[200];         /* under mu: why the last round failed, "" */
};

long long rd_sentinel_gen(rd_sentinel *s)
{
    return atomic_load_explicit(&s->gen, memory_order_acquire);
}

long long rd_sentinel_master(rd_sentinel *s, char *host, size_t hostlen, int *port)
{
    pthread_mutex_lock(&s->mu);
    long long gen = atomic_load_explicit(&s->gen, memory_order_relaxed);
    if (gen != 0) {
        snprintf(host, hostlen, "%s", s->master.host);
        *port = s->master.port;
    }
    pthread_mutex_unlock(&s->mu);
    return gen;
}

void rd_sentinel_refresh(rd_sentinel *s)
{
    periodic_wake(s->thread);
}

const char *rd_sentinel_error(rd_sentinel *s, char *buf, size_t len)
{
    pthread_mutex_lock(&s->mu);
    snprintf(buf, len, "%s", s->err);
    pthread_mutex_unlock(&s->mu);
    return buf;
}

/* A connection to sentinel i, AUTH done: NULL with err set when it cannot be made. */
static redisContext *connect_sentinel(rd_sentinel *s, int i, char *err, size_t errlen)
{
    const struct addr *a = &s->sentinels[i];
    struct timeval tv = {s->timeout_ms / 1000, (s->timeout_ms % 1000) * 1000};
    redisContext *rc = redisConnectWithTimeout(a->host, a->port, tv);
    if (rc == NULL || rc->err) {
        snprintf(err, errlen, "sentinel %.64s:%d: %.100s", a->host, a->port,
                 rc != NULL ? rc->errstr : "out of memory");
        if (rc != NULL)
            redisFree(rc);
        return NULL;
    }
    redisSetTimeout(rc, tv);
    if (s->password[0] != '\0') {
        redisReply *r = redisCommand(rc, "AUTH %s", s->password);
        bool ok = r != NULL && r->type != REDIS_REPLY_ERROR;
        snprintf(err, errlen, "sentinel %.64s:%d AUTH: %.100s", a->host, a->port,
                 r == NULL                      ? rc->errstr
                 : r->type == REDIS_REPLY_ERROR ? r->str
                                                : "");
        if (r != NULL)
            freeReplyObject(r);
        if (!ok) {
            redisFree(rc);
            return NULL;
        }
    }
    return rc;
}

/* Ask s->rc (sentinel s->at) for the master: 0 with *out filled, or -1 with err. */
static int ask(rd_sentinel *s, struct addr *out, char *err, size_t errlen)
{
    const struct addr *a = &s->sentinels[s->at];
    redisReply *r = redisCommand(s->rc, "SENTINEL get-master-addr-by-name %s", s->name);
    if (r == NULL) {
        snprintf(err, errlen, "sentinel %.64s:%d: %.100s", a->host, a->port,
                 s->rc->errstr);
        return -1;
    }
    int rc = -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING &&
        r->element[1]->type == REDIS_REPLY_STRING && r->element[0]->len > 0 &&
        r->element[0]->len < sizeof out->host) {
        long port = strtol(r->element[1]->str, NULL, 10);
        if (port > 0 && port < 65536) {
            snprintf(out->host, sizeof out->host, "%s", r->element[0]->str);
            out->port = (int)port;
            rc = 0;
        }
    }
    if (rc != 0)
        snprintf(err, errlen, "sentinel %.64s:%d: %.100s", a->host, a->port,
                 r->type == REDIS_REPLY_ERROR ? r->str
                 : r->type == REDIS_REPLY_NIL ? "does not know the master's name"
                                              : "unexpected reply");
    freeReplyObject(r);
    return rc;
}

/* One round: the sentinel that answered last, then each of the others once. */
static void round_once(rd_sentinel *s)
{
    char err[200] = "";
    struct addr got;
    bool ok = false;
    for (int k = 0; k < s->nsentinels && !ok; k++) {
        if (s->rc == NULL)
            s->rc = connect_sentinel(s, s->at, err, sizeof err);
        if (s->rc != NULL && ask(s, &got, err, sizeof err) == 0) {
            ok = true;
            break;
        }
        if (s->rc != NULL)
            redisFree(s->rc);
        s->rc = NULL;
        s->at = (s->at + 1) % s->nsentinels;
    }
    pthread_mutex_lock(&s->mu);
    snprintf(s->err, sizeof s->err, "%s", ok ? "" : err);
    long long gen = atomic_load_explicit(&s->gen, memory_order_relaxed);
    struct addr was = s->master;
    bool moved = ok && (gen == 0 || got.port != s->master.port ||
                        strcmp(got.host, s->master.host));
    if (moved) {
        s->master = got;
        atomic_store_explicit(&s->gen, gen + 1, memory_order_release);
    }
    pthread_mutex_unlock(&s->mu);
    if (moved && gen > 0) { /* a failover: worth a warning (the first answer is not) */
        char detail[256];
        snprintf(detail, sizeof detail,
                 "the master of %.32s is now %.48s:%d (was %.48s:%d)", s->name, got.host,
                 got.port, was.host, was.port);
        rd_log(true, "sentinel", detail);
    } else if (!ok) {
        rd_log(true, "sentinel", err);
    }
}

/* One round on the thread, when asked or RD_SENTINEL_TICK_MS after the pause that
 * follows the last; however many ask, one round per RD_SENTINEL_MIN_MS. */
static int sentinel_round(periodic *p, void *arg)
{
    (void)p;
    rd_sentinel *s = arg;
    long long wait = s->last_ms + RD_SENTINEL_MIN_MS - base_now_ms();
    if (wait > 0)
        return (int)wait; /* asked too soon after the last round */
    round_once(s);
    s->last_ms = base_now_ms();
    return RD_SENTINEL_MIN_MS + RD_SENTINEL_TICK_MS;
}

/* "host:port" or "[v6]:port" of len bytes into *a: 0, or -1. */
static int parse_addr(const char *p, size_t len, struct addr *a)
{
    char hp[RD_HOST_MAX + 16];
    if (len == 0 || len >= sizeof hp)
        return -1;
    memcpy(hp, p, len);
    hp[len] = '\0';
    char *colon = strrchr(hp, ':');
    if (colon == NULL || colon == hp)
        return -1;
    *colon = '\0';
    char *host = hp;
    size_t hlen = strlen(host);
    if (host[0] == '[' && hlen >= 2 && host[hlen - 1] == ']') {
        host[hlen - 1] = '\0';
        host++;
    }
    char *end;
    long port = strtol(colon + 1, &end, 10);
    size_t n = strlen(host);
    if (*end != '\0' || port < 1 || port > 65535 || n == 0 || n >= sizeof a->host)
        return -1;
    memcpy(a->host, host, n + 1);
    a->port = (int)port;
    return 0;
}

rd_sentinel *rd_sentinel_create(const struct rd_sentinel_opts *o, char *err,
                                size_t errlen)
{
    rd_sentinel *s = seg_calloc(1, sizeof *s);
    for (const char *p = o->sentinels; p != NULL && *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        s->sentinels =
            seg_realloc(s->sentinels, sizeof *s->sentinels * (size_t)(s->nsentinels + 1));
        if (parse_addr(p, n, &s->sentinels[s->nsentinels]) != 0) {
            snprintf(err, errlen, "bad sentinel address '%.*s'", (int)n, p);
            free(s->sentinels);
            free(s);
            return NULL;
        }
        s->nsentinels++;
        p += n + (end != NULL);
    }
    if (s->nsentinels == 0 || o->name == NULL || o->name[0] == '\0') {
        snprintf(err, errlen, "Sentinel needs at least one sentinel and a master name");
        free(s->sentinels);
        free(s);
        return NULL;
    }
    snprintf(s->name, sizeof s->name, "%s", o->name);
    snprintf(s->password, sizeof s->password, "%s", o->password ? o->password : "");
    s->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 1000;
    pthread_mutex_init(&s->mu, NULL);
    atomic_init(&s->gen, 0);
    round_once(s); /* before the thread: the first connections find an address */
    char why[128];
    s->thread = periodic_start(sentinel_round, s,
                               RD_SENTINEL_MIN_MS + RD_SENTINEL_TICK_MS, why, sizeof why);
    if (s->thread == NULL) {
        fprintf(stderr, "sentinel thread: %s\n", why);
        abort(); /* as out of memory: a process without threads cannot serve */
    }
    return s;
}

void rd_sentinel_free(rd_sentinel *s)
{
    if (s == NULL)
        return;
    periodic_stop(s->thread);
    if (s->rc != NULL)
        redisFree(s->rc);
    pthread_mutex_destroy(&s->mu);
    free(s->sentinels);
    free(s);
}
