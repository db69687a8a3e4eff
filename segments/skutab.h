/* skutab.h -- what this process knows of each SKU between Redis calls.
 *
 * Redis is the truth; this table only saves round trips and wake-ups:
 *  - settings (segments, mode, hold_ms) cached for meta_cache_ms, tagged with the
 *    SKU's generation; a reset anywhere bumps the generation, so every instance
 *    sees it within meta_cache_ms (at once on the instance that did it);
 *  - `claimed`: segments a worker of this process is locking or holding; other
 *    local workers skip them without asking Redis. When every candidate is claimed
 *    a worker joins a FIFO queue, and a worker giving a claim back hands it straight
 *    to the oldest waiter (the claim never becomes free in between), so arriving
 *    orders cannot overtake waiting ones: waits are short and fair, not polled;
 *  - `hint`: per segment, the least stock seen in the current generation. Within a
 *    generation stock only falls (a restock, cancel, rebalance or reset changes the
 *    generation), so a hint is an upper bound however stale: a segment whose hint is
 *    below qty cannot fill the order and is passed over without Redis, and a SKU
 *    whose every hint is 0 is sold out without Redis.
 * Entries live until skutab_free; SKUs unknown to Redis get none.
 */
#ifndef SEG_SKUTAB_H
#define SEG_SKUTAB_H

#include <stdbool.h>

#include "segments/internal.h"
#include "segments/sku.h"

typedef struct sku_local sku_local;

struct sku_view {
    struct sku_config cfg; /* cfg.stock is the initial stock */
    long long epoch; /* drawn at create/reset, never reused (redis/keys.h); 0: none */
    long long gen;   /* starts at epoch, bumped by every change raising stock */
};

skutab *skutab_create(void);
void skutab_free(skutab *t);

/* The entry of `sku` with its settings, re-read from Redis when older than
 * meta_cache_ms. INV_OK (*e, *view set), INV_UNKNOWN_SKU or INV_UNAVAILABLE (*e the
 * entry when this process has one, else NULL). */
inv_status skutab_get(inv_conn *c, const char *sku, sku_local **e, struct sku_view *view);

/* The entry of `sku`, made when there is none; never touches Redis. For a SKU that
 * Redis knows (entries live until skutab_free). */
sku_local *skutab_entry(inv *v, const char *sku);

/* The entry of `sku` when its settings are cached and fresh and every segment is
 * known empty; NULL otherwise. Never touches Redis. */
sku_local *skutab_sold_out_now(inv *v, const char *sku);

/* Read the settings of `sku` from Redis, bypassing the cache: INV_OK,
 * INV_UNKNOWN_SKU or INV_UNAVAILABLE. */
inv_status skutab_read(inv_conn *c, const char *sku, struct sku_view *view);

/* Forget the cached settings of `sku` (after a local reset or delete), and count
 * the change in inv.changes: the event loops' tables (ltab.h) drop theirs. */
void skutab_invalidate(inv *v, const char *sku);

/* Claim segment i for this worker: false when another local worker has it. */
bool skutab_claim(sku_local *e, int i);
/* Give a claim back: to a skutab_claim_wait caller waiting for this segment, else
 * to a skutab_wait caller when the segment is not known empty and the SKU still has
 * it (either now holds the claim), else free. */
void skutab_unclaim(sku_local *e, int i);

/* Record that segment i held `stock` in generation `gen` (ignored if stale). */
void skutab_note_stock(sku_local *e, long long gen, int i, long long stock);
/* The least stock seen in segment i this generation, -1 when none was seen. */
long long skutab_hint(sku_local *e, int i);
/* True when every one of the SKU's segments is known empty in `gen`. */
bool skutab_sold_out(sku_local *e, long long gen);

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

/* Start a rebalance of the SKU unless one is running in this process: true when
 * the caller should do it, and then call skutab_rebalance_done. */
bool skutab_rebalance_begin(sku_local *e, long long gen);
void skutab_rebalance_done(sku_local *e);

/* Count of segments known empty in `gen` (0 when gen is stale). */
int skutab_empty_count(sku_local *e, long long gen);

/* Wait up to `ms` milliseconds for a claim handed over by skutab_unclaim. Returns
 * the segment now claimed by the caller, or -1 when the time ran out or a segment
 * went empty or the settings were dropped (look again) -- or at once when none of
 * the first `n` segments may hold `qty` any more (there is nothing to wait for), or
 * when `rescan` and one of them is unclaimed and may hold `qty` (it was freed since
 * the caller looked). */
int skutab_wait(sku_local *e, int n, long long qty, bool rescan, int ms);

/* Claim segment i, waiting up to `ms` for it: a release of i goes to such a waiter
 * before any other. True when claimed. */
bool skutab_claim_wait(sku_local *e, int i, int ms);

#endif
