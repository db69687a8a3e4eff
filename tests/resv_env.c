/* resv_env.c -- the reservation suites' shared calls and view check (resv_env.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "tests/resv_env.h"

int rve_reserve(int port, const char *sku, long long qty, long long ttl_s, const char *id,
                struct h_resp *out)
{
    char body[256];
    if (id != NULL)
        snprintf(body, sizeof body,
                 "{\"sku\":\"%s\",\"qty\":%lld,\"ttl_s\":%lld,\"reservation_id\":\"%s\"}",
                 sku, qty, ttl_s, id);
    else
        snprintf(body, sizeof body, "{\"sku\":\"%s\",\"qty\":%lld,\"ttl_s\":%lld}", sku,
                 qty, ttl_s);
    struct h_resp r;
    int st = h_req(port, "POST", "/reservations", NULL, body, &r);
    if (out != NULL)
        *out = r;
    else
        h_resp_free(&r);
    return st;
}

int rve_on_resv(int port, const char *method, const char *id, const char *suffix,
                char *code)
{
    char path[160];
    snprintf(path, sizeof path, "/reservations/%s%s", id, suffix);
    struct h_resp r;
    int st = h_req(port, method, path, NULL, NULL, &r);
    if (code != NULL)
        h_error_code(&r, code, 64);
    h_resp_free(&r);
    return st;
}

struct rve_nums rve_sku_nums(int port, const char *token, const char *sku)
{
    json_t *j = h_get_sku(port, token, sku);
    assert_non_null(j);
    struct rve_nums n = {h_jint(j, "initial"), h_jint(j, "remaining"),
                         h_jint(j, "reserved"), h_jint(j, "sold")};
    json_t *st = json_object_get(j, "segment_stock"),
           *rs = json_object_get(j, "segment_reserved"),
           *sd = json_object_get(j, "segment_sold");
    assert_true(json_is_array(rs));
    long long sum = 0, res = 0;
    for (size_t i = 0; i < json_array_size(st); i++) {
        long long r = json_integer_value(json_array_get(rs, i));
        assert_true(r >= 0);
        res += r;
        sum += json_integer_value(json_array_get(st, i)) + r +
               json_integer_value(json_array_get(sd, i));
    }
    json_decref(j);
    assert_int_equal(res, n.reserved);
    assert_int_equal(sum, n.initial);
    assert_int_equal(n.remaining + n.reserved + n.sold, n.initial);
    return n;
}

void rve_replayed(int port, const char *sku, const char *id, long long qty, long long x,
                  long long other)
{
    struct h_resp r;
    assert_int_equal(rve_reserve(port, sku, qty, 60, id, &r), 200);
    if (x >= 0) {
        json_t *j = h_resp_json(&r);
        assert_non_null(j);
        assert_int_equal(h_jint(j, "expires_at_ms"), x);
        json_decref(j);
    }
    h_resp_free(&r);
    assert_int_equal(rve_reserve(port, sku, other, 60, id, &r), 409);
    assert_int_equal(h_expect_error(&r, 409, "reservation_conflict"), 0);
    h_resp_free(&r);
}

void rve_confirmed(int p0, int p1, const char *id)
{
    assert_int_equal(rve_on_resv(p0, "POST", id, "/confirm", NULL), 201);
    assert_int_equal(rve_on_resv(p1, "POST", id, "/confirm", NULL), 200);
    char code[64];
    assert_int_equal(rve_on_resv(p0, "DELETE", id, "", code), 409);
    assert_string_equal(code, "reservation_confirmed");
}

struct rve_nums rve_released(int p0, int p1, const char *token, const char *sku,
                             const char *id)
{
    assert_int_equal(rve_on_resv(p0, "DELETE", id, "", NULL), 200);
    assert_int_equal(rve_on_resv(p1, "DELETE", id, "", NULL), 200);
    char code[64];
    assert_int_equal(rve_on_resv(p0, "POST", id, "/confirm", code), 409);
    assert_string_equal(code, "reservation_released");
    struct rve_nums n = rve_sku_nums(p0, token, sku);
    assert_int_equal(n.reserved, 0);
    return n;
}

void rve_order_under_hold(int port, const char *token, const char *sku, const char *id,
                          long long qty)
{
    struct h_resp r;
    char code[64];
    assert_int_equal(rve_reserve(port, sku, qty, 60, id, NULL), 201);
    /* The order path does not look at holds: the order sells under the hold's id. */
    int st = h_order(port, sku, 1, id, &r);
    print_message("order under hold %s: %d %.200s\n", id, st, r.body ? r.body : "");
    assert_int_equal(st, 201);
    h_resp_free(&r);
    struct rve_nums n = rve_sku_nums(port, token, sku);
    assert_int_equal(n.reserved, qty);
    assert_int_equal(n.sold, 1);
    /* The hold's confirm finds the id's record an order's, not its own: 409, and the
     * hold stays held, nothing sold. */
    st = rve_on_resv(port, "POST", id, "/confirm", code);
    print_message("confirm of hold %s after the order: %d %s\n", id, st, code);
    assert_int_equal(st, 409);
    assert_string_equal(code, "reservation_conflict");
    n = rve_sku_nums(port, token, sku);
    assert_int_equal(n.reserved, qty);
    assert_int_equal(n.sold, 1);
    char path[160];
    snprintf(path, sizeof path, "/reservations/%s", id);
    assert_int_equal(h_req(port, "GET", path, NULL, NULL, &r), 200);
    json_t *j = h_resp_json(&r);
    print_message("GET of hold %s: %.300s\n", id, r.body ? r.body : "");
    assert_string_equal(json_string_value(json_object_get(j, "status")), "held");
    assert_int_equal(h_jint(j, "qty"), qty);
    json_decref(j);
    h_resp_free(&r);
    /* The order's replay is the order's: its record, its qty. */
    assert_int_equal(h_order(port, sku, 1, id, &r), 200);
    j = h_resp_json(&r);
    assert_int_equal(h_jint(j, "qty"), 1);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "confirmed");
    json_decref(j);
    h_resp_free(&r);
    /* The release returns the hold's units; the order stays sold. */
    assert_int_equal(rve_on_resv(port, "DELETE", id, "", NULL), 200);
    st = rve_on_resv(port, "POST", id, "/confirm", code);
    assert_int_equal(st, 409);
    assert_string_equal(code, "reservation_released");
    n = rve_sku_nums(port, token, sku);
    assert_int_equal(n.reserved, 0);
    assert_int_equal(n.sold, 1);
    assert_int_equal(n.remaining, 9);
    snprintf(path, sizeof path, "/orders/%s", id);
    assert_int_equal(h_req(port, "GET", path, NULL, NULL, &r), 200);
    j = h_resp_json(&r);
    assert_int_equal(h_jint(j, "qty"), 1);
    json_decref(j);
    h_resp_free(&r);

    /* A hold that expires under an order's id: its confirm says so (410), not 409. */
    char id2[80];
    snprintf(id2, sizeof id2, "%s-x", id);
    assert_int_equal(rve_reserve(port, sku, 1, 1, id2, &r), 201);
    j = h_resp_json(&r);
    long long x = h_jint(j, "expires_at_ms");
    json_decref(j);
    h_resp_free(&r);
    assert_int_equal(h_order(port, sku, 1, id2, NULL), 201);
    while (rve_wall_ms() < x + 20)
        usleep(10 * 1000);
    st = rve_on_resv(port, "POST", id2, "/confirm", code);
    print_message("confirm of expired hold %s after the order: %d %s\n", id2, st, code);
    assert_int_equal(st, 410);
    assert_string_equal(code, "reservation_expired");
    n = rve_until_unreserved(port, token, sku, 5000);
    assert_int_equal(n.sold, 2);
    assert_int_equal(n.remaining, 8);
}

struct rve_nums rve_until_unreserved(int port, const char *token, const char *sku,
                                     int timeout_ms)
{
    long long until = rve_wall_ms() + timeout_ms;
    struct rve_nums n = rve_sku_nums(port, token, sku);
    while (n.reserved > 0 && rve_wall_ms() < until) {
        usleep(100 * 1000);
        n = rve_sku_nums(port, token, sku);
    }
    return n;
}

long long rve_parts_sum(json_t *j, size_t *n)
{
    json_t *ps = json_object_get(j, "segments");
    assert_true(json_is_array(ps));
    long long sum = 0;
    for (size_t i = 0; i < json_array_size(ps); i++) {
        long long q = h_jint(json_array_get(ps, i), "qty");
        assert_true(q > 0);
        sum += q;
    }
    *n = json_array_size(ps);
    return sum;
}

long long rve_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One confirm of a race: which race, which side. */
struct racer {
    struct rve_race *race;
    int side;
};

static void *race_one(void *arg)
{
    struct racer *r = arg;
    struct rve_race *x = r->race;
    long long wait = x->at + (r->side ? 1 : -1) - rve_wall_ms();
    if (wait > 0)
        usleep((useconds_t)(wait * 1000));
    x->status[r->side] = rve_on_resv(x->port[r->side], "POST", x->id, "/confirm", NULL);
    return NULL;
}

int rve_race_confirms(struct rve_race *race, int n)
{
    struct racer *rc = calloc((size_t)n * 2, sizeof *rc);
    pthread_t *th = calloc((size_t)n * 2, sizeof *th);
    assert_non_null(rc);
    assert_non_null(th);
    for (int k = 0; k < 2 * n; k++) {
        rc[k] = (struct racer){&race[k / 2], k % 2};
        assert_int_equal(pthread_create(&th[k], NULL, race_one, &rc[k]), 0);
    }
    for (int k = 0; k < 2 * n; k++)
        pthread_join(th[k], NULL);
    free(rc);
    free(th);
    int sold = 0;
    for (int k = 0; k < n; k++) {
        int s0 = race[k].status[0], s1 = race[k].status[1];
        bool ok0 = s0 == 201 || s0 == 200, ok1 = s1 == 201 || s1 == 200;
        if (!((ok0 && ok1 && (s0 == 201) != (s1 == 201)) || (s0 == 410 && s1 == 410)))
            fail_msg("%s: %d, %d (one sale, or expired for both)", race[k].id, s0, s1);
        char path[96];
        snprintf(path, sizeof path, "/orders/%.63s", race[k].id);
        struct h_resp r;
        assert_int_equal(h_http(race[k].port[0], "GET", path, NULL, NULL, 0, &r),
                         ok0 ? 200 : 404);
        h_resp_free(&r);
        sold += ok0;
    }
    return sold;
}

long long rve_resv_parts(int port, const char *id, char *st, size_t *n)
{
    char path[96];
    snprintf(path, sizeof path, "/reservations/%s", id);
    struct h_resp r;
    assert_int_equal(h_http(port, "GET", path, NULL, NULL, 0, &r), 200);
    json_t *j = h_resp_json(&r);
    snprintf(st, 16, "%s", json_string_value(json_object_get(j, "status")));
    long long sum = rve_parts_sum(j, n);
    json_decref(j);
    h_resp_free(&r);
    return sum;
}

/* id `pre`-k for the k-th hold of rve_multi_segment_hold. */
static const char *multi_id(char *buf, size_t len, const char *pre, int k)
{
    snprintf(buf, len, "%s-%d", pre, k);
    return buf;
}

void rve_multi_segment_hold(int a, int b, const char *sku, const char *pre)
{
    char id[64], st[16], code[64], path[128];
    assert_int_equal(h_put_sku(a, NULL, sku, 10, 2, "lock", 0), 0);
    struct h_resp r;
    assert_int_equal(rve_reserve(a, sku, 7, 60, multi_id(id, sizeof id, pre, 1), &r),
                     201);
    json_t *j = h_resp_json(&r);
    size_t n;
    assert_int_equal(h_jint(j, "qty"), 7);
    assert_int_equal(rve_parts_sum(j, &n), 7);
    assert_int_equal(n, 2);
    long long x = h_jint(j, "expires_at_ms");
    json_decref(j);
    h_resp_free(&r);
    struct rve_nums s = rve_sku_nums(a, NULL, sku);
    assert_int_equal(s.reserved, 7);
    assert_int_equal(s.remaining, 3);
    /* Replays: the same hold (either instance); another qty: 409. */
    rve_replayed(b, sku, id, 7, x, 3);
    assert_int_equal(rve_resv_parts(b, id, st, &n), 7);
    assert_int_equal(n, 2);
    assert_string_equal(st, "held");
    /* Confirm: one order of 7 over both segments; its replay 200. */
    rve_confirmed(b, a, id);
    snprintf(path, sizeof path, "/orders/%s", id);
    assert_int_equal(h_http(a, "GET", path, NULL, NULL, 0, &r), 200);
    j = h_resp_json(&r);
    assert_int_equal(h_jint(j, "qty"), 7);
    assert_int_equal(rve_parts_sum(j, &n), 7);
    assert_int_equal(n, 2);
    json_decref(j);
    h_resp_free(&r);
    s = rve_sku_nums(a, NULL, sku);
    assert_int_equal(s.reserved, 0);
    assert_int_equal(s.sold, 7);
    /* Cancelling the order returns every part. */
    assert_int_equal(h_http(a, "DELETE", path, NULL, NULL, 0, &r), 200);
    h_resp_free(&r);
    s = rve_sku_nums(a, NULL, sku);
    assert_int_equal(s.sold, 0);
    assert_int_equal(s.remaining, 10);

    /* Restock and rebalance with a multi-part hold outstanding, then release. */
    assert_int_equal(rve_reserve(a, sku, 9, 60, multi_id(id, sizeof id, pre, 2), NULL),
                     201);
    snprintf(path, sizeof path, "/admin/skus/%s/restock", sku);
    assert_int_equal(h_req(a, "POST", path, NULL, "{\"qty\":4}", &r), 200);
    h_resp_free(&r);
    snprintf(path, sizeof path, "/admin/skus/%s/rebalance", sku);
    assert_int_equal(h_req(a, "POST", path, NULL, NULL, &r), 200);
    h_resp_free(&r);
    s = rve_sku_nums(a, NULL, sku);
    assert_int_equal(s.reserved, 9);
    assert_int_equal(s.remaining, 5);
    assert_int_equal(rve_released(b, a, NULL, sku, id).remaining, 14);
    /* All or nothing: more than the SKU holds takes nothing. */
    assert_int_equal(rve_reserve(a, sku, 15, 60, multi_id(id, sizeof id, pre, 3), &r),
                     409);
    assert_int_equal(h_expect_error(&r, 409, "insufficient_stock"), 0);
    h_resp_free(&r);
    assert_int_equal(rve_on_resv(a, "GET", id, "", NULL), 404);
    assert_int_equal(rve_sku_nums(a, NULL, sku).remaining, 14);
    /* A reset voids every part; a delete too. */
    assert_int_equal(rve_reserve(a, sku, 12, 60, multi_id(id, sizeof id, pre, 4), NULL),
                     201);
    assert_int_equal(h_put_sku(a, NULL, sku, 10, 2, "lock", 0), 0);
    assert_int_equal(rve_on_resv(b, "POST", id, "/confirm", code), 410);
    assert_string_equal(code, "reservation_void");
    s = rve_sku_nums(a, NULL, sku);
    assert_int_equal(s.reserved, 0);
    assert_int_equal(s.remaining, 10);
    assert_int_equal(rve_reserve(a, sku, 8, 60, multi_id(id, sizeof id, pre, 5), NULL),
                     201);
    snprintf(path, sizeof path, "/admin/skus/%s", sku);
    assert_int_equal(h_http(a, "DELETE", path, NULL, NULL, 0, &r), 200);
    h_resp_free(&r);
    assert_int_equal(rve_on_resv(a, "DELETE", id, "", NULL), 410);
}
