/* clock.c -- the monotonic clock and sleeps (see clock.h). */
#include "segments/clock.h"

#include <errno.h>

#include "base/clock.h"

int64_t inv_now_ms(void)
{
    return base_now_ms();
}

void inv_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}
