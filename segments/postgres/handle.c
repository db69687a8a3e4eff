/* handle.c -- the PostgreSQL store handle's small tables: lock schemes by SKU, locks
 * held by token, and the calls in flight. */
#include "segments/postgres/handle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/xalloc.h"

enum scheme pgb_scheme_of(struct pg_store *s, const char *sku)
{
    for (struct known *k = s->known; k != NULL; k = k->next)
        if (strcmp(k->sku, sku) == 0)
            return k->scheme;
    return SCHEME_ROW;
}

void pgb_scheme_set(struct pg_store *s, const char *sku, const char *lock)
{
    enum scheme sc = strcmp(lock, "lease") == 0        ? SCHEME_LEASE
                     : strcmp(lock, "optimistic") == 0 ? SCHEME_OPT
                                                       : SCHEME_ROW;
    for (struct known *k = s->known; k != NULL; k = k->next) {
        if (strcmp(k->sku, sku) == 0) {
            k->scheme = sc;
            return;
        }
    }
    size_t n = strlen(sku) + 1;
    struct known *k = seg_calloc(1, sizeof *k + n);
    memcpy(k->sku, sku, n);
    k->scheme = sc;
    k->next = s->known;
    s->known = k;
}

void pgb_scheme_forget(struct pg_store *s, const char *sku)
{
    for (struct known **p = &s->known; *p != NULL; p = &(*p)->next) {
        if (strcmp((*p)->sku, sku) == 0) {
            struct known *k = *p;
            *p = k->next;
            free(k);
            return;
        }
    }
}

struct held *pgb_held_find(struct pg_store *s, const char *token, bool unlink)
{
    for (struct held **p = &s->held; *p != NULL; p = &(*p)->next) {
        struct held *h = *p;
        if (strcmp(h->token, token) != 0)
            continue;
        if (unlink)
            *p = h->next;
        return h;
    }
    return NULL;
}

/* One the engine left behind (an order that ended between its acquire and its
 * deduction, e.g. a lease lost in the hold) is dropped once its lock would have run
 * out: a row transaction rolled back (the server has ended its session by then). */
static void held_prune(struct pg_store *s)
{
    long long old = base_now_ms() - 2LL * s->ttl_ms;
    for (struct held **p = &s->held; *p != NULL;) {
        struct held *h = *p;
        if (h->at_ms >= old) {
            p = &h->next;
            continue;
        }
        *p = h->next;
        if (h->scheme == SCHEME_ROW)
            pgs_row_release(h->c, h->txn, NULL, NULL);
        free(h);
    }
}

struct held *pgb_held_add(struct pg_store *s, const char *token, enum scheme sc)
{
    held_prune(s);
    struct held *h = seg_calloc(1, sizeof *h);
    h->at_ms = base_now_ms();
    snprintf(h->token, sizeof h->token, "%s", token);
    h->scheme = sc;
    h->next = s->held;
    s->held = h;
    return h;
}

char *pgb_array_ll(const long long *v, const int *iv, int n)
{
    size_t cap = (size_t)n * 24 + 3, len = 0;
    char *a = seg_malloc(cap);
    a[len++] = '{';
    for (int j = 0; j < n; j++)
        len += (size_t)snprintf(a + len, cap - len, "%s%lld", j ? "," : "",
                                v != NULL ? v[j] : (long long)iv[j]);
    snprintf(a + len, cap - len, "}");
    return a;
}

long long pgb_cell(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? -1 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

bool pgb_results_ok(int rc, PGresult *const *res, int n)
{
    if (rc != 0 || n < 1)
        return false;
    for (int i = 0; i < n; i++) {
        ExecStatusType st = PQresultStatus(res[i]);
        if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
            return false;
    }
    return true;
}

struct call *pgb_call_new(struct pg_store *s, void *arg, const char *sku)
{
    struct call *k = seg_calloc(1, sizeof *k);
    k->s = s;
    k->arg = arg;
    if (sku != NULL)
        snprintf(k->sku, sizeof k->sku, "%s", sku);
    return k;
}

void pgb_call_free(struct call *k)
{
    free(k->record);
    free(k->part);
    for (int j = 0; k->tok != NULL && j < k->n; j++)
        free(k->tok[j]);
    free(k->tok);
    free(k);
}

void pgb_tables_free(struct pg_store *s)
{
    while (s->known != NULL) {
        struct known *k = s->known;
        s->known = k->next;
        free(k);
    }
    while (s->held != NULL) {
        struct held *h = s->held;
        s->held = h->next;
        free(h);
    }
}
