/* harness_view.c -- the SKU view checked under a storm of short holds (harness_view.h).
 */
#include "tests/harness_view.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/harness.h"

struct storm {
    const int *ports;
    int nports;
    const char *token, *sku;
    long long until_ms; /* CLOCK_MONOTONIC */
    atomic_bool stop;
    atomic_llong steps;
    bool restocks; /* churner 1 restocks instead of placing holds */
    int views, bad, unread;
    char first[320];
};

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long long sum_of(const json_t *a)
{
    long long s = 0;
    for (size_t i = 0; i < json_array_size(a); i++)
        s += json_integer_value(json_array_get(a, i));
    return s;
}

/* One view checked: 0 consistent, 1 not (its numbers into s->first when the first),
 * -1 unreadable. */
static int check_view(struct storm *s, json_t *j)
{
    long long initial = h_jint(j, "initial"), remaining = h_jint(j, "remaining"),
              reserved = h_jint(j, "reserved"), sold = h_jint(j, "sold");
    const json_t *st = json_object_get(j, "segment_stock"),
                 *rs = json_object_get(j, "segment_reserved"),
                 *sd = json_object_get(j, "segment_sold");
    if (initial < 0 || remaining < 0 || reserved < 0 || sold < 0 || !json_is_array(rs))
        return -1;
    long long segs = sum_of(st) + sum_of(rs) + sum_of(sd);
    if (remaining + reserved + sold == initial && segs == initial &&
        sum_of(rs) == reserved)
        return 0;
    if (s->first[0] == '\0')
        snprintf(s->first, sizeof s->first,
                 "view %d: remaining %lld + reserved %lld + sold %lld = %lld, initial "
                 "%lld; segments sum to %lld",
                 s->views, remaining, reserved, sold, remaining + reserved + sold,
                 initial, segs);
    return 1;
}

static void viewer(struct storm *s)
{
    while (mono_ms() < s->until_ms) {
        json_t *j = h_get_sku(s->ports[s->views % s->nports], s->token, s->sku);
        int got = j != NULL ? check_view(s, j) : -1;
        json_decref(j);
        if (got < 0)
            s->unread++;
        else
            s->bad += got;
        s->views++;
    }
    atomic_store(&s->stop, true);
}

static int step(int port, const char *method, const char *path, const char *body)
{
    struct h_resp r;
    int st = h_req(port, method, path, NULL, body, &r);
    h_resp_free(&r);
    return st;
}

/* Place, then release (k % 3 == 0), confirm (1) or leave to expire (2). */
static void churner(struct storm *s, int idx)
{
    for (int k = 0; !atomic_load(&s->stop); k++) {
        int port = s->ports[(idx + k) % s->nports];
        char id[64], body[192], path[96];
        snprintf(id, sizeof id, "vs-%s-%d-%d", s->sku, idx, k);
        snprintf(body, sizeof body,
                 "{\"sku\":\"%s\",\"qty\":1,\"ttl_s\":1,\"reservation_id\":\"%s\"}",
                 s->sku, id);
        if (step(port, "POST", "/reservations", body) != 201)
            continue;
        atomic_fetch_add(&s->steps, 1);
        if (k % 3 == 2)
            continue;
        snprintf(path, sizeof path, "/reservations/%s%s", id, k % 3 ? "/confirm" : "");
        if (step(port, k % 3 ? "POST" : "DELETE", path, NULL) / 100 == 2)
            atomic_fetch_add(&s->steps, 1);
    }
}

/* Restock 1 unit at a time, each a step that moves initial and remaining together. */
static void restocker(struct storm *s)
{
    char path[96];
    snprintf(path, sizeof path, "/admin/skus/%s/restock", s->sku);
    for (int k = 0; !atomic_load(&s->stop); k++) {
        struct h_resp r;
        int st =
            h_req(s->ports[k % s->nports], "POST", path, s->token, "{\"qty\":1}", &r);
        h_resp_free(&r);
        if (st == 200)
            atomic_fetch_add(&s->steps, 1);
    }
}

static void run(int idx, void *ctx)
{
    struct storm *s = ctx;
    if (idx == 0)
        viewer(s);
    else if (idx == 1 && s->restocks)
        restocker(s);
    else
        churner(s, idx);
}

static int storm(const int *ports, int nports, const char *token, const char *sku,
                 int churners, int ms, bool restocks, struct h_view_storm *out)
{
    struct storm *s = calloc(1, sizeof *s);
    if (s == NULL)
        return -1;
    s->ports = ports;
    s->nports = nports;
    s->token = token;
    s->sku = sku;
    s->restocks = restocks;
    s->until_ms = mono_ms() + ms;
    atomic_init(&s->stop, false);
    atomic_init(&s->steps, 0);
    int rc = h_parallel(churners + 1, run, s);
    *out = (struct h_view_storm){s->views, s->bad, atomic_load(&s->steps), ""};
    memcpy(out->first, s->first, sizeof out->first);
    if (s->unread > 0)
        fprintf(stderr, "view storm: %d views unreadable\n", s->unread);
    rc = rc != 0 || s->unread > 0 ? -1 : 0;
    free(s);
    return rc;
}

int h_view_storm(const int *ports, int nports, const char *token, const char *sku,
                 int churners, int ms, struct h_view_storm *out)
{
    return storm(ports, nports, token, sku, churners, ms, false, out);
}

int h_view_storm_restocks(const int *ports, int nports, const char *token,
                          const char *sku, int churners, int ms, struct h_view_storm *out)
{
    return storm(ports, nports, token, sku, churners, ms, true, out);
}
