/* store.c -- one Redis connection (see store.h). */
#include "segments/redis/store.h"

#include "base/xalloc.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

struct rd_conn {
    struct rd_target to;
    char host[256], unix_path[1024], user[256], password[256];
    bool failed;                 /* the last attempt failed: log the next success */
    _Atomic long long *errors;   /* counts every failure; may be NULL */
    redisContext *rc;            /* NULL until connected, and again after an error */
    char sha[SCRIPT__COUNT][41]; /* SCRIPT LOAD results for this connection */
    char errstr[128];            /* the last failure */
};

rd_conn *rd_conn_create(const struct rd_target *to, _Atomic long long *errors)
{
    rd_conn *c = seg_calloc(1, sizeof *c);
    c->to = *to;
    snprintf(c->host, sizeof c->host, "%s", to->host ? to->host : "127.0.0.1");
    snprintf(c->unix_path, sizeof c->unix_path, "%s", to->unix_path ? to->unix_path : "");
    snprintf(c->user, sizeof c->user, "%s", to->user ? to->user : "");
    snprintf(c->password, sizeof c->password, "%s", to->password ? to->password : "");
    c->to.host = c->host;
    c->to.unix_path = c->unix_path;
    c->to.user = c->user;
    c->to.password = c->password;
    c->errors = errors;
    return c;
}

void rd_conn_free(rd_conn *c)
{
    if (c == NULL)
        return;
    store_drop(c);
    free(c);
}

const char *rd_conn_error(const rd_conn *c)
{
    return c->errstr;
}

static rd_log_fn logger;

void rd_set_logger(rd_log_fn fn)
{
    logger = fn;
}

void store_log(bool failure, const char *what, const char *detail)
{
    if (logger != NULL)
        logger(failure, what, detail);
}

static void set_error(rd_conn *c, const char *what, const char *detail)
{
    snprintf(c->errstr, sizeof c->errstr, "%s: %.100s", what, detail);
    if (logger != NULL)
        logger(true, what, detail);
    if (c->errors != NULL)
        atomic_fetch_add_explicit(c->errors, 1, memory_order_relaxed);
}

/* Judge a reply: keep it when usable; otherwise record why, drop the connection on
 * I/O errors, free the reply and return NULL. */
static redisReply *checked(rd_conn *c, redisReply *r)
{
    if (r == NULL) {
        set_error(c, "redis", c->rc && c->rc->errstr[0] ? c->rc->errstr : "no reply");
        store_drop(c);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        set_error(c, "redis error", r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

static int load_scripts(rd_conn *c)
{
    for (int i = 0; i < SCRIPT__COUNT; i++)
        redisAppendCommand(c->rc, "SCRIPT LOAD %s", script_source((enum script_id)i));
    int rc = 0;
    for (int i = 0; i < SCRIPT__COUNT; i++) {
        void *p = NULL;
        if (redisGetReply(c->rc, &p) != REDIS_OK) {
            set_error(c, "script load", c->rc->errstr);
            return -1;
        }
        redisReply *r = p;
        if (r->type == REDIS_REPLY_STRING && r->len == 40)
            memcpy(c->sha[i], r->str, 41);
        else {
            set_error(c, "script load",
                      r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
            rc = -1;
        }
        freeReplyObject(r);
    }
    return rc;
}

/* Run one setup command (AUTH, SELECT) on a fresh connection: 0, or -1 with the
 * error set under `what`. */
static int setup(rd_conn *c, const char *what, int argc, const char **argv)
{
    redisReply *r = redisCommandArgv(c->rc, argc, argv, NULL);
    if (r == NULL) {
        set_error(c, what, c->rc->errstr);
        return -1;
    }
    int ok = r->type != REDIS_REPLY_ERROR;
    if (!ok)
        set_error(c, what, r->str);
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* AUTH (with the ACL user when one is set) and SELECT, as configured. */
static int authenticate(rd_conn *c)
{
    if (c->password[0] != '\0') {
        const char *auth[3] = {"AUTH"};
        int argc = 1;
        if (c->user[0] != '\0')
            auth[argc++] = c->user;
        auth[argc++] = c->password;
        if (setup(c, "AUTH", argc, auth) != 0)
            return -1;
    }
    if (c->to.db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", c->to.db);
        if (setup(c, "SELECT", 2, (const char *[]){"SELECT", db}) != 0)
            return -1;
    }
    return 0;
}

int store_connect(rd_conn *c)
{
    if (c->rc != NULL)
        return 0;
    int ms = c->to.timeout_ms;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    c->rc = c->unix_path[0] != '\0' ? redisConnectUnixWithTimeout(c->unix_path, tv)
                                    : redisConnectWithTimeout(c->to.host, c->to.port, tv);
    if (c->rc == NULL) {
        set_error(c, "connect", "out of memory");
        return -1;
    }
    if (c->rc->err) {
        set_error(c, "connect", c->rc->errstr);
        store_drop(c);
        return -1;
    }
    if (redisSetTimeout(c->rc, tv) != REDIS_OK || authenticate(c) != 0 ||
        load_scripts(c) != 0) {
        if (c->rc && c->rc->err)
            set_error(c, "connect", c->rc->errstr);
        store_drop(c);
        return -1;
    }
    if (c->failed && logger != NULL)
        logger(false, "connect", c->unix_path[0] != '\0' ? c->unix_path : c->to.host);
    c->failed = false;
    return 0;
}

void store_drop(rd_conn *c)
{
    if (c->rc != NULL) {
        c->failed = true; /* the next connect is a reconnect, and says so */
        redisFree(c->rc);
        c->rc = NULL;
    }
}

/* True when the server closed the connection under us (a restart, CLIENT KILL): a
 * command sent on it never ran or, for the scripts, is safe to send again. A timeout
 * is not such a case: retrying would only double the wait on a hung Redis. */
static bool closed_by_peer(const redisContext *rc, int err)
{
    return rc->err == REDIS_ERR_EOF ||
           (rc->err == REDIS_ERR_IO && (err == ECONNRESET || err == EPIPE));
}

redisReply *store_run(rd_conn *c, struct rd_cmd *cmd)
{
    if (store_connect(c) != 0)
        return NULL;
    const char **argv;
    const size_t *len;
    const char *sha = cmd->script >= 0 ? c->sha[cmd->script] : NULL;
    int argc = cmd_argv(cmd, sha, &argv, &len);
    redisReply *r = redisCommandArgv(c->rc, argc, argv, len);
    if (r == NULL && closed_by_peer(c->rc, errno)) {
        /* Closed under us (a restart, CLIENT KILL): once more on a new connection.
         * Every script recognises its own earlier run (scripts.c). */
        store_drop(c);
        if (store_connect(c) == 0) {
            argc = cmd_argv(cmd, sha != NULL ? c->sha[cmd->script] : NULL, &argv, &len);
            r = redisCommandArgv(c->rc, argc, argv, len);
        }
    }
    if (r != NULL && cmd->script >= 0 && r->type == REDIS_REPLY_ERROR &&
        strncmp(r->str, "NOSCRIPT", 8) == 0) {
        /* Redis restarted or flushed its scripts: EVAL sends the source and caches it. */
        freeReplyObject(r);
        argc = cmd_argv(cmd, NULL, &argv, &len);
        r = redisCommandArgv(c->rc, argc, argv, len);
    }
    return checked(c, r);
}

int store_pipeline(rd_conn *c, int n, void (*append)(redisContext *rc, void *arg),
                   void *arg, redisReply **out)
{
    if (store_connect(c) != 0)
        return -1;
    append(c->rc, arg);
    for (int i = 0; i < n; i++) {
        void *p = NULL;
        if (redisGetReply(c->rc, &p) != REDIS_OK)
            p = NULL;
        if ((out[i] = checked(c, p)) == NULL) {
            for (int j = 0; j < i; j++)
                freeReplyObject(out[j]);
            /* Replies still in flight would answer the next caller's command. */
            store_drop(c);
            return -1;
        }
    }
    return 0;
}
