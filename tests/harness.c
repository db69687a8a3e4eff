/* harness.c -- child processes, HTTP client and audits for the integration tests. */
#include "tests/harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---- registry ------------------------------------------------------------------
 * The one place the harness keeps process-wide state: signal handlers and atexit
 * must find every child and temp dir without a handle, so the registry is a fixed
 * table. Slots are written under reg_lock; the handlers only read pid slots (a
 * stale read at worst kills a pid we already reaped, which then does not exist). */

#define MAX_CHILDREN 64
#define MAX_DIRS 64

static volatile pid_t reg_pids[MAX_CHILDREN];
static char *reg_dirs[MAX_DIRS];
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;
static int http_timeout_ms = 30000;
static bool stop_failed; /* an h_svc_stop_clean said -1; read by h_exit_status */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "harness: %s\n", line);
    fflush(stderr);
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (p == NULL) {
        fprintf(stderr, "harness: out of memory\n");
        abort();
    }
    return p;
}

static void *xrealloc(void *p, size_t size)
{
    p = realloc(p, size);
    if (p == NULL) {
        fprintf(stderr, "harness: out of memory\n");
        abort();
    }
    return p;
}

static char *xstrdup(const char *s)
{
    char *p = strdup(s);
    if (p == NULL) {
        fprintf(stderr, "harness: out of memory\n");
        abort();
    }
    return p;
}

/* Async-signal-safe: SIGKILL every registered child (SIGKILL also ends stopped ones). */
static void kill_all_children(void)
{
    for (int i = 0; i < MAX_CHILDREN; i++) {
        pid_t pid = reg_pids[i];
        if (pid > 0)
            kill(pid, SIGKILL);
    }
}

/* Async-signal-safe removal of the registered temp dirs: reap the killed children,
 * then fork and exec rm -rf (nftw and free are not safe in a handler). */
static void remove_dirs_from_handler(void)
{
    for (int i = 0; i < MAX_CHILDREN; i++) {
        pid_t pid = reg_pids[i];
        if (pid > 0)
            waitpid(pid, NULL, 0);
    }
    char *argv[MAX_DIRS + 4];
    int n = 0;
    argv[n++] = (char *)"rm";
    argv[n++] = (char *)"-rf";
    argv[n++] = (char *)"--";
    for (int i = 0; i < MAX_DIRS; i++) {
        if (reg_dirs[i] != NULL)
            argv[n++] = reg_dirs[i];
    }
    argv[n] = NULL;
    if (n == 3)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        char *const envp[] = {NULL};
        execve("/bin/rm", argv, envp);
        _exit(127);
    }
    if (pid > 0)
        waitpid(pid, NULL, 0);
}

static void on_fatal_signal(int sig)
{
    kill_all_children();
    remove_dirs_from_handler();
    if (sig == SIGALRM) {
        static const char msg[] = "harness: test deadline passed; killed children\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(1);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void cleanup_at_exit(void)
{
    kill_all_children();
    for (int i = 0; i < MAX_CHILDREN; i++) {
        pid_t pid = reg_pids[i];
        if (pid > 0) {
            waitpid(pid, NULL, 0);
            reg_pids[i] = 0;
        }
    }
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < MAX_DIRS; i++) {
        if (reg_dirs[i] != NULL) {
            h_rmtree(reg_dirs[i]);
            free(reg_dirs[i]);
            reg_dirs[i] = NULL;
        }
    }
    pthread_mutex_unlock(&reg_lock);
}

static void install_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGABRT, SIGALRM};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    atexit(cleanup_at_exit);
}

static void reg_init(void)
{
    pthread_once(&reg_once, install_handlers);
}

static void reg_add_pid(pid_t pid)
{
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (reg_pids[i] == 0) {
            reg_pids[i] = pid;
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
}

static void reg_del_pid(pid_t pid)
{
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (reg_pids[i] == pid)
            reg_pids[i] = 0;
    }
    pthread_mutex_unlock(&reg_lock);
}

static void reg_add_dir(const char *path)
{
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < MAX_DIRS; i++) {
        if (reg_dirs[i] == NULL) {
            reg_dirs[i] = xstrdup(path);
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
}

static void reg_del_dir(const char *path)
{
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < MAX_DIRS; i++) {
        if (reg_dirs[i] != NULL && strcmp(reg_dirs[i], path) == 0) {
            free(reg_dirs[i]);
            reg_dirs[i] = NULL;
        }
    }
    pthread_mutex_unlock(&reg_lock);
}

void h_deadline(unsigned seconds)
{
    reg_init();
    alarm(seconds);
}

/* ---- time ------------------------------------------------------------------- */

long long h_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void h_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/* ---- files and ports ---------------------------------------------------------- */

int h_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    socklen_t len = sizeof sa;
    int port = 0;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

char *h_tempdir(const char *tag)
{
    reg_init();
    const char *base = getenv("TMPDIR");
    if (base == NULL || base[0] == '\0')
        base = "/tmp";
    char path[512];
    snprintf(path, sizeof path, "%s/inv-%s-XXXXXX", base, tag);
    if (mkdtemp(path) == NULL) {
        say("mkdtemp %s: %s", path, strerror(errno));
        return NULL;
    }
    reg_add_dir(path);
    return xstrdup(path);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    if (remove(path) != 0 && errno != ENOENT)
        say("remove %s: %s", path, strerror(errno));
    return 0;
}

int h_rmtree(const char *path)
{
    if (path == NULL)
        return 0;
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        say("open %s: %s", path, strerror(errno));
        return -1;
    }
    fputs(text, f);
    return fclose(f) == 0 ? 0 : -1;
}

/* Whole file as a malloc'd NUL-terminated string ("" when unreadable). */
static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    size_t cap = 4096, len = 0;
    char *buf = xcalloc(1, cap);
    if (f == NULL)
        return buf;
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len < 2) {
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
    }
    buf[len] = '\0';
    fclose(f);
    return buf;
}

/* ---- children ------------------------------------------------------------------ */

/* Our environment minus INVENTORY_*, plus `extra`. The array and strings are malloc'd
 * by the caller's process only (freed with free_env after the fork). */
static char **build_env(const char *const extra[])
{
    size_t n = 0, m = 0;
    while (environ[n] != NULL)
        n++;
    while (extra != NULL && extra[m] != NULL)
        m++;
    char **env = xcalloc(n + m + 1, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(environ[i], "INVENTORY_", 10) != 0)
            env[k++] = environ[i];
    }
    for (size_t i = 0; i < m; i++)
        env[k++] = (char *)extra[i];
    env[k] = NULL;
    return env;
}

/* Fork and exec argv (PATH searched) with stdin from /dev/null and stdout/stderr to
 * the given files (NULL: /dev/null). The child dies with us (PDEATHSIG). Returns the
 * pid, registered, or -1. */
static pid_t spawn(const char *const argv[], const char *const extra_env[],
                   const char *out_path, const char *err_path)
{
    reg_init();
    char **env = build_env(extra_env);
    pid_t parent = getpid();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        say("fork: %s", strerror(errno));
        free(env);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        int in = open("/dev/null", O_RDONLY);
        int out =
            open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
        int err =
            open(err_path ? err_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (in < 0 || out < 0 || err < 0)
            _exit(127);
        dup2(in, STDIN_FILENO);
        dup2(out, STDOUT_FILENO);
        dup2(err, STDERR_FILENO);
        execvpe(argv[0], (char *const *)argv, env);
        dprintf(STDERR_FILENO, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    reg_add_pid(pid);
    free(env);
    return pid;
}

static int decode_status(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return -1;
}

/* Wait up to timeout_ms for pid to exit. Returns its decoded status (and deregisters
 * it) or -2 when it is still running. */
static int wait_exit(pid_t pid, int timeout_ms)
{
    long long end = h_now_ms() + timeout_ms;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            reg_del_pid(pid);
            return decode_status(st);
        }
        if (r < 0 && errno != EINTR) {
            reg_del_pid(pid);
            return -1;
        }
        if (h_now_ms() >= end)
            return -2;
        h_sleep_ms(5);
    }
}

/* SIGCONT + `sig`, wait up to grace_ms, then SIGKILL. Returns the exit status. */
static int terminate(pid_t pid, int sig, int grace_ms)
{
    if (pid <= 0)
        return -1;
    kill(pid, SIGCONT);
    kill(pid, sig);
    int st = wait_exit(pid, grace_ms);
    if (st == -2) {
        say("pid %d ignored signal %d for %d ms; SIGKILL", (int)pid, sig, grace_ms);
        kill(pid, SIGKILL);
        st = wait_exit(pid, 10000);
    }
    return st;
}

int h_run_cmd(const char *const argv[], const char *const env[], int timeout_ms,
              char **out, char **err)
{
    char *dir = h_tempdir("cmd");
    if (dir == NULL)
        return -1;
    char out_path[600], err_path[600];
    snprintf(out_path, sizeof out_path, "%s/stdout", dir);
    snprintf(err_path, sizeof err_path, "%s/stderr", dir);
    int st = -1;
    pid_t pid = spawn(argv, env, out_path, err_path);
    if (pid > 0) {
        st = wait_exit(pid, timeout_ms);
        if (st == -2) {
            say("%s did not exit within %d ms; killed", argv[0], timeout_ms);
            terminate(pid, SIGKILL, 5000);
            st = -1;
        }
    }
    if (out != NULL)
        *out = read_file(out_path);
    if (err != NULL)
        *err = read_file(err_path);
    h_rmtree(dir);
    reg_del_dir(dir);
    free(dir);
    return st;
}

int h_spawn(const char *const argv[], const char *const env[], const char *out_path,
            const char *err_path)
{
    return spawn(argv, env, out_path, err_path);
}

int h_wait_exit(int pid, int timeout_ms)
{
    return wait_exit(pid, timeout_ms);
}

int h_terminate(int pid, int sig, int grace_ms)
{
    return terminate(pid, sig, grace_ms);
}

int h_pid_end(int *pid, int sig, int grace_ms)
{
    if (*pid <= 0)
        return -1;
    int st = terminate(*pid, sig, grace_ms);
    *pid = 0;
    return st;
}

int h_pid_signal(int pid, int sig)
{
    return pid > 0 && kill(pid, sig) == 0 ? 0 : -1;
}

/* ---- redis-server -------------------------------------------------------------- */

#define H_REDIS_EXTRA 16

struct h_redis {
    pid_t pid;
    int port;
    char *dir;
    char addr[32];
    char *extra[H_REDIS_EXTRA + 1]; /* more redis-server arguments, NULL-terminated */
};

static redisContext *connect_port(int port, int timeout_ms)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL)
        return NULL;
    if (c->err) {
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

/* 1 when PING answers PONG, 0 otherwise (refused, LOADING, ...). */
static int ping_ok(int port)
{
    redisContext *c = connect_port(port, 500);
    if (c == NULL)
        return 0;
    redisReply *rep = redisCommand(c, "PING");
    int ok =
        rep != NULL && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0;
    if (rep != NULL)
        freeReplyObject(rep);
    redisFree(c);
    return ok;
}

static void dump_tail(const char *path, size_t max_bytes)
{
    char *text = read_file(path);
    size_t len = strlen(text);
    const char *from = len > max_bytes ? text + len - max_bytes : text;
    fprintf(stderr, "---- %s (last %zu bytes) ----\n%s\n---- end ----\n", path, max_bytes,
            from);
    free(text);
}

/* Launch redis-server for r->port/r->dir and wait for PONG. 0 or -1. */
static int redis_launch(h_redis *r)
{
    char port[16], logfile[600];
    snprintf(port, sizeof port, "%d", r->port);
    snprintf(logfile, sizeof logfile, "%s/redis.log", r->dir);
    const char *bin = getenv("REDIS_SERVER");
    if (bin == NULL || bin[0] == '\0')
        bin = "redis-server";
    const char *argv[24 + H_REDIS_EXTRA] = {
        bin,    "--port",       port,  "--bind",        "127.0.0.1", "--dir",
        r->dir, "--appendonly", "yes", "--appendfsync", "everysec",  "--save",
        "",     "--daemonize",  "no",  "--logfile",     logfile,     "--protected-mode",
        "yes"};
    int n = 0;
    while (argv[n] != NULL)
        n++;
    for (int i = 0; r->extra[i] != NULL; i++)
        argv[n++] = r->extra[i];
    r->pid = spawn(argv, NULL, NULL, NULL);
    if (r->pid < 0)
        return -1;
    long long end = h_now_ms() + 15000;
    while (h_now_ms() < end) {
        if (ping_ok(r->port))
            return 0;
        int st = wait_exit(r->pid, 0);
        if (st != -2) {
            say("redis-server on port %d exited with %d", r->port, st);
            dump_tail(logfile, 2000);
            r->pid = 0;
            return -1;
        }
        h_sleep_ms(20);
    }
    say("redis-server on port %d did not answer PING in 15 s", r->port);
    terminate(r->pid, SIGKILL, 5000);
    r->pid = 0;
    return -1;
}

h_redis *h_redis_start(void)
{
    return h_redis_start_args(NULL);
}

h_redis *h_redis_start_args(const char *const *extra)
{
    h_redis *r = xcalloc(1, sizeof *r);
    r->dir = h_tempdir("redis");
    if (r->dir == NULL) {
        free(r);
        return NULL;
    }
    for (int i = 0; extra != NULL && extra[i] != NULL && i < H_REDIS_EXTRA; i++)
        r->extra[i] = xstrdup(extra[i]);
    /* A port found free can be taken before redis binds it: try a few. */
    for (int attempt = 0; attempt < 5; attempt++) {
        r->port = h_free_port();
        if (r->port == 0)
            continue;
        snprintf(r->addr, sizeof r->addr, "127.0.0.1:%d", r->port);
        if (redis_launch(r) == 0)
            return r;
    }
    say("could not start redis-server");
    h_redis_free(r);
    return NULL;
}

int h_redis_stop(h_redis *r)
{
    return r != NULL ? h_pid_end(&r->pid, SIGTERM, 10000) : -1;
}

int h_redis_kill(h_redis *r)
{
    return r != NULL ? h_pid_end(&r->pid, SIGKILL, 10000) : -1;
}

int h_redis_pause(h_redis *r)
{
    return r != NULL ? h_pid_signal(r->pid, SIGSTOP) : -1;
}

int h_redis_resume(h_redis *r)
{
    return r != NULL ? h_pid_signal(r->pid, SIGCONT) : -1;
}

int h_redis_restart(h_redis *r)
{
    if (r == NULL)
        return -1;
    if (r->pid > 0)
        h_redis_stop(r);
    /* The old process is reaped, but its port may linger briefly: retry a little. */
    for (int attempt = 0; attempt < 5; attempt++) {
        if (redis_launch(r) == 0)
            return 0;
        h_sleep_ms(200);
    }
    return -1;
}

void h_redis_free(h_redis *r)
{
    if (r == NULL)
        return;
    if (r->pid > 0)
        h_redis_stop(r);
    if (r->dir != NULL) {
        h_rmtree(r->dir);
        reg_del_dir(r->dir);
        free(r->dir);
    }
    for (int i = 0; r->extra[i] != NULL; i++)
        free(r->extra[i]);
    free(r);
}

const char *h_redis_dir(const h_redis *r)
{
    return r->dir;
}

int h_redis_port(const h_redis *r)
{
    return r->port;
}

const char *h_redis_addr(const h_redis *r)
{
    return r->addr;
}

redisContext *h_redis_connect(const h_redis *r)
{
    redisContext *c = connect_port(r->port, 2000);
    if (c == NULL)
        say("cannot connect to redis on port %d", r->port);
    return c;
}

char *h_key_lock(char *buf, const char *sku, int seg)
{
    snprintf(buf, 160, "inv:{%s:%d}:lock", sku, seg);
    return buf;
}

int h_redis_set_px(const h_redis *r, const char *key, const char *value, long px_ms,
                   bool nx)
{
    redisContext *c = h_redis_connect(r);
    if (c == NULL)
        return -1;
    redisReply *rep = nx ? redisCommand(c, "SET %s %s PX %ld NX", key, value, px_ms)
                         : redisCommand(c, "SET %s %s PX %ld", key, value, px_ms);
    int ok =
        rep != NULL && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "OK") == 0;
    if (!ok)
        say("SET %s failed (%s)", key,
            rep == NULL                      ? c->errstr
            : rep->type == REDIS_REPLY_ERROR ? rep->str
                                             : "not set");
    if (rep != NULL)
        freeReplyObject(rep);
    redisFree(c);
    return ok ? 0 : -1;
}

int h_redis_get(const h_redis *r, const char *key, char *buf, size_t len)
{
    redisContext *c = h_redis_connect(r);
    if (c == NULL)
        return -1;
    redisReply *rep = redisCommand(c, "GET %s", key);
    int res = -1;
    if (len > 0)
        buf[0] = '\0';
    if (rep == NULL) {
        say("GET %s: %s", key, c->errstr);
    } else if (rep->type == REDIS_REPLY_NIL) {
        res = 0;
    } else if (rep->type == REDIS_REPLY_STRING) {
        snprintf(buf, len, "%s", rep->str);
        res = 1;
    } else {
        say("GET %s: unexpected reply type %d", key, rep->type);
    }
    if (rep != NULL)
        freeReplyObject(rep);
    redisFree(c);
    return res;
}

/* ---- redis-sentinel ------------------------------------------------------------ */

struct h_sentinel {
    pid_t pid;
    int port;
    char *dir;
};

/* 1 when the sentinel on `port` answers PING (AUTH `password` first when set). */
static int sentinel_ok(int port, const char *password)
{
    redisContext *c = connect_port(port, 500);
    if (c == NULL)
        return 0;
    redisReply *a = password != NULL ? redisCommand(c, "AUTH %s", password) : NULL;
    if (a != NULL)
        freeReplyObject(a);
    redisReply *rep = redisCommand(c, "PING");
    int ok =
        rep != NULL && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0;
    if (rep != NULL)
        freeReplyObject(rep);
    redisFree(c);
    return ok;
}

static int sentinel_launch(h_sentinel *s, int master_port, const char *name, int quorum,
                           const char *password)
{
    char conf[600], logfile[600];
    snprintf(conf, sizeof conf, "%s/sentinel.conf", s->dir);
    snprintf(logfile, sizeof logfile, "%s/sentinel.log", s->dir);
    FILE *f = fopen(conf, "w");
    if (f == NULL) {
        say("%s: %s", conf, strerror(errno));
        return -1;
    }
    fprintf(f,
            "port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nlogfile %s\n"
            "sentinel monitor %s 127.0.0.1 %d %d\n"
            "sentinel down-after-milliseconds %s 1000\n"
            "sentinel failover-timeout %s 2000\n"
            "sentinel parallel-syncs %s 1\n",
            s->port, s->dir, logfile, name, master_port, quorum, name, name, name);
    if (password != NULL)
        fprintf(f, "requirepass %s\nsentinel sentinel-pass %s\n", password, password);
    fclose(f);
    const char *bin = getenv("REDIS_SENTINEL");
    if (bin == NULL || bin[0] == '\0')
        bin = "redis-sentinel";
    const char *argv[] = {bin, conf, NULL};
    s->pid = spawn(argv, NULL, NULL, NULL);
    if (s->pid < 0)
        return -1;
    long long end = h_now_ms() + 15000;
    while (h_now_ms() < end) {
        if (sentinel_ok(s->port, password))
            return 0;
        int st = wait_exit(s->pid, 0);
        if (st != -2) {
            say("redis-sentinel on port %d exited with %d", s->port, st);
            dump_tail(logfile, 2000);
            s->pid = 0;
            return -1;
        }
        h_sleep_ms(20);
    }
    say("redis-sentinel on port %d did not answer PING in 15 s", s->port);
    terminate(s->pid, SIGKILL, 5000);
    s->pid = 0;
    return -1;
}

h_sentinel *h_sentinel_start(int master_port, const char *name, int quorum,
                             const char *password)
{
    h_sentinel *s = xcalloc(1, sizeof *s);
    s->dir = h_tempdir("sentinel");
    if (s->dir == NULL) {
        free(s);
        return NULL;
    }
    for (int attempt = 0; attempt < 5; attempt++) {
        s->port = h_free_port();
        if (s->port != 0 && sentinel_launch(s, master_port, name, quorum, password) == 0)
            return s;
    }
    say("could not start redis-sentinel");
    h_sentinel_free(s);
    return NULL;
}

int h_sentinel_port(const h_sentinel *s)
{
    return s->port;
}

void h_sentinel_free(h_sentinel *s)
{
    if (s == NULL)
        return;
    if (s->pid > 0)
        terminate(s->pid, SIGTERM, 10000);
    if (s->dir != NULL) {
        h_rmtree(s->dir);
        reg_del_dir(s->dir);
        free(s->dir);
    }
    free(s);
}

/* ---- redis cluster ------------------------------------------------------------- */

#define H_CLUSTER_PORT_LO 12000
#define H_CLUSTER_PORT_HI 22000 /* exclusive; bus ports end below 32000 */
#define H_CLUSTER_BUS 10000     /* redis-server's default bus port offset */

struct h_cluster {
    int n, masters;
    h_redis **node;
};

/* True when 127.0.0.1:port can be bound right now. */
static bool port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)port);
    bool ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

/* A port whose bus port is free too and that no node of `c` (nodes 0..upto-1) uses;
 * 0 when none turned up in a few hundred draws. */
static int cluster_port(const h_cluster *c, int upto, unsigned *seed)
{
    for (int draw = 0; draw < 500; draw++) {
        int port = H_CLUSTER_PORT_LO +
                   (int)(rand_r(seed) % (H_CLUSTER_PORT_HI - H_CLUSTER_PORT_LO));
        bool taken = false;
        for (int i = 0; i < upto && !taken; i++)
            taken = c->node[i] != NULL && c->node[i]->port == port;
        if (!taken && port_free(port) && port_free(port + H_CLUSTER_BUS))
            return port;
    }
    return 0;
}

/* Start node i of `c`: 0 or -1. */
static int cluster_node_start(h_cluster *c, int i, unsigned *seed)
{
    h_redis *r = xcalloc(1, sizeof *r);
    c->node[i] = r;
    if ((r->dir = h_tempdir("cnode")) == NULL)
        return -1;
    /* A port found free can be taken before redis binds it: try a few. */
    for (int attempt = 0; attempt < 5; attempt++) {
        if ((r->port = cluster_port(c, i, seed)) == 0)
            continue;
        snprintf(r->addr, sizeof r->addr, "127.0.0.1:%d", r->port);
        char conf[700];
        snprintf(conf, sizeof conf, "%s/nodes-%d.conf", r->dir, r->port);
        /* A replica's first sync starts at once (not after the diskless default's
         * 5 s wait for more replicas). */
        const char *extra[] = {"--cluster-enabled",
                               "yes",
                               "--cluster-config-file",
                               conf,
                               "--cluster-node-timeout",
                               "1000",
                               "--repl-diskless-sync-delay",
                               "0",
                               NULL};
        for (int k = 0; r->extra[k] != NULL; k++) {
            free(r->extra[k]);
            r->extra[k] = NULL;
        }
        for (int k = 0; extra[k] != NULL; k++)
            r->extra[k] = xstrdup(extra[k]);
        if (redis_launch(r) == 0)
            return 0;
    }
    say("could not start cluster node %d", i);
    return -1;
}

/* A reply to `cmd` on a fresh connection to `port` (caller frees), or NULL. */
static redisReply *node_command(int port, const char *cmd)
{
    redisContext *rc = connect_port(port, 1000);
    if (rc == NULL)
        return NULL;
    redisReply *r = redisCommand(rc, cmd);
    redisFree(rc);
    return r;
}

/* Whether node `port` sees the cluster whole: cluster_state:ok, `masters` masters and
 * `replicas` replicas with no failure or handshake flag, -- a replica -- its link to
 * its master up, and no AOF rewrite or load under way. On false, `why` says what is
 * missing. */
static bool node_ready(int port, int masters, int replicas, char *why, size_t len)
{
    redisReply *info = node_command(port, "CLUSTER INFO");
    bool ok = info != NULL && info->type == REDIS_REPLY_STRING &&
              strstr(info->str, "cluster_state:ok") != NULL;
    if (info != NULL)
        freeReplyObject(info);
    if (!ok) {
        snprintf(why, len, "port %d: cluster_state not ok", port);
        return false;
    }
    redisReply *nodes = node_command(port, "CLUSTER NODES");
    int m = 0, s = 0, bad = 0;
    if (nodes != NULL && nodes->type == REDIS_REPLY_STRING) {
        /* <id> <ip:port@bus> <flags> ...: one node per line */
        for (char *line = nodes->str; line != NULL && *line != '\0';) {
            char *end = strchr(line, '\n');
            char flags[128] = "";
            if (sscanf(line, "%*s %*s %127s", flags) == 1) {
                m += strstr(flags, "master") != NULL;
                s += strstr(flags, "slave") != NULL;
                bad += strstr(flags, "fail") != NULL ||
                       strstr(flags, "handshake") != NULL ||
                       strstr(flags, "noaddr") != NULL;
            }
            line = end != NULL ? end + 1 : NULL;
        }
    }
    if (nodes != NULL)
        freeReplyObject(nodes);
    if (m != masters || s != replicas || bad != 0) {
        snprintf(why, len, "port %d sees %d masters, %d replicas, %d flagged", port, m, s,
                 bad);
        return false;
    }
    /* ROLE: ["master", ...] or ["slave", host, port, state, offset] */
    redisReply *role = node_command(port, "ROLE");
    ok = role != NULL && role->type == REDIS_REPLY_ARRAY && role->elements >= 1 &&
         role->element[0]->type == REDIS_REPLY_STRING &&
         (strcmp(role->element[0]->str, "master") == 0 ||
          (role->elements >= 4 && role->element[3]->type == REDIS_REPLY_STRING &&
           strcmp(role->element[3]->str, "connected") == 0));
    if (role != NULL)
        freeReplyObject(role);
    if (!ok) {
        snprintf(why, len, "port %d: replica not connected to its master", port);
        return false;
    }
    /* A replica rewrites its AOF after its first sync, and refuses SIGTERM while it
     * does ("Writing initial AOF, can't exit"): wait that out too. */
    redisReply *pers = node_command(port, "INFO persistence");
    ok = pers != NULL && pers->type == REDIS_REPLY_STRING &&
         strstr(pers->str, "aof_rewrite_in_progress:0") != NULL &&
         strstr(pers->str, "aof_rewrite_scheduled:0") != NULL &&
         strstr(pers->str, "loading:0") != NULL;
    if (pers != NULL)
        freeReplyObject(pers);
    if (!ok)
        snprintf(why, len, "port %d: loading or rewriting its AOF", port);
    return ok;
}

h_cluster *h_cluster_start(int masters, int replicas_per_master)
{
    if (masters < 3 || replicas_per_master < 0 ||
        masters * (1 + replicas_per_master) > MAX_CHILDREN / 2) {
        say("h_cluster_start(%d, %d): out of range", masters, replicas_per_master);
        return NULL;
    }
    h_cluster *c = xcalloc(1, sizeof *c);
    c->masters = masters;
    c->n = masters * (1 + replicas_per_master);
    c->node = xcalloc((size_t)c->n, sizeof *c->node);
    unsigned seed = (unsigned)getpid() ^ (unsigned)h_now_ms();
    for (int i = 0; i < c->n; i++) {
        if (cluster_node_start(c, i, &seed) != 0) {
            h_cluster_free(c);
            return NULL;
        }
    }

    const char *cli = getenv("REDIS_CLI");
    if (cli == NULL || cli[0] == '\0')
        cli = "redis-cli";
    const char **argv = xcalloc((size_t)c->n + 8, sizeof *argv);
    char replicas[16];
    snprintf(replicas, sizeof replicas, "%d", replicas_per_master);
    int k = 0;
    argv[k++] = cli;
    argv[k++] = "--cluster";
    argv[k++] = "create";
    for (int i = 0; i < c->n; i++)
        argv[k++] = c->node[i]->addr;
    argv[k++] = "--cluster-replicas";
    argv[k++] = replicas;
    argv[k++] = "--cluster-yes";
    char *out = NULL, *err = NULL;
    int st = h_run_cmd(argv, NULL, 30000, &out, &err);
    free(argv);
    if (st != 0) {
        say("redis-cli --cluster create exited %d:\n%s%s", st, out, err);
        free(out);
        free(err);
        h_cluster_free(c);
        return NULL;
    }
    free(out);
    free(err);

    char why[160] = "";
    long long end = h_now_ms() + 20000;
    for (int i = 0; i < c->n;) {
        if (node_ready(c->node[i]->port, masters, c->n - masters, why, sizeof why)) {
            i++;
            continue;
        }
        if (h_now_ms() >= end) {
            say("cluster not ready in 20 s: %s", why);
            h_cluster_free(c);
            return NULL;
        }
        h_sleep_ms(50);
    }
    return c;
}

int h_cluster_size(const h_cluster *c)
{
    return c->n;
}

int h_cluster_port(const h_cluster *c, int i)
{
    return i >= 0 && i < c->n ? c->node[i]->port : 0;
}

h_redis *h_cluster_node(const h_cluster *c, int i)
{
    return i >= 0 && i < c->n ? c->node[i] : NULL;
}

int h_cluster_master_of(const h_cluster *c, const char *key)
{
    for (int i = 0; i < c->n; i++) {
        redisContext *rc = h_redis_connect(c->node[i]);
        if (rc == NULL)
            continue;
        redisReply *r = redisCommand(rc, "EXISTS %s", key);
        bool here = r != NULL && r->type == REDIS_REPLY_INTEGER;
        if (r != NULL)
            freeReplyObject(r);
        redisFree(rc);
        if (here)
            return i;
    }
    return -1;
}

void h_cluster_free(h_cluster *c)
{
    if (c == NULL)
        return;
    /* Replicas (the last nodes) first, so no master waits on SIGTERM for a replica to
     * catch up. */
    for (int i = c->n - 1; i >= 0; i--)
        h_redis_free(c->node[i]);
    free(c->node);
    free(c);
}

/* ---- inventoryd ----------------------------------------------------------------- */

struct h_svc {
    pid_t pid;
    int port;
    char *dir;
    char log[600];
};

int h_svc_port(const h_svc *s)
{
    return s->port;
}

int h_svc_pid(const h_svc *s)
{
    return s->pid > 0 ? (int)s->pid : 0;
}

void h_svc_dump_log(const h_svc *s, size_t max_bytes)
{
    if (s != NULL)
        dump_tail(s->log, max_bytes);
}

/* GET /livez with a short timeout: 1 on 200. */
static int livez_ok(int port);

h_svc *h_svc_start(const h_redis *r, const struct h_svc_opts *opts)
{
    struct h_svc_opts none;
    memset(&none, 0, sizeof none);
    if (opts == NULL)
        opts = &none;
    h_svc *s = xcalloc(1, sizeof *s);
    s->dir = h_tempdir("svc");
    if (s->dir == NULL) {
        free(s);
        return NULL;
    }
    char config[600], port[16], redis[64];
    snprintf(config, sizeof config, "%s/config.json", s->dir);
    snprintf(s->log, sizeof s->log, "%s/inventoryd.log", s->dir);
    if (write_file(config, opts->config_json ? opts->config_json : "{}\n") != 0) {
        h_svc_free(s);
        return NULL;
    }
    s->port = opts->port > 0 ? opts->port : h_free_port();
    snprintf(port, sizeof port, "%d", s->port);

    const char *bin = getenv("INVENTORYD");
    if (bin == NULL || bin[0] == '\0')
        bin = "build/inventoryd";
    const char *argv[64];
    int n = 0;
    argv[n++] = bin;
    argv[n++] = "--config";
    argv[n++] = config;
    if (!opts->no_port_flag) {
        argv[n++] = "--port";
        argv[n++] = port;
    }
    argv[n++] = "--bind";
    argv[n++] = "127.0.0.1";
    if (r != NULL && !opts->no_redis_flag) {
        snprintf(redis, sizeof redis, "%s", h_redis_addr(r));
        argv[n++] = "--redis";
        argv[n++] = redis;
    }
    for (int i = 0; opts->args != NULL && opts->args[i] != NULL && n < 63; i++)
        argv[n++] = opts->args[i];
    argv[n] = NULL;

    if (access(bin, X_OK) != 0) {
        say("service binary %s: %s (set INVENTORYD)", bin, strerror(errno));
        h_svc_free(s);
        return NULL;
    }
    s->pid = spawn(argv, opts->env, s->log, s->log);
    if (s->pid < 0) {
        h_svc_free(s);
        return NULL;
    }
    int timeout = opts->start_timeout_ms > 0 ? opts->start_timeout_ms : 15000;
    long long end = h_now_ms() + timeout;
    while (h_now_ms() < end) {
        if (livez_ok(s->port))
            return s;
        int st = wait_exit(s->pid, 0);
        if (st != -2) {
            say("inventoryd exited with %d before answering /livez on port %d", st,
                s->port);
            s->pid = 0;
            h_svc_dump_log(s, 4000);
            h_svc_free(s);
            return NULL;
        }
        h_sleep_ms(20);
    }
    say("inventoryd did not answer GET /livez 200 on port %d within %d ms", s->port,
        timeout);
    h_svc_dump_log(s, 4000);
    h_svc_free(s);
    return NULL;
}

h_svc *h_svc_start_args(const h_redis *r, const char *const *args)
{
    struct h_svc_opts o;
    memset(&o, 0, sizeof o);
    o.args = args;
    return h_svc_start(r, &o);
}

int h_svc_stop(h_svc *s)
{
    return s != NULL ? h_pid_end(&s->pid, SIGTERM, 10000) : -1;
}

int h_svc_kill(h_svc *s)
{
    return s != NULL ? h_pid_end(&s->pid, SIGKILL, 10000) : -1;
}

int h_svc_pause(h_svc *s)
{
    return s != NULL ? h_pid_signal(s->pid, SIGSTOP) : -1;
}

int h_svc_resume(h_svc *s)
{
    return s != NULL ? h_pid_signal(s->pid, SIGCONT) : -1;
}

bool h_svc_alive(h_svc *s)
{
    if (s == NULL || s->pid <= 0)
        return false;
    int st = wait_exit(s->pid, 0);
    if (st == -2)
        return true;
    say("inventoryd (pid %d) has exited with status %d", (int)s->pid, st);
    s->pid = 0;
    return false;
}

void h_svc_free(h_svc *s)
{
    if (s == NULL)
        return;
    if (s->pid > 0) {
        int st = h_svc_stop(s);
        if (st != 0)
            say("inventoryd exited with status %d on SIGTERM", st);
    }
    if (s->dir != NULL) {
        h_rmtree(s->dir);
        reg_del_dir(s->dir);
        free(s->dir);
    }
    free(s);
}

int h_svc_stop_clean(h_svc *s)
{
    if (s == NULL)
        return 0;
    int rc = 0;
    if (!h_svc_alive(s)) {
        h_svc_dump_log(s, 4000);
        rc = -1;
    } else if (h_svc_stop(s) != 0) {
        h_svc_dump_log(s, 8000);
        rc = -1;
    }
    if (rc != 0)
        stop_failed = true;
    return rc;
}

/* ---- group fixture ------------------------------------------------------------- */

struct h_env *h_env_start(const char *const *args)
{
    struct h_env *e = h_env_start_redis();
    if (e == NULL)
        return NULL;
    e->svc = h_svc_start_args(e->redis, args);
    if (e->svc == NULL) {
        h_env_free(e);
        return NULL;
    }
    e->port = h_svc_port(e->svc);
    return e;
}

struct h_env *h_env_start_redis(void)
{
    struct h_env *e = xcalloc(1, sizeof *e);
    e->redis = h_redis_start();
    if (e->redis == NULL) {
        free(e);
        return NULL;
    }
    return e;
}

int h_env_stop(struct h_env *e)
{
    if (e == NULL)
        return 0;
    int rc = h_svc_stop_clean(e->svc);
    h_env_free(e);
    return rc;
}

void h_env_free(struct h_env *e)
{
    if (e == NULL)
        return;
    h_svc_free(e->svc);
    h_redis_free(e->redis);
    free(e);
}

struct h_cluster_env *h_cluster_env_start(int masters, int replicas_per_master)
{
    struct h_cluster_env *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->cluster = h_cluster_start(masters, replicas_per_master);
    if (e->cluster != NULL)
        e->svc = h_svc_start(h_cluster_node(e->cluster, 0), NULL);
    if (e->svc == NULL) {
        h_cluster_free(e->cluster);
        free(e);
        return NULL;
    }
    e->port = h_svc_port(e->svc);
    return e;
}

int h_cluster_env_stop(struct h_cluster_env *e)
{
    if (e == NULL)
        return 0;
    int rc = h_svc_stop_clean(e->svc);
    h_svc_free(e->svc);
    h_cluster_free(e->cluster);
    free(e);
    return rc;
}

int h_cluster_group_setup(void **state)
{
    h_deadline(120);
    *state = h_cluster_env_start(3, 1);
    return *state != NULL ? 0 : -1;
}

int h_cluster_group_teardown(void **state)
{
    return h_cluster_env_stop(*state);
}

redisReply *h_port_command(int port, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = h_port_vcommand(port, fmt, ap);
    va_end(ap);
    return r;
}

redisReply *h_port_vcommand(int port, const char *fmt, va_list ap)
{
    struct timeval tv = {2, 0};
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (rc == NULL || rc->err) {
        say("cannot connect to redis on port %d: %s", port,
            rc ? rc->errstr : "no memory");
        redisFree(rc);
        return NULL;
    }
    redisSetTimeout(rc, tv);
    redisReply *r = redisvCommand(rc, fmt, ap);
    if (r == NULL)
        say("no reply from redis on port %d: %s", port, rc->errstr);
    redisFree(rc);
    return r;
}

int h_exit_status(int failed)
{
    return failed != 0 || stop_failed ? 1 : 0;
}

/* ---- HTTP client --------------------------------------------------------------- */

void h_http_set_timeout(int ms)
{
    http_timeout_ms = ms;
}

static void resp_init(struct h_resp *out)
{
    memset(out, 0, sizeof *out);
    out->status = -1;
    out->headers = xcalloc(1, 1);
    out->body = xcalloc(1, 1);
}

void h_resp_free(struct h_resp *r)
{
    if (r == NULL)
        return;
    free(r->headers);
    free(r->body);
    r->headers = NULL;
    r->body = NULL;
}

/* Case-insensitive lookup of header `name` in a raw block; copies the trimmed value. */
static void header_value(const char *block, const char *name, char *dst, size_t len)
{
    size_t nlen = strlen(name);
    dst[0] = '\0';
    const char *line = block;
    while (line != NULL && *line != '\0') {
        const char *eol = strstr(line, "\r\n");
        size_t llen = eol ? (size_t)(eol - line) : strlen(line);
        if (llen > nlen && strncasecmp(line, name, nlen) == 0 && line[nlen] == ':') {
            const char *v = line + nlen + 1;
            const char *e = line + llen;
            while (v < e && (*v == ' ' || *v == '\t'))
                v++;
            while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
                e--;
            size_t vlen = (size_t)(e - v);
            if (vlen >= len)
                vlen = len - 1;
            memcpy(dst, v, vlen);
            dst[vlen] = '\0';
            return;
        }
        line = eol ? eol + 2 : NULL;
    }
}

/* Decode a chunked body in buf[0..len). Returns 1 with a malloc'd body when the
 * terminating chunk is there, 0 when more bytes are needed, -1 when malformed. */
static int dechunk(const char *buf, size_t len, char **body, size_t *body_len)
{
    size_t pos = 0, outlen = 0;
    char *out = xcalloc(1, len + 1);
    for (;;) {
        const char *eol = memmem(buf + pos, len - pos, "\r\n", 2);
        if (eol == NULL)
            break;
        char *endp;
        unsigned long size = strtoul(buf + pos, &endp, 16);
        if (endp == buf + pos) {
            free(out);
            return -1;
        }
        size_t data = (size_t)(eol - buf) + 2;
        if (size == 0) {
            *body = out;
            *body_len = outlen;
            return 1; /* trailers, if any, are ignored */
        }
        if (data + size + 2 > len)
            break;
        memcpy(out + outlen, buf + data, size);
        outlen += size;
        pos = data + size + 2;
    }
    free(out);
    return 0;
}

/* Try to parse a complete response from buf. Returns 1 when complete (fills out),
 * 0 when more is needed, -1 when malformed. At EOF (`eof`), a body without a length
 * ends here. */
static int parse_response(const char *buf, size_t len, bool eof, struct h_resp *out)
{
    const char *hend = memmem(buf, len, "\r\n\r\n", 4);
    if (hend == NULL)
        return eof ? -1 : 0;
    int major, minor, status;
    if (sscanf(buf, "HTTP/%d.%d %d", &major, &minor, &status) != 3)
        return -1;
    const char *first_eol = memmem(buf, len, "\r\n", 2);
    size_t hlen = (size_t)(hend - first_eol) - 2 + 2; /* keep the last CRLF */
    char *headers = xcalloc(1, hlen + 1);
    memcpy(headers, first_eol + 2, hlen);
    size_t body_off = (size_t)(hend - buf) + 4;
    const char *body = buf + body_off;
    size_t avail = len - body_off;

    char te[64], cl[32];
    header_value(headers, "Transfer-Encoding", te, sizeof te);
    header_value(headers, "Content-Length", cl, sizeof cl);
    char *b = NULL;
    size_t blen = 0;
    if (strcasecmp(te, "chunked") == 0) {
        int rc = dechunk(body, avail, &b, &blen);
        if (rc <= 0) {
            free(headers);
            return rc < 0 || eof ? -1 : 0;
        }
    } else if (cl[0] != '\0') {
        size_t want = (size_t)strtoull(cl, NULL, 10);
        if (avail < want) {
            free(headers);
            return eof ? -1 : 0;
        }
        blen = want;
    } else if (status == 204 || status == 304 || (status >= 100 && status < 200)) {
        blen = 0;
    } else {
        if (!eof) {
            free(headers);
            return 0;
        }
        blen = avail;
    }
    if (b == NULL) {
        b = xcalloc(1, blen + 1);
        memcpy(b, body, blen);
    }
    free(out->headers);
    free(out->body);
    out->headers = headers;
    out->body = b;
    out->body[blen] = '\0';
    out->body_len = blen;
    out->status = status;
    header_value(headers, "Content-Type", out->content_type, sizeof out->content_type);
    header_value(headers, "Retry-After", out->retry_after, sizeof out->retry_after);
    header_value(headers, "Allow", out->allow, sizeof out->allow);
    header_value(headers, "ETag", out->etag, sizeof out->etag);
    header_value(headers, "Location", out->location, sizeof out->location);
    return 1;
}

/* Connect, send `req`, read one response. Send errors are not fatal: a server that
 * answers early (413) and closes may still have left its reply for us to read. */
static int http_exchange(int port, const void *req, size_t req_len, bool shut_wr,
                         int timeout_ms, struct h_resp *out)
{
    reg_init();
    resp_init(out);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(out->err, sizeof out->err, "socket: %s", strerror(errno));
        return -1;
    }
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)port);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        snprintf(out->err, sizeof out->err, "connect 127.0.0.1:%d: %s", port,
                 strerror(errno));
        close(fd);
        return -1;
    }
    const char *p = req;
    size_t left = req_len;
    while (left > 0) {
        ssize_t w = send(fd, p, left, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    if (shut_wr)
        shutdown(fd, SHUT_WR);

    size_t cap = 8192, len = 0;
    char *buf = xcalloc(1, cap);
    long long end = h_now_ms() + timeout_ms;
    int done = 0;
    for (;;) {
        if (cap - len < 4096) {
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        if (r > 0) {
            len += (size_t)r;
            done = parse_response(buf, len, false, out);
            if (done != 0)
                break;
            continue;
        }
        if (r < 0 && errno == EINTR && h_now_ms() < end)
            continue;
        if (r == 0 || len > 0) {
            /* EOF, or an error (reset) after some bytes: take what we have. */
            done = len > 0 ? parse_response(buf, len, true, out) : -1;
            if (done != 1)
                snprintf(out->err, sizeof out->err, "%s after %zu bytes",
                         r == 0 ? "connection closed" : strerror(errno), len);
        } else {
            snprintf(out->err, sizeof out->err, "recv: %s",
                     errno == EAGAIN ? "timed out" : strerror(errno));
        }
        break;
    }
    if (done < 0 && out->err[0] == '\0')
        snprintf(out->err, sizeof out->err, "malformed response (%zu bytes)", len);
    free(buf);
    close(fd);
    return out->status;
}

static int livez_ok(int port)
{
    struct h_resp r;
    const char req[] =
        "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    int st = http_exchange(port, req, sizeof req - 1, false, 1000, &r);
    h_resp_free(&r);
    return st == 200;
}

int h_http(int port, const char *method, const char *path, const char *headers,
           const char *body, size_t body_len, struct h_resp *out)
{
    size_t hl = headers ? strlen(headers) : 0;
    size_t cap = strlen(method) + strlen(path) + hl + body_len + 256;
    char *req = xcalloc(1, cap);
    int n = snprintf(req, cap,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%sConnection: close\r\n",
                     method, path, port, headers ? headers : "");
    if (body != NULL)
        n += snprintf(req + n, cap - (size_t)n, "Content-Length: %zu\r\n", body_len);
    n += snprintf(req + n, cap - (size_t)n, "\r\n");
    if (body != NULL) {
        memcpy(req + n, body, body_len);
        n += (int)body_len;
    }
    int st = http_exchange(port, req, (size_t)n, false, http_timeout_ms, out);
    free(req);
    if (st < 0)
        say("%s %s: no response (%s)", method, path, out->err);
    return st;
}

int h_req(int port, const char *method, const char *path, const char *token,
          const char *json, struct h_resp *out)
{
    char headers[512] = "";
    size_t n = 0;
    if (json != NULL)
        n += (size_t)snprintf(headers + n, sizeof headers - n,
                              "Content-Type: application/json\r\n");
    if (token != NULL)
        snprintf(headers + n, sizeof headers - n, "Authorization: Bearer %s\r\n", token);
    return h_http(port, method, path, headers, json, json ? strlen(json) : 0, out);
}

int h_http_raw(int port, const void *bytes, size_t len, bool shut_wr, struct h_resp *out)
{
    return http_exchange(port, bytes, len, shut_wr, http_timeout_ms, out);
}

json_t *h_resp_json(const struct h_resp *r)
{
    json_error_t e;
    json_t *j = json_loadb(r->body, r->body_len, 0, &e);
    if (j == NULL)
        say("response (status %d) is not JSON: %s: %.200s", r->status, e.text, r->body);
    return j;
}

int h_expect_error(const struct h_resp *r, int status, const char *code)
{
    int bad = 0;
    if (r->status != status) {
        say("expected status %d, got %d (%s) body %.300s", status, r->status, r->err,
            r->body);
        bad = 1;
    }
    if (strncasecmp(r->content_type, "application/json", 16) != 0) {
        say("status %d: Content-Type is '%s', expected application/json", r->status,
            r->content_type);
        bad = 1;
    }
    json_t *j = r->status > 0 ? h_resp_json(r) : NULL;
    if (j == NULL)
        return -1;
    json_t *err = json_object_get(j, "error");
    json_t *detail = json_object_get(j, "detail");
    if (!json_is_object(j) || !json_is_string(err) || !json_is_string(detail)) {
        say("error body lacks string \"error\"/\"detail\": %.300s", r->body);
        bad = 1;
    } else if (code != NULL ? strcmp(json_string_value(err), code) != 0
                            : json_string_value(err)[0] == '\0') {
        say("expected error \"%s\", got \"%s\" (detail: %s)", code ? code : "<any>",
            json_string_value(err), json_string_value(detail));
        bad = 1;
    }
    json_decref(j);
    return bad ? -1 : 0;
}

/* ---- domain helpers ------------------------------------------------------------- */

int h_put_sku_body(int port, const char *token, const char *sku, const char *body)
{
    char path[256];
    snprintf(path, sizeof path, "/admin/skus/%s?reset=true", sku);
    struct h_resp r;
    int st = h_req(port, "PUT", path, token, body, &r);
    if (st != 200 && st != 201)
        say("PUT %s %s -> %d %.300s", path, body, st, r.body);
    h_resp_free(&r);
    return st == 200 || st == 201 ? 0 : -1;
}

int h_put_sku_lock(int port, const char *token, const char *sku, long long stock,
                   int segments, const char *mode, const char *lock, int hold_ms)
{
    char body[256];
    snprintf(
        body, sizeof body,
        "{\"stock\": %lld, \"segments\": %d, \"mode\": \"%s\", \"hold_ms\": %d%s%s%s}",
        stock, segments, mode, hold_ms, lock ? ", \"lock\": \"" : "", lock ? lock : "",
        lock ? "\"" : "");
    return h_put_sku_body(port, token, sku, body);
}

int h_put_sku(int port, const char *token, const char *sku, long long stock, int segments,
              const char *mode, int hold_ms)
{
    return h_put_sku_lock(port, token, sku, stock, segments, mode, NULL, hold_ms);
}

json_t *h_get_sku(int port, const char *token, const char *sku)
{
    char path[256];
    snprintf(path, sizeof path, "/admin/skus/%s", sku);
    struct h_resp r;
    int st = h_req(port, "GET", path, token, NULL, &r);
    json_t *j = NULL;
    if (st == 200)
        j = h_resp_json(&r);
    else
        say("GET %s -> %d %.300s", path, st, r.body);
    h_resp_free(&r);
    if (j != NULL && !json_is_object(j)) {
        say("GET %s: not an object", path);
        json_decref(j);
        j = NULL;
    }
    return j;
}

long long h_stat(int port, const char *token, const char *name)
{
    struct h_resp r;
    int st = h_req(port, "GET", "/admin/stats", token, NULL, &r);
    long long v = -1;
    if (st == 200) {
        json_t *j = h_resp_json(&r);
        json_t *c = j ? json_object_get(j, name) : NULL;
        if (json_is_integer(c))
            v = json_integer_value(c);
        else
            say("/admin/stats has no integer \"%s\": %.400s", name, r.body);
        json_decref(j);
    } else {
        say("GET /admin/stats -> %d %.300s", st, r.body);
    }
    h_resp_free(&r);
    return v;
}

int h_order(int port, const char *sku, long long qty, const char *order_id,
            struct h_resp *out)
{
    char body[512];
    if (order_id != NULL)
        snprintf(body, sizeof body,
                 "{\"sku\": \"%s\", \"qty\": %lld, \"order_id\": \"%s\"}", sku, qty,
                 order_id);
    else
        snprintf(body, sizeof body, "{\"sku\": \"%s\", \"qty\": %lld}", sku, qty);
    struct h_resp local;
    struct h_resp *r = out ? out : &local;
    int st = h_req(port, "POST", "/orders", NULL, body, r);
    if (out == NULL)
        h_resp_free(&local);
    return st;
}

double h_metric(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p != NULL && *p != '\0';) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ') {
            char *end;
            double v = strtod(p + n + 1, &end);
            return end != p + n + 1 ? v : -1;
        }
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    return -1;
}

long long h_jint(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

int h_order_status(int port, const char *id)
{
    char path[96];
    snprintf(path, sizeof path, "/orders/%s", id);
    struct h_resp r;
    int st = h_req(port, "GET", path, NULL, NULL, &r);
    h_resp_free(&r);
    return st;
}

char *h_error_code(const struct h_resp *r, char *buf, size_t len)
{
    buf[0] = '\0';
    if (r->status >= 400) {
        json_t *j = json_loads(r->body, 0, NULL);
        const char *code = json_string_value(json_object_get(j, "error"));
        snprintf(buf, len, "%s", code != NULL ? code : "?");
        json_decref(j);
    }
    return buf;
}

/* Integer member or -1 after a message. */
static long long int_field(json_t *j, const char *name, int *bad)
{
    json_t *v = json_object_get(j, name);
    if (!json_is_integer(v)) {
        say("audit: \"%s\" missing or not an integer", name);
        *bad = 1;
        return -1;
    }
    return json_integer_value(v);
}

/* Sum of an integer array with `n` entries, each >= 0; sets *bad otherwise. */
static long long sum_array(json_t *j, const char *name, long long n, bool required,
                           int *bad)
{
    json_t *a = json_object_get(j, name);
    if (a == NULL && !required)
        return -1;
    if (!json_is_array(a)) {
        say("audit: \"%s\" missing or not an array", name);
        *bad = 1;
        return -1;
    }
    if ((long long)json_array_size(a) != n) {
        say("audit: \"%s\" has %zu entries, segments is %lld", name, json_array_size(a),
            n);
        *bad = 1;
    }
    long long sum = 0;
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            say("audit: %s[%zu] is not an integer >= 0", name, i);
            *bad = 1;
            continue;
        }
        sum += json_integer_value(v);
    }
    return sum;
}

int h_audit(int port, const char *token, const char *sku, long long initial,
            bool unit_orders)
{
    json_t *j = h_get_sku(port, token, sku);
    if (j == NULL)
        return -1;
    int bad = 0;
    long long segs = int_field(j, "segments", &bad);
    long long init = int_field(j, "initial", &bad);
    long long remaining = int_field(j, "remaining", &bad);
    long long sold = int_field(j, "sold", &bad);
    long long orders = unit_orders ? int_field(j, "orders", &bad) : 0;
    long long stock_sum = sum_array(j, "segment_stock", segs, true, &bad);
    long long sold_sum = sum_array(j, "segment_sold", segs, false, &bad);
    if (!bad) {
        if (initial >= 0 && init != initial) {
            say("audit %s: initial %lld, expected %lld", sku, init, initial);
            bad = 1;
        }
        if (remaining < 0 || sold < 0 || remaining + sold != init) {
            say("audit %s: remaining %lld + sold %lld != initial %lld", sku, remaining,
                sold, init);
            bad = 1;
        }
        if (stock_sum != remaining) {
            say("audit %s: sum(segment_stock) %lld != remaining %lld", sku, stock_sum,
                remaining);
            bad = 1;
        }
        if (sold_sum >= 0 && sold_sum != sold) {
            say("audit %s: sum(segment_sold) %lld != sold %lld", sku, sold_sum, sold);
            bad = 1;
        }
        if (unit_orders && orders != sold) {
            say("audit %s: orders %lld != sold %lld (all orders were qty 1)", sku, orders,
                sold);
            bad = 1;
        }
    }
    if (bad) {
        char *text = json_dumps(j, JSON_COMPACT);
        say("audit %s failed on %.600s", sku, text ? text : "?");
        free(text);
    }
    json_decref(j);
    return bad ? -1 : 0;
}

/* ---- threads -------------------------------------------------------------------- */

struct par_shared {
    pthread_barrier_t barrier;
    void (*fn)(int idx, void *ctx);
    void *ctx;
};

struct par_arg {
    struct par_shared *sh;
    int idx;
};

static void *par_main(void *p)
{
    struct par_arg *a = p;
    pthread_barrier_wait(&a->sh->barrier);
    a->sh->fn(a->idx, a->sh->ctx);
    return NULL;
}

int h_parallel(int n, void (*fn)(int idx, void *ctx), void *ctx)
{
    reg_init();
    struct par_shared sh;
    sh.fn = fn;
    sh.ctx = ctx;
    pthread_barrier_init(&sh.barrier, NULL, (unsigned)n);
    pthread_t *th = xcalloc((size_t)n, sizeof *th);
    struct par_arg *args = xcalloc((size_t)n, sizeof *args);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    int started = 0;
    for (int i = 0; i < n; i++) {
        args[i].sh = &sh;
        args[i].idx = i;
        if (pthread_create(&th[i], &attr, par_main, &args[i]) != 0) {
            say("pthread_create failed after %d threads", i);
            fprintf(stderr, "harness: cannot continue with a half-released barrier\n");
            abort();
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_attr_destroy(&attr);
    pthread_barrier_destroy(&sh.barrier);
    free(th);
    free(args);
    return 0;
}
