/* lock.h -- one segment's lock: acquire (with the stock read), fenced deduct, release.
 *
 * A lock is the key inv:{sku:i}:lock holding a token unique to one attempt
 * (connection id + counter), set with NX and a PX lease. Only the token's owner
 * can release or renew it (compare in Lua), and the deduction runs in the same
 * script as the token check, so a holder whose lease lapsed writes nothing.
 * Each call returns 0 with `out` filled, or -1 when Redis gave no usable answer.
 */
#ifndef SEG_LOCK_H
#define SEG_LOCK_H

#include "segments/internal.h"

struct lock_reply {
    enum script_reply code;
    long long stock; /* OK/BUSY/SHORT: stock seen (DEDUCT OK: stock left) */
    char *record;    /* EXISTS: the existing order record; caller frees */
};

/* A fresh token, unique to this attempt across every connection and instance. */
void lock_new_token(inv_conn *c, char token[33]);

/* Check order `id`, read segment i's stock and, when it holds `qty`, take its lock
 * with `token`; all only while the segment belongs to `epoch`. Codes: OK (taken),
 * BUSY, SHORT, EXISTS, MISSING, STALE. */
int lock_acquire(inv_conn *c, const char *sku, long long epoch, int i, const char *id,
                 long long qty, const char *token, struct lock_reply *out);

/* Fenced deduct of `qty` from segment i of `epoch` recording `record` under order
 * `id` as written by `attempt`, then release. token "" = no lock (mode atomic).
 * A resend of the same attempt after a lost reply answers OK: the order is its own.
 * Codes: OK, FENCED, STALE, EXISTS, SHORT, MISSING. */
int lock_deduct(inv_conn *c, const char *sku, long long epoch, int i, const char *token,
                const char *attempt, const char *id, long long qty, const char *record,
                struct lock_reply *out);

/* Release segment i's lock if `token` still owns it. 1 released, 0 not ours, -1 error. */
int lock_release(inv_conn *c, const char *sku, int i, const char *token);

#endif
