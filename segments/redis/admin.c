/* admin.c -- Redis's blocking admin operations: segments/admin.h over calls.h. */
#include "segments/redis/admin.h"

#include <string.h>

#include "base/xalloc.h"
#include "segments/redis/holds.h"

_Static_assert(ADMIN_CONFLICT == RD_CONFLICT && ADMIN_LIMIT == RD_LIMIT &&
                   ADMIN_REPLAYED == RD_REPLAYED &&
                   ADMIN_NOT_REPLICATED == RD_NOT_REPLICATED &&
                   ADMIN_MISMATCH == RD_MISMATCH,
               "admin codes are the scripts' codes");

struct rd_admin {
    struct admin base; /* first */
    rd_conn *c;
};

static rd_conn *conn(const admin *a)
{
    return ((const struct rd_admin *)a)->c;
}

static unsigned caps(admin *a)
{
    return ADMIN_CAP_BATCH |
           (rd_conn_cluster(conn(a)) ? ADMIN_CAP_CLUSTER : ADMIN_CAP_LOCKS);
}

static void admin_free(admin *a)
{
    if (a == NULL)
        return;
    rd_conn_free(conn(a));
    free(a);
}

static const char *error(const admin *a)
{
    return rd_conn_error(conn(a));
}

static int ping(admin *a)
{
    return rd_ping(conn(a));
}

/* The settings as the seam takes them. */
static void meta_of(const struct rd_meta *r, struct store_meta *m)
{
    *m = (struct store_meta){
        .segments = r->segments,
        .hold_ms = r->hold_ms,
        .batch = r->batch,
        .initial = r->initial,
        .epoch = r->epoch,
        .gen = r->gen,
        .rebalance = r->rebalance,
        .replicated = r->replicated,
        .salt = r->salt,
        .adjust_until = r->adjust_until,
    };
    memcpy(m->mode, r->mode, sizeof m->mode);
    memcpy(m->lock, r->lock, sizeof m->lock);
    m->unfenced = r->unfenced;
}

static int meta_read(admin *a, const char *sku, struct store_meta *m, char lock[16])
{
    struct rd_meta r;
    int found = rd_meta_read(conn(a), sku, &r);
    if (found == 1) {
        meta_of(&r, m);
        snprintf(lock, 16, "%s", r.lock[0] != '\0' ? r.lock : "redis");
    }
    return found;
}

static int record_read(admin *a, const char *id, char **record)
{
    return rd_record_read(conn(a), id, record);
}

static int segments_read(admin *a, const char *sku, const char *placed, int n,
                         long long epoch, long long *stock, long long *sold,
                         long long *orders, bool *locked, long long *reserved,
                         struct store_meta *meta)
{
    struct rd_meta r;
    int rc = rd_segments_view(conn(a), sku, placed, n, epoch, stock, sold, orders, locked,
                              reserved, meta != NULL ? &r : NULL);
    if (rc == 1)
        meta_of(&r, meta);
    return rc;
}

static int segment_place(admin *a, const char *placed, int i, int *slot, char *node,
                         size_t len)
{
    return rd_segment_place(conn(a), placed, i, slot, node, len);
}

static int skus_list(admin *a, char ***names, size_t *n)
{
    return rd_skus_list(conn(a), names, n);
}

static int wait_replicas(admin *a, const char *placed, int n, const int *seg,
                         const char *id, const char *sku, int timeout_ms)
{
    return rd_wait(conn(a), placed, n, seg, id, sku, timeout_ms);
}

/* the lock beside the stock, or a lock service's (skumode.h sku_lock) */
static const char *const locks[] = {"redis", "redlock", "memcached", "zookeeper", NULL};

const char *const *rd_admin_locks(void)
{
    return locks;
}

static int hold_by_id(admin *a, const char *id, enum store_hold_action act,
                      const char *attempt, struct store_reply *out, struct store_hold *h)
{
    if (rd_conn_cluster(conn(a)))
        return rd_hold_slot_by_id_sync(conn(a), id, act, attempt, out, h);
    return rd_hold_by_id(conn(a), id, act, attempt, out, h);
}

static int holds_sweep(admin *a, int limit, int *settled)
{
    if (rd_conn_cluster(conn(a)))
        return rd_holds_sweep_slots(conn(a), limit, settled);
    return rd_holds_sweep(conn(a), limit, settled);
}

static const struct admin_ops redis_admin_ops = {
    .name = "redis",
    .caps = caps,
    .free = admin_free,
    .error = error,
    .locks = locks,
    .ping = ping,
    .meta_read = meta_read,
    .record_read = record_read,
    .segments_read = segments_read,
    .segment_place = segment_place,
    .skus_list = skus_list,
    .wait = wait_replicas,
    .hold_by_id = hold_by_id,
    .holds_sweep = holds_sweep,
};

admin *rd_admin_create(const struct rd_target *to, _Atomic long long *errors)
{
    struct rd_admin *a = seg_calloc(1, sizeof *a);
    a->base.ops = &redis_admin_ops;
    a->c = rd_conn_create(to, errors);
    return &a->base;
}

rd_conn *rd_admin_conn(admin *a)
{
    return conn(a);
}
