/* store.c -- one Redis connection (see store.h). */
#include "segments/redis/store.h"

#include "base/clock.h"
#include "base/xalloc.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "segments/redis/proto.h"
#include "segments/redis/slots.h"

/* One node's connection. */
struct node {
    char host[RD_HOST_MAX];
    int port;
    redisContext *rc;            /* NULL until connected, and again after an error */
    char sha[SCRIPT__COUNT][41]; /* SCRIPT LOAD results for this connection */
};

struct rd_conn {
    struct rd_target to; /* host and port: the node, or a cluster's seed */
    char host[256], unix_path[1024], user[256], password[256];
    bool failed;               /* the last attempt failed: log the next success */
    _Atomic long long *errors; /* counts every failure; may be NULL */
    struct node *nodes;        /* nodes[0]: `to` (standalone: the only node) */
    int nnodes;
    int16_t route[RD_SLOTS]; /* a cluster: slot -> index in nodes; -1 unknown */
    long long mapped_ms;     /* when the map was last fetched */
    char errstr[128];        /* the last failure */
};

/* A cluster: MOVED/ASK followed at most this often per command; TRYAGAIN and
 * CLUSTERDOWN retried every RETRY_MS within the timeout; the map fetched at most
 * every MAP_MIN_MS. */
#define MAX_HOPS 5
#define RETRY_MS 20
#define MAP_MIN_MS 100

/* The node at host:port, added when new. */
static int node_index(rd_conn *c, const char *host, int port)
{
    for (int i = 0; i < c->nnodes; i++)
        if (c->nodes[i].port == port && strcmp(c->nodes[i].host, host) == 0)
            return i;
    c->nodes = seg_realloc(c->nodes, sizeof *c->nodes * (size_t)(c->nnodes + 1));
    struct node *n = &c->nodes[c->nnodes];
    memset(n, 0, sizeof *n);
    snprintf(n->host, sizeof n->host, "%s", host);
    n->port = port;
    return c->nnodes++;
}

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
    for (int s = 0; s < RD_SLOTS; s++)
        c->route[s] = -1;
    node_index(c, c->host, to->port);
    return c;
}

static void drop_node(rd_conn *c, struct node *n)
{
    if (n->rc != NULL) {
        c->failed = true; /* the next connect is a reconnect, and says so */
        redisFree(n->rc);
        n->rc = NULL;
    }
}

void rd_conn_free(rd_conn *c)
{
    if (c == NULL)
        return;
    store_drop(c);
    free(c->nodes);
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

void rd_log(bool failure, const char *what, const char *detail)
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

/* Judge a reply (not NULL): keep it when usable; otherwise record why, free it and
 * return NULL. */
static redisReply *checked(rd_conn *c, redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR) {
        set_error(c, "redis error", r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

static int load_scripts(rd_conn *c, struct node *n)
{
    for (int i = 0; i < SCRIPT__COUNT; i++)
        redisAppendCommand(n->rc, "SCRIPT LOAD %s", script_source((enum script_id)i));
    int rc = 0;
    for (int i = 0; i < SCRIPT__COUNT; i++) {
        void *p = NULL;
        if (redisGetReply(n->rc, &p) != REDIS_OK) {
            set_error(c, "script load", n->rc->errstr);
            return -1;
        }
        redisReply *r = p;
        if (r->type == REDIS_REPLY_STRING && r->len == 40)
            memcpy(n->sha[i], r->str, 41);
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
static int setup(rd_conn *c, struct node *n, const char *what, int argc,
                 const char **argv)
{
    redisReply *r = redisCommandArgv(n->rc, argc, argv, NULL);
    if (r == NULL) {
        set_error(c, what, n->rc->errstr);
        return -1;
    }
    int ok = r->type != REDIS_REPLY_ERROR;
    if (!ok)
        set_error(c, what, r->str);
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* AUTH (with the ACL user when one is set) and SELECT, as configured. */
static int authenticate(rd_conn *c, struct node *n)
{
    if (c->password[0] != '\0') {
        const char *auth[3] = {"AUTH"};
        int argc = 1;
        if (c->user[0] != '\0')
            auth[argc++] = c->user;
        auth[argc++] = c->password;
        if (setup(c, n, "AUTH", argc, auth) != 0)
            return -1;
    }
    if (c->to.db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", c->to.db);
        if (setup(c, n, "SELECT", 2, (const char *[]){"SELECT", db}) != 0)
            return -1;
    }
    return 0;
}

static int connect_node(rd_conn *c, struct node *n)
{
    if (n->rc != NULL)
        return 0;
    int ms = c->to.timeout_ms;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    bool local = n == &c->nodes[0] && c->unix_path[0] != '\0';
    n->rc = local ? redisConnectUnixWithTimeout(c->unix_path, tv)
                  : redisConnectWithTimeout(n->host, n->port, tv);
    if (n->rc == NULL) {
        set_error(c, "connect", "out of memory");
        return -1;
    }
    if (n->rc->err) {
        set_error(c, "connect", n->rc->errstr);
        drop_node(c, n);
        return -1;
    }
    if (redisSetTimeout(n->rc, tv) != REDIS_OK || authenticate(c, n) != 0 ||
        load_scripts(c, n) != 0) {
        if (n->rc && n->rc->err)
            set_error(c, "connect", n->rc->errstr);
        drop_node(c, n);
        return -1;
    }
    if (c->failed && logger != NULL)
        logger(false, "connect", local ? c->unix_path : n->host);
    c->failed = false;
    return 0;
}

static struct node *node_for(rd_conn *c, int slot);

bool store_cluster(const rd_conn *c)
{
    return c->to.cluster;
}

int store_slot_node(rd_conn *c, int slot)
{
    if (!c->to.cluster || slot < 0 || slot >= RD_SLOTS)
        return -1;
    node_for(c, slot); /* fetches the map on first use */
    return c->route[slot];
}

int store_nodes(const rd_conn *c)
{
    return c->nnodes;
}

const char *store_node_name(const rd_conn *c, int i, char *buf, size_t len)
{
    snprintf(buf, len, "%s:%d", c->nodes[i].host, c->nodes[i].port);
    return buf;
}

int store_connect(rd_conn *c)
{
    return connect_node(c, &c->nodes[0]);
}

void store_drop(rd_conn *c)
{
    for (int i = 0; i < c->nnodes; i++)
        drop_node(c, &c->nodes[i]);
}

/* ---- a cluster's routes ---------------------------------------------------------- */

/* Fetch the slot map (at most every MAP_MIN_MS) and route every slot to its master. */
static void refresh_map(rd_conn *c)
{
    if (!c->to.cluster || base_now_ms() - c->mapped_ms < MAP_MIN_MS)
        return;
    c->mapped_ms = base_now_ms();
    struct rd_slot_map m;
    char err[160];
    /* Ask the seed, else any node met so far (the seed may be the master that died). */
    int rc = rd_slot_map_fetch(&c->to, &m, err, sizeof err);
    for (int i = 0; rc != 0 && i < c->nnodes; i++) {
        struct rd_target t = c->to;
        t.host = c->nodes[i].host;
        t.port = c->nodes[i].port;
        t.unix_path = NULL;
        rc = rd_slot_map_fetch(&t, &m, err, sizeof err);
    }
    if (rc != 0) {
        set_error(c, "cluster map", err);
        return;
    }
    int *idx = seg_calloc((size_t)m.nmasters + 1, sizeof *idx);
    for (int k = 0; k < m.nmasters; k++)
        idx[k] = node_index(c, m.masters[k].master.host, m.masters[k].master.port);
    for (int s = 0; s < RD_SLOTS; s++)
        c->route[s] = (int16_t)(m.slot[s] >= 0 ? idx[m.slot[s]] : -1);
    free(idx);
    rd_slot_map_clear(&m);
}

/* The node for a command on `slot` (-1: keyless). */
static struct node *node_for(rd_conn *c, int slot)
{
    if (c->to.cluster && c->mapped_ms == 0)
        refresh_map(c);
    if (c->to.cluster && slot >= 0 && c->route[slot] >= 0)
        return &c->nodes[c->route[slot]];
    return &c->nodes[0];
}

/* True when the server closed the connection under us (a restart, CLIENT KILL): a
 * command sent on it never ran or, for the scripts, is safe to send again. A timeout
 * is not such a case: retrying would only double the wait on a hung Redis. */
static bool closed_by_peer(const redisContext *rc, int err)
{
    return rc->err == REDIS_ERR_EOF ||
           (rc->err == REDIS_ERR_IO && (err == ECONNRESET || err == EPIPE));
}

/* Send `cmd` (by EVALSHA `sha`, or EVAL when NULL) and read its reply: NULL when
 * none came. */
static redisReply *command(redisContext *rc, struct rd_cmd *cmd, const char *sha)
{
    const char *out;
    size_t len = cmd_format(cmd, sha, &out);
    void *r = NULL;
    if (redisAppendFormattedCommand(rc, out, len) != REDIS_OK ||
        redisGetReply(rc, &r) != REDIS_OK)
        return NULL;
    return r;
}

/* Send `cmd` on node `n` and read its reply: once more on a new connection when the
 * server closed the old one under it, by EVAL after NOSCRIPT. ASKING first when
 * `asking`. NULL when no reply came (the connection is dropped). */
static redisReply *run_on(rd_conn *c, struct node *n, struct rd_cmd *cmd, bool asking)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        if (connect_node(c, n) != 0)
            return NULL;
        if (asking) {
            redisReply *a = redisCommand(n->rc, "ASKING");
            if (a != NULL)
                freeReplyObject(a);
        }
        redisReply *r =
            command(n->rc, cmd, cmd->script >= 0 ? n->sha[cmd->script] : NULL);
        if (r == NULL && attempt == 0 && closed_by_peer(n->rc, errno)) {
            /* Closed under us (a restart, CLIENT KILL): once more on a new connection.
             * Every script recognises its own earlier run (scripts.h). */
            drop_node(c, n);
            continue;
        }
        if (r == NULL) {
            set_error(c, "redis", n->rc->errstr[0] ? n->rc->errstr : "no reply");
            drop_node(c, n);
            return NULL;
        }
        if (cmd->script >= 0 && r->type == REDIS_REPLY_ERROR &&
            strncmp(r->str, "NOSCRIPT", 8) == 0) {
            /* Redis restarted or flushed its scripts: EVAL sends the source. */
            freeReplyObject(r);
            n->sha[cmd->script][0] = '\0';
            r = command(n->rc, cmd, NULL);
            if (r == NULL) {
                set_error(c, "redis", n->rc->errstr[0] ? n->rc->errstr : "no reply");
                drop_node(c, n);
            }
        }
        return r;
    }
    return NULL;
}

/* Follow a cluster's answer `r` to `cmd`: the reply to hand back (freeing `r` when it
 * is replaced), or `r` itself when it is not a redirect. */
static redisReply *follow(rd_conn *c, struct rd_cmd *cmd, redisReply *r, int from)
{
    long long start = base_now_ms();
    for (int hops = 0; r != NULL && r->type == REDIS_REPLY_ERROR && hops < MAX_HOPS;
         hops++) {
        struct rd_redirect d;
        if (rd_redirect_parse(r->str, r->len, &d) != 0 || d.kind == RD_REDIR_NONE)
            return r;
        struct node *to = &c->nodes[from];
        bool asking = false;
        if (d.kind == RD_REDIR_MOVED || d.kind == RD_REDIR_ASK) {
            char host[RD_HOST_MAX];
            snprintf(host, sizeof host, "%s",
                     d.host[0] != '\0' && strcmp(d.host, "?") != 0 ? d.host : to->host);
            int i = node_index(c, host, d.port); /* may move c->nodes */
            if (d.kind == RD_REDIR_MOVED) {
                c->route[d.slot] = (int16_t)i;
                refresh_map(c);
            }
            asking = d.kind == RD_REDIR_ASK;
            to = &c->nodes[i];
        } else {
            if (base_now_ms() + RETRY_MS - start > c->to.timeout_ms)
                return r;
            if (d.kind != RD_REDIR_TRYAGAIN)
                refresh_map(c);
            struct timespec ts = {0, RETRY_MS * 1000000L};
            nanosleep(&ts, NULL);
            to = node_for(c, cmd->slot);
        }
        freeReplyObject(r);
        from = (int)(to - c->nodes);
        r = run_on(c, to, cmd, asking);
    }
    return r;
}

redisReply *store_run(rd_conn *c, struct rd_cmd *cmd)
{
    struct node *n = node_for(c, cmd->slot);
    redisReply *r = run_on(c, n, cmd, false);
    if (r == NULL) {
        if (c->to.cluster)
            refresh_map(c); /* a node gone may be a failover */
        return NULL;
    }
    if (c->to.cluster)
        r = follow(c, cmd, r, (int)(n - c->nodes));
    return r != NULL ? checked(c, r) : NULL;
}

int store_pipeline(rd_conn *c, int n, struct rd_cmd *cmds, redisReply **out)
{
    if (c->to.cluster) { /* one at a time, each to its own node */
        for (int i = 0; i < n; i++) {
            if ((out[i] = store_run(c, &cmds[i])) == NULL) {
                for (int j = 0; j < i; j++)
                    freeReplyObject(out[j]);
                return -1;
            }
        }
        return 0;
    }
    struct node *node = &c->nodes[0];
    if (connect_node(c, node) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        const char *text;
        size_t len = cmd_format(&cmds[i], NULL, &text);
        redisAppendFormattedCommand(node->rc, text, len);
    }
    for (int i = 0; i < n; i++) {
        void *p = NULL;
        if (redisGetReply(node->rc, &p) != REDIS_OK) {
            set_error(c, "redis", node->rc->errstr[0] ? node->rc->errstr : "no reply");
            p = NULL;
        }
        if ((out[i] = p != NULL ? checked(c, p) : NULL) == NULL) {
            for (int j = 0; j < i; j++)
                freeReplyObject(out[j]);
            /* Replies still in flight would answer the next caller's command. */
            drop_node(c, node);
            return -1;
        }
    }
    return 0;
}

redisReply *store_call(rd_conn *c, struct rd_cmd *cmd)
{
    redisReply *r = store_run(c, cmd);
    cmd_free(cmd);
    return r;
}

int store_script(rd_conn *c, struct rd_cmd *cmd, struct rd_reply *out)
{
    memset(out, 0, sizeof *out);
    redisReply *r = store_call(c, cmd);
    int rc = r != NULL ? proto_scripted(r, out) : -1;
    if (r != NULL)
        freeReplyObject(r);
    return rc;
}

int store_step(rd_conn *c, struct rd_cmd *cmd, unsigned keep, redisReply **kept)
{
    redisReply *r = store_call(c, cmd);
    struct rd_reply out;
    int rc = r != NULL ? proto_scripted(r, &out) : -1;
    int code = rc < 0 ? -1 : out.code;
    if (rc == 0)
        rd_reply_clear(&out);
    if (kept != NULL && code >= 0 && (keep & (1u << code)) != 0)
        *kept = r;
    else if (r != NULL)
        freeReplyObject(r);
    return code;
}
