/* holds_slot.h -- inside a Redis Cluster's reservations (holds_chain.c: commands,
 * replies and the chain's sending and end; holds_slot.c: one segment's holds, the
 * chain's steps; holds_parts.c: holds over several segments). Not for callers outside
 * segments/redis/holds_*.c: the API is holds.h.
 *
 * A hold over several segments (np > 1 parts, by segment) is made all or nothing
 * across slots with the multi-segment orders' mechanism (docs/DESIGN.md "On a Redis
 * Cluster" under "Reservations"): its id in the intents set, its plan in the order
 * record's claim (lua/hold_id.lua `plan`), then every part at once (lua/hold.lua in
 * its segment, fenced by the claim's end), then COMMIT (a place: the index) or the
 * record (a confirm), each dropping the plan in the same script; a part refused undoes
 * the plan (UNDO_PART: what the id holds or bought there given back). No answer leaves
 * claim, plan and intent for the intent sweeper (or an order with the id) to undo.
 */
#ifndef SEG_REDIS_HOLDS_SLOT_H
#define SEG_REDIS_HOLDS_SLOT_H

#include <stdbool.h>

#include "segments/redis/async.h"
#include "segments/redis/cmd.h"
#include "segments/store.h"

/* The claim of a place or a confirm on the id: far longer than its chain of calls
 * (a few round trips, each bounded by the connection's timeout, which ends the chain),
 * short enough that a retry after a crash waits little for it (BUSY until then). */
#define HOLD_CLAIM_MS 5000

/* What a step needs to name its segment's keys, from the meta or the index; a hold of
 * several segments has its parts in pseg/pqty (malloc'd, np of them; np 0: one). */
struct where {
    char sku[SEG_NAME_MAX + 1];
    char placed[STORE_SKU_PLACED_MAX];
    int seg;
    long long epoch, qty, expires;
    bool replicated;
    int np;
    int *pseg;
    long long *pqty;
};

/* hold.lua in slot mode on segment w->seg (of w->qty): `at` the expiry given (0:
 * now + ttl_ms), `until` the claim's end, `first` the record's segment (the orders
 * hash; else the parts hash). */
void hs_slot_cmd(struct rd_cmd *cmd, const char *act, const struct where *w,
                 const char *id, int ttl_ms, const char *attempt, const char *record,
                 long long until, long long at, bool first);
/* hold_id.lua's `act` for reservation `id`; its further arguments follow. */
void hs_id_cmd(struct rd_cmd *cmd, const char *act, const char *id, const char *attempt);
/* holding.lua's `act` on segment w->seg's entry of the sweeper's list. */
void hs_holding_cmd(struct rd_cmd *cmd, const char *act, const struct where *w);

int hs_code(const struct redisReply *r);
const char *hs_str(const struct redisReply *r, size_t k);
long long hs_ll(const struct redisReply *r, size_t k);

/* "seg:qty,..." into w's parts (0), or -1 when s is not such a list. */
int hs_parts_parse(struct where *w, const char *s);
/* w's parts as "seg:qty,..." and as a plan (rd_plan_build), each malloc'd. */
char *hs_parts_str(const struct where *w);
char *hs_parts_plan(const struct where *w);
void hs_where_clear(struct where *w);
/* The order record of a confirmed hold, as hold.lua (and record.c) write it. */
char *hs_record_of(const char *id, const struct where *w);

/* The states of a hold's parts as one: "expired" or "released" when any part is,
 * else "held" while any part is, else "confirmed". */
const char *hs_state_of(const char (*states)[12], int n);

/* One chain of calls on a loop: a place or a step by id (holds_slot.c), continued by
 * holds_parts.c for a hold over several segments. Created, and freed by hs_done, on
 * the loop's thread. */
struct hs {
    rda_conn *c;
    /* the chain's step after each reply of hs_send (holds_slot.c) */
    void (*next)(struct hs *x, const struct redisReply *r);
    store_hold_fn fn;
    void *arg;
    enum hs_state {
        HS_META,   /* the SKU's settings read (a place) */
        HS_BEGIN,  /* the id claimed in its index */
        HS_WALK,   /* a segment asked to take the hold; the next after BUSY/SHORT */
        HS_COMMIT, /* the index written under the claim */
        HS_ABORT,  /* the claim given up: the place took nothing */
        HS_FIND,   /* the index read (a confirm: and the order record claimed) */
        HS_STEP,   /* the segment's step by id */
        HS_RECORD, /* a confirm's order record written */
        HS_DROP,   /* a confirm that sold nothing gave the record's claim up */
        HS_GEN,    /* the SKU's gen bumped: units came back */
        HS_INTENT, /* several segments: the id added to the intents set */
        HS_PLAN,   /* several segments: the plan in the order record's claim */
        HS_PARTS,  /* several segments: every part's step sent, answers counted */
        HS_UNDO,   /* several segments: a part refused, the plan undone */
    } state;
    enum store_hold_action act;
    char id[SEG_NAME_MAX + 1];
    char attempt[48];
    struct where w;
    int ttl_ms, start, n, k;
    long long until, total;
    bool busy, back, intent;
    bool ordered; /* a confirm that found the id an order's: a read, answered as a
                     refusal (hs_done) */
    char *record;
    struct store_reply out;
    struct store_hold h;
    /* several segments: the plan, each part's answer, how many are out */
    char *plan;
    int left, fail;
    bool lost;
    char (*pstate)[12];
    struct hs_part *pctx;
    /* a place's walk: the free segments short of qty (in its order), what they hold */
    int nshort;
    int *sseg;
    long long *sstock, avail;
};

/* One part's call of chain x. */
struct hs_part {
    struct hs *x;
    int k;
};

void hs_send(struct hs *x, struct rd_cmd *cmd);
/* The place's last step (state HS_COMMIT): hold_id.lua's commit of the index for the
 * hold found in x->w (parts: "seg:qty,..." of a hold over several segments, else ""). */
void hs_commit(struct hs *x, const char *parts);
/* Answer the caller (rc -1: the outcome unknown) and free x. */
void hs_done(struct hs *x, int rc);
/* Done, after bumping the SKU's gen when units came back. */
void hs_finish(struct hs *x);
/* hold_from: h's where fields from w (its parts included). */
void hs_hold_from(struct store_hold *h, const struct where *w);

/* ---- holds_parts.c: the steps of a hold over several segments on a loop ---------- */

/* A place whose walk found every segment short or busy but the free ones holding qty
 * together: `seg`/`stock` the short ones in the walk's order (n). */
void hs_parts_place(struct hs *x, const int *seg, const long long *stock, int n);
/* A step by id on the index's parts (x's where): a confirm with its claim's end. */
void hs_parts_step(struct hs *x, long long claim_until);
/* The plan's write answered `code` (hold_id.lua `plan`). */
void hs_parts_on_plan(struct hs *x, int code);
/* Read or release of every part on a blocking connection, answered as one step. */
int hs_parts_step_sync(struct rd_conn *c, const struct where *w, const char *id,
                       enum store_hold_action act, const char *attempt,
                       struct store_reply *out, struct store_hold *h);

#endif
