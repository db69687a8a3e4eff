/* zklock.c -- Curator's ZooKeeper lock recipe behind lks_ops: one state machine per
 * contender, run on the loop (a zero-delay "kick" event) from what the client's
 * completions and watches recorded. */
#include "segments/zookeeper/zklock.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "segments/zookeeper/zksession.h"

#define ZKL_ROOT "/inventoryd/locks"
#define ZKL_NAME_MAX 128
#define ZKL_CHILD_MAX 64 /* "_c_" + 32 hex + "-lock-" + 10 digits, with room */
#define ZKL_PATH_MAX 320

/* One contender's state. The request of a state is the only one in flight for the
 * lock (a renew is separate); its completion records the reply only while the lock
 * is still in that state, so a late reply after a change of plan is dropped. */
enum zkl_state {
    ZKL_OFFLINE,  /* the next request waits for the session to be connected */
    ZKL_CREATING, /* the create of our EPHEMERAL|SEQUENTIAL node is sent */
    ZKL_LISTING,  /* getChildren of the parent is sent: are we the lowest? */
    ZKL_STATING,  /* exists on our own node is sent: its czxid (node found again) */
    ZKL_WATCHING, /* a get-with-watch on our predecessor is sent, or its watch is set */
    ZKL_HELD,     /* we are the lowest: the lock is ours (answered LKS_OK) */
    ZKL_DELETING, /* the delete of our node is sent (gave up, released, cleaning up) */
    ZKL_LOST,     /* was held; the session ended: waits for the holder's release */
    ZKL_DONE,     /* nothing left to do: freed once nothing points at it */
};

static const char *state_name(enum zkl_state st)
{
    static const char *const names[] = {"offline",  "creating", "listing",
                                        "stating",  "watching", "held",
                                        "deleting", "lost",     "done"};
    return (unsigned)st < sizeof names / sizeof names[0] ? names[st] : "?";
}

/* How a reply code reads for the recipe. */
enum zkl_reply {
    R_OK,
    R_NONODE,
    R_LOSS,  /* connection lost: the session (and our node) may live on */
    R_GONE,  /* the session ended: our node, if any, is gone */
    R_OTHER, /* anything else: give up */
};

static enum zkl_reply classify(int rc)
{
    switch (rc) {
    case ZOK:
        return R_OK;
    case ZNONODE:
        return R_NONODE;
    case ZCONNECTIONLOSS:
    case ZOPERATIONTIMEOUT:
    case ZSESSIONMOVED:
        return R_LOSS;
    case ZSESSIONEXPIRED:
    case ZCLOSING:
    case ZINVALIDSTATE:
    case ZAUTHFAILED:
        return R_GONE;
    default:
        return R_OTHER;
    }
}

struct zkl_svc;

struct zkl_lock {
    lks_hold hold; /* first: the caller's lks_hold * is the lock */
    struct zkl_svc *svc;
    struct zkl_lock *prev, *next; /* every lock of the service */
    struct zkl_lock *due_next;
    bool due;
    enum zkl_state state;
    int refs; /* replies outstanding and answers queued that point here */
    /* What the reply to the current state's request said (completions set them). */
    bool replied;
    int rc;
    int rank;          /* listing: contenders before us (-1: our node is not there) */
    bool woken;        /* our predecessor's watch fired */
    bool leaving;      /* remove our node (if any) instead of taking the lock */
    bool busy;         /* answer LKS_BUSY once our node is gone */
    bool node_known;   /* `node` is our node's path */
    bool node_unsure;  /* a create's reply was lost: look for our prefix */
    bool parents_made; /* the parent and its ancestors were created once */
    bool rel_asked;    /* the holder called release: no lost callback any more */
    int ttl_ms;
    int wait_ms;
    long long wait_until;   /* in line until then */
    long long answer_until; /* the acquire's answer comes by then */
    long long sent_ms;      /* when the current request was sent */
    int64_t czxid;          /* our node's (0: not known yet) */
    struct event *timer;
    lks_acquire_fn acq_fn; /* the acquire, NULL once answered */
    void *acq_arg;
    lks_done_fn rel_fn; /* the release, while rel_pending */
    void *rel_arg;
    bool rel_pending;
    int rel_rc;
    char name[ZKL_NAME_MAX + 1];
    char parent[sizeof ZKL_ROOT + ZKL_NAME_MAX + 2];
    char prefix[48]; /* "_c_<32 hex>-lock-" */
    char node[ZKL_PATH_MAX];
    char pred[ZKL_PATH_MAX];
};

enum zkl_ans_kind { ANS_ACQUIRE, ANS_DONE, ANS_LOST };

/* A callback to run from the kick; holds a reference on its lock. */
struct zkl_answer {
    struct zkl_answer *next;
    enum zkl_ans_kind kind;
    struct zkl_lock *lk;
    lks_acquire_fn acq;
    lks_done_fn done;
    void *arg;
    int rc;
};

/* One renew: an exists on the held node. */
struct zkl_renew {
    struct zkl_lock *lk;
    lks_done_fn fn;
    void *arg;
    int ttl_ms;
    long long sent_ms;
};

struct zkl_svc {
    struct event_base *base;
    zks *zs;
    struct event *kick;
    struct zkl_lock *locks;
    struct zkl_lock *due_head, *due_tail;
    struct zkl_answer *ans_head, *ans_tail;
    struct zkl_stats st;
    bool freeing;
};

/* ---- bookkeeping ---------------------------------------------------------------- */

static void mark_due(struct zkl_lock *lk)
{
    struct zkl_svc *s = lk->svc;
    if (lk->due || s->freeing)
        return;
    lk->due = true;
    lk->due_next = NULL;
    if (s->due_tail != NULL)
        s->due_tail->due_next = lk;
    else
        s->due_head = lk;
    s->due_tail = lk;
    event_active(s->kick, EV_TIMEOUT, 0);
}

static void queue_answer(struct zkl_svc *s, struct zkl_answer *a)
{
    a->next = NULL;
    if (a->lk != NULL)
        a->lk->refs++;
    if (s->ans_tail != NULL)
        s->ans_tail->next = a;
    else
        s->ans_head = a;
    s->ans_tail = a;
    if (!s->freeing)
        event_active(s->kick, EV_TIMEOUT, 0);
}

static void queue_done(struct zkl_svc *s, struct zkl_lock *lk, lks_done_fn fn, void *arg,
                       int rc)
{
    struct zkl_answer *a = seg_calloc(1, sizeof *a);
    a->kind = ANS_DONE;
    a->lk = lk;
    a->done = fn;
    a->arg = arg;
    a->rc = rc;
    queue_answer(s, a);
}

static void unref(struct zkl_lock *lk)
{
    lk->refs--;
    if (lk->refs == 0 && lk->state == ZKL_DONE)
        mark_due(lk);
}

/* Answer the acquire (once) with rc; an OK hands the hold over. */
static void answer_acquire(struct zkl_lock *lk, int rc)
{
    if (lk->acq_fn == NULL)
        return;
    struct zkl_answer *a = seg_calloc(1, sizeof *a);
    a->kind = ANS_ACQUIRE;
    a->lk = lk;
    a->acq = lk->acq_fn;
    a->arg = lk->acq_arg;
    a->rc = rc;
    lk->acq_fn = NULL;
    evtimer_del(lk->timer);
    queue_answer(lk->svc, a);
}

/* Stop trying: the acquire is answered rc now, our node (if any) goes. */
static void fail(struct zkl_lock *lk, int rc)
{
    answer_acquire(lk, rc);
    lk->leaving = true;
}

/* Nothing left to do: answer what is still owed, then the lock is freed. */
static void finish(struct zkl_lock *lk)
{
    answer_acquire(lk, lk->busy ? LKS_BUSY : LKS_UNAVAIL);
    if (lk->rel_pending) {
        lk->rel_pending = false;
        queue_done(lk->svc, lk, lk->rel_fn, lk->rel_arg, lk->rel_rc);
    }
    lk->state = ZKL_DONE;
    lk->node_known = false;
    evtimer_del(lk->timer);
    mark_due(lk);
}

static void forget_node(struct zkl_lock *lk)
{
    lk->node_known = false;
    lk->node_unsure = false;
    lk->czxid = 0;
}

/* ---- requests and their completions ----------------------------------------------- */

static void reply_done(struct zkl_lock *lk)
{
    unref(lk);
    if (!lk->svc->freeing)
        mark_due(lk);
}

static void record(struct zkl_lock *lk, enum zkl_state st, int rc)
{
    if (lk->state == st && !lk->replied) {
        lk->replied = true;
        lk->rc = rc;
    }
}

static void on_created(int rc, const char *path, const struct Stat *stat,
                       const void *data)
{
    struct zkl_lock *lk = (struct zkl_lock *)data;
    if (lk->state == ZKL_CREATING && !lk->replied && rc == ZOK) {
        snprintf(lk->node, sizeof lk->node, "%s", path);
        lk->czxid = stat != NULL ? stat->czxid : 0;
    }
    record(lk, ZKL_CREATING, rc);
    reply_done(lk);
}

/* The sequence of a contender's node name, -1 when it is not one. */
static long long child_seq(const char *child)
{
    if (strncmp(child, "_c_", 3) != 0 || strlen(child) > ZKL_CHILD_MAX)
        return -1;
    const char *tag = strstr(child, "-lock-");
    if (tag == NULL)
        return -1;
    const char *p = tag + 6;
    long long seq = 0;
    if (*p == '\0')
        return -1;
    for (; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        seq = seq * 10 + (*p - '0');
    }
    return seq;
}

/* Our place among the parent's children: rank (or -1) and our predecessor. */
static void examine(struct zkl_lock *lk, const struct String_vector *kids)
{
    size_t plen = strlen(lk->prefix);
    if (!lk->node_known && lk->node_unsure) {
        for (int i = 0; kids != NULL && i < kids->count; i++) {
            if (strncmp(kids->data[i], lk->prefix, plen) == 0 &&
                child_seq(kids->data[i]) >= 0) {
                snprintf(lk->node, sizeof lk->node, "%s/%.64s", lk->parent,
                         kids->data[i]);
                lk->node_known = true;
                lk->czxid = 0;
                break;
            }
        }
    }
    lk->node_unsure = false;
    lk->rank = -1;
    if (!lk->node_known)
        return;
    const char *own = lk->node + strlen(lk->parent) + 1;
    long long own_seq = child_seq(own), best = -1;
    bool found = false;
    int rank = 0;
    for (int i = 0; kids != NULL && i < kids->count; i++) {
        const char *c = kids->data[i];
        if (strcmp(c, own) == 0) {
            found = true;
            continue;
        }
        long long seq = child_seq(c);
        if (seq < 0 || seq >= own_seq)
            continue;
        rank++;
        if (seq > best) {
            best = seq;
            snprintf(lk->pred, sizeof lk->pred, "%s/%.64s", lk->parent, c);
        }
    }
    if (found)
        lk->rank = rank;
    else
        lk->node_known = false; /* gone (deleted by someone): not ours any more */
}

static void on_listed(int rc, const struct String_vector *kids, const void *data)
{
    struct zkl_lock *lk = (struct zkl_lock *)data;
    if (lk->state == ZKL_LISTING && !lk->replied && rc == ZOK)
        examine(lk, kids);
    record(lk, ZKL_LISTING, rc);
    reply_done(lk);
}

static void on_stat(int rc, const struct Stat *stat, const void *data)
{
    struct zkl_lock *lk = (struct zkl_lock *)data;
    if (lk->state == ZKL_STATING && !lk->replied && rc == ZOK && stat != NULL)
        lk->czxid = stat->czxid;
    record(lk, ZKL_STATING, rc);
    reply_done(lk);
}

static void on_watch_set(int rc, const char *value, int value_len,
                         const struct Stat *stat, const void *data)
{
    (void)value;
    (void)value_len;
    (void)stat;
    struct zkl_lock *lk = (struct zkl_lock *)data;
    record(lk, ZKL_WATCHING, rc);
    reply_done(lk);
}

static void on_deleted(int rc, const void *data)
{
    struct zkl_lock *lk = (struct zkl_lock *)data;
    record(lk, ZKL_DELETING, rc);
    reply_done(lk);
}

static void on_parent_made(int rc, const char *path, const void *data)
{
    (void)path;
    (void)data;
    if (rc != ZOK && rc != ZNODEEXISTS && classify(rc) == R_OTHER)
        log_warn("zookeeper: cannot create a lock parent: %s", zerror(rc));
}

/* Enter `st` for a request just sent (zrc: what the client said to the send). */
static void sent(struct zkl_lock *lk, enum zkl_state st, int zrc)
{
    if (zrc != ZOK) { /* not queued: the handle is ending, or out of memory */
        lk->state = ZKL_OFFLINE;
        return;
    }
    lk->state = st;
    lk->replied = false;
    lk->refs++;
}

static zhandle_t *online(struct zkl_lock *lk)
{
    zks *zs = lk->svc->zs;
    if (!zks_connected(zs)) {
        lk->state = ZKL_OFFLINE;
        return NULL;
    }
    lk->sent_ms = base_now_ms();
    return zks_handle(zs);
}

static void make_parents(struct zkl_lock *lk, zhandle_t *zh)
{
    char path[ZKL_PATH_MAX];
    /* Each level in turn: a session's requests are applied in order. */
    for (const char *p = strchr(lk->parent + 1, '/');; p = strchr(p + 1, '/')) {
        size_t n = p != NULL ? (size_t)(p - lk->parent) : strlen(lk->parent);
        snprintf(path, sizeof path, "%.*s", (int)n, lk->parent);
        zoo_acreate(zh, path, "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, on_parent_made,
                    lk->svc);
        if (p == NULL)
            break;
    }
}

static void send_create(struct zkl_lock *lk, bool with_parents)
{
    zhandle_t *zh = online(lk);
    if (zh == NULL)
        return;
    if (with_parents)
        make_parents(lk, zh);
    char path[ZKL_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", lk->parent, lk->prefix);
    /* Sent before the reply: a lost reply leaves the node to be found by prefix. */
    lk->node_unsure = true;
    sent(lk, ZKL_CREATING,
         zoo_acreate2(zh, path, "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL,
                      on_created, lk));
    lk->svc->st.creates++;
}

static void send_list(struct zkl_lock *lk)
{
    zhandle_t *zh = online(lk);
    if (zh == NULL)
        return;
    lk->woken = false;
    sent(lk, ZKL_LISTING, zoo_aget_children(zh, lk->parent, 0, on_listed, lk));
    lk->svc->st.lists++;
}

static void send_stat(struct zkl_lock *lk)
{
    zhandle_t *zh = online(lk);
    if (zh != NULL)
        sent(lk, ZKL_STATING, zoo_aexists(zh, lk->node, 0, on_stat, lk));
}

/* A data watch, as Curator sets it: on a predecessor already gone it leaves no watch
 * behind (an exists-watch would stay, waiting for a creation that never comes). */
static void send_watch(struct zkl_lock *lk)
{
    zks *zs = lk->svc->zs;
    zhandle_t *zh = online(lk);
    if (zh == NULL)
        return;
    lk->woken = false;
    sent(lk, ZKL_WATCHING,
         zoo_awget(zh, lk->pred, zks_watcher(), zks_watch_ctx(zs), on_watch_set, lk));
}

static void send_delete(struct zkl_lock *lk)
{
    zhandle_t *zh = online(lk);
    if (zh != NULL)
        sent(lk, ZKL_DELETING, zoo_adelete(zh, lk->node, -1, on_deleted, lk));
}

/* Remove our node, whatever we know of it. */
static void leave(struct zkl_lock *lk)
{
    if (lk->node_known)
        send_delete(lk);
    else if (lk->node_unsure)
        send_list(lk);
    else
        finish(lk);
}

static void grant(struct zkl_lock *lk)
{
    struct zkl_svc *s = lk->svc;
    int session_ms = zks_timeout_ms(s->zs);
    lk->state = ZKL_HELD;
    lk->hold.fence = (uint64_t)lk->czxid;
    lk->hold.valid_until_ms =
        lk->sent_ms + (lk->ttl_ms < session_ms ? lk->ttl_ms : session_ms);
    s->st.grants++;
    answer_acquire(lk, LKS_OK);
}

/* ---- the state machine ---------------------------------------------------------------
 */

/* A reply to the current state's request (lk->rc), handled. */
static void on_reply(struct zkl_lock *lk)
{
    enum zkl_reply r = classify(lk->rc);
    if (r == R_LOSS) { /* again once connected: the node stays, unsure if a create */
        lk->state = ZKL_OFFLINE;
        if (lk->rel_pending) {
            lk->rel_pending = false;
            queue_done(lk->svc, lk, lk->rel_fn, lk->rel_arg, LKS_UNAVAIL);
        }
        return;
    }
    if (r == R_GONE) { /* the session ended: our node with it */
        forget_node(lk);
        lk->rel_rc = LKS_LOST;
        if (lk->leaving)
            finish(lk);
        else
            lk->state = ZKL_OFFLINE;
        return;
    }
    switch (lk->state) {
    case ZKL_CREATING:
        if (r == R_OK) {
            lk->node_known = true;
            lk->node_unsure = false;
            if (lk->leaving)
                send_delete(lk);
            else
                send_list(lk);
        } else if (r == R_NONODE && !lk->parents_made) {
            lk->parents_made = true;
            lk->node_unsure = false;
            send_create(lk, true);
        } else {
            log_warn("zookeeper: lock %s: create failed: %s", lk->name, zerror(lk->rc));
            lk->node_unsure = false;
            fail(lk, LKS_UNAVAIL);
            finish(lk);
        }
        break;
    case ZKL_LISTING:
        if (r == R_NONODE) /* no parent: no node of ours either */
            forget_node(lk);
        if (r == R_OTHER) {
            fail(lk, LKS_UNAVAIL);
            leave(lk);
        } else if (!lk->node_known) {
            if (lk->leaving)
                finish(lk);
            else
                send_create(lk, false);
        } else if (lk->leaving) {
            send_delete(lk);
        } else if (lk->rank == 0) {
            if (lk->czxid == 0)
                send_stat(lk);
            else
                grant(lk);
        } else if (lk->wait_ms == 0 || base_now_ms() >= lk->wait_until) {
            lk->busy = true;
            lk->leaving = true;
            send_delete(lk);
        } else {
            send_watch(lk);
        }
        break;
    case ZKL_STATING:
        if (r == R_OK) {
            if (lk->leaving)
                send_delete(lk);
            else
                grant(lk);
        } else if (r == R_NONODE) {
            forget_node(lk);
            if (lk->leaving)
                finish(lk);
            else
                send_create(lk, false);
        } else {
            fail(lk, LKS_UNAVAIL);
            leave(lk);
        }
        break;
    case ZKL_WATCHING:
        if (r == R_OK)
            lk->svc->st.watches++;
        else if (r == R_NONODE) /* the predecessor went before the watch: look again */
            send_list(lk);
        else {
            fail(lk, LKS_UNAVAIL);
            leave(lk);
        }
        break;
    case ZKL_DELETING:
        lk->rel_rc = r == R_OK ? LKS_OK : r == R_NONODE ? LKS_LOST : LKS_UNAVAIL;
        if (r == R_OTHER)
            log_warn("zookeeper: lock %s: delete failed: %s", lk->name, zerror(lk->rc));
        forget_node(lk);
        finish(lk);
        break;
    default:
        break;
    }
}

/* The one handler of a lock: deadlines, then the reply or event its state waits for. */
static void lock_run(struct zkl_lock *lk)
{
    struct zkl_svc *s = lk->svc;
    long long now = base_now_ms();

    if (lk->acq_fn != NULL) {
        long long down = zks_down_since(s->zs);
        if (now >= lk->answer_until)
            fail(lk, LKS_UNAVAIL);
        else if (lk->state == ZKL_OFFLINE && down != 0 && now - down >= ZKL_REPLY_MS)
            fail(lk, LKS_UNAVAIL);
        else if (!lk->leaving && lk->state == ZKL_WATCHING && now >= lk->wait_until) {
            lk->busy = true;
            lk->leaving = true;
        }
    }
    if (lk->replied) {
        lk->replied = false;
        on_reply(lk);
    }

    switch (lk->state) {
    case ZKL_OFFLINE:
        if (lk->leaving && !lk->node_known && !lk->node_unsure) {
            finish(lk); /* nothing of ours on the server */
            break;
        }
        if (!zks_connected(s->zs))
            break;
        if (lk->leaving)
            leave(lk);
        else if (lk->node_known || lk->node_unsure)
            send_list(lk);
        else
            send_create(lk, false);
        break;
    case ZKL_WATCHING:
        if (lk->leaving)
            send_delete(lk);
        else if (lk->woken)
            send_list(lk);
        break;
    case ZKL_HELD:
        if (lk->leaving)
            send_delete(lk);
        break;
    case ZKL_LOST:
        if (lk->leaving) {
            lk->rel_rc = LKS_LOST;
            finish(lk);
        }
        break;
    default: /* a request is in flight: its reply comes back here */
        break;
    }

    if (lk->acq_fn != NULL && lk->state != ZKL_DONE) {
        long long next = lk->answer_until;
        if (lk->state == ZKL_WATCHING && lk->wait_until < next)
            next = lk->wait_until;
        long long down = zks_down_since(s->zs);
        if (lk->state == ZKL_OFFLINE && down != 0 && down + ZKL_REPLY_MS < next)
            next = down + ZKL_REPLY_MS;
        long long ms = next > now ? next - now : 0;
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        evtimer_add(lk->timer, &tv);
    }
    if (log_enabled(LOG_DEBUG))
        log_debug("zookeeper: lock %s %s", lk->name, state_name(lk->state));
}

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
                lock_run(lk);
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
            unref(a->lk);
        free(a);
    }
    zks_pump(s->zs);
}

static void on_lock_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    mark_due(arg);
}

/* ---- session events -----------------------------------------------------------------
 */

static void on_session(void *arg, enum zks_event ev)
{
    struct zkl_svc *s = arg;
    for (struct zkl_lock *lk = s->locks; lk != NULL; lk = lk->next) {
        switch (ev) {
        case ZKS_CONNECTED:
            if (lk->state == ZKL_WATCHING && !lk->leaving)
                lk->woken = true; /* a deletion may have passed unseen: look again */
            if (lk->state == ZKL_OFFLINE || lk->state == ZKL_WATCHING)
                mark_due(lk);
            break;
        case ZKS_DISCONNECTED:
            if (lk->acq_fn != NULL)
                mark_due(lk);
            break;
        case ZKS_EXPIRED:
            if (lk->state == ZKL_HELD) {
                lk->state = ZKL_LOST;
                s->st.lost++;
                struct zkl_answer *a = seg_calloc(1, sizeof *a);
                a->kind = ANS_LOST;
                a->lk = lk;
                queue_answer(s, a);
            } else if (lk->state != ZKL_LOST && lk->state != ZKL_DONE) {
                /* Every node of ours went with the session; a reply still owed
                 * comes back with ZCLOSING into a state that no longer wants it. */
                forget_node(lk);
                lk->rel_rc = LKS_LOST;
                if (lk->leaving)
                    finish(lk);
                else
                    lk->state = ZKL_OFFLINE;
                mark_due(lk);
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
            mark_due(lk);
        }
    }
}

/* ---- the operations -------------------------------------------------------------------
 */

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
        answer_acquire(lk, LKS_UNAVAIL);
        lk->state = ZKL_DONE;
        mark_due(lk);
        return;
    }
    snprintf(lk->name, sizeof lk->name, "%s", name);
    snprintf(lk->parent, sizeof lk->parent, "%s/%s", ZKL_ROOT, name);
    char hex[33];
    random_hex(hex);
    snprintf(lk->prefix, sizeof lk->prefix, "_c_%s-lock-", hex);
    zks_start(s->zs, lk->ttl_ms);
    mark_due(lk);
}

static void on_renewed(int rc, const struct Stat *stat, const void *data)
{
    struct zkl_renew *op = (struct zkl_renew *)data;
    struct zkl_lock *lk = op->lk;
    struct zkl_svc *s = lk->svc;
    int64_t id = 0;
    char pw[16];
    int res;
    enum zkl_reply r = classify(rc);
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
    queue_done(s, lk, op->fn, op->arg, res);
    unref(lk); /* the answer holds its own reference */
    free(op);
}

static void zk_renew(void *svc, lks_hold *h, int ttl_ms, lks_done_fn fn, void *arg)
{
    struct zkl_svc *s = svc;
    struct zkl_lock *lk = (struct zkl_lock *)h;
    if (lk->state != ZKL_HELD) {
        queue_done(s, lk, fn, arg, LKS_LOST);
        return;
    }
    if (!zks_connected(s->zs)) {
        queue_done(s, lk, fn, arg, LKS_UNAVAIL);
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
        queue_done(s, lk, fn, arg, LKS_UNAVAIL);
        return;
    }
    lk->refs++;
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
        queue_done(s, lk, fn, arg, LKS_UNAVAIL);
        lk->state = ZKL_OFFLINE;
    } else {
        lk->rel_fn = fn;
        lk->rel_arg = arg;
        lk->rel_pending = true;
        lk->rel_rc = LKS_LOST;
    }
    mark_due(lk);
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
