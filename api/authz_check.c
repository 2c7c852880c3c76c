/*
 * api/authz_check.c - the decisions of the credentials policy (authz.h):
 * who sends a request (401 before anything is parsed) and whether the
 * parsed call is covered (403 before any store call). Messages name the
 * credential and what it lacks, never a token.
 */
#include "api/authz.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#include "lib/text.h"

#define MSG_MAX 384

/* What "*" on every key allows: --tls-client-ca's any verified
 * certificate, and requests without credentials under --admin-token-file
 * alone. */
static char every_key[] = "";
static char *every_prefix[] = { every_key };
static size_t every_len[] = { 0 };
static const struct authz_cred star_cred = {
    .nprefixes = 1,
    .prefixes = every_prefix,
    .prefix_lens = every_len,
    .verbs = AUTHZ_STAR,
    .modes = AUTHZ_MODE_EXCLUSIVE | AUTHZ_MODE_SHARED,
    .multi = true,
};

/* For "credential 'x' may not <phrase>". */
static const char *verb_phrase(enum authz_verb v)
{
    switch (v) {
    case AUTHZ_ACQUIRE:
        return "acquire keys";
    case AUTHZ_RENEW:
        return "renew keys";
    case AUTHZ_RELEASE:
        return "release keys";
    case AUTHZ_INSPECT:
        return "inspect keys";
    case AUTHZ_LIST:
        return "list keys";
    case AUTHZ_FORCE:
        return "force-release keys";
    case AUTHZ_PROBES:
        return "read /healthz and /readyz";
    case AUTHZ_METRICS:
        return "read /metrics";
    case AUTHZ_VERB_COUNT:
        break;
    }
    return "do this";
}

static enum api_error unauthorized(struct api_response *resp, const char *msg)
{
    codec_error(resp, API_UNAUTHORIZED, msg);
    resp->www_authenticate = true;
    return API_UNAUTHORIZED;
}

static enum api_error forbidden(struct api_response *resp, const char *msg)
{
    codec_error(resp, API_FORBIDDEN, msg);
    return API_FORBIDDEN;
}

/* The index of the credential whose token digest is d, or SIZE_MAX. Every
 * digest is compared in full, whichever matches. */
static size_t find_token(const struct authz_policy *p, const unsigned char *d)
{
    size_t found = SIZE_MAX;

    for (size_t i = 0; i < p->n; i++) {
        unsigned diff = 0;
        size_t mask;
        if (!p->creds[i].has_token)
            continue;
        for (size_t k = 0; k < AUTHZ_SHA256_LEN; k++)
            diff |= (unsigned)(p->creds[i].token_sha256[k] ^ d[k]);
        mask = (size_t)0 - (size_t)(diff == 0); /* all ones on a match */
        found = (found & ~mask) | (i & mask);
    }
    return found;
}

static enum api_error
by_token(const char *header, struct authz_who *who, struct api_response *resp)
{
    unsigned char d[AUTHZ_SHA256_LEN];
    const char *t = header;
    size_t i;

    if (strncasecmp(t, "Bearer ", 7) != 0)
        return unauthorized(resp, "the Authorization header must be "
                                  "'Bearer <token>'");
    t += 7;
    while (*t == ' ')
        t++;
    if (*t == '\0')
        return unauthorized(resp, "the bearer token is empty");
    if (gnutls_hash_fast(GNUTLS_DIG_SHA256, t, strlen(t), d) != 0)
        return unauthorized(resp, "the bearer token cannot be checked");
    i = find_token(who->policy, d);
    if (i == SIZE_MAX)
        return unauthorized(resp, "the bearer token matches no credential");
    who->as = AUTHZ_AS_CRED;
    who->cred = &who->policy->creds[i];
    return API_OK;
}

static void by_cert(const struct api_request *rq, struct authz_who *who)
{
    const struct authz_policy *p = who->policy;

    for (size_t i = 0; i < p->n; i++) {
        const char *id = p->creds[i].tls_identity;
        for (size_t k = 0; id != NULL && k < rq->ntls_names; k++) {
            if (rq->tls_names[k] != NULL && strcmp(rq->tls_names[k], id) == 0) {
                who->as = AUTHZ_AS_CRED;
                who->cred = &p->creds[i];
                return;
            }
        }
    }
    who->as = p->any_cert ? AUTHZ_AS_ANY_CERT : AUTHZ_AS_NO_MATCH;
    snprintf(who->cert_name, sizeof(who->cert_name), "%s",
             rq->tls_names[0] != NULL ? rq->tls_names[0] : "");
    /* a name for messages, logs and metrics: printable ASCII only */
    for (char *q = who->cert_name; *q != '\0'; q++)
        if (*q < 0x20 || *q > 0x7e || *q == '\'' || *q == '"')
            *q = '?';
}

static bool any_token(const struct authz_policy *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->creds[i].has_token)
            return true;
    return false;
}

enum api_error authz_identify(struct authz *a,
                              const struct api_request *rq,
                              struct authz_who *who,
                              struct api_response *resp)
{
    char msg[MSG_MAX];

    memset(who, 0, sizeof(*who));
    if (a == NULL)
        return API_OK;
    who->policy = authz_policy_get(a);
    if (rq->authorization != NULL)
        return by_token(rq->authorization, who, resp);
    if (rq->tls_peer == API_TLS_VERIFIED && rq->ntls_names > 0) {
        by_cert(rq, who);
        return API_OK;
    }
    if (rq->tls_peer == API_TLS_BAD_CERT) {
        snprintf(msg, sizeof(msg), "the client certificate did not verify: %s",
                 rq->tls_error != NULL ? rq->tls_error : "unknown reason");
        return unauthorized(resp, msg);
    }
    if (who->policy->anonymous) {
        who->as = AUTHZ_AS_ANONYMOUS;
        return API_OK;
    }
    if (rq->tls_peer == API_TLS_NO_CERT || rq->tls_peer == API_TLS_VERIFIED)
        return unauthorized(resp, any_token(who->policy)
                                      ? "a bearer token (Authorization: "
                                        "Bearer) or a client certificate is "
                                        "required"
                                      : "a client certificate is required");
    return unauthorized(resp, NULL);
}

void authz_done(struct authz_who *who)
{
    authz_policy_unref(who->policy);
    memset(who, 0, sizeof(*who));
}

static enum authz_verb verb_of(const struct api_call *c)
{
    switch (c->verb) {
    case API_VERB_ACQUIRE:
    case API_VERB_ACQUIRE_MULTI:
        return AUTHZ_ACQUIRE;
    case API_VERB_RENEW:
    case API_VERB_RENEW_MULTI:
        return AUTHZ_RENEW;
    case API_VERB_RELEASE:
    case API_VERB_RELEASE_MULTI:
        return AUTHZ_RELEASE;
    case API_VERB_INSPECT:
        return AUTHZ_INSPECT;
    case API_VERB_LIST:
        return AUTHZ_LIST;
    case API_VERB_FORCE_RELEASE:
        return AUTHZ_FORCE;
    case API_VERB_READYZ:
        return AUTHZ_PROBES;
    case API_VERB_METRICS:
        return AUTHZ_METRICS;
    }
    return AUTHZ_VERB_COUNT;
}

static bool covered(const struct authz_cred *c, const char *key, size_t len)
{
    for (size_t i = 0; i < c->nprefixes; i++)
        if (c->prefix_lens[i] <= len &&
            memcmp(c->prefixes[i], key, c->prefix_lens[i]) == 0)
            return true;
    return false;
}

/* c's prefixes, ", "-separated, into buf; "its N prefixes" when they do
 * not fit or are not printable. */
static void
describe_prefixes(const struct authz_cred *c, char *buf, size_t buflen)
{
    size_t used = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < c->nprefixes; i++) {
        int n = snprintf(buf + used, buflen - used, "%s%s", i > 0 ? ", " : "",
                         c->prefixes[i]);
        if (n < 0 || (size_t)n >= buflen - used ||
            !text_utf8_valid(c->prefixes[i], c->prefix_lens[i]) ||
            text_has_control(c->prefixes[i], c->prefix_lens[i])) {
            snprintf(buf, buflen, "its %zu prefixes", c->nprefixes);
            return;
        }
        used += (size_t)n;
    }
}

static enum api_error out_of_scope(const struct authz_cred *c,
                                   const char *name,
                                   enum authz_verb v,
                                   const char *which,
                                   struct api_response *resp)
{
    char msg[MSG_MAX], pfx[200];

    describe_prefixes(c, pfx, sizeof(pfx));
    snprintf(msg, sizeof(msg), "credential '%s' may not %s outside %s%s%s",
             name, verb_phrase(v), pfx, which != NULL ? ": " : "",
             which != NULL ? which : "");
    return forbidden(resp, msg);
}

/* The keys of c: each within one of cred's prefixes. */
static enum api_error check_keys(const struct authz_cred *cred,
                                 const char *name,
                                 enum authz_verb v,
                                 const struct api_call *c,
                                 struct api_response *resp)
{
    char which[48];

    if (c->verb == API_VERB_LIST) {
        if (c->list == NULL ||
            covered(cred, c->list->prefix, c->list->prefix_len))
            return API_OK;
        return out_of_scope(cred, name, v,
                            "give a prefix that starts with one of them", resp);
    }
    if (!api_call_is_multi(c))
        return covered(cred, c->key, c->key_len)
                   ? API_OK
                   : out_of_scope(cred, name, v, NULL, resp);
    for (size_t i = 0; i < c->keys.n; i++) {
        if (!covered(cred, c->keys.keys[i], c->keys.lens[i])) {
            snprintf(which, sizeof(which), "keys[%zu]", i);
            return out_of_scope(cred, name, v, which, resp);
        }
    }
    return API_OK;
}

static enum api_error check_cred(const struct authz_policy *p,
                                 const struct authz_cred *cred,
                                 const char *name,
                                 const struct api_call *c,
                                 struct api_response *resp)
{
    enum authz_verb v = verb_of(c);
    char msg[MSG_MAX];

    if (v == AUTHZ_VERB_COUNT || (cred->verbs & (1u << v)) == 0) {
        snprintf(msg, sizeof(msg), "credential '%s' may not %s%s", name,
                 verb_phrase(v),
                 v == AUTHZ_FORCE && !p->any_force
                     ? " (no credential may: --admin-token-file is not set "
                       "and no --auth-file credential has \"force\")"
                     : "");
        return forbidden(resp, msg);
    }
    if (api_call_is_multi(c) && !cred->multi) {
        snprintf(msg, sizeof(msg),
                 "credential '%s' may not use several keys at once "
                 "(\"multi\": false)",
                 name);
        return forbidden(resp, msg);
    }
    if (v == AUTHZ_ACQUIRE && !c->reenter) {
        bool shared = c->verb == API_VERB_ACQUIRE && c->mode == LOCK_SHARED;
        unsigned need = shared ? AUTHZ_MODE_SHARED : AUTHZ_MODE_EXCLUSIVE;
        if ((cred->modes & need) == 0) {
            snprintf(msg, sizeof(msg),
                     "credential '%s' may not acquire %s locks", name,
                     shared ? "shared" : "exclusive");
            return forbidden(resp, msg);
        }
    }
    if (v == AUTHZ_PROBES || v == AUTHZ_METRICS)
        return API_OK;
    return check_keys(cred, name, v, c, resp);
}

enum api_error authz_allow(const struct authz_who *who,
                           struct api_call *c,
                           struct api_response *resp)
{
    const struct authz_cred *cred = &star_cred;
    const char *name = who->cert_name;
    char msg[MSG_MAX];
    enum api_error e;

    switch (who->as) {
    case AUTHZ_AS_OFF:
        if (c->verb != API_VERB_FORCE_RELEASE)
            return API_OK;
        return forbidden(resp, "a forced release needs an admin token, and "
                               "--admin-token-file is not set");
    case AUTHZ_AS_NO_MATCH:
        snprintf(msg, sizeof(msg),
                 "the client certificate '%s' matches no credential's "
                 "tls_identity",
                 who->cert_name);
        return forbidden(resp, msg);
    case AUTHZ_AS_ANONYMOUS:
        if (c->verb != API_VERB_FORCE_RELEASE)
            return API_OK;
        return unauthorized(resp, "a forced release needs the admin token "
                                  "(Authorization: Bearer)");
    case AUTHZ_AS_ANY_CERT:
        break;
    case AUTHZ_AS_CRED:
        cred = who->cred;
        name = cred->name;
        break;
    }
    e = check_cred(who->policy, cred, name, c, resp);
    if (e != API_OK)
        return e;
    free(c->client);
    c->client = strndup(name, API_CLIENT_LEN);
    if (c->client == NULL) {
        codec_error(resp, API_INTERNAL, NULL);
        return API_INTERNAL;
    }
    c->client_max_waiters = cred->max_waiters;
    return API_OK;
}

enum api_error authz_operator(struct authz *a,
                              const struct api_request *rq,
                              enum api_route route,
                              struct api_response *resp)
{
    struct authz_who who;
    struct authz_policy *p;
    struct api_call c;
    unsigned bit = route == API_ROUTE_HEALTHZ  ? AUTHZ_OPEN_HEALTHZ
                   : route == API_ROUTE_READYZ ? AUTHZ_OPEN_READYZ
                                               : AUTHZ_OPEN_METRICS;
    bool open;
    enum api_error e;

    if (a == NULL)
        return API_OK;
    p = authz_policy_get(a);
    open = (p->open & bit) != 0; /* whatever is sent, a wrong token too */
    authz_policy_unref(p);
    if (open)
        return API_OK;
    e = authz_identify(a, rq, &who, resp);
    if (e == API_OK) {
        memset(&c, 0, sizeof(c));
        c.verb =
            route == API_ROUTE_METRICS ? API_VERB_METRICS : API_VERB_READYZ;
        e = authz_allow(&who, &c, resp);
        free(c.client); /* the name authz_allow() copied: not kept here */
    }
    authz_done(&who);
    return e;
}

int authz_token_name(struct authz *a,
                     const char *token,
                     char *name,
                     size_t namelen)
{
    unsigned char d[AUTHZ_SHA256_LEN];
    struct authz_policy *p;
    size_t i;

    if (a == NULL || token == NULL ||
        gnutls_hash_fast(GNUTLS_DIG_SHA256, token, strlen(token), d) != 0)
        return -1;
    p = authz_policy_get(a);
    i = find_token(p, d);
    if (i != SIZE_MAX)
        snprintf(name, namelen, "%s", p->creds[i].name);
    authz_policy_unref(p);
    return i != SIZE_MAX ? 0 : -1;
}
