/* test_docs.c -- every setting is documented where a user looks: `--help`, the man
 * page docs/inventoryd.8 and README.md's configuration table, each with its file key,
 * environment variable and flag (the settings table in service/config_table.c is the one
 * source; this test fails when a document misses what it names). Run from the
 * repository's root, as `make test` does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/config.h"

/* The whole file, malloc'd; fails the test when unreadable. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        fail_msg("cannot read %s (run from the repository's root)", path);
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    assert_non_null(m);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        fwrite(chunk, 1, n, m);
    fclose(f);
    fclose(m);
    return buf;
}

/* `flag` as roff writes it: every '-' as "\-". */
static void roff(char *out, size_t cap, const char *flag)
{
    size_t n = 0;
    for (; *flag != '\0' && n + 3 < cap; flag++) {
        if (*flag == '-')
            out[n++] = '\\';
        out[n++] = *flag;
    }
    out[n] = '\0';
}

struct docs {
    char *help, *man, *readme;
    int missing;
};

static void missing(struct docs *d, const char *where, const char *what)
{
    fprintf(stderr, "%s does not name %s\n", where, what);
    d->missing++;
}

static void check_setting(const char *key, const char *env, const char *flag, void *arg)
{
    struct docs *d = arg;
    char buf[128];
    if (strstr(d->help, key) == NULL)
        missing(d, "--help", key);
    if (env != NULL && strstr(d->help, env) == NULL)
        missing(d, "--help", env);
    if (flag != NULL && strstr(d->help, flag) == NULL)
        missing(d, "--help", flag);
    snprintf(buf, sizeof buf, "\n.B %s\n", key);
    if (strstr(d->man, buf) == NULL)
        missing(d, "docs/inventoryd.8 (a .B line in SETTINGS)", key);
    if (env != NULL && strstr(d->man, env) == NULL)
        missing(d, "docs/inventoryd.8", env);
    if (flag != NULL) {
        roff(buf, sizeof buf, flag);
        if (strstr(d->man, buf) == NULL)
            missing(d, "docs/inventoryd.8", flag);
    }
    snprintf(buf, sizeof buf, "`%s`", key);
    bool in_table = false;
    for (const char *p = strstr(d->readme, buf); p != NULL && !in_table;
         p = strstr(p + 1, buf)) {
        const char *line = p;
        while (line > d->readme && line[-1] != '\n')
            line--;
        in_table = line[0] == '|';
    }
    if (!in_table)
        missing(d, "README.md's tables", key);
}

static void every_setting_documented(void **state)
{
    (void)state;
    struct docs d = {NULL, NULL, NULL, 0};
    size_t len = 0;
    FILE *m = open_memstream(&d.help, &len);
    assert_non_null(m);
    cfg_usage(m, "inventoryd");
    fclose(m);
    d.man = slurp("docs/inventoryd.8");
    d.readme = slurp("README.md");
    int n = cfg_settings(check_setting, &d);
    assert_true(n > 20);
    free(d.help);
    free(d.man);
    free(d.readme);
    assert_int_equal(d.missing, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_setting_documented),
    };
    return cmocka_run_group_tests_name("docs", tests, NULL, NULL);
}
