/* harness_zk.h -- integration-test harness for ZooKeeper: a real standalone server
 * (the Debian `zookeeper` package's jars run by java) on 127.0.0.1 and a free client
 * port, and a few blocking client calls to look at what the code under test left in
 * it.
 *
 * Server. h_zk_start writes a zoo.cfg into a fresh temp dir (h_tempdir: removed at
 * exit): dataDir there, clientPort free, clientPortAddress=127.0.0.1, tickTime 100 ms
 * (sessions of 200 ms .. 60 s), no admin server, no four-letter words, forceSync=no
 * (a test needs no fsync). It runs `java -cp CLASSPATH
 * org.apache.zookeeper.server.quorum.QuorumPeerMain zoo.cfg`, CLASSPATH being the one
 * the package gives its scripts (the CLASSPATH= line of /etc/zookeeper/conf/environment,
 * else /usr/share/java/zookeeper.jar; $ZK_CLASSPATH and $JAVA override), its output in
 * zk.log beside zoo.cfg (a server that exits at start, its port taken meanwhile, is
 * tried again on another port). Started once a client session connects (60 s). Java
 * starts slowly: start one server per test binary. The child gets
 * PR_SET_PDEATHSIG=SIGKILL and is killed at exit if still running, so a failing test
 * leaves none behind; start it from the test's main thread.
 *
 * Client calls open a session of their own (4 s), drive it with poll() until the
 * answer, and close it. They print the reason with a "harness_zk:" prefix on failure.
 */
#ifndef TESTS_HARNESS_ZK_H
#define TESTS_HARNESS_ZK_H

#include <stdint.h>

typedef struct h_zk h_zk;

/* Start a server and wait until it takes a session. NULL on failure (its log printed). */
h_zk *h_zk_start(void);

int h_zk_port(const h_zk *z);
/* "127.0.0.1:PORT", valid as long as `z` is. */
const char *h_zk_addr(const h_zk *z);

/* Stop by pid: SIGCONT, SIGTERM, SIGKILL after 10 s. 0, or -1 when it was not running. */
int h_zk_stop(h_zk *z);
/* Start again on the same port and data dir (sessions and nodes survive, as after a
 * restart of a real server) and wait until it takes a session. 0 or -1. */
int h_zk_restart(h_zk *z);
/* SIGSTOP / SIGCONT: a hung server that keeps its connections open. */
int h_zk_pause(h_zk *z);
int h_zk_resume(h_zk *z);
/* Stop if running and free (the temp dir goes at exit). NULL is fine. */
void h_zk_free(h_zk *z);

/* How many children `path` has (0 when it does not exist); -1 on error. */
int h_zk_count_children(const h_zk *z, const char *path);
/* The children's names, sorted (a malloc'd array of malloc'd strings, caller frees
 * with h_zk_free_names); count in *n. 0, or -1 on error (ZNONODE: 0 with none). */
int h_zk_children(const h_zk *z, const char *path, char ***names, int *n);
void h_zk_free_names(char **names, int n);
/* The czxid of node `path`; -1 when it does not exist or on error. */
long long h_zk_czxid(const h_zk *z, const char *path);

/* Expire session `id` the classic way: connect a second client with its id and
 * password (the server moves the session to it), then close that client, which ends
 * the session. 0 once the close is sent; -1 when the session could not be taken. */
int h_zk_expire(const h_zk *z, int64_t id, const char passwd[16]);

#endif
