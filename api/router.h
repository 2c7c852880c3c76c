/*
 * api/router.h - method and path to handler: the routes of docs/API.md, 404
 * for the rest, 405 with Allow for a wrong method, 401 when auth is set.
 */
#ifndef API_ROUTER_H
#define API_ROUTER_H

#include "api/handlers.h"

enum api_action {
    API_ACTION_REPLY = 0, /* resp is the answer */
    API_ACTION_CALL,      /* run call (maybe waiting), then
                             handle_call_reply() */
};

/* The path a request target is routed by (RFC 9112 section 3.2): the
 * origin form "/p" itself, the absolute form "http://host/p" (http or
 * https, any case) its path ("/" if none); NULL for any other form. The
 * query is not part of the target: libmicrohttpd splits it off. */
const char *router_path(const char *target);

/* Route rq (rq->path is the request target as sent). The caller cleans up resp
 * and call (which a request that fails to parse may have filled in part). */
enum api_action router_dispatch(const struct api_config *cfg,
                                const struct api_request *rq,
                                struct api_response *resp,
                                struct api_call *call);

#endif /* API_ROUTER_H */
