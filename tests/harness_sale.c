/* harness_sale.c -- crowds of buyers over HTTP, their answers tallied (harness_sale.h).
 */
#include "tests/harness_sale.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

struct tally {
    _Atomic long long sold, failed;
};

struct sale {
    const int *ports;
    int nports;
    const char *sku;
    struct tally *t; /* nports */
};

static void buyer(int idx, void *arg)
{
    const struct sale *sale = arg;
    int port = sale->ports[idx % sale->nports];
    struct tally *t = &sale->t[idx % sale->nports];
    for (int i = 0; i < 2000; i++) {
        struct h_resp r;
        int st = h_order(port, sale->sku, 1, NULL, &r);
        char code[64];
        h_error_code(&r, code, sizeof code);
        h_resp_free(&r);
        if (st == 201) {
            atomic_fetch_add(&t->sold, 1);
            continue;
        }
        if (strcmp(code, "sold_out") == 0)
            return;
        if (strcmp(code, "busy") != 0 && strcmp(code, "insufficient_stock") != 0)
            atomic_fetch_add(&t->failed, 1);
    }
}

int h_sell_out(const int *ports, int nports, const char *sku, int buyers,
               struct h_sale *out)
{
    struct sale sale = {ports, nports, sku, calloc((size_t)nports, sizeof *sale.t)};
    if (sale.t == NULL)
        return -1;
    for (int i = 0; i < nports; i++) {
        atomic_init(&sale.t[i].sold, 0);
        atomic_init(&sale.t[i].failed, 0);
    }
    int rc = h_parallel(buyers, buyer, &sale);
    for (int i = 0; i < nports; i++)
        out[i] =
            (struct h_sale){atomic_load(&sale.t[i].sold), atomic_load(&sale.t[i].failed)};
    free(sale.t);
    return rc;
}

void h_crowd_order(int idx, void *ctx)
{
    struct h_crowd *c = ctx;
    long long q = c->qty ? c->qty(idx) : 1;
    struct h_resp r;
    int st = h_order(c->port, c->sku, q, c->id, &r);
    char code[64];
    h_error_code(&r, code, sizeof code);
    pthread_mutex_lock(&c->mu);
    if (st == 201) {
        c->created++;
        c->units += q;
    } else if (st == 200) {
        c->replayed++;
    } else if (st == 409 && strcmp(code, "sold_out") == 0) {
        c->sold_out++;
    } else if (st == 409 && strcmp(code, "insufficient_stock") == 0) {
        c->insufficient++;
    } else if (st == 503) {
        c->unavailable++;
        fprintf(stderr, "order %d: %d %s\n", idx, st, r.body);
    } else {
        c->other++;
        fprintf(stderr, "order %d: %d %s\n", idx, st, r.body);
    }
    pthread_mutex_unlock(&c->mu);
    h_resp_free(&r);
}

int h_crowd_run(struct h_crowd *c, int n)
{
    pthread_mutex_init(&c->mu, NULL);
    int rc = h_parallel(n, h_crowd_order, c);
    pthread_mutex_destroy(&c->mu);
    return rc;
}
