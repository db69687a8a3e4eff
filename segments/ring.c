/* ring.c -- ring walk and backoff (see ring.h). */
#include "segments/ring.h"

int ring_segment(int start, int k, int n)
{
    return (start + k) % n;
}

int ring_backoff_ms(int round, uint32_t rnd, int remaining_ms)
{
    if (remaining_ms <= 0)
        return 0;
    int b = RING_BACKOFF_MAX_MS;
    if (round < 16 && (RING_BACKOFF_MIN_MS << round) < RING_BACKOFF_MAX_MS)
        b = RING_BACKOFF_MIN_MS << round;
    int lo = b / 2;
    int ms = lo + (int)(rnd % (uint32_t)(b - lo + 1));
    if (ms < 1)
        ms = 1;
    return ms < remaining_ms ? ms : remaining_ms;
}
