/* cmd.c -- a Redis command, encoded as it is built (see cmd.h). */
#include "segments/redis/cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/text.h"
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

/* One bulk string: "$<n>\r\n<bytes>\r\n", written where reserve() made room. */
static void push(struct rd_cmd *c, const char *s, size_t n)
{
    reserve(c, n + 32);
    struct text t = text_at(c->buf + c->used, c->cap - c->used);
    text_str(&t, "$");
    text_ll(&t, (long long)n);
    text_str(&t, "\r\n");
    memcpy(t.p, s, n);
    t.p += n;
    memcpy(t.p, "\r\n", 2);
    c->used = (size_t)(t.p + 2 - c->buf);
    /* hiredis 0.14.1 (__redisAsyncCommand) reads the byte after a command's first
     * element to see whether more follow: for a command of one word (TIME) that is
     * past the end, so it must be written (valgrind: "depends on uninitialised"). */
    c->buf[c->used] = '\0';
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
    char text[24];
    struct text t = text_at(text, sizeof text);
    text_ll(&t, v);
    push(c, text, (size_t)(t.p - text));
}

/* The array header and what precedes the keys: EVALSHA <sha> <nkeys>, or EVAL with the
 * script's source inline (`sha` NULL or "": the first send, or after NOSCRIPT). */
static void head(struct text *t, const struct rd_cmd *c, const char *sha)
{
    if (c->script < 0) {
        text_str(t, "*");
        text_ll(t, c->argc);
        text_str(t, "\r\n");
        return;
    }
    bool by_sha = sha != NULL && sha[0] != '\0';
    const char *what = by_sha ? sha : script_source((enum script_id)c->script);
    char nk[16];
    struct text k = text_at(nk, sizeof nk);
    text_ll(&k, c->nkeys);
    text_str(t, "*");
    text_ll(t, c->argc + 3);
    text_str(t, by_sha ? "\r\n$7\r\nEVALSHA\r\n$" : "\r\n$4\r\nEVAL\r\n$");
    text_ll(t, (long long)strlen(what));
    text_str(t, "\r\n");
    text_str(t, what);
    text_str(t, "\r\n$");
    text_ll(t, (long long)strlen(nk));
    text_str(t, "\r\n");
    text_str(t, nk);
    text_str(t, "\r\n");
}

size_t cmd_format(struct rd_cmd *c, const char *sha, const char **out)
{
    size_t body = c->used - CMD_HEAD;
    if (c->script >= 0 && (sha == NULL || sha[0] == '\0')) {
        /* EVAL: the source does not fit the room in front; a buffer of its own. */
        size_t cap = strlen(script_source((enum script_id)c->script)) + 96;
        free(c->eval);
        c->eval = seg_malloc(cap + body);
        struct text t = text_at(c->eval, cap);
        head(&t, c, NULL);
        memcpy(t.p, c->buf + CMD_HEAD, body);
        *out = c->eval;
        return (size_t)(t.p - c->eval) + body;
    }
    char room[CMD_HEAD + 1];
    struct text t = text_at(room, sizeof room);
    head(&t, c, sha);
    size_t n = (size_t)(t.p - room);
    if (n >= CMD_HEAD) {
        fputs("cmd_format: the head does not fit\n", stderr);
        abort();
    }
    /* The head goes right before the elements, into the room left for it. */
    memcpy(c->buf + CMD_HEAD - n, room, n);
    *out = c->buf + CMD_HEAD - n;
    return body + n;
}

void cmd_free(struct rd_cmd *c)
{
    free(c->buf);
    free(c->eval);
    memset(c, 0, sizeof *c);
}
