/* main.c -- inventoryd: load the configuration, start the domain and the HTTP server,
 * then take signals on the main thread (SIGHUP reload, SIGUSR1 counters) until
 * SIGINT/SIGTERM, and shut down cleanly. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "api/server.h"
#include "base/log.h"
#include "base/names.h"
#include "segments/inventory.h"
#include "segments/ledger.h"
#include "segments/stats.h"
#include "service/config.h"

#define INVENTORYD_VERSION "0.1.0"

extern char **environ;

/* Raise the open-file limit to the hard limit: every idle client connection holds
 * a socket, and there may be thousands. Failure is logged, not fatal. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        log_warn("getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
        return;
    }
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            log_warn("setrlimit(RLIMIT_NOFILE, %llu): %s", (unsigned long long)want,
                     strerror(errno));
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        log_debug("open file limit %llu", (unsigned long long)rl.rlim_cur);
}

/* --check-config: can the service write `path`? Like the service, it appends to an
 * existing file, or creates one in a writable directory -- but creates nothing here
 * (a check run as root must not leave a root-owned log behind). 0, or -1 with `err`. */
static int check_log_file(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    if (errno == ENOENT) {
        char dir[CFG_PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", path);
        if (access(dirname(dir), W_OK | X_OK) == 0)
            return 0;
    }
    snprintf(err, errlen, "log_file %s: %s", path, strerror(errno));
    return -1;
}

/* The fields of one log line describing a configuration, as --check-config prints
 * it (secrets masked, by cfg_foreach): the file read, then every setting. */
struct cfg_line {
    struct log_field f[64];
    size_t n;
    char text[4096]; /* the string values, copied */
    size_t used;
};

static void add_setting(const char *key, const struct cfg_value *v, void *arg)
{
    struct cfg_line *l = arg;
    if (l->n == sizeof(l->f) / sizeof(l->f[0]))
        return;
    struct log_field *f = &l->f[l->n];
    f->key = key;
    if (v->type == CFG_VINT) {
        f->type = LOGF_T_INT;
        f->v.i = v->num;
    } else if (v->type == CFG_VBOOL) {
        f->type = LOGF_T_BOOL;
        f->v.b = v->num != 0;
    } else {
        size_t len = strlen(v->text) + 1;
        if (len > sizeof(l->text) - l->used)
            return;
        f->type = LOGF_T_STR;
        f->v.s = memcpy(l->text + l->used, v->text, len);
        l->used += len;
    }
    l->n++;
}

/* Log `c` as one line `msg` at `level`. */
static void log_configuration(enum log_level level, const char *msg, const struct cfg *c)
{
    if (!log_enabled(level))
        return;
    struct cfg_line l = {.n = 0, .used = 0};
    char source[CFG_SOURCE_MAX];
    cfg_source(c, source, sizeof(source));
    l.f[l.n++] = (struct log_field)LOGF_STR("config_file", source);
    l.f[l.n++] = (struct log_field)LOGF_INT("pid", getpid());
    cfg_foreach(c, add_setting, &l);
    log_fields(level, msg, l.f, l.n);
}

/* cfg_warnings' callbacks: on stderr for --check-config, in the log at start. */
static void print_warning(const char *text, void *arg)
{
    (void)arg;
    fprintf(stderr, "inventoryd: warning: %s\n", text);
}

static void log_warning(const char *text, void *arg)
{
    (void)arg;
    log_warn("configuration: %s", text);
}

/* SIGUSR1: the counters of GET /admin/stats, on one line. */
static void log_stats(inv *v, const struct timespec *started)
{
    long long counters[STAT__COUNT];
    stat_snapshot(v, counters);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    struct log_field f[STAT__COUNT + 1];
    f[0] = (struct log_field)LOGF_INT("uptime_s", now.tv_sec - started->tv_sec);
    for (int i = 0; i < STAT__COUNT; i++)
        f[i + 1] = (struct log_field)LOGF_INT(stat_name((enum stat_id)i), counters[i]);
    log_report("stats", f, STAT__COUNT + 1);
}

/* SIGHUP: reopen the log file (after rotation), read the configuration again from
 * the same sources and apply its log_level; any other change is only reported, as it
 * needs a restart. A configuration that no longer loads changes nothing. `running` is
 * the configuration the service started with (the HTTP server borrows its bind address
 * and admin token: read-only), `*level` the log level in force. */
static void reload(int argc, char **argv, const struct cfg *running,
                   enum log_level *level)
{
    char err[CFG_PATH_MAX + 512];
    if (running->log_file[0] != '\0') {
        if (log_open(running->log_file, err, sizeof(err)) != 0)
            log_error("SIGHUP: cannot reopen the log file, still writing to the old "
                      "one: %s",
                      err);
        else
            log_info("SIGHUP: log file %s reopened", running->log_file);
    }
    struct cfg next;
    if (cfg_load(argc, argv, environ, &next, err, sizeof(err)) != 0) {
        log_error("SIGHUP: configuration not reloaded, the running one stays: %s", err);
        return;
    }
    enum log_level was = *level;
    *level = next.log_level;
    log_set_level(*level);

    char source[CFG_SOURCE_MAX];
    cfg_source(&next, source, sizeof(source));
    struct log_field f[] = {
        LOGF_STR("config_file", source),
        LOGF_STR("log_level", log_level_name(*level)),
        LOGF_STR("was", log_level_name(was)),
    };
    log_report("SIGHUP: configuration reloaded", f, sizeof(f) / sizeof(f[0]));

    struct cfg other = next; /* what differs besides the level needs a restart */
    other.log_level = running->log_level;
    char changed[512];
    if (cfg_diff(running, &other, changed, sizeof(changed)) > 0)
        log_warn("SIGHUP: %s changed; they take effect at the next restart", changed);
    log_configuration(LOG_DEBUG, "configuration read on SIGHUP", &next);
}

/* --reconcile SKU: the SKU's counts in the store (`store`: its connection string,
 * with its password) and in the ledger, as GET
 * /admin/skus/{sku}/reconcile answers them, on stdout; 0 when they agree, 1 when they
 * do not, 2 when it cannot tell (no ledger, no such SKU, a store down). */
static int reconcile(const struct cfg *c, const char *store)
{
    if (c->ledger[0] == '\0') {
        fprintf(stderr, "inventoryd: --reconcile needs ledger (--ledger)\n");
        return 2;
    }
    if (!seg_valid_name(c->reconcile)) {
        fprintf(stderr, "inventoryd: --reconcile: not a SKU name: %s\n", c->reconcile);
        return 2;
    }
    struct inv_options opt = {
        .redis_host = c->redis_host,
        .redis_port = c->redis_port,
        .redis_unix = c->redis_unix,
        .redis_user = c->redis_user,
        .redis_password = c->redis_password,
        .redis_db = c->redis_db,
        .redis_seeds = c->redis_seeds,
        .redis_cluster = c->redis_cluster,
        .redis_sentinels = c->redis_sentinels,
        .redis_sentinel_master = c->redis_sentinel_master,
        .redis_sentinel_password = c->redis_sentinel_password,
        .redis_timeout_ms = c->redis_timeout_ms,
        .lock_ttl_ms = c->lock_ttl_ms,
        .lock_wait_ms = c->lock_wait_ms,
        .meta_cache_ms = c->meta_cache_ms,
        .store = inv_store_is_postgres(c->store) ? store : NULL,
        .ledger = true,
    };
    char err[256];
    inv *v = inv_create(&opt, err, sizeof(err));
    if (v == NULL) {
        fprintf(stderr, "inventoryd: %s\n", err);
        return 2;
    }
    const struct ledger_options lo = {c->ledger, c->record_retention_s, true};
    ledger *lg = ledger_create(v, &lo, err, sizeof(err));
    int rc = 2;
    if (lg != NULL) {
        inv_conn *conn = inv_conn_create(v);
        struct ledger_recon r;
        inv_status s = ledger_reconcile(conn, c->reconcile, &r);
        if (s == INV_OK) {
            printf("{\"sku\":\"%s\",\"epoch\":%lld,\"store\":{\"remaining\":%lld,"
                   "\"sold\":%lld},\"ledger\":{\"remaining\":%lld,\"sold\":%lld,"
                   "\"events\":%lld},\"drift\":%lld}\n",
                   c->reconcile, r.epoch, r.store_stock, r.store_sold, r.ledger_stock,
                   r.ledger_sold, r.ledger_events, r.drift);
            rc = r.drift == 0 ? 0 : 1;
        } else {
            fprintf(stderr, "inventoryd: cannot reconcile '%s': %s\n", c->reconcile,
                    inv_status_name(s));
        }
        inv_conn_free(conn);
        ledger_free(lg);
    } else {
        fprintf(stderr, "inventoryd: %s\n", err);
    }
    inv_free(v);
    return rc;
}

/* The Redis seam's failures and reconnects, in the log: every failure with its
 * reason, at most one line a second per kind (with the count left out). */
static void redis_log(bool failure, const char *what, const char *detail)
{
    if (failure)
        log_ratelimited(what, LOG_WARN, "redis %s: %s", what, detail);
    else
        log_info("redis: connected again (%s)", detail);
}

int main(int argc, char **argv)
{
    struct cfg cfg;
    char err[CFG_PATH_MAX + 512];
    if (cfg_load(argc, argv, environ, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "inventoryd: %s\n", err);
        return 2;
    }
    if (cfg.help) {
        cfg_usage(stdout, argv[0]);
        return 0;
    }
    if (cfg.version) {
        printf("inventoryd %s\n", INVENTORYD_VERSION);
        return 0;
    }
    if (cfg.store[0] != '\0' && strcmp(cfg.store, "redis") != 0 &&
        !inv_store_is_postgres(cfg.store)) {
        fprintf(stderr,
                "inventoryd: store: must be \"redis\" or a PostgreSQL connection string "
                "(postgres://..., host=..., dbname=...)\n");
        return 2;
    }
    char store[CFG_STORE_CONNINFO_MAX]; /* with store_password_file's: a secret */
    if (cfg_store_conninfo(&cfg, store, sizeof store) != 0) {
        fprintf(stderr, "inventoryd: store: the connection string and its password "
                        "are too long\n");
        return 2;
    }
    if (cfg.migrate) {
        int version = 0;
        if (!inv_store_is_postgres(cfg.store)) {
            fprintf(stderr, "inventoryd: --migrate: the store is not PostgreSQL\n");
            return 2;
        }
        if (inv_migrate(store, cfg.redis_timeout_ms, &version, err, sizeof(err)) != 0) {
            fprintf(stderr, "inventoryd: %s\n", err);
            return 1;
        }
        printf("inventoryd: schema at version %d\n", version);
        return 0;
    }
    if (cfg.reconcile[0] != '\0')
        return reconcile(&cfg, store);
    if (cfg.check) {
        /* Like `nginx -t`: everything was validated by cfg_load(); say what would run. */
        if (cfg.log_file[0] != '\0' && check_log_file(cfg.log_file, err, sizeof(err))) {
            fprintf(stderr, "inventoryd: %s\n", err);
            return 2;
        }
        cfg_print(stdout, &cfg);
        int warned = cfg_warnings(&cfg, environ, print_warning, NULL);
        printf("inventoryd: configuration OK%s\n", warned ? " (with warnings)" : "");
        return 0;
    }

    /* Block the signals main takes before any thread starts, so every thread
     * inherits the mask and only sigwait() below ever sees them: no handler runs, and
     * the work a signal asks for (reload, counters, stop) is done on this thread
     * with ordinary calls. A signal sent during startup waits for the loop. SIGPIPE:
     * a client that hangs up must not kill the process. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    struct sigaction ignore;
    memset(&ignore, 0, sizeof(ignore));
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, NULL);

    enum log_level level = cfg.log_level;
    log_set_level(level);
    log_set_format(cfg.log_format);
    log_set_access(cfg.access_log);
    if (log_open(cfg.log_file, err, sizeof(err)) != 0) {
        fprintf(stderr, "inventoryd: log_file %s\n", err);
        return 2;
    }
    log_configuration(LOG_INFO, "configuration", &cfg);
    cfg_warnings(&cfg, environ, log_warning, NULL);

    raise_nofile();

    struct inv_options opt = {
        .redis_host = cfg.redis_host,
        .redis_port = cfg.redis_port,
        .redis_unix = cfg.redis_unix,
        .redis_user = cfg.redis_user,
        .redis_password = cfg.redis_password,
        .redis_db = cfg.redis_db,
        .redis_seeds = cfg.redis_seeds,
        .redis_cluster = cfg.redis_cluster,
        .redis_sentinels = cfg.redis_sentinels,
        .redis_sentinel_master = cfg.redis_sentinel_master,
        .redis_sentinel_password = cfg.redis_sentinel_password,
        .redis_timeout_ms = cfg.redis_timeout_ms,
        .lock_ttl_ms = cfg.lock_ttl_ms,
        .lock_wait_ms = cfg.lock_wait_ms,
        .meta_cache_ms = cfg.meta_cache_ms,
        .redlock = cfg.redlock,
        .memcached = cfg.memcached,
        .zookeeper = cfg.zookeeper,
        .store = inv_store_is_postgres(cfg.store) ? store : NULL,
        .pg_pool = cfg.pg_pool,
        .pg_no_prepare = cfg.pg_prepare == 0,
        .ledger = cfg.ledger[0] != '\0',
    };
    inv_set_redis_logger(redis_log);
    inv *v = inv_create(&opt, err, sizeof(err));
    if (v == NULL) {
        log_error("cannot start the inventory: %s", err);
        return 1;
    }
    ledger *lg = NULL;
    if (cfg.ledger[0] != '\0') {
        const struct ledger_options lo = {cfg.ledger, cfg.record_retention_s, false};
        if ((lg = ledger_create(v, &lo, err, sizeof(err))) == NULL) {
            log_error("cannot start the ledger: %s", err);
            inv_free(v);
            return 1;
        }
    }
    struct api_options api = {
        .bind = cfg.bind,
        .port = cfg.port,
        .threads = cfg.threads,
        .max_connections = cfg.max_connections,
        .connection_timeout_s = cfg.connection_timeout_s,
        .max_body_bytes = cfg.max_body_bytes,
        .admin_token = cfg.admin_token,
        .metrics_token = cfg.metrics_token,
        .metrics_segments_max = cfg.metrics_segments_max,
        .metrics_sku_limit = cfg.metrics_sku_limit,
        .default_replicated = cfg.durability == CFG_DURABILITY_REPLICATED,
        .lock_wait_ms = cfg.lock_wait_ms,
        .lock_services = inv_lock_services(&opt),
        .lab = cfg.lab,
        .redis_timeout_ms = cfg.redis_timeout_ms,
    };
    struct api_server *srv = api_server_start(&api, v, err, sizeof(err));
    if (srv == NULL) {
        log_error("cannot start the HTTP server: %s", err);
        ledger_free(lg);
        inv_free(v);
        return 1;
    }
    struct timespec started;
    clock_gettime(CLOCK_MONOTONIC, &started);

    char redis[CFG_PATH_MAX + CFG_HOST_MAX + 32];
    if (inv_store_is_postgres(cfg.store))
        snprintf(redis, sizeof(redis), "none: the store is PostgreSQL");
    else if (cfg.redis_sentinels[0] != '\0')
        snprintf(redis, sizeof(redis), "Sentinel %s, master %s", cfg.redis_sentinels,
                 cfg.redis_sentinel_master);
    else if (cfg.redis_unix[0] != '\0')
        snprintf(redis, sizeof(redis), "unix://%s", cfg.redis_unix);
    else
        snprintf(redis, sizeof(redis), "%s:%d%s", cfg.redis_host, cfg.redis_port,
                 inv_redis_cluster(v) ? ", a cluster" : "");
    bool v6 = strchr(cfg.bind, ':') != NULL;
    log_info(
        "inventoryd %s listening on http://%s%s%s:%d/ (redis %s, %d event loops%s%s)",
        INVENTORYD_VERSION, v6 ? "[" : "", cfg.bind, v6 ? "]" : "", cfg.port, redis,
        cfg.threads, cfg.config_path[0] ? ", config " : "", cfg.config_path);

    int sig = 0;
    for (;;) {
        if (sigwait(&sigs, &sig) != 0)
            continue;
        if (sig == SIGHUP)
            reload(argc, argv, &cfg, &level);
        else if (sig == SIGUSR1)
            log_stats(v, &started);
        else
            break;
    }
    log_info("received %s, shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");

    api_server_stop(srv);
    ledger_free(lg);
    inv_free(v);
    log_info("stopped");
    return 0;
}
