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

#define WQ_RETRY_MAX_MS                                            \
    2000                      /* retry at least this often: a lost \
                                 notification costs at most this */
#define WQ_UNAVAILABLE_MS 200 /* retry pace while the backend is down */
#define WQ_EVENTS         64
#define WQ_IDLE_MS        1000 /* the timer thread looks at least this often */
#define WQ_WORKERS_MAX    1024
/* What a grant must have left beyond the time since its request arrived:
 * the answer's way out through the HTTP stack and the network, and the
 * request's way in before lockd saw it. A tenth of the TTL, at most this. */
#define WQ_ANSWER_SLACK_US 20000

enum timer_kind {
    TIMER_WAIT_END, /* a job's wait runs out */
    TIMER_BOUND,    /* a job must be answered now */
    TIMER_RETRY,    /* a key's waiters are tried again */
};

enum cleanup {
    CLEAN_NONE = 0,
    CLEAN_CANCEL,  /* give up the job's place in the store's queue */
    CLEAN_RELEASE, /* release a grant nobody received */
};

#define CONTAINER_OF(p, type, member) \
    ((type *)(void *)((char *)(p)-offsetof(type, member)))

struct wq_task { /* an entry of the run queue: a job or a key */
    struct wq_task *next;
    bool is_key;
};

struct wq_key {
    struct keytab_entry ke; /* ke.key points at key[] */
    struct wq_timer retry;
    struct wq_task task;
    bool queued;  /* task is in the run queue */
    bool running; /* a worker is trying its waiters */
    bool again;   /* a retry was due while running: once more at once */
    struct wq_job *head, *tail;
    int64_t held_until; /* monotonic ms when the holder's TTL ends, as
                           last seen; for retry_after_ms */
    char key[];
};

struct wq_job {
    struct wq_waiter *w; /* NULL once answered */
    enum wq_op op;
    struct lock_req req; /* strings in text[] */
    struct lock_waiter lw;
    int64_t wait_ms;
    int64_t wait_until; /* monotonic ms when a waiting acquire's wait
                           runs out */
    int64_t held_until; /* monotonic ms, last HELD seen; 0: none */
    int64_t start_us;   /* monotonic us when the request arrived */
    struct wq_key *key; /* while parked */
    struct wq_job *prev, *next;
    struct wq_task task;
    struct wq_timer wait_end, bound;
    int fd;         /* the client's socket, -1 when not watched */
    bool watched;   /* was ever in the epoll set: freed by the timer
                       thread, which may hold it from an epoll_wait() */
    bool queued;    /* task is in the run queue */
    bool running;   /* a worker is calling the store for it */
    bool parked;    /* in key's FIFO */
    bool counted;   /* in q->count and the waiters gauge */
    bool wait_over; /* its wait ran out: no more parking */
    bool tried;     /* the store answered HELD at least once */
    bool last_unavailable;
    enum cleanup cleanup;
    char text[];
};

struct waitq {
    struct backend *be;
    pthread_t thread;
    pthread_t *workers;
    unsigned nworkers;
    int epfd;
    int evfd;
    _Atomic uint64_t epoch; /* bumped by every notify */
    _Atomic int64_t count;
    pthread_mutex_t mu;     /* guards everything below */
    pthread_cond_t drained; /* signalled when shutdown has answered all */
    pthread_cond_t work;    /* the run queue has tasks, or workers stop */
    struct keytab keys;
    struct wq_timer **heap;
    size_t nheap, capheap;
    struct wq_task *run_head, *run_tail;
    struct wq_task *graveyard; /* jobs to free before the next epoll_wait */
    _Atomic bool stopping;     /* shutdown asked: answer everyone; set under
                                  mu, read without it by waitq_start() */
    bool drained_all;
    bool workers_stop;   /* waitq_stop(): workers finish and leave */
    int64_t stop_by;     /* monotonic ms: owed calls after this are dropped */
    bool exiting;        /* waitq_free(): the thread ends */
    int64_t sleep_until; /* monotonic ms the timer thread sleeps until;
                            INT64_MIN while it is awake (it looks at the
                            heap before it sleeps again) */
    uint64_t next_id;
};

static _Thread_local bool on_timer_thread; /* no kick needed there */

static void kick(struct waitq *q);

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
        if (t->idx == 0 && !on_timer_thread && at < q->sleep_until)
            kick(q); /* the timer thread sleeps past it */
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
        kick(q);
    return 0;
}

static void kick(struct waitq *q)
{
    uint64_t one = 1;

    /* a full counter already means "wake up" */
    if (write(q->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        log_warn("waitq: eventfd write failed: %s", strerror(errno));
}

static void do_run_push(struct waitq *q, struct wq_task *t)
{
    t->next = NULL;
    if (q->run_tail != NULL)
        q->run_tail->next = t;
    else
        q->run_head = t;
    q->run_tail = t;
    pthread_cond_signal(&q->work);
}

static struct wq_task *do_run_pop(struct waitq *q)
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
    k->task.is_key = true;
    keytab_insert(&q->keys, &k->ke);
    return k;
}

static void do_key_free_if_idle(struct waitq *q, struct wq_key *k)
{
    if (k->head != NULL || k->running || k->queued)
        return;
    do_timer_remove(q, &k->retry);
    keytab_remove(&q->keys, &k->ke);
    free(k);
}

/* A job with copies of w's strings; NULL if out of memory. */
static struct wq_job *job_new(const struct wq_waiter *w)
{
    size_t kl = w->req.key_len;
    size_t tl = w->req.token != NULL ? strlen(w->req.token) : 0;
    size_t ol = w->req.owner != NULL ? strlen(w->req.owner) : 0;
    struct wq_job *j = calloc(1, sizeof(*j) + kl + tl + ol + 3);
    char *p;

    if (j == NULL)
        return NULL;
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
    }
    j->req.ttl_ms = w->req.ttl_ms;
    j->op = w->op;
    j->wait_ms = w->op == WQ_ACQUIRE ? w->wait_ms : 0;
    j->fd = -1;
    j->wait_end.idx = j->bound.idx = SIZE_MAX;
    j->wait_end.kind = TIMER_WAIT_END;
    j->bound.kind = TIMER_BOUND;
    return j;
}

/* Free j, or leave it to the timer thread if an epoll_wait() that began
 * before j was unwatched may still return it. */
static void do_free_job(struct waitq *q, struct wq_job *j)
{
    if (!j->watched) {
        free(j);
        return;
    }
    j->task.next = q->graveyard;
    q->graveyard = &j->task;
}

static void do_free_graveyard(struct waitq *q)
{
    struct wq_task *t = q->graveyard, *next;

    q->graveyard = NULL;
    for (; t != NULL; t = next) {
        next = t->next;
        free(CONTAINER_OF(t, struct wq_job, task));
    }
}

/* Waiters whose answer is ready, woken once the mutex is dropped. */
struct done_list {
    struct wq_waiter *head;
};

static void done_wake(struct done_list *d)
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
static void do_answer(struct waitq *q,
                      struct wq_job *j,
                      enum backend_result r,
                      const struct lock_grant *g,
                      const struct lock_info *info,
                      struct done_list *done)
{
    struct wq_waiter *w = j->w;

    if (w == NULL)
        return;
    if (j->fd >= 0) {
        epoll_ctl(q->epfd, EPOLL_CTL_DEL, j->fd, NULL);
        j->fd = -1;
    }
    do_timer_remove(q, &j->wait_end);
    do_timer_remove(q, &j->bound);
    if (j->counted) {
        j->counted = false;
        atomic_fetch_sub_explicit(&q->count, 1, memory_order_relaxed);
        metrics_waiters_add(-1);
    }
    w->result = r;
    if (g != NULL)
        w->grant = *g;
    if (info != NULL)
        w->info = *info;
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
static void
do_answer_unserved(struct waitq *q, struct wq_job *j, struct done_list *done)
{
    struct wq_waiter *w = j->w;
    struct lock_grant g = { 0 };
    int64_t held_until = j->held_until;

    if (w == NULL)
        return;
    if (j->key != NULL && j->key->held_until > held_until)
        held_until = j->key->held_until;
    if (w->shutting_down || j->op != WQ_ACQUIRE || !j->tried ||
        (j->last_unavailable && !w->client_gone)) {
        do_answer(q, j, BACKEND_UNAVAILABLE, NULL, NULL, done);
        return;
    }
    g.retry_ms = retry_after(held_until, clock_mono_ms());
    do_answer(q, j, BACKEND_HELD, &g, NULL, done);
}

/* Take j out of its key's FIFO; if j was first and next_turn, the next
 * waiter is tried at once. */
static void do_unpark(struct waitq *q, struct wq_job *j, bool next_turn)
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
        do_timer_set(q, &k->retry, clock_mono_ms(), false);
    do_key_free_if_idle(q, k);
}

/* An answered job nobody runs: out of its FIFO, then its place in the
 * store given up by a worker, or freed. */
static void do_dispose(struct waitq *q, struct wq_job *j)
{
    if (j->running || j->queued)
        return; /* the worker that has it disposes of it */
    if (j->parked)
        do_unpark(q, j, true);
    if (j->lw.be_data != NULL) {
        j->cleanup = CLEAN_CANCEL;
        j->queued = true;
        do_run_push(q, &j->task);
        return;
    }
    do_free_job(q, j);
}

static void do_park(struct waitq *q, struct wq_job *j, struct wq_key *k)
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
    if (!j->counted) {
        j->counted = true;
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

/* The store call owed by a job nobody will be answered for; the mutex is
 * dropped around it. Then the job is freed. */
static void do_cleanup(struct waitq *q, struct wq_job *j, enum cleanup c)
{
    pthread_mutex_unlock(&q->mu);
    if (c == CLEAN_RELEASE) {
        enum backend_result r = backend_release(q->be, &j->req);
        log_info("released a grant whose client was answered or gone "
                 "before it arrived (%s)",
                 backend_result_str(r));
    } else if (c == CLEAN_CANCEL && j->lw.be_data != NULL) {
        backend_cancel_wait(q->be, j->req.key, j->req.key_len, &j->lw);
    }
    pthread_mutex_lock(&q->mu);
    do_free_job(q, j);
}

/*
 * Answer the grant (or renewal) g for j, if it is of use. A client counts
 * the TTL from when it sent the request (since base_us: the request's
 * arrival, or for a waiter's retry the retry's store call), so a grant
 * with no more left than the time since then, plus the slack for the
 * request's and the answer's way (WQ_ANSWER_SLACK_US), has nothing left
 * by the client's count, and may be gone already. That is a 503; false,
 * so that the caller releases a grant nobody will hold.
 */
static bool do_answer_grant(struct waitq *q,
                            struct wq_job *j,
                            const struct lock_grant *g,
                            int64_t base_us,
                            struct done_list *done)
{
    int64_t now = clock_mono_us();
    uint64_t left = backend_grant_left_ms(g, now);
    int64_t slack = (int64_t)g->ttl_ms * 100; /* a tenth, in us */

    if (slack > WQ_ANSWER_SLACK_US)
        slack = WQ_ANSWER_SLACK_US;
    if (left == 0 || (int64_t)left * 1000 <= now - base_us + slack) {
        log_warn("waitq: the store answered too late (%lld ms after the "
                 "call, %llu ms of the lock left): answering 503",
                 (long long)((now - base_us) / 1000), (unsigned long long)left);
        do_answer(q, j, BACKEND_UNAVAILABLE, NULL, NULL, done);
        return false;
    }
    do_answer(q, j, BACKEND_OK, g, NULL, done);
    return true;
}

static enum backend_result call_store(struct backend *be,
                                      enum wq_op op,
                                      struct lock_req *req,
                                      struct lock_grant *g,
                                      struct lock_info *info,
                                      int64_t *count)
{
    memset(g, 0, sizeof(*g));
    switch (op) {
    case WQ_ACQUIRE:
        return backend_acquire(be, req, g);
    case WQ_RENEW:
        return backend_renew(be, req, g);
    case WQ_RELEASE:
        return backend_release(be, req);
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
            do_free_job(q, j);
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
            do_answer(q, j, r, &h, NULL, done);
        } else if (j->w != NULL && r != BACKEND_UNAVAILABLE) {
            do_answer(q, j, r, NULL, NULL, done);
        } else {
            do_answer_unserved(q, j, done);
        }
        do_dispose(q, j);
        return;
    }
    k = do_key_get(q, j->req.key, j->req.key_len);
    if (k == NULL) {
        do_answer(q, j, BACKEND_NO_MEMORY, NULL, NULL, done);
        do_dispose(q, j);
        return;
    }
    do_park(q, j, k);
    if (r != BACKEND_HELD)
        do_timer_set(q, &k->retry, now + WQ_UNAVAILABLE_MS, false);
    else if (atomic_load(&q->epoch) != epoch)
        do_timer_set(q, &k->retry, now, false); /* a notify came meanwhile */
    else if (k->head == j)
        do_schedule_held(q, k, now, g);
}

/* A worker's first try of a job, or one direct call. Mutex held. */
static void
do_run_job(struct waitq *q, struct wq_job *j, struct done_list *done)
{
    struct lock_grant g;
    struct lock_info info;
    int64_t count = -1;
    enum backend_result r;
    uint64_t epoch;

    if (j->cleanup != CLEAN_NONE) {
        do_cleanup(q, j, j->cleanup);
        return;
    }
    if (j->w == NULL) { /* answered before its turn: never sent */
        do_free_job(q, j);
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
    r = call_store(q->be, j->op, &j->req, &g, &info, &count);
    pthread_mutex_lock(&q->mu);
    j->running = false;
    if (j->op == WQ_ACQUIRE) {
        do_after_first(q, j, r, &g, epoch, done);
        return;
    }
    if (j->op == WQ_COUNT && j->w != NULL)
        j->w->count = count;
    if (r == BACKEND_OK && j->op == WQ_RENEW)
        do_answer_grant(q, j, &g, j->start_us, done);
    else
        do_answer(q, j, r, &g, &info, done);
    do_free_job(q, j);
}

/*
 * Retry key k's waiters in order: the first is tried; on a queueing store
 * a waiter that is merely behind another in the store's queue (possible
 * when two requests registered in one order and parked in the other)
 * passes the turn to the next. Mutex held; dropped around each call.
 */
static void
do_run_key(struct waitq *q, struct wq_key *k, struct done_list *done)
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
        r = call_store(q->be, WQ_ACQUIRE, &j->req, &g, &info, &count);
        pthread_mutex_lock(&q->mu);
        j->running = false;
        now = clock_mono_ms();
        if (r == BACKEND_OK) {
            do_unpark(q, j, false); /* the next waiter's turn comes below */
            if (j->w == NULL) {
                do_cleanup(q, j, CLEAN_RELEASE);
            } else if (do_answer_grant(
                           q, j, &g,
                           g.valid_until_us - (int64_t)g.ttl_ms * 1000, done)) {
                do_free_job(q, j);
            } else {
                do_cleanup(q, j, CLEAN_RELEASE);
            }
            if (k->head != NULL) {
                /* the new holder may never release: the next waiter
                 * tries again when its TTL is due */
                k->held_until = now + (int64_t)g.ttl_ms;
                do_timer_set(q, &k->retry,
                             now + (int64_t)(g.ttl_ms < WQ_RETRY_MAX_MS
                                                 ? g.ttl_ms
                                                 : WQ_RETRY_MAX_MS),
                             false);
            }
            break;
        }
        if (r == BACKEND_HELD) {
            struct wq_job *next = j->next;
            j->tried = true;
            j->last_unavailable = false;
            if (!g.behind)
                j->held_until = now + (int64_t)g.retry_ms;
            do_schedule_held(q, k, now, &g);
            if (j->w == NULL || j->wait_over) {
                do_answer_unserved(q, j, done);
                do_dispose(q, j);
            }
            if (g.behind && next != NULL && next->parked) {
                j = next;
                continue;
            }
            break;
        }
        /* unavailable or out of memory: keep the place, retry soon; the
         * deadline answers 503 if it never comes back */
        j->last_unavailable = true;
        do_timer_set(q, &k->retry, now + WQ_UNAVAILABLE_MS, false);
        if (j->w == NULL || j->wait_over) {
            do_answer_unserved(q, j, done);
            do_dispose(q, j);
        }
        break;
    }
    k->running = false;
    if (k->again && k->head != NULL)
        do_timer_set(q, &k->retry, clock_mono_ms(), false);
    do_key_free_if_idle(q, k);
}

static void *worker_main(void *arg)
{
    struct waitq *q = arg;
    struct done_list done = { 0 };

    pthread_mutex_lock(&q->mu);
    for (;;) {
        struct wq_task *t = do_run_pop(q);
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
                do_key_free_if_idle(q, k);
            else
                do_run_key(q, k, &done);
        } else {
            struct wq_job *j = CONTAINER_OF(t, struct wq_job, task);
            j->queued = false;
            if (q->workers_stop && clock_mono_ms() > q->stop_by && j->w == NULL)
                do_free_job(q, j); /* out of time: the store's TTLs end it */
            else
                do_run_job(q, j, &done);
        }
        if (done.head != NULL) {
            pthread_mutex_unlock(&q->mu);
            done_wake(&done);
            pthread_mutex_lock(&q->mu);
        }
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static void do_fire(struct waitq *q, struct wq_timer *t, struct done_list *done)
{
    if (t->kind == TIMER_RETRY) {
        struct wq_key *k = CONTAINER_OF(t, struct wq_key, retry);
        if (k->running) {
            k->again = true;
        } else if (!k->queued && k->head != NULL &&
                   q->be->call_timeout_ms <= 0) {
            do_run_key(q, k, done); /* memory never blocks: no hand-off */
        } else if (!k->queued && k->head != NULL) {
            k->queued = true;
            do_run_push(q, &k->task);
        } else {
            do_key_free_if_idle(q, k);
        }
        return;
    }
    struct wq_job *j = t->kind == TIMER_WAIT_END
                           ? CONTAINER_OF(t, struct wq_job, wait_end)
                           : CONTAINER_OF(t, struct wq_job, bound);
    j->wait_over = true;
    if (t->kind == TIMER_WAIT_END && (j->running || j->queued))
        return; /* its call answers it, by its bound at the latest */
    do_answer_unserved(q, j, done);
    do_dispose(q, j);
}

static void do_fire_timers(struct waitq *q, struct done_list *done)
{
    int64_t now = clock_mono_ms();

    while (q->nheap > 0 && q->heap[0]->at <= now) {
        struct wq_timer *t = q->heap[0];
        do_timer_remove(q, t);
        do_fire(q, t, done);
    }
}

static void do_answer_all(struct waitq *q, struct done_list *done)
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
        do_answer_unserved(q, j, done);
        do_dispose(q, j);
        i = 0; /* the heap changed under us */
    }
}

static void *waitq_main(void *arg)
{
    struct waitq *q = arg;
    struct epoll_event ev[WQ_EVENTS];
    struct done_list done = { 0 };

    on_timer_thread = true;
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
        /* no event of the last epoll_wait() names these any more */
        do_free_graveyard(q);
        {
            /* a timer set before this wakes up needs no kick */
            int64_t now = clock_mono_ms(), until = now + WQ_IDLE_MS;
            if (q->nheap > 0 && q->heap[0]->at < until)
                until = q->heap[0]->at;
            timeout = until <= now ? 0 : (int)(until - now);
            q->sleep_until = until;
        }
        pthread_mutex_unlock(&q->mu);
        done_wake(&done);
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
            do_answer_unserved(q, j, &done);
            do_dispose(q, j);
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

    atomic_fetch_add(&q->epoch, 1); /* seq_cst: see do_after_first() */
    pthread_mutex_lock(&q->mu);
    k = do_key_find(q, key, key_len);
    if (k != NULL) /* kicks the timer thread if it is now the first */
        do_timer_set(q, &k->retry, clock_mono_ms(), false);
    pthread_mutex_unlock(&q->mu);
}

/* j, just handed its request, can go no further (the instance is
 * draining, or out of memory): answer it now. */
static void do_refuse(struct waitq *q, struct wq_job *j, struct done_list *done)
{
    bool stopping = atomic_load(&q->stopping);

    j->w->shutting_down = stopping;
    do_answer(q, j, stopping ? BACKEND_UNAVAILABLE : BACKEND_NO_MEMORY, NULL,
              NULL, done);
    do_dispose(q, j);
}

/* The call on the caller's thread, for a store that never waits on I/O
 * and a request that will not park. */
static enum wq_start run_inline(struct waitq *q, struct wq_waiter *w)
{
    w->req.waiter = NULL;
    w->result =
        call_store(q->be, w->op, &w->req, &w->grant, &w->info, &w->count);
    return WQ_DONE;
}

enum wq_start waitq_start(struct waitq *q, struct wq_waiter *w)
{
    bool inline_calls = q->be->call_timeout_ms <= 0;
    bool queueing = (backend_caps(q->be) & BACKEND_CAP_QUEUE) != 0;
    bool waits = w->op == WQ_ACQUIRE && w->wait_ms > 0;
    struct done_list done = { 0 };
    struct wq_job *j;
    struct wq_key *k;
    int64_t now, start, bound;
    uint64_t epoch;

    w->job = NULL;
    w->shutting_down = w->client_gone = false;
    memset(&w->grant, 0, sizeof(w->grant));
    memset(&w->info, 0, sizeof(w->info));
    if (atomic_load(&q->stopping)) {
        w->shutting_down = true;
        w->result = BACKEND_UNAVAILABLE;
        return WQ_DONE;
    }
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
    if (!inline_calls && start + q->be->call_timeout_ms > bound)
        bound = start + q->be->call_timeout_ms;

    if (inline_calls) {
        /* memory: try now, on this thread; park only if held */
        struct lock_grant g = { 0 };
        bool tried_now = false;
        epoch = atomic_load(&q->epoch);
        pthread_mutex_lock(&q->mu);
        j->lw.id = ++q->next_id;
        k = queueing ? NULL : do_key_find(q, j->req.key, j->req.key_len);
        pthread_mutex_unlock(&q->mu);
        j->lw.deadline_ms = clock_wall_ms() + (start + w->wait_ms - now);
        j->req.waiter = &j->lw;
        if (k == NULL) {
            enum backend_result r = backend_acquire(q->be, &j->req, &g);
            if (r != BACKEND_HELD) {
                w->result = r;
                w->grant = g;
                if (r != BACKEND_OK && j->lw.be_data != NULL)
                    backend_cancel_wait(q->be, j->req.key, j->req.key_len,
                                        &j->lw);
                do_free_job(q, j);
                return WQ_DONE;
            }
            j->tried = tried_now = true;
            if (!g.behind)
                j->held_until = clock_mono_ms() + (int64_t)g.retry_ms;
        }
        w->suspend(w);
        pthread_mutex_lock(&q->mu);
        j->w = w;
        w->job = j;
        now = clock_mono_ms();
        k = q->stopping ? NULL : do_key_get(q, j->req.key, j->req.key_len);
        if (k == NULL ||
            do_timer_set(q, &j->bound, start + w->wait_ms, true) != 0) {
            if (k != NULL)
                do_key_free_if_idle(q, k);
            do_refuse(q, j, &done);
            pthread_mutex_unlock(&q->mu);
            done_wake(&done);
            return WQ_PARKED;
        }
        if (!j->tried) {
            j->tried = true; /* parked behind this instance's waiters */
            j->held_until = k->held_until;
        }
        do_park(q, j, k);
        if (atomic_load(&q->epoch) != epoch || (k->head == j && !tried_now))
            /* a notification may have come between the try and now, or
             * the first waiter of a key was never tried: try at once */
            do_timer_set(q, &k->retry, now, false);
        else if (k->head == j)
            do_schedule_held(q, k, now, &g); /* at the holder's expiry */
        pthread_mutex_unlock(&q->mu);
        return WQ_PARKED;
    }

    /* a network store: a worker calls it; this thread never waits */
    w->suspend(w);
    pthread_mutex_lock(&q->mu);
    j->w = w;
    w->job = j;
    j->lw.id = ++q->next_id;
    now = clock_mono_ms();
    if (q->stopping || do_timer_set(q, &j->bound, bound, true) != 0 ||
        (waits &&
         do_timer_set(q, &j->wait_end, start + w->wait_ms, true) != 0)) {
        do_refuse(q, j, &done);
        pthread_mutex_unlock(&q->mu);
        done_wake(&done);
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
            do_answer_unserved(q, j, &done);
            do_free_job(q, j);
        } else {
            do_park(q, j, k);
        }
    } else {
        j->queued = true;
        do_run_push(q, &j->task);
    }
    pthread_mutex_unlock(&q->mu);
    done_wake(&done);
    return WQ_PARKED;
}

void waitq_orphan(struct waitq *q,
                  const char *key,
                  size_t key_len,
                  const char *token)
{
    struct wq_waiter w = { .op = WQ_RELEASE };
    struct wq_job *j;

    w.req.key = key;
    w.req.key_len = key_len;
    w.req.token = token;
    if (q->be->call_timeout_ms <= 0) {
        enum backend_result r = backend_release(q->be, &w.req);
        log_info("released a grant whose client left before the answer "
                 "(%s)",
                 backend_result_str(r));
        return;
    }
    j = job_new(&w);
    if (j == NULL) {
        log_warn("waitq: out of memory: a grant nobody received stays "
                 "until its TTL");
        return;
    }
    j->cleanup = CLEAN_RELEASE;
    pthread_mutex_lock(&q->mu);
    j->queued = true;
    do_run_push(q, &j->task);
    pthread_mutex_unlock(&q->mu);
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

int waitq_bind(struct waitq *q, struct backend *be, unsigned workers)
{
    q->be = be;
    if (workers == 0)
        workers = 1;
    if (workers > WQ_WORKERS_MAX)
        workers = WQ_WORKERS_MAX;
    q->workers = calloc(workers, sizeof(*q->workers));
    if (q->workers == NULL)
        return -1;
    for (unsigned i = 0; i < workers; i++) {
        int err = pthread_create(&q->workers[i], NULL, worker_main, q);
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
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->drained, NULL);
    pthread_cond_init(&q->work, NULL);
    err = pthread_create(&q->thread, NULL, waitq_main, q);
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
    kick(q);
    pthread_join(q->thread, NULL);
    waitq_stop(q, 0);
    /* exiting skips the final drain only if shutdown never ran: do it */
    pthread_mutex_lock(&q->mu);
    if (!q->drained_all) {
        struct done_list done = { 0 };
        do_answer_all(q, &done);
        pthread_mutex_unlock(&q->mu);
        done_wake(&done);
        pthread_mutex_lock(&q->mu);
    }
    while ((t = do_run_pop(q)) != NULL) /* owed calls nobody ran */
        if (!t->is_key)
            free(CONTAINER_OF(t, struct wq_job, task));
    do_free_graveyard(q);
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
