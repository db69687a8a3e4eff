/* lockcall.h -- what the lease-based lock services (RedLock, memcached) share: their
 * holds, the calls made on them, and the answer of a call.
 *
 * A backend's handle embeds a `lkc_set` (the loop, the calls not yet answered, the
 * holds won); each of its holds starts with a `lkc_hold` and each of its calls with a
 * `lkc_call` (first members, so the backend casts between them). The backend drives
 * the protocol; this file keeps the bookkeeping it would otherwise write twice:
 *
 * - a hold carries the caller's lks_hold, its name, a fresh token (32 hex digits from
 *   the kernel), a lease timer that marks it lost at valid_until_ms, the count of
 *   calls under way on it, and lost / released flags;
 * - a call is on the set's list until answered; lkc_deliver answers it exactly once
 *   (an acquire with the hold on LKS_OK, which then joins the set's holds), frees it,
 *   and frees the hold when it is released and no call is left on it (or when an
 *   acquire failed and no call is left on it). Nothing of the set is touched after the
 *   caller's callback, which may free the handle.
 *
 * Threads: a set and everything on it belong to the thread of its loop.
 */
#ifndef SEG_LOCKCALL_H
#define SEG_LOCKCALL_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "segments/locksvc.h"

#define LKC_NAME_MAX 200

typedef struct lkc_hold lkc_hold;
typedef struct lkc_call lkc_call;

typedef struct lkc_set {
    struct event_base *base;
    lkc_call *calls; /* not yet answered */
    lkc_hold *holds; /* won, not yet gone */
    uint64_t rnd;    /* xorshift64* state for the backoff jitter */
} lkc_set;

struct lkc_hold {
    lks_hold pub; /* first: the lks_hold the caller sees */
    lkc_set *set;
    lkc_hold *prev, *next; /* set->holds, once won */
    char name[LKC_NAME_MAX + 1];
    char token[33];
    struct event *expiry; /* at valid_until_ms: lost */
    int refs;             /* calls under way on it */
    bool lost, released;
};

struct lkc_call {
    lkc_set *set;
    lkc_call *prev, *next; /* set->calls */
    struct event *timer;   /* the backend's: deadlines, backoff, "answer now" */
    lkc_hold *hold;
    int ttl_ms;
    long long deadline_ms; /* acquire: stop trying at */
    int rc;                /* an answer known ahead (lkc_answer_soon) */
    bool is_acquire;       /* answered through acq_fn with the hold; else done_fn */
    lks_acquire_fn acq_fn;
    lks_done_fn done_fn;
    void *arg;
};

/* A set on `base`, its jitter seeded from the kernel. */
void lkc_set_init(lkc_set *s, struct event_base *base);
/* Answer every call LKS_UNAVAIL through `deliver` (the backend's, which ends with
 * lkc_deliver), then free the holds left. */
void lkc_set_drain(lkc_set *s, void (*deliver)(lkc_call *c, int rc));

/* A hold of `size` bytes (the backend's struct, lkc_hold first) for lock `name` (cut
 * to LKC_NAME_MAX; the caller checks it first), with a fresh token. */
lkc_hold *lkc_hold_new(lkc_set *s, size_t size, const char *name);
/* The hold is ours until valid_until_ms (base/clock.h ms; now is that clock's now). */
void lkc_hold_valid(lkc_hold *h, long long valid_until_ms, long long now);
/* Lost: once; its lost callback runs. */
void lkc_hold_lost(lkc_hold *h);
/* Given up by the caller: no longer renewed, no longer reported lost. */
void lkc_hold_released(lkc_hold *h);

/* A call of `size` bytes (the backend's struct, lkc_call first) on hold h, its timer
 * running `step` with the call as argument. */
lkc_call *lkc_call_new(lkc_set *s, size_t size, lkc_hold *h, int ttl_ms,
                       event_callback_fn step);
/* Answer on the next turn of the loop (the call's timer at 0 with rc set): never from
 * inside the asking call. The backend's step then delivers c->rc. */
void lkc_answer_soon(lkc_call *c, int rc);
/* Answer the call with rc and free it (see the contract above). */
void lkc_deliver(lkc_call *c, int rc);

/* A random number below n (the backoff jitter). */
uint32_t lkc_rand(lkc_set *s, uint32_t n);
/* The clock drift allowed for a lease of ttl_ms: ttl/100 + 2 ms. */
int lkc_drift_ms(int ttl_ms);
/* Arm timer ev to fire in ms (0 when negative). */
void lkc_arm_ms(struct event *ev, long long ms);

#endif
