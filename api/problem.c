/* problem.c -- RFC 9457 problem details: Accept negotiation and the error rewrite. */
#include "api/problem.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *code, *title;
} titles[] = {
    {"bad_json", "The body is not a JSON object"},
    {"invalid_field", "A field, name or parameter is invalid"},
    {"bad_header", "A request header is invalid"},
    {"unauthorized", "A bearer token is needed"},
    {"not_found", "No such resource"},
    {"unknown_sku", "No such SKU"},
    {"method_not_allowed", "Method not allowed"},
    {"sold_out", "Sold out"},
    {"insufficient_stock", "Not enough stock for the quantity"},
    {"order_id_conflict", "The order id was used for another order"},
    {"request_id_conflict", "The request id was used for another write"},
    {"simulation_running", "A simulation of this SKU is running"},
    {"payload_too_large", "The body is too large"},
    {"uri_too_long", "The path is too long"},
    {"unsupported_media_type", "The body must be application/json"},
    {"too_many_simulations", "Too many simulated orders in flight"},
    {"headers_too_large", "The request head is too large"},
    {"internal", "Internal error"},
    {"busy", "No segment lock in time"},
    {"backend_unavailable", "The backend is unavailable"},
    {"not_replicated", "No replica confirmed the write in time"},
    {"shutting_down", "The service is shutting down"},
    {"too_many_streams", "Too many event streams"},
};

const char *api_problem_title(const char *code)
{
    for (size_t i = 0; i < sizeof titles / sizeof titles[0]; i++)
        if (strcmp(titles[i].code, code) == 0)
            return titles[i].title;
    return "Error";
}

/* The length of `s` (`n` bytes) up to its first `c`, or n. */
static size_t upto(const char *s, size_t n, char c)
{
    size_t i = 0;
    while (i < n && s[i] != c)
        i++;
    return i;
}

/* `s` (`*n` bytes) without the spaces and tabs around it. */
static const char *trim(const char *s, size_t *n)
{
    while (*n > 0 && (*s == ' ' || *s == '\t')) {
        s++;
        (*n)--;
    }
    while (*n > 0 && (s[*n - 1] == ' ' || s[*n - 1] == '\t'))
        (*n)--;
    return s;
}

/* The q of a media range's parameters `p` (`n` bytes, after the type's ';'): 1 when
 * it has none, -1 when it is malformed (the range is then ignored). */
static double range_q(const char *p, size_t n)
{
    double q = 1.0;
    while (n > 0) {
        size_t k = upto(p, n, ';'), m = k;
        const char *param = trim(p, &m);
        if (m >= 2 && tolower((unsigned char)param[0]) == 'q' && param[1] == '=') {
            char num[8];
            if (m - 2 == 0 || m - 2 >= sizeof num)
                return -1;
            memcpy(num, param + 2, m - 2);
            num[m - 2] = '\0';
            if (strspn(num, "0123456789.") != m - 2)
                return -1;
            q = strtod(num, NULL);
            if (q < 0 || q > 1)
                return -1;
        }
        p += k < n ? k + 1 : k;
        n -= k < n ? k + 1 : k;
    }
    return q;
}

bool api_problem_preferred(const char *accept)
{
    if (accept == NULL)
        return false;
    double problem = 0, json = 0;
    size_t left = strlen(accept);
    for (const char *p = accept; left > 0;) {
        size_t len = upto(p, left, ','), semi = upto(p, len, ';'), tl = semi;
        const char *type = trim(p, &tl);
        double q = semi < len ? range_q(p + semi + 1, len - semi - 1) : 1.0;
#define IS(s) (tl == sizeof(s) - 1 && strncasecmp(type, s, tl) == 0)
        if (q >= 0 && IS("application/problem+json") && q > problem)
            problem = q;
        else if (q >= 0 && (IS("application/json") || IS("application/*") || IS("*/*")) &&
                 q > json)
            json = q;
#undef IS
        p += len < left ? len + 1 : len;
        left -= len < left ? len + 1 : len;
    }
    return problem > 0 && problem >= json;
}

void api_problem_apply(struct api_reply *r)
{
    if (!r->error || r->body == NULL)
        return;
    json_t *in = json_loadb(r->body, r->body_len, 0, NULL);
    const char *code = json_string_value(json_object_get(in, "error"));
    const char *detail = json_string_value(json_object_get(in, "detail"));
    if (code == NULL || detail == NULL) { /* not expected: api_reply_error made it */
        json_decref(in);
        return;
    }
    char type[128];
    snprintf(type, sizeof type, "%s%s", API_PROBLEM_TYPE_PREFIX, code);
    json_t *out = json_pack("{s:s, s:s, s:i, s:s, s:s}", "type", type, "title",
                            api_problem_title(code), "status", r->status, "detail",
                            detail, "code", code);
    char *text = out != NULL ? json_dumps(out, JSON_COMPACT) : NULL;
    json_decref(out);
    json_decref(in);
    if (text == NULL) {
        fputs("inventoryd: out of memory\n", stderr);
        abort();
    }
    api_reply_raw(r, r->status, "application/problem+json", text, strlen(text));
}
