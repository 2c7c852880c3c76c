/*
 * api/router.c - method + path to handler. Routes are a fixed table; the
 * lock routes share the key decoding and the credentials check
 * (api/authz.h): who is asking before anything is parsed, whether the
 * parsed call is covered before any store call.
 */
#include "api/router.h"
#include "api/authz.h"
#include "lib/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define LOCKS_PREFIX "/locks/"
#define ALLOW_LOCKS  "GET, HEAD, POST, PUT, DELETE"
#define ALLOW_OPS    "GET, HEAD"
#define MULTI_PATH   "/locks"
#define ALLOW_MULTI  "GET, HEAD, POST, PUT, DELETE"

static bool is_get(const char *method)
{
    return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
}

static void not_allowed(struct api_response *resp, const char *allow)
{
    char msg[128];

    snprintf(msg, sizeof(msg), "method not allowed here; allowed: %s", allow);
    codec_error(resp, API_METHOD_NOT_ALLOWED, msg);
    resp->allow = allow;
}

static enum api_action route_lock(const struct api_config *cfg,
                                  const struct api_request *rq,
                                  const char *path,
                                  struct authz_who *who,
                                  struct api_response *resp,
                                  struct api_call *call)
{
    const char *m = rq->method;
    enum api_route route;
    enum api_verb verb;
    char msg[256];
    char *key = NULL;
    size_t key_len = 0;
    enum api_error err;

    if (strcmp(m, "POST") == 0)
        route = API_ROUTE_ACQUIRE;
    else if (strcmp(m, "PUT") == 0)
        route = API_ROUTE_RENEW;
    else if (strcmp(m, "DELETE") == 0)
        route = API_ROUTE_RELEASE;
    else if (is_get(m))
        route = API_ROUTE_INSPECT;
    else {
        not_allowed(resp, ALLOW_LOCKS);
        return API_ACTION_REPLY;
    }
    resp->route = route;
    /* 401 before the key or the body is read */
    if (authz_identify(cfg->authz, rq, who, resp) != API_OK)
        return API_ACTION_REPLY;
    if (rq->shutting_down) {
        codec_error(resp, API_SHUTTING_DOWN, NULL);
        resp->retry_after = 1;
        return API_ACTION_REPLY;
    }
    err = codec_decode_key(path + strlen(LOCKS_PREFIX), &key, &key_len, msg,
                           sizeof(msg));
    if (err != API_OK) {
        codec_error(resp, err, msg);
        return API_ACTION_REPLY;
    }
    switch (route) {
    case API_ROUTE_ACQUIRE:
        verb = API_VERB_ACQUIRE;
        break;
    case API_ROUTE_RENEW:
        verb = API_VERB_RENEW;
        break;
    case API_ROUTE_RELEASE:
        verb = API_VERB_RELEASE;
        break;
    default:
        verb = API_VERB_INSPECT;
        break;
    }
    /* key is handed over to call, even on error */
    if (handle_call_parse(cfg, rq, verb, key, key_len, call, resp) != API_OK)
        return API_ACTION_REPLY;
    if (call->verb == API_VERB_FORCE_RELEASE)
        resp->route = API_ROUTE_FORCE_RELEASE;
    /* 403 once the key and the verb are known, before any store call */
    if (authz_allow(who, call, resp) != API_OK)
        return API_ACTION_REPLY;
    return API_ACTION_CALL;
}

/* POST, PUT and DELETE /locks: several keys at once; GET and HEAD: the
 * list of held keys. */
static enum api_action route_multi(const struct api_config *cfg,
                                   const struct api_request *rq,
                                   struct authz_who *who,
                                   struct api_response *resp,
                                   struct api_call *call)
{
    const char *m = rq->method;
    enum api_verb verb;

    if (is_get(m)) {
        resp->route = API_ROUTE_LIST;
        verb = API_VERB_LIST;
    } else if (strcmp(m, "POST") == 0) {
        resp->route = API_ROUTE_ACQUIRE_MULTI;
        verb = API_VERB_ACQUIRE_MULTI;
    } else if (strcmp(m, "PUT") == 0) {
        resp->route = API_ROUTE_RENEW_MULTI;
        verb = API_VERB_RENEW_MULTI;
    } else if (strcmp(m, "DELETE") == 0) {
        resp->route = API_ROUTE_RELEASE_MULTI;
        verb = API_VERB_RELEASE_MULTI;
    } else {
        not_allowed(resp, ALLOW_MULTI);
        return API_ACTION_REPLY;
    }
    if (authz_identify(cfg->authz, rq, who, resp) != API_OK)
        return API_ACTION_REPLY;
    if (rq->shutting_down) {
        codec_error(resp, API_SHUTTING_DOWN, NULL);
        resp->retry_after = 1;
        return API_ACTION_REPLY;
    }
    if (verb == API_VERB_LIST) {
        if (handle_list_parse(rq, call, resp) != API_OK)
            return API_ACTION_REPLY;
    } else if (handle_multi_parse(cfg, rq, verb, call, resp) != API_OK) {
        return API_ACTION_REPLY;
    }
    if (authz_allow(who, call, resp) != API_OK)
        return API_ACTION_REPLY;
    return API_ACTION_CALL;
}

const char *router_path(const char *target)
{
    static const char *const schemes[] = { "http://", "https://" };

    if (target[0] == '/')
        return target; /* origin form */
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
        size_t n = strlen(schemes[i]);
        const char *path;
        if (strncasecmp(target, schemes[i], n) != 0)
            continue;
        if (target[n] == '\0' || target[n] == '/')
            return NULL; /* no host */
        path = strchr(target + n, '/');
        return path != NULL ? path : "/";
    }
    return NULL;
}

enum api_action router_dispatch(const struct api_config *cfg,
                                const struct api_request *rq,
                                struct api_response *resp,
                                struct api_call *call)
{
    const char *path = router_path(rq->path);
    struct authz_who who = { 0 };
    enum api_action act;

    memset(resp, 0, sizeof(*resp));
    resp->route = API_ROUTE_OTHER;
    if (path == NULL) {
        /* CONNECT's authority form, OPTIONS' asterisk form: the methods
         * lockd serves are none of these */
        if (strcmp(rq->method, "CONNECT") == 0 ||
            (strcmp(rq->method, "OPTIONS") == 0 &&
             strcmp(rq->path, "*") == 0)) {
            not_allowed(resp, ALLOW_LOCKS);
            return API_ACTION_REPLY;
        }
        codec_error(resp, API_BAD_REQUEST,
                    "the request target must be a path or an absolute "
                    "http(s) URI (RFC 9112 section 3.2)");
        return API_ACTION_REPLY;
    }
    if (strncmp(path, LOCKS_PREFIX, strlen(LOCKS_PREFIX)) == 0 ||
        strcmp(path, MULTI_PATH) == 0) {
        /* who holds a reference to the policy until the call is judged */
        if (path[strlen(MULTI_PATH)] == '\0')
            act = route_multi(cfg, rq, &who, resp, call);
        else
            act = route_lock(cfg, rq, path, &who, resp, call);
        authz_done(&who);
        return act;
    }

    if (strcmp(path, "/healthz") == 0)
        resp->route = API_ROUTE_HEALTHZ;
    else if (strcmp(path, "/readyz") == 0)
        resp->route = API_ROUTE_READYZ;
    else if (strcmp(path, "/metrics") == 0)
        resp->route = API_ROUTE_METRICS;
    else {
        codec_error(resp, API_NOT_FOUND, NULL);
        return API_ACTION_REPLY;
    }
    if (!is_get(rq->method)) {
        not_allowed(resp, ALLOW_OPS);
        return API_ACTION_REPLY;
    }
    if (authz_operator(cfg->authz, rq, resp->route, resp) != API_OK)
        return API_ACTION_REPLY;
    if (resp->route == API_ROUTE_HEALTHZ) {
        handle_healthz(resp);
        return API_ACTION_REPLY;
    }
    if (resp->route == API_ROUTE_READYZ && rq->shutting_down) {
        handle_readyz_draining(cfg, resp);
        return API_ACTION_REPLY;
    }
    /* both ask the store: the server runs them off its threads */
    memset(call, 0, sizeof(*call));
    call->verb =
        resp->route == API_ROUTE_READYZ ? API_VERB_READYZ : API_VERB_METRICS;
    return API_ACTION_CALL;
}
