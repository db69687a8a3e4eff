/* target.c -- a connection's own copy of its rd_target (target.h). */
#include "segments/redis/target.h"

#include <stdio.h>

void rd_target_copy(struct rd_target *to, struct rd_target_text *text,
                    const struct rd_target *from)
{
    *to = *from;
    snprintf(text->host, sizeof text->host, "%s", from->host ? from->host : "127.0.0.1");
    snprintf(text->unix_path, sizeof text->unix_path, "%s",
             from->unix_path ? from->unix_path : "");
    snprintf(text->user, sizeof text->user, "%s", from->user ? from->user : "");
    snprintf(text->password, sizeof text->password, "%s",
             from->password ? from->password : "");
    to->host = text->host;
    to->unix_path = text->unix_path;
    to->user = text->user;
    to->password = text->password;
}
