/*
 * api/codec.h - the request and response as api/ sees them (no
 * libmicrohttpd here), and the JSON and parameter codec with docs/API.md's
 * strictness: keys, body fields, query parameters and the Lock-Token and
 * Idempotency-Key headers. The parameters are parsed in
 * api/codec_params.c, the requests and answers for several keys at once
 * in api/codec_multi.c, the rest in api/codec.c.
 */
#ifndef API_CODEC_H
#define API_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "api/errors.h"
#include "backends/backend.h"

#define API_TOKEN_LEN 32 /* hex characters of a token lockd makes */

struct api_param {     /* one query parameter, as received */
    const char *name;  /* '+' already a space, still percent-encoded */
    const char *value; /* same; NULL when the parameter had no '=' */
};

/* What the TLS layer knows of the client's certificate (service/tls.h). */
enum api_tls_peer {
    API_TLS_OFF = 0,  /* plain HTTP, or TLS without --tls-client-ca */
    API_TLS_NO_CERT,  /* --tls-client-ca set, the client sent none */
    API_TLS_VERIFIED, /* a certificate that verified against the CA */
    API_TLS_BAD_CERT, /* one that did not (wrong CA, expired, ...) */
};

struct api_request { /* everything borrowed from the server for the call */
    const char *method;
    const char *path; /* the target as sent, without the query: a path
                       * or an absolute URI (router_path()), still
                       * percent-encoded */
    const char *body;
    size_t body_len;
    const struct api_param *query;
    size_t nquery;
    const char *const *lock_tokens; /* every Lock-Token header value */
    size_t nlock_tokens;
    const char *const *idem_keys; /* every Idempotency-Key header value */
    size_t nidem_keys;
    const char *authorization;    /* NULL when absent */
    const char *client_addr;      /* the peer's address as text ("::1",
                                     "10.0.0.7"); NULL when unknown */
    enum api_tls_peer tls_peer;   /* API_TLS_OFF on a plain HTTP listener */
    const char *const *tls_names; /* API_TLS_VERIFIED: the client
                                     certificate's names, its subject CN
                                     first, then its DNS and URI SANs;
                                     else NULL */
    size_t ntls_names;
    const char *tls_error; /* API_TLS_BAD_CERT: why, for the 401's
                              message (never secret); else NULL */
    bool shutting_down;
};

/* What a request was routed to: the label of its metrics. */
enum api_route {
    API_ROUTE_ACQUIRE = 0,
    API_ROUTE_RENEW,
    API_ROUTE_RELEASE,
    API_ROUTE_INSPECT,
    API_ROUTE_HEALTHZ,
    API_ROUTE_READYZ,
    API_ROUTE_METRICS,
    API_ROUTE_ACQUIRE_MULTI, /* POST /locks */
    API_ROUTE_RENEW_MULTI,   /* PUT /locks */
    API_ROUTE_RELEASE_MULTI, /* DELETE /locks */
    API_ROUTE_LIST,          /* GET /locks */
    API_ROUTE_FORCE_RELEASE, /* DELETE /locks/{key}?force=true */
    API_ROUTE_OTHER,         /* 404, 405 and requests refused before routing;
                                last: the metrics catch-all */
    API_ROUTE_COUNT,
};
/* The route labels, indexed by enum api_route. */
extern const char *const api_route_names[API_ROUTE_COUNT];

struct api_response {
    unsigned status;
    char *body; /* owned, malloc'ed; the server hands it to MHD */
    size_t len;
    const char *content_type; /* static */
    const char *allow;        /* static; NULL = no Allow header */
    unsigned retry_after;     /* seconds; 0 = no Retry-After header */
    bool www_authenticate;
    enum api_route route;
};

/* Parameters of one lock request, each with whether it was given. */
struct api_params {
    bool has_ttl_ms, has_wait_ms, has_owner, has_token;
    bool has_mode, has_limit, has_all, has_idem_key, has_force;
    uint64_t ttl_ms;
    uint64_t wait_ms;
    char *owner;         /* owned */
    char *token;         /* owned */
    enum lock_mode mode; /* "exclusive" or "shared" */
    uint32_t limit;      /* 1..LOCK_LIMIT_MAX */
    bool all;            /* JSON true/false; "true"/"false" in the query */
    bool force;          /* release: as all */
    char *idem_key;      /* owned; the Idempotency-Key header, checked with
                            backend_idem_key_ok() */
};

#define API_P_TTL_MS   0x01u
#define API_P_WAIT_MS  0x02u
#define API_P_OWNER    0x04u
#define API_P_TOKEN    0x08u
#define API_P_MODE     0x10u
#define API_P_LIMIT    0x20u
#define API_P_ALL      0x40u
#define API_P_IDEM_KEY 0x80u /* the Idempotency-Key header, not a field */
#define API_P_FORCE    0x100u

/* The keys of a request for several keys at once, in the client's order:
 * 1..LOCK_MULTI_MAX distinct valid keys. */
struct api_keys {
    size_t n;
    char **keys;  /* owned: one block that also holds lens and the bytes of
                     every key, NUL-terminated */
    size_t *lens; /* in keys' block */
};

/* Free k's block and zero k; accepts a zeroed k. */
void codec_keys_cleanup(struct api_keys *k);

/* Install jansson's allocator (NULL: malloc and free), wrapped so the codec
 * notices failed allocations. Call once before any thread uses jansson. */
void codec_json_setup(json_malloc_t alloc_fn, json_free_t free_fn);

/* Percent-decode the path after "/locks/" into a new key (*out, caller
 * frees) and validate it: API_INVALID_KEY with a message in msg. */
enum api_error codec_decode_key(
    const char *raw, char **out, size_t *len, char *msg, size_t msglen);

/* Collect the parameters in allowed (API_P_*) from the query, the JSON body,
 * (for the token) the Lock-Token header and (API_P_IDEM_KEY) the
 * Idempotency-Key header; anything else, anything given twice, a wrong
 * type or an out-of-range value is an error with a message in msg. Rules
 * between parameters (limit needs shared mode, ...) are the handlers'. On error
 * p is cleaned up; on success the caller calls codec_params_cleanup(). max_ttl
 * and max_wait bound the integers. */
enum api_error codec_parse_params(const struct api_request *rq,
                                  unsigned allowed,
                                  uint64_t max_ttl,
                                  uint64_t max_wait,
                                  struct api_params *p,
                                  char *msg,
                                  size_t msglen);
void codec_params_cleanup(struct api_params *p);

/* Format unix ms as RFC 3339 UTC with milliseconds into buf (>= 32). */
void codec_format_time(int64_t unix_ms, char *buf, size_t buflen);

/* Fill resp with a JSON body: an error (message NULL = the default). */
void codec_error(struct api_response *resp,
                 enum api_error e,
                 const char *message);
/* Fill resp with a grant, re-entry or renewal: {key, token, fence,
 * ttl_ms, expires_at, mode, holds} and limit for a shared grant with one,
 * from g (fence, expires_at_ms, mode, holds, limit) and ttl_ms (what is
 * left of it), built without jansson (the hot path). token is borrowed. */
void codec_grant(struct api_response *resp,
                 unsigned status,
                 const char *key,
                 size_t key_len,
                 const char *token,
                 const struct lock_grant *g,
                 uint64_t ttl_ms);
/* Fill resp with 200 and a release's answer, {key, released, holds}:
 * released when holds (those left to the token) is 0. Without jansson, as
 * codec_grant(): every lock pair ends here. */
void codec_released(struct api_response *resp,
                    const char *key,
                    size_t key_len,
                    uint64_t holds);
/* Fill resp with 200 and a held key as docs/API.md's inspect shows it:
 * {key, held, mode, limit (shared, when set), fence, ttl_ms, expires_at,
 * owner (exclusive, when set), holds (exclusive), holder_count, holders:
 * [{fence, ttl_ms, expires_at, owner (when set), holds}]}, never a token.
 * 500 when out of memory. */
void codec_inspect(struct api_response *resp,
                   const char *key,
                   size_t key_len,
                   const struct lock_info *info);
/* Fill resp from a pack of (key, JSON value) built with jansson's
 * json_pack format and arguments; 500 when out of memory. */
void codec_reply(struct api_response *resp,
                 unsigned status,
                 const char *fmt,
                 ...);

/*
 * Several keys at once (POST, PUT, DELETE /locks): the parameters from the
 * JSON body only, which must be an object with "keys" (a JSON array of
 * 1..LOCK_MULTI_MAX distinct keys, each a key as codec_decode_key() allows)
 * and the fields in allowed (API_P_TTL_MS, API_P_WAIT_MS, API_P_OWNER,
 * API_P_TOKEN), plus the Lock-Token header when allowed takes a token.
 * Errors, with a message in msg: any query parameter, an empty body, no
 * "keys", a bad "keys" or an unknown field are invalid_parameter (a
 * repeated key named by its text); a key that breaks the key rules is
 * invalid_key, named by its index ("keys[3]"); a body that is not a JSON
 * object is invalid_json. On success keys holds a copy of the keys (the
 * caller cleans it up) and p the other fields; on error both are clean.
 */
enum api_error codec_parse_multi(const struct api_request *rq,
                                 unsigned allowed,
                                 uint64_t max_ttl,
                                 uint64_t max_wait,
                                 struct api_params *p,
                                 struct api_keys *keys,
                                 char *msg,
                                 size_t msglen);
/* Fill resp with a multi-key grant or renewal: {keys (in order), token,
 * fences: {key: fence}, ttl_ms, expires_at} from g (fences,
 * expires_at_ms) and ttl_ms (what is left of it). token is borrowed. */
void codec_multi_grant(struct api_response *resp,
                       unsigned status,
                       const struct api_keys *keys,
                       const char *token,
                       const struct lock_multi_grant *g,
                       uint64_t ttl_ms);
/* Fill resp with 409 lock_held for a multi-key acquire: the error object
 * carries retry_after_ms (g->retry_ms, at least 1) and held (the keys with
 * g->held set, in order); Retry-After in whole seconds, rounded up. waited:
 * the request waited (wait_ms > 0), for the message. */
void codec_multi_held(struct api_response *resp,
                      const struct api_keys *keys,
                      const struct lock_multi_grant *g,
                      bool waited);
/* Fill resp with error e (lock_not_found, token_mismatch) about keys[bad],
 * the first key the token does not hold: the message names it and the
 * error object carries "key". */
void codec_multi_bad_key(struct api_response *resp,
                         enum api_error e,
                         const struct api_keys *keys,
                         size_t bad);
/* Fill resp with 200 {released: [...], not_held: [...]} from g->released,
 * each list in the request's order. */
void codec_multi_released(struct api_response *resp,
                          const struct api_keys *keys,
                          const struct lock_multi_grant *g);

/*
 * The operator endpoints (api/codec_list.c).
 */
#define API_LIST_DEFAULT 100 /* keys of a page when no limit is given */
/* Characters of a cursor: the tag and the base64url of a longest key. */
#define API_CURSOR_MAX (1 + (LOCK_KEY_MAX * 4 + 2) / 3)

/* GET /locks's query. */
struct api_list_params {
    char *prefix; /* owned, percent-decoded, NUL-terminated; "" = every
                     key */
    size_t prefix_len;
    uint32_t limit;  /* 1..LOCK_LIST_MAX; API_LIST_DEFAULT when not given */
    bool has_cursor; /* after holds the key the page starts after */
    char after[LOCK_KEY_MAX + 1];
    size_t after_len;
};

/* Write the cursor for a page that goes on after key (len bytes) into out
 * (cap >= API_CURSOR_MAX + 1): "k" + base64url without padding. 0, or -1
 * for a key that is empty or too long. */
int codec_cursor_encode(const char *key, size_t len, char *out, size_t cap);
/* Decode the n characters of cursor s into key (LOCK_KEY_MAX + 1 bytes,
 * NUL-terminated) and *len: 0, or -1 unless s is a cursor that
 * codec_cursor_encode() makes for a valid key (backend_key_ok()). */
int codec_cursor_decode(const char *s, size_t n, char *key, size_t *len);

/* Parse GET /locks's query into p: only prefix, limit and cursor, each at
 * most once, and no body; anything else is invalid_parameter with a
 * message in msg (internal when out of memory). On success the caller
 * calls codec_list_params_cleanup(); on error p is clean. */
enum api_error codec_parse_list(const struct api_request *rq,
                                struct api_list_params *p,
                                char *msg,
                                size_t msglen);
void codec_list_params_cleanup(struct api_list_params *p); /* zeroed ok */

/* Fill resp with 200 {"locks":[{key, mode, fence, ttl_ms, expires_at,
 * holder_count, owner (exclusive, when set)}], "next_cursor"} from l
 * (next_cursor only when l->more); never a token. 500 when out of memory. */
void codec_list(struct api_response *resp, const struct lock_list *l);
/* Fill resp with 200 {key, released: true, forced: true, holders} from
 * the holders info a forced release removed. */
void codec_force_released(struct api_response *resp,
                          const char *key,
                          size_t key_len,
                          const struct lock_info *info);

#endif /* API_CODEC_H */
