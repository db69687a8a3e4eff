/* harness_lock.c -- memcached and RedLock's redis-servers for the tests, and lock-service
 * handles driven synchronously. */
#include "tests/harness_lock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "harness: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* ---- memcached ------------------------------------------------------------------ */

struct h_memcached {
    pid_t pid;
    int port;
    char addr[32];
};

static bool accepts(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)port);
    bool ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

/* Wait up to ms for pid to exit; true when it did (reaped). */
static bool reaped(pid_t pid, int ms)
{
    long long end = h_now_ms() + ms;
    do {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD))
            return true;
        h_sleep_ms(5);
    } while (h_now_ms() < end);
    return false;
}

static int mc_launch(h_memcached *m)
{
    char port[16];
    snprintf(port, sizeof port, "%d", m->port);
    const char *bin = getenv("MEMCACHED");
    if (bin == NULL || bin[0] == '\0')
        bin = "memcached";
    const char *argv[] = {bin,  "-l", "127.0.0.1", "-p", port, "-U",     "0",
                          "-t", "1",  "-m",        "16", "-u", "nobody", NULL};
    if (geteuid() != 0)
        argv[11] = NULL; /* -u only as root */
    pid_t parent = getpid();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        say("fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int nul = open("/dev/null", O_RDWR);
        if (nul >= 0) {
            dup2(nul, STDIN_FILENO);
            dup2(nul, STDOUT_FILENO);
        }
        execvp(argv[0], (char *const *)argv);
        dprintf(STDERR_FILENO, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    m->pid = pid;
    long long end = h_now_ms() + 5000;
    while (h_now_ms() < end) {
        if (accepts(m->port))
            return 0;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            say("memcached on port %d exited at start (status %d)", m->port, st);
            m->pid = 0;
            return -1;
        }
        h_sleep_ms(10);
    }
    say("memcached on port %d did not accept within 5 s", m->port);
    kill(pid, SIGKILL);
    reaped(pid, 5000);
    m->pid = 0;
    return -1;
}

static void mc_stop(h_memcached *m)
{
    if (m->pid <= 0)
        return;
    kill(m->pid, SIGCONT);
    kill(m->pid, SIGTERM);
    if (!reaped(m->pid, 5000)) {
        kill(m->pid, SIGKILL);
        reaped(m->pid, 5000);
    }
    m->pid = 0;
}

h_memcached *h_memcached_start(void)
{
    h_memcached *m = calloc(1, sizeof *m);
    if (m == NULL)
        return NULL;
    for (int attempt = 0; attempt < 5; attempt++) {
        m->port = h_free_port();
        if (m->port == 0)
            continue;
        snprintf(m->addr, sizeof m->addr, "127.0.0.1:%d", m->port);
        if (mc_launch(m) == 0)
            return m;
    }
    say("could not start memcached");
    free(m);
    return NULL;
}

int h_memcached_port(const h_memcached *m)
{
    return m->port;
}

const char *h_memcached_addr(const h_memcached *m)
{
    return m->addr;
}

int h_memcached_pause(h_memcached *m)
{
    return m != NULL ? h_pid_signal(m->pid, SIGSTOP) : -1;
}

int h_memcached_resume(h_memcached *m)
{
    return m != NULL ? h_pid_signal(m->pid, SIGCONT) : -1;
}

int h_memcached_restart(h_memcached *m)
{
    if (m == NULL)
        return -1;
    mc_stop(m);
    for (int attempt = 0; attempt < 5; attempt++) {
        if (mc_launch(m) == 0)
            return 0;
        h_sleep_ms(100);
    }
    return -1;
}

void h_memcached_free(h_memcached *m)
{
    if (m == NULL)
        return;
    mc_stop(m);
    free(m);
}

/* ---- redis-servers for RedLock -------------------------------------------------- */

int h_redlock_nodes_start(h_redis **nodes, int n, bool persistent, char *target,
                          size_t len)
{
    static const char *const volatile_args[] = {"--appendonly", "no", "--save", "", NULL};
    size_t used = 0;
    target[0] = '\0';
    for (int i = 0; i < n; i++) {
        nodes[i] = persistent ? h_redis_start() : h_redis_start_args(volatile_args);
        if (nodes[i] == NULL) {
            for (int k = 0; k < i; k++) {
                h_redis_free(nodes[k]);
                nodes[k] = NULL;
            }
            return -1;
        }
        int w = snprintf(target + used, len - used, "%s%s", i > 0 ? "," : "",
                         h_redis_addr(nodes[i]));
        if (w > 0 && (size_t)w < len - used)
            used += (size_t)w;
    }
    return 0;
}

/* ---- a lock-service handle driven synchronously ----------------------------------- */

struct h_lock {
    const struct lks_ops *ops;
    void *svc;
    struct event_base *base;
    int lost;
};

struct answer {
    bool done;
    int rc;
    lks_hold *hold;
};

h_lock *h_lock_new(const struct lks_ops *ops, const char *target)
{
    h_lock *l = calloc(1, sizeof *l);
    if (l == NULL)
        return NULL;
    l->ops = ops;
    l->base = event_base_new();
    char err[256] = "";
    l->svc = l->base != NULL ? ops->create(l->base, target, err, sizeof err) : NULL;
    if (l->svc == NULL) {
        say("%s create %s: %s", ops->name, target, err);
        if (l->base != NULL)
            event_base_free(l->base);
        free(l);
        return NULL;
    }
    return l;
}

void h_lock_free(h_lock *l)
{
    if (l == NULL)
        return;
    l->ops->free(l->svc);
    event_base_free(l->base);
    free(l);
}

static int wait_answer(h_lock *l, struct answer *a, const char *what)
{
    long long end = h_now_ms() + 30000;
    while (!a->done && h_now_ms() < end)
        event_base_loop(l->base, EVLOOP_ONCE);
    if (!a->done) {
        say("%s %s: no answer within 30 s", l->ops->name, what);
        return -99;
    }
    return a->rc;
}

static void on_lost(void *arg, lks_hold *h)
{
    (void)h;
    ((h_lock *)arg)->lost++;
}

static void on_acquired(void *arg, int rc, lks_hold *h)
{
    struct answer *a = arg;
    a->done = true;
    a->rc = rc;
    a->hold = h;
}

static void on_done(void *arg, int rc)
{
    struct answer *a = arg;
    a->done = true;
    a->rc = rc;
}

int h_lock_acquire(h_lock *l, const char *name, int ttl_ms, int wait_ms, lks_hold **out)
{
    struct answer a = {false, 0, NULL};
    l->ops->acquire(l->svc, name, ttl_ms, wait_ms, on_acquired, &a);
    if (a.done)
        say("%s acquire answered inside the call", l->ops->name);
    int rc = wait_answer(l, &a, "acquire");
    if (rc == LKS_OK && a.hold != NULL) {
        a.hold->lost = on_lost;
        a.hold->lost_arg = l;
    }
    *out = rc == LKS_OK ? a.hold : NULL;
    return rc;
}

int h_lock_renew(h_lock *l, lks_hold *h, int ttl_ms)
{
    struct answer a = {false, 0, NULL};
    l->ops->renew(l->svc, h, ttl_ms, on_done, &a);
    if (a.done)
        say("%s renew answered inside the call", l->ops->name);
    return wait_answer(l, &a, "renew");
}

int h_lock_release(h_lock *l, lks_hold *h)
{
    struct answer a = {false, 0, NULL};
    l->ops->release(l->svc, h, on_done, &a);
    if (a.done)
        say("%s release answered inside the call", l->ops->name);
    return wait_answer(l, &a, "release");
}

void h_lock_run_ms(h_lock *l, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_base_loopexit(l->base, &tv);
    event_base_dispatch(l->base);
}

int h_lock_lost_count(const h_lock *l)
{
    return l->lost;
}

struct contend {
    const struct lks_ops *ops;
    const char *target, *name;
    int iters, ttl_ms;
    atomic_int acquired, failed, overlaps, inside;
    atomic_long counter; /* atomic for the sanitizers; the update is still racy */
};

static void contend_main(int idx, void *arg)
{
    (void)idx;
    struct contend *c = arg;
    h_lock *l = h_lock_new(c->ops, c->target);
    if (l == NULL) {
        atomic_fetch_add(&c->failed, c->iters);
        return;
    }
    for (int i = 0; i < c->iters; i++) {
        lks_hold *h;
        int rc = h_lock_acquire(l, c->name, c->ttl_ms, 20000, &h);
        if (rc != LKS_OK) {
            say("%s contend: acquire rc %d", c->ops->name, rc);
            atomic_fetch_add(&c->failed, 1);
            continue;
        }
        atomic_fetch_add(&c->acquired, 1);
        if (atomic_fetch_add(&c->inside, 1) != 0)
            atomic_fetch_add(&c->overlaps, 1);
        long v = atomic_load(&c->counter);
        h_sleep_ms(1);
        atomic_store(&c->counter, v + 1);
        atomic_fetch_sub(&c->inside, 1);
        rc = h_lock_release(l, h);
        if (rc != LKS_OK) {
            say("%s contend: release rc %d", c->ops->name, rc);
            atomic_fetch_add(&c->failed, 1);
        }
    }
    h_lock_free(l);
}

int h_lock_contend(const struct lks_ops *ops, const char *target, const char *name,
                   int threads, int iters, int ttl_ms, struct h_lock_contention *out)
{
    struct contend c = {
        .ops = ops, .target = target, .name = name, .iters = iters, .ttl_ms = ttl_ms};
    atomic_init(&c.acquired, 0);
    atomic_init(&c.failed, 0);
    atomic_init(&c.overlaps, 0);
    atomic_init(&c.inside, 0);
    atomic_init(&c.counter, 0);
    int rc = h_parallel(threads, contend_main, &c);
    out->acquired = atomic_load(&c.acquired);
    out->failed = atomic_load(&c.failed);
    out->overlaps = atomic_load(&c.overlaps);
    out->counter = atomic_load(&c.counter);
    return rc;
}
