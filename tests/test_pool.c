/* test_pool.c -- the worker pool (api/pool.c): per-thread state, FIFO, drain. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "api/pool.h"

struct counts {
    atomic_int inits, finis, jobs;
    atomic_int mismatched; /* jobs or finis that saw another worker's state */
};

/* A worker's state records the thread that created it. */
struct wstate {
    pthread_t owner;
};

static void *w_init(void *arg)
{
    struct counts *c = arg;
    atomic_fetch_add(&c->inits, 1);
    struct wstate *w = malloc(sizeof(*w));
    if (w == NULL) /* no cmocka asserts off the main thread */
        abort();
    w->owner = pthread_self();
    return w;
}

static void w_fini(void *state, void *arg)
{
    struct counts *c = arg;
    struct wstate *w = state;
    if (!pthread_equal(w->owner, pthread_self()))
        atomic_fetch_add(&c->mismatched, 1);
    atomic_fetch_add(&c->finis, 1);
    free(w);
}

static void nap_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

struct job {
    struct counts *c;
    int sleep_ms;
};

static void run(void *state, void *arg)
{
    struct job *j = arg;
    struct wstate *w = state;
    if (!pthread_equal(w->owner, pthread_self()))
        atomic_fetch_add(&j->c->mismatched, 1);
    if (j->sleep_ms > 0)
        nap_ms(j->sleep_ms);
    atomic_fetch_add(&j->c->jobs, 1);
}

static void every_job_runs_on_its_workers_state(void **state)
{
    (void)state;
    struct counts c = {0};
    char err[128];
    struct pool *p = pool_create(4, w_init, w_fini, &c, err, sizeof(err));
    assert_non_null(p);
    enum { N = 1000 };
    static struct job jobs[N];
    for (int i = 0; i < N; i++) {
        jobs[i] = (struct job){&c, 0};
        assert_int_equal(pool_submit(p, run, &jobs[i]), 0);
    }
    pool_free(p);
    assert_int_equal(atomic_load(&c.jobs), N);
    assert_int_equal(atomic_load(&c.inits), 4);
    assert_int_equal(atomic_load(&c.finis), 4);
    assert_int_equal(atomic_load(&c.mismatched), 0);
}

static void drain_finishes_queued_jobs_then_refuses(void **state)
{
    (void)state;
    struct counts c = {0};
    char err[128];
    struct pool *p = pool_create(2, w_init, w_fini, &c, err, sizeof(err));
    assert_non_null(p);
    enum { N = 20 };
    struct job jobs[N];
    for (int i = 0; i < N; i++) {
        jobs[i] = (struct job){&c, 5}; /* slow: most are still queued at drain */
        assert_int_equal(pool_submit(p, run, &jobs[i]), 0);
    }
    pool_drain(p);
    assert_int_equal(atomic_load(&c.jobs), N);
    assert_int_equal(atomic_load(&c.finis), 2);
    struct job late = {&c, 0};
    assert_int_equal(pool_submit(p, run, &late), -1);
    pool_drain(p); /* idempotent */
    pool_free(p);
    assert_int_equal(atomic_load(&c.jobs), N);
}

static void jobs_run_concurrently(void **state)
{
    (void)state;
    struct counts c = {0};
    char err[128];
    struct pool *p = pool_create(8, w_init, w_fini, &c, err, sizeof(err));
    assert_non_null(p);
    struct job jobs[8];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 8; i++) {
        jobs[i] = (struct job){&c, 100};
        assert_int_equal(pool_submit(p, run, &jobs[i]), 0);
    }
    pool_free(p);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    assert_int_equal(atomic_load(&c.jobs), 8);
    assert_true(s < 0.5); /* 8 x 100 ms in parallel, not 800 ms in series */
}

static void without_init_or_fini(void **state)
{
    (void)state;
    char err[128];
    assert_null(pool_create(0, NULL, NULL, NULL, err, sizeof(err)));
    struct pool *p = pool_create(1, NULL, NULL, NULL, err, sizeof(err));
    assert_non_null(p);
    pool_free(p);
    pool_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_job_runs_on_its_workers_state),
        cmocka_unit_test(drain_finishes_queued_jobs_then_refuses),
        cmocka_unit_test(jobs_run_concurrently),
        cmocka_unit_test(without_init_or_fini),
    };
    return cmocka_run_group_tests_name("pool", tests, NULL, NULL);
}
