/* log.c -- timestamped, leveled, line-atomic logging to stderr. */
#include "service/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static atomic_int min_level = LOG_INFO;

static const char *const level_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

void log_set_level(enum log_level level)
{
    atomic_store_explicit(&min_level, (int)level, memory_order_relaxed);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if ((int)level < atomic_load_explicit(&min_level, memory_order_relaxed))
        return;
    if (level < LOG_DEBUG || level > LOG_ERROR)
        level = LOG_ERROR;

    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);

    char line[LOG_LINE_MAX + 1];
    size_t n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    int k = snprintf(line + n, sizeof(line) - n, ".%03ldZ %s ", ts.tv_nsec / 1000000L,
                     level_names[level]);
    if (k > 0)
        n += (size_t)k;

    va_list ap;
    va_start(ap, fmt);
    k = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
    va_end(ap);
    if (k > 0)
        n += (size_t)k;
    if (n > LOG_LINE_MAX - 1)
        n = LOG_LINE_MAX - 1; /* truncated: keep room for the newline */
    line[n++] = '\n';

    /* One write per line; a short write to stderr is not worth retrying. */
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}
