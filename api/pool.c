/* pool.c -- worker threads, a mutex-protected FIFO and a condition variable. */
#include "api/pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct job {
    pool_job_fn fn;
    void *arg;
    struct job *next;
};

struct pool {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled when a job is queued or shutdown begins */
    struct job *head, *tail;
    bool stopping;
    pool_init_fn init;
    pool_fini_fn fini;
    void *arg;
    int nthreads; /* workers started and not yet joined */
    pthread_t *threads;
};

static void *worker(void *vp)
{
    struct pool *p = vp;
    void *state = p->init != NULL ? p->init(p->arg) : NULL;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->head == NULL && !p->stopping)
            pthread_cond_wait(&p->cv, &p->mu);
        struct job *j = p->head;
        if (j == NULL) { /* stopping and drained */
            pthread_mutex_unlock(&p->mu);
            break;
        }
        p->head = j->next;
        if (p->head == NULL)
            p->tail = NULL;
        pthread_mutex_unlock(&p->mu);
        j->fn(state, j->arg);
        free(j);
    }
    if (p->fini != NULL)
        p->fini(state, p->arg);
    return NULL;
}

/* Stop and join the first `started` workers. */
static void stop_workers(struct pool *p, int started)
{
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < started; i++)
        pthread_join(p->threads[i], NULL);
    p->nthreads = 0;
}

struct pool *pool_create(int threads, pool_init_fn init, pool_fini_fn fini, void *arg,
                         char *err, size_t errlen)
{
    if (threads < 1) {
        snprintf(err, errlen, "pool: need at least one thread");
        return NULL;
    }
    struct pool *p = calloc(1, sizeof(*p));
    pthread_t *tids = calloc((size_t)threads, sizeof(*tids));
    if (p == NULL || tids == NULL) {
        fputs("inventoryd: out of memory\n", stderr);
        abort();
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->init = init;
    p->fini = fini;
    p->arg = arg;
    p->threads = tids;
    for (int i = 0; i < threads; i++) {
        int rc = pthread_create(&p->threads[i], NULL, worker, p);
        if (rc != 0) {
            snprintf(err, errlen, "pool: cannot start worker %d of %d: %s", i + 1,
                     threads, strerror(rc));
            stop_workers(p, i);
            pthread_cond_destroy(&p->cv);
            pthread_mutex_destroy(&p->mu);
            free(p->threads);
            free(p);
            return NULL;
        }
        p->nthreads = i + 1;
    }
    return p;
}

int pool_submit(struct pool *p, pool_job_fn fn, void *arg)
{
    struct job *j = malloc(sizeof(*j));
    if (j == NULL) {
        fputs("inventoryd: out of memory\n", stderr);
        abort();
    }
    j->fn = fn;
    j->arg = arg;
    j->next = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->stopping) {
        pthread_mutex_unlock(&p->mu);
        free(j);
        return -1;
    }
    if (p->tail != NULL)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    pthread_mutex_unlock(&p->mu);
    /* Signal after unlocking, so the woken worker does not block at once on the mutex
     * still held here (a futex round trip per request under load). */
    pthread_cond_signal(&p->cv);
    return 0;
}

void pool_drain(struct pool *p)
{
    stop_workers(p, p->nthreads);
}

void pool_free(struct pool *p)
{
    if (p == NULL)
        return;
    stop_workers(p, p->nthreads);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}
