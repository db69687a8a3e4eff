/* harness_view.h -- the SKU view read in a tight loop while short holds are placed,
 * released, confirmed and left to expire on other threads (issue 25): every view is
 * checked against remaining + reserved + sold = initial, as a whole and per segment
 * (segment_stock + segment_reserved + segment_sold summed over the segments).
 * A view that mixes two moments of the store (a step settled between two reads) shows
 * a sum off by the units that step moved; one consistent read never does.
 */
#ifndef TESTS_HARNESS_VIEW_H
#define TESTS_HARNESS_VIEW_H

struct h_view_storm {
    int views;       /* views read and checked */
    int bad;         /* of which broke the invariant */
    long long steps; /* hold steps answered (place, release, confirm) */
    char first[320]; /* the first bad view, as text ("" when none) */
};

/* For `ms` milliseconds, `churners` threads place 1-unit holds of ttl 1 s on `sku`
 * (through ports[k % nports]) and release, confirm, or leave each to expire in turn,
 * while one thread reads GET /admin/skus/{sku} (with `token`, NULL: none) and checks
 * each answer. The SKU needs stock enough for every hold of the run. Fills *out;
 * returns 0, or -1 when a view could not be read at all. */
int h_view_storm(const int *ports, int nports, const char *token, const char *sku,
                 int churners, int ms, struct h_view_storm *out);

/* The same, with the first churner restocking 1 unit at a time instead (POST
 * /admin/skus/{sku}/restock, `token`): a view that takes initial from one read and the
 * segments from another shows a sum off by the restocks between them. */
int h_view_storm_restocks(const int *ports, int nports, const char *token,
                          const char *sku, int churners, int ms,
                          struct h_view_storm *out);

#endif
