/*
 * backends/threadconn.c - per-thread store connections and their back-off
 * (see threadconn.h).
 */
#include "backends/threadconn.h"

#include <stdlib.h>

#include "lib/clock.h"

static void unlink_conn(struct threadconn_set *set, struct threadconn *c)
{
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        set->all = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

/* The pthread key's destructor: the thread exits. Its record holds a
 * pointer to the set just before the adapter's part. */
struct tagged {
    struct threadconn_set *set;
    max_align_t pad[]; /* the adapter's struct starts here */
};

static struct tagged *tag_of(struct threadconn *c)
{
    return (struct tagged *)((char *)c - offsetof(struct tagged, pad));
}

static void
free_conn(struct threadconn_set *set, struct threadconn *c, bool thread_exits)
{
    if (set->drop != NULL)
        set->drop(c, thread_exits);
    free(tag_of(c));
}

static void on_thread_exit(void *p)
{
    struct threadconn *c = p;
    struct threadconn_set *set = tag_of(c)->set;

    pthread_mutex_lock(&set->mu);
    unlink_conn(set, c);
    pthread_mutex_unlock(&set->mu);
    free_conn(set, c, true);
}

int threadconn_set_init(struct threadconn_set *set,
                        size_t size,
                        void (*drop)(struct threadconn *conn,
                                     bool thread_exits),
                        int64_t backoff_min_ms,
                        int64_t backoff_max_ms)
{
    set->size =
        size < sizeof(struct threadconn) ? sizeof(struct threadconn) : size;
    set->drop = drop;
    set->backoff_min_ms = backoff_min_ms;
    set->backoff_max_ms = backoff_max_ms;
    atomic_init(&set->ok_at_ms, 0);
    set->all = NULL;
    set->key_made = false;
    if (pthread_mutex_init(&set->mu, NULL) != 0)
        return -1;
    if (pthread_key_create(&set->key, on_thread_exit) != 0) {
        pthread_mutex_destroy(&set->mu);
        return -1;
    }
    set->key_made = true;
    return 0;
}

void threadconn_set_destroy(struct threadconn_set *set)
{
    if (!set->key_made)
        return;
    /* threads still alive keep a dangling key value: delete the key
     * first, so their exit does not run the destructor */
    pthread_key_delete(set->key);
    set->key_made = false;
    pthread_mutex_lock(&set->mu);
    while (set->all != NULL) {
        struct threadconn *c = set->all;
        unlink_conn(set, c);
        free_conn(set, c, false);
    }
    pthread_mutex_unlock(&set->mu);
    pthread_mutex_destroy(&set->mu);
}

struct threadconn *threadconn_get(struct threadconn_set *set)
{
    struct threadconn *c = pthread_getspecific(set->key);
    struct tagged *t;

    if (c != NULL)
        return c;
    t = calloc(1, offsetof(struct tagged, pad) + set->size);
    if (t == NULL)
        return NULL;
    t->set = set;
    c = (struct threadconn *)(void *)t->pad;
    if (pthread_setspecific(set->key, c) != 0) {
        free(t);
        return NULL;
    }
    pthread_mutex_lock(&set->mu);
    c->next = set->all;
    if (set->all != NULL)
        set->all->prev = c;
    set->all = c;
    pthread_mutex_unlock(&set->mu);
    return c;
}

bool threadconn_may_try(struct threadconn_set *set,
                        const struct threadconn *conn)
{
    return clock_mono_ms() >= conn->retry_at_ms ||
           atomic_load_explicit(&set->ok_at_ms, memory_order_relaxed) >=
               conn->failed_at_ms;
}

int64_t threadconn_backoff_next(const struct threadconn_set *set, int64_t cur)
{
    int64_t b = cur == 0 ? set->backoff_min_ms : cur * 2;

    return b > set->backoff_max_ms ? set->backoff_max_ms : b;
}

void threadconn_failed(struct threadconn_set *set, struct threadconn *conn)
{
    conn->backoff_ms = threadconn_backoff_next(set, conn->backoff_ms);
    conn->failed_at_ms = clock_mono_ms();
    conn->retry_at_ms = conn->failed_at_ms + conn->backoff_ms;
}

void threadconn_ok(struct threadconn_set *set, struct threadconn *conn)
{
    if (conn != NULL)
        conn->backoff_ms = 0;
    atomic_store_explicit(&set->ok_at_ms, clock_mono_ms(),
                          memory_order_relaxed);
}
