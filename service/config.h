/* config.h -- the service configuration: defaults < JSON file < INVENTORY_* env < flags.
 *
 * cfg_load() builds one `struct cfg` from, in increasing precedence:
 *   1. built-in defaults (below);
 *   2. a JSON object file: --config FILE, else $INVENTORY_CONFIG, else the first of
 *      cfg_search_path that exists (./config/inventoryd.json for a checkout, then
 *      /etc/inventoryd/inventoryd.json for an installed service), else none. A missing
 *      file is tolerated only on the search path; a search-path file that exists but
 *      cannot be read is an error (never silently skipped for the next one).
 *      Keys are the snake_case field names; unknown keys and wrong types are errors;
 *   3. INVENTORY_* environment variables (see cfg_usage());
 *   4. command-line flags, as "--flag value" or "--flag=value".
 * Every value is range-checked wherever it comes from. A non-loopback bind address
 * with no admin token is refused: the admin API would be open to the network.
 *
 * Errors: cfg_load() returns -1 with exactly one line in `err` naming the flag,
 * variable or file key at fault; it never prints and never exits. The struct is a
 * plain value (fixed buffers, nothing to free).
 */
#ifndef SERVICE_CONFIG_H
#define SERVICE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "base/log.h"

/* The configuration files tried when neither --config nor $INVENTORY_CONFIG names
 * one: a checkout's (relative to the working directory), then the installed one. */
#define CFG_DEFAULT_PATH "config/inventoryd.json"
#define CFG_SYSTEM_PATH "/etc/inventoryd/inventoryd.json"
#define CFG_BIND_MAX 46 /* INET6_ADDRSTRLEN */
#define CFG_HOST_MAX 255
#define CFG_TOKEN_MAX 255
#define CFG_PATH_MAX 1024
#define CFG_SOURCE_MAX (CFG_PATH_MAX + 4096 + 64) /* cfg_source(): path, realpath */

/* The durability of a SKU whose PUT /admin/skus/{sku} body names none (the setting
 * `durability`; a body that names one wins). */
enum cfg_durability {
    CFG_DURABILITY_ASYNC,      /* an order is 201 once the master applied it */
    CFG_DURABILITY_REPLICATED, /* 201 only once a replica has it too (WAIT 1) */
};

struct cfg {
    char bind[CFG_BIND_MAX];                /* numeric IPv4 or IPv6 address; 127.0.0.1 */
    int port;                               /* 1..65535; 8080 */
    char redis_host[CFG_HOST_MAX + 1];      /* 127.0.0.1 */
    int redis_port;                         /* 6379 */
    char redis_unix[CFG_PATH_MAX];          /* unix socket path; "" = TCP */
    int redis_db;                           /* SELECT on connect when not 0; 0 */
    char redis_user[CFG_TOKEN_MAX + 1];     /* ACL user for AUTH; "" = default user */
    char redis_password[CFG_TOKEN_MAX + 1]; /* AUTH on connect; "" = none (secret) */
    char redis_password_file[CFG_PATH_MAX]; /* read into redis_password at load */
    char store[CFG_PATH_MAX]; /* "" or "redis": Redis; a PostgreSQL connection string */
    char store_password[CFG_TOKEN_MAX + 1]; /* PostgreSQL's password (secret); "" */
    char store_password_file[CFG_PATH_MAX]; /* read into store_password at load */
    int pg_pool;    /* PostgreSQL: each loop's connections for `row` holds, 1..64; 4 */
    int pg_prepare; /* PostgreSQL: prepared statements, 1 on (default), 0 off */
    char redis_seeds[CFG_PATH_MAX];     /* more cluster seeds: "h:p,h:p"; "" */
    bool redis_cluster;                 /* a Redis Cluster, without asking; false */
    char redis_sentinels[CFG_PATH_MAX]; /* redis-sentinel://: "h:p,h:p"; "" = none */
    char redis_sentinel_master[CFG_HOST_MAX + 1];    /* the monitored name; "" */
    char redis_sentinel_password[CFG_TOKEN_MAX + 1]; /* the sentinels' AUTH (secret) */
    int threads;          /* event loops (api/loop.h), 1..1024; the number of cores */
    int lock_ttl_ms;      /* 100..600000; 3000 */
    int lock_wait_ms;     /* 0..600000; 2000 */
    int redis_timeout_ms; /* 10..600000; 1000 */
    int meta_cache_ms;    /* 0..60000; 100 */
    enum cfg_durability durability; /* async|replicated, new SKUs' default; async */
    char ledger[CFG_PATH_MAX];      /* libpq connection string of the ledger; "" = none */
    int record_retention_s; /* 1..315360000: an order record's TTL in Redis once the
                               ledger has it; 604800 (7 days) */
    /* "" = none: the admin API is open (allowed on a loopback bind only) */
    char admin_token[CFG_TOKEN_MAX + 1];
    /* "" = none; else a read-only bearer token for GET /metrics alone (secret) */
    char metrics_token[CFG_TOKEN_MAX + 1];
    int max_connections;        /* 1..1000000; 10000 */
    int connection_timeout_s;   /* idle timeout, 0 (none)..86400; 30 */
    int max_body_bytes;         /* 64..16777216; 65536 */
    int metrics_segments_max;   /* per-segment series on /metrics for SKUs up to this many
                                   segments (cardinality bound), 0..1024; 32 */
    int metrics_sku_limit;      /* per-SKU series on /metrics for at most this many SKUs,
                                   the most ordered first, 0..10000; 100 */
    enum log_level log_level;   /* debug|info|warn|error; info (SIGHUP re-reads it) */
    enum log_format log_format; /* text|json; text */
    char log_file[CFG_PATH_MAX]; /* "" = stderr (the setting's "-"); reopened on SIGHUP */
    bool access_log;             /* a line per HTTP request (log_access); true */
    char redlock[CFG_PATH_MAX];  /* RedLock masters "h:p,h:p,h:p"; "" = none */
    char memcached[CFG_PATH_MAX];   /* memcached "h:p" for its lock; "" = none */
    char zookeeper[CFG_PATH_MAX];   /* ZooKeeper ensemble "h:p,h:p"; "" = none */
    bool lab;                       /* accept "fencing": false (demonstrations); false */
    char config_path[CFG_PATH_MAX]; /* file actually read, "" when none */
    bool help;                      /* --help given: print cfg_usage(), run nothing */
    bool version;                   /* --version given */
    bool check;                     /* --check-config: validate, print, run nothing */
    bool migrate; /* --migrate: create or upgrade the PostgreSQL schema, then exit */
    char reconcile[65]; /* --reconcile SKU: print its reconciliation, run nothing */
};

/* The files tried, in order, when neither --config nor $INVENTORY_CONFIG names one:
 * CFG_DEFAULT_PATH, CFG_SYSTEM_PATH, NULL. */
extern const char *const cfg_search_path[];

/* Fill `out` with the built-in defaults. */
void cfg_defaults(struct cfg *out);

/* Load the configuration. `argv` holds `argc` arguments, argv[0] the program name.
 * `envp` is a NULL-terminated "NAME=value" array (pass `environ`), or NULL for an
 * empty environment. Returns 0 with `out` filled (check out->help/out->version),
 * or -1 with a one-line reason in `err` (`out` then holds partial values). */
int cfg_load(int argc, char *const argv[], char *const envp[], struct cfg *out, char *err,
             size_t errlen);

/* cfg_load() with another NULL-terminated list of files to try in place of
 * cfg_search_path (tests use it to stay independent of the machine's /etc). */
int cfg_load_search(int argc, char *const argv[], char *const envp[],
                    const char *const search[], struct cfg *out, char *err,
                    size_t errlen);

/* True when out->bind is a loopback address (127.0.0.0/8, ::1). */
bool cfg_bind_is_loopback(const struct cfg *c);

/* The connection string the store is opened with: c->store, and when
 * store_password is set, that password after whatever the string names (a
 * "password" query parameter, percent-escaped, of a postgres:// URI; else a quoted
 * password= pair): libpq takes the last. A secret: never log it. Size buf at least
 * CFG_STORE_CONNINFO_MAX. 0, or -1 when it does not fit in `len`. */
#define CFG_STORE_CONNINFO_MAX (CFG_PATH_MAX + 3 * CFG_TOKEN_MAX + 16)
int cfg_store_conninfo(const struct cfg *c, char *buf, size_t len);

/* Print the effective configuration of a successful cfg_load() for --check-config:
 * which file was read (or that none was), then one "key value" line per setting in
 * the file's key names. Secrets (admin_token) are printed as "***", never in clear. */
void cfg_print(FILE *f, const struct cfg *c);

/* One setting's value as cfg_print() shows it. */
enum cfg_vtype { CFG_VINT, CFG_VBOOL, CFG_VTEXT };
struct cfg_value {
    enum cfg_vtype type;
    long long num;    /* CFG_VINT; CFG_VBOOL: 0 or 1 */
    const char *text; /* CFG_VTEXT: secrets already "***" or "(none)"; valid during
                         the call only */
};

/* Call fn(key, value, arg) once per setting of `c`, in cfg_print()'s order and with
 * its values (the masking is done here, once, for every caller). `key` is a static
 * string. The file read is not a setting: see cfg_source(). */
void cfg_foreach(const struct cfg *c,
                 void (*fn)(const char *key, const struct cfg_value *v, void *arg),
                 void *arg);

/* Which file `c` was read from, as cfg_print()'s first line says it: "PATH (ABSOLUTE)"
 * or "none (built-in defaults; tried A B)". Always NUL-terminates `buf`. */
void cfg_source(const struct cfg *c, char *buf, size_t len);

/* The keys of the settings whose values differ between `a` and `b` (secrets
 * compared, never shown), comma-separated into `buf` (cut if too long). Returns
 * their number. */
int cfg_diff(const struct cfg *a, const struct cfg *b, char *buf, size_t len);

/* Settings that load but are probably a mistake: an INVENTORY_* variable in `envp` that
 * names no setting (a misspelling is otherwise silently ignored; the nearest name is
 * suggested), and settings that contradict each other (lock_wait_ms more than ten
 * times lock_ttl_ms, or not below connection_timeout_s; redis_timeout_ms not below
 * lock_ttl_ms). Calls fn(text, arg) once per warning, with a one-line text valid
 * during the call; returns how many. */
int cfg_warnings(const struct cfg *c, char *const envp[],
                 void (*fn)(const char *text, void *arg), void *arg);

/* Call fn(key, env, flag, arg) once per setting, in the settings table's order: its
 * file key, its environment variable and its long option (NULL when it has none);
 * static strings. Returns how many (tests/test_docs.c checks the documents by it). */
int cfg_settings(void (*fn)(const char *key, const char *env, const char *flag,
                            void *arg),
                 void *arg);

/* Print the usage text (flags, environment variables, defaults). */
void cfg_usage(FILE *f, const char *prog);

#endif
