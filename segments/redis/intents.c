/* intents.c -- multi-segment orders on a Redis Cluster: their plans (built for the
 * claim, read back for an undo) and the read of the intents the sweeper settles
 * (async.h rda_intents_due). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/redis/async.h"
#include "segments/redis/calls.h"
#include "segments/redis/proto.h"

char *rd_plan_build(const char *placed, long long epoch, const struct rd_parts *p)
{
    size_t cap = strlen(placed) + 24 + (size_t)p->n * 32, len = 0;
    char *s = seg_malloc(cap);
    len += (size_t)snprintf(s, cap, "%s %lld", placed, epoch);
    for (int k = 0; k < p->n; k++)
        len += (size_t)snprintf(s + len, cap - len, " %d:%lld", p->seg[k], p->part[k]);
    return s;
}

/* A read of the old intents on its way (rda_intents_due): the ids, then each one's
 * claim; answered once the last claim read is. */
struct due {
    rda_conn *c;
    rda_intents_fn fn;
    void *arg;
    int n, left;
    bool failed;
    struct store_intent *in;
    struct due_read *reads;
};

/* One claim read: which intent of which read. */
struct due_read {
    struct due *d;
    int k;
};

static const char *field(const redisReply *r, size_t i)
{
    return r->element[i]->type == REDIS_REPLY_STRING ? r->element[i]->str : NULL;
}

static void due_answer(struct due *d)
{
    d->fn(d->arg, d->failed ? -1 : 0, d->failed ? 0 : d->n, d->in);
    free(d->in);
    free(d->reads);
    free(d);
}

/* HMGET c p k e of the id's record key: an intent with a claim and a plan names
 * its SKU and epoch; anything else (placed, given up, no plan) is only dropped. */
static void on_claim_read(void *arg, const redisReply *r)
{
    struct due_read *q = arg;
    struct due *d = q->d;
    struct store_intent *in = &d->in[q->k];
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 4) {
        d->failed = true;
    } else if (field(r, 0) != NULL && field(r, 1) != NULL && field(r, 2) != NULL &&
               field(r, 3) != NULL && seg_valid_name(field(r, 2))) {
        snprintf(in->sku, sizeof in->sku, "%s", field(r, 2));
        in->epoch = strtoll(field(r, 3), NULL, 10);
    }
    if (--d->left == 0)
        due_answer(d);
}

static void on_due(void *arg, const redisReply *r)
{
    struct due *d = arg;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        d->failed = true;
        due_answer(d);
        return;
    }
    d->in = seg_calloc(r->elements + 1, sizeof *d->in);
    for (size_t i = 0; i < r->elements; i++) {
        const char *id = field(r, i);
        if (id != NULL && seg_valid_name(id))
            snprintf(d->in[d->n++].id, sizeof d->in->id, "%s", id);
    }
    if (d->n == 0) {
        due_answer(d);
        return;
    }
    d->left = d->n;
    d->reads = seg_calloc((size_t)d->n, sizeof *d->reads);
    for (int k = 0, n = d->n; k < n; k++) { /* the last answer frees d */
        d->reads[k] = (struct due_read){d, k};
        struct rd_cmd cmd;
        proto_claim_read(&cmd, d->in[k].id);
        rda_raw(d->c, &cmd, on_claim_read, &d->reads[k]);
    }
}

void rda_intents_due(rda_conn *c, long long before_ms, int limit, rda_intents_fn fn,
                     void *arg)
{
    struct due *d = seg_calloc(1, sizeof *d);
    d->c = c;
    d->fn = fn;
    d->arg = arg;
    struct rd_cmd cmd;
    proto_intents_due(&cmd, before_ms, limit);
    rda_raw(c, &cmd, on_due, d);
}
