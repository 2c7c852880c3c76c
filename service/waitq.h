/*
 * service/waitq.h - every lock request's store call, and clients waiting
 * for a lock, without a thread each and without one stalled store call
 * holding anyone else's answer.
 *
 * waitq_start() runs one request: acquire (maybe waiting), renew, release
 * or inspect. On a store that never waits on I/O (memory) the call runs on
 * the caller's thread. On a network store the caller's connection is
 * suspended (through the request's suspend callback) and a worker thread
 * makes the call (on a store with BACKEND_CAP_BATCH, single-key acquires,
 * renews and releases go in batches, one batch in flight at a time: see
 * waitq_calls.c); the request is answered by its wake callback when the
 * call returns or when the request's bound passes, whichever is first:
 * arrival + max(wait_ms, the store's call timeout). A call still in flight
 * at the bound finishes in the background, and a grant nobody will receive
 * is released at once.
 *
 * Waiting acquires are parked in a FIFO per key. A waiting acquire of
 * several keys at once takes no place in those FIFOs: it watches its keys
 * and tries them all again whenever one is notified, or when the retry
 * hint comes (service/waitq_multi.c). One timer thread answers
 * deadlines and hang-ups and never calls the store; it hands retries (on a
 * backend notification that the key may be free, or when the holder's TTL
 * is due) to the workers, at most one call per key at a time.
 */
#ifndef SERVICE_WAITQ_H
#define SERVICE_WAITQ_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"

struct waitq;
struct wq_job;

struct wq_timer { /* private to waitq: one entry of its min-heap */
    int64_t at;   /* monotonic ms */
    size_t idx;   /* place in the heap; SIZE_MAX when not in it */
    int kind;
};

enum wq_op {
    WQ_ACQUIRE = 0,
    WQ_RENEW,
    WQ_RELEASE,
    WQ_INSPECT,
    WQ_PING,          /* readiness: result only */
    WQ_COUNT,         /* locks held: count */
    WQ_ACQUIRE_MULTI, /* several keys at once: mreq and mgrant */
    WQ_RENEW_MULTI,
    WQ_RELEASE_MULTI,
    WQ_LIST,          /* a page of held keys: lreq, answered in list */
    WQ_FORCE_RELEASE, /* req.key; the holders removed in info */
};

struct wq_waiter { /* the caller's storage, e.g. in its per-request state */
    /* set by the caller before waitq_start() */
    enum wq_op op;
    int fd;              /* the client's socket, or -1 */
    struct lock_req req; /* strings borrowed until the answer; waiter is
                            waitq's */
    /* By op (a request has only one of them), strings and arrays borrowed
     * until the answer: mreq the multi ops' request, lreq WQ_LIST's. */
    union {
        struct lock_multi_req mreq;
        struct lock_list_req lreq;
    };
    struct lock_multi_grant *mgrant;      /* the multi ops: the caller's
                                             storage for the answer */
    struct lock_info *info;               /* WQ_INSPECT, WQ_FORCE_RELEASE:
                                             the caller's storage for the
                                             answer (the holders removed,
                                             for force); NULL otherwise */
    int64_t wait_ms;                      /* acquire: 0 = try once */
    int64_t start_us;                     /* monotonic us the request
                                             arrived; 0 = now */
    void (*suspend)(struct wq_waiter *w); /* park: stop serving it */
    void (*wake)(struct wq_waiter *w);    /* result ready: serve it */
    void *arg;                            /* for the callbacks */

    /* the result, valid once waitq_start() says WQ_DONE or in wake() */
    struct lock_grant grant; /* acquire/renew OK: the grant (its ttl_ms is
                                the store's; see backend_grant_left_ms());
                                HELD: retry_ms. The multi ops answer in
                                *mgrant instead (HELD: held and retry_ms
                                from the last try) */
    struct lock_list *list;  /* WQ_LIST: the page (entries in the same
                                block), malloc'ed by waitq and the
                                caller's to free(); NULL if none could
                                be had */
    int64_t parked_us;       /* time the request waited parked (in a key's
                                FIFO or watching its keys), 0 if never */
    int64_t count;           /* WQ_COUNT: backend_held_count() */
    enum backend_result result;
    bool shutting_down; /* answered because the instance is draining */
    bool client_gone;   /* the client hung up while waiting */

    /* private to waitq */
    struct wq_job *job;
};

enum wq_start {
    WQ_DONE = 0, /* w->result is the answer; no callback will come */
    WQ_PARKED,   /* w->suspend() was called; w->wake() will be */
};

/* Start the timer thread. NULL on failure (errno set). */
struct waitq *waitq_new(void);
/* Give the queue its backend and start `workers` threads for its calls,
 * before any waitq_start(). -1 if no thread could start (errno set). */
int waitq_bind(struct waitq *q, struct backend *be, unsigned workers);
/* Run the store calls still owed (giving up places, releasing grants
 * nobody received) for up to grace_ms, then stop the workers. After
 * waitq_shutdown() and once no more waitq_start() or waitq_orphan() can
 * come; before the backend is closed. */
void waitq_stop(struct waitq *q, int64_t grace_ms);
/* Stop the thread and free; call waitq_shutdown() and waitq_stop() first.
 * Accepts NULL. */
void waitq_free(struct waitq *q);

/* The backend's notify hook (struct backend_hooks.notify, arg = q). */
void waitq_notify(void *q, const char *key, size_t key_len);
/* The backend's notify_all hook: every parked key is tried again. */
void waitq_notify_all(void *q);

/* Run w. Runs on a server thread and never blocks on a network store. */
enum wq_start waitq_start(struct waitq *q, struct wq_waiter *w);

/* A grant whose client never received it (it hung up): release it, off
 * the caller's thread on a network store. Strings are copied. */
void waitq_orphan(struct waitq *q,
                  const char *key,
                  size_t key_len,
                  const char *token);

/* The same for a multi-key grant: every key of req is released from
 * req->token. Strings and arrays are copied. */
void waitq_orphan_multi(struct waitq *q, const struct lock_multi_req *req);

/* Answer every request in flight (result UNAVAILABLE, shutting_down set)
 * and every later waitq_start() at once; returns when all are answered. */
void waitq_shutdown(struct waitq *q);

/* Clients waiting for a lock now. */
int64_t waitq_count(struct waitq *q);

#endif /* SERVICE_WAITQ_H */
