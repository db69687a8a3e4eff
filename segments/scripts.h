/* scripts.h -- the Lua scripts; the only place Lua lives.
 *
 * Each script's KEYS/ARGV and reply are documented beside its source in scripts.c.
 * Replies are arrays whose first element is one of the SCRIPT_R_* codes below.
 *
 * Every script that writes a SKU carries what the caller believes of it (its epoch,
 * and for the scripts that span the SKU its segment count) and refuses with STALE
 * when Redis says otherwise, so no cache can make a script write into a SKU that was
 * reset or deleted meanwhile. Every script is idempotent against itself: sent again
 * after a lost reply it recognises its own earlier work (its lock token, its order's
 * attempt id, its request id) and reports what really happened. Numbers that can
 * approach 2^53 never pass through Lua arithmetic where that could round.
 */
#ifndef SEG_SCRIPTS_H
#define SEG_SCRIPTS_H

enum script_id {
    SCRIPT_ACQUIRE, /* check order id, read stock, take the segment lock when enough */
    SCRIPT_DEDUCT,  /* fenced deduct+record+release; with no token: mode atomic */
    SCRIPT_DEDUCT_MULTI, /* fenced by every token: one order over several segments */
    SCRIPT_RELEASE,      /* compare-and-delete */
    SCRIPT_RENEW,        /* compare-and-pexpire */
    SCRIPT_RESET,        /* drop a SKU's keys and records; optionally write fresh ones */
    SCRIPT_CANCEL,       /* fenced: give an order's units back, mark it cancelled */
    SCRIPT_ADJUST,       /* fenced: restock or rebalance every segment */
    SCRIPT__COUNT
};

enum script_reply {
    SCRIPT_R_OK = 0,     /* done; [1] = stock left in the segment (ACQUIRE: stock seen) */
    SCRIPT_R_BUSY = 1,   /* ACQUIRE: lock held by another token */
    SCRIPT_R_SHORT = 2,  /* segment holds less than qty; [1] = its stock */
    SCRIPT_R_EXISTS = 3, /* order id already recorded; [1] = the record */
    SCRIPT_R_MISSING = 4,  /* segment keys (CANCEL: the order) absent */
    SCRIPT_R_FENCED = 5,   /* a token no longer owns its lock; nothing written */
    SCRIPT_R_STALE = 6,    /* the SKU's epoch or segment count is not what the caller
                              believed (a reset, a delete), or the order changed since
                              it was read: nothing written; re-read and try again */
    SCRIPT_R_CONFLICT = 7, /* the request id was used for another admin write */
    SCRIPT_R_LIMIT = 8,    /* ADJUST: the restock would pass SKU_STOCK_MAX */
    SCRIPT_R_REPLAYED = 9, /* the request id was applied already: nothing done again */
};

/* Lua source of a script. */
const char *script_source(enum script_id id);

#endif
