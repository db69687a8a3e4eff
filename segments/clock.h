/* clock.h -- time for the domain: the monotonic clock, deadlines and sleeps.
 *
 * Every duration in segments/ is measured on CLOCK_MONOTONIC, so a step of the wall
 * clock (NTP, an operator) never stretches or cuts a lock wait, a lease or a cache
 * age. A condition variable that is waited on with a deadline from inv_deadline must
 * be made by inv_cond_init, which puts it on the same clock. Nothing here fails.
 * A leaf: it calls nothing else in segments/.
 */
#ifndef SEG_CLOCK_H
#define SEG_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Milliseconds on the monotonic clock. */
int64_t inv_now_ms(void);

/* The monotonic-clock instant `ms` milliseconds from now, for pthread_cond_timedwait
 * on a condition variable made by inv_cond_init. */
struct timespec inv_deadline(int ms);

/* Initialise `cv` to time out against the monotonic clock (immune to clock steps). */
void inv_cond_init(pthread_cond_t *cv);

/* Sleep `ms` milliseconds, whatever signals arrive meanwhile. */
void inv_sleep_ms(int ms);

#endif
