/* zkqueue.c -- the ZooKeeper lock service's due list and queued callbacks. */
#include <stdlib.h>

#include "base/xalloc.h"
#include "segments/zookeeper/zkl_internal.h"

void zkl_mark_due(struct zkl_lock *lk)
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

void zkl_queue_answer(struct zkl_svc *s, struct zkl_answer *a)
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

void zkl_queue_done(struct zkl_svc *s, struct zkl_lock *lk, lks_done_fn fn, void *arg,
                    int rc)
{
    struct zkl_answer *a = seg_calloc(1, sizeof *a);
    a->kind = ANS_DONE;
    a->lk = lk;
    a->done = fn;
    a->arg = arg;
    a->rc = rc;
    zkl_queue_answer(s, a);
}

void zkl_unref(struct zkl_lock *lk)
{
    lk->refs--;
    if (lk->refs == 0 && lk->state == ZKL_DONE)
        zkl_mark_due(lk);
}

/* Answer the acquire (once) with rc; an OK hands the hold over. */
void zkl_answer_acquire(struct zkl_lock *lk, int rc)
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
    zkl_queue_answer(lk->svc, a);
}

/* Stop trying: the acquire is answered rc now, our node (if any) goes. */
void zkl_fail(struct zkl_lock *lk, int rc)
{
    zkl_answer_acquire(lk, rc);
    lk->leaving = true;
}

/* Nothing left to do: answer what is still owed, then the lock is freed. */
void zkl_finish(struct zkl_lock *lk)
{
    zkl_answer_acquire(lk, lk->busy ? LKS_BUSY : LKS_UNAVAIL);
    if (lk->rel_pending) {
        lk->rel_pending = false;
        zkl_queue_done(lk->svc, lk, lk->rel_fn, lk->rel_arg, lk->rel_rc);
    }
    lk->state = ZKL_DONE;
    lk->node_known = false;
    evtimer_del(lk->timer);
    zkl_mark_due(lk);
}

void zkl_forget_node(struct zkl_lock *lk)
{
    lk->node_known = false;
    lk->node_unsure = false;
    lk->czxid = 0;
}
