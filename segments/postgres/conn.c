/* conn.c -- an asynchronous, pipelined libpq connection driven by libevent. */
#include "segments/postgres/conn.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

/* The connection's states; transitions in conn_down, conn_start and on_connect. */
enum conn_state {
    CONN_DOWN,       /* no connection; the backoff timer will start one */
    CONN_CONNECTING, /* PQconnectPoll in progress, waiting on the socket */
    CONN_READY,      /* connected, in pipeline mode: calls go out */
};

struct call {
    struct call *next;
    pgc_conn *c;
    unsigned long long txn;
    unsigned flags;
    int n;          /* statements, BEGIN included when flags has PGC_BEGIN */
    char **sql;     /* [n] */
    int *nparams;   /* [n] */
    char ***params; /* [n][nparams] */
    uint64_t *hash; /* [n]: the prepared statement's key (prep_key), 0: unprepared */
    uint64_t *pre;  /* [npre]: the keys prepared ahead of this call's statements */
    int npre, pre_got;
    PGresult **res; /* [n], filled as results arrive */
    int got;
    pgc_fn fn;
    void *arg;
    struct event *deadline;
    bool sent;
};

struct pgc_conn {
    struct event_base *base;
    char *conninfo;
    char options[320];
    char app_name[64];
    char ka_idle[16], ka_count[4], user_timeout[16];
    int call_timeout_ms;
    bool no_prepare; /* PGC_PREPARE ignored */
    enum conn_state state;
    PGconn *pg;
    struct event *io;    /* the socket: connect polling, or reading when ready */
    struct event *wr;    /* the socket writable, while libpq has output queued */
    struct event *retry; /* backoff timer, and the connect attempt's deadline */
    struct event *kick;  /* activated to send queued calls on the next turn */
    int backoff_ms;
    struct call *wait_head, *wait_tail; /* queued, not sent */
    struct call *sent_head, *sent_tail; /* sent, answer pending */
    unsigned long long owner;           /* the transaction holding the connection */
    int begins;                         /* PGC_BEGIN calls in the wait queue */
    int owed;                           /* calls not answered yet */
    unsigned long long txn_seq;
    struct pgc_stats st;
    /* The statements prepared in this session (key 0: a free entry); emptied when
     * the session ends. */
    struct prep {
        uint64_t key;
        char *text;
    } prep[PGC_PREPARED_MAX];
    char errstr[160];
};

static void conn_start(pgc_conn *c);
static void conn_down(pgc_conn *c, const char *why);
static void pump(pgc_conn *c);

static void set_error(pgc_conn *c, const char *what, const char *detail)
{
    snprintf(c->errstr, sizeof c->errstr, "%s%s%s", what, detail ? ": " : "",
             detail ? detail : "");
    /* libpq messages end with a newline */
    size_t len = strlen(c->errstr);
    while (len > 0 && (c->errstr[len - 1] == '\n' || c->errstr[len - 1] == ' '))
        c->errstr[--len] = '\0';
}

/* A prepared statement's key: FNV-1a of its text, never 0. */
static uint64_t prep_key(const char *text)
{
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++)
        h = (h ^ *p) * 1099511628211ull;
    return h != 0 ? h : 1;
}

static void prep_name(uint64_t key, char out[24])
{
    snprintf(out, 24, "inv_%016llx", (unsigned long long)key);
}

/* The entry of `key` and `text` prepared in this session; -1: none; -2: another text
 * holds that key (a hash collision: send this one unprepared). */
static int prep_find(const pgc_conn *c, uint64_t key, const char *text)
{
    for (int i = 0; i < PGC_PREPARED_MAX; i++)
        if (c->prep[i].key == key)
            return strcmp(c->prep[i].text, text) == 0 ? i : -2;
    return -1;
}

/* Take an entry for `key` (to be prepared now), or -1 when the table is full. */
static int prep_add(pgc_conn *c, uint64_t key, const char *text)
{
    for (int i = 0; i < PGC_PREPARED_MAX; i++) {
        if (c->prep[i].key != 0)
            continue;
        c->prep[i].key = key;
        c->prep[i].text = seg_strdup(text);
        return i;
    }
    return -1;
}

/* The server does not have `key` (any more): the next call prepares it again. */
static void prep_drop(pgc_conn *c, uint64_t key)
{
    for (int i = 0; i < PGC_PREPARED_MAX; i++) {
        if (c->prep[i].key != key)
            continue;
        free(c->prep[i].text);
        c->prep[i].text = NULL;
        c->prep[i].key = 0;
    }
}

/* The session ended: its prepared statements with it. */
static void prep_clear(pgc_conn *c)
{
    for (int i = 0; i < PGC_PREPARED_MAX; i++)
        if (c->prep[i].key != 0)
            prep_drop(c, c->prep[i].key);
}

static void call_free(struct call *k)
{
    for (int i = 0; i < k->n; i++) {
        free(k->sql[i]);
        for (int j = 0; j < k->nparams[i]; j++)
            free(k->params[i][j]);
        free(k->params[i]);
        if (k->res[i] != NULL)
            PQclear(k->res[i]);
    }
    free(k->sql);
    free(k->nparams);
    free(k->params);
    free(k->hash);
    free(k->pre);
    free(k->res);
    if (k->deadline != NULL)
        event_free(k->deadline);
    free(k);
}

static void push(struct call **head, struct call **tail, struct call *k)
{
    k->next = NULL;
    if (*tail != NULL)
        (*tail)->next = k;
    else
        *head = k;
    *tail = k;
}

static struct call *pop(struct call **head, struct call **tail)
{
    struct call *k = *head;
    if (k != NULL) {
        *head = k->next;
        if (*head == NULL)
            *tail = NULL;
        k->next = NULL;
    }
    return k;
}

static void unlink_call(struct call **head, struct call **tail, struct call *k)
{
    struct call *prev = NULL;
    for (struct call *p = *head; p != NULL; prev = p, p = p->next) {
        if (p != k)
            continue;
        if (prev != NULL)
            prev->next = p->next;
        else
            *head = p->next;
        if (*tail == p)
            *tail = prev;
        p->next = NULL;
        return;
    }
}

/* Take `k` out of the wait queue (to send it, or to answer it unsent). */
static void wait_remove(pgc_conn *c, struct call *k)
{
    unlink_call(&c->wait_head, &c->wait_tail, k);
    if (k->flags & PGC_BEGIN)
        c->begins--;
}

/* A transaction is over: roll the session back (a no-op warning when the server has
 * already ended it) and let the other calls go. */
static void txn_over(pgc_conn *c, unsigned long long txn, bool rollback)
{
    if (txn == 0 || c->owner != txn)
        return;
    c->owner = 0;
    if (rollback && c->state == CONN_READY) {
        static const struct pgc_stmt rb = {"ROLLBACK", 0, NULL};
        /* Goes first: pump sends the wait queue in order and this is its head. */
        unsigned long long none = pgc_call(c, 0, 0, &rb, 1, NULL, NULL);
        (void)none;
        struct call *k = c->wait_tail;
        unlink_call(&c->wait_head, &c->wait_tail, k);
        k->next = c->wait_head;
        c->wait_head = k;
        if (c->wait_tail == NULL)
            c->wait_tail = k;
    }
    event_active(c->kick, 0, 0);
}

static bool results_ok(const struct call *k)
{
    for (int i = 0; i < k->n; i++) {
        ExecStatusType s = k->res[i] ? PQresultStatus(k->res[i]) : PGRES_FATAL_ERROR;
        if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK)
            return false;
    }
    return true;
}

/* Answer `k` (already out of its queue) and free it. */
static void answer(pgc_conn *c, struct call *k, int rc)
{
    c->owed--;
    if (k->txn != 0 && (rc != 0 || (k->flags & PGC_END) || !results_ok(k)))
        txn_over(c, k->txn, !(rc == 0 && (k->flags & PGC_END) && results_ok(k)));
    if (k->fn != NULL) {
        int skip = (k->flags & PGC_BEGIN) ? 1 : 0;
        if (rc == 0)
            k->fn(k->arg, 0, k->res + skip, k->n - skip);
        else
            k->fn(k->arg, -1, NULL, 0);
    }
    call_free(k);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct call *k = arg;
    pgc_conn *c = k->c;
    c->st.timeouts++;
    if (!k->sent) {
        wait_remove(c, k);
        set_error(c, "call timed out before it could be sent", NULL);
        answer(c, k, -1);
        return;
    }
    /* A late answer would be out of step with what the caller has been told: drop the
     * connection, and the server rolls back with it. */
    conn_down(c, "call timed out");
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pump(arg);
}

unsigned long long pgc_call(pgc_conn *c, unsigned long long txn, unsigned flags,
                            const struct pgc_stmt *st, int n, pgc_fn fn, void *arg)
{
    struct call *k = seg_calloc(1, sizeof *k);
    int skip = (flags & PGC_BEGIN) ? 1 : 0;
    if (c->no_prepare)
        flags &= ~PGC_PREPARE;
    k->c = c;
    k->flags = flags;
    k->fn = fn;
    k->arg = arg;
    k->n = n + skip;
    k->sql = seg_calloc((size_t)k->n, sizeof *k->sql);
    k->nparams = seg_calloc((size_t)k->n, sizeof *k->nparams);
    k->params = seg_calloc((size_t)k->n, sizeof *k->params);
    k->res = seg_calloc((size_t)k->n, sizeof *k->res);
    k->hash = seg_calloc((size_t)k->n, sizeof *k->hash);
    k->pre = seg_calloc((size_t)k->n, sizeof *k->pre);
    if (skip)
        k->sql[0] = seg_strdup("BEGIN");
    for (int i = 0; i < n; i++) {
        k->sql[i + skip] = seg_strdup(st[i].sql);
        k->nparams[i + skip] = st[i].nparams;
        k->params[i + skip] = seg_calloc((size_t)st[i].nparams + 1, sizeof(char *));
        if ((flags & PGC_PREPARE) && st[i].nparams > 0)
            k->hash[i + skip] = prep_key(st[i].sql);
        for (int j = 0; j < st[i].nparams; j++)
            k->params[i + skip][j] = st[i].params[j] ? seg_strdup(st[i].params[j]) : NULL;
    }
    k->txn = (flags & PGC_BEGIN) ? ++c->txn_seq : txn;
    if (fn != NULL) {
        k->deadline = evtimer_new(c->base, on_deadline, k);
        struct timeval tv = {c->call_timeout_ms / 1000,
                             (c->call_timeout_ms % 1000) * 1000};
        evtimer_add(k->deadline, &tv);
    }
    push(&c->wait_head, &c->wait_tail, k);
    c->owed++;
    if (flags & PGC_BEGIN)
        c->begins++;
    event_active(c->kick, 0, 0);
    return k->txn;
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pgc_conn *c = arg;
    int r = PQflush(c->pg);
    if (r < 0)
        conn_down(c, PQerrorMessage(c->pg));
    else if (r == 1)
        event_add(c->wr, NULL);
}

static void flush(pgc_conn *c)
{
    int r = PQflush(c->pg);
    if (r < 0)
        conn_down(c, PQerrorMessage(c->pg));
    else if (r == 1)
        event_add(c->wr, NULL);
}

/* Send `k`'s statements (not its sync point): first a prepare of each prepared
 * statement this session has not seen, then the statements. False: libpq failed. */
static bool send_call(pgc_conn *c, struct call *k)
{
    char name[24];
    k->npre = k->pre_got = 0;
    for (int i = 0; i < k->n; i++) {
        int at = k->hash[i] != 0 ? prep_find(c, k->hash[i], k->sql[i]) : 0;
        if (at >= 0)
            continue;
        if (at == -2 || prep_add(c, k->hash[i], k->sql[i]) < 0) {
            k->hash[i] = 0; /* a collision, or the table is full: unprepared */
            continue;
        }
        prep_name(k->hash[i], name);
        if (!PQsendPrepare(c->pg, name, k->sql[i], k->nparams[i], NULL))
            return false;
        k->pre[k->npre++] = k->hash[i];
        c->st.prepares++;
    }
    for (int i = 0; i < k->n; i++) {
        const char *const *p = (const char *const *)k->params[i];
        int ok;
        if (k->hash[i] != 0) {
            prep_name(k->hash[i], name);
            ok = PQsendQueryPrepared(c->pg, name, k->nparams[i], p, NULL, NULL, 0);
        } else {
            ok = PQsendQueryParams(c->pg, k->sql[i], k->nparams[i], NULL, p, NULL, NULL,
                                   0);
        }
        if (!ok)
            return false;
    }
    return true;
}

/* Send what may go now: the wait queue in order, stopping at a call that must wait
 * for another caller's transaction to end. */
static void pump(pgc_conn *c)
{
    if (c->state != CONN_READY)
        return;
    int sent = 0;
    while (c->wait_head != NULL) {
        struct call *k = c->wait_head;
        if (k->txn != 0 && !(k->flags & PGC_BEGIN) && c->owner != k->txn) {
            pop(&c->wait_head, &c->wait_tail);
            set_error(c, "transaction is over", NULL);
            answer(c, k, -1);
            if (c->state != CONN_READY)
                return;
            continue;
        }
        if (c->owner != 0 && k->txn != c->owner) {
            /* The holder's next call goes ahead of those waiting for it to end. */
            for (k = k->next; k != NULL; k = k->next)
                if (k->txn == c->owner)
                    break;
            if (k == NULL)
                break;
        }
        wait_remove(c, k);
        if (!send_call(c, k) || !PQpipelineSync(c->pg)) {
            push(&c->sent_head, &c->sent_tail, k);
            k->sent = true;
            conn_down(c, PQerrorMessage(c->pg));
            return;
        }
        k->sent = true;
        if (k->flags & PGC_BEGIN)
            c->owner = k->txn;
        push(&c->sent_head, &c->sent_tail, k);
        c->st.calls++;
        sent++;
    }
    if (sent > 0) {
        c->st.writes++;
        flush(c);
    }
}

/* Results arrived: hand each to its call; a sync point completes the head call. */
static void on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pgc_conn *c = arg;
    if (!PQconsumeInput(c->pg)) {
        conn_down(c, PQerrorMessage(c->pg));
        return;
    }
    int nulls = 0;
    while (c->state == CONN_READY && c->sent_head != NULL && !PQisBusy(c->pg)) {
        PGresult *r = PQgetResult(c->pg);
        if (r == NULL) {
            if (++nulls > 1)
                break;
            continue;
        }
        nulls = 0;
        struct call *k = c->sent_head;
        if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
            PQclear(r);
            pop(&c->sent_head, &c->sent_tail);
            if (k->got < k->n) {
                /* a statement without a result: treat the call as unanswered */
                set_error(c, "results missing before sync", NULL);
                answer(c, k, -1);
            } else {
                answer(c, k, 0);
            }
            continue;
        }
        if (k->pre_got < k->npre) { /* a prepare sent ahead of the call's statements */
            if (PQresultStatus(r) != PGRES_COMMAND_OK)
                prep_drop(c, k->pre[k->pre_got]);
            k->pre_got++;
            PQclear(r);
            continue;
        }
        if (k->got < k->n) {
            const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
            if (k->hash[k->got] != 0 && state != NULL && strcmp(state, "26000") == 0)
                prep_drop(c, k->hash[k->got]);
            k->res[k->got++] = r;
        } else {
            PQclear(r);
        }
    }
    if (c->state == CONN_READY && PQstatus(c->pg) == CONNECTION_BAD)
        conn_down(c, PQerrorMessage(c->pg));
}

static void drop_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

static void on_connect(evutil_socket_t fd, short what, void *arg);

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pgc_conn *c = arg;
    if (c->state == CONN_CONNECTING)
        conn_down(c, "connect timed out");
    else
        conn_start(c);
}

/* Wait on the socket for what PQconnectPoll asked for (the socket may change). */
static void connect_wait(pgc_conn *c, PostgresPollingStatusType want)
{
    if (c->io != NULL)
        event_free(c->io);
    short ev = want == PGRES_POLLING_WRITING ? EV_WRITE : EV_READ;
    c->io = event_new(c->base, PQsocket(c->pg), ev, on_connect, c);
    event_add(c->io, NULL);
}

static void on_connect(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pgc_conn *c = arg;
    /* Off the loop before libpq may close the socket or open another. */
    event_free(c->io);
    c->io = NULL;
    PostgresPollingStatusType p = PQconnectPoll(c->pg);
    if (p == PGRES_POLLING_READING || p == PGRES_POLLING_WRITING) {
        connect_wait(c, p);
        return;
    }
    if (p == PGRES_POLLING_FAILED) {
        conn_down(c, PQerrorMessage(c->pg));
        return;
    }
    if (PQsetnonblocking(c->pg, 1) != 0 || PQenterPipelineMode(c->pg) != 1) {
        conn_down(c, PQerrorMessage(c->pg));
        return;
    }
    PQsetNoticeProcessor(c->pg, drop_notice, NULL);
    evtimer_del(c->retry);
    c->io = event_new(c->base, PQsocket(c->pg), EV_READ | EV_PERSIST, on_read, c);
    event_add(c->io, NULL);
    c->wr = event_new(c->base, PQsocket(c->pg), EV_WRITE, on_write, c);
    c->state = CONN_READY;
    c->backoff_ms = 0;
    c->st.connects++;
    pump(c);
}

static void conn_start(pgc_conn *c)
{
    const char *keys[] = {"dbname",
                          "options",
                          "keepalives",
                          "keepalives_idle",
                          "keepalives_interval",
                          "keepalives_count",
                          "tcp_user_timeout",
                          "fallback_application_name",
                          NULL};
    const char *vals[] = {c->conninfo,     c->options,  "1",
                          c->ka_idle,      c->ka_idle,  c->ka_count,
                          c->user_timeout, c->app_name, NULL};
    c->pg = PQconnectStartParams(keys, vals, 1);
    if (c->pg == NULL || PQstatus(c->pg) == CONNECTION_BAD) {
        conn_down(c, c->pg ? PQerrorMessage(c->pg) : "out of memory");
        return;
    }
    c->state = CONN_CONNECTING;
    struct timeval tv = {c->call_timeout_ms / 1000, (c->call_timeout_ms % 1000) * 1000};
    evtimer_add(c->retry, &tv);
    connect_wait(c, PGRES_POLLING_WRITING);
}

/* The connection failed or was dropped: answer every sent call -1, end the
 * transaction, and try again after the backoff. Queued calls stay queued. */
static void conn_down(pgc_conn *c, const char *why)
{
    set_error(c, "postgres", why);
    c->st.failures++;
    if (c->io != NULL)
        event_free(c->io);
    if (c->wr != NULL)
        event_free(c->wr);
    c->io = c->wr = NULL;
    if (c->pg != NULL)
        PQfinish(c->pg);
    c->pg = NULL;
    prep_clear(c);
    c->state = CONN_DOWN;
    c->owner = 0;
    struct call *k;
    while ((k = pop(&c->sent_head, &c->sent_tail)) != NULL)
        answer(c, k, -1);
    c->backoff_ms = c->backoff_ms == 0 ? 50 : c->backoff_ms * 2;
    if (c->backoff_ms > 2000)
        c->backoff_ms = 2000;
    struct timeval tv = {c->backoff_ms / 1000, (c->backoff_ms % 1000) * 1000};
    evtimer_del(c->retry);
    evtimer_add(c->retry, &tv);
}

pgc_conn *pgc_create(struct event_base *base, const struct pgc_opts *o)
{
    pgc_conn *c = seg_calloc(1, sizeof *c);
    c->base = base;
    c->conninfo = seg_strdup(o->conninfo);
    int ttl = o->lock_ttl_ms > 0 ? o->lock_ttl_ms : 5000;
    int stmt = o->statement_timeout_ms > 0 ? o->statement_timeout_ms : ttl;
    int ka = ttl / 3000 > 0 ? ttl / 3000 : 1;
    c->call_timeout_ms = o->call_timeout_ms > 0 ? o->call_timeout_ms : 3000;
    c->no_prepare = o->no_prepare;
    snprintf(c->options, sizeof c->options,
             "-c idle_in_transaction_session_timeout=%d -c statement_timeout=%d "
             "-c tcp_keepalives_idle=%d -c tcp_keepalives_interval=%d "
             "-c tcp_keepalives_count=3 -c client_connection_check_interval=%d "
             "-c synchronous_commit=on%s",
             ttl, stmt, ka, ka, ka * 1000, o->ledger ? " -c inv.ledger=on" : "");
    snprintf(c->ka_idle, sizeof c->ka_idle, "%d", ka);
    snprintf(c->app_name, sizeof c->app_name, "%s",
             o->app_name != NULL ? o->app_name : "inventoryd");
    snprintf(c->ka_count, sizeof c->ka_count, "3");
    snprintf(c->user_timeout, sizeof c->user_timeout, "%d", ttl);
    c->retry = evtimer_new(base, on_retry, c);
    c->kick = event_new(base, -1, 0, on_kick, c);
    conn_start(c);
    return c;
}

void pgc_free(pgc_conn *c)
{
    if (c == NULL)
        return;
    set_error(c, "connection closed", NULL);
    if (c->io != NULL)
        event_free(c->io);
    if (c->wr != NULL)
        event_free(c->wr);
    c->io = c->wr = NULL;
    c->state = CONN_DOWN;
    c->owner = 0;
    struct call *k;
    while ((k = pop(&c->sent_head, &c->sent_tail)) != NULL)
        answer(c, k, -1);
    while ((k = c->wait_head) != NULL) {
        wait_remove(c, k);
        answer(c, k, -1);
    }
    if (c->pg != NULL)
        PQfinish(c->pg);
    prep_clear(c);
    event_free(c->retry);
    event_free(c->kick);
    free(c->conninfo);
    free(c);
}

const char *pgc_error(const pgc_conn *c)
{
    return c->errstr;
}

void pgc_stats(const pgc_conn *c, struct pgc_stats *out)
{
    *out = c->st;
}

int pgc_ready(const pgc_conn *c)
{
    return c->state == CONN_READY;
}

int pgc_held(const pgc_conn *c)
{
    return c->owner != 0 || c->begins > 0;
}

int pgc_owed(const pgc_conn *c)
{
    return c->owed;
}
