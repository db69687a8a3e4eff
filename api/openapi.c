/* openapi.c -- serve the OpenAPI document compiled into the binary. */
#include "api/openapi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void api_openapi_get(const struct api_ctx *ctx, struct api_request *req,
                     struct api_reply *rep)
{
    (void)ctx;
    const struct embed_file *f = embed_find(api_openapi_files, "openapi.json");
    if (f == NULL) { /* the build embeds it: not expected */
        api_reply_error(rep, 500, "internal", "no OpenAPI document in this build: %.100s",
                        req->path);
        return;
    }
    api_reply_file(rep, f, "application/json");
}
