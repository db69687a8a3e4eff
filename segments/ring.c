/* ring.c -- ring walk and backoff (see ring.h). */
#include "segments/ring.h"

#include <stdbool.h>
#include <stdlib.h>

bool ring_home(int i, int n, int home, int homes)
{
    return homes <= 1 || n < homes || i % homes == home;
}

int ring_segment(int start, int k, int n, int home, int homes)
{
    if (homes <= 1 || n < homes)
        return (start + k) % n;
    int own = (n - 1 - home) / homes + 1; /* home, home + homes, ... below n */
    if (k < own)
        return home + homes * ((start + k) % own);
    /* The idx-th of the others, counted in index order: rows of `homes` segments,
     * each without its home column. */
    int idx = (start + k - own) % (n - own);
    int row = idx / (homes - 1), col = idx % (homes - 1);
    return row * homes + (col < home ? col : col + 1);
}

int ring_start(int seg, int n, int home, int homes)
{
    return homes <= 1 || n < homes ? seg : (seg - home) / homes;
}

int ring_backoff_ms(int round, uint32_t rnd, int remaining_ms)
{
    if (remaining_ms <= 0)
        return 0;
    int b = RING_BACKOFF_MAX_MS;
    if (round < 16 && (RING_BACKOFF_MIN_MS << round) < RING_BACKOFF_MAX_MS)
        b = RING_BACKOFF_MIN_MS << round;
    int lo = b / 2;
    int ms = lo + (int)(rnd % (uint32_t)(b - lo + 1));
    if (ms < 1)
        ms = 1;
    return ms < remaining_ms ? ms : remaining_ms;
}

static int by_stock_desc(const void *a, const void *b, void *seen)
{
    long long sa = ((const long long *)seen)[*(const int *)a];
    long long sb = ((const long long *)seen)[*(const int *)b];
    return sa < sb ? 1 : sa > sb ? -1 : *(const int *)a - *(const int *)b;
}

static int ascending(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

int ring_plan_parts(const long long *seen, int n, long long qty, int *seg,
                    long long *part)
{
    int *order = malloc(sizeof *order * (size_t)n);
    if (order == NULL)
        abort();
    for (int i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, (size_t)n, sizeof *order, by_stock_desc, (void *)seen);
    long long need = qty;
    int k = 0;
    for (int j = 0; j < n && need > 0 && seen[order[j]] > 0; j++) {
        seg[k++] = order[j];
        need -= seen[order[j]];
    }
    free(order);
    if (need > 0)
        return 0;
    qsort(seg, (size_t)k, sizeof *seg, ascending);
    need = qty;
    for (int j = 0; j < k; j++) {
        part[j] = seen[seg[j]] < need ? seen[seg[j]] : need;
        need -= part[j];
    }
    return k;
}
