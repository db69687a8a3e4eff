/* lockcall.c -- holds and calls of the lease-based lock services (lockcall.h). */
#include "segments/lockcall/lockcall.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/xalloc.h"

static void random_bytes(void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t k = getrandom((char *)buf + got, len - got, 0);
        if (k < 0) {
            perror("lock service: getrandom");
            abort();
        }
        got += (size_t)k;
    }
}

void lkc_set_init(lkc_set *s, struct event_base *base)
{
    memset(s, 0, sizeof *s);
    s->base = base;
    random_bytes(&s->rnd, sizeof s->rnd);
    s->rnd |= 1;
}

static void hold_free(lkc_hold *h)
{
    if (h->expiry != NULL)
        event_free(h->expiry);
    free(h);
}

static void hold_unlink(lkc_hold *h)
{
    lkc_set *s = h->set;
    if (h->prev != NULL)
        h->prev->next = h->next;
    else if (s->holds == h)
        s->holds = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
    h->prev = h->next = NULL;
}

void lkc_set_drain(lkc_set *s, void (*deliver)(lkc_call *c, int rc))
{
    while (s->calls != NULL)
        deliver(s->calls, LKS_UNAVAIL);
    while (s->holds != NULL) {
        lkc_hold *h = s->holds;
        hold_unlink(h);
        hold_free(h);
    }
}

static void on_expiry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lkc_hold_lost(arg);
}

lkc_hold *lkc_hold_new(lkc_set *s, size_t size, const char *name)
{
    lkc_hold *h = seg_calloc(1, size);
    h->set = s;
    h->expiry = evtimer_new(s->base, on_expiry, h);
    snprintf(h->name, sizeof h->name, "%s", name != NULL ? name : "");
    unsigned char raw[16];
    random_bytes(raw, sizeof raw);
    for (int i = 0; i < 16; i++)
        snprintf(h->token + 2 * i, 3, "%02x", raw[i]);
    h->pub.name = h->name;
    h->pub.fence = 0;
    return h;
}

void lkc_hold_valid(lkc_hold *h, long long valid_until_ms, long long now)
{
    h->pub.valid_until_ms = valid_until_ms;
    evtimer_del(h->expiry);
    lkc_arm_ms(h->expiry, valid_until_ms - now);
}

void lkc_hold_lost(lkc_hold *h)
{
    if (h->lost)
        return;
    h->lost = true;
    evtimer_del(h->expiry);
    if (h->pub.lost != NULL)
        h->pub.lost(h->pub.lost_arg, &h->pub);
}

void lkc_hold_released(lkc_hold *h)
{
    h->released = true;
    evtimer_del(h->expiry);
}

lkc_call *lkc_call_new(lkc_set *s, size_t size, lkc_hold *h, int ttl_ms,
                       event_callback_fn step)
{
    lkc_call *c = seg_calloc(1, size);
    c->set = s;
    c->hold = h;
    c->ttl_ms = ttl_ms;
    c->timer = evtimer_new(s->base, step, c);
    c->next = s->calls;
    if (s->calls != NULL)
        s->calls->prev = c;
    s->calls = c;
    h->refs++;
    return c;
}

void lkc_answer_soon(lkc_call *c, int rc)
{
    c->rc = rc;
    lkc_arm_ms(c->timer, 0);
}

void lkc_deliver(lkc_call *c, int rc)
{
    lkc_set *s = c->set;
    lkc_hold *h = c->hold;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->calls = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    event_free(c->timer);
    h->refs--;
    bool is_acquire = c->is_acquire;
    lks_acquire_fn afn = c->acq_fn;
    lks_done_fn dfn = c->done_fn;
    void *arg = c->arg;
    free(c);
    if (is_acquire) {
        if (rc == LKS_OK) {
            h->next = s->holds;
            if (s->holds != NULL)
                s->holds->prev = h;
            s->holds = h;
        }
        if (afn != NULL)
            afn(arg, rc, rc == LKS_OK ? &h->pub : NULL);
        if (rc != LKS_OK && h->refs == 0)
            hold_free(h);
        return;
    }
    /* A released hold goes once no call is left on it. */
    bool gone = h->released && h->refs == 0;
    if (gone)
        hold_unlink(h);
    if (dfn != NULL)
        dfn(arg, rc);
    if (gone)
        hold_free(h);
}

uint32_t lkc_rand(lkc_set *s, uint32_t n)
{
    s->rnd ^= s->rnd >> 12;
    s->rnd ^= s->rnd << 25;
    s->rnd ^= s->rnd >> 27;
    return (uint32_t)((s->rnd * 2685821657736338717ULL) >> 33) % n;
}

int lkc_drift_ms(int ttl_ms)
{
    return ttl_ms / 100 + 2;
}

void lkc_arm_ms(struct event *ev, long long ms)
{
    if (ms < 0)
        ms = 0;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(ev, &tv);
}
