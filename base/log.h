/* log.h -- the process's logger: leveled lines as text or JSON, on stderr or in a file;
 * the access log line; a rate-limited variant for failures that repeat.
 *
 * Output. One line per call, formatted into a private buffer and written with a
 * single write(2) -- to stderr, or to the file log_open() opened with O_APPEND -- so
 * lines from concurrent threads never interleave. A line longer than LOG_LINE_MAX is
 * cut; a cut JSON line is still one valid object (the fields that did not fit are
 * left out). The two formats of the same call:
 *
 *   text  2024-01-31T12:00:00.123Z WARN redis down addr=127.0.0.1:6379 suppressed=3
 *   json  {"ts":"2024-01-31T12:00:00.123Z","level":"warn","msg":"redis down",
 *          "addr":"127.0.0.1:6379","suppressed":3}
 *
 * (the JSON object is on one line). Text values are quoted ("two words") when they
 * hold a blank, '"', '=' or '\'. Control characters are escaped in both formats, so
 * text taken from a request cannot forge a line; JSON strings are valid UTF-8 (a byte
 * that is not becomes U+FFFD).
 *
 * State. The level, the format, the access-log switch and the output are process-wide
 * (like Redis's verbosity and logfile): main sets them at startup and changes the
 * level and reopens the file on SIGHUP. Every function here may be called from any
 * thread at any time; none is async-signal-safe (main takes signals with sigwait(),
 * never in a handler). Failures to write are ignored: logging never stops the service.
 *
 * Place. base/ is the bottom of the folder graph: this file includes nothing of the
 * project, and every folder (service/, api/, segments/) may include it.
 */
#ifndef BASE_LOG_H
#define BASE_LOG_H

#include <stdbool.h>
#include <stddef.h>

#define LOG_LINE_MAX 2048

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };

enum log_format {
    LOG_TEXT = 0, /* "TS LEVEL msg key=value ..." */
    LOG_JSON,     /* {"ts","level","msg", fields...} */
};

/* Lines below `level` are dropped. The default is LOG_INFO. */
void log_set_level(enum log_level level);

/* True when a line at `level` would be written (to skip costly arguments). */
bool log_enabled(enum log_level level);

/* "debug", "info", "warn", "error" ("?" for anything else). */
const char *log_level_name(enum log_level level);

/* The default is LOG_TEXT. */
void log_set_format(enum log_format format);

/* Turn log_access() on or off. The default is on. */
void log_set_access(bool on);

/* True when log_access() writes. */
bool log_access_enabled(void);

/* Send the lines to the file `path` (created 0640 if missing, appended to), or to
 * stderr when `path` is NULL or "". Call it again with the same path to reopen the
 * file after it was renamed (log rotation): lines written meanwhile go to either the
 * old or the new file, none is lost or torn. Returns 0, or -1 with a one-line reason
 * in `err` (then the output is unchanged).
 *
 * When the lines go to stderr and stderr is systemd's journal (the device and inode
 * in $JOURNAL_STREAM are stderr's, as systemd sets them for a service), every line
 * starts with its syslog priority as sd-daemon(3) prefixes it -- <3> error, <4> warn,
 * <6> info and access, <7> debug -- which the journal takes off and keeps as the
 * entry's priority, so `journalctl -p warning` finds the warnings. */
int log_open(const char *path, char *err, size_t errlen);

/* Write "2024-01-31T12:00:00.123Z INFO message" (or its JSON object). */
void log_msg(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

/* ---- structured lines ---------------------------------------------------------- */

enum log_ftype { LOGF_T_STR, LOGF_T_INT, LOGF_T_DBL, LOGF_T_BOOL };

/* One key=value of a line. Keys are short [a-z0-9_] names other than "ts", "level"
 * and "msg"; a NULL string value is written as null (json) or - (text); a double as
 * %.3f (null when not finite). Build them with the initializers below:
 *   struct log_field f[] = {LOGF_STR("sku", sku), LOGF_INT("qty", qty)};
 *   log_fields(LOG_INFO, "order placed", f, 2);                                     */
struct log_field {
    const char *key;
    enum log_ftype type;
    union {
        const char *s;
        long long i;
        double d;
        bool b;
    } v;
};

#define LOGF_STR(k, val)                                                                 \
    {                                                                                    \
        .key = (k), .type = LOGF_T_STR, .v.s = (val)                                     \
    }
#define LOGF_INT(k, val)                                                                 \
    {                                                                                    \
        .key = (k), .type = LOGF_T_INT, .v.i = (long long)(val)                          \
    }
#define LOGF_DBL(k, val)                                                                 \
    {                                                                                    \
        .key = (k), .type = LOGF_T_DBL, .v.d = (double)(val)                             \
    }
#define LOGF_BOOL(k, val)                                                                \
    {                                                                                    \
        .key = (k), .type = LOGF_T_BOOL, .v.b = (val)                                    \
    }

/* A line of message `msg` (written as is, not a format) and `n` fields. */
void log_fields(enum log_level level, const char *msg, const struct log_field *fields,
                size_t n);

/* Like log_fields at LOG_INFO, but written whatever the level: the answer to an
 * operator's request (SIGUSR1's counters), which a quiet log level must not hide. */
void log_report(const char *msg, const struct log_field *fields, size_t n);

/* ---- the access log ------------------------------------------------------------ */

/* One HTTP request as the access log shows it. Strings may be NULL. */
struct log_access_line {
    const char *method, *path; /* NULL print as - */
    const char *query; /* the request-target after '?', as logged; NULL or "": none */
    int status;
    size_t bytes;
    double ms;
    const char *request_id; /* NULL or "": left out */
    const char *client;     /* "ADDR:PORT" of the peer; NULL or "": left out */
    const char *user_agent; /* NULL: left out */
};

/* One line per HTTP request, for api/ to call once the response is queued:
 *   text  ... INFO access method=GET path=/orders/A-1 query=x=1 status=200 bytes=123
 *         ms=0.412 request_id=rs-1 client=127.0.0.1:40312 user_agent=curl/7.88.1
 *   json  {...,"level":"info","msg":"access","method":"GET","path":"/orders/A-1",
 *          "query":"x=1","status":200,"bytes":123,"ms":0.412,"request_id":"rs-1",
 *          "client":"127.0.0.1:40312","user_agent":"curl/7.88.1"}
 * Fields that are absent are left out (method and path print as -). Written when the
 * access log is on (the access_log setting), whatever the log level: access_log=false
 * is the switch that silences it. Takes no lock. */
void log_access(const struct log_access_line *a);

/* ---- rate-limited lines -------------------------------------------------------- */

#define LOG_RL_KEYS 64    /* keys remembered at once */
#define LOG_RL_KEY_MAX 63 /* characters of a key that count */

/* For a failure that may repeat thousands of times a second (Redis down, a peer
 * resetting): like log_msg, but at most one line per second per `key`; the calls
 * dropped in between are counted and the next line written for that key carries
 * them as the field suppressed=N. `key` names the failure, not the occurrence (e.g.
 * "redis.connect", not the error text); it is copied, the caller keeps it.
 * Thread-safe (one mutex around a table of LOG_RL_KEYS keys; the line itself is
 * formatted and written outside it). When more keys than that are in use, the one
 * written longest ago is forgotten, with its count. A call below the log level
 * neither writes nor counts. A count is reported only by a later line for its key. */
void log_ratelimited(const char *key, enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
