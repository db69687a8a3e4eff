/* smap.c -- one slot map per process, refreshed by one thread (see smap.h). */
#include "segments/redis/smap.h"

#include "base/clock.h"
#include "base/xalloc.h"

#include <hiredis/hiredis.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/periodic.h"

/* A node a fetch may ask. */
struct place {
    char host[RD_HOST_MAX];
    int port;
};

/* The connection the thread keeps to the node that answered its last fetch. */
struct kept {
    redisContext *rc; /* NULL: none */
    struct place at;
};

struct rd_smap {
    struct rd_target seed; /* its strings point into the arrays below */
    char host[RD_HOST_MAX], user[256], password[256];
    periodic *thread; /* runs fetch_round */
    pthread_mutex_t mu;
    pthread_cond_t done;      /* the askers: a fetch ended, or stop */
    struct rd_smap_snap *cur; /* the newest snapshot (under mu); NULL: none yet */
    _Atomic long long gen;    /* cur's generation, for lock-free reads */
    long long asked;          /* under mu: asks made */
    long long answered;       /* under mu: the asks made before the last fetch began */
    bool stop;                /* under mu */
    bool unsure;              /* under mu: standalone, but no INFO cluster answered yet */
    atomic_bool cluster;      /* the mode: false (standalone) until it is a cluster */
    char err[200];            /* under mu: why the last fetch failed, "" */
    struct kept keep;         /* the thread's: the node last asked, still connected */
    long long began; /* the thread's: when the last fetch (or probe) began; 0: none */
};

/* An absolute CLOCK_MONOTONIC time ms from now, for pthread_cond_timedwait on a
 * condition made with that clock. */
static struct timespec after_ms(long long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static void cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

long long rd_smap_gen(rd_smap *m)
{
    return atomic_load_explicit(&m->gen, memory_order_acquire);
}

const struct rd_smap_snap *rd_smap_get(rd_smap *m)
{
    pthread_mutex_lock(&m->mu);
    struct rd_smap_snap *s = m->cur;
    if (s != NULL)
        atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
    pthread_mutex_unlock(&m->mu);
    return s;
}

void rd_smap_put(const struct rd_smap_snap *cs)
{
    struct rd_smap_snap *s = (struct rd_smap_snap *)cs;
    if (s == NULL || atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
        return;
    rd_slot_map_clear(&s->map);
    free(s);
}

void rd_smap_unsure(rd_smap *m)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->unsure = true;
    periodic_wake(m->thread);
    pthread_mutex_unlock(&m->mu);
}

long long rd_smap_refresh(rd_smap *m, int wait_ms)
{
    pthread_mutex_lock(&m->mu);
    long long ticket = ++m->asked;
    periodic_wake(m->thread);
    if (wait_ms > 0) {
        struct timespec until = after_ms(wait_ms);
        long long end = base_now_ms() + wait_ms;
        while (m->answered < ticket && !m->stop && base_now_ms() < end)
            pthread_cond_timedwait(&m->done, &m->mu, &until);
    }
    pthread_mutex_unlock(&m->mu);
    return rd_smap_gen(m);
}

bool rd_smap_cluster(rd_smap *m)
{
    return m != NULL && atomic_load_explicit(&m->cluster, memory_order_acquire);
}

const char *rd_smap_error(rd_smap *m, char *buf, size_t len)
{
    pthread_mutex_lock(&m->mu);
    snprintf(buf, len, "%s", m->err);
    pthread_mutex_unlock(&m->mu);
    return buf;
}

/* ---- the thread ------------------------------------------------------------------ */

static bool same_node(const struct rd_node *a, const struct rd_node *b)
{
    return a->port == b->port && strcmp(a->host, b->host) == 0;
}

/* Whether two maps route alike and name the same nodes. */
static bool same_map(const struct rd_slot_map *a, const struct rd_slot_map *b)
{
    if (a->nmasters != b->nmasters || memcmp(a->slot, b->slot, sizeof a->slot) != 0)
        return false;
    for (int k = 0; k < a->nmasters; k++) {
        const struct rd_shard *x = &a->masters[k], *y = &b->masters[k];
        if (!same_node(&x->master, &y->master) || x->nreplicas != y->nreplicas)
            return false;
        for (int i = 0; i < x->nreplicas; i++)
            if (!same_node(&x->replicas[i], &y->replicas[i]))
                return false;
    }
    return true;
}

/* Where a fetch asks, in order, each once. */
struct places {
    int n;
    struct place at[64]; /* past that many nodes, the rest are not asked */
};

static void add_place(struct places *p, const char *host, int port)
{
    for (int i = 0; i < p->n; i++)
        if (p->at[i].port == port && strcmp(p->at[i].host, host) == 0)
            return;
    if (port <= 0 || p->n == (int)(sizeof p->at / sizeof p->at[0]))
        return;
    snprintf(p->at[p->n].host, sizeof p->at[0].host, "%s", host);
    p->at[p->n++].port = port;
}

/* Fetch the map into `out`: over the connection kept to the node that answered last
 * (`keep`: rc NULL when none), else from the seed, then every node of `cur` (may be
 * NULL), keeping the connection to the first that answers. 0, or -1 with the last
 * reason in err. */
static int fetch(periodic *th, rd_smap *m, const struct rd_smap_snap *cur,
                 struct kept *keep, struct rd_slot_map *out, char *err, size_t errlen)
{
    if (keep->rc != NULL) {
        if (rd_slot_map_ask(keep->rc, keep->at.host, out, err, errlen) == 0)
            return 0;
        redisFree(keep->rc); /* tried again below, after the others */
        keep->rc = NULL;
    }
    struct places p = {0};
    add_place(&p, m->host, m->seed.port);
    for (int k = 0; cur != NULL && k < cur->map.nmasters; k++) {
        const struct rd_shard *sh = &cur->map.masters[k];
        add_place(&p, sh->master.host, sh->master.port);
        for (int i = 0; i < sh->nreplicas; i++)
            add_place(&p, sh->replicas[i].host, sh->replicas[i].port);
    }
    snprintf(err, errlen, "no node to ask");
    for (int i = 0; i < p.n && !periodic_stopping(th); i++) {
        struct rd_target t = m->seed;
        t.host = p.at[i].host;
        t.port = p.at[i].port;
        redisContext *rc = rd_slot_map_connect(&t, err, errlen);
        if (rc == NULL)
            continue;
        if (rd_slot_map_ask(rc, t.host, out, err, errlen) == 0) {
            keep->rc = rc;
            keep->at = p.at[i];
            return 0;
        }
        redisFree(rc);
    }
    return -1;
}

/* Standalone: INFO cluster on the seed now: 1 (cluster_enabled:1), 0, or -1 (no
 * answer). A Redis that became a cluster (in practice: a cluster node that did not
 * answer when the process started) is logged once, here. */
static int probe(rd_smap *m)
{
    char err[200];
    int on = rd_cluster_probe(&m->seed, err, sizeof err);
    if (on != 1)
        return on;
    char detail[RD_HOST_MAX + 96];
    snprintf(detail, sizeof detail,
             "%s:%d is a Redis Cluster node: routing by its slot map from now on",
             m->host, m->seed.port);
    rd_log(true, "mode", detail);
    return 1;
}

/* Standalone: ask INFO cluster when asked (at most every RD_SMAP_PROBE_MIN_MS), and
 * every RD_SMAP_PROBE_MS until one answers when none did at start; once it says
 * cluster, fetch the map, publish it and then the mode. A cluster: fetch when asked (at
 * most every RD_SMAP_MIN_MS) and every RD_SMAP_TICK_MS; publish a map that differs from
 * the newest. */
static int fetch_round(periodic *p, void *arg)
{
    rd_smap *m = arg;
    pthread_mutex_lock(&m->mu);
    bool asked = m->asked > m->answered;
    bool cluster = atomic_load_explicit(&m->cluster, memory_order_relaxed);
    long long gap = cluster ? (asked ? RD_SMAP_MIN_MS : RD_SMAP_TICK_MS)
                            : (asked ? RD_SMAP_PROBE_MIN_MS : RD_SMAP_PROBE_MS);
    long long due = m->began == 0 ? 0 : m->began + gap;
    if (!cluster && !asked && !m->unsure) { /* a standalone Redis that said so */
        pthread_mutex_unlock(&m->mu);
        return INT_MAX; /* until an ask or rd_smap_unsure wakes it */
    }
    long long now = base_now_ms();
    if (now < due) {
        pthread_mutex_unlock(&m->mu);
        return (int)(due - now);
    }
    long long round = m->asked; /* the asks this fetch answers */
    struct rd_smap_snap *cur = m->cur;
    if (cur != NULL)
        atomic_fetch_add_explicit(&cur->refs, 1, memory_order_relaxed);
    pthread_mutex_unlock(&m->mu);

    m->began = base_now_ms();
    struct rd_slot_map fresh;
    char err[200];
    int rc = -1;
    int on = cluster ? 1 : probe(m);
    bool switched = !cluster && on == 1;
    if (cluster || switched)
        rc = fetch(p, m, cur, &m->keep, &fresh, err, sizeof err);
    else
        snprintf(err, sizeof err, "not a cluster");
    struct rd_smap_snap *made = NULL;
    if (rc == 0 && (cur == NULL || !same_map(&cur->map, &fresh))) {
        made = seg_calloc(1, sizeof *made);
        made->map = fresh;
        made->gen = (cur != NULL ? cur->gen : 0) + 1;
        atomic_init(&made->refs, 1); /* the map's own */
    } else if (rc == 0) {
        rd_slot_map_clear(&fresh);
    }

    pthread_mutex_lock(&m->mu);
    struct rd_smap_snap *old = NULL;
    if (made != NULL) { /* this thread alone publishes: m->cur is still `cur` */
        old = m->cur;
        m->cur = made;
        atomic_store_explicit(&m->gen, made->gen, memory_order_release);
    }
    snprintf(m->err, sizeof m->err, "%s", rc == 0 ? "" : err);
    if (switched) /* after its first map, so that a connection finds one */
        atomic_store_explicit(&m->cluster, true, memory_order_release);
    if (on >= 0)
        m->unsure = false;
    m->answered = round;
    pthread_cond_broadcast(&m->done);
    pthread_mutex_unlock(&m->mu);
    rd_smap_put(cur); /* the reference taken for the fetch */
    rd_smap_put(old); /* the map's own reference to the snapshot replaced */
    return 0;         /* the next round sleeps out the gap */
}

rd_smap *rd_smap_create(const struct rd_target *seed)
{
    if (seed == NULL ||
        (!seed->cluster && seed->unix_path != NULL && seed->unix_path[0] != '\0'))
        return NULL; /* a cluster node is reached over TCP */
    rd_smap *m = seg_calloc(1, sizeof *m);
    m->seed = *seed;
    snprintf(m->host, sizeof m->host, "%s", seed->host ? seed->host : "127.0.0.1");
    snprintf(m->user, sizeof m->user, "%s", seed->user ? seed->user : "");
    snprintf(m->password, sizeof m->password, "%s", seed->password ? seed->password : "");
    m->seed.host = m->host;
    m->seed.user = m->user;
    m->seed.password = m->password;
    m->seed.unix_path = NULL;
    m->seed.map = NULL;
    pthread_mutex_init(&m->mu, NULL);
    cond_init(&m->done);
    atomic_init(&m->gen, 0);
    atomic_init(&m->cluster, seed->cluster);
    char why[128];
    m->thread = periodic_start(fetch_round, m, 0, why, sizeof why);
    if (m->thread == NULL) {
        fprintf(stderr, "slot map thread: %s\n", why);
        abort(); /* as out of memory: a process without threads cannot serve */
    }
    return m;
}

void rd_smap_free(rd_smap *m)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->stop = true; /* ends the askers' waits */
    pthread_cond_broadcast(&m->done);
    pthread_mutex_unlock(&m->mu);
    periodic_stop(m->thread);
    if (m->keep.rc != NULL)
        redisFree(m->keep.rc);
    rd_smap_put(m->cur);
    pthread_cond_destroy(&m->done);
    pthread_mutex_destroy(&m->mu);
    free(m);
}
