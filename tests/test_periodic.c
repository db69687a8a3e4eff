/* test_periodic.c -- base/periodic.c: the first round after its delay or a wake, a
 * round again at once when asked, a wake during a round not lost, a stop that ends a
 * long sleep and a round that looks at periodic_stopping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "base/clock.h"
#include "base/periodic.h"

/* Far longer than any test waits: a round that comes only after it never comes here. */
#define LONG_MS 600000
/* How long a test waits for what should happen at once. Generous: the defect each
 * bound catches is "never" (a 10-minute sleep), not "slow". */
#define SOON_MS 5000

struct counter {
    _Atomic int rounds;
    int again;             /* rounds to run back to back before the long sleep */
    _Atomic bool in_round; /* the round is waiting for `go` */
    _Atomic bool go;       /* lets a held round return */
    bool hold_first;       /* the first round waits for `go` */
    bool until_stopping;   /* the first round runs until periodic_stopping */
};

static void nap(void)
{
    struct timespec ts = {0, 1000000L};
    nanosleep(&ts, NULL);
}

static int round_fn(periodic *p, void *arg)
{
    struct counter *c = arg;
    int n = atomic_fetch_add(&c->rounds, 1) + 1;
    if (n == 1 && c->hold_first) {
        atomic_store(&c->in_round, true);
        while (!atomic_load(&c->go))
            nap();
    }
    if (n == 1 && c->until_stopping) {
        atomic_store(&c->in_round, true);
        while (!periodic_stopping(p))
            nap();
    }
    return n < c->again ? 0 : LONG_MS;
}

/* Wait up to SOON_MS for `rounds` to reach `want`: the count then. */
static int wait_rounds(struct counter *c, int want)
{
    long long until = base_now_ms() + SOON_MS;
    while (atomic_load(&c->rounds) < want && base_now_ms() < until)
        nap();
    return atomic_load(&c->rounds);
}

static periodic *start(struct counter *c, int first_ms)
{
    char err[128] = "";
    periodic *p = periodic_start(round_fn, c, first_ms, err, sizeof err);
    assert_non_null(p);
    return p;
}

/* No round before its delay; a wake runs one now; a stop ends the long sleep. */
static void wake_and_stop(void **state)
{
    (void)state;
    struct counter c = {0};
    periodic *p = start(&c, LONG_MS);
    struct timespec ts = {0, 50000000L};
    nanosleep(&ts, NULL);
    assert_int_equal(atomic_load(&c.rounds), 0);
    periodic_wake(p);
    assert_int_equal(wait_rounds(&c, 1), 1);
    long long t0 = base_now_ms();
    periodic_stop(p);
    assert_true(base_now_ms() - t0 < SOON_MS);
    assert_int_equal(atomic_load(&c.rounds), 1);
}

/* A round that returns 0 is followed by another at once; first_ms 0 starts at once. */
static void again_at_once(void **state)
{
    (void)state;
    struct counter c = {.again = 5};
    periodic *p = start(&c, 0);
    assert_int_equal(wait_rounds(&c, 5), 5);
    periodic_stop(p);
    assert_int_equal(atomic_load(&c.rounds), 5);
}

/* A wake while a round runs makes the next round come at once, not after its sleep. */
static void wake_during_round_kept(void **state)
{
    (void)state;
    struct counter c = {.hold_first = true};
    periodic *p = start(&c, 0);
    long long until = base_now_ms() + SOON_MS;
    while (!atomic_load(&c.in_round) && base_now_ms() < until)
        nap();
    assert_true(atomic_load(&c.in_round));
    periodic_wake(p);
    atomic_store(&c.go, true);
    assert_int_equal(wait_rounds(&c, 2), 2);
    periodic_stop(p);
}

/* A round that loops until periodic_stopping ends when stopped. */
static void stopping_seen(void **state)
{
    (void)state;
    struct counter c = {.until_stopping = true};
    periodic *p = start(&c, 0);
    long long until = base_now_ms() + SOON_MS;
    while (!atomic_load(&c.in_round) && base_now_ms() < until)
        nap();
    assert_true(atomic_load(&c.in_round));
    periodic_stop(p); /* returns only once the round saw the stop */
    assert_int_equal(atomic_load(&c.rounds), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wake_and_stop),
        cmocka_unit_test(again_at_once),
        cmocka_unit_test(wake_during_round_kept),
        cmocka_unit_test(stopping_seen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
