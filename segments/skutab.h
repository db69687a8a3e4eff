/* skutab.h -- what this process's threads tell each other of each SKU.
 *
 * The store is the truth. Settings are cached in one place only, the tables of
 * ltab.h: one per event loop and one per worker connection (ltab_get), each touched
 * by its own thread. This table holds what crosses threads:
 *  - the per-SKU outcome counters, the generation a table read last, the segments
 *    the loops found empty, the loops' claims and verdicts, all read lock-free
 *    (skutab_loop_*);
 *  - `inv.changes`, bumped by every local change of a SKU (skutab_invalidate), which
 *    makes every table drop its cached settings.
 *
 * Bounded: an entry is made only for a SKU the store has (a read found it), and its
 * per-segment state in blocks of 64 segments, each made when one of its segments is
 * first used (a SKU of 4 segments costs one block, not 1024 segments' worth). Entries
 * are held (skutab_entry, each hold given back with skutab_release) by the entries
 * of the tables of ltab.h; a SKU found gone (deleted here, or a read found
 * none) leaves the table at once (skutab_drop) and its entry is freed by its last
 * holder; entries nobody holds are kept, the last 4096 released, for their
 * outcome counters, and the least recently released go past that (their
 * counters with them: a counter reset on /metrics).
 */
#ifndef SEG_SKUTAB_H
#define SEG_SKUTAB_H

#include <stdbool.h>
#include <stdint.h>

#include "segments/internal.h"
#include "segments/sku.h"

typedef struct sku_local sku_local;

struct sku_view {
    struct sku_config cfg; /* cfg.stock is the initial stock */
    long long epoch; /* drawn at create/reset, never reused (redis/keys.h); 0: none */
    long long gen;   /* starts at epoch, bumped by every change raising stock */
    int salt;        /* placement of its segments (calls.h rd_sku_placed); 0: none */
    char lock[16];   /* its lock scheme as the store names it (admin.h) */
};

skutab *skutab_create(void);
void skutab_free(skutab *t);

/* The entry of `sku`, held (skutab_release), made when there is none; never touches
 * Redis. Only for a SKU that Redis has (a read just found it). */
sku_local *skutab_entry(inv *v, const char *sku);

/* Give back a hold of skutab_entry; `e` may be freed by it. NULL: no-op.
 * Takes the table's write lock. */
void skutab_release(skutab *t, sku_local *e);

/* `sku` is gone (deleted here, or a read found none): its entry leaves the table (a
 * later hold makes a new one; holders keep theirs, no longer valid, until they give
 * it back), and the change is counted in inv.changes after skutab_dropped says so, so
 * a loop that sees the change can let go of its hold. */
void skutab_drop(inv *v, const char *sku);
bool skutab_dropped(const sku_local *e);

/* The settings `m` of a store's meta read (store.h) as a view, its lock scheme's
 * store name (lock) left empty: 0, or -1 when they are not a SKU's (an unknown mode
 * or lock, a segment count out of range), *out untouched then. */
int skutab_view_of(const struct store_meta *m, struct sku_view *out);

/* Read the settings of `sku` from the store (a blocking admin call, uncached): INV_OK,
 * INV_UNKNOWN_SKU or INV_UNAVAILABLE. */
inv_status skutab_read(inv_conn *c, const char *sku, struct sku_view *view);

/* `sku` changed here (a reset, a restock, a cancel): counted in inv.changes, so
 * every table (ltab.h, ltab_sync) drops its cached settings, of every SKU. */
void skutab_invalidate(inv *v, const char *sku);

/* Count an order outcome (a stat id below SKU_OUTCOMES) for the SKU. */
void skutab_count(sku_local *e, enum stat_id outcome);

/* Call fn for every entry with its outcome counters (see stat_foreach_sku). */
void skutab_foreach(skutab *t,
                    void (*fn)(const char *sku, const long long *outcomes, void *arg),
                    void *arg);

/* What the event loops (ltab.h, one table each) tell each other through the shared
 * entry, lock-free. A loop read generation `gen` of the SKU: when another loop last
 * read a different one, count a change (inv.changes) so that every loop re-reads
 * its settings. */
void skutab_loop_read(inv *v, sku_local *e, long long gen);
/* A loop found segment i empty in `gen` (rare: once per segment and generation per
 * loop; takes the entry's mutex). skutab_loop_empties: how many segments the loops
 * found empty in `gen`, lock-free -- so that one loop's sold-out flag and automatic
 * rebalance see what the others learned. */
void skutab_loop_empty(sku_local *e, long long gen, int i);
int skutab_loop_empties(sku_local *e, long long gen);
/* How many loops claim segment i (ltab.h claims), changed by `delta` (+1, -1) and
 * returned, lock-free: advisory, so that a loop passes by the segments another
 * loop is holding instead of asking Redis to find them BUSY. */
int skutab_loop_claims(sku_local *e, int i, int delta);
/* Turns of the event loops on a segment at home on several (group commit: a loop's
 * orders ride its own holds only). skutab_loop_took: `loop` claimed segment i.
 * skutab_loop_want: an order of `loop` found segment i taken by another loop and
 * backs off. skutab_loop_yields: `loop` claimed i last and another loop wanted it
 * within `fresh_ms` of `now_ms`: its orders leave it to that loop for a turn.
 * Lock-free and advisory, as the claims. */
void skutab_loop_took(sku_local *e, int i, int loop);
void skutab_loop_want(sku_local *e, int i, int loop, int64_t now_ms);
bool skutab_loop_yields(sku_local *e, int i, int loop, int64_t now_ms, int fresh_ms);
/* Lock holds of the SKU's segments ended on every loop, changed by `delta` (0 or 1)
 * and returned, lock-free: an order's count of the holds it waited through
 * (engine.c, the holds_waited stats). */
long long skutab_holds(sku_local *e, int delta);
/* A loop's verdict from fresh counts (engine.c VERDICT): in generation `gen` the SKU
 * held `total` units with no adjust under way, so it holds at most that until the
 * next generation (within one the total only falls; an adjust's units count from its
 * commit, which makes a new one). skutab_loop_verdict: that total for `gen`, or -1
 * when no loop found one; lock-free. */
void skutab_loop_confirm(sku_local *e, long long gen, long long total);
long long skutab_loop_verdict(sku_local *e, long long gen);

#endif
