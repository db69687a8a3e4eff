/* it_history_locks.c -- the history checker of it_history.c on SKUs whose segment
 * locks live in a lock service (ZooKeeper, RedLock over 3 masters, memcached), the
 * stock in one Redis, while each service is faulted and an instance frozen.
 *
 * One checker. This file defines HISTORY_LOCKS and includes tests/it_history.c, so the
 * clients, the log and every check are that file's, compiled once more; what is this
 * file's own is the fixture (one Redis for the stock, a ZooKeeper, three RedLock
 * masters without persistence, a memcached, and 3 instances started with all three
 * services) and the chaos. What differs under HISTORY_LOCKS there: the SKUs (l-zk,
 * l-redlock, l-mc, l-zk-twenty: `"mode": "lock"` with that `"lock"`, 1 to 20
 * segments; a reset keeps the service and never flips the mode, which a lock service
 * refuses), and each reset sends its "lock". Reservations are left out (a lock
 * service's SKU refuses them, docs/DESIGN.md).
 *
 * What is sent: every other kind (orders with ids, sent to 2-3 instances at once and
 * retried; cancels; restocks with request ids; rebalances; resets; delete + create),
 * as it_history does.
 *
 * The chaos, on the test's main thread: CLIENT KILL on the stock's Redis every 200-500
 * ms, and once each, in a seeded order at about 20, 35, 50 and 65% of the run:
 *  - ZooKeeper restarted (SIGTERM, started again on its data dir: sessions shorter
 *    than the outage expire, their holds are lost, the next holders' czxids higher);
 *  - two of the three RedLock masters restarted without persistence (the keys of
 *    locks held are forgotten: a second holder may win while the first still believes
 *    it holds, and the store's fence must refuse the first's write);
 *  - memcached restarted (every lock forgotten, the same double grant);
 *  - one instance frozen (SIGSTOP) for its lease plus 1 s with orders in flight, then
 *    resumed (its holds granted again meanwhile: its writes FENCED).
 * In the summary the service restarts count as "Redis restart(s)", the freeze as a
 * "replica freeze"; a line of its own names them and the instances' fenced rejections.
 *
 * `make soak LOCKS=1` runs it round after round (tests/soak.sh --locks).
 */
#include "tests/harness_lock.h"
#include "tests/harness_zk.h"

#define HISTORY_LOCKS 1
#define HISTORY_NAME "it_history_locks"
#define DEFAULT_OPS OPS_ALL
#define RETRY_UNKNOWN false
#define DEADLINE_EXTRA 90 /* ZooKeeper's start and restart, the freeze, the checks */
#define MODE_FLIP_PERCENT 0

#include "tests/it_history.c"

#define REDLOCK_NODES 3

struct lock_servers {
    h_zk *zk;
    h_redis *nodes[REDLOCK_NODES]; /* RedLock's masters, without persistence */
    char redlock[256];             /* "A,B,C" */
    h_memcached *mc;
};

static void lock_servers_free(struct lock_servers *l)
{
    if (l == NULL)
        return;
    h_zk_free(l->zk);
    for (int i = 0; i < REDLOCK_NODES; i++)
        h_redis_free(l->nodes[i]);
    h_memcached_free(l->mc);
    free(l);
}

/* The instances' arguments: it_history's (lock waits and TTLs differ) with fewer
 * event loops (each has a session or connection per service) and the services. */
static h_svc *start_instance(const h_redis *redis, const struct lock_servers *l, int i)
{
    const char *args[24];
    int n = 0;
    for (; svc_args[i][n] != NULL; n++)
        args[n] = strcmp(svc_args[i][n], "16") == 0 ? "4" : svc_args[i][n];
    args[n++] = "--zookeeper";
    args[n++] = h_zk_addr(l->zk);
    args[n++] = "--redlock";
    args[n++] = l->redlock;
    args[n++] = "--memcached";
    args[n++] = h_memcached_addr(l->mc);
    args[n] = NULL;
    return h_svc_start_args(redis, args);
}

static int group_setup(void **state)
{
    h_deadline(120);
    struct fixture *f = xmalloc(sizeof *f);
    *state = f;
    struct lock_servers *l = f->locks = xmalloc(sizeof *l);
    if ((f->redis = h_redis_start()) == NULL || (l->zk = h_zk_start()) == NULL ||
        (l->mc = h_memcached_start()) == NULL ||
        h_redlock_nodes_start(l->nodes, REDLOCK_NODES, false, l->redlock,
                              sizeof l->redlock) != 0)
        return -1;
    for (int i = 0; i < N_INST; i++)
        if ((f->svc[i] = start_instance(f->redis, l, i)) == NULL)
            return -1;
    return 0;
}

/* ---- chaos ------------------------------------------------------------------------- */

enum fault { F_ZK, F_REDLOCK, F_MEMCACHED, F_FREEZE, F__COUNT };

static const char *const fault_name[F__COUNT] = {
    "ZooKeeper restarted", "2 of 3 RedLock masters restarted without persistence",
    "memcached restarted", "an instance frozen past its lease"};

/* Fault `f`, logged (a restart as K_RESTART, the freeze as K_FREEZE; 0 or -1); a
 * fault that did not go as planned is also the run's chaos_error. */
static void chaos_fault(struct run *run, enum fault f, uint64_t *rng)
{
    struct lock_servers *l = run->locks;
    long long sent = run_now(run);
    int rc = 0;
    switch (f) {
    case F_ZK:
        rc = h_zk_restart(l->zk);
        break;
    case F_REDLOCK: {
        int keep = rng_below(rng, REDLOCK_NODES);
        for (int i = 0; i < REDLOCK_NODES; i++)
            if (i != keep)
                rc |= h_redis_restart(l->nodes[i]);
        break;
    }
    case F_MEMCACHED:
        rc = h_memcached_restart(l->mc);
        break;
    case F_FREEZE: {
        /* svc_args: instance i's --lock-ttl-ms; frozen for it plus 1 s */
        int i = rng_below(rng, N_INST), ttl = atoi(svc_args[i][5]);
        rc = h_svc_pause(run->svc[i]);
        h_sleep_ms(ttl + 1000);
        rc |= h_svc_resume(run->svc[i]);
        break;
    }
    default:
        break;
    }
    chaos_log(run, f == F_FREEZE ? K_FREEZE : K_RESTART, sent, rc != 0 ? -1 : 0);
    fprintf(stderr, HISTORY_NAME ": %.3f s: %s%s\n", sent / 1e6, fault_name[f],
            rc != 0 ? ": FAILED" : "");
    if (rc != 0 && run->chaos_error[0] == '\0')
        snprintf(run->chaos_error, sizeof run->chaos_error, "%s: failed", fault_name[f]);
}

/* CLIENT KILL every normal client of the stock's Redis but ours. */
static void chaos_kill(struct run *run, redisContext **rc)
{
    if (*rc == NULL && (*rc = h_redis_connect(run->redis)) == NULL)
        return;
    long long sent = run_now(run);
    redisReply *r = redisCommand(*rc, "CLIENT KILL TYPE normal SKIPME yes");
    chaos_log(run, K_KILL, sent,
              r != NULL && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1);
    if (r != NULL) {
        freeReplyObject(r);
    } else {
        redisFree(*rc);
        *rc = NULL;
    }
}

/* Kill the stock's Redis clients every 200-500 ms until the end; each fault once, in a
 * seeded order, at 20, 35, 50 and 65% of the run. */
static void chaos_main(struct run *run)
{
    uint64_t rng = rng_seed(run->seed, N_CLIENTS);
    enum fault order[F__COUNT] = {F_ZK, F_REDLOCK, F_MEMCACHED, F_FREEZE};
    for (int i = F__COUNT - 1; i > 0; i--) {
        int j = rng_below(&rng, i + 1);
        enum fault t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    redisContext *rc = NULL;
    int next = 0;
    for (;;) {
        long long wake = run_now(run) + rng_range(&rng, 200, 500) * 1000LL;
        if (wake >= run->end)
            break;
        if (wake > run_now(run))
            sleep_us(wake - run_now(run));
        if (next < F__COUNT && run_now(run) >= run->end * (20 + 15 * next) / 100)
            chaos_fault(run, order[next++], &rng);
        else
            chaos_kill(run, &rc);
    }
    if (rc != NULL)
        redisFree(rc);
    long long n[4] = {0};
    static const char *const stat[4] = {"lock_acquired", "fenced_rejections",
                                        "lease_lost", "orders_backend_unavailable"};
    for (int i = 0; i < N_INST; i++)
        for (int k = 0; k < 4; k++)
            n[k] += h_stat(run->port[i], NULL, stat[k]);
    fprintf(stderr,
            HISTORY_NAME ": faults done %d of %d; the instances counted %lld locks "
                         "granted, %lld fenced rejections, %lld leases lost, %lld orders "
                         "503 backend_unavailable\n",
            next, F__COUNT, n[0], n[1], n[2], n[3]);
    if (next < F__COUNT && run->chaos_error[0] == '\0')
        snprintf(run->chaos_error, sizeof run->chaos_error,
                 "only %d of %d faults ran (a run too short?)", next, F__COUNT);
}
