/* record.c -- the order record (see record.h). */
#include "segments/record.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/xalloc.h"

char *record_build(const char *id, const char *sku, long long qty, int n, const int *seg,
                   const long long *part, const char *status)
{
    size_t cap = 256 + (size_t)n * 48, len = 0;
    char *buf = seg_malloc(cap);
    len += (size_t)snprintf(buf, cap,
                            "{\"order_id\":\"%s\",\"sku\":\"%s\",\"qty\":%lld,"
                            "\"segment\":%d,\"segments\":[",
                            id, sku, qty, seg[0]);
    for (int k = 0; k < n; k++)
        len += (size_t)snprintf(buf + len, cap - len, "%s{\"segment\":%d,\"qty\":%lld}",
                                k ? "," : "", seg[k], part[k]);
    snprintf(buf + len, cap - len, "],\"status\":\"%s\"}", status);
    return buf;
}

bool record_same_order(const char *record, const char *sku, long long qty)
{
    json_t *o = json_loads(record, 0, NULL);
    const char *s = json_string_value(json_object_get(o, "sku"));
    json_int_t q = json_integer_value(json_object_get(o, "qty"));
    bool same = s != NULL && strcmp(s, sku) == 0 && q == qty;
    json_decref(o);
    return same;
}
