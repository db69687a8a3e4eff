/* test_text.c -- base/text.c against snprintf: the same characters for strings,
 * numbers (to LLONG_MIN) and hex, cut at every buffer size exactly where snprintf
 * cuts, never a byte written past the buffer, and the record built with it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/text.h"
#include "segments/record.h"

/* The text "<s>:<v>/<hex>" built both ways into buffers of every size from 1 up, with
 * guard bytes after the buffer that must stay untouched. */
static void same_as_snprintf(const char *s, long long v, uint64_t h)
{
    char want[256];
    int full =
        snprintf(want, sizeof want, "%s:%lld/%016llx", s, v, (unsigned long long)h);
    for (size_t size = 1; size <= (size_t)full + 2; size++) {
        char got[260], ref[260];
        memset(got, '#', sizeof got);
        struct text t = text_at(got, size);
        text_str(&t, s);
        text_str(&t, ":");
        text_ll(&t, v);
        text_str(&t, "/");
        text_hex64(&t, h);
        snprintf(ref, size, "%s:%lld/%016llx", s, v, (unsigned long long)h);
        assert_string_equal(got, ref);
        for (size_t k = size; k < size + 4; k++)
            assert_int_equal(got[k], '#');
    }
}

static void matches_snprintf(void **state)
{
    (void)state;
    const long long v[] = {0,         7,        -7,        10,         -10,
                           99,        100,      123456789, -987654321, 9007199254740991LL,
                           LLONG_MAX, LLONG_MIN};
    const uint64_t h[] = {0, 1, 0xdeadbeefULL, UINT64_MAX, 0x0123456789abcdefULL};
    const char *s[] = {"", "a", "tv-2026_x.y", "inv:{sku/3:17}:orders"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        for (size_t j = 0; j < sizeof h / sizeof h[0]; j++)
            for (size_t k = 0; k < sizeof s / sizeof s[0]; k++)
                same_as_snprintf(s[k], v[i], h[j]);
}

static void copy_cuts(void **state)
{
    (void)state;
    char buf[8];
    assert_string_equal(text_copy(buf, sizeof buf, "abc"), "abc");
    assert_string_equal(text_copy(buf, sizeof buf, "abcdefghij"), "abcdefg");
    assert_string_equal(text_copy(buf, 1, "abc"), "");
    assert_ptr_equal(text_copy(buf, sizeof buf, ""), buf);
    assert_string_equal(buf, "");
}

static void record_shape(void **state)
{
    (void)state;
    const int seg[] = {3, 11};
    const long long part[] = {2, 5};
    char *r = record_build("o-1", "tv", 7, 2, seg, part, "confirmed");
    assert_string_equal(r, "{\"order_id\":\"o-1\",\"sku\":\"tv\",\"qty\":7,\"segment\":3,"
                           "\"segments\":[{\"segment\":3,\"qty\":2},{\"segment\":11,"
                           "\"qty\":5}],\"status\":\"confirmed\"}");
    assert_true(record_same_order(r, "tv", 7));
    assert_false(record_same_order(r, "tv", 6));
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_snprintf),
        cmocka_unit_test(copy_cuts),
        cmocka_unit_test(record_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
