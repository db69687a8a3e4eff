/* async.c -- the Redis seam on an event loop (see async.h): the typed calls, the
 * decoding of their answers, and the routing of each call to a link (link.h). */
#include "segments/redis/async.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "segments/redis/keys.h"
#include "segments/redis/link.h"
#include "segments/redis/proto.h"
#include "segments/redis/slots.h"
#include "segments/redis/smap.h"
#include "segments/redis/waits.h"

enum kind {
    K_REPLY,
    K_MULTI,
    K_INT_DONE,
    K_INT_TAKEN,
    K_META,
    K_RECORD,
    K_STOCKS,
    K_PING,
    K_RAW,  /* the reply itself, for the caller's decoder (rda_raw) */
    K_PART, /* one command of a fan-out (struct fan) */
    K_BATCH
};

struct fan;

/* A call on its way: in a link, or waiting out a TRYAGAIN in `delayed`. */
struct req {
    struct lreq lq; /* first: the link hands back &q->lq */
    rda_conn *c;
    enum kind kind;
    int n;          /* K_MULTI, K_STOCKS: how many segments; K_BATCH: orders */
    char token[33]; /* K_INT_TAKEN: ours */
    char sku[SEG_NAME_MAX + 1]; /* K_RECORD: the SKU the caller expects, and */
    long long epoch;            /* its epoch */
    void (*fn)(void);
    void *arg;
    long long born_ms; /* TRYAGAIN and CLUSTERDOWN are retried within timeout_ms */
    int hops;          /* MOVED and ASK followed */
    long long due_ms;  /* in `delayed`: when to send it again */
    struct req *later; /* next in `delayed` */
    struct fan *fan;   /* K_PART: the fan-out it is part of, and */
    int part;          /* which part */
};

/* One call made of one command per segment (each in its segment's slot): the stock
 * of every segment on a cluster, where one MGET cannot span the slots; the segment
 * whose orders hold an id. Answered when the last part is. */
struct fan {
    int n, left;
    bool failed;
    long long *v; /* per part: its integer (a string holding one), -1 for nil */
    enum {
        FAN_STOCKS,
        FAN_FIND,
        FAN_LEAST,
        FAN_UNDO
    } what; /* rda_stocks_read, rda_find_order,
               rda_wait (the least of the parts), rda_undo (the sum) */
    void (*fn)(void);
    void *arg;
};

static void fan_part_done(struct fan *f, int part, const redisReply *r);

/* A cluster's map request: CLUSTER SHARDS, or CLUSTER SLOTS where SHARDS is unknown. */
struct map_req {
    struct lreq lq;
    rda_conn *c;
    bool slots;
};

struct rda_conn {
    struct event_base *base;
    struct rd_target to; /* host and port: the seed */
    char host[256], unix_path[1024], user[256], password[256];
    struct link_owner own;
    rd_smap *mode;        /* the process's mode (calls.h), or NULL: as `to` says */
    struct link **links;  /* links[0]: the seed (standalone: the only link) */
    struct waits **waits; /* waits[i]: the WAITs of links[i]'s node, NULL until one */
    int nlinks, cap;
    /* A cluster only: */
    int16_t route[RD_SLOTS];     /* slot -> index in links of its master; -1 unknown */
    bool refreshing;             /* a map request is out */
    long long refreshed_ms;      /* when the last one was sent */
    struct event *refresh_soon;  /* a refresh held back by the throttle */
    struct event *refresh_every; /* the periodic refresh */
    struct req *delayed;         /* calls waiting to be sent again */
    struct event *retry;         /* fires when the first of them is due */
    unsigned jitter;
    bool closing;
};

/* Cluster timing: a refresh at most every REFRESH_MIN_MS, and one at least every
 * REFRESH_EVERY_MS; a TRYAGAIN or CLUSTERDOWN is retried after 5..25 ms, within the
 * call's timeout; at most MAX_HOPS redirects per call. */
#define REFRESH_MIN_MS 100
#define REFRESH_EVERY_MS 5000
#define MAX_HOPS 5

/* ---- answering ------------------------------------------------------------------ */

_Static_assert(sizeof((struct store_meta *)0)->mode == sizeof((struct rd_meta *)0)->mode,
               "a meta's mode copied whole");

/* Decode `r` (NULL: no answer) for `q`'s caller, call it and free `q`. */
static void answer(struct req *q, redisReply *r)
{
    struct rd_reply out = {0};
    struct rd_meta meta;
    char *record = NULL;
    int value = 0, found = 0;
    long long *stocks = NULL;
    struct store_reply *batch = NULL;
    if (q->kind == K_BATCH)
        batch = seg_calloc((size_t)q->n, sizeof *batch);
    if (q->kind == K_MULTI || q->kind == K_STOCKS)
        stocks = seg_calloc((size_t)q->n, sizeof *stocks);
    int rc = -1;
    if (r != NULL) {
        switch (q->kind) {
        case K_REPLY:
            rc = proto_scripted(r, &out);
            break;
        case K_MULTI:
            rc = proto_multi(r, q->n, &out, stocks);
            break;
        case K_INT_DONE:
            rc = proto_done(r, &value);
            break;
        case K_INT_TAKEN:
            rc = proto_taken(r, q->token, &value);
            break;
        case K_META:
            rc = proto_meta(r, &meta, &found);
            break;
        case K_RECORD: {
            char owner[SEG_NAME_MAX + 1];
            long long epoch;
            rc = proto_record(r, &record, owner, &epoch);
            if (rc == 0 && record != NULL &&
                proto_record_dead(owner, epoch, q->sku, q->epoch)) {
                free(record);
                record = NULL;
            }
            break;
        }
        case K_STOCKS:
            rc = proto_stocks(r, q->n, stocks);
            break;
        case K_PING:
            rc = 0;
            break;
        case K_BATCH:
            rc = proto_batch(r, q->n, batch);
            break;
        case K_RAW:
        case K_PART:
            break;
        }
    }
    if (q->kind == K_PART) {
        fan_part_done(q->fan, q->part, r);
        cmd_free(&q->lq.cmd);
        free(q);
        return;
    }
    if (q->fn != NULL) { /* no callback: nobody asked */
        switch (q->kind) {
        case K_REPLY:
        case K_MULTI: {
            struct store_reply sr = {out.code, out.value, out.record, out.plan,
                                     out.fence};
            if (q->kind == K_REPLY)
                ((rda_reply_fn)q->fn)(q->arg, rc, &sr);
            else
                ((rda_multi_fn)q->fn)(q->arg, rc, &sr, stocks);
            out.record = sr.record; /* what the callback left is freed below */
            out.plan = sr.plan;
            break;
        }
        case K_INT_DONE:
        case K_INT_TAKEN:
        case K_PING:
            ((rda_int_fn)q->fn)(q->arg, rc, value);
            break;
        case K_META:
            if (rc == 0 && found) {
                struct store_meta m = {.segments = meta.segments,
                                       .hold_ms = meta.hold_ms,
                                       .batch = meta.batch,
                                       .initial = meta.initial,
                                       .epoch = meta.epoch,
                                       .gen = meta.gen,
                                       .rebalance = meta.rebalance,
                                       .replicated = meta.replicated,
                                       .unfenced = meta.unfenced,
                                       .salt = meta.salt,
                                       .adjust_until = meta.adjust_until};
                memcpy(m.mode, meta.mode, sizeof m.mode);
                memcpy(m.lock, meta.lock, sizeof m.lock);
                ((rda_meta_fn)q->fn)(q->arg, 0, 1, &m);
            } else {
                ((rda_meta_fn)q->fn)(q->arg, rc, 0, NULL);
            }
            break;
        case K_RECORD:
            ((rda_record_fn)q->fn)(q->arg, rc, record);
            record = NULL;
            break;
        case K_STOCKS:
            ((rda_stocks_fn)q->fn)(q->arg, rc, stocks);
            break;
        case K_BATCH:
            ((store_batch_fn)q->fn)(q->arg, rc, q->n, rc == 0 ? batch : NULL);
            break;
        case K_RAW:
            ((rda_raw_fn)q->fn)(q->arg, r);
            break;
        case K_PART:
            break;
        }
    }
    for (int k = 0; batch != NULL && k < q->n; k++)
        free(batch[k].record);
    free(batch);
    free(record);
    rd_reply_clear(&out);
    free(stocks);
    cmd_free(&q->lq.cmd);
    free(q);
}

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

static void route(struct req *q)
{
    rda_conn *c = q->c;
    if (c->closing) { /* a callback calling on a handle being freed: answered -1 */
        q->later = c->delayed;
        c->delayed = q;
        return;
    }
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
static void want_refresh(rda_conn *c)
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
    snprintf(host, sizeof host, "%s", lq->l != NULL ? link_host(lq->l) : c->host);
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
    want_refresh(arg);
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
        route(q);
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
            want_refresh(c);
        } else {
            c->own.stats.asked++;
            link_asking(c->links[i]);
        }
        link_send(c->links[i], &q->lq);
        return true;
    }
    case RD_REDIR_CLUSTERDOWN:
    case RD_REDIR_READONLY:
        want_refresh(c);
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
        want_refresh(c); /* a node gone may be a failover */
        answer(q, NULL);
        return;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        if (is_cluster(c) && !c->closing && redirected(q, r))
            return;
        if (!is_cluster(c) && c->mode != NULL && rd_cluster_error(r->str, r->len))
            rd_smap_refresh(c->mode, 0); /* has it become a cluster? (calls.h) */
        link_owner_error(&c->own, "redis error", r->str);
        answer(q, NULL);
        return;
    }
    answer(q, r);
}

static struct req *new_req(rda_conn *c, enum kind kind, void (*fn)(void), void *arg)
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
    c->to = *to;
    snprintf(c->host, sizeof c->host, "%s", to->host ? to->host : "127.0.0.1");
    snprintf(c->unix_path, sizeof c->unix_path, "%s", to->unix_path ? to->unix_path : "");
    snprintf(c->user, sizeof c->user, "%s", to->user ? to->user : "");
    snprintf(c->password, sizeof c->password, "%s", to->password ? to->password : "");
    c->to.host = c->host;
    c->to.unix_path = c->unix_path;
    c->to.user = c->user;
    c->to.password = c->password;
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
        answer(q, NULL);
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

/* ---- the calls ------------------------------------------------------------------ */

#define FN(f) ((void (*)(void))(f))

void rda_raw(rda_conn *c, struct rd_cmd *cmd, rda_raw_fn fn, void *arg)
{
    struct req *q = new_req(c, K_RAW, FN(fn), arg);
    q->lq.cmd = *cmd;
    route(q);
}

void rda_ping(rda_conn *c, rda_int_fn fn, void *arg)
{
    struct req *q = new_req(c, K_PING, FN(fn), arg);
    proto_ping(&q->lq.cmd);
    route(q);
}

void rda_meta_read(rda_conn *c, const char *sku, rda_meta_fn fn, void *arg)
{
    struct req *q = new_req(c, K_META, FN(fn), arg);
    proto_meta_read(&q->lq.cmd, sku);
    route(q);
}

void rda_record_read(rda_conn *c, const char *id, const char *sku, long long epoch,
                     rda_record_fn fn, void *arg)
{
    struct req *q = new_req(c, K_RECORD, FN(fn), arg);
    snprintf(q->sku, sizeof q->sku, "%s", sku);
    q->epoch = epoch;
    proto_record_read(&q->lq.cmd, id);
    route(q);
}

/* Send a fan-out of f->n parts: part i built by `build`, each to its own slot. */
static void fan_out(rda_conn *c, struct fan *f,
                    void (*build)(struct rd_cmd *cmd, const char *sku, int i,
                                  const char *id),
                    const char *sku, const char *id)
{
    f->left = f->n;
    f->v = seg_calloc((size_t)f->n + 1, sizeof *f->v);
    for (int i = 0; i < f->n; i++) {
        struct req *q = new_req(c, K_PART, NULL, NULL);
        q->fan = f;
        q->part = i;
        build(&q->lq.cmd, sku, i, id);
        route(q);
    }
}

static void fan_part_answered(struct fan *f);

static void fan_part_done(struct fan *f, int part, const redisReply *r)
{
    struct rd_reply out;
    if (r == NULL)
        f->failed = true;
    else if (f->what == FAN_UNDO) {
        if (proto_scripted(r, &out) != 0)
            f->failed = true;
        else {
            f->failed |= out.code != RD_OK;
            f->v[part] = out.value;
            rd_reply_clear(&out);
        }
    } else if (r->type == REDIS_REPLY_NIL)
        f->v[part] = -1;
    else
        f->v[part] = proto_integer(r, 0);
    fan_part_answered(f);
}

/* One part of `f` has its answer in f->v (or f->failed): the call's, after the last. */
static void fan_part_answered(struct fan *f)
{
    if (--f->left > 0)
        return;
    int rc = f->failed ? -1 : 0;
    if (f->what == FAN_UNDO) {
        long long sum = 0;
        for (int i = 0; i < f->n; i++)
            sum += f->v[i];
        ((rda_int_fn)f->fn)(f->arg, rc, (int)sum);
    } else if (f->what == FAN_LEAST) {
        long long least = f->v[0];
        for (int i = 1; i < f->n; i++)
            least = f->v[i] < least ? f->v[i] : least;
        ((rda_int_fn)f->fn)(f->arg, rc, (int)least);
    } else if (f->what == FAN_FIND) {
        int seg = -1;
        for (int i = 0; rc == 0 && i < f->n && seg < 0; i++)
            if (f->v[i] >= 0)
                seg = i;
        ((rda_found_fn)f->fn)(f->arg, rc, seg, seg >= 0 ? f->v[seg] : 0);
    } else {
        for (int i = 0; i < f->n; i++)
            f->v[i] = f->v[i] < 0 ? 0 : f->v[i];
        ((rda_stocks_fn)f->fn)(f->arg, rc, f->v);
    }
    free(f->v);
    free(f);
}

static void build_stock_read(struct rd_cmd *cmd, const char *sku, int i, const char *id)
{
    (void)id;
    proto_stock_read(cmd, sku, i);
}

static void build_order_find(struct rd_cmd *cmd, const char *sku, int i, const char *id)
{
    proto_order_in_segment(cmd, sku, i, id);
}

void rda_stocks_read(rda_conn *c, const char *sku, int n, rda_stocks_fn fn, void *arg)
{
    if (is_cluster(c) && n > 1) { /* one MGET cannot span the segments' slots */
        struct fan *f = seg_calloc(1, sizeof *f);
        f->n = n;
        f->fn = FN(fn);
        f->arg = arg;
        fan_out(c, f, build_stock_read, sku, NULL);
        return;
    }
    struct req *q = new_req(c, K_STOCKS, FN(fn), arg);
    q->n = n;
    proto_stocks_read(&q->lq.cmd, sku, n);
    route(q);
}

void rda_find_order(rda_conn *c, const char *sku, int n, const char *id, rda_found_fn fn,
                    void *arg)
{
    struct fan *f = seg_calloc(1, sizeof *f);
    f->n = n;
    f->what = FAN_FIND;
    f->fn = FN(fn);
    f->arg = arg;
    fan_out(c, f, build_order_find, sku, id);
}

void rda_claim(rda_conn *c, const char *id, const char *attempt, const char *sku,
               long long epoch, int lease_ms, const char *dead, const char *plan,
               long long dead_epoch, rda_reply_fn fn, void *arg)
{
    struct req *q = new_req(c, K_REPLY, FN(fn), arg);
    proto_claim(&q->lq.cmd, id, attempt, sku, epoch, lease_ms, dead, plan, dead_epoch);
    route(q);
}

void rda_intent(rda_conn *c, const char *id, bool add, rda_int_fn fn, void *arg)
{
    struct req *q = new_req(c, K_PING, FN(fn), arg);
    if (add)
        proto_intent_add(&q->lq.cmd, id, base_wall_ms());
    else
        proto_intent_done(&q->lq.cmd, id);
    route(q);
}

void rda_deduct_part(rda_conn *c, const char *sku, long long epoch, int i,
                     const char *token, long long fence, const char *id, long long qty,
                     long long until, bool first, rda_reply_fn fn, void *arg)
{
    struct req *q = new_req(c, K_REPLY, FN(fn), arg);
    proto_deduct_slot(&q->lq.cmd, sku, epoch, i, token, id, qty, until, first, fence);
    route(q);
}

int rda_undo(rda_conn *c, const char *id, const char *plan, rda_int_fn fn, void *arg)
{
    struct proto_plan p;
    if (proto_plan_parse(plan, &p) != 0)
        return -1;
    struct fan *f = seg_calloc(1, sizeof *f);
    f->n = f->left = p.n;
    f->what = FAN_UNDO;
    f->fn = FN(fn);
    f->arg = arg;
    f->v = seg_calloc((size_t)p.n, sizeof *f->v);
    for (int k = 0; k < p.n; k++) {
        struct req *q = new_req(c, K_PART, NULL, NULL);
        q->fan = f;
        q->part = k;
        proto_undo_part(&q->lq.cmd, p.placed, p.epoch, p.seg[k], id, k == 0);
        route(q);
    }
    proto_plan_free(&p);
    return 0;
}

void rda_confirm(rda_conn *c, const char *id, const char *attempt, const char *record,
                 const char *sku, long long epoch, rda_reply_fn fn, void *arg)
{
    struct req *q = new_req(c, K_REPLY, FN(fn), arg);
    proto_confirm(&q->lq.cmd, id, attempt, record, sku, epoch);
    route(q);
}

/* True when order `id`'s record shares a slot with segment i of `sku` (always on a
 * standalone Redis: one node). */
static bool record_with_segment(const rda_conn *c, const char *sku, int i, const char *id)
{
    if (!is_cluster(c))
        return true;
    char seg[SEG_KEY_MAX], rec[SEG_KEY_MAX];
    seg_key_stock(seg, sku, i);
    seg_key_order(rec, id);
    return rd_key_slot(seg, strlen(seg)) == rd_key_slot(rec, strlen(rec));
}

void rda_id_for_segment(rda_conn *c, const char *sku, int i, char *id)
{
    if (!is_cluster(c))
        return;
    char seg[SEG_KEY_MAX];
    seg_key_stock(seg, sku, i);
    rd_name_for_slot(id, strlen(id), rd_key_slot(seg, strlen(seg)));
}

/* One node's part of an rda_wait. */
struct wait_part {
    rda_conn *c;
    struct fan *f;
    int part;
};

static void wait_part_done(void *arg, int rc, int replicas)
{
    struct wait_part *p = arg;
    if (rc < 0) {
        p->f->failed = true;
        want_refresh(p->c); /* a node gone or a slot moved may be a failover */
    } else {
        p->f->v[p->part] = replicas;
    }
    fan_part_answered(p->f);
    free(p);
}

/* Ask the WAITs of the node that serves `key` (made on the first ask there). */
static void wait_at(rda_conn *c, const char *key, int timeout_ms, struct fan *f, int part)
{
    if (c->closing) { /* a callback calling on a handle being freed: answered -1 */
        struct req *q = new_req(c, K_PART, NULL, NULL);
        q->fan = f;
        q->part = part;
        q->later = c->delayed;
        c->delayed = q;
        return;
    }
    int slot = rd_key_slot(key, strlen(key));
    int i = is_cluster(c) && c->route[slot] >= 0 ? c->route[slot] : 0;
    if (c->waits[i] == NULL) {
        struct rd_target to = c->to; /* links[0]: the seed, as configured */
        if (i > 0) {
            to.host = link_host(c->links[i]);
            to.port = link_port(c->links[i]);
            to.unix_path = NULL;
        }
        c->waits[i] = waits_create(c->base, &to, &c->own);
    }
    struct wait_part *p = seg_calloc(1, sizeof *p);
    p->c = c;
    p->f = f;
    p->part = part;
    waits_ask(c->waits[i], slot, timeout_ms, wait_part_done, p);
}

void rda_wait(rda_conn *c, const char *sku, int i, const char *id, int timeout_ms,
              rda_int_fn fn, void *arg)
{
    struct fan *f = seg_calloc(1, sizeof *f);
    /* One WAIT per node written: a record in the segment's slot is on its. */
    bool seg = i >= 0, rec = id != NULL && (i < 0 || !record_with_segment(c, sku, i, id));
    f->n = seg + rec;
    f->left = f->n;
    f->what = FAN_LEAST;
    f->fn = FN(fn);
    f->arg = arg;
    f->v = seg_calloc(2, sizeof *f->v);
    char key[SEG_KEY_MAX];
    for (int part = 0; part < f->n; part++) {
        if (part == 0 && seg)
            seg_key_stock(key, sku, i);
        else
            seg_key_order(key, id);
        wait_at(c, key, timeout_ms, f, part);
    }
}

bool rda_cluster(const rda_conn *c)
{
    return is_cluster(c);
}

void rda_acquire(rda_conn *c, const char *sku, long long epoch, int i, const char *id,
                 long long qty, const char *token, int ttl_ms, long long fence,
                 rda_reply_fn fn, void *arg)
{
    struct req *q = new_req(c, K_REPLY, FN(fn), arg);
    if (is_cluster(c)) /* the id was claimed: CLAIM checked the record */
        proto_acquire_slot(&q->lq.cmd, sku, epoch, i, qty, token, ttl_ms, fence);
    else
        proto_acquire(&q->lq.cmd, sku, epoch, i, id, qty, token, ttl_ms, fence);
    route(q);
}

bool rda_deduct(rda_conn *c, const char *sku, long long epoch, int i, const char *token,
                long long fence, const char *attempt, const char *id, long long qty,
                const char *record, long long until, bool keep, rda_reply_fn fn,
                void *arg)
{
    struct req *q = new_req(c, K_REPLY, FN(fn), arg);
    bool whole = until == 0 && record_with_segment(c, sku, i, id);
    if (whole) /* one slot: the record goes with the deduction */
        proto_deduct(&q->lq.cmd, sku, epoch, i, token, attempt, id, qty, record, keep,
                     fence);
    else /* the record is CONFIRM's, in the id's slot */
        proto_deduct_slot(&q->lq.cmd, sku, epoch, i, token, id, qty, until, true, fence);
    route(q);
    return whole;
}

bool rda_deduct_batch(rda_conn *c, const char *sku, long long epoch, int i,
                      const char *token, long long fence, int n,
                      const struct store_batch_order *b, store_batch_fn fn, void *arg)
{
    for (int k = 0; k < n; k++)
        if (!record_with_segment(c, sku, i, b[k].id))
            return false;
    struct req *q = new_req(c, K_BATCH, FN(fn), arg);
    q->n = n;
    proto_deduct_batch(&q->lq.cmd, sku, epoch, i, token, fence, n, b);
    route(q);
    return true;
}

void rda_lock(rda_conn *c, const char *sku, int i, const char *token, int ttl_ms,
              rda_int_fn fn, void *arg)
{
    struct req *q = new_req(c, K_INT_TAKEN, FN(fn), arg);
    snprintf(q->token, sizeof q->token, "%s", token);
    proto_lock(&q->lq.cmd, sku, i, token, ttl_ms);
    route(q);
}

void rda_release(rda_conn *c, const char *sku, int i, const char *token, rda_int_fn fn,
                 void *arg)
{
    struct req *q = new_req(c, K_INT_DONE, FN(fn), arg);
    proto_release(&q->lq.cmd, sku, i, token);
    route(q);
}

void rda_renew(rda_conn *c, const char *sku, int i, const char *token, int ttl_ms,
               rda_int_fn fn, void *arg)
{
    struct req *q = new_req(c, K_INT_DONE, FN(fn), arg);
    proto_renew(&q->lq.cmd, sku, i, token, ttl_ms);
    route(q);
}

void rda_deduct_multi(rda_conn *c, const char *sku, long long epoch, const char *id,
                      const char *record, const char *attempt, const struct rd_parts *p,
                      rda_multi_fn fn, void *arg)
{
    struct req *q = new_req(c, K_MULTI, FN(fn), arg);
    q->n = p->n;
    proto_deduct_multi(&q->lq.cmd, sku, epoch, id, record, attempt, p);
    route(q);
}

void rda_adjust(rda_conn *c, const char *sku, long long epoch, int segments,
                const char *const *tok, const char *op, long long add, long long limit,
                const char *rid, const char *sig, rda_reply_fn fn, void *arg)
{
    struct req *q = new_req(c, K_REPLY, FN(fn), arg);
    proto_adjust(&q->lq.cmd, sku, epoch, segments, tok, op, add, limit, rid, sig);
    route(q);
}
