/*
 * cli/http.h - lockctl's requests to lockd over libcurl: one struct
 * http_call per request, performed blocking (curl_easy_perform) or driven
 * by a caller's curl multi handle; the answer's status, body, parsed JSON
 * and Retry-After. Every socket libcurl opens is close-on-exec.
 */
#ifndef CLI_HTTP_H
#define CLI_HTTP_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdint.h>

/* Where and how to reach lockd; borrowed by every call made from it. */
struct http_conf {
    const char *url;        /* base, no trailing '/' */
    const char *auth_token; /* sent as Authorization: Bearer, or NULL */
};

struct http_call {
    CURL *easy;
    struct curl_slist *headers; /* owned */
    char *req_body;             /* owned: the JSON sent, or NULL */
    char *url;                  /* owned */
    char *body;                 /* owned: the answer's body, NUL-ended */
    size_t len, cap;
    long status;               /* HTTP status; 0: no answer */
    CURLcode cc;               /* the transfer's result */
    char err[CURL_ERROR_SIZE]; /* libcurl's words for cc */
    json_t *json;              /* owned: body parsed, or NULL */
    int64_t retry_after_ms;    /* Retry-After (s) or retry_after_ms; -1 none */
    int64_t sent_ms;           /* monotonic ms when the request started */
    curl_socket_t sock;        /* its connection's, or CURL_SOCKET_BAD */
};

/* Process-wide setup and teardown of libcurl (call once each). */
int http_global_init(void);
void http_global_cleanup(void);

/* A request: method "GET", "POST", "PUT" or "DELETE" on conf->url + path
 * (path already encoded, see http_key_path), body serialised from the
 * borrowed object (NULL: none), the Lock-Token and Idempotency-Key headers
 * when non-NULL, at most timeout_ms in all. NULL when out of memory. */
struct http_call *http_call_new(const struct http_conf *conf,
                                const char *method,
                                const char *path,
                                json_t *body,
                                const char *token,
                                const char *idem_key,
                                int64_t timeout_ms);

/* Perform c blocking; fills its answer fields. Returns c->status (0 when
 * no answer came: see c->cc and c->err). While a fd is watched (see
 * http_watch_fd) and becomes readable, c is stopped: see there. */
long http_call_perform(struct http_call *c);

#define HTTP_STOP_GRACE_MS 1000 /* for the answer to a stopped request */
#define HTTP_STOPPED_MS    (INT64_C(1) << 40) /* retry_after_ms: never */

/* From now on http_call_perform also watches fd (-1: none, the default;
 * borrowed, never read): once fd is readable (a signal in run's
 * signalfd), a request not yet sent is not sent, and one sent has its
 * connection's write side shut, so lockd sees the client leave, and its
 * answer is awaited HTTP_STOP_GRACE_MS at most: an answer that comes is
 * kept as usual (it may be a grant, to be released). A call stopped
 * without an answer has cc CURLE_ABORTED_BY_CALLBACK, status 0 and
 * retry_after_ms HTTP_STOPPED_MS. Not thread-safe: lockctl has one
 * thread. */
void http_watch_fd(int fd);

/* Before adding c->easy to a multi handle (again): forget any earlier
 * answer and stamp the send time. */
void http_call_started(struct http_call *c);

/* After the multi handle reports c->easy done with result cc: fill the
 * answer fields as http_call_perform does. */
void http_call_finish(struct http_call *c, CURLcode cc);

/* Free c (NULL is fine); c->easy must no longer be in a multi handle. */
void http_call_free(struct http_call *c);

/* "/locks/" + key percent-encoded (every byte but A-Za-z0-9-._~ and '/'),
 * in a new string the caller frees; NULL when out of memory. */
char *http_key_path(const char *key);

/* The error code of an answer ("lock_held", ...) or NULL: borrowed from
 * c->json. */
const char *http_error_code(const struct http_call *c);

#endif /* CLI_HTTP_H */
