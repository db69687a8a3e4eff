/* async_internal.h -- the layout shared by the asynchronous seam's files only.
 *
 * Nothing outside async.c, async_conn.c and async_answer.c includes this; async.h is
 * the seam's contract. The files are layered, each calling only those below it:
 *
 *   async.c         the typed calls: each builds its command(s) and routes them
 *   async_conn.c    the handle and its links, and routing: the cluster's slot map,
 *                   MOVED, ASK, TRYAGAIN, and the calls delayed for a retry
 *   async_answer.c  the decoding of a reply for the caller, and of a fan-out's parts
 *
 * Everything here lives on the handle's loop and is touched by that thread only. A
 * `struct req` is owned by whoever holds it (a link, the handle's `delayed` list) until
 * rda_answer() frees it; a `struct fan` is freed by its last part's answer.
 */
#ifndef SEG_REDIS_ASYNC_INTERNAL_H
#define SEG_REDIS_ASYNC_INTERNAL_H

#include "segments/redis/async.h"
#include "segments/redis/link.h"
#include "segments/redis/slots.h"
#include "segments/redis/smap.h"
#include "segments/redis/target.h"
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
    char sku[SEG_NAME_MAX + 1]; /* K_RECORD: the SKU the caller expects, */
    long long epoch;            /* its epoch, and */
    char id[SEG_NAME_MAX + 1];  /* the order's id (a packed record names none) */
    void (*fn)(void);
    void *arg;
    long long born_ms; /* TRYAGAIN and CLUSTERDOWN are retried within timeout_ms */
    int hops;          /* MOVED and ASK followed */
    bool reroute;      /* a cluster: routed again (not answered -1) when it never went
                          out, within timeout_ms (rda_raw_blocking) */
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

struct rda_conn {
    struct event_base *base;
    struct rd_target to;        /* host and port: the seed */
    struct rd_target_text text; /* to's strings */
    struct link_owner own;
    rd_smap *mode;        /* the process's mode (calls.h), or NULL: as `to` says */
    struct link **links;  /* links[0]: the seed (standalone: the only link) */
    struct waits **waits; /* waits[i]: the WAITs of links[i]'s node, NULL until one */
    int nlinks, cap;
    /* A cluster only: */
    int16_t route[RD_SLOTS];     /* slot -> index in links of its master; -1 unknown */
    long long smap_gen;          /* the process's map (mode) last applied: its gen */
    bool refreshing;             /* a map request is out */
    long long refreshed_ms;      /* when the last one was sent */
    struct event *refresh_soon;  /* a refresh held back by the throttle */
    struct event *refresh_every; /* the periodic refresh */
    struct req *delayed;         /* calls waiting to be sent again */
    struct event *retry;         /* fires when the first of them is due */
    unsigned jitter;
    bool closing;
};

/* A call of `kind` for callback `fn` (NULL: nobody asked) with `arg`, its command
 * still to be filled; born now (async_conn.c). */
struct req *rda_req_new(rda_conn *c, enum kind kind, void (*fn)(void), void *arg);
/* Send `q` to the link of its command's slot; on a handle being freed, answered -1 by
 * rda_free (async_conn.c). */
void rda_route(struct req *q);
/* Ask a cluster for its slot map now, or as soon as the throttle allows; nothing on a
 * standalone handle (async_conn.c). */
void rda_want_refresh(rda_conn *c);

/* Decode `r` (NULL: no answer) for `q`'s caller, call it and free `q`
 * (async_answer.c). */
void rda_answer(struct req *q, redisReply *r);
/* One part of `f` has its answer in f->v (or f->failed): the call's, after the last,
 * which frees `f` (async_answer.c). */
void rda_fan_answered(struct fan *f);

#endif
