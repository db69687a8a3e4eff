/* resv_env.h -- what the reservation suites (it_reservations on Redis,
 * it_pg_reservations on PostgreSQL) share: the HTTP calls of a hold's life and the
 * SKU view's numbers checked against the invariant. rve_sku_nums asserts: call it
 * from the running cmocka test's thread.
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

#endif
