/*
 * service/waitq.c - the wait queue: a FIFO of parked waiters per key, a
 * min-heap of timers (waiter deadlines and per-key retries), an epoll set
 * of the waiters' sockets for hang-ups, and one thread that serves them.
 *
 * Only the waitq thread removes waiters and frees keys, so it may drop the
 * mutex around backend calls and still trust its pointers; server threads
 * only add waiters and keys, and backends only reschedule keys.
 */
#include "service/waitq.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "backends/keytab.h"
#include "service/log.h"
#include "service/metrics.h"

#define WQ_RETRY_MAX_MS                                            \
    2000                      /* retry at least this often: a lost \
                                 notification costs at most this */
#define WQ_UNAVAILABLE_MS 200 /* retry pace while the backend is down */
#define WQ_EVENTS         64

enum timer_kind {
    TIMER_DEADLINE,
    TIMER_RETRY
};

#define CONTAINER_OF(p, type, member) \
    ((type *)(void *)((char *)(p)-offsetof(type, member)))

struct wq_key {
    struct keytab_entry ke; /* ke.key points at key[] */
    struct wq_timer retry;
    struct wq_waiter *head, *tail;
    int64_t held_until; /* monotonic ms when the holder's TTL ends, as
                           last seen; for retry_after_ms */
    char key[];
};

struct waitq {
    struct backend *be;
    pthread_t thread;
    int epfd;
    int evfd;
    _Atomic uint64_t epoch; /* bumped by every notify */
    _Atomic int64_t count;
    pthread_mutex_t mu;     /* guards everything below */
    pthread_cond_t drained; /* signalled when shutdown has answered all */
    struct keytab keys;
    struct wq_timer **heap;
    size_t nheap, capheap;
    bool stopping; /* shutdown asked: answer everyone */
    bool drained_all;
    bool exiting; /* waitq_free(): the thread ends */
    uint64_t next_id;
};

static void heap_swap(struct waitq *q, size_t a, size_t b)
{
    struct wq_timer *t = q->heap[a];

    q->heap[a] = q->heap[b];
    q->heap[b] = t;
    q->heap[a]->idx = a;
    q->heap[b]->idx = b;
}

static void heap_up(struct waitq *q, size_t i)
{
    while (i > 0 && q->heap[(i - 1) / 2]->at > q->heap[i]->at) {
        heap_swap(q, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(struct waitq *q, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < q->nheap && q->heap[l]->at < q->heap[m]->at)
            m = l;
        if (r < q->nheap && q->heap[r]->at < q->heap[m]->at)
            m = r;
        if (m == i)
            return;
        heap_swap(q, i, m);
        i = m;
    }
}

static void do_timer_remove(struct waitq *q, struct wq_timer *t)
{
    size_t i = t->idx;

    if (i == SIZE_MAX)
        return;
    q->nheap--;
    if (i != q->nheap) {
        q->heap[i] = q->heap[q->nheap];
        q->heap[i]->idx = i;
        heap_down(q, i);
        heap_up(q, i);
    }
    t->idx = SIZE_MAX;
}

/* Schedule t at `at` (earlier only, unless force). -1 if out of memory. */
static int
do_timer_set(struct waitq *q, struct wq_timer *t, int64_t at, bool force)
{
    if (t->idx != SIZE_MAX) {
        if (!force && t->at <= at)
            return 0;
        t->at = at;
        heap_down(q, t->idx);
        heap_up(q, t->idx);
        return 0;
    }
    if (q->nheap == q->capheap) {
        size_t ncap = q->capheap == 0 ? 256 : q->capheap * 2;
        struct wq_timer **nh = realloc(q->heap, ncap * sizeof(*nh));
        if (nh == NULL)
            return -1;
        q->heap = nh;
        q->capheap = ncap;
    }
    t->at = at;
    t->idx = q->nheap;
    q->heap[q->nheap++] = t;
    heap_up(q, t->idx);
    return 0;
}

static void kick(struct waitq *q)
{
    uint64_t one = 1;

    /* a full counter already means "wake up" */
    if (write(q->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        log_warn("waitq: eventfd write failed: %s", strerror(errno));
}

static struct wq_key *do_key_find(struct waitq *q, const char *key, size_t len)
{
    return (struct wq_key *)keytab_find(&q->keys, key, len,
                                        keytab_hash(key, len));
}

static struct wq_key *do_key_get(struct waitq *q, const char *key, size_t len)
{
    struct wq_key *k = do_key_find(q, key, len);

    if (k != NULL)
        return k;
    k = calloc(1, sizeof(*k) + len + 1);
    if (k == NULL)
        return NULL;
    memcpy(k->key, key, len);
    k->ke.key = k->key;
    k->ke.key_len = len;
    k->ke.hash = keytab_hash(key, len);
    k->retry.idx = SIZE_MAX;
    k->retry.kind = TIMER_RETRY;
    keytab_insert(&q->keys, &k->ke);
    return k;
}

static void do_key_free_if_empty(struct waitq *q, struct wq_key *k)
{
    if (k->head != NULL)
        return;
    do_timer_remove(q, &k->retry);
    keytab_remove(&q->keys, &k->ke);
    free(k);
}

/* Take w out of its key's queue, the heap and the epoll set. */
static void do_unpark(struct waitq *q, struct wq_waiter *w)
{
    struct wq_key *k = w->key;

    if (w->prev != NULL)
        w->prev->next = w->next;
    else
        k->head = w->next;
    if (w->next != NULL)
        w->next->prev = w->prev;
    else
        k->tail = w->prev;
    w->prev = w->next = NULL;
    do_timer_remove(q, &w->deadline);
    if (w->fd >= 0)
        epoll_ctl(q->epfd, EPOLL_CTL_DEL, w->fd, NULL);
    atomic_fetch_sub_explicit(&q->count, 1, memory_order_relaxed);
    metrics_waiters_add(-1);
}

static uint64_t do_retry_after(struct wq_key *k, int64_t now)
{
    return k->held_until > now ? (uint64_t)(k->held_until - now) : 1;
}

/* A HELD answer for k seen at now: remember when the holder's TTL ends
 * (unless the key is free and only others' places are ahead) and retry
 * then, or within WQ_RETRY_MAX_MS, whichever is first. */
static void do_schedule_held(struct waitq *q,
                             struct wq_key *k,
                             int64_t now,
                             const struct lock_grant *g)
{
    uint64_t delay = g->retry_ms;

    if (!g->behind)
        k->held_until = now + (int64_t)g->retry_ms;
    if (delay == 0)
        delay = 1;
    else if (delay > WQ_RETRY_MAX_MS)
        delay = WQ_RETRY_MAX_MS;
    do_timer_set(q, &k->retry, now + (int64_t)delay, false);
}

/* Waiters whose answer is ready, woken once the mutex is dropped. */
struct done_list {
    struct wq_waiter *head;
};

static void done_push(struct done_list *d, struct wq_waiter *w)
{
    w->next = d->head; /* w is out of every queue: next is free to use */
    d->head = w;
}

static void done_wake(struct done_list *d)
{
    struct wq_waiter *w = d->head, *next;

    for (; w != NULL; w = next) {
        next = w->next;
        w->next = NULL;
        w->wake(w); /* w may be gone after this */
    }
    d->head = NULL;
}

/* End w's wait without a grant: give up its place in the store, answer. */
static void
finish_unserved(struct waitq *q, struct wq_waiter *w, struct done_list *done)
{
    struct wq_key *k = w->key;
    bool was_head = k->head == w;
    int64_t now = backend_mono_ms();

    do_unpark(q, w);
    if (w->shutting_down || (w->last_unavailable && !w->client_gone)) {
        w->result = BACKEND_UNAVAILABLE;
    } else {
        w->result = BACKEND_HELD;
        w->grant.retry_ms = do_retry_after(k, now);
    }
    if (was_head && k->head != NULL)
        do_timer_set(q, &k->retry, now, false); /* the next one's turn */
    do_key_free_if_empty(q, k);
    w->key = NULL;
    if (w->lw.be_data != NULL) {
        /* a network call for some stores: without our mutex */
        pthread_mutex_unlock(&q->mu);
        backend_cancel_wait(q->be, w->req.key, w->req.key_len, &w->lw);
        pthread_mutex_lock(&q->mu);
    }
    done_push(done, w);
}

/*
 * Retry key k's waiters in order: the first is tried; on a queueing store
 * a waiter that is merely behind another in the store's queue (possible
 * when two server threads registered in one order and parked in the other)
 * passes the turn to the next. Called and returns with the mutex held.
 */
static void
do_retry_key(struct waitq *q, struct wq_key *k, struct done_list *done)
{
    struct wq_waiter *w = k->head;

    while (w != NULL) {
        struct lock_grant g;
        enum backend_result r;
        int64_t now;

        w->req.waiter = &w->lw;
        pthread_mutex_unlock(&q->mu);
        r = backend_acquire(q->be, &w->req, &g);
        pthread_mutex_lock(&q->mu);
        now = backend_mono_ms();
        if (r == BACKEND_OK) {
            w->grant = g;
            w->result = BACKEND_OK;
            w->last_unavailable = false;
            do_unpark(q, w);
            do_key_free_if_empty(q, k);
            done_push(done, w);
            return;
        }
        if (r == BACKEND_HELD) {
            w->last_unavailable = false;
            do_schedule_held(q, k, now, &g);
            if (g.behind && w->next != NULL) {
                w = w->next;
                continue;
            }
            return;
        }
        /* unavailable or out of memory: keep the place, retry soon; the
         * deadline answers 503 if it never comes back */
        w->last_unavailable = true;
        do_timer_set(q, &k->retry, now + WQ_UNAVAILABLE_MS, false);
        return;
    }
}

static void do_fire_timers(struct waitq *q, struct done_list *done)
{
    int64_t now = backend_mono_ms();

    while (q->nheap > 0 && q->heap[0]->at <= now) {
        struct wq_timer *t = q->heap[0];
        do_timer_remove(q, t);
        if (t->kind == TIMER_DEADLINE) {
            finish_unserved(q, CONTAINER_OF(t, struct wq_waiter, deadline),
                            done);
        } else {
            struct wq_key *k = CONTAINER_OF(t, struct wq_key, retry);
            do_retry_key(q, k, done);
        }
        now = backend_mono_ms();
    }
}

static void do_answer_all(struct waitq *q, struct done_list *done)
{
    /* every waiter is in exactly one deadline timer: drain the heap */
    size_t i = 0;

    while (i < q->nheap) {
        struct wq_timer *t = q->heap[i];
        if (t->kind != TIMER_DEADLINE) {
            i++;
            continue;
        }
        struct wq_waiter *w = CONTAINER_OF(t, struct wq_waiter, deadline);
        w->shutting_down = true;
        finish_unserved(q, w, done);
        i = 0; /* the heap changed under us */
    }
}

static void *waitq_main(void *arg)
{
    struct waitq *q = arg;
    struct epoll_event ev[WQ_EVENTS];
    struct done_list done = { 0 };

    pthread_mutex_lock(&q->mu);
    while (!q->exiting) {
        int timeout = -1, n;

        if (q->stopping && !q->drained_all) {
            do_answer_all(q, &done);
            pthread_mutex_unlock(&q->mu);
            done_wake(&done); /* answered before waitq_shutdown() returns */
            pthread_mutex_lock(&q->mu);
            q->drained_all = true;
            pthread_cond_broadcast(&q->drained);
        }
        if (q->nheap > 0) {
            int64_t d = q->heap[0]->at - backend_mono_ms();
            timeout = d < 0 ? 0 : d > 60000 ? 60000 : (int)d;
        }
        pthread_mutex_unlock(&q->mu);
        done_wake(&done);
        n = epoll_wait(q->epfd, ev, WQ_EVENTS, timeout);
        pthread_mutex_lock(&q->mu);
        for (int i = 0; i < n; i++) {
            if (ev[i].data.ptr == NULL) {
                uint64_t v;
                if (read(q->evfd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                    log_warn("waitq: eventfd read failed: %s", strerror(errno));
                continue;
            }
            /* the client hung up: only this thread unparks, so the
             * waiter is still parked */
            struct wq_waiter *w = ev[i].data.ptr;
            w->client_gone = true;
            finish_unserved(q, w, &done);
        }
        do_fire_timers(q, &done);
    }
    pthread_mutex_unlock(&q->mu);
    done_wake(&done);
    return NULL;
}

void waitq_notify(void *arg, const char *key, size_t key_len)
{
    struct waitq *q = arg;
    struct wq_key *k;
    bool kicked = false;

    atomic_fetch_add(&q->epoch, 1); /* seq_cst: see waitq_start() */
    pthread_mutex_lock(&q->mu);
    k = do_key_find(q, key, key_len);
    if (k != NULL) {
        do_timer_set(q, &k->retry, backend_mono_ms(), false);
        kicked = true;
    }
    pthread_mutex_unlock(&q->mu);
    if (kicked)
        kick(q);
}

enum wq_start waitq_start(struct waitq *q, struct wq_waiter *w)
{
    bool queueing = (backend_caps(q->be) & BACKEND_CAP_QUEUE) != 0;
    uint64_t epoch = atomic_load(&q->epoch);
    struct wq_key *k;
    enum backend_result r = BACKEND_HELD;
    bool tried = false;
    int64_t now;

    memset(&w->lw, 0, sizeof(w->lw));
    w->key = NULL;
    w->prev = w->next = NULL;
    w->deadline.idx = SIZE_MAX;
    w->deadline.kind = TIMER_DEADLINE;
    w->shutting_down = w->client_gone = w->last_unavailable = false;
    memset(&w->grant, 0, sizeof(w->grant));

    pthread_mutex_lock(&q->mu);
    if (q->stopping) {
        pthread_mutex_unlock(&q->mu);
        w->shutting_down = true;
        w->result = BACKEND_UNAVAILABLE;
        return WQ_DONE;
    }
    w->lw.id = ++q->next_id;
    k = do_key_find(q, w->req.key, w->req.key_len);
    now = backend_mono_ms();
    if (!queueing && k != NULL) {
        /* waiters here are first: no barging past them */
        w->grant.retry_ms = do_retry_after(k, now);
    }
    pthread_mutex_unlock(&q->mu);

    if (queueing || k == NULL) {
        w->lw.deadline_ms = backend_now_ms() + w->wait_ms;
        w->req.waiter = w->wait_ms > 0 ? &w->lw : NULL;
        r = backend_acquire(q->be, &w->req, &w->grant);
        tried = true;
    }
    if (r != BACKEND_HELD || w->wait_ms <= 0) {
        w->result = r;
        if (r != BACKEND_OK && w->lw.be_data != NULL)
            backend_cancel_wait(q->be, w->req.key, w->req.key_len, &w->lw);
        return WQ_DONE;
    }

    w->suspend(w);
    pthread_mutex_lock(&q->mu);
    now = backend_mono_ms();
    k = q->stopping ? NULL : do_key_get(q, w->req.key, w->req.key_len);
    if (k == NULL ||
        do_timer_set(q, &w->deadline, now + w->wait_ms, true) != 0) {
        /* shutting down or out of memory: answer at once, through wake()
         * since the connection is suspended now */
        bool stopping = q->stopping;
        if (k != NULL)
            do_key_free_if_empty(q, k);
        pthread_mutex_unlock(&q->mu);
        if (w->lw.be_data != NULL)
            backend_cancel_wait(q->be, w->req.key, w->req.key_len, &w->lw);
        w->shutting_down = stopping;
        w->result = stopping ? BACKEND_UNAVAILABLE : BACKEND_NO_MEMORY;
        w->wake(w);
        return WQ_PARKED;
    }
    w->key = k;
    w->prev = k->tail;
    if (k->tail != NULL)
        k->tail->next = w;
    else
        k->head = w;
    k->tail = w;
    if (w->fd >= 0) {
        struct epoll_event ev = { .events = EPOLLRDHUP | EPOLLHUP | EPOLLERR,
                                  .data.ptr = w };
        if (epoll_ctl(q->epfd, EPOLL_CTL_ADD, w->fd, &ev) != 0) {
            log_warn("waitq: cannot watch a waiter's socket: %s",
                     strerror(errno));
            w->fd = -1;
        }
    }
    atomic_fetch_add_explicit(&q->count, 1, memory_order_relaxed);
    metrics_waiters_add(1);
    if (atomic_load(&q->epoch) != epoch || (k->head == w && !tried))
        /* a notification may have come between the try and now, or the
         * first waiter of a key was never tried: try at once */
        do_timer_set(q, &k->retry, now, false);
    else if (tried && k->head == w)
        do_schedule_held(q, k, now, &w->grant); /* at the holder's expiry */
    pthread_mutex_unlock(&q->mu);
    kick(q);
    return WQ_PARKED;
}

void waitq_shutdown(struct waitq *q)
{
    pthread_mutex_lock(&q->mu);
    q->stopping = true;
    kick(q);
    while (!q->drained_all)
        pthread_cond_wait(&q->drained, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

int64_t waitq_count(struct waitq *q)
{
    return atomic_load_explicit(&q->count, memory_order_relaxed);
}

void waitq_bind(struct waitq *q, struct backend *be)
{
    q->be = be;
}

struct waitq *waitq_new(void)
{
    struct waitq *q = calloc(1, sizeof(*q));
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
    int err;

    if (q == NULL)
        return NULL;
    q->epfd = epoll_create1(EPOLL_CLOEXEC);
    q->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->epfd < 0 || q->evfd < 0 ||
        epoll_ctl(q->epfd, EPOLL_CTL_ADD, q->evfd, &ev) != 0 ||
        keytab_init(&q->keys, 1024) != 0)
        goto fail;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->drained, NULL);
    err = pthread_create(&q->thread, NULL, waitq_main, q);
    if (err != 0) {
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->drained);
        errno = err;
        goto fail;
    }
    return q;
fail:
    err = errno;
    if (q->epfd >= 0)
        close(q->epfd);
    if (q->evfd >= 0)
        close(q->evfd);
    keytab_cleanup(&q->keys);
    free(q);
    errno = err;
    return NULL;
}

void waitq_free(struct waitq *q)
{
    if (q == NULL)
        return;
    pthread_mutex_lock(&q->mu);
    q->stopping = true;
    q->exiting = true;
    pthread_mutex_unlock(&q->mu);
    kick(q);
    pthread_join(q->thread, NULL);
    /* exiting skips the final drain only if shutdown never ran: do it */
    pthread_mutex_lock(&q->mu);
    if (!q->drained_all) {
        struct done_list done = { 0 };
        do_answer_all(q, &done);
        pthread_mutex_unlock(&q->mu);
        done_wake(&done);
        pthread_mutex_lock(&q->mu);
    }
    pthread_mutex_unlock(&q->mu);
    keytab_cleanup(&q->keys);
    free(q->heap);
    close(q->epfd);
    close(q->evfd);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->drained);
    free(q);
}
