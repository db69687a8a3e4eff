/* harness_sale.h -- a SKU sold out by a crowd of one-unit buyers over HTTP, the
 * answers tallied. A buyer stops at its first 409 sold_out; busy and
 * insufficient_stock (a segment short while others still hold stock) are retried;
 * any other answer counts as failed.
 */
#ifndef TESTS_HARNESS_SALE_H
#define TESTS_HARNESS_SALE_H

struct h_sale {
    long long sold;   /* 201s: one unit each */
    long long failed; /* answers neither a sale, sold_out, busy nor insufficient_stock */
};

/* `buyers` threads each order 1 unit of `sku` (no order id) until it answers
 * sold_out, up to 2000 orders each: buyer k at 127.0.0.1:ports[k % nports], tallied
 * in out[k % nports] (nports entries, filled). Returns h_parallel's result (0, or -1
 * when a thread could not start). */
int h_sell_out(const int *ports, int nports, const char *sku, int buyers,
               struct h_sale *out);

#endif
