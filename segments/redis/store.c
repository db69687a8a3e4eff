/* store.c -- one Redis connection (see store.h). */
#include "segments/redis/store.h"

#include "base/clock.h"
#include "base/xalloc.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include "segments/redis/proto.h"
#include "segments/redis/sentinel.h"
#include "segments/redis/target.h"
#include "segments/redis/slots.h"
#include "segments/redis/smap.h"

/* One node's connection. */
struct node {
    char host[RD_HOST_MAX];
    int port;
    redisContext *rc;            /* NULL until connected, and again after an error */
    long long sgen;              /* Sentinel: the master generation host:port is of */
    char sha[SCRIPT__COUNT][41]; /* SCRIPT LOAD results for this connection */
};

struct rd_conn {
    struct rd_target to;        /* host and port: the node, or a cluster's seed */
    struct rd_target_text text; /* to's strings */
    bool failed;                /* the last attempt failed: log the next success */
    _Atomic long long *errors;  /* counts every failure; may be NULL */
    struct node *nodes;         /* nodes[0]: `to` (standalone: the only node) */
    int nnodes;
    /* A cluster (or standalone, `map` for the process's mode only): */
    rd_smap *map;            /* the slot map: the process's (to.map), or own_map */
    rd_smap *own_map;        /* made for this connection when the target had none */
    long long map_gen;       /* the map's generation `route` follows; 0: none yet */
    int16_t route[RD_SLOTS]; /* slot -> index in nodes; -1 unknown */
    char errstr[128];        /* the last failure */
};

/* A cluster: MOVED/ASK followed at most this often per command; TRYAGAIN and
 * CLUSTERDOWN retried every RETRY_MS within the timeout. */
#define MAX_HOPS 5
#define RETRY_MS 20

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
    rd_target_copy(&c->to, &c->text, to);
    c->errors = errors;
    for (int s = 0; s < RD_SLOTS; s++)
        c->route[s] = -1;
    node_index(c, c->text.host, to->port);
    c->map = to->map; /* standalone: for the mode, which may become a cluster */
    if (to->cluster && c->map == NULL)
        c->map = c->own_map = rd_smap_create(&c->to);
    c->to.map = NULL; /* reached through c->map only */
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
    rd_smap_free(c->own_map);
    free(c->nodes);
    free(c);
}

const char *rd_conn_error(const rd_conn *c)
{
    return c->errstr;
}

static void set_error(rd_conn *c, const char *what, const char *detail)
{
    snprintf(c->errstr, sizeof c->errstr, "%s: %.100s", what, detail);
    rd_log(true, what, detail);
    if (c->errors != NULL)
        atomic_fetch_add_explicit(c->errors, 1, memory_order_relaxed);
}

/* Judge a reply (not NULL): keep it when usable; otherwise record why, free it and
 * return NULL. An answer only a cluster gives, to a connection that takes its Redis
 * as standalone, asks the process's map whether it became one. */
static redisReply *checked(rd_conn *c, redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR) {
        if (!c->to.cluster && c->map != NULL && rd_cluster_error(r->str, r->len))
            rd_smap_refresh(c->map, 0);
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
    if (c->text.password[0] != '\0') {
        const char *auth[3] = {"AUTH"};
        int argc = 1;
        if (c->text.user[0] != '\0')
            auth[argc++] = c->text.user;
        auth[argc++] = c->text.password;
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

/* Sentinel: point node 0 at the newest master the sentinels name (0), or -1 with
 * the error set while they have named none. */
static int sentinel_address(rd_conn *c, struct node *n)
{
    long long gen = rd_sentinel_master(c->to.sentinel, n->host, sizeof n->host, &n->port);
    if (gen == 0) {
        char why[200];
        set_error(c, "sentinel", rd_sentinel_error(c->to.sentinel, why, sizeof why));
        return -1;
    }
    n->sgen = gen;
    return 0;
}

/* Sentinel: 0 when the node just connected says ROLE master; else -1, the error set
 * and the sentinels asked again (their answer was stale, or a failover is under way):
 * nothing may be written to a replica. */
static int check_master(rd_conn *c, struct node *n)
{
    redisReply *r = redisCommand(n->rc, "ROLE");
    bool master = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                  r->element[0]->type == REDIS_REPLY_STRING &&
                  strcmp(r->element[0]->str, "master") == 0;
    if (!master) {
        set_error(c, "ROLE",
                  r == NULL                      ? n->rc->errstr
                  : r->type == REDIS_REPLY_ERROR ? r->str
                                                 : "not a master (a failover?)");
        rd_sentinel_refresh(c->to.sentinel);
    }
    if (r != NULL)
        freeReplyObject(r);
    return master ? 0 : -1;
}

static int connect_node(rd_conn *c, struct node *n)
{
    bool sentinel = c->to.sentinel != NULL && n == &c->nodes[0];
    if (n->rc != NULL && sentinel && rd_sentinel_gen(c->to.sentinel) != n->sgen)
        drop_node(c, n); /* the sentinels switched masters: leave the old one */
    if (n->rc != NULL)
        return 0;
    if (sentinel && sentinel_address(c, n) != 0)
        return -1;
    int ms = c->to.timeout_ms;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    bool local = n == &c->nodes[0] && c->text.unix_path[0] != '\0';
    n->rc = local ? redisConnectUnixWithTimeout(c->text.unix_path, tv)
                  : redisConnectWithTimeout(n->host, n->port, tv);
    if (n->rc == NULL) {
        set_error(c, "connect", "out of memory");
        return -1;
    }
    if (n->rc->err) {
        set_error(c, "connect", n->rc->errstr);
        drop_node(c, n);
        if (sentinel)
            rd_sentinel_refresh(c->to.sentinel);
        return -1;
    }
    if (redisSetTimeout(n->rc, tv) != REDIS_OK || authenticate(c, n) != 0 ||
        (sentinel && check_master(c, n) != 0) || load_scripts(c, n) != 0) {
        if (n->rc && n->rc->err)
            set_error(c, "connect", n->rc->errstr);
        drop_node(c, n);
        return -1;
    }
    if (c->failed)
        rd_log(false, "connect", local ? c->text.unix_path : n->host);
    c->failed = false;
    return 0;
}

/* ---- a cluster's routes ---------------------------------------------------------- */

/* Whether the connection routes over a cluster, following the process's mode: once
 * it became a cluster, from this command on (never back). */
static bool cluster_now(rd_conn *c)
{
    if (!c->to.cluster && rd_smap_cluster(c->map))
        c->to.cluster = true; /* nodes[0] is the seed: the map adds the others */
    return c->to.cluster;
}

/* Route by the newest snapshot of the shared map, when `route` follows an older one:
 * one atomic load when it does not. */
static void follow_map(rd_conn *c)
{
    if (rd_smap_gen(c->map) == c->map_gen)
        return;
    const struct rd_smap_snap *snap = rd_smap_get(c->map);
    if (snap == NULL)
        return;
    const struct rd_slot_map *m = &snap->map;
    int *idx = seg_calloc((size_t)m->nmasters + 1, sizeof *idx);
    for (int k = 0; k < m->nmasters; k++)
        idx[k] = node_index(c, m->masters[k].master.host, m->masters[k].master.port);
    for (int s = 0; s < RD_SLOTS; s++)
        c->route[s] = (int16_t)(m->slot[s] >= 0 ? idx[m->slot[s]] : -1);
    free(idx);
    c->map_gen = snap->gen;
    rd_smap_put(snap);
}

/* The index of the node for a command on `slot` (-1: keyless), by the newest map;
 * on first use, the first map waited for (up to the timeout). */
static int node_for(rd_conn *c, int slot)
{
    if (!c->to.cluster)
        return 0;
    follow_map(c);
    if (c->map_gen == 0) {
        rd_smap_refresh(c->map, c->to.timeout_ms);
        follow_map(c);
        if (c->map_gen == 0) {
            char err[160];
            set_error(c, "cluster map", rd_smap_error(c->map, err, sizeof err));
        }
    }
    return slot >= 0 && c->route[slot] >= 0 ? c->route[slot] : 0;
}

bool store_cluster(rd_conn *c)
{
    return cluster_now(c);
}

bool rd_conn_cluster(rd_conn *c)
{
    return cluster_now(c);
}

int store_slot_node(rd_conn *c, int slot)
{
    if (!cluster_now(c) || slot < 0 || slot >= RD_SLOTS)
        return -1;
    node_for(c, slot); /* the newest map; on first use, waited for */
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

/* True when the server has closed `rc` since its last reply (a restart, a node
 * SIGKILLed, CLIENT KILL, an idle timeout), or sent bytes no command asked for: a
 * command must not go out on it. One non-blocking peek. */
static bool went_stale(const redisContext *rc)
{
    char b;
    int saved = errno;
    ssize_t k = recv(rc->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    bool stale = k >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    errno = saved;
    return stale;
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

/* Send `cmd` on node i and read its reply: once more on a new connection when the
 * server closed the old one under it, by EVAL after NOSCRIPT. ASKING first when
 * `asking`. NULL when no reply came (the connection is dropped); *sent says whether
 * the command went out (false: it cannot have run, as when no connection could be
 * made). A connection the server closed while it was idle is dropped before use. */
static redisReply *run_on(rd_conn *c, int i, struct rd_cmd *cmd, bool asking, bool *sent)
{
    struct node *n = &c->nodes[i];
    *sent = false;
    if (n->rc != NULL && went_stale(n->rc))
        drop_node(c, n);
    for (int attempt = 0; attempt < 2; attempt++) {
        if (connect_node(c, n) != 0)
            return NULL;
        if (asking) {
            redisReply *a = redisCommand(n->rc, "ASKING");
            if (a != NULL)
                freeReplyObject(a);
        }
        *sent = true;
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

/* Follow a cluster's answer `r` to `cmd` from node `from`: the reply to hand back
 * (freeing `r` when it is replaced), or `r` itself when it is not a redirect. */
static redisReply *follow(rd_conn *c, struct rd_cmd *cmd, redisReply *r, int from)
{
    long long start = base_now_ms();
    for (int hops = 0; r != NULL && r->type == REDIS_REPLY_ERROR && hops < MAX_HOPS;
         hops++) {
        struct rd_redirect d;
        if (rd_redirect_parse(r->str, r->len, &d) != 0 || d.kind == RD_REDIR_NONE)
            return r;
        int to = from;
        bool asking = false, sent;
        if (d.kind == RD_REDIR_MOVED || d.kind == RD_REDIR_ASK) {
            char host[RD_HOST_MAX];
            snprintf(host, sizeof host, "%s",
                     d.host[0] != '\0' && strcmp(d.host, "?") != 0 ? d.host
                                                                   : c->nodes[from].host);
            to = node_index(c, host, d.port);
            if (d.kind == RD_REDIR_MOVED) {
                c->route[d.slot] = (int16_t)to; /* at once; the map follows */
                rd_smap_refresh(c->map, 0);
            }
            asking = d.kind == RD_REDIR_ASK;
        } else {
            if (base_now_ms() + RETRY_MS - start > c->to.timeout_ms)
                return r;
            if (d.kind != RD_REDIR_TRYAGAIN)
                rd_smap_refresh(c->map, 0);
            struct timespec ts = {0, RETRY_MS * 1000000L};
            nanosleep(&ts, NULL);
            to = node_for(c, cmd->slot);
        }
        freeReplyObject(r);
        from = to;
        r = run_on(c, to, cmd, asking, &sent);
    }
    return r;
}

/* A cluster: `cmd` got no reply from node `from`, which may have failed over. The map
 * is asked for again; when the command never went out and what is left of the
 * timeout since `start` allows, the new map is waited for and, when it sends the
 * slot to another node, the command goes there (*at: that node). NULL when not. */
static redisReply *rerouted(rd_conn *c, struct rd_cmd *cmd, bool sent, long long start,
                            int *at)
{
    long long seen = c->map_gen;
    int left = (int)(c->to.timeout_ms - (base_now_ms() - start));
    if (sent || left <= 0) {
        rd_smap_refresh(c->map, 0); /* its outcome is unknown: never sent elsewhere */
        return NULL;
    }
    if (rd_smap_refresh(c->map, left) == seen)
        return NULL;
    int to = node_for(c, cmd->slot);
    if (to == *at)
        return NULL;
    *at = to;
    return run_on(c, to, cmd, false, &sent);
}

redisReply *store_run(rd_conn *c, struct rd_cmd *cmd)
{
    long long start = base_now_ms();
    cluster_now(c);
    int at = node_for(c, cmd->slot);
    bool sent;
    redisReply *r = run_on(c, at, cmd, false, &sent);
    if (r == NULL && c->to.cluster)
        r = rerouted(c, cmd, sent, start, &at);
    if (r == NULL)
        return NULL;
    if (c->to.cluster)
        r = follow(c, cmd, r, at);
    return r != NULL ? checked(c, r) : NULL;
}

int store_pipeline(rd_conn *c, int n, struct rd_cmd *cmds, redisReply **out)
{
    if (cluster_now(c)) { /* one at a time, each to its own node */
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
    if (node->rc != NULL && went_stale(node->rc))
        drop_node(c, node);
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
