/* inventory.c -- the process-wide domain handle and per-worker connections. */
#include "segments/inventory.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "segments/internal.h"
#include "segments/skutab.h"
#include "segments/watchdog.h"
#include "segments/xalloc.h"

static void fill_random(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0) {
            perror("getrandom");
            abort();
        }
        p += got;
        n -= (size_t)got;
    }
}

inv *inv_create(const struct inv_options *opt, char *err, size_t errlen)
{
    inv *v = seg_calloc(1, sizeof *v);
    v->opt = *opt;
    v->host = seg_strdup(opt->redis_host ? opt->redis_host : "127.0.0.1");
    v->opt.redis_host = v->host;
    for (int i = 0; i < STAT__COUNT; i++)
        atomic_init(&v->stats[i], 0);
    v->tab = skutab_create();
    v->wd = watchdog_create(v, err, errlen);
    if (v->wd == NULL) {
        inv_free(v);
        return NULL;
    }
    return v;
}

void inv_free(inv *v)
{
    if (v == NULL)
        return;
    watchdog_free(v->wd);
    skutab_free(v->tab);
    free(v->host);
    free(v);
}

inv_conn *inv_conn_create(inv *v)
{
    inv_conn *c = seg_calloc(1, sizeof *c);
    c->v = v;
    const struct rd_target to = inv_redis_target(v);
    c->rd = rd_conn_create(&to, &v->stats[STAT_REDIS_ERRORS]);
    fill_random(&c->rng, sizeof c->rng);
    c->rng |= 1; /* xorshift must not start at 0 */
    fill_random(&c->token_id, sizeof c->token_id);
    return c;
}

void inv_conn_free(inv_conn *c)
{
    if (c == NULL)
        return;
    rd_conn_free(c->rd);
    free(c);
}

inv_status inv_ping(inv_conn *c)
{
    return rd_ping(c->rd) == 0 ? INV_OK : INV_UNAVAILABLE;
}

void inv_set_redis_logger(inv_log_fn fn)
{
    rd_set_logger(fn);
}

const char *inv_conn_error(const inv_conn *c)
{
    return rd_conn_error(c->rd);
}

const char *inv_status_name(inv_status s)
{
    switch (s) {
    case INV_OK:
        return "ok";
    case INV_REPLAYED:
        return "replayed";
    case INV_SOLD_OUT:
        return "sold_out";
    case INV_INSUFFICIENT:
        return "insufficient_stock";
    case INV_UNKNOWN_SKU:
        return "unknown_sku";
    case INV_NOT_FOUND:
        return "not_found";
    case INV_CONFLICT:
        return "order_id_conflict";
    case INV_BUSY:
        return "busy";
    case INV_UNAVAILABLE:
        return "backend_unavailable";
    case INV_INVALID:
        return "invalid_field";
    case INV_REQUEST_CONFLICT:
        return "request_id_conflict";
    }
    return "unknown";
}

struct rd_target inv_redis_target(const inv *v)
{
    return (struct rd_target){
        .host = v->opt.redis_host,
        .port = v->opt.redis_port,
        .unix_path = v->opt.redis_unix,
        .user = v->opt.redis_user,
        .password = v->opt.redis_password,
        .db = v->opt.redis_db,
        .timeout_ms = v->opt.redis_timeout_ms,
    };
}

void inv_new_token(inv_conn *c, char token[33])
{
    snprintf(token, 33, "%016llx%016llx", (unsigned long long)c->token_id,
             (unsigned long long)++c->token_seq);
}

long long inv_new_epoch(void)
{
    uint64_t x;
    fill_random(&x, sizeof x);
    return (long long)(x % ((1ULL << 52) - 1)) + 1;
}

watchdog *inv_watchdog(inv *v)
{
    return v->wd;
}

int64_t inv_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct timespec inv_deadline(int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

void inv_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

void inv_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

uint32_t inv_rand(inv_conn *c, uint32_t n)
{
    /* xorshift64*: plenty for picking a segment and jittering a wait. */
    uint64_t x = c->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    c->rng = x;
    return (uint32_t)(((x * 2685821657736338717ULL) >> 32) % n);
}

void inv_random_hex(char out[33])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char b[16];
    fill_random(b, sizeof b);
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[32] = '\0';
}
