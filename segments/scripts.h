/* scripts.h -- the Lua scripts; the only place Lua lives.
 *
 * Each script's KEYS/ARGV and reply are documented beside its source in scripts.c.
 * Replies are arrays whose first element is one of the SCRIPT_R_* codes below.
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
    SCRIPT_R_MISSING = 4, /* segment keys (CANCEL: the order) absent */
    SCRIPT_R_FENCED = 5,  /* DEDUCT: the token no longer owns the lock; nothing written */
};

/* Lua source of a script. */
const char *script_source(enum script_id id);

#endif
