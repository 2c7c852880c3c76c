/*
 * backends/memory/multi.c - several keys at once on the memory store:
 * acquire_multi, renew_multi and release_multi, each one step under the
 * mutexes of every shard its keys fall in. They are taken in ascending
 * shard order and given back in reverse; a single-key call holds one shard
 * mutex and the sweeper one at a time, so no two calls ever wait for each
 * other in a cycle. A refused multi-key acquire keeps no place in any
 * FIFO: it marks the keys it was refused for (mem_entry.multi_wait), so
 * their next release, expiry or given-up place is notified.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/memory/mem_int.h"
#include "lib/clock.h"
#include "lib/keytab.h"

/* One multi-key call: the keys' entries under the locked shards. */
struct multi {
    struct mem_be *m;
    const struct lock_multi_req *req;
    uint64_t locked; /* bit i: shard i's mutex is ours */
    int64_t now;     /* monotonic ms, read under the mutexes */
    uint64_t hash[LOCK_MULTI_MAX];
    struct mem_entry *e[LOCK_MULTI_MAX]; /* NULL: no entry */
    uint32_t idx[LOCK_MULTI_MAX];        /* renew: the token's holder */
    bool wake[LOCK_MULTI_MAX];           /* notify the key after unlock */
};

_Static_assert(MEM_SHARDS <= 64, "one bit per shard in multi.locked");

static struct mem_shard *multi_shard(struct multi *x, size_t i)
{
    return &x->m->shards[mem_shard_index(x->hash[i])];
}

/* Lock every shard of req's keys in ascending order, then find the keys'
 * entries and expire what is due (noting the keys to notify). */
static void
multi_begin(struct multi *x, struct mem_be *m, const struct lock_multi_req *req)
{
    memset(x, 0, sizeof(*x));
    x->m = m;
    x->req = req;
    for (size_t i = 0; i < req->n; i++) {
        x->hash[i] = keytab_hash(req->keys[i], req->key_lens[i]);
        x->locked |= UINT64_C(1) << mem_shard_index(x->hash[i]);
    }
    for (unsigned s = 0; s < MEM_SHARDS; s++)
        if (x->locked & (UINT64_C(1) << s))
            pthread_mutex_lock(&m->shards[s].mu);
    x->now = clock_mono_ms();
    for (size_t i = 0; i < req->n; i++) {
        struct mem_entry *e = (struct mem_entry *)keytab_find(
            &multi_shard(x, i)->tab, req->keys[i], req->key_lens[i],
            x->hash[i]);
        x->e[i] = e;
        if (e != NULL && do_mem_expire(m, e, x->now, NULL) > 0)
            x->wake[i] = do_mem_wake_due(e);
    }
}

/* Let the entries left idle linger, unlock in reverse order, then
 * notify. */
static void multi_end(struct multi *x)
{
    const struct lock_multi_req *req = x->req;

    for (size_t i = 0; i < req->n; i++)
        if (x->e[i] != NULL)
            do_mem_entry_idle(multi_shard(x, i), x->e[i], x->now);
    for (unsigned s = MEM_SHARDS; s-- > 0;)
        if (x->locked & (UINT64_C(1) << s))
            pthread_mutex_unlock(&x->m->shards[s].mu);
    for (size_t i = 0; i < req->n; i++)
        if (x->wake[i])
            mem_notify(x->m, req->keys[i], req->key_lens[i]);
}

/* ---- acquire ---- */

/* Is any key held or queued for? Mark those in out->held, with the hint,
 * and mark their entries so that a change is notified. */
static bool do_multi_refused(struct multi *x, struct lock_multi_grant *out)
{
    uint64_t least = UINT64_MAX;
    bool refused = false;

    for (size_t i = 0; i < x->req->n; i++) {
        struct mem_entry *e = x->e[i];
        if (e == NULL || (e->nheld == 0 && e->qhead == NULL))
            continue;
        out->held[i] = true;
        e->multi_wait = true;
        refused = true;
        if (e->nheld > 0) {
            uint64_t left = do_mem_first_expiry(e, x->now);
            least = left < least ? left : least;
        }
    }
    out->retry_ms = least == UINT64_MAX ? 0 : least;
    return refused;
}

/* Grant every key (all free, nobody queued): OK, or NO_MEMORY with the
 * grants made so far taken back (their fences are spent, never reused). */
static enum backend_result do_multi_grant(struct multi *x,
                                          struct lock_multi_grant *out)
{
    const struct lock_multi_req *req = x->req;
    struct lock_req one = { .token = req->token,
                            .owner = req->owner,
                            .ttl_ms = req->ttl_ms,
                            .mode = LOCK_EXCLUSIVE };
    size_t i;

    for (i = 0; i < req->n; i++) {
        struct lock_grant g = { 0 };
        if (x->e[i] == NULL)
            x->e[i] = do_mem_entry_new(multi_shard(x, i), req->keys[i],
                                       req->key_lens[i], x->hash[i]);
        one.key = req->keys[i];
        one.key_len = req->key_lens[i];
        if (x->e[i] == NULL ||
            do_mem_grant(x->m, x->e[i], &one, x->now, &g) != BACKEND_OK)
            break;
        out->fences[i] = g.fence;
        if (i == 0 || g.expires_at_ms < out->expires_at_ms)
            out->expires_at_ms = g.expires_at_ms;
    }
    if (i == req->n) {
        out->ttl_ms = req->ttl_ms;
        return BACKEND_OK;
    }
    while (i-- > 0) /* each entry was free: its holder is number 0 */
        do_mem_unhold(x->m, x->e[i], 0);
    memset(out->fences, 0, sizeof(out->fences));
    out->expires_at_ms = 0;
    return BACKEND_NO_MEMORY;
}

enum backend_result mem_be_acquire_multi(struct backend *be,
                                         const struct lock_multi_req *req,
                                         struct lock_multi_grant *out)
{
    struct multi x;
    enum backend_result r;

    multi_begin(&x, (struct mem_be *)be, req);
    if (do_multi_refused(&x, out))
        r = BACKEND_HELD;
    else
        r = do_multi_grant(&x, out);
    multi_end(&x);
    return r;
}

/* ---- renew ---- */

/* The first key (in req order) the token does not hold: NOT_FOUND or
 * MISMATCH with out->bad; OK with x->idx set when it holds them all. */
static enum backend_result do_multi_find(struct multi *x,
                                         struct lock_multi_grant *out)
{
    for (size_t i = 0; i < x->req->n; i++) {
        struct mem_entry *e = x->e[i];
        int64_t k;
        if (e == NULL || e->nheld == 0) {
            out->bad = i;
            return BACKEND_NOT_FOUND;
        }
        k = do_mem_find_token(e, x->req->token);
        if (k < 0) {
            out->bad = i;
            return BACKEND_MISMATCH;
        }
        x->idx[i] = (uint32_t)k;
    }
    return BACKEND_OK;
}

static void do_multi_renew(struct multi *x, struct lock_multi_grant *out)
{
    int64_t wall = clock_wall_ms();

    for (size_t i = 0; i < x->req->n; i++) {
        struct mem_holder *h = mem_holder_at(x->e[i], x->idx[i]);
        if (x->req->ttl_ms > 0)
            h->ttl_ms = x->req->ttl_ms;
        h->expires_mono = x->now + (int64_t)h->ttl_ms;
        h->expires_wall = wall + (int64_t)h->ttl_ms;
        do_mem_due_set(mem_shard_of(x->m, x->e[i]), x->e[i]);
        out->fences[i] = h->fence;
        if (i == 0 || h->ttl_ms < out->ttl_ms)
            out->ttl_ms = h->ttl_ms;
        if (i == 0 || h->expires_wall < out->expires_at_ms)
            out->expires_at_ms = h->expires_wall;
    }
}

enum backend_result mem_be_renew_multi(struct backend *be,
                                       const struct lock_multi_req *req,
                                       struct lock_multi_grant *out)
{
    struct multi x;
    enum backend_result r;

    multi_begin(&x, (struct mem_be *)be, req);
    r = do_multi_find(&x, out);
    if (r == BACKEND_OK)
        do_multi_renew(&x, out);
    multi_end(&x);
    return r;
}

/* ---- release ---- */

enum backend_result mem_be_release_multi(struct backend *be,
                                         const struct lock_multi_req *req,
                                         struct lock_multi_grant *out)
{
    struct multi x;
    bool any = false;

    multi_begin(&x, (struct mem_be *)be, req);
    for (size_t i = 0; i < req->n; i++) {
        struct mem_entry *e = x.e[i];
        int64_t k = e != NULL ? do_mem_find_token(e, req->token) : -1;
        if (k < 0)
            continue;
        do_mem_unhold(x.m, e, (uint32_t)k); /* every hold at once */
        out->released[i] = true;
        any = true;
        x.wake[i] = do_mem_wake_due(e) || x.wake[i];
    }
    multi_end(&x);
    return any ? BACKEND_OK : BACKEND_NOT_FOUND;
}
