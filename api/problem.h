/* problem.h -- RFC 9457 problem details for the clients that ask for them.
 *
 * Every error the service writes itself is {"error": code, "detail": text} with
 * Content-Type application/json (api/reply.h): existing clients read that shape, so
 * it stays the default. A request whose Accept header prefers
 * application/problem+json (api_problem_preferred) gets the same error as
 *   {"type": "tag:inventoryd,2026:problem/<code>", "title": <fixed text per code>,
 *    "status": <HTTP status>, "detail": <the same detail>, "code": <the same code>}
 * with Content-Type application/problem+json; the status and headers (Retry-After,
 * Allow, WWW-Authenticate, ...) are unchanged. `type` is a tag URI (RFC 4151): an
 * identifier to compare, not a page to fetch. Successful replies, and the 503 of
 * GET /healthz (a health report, not an error object), are never rewritten.
 */
#ifndef API_PROBLEM_H
#define API_PROBLEM_H

#include <stdbool.h>

#include "api/reply.h"

#define API_PROBLEM_TYPE_PREFIX "tag:inventoryd,2026:problem/"

/* True when `accept` (an Accept header value, NULL when absent) names
 * application/problem+json with a q above 0 and at least that of every range that
 * also covers application/json (itself, application/ with a star, and star/star). Media
 * types compare case-insensitively; parameters other than q are ignored. */
bool api_problem_preferred(const char *accept);

/* Rewrite `r` in place into problem details when it is an error reply made by
 * api_reply_error or api_reply_status (r->error); anything else is left alone. */
void api_problem_apply(struct api_reply *r);

/* The title of error `code` ("Sold out", ...); a generic one for a code not known. */
const char *api_problem_title(const char *code);

#endif
