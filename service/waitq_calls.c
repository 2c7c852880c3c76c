/*
 * service/waitq_calls.c - the wait queue's store calls: the worker threads,
 * a job's first call and a key's retries, and what each answer means (a
 * grant answered if it still has time left, else released; a HELD that
 * parks the job or answers 409; the cleanup owed by jobs nobody waits
 * for). Apart from waitq.c because this is the side that drops the mutex
 * around a store call and picks up what changed meanwhile.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "service/waitq_impl.h"

/* A HELD answer for k seen at now: remember when the holder's TTL ends
 * (unless the key is free and only others' places are ahead) and retry
 * then, or within q->retry_max_ms, whichever is first. */
void wq_schedule_held(struct waitq *q,
                      struct wq_key *k,
                      int64_t now,
                      const struct lock_grant *g)
{
    uint64_t delay = g->retry_ms;

    if (!g->behind)
        k->held_until = now + (int64_t)g->retry_ms;
    if (delay == 0)
        delay = 1;
    else if (delay > q->retry_max_ms)
        delay = q->retry_max_ms;
    wq_timer_set(q, &k->retry, now + (int64_t)delay, false);
}

/* The store call owed by a job nobody will be answered for; the mutex is
 * dropped around it. Then the job is freed. */
static void do_cleanup(struct waitq *q, struct wq_job *j, enum cleanup c)
{
    pthread_mutex_unlock(&q->mu);
    if (c == CLEAN_RELEASE) {
        /* a new grant, held once: give it all back */
        struct lock_req req = j->req;
        struct lock_grant g;
        enum backend_result r;

        req.all = true;
        req.waiter = NULL;
        r = backend_release(q->be, &req, &g);
        log_info("released a grant whose client was answered or gone "
                 "before it arrived (%s)",
                 backend_result_str(r));
    } else if (c == CLEAN_CANCEL && j->lw.be_data != NULL) {
        backend_cancel_wait(q->be, j->req.key, j->req.key_len, &j->lw);
    }
    pthread_mutex_lock(&q->mu);
    wq_free_job(q, j);
}

/*
 * Whether a grant (or renewal) of ttl_ms, valid until valid_until_us, is of
 * use to its client. A client counts the TTL from when it sent the request
 * (since base_us: the request's arrival, or for a waiter's retry the
 * retry's store call), so a grant with no more left than the time since
 * then, plus the slack for the request's and the answer's way
 * (WQ_ANSWER_SLACK_US), has nothing left by the client's count, and may be
 * gone already: false (logged), to be answered 503 and released.
 */
bool wq_grant_in_time(uint64_t ttl_ms, int64_t valid_until_us, int64_t base_us)
{
    struct lock_grant g = { .ttl_ms = ttl_ms,
                            .valid_until_us = valid_until_us };
    int64_t now = clock_mono_us();
    uint64_t left = backend_grant_left_ms(&g, now);
    int64_t slack = (int64_t)ttl_ms * 100; /* a tenth, in us */

    if (slack > WQ_ANSWER_SLACK_US)
        slack = WQ_ANSWER_SLACK_US;
    if (left == 0 || (int64_t)left * 1000 <= now - base_us + slack) {
        log_warn("waitq: the store answered too late (%lld ms after the "
                 "call, %llu ms of the lock left): answering 503",
                 (long long)((now - base_us) / 1000), (unsigned long long)left);
        return false;
    }
    return true;
}

/* Answer the grant g for j if it is of use (see wq_grant_in_time()), else
 * 503; false then, so that the caller releases a grant nobody will hold. */
static bool do_answer_grant(struct waitq *q,
                            struct wq_job *j,
                            const struct lock_grant *g,
                            int64_t base_us,
                            struct done_list *done)
{
    if (!wq_grant_in_time(g->ttl_ms, g->valid_until_us, base_us)) {
        wq_answer(q, j, BACKEND_UNAVAILABLE, NULL, NULL, done);
        return false;
    }
    wq_answer(q, j, BACKEND_OK, g, NULL, done);
    return true;
}

struct lock_list *wq_list_new(uint32_t limit)
{
    struct lock_list *l;

    if (limit == 0 || limit > LOCK_LIST_MAX)
        limit = 1; /* the wrapper answers INVALID for the request */
    l = calloc(1, sizeof(*l) + (size_t)limit * sizeof(struct lock_entry));
    if (l != NULL)
        l->entries = (struct lock_entry *)(void *)(l + 1);
    return l;
}

enum backend_result wq_call_store(struct backend *be,
                                  enum wq_op op,
                                  struct lock_req *req,
                                  struct lock_grant *g,
                                  struct lock_info *info,
                                  int64_t *count,
                                  const struct lock_list_req *lreq,
                                  struct lock_list *list)
{
    memset(g, 0, sizeof(*g));
    switch (op) {
    case WQ_LIST:
        if (list == NULL)
            return BACKEND_NO_MEMORY;
        return backend_list(be, lreq, list);
    case WQ_FORCE_RELEASE:
        return backend_force_release(be, req->key, req->key_len, info);
    case WQ_ACQUIRE:
        return backend_acquire(be, req, g);
    case WQ_RENEW:
        return backend_renew(be, req, g);
    case WQ_RELEASE:
        return backend_release(be, req, g);
    case WQ_INSPECT:
        return backend_inspect(be, req->key, req->key_len, info);
    case WQ_PING:
        return backend_ping(be);
    default:
        *count = backend_held_count(be);
        return BACKEND_OK;
    }
}

/*
 * After the first acquire for j (not in a FIFO yet) answered r: answer and
 * dispose of j, or park it for a retry.
 */
static void do_after_first(struct waitq *q,
                           struct wq_job *j,
                           enum backend_result r,
                           const struct lock_grant *g,
                           uint64_t epoch,
                           struct done_list *done)
{
    int64_t now = clock_mono_ms();
    struct wq_key *k;

    if (r == BACKEND_OK) {
        if (j->w == NULL) {
            do_cleanup(q, j, CLEAN_RELEASE);
            return;
        }
        if (do_answer_grant(q, j, g, j->start_us, done))
            wq_free_job(q, j);
        else
            do_cleanup(q, j, CLEAN_RELEASE);
        return;
    }
    if (r == BACKEND_HELD) {
        j->tried = true;
        j->last_unavailable = false;
        if (!g->behind)
            j->held_until = now + (int64_t)g->retry_ms;
    } else {
        j->last_unavailable = true;
    }
    if (j->w == NULL || j->wait_ms <= 0 || j->wait_over || q->stopping ||
        (r != BACKEND_HELD && r != BACKEND_UNAVAILABLE)) {
        if (j->w != NULL && r == BACKEND_HELD) {
            struct lock_grant h = *g;
            wq_answer(q, j, r, &h, NULL, done);
        } else if (j->w != NULL && r != BACKEND_UNAVAILABLE) {
            wq_answer(q, j, r, NULL, NULL, done);
        } else {
            wq_answer_unserved(q, j, done);
        }
        wq_dispose(q, j);
        return;
    }
    k = wq_key_get(q, j->req.key, j->req.key_len);
    if (k == NULL) {
        wq_answer(q, j, BACKEND_NO_MEMORY, NULL, NULL, done);
        wq_dispose(q, j);
        return;
    }
    wq_park(q, j, k);
    if (r != BACKEND_HELD)
        wq_timer_set(q, &k->retry, now + WQ_UNAVAILABLE_MS, false);
    else if (atomic_load(&q->epoch) != epoch)
        wq_timer_set(q, &k->retry, now, false); /* a notify came meanwhile */
    else if (k->head == j)
        wq_schedule_held(q, k, now, g);
}

/* What a job's first call answered (r, g, info, count) means: the job
 * answered and freed, or parked. Mutex held. */
static void do_after_call(struct waitq *q,
                          struct wq_job *j,
                          enum backend_result r,
                          const struct lock_grant *g,
                          struct lock_info *info,
                          int64_t count,
                          uint64_t epoch,
                          struct done_list *done)
{
    j->running = false;
    if (j->op == WQ_LIST && j->w != NULL) { /* handed over */
        j->w->list = j->listing->list;
        j->listing->list = NULL;
    }
    if (j->op == WQ_ACQUIRE) {
        do_after_first(q, j, r, g, epoch, done);
        return;
    }
    if (j->op == WQ_COUNT && j->w != NULL)
        j->w->count = count;
    if (r == BACKEND_OK && j->op == WQ_RENEW)
        do_answer_grant(q, j, g, j->start_us, done);
    else
        wq_answer(q, j, r, g, info, done);
    wq_free_job(q, j);
}

/* A worker's first try of a job, or one direct call. Mutex held. */
static void
do_run_job(struct waitq *q, struct wq_job *j, struct done_list *done)
{
    struct lock_grant g;
    struct lock_info info = { 0 };
    int64_t count = -1;
    enum backend_result r;
    uint64_t epoch;

    if (j->multi != NULL) {
        wq_multi_run_job(q, j, done);
        return;
    }
    if (j->cleanup != CLEAN_NONE) {
        do_cleanup(q, j, j->cleanup);
        return;
    }
    if (j->w == NULL) { /* answered before its turn: never sent */
        wq_free_job(q, j);
        return;
    }
    if (j->op == WQ_ACQUIRE && j->wait_ms > 0) {
        int64_t left = j->wait_until - clock_mono_ms();
        j->lw.deadline_ms = clock_wall_ms() + (left > 0 ? left : 0);
        j->req.waiter = &j->lw;
    }
    j->running = true;
    epoch = atomic_load(&q->epoch);
    pthread_mutex_unlock(&q->mu);
    r = wq_call_store(q->be, j->op, &j->req, &g, &info, &count,
                      j->listing != NULL ? &j->listing->lreq : NULL,
                      j->listing != NULL ? j->listing->list : NULL);
    pthread_mutex_lock(&q->mu);
    do_after_call(q, j, r, &g, &info, count, epoch, done);
}

/*
 * Batches. The first calls of single-key acquires, renews and releases
 * (batchable()) go to a store with backend_batches() in batches: one
 * worker at a time, the batcher, takes every such job waiting (up to
 * BACKEND_BATCH_MAX) and makes one backend_batch() call for them, and
 * again for those that came meanwhile, until none is left (or until other
 * work waits with every other worker busy: it then hands its jobs back to
 * the run queue, behind that work, and takes that work). A worker that
 * pops such a job while another is the batcher leaves it in q->pend for
 * the batcher and goes on; the other workers make the other calls (key
 * retries, multi-key calls, lists, cleanups). One batch in flight at a
 * time, so the requests that arrive during one round trip go together in
 * the next: on Redis one write and one read for all of them
 * (backends/redis/batch.c), where each used to cost a round trip and a
 * worker's sleep and wake-up. Mutex held; dropped around each batch.
 */
static bool batchable(const struct waitq *q, const struct wq_job *j)
{
    return j->multi == NULL && j->cleanup == CLEAN_NONE && j->w != NULL &&
           (j->op == WQ_ACQUIRE || j->op == WQ_RENEW || j->op == WQ_RELEASE) &&
           !(q->workers_stop && clock_mono_ms() > q->stop_by);
}

/* The next jobs for the batcher: q->pend first, then the run queue's
 * head while it is batchable. A pending job that is no longer batchable
 * (answered meanwhile) goes back to the run queue for a worker. */
static size_t batch_gather(struct waitq *q, struct wq_job **jobs, size_t n)
{
    while (n < BACKEND_BATCH_MAX && q->pend_head != NULL) {
        struct wq_job *j = CONTAINER_OF(q->pend_head, struct wq_job, task);

        q->pend_head = j->task.next;
        if (q->pend_head == NULL)
            q->pend_tail = NULL;
        j->task.next = NULL;
        if (batchable(q, j)) {
            j->queued = false;
            jobs[n++] = j;
        } else {
            wq_run_push(q, &j->task); /* still queued */
        }
    }
    while (n < BACKEND_BATCH_MAX && q->run_head != NULL &&
           !q->run_head->is_key) {
        struct wq_job *j = CONTAINER_OF(q->run_head, struct wq_job, task);
        if (!batchable(q, j))
            break;
        wq_run_pop(q);
        j->queued = false;
        jobs[n++] = j;
    }
    return n;
}

/* One batch of n jobs: their calls made, each answered or parked. */
static void batch_run(struct waitq *q,
                      struct wq_job **jobs,
                      size_t n,
                      struct done_list *done)
{
    static const enum backend_op ops[] = {
        [WQ_ACQUIRE] = BACKEND_OP_ACQUIRE,
        [WQ_RENEW] = BACKEND_OP_RENEW,
        [WQ_RELEASE] = BACKEND_OP_RELEASE,
    };
    struct backend_call calls[BACKEND_BATCH_MAX];
    struct lock_grant grants[BACKEND_BATCH_MAX];
    uint64_t epoch;

    for (size_t i = 0; i < n; i++) {
        struct wq_job *j = jobs[i];

        if (j->op == WQ_ACQUIRE && j->wait_ms > 0) {
            int64_t left = j->wait_until - clock_mono_ms();
            j->lw.deadline_ms = clock_wall_ms() + (left > 0 ? left : 0);
            j->req.waiter = &j->lw;
        }
        j->running = true;
        calls[i].op = ops[j->op];
        calls[i].req = &j->req;
        calls[i].out = &grants[i];
    }
    epoch = atomic_load(&q->epoch);
    pthread_mutex_unlock(&q->mu);
    backend_batch(q->be, calls, n);
    pthread_mutex_lock(&q->mu);
    for (size_t i = 0; i < n; i++)
        do_after_call(q, jobs[i], calls[i].result, &grants[i], NULL, -1, epoch,
                      done);
}

bool wq_batch_take(struct waitq *q, struct wq_job *j)
{
    if (!q->batching || !batchable(q, j))
        return false;
    j->queued = true; /* the batcher's now; no worker woken */
    j->task.next = NULL;
    if (q->pend_tail != NULL)
        q->pend_tail->next = &j->task;
    else
        q->pend_head = &j->task;
    q->pend_tail = &j->task;
    return true;
}

/* Worker: j (popped, batchable) goes in a batch: made by this worker,
 * which becomes the batcher, or left for the batcher there is. */
static void do_batch(struct waitq *q, struct wq_job *j, struct done_list *done)
{
    struct wq_job *jobs[BACKEND_BATCH_MAX];
    size_t n = 1;

    if (wq_batch_take(q, j))
        return;
    q->batching = true;
    jobs[0] = j;
    for (;;) {
        n = batch_gather(q, jobs, n);
        if (n == 0)
            break;
        batch_run(q, jobs, n, done);
        n = 0;
        if (done->head != NULL) { /* answer these before the next batch */
            pthread_mutex_unlock(&q->mu);
            wq_done_wake(done);
            pthread_mutex_lock(&q->mu);
        }
        if (q->run_head != NULL) {
            /* other work waits and every other worker is busy: hand the
             * pending jobs back behind it, so that a flood of batchable
             * requests never starves a key's retries (with one worker,
             * this one is the only one) */
            while (q->pend_head != NULL) {
                struct wq_task *t = q->pend_head;
                q->pend_head = t->next;
                wq_run_push(q, t); /* still queued */
            }
            q->pend_tail = NULL;
            break;
        }
    }
    q->batching = false;
}

/* k's waiter j was granted g at now: out of the FIFO, answered (or the
 * grant released if nobody will have it), and the next waiter's retry set
 * for when the new holder's TTL is due. */
static void do_key_granted(struct waitq *q,
                           struct wq_key *k,
                           struct wq_job *j,
                           const struct lock_grant *g,
                           int64_t now,
                           struct done_list *done)
{
    wq_unpark(q, j, false); /* the next waiter's turn comes below */
    if (j->w == NULL) {
        do_cleanup(q, j, CLEAN_RELEASE);
    } else if (do_answer_grant(q, j, g,
                               g->valid_until_us - (int64_t)g->ttl_ms * 1000,
                               done)) {
        wq_free_job(q, j);
    } else {
        do_cleanup(q, j, CLEAN_RELEASE);
    }
    if (k->head != NULL) {
        /* the new holder may never release: the next waiter
         * tries again when its TTL is due */
        k->held_until = now + (int64_t)g->ttl_ms;
        wq_timer_set(q, &k->retry,
                     now + (int64_t)(g->ttl_ms < q->retry_max_ms
                                         ? g->ttl_ms
                                         : q->retry_max_ms),
                     false);
    }
}

/*
 * Retry key k's waiters in order: the first is tried; on a queueing store
 * a waiter that is merely behind another in the store's queue (possible
 * when two requests registered in one order and parked in the other)
 * passes the turn to the next. Mutex held; dropped around each call.
 */
void wq_run_key(struct waitq *q, struct wq_key *k, struct done_list *done)
{
    struct wq_job *j = k->head;

    k->running = true;
    k->again = false;
    while (j != NULL) {
        struct lock_grant g;
        struct lock_info info;
        int64_t count;
        enum backend_result r;
        int64_t now;

        j->req.waiter = &j->lw;
        if (j->lw.id == 0)
            j->lw.id = ++q->next_id;
        if (j->lw.deadline_ms == 0)
            j->lw.deadline_ms =
                clock_wall_ms() + (j->wait_until - clock_mono_ms());
        j->running = true;
        pthread_mutex_unlock(&q->mu);
        r = wq_call_store(q->be, WQ_ACQUIRE, &j->req, &g, &info, &count, NULL,
                          NULL);
        pthread_mutex_lock(&q->mu);
        j->running = false;
        now = clock_mono_ms();
        if (r == BACKEND_OK) {
            do_key_granted(q, k, j, &g, now, done);
            break;
        }
        if (r == BACKEND_HELD) {
            struct wq_job *next = j->next;
            j->tried = true;
            j->last_unavailable = false;
            if (!g.behind)
                j->held_until = now + (int64_t)g.retry_ms;
            wq_schedule_held(q, k, now, &g);
            if (j->w == NULL || j->wait_over) {
                wq_answer_unserved(q, j, done);
                wq_dispose(q, j);
            }
            if (g.behind && next != NULL && next->parked) {
                j = next;
                continue;
            }
            break;
        }
        if (r == BACKEND_LIMIT_MISMATCH || r == BACKEND_IDEM_CONFLICT) {
            /* a refusal, not a wait: answered now, the place given up,
             * and the next waiter tried */
            wq_answer(q, j, r, NULL, NULL, done);
            wq_dispose(q, j);
            k->again = true;
            break;
        }
        /* unavailable or out of memory: keep the place, retry soon; the
         * deadline answers 503 if it never comes back */
        j->last_unavailable = true;
        wq_timer_set(q, &k->retry, now + WQ_UNAVAILABLE_MS, false);
        if (j->w == NULL || j->wait_over) {
            wq_answer_unserved(q, j, done);
            wq_dispose(q, j);
        }
        break;
    }
    k->running = false;
    if (k->again && k->head != NULL)
        wq_timer_set(q, &k->retry, clock_mono_ms(), false);
    wq_key_free_if_idle(q, k);
}

void *wq_worker_main(void *arg)
{
    struct waitq *q = arg;
    struct done_list done = { 0 };

    pthread_mutex_lock(&q->mu);
    for (;;) {
        struct wq_task *t = wq_run_pop(q);
        if (t == NULL) {
            if (q->workers_stop)
                break;
            pthread_cond_wait(&q->work, &q->mu);
            continue;
        }
        if (t->is_key) {
            struct wq_key *k = CONTAINER_OF(t, struct wq_key, task);
            k->queued = false;
            if (q->workers_stop && clock_mono_ms() > q->stop_by)
                wq_key_free_if_idle(q, k);
            else
                wq_run_key(q, k, &done);
        } else {
            struct wq_job *j = CONTAINER_OF(t, struct wq_job, task);
            j->queued = false;
            if (q->workers_stop && clock_mono_ms() > q->stop_by && j->w == NULL)
                wq_free_job(q, j); /* out of time: the store's TTLs end it */
            else if (q->batches && batchable(q, j))
                do_batch(q, j, &done);
            else
                do_run_job(q, j, &done);
        }
        if (done.head != NULL) {
            pthread_mutex_unlock(&q->mu);
            wq_done_wake(&done);
            pthread_mutex_lock(&q->mu);
        }
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}
