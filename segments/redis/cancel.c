/* cancel.c -- the cancel of an order on the event loop (async.h rda_cancel, store.h
 * cancel): one script on a standalone Redis, a state machine of steps on a cluster. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/redis/async.h"
#include "segments/redis/keys.h"
#include "segments/redis/proto.h"

/* Where a cancel stands. Each state names what is out; `advance` sends the next. */
enum cancel_state {
    CX_SCRIPT,  /* standalone: the CANCEL script (every part and the record at once) */
    CX_RECORD,  /* cluster: the record read (HMGET: record, owner, epoch) */
    CX_OWNER,   /* the owner's meta read: a record from another epoch reads as none */
    CX_SEGMENT, /* CANCEL_SEGMENT of part k: its units given back, its lock released */
    CX_RELEASE, /* a part refused: the locks of the parts after it given back */
    CX_GIVEN,   /* "replicated": a replica of each part's node has its give-back */
    CX_MARK,    /* CANCEL_RECORD: the record marked cancelled */
    CX_BUMP,    /* the SKU's gen bumped (other processes' caches drop their view) */
    CX_WAIT,    /* "replicated": a replica of every node written (parts, record, meta) */
};

/* One cancel on its way (freed once answered). */
struct cx {
    rda_conn *c;
    enum cancel_state state;
    rda_reply_fn fn;
    void *arg;
    char placed[RD_SKU_PLACED_MAX];
    char id[SEG_NAME_MAX + 1];
    long long epoch;
    char *cancelled, *expected;
    char *rec; /* cluster: the record as read; EXISTS: the answer's record */
    int n, k;  /* parts; the part being given back */
    int *seg;
    char **tok;
    int wait_ms;
    bool done;     /* the record was cancelled already */
    bool restored; /* the record is one RESTORE wrote back from the ledger */
    bool given;    /* some units given back by this call */
    int code;      /* the answer so far: RD_*, or -1 (no usable answer) */
    int left;      /* CX_RELEASE: releases still out */
    bool applied;  /* CX_WAIT: this call cancelled the order (OK before the wait) */
    char owner[SEG_NAME_MAX + 1]; /* the record's SKU, and */
    long long owner_epoch;        /* the epoch it was written in */
};

static void advance(struct cx *x);

static void cx_free(struct cx *x)
{
    for (int j = 0; j < x->n; j++)
        free(x->tok[j]);
    free(x->tok);
    free(x->seg);
    free(x->cancelled);
    free(x->expected);
    free(x->rec);
    free(x);
}

/* Answer the caller with x->code (and, EXISTS, x->rec) and free x. */
static void answer(struct cx *x)
{
    struct store_reply r = {.code = x->code < 0 ? 0 : x->code,
                            .value = x->code == RD_NOT_REPLICATED &&
                                     x->state == CX_WAIT && x->applied};
    if (x->code == RD_EXISTS) {
        r.record = x->rec;
        x->rec = NULL;
    }
    if (x->fn != NULL)
        x->fn(x->arg, x->code < 0 ? -1 : 0, &r);
    free(r.record);
    cx_free(x);
}

/* Wait for a replica of the nodes of the parts' segments and, when `all`, of the
 * record and the meta too. */
static void wait_nodes(struct cx *x, bool all, rda_int_fn fn)
{
    int n = x->n + (all ? 2 : 0);
    char **keys = seg_malloc(sizeof *keys * (size_t)n);
    for (int j = 0; j < n; j++)
        keys[j] = seg_malloc(SEG_KEY_MAX);
    for (int j = 0; j < x->n; j++)
        seg_key_stock(keys[j], x->placed, x->seg[j]);
    if (all) {
        seg_key_order(keys[x->n], x->id);
        seg_key_meta(keys[x->n + 1], x->placed);
    }
    rda_wait_keys(x->c, n, keys, x->wait_ms, fn, x);
    for (int j = 0; j < n; j++)
        free(keys[j]);
    free(keys);
}

/* ---- the steps ------------------------------------------------------------------ */

static void on_reply(void *arg, int rc, struct store_reply *r)
{
    struct cx *x = arg;
    x->code = rc < 0 ? -1 : r->code;
    if (rc == 0 && x->state == CX_SCRIPT && r->code == RD_EXISTS) {
        free(x->rec);
        x->rec = r->record; /* cancelled already: that record */
        r->record = NULL;
    }
    advance(x);
}

static void on_record(void *arg, const struct redisReply *r)
{
    struct cx *x = arg;
    char *rec = NULL;
    if (r == NULL || proto_record(r, x->id, &rec, x->owner, &x->owner_epoch) < 0) {
        x->code = -1;
    } else {
        x->rec = rec;
        x->code = rec != NULL ? RD_OK : RD_MISSING;
        x->restored = proto_record_restored(r);
    }
    advance(x);
}

static void on_owner(void *arg, int rc, int found, const struct store_meta *m)
{
    struct cx *x = arg;
    if (rc < 0)
        x->code = -1;
    else if (found != 1 ||
             proto_record_dead(x->owner, x->owner_epoch, x->owner, m->epoch))
        x->code = RD_MISSING; /* its SKU was reset (or deleted) since */
    advance(x);
}

static void on_released(void *arg, int rc, int value)
{
    (void)rc, (void)value;
    struct cx *x = arg;
    if (--x->left == 0)
        advance(x);
}

static void on_waited(void *arg, int rc, int replicas)
{
    struct cx *x = arg;
    if (rc < 0)
        x->code = -1;
    else if (replicas < 1)
        x->code = RD_NOT_REPLICATED;
    else if (x->state == CX_GIVEN)
        x->code = RD_OK;
    advance(x);
}

static void on_bumped(void *arg, const struct redisReply *r)
{
    struct cx *x = arg;
    x->code = r != NULL ? RD_OK : -1;
    advance(x);
}

static void send_segment(struct cx *x)
{
    struct rd_cmd cmd;
    proto_cancel_segment(&cmd, x->placed, x->epoch, x->seg[x->k], x->id, x->tok[x->k],
                         x->k, x->restored && !x->done ? x->rec : NULL);
    rda_step(x->c, &cmd, on_reply, x);
}

/* The transitions, in one place: x->code holds what the state's step answered. */
static void advance(struct cx *x)
{
    struct rd_cmd cmd;
    switch (x->state) {
    case CX_SCRIPT:
        break; /* to the final wait */
    case CX_RECORD:
        if (x->code == RD_OK && x->owner[0] != '\0') {
            x->state = CX_OWNER;
            rda_meta_read(x->c, x->owner, on_owner, x);
            return;
        }
        /* a record of no SKU is checked as it is */
        /* fall through */
    case CX_OWNER:
        if (x->code != RD_OK) {
            answer(x);
            return;
        }
        x->done = strcmp(x->rec, x->cancelled) == 0;
        if (x->done && x->wait_ms <= 0) {
            x->code = RD_EXISTS;
            answer(x);
            return;
        }
        if (!x->done && strcmp(x->rec, x->expected) != 0) {
            x->code = RD_STALE;
            answer(x);
            return;
        }
        x->state = CX_SEGMENT;
        x->k = 0;
        send_segment(x);
        return;
    case CX_SEGMENT:
        x->given |= x->code == RD_OK;
        /* EXISTS: done by a cancel that died; MISSING on a cancelled record: nothing
         * of it there to give back. */
        if (x->code != RD_OK && x->code != RD_EXISTS &&
            !(x->done && x->code == RD_MISSING)) {
            x->state = CX_RELEASE;
            x->left = x->n - x->k - 1;
            if (x->left == 0) {
                answer(x);
                return;
            }
            for (int j = x->k + 1; j < x->n; j++)
                rda_release(x->c, x->placed, x->seg[j], x->tok[j], on_released, x);
            return;
        }
        if (++x->k < x->n) {
            send_segment(x);
            return;
        }
        x->code = RD_OK;
        if (x->wait_ms > 0) {
            /* The record is marked only once a replica has every give-back: before,
             * a failover of a segment's master after the mark lost the units for
             * good, and the retry answered 200 from the record. */
            x->state = CX_GIVEN;
            wait_nodes(x, false, on_waited);
            return;
        }
        /* fall through */
    case CX_GIVEN:
        if (x->code == RD_OK && !x->done) {
            x->state = CX_MARK;
            proto_cancel_record(&cmd, x->id, x->expected, x->cancelled);
            rda_step(x->c, &cmd, on_reply, x);
            return;
        }
        goto marked;
    case CX_MARK:
        if (x->code > RD_OK)
            x->code = RD_STALE;
    marked:
        if (x->code == RD_OK && (x->given || !x->done)) {
            x->state = CX_BUMP;
            proto_gen_bump(&cmd, x->placed);
            rda_raw(x->c, &cmd, on_bumped, x);
            return;
        }
        /* fall through */
    case CX_BUMP:
        if (x->code == RD_OK && x->done)
            x->code = RD_EXISTS; /* x->rec: that record */
        break;
    case CX_RELEASE:
    case CX_WAIT:
        answer(x);
        return;
    }
    /* Durability "replicated": answered once a replica has the whole cancel. */
    if ((x->code == RD_OK || x->code == RD_EXISTS) && x->wait_ms > 0) {
        x->applied = x->code == RD_OK;
        x->state = CX_WAIT;
        wait_nodes(x, true, on_waited);
        return;
    }
    answer(x);
}

void rda_cancel(rda_conn *c, const char *placed, long long epoch, const char *id,
                const char *cancelled, const char *expected, const struct rd_parts *p,
                int wait_ms, rda_reply_fn fn, void *arg)
{
    struct cx *x = seg_calloc(1, sizeof *x);
    x->c = c;
    x->fn = fn;
    x->arg = arg;
    snprintf(x->placed, sizeof x->placed, "%s", placed);
    snprintf(x->id, sizeof x->id, "%s", id);
    x->epoch = epoch;
    x->cancelled = seg_strdup(cancelled);
    x->expected = seg_strdup(expected);
    x->wait_ms = wait_ms;
    x->n = p->n;
    x->seg = seg_malloc(sizeof *x->seg * (size_t)p->n);
    x->tok = seg_malloc(sizeof *x->tok * (size_t)p->n);
    for (int j = 0; j < p->n; j++) {
        x->seg[j] = p->seg[j];
        x->tok[j] = seg_strdup(p->tok != NULL ? p->tok[j] : "");
    }
    struct rd_cmd cmd;
    if (!rda_cluster(c)) {
        x->state = CX_SCRIPT;
        proto_cancel(&cmd, placed, epoch, id, cancelled, expected, p);
        rda_step(c, &cmd, on_reply, x);
        return;
    }
    x->state = CX_RECORD;
    proto_record_read(&cmd, id);
    cmd_arg(&cmd, "t"); /* the attempt: 'ledger' marks a restored record */
    rda_raw(c, &cmd, on_record, x);
}
