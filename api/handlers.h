/*
 * api/handlers.h - one function per endpoint. Each fills an api_response.
 * The lock verbs are split in two because store calls and waiting belong
 * to the server: parse into an api_call, then build the reply from the
 * backend's answer.
 */
#ifndef API_HANDLERS_H
#define API_HANDLERS_H

#include "api/codec.h"
#include "lib/log.h"

struct authz;

struct api_config { /* frozen before the server starts */
    struct backend *backend;
    uint64_t default_ttl_ms;
    uint64_t max_ttl_ms;
    uint64_t max_wait_ms;
    struct authz *authz;        /* the credentials (api/authz.h); NULL: auth is
                                   off. Swapped inside on SIGHUP */
    enum log_events log_events; /* which lifecycle events to log */
};

enum api_verb {
    API_VERB_ACQUIRE = 0,
    API_VERB_RENEW,
    API_VERB_RELEASE,
    API_VERB_INSPECT,
    API_VERB_READYZ,        /* GET /readyz: no key */
    API_VERB_METRICS,       /* GET /metrics: no key */
    API_VERB_ACQUIRE_MULTI, /* POST /locks: several keys, c->keys */
    API_VERB_RENEW_MULTI,   /* PUT /locks */
    API_VERB_RELEASE_MULTI, /* DELETE /locks */
    API_VERB_LIST,          /* GET /locks: c->list */
    API_VERB_FORCE_RELEASE, /* DELETE /locks/{key}?force=true */
};

#define API_CLIENT_LEN 64 /* bytes of a credential's name */

struct api_call { /* a parsed request that needs the store, for the
                    server to run; its fields ordered without holes, since
                    every parked waiter keeps one */
    enum api_verb verb;
    unsigned client_max_waiters; /* the credential's max_waiters; 0:
                                    --max-waiters-per-client */
    char *client;                /* owned: the name of the credential that
                                    authorized the call (up to
                                    API_CLIENT_LEN bytes); NULL when auth is
                                    off */
    char *key;                   /* owned, decoded */
    size_t key_len;
    char *client_token; /* renew, release, re-entry: owned */
    char *owner;        /* owned; NULL when none */
    char *idem_key;     /* acquire: owned; NULL when none */
    uint64_t ttl_ms;    /* renew, re-entry: 0 = keep the last */
    uint64_t wait_ms;
    enum lock_mode mode;           /* acquire */
    uint32_t limit;                /* acquire, shared: 0 = none */
    struct api_keys keys;          /* the multi verbs: owned, instead of key */
    struct api_list_params *list;  /* API_VERB_LIST: owned, else NULL */
    char token[API_TOKEN_LEN + 1]; /* acquire: fresh, from getrandom */
    bool reenter; /* an acquire that named a token: the store's renew with
                     one more hold, answered 200 */
    bool all;     /* release: every hold */
};

void api_call_cleanup(struct api_call *c); /* accepts zeroed */
void api_response_cleanup(struct api_response *resp);

/* The store request of a list call (strings borrowed from c->list). */
void api_call_list_req(const struct api_call *c, struct lock_list_req *req);

/* True for the verbs on several keys at once (c->keys, not c->key). */
bool api_call_is_multi(const struct api_call *c);

/* The token the store call names: the fresh one or the client's. */
const char *api_call_token(const struct api_call *c);

/* The store request for c (strings borrowed from c): key, token, owner,
 * ttl_ms, mode, limit, idem_key, reenter, all. A re-entry is run as a
 * renew (c->reenter), anything else by c->verb. */
void api_call_req(const struct api_call *c, struct lock_req *req);

/* The store request for a multi verb (strings borrowed from c): keys,
 * token, owner, ttl_ms. */
void api_call_multi_req(const struct api_call *c, struct lock_multi_req *req);

/* True if c's grant, when OK, is one that no one held before the call: a
 * new acquire grant (not a re-entry, not a replay of an earlier grant).
 * Only such a grant is released when its client never receives it. */
bool api_call_new_grant(const struct api_call *c,
                        enum backend_result r,
                        const struct lock_grant *g);

/* POST, PUT, DELETE, GET or HEAD /locks/{key}: API_OK and *c filled (the
 * caller runs it and answers with handle_call_reply()), or an error
 * already written into resp. key is handed over to c. An acquire that
 * names a token is a re-entry (c->reenter); besides the codec's rules it
 * refuses, as 400 invalid_parameter, a limit without shared mode, an empty
 * re-entry token, a re-entry token with wait_ms, mode, limit, owner or
 * an Idempotency-Key, and a shared limit above 1 on a backend with
 * BACKEND_CAP_NO_SEMAPHORE (the message names its scheme). A release with force
 * true (query or body) becomes API_VERB_FORCE_RELEASE (400 invalid_parameter
 * with a token or "all"; the caller checks the admin credential); force false
 * is a release. */
enum api_error handle_call_parse(const struct api_config *cfg,
                                 const struct api_request *rq,
                                 enum api_verb verb,
                                 char *key,
                                 size_t key_len,
                                 struct api_call *c,
                                 struct api_response *resp);
/* The answer to c once the store answered r: force release 200 {key,
 * released, forced, holders} from info (501 when the store has no forced
 * release); acquire 201 (or 409
 * lock_held with retry_ms on BACKEND_HELD; a replay 201 with its own
 * token), re-entry 200, renew 200, release 200 {key, released, holds},
 * inspect 200 from info, readyz from the ping's r, metrics with held (the
 * store's held count, -1 if unknown), else the mapped error. A grant's
 * ttl_ms is what is left of it now (backend_grant_left_ms()); a grant with
 * nothing left is answered 503, never as held. */
void handle_call_reply(const struct api_config *cfg,
                       const struct api_call *c,
                       enum backend_result r,
                       const struct lock_grant *g,
                       const struct lock_info *info,
                       int64_t held,
                       struct api_response *resp);
/* POST, PUT or DELETE /locks (verb one of the multi verbs): API_OK and *c
 * filled (the caller runs it and answers with handle_multi_reply()), or an
 * error already written into resp: the codec's (codec_parse_multi()), 400
 * invalid_parameter for an Idempotency-Key (not supported for several
 * keys), 400 missing_token for a renew or release without a token, 501
 * when the backend has no multi-key operations. */
enum api_error handle_multi_parse(const struct api_config *cfg,
                                  const struct api_request *rq,
                                  enum api_verb verb,
                                  struct api_call *c,
                                  struct api_response *resp);
/* The answer to a multi verb c once the store answered r with g: acquire
 * 201 (409 lock_held with held and retry_after_ms on BACKEND_HELD), renew
 * 200 (404 lock_not_found or 409 token_mismatch naming keys[g->bad]),
 * release 200 {released, not_held} (404 lock_not_found when none was
 * held), else the mapped error. ttl_ms is what is left of the grant now;
 * a grant with nothing left is answered 503. */
void handle_multi_reply(const struct api_config *cfg,
                        const struct api_call *c,
                        enum backend_result r,
                        const struct lock_multi_grant *g,
                        struct api_response *resp);
/* GET or HEAD /locks: API_OK and *c filled (c->list; the caller runs it
 * and answers with handle_list_reply()), or the codec's error written into
 * resp. */
enum api_error handle_list_parse(const struct api_request *rq,
                                 struct api_call *c,
                                 struct api_response *resp);
/* The answer to a list call once the store answered r with the page l
 * (NULL when none could be had): 200 (codec_list()), 501 when the store
 * cannot list, else the mapped error. */
void handle_list_reply(const struct api_call *c,
                       enum backend_result r,
                       const struct lock_list *l,
                       struct api_response *resp);
/* The answer to a forced release once the store answered r with the
 * holders removed (info): 200, 404 lock_not_found when the key was free,
 * 501 when the store has none, else the mapped error. */
void handle_force_reply(const struct api_call *c,
                        enum backend_result r,
                        const struct lock_info *info,
                        struct api_response *resp);
void handle_healthz(struct api_response *resp);
/* /readyz while the instance drains: 503 without asking the store. */
void handle_readyz_draining(const struct api_config *cfg,
                            struct api_response *resp);

#endif /* API_HANDLERS_H */
