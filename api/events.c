/* events.c -- Server-Sent Events: a publisher thread, per-stream buffers, slots. */
#include "api/events.h"

#include <microhttpd.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/admin.h"
#include "api/parse.h"
#include "api/tickets.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/names.h"
#include "base/periodic.h"
#include "segments/sku.h"
#include "segments/stats.h"
#include "base/xalloc.h"

#define RATE_SAMPLES 5 /* ticks kept per rate: the last second at EVENTS_INTERVAL_MS */
#define BLOCK_SIZE 8192

enum stream_state {
    STREAM_OPEN,    /* updates are appended as they come */
    STREAM_ENDING,  /* shutdown: hand out what is buffered, then end the response */
    STREAM_DROPPED, /* fell too far behind: end the response with an error */
};

struct stream {
    struct stream *prev, *next; /* the registry's list; guarded by ev->mu */
    struct api_events *ev;
    struct MHD_Connection *conn;
    void (*wake)(void *arg); /* after a resume from another thread: run the daemon */
    void *wake_arg;
    char *key;  /* the SKU set, sorted names joined by ',' ("" for none); immutable */
    char **sku; /* the names, sorted and distinct; immutable */
    int nsku;

    pthread_mutex_t mu;   /* guards the fields down to `state` */
    char *buf;            /* bytes [off, len) are not yet handed to libmicrohttpd */
    size_t off, len, cap; /* off == len: nothing pending */
    bool suspended;       /* the content reader suspended the connection */
    enum stream_state state;

    /* Under ev->mu: */
    bool sent;              /* an update went out already */
    uint64_t digest;        /* of the last update sent */
    long long write_ms;     /* CLOCK_MONOTONIC ms of the last bytes appended */
    long long update_ms;    /* ... of the last update (not heartbeat), or the open */
    unsigned long long seq; /* the order streams opened in */
};

/* One rate: a ring of (time, counter) samples, one per tick. */
struct rate {
    long long t[RATE_SAMPLES], v[RATE_SAMPLES];
    int n, head;
};

/* The publisher's per-SKU memory: the rate of its order count. */
struct sku_rate {
    char sku[SEG_NAME_MAX + 1];
    struct rate orders;
};

struct api_events {
    inv *inv;
    struct api_sim *sim;
    char *token; /* "" when the streams are open */
    struct timespec started;
    periodic *thread;      /* runs publish_round; stopped by the first close */
    struct publisher *pub; /* the thread's own state */

    pthread_mutex_t mu;  /* everything below */
    pthread_cond_t cond; /* a stream is gone (for api_events_close) */
    struct stream *streams;
    int nstreams;
    long long dropped;      /* streams dropped for falling behind, ever */
    unsigned long long seq; /* streams opened, ever */
    bool closed;            /* api_events_close() ran: no new streams */
    struct api_tickets tickets;
};

static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- a stream's buffer --------------------------------------------------------- */

/* Append `n` bytes to `st` (its mutex held) and resume its connection when the
 * content reader is waiting. Past EVENTS_BACKLOG_MAX unsent bytes the stream is
 * dropped instead, unless `force`. Returns false when the stream was dropped now. */
static bool stream_append(struct stream *st, const char *data, size_t n, bool force)
{
    if (st->state == STREAM_DROPPED)
        return true;
    if (!force && st->len - st->off > EVENTS_BACKLOG_MAX) {
        st->state = STREAM_DROPPED;
        free(st->buf);
        st->buf = NULL;
        st->off = st->len = st->cap = 0;
        return false;
    }
    if (st->off > 0 && st->len + n > st->cap) {
        memmove(st->buf, st->buf + st->off, st->len - st->off);
        st->len -= st->off;
        st->off = 0;
    }
    if (st->len + n > st->cap) {
        size_t cap = st->cap ? st->cap : 4096;
        while (cap < st->len + n)
            cap *= 2;
        st->buf = seg_must(realloc(st->buf, cap));
        st->cap = cap;
    }
    memcpy(st->buf + st->len, data, n);
    st->len += n;
    if (st->suspended) {
        st->suspended = false;
        MHD_resume_connection(st->conn);
        st->wake(st->wake_arg);
    }
    return true;
}

/* End `st` (its mutex held) after the event `bye`: the content reader hands out what
 * is buffered, then the end of the response. No-op unless the stream is open. */
static void stream_end(struct stream *st, const char *bye, size_t n)
{
    if (st->state != STREAM_OPEN)
        return;
    stream_append(st, bye, n, true);
    st->state = STREAM_ENDING;
}

/* libmicrohttpd's content reader, on the HTTP thread that owns the connection. */
static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    struct stream *st = cls;
    (void)pos;
    ssize_t n;
    pthread_mutex_lock(&st->mu);
    if (st->state == STREAM_DROPPED) {
        n = MHD_CONTENT_READER_END_WITH_ERROR;
    } else if (st->len > st->off) {
        size_t k = st->len - st->off < max ? st->len - st->off : max;
        memcpy(out, st->buf + st->off, k);
        st->off += k;
        if (st->off == st->len)
            st->off = st->len = 0;
        n = (ssize_t)k;
    } else if (st->state == STREAM_ENDING) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        /* Nothing to send: park the connection until the publisher appends. */
        st->suspended = true;
        MHD_suspend_connection(st->conn);
        n = 0;
    }
    pthread_mutex_unlock(&st->mu);
    return n;
}

static void stream_destroy(struct stream *st)
{
    for (int i = 0; i < st->nsku; i++)
        free(st->sku[i]);
    free(st->sku);
    free(st->key);
    free(st->buf);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

/* libmicrohttpd is done with the response (the connection closed or the daemon
 * stopped): unlink the stream and free it. */
static void stream_free(void *cls)
{
    struct stream *st = cls;
    struct api_events *ev = st->ev;
    pthread_mutex_lock(&ev->mu);
    if (st->prev != NULL)
        st->prev->next = st->next;
    else
        ev->streams = st->next;
    if (st->next != NULL)
        st->next->prev = st->prev;
    ev->nstreams--;
    pthread_cond_broadcast(&ev->cond);
    pthread_mutex_unlock(&ev->mu);
    stream_destroy(st);
}

/* ---- opening a stream ---------------------------------------------------------- */

struct query {
    const char *sku[EVENTS_SKUS_MAX + 1];
    int nsku;
    const char *ticket;
    const char *bad; /* the first argument refused, for the error */
    const char *why;
};

static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    struct query *q = cls;
    (void)kind;
    if (q->bad != NULL)
        return MHD_NO;
    if (strcmp(key, "sku") == 0) {
        if (value == NULL || !seg_valid_name(value)) {
            q->bad = "sku";
            q->why = "must be 1-64 characters of [A-Za-z0-9_.-]";
            return MHD_NO;
        }
        for (int i = 0; i < q->nsku; i++)
            if (strcmp(q->sku[i], value) == 0)
                return MHD_YES;
        if (q->nsku == EVENTS_SKUS_MAX) {
            q->bad = "sku";
            q->why = "at most 16 per stream";
            return MHD_NO;
        }
        q->sku[q->nsku++] = value;
    } else if (strcmp(key, "ticket") == 0 && value != NULL) {
        q->ticket = value;
    } else {
        q->bad = key;
        q->why = "unknown parameter";
        return MHD_NO;
    }
    return MHD_YES;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Room for one more stream (ev->mu held): true while fewer than EVENTS_STREAMS_MAX
 * are open, else after ending the one idle the longest (no update for
 * EVENTS_IDLE_MS; the first opened among equals) with `event: evicted`. False when
 * every open stream is live, or when EVENTS_STREAMS_MAX more are still ending (their
 * readers have not taken the end yet): memory stays bounded either way. */
static bool make_room(struct api_events *ev)
{
    static const char bye[] = "event: evicted\ndata: {}\n\n";
    long long idle_since = base_now_ms() - EVENTS_IDLE_MS;
    int open = 0;
    struct stream *victim = NULL;
    for (struct stream *st = ev->streams; st != NULL; st = st->next) {
        pthread_mutex_lock(&st->mu);
        bool is_open = st->state == STREAM_OPEN;
        pthread_mutex_unlock(&st->mu);
        if (!is_open)
            continue;
        open++;
        if (st->update_ms <= idle_since &&
            (victim == NULL || st->update_ms < victim->update_ms ||
             (st->update_ms == victim->update_ms && st->seq < victim->seq)))
            victim = st;
    }
    if (open < EVENTS_STREAMS_MAX)
        return true;
    if (victim == NULL || ev->nstreams - open >= EVENTS_STREAMS_MAX)
        return false;
    pthread_mutex_lock(&victim->mu);
    stream_end(victim, bye, sizeof bye - 1);
    pthread_mutex_unlock(&victim->mu);
    log_info("events: %d streams open; ended the one idle longest for a new one",
             EVENTS_STREAMS_MAX);
    return true;
}

struct MHD_Response *api_events_open(struct api_events *ev, struct MHD_Connection *conn,
                                     void (*wake)(void *arg), void *wake_arg,
                                     const struct api_request *req, struct api_reply *rep)
{
    struct query q = {0};
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, collect_arg, &q);
    if (q.bad != NULL) {
        api_reply_error(rep, 400, "invalid_field", "%.40s: %s", q.bad, q.why);
        return NULL;
    }
    qsort(q.sku, (size_t)q.nsku, sizeof q.sku[0], compare_names);

    pthread_mutex_lock(&ev->mu);
    bool authorized =
        ev->token[0] == '\0' || api_bearer_matches(req->authorization, ev->token) ||
        (q.ticket != NULL && api_tickets_take(&ev->tickets, q.ticket, base_now_ms()));
    const char *refused = NULL;
    if (!authorized)
        refused = "unauthorized";
    else if (ev->closed)
        refused = "shutting_down";
    else if (!make_room(ev))
        refused = "too_many_streams";
    struct stream *st = NULL;
    if (refused == NULL) {
        st = seg_must(calloc(1, sizeof *st));
        st->ev = ev;
        st->conn = conn;
        st->wake = wake;
        st->wake_arg = wake_arg;
        pthread_mutex_init(&st->mu, NULL);
        st->sku = seg_must(calloc((size_t)q.nsku + 1, sizeof *st->sku));
        size_t keylen = 1;
        for (int i = 0; i < q.nsku; i++) {
            st->sku[i] = seg_must(strdup(q.sku[i]));
            keylen += strlen(q.sku[i]) + 1;
        }
        st->nsku = q.nsku;
        st->key = seg_must(calloc(1, keylen));
        for (int i = 0; i < q.nsku; i++) {
            if (i > 0)
                strcat(st->key, ",");
            strcat(st->key, q.sku[i]);
        }
        static const char hello[] = "retry: 3000\n: inventoryd events\n\n";
        stream_append(st, hello, sizeof hello - 1, true);
        st->write_ms = st->update_ms = base_now_ms();
        st->seq = ev->seq++;
        st->next = ev->streams;
        if (ev->streams != NULL)
            ev->streams->prev = st;
        ev->streams = st;
        ev->nstreams++;
        periodic_wake(ev->thread); /* publish now rather than at the tick */
    }
    pthread_mutex_unlock(&ev->mu);

    if (refused != NULL && strcmp(refused, "unauthorized") == 0) {
        api_reply_error(rep, 401, "unauthorized",
                        "the event stream needs Authorization: Bearer <token> or "
                        "?ticket= from POST /admin/events/ticket");
        api_reply_header(rep, "WWW-Authenticate", "Bearer");
        return NULL;
    }
    if (refused != NULL) {
        if (strcmp(refused, "shutting_down") == 0)
            api_reply_error(rep, 503, refused, "the server is shutting down");
        else
            api_reply_error(rep, 503, refused,
                            "%d event streams are open and none is idle",
                            EVENTS_STREAMS_MAX);
        api_reply_header(rep, "Retry-After", "5");
        return NULL;
    }

    struct MHD_Response *resp = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, BLOCK_SIZE, stream_read, st, stream_free);
    if (resp == NULL) {
        stream_free(st);
        api_reply_error(rep, 500, "internal", "cannot create the stream's response");
        return NULL;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    return resp;
}

bool api_events_need_auth(const struct api_events *ev)
{
    return ev->token[0] != '\0';
}

void api_events_unrouted(const struct api_ctx *ctx, struct api_request *req,
                         struct api_reply *rep)
{
    (void)ctx;
    (void)req;
    api_reply_error(rep, 500, "internal", "the event stream was not opened");
}

void api_events_ticket(const struct api_ctx *ctx, struct api_request *req,
                       struct api_reply *rep)
{
    (void)req;
    struct api_events *ev = ctx->events;
    char id[API_TICKET_LEN + 1];
    api_tickets_new_id(id);
    long long now = base_now_ms();
    pthread_mutex_lock(&ev->mu);
    api_tickets_add(&ev->tickets, id, now, now + EVENTS_TICKET_TTL_S * 1000LL);
    pthread_mutex_unlock(&ev->mu);
    json_t *o = json_pack("{s:s, s:i, s:s}", "ticket", id, "expires_in_s",
                          EVENTS_TICKET_TTL_S, "path", "/admin/events");
    api_reply_json(rep, 200, seg_must(o));
}

/* ---- the publisher ------------------------------------------------------------- */

static void rate_reset(struct rate *r)
{
    r->n = r->head = 0;
}

/* Add a sample and return the rate per second over the samples kept (0 until two
 * are 100 ms apart). A counter that went down (a reset SKU) starts over. */
static double rate_add(struct rate *r, long long t, long long v)
{
    if (r->n > 0 && v < r->v[(r->head + RATE_SAMPLES - 1) % RATE_SAMPLES])
        rate_reset(r);
    r->t[r->head] = t;
    r->v[r->head] = v;
    r->head = (r->head + 1) % RATE_SAMPLES;
    if (r->n < RATE_SAMPLES)
        r->n++;
    int oldest = (r->head + RATE_SAMPLES - r->n) % RATE_SAMPLES;
    long long dt = t - r->t[oldest];
    if (dt < 100)
        return 0;
    double per_s = (double)(v - r->v[oldest]) * 1000.0 / (double)dt;
    return (double)(long long)(per_s * 10 + 0.5) / 10; /* one decimal */
}

/* The publisher's private state, rebuilt or carried from tick to tick. */
struct publisher {
    struct api_events *ev;
    inv_conn *conn;
    struct sku_rate *rates; /* one per SKU watched last tick */
    int nrates;
    struct rate confirmed, attempts;
    long long tick;
};

/* One distinct SKU set of this tick, and the update text for it. */
struct set_text {
    char *key;
    char **sku; /* borrowed from `names` below */
    int nsku;
    char *text; /* "data: {...}\n\n" */
    size_t len;
    uint64_t digest;
};

struct per_sku_outcomes {
    const char *sku;
    json_t *out; /* filled when found */
};

static void find_outcomes(const char *sku, const long long *outcomes, void *arg)
{
    struct per_sku_outcomes *p = arg;
    if (p->out != NULL || strcmp(sku, p->sku) != 0)
        return;
    p->out = seg_must(json_object());
    for (int i = 0; i < SKU_OUTCOMES; i++)
        json_object_set_new(p->out, stat_name((enum stat_id)i),
                            seg_must(json_integer(outcomes[i])));
}

static struct sku_rate *rate_for(struct publisher *p, struct sku_rate *next, int *nnext,
                                 const char *sku)
{
    struct sku_rate *r = &next[(*nnext)++];
    for (int i = 0; i < p->nrates; i++)
        if (strcmp(p->rates[i].sku, sku) == 0) {
            *r = p->rates[i];
            return r;
        }
    memset(r, 0, sizeof *r);
    snprintf(r->sku, sizeof r->sku, "%s", sku);
    return r;
}

/* Read one SKU for the update: GET /admin/skus/{sku}'s object plus the extras. */
static json_t *sku_update(struct publisher *p, struct sku_status *st, const char *sku,
                          struct sku_rate *rate, long long now)
{
    inv_status s = sku_get(p->conn, sku, st);
    json_t *o;
    if (s != INV_OK) {
        rate_reset(&rate->orders);
        const char *why = inv_conn_error(p->conn);
        o = json_pack("{s:s, s:s, s:s}", "sku", sku, "error", api_status_code(s),
                      "detail",
                      s == INV_UNKNOWN_SKU ? "no such sku"
                      : why[0] != '\0'     ? why
                                           : "cannot read sku");
        return seg_must(o);
    }
    o = api_admin_sku_json(sku, st);
    json_object_set_new(o, "orders_per_s",
                        seg_must(json_real(rate_add(&rate->orders, now, st->orders))));
    struct per_sku_outcomes po = {sku, NULL};
    stat_foreach_sku(p->ev->inv, find_outcomes, &po);
    json_object_set_new(o, "outcomes", po.out != NULL ? po.out : seg_must(json_object()));
    json_t *sim = api_sim_status_json(p->ev->sim, sku);
    json_object_set_new(o, "simulation", sim != NULL ? sim : json_null());
    return o;
}

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* Build this tick's text for every set in `sets` (Redis reads; no lock held). */
static void build_texts(struct publisher *p, struct set_text *sets, int nsets,
                        char **names, int nnames, int open, long long dropped)
{
    long long now = base_now_ms();
    struct sku_status *st = seg_must(calloc(1, sizeof *st));
    json_t **objs = seg_must(calloc((size_t)nnames + 1, sizeof *objs));
    struct sku_rate *next = seg_must(calloc((size_t)nnames + 1, sizeof *next));
    int nnext = 0;
    for (int i = 0; i < nnames; i++)
        objs[i] = sku_update(p, st, names[i], rate_for(p, next, &nnext, names[i]), now);
    free(st);
    free(p->rates);
    p->rates = next;
    p->nrates = nnext;

    long long counters[STAT__COUNT];
    stat_snapshot(p->ev->inv, counters);
    long long answers = 0;
    for (int i = 0; i < SKU_OUTCOMES; i++)
        if (i != STAT_ORDERS_CANCELLED)
            answers += counters[i];
    double confirmed_rate = rate_add(&p->confirmed, now, counters[STAT_ORDERS_CONFIRMED]);
    double attempts_rate = rate_add(&p->attempts, now, answers);
    json_t *stats = api_admin_stats_json(counters);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long uptime = (long long)(ts.tv_sec - p->ev->started.tv_sec);
    long long time_ms = wall_ms();

    for (int k = 0; k < nsets; k++) {
        struct set_text *set = &sets[k];
        json_t *arr = seg_must(json_array());
        for (int i = 0; i < set->nsku; i++)
            for (int j = 0; j < nnames; j++)
                if (strcmp(set->sku[i], names[j]) == 0)
                    json_array_append(arr, objs[j]);
        json_t *body = json_pack(
            "{s:i, s:o, s:O, s:f, s:f, s:{s:i, s:I}}", "interval_ms", EVENTS_INTERVAL_MS,
            "skus", arr, "stats", stats, "orders_per_s", confirmed_rate, "attempts_per_s",
            attempts_rate, "streams", "open", open, "dropped", (json_int_t)dropped);
        char *dump = seg_must(json_dumps(seg_must(body), JSON_COMPACT));
        json_decref(body);
        size_t dlen = strlen(dump);
        set->digest = fnv1a(dump, dlen);
        /* The tick and the times change every time: spliced in front, outside the
         * digest, so that they alone never make an update. */
        char head[128];
        int hlen = snprintf(head, sizeof head,
                            "data: {\"tick\":%lld,\"time_ms\":%lld,\"uptime_s\":%lld,",
                            p->tick, time_ms, uptime);
        set->len = (size_t)hlen + dlen - 1 + 2;
        set->text = seg_must(malloc(set->len + 1));
        memcpy(set->text, head, (size_t)hlen);
        memcpy(set->text + hlen, dump + 1, dlen - 1);
        memcpy(set->text + hlen + dlen - 1, "\n\n", 3);
        free(dump);
    }
    json_decref(stats);
    for (int i = 0; i < nnames; i++)
        json_decref(objs[i]);
    free(objs);
}

/* Hand this tick's texts to the streams (ev->mu held). */
static void deliver(struct api_events *ev, struct set_text *sets, int nsets)
{
    static const char hb[] = ": hb\n\n";
    long long now = base_now_ms();
    for (struct stream *st = ev->streams; st != NULL; st = st->next) {
        struct set_text *set = NULL;
        for (int k = 0; k < nsets && set == NULL; k++)
            if (strcmp(sets[k].key, st->key) == 0)
                set = &sets[k];
        if (set == NULL) /* opened after this tick's reads: served on the next */
            continue;
        bool update = !st->sent || st->digest != set->digest;
        bool heartbeat = !update && now - st->write_ms >= EVENTS_HEARTBEAT_MS;
        if (!update && !heartbeat)
            continue;
        pthread_mutex_lock(&st->mu);
        bool kept = st->state != STREAM_OPEN ||
                    (update ? stream_append(st, set->text, set->len, false)
                            : stream_append(st, hb, sizeof hb - 1, false));
        pthread_mutex_unlock(&st->mu);
        if (!kept) {
            ev->dropped++;
            log_warn("events: a stream of %d sku(s) fell %d bytes behind; dropped",
                     st->nsku, EVENTS_BACKLOG_MAX);
        }
        st->write_ms = now;
        if (update) {
            st->sent = true;
            st->digest = set->digest;
            st->update_ms = now;
        }
    }
}

/* One tick: snapshot the sets (ev->mu held on entry and exit, released while Redis is
 * read), build their texts, deliver them. */
static void publish(struct publisher *p)
{
    struct api_events *ev = p->ev;
    int cap = ev->nstreams > 0 ? ev->nstreams : 1;
    struct set_text *sets = seg_must(calloc((size_t)cap, sizeof *sets));
    char **names = seg_must(calloc((size_t)cap * EVENTS_SKUS_MAX + 1, sizeof *names));
    int nsets = 0, nnames = 0;
    for (struct stream *st = ev->streams; st != NULL && nsets < cap; st = st->next) {
        bool known = false;
        for (int k = 0; k < nsets && !known; k++)
            known = strcmp(sets[k].key, st->key) == 0;
        if (known)
            continue;
        struct set_text *set = &sets[nsets++];
        set->key = seg_must(strdup(st->key));
        set->nsku = st->nsku;
        set->sku = seg_must(calloc((size_t)st->nsku + 1, sizeof *set->sku));
        for (int i = 0; i < st->nsku; i++) {
            int j = 0;
            while (j < nnames && strcmp(names[j], st->sku[i]) != 0)
                j++;
            if (j == nnames)
                names[nnames++] = seg_must(strdup(st->sku[i]));
            set->sku[i] = names[j];
        }
    }
    int open = ev->nstreams;
    long long dropped = ev->dropped;
    pthread_mutex_unlock(&ev->mu);

    p->tick++;
    build_texts(p, sets, nsets, names, nnames, open, dropped);

    pthread_mutex_lock(&ev->mu);
    deliver(ev, sets, nsets);
    for (int k = 0; k < nsets; k++) {
        free(sets[k].key);
        free(sets[k].sku);
        free(sets[k].text);
    }
    free(sets);
    for (int i = 0; i < nnames; i++)
        free(names[i]);
    free(names);
}

/* One round on the publisher thread: sleep while nobody watches, else publish and
 * sleep out the rest of EVENTS_INTERVAL_MS (a stream that opens wakes it). */
static int publish_round(periodic *th, void *arg)
{
    (void)th;
    struct publisher *p = arg;
    struct api_events *ev = p->ev;
    if (p->conn == NULL) { /* made here, so that create never waits on Redis */
        pthread_setname_np(pthread_self(), "inv-events");
        p->conn = inv_conn_create(ev->inv);
    }
    pthread_mutex_lock(&ev->mu);
    if (ev->nstreams == 0) { /* nobody watches: no Redis reads at all */
        rate_reset(&p->confirmed);
        rate_reset(&p->attempts);
        pthread_mutex_unlock(&ev->mu);
        return INT_MAX; /* until a stream opens */
    }
    long long started = base_now_ms();
    publish(p); /* unlocks ev->mu while it reads, returns with it held */
    pthread_mutex_unlock(&ev->mu);
    long long wait_ms = started + EVENTS_INTERVAL_MS - base_now_ms();
    return wait_ms > 0 ? (int)wait_ms : 0;
}

/* ---- lifecycle ----------------------------------------------------------------- */

struct api_events *api_events_create(inv *v, struct api_sim *sim, const char *admin_token,
                                     struct timespec started, char *err, size_t errlen)
{
    struct api_events *ev = seg_must(calloc(1, sizeof *ev));
    ev->inv = v;
    ev->sim = sim;
    ev->token = seg_must(strdup(admin_token != NULL ? admin_token : ""));
    ev->started = started;
    pthread_mutex_init(&ev->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&ev->cond, &attr);
    pthread_condattr_destroy(&attr);
    ev->pub = seg_must(calloc(1, sizeof *ev->pub));
    ev->pub->ev = ev;
    char why[128];
    ev->thread = periodic_start(publish_round, ev->pub, 0, why, sizeof why);
    if (ev->thread == NULL) {
        snprintf(err, errlen, "cannot start the event publisher thread: %s", why);
        free(ev->pub);
        pthread_cond_destroy(&ev->cond);
        pthread_mutex_destroy(&ev->mu);
        free(ev->token);
        free(ev);
        return NULL;
    }
    return ev;
}

void api_events_close(struct api_events *ev, int wait_ms)
{
    if (ev == NULL)
        return;
    pthread_mutex_lock(&ev->mu);
    bool first = !ev->closed;
    ev->closed = true; /* no stream opens, so nothing wakes the thread, from now */
    pthread_mutex_unlock(&ev->mu);
    if (first) {
        periodic_stop(ev->thread);
        ev->thread = NULL;
        free(ev->pub->rates);
        if (ev->pub->conn != NULL)
            inv_conn_free(ev->pub->conn);
        free(ev->pub);
        ev->pub = NULL;
    }

    static const char bye[] = "event: shutdown\ndata: {}\n\n";
    long long deadline = base_now_ms() + wait_ms;
    pthread_mutex_lock(&ev->mu);
    for (struct stream *st = ev->streams; st != NULL; st = st->next) {
        pthread_mutex_lock(&st->mu);
        stream_end(st, bye, sizeof bye - 1);
        pthread_mutex_unlock(&st->mu);
    }
    while (ev->nstreams > 0) {
        long long left = deadline - base_now_ms();
        if (left <= 0)
            break;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += left / 1000;
        until.tv_nsec += (left % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&ev->cond, &ev->mu, &until);
    }
    if (ev->nstreams > 0)
        log_info("events: %d stream(s) still open at shutdown; closing them",
                 ev->nstreams);
    pthread_mutex_unlock(&ev->mu);
}

void api_events_free(struct api_events *ev)
{
    if (ev == NULL)
        return;
    api_events_close(ev, 0);
    pthread_cond_destroy(&ev->cond);
    pthread_mutex_destroy(&ev->mu);
    free(ev->token);
    free(ev);
}
