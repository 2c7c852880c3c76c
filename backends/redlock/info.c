/*
 * backends/redlock/info.c - inspect and force_release over the nodes.
 * inspect shows a holder only where a majority of the voting nodes has
 * it (matched by fence: the write-back gave every granting node the same
 * one), with what the majority agrees is left of its TTL, less the drift.
 * force_release frees the key on every node it reaches.
 */
#include "backends/redlock/redlock_int.h"

#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"

/* A holder seen on nodes: its fence, and on which node's answer. */
struct redlock_seen {
    uint64_t fence;
    uint64_t ttl_ms;             /* agreed, less the drift */
    const struct lock_holder *h; /* one node's copy (borrowed) */
};

/* The fan's answers to inspect (or force) into info[] and the results. */
static void redlock_info_votes(struct redlock_be *be,
                               const struct redis_fan *f,
                               bool force,
                               struct lock_info *info,
                               enum backend_result *res,
                               bool *counts)
{
    bool voting[REDLOCK_NODES_MAX];

    redlock_voting(be, f, voting, NULL);
    for (size_t i = 0; i < be->n; i++) {
        res[i] = BACKEND_UNAVAILABLE;
        if (f[i].reply != NULL)
            res[i] =
                force ? redis_reply_force(be->nodes[i], f[i].reply, &info[i])
                      : redis_reply_inspect(be->nodes[i], f[i].reply, &info[i]);
        counts[i] =
            voting[i] && (res[i] == BACKEND_OK || res[i] == BACKEND_NOT_FOUND);
    }
}

/* Inspect (or force) key on every node at once: each node's answer into
 * info[] (zeroed first), res[] and counts[] as redlock_info_votes() says.
 * 0, or -1 (no memory: nothing was sent, info[] untouched). */
static int redlock_info_fan(struct redlock_be *be,
                            const char *key,
                            size_t key_len,
                            bool force,
                            struct lock_info *info,
                            enum backend_result *res,
                            bool *counts)
{
    struct redis_fan f[REDLOCK_NODES_MAX];
    struct redis_call c;

    if ((force ? redis_call_force(be->nodes[0], key, key_len, &c)
               : redis_call_inspect(be->nodes[0], key, key_len, &c)) != 0)
        return -1;
    memset(info, 0, be->n * sizeof(*info));
    redlock_fan(be, NULL, &c, clock_mono_us() + be->timeout_ms * 1000, f);
    redis_call_free(&c);
    redlock_info_votes(be, f, force, info, res, counts);
    redis_fan_clear(f, be->n);
    return 0;
}

/* Is fence among info's holders: that holder, or NULL. */
static const struct lock_holder *redlock_find(const struct lock_info *info,
                                              uint64_t fence)
{
    for (uint32_t k = 0; k < info->nholders; k++)
        if (info->holders[k].fence == fence)
            return &info->holders[k];
    return NULL;
}

/* The holders a quorum of counted answers shows, ascending by fence:
 * how many went into seen (room for max). */
static size_t redlock_live(struct redlock_be *be,
                           const struct lock_info *info,
                           const enum backend_result *res,
                           const bool *counts,
                           struct redlock_seen *seen,
                           size_t max)
{
    size_t m = 0;

    for (size_t i = 0; i < be->n; i++) {
        if (!counts[i] || res[i] != BACKEND_OK)
            continue;
        for (uint32_t k = 0; k < info[i].nholders; k++) {
            uint64_t fence = info[i].holders[k].fence, ttls[REDLOCK_NODES_MAX];
            size_t c = 0, at = m;
            int64_t ttl;

            for (size_t j = 0; j < m; j++)
                if (seen[j].fence == fence)
                    at = j;
            if (at < m || m == max)
                continue;
            for (size_t j = 0; j < be->n; j++) {
                const struct lock_holder *h =
                    counts[j] && res[j] == BACKEND_OK
                        ? redlock_find(&info[j], fence)
                        : NULL;
                if (h != NULL)
                    ttls[c++] = h->ttl_ms;
            }
            if (c < be->quorum)
                continue;
            ttl = (int64_t)redlock_kth_largest(ttls, c, be->quorum);
            ttl -= redlock_drift(be, (uint64_t)ttl);
            if (ttl <= 0)
                continue;
            /* insert, ascending by fence */
            while (at > 0 && seen[at - 1].fence > fence) {
                seen[at] = seen[at - 1];
                at--;
            }
            seen[at] = (struct redlock_seen){ .fence = fence,
                                              .ttl_ms = (uint64_t)ttl,
                                              .h = &info[i].holders[k] };
            m++;
        }
    }
    return m;
}

/* Build out from the live holders and the first counted OK answer. */
static enum backend_result redlock_info_out(const struct lock_info *from,
                                            const struct redlock_seen *seen,
                                            size_t m,
                                            struct lock_info *out)
{
    int64_t now = clock_wall_ms();

    out->holders = calloc(m, sizeof(*out->holders));
    if (out->holders == NULL)
        return BACKEND_NO_MEMORY;
    out->mode = from->mode;
    out->limit = from->limit;
    out->holder_count = (uint32_t)m;
    out->nholders = (uint32_t)m;
    for (size_t k = 0; k < m; k++) {
        struct lock_holder *h = &out->holders[k];
        *h = *seen[k].h;
        h->ttl_ms = seen[k].ttl_ms;
        h->expires_at_ms = now + (int64_t)h->ttl_ms;
        if (h->fence > out->fence)
            out->fence = h->fence;
        if (h->ttl_ms > out->ttl_ms) {
            out->ttl_ms = h->ttl_ms;
            out->expires_at_ms = h->expires_at_ms;
        }
    }
    if (out->mode == LOCK_EXCLUSIVE) {
        out->has_owner = out->holders[0].has_owner;
        memcpy(out->owner, out->holders[0].owner, sizeof(out->owner));
        out->holds = out->holders[0].holds;
    }
    return BACKEND_OK;
}

enum backend_result redlock_inspect(struct backend *b,
                                    const char *key,
                                    size_t key_len,
                                    struct lock_info *out)
{
    struct redlock_be *be = (struct redlock_be *)b;
    struct lock_info info[REDLOCK_NODES_MAX];
    enum backend_result res[REDLOCK_NODES_MAX], r = BACKEND_NOT_FOUND;
    bool counts[REDLOCK_NODES_MAX];
    struct redlock_seen *seen;
    size_t answered = 0, m, from = 0;

    seen = calloc(LOCK_HOLDERS_SHOWN, sizeof(*seen));
    if (seen == NULL ||
        redlock_info_fan(be, key, key_len, false, info, res, counts) != 0) {
        free(seen);
        return BACKEND_NO_MEMORY;
    }
    for (size_t i = 0; i < be->n; i++)
        answered += counts[i];
    m = redlock_live(be, info, res, counts, seen, LOCK_HOLDERS_SHOWN);
    for (size_t i = be->n; i-- > 0;)
        if (counts[i] && res[i] == BACKEND_OK)
            from = i;
    if (answered < be->quorum)
        r = BACKEND_UNAVAILABLE;
    else if (m > 0)
        r = redlock_info_out(&info[from], seen, m, out);
    for (size_t i = 0; i < be->n; i++)
        lock_info_clear(&info[i]);
    free(seen);
    return r;
}

enum backend_result redlock_force_release(struct backend *b,
                                          const char *key,
                                          size_t key_len,
                                          struct lock_info *out)
{
    struct redlock_be *be = (struct redlock_be *)b;
    struct lock_info info[REDLOCK_NODES_MAX];
    enum backend_result res[REDLOCK_NODES_MAX], r = BACKEND_UNAVAILABLE;
    bool counts[REDLOCK_NODES_MAX];
    size_t notfound = 0, best = REDLOCK_NODES_MAX;
    uint64_t fence = 0;

    if (redlock_info_fan(be, key, key_len, true, info, res, counts) != 0)
        return BACKEND_NO_MEMORY;
    for (size_t i = 0; i < be->n; i++) {
        notfound += counts[i] && res[i] == BACKEND_NOT_FOUND;
        if (!counts[i] || res[i] != BACKEND_OK)
            continue;
        if (info[i].fence > fence)
            fence = info[i].fence;
        if (best == REDLOCK_NODES_MAX ||
            info[i].holder_count > info[best].holder_count)
            best = i;
    }
    if (best < REDLOCK_NODES_MAX) {
        *out = info[best]; /* its holders move to out */
        memset(&info[best], 0, sizeof(info[best]));
        out->fence = fence;
        r = BACKEND_OK;
    } else if (notfound >= be->quorum) {
        r = BACKEND_NOT_FOUND;
    }
    for (size_t i = 0; i < be->n; i++)
        lock_info_clear(&info[i]);
    if (r == BACKEND_OK)
        redlock_notify(be, key, key_len);
    return r;
}
