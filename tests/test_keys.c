/* test_keys.c -- key naming (segments/redis/keys.c) and name validation (names.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "segments/redis/keys.h"
#include "segments/redis/slots.h"

static void valid_names(void **state)
{
    (void)state;
    assert_true(seg_valid_name("a"));
    assert_true(seg_valid_name("SKU-1_2.x"));
    char max[SEG_NAME_MAX + 1];
    memset(max, 'z', SEG_NAME_MAX);
    max[SEG_NAME_MAX] = '\0';
    assert_true(seg_valid_name(max));
}

static void invalid_names(void **state)
{
    (void)state;
    const char *bad[] = {"", "a b", "a{b", "a}b", "a*", "x\n", "é", "a:b", "a/b", "a\"b"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_false(seg_valid_name(bad[i]));
    assert_false(seg_valid_name(NULL));
    char long_name[SEG_NAME_MAX + 2];
    memset(long_name, 'z', SEG_NAME_MAX + 1);
    long_name[SEG_NAME_MAX + 1] = '\0';
    assert_false(seg_valid_name(long_name));
}

static void segment_keys_share_a_hash_tag(void **state)
{
    (void)state;
    char a[SEG_KEY_MAX], b[SEG_KEY_MAX], c[SEG_KEY_MAX], d[SEG_KEY_MAX];
    assert_string_equal(seg_key_stock(a, "tv", 3), "inv:{tv:3}:stock");
    assert_string_equal(seg_key_lock(b, "tv", 3), "inv:{tv:3}:lock");
    assert_string_equal(seg_key_sold(c, "tv", 3), "inv:{tv:3}:sold");
    assert_string_equal(seg_key_orders(d, "tv", 3), "inv:{tv:3}:orders");
    /* A reset's graveyards keep the segment's tag: the same slot. */
    assert_string_equal(seg_key_gone(a, "tv/2", 3, 4503599627370495LL, "orders"),
                        "inv:{tv/2:3}:gone:4503599627370495:orders");
    assert_string_equal(seg_key_gone(a, "tv", 0, 7, "cancelled"),
                        "inv:{tv:0}:gone:7:cancelled");
    /* Distinct segments land in distinct tags, so a cluster can spread them. */
    assert_string_not_equal(seg_key_lock(a, "tv", 3), seg_key_lock(b, "tv", 13));
}

static void other_keys(void **state)
{
    (void)state;
    char k[SEG_KEY_MAX];
    assert_string_equal(seg_key_meta(k, "tv"), "inv:sku:{tv}");
    assert_string_equal(seg_key_order(k, "o-1"), "inv:order:{o-1}");
    assert_string_equal(seg_key_skus(k), "inv:skus");
    assert_string_equal(seg_key_events(), "inv:events");
}

/* A WAIT's mark lands in the slot it is asked for (the node of the write waited on). */
static void ack_marks_land_in_their_slot(void **state)
{
    (void)state;
    char k[SEG_KEY_MAX];
    for (int slot = 0; slot < RD_SLOTS; slot++) {
        seg_key_ack(k, slot);
        assert_int_equal(strncmp(k, "inv:ack:{", 9), 0);
        assert_int_equal(rd_key_slot(k, strlen(k)), slot);
    }
}

static void longest_names_fit(void **state)
{
    (void)state;
    char sku[SEG_NAME_MAX + 1], k[SEG_KEY_MAX];
    memset(sku, 'q', SEG_NAME_MAX);
    sku[SEG_NAME_MAX] = '\0';
    seg_key_orders(k, sku, SEG_MAX_SEGMENTS - 1);
    assert_int_equal(strlen(k), strlen("inv:{:1023}:orders") + SEG_NAME_MAX);
    /* The longest: a graveyard of a salted SKU, the largest epoch (2^53 - 1). */
    char placed[SEG_NAME_MAX + 16];
    seg_key_placed(placed, sku, 2147483647);
    seg_key_gone(k, placed, SEG_MAX_SEGMENTS - 1, 9007199254740991LL, "cancelled");
    assert_int_equal(strlen(k), strlen("inv:{/2147483647:1023}:gone:9007199254740991:"
                                       "cancelled") +
                                    SEG_NAME_MAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(valid_names),
        cmocka_unit_test(invalid_names),
        cmocka_unit_test(segment_keys_share_a_hash_tag),
        cmocka_unit_test(other_keys),
        cmocka_unit_test(ack_marks_land_in_their_slot),
        cmocka_unit_test(longest_names_fit),
    };
    return cmocka_run_group_tests_name("keys", tests, NULL, NULL);
}
