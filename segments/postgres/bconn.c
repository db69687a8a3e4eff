/* bconn.c -- a blocking libpq connection made again on demand (bconn.h). */
#include "segments/postgres/bconn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

void pgbc_init(struct pgbc *b, const char *conninfo)
{
    *b = (struct pgbc){.conninfo = seg_strdup(conninfo)};
}

void pgbc_clear(struct pgbc *b)
{
    if (b->conn != NULL)
        PQfinish(b->conn);
    free(b->conninfo);
    *b = (struct pgbc){0};
}

int pgbc_fail(struct pgbc *b, const char *what)
{
    const char *msg = b->conn != NULL ? PQerrorMessage(b->conn) : "";
    snprintf(b->errstr, sizeof b->errstr, "%s: %.*s", what, (int)strcspn(msg, "\n"), msg);
    if (b->conn != NULL)
        PQfinish(b->conn); /* rolls back what it held */
    b->conn = NULL;
    return -1;
}

int pgbc_ready(struct pgbc *b)
{
    if (b->conn != NULL && PQstatus(b->conn) == CONNECTION_OK)
        return 0;
    if (b->conn != NULL)
        PQfinish(b->conn);
    const char *keys[] = {"dbname", "connect_timeout", "application_name", NULL};
    const char *vals[] = {b->conninfo, "3", "inventoryd ledger", NULL};
    b->conn = PQconnectdbParams(keys, vals, 1);
    if (b->conn == NULL || PQstatus(b->conn) != CONNECTION_OK)
        return pgbc_fail(b, "connect");
    PGresult *r =
        PQexec(b->conn, "SET statement_timeout = 10000; SET synchronous_commit = on");
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    return ok ? 1 : pgbc_fail(b, "settings");
}
