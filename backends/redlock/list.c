/*
 * backends/redlock/list.c - list and held_count over the nodes. A key is
 * listed when a majority of the voting nodes list it (a minority may
 * still hold an undone or expiring grant); its fields are those of the
 * node that shows the greatest fence. When a node stopped its page early
 * (more), the merged page stops at the earliest such resume key: past
 * it, that node has not said yet, so those keys are left to the next
 * page. The cost is N times the redis adapter's for the same page.
 */
#include "backends/redlock/redlock_int.h"

#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"

/* memcmp order, a key before every longer key it starts. */
static int redlock_keycmp(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);

    if (c != 0)
        return c;
    return an < bn ? -1 : an > bn;
}

static int redlock_entry_cmp(const void *x, const void *y)
{
    const struct lock_entry *a = *(const struct lock_entry *const *)x;
    const struct lock_entry *b = *(const struct lock_entry *const *)y;

    return redlock_keycmp(a->key, a->key_len, b->key, b->key_len);
}

/* The pages of the counted nodes merged into out. */
static enum backend_result redlock_merge(struct redlock_be *be,
                                         const struct lock_list_req *req,
                                         struct lock_list *pages,
                                         const bool *counts,
                                         struct lock_list *out)
{
    const struct lock_list *cut = NULL;
    const struct lock_entry **all;
    size_t m = 0;

    for (size_t i = 0; i < be->n; i++)
        if (counts[i] && pages[i].more &&
            (cut == NULL || redlock_keycmp(pages[i].resume, pages[i].resume_len,
                                           cut->resume, cut->resume_len) < 0))
            cut = &pages[i];
    all = malloc(be->n * req->limit * sizeof(*all));
    if (all == NULL)
        return BACKEND_NO_MEMORY;
    for (size_t i = 0; i < be->n; i++)
        for (size_t k = 0; counts[i] && k < pages[i].n; k++)
            if (cut == NULL ||
                redlock_keycmp(pages[i].entries[k].key,
                               pages[i].entries[k].key_len, cut->resume,
                               cut->resume_len) <= 0)
                all[m++] = &pages[i].entries[k];
    qsort(all, m, sizeof(*all), redlock_entry_cmp);
    for (size_t a = 0, z; a < m; a = z) {
        const struct lock_entry *best = all[a];
        for (z = a + 1; z < m && redlock_entry_cmp(&all[a], &all[z]) == 0; z++)
            if (all[z]->fence > best->fence)
                best = all[z];
        if (z - a < be->quorum)
            continue;
        if (out->n == req->limit) {
            out->more = true; /* resume: the last one listed */
            break;
        }
        out->entries[out->n++] = *best;
    }
    if (cut != NULL && !out->more) {
        out->more = true;
        memcpy(out->resume, cut->resume, cut->resume_len);
        out->resume_len = cut->resume_len;
    } else if (out->more) {
        const struct lock_entry *e = &out->entries[out->n - 1];
        memcpy(out->resume, e->key, e->key_len);
        out->resume_len = e->key_len;
    }
    out->resume[out->resume_len] = '\0';
    free(all);
    return BACKEND_OK;
}

enum backend_result redlock_list(struct backend *b,
                                 const struct lock_list_req *req,
                                 struct lock_list *out)
{
    struct redlock_be *be = (struct redlock_be *)b;
    struct lock_list pages[REDLOCK_NODES_MAX];
    struct redis_fan f[REDLOCK_NODES_MAX];
    bool voting[REDLOCK_NODES_MAX], counts[REDLOCK_NODES_MAX];
    enum backend_result r = BACKEND_UNAVAILABLE;
    struct redis_call c;
    size_t answered = 0;

    memset(pages, 0, sizeof(pages));
    for (size_t i = 0; i < be->n; i++) {
        pages[i].entries = calloc(req->limit, sizeof(struct lock_entry));
        if (pages[i].entries == NULL)
            r = BACKEND_NO_MEMORY;
    }
    if (r == BACKEND_NO_MEMORY || redis_call_list(be->nodes[0], req, &c) != 0) {
        for (size_t i = 0; i < be->n; i++)
            free(pages[i].entries);
        return BACKEND_NO_MEMORY;
    }
    redlock_fan(be, NULL, &c, clock_mono_us() + be->timeout_ms * 1000, f);
    redis_call_free(&c);
    redlock_voting(be, f, voting, NULL);
    for (size_t i = 0; i < be->n; i++) {
        counts[i] = voting[i] && redis_reply_list(be->nodes[i], req, f[i].reply,
                                                  &pages[i]) == BACKEND_OK;
        answered += counts[i];
    }
    redis_fan_clear(f, be->n);
    if (answered >= be->quorum)
        r = redlock_merge(be, req, pages, counts, out);
    for (size_t i = 0; i < be->n; i++)
        free(pages[i].entries);
    return r;
}

int64_t redlock_held_count(struct backend *b)
{
    struct redlock_be *be = (struct redlock_be *)b;
    struct redis_fan f[REDLOCK_NODES_MAX];
    bool voting[REDLOCK_NODES_MAX];
    uint64_t held[REDLOCK_NODES_MAX];
    struct redis_call c;
    size_t m = 0;

    if (redis_call_held(be->nodes[0], &c) != 0)
        return -1;
    redlock_fan(be, NULL, &c, clock_mono_us() + REDLOCK_HELD_MS * 1000, f);
    redis_call_free(&c);
    redlock_voting(be, f, voting, NULL);
    for (size_t i = 0; i < be->n; i++) {
        int64_t h = voting[i] ? redis_reply_held(f[i].reply) : -1;
        if (h >= 0)
            held[m++] = (uint64_t)h;
    }
    redis_fan_clear(f, be->n);
    if (m < be->quorum)
        return -1;
    return (int64_t)redlock_kth_largest(held, m, be->quorum);
}
