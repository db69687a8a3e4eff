/* test_config.c -- configuration precedence (defaults < file < env < flags) and errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "service/config.h"

/* Each test runs in a fresh temporary directory, so the default config path
 * (config/inventoryd.json, relative) is absent unless a test writes it. The system
 * file of the search path is replaced by etc/inventoryd.json in that directory, so
 * the machine's /etc/inventoryd (an installed package) cannot change the results. */
static const char *const search[] = {CFG_DEFAULT_PATH, "etc/inventoryd.json", NULL};

struct fixture {
    char olddir[1024];
    char dir[64];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_non_null(getcwd(f->olddir, sizeof(f->olddir)));
    strcpy(f->dir, "/tmp/test_config.XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    assert_int_equal(chdir(f->dir), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    unlink("config/inventoryd.json");
    rmdir("config/inventoryd.json"); /* one test makes it a directory */
    rmdir("config");
    unlink("etc/inventoryd.json");
    rmdir("etc");
    unlink("c.json");
    unlink("d.json");
    assert_int_equal(chdir(f->olddir), 0);
    rmdir(f->dir);
    free(f);
    return 0;
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* Load with a NULL-terminated list of arguments after argv[0]. */
#define LOAD(envp, c, err, ...)                                                          \
    load((const char *const[]){"inventoryd", __VA_ARGS__}, envp, c, err)
static int load(const char *const *args, const char *const *envp, struct cfg *c,
                char *err)
{
    int argc = 0;
    while (args[argc] != NULL)
        argc++;
    /* cfg_load takes main()'s types; it never writes through them. */
    return cfg_load_search(argc, (char *const *)args, (char *const *)envp, search, c, err,
                           512);
}

/* Expect a load error whose message contains `needle`. */
static void expect_error(const char *const *args, const char *const *envp,
                         const char *needle)
{
    struct cfg c;
    char err[512];
    assert_int_equal(load(args, envp, &c, err), -1);
    if (strstr(err, needle) == NULL)
        fail_msg("error '%s' does not mention '%s'", err, needle);
    assert_null(strchr(err, '\n'));
}

static void defaults_without_a_file(void **state)
{
    (void)state;
    struct cfg c;
    char err[512];
    assert_int_equal(LOAD(NULL, &c, err, NULL), 0);
    assert_string_equal(c.bind, "127.0.0.1");
    assert_int_equal(c.port, 8080);
    assert_string_equal(c.redis_host, "127.0.0.1");
    assert_int_equal(c.redis_port, 6379);
    assert_int_equal(c.threads, (int)sysconf(_SC_NPROCESSORS_ONLN));
    assert_int_equal(c.lock_ttl_ms, 3000);
    assert_int_equal(c.lock_wait_ms, 2000);
    assert_int_equal(c.redis_timeout_ms, 1000);
    assert_int_equal(c.meta_cache_ms, 100);
    assert_int_equal(c.durability, CFG_DURABILITY_ASYNC);
    assert_int_equal(c.max_connections, 10000);
    assert_int_equal(c.connection_timeout_s, 30);
    assert_int_equal(c.max_body_bytes, 65536);
    assert_string_equal(c.admin_token, "");
    assert_string_equal(c.config_path, "");
    assert_int_equal(c.log_level, LOG_INFO);
    assert_int_equal(c.log_format, LOG_TEXT);
    assert_string_equal(c.log_file, "");
    assert_true(c.access_log);
    assert_false(c.help);
    assert_false(c.version);
}

static void default_file_is_read_when_present(void **state)
{
    (void)state;
    assert_int_equal(system("mkdir -p config"), 0);
    write_file("config/inventoryd.json", "{\"port\": 9000, \"threads\": 8}");
    struct cfg c;
    char err[512];
    assert_int_equal(LOAD(NULL, &c, err, NULL), 0);
    assert_int_equal(c.port, 9000);
    assert_int_equal(c.threads, 8);
    assert_string_equal(c.config_path, CFG_DEFAULT_PATH);
}

static void file_then_env_then_flag(void **state)
{
    (void)state;
    write_file("c.json", "{\"port\": 9001, \"lock_ttl_ms\": 5000, \"redis\": \"r1:1\","
                         " \"bind\": \"127.0.0.2\", \"admin_token\": \"file\"}");
    const char *env[] = {"INVENTORY_PORT=9002", "INVENTORY_REDIS=r2:2",
                         "INVENTORY_ADMIN_TOKEN=env", "UNRELATED=1", NULL};
    struct cfg c;
    char err[512];

    assert_int_equal(LOAD(NULL, &c, err, "--config", "c.json", NULL), 0);
    assert_int_equal(c.port, 9001);
    assert_int_equal(c.lock_ttl_ms, 5000);
    assert_string_equal(c.redis_host, "r1");
    assert_int_equal(c.redis_port, 1);
    assert_string_equal(c.bind, "127.0.0.2");
    assert_string_equal(c.admin_token, "file");
    assert_string_equal(c.config_path, "c.json");

    assert_int_equal(LOAD(env, &c, err, "--config", "c.json", NULL), 0);
    assert_int_equal(c.port, 9002);
    assert_int_equal(c.lock_ttl_ms, 5000); /* not overridden: the file's value stays */
    assert_string_equal(c.redis_host, "r2");
    assert_string_equal(c.admin_token, "env");

    assert_int_equal(LOAD(env, &c, err, "--config", "c.json", "--port", "9003",
                          "--redis=r3:3", "--admin-token", "flag", NULL),
                     0);
    assert_int_equal(c.port, 9003);
    assert_string_equal(c.redis_host, "r3");
    assert_int_equal(c.redis_port, 3);
    assert_string_equal(c.admin_token, "flag");
}

static void every_flag_and_env_var(void **state)
{
    (void)state;
    const char *env[] = {"INVENTORY_BIND=::1",
                         "INVENTORY_THREADS=3",
                         "INVENTORY_LOCK_TTL_MS=400",
                         "INVENTORY_LOCK_WAIT_MS=0",
                         "INVENTORY_REDIS_TIMEOUT_MS=250",
                         NULL};
    struct cfg c;
    char err[512];
    assert_int_equal(LOAD(env, &c, err, NULL), 0);
    assert_string_equal(c.bind, "::1");
    assert_true(cfg_bind_is_loopback(&c));
    assert_int_equal(c.threads, 3);
    assert_int_equal(c.lock_ttl_ms, 400);
    assert_int_equal(c.lock_wait_ms, 0);
    assert_int_equal(c.redis_timeout_ms, 250);

    assert_int_equal(LOAD(env, &c, err, "--bind", "127.0.0.1", "--threads", "1024",
                          "--lock-ttl-ms", "600000", "--lock-wait-ms=600000",
                          "--redis-timeout-ms", "10", "--redis", "[::1]:7000", NULL),
                     0);
    assert_string_equal(c.bind, "127.0.0.1");
    assert_int_equal(c.threads, 1024);
    assert_int_equal(c.lock_ttl_ms, 600000);
    assert_int_equal(c.lock_wait_ms, 600000);
    assert_int_equal(c.redis_timeout_ms, 10);
    assert_string_equal(c.redis_host, "::1");
    assert_int_equal(c.redis_port, 7000);
    assert_string_equal(c.redis_seeds, "");
    assert_false(c.redis_cluster);

    /* Cluster seeds: the first becomes host:port, the rest are kept as given. */
    assert_int_equal(LOAD(env, &c, err, "--redis", "10.0.0.1:7000,[::1]:7001,h:7002",
                          "--redis-cluster", "true", NULL),
                     0);
    assert_string_equal(c.redis_host, "10.0.0.1");
    assert_int_equal(c.redis_port, 7000);
    assert_string_equal(c.redis_seeds, "[::1]:7001,h:7002");
    assert_true(c.redis_cluster);
}

static void file_only_keys(void **state)
{
    (void)state;
    write_file("c.json", "{\"meta_cache_ms\": 0, \"max_connections\": 20000,"
                         " \"connection_timeout_s\": 0, \"max_body_bytes\": 1024,"
                         " \"redis_timeout_ms\": 50}");
    struct cfg c;
    char err[512];
    assert_int_equal(LOAD(NULL, &c, err, "--config", "c.json", NULL), 0);
    assert_int_equal(c.meta_cache_ms, 0);
    assert_int_equal(c.max_connections, 20000);
    assert_int_equal(c.connection_timeout_s, 0);
    assert_int_equal(c.max_body_bytes, 1024);
    assert_int_equal(c.redis_timeout_ms, 50);
}

static void log_settings_file_env_flag(void **state)
{
    (void)state;
    write_file("c.json", "{\"log_level\": \"warn\", \"log_format\": \"json\","
                         " \"log_file\": \"/var/log/inv.log\", \"access_log\": false}");
    struct cfg c;
    char err[512];
    assert_int_equal(LOAD(NULL, &c, err, "--config", "c.json", NULL), 0);
    assert_int_equal(c.log_level, LOG_WARN);
    assert_int_equal(c.log_format, LOG_JSON);
    assert_string_equal(c.log_file, "/var/log/inv.log");
    assert_false(c.access_log);

    const char *env[] = {"INVENTORY_LOG_LEVEL=ERROR", "INVENTORY_LOG_FORMAT=text",
                         "INVENTORY_LOG_FILE=-", "INVENTORY_ACCESS_LOG=true", NULL};
    assert_int_equal(LOAD(env, &c, err, "--config", "c.json", NULL), 0);
    assert_int_equal(c.log_level, LOG_ERROR); /* case does not matter */
    assert_int_equal(c.log_format, LOG_TEXT);
    assert_string_equal(c.log_file, ""); /* "-": stderr */
    assert_true(c.access_log);

    assert_int_equal(LOAD(env, &c, err, "--config", "c.json", "--log-level", "debug",
                          "--log-format=json", "--log-file", "rel/inv.log",
                          "--access-log", "False", NULL),
                     0);
    assert_int_equal(c.log_level, LOG_DEBUG);
    assert_int_equal(c.log_format, LOG_JSON);
    assert_string_equal(c.log_file, "rel/inv.log");
    assert_false(c.access_log);

    const char *levels[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(LOAD(NULL, &c, err, "--log-level", levels[i], NULL), 0);
        assert_int_equal(c.log_level, i);
        assert_string_equal(log_level_name(c.log_level), levels[i]);
    }
}

static void log_settings_errors(void **state)
{
    (void)state;
    static const struct {
        const char *text, *needle;
    } files[] = {
        {"{\"log_level\": \"loud\"}",
         "log_level: must be one of debug|info|warn|error, got 'loud'"},
        {"{\"log_level\": 1}", "log_level: must be a string"},
        {"{\"log_format\": \"xml\"}", "log_format: must be one of text|json"},
        {"{\"log_file\": \"\"}", "log_file: must be a file path, or - for stderr"},
        {"{\"log_file\": \"a\\nb\"}", "log_file: control character"},
        {"{\"log_file\": false}", "log_file: must be a string"},
        {"{\"access_log\": \"true\"}", "access_log: must be true or false"},
        {"{\"access_log\": 1}", "access_log: must be true or false"},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        write_file("c.json", files[i].text);
        expect_error((const char *const[]){"inventoryd", "--config", "c.json", NULL},
                     NULL, files[i].needle);
    }
    static const char *const envs[] = {
        "INVENTORY_LOG_LEVEL=verbose", "INVENTORY_LOG_LEVEL=",
        "INVENTORY_LOG_FORMAT=logfmt", "INVENTORY_LOG_FILE=",
        "INVENTORY_ACCESS_LOG=1",      "INVENTORY_ACCESS_LOG=",
    };
    for (size_t i = 0; i < sizeof(envs) / sizeof(envs[0]); i++) {
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)strcspn(envs[i], "="), envs[i]);
        const char *env[] = {envs[i], NULL};
        expect_error((const char *const[]){"inventoryd", NULL}, env, name);
    }
    expect_error((const char *const[]){"inventoryd", "--log-level", "trace", NULL}, NULL,
                 "--log-level: must be one of debug|info|warn|error, got 'trace'");
    expect_error((const char *const[]){"inventoryd", "--log-format", NULL}, NULL,
                 "--log-format: missing value");
    expect_error((const char *const[]){"inventoryd", "--log-file=", NULL}, NULL,
                 "--log-file");
    expect_error((const char *const[]){"inventoryd", "--access-log", "on", NULL}, NULL,
                 "--access-log: must be true or false, got 'on'");
}

static void durability_file_env_flag(void **state)
{
    (void)state;
    write_file("c.json", "{\"durability\": \"replicated\"}");
    struct cfg c;
    char err[512];
    assert_int_equal(LOAD(NULL, &c, err, "--config", "c.json", NULL), 0);
    assert_int_equal(c.durability, CFG_DURABILITY_REPLICATED);
    const char *env[] = {"INVENTORY_DURABILITY=async", NULL};
    assert_int_equal(LOAD(env, &c, err, "--config", "c.json", NULL), 0);
    assert_int_equal(c.durability, CFG_DURABILITY_ASYNC);
    assert_int_equal(
        LOAD(env, &c, err, "--config", "c.json", "--durability", "replicated", NULL), 0);
    assert_int_equal(c.durability, CFG_DURABILITY_REPLICATED);
    assert_int_equal(LOAD(NULL, &c, err, "--durability=async", NULL), 0);
    assert_int_equal(c.durability, CFG_DURABILITY_ASYNC);

    write_file("c.json", "{\"durability\": \"sync\"}");
    expect_error((const char *const[]){"inventoryd", "--config", "c.json", NULL}, NULL,
                 "durability: must be one of async|replicated, got 'sync'");
    write_file("c.json", "{\"durability\": true}");
    expect_error((const char *const[]){"inventoryd", "--config", "c.json", NULL}, NULL,
                 "durability: must be a string");
    const char *bad_env[] = {"INVENTORY_DURABILITY=", NULL};
    expect_error((const char *const[]){"inventoryd", NULL}, bad_env,
                 "INVENTORY_DURABILITY: must be one of async|replicated");
    expect_error((const char *const[]){"inventoryd", "--durability", "wait", NULL}, NULL,
                 "--durability: must be one of async|replicated, got 'wait'");
    expect_error((const char *const[]){"inventoryd", "--durability", NULL}, NULL,
                 "--durability: missing value");
}

static void config_path_from_env_and_flag(void **state)
{
    (void)state;
    write_file("c.json", "{\"port\": 7001}");
    write_file("d.json", "{\"port\": 7002}");
    const char *env[] = {"INVENTORY_CONFIG=c.json", NULL};
    struct cfg c;
    char err[512];
    assert_int_equal(LOAD(env, &c, err, NULL), 0);
    assert_int_equal(c.port, 7001);
    assert_int_equal(LOAD(env, &c, err, "--config", "d.json", NULL), 0);
    assert_int_equal(c.port, 7002);
    assert_string_equal(c.config_path, "d.json");
}

static void missing_explicit_file_is_an_error(void **state)
{
    (void)state;
    expect_error((const char *const[]){"inventoryd", "--config", "nope.json", NULL}, NULL,
                 "nope.json");
    const char *env[] = {"INVENTORY_CONFIG=gone.json", NULL};
    expect_error((const char *const[]){"inventoryd", NULL}, env, "gone.json");
    const char *empty[] = {"INVENTORY_CONFIG=", NULL};
    expect_error((const char *const[]){"inventoryd", NULL}, empty, "INVENTORY_CONFIG");
}

static void file_errors_name_the_key(void **state)
{
    (void)state;
    static const struct {
        const char *text, *needle;
    } cases[] = {
        {"{\"prot\": 1}", "prot: unknown key"},
        {"{\"port\": \"80\"}", "port: must be an integer"},
        {"{\"port\": 80.0}", "port: must be an integer"},
        {"{\"port\": 0}", "port: must be an integer in 1..65535"},
        {"{\"port\": 65536}", "port"},
        {"{\"threads\": 0}", "threads"},
        {"{\"threads\": 1025}", "threads"},
        {"{\"lock_ttl_ms\": 99}", "lock_ttl_ms"},
        {"{\"lock_wait_ms\": -1}", "lock_wait_ms"},
        {"{\"redis_timeout_ms\": 0}", "redis_timeout_ms"},
        {"{\"meta_cache_ms\": 60001}", "meta_cache_ms"},
        {"{\"max_connections\": 0}", "max_connections"},
        {"{\"connection_timeout_s\": -1}", "connection_timeout_s"},
        {"{\"max_body_bytes\": 1}", "max_body_bytes"},
        {"{\"bind\": 127}", "bind: must be a string"},
        {"{\"bind\": \"localhost\"}", "bind: must be a numeric"},
        {"{\"redis\": \"host\"}", "redis: must be HOST:PORT"},
        {"{\"redis\": \"host:0\"}", "redis: port"},
        {"{\"redis\": \":6379\"}", "redis"},
        {"{\"admin_token\": \"a b\"}", "admin_token"},
        {"{\"admin_token\": null}", "admin_token: must be a string"},
        {"{\"port\": 1, \"port\": 2}", "c.json"},
        {"{\"port\": 1", "c.json:1"},
        {"[1]", "must hold a JSON object"},
        {"", "c.json"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_file("c.json", cases[i].text);
        expect_error((const char *const[]){"inventoryd", "--config", "c.json", NULL},
                     NULL, cases[i].needle);
    }
}

static void env_errors_name_the_variable(void **state)
{
    (void)state;
    static const char *const cases[] = {
        "INVENTORY_PORT=abc",
        "INVENTORY_PORT=",
        "INVENTORY_PORT= 80",
        "INVENTORY_PORT=80x",
        "INVENTORY_PORT=99999999999999999999",
        "INVENTORY_BIND=nowhere",
        "INVENTORY_REDIS=h:p",
        "INVENTORY_THREADS=0",
        "INVENTORY_LOCK_TTL_MS=600001",
        "INVENTORY_LOCK_WAIT_MS=-5",
        "INVENTORY_REDIS_TIMEOUT_MS=x",
        "INVENTORY_ADMIN_TOKEN=has space",
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)strcspn(cases[i], "="), cases[i]);
        const char *env[] = {(char *)cases[i], NULL};
        expect_error((const char *const[]){"inventoryd", NULL}, env, name);
    }
}

static void flag_errors_name_the_flag(void **state)
{
    (void)state;
    expect_error((const char *const[]){"inventoryd", "--port", "x", NULL}, NULL,
                 "--port");
    expect_error((const char *const[]){"inventoryd", "--port", NULL}, NULL,
                 "--port: missing value");
    expect_error((const char *const[]){"inventoryd", "--threads=0", NULL}, NULL,
                 "--threads");
    expect_error((const char *const[]){"inventoryd", "--lock-ttl-ms", "50", NULL}, NULL,
                 "--lock-ttl-ms");
    expect_error((const char *const[]){"inventoryd", "--lock-wait-ms", "600001", NULL},
                 NULL, "--lock-wait-ms");
    expect_error((const char *const[]){"inventoryd", "--redis", "nocolon", NULL}, NULL,
                 "--redis");
    expect_error((const char *const[]){"inventoryd", "--redis", "a:1,b", NULL}, NULL,
                 "--redis: must be HOST:PORT, got 'b'");
    expect_error((const char *const[]){"inventoryd", "--redis", "a:1,b:2,", NULL}, NULL,
                 "--redis: empty seed");
    expect_error((const char *const[]){"inventoryd", "--redis-cluster", "yes", NULL},
                 NULL, "--redis-cluster");
    expect_error((const char *const[]){"inventoryd", "--bind", "1.2.3", NULL}, NULL,
                 "--bind");
    expect_error((const char *const[]){"inventoryd", "--redis-timeout-ms", "0", NULL},
                 NULL, "--redis-timeout-ms");
    expect_error((const char *const[]){"inventoryd", "--frobnicate", NULL}, NULL,
                 "--frobnicate");
    expect_error((const char *const[]){"inventoryd", "stray", NULL}, NULL, "stray");
    expect_error((const char *const[]){"inventoryd", "--help=yes", NULL}, NULL, "--help");
}

/* redis-sentinel://: the sentinels (26379 when no port), the master's name, and
 * user, password and db of the master; the sentinels' own password is a setting of
 * its own. A malformed URL is a one-line error naming what is wrong. */
static void redis_sentinel_url(void **state)
{
    (void)state;
    struct cfg c;
    char err[512];
    const char *env[] = {"INVENTORY_REDIS_SENTINEL_PASSWORD=spass", NULL};
    assert_int_equal(
        LOAD(env, &c, err, "--redis",
             "redis-sentinel://app:p%40ss@s1,10.0.0.2:26380,[::1]:5/mymaster/2", NULL),
        0);
    assert_string_equal(c.redis_sentinels, "s1:26379,10.0.0.2:26380,[::1]:5");
    assert_string_equal(c.redis_sentinel_master, "mymaster");
    assert_string_equal(c.redis_user, "app");
    assert_string_equal(c.redis_password, "p@ss");
    assert_int_equal(c.redis_db, 2);
    assert_string_equal(c.redis_sentinel_password, "spass");
    /* A later plain address replaces the Sentinel one. */
    assert_int_equal(LOAD(NULL, &c, err, "--redis", "redis-sentinel://s1:1/m", "--redis",
                          "h:6379", NULL),
                     0);
    assert_string_equal(c.redis_sentinels, "");
    assert_string_equal(c.redis_host, "h");

    const char *bad[][2] = {
        {"redis-sentinel://s1:26379,s2:26379", "needs the master's name"},
        {"redis-sentinel://s1:26379/", "needs the master's name"},
        {"redis-sentinel:///mymaster", "empty or too long sentinel address"},
        {"redis-sentinel://s1:0/m", "port must be an integer"},
        {"redis-sentinel://s1:1,/m", "empty sentinel after the last ','"},
        {"redis-sentinel://s1:1,,s2:2/m", "empty or too long sentinel address"},
        {"redis-sentinel://s1:1/my master", "the master's name must be"},
        {"redis-sentinel://s1:1/m/x", "the database must be a number"},
        {"redis-sentinel://a%zz@s1:1/m", "bad user or password"},
        {"rediss-sentinel://s1:1/m", "only redis://, redis-sentinel:// and unix://"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_error((const char *const[]){"inventoryd", "--redis", bad[i][0], NULL},
                     NULL, bad[i][1]);
    expect_error((const char *const[]){"inventoryd", "--redis", "redis-sentinel://s1:1/m",
                                       "--redis-cluster", "true", NULL},
                 NULL, "not a Redis Cluster");
}

static void flag_beats_bad_env_only_when_valid(void **state)
{
    (void)state;
    /* A bad env value is an error even when a flag would override it: a bad value
     * anywhere is reported. */
    const char *env[] = {"INVENTORY_PORT=bad", NULL};
    expect_error((const char *const[]){"inventoryd", "--port", "8081", NULL}, env,
                 "INVENTORY_PORT");
}

static void non_loopback_needs_a_token(void **state)
{
    (void)state;
    expect_error((const char *const[]){"inventoryd", "--bind", "0.0.0.0", NULL}, NULL,
                 "bind");
    expect_error((const char *const[]){"inventoryd", "--bind", "::", NULL}, NULL,
                 "admin");
    struct cfg c;
    char err[512];
    assert_int_equal(
        LOAD(NULL, &c, err, "--bind", "0.0.0.0", "--admin-token", "s3cret", NULL), 0);
    assert_false(cfg_bind_is_loopback(&c));
    assert_int_equal(LOAD(NULL, &c, err, "--bind", "127.8.9.10", NULL), 0);
    assert_true(cfg_bind_is_loopback(&c));
}

static void search_path_is_checkout_then_system(void **state)
{
    (void)state;
    assert_string_equal(cfg_search_path[0], "config/inventoryd.json");
    assert_string_equal(cfg_search_path[1], "/etc/inventoryd/inventoryd.json");
    assert_null(cfg_search_path[2]);
}

static void system_file_when_no_local_one(void **state)
{
    (void)state;
    struct cfg c;
    char err[512];
    assert_int_equal(system("mkdir -p etc config"), 0);
    write_file("etc/inventoryd.json", "{\"port\": 9100}");
    assert_int_equal(LOAD(NULL, &c, err, NULL), 0);
    assert_int_equal(c.port, 9100);
    assert_string_equal(c.config_path, "etc/inventoryd.json");

    /* The checkout's file comes first; only one file is ever read. */
    write_file("config/inventoryd.json", "{\"threads\": 7}");
    assert_int_equal(LOAD(NULL, &c, err, NULL), 0);
    assert_int_equal(c.port, 8080);
    assert_int_equal(c.threads, 7);
    assert_string_equal(c.config_path, CFG_DEFAULT_PATH);

    /* INVENTORY_CONFIG and --config come before both. */
    write_file("c.json", "{\"port\": 7001}");
    write_file("d.json", "{\"port\": 7002}");
    const char *env[] = {"INVENTORY_CONFIG=c.json", NULL};
    assert_int_equal(LOAD(env, &c, err, NULL), 0);
    assert_string_equal(c.config_path, "c.json");
    assert_int_equal(LOAD(env, &c, err, "--config", "d.json", NULL), 0);
    assert_string_equal(c.config_path, "d.json");
    assert_int_equal(c.threads, (int)sysconf(_SC_NPROCESSORS_ONLN));
}

static void unreadable_search_file_is_an_error(void **state)
{
    (void)state;
    /* A file that exists but cannot be read is not skipped for the next one. */
    assert_int_equal(system("mkdir -p etc config/inventoryd.json"), 0);
    write_file("etc/inventoryd.json", "{\"port\": 9100}");
    expect_error((const char *const[]){"inventoryd", NULL}, NULL,
                 "config file config/inventoryd.json");
    /* A bad system file is reported like any other. */
    assert_int_equal(system("rmdir config/inventoryd.json"), 0);
    write_file("etc/inventoryd.json", "{\"port\": 0}");
    expect_error((const char *const[]){"inventoryd", NULL}, NULL,
                 "config file etc/inventoryd.json: port");
}

static void check_config_validates_everything(void **state)
{
    (void)state;
    struct cfg c;
    char err[512];
    assert_int_equal(LOAD(NULL, &c, err, "--check-config", NULL), 0);
    assert_true(c.check);
    assert_false(c.help);
    assert_int_equal(LOAD(NULL, &c, err, NULL), 0);
    assert_false(c.check);
    /* Unlike --help, it loads and checks the file, the environment and the flags. */
    write_file("c.json", "{\"threads\": 0}");
    expect_error(
        (const char *const[]){"inventoryd", "--check-config", "--config", "c.json", NULL},
        NULL, "threads");
    const char *env[] = {"INVENTORY_LOCK_TTL_MS=1", NULL};
    expect_error((const char *const[]){"inventoryd", "--check-config", NULL}, env,
                 "INVENTORY_LOCK_TTL_MS");
    expect_error(
        (const char *const[]){"inventoryd", "--check-config", "--port", "0", NULL}, NULL,
        "--port");
    expect_error(
        (const char *const[]){"inventoryd", "--check-config", "--bind", "0.0.0.0", NULL},
        NULL, "admin token");
    expect_error((const char *const[]){"inventoryd", "--check-config=yes", NULL}, NULL,
                 "--check-config: takes no value");
}

/* cfg_print() of `c` as a malloc'd string. */
static char *printed(const struct cfg *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    cfg_print(f, c);
    assert_int_equal(fclose(f), 0);
    return buf;
}

/* The store: a PostgreSQL connection string from a flag or INVENTORY_STORE, printed
 * with its password as *** (a URL's and a key=value one's). */
static void store_setting_masks_its_password(void **state)
{
    (void)state;
    struct cfg c;
    char err[512];
    assert_int_equal(
        LOAD(NULL, &c, err, "--store", "postgres://inv:s3cret@db:5432/inv", NULL), 0);
    assert_string_equal(c.store, "postgres://inv:s3cret@db:5432/inv");
    char *out = printed(&c);
    assert_non_null(
        strstr(out, "\nstore                  postgres://inv:***@db:5432/inv\n"));
    assert_null(strstr(out, "s3cret"));
    free(out);
    const char *env[] = {"INVENTORY_STORE=host=/run/pg dbname=inv password=s3cret user=u",
                         NULL};
    assert_int_equal(LOAD(env, &c, err, NULL), 0);
    out = printed(&c);
    assert_non_null(strstr(
        out, "\nstore                  host=/run/pg dbname=inv password=*** user=u\n"));
    assert_null(strstr(out, "s3cret"));
    free(out);
}

/* store_password_file: the password on its first line, after whatever the
 * connection string names (libpq takes the last): a URI's "password" query parameter,
 * percent-escaped; a quoted key=value pair. Never printed. */
static void store_password_file_joins_the_conninfo(void **state)
{
    (void)state;
    write_file("pw", "s3'c\\r%t\nsecond line\n");
    struct cfg c;
    char err[512], ci[CFG_STORE_CONNINFO_MAX];
    assert_int_equal(LOAD(NULL, &c, err, "--store", "postgres://inv@db/inv",
                          "--store-password-file", "pw", NULL),
                     0);
    assert_string_equal(c.store_password, "s3'c\\r%t");
    assert_int_equal(cfg_store_conninfo(&c, ci, sizeof ci), 0);
    assert_string_equal(ci, "postgres://inv@db/inv?password=s3%27c%5Cr%25t");
    char *out = printed(&c);
    assert_null(strstr(out, "s3'c"));
    free(out);
    const char *env[] = {"INVENTORY_STORE_PASSWORD_FILE=pw",
                         "INVENTORY_STORE=postgres://u:old@h/db?sslmode=disable", NULL};
    assert_int_equal(LOAD(env, &c, err, NULL), 0);
    assert_int_equal(cfg_store_conninfo(&c, ci, sizeof ci), 0);
    assert_string_equal(ci,
                        "postgres://u:old@h/db?sslmode=disable&password=s3%27c%5Cr%25t");
    assert_int_equal(LOAD(NULL, &c, err, "--store", "host=h dbname=d password=old",
                          "--store-password-file", "pw", NULL),
                     0);
    assert_int_equal(cfg_store_conninfo(&c, ci, sizeof ci), 0);
    assert_string_equal(ci, "host=h dbname=d password=old password='s3\\'c\\\\r%t'");
    assert_int_equal(cfg_store_conninfo(&c, ci, 20), -1); /* too small: nothing */
    assert_string_equal(ci, "");
    assert_int_equal(LOAD(NULL, &c, err, "--store", "host=h", NULL), 0);
    assert_int_equal(cfg_store_conninfo(&c, ci, sizeof ci), 0);
    assert_string_equal(ci, "host=h"); /* no file: the string as given */
    write_file("empty", "\n");
    expect_error(
        (const char *const[]){"inventoryd", "--store-password-file", "empty", NULL}, NULL,
        "store_password_file empty: the first line must hold");
    expect_error(
        (const char *const[]){"inventoryd", "--store-password-file", "none", NULL}, NULL,
        "store_password_file none: No such file");
}

/* The ledger from file, environment and flag; its password never shown. */
static void ledger_settings_and_masked_password(void **state)
{
    (void)state;
    write_file("c.json", "{\"ledger\": \"host=h password=file-pw dbname=x\", "
                         "\"record_retention_s\": 60}");
    struct cfg c;
    char err[512];
    assert_int_equal(LOAD(NULL, &c, err, "--config", "c.json", NULL), 0);
    assert_string_equal(c.ledger, "host=h password=file-pw dbname=x");
    assert_int_equal(c.record_retention_s, 60);
    char *out = printed(&c);
    assert_non_null(
        strstr(out, "\nledger                 host=h password=*** dbname=x\n"));
    assert_null(strstr(out, "file-pw"));
    free(out);
    const char *env[] = {"INVENTORY_LEDGER=postgres://u:env-pw@h/db", NULL};
    assert_int_equal(LOAD(env, &c, err, "--config", "c.json", NULL), 0);
    out = printed(&c);
    assert_non_null(strstr(out, "\nledger                 postgres://u:***@h/db\n"));
    assert_null(strstr(out, "env-pw"));
    free(out);
    assert_int_equal(LOAD(env, &c, err, "--ledger", "postgres://h/db",
                          "--record-retention-s", "1", NULL),
                     0);
    assert_string_equal(c.ledger, "postgres://h/db");
    assert_int_equal(c.record_retention_s, 1);
    assert_int_equal(LOAD(NULL, &c, err, NULL), 0);
    assert_int_equal(c.record_retention_s, 604800);
    expect_error((const char *const[]){"inventoryd", "--record-retention-s", "0", NULL},
                 NULL, "--record-retention-s: must be an integer in 1..315360000");
    assert_int_equal(LOAD(NULL, &c, err, "--reconcile", "tv", NULL), 0);
    assert_string_equal(c.reconcile, "tv");
    expect_error((const char *const[]){"inventoryd", "--reconcile=", NULL}, NULL,
                 "--reconcile: a SKU name of 1..64 characters");
}

static void print_shows_effective_values_and_masks_secrets(void **state)
{
    (void)state;
    write_file("c.json", "{\"port\": 9001, \"admin_token\": \"file-secret\"}");
    const char *env[] = {"INVENTORY_ADMIN_TOKEN=env-secret", NULL};
    struct cfg c;
    char err[512];
    assert_int_equal(LOAD(env, &c, err, "--config", "c.json", "--redis", "[::1]:7000",
                          "--threads", "5", NULL),
                     0);
    char *out = printed(&c);
    assert_non_null(strstr(out, "config file: c.json (")); /* and its absolute path */
    assert_non_null(strstr(out, "\nport                   9001\n"));
    assert_non_null(strstr(out, "\nthreads                5\n"));
    assert_non_null(strstr(out, "\nredis                  [::1]:7000\n"));
    assert_non_null(strstr(out, "\nadmin_token            ***\n"));
    assert_null(strstr(out, "secret"));
    /* Every file key once, so the listing can be compared with a config file. */
    /* clang-format off */
    static const char *const keys[] = {
        "bind", "port", "redis", "threads", "lock_ttl_ms", "lock_wait_ms",
        "redis_timeout_ms", "meta_cache_ms", "admin_token", "max_connections",
        "connection_timeout_s", "max_body_bytes", "log_level", "log_format",
        "log_file", "access_log", "durability"};
    /* clang-format on */
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        char line[64];
        snprintf(line, sizeof(line), "\n%s ", keys[i]);
        const char *at = strstr(out, line);
        if (at == NULL)
            fail_msg("no line for %s in:\n%s", keys[i], out);
        assert_null(strstr(at + 1, line));
    }
    free(out);

    assert_int_equal(LOAD(NULL, &c, err, NULL), 0);
    out = printed(&c);
    assert_non_null(strstr(out, "config file: none"));
    assert_non_null(strstr(out, "\nadmin_token            (none)\n"));
    assert_non_null(strstr(out, "\nredis                  127.0.0.1:6379\n"));
    assert_non_null(strstr(out, "\nlog_level              info\n"));
    assert_non_null(strstr(out, "\nlog_format             text\n"));
    assert_non_null(strstr(out, "\nlog_file               (stderr)\n"));
    assert_non_null(strstr(out, "\naccess_log             true\n"));
    assert_non_null(strstr(out, "\ndurability             async\n"));
    free(out);

    assert_int_equal(LOAD(NULL, &c, err, "--log-level", "warn", "--log-format", "json",
                          "--log-file", "/tmp/x.log", "--access-log", "false", NULL),
                     0);
    out = printed(&c);
    assert_non_null(strstr(out, "\nlog_level              warn\n"));
    assert_non_null(strstr(out, "\nlog_format             json\n"));
    assert_non_null(strstr(out, "\nlog_file               /tmp/x.log\n"));
    assert_non_null(strstr(out, "\naccess_log             false\n"));
    free(out);
}

/* cfg_foreach() collects what a callback sees, as "key=value;" text. */
static void collect(const char *key, const struct cfg_value *v, void *arg)
{
    char *buf = arg;
    size_t n = strlen(buf);
    if (v->type == CFG_VINT)
        snprintf(buf + n, 4096 - n, "%s=%lld;", key, v->num);
    else if (v->type == CFG_VBOOL)
        snprintf(buf + n, 4096 - n, "%s=%s;", key, v->num ? "true" : "false");
    else
        snprintf(buf + n, 4096 - n, "%s='%s';", key, v->text);
}

/* The startup log line is built from cfg_foreach() and cfg_source(): the same values,
 * the same masking as --check-config; cfg_diff() names what SIGHUP cannot apply. */
static void foreach_source_and_diff(void **state)
{
    (void)state;
    write_file("c.json", "{\"threads\": 5, \"admin_token\": \"file-secret\"}");
    struct cfg a, b;
    char err[512];
    assert_int_equal(LOAD(NULL, &a, err, "--config", "c.json", NULL), 0);
    char buf[4096] = "";
    cfg_foreach(&a, collect, buf);
    assert_non_null(strstr(buf, "threads=5;"));
    assert_non_null(strstr(buf, "port=8080;"));
    assert_non_null(strstr(buf, "admin_token='***';"));
    assert_non_null(strstr(buf, "log_level='info';"));
    assert_non_null(strstr(buf, "access_log=true;"));
    assert_non_null(strstr(buf, "log_file='(stderr)';"));
    assert_null(strstr(buf, "secret"));

    char src[CFG_SOURCE_MAX];
    cfg_source(&a, src, sizeof(src));
    assert_true(strncmp(src, "c.json (/", 9) == 0);
    char tiny[8];
    cfg_source(&a, tiny, sizeof(tiny)); /* cut, terminated */
    assert_string_equal(tiny, "c.json ");
    assert_int_equal(LOAD(NULL, &b, err, NULL), 0);
    cfg_source(&b, src, sizeof(src));
    assert_non_null(strstr(src, "none (built-in defaults; tried"));

    /* b: threads and the token differ (the token is named, never shown). */
    char diff[256];
    assert_int_equal(cfg_diff(&a, &a, diff, sizeof(diff)), 0);
    assert_string_equal(diff, "");
    assert_int_equal(cfg_diff(&a, &b, diff, sizeof(diff)), 2);
    assert_string_equal(diff, "threads, admin_token");
    assert_int_equal(LOAD(NULL, &b, err, "--config", "c.json", "--log-level", "debug",
                          "--access-log", "false", NULL),
                     0);
    assert_int_equal(cfg_diff(&a, &b, diff, sizeof(diff)), 2);
    assert_string_equal(diff, "log_level, access_log");
    assert_int_equal(
        LOAD(NULL, &b, err, "--config", "c.json", "--durability", "replicated", NULL), 0);
    assert_int_equal(cfg_diff(&a, &b, diff, sizeof(diff)), 1);
    assert_string_equal(diff, "durability");
}

/* cfg_warnings: what --check-config and the start warn about (issue: a misspelt
 * INVENTORY_PROT=1 and lock_wait_ms far above lock_ttl_ms passed silently). */
struct warned {
    int n;
    char text[4][256];
};

static void collect_warning(const char *text, void *arg)
{
    struct warned *w = arg;
    if (w->n < 4)
        snprintf(w->text[w->n], sizeof w->text[0], "%s", text);
    w->n++;
}

static void warnings_for_misspelt_env_and_contradictions(void **state)
{
    (void)state;
    struct cfg c;
    char err[512];
    const char *quiet_env[] = {"INVENTORY_PORT=9000", "INVENTORY_CONFIG_X=", "HOME=/",
                               NULL};
    assert_int_equal(LOAD(NULL, &c, err, NULL), 0);
    struct warned w = {0};
    /* Defaults and known variables: nothing. INVENTORY_CONFIG_X is unknown. */
    assert_int_equal(cfg_warnings(&c, (char *const *)quiet_env, collect_warning, &w), 1);
    assert_non_null(strstr(w.text[0], "INVENTORY_CONFIG_X"));

    const char *env[] = {"INVENTORY_PROT=1", "INVENTORY_LOCK_TTL_MS=3000", NULL};
    assert_int_equal(LOAD(env, &c, err, "--lock-wait-ms", "60000", NULL), 0);
    memset(&w, 0, sizeof w);
    assert_int_equal(cfg_warnings(&c, (char *const *)env, collect_warning, &w), 3);
    assert_non_null(strstr(w.text[0], "INVENTORY_PROT"));
    assert_non_null(strstr(w.text[0], "did you mean INVENTORY_PORT"));
    assert_non_null(strstr(w.text[1], "lock_wait_ms 60000"));
    assert_non_null(strstr(w.text[2], "connection_timeout_s 30"));

    assert_int_equal(LOAD(NULL, &c, err, "--redis-timeout-ms", "3000", NULL), 0);
    memset(&w, 0, sizeof w);
    assert_int_equal(cfg_warnings(&c, NULL, collect_warning, &w), 1);
    assert_non_null(strstr(w.text[0], "redis_timeout_ms 3000"));
}

static void help_and_version(void **state)
{
    (void)state;
    const char *env[] = {"INVENTORY_PORT=bad", NULL}; /* not even looked at */
    struct cfg c;
    char err[512];
    assert_int_equal(LOAD(env, &c, err, "--help", NULL), 0);
    assert_true(c.help);
    assert_int_equal(LOAD(env, &c, err, "-h", NULL), 0);
    assert_true(c.help);
    assert_int_equal(LOAD(env, &c, err, "--version", NULL), 0);
    assert_true(c.version);
    assert_false(c.help);
    FILE *devnull = fopen("/dev/null", "w");
    assert_non_null(devnull);
    cfg_usage(devnull, "inventoryd");
    fclose(devnull);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(defaults_without_a_file, setup, teardown),
        cmocka_unit_test_setup_teardown(default_file_is_read_when_present, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(file_then_env_then_flag, setup, teardown),
        cmocka_unit_test_setup_teardown(every_flag_and_env_var, setup, teardown),
        cmocka_unit_test_setup_teardown(file_only_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(log_settings_file_env_flag, setup, teardown),
        cmocka_unit_test_setup_teardown(log_settings_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(durability_file_env_flag, setup, teardown),
        cmocka_unit_test_setup_teardown(config_path_from_env_and_flag, setup, teardown),
        cmocka_unit_test_setup_teardown(missing_explicit_file_is_an_error, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(file_errors_name_the_key, setup, teardown),
        cmocka_unit_test_setup_teardown(env_errors_name_the_variable, setup, teardown),
        cmocka_unit_test_setup_teardown(flag_errors_name_the_flag, setup, teardown),
        cmocka_unit_test_setup_teardown(redis_sentinel_url, setup, teardown),
        cmocka_unit_test_setup_teardown(flag_beats_bad_env_only_when_valid, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(non_loopback_needs_a_token, setup, teardown),
        cmocka_unit_test_setup_teardown(search_path_is_checkout_then_system, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(system_file_when_no_local_one, setup, teardown),
        cmocka_unit_test_setup_teardown(unreadable_search_file_is_an_error, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(check_config_validates_everything, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(print_shows_effective_values_and_masks_secrets,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(store_setting_masks_its_password, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(store_password_file_joins_the_conninfo, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(ledger_settings_and_masked_password, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(foreach_source_and_diff, setup, teardown),
        cmocka_unit_test_setup_teardown(help_and_version, setup, teardown),
        cmocka_unit_test_setup_teardown(warnings_for_misspelt_env_and_contradictions,
                                        setup, teardown),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
