/* ring.h -- the order in which an order visits segments, and how long it waits.
 *
 * An order starts at a random segment and walks the ring once per round, so load
 * spreads evenly and no segment is everyone's first choice. After a round that
 * found every candidate busy it waits a jittered, exponentially growing time
 * (no hot spinning, no herd), never past the caller's deadline.
 */
#ifndef SEG_RING_H
#define SEG_RING_H

#include <stdbool.h>
#include <stdint.h>

#define RING_BACKOFF_MIN_MS 1
#define RING_BACKOFF_MAX_MS 32

/* Segments have homes: with `homes` event loops in a process, segment i is at home
 * on loop i % homes (on every loop when homes <= 1 or n < homes). A loop's orders
 * visit its home segments first, so the loops of one process meet in Redis only
 * when one of them runs out of its own (ltab.h: a claim on a segment away from home
 * is not handed on).
 *
 * ring_home: segment i of n is at home on loop `home`. ring_segment: the k-th
 * segment visited (0 <= k < n) by a round of loop `home` starting at `start`
 * (0 <= start < n): its home segments in turn from the start-th, then the others in
 * turn, each once. ring_start: the start whose round visits home segment `seg`
 * first. */
bool ring_home(int i, int n, int home, int homes);
int ring_segment(int start, int k, int n, int home, int homes);
int ring_start(int seg, int n, int home, int homes);

/* Wait before round `round` + 1 (round >= 0): uniformly in [b/2, b] where
 * b = min(MIN << round, MAX), chosen by `rnd`; at most `remaining_ms`, at least 1
 * when remaining_ms >= 1, 0 when remaining_ms <= 0. */
int ring_backoff_ms(int round, uint32_t rnd, int remaining_ms);

/* The parts of an order of `qty` that no single segment can fill, from seen[0..n-1]
 * (the stock last seen per segment; < 0 unknown): the largest segments first until
 * qty is covered, then put in ascending index order (the order their locks are
 * taken in: no deadlock). Fills seg[] and part[] (n entries each) and returns how
 * many parts, or 0 when the segments seen cannot cover qty together. */
int ring_plan_parts(const long long *seen, int n, long long qty, int *seg,
                    long long *part);

#endif
