/* target.h -- a connection's own copy of its rd_target (calls.h).
 *
 * A connection (store.c's blocking one, link.c's asynchronous link, async_conn.c's
 * handle) outlives the strings its caller's target points to: it keeps the target
 * with host, unix_path, user and password copied into buffers of its own. Strings too
 * long for a buffer are cut; a NULL host is 127.0.0.1, NULL others "". */
#ifndef SEG_REDIS_TARGET_H
#define SEG_REDIS_TARGET_H

#include "segments/redis/calls.h"

struct rd_target_text {
    char host[256], unix_path[1024], user[256], password[256];
};

/* *to = *from, its four strings copied into *text and pointing there (to and text
 * belong together: move neither alone). */
void rd_target_copy(struct rd_target *to, struct rd_target_text *text,
                    const struct rd_target *from);

#endif
