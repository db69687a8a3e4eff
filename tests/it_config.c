/* it_config.c -- the binary's command line, config file and environment, end to end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

struct env {
    h_redis *redis;
    char *dir;           /* for config files */
    char empty_cfg[600]; /* "{}" */
};

static int group_setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    if (e == NULL)
        return -1;
    *state = e;
    e->redis = h_redis_start();
    e->dir = h_tempdir("cfg");
    if (e->redis == NULL || e->dir == NULL)
        return -1;
    snprintf(e->empty_cfg, sizeof e->empty_cfg, "%s/empty.json", e->dir);
    FILE *f = fopen(e->empty_cfg, "w");
    if (f == NULL)
        return -1;
    fputs("{}\n", f);
    fclose(f);
    return 0;
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    if (e == NULL)
        return 0;
    h_redis_free(e->redis);
    h_rmtree(e->dir);
    free(e->dir);
    free(e);
    return 0;
}

static const char *bin(void)
{
    const char *b = getenv("INVENTORYD");
    return b != NULL && b[0] != '\0' ? b : "build/inventoryd";
}

/* Write a config file into the group's dir; returns its path (static per call site). */
static const char *write_cfg(struct env *e, const char *name, const char *text,
                             char *path, size_t len)
{
    snprintf(path, len, "%s/%s", e->dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static bool contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay != '\0'; hay++) {
        if (strncasecmp(hay, needle, n) == 0)
            return true;
    }
    return false;
}

static int count_lines(const char *s)
{
    int n = 0;
    size_t len = strlen(s);
    for (size_t i = 0; i < len; i++)
        n += s[i] == '\n';
    if (len > 0 && s[len - 1] != '\n')
        n++;
    return n;
}

/* Run the binary with `argv` (after argv[0]) and `env`; it must exit 2 with exactly one
 * line of output that names one of `names` (case-insensitive). */
static void expect_refused(const char *const args[], const char *const env[],
                           const char *name1, const char *name2)
{
    const char *argv[32];
    int n = 0;
    argv[n++] = bin();
    for (int i = 0; args[i] != NULL && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    char *out = NULL, *err = NULL;
    int st = h_run_cmd(argv, env, 5000, &out, &err);
    char all[2048];
    snprintf(all, sizeof all, "%s%s", out, err);
    bool named = contains_ci(all, name1) || (name2 != NULL && contains_ci(all, name2));
    int lines = count_lines(all);
    if (st != 2 || !named || lines != 1) {
        fprintf(stderr, "args:");
        for (int i = 1; argv[i] != NULL; i++)
            fprintf(stderr, " '%s'", argv[i]);
        for (int i = 0; env != NULL && env[i] != NULL; i++)
            fprintf(stderr, " env %s", env[i]);
        fprintf(stderr, "\nexit %d, %d line(s), names '%s': %s\n", st, lines, name1, all);
    }
    free(out);
    free(err);
    assert_int_equal(st, 2);
    assert_true(named);
    assert_int_equal(lines, 1);
}

static void test_help_and_version(void **state)
{
    (void)state;
    h_deadline(30);
    char *out = NULL, *err = NULL;
    const char *help[] = {bin(), "--help", NULL};
    assert_int_equal(h_run_cmd(help, NULL, 5000, &out, &err), 0);
    assert_true(contains_ci(out, "usage"));
    assert_true(contains_ci(out, "--port"));
    assert_true(contains_ci(out, "--lock-ttl-ms"));
    free(out);
    free(err);
    const char *version[] = {bin(), "--version", NULL};
    assert_int_equal(h_run_cmd(version, NULL, 5000, &out, &err), 0);
    assert_true(strlen(out) > 0);
    assert_true(isdigit((unsigned char)out[strcspn(out, "0123456789")]));
    free(out);
    free(err);
}

static void test_bad_flags(void **state)
{
    struct env *e = *state;
    h_deadline(120);
    char port[16];
    snprintf(port, sizeof port, "%d", h_free_port());
    /* Each run is otherwise valid, so only the named flag can be the reason. */
#define BASE                                                                             \
    "--config", e->empty_cfg, "--bind", "127.0.0.1", "--redis", h_redis_addr(e->redis)
    const char *a1[] = {BASE, "--port", "abc", NULL};
    expect_refused(a1, NULL, "port", NULL);
    const char *a2[] = {BASE, "--port", "70000", NULL};
    expect_refused(a2, NULL, "port", NULL);
    const char *a3[] = {BASE, "--port", port, "--lock-ttl-ms", "-5", NULL};
    expect_refused(a3, NULL, "lock-ttl-ms", "lock_ttl_ms");
    const char *a4[] = {BASE, "--port", port, "--lock-wait-ms", "1x", NULL};
    expect_refused(a4, NULL, "lock-wait-ms", "lock_wait_ms");
    const char *a5[] = {BASE, "--port", port, "--threads", "0", NULL};
    expect_refused(a5, NULL, "threads", NULL);
    const char *a6[] = {BASE, "--port", port, "--redis", "no-port-here", NULL};
    expect_refused(a6, NULL, "redis", NULL);
    const char *a7[] = {BASE, "--port", port, "--bogus", NULL};
    expect_refused(a7, NULL, "bogus", NULL);
    const char *a8[] = {BASE, "--port", NULL};
    expect_refused(a8, NULL, "port", NULL);
    const char *a9[] = {BASE, "--port", "", NULL};
    expect_refused(a9, NULL, "port", NULL);
    const char *a10[] = {BASE, "--port", "8080.5", NULL};
    expect_refused(a10, NULL, "port", NULL);
    const char *a11[] = {BASE, "--port", port, "--durability", "sometimes", NULL};
    expect_refused(a11, NULL, "durability", NULL);
#undef BASE
}

static void test_bad_config_file(void **state)
{
    struct env *e = *state;
    h_deadline(120);
    char port[16], path[700];
    snprintf(port, sizeof port, "%d", h_free_port());
    struct {
        const char *json;
        const char *names;
    } cases[] = {
        {"{\"port\": \"abc\"}", "port"},
        {"{\"port\": 70000}", "port"},
        {"{\"lock_ttl_ms\": -5}", "lock_ttl_ms"},
        {"{\"lock_wait_ms\": 1.5}", "lock_wait_ms"},
        {"{\"threads\": true}", "threads"},
        {"{\"durability\": \"sync\"}", "durability"},
        {"{\"no_such_key\": 1}", "no_such_key"},
        {"{\"port\": 8080", "cfg-"}, /* malformed: the message names the file */
        {"[1, 2]", "cfg-"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "bad%zu.json", i);
        write_cfg(e, name, cases[i].json, path, sizeof path);
        const char *args[] = {"--config", path,        "--port", port,
                              "--bind",   "127.0.0.1", NULL};
        /* Without --port for the port cases, so the file's value is the one used. */
        if (strcmp(cases[i].names, "port") == 0)
            args[2] = NULL;
        expect_refused(args, NULL, cases[i].names, NULL);
    }
    snprintf(path, sizeof path, "%s/does-not-exist.json", e->dir);
    const char *missing[] = {"--config", path, "--port", port, NULL};
    expect_refused(missing, NULL, "does-not-exist.json", NULL);

    /* A bad environment value names the variable. */
    const char *args[] = {"--config", e->empty_cfg, "--bind", "127.0.0.1", NULL};
    const char *env1[] = {"INVENTORY_PORT=abc", NULL};
    expect_refused(args, env1, "INVENTORY_PORT", NULL);
    const char *env2[] = {"INVENTORY_LOCK_TTL_MS=-5", NULL};
    const char *args2[] = {"--config", e->empty_cfg, "--port", port, NULL};
    expect_refused(args2, env2, "INVENTORY_LOCK_TTL_MS", NULL);
}

/* Only the expected one of the candidate ports answers /livez. */
static void expect_listening(int yes, const int *no, int n_no)
{
    struct h_resp r;
    assert_int_equal(h_req(yes, "GET", "/livez", NULL, NULL, &r), 200);
    h_resp_free(&r);
    for (int i = 0; i < n_no; i++) {
        h_http_set_timeout(2000);
        int st = h_req(no[i], "GET", "/livez", NULL, NULL, &r);
        h_http_set_timeout(30000);
        h_resp_free(&r);
        if (st != -1)
            fail_msg("port %d answered %d; only %d should listen", no[i], st, yes);
    }
}

static void test_precedence_file_env_flag(void **state)
{
    struct env *e = *state;
    h_deadline(120);
    int pf = h_free_port(), pe = h_free_port(), pa = h_free_port();
    assert_true(pf != pe && pe != pa && pf != pa);
    char cfg[64], envport[48], flag[16];
    snprintf(cfg, sizeof cfg, "{\"port\": %d, \"lock_wait_ms\": 500}\n", pf);
    snprintf(envport, sizeof envport, "INVENTORY_PORT=%d", pe);
    snprintf(flag, sizeof flag, "%d", pa);

    /* File alone. */
    struct h_svc_opts o;
    memset(&o, 0, sizeof o);
    o.config_json = cfg;
    o.no_port_flag = true;
    o.port = pf;
    h_svc *s = h_svc_start(e->redis, &o);
    assert_non_null(s);
    int others1[] = {pe, pa};
    expect_listening(pf, others1, 2);
    h_svc_free(s);

    /* The environment overrides the file. */
    const char *env[] = {envport, NULL};
    o.env = env;
    o.port = pe;
    s = h_svc_start(e->redis, &o);
    assert_non_null(s);
    int others2[] = {pf, pa};
    expect_listening(pe, others2, 2);
    h_svc_free(s);

    /* The flag overrides both. */
    const char *args[] = {"--port", flag, NULL};
    o.args = args;
    o.port = pa;
    s = h_svc_start(e->redis, &o);
    assert_non_null(s);
    int others3[] = {pf, pe};
    expect_listening(pa, others3, 2);
    assert_int_equal(h_svc_stop(s), 0); /* SIGTERM is a clean exit */
    h_svc_free(s);
}

static void test_non_loopback_needs_token(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    char port[16];
    snprintf(port, sizeof port, "%d", h_free_port());
    const char *args[] = {"--config", e->empty_cfg, "--port",
                          port,       "--redis",    h_redis_addr(e->redis),
                          "--bind",   "0.0.0.0",    NULL};
    expect_refused(args, NULL, "bind", "token");
    const char *args2[] = {"--config", e->empty_cfg,           "--port", port,
                           "--redis",  h_redis_addr(e->redis), NULL};
    const char *env[] = {"INVENTORY_BIND=0.0.0.0", NULL};
    expect_refused(args2, env, "bind", "token");
    /* The loopback bind starts without a token. */
    struct h_svc_opts o;
    memset(&o, 0, sizeof o);
    const char *args3[] = {"--bind", "127.0.0.1", NULL};
    o.args = args3;
    h_svc *s = h_svc_start(e->redis, &o);
    assert_non_null(s);
    h_svc_free(s);
}

/* --check-config validates file, environment and flags, prints the effective values
 * with the secret masked, and exits without listening or touching Redis. */
static void test_check_config(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    char path[700];
    write_cfg(e, "check.json",
              "{\"port\": 9123, \"threads\": 3, \"admin_token\": \"file-secret\"}", path,
              sizeof path);
    const char *env[] = {"INVENTORY_LOCK_WAIT_MS=77", "INVENTORY_ADMIN_TOKEN=env-secret",
                         NULL};
    /* Port 1 of loopback: nothing listens there, and nothing must try. */
    const char *argv[] = {bin(),     "--check-config", "--config", path,
                          "--redis", "127.0.0.1:1",    NULL};
    char *out = NULL, *err = NULL;
    int st = h_run_cmd(argv, env, 5000, &out, &err);
    if (st != 0)
        fprintf(stderr, "exit %d\nstdout: %s\nstderr: %s\n", st, out, err);
    assert_int_equal(st, 0);
    char want[800];
    snprintf(want, sizeof want, "config file: %s", path);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "\nport                   9123\n"));
    assert_non_null(strstr(out, "\nthreads                3\n"));
    assert_non_null(strstr(out, "\nlock_wait_ms           77\n"));
    assert_non_null(strstr(out, "\nredis                  127.0.0.1:1\n"));
    assert_non_null(strstr(out, "\nadmin_token            ***\n"));
    assert_non_null(strstr(out, "configuration OK"));
    assert_null(strstr(out, "secret"));
    assert_null(strstr(err, "secret"));
    free(out);
    free(err);

    /* Any bad value: the usual one line and exit 2. */
    const char *bad_flag[] = {"--check-config", "--config", path, "--threads", "0", NULL};
    expect_refused(bad_flag, NULL, "threads", NULL);
    const char *bad_env[] = {"INVENTORY_REDIS=nope", NULL};
    const char *args[] = {"--check-config", "--config", path, NULL};
    expect_refused(args, bad_env, "INVENTORY_REDIS", NULL);
    write_cfg(e, "check-bad.json", "{\"lock_ttl_ms\": 1}", path, sizeof path);
    expect_refused(args, NULL, "lock_ttl_ms", NULL);
}

/* Every event loop serves the one listening socket, bound once without SO_REUSEPORT:
 * a second process started on the same port is refused (exit 1, one line saying
 * why), not handed part of the connections, and the first goes on serving. */
static void test_second_process_on_the_port_is_refused(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    const char *first_args[] = {"--config", e->empty_cfg, NULL};
    h_svc *first = h_svc_start_args(e->redis, first_args);
    assert_non_null(first);
    char port[16], redis[64];
    snprintf(port, sizeof port, "%d", h_svc_port(first));
    snprintf(redis, sizeof redis, "127.0.0.1:%d", h_redis_port(e->redis));
    const char *argv[] = {bin(), "--config", e->empty_cfg, "--port",
                          port,  "--redis",  redis,        NULL};
    char *out = NULL, *err = NULL;
    int st = h_run_cmd(argv, NULL, 5000, &out, &err);
    if (st != 1 || strstr(err, "cannot listen") == NULL)
        fprintf(stderr, "second process: exit %d: %s%s\n", st, out, err);
    assert_int_equal(st, 1);
    assert_non_null(strstr(err, "Address already in use"));
    free(out);
    free(err);
    for (int i = 0; i < 20; i++) { /* every connection still reaches the first */
        struct h_resp r;
        assert_int_equal(h_req(h_svc_port(first), "GET", "/livez", NULL, NULL, &r), 200);
        h_resp_free(&r);
    }
    assert_true(h_svc_alive(first));
    assert_int_equal(h_svc_stop_clean(first), 0);
    h_svc_free(first);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_and_version),
        cmocka_unit_test(test_bad_flags),
        cmocka_unit_test(test_bad_config_file),
        cmocka_unit_test(test_precedence_file_env_flag),
        cmocka_unit_test(test_non_loopback_needs_token),
        cmocka_unit_test(test_check_config),
        cmocka_unit_test(test_second_process_on_the_port_is_refused),
    };
    return cmocka_run_group_tests_name("config", tests, group_setup, group_teardown);
}
