/* it_history_cluster.c -- the history checker of it_history.c on a Redis Cluster (3
 * masters, a replica each) with every SKU "replicated", while masters are SIGKILLed
 * and replicas frozen.
 *
 * One checker. This file defines HISTORY_CLUSTER and includes tests/it_history.c, so
 * the clients, the log and every check are that file's, compiled once more; what is
 * this file's own is the fixture (the cluster and three instances, each seeded with
 * another master) and the chaos (below). What differs under HISTORY_CLUSTER there:
 * the SKUs (c-one, c-four, c-twenty, c-atomic: the same shapes, durability
 * "replicated", more stock), 503 not_replicated is an allowed answer, and an order or
 * cancel answered 503 (or not at all) is retried under its id until the answer is
 * definite, as a client must (the retry's answer is what the checks judge).
 *
 * The chaos, on the test's main thread: after 1.5-3 s of quiet, one fault, then again
 * until the end, the first of them a failover of a random master:
 *  - failover, quiet (the default): the clients finish their ops in flight and wait
 *    while CLUSTER FAILOVER runs on the replica (the master hands over once the
 *    replica has all it acknowledged); the old master stays up as a replica; the next
 *    fault waits until it is a synced one;
 *  - failover, graceful (HISTORY_FAULTS=graceful): the same with ops in flight;
 *  - failover, graceful then killed (HISTORY_FAULTS=kill): the same, then the old
 *    master SIGKILLed and restarted, so commands in flight on its connections are cut;
 *  - failover, hard (HISTORY_FAULTS=hard, or HISTORY_CLUSTER_ALL=1): the replica
 *    frozen (SIGSTOP) and its link cut (CLIENT KILL TYPE replica on the master) for
 *    300 ms, so the master acknowledges what no replica has (a replicated write must
 *    then answer 503, never 2xx); the master SIGKILLed, the replica resumed and
 *    promoted; the old master restarted and rejoining as a replica;
 *  - freeze: the same 300 ms freeze and cut, then the replica resumed, no kill.
 *
 * What is sent. By default orders (with ids, qty 1 to 14 so some take several
 * segments, retried, sent to 2-3 instances at once) and rebalances, with quiet
 * failovers: what holds on main today (make test). HISTORY_CLUSTER_ALL=1 sends every
 * kind it_history does (also cancels; restocks with a request id, retried after a 503
 * under it; resets; delete + create) with hard failovers; HISTORY_OPS (e.g.
 * HISTORY_OPS=order,cancel,restock,rebalance,reset,delete) and HISTORY_FAULTS choose
 * each separately. Those find defects on main (docs/DESIGN.md, "Keeping stock exact":
 * issue 21's restock, rebalance and cancel across a failover, and the order path's),
 * so DEFAULT_OPS and DEFAULT_FAILOVER become OPS_ALL and FO_HARD once they are fixed.
 * Async SKUs are left out: losing an acknowledged async write in a failover is what
 * async means, and the checks count any loss.
 *
 * `make soak CLUSTER=1` runs it round after round (tests/soak.sh --cluster).
 */
#define HISTORY_CLUSTER 1
#define HISTORY_NAME "it_history_cluster"
#define DEFAULT_OPS ((1u << K_ORDER) | (1u << K_REBALANCE)) /* OPS_ALL once fixed */
#define RETRY_UNKNOWN true
#define DEADLINE_EXTRA 200 /* a failover may take 30 s to promote, 30 s to rejoin */

#include "tests/it_history.c"

/* The failovers without HISTORY_FAULTS: FO_QUIET until the defects the header names
 * are fixed; then FO_HARD, and make test runs them. */
#define DEFAULT_FAILOVER FO_QUIET
#define FREEZE_MS 300
#define FAULT_WAIT_MS 30000 /* a promotion or a rejoin not done by then is a failure */

static int group_setup(void **state)
{
    h_deadline(150);
    struct fixture *f = xmalloc(sizeof *f);
    *state = f;
    f->cluster = h_cluster_start(3, 1);
    if (f->cluster == NULL)
        return -1;
    for (int i = 0; i < N_INST; i++)
        if ((f->svc[i] = h_svc_start_args(h_cluster_node(f->cluster, i), svc_args[i])) ==
            NULL)
            return -1;
    return 0;
}

/* The cluster index of the node at `port`, or -1. */
static int node_at(const h_cluster *c, long port)
{
    for (int i = 0; i < h_cluster_size(c); i++)
        if (h_cluster_port(c, i) == port)
            return i;
    return -1;
}

/* Node i's ROLE: 'm' a master (*replica: the node of its first connected replica, or
 * -1), 's' a replica whose link to its master is up, 'x' anything else. */
static char role_of(const h_cluster *c, int i, int *replica)
{
    redisReply *r = h_port_command(h_cluster_port(c, i), "ROLE");
    char role = 'x';
    if (replica != NULL)
        *replica = -1;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements >= 3 &&
        r->element[0]->type == REDIS_REPLY_STRING) {
        const char *name = r->element[0]->str;
        if (strcmp(name, "master") == 0) {
            role = 'm';
            const redisReply *reps = r->element[2];
            if (replica != NULL && reps->type == REDIS_REPLY_ARRAY &&
                reps->elements > 0 && reps->element[0]->type == REDIS_REPLY_ARRAY &&
                reps->element[0]->elements >= 2 &&
                reps->element[0]->element[1]->type == REDIS_REPLY_STRING)
                *replica =
                    node_at(c, strtol(reps->element[0]->element[1]->str, NULL, 10));
        } else if (strcmp(name, "slave") == 0 && r->elements >= 4 &&
                   r->element[3]->type == REDIS_REPLY_STRING &&
                   strcmp(r->element[3]->str, "connected") == 0) {
            role = 's';
        }
    }
    if (r != NULL)
        freeReplyObject(r);
    return role;
}

/* A random master with a connected replica: 0, or -1 when none has one. */
static int pick_shard(const h_cluster *c, uint64_t *rng, int *master, int *replica)
{
    int n = h_cluster_size(c), first = rng_below(rng, n);
    for (int k = 0; k < n; k++) {
        int i = (first + k) % n, rep;
        if (role_of(c, i, &rep) == 'm' && rep >= 0) {
            *master = i;
            *replica = rep;
            return 0;
        }
    }
    return -1;
}

/* Poll node i until its role is `want` (`limit_ms` at most): 0, or -1. */
static int await_role(const h_cluster *c, int i, char want, long long limit_ms,
                      long long *ms)
{
    long long t0 = h_now_ms();
    while (role_of(c, i, NULL) != want) {
        if (h_now_ms() - t0 > limit_ms)
            return -1;
        h_sleep_ms(50);
    }
    *ms = h_now_ms() - t0;
    return 0;
}

/* Freeze node `replica` and cut its link from node `master` for FREEZE_MS; with
 * `kill`, SIGKILL the master before the replica resumes. */
static void freeze_and_cut(const h_cluster *c, int master, int replica, bool kill)
{
    h_redis_pause(h_cluster_node(c, replica));
    redisReply *r = h_port_command(h_cluster_port(c, master), "CLIENT KILL TYPE replica");
    if (r != NULL)
        freeReplyObject(r);
    h_sleep_ms(FREEZE_MS);
    if (kill)
        h_redis_kill(h_cluster_node(c, master));
    h_redis_resume(h_cluster_node(c, replica));
}

/* How a failover goes. */
enum fo_mode {
    FO_QUIET,    /* FO_GRACEFUL with no client op in flight (they wait meanwhile) */
    FO_GRACEFUL, /* CLUSTER FAILOVER on the replica: the master hands over once the
                    replica has all it acknowledged; the old master stays up */
    FO_KILL,     /* the same, then the old master (a replica now) SIGKILLed and
                    restarted: what was in flight on its connections is cut */
    FO_HARD,     /* the replica cut off, the master SIGKILLed, the replica promoted,
                    the old master restarted */
};
static const char *const fo_name[] = {"quiet", "graceful", "graceful+kill", "hard"};

/* HISTORY_CLUSTER_ALL=1: hard; else HISTORY_FAULTS (quiet, graceful, kill or hard);
 * else DEFAULT_FAILOVER. */
static enum fo_mode fo_mode(void)
{
    const char *all = getenv("HISTORY_CLUSTER_ALL"), *faults = getenv("HISTORY_FAULTS");
    if (all != NULL && strcmp(all, "1") == 0)
        return FO_HARD;
    if (faults != NULL && strcmp(faults, "hard") == 0)
        return FO_HARD;
    if (faults != NULL && strcmp(faults, "kill") == 0)
        return FO_KILL;
    if (faults != NULL && strcmp(faults, "graceful") == 0)
        return FO_GRACEFUL;
    if (faults != NULL && strcmp(faults, "quiet") == 0)
        return FO_QUIET;
    return DEFAULT_FAILOVER;
}

/* The graceful handover: 0 (*ms: until the replica was a master), or -1 when the
 * replica refused or was not promoted three times (a manual failover gives up after
 * 5 s when the replica cannot catch up meanwhile). */
static int hand_over(const h_cluster *c, int replica, long long *ms)
{
    int rc = -1;
    long long t0 = h_now_ms();
    for (int attempt = 0; attempt < 3 && rc != 0; attempt++) {
        redisReply *r = h_port_command(h_cluster_port(c, replica), "CLUSTER FAILOVER");
        rc = r != NULL && r->type == REDIS_REPLY_STATUS ? 0 : -1;
        if (r != NULL)
            freeReplyObject(r);
        if (rc == 0)
            rc = await_role(c, replica, 'm', 8000, ms);
    }
    *ms = h_now_ms() - t0;
    return rc;
}

/* A failover of `master` to `replica` in mode m: NULL, or what went wrong. */
static const char *fail_over(const h_cluster *c, enum fo_mode m, int master, int replica,
                             long long *promoted, long long *rejoined)
{
    if (m == FO_HARD) {
        freeze_and_cut(c, master, replica, true);
        if (await_role(c, replica, 'm', FAULT_WAIT_MS, promoted) != 0)
            return "the replica was not promoted";
    } else if (hand_over(c, replica, promoted) != 0) {
        return "CLUSTER FAILOVER was refused or did not promote the replica";
    } else if (m == FO_KILL) {
        h_redis_kill(h_cluster_node(c, master));
    }
    if (m != FO_GRACEFUL && h_redis_restart(h_cluster_node(c, master)) != 0)
        return "the old master did not restart";
    if (await_role(c, master, 's', FAULT_WAIT_MS, rejoined) != 0)
        return "the old master did not become a synced replica";
    return NULL;
}

/* One fault (failover or freeze), logged; run->chaos_error says what went wrong. */
static void fault(struct run *run, uint64_t *rng, bool failover)
{
    const h_cluster *c = run->cluster;
    long long sent = run_now(run), promoted = 0, rejoined = 0;
    int master = -1, replica = -1;
    enum fo_mode m = fo_mode();
    const char *why = NULL;
    if (pick_shard(c, rng, &master, &replica) != 0)
        why = "no master has a connected replica";
    else if (!failover)
        freeze_and_cut(c, master, replica, false);
    else if (m != FO_QUIET)
        why = fail_over(c, m, master, replica, &promoted, &rejoined);
    else {
        pthread_rwlock_wrlock(&run->pause);
        why = fail_over(c, m, master, replica, &promoted, &rejoined);
        pthread_rwlock_unlock(&run->pause);
    }
    chaos_log(run, failover ? K_FAILOVER : K_FREEZE, sent, why == NULL ? 0 : -1);
    if (why != NULL && run->chaos_error[0] == '\0')
        snprintf(run->chaos_error, sizeof run->chaos_error, "%s at %.3f ms: %s",
                 failover ? "failover" : "freeze", sent / 1000.0, why);
    if (failover && why == NULL)
        fprintf(stderr,
                HISTORY_NAME ": %.1f s: %s failover of master :%d, replica :%d promoted "
                             "after %lld ms; the old master a synced replica %lld ms "
                             "later\n",
                sent / 1e6, fo_name[m], h_cluster_port(c, master),
                h_cluster_port(c, replica), promoted, rejoined);
}

/* Faults until run->end: the first a failover, then a failover or a freeze (even
 * odds), each after 1.5-3 s of quiet; no failover is started in the last 3 s (its
 * restart would outlast the clients). Stops at the first fault that failed. */
static void chaos_main(struct run *run)
{
    uint64_t rng = rng_seed(run->seed, N_CLIENTS);
    for (int n = 0; run->chaos_error[0] == '\0'; n++) {
        long long wake = run_now(run) + rng_range(&rng, 1500, 3000) * 1000LL;
        if (wake >= run->end)
            break;
        sleep_us(wake - run_now(run));
        bool failover = n == 0 || rng_below(&rng, 2) == 0;
        if (failover && run_now(run) > run->end - 3000000LL)
            failover = false;
        fault(run, &rng, failover);
    }
    if (run_now(run) < run->end)
        sleep_us(run->end - run_now(run));
}
