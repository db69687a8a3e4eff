/* intents.c -- multi-segment orders on a Redis Cluster: their plans (built for the
 * claim, read back for an undo) and the sweeper's step that undoes the plans of
 * claims whose process died (calls.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/redis/calls.h"
#include "segments/redis/proto.h"
#include "segments/redis/store.h"

char *rd_plan_build(const char *placed, long long epoch, const struct rd_parts *p)
{
    size_t cap = strlen(placed) + 24 + (size_t)p->n * 32, len = 0;
    char *s = seg_malloc(cap);
    len += (size_t)snprintf(s, cap, "%s %lld", placed, epoch);
    for (int k = 0; k < p->n; k++)
        len += (size_t)snprintf(s + len, cap - len, " %d:%lld", p->seg[k], p->part[k]);
    return s;
}

int proto_plan_parse(const char *s, struct proto_plan *out)
{
    memset(out, 0, sizeof *out);
    const char *sp = strchr(s, ' ');
    if (sp == NULL || sp == s || (size_t)(sp - s) >= sizeof out->placed)
        return -1;
    memcpy(out->placed, s, (size_t)(sp - s));
    char *end;
    out->epoch = strtoll(sp + 1, &end, 10);
    int cap = 0;
    for (const char *q = end; *q != '\0'; q++)
        cap += *q == ' ';
    if (end == sp + 1 || cap < 1 || cap > SEG_MAX_SEGMENTS)
        return -1;
    out->seg = seg_malloc(sizeof *out->seg * (size_t)cap);
    out->qty = seg_malloc(sizeof *out->qty * (size_t)cap);
    while (*end == ' ') {
        char *colon;
        long seg = strtol(end + 1, &colon, 10);
        if (colon == end + 1 || *colon != ':' || seg < 0 || seg >= SEG_MAX_SEGMENTS)
            break;
        long long qty = strtoll(colon + 1, &end, 10);
        if (end == colon + 1 || qty < 1 || (*end != ' ' && *end != '\0'))
            break;
        out->seg[out->n] = (int)seg;
        out->qty[out->n++] = qty;
    }
    if (*end != '\0' || out->n != cap) {
        proto_plan_free(out);
        return -1;
    }
    return 0;
}

void proto_plan_free(struct proto_plan *p)
{
    free(p->seg);
    free(p->qty);
    p->seg = NULL;
    p->qty = NULL;
    p->n = 0;
}

static int intent_done(rd_conn *c, const char *id)
{
    struct rd_cmd cmd;
    proto_intent_done(&cmd, id);
    redisReply *r = store_call(c, &cmd);
    if (r == NULL)
        return -1;
    freeReplyObject(r);
    return 0;
}

/* How long the sweeper holds a claim it took over while it undoes the plan. */
#define SETTLE_LEASE_MS 15000

static const char *field(const redisReply *r, size_t i)
{
    return r->element[i]->type == REDIS_REPLY_STRING ? r->element[i]->str : NULL;
}

/* Settle one id of the intents set: 1 undone, 0 nothing to do (or not yet), -1. */
static int settle(rd_conn *c, const char *attempt, const char *id)
{
    struct rd_cmd cmd;
    proto_claim_read(&cmd, id);
    redisReply *r = store_call(c, &cmd);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 4) {
        if (r != NULL)
            freeReplyObject(r);
        return -1;
    }
    const char *sku = field(r, 2), *epoch = field(r, 3);
    if (field(r, 0) == NULL || field(r, 1) == NULL || sku == NULL || epoch == NULL) {
        freeReplyObject(r); /* placed, given up, or a claim with no plan: not ours */
        return intent_done(c, id);
    }
    char name[SEG_NAME_MAX + 1];
    snprintf(name, sizeof name, "%s", sku);
    long long ep = strtoll(epoch, NULL, 10);
    freeReplyObject(r);

    /* Take the claim over, only once it ran out (a live one is in flight), keeping
     * its plan: nothing of its attempt can land any more, and the plan undone is the
     * one the claim had when taken. */
    struct rd_reply out;
    proto_claim(&cmd, id, attempt, name, ep, SETTLE_LEASE_MS, NULL, RD_PLAN_KEEP, 0);
    int code = store_script(c, &cmd, &out) < 0 ? -1 : out.code;
    struct proto_plan p = {.n = 0};
    bool undo = false;
    if (code == RD_MISSING && out.record != NULL && out.plan != NULL &&
        proto_plan_parse(out.plan, &p) == 0) {
        char *dead = out.record;
        out.record = NULL;
        rd_reply_clear(&out);
        proto_claim(&cmd, id, attempt, name, ep, SETTLE_LEASE_MS, dead, RD_PLAN_KEEP, 0);
        free(dead);
        code = store_script(c, &cmd, &out) < 0 ? -1 : out.code;
        undo = code == RD_OK;
    }
    bool planless = code == RD_MISSING && (out.plan == NULL || out.plan[0] == '\0');
    rd_reply_clear(&out);
    int rc = code < 0 ? -1 : 0;
    for (int k = 0; undo && k < p.n && rc == 0; k++) {
        proto_undo_part(&cmd, p.placed, p.epoch, p.seg[k], id, k == 0);
        rc = store_step(c, &cmd, 0, NULL) == RD_OK ? 0 : -1;
    }
    proto_plan_free(&p);
    if (code == RD_OK && rc == 0) { /* the claim given up, its plan with it */
        proto_confirm(&cmd, id, attempt, NULL, name, ep);
        rc = store_step(c, &cmd, 0, NULL) == RD_OK ? 0 : -1;
    }
    if (rc < 0 || (code != RD_OK && code != RD_EXISTS && !planless))
        return rc; /* failed, or in flight: next time */
    return intent_done(c, id) < 0 ? -1 : undo;
}

int rd_intents_settle(rd_conn *c, const char *attempt, long long before_ms, int *settled)
{
    *settled = 0;
    struct rd_cmd cmd;
    proto_intents_due(&cmd, before_ms, 64);
    redisReply *r = store_call(c, &cmd);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        if (r != NULL)
            freeReplyObject(r);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < r->elements && rc == 0; i++) {
        const char *id = field(r, i);
        if (id == NULL || !seg_valid_name(id))
            continue;
        int got = settle(c, attempt, id);
        if (got > 0)
            (*settled)++;
        rc = got < 0 ? -1 : 0;
    }
    freeReplyObject(r);
    return rc;
}
