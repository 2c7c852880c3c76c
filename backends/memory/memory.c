/*
 * backends/memory/memory.c - the embedded lock store: 64 shards, each a mutex
 * and a hash table of entries, so threads working on different keys rarely
 * meet. An entry exists while its key is held or has waiters; its waiters
 * form a FIFO that acquire() honours (BACKEND_CAP_QUEUE). Expiry is judged
 * on every access against the monotonic clock, so a lock is free the
 * instant its TTL passes; a sweeper thread reclaims expired entries with no
 * traffic and tells the wait queue about them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"
#include "lib/clock.h"
#include "lib/keytab.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/text.h"

extern const struct backend_ops memory_backend;

#define MEM_SHARDS      64
#define MEM_SWEEP_MS    250 /* how often the sweeper looks for expiries */
#define MEM_SWEEP_BATCH 64  /* keys notified per shard visit */

struct mem_entry;

struct mem_waiter { /* a place in an entry's FIFO; lock_waiter.be_data */
    struct mem_waiter *prev, *next;
    struct mem_entry *entry;
};

struct mem_entry {
    struct keytab_entry ke; /* ke.key points at key[] */
    int64_t expires_mono;   /* ms, CLOCK_MONOTONIC; valid while held */
    int64_t expires_wall;   /* unix ms, informational */
    uint64_t fence;
    uint64_t ttl_ms;
    char *owner; /* owned; NULL when none */
    struct mem_waiter *qhead, *qtail;
    bool held;
    char token[LOCK_TOKEN_MAX + 1];
    char key[];
};

struct mem_shard {
    pthread_mutex_t mu; /* guards tab and every entry in it */
    struct keytab tab;
} __attribute__((aligned(64)));

struct mem_be {
    struct backend base;
    struct backend_hooks hooks;
    _Atomic uint64_t fence; /* last fence granted, any key */
    _Atomic int64_t held;   /* entries with held == true */
    pthread_t sweeper;
    pthread_mutex_t stop_mu; /* guards stopping */
    pthread_cond_t stop_cv;
    bool stopping;
    bool sweeper_started;
    struct mem_shard shards[MEM_SHARDS];
};

static struct mem_shard *shard_of(struct mem_be *m, uint64_t hash)
{
    return &m->shards[(hash >> 58) % MEM_SHARDS];
}

static void notify(struct mem_be *m, const char *key, size_t len)
{
    if (m->hooks.notify != NULL)
        m->hooks.notify(m->hooks.arg, key, len);
}

static uint64_t remaining_ms(const struct mem_entry *e, int64_t now)
{
    return e->expires_mono > now ? (uint64_t)(e->expires_mono - now) : 0;
}

/* The holder's token dies: the entry stays while it has waiters. */
static void do_unhold(struct mem_be *m, struct mem_entry *e)
{
    e->held = false;
    free(e->owner);
    e->owner = NULL;
    memset(e->token, 0, sizeof(e->token));
    atomic_fetch_sub_explicit(&m->held, 1, memory_order_relaxed);
}

/* Judge expiry now; true if e was held and its TTL has passed. */
static bool do_expire_if_due(struct mem_be *m, struct mem_entry *e, int64_t now)
{
    if (!e->held || now < e->expires_mono)
        return false;
    do_unhold(m, e);
    metrics_lock_expired(1);
    return true;
}

static void do_entry_free_if_idle(struct mem_shard *s, struct mem_entry *e)
{
    if (e->held || e->qhead != NULL)
        return;
    keytab_remove(&s->tab, &e->ke);
    free(e);
}

static struct mem_entry *
do_entry_new(struct mem_shard *s, const char *key, size_t len, uint64_t hash)
{
    struct mem_entry *e = calloc(1, sizeof(*e) + len + 1);

    if (e == NULL)
        return NULL;
    memcpy(e->key, key, len);
    e->ke.key = e->key;
    e->ke.key_len = len;
    e->ke.hash = hash;
    keytab_insert(&s->tab, &e->ke);
    return e;
}

static enum backend_result do_grant(struct mem_be *m,
                                    struct mem_entry *e,
                                    const struct lock_req *req,
                                    int64_t now,
                                    struct lock_grant *out)
{
    char *owner = NULL;
    size_t tlen = strlen(req->token); /* <= LOCK_TOKEN_MAX: the wrapper
                                          checked it */

    if (req->owner != NULL) {
        owner = strdup(req->owner);
        if (owner == NULL)
            return BACKEND_NO_MEMORY;
    }
    e->held = true;
    e->owner = owner;
    memcpy(e->token, req->token, tlen + 1);
    e->ttl_ms = req->ttl_ms;
    e->expires_mono = now + (int64_t)req->ttl_ms;
    e->expires_wall = clock_wall_ms() + (int64_t)req->ttl_ms;
    e->fence =
        atomic_fetch_add_explicit(&m->fence, 1, memory_order_relaxed) + 1;
    atomic_fetch_add_explicit(&m->held, 1, memory_order_relaxed);
    out->fence = e->fence;
    out->ttl_ms = e->ttl_ms;
    out->expires_at_ms = e->expires_wall;
    return BACKEND_OK;
}

static enum backend_result mem_be_acquire(struct backend *be,
                                          const struct lock_req *req,
                                          struct lock_grant *out)
{
    struct mem_be *m = (struct mem_be *)be;
    uint64_t hash = keytab_hash(req->key, req->key_len);
    struct mem_shard *s = shard_of(m, hash);
    struct mem_waiter *w = req->waiter != NULL ? req->waiter->be_data : NULL;
    struct mem_entry *e;
    enum backend_result r = BACKEND_HELD;
    int64_t now = clock_mono_ms();

    pthread_mutex_lock(&s->mu);
    e = (struct mem_entry *)keytab_find(&s->tab, req->key, req->key_len, hash);
    if (e != NULL)
        do_expire_if_due(m, e, now);
    if (w != NULL) {
        /* a queued waiter: only the first of the queue may take it */
        if (!e->held && e->qhead == w) {
            r = do_grant(m, e, req, now, out);
            if (r == BACKEND_OK) {
                e->qhead = w->next;
                if (e->qhead != NULL)
                    e->qhead->prev = NULL;
                else
                    e->qtail = NULL;
                free(w);
                req->waiter->be_data = NULL;
            }
        }
    } else if (e == NULL || (!e->held && e->qhead == NULL)) {
        if (e == NULL)
            e = do_entry_new(s, req->key, req->key_len, hash);
        r = e != NULL ? do_grant(m, e, req, now, out) : BACKEND_NO_MEMORY;
        if (r != BACKEND_OK && e != NULL) {
            do_entry_free_if_idle(s, e);
            e = NULL;
        }
    } else if (req->waiter != NULL) {
        /* held, or others wait: take a place at the tail */
        w = calloc(1, sizeof(*w));
        if (w == NULL) {
            r = BACKEND_NO_MEMORY;
        } else {
            w->entry = e;
            w->prev = e->qtail;
            if (e->qtail != NULL)
                e->qtail->next = w;
            else
                e->qhead = w;
            e->qtail = w;
            req->waiter->be_data = w;
        }
    }
    if (r == BACKEND_HELD) {
        out->retry_ms = e != NULL && e->held ? remaining_ms(e, now) : 1;
        out->behind = w != NULL && !e->held;
    }
    pthread_mutex_unlock(&s->mu);
    return r;
}

/* Find key's entry held by token: OK, NOT_FOUND or MISMATCH. */
static enum backend_result do_find_held(struct mem_be *m,
                                        struct mem_shard *s,
                                        const char *key,
                                        size_t len,
                                        uint64_t hash,
                                        const char *token,
                                        int64_t now,
                                        struct mem_entry **out,
                                        bool *wake)
{
    struct mem_entry *e =
        (struct mem_entry *)keytab_find(&s->tab, key, len, hash);

    *out = e;
    if (e == NULL)
        return BACKEND_NOT_FOUND;
    if (do_expire_if_due(m, e, now))
        *wake = e->qhead != NULL;
    if (!e->held)
        return BACKEND_NOT_FOUND;
    if (!text_secret_eq(e->token, token))
        return BACKEND_MISMATCH;
    return BACKEND_OK;
}

static enum backend_result mem_be_renew(struct backend *be,
                                        const struct lock_req *req,
                                        struct lock_grant *out)
{
    struct mem_be *m = (struct mem_be *)be;
    uint64_t hash = keytab_hash(req->key, req->key_len);
    struct mem_shard *s = shard_of(m, hash);
    struct mem_entry *e;
    bool wake = false;
    int64_t now = clock_mono_ms();
    enum backend_result r;

    pthread_mutex_lock(&s->mu);
    r = do_find_held(m, s, req->key, req->key_len, hash, req->token, now, &e,
                     &wake);
    if (r == BACKEND_OK) {
        if (req->ttl_ms > 0)
            e->ttl_ms = req->ttl_ms;
        e->expires_mono = now + (int64_t)e->ttl_ms;
        e->expires_wall = clock_wall_ms() + (int64_t)e->ttl_ms;
        out->fence = e->fence;
        out->ttl_ms = e->ttl_ms;
        out->expires_at_ms = e->expires_wall;
    } else if (e != NULL) {
        do_entry_free_if_idle(s, e);
    }
    pthread_mutex_unlock(&s->mu);
    if (wake)
        notify(m, req->key, req->key_len);
    return r;
}

static enum backend_result mem_be_release(struct backend *be,
                                          const struct lock_req *req,
                                          struct lock_grant *out)
{
    struct mem_be *m = (struct mem_be *)be;
    uint64_t hash = keytab_hash(req->key, req->key_len);
    struct mem_shard *s = shard_of(m, hash);
    struct mem_entry *e;
    bool wake = false;
    enum backend_result r;
    (void)out; /* holds left: 0, set by the wrapper */

    pthread_mutex_lock(&s->mu);
    r = do_find_held(m, s, req->key, req->key_len, hash, req->token,
                     clock_mono_ms(), &e, &wake);
    if (r == BACKEND_OK) {
        do_unhold(m, e);
        wake = e->qhead != NULL;
    }
    if (e != NULL)
        do_entry_free_if_idle(s, e);
    pthread_mutex_unlock(&s->mu);
    if (wake)
        notify(m, req->key, req->key_len);
    return r;
}

static enum backend_result mem_be_inspect(struct backend *be,
                                          const char *key,
                                          size_t key_len,
                                          struct lock_info *out)
{
    struct mem_be *m = (struct mem_be *)be;
    uint64_t hash = keytab_hash(key, key_len);
    struct mem_shard *s = shard_of(m, hash);
    struct mem_entry *e;
    bool wake = false;
    int64_t now = clock_mono_ms();
    enum backend_result r = BACKEND_NOT_FOUND;

    pthread_mutex_lock(&s->mu);
    e = (struct mem_entry *)keytab_find(&s->tab, key, key_len, hash);
    if (e != NULL && do_expire_if_due(m, e, now))
        wake = e->qhead != NULL;
    if (e != NULL && e->held) {
        out->fence = e->fence;
        out->ttl_ms = remaining_ms(e, now);
        out->expires_at_ms = e->expires_wall;
        out->has_owner = e->owner != NULL;
        if (e->owner != NULL) {
            size_t n = strlen(e->owner);
            if (n > LOCK_OWNER_MAX)
                n = LOCK_OWNER_MAX;
            memcpy(out->owner, e->owner, n);
            out->owner[n] = '\0';
        }
        r = BACKEND_OK;
    } else if (e != NULL) {
        do_entry_free_if_idle(s, e);
    }
    pthread_mutex_unlock(&s->mu);
    if (wake)
        notify(m, key, key_len);
    return r;
}

static enum backend_result mem_be_cancel_wait(struct backend *be,
                                              const char *key,
                                              size_t key_len,
                                              struct lock_waiter *waiter)
{
    struct mem_be *m = (struct mem_be *)be;
    uint64_t hash = keytab_hash(key, key_len);
    struct mem_shard *s = shard_of(m, hash);
    struct mem_waiter *w = waiter->be_data;
    struct mem_entry *e;
    bool wake;

    if (w == NULL)
        return BACKEND_OK;
    pthread_mutex_lock(&s->mu);
    e = w->entry;
    /* the next waiter may go if the leaving one was first and it is free */
    wake = e->qhead == w && w->next != NULL && !e->held;
    if (w->prev != NULL)
        w->prev->next = w->next;
    else
        e->qhead = w->next;
    if (w->next != NULL)
        w->next->prev = w->prev;
    else
        e->qtail = w->prev;
    free(w);
    waiter->be_data = NULL;
    do_entry_free_if_idle(s, e);
    pthread_mutex_unlock(&s->mu);
    if (wake)
        notify(m, key, key_len);
    return BACKEND_OK;
}

static enum backend_result mem_be_ping(struct backend *be)
{
    (void)be;
    return BACKEND_OK;
}

static int64_t mem_be_held_count(struct backend *be)
{
    struct mem_be *m = (struct mem_be *)be;
    int64_t n = atomic_load_explicit(&m->held, memory_order_relaxed);

    return n > 0 ? n : 0;
}

struct sweep {
    struct mem_be *m;
    struct mem_shard *s;
    int64_t now;
    size_t nwake;
    char *wake[MEM_SWEEP_BATCH]; /* owned copies of keys to notify */
    size_t wake_len[MEM_SWEEP_BATCH];
};

static void sweep_entry(struct keytab_entry *ke, void *arg)
{
    struct sweep *sw = arg;
    struct mem_entry *e = (struct mem_entry *)ke;

    if (e->qhead != NULL && sw->nwake == MEM_SWEEP_BATCH)
        return; /* no room to notify its waiters: the next pass expires it */
    if (!do_expire_if_due(sw->m, e, sw->now))
        return;
    if (e->qhead != NULL) {
        sw->wake[sw->nwake] = strndup(e->key, e->ke.key_len);
        if (sw->wake[sw->nwake] != NULL)
            sw->wake_len[sw->nwake++] = e->ke.key_len;
    }
    do_entry_free_if_idle(sw->s, e);
}

static void *sweeper_main(void *arg)
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
        for (int i = 0; i < MEM_SHARDS; i++) {
            struct sweep sw = { .m = m, .s = &m->shards[i] };
            do { /* again while a full batch may have left some behind */
                sw.nwake = 0;
                pthread_mutex_lock(&sw.s->mu);
                sw.now = clock_mono_ms();
                keytab_foreach(&sw.s->tab, sweep_entry, &sw);
                pthread_mutex_unlock(&sw.s->mu);
                for (size_t k = 0; k < sw.nwake; k++) {
                    notify(m, sw.wake[k], sw.wake_len[k]);
                    free(sw.wake[k]);
                }
            } while (sw.nwake == MEM_SWEEP_BATCH);
        }
        pthread_mutex_lock(&m->stop_mu);
    }
    pthread_mutex_unlock(&m->stop_mu);
    return NULL;
}

static void free_entry(struct keytab_entry *ke, void *arg)
{
    struct mem_entry *e = (struct mem_entry *)ke;
    struct mem_waiter *w, *next;

    (void)arg;
    for (w = e->qhead; w != NULL; w = next) {
        next = w->next;
        free(w);
    }
    free(e->owner);
    free(e);
}

static void mem_be_close(struct backend *be)
{
    struct mem_be *m = (struct mem_be *)be;

    if (m == NULL)
        return;
    if (m->sweeper_started) {
        pthread_mutex_lock(&m->stop_mu);
        m->stopping = true;
        pthread_cond_signal(&m->stop_cv);
        pthread_mutex_unlock(&m->stop_mu);
        pthread_join(m->sweeper, NULL);
    }
    for (int i = 0; i < MEM_SHARDS; i++) {
        if (m->shards[i].tab.buckets != NULL) {
            keytab_foreach(&m->shards[i].tab, free_entry, NULL);
            keytab_cleanup(&m->shards[i].tab);
        }
        pthread_mutex_destroy(&m->shards[i].mu);
    }
    pthread_cond_destroy(&m->stop_cv);
    pthread_mutex_destroy(&m->stop_mu);
    free(m);
}

static enum backend_result mem_be_open(const char *url,
                                       const struct backend_hooks *hooks,
                                       struct backend **out,
                                       char *errbuf,
                                       size_t errlen)
{
    struct mem_be *m;
    pthread_condattr_t ca;
    int err;

    *out = NULL;
    /* memory:// takes no host, path or options */
    if (strcmp(url, "memory://") != 0 && strcmp(url, "memory:") != 0) {
        snprintf(errbuf, errlen,
                 "memory: the URL is memory:// and takes no host, path or "
                 "options, not '%s'",
                 url);
        return BACKEND_INVALID;
    }
    m = aligned_alloc(64, (sizeof(*m) + 63) / 64 * 64);
    if (m == NULL)
        return BACKEND_NO_MEMORY;
    memset(m, 0, sizeof(*m));
    m->base.ops = &memory_backend;
    if (hooks != NULL)
        m->hooks = *hooks;
    /* fences keep growing across restarts (while fewer than a million are
     * granted a second and the clock is not set back): start from the wall
     * clock in microseconds (below 2^53 until the year 2255) */
    {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        atomic_store(&m->fence, (uint64_t)ts.tv_sec * 1000000 +
                                    (uint64_t)ts.tv_nsec / 1000);
    }
    pthread_mutex_init(&m->stop_mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->stop_cv, &ca);
    pthread_condattr_destroy(&ca);
    for (int i = 0; i < MEM_SHARDS; i++) {
        pthread_mutex_init(&m->shards[i].mu, NULL);
        if (keytab_init(&m->shards[i].tab, 64) != 0) {
            mem_be_close(&m->base);
            return BACKEND_NO_MEMORY;
        }
    }
    err = pthread_create(&m->sweeper, NULL, sweeper_main, m);
    if (err != 0) {
        log_error("memory: cannot start the sweeper thread: %s", strerror(err));
        mem_be_close(&m->base);
        return BACKEND_NO_MEMORY;
    }
    m->sweeper_started = true;
    *out = &m->base;
    return BACKEND_OK;
}

const struct backend_ops memory_backend = {
    .scheme = "memory",
    .caps = BACKEND_CAP_QUEUE,
    .open = mem_be_open,
    .acquire = mem_be_acquire,
    .renew = mem_be_renew,
    .release = mem_be_release,
    .inspect = mem_be_inspect,
    .cancel_wait = mem_be_cancel_wait,
    .ping = mem_be_ping,
    .held_count = mem_be_held_count,
    .close = mem_be_close,
};
