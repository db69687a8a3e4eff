/* mclock.h -- a lock service (segments/locksvc.h) on one memcached server: `add` with
 * an expiry, given up and renewed only by its owner through gets + cas.
 *
 * Target: "HOST:PORT" of one memcached 1.6 (text protocol, via libmemcached 1.1).
 *
 * Key schema: `lks:NAME` = the holder's token (32 hex digits, fresh from the kernel per
 * acquire), flags 0, expiry in whole seconds.
 *
 * Protocol (`enum mc_state` in mclock.c):
 * - acquire: `add key token E`: stored = won; not stored = held elsewhere, tried again
 *   after a random 5-30 ms until wait_ms (then LKS_BUSY); no answer = LKS_UNAVAIL (and
 *   our token is deleted, compare-and-delete, in case the add was stored after all).
 * - renew: `gets key`; ours (the value is our token) -> `cas key token E <cas>`:
 *   LKS_OK; another value, no key or a cas that lost -> LKS_LOST (the lost callback
 *   runs first). `touch` would extend whoever holds the key now, so it is not used.
 * - release: `gets key`; ours -> `cas key "" -1 <cas>`: a negative expiry makes the
 *   item expire at once, so this is an atomic compare-and-delete (memcached's meta
 *   delete with a CAS would do the same, but libmemcached 1.1.4 cannot send meta
 *   commands). Not ours -> LKS_LOST, and nothing is touched.
 * - a hold not renewed by its valid_until is lost: its lost callback runs then.
 *
 * Whole seconds. memcached's clock ticks once a second, so an item set with expiry E
 * lives between E-1 and E+1 s. E = ceil(ttl/1000) + 1, so memcached keeps the lock at
 * least ceil(ttl) and at most ceil(ttl) + 2 s; the holder believes it for ttl - drift
 * (drift = ttl/100 + 2 ms) from the moment it asked, which always ends first. A holder
 * that dies leaves the lock taken for up to ttl + 2 s.
 *
 * Evictions. memcached may evict the item (LRU, memory full) before it expires: the
 * next `add` then wins while the holder still believes it holds, and learns of it only
 * at its next renew. Like a restart of memcached (everything forgotten), only the stock
 * store's fence makes that harmless. There is no fencing number here (caps 0, fence 0).
 *
 * Threads. libmemcached blocks, so no call runs on the loop: a pool of MC_THREADS
 * threads per handle, each with its own memcached_st (500 ms connect and I/O
 * time-outs), takes the calls from a bounded queue (mutex + condition; a call that
 * finds it full is answered LKS_UNAVAIL). A finished call goes on a done list (same
 * mutex) and the worker writes a byte to a pipe whose read end is an event on the
 * loop; the loop drains the pipe, takes the list and answers. A call's record belongs
 * to the pool from queueing until it is on the done list, to the loop otherwise.
 *
 * free: joins the threads (a call under way finishes first, at most its time-out),
 * answers every pending call LKS_UNAVAIL; holds are not released: they expire.
 */
#ifndef SEG_MCLOCK_H
#define SEG_MCLOCK_H

#include "segments/locksvc.h"

extern const struct lks_ops lks_memcached_ops;

#endif
