/* it_signals.c -- the service under signals: SIGHUP re-reads log_level and reopens the
 * log file, SIGUSR1 logs the counters, SIGPIPE is ignored, SIGTERM and SIGINT drain
 * and exit 0; the log settings (log_file, log_format json) end to end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "tests/harness.h"

struct env {
    struct h_env *h; /* the redis-server; each test starts its own service */
    char *dir;       /* config and log files */
};

static int group_setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    if (e == NULL)
        return -1;
    *state = e;
    e->h = h_env_start_redis();
    e->dir = h_tempdir("signals");
    return e->h != NULL && e->dir != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    if (e == NULL)
        return 0;
    int rc = h_env_stop(e->h);
    h_rmtree(e->dir);
    free(e->dir);
    free(e);
    return rc;
}

/* `dir`/`name` into `buf` (600 bytes). */
static char *path_in(const struct env *e, const char *name, char *buf)
{
    snprintf(buf, 600, "%s/%s", e->dir, name);
    return buf;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* The whole file, malloc'd; "" when it does not exist. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *buf = calloc(1, 1);
    size_t len = 0, n;
    char chunk[4096];
    if (f == NULL)
        return buf;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        buf = realloc(buf, len + n + 1);
        memcpy(buf + len, chunk, n);
        len += n;
        buf[len] = '\0';
    }
    fclose(f);
    return buf;
}

/* Wait until `path` holds `needle` after byte `from`; false after timeout_ms. */
static bool wait_log(const char *path, size_t from, const char *needle, int timeout_ms)
{
    long long end = h_now_ms() + timeout_ms;
    do {
        char *text = slurp(path);
        bool found = strlen(text) >= from && strstr(text + from, needle) != NULL;
        free(text);
        if (found)
            return true;
        h_sleep_ms(20);
    } while (h_now_ms() < end);
    fprintf(stderr, "no '%s' in %s after byte %zu within %d ms; it holds:\n", needle,
            path, from, timeout_ms);
    char *text = slurp(path);
    fprintf(stderr, "%s\n", text);
    free(text);
    return false;
}

/* Occurrences of `needle` in `text`. */
static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

static size_t file_size(const char *path)
{
    char *text = slurp(path);
    size_t n = strlen(text);
    free(text);
    return n;
}

/* The pid of the process listening on 127.0.0.1:`port` (the harness keeps its own):
 * the socket's inode from /proc/net/tcp, then the process holding that socket. */
static pid_t listener_pid(int port)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    if (f == NULL)
        return -1;
    char line[512];
    unsigned long inode = 0;
    while (inode == 0 && fgets(line, sizeof line, f) != NULL) {
        unsigned lport, st;
        unsigned long ino;
        if (sscanf(line, " %*d: %*x:%x %*x:%*x %x %*x:%*x %*x:%*x %*x %*u %*u %lu",
                   &lport, &st, &ino) == 3 &&
            (int)lport == port && st == 0x0A)
            inode = ino;
    }
    fclose(f);
    if (inode == 0)
        return -1;
    char want[64];
    snprintf(want, sizeof want, "socket:[%lu]", inode);
    pid_t found = -1;
    DIR *proc = opendir("/proc");
    struct dirent *p;
    while (found < 0 && proc != NULL && (p = readdir(proc)) != NULL) {
        if (p->d_name[0] < '1' || p->d_name[0] > '9')
            continue;
        char fddir[300];
        snprintf(fddir, sizeof fddir, "/proc/%s/fd", p->d_name);
        DIR *fds = opendir(fddir);
        struct dirent *d;
        while (found < 0 && fds != NULL && (d = readdir(fds)) != NULL) {
            char link[600], target[128];
            snprintf(link, sizeof link, "%s/%s", fddir, d->d_name);
            ssize_t n = readlink(link, target, sizeof target - 1);
            if (n > 0) {
                target[n] = '\0';
                if (strcmp(target, want) == 0)
                    found = (pid_t)atoi(p->d_name);
            }
        }
        if (fds != NULL)
            closedir(fds);
    }
    if (proc != NULL)
        closedir(proc);
    return found;
}

/* A service on the group's Redis with config file `cfg` (NULL: the harness's "{}")
 * and log file `log` (NULL: stderr, into the harness's log), plus `extra` args. */
static h_svc *start(struct env *e, const char *cfg, const char *log,
                    const char *const *extra, pid_t *pid)
{
    const char *args[24];
    int n = 0;
    if (cfg != NULL) { /* after the harness's --config: the last one counts */
        args[n++] = "--config";
        args[n++] = cfg;
    }
    if (log != NULL) {
        args[n++] = "--log-file";
        args[n++] = log;
    }
    for (int i = 0; extra != NULL && extra[i] != NULL && n < 23; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    h_svc *s = h_svc_start_args(e->h->redis, args);
    assert_non_null(s);
    *pid = listener_pid(h_svc_port(s));
    if (*pid <= 0)
        h_svc_free(s);
    assert_true(*pid > 0);
    return s;
}

/* Still running and answering? */
static void expect_alive(h_svc *s)
{
    h_sleep_ms(100);
    assert_true(h_svc_alive(s));
    struct h_resp r;
    assert_int_equal(h_http(h_svc_port(s), "GET", "/livez", NULL, NULL, 0, &r), 200);
    h_resp_free(&r);
}

/* Started at log_level warn from its file; the file rewritten to debug and SIGHUP:
 * debug lines appear. A change that needs a restart is named; a file that no longer
 * loads changes nothing. Other settings stay as they were. */
static void test_sighup_rereads_log_level(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    char cfg[600], log[600];
    path_in(e, "level.json", cfg);
    path_in(e, "level.log", log);
    write_text(cfg, "{\"log_level\": \"warn\"}\n");
    pid_t pid;
    h_svc *s = start(e, cfg, log, NULL, &pid);
    char *text = slurp(log);
    assert_null(strstr(text, " INFO configuration ")); /* the startup lines are info */
    assert_null(strstr(text, "listening on"));
    assert_null(strstr(text, " DEBUG "));
    free(text);

    write_text(cfg, "{\"log_level\": \"debug\"}\n");
    assert_int_equal(kill(pid, SIGHUP), 0);
    assert_true(wait_log(log, 0, " DEBUG configuration read on SIGHUP ", 5000));
    assert_true(wait_log(log, 0, "log_level=debug was=warn", 1000));
    expect_alive(s);

    /* threads needs a restart: said, not applied; log_level back to warn. */
    size_t mark = file_size(log);
    write_text(cfg, "{\"log_level\": \"warn\", \"threads\": 3}\n");
    assert_int_equal(kill(pid, SIGHUP), 0);
    assert_true(wait_log(log, mark, " WARN SIGHUP: threads changed", 5000));
    assert_true(wait_log(log, mark, "log_level=warn was=debug", 1000));

    /* A bad file: one error line, the running configuration stays (warn). */
    mark = file_size(log);
    write_text(cfg, "{\"log_level\": \"loud\"}\n");
    assert_int_equal(kill(pid, SIGHUP), 0);
    assert_true(wait_log(log, mark, " ERROR SIGHUP: configuration not reloaded", 5000));
    assert_true(wait_log(log, mark, "log_level: must be one of", 1000));
    expect_alive(s);
    write_text(cfg, "{\"log_level\": \"warn\"}\n");
    struct h_resp r;
    h_http(h_svc_port(s), "GET", "/admin/stats", NULL, NULL, 0, &r);
    h_resp_free(&r);
    text = slurp(log);
    assert_null(strstr(text + mark, " DEBUG "));
    assert_int_equal(count(text + mark, " INFO "), count(text + mark, " INFO access "));
    free(text);
    assert_int_equal(h_svc_stop_clean(s), 0);
    h_svc_free(s);
}

/* logrotate's way: rename the file, SIGHUP; the service creates the file again and
 * writes there, nothing more into the renamed one. */
static void test_sighup_reopens_log_file(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    char log[600], rotated[600];
    path_in(e, "rotate.log", log);
    path_in(e, "rotate.log.1", rotated);
    pid_t pid;
    h_svc *s = start(e, NULL, log, NULL, &pid);
    assert_true(wait_log(log, 0, " INFO inventoryd ", 5000)); /* "... listening on" */
    assert_true(wait_log(log, 0, " INFO configuration config_file=", 1000));

    assert_int_equal(rename(log, rotated), 0);
    assert_int_equal(kill(pid, SIGHUP), 0);
    assert_true(wait_log(log, 0, "SIGHUP: log file", 5000));
    assert_true(wait_log(log, 0, "reopened", 1000));
    assert_true(wait_log(log, 0, "SIGHUP: configuration reloaded", 1000));
    assert_int_equal(kill(pid, SIGUSR1), 0);
    assert_true(wait_log(log, 0, " INFO stats ", 5000));
    expect_alive(s);
    assert_int_equal(h_svc_stop_clean(s), 0);
    assert_true(wait_log(log, 0, " INFO stopped", 1000));

    char *old = slurp(rotated);
    assert_non_null(strstr(old, "listening on"));
    assert_null(strstr(old, "reopened"));
    assert_null(strstr(old, " stats "));
    assert_null(strstr(old, "stopped"));
    free(old);
    h_svc_free(s);
}

/* SIGUSR1: one line with the /admin/stats counters, written even at log_level error
 * (the operator asked for it); the service goes on. */
static void test_sigusr1_logs_counters(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    char log[600];
    path_in(e, "usr1.log", log);
    const char *args[] = {"--log-level", "error", NULL};
    pid_t pid;
    h_svc *s = start(e, NULL, log, args, &pid);
    int port = h_svc_port(s);
    assert_int_equal(h_put_sku(port, NULL, "usr1", 10, 2, "lock", 0), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(h_order(port, "usr1", 1, NULL, NULL), 201);
    assert_int_equal(h_order(port, "nosuch", 1, NULL, NULL), 404);

    assert_int_equal(kill(pid, SIGUSR1), 0);
    assert_true(wait_log(log, 0, " INFO stats uptime_s=", 5000));
    char *text = slurp(log);
    const char *line = strstr(text, " INFO stats ");
    const char *end = strchr(line, '\n');
    assert_non_null(end);
    char one[4096];
    snprintf(one, sizeof one, "%.*s", (int)(end - line), line);
    assert_non_null(strstr(one, " orders_confirmed=3 "));
    assert_non_null(strstr(one, " orders_unknown_sku=1 "));
    assert_non_null(strstr(one, " lock_attempts="));
    assert_null(strstr(text, "listening on")); /* info lines stay hidden */
    free(text);
    expect_alive(s);

    /* Again: a second line, with the new numbers. */
    assert_int_equal(h_order(port, "usr1", 1, NULL, NULL), 201);
    size_t mark = file_size(log);
    assert_int_equal(kill(pid, SIGUSR1), 0);
    assert_true(wait_log(log, mark, " orders_confirmed=4 ", 5000));
    expect_alive(s);
    assert_int_equal(h_svc_stop_clean(s), 0);
    h_svc_free(s);
}

/* SIGPIPE is ignored; SIGHUP with no log file (stderr) and SIGUSR1 do no harm. */
static void test_sigpipe_ignored(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    pid_t pid;
    h_svc *s = start(e, NULL, NULL, NULL, &pid);
    for (int i = 0; i < 3; i++)
        assert_int_equal(kill(pid, SIGPIPE), 0);
    expect_alive(s);
    assert_int_equal(kill(pid, SIGHUP), 0);
    assert_int_equal(kill(pid, SIGUSR1), 0);
    expect_alive(s);
    assert_int_equal(h_svc_stop_clean(s), 0);
    h_svc_free(s);
}

struct slow_order {
    int port;
    int status;
};

static void *place_slow_order(void *arg)
{
    struct slow_order *o = arg;
    o->status = h_order(o->port, "slow", 1, "slow-1", NULL);
    return NULL;
}

/* SIGTERM (and SIGINT) while an order holds its lock: the order is answered 201,
 * then the process exits 0. */
static void drain_on(struct env *e, int sig, const char *name)
{
    char log[600], want[64];
    path_in(e, sig == SIGTERM ? "term.log" : "int.log", log);
    pid_t pid;
    h_svc *s = start(e, NULL, log, NULL, &pid);
    int port = h_svc_port(s);
    assert_int_equal(h_put_sku(port, NULL, "slow", 5, 1, "lock", 700), 0);
    struct slow_order o = {port, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, place_slow_order, &o), 0);
    /* Wait until the order holds the segment lock, then signal. */
    char key[160], buf[128];
    h_key_lock(key, "slow", 0);
    long long end = h_now_ms() + 5000;
    while (h_redis_get(e->h->redis, key, buf, sizeof buf) != 1 && h_now_ms() < end)
        h_sleep_ms(5);
    assert_int_equal(h_redis_get(e->h->redis, key, buf, sizeof buf), 1);
    assert_int_equal(kill(pid, sig), 0);
    pthread_join(t, NULL);
    assert_int_equal(o.status, 201);
    assert_int_equal(h_svc_stop(s), 0); /* already on its way out: the exit status */
    snprintf(want, sizeof want, "received %s, shutting down", name);
    assert_true(wait_log(log, 0, want, 1000));
    assert_true(wait_log(log, 0, " INFO stopped", 1000));
    h_svc_free(s);
}

static void test_sigterm_and_sigint_drain(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    drain_on(e, SIGTERM, "SIGTERM");
    drain_on(e, SIGINT, "SIGINT");
}

/* log_format json: every line of a run -- startup, requests, SIGHUP, SIGUSR1, stop --
 * is one JSON object with ts, level and msg; the configuration line has the settings
 * with their types and the secret masked. */
static void test_json_lines(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    char cfg[600], log[600];
    path_in(e, "json.json", cfg);
    path_in(e, "json.log", log);
    write_text(cfg, "{\"admin_token\": \"s3cret-tok\", \"threads\": 4}\n");
    const char *args[] = {"--log-format", "json", "--log-level", "debug", NULL};
    pid_t pid;
    h_svc *s = start(e, cfg, log, args, &pid);
    int port = h_svc_port(s);
    assert_int_equal(h_put_sku(port, "s3cret-tok", "js", 5, 1, "lock", 0), 0);
    assert_int_equal(h_order(port, "js", 1, NULL, NULL), 201);
    struct h_resp r;
    h_http(port, "GET", "/nowhere\"\x01", NULL, NULL, 0, &r);
    h_resp_free(&r);
    assert_int_equal(kill(pid, SIGUSR1), 0);
    assert_true(wait_log(log, 0, "\"msg\":\"stats\"", 5000));
    assert_int_equal(kill(pid, SIGHUP), 0);
    assert_true(wait_log(log, 0, "SIGHUP: configuration reloaded", 5000));
    assert_int_equal(h_svc_stop_clean(s), 0);
    h_svc_free(s);

    char *text = slurp(log);
    assert_null(strstr(text, "s3cret"));
    int lines = 0;
    bool saw_config = false, saw_stats = false, saw_stop = false;
    for (char *p = text; *p != '\0';) {
        char *nl = strchr(p, '\n');
        assert_non_null(nl);
        json_error_t jerr;
        json_t *o = json_loadb(p, (size_t)(nl - p), 0, &jerr);
        if (o == NULL)
            fail_msg("line %d is not JSON (%s): %.*s", lines + 1, jerr.text,
                     (int)(nl - p), p);
        assert_true(json_is_object(o));
        const char *ts = json_string_value(json_object_get(o, "ts"));
        const char *level = json_string_value(json_object_get(o, "level"));
        const char *msg = json_string_value(json_object_get(o, "msg"));
        assert_non_null(ts);
        assert_non_null(level);
        assert_non_null(msg);
        assert_true(strlen(ts) == 24 && ts[10] == 'T' && ts[23] == 'Z');
        assert_true(strcmp(level, "debug") == 0 || strcmp(level, "info") == 0 ||
                    strcmp(level, "warn") == 0 || strcmp(level, "error") == 0);
        if (strcmp(msg, "configuration") == 0) {
            saw_config = true;
            assert_int_equal(json_integer_value(json_object_get(o, "port")), port);
            assert_int_equal(json_integer_value(json_object_get(o, "threads")), 4);
            assert_int_equal(json_integer_value(json_object_get(o, "pid")), pid);
            assert_string_equal(json_string_value(json_object_get(o, "admin_token")),
                                "***");
            assert_string_equal(json_string_value(json_object_get(o, "log_format")),
                                "json");
            assert_true(json_is_true(json_object_get(o, "access_log")));
            const char *file = json_string_value(json_object_get(o, "config_file"));
            assert_non_null(file);
            assert_true(strncmp(file, cfg, strlen(cfg)) == 0);
        } else if (strcmp(msg, "stats") == 0) {
            saw_stats = true;
            assert_int_equal(json_integer_value(json_object_get(o, "orders_confirmed")),
                             1);
            assert_true(json_is_integer(json_object_get(o, "uptime_s")));
        } else if (strcmp(msg, "stopped") == 0) {
            saw_stop = true;
        }
        json_decref(o);
        lines++;
        p = nl + 1;
    }
    assert_true(saw_config);
    assert_true(saw_stats);
    assert_true(saw_stop);
    assert_true(lines >= 6);
    free(text);
}

/* A log file that cannot be opened: one line naming it and exit 2, as any bad
 * setting, both at startup and from --check-config, which creates nothing. */
static void test_bad_log_file(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    const char *bin = getenv("INVENTORYD");
    if (bin == NULL || bin[0] == '\0')
        bin = "build/inventoryd";
    char empty[600], bad[600], ok[600];
    write_text(path_in(e, "empty.json", empty), "{}\n");
    path_in(e, "missing-dir/x.log", bad);
    path_in(e, "check.log", ok);
    const char *run[] = {bin,       "--config",    empty,    "--log-file", bad,
                         "--redis", "127.0.0.1:1", "--port", "1",          NULL};
    const char *check[] = {bin, "--check-config", "--config", empty, "--log-file", bad,
                           NULL};
    const char *const *cases[] = {run, check};
    for (int i = 0; i < 2; i++) {
        char *out = NULL, *err = NULL;
        int st = h_run_cmd(cases[i], NULL, 5000, &out, &err);
        if (st != 2 || strstr(err, "log_file") == NULL || strstr(err, bad) == NULL)
            fprintf(stderr, "exit %d\nstdout: %s\nstderr: %s\n", st, out, err);
        assert_int_equal(st, 2);
        assert_string_equal(out, "");
        assert_non_null(strstr(err, "log_file"));
        assert_non_null(strstr(err, bad));
        assert_ptr_equal(strchr(err, '\n'), err + strlen(err) - 1); /* one line */
        free(out);
        free(err);
    }
    const char *good[] = {bin, "--check-config", "--config", empty, "--log-file", ok,
                          NULL};
    char *out = NULL;
    assert_int_equal(h_run_cmd(good, NULL, 5000, &out, NULL), 0);
    char want[700];
    snprintf(want, sizeof want, "\nlog_file               %s\n", ok);
    assert_non_null(strstr(out, want));
    assert_int_equal(access(ok, F_OK), -1); /* a check creates nothing */
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sighup_rereads_log_level),
        cmocka_unit_test(test_sighup_reopens_log_file),
        cmocka_unit_test(test_sigusr1_logs_counters),
        cmocka_unit_test(test_sigpipe_ignored),
        cmocka_unit_test(test_sigterm_and_sigint_drain),
        cmocka_unit_test(test_json_lines),
        cmocka_unit_test(test_bad_log_file),
    };
    int failed =
        cmocka_run_group_tests_name("signals", tests, group_setup, group_teardown);
    return h_exit_status(failed);
}
