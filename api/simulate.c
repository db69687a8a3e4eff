/* simulate.c -- simulated-order runs, each kept `concurrency` orders deep on one event
 * loop's order engine. */
#include "api/simulate.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/clock.h"
#include "api/loop.h"
#include "base/log.h"
#include "segments/engine.h"
#include "segments/order.h"
#include "segments/sku.h"
#include "base/xalloc.h"

/* How long api_sim_stop_all waits for the runs' orders in flight to be answered. */
#define STOP_WAIT_MS 30000

/* How a run's answers are counted: one slot per name below. */
enum sim_outcome {
    SIM_CONFIRMED,
    SIM_REPLAYED,
    SIM_SOLD_OUT,
    SIM_INSUFFICIENT,
    SIM_BUSY,
    SIM_UNAVAILABLE,
    SIM_UNKNOWN_SKU,
    SIM_OTHER,
    SIM__COUNT
};

static const char *const outcome_names[SIM__COUNT] = {
    "confirmed",           "replayed",    "sold_out", "insufficient_stock", "busy",
    "backend_unavailable", "unknown_sku", "other",
};

/* One run. Written by api_sim_start before the run is posted to its loop and
 * constant afterwards: everything above `taken`. Loop-only: `in_flight`. Atomics: the
 * counters (the loop writes, any thread reads). `live` and `ended` change once, on the
 * loop, under the registry's mutex: that is the loop's last touch of the run. */
struct sim_run {
    struct sim_run *next; /* the registry's list, newest first (registry's mutex) */
    struct api_sim *sim;
    struct api_loop *loop; /* where the run's orders are placed */
    char sku[SEG_NAME_MAX + 1];
    char run[13]; /* 12 hex digits: order ids are "sim-<run>-<n>" */
    long long orders, qty;
    int concurrency;
    long long started; /* CLOCK_MONOTONIC ms */

    int in_flight;         /* orders started and not yet answered (loop-only) */
    atomic_llong taken;    /* order numbers started: 0..orders */
    atomic_llong answered; /* orders the engine answered */
    atomic_llong outcome[SIM__COUNT];
    atomic_bool stop;   /* set by DELETE or shutdown: start no further order */
    atomic_bool live;   /* true until the last order in flight is answered */
    atomic_llong ended; /* CLOCK_MONOTONIC ms when the run ended; 0 before */
};

struct api_sim {
    inv *inv;
    pthread_mutex_t mu; /* everything below; a run's end (live, ended) */
    pthread_cond_t cv;  /* a run has ended (CLOCK_MONOTONIC) */
    struct sim_run *runs;
    bool closed;                   /* api_sim_stop_all() was called */
    struct api_loop *const *loops; /* api_sim_attach() */
    int nloops;
    int next_loop; /* round-robin over `loops` */
};

static enum sim_outcome outcome_of(inv_status s)
{
    switch (s) {
    case INV_OK:
        return SIM_CONFIRMED;
    case INV_REPLAYED:
        return SIM_REPLAYED;
    case INV_SOLD_OUT:
        return SIM_SOLD_OUT;
    case INV_INSUFFICIENT:
        return SIM_INSUFFICIENT;
    case INV_BUSY:
        return SIM_BUSY;
    case INV_UNAVAILABLE:
        return SIM_UNAVAILABLE;
    case INV_UNKNOWN_SKU:
        return SIM_UNKNOWN_SKU;
    default:
        return SIM_OTHER;
    }
}

static bool run_live(const struct sim_run *run)
{
    return atomic_load_explicit(&run->live, memory_order_acquire);
}

/* ---- on the run's loop ----------------------------------------------------------- */

static void on_answer(void *arg, struct order_result *res);

/* Start the run's next order, unless the run is stopped or its numbers are all taken.
 * Returns whether one was started. Loop thread. */
static bool start_next(struct sim_run *run)
{
    if (atomic_load_explicit(&run->stop, memory_order_relaxed))
        return false;
    long long n = atomic_load_explicit(&run->taken, memory_order_relaxed);
    if (n >= run->orders)
        return false;
    atomic_store_explicit(&run->taken, n + 1, memory_order_relaxed);
    char id[SEG_NAME_MAX + 1];
    snprintf(id, sizeof id, "sim-%s-%lld", run->run, n + 1);
    struct order_request rq = {run->sku, run->qty, id};
    run->in_flight++;
    engine_order(api_loop_engine(run->loop), &rq, on_answer, run);
    return true;
}

/* The run has no order in flight and will start none: it has ended. After this the
 * loop never touches the run again, and reap() may free it. Loop thread. */
static void run_end(struct sim_run *run)
{
    struct api_sim *s = run->sim;
    pthread_mutex_lock(&s->mu);
    atomic_store_explicit(&run->ended, base_now_ms(), memory_order_release);
    atomic_store_explicit(&run->live, false, memory_order_release);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* An order of the run is answered: count it, and keep the run `concurrency` deep. */
static void on_answer(void *arg, struct order_result *res)
{
    struct sim_run *run = arg;
    atomic_fetch_add_explicit(&run->outcome[outcome_of(res->status)], 1,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&run->answered, 1, memory_order_relaxed);
    order_result_clear(res);
    run->in_flight--;
    if (!start_next(run) && run->in_flight == 0)
        run_end(run);
}

/* Posted by api_sim_start: the run's first `concurrency` orders (none if it was
 * stopped before it began). */
static void run_begin(void *arg)
{
    struct sim_run *run = arg;
    for (int i = 0; i < run->concurrency; i++)
        if (!start_next(run))
            break;
    if (run->in_flight == 0)
        run_end(run);
}

/* ---- the registry ---------------------------------------------------------------- */

/* Drop the oldest ended runs past API_SIM_RUNS_KEPT; a run still live is never freed
 * (its loop may hold it). Caller holds s->mu. */
static void reap(struct api_sim *s)
{
    int kept = 0;
    for (struct sim_run **pp = &s->runs; *pp != NULL;) {
        struct sim_run *run = *pp;
        if (!run_live(run) && ++kept > API_SIM_RUNS_KEPT) {
            *pp = run->next;
            free(run);
            continue;
        }
        pp = &run->next;
    }
}

/* The latest run of `sku`, or NULL. Caller holds s->mu. */
static struct sim_run *find(struct api_sim *s, const char *sku)
{
    for (struct sim_run *run = s->runs; run != NULL; run = run->next)
        if (strcmp(run->sku, sku) == 0)
            return run;
    return NULL;
}

/* Simulated orders the live runs may have in flight together. Caller holds s->mu. */
static int in_flight_max(const struct api_sim *s)
{
    int n = 0;
    for (const struct sim_run *run = s->runs; run != NULL; run = run->next)
        if (run_live(run))
            n += run->concurrency;
    return n;
}

static json_t *status_json(const struct sim_run *run)
{
    bool live = run_live(run);
    bool stop = atomic_load_explicit(&run->stop, memory_order_relaxed);
    long long ended = atomic_load_explicit(&run->ended, memory_order_acquire);
    long long taken = atomic_load_explicit(&run->taken, memory_order_relaxed);
    long long answered = atomic_load_explicit(&run->answered, memory_order_relaxed);
    const char *state = live ? (stop ? "stopping" : "running")
                             : (answered >= run->orders ? "finished" : "stopped");
    json_t *outcomes = seg_must(json_object());
    for (int i = 0; i < SIM__COUNT; i++)
        json_object_set_new(outcomes, outcome_names[i],
                            seg_must(json_integer(atomic_load_explicit(
                                &run->outcome[i], memory_order_relaxed))));
    return seg_must(
        json_pack("{s:s, s:s, s:s, s:I, s:i, s:I, s:I, s:I, s:I, s:o}", "sku", run->sku,
                  "run", run->run, "state", state, "orders", (json_int_t)run->orders,
                  "concurrency", run->concurrency, "qty", (json_int_t)run->qty, "sent",
                  (json_int_t)taken, "answered", (json_int_t)answered, "elapsed_ms",
                  (json_int_t)((ended != 0 ? ended : base_now_ms()) - run->started),
                  "outcomes", outcomes));
}

struct api_sim *api_sim_create(inv *v)
{
    struct api_sim *s = seg_must(calloc(1, sizeof *s));
    s->inv = v;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    return s;
}

void api_sim_attach(struct api_sim *s, struct api_loop *const *loops, int n)
{
    pthread_mutex_lock(&s->mu);
    s->loops = loops;
    s->nloops = n;
    pthread_mutex_unlock(&s->mu);
}

void api_sim_stop_all(struct api_sim *s)
{
    if (s == NULL)
        return;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += STOP_WAIT_MS / 1000;
    pthread_mutex_lock(&s->mu);
    s->closed = true;
    for (struct sim_run *run = s->runs; run != NULL; run = run->next)
        atomic_store_explicit(&run->stop, true, memory_order_relaxed);
    for (;;) {
        int live = 0;
        for (struct sim_run *run = s->runs; run != NULL; run = run->next)
            live += run_live(run);
        if (live == 0)
            break;
        if (pthread_cond_timedwait(&s->cv, &s->mu, &deadline) == ETIMEDOUT) {
            log_warn("simulate: %d runs still have orders in flight after %d ms", live,
                     STOP_WAIT_MS);
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
}

void api_sim_free(struct api_sim *s)
{
    if (s == NULL)
        return;
    /* The loops are stopped: a run still live has orders no callback will answer. */
    for (struct sim_run *run = s->runs; run != NULL;) {
        struct sim_run *next = run->next;
        free(run);
        run = next;
    }
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

json_t *api_sim_status_json(struct api_sim *s, const char *sku)
{
    pthread_mutex_lock(&s->mu);
    reap(s);
    struct sim_run *run = find(s, sku);
    json_t *j = run != NULL ? status_json(run) : NULL;
    pthread_mutex_unlock(&s->mu);
    return j;
}

int api_sim_parse(struct api_request *req, struct api_parse_error *err)
{
    return api_parse_simulate(req->body, req->body_len, &req->in.simulate, err);
}

void api_sim_start(const struct api_ctx *ctx, struct api_request *req,
                   struct api_reply *rep)
{
    struct api_sim *s = ctx->sim;
    const struct api_sim_body *in = &req->in.simulate;
    /* The SKU must exist now; it may still be deleted while the run goes, whose
     * orders are then answered unknown_sku. */
    struct sku_status *st = seg_must(calloc(1, sizeof *st));
    inv_status rc = sku_get(ctx->conn, req->name, st);
    free(st);
    if (rc != INV_OK) {
        api_reply_status(rep, rc, "%s %s",
                         rc == INV_UNKNOWN_SKU ? "no sku" : "cannot read sku", req->name);
        return;
    }

    struct sim_run *run = seg_must(calloc(1, sizeof *run));
    run->sim = s;
    snprintf(run->sku, sizeof run->sku, "%.*s", SEG_NAME_MAX, req->name);
    unsigned char rnd[6];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        long long t = base_now_ms() ^ (long long)(uintptr_t)run;
        memcpy(rnd, &t, sizeof rnd);
    }
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(run->run + 2 * i, 3, "%02x", rnd[i]);
    run->orders = in->orders;
    run->qty = in->qty;
    run->concurrency = in->concurrency;
    run->started = base_now_ms();
    atomic_init(&run->live, true);

    pthread_mutex_lock(&s->mu);
    reap(s);
    struct sim_run *prev = find(s, req->name);
    int busy = in_flight_max(s);
    if (s->closed || s->nloops == 0) {
        api_reply_error(rep, 503, "shutting_down",
                        s->closed ? "the server is shutting down"
                                  : "the server's event loops are not running yet");
        api_reply_header(rep, "Retry-After", "1");
    } else if (prev != NULL && run_live(prev)) {
        api_reply_error(rep, 409, "simulation_running",
                        "run %s of sku %s is still going; stop it with DELETE first",
                        prev->run, req->name);
    } else if (busy + in->concurrency > API_SIM_THREADS_MAX) {
        api_reply_error(rep, 429, "too_many_simulations",
                        "the runs going may have %d simulated orders in flight; at "
                        "most %d in all",
                        busy, API_SIM_THREADS_MAX);
    } else {
        run->loop = s->loops[s->next_loop];
        s->next_loop = (s->next_loop + 1) % s->nloops;
        run->next = s->runs;
        s->runs = run;
        log_info("simulate: run %s on sku %s: %lld orders of %lld, %d in flight, loop %d",
                 run->run, run->sku, run->orders, run->qty, run->concurrency,
                 api_loop_index(run->loop));
        api_reply_json(rep, 202, status_json(run));
        /* Live until its loop ends it, so reap() keeps it while the post is pending;
         * api_sim_stop_all() waits for it, so the loop is still running. */
        api_loop_post(run->loop, run_begin, run);
        run = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    free(run);
}

void api_sim_get(const struct api_ctx *ctx, struct api_request *req,
                 struct api_reply *rep)
{
    json_t *j = api_sim_status_json(ctx->sim, req->name);
    if (j == NULL)
        api_reply_error(rep, 404, "not_found", "no simulation of sku %s", req->name);
    else
        api_reply_json(rep, 200, j);
}

void api_sim_stop(const struct api_ctx *ctx, struct api_request *req,
                  struct api_reply *rep)
{
    struct api_sim *s = ctx->sim;
    pthread_mutex_lock(&s->mu);
    reap(s);
    struct sim_run *run = find(s, req->name);
    if (run == NULL) {
        api_reply_error(rep, 404, "not_found", "no simulation of sku %s", req->name);
    } else {
        atomic_store_explicit(&run->stop, true, memory_order_relaxed);
        api_reply_json(rep, 200, status_json(run));
    }
    pthread_mutex_unlock(&s->mu);
}
