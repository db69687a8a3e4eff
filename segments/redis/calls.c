/* calls.c -- the blocking calls of the Redis seam: encode (proto.c, proto_admin.c),
 * send on the connection (store.c), decode (proto_reply.c). See calls.h. */
#include "segments/redis/calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/redis/durable.h"
#include "segments/redis/keys.h"
#include "segments/redis/proto.h"
#include "segments/redis/slots.h"
#include "segments/redis/store.h"
#include "base/xalloc.h"

const char *rd_sku_placed(char *buf, const char *sku, int salt)
{
    return seg_key_placed(buf, sku, salt);
}

int rd_segment_place(rd_conn *c, const char *placed, int i, int *slot, char *node,
                     size_t len)
{
    char key[SEG_KEY_MAX];
    seg_key_stock(key, placed, i);
    *slot = rd_key_slot(key, strlen(key));
    node[0] = '\0';
    if (!store_cluster(c))
        return 0;
    int at = store_slot_node(c, *slot);
    if (at < 0)
        return -1;
    store_node_name(c, at, node, len);
    return 0;
}

/* ---- reads ------------------------------------------------------------------- */

int rd_ping(rd_conn *c)
{
    struct rd_cmd cmd;
    proto_ping(&cmd);
    redisReply *r = store_call(c, &cmd);
    if (r == NULL)
        return -1;
    freeReplyObject(r);
    return 0;
}

int rd_meta_read(rd_conn *c, const char *sku, struct rd_meta *out)
{
    struct rd_cmd cmd;
    proto_meta_read(&cmd, sku);
    redisReply *r = store_call(c, &cmd);
    int found = 0;
    int rc = r != NULL ? proto_meta(r, out, &found) : -1;
    if (r != NULL)
        freeReplyObject(r);
    return rc < 0 ? -1 : found;
}

int rd_record_read(rd_conn *c, const char *id, char **record)
{
    struct rd_cmd cmd;
    char owner[SEG_NAME_MAX + 1];
    long long epoch;
    proto_record_read(&cmd, id);
    redisReply *r = store_call(c, &cmd);
    int rc = r != NULL ? proto_record(r, record, owner, &epoch) : -1;
    if (r != NULL)
        freeReplyObject(r);
    if (rc < 0 || *record == NULL || owner[0] == '\0')
        return rc < 0 ? -1 : *record != NULL;
    /* Its SKU's epoch says whether a reset has left it behind since. */
    struct rd_meta meta;
    int found = rd_meta_read(c, owner, &meta);
    if (found == 1 && !proto_record_dead(owner, epoch, owner, meta.epoch))
        return 1;
    free(*record);
    *record = NULL;
    return found < 0 ? -1 : 0;
}

int rd_segments_read(rd_conn *c, const char *sku, int n, long long *stock,
                     long long *sold, long long *orders, bool *locked)
{
    bool full = sold != NULL; /* also sold, orders and the lock */
    int per = full ? 4 : 1;
    struct rd_cmd *cmds = seg_calloc((size_t)(per * n), sizeof *cmds);
    for (int i = 0; i < n; i++)
        proto_segment_reads(&cmds[per * i], sku, i, full);
    redisReply **r = seg_malloc(sizeof *r * (size_t)(per * n));
    int rc = store_pipeline(c, per * n, cmds, r);
    for (int i = 0; i < per * n; i++)
        cmd_free(&cmds[i]);
    free(cmds);
    if (rc != 0) {
        free(r);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        stock[i] = proto_integer(r[per * i], 0);
        if (full) {
            sold[i] = proto_integer(r[4 * i + 1], 0);
            orders[i] = proto_integer(r[4 * i + 2], 0);
            locked[i] = proto_integer(r[4 * i + 3], 0) > 0;
        }
    }
    for (int i = 0; i < per * n; i++)
        freeReplyObject(r[i]);
    free(r);
    return 0;
}

/* A VIEW reply of segments from..from+count-1 into the arrays (its meta, when asked,
 * into *meta: *found 1 read, 0 no such SKU): 0, or -1 when it is not one. */
static int view_decode(const redisReply *r, int from, int count, long long *stock,
                       long long *sold, long long *orders, bool *locked,
                       long long *reserved, struct rd_meta *meta, int *found)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 + 5 * (size_t)count ||
        proto_integer(r->element[0], -1) != RD_OK ||
        (meta != NULL && proto_meta(r->element[1], meta, found) != 0))
        return -1;
    for (int k = 0; k < count; k++) {
        redisReply *const *e = &r->element[2 + 5 * k];
        stock[from + k] = proto_integer(e[0], 0);
        sold[from + k] = proto_integer(e[1], 0);
        orders[from + k] = proto_integer(e[2], 0);
        locked[from + k] = proto_integer(e[3], 0) > 0;
        reserved[from + k] = proto_integer(e[4], 0);
    }
    return 0;
}

int rd_segments_view(rd_conn *c, const char *sku, const char *placed, int n,
                     long long epoch, long long *stock, long long *sold,
                     long long *orders, bool *locked, long long *reserved,
                     struct rd_meta *meta)
{
    /* Standalone: every segment (and the meta) in one script; a cluster: one script
     * per segment, without the meta (another slot). */
    bool cluster = store_cluster(c);
    int step = cluster ? 1 : n;
    struct rd_meta *m = cluster || sku == NULL ? NULL : meta;
    int found = 0;
    for (int from = 0; from < n; from += step) {
        struct rd_cmd cmd;
        proto_segments_view(&cmd, m != NULL ? sku : NULL, placed, from, from + step,
                            epoch);
        redisReply *r = store_call(c, &cmd);
        int rc = r != NULL ? view_decode(r, from, step, stock, sold, orders, locked,
                                         reserved, m, &found)
                           : -1;
        if (r != NULL)
            freeReplyObject(r);
        if (rc != 0)
            return -1;
    }
    return m == NULL ? 0 : found ? 1 : 2;
}

int rd_skus_list(rd_conn *c, char ***names, size_t *n)
{
    struct rd_cmd cmd;
    proto_skus_list(&cmd);
    redisReply *r = store_call(c, &cmd);
    if (r == NULL)
        return -1;
    char **out = seg_malloc(sizeof *out * (r->elements + 1));
    size_t k = 0;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
        if (r->element[i]->type == REDIS_REPLY_STRING)
            out[k++] = seg_strdup(r->element[i]->str);
    freeReplyObject(r);
    *names = out;
    *n = k;
    return 0;
}

/* ---- one segment's lock -------------------------------------------------------- */

int rd_acquire(rd_conn *c, const char *sku, long long epoch, int i, const char *id,
               long long qty, const char *token, int ttl_ms, struct rd_reply *out)
{
    struct rd_cmd cmd;
    proto_acquire(&cmd, sku, epoch, i, id, qty, token, ttl_ms, 0);
    return store_script(c, &cmd, out);
}

int rd_deduct(rd_conn *c, const char *sku, long long epoch, int i, const char *token,
              const char *attempt, const char *id, long long qty, const char *record,
              struct rd_reply *out)
{
    struct rd_cmd cmd;
    proto_deduct(&cmd, sku, epoch, i, token, attempt, id, qty, record, false, 0);
    return store_script(c, &cmd, out);
}

int rd_lock(rd_conn *c, const char *sku, int i, const char *token, int ttl_ms)
{
    struct rd_cmd cmd;
    proto_lock(&cmd, sku, i, token, ttl_ms);
    redisReply *r = store_call(c, &cmd);
    int taken = 0;
    int rc = r != NULL ? proto_taken(r, token, &taken) : -1;
    if (r != NULL)
        freeReplyObject(r);
    return rc < 0 ? -1 : taken;
}

/* RELEASE or RENEW: 1 done, 0 not ours, -1. */
static int compare_and(rd_conn *c, struct rd_cmd *cmd)
{
    redisReply *r = store_call(c, cmd);
    int done = 0;
    int rc = r != NULL ? proto_done(r, &done) : -1;
    if (r != NULL)
        freeReplyObject(r);
    return rc < 0 ? -1 : done;
}

int rd_release(rd_conn *c, const char *sku, int i, const char *token)
{
    struct rd_cmd cmd;
    proto_release(&cmd, sku, i, token);
    return compare_and(c, &cmd);
}

int rd_renew(rd_conn *c, const char *sku, int i, const char *token, int ttl_ms)
{
    struct rd_cmd cmd;
    proto_renew(&cmd, sku, i, token, ttl_ms);
    return compare_and(c, &cmd);
}

/* ---- durability ---------------------------------------------------------------- */

/* ---- the whole SKU ------------------------------------------------------------- */

/* Records dropped per DROP_RECORDS call: a reset of a SKU with a million orders
 * deletes their records in bounded steps, not in one command. */
#define DROP_BATCH 512

/* Delete the records of ids[0..n-1] that the reset of `sku` out of `epoch` left
 * behind. Best effort: one that stays is dead anyway (keys.h); a failure is logged. */
static void drop_records(rd_conn *c, const char *sku, long long epoch, char *const *ids,
                         size_t n)
{
    size_t batch = store_cluster(c) ? 1 : DROP_BATCH; /* a cluster: each its own slot */
    for (size_t i = 0; i < n; i += batch) {
        struct rd_cmd cmd;
        proto_drop_records(&cmd, sku, epoch, ids + i, n - i < batch ? n - i : batch);
        redisReply *r = store_call(c, &cmd);
        if (r == NULL) {
            char detail[160];
            snprintf(detail, sizeof detail, "%s: %zu records left (dead): %s", sku, n - i,
                     rd_conn_error(c));
            rd_log(true, "drop records", detail);
            return;
        }
        freeReplyObject(r);
    }
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* After a reset of `sku` out of `epoch`: the graveyards its segments 0..m-1 of
 * `placed` left (keys.h inv:{sku:i}:gone:E:*) read a page at a time, the records they
 * name dropped, then the graveyards themselves (UNLINK). Each step is one short
 * command, so a sale of millions of orders never holds Redis up for long. Best effort,
 * as drop_records: a failure leaves dead records and a graveyard, and is logged. */
static void drop_graves(rd_conn *c, const char *sku, const char *placed, long long epoch,
                        int m)
{
    for (int i = 0; i < m; i++) {
        for (int hash = 1; hash >= 0; hash--) {
            char key[SEG_KEY_MAX], cursor[32] = "0";
            seg_key_gone(key, placed, i, epoch, hash ? "orders" : "cancelled");
            do {
                struct rd_cmd cmd;
                proto_scan(&cmd, key, hash, cursor, DROP_BATCH);
                redisReply *r = store_call(c, &cmd);
                char **ids = NULL;
                size_t n = 0;
                int rc = r != NULL
                             ? proto_scan_page(r, hash, cursor, sizeof cursor, &ids, &n)
                             : -1;
                if (r != NULL)
                    freeReplyObject(r);
                if (rc != 0) {
                    char detail[200];
                    snprintf(detail, sizeof detail, "%s: %s left: %s", sku, key,
                             rd_conn_error(c));
                    rd_log(true, "drop records", detail);
                    return;
                }
                drop_records(c, sku, epoch, ids, n);
                free_names(ids, n);
            } while (strcmp(cursor, "0") != 0);
            struct rd_cmd cmd;
            cmd_plain(&cmd, "UNLINK");
            cmd_key(&cmd, key);
            redisReply *r = store_call(c, &cmd);
            if (r != NULL)
                freeReplyObject(r);
        }
    }
}

/* Salts tried for an even placement. With 20 segments over 3 masters about one in
 * nine is even; with 1024, about one in a thousand. */
#define PLACE_TRIES 20000

/* The placement salt for a new SKU of n segments on a cluster: the first (0 = no
 * salt, then 1, 2, ...) that spreads its segments over the masters with most minus
 * fewest <= 1, or the most even one seen in PLACE_TRIES. Deterministic for one map,
 * so a retried create picks the same. */
static int placement(rd_conn *c, const char *sku, int n)
{
    int nodes = 0;
    char key[SEG_KEY_MAX], placed[RD_SKU_PLACED_MAX];
    seg_key_stock(key, sku, 0);
    if (store_slot_node(c, rd_key_slot(key, strlen(key))) < 0)
        return 0; /* no map: the plain tags */
    /* The masters: the nodes that serve some slot. */
    nodes = store_nodes(c);
    bool *master = seg_calloc((size_t)nodes + 1, sizeof *master);
    for (int s = 0; s < RD_SLOTS; s++) {
        int at = store_slot_node(c, s);
        if (at >= 0 && at < nodes)
            master[at] = true;
    }
    int *count = seg_calloc((size_t)nodes + 1, sizeof *count);
    int best = 0, best_spread = n + 1;
    for (int salt = 0; salt < PLACE_TRIES && best_spread > 1; salt++) {
        memset(count, 0, sizeof *count * (size_t)nodes);
        rd_sku_placed(placed, sku, salt);
        for (int i = 0; i < n; i++) {
            seg_key_stock(key, placed, i);
            int at = store_slot_node(c, rd_key_slot(key, strlen(key)));
            if (at >= 0 && at < nodes)
                count[at]++;
        }
        int most = 0, fewest = n + 1;
        for (int k = 0; k < nodes; k++) {
            if (!master[k])
                continue;
            most = count[k] > most ? count[k] : most;
            fewest = count[k] < fewest ? count[k] : fewest;
        }
        if (most - fewest < best_spread) {
            best_spread = most - fewest;
            best = salt;
        }
    }
    free(count);
    free(master);
    return best;
}

/* How long a cluster reset may take before another may take it over (its process
 * is taken for dead). */
#define RESET_LEASE_MS 15000
/* Room for the epochs of the dead resets a reset takes over (reset_begin.lua keeps
 * at most 32, each at most 16 digits). */
#define RESET_DEAD_MAX 600

/* A cluster reset in `epoch` that stops part way gives up its lease, or its mark when
 * `untouched` (best effort: unanswered, the lease runs out as a dead one's) and
 * answers `code`. */
static int reset_stop(rd_conn *c, const char *sku, long long epoch, bool untouched,
                      int code)
{
    struct rd_cmd cmd;
    proto_reset_yield(&cmd, sku, epoch, untouched);
    store_step(c, &cmd, 0, NULL);
    return code;
}

/* After a cluster reset's commit: the meta's and the SKU set's nodes have a replica
 * (wait_ms 0: at once). RD_OK, RD_NOT_REPLICATED, or -1. */
static int commit_replicated(rd_conn *c, const char *sku, int wait_ms)
{
    if (wait_ms <= 0)
        return RD_OK;
    struct rd_cmd cmds[2];
    proto_wait_meta(&cmds[0], sku, wait_ms);
    proto_wait_skus(&cmds[1], wait_ms);
    return durable_code(durable_wait_nodes(c, cmds, 2));
}

/* RESET on a cluster, where a SKU's keys span slots: BEGIN marks the reset pending in
 * the meta (or takes over a dead one), each segment is reset on its own (old, dead
 * and new segments alike), COMMIT writes the new meta, then the SKU set, and the
 * records the segments' graveyards name are dropped. With to->wait_ms no step is sent
 * before the one before it is on a replica (BEGIN before any segment: a pending
 * marker lost in a failover would leave segments of an epoch no later reset knows,
 * refused STALE for good; every segment before COMMIT: a commit over lost segments
 * left the SKU short, `it_cluster_failover` test_replicated_reset_across_failover);
 * one that is not stops the reset (RD_NOT_REPLICATED) as one that died there, its
 * lease given up. A reset that dies half way leaves the old meta (orders on the
 * segments it reached answer STALE) until another reset takes it over. The code, or
 * -1 when Redis gave no usable answer; *created (OK, REPLAYED) as rd_reset's value. */
static int reset_cluster(rd_conn *c, const char *sku, long long old_epoch,
                         int old_segments, const struct rd_reset *to, const char *rid,
                         const char *sig, long long *created)
{
    struct rd_cmd cmd;
    redisReply *r = NULL;
    char placed[RD_SKU_PLACED_MAX];
    rd_sku_placed(placed, sku, to->salt);
    if (to->ledger && to->segments > 0) { /* the sink must find the registries */
        proto_ledger_slots(&cmd, placed, to->segments);
        if ((r = store_call(c, &cmd)) == NULL)
            return -1;
        freeReplyObject(r);
        r = NULL;
    }
    proto_reset_begin(&cmd, sku, old_epoch, old_segments, to->epoch, to->segments,
                      RESET_LEASE_MS, to->expect, rid, sig, to->retake);
    int code = store_step(c, &cmd, 1u << RD_OK | 1u << RD_REPLAYED, &r);
    if (code == RD_REPLAYED) { /* committed before: answered once it holds */
        *created = r->elements > 1 ? proto_integer(r->element[1], 0) : 0;
        freeReplyObject(r);
        int got = rd_wait_step(c, to->wait_ms, placed, 0, NULL, sku);
        return got == RD_OK ? RD_REPLAYED : got;
    }
    if (code != RD_OK)
        return code;
    /* The epochs of the dead resets this one takes over ("0": none), each of which
     * may have reached some segments. */
    char dead[RESET_DEAD_MAX] = "0";
    if (r->elements > 2 && r->element[1]->type == REDIS_REPLY_STRING &&
        r->element[1]->len < sizeof dead)
        memcpy(dead, r->element[1]->str, r->element[1]->len + 1);
    int dead_n = r->elements > 2 ? (int)proto_integer(r->element[2], 0) : 0;
    freeReplyObject(r);
    if ((code = rd_wait_step(c, to->wait_ms, placed, 0, NULL, sku)) != RD_OK)
        return reset_stop(c, sku, to->epoch, strcmp(dead, "0") == 0, code);
    int n = to->segments, m = old_segments > n ? old_segments : n;
    if (dead_n > m && dead_n <= SEG_MAX_SEGMENTS)
        m = dead_n;
    for (int i = 0; i < m; i++) {
        long long share = n ? to->stock / n + (i < to->stock % n) : 0;
        proto_reset_segment(&cmd, placed, i, old_epoch, dead, to->epoch,
                            i < n ? share : -1, to->ledger, to->replicated);
        if ((code = store_step(c, &cmd, 1u << RD_OK, &r)) != RD_OK)
            return code;
        freeReplyObject(r);
    }
    if ((code = rd_wait_step(c, to->wait_ms, placed, m, NULL, NULL)) != RD_OK)
        return reset_stop(c, sku, to->epoch, false, code);
    proto_reset_commit(&cmd, sku, to, rid, sig);
    if ((code = store_step(c, &cmd, 1u << RD_OK, &r)) != RD_OK)
        return code;
    *created = r->elements > 1 ? proto_integer(r->element[1], 0) : 0;
    freeReplyObject(r);
    proto_skus_change(&cmd, sku, n > 0);
    if ((r = store_call(c, &cmd)) == NULL)
        return -1;
    freeReplyObject(r);
    code = commit_replicated(c, sku, to->wait_ms);
    drop_graves(c, sku, placed, old_epoch, m); /* also what a dead reset left there */
    return code;
}

int rd_reset(rd_conn *c, const char *sku, long long old_epoch, int old_segments,
             const struct rd_reset *to, const char *rid, const char *sig,
             struct rd_reply *out)
{
    memset(out, 0, sizeof *out);
    if (store_cluster(c)) {
        struct rd_reset placed = *to;
        if (placed.salt < 0) /* a new SKU: spread its segments over the masters */
            placed.salt = placement(c, sku, to->segments);
        long long created = 0;
        int code =
            reset_cluster(c, sku, old_epoch, old_segments, &placed, rid, sig, &created);
        out->code = code < 0 ? 0 : code;
        out->value = created;
        return code < 0 ? -1 : 0;
    }
    struct rd_cmd cmd;
    proto_reset(&cmd, sku, old_epoch, old_segments, to, rid, sig);
    int rc = store_script(c, &cmd, out);
    if (rc == 0 && out->code == RD_OK)
        drop_graves(c, sku, sku, old_epoch, old_segments);
    return rc;
}
