/*
 * backends/memory/list.c - list() on the memory store: a k-way merge of
 * the 64 shards' key orders (index.c). Each shard has a frontier: the
 * next key of it to show (read, with its summary, under that shard's
 * mutex alone), or where it stopped; the least frontier is taken, and that
 * shard alone is read again past it. No two shard mutexes are ever held,
 * and none across shards: a key held throughout sits in its shard's index
 * throughout, so each shard's seek finds it once, in order.
 *
 * Cost: a call looks at no more than MEM_SHARDS + limit + its budget of
 * skipped entries (2 * limit + MEM_SHARDS) entries, each one seek of
 * O(log n) from its shard's root: bounded by about 3 * limit + 128 seeks,
 * whatever the number of keys. Skipped are the entries with no live
 * holder: those with waiters only, and those whose holders' TTLs have
 * passed but that the sweeper has not reached yet (list changes nothing).
 * When the budget runs out, the shard that ran out stops at the last key
 * it looked at; once that is the least frontier the page ends there (more,
 * resume = that key): every shard has then looked at every key up to it.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/memory/mem_int.h"
#include "lib/clock.h"

struct front {
    struct lock_entry ent; /* the key to show next (or stopped at) */
    bool stopped;          /* the budget ran out at ent.key */
};

struct listing {
    struct mem_be *m;
    const struct lock_list_req *req;
    size_t budget;             /* entries that may still be skipped */
    struct front *f;           /* owned: MEM_SHARDS of them */
    unsigned heap[MEM_SHARDS]; /* shards with a frontier, least first */
    size_t nheap;
};

static bool has_prefix(const struct lock_list_req *req,
                       const struct mem_entry *e)
{
    return req->prefix_len == 0 ||
           (e->ke.key_len >= req->prefix_len &&
            memcmp(e->key, req->prefix, req->prefix_len) == 0);
}

/* Read shard i's next frontier, the first key after from (or from itself
 * with inclusive) that starts with the prefix: true if there is one
 * (live, or where the budget ran out), false when the shard has no more. */
static bool refill(struct listing *x,
                   unsigned i,
                   const char *from,
                   size_t from_len,
                   bool inclusive)
{
    struct mem_shard *s = &x->m->shards[i];
    struct front *f = &x->f[i];
    struct mem_entry *e;
    bool found = false;
    int64_t now;

    pthread_mutex_lock(&s->mu);
    now = clock_mono_ms();
    e = do_mem_index_next(s, from, from_len, inclusive);
    while (e != NULL && has_prefix(x->req, e)) {
        if (do_mem_fill_entry(e, now, &f->ent)) {
            f->stopped = false;
            found = true;
            break;
        }
        if (x->budget == 0) { /* stop here: every key up to it was seen */
            memcpy(f->ent.key, e->key, e->ke.key_len);
            f->ent.key[e->ke.key_len] = '\0';
            f->ent.key_len = e->ke.key_len;
            f->stopped = true;
            found = true;
            break;
        }
        x->budget--;
        e = do_mem_index_next(s, e->key, e->ke.key_len, false);
    }
    pthread_mutex_unlock(&s->mu);
    return found;
}

static bool front_less(const struct listing *x, unsigned a, unsigned b)
{
    const struct lock_entry *p = &x->f[a].ent, *q = &x->f[b].ent;

    return mem_key_cmp(p->key, p->key_len, q->key, q->key_len) < 0;
}

/* Restore the heap order from slot k down. */
static void sift_down(struct listing *x, size_t k)
{
    for (;;) {
        size_t least = k, l = 2 * k + 1, r = 2 * k + 2;
        unsigned t;
        if (l < x->nheap && front_less(x, x->heap[l], x->heap[least]))
            least = l;
        if (r < x->nheap && front_less(x, x->heap[r], x->heap[least]))
            least = r;
        if (least == k)
            return;
        t = x->heap[k];
        x->heap[k] = x->heap[least];
        x->heap[least] = t;
        k = least;
    }
}

/* Every shard's first frontier after req->after, in a heap. */
static void start(struct listing *x)
{
    const struct lock_list_req *req = x->req;
    const char *from = req->prefix != NULL ? req->prefix : "";
    size_t from_len = req->prefix_len;
    bool inclusive = true;

    /* after the cursor, unless the cursor sorts before the prefix */
    if (req->after != NULL &&
        mem_key_cmp(req->after, req->after_len, from, from_len) >= 0) {
        from = req->after;
        from_len = req->after_len;
        inclusive = false;
    }
    for (unsigned i = 0; i < MEM_SHARDS; i++)
        if (refill(x, i, from, from_len, inclusive))
            x->heap[x->nheap++] = i;
    for (size_t k = x->nheap / 2; k-- > 0;)
        sift_down(x, k);
}

/* Take the least frontier while the page has room; say where it ended. */
static void merge(struct listing *x, struct lock_list *out)
{
    uint32_t limit = x->req->limit;

    while (x->nheap > 0) {
        unsigned i = x->heap[0];
        struct lock_entry *ent;
        if (out->n == limit || x->f[i].stopped) {
            /* a full page resumes after its last key (backend.h) */
            const struct lock_entry *at =
                out->n == limit ? &out->entries[out->n - 1] : &x->f[i].ent;
            out->more = true;
            memcpy(out->resume, at->key, at->key_len + 1);
            out->resume_len = at->key_len;
            return;
        }
        ent = &out->entries[out->n++];
        *ent = x->f[i].ent;
        if (!refill(x, i, ent->key, ent->key_len, false))
            x->heap[0] = x->heap[--x->nheap];
        sift_down(x, 0);
    }
}

enum backend_result mem_be_list(struct backend *be,
                                const struct lock_list_req *req,
                                struct lock_list *out)
{
    struct listing x = { .m = (struct mem_be *)be,
                         .req = req,
                         .budget = 2 * (size_t)req->limit + MEM_SHARDS };

    x.f = malloc(MEM_SHARDS * sizeof(*x.f));
    if (x.f == NULL)
        return BACKEND_NO_MEMORY;
    start(&x);
    merge(&x, out);
    free(x.f);
    return BACKEND_OK;
}
