/* scripts.h -- the Lua scripts; the only place Lua lives (inside the Redis seam).
 *
 * Each script's KEYS/ARGV and reply are documented atop its source, lua/<name>.lua.
 * Replies are arrays whose first element is one of the RD_* codes of calls.h.
 *
 * Every script that writes a SKU carries what the caller believes of it (its epoch,
 * and for the scripts that span the SKU its segment count) and refuses with STALE
 * when Redis says otherwise, so no cache can make a script write into a SKU that was
 * reset or deleted meanwhile. Every script is idempotent against itself: sent again
 * after a lost reply it recognises its own earlier work (its lock token, its order's
 * attempt id, its request id) and reports what really happened. Numbers that can
 * approach 2^53 never pass through Lua arithmetic where that could round.
 */
#ifndef SEG_REDIS_SCRIPTS_H
#define SEG_REDIS_SCRIPTS_H

enum script_id {
    SCRIPT_ACQUIRE, /* check order id, read stock, take the segment lock when enough */
    SCRIPT_DEDUCT,  /* fenced deduct+record+release; with no token: mode atomic */
    SCRIPT_DEDUCT_MULTI, /* fenced by every token: one order over several segments */
    SCRIPT_RELEASE,      /* compare-and-delete */
    SCRIPT_RENEW,        /* compare-and-pexpire */
    SCRIPT_RESET,        /* drop a SKU's keys; optionally write fresh ones */
    SCRIPT_CANCEL,       /* fenced: give an order's units back, mark it cancelled */
    SCRIPT_ADJUST,       /* fenced: restock or rebalance every segment */
    SCRIPT_DROP_RECORDS, /* delete the order records a reset left behind */
    /* A reset on a Redis Cluster, one slot per script: */
    SCRIPT_RESET_BEGIN, /* mark the reset pending in the meta (or take over a dead one) */
    SCRIPT_RESET_SEGMENT, /* empty one segment and give it its new stock and epoch */
    SCRIPT_RESET_COMMIT,  /* the new settings: the reset becomes visible */
    SCRIPT_RESET_YIELD,   /* a reset stopped part way gives up its lease */
    /* The order path on a Redis Cluster, one slot per script: */
    SCRIPT_CLAIM,          /* the order id's claim (in the id's slot) */
    SCRIPT_CONFIRM,        /* the record under the claim, or the claim given up */
    SCRIPT_ACQUIRE_SLOT,   /* ACQUIRE without the record */
    SCRIPT_DEDUCT_SLOT,    /* DEDUCT without the record, fenced by the claim's end too */
    SCRIPT_CANCEL_SEGMENT, /* a cancel's units given back in its segment */
    SCRIPT_CANCEL_RECORD,  /* ... and its record marked cancelled */
    SCRIPT_UNDO_PART,      /* a part of a multi-segment order given back */
    /* A restock or rebalance on a Redis Cluster, one slot per script (adjust.h): */
    SCRIPT_ADJUST_BEGIN,  /* record the intent in the meta (or take over a dead one) */
    SCRIPT_ADJUST_TAKE,   /* units out of one segment, once per intent */
    SCRIPT_ADJUST_GIVE,   /* units into one segment, once per intent */
    SCRIPT_ADJUST_COMMIT, /* the intent done: initial, gen, the request id */
    SCRIPT_ADJUST_YIELD,  /* a stopped runner's lease ended early */
    SCRIPT_RETAIN,        /* an order record's TTL, once the ledger holds it */
    SCRIPT_EV_READ,       /* the ledger sink's read of a segment's stream */
    SCRIPT_EV_DONE,       /* ... and its entries copied: acked and deleted */
    SCRIPT_RESTORE,       /* an expired order record written back from the ledger */
    SCRIPT_DEDUCT_BATCH,  /* fenced: the orders of one lock hold, one answer each */
    SCRIPT_HOLD,          /* on a cluster, a reservation's step on its segment */
    SCRIPT_HOLD_ID,       /* ... and, on a cluster, its steps in the id's slot */
    SCRIPT_HOLDING,       /* ... and the sweeper's list there (lua/holding.lua) */
    SCRIPT_VIEW,          /* the SKU view's numbers of segments in one read */
    SCRIPT_EV_ADOPT,      /* a flagged segment named in the ledger's registry */
    SCRIPT_HOLD_LOCAL, /* a reservation's steps on a standalone Redis (hold_local.lua) */
    SCRIPT__COUNT
};

/* Lua source of a script. */
const char *script_source(enum script_id id);

#endif
