/* harness_sale.h -- crowds of buyers over HTTP, their answers tallied.
 *
 * h_sell_out: a SKU sold out by one-unit buyers. A buyer stops at its first 409
 * sold_out; busy and insufficient_stock (a segment short while others still hold
 * stock) are retried; any other answer counts as failed.
 * h_crowd: one order per buyer, all at once, each answer counted by kind.
 */
#ifndef TESTS_HARNESS_SALE_H
#define TESTS_HARNESS_SALE_H

#include <pthread.h>

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

/* What a crowd of orders got. */
struct h_crowd {
    int port;
    const char *sku;
    const char *id;            /* every order's id (NULL: none) */
    long long (*qty)(int idx); /* order idx's quantity (NULL: 1) */
    pthread_mutex_t mu;        /* guards the counts below */
    int created, replayed, sold_out, insufficient, unavailable, other;
    long long units; /* sold by the 201s */
};

/* One order of crowd `ctx` (a struct h_crowd whose mu is initialised), for
 * h_parallel: counted by its answer (201, 200, 409 sold_out, 409
 * insufficient_stock, 503, else other; a 503 or other printed to stderr). */
void h_crowd_order(int idx, void *ctx);

/* `n` orders of *c at once (mu initialised and destroyed here): h_parallel's result. */
int h_crowd_run(struct h_crowd *c, int n);

#endif
