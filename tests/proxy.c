/* proxy.c -- loopback TCP fault-injection proxy in front of redis-server (proxy.h). */
#include "tests/proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_PAIRS 256
#define BUF_SIZE 16384
#define SEEN_MAX 4096

struct buf {
    size_t len; /* bytes waiting in data[0..len) */
    char data[BUF_SIZE];
};

struct pair {
    int cfd, ufd;
    struct buf up;   /* client -> Redis, not yet written */
    struct buf down; /* Redis -> client, not yet written */
    bool doomed;     /* the armed pattern matched: reset on the next reply bytes */
    size_t seen_len; /* client bytes since the last reply bytes: the match window */
    char seen[SEEN_MAX];
};

struct h_proxy {
    int port, upstream_port, lfd;
    int wake[2]; /* a byte written to wake[1] interrupts the thread's poll */
    pthread_t thread;
    bool started;
    atomic_int drops;
    pthread_mutex_t mu; /* guards what follows; the thread holds it except in poll */
    pthread_cond_t cv;  /* reset_done advanced */
    bool stop;
    char *pattern; /* armed while `armed` > 0 matches are left */
    int armed;
    unsigned long reset_req, reset_done; /* h_proxy_reset_all asks, the thread does */
    int reset_count;
    struct pair *pairs[MAX_PAIRS]; /* NULL: free slot */
};

/* Out of memory aborts: a test utility has nothing better to do. */
static void *must(void *ptr)
{
    if (ptr == NULL) {
        fputs("proxy: out of memory\n", stderr);
        abort();
    }
    return ptr;
}

static void wake(h_proxy *p)
{
    char b = 1;
    ssize_t n = write(p->wake[1], &b, 1); /* a full pipe is already a pending wake */
    (void)n;
}

static struct sockaddr_in loopback(int port)
{
    return (struct sockaddr_in){.sin_family = AF_INET,
                                .sin_port = htons((unsigned short)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
}

/* Write what `b` holds without blocking. False on a write error. */
static bool flush(int fd, struct buf *b)
{
    while (b->len > 0) {
        ssize_t n = send(fd, b->data, b->len, MSG_NOSIGNAL);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR;
        memmove(b->data, b->data + n, b->len - (size_t)n);
        b->len -= (size_t)n;
    }
    return true;
}

/* Append what `fd` has to `b`. Returns the bytes read, 0 when none were ready, -1 on
 * EOF or error (a full buffer reads as EOF: only a hangup gets us here then). */
static ssize_t fill(int fd, struct buf *b)
{
    ssize_t n = recv(fd, b->data + b->len, BUF_SIZE - b->len, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n <= 0)
        return -1;
    b->len += (size_t)n;
    return n;
}

/* Close pair `i`. `rst`: abortive close of the client (RST), nothing flushed. */
static void pair_close(h_proxy *p, int i, bool rst)
{
    struct pair *c = p->pairs[i];
    if (rst) {
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(c->cfd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    } else {
        flush(c->ufd, &c->up);
        flush(c->cfd, &c->down);
    }
    close(c->cfd);
    close(c->ufd);
    free(c);
    p->pairs[i] = NULL;
}

/* Add `n` request bytes to the match window; doom the pair when the pattern is in it. */
static void note_request(h_proxy *p, struct pair *c, const char *d, size_t n)
{
    if (n > SEEN_MAX) {
        d += n - SEEN_MAX;
        n = SEEN_MAX;
    }
    if (c->seen_len + n > SEEN_MAX) {
        size_t drop = c->seen_len + n - SEEN_MAX;
        memmove(c->seen, c->seen + drop, c->seen_len - drop);
        c->seen_len -= drop;
    }
    memcpy(c->seen + c->seen_len, d, n);
    c->seen_len += n;
    if (c->doomed || p->armed <= 0 ||
        !memmem(c->seen, c->seen_len, p->pattern, strlen(p->pattern)))
        return;
    c->doomed = true;
    c->seen_len = 0;
    p->armed--;
}

/* Move bytes for pair `i` after poll reported `rc` on its client, `ru` on upstream. */
static void service(h_proxy *p, int i, short rc, short ru)
{
    struct pair *c = p->pairs[i];
    const short ready = POLLIN | POLLHUP | POLLERR | POLLNVAL;
    size_t at = c->up.len;
    ssize_t n = (rc & ready) ? fill(c->cfd, &c->up) : 0;
    if (n > 0)
        note_request(p, c, c->up.data + at, (size_t)n);
    ssize_t m = (n >= 0 && (ru & ready)) ? fill(c->ufd, &c->down) : 0;
    if (m > 0 && c->doomed) {
        atomic_fetch_add(&p->drops, 1);
        pair_close(p, i, true);
    } else if (n < 0 || m < 0 || !flush(c->ufd, &c->up) || !flush(c->cfd, &c->down)) {
        pair_close(p, i, false);
    } else if (m > 0) {
        c->seen_len = 0; /* a reply: the next request starts a new window */
    }
}

/* Accept one client and connect its upstream (blocking: loopback answers at once). */
static void accept_one(h_proxy *p)
{
    int cfd = accept4(p->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    int i = 0, one = 1;
    while (i < MAX_PAIRS && p->pairs[i] != NULL)
        i++;
    if (cfd < 0 || i == MAX_PAIRS) {
        if (cfd >= 0)
            fprintf(stderr, "proxy: %d connections open, refusing one\n", MAX_PAIRS);
        close(cfd);
        return;
    }
    struct sockaddr_in a = loopback(p->upstream_port);
    int ufd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (ufd < 0 || connect(ufd, (struct sockaddr *)&a, sizeof a) < 0 ||
        fcntl(ufd, F_SETFL, O_NONBLOCK) < 0) {
        fprintf(stderr, "proxy: connect to port %d: %s\n", p->upstream_port,
                strerror(errno));
        close(ufd);
        close(cfd);
        return;
    }
    /* Without these a request split in two can wait out a delayed ACK. */
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    p->pairs[i] = must(calloc(1, sizeof *p->pairs[i]));
    p->pairs[i]->cfd = cfd;
    p->pairs[i]->ufd = ufd;
}

/* What to poll a side for: reading while `in` has room, writing while `out` has bytes. */
static struct pollfd want(int fd, const struct buf *in, const struct buf *out)
{
    short ev = (in->len < BUF_SIZE ? POLLIN : 0) | (out->len > 0 ? POLLOUT : 0);
    return (struct pollfd){.fd = fd, .events = ev};
}

static void *run(void *arg)
{
    h_proxy *p = arg;
    struct pollfd pfd[2 + 2 * MAX_PAIRS];
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        if (p->reset_done != p->reset_req) {
            p->reset_count = 0;
            for (int i = 0; i < MAX_PAIRS; i++) {
                if (p->pairs[i] != NULL) {
                    pair_close(p, i, true);
                    p->reset_count++;
                }
            }
            p->reset_done = p->reset_req;
            pthread_cond_broadcast(&p->cv);
        }
        int n = 2;
        pfd[0] = (struct pollfd){.fd = p->wake[0], .events = POLLIN};
        pfd[1] = (struct pollfd){.fd = p->lfd, .events = POLLIN};
        for (int i = 0; i < MAX_PAIRS; i++) {
            struct pair *c = p->pairs[i];
            if (c != NULL) {
                pfd[n++] = want(c->cfd, &c->up, &c->down);
                pfd[n++] = want(c->ufd, &c->down, &c->up);
            }
        }
        pthread_mutex_unlock(&p->mu);
        int r = poll(pfd, (nfds_t)n, -1);
        int err = errno;
        pthread_mutex_lock(&p->mu);
        if (r < 0 && err != EINTR) {
            fprintf(stderr, "proxy: poll: %s\n", strerror(err));
            abort(); /* EFAULT, EINVAL or ENOMEM: nothing to recover */
        }
        char drain[64];
        while (pfd[0].revents != 0 && read(p->wake[0], drain, sizeof drain) > 0)
            ;
        /* The same walk as above: only service() empties a slot, none was filled. */
        for (int i = 0, k = 2; r > 0 && k < n; i++) {
            if (p->pairs[i] == NULL)
                continue;
            if ((pfd[k].revents | pfd[k + 1].revents) != 0)
                service(p, i, pfd[k].revents, pfd[k + 1].revents);
            k += 2;
        }
        if (r > 0 && pfd[1].revents != 0)
            accept_one(p);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

h_proxy *h_proxy_start(int upstream_port)
{
    h_proxy *p = must(calloc(1, sizeof *p));
    p->upstream_port = upstream_port;
    p->lfd = p->wake[0] = p->wake[1] = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    struct sockaddr_in a = loopback(0);
    socklen_t alen = sizeof a;
    if (pipe2(p->wake, O_NONBLOCK | O_CLOEXEC) < 0 ||
        (p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0 ||
        bind(p->lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(p->lfd, 128) < 0 ||
        getsockname(p->lfd, (struct sockaddr *)&a, &alen) < 0) {
        fprintf(stderr, "proxy: listen on 127.0.0.1: %s\n", strerror(errno));
        h_proxy_free(p);
        return NULL;
    }
    p->port = ntohs(a.sin_port);
    int err = pthread_create(&p->thread, NULL, run, p);
    if (err != 0) {
        fprintf(stderr, "proxy: pthread_create: %s\n", strerror(err));
        h_proxy_free(p);
        return NULL;
    }
    p->started = true;
    return p;
}

int h_proxy_port(const h_proxy *p)
{
    return p->port;
}

void h_proxy_drop_reply(h_proxy *p, const char *pattern, int count)
{
    bool on = pattern != NULL && pattern[0] != '\0' && count > 0;
    char *copy = on ? must(strdup(pattern)) : NULL;
    pthread_mutex_lock(&p->mu);
    free(p->pattern);
    p->pattern = copy;
    p->armed = on ? count : 0;
    pthread_mutex_unlock(&p->mu);
    wake(p);
}

int h_proxy_drops(const h_proxy *p)
{
    return atomic_load(&p->drops);
}

int h_proxy_reset_all(h_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    unsigned long ticket = ++p->reset_req;
    wake(p);
    while (p->reset_done < ticket)
        pthread_cond_wait(&p->cv, &p->mu);
    int n = p->reset_count;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void h_proxy_free(h_proxy *p)
{
    if (p == NULL)
        return;
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_mutex_unlock(&p->mu);
        wake(p);
        pthread_join(p->thread, NULL);
    }
    for (int i = 0; i < MAX_PAIRS; i++)
        if (p->pairs[i] != NULL)
            pair_close(p, i, false);
    close(p->lfd); /* -1 when never opened: EBADF, harmless */
    close(p->wake[0]);
    close(p->wake[1]);
    free(p->pattern);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
