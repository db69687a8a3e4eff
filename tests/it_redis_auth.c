/* it_redis_auth.c -- a Redis that wants a password: AUTH with the default user and an
 * ACL user, the password from the URL, the environment or a file, SELECT of a
 * database, a unix socket, and a wrong password answered with a clear reason.
 *
 * One redis-server for the group, with a unix socket in its dir; once it answers,
 * the test sets `requirepass` and an ACL user `inv` (password `pw`) on it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

#define PASSWORD "s3cret"

struct env {
    h_redis *redis;
    char sock[600];
};

/* A command on an authenticated connection; the reply's type, -1 on error. */
static int admin_command(struct env *e, const char *cmd)
{
    redisContext *c = h_redis_connect(e->redis);
    if (c == NULL)
        return -1;
    redisReply *r = redisCommand(c, "AUTH %s", PASSWORD);
    if (r != NULL)
        freeReplyObject(r);
    r = redisCommand(c, cmd);
    int type = r != NULL ? r->type : -1;
    if (r != NULL && r->type == REDIS_REPLY_ERROR)
        fprintf(stderr, "%s: %s\n", cmd, r->str);
    if (r != NULL)
        freeReplyObject(r);
    redisFree(c);
    return type;
}

static int group_setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    if (e == NULL)
        return -1;
    *state = e;
    char *dir = h_tempdir("sock");
    if (dir == NULL)
        return -1;
    snprintf(e->sock, sizeof e->sock, "%s/redis.sock", dir);
    free(dir);
    const char *args[] = {"--unixsocket", e->sock, "--unixsocketperm", "700", NULL};
    e->redis = h_redis_start_args(args);
    if (e->redis == NULL)
        return -1;
    redisContext *c = h_redis_connect(e->redis);
    if (c == NULL)
        return -1;
    redisReply *r = redisCommand(c, "CONFIG SET requirepass %s", PASSWORD);
    int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
    if (r != NULL)
        freeReplyObject(r);
    redisFree(c);
    return ok && admin_command(e, "ACL SETUSER inv on >pw ~* &* +@all") ==
                       REDIS_REPLY_STATUS
               ? 0
               : -1;
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    if (e != NULL)
        h_redis_free(e->redis);
    free(e);
    return 0;
}

/* Start inventoryd with exactly `--redis TARGET` (plus config/env); NULL on failure. */
static h_svc *start(const char *target, const char *config_json, const char *const *env)
{
    const char *args[] = {"--redis", target, NULL};
    const struct h_svc_opts opts = {
        .config_json = config_json, .args = args, .env = env, .no_redis_flag = true};
    return h_svc_start(NULL, &opts);
}

/* The service sells one unit of a fresh SKU `sku` and says it is healthy. */
static void expect_working(h_svc *s, const char *sku)
{
    assert_non_null(s);
    int port = h_svc_port(s);
    assert_int_equal(h_put_sku(port, NULL, sku, 5, 2, "lock", 0), 0);
    assert_int_equal(h_order(port, sku, 1, NULL, NULL), 201);
    struct h_resp r;
    assert_int_equal(h_req(port, "GET", "/healthz", NULL, NULL, &r), 200);
    h_resp_free(&r);
    assert_int_equal(h_svc_stop_clean(s), 0);
    h_svc_free(s);
}

static void test_password_in_the_url(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    char url[128];
    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d", PASSWORD,
             h_redis_port(e->redis));
    expect_working(start(url, NULL, NULL), "auth-url");
}

static void test_acl_user(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    char url[128];
    snprintf(url, sizeof url, "redis://inv:pw@127.0.0.1:%d", h_redis_port(e->redis));
    expect_working(start(url, NULL, NULL), "auth-acl");
}

static void test_password_from_env_and_file(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    const char *addr = h_redis_addr(e->redis);
    const char *env[] = {"INVENTORY_REDIS_PASSWORD=" PASSWORD, NULL};
    expect_working(start(addr, NULL, env), "auth-env");

    char *dir = h_tempdir("pw");
    assert_non_null(dir);
    char path[600], json[800];
    snprintf(path, sizeof path, "%s/password", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(PASSWORD "\n", f);
    fclose(f);
    snprintf(json, sizeof json, "{\"redis_password_file\": \"%s\"}", path);
    expect_working(start(addr, json, NULL), "auth-file");
    h_rmtree(dir);
    free(dir);
}

static bool log_says(const char *path, const char *a, const char *b);

/* The detail of a reply contains `what`. */
static void expect_detail(const struct h_resp *r, const char *what)
{
    if (strstr(r->body, what) == NULL)
        fail_msg("expected '%s' in %s", what, r->body);
}

static void test_wrong_password_says_so(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    char url[128], *dir = h_tempdir("authlog"), log[600], json[700];
    assert_non_null(dir);
    snprintf(url, sizeof url, "redis://:nope@127.0.0.1:%d", h_redis_port(e->redis));
    snprintf(log, sizeof log, "%s/service.log", dir);
    snprintf(json, sizeof json, "{\"log_file\": \"%s\"}", log);
    h_svc *s = start(url, json, NULL);
    assert_non_null(s);
    int port = h_svc_port(s);
    struct h_resp r;
    assert_int_equal(h_req(port, "GET", "/healthz", NULL, NULL, &r), 503);
    expect_detail(&r, "AUTH");
    expect_detail(&r, "WRONGPASS");
    h_resp_free(&r);
    h_order(port, "any", 1, "o-auth", &r);
    assert_int_equal(h_expect_error(&r, 503, "backend_unavailable"), 0);
    expect_detail(&r, "AUTH");
    h_resp_free(&r);
    assert_int_equal(h_svc_stop_clean(s), 0);
    h_svc_free(s);
    assert_true(log_says(log, "redis AUTH", "WRONGPASS")); /* and the log, with why */
    h_rmtree(dir);
    free(dir);
}

/* True when a line of the file at `path` holds both `a` and `b`. */
static bool log_says(const char *path, const char *a, const char *b)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    char line[1024];
    bool said = false;
    while (!said && fgets(line, sizeof line, f) != NULL)
        said = strstr(line, a) != NULL && strstr(line, b) != NULL;
    fclose(f);
    return said;
}

/* A frozen Redis is logged (it used to give 503s and not one log line), and so is the
 * connection made again once it answers. */
static void test_failures_and_reconnects_are_logged(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    char url[128], *dir = h_tempdir("hanglog"), log[600], json[800];
    assert_non_null(dir);
    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d", PASSWORD,
             h_redis_port(e->redis));
    snprintf(log, sizeof log, "%s/service.log", dir);
    snprintf(json, sizeof json,
             "{\"log_file\": \"%s\", \"redis_timeout_ms\": 300, \"threads\": 1}", log);
    h_svc *s = start(url, json, NULL);
    assert_non_null(s);
    int port = h_svc_port(s);
    assert_int_equal(h_put_sku(port, NULL, "auth-hang", 5, 1, "lock", 0), 0);
    assert_int_equal(h_redis_pause(e->redis), 0);
    struct h_resp r;
    h_order(port, "auth-hang", 1, "o-hang", &r);
    assert_int_equal(h_expect_error(&r, 503, "backend_unavailable"), 0);
    h_resp_free(&r);
    assert_int_equal(h_redis_resume(e->redis), 0);
    int st = 0;
    for (int tries = 0; tries < 100 && st != 200 && st != 201; tries++) {
        st = h_order(port, "auth-hang", 1, "o-hang", NULL);
        if (st != 200 && st != 201)
            h_sleep_ms(50);
    }
    assert_true(st == 200 || st == 201);
    assert_int_equal(h_svc_stop_clean(s), 0);
    h_svc_free(s);
    assert_true(log_says(log, "redis", "no reply within"));
    assert_true(log_says(log, "redis", "connected again"));
    h_rmtree(dir);
    free(dir);
}

static void test_unix_socket_and_database(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    char url[700];
    snprintf(url, sizeof url, "unix://%s", e->sock);
    const char *env[] = {"INVENTORY_REDIS_PASSWORD=" PASSWORD, NULL};
    expect_working(start(url, NULL, env), "auth-unix");

    /* SELECT 3 on every connection: the SKU lands in database 3, not in 0. */
    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d/3", PASSWORD,
             h_redis_port(e->redis));
    expect_working(start(url, NULL, NULL), "auth-db3");
    assert_int_equal(admin_command(e, "SELECT 0"), REDIS_REPLY_STATUS);
    redisContext *c = h_redis_connect(e->redis);
    assert_non_null(c);
    redisReply *r = redisCommand(c, "AUTH %s", PASSWORD);
    freeReplyObject(r);
    long long in[2];
    for (int db = 0; db < 2; db++) {
        r = redisCommand(c, "SELECT %d", db ? 3 : 0);
        freeReplyObject(r);
        r = redisCommand(c, "SISMEMBER inv:skus auth-db3");
        assert_non_null(r);
        in[db] = r->integer;
        freeReplyObject(r);
    }
    redisFree(c);
    assert_int_equal(in[0], 0);
    assert_int_equal(in[1], 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_password_in_the_url),
        cmocka_unit_test(test_acl_user),
        cmocka_unit_test(test_password_from_env_and_file),
        cmocka_unit_test(test_wrong_password_says_so),
        cmocka_unit_test(test_failures_and_reconnects_are_logged),
        cmocka_unit_test(test_unix_socket_and_database),
    };
    return h_exit_status(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
