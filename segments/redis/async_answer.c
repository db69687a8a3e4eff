/* async_answer.c -- the asynchronous seam's replies decoded for the caller: one call's,
 * and a fan-out's parts (async_internal.h). */
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/redis/async_internal.h"
#include "segments/redis/proto.h"

static void fan_part_done(struct fan *f, int part, const redisReply *r);

_Static_assert(sizeof((struct store_meta *)0)->mode == sizeof((struct rd_meta *)0)->mode,
               "a meta's mode copied whole");

/* Decode `r` (NULL: no answer) for `q`'s caller, call it and free `q`. */
void rda_answer(struct req *q, redisReply *r)
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
            rc = proto_record(r, q->id, &record, owner, &epoch);
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
    rda_fan_answered(f);
}

/* One part of `f` has its answer in f->v (or f->failed): the call's, after the last. */
void rda_fan_answered(struct fan *f)
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
