/* cmd.h -- one Redis command as an argument vector, built once and sent by either
 * connection (async.c's links; store.c's blocking calls go through them). Private to
 * segments/redis/.
 *
 * A command is a plain one ("SET", key, ...) or a script call: the script's id, its
 * keys and its arguments, sent as EVALSHA <sha> <nkeys> keys... args... when the
 * connection knows the script's SHA, and as EVAL <source> ... otherwise (also the
 * answer to NOSCRIPT). Every string is encoded as it is added, in the Redis protocol,
 * into the command's own buffer, so a command outlives the buffers it was built from
 * (an asynchronous send keeps it until the reply) and goes out as it is: no argument
 * vector, no copy per argument, no formatting by hiredis. Out of memory aborts.
 */
#ifndef SEG_REDIS_CMD_H
#define SEG_REDIS_CMD_H

#include <stdbool.h>
#include <stddef.h>

#include "segments/redis/scripts.h"

struct rd_cmd {
    int script; /* enum script_id, or -1 for a plain command */
    int nkeys;
    int slot; /* the cluster slot of its first key; -1 when it has none */
    int argc; /* elements in `buf` after the head room: plain: the command; script:
                 keys then args */
    /* The elements as the Redis protocol's bulk strings ("$3\r\nfoo\r\n"), after
     * CMD_HEAD bytes left free for the array header and EVALSHA's three elements,
     * which cmd_format writes in front of them. */
    char *buf;
    size_t used, cap;
    char *eval; /* the EVAL form (the script's source inline), made when asked for */
};

/* Room before the elements: "*N\r\n$7\r\nEVALSHA\r\n$40\r\n<sha>\r\n$N\r\nN\r\n". */
#define CMD_HEAD 96

/* Start a plain command (`name` is its first word) or a script call. */
void cmd_plain(struct rd_cmd *c, const char *name);
void cmd_script(struct rd_cmd *c, enum script_id id);

/* Append a key (scripts: before any argument; plain commands: at its place among the
 * arguments) or an argument. The first key gives the command its slot, which is where
 * a cluster routes it: a command's keys must share that slot. */
void cmd_key(struct rd_cmd *c, const char *key);
void cmd_arg(struct rd_cmd *c, const char *arg);
void cmd_argll(struct rd_cmd *c, long long v);
/* Route a keyless command (WAIT) as if it had `key`: to the node of key's slot. */
void cmd_route_as(struct rd_cmd *c, const char *key);

/* The command in the Redis protocol, ready to write (hiredis's FormattedCommand
 * calls): for a script, EVALSHA with `sha` (or EVAL with the source when `sha` is
 * NULL or ""), then the keys and arguments. *out is valid until the next call on
 * `c`; returns its length. */
size_t cmd_format(struct rd_cmd *c, const char *sha, const char **out);

void cmd_free(struct rd_cmd *c);

#endif
