/* test_recpack.c -- the order record packed for Redis (segments/redis/recpack.h):
 * record_build's text back byte for byte, a packed form within Redis's listpack limit,
 * and the JSON kept for every record that is not a confirmed one of its id and SKU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/record.h"
#include "segments/redis/recpack.h"

/* Pack record_build's record of these parts, then unpack it: the same text. */
static void round_trip(const char *id, const char *sku, long long qty, int n,
                       const int *seg, const long long *part)
{
    char *json = record_build(id, sku, qty, n, seg, part, "confirmed");
    char buf[RD_RECORD_PACKED_MAX];
    const char *packed = rd_record_pack(json, id, sku, strlen(sku), buf, sizeof buf);
    assert_non_null(packed);
    assert_int_equal(packed[0], '#');
    if (n <= 4) /* what an order's parts usually are: within hash-max-listpack-value */
        assert_true(strlen(packed) <= 64);
    char *back = rd_record_unpack(packed, id, sku);
    assert_non_null(back);
    assert_string_equal(back, json);
    free(back);
    /* The SKU as its segments are keyed on a cluster with a salt: the same record. */
    char placed[96];
    snprintf(placed, sizeof placed, "%s/7", sku);
    back = rd_record_unpack(packed, id, placed);
    assert_string_equal(back, json);
    free(back);
    assert_ptr_equal(rd_record_stored(json, id, placed, buf, sizeof buf), buf);
    free(json);
}

static void test_round_trip(void **state)
{
    (void)state;
    int seg[40];
    long long part[40];
    for (int k = 0; k < 40; k++) {
        seg[k] = 39 - k;
        part[k] = (long long)k * 1000003 + 1;
    }
    round_trip("o-1", "sku-a", 1, 1, seg, part);
    round_trip("a-64-character-order-id-a-64-character-order-id-a-64-character-", "s", 2,
               2, seg, part);
    long long big = LLONG_MAX;
    int zero = 0;
    round_trip("x", "y", big, 1, &zero, &big);
    round_trip("m", "multi", 300, 4, seg, part);
    round_trip("many", "parts", 5, 12, seg, part);
}

/* Not a confirmed record of this id and SKU, or too long for the buffer: NULL, and
 * rd_record_stored keeps the JSON as it is. */
static void test_kept_as_json(void **state)
{
    (void)state;
    int seg[40] = {3};
    long long part[40] = {2};
    char buf[RD_RECORD_PACKED_MAX];
    char *cancelled = record_build("o", "s", 2, 1, seg, part, "cancelled");
    assert_null(rd_record_pack(cancelled, "o", "s", 1, buf, sizeof buf));
    assert_ptr_equal(rd_record_stored(cancelled, "o", "s", buf, sizeof buf), cancelled);
    char *json = record_build("o", "s", 2, 1, seg, part, "confirmed");
    assert_null(rd_record_pack(json, "other", "s", 1, buf, sizeof buf));
    assert_null(rd_record_pack(json, "o", "t", 1, buf, sizeof buf));
    assert_null(rd_record_pack(json, "o", "s", 1, buf, 4)); /* cut off */
    assert_non_null(rd_record_pack(json, "o", "s", 1, buf, sizeof buf));
    /* "segment" not the first part's: record_build never writes that; kept. */
    const char *odd =
        "{\"order_id\":\"o\",\"sku\":\"s\",\"qty\":2,\"segment\":4,"
        "\"segments\":[{\"segment\":3,\"qty\":2}],\"status\":\"confirmed\"}";
    assert_null(rd_record_pack(odd, "o", "s", 1, buf, sizeof buf));
    char tail[200];
    snprintf(tail, sizeof tail, "%s ", json);
    assert_null(rd_record_pack(tail, "o", "s", 1, buf, sizeof buf));
    for (int k = 0; k < 40; k++)
        seg[k] = 1000000 + k, part[k] = 1000000000 + k;
    char *huge = record_build("o", "s", 2, 40, seg, part, "confirmed");
    assert_null(rd_record_pack(huge, "o", "s", 1, buf, sizeof buf));
    /* JSON as it is read back: unchanged. */
    char *same = rd_record_unpack(cancelled, "o", "s");
    assert_string_equal(same, cancelled);
    free(same);
    free(huge);
    free(json);
    free(cancelled);
}

/* A packed record that is malformed unpacks to NULL (read as a failed call). */
static void test_malformed(void **state)
{
    (void)state;
    const char *bad[] = {"#", "#1", "#1 3", "#1 3 1 4", "#1 3 1x"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
        assert_null(rd_record_unpack(bad[k], "o", "s"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_kept_as_json),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests_name("recpack", tests, NULL, NULL);
}
