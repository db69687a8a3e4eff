/* metrics.c -- Prometheus text exposition of the process's counters (see metrics.h). */
#include "api/metrics.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "api/gauges.h"
#include "segments/ledger.h"
#include "segments/stats.h"

/* The build may set these (-DINVENTORYD_VERSION=\"1.2.3\" -DINVENTORYD_COMMIT=\"abc\");
 * the fallback version is service/main.c's, which tests/it_metrics.c compares with
 * `inventoryd --version`. */
#ifndef INVENTORYD_VERSION
#define INVENTORYD_VERSION "0.1.0"
#endif
#ifndef INVENTORYD_COMMIT
#define INVENTORYD_COMMIT ""
#endif

/* Upper bounds of the HTTP latency buckets, in microseconds. */
static const long long http_bounds_us[API_HTTP_BUCKETS] = {
    100,   250,    500,    1000,   2500,    5000,    10000,   25000,
    50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000};

static const char *const http_classes[API_HTTP_CLASSES] = {"2xx", "3xx", "4xx", "5xx"};

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- recording (HTTP threads) ------------------------------------------------- */

static int route_index(const struct api_route *route)
{
    size_t n;
    const struct api_route *all = api_routes(&n);
    if (route == NULL || route < all || route >= all + n)
        return API_ROUTES_MAX;
    return (int)(route - all);
}

/* True when `rep` is the backend_unavailable error (orders, admin, healthz all put
 * the code under "error" in compact JSON). Only 503 replies are looked into. */
static bool backend_unavailable(const struct api_reply *rep)
{
    if (rep->status != 503 || rep->body == NULL)
        return false;
    char needle[64];
    int n = snprintf(needle, sizeof needle, "\"error\":\"%s\"",
                     api_status_code(INV_UNAVAILABLE));
    return n > 0 && memmem(rep->body, rep->body_len, needle, (size_t)n) != NULL;
}

void api_http_observe(struct api_http_stats *h, const struct api_route *route,
                      const struct api_reply *rep, const struct timespec *started,
                      bool on_worker)
{
    long long now = now_us();
    long long us = now - ((long long)started->tv_sec * 1000000 + started->tv_nsec / 1000);
    if (us < 0)
        us = 0;
    int r = route_index(route);
    int c = rep->status / 100 - 2;
    if (c < 0 || c >= API_HTTP_CLASSES)
        c = API_HTTP_CLASSES - 1;
    int b = 0;
    while (b < API_HTTP_BUCKETS && us > http_bounds_us[b])
        b++;
    atomic_fetch_add_explicit(&h->requests[r][c], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->bucket[r][b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us[r], us, memory_order_relaxed);
    if (!on_worker)
        return;
    if (backend_unavailable(rep))
        atomic_store_explicit(&h->redis_fail_us, now, memory_order_relaxed);
    else if (rep->status != 503) /* busy and shutting_down say nothing of Redis */
        atomic_store_explicit(&h->redis_ok_us, now, memory_order_relaxed);
}

/* ---- rendering ------------------------------------------------------------------ */

/* A growing text buffer; out of memory aborts. */
struct text {
    char *buf;
    size_t len, cap;
};

static void put(struct text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void put(struct text *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        t->cap = t->cap * 2 + (n > 0 ? (size_t)n : 0);
        if ((t->buf = realloc(t->buf, t->cap)) == NULL) {
            fputs("inventoryd: out of memory\n", stderr);
            abort();
        }
    }
}

/* The HELP and TYPE lines of a family. */
static void family(struct text *t, const char *name, const char *type, const char *help)
{
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* `s` as a label value: backslash, double quote and newline escaped. */
static void put_label(struct text *t, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\' || *s == '"')
            put(t, "\\%c", *s);
        else if (*s == '\n')
            put(t, "\\n");
        else
            put(t, "%c", *s);
    }
}

/* "orders_sold_out" -> "sold_out"; stat ids below SKU_OUTCOMES all start so. */
static const char *outcome(enum stat_id id)
{
    return stat_name(id) + strlen("orders_");
}

static void build_info(struct text *t)
{
    family(t, "inventory_build_info", "gauge",
           "Always 1; the labels name the running build.");
    put(t, "inventory_build_info{version=\"");
    put_label(t, INVENTORYD_VERSION);
    put(t, "\",revision=\"");
    put_label(t, INVENTORYD_COMMIT);
    put(t, "\"} 1\n");
}

static void counters(struct text *t, inv *v)
{
    long long c[STAT__COUNT];
    stat_snapshot(v, c);
    family(t, "inventory_orders_total", "counter",
           "Orders by outcome (cancelled: orders cancelled afterwards).");
    for (int i = 0; i < SKU_OUTCOMES; i++)
        put(t, "inventory_orders_total{outcome=\"%s\"} %lld\n", outcome((enum stat_id)i),
            c[i]);
    for (int i = SKU_OUTCOMES; i < STAT__COUNT; i++) {
        char name[96];
        snprintf(name, sizeof name, "inventory_%s_total", stat_name((enum stat_id)i));
        family(t, name, "counter", stat_help((enum stat_id)i));
        put(t, "%s %lld\n", name, c[i]);
    }
}

/* The ledger's sink (segments/ledger.h), when the service has one. */
static void ledger_metrics(struct text *t, inv *v)
{
    struct ledger_stats s;
    if (!ledger_stats_of(v, &s))
        return;
    family(t, "inventory_ledger_events_copied_total", "counter",
           "Ledger events this process copied into PostgreSQL (committed).");
    put(t, "inventory_ledger_events_copied_total %lld\n", s.copied);
    family(t, "inventory_ledger_batches_total", "counter", "Ledger batches committed.");
    put(t, "inventory_ledger_batches_total %lld\n", s.batches);
    family(t, "inventory_ledger_failures_total", "counter",
           "Ledger batches not copied (Redis, PostgreSQL or WAIT failed); retried.");
    put(t, "inventory_ledger_failures_total %lld\n", s.failures);
    family(t, "inventory_ledger_records_retained_total", "counter",
           "Order records given their TTL once the ledger had them.");
    put(t, "inventory_ledger_records_retained_total %lld\n", s.retained);
    family(t, "inventory_ledger_backlog_events", "gauge",
           "Events in the ledger streams at the sink's last pass, not yet copied.");
    put(t, "inventory_ledger_backlog_events %lld\n", s.backlog);
    family(t, "inventory_ledger_lag_seconds", "gauge",
           "Age of the oldest event not yet copied at the sink's last pass.");
    put(t, "inventory_ledger_lag_seconds %.3f\n", (double)s.lag_ms / 1000.0);
}

static void histogram(struct text *t, inv *v, enum hist_id h)
{
    struct hist_snapshot s;
    stat_hist_snapshot(v, h, &s);
    char name[96];
    snprintf(name, sizeof name, "inventory_%s", hist_name(h));
    family(t, name, "histogram", hist_help(h));
    long long cumulative = 0;
    for (int b = 0; b < HIST_BUCKETS; b++) {
        cumulative += s.bucket[b];
        put(t, "%s_bucket{le=\"%g\"} %lld\n", name, hist_bounds()[b], cumulative);
    }
    put(t, "%s_bucket{le=\"+Inf\"} %lld\n", name, s.count);
    put(t, "%s_sum %.6f\n%s_count %lld\n", name, s.sum, name, s.count);
}

/* The text and the SKUs it shows (api/gauges.h). */
struct shown {
    struct text *t;
    const struct api_gauges_snap *snap;
};

static void sku_outcomes(const char *sku, const long long *outcomes, void *arg)
{
    const struct shown *sh = arg;
    struct text *t = sh->t;
    if (api_gauges_find(sh->snap, sku) == NULL) /* not among those shown, or deleted */
        return;
    for (int i = 0; i < SKU_OUTCOMES; i++) {
        put(t, "inventory_sku_orders_total{sku=\"");
        put_label(t, sku);
        put(t, "\",outcome=\"%s\"} %lld\n", outcome((enum stat_id)i), outcomes[i]);
    }
}

/* What the store held of the SKUs shown (api/gauges.h): stock, sold, initial, locks held,
 * and per segment for SKUs of at most metrics_segments_max segments. */
static void sku_gauges(struct text *t, const struct api_gauges_snap *snap)
{
    static const char *const names[] = {
        "inventory_sku_remaining", "inventory_sku_sold", "inventory_sku_initial",
        "inventory_sku_locks_held", "inventory_sku_reserved"};
    static const char *const helps[] = {
        "Units left in every segment of the SKU, as the store holds them.",
        "Units sold (confirmed and not cancelled), as the store holds them.",
        "The SKU's initial stock plus every restock.",
        "Segment locks of the SKU held right now, by any instance.",
        "Units held by reservations: remaining + reserved + sold = initial."};
    for (size_t f = 0; f < sizeof names / sizeof *names; f++) {
        family(t, names[f], "gauge", helps[f]);
        for (int i = 0; i < snap->n; i++) {
            const struct api_gauge_sku *e = &snap->sku[i];
            if (atomic_load_explicit(&e->gone, memory_order_relaxed))
                continue;
            long long v[] = {e->remaining, e->sold, e->initial, e->locks_held,
                             e->reserved};
            put(t, "%s{sku=\"", names[f]);
            put_label(t, e->sku);
            put(t, "\"} %lld\n", v[f]);
        }
    }
    family(t, "inventory_segment_stock", "gauge",
           "Units left per segment, for SKUs of at most metrics_segments_max segments.");
    for (int i = 0; i < snap->n; i++) {
        const struct api_gauge_sku *e = &snap->sku[i];
        if (e->segment_stock == NULL ||
            atomic_load_explicit(&e->gone, memory_order_relaxed))
            continue;
        for (int k = 0; k < e->segments; k++) {
            put(t, "inventory_segment_stock{sku=\"");
            put_label(t, e->sku);
            put(t, "\",segment=\"%d\"} %lld\n", k, e->segment_stock[k]);
        }
    }
    if (snap->read_ms == 0)
        return;
    family(t, "inventory_sku_gauges_age_seconds", "gauge",
           "Seconds since the per-SKU gauges were last read from the store.");
    put(t, "inventory_sku_gauges_age_seconds %.3f\n",
        (double)(now_us() / 1000 - snap->read_ms) / 1000);
}

/* inventory_store_up{store}, and on Redis inventory_redis_up (its older name). */
static void store_up(struct text *t, struct api_http_stats *h, const char *name)
{
    long long ok = atomic_load_explicit(&h->redis_ok_us, memory_order_relaxed);
    long long fail = atomic_load_explicit(&h->redis_fail_us, memory_order_relaxed);
    bool up = ok != 0 && ok >= fail &&
              now_us() - ok <= (long long)API_REDIS_UP_WINDOW_S * 1000000;
    char help[160];
    snprintf(help, sizeof help,
             "1 when the last request that called the store (label: redis or postgres), "
             "within the last %d s, got its answer; else 0.",
             API_REDIS_UP_WINDOW_S);
    family(t, "inventory_store_up", "gauge", help);
    put(t, "inventory_store_up{store=\"%s\"} %d\n", name, up ? 1 : 0);
    if (strcmp(name, "redis") != 0)
        return;
    snprintf(help, sizeof help,
             "1 when the last request that called Redis, within the last %d s, got its "
             "answer; else 0.",
             API_REDIS_UP_WINDOW_S);
    family(t, "inventory_redis_up", "gauge", help);
    put(t, "inventory_redis_up %d\n", up ? 1 : 0);
}

/* method="POST",route="/orders" of route row `r`. */
static void route_labels(struct text *t, const struct api_route *all, int r)
{
    if (r == API_ROUTES_MAX)
        put(t, "method=\"\",route=\"unmatched\"");
    else
        put(t, "method=\"%s\",route=\"%s\"", all[r].method, all[r].pattern);
}

static void http(struct text *t, struct api_http_stats *h)
{
    size_t n;
    const struct api_route *all = api_routes(&n);
    long long req[API_ROUTES_MAX + 1][API_HTTP_CLASSES];
    long long total[API_ROUTES_MAX + 1];
    for (int r = 0; r <= API_ROUTES_MAX; r++) {
        total[r] = 0;
        for (int c = 0; c < API_HTTP_CLASSES; c++) {
            req[r][c] = atomic_load_explicit(&h->requests[r][c], memory_order_relaxed);
            total[r] += req[r][c];
        }
    }

    family(t, "inventory_http_requests_total", "counter",
           "HTTP replies by route and status class.");
    for (int r = 0; r <= API_ROUTES_MAX; r++) {
        if (r >= (int)n && r != API_ROUTES_MAX)
            continue;
        for (int c = 0; c < API_HTTP_CLASSES; c++) {
            if (req[r][c] == 0)
                continue;
            put(t, "inventory_http_requests_total{");
            route_labels(t, all, r);
            put(t, ",code=\"%s\"} %lld\n", http_classes[c], req[r][c]);
        }
    }

    family(t, "inventory_http_request_duration_seconds", "histogram",
           "Time from a request's headers being in to its reply being queued.");
    for (int r = 0; r <= API_ROUTES_MAX; r++) {
        if ((r >= (int)n && r != API_ROUTES_MAX) || total[r] == 0)
            continue;
        /* Buckets are read after the class counters: the count is taken from the
         * buckets themselves, so the series stays consistent under concurrent adds. */
        long long cumulative = 0;
        for (int b = 0; b <= API_HTTP_BUCKETS; b++) {
            cumulative += atomic_load_explicit(&h->bucket[r][b], memory_order_relaxed);
            put(t, "inventory_http_request_duration_seconds_bucket{");
            route_labels(t, all, r);
            if (b < API_HTTP_BUCKETS)
                put(t, ",le=\"%g\"} %lld\n", (double)http_bounds_us[b] / 1e6, cumulative);
            else
                put(t, ",le=\"+Inf\"} %lld\n", cumulative);
        }
        put(t, "inventory_http_request_duration_seconds_sum{");
        route_labels(t, all, r);
        put(t, "} %.6f\n",
            (double)atomic_load_explicit(&h->sum_us[r], memory_order_relaxed) / 1e6);
        put(t, "inventory_http_request_duration_seconds_count{");
        route_labels(t, all, r);
        put(t, "} %lld\n", cumulative);
    }
}

/* The system's boot time (Unix seconds) from /proc/stat; -1 when unknown. */
static long long boot_time(void)
{
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL)
        return -1;
    char line[256];
    long long btime = -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "btime %lld", &btime) == 1)
            break;
    fclose(f);
    return btime;
}

/* Open descriptors, from /proc/self/fd (not counting the one reading it); -1. */
static long long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    long long n = 0;
    int self = dirfd(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.' && atoi(e->d_name) != self)
            n++;
    closedir(d);
    return n;
}

/* The standard process_* families, as Prometheus client libraries export them on
 * Linux. Whatever /proc does not tell is left out. */
static void process(struct text *t)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t len = f != NULL ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    buf[len] = '\0';
    /* Fields after the ")" that closes the command name, which may hold anything:
     * 3 state ... 14 utime 15 stime (ticks) ... 22 starttime (ticks after boot)
     * 23 vsize (bytes) 24 rss (pages). */
    unsigned long long field[25] = {0};
    char *p = strrchr(buf, ')'), *save = NULL;
    int last = 2; /* number of the last field read */
    for (char *tok = p != NULL ? strtok_r(p + 1, " ", &save) : NULL;
         tok != NULL && last < 24; tok = strtok_r(NULL, " ", &save))
        field[++last] = strtoull(tok, NULL, 10); /* the state (3), a letter, reads 0 */
    long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    if (last == 24 && tck > 0 && page > 0) {
        family(t, "process_cpu_seconds_total", "counter",
               "Total user and system CPU time spent in seconds.");
        put(t, "process_cpu_seconds_total %.2f\n",
            (double)(field[14] + field[15]) / (double)tck);
        long long btime = boot_time();
        if (btime > 0) {
            family(t, "process_start_time_seconds", "gauge",
                   "Start time of the process since unix epoch in seconds.");
            put(t, "process_start_time_seconds %.2f\n",
                (double)btime + (double)field[22] / (double)tck);
        }
        family(t, "process_virtual_memory_bytes", "gauge",
               "Virtual memory size in bytes.");
        put(t, "process_virtual_memory_bytes %llu\n", field[23]);
        family(t, "process_resident_memory_bytes", "gauge",
               "Resident memory size in bytes.");
        put(t, "process_resident_memory_bytes %llu\n",
            field[24] * (unsigned long long)page);
    }
    long long fds = open_fds();
    if (fds >= 0) {
        family(t, "process_open_fds", "gauge", "Number of open file descriptors.");
        put(t, "process_open_fds %lld\n", fds);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        family(t, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
        put(t, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
    }
}

void api_metrics(const struct api_ctx *ctx, struct api_request *req,
                 struct api_reply *rep)
{
    (void)req;
    struct text t = {NULL, 0, 0};
    build_info(&t);
    counters(&t, ctx->inv);
    ledger_metrics(&t, ctx->inv);
    histogram(&t, ctx->inv, HIST_ORDER);
    histogram(&t, ctx->inv, HIST_LOCK_WAIT);
    const struct api_gauges_snap *snap = api_gauges_get(ctx->gauges);
    family(&t, "inventory_sku_orders_total", "counter",
           "Orders by SKU and outcome, as this process answered them.");
    struct shown sh = {&t, snap};
    stat_foreach_sku(ctx->inv, sku_outcomes, &sh);
    sku_gauges(&t, snap);
    api_gauges_put(ctx->gauges, snap);
    store_up(&t, ctx->http, inv_store_name(ctx->inv));
    http(&t, ctx->http);
    process(&t);
    api_reply_raw(rep, 200, "text/plain; version=0.0.4; charset=utf-8", t.buf, t.len);
}
