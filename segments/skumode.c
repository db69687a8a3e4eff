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
