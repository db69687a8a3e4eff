/* skuset.c -- the bounded set of SKU entries under both SKU tables (see skuset.h). */
#include "segments/skuset.h"

#include <stdio.h>
#include <string.h>

static struct skuset_link **bucket_of(struct skuset *t, const char *name)
{
    return &t->bucket[seg_name_hash(name) % SKUSET_BUCKETS];
}

struct skuset_link *skuset_find(const struct skuset *t, const char *name)
{
    for (struct skuset_link *l = t->bucket[seg_name_hash(name) % SKUSET_BUCKETS];
         l != NULL; l = l->next)
        if (strcmp(l->name, name) == 0)
            return l;
    return NULL;
}

void skuset_add(struct skuset *t, struct skuset_link *l, const char *name)
{
    snprintf(l->name, sizeof l->name, "%s", name);
    l->older = l->newer = NULL;
    l->idle = false;
    struct skuset_link **b = bucket_of(t, name);
    l->next = *b;
    *b = l;
}

void skuset_busy(struct skuset *t, struct skuset_link *l)
{
    if (!l->idle)
        return;
    *(l->older != NULL ? &l->older->newer : &t->oldest) = l->newer;
    *(l->newer != NULL ? &l->newer->older : &t->newest) = l->older;
    l->older = l->newer = NULL;
    l->idle = false;
    t->idle--;
}

void skuset_idle(struct skuset *t, struct skuset_link *l)
{
    skuset_busy(t, l);
    l->older = t->newest;
    *(t->newest != NULL ? &t->newest->newer : &t->oldest) = l;
    t->newest = l;
    l->idle = true;
    t->idle++;
}

void skuset_remove(struct skuset *t, struct skuset_link *l)
{
    struct skuset_link **p = bucket_of(t, l->name);
    while (*p != l)
        p = &(*p)->next;
    *p = l->next;
    skuset_busy(t, l);
}

struct skuset_link *skuset_over(const struct skuset *t)
{
    return t->idle > SKUSET_IDLE_MAX ? t->oldest : NULL;
}

void skuset_foreach(struct skuset *t, void (*fn)(struct skuset_link *l, void *arg),
                    void *arg)
{
    for (int b = 0; b < SKUSET_BUCKETS; b++)
        for (struct skuset_link *l = t->bucket[b], *next; l != NULL; l = next) {
            next = l->next;
            fn(l, arg);
        }
}
