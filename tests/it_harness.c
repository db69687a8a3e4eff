/* it_harness.c -- the harness itself against redis-server alone and a canned HTTP peer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/harness.h"

/* SET and GET through a fresh connection. */
static void redis_set(const h_redis *r, const char *key, const char *val)
{
    redisContext *c = h_redis_connect(r);
    assert_non_null(c);
    redisReply *rep = redisCommand(c, "SET %s %s", key, val);
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    redisFree(c);
}

static void test_redis_lifecycle(void **state)
{
    (void)state;
    h_deadline(60);
    h_redis *r = h_redis_start();
    assert_non_null(r);
    assert_true(h_redis_port(r) > 0);
    redis_set(r, "k", "v1");

    /* A clean stop flushes the AOF; the restart on the same dir replays it. */
    assert_int_equal(h_redis_stop(r), 0);
    assert_null(h_redis_connect(r));
    assert_int_equal(h_redis_restart(r), 0);
    char buf[64];
    assert_int_equal(h_redis_get(r, "k", buf, sizeof buf), 1);
    assert_string_equal(buf, "v1");

    /* PX keys and the lock-key name. */
    char key[160];
    assert_string_equal(h_key_lock(key, "abc", 3), "inv:{abc:3}:lock");
    assert_int_equal(h_redis_set_px(r, key, "tok", 200, true), 0);
    assert_int_equal(h_redis_set_px(r, key, "tok2", 200, true), -1);
    h_sleep_ms(400);
    assert_int_equal(h_redis_get(r, key, buf, sizeof buf), 0);

    /* A paused redis accepts connections (the kernel does) but answers nothing. */
    assert_int_equal(h_redis_pause(r), 0);
    redisContext *c = h_redis_connect(r);
    if (c != NULL) {
        redisReply *rep = redisCommand(c, "PING");
        assert_null(rep);
        redisFree(c);
    }
    assert_int_equal(h_redis_resume(r), 0);
    assert_int_equal(h_redis_get(r, "k", buf, sizeof buf), 1);

    /* kill -9, then a restart still comes up on the same port. */
    assert_int_equal(h_redis_kill(r), 128 + 9);
    assert_int_equal(h_redis_restart(r), 0);
    assert_true(h_redis_get(r, "k", buf, sizeof buf) >= 0);
    h_redis_free(r);
}

static void test_run_cmd(void **state)
{
    (void)state;
    h_deadline(30);
    char *out = NULL, *err = NULL;
    const char *argv[] = {"sh", "-c", "echo out; echo err >&2; exit 3", NULL};
    assert_int_equal(h_run_cmd(argv, NULL, 5000, &out, &err), 3);
    assert_string_equal(out, "out\n");
    assert_string_equal(err, "err\n");
    free(out);
    free(err);

    /* INVENTORY_* of our own environment never leaks into a child. */
    setenv("INVENTORY_LEAK", "1", 1);
    const char *envp[] = {"FOO=bar", NULL};
    const char *argv2[] = {"sh", "-c", "echo ${INVENTORY_LEAK:-none} $FOO", NULL};
    assert_int_equal(h_run_cmd(argv2, envp, 5000, &out, NULL), 0);
    assert_string_equal(out, "none bar\n");
    free(out);
    unsetenv("INVENTORY_LEAK");

    const char *argv3[] = {"sleep", "10", NULL};
    long long t0 = h_now_ms();
    assert_int_equal(h_run_cmd(argv3, NULL, 300, NULL, NULL), -1);
    assert_true(h_now_ms() - t0 < 9000);
}

/* A one-connection HTTP peer that answers every request with a canned reply. */
struct canned {
    int fd;
    const char *reply;
    int count;
};

static void *canned_main(void *p)
{
    struct canned *c = p;
    for (int i = 0; i < c->count; i++) {
        int cfd = accept(c->fd, NULL, NULL);
        if (cfd < 0)
            return NULL;
        char buf[4096];
        size_t len = 0;
        while (len < sizeof buf - 1) {
            ssize_t n = recv(cfd, buf + len, sizeof buf - 1 - len, 0);
            if (n <= 0)
                break;
            len += (size_t)n;
            buf[len] = '\0';
            if (strstr(buf, "\r\n\r\n") != NULL)
                break;
        }
        ssize_t w = send(cfd, c->reply, strlen(c->reply), MSG_NOSIGNAL);
        (void)w;
        close(cfd);
    }
    return NULL;
}

static int listen_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(fd, 16) != 0 || getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
        return -1;
    *port = ntohs(sa.sin_port);
    return fd;
}

static void exchange(const char *reply, struct h_resp *out)
{
    int port = 0;
    struct canned c = {listen_loopback(&port), reply, 1};
    assert_true(c.fd >= 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, canned_main, &c), 0);
    h_req(port, "POST", "/x", "tok", "{}", out);
    pthread_join(th, NULL);
    close(c.fd);
}

static void test_http_client(void **state)
{
    (void)state;
    h_deadline(30);
    struct h_resp r;
    exchange("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
             "retry-after: 1\r\nContent-Length: 40\r\n\r\n"
             "{\"error\": \"busy\", \"detail\": \"all busy\"}\n",
             &r);
    assert_int_equal(r.status, 503);
    assert_string_equal(r.retry_after, "1");
    assert_int_equal(r.body_len, 40);
    assert_int_equal(h_expect_error(&r, 503, "busy"), 0);
    assert_int_equal(h_expect_error(&r, 503, "sold_out"), -1);
    h_resp_free(&r);

    exchange("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
             "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
             &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "hello world");
    h_resp_free(&r);

    exchange("HTTP/1.0 405 Method Not Allowed\r\nAllow: GET, PUT\r\n\r\nuntil eof", &r);
    assert_int_equal(r.status, 405);
    assert_string_equal(r.allow, "GET, PUT");
    assert_string_equal(r.body, "until eof");
    h_resp_free(&r);

    exchange("garbage", &r);
    assert_int_equal(r.status, -1);
    h_resp_free(&r);

    /* Nobody listening. */
    int port = h_free_port();
    assert_int_equal(h_http(port, "GET", "/", NULL, NULL, 0, &r), -1);
    h_resp_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redis_lifecycle),
        cmocka_unit_test(test_run_cmd),
        cmocka_unit_test(test_http_client),
    };
    return cmocka_run_group_tests_name("harness", tests, NULL, NULL);
}
