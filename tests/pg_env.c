/* pg_env.c -- what the PostgreSQL store's tests share: a server, a loop, two
 * connections, waiting for answers and auditing a SKU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "tests/pg_env.h"

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

/* Run `base` until *count reaches `want` or ms pass: true when it did. */
bool pge_run_until(struct event_base *base, const int *count, int want, int ms)
{
    struct event *tick = event_new(base, -1, EV_PERSIST, on_tick, NULL);
    struct timeval tv = {0, 10000};
    event_add(tick, &tv);
    long long end = h_now_ms() + ms;
    while (*count < want && h_now_ms() < end)
        event_base_loop(base, EVLOOP_ONCE);
    event_free(tick);
    return *count >= want;
}

/* Run `base` for ms, whatever happens. */
void pge_run_for(struct event_base *base, int ms)
{
    int never = 0;
    pge_run_until(base, &never, 1, ms);
}

void pge_on_res(void *arg, int rc, const struct pgs_res *r)
{
    struct pge_wait *w = arg;
    w->rc = rc;
    if (rc == 0)
        w->r = *r;
    w->done++;
}

void pge_wait_for(struct event_base *base, struct pge_wait *w)
{
    if (!pge_run_until(base, &w->done, 1, 10000))
        fail_msg("no answer within 10 s");
}

pgc_conn *pge_connect(struct event_base *base, const h_pg *pg, int lock_ttl_ms)
{
    const struct pgc_opts o = {.conninfo = h_pg_conninfo(pg),
                               .lock_ttl_ms = lock_ttl_ms,
                               .call_timeout_ms = 10000};
    return pgc_create(base, &o);
}

void pge_put_sku(struct pg_env *e, const char *sku, long long stock, int segments,
                 const char *mode, const char *lock)
{
    struct pge_wait w = {0};
    pgs_sku_put(e->c[0], sku, stock, segments, mode, lock, 0, pge_on_res, &w);
    pge_wait_for(e->base, &w);
    if (w.rc != 0)
        fail_msg("pgs_sku_put %s: %s", sku, pgc_error(e->c[0]));
}

static long long scalar(const struct pg_env *e, const char *fmt, const char *sku)
{
    char sql[512];
    snprintf(sql, sizeof sql, fmt, sku);
    return h_pg_scalar(e->pg, sql);
}

/* remaining + sold == initial, the units of the order rows == sold, `orders` rows, no
 * segment below zero (the CHECK makes that impossible; asserted anyway). */
void pge_audit_rows(const struct pg_env *e, const char *sku, long long initial,
                    long long sold, long long orders)
{
    long long left = scalar(e, "SELECT sum(stock) FROM segments WHERE sku = '%s'", sku);
    long long rows = scalar(e, "SELECT count(*) FROM orders WHERE sku = '%s'", sku);
    long long units = scalar(e, "SELECT sum(qty) FROM orders WHERE sku = '%s'", sku);
    long long neg =
        scalar(e, "SELECT count(*) FROM segments WHERE sku = '%s' AND stock < 0", sku);
    assert_int_equal(left + sold, initial);
    assert_int_equal(units, sold);
    assert_int_equal(rows, orders);
    assert_int_equal(neg, 0);
}

/* The same for orders of one unit each. */
void pge_audit(const struct pg_env *e, const char *sku, long long initial, long long sold)
{
    pge_audit_rows(e, sku, initial, sold, sold);
}

void pge_on_migrated(void *arg, int rc, const struct pgs_res *r)
{
    struct pge_migrated *m = arg;
    if (rc == 0)
        m->version[m->ok++] = (int)r->version;
    m->done++;
}

int pge_group_setup(void **state)
{
    h_deadline(120);
    struct pg_env *e = calloc(1, sizeof *e);
    e->pg = h_pg_start();
    if (e->pg == NULL) {
        free(e);
        return -1;
    }
    e->base = event_base_new();
    for (int i = 0; i < 2; i++)
        e->c[i] = pge_connect(e->base, e->pg, 5000);
    /* Two instances starting together: the advisory lock puts one after the other. */
    struct pge_migrated m = {0};
    pgs_migrate(e->c[0], pge_on_migrated, &m);
    pgs_migrate(e->c[1], pge_on_migrated, &m);
    if (!pge_run_until(e->base, &m.done, 2, 20000) || m.ok != 2) {
        fprintf(stderr, "migrate: %s / %s\n", pgc_error(e->c[0]), pgc_error(e->c[1]));
        return -1;
    }
    *state = e;
    return 0;
}

int pge_group_teardown(void **state)
{
    struct pg_env *e = *state;
    if (e == NULL)
        return 0;
    pgc_free(e->c[0]);
    pgc_free(e->c[1]);
    event_base_free(e->base);
    h_pg_free(e->pg);
    free(e);
    return 0;
}
