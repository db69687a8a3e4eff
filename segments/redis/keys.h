/* keys.h -- Redis key names; the only place key names are built (inside the seam).
 *
 * Key schema (the hash tag `{sku:i}` puts a segment's keys in one cluster slot):
 *   inv:skus                  set of SKU names
 *   inv:sku:{sku}             hash: segments, mode, hold_ms, rebalance, initial, epoch,
 *                             gen, lock (a lock service's name; absent: the lock
 *                             here), fencing ("0": the lab's unfenced writes). `epoch` is
 random, drawn at every create or reset and
 *                             never reused; `gen` starts at epoch and is bumped by every
 *                             change that can raise stock (restock, rebalance, cancel).
 *   inv:{sku:i}:epoch         segment i's copy of the SKU's epoch: every script that
 *                             writes the segment checks it, so a caller whose view of
 *                             the SKU is stale (or names a segment that is gone) is
 *                             refused instead of obeyed
 *   inv:{sku:i}:stock         integer stock left in segment i
 *   inv:{sku:i}:sold          integer units sold from segment i
 *   inv:{sku:i}:lock          segment i's lock: a random token, PX lease
 *   inv:{sku:i}:fence         the highest fencing number a lock service's holder of
 *                             segment i registered (lua/acquire.lua; issued there by
 *                             INCR for a service without its own); a write naming a
 *                             lower one is FENCED. A reset keeps it (it only grows);
 *                             the segment's going (a delete, fewer segments) drops it:
 *                             its epoch goes too, so no old holder's write can pass
 *   inv:{sku:i}:orders        hash order_id -> qty taken from segment i, one field per
 *                             order whose first (or only) segment is i
 *   inv:{sku:i}:parts         hash order_id -> qty taken from segment i by a
 *                             multi-segment order whose first segment is another one
 *   inv:{sku:i}:cancelled     set of cancelled order ids whose first segment is i
 *                             (a cluster: that took a part from segment i)
 *   inv:{sku:i}:gone:E:orders  segment i's orders hash and cancelled set as a reset of
   inv:{sku:i}:gone:E:cancelled  the SKU's epoch E left them (RENAMEd, O(1)): the
                             reset's caller reads them in steps (HSCAN, SSCAN), drops
                             the records they name and UNLINKs them, so no script
                             lists a whole sale at once
   inv:{sku:i}:adj           hash intent id -> units a restock or rebalance on a Redis
 *                             Cluster took from (or gave to) segment i in its step
 *                             (adjust.h), so that a step run again answers what it
 *                             did; the runner that commits the intent deletes its
 *                             fields, a reset of the segment the whole hash
 *   inv:order:{id}            hash: r = the order record (packed, recpack.h, so the
 *                             hash stays a listpack; or its JSON), t = the attempt that
 *                             wrote it (so a script resent after a lost reply knows its
 *                             own work), k = its SKU, e = that SKU's epoch then.
 *                             c = the epoch it was cancelled in (lua/cancel.lua; the
 *                             ledger's RETAIN leaves a cancelled record to its cancel).
 *                             Written in the same script as the deduction; unique per
 *                             order_id (idempotency). A record whose SKU has another
 *                             epoch now was left behind by a reset (RESET names only
 *                             segment keys; the records its graveyards name are dropped
 *                             after it, in batches, and a crash can leave some): it is
 dead, every
 *                             read ignores it and the next order with that id overwrites
 *                             it. It lives in the id's slot: on a Redis Cluster an order
 *                             with a client's id writes it after the deduction (CONFIRM,
 *                             lua/confirm.lua); a fresh id is made for its segment's
 *                             slot (slots.h rd_name_for_slot), and the DEDUCT writes it.
 *   inv:req:{sku}:rid         an admin write already applied under request id `rid`:
 *                             what it was ("restock:100", ...; a PUT that created
 *                             the SKU with "|new" after it); kept for a day
 *   inv:intents               sorted set (a Redis Cluster): the ids of multi-segment
 *                             orders in flight, scored by when they began (ms since
 *                             the epoch, the sender's clock); their plans are in their
 *                             claims (lua/claim.lua). What a crash leaves here is
 *                             undone by the sweeper (sweeper.h).
 *   (meta fields adj, adj_op, adj_add, adj_plan, adj_rid, adj_sig, adj_owner,
 *    adj_until: the intent of a restock or rebalance under way on a Redis Cluster,
 *    its runner and lease, adjust.h; pending,
 *    pending_segments, pending_until, pending_dead, pending_span, pending_req: a
 *    reset under way there, the dead ones it took over and its request,
 *    lua/reset_begin.lua)
 *   inv:ack:{NNNNNN}          a WAIT's mark (waits.h): written just before a WAIT on the
 *                             connection that carries only WAITs, so that the WAIT
 *                             counts from after it; NNNNNN (octal digits) puts it in
 *                             the slot of the write being waited for. "1", PX 60 s: at
 *                             most one per slot, and gone a minute after the last one
 *   inv:{sku:i}:events        stream: segment i's ledger events (scripts.c LEDGER;
 *                             the sink, segments/ledger.h, copies and deletes them)
 *   inv:{sku:i}:ledger        "1": segment i's changes append events (reset.lua);
 *                             the segment's going drops it, and then the sink drops
 *                             the stream and retire list once it copied the last
 *                             events (lua/ev_read.lua): a segment that goes leaves
 *                             no key
 *   inv:ledger:{NNNNNN}       hash "placed:i" -> durability: the segments of slot
 *                             NNNNNN (octal, as inv:ack; standalone: slot 0's) whose
 *                             ledger streams the sink drains: set with the ledger
 *                             flag, in its script (lua/reset.lua, reset_segment.lua),
 *                             deleted by the sink once the flag is gone and the
 *                             stream empty (lua/ev_read.lua), so a segment whose
 *                             whole life falls between two of a sink's passes is
 *                             still drained
 *   inv:ledger:slots          set (a cluster): the slots whose inv:ledger:{NNNNNN}
 *                             may hold a field, added before the reset's segment
 *                             steps; never removed (16384 at most)
 *   inv:{sku:i}:retire        list: orders segment i forgets once record_retention_s
 *                             passed (lua/ev_done.lua queues, lua/ev_read.lua drops
 *                             their fields from orders, parts and cancelled), one
 *                             element "due_ms id id ..." per batch the sink copied
 *                             (a cluster's due min(retention, 60 s) later)
 *   inv:{sku:i}:reserved:E    units held by reservations in segment i of epoch E
 *   inv:{sku:i}:holds:E       sorted set: the held reservations of segment i of epoch
 *                             E, scored by when each expires (ms, Redis's TIME); a
 *                             hold leaves it in the step that moves its units
 *   inv:hold:{id}             standalone: string, reservation `id` whole, its record
 *                             and index in one: "s c x q e i d t k p[ m]" (state
 *                             held|confirmed|released|expired, confirming attempt or
 *                             '-', expiry ms, qty, epoch, segment, durability, placing
 *                             attempt, SKU, placed name, parts "seg:qty,..." of a hold
 *                             over several segments); lua/hold_local.lua.
 *                             Cluster: hash, where `id` lives (k SKU, p placed name, i
 *                             segment, e epoch, q, x, t, d; c, u a place's claim, o
 *                             the confirm that wrote the order record),
 *                             lua/hold_id.lua. Kept a day past its expiry
 *   inv:{sku:i}:hold:<id>     cluster only: hash, reservation <id> taken from segment
 *                             i (q units, x expiry ms, s held|confirmed|released|
 *                             expired, t the attempt that placed it, c the one that
 *                             confirmed it); lua/hold.lua. Kept a day past its expiry
 *   inv:holding               sorted set: "placed i E" per segment with holds, scored
 *                             by its first expiry: the hold sweeper's work list (on a
 *                             cluster kept by lua/holding.lua, apart from the steps)
 *   inv:events                pub/sub channel: SKU settings changed (name as message)
 *
 * Names are valid ids (base/names.h), so none carries a brace into a key. A SKU whose
 * segments were placed with a salt (calls.h rd_sku_placed) is passed as "sku/salt":
 * its segments' tags read {sku/salt:i}; the meta and request keys use the name alone.
 */
#ifndef SEG_KEYS_H
#define SEG_KEYS_H

#include "base/names.h"

#define SEG_KEY_MAX 160

/* Each writes a NUL-terminated key into `buf` (at least SEG_KEY_MAX bytes) and
 * returns it. `sku`/`id` must be valid names; `i` is 0-based. */
char *seg_key_skus(char *buf);
char *seg_key_meta(char *buf, const char *sku);
char *seg_key_stock(char *buf, const char *sku, int i);
char *seg_key_sold(char *buf, const char *sku, int i);
char *seg_key_lock(char *buf, const char *sku, int i);
char *seg_key_orders(char *buf, const char *sku, int i);
char *seg_key_parts(char *buf, const char *sku, int i);
char *seg_key_cancelled(char *buf, const char *sku, int i);
char *seg_key_epoch(char *buf, const char *sku, int i);
/* The highest fence a lock service's holder of segment i registered (store.h). */
char *seg_key_fence(char *buf, const char *sku, int i);
char *seg_key_adjust(char *buf, const char *sku, int i);
/* Segment i's orders hash ("orders") or cancelled set ("cancelled") as a reset of the
 * SKU's `epoch` left them. */
char *seg_key_gone(char *buf, const char *sku, int i, long long epoch, const char *what);
char *seg_key_order(char *buf, const char *id);
char *seg_key_request(char *buf, const char *sku, const char *rid);
/* The WAIT mark of cluster slot `slot` (0..16383; standalone: any). */
char *seg_key_ack(char *buf, int slot);
const char *seg_key_events(void);
/* Segment i's ledger stream (inv:{sku:i}:events: every change of the segment, written
 * by the script that makes it, scripts.c LEDGER) and its ledger flag
 * (inv:{sku:i}:ledger: "1" while events are on; written by the resets). A reset
 * keeps the stream (its last events are still to be copied) and deletes the flag of
 * a segment that goes; the sink deletes a stream that is empty with no flag. */
char *seg_key_ledger_events(char *buf, const char *sku, int i);
char *seg_key_ledger_flag(char *buf, const char *sku, int i);
/* The ledger's registry of cluster slot `slot` (standalone: 0), inv:ledger:{NNNNNN}
 * in that slot: hash "placed:i" -> durability of each segment of the slot whose
 * stream the sink must drain (set with the segment's ledger flag by the resets, one
 * script; deleted by the sink's EV_READ once the flag is gone and the stream empty).
 * And the slots that may have one (inv:ledger:slots, a set; a cluster's only, never
 * shrinks: 16384 at most). */
char *seg_key_ledger_streams(char *buf, int slot);
const char *seg_key_ledger_slots(void);
/* Segment i's retire list (inv:{sku:i}:retire). */
char *seg_key_retire(char *buf, const char *sku, int i);
const char *seg_key_intents(void);

/* Reservations (lua/hold.lua): segment i's reserved count and held set of `epoch`,
 * reservation `id`'s record in segment i (id "": the prefix of every such key), its
 * index, and the sweeper's list of segments with holds. */
char *seg_key_reserved(char *buf, const char *sku, int i, long long epoch);
char *seg_key_holds(char *buf, const char *sku, int i, long long epoch);
char *seg_key_hold(char *buf, const char *sku, int i, const char *id);
char *seg_key_hold_index(char *buf, const char *id);
const char *seg_key_holding(void);

/* The name the segments of `sku` are keyed under: `sku`, or "sku/salt" when salt > 0
 * (buf: SEG_NAME_MAX + 16 bytes). calls.h rd_sku_placed is this, and both are
 * store.h store_sku_placed. */
char *seg_key_placed(char *buf, const char *sku, int salt);

#endif
