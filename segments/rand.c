/* rand.c -- tokens, ids, epochs and the per-connection generator (see rand.h). */
#include "segments/rand.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>

#include "segments/internal.h"

static void fill_random(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0) {
            perror("getrandom");
            abort();
        }
        p += got;
        n -= (size_t)got;
    }
}

void inv_rand_seed(inv_conn *c)
{
    fill_random(&c->rng, sizeof c->rng);
    c->rng |= 1; /* xorshift must not start at 0 */
    fill_random(&c->token_id, sizeof c->token_id);
}

uint32_t inv_rand(inv_conn *c, uint32_t n)
{
    /* xorshift64*: plenty for picking a segment and jittering a wait. */
    uint64_t x = c->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    c->rng = x;
    return (uint32_t)(((x * 2685821657736338717ULL) >> 32) % n);
}

void inv_new_token(inv_conn *c, char token[33])
{
    snprintf(token, 33, "%016llx%016llx", (unsigned long long)c->token_id,
             (unsigned long long)++c->token_seq);
}

void inv_random_hex(char out[33])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char b[16];
    fill_random(b, sizeof b);
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[32] = '\0';
}

long long inv_new_epoch(void)
{
    uint64_t x;
    fill_random(&x, sizeof x);
    return (long long)(x % ((1ULL << 52) - 1)) + 1;
}
