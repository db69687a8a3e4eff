/* ltab.h -- what one thread knows of each SKU between store calls: the one SKU
 * cache of the process, one table per event loop (its engine's) and one per worker
 * connection (ltab_of_conn: its blocking callers' and its private engine's,
 * engine_of_conn), each touched by its own thread only (no locks, no condition
 * variables). What crosses threads is skutab.h's.
 *
 * The store is the truth; this table only saves round trips:
 *  - settings cached for meta_cache_ms, tagged with the SKU's generation (epochs are
 *    never reused, so a generation is never met twice);
 *  - `claimed`: segments an order on this loop is locking or holding; other orders
 *    of the loop pass them by. When every candidate is claimed an order joins the
 *    SKU's FIFO of waiters, and an order giving a claim back hands it straight to the
 *    oldest waiter (through the waiter's `handed` callback), so waits are short and
 *    fair, not polled;
 *  - `hint`: per segment, the least stock seen in the current generation (stock only
 *    falls within a generation, but for a cluster adjust's units in transit before
 *    its commit), so a segment whose hint is below qty is passed over without Redis.
 *    Hints never answer 409 by themselves: that takes a verdict from fresh counts
 *    (engine.c VERDICT), which may set them again (ltab_set_hints).
 *
 * Bounded, whatever names clients send: an order holds its SKU's entry from its
 * first look to its end (ltab_hold, ltab_release); an entry no order holds is freed
 * at once when it knows nothing worth keeping (a SKU Redis does not have, a read that
 * failed, a SKU deleted: its shared entry dropped), else kept, the 4096 most
 * recently used, for its settings and hints. `claimed` and `hint` are sized by the
 * SKU's segment count, at the first settings and again when a reset grows it (never
 * shrunk while the entry lives: an order of an older view may still claim a segment
 * past the new count).
 */
#ifndef SEG_LTAB_H
#define SEG_LTAB_H

#include <stdbool.h>
#include <stdint.h>

#include "segments/skutab.h"

typedef struct ltab ltab;
typedef struct lsku lsku;

/* A waiter, embedded in whatever waits. `handed` is called with the segment now
 * claimed for it, or -1 when it should look again (a segment went empty, the
 * settings were dropped); it is no longer queued then. */
struct lwait {
    struct lwait *next;
    int seg; /* -1: any segment that may fill the order; else this one only (a
                multi-segment lock taking its segments in order), served first */
    void (*handed)(struct lwait *w, int seg);
};

/* The table of event loop `home` of `homes` (ring.h); the shared entries it holds
 * are `shared`'s (given back by ltab_free and whenever an entry goes). */
ltab *ltab_create(int home, int homes, skutab *shared);
void ltab_free(ltab *t);

/* The entry of `sku`, made when there is none, held by the caller (an order) until
 * ltab_release; it may be freed then. */
lsku *ltab_hold(ltab *t, const char *sku);
void ltab_release(ltab *t, lsku *s);
/* The entry of `sku` or NULL, not held: for use before control returns to the loop. */
lsku *ltab_find(ltab *t, const char *sku);

/* Settings read for s (a meta read answered `view` at `now_ms`): stored, s given the
 * process entry (skutab_entry) when it has none or a dropped one, and the generation
 * told to the other tables (skutab_loop_read). */
void ltab_read(ltab *t, lsku *s, inv *v, const struct sku_view *view, int64_t now_ms);
/* A read found no such SKU: the settings dropped (ltab_invalidate) and the process
 * entry of s, when it has one not dropped yet, dropped (skutab_drop). */
void ltab_gone(lsku *s, inv *v);
/* Every entry's settings dropped (ltab_invalidate_all) when `changes` (inv.changes)
 * moved since the last call: another thread changed some SKU. */
void ltab_sync(ltab *t, long long changes);

/* The table of worker connection c, made on first use, freed with c: its blocking
 * callers' and its engine's (engine_of_conn). c's thread only. */
ltab *ltab_of_conn(inv_conn *c);
/* For a blocking caller on c's thread: the settings of `sku` from c's table, read
 * from the store (skutab_read) when older than meta_cache_ms, the table first in step
 * with inv.changes. INV_OK (*s held: ltab_release(ltab_of_conn(c), *s); *view set),
 * INV_UNKNOWN_SKU (as ltab_gone) or INV_UNAVAILABLE, *s NULL then. */
inv_status ltab_get(inv_conn *c, const char *sku, lsku **s, struct sku_view *view);

/* Settings: valid and younger than `max_age_ms` at `now_ms`. */
bool ltab_fresh(const lsku *s, int64_t now_ms, int max_age_ms);
const struct sku_view *ltab_view(const lsku *s);
/* Settings are known (whatever their age). */
bool ltab_valid(const lsku *s);
/* Store settings read at `now_ms` (hints start again when the generation changed). */
void ltab_set_view(lsku *s, const struct sku_view *view, int64_t now_ms);
/* Forget the settings (a reset or delete was seen): every waiter looks again. A
 * waiter's `handed` must not release an entry (it defers its next step). */
void ltab_invalidate(lsku *s);
/* The same for every entry (this process changed some SKU: a reset, a restock, a
 * cancel -- which one does not matter, they are rare next to orders); the entries
 * of deleted SKUs (skutab_dropped) no order holds are freed. */
void ltab_invalidate_all(ltab *t);
bool ltab_claim(lsku *s, int i);
bool ltab_claimed(const lsku *s, int i);
/* Another loop of this process claims segment i (skutab_loop_claims; advisory). */
bool ltab_claimed_elsewhere(const lsku *s, int i);
/* Give a claim back: to the oldest waiter for this very segment, else to the oldest
 * waiter for any when the segment is not known empty, the SKU has it and it is at
 * home on this loop (ring.h), else free. A segment away from home goes back free so
 * that the loop it is at home on gets it, instead of meeting this loop's holders
 * in Redis (BUSY) for as long as this loop has waiters. */
void ltab_unclaim(lsku *s, int i);
/* The waiter ltab_unclaim would hand segment i's claim to, out of the queue (its
 * `handed` not called: the caller hands the claim over itself), or NULL. */
struct lwait *ltab_next_holder(lsku *s, int i);
/* The same for a lock that goes on held (the store keeps it: no ACQUIRE, so no BUSY
 * to meet): also the oldest waiter for any segment when segment i is away from home,
 * as long as it is not known empty and the SKU has it. The caller puts the waiter
 * back (ltab_wait_front) when it does not hand the lock on after all. */
struct lwait *ltab_next_keeper(lsku *s, int i);
/* Free segment i's claim, waiters or not (ltab_next_holder found none). With the view
 * dropped (ltab_invalidate), the waiters are sent to look again (`handed` -1). */
void ltab_free_claim(lsku *s, int i);

/* Segment i held `stock` in `gen` (ignored when stale): true when this made it
 * known empty. */
bool ltab_note_stock(lsku *s, long long gen, int i, long long stock);
long long ltab_hint(const lsku *s, int i);
/* Fresh counts of every segment (stock[0..n-1]) read in `gen` with no adjust under
 * way: the hints become them, raised too (ignored when stale). */
void ltab_set_hints(lsku *s, long long gen, const long long *stock, int n);
int ltab_empty_count(const lsku *s, long long gen);

/* Queue `w` for a handed claim; ltab_unwait takes it out (true when it was queued). */
void ltab_wait(lsku *s, struct lwait *w);
bool ltab_unwait(lsku *s, struct lwait *w);
/* Put `w`, just taken out by ltab_next_holder, back first in line. */
void ltab_wait_front(lsku *s, struct lwait *w);

/* The process-wide entry of the SKU (skutab.h: its outcome counters), NULL until
 * set; set with a hold of it (skutab_entry) that the entry gives back when it goes
 * or when another is set (a SKU deleted and made again: the old one was dropped). */
sku_local *ltab_shared(const lsku *s);
void ltab_set_shared(ltab *t, lsku *s, sku_local *e);

/* The automatic rebalance, once per generation: true when the caller should run it. */
bool ltab_rebalance_begin(lsku *s, long long gen);
void ltab_rebalance_end(lsku *s);

#endif
