/* harness_zk.c -- a real ZooKeeper server for the integration tests, and blocking peeks.
 */
#include "tests/harness_zk.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include "tests/harness.h"

#define ZK_MAIN "org.apache.zookeeper.server.quorum.QuorumPeerMain"
#define ZK_CLIENT_MS 4000
#define ZK_READY_MS 60000

struct h_zk {
    pid_t pid;
    int port;
    char *dir;
    char cfg[512];
    char log[512];
    char addr[32];
};

/* Servers still running at exit (a test that failed before h_zk_free). */
#define ZK_MAX 8
static pid_t zk_pids[ZK_MAX];
static pthread_mutex_t zk_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t zk_once = PTHREAD_ONCE_INIT;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "harness_zk: %s\n", line);
    fflush(stderr);
}

static void kill_left(void)
{
    for (int i = 0; i < ZK_MAX; i++) {
        if (zk_pids[i] > 0) {
            kill(zk_pids[i], SIGKILL);
            waitpid(zk_pids[i], NULL, 0);
            zk_pids[i] = 0;
        }
    }
}

static void at_exit_once(void)
{
    atexit(kill_left);
}

static void track(pid_t pid, bool add)
{
    pthread_once(&zk_once, at_exit_once);
    pthread_mutex_lock(&zk_lock);
    for (int i = 0; i < ZK_MAX; i++) {
        if (add ? zk_pids[i] == 0 : zk_pids[i] == pid) {
            zk_pids[i] = add ? pid : 0;
            break;
        }
    }
    pthread_mutex_unlock(&zk_lock);
}

/* The classpath the package gives its own scripts. */
static void classpath(char *out, size_t len)
{
    const char *env = getenv("ZK_CLASSPATH");
    if (env != NULL && env[0] != '\0') {
        snprintf(out, len, "%s", env);
        return;
    }
    snprintf(out, len, "/usr/share/java/zookeeper.jar");
    FILE *f = fopen("/etc/zookeeper/conf/environment", "r");
    if (f == NULL)
        return;
    char line[1024];
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "CLASSPATH=", 10) != 0)
            continue;
        char *v = line + 10;
        v[strcspn(v, "\r\n")] = '\0';
        size_t n = strlen(v);
        if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
            v[n - 1] = '\0';
            v++;
        }
        if (v[0] != '\0')
            snprintf(out, len, "%s", v);
    }
    fclose(f);
}

static void quiet(const char *message)
{
    (void)message;
}

/* ---- a blocking client on the single-threaded library ---------------------- */

struct hz {
    zhandle_t *zh;
    int state;
    bool done;
    int rc;
    long long czxid;
    char **names;
    int n;
};

static void hz_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh;
    (void)path;
    if (type == ZOO_SESSION_EVENT)
        ((struct hz *)ctx)->state = state;
}

/* Drive the client until *flag (or the session connected when flag is NULL), or
 * until timeout_ms. 0 or -1. */
static int hz_drive(struct hz *c, const bool *flag, int timeout_ms)
{
    long long end = h_now_ms() + timeout_ms;
    for (;;) {
        if (flag != NULL ? *flag : c->state == ZOO_CONNECTED_STATE)
            return 0;
        if (c->state == ZOO_EXPIRED_SESSION_STATE || c->state == ZOO_AUTH_FAILED_STATE)
            return -1;
        long long left = end - h_now_ms();
        if (left <= 0)
            return -1;
        int fd = -1, interest = 0;
        struct timeval tv = {0, 0};
        if (zookeeper_interest(c->zh, &fd, &interest, &tv) == ZINVALIDSTATE)
            return -1;
        long long wait = (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
        if (wait > left)
            wait = left;
        if (wait < 1)
            wait = 1;
        struct pollfd p = {.fd = fd, .events = 0};
        if (interest & ZOOKEEPER_READ)
            p.events |= POLLIN;
        if (interest & ZOOKEEPER_WRITE)
            p.events |= POLLOUT;
        int events = 0;
        if (fd >= 0 && poll(&p, 1, (int)wait) > 0) {
            if (p.revents & (POLLIN | POLLHUP | POLLERR))
                events |= ZOOKEEPER_READ;
            if (p.revents & POLLOUT)
                events |= ZOOKEEPER_WRITE;
        } else if (fd < 0) {
            h_sleep_ms(wait);
        }
        zookeeper_process(c->zh, events);
    }
}

static int hz_open(struct hz *c, int port, const clientid_t *id, int timeout_ms)
{
    char hosts[32];
    snprintf(hosts, sizeof hosts, "127.0.0.1:%d", port);
    memset(c, 0, sizeof *c);
    c->zh = zookeeper_init2(hosts, hz_watcher, ZK_CLIENT_MS, id, c, ZOO_NO_LOG_CLIENTENV,
                            quiet);
    if (c->zh == NULL) {
        say("zookeeper_init %s: %s", hosts, strerror(errno));
        return -1;
    }
    if (hz_drive(c, NULL, timeout_ms) != 0) {
        zookeeper_close(c->zh);
        c->zh = NULL;
        return -1;
    }
    return 0;
}

static void hz_close(struct hz *c)
{
    if (c->zh != NULL)
        zookeeper_close(c->zh);
    c->zh = NULL;
}

/* ---- the server ------------------------------------------------------------ */

static int write_cfg(h_zk *z)
{
    FILE *f = fopen(z->cfg, "w");
    if (f == NULL) {
        say("open %s: %s", z->cfg, strerror(errno));
        return -1;
    }
    fprintf(f,
            "tickTime=100\n"
            "initLimit=10\n"
            "syncLimit=5\n"
            "dataDir=%s/data\n"
            "clientPort=%d\n"
            "clientPortAddress=127.0.0.1\n"
            "minSessionTimeout=200\n"
            "maxSessionTimeout=60000\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=\n"
            "forceSync=no\n",
            z->dir, z->port);
    return fclose(f) == 0 ? 0 : -1;
}

static void print_log(const h_zk *z)
{
    FILE *f = fopen(z->log, "r");
    if (f == NULL)
        return;
    char line[512];
    while (fgets(line, sizeof line, f) != NULL)
        fprintf(stderr, "harness_zk: log: %s", line);
    fclose(f);
}

static int spawn(h_zk *z)
{
    char cp[2048];
    classpath(cp, sizeof cp);
    const char *java = getenv("JAVA");
    if (java == NULL || java[0] == '\0')
        java = "java";
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        say("fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        FILE *out = freopen(z->log, "a", stdout);
        (void)out;
        dup2(STDOUT_FILENO, STDERR_FILENO);
        if (chdir(z->dir) != 0)
            _exit(127);
        execlp(java, java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Djava.net.preferIPv4Stack=true", "-cp", cp, ZK_MAIN, z->cfg,
               (char *)NULL);
        _exit(127);
    }
    z->pid = pid;
    track(pid, true);
    return 0;
}

/* Wait until the server takes a session (or its process died). */
static int wait_ready(h_zk *z)
{
    long long end = h_now_ms() + ZK_READY_MS;
    while (h_now_ms() < end) {
        int st;
        if (waitpid(z->pid, &st, WNOHANG) == z->pid) {
            track(z->pid, false);
            z->pid = 0;
            say("server exited at start");
            print_log(z);
            return -1;
        }
        struct hz c;
        if (hz_open(&c, z->port, NULL, 1000) == 0) {
            hz_close(&c);
            return 0;
        }
        h_sleep_ms(100);
    }
    say("server on port %d did not take a session in %d ms", z->port, ZK_READY_MS);
    print_log(z);
    return -1;
}

h_zk *h_zk_start(void)
{
    h_zk *z = calloc(1, sizeof *z);
    if (z == NULL)
        abort();
    z->dir = h_tempdir("zk");
    z->port = h_free_port();
    if (z->dir == NULL || z->port == 0) {
        say("no temp dir or free port");
        h_zk_free(z);
        return NULL;
    }
    snprintf(z->cfg, sizeof z->cfg, "%s/zoo.cfg", z->dir);
    snprintf(z->log, sizeof z->log, "%s/zk.log", z->dir);
    snprintf(z->addr, sizeof z->addr, "127.0.0.1:%d", z->port);
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    /* A port found free can be taken before java binds it: then the server exits at
     * start, and another port is tried. */
    for (int attempt = 0; attempt < 3; attempt++) {
        if (attempt > 0) {
            z->port = h_free_port();
            snprintf(z->addr, sizeof z->addr, "127.0.0.1:%d", z->port);
        }
        if (write_cfg(z) != 0 || spawn(z) != 0)
            break;
        if (wait_ready(z) == 0)
            return z;
        if (z->pid > 0) /* running but not answering: no point in another port */
            break;
    }
    h_zk_free(z);
    return NULL;
}

int h_zk_port(const h_zk *z)
{
    return z->port;
}

const char *h_zk_addr(const h_zk *z)
{
    return z->addr;
}

int h_zk_stop(h_zk *z)
{
    if (z == NULL || z->pid <= 0)
        return -1;
    kill(z->pid, SIGCONT);
    kill(z->pid, SIGTERM);
    long long end = h_now_ms() + 10000;
    int st;
    while (waitpid(z->pid, &st, WNOHANG) != z->pid) {
        if (h_now_ms() >= end) {
            say("pid %d ignored SIGTERM for 10 s; SIGKILL", (int)z->pid);
            kill(z->pid, SIGKILL);
            waitpid(z->pid, &st, 0);
            break;
        }
        h_sleep_ms(10);
    }
    track(z->pid, false);
    z->pid = 0;
    return 0;
}

int h_zk_restart(h_zk *z)
{
    if (z->pid > 0)
        h_zk_stop(z);
    if (spawn(z) != 0)
        return -1;
    return wait_ready(z);
}

int h_zk_pause(h_zk *z)
{
    return h_pid_signal(z->pid, SIGSTOP);
}

int h_zk_resume(h_zk *z)
{
    return h_pid_signal(z->pid, SIGCONT);
}

void h_zk_free(h_zk *z)
{
    if (z == NULL)
        return;
    if (z->pid > 0)
        h_zk_stop(z);
    free(z->dir);
    free(z);
}

/* ---- peeks ----------------------------------------------------------------- */

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void on_children(int rc, const struct String_vector *sv, const void *data)
{
    struct hz *c = (struct hz *)data;
    c->rc = rc;
    c->done = true;
    if (rc != ZOK || sv == NULL)
        return;
    c->n = sv->count;
    c->names = calloc((size_t)(sv->count > 0 ? sv->count : 1), sizeof *c->names);
    if (c->names == NULL)
        abort();
    for (int i = 0; i < sv->count; i++) {
        c->names[i] = strdup(sv->data[i]);
        if (c->names[i] == NULL)
            abort();
    }
    qsort(c->names, (size_t)c->n, sizeof *c->names, cmp_names);
}

int h_zk_children(const h_zk *z, const char *path, char ***names, int *n)
{
    struct hz c;
    *names = NULL;
    *n = 0;
    if (hz_open(&c, z->port, NULL, ZK_CLIENT_MS) != 0) {
        say("children %s: no session", path);
        return -1;
    }
    int rc = zoo_aget_children(c.zh, path, 0, on_children, &c);
    if (rc != ZOK || hz_drive(&c, &c.done, ZK_CLIENT_MS) != 0) {
        say("children %s: no answer", path);
        hz_close(&c);
        return -1;
    }
    hz_close(&c);
    if (c.rc == ZNONODE)
        return 0;
    if (c.rc != ZOK) {
        say("children %s: %s", path, zerror(c.rc));
        return -1;
    }
    *names = c.names;
    *n = c.n;
    return 0;
}

void h_zk_free_names(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

int h_zk_count_children(const h_zk *z, const char *path)
{
    char **names;
    int n;
    if (h_zk_children(z, path, &names, &n) != 0)
        return -1;
    h_zk_free_names(names, n);
    return n;
}

static void on_exists(int rc, const struct Stat *stat, const void *data)
{
    struct hz *c = (struct hz *)data;
    c->rc = rc;
    c->czxid = rc == ZOK && stat != NULL ? stat->czxid : -1;
    c->done = true;
}

long long h_zk_czxid(const h_zk *z, const char *path)
{
    struct hz c;
    if (hz_open(&c, z->port, NULL, ZK_CLIENT_MS) != 0)
        return -1;
    int rc = zoo_aexists(c.zh, path, 0, on_exists, &c);
    if (rc != ZOK || hz_drive(&c, &c.done, ZK_CLIENT_MS) != 0)
        c.czxid = -1;
    hz_close(&c);
    return c.czxid;
}

int h_zk_expire(const h_zk *z, int64_t id, const char passwd[16])
{
    clientid_t cid;
    memset(&cid, 0, sizeof cid);
    cid.client_id = id;
    memcpy(cid.passwd, passwd, sizeof cid.passwd);
    struct hz c;
    if (hz_open(&c, z->port, &cid, ZK_CLIENT_MS) != 0) {
        say("expire 0x%llx: could not take the session", (unsigned long long)id);
        return -1;
    }
    hz_close(&c);
    return 0;
}
