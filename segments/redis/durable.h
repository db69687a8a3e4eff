/* durable.h -- durability "replicated" in the blocking seam: WAIT 1 on each node a change
 * wrote, once per node, on the connection that wrote it (WAIT counts that connection's
 * writes). Private to segments/redis/: calls.c (resets, cancels, rd_wait and
 * rd_wait_step of calls.h) and adjust.c (the steps of an adjust) use it, so neither
 * calls the other for it. Every function blocks on `c` within its timeouts; none keeps
 * state. */
#ifndef SEG_REDIS_DURABLE_H
#define SEG_REDIS_DURABLE_H

#include "segments/redis/calls.h"
#include "segments/redis/cmd.h"

/* WAIT on the node of each of cmds[0..n-1] (WAIT commands, each freed here), once per
 * node: the fewest replicas any reached (0 when n is 0), or -1 when one gave no
 * answer. */
int durable_wait_nodes(rd_conn *c, struct rd_cmd *cmds, int n);

/* The code of a WAIT that reached `got` replicas at least: RD_OK (>= 1),
 * RD_NOT_REPLICATED (0), -1 (no answer, got < 0). */
int durable_code(int got);

#endif
