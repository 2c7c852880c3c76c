/*
 * api/handlers_multi.c - the endpoints for several keys at once (POST, PUT
 * and DELETE /locks, docs/API.md "Several keys at once"): parse into an
 * api_call, then answer from the store's struct lock_multi_grant.
 */
#include "api/handlers.h"

#include <stdio.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/random.h"

#define MSG_MAX 512

/* True if the backend has the store call verb needs. */
static bool backend_has(const struct api_config *cfg, enum api_verb verb)
{
    const struct backend_ops *ops = cfg->backend->ops;

    switch (verb) {
    case API_VERB_ACQUIRE_MULTI:
        return ops->acquire_multi != NULL;
    case API_VERB_RENEW_MULTI:
        return ops->renew_multi != NULL;
    default:
        return ops->release_multi != NULL;
    }
}

/* c from the checked parameters p (whose strings c takes). */
static enum api_error fill_multi(const struct api_config *cfg,
                                 struct api_params *p,
                                 struct api_call *c,
                                 struct api_response *resp)
{
    if (c->verb != API_VERB_ACQUIRE_MULTI) {
        if (!p->has_token || p->token[0] == '\0') {
            codec_error(resp, API_MISSING_TOKEN, NULL);
            return API_MISSING_TOKEN;
        }
        c->client_token = p->token; /* handed over */
        p->token = NULL;
        c->ttl_ms = p->has_ttl_ms ? p->ttl_ms : 0; /* 0: keep each key's */
        return API_OK;
    }
    c->ttl_ms = p->has_ttl_ms ? p->ttl_ms : cfg->default_ttl_ms;
    c->wait_ms = p->has_wait_ms ? p->wait_ms : 0;
    c->owner = p->owner; /* handed over */
    p->owner = NULL;
    if (random_hex(c->token, API_TOKEN_LEN / 2) != 0) {
        log_error("getrandom failed: no token can be made");
        codec_error(resp, API_INTERNAL, "cannot make a token");
        return API_INTERNAL;
    }
    return API_OK;
}

enum api_error handle_multi_parse(const struct api_config *cfg,
                                  const struct api_request *rq,
                                  enum api_verb verb,
                                  struct api_call *c,
                                  struct api_response *resp)
{
    static const unsigned allowed[] = {
        [API_VERB_ACQUIRE_MULTI] = API_P_TTL_MS | API_P_WAIT_MS | API_P_OWNER,
        [API_VERB_RENEW_MULTI] = API_P_TOKEN | API_P_TTL_MS,
        [API_VERB_RELEASE_MULTI] = API_P_TOKEN,
    };
    struct api_params p;
    char msg[MSG_MAX];
    enum api_error err;

    memset(c, 0, sizeof(*c));
    c->verb = verb;
    if (verb == API_VERB_ACQUIRE_MULTI && rq->nidem_keys > 0) {
        codec_error(resp, API_INVALID_PARAMETER,
                    "the Idempotency-Key header is not supported for several "
                    "keys at once");
        return API_INVALID_PARAMETER;
    }
    err = codec_parse_multi(rq, allowed[verb], cfg->max_ttl_ms,
                            cfg->max_wait_ms, &p, &c->keys, msg, sizeof(msg));
    if (err != API_OK) {
        codec_error(resp, err, msg);
        return err;
    }
    err = fill_multi(cfg, &p, c, resp);
    codec_params_cleanup(&p);
    if (err == API_OK && !backend_has(cfg, verb)) {
        /* a well-formed request this store cannot run */
        snprintf(msg, sizeof(msg),
                 "the %s backend does not take several keys at once",
                 backend_scheme(cfg->backend));
        codec_error(resp, API_NOT_IMPLEMENTED, msg);
        err = API_NOT_IMPLEMENTED;
    }
    return err;
}

/* What is left of g now, in ms; 0 once it may have expired. */
static uint64_t multi_left_ms(const struct lock_multi_grant *g)
{
    struct lock_grant one = { .ttl_ms = g->ttl_ms,
                              .valid_until_us = g->valid_until_us };

    return backend_grant_left_ms(&one, clock_mono_us());
}

static void unavailable(struct api_response *resp, const char *message)
{
    resp->retry_after = 1;
    codec_error(resp, API_BACKEND_UNAVAILABLE, message);
}

static void grant_reply(struct api_response *resp,
                        unsigned status,
                        const struct api_call *c,
                        const struct lock_multi_grant *g)
{
    uint64_t left = multi_left_ms(g);

    if (left == 0) {
        log_warn("the store answered after the keys' TTL had passed: "
                 "answering 503, not a grant");
        unavailable(resp, "the store answered too late: the locks' TTL "
                          "passed before the answer could be sent");
        return;
    }
    codec_multi_grant(resp, status, &c->keys, api_call_token(c), g, left);
}

void handle_multi_reply(const struct api_config *cfg,
                        const struct api_call *c,
                        enum backend_result r,
                        const struct lock_multi_grant *g,
                        struct api_response *resp)
{
    enum api_error e = api_error_from(r);

    (void)cfg;
    if (r == BACKEND_OK && c->verb == API_VERB_RELEASE_MULTI) {
        codec_multi_released(resp, &c->keys, g);
    } else if (r == BACKEND_OK) {
        grant_reply(resp, c->verb == API_VERB_ACQUIRE_MULTI ? 201 : 200, c, g);
    } else if (r == BACKEND_HELD && c->verb == API_VERB_ACQUIRE_MULTI) {
        metrics_lock_conflict();
        codec_multi_held(resp, &c->keys, g, c->wait_ms > 0);
    } else if ((r == BACKEND_NOT_FOUND || r == BACKEND_MISMATCH) &&
               c->verb == API_VERB_RENEW_MULTI) {
        codec_multi_bad_key(resp, e, &c->keys, g->bad);
    } else if (r == BACKEND_NOT_FOUND && c->verb == API_VERB_RELEASE_MULTI) {
        codec_error(resp, API_LOCK_NOT_FOUND,
                    "the token holds none of the keys (never acquired, "
                    "released or expired)");
    } else if (e == API_BACKEND_UNAVAILABLE) {
        unavailable(resp, NULL);
    } else {
        codec_error(resp, e, api_result_message(r));
    }
}
