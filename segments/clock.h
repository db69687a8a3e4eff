/* clock.h -- time for the domain: the monotonic clock and sleeps.
 *
 * Every duration in segments/ is measured on CLOCK_MONOTONIC, so a step of the wall
 * clock (NTP, an operator) never stretches or cuts a lock wait, a lease or a cache
 * age. Nothing here fails.
 * A leaf: it calls nothing else in segments/.
 */
#ifndef SEG_CLOCK_H
#define SEG_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Milliseconds on the monotonic clock. */
int64_t inv_now_ms(void);

/* Sleep `ms` milliseconds, whatever signals arrive meanwhile. */
void inv_sleep_ms(int ms);

#endif
