/* config_report.c -- a configuration said back: warnings, values, differences, usage. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/config_internal.h"

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
    for (size_t k = 0; k < cfg_ntable; k++) {
        if (cfg_table[k].env == NULL)
            continue;
        int d = distance(name, cfg_table[k].env);
        if (d == 0)
            return true;
        if (d < best) {
            best = d;
            *near = cfg_table[k].env;
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
static enum cfg_vtype value_of(const struct cfg_setting *s, const struct cfg *c,
                               bool mask, char *buf, size_t len, long long *num)
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
    for (size_t k = 0; k < cfg_ntable; k++) {
        char buf[CFG_PATH_MAX + 64];
        struct cfg_value v = {.text = buf};
        v.type = value_of(&cfg_table[k], c, true, buf, sizeof(buf), &v.num);
        fn(cfg_table[k].key, &v, arg);
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
    for (size_t k = 0; k < cfg_ntable; k++) {
        char va[CFG_PATH_MAX + 64], vb[CFG_PATH_MAX + 64];
        long long na, nb;
        value_of(&cfg_table[k], a, false, va, sizeof(va), &na);
        value_of(&cfg_table[k], b, false, vb, sizeof(vb), &nb);
        if (na != nb || strcmp(va, vb) != 0) {
            append(buf, len, "%s%s", n > 0 ? ", " : "", cfg_table[k].key);
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
static const char *metavar(const struct cfg_setting *s)
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

/* The usage line and the settings table are made from `cfg_table`, the one list of
 * what can be set (tests/test_docs.c holds the man page and README to it too). */
void cfg_usage(FILE *f, const char *prog)
{
    int col = fprintf(f, "usage: %s [--config FILE]", prog);
    for (size_t k = 0; k < cfg_ntable; k++) {
        if (cfg_table[k].flag == NULL)
            continue;
        char opt[96];
        int n = snprintf(opt, sizeof opt, " [%s %s]", cfg_table[k].flag,
                         metavar(&cfg_table[k]));
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
    for (size_t k = 0; k < cfg_ntable; k++) {
        const struct cfg_setting *s = &cfg_table[k];
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
