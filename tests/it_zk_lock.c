/* it_zk_lock.c -- the ZooKeeper lock service (segments/zookeeper/zklock.h) against a
 * real standalone server (tests/harness_zk.h), one per binary.
 *
 * Several handles (each its own session) on one libevent loop contend for names:
 * at most one holder at a time and strictly increasing fences (the holder's node's
 * czxid); waiters granted in the order they queued, each woken once, by its
 * predecessor only (no herd); a waiter that gives up after wait_ms leaves no node; a
 * holder whose session is expired the classic way is told (lost callback) and the
 * next contender gets the lock with a higher fence; the server stopped or paused
 * answers LKS_UNAVAIL, and the locks work again when it is back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <event2/event.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/zookeeper/zklock.h"
#include "tests/harness.h"
#include "tests/harness_zk.h"
#include "tests/proxy.h"

#define TTL 20000 /* the session timeout asked for: longer than any stop below */
#define ROOT "/inventoryd/locks/"

static const struct lks_ops *ops = &zkl_ops;

static int group_setup(void **state)
{
    h_deadline(120);
    h_zk *zk = h_zk_start();
    *state = zk;
    return zk != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    h_zk_free(*state);
    return 0;
}

/* ---- a loop and its callbacks ---------------------------------------------- */

struct acq {
    bool done;
    int rc;
    lks_hold *h;
    long long at_ms;
};

static void on_acq(void *arg, int rc, lks_hold *h)
{
    struct acq *a = arg;
    assert_false(a->done); /* exactly once */
    a->done = true;
    a->rc = rc;
    a->h = h;
    a->at_ms = h_now_ms();
}

struct done {
    bool done;
    int rc;
};

static void on_done(void *arg, int rc)
{
    struct done *d = arg;
    assert_false(d->done);
    d->done = true;
    d->rc = rc;
}

/* Run the loop until *flag or ms pass; true when *flag. */
static bool run_until(struct event_base *b, const bool *flag, int ms)
{
    long long end = h_now_ms() + ms;
    while (!*flag && h_now_ms() < end) {
        struct timeval tv = {0, 5000};
        event_base_loopexit(b, &tv);
        event_base_dispatch(b);
    }
    return *flag;
}

static void run_for(struct event_base *b, int ms)
{
    bool never = false;
    run_until(b, &never, ms);
}

static void *svc_new(struct event_base *b, const h_zk *zk)
{
    char err[160];
    void *s = ops->create(b, h_zk_addr(zk), err, sizeof err);
    if (s == NULL)
        fail_msg("create: %s", err);
    return s;
}

static int acquire_ttl_sync(struct event_base *b, void *svc, const char *name, int ttl_ms,
                            int wait_ms, lks_hold **h)
{
    struct acq a = {0};
    ops->acquire(svc, name, ttl_ms, wait_ms, on_acq, &a);
    if (!run_until(b, &a.done, wait_ms + 15000))
        fail_msg("acquire %s: no answer", name);
    *h = a.h;
    return a.rc;
}

static int acquire_sync(struct event_base *b, void *svc, const char *name, int wait_ms,
                        lks_hold **h)
{
    return acquire_ttl_sync(b, svc, name, TTL, wait_ms, h);
}

static int release_sync(struct event_base *b, void *svc, lks_hold *h)
{
    struct done d = {0};
    ops->release(svc, h, on_done, &d);
    if (!run_until(b, &d.done, 15000))
        fail_msg("release: no answer");
    return d.rc;
}

static int renew_sync(struct event_base *b, void *svc, lks_hold *h)
{
    struct done d = {0};
    ops->renew(svc, h, TTL, on_done, &d);
    if (!run_until(b, &d.done, 15000))
        fail_msg("renew: no answer");
    return d.rc;
}

/* Poll the server until `path` has `n` children (the loop keeps running). */
static void expect_children(struct event_base *b, const h_zk *zk, const char *path, int n)
{
    int got = -1;
    for (int i = 0; i < 200; i++) {
        got = h_zk_count_children(zk, path);
        if (got == n)
            return;
        run_for(b, 20);
    }
    fail_msg("%s: %d children, expected %d", path, got, n);
}

/* ---- mutual exclusion and fences ------------------------------------------- */

#define MX_HANDLES 4
#define MX_ROUNDS 5

struct mx {
    struct event_base *b;
    void *svc[MX_HANDLES];
    struct event *work[MX_HANDLES];
    int rounds[MX_HANDLES];
    lks_hold *h[MX_HANDLES];
    int holders, max_holders, grants, errors, finished;
    uint64_t fences[MX_HANDLES * MX_ROUNDS];
};

struct mx_ref {
    struct mx *mx;
    int i;
};
static struct mx_ref mx_refs[MX_HANDLES];

static void mx_acquired(void *arg, int rc, lks_hold *h);

static void mx_released(void *arg, int rc)
{
    struct mx_ref *r = arg;
    struct mx *m = r->mx;
    if (rc != LKS_OK)
        m->errors++;
    if (++m->rounds[r->i] < MX_ROUNDS)
        ops->acquire(m->svc[r->i], "mx", TTL, 20000, mx_acquired, r);
    else
        m->finished++;
}

/* The holder's work: a few ms with the lock, then out of the critical section. */
static void mx_work_done(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct mx_ref *r = arg;
    struct mx *m = r->mx;
    m->holders--;
    ops->release(m->svc[r->i], m->h[r->i], mx_released, r);
}

static void mx_acquired(void *arg, int rc, lks_hold *h)
{
    struct mx_ref *r = arg;
    struct mx *m = r->mx;
    if (rc != LKS_OK) {
        m->errors++;
        m->finished++;
        return;
    }
    m->holders++;
    if (m->holders > m->max_holders)
        m->max_holders = m->holders;
    m->fences[m->grants++] = h->fence;
    m->h[r->i] = h;
    struct timeval tv = {0, 5000};
    evtimer_add(m->work[r->i], &tv);
}

static void test_mutual_exclusion(void **state)
{
    h_zk *zk = *state;
    struct mx m = {0};
    m.b = event_base_new();
    for (int i = 0; i < MX_HANDLES; i++) {
        m.svc[i] = svc_new(m.b, zk);
        mx_refs[i] = (struct mx_ref){&m, i};
        m.work[i] = evtimer_new(m.b, mx_work_done, &mx_refs[i]);
    }
    for (int i = 0; i < MX_HANDLES; i++)
        ops->acquire(m.svc[i], "mx", TTL, 20000, mx_acquired, &mx_refs[i]);
    long long end = h_now_ms() + 30000;
    while (m.finished < MX_HANDLES && h_now_ms() < end)
        run_for(m.b, 20);

    assert_int_equal(m.finished, MX_HANDLES);
    assert_int_equal(m.errors, 0);
    assert_int_equal(m.max_holders, 1);
    assert_int_equal(m.grants, MX_HANDLES * MX_ROUNDS);
    for (int i = 1; i < m.grants; i++) {
        if (m.fences[i] <= m.fences[i - 1])
            fail_msg("grant %d: fence %llu after %llu", i,
                     (unsigned long long)m.fences[i],
                     (unsigned long long)m.fences[i - 1]);
    }
    assert_true(m.fences[0] > 0);
    expect_children(m.b, zk, ROOT "mx", 0);
    for (int i = 0; i < MX_HANDLES; i++) {
        event_free(m.work[i]);
        ops->free(m.svc[i]);
    }
    event_base_free(m.b);
}

/* ---- FIFO, no herd --------------------------------------------------------- */

#define FIFO_WAITERS 5

static void test_fifo_no_herd(void **state)
{
    h_zk *zk = *state;
    struct event_base *b = event_base_new();
    void *holder = svc_new(b, zk);
    void *w[FIFO_WAITERS];
    struct acq a[FIFO_WAITERS];
    lks_hold *h;
    assert_int_equal(acquire_sync(b, holder, "fifo", 0, &h), LKS_OK);
    for (int i = 0; i < FIFO_WAITERS; i++) {
        w[i] = svc_new(b, zk);
        a[i] = (struct acq){0};
        ops->acquire(w[i], "fifo", TTL, 30000, on_acq, &a[i]);
        expect_children(b, zk, ROOT "fifo", i + 2); /* in line before the next */
    }
    run_for(b, 100);
    struct zkl_stats st;
    for (int i = 0; i < FIFO_WAITERS; i++) {
        zkl_get_stats(w[i], &st);
        assert_false(a[i].done);
        assert_int_equal(st.watches, 1); /* on its predecessor, nothing else */
        assert_int_equal(st.wakeups, 0);
        assert_int_equal(st.lists, 1);
    }

    uint64_t fence = h->fence;
    assert_int_equal(release_sync(b, holder, h), LKS_OK);
    for (int i = 0; i < FIFO_WAITERS; i++) {
        if (!run_until(b, &a[i].done, 15000))
            fail_msg("waiter %d not granted", i);
        assert_int_equal(a[i].rc, LKS_OK);
        assert_true(a[i].h->fence > fence);
        fence = a[i].h->fence;
        run_for(b, 50); /* time for a herd to show */
        uint64_t woken = 0;
        for (int j = 0; j < FIFO_WAITERS; j++) {
            zkl_get_stats(w[j], &st);
            woken += st.wakeups;
            if (j > i)
                assert_false(a[j].done); /* FIFO: none overtakes */
            /* Only the next in line woke: once each, when its predecessor went. */
            assert_int_equal(st.wakeups, j <= i ? 1 : 0);
        }
        assert_int_equal(woken, (uint64_t)(i + 1));
        assert_int_equal(release_sync(b, w[i], a[i].h), LKS_OK);
    }
    for (int j = 0; j < FIFO_WAITERS; j++) {
        zkl_get_stats(w[j], &st);
        assert_int_equal(st.lists, 2); /* in line, then after its one wakeup */
        ops->free(w[j]);
    }
    expect_children(b, zk, ROOT "fifo", 0);
    ops->free(holder);
    event_base_free(b);
}

/* ---- giving up, and the fence is the czxid --------------------------------- */

static void test_wait_gives_up(void **state)
{
    h_zk *zk = *state;
    struct event_base *b = event_base_new();
    void *holder = svc_new(b, zk), *other = svc_new(b, zk);
    lks_hold *h, *h2;
    assert_int_equal(acquire_sync(b, holder, "gu", 0, &h), LKS_OK);

    char **names;
    int n;
    assert_int_equal(h_zk_children(zk, ROOT "gu", &names, &n), 0);
    assert_int_equal(n, 1);
    char path[256];
    snprintf(path, sizeof path, ROOT "gu/%s", names[0]);
    h_zk_free_names(names, n);
    assert_true(h->fence > 0);
    assert_int_equal((long long)h->fence, h_zk_czxid(zk, path));

    long long t0 = h_now_ms();
    assert_int_equal(acquire_sync(b, other, "gu", 300, &h2), LKS_BUSY);
    long long took = h_now_ms() - t0;
    assert_true(took >= 300);
    assert_true(took < 300 + ZKL_REPLY_MS); /* BUSY comes with the delete, not later */
    assert_int_equal(h_zk_count_children(zk, ROOT "gu"), 1); /* its node went */

    assert_int_equal(acquire_sync(b, other, "gu", 0, &h2), LKS_BUSY); /* one try */
    assert_int_equal(h_zk_count_children(zk, ROOT "gu"), 1);

    uint64_t fence = h->fence; /* h is the backend's until release answers */
    assert_int_equal(release_sync(b, holder, h), LKS_OK);
    assert_int_equal(h_zk_count_children(zk, ROOT "gu"), 0);
    assert_int_equal(acquire_sync(b, other, "gu", 0, &h2), LKS_OK);
    assert_true(h2->fence > fence);
    /* Valid for the ttl from the request that found it the lowest, at most. */
    long long now = h_now_ms(), until = h2->valid_until_ms;
    assert_true(until > now && until <= now + TTL);
    run_for(b, 20);
    assert_int_equal(renew_sync(b, other, h2), LKS_OK);
    assert_true(h2->valid_until_ms > until);
    assert_int_equal(release_sync(b, other, h2), LKS_OK);

    assert_int_equal(acquire_sync(b, other, "bad/name", 0, &h2), LKS_UNAVAIL);
    ops->free(holder);
    ops->free(other);
    event_base_free(b);
}

/* ---- a create whose reply is lost ------------------------------------------ */

/* The server makes the node, the reply never arrives (the proxy resets the client's
 * connection instead): after the reconnect the contender finds its node by its random
 * prefix and takes the lock with it -- one node, no second create. */
static void test_create_reply_lost(void **state)
{
    h_zk *zk = *state;
    h_proxy *px = h_proxy_start(h_zk_port(zk));
    assert_non_null(px);
    char addr[32], err[160];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", h_proxy_port(px));
    struct event_base *b = event_base_new();
    void *a = ops->create(b, addr, err, sizeof err);
    assert_non_null(a);
    lks_hold *h;
    assert_int_equal(acquire_sync(b, a, "lr", 0, &h), LKS_OK); /* makes the parent */
    assert_int_equal(release_sync(b, a, h), LKS_OK);

    struct zkl_stats st;
    zkl_get_stats(a, &st);
    uint64_t creates = st.creates;
    h_proxy_drop_reply(px, "/inventoryd/locks/lr/_c_", 1);
    assert_int_equal(acquire_sync(b, a, "lr", 5000, &h), LKS_OK);
    assert_int_equal(h_proxy_drops(px), 1);
    char **names;
    int n;
    assert_int_equal(h_zk_children(zk, ROOT "lr", &names, &n), 0);
    assert_int_equal(n, 1);
    char path[256];
    snprintf(path, sizeof path, ROOT "lr/%s", names[0]);
    h_zk_free_names(names, n);
    assert_int_equal((long long)h->fence, h_zk_czxid(zk, path));
    zkl_get_stats(a, &st);
    assert_int_equal(st.creates, creates + 1); /* not sent again */
    assert_int_equal(st.sessions, 1);
    assert_int_equal(release_sync(b, a, h), LKS_OK);
    assert_int_equal(h_zk_count_children(zk, ROOT "lr"), 0);
    ops->free(a);
    event_base_free(b);
    h_proxy_free(px);
}

/* ---- session expiry -------------------------------------------------------- */

struct lostcb {
    int calls;
    lks_hold *h;
};

static void on_lost(void *arg, lks_hold *h)
{
    struct lostcb *l = arg;
    l->calls++;
    l->h = h;
}

static void test_session_expired(void **state)
{
    h_zk *zk = *state;
    struct event_base *b = event_base_new();
    void *a = svc_new(b, zk), *c = svc_new(b, zk);
    lks_hold *h;
    assert_int_equal(acquire_sync(b, a, "ex", 0, &h), LKS_OK);
    struct lostcb lost = {0};
    h->lost = on_lost;
    h->lost_arg = &lost;
    struct acq next = {0};
    ops->acquire(c, "ex", TTL, 30000, on_acq, &next);
    expect_children(b, zk, ROOT "ex", 2);

    int64_t id;
    char pw[16];
    assert_int_equal(zkl_session(a, &id, pw), 0);
    assert_int_equal(h_zk_expire(zk, id, pw), 0);

    bool told = false;
    long long end = h_now_ms() + 15000;
    while (!(told = lost.calls > 0) && h_now_ms() < end)
        run_for(b, 20);
    assert_true(told);
    assert_true(run_until(b, &next.done, 15000));
    assert_int_equal(next.rc, LKS_OK);
    fprintf(stderr,
            "zookeeper session expired: holder told lost %d time(s), next holder's fence "
            "%llu > expired holder's %llu\n",
            lost.calls, (unsigned long long)next.h->fence, (unsigned long long)h->fence);
    assert_true(next.h->fence > h->fence);
    run_for(b, 50);
    assert_int_equal(lost.calls, 1);
    assert_ptr_equal(lost.h, h);
    assert_int_equal(renew_sync(b, a, h), LKS_LOST);
    assert_int_equal(release_sync(b, a, h), LKS_LOST);

    struct zkl_stats st;
    zkl_get_stats(a, &st);
    assert_int_equal(st.lost, 1);
    /* A new session was made: the handle takes locks again. */
    lks_hold *h2;
    assert_int_equal(acquire_sync(b, a, "ex2", 0, &h2), LKS_OK);
    zkl_get_stats(a, &st);
    assert_int_equal(st.sessions, 2);
    assert_int_equal(release_sync(b, a, h2), LKS_OK);
    assert_int_equal(release_sync(b, c, next.h), LKS_OK);
    ops->free(a);
    ops->free(c);
    event_base_free(b);
}

/* ---- a holder frozen past its session -------------------------------------- */

/* The failure the fence exists for: the holder's process stops (here: its loop is not
 * run) past its session timeout, the server expires the session and grants the lock
 * to the next contender. The frozen holder's valid_until_ms was over before that
 * grant (its own clock tells it to stop writing), and once it runs again it is told:
 * lost callback, renew and release LOST. */
static void test_holder_frozen(void **state)
{
    h_zk *zk = *state;
    struct event_base *ba = event_base_new(), *bb = event_base_new();
    void *a = svc_new(ba, zk), *c = svc_new(bb, zk);
    lks_hold *h;
    assert_int_equal(acquire_ttl_sync(ba, a, "frz", 1000, 0, &h), LKS_OK);
    struct lostcb lost = {0};
    h->lost = on_lost;
    h->lost_arg = &lost;
    uint64_t fence = h->fence;
    long long until = h->valid_until_ms;

    struct acq next = {0};
    ops->acquire(c, "frz", TTL, 10000, on_acq, &next); /* ba is not run: frozen */
    assert_true(run_until(bb, &next.done, 10000));
    assert_int_equal(next.rc, LKS_OK);
    assert_true(next.h->fence > fence);
    assert_true(next.at_ms > until); /* the frozen holder's lease was over first */
    assert_int_equal(lost.calls, 0); /* nothing ran on its loop yet */

    long long end = h_now_ms() + 10000;
    while (lost.calls == 0 && h_now_ms() < end)
        run_for(ba, 20);
    assert_int_equal(lost.calls, 1);
    assert_int_equal(renew_sync(ba, a, h), LKS_LOST);
    assert_int_equal(release_sync(ba, a, h), LKS_LOST);
    assert_int_equal(release_sync(bb, c, next.h), LKS_OK);
    ops->free(a);
    ops->free(c);
    event_base_free(ba);
    event_base_free(bb);
}

static void test_bad_target(void **state)
{
    (void)state;
    struct event_base *b = event_base_new();
    const char *bad[] = {
        "",      "127.0.0.1",   "127.0.0.1:0", "127.0.0.1:99999", "127.0.0.1:2181/chroot",
        "a b:1", "127.0.0.1:1,"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[160] = "";
        void *s = ops->create(b, bad[i], err, sizeof err);
        if (s != NULL)
            fail_msg("target '%s' accepted", bad[i]);
        assert_true(strstr(err, "zookeeper") != NULL);
    }
    char err[160];
    void *s = ops->create(b, "127.0.0.1:1,localhost:2181,[::1]:2181", err, sizeof err);
    assert_non_null(s);
    ops->free(s);
    event_base_free(b);
}

/* ---- the server stopped, then paused --------------------------------------- */

static void test_server_down(void **state)
{
    h_zk *zk = *state;
    struct event_base *b = event_base_new();
    void *a = svc_new(b, zk), *brief = svc_new(b, zk);
    lks_hold *h, *h2, *hb;
    assert_int_equal(acquire_sync(b, a, "dn", 0, &h), LKS_OK);
    /* A handle whose session times out after 1 s (its first acquire's ttl). */
    assert_int_equal(acquire_ttl_sync(b, brief, "dn4", 1000, 0, &hb), LKS_OK);
    struct lostcb lost_a = {0}, lost_b = {0};
    h->lost = on_lost;
    h->lost_arg = &lost_a;
    hb->lost = on_lost;
    hb->lost_arg = &lost_b;

    long long stopped = h_now_ms();
    assert_int_equal(h_zk_stop(zk), 0);
    run_for(b, 100);
    assert_int_equal(renew_sync(b, a, h), LKS_UNAVAIL);
    /* A connection loss keeps a hold until the session's timeout, not longer. */
    while (lost_b.calls == 0 && h_now_ms() - stopped < 10000)
        run_for(b, 20);
    assert_int_equal(lost_b.calls, 1);
    assert_true(h_now_ms() - stopped >= 1000);
    assert_int_equal(renew_sync(b, brief, hb), LKS_LOST);
    assert_int_equal(release_sync(b, brief, hb), LKS_LOST);
    assert_int_equal(lost_a.calls, 0); /* its 20 s have not passed */
    long long t0 = h_now_ms();
    assert_int_equal(acquire_sync(b, a, "dn2", 200, &h2), LKS_UNAVAIL);
    assert_true(h_now_ms() - t0 < 200 + ZKL_REPLY_MS + 1000);
    /* Down for longer than the reply allowance: answered at once. */
    run_for(b, ZKL_REPLY_MS);
    t0 = h_now_ms();
    assert_int_equal(acquire_sync(b, a, "dn2", 200, &h2), LKS_UNAVAIL);
    assert_true(h_now_ms() - t0 < 200);

    /* Back within the session timeout: the session and its hold survive. */
    assert_int_equal(h_zk_restart(zk), 0);
    int rc = LKS_UNAVAIL;
    for (int i = 0; i < 100 && rc != LKS_OK; i++) {
        rc = renew_sync(b, a, h);
        if (rc != LKS_OK)
            run_for(b, 100);
    }
    assert_int_equal(rc, LKS_OK);
    assert_int_equal(acquire_sync(b, a, "dn2", 0, &h2), LKS_OK);
    assert_int_equal(release_sync(b, a, h2), LKS_OK);
    assert_int_equal(lost_a.calls, 0);
    /* The brief handle's new session gets the lock once the server expires the old
     * one (restored at the restart, a timeout later). */
    assert_int_equal(acquire_ttl_sync(b, brief, "dn4", 1000, 10000, &hb), LKS_OK);
    assert_int_equal(release_sync(b, brief, hb), LKS_OK);

    /* Paused: no answer within wait_ms + the allowance is UNAVAIL; the create that
     * was sent is cleaned up once the server answers again. Renew and release wait
     * no longer than the allowance either (not until the client gives the connection
     * up, 2/3 of the 20 s session); the released node goes once the server is back. */
    lks_hold *h5;
    assert_int_equal(acquire_sync(b, a, "dn5", 0, &h5), LKS_OK);
    assert_int_equal(h_zk_pause(zk), 0);
    t0 = h_now_ms();
    assert_int_equal(acquire_sync(b, a, "dn3", 200, &h2), LKS_UNAVAIL);
    long long took = h_now_ms() - t0;
    assert_true(took >= 200 + ZKL_REPLY_MS);
    assert_true(took < 200 + ZKL_REPLY_MS + 1000);
    t0 = h_now_ms();
    assert_int_equal(renew_sync(b, a, h), LKS_UNAVAIL);
    assert_int_equal(release_sync(b, a, h5), LKS_UNAVAIL);
    took = h_now_ms() - t0;
    assert_true(took < 2 * ZKL_REPLY_MS + 1000);
    assert_int_equal(h_zk_resume(zk), 0);
    expect_children(b, zk, ROOT "dn3", 0);
    expect_children(b, zk, ROOT "dn5", 0);
    assert_int_equal(acquire_sync(b, a, "dn3", 0, &h2), LKS_OK);
    assert_int_equal(release_sync(b, a, h2), LKS_OK);
    assert_int_equal(release_sync(b, a, h), LKS_OK);
    expect_children(b, zk, ROOT "dn", 0);
    ops->free(a);
    ops->free(brief);
    event_base_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mutual_exclusion), cmocka_unit_test(test_fifo_no_herd),
        cmocka_unit_test(test_wait_gives_up),    cmocka_unit_test(test_create_reply_lost),
        cmocka_unit_test(test_session_expired),  cmocka_unit_test(test_holder_frozen),
        cmocka_unit_test(test_bad_target),       cmocka_unit_test(test_server_down),
    };
    int failed =
        cmocka_run_group_tests_name("zk_lock", tests, group_setup, group_teardown);
    return h_exit_status(failed);
}
