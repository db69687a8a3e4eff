/* cmd.c -- a Redis command as an argument vector (see cmd.h). */
#include "segments/redis/cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/redis/slots.h"

/* A script's vector starts with three slots cmd_argv fills (EVALSHA, sha, nkeys). */
#define HEAD 3

static void push(struct rd_cmd *c, const char *s)
{
    if (c->argc == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->argv = seg_realloc(c->argv, sizeof *c->argv * (size_t)c->cap);
        c->len = seg_realloc(c->len, sizeof *c->len * (size_t)c->cap);
    }
    size_t n = strlen(s);
    c->argv[c->argc] = seg_malloc(n + 1);
    memcpy(c->argv[c->argc], s, n + 1);
    c->len[c->argc++] = n;
}

static void start(struct rd_cmd *c, int script)
{
    memset(c, 0, sizeof *c);
    c->script = script;
    c->slot = -1;
    if (script >= 0)
        for (int i = 0; i < HEAD; i++)
            push(c, ""); /* placeholders, replaced by cmd_argv */
}

void cmd_plain(struct rd_cmd *c, const char *name)
{
    start(c, -1);
    push(c, name);
}

void cmd_script(struct rd_cmd *c, enum script_id id)
{
    start(c, (int)id);
}

void cmd_key(struct rd_cmd *c, const char *key)
{
    if (c->script >= 0 && c->argc != HEAD + c->nkeys) {
        fputs("cmd_key: keys must come before arguments\n", stderr);
        abort();
    }
    push(c, key);
    c->nkeys++;
    if (c->slot < 0)
        c->slot = rd_key_slot(key, strlen(key));
}

void cmd_route_as(struct rd_cmd *c, const char *key)
{
    c->slot = rd_key_slot(key, strlen(key));
}

void cmd_arg(struct rd_cmd *c, const char *arg)
{
    push(c, arg);
}

void cmd_argll(struct rd_cmd *c, long long v)
{
    char text[24];
    snprintf(text, sizeof text, "%lld", v);
    push(c, text);
}

int cmd_argv(struct rd_cmd *c, const char *sha, const char ***argv, const size_t **len)
{
    if (c->script >= 0) {
        bool by_sha = sha != NULL && sha[0] != '\0';
        const char *head[HEAD] = {by_sha ? "EVALSHA" : "EVAL",
                                  by_sha ? sha : script_source((enum script_id)c->script),
                                  c->nkeys_text};
        snprintf(c->nkeys_text, sizeof c->nkeys_text, "%d", c->nkeys);
        for (int i = 0; i < HEAD; i++) {
            free(c->argv[i]);
            c->argv[i] = seg_strdup(head[i]);
            c->len[i] = strlen(head[i]);
        }
    }
    *argv = (const char **)c->argv;
    *len = c->len;
    return c->argc;
}

void cmd_free(struct rd_cmd *c)
{
    for (int i = 0; i < c->argc; i++)
        free(c->argv[i]);
    free(c->argv);
    free(c->len);
    memset(c, 0, sizeof *c);
}
