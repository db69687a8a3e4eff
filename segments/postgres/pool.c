/* pool.c -- a loop's few PostgreSQL connections, and the choice of one per call. */
#include "segments/postgres/pool.h"

#include <stdlib.h>

#include "base/xalloc.h"

#define POOL_MAX 64

struct pgp_pool {
    int size;
    int next; /* where the scan starts: ties go round */
    pgc_conn *c[];
};

pgp_pool *pgp_create(struct event_base *base, const struct pgc_opts *o, int size)
{
    if (size < 1)
        size = 1;
    if (size > POOL_MAX)
        size = POOL_MAX;
    pgp_pool *p = seg_calloc(1, sizeof *p + (size_t)size * sizeof p->c[0]);
    p->size = size;
    for (int i = 0; i < size; i++)
        p->c[i] = pgc_create(base, o);
    return p;
}

void pgp_free(pgp_pool *p)
{
    if (p == NULL)
        return;
    for (int i = 0; i < p->size; i++)
        pgc_free(p->c[i]);
    free(p);
}

/* Lower is better: free and connected, free, held; then fewer calls owed. */
static long long rank(const pgc_conn *c)
{
    long long tier = pgc_held(c) ? 2 : pgc_ready(c) ? 0 : 1;
    return tier * 1000000000LL + pgc_owed(c);
}

pgc_conn *pgp_pick(pgp_pool *p)
{
    int best = p->next % p->size;
    long long best_rank = rank(p->c[best]);
    for (int k = 1; k < p->size; k++) {
        int i = (p->next + k) % p->size;
        long long r = rank(p->c[i]);
        if (r < best_rank) {
            best = i;
            best_rank = r;
        }
    }
    p->next = (best + 1) % p->size;
    return p->c[best];
}

int pgp_size(const pgp_pool *p)
{
    return p->size;
}

pgc_conn *pgp_at(const pgp_pool *p, int i)
{
    return p->c[i];
}
