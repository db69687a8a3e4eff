/* simulate.c -- simulated orders on threads of their own, through order_place(). */
#include "api/simulate.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "segments/order.h"
#include "segments/sku.h"
#include "service/log.h"

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

struct sim_run {
    struct sim_run *next; /* the registry's list, newest first */
    inv *inv;
    char sku[SEG_NAME_MAX + 1];
    char run[13]; /* 12 hex digits: order ids are "sim-<run>-<n>" */
    long long orders, qty;
    int concurrency;
    atomic_llong taken;    /* order numbers handed out (may pass `orders`) */
    atomic_llong answered; /* orders order_place() returned from */
    atomic_llong outcome[SIM__COUNT];
    atomic_bool stop;   /* set by DELETE or shutdown: take no further order */
    atomic_int live;    /* threads not yet finished */
    atomic_llong ended; /* CLOCK_MONOTONIC ms when the last thread finished; 0 before */
    long long started;  /* CLOCK_MONOTONIC ms */
    int nthreads;       /* threads started (and to be joined) */
    bool joined;        /* guarded by the registry's mutex */
    pthread_t threads[API_SIM_CONCURRENCY_MAX];
};

struct api_sim {
    inv *inv;
    pthread_mutex_t mu; /* runs, threads, closed; joining */
    struct sim_run *runs;
    int threads; /* threads of runs not yet joined */
    bool closed; /* api_sim_stop_all() was called */
};

static void *must(void *p)
{
    if (p == NULL) {
        fputs("inventoryd: out of memory\n", stderr);
        abort();
    }
    return p;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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

/* One of a run's threads: take the next order number, place it, until the numbers
 * or the run are over. The thread's connection is its own, made and freed here. */
static void *sim_thread(void *arg)
{
    struct sim_run *run = arg;
    pthread_setname_np(pthread_self(), "inv-simulate");
    inv_conn *c = inv_conn_create(run->inv);
    while (!atomic_load_explicit(&run->stop, memory_order_relaxed)) {
        long long n = atomic_fetch_add_explicit(&run->taken, 1, memory_order_relaxed);
        if (n >= run->orders)
            break;
        char id[SEG_NAME_MAX + 1];
        snprintf(id, sizeof id, "sim-%s-%lld", run->run, n + 1);
        struct order_request rq = {run->sku, run->qty, id};
        struct order_result res;
        inv_status s = order_place(c, &rq, &res);
        order_result_clear(&res);
        atomic_fetch_add_explicit(&run->outcome[outcome_of(s)], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&run->answered, 1, memory_order_relaxed);
    }
    inv_conn_free(c);
    if (atomic_fetch_sub_explicit(&run->live, 1, memory_order_acq_rel) == 1)
        atomic_store_explicit(&run->ended, now_ms(), memory_order_release);
    return NULL;
}

static bool run_live(const struct sim_run *run)
{
    return atomic_load_explicit(&run->live, memory_order_acquire) > 0;
}

/* Join the threads of every run that has ended, then drop the oldest ended runs past
 * API_SIM_RUNS_KEPT. Caller holds s->mu. */
static void reap(struct api_sim *s)
{
    int kept = 0;
    for (struct sim_run **pp = &s->runs; *pp != NULL;) {
        struct sim_run *run = *pp;
        if (!run->joined && !run_live(run)) {
            for (int i = 0; i < run->nthreads; i++)
                pthread_join(run->threads[i], NULL);
            run->joined = true;
            s->threads -= run->nthreads;
        }
        if (run->joined && ++kept > API_SIM_RUNS_KEPT) {
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

static json_t *status_json(const struct sim_run *run)
{
    bool live = run_live(run);
    bool stop = atomic_load_explicit(&run->stop, memory_order_relaxed);
    long long ended = atomic_load_explicit(&run->ended, memory_order_acquire);
    long long taken = atomic_load_explicit(&run->taken, memory_order_relaxed);
    long long answered = atomic_load_explicit(&run->answered, memory_order_relaxed);
    const char *state = live ? (stop ? "stopping" : "running")
                             : (answered >= run->orders ? "finished" : "stopped");
    json_t *outcomes = must(json_object());
    for (int i = 0; i < SIM__COUNT; i++)
        json_object_set_new(outcomes, outcome_names[i],
                            must(json_integer(atomic_load_explicit(
                                &run->outcome[i], memory_order_relaxed))));
    return must(json_pack("{s:s, s:s, s:s, s:I, s:i, s:I, s:I, s:I, s:I, s:o}", "sku",
                          run->sku, "run", run->run, "state", state, "orders",
                          (json_int_t)run->orders, "concurrency", run->concurrency, "qty",
                          (json_int_t)run->qty, "sent",
                          (json_int_t)(taken < run->orders ? taken : run->orders),
                          "answered", (json_int_t)answered, "elapsed_ms",
                          (json_int_t)((ended != 0 ? ended : now_ms()) - run->started),
                          "outcomes", outcomes));
}

struct api_sim *api_sim_create(inv *v)
{
    struct api_sim *s = must(calloc(1, sizeof *s));
    s->inv = v;
    pthread_mutex_init(&s->mu, NULL);
    return s;
}

void api_sim_stop_all(struct api_sim *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    s->closed = true;
    for (struct sim_run *run = s->runs; run != NULL; run = run->next)
        atomic_store_explicit(&run->stop, true, memory_order_relaxed);
    pthread_mutex_unlock(&s->mu);
}

void api_sim_free(struct api_sim *s)
{
    if (s == NULL)
        return;
    api_sim_stop_all(s);
    pthread_mutex_lock(&s->mu);
    for (struct sim_run *run = s->runs; run != NULL;) {
        struct sim_run *next = run->next;
        if (!run->joined)
            for (int i = 0; i < run->nthreads; i++)
                pthread_join(run->threads[i], NULL);
        free(run);
        run = next;
    }
    pthread_mutex_unlock(&s->mu);
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

/* Start `run`'s threads. Caller holds s->mu. Returns 0, or -1 with none left running
 * (those started are stopped and joined). */
static int start_threads(struct sim_run *run)
{
    for (int i = 0; i < run->concurrency; i++) {
        if (pthread_create(&run->threads[i], NULL, sim_thread, run) != 0) {
            log_warn("simulate: cannot start a thread for sku %s", run->sku);
            atomic_store(&run->stop, true);
            atomic_fetch_sub(&run->live, run->concurrency - i);
            for (int k = 0; k < i; k++)
                pthread_join(run->threads[k], NULL);
            return -1;
        }
        run->nthreads++;
    }
    return 0;
}

void api_sim_start(const struct api_ctx *ctx, struct api_request *req,
                   struct api_reply *rep)
{
    struct api_sim *s = ctx->sim;
    const struct api_sim_body *in = &req->in.simulate;
    /* The SKU must exist now; it may still be deleted while the run goes, whose
     * orders are then answered unknown_sku. */
    struct sku_status *st = must(calloc(1, sizeof *st));
    inv_status rc = sku_get(ctx->conn, req->name, st);
    free(st);
    if (rc != INV_OK) {
        api_reply_status(rep, rc, "%s %s",
                         rc == INV_UNKNOWN_SKU ? "no sku" : "cannot read sku", req->name);
        return;
    }

    struct sim_run *run = must(calloc(1, sizeof *run));
    run->inv = ctx->inv;
    snprintf(run->sku, sizeof run->sku, "%.*s", SEG_NAME_MAX, req->name);
    unsigned char rnd[6];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        long long t = now_ms() ^ (long long)(uintptr_t)run;
        memcpy(rnd, &t, sizeof rnd);
    }
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(run->run + 2 * i, 3, "%02x", rnd[i]);
    run->orders = in->orders;
    run->qty = in->qty;
    run->concurrency = in->concurrency;
    run->started = now_ms();
    atomic_init(&run->live, in->concurrency);

    pthread_mutex_lock(&s->mu);
    reap(s);
    struct sim_run *prev = find(s, req->name);
    if (s->closed) {
        api_reply_error(rep, 503, "shutting_down", "the server is shutting down");
        api_reply_header(rep, "Retry-After", "1");
    } else if (prev != NULL && run_live(prev)) {
        api_reply_error(rep, 409, "simulation_running",
                        "run %s of sku %s is still going; stop it with DELETE first",
                        prev->run, req->name);
    } else if (s->threads + in->concurrency > API_SIM_THREADS_MAX) {
        api_reply_error(rep, 429, "too_many_simulations",
                        "%d simulated-order threads run already; at most %d in all",
                        s->threads, API_SIM_THREADS_MAX);
    } else if (start_threads(run) != 0) {
        api_reply_error(rep, 503, "internal", "cannot start the simulation's threads");
    } else {
        run->next = s->runs;
        s->runs = run;
        s->threads += run->nthreads;
        log_info("simulate: run %s on sku %s: %lld orders of %lld, %d threads", run->run,
                 run->sku, run->orders, run->qty, run->concurrency);
        api_reply_json(rep, 202, status_json(run));
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
