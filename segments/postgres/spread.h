/* spread.h -- the even-out rule of a PostgreSQL SKU's segments, written once, in SQL:
 * the loop's adjust (spread.c: the automatic spread and the rebalance) and the admin's
 * rebalance (adjust.c) run this same statement.
 *
 * pgsp_sql is one statement for a transaction that has locked the SKU's row. Its
 * parameters, PGSP_NPARAMS of them: $1 the SKU; $2 the caller's lease tokens, one per
 * segment, as a text[] literal (pgsp_tokens); $3 the epoch and $4 the segment count
 * the caller saw; $5 "lease" (true: write only when every segment's lease is the
 * caller's token); $6 "spread" (true: only when evening out leaves more segments with
 * stock; false: even out always); $7 a lock service's fences, one per segment, as a
 * bigint[] literal (pgb_array_ll), or NULL: none (write only when each is -1, 0 or no
 * lower than its segment's svc_fence, fence.h). It locks the segment rows in index order,
 * reads their stock as locked and, when the epoch, the segment count and those conditions
 * hold, writes total / n to each (the first total % n one more) with version + 1 and
 * bumps the SKU's gen; whatever it answers, it clears the leases of the tokens given.
 * One row: the new gen (NULL: nothing written), the SKU's epoch and segment count,
 * the segments found, whether every lease was the caller's, the segments updated,
 * whether every fence held.
 */
#ifndef SEGMENTS_POSTGRES_SPREAD_H
#define SEGMENTS_POSTGRES_SPREAD_H

#define PGSP_NPARAMS 7

extern const char pgsp_sql[];

/* The text[] literal of tok[0..n-1] (hex tokens: no quoting needed), or of n empty
 * tokens (which match no lease) when tok is NULL. Malloc'd; the caller frees it. */
char *pgsp_tokens(const char *const *tok, int n);

#endif
