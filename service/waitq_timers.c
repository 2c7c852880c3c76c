/*
 * service/waitq_timers.c - the wait queue's timers and its timer thread: a
 * min-heap of timers (wait deadlines, answer bounds, per-key retries), and
 * the thread that sleeps in epoll_wait() until the first is due or a
 * waiter's socket hangs up, then answers or hands work to the workers.
 * Apart from waitq.c because it is the one part that runs on its own
 * clock; it never calls the store.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "service/waitq_impl.h"

static _Thread_local bool on_timer_thread; /* no kick needed there */

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

void wq_timer_remove(struct waitq *q, struct wq_timer *t)
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
int wq_timer_set(struct waitq *q, struct wq_timer *t, int64_t at, bool force)
{
    if (t->idx != SIZE_MAX) {
        if (!force && t->at <= at)
            return 0;
        t->at = at;
        heap_down(q, t->idx);
        heap_up(q, t->idx);
        if (t->idx == 0 && !on_timer_thread && at < q->sleep_until)
            wq_kick(q); /* the timer thread sleeps past it */
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
    if (t->idx == 0 && !on_timer_thread && at < q->sleep_until)
        wq_kick(q);
    return 0;
}

void wq_kick(struct waitq *q)
{
    uint64_t one = 1;

    /* a full counter already means "wake up" */
    if (write(q->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        log_warn("waitq: eventfd write failed: %s", strerror(errno));
}

void wq_free_graveyard(struct waitq *q)
{
    struct wq_task *t = q->graveyard, *next;

    q->graveyard = NULL;
    for (; t != NULL; t = next) {
        next = t->next;
        wq_job_mem_free(CONTAINER_OF(t, struct wq_job, task));
    }
}

static void do_fire(struct waitq *q, struct wq_timer *t, struct done_list *done)
{
    if (t->kind == TIMER_RETRY) {
        struct wq_key *k = CONTAINER_OF(t, struct wq_key, retry);
        if (k->running) {
            k->again = true;
        } else if (!k->queued && k->head != NULL &&
                   q->be->call_timeout_ms <= 0) {
            wq_run_key(q, k, done); /* memory never blocks: no hand-off */
        } else if (!k->queued && k->head != NULL) {
            k->queued = true;
            wq_run_push(q, &k->task);
        } else {
            wq_key_free_if_idle(q, k);
        }
        return;
    }
    if (t->kind == TIMER_MRETRY) {
        wq_multi_fire(q, CONTAINER_OF(t, struct wq_multi, retry), done);
        return;
    }
    struct wq_job *j = t->kind == TIMER_WAIT_END
                           ? CONTAINER_OF(t, struct wq_job, wait_end)
                           : CONTAINER_OF(t, struct wq_job, bound);
    j->wait_over = true;
    if (t->kind == TIMER_WAIT_END && (j->running || j->queued))
        return; /* its call answers it, by its bound at the latest */
    wq_answer_unserved(q, j, done);
    wq_dispose(q, j);
}

static void do_fire_timers(struct waitq *q, struct done_list *done)
{
    int64_t now = clock_mono_ms();

    while (q->nheap > 0 && q->heap[0]->at <= now) {
        struct wq_timer *t = q->heap[0];
        wq_timer_remove(q, t);
        do_fire(q, t, done);
    }
}

void wq_answer_all(struct waitq *q, struct done_list *done)
{
    /* every job still to be answered has its bound in the heap */
    size_t i = 0;

    while (i < q->nheap) {
        struct wq_timer *t = q->heap[i];
        if (t->kind != TIMER_BOUND) {
            i++;
            continue;
        }
        struct wq_job *j = CONTAINER_OF(t, struct wq_job, bound);
        if (j->w != NULL)
            j->w->shutting_down = true;
        j->wait_over = true;
        wq_answer_unserved(q, j, done);
        wq_dispose(q, j);
        i = 0; /* the heap changed under us */
    }
}

void *wq_timer_main(void *arg)
{
    struct waitq *q = arg;
    struct epoll_event ev[WQ_EVENTS];
    struct done_list done = { 0 };

    on_timer_thread = true;
    pthread_mutex_lock(&q->mu);
    while (!q->exiting) {
        int timeout = -1, n;

        if (q->stopping && !q->drained_all) {
            wq_answer_all(q, &done);
            pthread_mutex_unlock(&q->mu);
            wq_done_wake(&done); /* answered before waitq_shutdown() returns */
            pthread_mutex_lock(&q->mu);
            q->drained_all = true;
            pthread_cond_broadcast(&q->drained);
        }
        /* no event of the last epoll_wait() names these any more */
        wq_free_graveyard(q);
        {
            /* a timer set before this wakes up needs no kick */
            int64_t now = clock_mono_ms(), until = now + WQ_IDLE_MS;
            if (q->nheap > 0 && q->heap[0]->at < until)
                until = q->heap[0]->at;
            timeout = until <= now ? 0 : (int)(until - now);
            q->sleep_until = until;
        }
        pthread_mutex_unlock(&q->mu);
        wq_done_wake(&done);
        n = epoll_wait(q->epfd, ev, WQ_EVENTS, timeout);
        pthread_mutex_lock(&q->mu);
        q->sleep_until = INT64_MIN;
        for (int i = 0; i < n; i++) {
            if (ev[i].data.ptr == NULL) {
                uint64_t v;
                if (read(q->evfd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                    log_warn("waitq: eventfd read failed: %s", strerror(errno));
                continue;
            }
            /* the client hung up; a watched job is still unanswered (the
             * answer unwatches it under this mutex) */
            struct wq_job *j = ev[i].data.ptr;
            if (j->w == NULL)
                continue;
            j->w->client_gone = true;
            j->wait_over = true;
            wq_answer_unserved(q, j, &done);
            wq_dispose(q, j);
        }
        do_fire_timers(q, &done);
    }
    pthread_mutex_unlock(&q->mu);
    wq_done_wake(&done);
    return NULL;
}
