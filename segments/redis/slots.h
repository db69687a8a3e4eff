/* slots.h -- Redis Cluster routing pieces: key slots, redirect errors, the slot map.
 *
 * The pieces of cluster routing that async_conn.c and smap.c share (a standalone Redis
 * never needs them):
 *
 *   Key slots.  A key belongs to slot CRC16(key) mod 16384 (CRC16-CCITT, XMODEM, as
 *   the cluster spec has it). When the key holds a '{' followed later by a '}' with
 *   at least one byte between them, only the bytes between the first '{' and the
 *   first '}' after it are hashed (the hash tag): "inv:{tv:3}:stock" and
 *   "inv:{tv:3}:lock" share a slot (keys.h puts every key of one segment under one
 *   tag). An empty tag "{}" hashes the whole key.
 *
 *   Names for a slot.  A fresh order id can be made to hash to a chosen slot by
 *   rewriting its last few characters (rd_name_for_slot).
 *
 *   Redirects.  An error reply naming another node (MOVED: the slot lives there now;
 *   ASK: this one command goes there, after ASKING) parses into a struct rd_redirect;
 *   TRYAGAIN, CLUSTERDOWN and READONLY are recognised by their first word.
 *
 *   The slot map.  For each of the 16384 slots, the index of the master serving it
 *   (or -1), and the masters with their replicas, read from CLUSTER SHARDS (Redis
 *   7.0) or, where that is unknown, CLUSTER SLOTS. rd_slot_map_fetch asks one seed
 *   node over a blocking connection.
 *
 * Hosts are as the cluster announces them: an IPv4 or IPv6 address (IPv6 without
 * brackets: "::1", which hiredis connects to as it is) or a hostname. Two spellings
 * carry no address: "" (cluster-preferred-endpoint-type unknown-endpoint: the node is
 * reached at the host the command was sent to) and "?" (hostname type, but the node
 * announced none: refresh the map, whose entries fall back to the node's IP). The map
 * parsers replace both with the node's IP when the reply gives it, else with the
 * host of the node that answered (`same_host`).
 *
 * Errors. Parsers never crash on a malformed input: they answer -1 and leave their
 * output empty (`err`, when given, says what was wrong). rd_slot_map_fetch answers -1
 * with the reason in `err` when the seed could not be reached or did not answer a
 * map. Maps own their arrays: rd_slot_map_clear frees them.
 */
#ifndef SEG_REDIS_SLOTS_H
#define SEG_REDIS_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "segments/redis/calls.h"

#define RD_SLOTS 16384
#define RD_HOST_MAX 256   /* a host with its NUL: a hostname is at most 253 bytes */
#define RD_NODE_ID_LEN 40 /* a node id: 40 hex characters */

/* ---- key slots ------------------------------------------------------------------ */

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0, no reflection) of
 * buf[0..len): "123456789" gives 0x31C3. */
unsigned rd_slot_crc16(const char *buf, size_t len);

/* The cluster slot (0..16383) of key[0..len), hash tag applied. `key` need not be
 * NUL-terminated. */
int rd_key_slot(const char *key, size_t len);

/* The last RD_NAME_SUFFIX characters of name[0..len) (len >= RD_NAME_SUFFIX) are
 * replaced by octal digits ('0'..'7') chosen so that rd_slot_crc16(name, len) lands
 * in `slot`: a fresh order id whose record then shares a segment's slot. The rest of
 * the name is left as it is, so the name keeps its randomness. */
#define RD_NAME_SUFFIX 6
void rd_name_for_slot(char *name, size_t len, int slot);

/* ---- redirect and cluster errors ------------------------------------------------ */

enum rd_redirect_kind {
    RD_REDIR_NONE,        /* not a cluster error (or a MOVED/ASK that does not parse) */
    RD_REDIR_MOVED,       /* the slot is served by host:port now: update the map */
    RD_REDIR_ASK,         /* the slot is migrating: send ASKING and this command there */
    RD_REDIR_TRYAGAIN,    /* a multi-key command during a migration: retry later */
    RD_REDIR_CLUSTERDOWN, /* the cluster (or the slot) is not served: retry later */
    RD_REDIR_READONLY     /* a write reached a replica: the map is stale */
};

struct rd_redirect {
    enum rd_redirect_kind kind;
    int slot;               /* MOVED/ASK: 0..16383; else -1 */
    char host[RD_HOST_MAX]; /* MOVED/ASK: as printed, brackets removed ("" / "?": see
                               the header comment); else "" */
    int port;               /* MOVED/ASK: 1..65535; else 0 */
};

/* Parse the error reply err[0..len) as hiredis hands it over ("MOVED 3999
 * 127.0.0.1:6381"; a leading '-' as on the wire is accepted too). Accepted endpoints:
 * "host:port", "[v6]:port" and Redis 7's unbracketed "::1:6381" (the port follows the
 * last ':'), ":port" and "?:port". Returns 0 with `out` filled (kind NONE for any
 * other error), or -1 with `out` of kind NONE when the error starts with MOVED or ASK
 * but is not one (bad slot, port or host, a control byte). Reads no byte past len. */
int rd_redirect_parse(const char *err, size_t len, struct rd_redirect *out);

/* The word of each kind, for logs: "MOVED", ..., "NONE". */
const char *rd_redirect_name(enum rd_redirect_kind kind);

/* ---- the slot map --------------------------------------------------------------- */

struct rd_node {
    char host[RD_HOST_MAX];      /* where to connect (see the header comment) */
    int port;                    /* the plain-text port */
    char id[RD_NODE_ID_LEN + 1]; /* the node id; "" when the reply did not give it */
    bool online;                 /* SHARDS: health "online" (not "failed"/"loading");
                                    SLOTS lists no failed nodes: always true */
};

struct rd_shard {
    struct rd_node master;
    int nreplicas;
    struct rd_node *replicas; /* nreplicas, malloc'd; NULL when none */
};

struct rd_slot_map {
    int nmasters;
    struct rd_shard *masters; /* nmasters, malloc'd, in the reply's order */
    int16_t slot[RD_SLOTS];   /* index into masters, or -1: no master serves it */
};

/* An empty map: no masters, every slot -1. */
void rd_slot_map_init(struct rd_slot_map *m);

/* Free what `m` holds and leave it empty. */
void rd_slot_map_clear(struct rd_slot_map *m);

/* The master serving `slot`, or NULL (unassigned, or slot out of range). Borrowed
 * from `m`. */
const struct rd_node *rd_slot_map_master(const struct rd_slot_map *m, int slot);

/* The index of the master at host:port, or -1. `host` as the map holds it: resolve a
 * redirect's "" or "?" first. */
int rd_slot_map_find(const struct rd_slot_map *m, const char *host, int port);

/* How many of the 16384 slots have a master (all of them in a healthy cluster). */
int rd_slot_map_assigned(const struct rd_slot_map *m);

/* Fill `out` from a reply (a tree of arrays as hiredis 0.14.1 reads RESP2) to CLUSTER
 * SHARDS or CLUSTER SLOTS sent to `same_host`. `out` is overwritten without being
 * freed (rd_slot_map_clear a map it held first). 0, or -1 with `out` empty and the
 * reason in err[0..errlen) (`err` may be NULL). A reply claiming one slot for two
 * masters, a slot out of range, a shard with slots but no master or with two masters,
 * or a node without a port is refused. For the seam and its tests: the rest of the
 * program sees no redisReply. */
struct redisReply;
int rd_slot_map_from_shards(const struct redisReply *r, const char *same_host,
                            struct rd_slot_map *out, char *err, size_t errlen);
int rd_slot_map_from_slots(const struct redisReply *r, const char *same_host,
                           struct rd_slot_map *out, char *err, size_t errlen);

/* Ask `seed` (TCP host:port, AUTH as configured, timeout_ms for the connect and each
 * command; 1000 when 0) for the map: CLUSTER SHARDS, and CLUSTER SLOTS when SHARDS
 * answers an error (a server before 7.0 does not know it) or a map the parser refuses
 * (a shard naming two masters). Blocking; a connection of its own, closed before
 * returning. `out` as for the parsers (empty on error). 0, or
 * -1 with the reason in err[0..errlen): unreachable, AUTH refused, NOAUTH, a seed
 * over a unix socket or with a db other than 0 (a cluster has only db 0), cluster
 * support disabled, a malformed reply. */
int rd_slot_map_fetch(const struct rd_target *seed, struct rd_slot_map *out, char *err,
                      size_t errlen);

/* rd_slot_map_fetch in two steps, for a caller that keeps its connection between
 * fetches. rd_slot_map_connect: a blocking connection to `seed` (AUTH done, timeouts
 * as for the fetch; the same refusals), or NULL with the reason in err[0..errlen)
 * (redisFree it). rd_slot_map_ask: the map over it, `host` as the seed's (a node
 * that announces no endpoint is there); 0, or -1 with the reason and `out` empty,
 * after which the connection may be unusable (free it). */
struct redisContext;
struct redisContext *rd_slot_map_connect(const struct rd_target *seed, char *err,
                                         size_t errlen);
int rd_slot_map_ask(struct redisContext *rc, const char *host, struct rd_slot_map *out,
                    char *err, size_t errlen);

/* Whether `seed` is a cluster node (INFO cluster says cluster_enabled:1): 1, 0 (also
 * for a unix socket), or -1 with the reason in err[0..errlen) when it could not be
 * asked. Blocking, on a connection of its own. */
int rd_cluster_probe(const struct rd_target *seed, char *err, size_t errlen);

/* Whether an error reply `err` (len bytes, a leading '-' allowed) is one only a
 * cluster node gives: MOVED, ASK, TRYAGAIN, CLUSTERDOWN or CROSSSLOT. A connection
 * that takes its Redis as standalone and meets one asks whether it became a cluster
 * (smap.h). */
bool rd_cluster_error(const char *err, size_t len);

#endif
