/* config.c -- load and validate the configuration from defaults, file, env and flags. */
#include "service/config.h"

#include "base/names.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>

/* How a setting's text or JSON value is checked and stored. */
enum kind {
    K_INT,   /* int field, range-checked */
    K_STR,   /* char[] field of `cap` bytes */
    K_TOKEN, /* like K_STR, restricted to visible ASCII (it travels in a header) */
    K_BIND,  /* numeric IPv4/IPv6 address */
    K_ENUM,  /* one of `names`, stored as its index in an int-sized enum field */
    K_BOOL,  /* bool field: true or false (a JSON boolean in the file) */
    K_PATH,  /* a file path in char[cap]; "-" stores "" (stderr) */
    K_DSN,   /* like K_STR, a libpq connection string: shown with its password masked */
    K_REDIS, /* "host:port", "redis://[user[:password]@]host[:port][/db]",
                "redis-sentinel://[user[:password]@]h:p,h:p/name[/db]" or
                "unix:///path" into the redis_* fields */
};

struct setting {
    const char *key;  /* JSON key */
    const char *env;  /* environment variable, or NULL */
    const char *flag; /* long option, or NULL */
    enum kind kind;
    size_t off; /* offset of the field in struct cfg */
    size_t cap; /* K_STR/K_TOKEN/K_BIND: size of the field */
    long min, max;
    const char *const *names; /* K_ENUM: the values, NULL-terminated */
};

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
static const char *const durability_names[] = {
    [CFG_DURABILITY_ASYNC] = "async",
    [CFG_DURABILITY_REPLICATED] = "replicated",
    [CFG_DURABILITY_REPLICATED + 1] = NULL,
};

static const struct setting settings[] = {
    INT_SETTING("port", "INVENTORY_PORT", "--port", port, 1, 65535),
    STR_SETTING("bind", "INVENTORY_BIND", "--bind", K_BIND, bind),
    STR_SETTING("store", "INVENTORY_STORE", "--store", K_DSN, store),
    STR_SETTING("store_password_file", "INVENTORY_STORE_PASSWORD_FILE",
                "--store-password-file", K_STR, store_password_file),
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
#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

const char *const cfg_search_path[] = {CFG_DEFAULT_PATH, CFG_SYSTEM_PATH, NULL};

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (errlen > 0)
        vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

void cfg_defaults(struct cfg *out)
{
    memset(out, 0, sizeof(*out));
    strcpy(out->bind, "127.0.0.1");
    out->port = 8080;
    strcpy(out->redis_host, "127.0.0.1");
    out->redis_port = 6379;
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

static int set_int(const struct setting *s, long long v, const char *where, struct cfg *c,
                   char *err, size_t errlen)
{
    if (v < s->min || v > s->max)
        return fail(err, errlen, "%s: must be an integer in %ld..%ld, got %lld", where,
                    s->min, s->max, v);
    *(int *)((char *)c + s->off) = (int)v;
    return 0;
}

/* Parse a whole decimal integer: no blanks, no trailing text, no overflow. */
static int parse_ll(const char *text, long long *out)
{
    if (text[0] == '\0' || !(text[0] == '-' || (text[0] >= '0' && text[0] <= '9')))
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

/* "host:port" (host may be "[v6]") into redis_host and redis_port. */
static int set_host_port(const char *text, size_t len, const char *where, struct cfg *c,
                         char *err, size_t errlen)
{
    char hp[CFG_HOST_MAX + 16];
    if (len >= sizeof hp)
        return fail(err, errlen, "%s: host must be 1..%d characters", where,
                    CFG_HOST_MAX);
    memcpy(hp, text, len);
    hp[len] = '\0';
    const char *colon = strrchr(hp, ':');
    if (colon == NULL || colon == hp || (hp[0] == '[' && colon[-1] != ']'))
        return fail(err, errlen, "%s: must be HOST:PORT, got '%s'", where, hp);
    const char *host = hp;
    size_t hlen = (size_t)(colon - hp);
    if (host[0] == '[' && hlen >= 2 && host[hlen - 1] == ']') { /* [::1]:6379 */
        host++;
        hlen -= 2;
    }
    if (hlen == 0 || hlen > CFG_HOST_MAX)
        return fail(err, errlen, "%s: host must be 1..%d characters, got '%s'", where,
                    CFG_HOST_MAX, hp);
    for (size_t i = 0; i < hlen; i++)
        if (host[i] <= ' ' || host[i] == 0x7f || host[i] == '/' || host[i] == '@')
            return fail(err, errlen, "%s: bad character in host, got '%s'", where, hp);
    long long port;
    if (parse_ll(colon + 1, &port) != 0 || port < 1 || port > 65535)
        return fail(err, errlen, "%s: port must be an integer in 1..65535, got '%s'",
                    where, hp);
    memcpy(c->redis_host, host, hlen);
    c->redis_host[hlen] = '\0';
    c->redis_port = (int)port;
    c->redis_unix[0] = '\0';
    return 0;
}

/* Percent-decode `len` bytes of `s` into `out` (cap bytes): -1 on a bad escape, a
 * NUL, a control character or no room. */
static int unescape(const char *s, size_t len, char *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        int ch = (unsigned char)s[i];
        if (ch == '%') {
            if (i + 2 >= len || !isxdigit((unsigned char)s[i + 1]) ||
                !isxdigit((unsigned char)s[i + 2]))
                return -1;
            char hex[3] = {s[i + 1], s[i + 2], '\0'};
            ch = (int)strtol(hex, NULL, 16);
            i += 2;
        }
        if (ch <= ' ' || ch == 0x7f || n + 1 >= cap)
            return -1;
        out[n++] = (char)ch;
    }
    out[n] = '\0';
    return 0;
}

/* "redis://[user[:password]@]host[:port][/db]" into the redis_* fields. */
static int set_redis_url(const char *text, const char *where, struct cfg *c, char *err,
                         size_t errlen)
{
    const char *p = text + strlen("redis://");
    const char *at = strrchr(p, '@');
    c->redis_user[0] = c->redis_password[0] = '\0';
    if (at != NULL) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        size_t ulen = colon ? (size_t)(colon - p) : (size_t)(at - p);
        if (unescape(p, ulen, c->redis_user, sizeof c->redis_user) != 0 ||
            (colon && unescape(colon + 1, (size_t)(at - colon - 1), c->redis_password,
                               sizeof c->redis_password) != 0))
            return fail(err, errlen, "%s: bad user or password in the redis:// URL",
                        where);
        p = at + 1;
    }
    const char *slash = strchr(p, '/');
    size_t hplen = slash ? (size_t)(slash - p) : strlen(p);
    char hp[CFG_HOST_MAX + 16];
    if (hplen + 6 >= sizeof hp)
        return fail(err, errlen, "%s: host must be 1..%d characters", where,
                    CFG_HOST_MAX);
    memcpy(hp, p, hplen);
    hp[hplen] = '\0';
    const char *last = strrchr(hp, ':');
    if (last == NULL || (hp[0] == '[' && strrchr(hp, ']') > last))
        strcat(hp, ":6379"); /* the default port */
    if (set_host_port(hp, strlen(hp), where, c, err, errlen) != 0)
        return -1;
    c->redis_db = 0;
    if (slash != NULL && slash[1] != '\0') {
        long long db;
        if (parse_ll(slash + 1, &db) != 0 || db < 0 || db > 1000000)
            return fail(err, errlen, "%s: the database must be a number, got '%s'", where,
                        slash + 1);
        c->redis_db = (int)db;
    }
    return 0;
}

/* "redis-sentinel://[user[:password]@]h1[:p1],h2[:p2]/name[/db]": the sentinels into
 * redis_sentinels ("h:p,h:p", port 26379 when none), the name into
 * redis_sentinel_master, user, password and db as for redis:// (the master's). */
static int set_sentinel_url(const char *text, const char *where, struct cfg *c, char *err,
                            size_t errlen)
{
    char url[CFG_PATH_MAX + 256];
    if (strlen(text) >= sizeof url)
        return fail(err, errlen, "%s: the redis-sentinel:// URL is too long", where);
    snprintf(url, sizeof url, "redis://%s", text + strlen("redis-sentinel://"));
    char *p = url + strlen("redis://");
    char *at = strrchr(p, '@');
    char *hosts = at != NULL ? at + 1 : p;
    char *slash = strchr(hosts, '/');
    if (slash == NULL || slash[1] == '\0' || slash[1] == '/')
        return fail(err, errlen,
                    "%s: redis-sentinel:// needs the master's name: "
                    "redis-sentinel://host:port,host:port/mastername, got '%s'",
                    where, text);
    *slash = '\0';
    const char *name = slash + 1;
    char *db = strchr(slash + 1, '/');
    if (db != NULL)
        *db++ = '\0';
    size_t nlen = strlen(name);
    if (nlen > 200 || strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   "0123456789._-") != nlen)
        return fail(err, errlen,
                    "%s: the master's name must be 1..200 of A-Z a-z 0-9 . _ -, got '%s'",
                    where, name);
    char list[CFG_PATH_MAX] = "";
    size_t used = 0;
    for (const char *h = hosts; *h != '\0' || used == 0;) {
        const char *end = strchr(h, ',');
        size_t n = end != NULL ? (size_t)(end - h) : strlen(h);
        char hp[CFG_HOST_MAX + 16];
        if (n == 0 || n >= sizeof hp - 7)
            return fail(err, errlen, "%s: an empty or too long sentinel address in '%s'",
                        where, text);
        memcpy(hp, h, n);
        hp[n] = '\0';
        const char *last = strrchr(hp, ':');
        if (last == NULL || (hp[0] == '[' && strrchr(hp, ']') > last))
            strcat(hp, ":26379"); /* the sentinels' default port */
        struct cfg probe;
        if (set_host_port(hp, strlen(hp), where, &probe, err, errlen) != 0)
            return -1;
        int k = snprintf(list + used, sizeof list - used, "%s%s", used ? "," : "", hp);
        if (k < 0 || (size_t)k >= sizeof list - used)
            return fail(err, errlen, "%s: the sentinel list is too long", where);
        used += (size_t)k;
        h += n + (end != NULL);
        if (end != NULL && *h == '\0')
            return fail(err, errlen, "%s: empty sentinel after the last ','", where);
    }
    /* User, password and db as a redis:// URL of the first sentinel would have them. */
    char first[CFG_PATH_MAX + 256];
    size_t cut = strcspn(list, ",");
    snprintf(first, sizeof first, "redis://%.*s%.*s%s%s", at ? (int)(at - p + 1) : 0, p,
             (int)cut, list, db ? "/" : "", db ? db : "");
    if (set_redis_url(first, where, c, err, errlen) != 0)
        return -1;
    memcpy(c->redis_sentinels, list, used + 1);
    snprintf(c->redis_sentinel_master, sizeof c->redis_sentinel_master, "%s", name);
    return 0;
}

static int set_redis(const char *text, const char *where, struct cfg *c, char *err,
                     size_t errlen)
{
    c->redis_sentinels[0] = c->redis_sentinel_master[0] = '\0';
    if (strncmp(text, "redis-sentinel://", 17) == 0)
        return set_sentinel_url(text, where, c, err, errlen);
    if (strncmp(text, "unix://", 7) == 0) {
        const char *path = text + 7;
        if (path[0] != '/' || strlen(path) >= sizeof c->redis_unix)
            return fail(err, errlen, "%s: must be unix:///absolute/path, got '%s'", where,
                        text);
        snprintf(c->redis_unix, sizeof c->redis_unix, "%s", path);
        return 0;
    }
    if (strncmp(text, "redis://", 8) == 0)
        return set_redis_url(text, where, c, err, errlen);
    if (strstr(text, "://") != NULL)
        return fail(err, errlen,
                    "%s: only redis://, redis-sentinel:// and unix:// are supported, got "
                    "'%s'",
                    where, text);
    /* HOST:PORT[,HOST:PORT...]: cluster seeds, the first tried first. */
    const char *comma = strchr(text, ',');
    if (comma == NULL) {
        c->redis_seeds[0] = '\0';
        return set_host_port(text, strlen(text), where, c, err, errlen);
    }
    if (strlen(comma + 1) >= sizeof c->redis_seeds)
        return fail(err, errlen, "%s: the seed list is too long", where);
    for (const char *p = comma + 1; *p != '\0';) { /* each must parse on its own */
        struct cfg probe;
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        if (set_host_port(p, n, where, &probe, err, errlen) != 0)
            return -1;
        p += n + (end != NULL);
        if (end != NULL && *p == '\0')
            return fail(err, errlen, "%s: empty seed after the last ','", where);
    }
    if (set_host_port(text, (size_t)(comma - text), where, c, err, errlen) != 0)
        return -1;
    snprintf(c->redis_seeds, sizeof c->redis_seeds, "%s", comma + 1);
    return 0;
}

/* Read the first line of `path` (setting `key`) into `out` (CFG_TOKEN_MAX + 1). */
static int read_password_file(const char *key, const char *path, char *out, char *err,
                              size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return fail(err, errlen, "%s %s: %s", key, path, strerror(errno));
    char line[CFG_TOKEN_MAX + 2];
    bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    size_t n = got ? strcspn(line, "\r\n") : 0;
    line[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (line[i] <= ' ' || line[i] == 0x7f)
            n = 0;
    if (n == 0 || n > CFG_TOKEN_MAX)
        return fail(err, errlen,
                    "%s %s: the first line must hold the password "
                    "(1..%d visible characters)",
                    key, path, CFG_TOKEN_MAX);
    memcpy(out, line, n + 1);
    return 0;
}

/* Store `text` into setting `s`; `where` names the source for error messages. */
static int set_text(const struct setting *s, const char *text, const char *where,
                    struct cfg *c, char *err, size_t errlen)
{
    char *field = (char *)c + s->off;
    size_t len = strlen(text);
    switch (s->kind) {
    case K_INT: {
        long long v;
        if (parse_ll(text, &v) != 0)
            return fail(err, errlen, "%s: must be an integer in %ld..%ld, got '%s'",
                        where, s->min, s->max, text);
        return set_int(s, v, where, c, err, errlen);
    }
    case K_REDIS:
        return set_redis(text, where, c, err, errlen);
    case K_BIND: {
        unsigned char addr[sizeof(struct in6_addr)];
        if (len >= s->cap ||
            (inet_pton(AF_INET, text, addr) != 1 && inet_pton(AF_INET6, text, addr) != 1))
            return fail(err, errlen,
                        "%s: must be a numeric IPv4 or IPv6 address, got '%s'", where,
                        text);
        memcpy(field, text, len + 1);
        return 0;
    }
    case K_ENUM: {
        char list[128] = "";
        for (size_t i = 0; s->names[i] != NULL; i++) {
            if (strcasecmp(text, s->names[i]) == 0) {
                *(int *)field = (int)i;
                return 0;
            }
            size_t n = strlen(list);
            snprintf(list + n, sizeof(list) - n, "%s%s", i > 0 ? "|" : "", s->names[i]);
        }
        return fail(err, errlen, "%s: must be one of %s, got '%s'", where, list, text);
    }
    case K_BOOL:
        if (strcasecmp(text, "true") != 0 && strcasecmp(text, "false") != 0)
            return fail(err, errlen, "%s: must be true or false, got '%s'", where, text);
        *(bool *)field = strcasecmp(text, "true") == 0;
        return 0;
    case K_PATH:
        if (strcmp(text, "-") == 0)
            text = "";
        else if (len == 0)
            return fail(err, errlen, "%s: must be a file path, or - for stderr", where);
        for (size_t i = 0; text[i] != '\0'; i++)
            if ((unsigned char)text[i] < ' ' || text[i] == 0x7f)
                return fail(err, errlen, "%s: control character in the path", where);
        len = strlen(text);
        if (len >= s->cap)
            return fail(err, errlen, "%s: longer than %zu characters", where, s->cap - 1);
        memcpy(field, text, len + 1);
        return 0;
    case K_TOKEN:
        for (size_t i = 0; i < len; i++)
            if (text[i] <= ' ' || text[i] >= 0x7f)
                return fail(err, errlen,
                            "%s: must be visible ASCII characters without spaces", where);
        /* fall through */
    case K_STR:
    case K_DSN:
        if (len >= s->cap)
            return fail(err, errlen, "%s: longer than %zu characters", where, s->cap - 1);
        memcpy(field, text, len + 1);
        return 0;
    }
    return fail(err, errlen, "%s: unsupported setting", where);
}

static const char *type_name(const struct setting *s)
{
    return s->kind == K_INT    ? "an integer"
           : s->kind == K_BOOL ? "true or false"
                               : "a string";
}

/* Read one config file into `c`. A file that does not exist is skipped (returns 1)
 * when `explicit` is false; any other failure is an error (-1). 0: read. */
static int load_file(const char *path, bool explicit, struct cfg *c, char *err,
                     size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        if ((errno == ENOENT || errno == ENOTDIR) && !explicit)
            return 1;
        return fail(err, errlen, "config file %s: %s", path, strerror(errno));
    }
    json_error_t jerr;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    if (root == NULL)
        return fail(err, errlen, "config file %s:%d:%d: %s", path, jerr.line, jerr.column,
                    jerr.text);
    if (strlen(path) >= sizeof(c->config_path)) {
        json_decref(root);
        return fail(err, errlen, "config file %s: path too long", path);
    }
    strcpy(c->config_path, path);
    if (!json_is_object(root)) {
        json_decref(root);
        return fail(err, errlen, "config file %s: must hold a JSON object", path);
    }

    int rc = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        const struct setting *s = NULL;
        for (size_t i = 0; i < NSETTINGS; i++)
            if (strcmp(settings[i].key, key) == 0)
                s = &settings[i];
        char where[CFG_PATH_MAX + 96];
        snprintf(where, sizeof(where), "config file %s: %.64s", path, key);
        if (s == NULL) {
            rc = fail(err, errlen, "%s: unknown key", where);
        } else if (s->kind == K_BOOL) {
            rc = json_is_boolean(val)
                     ? set_text(s, json_is_true(val) ? "true" : "false", where, c, err,
                                errlen)
                     : fail(err, errlen, "%s: must be %s", where, type_name(s));
        } else if (s->kind == K_INT) {
            rc = json_is_integer(val)
                     ? set_int(s, json_integer_value(val), where, c, err, errlen)
                     : fail(err, errlen, "%s: must be %s", where, type_name(s));
        } else {
            rc = json_is_string(val) &&
                         strlen(json_string_value(val)) == json_string_length(val)
                     ? set_text(s, json_string_value(val), where, c, err, errlen)
                     : fail(err, errlen, "%s: must be %s", where, type_name(s));
        }
        if (rc != 0)
            break;
    }
    json_decref(root);
    return rc;
}

static const char *env_get(char *const envp[], const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; envp != NULL && envp[i] != NULL; i++)
        if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=')
            return envp[i] + n + 1;
    return NULL;
}

int cfg_settings(void (*fn)(const char *key, const char *env, const char *flag,
                            void *arg),
                 void *arg)
{
    for (size_t k = 0; k < NSETTINGS; k++)
        fn(settings[k].key, settings[k].env, settings[k].flag, arg);
    return (int)NSETTINGS;
}

/* Levenshtein distance of `a` and `b`, capped at 3 (only near names matter). */
static int distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63 || (la > lb ? la - lb : lb - la) > 2)
        return 3;
    int row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb] < 3 ? row[lb] : 3;
}

/* True when `name` ("INVENTORY_X", no '=') is a variable the configuration reads;
 * else `*near` is the closest that is (NULL when none is within 2 edits). */
static bool known_env(const char *name, const char **near)
{
    int best = 3;
    *near = NULL;
    if (strcmp(name, "INVENTORY_CONFIG") == 0)
        return true;
    for (size_t k = 0; k < NSETTINGS; k++) {
        if (settings[k].env == NULL)
            continue;
        int d = distance(name, settings[k].env);
        if (d == 0)
            return true;
        if (d < best) {
            best = d;
            *near = settings[k].env;
        }
    }
    return false;
}

int cfg_warnings(const struct cfg *c, char *const envp[],
                 void (*fn)(const char *text, void *arg), void *arg)
{
    static const char prefix[] = "INVENTORY_";
    char text[256];
    int n = 0;
    for (size_t i = 0; envp != NULL && envp[i] != NULL; i++) {
        const char *eq = strchr(envp[i], '=');
        size_t len = eq != NULL ? (size_t)(eq - envp[i]) : strlen(envp[i]);
        if (strncmp(envp[i], prefix, sizeof(prefix) - 1) != 0 || len >= 64)
            continue;
        char name[64];
        const char *near_fmt = "";
        const char *near;
        memcpy(name, envp[i], len);
        name[len] = '\0';
        if (known_env(name, &near))
            continue;
        if (near != NULL)
            near_fmt = " (did you mean ";
        snprintf(text, sizeof text, "%s: no such setting, ignored%s%s%s", name, near_fmt,
                 near != NULL ? near : "", near != NULL ? "?)" : "");
        fn(text, arg);
        n++;
    }
    if ((long long)c->lock_wait_ms > 10LL * c->lock_ttl_ms) {
        snprintf(text, sizeof text,
                 "lock_wait_ms %d is more than ten times lock_ttl_ms %d: an order would "
                 "wait out ten leases of a busy segment (milliseconds meant as seconds?)",
                 c->lock_wait_ms, c->lock_ttl_ms);
        fn(text, arg);
        n++;
    }
    if (c->connection_timeout_s > 0 &&
        (long long)c->lock_wait_ms >= 1000LL * c->connection_timeout_s) {
        snprintf(text, sizeof text,
                 "lock_wait_ms %d is not below connection_timeout_s %d: an order may "
                 "wait longer than an idle client connection is kept",
                 c->lock_wait_ms, c->connection_timeout_s);
        fn(text, arg);
        n++;
    }
    if (c->redis_timeout_ms >= c->lock_ttl_ms) {
        snprintf(
            text, sizeof text,
            "redis_timeout_ms %d is not below lock_ttl_ms %d: a lease renewal may time "
            "out after the lease it renews has ended",
            c->redis_timeout_ms, c->lock_ttl_ms);
        fn(text, arg);
        n++;
    }
    return n;
}

/* One parsed command-line option. */
struct opt {
    const char *name; /* "--port" (without any "=value") */
    size_t namelen;
    const char *value; /* NULL for --help/--version/--check-config */
};

/* Split argv into options, checking names and that each flag has a value.
 * Returns the number of options stored in `opts` (room for argc), or -1. */
static int scan_args(int argc, char *const argv[], struct opt *opts, char *err,
                     size_t errlen)
{
    int n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0)
            a = "--help";
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
            return fail(err, errlen, "unexpected argument '%s' (see --help)", a);
        const char *eq = strchr(a, '=');
        size_t namelen = eq != NULL ? (size_t)(eq - a) : strlen(a);
        struct opt o = {a, namelen, NULL};
        bool takes_value = true;
        if ((namelen == 6 && strncmp(a, "--help", 6) == 0) ||
            (namelen == 9 && strncmp(a, "--version", 9) == 0) ||
            (namelen == 14 && strncmp(a, "--check-config", 14) == 0) ||
            (namelen == 9 && strncmp(a, "--migrate", 9) == 0)) {
            takes_value = false;
        } else {
            bool known = (namelen == 8 && strncmp(a, "--config", 8) == 0) ||
                         (namelen == 11 && strncmp(a, "--reconcile", 11) == 0);
            for (size_t k = 0; !known && k < NSETTINGS; k++)
                known = settings[k].flag != NULL && strlen(settings[k].flag) == namelen &&
                        strncmp(settings[k].flag, a, namelen) == 0;
            if (!known)
                return fail(err, errlen, "unknown option '%.*s' (see --help)",
                            (int)namelen, a);
        }
        if (!takes_value) {
            if (eq != NULL)
                return fail(err, errlen, "%.*s: takes no value", (int)namelen, a);
        } else if (eq != NULL) {
            o.value = eq + 1;
        } else if (i + 1 < argc) {
            o.value = argv[++i];
        } else {
            return fail(err, errlen, "%s: missing value", a);
        }
        opts[n++] = o;
    }
    return n;
}

static bool opt_is(const struct opt *o, const char *name)
{
    return strlen(name) == o->namelen && strncmp(o->name, name, o->namelen) == 0;
}

int cfg_load(int argc, char *const argv[], char *const envp[], struct cfg *out, char *err,
             size_t errlen)
{
    return cfg_load_search(argc, argv, envp, cfg_search_path, out, err, errlen);
}

int cfg_load_search(int argc, char *const argv[], char *const envp[],
                    const char *const search[], struct cfg *out, char *err, size_t errlen)
{
    cfg_defaults(out);
    if (errlen > 0)
        err[0] = '\0';

    struct opt *opts = calloc(argc > 0 ? (size_t)argc : 1, sizeof(*opts));
    if (opts == NULL)
        return fail(err, errlen, "out of memory");
    int rc = -1;
    int nopts = scan_args(argc, argv, opts, err, errlen);
    if (nopts < 0)
        goto done;

    const char *path = NULL; /* NULL: try `search` */
    const char *env_path = env_get(envp, "INVENTORY_CONFIG");
    if (env_path != NULL) {
        if (env_path[0] == '\0') {
            fail(err, errlen, "INVENTORY_CONFIG: empty path");
            goto done;
        }
        path = env_path;
    }
    for (int i = 0; i < nopts; i++) {
        if (opt_is(&opts[i], "--help"))
            out->help = true;
        else if (opt_is(&opts[i], "--version"))
            out->version = true;
        else if (opt_is(&opts[i], "--check-config"))
            out->check = true;
        else if (opt_is(&opts[i], "--migrate"))
            out->migrate = true;
        else if (opt_is(&opts[i], "--reconcile")) {
            size_t n = strlen(opts[i].value);
            if (n == 0 || n >= sizeof out->reconcile) {
                fail(err, errlen, "--reconcile: a SKU name of 1..%zu characters",
                     sizeof out->reconcile - 1);
                goto done;
            }
            memcpy(out->reconcile, opts[i].value, n + 1);
        } else if (opt_is(&opts[i], "--config")) {
            if (opts[i].value[0] == '\0') {
                fail(err, errlen, "--config: empty path");
                goto done;
            }
            path = opts[i].value;
        }
    }
    if (out->help || out->version) {
        rc = 0;
        goto done;
    }

    if (path != NULL) {
        if (load_file(path, true, out, err, errlen) != 0)
            goto done;
    } else {
        int got = 1;
        for (size_t i = 0; search != NULL && search[i] != NULL && got == 1; i++)
            got = load_file(search[i], false, out, err, errlen);
        if (got < 0)
            goto done;
    }

    for (size_t k = 0; k < NSETTINGS; k++) {
        const char *v = settings[k].env ? env_get(envp, settings[k].env) : NULL;
        if (v != NULL &&
            set_text(&settings[k], v, settings[k].env, out, err, errlen) != 0)
            goto done;
    }

    for (int i = 0; i < nopts; i++) {
        for (size_t k = 0; k < NSETTINGS; k++) {
            if (settings[k].flag == NULL || !opt_is(&opts[i], settings[k].flag))
                continue;
            if (set_text(&settings[k], opts[i].value, settings[k].flag, out, err,
                         errlen) != 0)
                goto done;
        }
    }

    if (out->redis_password_file[0] != '\0' &&
        read_password_file("redis_password_file", out->redis_password_file,
                           out->redis_password, err, errlen) != 0)
        goto done;
    if (out->store_password_file[0] != '\0' &&
        read_password_file("store_password_file", out->store_password_file,
                           out->store_password, err, errlen) != 0)
        goto done;
    if (!cfg_bind_is_loopback(out) && out->admin_token[0] == '\0') {
        fail(err, errlen,
             "bind: %s is not a loopback address and no admin token is set; set "
             "--admin-token (INVENTORY_ADMIN_TOKEN, admin_token) or bind 127.0.0.1",
             out->bind);
        goto done;
    }
    if (out->redis_sentinels[0] != '\0' && out->redis_cluster) {
        fail(err, errlen,
             "redis_cluster: a redis-sentinel:// Redis is not a Redis Cluster; drop "
             "redis_cluster or name the cluster's nodes in redis");
        goto done;
    }
    rc = 0;
done:
    free(opts);
    return rc;
}

bool cfg_bind_is_loopback(const struct cfg *c)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, c->bind, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, c->bind, &a6) == 1) {
        if (IN6_IS_ADDR_LOOPBACK(&a6))
            return true;
        return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
    }
    return false;
}

int cfg_store_conninfo(const struct cfg *c, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "%s", c->store);
    const char *pw = c->store_password;
    if (n >= len) {
        buf[0] = '\0';
        return -1;
    }
    if (pw[0] == '\0')
        return 0;
    bool uri = strncmp(c->store, "postgres://", 11) == 0 ||
               strncmp(c->store, "postgresql://", 13) == 0;
    n += (size_t)snprintf(buf + n, len - n, "%s",
                          !uri                            ? " password='"
                          : strchr(c->store, '?') != NULL ? "&password="
                                                          : "?password=");
    for (; *pw != '\0' && n + 4 < len; pw++) {
        unsigned char ch = (unsigned char)*pw;
        if (uri && !isalnum(ch) && strchr("-._~", ch) == NULL)
            n += (size_t)snprintf(buf + n, len - n, "%%%02X", ch);
        else if (!uri && (ch == '\'' || ch == '\\'))
            n += (size_t)snprintf(buf + n, len - n, "\\%c", ch);
        else
            buf[n++] = (char)ch;
    }
    if (*pw != '\0' || n + 2 > len) {
        buf[0] = '\0';
        return -1;
    }
    if (!uri)
        buf[n++] = '\'';
    buf[n] = '\0';
    return 0;
}

/* Append to the string in `buf`, cutting at `len`. */
static void append(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void append(char *buf, size_t len, const char *fmt, ...)
{
    size_t n = strnlen(buf, len);
    if (n + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, len - n, fmt, ap);
    va_end(ap);
}

/* A libpq connection string into buf, its password as "***" when `mask`: the one of
 * a URI (scheme://user:PASSWORD@host...) and a key=value string's password=... */
static void mask_dsn(char *buf, size_t len, const char *dsn, bool mask)
{
    snprintf(buf, len, "%s", dsn[0] != '\0' ? dsn : "(none)");
    if (!mask)
        return;
    const char *scheme = strstr(buf, "://");
    char *at = scheme != NULL ? strchr(scheme + 3, '@') : NULL;
    char *colon = scheme != NULL ? strchr(scheme + 3, ':') : NULL;
    char *pw = strstr(buf, "password=");
    size_t from = 0, to = 0;
    if (at != NULL && colon != NULL && colon < at) {
        from = (size_t)(colon + 1 - buf);
        to = (size_t)(at - buf);
    } else if (pw != NULL) {
        from = (size_t)(pw + 9 - buf);
        to = from + strcspn(pw + 9, " ");
    }
    if (to > from) {
        char rest[CFG_PATH_MAX];
        snprintf(rest, sizeof rest, "%s", buf + to);
        snprintf(buf + from, len - from, "***%s", rest);
    }
}

/* The value of setting `s` in `c`: a number in *num (CFG_VINT, CFG_VBOOL) or text in
 * `buf` (CFG_VTEXT) -- secrets as "***"/"(none)" when `mask`, in clear otherwise
 * (only to compare them). The one place that decides how a value is shown. */
static enum cfg_vtype value_of(const struct setting *s, const struct cfg *c, bool mask,
                               char *buf, size_t len, long long *num)
{
    const char *field = (const char *)c + s->off;
    *num = 0;
    buf[0] = '\0';
    switch (s->kind) {
    case K_INT:
        *num = *(const int *)field;
        return CFG_VINT;
    case K_BOOL:
        *num = *(const bool *)field;
        return CFG_VBOOL;
    case K_ENUM:
        snprintf(buf, len, "%s", s->names[*(const int *)field]);
        break;
    case K_REDIS:
        if (c->redis_sentinels[0] != '\0')
            append(buf, len, "redis-sentinel://%s/%s", c->redis_sentinels,
                   c->redis_sentinel_master);
        else if (c->redis_unix[0] != '\0')
            append(buf, len, "unix://%s", c->redis_unix);
        else if (strchr(c->redis_host, ':') != NULL)
            append(buf, len, "[%s]:%d", c->redis_host, c->redis_port);
        else
            append(buf, len, "%s:%d", c->redis_host, c->redis_port);
        if (c->redis_seeds[0] != '\0' && c->redis_sentinels[0] == '\0')
            append(buf, len, ",%s", c->redis_seeds);
        if (c->redis_db != 0)
            append(buf, len, " (db %d)", c->redis_db);
        break;
    case K_TOKEN: /* a secret: say whether it is set, never what it is */
        snprintf(buf, len, "%s", !mask ? field : field[0] != '\0' ? "***" : "(none)");
        break;
    case K_PATH:
        snprintf(buf, len, "%s", field[0] != '\0' ? field : "(stderr)");
        break;
    case K_DSN:
        mask_dsn(buf, len, field, mask);
        break;
    case K_STR:
        snprintf(buf, len, "%s", field);
        break;
    case K_BIND:
        snprintf(buf, len, "%s", field);
        break;
    }
    return CFG_VTEXT;
}

void cfg_foreach(const struct cfg *c,
                 void (*fn)(const char *key, const struct cfg_value *v, void *arg),
                 void *arg)
{
    for (size_t k = 0; k < NSETTINGS; k++) {
        char buf[CFG_PATH_MAX + 64];
        struct cfg_value v = {.text = buf};
        v.type = value_of(&settings[k], c, true, buf, sizeof(buf), &v.num);
        fn(settings[k].key, &v, arg);
    }
}

void cfg_source(const struct cfg *c, char *buf, size_t len)
{
    if (len == 0)
        return;
    buf[0] = '\0';
    if (c->config_path[0] == '\0') {
        append(buf, len, "none (built-in defaults; tried");
        for (size_t i = 0; cfg_search_path[i] != NULL; i++)
            append(buf, len, " %s", cfg_search_path[i]);
        append(buf, len, ")");
        return;
    }
    char abs[PATH_MAX];
    if (c->config_path[0] != '/' && realpath(c->config_path, abs) != NULL)
        append(buf, len, "%s (%s)", c->config_path, abs);
    else
        append(buf, len, "%s", c->config_path);
}

int cfg_diff(const struct cfg *a, const struct cfg *b, char *buf, size_t len)
{
    int n = 0;
    if (len > 0)
        buf[0] = '\0';
    for (size_t k = 0; k < NSETTINGS; k++) {
        char va[CFG_PATH_MAX + 64], vb[CFG_PATH_MAX + 64];
        long long na, nb;
        value_of(&settings[k], a, false, va, sizeof(va), &na);
        value_of(&settings[k], b, false, vb, sizeof(vb), &nb);
        if (na != nb || strcmp(va, vb) != 0) {
            append(buf, len, "%s%s", n > 0 ? ", " : "", settings[k].key);
            n++;
        }
    }
    return n;
}

static void print_value(const char *key, const struct cfg_value *v, void *arg)
{
    FILE *f = arg;
    if (v->type == CFG_VINT)
        fprintf(f, "%-22s %lld\n", key, v->num);
    else if (v->type == CFG_VBOOL)
        fprintf(f, "%-22s %s\n", key, v->num ? "true" : "false");
    else
        fprintf(f, "%-22s %s\n", key, v->text);
}

void cfg_print(FILE *f, const struct cfg *c)
{
    char source[CFG_SOURCE_MAX];
    cfg_source(c, source, sizeof(source));
    fprintf(f, "config file: %s\n", source);
    cfg_foreach(c, print_value, f);
}

/* The metavariable of a flag's value in the usage line. */
static const char *metavar(const struct setting *s)
{
    switch (s->kind) {
    case K_INT:
        return "N";
    case K_BOOL:
        return "B";
    case K_BIND:
        return "ADDR";
    case K_REDIS:
        return "HOST:PORT[,...]";
    case K_PATH:
        return "PATH";
    case K_ENUM:
        return "VALUE";
    case K_DSN:
        return "URL";
    case K_TOKEN:
    case K_STR:
        break;
    }
    return strcmp(s->key, "redis_password_file") == 0 ||
                   strcmp(s->key, "store_password_file") == 0
               ? "PATH"
           : strcmp(s->key, "store") == 0 ? "URL"
                                          : "T";
}

/* The usage line and the settings table are made from `settings`, the one list of
 * what can be set (tests/test_docs.c holds the man page and README to it too). */
void cfg_usage(FILE *f, const char *prog)
{
    int col = fprintf(f, "usage: %s [--config FILE]", prog);
    for (size_t k = 0; k < NSETTINGS; k++) {
        if (settings[k].flag == NULL)
            continue;
        char opt[96];
        int n = snprintf(opt, sizeof opt, " [%s %s]", settings[k].flag,
                         metavar(&settings[k]));
        if (col + n > 88)
            col = fprintf(f, "\n         ") - 1;
        col += fprintf(f, "%s", opt);
    }
    fprintf(f, "\n          [--check-config] [--migrate] [--reconcile SKU] [--help] "
               "[--version]\n");
    fprintf(f,
            "\n"
            "Settings, each overriding the one before: built-in defaults, the JSON file\n"
            "(--config, else $INVENTORY_CONFIG, else the first that exists of\n"
            "./%s and %s),\n"
            "INVENTORY_* environment variables, then flags.\n"
            "--check-config validates all of them, prints the effective configuration\n"
            "(secrets as ***) and the file read, and exits 0, or 2 on a bad value; it\n"
            "warns of unknown INVENTORY_* variables and contradictory settings.\n"
            "--reconcile SKU compares the SKU's counts in Redis with the ledger's\n"
            "(ledger must be set), prints them as JSON and exits 0 when they agree\n"
            "(drift 0), 1 when they do not, 2 when it cannot tell.\n"
            "\n"
            "  %-21s %-30s %-22s %s\n",
            CFG_DEFAULT_PATH, CFG_SYSTEM_PATH, "file key", "env variable", "flag",
            "default");
    struct cfg d;
    cfg_defaults(&d);
    for (size_t k = 0; k < NSETTINGS; k++) {
        const struct setting *s = &settings[k];
        char buf[CFG_PATH_MAX + 64];
        long long num;
        enum cfg_vtype t = value_of(s, &d, true, buf, sizeof buf, &num);
        if (strcmp(s->key, "threads") == 0)
            snprintf(buf, sizeof buf, "the number of cores");
        else if (t == CFG_VINT)
            snprintf(buf, sizeof buf, "%lld", num);
        else if (t == CFG_VBOOL)
            snprintf(buf, sizeof buf, "%s", num ? "true" : "false");
        else if (buf[0] == '\0')
            snprintf(buf, sizeof buf, "(none)");
        fprintf(f, "  %-21s %-30s %-22s %s\n", s->key, s->env != NULL ? s->env : "-",
                s->flag != NULL ? s->flag : "-", buf);
    }
    fprintf(
        f,
        "\n"
        "redis: HOST:PORT, HOST:PORT,HOST:PORT,... (Redis Cluster seeds, tried in\n"
        "order), redis://[user[:password]@]host[:port][/db], unix:///path or\n"
        "redis-sentinel://[user[:password]@]h1:p1,h2:p2/mastername[/db] (Sentinel: the\n"
        "master the sentinels name; redis_sentinel_password: the sentinels' own AUTH).\n"
        "A Redis Cluster is recognised at start (INFO cluster), or later at its first\n"
        "cluster answer (MOVED, CROSSSLOT, ...: /healthz names the mode); redis_cluster\n"
        "true says so without asking. redis_user and redis_password: AUTH on every "
        "connect;\n"
        "redis_password_file: the password on the first line of a file (wins).\n"
        "\n"
        "store: where the stock lives: \"redis\" or \"\" (the redis setting), or a\n"
        "PostgreSQL connection string (postgres://user@host:port/db, or key=value\n"
        "pairs from host= or dbname=; a password in a libpq passfile): the schema is\n"
        "created or upgraded at start, or by --migrate alone (exits 0, or 1).\n"
        "store_password_file: its password on the first line of a file (wins).\n"
        "\n"
        "durability: async|replicated, for a SKU whose PUT /admin/skus/{sku} body names\n"
        "none (replicated: an order is 201 only once a replica has it).\n"
        "\n"
        "ledger: a PostgreSQL connection string (postgres://...): every sale, cancel,\n"
        "restock, rebalance and reset is copied there exactly once; an order record\n"
        "then leaves Redis record_retention_s seconds later and is answered from it.\n"
        "\n"
        "admin_token: the bearer token of /admin/* and /metrics; metrics_token: a\n"
        "read-only one that opens GET /metrics alone.\n"
        "\n"
        "log_level: debug|info|warn|error; log_format: text|json (one JSON object per\n"
        "line); access_log: true|false. SIGHUP (systemctl reload) reopens log_file and\n"
        "re-reads the configuration, of which log_level applies at once (the others at\n"
        "the next restart); SIGUSR1 logs the counters; SIGTERM and SIGINT stop after\n"
        "in-flight requests.\n"
        "\n"
        "redlock: the RedLock masters, HOST:PORT,HOST:PORT,... (3 or 5 independent\n"
        "redis-servers); memcached: HOST:PORT of one memcached; zookeeper: the\n"
        "ensemble's HOST:PORT,... A SKU whose body names \"lock\": \"redlock\",\n"
        "\"memcached\" or \"zookeeper\" takes its segment locks there, every write\n"
        "fenced by Redis. lab: true accepts \"fencing\": false (a demonstration\n"
        "of the oversell that fencing prevents; never in production).\n"
        "\n"
        "A non-loopback --bind requires an admin token. Exit status 2 on a bad "
        "setting.\n");
}
