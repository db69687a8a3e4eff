/* main.c -- inventoryd: load the configuration, start the domain and the HTTP server,
 * wait for SIGINT/SIGTERM, shut down cleanly. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "api/server.h"
#include "segments/inventory.h"
#include "service/config.h"
#include "service/log.h"

#define INVENTORYD_VERSION "0.1.0"

extern char **environ;

/* Raise the open-file limit to the hard limit: every idle client connection holds
 * a socket, and there may be thousands. Failure is logged, not fatal. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        log_warn("getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
        return;
    }
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            log_warn("setrlimit(RLIMIT_NOFILE, %llu): %s", (unsigned long long)want,
                     strerror(errno));
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        log_debug("open file limit %llu", (unsigned long long)rl.rlim_cur);
}

int main(int argc, char **argv)
{
    struct cfg cfg;
    char err[512];
    if (cfg_load(argc, argv, environ, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "inventoryd: %s\n", err);
        return 2;
    }
    if (cfg.help) {
        cfg_usage(stdout, argv[0]);
        return 0;
    }
    if (cfg.version) {
        printf("inventoryd %s\n", INVENTORYD_VERSION);
        return 0;
    }
    if (cfg.check) {
        /* Like `nginx -t`: everything was validated by cfg_load(); say what would run. */
        cfg_print(stdout, &cfg);
        printf("inventoryd: configuration OK\n");
        return 0;
    }

    /* Block the stop signals before any thread starts, so every thread inherits the
     * mask and only sigwait() below ever sees them. SIGPIPE: a client that hangs up
     * must not kill the process. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    raise_nofile();

    struct inv_options opt = {
        .redis_host = cfg.redis_host,
        .redis_port = cfg.redis_port,
        .redis_unix = cfg.redis_unix,
        .redis_user = cfg.redis_user,
        .redis_password = cfg.redis_password,
        .redis_db = cfg.redis_db,
        .redis_timeout_ms = cfg.redis_timeout_ms,
        .lock_ttl_ms = cfg.lock_ttl_ms,
        .lock_wait_ms = cfg.lock_wait_ms,
        .meta_cache_ms = cfg.meta_cache_ms,
    };
    inv *v = inv_create(&opt, err, sizeof(err));
    if (v == NULL) {
        log_error("cannot start the inventory: %s", err);
        return 1;
    }
    struct api_server *srv = api_server_start(&cfg, v, err, sizeof(err));
    if (srv == NULL) {
        log_error("cannot start the HTTP server: %s", err);
        inv_free(v);
        return 1;
    }

    bool v6 = strchr(cfg.bind, ':') != NULL;
    log_info("inventoryd %s listening on http://%s%s%s:%d/ (redis %s:%d, %d workers%s%s)",
             INVENTORYD_VERSION, v6 ? "[" : "", cfg.bind, v6 ? "]" : "", cfg.port,
             cfg.redis_host, cfg.redis_port, cfg.threads,
             cfg.config_path[0] ? ", config " : "", cfg.config_path);

    int sig = 0;
    while (sigwait(&stop, &sig) != 0)
        ;
    log_info("received %s, shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");

    api_server_stop(srv);
    inv_free(v);
    log_info("stopped");
    return 0;
}
