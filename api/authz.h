/*
 * api/authz.h - who may do what: the scoped credentials of --auth-file
 * (and the legacy --auth-token-file, --admin-token-file and
 * --tls-client-ca's "any verified certificate") as one policy, and the
 * decisions the router asks of it. The policy is an immutable snapshot,
 * swapped whole on SIGHUP: a request holds a reference to the snapshot it
 * started with, so it never sees half of an old policy and half of a new
 * one. Tokens are kept as SHA-256 digests only and compared in constant
 * time; no message or log line ever holds a token.
 *
 * The policy's file (docs/API.md, "Authentication"):
 *
 *   { "credentials": [ { "name": "orders",
 *                        "token_sha256": "<64 lower-case hex>",
 *                        "tls_identity": "orders.prod.svc",
 *                        "prefixes": ["orders/"],
 *                        "verbs": ["acquire", "renew", "release"],
 *                        "modes": ["exclusive", "shared"],
 *                        "multi": true,
 *                        "max_waiters": 5000 } ],
 *     "open": ["healthz", "readyz", "metrics"] }
 */
#ifndef API_AUTHZ_H
#define API_AUTHZ_H

#include <stdbool.h>
#include <stddef.h>

#include "api/handlers.h"

#define AUTHZ_SHA256_LEN  32
#define AUTHZ_FILE_MAX    (1024 * 1024) /* bytes of an --auth-file */
#define AUTHZ_WAITERS_MAX 1000000       /* largest max_waiters */

/* What a credential may do: one bit each (1u << verb). */
enum authz_verb {
    AUTHZ_ACQUIRE = 0, /* also re-entries and Idempotency-Key replays */
    AUTHZ_RENEW,
    AUTHZ_RELEASE,
    AUTHZ_INSPECT,
    AUTHZ_LIST,    /* GET /locks, its prefix within the credential's */
    AUTHZ_FORCE,   /* DELETE /locks/{key}?force=true */
    AUTHZ_PROBES,  /* /healthz and /readyz when not open */
    AUTHZ_METRICS, /* /metrics when not open */
    AUTHZ_VERB_COUNT,
};
/* "*": acquire, renew, release, inspect and list. */
#define AUTHZ_STAR                                                         \
    ((1u << AUTHZ_ACQUIRE) | (1u << AUTHZ_RENEW) | (1u << AUTHZ_RELEASE) | \
     (1u << AUTHZ_INSPECT) | (1u << AUTHZ_LIST))

#define AUTHZ_MODE_EXCLUSIVE 0x1u
#define AUTHZ_MODE_SHARED    0x2u /* semaphores too */

/* The operator endpoints "open" may name. */
#define AUTHZ_OPEN_HEALTHZ 0x1u
#define AUTHZ_OPEN_READYZ  0x2u
#define AUTHZ_OPEN_METRICS 0x4u
#define AUTHZ_OPEN_ALL     0x7u

struct authz_cred { /* one credential, part of a policy: immutable */
    char name[API_CLIENT_LEN + 1];
    bool has_token;
    unsigned char token_sha256[AUTHZ_SHA256_LEN];
    char *tls_identity; /* owned; NULL: none */
    size_t nprefixes;   /* >= 1 */
    char **prefixes;    /* owned, NUL-terminated; "" = every key */
    size_t *prefix_lens;
    unsigned verbs;       /* 1u << enum authz_verb */
    unsigned modes;       /* AUTHZ_MODE_* */
    bool multi;           /* POST, PUT, DELETE /locks */
    unsigned max_waiters; /* 0: --max-waiters-per-client */
};

struct authz_policy { /* one snapshot; refcounted, else immutable */
    _Atomic unsigned refs;
    size_t n;
    struct authz_cred *creds; /* owned */
    unsigned open;            /* AUTHZ_OPEN_* */
    bool anonymous;           /* only --admin-token-file: requests without
                                 credentials do what "*" allows, as before */
    bool any_cert;  /* --tls-client-ca without --auth-file: any verified
                       certificate does what "*" allows */
    bool any_force; /* some credential has "force" */
};

/* What authz_open() reads. Paths are copied. */
struct authz_opts {
    const char *auth_file;  /* --auth-file; NULL: none */
    const char *token_file; /* --auth-token-file: credential "token" */
    const char *admin_file; /* --admin-token-file: credential "admin" */
    bool tls_client_ca;     /* --tls-client-ca is set */
};

struct authz; /* the policy in force, and where it came from */

/* True if o turns auth on (any of its files, or tls_client_ca). */
bool authz_wanted(const struct authz_opts *o);
/* Read every file of o and build the policy: NULL on failure, with the
 * reason in err naming the file (and, for --auth-file, the field), never
 * a token. */
struct authz *authz_open(const struct authz_opts *o, char *err, size_t errlen);
/* SIGHUP: read every file again. A file that cannot be read or is not
 * valid keeps its last good content in force (logged at warn, naming the
 * file); the policy made of the rest is swapped in whole. What was read is
 * appended to done (donelen bytes), e.g. "auth token from /run/t". Call
 * from one thread at a time; requests may run meanwhile. */
void authz_reload(struct authz *a, char *done, size_t donelen);
void authz_close(struct authz *a); /* accepts NULL */

/* Parse an --auth-file's text (len bytes, not NUL-terminated): a new
 * policy holding one reference, or NULL with the reason in err ("field:
 * what is wrong"). tls_client_ca: whether tls_identity is allowed. */
struct authz_policy *authz_parse(
    const char *text, size_t len, bool tls_client_ca, char *err, size_t errlen);
/* Drop one reference; the last frees p. Accepts NULL. */
void authz_policy_unref(struct authz_policy *p);
/* Take a reference to the policy in force (a: not NULL). */
struct authz_policy *authz_policy_get(struct authz *a);

/* The SHA-256 of s (n bytes) as 64 lower-case hex digits and a NUL in
 * hex (65 bytes). 0, or -1 if GnuTLS fails. */
int authz_sha256_hex(const char *s, size_t n, char *hex);
/* The name of the credential whose token is token in the policy in force
 * into name (namelen bytes): 0, or -1 when none (for tests and tools). */
int authz_token_name(struct authz *a,
                     const char *token,
                     char *name,
                     size_t namelen);

/*
 * Decisions (api/authz_check.c), in the router's order: first who is
 * asking (401 before the key or body is read), then whether the parsed
 * call is covered (403, before any store call).
 */
enum authz_as {
    AUTHZ_AS_OFF = 0,   /* auth is off */
    AUTHZ_AS_CRED,      /* cred */
    AUTHZ_AS_ANONYMOUS, /* policy->anonymous, no credentials sent */
    AUTHZ_AS_ANY_CERT,  /* policy->any_cert, a verified certificate */
    AUTHZ_AS_NO_MATCH,  /* a verified certificate no credential names */
};

struct authz_who {
    enum authz_as as;
    struct authz_policy *policy;        /* a reference; NULL when off */
    const struct authz_cred *cred;      /* in policy; NULL unless AS_CRED */
    char cert_name[API_CLIENT_LEN + 1]; /* AS_ANY_CERT, AS_NO_MATCH: the
                                           certificate's first name */
};

/* Who sends rq (a NULL a: auth off): API_OK and *who filled, or
 * API_UNAUTHORIZED written into resp (with WWW-Authenticate). An
 * Authorization header must be "Bearer <token>" whose SHA-256 is some
 * credential's; without one, a verified certificate is matched against
 * tls_identity; without either, 401 (unless policy->anonymous). The
 * caller calls authz_done() whatever the result. */
enum api_error authz_identify(struct authz *a,
                              const struct api_request *rq,
                              struct authz_who *who,
                              struct api_response *resp);
/* Is the parsed call c covered for who? API_OK and c->client and
 * c->client_max_waiters set from the credential, or the error (403
 * forbidden saying what is missing; 401 for a forced release without
 * credentials) written into resp. */
enum api_error authz_allow(const struct authz_who *who,
                           struct api_call *c,
                           struct api_response *resp);
/* An operator endpoint (route API_ROUTE_HEALTHZ, _READYZ or _METRICS):
 * API_OK when it is open or who may read it, else 401 or 403 in resp.
 * Identifies by itself. */
enum api_error authz_operator(struct authz *a,
                              const struct api_request *rq,
                              enum api_route route,
                              struct api_response *resp);
void authz_done(struct authz_who *who); /* drops the reference; zeroes */

#endif /* API_AUTHZ_H */
