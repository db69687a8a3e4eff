/* adjust.c -- restock and rebalance on a Redis Cluster: an intent in the meta, then one
 * script per slot (see adjust.h; the scripts are lua/adjust_*.lua). */
#include "segments/redis/adjust.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/xalloc.h"
#include "segments/redis/keys.h"
#include "segments/redis/proto.h"
#include "segments/redis/store.h"

/* Rounds of BEGIN: each finishes at most one dead intent before this call's own. */
#define ADJUST_ROUNDS 4

/* One call's fixed inputs: the SKU, where its segments are, and how long each step
 * waits for a replica (0: durability async, no WAIT). */
struct run {
    rd_conn *c;
    const char *sku;
    const char *placed;
    long long epoch;
    int n;
    int wait_ms;
};

/* An intent as BEGIN recorded it, or answered it of a dead one. */
struct intent {
    char id[65];
    char op[16];
    long long add;
    char rid[SEG_NAME_MAX + 1];
    char sig[128];
    long long *delta; /* one per segment */
    char owner[33];   /* this runner's token */
    long long until;  /* its lease end, ms on the meta node's clock */
};

/* 32 hex digits from the kernel (intent ids, runner tokens: never reused). */
static void random_hex(char out[33])
{
    unsigned char b[16];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t n = getrandom(b + got, sizeof b - got, 0);
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "inventoryd: getrandom: %s\n", strerror(errno));
            abort();
        }
        got += n > 0 ? (size_t)n : 0;
    }
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* ---- what each step sends ------------------------------------------------------ */

/* The plan as ADJUST_BEGIN stores it: "d0,d1,..." (malloc'd). */
static char *plan_text(const long long *delta, int n)
{
    size_t cap = (size_t)n * 21 + 1, at = 0;
    char *s = seg_malloc(cap);
    s[0] = '\0';
    for (int i = 0; i < n; i++)
        at += (size_t)snprintf(s + at, cap - at, "%s%lld", i ? "," : "", delta[i]);
    return s;
}

/* Parse a stored plan into delta[0..n-1]: 0, or -1 when it is not n integers. */
static int plan_parse(const char *s, long long *delta, int n)
{
    for (int i = 0; i < n; i++) {
        char *end;
        errno = 0;
        delta[i] = strtoll(s, &end, 10);
        if (errno != 0 || end == s || *end != (i + 1 < n ? ',' : '\0'))
            return -1;
        s = end + (i + 1 < n);
    }
    return 0;
}

static void request_key(char *key, const char *sku, const char *rid)
{
    if (rid[0] != '\0')
        seg_key_request(key, sku, rid);
    else
        seg_key_meta(key, sku); /* a placeholder in the meta's slot: never written */
}

static void cmd_begin(struct rd_cmd *c, const char *sku, long long epoch, int n,
                      long long limit, const struct intent *in)
{
    char key[SEG_KEY_MAX];
    char *plan = plan_text(in->delta, n);
    cmd_script(c, SCRIPT_ADJUST_BEGIN);
    cmd_key(c, seg_key_meta(key, sku));
    request_key(key, sku, in->rid);
    cmd_key(c, key);
    cmd_arg(c, in->op);
    cmd_argll(c, in->add);
    cmd_argll(c, epoch);
    cmd_argll(c, n);
    cmd_argll(c, limit);
    cmd_arg(c, in->sig);
    cmd_arg(c, in->id);
    cmd_arg(c, plan);
    cmd_argll(c, ADJUST_LEASE_MS);
    cmd_arg(c, in->rid);
    cmd_arg(c, in->owner);
    free(plan);
}

/* ADJUST_TAKE or ADJUST_GIVE of `units` in segment i of `placed`. */
static void cmd_segment(struct rd_cmd *c, enum script_id script, const char *placed,
                        int i, long long epoch, const struct intent *in, long long units)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, script);
    cmd_key(c, seg_key_stock(key, placed, i));
    cmd_key(c, seg_key_epoch(key, placed, i));
    cmd_key(c, seg_key_adjust(key, placed, i));
    cmd_argll(c, epoch);
    cmd_arg(c, in->id);
    cmd_argll(c, units);
    cmd_argll(c, in->until);
}

static void cmd_commit(struct rd_cmd *c, const char *sku, const struct intent *in)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_ADJUST_COMMIT);
    cmd_key(c, seg_key_meta(key, sku));
    request_key(key, sku, in->rid);
    cmd_key(c, key);
    cmd_arg(c, in->id);
    cmd_arg(c, in->owner);
    cmd_argll(c, strcmp(in->op, "restock") == 0 ? in->add : 0);
    cmd_arg(c, in->sig);
}

/* The string at element i of `r` into buf[0..len): 0, or -1 when absent or too long. */
static int element_str(const redisReply *r, size_t i, char *buf, size_t len)
{
    if (i >= r->elements || r->element[i]->type != REDIS_REPLY_STRING ||
        r->element[i]->len >= len)
        return -1;
    memcpy(buf, r->element[i]->str, r->element[i]->len + 1);
    return 0;
}

/* A dead intent as BEGIN answered it ({EXISTS, until, id, op, add, plan, rid, sig})
 * into `in` (its delta has n entries): 0, or -1 when it does not read as one. */
static int dead_intent(const redisReply *r, int n, struct intent *in)
{
    if (r->elements != 8 || element_str(r, 2, in->id, sizeof in->id) != 0 ||
        element_str(r, 3, in->op, sizeof in->op) != 0 ||
        element_str(r, 6, in->rid, sizeof in->rid) != 0 ||
        element_str(r, 7, in->sig, sizeof in->sig) != 0 ||
        r->element[5]->type != REDIS_REPLY_STRING)
        return -1;
    in->until = proto_integer(r->element[1], -1);
    in->add = proto_integer(r->element[4], -1);
    if (in->until < 0 || in->add < 0)
        return -1;
    return plan_parse(r->element[5]->str, in->delta, n);
}

/* ---- the plan and the steps ----------------------------------------------------- */

/* This call's plan into delta[0..n-1]: 1 (a plan), 0 (a spread that would fill no more
 * segments: nothing to do) or -1 (the stocks could not be read). */
static int plan(rd_conn *c, const char *placed, int n, const char *op, long long add,
                long long *delta)
{
    if (strcmp(op, "restock") == 0) {
        for (int i = 0; i < n; i++)
            delta[i] = add / n + (i < add % n);
        return 1;
    }
    struct rd_cmd *cmds = seg_calloc((size_t)n, sizeof *cmds);
    redisReply **r = seg_calloc((size_t)n, sizeof *r);
    for (int i = 0; i < n; i++)
        proto_segment_reads(&cmds[i], placed, i, false);
    int rc = store_pipeline(c, n, cmds, r);
    for (int i = 0; i < n; i++)
        cmd_free(&cmds[i]);
    free(cmds);
    long long total = 0;
    int nonempty = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        delta[i] = proto_integer(r[i], 0); /* the stock, for now */
        total += delta[i];
        nonempty += delta[i] > 0;
        freeReplyObject(r[i]);
    }
    free(r);
    if (rc != 0)
        return -1;
    if (strcmp(op, "spread") == 0 && (total < n ? total : n) <= nonempty)
        return 0;
    for (int i = 0; i < n; i++)
        delta[i] = total / n + (i < total % n) - delta[i];
    return 1;
}

/* Delete the marks intent `in` left in its segments (after its commit). Best effort:
 * a mark left behind is never read again (intent ids are not reused), and goes with
 * the segment's next reset. */
static void drop_marks(const struct run *ru, const struct intent *in)
{
    char key[SEG_KEY_MAX];
    for (int i = 0; i < ru->n; i++) {
        if (in->delta[i] == 0)
            continue;
        struct rd_cmd cmd;
        cmd_plain(&cmd, "HDEL");
        cmd_key(&cmd, seg_key_adjust(key, ru->placed, i));
        cmd_arg(&cmd, in->id);
        redisReply *r = store_call(ru->c, &cmd);
        if (r == NULL) {
            rd_log(true, "adjust marks", rd_conn_error(ru->c));
            return;
        }
        freeReplyObject(r);
    }
}

/* After a step of a `replicated` adjust (wait_ms > 0): WAIT 1 wait_ms on the node that
 * ran it -- the meta's (seg < 0) or segment seg's -- so that no step is sent before the
 * one before it is on a replica. A step that only answers an earlier run writes all the
 * same (the scripts say so), so this connection's WAIT covers that run too. RD_OK (on
 * a replica, or wait_ms 0), RD_NOT_REPLICATED, or -1 (no answer). */
static int on_replica(const struct run *ru, int seg)
{
    if (seg < 0)
        return rd_wait_step(ru->c, ru->wait_ms, ru->placed, 0, NULL, ru->sku);
    return rd_wait_step(ru->c, ru->wait_ms, ru->placed, 1, &seg, NULL);
}

/* Step `cmd` (ADJUST_TAKE or ADJUST_GIVE of segment i), then its WAIT: RD_OK with
 * *units (what the step answers it moved), or the step's code, RD_NOT_REPLICATED or
 * -1. */
static int segment_step(const struct run *ru, struct rd_cmd *cmd, int i, long long *units)
{
    redisReply *r = NULL;
    int code = store_step(ru->c, cmd, 1u << RD_OK, &r);
    if (code != RD_OK)
        return code;
    *units = r->elements > 1 ? proto_integer(r->element[1], -1) : -1;
    freeReplyObject(r);
    return on_replica(ru, i);
}

/* Run the takes and gives of intent `in` and commit it, each step on a replica before
 * the next when ru->wait_ms > 0: the code (OK with *gen, REPLAYED, STALE, FENCED,
 * NOT_REPLICATED: stopped after the step that reached no replica), or -1 when Redis
 * gave no usable answer. The marks are deleted only after a commit on a replica: a
 * commit lost in a failover leaves the intent, whose roll-forward needs them. */
static int finish(const struct run *ru, const struct intent *in, long long *gen)
{
    struct rd_cmd cmd;
    redisReply *r = NULL;
    int code;
    long long taken = 0; /* units in transit: taken, not given yet */
    for (int i = 0; i < ru->n; i++) {
        if (in->delta[i] >= 0)
            continue;
        long long took = -1;
        cmd_segment(&cmd, SCRIPT_ADJUST_TAKE, ru->placed, i, ru->epoch, in,
                    -in->delta[i]);
        if ((code = segment_step(ru, &cmd, i, &took)) != RD_OK)
            return code;
        if (took < 0 || took > -in->delta[i])
            return -1; /* not what ADJUST_TAKE answers */
        taken += took;
    }
    bool restock = strcmp(in->op, "restock") == 0;
    for (int i = 0; i < ru->n; i++) {
        long long give = in->delta[i], gave;
        if (!restock && give > taken)
            give = taken;
        if (give <= 0)
            continue;
        taken -= restock ? 0 : give;
        cmd_segment(&cmd, SCRIPT_ADJUST_GIVE, ru->placed, i, ru->epoch, in, give);
        if ((code = segment_step(ru, &cmd, i, &gave)) != RD_OK)
            return code;
    }
    cmd_commit(&cmd, ru->sku, in);
    code = store_step(ru->c, &cmd, 1u << RD_OK, &r);
    if (code != RD_OK && code != RD_REPLAYED)
        return code;
    if (code == RD_OK) {
        *gen = r->elements > 1 ? proto_integer(r->element[1], 0) : 0;
        freeReplyObject(r);
    }
    int held = on_replica(ru, -1);
    if (held != RD_OK)
        return held;
    if (code == RD_OK)
        drop_marks(ru, in);
    return code;
}

/* The runner of intent `in` gives its lease up at once (ADJUST_YIELD): for a runner
 * that stopped with every step it sent answered, so that nothing of it can land after
 * another takes the intent over. Best effort: without it the lease runs out. */
static void give_up_lease(const struct run *ru, const struct intent *in)
{
    char key[SEG_KEY_MAX];
    struct rd_cmd cmd;
    cmd_script(&cmd, SCRIPT_ADJUST_YIELD);
    cmd_key(&cmd, seg_key_meta(key, ru->sku));
    cmd_arg(&cmd, in->id);
    cmd_arg(&cmd, in->owner);
    if (store_step(ru->c, &cmd, 0, NULL) < 0)
        rd_log(true, "adjust yield", rd_conn_error(ru->c));
}

/* BEGIN answered intent `in` (this call's, or a dead one now this runner's): WAIT for
 * it on a replica, then finish it; a step that reached no replica gives the lease up.
 * finish's codes. */
static int run_intent(const struct run *ru, const struct intent *in, long long *gen)
{
    int code = on_replica(ru, -1);
    if (code == RD_OK)
        code = finish(ru, in, gen);
    if (code == RD_NOT_REPLICATED)
        give_up_lease(ru, in);
    return code;
}

/* The meta's placement salt, when the SKU is still `epoch` with `segments`: 1 (found
 * so), 0 (not so: STALE) or -1. */
static int current_salt(rd_conn *c, const char *sku, long long epoch, int segments,
                        int *salt)
{
    struct rd_cmd cmd;
    proto_meta_read(&cmd, sku);
    redisReply *r = store_call(c, &cmd);
    struct rd_meta meta = {.segments = 0};
    int found = 0;
    int rc = r != NULL ? proto_meta(r, &meta, &found) : -1;
    if (r != NULL)
        freeReplyObject(r);
    if (rc < 0)
        return -1;
    *salt = meta.salt;
    return found && meta.epoch == epoch && meta.segments == segments;
}

int adjust_cluster(rd_conn *c, const char *sku, long long epoch, int segments,
                   const char *op, long long add, long long limit, const char *rid,
                   const char *sig, int wait_ms, struct rd_reply *out)
{
    memset(out, 0, sizeof *out);
    int n = segments, salt = 0;
    int found = n > 0 ? current_salt(c, sku, epoch, n, &salt) : 0;
    if (found <= 0) {
        out->code = RD_STALE;
        return found < 0 ? -1 : 0;
    }
    char placed[RD_SKU_PLACED_MAX];
    seg_key_placed(placed, sku, salt);
    const struct run ru = {
        .c = c, .sku = sku, .placed = placed, .epoch = epoch, .n = n, .wait_ms = wait_ms};
    long long *mine = seg_calloc((size_t)n, sizeof *mine);
    long long *dead = seg_calloc((size_t)n, sizeof *dead);
    int rc = 0;
    out->code = RD_BUSY; /* dead intents in every round */
    for (int round = 0; round < ADJUST_ROUNDS; round++) {
        struct intent in = {.add = add, .delta = mine};
        snprintf(in.op, sizeof in.op, "%s", op);
        snprintf(in.rid, sizeof in.rid, "%s", rid != NULL ? rid : "");
        snprintf(in.sig, sizeof in.sig, "%s", rid != NULL ? sig : "");
        random_hex(in.id);
        random_hex(in.owner);
        int planned = plan(c, placed, n, op, add, mine);
        if (planned <= 0) { /* 0: a spread with nothing to do (OK, value 0) */
            out->code = RD_OK;
            rc = planned;
            break;
        }
        struct rd_cmd cmd;
        redisReply *r = NULL;
        cmd_begin(&cmd, sku, epoch, n, limit, &in);
        int code = store_step(c, &cmd, 1u << RD_OK | 1u << RD_EXISTS, &r);
        if (code == RD_EXISTS) { /* a dead intent, ours now: roll it forward first */
            struct intent was = {.delta = dead};
            memcpy(was.owner, in.owner, sizeof was.owner);
            int ok = dead_intent(r, n, &was);
            freeReplyObject(r);
            long long gen = 0;
            code = ok == 0 ? run_intent(&ru, &was, &gen) : -1;
            if (code == RD_OK || code == RD_REPLAYED)
                continue;
        } else if (code == RD_OK) {
            in.until = r->elements > 1 ? proto_integer(r->element[1], -1) : -1;
            freeReplyObject(r);
            code = in.until < 0 ? -1 : run_intent(&ru, &in, &out->value);
        } else if (code == RD_REPLAYED) { /* committed: 200 once a replica has it */
            int held = on_replica(&ru, -1);
            code = held == RD_OK ? code : held;
        }
        rc = code < 0 ? -1 : 0;
        /* A lease lost to another runner: it finishes the intent; retry. */
        out->code = code < 0 ? 0 : code == RD_FENCED ? RD_BUSY : code;
        break;
    }
    free(mine);
    free(dead);
    return rc;
}
