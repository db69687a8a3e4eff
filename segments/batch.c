/* batch.c -- group commit: one hold of a segment's lock sells the orders of this loop
 * queued for the segment, in one fenced DEDUCT_BATCH (the SKU's "batch"). */
#include <stdlib.h>
#include <string.h>

#include "segments/engine_internal.h"
#include "segments/record.h"
#include "segments/ring.h"
#include "base/xalloc.h"

/* Hold 0: the groups of a loop out at once (DEDUCT_BATCHes sent, not answered).
 * With 100 connections on 2 loops and 20 segments a loop has ~50 orders in flight:
 * a group per turn and segment averaged ~2.5 orders, and each script costs Redis
 * about what 2 orders' writes do. One out at a time lets the next group gather every
 * order that comes meanwhile, and one segment per group (batch_join) lets it hold
 * them all; the loop parses requests while it waits, so nothing waits on it. */
#define BATCH_FLIGHT 1
/* ... but a group waits at most this long (ms): a slow answer (a loaded Redis, or one
 * that never comes before the store's timeout) does not hold the next ones back. */
#define BATCH_WAIT_MS 2

/* The unsent orders of a loop for one segment (hold 0). */
struct bgroup {
    struct bgroup *next;
    lsku *s;
    int seg;
    long long epoch;
    int n;
    long long qty;   /* the orders' units */
    int64_t born_ms; /* when its first order joined */
    struct ord *m[];
};

/* A batch in flight: its orders (m[0] the holder), for the answer; `e` when it is
 * one of e->batch_out. */
struct batch {
    store_reply_fn each;
    engine *e;
    int n;
    struct ord *m[];
};

/* May `w`, queued on this loop, ride on o's hold? One segment's order of the same
 * SKU version whose record goes with the deduction (a client id on a cluster has its
 * record apart, CONFIRMed under its claim: it takes the lock itself). */
static bool may_join(const struct ord *o, const struct ord *w)
{
    return w->view.epoch == o->view.epoch && o->seg < w->n && w->pred == NULL &&
           w->succ == NULL && !w->claim_ok && w->lh == NULL &&
           strcmp(w->placed, o->placed) == 0;
}

int batch_gather(struct ord *o, void (*handed)(struct lwait *, int), struct ord ***out,
                 struct lwait **rest)
{
    engine *e = o->e;
    int max = o->view.cfg.batch;
    /* the stock o's ACQUIRE saw there, else the least this loop saw: -1 unknown */
    long long left = o->seen[o->seg] >= 0 ? o->seen[o->seg] : ltab_hint(o->s, o->seg);
    if (left >= 0)
        left -= o->qty;
    struct ord **m = NULL;
    int n = 0;
    *rest = NULL;
    while (n + 1 < max && (left < 0 || left > 0)) {
        struct lwait *w = ltab_next_holder(o->s, o->seg);
        if (w == NULL)
            break;
        struct ord *x = w->handed == handed ? ord_of_wait(w) : NULL;
        if (x == NULL || !may_join(o, x) || (left >= 0 && x->qty > left)) {
            *rest = w; /* out of the queue: the caller hands it the claim */
            break;
        }
        if (left >= 0)
            left -= x->qty;
        if (n % 16 == 0)
            m = seg_realloc(m, sizeof *m * (size_t)(n + 16));
        m[n++] = x;
        x->waiting = false;
        event_del(x->timer);
        x->seg = o->seg;
        x->handed = -1;
        /* its round as if it had started at the segment and taken it */
        ord_round_reset(x, ring_start(x->seg, x->n, e->home, e->homes), 1);
        stat_observe(e->v, HIST_LOCK_WAIT, (inv_now_ms() - x->started_ms) * 1000);
    }
    *out = m;
    return n;
}

static void on_batch(void *arg, int rc, int n, struct store_reply *r)
{
    struct batch *b = arg;
    struct store_reply none = {0};
    if (b->e != NULL && --b->e->batch_out < BATCH_FLIGHT && b->e->groups != NULL)
        event_active(b->e->flush, EV_TIMEOUT, 1); /* the groups that waited for it */
    for (int k = 0; k < n && k < b->n; k++)
        b->each(b->m[k], rc, rc == 0 ? &r[k] : &none);
    free(b);
}

/* One order of the batch as its DEDUCT would have it (engine.c send_deduct). */
static void prepare(struct ord *x, struct store_batch_order *out)
{
    ord_set(x, ORD_DEDUCT);
    if (!x->has_id) /* a fresh id: made for the segment's slot */
        STORE_CALL(x->e->st, id_for_segment, x->placed, x->seg, x->res.order_id);
    free(x->record);
    x->record =
        record_build(x->res.order_id, x->sku, x->qty, 1, &x->seg, &x->qty, "confirmed");
    x->confirm = false;
    /* the order's own attempt: unique, and unused by a batch's orders otherwise
     * (they hold no claim) */
    *out = (struct store_batch_order){x->res.order_id, x->attempt, x->record, x->qty};
}

void batch_send(struct ord *o, struct ord **m, int n, store_reply_fn each)
{
    engine *e = o->e;
    struct batch *b = seg_malloc(sizeof *b + sizeof *b->m * (size_t)(n + 1));
    struct store_batch_order *orders = seg_malloc(sizeof *orders * (size_t)(n + 1));
    b->each = each;
    b->e = NULL;
    b->n = n + 1;
    b->m[0] = o;
    memcpy(b->m + 1, m, sizeof *m * (size_t)n);
    free(m);
    for (int k = 0; k < b->n; k++)
        prepare(b->m[k], &orders[k]);
    lease_stop(o); /* as send_deduct: the renewals would run after the DEDUCT */
    stat_add(e->v, STAT_BATCHES, 1);
    stat_add(e->v, STAT_BATCHED, b->n);
    bool sent = STORE_CALL(e->st, deduct_batch, o->placed, o->view.epoch, o->seg,
                           o->token, STORE_NO_FENCE, b->n, orders, on_batch, b);
    free(orders);
    if (!sent) { /* (not expected: may_join keeps records apart out) nothing written */
        STORE_CALL(e->st, release, o->placed, o->seg, o->token, NULL, NULL);
        struct store_reply fenced = {.code = STORE_FENCED};
        for (int k = 0; k < b->n; k++)
            b->each(b->m[k], 0, &fenced);
        free(b);
    }
}

bool batch_gathers(const struct ord *o)
{
    return o->view.cfg.batch > 1 && !o->claim_ok && o->view.cfg.lock == SKU_LOCK_STORE &&
           (store_caps(o->e->st) & STORE_CAP_BATCH);
}

/* The loop's unsent group for o's SKU version at segment `seg` that o may join:
 * not full, and, when o would come from another segment (`redirect`), at home here
 * with room for o in the stock last seen there. */
static struct bgroup *find_group(const struct ord *o, int seg, bool redirect)
{
    const engine *e = o->e;
    for (struct bgroup *g = e->groups; g != NULL; g = g->next) {
        if (g->s != o->s || g->epoch != o->view.epoch || g->n >= o->view.cfg.batch ||
            (!redirect && g->seg != seg))
            continue;
        if (!redirect)
            return g;
        long long hint = ltab_hint(o->s, g->seg);
        if (g->seg < o->n && ring_home(g->seg, o->n, e->home, e->homes) &&
            (hint < 0 || hint >= g->qty + o->qty))
            return g;
    }
    return NULL;
}

bool batch_join(struct ord *o)
{
    engine *e = o->e;
    int max = o->view.cfg.batch;
    if (max <= 1 || o->claim_ok || !(store_caps(e->st) & STORE_CAP_BATCH))
        return false;
    struct bgroup *g = find_group(o, o->seg, false);
    if (g == NULL && o->k == 1 && (g = find_group(o, o->seg, true)) != NULL) {
        /* its round from the group's segment, as if it had started there: a SHORT
         * answer sends it on to the others, this one included */
        o->seg = g->seg;
        o->seen[g->seg] = ltab_hint(o->s, g->seg);
        ord_round_reset(o, ring_start(g->seg, o->n, e->home, e->homes), 1);
    }
    if (g == NULL) {
        /* The first group unsent: the flush runs once the callbacks active now (the
         * orders this turn started, each joining) have run -- in this turn, not the
         * next, so a group costs its orders no turn of the loop. While groups wait
         * for one out to answer, that answer runs it. */
        if (e->groups == NULL)
            event_active(e->flush, EV_TIMEOUT, 1);
        g = seg_malloc(sizeof *g + sizeof *g->m * (size_t)max);
        *g = (struct bgroup){e->groups, o->s, o->seg, o->view.epoch, 0, 0, inv_now_ms()};
        e->groups = g;
    }
    ord_set(o, ORD_DEDUCT);
    g->m[g->n++] = o;
    g->qty += o->qty;
    return true;
}

/* A group of several: one DEDUCT_BATCH (behind one lock, mode lock). */
static void send_group(engine *e, struct bgroup *g, store_reply_fn each,
                       store_int_fn piped)
{
    struct ord *first = g->m[0];
    bool locked = first->view.cfg.mode == SKU_MODE_LOCK;
    char token[33] = "";
    if (locked) {
        /* SET NX PX and the fenced DEDUCT_BATCH in one write, as a single order's
         * (engine.c visit_next): a lock held elsewhere makes it FENCED, untouched */
        ord_token(e, token);
        stat_add(e->v, STAT_LOCK_ATTEMPTS, 1);
        first->pending++;
        STORE_CALL(e->st, lock, first->placed, g->seg, token, e->v->opt.lock_ttl_ms,
                   piped, first);
    }
    struct batch *b = seg_malloc(sizeof *b + sizeof *b->m * (size_t)g->n);
    struct store_batch_order *orders = seg_malloc(sizeof *orders * (size_t)g->n);
    b->each = each;
    b->e = e;
    b->n = g->n;
    for (int k = 0; k < g->n; k++) {
        b->m[k] = g->m[k];
        b->m[k]->pipelined = locked;
        prepare(b->m[k], &orders[k]);
    }
    stat_add(e->v, STAT_BATCHES, 1);
    stat_add(e->v, STAT_BATCHED, b->n);
    e->batch_out++;
    bool sent = STORE_CALL(e->st, deduct_batch, first->placed, g->epoch, g->seg, token,
                           STORE_NO_FENCE, b->n, orders, on_batch, b);
    free(orders);
    if (!sent) { /* (not expected: batch_join keeps claims out) nothing written */
        e->batch_out--;
        if (locked)
            STORE_CALL(e->st, release, first->placed, g->seg, token, NULL, NULL);
        struct store_reply fenced = {.code = STORE_FENCED};
        for (int k = 0; k < b->n; k++)
            b->each(b->m[k], 0, &fenced);
        free(b);
    }
}

void batch_flush(engine *e, void (*alone)(struct ord *o), store_reply_fn each,
                 store_int_fn piped)
{
    bool all = e->batch_out < BATCH_FLIGHT;
    int64_t now = inv_now_ms();
    struct bgroup *g = e->groups, **keep = &e->groups;
    e->groups = NULL;
    while (g != NULL) {
        struct bgroup *next = g->next;
        if (!all && g->n < g->m[0]->view.cfg.batch && now - g->born_ms < BATCH_WAIT_MS) {
            *keep = g; /* waits for one out to answer, or its time */
            keep = &g->next;
        } else {
            if (g->n == 1)
                alone(g->m[0]);
            else
                send_group(e, g, each, piped);
            free(g);
        }
        g = next;
    }
    *keep = NULL;
    if (e->groups != NULL) {
        struct timeval wait = {0, BATCH_WAIT_MS * 1000};
        evtimer_add(e->flush, &wait);
    }
}

void batch_drop(engine *e)
{
    struct bgroup *g = e->groups;
    e->groups = NULL;
    while (g != NULL) {
        struct bgroup *next = g->next;
        for (int k = 0; k < g->n; k++)
            ord_finish(g->m[k], INV_UNAVAILABLE);
        free(g);
        g = next;
    }
}
