/* it_proxy.c -- the fault-injection proxy (tests/proxy.h) in front of a real Redis. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "tests/harness.h"
#include "tests/proxy.h"

struct fixture {
    struct h_env *env;
    h_proxy *proxy;
};

static int group_setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    if (f == NULL || (f->env = h_env_start_redis()) == NULL) {
        free(f);
        return -1;
    }
    f->proxy = h_proxy_start(h_redis_port(f->env->redis));
    if (f->proxy == NULL) {
        h_env_free(f->env);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int group_teardown(void **state)
{
    struct fixture *f = *state;
    h_proxy_free(f->proxy);
    int rc = h_env_stop(f->env);
    free(f);
    return rc;
}

/* A hiredis connection through the proxy (2 s timeouts); NULL on error. */
static redisContext *connect_proxy(const h_proxy *p)
{
    struct timeval tv = {.tv_sec = 2};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", h_proxy_port(p), tv);
    if (c == NULL || c->err) {
        fprintf(stderr, "connect to proxy: %s\n", c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

/* Run `cmd` on a direct connection and return its integer reply (-1 on error). */
static long long direct_int(const h_redis *r, const char *cmd, const char *key)
{
    redisContext *c = h_redis_connect(r);
    if (c == NULL)
        return -1;
    redisReply *rep = redisCommand(c, "%s %s", cmd, key);
    long long v = -1;
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER)
        v = rep->integer;
    else if (rep != NULL && rep->type == REDIS_REPLY_STRING)
        v = atoll(rep->str);
    freeReplyObject(rep);
    redisFree(c);
    return v;
}

static void test_passes_commands_through(void **state)
{
    struct fixture *f = *state;
    h_deadline(60);
    redisContext *c = connect_proxy(f->proxy);
    assert_non_null(c);
    redisReply *rep = redisCommand(c, "SET %s %s", "pk", "hello");
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    rep = redisCommand(c, "GET %s", "pk");
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_STRING);
    assert_string_equal(rep->str, "hello");
    freeReplyObject(rep);

    /* Larger than the proxy's buffers in both directions: back-pressure, partial
     * writes. */
    size_t len = 300000;
    char *big = malloc(len);
    assert_non_null(big);
    for (size_t i = 0; i < len; i++)
        big[i] = (char)('a' + i % 26);
    rep = redisCommand(c, "SET %s %b", "big", big, len);
    assert_non_null(rep);
    freeReplyObject(rep);
    rep = redisCommand(c, "GET %s", "big");
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_STRING);
    assert_int_equal(rep->len, len);
    assert_memory_equal(rep->str, big, len);
    freeReplyObject(rep);
    free(big);
    redisFree(c);
}

static void test_drop_reply_after_command_ran(void **state)
{
    struct fixture *f = *state;
    h_deadline(60);
    assert_true(direct_int(f->env->redis, "DEL", "k") >= 0);
    int drops = h_proxy_drops(f->proxy);

    h_proxy_drop_reply(f->proxy, "INCR", 1);
    redisContext *c = connect_proxy(f->proxy);
    assert_non_null(c);
    redisReply *rep = redisCommand(c, "INCR %s", "k");
    assert_null(rep);
    fprintf(stderr, "proxied INCR: err %d (%s)\n", c->err, c->errstr);
    assert_true(c->err == REDIS_ERR_IO || c->err == REDIS_ERR_EOF);
    redisFree(c);
    assert_int_equal(direct_int(f->env->redis, "GET", "k"), 1);
    assert_int_equal(h_proxy_drops(f->proxy), drops + 1);

    /* The arming was used up: the next INCR passes. */
    c = connect_proxy(f->proxy);
    assert_non_null(c);
    rep = redisCommand(c, "INCR %s", "k");
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_INTEGER);
    assert_int_equal(rep->integer, 2);
    freeReplyObject(rep);
    redisFree(c);
    assert_int_equal(h_proxy_drops(f->proxy), drops + 1);
}

/* A pattern split across two reads of the proxy still matches. */
static void test_drop_reply_pattern_split(void **state)
{
    struct fixture *f = *state;
    h_deadline(60);
    assert_true(direct_int(f->env->redis, "DEL", "split") >= 0);
    int drops = h_proxy_drops(f->proxy);
    h_proxy_drop_reply(f->proxy, "INCR", 1);

    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((unsigned short)h_proxy_port(f->proxy)),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const char part1[] = "*2\r\n$4\r\nIN", part2[] = "CR\r\n$5\r\nsplit\r\n";
    assert_int_equal(send(fd, part1, strlen(part1), MSG_NOSIGNAL),
                     (ssize_t)strlen(part1));
    h_sleep_ms(100);
    assert_int_equal(send(fd, part2, strlen(part2), MSG_NOSIGNAL),
                     (ssize_t)strlen(part2));
    char buf[64];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    fprintf(stderr, "raw recv: %zd (%s)\n", n, n < 0 ? strerror(errno) : "EOF");
    assert_true(n == 0 || (n < 0 && errno == ECONNRESET));
    close(fd);
    assert_int_equal(direct_int(f->env->redis, "GET", "split"), 1);
    assert_int_equal(h_proxy_drops(f->proxy), drops + 1);
}

static void test_reset_all_breaks_open_connections(void **state)
{
    struct fixture *f = *state;
    h_deadline(60);
    redisContext *c = connect_proxy(f->proxy);
    assert_non_null(c);
    redisReply *rep = redisCommand(c, "PING");
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_STATUS);
    freeReplyObject(rep);

    assert_true(h_proxy_reset_all(f->proxy) >= 1);
    rep = redisCommand(c, "PING");
    assert_null(rep);
    fprintf(stderr, "PING after reset: err %d (%s)\n", c->err, c->errstr);
    assert_true(c->err == REDIS_ERR_IO || c->err == REDIS_ERR_EOF);
    redisFree(c);

    /* New connections still work. */
    c = connect_proxy(f->proxy);
    assert_non_null(c);
    rep = redisCommand(c, "PING");
    assert_non_null(rep);
    freeReplyObject(rep);
    redisFree(c);
    assert_true(h_proxy_reset_all(f->proxy) >= 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_passes_commands_through),
        cmocka_unit_test(test_drop_reply_after_command_ran),
        cmocka_unit_test(test_drop_reply_pattern_split),
        cmocka_unit_test(test_reset_all_breaks_open_connections),
    };
    return h_exit_status(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
