/* cmd.c -- a Redis command, encoded as it is built (see cmd.h). */
#include "segments/redis/cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/redis/slots.h"

/* The first buffer holds a typical script call (DEDUCT with its record: ~400 bytes). */
#define FIRST_CAP 512

static void reserve(struct rd_cmd *c, size_t more)
{
    if (c->used + more <= c->cap)
        return;
    size_t cap = c->cap ? c->cap : FIRST_CAP;
    while (cap < c->used + more)
        cap *= 2;
    c->buf = seg_realloc(c->buf, cap);
    c->cap = cap;
}

/* `n` in decimal at p; returns the end. (printf's machinery cost more than all the
 * rest of a command's encoding.) */
static char *decimal(char *p, size_t n)
{
    char digits[24];
    int k = 0;
    do
        digits[k++] = (char)('0' + n % 10);
    while ((n /= 10) != 0);
    while (k > 0)
        *p++ = digits[--k];
    return p;
}

/* Copy a string literal to p; the end. */
#define literal(p, s) ((char *)memcpy((p), (s), sizeof(s) - 1) + sizeof(s) - 1)

/* One bulk string: "$<n>\r\n<bytes>\r\n". */
static void push(struct rd_cmd *c, const char *s, size_t n)
{
    reserve(c, n + 32);
    char *p = c->buf + c->used;
    *p++ = '$';
    p = decimal(p, n);
    *p++ = '\r';
    *p++ = '\n';
    memcpy(p, s, n);
    p += n;
    *p++ = '\r';
    *p++ = '\n';
    c->used = (size_t)(p - c->buf);
    c->argc++;
}

static void start(struct rd_cmd *c, int script)
{
    memset(c, 0, sizeof *c);
    c->script = script;
    c->slot = -1;
    reserve(c, CMD_HEAD);
    c->used = CMD_HEAD;
}

void cmd_plain(struct rd_cmd *c, const char *name)
{
    start(c, -1);
    push(c, name, strlen(name));
}

void cmd_script(struct rd_cmd *c, enum script_id id)
{
    start(c, (int)id);
}

void cmd_key(struct rd_cmd *c, const char *key)
{
    if (c->script >= 0 && c->argc != c->nkeys) {
        fputs("cmd_key: keys must come before arguments\n", stderr);
        abort();
    }
    size_t n = strlen(key);
    push(c, key, n);
    c->nkeys++;
    if (c->slot < 0)
        c->slot = rd_key_slot(key, n);
}

void cmd_route_as(struct rd_cmd *c, const char *key)
{
    c->slot = rd_key_slot(key, strlen(key));
}

void cmd_arg(struct rd_cmd *c, const char *arg)
{
    push(c, arg, strlen(arg));
}

void cmd_argll(struct rd_cmd *c, long long v)
{
    char text[24], *p = text;
    if (v < 0)
        *p++ = '-';
    p = decimal(p, v < 0 ? -(unsigned long long)v : (unsigned long long)v);
    push(c, text, (size_t)(p - text));
}

/* The EVAL form: the script's source inline (the first send, or after NOSCRIPT). */
static size_t eval_form(struct rd_cmd *c, const char *nk, int nk_len, const char **out)
{
    const char *src = script_source((enum script_id)c->script);
    size_t src_len = strlen(src), body_len = c->used - CMD_HEAD;
    free(c->eval);
    c->eval = seg_malloc(src_len + body_len + 64);
    char *p = c->eval;
    p += sprintf(p, "*%d\r\n$4\r\nEVAL\r\n$%zu\r\n", c->argc + 3, src_len);
    memcpy(p, src, src_len);
    p += src_len;
    p += sprintf(p, "\r\n$%d\r\n%s\r\n", nk_len, nk);
    memcpy(p, c->buf + CMD_HEAD, body_len);
    *out = c->eval;
    return (size_t)(p - c->eval) + body_len;
}

size_t cmd_format(struct rd_cmd *c, const char *sha, const char **out)
{
    char head[CMD_HEAD + 64], *h = head;
    if (c->script < 0) {
        *h++ = '*';
        h = decimal(h, (size_t)c->argc);
    } else {
        char nk[16];
        int nk_len = (int)(decimal(nk, (size_t)c->nkeys) - nk);
        nk[nk_len] = '\0';
        size_t sha_len = sha != NULL ? strlen(sha) : 0;
        if (sha_len == 0 || sha_len > 64)
            return eval_form(c, nk, nk_len, out);
        *h++ = '*';
        h = decimal(h, (size_t)c->argc + 3);
        h = literal(h, "\r\n$7\r\nEVALSHA\r\n$");
        h = decimal(h, sha_len);
        *h++ = '\r';
        *h++ = '\n';
        memcpy(h, sha, sha_len);
        h += sha_len;
        h = literal(h, "\r\n$");
        h = decimal(h, (size_t)nk_len);
        *h++ = '\r';
        *h++ = '\n';
        memcpy(h, nk, (size_t)nk_len);
        h += nk_len;
    }
    *h++ = '\r';
    *h++ = '\n';
    int n = (int)(h - head);
    if (n > CMD_HEAD) {
        fputs("cmd_format: the head does not fit\n", stderr);
        abort();
    }
    /* The head goes right before the elements, into the room left for it. */
    memcpy(c->buf + CMD_HEAD - n, head, (size_t)n);
    *out = c->buf + CMD_HEAD - n;
    return c->used - CMD_HEAD + (size_t)n;
}

void cmd_free(struct rd_cmd *c)
{
    free(c->buf);
    free(c->eval);
    memset(c, 0, sizeof *c);
}
