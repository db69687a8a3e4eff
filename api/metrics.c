/* metrics.c -- Prometheus text exposition of the domain counters (see metrics.h). */
#include "api/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/stats.h"

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

/* "orders_sold_out" -> "sold_out"; stat ids below SKU_OUTCOMES all start so. */
static const char *outcome(enum stat_id id)
{
    return stat_name(id) + strlen("orders_");
}

static void histogram(struct text *t, inv *v, enum hist_id h, const char *help)
{
    struct hist_snapshot s;
    stat_hist_snapshot(v, h, &s);
    const char *name = hist_name(h);
    put(t, "# HELP inventory_%s %s\n# TYPE inventory_%s histogram\n", name, help, name);
    long long cumulative = 0;
    for (int b = 0; b < HIST_BUCKETS; b++) {
        cumulative += s.bucket[b];
        put(t, "inventory_%s_bucket{le=\"%g\"} %lld\n", name, hist_bounds()[b],
            cumulative);
    }
    put(t, "inventory_%s_bucket{le=\"+Inf\"} %lld\n", name, s.count);
    put(t, "inventory_%s_sum %.6f\ninventory_%s_count %lld\n", name, s.sum, name,
        s.count);
}

static void sku_outcomes(const char *sku, const long long *outcomes, void *arg)
{
    for (int i = 0; i < SKU_OUTCOMES; i++)
        put(arg, "inventory_sku_orders_total{sku=\"%s\",outcome=\"%s\"} %lld\n", sku,
            outcome((enum stat_id)i), outcomes[i]);
}

void api_metrics(const struct api_ctx *ctx, struct api_request *req,
                 struct api_reply *rep)
{
    (void)req;
    struct text t = {NULL, 0, 0};
    long long c[STAT__COUNT];
    stat_snapshot(ctx->inv, c);

    put(&t, "# HELP inventory_orders_total Orders by outcome.\n"
            "# TYPE inventory_orders_total counter\n");
    for (int i = 0; i < SKU_OUTCOMES; i++)
        put(&t, "inventory_orders_total{outcome=\"%s\"} %lld\n", outcome((enum stat_id)i),
            c[i]);
    for (int i = SKU_OUTCOMES; i < STAT__COUNT; i++) {
        const char *name = stat_name((enum stat_id)i);
        put(&t, "# TYPE inventory_%s_total counter\ninventory_%s_total %lld\n", name,
            name, c[i]);
    }
    histogram(&t, ctx->inv, HIST_ORDER, "Time to place an order, whatever the outcome.");
    histogram(&t, ctx->inv, HIST_LOCK_WAIT,
              "Time from an order's start to its segment lock being taken.");
    put(&t,
        "# HELP inventory_sku_orders_total Orders by SKU and outcome (this instance).\n"
        "# TYPE inventory_sku_orders_total counter\n");
    stat_foreach_sku(ctx->inv, sku_outcomes, &t);
    api_reply_raw(rep, 200, "text/plain; version=0.0.4", t.buf, t.len);
}
