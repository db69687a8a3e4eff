/* adjust.c -- restock and rebalance on a Redis Cluster, on the event loop: an intent in
 * the meta, then one script per slot, a state machine (see adjust.h; the scripts are
 * lua/adjust_*.lua). */
#include "segments/redis/adjust.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/xalloc.h"
#include "segments/redis/keys.h"
#include "segments/redis/proto.h"

/* Rounds of BEGIN: each finishes at most one dead intent before this call's own. */
#define ADJUST_ROUNDS 4

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

/* ---- the state machine ---------------------------------------------------------- */

/* Where an adjust stands. Each state names what is out; `advance` sends the next. A
 * step of a `replicated` adjust (wait_ms > 0) is answered once its WAIT is too. */
enum adjust_state {
    AJ_PLAN,   /* rebalance, spread: each segment's stock read (x->left still out) */
    AJ_BEGIN,  /* ADJUST_BEGIN: this call's intent, or a dead one now this runner's */
    AJ_TAKE,   /* ADJUST_TAKE of segment x->k (a negative delta) */
    AJ_GIVE,   /* ADJUST_GIVE of segment x->k (a positive delta) */
    AJ_COMMIT, /* ADJUST_COMMIT of the intent run */
    AJ_MARKS,  /* its marks deleted (x->left HDELs still out) */
    AJ_YIELD,  /* NOT_REPLICATED: the lease given up (ADJUST_YIELD) */
};

struct aj;
/* A stock read of AJ_PLAN: the segment it reads. */
struct aj_read {
    struct aj *x;
    int i;
};

/* One adjust on its way (freed once answered). */
struct aj {
    rda_conn *c;
    enum adjust_state state;
    rda_reply_fn fn;
    void *arg;
    char sku[SEG_NAME_MAX + 1];     /* the meta's and request ids' SKU, */
    char placed[RD_SKU_PLACED_MAX]; /* and where its segments are */
    long long epoch, limit;
    int n, wait_ms;
    struct intent mine;    /* this call's intent (its delta: the plan) */
    struct intent dead;    /* a dead intent BEGIN answered, rolled forward first */
    struct intent *run;    /* the intent being run: &mine or &dead */
    int round;             /* rounds of BEGIN: each finishes at most one dead intent */
    int k;                 /* AJ_TAKE, AJ_GIVE: the segment */
    int left;              /* AJ_PLAN, AJ_MARKS: reads, deletes still out */
    struct aj_read *reads; /* AJ_PLAN: one per segment */
    bool unread;           /* AJ_PLAN: a read had no answer */
    long long taken;       /* units in transit: taken, not given yet */
    long long units;       /* a take's answer */
    long long gen;         /* this call's commit: the new gen */
    int code;              /* what the state's step answered: RD_*, or -1 (none) */
};

static void advance(struct aj *x);

static void aj_answer(struct aj *x, int code)
{
    /* A lease lost to another runner: it finishes the intent; retry. */
    struct store_reply r = {.code = code < 0            ? 0
                                    : code == RD_FENCED ? RD_BUSY
                                                        : code,
                            .value = code == RD_OK ? x->gen : 0};
    if (x->fn != NULL)
        x->fn(x->arg, code < 0 ? -1 : 0, &r);
    free(x->mine.delta);
    free(x->dead.delta);
    free(x->reads);
    free(x);
}

static void on_waited(void *arg, int rc, int replicas)
{
    struct aj *x = arg;
    if (rc < 0)
        x->code = -1;
    else if (replicas < 1)
        x->code = RD_NOT_REPLICATED;
    advance(x);
}

/* WAIT 1 wait_ms on the node that ran the last step -- the meta's (seg < 0) or
 * segment seg's -- so that no step is sent before the one before it is on a replica.
 * A step that only answers an earlier run writes all the same (the scripts say so),
 * so this WAIT covers that run too. */
static void wait_step(struct aj *x, int seg)
{
    char key[SEG_KEY_MAX];
    char *keys[1] = {key};
    if (seg < 0)
        seg_key_meta(key, x->sku);
    else
        seg_key_stock(key, x->placed, seg);
    rda_wait_keys(x->c, 1, keys, x->wait_ms, on_waited, x);
}

/* A step answered: its code (and what the state reads of it), then its WAIT where the
 * adjust is `replicated` and the step wrote. */
static void on_step(void *arg, const struct redisReply *r)
{
    struct aj *x = arg;
    struct rd_reply out;
    x->code = r != NULL && proto_scripted(r, &out) == 0 ? out.code : -1;
    if (x->code >= 0)
        rd_reply_clear(&out);
    if (x->state == AJ_BEGIN && x->code == RD_OK) {
        x->mine.until = r->elements > 1 ? proto_integer(r->element[1], -1) : -1;
        x->run = &x->mine;
        if (x->mine.until < 0)
            x->code = -1;
    } else if (x->state == AJ_BEGIN && x->code == RD_EXISTS) {
        memcpy(x->dead.owner, x->mine.owner, sizeof x->dead.owner);
        x->run = &x->dead;
        x->code = dead_intent(r, x->n, &x->dead) == 0 ? RD_OK : -1;
    } else if (x->state == AJ_TAKE || x->state == AJ_GIVE) {
        x->units =
            x->code == RD_OK && r->elements > 1 ? proto_integer(r->element[1], -1) : -1;
    } else if (x->state == AJ_COMMIT && x->code == RD_OK) {
        x->gen = r->elements > 1 ? proto_integer(r->element[1], 0) : 0;
    }
    /* BEGIN's REPLAYED: committed, 200 once a replica has it; the commit's too. */
    bool wrote = x->code == RD_OK || (x->code == RD_REPLAYED &&
                                      (x->state == AJ_BEGIN || x->state == AJ_COMMIT));
    if (wrote && x->wait_ms > 0 && x->state != AJ_YIELD) {
        wait_step(x, x->state == AJ_TAKE || x->state == AJ_GIVE ? x->k : -1);
        return;
    }
    advance(x);
}

static void on_read(void *arg, const struct redisReply *r)
{
    struct aj_read *rd = arg;
    struct aj *x = rd->x;
    if (r == NULL)
        x->unread = true;
    else
        x->mine.delta[rd->i] = proto_integer(r, 0); /* the stock, for now */
    if (--x->left == 0)
        advance(x);
}

static void on_dropped(void *arg, const struct redisReply *r)
{
    struct aj *x = arg;
    if (r == NULL)
        rd_log(true, "adjust marks", rda_error(x->c));
    if (--x->left == 0)
        advance(x);
}

/* Delete the marks intent `in` left in its segments (after its commit on a replica:
 * a commit lost in a failover leaves the intent, whose roll-forward needs them): how
 * many deletes went out. Best effort: a mark left behind is never read again (intent
 * ids are not reused), and goes with the segment's next reset. */
static int drop_marks(struct aj *x, const struct intent *in)
{
    char key[SEG_KEY_MAX];
    int sent = 0;
    for (int i = 0; i < x->n; i++) {
        if (in->delta[i] == 0)
            continue;
        struct rd_cmd cmd;
        cmd_plain(&cmd, "HDEL");
        cmd_key(&cmd, seg_key_adjust(key, x->placed, i));
        cmd_arg(&cmd, in->id);
        rda_raw(x->c, &cmd, on_dropped, x);
        sent++;
    }
    return sent;
}

/* A new round: a fresh intent, its plan (a rebalance's from the stocks read), BEGIN. */
static void begin_round(struct aj *x)
{
    random_hex(x->mine.id);
    random_hex(x->mine.owner);
    x->run = NULL;
    x->gen = 0;
    if (strcmp(x->mine.op, "restock") == 0 || x->n < 1) { /* (n < 1: STALE) */
        for (int i = 0; i < x->n; i++)
            x->mine.delta[i] = x->mine.add / x->n + (i < x->mine.add % x->n);
        x->state = AJ_BEGIN;
        struct rd_cmd cmd;
        cmd_begin(&cmd, x->sku, x->epoch, x->n, x->limit, &x->mine);
        rda_raw(x->c, &cmd, on_step, x);
        return;
    }
    x->state = AJ_PLAN;
    x->left = x->n;
    x->unread = false;
    for (int i = 0; i < x->n; i++) { /* answered in any order: one link per node */
        struct rd_cmd cmd;
        x->reads[i] = (struct aj_read){x, i};
        proto_segment_reads(&cmd, x->placed, i, false);
        rda_raw(x->c, &cmd, on_read, &x->reads[i]);
    }
}

/* The next take (from segment x->k on) of the intent run, else its gives, else its
 * commit. */
static void next_step(struct aj *x)
{
    struct intent *in = x->run;
    struct rd_cmd cmd;
    if (x->state == AJ_TAKE) {
        while (x->k < x->n && in->delta[x->k] >= 0)
            x->k++;
        if (x->k < x->n) {
            cmd_segment(&cmd, SCRIPT_ADJUST_TAKE, x->placed, x->k, x->epoch, in,
                        -in->delta[x->k]);
            rda_raw(x->c, &cmd, on_step, x);
            return;
        }
        x->state = AJ_GIVE;
        x->k = 0;
    }
    if (x->state == AJ_GIVE) {
        bool restock = strcmp(in->op, "restock") == 0;
        for (; x->k < x->n; x->k++) {
            long long give = in->delta[x->k];
            if (!restock && give > x->taken)
                give = x->taken;
            if (give <= 0)
                continue;
            x->taken -= restock ? 0 : give;
            cmd_segment(&cmd, SCRIPT_ADJUST_GIVE, x->placed, x->k, x->epoch, in, give);
            rda_raw(x->c, &cmd, on_step, x);
            return;
        }
    }
    x->state = AJ_COMMIT;
    cmd_commit(&cmd, x->sku, in);
    rda_raw(x->c, &cmd, on_step, x);
}

/* The intent run ended with `code`: NOT_REPLICATED gives its lease up at once (every
 * step it sent was answered, so none can land after another takes it over); a dead
 * one finished leads to the next round; else the answer. */
static void run_ended(struct aj *x, int code)
{
    if (code == RD_NOT_REPLICATED) {
        struct rd_cmd cmd;
        char key[SEG_KEY_MAX];
        x->state = AJ_YIELD;
        cmd_script(&cmd, SCRIPT_ADJUST_YIELD);
        cmd_key(&cmd, seg_key_meta(key, x->sku));
        cmd_arg(&cmd, x->run->id);
        cmd_arg(&cmd, x->run->owner);
        rda_raw(x->c, &cmd, on_step, x);
        return;
    }
    if (x->run == &x->dead && (code == RD_OK || code == RD_REPLAYED)) {
        if (++x->round < ADJUST_ROUNDS) {
            begin_round(x);
            return;
        }
        code = RD_BUSY; /* dead intents in every round */
    }
    aj_answer(x, code);
}

/* The transitions, in one place: x->code holds what the state's step answered. */
static void advance(struct aj *x)
{
    switch (x->state) {
    case AJ_PLAN: {
        if (x->unread) {
            aj_answer(x, -1);
            return;
        }
        long long total = 0, *delta = x->mine.delta;
        int nonempty = 0;
        for (int i = 0; i < x->n; i++) {
            total += delta[i];
            nonempty += delta[i] > 0;
        }
        if (strcmp(x->mine.op, "spread") == 0 &&
            (total < x->n ? total : x->n) <= nonempty) {
            aj_answer(x, RD_OK); /* a spread that would fill no more segments: gen 0 */
            return;
        }
        for (int i = 0; i < x->n; i++)
            delta[i] = total / x->n + (i < total % x->n) - delta[i];
        x->state = AJ_BEGIN;
        struct rd_cmd cmd;
        cmd_begin(&cmd, x->sku, x->epoch, x->n, x->limit, &x->mine);
        rda_raw(x->c, &cmd, on_step, x);
        return;
    }
    case AJ_BEGIN:
        if (x->run == NULL) { /* no intent: REPLAYED (on a replica), or refused */
            aj_answer(x, x->code);
            return;
        }
        if (x->code != RD_OK) { /* an intent not on a replica: its lease given up */
            run_ended(x, x->code);
            return;
        }
        x->taken = 0;
        x->state = AJ_TAKE;
        x->k = 0;
        next_step(x);
        return;
    case AJ_TAKE:
        if (x->code == RD_OK && (x->units < 0 || x->units > -x->run->delta[x->k]))
            x->code = -1; /* not what ADJUST_TAKE answers */
        /* fall through */
    case AJ_GIVE:
        if (x->code != RD_OK) {
            run_ended(x, x->code);
            return;
        }
        if (x->state == AJ_TAKE)
            x->taken += x->units;
        x->k++;
        next_step(x);
        return;
    case AJ_COMMIT:
        if (x->code == RD_OK) {
            x->state = AJ_MARKS;
            if ((x->left = drop_marks(x, x->run)) > 0)
                return;
        }
        run_ended(x, x->code);
        return;
    case AJ_MARKS:
        run_ended(x, RD_OK);
        return;
    case AJ_YIELD:
        if (x->code < 0)
            rd_log(true, "adjust yield", rda_error(x->c));
        aj_answer(x, RD_NOT_REPLICATED);
        return;
    }
}

void rda_adjust_cluster(rda_conn *c, const char *placed, long long epoch, int segments,
                        const char *op, long long add, long long limit, const char *rid,
                        const char *sig, int wait_ms, rda_reply_fn fn, void *arg)
{
    struct aj *x = seg_calloc(1, sizeof *x);
    x->c = c;
    x->fn = fn;
    x->arg = arg;
    snprintf(x->placed, sizeof x->placed, "%s", placed);
    snprintf(x->sku, sizeof x->sku, "%.*s", (int)strcspn(placed, "/"), placed);
    x->epoch = epoch;
    x->limit = limit;
    x->n = segments;
    x->wait_ms = wait_ms;
    x->mine.add = add;
    snprintf(x->mine.op, sizeof x->mine.op, "%s", op);
    snprintf(x->mine.rid, sizeof x->mine.rid, "%s", rid != NULL ? rid : "");
    snprintf(x->mine.sig, sizeof x->mine.sig, "%s", rid != NULL ? sig : "");
    size_t n = segments > 0 ? (size_t)segments : 1;
    x->mine.delta = seg_calloc(n, sizeof *x->mine.delta);
    x->dead.delta = seg_calloc(n, sizeof *x->dead.delta);
    x->reads = seg_calloc(n, sizeof *x->reads);
    begin_round(x);
}
