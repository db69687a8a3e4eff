/* embed.c -- look up a file compiled into the binary (embed.h). */
#include "base/embed.h"

#include <string.h>

const struct embed_file *embed_find(const struct embed_file *table, const char *name)
{
    for (const struct embed_file *f = table; f->name != NULL; f++)
        if (strcmp(f->name, name) == 0)
            return f;
    return NULL;
}
