/* zklock.c -- the ZooKeeper lock service behind lks_ops: its operations, the kick that
 * runs the contenders' state machines (zkstep.c) and the session's events. */
#include "segments/zookeeper/zklock.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "segments/zookeeper/zkl_internal.h"

static void lock_free(struct zkl_lock *lk)
{
    struct zkl_svc *s = lk->svc;
    if (lk->prev != NULL)
        lk->prev->next = lk->next;
    else
        s->locks = lk->next;
    if (lk->next != NULL)
        lk->next->prev = lk->prev;
    event_free(lk->timer);
    free(lk);
}

static void run_answer(struct zkl_svc *s, struct zkl_answer *a)
{
    struct zkl_lock *lk = a->lk;
    int rc = s->freeing && a->kind != ANS_LOST ? LKS_UNAVAIL : a->rc;
    switch (a->kind) {
    case ANS_ACQUIRE:
        a->acq(a->arg, rc, rc == LKS_OK ? &lk->hold : NULL);
        break;
    case ANS_DONE:
        if (a->done != NULL)
            a->done(a->arg, rc);
        break;
    case ANS_LOST:
        if (!s->freeing && !lk->rel_asked && lk->hold.lost != NULL)
            lk->hold.lost(lk->hold.lost_arg, &lk->hold);
        break;
    }
}

/* The kick: run the locks that are due, then the callbacks they queued, until none is
 * left; then let the session send what was queued. */
static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct zkl_svc *s = arg;
    for (;;) {
        struct zkl_lock *lk = s->due_head;
        if (lk != NULL) {
            s->due_head = lk->due_next;
            if (s->due_head == NULL)
                s->due_tail = NULL;
            lk->due = false;
            if (lk->state != ZKL_DONE)
                zkl_lock_run(lk);
            if (lk->state == ZKL_DONE && lk->refs == 0 && !lk->due)
                lock_free(lk);
            continue;
        }
        struct zkl_answer *a = s->ans_head;
        if (a == NULL)
            break;
        s->ans_head = a->next;
        if (s->ans_head == NULL)
            s->ans_tail = NULL;
        run_answer(s, a);
        if (a->lk != NULL)
            zkl_unref(a->lk);
        free(a);
    }
    zks_pump(s->zs);
}

static void on_lock_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    zkl_mark_due(arg);
}

/* ---- session events -------------------------------------------------------- */

static void on_session(void *arg, enum zks_event ev)
{
    struct zkl_svc *s = arg;
    for (struct zkl_lock *lk = s->locks; lk != NULL; lk = lk->next) {
        switch (ev) {
        case ZKS_CONNECTED:
            if (lk->state == ZKL_WATCHING && !lk->leaving)
                lk->woken = true; /* a deletion may have passed unseen: look again */
            if (lk->state == ZKL_OFFLINE || lk->state == ZKL_WATCHING)
                zkl_mark_due(lk);
            break;
        case ZKS_DISCONNECTED:
            if (lk->acq_fn != NULL)
                zkl_mark_due(lk);
            break;
        case ZKS_EXPIRED:
            if (lk->state == ZKL_HELD) {
                lk->state = ZKL_LOST;
                s->st.lost++;
                struct zkl_answer *a = seg_calloc(1, sizeof *a);
                a->kind = ANS_LOST;
                a->lk = lk;
                zkl_queue_answer(s, a);
            } else if (lk->state != ZKL_LOST && lk->state != ZKL_DONE) {
                /* Every node of ours went with the session; a reply still owed
                 * comes back with ZCLOSING into a state that no longer wants it. */
                zkl_forget_node(lk);
                lk->rel_rc = LKS_LOST;
                if (lk->leaving)
                    zkl_finish(lk);
                else
                    lk->state = ZKL_OFFLINE;
                zkl_mark_due(lk);
            }
            break;
        }
    }
}

static void on_node(void *arg, int type, const char *path)
{
    (void)type;
    struct zkl_svc *s = arg;
    for (struct zkl_lock *lk = s->locks; lk != NULL; lk = lk->next) {
        if (lk->state == ZKL_WATCHING && !lk->woken && strcmp(lk->pred, path) == 0) {
            lk->woken = true;
            s->st.wakeups++;
            zkl_mark_due(lk);
        }
    }
}

/* ---- the operations -------------------------------------------------------- */

static bool valid_name(const char *name)
{
    size_t n = name != NULL ? strlen(name) : 0;
    if (n == 0 || n > ZKL_NAME_MAX || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

static void random_hex(char out[33])
{
    unsigned char b[16];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t n = getrandom(b + got, sizeof b - got, 0);
        if (n <= 0) {
            fprintf(stderr, "zookeeper: getrandom failed\n");
            abort();
        }
        got += (size_t)n;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof b; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[32] = '\0';
}

static void *zk_create(struct event_base *base, const char *target, char *err, size_t len)
{
    struct zkl_svc *s = seg_calloc(1, sizeof *s);
    struct zks_handlers h = {.session = on_session, .node = on_node, .arg = s};
    s->base = base;
    s->zs = zks_create(base, target, &h, err, len);
    if (s->zs == NULL) {
        free(s);
        return NULL;
    }
    s->kick = event_new(base, -1, 0, on_kick, s);
    if (s->kick == NULL) {
        fprintf(stderr, "zookeeper: out of memory for an event\n");
        abort();
    }
    return s;
}

static void zk_free(void *svc)
{
    struct zkl_svc *s = svc;
    if (s == NULL)
        return;
    s->freeing = true;
    zks_free(s->zs); /* closes the session: the server deletes our nodes */
    s->zs = NULL;
    for (struct zkl_answer *a = s->ans_head, *next; a != NULL; a = next) {
        next = a->next;
        run_answer(s, a);
        free(a);
    }
    for (struct zkl_lock *lk = s->locks, *next; lk != NULL; lk = next) {
        next = lk->next;
        if (lk->acq_fn != NULL)
            lk->acq_fn(lk->acq_arg, LKS_UNAVAIL, NULL);
        if (lk->rel_pending && lk->rel_fn != NULL)
            lk->rel_fn(lk->rel_arg, LKS_UNAVAIL);
        event_free(lk->timer);
        free(lk);
    }
    event_free(s->kick);
    free(s);
}

static void zk_acquire(void *svc, const char *name, int ttl_ms, int wait_ms,
                       lks_acquire_fn fn, void *arg)
{
    struct zkl_svc *s = svc;
    struct zkl_lock *lk = seg_calloc(1, sizeof *lk);
    long long now = base_now_ms();
    lk->svc = s;
    lk->next = s->locks;
    if (s->locks != NULL)
        s->locks->prev = lk;
    s->locks = lk;
    lk->timer = evtimer_new(s->base, on_lock_timer, lk);
    if (lk->timer == NULL) {
        fprintf(stderr, "zookeeper: out of memory for a timer\n");
        abort();
    }
    lk->acq_fn = fn;
    lk->acq_arg = arg;
    lk->ttl_ms = ttl_ms > 0 ? ttl_ms : 1;
    lk->wait_ms = wait_ms > 0 ? wait_ms : 0;
    lk->wait_until = now + lk->wait_ms;
    lk->answer_until = lk->wait_until + ZKL_REPLY_MS;
    lk->hold.name = lk->name;
    lk->state = ZKL_OFFLINE;
    if (!valid_name(name)) {
        log_warn("zookeeper: refused lock name '%.40s'", name != NULL ? name : "");
        zkl_answer_acquire(lk, LKS_UNAVAIL);
        lk->state = ZKL_DONE;
        zkl_mark_due(lk);
        return;
    }
    snprintf(lk->name, sizeof lk->name, "%s", name);
    snprintf(lk->parent, sizeof lk->parent, "%s/%s", ZKL_ROOT, name);
    char hex[33];
    random_hex(hex);
    snprintf(lk->prefix, sizeof lk->prefix, "_c_%s-lock-", hex);
    zks_start(s->zs, lk->ttl_ms);
    zkl_mark_due(lk);
}

static void on_renewed(int rc, const struct Stat *stat, const void *data)
{
    struct zkl_renew *op = (struct zkl_renew *)data;
    struct zkl_lock *lk = op->lk;
    struct zkl_svc *s = lk->svc;
    int64_t id = 0;
    char pw[16];
    int res;
    enum zkl_reply r = zkl_classify(rc);
    if (r == R_OK && stat != NULL && zks_client_id(s->zs, &id, pw) == 0 &&
        stat->ephemeralOwner == id && lk->state == ZKL_HELD) {
        int session_ms = zks_timeout_ms(s->zs);
        long long until =
            op->sent_ms + (op->ttl_ms < session_ms ? op->ttl_ms : session_ms);
        if (until > lk->hold.valid_until_ms)
            lk->hold.valid_until_ms = until;
        res = LKS_OK;
    } else if (r == R_OK || r == R_NONODE) {
        if (lk->state == ZKL_HELD)
            lk->state = ZKL_LOST; /* the renewer learns it from the answer */
        res = LKS_LOST;
    } else if (r == R_GONE && !s->freeing) {
        res = LKS_LOST;
    } else {
        res = LKS_UNAVAIL;
    }
    if (!op->answered)
        zkl_queue_done(s, lk, op->fn, op->arg, res);
    zkl_unref(lk); /* the answer holds its own reference */
    event_free(op->timer);
    free(op);
}

/* No reply within the allowance: UNAVAIL now (a late OK still moves valid_until). */
static void on_renew_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct zkl_renew *op = arg;
    op->answered = true;
    zkl_queue_done(op->lk->svc, op->lk, op->fn, op->arg, LKS_UNAVAIL);
}

static void zk_renew(void *svc, lks_hold *h, int ttl_ms, lks_done_fn fn, void *arg)
{
    struct zkl_svc *s = svc;
    struct zkl_lock *lk = (struct zkl_lock *)h;
    if (lk->state != ZKL_HELD) {
        zkl_queue_done(s, lk, fn, arg, LKS_LOST);
        return;
    }
    if (!zks_connected(s->zs)) {
        zkl_queue_done(s, lk, fn, arg, LKS_UNAVAIL);
        return;
    }
    struct zkl_renew *op = seg_calloc(1, sizeof *op);
    op->lk = lk;
    op->fn = fn;
    op->arg = arg;
    op->ttl_ms = ttl_ms > 0 ? ttl_ms : lk->ttl_ms;
    op->sent_ms = base_now_ms();
    if (zoo_aexists(zks_handle(s->zs), lk->node, 0, on_renewed, op) != ZOK) {
        free(op);
        zkl_queue_done(s, lk, fn, arg, LKS_UNAVAIL);
        return;
    }
    lk->refs++;
    op->timer = evtimer_new(s->base, on_renew_timeout, op);
    if (op->timer == NULL) {
        fprintf(stderr, "zookeeper: out of memory for a timer\n");
        abort();
    }
    struct timeval tv = {ZKL_REPLY_MS / 1000, (ZKL_REPLY_MS % 1000) * 1000};
    evtimer_add(op->timer, &tv);
    zks_pump(s->zs);
}

static void zk_release(void *svc, lks_hold *h, lks_done_fn fn, void *arg)
{
    struct zkl_svc *s = svc;
    struct zkl_lock *lk = (struct zkl_lock *)h;
    lk->rel_asked = true;
    lk->leaving = true;
    if (lk->state == ZKL_HELD && !zks_connected(s->zs)) {
        /* Not known now; the node is deleted once connected, or goes with the session. */
        zkl_queue_done(s, lk, fn, arg, LKS_UNAVAIL);
        lk->state = ZKL_OFFLINE;
    } else {
        lk->rel_fn = fn;
        lk->rel_arg = arg;
        lk->rel_pending = true;
        lk->rel_rc = LKS_LOST;
        lk->answer_until = base_now_ms() + ZKL_REPLY_MS;
    }
    zkl_mark_due(lk);
}

const struct lks_ops zkl_ops = {
    .name = "zookeeper",
    .caps = LKS_CAP_FENCES,
    .create = zk_create,
    .free = zk_free,
    .acquire = zk_acquire,
    .renew = zk_renew,
    .release = zk_release,
};

void zkl_get_stats(void *svc, struct zkl_stats *out)
{
    struct zkl_svc *s = svc;
    *out = s->st;
    out->sessions = zks_sessions(s->zs);
}

int zkl_session(void *svc, int64_t *id, char passwd[16])
{
    struct zkl_svc *s = svc;
    return zks_client_id(s->zs, id, passwd);
}
