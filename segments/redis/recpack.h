/* recpack.h -- the order record as Redis keeps it: packed, so that every field of its
 * hash (keys.h inv:order:{id}) stays within Redis's default listpack limit
 * (hash-max-listpack-value 64).
 *
 * The record (segments/record.h) is JSON of ~130 bytes or more: in field `r` it made
 * each order's hash a full hash table (a dict and an object per field), ~3x the
 * memory and more CPU per order than a listpack. Packed, `r` is "#qty seg part [seg
 * part ...]": the order's id is its key's, its SKU the record's `k` up to '/', its
 * status "confirmed" and its "segment" the first part's. A record that is not of that
 * shape (cancelled, restored from the ledger, written by an older build, or too long)
 * stays JSON, and every reader takes both: the scripts through lua/prelude.lua's
 * RECORD, the service through rd_record_unpack. Both give back record.c's text byte
 * for byte (the numbers are copied as they were written).
 */
#ifndef RD_RECPACK_H
#define RD_RECPACK_H

#include <stddef.h>

/* A buffer for a packed record: a longer one is kept as JSON. */
#define RD_RECORD_PACKED_MAX 256

/* The packed form of `json` into buf[0..cap) (returned) when `json` is exactly
 * record_build's confirmed record of order `id` of the SKU named by sku[0..sku_len)
 * (no salt), so that rd_record_unpack gives it back; else NULL (store the JSON). */
char *rd_record_pack(const char *json, const char *id, const char *sku, size_t sku_len,
                     char *buf, size_t cap);

/* `record` as stored for order `id` of the SKU keyed `placed` ("sku" or "sku/salt"):
 * packed when it can be, else `record` itself. buf: cap bytes of the caller's. */
const char *rd_record_stored(const char *record, const char *id, const char *placed,
                             char *buf, size_t cap);

/* The JSON of a stored record: a copy of `stored` when it is not packed, else the
 * record rd_record_pack packed for `id` of `sku` (a name, or "sku/salt": cut at '/').
 * malloc'd; NULL when `stored` is packed but malformed. */
char *rd_record_unpack(const char *stored, const char *id, const char *sku);

#endif
