/* xalloc.c -- allocation that aborts on out of memory (see xalloc.h). */
#include "base/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *check(void *p)
{
    if (p == NULL) {
        fputs("inventoryd: out of memory\n", stderr);
        abort();
    }
    return p;
}

void *seg_malloc(size_t n)
{
    return check(malloc(n ? n : 1));
}

void *seg_calloc(size_t n, size_t size)
{
    return check(calloc(n ? n : 1, size ? size : 1));
}

void *seg_realloc(void *p, size_t n)
{
    return check(realloc(p, n ? n : 1));
}

char *seg_strdup(const char *s)
{
    return check(strdup(s));
}

void *seg_must(void *p)
{
    return check(p);
}
