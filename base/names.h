/* names.h -- what a SKU, order or request id may be, and the size limits every layer
 * shares. No Redis here: api/ validates with it, and the Redis seam builds keys from
 * names it has checked.
 *
 * A name is 1..SEG_NAME_MAX characters of [A-Za-z0-9_.-], so it can never carry a
 * hash-tag brace, a glob character, a separator or whitespace into a key or a log.
 */
#ifndef BASE_NAMES_H
#define BASE_NAMES_H

#include <stdbool.h>

#define SEG_NAME_MAX 64
#define SEG_MAX_SEGMENTS 1024

/* True when `s` is a valid SKU, order or request id. NULL is not valid. */
bool seg_valid_name(const char *s);

/* FNV-1a of a name, for the tables keyed by SKU (skutab.c, ltab.c). */
unsigned seg_name_hash(const char *s);

#endif
