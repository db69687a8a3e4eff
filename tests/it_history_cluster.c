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
 * until the end, the first of them a failover:
 *  - failover, graceful by default: CLUSTER FAILOVER on a random master's replica (the
 *    master hands over once the replica has all it acknowledged), then the old master
 *    SIGKILLed and restarted; the next fault waits until it is a synced replica;
 *  - failover, hard (HISTORY_FAULTS=hard, or HISTORY_CLUSTER_ALL=1): the replica
 *    frozen (SIGSTOP) and its link cut (CLIENT KILL TYPE replica on the master) for
 *    300 ms, so the master acknowledges what no replica has (a replicated write must
 *    then answer 503, never 2xx); the master SIGKILLed, the replica resumed and
 *    promoted; the old master restarted as above;
 *  - freeze: the same 300 ms freeze and cut, then the replica resumed, no kill.
 *
 * What is sent. The clients send every kind it_history does (orders with ids, some
 * multi-segment, retried and sent to 2-3 instances at once; cancels; restocks with a
 * request id, retried after a 503 under it; rebalances; resets and delete + create).
 * By default the failovers are graceful and the replica freezes end without a kill:
 * every write must then hold, and does on main today (make test). Hard failovers are
 * on with HISTORY_FAULTS=hard or HISTORY_CLUSTER_ALL=1: issue 21 names three defects
 * of replicated writes across one (a restock invents stock; a PUT loses segments; a
 * cancel loses units), and they show two more on the order path (docs/DESIGN.md,
 * "Keeping stock exact"), so the lead turns them on once those are fixed. HISTORY_OPS
 * (e.g. HISTORY_OPS=order,restock) narrows the kinds, to tell the defects apart.
 * Async SKUs are left out: losing an acknowledged async write in a failover is what
 * async means, and the checks count any loss.
 *
 * `make soak CLUSTER=1` runs it round after round (tests/soak.sh --cluster).
 */
#define HISTORY_CLUSTER 1
#define HISTORY_NAME "it_history_cluster"
#define DEFAULT_OPS OPS_ALL
#define RETRY_UNKNOWN true
#define DEADLINE_EXTRA 200 /* a failover may take 30 s to promote, 30 s to rejoin */

#include "tests/it_history.c"

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

/* Hard failovers (HISTORY_FAULTS=hard, or HISTORY_CLUSTER_ALL=1): the master is
 * SIGKILLed while its replica is cut off. Else graceful ones: CLUSTER FAILOVER on the
 * replica (the master hands over once the replica has everything it acknowledged),
 * then the old master SIGKILLed and restarted all the same. */
static bool hard_faults(void)
{
    const char *all = getenv("HISTORY_CLUSTER_ALL"), *faults = getenv("HISTORY_FAULTS");
    return (all != NULL && strcmp(all, "1") == 0) ||
           (faults != NULL && strcmp(faults, "hard") == 0);
}

/* The graceful handover, then the old master killed: 0 (*ms: until the replica was a
 * master), or -1 when the replica refused or was not promoted three times (a manual
 * failover gives up after 5 s when the replica cannot catch up meanwhile). */
static int hand_over(const h_cluster *c, int master, int replica, long long *ms)
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
    if (rc == 0)
        h_redis_kill(h_cluster_node(c, master));
    return rc;
}

/* One fault (failover or freeze), logged; run->chaos_error says what went wrong. */
static void fault(struct run *run, uint64_t *rng, bool failover)
{
    const h_cluster *c = run->cluster;
    long long sent = run_now(run), promoted = 0, rejoined = 0;
    int master = -1, replica = -1, rc = -1;
    bool hard = hard_faults();
    const char *why = NULL;
    if (pick_shard(c, rng, &master, &replica) != 0) {
        why = "no master has a connected replica";
    } else if (!failover) {
        freeze_and_cut(c, master, replica, false);
        rc = 0;
    } else if (!hard && hand_over(c, master, replica, &promoted) != 0) {
        why = "CLUSTER FAILOVER was refused or did not promote the replica";
    } else {
        if (hard)
            freeze_and_cut(c, master, replica, true);
        if (hard && await_role(c, replica, 'm', FAULT_WAIT_MS, &promoted) != 0)
            why = "the replica was not promoted";
        else if (h_redis_restart(h_cluster_node(c, master)) != 0)
            why = "the old master did not restart";
        else if (await_role(c, master, 's', FAULT_WAIT_MS, &rejoined) != 0)
            why = "the old master did not rejoin as a synced replica";
        else
            rc = 0;
    }
    chaos_log(run, failover ? K_FAILOVER : K_FREEZE, sent, rc);
    if (why != NULL && run->chaos_error[0] == '\0')
        snprintf(run->chaos_error, sizeof run->chaos_error, "%s at %.3f ms: %s",
                 failover ? "failover" : "freeze", sent / 1000.0, why);
    if (failover && why == NULL)
        fprintf(stderr,
                HISTORY_NAME
                ": %.1f s: %s failover: master :%d killed, replica :%d "
                "promoted after %lld ms; the old master a synced replica %lld "
                "ms after its restart\n",
                sent / 1e6, hard ? "hard" : "graceful", h_cluster_port(c, master),
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
