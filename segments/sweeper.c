/* sweeper.c -- the thread that settles dead multi-segment intents (through the store
 * seam, on a loop of its own) and runs the automatic rebalance on a cluster (see
 * sweeper.h). */
#include "segments/sweeper.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/periodic.h"
#include "base/xalloc.h"
#include "segments/clock.h"
#include "segments/rand.h"
#include "segments/sku.h"
#include "segments/redis/admin.h"

/* How often it looks, and how old an intent must be to be looked at (younger ones
 * are in flight: their claims would answer BUSY anyway); how many ids one look takes
 * (the rest wait for the next). */
#define SWEEP_EVERY_MS 1000
#define SWEEP_AGE_MS 2000
#define SWEEP_BATCH 64
/* How long the sweeper holds a claim it took over while it undoes the plan. */
#define SETTLE_LEASE_MS 15000

struct sweeper {
    inv *v;
    /* The thread's alone: c.adm (blocking) reads the settings of the SKUs it
     * rebalances; c.base and c.st, a loop and a store of the sweeper's own, made on
     * first use (by `make`, the process's store factory), run the rebalances and
     * settle the intents with the store's asynchronous ops, the loop turned until
     * each answers. */
    inv_conn c;
    sweeper_store_fn make;
    int64_t next; /* the thread's: the next look at the intents */
    periodic *thread;
    pthread_mutex_t mu; /* guards what follows */
    int nspread;        /* SKUs waiting for their rebalance, oldest first */
    char spread[SWEEP_QUEUE][SEG_NAME_MAX + 1];
};

/* The sweeper's loop and store, made on first use; the store following the mode
 * (nothing is under way between looks). */
static store *own_store(sweeper *s)
{
    if (s->c.st == NULL) {
        s->c.base = event_base_new();
        if (s->c.base == NULL) {
            fputs("inventoryd: event_base_new failed\n", stderr);
            abort();
        }
        s->c.st = s->make(s->v, s->c.base);
    }
    if (store_mode_behind(s->c.st))
        s->c.st->ops->mode_follow(s->c.st);
    return s->c.st;
}

/* The rebalances asked for, run one by one with the mutex let go, on the sweeper's
 * loop (sku_spread). */
static void spread_all(sweeper *s, periodic *p)
{
    pthread_mutex_lock(&s->mu);
    if (s->nspread > 0)
        (void)own_store(s);
    while (s->nspread > 0 && !periodic_stopping(p)) {
        char sku[SEG_NAME_MAX + 1];
        memcpy(sku, s->spread[0], sizeof sku);
        pthread_mutex_unlock(&s->mu);
        /* A spread that moved stock counts itself and drops every loop's cached
         * settings (a new generation); one with nothing to do neither. */
        (void)sku_spread(&s->c, sku);
        pthread_mutex_lock(&s->mu);
        /* Dequeued only now: a loop asking meanwhile finds it still queued. */
        s->nspread--;
        memmove(s->spread[0], s->spread[1], sizeof s->spread[0] * (size_t)s->nspread);
    }
    pthread_mutex_unlock(&s->mu);
}

/* An answer of the sweeper's store, waited for on its loop. */
struct answer {
    bool done;
    int rc;                  /* the op's: 0, or -1 (no answer) */
    int code;                /* STORE_* */
    char *dead, *plan;       /* CLAIM MISSING: the dead attempt and its plan (taken) */
    int n;                   /* intents_due: how many, and */
    struct store_intent *in; /* which (copied) */
};

static void on_reply(void *arg, int rc, struct store_reply *r)
{
    struct answer *a = arg;
    a->done = true;
    a->rc = rc;
    a->code = rc < 0 ? -1 : r->code;
    if (rc == 0 && r->code == STORE_MISSING) {
        a->dead = r->record;
        a->plan = r->plan;
        r->record = r->plan = NULL;
    }
}

static void on_int(void *arg, int rc, int value)
{
    struct answer *a = arg;
    (void)value;
    a->done = true;
    a->rc = rc;
}

static void on_due(void *arg, int rc, int n, const struct store_intent *in)
{
    struct answer *a = arg;
    a->done = true;
    a->rc = rc;
    a->n = rc < 0 ? 0 : n;
    if (a->n > 0) {
        a->in = seg_malloc(sizeof *a->in * (size_t)a->n);
        memcpy(a->in, in, sizeof *a->in * (size_t)a->n);
    }
}

/* Turn the sweeper's loop until `a` is answered (every op answers, within its
 * deadline), then ready `a` for the next op. */
static void wait_for(sweeper *s, struct answer *a)
{
    while (!a->done)
        event_base_loop(s->c.base, EVLOOP_ONCE);
    a->done = false;
}

/* The id taken out of the intents set: 0, or -1. */
static int intent_drop(sweeper *s, const char *id)
{
    struct answer a = {0};
    STORE_CALL(s->c.st, intent, id, false, on_int, &a);
    wait_for(s, &a);
    return a.rc;
}

/* Settle intent `in` as `attempt`, with the ops an order settles its own plan with
 * (multi.c): its claim taken over, only once it ran out (a live one is in flight),
 * keeping its plan, so that nothing of the dead attempt can land any more and the
 * plan undone is the one the claim had; the plan undone; the claim given up; the id
 * out of the set. 1 a plan undone, 0 nothing to undo (or not yet: the next look
 * tries again), -1 no answer (what was done stays done; the claim taken over runs
 * out, and the next look takes it over from this attempt). */
static int settle(sweeper *s, const char *attempt, const struct store_intent *in)
{
    if (in->sku[0] == '\0') /* placed, given up, or no plan: nothing to undo */
        return intent_drop(s, in->id);
    store *st = s->c.st;
    struct answer a = {0};
    STORE_CALL(st, claim, in->id, attempt, in->sku, in->epoch, SETTLE_LEASE_MS, NULL,
               STORE_PLAN_KEEP, 0, on_reply, &a);
    wait_for(s, &a);
    bool undo = false;
    if (a.code == STORE_MISSING && a.dead != NULL && a.plan != NULL &&
        a.plan[0] != '\0') { /* a dead claim with a plan: take it over, naming it */
        char *dead = a.dead, *plan = a.plan;
        a = (struct answer){0};
        STORE_CALL(st, claim, in->id, attempt, in->sku, in->epoch, SETTLE_LEASE_MS, dead,
                   STORE_PLAN_KEEP, 0, on_reply, &a);
        wait_for(s, &a);
        free(dead);
        /* The claim's now; a plan that is none (undo refuses it) is left alone. */
        undo = a.code == STORE_OK && STORE_CALL(st, undo, in->id, plan, on_int, &a) == 0;
        free(plan);
        if (undo) {
            wait_for(s, &a);
            if (a.rc < 0)
                return -1;
        } else if (a.code == STORE_OK) {
            return 0;
        }
    }
    /* With no plan left the claim is dead for good (the order gave up), and with no
     * claim the id was placed: the id only goes out of the set. */
    bool planless = a.code == STORE_MISSING && (a.plan == NULL || a.plan[0] == '\0');
    int code = a.code;
    free(a.dead);
    free(a.plan);
    if (code == STORE_OK) { /* the claim given up, its plan with it */
        a = (struct answer){0};
        STORE_CALL(st, confirm, in->id, attempt, NULL, in->sku, in->epoch, on_reply, &a);
        wait_for(s, &a);
        if (a.code != STORE_OK)
            return -1;
    } else if (code != STORE_EXISTS && !planless) {
        return code < 0 ? -1 : 0; /* in flight, or another's: next time */
    }
    return intent_drop(s, in->id) < 0 ? -1 : undo;
}

/* The intents older than SWEEP_AGE_MS settled, one by one, while the thread runs:
 * how many plans were undone. */
static int settle_all(sweeper *s, periodic *p)
{
    store *st = own_store(s);
    if (!(store_caps(st) & STORE_CAP_RECORD_APART) || st->ops->intents_due == NULL)
        return 0;
    struct answer a = {0};
    STORE_CALL(st, intents_due, base_wall_ms() - SWEEP_AGE_MS, SWEEP_BATCH, on_due, &a);
    wait_for(s, &a);
    char attempt[33];
    inv_random_hex(attempt);
    int settled = 0;
    for (int k = 0; k < a.n && !periodic_stopping(p); k++) {
        int got = settle(s, attempt, &a.in[k]);
        if (got < 0)
            break; /* the store is not answering: the rest next time */
        settled += got;
    }
    free(a.in);
    return settled;
}

/* One round (periodic.h): the rebalances asked for, then the intents when their tick
 * is due. Returns the time to that tick; a request wakes it before. */
static int sweep(periodic *p, void *arg)
{
    sweeper *s = arg;
    spread_all(s, p);
    if (periodic_stopping(p) || inv_now_ms() < s->next)
        return (int)(s->next - inv_now_ms());
    s->next = inv_now_ms() + SWEEP_EVERY_MS;
    /* Standalone: no intents (it may become a cluster; its store is made then). */
    int settled = rd_conn_cluster(s->c.rd) ? settle_all(s, p) : 0;
    if (settled > 0)
        stat_add(s->v, STAT_INTENTS_UNDONE, settled);
    return (int)(s->next - inv_now_ms());
}

sweeper *sweeper_create(inv *v, const struct rd_target *to, sweeper_store_fn make,
                        char *err, size_t errlen)
{
    sweeper *s = seg_calloc(1, sizeof *s);
    s->v = v;
    s->make = make;
    s->c.v = v;
    s->c.adm = rd_admin_create(to, &v->stats[STAT_REDIS_ERRORS]);
    s->c.rd = rd_admin_conn(s->c.adm);
    inv_rand_seed(&s->c);
    s->next = inv_now_ms() + SWEEP_EVERY_MS;
    pthread_mutex_init(&s->mu, NULL);
    char why[128];
    s->thread = periodic_start(sweep, s, SWEEP_EVERY_MS, why, sizeof why);
    if (s->thread == NULL) {
        snprintf(err, errlen, "sweeper thread: %s", why);
        s->c.adm->ops->free(s->c.adm);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return NULL;
    }
    return s;
}

void sweeper_free(sweeper *s)
{
    if (s == NULL)
        return;
    periodic_stop(s->thread);
    inv_conn_clear(&s->c); /* the thread is gone: its loop, store and tables are ours */
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void sweeper_spread(sweeper *s, const char *sku)
{
    pthread_mutex_lock(&s->mu);
    bool queued = false;
    for (int i = 0; i < s->nspread && !queued; i++)
        queued = strcmp(s->spread[i], sku) == 0;
    if (!queued && s->nspread < SWEEP_QUEUE) {
        snprintf(s->spread[s->nspread++], sizeof s->spread[0], "%s", sku);
        periodic_wake(s->thread);
    }
    pthread_mutex_unlock(&s->mu);
}
