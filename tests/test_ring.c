/* test_ring.c -- ring walk and backoff (segments/ring.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdint.h>

#include "segments/ring.h"

static void walk_visits_every_segment_once(void **state)
{
    (void)state;
    for (int n = 1; n <= 64; n++) {
        for (int start = 0; start < n; start++) {
            unsigned char seen[64] = {0};
            for (int k = 0; k < n; k++) {
                int i = ring_segment(start, k, n, 0, 1);
                assert_in_range(i, 0, n - 1);
                assert_int_equal(seen[i], 0);
                seen[i] = 1;
            }
            assert_int_equal(ring_segment(start, 0, n, 0, 1), start);
        }
    }
}

static void walk_wraps_around(void **state)
{
    (void)state;
    assert_int_equal(ring_segment(18, 0, 20, 0, 1), 18);
    assert_int_equal(ring_segment(18, 1, 20, 0, 1), 19);
    assert_int_equal(ring_segment(18, 2, 20, 0, 1), 0);
    assert_int_equal(ring_segment(18, 19, 20, 0, 1), 17);
}

/* With several loops: every segment once, the loop's home segments first, and a
 * round from ring_start(seg) visiting seg first; fewer segments than loops: every
 * segment is at home everywhere. */
static void walk_home_first(void **state)
{
    (void)state;
    for (int homes = 2; homes <= 4; homes++)
        for (int home = 0; home < homes; home++)
            for (int n = 1; n <= 40; n++)
                for (int start = 0; start < n; start++) {
                    unsigned char seen[40] = {0};
                    bool away = false;
                    for (int k = 0; k < n; k++) {
                        int i = ring_segment(start, k, n, home, homes);
                        assert_in_range(i, 0, n - 1);
                        assert_int_equal(seen[i], 0);
                        seen[i] = 1;
                        bool at_home = ring_home(i, n, home, homes);
                        assert_true(at_home == (n < homes || i % homes == home));
                        assert_false(away && at_home); /* home ones first */
                        away |= !at_home;
                    }
                    for (int i = 0; i < n; i++)
                        if (ring_home(i, n, home, homes))
                            assert_int_equal(ring_segment(ring_start(i, n, home, homes),
                                                          0, n, home, homes),
                                             i);
                }
    /* 256 segments on loop 1 of 2: 1, 3, ..., 255, then 0, 2, ..., 254. */
    assert_int_equal(ring_segment(0, 0, 256, 1, 2), 1);
    assert_int_equal(ring_segment(0, 127, 256, 1, 2), 255);
    assert_int_equal(ring_segment(0, 128, 256, 1, 2), 0);
    assert_int_equal(ring_segment(0, 255, 256, 1, 2), 254);
}

static void backoff_grows_and_caps(void **state)
{
    (void)state;
    /* With the largest random value the wait is the whole current step. */
    int prev = 0;
    for (int round = 0; round < 40; round++) {
        int ms = ring_backoff_ms(round, UINT32_MAX, 1000000);
        assert_true(ms >= prev || ms == RING_BACKOFF_MAX_MS);
        assert_in_range(ms, 1, RING_BACKOFF_MAX_MS);
        prev = ms;
    }
    assert_int_equal(ring_backoff_ms(100, 0, 1000), RING_BACKOFF_MAX_MS / 2);
}

static void backoff_is_jittered(void **state)
{
    (void)state;
    /* Round 5: step 32, waits spread over [16, 32]. */
    int lo = 1000, hi = 0;
    for (uint32_t r = 0; r < 1000; r++) {
        int ms = ring_backoff_ms(5, r * 2654435761u, 1000);
        lo = ms < lo ? ms : lo;
        hi = ms > hi ? ms : hi;
    }
    assert_int_equal(lo, 16);
    assert_int_equal(hi, 32);
}

static void backoff_respects_deadline(void **state)
{
    (void)state;
    assert_int_equal(ring_backoff_ms(10, 12345, 3), 3);
    assert_int_equal(ring_backoff_ms(0, 0, 0), 0);
    assert_int_equal(ring_backoff_ms(3, 7, -5), 0);
    assert_int_equal(ring_backoff_ms(0, 0, 1), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(walk_visits_every_segment_once),
        cmocka_unit_test(walk_wraps_around),
        cmocka_unit_test(walk_home_first),
        cmocka_unit_test(backoff_grows_and_caps),
        cmocka_unit_test(backoff_is_jittered),
        cmocka_unit_test(backoff_respects_deadline),
    };
    return cmocka_run_group_tests_name("ring", tests, NULL, NULL);
}
