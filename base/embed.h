/* embed.h -- files compiled into the binary (base/embed.sh writes the tables).
 *
 * A table is an array of struct embed_file ending with {NULL, NULL, 0}; each file's
 * bytes are followed by a NUL that `len` does not count, so a text file is also a C
 * string. The tables are read-only and live as long as the program.
 */
#ifndef BASE_EMBED_H
#define BASE_EMBED_H

#include <stddef.h>

struct embed_file {
    const char *name; /* base name, e.g. "app.js"; NULL ends the table */
    const unsigned char *data;
    size_t len;
};

/* The file called `name` in `table`, or NULL. */
const struct embed_file *embed_find(const struct embed_file *table, const char *name);

#endif
