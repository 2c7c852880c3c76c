/*
 * backends/memory/index.c - each shard's entries in key byte order, for
 * list(): a treap (a binary search tree by key that is also a heap by a
 * random priority) threaded through the entries themselves, two pointers
 * each (mem_entry.lo, hi), so it costs no allocation and 16 bytes a key.
 * The priority is the key's SipHash, seeded at random per process, so
 * clients cannot choose keys that unbalance it: the expected depth is
 * about 2 ln n. Insert, remove and seek walk down from the root without
 * recursion; all run under the shard's mutex.
 */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "backends/memory/mem_int.h"

int mem_key_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);

    if (c != 0)
        return c;
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

static int entry_cmp(const struct mem_entry *a, const struct mem_entry *b)
{
    return mem_key_cmp(a->key, a->ke.key_len, b->key, b->ke.key_len);
}

/* Cut the treap t into the entries before e's key (*lo) and after (*hi). */
static void split(struct mem_entry *t,
                  const struct mem_entry *e,
                  struct mem_entry **lo,
                  struct mem_entry **hi)
{
    while (t != NULL) {
        if (entry_cmp(t, e) < 0) {
            *lo = t;
            lo = &t->hi;
            t = t->hi;
        } else {
            *hi = t;
            hi = &t->lo;
            t = t->lo;
        }
    }
    *lo = NULL;
    *hi = NULL;
}

/* One treap of a's entries and b's, every key of a before every key of b. */
static struct mem_entry *merge(struct mem_entry *a, struct mem_entry *b)
{
    struct mem_entry *root = NULL, **p = &root;

    while (a != NULL && b != NULL) {
        if (a->ke.hash >= b->ke.hash) {
            *p = a;
            p = &a->hi;
            a = a->hi;
        } else {
            *p = b;
            p = &b->lo;
            b = b->lo;
        }
    }
    *p = a != NULL ? a : b;
    return root;
}

void do_mem_index_add(struct mem_shard *s, struct mem_entry *e)
{
    struct mem_entry **p = &s->index;

    /* down to where e's priority puts it, then the subtree there is cut
     * around e's key into e's two children */
    while (*p != NULL && (*p)->ke.hash > e->ke.hash)
        p = entry_cmp(e, *p) < 0 ? &(*p)->lo : &(*p)->hi;
    split(*p, e, &e->lo, &e->hi);
    *p = e;
}

void do_mem_index_remove(struct mem_shard *s, struct mem_entry *e)
{
    struct mem_entry **p = &s->index;

    while (*p != NULL && *p != e)
        p = entry_cmp(e, *p) < 0 ? &(*p)->lo : &(*p)->hi;
    if (*p == NULL)
        return; /* not indexed: cannot happen, and harmless */
    *p = merge(e->lo, e->hi);
    e->lo = NULL;
    e->hi = NULL;
}

struct mem_entry *do_mem_index_next(const struct mem_shard *s,
                                    const char *key,
                                    size_t len,
                                    bool inclusive)
{
    struct mem_entry *t = s->index, *best = NULL;

    while (t != NULL) {
        int c = mem_key_cmp(t->key, t->ke.key_len, key, len);
        if (c > 0 || (c == 0 && inclusive)) {
            best = t;
            t = t->lo;
        } else {
            t = t->hi;
        }
    }
    return best;
}
