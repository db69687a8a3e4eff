/* logger.c -- where the Redis seam reports failures and reconnects (calls.h
 * rd_set_logger), for every file of segments/redis/ (a leaf: it calls none). */
#include "segments/redis/calls.h"

#include <stddef.h>

/* Set once, before any connection is used; read by every thread after. */
static rd_log_fn logger;

void rd_set_logger(rd_log_fn fn)
{
    logger = fn;
}

void rd_log(bool failure, const char *what, const char *detail)
{
    if (logger != NULL)
        logger(failure, what, detail);
}
