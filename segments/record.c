/* record.c -- the order record (see record.h). */
#include "segments/record.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/text.h"
#include "base/xalloc.h"

char *record_build(const char *id, const char *sku, long long qty, int n, const int *seg,
                   const long long *part, const char *status)
{
    /* Built without printf (base/text.h): one per order. Names are at most
     * SEG_NAME_MAX, so 256 bytes hold all but the parts. */
    size_t cap = 256 + (size_t)n * 48;
    char *buf = seg_malloc(cap);
    struct text t = text_at(buf, cap);
    text_str(&t, "{\"order_id\":\"");
    text_str(&t, id);
    text_str(&t, "\",\"sku\":\"");
    text_str(&t, sku);
    text_str(&t, "\",\"qty\":");
    text_ll(&t, qty);
    text_str(&t, ",\"segment\":");
    text_ll(&t, seg[0]);
    text_str(&t, ",\"segments\":[");
    for (int k = 0; k < n; k++) {
        text_str(&t, k ? ",{\"segment\":" : "{\"segment\":");
        text_ll(&t, seg[k]);
        text_str(&t, ",\"qty\":");
        text_ll(&t, part[k]);
        text_str(&t, "}");
    }
    text_str(&t, "],\"status\":\"");
    text_str(&t, status);
    text_str(&t, "\"}");
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
