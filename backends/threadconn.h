/*
 * backends/threadconn.h - one store connection per worker thread, and the
 * back-off after a failed connect, shared by the adapters that block a
 * thread on their store (redis, mysql).
 *
 * Each thread gets its own connection record on first use (a pthread key;
 * freed when the thread exits or when the set is destroyed). A failed
 * connect holds that thread off for a back-off that doubles from min_ms to
 * max_ms; any thread reaching the store again ends every thread's back-off
 * at once, so a store that is back is not answered 503 any longer.
 *
 * Usage: embed struct threadconn first in the adapter's per-thread struct;
 * threadconn_get() returns it zeroed on a thread's first call.
 */
#ifndef BACKENDS_THREADCONN_H
#define BACKENDS_THREADCONN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct threadconn {
    int64_t retry_at_ms;  /* monotonic: no connect attempt before this,
                             unless the set's ok_at_ms passes failed_at_ms */
    int64_t failed_at_ms; /* monotonic: the last failed connect */
    int64_t backoff_ms;   /* the last back-off; 0 after a success */
    struct threadconn *prev, *next; /* in the set, under its mutex */
};

struct threadconn_set {
    size_t size; /* of the adapter's struct */
    /* close the adapter's part, before free(); thread_exits: called on the
     * exiting thread itself (per-thread library state may go too), not
     * from threadconn_set_destroy() */
    void (*drop)(struct threadconn *conn, bool thread_exits);
    int64_t backoff_min_ms, backoff_max_ms;
    _Atomic int64_t ok_at_ms; /* monotonic: a thread last reached the store */
    pthread_key_t key;
    bool key_made;
    pthread_mutex_t mu; /* guards all */
    struct threadconn *all;
};

/* 0, or -1 (nothing to destroy). drop may be NULL. */
int threadconn_set_init(struct threadconn_set *set,
                        size_t size,
                        void (*drop)(struct threadconn *conn,
                                     bool thread_exits),
                        int64_t backoff_min_ms,
                        int64_t backoff_max_ms);
/* Drop and free every thread's record; no thread may use the set after. */
void threadconn_set_destroy(struct threadconn_set *set);

/* This thread's record (zeroed on first use), or NULL out of memory. */
struct threadconn *threadconn_get(struct threadconn_set *set);

/* May this thread try to connect now? False while it backs off and no
 * thread has reached the store since its last failure. */
bool threadconn_may_try(struct threadconn_set *set,
                        const struct threadconn *conn);
/* The back-off after one of cur ms: twice as long, within min..max (the
 * first is min). For loops that keep their own, e.g. a subscriber. */
int64_t threadconn_backoff_next(const struct threadconn_set *set, int64_t cur);
/* A connect failed: back off, twice as long as last time (min..max). */
void threadconn_failed(struct threadconn_set *set, struct threadconn *conn);
/* The store answered this thread: its back-off ends, and every other
 * thread's too. */
void threadconn_ok(struct threadconn_set *set, struct threadconn *conn);

#endif /* BACKENDS_THREADCONN_H */
