/* clock.h -- milliseconds on the monotonic clock (and the wall clock), for every layer.
 *
 * Durations (deadlines, backoffs, leases, cache ages) are measured on CLOCK_MONOTONIC,
 * so a step of the wall clock never stretches or cuts them. A leaf: no state, cannot
 * fail.
 */
#ifndef BASE_CLOCK_H
#define BASE_CLOCK_H

#include <time.h>

/* Milliseconds on the monotonic clock (from an unspecified start). */
long long base_now_ms(void);
/* Milliseconds since the Unix epoch on the wall clock: for times other processes
 * compare (a score in a shared set), never for durations. */
long long base_wall_ms(void);
/* The CLOCK_MONOTONIC instant `ms` milliseconds from now, for pthread_cond_timedwait on
 * a condition variable whose clock is CLOCK_MONOTONIC (pthread_condattr_setclock). */
struct timespec base_deadline(int ms);

#endif
