/*
 * backends/memory/memory.c - the embedded lock store: 64 shards, each a mutex
 * and a hash table of entries, so threads working on different keys rarely
 * meet. A key is free, held EXCLUSIVE by one token or SHARED by up to its
 * limit of tokens, each holder with its own fence, TTL, owner, hold count
 * and Idempotency-Key (holders.c); every decision is one step under the
 * shard mutex. An entry's waiters form one FIFO for both modes that
 * acquire() honours (BACKEND_CAP_QUEUE). Expiry is judged on every access
 * against the monotonic clock, so a holder is gone the instant its TTL
 * passes; a sweeper thread (sweep.c) expires holders with no traffic and
 * tells the wait queue about them. Each shard also keeps its entries in
 * key order (index.c) for list() (list.c). An entry nobody holds or waits
 * for lingers MEM_LINGER_MS for its key's next acquire, then the sweeper
 * frees it: a key locked again and again costs no allocation, hash-table
 * or index work, and keys used once cost their entry for about a second.
 *
 * Fences come from one counter for the whole store, so a forced release
 * (every holder removed, the entry freed) keeps the next fence greater.
 * expired_fence on a grant is exact for what the grant's own step
 * expired; holders the sweeper (up to MEM_SWEEP_MS late) or another call
 * expired first are not reported (0): a takeover is only seen when the
 * grant comes first. granted_at_ms is each holder's wall clock at grant.
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
#include "backends/memory/mem_int.h"
#include "lib/clock.h"
#include "lib/keytab.h"
#include "lib/log.h"

extern const struct backend_ops memory_backend;

static struct mem_shard *shard_of(struct mem_be *m, uint64_t hash)
{
    return &m->shards[mem_shard_index(hash)];
}

void mem_notify(struct mem_be *m, const char *key, size_t len)
{
    if (m->hooks.notify != NULL)
        m->hooks.notify(m->hooks.arg, key, len);
}

void do_mem_entry_free(struct mem_shard *s, struct mem_entry *e)
{
    do_mem_due_drop(s, e);
    keytab_remove(&s->tab, &e->ke);
    do_mem_index_remove(s, e);
    free(e->more);
    free(e);
}

void do_mem_entry_idle(struct mem_shard *s, struct mem_entry *e, int64_t now)
{
    if (e->nheld > 0 || e->qhead != NULL)
        return;
    if (e->due_at == 0 && do_mem_due_room(s) != 0) {
        do_mem_entry_free(s, e); /* no room to wait in: goes now */
        return;
    }
    e->first.expires_mono = now + MEM_LINGER_MS;
    do_mem_due_set(s, e);
}

bool do_mem_wake_due(struct mem_entry *e)
{
    bool due = e->qhead != NULL || e->multi_wait;

    e->multi_wait = false;
    return due;
}

struct mem_entry *do_mem_entry_new(struct mem_shard *s,
                                   const char *key,
                                   size_t len,
                                   uint64_t hash)
{
    struct mem_entry *e = calloc(1, sizeof(*e) + len + 1);

    if (e == NULL)
        return NULL;
    memcpy(e->key, key, len);
    e->ke.key = e->key;
    e->ke.key_len = len;
    e->ke.hash = hash;
    keytab_insert(&s->tab, &e->ke);
    do_mem_index_add(s, e);
    return e;
}

/* ---- the FIFO of waiters ---- */

/* Take lw's place out of e's FIFO and free it. */
static void do_unqueue(struct mem_entry *e, struct lock_waiter *lw)
{
    struct mem_waiter *w = lw->be_data;

    if (w->prev != NULL)
        w->prev->next = w->next;
    else
        e->qhead = w->next;
    if (w->next != NULL)
        w->next->prev = w->prev;
    else
        e->qtail = w->prev;
    free(w);
    lw->be_data = NULL;
}

/* May w's leaving let a waiter behind it go? (It may be spurious: a key
 * held exclusively lets nobody go either way.) */
static bool do_leaving_wakes(const struct mem_entry *e,
                             const struct mem_waiter *w)
{
    return w->next != NULL && (e->nheld == 0 || e->mode == LOCK_SHARED);
}

/* A place at the tail of e's FIFO for req's waiter, with its mode and
 * limit: OK or NO_MEMORY. */
static enum backend_result do_enqueue(struct mem_entry *e,
                                      const struct lock_req *req)
{
    struct mem_waiter *w = calloc(1, sizeof(*w));

    if (w == NULL)
        return BACKEND_NO_MEMORY;
    w->entry = e;
    w->mode = (uint8_t)req->mode;
    w->limit = req->mode == LOCK_SHARED ? req->limit : 0;
    w->prev = e->qtail;
    if (e->qtail != NULL)
        e->qtail->next = w;
    else
        e->qhead = w;
    e->qtail = w;
    req->waiter->be_data = w;
    return BACKEND_OK;
}

/* ---- acquire ---- */

/* Do e's holders alone let req in: free, or shared with room under the
 * limit for a shared req? */
static bool do_holders_allow(const struct mem_entry *e,
                             const struct lock_req *req)
{
    if (e == NULL || e->nheld == 0)
        return true;
    if (req->mode != LOCK_SHARED || e->mode != LOCK_SHARED)
        return false;
    return e->limit == 0 || e->nheld < e->limit;
}

/* Do the waiters ahead of w (the whole queue when w is NULL) let req go
 * now? A try-once acquire never passes a waiter; an exclusive waiter goes
 * first or not at all; a shared one goes with the shared waiters ahead of
 * it while they and the holders leave room under the limit. */
static bool do_queue_allows(const struct mem_entry *e,
                            const struct mem_waiter *w,
                            const struct lock_req *req)
{
    uint32_t ahead = 0;

    if (e == NULL || e->qhead == w)
        return true;
    if (req->waiter == NULL || req->mode != LOCK_SHARED)
        return false;
    for (const struct mem_waiter *q = e->qhead; q != w; q = q->next) {
        if (q->mode != LOCK_SHARED)
            return false;
        ahead++;
        if (req->limit != 0 && e->nheld + ahead >= req->limit)
            return false;
    }
    return true;
}

/* req's Idempotency-Key names holder i of e: answer that grant again
 * (its waiter, if queued, leaves the queue as on a grant), or
 * IDEM_CONFLICT for another mode or limit. */
static enum backend_result do_replay(struct mem_entry *e,
                                     uint32_t i,
                                     const struct lock_req *req,
                                     int64_t now,
                                     struct lock_grant *out,
                                     bool *wake)
{
    const struct mem_holder *h = mem_holder_at(e, i);
    uint32_t limit = req->mode == LOCK_SHARED ? req->limit : 0;
    struct mem_waiter *w = req->waiter != NULL ? req->waiter->be_data : NULL;

    if (e->mode != (uint8_t)req->mode || e->limit != limit)
        return BACKEND_IDEM_CONFLICT;
    out->replay = true;
    mem_holder_token(h, out->token);
    out->fence = h->fence;
    out->ttl_ms = mem_holder_left(h, now);
    out->expires_at_ms = h->expires_wall;
    out->mode = (enum lock_mode)e->mode;
    out->limit = e->limit;
    out->holds = h->holds;
    if (w != NULL) {
        *wake = *wake || do_leaving_wakes(e, w);
        do_unqueue(e, req->waiter);
    }
    return BACKEND_OK;
}

/* The decision of acquire, *ep being key's entry (NULL: none) with its
 * expired holders gone; a new entry is left in *ep. *wake: the key is to
 * be notified. */
static enum backend_result do_acquire(struct mem_be *m,
                                      struct mem_shard *s,
                                      struct mem_entry **ep,
                                      const struct lock_req *req,
                                      uint64_t hash,
                                      int64_t now,
                                      struct lock_grant *out,
                                      bool *wake)
{
    struct mem_waiter *w = req->waiter != NULL ? req->waiter->be_data : NULL;
    struct mem_entry *e = *ep;
    int64_t i = -1;
    enum backend_result r;
    bool room;

    if (e != NULL && req->idem_key != NULL)
        i = do_mem_find_idem(e, req->idem_key);
    if (i >= 0)
        return do_replay(e, (uint32_t)i, req, now, out, wake);
    if (e != NULL && req->mode == LOCK_SHARED && e->nheld > 0 &&
        e->mode == LOCK_SHARED && e->limit != req->limit)
        return BACKEND_LIMIT_MISMATCH; /* whatever the waiter: no place */
    room = do_holders_allow(e, req);
    if (room && do_queue_allows(e, w, req)) {
        if (e == NULL) {
            e = do_mem_entry_new(s, req->key, req->key_len, hash);
            *ep = e;
        }
        if (e == NULL)
            return BACKEND_NO_MEMORY;
        r = do_mem_grant(m, e, req, now, out);
        if (r != BACKEND_OK)
            return r;
        if (w != NULL)
            do_unqueue(e, req->waiter);
        /* granted together: the shared waiters behind may go too */
        *wake = *wake || (req->mode == LOCK_SHARED && e->qhead != NULL);
        return BACKEND_OK;
    }
    if (req->waiter != NULL && w == NULL) { /* e exists: it refused */
        r = do_enqueue(e, req);
        if (r != BACKEND_OK)
            return r;
    }
    out->retry_ms = do_mem_first_expiry(e, now);
    out->behind = room;
    return BACKEND_HELD;
}

static enum backend_result mem_be_acquire(struct backend *be,
                                          const struct lock_req *req,
                                          struct lock_grant *out)
{
    struct mem_be *m = (struct mem_be *)be;
    uint64_t hash = keytab_hash(req->key, req->key_len);
    struct mem_shard *s = shard_of(m, hash);
    struct mem_entry *e;
    enum backend_result r;
    bool wake = false;
    int64_t now = clock_mono_ms();
    uint64_t gone = 0; /* the greatest fence this step expired */

    pthread_mutex_lock(&s->mu);
    e = (struct mem_entry *)keytab_find(&s->tab, req->key, req->key_len, hash);
    if (e != NULL && do_mem_expire(m, e, now, &gone) > 0)
        wake = do_mem_wake_due(e);
    r = do_acquire(m, s, &e, req, hash, now, out, &wake);
    if (r == BACKEND_OK && !out->replay)
        out->expired_fence = gone; /* a takeover */
    if (r != BACKEND_OK && r != BACKEND_HELD && e != NULL)
        do_mem_entry_idle(s, e, now);
    pthread_mutex_unlock(&s->mu);
    if (wake)
        mem_notify(m, req->key, req->key_len);
    return r;
}

/* ---- renew, release, inspect, cancel_wait ---- */

/* Find key's holder with token, after expiring what is due: OK (*idx
 * set), NOT_FOUND (no holder) or MISMATCH. *wake when a holder expired
 * with waiters queued. */
static enum backend_result do_find_held(struct mem_be *m,
                                        struct mem_shard *s,
                                        const struct lock_req *req,
                                        uint64_t hash,
                                        int64_t now,
                                        struct mem_entry **out,
                                        uint32_t *idx,
                                        bool *wake)
{
    struct mem_entry *e =
        (struct mem_entry *)keytab_find(&s->tab, req->key, req->key_len, hash);
    int64_t i;

    *out = e;
    if (e == NULL)
        return BACKEND_NOT_FOUND;
    if (do_mem_expire(m, e, now, NULL) > 0)
        *wake = do_mem_wake_due(e);
    if (e->nheld == 0)
        return BACKEND_NOT_FOUND;
    i = do_mem_find_token(e, req->token);
    if (i < 0)
        return BACKEND_MISMATCH;
    *idx = (uint32_t)i;
    return BACKEND_OK;
}

static enum backend_result do_renew(struct mem_entry *e,
                                    struct mem_holder *h,
                                    const struct lock_req *req,
                                    int64_t now,
                                    struct lock_grant *out)
{
    if (req->reenter && h->holds >= LOCK_HOLDS_MAX)
        return BACKEND_HOLDS_MAX;
    if (req->reenter)
        h->holds++;
    if (req->ttl_ms > 0)
        h->ttl_ms = req->ttl_ms;
    h->expires_mono = now + (int64_t)h->ttl_ms;
    h->expires_wall = clock_wall_ms() + (int64_t)h->ttl_ms;
    out->fence = h->fence;
    out->ttl_ms = h->ttl_ms;
    out->expires_at_ms = h->expires_wall;
    out->mode = (enum lock_mode)e->mode;
    out->limit = e->limit;
    out->holds = h->holds;
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
    uint32_t i = 0;
    bool wake = false;
    int64_t now = clock_mono_ms();
    enum backend_result r;

    pthread_mutex_lock(&s->mu);
    r = do_find_held(m, s, req, hash, now, &e, &i, &wake);
    if (r == BACKEND_OK) {
        r = do_renew(e, mem_holder_at(e, i), req, now, out);
        do_mem_due_set(s, e);
    } else if (e != NULL)
        do_mem_entry_idle(s, e, now);
    pthread_mutex_unlock(&s->mu);
    if (wake)
        mem_notify(m, req->key, req->key_len);
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
    struct mem_holder *h;
    uint32_t i = 0;
    bool wake = false;
    int64_t now = clock_mono_ms();
    enum backend_result r;

    pthread_mutex_lock(&s->mu);
    r = do_find_held(m, s, req, hash, now, &e, &i, &wake);
    if (r == BACKEND_OK) {
        h = mem_holder_at(e, i);
        if (req->all || h->holds <= 1) {
            out->granted_at_ms = h->granted_wall;
            do_mem_unhold(m, e, i);
            out->holds = 0;
            wake = do_mem_wake_due(e) || wake;
        } else {
            out->holds = --h->holds;
        }
    }
    if (e != NULL)
        do_mem_entry_idle(s, e, now);
    pthread_mutex_unlock(&s->mu);
    if (wake)
        mem_notify(m, req->key, req->key_len);
    return r;
}

/* Inspect key (out: its holders, as inspect shows them); with force, then
 * remove every holder at once, whatever its holds: the fence counter is
 * the store's (mem_be.fence), so the next grant's fence is greater. */
static enum backend_result mem_read_holders(struct mem_be *m,
                                            const char *key,
                                            size_t key_len,
                                            bool force,
                                            struct lock_info *out)
{
    uint64_t hash = keytab_hash(key, key_len);
    struct mem_shard *s = shard_of(m, hash);
    struct mem_entry *e;
    bool wake = false;
    int64_t now = clock_mono_ms();
    enum backend_result r = BACKEND_NOT_FOUND;

    pthread_mutex_lock(&s->mu);
    e = (struct mem_entry *)keytab_find(&s->tab, key, key_len, hash);
    if (e != NULL && do_mem_expire(m, e, now, NULL) > 0)
        wake = do_mem_wake_due(e);
    if (e != NULL && e->nheld > 0)
        r = do_mem_fill_info(e, now, out); /* first: NO_MEMORY changes
                                              nothing */
    if (r == BACKEND_OK && force) {
        while (e->nheld > 0) /* from the last: nothing moves */
            do_mem_unhold(m, e, e->nheld - 1);
        wake = do_mem_wake_due(e) || wake;
    }
    if (e != NULL)
        do_mem_entry_idle(s, e, now); /* only when no one holds or waits */
    pthread_mutex_unlock(&s->mu);
    if (wake)
        mem_notify(m, key, key_len);
    return r;
}

static enum backend_result mem_be_inspect(struct backend *be,
                                          const char *key,
                                          size_t key_len,
                                          struct lock_info *out)
{
    return mem_read_holders((struct mem_be *)be, key, key_len, false, out);
}

static enum backend_result mem_be_force_release(struct backend *be,
                                                const char *key,
                                                size_t key_len,
                                                struct lock_info *out)
{
    return mem_read_holders((struct mem_be *)be, key, key_len, true, out);
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
    wake = do_leaving_wakes(e, w);
    do_unqueue(e, waiter);
    /* the place may have kept a multi-key acquire out */
    wake = (e->multi_wait && do_mem_wake_due(e)) || wake;
    do_mem_entry_idle(s, e, clock_mono_ms());
    pthread_mutex_unlock(&s->mu);
    if (wake)
        mem_notify(m, key, key_len);
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

/* ---- open and close ---- */

static void free_entry(struct keytab_entry *ke, void *arg)
{
    (void)arg;
    mem_entry_free((struct mem_entry *)ke);
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
        free(m->shards[i].due);
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
    err = pthread_create(&m->sweeper, NULL, mem_sweeper_main, m);
    if (err != 0) {
        log_error("memory: cannot start the sweeper thread: %s", strerror(err));
        mem_be_close(&m->base);
        return BACKEND_NO_MEMORY;
    }
    m->sweeper_started = true;
    *out = &m->base;
    return BACKEND_OK;
}

/* Locks live in this process only; fences come from mem_be_open()'s seed. */
static void mem_be_describe(const struct backend *b,
                            struct backend_topology *out)
{
    (void)b;
    snprintf(out->topology, sizeof(out->topology), "process");
    snprintf(out->fence, sizeof(out->fence),
             "a counter in the process, seeded from the wall clock in "
             "microseconds at start");
    snprintf(out->failover, sizeof(out->failover),
             "everything: locks are lost when the process exits (fences of "
             "the next start still grow while the wall clock does)");
    out->nodes = 0;
}

const struct backend_ops memory_backend = {
    .scheme = "memory",
    .caps = BACKEND_CAP_QUEUE | BACKEND_CAP_NOTIFIES,
    .open = mem_be_open,
    .acquire = mem_be_acquire,
    .renew = mem_be_renew,
    .release = mem_be_release,
    .inspect = mem_be_inspect,
    .cancel_wait = mem_be_cancel_wait,
    .acquire_multi = mem_be_acquire_multi,
    .renew_multi = mem_be_renew_multi,
    .release_multi = mem_be_release_multi,
    .list = mem_be_list,
    .force_release = mem_be_force_release,
    .ping = mem_be_ping,
    .held_count = mem_be_held_count,
    .close = mem_be_close,
    .describe = mem_be_describe,
};
