/* inventory.c -- the process-wide domain handle and per-worker connections. */
#include "segments/inventory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/internal.h"
#include "segments/memcached/mclock.h"
#include "segments/postgres/admin.h"
#include "segments/postgres/backend.h"
#include "segments/redis/admin.h"
#include "segments/redlock/redlock.h"
#include "segments/zookeeper/zklock.h"
#include "segments/redis/backend.h"
#include "segments/redis/calls.h"
#include "segments/rand.h"
#include "segments/skumode.h"
#include "segments/skutab.h"
#include "segments/sweeper.h"
#include "segments/holdsweep.h"
#include "segments/ltab.h"
#include "base/xalloc.h"

/* Which seed answers, and whether it is a cluster node (rd_pick_seed). When none
 * answers, the first seed stays and a cluster is what the options say: a standalone
 * Redis may just be late, and connections are retried anyway. */
static void pick_seed(inv *v)
{
    struct rd_target to = inv_redis_target(v);
    char host[256], why[256];
    if (rd_pick_seed(&to, v->opt.redis_seeds, host, sizeof host, why, sizeof why) != 0) {
        v->cluster = v->opt.redis_cluster;
        v->probe_failed = true;
        char detail[320];
        snprintf(detail, sizeof detail, "no seed answered at start (%s): %s", why,
                 v->cluster ? "a cluster, as configured" : "taken as standalone");
        rd_log(true, "seed", detail);
        return;
    }
    free(v->host);
    v->host = seg_strdup(host);
    v->opt.redis_host = v->host;
    v->opt.redis_port = to.port;
    v->cluster = to.cluster;
}

static const char *lock_target(const struct inv_options *opt, int lock);

bool inv_redis_cluster(const inv *v)
{
    return v->map != NULL ? rd_smap_cluster(v->map) : v->cluster;
}

const char *inv_store_name(const inv *v)
{
    return v->postgres ? "postgres" : "redis";
}

const char *const *inv_store_locks(const inv *v)
{
    return v->postgres ? pga_locks() : rd_admin_locks();
}

bool inv_store_is_postgres(const char *where)
{
    return where != NULL &&
           (strncmp(where, "postgres://", 11) == 0 ||
            strncmp(where, "postgresql://", 13) == 0 || strncmp(where, "host=", 5) == 0 ||
            strncmp(where, "dbname=", 7) == 0);
}

int inv_migrate(const char *where, int timeout_ms, int *version, char *err, size_t errlen)
{
    return pga_migrate(where, timeout_ms, version, err, errlen);
}

/* A blocking store handle (admin.h) of v's store, chosen here: connects on first use. */
static admin *admin_create(inv *v)
{
    const struct rd_target to = inv_redis_target(v);
    return v->postgres ? pga_create(v->opt.store, v->opt.redis_timeout_ms,
                                    v->opt.lock_wait_ms, v->opt.ledger)
                       : rd_admin_create(&to, &v->stats[STAT_REDIS_ERRORS]);
}

inv *inv_create(const struct inv_options *opt, char *err, size_t errlen)
{
    inv *v = seg_calloc(1, sizeof *v);
    v->opt = *opt;
    v->host = seg_strdup(opt->redis_host ? opt->redis_host : "127.0.0.1");
    v->opt.redis_host = v->host;
    v->postgres = inv_store_is_postgres(opt->store);
    if (v->postgres) {
        /* PostgreSQL: its schema now; no Redis is asked anything. */
        int version = 0;
        if (inv_migrate(opt->store, opt->redis_timeout_ms, &version, err, errlen) != 0) {
            free(v->host);
            free(v);
            return NULL;
        }
    } else if (opt->redis_sentinels != NULL && opt->redis_sentinels[0] != '\0') {
        v->sentinel = rd_sentinel_create(
            &(struct rd_sentinel_opts){
                .sentinels = opt->redis_sentinels,
                .name = opt->redis_sentinel_master,
                .password = opt->redis_sentinel_password,
                .timeout_ms = opt->redis_timeout_ms,
            },
            err, errlen);
        if (v->sentinel == NULL) {
            free(v->host);
            free(v);
            return NULL;
        }
    } else {
        pick_seed(v);
    }
    for (int i = 0; i < STAT__COUNT; i++)
        atomic_init(&v->stats[i], 0);
    if (lock_target(opt, SKU_LOCK_ZOOKEEPER) != NULL)
        zkl_library_init(); /* before any loop's thread: its handles are per loop */
    v->tab = skutab_create();
    /* The map also holds the mode, which may become a cluster later (calls.h): every
     * TCP Redis has one, and the sweeper, idle while standalone. Not a Sentinel
     * Redis: its master is no cluster, and host:port there is a sentinel's. */
    const struct rd_target seed = inv_redis_target(v);
    v->map = v->sentinel == NULL && !v->postgres ? rd_smap_create(&seed) : NULL;
    if (!v->cluster && v->probe_failed)
        rd_smap_unsure(v->map); /* asked again every 5 s until it answers */
    const struct rd_target to = inv_redis_target(v);
    if (v->map != NULL)
        v->sw = sweeper_create(v, &to, inv_store_create, err, errlen);
    if (v->map == NULL || v->sw != NULL)
        v->holds = holdsweep_create(v, admin_create(v), err, errlen);
    if ((v->map != NULL && v->sw == NULL) || v->holds == NULL) {
        inv_free(v);
        return NULL;
    }
    return v;
}

void inv_free(inv *v)
{
    if (v == NULL)
        return;
    holdsweep_free(v->holds);
    sweeper_free(v->sw);
    rd_smap_free(v->map); /* after every connection that routes by it */
    rd_sentinel_free(v->sentinel);
    skutab_free(v->tab);
    free(v->host);
    free(v);
}

inv_conn *inv_conn_create(inv *v)
{
    inv_conn *c = seg_calloc(1, sizeof *c);
    c->v = v;
    c->adm = admin_create(v);
    c->rd = v->postgres ? NULL : rd_admin_conn(c->adm);
    inv_rand_seed(c);
    return c;
}

void inv_conn_free(inv_conn *c)
{
    if (c == NULL)
        return;
    inv_conn_clear(c);
    free(c);
}

inv_status inv_ping(inv_conn *c)
{
    return ADMIN_CALL0(c->adm, ping) == 0 ? INV_OK : INV_UNAVAILABLE;
}

void inv_set_redis_logger(inv_log_fn fn)
{
    rd_set_logger(fn);
}

const char *inv_conn_error(const inv_conn *c)
{
    return c->adm->ops->error(c->adm);
}

const char *inv_status_name(inv_status s)
{
    switch (s) {
    case INV_OK:
        return "ok";
    case INV_REPLAYED:
        return "replayed";
    case INV_SOLD_OUT:
        return "sold_out";
    case INV_INSUFFICIENT:
        return "insufficient_stock";
    case INV_UNKNOWN_SKU:
        return "unknown_sku";
    case INV_NOT_FOUND:
        return "not_found";
    case INV_CONFLICT:
        return "order_id_conflict";
    case INV_BUSY:
        return "busy";
    case INV_UNAVAILABLE:
        return "backend_unavailable";
    case INV_INVALID:
        return "invalid_field";
    case INV_REQUEST_CONFLICT:
        return "request_id_conflict";
    case INV_NOT_REPLICATED:
        return "not_replicated";
    case INV_SKU_EXISTS:
        return "sku_exists";
    case INV_PRECONDITION:
        return "precondition_failed";
    }
    return "unknown";
}

struct rd_target inv_redis_target(const inv *v)
{
    return (struct rd_target){
        .host = v->opt.redis_host,
        .port = v->opt.redis_port,
        .unix_path = v->opt.redis_unix,
        .user = v->opt.redis_user,
        .password = v->opt.redis_password,
        .db = v->opt.redis_db,
        .timeout_ms = v->opt.redis_timeout_ms,
        .cluster = inv_redis_cluster(v),
        .map = v->map,
        .sentinel = v->sentinel,
    };
}

/* v's store on `base`; PostgreSQL: with `pool` connections for transactions (-1: one
 * connection for everything, a worker's). */
static store *store_make(inv *v, struct event_base *base, int pool)
{
    if (v->postgres) {
        const struct pgb_opts o = {
            .conninfo = v->opt.store,
            .lock_ttl_ms = v->opt.lock_ttl_ms,
            .timeout_ms = v->opt.redis_timeout_ms,
            .pool = pool,
            .no_prepare = v->opt.pg_no_prepare,
            .shared = pool < 0,
            .ledger = v->opt.ledger,
        };
        return pgb_store_create(base, &o);
    }
    const struct rd_target to = inv_redis_target(v);
    const struct rda_counters counts = {&v->stats[STAT_REDIS_ERRORS],
                                        &v->stats[STAT_REDIS_COMMANDS],
                                        &v->stats[STAT_REDIS_WRITES]};
    return rd_store_create(base, &to, &counts);
}

store *inv_store_create(inv *v, struct event_base *base)
{
    return store_make(v, base, v->opt.pg_pool);
}

store *inv_conn_store(inv_conn *c)
{
    if (c->st == NULL) {
        c->base = event_base_new();
        if (c->base == NULL) {
            fputs("inventoryd: event_base_new failed\n", stderr);
            abort();
        }
        c->st = store_make(c->v, c->base, -1); /* one operation at a time: one conn */
    }
    if (store_mode_behind(c->st)) /* nothing under way between blocking calls */
        c->st->ops->mode_follow(c->st);
    return c->st;
}

void inv_conn_wait(inv_conn *c, const bool *done)
{
    while (!*done)
        event_base_loop(c->base, EVLOOP_ONCE);
}

/* The target of lock service `lock` in `opt`, NULL when none is configured. */
static const char *lock_target(const struct inv_options *opt, int lock)
{
    const char *t = lock == SKU_LOCK_REDLOCK     ? opt->redlock
                    : lock == SKU_LOCK_MEMCACHED ? opt->memcached
                    : lock == SKU_LOCK_ZOOKEEPER ? opt->zookeeper
                                                 : NULL;
    return t != NULL && t[0] != '\0' ? t : NULL;
}

unsigned inv_lock_services(const struct inv_options *opt)
{
    unsigned out = 1u << SKU_LOCK_STORE;
    for (int l = 0; l < SKU_LOCK__COUNT; l++)
        if (lock_target(opt, l) != NULL)
            out |= 1u << l;
    return out;
}

void *inv_lock_create(inv *v, struct event_base *base, int lock,
                      const struct lks_ops **ops)
{
    *ops = NULL;
    const char *target = lock_target(&v->opt, lock);
    const struct lks_ops *o = lock == SKU_LOCK_REDLOCK     ? &lks_redlock_ops
                              : lock == SKU_LOCK_MEMCACHED ? &lks_memcached_ops
                              : lock == SKU_LOCK_ZOOKEEPER ? &zkl_ops
                                                           : NULL;
    if (target == NULL || o == NULL)
        return NULL;
    char err[256] = "";
    void *svc = o->create(base, target, err, sizeof err);
    if (svc == NULL) {
        rd_log(true, o->name, err);
        return NULL;
    }
    *ops = o;
    return svc;
}
