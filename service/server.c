/*
 * service/server.c - the libmicrohttpd daemon and the glue between it and
 * api/: per-request state in *req_cls, the body read up to
 * --max-body-bytes, the request turned into a struct api_request, lock
 * requests run by the wait queue (on a network store with their
 * connection suspended while a worker calls the store), the
 * answer turned into an MHD response, and the access log and metrics when
 * the request completes.
 */
#include "service/server.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

#include "api/events.h"
#include "api/router.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/text.h"
#include "service/clientlim.h"
#include "service/conntrack.h"
#include "service/reqcheck.h"
#include "service/tls.h"

#define REQUEST_ID_MAX 128
#define PATH_LOG_MAX   256
#define CLIENT_MAX     (NI_MAXHOST + NI_MAXSERV + 4) /* "[ip]:port" */
#define ACCESS_FIELDS  5 /* client, credential, key, owner, fence */
/* libmicrohttpd's memory per connection, at least: what it had before
 * --max-header-bytes */
#define CONNECTION_MEMORY_MIN 8192

struct server {
    struct MHD_Daemon *daemon;
    const struct config *cfg;
    const struct api_config *api;
    struct waitq *q;
    struct conntrack *ct; /* request timeout, per-address cap */
    struct clientlim *cl; /* requests that may wait, per client */
    _Atomic bool shutting_down;
    _Atomic int64_t in_flight; /* requests begun and not completed */
    _Atomic uint64_t next_request;
    uint64_t request_salt; /* random, for generated request ids */
};

enum phase {
    PHASE_READ = 0, /* reading the body */
    PHASE_WAITING,  /* run by the wait queue, connection suspended */
};

struct request { /* *req_cls: from the first call to completion */
    struct server *srv;
    struct MHD_Connection *conn;
    int64_t start_us;
    char *body; /* owned, until the call is parsed */
    size_t len, cap;
    enum phase phase;
    unsigned status; /* what was queued, for the log */
    enum api_route route;
    bool too_large;
    bool close;                      /* answer with Connection: close */
    bool granted;                    /* the store granted call (an acquire) */
    bool ran;                        /* call went to the wait queue: its
                                        outcome is handed to
                                        events_after_call() at completion */
    struct api_call call;            /* owned strings */
    struct wq_waiter w;              /* req strings borrowed from call */
    struct lock_multi_grant *mgrant; /* owned; the multi verbs' answer */
    struct clientlim_entry *slot;    /* a waiter slot while it may wait */
    /* for the response and the access log; every request keeps them, so
     * they are sized to fit (a waiter's footprint counts) */
    char *request_id; /* owned */
    char *path;       /* owned, maybe truncated to PATH_LOG_MAX */
    char method[12];
};

/* Keep paths and query values as sent: api/ decodes them itself, so that
 * "%00" or "%2F" in a key are seen for what they are. */
static size_t unescape_none(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    return strlen(s);
}

/* MHD passes its own printf-style format and arguments: the attribute tells
 * clang (-Wformat-nonliteral under -Wformat=2) that fmt is one. */
static void __attribute__((format(printf, 2, 0)))
mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];

    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    log_debug("libmicrohttpd: %s", msg);
}

static bool request_id_ok(const char *s)
{
    size_t n = 0;

    for (; s[n] != '\0'; n++)
        if ((unsigned char)s[n] <= 0x20 || (unsigned char)s[n] >= 0x7f)
            return false;
    return n >= 1 && n <= REQUEST_ID_MAX;
}

static void set_request_id(struct request *r)
{
    const char *h =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Request-Id");
    uint64_t n;
    char id[17] = { 0 };

    if (h != NULL && request_id_ok(h)) {
        r->request_id = strdup(h);
    } else {
        n = atomic_fetch_add_explicit(&r->srv->next_request, 1,
                                      memory_order_relaxed);
        n ^= r->srv->request_salt;
        for (int i = 15; i >= 0; i--, n >>= 4) /* "%016llx", by hand */
            id[i] = "0123456789abcdef"[n & 15];
        r->request_id = strdup(id);
    }
}

/* The time r took until now, less the time it waited parked. */
static int64_t served_us(const struct request *r)
{
    int64_t d = clock_mono_us() - r->start_us;

    if (r->ran && r->w.parked_us > 0)
        d -= r->w.parked_us;
    return d > 0 ? d : 0;
}

static enum MHD_Result queue(struct request *r, struct api_response *resp)
{
    struct MHD_Response *mr;
    enum MHD_Result ret;
    char num[24];

    /* MHD takes the body and frees it with free() */
    mr = MHD_create_response_from_buffer(resp->len, resp->body,
                                         MHD_RESPMEM_MUST_FREE);
    if (mr == NULL) {
        api_response_cleanup(resp);
        return MHD_NO;
    }
    resp->body = NULL;
    MHD_add_response_header(mr, MHD_HTTP_HEADER_CONTENT_TYPE,
                            resp->content_type != NULL ? resp->content_type
                                                       : "application/json");
    MHD_add_response_header(mr, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(mr, "X-Request-Id", r->request_id);
    if (resp->allow != NULL)
        MHD_add_response_header(mr, MHD_HTTP_HEADER_ALLOW, resp->allow);
    if (resp->retry_after > 0) {
        snprintf(num, sizeof(num), "%u", resp->retry_after);
        MHD_add_response_header(mr, MHD_HTTP_HEADER_RETRY_AFTER, num);
    }
    if (resp->www_authenticate)
        MHD_add_response_header(mr, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                "Bearer realm=\"lockd\"");
    if (r->close || atomic_load(&r->srv->shutting_down))
        MHD_add_response_header(mr, MHD_HTTP_HEADER_CONNECTION, "close");
    r->status = resp->status;
    r->route = resp->route;
    /* counted now, not at completion, so a client that scrapes /metrics
     * right after its answer sees its request; the time parked waiting
     * for the key is lockd_lock_wait_seconds', not this */
    metrics_request(r->route, r->status, served_us(r));
    ret = MHD_queue_response(r->conn, resp->status, mr);
    MHD_destroy_response(mr);
    return ret;
}

static enum MHD_Result
queue_error(struct request *r, enum api_error e, enum api_route route)
{
    struct api_response resp = { .route = route };

    codec_error(&resp, e, NULL);
    if (e == API_SHUTTING_DOWN || e == API_BACKEND_UNAVAILABLE)
        resp.retry_after = 1;
    return queue(r, &resp);
}

/* The first request of a TLS connection over its address's cap
 * (conntrack.h): 429, and the connection closes. */
static enum MHD_Result queue_limited(struct request *r)
{
    struct api_response resp = { .route = API_ROUTE_OTHER };

    codec_error(&resp, API_TOO_MANY_REQUESTS,
                "too many open connections from this address "
                "(--max-connections-per-ip)");
    resp.retry_after = 1;
    r->close = true;
    return queue(r, &resp);
}

static void waiter_suspend(struct wq_waiter *w)
{
    struct request *r = w->arg;

    r->phase = PHASE_WAITING;
    MHD_suspend_connection(r->conn);
}

static void waiter_wake(struct wq_waiter *w)
{
    struct request *r = w->arg;

    /* a new grant from now on: if libmicrohttpd closes the connection
     * without calling us again, completion must release it (never a
     * re-entry or a replay: those holds were the client's before) */
    if (api_call_new_grant(&r->call, w->result, &w->grant))
        r->granted = true;

    MHD_resume_connection(r->conn);
}

static int connection_fd(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);

    return ci != NULL ? ci->connect_fd : -1;
}

/* The answer to a lock request, once the wait queue is done with it. */
static enum MHD_Result answer_call(struct request *r)
{
    struct api_response resp = { .route = r->route };

    /* no longer waiting: its client may send the next one the moment it
     * reads this answer, before completion */
    clientlim_give(r->srv->cl, r->slot);
    r->slot = NULL;
    if (r->w.shutting_down && r->call.verb == API_VERB_READYZ) {
        handle_readyz_draining(r->srv->api, &resp);
        return queue(r, &resp);
    }
    if (r->w.shutting_down && r->call.verb == API_VERB_METRICS)
        r->w.count = -1; /* still served while draining */
    else if (r->w.shutting_down)
        return queue_error(r, API_SHUTTING_DOWN, r->route);
    if (api_call_new_grant(&r->call, r->w.result, &r->w.grant))
        r->granted = true; /* released in completed() if never delivered */
    if (api_call_is_multi(&r->call))
        handle_multi_reply(r->srv->api, &r->call, r->w.result, r->mgrant,
                           &resp);
    else if (r->call.verb == API_VERB_LIST)
        handle_list_reply(&r->call, r->w.result, r->w.list, &resp);
    else
        handle_call_reply(r->srv->api, &r->call, r->w.result, &r->w.grant,
                          r->w.info, r->w.count, &resp);
    /* *w.info is kept for events_after_call() at completion */
    resp.route = r->route;
    return queue(r, &resp);
}

/* A waiter slot for r's call if it may wait: true to go on, else the
 * answer (429 too_many_requests, or 500) is queued in *ret. addr: the
 * peer's address, NULL if unknown. */
static bool
take_waiter_slot(struct request *r, const char *addr, enum MHD_Result *ret)
{
    struct api_response resp = { .route = r->route };
    char msg[200];

    switch (clientlim_admit(r->srv->cl, &r->call, addr, &r->slot, msg,
                            sizeof(msg))) {
    case CLIENTLIM_OK:
        return true;
    case CLIENTLIM_NO_MEMORY:
        *ret = queue_error(r, API_INTERNAL, r->route);
        return false;
    case CLIENTLIM_FULL:
        break;
    }
    codec_error(&resp, API_TOO_MANY_REQUESTS, msg);
    resp.retry_after = 1;
    *ret = queue(r, &resp);
    return false;
}

static enum MHD_Result run_call(struct request *r, const char *addr)
{
    static const enum wq_op ops[] = {
        [API_VERB_ACQUIRE] = WQ_ACQUIRE,
        [API_VERB_RENEW] = WQ_RENEW,
        [API_VERB_RELEASE] = WQ_RELEASE,
        [API_VERB_INSPECT] = WQ_INSPECT,
        [API_VERB_READYZ] = WQ_PING,
        [API_VERB_METRICS] = WQ_COUNT,
        [API_VERB_ACQUIRE_MULTI] = WQ_ACQUIRE_MULTI,
        [API_VERB_RENEW_MULTI] = WQ_RENEW_MULTI,
        [API_VERB_RELEASE_MULTI] = WQ_RELEASE_MULTI,
        [API_VERB_LIST] = WQ_LIST,
        [API_VERB_FORCE_RELEASE] = WQ_FORCE_RELEASE,
    };
    struct wq_waiter *w = &r->w;
    enum MHD_Result ret;

    /* before the store sees it: a refused call changes nothing */
    if (!take_waiter_slot(r, addr, &ret))
        return ret;
    memset(w, 0, sizeof(*w));
    /* a re-entry is the store's renew with one more hold: it never waits */
    w->op = r->call.reenter ? WQ_RENEW : ops[r->call.verb];
    if (api_call_is_multi(&r->call)) {
        /* only multi requests pay for the answer's room */
        r->mgrant = malloc(sizeof(*r->mgrant));
        if (r->mgrant == NULL)
            return queue_error(r, API_INTERNAL, r->route);
        api_call_multi_req(&r->call, &w->mreq);
        w->mgrant = r->mgrant;
    }
    if (w->op == WQ_INSPECT || w->op == WQ_FORCE_RELEASE) {
        w->info = calloc(1, sizeof(*w->info)); /* only these pay for it */
        if (w->info == NULL)
            return queue_error(r, API_INTERNAL, r->route);
    }
    api_call_req(&r->call, &w->req);
    if (w->op == WQ_LIST) /* shares its room with mreq */
        api_call_list_req(&r->call, &w->lreq);
    w->wait_ms = r->call.reenter ? 0 : (int64_t)r->call.wait_ms;
    w->start_us = r->start_us;
    w->fd = w->wait_ms > 0 ? connection_fd(r->conn) : -1;
    w->suspend = waiter_suspend;
    w->wake = waiter_wake;
    w->arg = r;
    r->ran = true;
    if (waitq_start(r->srv->q, w) == WQ_PARKED)
        return MHD_YES; /* suspended; wake() resumes it */
    return answer_call(r);
}

static enum MHD_Result
dispatch(struct request *r, const char *url, const char *method)
{
    struct server *srv = r->srv;
    struct reqcheck_collect c = { .nquery = 0 };
    struct api_request rq = { 0 };
    struct api_response resp = { .route = API_ROUTE_OTHER };
    enum api_action action;
    const union MHD_ConnectionInfo *ci;
    char addr[INET6_ADDRSTRLEN];

    if (!reqcheck_collect(r->conn, &c))
        return queue_error(r, API_INVALID_PARAMETER, API_ROUTE_OTHER);
    rq.method = method;
    rq.path = url;
    rq.body = r->body != NULL ? r->body : "";
    rq.body_len = r->len;
    rq.query = c.query;
    rq.nquery = c.nquery;
    rq.lock_tokens = c.tokens;
    rq.nlock_tokens = c.ntokens;
    rq.idem_keys = c.idem_keys;
    rq.nidem_keys = c.nidem_keys;
    rq.authorization = MHD_lookup_connection_value(
        r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    rq.client_addr = clientlim_addr(ci != NULL ? ci->client_addr : NULL, addr);
    rq.shutting_down = atomic_load(&srv->shutting_down);
    tls_request_peer(srv->cfg->tls, r->conn, &rq);

    action = router_dispatch(srv->api, &rq, &resp, &r->call);
    /* the call owns copies of what it needs: a parked waiter keeps no body */
    free(r->body);
    r->body = NULL;
    r->len = r->cap = 0;
    if (action == API_ACTION_CALL) {
        r->route = resp.route;
        api_response_cleanup(&resp);
        return run_call(r, rq.client_addr);
    }
    api_call_cleanup(&r->call); /* a lock request that failed to parse */
    return queue(r, &resp);
}

/* A request's first call, with its headers in: its state, then the
 * checks that answer before the body is read. */
static enum MHD_Result begin_request(struct server *srv,
                                     struct MHD_Connection *conn,
                                     const char *url,
                                     const char *method,
                                     const char *version,
                                     void **req_cls)
{
    struct request *r;
    const char *cl;
    enum api_error err;
    char msg[200];

    enum conntrack_begin cb = conntrack_request_begins(conn);

    if (cb == CONNTRACK_CLOSE)
        return MHD_NO; /* refused or cut: MHD closes the connection */
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return MHD_NO; /* MHD closes the connection */
    r->srv = srv;
    r->conn = conn;
    r->start_us = clock_mono_us();
    r->route = API_ROUTE_OTHER;
    /* as "%s", cut; the NUL is calloc's */
    memcpy(r->method, method, strnlen(method, sizeof(r->method) - 1));
    r->path = strndup(url, PATH_LOG_MAX);
    *req_cls = r;
    atomic_fetch_add(&srv->in_flight, 1);
    set_request_id(r);
    if (r->path == NULL || r->request_id == NULL)
        return MHD_NO; /* out of memory: MHD closes the connection */
    if (cb == CONNTRACK_LIMITED)
        return queue_limited(r);
    if (reqcheck_target_has_nul(conn, url, version)) {
        const char *p = router_path(url);
        struct api_response resp = { .route = API_ROUTE_OTHER };
        codec_error(&resp,
                    p != NULL && strncmp(p, "/locks/", 7) == 0 ? API_INVALID_KEY
                                                               : API_NOT_FOUND,
                    "the request target contains a NUL byte");
        return queue(r, &resp);
    }
    err = reqcheck_headers(conn, method, srv->cfg->max_header_bytes, &r->close,
                           msg, sizeof(msg));
    if (err != API_OK) {
        struct api_response resp = { .route = API_ROUTE_OTHER };
        codec_error(&resp, err, msg);
        return queue(r, &resp);
    }
    cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl != NULL) {
        uint64_t n;
        if (text_parse_u64(cl, 0, UINT64_MAX, &n) != 0 ||
            n > srv->cfg->max_body_bytes) {
            /* answer before reading: MHD then closes the connection */
            r->too_large = true;
            return queue_error(r, API_BODY_TOO_LARGE, API_ROUTE_OTHER);
        }
    }
    return MHD_YES;
}

/* A piece of the body: kept, up to --max-body-bytes; past that the rest
 * is read and dropped, and the answer is 413 at the end. */
static enum MHD_Result take_body(struct request *r, const char *data, size_t n)
{
    if (r->too_large || r->len + n > r->srv->cfg->max_body_bytes) {
        r->too_large = true; /* keep reading, answer at the end */
        return MHD_YES;
    }
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->len + n + 1;
        char *nb = realloc(r->body, cap);
        if (nb == NULL)
            return MHD_NO;
        r->body = nb;
        r->cap = cap;
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
    r->body[r->len] = '\0';
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls,
                                  struct MHD_Connection *conn,
                                  const char *url,
                                  const char *method,
                                  const char *version,
                                  const char *upload_data,
                                  size_t *upload_data_size,
                                  void **req_cls)
{
    struct server *srv = cls;
    struct request *r = *req_cls;

    if (r == NULL)
        return begin_request(srv, conn, url, method, version, req_cls);
    if (r->phase == PHASE_WAITING) {
        r->phase = PHASE_READ;
        return answer_call(r); /* resumed by the wait queue */
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        return take_body(r, upload_data, n);
    }
    conntrack_request_arrived(conn); /* no longer timed, waiters neither */
    if (r->too_large)
        return queue_error(r, API_BODY_TOO_LARGE, API_ROUTE_OTHER);
    return dispatch(r, url, method);
}

/* The lock call's outcome, once, to the lifecycle events: at completion,
 * so that a waiter whose client left (never answered on the wire) is
 * told too. */
static void after_call(struct request *r, const char *client)
{
    const struct api_call *c = &r->call;
    struct api_event_ctx ctx = {
        .client = client[0] != '\0' ? client : NULL,
        .request_id = r->request_id,
        .credential = c->client,
        .parked_us = r->w.parked_us,
        .waited = (c->verb == API_VERB_ACQUIRE ||
                   c->verb == API_VERB_ACQUIRE_MULTI) &&
                  !c->reenter && c->wait_ms > 0,
        .cancelled = r->w.client_gone,
    };
    bool has_info = c->verb == API_VERB_INSPECT;

    if (c->verb == API_VERB_READYZ || c->verb == API_VERB_METRICS)
        return;
    if (c->verb == API_VERB_FORCE_RELEASE) {
        /* the audit line for a key the store freed, answered or not */
        if (r->w.result == BACKEND_OK)
            events_force_released(r->srv->api, c->key, c->key_len, r->w.info,
                                  &ctx);
        return;
    }
    events_after_call(r->srv->api, c, r->w.result,
                      api_call_is_multi(c) || has_info ? NULL : &r->w.grant,
                      has_info ? r->w.info : NULL,
                      api_call_is_multi(c) ? r->mgrant : NULL, &ctx);
}

/* The access line's extra fields into f (ACCESS_FIELDS of them): client,
 * and for the single-key lock routes key, owner (acquire) and fence (a
 * grant). Returns how many are set. */
static size_t
access_fields(const struct request *r, const char *client, struct log_field *f)
{
    const struct api_call *c = &r->call;
    size_t n = 0;

    if (client[0] != '\0')
        f[n++] = (struct log_field){ .name = "client",
                                     .str = client,
                                     .len = strlen(client) };
    if (c->client != NULL) /* the credential that was identified */
        f[n++] = (struct log_field){ .name = "credential",
                                     .str = c->client,
                                     .len = strlen(c->client) };
    if (!r->ran || c->key == NULL)
        return n;
    f[n++] =
        (struct log_field){ .name = "key", .str = c->key, .len = c->key_len };
    if (c->verb == API_VERB_ACQUIRE && c->owner != NULL)
        f[n++] = (struct log_field){ .name = "owner",
                                     .str = c->owner,
                                     .len = strlen(c->owner) };
    if (c->verb == API_VERB_ACQUIRE && r->w.result == BACKEND_OK)
        f[n++] = (struct log_field){ .name = "fence",
                                     .num = (int64_t)r->w.grant.fence };
    return n;
}

static void on_completed(void *cls,
                         struct MHD_Connection *conn,
                         void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct server *srv = cls;
    struct request *r = *req_cls;
    struct log_field fields[ACCESS_FIELDS];
    char client[CLIENT_MAX];
    int64_t dur;

    conntrack_request_done(conn); /* idle until the next request */
    if (r == NULL)
        return;
    *req_cls = NULL;
    /* a waiter never answered (client gone, shutdown, a wake after the
     * connection closed) gives its slot back here */
    clientlim_give(srv->cl, r->slot);
    dur = clock_mono_us() - r->start_us;
    if (r->granted && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        if (api_call_is_multi(&r->call)) {
            struct lock_multi_req req;
            api_call_multi_req(&r->call, &req);
            waitq_orphan_multi(srv->q, &req);
        } else if (r->call.idem_key == NULL)
            /* the client never got its grant: no lock may be held by
             * nobody */
            waitq_orphan(srv->q, r->call.key, r->call.key_len, r->call.token);
        else
            /* its client said it retries with the Idempotency-Key: the
             * retry gets this grant (else it ends at its TTL) */
            log_info("kept a grant whose answer was not delivered for a "
                     "retry with its Idempotency-Key");
    }
    if (r->status == 0) {
        r->status = 499; /* the client left before an answer */
        metrics_request(r->route, r->status, dur);
    }
    conntrack_peer_name(conn, client, sizeof(client));
    if (r->ran)
        after_call(r, client);
    log_access(r->method, r->path != NULL ? r->path : "-", r->status, dur,
               r->request_id, fields, access_fields(r, client, fields));
    api_call_cleanup(&r->call);
    if (r->w.info != NULL)
        lock_info_clear(r->w.info);
    free(r->w.info);
    free(r->w.list);
    free(r->mgrant);
    free(r->body);
    free(r->path);
    free(r->request_id);
    free(r);
    atomic_fetch_sub(&srv->in_flight, 1);
}

/* libmicrohttpd's pool threads: it splits the connection limit between
 * them, and a pool of one is no pool (0: its one internal thread). A
 * connection's memory pool holds the request line and headers, in place, a
 * record of each field, a copy of the Cookie fields, and the response's
 * headers: twice --max-header-bytes lets a section of that size with a few
 * hundred fields through, to be answered as ever, and most bigger ones
 * reach check_headers() for a JSON 431. Up to 32 KiB, libmicrohttpd 0.9.75
 * mallocs the pool; past it, it maps it, which costs a parked waiter more
 * (docs/http.md). */
static void daemon_sizes(const struct config *c, unsigned *pool, size_t *mem)
{
    *pool = c->http_threads < c->max_connections ? c->http_threads
                                                 : c->max_connections;
    if (*pool <= 1)
        *pool = 0;
    *mem = (size_t)c->max_header_bytes * 2;
    if (*mem < CONNECTION_MEMORY_MIN)
        *mem = CONNECTION_MEMORY_MIN;
}

struct server *server_start(const struct config *cfg,
                            const struct api_config *api,
                            struct waitq *q)
{
    struct server *srv = calloc(1, sizeof(*srv));
    struct addrinfo hints = { .ai_family = AF_UNSPEC,
                              .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *ai = NULL;
    struct MHD_OptionItem tls_opts[4];
    unsigned pool, per_ip;
    size_t memory;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                     MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                     MHD_USE_TURBO;
    int err;

    if (srv == NULL)
        return NULL;
    srv->cfg = cfg;
    srv->api = api;
    srv->q = q;
    srv->request_salt = (uint64_t)clock_mono_us() * 0x9e3779b97f4a7c15ULL;
    err = getaddrinfo(cfg->listen_host, cfg->listen_port, &hints, &ai);
    if (err != 0) {
        log_error("cannot resolve --listen %s: %s", cfg->listen,
                  gai_strerror(err));
        free(srv);
        return NULL;
    }
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    flags |= tls_daemon_options(cfg->tls, tls_opts);
    /* the per-address cap follows the connection limit main() settled on */
    per_ip = cfg->max_connections_per_ip;
    if (per_ip == 0)
        per_ip = cfg->max_connections > 1 ? cfg->max_connections / 2 : 1;
    /* and so does the per-client cap on waiters */
    srv->cl = clientlim_new(cfg->max_waiters_per_client, cfg->max_connections);
    srv->ct = conntrack_new(cfg->request_timeout_ms, per_ip, cfg->tls != NULL);
    if (srv->ct == NULL || srv->cl == NULL) {
        log_error("cannot start the connection reaper: %s", strerror(errno));
        clientlim_free(srv->cl);
        conntrack_free(srv->ct);
        freeaddrinfo(ai);
        free(srv);
        return NULL;
    }
    daemon_sizes(cfg, &pool, &memory);
    /* the logger first: messages about the options after it reach it */
    srv->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER,
        mhd_log, NULL, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_THREAD_POOL_SIZE, pool, MHD_OPTION_CONNECTION_LIMIT,
        cfg->max_connections, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory,
        MHD_OPTION_CONNECTION_MEMORY_INCREMENT, (size_t)1024,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_NOTIFY_CONNECTION, conntrack_notify, srv->ct,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape_none, NULL, MHD_OPTION_ARRAY,
        tls_opts, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (srv->daemon == NULL) {
        log_error("cannot listen on %s (in use, or not a local address?)",
                  cfg->listen);
        conntrack_free(srv->ct);
        clientlim_free(srv->cl);
        free(srv);
        return NULL;
    }
    return srv;
}

void server_begin_shutdown(struct server *s)
{
    atomic_store(&s->shutting_down, true);
}

int server_drain(struct server *s, int64_t timeout_ms)
{
    int64_t end = clock_mono_us() + timeout_ms * 1000;
    struct timespec ts = { .tv_sec = 0, .tv_nsec = 10 * 1000000L };

    while (atomic_load(&s->in_flight) > 0) {
        if (clock_mono_us() >= end)
            return -1;
        nanosleep(&ts, NULL);
    }
    return 0;
}

void server_stop(struct server *s)
{
    if (s == NULL)
        return;
    MHD_stop_daemon(s->daemon);
    conntrack_free(s->ct); /* after MHD's last CLOSED notification */
    clientlim_free(s->cl); /* after the last completion */
    free(s);
}
