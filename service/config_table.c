/* config_table.c -- the settings table (every key, variable and flag) and the defaults.
 */
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "base/names.h"
#include "service/config_internal.h"

/* clang-format off */
#define INT_SETTING(k, e, f, field, lo, hi) \
    {k, e, f, K_INT, offsetof(struct cfg, field), 0, lo, hi, NULL}
#define STR_SETTING(k, e, f, kind, field) \
    {k, e, f, kind, offsetof(struct cfg, field), sizeof(((struct cfg *)0)->field), 0, 0, NULL}
#define ENUM_SETTING(k, e, f, field, names) \
    {k, e, f, K_ENUM, offsetof(struct cfg, field), 0, 0, 0, names}
#define BOOL_SETTING(k, e, f, field) \
    {k, e, f, K_BOOL, offsetof(struct cfg, field), 0, 0, 0, NULL}
/* clang-format on */

/* K_ENUM fields are stored through an int. */
_Static_assert(sizeof(enum log_level) == sizeof(int), "enum log_level is not an int");
_Static_assert(sizeof(enum log_format) == sizeof(int), "enum log_format is not an int");
_Static_assert(sizeof(enum cfg_durability) == sizeof(int),
               "enum cfg_durability is not an int");
static const char *const level_names[] = {
    [LOG_DEBUG] = "debug", [LOG_INFO] = "info",    [LOG_WARN] = "warn",
    [LOG_ERROR] = "error", [LOG_ERROR + 1] = NULL,
};
static const char *const format_names[] = {
    [LOG_TEXT] = "text",
    [LOG_JSON] = "json",
    [LOG_JSON + 1] = NULL,
};
static const char *const onoff_names[] = {"off", "on", NULL};
static const char *const durability_names[] = {
    [CFG_DURABILITY_ASYNC] = "async",
    [CFG_DURABILITY_REPLICATED] = "replicated",
    [CFG_DURABILITY_REPLICATED + 1] = NULL,
};

const struct cfg_setting cfg_table[] = {
    INT_SETTING("port", "INVENTORY_PORT", "--port", port, 1, 65535),
    STR_SETTING("bind", "INVENTORY_BIND", "--bind", K_BIND, bind),
    STR_SETTING("store", "INVENTORY_STORE", "--store", K_DSN, store),
    STR_SETTING("store_password_file", "INVENTORY_STORE_PASSWORD_FILE",
                "--store-password-file", K_STR, store_password_file),
    INT_SETTING("pg_pool", "INVENTORY_PG_POOL", "--pg-pool", pg_pool, 1, 64),
    ENUM_SETTING("pg_prepare", "INVENTORY_PG_PREPARE", "--pg-prepare", pg_prepare,
                 onoff_names),
    STR_SETTING("redis", "INVENTORY_REDIS", "--redis", K_REDIS, redis_host),
    STR_SETTING("redis_user", "INVENTORY_REDIS_USER", NULL, K_STR, redis_user),
    STR_SETTING("redis_password", "INVENTORY_REDIS_PASSWORD", NULL, K_TOKEN,
                redis_password),
    STR_SETTING("redis_password_file", "INVENTORY_REDIS_PASSWORD_FILE",
                "--redis-password-file", K_STR, redis_password_file),
    BOOL_SETTING("redis_cluster", "INVENTORY_REDIS_CLUSTER", "--redis-cluster",
                 redis_cluster),
    STR_SETTING("redis_sentinel_password", "INVENTORY_REDIS_SENTINEL_PASSWORD", NULL,
                K_TOKEN, redis_sentinel_password),
    INT_SETTING("threads", "INVENTORY_THREADS", "--threads", threads, 1, 1024),
    INT_SETTING("lock_ttl_ms", "INVENTORY_LOCK_TTL_MS", "--lock-ttl-ms", lock_ttl_ms, 100,
                600000),
    INT_SETTING("lock_wait_ms", "INVENTORY_LOCK_WAIT_MS", "--lock-wait-ms", lock_wait_ms,
                0, 600000),
    INT_SETTING("redis_timeout_ms", "INVENTORY_REDIS_TIMEOUT_MS", "--redis-timeout-ms",
                redis_timeout_ms, 10, 600000),
    INT_SETTING("meta_cache_ms", NULL, NULL, meta_cache_ms, 0, 60000),
    ENUM_SETTING("durability", "INVENTORY_DURABILITY", "--durability", durability,
                 durability_names),
    STR_SETTING("ledger", "INVENTORY_LEDGER", "--ledger", K_DSN, ledger),
    INT_SETTING("record_retention_s", "INVENTORY_RECORD_RETENTION_S",
                "--record-retention-s", record_retention_s, 1, 315360000),
    STR_SETTING("admin_token", "INVENTORY_ADMIN_TOKEN", "--admin-token", K_TOKEN,
                admin_token),
    STR_SETTING("metrics_token", "INVENTORY_METRICS_TOKEN", "--metrics-token", K_TOKEN,
                metrics_token),
    INT_SETTING("max_connections", NULL, NULL, max_connections, 1, 1000000),
    INT_SETTING("connection_timeout_s", NULL, NULL, connection_timeout_s, 0, 86400),
    INT_SETTING("max_body_bytes", NULL, NULL, max_body_bytes, 64, 16777216),
    INT_SETTING("metrics_segments_max", NULL, NULL, metrics_segments_max, 0,
                SEG_MAX_SEGMENTS),
    INT_SETTING("metrics_sku_limit", "INVENTORY_METRICS_SKU_LIMIT", "--metrics-sku-limit",
                metrics_sku_limit, 0, 10000),
    ENUM_SETTING("log_level", "INVENTORY_LOG_LEVEL", "--log-level", log_level,
                 level_names),
    ENUM_SETTING("log_format", "INVENTORY_LOG_FORMAT", "--log-format", log_format,
                 format_names),
    STR_SETTING("log_file", "INVENTORY_LOG_FILE", "--log-file", K_PATH, log_file),
    BOOL_SETTING("access_log", "INVENTORY_ACCESS_LOG", "--access-log", access_log),
    STR_SETTING("redlock", "INVENTORY_REDLOCK", "--redlock", K_STR, redlock),
    STR_SETTING("memcached", "INVENTORY_MEMCACHED", "--memcached", K_STR, memcached),
    STR_SETTING("zookeeper", "INVENTORY_ZOOKEEPER", "--zookeeper", K_STR, zookeeper),
    BOOL_SETTING("lab", "INVENTORY_LAB", "--lab", lab),
};
const size_t cfg_ntable = sizeof(cfg_table) / sizeof(cfg_table[0]);

void cfg_defaults(struct cfg *out)
{
    memset(out, 0, sizeof(*out));
    strcpy(out->bind, "127.0.0.1");
    out->port = 8080;
    strcpy(out->redis_host, "127.0.0.1");
    out->redis_port = 6379;
    out->pg_pool = 4;
    out->pg_prepare = 1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    out->threads = cores < 1 ? 1 : cores > 1024 ? 1024 : (int)cores;
    out->lock_ttl_ms = 3000;
    out->lock_wait_ms = 2000;
    out->redis_timeout_ms = 1000;
    out->meta_cache_ms = 100;
    out->durability = CFG_DURABILITY_ASYNC;
    out->record_retention_s = 604800;
    out->max_connections = 10000;
    out->connection_timeout_s = 30;
    out->max_body_bytes = 65536;
    out->metrics_segments_max = 32;
    out->metrics_sku_limit = 100;
    out->log_level = LOG_INFO;
    out->log_format = LOG_TEXT;
    out->access_log = true;
}

int cfg_settings(void (*fn)(const char *key, const char *env, const char *flag,
                            void *arg),
                 void *arg)
{
    for (size_t k = 0; k < cfg_ntable; k++)
        fn(cfg_table[k].key, cfg_table[k].env, cfg_table[k].flag, arg);
    return (int)cfg_ntable;
}
