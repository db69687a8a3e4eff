/* calls.c -- the blocking calls of the Redis seam: encode (proto.c, proto_admin.c),
 * send on the blocking connection (store.c, over async.h), decode (proto_reply.c). See
 * calls.h. */
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
    return store_slot_node(c, *slot, node, len) < 0 ? -1 : 0;
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
    int rc = r != NULL ? proto_record(r, id, record, owner, &epoch) : -1;
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
