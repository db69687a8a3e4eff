/* it_memcached_lock.c -- memcached `add` locks (segments/memcached/) against a real
 * memcached. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "segments/memcached/mclock.h"
#include "tests/harness_lock.h"

static int group_setup(void **state)
{
    *state = h_memcached_start();
    return *state != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    h_memcached_free(*state);
    return 0;
}

static void test_bad_targets_refused(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char err[256];
    const char *bad[] = {"", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:x",
                         "127.0.0.1:1,127.0.0.1:2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_null(lks_memcached_ops.create(base, bad[i], err, sizeof err));
        assert_true(strstr(err, "memcached") != NULL);
    }
    event_base_free(base);
}

static void test_mutual_exclusion_under_contention(void **state)
{
    h_memcached *m = *state;
    h_deadline(60);
    struct h_lock_contention c;
    assert_int_equal(h_lock_contend(&lks_memcached_ops, h_memcached_addr(m), "counter", 4,
                                    15, 2000, &c),
                     0);
    fprintf(stderr,
            "memcached contention: %d acquired, %d failed, %d overlaps, "
            "counter %ld\n",
            c.acquired, c.failed, c.overlaps, c.counter);
    assert_int_equal(c.failed, 0);
    assert_int_equal(c.acquired, 60);
    assert_int_equal(c.overlaps, 0);
    assert_int_equal(c.counter, 60);
    h_deadline(0);
}

/* A holder frozen past its lease loses it: the next contender wins once memcached
 * expires the item (whole seconds: between ttl and ttl + 2 s), and the frozen
 * holder's renew and release, when it wakes, touch nothing of the new holder's. */
static void test_frozen_holder_loses_to_the_next(void **state)
{
    h_memcached *m = *state;
    h_deadline(60);
    h_lock *a = h_lock_new(&lks_memcached_ops, h_memcached_addr(m));
    h_lock *b = h_lock_new(&lks_memcached_ops, h_memcached_addr(m));
    assert_non_null(a);
    assert_non_null(b);
    lks_hold *ha, *hb;
    long long t0 = base_now_ms();
    assert_int_equal(h_lock_acquire(a, "frozen", 1000, 0, &ha), LKS_OK);
    assert_int_equal(ha->fence, 0);
    assert_true(ha->valid_until_ms > base_now_ms());
    assert_true(ha->valid_until_ms <= t0 + 1000);
    assert_int_equal(h_lock_acquire(b, "frozen", 1000, 0, &hb), LKS_BUSY);

    /* a's loop does not run from here: a is frozen while b waits its turn. */
    assert_int_equal(h_lock_acquire(b, "frozen", 2000, 5000, &hb), LKS_OK);
    long long took = base_now_ms() - t0;
    fprintf(stderr, "memcached: the frozen holder's lock was taken over after %lld ms\n",
            took);
    assert_true(took >= 1000 && took < 4000);

    h_lock_run_ms(a, 1);
    assert_int_equal(h_lock_lost_count(a), 1);
    assert_int_equal(h_lock_renew(a, ha, 1000), LKS_LOST);
    assert_int_equal(h_lock_release(a, ha), LKS_LOST);
    assert_int_equal(h_lock_renew(b, hb, 2000), LKS_OK); /* still b's */
    assert_int_equal(h_lock_release(b, hb), LKS_OK);
    /* The release expired the item at once: the next add wins without waiting. */
    assert_int_equal(h_lock_acquire(a, "frozen", 1000, 0, &ha), LKS_OK);
    assert_int_equal(h_lock_release(a, ha), LKS_OK);
    assert_int_equal(h_lock_lost_count(b), 0);
    h_lock_free(a);
    h_lock_free(b);
    h_deadline(0);
}

static void test_renew_keeps_the_lock_past_its_expiry(void **state)
{
    h_memcached *m = *state;
    h_deadline(60);
    h_lock *a = h_lock_new(&lks_memcached_ops, h_memcached_addr(m));
    h_lock *b = h_lock_new(&lks_memcached_ops, h_memcached_addr(m));
    lks_hold *ha, *hb;
    /* A 2 s lease renewed every 400 ms: 1.6 s of slack for a loaded machine (a 1 s
     * lease lost its hold once under ASan beside a build). */
    assert_int_equal(h_lock_acquire(a, "renewed", 2000, 0, &ha), LKS_OK);
    long long until = ha->valid_until_ms;
    for (int i = 0; i < 10; i++) { /* 4 s: past the longest life of the first add, 3 s */
        h_lock_run_ms(a, 400);
        assert_int_equal(h_lock_renew(a, ha, 2000), LKS_OK);
        assert_true(ha->valid_until_ms > until);
        until = ha->valid_until_ms;
        assert_int_equal(h_lock_acquire(b, "renewed", 1000, 0, &hb), LKS_BUSY);
    }
    assert_int_equal(h_lock_lost_count(a), 0);
    assert_int_equal(h_lock_release(a, ha), LKS_OK);
    assert_int_equal(h_lock_acquire(b, "renewed", 1000, 0, &hb), LKS_OK);
    assert_int_equal(h_lock_release(b, hb), LKS_OK);
    h_lock_free(a);
    h_lock_free(b);
    h_deadline(0);
}

/* A hung memcached (SIGSTOP): the pool's call times out and acquire answers
 * LKS_UNAVAIL instead of hanging the caller; once it runs again, locks work. */
static void test_hung_server_answers_unavailable(void **state)
{
    h_memcached *m = *state;
    h_deadline(60);
    h_lock *a = h_lock_new(&lks_memcached_ops, h_memcached_addr(m));
    lks_hold *h;
    assert_int_equal(h_memcached_pause(m), 0);
    long long t0 = h_now_ms();
    int rc = h_lock_acquire(a, "hung", 1000, 0, &h);
    long long took = h_now_ms() - t0;
    assert_int_equal(h_memcached_resume(m), 0);
    assert_int_equal(rc, LKS_UNAVAIL);
    assert_true(took < 3000); /* the 500 ms I/O time-out, not a hang */

    /* The failed server may be skipped for libmemcached's retry time-out (1 s). */
    long long end = h_now_ms() + 5000;
    do {
        rc = h_lock_acquire(a, "hung", 1000, 0, &h);
        if (rc != LKS_OK)
            h_sleep_ms(100);
    } while (rc != LKS_OK && h_now_ms() < end);
    assert_int_equal(rc, LKS_OK);
    assert_int_equal(h_lock_release(a, h), LKS_OK);
    h_lock_free(a);
    h_deadline(0);
}

/* A restarted memcached forgets every lock: the holder is not told until it renews,
 * and meanwhile the next contender wins (only the store's fence protects the stock). */
static void test_restart_forgets_the_lock(void **state)
{
    h_memcached *m = *state;
    h_deadline(60);
    h_lock *a = h_lock_new(&lks_memcached_ops, h_memcached_addr(m));
    h_lock *b = h_lock_new(&lks_memcached_ops, h_memcached_addr(m));
    lks_hold *ha, *hb;
    assert_int_equal(h_lock_acquire(a, "forgotten", 10000, 0, &ha), LKS_OK);
    assert_int_equal(h_memcached_restart(m), 0);
    long long end = h_now_ms() + 5000;
    int rc;
    do { /* b's pool reconnects (after libmemcached's retry time-out) */
        rc = h_lock_acquire(b, "forgotten", 10000, 0, &hb);
        if (rc != LKS_OK)
            h_sleep_ms(100);
    } while (rc != LKS_OK && h_now_ms() < end);
    assert_int_equal(rc, LKS_OK);
    long long now = base_now_ms();
    assert_true(ha->valid_until_ms > now); /* both believe they hold */
    assert_true(hb->valid_until_ms > now);
    end = h_now_ms() + 5000;
    do {
        rc = h_lock_renew(a, ha, 10000);
        if (rc == LKS_UNAVAIL)
            h_sleep_ms(100);
    } while (rc == LKS_UNAVAIL && h_now_ms() < end);
    assert_int_equal(rc, LKS_LOST);
    assert_int_equal(h_lock_lost_count(a), 1);
    assert_int_equal(h_lock_release(b, hb), LKS_OK);
    h_lock_free(a);
    h_lock_free(b);
    h_deadline(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_targets_refused),
        cmocka_unit_test(test_mutual_exclusion_under_contention),
        cmocka_unit_test(test_frozen_holder_loses_to_the_next),
        cmocka_unit_test(test_renew_keeps_the_lock_past_its_expiry),
        cmocka_unit_test(test_hung_server_answers_unavailable),
        cmocka_unit_test(test_restart_forgets_the_lock),
    };
    return h_exit_status(cmocka_run_group_tests_name("memcached_lock", tests, group_setup,
                                                     group_teardown));
}
