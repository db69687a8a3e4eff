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

#include "service/config_internal.h"

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

static int set_int(const struct cfg_setting *s, long long v, const char *where,
                   struct cfg *c, char *err, size_t errlen)
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
static int set_text(const struct cfg_setting *s, const char *text, const char *where,
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

static const char *type_name(const struct cfg_setting *s)
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
        const struct cfg_setting *s = NULL;
        for (size_t i = 0; i < cfg_ntable; i++)
            if (strcmp(cfg_table[i].key, key) == 0)
                s = &cfg_table[i];
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
            for (size_t k = 0; !known && k < cfg_ntable; k++)
                known = cfg_table[k].flag != NULL &&
                        strlen(cfg_table[k].flag) == namelen &&
                        strncmp(cfg_table[k].flag, a, namelen) == 0;
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

    for (size_t k = 0; k < cfg_ntable; k++) {
        const char *v = cfg_table[k].env ? env_get(envp, cfg_table[k].env) : NULL;
        if (v != NULL &&
            set_text(&cfg_table[k], v, cfg_table[k].env, out, err, errlen) != 0)
            goto done;
    }

    for (int i = 0; i < nopts; i++) {
        for (size_t k = 0; k < cfg_ntable; k++) {
            if (cfg_table[k].flag == NULL || !opt_is(&opts[i], cfg_table[k].flag))
                continue;
            if (set_text(&cfg_table[k], opts[i].value, cfg_table[k].flag, out, err,
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
