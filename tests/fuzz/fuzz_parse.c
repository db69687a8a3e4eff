/* fuzz_parse.c -- libFuzzer target for request validation (api/parse.c).
 *
 * The first input byte picks the function, the rest is its input:
 *   0 api_parse_order (and its fast path against jansson's)
 *   1 api_parse_sku_config   2 api_parse_name
 *   3 api_is_json_content_type                       4 api_bearer_matches
 *     (for 4 the input is "authorization\0token")     5 api_parse_simulate
 * Besides memory errors (ASan/UBSan), every result is checked against the contract
 * in api/parse.h: an accepted value is in range and a name is safe to put in a key;
 * a rejection has a known code and a printable detail. A broken contract aborts.
 *
 *   make fuzz FUZZ_SECONDS=60
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/parse.h"
#include "segments/redis/keys.h"

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "fuzz_parse: contract broken: %s (line %d)\n", #cond,        \
                    __LINE__);                                                           \
            abort();                                                                     \
        }                                                                                \
    } while (0)

/* A copy of `data` in a buffer of exactly `len` bytes (no NUL after it), so a read
 * past the end is caught; or NUL-terminated when `terminate`. Caller frees. */
static char *copy(const uint8_t *data, size_t len, int terminate)
{
    char *p = malloc(len + (terminate ? 1 : 0) + 1);
    if (p == NULL)
        abort();
    if (len > 0)
        memcpy(p, data, len);
    if (terminate)
        p[len] = '\0';
    return p;
}

static void check_error(const struct api_parse_error *err)
{
    CHECK(err->code != NULL);
    CHECK(strcmp(err->code, "bad_json") == 0 || strcmp(err->code, "invalid_field") == 0);
    size_t n = strnlen(err->detail, sizeof err->detail);
    CHECK(n < sizeof err->detail);
    for (size_t i = 0; i < n; i++)
        CHECK((unsigned char)err->detail[i] >= 0x20 &&
              (unsigned char)err->detail[i] < 0x7f);
}

/* A valid name must make keys with exactly the one hash tag the schema puts there,
 * and nothing a glob or a protocol line could trip on. */
static void check_name(const char *name)
{
    CHECK(seg_valid_name(name));
    size_t n = strlen(name);
    CHECK(n >= 1 && n <= SEG_NAME_MAX);
    char key[SEG_KEY_MAX];
    seg_key_lock(key, name, SEG_MAX_SEGMENTS - 1);
    CHECK(strlen(key) < SEG_KEY_MAX - 1);
    CHECK(strchr(key, '{') == strrchr(key, '{') && strchr(key, '}') == strrchr(key, '}'));
    CHECK(strpbrk(key, "*?[] \r\n\\\"") == NULL);
    seg_key_order(key, name);
    CHECK(strchr(key, '{') == strrchr(key, '{') && strchr(key, '}') == strrchr(key, '}'));
}

static void fuzz_order(const uint8_t *data, size_t len)
{
    char *body = copy(data, len, 0);
    struct api_order_body out;
    struct api_parse_error err = {NULL, ""};
    memset(&out, 0x5a, sizeof out);
    if (api_parse_order(body, len, &out, &err) == 0) {
        check_name(out.sku);
        CHECK(out.qty >= 1 && out.qty <= ORDER_QTY_MAX);
        CHECK(out.order_id[0] == '\0' || seg_valid_name(out.order_id));
        if (out.order_id[0] != '\0')
            check_name(out.order_id);
        /* Whatever was accepted, the body parsed whole: it holds the name. */
        CHECK(memmem(body, len, out.sku, strlen(out.sku)) != NULL);
    } else {
        check_error(&err);
    }
    /* The fast path accepts only what jansson accepts, with the same values. */
    struct api_order_body fast, slow;
    if (api_parse_order_fast(body, len, &fast)) {
        CHECK(api_parse_order_json(body, len, &slow, &err) == 0);
        CHECK(strcmp(fast.sku, slow.sku) == 0 && fast.qty == slow.qty &&
              strcmp(fast.order_id, slow.order_id) == 0);
    }
    free(body);
}

static void fuzz_sku_config(const uint8_t *data, size_t len)
{
    char *body = copy(data, len, 0);
    struct sku_config out, out_r;
    char rid[SEG_NAME_MAX + 1], rid_r[SEG_NAME_MAX + 1];
    struct api_parse_error err = {NULL, ""}, err_r = {NULL, ""};
    int rc = api_parse_sku_config(body, len, false, &out, rid, &err);
    /* The durability default changes nothing but a durability the body left out. */
    CHECK(api_parse_sku_config(body, len, true, &out_r, rid_r, &err_r) == rc);
    if (rc == 0) {
        CHECK(rid[0] == '\0' || seg_valid_name(rid));
        CHECK(out.stock >= 0 && out.stock <= SKU_STOCK_MAX);
        CHECK(out.segments >= 1 && out.segments <= SEG_MAX_SEGMENTS);
        CHECK(out.hold_ms >= 0 && out.hold_ms <= SKU_HOLD_MAX_MS);
        CHECK(out.mode == SKU_MODE_LOCK || out.mode == SKU_MODE_ATOMIC);
        CHECK(out_r.stock == out.stock && out_r.segments == out.segments &&
              out_r.hold_ms == out.hold_ms && out_r.mode == out.mode &&
              out_r.rebalance == out.rebalance && strcmp(rid_r, rid) == 0);
        CHECK(out_r.replicated == out.replicated ||
              (!out.replicated && out_r.replicated));
    } else {
        check_error(&err);
    }
    free(body);
}

static void fuzz_simulate(const uint8_t *data, size_t len)
{
    char *body = copy(data, len, 0);
    struct api_sim_body out;
    struct api_parse_error err = {NULL, ""};
    if (api_parse_simulate(body, len, &out, &err) == 0) {
        CHECK(out.orders >= 1 && out.orders <= API_SIM_ORDERS_MAX);
        CHECK(out.concurrency >= 1 && out.concurrency <= API_SIM_CONCURRENCY_MAX);
        CHECK(out.qty >= 1 && out.qty <= ORDER_QTY_MAX);
    } else {
        check_error(&err);
    }
    free(body);
}

static void fuzz_name(const uint8_t *data, size_t len)
{
    char *s = copy(data, len, 1);
    struct api_parse_error err = {NULL, ""};
    /* A C string: what follows a NUL is the caller's business (api/server.c must
     * refuse a path whose decoded name holds one). */
    if (api_parse_name("sku", s, &err) == 0) {
        check_name(s);
    } else {
        check_error(&err);
        CHECK(strcmp(err.code, "invalid_field") == 0);
    }
    free(s);
}

/* The contract of api_is_json_content_type, written out the slow way. */
static int json_ct_reference(const char *ct)
{
    while (*ct == ' ' || *ct == '\t')
        ct++;
    if (strncasecmp(ct, "application/json", 16) != 0)
        return 0;
    ct += 16;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    return *ct == '\0' || *ct == ';';
}

static void fuzz_content_type(const uint8_t *data, size_t len)
{
    char *s = copy(data, len, 1);
    CHECK(api_is_json_content_type(s) == (json_ct_reference(s) != 0));
    free(s);
}

static void fuzz_bearer(const uint8_t *data, size_t len)
{
    const uint8_t *nul = memchr(data, 0, len);
    size_t alen = nul != NULL ? (size_t)(nul - data) : len;
    char *auth = copy(data, alen, 1);
    char *token = nul != NULL ? copy(nul + 1, len - alen - 1, 1) : copy(data, 0, 1);
    int want = token[0] != '\0' && strncasecmp(auth, "Bearer ", 7) == 0 &&
               strcmp(auth + 7, token) == 0;
    CHECK(api_bearer_matches(auth, token) == (want != 0));
    CHECK(!api_bearer_matches(auth, ""));
    CHECK(!api_bearer_matches(NULL, token));
    free(auth);
    free(token);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const uint8_t *in = data + 1;
    size_t len = size - 1;
    switch (data[0] % 6) {
    case 0:
        fuzz_order(in, len);
        break;
    case 1:
        fuzz_sku_config(in, len);
        break;
    case 2:
        fuzz_name(in, len);
        break;
    case 3:
        fuzz_content_type(in, len);
        break;
    case 5:
        fuzz_simulate(in, len);
        break;
    default:
        fuzz_bearer(in, len);
        break;
    }
    return 0;
}
