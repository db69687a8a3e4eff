/* log.c -- leveled, line-atomic logging as text or JSON, to stderr or a reopenable
 * file; the access log line and rate-limited lines. */
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"

static atomic_int min_level = LOG_INFO;
static atomic_int out_format = LOG_TEXT;
static atomic_bool access_on = true;
/* Where lines go. Once a file is opened this fd number never changes: reopening
 * dup3()s the new file onto it, so a writer never holds a closed descriptor. */
static atomic_int out_fd = STDERR_FILENO;

/* The lines go to the journal (stderr is $JOURNAL_STREAM): prefix each with its
 * priority. */
static atomic_bool to_journal = false;

/* Serialises log_open() (the owned descriptor); writers never take it. */
static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;
static int file_fd = -1; /* ours once a file was opened, under open_mu */

static const char *const text_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
static const char *const json_names[] = {"debug", "info", "warn", "error"};

void log_set_level(enum log_level level)
{
    atomic_store_explicit(&min_level, (int)level, memory_order_relaxed);
}

bool log_enabled(enum log_level level)
{
    return (int)level >= atomic_load_explicit(&min_level, memory_order_relaxed);
}

const char *log_level_name(enum log_level level)
{
    return level >= LOG_DEBUG && level <= LOG_ERROR ? json_names[level] : "?";
}

void log_set_format(enum log_format format)
{
    atomic_store_explicit(&out_format, (int)format, memory_order_relaxed);
}

void log_set_access(bool on)
{
    atomic_store_explicit(&access_on, on, memory_order_relaxed);
}

bool log_access_enabled(void)
{
    return atomic_load_explicit(&access_on, memory_order_relaxed);
}

/* True when stderr is the stream systemd named in $JOURNAL_STREAM ("DEV:INO"). */
static bool stderr_is_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (js == NULL || sscanf(js, "%llu:%llu", &dev, &ino) != 2 ||
        fstat(STDERR_FILENO, &st) != 0)
        return false;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

int log_open(const char *path, char *err, size_t errlen)
{
    pthread_mutex_lock(&open_mu);
    int rc = 0;
    if (path == NULL || path[0] == '\0') {
        if (file_fd >= 0 && dup3(STDERR_FILENO, file_fd, O_CLOEXEC) < 0) {
            snprintf(err, errlen, "stderr: %s", strerror(errno));
            rc = -1;
        } else {
            atomic_store_explicit(&to_journal, stderr_is_journal(), memory_order_relaxed);
        }
    } else {
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
        if (fd < 0) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            rc = -1;
        } else if (file_fd < 0) {
            file_fd = fd;
            atomic_store_explicit(&out_fd, fd, memory_order_release);
            atomic_store_explicit(&to_journal, false, memory_order_relaxed);
        } else {
            if (dup3(fd, file_fd, O_CLOEXEC) < 0) {
                snprintf(err, errlen, "%s: %s", path, strerror(errno));
                rc = -1;
            } else {
                atomic_store_explicit(&to_journal, false, memory_order_relaxed);
            }
            close(fd);
        }
    }
    pthread_mutex_unlock(&open_mu);
    return rc;
}

/* ---- building a line ------------------------------------------------------------ */

/* A line under construction: `cap` bytes usable, the rest of the buffer kept for the
 * closing "}\n" (or "\n"), so a cut line can always be finished. */
struct out {
    char *buf;
    size_t len, cap;
    bool full; /* something did not fit: add nothing more */
};

static bool put(struct out *o, const char *s, size_t n)
{
    if (o->full || n > o->cap - o->len) {
        o->full = true;
        return false;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    return true;
}

static bool puts_(struct out *o, const char *s)
{
    return put(o, s, strlen(s));
}

/* Length of the valid UTF-8 sequence at `p` (RFC 3629: no overlongs, surrogates or
 * code points above U+10FFFF), 0 when it is not one. */
static size_t utf8_len(const unsigned char *p)
{
    unsigned char c = p[0];
    unsigned char lo = 0x80, hi = 0xBF;
    size_t n;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4;
    else
        return 0;
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

enum esc {
    ESC_TEXT,   /* a text message: control characters only */
    ESC_QUOTED, /* a quoted text value: also '"' and '\' */
    ESC_JSON,   /* a JSON string: JSON escapes, valid UTF-8 */
};

/* The bytes standing for the character at `p` in `out` (room for 8); its length in
 * the input in *adv. Returns the number of bytes. */
static size_t escape_one(const unsigned char *p, enum esc mode, char *out, size_t *adv)
{
    unsigned char c = *p;
    *adv = 1;
    if (c == '\n' || c == '\r' || c == '\t')
        return (size_t)snprintf(out, 8, "\\%c", c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
    if (c < 0x20 || (c == 0x7f && mode != ESC_JSON))
        return (size_t)snprintf(out, 8, mode == ESC_JSON ? "\\u%04x" : "\\x%02x", c);
    if ((c == '"' || c == '\\') && mode != ESC_TEXT)
        return (size_t)snprintf(out, 8, "\\%c", c);
    if (c >= 0x80 && mode == ESC_JSON) {
        size_t n = utf8_len(p);
        if (n == 0)
            return (size_t)snprintf(out, 8, "\\ufffd");
        memcpy(out, p, n);
        *adv = n;
        return n;
    }
    out[0] = (char)c;
    return 1;
}

/* Append `s` escaped for `mode`, between `quote`s when `quote` is not 0. When room
 * runs out the text is cut at a character boundary and the closing quote still
 * written; returns false then (and when not even the quotes fit: nothing written). */
static bool put_escaped(struct out *o, const char *s, enum esc mode, char quote)
{
    size_t q = quote != 0 ? 1 : 0;
    if (o->full || o->cap - o->len < 2 * q) {
        o->full = true;
        return false;
    }
    if (q)
        o->buf[o->len++] = quote;
    size_t end = o->cap - q;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0';) {
        char e[8];
        size_t adv, n = escape_one(p, mode, e, &adv);
        if (n > end - o->len) {
            o->full = true;
            break;
        }
        memcpy(o->buf + o->len, e, n);
        o->len += n;
        p += adv;
    }
    if (q)
        o->buf[o->len++] = quote;
    return !o->full;
}

/* A text value needs quotes when it is empty or holds a blank, '"', '=' or '\'. */
static bool needs_quotes(const char *s)
{
    if (s[0] == '\0')
        return true;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++)
        if (*p <= ' ' || *p == 0x7f || *p == '"' || *p == '=' || *p == '\\')
            return true;
    return false;
}

/* A field value as text (numbers, true/false) or as a string to escape (*str). */
static void scalar(const struct log_field *f, bool json, char *num, size_t len,
                   const char **str)
{
    *str = NULL;
    switch (f->type) {
    case LOGF_T_STR:
        if (f->v.s != NULL)
            *str = f->v.s;
        else
            snprintf(num, len, "%s", json ? "null" : "-");
        return;
    case LOGF_T_INT:
        snprintf(num, len, "%lld", f->v.i);
        return;
    case LOGF_T_DBL:
        if (isfinite(f->v.d))
            snprintf(num, len, "%.3f", f->v.d);
        else
            snprintf(num, len, "%s", json ? "null" : "-");
        return;
    case LOGF_T_BOOL:
        snprintf(num, len, "%s", f->v.b ? "true" : "false");
        return;
    }
    snprintf(num, len, "%s", json ? "null" : "-");
}

/* Format one line and write it with a single write(2). */
static void emit(enum log_level level, const char *msg, const struct log_field *fields,
                 size_t n)
{
    if (level < LOG_DEBUG || level > LOG_ERROR)
        level = LOG_ERROR;
    bool json = atomic_load_explicit(&out_format, memory_order_relaxed) == LOG_JSON;

    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    char stamp[48];
    size_t k = strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(stamp + k, sizeof(stamp) - k, ".%03ldZ", ts.tv_nsec / 1000000L);

    char line[LOG_LINE_MAX];
    struct out o = {line, 0, sizeof(line) - 2, false};
    if (atomic_load_explicit(&to_journal, memory_order_relaxed)) {
        static const char *const priority[] = {"<7>", "<6>", "<4>", "<3>"};
        puts_(&o, priority[level]);
    }
    if (json) {
        puts_(&o, "{\"ts\":\"");
        puts_(&o, stamp);
        puts_(&o, "\",\"level\":\"");
        puts_(&o, json_names[level]);
        puts_(&o, "\",\"msg\":");
        put_escaped(&o, msg, ESC_JSON, '"');
    } else {
        puts_(&o, stamp);
        puts_(&o, " ");
        puts_(&o, text_names[level]);
        puts_(&o, " ");
        put_escaped(&o, msg, ESC_TEXT, 0);
    }
    for (size_t i = 0; i < n && !o.full; i++) {
        size_t mark = o.len;
        char num[64];
        const char *str;
        scalar(&fields[i], json, num, sizeof(num), &str);
        bool ok = json
                      ? puts_(&o, ",") && put_escaped(&o, fields[i].key, ESC_JSON, '"') &&
                            puts_(&o, ":")
                      : puts_(&o, " ") && puts_(&o, fields[i].key) && puts_(&o, "=");
        if (ok && str == NULL)
            ok = puts_(&o, num);
        else if (ok)
            put_escaped(&o, str, json ? ESC_JSON : ESC_QUOTED,
                        json || needs_quotes(str) ? '"' : 0); /* may be cut: fine */
        if (!ok)
            o.len = mark; /* a field is written whole or not at all */
    }
    if (json)
        line[o.len++] = '}';
    line[o.len++] = '\n';

    /* One write per line; a short write to a log is not worth retrying. */
    ssize_t w = write(atomic_load_explicit(&out_fd, memory_order_acquire), line, o.len);
    (void)w;
}

void log_fields(enum log_level level, const char *msg, const struct log_field *fields,
                size_t n)
{
    if (log_enabled(level))
        emit(level, msg, fields, n);
}

void log_report(const char *msg, const struct log_field *fields, size_t n)
{
    emit(LOG_INFO, msg, fields, n);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    char msg[LOG_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    emit(level, msg, NULL, 0);
}

void log_access(const struct log_access_line *a)
{
    if (!log_access_enabled())
        return;
    struct log_field f[9];
    size_t n = 0;
    f[n++] = (struct log_field)LOGF_STR("method", a->method != NULL ? a->method : "-");
    f[n++] = (struct log_field)LOGF_STR("path", a->path != NULL ? a->path : "-");
    if (a->query != NULL && a->query[0] != '\0')
        f[n++] = (struct log_field)LOGF_STR("query", a->query);
    f[n++] = (struct log_field)LOGF_INT("status", a->status);
    f[n++] = (struct log_field)LOGF_INT("bytes", a->bytes);
    f[n++] = (struct log_field)LOGF_DBL("ms", a->ms);
    if (a->request_id != NULL && a->request_id[0] != '\0')
        f[n++] = (struct log_field)LOGF_STR("request_id", a->request_id);
    if (a->client != NULL && a->client[0] != '\0')
        f[n++] = (struct log_field)LOGF_STR("client", a->client);
    if (a->user_agent != NULL)
        f[n++] = (struct log_field)LOGF_STR("user_agent", a->user_agent);
    emit(LOG_INFO, "access", f, n);
}

/* ---- rate limiting -------------------------------------------------------------- */

struct rl_slot {
    char key[LOG_RL_KEY_MAX + 1]; /* "" = free */
    long long last_ms;            /* monotonic time of the last line written */
    long long suppressed;         /* calls dropped since */
};

static pthread_mutex_t rl_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rl_slot rl_slots[LOG_RL_KEYS]; /* under rl_mu */

/* Decide under the lock whether a line for `key` may be written now. Returns -1 when
 * it is dropped (and counted), else the number of calls dropped before it. */
static long long rl_admit(const char *key)
{
    long long now = base_now_ms(), result = -1;
    if (key[0] == '\0')
        key = "-";
    pthread_mutex_lock(&rl_mu);
    struct rl_slot *slot = NULL, *victim = &rl_slots[0];
    for (size_t i = 0; i < LOG_RL_KEYS && slot == NULL; i++) {
        struct rl_slot *s = &rl_slots[i];
        if (s->key[0] != '\0' && strncmp(s->key, key, LOG_RL_KEY_MAX) == 0)
            slot = s;
        else if (victim->key[0] != '\0' &&
                 (s->key[0] == '\0' || s->last_ms < victim->last_ms))
            victim = s;
    }
    if (slot == NULL) {
        slot = victim;
        snprintf(slot->key, sizeof(slot->key), "%s", key);
        slot->suppressed = 0;
        result = 0;
    } else if (now - slot->last_ms >= 1000) {
        result = slot->suppressed;
        slot->suppressed = 0;
    } else {
        slot->suppressed++;
    }
    if (result >= 0)
        slot->last_ms = now;
    pthread_mutex_unlock(&rl_mu);
    return result;
}

void log_ratelimited(const char *key, enum log_level level, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    long long suppressed = rl_admit(key != NULL ? key : "-");
    if (suppressed < 0)
        return;
    char msg[LOG_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    struct log_field f[] = {LOGF_INT("suppressed", suppressed)};
    emit(level, msg, f, suppressed > 0 ? 1 : 0);
}
