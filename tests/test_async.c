/* test_async.c -- the asynchronous Redis seam (segments/redis/async.c) on a libevent
 * loop against a real redis-server: typed calls, pipelining, a hung Redis answered
 * at the deadline and recovered from, a killed connection, NOSCRIPT, a wrong password.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/redis/async.h"
#include "segments/redis/keys.h"
#include "tests/harness.h"
#include "tests/proxy.h"

#define TIMEOUT_MS 300

struct fixture {
    h_redis *redis;
    struct event_base *base;
    rd_conn *sync; /* for setting up SKUs */
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    *state = f;
    f->redis = h_redis_start();
    f->base = event_base_new();
    const struct rd_target to = {"127.0.0.1", h_redis_port(f->redis), .timeout_ms = 2000};
    f->sync = rd_conn_create(&to, NULL);
    return f->redis != NULL && f->base != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    rd_conn_free(f->sync);
    event_base_free(f->base);
    h_redis_free(f->redis);
    free(f);
    return 0;
}

static rda_conn *connect_within(struct fixture *f, const char *password, int timeout_ms)
{
    const struct rd_target to = {"127.0.0.1", h_redis_port(f->redis),
                                 .password = password, .timeout_ms = timeout_ms};
    return rda_create(f->base, &to, NULL);
}

static rda_conn *connect_async(struct fixture *f, const char *password)
{
    return connect_within(f, password, TIMEOUT_MS);
}

/* Segment 0's stock of `sku`, read with a raw GET. */
static long long stock_of(struct fixture *f, const char *sku)
{
    char key[SEG_KEY_MAX], got[32];
    seg_key_stock(key, sku, 0);
    assert_int_equal(h_redis_get(f->redis, key, got, sizeof got), 1);
    return atoll(got);
}

/* Turn the loop until *done reaches `want` (or 10 s pass): true when it did. */
static bool run_until(struct fixture *f, const int *done, int want)
{
    long long end = h_now_ms() + 10000;
    while (*done < want && h_now_ms() < end)
        event_base_loop(f->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    return *done >= want;
}

/* What the callbacks saw. */
struct seen {
    int done, ok, failed;
    int code;
    long long value;
};

static void on_reply(void *arg, int rc, struct store_reply *r)
{
    struct seen *s = arg;
    s->done++;
    if (rc == 0) {
        s->ok++;
        s->code = r->code;
        s->value = r->value;
    } else {
        s->failed++;
    }
}

static void on_int(void *arg, int rc, int value)
{
    struct seen *s = arg;
    s->done++;
    if (rc == 0) {
        s->ok++;
        s->value = value;
    } else {
        s->failed++;
    }
}

/* A SKU of `stock` over `n` segments; returns its epoch. */
static long long put(struct fixture *f, const char *sku, long long stock, int n)
{
    struct rd_meta m;
    int had = rd_meta_read(f->sync, sku, &m);
    assert_true(had >= 0);
    const struct rd_reset to = {.segments = n,
                                .mode = "lock",
                                .stock = stock,
                                .rebalance = true,
                                .epoch = 1000 + n + stock};
    rda_conn *c = connect_async(f, NULL);
    struct seen s = {0};
    rda_reset(c, sku, had ? m.epoch : 0, had ? m.segments : 0, &to, NULL, NULL, on_reply,
              &s);
    assert_true(run_until(f, &s.done, 1));
    assert_int_equal(s.ok, 1);
    assert_int_equal(s.code, RD_OK);
    rda_free(c);
    return to.epoch;
}

static void typed_calls_and_pipelining(void **state)
{
    struct fixture *f = *state;
    long long epoch = put(f, "as", 1000, 1);
    /* Not the deadline's test: 500 replies may take longer than TIMEOUT_MS on a
     * loaded machine under a sanitizer (CI saw 67 of 500 answered in time). */
    rda_conn *c = connect_within(f, NULL, 10000);

    struct seen acq = {0}, ded = {0};
    rda_acquire(c, "as", epoch, 0, "o-1", 1, "tok-1", 5000, 0, on_reply, &acq);
    assert_int_equal(acq.done, 0); /* never answered from inside the call */
    assert_true(run_until(f, &acq.done, 1));
    assert_int_equal(acq.code, RD_OK);
    assert_int_equal(acq.value, 1000);
    rda_deduct(c, "as", epoch, 0, "tok-1", 0, "tok-1", "o-1", 1, "{}", 0, false, on_reply,
               &ded);
    assert_true(run_until(f, &ded.done, 1));
    assert_int_equal(ded.code, RD_OK);
    assert_int_equal(ded.value, 999);

    /* 500 atomic deducts issued in one turn go out in a few writes. */
    struct rda_stats before, after;
    rda_stats(c, &before);
    struct seen many = {0};
    char id[32], tok[33];
    for (int i = 0; i < 500; i++) {
        snprintf(id, sizeof id, "m-%d", i);
        snprintf(tok, sizeof tok, "t-%d", i);
        rda_deduct(c, "as", epoch, 0, "", 0, tok, id, 1, "{}", 0, false, on_reply, &many);
    }
    assert_true(run_until(f, &many.done, 500));
    assert_int_equal(many.ok, 500);
    assert_int_equal(many.value >= 0, 1);
    rda_stats(c, &after);
    long long commands = after.commands - before.commands;
    long long writes = after.writes - before.writes;
    assert_int_equal(commands, 500);
    fprintf(stderr, "500 commands in %lld writes\n", writes);
    assert_true(writes > 0 && writes <= 50);
    assert_int_equal(stock_of(f, "as"), 499);
    rda_free(c);
}

static void hung_redis_answers_at_the_deadline(void **state)
{
    struct fixture *f = *state;
    rda_conn *c = connect_async(f, NULL);
    struct seen ping = {0};
    rda_ping(c, on_int, &ping);
    assert_true(run_until(f, &ping.done, 1));
    assert_int_equal(ping.ok, 1);

    assert_int_equal(h_redis_pause(f->redis), 0);
    struct seen hung = {0};
    for (int i = 0; i < 3; i++)
        rda_ping(c, on_int, &hung);
    assert_true(run_until(f, &hung.done, 3)); /* answered, not stuck */
    assert_int_equal(hung.failed, 3);
    assert_non_null(strstr(rda_error(c), "no reply within"));
    struct rda_stats st;
    rda_stats(c, &st);
    assert_true(st.timeouts >= 1);
    assert_int_equal(h_redis_resume(f->redis), 0);

    /* Back without a restart: a new connection, calls answered again. */
    struct seen back = {0};
    for (int tries = 0; tries < 100 && back.ok == 0; tries++) {
        int want = back.done + 1;
        rda_ping(c, on_int, &back);
        assert_true(run_until(f, &back.done, want));
        if (back.ok == 0)
            h_sleep_ms(50);
    }
    assert_int_equal(back.ok, 1);
    rda_free(c);
}

static void killed_connection_and_noscript(void **state)
{
    struct fixture *f = *state;
    long long epoch = put(f, "kn", 10, 2);
    rda_conn *c = connect_async(f, NULL);
    struct seen first = {0};
    rda_acquire(c, "kn", epoch, 0, "k-1", 1, "tk-1", 5000, 0, on_reply, &first);
    assert_true(run_until(f, &first.done, 1));
    assert_int_equal(first.code, RD_OK);

    /* Redis forgets its scripts: NOSCRIPT is answered by EVAL, transparently. */
    redisContext *rc = h_redis_connect(f->redis);
    assert_non_null(rc);
    redisReply *r = redisCommand(rc, "SCRIPT FLUSH");
    freeReplyObject(r);
    struct seen again = {0};
    rda_acquire(c, "kn", epoch, 1, "k-2", 1, "tk-2", 5000, 0, on_reply, &again);
    assert_true(run_until(f, &again.done, 1));
    assert_int_equal(again.code, RD_OK);

    /* The server closes the connection: what was owed is answered -1 (never resent),
     * and the next calls succeed on a new connection. */
    r = redisCommand(rc, "CLIENT KILL TYPE normal SKIPME yes");
    freeReplyObject(r);
    redisFree(rc);
    struct seen after = {0};
    for (int tries = 0; tries < 100 && after.ok == 0; tries++) {
        int want = after.done + 1;
        rda_release(c, "kn", 0, "tk-1", on_int, &after);
        assert_true(run_until(f, &after.done, want));
        if (after.ok == 0)
            h_sleep_ms(50);
    }
    assert_int_equal(after.ok, 1);
    assert_int_equal(after.value, 1); /* tk-1's lock, released */
    rda_free(c);
}

/* A deduct that ran but whose reply was lost on the wire (the proxy resets the
 * connection) is sent once more on a new connection and recognises its own attempt:
 * OK, once -- not -1, and not a second sale. */
static void lost_reply_is_sent_again(void **state)
{
    struct fixture *f = *state;
    long long epoch = put(f, "lost", 10, 1);
    h_proxy *p = h_proxy_start(h_redis_port(f->redis));
    assert_non_null(p);
    const struct rd_target to = {"127.0.0.1", h_proxy_port(p), .timeout_ms = 2000};
    rda_conn *c = rda_create(f->base, &to, NULL);
    struct seen ping = {0};
    rda_ping(c, on_int, &ping);
    assert_true(run_until(f, &ping.done, 1));
    h_proxy_drop_reply(p, "attempt-lost", 1);
    struct seen ded = {0};
    rda_deduct(c, "lost", epoch, 0, "", 0, "attempt-lost", "o-lost", 2, "{}", 0, false,
               on_reply, &ded);
    assert_true(run_until(f, &ded.done, 1));
    assert_int_equal(h_proxy_drops(p), 1);
    assert_int_equal(ded.ok, 1);
    assert_int_equal(ded.code, RD_OK);
    assert_int_equal(stock_of(f, "lost"), 8);
    rda_free(c);
    h_proxy_free(p);
}

/* ---- group commit: DEDUCT_BATCH (lua/deduct_batch.lua) -------------------------- */

struct batch_seen {
    int done, rc, n;
    struct store_reply r[8];
    char rec[8][256];
};

static void on_batch(void *arg, int rc, int n, struct store_reply *r)
{
    struct batch_seen *s = arg;
    s->done++;
    s->rc = rc;
    s->n = n;
    for (int k = 0; rc == 0 && k < n && k < 8; k++) {
        s->r[k] = r[k];
        snprintf(s->rec[k], sizeof s->rec[k], "%s", r[k].record ? r[k].record : "");
        s->r[k].record = NULL;
    }
}

/* An integer key of `sku`'s segment 0 (stock, sold) as Redis has it; -1 absent. */
static long long seg_int(struct fixture *f, char *(*key_of)(char *, const char *, int),
                         const char *sku)
{
    char key[SEG_KEY_MAX];
    redisContext *rc = h_redis_connect(f->redis);
    redisReply *r = redisCommand(rc, "GET %s", key_of(key, sku, 0));
    long long v = r != NULL && r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    freeReplyObject(r);
    redisFree(rc);
    return v;
}

static bool has_record(struct fixture *f, const char *id)
{
    char key[SEG_KEY_MAX];
    redisContext *rc = h_redis_connect(f->redis);
    redisReply *r = redisCommand(rc, "EXISTS %s", seg_key_order(key, id));
    bool yes = r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    redisFree(rc);
    return yes;
}

#define REC(id, q) "{\"order_id\":\"" id "\",\"qty\":" #q "}"

/* One batch larger than the stock: each order its own answer, in the order given --
 * those that fit sell (one after a SHORT too), the same id twice is one sale (the
 * second EXISTS with the first's record), the counts move once for all; sent again
 * (a lost reply) it answers the same sales OK and changes nothing; an id sold before
 * is EXISTS. A batch whose token lost the lock sells nothing. */
static void deduct_batch_answers_each_order(void **state)
{
    struct fixture *f = *state;
    long long epoch = put(f, "bt", 5, 1);
    rda_conn *c = connect_async(f, NULL);
    struct seen acq = {0};
    rda_acquire(c, "bt", epoch, 0, "bt-1", 2, "tok-b", 5000, 0, on_reply, &acq);
    assert_true(run_until(f, &acq.done, 1));
    assert_int_equal(acq.code, RD_OK);

    char flag[SEG_KEY_MAX], events[SEG_KEY_MAX];
    assert_int_equal(
        h_redis_set_px(f->redis, seg_key_ledger_flag(flag, "bt", 0), "1", 60000, false),
        0); /* the ledger on: each sale appends its event */
    seg_key_ledger_events(events, "bt", 0);

    const struct store_batch_order b[] = {
        {"bt-1", "att-1", REC("bt-1", 2), 2}, {"bt-2", "att-2", REC("bt-2", 2), 2},
        {"bt-1", "att-9", REC("bt-1", 2), 2}, {"bt-3", "att-3", REC("bt-3", 2), 2},
        {"bt-4", "att-4", REC("bt-4", 1), 1},
    };
    struct batch_seen s = {0};
    assert_true(rda_deduct_batch(c, "bt", epoch, 0, "tok-b", 0, 5, b, on_batch, &s));
    assert_true(run_until(f, &s.done, 1));
    assert_int_equal(s.rc, 0);
    assert_int_equal(s.n, 5);
    assert_int_equal(s.r[0].code, RD_OK);
    assert_int_equal(s.r[0].value, 3);
    assert_int_equal(s.r[1].code, RD_OK);
    assert_int_equal(s.r[1].value, 1);
    assert_int_equal(s.r[2].code, RD_EXISTS); /* the same id again: one sale */
    assert_string_equal(s.rec[2], REC("bt-1", 2));
    assert_int_equal(s.r[3].code, RD_SHORT); /* more than is left */
    assert_int_equal(s.r[3].value, 1);
    assert_int_equal(s.r[4].code, RD_OK); /* after it, what fits still sells */
    assert_int_equal(s.r[4].value, 0);
    assert_int_equal(seg_int(f, seg_key_stock, "bt"), 0);
    assert_int_equal(seg_int(f, seg_key_sold, "bt"), 5);
    assert_int_equal(seg_int(f, seg_key_lock, "bt"), -1); /* released */
    assert_true(has_record(f, "bt-1") && has_record(f, "bt-2") && has_record(f, "bt-4"));
    assert_false(has_record(f, "bt-3"));
    redisContext *rc = h_redis_connect(f->redis);
    redisReply *xr = redisCommand(rc, "XRANGE %s - +", events);
    assert_non_null(xr);
    assert_int_equal(xr->elements, 3); /* one event per sale, none for the others */
    const redisReply *ev = xr->element[1]->element[1]; /* bt-2's: k sale e .. o bt-2 */
    assert_string_equal(ev->element[5]->str, "bt-2");
    assert_string_equal(ev->element[7]->str, "-2");
    freeReplyObject(xr);
    redisFree(rc);

    /* Sent again after a lost reply (the lock long gone): its own sales are OK. */
    struct batch_seen again = {0};
    assert_true(rda_deduct_batch(c, "bt", epoch, 0, "tok-b", 0, 5, b, on_batch, &again));
    assert_true(run_until(f, &again.done, 1));
    assert_int_equal(again.r[0].code, RD_OK);
    assert_int_equal(again.r[1].code, RD_OK);
    assert_int_equal(again.r[3].code, RD_FENCED);
    assert_int_equal(again.r[4].code, RD_OK);
    assert_int_equal(seg_int(f, seg_key_sold, "bt"), 5);

    /* A fenced batch: the lease lapsed and another holder has the lock. */
    epoch = put(f, "bf", 10, 1);
    struct seen acq2 = {0};
    rda_acquire(c, "bf", epoch, 0, "bf-1", 1, "tok-old", 5000, 0, on_reply, &acq2);
    assert_true(run_until(f, &acq2.done, 1));
    assert_int_equal(acq2.code, RD_OK);
    char key[SEG_KEY_MAX];
    assert_int_equal(
        h_redis_set_px(f->redis, seg_key_lock(key, "bf", 0), "tok-new", 5000, false), 0);
    const struct store_batch_order fb[] = {
        {"bf-1", "fa-1", REC("bf-1", 1), 1},
        {"bf-2", "fa-2", REC("bf-2", 1), 1},
        {"bt-1", "fa-3", REC("bt-1", 2), 2}, /* sold before: EXISTS -- but fenced */
    };
    struct batch_seen fs = {0};
    assert_true(rda_deduct_batch(c, "bf", epoch, 0, "tok-old", 0, 3, fb, on_batch, &fs));
    assert_true(run_until(f, &fs.done, 1));
    for (int k = 0; k < 3; k++)
        assert_int_equal(fs.r[k].code, RD_FENCED);
    assert_int_equal(seg_int(f, seg_key_stock, "bf"), 10);
    assert_int_equal(seg_int(f, seg_key_sold, "bf"), 0);
    assert_false(has_record(f, "bf-1") || has_record(f, "bf-2"));
    char lock[64];
    assert_int_equal(h_redis_get(f->redis, key, lock, sizeof lock), 1);
    assert_string_equal(lock, "tok-new"); /* the new holder's, untouched */

    /* The new holder's batch: an id another SKU's order has is EXISTS, the rest sell. */
    const struct store_batch_order nb[] = {
        {"bf-1", "na-1", REC("bf-1", 1), 1},
        {"bt-2", "na-2", REC("bt-2", 2), 2},
    };
    struct batch_seen ns = {0};
    assert_true(rda_deduct_batch(c, "bf", epoch, 0, "tok-new", 0, 2, nb, on_batch, &ns));
    assert_true(run_until(f, &ns.done, 1));
    assert_int_equal(ns.r[0].code, RD_OK);
    assert_int_equal(ns.r[0].value, 9);
    assert_int_equal(ns.r[1].code, RD_EXISTS);
    assert_string_equal(ns.rec[1], REC("bt-2", 2));
    assert_int_equal(seg_int(f, seg_key_stock, "bf"), 9);
    rda_free(c);
}

static void wrong_password_says_why(void **state)
{
    struct fixture *f = *state;
    rda_conn *c = connect_async(f, "nope");
    struct seen ping = {0};
    rda_ping(c, on_int, &ping);
    assert_true(run_until(f, &ping.done, 1));
    assert_int_equal(ping.failed, 1);
    assert_non_null(strstr(rda_error(c), "AUTH"));
    rda_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(typed_calls_and_pipelining),
        cmocka_unit_test(hung_redis_answers_at_the_deadline),
        cmocka_unit_test(killed_connection_and_noscript),
        cmocka_unit_test(lost_reply_is_sent_again),
        cmocka_unit_test(wrong_password_says_why),
        cmocka_unit_test(deduct_batch_answers_each_order),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
