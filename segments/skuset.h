/* skuset.h -- the bounded set of SKU entries that both SKU tables are built on
 * (ltab.h, one per thread; skutab.h, one per process): entries found by name, and the
 * list of idle entries (ones nobody holds), least recently idle first, so that the
 * table's owner frees the oldest past SKUSET_IDLE_MAX.
 *
 * No locks: the owner serialises every call (skutab under its rwlock's write side,
 * bar skuset_find under its read side; an ltab on its one thread). An entry embeds a
 * struct skuset_link as its first member; the owner allocates it, and frees it once
 * skuset_remove took it out. Which entries are held, and whether an idle one is worth
 * keeping, is the owner's to say: the set only keeps order.
 */
#ifndef SEG_SKUSET_H
#define SEG_SKUSET_H

#include <stdbool.h>

#include "base/names.h"

#define SKUSET_BUCKETS 1024
/* Idle entries kept: past this many, the least recently idle go (skuset_over). */
#define SKUSET_IDLE_MAX 4096

struct skuset_link {
    char name[SEG_NAME_MAX + 1];
    struct skuset_link *next;          /* in its bucket */
    struct skuset_link *older, *newer; /* on the idle list, when idle */
    bool idle;
};

struct skuset {
    struct skuset_link *bucket[SKUSET_BUCKETS];
    struct skuset_link *oldest, *newest; /* the idle list */
    int idle;                            /* its length */
};

/* The entry named `name`, or NULL. */
struct skuset_link *skuset_find(const struct skuset *t, const char *name);
/* Name `l` (not in the set) and put it in, not idle. */
void skuset_add(struct skuset *t, struct skuset_link *l, const char *name);
/* Take `l` out of the set (and off the idle list); the owner may free it then. */
void skuset_remove(struct skuset *t, struct skuset_link *l);
/* `l` is idle now: the newest on the idle list (moved there when listed already). */
void skuset_idle(struct skuset *t, struct skuset_link *l);
/* `l` is off the idle list (no-op when it was not on it). */
void skuset_busy(struct skuset *t, struct skuset_link *l);
/* The least recently idle entry while more than SKUSET_IDLE_MAX are idle, else NULL:
 * the owner takes it off the list (skuset_busy, skuset_remove), then asks again. */
struct skuset_link *skuset_over(const struct skuset *t);
/* Call fn for every entry; fn may skuset_remove (and free) the entry it is given. */
void skuset_foreach(struct skuset *t, void (*fn)(struct skuset_link *l, void *arg),
                    void *arg);

#endif
