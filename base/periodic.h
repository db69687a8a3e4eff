/* periodic.h -- a background thread that runs one function round after round, sleeping
 * between rounds: started once, woken early from any thread, stopped and joined once.
 *
 * The round function runs on the thread alone and returns how long to sleep before
 * the next round, in ms (0 or less: at once). A periodic_wake from any thread ends the
 * sleep under way, or the next one when it comes during a round: a wake is never lost,
 * and several wakes before the thread looks make one round. periodic_stop ends the
 * sleep at once, waits for the round under way to return (a long round may look at
 * periodic_stopping to end early) and joins the thread. Sleeps are measured on the
 * monotonic clock: a step of the wall clock neither stretches nor cuts them.
 *
 * The handle owns only the thread and its own mutex and condition variable; what the
 * round touches is the caller's (`arg`, borrowed: it must outlive the thread). The
 * periodic mutex is never held while the round runs, so a round may take its caller's
 * locks, and a caller may wake the thread while holding them.
 */
#ifndef BASE_PERIODIC_H
#define BASE_PERIODIC_H

#include <stdbool.h>
#include <stddef.h>

typedef struct periodic periodic;

/* One round of work, on the thread: `p` the thread's handle (for periodic_stopping),
 * `arg` as given to periodic_start. Returns the ms to sleep before the next round. */
typedef int (*periodic_fn)(periodic *p, void *arg);

/* Start a thread running fn(p, arg), the first round after `first_ms` (0: at once) or
 * at the first wake. NULL with `err` filled (strerror text) when the thread cannot be
 * started; nothing is left to free then. */
periodic *periodic_start(periodic_fn fn, void *arg, int first_ms, char *err,
                         size_t errlen);

/* Have the next round run now (or at once after the one under way). Any thread. */
void periodic_wake(periodic *p);

/* True once periodic_stop was called: for a round that loops, to end early. */
bool periodic_stopping(periodic *p);

/* Stop the thread (after the round under way), join it and free `p`. NULL is fine.
 * Not from the thread itself. */
void periodic_stop(periodic *p);

#endif
