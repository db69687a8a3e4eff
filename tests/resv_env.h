/* resv_env.h -- what the reservation suites (it_reservations on Redis,
 * it_cluster_reservations on a Redis Cluster, it_pg_reservations on PostgreSQL) share:
 * the HTTP calls of a hold's life, the SKU view's numbers checked against the
 * invariant, the wait for held units to come back, a hold's parts, and confirms
 * racing a hold's expiry. Every rve_ function but rve_reserve, rve_on_resv and
 * rve_wall_ms asserts: call them from the running cmocka test's thread.
 */
#ifndef TESTS_RESV_ENV_H
#define TESTS_RESV_ENV_H

#include "tests/harness.h"

/* POST /reservations on `port` ({sku, qty, ttl_s} and reservation_id when `id` is
 * not NULL): the status; *out filled when not NULL (h_resp_free), else freed. */
int rve_reserve(int port, const char *sku, long long qty, long long ttl_s, const char *id,
                struct h_resp *out);

/* METHOD /reservations/ID[suffix] on `port`: the status; the error code into `code`
 * (64 bytes) when not NULL; the response freed. */
int rve_on_resv(int port, const char *method, const char *id, const char *suffix,
                char *code);

struct rve_nums {
    long long initial, remaining, reserved, sold;
};

/* GET /admin/skus/{sku} (with `token`, NULL: none): its numbers, asserted to keep
 * remaining + reserved + sold = initial as a whole and per segment (each segment's
 * stock + reserved + sold summed over the segments is initial; segment_reserved
 * non-negative and summing to reserved). */
struct rve_nums rve_sku_nums(int port, const char *token, const char *sku);

/* Hold `id` placed again ({sku, qty, 60 s}) on `port`: 200 with expires_at_ms `x` (-1:
 * not compared); then with `other` units: 409 reservation_conflict. */
void rve_replayed(int port, const char *sku, const char *id, long long qty, long long x,
                  long long other);

/* Hold `id` confirmed on p0 (201: the order), again on p1 (200); a release then is
 * 409 reservation_confirmed. */
void rve_confirmed(int p0, int p1, const char *id);

/* Hold `id` released on p0, again on p1 (200 both: idempotent), a confirm then 409
 * reservation_released, and nothing of the SKU reserved (`token` for its view): its
 * numbers. */
struct rve_nums rve_released(int p0, int p1, const char *token, const char *sku,
                             const char *id);

/* An order under live hold `id`'s id (POST /orders {order_id: id}, on `port`; the
 * hold of `qty` units, `sku` with 10 units over segments of 5, none held or sold): the
 * order is the order's (201, its replay 200 with its own record), the hold stays a hold
 * (GET: held), its confirm is 409 reservation_conflict with nothing sold, its release
 * returns its units and a confirm then is 409 reservation_released; a hold `id`-x that
 * expires under an order's id: its confirm 410 reservation_expired. Every step checked
 * with rve_sku_nums (`token` for the view). */
void rve_order_under_hold(int port, const char *token, const char *sku, const char *id,
                          long long qty);

/* Polled every 100 ms, for at most timeout_ms, until the SKU holds nothing reserved
 * (the sweeper returned what expired), every look rve_sku_nums: the last numbers. */
struct rve_nums rve_until_unreserved(int port, const char *token, const char *sku,
                                     int timeout_ms);

/* The "segments" of a hold's or an order's JSON: their qty summed (each asserted
 * > 0), their count in *n. */
long long rve_parts_sum(json_t *j, size_t *n);

/* This process's wall clock in ms (a hold's expires_at_ms is the store's, on this
 * host). */
long long rve_wall_ms(void);

/* Two confirms of hold `id`: on port[0] at `at` - 1 ms and on port[1] at `at` + 1 ms
 * (rve_wall_ms), their statuses filled in by rve_race_confirms. */
struct rve_race {
    int port[2];
    const char *id;
    long long at;
    int status[2];
};

/* Every race of race[0..n) at once, each confirm on a thread of its own; then each
 * judged: one sale (a 201 and a 200; the order record on port[0]: 200) or expired for
 * both (410 twice; no record: 404). How many sold. */
int rve_race_confirms(struct rve_race *race, int n);

/* GET /reservations/{id} on `port` (200 asserted): its status into `st` (16 bytes),
 * its parts' count into *n; answers their qty summed. */
long long rve_resv_parts(int port, const char *id, char *st, size_t *n);

/* A hold over both segments of `sku` (10 units, 2 segments, made here on `a`), ids
 * `pre`-1..5: placed on `a` (7: parts 2), replayed and read on `b`, confirmed (on `b`,
 * again on `a`) as one order over both that a cancel returns whole; a hold of 9 kept
 * through a restock and a rebalance, then released; 15 refused whole (409
 * insufficient_stock, nothing held); a hold voided by a reset (its confirm 410
 * reservation_void) and one by a delete. The SKU's numbers audited at each step. */
void rve_multi_segment_hold(int a, int b, const char *sku, const char *pre);

#endif
