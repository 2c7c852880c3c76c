/*
 * backends/memory/sweep.c - the memory store's sweeper thread: with no
 * traffic on a key, it expires the key's holders one by one as their TTLs
 * pass (visiting only the entries due.c says have expired), frees entries
 * left idle for MEM_LINGER_MS and tells the wait queue about every key
 * with waiters that lost a holder. Also frees entries at close.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/memory/mem_int.h"
#include "lib/clock.h"

struct sweep_gone { /* a holder the sweep expired, told after unlocking */
    char *key;      /* owned copy */
    size_t key_len;
    uint64_t fence;
    char *owner; /* owned copy, NULL when none */
};

struct sweep {
    struct mem_be *m;
    struct mem_shard *s;
    int64_t now;
    size_t nwake;
    char *wake[MEM_SWEEP_BATCH]; /* owned copies of keys to notify */
    size_t wake_len[MEM_SWEEP_BATCH];
    size_t ngone;
    struct sweep_gone gone[MEM_SWEEP_BATCH];
};

/* Copy what the expired hook is told of e's holders that expire now; false
 * (nothing copied) when the batch has no room for them all. */
static bool sweep_note_gone(struct sweep *sw, struct mem_entry *e)
{
    size_t n0 = sw->ngone;

    if (sw->m->hooks.expired == NULL)
        return true;
    for (uint32_t i = 0; i < e->nheld; i++) {
        struct mem_holder *h = mem_holder_at(e, i);
        struct sweep_gone *g;
        if (sw->now < h->expires_mono)
            continue;
        if (sw->ngone == MEM_SWEEP_BATCH) {
            if (n0 == 0)
                return true; /* more than a batch on one key: tell the
                                first, expire them all */
            while (sw->ngone > n0) {
                g = &sw->gone[--sw->ngone];
                free(g->key);
                free(g->owner);
            }
            return false;
        }
        g = &sw->gone[sw->ngone++];
        g->key = strndup(e->key, e->ke.key_len);
        g->key_len = g->key != NULL ? e->ke.key_len : 0;
        g->fence = h->fence;
        g->owner = h->owner != NULL ? strdup(h->owner) : NULL;
    }
    return true;
}

enum sweep_step {
    SWEEP_NEXT, /* e is done: on to the next due entry */
    SWEEP_FULL, /* a batch has no room left: notify, then a new round */
    SWEEP_STOP  /* e was due but nothing expired: stop this pass */
};

/* Expire e's holders that are due and notify its waiters; free e if it
 * was idle for MEM_LINGER_MS. */
static enum sweep_step sweep_entry(struct sweep *sw, struct mem_entry *e)
{
    if (e->nheld == 0) { /* idle (the heap holds no entry with places
                            and no holder) */
        do_mem_entry_free(sw->s, e);
        return SWEEP_NEXT;
    }
    if ((e->qhead != NULL || e->multi_wait) && sw->nwake == MEM_SWEEP_BATCH)
        return SWEEP_FULL; /* no room to notify its waiters */
    if (!sweep_note_gone(sw, e))
        return SWEEP_FULL; /* no room to tell of its holders */
    atomic_fetch_add_explicit(&sw->m->swept, 1, memory_order_relaxed);
    if (do_mem_expire(sw->m, e, sw->now, NULL) == 0) {
        do_mem_due_set(sw->s, e); /* a stale place: cannot happen */
        return do_mem_due_first(sw->s, sw->now) == e ? SWEEP_STOP : SWEEP_NEXT;
    }
    if (do_mem_wake_due(e)) {
        sw->wake[sw->nwake] = strndup(e->key, e->ke.key_len);
        if (sw->wake[sw->nwake] != NULL)
            sw->wake_len[sw->nwake++] = e->ke.key_len;
    }
    do_mem_entry_idle(sw->s, e, sw->now);
    return SWEEP_NEXT;
}

/* Only the entries the due heap says have expired: the cost of a pass is
 * what expires, whatever is held. */
static void sweep_shard(struct mem_be *m, struct mem_shard *s)
{
    struct sweep sw = { .m = m, .s = s };
    enum sweep_step step;

    do { /* again while a batch ran out of room */
        struct mem_entry *e;
        sw.nwake = 0;
        sw.ngone = 0;
        step = SWEEP_NEXT;
        pthread_mutex_lock(&s->mu);
        sw.now = clock_mono_ms();
        while (step == SWEEP_NEXT && (e = do_mem_due_first(s, sw.now)) != NULL)
            step = sweep_entry(&sw, e);
        do_mem_due_shrink(s);
        pthread_mutex_unlock(&s->mu);
        for (size_t k = 0; k < sw.ngone; k++) {
            struct sweep_gone *g = &sw.gone[k];
            if (g->key != NULL)
                m->hooks.expired(m->hooks.expired_arg, g->key, g->key_len,
                                 g->fence, g->owner);
            free(g->key);
            free(g->owner);
        }
        for (size_t k = 0; k < sw.nwake; k++) {
            mem_notify(m, sw.wake[k], sw.wake_len[k]);
            free(sw.wake[k]);
        }
    } while (step == SWEEP_FULL);
}

void *mem_sweeper_main(void *arg)
{
    struct mem_be *m = arg;
    struct timespec ts;

    pthread_mutex_lock(&m->stop_mu);
    while (!m->stopping) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += MEM_SWEEP_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&m->stop_cv, &m->stop_mu, &ts);
        if (m->stopping)
            break;
        pthread_mutex_unlock(&m->stop_mu);
        for (int i = 0; i < MEM_SHARDS; i++)
            sweep_shard(m, &m->shards[i]);
        pthread_mutex_lock(&m->stop_mu);
    }
    pthread_mutex_unlock(&m->stop_mu);
    return NULL;
}

void mem_entry_free(struct mem_entry *e)
{
    struct mem_waiter *w, *next;

    for (w = e->qhead; w != NULL; w = next) {
        next = w->next;
        free(w);
    }
    for (uint32_t i = 0; i < e->nheld; i++)
        mem_holder_drop(mem_holder_at(e, i));
    free(e->more);
    free(e);
}
