/* harness_ledger.h -- what the ledger suites (it_ledger, it_ledger_cluster,
 * it_ledger_pg) ask of a running service and of the ledger's database: a SKU's
 * reconciliation waited for, an order that must sell, the ledger's rows counted.
 */
#ifndef TESTS_HARNESS_LEDGER_H
#define TESTS_HARNESS_LEDGER_H

/* GET /admin/skus/SKU/reconcile every 100 ms until its drift is 0 (within ms): 0, or
 * the last drift read (-1: none read). */
long long h_wait_drift(int port, const char *sku, int ms);

/* One unit of `sku` under order id `id`: fails the test unless it answers 201. */
void h_order_ok(int port, const char *sku, const char *id);

typedef struct h_pg h_pg;

/* One number the ledger's database answers to `fmt` (a query with one %s: the SKU). */
long long h_ledger_scalar(const h_pg *pg, const char *fmt, const char *sku);

/* The ledger holds each of `sales` sales of `sku` once, and nothing else sold: fails
 * the test otherwise. */
void h_ledger_assert_once(const h_pg *pg, const char *sku, long long sales);

/* The fields the segments of the SKU placed as `placed` hold per order (orders and
 * parts hashes, cancelled sets) on the Redis at `port`, summed; -1 when it does not
 * answer. */
long long h_ledger_fields(int port, const char *placed);

#endif
