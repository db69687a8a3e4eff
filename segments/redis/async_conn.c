/* async_conn.c -- the asynchronous seam's handle and its links, and the routing of each
 * call to one: the cluster's slot map, redirects and retries (async_internal.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "segments/redis/async_internal.h"
#include "segments/redis/proto.h"
#include "segments/redis/smap.h"

/* A cluster's map request: CLUSTER SHARDS, or CLUSTER SLOTS where SHARDS is unknown. */
struct map_req {
    struct lreq lq;
    rda_conn *c;
    bool slots;
};

/* Cluster timing: a refresh at most every REFRESH_MIN_MS, and one at least every
 * REFRESH_EVERY_MS; a TRYAGAIN or CLUSTERDOWN is retried after 5..25 ms, within the
 * call's timeout; at most MAX_HOPS redirects per call. */
#define REFRESH_MIN_MS 100
#define REFRESH_EVERY_MS 5000
#define MAX_HOPS 5
/* ---- routing -------------------------------------------------------------------- */

static bool is_cluster(const rda_conn *c)
{
    return c->to.cluster;
}

/* The link to host:port, made when there is none yet. */
static int link_index(rda_conn *c, const char *host, int port)
{
    for (int i = 0; i < c->nlinks; i++)
        if (link_port(c->links[i]) == port && strcmp(link_host(c->links[i]), host) == 0)
            return i;
    if (c->nlinks == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 8;
        c->links = seg_realloc(c->links, sizeof *c->links * (size_t)c->cap);
        c->waits = seg_realloc(c->waits, sizeof *c->waits * (size_t)c->cap);
    }
    c->waits[c->nlinks] = NULL;
    struct rd_target to = c->to;
    to.host = host;
    to.port = port;
    to.unix_path = NULL;
    c->links[c->nlinks] = link_create(c->base, &to, &c->own);
    return c->nlinks++;
}

/* The link for a command on `slot` (-1: keyless): the slot's master when known, else
 * the seed, whose MOVED then says where it lives. */
static struct link *link_for(const rda_conn *c, int slot)
{
    if (is_cluster(c) && slot >= 0 && c->route[slot] >= 0)
        return c->links[c->route[slot]];
    return c->links[0];
}

static void apply_map(rda_conn *c, const struct rd_slot_map *m);

/* Route by the process's slot map (smap.h) once it has a newer snapshot than the one
 * applied last: one map per process, refreshed every RD_SMAP_TICK_MS by its thread,
 * so a promotion another connection (or the tick) learned is known here too, not only
 * after this handle's own refresh (MOVED, a failed link, REFRESH_EVERY_MS) -- a
 * frozen old master would otherwise cost a command its whole timeout. */
static void follow_process_map(rda_conn *c)
{
    if (c->mode == NULL || !is_cluster(c) || rd_smap_gen(c->mode) <= c->smap_gen)
        return;
    const struct rd_smap_snap *s = rd_smap_get(c->mode);
    if (s == NULL)
        return;
    c->smap_gen = s->gen;
    apply_map(c, &s->map);
    rd_smap_put(s);
}

void rda_route(struct req *q)
{
    rda_conn *c = q->c;
    if (c->closing) { /* a callback calling on a handle being freed: answered -1 */
        q->later = c->delayed;
        c->delayed = q;
        return;
    }
    follow_process_map(c);
    link_send(link_for(c, q->lq.cmd.slot), &q->lq);
}

static void map_done(struct lreq *lq, redisReply *r);

static void send_map_request(rda_conn *c, bool slots)
{
    struct map_req *m = seg_calloc(1, sizeof *m);
    m->c = c;
    m->slots = slots;
    m->lq.done = map_done;
    cmd_plain(&m->lq.cmd, "CLUSTER");
    cmd_arg(&m->lq.cmd, slots ? "SLOTS" : "SHARDS");
    /* Ask a node whose connection is up, the seed when none is. */
    struct link *l = c->links[0];
    for (int i = 0; i < c->nlinks; i++)
        if (link_up(c->links[i])) {
            l = c->links[i];
            break;
        }
    c->refreshing = true;
    c->refreshed_ms = base_now_ms();
    c->own.stats.map_refreshes++;
    link_send(l, &m->lq);
}

/* Ask for the slot map now, or as soon as the throttle allows. */
void rda_want_refresh(rda_conn *c)
{
    if (!is_cluster(c) || c->refreshing || c->closing)
        return;
    long long wait = c->refreshed_ms + REFRESH_MIN_MS - base_now_ms();
    if (wait <= 0) {
        send_map_request(c, false);
    } else if (!evtimer_pending(c->refresh_soon, NULL)) {
        struct timeval tv = {0, (suseconds_t)(wait * 1000)};
        evtimer_add(c->refresh_soon, &tv);
    }
}

/* Start routing over a cluster: the map asked for now and every REFRESH_EVERY_MS. */
static void start_cluster(rda_conn *c)
{
    struct timeval every = {REFRESH_EVERY_MS / 1000, (REFRESH_EVERY_MS % 1000) * 1000};
    evtimer_add(c->refresh_every, &every);
    send_map_request(c, false);
}

/* Route every slot to its master in `m`. */
static void apply_map(rda_conn *c, const struct rd_slot_map *m)
{
    int *idx = seg_calloc((size_t)m->nmasters + 1, sizeof *idx);
    for (int k = 0; k < m->nmasters; k++)
        idx[k] = link_index(c, m->masters[k].master.host, m->masters[k].master.port);
    for (int s = 0; s < RD_SLOTS; s++)
        c->route[s] = (int16_t)(m->slot[s] >= 0 ? idx[m->slot[s]] : -1);
    free(idx);
}

static void map_done(struct lreq *lq, redisReply *r)
{
    struct map_req *m = (struct map_req *)lq;
    rda_conn *c = m->c;
    bool slots = m->slots;
    char host[RD_HOST_MAX];
    snprintf(host, sizeof host, "%s", lq->l != NULL ? link_host(lq->l) : c->text.host);
    cmd_free(&lq->cmd);
    free(m);
    c->refreshing = false;
    if (c->closing)
        return;
    if (r == NULL)
        return; /* the link logged why; the next refresh asks another node */
    if (r->type == REDIS_REPLY_ERROR) {
        if (!slots) { /* a server before 7.0 knows only CLUSTER SLOTS */
            send_map_request(c, true);
            return;
        }
        link_owner_error(&c->own, "cluster map", r->str);
        return;
    }
    struct rd_slot_map map;
    char err[160];
    int rc = slots ? rd_slot_map_from_slots(r, host, &map, err, sizeof err)
                   : rd_slot_map_from_shards(r, host, &map, err, sizeof err);
    if (rc != 0) {
        if (!slots) { /* e.g. a shard naming two masters mid-failover */
            send_map_request(c, true);
            return;
        }
        link_owner_error(&c->own, "cluster map", err);
        return;
    }
    apply_map(c, &map);
    rd_slot_map_clear(&map);
}

static void on_refresh(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rda_want_refresh(arg);
}

/* Queue `q` to be routed again in 5..25 ms. */
static void delay(struct req *q)
{
    rda_conn *c = q->c;
    c->jitter = c->jitter * 1103515245u + 12345u;
    q->due_ms = base_now_ms() + 5 + (long long)((c->jitter >> 16) % 21);
    q->later = c->delayed;
    c->delayed = q;
    if (!evtimer_pending(c->retry, NULL)) {
        struct timeval tv = {0, 5000};
        evtimer_add(c->retry, &tv);
    }
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rda_conn *c = arg;
    long long now = base_now_ms();
    struct req *due = NULL, **p = &c->delayed;
    while (*p != NULL) {
        struct req *q = *p;
        if (q->due_ms <= now) {
            *p = q->later;
            q->later = due;
            due = q;
        } else {
            p = &q->later;
        }
    }
    if (c->delayed != NULL) {
        struct timeval tv = {0, 5000};
        evtimer_add(c->retry, &tv);
    }
    while (due != NULL) {
        struct req *q = due;
        due = q->later;
        rda_route(q);
    }
}

/* A cluster's error reply: follow it when it is a redirect (true), else false. */
static bool redirected(struct req *q, const redisReply *r)
{
    rda_conn *c = q->c;
    struct rd_redirect d;
    if (rd_redirect_parse(r->str, r->len, &d) != 0 || d.kind == RD_REDIR_NONE)
        return false;
    switch (d.kind) {
    case RD_REDIR_MOVED:
    case RD_REDIR_ASK: {
        if (++q->hops > MAX_HOPS)
            return false;
        const char *host = d.host[0] != '\0' && strcmp(d.host, "?") != 0
                               ? d.host
                               : link_host(q->lq.l); /* the node that answered */
        int i = link_index(c, host, d.port);
        if (d.kind == RD_REDIR_MOVED) {
            c->own.stats.moved++;
            c->route[d.slot] = (int16_t)i;
            rda_want_refresh(c);
        } else {
            c->own.stats.asked++;
            link_asking(c->links[i]);
        }
        link_send(c->links[i], &q->lq);
        return true;
    }
    case RD_REDIR_CLUSTERDOWN:
    case RD_REDIR_READONLY:
        rda_want_refresh(c);
        /* fall through */
    case RD_REDIR_TRYAGAIN:
        if (base_now_ms() + 25 - q->born_ms > c->to.timeout_ms)
            return false;
        c->own.stats.retried++;
        delay(q);
        return true;
    default:
        return false;
    }
}

static void req_done(struct lreq *lq, redisReply *r)
{
    struct req *q = (struct req *)lq;
    rda_conn *c = q->c;
    if (r == NULL) {
        rda_want_refresh(c); /* a node gone may be a failover */
        if (q->reroute && q->lq.unsent && is_cluster(c) && !c->closing &&
            base_now_ms() + 25 - q->born_ms <= c->to.timeout_ms) {
            /* It cannot have run: sent again by the newest map, which moves the slot
             * to the new master once the failover is known. */
            c->own.stats.retried++;
            delay(q);
            return;
        }
        rda_answer(q, NULL);
        return;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        if (is_cluster(c) && !c->closing && redirected(q, r))
            return;
        if (!is_cluster(c) && c->mode != NULL && rd_cluster_error(r->str, r->len))
            rd_smap_refresh(c->mode, 0); /* has it become a cluster? (calls.h) */
        link_owner_error(&c->own, "redis error", r->str);
        rda_answer(q, NULL);
        return;
    }
    rda_answer(q, r);
}

struct req *rda_req_new(rda_conn *c, enum kind kind, void (*fn)(void), void *arg)
{
    struct req *q = seg_calloc(1, sizeof *q);
    q->c = c;
    q->kind = kind;
    q->fn = fn;
    q->arg = arg;
    q->born_ms = base_now_ms();
    q->lq.done = req_done;
    return q;
}

/* ---- the handle ----------------------------------------------------------------- */

rda_conn *rda_create(struct event_base *base, const struct rd_target *to,
                     const struct rda_counters *counts)
{
    rda_conn *c = seg_calloc(1, sizeof *c);
    c->base = base;
    rd_target_copy(&c->to, &c->text, to);
    c->mode = to->map;
    c->to.map = NULL;
    if (counts != NULL)
        c->own.counts = *counts;
    for (int s = 0; s < RD_SLOTS; s++)
        c->route[s] = -1;
    c->jitter = (unsigned)(uintptr_t)c ^ (unsigned)base_now_ms();
    c->refresh_soon = evtimer_new(base, on_refresh, c);
    c->refresh_every = event_new(base, -1, EV_PERSIST, on_refresh, c);
    c->retry = evtimer_new(base, on_retry, c);
    if (c->refresh_soon == NULL || c->refresh_every == NULL || c->retry == NULL) {
        fputs("inventoryd: cannot create the Redis connection's timers\n", stderr);
        abort();
    }
    c->cap = 8;
    c->links = seg_calloc((size_t)c->cap, sizeof *c->links);
    c->waits = seg_calloc((size_t)c->cap, sizeof *c->waits);
    c->links[c->nlinks++] = link_create(base, &c->to, &c->own);
    if (is_cluster(c))
        start_cluster(c);
    return c;
}

bool rda_mode_behind(const rda_conn *c)
{
    return !is_cluster(c) && rd_smap_cluster(c->mode);
}

void rda_mode_follow(rda_conn *c)
{
    if (!rda_mode_behind(c) || c->closing)
        return;
    c->to.cluster = true; /* links[0] is the seed; the map adds the masters */
    start_cluster(c);
}

void rda_free(rda_conn *c)
{
    if (c == NULL)
        return;
    c->closing = true;
    for (int i = 0; i < c->nlinks; i++) {
        waits_free(c->waits[i]); /* answers every WAIT still owed */
        c->waits[i] = NULL;
    }
    for (int i = 0; i < c->nlinks; i++)
        link_free(c->links[i]); /* answers every call still in it */
    while (c->delayed != NULL) {
        struct req *q = c->delayed;
        c->delayed = q->later;
        rda_answer(q, NULL);
    }
    event_free(c->refresh_soon);
    event_free(c->refresh_every);
    event_free(c->retry);
    free(c->links);
    free(c->waits);
    free(c);
}

const char *rda_error(const rda_conn *c)
{
    return c->own.errstr;
}

void rda_stats(const rda_conn *c, struct rda_stats *out)
{
    *out = c->own.stats;
    out->links = c->nlinks;
}

bool rda_cluster(const rda_conn *c)
{
    return is_cluster(c);
}

int rda_slot_master(rda_conn *c, int slot, char *name, size_t len)
{
    name[0] = '\0';
    if (!is_cluster(c) || slot < 0 || slot >= RD_SLOTS)
        return -1;
    follow_process_map(c);
    int i = c->route[slot];
    if (i < 0)
        return -1;
    snprintf(name, len, "%s:%d", link_host(c->links[i]), link_port(c->links[i]));
    return i;
}
