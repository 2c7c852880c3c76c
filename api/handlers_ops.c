/*
 * api/handlers_ops.c - the operator endpoints of docs/API.md: the list of
 * held keys (GET /locks) and the forced release (DELETE
 * /locks/{key}?force=true). Like the lock verbs, each is parsed into an
 * api_call that the server runs through the wait queue (never parked),
 * then answered from the store's result.
 */
#include "api/handlers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MSG_MAX 512

void api_call_list_req(const struct api_call *c, struct lock_list_req *req)
{
    const struct api_list_params *p = c->list;

    memset(req, 0, sizeof(*req));
    if (p == NULL)
        return;
    req->prefix = p->prefix;
    req->prefix_len = p->prefix_len;
    req->after = p->has_cursor ? p->after : NULL;
    req->after_len = p->has_cursor ? p->after_len : 0;
    req->limit = p->limit;
}

enum api_error handle_list_parse(const struct api_request *rq,
                                 struct api_call *c,
                                 struct api_response *resp)
{
    char msg[MSG_MAX];
    enum api_error err;

    memset(c, 0, sizeof(*c));
    c->verb = API_VERB_LIST;
    c->list = malloc(sizeof(*c->list));
    if (c->list == NULL) {
        codec_error(resp, API_INTERNAL, NULL);
        return API_INTERNAL;
    }
    err = codec_parse_list(rq, c->list, msg, sizeof(msg));
    if (err != API_OK) {
        free(c->list); /* clean after an error */
        c->list = NULL;
        codec_error(resp, err, msg);
    }
    return err;
}

/* A store result that is not OK, for the operator endpoints: a store
 * without the operation (the wrappers' INVALID) is 501. */
static void
ops_error(struct api_response *resp, enum backend_result r, const char *what)
{
    char msg[128];
    enum api_error e = api_error_from(r);

    if (r == BACKEND_INVALID) {
        snprintf(msg, sizeof(msg), "this lock store does not support %s", what);
        codec_error(resp, API_NOT_IMPLEMENTED, msg);
        return;
    }
    if (e == API_BACKEND_UNAVAILABLE)
        resp->retry_after = 1;
    codec_error(resp, e, api_result_message(r));
}

void handle_list_reply(const struct api_call *c,
                       enum backend_result r,
                       const struct lock_list *l,
                       struct api_response *resp)
{
    (void)c;
    if (r == BACKEND_OK && l == NULL)
        r = BACKEND_NO_MEMORY;
    if (r != BACKEND_OK) {
        ops_error(resp, r, "listing the held keys");
        return;
    }
    codec_list(resp, l);
}

void handle_force_reply(const struct api_call *c,
                        enum backend_result r,
                        const struct lock_info *info,
                        struct api_response *resp)
{
    if (r != BACKEND_OK) {
        ops_error(resp, r, "a forced release");
        return;
    }
    codec_force_released(resp, c->key, c->key_len, info);
}
