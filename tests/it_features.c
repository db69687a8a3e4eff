/* it_features.c -- issue 5 over HTTP: multi-segment orders, cancel, restock, rebalance,
 * the sold-out fast path (one and two instances), replay after sell-out, GET /metrics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

#define MAX_SEGS 64 /* the most segments any SKU here has */

struct env {
    struct h_env *h; /* h->svc is the instance most tests talk to */
    h_svc *peer; /* a second instance on the same Redis, started by the test needing it */
};

static int group_setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    if (e == NULL)
        return -1;
    *state = e;
    e->h = h_env_start(NULL);
    return e->h != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    if (e == NULL)
        return 0;
    int rc = h_svc_stop_clean(e->peer) | h_env_stop(e->h);
    h_svc_free(e->peer);
    free(e);
    return rc;
}

/* Start the second instance on the group's Redis (fresh counters). */
static int peer_start(struct env *e)
{
    if (e->peer == NULL)
        e->peer = h_svc_start_args(e->h->redis, NULL);
    return e->peer != NULL ? h_svc_port(e->peer) : -1;
}

/* Stop the second instance; it must exit cleanly. */
static void peer_stop(struct env *e)
{
    int rc = h_svc_stop_clean(e->peer);
    h_svc_free(e->peer);
    e->peer = NULL;
    assert_int_equal(rc, 0);
}

/* ---- small helpers ------------------------------------------------------------ */

static const char *jstr(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s != NULL ? s : "";
}

/* What GET /admin/skus/{sku} says, flattened. */
struct snap {
    long long initial, remaining, sold, orders, locks_held;
    int segments;
    int rebalance; /* 1 true, 0 false, -1 absent */
    long long stock[MAX_SEGS], seg_sold[MAX_SEGS];
};

static int snap_from(const json_t *j, struct snap *s)
{
    memset(s, 0, sizeof *s);
    s->initial = h_jint(j, "initial");
    s->remaining = h_jint(j, "remaining");
    s->sold = h_jint(j, "sold");
    s->orders = h_jint(j, "orders");
    s->locks_held = h_jint(j, "locks_held");
    s->segments = (int)h_jint(j, "segments");
    json_t *rb = json_object_get(j, "rebalance");
    s->rebalance = json_is_boolean(rb) ? json_is_true(rb) : -1;
    json_t *st = json_object_get(j, "segment_stock"),
           *so = json_object_get(j, "segment_sold");
    if (s->segments < 1 || s->segments > MAX_SEGS || !json_is_array(st) ||
        json_array_size(st) != (size_t)s->segments) {
        fprintf(stderr, "unexpected SKU status: segments %d\n", s->segments);
        return -1;
    }
    for (int i = 0; i < s->segments; i++) {
        s->stock[i] = json_integer_value(json_array_get(st, (size_t)i));
        s->seg_sold[i] =
            json_is_array(so) ? json_integer_value(json_array_get(so, (size_t)i)) : -1;
    }
    return 0;
}

static void snap_get(int port, const char *sku, struct snap *s)
{
    json_t *j = h_get_sku(port, NULL, sku);
    assert_non_null(j);
    int rc = snap_from(j, s);
    json_decref(j);
    assert_int_equal(rc, 0);
}

/* Segment stock as "[a,b,...]" for messages and exact comparisons. */
static const char *stock_str(const struct snap *s, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < s->segments && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? "," : "", s->stock[i]);
    if (n < len)
        snprintf(buf + n, len - n, "]");
    return buf;
}

static void assert_stock(const struct snap *s, const char *want)
{
    char buf[512];
    assert_string_equal(stock_str(s, buf, sizeof buf), want);
}

/* How many segments hold exactly `units`. */
static int segments_holding(const struct snap *s, long long units)
{
    int n = 0;
    for (int i = 0; i < s->segments; i++)
        n += s->stock[i] == units;
    return n;
}

/* Check a confirmed/cancelled order record; fill seg[]/part[] (cap entries) and return
 * the number of parts, or -1 with the reason in `why`. No cmocka asserts: any thread. */
static int check_record(const json_t *o, const char *sku, long long qty,
                        const char *status, int nsegs, int *seg, long long *part, int cap,
                        char *why, size_t why_len)
{
    json_t *parts = json_object_get(o, "segments");
    if (!json_is_string(json_object_get(o, "order_id")) ||
        jstr(o, "order_id")[0] == '\0') {
        snprintf(why, why_len, "no order_id");
        return -1;
    }
    if (strcmp(jstr(o, "sku"), sku) != 0 || h_jint(o, "qty") != qty ||
        strcmp(jstr(o, "status"), status) != 0) {
        snprintf(why, why_len, "sku/qty/status differ (want %s/%lld/%s)", sku, qty,
                 status);
        return -1;
    }
    if (!json_is_array(parts) || json_array_size(parts) < 1 ||
        json_array_size(parts) > (size_t)cap) {
        snprintf(why, why_len, "\"segments\" missing, empty or too long");
        return -1;
    }
    int n = (int)json_array_size(parts);
    long long sum = 0;
    for (int k = 0; k < n; k++) {
        json_t *p = json_array_get(parts, (size_t)k);
        seg[k] = (int)h_jint(p, "segment");
        part[k] = h_jint(p, "qty");
        if (seg[k] < 0 || seg[k] >= nsegs || part[k] < 1) {
            snprintf(why, why_len, "part %d: segment %d qty %lld", k, seg[k], part[k]);
            return -1;
        }
        if (k > 0 && seg[k] <= seg[k - 1]) {
            snprintf(why, why_len, "segments not ascending at part %d", k);
            return -1;
        }
        sum += part[k];
    }
    if (sum != qty) {
        snprintf(why, why_len, "parts sum to %lld, qty %lld", sum, qty);
        return -1;
    }
    if (h_jint(o, "segment") != seg[0]) {
        snprintf(why, why_len, "\"segment\" %lld is not the first part's %d",
                 h_jint(o, "segment"), seg[0]);
        return -1;
    }
    return n;
}

/* check_record with cmocka asserts; returns the number of parts. */
static int expect_record(const json_t *o, const char *sku, long long qty,
                         const char *status, int nsegs, int *seg, long long *part)
{
    char why[200] = "";
    int n =
        check_record(o, sku, qty, status, nsegs, seg, part, MAX_SEGS, why, sizeof why);
    if (n < 0) {
        char *text = json_dumps(o, JSON_COMPACT);
        fail_msg("bad order record %s: %s", text ? text : "?", why);
    }
    return n;
}

/* expect_record, and the record has exactly the `n` parts seg[]/part[]. */
static void expect_record_parts(const json_t *o, const char *sku, long long qty,
                                const char *status, int nsegs, int n, const int *seg,
                                const long long *part)
{
    int seg2[MAX_SEGS];
    long long part2[MAX_SEGS];
    assert_int_equal(expect_record(o, sku, qty, status, nsegs, seg2, part2), n);
    for (int k = 0; k < n; k++) {
        assert_int_equal(seg2[k], seg[k]);
        assert_int_equal(part2[k], part[k]);
    }
}

static json_t *resp_json(const struct h_resp *r)
{
    json_t *j = h_resp_json(r);
    if (j == NULL)
        fail_msg("status %d, body not JSON: %.300s", r->status, r->body);
    return j;
}

/* PUT a SKU with every setting, the rebalance flag included. */
static void put_sku_rebalance(int port, const char *sku, long long stock, int segments,
                              bool rebalance)
{
    char path[128], body[200];
    snprintf(path, sizeof path, "/admin/skus/%s?reset=true", sku);
    snprintf(body, sizeof body,
             "{\"stock\": %lld, \"segments\": %d, \"mode\": \"lock\", \"hold_ms\": 0, "
             "\"rebalance\": %s}",
             stock, segments, rebalance ? "true" : "false");
    struct h_resp r;
    int st = h_req(port, "PUT", path, NULL, body, &r);
    if (st != 200 && st != 201)
        fail_msg("PUT %s %s -> %d %.300s", path, body, st, r.body);
    h_resp_free(&r);
}

/* POST /admin/skus/{sku}/restock with a raw JSON body (NULL: no body at all). */
static int restock_raw(int port, const char *sku, const char *body, struct h_resp *out)
{
    char path[128];
    snprintf(path, sizeof path, "/admin/skus/%s/restock", sku);
    return h_req(port, "POST", path, NULL, body, out);
}

static int restock(int port, const char *sku, long long qty, struct h_resp *out)
{
    char body[64];
    snprintf(body, sizeof body, "{\"qty\": %lld}", qty);
    return restock_raw(port, sku, body, out);
}

static int rebalance(int port, const char *sku, struct h_resp *out)
{
    char path[128];
    snprintf(path, sizeof path, "/admin/skus/%s/rebalance", sku);
    return h_req(port, "POST", path, NULL, NULL, out);
}

static int cancel(int port, const char *id, struct h_resp *out)
{
    char path[160];
    snprintf(path, sizeof path, "/orders/%s", id);
    return h_req(port, "DELETE", path, NULL, NULL, out);
}

/* Order and expect 201; returns the parsed record (caller decrefs). */
static json_t *order_ok(int port, const char *sku, long long qty, const char *id)
{
    struct h_resp r;
    int st = h_order(port, sku, qty, id, &r);
    if (st != 201)
        fail_msg("order %s x%lld (%s) -> %d %.300s", sku, qty, id ? id : "-", st, r.body);
    json_t *j = resp_json(&r);
    h_resp_free(&r);
    return j;
}

static void order_expect_error(int port, const char *sku, long long qty, const char *id,
                               int status, const char *code)
{
    struct h_resp r;
    h_order(port, sku, qty, id, &r);
    assert_int_equal(h_expect_error(&r, status, code), 0);
    h_resp_free(&r);
}

/* Sell whatever is left with single-unit orders until 409 sold_out; returns the count.
 * Anything but 201 or sold_out fails the test. */
static long long drain(int port, const char *sku)
{
    for (long long n = 0;; n++) {
        struct h_resp r;
        int st = h_order(port, sku, 1, NULL, &r);
        if (st != 201) {
            assert_int_equal(h_expect_error(&r, 409, "sold_out"), 0);
            h_resp_free(&r);
            return n;
        }
        h_resp_free(&r);
    }
}

/* Run fn(idx, ctx) on `n` threads (h_parallel) with the run's lock `mu` initialised
 * for them and destroyed after; then print the run's first unexpected `what`, if any. */
static void run_parallel(int n, void (*fn)(int idx, void *ctx), void *ctx,
                         pthread_mutex_t *mu, const char *first_bad, const char *what)
{
    pthread_mutex_init(mu, NULL);
    assert_int_equal(h_parallel(n, fn, ctx), 0);
    pthread_mutex_destroy(mu);
    if (first_bad[0] != '\0')
        fprintf(stderr, "first unexpected %s: %s\n", what, first_bad);
}

/* ---- multi-segment orders ------------------------------------------------------- */

/* No segment holds the qty: the order takes several, and the record's parts are
 * exactly what left each segment. */
static void multi_segment_in_mode(int port, const char *sku, const char *mode)
{
    /* 10 over 5: 2 in each. */
    assert_int_equal(h_put_sku(port, NULL, sku, 10, 5, mode, 0), 0);
    long long multi0 = h_stat(port, NULL, "multi_segment_orders");
    struct snap before, after;
    snap_get(port, sku, &before);
    assert_stock(&before, "[2,2,2,2,2]");

    char id[80];
    snprintf(id, sizeof id, "%s-rec-1", sku);
    json_t *o = order_ok(port, sku, 5, id);
    int seg[MAX_SEGS];
    long long part[MAX_SEGS];
    int n = expect_record(o, sku, 5, "confirmed", 5, seg, part);
    assert_true(n >= 3); /* 5 units at 2 per segment */
    assert_string_equal(jstr(o, "order_id"), id);
    json_decref(o);

    snap_get(port, sku, &after);
    long long want[MAX_SEGS];
    memcpy(want, before.stock, sizeof want);
    for (int k = 0; k < n; k++)
        want[seg[k]] -= part[k];
    for (int i = 0; i < 5; i++)
        assert_int_equal(after.stock[i], want[i]);
    assert_int_equal(after.sold, 5);
    assert_int_equal(after.orders, 1);
    assert_int_equal(after.locks_held, 0);
    if (strcmp(mode, "lock") == 0)
        assert_int_equal(h_stat(port, NULL, "multi_segment_orders"), multi0 + 1);

    /* The stored record is the one confirmed. */
    struct h_resp r;
    char path[120];
    snprintf(path, sizeof path, "/orders/%s", id);
    assert_int_equal(h_req(port, "GET", path, NULL, NULL, &r), 200);
    o = resp_json(&r);
    expect_record_parts(o, sku, 5, "confirmed", 5, n, seg, part);
    json_decref(o);
    h_resp_free(&r);

    /* 5 left: 6 is short for the SKU as a whole, and takes nothing. */
    order_expect_error(port, sku, 6, NULL, 409, "insufficient_stock");
    snap_get(port, sku, &before);
    assert_int_equal(before.remaining, 5);
    assert_int_equal(before.sold, 5);
    /* Exactly what is left still sells in one order. */
    o = order_ok(port, sku, 5, NULL);
    assert_true(expect_record(o, sku, 5, "confirmed", 5, seg, part) >= 2);
    json_decref(o);
    order_expect_error(port, sku, 1, NULL, 409, "sold_out");
    assert_int_equal(h_audit(port, NULL, sku, 10, false), 0);
}

static void test_multi_segment_record(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    multi_segment_in_mode(e->h->port, "ms-lock", "lock");
    multi_segment_in_mode(e->h->port, "ms-atomic", "atomic");
}

/* Many concurrent orders that mostly need several segments. */
struct multi_run {
    int port;
    const char *sku;
    int segments;
    int per_thread;
    long long fixed_qty; /* every order this qty; 0: 7..15 */
    pthread_mutex_t mu;  /* guards everything below */
    int created, multi, sold_out, insufficient, busy, other;
    long long qty_sum;
    long long per_segment[MAX_SEGS];
    char first_bad[400];
};

static void multi_note(struct multi_run *m, const char *fmt, int status, const char *body)
{
    m->other++;
    if (m->first_bad[0] == '\0')
        snprintf(m->first_bad, sizeof m->first_bad, fmt, status, body);
}

static void multi_worker(int idx, void *ctx)
{
    struct multi_run *m = ctx;
    for (int i = 0; i < m->per_thread; i++) {
        long long qty = m->fixed_qty > 0 ? m->fixed_qty : 7 + (idx * 5 + i) % 9;
        struct h_resp r;
        int st = h_order(m->port, m->sku, qty, NULL, &r);
        json_t *j = st > 0 ? json_loadb(r.body, r.body_len, 0, NULL) : NULL;
        const char *code = jstr(j, "error");
        bool done = false;
        pthread_mutex_lock(&m->mu);
        if (st == 201) {
            int seg[MAX_SEGS];
            long long part[MAX_SEGS];
            char why[200];
            int n = check_record(j, m->sku, qty, "confirmed", m->segments, seg, part,
                                 MAX_SEGS, why, sizeof why);
            if (n < 0) {
                multi_note(m, "bad 201 (%d): %.300s", st, why);
            } else {
                m->created++;
                m->multi += n > 1;
                m->qty_sum += qty;
                for (int k = 0; k < n; k++)
                    m->per_segment[seg[k]] += part[k];
            }
        } else if (st == 409 && strcmp(code, "sold_out") == 0) {
            m->sold_out++;
            done = true;
        } else if (st == 409 && strcmp(code, "insufficient_stock") == 0) {
            m->insufficient++;
        } else if (st == 503 && strcmp(code, "busy") == 0) {
            m->busy++;
        } else {
            multi_note(m, "status %d body: %.300s", st, r.body);
        }
        pthread_mutex_unlock(&m->mu);
        json_decref(j);
        h_resp_free(&r);
        if (done)
            break;
    }
}

/* After a multi_run: the SKU sold exactly what its 201s promised, each segment exactly
 * the parts they named, and the audit holds for `initial`. Leaves the status in `s`. */
static void expect_multi_sold(int port, const struct multi_run *m, long long initial,
                              struct snap *s)
{
    snap_get(port, m->sku, s);
    assert_int_equal(s->sold, m->qty_sum);
    assert_int_equal(s->orders, m->created);
    for (int i = 0; i < m->segments; i++)
        assert_int_equal(s->seg_sold[i], m->per_segment[i]);
    assert_int_equal(h_audit(port, NULL, m->sku, initial, false), 0);
}

static void test_multi_segment_concurrent(void **state)
{
    struct env *e = *state;
    h_deadline(180);
    const char *sku = "ms-conc";
    const int segments = 20;
    /* 200 over 20: 10 a segment, so every order of 11..15 needs two or more, and
     * the 7..10s leave remainders that force more. hold_ms keeps locks contended. */
    assert_int_equal(h_put_sku(e->h->port, NULL, sku, 200, segments, "lock", 2), 0);
    struct multi_run m;
    memset(&m, 0, sizeof m);
    m.port = e->h->port;
    m.sku = sku;
    m.segments = segments;
    m.per_thread = 12;
    run_parallel(40, multi_worker, &m, &m.mu, m.first_bad, "reply");
    fprintf(stderr,
            "%s: %d x 201 (%d multi-segment, %lld units), %d sold_out, %d "
            "insufficient_stock, %d busy, %d other\n",
            sku, m.created, m.multi, m.qty_sum, m.sold_out, m.insufficient, m.busy,
            m.other);
    assert_int_equal(m.other, 0);

    /* Every unit the 201s promised left exactly the segments they named. */
    struct snap s;
    expect_multi_sold(e->h->port, &m, 200, &s);
    assert_int_equal(s.locks_held, 0);

    /* No lock was left behind: what remains still sells, one unit at a time. */
    long long left = s.remaining;
    assert_int_equal(drain(e->h->port, sku), left);
    snap_get(e->h->port, sku, &s);
    assert_int_equal(s.remaining, 0);
    assert_int_equal(s.sold, 200);
    assert_int_equal(h_audit(e->h->port, NULL, sku, 200, false), 0);

    /* Locks are held 2 ms at a time, so no order has a reason to wait lock_wait_ms
     * (2 s): a 503 busy here is orders walking each other's claims instead of
     * filling from several segments (or answering insufficient_stock). */
    assert_int_equal(m.busy, 0);
    assert_true(m.multi > 0);
}

/* 40 units as 2 in each of 20 segments, 20 orders of 3 at once: every order needs
 * two segments. Each either sells or is refused because fewer than 3 units are left
 * (stock only falls here), so exactly 13 sell and 1 unit remains. */
static void test_fragmented_stock_concurrent(void **state)
{
    struct env *e = *state;
    h_deadline(120);
    const char *sku = "ms-frag";
    assert_int_equal(h_put_sku(e->h->port, NULL, sku, 40, 20, "lock", 0), 0);
    struct multi_run m;
    memset(&m, 0, sizeof m);
    m.port = e->h->port;
    m.sku = sku;
    m.segments = 20;
    m.per_thread = 1;
    m.fixed_qty = 3;
    run_parallel(20, multi_worker, &m, &m.mu, m.first_bad, "reply");
    fprintf(stderr,
            "%s: %d x 201 (%d multi-segment), %d sold_out, %d insufficient_stock, "
            "%d busy, %d other\n",
            sku, m.created, m.multi, m.sold_out, m.insufficient, m.busy, m.other);
    assert_int_equal(m.other, 0);
    struct snap s;
    expect_multi_sold(e->h->port, &m, 40, &s);
    assert_int_equal(m.busy, 0);
    assert_int_equal(m.created, 13);
    assert_int_equal(m.insufficient + m.sold_out, 7);
    assert_int_equal(s.remaining, 1);
}

/* ---- cancel --------------------------------------------------------------------- */

static void test_cancel(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    const char *sku = "cancel-a";
    assert_int_equal(h_put_sku(e->h->port, NULL, sku, 10, 5, "lock", 0), 0);
    long long cancelled0 = h_stat(e->h->port, NULL, "orders_cancelled");
    struct snap before, s;
    snap_get(e->h->port, sku, &before);

    /* A single-segment order, cancelled: its units go back where they came from. */
    json_t *o = order_ok(e->h->port, sku, 2, "cx-1");
    int seg[MAX_SEGS];
    long long part[MAX_SEGS];
    assert_int_equal(expect_record(o, sku, 2, "confirmed", 5, seg, part), 1);
    json_decref(o);
    snap_get(e->h->port, sku, &s);
    assert_int_equal(s.stock[seg[0]], before.stock[seg[0]] - 2);
    assert_int_equal(s.sold, 2);
    assert_int_equal(s.orders, 1);

    struct h_resp r;
    assert_int_equal(cancel(e->h->port, "cx-1", &r), 200);
    assert_true(strncmp(r.content_type, "application/json", 16) == 0);
    o = resp_json(&r);
    int cseg[MAX_SEGS];
    long long cpart[MAX_SEGS];
    assert_int_equal(expect_record(o, sku, 2, "cancelled", 5, cseg, cpart), 1);
    assert_string_equal(jstr(o, "order_id"), "cx-1");
    assert_int_equal(cseg[0], seg[0]);
    json_decref(o);
    h_resp_free(&r);
    snap_get(e->h->port, sku, &s);
    for (int i = 0; i < 5; i++)
        assert_int_equal(s.stock[i], before.stock[i]);
    assert_int_equal(s.sold, 0);
    assert_int_equal(s.orders, 0);
    assert_int_equal(h_stat(e->h->port, NULL, "orders_cancelled"), cancelled0 + 1);

    /* Again: 200 and the cancelled record, nothing returned twice. */
    assert_int_equal(cancel(e->h->port, "cx-1", &r), 200);
    o = resp_json(&r);
    assert_string_equal(jstr(o, "status"), "cancelled");
    json_decref(o);
    h_resp_free(&r);
    snap_get(e->h->port, sku, &s);
    for (int i = 0; i < 5; i++)
        assert_int_equal(s.stock[i], before.stock[i]);
    assert_int_equal(s.sold, 0);

    /* GET shows it cancelled; a POST replay of the id answers the cancelled record
     * and deducts nothing. */
    assert_int_equal(h_req(e->h->port, "GET", "/orders/cx-1", NULL, NULL, &r), 200);
    o = resp_json(&r);
    assert_string_equal(jstr(o, "status"), "cancelled");
    json_decref(o);
    h_resp_free(&r);
    assert_int_equal(h_order(e->h->port, sku, 2, "cx-1", &r), 200);
    o = resp_json(&r);
    assert_string_equal(jstr(o, "status"), "cancelled");
    assert_string_equal(jstr(o, "order_id"), "cx-1");
    json_decref(o);
    h_resp_free(&r);
    snap_get(e->h->port, sku, &s);
    assert_int_equal(s.remaining, 10);
    assert_int_equal(s.sold, 0);

    /* A multi-segment order, cancelled: every part goes back to its own segment. */
    snap_get(e->h->port, sku, &before);
    o = order_ok(e->h->port, sku, 5, "cx-2");
    int n = expect_record(o, sku, 5, "confirmed", 5, seg, part);
    assert_true(n >= 3);
    json_decref(o);
    /* Another order stays: cancelling cx-2 must not touch its units. */
    json_t *keep = order_ok(e->h->port, sku, 1, "cx-keep");
    int kseg[MAX_SEGS];
    long long kpart[MAX_SEGS];
    assert_int_equal(expect_record(keep, sku, 1, "confirmed", 5, kseg, kpart), 1);
    json_decref(keep);
    assert_int_equal(cancel(e->h->port, "cx-2", &r), 200);
    o = resp_json(&r);
    expect_record_parts(o, sku, 5, "cancelled", 5, n, seg, part);
    json_decref(o);
    h_resp_free(&r);
    snap_get(e->h->port, sku, &s);
    for (int i = 0; i < 5; i++)
        assert_int_equal(s.stock[i], before.stock[i] - (i == kseg[0] ? 1 : 0));
    assert_int_equal(s.sold, 1);
    assert_int_equal(s.orders, 1);

    /* Unknown and invalid ids. */
    assert_int_equal(cancel(e->h->port, "never-placed-cx", &r), 404);
    assert_int_equal(h_expect_error(&r, 404, "not_found"), 0);
    h_resp_free(&r);
    cancel(e->h->port, "bad!id", &r);
    assert_int_equal(h_expect_error(&r, 400, "invalid_field"), 0);
    h_resp_free(&r);
    char longid[80];
    memset(longid, 'a', 65);
    longid[65] = '\0';
    cancel(e->h->port, longid, &r);
    assert_int_equal(h_expect_error(&r, 400, "invalid_field"), 0);
    h_resp_free(&r);
    snap_get(e->h->port, sku, &s);
    assert_int_equal(s.sold, 1);
    assert_int_equal(h_audit(e->h->port, NULL, sku, 10, false), 0);
}

/* A cancel after a sell-out puts stock back; the sold-out flag must not hide it. */
static void test_cancel_after_sellout(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    const char *sku = "cancel-so";
    assert_int_equal(h_put_sku(e->h->port, NULL, sku, 2, 2, "lock", 0), 0);
    json_decref(order_ok(e->h->port, sku, 1, "cso-1"));
    json_decref(order_ok(e->h->port, sku, 1, "cso-2"));
    order_expect_error(e->h->port, sku, 1, NULL, 409, "sold_out");
    order_expect_error(e->h->port, sku, 1, NULL, 409, "sold_out");
    struct h_resp r;
    assert_int_equal(cancel(e->h->port, "cso-1", &r), 200);
    h_resp_free(&r);
    json_decref(order_ok(e->h->port, sku, 1, "cso-3"));
    order_expect_error(e->h->port, sku, 1, NULL, 409, "sold_out");
    assert_int_equal(h_audit(e->h->port, NULL, sku, 2, true), 0);
}

/* A reset drops the SKU's order records: cancelling an order of the old stock must
 * not add units to the new one. */
static void test_cancel_after_reset(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    const char *sku = "cancel-reset";
    assert_int_equal(h_put_sku(e->h->port, NULL, sku, 6, 2, "lock", 0), 0);
    json_decref(order_ok(e->h->port, sku, 2, "cr-1"));
    assert_int_equal(h_put_sku(e->h->port, NULL, sku, 4, 2, "lock", 0), 0);
    struct h_resp r;
    cancel(e->h->port, "cr-1", &r);
    assert_int_equal(h_expect_error(&r, 404, "not_found"), 0);
    h_resp_free(&r);
    struct snap s;
    snap_get(e->h->port, sku, &s);
    assert_int_equal(s.initial, 4);
    assert_int_equal(s.remaining, 4);
    assert_int_equal(s.sold, 0);
    assert_int_equal(h_audit(e->h->port, NULL, sku, 4, true), 0);
}

/* Orders, cancels of some of them (some twice) all at once. */
struct cancel_run {
    int port;
    const char *sku;
    int per_thread;
    pthread_mutex_t mu; /* guards everything below */
    long long placed_qty, cancelled_qty;
    int placed, cancelled, sold_out, insufficient, busy, cancel_retries, other;
    char first_bad[400];
};

static void cancel_note(struct cancel_run *c, const char *what, int status,
                        const char *body)
{
    c->other++;
    if (c->first_bad[0] == '\0')
        snprintf(c->first_bad, sizeof c->first_bad, "%s -> %d %.300s", what, status,
                 body);
}

/* DELETE until it is not 503 busy (a few tries); true when 200 and cancelled. */
static bool cancel_worker_one(struct cancel_run *c, const char *id)
{
    for (int attempt = 0; attempt < 5; attempt++) {
        struct h_resp r;
        int st = cancel(c->port, id, &r);
        json_t *j = st == 200 ? json_loadb(r.body, r.body_len, 0, NULL) : NULL;
        bool ok = st == 200 && strcmp(jstr(j, "status"), "cancelled") == 0;
        pthread_mutex_lock(&c->mu);
        if (st == 503)
            c->cancel_retries++;
        else if (!ok)
            cancel_note(c, "cancel", st, r.body);
        pthread_mutex_unlock(&c->mu);
        json_decref(j);
        h_resp_free(&r);
        if (st != 503)
            return ok;
        h_sleep_ms(20);
    }
    return false;
}

static void cancel_worker(int idx, void *ctx)
{
    struct cancel_run *c = ctx;
    for (int i = 0; i < c->per_thread; i++) {
        char id[64];
        snprintf(id, sizeof id, "cc-%d-%d", idx, i);
        long long qty = 1 + i % 3;
        struct h_resp r;
        int st = h_order(c->port, c->sku, qty, id, &r);
        json_t *j = st > 0 ? json_loadb(r.body, r.body_len, 0, NULL) : NULL;
        const char *code = jstr(j, "error");
        pthread_mutex_lock(&c->mu);
        if (st == 201) {
            c->placed++;
            c->placed_qty += qty;
        } else if (st == 409 && strcmp(code, "sold_out") == 0) {
            c->sold_out++;
        } else if (st == 409 && strcmp(code, "insufficient_stock") == 0) {
            c->insufficient++; /* the last units, fewer than qty */
        } else if (st == 503 && strcmp(code, "busy") == 0) {
            c->busy++;
        } else {
            cancel_note(c, "order", st, r.body);
        }
        pthread_mutex_unlock(&c->mu);
        json_decref(j);
        h_resp_free(&r);
        if (st != 201 || i % 3 != 0)
            continue;
        /* Cancel every third order; every other of those twice. */
        bool ok = cancel_worker_one(c, id);
        if (ok && i % 2 == 0)
            ok = cancel_worker_one(c, id);
        if (ok) {
            pthread_mutex_lock(&c->mu);
            c->cancelled++;
            c->cancelled_qty += qty;
            pthread_mutex_unlock(&c->mu);
        }
    }
}

static void test_cancel_concurrent(void **state)
{
    struct env *e = *state;
    h_deadline(180);
    const char *sku = "cancel-conc";
    assert_int_equal(h_put_sku(e->h->port, NULL, sku, 300, 10, "lock", 2), 0);
    struct cancel_run c;
    memset(&c, 0, sizeof c);
    c.port = e->h->port;
    c.sku = sku;
    c.per_thread = 15;
    run_parallel(20, cancel_worker, &c, &c.mu, c.first_bad, "reply");
    fprintf(stderr,
            "%s: %d placed (%lld units), %d cancelled (%lld units), %d sold_out, "
            "%d insufficient_stock, %d busy, %d cancel retries, %d other\n",
            sku, c.placed, c.placed_qty, c.cancelled, c.cancelled_qty, c.sold_out,
            c.insufficient, c.busy, c.cancel_retries, c.other);
    assert_int_equal(c.other, 0);
    assert_true(c.cancelled > 0);

    struct snap s;
    snap_get(e->h->port, sku, &s);
    assert_int_equal(s.sold, c.placed_qty - c.cancelled_qty);
    assert_int_equal(s.orders, c.placed - c.cancelled);
    assert_int_equal(s.locks_held, 0);
    assert_int_equal(h_audit(e->h->port, NULL, sku, 300, false), 0);
}

/* The same order cancelled by several requests at once: returned once. */
struct race {
    int port;
    int n_ids;
    pthread_mutex_t mu;
    int ok, bad;
    char first_bad[300];
};

static void race_worker(int idx, void *ctx)
{
    struct race *rc = ctx;
    char id[32];
    snprintf(id, sizeof id, "race-%d", idx % rc->n_ids);
    struct h_resp r;
    int st = cancel(rc->port, id, &r);
    json_t *j = st == 200 ? json_loadb(r.body, r.body_len, 0, NULL) : NULL;
    bool ok = st == 200 && strcmp(jstr(j, "status"), "cancelled") == 0;
    pthread_mutex_lock(&rc->mu);
    if (ok) {
        rc->ok++;
    } else {
        rc->bad++;
        if (rc->first_bad[0] == '\0')
            snprintf(rc->first_bad, sizeof rc->first_bad, "%s -> %d %.200s", id, st,
                     r.body);
    }
    pthread_mutex_unlock(&rc->mu);
    json_decref(j);
    h_resp_free(&r);
}

static void test_cancel_races_itself(void **state)
{
    struct env *e = *state;
    h_deadline(120);
    const char *sku = "cancel-race";
    /* Rebalance off: the test wants each unit back where it was sold. Its first dozen
     * orders (30 units) empty exactly the three segments at home on the loop that took
     * them, and an automatic spread then moved units, which the cancels add to. */
    put_sku_rebalance(e->h->port, sku, 60, 6, false);
    const int n_ids = 15;
    for (int i = 0; i < n_ids; i++) {
        char id[32];
        snprintf(id, sizeof id, "race-%d", i);
        json_decref(order_ok(e->h->port, sku, 1 + i % 4, id));
    }
    struct snap s;
    snap_get(e->h->port, sku, &s);
    assert_true(s.sold > 0);

    struct race rc;
    memset(&rc, 0, sizeof rc);
    rc.port = e->h->port;
    rc.n_ids = n_ids;
    run_parallel(n_ids * 3, race_worker, &rc, &rc.mu, rc.first_bad, "cancel reply");
    assert_int_equal(rc.bad, 0);
    assert_int_equal(rc.ok, n_ids * 3);

    snap_get(e->h->port, sku, &s);
    assert_stock(&s, "[10,10,10,10,10,10]");
    assert_int_equal(s.sold, 0);
    assert_int_equal(s.orders, 0);
    assert_int_equal(h_audit(e->h->port, NULL, sku, 60, false), 0);
}

/* ---- restock -------------------------------------------------------------------- */

static void test_restock_spread(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    const char *sku = "restock-a";
    assert_int_equal(h_put_sku(e->h->port, NULL, sku, 10, 4, "lock", 0), 0);
    struct snap s;
    snap_get(e->h->port, sku, &s);
    assert_stock(&s, "[3,3,2,2]");
    long long restocks0 = h_stat(e->h->port, NULL, "restocks");

    struct h_resp r;
    assert_int_equal(restock(e->h->port, sku, 6, &r), 200);
    json_t *j = resp_json(&r);
    assert_string_equal(jstr(j, "sku"), sku);
    assert_int_equal(snap_from(j, &s), 0);
    json_decref(j);
    h_resp_free(&r);
    assert_stock(&s, "[5,5,3,3]");
    assert_int_equal(s.initial, 16);
    assert_int_equal(s.remaining, 16);
    snap_get(e->h->port, sku, &s);
    assert_stock(&s, "[5,5,3,3]");
    assert_int_equal(h_stat(e->h->port, NULL, "restocks"), restocks0 + 1);

    /* After some sales the new units still land evenly on top of what is there. */
    json_decref(order_ok(e->h->port, sku, 5, NULL));
    snap_get(e->h->port, sku, &s);
    long long was[4];
    memcpy(was, s.stock, sizeof was);
    assert_int_equal(restock(e->h->port, sku, 5, &r), 200);
    h_resp_free(&r);
    snap_get(e->h->port, sku, &s);
    assert_int_equal(s.initial, 21);
    assert_int_equal(s.stock[0], was[0] + 2);
    for (int i = 1; i < 4; i++)
        assert_int_equal(s.stock[i], was[i] + 1);
    assert_int_equal(h_audit(e->h->port, NULL, sku, 21, false), 0);

    /* The most one restock may add is 10^12. */
    assert_int_equal(h_put_sku(e->h->port, NULL, "restock-big", 0, 4, "lock", 0), 0);
    assert_int_equal(restock(e->h->port, "restock-big", 1000000000000LL, &r), 200);
    h_resp_free(&r);
    snap_get(e->h->port, "restock-big", &s);
    assert_int_equal(s.initial, 1000000000000LL);
    assert_stock(&s, "[250000000000,250000000000,250000000000,250000000000]");
}

static void test_restock_bad_input(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    const char *sku = "restock-bad";
    assert_int_equal(h_put_sku(e->h->port, NULL, sku, 8, 4, "lock", 0), 0);
    static const char *const invalid[] = {
        "{\"qty\": 0}",
        "{\"qty\": -1}",
        "{\"qty\": \"5\"}",
        "{\"qty\": 1.5}",
        "{}",
        "{\"qty\": 5, \"color\": \"red\"}",
        "{\"qty\": 1000000000001}",
        "{\"qty\": 1e20}",
        "{\"qty\": null}",
        "{\"qty\": true}",
        "{\"qty\": [5]}",
    };
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        struct h_resp r;
        restock_raw(e->h->port, sku, invalid[i], &r);
        if (h_expect_error(&r, 400, "invalid_field") != 0)
            fail_msg("restock body %s: want 400 invalid_field", invalid[i]);
        h_resp_free(&r);
    }
    /* Past what jansson holds in an integer: bad_json, as for POST /orders. */
    struct h_resp r;
    restock_raw(e->h->port, sku, "{\"qty\": 100000000000000000000}", &r);
    assert_int_equal(h_expect_error(&r, 400, "bad_json"), 0);
    h_resp_free(&r);
    restock_raw(e->h->port, sku, "{\"qty\": ", &r);
    assert_int_equal(h_expect_error(&r, 400, "bad_json"), 0);
    h_resp_free(&r);

    restock(e->h->port, "no-such-restock-sku", 5, &r);
    assert_int_equal(h_expect_error(&r, 404, "unknown_sku"), 0);
    h_resp_free(&r);

    const char body[] = "{\"qty\": 5}";
    h_http(e->h->port, "POST", "/admin/skus/restock-bad/restock",
           "Content-Type: text/plain\r\n", body, sizeof body - 1, &r);
    assert_int_equal(h_expect_error(&r, 415, NULL), 0);
    h_resp_free(&r);

    /* Past the largest stock a SKU may have. */
    assert_int_equal(
        h_put_sku(e->h->port, NULL, "restock-max", 9007199254740991LL, 1, "lock", 0), 0);
    restock(e->h->port, "restock-max", 1, &r);
    assert_int_equal(h_expect_error(&r, 400, "invalid_field"), 0);
    h_resp_free(&r);
    struct snap s;
    snap_get(e->h->port, "restock-max", &s);
    assert_int_equal(s.initial, 9007199254740991LL);

    /* None of it changed anything. */
    snap_get(e->h->port, sku, &s);
    assert_int_equal(s.initial, 8);
    assert_stock(&s, "[2,2,2,2]");
}

/* Orders with work under the lock while restocks land. */
struct restock_run {
    int port;
    const char *sku;
    int per_thread;
    int restocks;
    long long restock_qty;
    pthread_mutex_t mu; /* guards everything below */
    int created, sold_out, busy, other;
    int restocked, restock_busy;
    char first_bad[400];
};

static void restock_worker(int idx, void *ctx)
{
    struct restock_run *rr = ctx;
    if (idx == 0) {
        for (int i = 0; i < rr->restocks; i++) {
            h_sleep_ms(40);
            struct h_resp r;
            int st = restock(rr->port, rr->sku, rr->restock_qty, &r);
            pthread_mutex_lock(&rr->mu);
            if (st == 200) {
                rr->restocked++;
            } else if (st == 503) {
                rr->restock_busy++;
            } else {
                rr->other++;
                if (rr->first_bad[0] == '\0')
                    snprintf(rr->first_bad, sizeof rr->first_bad, "restock -> %d %.300s",
                             st, r.body);
            }
            pthread_mutex_unlock(&rr->mu);
            h_resp_free(&r);
        }
        return;
    }
    for (int i = 0; i < rr->per_thread; i++) {
        struct h_resp r;
        int st = h_order(rr->port, rr->sku, 1, NULL, &r);
        json_t *j = st > 0 ? json_loadb(r.body, r.body_len, 0, NULL) : NULL;
        const char *code = jstr(j, "error");
        pthread_mutex_lock(&rr->mu);
        if (st == 201) {
            rr->created++;
        } else if (st == 409 && strcmp(code, "sold_out") == 0) {
            rr->sold_out++;
        } else if (st == 503 && strcmp(code, "busy") == 0) {
            rr->busy++;
        } else {
            rr->other++;
            if (rr->first_bad[0] == '\0')
                snprintf(rr->first_bad, sizeof rr->first_bad, "order -> %d %.300s", st,
                         r.body);
        }
        pthread_mutex_unlock(&rr->mu);
        json_decref(j);
        h_resp_free(&r);
    }
}

static void test_restock_while_ordering(void **state)
{
    struct env *e = *state;
    h_deadline(180);
    const char *sku = "restock-live";
    assert_int_equal(h_put_sku(e->h->port, NULL, sku, 100, 10, "lock", 5), 0);
    struct restock_run rr;
    memset(&rr, 0, sizeof rr);
    rr.port = e->h->port;
    rr.sku = sku;
    rr.per_thread = 25;
    rr.restocks = 4;
    rr.restock_qty = 37; /* not a multiple of 10: the remainder goes to the low ones */
    run_parallel(21, restock_worker, &rr, &rr.mu, rr.first_bad, "reply");
    fprintf(stderr,
            "%s: %d x 201, %d sold_out, %d busy, %d/%d restocks (%d busy), %d other\n",
            sku, rr.created, rr.sold_out, rr.busy, rr.restocked, rr.restocks,
            rr.restock_busy, rr.other);
    assert_int_equal(rr.other, 0);
    assert_int_equal(rr.restocked, rr.restocks);

    const long long initial = 100 + rr.restocked * rr.restock_qty;
    struct snap s;
    snap_get(e->h->port, sku, &s);
    assert_int_equal(s.initial, initial);
    assert_int_equal(s.sold, rr.created);
    assert_int_equal(s.locks_held, 0);
    assert_int_equal(h_audit(e->h->port, NULL, sku, initial, true), 0);
    /* Every restocked unit is sellable. */
    assert_int_equal(drain(e->h->port, sku), s.remaining);
    assert_int_equal(h_audit(e->h->port, NULL, sku, initial, true), 0);
    snap_get(e->h->port, sku, &s);
    assert_int_equal(s.sold, initial);
}

/* ---- rebalance ------------------------------------------------------------------ */

static void test_rebalance_by_hand(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    const char *sku = "rebal-hand";
    put_sku_rebalance(e->h->port, sku, 8, 4, false);
    struct snap s;
    snap_get(e->h->port, sku, &s);
    assert_int_equal(s.rebalance, 0);
    for (int i = 0; i < 3; i++)
        json_decref(order_ok(e->h->port, sku, 2, NULL));
    snap_get(e->h->port, sku, &s);
    assert_int_equal(segments_holding(&s, 2), 1);
    assert_int_equal(segments_holding(&s, 0), 3);
    long long rebal0 = h_stat(e->h->port, NULL, "rebalances");

    struct h_resp r;
    assert_int_equal(rebalance(e->h->port, sku, &r), 200);
    json_t *j = resp_json(&r);
    assert_int_equal(snap_from(j, &s), 0);
    json_decref(j);
    h_resp_free(&r);
    assert_int_equal(segments_holding(&s, 1), 2);
    assert_int_equal(segments_holding(&s, 0), 2);
    assert_int_equal(s.remaining, 2);
    assert_int_equal(s.initial, 8);
    assert_int_equal(s.sold, 6);
    snap_get(e->h->port, sku, &s);
    assert_int_equal(segments_holding(&s, 1), 2);
    assert_int_equal(h_stat(e->h->port, NULL, "rebalances"), rebal0 + 1);
    assert_int_equal(h_audit(e->h->port, NULL, sku, 8, false), 0);
    /* The spread stock sells, each unit from its own segment. */
    assert_int_equal(drain(e->h->port, sku), 2);

    rebalance(e->h->port, "no-such-rebal-sku", &r);
    assert_int_equal(h_expect_error(&r, 404, "unknown_sku"), 0);
    h_resp_free(&r);
    assert_int_equal(h_audit(e->h->port, NULL, sku, 8, false), 0);
}

/* Default: most segments empty with stock left -> the next order rebalances first. */
static void test_rebalance_automatic(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    const char *sku = "rebal-auto";
    assert_int_equal(h_put_sku(e->h->port, NULL, sku, 8, 4, "lock", 0), 0);
    struct snap s;
    snap_get(e->h->port, sku, &s);
    assert_int_equal(s.rebalance, 1);
    json_decref(order_ok(e->h->port, sku, 2, NULL));
    json_decref(order_ok(e->h->port, sku, 2, NULL));
    snap_get(e->h->port, sku, &s);
    assert_int_equal(segments_holding(&s, 0), 2);
    assert_int_equal(segments_holding(&s, 2), 2);
    long long rebal0 = h_stat(e->h->port, NULL, "rebalances");

    json_decref(order_ok(e->h->port, sku, 1, NULL));
    assert_int_equal(h_stat(e->h->port, NULL, "rebalances"), rebal0 + 1);
    snap_get(e->h->port, sku, &s);
    assert_int_equal(segments_holding(&s, 1), 3);
    assert_int_equal(segments_holding(&s, 0), 1);
    assert_int_equal(s.remaining, 3);
    assert_int_equal(h_audit(e->h->port, NULL, sku, 8, false), 0);
}

static void test_rebalance_off(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    const char *sku = "rebal-off";
    put_sku_rebalance(e->h->port, sku, 8, 4, false);
    json_decref(order_ok(e->h->port, sku, 2, NULL));
    json_decref(order_ok(e->h->port, sku, 2, NULL));
    long long rebal0 = h_stat(e->h->port, NULL, "rebalances");
    json_decref(order_ok(e->h->port, sku, 1, NULL));
    assert_int_equal(h_stat(e->h->port, NULL, "rebalances"), rebal0);
    struct snap s;
    snap_get(e->h->port, sku, &s);
    assert_int_equal(segments_holding(&s, 0), 2);
    assert_int_equal(segments_holding(&s, 1), 1);
    assert_int_equal(segments_holding(&s, 2), 1);
    assert_int_equal(h_audit(e->h->port, NULL, sku, 8, false), 0);
}

/* ---- sold-out fast path ----------------------------------------------------------- */

/* Order qty 1 on `port` until 201 or `ms` have passed; the status last seen. */
static int order_until_created(int port, const char *sku, long ms, int *tries)
{
    long long until = h_now_ms() + ms;
    int st;
    *tries = 0;
    do {
        struct h_resp r;
        st = h_order(port, sku, 1, NULL, &r);
        ++*tries;
        if (st != 201 && h_expect_error(&r, 409, "sold_out") != 0)
            fail_msg("while waiting for stock: %d %.300s", st, r.body);
        h_resp_free(&r);
        if (st != 201)
            h_sleep_ms(5);
    } while (st != 201 && h_now_ms() < until);
    return st;
}

/* After the first sold_out, `n` more are answered by the fast path. */
static void expect_fast_sold_out(int port, const char *sku, int n)
{
    order_expect_error(port, sku, 1, NULL, 409, "sold_out");
    long long fast0 = h_stat(port, NULL, "sold_out_fast");
    for (int i = 0; i < n; i++)
        order_expect_error(port, sku, 1, NULL, 409, "sold_out");
    assert_int_equal(h_stat(port, NULL, "sold_out_fast"), fast0 + n);
}

static void test_sold_out_fast_path(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    const char *sku = "so-one";
    assert_int_equal(h_put_sku(e->h->port, NULL, sku, 3, 3, "lock", 0), 0);
    assert_int_equal(drain(e->h->port, sku), 3);
    expect_fast_sold_out(e->h->port, sku, 5);
    /* A bigger order of a sold-out SKU is sold_out too, not insufficient_stock. */
    order_expect_error(e->h->port, sku, 4, NULL, 409, "sold_out");

    /* A restock clears the flag here at once. */
    struct h_resp r;
    assert_int_equal(restock(e->h->port, sku, 2, &r), 200);
    h_resp_free(&r);
    json_decref(order_ok(e->h->port, sku, 1, NULL));
    json_decref(order_ok(e->h->port, sku, 1, NULL));
    expect_fast_sold_out(e->h->port, sku, 3);

    /* So does a reset. */
    assert_int_equal(h_put_sku(e->h->port, NULL, sku, 2, 3, "lock", 0), 0);
    json_decref(order_ok(e->h->port, sku, 1, NULL));
    json_decref(order_ok(e->h->port, sku, 1, NULL));
    expect_fast_sold_out(e->h->port, sku, 2);
    assert_int_equal(h_audit(e->h->port, NULL, sku, 2, true), 0);
}

/* Two instances on one Redis: a restock or reset on one clears the other's flag
 * within meta_cache_ms (100 ms); we allow 1 s. */
static void test_sold_out_cleared_on_peer(void **state)
{
    struct env *e = *state;
    h_deadline(90);
    const char *sku = "so-peer";
    int a = e->h->port;
    int b = peer_start(e);
    assert_true(b > 0);
    assert_int_equal(h_put_sku(a, NULL, sku, 4, 2, "lock", 0), 0);

    /* B sells out and learns it. */
    assert_int_equal(drain(b, sku), 4);
    expect_fast_sold_out(b, sku, 4);

    /* A restocks; B sells again soon. */
    struct h_resp r;
    assert_int_equal(restock(a, sku, 3, &r), 200);
    h_resp_free(&r);
    int tries;
    int st = order_until_created(b, sku, 1000, &tries);
    fprintf(stderr,
            "peer sold again after a restock on the other instance: %d (%d tries)\n", st,
            tries);
    assert_int_equal(st, 201);
    assert_int_equal(drain(b, sku), 2);
    expect_fast_sold_out(b, sku, 2);

    /* A resets; B sells again soon. */
    assert_int_equal(h_put_sku(a, NULL, sku, 2, 2, "lock", 0), 0);
    st = order_until_created(b, sku, 1000, &tries);
    fprintf(stderr,
            "peer sold again after a reset on the other instance: %d (%d tries)\n", st,
            tries);
    assert_int_equal(st, 201);
    assert_int_equal(drain(b, sku), 1);
    assert_int_equal(h_audit(a, NULL, sku, 2, true), 0);
    peer_stop(e);
}

/* ---- replay after sell-out --------------------------------------------------------- */

static void expect_replay(int port, const char *sku, long long qty, const char *id,
                          const char *body)
{
    struct h_resp r;
    int st = h_order(port, sku, qty, id, &r);
    if (st != 200 || strcmp(r.body, body) != 0)
        fail_msg("replay of %s: %d %.300s, want 200 %.300s", id, st, r.body, body);
    h_resp_free(&r);
}

static void test_replay_after_sellout(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    const char *sku = "replay-so";
    assert_int_equal(h_put_sku(e->h->port, NULL, sku, 3, 2, "lock", 0), 0); /* [2,1] */
    struct h_resp r;
    assert_int_equal(h_order(e->h->port, sku, 2, "rp-1", &r), 201);
    char *body1 = strdup(r.body);
    h_resp_free(&r);
    /* 1 left, asked for 2: insufficient, yet the confirmed retry gets its record. */
    expect_replay(e->h->port, sku, 2, "rp-1", body1);
    assert_int_equal(h_order(e->h->port, sku, 1, "rp-2", &r), 201);
    char *body2 = strdup(r.body);
    h_resp_free(&r);
    assert_true(body1 != NULL && body2 != NULL);

    expect_fast_sold_out(e->h->port, sku, 2);
    expect_replay(e->h->port, sku, 2, "rp-1", body1);
    expect_replay(e->h->port, sku, 1, "rp-2", body2);
    /* The same id for something else is still a conflict. */
    order_expect_error(e->h->port, sku, 1, "rp-1", 409, "order_id_conflict");
    order_expect_error(e->h->port, sku, 1, "rp-new", 409, "sold_out");

    /* A multi-segment order, retried after the sell-out. */
    assert_int_equal(h_put_sku(e->h->port, NULL, "replay-ms", 4, 4, "lock", 0), 0);
    assert_int_equal(h_order(e->h->port, "replay-ms", 3, "rp-m", &r), 201);
    char *body3 = strdup(r.body);
    h_resp_free(&r);
    json_decref(order_ok(e->h->port, "replay-ms", 1, NULL));
    expect_fast_sold_out(e->h->port, "replay-ms", 1);
    expect_replay(e->h->port, "replay-ms", 3, "rp-m", body3);

    struct snap s;
    snap_get(e->h->port, sku, &s);
    assert_int_equal(s.sold, 3);
    assert_int_equal(s.orders, 2);
    assert_int_equal(h_audit(e->h->port, NULL, sku, 3, false), 0);
    assert_int_equal(h_audit(e->h->port, NULL, "replay-ms", 4, false), 0);
    free(body1);
    free(body2);
    free(body3);
}

/* ---- GET /metrics ---------------------------------------------------------------- */

/* Every `<name>_bucket{le="..."} N` line, in order: le ascending up to +Inf, N
 * non-decreasing, the +Inf bucket equal to _count. Returns the count. */
static long long check_histogram(const char *text, const char *name)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s_bucket{le=\"", name);
    size_t n = strlen(prefix);
    double last_le = -1, last_v = -1;
    int buckets = 0;
    bool inf = false;
    for (const char *p = text; p != NULL && *p != '\0';) {
        if (strncmp(p, prefix, n) == 0) {
            const char *q = p + n;
            double le;
            if (strncmp(q, "+Inf\"", 5) == 0) {
                le = INFINITY;
                q += 5;
            } else {
                char *end;
                le = strtod(q, &end);
                if (end == q || *end != '"')
                    fail_msg("bad le in %.80s", p);
                q = end + 1;
            }
            if (inf)
                fail_msg("%s: a bucket after +Inf", name);
            if (*q != '}' || q[1] != ' ')
                fail_msg("bad bucket line %.80s", p);
            double v = strtod(q + 2, NULL);
            if (!(le > last_le))
                fail_msg("%s: le not ascending at %.80s", name, p);
            if (v < last_v)
                fail_msg("%s: buckets not cumulative at %.80s", name, p);
            last_le = le;
            last_v = v;
            inf = isinf(le);
            buckets++;
        }
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    assert_true(buckets >= 2);
    assert_true(inf);
    char series[128];
    snprintf(series, sizeof series, "%s_count", name);
    double count = h_metric(text, series);
    assert_true(count >= 0);
    assert_true(last_v == count);
    snprintf(series, sizeof series, "%s_sum", name);
    assert_true(h_metric(text, series) >= 0);
    return (long long)count;
}

static void test_metrics(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    /* A fresh instance, so its counts are exactly this test's. */
    int p = peer_start(e);
    assert_true(p > 0);
    const char *sku = "metrics-sku";
    assert_int_equal(h_put_sku(p, NULL, sku, 5, 2, "lock", 0), 0);
    for (int i = 0; i < 4; i++)
        json_decref(order_ok(p, sku, 1, NULL));
    json_decref(order_ok(p, sku, 1, "met-1"));
    order_expect_error(p, sku, 1, NULL, 409, "sold_out");
    order_expect_error(p, sku, 1, NULL, 409, "sold_out");
    struct h_resp r;
    assert_int_equal(cancel(p, "met-1", &r), 200);
    h_resp_free(&r);

    /* The per-SKU series appear once the background refresh read the SKU (within
     * about a second of the first scrape: api/gauges.h). */
    long long until = h_now_ms() + 10000;
    for (;;) {
        assert_int_equal(h_req(p, "GET", "/metrics", NULL, NULL, &r), 200);
        if (strstr(r.body, "sku=\"metrics-sku\"") != NULL || h_now_ms() > until)
            break;
        h_resp_free(&r);
        h_sleep_ms(100);
    }
    assert_true(strncmp(r.content_type, "text/plain", 10) == 0);
    const char *t = r.body;
    assert_true(h_metric(t, "inventory_orders_total{outcome=\"confirmed\"}") == 5);
    assert_true(h_metric(t, "inventory_sku_orders_total{sku=\"metrics-sku\",outcome="
                            "\"confirmed\"}") == 5);
    assert_true(h_metric(t, "inventory_order_seconds_bucket{le=\"+Inf\"}") >= 0);
    assert_true(h_metric(t, "inventory_order_seconds_count") >= 0);
    /* Seven orders reached the order path; each was timed once. */
    assert_int_equal(check_histogram(t, "inventory_order_seconds"), 7);
    check_histogram(t, "inventory_lock_wait_seconds");
    /* The same number /admin/stats gives. */
    assert_int_equal(h_stat(p, NULL, "orders_confirmed"), 5);
    h_resp_free(&r);
    peer_stop(e);

    /* The long-running instance agrees with its own stats once quiet. */
    long long confirmed = h_stat(e->h->port, NULL, "orders_confirmed");
    assert_true(confirmed > 0);
    assert_int_equal(h_req(e->h->port, "GET", "/metrics", NULL, NULL, &r), 200);
    assert_true(h_metric(r.body, "inventory_orders_total{outcome=\"confirmed\"}") ==
                (double)confirmed);
    check_histogram(r.body, "inventory_order_seconds");
    h_resp_free(&r);
}

static void test_service_still_up(void **state)
{
    struct env *e = *state;
    h_deadline(30);
    assert_true(h_svc_alive(e->h->svc));
    struct h_resp r;
    assert_int_equal(h_req(e->h->port, "GET", "/healthz", NULL, NULL, &r), 200);
    h_resp_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multi_segment_record),
        cmocka_unit_test(test_multi_segment_concurrent),
        cmocka_unit_test(test_fragmented_stock_concurrent),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_cancel_after_sellout),
        cmocka_unit_test(test_cancel_after_reset),
        cmocka_unit_test(test_cancel_concurrent),
        cmocka_unit_test(test_cancel_races_itself),
        cmocka_unit_test(test_restock_spread),
        cmocka_unit_test(test_restock_bad_input),
        cmocka_unit_test(test_restock_while_ordering),
        cmocka_unit_test(test_rebalance_by_hand),
        cmocka_unit_test(test_rebalance_automatic),
        cmocka_unit_test(test_rebalance_off),
        cmocka_unit_test(test_sold_out_fast_path),
        cmocka_unit_test(test_sold_out_cleared_on_peer),
        cmocka_unit_test(test_replay_after_sellout),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_service_still_up),
    };
    int failed =
        cmocka_run_group_tests_name("features", tests, group_setup, group_teardown);
    return h_exit_status(failed);
}
