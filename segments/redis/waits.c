/* waits.c -- WAITs of one node, in rounds on a connection of their own (see waits.h). */
#include "segments/redis/waits.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "base/xalloc.h"
#include "segments/redis/proto.h"

struct waiter {
    void (*fn)(void *arg, int rc, int replicas);
    void *arg;
    struct waiter *next;
};

/* One round: the mark, then the WAIT, and the callers it answers. */
struct round {
    struct waits *w;
    struct lreq mark, wait;
    struct waiter *waiters;
    int owed; /* replies still to come: 2, 1, 0 */
    bool failed;
    int replicas;
};

struct waits {
    struct link *link;
    struct link_owner *own;
    int max_ms;          /* the longest WAIT timeout: half the link's reply deadline */
    struct round *out;   /* the round in flight, or NULL */
    struct waiter *next; /* the callers of the next round, and */
    struct waiter **tail;
    int slot;       /* its mark's slot: its first caller's */
    int timeout_ms; /* the longest timeout they asked */
    bool closing;
};

static void send_round(struct waits *w);

static void answer_all(struct waiter *list, int rc, int replicas)
{
    while (list != NULL) {
        struct waiter *x = list;
        list = x->next;
        x->fn(x->arg, rc, replicas);
        free(x);
    }
}

static void part_done(struct round *r)
{
    if (--r->owed > 0)
        return;
    struct waits *w = r->w;
    w->out = NULL;
    struct waiter *list = r->waiters;
    int rc = r->failed ? -1 : 0, replicas = r->failed ? 0 : r->replicas;
    cmd_free(&r->mark.cmd);
    cmd_free(&r->wait.cmd);
    free(r);
    /* The next round first: a caller answered may ask again (it joins the one after). */
    if (!w->closing && w->next != NULL && w->out == NULL)
        send_round(w);
    answer_all(list, rc, replicas);
}

static void mark_done(struct lreq *q, redisReply *reply)
{
    struct round *r = (struct round *)((char *)q - offsetof(struct round, mark));
    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        if (reply != NULL)
            link_owner_error(r->w->own, "WAIT mark", reply->str);
        r->failed = true;
    }
    part_done(r);
}

static void wait_done(struct lreq *q, redisReply *reply)
{
    struct round *r = (struct round *)((char *)q - offsetof(struct round, wait));
    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        if (reply != NULL && reply->type == REDIS_REPLY_ERROR)
            link_owner_error(r->w->own, "WAIT", reply->str);
        r->failed = true;
    } else {
        r->replicas = reply->integer > 1000000 ? 1000000 : (int)reply->integer;
    }
    part_done(r);
}

static void send_round(struct waits *w)
{
    struct round *r = seg_calloc(1, sizeof *r);
    r->w = w;
    r->waiters = w->next;
    r->owed = 2;
    proto_ack_mark(&r->mark.cmd, w->slot);
    proto_wait(&r->wait.cmd, w->timeout_ms);
    w->next = NULL;
    w->tail = &w->next;
    w->out = r;
    r->mark.done = mark_done;
    r->wait.done = wait_done;
    r->mark.once = r->wait.once = true;
    link_send(w->link, &r->mark);
    link_send(w->link, &r->wait);
}

struct waits *waits_create(struct event_base *base, const struct rd_target *to,
                           struct link_owner *owner)
{
    struct waits *w = seg_calloc(1, sizeof *w);
    w->own = owner;
    w->max_ms = to->timeout_ms / 2 > 0 ? to->timeout_ms / 2 : 1;
    w->tail = &w->next;
    w->link = link_create(base, to, owner);
    return w;
}

void waits_free(struct waits *w)
{
    if (w == NULL)
        return;
    w->closing = true;
    link_free(w->link);       /* answers the round out, if any */
    while (w->next != NULL) { /* a caller answered may ask again: -1 too */
        struct waiter *list = w->next;
        w->next = NULL;
        w->tail = &w->next;
        answer_all(list, -1, 0);
    }
    free(w);
}

void waits_ask(struct waits *w, int slot, int timeout_ms,
               void (*fn)(void *arg, int rc, int replicas), void *arg)
{
    struct waiter *x = seg_calloc(1, sizeof *x);
    x->fn = fn;
    x->arg = arg;
    if (w->next == NULL) {
        w->slot = slot >= 0 ? slot : 0;
        w->timeout_ms = 1;
    }
    *w->tail = x;
    w->tail = &x->next;
    if (timeout_ms > w->timeout_ms)
        w->timeout_ms = timeout_ms < w->max_ms ? timeout_ms : w->max_ms;
    if (w->out == NULL && !w->closing)
        send_round(w);
}
