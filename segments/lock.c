/* lock.c -- segment lock scripts, called with the right keys (see lock.h). */
#include "segments/lock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/keys.h"
#include "segments/store.h"
#include "segments/xalloc.h"

void lock_new_token(inv_conn *c, char token[33])
{
    snprintf(token, 33, "%016llx%016llx", (unsigned long long)c->token_id,
             (unsigned long long)++c->token_seq);
}

/* Turn a script's {code, value} reply into `out`; frees `r`. */
static int parse_reply(redisReply *r, struct lock_reply *out)
{
    memset(out, 0, sizeof *out);
    if (!store_is_array(r, 1) || r->element[0]->type != REDIS_REPLY_INTEGER) {
        if (r != NULL)
            freeReplyObject(r);
        return -1;
    }
    out->code = (enum script_reply)r->element[0]->integer;
    if (r->elements > 1) {
        const redisReply *val = r->element[1];
        if (val->type == REDIS_REPLY_INTEGER)
            out->stock = val->integer;
        else if (val->type == REDIS_REPLY_STRING && out->code == SCRIPT_R_EXISTS)
            out->record = seg_strdup(val->str);
    }
    freeReplyObject(r);
    return 0;
}

int lock_acquire(inv_conn *c, const char *sku, long long epoch, int i, const char *id,
                 long long qty, const char *token, struct lock_reply *out)
{
    char order[SEG_KEY_MAX], stock[SEG_KEY_MAX], lock[SEG_KEY_MAX], ep[SEG_KEY_MAX];
    char q[24], ttl[16], e[24];
    snprintf(q, sizeof q, "%lld", qty);
    snprintf(ttl, sizeof ttl, "%d", c->v->opt.lock_ttl_ms);
    snprintf(e, sizeof e, "%lld", epoch);
    const char *keys[] = {seg_key_order(order, id), seg_key_stock(stock, sku, i),
                          seg_key_lock(lock, sku, i), seg_key_epoch(ep, sku, i)};
    const char *args[] = {q, token, ttl, e};
    return parse_reply(store_eval(c, SCRIPT_ACQUIRE, 4, keys, 4, args), out);
}

int lock_deduct(inv_conn *c, const char *sku, long long epoch, int i, const char *token,
                const char *attempt, const char *id, long long qty, const char *record,
                struct lock_reply *out)
{
    char lock[SEG_KEY_MAX], stock[SEG_KEY_MAX], sold[SEG_KEY_MAX], orders[SEG_KEY_MAX],
        order[SEG_KEY_MAX], ep[SEG_KEY_MAX], q[24], e[24];
    snprintf(q, sizeof q, "%lld", qty);
    snprintf(e, sizeof e, "%lld", epoch);
    const char *keys[] = {seg_key_lock(lock, sku, i), seg_key_stock(stock, sku, i),
                          seg_key_sold(sold, sku, i), seg_key_orders(orders, sku, i),
                          seg_key_order(order, id),   seg_key_epoch(ep, sku, i)};
    const char *args[] = {token, q, id, record, attempt, e};
    return parse_reply(store_eval(c, SCRIPT_DEDUCT, 6, keys, 6, args), out);
}

int lock_release(inv_conn *c, const char *sku, int i, const char *token)
{
    char lock[SEG_KEY_MAX];
    const char *keys[] = {seg_key_lock(lock, sku, i)};
    const char *args[] = {token};
    redisReply *r = store_eval(c, SCRIPT_RELEASE, 1, keys, 1, args);
    if (r == NULL)
        return -1;
    int released = store_integer(r, 0) == 1;
    freeReplyObject(r);
    return released;
}
