/* durable.c -- WAIT for replicas on the nodes a change wrote (contract: durable.h and,
 * for rd_wait and rd_wait_step, calls.h). */
#include "segments/redis/durable.h"

#include <stdbool.h>
#include <stdlib.h>

#include "segments/redis/proto.h"
#include "segments/redis/slots.h"
#include "segments/redis/store.h"
#include "base/xalloc.h"

int durable_wait_nodes(rd_conn *c, struct rd_cmd *cmds, int n)
{
    int least = -1, nodes = 0, rc = 0;
    int *waited = seg_malloc(sizeof *waited * (size_t)(n + 1));
    for (int k = 0; k < n; k++) {
        /* One connection per node: its WAIT covers every write made on it. */
        char name[RD_HOST_MAX + 8];
        int node =
            store_cluster(c) ? store_slot_node(c, cmds[k].slot, name, sizeof name) : 0;
        bool seen = false;
        for (int j = 0; j < nodes && node >= 0; j++)
            seen |= waited[j] == node;
        if (seen || rc < 0) {
            cmd_free(&cmds[k]);
            continue;
        }
        redisReply *r = store_call(c, &cmds[k]);
        long long got = r != NULL && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
        if (r != NULL)
            freeReplyObject(r);
        if (got < 0) {
            rc = -1;
            continue;
        }
        least = least < 0 || got < least ? (int)got : least;
        if (node >= 0)
            waited[nodes++] = node;
    }
    free(waited);
    return rc < 0 ? -1 : least < 0 ? 0 : least;
}

int rd_wait(rd_conn *c, const char *placed, int n, const int *seg, const char *id,
            const char *sku, int timeout_ms)
{
    struct rd_cmd *cmds = seg_malloc(sizeof *cmds * (size_t)(n + 2));
    int k = 0;
    for (int i = 0; i < n; i++)
        proto_wait_segment(&cmds[k++], placed, seg != NULL ? seg[i] : i, timeout_ms);
    if (id != NULL)
        proto_wait_record(&cmds[k++], id, timeout_ms);
    if (sku != NULL)
        proto_wait_meta(&cmds[k++], sku, timeout_ms);
    int got = durable_wait_nodes(c, cmds, k);
    free(cmds);
    return got;
}

int durable_code(int got)
{
    return got < 0 ? -1 : got < 1 ? RD_NOT_REPLICATED : RD_OK;
}

int rd_wait_step(rd_conn *c, int wait_ms, const char *placed, int n, const int *seg,
                 const char *sku)
{
    if (wait_ms <= 0)
        return RD_OK;
    return durable_code(rd_wait(c, placed, n, seg, NULL, sku, wait_ms));
}
