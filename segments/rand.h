/* rand.h -- randomness for the domain: lock tokens, attempt and order ids, epochs,
 * and the cheap per-connection generator behind ring starts and backoff jitter.
 *
 * Ids and epochs come from the kernel (getrandom), so two processes, or one process
 * restarted, never draw the same ones. The per-connection generator (xorshift64*,
 * seeded from the kernel by inv_rand_seed) is not for ids: it only spreads load. Its
 * state lives in the `inv_conn` (internal.h) and, like the connection, belongs to one
 * thread at a time. The kernel generator failing aborts the process with a message.
 * A leaf: it calls nothing else in segments/.
 */
#ifndef SEG_RAND_H
#define SEG_RAND_H

#include <stdint.h>

#include "segments/inventory.h"

/* Seed c's generator and its token id (the prefix of its lock tokens) from the
 * kernel; called once per connection, by inv_conn_create (and by the sweeper for
 * its own). */
void inv_rand_seed(inv_conn *c);

/* A uniformly random integer in [0, n) from the connection's generator; n > 0. */
uint32_t inv_rand(inv_conn *c, uint32_t n);

/* A fresh lock token (or attempt id), unique across every connection and instance:
 * the connection's random id and a counter, 32 hex digits. */
void inv_new_token(inv_conn *c, char token[33]);

/* Fill `out` (33 bytes) with 32 hex digits of fresh randomness from the kernel. */
void inv_random_hex(char out[33]);

/* A fresh SKU epoch: uniformly random in [1, 2^52), so epochs are never reused (a
 * SKU deleted and created again, a Redis that lost its data) and every generation
 * counted up from one stays exact in a Lua number. */
long long inv_new_epoch(void);

#endif
