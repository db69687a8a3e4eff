/* test_log.c -- the logger (base/log.c): text and JSON lines, escaping, cut lines,
 * levels, the access log, rate-limited lines and reopening the file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"

struct fixture {
    char dir[64];
    char path[128]; /* the log file of the test */
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    strcpy(f->dir, "/tmp/test_log.XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof(f->path), "%s/inv.log", f->dir);
    char err[256];
    assert_int_equal(log_open(f->path, err, sizeof(err)), 0);
    log_set_level(LOG_INFO);
    log_set_format(LOG_TEXT);
    log_set_access(true);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    char err[256];
    assert_int_equal(log_open(NULL, err, sizeof(err)), 0); /* back to stderr */
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    assert_int_equal(system(cmd), 0);
    free(f);
    return 0;
}

/* The whole file, malloc'd ("" when missing). */
static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "r");
    char *buf = calloc(1, 1);
    size_t len = 0;
    if (fp == NULL)
        return buf;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), fp)) > 0) {
        buf = realloc(buf, len + n + 1);
        memcpy(buf + len, chunk, n);
        len += n;
        buf[len] = '\0';
    }
    fclose(fp);
    return buf;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s != '\0'; s++)
        n += *s == '\n';
    return n;
}

/* Every line of `text` must be one JSON object with ts, level and msg strings; returns
 * them as a new array. */
static json_t *json_lines(const char *text)
{
    json_t *all = json_array();
    const char *p = text;
    while (*p != '\0') {
        const char *nl = strchr(p, '\n');
        assert_non_null(nl); /* every line ends with a newline */
        json_error_t jerr;
        json_t *o = json_loadb(p, (size_t)(nl - p), 0, &jerr);
        if (o == NULL)
            fail_msg("not JSON (%s): %.*s", jerr.text, (int)(nl - p), p);
        assert_true(json_is_object(o));
        assert_true(json_is_string(json_object_get(o, "ts")));
        assert_true(json_is_string(json_object_get(o, "level")));
        assert_true(json_is_string(json_object_get(o, "msg")));
        json_array_append_new(all, o);
        p = nl + 1;
    }
    return all;
}

static void text_lines(void **state)
{
    struct fixture *f = *state;
    log_info("hello %d", 3);
    log_warn("two\nlines\tand a \x01 control");
    struct log_field fields[] = {
        LOGF_STR("sku", "tv"),  LOGF_STR("quoted", "two words"),
        LOGF_STR("empty", ""),  LOGF_STR("eq", "a=b \"q\" \\"),
        LOGF_INT("qty", -42),   LOGF_DBL("ms", 1.23456),
        LOGF_BOOL("ok", true),  LOGF_STR("none", NULL),
        LOGF_STR("nl", "x\ny"),
    };
    log_fields(LOG_ERROR, "fields", fields, sizeof(fields) / sizeof(fields[0]));
    char *out = slurp(f->path);
    assert_int_equal(count_lines(out), 3);
    /* 2024-01-31T12:00:00.123Z INFO hello 3 */
    assert_int_equal(strlen(out) > 25, 1);
    assert_true(out[4] == '-' && out[10] == 'T' && out[19] == '.' && out[23] == 'Z');
    assert_true(strncmp(out + 24, " INFO hello 3\n", 14) == 0);
    assert_non_null(strstr(out, " WARN two\\nlines\\tand a \\x01 control\n"));
    assert_non_null(strstr(out, " ERROR fields sku=tv quoted=\"two words\" empty=\"\" "
                                "eq=\"a=b \\\"q\\\" \\\\\" qty=-42 ms=1.235 ok=true "
                                "none=- nl=\"x\\ny\"\n"));
    free(out);
}

static void levels(void **state)
{
    struct fixture *f = *state;
    assert_true(log_enabled(LOG_INFO));
    assert_false(log_enabled(LOG_DEBUG));
    log_debug("hidden debug");
    log_set_level(LOG_WARN);
    log_info("hidden info");
    log_warn("shown warn");
    struct log_field one[] = {LOGF_INT("n", 1)};
    log_fields(LOG_INFO, "hidden fields", one, 1);
    log_report("shown report", one, 1); /* whatever the level */
    log_set_level(LOG_DEBUG);
    log_debug("shown debug");
    char *out = slurp(f->path);
    assert_null(strstr(out, "hidden"));
    assert_non_null(strstr(out, " WARN shown warn\n"));
    assert_non_null(strstr(out, " INFO shown report n=1\n"));
    assert_non_null(strstr(out, " DEBUG shown debug\n"));
    assert_int_equal(count_lines(out), 3);
    free(out);
    assert_string_equal(log_level_name(LOG_DEBUG), "debug");
    assert_string_equal(log_level_name(LOG_ERROR), "error");
    assert_string_equal(log_level_name((enum log_level)9), "?");
}

static void json_objects(void **state)
{
    struct fixture *f = *state;
    log_set_format(LOG_JSON);
    log_info("plain");
    log_error("quote \" backslash \\ newline \n tab \t del \x7f ctl \x02");
    /* valid UTF-8 kept; bytes that are not valid UTF-8 become U+FFFD */
    log_warn("utf8 \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 bad \xff \xc3 \xed\xa0\x80 "
             "\xc0\xaf end");
    struct log_field fields[] = {
        LOGF_STR("path", "/a\"b\n"), LOGF_INT("status", 201), LOGF_DBL("ms", 0.5),
        LOGF_DBL("nan", 0.0 / 0.0),  LOGF_BOOL("hit", false), LOGF_STR("none", NULL),
    };
    log_fields(LOG_INFO, "fields", fields, sizeof(fields) / sizeof(fields[0]));
    char *out = slurp(f->path);
    json_t *lines = json_lines(out);
    assert_int_equal(json_array_size(lines), 4);

    json_t *o = json_array_get(lines, 0);
    assert_string_equal(json_string_value(json_object_get(o, "level")), "info");
    assert_string_equal(json_string_value(json_object_get(o, "msg")), "plain");
    const char *ts = json_string_value(json_object_get(o, "ts"));
    assert_int_equal(strlen(ts), 24);
    assert_int_equal(ts[23], 'Z');

    o = json_array_get(lines, 1);
    assert_string_equal(json_string_value(json_object_get(o, "level")), "error");
    assert_string_equal(json_string_value(json_object_get(o, "msg")),
                        "quote \" backslash \\ newline \n tab \t del \x7f ctl \x02");

    o = json_array_get(lines, 2);
    assert_string_equal(json_string_value(json_object_get(o, "msg")),
                        "utf8 \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 bad \xef\xbf\xbd "
                        "\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd "
                        "\xef\xbf\xbd\xef\xbf\xbd end");

    o = json_array_get(lines, 3);
    assert_string_equal(json_string_value(json_object_get(o, "path")), "/a\"b\n");
    assert_int_equal(json_integer_value(json_object_get(o, "status")), 201);
    assert_true(json_real_value(json_object_get(o, "ms")) == 0.5);
    assert_true(json_is_null(json_object_get(o, "nan")));
    assert_true(json_is_false(json_object_get(o, "hit")));
    assert_true(json_is_null(json_object_get(o, "none")));
    json_decref(lines);
    free(out);
}

/* Check that `text` holds `n` lines, each cut near LOG_LINE_MAX. */
static void expect_cut_lines(const char *text, int n)
{
    assert_int_equal(count_lines(text), n);
    for (const char *p = text; *p != '\0';) {
        const char *nl = strchr(p, '\n');
        assert_true(nl - p + 1 <= LOG_LINE_MAX);
        assert_true(nl - p + 1 >= LOG_LINE_MAX - 32);
        p = nl + 1;
    }
}

/* A line longer than LOG_LINE_MAX is cut, still one line, and in JSON still one
 * object: a long message cut inside its string, fields that do not fit left out. */
static void long_lines_are_cut(void **state)
{
    struct fixture *f = *state;
    static char big[3 * LOG_LINE_MAX];
    memset(big, 'x', sizeof(big) - 1);
    for (size_t i = 0; i < sizeof(big) - 1; i += 7)
        big[i] = '"'; /* escaped as two bytes: the cut must not split one */
    static struct log_field many[200];
    static char keys[200][8];
    for (int i = 0; i < 200; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%d", i);
        many[i] = (struct log_field)LOGF_STR(keys[i], "a value with \"quotes\"");
    }
    struct log_field one[] = {LOGF_STR("v", big)};
    size_t text_len = 0;
    for (int format = LOG_TEXT; format <= LOG_JSON; format++) {
        log_set_format((enum log_format)format);
        log_info("%s", big);
        log_fields(LOG_INFO, "many", many, 200);
        log_fields(LOG_INFO, "big value", one, 1);
        char *out = slurp(f->path);
        expect_cut_lines(out + text_len, 3);
        if (format == LOG_JSON) {
            json_t *lines = json_lines(out + text_len);
            json_t *o = json_array_get(lines, 1);
            assert_non_null(json_object_get(o, "k0"));
            assert_null(json_object_get(o, "k199")); /* did not fit: left out */
            o = json_array_get(lines, 2);
            assert_true(strlen(json_string_value(json_object_get(o, "v"))) > 100);
            json_decref(lines);
        }
        text_len = strlen(out);
        free(out);
    }
}

/* On stderr that is systemd's journal ($JOURNAL_STREAM names it), each line starts
 * with its syslog priority; on a file, or when stderr is something else, it does not. */
static void journal_priorities(void **state)
{
    struct fixture *f = *state;
    char jpath[160], err[256], env[64];
    snprintf(jpath, sizeof jpath, "%s/journal", f->dir);
    int jfd = open(jpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(jfd >= 0);
    struct stat st;
    assert_int_equal(fstat(jfd, &st), 0);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(jfd, STDERR_FILENO) >= 0);
    close(jfd);

    /* stderr is not the stream named: no prefix. */
    assert_int_equal(setenv("JOURNAL_STREAM", "1:2", 1), 0);
    assert_int_equal(log_open(NULL, err, sizeof err), 0);
    log_info("plain");
    snprintf(env, sizeof env, "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    assert_int_equal(setenv("JOURNAL_STREAM", env, 1), 0);
    assert_int_equal(log_open(NULL, err, sizeof err), 0);
    log_set_level(LOG_DEBUG);
    log_debug("d");
    log_info("i");
    log_warn("w");
    log_error("e");
    log_access(&(struct log_access_line){.method = "GET", .path = "/", .status = 200});
    log_set_format(LOG_JSON);
    log_warn("jw");
    log_set_format(LOG_TEXT);
    /* Back to a file: no prefix there. */
    assert_int_equal(log_open(f->path, err, sizeof err), 0);
    log_warn("in the file");
    assert_int_equal(unsetenv("JOURNAL_STREAM"), 0);
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);

    char *out = slurp(jpath);
    assert_non_null(strstr(out, " INFO plain\n"));
    assert_true(out[0] != '<'); /* the first line is plain */
    assert_non_null(strstr(out, "\n<7>"));
    assert_non_null(strstr(out, " DEBUG d\n"));
    assert_non_null(strstr(out, "\n<6>"));
    assert_non_null(strstr(out, "\n<4>"));
    assert_non_null(strstr(out, "\n<3>"));
    assert_non_null(strstr(out, " INFO access method=GET"));
    assert_non_null(strstr(out, "\n<4>{\"ts\""));
    /* Every line of the journal part is prefixed. */
    const char *p = strstr(out, " INFO plain\n") + strlen(" INFO plain\n");
    for (; *p != '\0'; p = strchr(p, '\n') + 1)
        assert_true(p[0] == '<' && p[2] == '>');
    free(out);
    out = slurp(f->path);
    assert_non_null(strstr(out, " WARN in the file\n"));
    assert_null(strchr(out, '<'));
    free(out);
}

static void access_lines(void **state)
{
    struct fixture *f = *state;
    assert_true(log_access_enabled());
    log_set_level(LOG_ERROR); /* the access log has its own switch */
    log_access(&(struct log_access_line){.method = "GET",
                                         .path = "/orders/A-1",
                                         .status = 200,
                                         .bytes = 123,
                                         .ms = 0.4125,
                                         .request_id = "rs-1"});
    log_access(&(struct log_access_line){.method = "POST",
                                         .path = "/orders",
                                         .query = "a=1&b=x y",
                                         .status = 201,
                                         .ms = 12.0,
                                         .client = "127.0.0.1:4000",
                                         .user_agent = "curl/7.88.1"});
    log_set_access(false);
    log_access(
        &(struct log_access_line){.method = "GET", .path = "/hidden", .status = 200});
    log_set_access(true);
    log_set_format(LOG_JSON);
    log_access(&(struct log_access_line){.method = "DELETE",
                                         .path = "/x y\n",
                                         .status = 404,
                                         .bytes = 7,
                                         .ms = 1.5,
                                         .request_id = "",
                                         .client = "[::1]:80",
                                         .user_agent = "ua \"q\""});
    char *out = slurp(f->path);
    assert_null(strstr(out, "hidden"));
    assert_non_null(strstr(out, " INFO access method=GET path=/orders/A-1 status=200 "
                                "bytes=123 ms=0.412 request_id=rs-1\n"));
    assert_non_null(strstr(out,
                           " INFO access method=POST path=/orders query=\"a=1&b=x y\" "
                           "status=201 bytes=0 ms=12.000 client=127.0.0.1:4000 "
                           "user_agent=curl/7.88.1\n"));
    json_t *lines = json_lines(strchr(strstr(out, "ms=12.000"), '\n') + 1);
    assert_int_equal(json_array_size(lines), 1);
    json_t *o = json_array_get(lines, 0);
    assert_string_equal(json_string_value(json_object_get(o, "msg")), "access");
    assert_string_equal(json_string_value(json_object_get(o, "method")), "DELETE");
    assert_string_equal(json_string_value(json_object_get(o, "path")), "/x y\n");
    assert_int_equal(json_integer_value(json_object_get(o, "status")), 404);
    assert_int_equal(json_integer_value(json_object_get(o, "bytes")), 7);
    assert_true(json_real_value(json_object_get(o, "ms")) == 1.5);
    assert_null(json_object_get(o, "request_id"));
    assert_null(json_object_get(o, "query"));
    assert_string_equal(json_string_value(json_object_get(o, "client")), "[::1]:80");
    assert_string_equal(json_string_value(json_object_get(o, "user_agent")), "ua \"q\"");
    json_decref(lines);
    free(out);
}

struct burst {
    const char *key;
    int calls;
};

static void *burst_thread(void *arg)
{
    const struct burst *b = arg;
    for (int i = 0; i < b->calls; i++)
        log_ratelimited(b->key, LOG_WARN, "redis down (%d)", i);
    return NULL;
}

/* Sum of the suppressed=N counts in `text`. */
static long long suppressed_total(const char *text)
{
    long long sum = 0;
    for (const char *p = text; (p = strstr(p, "suppressed=")) != NULL; p++)
        sum += atoll(p + strlen("suppressed="));
    return sum;
}

static void rate_limited(void **state)
{
    struct fixture *f = *state;
    /* 8 threads x 500 calls under one key within a second: one line. */
    struct burst b = {"redis.connect", 500};
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        assert_int_equal(pthread_create(&t[i], NULL, burst_thread, &b), 0);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    log_ratelimited("other", LOG_WARN, "another key"); /* keys are independent */
    log_set_level(LOG_ERROR);
    log_ratelimited("redis.connect", LOG_WARN, "below the level: not even counted");
    log_set_level(LOG_INFO);
    char *out = slurp(f->path);
    int first = count_lines(out);
    assert_true(first >= 2 && first <= 3); /* 3 if the burst straddled a second */
    assert_non_null(strstr(out, " WARN another key\n"));
    free(out);

    usleep(1100 * 1000);
    log_ratelimited("redis.connect", LOG_WARN, "redis down again");
    out = slurp(f->path);
    /* every call is accounted for: written or counted in a later line */
    assert_int_equal(count_lines(out) - 1 + suppressed_total(out), 4000 + 1);
    assert_non_null(strstr(out, " WARN redis down again suppressed="));
    assert_null(strstr(out, "not even counted"));
    free(out);

    /* More keys than the table holds: still one line per key per second. */
    for (int i = 0; i < LOG_RL_KEYS + 10; i++) {
        char key[32];
        snprintf(key, sizeof(key), "key-%d", i);
        log_ratelimited(key, LOG_ERROR, "failure %d", i);
        log_ratelimited(key, LOG_ERROR, "failure %d repeated", i);
    }
    log_ratelimited("", LOG_ERROR, "empty key");
    log_ratelimited(NULL, LOG_ERROR, "empty key repeated"); /* the same key: "-" */
    out = slurp(f->path);
    assert_non_null(strstr(out, " ERROR empty key\n"));
    assert_non_null(strstr(out, " ERROR failure 73\n"));
    assert_null(strstr(out, "repeated"));
    free(out);
}

struct writer {
    int lines;
};

static void *writer_thread(void *arg)
{
    const struct writer *w = arg;
    for (int i = 0; i < w->lines; i++)
        log_info("writer line %d of a test of reopening while writing", i);
    return NULL;
}

static void reopen(void **state)
{
    struct fixture *f = *state;
    char err[256], moved[160];
    snprintf(moved, sizeof(moved), "%s.1", f->path);
    log_info("before rotation");
    assert_int_equal(rename(f->path, moved), 0);
    log_info("after rename, before reopen"); /* still the old file */
    assert_int_equal(log_open(f->path, err, sizeof(err)), 0);
    log_info("after reopen");
    char *old = slurp(moved), *now = slurp(f->path);
    assert_non_null(strstr(old, "before rotation"));
    assert_non_null(strstr(old, "after rename, before reopen"));
    assert_null(strstr(old, "after reopen"));
    assert_non_null(strstr(now, "after reopen"));
    assert_int_equal(count_lines(now), 1);
    free(old);
    free(now);

    /* Rotating 10 times while 4 threads write: no line lost or torn. */
    unlink(moved);
    assert_int_equal(truncate(f->path, 0), 0);
    struct writer w = {2000};
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, writer_thread, &w), 0);
    for (int i = 0; i < 10; i++) {
        char name[200];
        snprintf(name, sizeof(name), "%s.r%d", f->path, i);
        usleep(500);
        assert_int_equal(rename(f->path, name), 0);
        assert_int_equal(log_open(f->path, err, sizeof(err)), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    int total = 0;
    for (int i = 0; i <= 10; i++) {
        char name[200];
        snprintf(name, sizeof(name), i < 10 ? "%s.r%d" : "%s", f->path, i);
        char *text = slurp(name);
        total += count_lines(text);
        for (const char *p = text; *p != '\0'; p = strchr(p, '\n') + 1) {
            const char *nl = strchr(p, '\n');
            static const char tail[] = "of a test of reopening while writing";
            assert_true(nl - p > (long)sizeof(tail));
            assert_memory_equal(nl - (sizeof(tail) - 1), tail, sizeof(tail) - 1);
        }
        free(text);
    }
    assert_int_equal(total, 4 * 2000);

    /* A file that cannot be opened: -1, the output unchanged. */
    char bad[200];
    snprintf(bad, sizeof(bad), "%s/no/such/dir/x.log", f->dir);
    assert_int_equal(log_open(bad, err, sizeof(err)), -1);
    assert_non_null(strstr(err, bad));
    log_info("still here");
    now = slurp(f->path);
    assert_non_null(strstr(now, "still here"));
    free(now);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(text_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(levels, setup, teardown),
        cmocka_unit_test_setup_teardown(json_objects, setup, teardown),
        cmocka_unit_test_setup_teardown(long_lines_are_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(access_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(rate_limited, setup, teardown),
        cmocka_unit_test_setup_teardown(reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(journal_priorities, setup, teardown),
    };
    return cmocka_run_group_tests_name("log", tests, NULL, NULL);
}
