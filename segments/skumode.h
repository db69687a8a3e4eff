/* skumode.h -- how a SKU's orders take stock, and the word for it in JSON and Redis.
 *
 * SKU_MODE_LOCK: an order takes a segment's lock, works (hold_ms), then deducts
 * fenced by its token. SKU_MODE_ATOMIC: one script checks and deducts, no lock.
 * The words are "lock" and "atomic", the same in a request body, a reply and the
 * meta hash in Redis; anything else is no mode. A leaf: it calls nothing else in
 * segments/.
 */
#ifndef SEG_SKUMODE_H
#define SEG_SKUMODE_H

typedef enum sku_mode { SKU_MODE_LOCK = 0, SKU_MODE_ATOMIC = 1 } sku_mode;

/* Where mode lock's lock lives: in the store beside the stock ("redis", the
 * default), or in a lock service (segments/locksvc.h) whose holder's writes the store
 * fences: "redlock", "memcached", "zookeeper". The same words in JSON and the meta. */
typedef enum sku_lock {
    SKU_LOCK_STORE = 0,
    SKU_LOCK_REDLOCK = 1,
    SKU_LOCK_MEMCACHED = 2,
    SKU_LOCK_ZOOKEEPER = 3,
    SKU_LOCK__COUNT
} sku_lock;

/* "lock" / "atomic" (a static string) and back; sku_mode_parse returns 0 with *out
 * set, or -1 (*out untouched) for anything else, NULL included. */
const char *sku_mode_name(sku_mode m);
int sku_mode_parse(const char *s, sku_mode *out);
/* The same for a lock: NULL and "" parse as SKU_LOCK_STORE (a meta without one). */
const char *sku_lock_name(sku_lock l);
int sku_lock_parse(const char *s, sku_lock *out);

#endif
