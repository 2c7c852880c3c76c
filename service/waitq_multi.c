/*
 * service/waitq_multi.c - the wait queue's requests for several keys at
 * once: renew and release (one store call each), and acquire, which may
 * wait. A waiting multi-key acquire takes no place in the keys' FIFOs (it
 * would deadlock with another one that queued on the same keys in another
 * order): it watches its keys, and tries all of them again, in one
 * acquire_multi(), whenever the notify hook names any of them, when this
 * instance's own waiters leave one of them, or when the retry hint comes,
 * until it is granted or its wait runs out. On a store without a queue of
 * its own it never goes before this instance's parked single-key waiters:
 * a key they wait for is held without asking the store.
 *
 * A multi job is a struct wq_job with its struct wq_multi: the job's
 * timers, hang-up watch, answers and disposal are waitq.c's; only the
 * tries, the watches and the retry timer are here.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "service/waitq_impl.h"

/* A job for w (a multi op), with copies of its keys, token and owner. */
static struct wq_job *multi_job_new(const struct wq_waiter *w)
{
    const struct lock_multi_req *r = &w->mreq;
    size_t tl = r->token != NULL ? strlen(r->token) + 1 : 0;
    size_t ol = r->owner != NULL ? strlen(r->owner) + 1 : 0;
    size_t n = r->n, text = tl + ol;
    struct wq_job *j = calloc(1, sizeof(*j));
    struct wq_multi *m;
    const char **keys;
    size_t *lens;
    char *p;

    for (size_t i = 0; i < n; i++)
        text += r->key_lens[i] + 1;
    m = calloc(
        1, sizeof(*m) +
               n * (sizeof(struct wq_watch) + sizeof(char *) + sizeof(size_t)) +
               text);
    if (j == NULL || m == NULL) {
        free(j);
        free(m);
        return NULL;
    }
    m->watch = (struct wq_watch *)(void *)(m + 1);
    keys = (const char **)(void *)(m->watch + n);
    lens = (size_t *)(void *)(keys + n);
    p = (char *)(lens + n);
    for (size_t i = 0; i < n; i++) {
        memcpy(p, r->keys[i], r->key_lens[i]);
        keys[i] = p;
        lens[i] = r->key_lens[i];
        p += lens[i] + 1;
        m->watch[i].m = m;
    }
    m->req.n = n;
    m->req.keys = keys;
    m->req.key_lens = lens;
    m->req.ttl_ms = r->ttl_ms;
    if (r->token != NULL) {
        memcpy(p, r->token, tl);
        m->req.token = p;
        p += tl;
    }
    if (r->owner != NULL) {
        memcpy(p, r->owner, ol);
        m->req.owner = p;
    }
    m->job = j;
    m->retry.idx = SIZE_MAX;
    m->retry.kind = TIMER_MRETRY;
    j->multi = m;
    j->op = w->op;
    j->wait_ms = w->op == WQ_ACQUIRE_MULTI ? w->wait_ms : 0;
    j->fd = -1;
    j->wait_end.idx = j->bound.idx = SIZE_MAX;
    j->wait_end.kind = TIMER_WAIT_END;
    j->bound.kind = TIMER_BOUND;
    return j;
}

static enum backend_result call_multi(struct backend *be,
                                      enum wq_op op,
                                      const struct lock_multi_req *req,
                                      struct lock_multi_grant *g)
{
    switch (op) {
    case WQ_ACQUIRE_MULTI:
        return backend_acquire_multi(be, req, g);
    case WQ_RENEW_MULTI:
        return backend_renew_multi(be, req, g);
    default:
        return backend_release_multi(be, req, g);
    }
}

/*
 * On a store without a queue, this instance's parked waiters on a key go
 * first: if any key of req has some, true and g says HELD (those keys, and
 * the first TTL their holders were last seen to end at) without asking the
 * store. Mutex held.
 */
static bool do_local_held(struct waitq *q,
                          const struct lock_multi_req *req,
                          struct lock_multi_grant *g)
{
    int64_t now = clock_mono_ms(), first = 0;
    bool any = false;

    memset(g, 0, sizeof(*g));
    if ((backend_caps(q->be) & BACKEND_CAP_QUEUE) != 0)
        return false;
    for (size_t i = 0; i < req->n; i++) {
        struct wq_key *k = (struct wq_key *)keytab_find(
            &q->keys, req->keys[i], req->key_lens[i],
            keytab_hash(req->keys[i], req->key_lens[i]));
        if (k == NULL || k->head == NULL)
            continue;
        g->held[i] = any = true;
        if (k->held_until > now && (first == 0 || k->held_until < first))
            first = k->held_until;
    }
    g->retry_ms = first > now ? (uint64_t)(first - now) : 0;
    return any;
}

/* A multi op on the caller's thread (a store that never waits on I/O, a
 * request that does not wait). */
static enum wq_start run_inline(struct waitq *q, struct wq_waiter *w)
{
    bool held = false;

    if (w->op == WQ_ACQUIRE_MULTI &&
        (backend_caps(q->be) & BACKEND_CAP_QUEUE) == 0) {
        pthread_mutex_lock(&q->mu);
        held = do_local_held(q, &w->mreq, w->mgrant);
        pthread_mutex_unlock(&q->mu);
    }
    w->result =
        held ? BACKEND_HELD : call_multi(q->be, w->op, &w->mreq, w->mgrant);
    return WQ_DONE;
}

/* Answer j with r and g (NULL: nothing to copy). */
static void do_answer(struct waitq *q,
                      struct wq_job *j,
                      enum backend_result r,
                      const struct lock_multi_grant *g,
                      struct done_list *done)
{
    if (j->w != NULL && g != NULL)
        *j->w->mgrant = *g;
    wq_answer(q, j, r, NULL, NULL, done);
}

void wq_multi_answer_unserved(struct waitq *q,
                              struct wq_job *j,
                              struct done_list *done)
{
    struct wq_waiter *w = j->w;
    struct wq_multi *m = j->multi;
    struct lock_multi_grant g;
    int64_t now = clock_mono_ms();

    if (w == NULL)
        return;
    if (w->shutting_down || j->op != WQ_ACQUIRE_MULTI || !j->tried ||
        (j->last_unavailable && !w->client_gone)) {
        do_answer(q, j, BACKEND_UNAVAILABLE, NULL, done);
        return;
    }
    memset(&g, 0, sizeof(g));
    memcpy(g.held, m->held, sizeof(g.held));
    g.retry_ms =
        m->held_until > now ? (uint64_t)(m->held_until - now) : (uint64_t)1;
    do_answer(q, j, BACKEND_HELD, &g, done);
}

/* Unlink m's watches from its keys (freeing keys left idle). */
static void do_unwatch(struct waitq *q, struct wq_multi *m)
{
    for (size_t i = 0; m->watching && i < m->req.n; i++) {
        struct wq_watch *w = &m->watch[i];
        struct wq_key *k = w->key;
        if (k == NULL)
            continue;
        if (w->prev != NULL)
            w->prev->next = w->next;
        else
            k->watchers = w->next;
        if (w->next != NULL)
            w->next->prev = w->prev;
        w->prev = w->next = NULL;
        w->key = NULL;
        wq_key_free_if_idle(q, k);
    }
    m->watching = false;
}

void wq_multi_forget(struct waitq *q, struct wq_multi *m)
{
    do_unwatch(q, m);
    wq_timer_remove(q, &m->retry);
}

/* Watch every key of j (once) and count j as a waiter: -1 if out of
 * memory (nothing watched then). */
static int do_watch(struct waitq *q, struct wq_job *j)
{
    struct wq_multi *m = j->multi;

    for (size_t i = 0; !m->watching && i < m->req.n; i++) {
        struct wq_watch *w = &m->watch[i];
        struct wq_key *k = wq_key_get(q, m->req.keys[i], m->req.key_lens[i]);
        if (k == NULL) {
            m->watching = true; /* so that do_unwatch() looks */
            do_unwatch(q, m);
            return -1;
        }
        w->key = k;
        w->prev = NULL;
        w->next = k->watchers;
        if (k->watchers != NULL)
            k->watchers->prev = w;
        k->watchers = w;
    }
    m->watching = true;
    wq_track(q, j);
    return 0;
}

void wq_multi_poke(struct waitq *q, struct wq_key *k)
{
    int64_t now = clock_mono_ms();

    for (struct wq_watch *w = k->watchers; w != NULL; w = w->next)
        wq_timer_set(q, &w->m->retry, now, false);
}

/* The next try of a parked m after a HELD whose hint was retry_ms: then,
 * at most WQ_RETRY_MAX_MS on; with no hint, after a pause that doubles. */
static void do_schedule(struct waitq *q, struct wq_multi *m, uint64_t retry_ms)
{
    uint64_t delay = retry_ms;

    if (delay == 0) {
        delay = m->backoff_ms > 0 ? m->backoff_ms : WQ_MULTI_UNKNOWN_MS;
        m->backoff_ms = delay * 2;
    } else {
        m->backoff_ms = 0;
    }
    if (delay > WQ_RETRY_MAX_MS)
        delay = WQ_RETRY_MAX_MS;
    wq_timer_set(q, &m->retry, clock_mono_ms() + (int64_t)delay, false);
}

/* Release the grant g of j, which nobody will receive; mutex dropped
 * around the call, j kept from disposal meanwhile. */
static void do_release(struct waitq *q, struct wq_job *j)
{
    struct lock_multi_grant g;
    enum backend_result r;

    j->running = true;
    pthread_mutex_unlock(&q->mu);
    r = backend_release_multi(q->be, &j->multi->req, &g);
    log_info("released a multi-key grant whose client was answered or gone "
             "before it arrived (%s)",
             backend_result_str(r));
    pthread_mutex_lock(&q->mu);
    j->running = false;
}

/* j was granted g (sent at base_us): answered if its client can still use
 * it, else released. Then j is done. */
static void do_granted(struct waitq *q,
                       struct wq_job *j,
                       const struct lock_multi_grant *g,
                       int64_t base_us,
                       struct done_list *done)
{
    if (j->w != NULL &&
        wq_grant_in_time(g->ttl_ms, g->valid_until_us, base_us)) {
        do_answer(q, j, BACKEND_OK, g, done);
    } else {
        do_answer(q, j, BACKEND_UNAVAILABLE, NULL, done); /* if still owed */
        do_release(q, j);
    }
    wq_dispose(q, j);
}

/* After a try of acquire job j answered r with g: answer and dispose of j,
 * or watch its keys for the next try. */
static void do_after_try(struct waitq *q,
                         struct wq_job *j,
                         enum backend_result r,
                         const struct lock_multi_grant *g,
                         int64_t base_us,
                         struct done_list *done)
{
    struct wq_multi *m = j->multi;
    bool retry = r == BACKEND_HELD || r == BACKEND_UNAVAILABLE;

    if (r == BACKEND_OK) {
        do_granted(q, j, g, base_us, done);
        return;
    }
    if (r == BACKEND_HELD) {
        j->tried = true;
        j->last_unavailable = false;
        memcpy(m->held, g->held, sizeof(m->held));
        m->held_until =
            g->retry_ms > 0 ? clock_mono_ms() + (int64_t)g->retry_ms : 0;
    } else {
        j->last_unavailable = true;
    }
    if (j->w == NULL || j->wait_ms <= 0 || !retry || j->wait_over ||
        q->stopping || do_watch(q, j) != 0) {
        if (j->w != NULL && (j->wait_ms <= 0 || !retry))
            do_answer(q, j, r, g, done); /* the store's answer as it is */
        else if (j->w != NULL && !j->wait_over && !q->stopping)
            do_answer(q, j, BACKEND_NO_MEMORY, NULL, done);
        else {
            if (j->w != NULL && q->stopping)
                j->w->shutting_down = true; /* draining: a 503 */
            wq_multi_answer_unserved(q, j, done);
        }
        wq_dispose(q, j);
        return;
    }
    if (r != BACKEND_HELD)
        wq_timer_set(q, &m->retry, clock_mono_ms() + WQ_UNAVAILABLE_MS, false);
    else if (m->again)
        wq_timer_set(q, &m->retry, clock_mono_ms(), false);
    else
        do_schedule(q, m, g->retry_ms);
}

/* One try of acquire job j, on a worker or (a store that never waits on
 * I/O) the timer thread. Mutex held; dropped around the store call. */
static void do_try(struct waitq *q, struct wq_job *j, struct done_list *done)
{
    struct wq_multi *m = j->multi;
    struct lock_multi_grant g;
    enum backend_result r = BACKEND_HELD;
    int64_t base_us = j->start_us;
    uint64_t epoch = atomic_load(&q->epoch);

    if (j->w == NULL || (j->wait_over && m->first_done)) {
        wq_multi_answer_unserved(q, j, done); /* if still owed */
        wq_dispose(q, j);
        return;
    }
    m->again = false;
    if (!do_local_held(q, &m->req, &g)) {
        if (m->first_done) /* a retry: the client counts from its send */
            base_us = clock_mono_us();
        j->running = true;
        pthread_mutex_unlock(&q->mu);
        r = backend_acquire_multi(q->be, &m->req, &g);
        pthread_mutex_lock(&q->mu);
        j->running = false;
    }
    if (!m->watching && atomic_load(&q->epoch) != epoch)
        m->again = true; /* a notification may have come before the watch */
    m->first_done = true;
    do_after_try(q, j, r, &g, base_us, done);
}

void wq_multi_fire(struct waitq *q, struct wq_multi *m, struct done_list *d)
{
    struct wq_job *j = m->job;

    if (j->running) {
        m->again = true; /* its try may have missed what came due */
    } else if (j->queued) {
        return;
    } else if (q->be->call_timeout_ms <= 0) {
        do_try(q, j, d); /* memory never blocks: no hand-off */
    } else {
        j->queued = true;
        wq_run_push(q, &j->task);
    }
}

void wq_multi_run_job(struct waitq *q, struct wq_job *j, struct done_list *d)
{
    struct lock_multi_grant g;
    enum backend_result r;

    if (j->cleanup == CLEAN_RELEASE_MULTI) {
        do_release(q, j);
        wq_free_job(q, j);
        return;
    }
    if (j->w == NULL) { /* answered before its turn: never sent */
        wq_free_job(q, j);
        return;
    }
    if (j->op == WQ_ACQUIRE_MULTI) {
        do_try(q, j, d);
        return;
    }
    j->running = true;
    pthread_mutex_unlock(&q->mu);
    r = call_multi(q->be, j->op, &j->multi->req, &g);
    pthread_mutex_lock(&q->mu);
    j->running = false;
    if (r == BACKEND_OK && j->op == WQ_RENEW_MULTI &&
        !wq_grant_in_time(g.ttl_ms, g.valid_until_us, j->start_us))
        do_answer(q, j, BACKEND_UNAVAILABLE, NULL, d);
    else
        do_answer(q, j, r, &g, d);
    wq_free_job(q, j);
}

/* j could not wait (draining, or out of memory): answer it now. */
static void do_refuse(struct waitq *q, struct wq_job *j, struct done_list *done)
{
    bool stopping = atomic_load(&q->stopping);

    j->w->shutting_down = stopping;
    do_answer(q, j, stopping ? BACKEND_UNAVAILABLE : BACKEND_NO_MEMORY, NULL,
              done);
    wq_dispose(q, j);
}

/* A waiting acquire on a store that never waits on I/O: try on this
 * thread; watch the keys only if held. */
static enum wq_start start_inline(struct waitq *q,
                                  struct wq_waiter *w,
                                  struct wq_job *j,
                                  int64_t start)
{
    struct wq_multi *m = j->multi;
    struct done_list done = { 0 };
    struct lock_multi_grant g;
    uint64_t epoch = atomic_load(&q->epoch);
    enum backend_result r = BACKEND_HELD;
    bool held;

    pthread_mutex_lock(&q->mu);
    held = do_local_held(q, &m->req, &g);
    pthread_mutex_unlock(&q->mu);
    if (!held)
        r = backend_acquire_multi(q->be, &m->req, &g);
    if (r != BACKEND_HELD) {
        w->result = r;
        *w->mgrant = g;
        wq_job_mem_free(j); /* never linked anywhere */
        return WQ_DONE;
    }
    w->suspend(w);
    pthread_mutex_lock(&q->mu);
    j->w = w;
    w->job = j;
    m->first_done = true;
    /* a notification may have come between the try and the watch */
    m->again = atomic_load(&q->epoch) != epoch;
    if (q->stopping ||
        wq_timer_set(q, &j->bound, start + w->wait_ms, true) != 0)
        do_refuse(q, j, &done);
    else
        do_after_try(q, j, r, &g, j->start_us, &done);
    pthread_mutex_unlock(&q->mu);
    wq_done_wake(&done);
    return WQ_PARKED;
}

/* A request on a network store: a worker makes its calls; this thread
 * never waits. j is answered by its bound at the latest. */
static enum wq_start start_network(struct waitq *q,
                                   struct wq_waiter *w,
                                   struct wq_job *j,
                                   int64_t start,
                                   int64_t bound)
{
    bool waits = w->op == WQ_ACQUIRE_MULTI && w->wait_ms > 0;
    struct done_list done = { 0 };

    w->suspend(w);
    pthread_mutex_lock(&q->mu);
    j->w = w;
    w->job = j;
    if (q->stopping || wq_timer_set(q, &j->bound, bound, true) != 0 ||
        (waits &&
         wq_timer_set(q, &j->wait_end, start + w->wait_ms, true) != 0)) {
        do_refuse(q, j, &done);
    } else {
        j->queued = true;
        wq_run_push(q, &j->task);
    }
    pthread_mutex_unlock(&q->mu);
    wq_done_wake(&done);
    return WQ_PARKED;
}

enum wq_start wq_multi_start(struct waitq *q, struct wq_waiter *w)
{
    bool inline_calls = q->be->call_timeout_ms <= 0;
    bool waits = w->op == WQ_ACQUIRE_MULTI && w->wait_ms > 0;
    struct wq_job *j;
    int64_t now, start, bound;

    memset(w->mgrant, 0, sizeof(*w->mgrant));
    if (inline_calls && !waits)
        return run_inline(q, w);
    j = multi_job_new(w);
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
        return start_inline(q, w, j, start);
    if (start + q->be->call_timeout_ms > bound)
        bound = start + q->be->call_timeout_ms;
    return start_network(q, w, j, start, bound);
}

void waitq_orphan_multi(struct waitq *q, const struct lock_multi_req *req)
{
    struct wq_waiter w = { .op = WQ_RELEASE_MULTI, .mreq = *req };
    struct lock_multi_grant g;

    if (q->be->call_timeout_ms <= 0) {
        enum backend_result r = backend_release_multi(q->be, req, &g);
        log_info("released a multi-key grant whose client left before the "
                 "answer (%s)",
                 backend_result_str(r));
        return;
    }
    wq_push_cleanup(q, multi_job_new(&w), CLEAN_RELEASE_MULTI);
}
