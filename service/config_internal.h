/* config_internal.h -- the settings table, shared by the configuration's files only.
 *
 * Nothing outside service/config.c, config_table.c and config_report.c includes this;
 * config.h is the contract. `cfg_table` (config_table.c) is the one list of what can be
 * set: each entry names its file key, environment variable and flag, how its text is
 * checked and where in `struct cfg` it is stored. config.c parses into it (defaults <
 * file < environment < flags, with one-line errors); config_report.c says it back
 * (warnings, values shown with secrets masked, differences, the usage). Read-only.
 */
#ifndef SERVICE_CONFIG_INTERNAL_H
#define SERVICE_CONFIG_INTERNAL_H

#include <stddef.h>

#include "service/config.h"

/* How a setting's text or JSON value is checked and stored. */
enum cfg_kind {
    K_INT,   /* int field, range-checked */
    K_STR,   /* char[] field of `cap` bytes */
    K_TOKEN, /* like K_STR, restricted to visible ASCII (it travels in a header) */
    K_BIND,  /* numeric IPv4/IPv6 address */
    K_ENUM,  /* one of `names`, stored as its index in an int-sized enum field */
    K_BOOL,  /* bool field: true or false (a JSON boolean in the file) */
    K_PATH,  /* a file path in char[cap]; "-" stores "" (stderr) */
    K_DSN,   /* like K_STR, a libpq connection string: shown with its password masked */
    K_REDIS, /* "host:port", "redis://[user[:password]@]host[:port][/db]",
                "redis-sentinel://[user[:password]@]h:p,h:p/name[/db]" or
                "unix:///path" into the redis_* fields */
};

struct cfg_setting {
    const char *key;  /* JSON key */
    const char *env;  /* environment variable, or NULL */
    const char *flag; /* long option, or NULL */
    enum cfg_kind kind;
    size_t off; /* offset of the field in struct cfg */
    size_t cap; /* K_STR/K_TOKEN/K_BIND: size of the field */
    long min, max;
    const char *const *names; /* K_ENUM: the values, NULL-terminated */
};

extern const struct cfg_setting cfg_table[];
extern const size_t cfg_ntable; /* entries in cfg_table */

#endif
