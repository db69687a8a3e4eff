/* test_skutab.c -- the SKU tables' bounds: a loop's (segments/ltab.c) and the
 * process's (segments/skutab.c): what is kept, what goes, and per-segment state
 * sized by the SKU. No Redis: the tables never touch it on these paths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "segments/internal.h"
#include "segments/ltab.h"
#include "segments/skutab.h"

/* More than either table keeps idle (4096). */
#define MANY 5000

struct fix {
    inv v;
    ltab *t;
};

static int setup(void **state)
{
    struct fix *f = calloc(1, sizeof *f);
    f->v.tab = skutab_create();
    f->t = ltab_create(0, 1, f->v.tab);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fix *f = *state;
    ltab_free(f->t); /* gives back its holds first */
    skutab_free(f->v.tab);
    free(f);
    return 0;
}

static void set_view(lsku *s, int segments)
{
    struct sku_view v = {
        .cfg = {.segments = segments, .mode = SKU_MODE_LOCK}, .epoch = 1, .gen = 1};
    ltab_set_view(s, &v, 0);
}

static void count_one(const char *sku, const long long *outcomes, void *arg)
{
    (void)sku;
    (void)outcomes;
    ++*(int *)arg;
}

static int entries(skutab *t)
{
    int n = 0;
    skutab_foreach(t, count_one, &n);
    return n;
}

/* An entry that never had settings (a SKU Redis does not have) goes with its last
 * order; one with settings stays. */
static void unknown_not_kept(void **state)
{
    struct fix *f = *state;
    lsku *a = ltab_hold(f->t, "nobody-made-me");
    lsku *b = ltab_hold(f->t, "nobody-made-me");
    assert_ptr_equal(a, b);
    ltab_release(f->t, a);
    assert_ptr_equal(ltab_find(f->t, "nobody-made-me"), b); /* still held */
    ltab_release(f->t, b);
    assert_null(ltab_find(f->t, "nobody-made-me"));

    lsku *k = ltab_hold(f->t, "known");
    set_view(k, 4);
    ltab_release(f->t, k);
    assert_ptr_equal(ltab_find(f->t, "known"), k);
}

/* Idle entries past 4096: the least recently used go, held ones never. */
static void idle_entries_capped(void **state)
{
    struct fix *f = *state;
    lsku *pinned = ltab_hold(f->t, "pinned");
    set_view(pinned, 2);
    char name[32];
    for (int i = 0; i < MANY; i++) {
        snprintf(name, sizeof name, "sku-%d", i);
        lsku *s = ltab_hold(f->t, name);
        set_view(s, 1);
        ltab_release(f->t, s);
        if (i == 4000)
            assert_non_null(ltab_find(f->t, "sku-0")); /* used: now the newest */
    }
    assert_null(ltab_find(f->t, "sku-1"));
    assert_null(ltab_find(f->t, "sku-900"));
    assert_non_null(ltab_find(f->t, "sku-0")); /* touched at 4000: outlived 1..904 */
    assert_non_null(ltab_find(f->t, "sku-4999"));
    assert_ptr_equal(ltab_find(f->t, "pinned"), pinned);
    ltab_release(f->t, pinned);
}

/* claimed/hint sized by the SKU: grown by a reset to more segments, claims and
 * counts kept; the shared entry's per-segment counts reach segment 1023. */
static void segments_grow(void **state)
{
    struct fix *f = *state;
    lsku *s = ltab_hold(f->t, "grows");
    set_view(s, 2);
    ltab_set_shared(f->t, s, skutab_entry(&f->v, "grows"));
    assert_true(ltab_claim(s, 1));
    assert_int_equal(skutab_loop_claims(ltab_shared(s), 1, 0), 1);
    assert_false(ltab_note_stock(s, 1, 0, 5));
    assert_int_equal(ltab_hint(s, 0), 5);

    struct sku_view v = {
        .cfg = {.segments = 1024, .mode = SKU_MODE_LOCK}, .epoch = 2, .gen = 2};
    ltab_set_view(s, &v, 0);
    assert_true(ltab_claimed(s, 1));
    assert_int_equal(ltab_hint(s, 0), -1); /* a new generation */
    assert_int_equal(ltab_hint(s, 1023), -1);
    assert_true(ltab_claim(s, 1023));
    assert_int_equal(skutab_loop_claims(ltab_shared(s), 1023, 0), 1);
    assert_int_equal(skutab_loop_claims(ltab_shared(s), 500, 0), 0);
    ltab_unclaim(s, 1);
    ltab_unclaim(s, 1023);
    assert_int_equal(skutab_loop_claims(ltab_shared(s), 1023, 0), 0);
    ltab_release(f->t, s);
}

/* A deleted SKU: its shared entry leaves the table at once, and the loop's idle
 * entry goes at the change that says so (both freed: ASan would see a leak). */
static void deleted_dropped(void **state)
{
    struct fix *f = *state;
    lsku *s = ltab_hold(f->t, "deleted");
    set_view(s, 3);
    ltab_set_shared(f->t, s, skutab_entry(&f->v, "deleted"));
    skutab_count(ltab_shared(s), STAT_ORDERS_CONFIRMED);
    ltab_release(f->t, s);
    assert_int_equal(entries(f->v.tab), 1);
    skutab_drop(&f->v, "deleted");
    assert_int_equal(entries(f->v.tab), 0);
    assert_ptr_equal(ltab_find(f->t, "deleted"), s); /* until the loop syncs */
    ltab_invalidate_all(f->t);
    assert_null(ltab_find(f->t, "deleted"));

    /* Made again while an order still holds the old one: the new entry replaces the
     * dropped one, and the claim counted in the old is counted in the new. */
    s = ltab_hold(f->t, "again");
    set_view(s, 2);
    ltab_set_shared(f->t, s, skutab_entry(&f->v, "again"));
    assert_true(ltab_claim(s, 0));
    skutab_drop(&f->v, "again");
    assert_true(skutab_dropped(ltab_shared(s)));
    sku_local *fresh = skutab_entry(&f->v, "again");
    ltab_set_shared(f->t, s, fresh);
    assert_int_equal(skutab_loop_claims(fresh, 0, 0), 1);
    ltab_unclaim(s, 0);
    assert_int_equal(skutab_loop_claims(fresh, 0, 0), 0);
    ltab_release(f->t, s);
}

/* Process entries nobody holds: 4096 kept, held ones never evicted. */
static void shared_capped(void **state)
{
    struct fix *f = *state;
    sku_local *held = skutab_entry(&f->v, "held");
    char name[32];
    for (int i = 0; i < MANY; i++) {
        snprintf(name, sizeof name, "sku-%d", i);
        skutab_release(f->v.tab, skutab_entry(&f->v, name));
    }
    assert_int_equal(entries(f->v.tab), 4096 + 1);
    skutab_count(held, STAT_ORDERS_CONFIRMED); /* still there */
    skutab_release(f->v.tab, held);
    assert_int_equal(entries(f->v.tab), 4096);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(unknown_not_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(idle_entries_capped, setup, teardown),
        cmocka_unit_test_setup_teardown(segments_grow, setup, teardown),
        cmocka_unit_test_setup_teardown(deleted_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(shared_capped, setup, teardown),
    };
    return cmocka_run_group_tests_name("skutab", tests, NULL, NULL);
}
