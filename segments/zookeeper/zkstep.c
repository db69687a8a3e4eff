/* zkstep.c -- the ZooKeeper lock recipe's state machine: one contender's requests,
 * their completions, and the handler that moves it on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "segments/zookeeper/zkl_internal.h"

static const char *state_name(enum zkl_state st)
{
    static const char *const names[] = {"offline",  "creating", "listing",
                                        "stating",  "watching", "held",
                                        "deleting", "lost",     "done"};
    return (unsigned)st < sizeof names / sizeof names[0] ? names[st] : "?";
}

enum zkl_reply zkl_classify(int rc)
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

/* ---- requests and their completions ---------------------------------------- */

static void reply_done(struct zkl_lock *lk)
{
    zkl_unref(lk);
    if (!lk->svc->freeing)
        zkl_mark_due(lk);
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
    if (rc != ZOK && rc != ZNODEEXISTS && zkl_classify(rc) == R_OTHER)
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
        zkl_finish(lk);
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
    zkl_answer_acquire(lk, LKS_OK);
}

/* ---- the state machine ----------------------------------------------------- */

/* A reply to the current state's request (lk->rc), handled. */
static void on_reply(struct zkl_lock *lk)
{
    enum zkl_reply r = zkl_classify(lk->rc);
    if (r == R_LOSS) { /* again once connected: the node stays, unsure if a create */
        lk->state = ZKL_OFFLINE;
        if (lk->rel_pending) {
            lk->rel_pending = false;
            zkl_queue_done(lk->svc, lk, lk->rel_fn, lk->rel_arg, LKS_UNAVAIL);
        }
        return;
    }
    if (r == R_GONE) { /* the session ended: our node with it */
        zkl_forget_node(lk);
        lk->rel_rc = LKS_LOST;
        if (lk->leaving)
            zkl_finish(lk);
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
            zkl_fail(lk, LKS_UNAVAIL);
            zkl_finish(lk);
        }
        break;
    case ZKL_LISTING:
        if (r == R_NONODE) /* no parent: no node of ours either */
            zkl_forget_node(lk);
        if (r == R_OTHER) {
            zkl_fail(lk, LKS_UNAVAIL);
            leave(lk);
        } else if (!lk->node_known) {
            if (lk->leaving)
                zkl_finish(lk);
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
            zkl_forget_node(lk);
            if (lk->leaving)
                zkl_finish(lk);
            else
                send_create(lk, false);
        } else {
            zkl_fail(lk, LKS_UNAVAIL);
            leave(lk);
        }
        break;
    case ZKL_WATCHING:
        if (r == R_OK)
            lk->svc->st.watches++;
        else if (r == R_NONODE) /* the predecessor went before the watch: look again */
            send_list(lk);
        else {
            zkl_fail(lk, LKS_UNAVAIL);
            leave(lk);
        }
        break;
    case ZKL_DELETING:
        lk->rel_rc = r == R_OK ? LKS_OK : r == R_NONODE ? LKS_LOST : LKS_UNAVAIL;
        if (r == R_OTHER)
            log_warn("zookeeper: lock %s: delete failed: %s", lk->name, zerror(lk->rc));
        zkl_forget_node(lk);
        zkl_finish(lk);
        break;
    default:
        break;
    }
}

/* The one handler of a lock: deadlines, then the reply or event its state waits for. */
void zkl_lock_run(struct zkl_lock *lk)
{
    struct zkl_svc *s = lk->svc;
    long long now = base_now_ms();

    if (lk->acq_fn != NULL) {
        long long down = zks_down_since(s->zs);
        if (now >= lk->answer_until)
            zkl_fail(lk, LKS_UNAVAIL);
        else if (lk->state == ZKL_OFFLINE && down != 0 && now - down >= ZKL_REPLY_MS)
            zkl_fail(lk, LKS_UNAVAIL);
        else if (!lk->leaving && lk->state == ZKL_WATCHING && now >= lk->wait_until) {
            lk->busy = true;
            lk->leaving = true;
        }
    }
    if (lk->rel_pending && now >= lk->answer_until) {
        /* No answer within the allowance: UNAVAIL now, the node deleted later. */
        lk->rel_pending = false;
        zkl_queue_done(s, lk, lk->rel_fn, lk->rel_arg, LKS_UNAVAIL);
    }
    if (lk->replied) {
        lk->replied = false;
        on_reply(lk);
    }

    switch (lk->state) {
    case ZKL_OFFLINE:
        if (lk->leaving && !lk->node_known && !lk->node_unsure) {
            zkl_finish(lk); /* nothing of ours on the server */
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
            zkl_finish(lk);
        }
        break;
    default: /* a request is in flight: its reply comes back here */
        break;
    }

    if ((lk->acq_fn != NULL || lk->rel_pending) && lk->state != ZKL_DONE) {
        long long next = lk->answer_until;
        long long down = zks_down_since(s->zs);
        if (lk->acq_fn != NULL && lk->state == ZKL_WATCHING && lk->wait_until < next)
            next = lk->wait_until;
        if (lk->acq_fn != NULL && lk->state == ZKL_OFFLINE && down != 0 &&
            down + ZKL_REPLY_MS < next)
            next = down + ZKL_REPLY_MS;
        long long ms = next > now ? next - now : 0;
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        evtimer_add(lk->timer, &tv);
    }
    if (log_enabled(LOG_DEBUG))
        log_debug("zookeeper: lock %s %s", lk->name, state_name(lk->state));
}
