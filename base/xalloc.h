/* xalloc.h -- allocation that cannot fail: out of memory aborts with a message.
 *
 * A service that cannot allocate a few bytes cannot do anything useful either, so
 * the domain never threads allocation failures through its results (as Redis's
 * zmalloc). Free with free().
 */
#ifndef BASE_XALLOC_H
#define BASE_XALLOC_H

#include <stddef.h>

void *seg_malloc(size_t n);
void *seg_calloc(size_t n, size_t size);
void *seg_realloc(void *p, size_t n);
char *seg_strdup(const char *s);
/* `p`, or abort with the same message when it is NULL: for what a library allocated
 * (json_object(), json_dumps(), strdup()). */
void *seg_must(void *p);

#endif
