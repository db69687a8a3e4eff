/* skumode.c -- a SKU's mode and its words (see skumode.h). */
#include "segments/skumode.h"

#include <stddef.h>
#include <string.h>

const char *sku_mode_name(sku_mode m)
{
    return m == SKU_MODE_ATOMIC ? "atomic" : "lock";
}

int sku_mode_parse(const char *s, sku_mode *out)
{
    if (s != NULL && strcmp(s, "lock") == 0)
        *out = SKU_MODE_LOCK;
    else if (s != NULL && strcmp(s, "atomic") == 0)
        *out = SKU_MODE_ATOMIC;
    else
        return -1;
    return 0;
}

static const char *const lock_names[SKU_LOCK__COUNT] = {"redis", "redlock", "memcached",
                                                        "zookeeper"};

const char *sku_lock_name(sku_lock l)
{
    return l >= 0 && l < SKU_LOCK__COUNT ? lock_names[l] : "redis";
}

int sku_lock_parse(const char *s, sku_lock *out)
{
    if (s == NULL || s[0] == '\0') {
        *out = SKU_LOCK_STORE;
        return 0;
    }
    for (int l = 0; l < SKU_LOCK__COUNT; l++)
        if (strcmp(s, lock_names[l]) == 0) {
            *out = (sku_lock)l;
            return 0;
        }
    return -1;
}
