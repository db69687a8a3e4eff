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

/* "lock" / "atomic" (a static string) and back; sku_mode_parse returns 0 with *out
 * set, or -1 (*out untouched) for anything else, NULL included. */
const char *sku_mode_name(sku_mode m);
int sku_mode_parse(const char *s, sku_mode *out);

#endif
