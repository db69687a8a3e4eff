/* harness_ledger.h -- what the ledger suites (it_ledger, it_ledger_cluster) ask of a
 * running service: a SKU's reconciliation waited for, an order that must sell.
 */
#ifndef TESTS_HARNESS_LEDGER_H
#define TESTS_HARNESS_LEDGER_H

/* GET /admin/skus/SKU/reconcile every 100 ms until its drift is 0 (within ms): 0, or
 * the last drift read (-1: none read). */
long long h_wait_drift(int port, const char *sku, int ms);

/* One unit of `sku` under order id `id`: fails the test unless it answers 201. */
void h_order_ok(int port, const char *sku, const char *id);

#endif
