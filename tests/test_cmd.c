/* test_cmd.c -- a command's encoding (segments/redis/cmd.c) against hiredis's own
 * formatter: the seam encodes each key and argument as it is added and hands hiredis
 * the finished bytes, so those bytes must be exactly what redisFormatCommandArgv makes
 * of the same vector -- plain commands, EVALSHA, EVAL with the source, numbers
 * (negative, zero, the extremes), empty and binary-free long strings, many arguments,
 * and a command formatted twice (a resend after NOSCRIPT or a redirect).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/redis/cmd.h"
#include "segments/redis/scripts.h"
#include "segments/redis/slots.h"

/* What hiredis makes of argv[0..argc): malloc'd, *len set. */
static char *hiredis_bytes(int argc, const char **argv, size_t *len)
{
    char *out = NULL;
    int n = redisFormatCommandArgv(&out, argc, argv, NULL);
    assert_true(n > 0);
    *len = (size_t)n;
    return out;
}

static void same(struct rd_cmd *c, const char *sha, int argc, const char **argv)
{
    const char *got;
    size_t got_len = cmd_format(c, sha, &got);
    size_t want_len;
    char *want = hiredis_bytes(argc, argv, &want_len);
    assert_int_equal(got_len, want_len);
    assert_memory_equal(got, want, want_len);
    free(want);
}

static void plain_commands(void **state)
{
    (void)state;
    struct rd_cmd c;
    cmd_plain(&c, "PING");
    same(&c, NULL, 1, (const char *[]){"PING"});
    cmd_free(&c);

    cmd_plain(&c, "SET");
    cmd_key(&c, "inv:{tv:3}:lock");
    cmd_arg(&c, "tok");
    cmd_arg(&c, "NX");
    cmd_arg(&c, "PX");
    cmd_argll(&c, 3000);
    cmd_arg(&c, "");
    same(&c, NULL, 7,
         (const char *[]){"SET", "inv:{tv:3}:lock", "tok", "NX", "PX", "3000", ""});
    assert_int_equal(c.slot, rd_key_slot("inv:{tv:3}:lock", strlen("inv:{tv:3}:lock")));
    cmd_free(&c);
}

static void numbers(void **state)
{
    (void)state;
    const long long v[] = {
        0, 1, -1, 9, 10, -10, 123456789, 9007199254740991LL, LLONG_MAX, LLONG_MIN};
    char text[10][32];
    const char *argv[11] = {"ECHO"};
    struct rd_cmd c;
    cmd_plain(&c, "ECHO");
    for (int i = 0; i < 10; i++) {
        cmd_argll(&c, v[i]);
        snprintf(text[i], sizeof text[i], "%lld", v[i]);
        argv[i + 1] = text[i];
    }
    same(&c, NULL, 11, argv);
    cmd_free(&c);
}

/* A script call: EVALSHA when a SHA is known, EVAL with its source when not; the same
 * command formatted again and again (a resend) gives the same bytes each time. */
static void scripts(void **state)
{
    (void)state;
    const char *sha = "0123456789abcdef0123456789abcdef01234567";
    const char *src = script_source(SCRIPT_RELEASE);
    struct rd_cmd c;
    cmd_script(&c, SCRIPT_RELEASE);
    cmd_key(&c, "inv:{tv:0}:lock");
    cmd_arg(&c, "token");
    for (int round = 0; round < 3; round++) {
        same(&c, sha, 5,
             (const char *[]){"EVALSHA", sha, "1", "inv:{tv:0}:lock", "token"});
        same(&c, NULL, 5, (const char *[]){"EVAL", src, "1", "inv:{tv:0}:lock", "token"});
        same(&c, "", 5, (const char *[]){"EVAL", src, "1", "inv:{tv:0}:lock", "token"});
    }
    cmd_free(&c);
}

/* Enough arguments, and long ones, to grow the buffer several times; 12 keys. */
static void many_and_long(void **state)
{
    (void)state;
    enum { KEYS = 12, ARGS = 300 };
    static char text[KEYS + ARGS][64];
    static char big[5000];
    memset(big, 'x', sizeof big - 1);
    const char *argv[3 + KEYS + ARGS + 1];
    const char *sha = "fedcba9876543210fedcba9876543210fedcba98";
    argv[0] = "EVALSHA";
    argv[1] = sha;
    argv[2] = "12";
    struct rd_cmd c;
    cmd_script(&c, SCRIPT_DEDUCT);
    for (int i = 0; i < KEYS; i++) {
        snprintf(text[i], sizeof text[i], "inv:{sku:%d}:k%d", i, i);
        cmd_key(&c, text[i]);
        argv[3 + i] = text[i];
    }
    for (int i = 0; i < ARGS; i++) {
        snprintf(text[KEYS + i], sizeof text[0], "arg-%d", i * 7919);
        cmd_arg(&c, text[KEYS + i]);
        argv[3 + KEYS + i] = text[KEYS + i];
    }
    cmd_arg(&c, big);
    argv[3 + KEYS + ARGS] = big;
    same(&c, sha, 3 + KEYS + ARGS + 1, argv);
    assert_int_equal(c.nkeys, KEYS);
    cmd_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plain_commands),
        cmocka_unit_test(numbers),
        cmocka_unit_test(scripts),
        cmocka_unit_test(many_and_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
