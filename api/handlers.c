/*
 * api/handlers.c - one function per endpoint of docs/API.md: parse with the
 * codec, call the backend through its wrappers, answer in JSON.
 */
#include "api/handlers.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/random.h"

#define MSG_MAX 512

#define ALLOW_ACQUIRE                                                        \
    (API_P_TTL_MS | API_P_WAIT_MS | API_P_OWNER | API_P_MODE | API_P_LIMIT | \
     API_P_TOKEN | API_P_IDEM_KEY)

void api_call_cleanup(struct api_call *c)
{
    free(c->client);
    free(c->key);
    free(c->owner);
    free(c->client_token);
    free(c->idem_key);
    codec_keys_cleanup(&c->keys);
    if (c->list != NULL)
        codec_list_params_cleanup(c->list);
    free(c->list);
    memset(c, 0, sizeof(*c));
}

bool api_call_is_multi(const struct api_call *c)
{
    return c->verb == API_VERB_ACQUIRE_MULTI ||
           c->verb == API_VERB_RENEW_MULTI || c->verb == API_VERB_RELEASE_MULTI;
}

const char *api_call_token(const struct api_call *c)
{
    return (c->verb == API_VERB_ACQUIRE && !c->reenter) ||
                   c->verb == API_VERB_ACQUIRE_MULTI
               ? c->token
               : c->client_token;
}

void api_call_multi_req(const struct api_call *c, struct lock_multi_req *req)
{
    memset(req, 0, sizeof(*req));
    req->n = c->keys.n;
    req->keys = (const char *const *)c->keys.keys;
    req->key_lens = c->keys.lens;
    req->token = api_call_token(c);
    req->owner = c->owner;
    req->ttl_ms = c->ttl_ms;
}

void api_call_req(const struct api_call *c, struct lock_req *req)
{
    memset(req, 0, sizeof(*req));
    req->key = c->key;
    req->key_len = c->key_len;
    req->token = api_call_token(c);
    req->owner = c->owner;
    req->ttl_ms = c->ttl_ms;
    req->mode = c->mode;
    req->limit = c->limit;
    req->idem_key = c->idem_key;
    req->reenter = c->reenter;
    req->all = c->all;
}

bool api_call_new_grant(const struct api_call *c,
                        enum backend_result r,
                        const struct lock_grant *g)
{
    if (c->verb == API_VERB_ACQUIRE_MULTI)
        return r == BACKEND_OK;
    return c->verb == API_VERB_ACQUIRE && !c->reenter && r == BACKEND_OK &&
           g != NULL && !g->replay;
}

void api_response_cleanup(struct api_response *resp)
{
    free(resp->body);
    resp->body = NULL;
    resp->len = 0;
}

/* 128 bits from the kernel's CSPRNG as 32 lowercase hex characters. */
static int make_token(char out[API_TOKEN_LEN + 1])
{
    return random_hex(out, API_TOKEN_LEN / 2);
}

/* Set resp for a backend result that is not OK. */
static void backend_error(struct api_response *resp, enum backend_result r)
{
    enum api_error e = api_error_from(r);

    if (e == API_BACKEND_UNAVAILABLE)
        resp->retry_after = 1;
    codec_error(resp, e, api_result_message(r));
}

/* Token from header, query or body: missing_token when none (or ""). */
static enum api_error parse_token_params(const struct api_config *cfg,
                                         const struct api_request *rq,
                                         unsigned allowed,
                                         struct api_params *p,
                                         struct api_response *resp)
{
    char msg[MSG_MAX];
    enum api_error err = codec_parse_params(
        rq, allowed, cfg->max_ttl_ms, cfg->max_wait_ms, p, msg, sizeof(msg));

    if (err != API_OK) {
        codec_error(resp, err, msg);
        return err;
    }
    if (!p->has_token || p->token[0] == '\0') {
        codec_params_cleanup(p);
        codec_error(resp, API_MISSING_TOKEN, NULL);
        return API_MISSING_TOKEN;
    }
    return API_OK;
}

/* The rules between an acquire's parameters (docs/API.md, "Lock kinds"):
 * a re-entry token takes no wait_ms, mode, limit, owner or
 * Idempotency-Key; a limit needs shared mode. */
static enum api_error
check_acquire(const struct api_params *p, char *msg, size_t msglen)
{
    const char *extra = p->has_wait_ms ? "wait_ms"
                        : p->has_mode  ? "mode"
                        : p->has_limit ? "limit"
                        : p->has_owner ? "owner"
                                       : NULL;

    if (p->has_token && p->token[0] == '\0') {
        snprintf(msg, msglen,
                 "'token' is empty: a re-entry names the token that holds "
                 "the lock");
    } else if (p->has_token && extra != NULL) {
        snprintf(msg, msglen,
                 "a re-entry (an acquire with a token) takes no '%s'", extra);
    } else if (p->has_token && p->has_idem_key) {
        snprintf(msg, msglen,
                 "an Idempotency-Key is not allowed with a re-entry token");
    } else if (p->has_limit && (!p->has_mode || p->mode != LOCK_SHARED)) {
        snprintf(msg, msglen, "'limit' is only for \"mode\":\"shared\"");
    } else {
        return API_OK;
    }
    return API_INVALID_PARAMETER;
}

/* A shared acquire with a limit above 1 on a store that cannot bound its
 * holders (BACKEND_CAP_NO_SEMAPHORE: a majority of independent nodes, where
 * each of three holders may sit on a different majority): refused before
 * the store is asked. A re-entry takes no limit, so only a fresh acquire
 * (and its Idempotency-Key replays, which carry the same parameters)
 * reaches this. */
static enum api_error check_semaphore(const struct api_config *cfg,
                                      const struct api_params *p,
                                      char *msg,
                                      size_t msglen)
{
    if (!p->has_limit || p->limit <= 1 || p->mode != LOCK_SHARED ||
        (backend_caps(cfg->backend) & BACKEND_CAP_NO_SEMAPHORE) == 0)
        return API_OK;
    snprintf(msg, msglen,
             "limit above 1 (a semaphore) is not offered on %s://: a "
             "majority of independent nodes cannot bound the holders; leave "
             "limit out (no limit) or use 1, or another backend",
             backend_scheme(cfg->backend));
    return API_INVALID_PARAMETER;
}

/* c from an acquire's checked parameters p (whose strings c takes). */
static enum api_error fill_acquire(const struct api_config *cfg,
                                   struct api_params *p,
                                   struct api_call *c,
                                   struct api_response *resp)
{
    if (p->has_token) {
        c->reenter = true;
        c->client_token = p->token; /* handed over */
        p->token = NULL;
        c->ttl_ms = p->has_ttl_ms ? p->ttl_ms : 0; /* 0: keep the last */
        return API_OK;
    }
    c->ttl_ms = p->has_ttl_ms ? p->ttl_ms : cfg->default_ttl_ms;
    c->wait_ms = p->has_wait_ms ? p->wait_ms : 0;
    c->mode = p->has_mode ? p->mode : LOCK_EXCLUSIVE;
    c->limit = p->has_limit ? p->limit : 0;
    c->owner = p->owner; /* handed over */
    p->owner = NULL;
    c->idem_key = p->idem_key; /* handed over */
    p->idem_key = NULL;
    if (make_token(c->token) != 0) {
        log_error("getrandom failed: no token can be made");
        codec_error(resp, API_INTERNAL, "cannot make a token");
        return API_INTERNAL;
    }
    return API_OK;
}

/* DELETE /locks/{key}: a release with its token, or (force true) a
 * forced release, which takes neither a token nor "all". */
static enum api_error parse_release(const struct api_config *cfg,
                                    const struct api_request *rq,
                                    struct api_call *c,
                                    struct api_response *resp)
{
    struct api_params p;
    char msg[MSG_MAX];
    enum api_error err = codec_parse_params(
        rq, API_P_TOKEN | API_P_ALL | API_P_FORCE, cfg->max_ttl_ms,
        cfg->max_wait_ms, &p, msg, sizeof(msg));

    if (err != API_OK) {
        codec_error(resp, err, msg);
        return err;
    }
    if (p.has_force && p.force) {
        if (p.has_token || p.has_all) {
            err = API_INVALID_PARAMETER;
            codec_error(resp, err,
                        p.has_token ? "a forced release takes no token"
                                    : "a forced release takes no 'all': it "
                                      "frees every hold of every holder");
        }
        c->verb = API_VERB_FORCE_RELEASE;
    } else if (!p.has_token || p.token[0] == '\0') {
        err = API_MISSING_TOKEN;
        codec_error(resp, err, NULL);
    } else {
        c->client_token = p.token; /* handed over */
        p.token = NULL;
        c->all = p.all;
    }
    codec_params_cleanup(&p);
    return err;
}

enum api_error handle_call_parse(const struct api_config *cfg,
                                 const struct api_request *rq,
                                 enum api_verb verb,
                                 char *key,
                                 size_t key_len,
                                 struct api_call *c,
                                 struct api_response *resp)
{
    static const unsigned allowed[] = {
        [API_VERB_ACQUIRE] = ALLOW_ACQUIRE,
        [API_VERB_RENEW] = API_P_TOKEN | API_P_TTL_MS,
        [API_VERB_RELEASE] = API_P_TOKEN | API_P_ALL,
        [API_VERB_INSPECT] = 0,
    };
    struct api_params p;
    char msg[MSG_MAX];
    enum api_error err;

    memset(c, 0, sizeof(*c));
    c->verb = verb;
    c->key = key; /* ours now, freed by api_call_cleanup() */
    c->key_len = key_len;
    if (verb == API_VERB_RELEASE)
        return parse_release(cfg, rq, c, resp);
    if (verb == API_VERB_RENEW) {
        err = parse_token_params(cfg, rq, allowed[verb], &p, resp);
        if (err != API_OK)
            return err;
        c->client_token = p.token; /* handed over */
        p.token = NULL;
    } else {
        err = codec_parse_params(rq, allowed[verb], cfg->max_ttl_ms,
                                 cfg->max_wait_ms, &p, msg, sizeof(msg));
        if (err == API_OK && verb == API_VERB_ACQUIRE)
            err = check_acquire(&p, msg, sizeof(msg));
        if (err == API_OK && verb == API_VERB_ACQUIRE)
            err = check_semaphore(cfg, &p, msg, sizeof(msg));
        if (err != API_OK) {
            codec_params_cleanup(&p);
            codec_error(resp, err, msg);
            return err;
        }
    }
    if (verb == API_VERB_ACQUIRE)
        err = fill_acquire(cfg, &p, c, resp);
    else if (verb == API_VERB_RENEW)
        c->ttl_ms = p.has_ttl_ms ? p.ttl_ms : 0; /* 0: keep the last TTL */
    codec_params_cleanup(&p);
    return err;
}

/* A grant or renewal as it stands now: 503 if nothing of it is left. */
static void grant_reply(struct api_response *resp,
                        unsigned status,
                        const struct api_call *c,
                        const char *token,
                        const struct lock_grant *g)
{
    uint64_t left = backend_grant_left_ms(g, clock_mono_us());

    if (left == 0) {
        log_warn("the store answered after the grant's TTL had passed: "
                 "answering 503, not a grant");
        resp->retry_after = 1;
        codec_error(resp, API_BACKEND_UNAVAILABLE,
                    "the store answered too late: the lock's TTL passed "
                    "before the answer could be sent");
        return;
    }
    codec_grant(resp, status, c->key, c->key_len, token, g, left);
}

static void held_reply(const struct api_call *c,
                       const struct lock_grant *g,
                       struct api_response *resp)
{
    uint64_t ms = g->retry_ms > 0 ? g->retry_ms : 1;

    metrics_lock_conflict();
    codec_reply(resp, 409, "{s:{s:s,s:s,s:I}}", "error", "code", "lock_held",
                "message",
                c->wait_ms > 0 ? "the lock is still held by someone else "
                                 "after waiting wait_ms"
                               : "the lock is held by someone else",
                "retry_after_ms", (json_int_t)ms);
    resp->retry_after = (unsigned)((ms + 999) / 1000);
}

static void readyz_reply(const struct api_config *cfg,
                         enum backend_result r,
                         struct api_response *resp);
static void metrics_reply(const struct api_config *cfg,
                          int64_t held,
                          struct api_response *resp);

void handle_call_reply(const struct api_config *cfg,
                       const struct api_call *c,
                       enum backend_result r,
                       const struct lock_grant *g,
                       const struct lock_info *info,
                       int64_t held,
                       struct api_response *resp)
{
    if (c->verb == API_VERB_READYZ) {
        readyz_reply(cfg, r, resp);
        return;
    }
    if (c->verb == API_VERB_METRICS) {
        metrics_reply(cfg, held, resp);
        return;
    }
    if (c->verb == API_VERB_FORCE_RELEASE) {
        handle_force_reply(c, r, info, resp);
        return;
    }
    if (r == BACKEND_HELD && c->verb == API_VERB_ACQUIRE) {
        held_reply(c, g, resp);
        return;
    }
    if (r != BACKEND_OK) {
        backend_error(resp, r);
        return;
    }
    switch (c->verb) {
    case API_VERB_ACQUIRE:
        if (c->reenter)
            grant_reply(resp, 200, c, c->client_token, g);
        else if (!g->replay)
            grant_reply(resp, 201, c, c->token, g);
        else if (g->token[0] != '\0')
            grant_reply(resp, 201, c, g->token, g); /* the grant again */
        else
            codec_error(resp, API_INTERNAL,
                        "the store replayed a grant without its token");
        break;
    case API_VERB_RENEW:
        grant_reply(resp, 200, c, c->client_token, g);
        break;
    case API_VERB_RELEASE:
        codec_released(resp, c->key, c->key_len, g->holds);
        break;
    default:
        codec_inspect(resp, c->key, c->key_len, info);
        break;
    }
}

void handle_healthz(struct api_response *resp)
{
    codec_reply(resp, 200, "{s:s}", "status", "ok");
}

void handle_readyz_draining(const struct api_config *cfg,
                            struct api_response *resp)
{
    struct backend_topology t;

    backend_describe(cfg->backend, &t);
    codec_reply(resp, 503, "{s:s,s:s,s:s,s:s}", "status", "unavailable",
                "backend", backend_scheme(cfg->backend), "topology", t.topology,
                "reason", "shutting down");
    resp->retry_after = 1;
}

/* {"total","up","voting","quorum"} of a store of independent nodes as the
 * adapter last checked them (backend_nodes(): no store call), or NULL for
 * a store without a per-node view (or out of memory: the key is left out;
 * the adapter's ping() decided the status either way). A new reference. */
static json_t *readyz_nodes(const struct backend *be)
{
    struct backend_node nodes[BACKEND_NODES_MAX];
    unsigned quorum = 0;
    size_t n = backend_nodes(be, nodes, BACKEND_NODES_MAX, &quorum);
    json_int_t up = 0, voting = 0;

    if (n == 0)
        return NULL;
    if (n > BACKEND_NODES_MAX)
        n = BACKEND_NODES_MAX;
    for (size_t i = 0; i < n; i++) {
        up += nodes[i].up;
        voting += nodes[i].voting;
    }
    return json_pack("{s:I,s:I,s:I,s:I}", "total", (json_int_t)n, "up", up,
                     "voting", voting, "quorum", (json_int_t)quorum);
}

/* 200 says what the store guarantees (backend_describe()); 503 only which
 * store it is and why it is not ready. Both carry "nodes" for a store of
 * independent nodes. */
static void readyz_reply(const struct api_config *cfg,
                         enum backend_result r,
                         struct api_response *resp)
{
    const char *scheme = backend_scheme(cfg->backend);
    struct backend_topology t;
    json_t *nodes = readyz_nodes(cfg->backend); /* taken by codec_reply */

    backend_describe(cfg->backend, &t);
    if (r == BACKEND_OK) {
        codec_reply(
            resp, 200, "{s:s,s:s,s:s,s:s,s:{s:s,s:s,s:I},s:o*}", "status",
            "ready", "backend", scheme, "fifo",
            (backend_caps(cfg->backend) & BACKEND_CAP_QUEUE) != 0 ? "store"
                                                                  : "instance",
            "topology", t.topology, "guarantees", "fence", t.fence, "failover",
            t.failover, "nodes", (json_int_t)t.nodes, "nodes", nodes);
    } else {
        codec_reply(resp, 503, "{s:s,s:s,s:s,s:s,s:o*}", "status",
                    "unavailable", "backend", scheme, "topology", t.topology,
                    "reason", backend_result_str(r), "nodes", nodes);
        resp->retry_after = 1;
    }
}

/* The exposition, with the per-node gauges of a store of independent
 * nodes (backend_nodes(): no store call). */
static void metrics_reply(const struct api_config *cfg,
                          int64_t held,
                          struct api_response *resp)
{
    struct backend_node nodes[BACKEND_NODES_MAX];
    struct metrics_node mn[BACKEND_NODES_MAX];
    unsigned quorum = 0;
    size_t n = backend_nodes(cfg->backend, nodes, BACKEND_NODES_MAX, &quorum);
    size_t len = 0;
    char *text;

    if (n > BACKEND_NODES_MAX)
        n = BACKEND_NODES_MAX;
    for (size_t i = 0; i < n; i++) {
        mn[i] = (struct metrics_node){
            .name = nodes[i].name,
            .up = nodes[i].up,
            .voting = nodes[i].voting,
            .quarantined = nodes[i].quarantined,
            .quarantine_ms = nodes[i].quarantine_ms,
            .latency_us = nodes[i].latency_us,
        };
    }
    text = metrics_render_nodes(held, mn, n, &len);

    if (text == NULL) {
        codec_error(resp, API_INTERNAL, NULL);
        return;
    }
    free(resp->body);
    resp->status = 200;
    resp->body = text;
    resp->len = len;
    resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
}
