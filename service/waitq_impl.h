/*
 * service/waitq_impl.h - what the files of the wait queue share, private to
 * them: the job, key and queue structs, the timer kinds, and the functions
 * one file calls in another. Split from waitq.c so that each file reads in
 * one sitting: waitq.c (jobs, keys, parking, answers; the public calls),
 * waitq_timers.c (the timer heap and the timer thread), waitq_calls.c
 * (the workers: store calls and what their answers mean for a job) and
 * waitq_multi.c (requests for several keys at once).
 *
 * Every wq_*() below runs with q->mu held, like the do_*() helpers in each
 * file, except wq_done_wake() (after the mutex is dropped), wq_kick() and
 * wq_grant_in_time() (any time), wq_call_store() and wq_multi_start()
 * (never under it), wq_job_mem_free() (a job nobody else can reach) and
 * the thread mains.
 */
#ifndef SERVICE_WAITQ_IMPL_H
#define SERVICE_WAITQ_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/keytab.h"
#include "service/waitq.h"

#define WQ_RETRY_MAX_MS                       \
    2000 /* retry at least this often: a lost \
            notification costs at most this */
#define WQ_RETRY_NOTIFIED_MS                                             \
    60000 /* the same on a store with BACKEND_CAP_NOTIFIES, whose        \
             notifications are not lost: only a last-resort net, so idle \
             waiters cost (next to) nothing */
#define WQ_UNAVAILABLE_MS 200 /* retry pace while the backend is down */
#define WQ_MULTI_UNKNOWN_MS                                       \
    20 /* a multi-key waiter's first retry when the store gave no \
          hint (held by queued waiters only): doubled each time,  \
          up to WQ_RETRY_MAX_MS */
#define WQ_EVENTS      64
#define WQ_IDLE_MS     1000 /* the timer thread looks at least this often */
#define WQ_WORKERS_MAX 1024
/* What a grant must have left beyond the time since its request arrived:
 * the answer's way out through the HTTP stack and the network, and the
 * request's way in before lockd saw it. A tenth of the TTL, at most this. */
#define WQ_ANSWER_SLACK_US 20000

enum timer_kind {
    TIMER_WAIT_END, /* a job's wait runs out */
    TIMER_BOUND,    /* a job must be answered now */
    TIMER_RETRY,    /* a key's waiters are tried again */
    TIMER_MRETRY,   /* a multi-key waiter tries its keys again */
};

enum cleanup {
    CLEAN_NONE = 0,
    CLEAN_CANCEL,        /* give up the job's place in the store's queue */
    CLEAN_RELEASE,       /* release a grant nobody received */
    CLEAN_RELEASE_MULTI, /* the same, for a multi-key grant */
};

#define CONTAINER_OF(p, type, member) \
    ((type *)(void *)((char *)(p)-offsetof(type, member)))

struct wq_task { /* an entry of the run queue: a job or a key */
    struct wq_task *next;
    bool is_key;
};

struct wq_multi;

/* A multi-key waiter's link in one of its keys' watcher lists. */
struct wq_watch {
    struct wq_watch *prev, *next;
    struct wq_key *key; /* NULL when not linked */
    struct wq_multi *m;
};

struct wq_key {
    struct keytab_entry ke; /* ke.key points at key[] */
    struct wq_timer retry;
    struct wq_task task;
    bool queued;  /* task is in the run queue */
    bool running; /* a worker is trying its waiters */
    bool again;   /* a retry was due while running: once more at once */
    struct wq_job *head, *tail;
    struct wq_watch *watchers; /* multi-key waiters on this key: no place
                                  in the FIFO, told when it is notified */
    int64_t held_until;        /* monotonic ms when the holder's TTL ends, as
                                  last seen; for retry_after_ms */
    char key[];
};

/* The multi-key side of a job (ops WQ_*_MULTI), one allocation with the
 * copies of the request's arrays and strings. */
struct wq_multi {
    struct wq_job *job;
    struct lock_multi_req req; /* arrays and strings in this block */
    struct wq_timer retry;     /* TIMER_MRETRY */
    struct wq_watch *watch;    /* req.n links, in this block */
    int64_t held_until;        /* monotonic ms when the first TTL among the
                                  held keys ends, as last seen; 0 unknown */
    uint64_t backoff_ms;       /* the next retry without a hint; 0: the
                                  first */
    bool watching;             /* watch[] linked into the keys */
    bool again;                /* a retry came due while a try ran */
    bool first_done;           /* the first try was made */
    bool held[LOCK_MULTI_MAX]; /* the last try's held keys */
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
    struct wq_multi *multi;     /* owned; the multi ops only, else NULL */
    struct wq_listing *listing; /* owned; WQ_LIST only, else NULL (a
                                   parked acquire pays nothing for it) */
    int64_t parked_at_us;       /* monotonic us when it began to wait */
    char text[];
};

struct wq_listing {            /* a WQ_LIST job's request and page */
    struct lock_list_req lreq; /* strings in the job's text[] */
    struct lock_list *list;    /* owned until handed to the waiter */
};

struct waitq {
    struct backend *be;
    bool batches;  /* backend_batches(be): first calls go in batches */
    bool batching; /* a worker is the batcher (waitq_calls.c) */
    struct wq_task *pend_head, *pend_tail; /* jobs left for the batcher */
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
    uint64_t retry_max_ms; /* a parked key's retry comes at least this
                              often: WQ_RETRY_MAX_MS, or
                              WQ_RETRY_NOTIFIED_MS (waitq_bind()) */
};

/* Waiters whose answer is ready, woken once the mutex is dropped. */
struct done_list {
    struct wq_waiter *head;
};

/* waitq.c: the run queue, keys, jobs, parking and answers */
void wq_run_push(struct waitq *q, struct wq_task *t);
/* Queue j (NULL: out of memory, logged) for the store call c that no
 * client waits for: the release of a grant nobody received. */
void wq_push_cleanup(struct waitq *q, struct wq_job *j, enum cleanup c);
struct wq_task *wq_run_pop(struct waitq *q);
struct wq_key *wq_key_get(struct waitq *q, const char *key, size_t len);
void wq_key_free_if_idle(struct waitq *q, struct wq_key *k);
void wq_free_job(struct waitq *q, struct wq_job *j);
void wq_done_wake(struct done_list *d);
void wq_answer(struct waitq *q,
               struct wq_job *j,
               enum backend_result r,
               const struct lock_grant *g,
               struct lock_info *info,
               struct done_list *done);
void wq_answer_unserved(struct waitq *q,
                        struct wq_job *j,
                        struct done_list *done);
void wq_unpark(struct waitq *q, struct wq_job *j, bool next_turn);
void wq_dispose(struct waitq *q, struct wq_job *j);
void wq_park(struct waitq *q, struct wq_job *j, struct wq_key *k);
void wq_track(struct waitq *q, struct wq_job *j);
void wq_job_mem_free(struct wq_job *j); /* no mutex: j is nobody's */

/* waitq_timers.c: the timer heap and the timer thread */
void wq_timer_remove(struct waitq *q, struct wq_timer *t);
int wq_timer_set(struct waitq *q, struct wq_timer *t, int64_t at, bool force);
void wq_kick(struct waitq *q);
void wq_free_graveyard(struct waitq *q);
void wq_answer_all(struct waitq *q, struct done_list *done);
void *wq_timer_main(void *arg);

/* waitq_calls.c: the store calls and the workers that make them */
/* j, a new job, left for the batcher if there is one and j's call may go
 * in a batch (q->batches): true, else false (push it as ever) */
bool wq_batch_take(struct waitq *q, struct wq_job *j);
/* One store call for op; lreq and list for WQ_LIST only (else NULL). */
enum backend_result wq_call_store(struct backend *be,
                                  enum wq_op op,
                                  struct lock_req *req,
                                  struct lock_grant *g,
                                  struct lock_info *info,
                                  int64_t *count,
                                  const struct lock_list_req *lreq,
                                  struct lock_list *list);
/* A page for limit entries, in one block with them (free() it); NULL when
 * out of memory. */
struct lock_list *wq_list_new(uint32_t limit);
void wq_schedule_held(struct waitq *q,
                      struct wq_key *k,
                      int64_t now,
                      const struct lock_grant *g);
void wq_run_key(struct waitq *q, struct wq_key *k, struct done_list *done);
bool wq_grant_in_time(uint64_t ttl_ms, int64_t valid_until_us, int64_t base_us);

/* waitq_multi.c: several keys at once */
enum wq_start wq_multi_start(struct waitq *q, struct wq_waiter *w);
void wq_multi_poke(struct waitq *q, struct wq_key *k);
void wq_multi_fire(struct waitq *q, struct wq_multi *m, struct done_list *d);
void wq_multi_run_job(struct waitq *q, struct wq_job *j, struct done_list *d);
void wq_multi_answer_unserved(struct waitq *q,
                              struct wq_job *j,
                              struct done_list *done);
void wq_multi_forget(struct waitq *q, struct wq_multi *m);
void *wq_worker_main(void *arg);

#endif /* SERVICE_WAITQ_IMPL_H */
