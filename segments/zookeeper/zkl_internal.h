/* zkl_internal.h -- what the files of the ZooKeeper lock service share: a contender
 * (struct zkl_lock, one state machine each) and its service. Private to
 * segments/zookeeper/. zklock.c: the operations (lks_ops), the kick that runs what is
 * due, the session's events; zkstep.c: the requests, their completions and the state
 * machine; zkqueue.c: the due list and the queued callbacks. zklock.c calls the other
 * two, zkstep.c calls zkqueue.c, nothing calls back up.
 *
 * Everything here belongs to the loop of the service's event_base. A lock lives until
 * it is DONE and nothing points at it (`refs`: replies outstanding, callbacks queued);
 * only the kick frees it. Completions and watches only record and mark a lock due;
 * requests are sent and callbacks run from the kick, never inside the client library.
 */
#ifndef SEG_ZK_INTERNAL_H
#define SEG_ZK_INTERNAL_H

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>
#include <zookeeper/zookeeper.h>

#include "segments/zookeeper/zklock.h"
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

/* How a reply code reads for the recipe. */
enum zkl_reply {
    R_OK,
    R_NONODE,
    R_LOSS,  /* connection lost: the session (and our node) may live on */
    R_GONE,  /* the session ended: our node, if any, is gone */
    R_OTHER, /* anything else: give up */
};

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
    struct event *timer; /* answers UNAVAIL after ZKL_REPLY_MS without a reply */
    bool answered;
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

/* ---- zkqueue.c ------------------------------------------------------------- */

/* Put the lock on the due list (once) and schedule the kick. */
void zkl_mark_due(struct zkl_lock *lk);
/* Queue a callback (taking a reference on its lock) and schedule the kick. */
void zkl_queue_answer(struct zkl_svc *s, struct zkl_answer *a);
/* Queue a renew's or release's answer. */
void zkl_queue_done(struct zkl_svc *s, struct zkl_lock *lk, lks_done_fn fn, void *arg,
                    int rc);
/* Drop a reference; a DONE lock with none left is marked due (to be freed). */
void zkl_unref(struct zkl_lock *lk);
/* Answer the acquire (once) with rc; an OK hands the hold over. */
void zkl_answer_acquire(struct zkl_lock *lk, int rc);
/* Stop trying: the acquire is answered rc now, our node (if any) goes. */
void zkl_fail(struct zkl_lock *lk, int rc);
/* Nothing left to do: answer what is still owed; DONE (freed by the kick). */
void zkl_finish(struct zkl_lock *lk);
/* Our node is gone, or never was. */
void zkl_forget_node(struct zkl_lock *lk);

/* ---- zkstep.c -------------------------------------------------------------- */

enum zkl_reply zkl_classify(int rc);
/* The one handler of a lock: deadlines, then the reply or event its state waits for;
 * sends at most one request. Call from the kick only. */
void zkl_lock_run(struct zkl_lock *lk);

#endif
