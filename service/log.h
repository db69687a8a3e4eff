/* log.h -- a small leveled logger: one timestamped line per call on stderr.
 *
 * Thread-safe: each line is formatted into a private buffer and written with a
 * single write(2), so lines from concurrent threads never interleave. Lines longer
 * than LOG_LINE_MAX are truncated. The minimum level is the one piece of
 * process-wide state (like Redis's verbosity); it is set once at startup and read
 * with a relaxed atomic load.
 */
#ifndef SERVICE_LOG_H
#define SERVICE_LOG_H

#define LOG_LINE_MAX 1024

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };

/* Lines below `level` are dropped. The default is LOG_INFO. */
void log_set_level(enum log_level level);

/* Write "2024-01-31T12:00:00.123Z INFO message\n" to stderr. */
void log_msg(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
