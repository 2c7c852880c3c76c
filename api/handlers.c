/*
 * api/handlers.c - one function per endpoint of API.md: parse with the
 * codec, call the backend through its wrappers, answer in JSON.
 */
#include "api/handlers.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "service/log.h"
#include "service/metrics.h"

#define MSG_MAX 512

void api_acquire_cleanup(struct api_acquire *acq)
{
    free(acq->key);
    free(acq->owner);
    memset(acq, 0, sizeof(*acq));
}

void api_response_cleanup(struct api_response *resp)
{
    free(resp->body);
    resp->body = NULL;
    resp->len = 0;
}

/* Bytes from getrandom(), fetched 4 KiB at a time per thread: one system
 * call per 256 tokens. Each byte is handed out once and then wiped. */
static _Thread_local unsigned char rnd_buf[4096];
static _Thread_local size_t rnd_left;

static int random_bytes(unsigned char *out, size_t n)
{
    if (rnd_left < n) {
        size_t got = 0;
        while (got < sizeof(rnd_buf)) {
            ssize_t r = getrandom(rnd_buf + got, sizeof(rnd_buf) - got, 0);
            if (r <= 0)
                return -1;
            got += (size_t)r;
        }
        rnd_left = sizeof(rnd_buf);
    }
    rnd_left -= n;
    memcpy(out, rnd_buf + rnd_left, n);
    memset(rnd_buf + rnd_left, 0, n);
    return 0;
}

/* 128 bits from the kernel's CSPRNG as 32 lowercase hex characters. */
static int make_token(char out[API_TOKEN_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[API_TOKEN_LEN / 2];

    if (random_bytes(raw, sizeof(raw)) != 0)
        return -1;
    for (size_t i = 0; i < sizeof(raw); i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 0xf];
    }
    out[API_TOKEN_LEN] = '\0';
    return 0;
}

/* Set resp for a backend result that is not OK. */
static void backend_error(struct api_response *resp, enum backend_result r)
{
    enum api_error e = api_error_from(r);

    if (e == API_BACKEND_UNAVAILABLE)
        resp->retry_after = 1;
    codec_error(resp, e, NULL);
}

enum api_error handle_acquire_parse(const struct api_config *cfg,
                                    const struct api_request *rq,
                                    char *key,
                                    size_t key_len,
                                    struct api_acquire *acq,
                                    struct api_response *resp)
{
    struct api_params p;
    char msg[MSG_MAX];
    enum api_error err;

    memset(acq, 0, sizeof(*acq));
    acq->key = key; /* ours now, freed by api_acquire_cleanup() */
    acq->key_len = key_len;
    err = codec_parse_params(rq, API_P_TTL_MS | API_P_WAIT_MS | API_P_OWNER,
                             cfg->max_ttl_ms, cfg->max_wait_ms, &p, msg,
                             sizeof(msg));
    if (err != API_OK) {
        codec_error(resp, err, msg);
        return err;
    }
    acq->ttl_ms = p.has_ttl_ms ? p.ttl_ms : cfg->default_ttl_ms;
    acq->wait_ms = p.has_wait_ms ? p.wait_ms : 0;
    acq->owner = p.owner; /* handed over */
    p.owner = NULL;
    codec_params_cleanup(&p);
    if (make_token(acq->token) != 0) {
        log_error("getrandom failed: no token can be made");
        codec_error(resp, API_INTERNAL, "cannot make a token");
        return API_INTERNAL;
    }
    return API_OK;
}

static void grant_reply(struct api_response *resp,
                        unsigned status,
                        const char *key,
                        size_t key_len,
                        const char *token,
                        const struct lock_grant *g)
{
    codec_grant(resp, status, key, key_len, token, g->fence, g->ttl_ms,
                g->expires_at_ms);
}

void handle_acquire_reply(const struct api_acquire *acq,
                          enum backend_result r,
                          const struct lock_grant *g,
                          struct api_response *resp)
{
    if (r == BACKEND_OK) {
        grant_reply(resp, 201, acq->key, acq->key_len, acq->token, g);
    } else if (r == BACKEND_HELD) {
        uint64_t ms = g->retry_ms > 0 ? g->retry_ms : 1;
        metrics_lock_conflict();
        codec_reply(resp, 409, "{s:{s:s,s:s,s:I}}", "error", "code",
                    "lock_held", "message",
                    acq->wait_ms > 0
                        ? "the lock is still held by someone else after "
                          "waiting wait_ms"
                        : "the lock is held by someone else",
                    "retry_after_ms", (json_int_t)ms);
        resp->retry_after = (unsigned)((ms + 999) / 1000);
    } else {
        backend_error(resp, r);
    }
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

void handle_renew(const struct api_config *cfg,
                  const struct api_request *rq,
                  const char *key,
                  size_t key_len,
                  struct api_response *resp)
{
    struct api_params p;
    struct lock_req req = { 0 };
    struct lock_grant g;
    enum backend_result r;

    if (parse_token_params(cfg, rq, API_P_TOKEN | API_P_TTL_MS, &p, resp) !=
        API_OK)
        return;
    req.key = key;
    req.key_len = key_len;
    req.token = p.token;
    req.ttl_ms = p.has_ttl_ms ? p.ttl_ms : 0; /* 0: keep the last TTL */
    r = backend_renew(cfg->backend, &req, &g);
    if (r == BACKEND_OK)
        grant_reply(resp, 200, key, key_len, p.token, &g);
    else
        backend_error(resp, r);
    codec_params_cleanup(&p);
}

void handle_release(const struct api_config *cfg,
                    const struct api_request *rq,
                    const char *key,
                    size_t key_len,
                    struct api_response *resp)
{
    struct api_params p;
    struct lock_req req = { 0 };
    enum backend_result r;

    if (parse_token_params(cfg, rq, API_P_TOKEN, &p, resp) != API_OK)
        return;
    req.key = key;
    req.key_len = key_len;
    req.token = p.token;
    r = backend_release(cfg->backend, &req);
    if (r == BACKEND_OK)
        codec_reply(resp, 200, "{s:s%,s:b}", "key", key, key_len, "released",
                    1);
    else
        backend_error(resp, r);
    codec_params_cleanup(&p);
}

void handle_inspect(const struct api_config *cfg,
                    const struct api_request *rq,
                    const char *key,
                    size_t key_len,
                    struct api_response *resp)
{
    struct api_params p;
    struct lock_info info;
    char msg[MSG_MAX];
    char when[40];
    enum api_error err;
    enum backend_result r;

    err = codec_parse_params(rq, 0, cfg->max_ttl_ms, cfg->max_wait_ms, &p, msg,
                             sizeof(msg));
    if (err != API_OK) {
        codec_error(resp, err, msg);
        return;
    }
    codec_params_cleanup(&p);
    r = backend_inspect(cfg->backend, key, key_len, &info);
    if (r != BACKEND_OK) {
        backend_error(resp, r);
        return;
    }
    codec_format_time(info.expires_at_ms, when, sizeof(when));
    /* "s*": the owner is left out when there is none */
    codec_reply(resp, 200, "{s:s%,s:b,s:I,s:I,s:s,s:s*}", "key", key, key_len,
                "held", 1, "fence", (json_int_t)info.fence, "ttl_ms",
                (json_int_t)(info.ttl_ms > 0 ? info.ttl_ms : 1), "expires_at",
                when, "owner", info.has_owner ? info.owner : NULL);
}

void handle_healthz(struct api_response *resp)
{
    codec_reply(resp, 200, "{s:s}", "status", "ok");
}

void handle_readyz(const struct api_config *cfg,
                   bool shutting_down,
                   struct api_response *resp)
{
    const char *scheme = backend_scheme(cfg->backend);
    enum backend_result r;

    if (shutting_down) {
        codec_reply(resp, 503, "{s:s,s:s,s:s}", "status", "unavailable",
                    "backend", scheme, "reason", "shutting down");
        resp->retry_after = 1;
        return;
    }
    r = backend_ping(cfg->backend);
    if (r == BACKEND_OK) {
        codec_reply(resp, 200, "{s:s,s:s,s:s}", "status", "ready", "backend",
                    scheme, "fifo",
                    (backend_caps(cfg->backend) & BACKEND_CAP_QUEUE) != 0
                        ? "store"
                        : "instance");
    } else {
        codec_reply(resp, 503, "{s:s,s:s,s:s}", "status", "unavailable",
                    "backend", scheme, "reason", backend_result_str(r));
        resp->retry_after = 1;
    }
}

void handle_metrics(const struct api_config *cfg, struct api_response *resp)
{
    size_t len = 0;
    char *text = metrics_render(backend_held_count(cfg->backend), &len);

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
