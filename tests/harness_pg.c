/* harness_pg.c -- initdb, start and stop a PostgreSQL server for the tests. */
#include "tests/harness_pg.h"
#include "tests/harness.h"

#include <errno.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct h_pg {
    char *dir; /* temp dir: data/ and the unix socket */
    int port;
    int pid;
    int max_connections; /* 0: 40 */
    char conninfo[256];
};

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "harness: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

static const char *bindir(void)
{
    const char *d = getenv("PG_BINDIR");
    return d != NULL && d[0] != '\0' ? d : "/usr/lib/postgresql/15/bin";
}

/* As root: hand `dir` to the postgres user and let it search the dirs above. */
static int give_to_postgres(const char *dir, const struct passwd *pw)
{
    if (chown(dir, pw->pw_uid, pw->pw_gid) != 0) {
        say("chown %s: %s", dir, strerror(errno));
        return -1;
    }
    char path[512];
    snprintf(path, sizeof path, "%s", dir);
    for (char *slash = strrchr(path, '/'); slash != NULL && slash != path;
         slash = strrchr(path, '/')) {
        *slash = '\0';
        struct stat st;
        if (stat(path, &st) == 0 && !(st.st_mode & S_IXOTH) && st.st_uid == getuid())
            chmod(path, (st.st_mode & 07777) | S_IXOTH);
    }
    return 0;
}

/* argv with "setpriv ... --" in front when we are root. */
static void as_postgres(const char **argv, int *n, bool root)
{
    if (!root)
        return;
    argv[(*n)++] = "setpriv";
    argv[(*n)++] = "--reuid=postgres";
    argv[(*n)++] = "--regid=postgres";
    argv[(*n)++] = "--init-groups";
    argv[(*n)++] = "--pdeathsig=KILL";
    argv[(*n)++] = "--";
}

static void dump_log(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    char line[512];
    while (fgets(line, sizeof line, f) != NULL)
        fprintf(stderr, "  pg| %s", line);
    fclose(f);
}

static int launch(h_pg *p, bool root)
{
    char bin[300], data[600], logf[600], port[16], conns[40];
    snprintf(bin, sizeof bin, "%s/postgres", bindir());
    snprintf(conns, sizeof conns, "max_connections=%d",
             p->max_connections > 0 ? p->max_connections : 40);
    snprintf(data, sizeof data, "%s/data", p->dir);
    snprintf(logf, sizeof logf, "%s/postgres.log", p->dir);
    snprintf(port, sizeof port, "%d", p->port);
    char sock[620];
    snprintf(sock, sizeof sock, "unix_socket_directories=%s", p->dir);
    const char *argv[48];
    int n = 0;
    as_postgres(argv, &n, root);
    const char *rest[] = {bin,
                          "-D",
                          data,
                          "-p",
                          port,
                          "-c",
                          "listen_addresses=127.0.0.1",
                          "-c",
                          sock,
                          "-c",
                          "fsync=off",
                          "-c",
                          "synchronous_commit=off",
                          "-c",
                          "full_page_writes=off",
                          "-c",
                          conns,
                          "-c",
                          "shared_buffers=32MB",
                          "-c",
                          "log_min_messages=warning",
                          NULL};
    for (int i = 0; rest[i] != NULL; i++)
        argv[n++] = rest[i];
    argv[n] = NULL;
    p->pid = h_spawn(argv, NULL, logf, logf);
    if (p->pid < 0)
        return -1;
    snprintf(p->conninfo, sizeof p->conninfo,
             "host=127.0.0.1 port=%d user=postgres dbname=postgres connect_timeout=5",
             p->port);
    long long end = h_now_ms() + 30000;
    while (h_now_ms() < end) {
        if (PQping(p->conninfo) == PQPING_OK)
            return 0;
        int st = h_wait_exit(p->pid, 0);
        if (st != -2) {
            say("postgres on port %d exited with %d", p->port, st);
            dump_log(logf);
            p->pid = 0;
            return -1;
        }
        h_sleep_ms(30);
    }
    say("postgres on port %d not ready in 30 s", p->port);
    dump_log(logf);
    h_terminate(p->pid, SIGKILL, 5000);
    p->pid = 0;
    return -1;
}

h_pg *h_pg_start(void)
{
    h_pg *p = calloc(1, sizeof *p);
    if (p == NULL)
        abort();
    p->dir = h_tempdir("pg");
    if (p->dir == NULL) {
        free(p);
        return NULL;
    }
    bool root = geteuid() == 0;
    if (root) {
        struct passwd *pw = getpwnam("postgres");
        if (pw == NULL) {
            say("running as root and there is no `postgres` user to run PostgreSQL as");
            h_pg_free(p);
            return NULL;
        }
        if (give_to_postgres(p->dir, pw) != 0) {
            h_pg_free(p);
            return NULL;
        }
    }
    char bin[300], data[600];
    snprintf(bin, sizeof bin, "%s/initdb", bindir());
    snprintf(data, sizeof data, "%s/data", p->dir);
    const char *argv[24];
    int n = 0;
    as_postgres(argv, &n, root);
    const char *rest[] = {bin,  "-D",   data,       "-U", "postgres",  "-A", "trust",
                          "-E", "UTF8", "--locale", "C",  "--no-sync", NULL};
    for (int i = 0; rest[i] != NULL; i++)
        argv[n++] = rest[i];
    argv[n] = NULL;
    char *err = NULL;
    int st = h_run_cmd(argv, NULL, 60000, NULL, &err);
    if (st != 0) {
        say("initdb exited with %d: %s", st, err != NULL ? err : "");
        free(err);
        h_pg_free(p);
        return NULL;
    }
    free(err);
    for (int attempt = 0; attempt < 5; attempt++) {
        p->port = h_free_port();
        if (p->port != 0 && launch(p, root) == 0)
            return p;
    }
    say("could not start postgres");
    h_pg_free(p);
    return NULL;
}

const char *h_pg_conninfo(const h_pg *p)
{
    return p->conninfo;
}

int h_pg_port(const h_pg *p)
{
    return p->port;
}

int h_pg_pid(const h_pg *p)
{
    return p->pid;
}

int h_pg_stop(h_pg *p)
{
    return p != NULL ? h_pid_end(&p->pid, SIGINT, 10000) : -1;
}

void h_pg_set_max_connections(h_pg *p, int n)
{
    p->max_connections = n;
}

static int relaunch(h_pg *p);

int h_pg_restart(h_pg *p)
{
    if (p->pid > 0)
        h_pg_stop(p);
    return relaunch(p);
}

int h_pg_restart_immediate(h_pg *p)
{
    if (p->pid > 0)
        h_pid_end(&p->pid, SIGQUIT, 10000);
    return relaunch(p);
}

static int relaunch(h_pg *p)
{
    /* The old port may linger a moment after the stop. */
    for (int attempt = 0; attempt < 5; attempt++) {
        if (launch(p, geteuid() == 0) == 0)
            return 0;
        h_sleep_ms(200);
    }
    return -1;
}

void h_pg_free(h_pg *p)
{
    if (p == NULL)
        return;
    if (p->pid > 0)
        h_pg_stop(p);
    if (p->dir != NULL)
        h_rmtree(p->dir);
    free(p->dir);
    free(p);
}

static PGconn *connect_to(const h_pg *p)
{
    PGconn *c = PQconnectdb(p->conninfo);
    if (PQstatus(c) != CONNECTION_OK) {
        say("connect to postgres: %s", PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    return c;
}

int h_pg_exec(const h_pg *p, const char *sql)
{
    PGconn *c = connect_to(p);
    if (c == NULL)
        return -1;
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    int rc = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? 0 : -1;
    if (rc != 0)
        say("%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    return rc;
}

long long h_pg_scalar(const h_pg *p, const char *sql)
{
    PGconn *c = connect_to(p);
    if (c == NULL)
        return -1;
    PGresult *r = PQexec(c, sql);
    long long v = -1;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0 && PQnfields(r) > 0)
        v = PQgetisnull(r, 0, 0) ? 0 : strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    else
        say("%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    return v;
}
