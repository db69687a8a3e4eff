/* cmd.h -- one Redis command as an argument vector, built once and sent by either
 * connection (store.c blocking, async.c on an event loop). Private to segments/redis/.
 *
 * A command is a plain one ("SET", key, ...) or a script call: the script's id, its
 * keys and its arguments, sent as EVALSHA <sha> <nkeys> keys... args... when the
 * connection knows the script's SHA, and as EVAL <source> ... otherwise (also the
 * answer to NOSCRIPT). Every string is copied into the command's own storage, so a
 * command outlives the buffers it was built from (an asynchronous send keeps it
 * until the reply). Out of memory aborts.
 */
#ifndef SEG_REDIS_CMD_H
#define SEG_REDIS_CMD_H

#include <stdbool.h>
#include <stddef.h>

#include "segments/redis/scripts.h"

struct rd_cmd {
    int script; /* enum script_id, or -1 for a plain command */
    int nkeys;
    int slot;      /* the cluster slot of its first key; -1 when it has none */
    int argc, cap; /* argv[0..argc): plain: the command; script: keys then args */
    char **argv;
    size_t *len;
    char nkeys_text[16];
};

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

/* The vector to send: for a script, EVALSHA with `sha` (or EVAL with the source when
 * `sha` is NULL or ""), then the keys and arguments. Valid until the next call on
 * `c`. */
int cmd_argv(struct rd_cmd *c, const char *sha, const char ***argv, const size_t **len);

void cmd_free(struct rd_cmd *c);

#endif
