/* harness.h -- integration-test harness: real redis-server and inventoryd children,
 * a tiny blocking HTTP/1.1 client, a SKU audit and direct Redis access.
 *
 * Processes. Every child (redis-server, inventoryd, a one-shot command) is put in a
 * process registry the moment it is forked. The registry is emptied by an atexit
 * handler and by handlers for SIGINT, SIGTERM, SIGABRT and SIGALRM (h_deadline), and
 * each child also gets PR_SET_PDEATHSIG=SIGKILL, so a failing, crashing or killed
 * test leaves no redis-server or inventoryd behind. PR_SET_PDEATHSIG follows the
 * *thread* that forked the child: start (and restart) children from a thread that
 * outlives them, the test's main thread, or they die when it ends. Temp dirs (mkdtemp
 * under $TMPDIR, default /tmp) are removed by the matching _free and at exit.
 *
 * Servers listen on 127.0.0.1 only, on a port found free by binding port 0.
 *
 * HTTP. Each h_http call opens its own socket (no shared state), so the client is
 * safe to call from many threads at once. Requests carry `Connection: close`; the
 * reply is read until Content-Length (or the chunked terminator, or EOF), with a
 * receive timeout.
 *
 * Errors: functions return 0/-1 or pointer/NULL and print the reason to stderr with
 * a "harness:" prefix, so a failing assert in a test has its cause just above it.
 * None of them calls cmocka's asserts: they may run on any thread.
 */
#ifndef TESTS_HARNESS_H
#define TESTS_HARNESS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include <hiredis/hiredis.h>
#include <jansson.h>

/* ---- processes ---------------------------------------------------------------- */

/* Arm a watchdog for the running test: after `seconds` the process prints which
 * limit was hit, kills every registered child and exits 1. 0 disarms it. */
void h_deadline(unsigned seconds);

/* A loopback TCP port that was free a moment ago (0 on failure). */
int h_free_port(void);

/* Make a fresh directory under $TMPDIR (or /tmp), removed at exit if still there.
 * Returns a malloc'd path, caller frees (h_rmtree removes it). NULL on failure. */
char *h_tempdir(const char *tag);

/* Remove a directory tree. Returns 0 or -1. */
int h_rmtree(const char *path);

/* Run a command to completion with extra environment entries ("NAME=value",
 * NULL-terminated, may be NULL; INVENTORY_* from our own environment is never passed
 * on). stdout and stderr are captured into malloc'd strings (caller frees; either
 * pointer may be NULL to discard). Returns the exit status, 128+signal when it died
 * of a signal, or -1 when it had to be killed after `timeout_ms` or could not run. */
int h_run_cmd(const char *const argv[], const char *const env[], int timeout_ms,
              char **out, char **err);

/* For harness files of other servers (harness_*.c): start a long-running child as
 * the registry's own (stdout/stderr appended to the given files, NULL: /dev/null;
 * env as h_run_cmd), returning its pid or -1; wait up to timeout_ms for it to exit
 * (its status as h_run_cmd, -2 while it still runs); and stop it (SIGCONT + `sig`,
 * SIGKILL after grace_ms; its exit status). */
int h_spawn(const char *const argv[], const char *const env[], const char *out_path,
            const char *err_path);
int h_wait_exit(int pid, int timeout_ms);
int h_terminate(int pid, int sig, int grace_ms);

/* A server handle's child by its pid field (0 or less: not running): h_pid_end stops
 * it as h_terminate and sets *pid to 0 (its exit status; -1 when not running);
 * h_pid_signal sends `sig` (SIGSTOP, SIGCONT): 0, or -1 when not running. */
int h_pid_end(int *pid, int sig, int grace_ms);
int h_pid_signal(int pid, int sig);

/* ---- redis-server ------------------------------------------------------------- */

/* A redis-server child: 127.0.0.1, own temp dir, AOF on (everysec), no RDB. */
typedef struct h_redis h_redis;

/* Start one on a free port and wait until it answers PING. NULL on failure. The
 * binary is $REDIS_SERVER or redis-server from PATH. Free with h_redis_free(). */
h_redis *h_redis_start(void);

/* The same with more redis-server arguments (NULL-terminated, at most 16, copied;
 * also used by h_redis_restart), e.g. {"--unixsocket", path, NULL}. A requirepass
 * here would keep the PING check from passing: set it with CONFIG SET afterwards. */
h_redis *h_redis_start_args(const char *const *extra);

/* The server's own temp dir (for a unix socket or files a test wants beside it). */
const char *h_redis_dir(const h_redis *r);

/* Stop gracefully (SIGCONT, SIGTERM, wait; SIGKILL after 10 s): AOF is flushed. */
int h_redis_stop(h_redis *r);

/* SIGKILL and reap: whatever the last everysec fsync missed is lost. Returns the
 * exit status as a shell shows it (137), -1 when it was not running. */
int h_redis_kill(h_redis *r);

/* SIGSTOP / SIGCONT: a hung Redis that keeps its connections open. */
int h_redis_pause(h_redis *r);
int h_redis_resume(h_redis *r);

/* Start again on the same port and dir (the AOF is replayed) and wait for PING.
 * Stops the running one first if there is one. */
int h_redis_restart(h_redis *r);

/* Stop if running, remove the temp dir, free. NULL is fine. */
void h_redis_free(h_redis *r);

int h_redis_port(const h_redis *r);

/* "127.0.0.1:PORT", valid as long as `r` is. */
const char *h_redis_addr(const h_redis *r);

/* A new hiredis connection to `r` (2 s timeouts), caller redisFree()s. NULL on error. */
redisContext *h_redis_connect(const h_redis *r);

/* Key of segment `seg`'s lock, as segments/keys.h builds it: inv:{SKU:SEG}:lock.
 * `buf` must hold 160 bytes. */
char *h_key_lock(char *buf, const char *sku, int seg);

/* SET `key` `value` PX `px_ms` (NX when `nx`). Returns 0 when set, -1 otherwise. */
int h_redis_set_px(const h_redis *r, const char *key, const char *value, long px_ms,
                   bool nx);

/* GET `key` into `buf` (""/1 when the key does not exist). Returns 1 when it exists,
 * 0 when not, -1 on error. */
int h_redis_get(const h_redis *r, const char *key, char *buf, size_t len);

/* ---- redis-sentinel ----------------------------------------------------------- */

/* A redis-sentinel child ($REDIS_SENTINEL, else Debian's redis-sentinel from PATH) on
 * a free loopback port, with its own temp dir and config file: it monitors `name` at
 * 127.0.0.1:master_port with `quorum`, down-after-milliseconds 1000, failover-timeout
 * 2000; with `password` (may be NULL) its requirepass and the password it gives the
 * other sentinels. Started once it answers PING (after AUTH). NULL on failure. */
typedef struct h_sentinel h_sentinel;
h_sentinel *h_sentinel_start(int master_port, const char *name, int quorum,
                             const char *password);
int h_sentinel_port(const h_sentinel *s);
/* Stop by pid (SIGTERM, SIGKILL after 10 s), remove its dir, free. NULL is fine. */
void h_sentinel_free(h_sentinel *s);

/* ---- redis cluster ------------------------------------------------------------ */

/* A Redis Cluster of redis-server children: each an h_redis (its own temp dir, AOF
 * on, 127.0.0.1) started with --cluster-enabled yes, --cluster-config-file
 * <its dir>/nodes-<port>.conf and --cluster-node-timeout 1000. Ports are drawn from
 * 12000-21999, so every bus port (port + 10000) lies in 22000-31999: both below the
 * kernel's default ephemeral range (32768-60999, where a connection's local port can
 * make a bind fail) and below 55535. Each port and its bus port are checked free by
 * binding them first. */
typedef struct h_cluster h_cluster;

/* Start masters * (1 + replicas_per_master) nodes, join them with `redis-cli --cluster
 * create ... --cluster-replicas N --cluster-yes` ($REDIS_CLI or redis-cli; masters must
 * be at least 3, its minimum), and wait until every node says cluster_state:ok, sees
 * `masters` masters and the replicas without a failure flag, every replica's link to
 * its master is up and no node is rewriting its AOF (a replica does after its first
 * sync, and ignores SIGTERM meanwhile). Nodes also get --repl-diskless-sync-delay 0,
 * so that first sync starts at once. Bounded (about a minute at worst); NULL after
 * tearing down what started, with the reason printed. Free with h_cluster_free. */
h_cluster *h_cluster_start(int masters, int replicas_per_master);

/* How many nodes; node i's port (0 <= i < size), in the order given to redis-cli,
 * which makes the first `masters` of them the masters; node i itself (borrowed: for
 * h_redis_connect, h_redis_pause, ...). */
int h_cluster_size(const h_cluster *c);
int h_cluster_port(const h_cluster *c, int i);
h_redis *h_cluster_node(const h_cluster *c, int i);
/* The node that masters `key` now: the one that answers EXISTS without a redirect;
 * -1 when none does. */
int h_cluster_master_of(const h_cluster *c, const char *key);

/* Stop every node (by pid: SIGTERM, SIGKILL after 10 s), remove their dirs, free.
 * NULL is fine. */
void h_cluster_free(h_cluster *c);

/* A command on a fresh connection to 127.0.0.1:port (2 s timeouts), closed after:
 * the reply (caller frees), or NULL with the reason printed. */
redisReply *h_port_command(int port, const char *fmt, ...);
redisReply *h_port_vcommand(int port, const char *fmt, va_list ap);

/* ---- inventoryd --------------------------------------------------------------- */

typedef struct h_svc h_svc;

struct h_svc_opts {
    const char *config_json; /* contents of the --config file; NULL: "{}" */
    const char *const *args; /* extra arguments, NULL-terminated; may be NULL */
    const char *const *env;  /* extra "NAME=value" entries, NULL-terminated */
    int port;                /* port to wait on; 0: pick a free one */
    bool no_port_flag;       /* do not pass --port (config/env decide; set .port) */
    bool no_redis_flag;      /* do not pass --redis */
    int start_timeout_ms;    /* how long to wait for /livez 200; 0: 15000 */
};

/* Start $INVENTORYD (default build/inventoryd) with
 *   --config FILE [--port P] --bind 127.0.0.1 [--redis 127.0.0.1:RPORT] <args...>
 * and wait until GET /livez answers 200. `r` may be NULL (no --redis). stdout and
 * stderr go to a log file in the service's temp dir (h_svc_dump_log). NULL on
 * failure, after printing the log. Free with h_svc_free(). */
h_svc *h_svc_start(const h_redis *r, const struct h_svc_opts *opts);

/* Shorthand: default options plus `args` (NULL-terminated, may be NULL). */
h_svc *h_svc_start_args(const h_redis *r, const char *const *args);

int h_svc_port(const h_svc *s);
/* The service's process id (for /proc/<pid>/status), 0 once it has been reaped. */
int h_svc_pid(const h_svc *s);

/* SIGTERM and wait up to 10 s, then SIGKILL. Returns the exit status as h_run_cmd. */
int h_svc_stop(h_svc *s);
int h_svc_kill(h_svc *s);
int h_svc_pause(h_svc *s);
int h_svc_resume(h_svc *s);

/* True while the child has not exited (waitpid WNOHANG; reaps it if it has). */
bool h_svc_alive(h_svc *s);

/* Print the last `max_bytes` of the service's log to stderr. */
void h_svc_dump_log(const h_svc *s, size_t max_bytes);

/* Stop if running, remove its temp dir, free. NULL is fine. */
void h_svc_free(h_svc *s);

/* Stop `s` (SIGTERM, as h_svc_stop) and judge how it went: 0 when it was still running
 * and then exited 0 -- a sanitizer report makes that exit non-zero -- else -1 after
 * dumping the tail of its log (4000 bytes when it had already died, 8000 when the exit
 * was not clean). `s` is not freed (h_svc_free). NULL: 0. A -1 is remembered for
 * h_exit_status. Call it from the test's main thread. */
int h_svc_stop_clean(h_svc *s);

/* ---- group fixture ------------------------------------------------------------ */

/* What most integration groups share: one redis-server and one inventoryd on it.
 * A file that needs more (a second instance, a direct connection) wraps it. */
struct h_env {
    h_redis *redis;
    h_svc *svc; /* NULL after h_env_start_redis */
    int port;   /* svc's HTTP port; 0 without a service */
};

/* Start a redis-server and an inventoryd on it with default options plus `args`
 * (as h_svc_start_args; NULL-terminated, may be NULL). Returns a malloc'd env, or
 * NULL after freeing whatever had started. Caller ends it with h_env_stop (or
 * h_env_free). */
struct h_env *h_env_start(const char *const *args);

/* The same with the redis-server only: svc NULL, port 0. */
struct h_env *h_env_start_redis(void);

/* The group teardown: h_svc_stop_clean on the service, then free everything as
 * h_env_free. Returns 0, or -1 when the service had died or did not exit 0 on SIGTERM
 * (its log dumped). NULL: 0. */
int h_env_stop(struct h_env *e);

/* Stop the service and redis-server without judging the exit, remove their temp dirs
 * and free `e`. NULL is fine. */
void h_env_free(struct h_env *e);

/* What the Redis Cluster groups share: a cluster (h_cluster_start) and an inventoryd
 * seeded with its node 0, which finds it to be a cluster. NULL after tearing down what
 * started. End with h_cluster_env_stop (judged as h_env_stop). */
struct h_cluster_env {
    h_cluster *cluster;
    h_svc *svc;
    int port; /* svc's HTTP port */
};
struct h_cluster_env *h_cluster_env_start(int masters, int replicas_per_master);
int h_cluster_env_stop(struct h_cluster_env *e);
/* The cluster suites' cmocka group setup and teardown: within a 120 s deadline, 3
 * masters with a replica each and the service (*state: the h_cluster_env). */
int h_cluster_group_setup(void **state);
int h_cluster_group_teardown(void **state);

/* What main returns: 1 when cmocka reported `failed` tests or any h_svc_stop_clean in
 * this process returned -1, else 0. cmocka 1.1.5 reports a failed group teardown but
 * still counts 0 failed tests, so the teardown's verdict has to be carried this way. */
int h_exit_status(int failed);

/* ---- HTTP client -------------------------------------------------------------- */

struct h_resp {
    int status;    /* HTTP status; -1 when no response could be read */
    char *headers; /* raw header block (after the status line), malloc'd */
    char *body;    /* body, NUL-terminated, malloc'd ("" when none) */
    size_t body_len;
    char content_type[128]; /* header values, "" when absent */
    char retry_after[64];
    char allow[128];
    char etag[64];      /* the ETag header, quotes and all */
    char location[192]; /* the Location header */
    char err[160];      /* why status is -1 */
};

/* Receive/send timeout of every request, default 30000 ms. Set before threads start. */
void h_http_set_timeout(int ms);

/* Send one request to 127.0.0.1:port. `headers` is "Name: value\r\n" lines or NULL;
 * Host, Connection: close and (when body != NULL) Content-Length are added. Always
 * fills `out` (free with h_resp_free) and returns out->status. */
int h_http(int port, const char *method, const char *path, const char *headers,
           const char *body, size_t body_len, struct h_resp *out);

/* Like h_http with a JSON body: adds Content-Type: application/json when `json` is
 * not NULL and Authorization: Bearer `token` when `token` is not NULL. */
int h_req(int port, const char *method, const char *path, const char *token,
          const char *json, struct h_resp *out);

/* Send raw bytes as they are, optionally half-close, and read whatever comes back.
 * Returns out->status (-1 when the server just closed). */
int h_http_raw(int port, const void *bytes, size_t len, bool shut_wr, struct h_resp *out);

void h_resp_free(struct h_resp *r);

/* Parse the body; new reference or NULL (with the reason printed). */
json_t *h_resp_json(const struct h_resp *r);

/* 0 when `r` is status `status` with Content-Type application/json and a body that
 * is exactly {"error": <string>, "detail": <string>} with error == `code` (any
 * non-empty code when NULL); else prints what differs and returns -1. */
int h_expect_error(const struct h_resp *r, int status, const char *code);

/* ---- domain helpers ----------------------------------------------------------- */

/* PUT /admin/skus/SKU?reset=true {"stock","segments","mode","hold_ms"}: creates it,
 * or resets it whatever it holds; 0 on 201 (created) or 200 (reset). */
int h_put_sku(int port, const char *token, const char *sku, long long stock, int segments,
              const char *mode, int hold_ms);

/* h_put_sku with a lock scheme or service ("lock"; NULL: omitted). */
int h_put_sku_lock(int port, const char *token, const char *sku, long long stock,
                   int segments, const char *mode, const char *lock, int hold_ms);

/* PUT /admin/skus/SKU?reset=true with the JSON `body`; 0 on 201 or 200 (what else came
 * back is printed). */
int h_put_sku_body(int port, const char *token, const char *sku, const char *body);

/* GET /admin/skus/SKU parsed; new reference or NULL. */
json_t *h_get_sku(int port, const char *token, const char *sku);

/* GET /admin/stats and return counter `name` (-1 on error or when absent). */
long long h_stat(int port, const char *token, const char *name);

/* POST /orders {"sku","qty"[,"order_id"]} (order_id NULL: omitted). Returns the
 * status; `out` may be NULL. */
int h_order(int port, const char *sku, long long qty, const char *order_id,
            struct h_resp *out);

/* The value of the sample line of a GET /metrics body `text` that starts with `series`
 * followed by a space (e.g. `x_total{a="b"}`); -1 when absent or unparsable. */
double h_metric(const char *text, const char *series);

/* The integer member `key` of object `o`; -1 when it is missing or not an integer. */
long long h_jint(const json_t *o, const char *key);

/* GET /orders/ID and return the status: 200 when the order exists, 404 when not. */
int h_order_status(int port, const char *id);

/* Copy the "error" code of an error reply into `buf` ("" when `r` is not an error,
 * "?" when its body has no code). Returns buf. */
char *h_error_code(const struct h_resp *r, char *buf, size_t len);

/* Audit a SKU through GET /admin/skus/SKU: remaining + sold == initial, every
 * segment_stock >= 0, sum(segment_stock) == remaining, sum(segment_sold) == sold
 * (when present), both arrays have `segments` entries, and -- when every order was
 * qty 1 (`unit_orders`) -- orders == sold. When `initial` >= 0 it must match too.
 * Returns 0, or -1 after printing each violation. */
int h_audit(int port, const char *token, const char *sku, long long initial,
            bool unit_orders);

/* Run fn(idx, ctx) on `n` threads released together by a barrier; join them all.
 * Returns 0, or -1 when the threads could not be started. */
int h_parallel(int n, void (*fn)(int idx, void *ctx), void *ctx);

/* Sleep for `ms` milliseconds. */
void h_sleep_ms(long ms);

/* Monotonic milliseconds. */
long long h_now_ms(void);

#endif
