/* pg_env.h -- the fixture of the PostgreSQL store's tests (it_pg_store, it_pg_sellout):
 * a PostgreSQL started by the harness (harness_pg.h), one event loop on the test's
 * thread with two pgc connections, the schema migrated by both at once; and the
 * waiting and auditing they share. The pge_* calls that assert fail the running cmocka
 * test: call them from the test's main thread.
 */
#ifndef TESTS_PG_ENV_H
#define TESTS_PG_ENV_H

#include <stdbool.h>

#include <event2/event.h>

#include "segments/postgres/conn.h"
#include "segments/postgres/store.h"
#include "tests/harness_pg.h"

struct pg_env {
    h_pg *pg;
    struct event_base *base;
    pgc_conn *c[2];
};

/* The cmocka group setup (*state: a struct pg_env, the schema migrated by both
 * connections at once, within a 120 s deadline) and teardown. */
int pge_group_setup(void **state);
int pge_group_teardown(void **state);

/* Run `base` until *count reaches `want` or ms pass: true when it did. */
bool pge_run_until(struct event_base *base, const int *count, int want, int ms);
/* Run `base` for ms, whatever happens. */
void pge_run_for(struct event_base *base, int ms);

/* One answer of a pgs_fn call: pass pge_on_res and a zeroed struct as its arg. */
struct pge_wait {
    int done, rc;
    struct pgs_res r;
};
void pge_on_res(void *arg, int rc, const struct pgs_res *r);
/* Run `base` until `w` is answered; fails the test after 10 s. */
void pge_wait_for(struct event_base *base, struct pge_wait *w);

/* Migrations answered: how many, how many OK and their versions. */
struct pge_migrated {
    int done, ok;
    int version[2];
};
void pge_on_migrated(void *arg, int rc, const struct pgs_res *r);

/* A connection to the test server on `base` (10 s call deadline). */
pgc_conn *pge_connect(struct event_base *base, const h_pg *pg, int lock_ttl_ms);
/* Create or reset `sku`; fails the test when it cannot. */
void pge_put_sku(struct pg_env *e, const char *sku, long long stock, int segments,
                 const char *mode, const char *lock);
/* From the database: remaining + sold == initial, the order rows' units == sold,
 * `orders` rows, no segment below zero (the CHECK forbids it; asserted anyway). */
void pge_audit_rows(const struct pg_env *e, const char *sku, long long initial,
                    long long sold, long long orders);
/* The same for orders of one unit each. */
void pge_audit(const struct pg_env *e, const char *sku, long long initial,
               long long sold);

#endif
