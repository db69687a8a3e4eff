/* clock.c -- the monotonic clock, deadlines and sleeps (see clock.h). */
#include "segments/clock.h"

#include <errno.h>

#include "base/clock.h"

int64_t inv_now_ms(void)
{
    return base_now_ms();
}

struct timespec inv_deadline(int ms)
{
    return base_deadline(ms);
}

void inv_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

void inv_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}
