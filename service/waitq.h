/*
 * service/waitq.h - clients waiting for a lock, without a thread each.
 *
 * waitq_start() tries the backend once; if the key is held and the client
 * may wait, the caller's connection is suspended (through the waiter's
 * suspend callback) and the waiter is parked in a FIFO per key. One thread
 * then retries the first waiter of a key when the backend notifies that the
 * key may be free, or when the holder's TTL is due; it answers 409 when a
 * waiter's deadline passes and drops a waiter whose client hangs up (their
 * sockets sit in an epoll set watched for EPOLLRDHUP). Each parked waiter
 * gets exactly one wake() call, from the waitq thread, with its result.
 */
#ifndef SERVICE_WAITQ_H
#define SERVICE_WAITQ_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"

struct waitq;
struct wq_key;

struct wq_timer { /* private to waitq: one entry of its min-heap */
    int64_t at;   /* monotonic ms */
    size_t idx;   /* place in the heap; SIZE_MAX when not in it */
    int kind;
};

struct wq_waiter { /* the caller's storage, e.g. in its per-request state */
    /* set by the caller before waitq_start() */
    struct lock_req req;                  /* strings borrowed from the caller */
    int64_t wait_ms;                      /* 0: try once */
    int fd;                               /* the client's socket, or -1 */
    void (*suspend)(struct wq_waiter *w); /* park: stop serving it */
    void (*wake)(struct wq_waiter *w);    /* result ready: serve it */
    void *arg;                            /* for the callbacks */

    /* the result, valid once waitq_start() says WQ_DONE or in wake() */
    enum backend_result result;
    struct lock_grant grant; /* OK: the grant; HELD: retry_ms */
    bool shutting_down;      /* answered because the instance is draining */
    bool client_gone;        /* the client hung up while waiting */

    /* private to waitq */
    struct lock_waiter lw;
    struct wq_key *key;
    struct wq_waiter *prev, *next;
    struct wq_timer deadline;
    bool last_unavailable;
};

enum wq_start {
    WQ_DONE = 0, /* w->result is the answer; no callback will come */
    WQ_PARKED,   /* w->suspend() was called; w->wake() will be */
};

/* Start the waitq thread. NULL on failure (errno set). */
struct waitq *waitq_new(void);
/* Give the queue its backend, before any waitq_start(). */
void waitq_bind(struct waitq *q, struct backend *be);
/* Stop the thread and free; call waitq_shutdown() first. Accepts NULL. */
void waitq_free(struct waitq *q);

/* The backend's notify hook (struct backend_hooks.notify, arg = q). */
void waitq_notify(void *q, const char *key, size_t key_len);

/* Try w->req now; park it if held and w->wait_ms > 0. Runs on a server
 * thread; blocks for one backend call at most. */
enum wq_start waitq_start(struct waitq *q, struct wq_waiter *w);

/* Answer every parked waiter (result UNAVAILABLE, shutting_down set) and
 * every later waitq_start() at once; returns when all are answered. */
void waitq_shutdown(struct waitq *q);

/* Clients waiting now. */
int64_t waitq_count(struct waitq *q);

#endif /* SERVICE_WAITQ_H */
