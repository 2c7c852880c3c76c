/*
 * service/waitq.c - lock requests' store calls and the wait queue: a job
 * per request in flight, a FIFO of parked jobs per key, a min-heap of
 * timers (wait deadlines, answer bounds, per-key retries), an epoll set of
 * the waiters' sockets for hang-ups, one timer thread and a pool of worker
 * threads.
 *
 * The timer thread never calls the store: it answers jobs whose deadline
 * or bound passed and hands work to the workers through a run queue. A
 * job is answered at most once (j->w goes NULL); its store state (a place
 * in the store's queue, a grant) is cleaned up by whoever last holds it.
 * Ownership, all under q->mu: a queued or running job belongs to the
 * worker that pops or runs it; a parked job that is not running belongs to
 * its key's FIFO, and whoever unparks it disposes of it.
 *
 * This file holds the jobs, the keys' FIFOs, the answers and the public
 * calls; the timer heap and the timer thread are in waitq_timers.c, the
 * workers and what a store answer means for a job in waitq_calls.c, the
 * requests for several keys at once in waitq_multi.c, and what they share
 * in waitq_impl.h.
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

#include "lib/clock.h"
#include "lib/keytab.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "service/waitq_impl.h"

void wq_run_push(struct waitq *q, struct wq_task *t)
{
    t->next = NULL;
    if (q->run_tail != NULL)
        q->run_tail->next = t;
    else
        q->run_head = t;
    q->run_tail = t;
    pthread_cond_signal(&q->work);
}

struct wq_task *wq_run_pop(struct waitq *q)
{
    struct wq_task *t = q->run_head;

    if (t != NULL) {
        q->run_head = t->next;
        if (q->run_head == NULL)
            q->run_tail = NULL;
        t->next = NULL;
    }
    return t;
}

static struct wq_key *do_key_find(struct waitq *q, const char *key, size_t len)
{
    return (struct wq_key *)keytab_find(&q->keys, key, len,
                                        keytab_hash(key, len));
}

struct wq_key *wq_key_get(struct waitq *q, const char *key, size_t len)
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
    k->task.is_key = true;
    keytab_insert(&q->keys, &k->ke);
    return k;
}

void wq_key_free_if_idle(struct waitq *q, struct wq_key *k)
{
    if (k->head != NULL || k->running || k->queued || k->watchers != NULL)
        return;
    wq_timer_remove(q, &k->retry);
    keytab_remove(&q->keys, &k->ke);
    free(k);
}

/* A job with copies of w's strings; NULL if out of memory. */
/* A list job's copies of w's prefix and cursor at p, and its page. */
static int job_list(struct wq_job *j, const struct wq_waiter *w, char *p)
{
    struct wq_listing *l = malloc(sizeof(*l));

    if (l == NULL)
        return -1;
    l->lreq = w->lreq;
    if (w->lreq.prefix_len > 0)
        memcpy(p, w->lreq.prefix, w->lreq.prefix_len);
    l->lreq.prefix = p;
    p += w->lreq.prefix_len + 1;
    if (w->lreq.after != NULL) {
        memcpy(p, w->lreq.after, w->lreq.after_len);
        l->lreq.after = p;
    }
    l->list = wq_list_new(w->lreq.limit);
    if (l->list == NULL) {
        free(l);
        return -1;
    }
    j->listing = l;
    return 0;
}

static struct wq_job *job_new(const struct wq_waiter *w)
{
    size_t kl = w->req.key_len;
    size_t tl = w->req.token != NULL ? strlen(w->req.token) : 0;
    size_t ol = w->req.owner != NULL ? strlen(w->req.owner) : 0;
    size_t il = w->req.idem_key != NULL ? strlen(w->req.idem_key) : 0;
    size_t ll = w->op == WQ_LIST ? w->lreq.prefix_len + w->lreq.after_len
                                 : 0; /* two more NULs: in the 4 */
    struct wq_job *j = calloc(1, sizeof(*j) + kl + tl + ol + il + ll + 6);
    char *p;

    if (j == NULL)
        return NULL;
    if (w->op == WQ_LIST &&
        job_list(j, w, j->text + kl + tl + ol + il + 4) != 0) {
        free(j);
        return NULL;
    }
    p = j->text;
    if (kl > 0)
        memcpy(p, w->req.key, kl);
    j->req.key = p;
    j->req.key_len = kl;
    p += kl + 1;
    if (w->req.token != NULL) {
        memcpy(p, w->req.token, tl);
        j->req.token = p;
        p += tl + 1;
    }
    if (w->req.owner != NULL) {
        memcpy(p, w->req.owner, ol);
        j->req.owner = p;
        p += ol + 1;
    }
    if (w->req.idem_key != NULL) {
        memcpy(p, w->req.idem_key, il);
        j->req.idem_key = p;
    }
    j->req.ttl_ms = w->req.ttl_ms;
    j->req.mode = w->req.mode;
    j->req.limit = w->req.limit;
    j->req.reenter = w->req.reenter;
    j->req.all = w->req.all;
    j->op = w->op;
    j->wait_ms = w->op == WQ_ACQUIRE ? w->wait_ms : 0;
    j->fd = -1;
    j->wait_end.idx = j->bound.idx = SIZE_MAX;
    j->wait_end.kind = TIMER_WAIT_END;
    j->bound.kind = TIMER_BOUND;
    return j;
}

void wq_job_mem_free(struct wq_job *j)
{
    if (j->listing != NULL)
        free(j->listing->list);
    free(j->listing);
    free(j->multi);
    free(j);
}

/* Free j, or leave it to the timer thread if an epoll_wait() that began
 * before j was unwatched may still return it. */
void wq_free_job(struct waitq *q, struct wq_job *j)
{
    if (j->multi != NULL)
        wq_multi_forget(q, j->multi);
    if (!j->watched) {
        wq_job_mem_free(j);
        return;
    }
    j->task.next = q->graveyard;
    q->graveyard = &j->task;
}

void wq_done_wake(struct done_list *d)
{
    struct wq_waiter *w = d->head, *next;

    d->head = NULL;
    for (; w != NULL; w = next) {
        next = (struct wq_waiter *)(void *)w->job;
        w->job = NULL;
        w->wake(w); /* w may be gone after this */
    }
}

/* Answer j's request (once): r, with g or info when given. */
void wq_answer(struct waitq *q,
               struct wq_job *j,
               enum backend_result r,
               const struct lock_grant *g,
               struct lock_info *info,
               struct done_list *done)
{
    struct wq_waiter *w = j->w;

    if (w == NULL) {
        if (info != NULL) /* nobody to hand it to */
            lock_info_clear(info);
        return;
    }
    if (j->fd >= 0) {
        epoll_ctl(q->epfd, EPOLL_CTL_DEL, j->fd, NULL);
        j->fd = -1;
    }
    wq_timer_remove(q, &j->wait_end);
    wq_timer_remove(q, &j->bound);
    if (j->counted) {
        j->counted = false;
        atomic_fetch_sub_explicit(&q->count, 1, memory_order_relaxed);
        metrics_waiters_add(-1);
        w->parked_us = clock_mono_us() - j->parked_at_us;
    }
    w->result = r;
    if (g != NULL)
        w->grant = *g;
    if (info != NULL && w->info != NULL) { /* moved: w's holder frees it */
        *w->info = *info;
        memset(info, 0, sizeof(*info));
    } else if (info != NULL) {
        lock_info_clear(info); /* nobody asked for it */
    }
    j->w = NULL;
    /* the done list is threaded through w->job, which waitq owns */
    w->job = (struct wq_job *)(void *)done->head;
    done->head = w;
}

static uint64_t retry_after(int64_t held_until, int64_t now)
{
    return held_until > now ? (uint64_t)(held_until - now) : 1;
}

/* Answer j without a grant: 503 if the store was unreachable or never
 * answered, else 409 with the holder's remaining TTL. */
void wq_answer_unserved(struct waitq *q,
                        struct wq_job *j,
                        struct done_list *done)
{
    struct wq_waiter *w = j->w;
    struct lock_grant g = { 0 };
    int64_t held_until = j->held_until;

    if (w == NULL)
        return;
    if (j->multi != NULL) {
        wq_multi_answer_unserved(q, j, done);
        return;
    }
    if (j->key != NULL && j->key->held_until > held_until)
        held_until = j->key->held_until;
    if (w->shutting_down || j->op != WQ_ACQUIRE || !j->tried ||
        (j->last_unavailable && !w->client_gone)) {
        wq_answer(q, j, BACKEND_UNAVAILABLE, NULL, NULL, done);
        return;
    }
    g.retry_ms = retry_after(held_until, clock_mono_ms());
    wq_answer(q, j, BACKEND_HELD, &g, NULL, done);
}

/* Take j out of its key's FIFO; if j was first and next_turn, the next
 * waiter is tried at once. */
void wq_unpark(struct waitq *q, struct wq_job *j, bool next_turn)
{
    struct wq_key *k = j->key;
    bool was_head = k->head == j;

    if (j->prev != NULL)
        j->prev->next = j->next;
    else
        k->head = j->next;
    if (j->next != NULL)
        j->next->prev = j->prev;
    else
        k->tail = j->prev;
    j->prev = j->next = NULL;
    j->parked = false;
    j->key = NULL;
    if (next_turn && was_head && k->head != NULL)
        wq_timer_set(q, &k->retry, clock_mono_ms(), false);
    if (k->head == NULL && k->watchers != NULL)
        /* a multi-key waiter held back by this instance's waiters (a store
         * without a queue) may go now; without them it costs one try */
        wq_multi_poke(q, k);
    wq_key_free_if_idle(q, k);
}

/* An answered job nobody runs: out of its FIFO, then its place in the
 * store given up by a worker, or freed. */
void wq_dispose(struct waitq *q, struct wq_job *j)
{
    if (j->running || j->queued)
        return; /* the worker that has it disposes of it */
    if (j->parked)
        wq_unpark(q, j, true);
    if (j->lw.be_data != NULL) {
        j->cleanup = CLEAN_CANCEL;
        j->queued = true;
        wq_run_push(q, &j->task);
        return;
    }
    wq_free_job(q, j);
}

void wq_park(struct waitq *q, struct wq_job *j, struct wq_key *k)
{
    j->key = k;
    j->parked = true;
    j->prev = k->tail;
    j->next = NULL;
    if (k->tail != NULL)
        k->tail->next = j;
    else
        k->head = j;
    k->tail = j;
    wq_track(q, j);
}

/* j waits from now on: counted as a waiter, its client's socket watched
 * for a hang-up. */
void wq_track(struct waitq *q, struct wq_job *j)
{
    if (!j->counted) {
        j->counted = true;
        j->parked_at_us = clock_mono_us();
        atomic_fetch_add_explicit(&q->count, 1, memory_order_relaxed);
        metrics_waiters_add(1);
    }
    if (j->w != NULL && j->w->fd >= 0 && j->fd < 0) {
        struct epoll_event ev = { .events = EPOLLRDHUP | EPOLLHUP | EPOLLERR,
                                  .data.ptr = j };
        if (epoll_ctl(q->epfd, EPOLL_CTL_ADD, j->w->fd, &ev) == 0) {
            j->fd = j->w->fd;
            j->watched = true;
        } else
            log_warn("waitq: cannot watch a waiter's socket: %s",
                     strerror(errno));
    }
}

static void do_poke_key(struct keytab_entry *ke, void *arg)
{
    struct waitq *q = arg;
    struct wq_key *k = (struct wq_key *)(void *)ke;

    wq_timer_set(q, &k->retry, clock_mono_ms(), false);
    if (k->watchers != NULL)
        wq_multi_poke(q, k);
}

void waitq_notify_all(void *arg)
{
    struct waitq *q = arg;

    atomic_fetch_add(&q->epoch, 1); /* seq_cst: see do_after_first() */
    pthread_mutex_lock(&q->mu);
    keytab_foreach(&q->keys, do_poke_key, q);
    pthread_mutex_unlock(&q->mu);
}

void waitq_notify(void *arg, const char *key, size_t key_len)
{
    struct waitq *q = arg;
    struct wq_key *k;

    atomic_fetch_add(&q->epoch, 1); /* seq_cst: see do_after_first() */
    pthread_mutex_lock(&q->mu);
    k = do_key_find(q, key, key_len);
    if (k != NULL) /* kicks the timer thread if it is now the first */
        wq_timer_set(q, &k->retry, clock_mono_ms(), false);
    if (k != NULL && k->watchers != NULL)
        wq_multi_poke(q, k);
    pthread_mutex_unlock(&q->mu);
}

/* j, just handed its request, can go no further (the instance is
 * draining, or out of memory): answer it now. */
static void do_refuse(struct waitq *q, struct wq_job *j, struct done_list *done)
{
    bool stopping = atomic_load(&q->stopping);

    j->w->shutting_down = stopping;
    wq_answer(q, j, stopping ? BACKEND_UNAVAILABLE : BACKEND_NO_MEMORY, NULL,
              NULL, done);
    wq_dispose(q, j);
}

/* The call on the caller's thread, for a store that never waits on I/O
 * and a request that will not park. */
static enum wq_start run_inline(struct waitq *q, struct wq_waiter *w)
{
    w->req.waiter = NULL;
    if (w->op == WQ_LIST)
        w->list = wq_list_new(w->lreq.limit);
    w->result = wq_call_store(q->be, w->op, &w->req, &w->grant, w->info,
                              &w->count, &w->lreq, w->list);
    return WQ_DONE;
}

/* A waiting acquire's first try on the caller's thread: true if that
 * answered it (w->result set, j freed), false if the lock is held. */
static bool try_inline(struct waitq *q,
                       struct wq_waiter *w,
                       struct wq_job *j,
                       struct lock_grant *g)
{
    enum backend_result r = backend_acquire(q->be, &j->req, g);

    if (r != BACKEND_HELD) {
        w->result = r;
        w->grant = *g;
        if (r != BACKEND_OK && j->lw.be_data != NULL)
            backend_cancel_wait(q->be, j->req.key, j->req.key_len, &j->lw);
        wq_free_job(q, j);
        return true;
    }
    j->tried = true;
    if (!g->behind)
        j->held_until = clock_mono_ms() + (int64_t)g->retry_ms;
    return false;
}

/* Park j, held after its try on the caller's thread (tried_now) or behind
 * this instance's waiters, until its retry or its deadline. */
static enum wq_start park_inline(struct waitq *q,
                                 struct wq_waiter *w,
                                 struct wq_job *j,
                                 int64_t start,
                                 const struct lock_grant *g,
                                 bool tried_now,
                                 uint64_t epoch)
{
    struct done_list done = { 0 };
    struct wq_key *k;
    int64_t now;

    w->suspend(w);
    pthread_mutex_lock(&q->mu);
    j->w = w;
    w->job = j;
    now = clock_mono_ms();
    k = q->stopping ? NULL : wq_key_get(q, j->req.key, j->req.key_len);
    if (k == NULL ||
        wq_timer_set(q, &j->bound, start + w->wait_ms, true) != 0) {
        if (k != NULL)
            wq_key_free_if_idle(q, k);
        do_refuse(q, j, &done);
        pthread_mutex_unlock(&q->mu);
        wq_done_wake(&done);
        return WQ_PARKED;
    }
    if (!j->tried) {
        j->tried = true; /* parked behind this instance's waiters */
        j->held_until = k->held_until;
    }
    wq_park(q, j, k);
    if (atomic_load(&q->epoch) != epoch || (k->head == j && !tried_now))
        /* a notification may have come between the try and now, or
         * the first waiter of a key was never tried: try at once */
        wq_timer_set(q, &k->retry, now, false);
    else if (k->head == j)
        wq_schedule_held(q, k, now, g); /* at the holder's expiry */
    pthread_mutex_unlock(&q->mu);
    return WQ_PARKED;
}

/* A waiting acquire on a store that never waits on I/O (memory): try now,
 * on this thread; park only if held. */
static enum wq_start start_inline(struct waitq *q,
                                  struct wq_waiter *w,
                                  struct wq_job *j,
                                  int64_t start,
                                  int64_t now)
{
    bool queueing = (backend_caps(q->be) & BACKEND_CAP_QUEUE) != 0;
    struct lock_grant g = { 0 };
    bool tried_now = false;
    struct wq_key *k;
    uint64_t epoch;

    epoch = atomic_load(&q->epoch);
    pthread_mutex_lock(&q->mu);
    j->lw.id = ++q->next_id;
    k = queueing ? NULL : do_key_find(q, j->req.key, j->req.key_len);
    pthread_mutex_unlock(&q->mu);
    j->lw.deadline_ms = clock_wall_ms() + (start + w->wait_ms - now);
    j->req.waiter = &j->lw;
    if (k == NULL || k->head == NULL) { /* a key may be only watched */
        if (try_inline(q, w, j, &g))
            return WQ_DONE;
        tried_now = true;
    }
    return park_inline(q, w, j, start, &g, tried_now, epoch);
}

/* A request on a network store: a worker calls it; this thread never
 * waits. j is answered by its bound at the latest. */
static enum wq_start start_network(struct waitq *q,
                                   struct wq_waiter *w,
                                   struct wq_job *j,
                                   int64_t start,
                                   int64_t bound)
{
    bool queueing = (backend_caps(q->be) & BACKEND_CAP_QUEUE) != 0;
    bool waits = w->op == WQ_ACQUIRE && w->wait_ms > 0;
    struct done_list done = { 0 };
    struct wq_key *k;

    w->suspend(w);
    pthread_mutex_lock(&q->mu);
    j->w = w;
    w->job = j;
    j->lw.id = ++q->next_id;
    if (q->stopping || wq_timer_set(q, &j->bound, bound, true) != 0 ||
        (waits &&
         wq_timer_set(q, &j->wait_end, start + w->wait_ms, true) != 0)) {
        do_refuse(q, j, &done);
        pthread_mutex_unlock(&q->mu);
        wq_done_wake(&done);
        return WQ_PARKED;
    }
    k = w->op == WQ_ACQUIRE && !queueing
            ? do_key_find(q, j->req.key, j->req.key_len)
            : NULL;
    if (k != NULL && k->head != NULL) {
        /* waiters here are first: no barging past them */
        j->tried = true;
        j->held_until = k->held_until;
        if (!waits) {
            wq_answer_unserved(q, j, &done);
            wq_free_job(q, j);
        } else {
            wq_park(q, j, k);
        }
    } else if (!wq_batch_take(q, j)) {
        j->queued = true;
        wq_run_push(q, &j->task);
    }
    pthread_mutex_unlock(&q->mu);
    wq_done_wake(&done);
    return WQ_PARKED;
}

enum wq_start waitq_start(struct waitq *q, struct wq_waiter *w)
{
    bool inline_calls = q->be->call_timeout_ms <= 0;
    bool waits = w->op == WQ_ACQUIRE && w->wait_ms > 0;
    struct wq_job *j;
    int64_t now, start, bound;

    w->job = NULL;
    w->shutting_down = w->client_gone = false;
    w->list = NULL;
    w->parked_us = 0;
    memset(&w->grant, 0, sizeof(w->grant));
    if (w->info != NULL)
        memset(w->info, 0, sizeof(*w->info));
    if ((w->op == WQ_INSPECT || w->op == WQ_FORCE_RELEASE) && w->info == NULL) {
        w->result = BACKEND_NO_MEMORY; /* the caller gave no room for it */
        return WQ_DONE;
    }
    if (atomic_load(&q->stopping)) {
        w->shutting_down = true;
        w->result = BACKEND_UNAVAILABLE;
        return WQ_DONE;
    }
    if (w->op == WQ_ACQUIRE_MULTI || w->op == WQ_RENEW_MULTI ||
        w->op == WQ_RELEASE_MULTI)
        return wq_multi_start(q, w);
    if (inline_calls && !waits)
        return run_inline(q, w);

    j = job_new(w);
    if (j == NULL) {
        w->result = BACKEND_NO_MEMORY;
        return WQ_DONE;
    }
    now = clock_mono_ms();
    start = w->start_us > 0 ? w->start_us / 1000 : now;
    bound = start + (waits ? w->wait_ms : 0);
    j->wait_until = bound;
    j->start_us = w->start_us > 0 ? w->start_us : clock_mono_us();
    if (inline_calls)
        return start_inline(q, w, j, start, now);
    if (start + q->be->call_timeout_ms > bound)
        bound = start + q->be->call_timeout_ms;
    return start_network(q, w, j, start, bound);
}

void waitq_orphan(struct waitq *q,
                  const char *key,
                  size_t key_len,
                  const char *token)
{
    struct wq_waiter w = { .op = WQ_RELEASE };

    w.req.key = key;
    w.req.key_len = key_len;
    w.req.token = token;
    w.req.all = true; /* a new grant, held once: give it all back */
    if (q->be->call_timeout_ms <= 0) {
        struct lock_grant g;
        enum backend_result r = backend_release(q->be, &w.req, &g);
        log_info("released a grant whose client left before the answer "
                 "(%s)",
                 backend_result_str(r));
        return;
    }
    wq_push_cleanup(q, job_new(&w), CLEAN_RELEASE);
}

void wq_push_cleanup(struct waitq *q, struct wq_job *j, enum cleanup c)
{
    if (j == NULL) {
        log_warn("waitq: out of memory: a grant nobody received stays "
                 "until its TTL");
        return;
    }
    j->cleanup = c;
    pthread_mutex_lock(&q->mu);
    j->queued = true;
    wq_run_push(q, &j->task);
    pthread_mutex_unlock(&q->mu);
}

void waitq_shutdown(struct waitq *q)
{
    pthread_mutex_lock(&q->mu);
    q->stopping = true;
    wq_kick(q);
    while (!q->drained_all)
        pthread_cond_wait(&q->drained, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

int64_t waitq_count(struct waitq *q)
{
    return atomic_load_explicit(&q->count, memory_order_relaxed);
}

int waitq_bind(struct waitq *q, struct backend *be, unsigned workers)
{
    q->be = be;
    q->batches = backend_batches(be);
    q->retry_max_ms = (backend_caps(be) & BACKEND_CAP_NOTIFIES) != 0
                          ? WQ_RETRY_NOTIFIED_MS
                          : WQ_RETRY_MAX_MS;
    if (workers == 0)
        workers = 1;
    if (workers > WQ_WORKERS_MAX)
        workers = WQ_WORKERS_MAX;
    q->workers = calloc(workers, sizeof(*q->workers));
    if (q->workers == NULL)
        return -1;
    for (unsigned i = 0; i < workers; i++) {
        int err = pthread_create(&q->workers[i], NULL, wq_worker_main, q);
        if (err != 0) {
            if (q->nworkers > 0)
                break; /* fewer workers still serve */
            errno = err;
            return -1;
        }
        q->nworkers++;
    }
    return 0;
}

void waitq_stop(struct waitq *q, int64_t grace_ms)
{
    if (q == NULL)
        return;
    pthread_mutex_lock(&q->mu);
    q->workers_stop = true;
    q->stop_by = clock_mono_ms() + grace_ms;
    pthread_cond_broadcast(&q->work);
    pthread_mutex_unlock(&q->mu);
    for (unsigned i = 0; i < q->nworkers; i++)
        pthread_join(q->workers[i], NULL);
    q->nworkers = 0;
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
    q->sleep_until = INT64_MIN;
    q->retry_max_ms = WQ_RETRY_MAX_MS; /* waitq_bind() may raise it */
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->drained, NULL);
    pthread_cond_init(&q->work, NULL);
    err = pthread_create(&q->thread, NULL, wq_timer_main, q);
    if (err != 0) {
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->drained);
        pthread_cond_destroy(&q->work);
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

static void free_key(struct keytab_entry *ke, void *arg)
{
    (void)arg;
    free(ke);
}

void waitq_free(struct waitq *q)
{
    struct wq_task *t;

    if (q == NULL)
        return;
    pthread_mutex_lock(&q->mu);
    q->stopping = true;
    q->exiting = true;
    pthread_mutex_unlock(&q->mu);
    wq_kick(q);
    pthread_join(q->thread, NULL);
    waitq_stop(q, 0);
    /* exiting skips the final drain only if shutdown never ran: do it */
    pthread_mutex_lock(&q->mu);
    if (!q->drained_all) {
        struct done_list done = { 0 };
        wq_answer_all(q, &done);
        pthread_mutex_unlock(&q->mu);
        wq_done_wake(&done);
        pthread_mutex_lock(&q->mu);
    }
    while ((t = wq_run_pop(q)) != NULL) /* owed calls nobody ran */
        if (!t->is_key)
            wq_job_mem_free(CONTAINER_OF(t, struct wq_job, task));
    wq_free_graveyard(q);
    pthread_mutex_unlock(&q->mu);
    keytab_foreach(&q->keys, free_key, NULL);
    keytab_cleanup(&q->keys);
    free(q->workers);
    free(q->heap);
    close(q->epfd);
    close(q->evfd);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->drained);
    pthread_cond_destroy(&q->work);
    free(q);
}
