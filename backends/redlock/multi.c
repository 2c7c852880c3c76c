/*
 * backends/redlock/multi.c - several keys at once on every node: each
 * node runs the redis adapter's multi-key script (one atomic step there),
 * and the majority rules of ops.c apply to the call as a whole. A grant's
 * fence for key k is the greatest any granting node gave k, written back
 * to every granting node that gave less (one refence call over all the
 * keys), as for a single key.
 */
#include "backends/redlock/redlock_int.h"

#include <string.h>

#include "lib/clock.h"

typedef enum backend_result (*redlock_mparse_fn)(
    struct redis_be *be,
    const struct lock_multi_req *req,
    const redisReply *r,
    struct lock_multi_grant *out);

/* Run c on every node until deadline_us; the answers into v and g. */
static void redlock_mvotes(struct redlock_be *be,
                           const struct lock_multi_req *req,
                           const struct redis_call *c,
                           int64_t deadline_us,
                           redlock_mparse_fn parse,
                           struct redlock_vote *v,
                           struct lock_multi_grant *g)
{
    struct redis_fan f[REDLOCK_NODES_MAX];
    bool voting[REDLOCK_NODES_MAX], benched[REDLOCK_NODES_MAX];

    redlock_fan(be, NULL, c, deadline_us, f);
    redlock_voting(be, f, voting, benched);
    for (size_t i = 0; i < be->n; i++) {
        memset(&v[i], 0, sizeof(v[i]));
        memset(&g[i], 0, sizeof(g[i]));
        v[i].sent = f[i].sent;
        v[i].voting = voting[i];
        v[i].benched = benched[i];
        if (f[i].reply == NULL)
            continue;
        v[i].res = parse(be->nodes[i], req, f[i].reply, &g[i]);
        v[i].answered =
            v[i].res != BACKEND_UNAVAILABLE && v[i].res != BACKEND_NO_MEMORY;
    }
    redis_fan_clear(f, be->n);
}

/* release_multi of req->token on the nodes undo[] names (best effort). */
static void redlock_undo_multi(struct redlock_be *be,
                               const struct lock_multi_req *req,
                               const bool *undo)
{
    struct redis_fan f[REDLOCK_NODES_MAX];
    struct redis_call c;
    bool any = false;

    for (size_t i = 0; i < be->n; i++)
        any |= undo[i];
    if (!any || redis_call_release_multi(be->nodes[0], req, &c) != 0)
        return;
    redlock_fan(be, undo, &c, clock_mono_us() + be->timeout_ms * 1000, f);
    redis_fan_clear(f, be->n);
    redis_call_free(&c);
    for (size_t k = 0; k < req->n; k++)
        redlock_notify(be, req->keys[k], req->key_lens[k]);
}

/* Undo everything this acquire_multi may have granted: answers that say
 * so, and writes whose answer never came. */
static void redlock_undo_sent(struct redlock_be *be,
                              const struct lock_multi_req *req,
                              const struct redlock_vote *v)
{
    bool undo[REDLOCK_NODES_MAX];

    for (size_t i = 0; i < be->n; i++)
        undo[i] = v[i].sent && (!v[i].answered || v[i].res == BACKEND_OK);
    redlock_undo_multi(be, req, undo);
}

/* Write fences F back where a granting node gave less; then: do a quorum
 * of voting nodes hold every key at F? */
static bool redlock_mwrite_back(struct redlock_be *be,
                                const struct lock_multi_req *req,
                                const struct redlock_vote *v,
                                const struct lock_multi_grant *g,
                                const uint64_t *fences,
                                int64_t t0)
{
    bool holders[REDLOCK_NODES_MAX], voting[REDLOCK_NODES_MAX];
    bool refence[REDLOCK_NODES_MAX], again[REDLOCK_NODES_MAX], any = false;
    struct redis_fan f[REDLOCK_NODES_MAX];
    struct redis_call c;
    int64_t validity;

    for (size_t i = 0; i < be->n; i++) {
        bool grant = v[i].answered && v[i].res == BACKEND_OK;
        refence[i] = false;
        for (size_t k = 0; grant && k < req->n; k++)
            refence[i] |= g[i].fences[k] < fences[k];
        holders[i] = grant && !refence[i];
        voting[i] = v[i].voting;
        any |= refence[i];
    }
    if (any) {
        if (redis_call_refence(be->nodes[0], req->keys, req->key_lens, req->n,
                               req->token, fences, &c) != 0)
            return false;
        redlock_fan(be, refence, &c, clock_mono_us() + be->timeout_ms * 1000,
                    f);
        redis_call_free(&c);
        redlock_voting(be, f, again, NULL);
        for (size_t i = 0; i < be->n; i++)
            if (refence[i] && f[i].reply != NULL && again[i] &&
                redis_reply_refence(f[i].reply, req->n) == (int)req->n)
                holders[i] = true;
        redis_fan_clear(f, be->n);
    }
    validity = (int64_t)req->ttl_ms - redlock_elapsed_ms(t0) -
               redlock_drift(be, req->ttl_ms);
    return redlock_grant_holds(holders, voting, be->n, be->quorum, validity);
}

/* No quorum of grants: HELD (which keys, when to retry) or UNAVAILABLE. */
static enum backend_result redlock_mrefuse(struct redlock_be *be,
                                           const struct lock_multi_req *req,
                                           const struct redlock_vote *v,
                                           const struct lock_multi_grant *g,
                                           struct lock_multi_grant *out)
{
    size_t grants = redlock_count(v, be->n, BACKEND_OK);

    for (size_t i = 0; i < be->n; i++) {
        if (!v[i].answered || v[i].res != BACKEND_HELD)
            continue;
        for (size_t k = 0; k < req->n; k++)
            out->held[k] |= g[i].held[k];
        if (g[i].retry_ms > 0 &&
            (out->retry_ms == 0 || g[i].retry_ms < out->retry_ms))
            out->retry_ms = g[i].retry_ms;
    }
    redlock_undo_sent(be, req, v);
    if (grants + redlock_uncounted(v, be->n) >= be->quorum) {
        memset(out, 0, sizeof(*out));
        return BACKEND_UNAVAILABLE;
    }
    return BACKEND_HELD;
}

enum backend_result redlock_acquire_multi(struct backend *b,
                                          const struct lock_multi_req *req,
                                          struct lock_multi_grant *out)
{
    struct redlock_be *be = (struct redlock_be *)b;
    struct redlock_vote v[REDLOCK_NODES_MAX];
    struct lock_multi_grant g[REDLOCK_NODES_MAX];
    uint64_t fences[LOCK_MULTI_MAX] = { 0 };
    struct redis_call c;
    int64_t t0 = clock_mono_us(), deadline, validity;

    deadline = redlock_deadline(be, t0, req->ttl_ms);
    if (deadline == 0)
        return BACKEND_UNAVAILABLE;
    /* multi-key waiting is retrying: always mark, so a release is heard */
    if (redis_call_acquire_multi(be->nodes[0], req, true, REDIS_BE_MARK_MS,
                                 &c) != 0)
        return BACKEND_NO_MEMORY;
    redlock_mvotes(be, req, &c, deadline, redis_reply_acquire_multi, v, g);
    redis_call_free(&c);
    if (redlock_count(v, be->n, BACKEND_OK) < be->quorum)
        return redlock_mrefuse(be, req, v, g, out);
    for (size_t i = 0; i < be->n; i++)
        for (size_t k = 0;
             v[i].answered && v[i].res == BACKEND_OK && k < req->n; k++)
            if (g[i].fences[k] > fences[k])
                fences[k] = g[i].fences[k];
    if (!redlock_mwrite_back(be, req, v, g, fences, t0)) {
        redlock_undo_sent(be, req, v);
        return BACKEND_UNAVAILABLE;
    }
    validity = (int64_t)req->ttl_ms - redlock_elapsed_ms(t0) -
               redlock_drift(be, req->ttl_ms);
    memcpy(out->fences, fences, sizeof(fences));
    /* from the send, as the wrappers count: the client sees validity */
    out->ttl_ms = req->ttl_ms - (uint64_t)redlock_drift(be, req->ttl_ms);
    out->expires_at_ms = clock_wall_ms() + validity;
    return BACKEND_OK;
}

/* renew_multi with a quorum of OK: the validity, or UNAVAILABLE. */
static enum backend_result redlock_mrenewed(struct redlock_be *be,
                                            const struct lock_multi_req *req,
                                            const struct redlock_vote *v,
                                            const struct lock_multi_grant *g,
                                            int64_t t0,
                                            struct lock_multi_grant *out)
{
    uint64_t ttls[REDLOCK_NODES_MAX], ttl = req->ttl_ms;
    size_t m = 0;
    int64_t validity;

    for (size_t i = 0; i < be->n; i++) {
        if (!v[i].answered || v[i].res != BACKEND_OK)
            continue;
        if (v[i].voting)
            ttls[m++] = g[i].ttl_ms;
        for (size_t k = 0; k < req->n; k++)
            if (g[i].fences[k] > out->fences[k])
                out->fences[k] = g[i].fences[k];
    }
    if (ttl == 0)
        ttl = redlock_kth_largest(ttls, m, be->quorum);
    validity = (int64_t)ttl - redlock_elapsed_ms(t0) - redlock_drift(be, ttl);
    if (validity <= 0) {
        memset(out, 0, sizeof(*out));
        return BACKEND_UNAVAILABLE;
    }
    out->ttl_ms = ttl - (uint64_t)redlock_drift(be, ttl);
    out->expires_at_ms = clock_wall_ms() + validity;
    return BACKEND_OK;
}

enum backend_result redlock_renew_multi(struct backend *b,
                                        const struct lock_multi_req *req,
                                        struct lock_multi_grant *out)
{
    struct redlock_be *be = (struct redlock_be *)b;
    struct redlock_vote v[REDLOCK_NODES_MAX];
    struct lock_multi_grant g[REDLOCK_NODES_MAX];
    bool lost, undo[REDLOCK_NODES_MAX];
    struct redis_call c;
    int64_t t0 = clock_mono_us(), deadline;
    enum backend_result r;

    deadline = redlock_deadline(be, t0, req->ttl_ms);
    if (deadline == 0)
        return BACKEND_UNAVAILABLE;
    if (redis_call_renew_multi(be->nodes[0], req, &c) != 0)
        return BACKEND_NO_MEMORY;
    redlock_mvotes(be, req, &c, deadline, redis_reply_renew_multi, v, g);
    redis_call_free(&c);
    if (redlock_count(v, be->n, BACKEND_OK) >= be->quorum)
        return redlock_mrenewed(be, req, v, g, t0, out);
    r = redlock_refusal(v, be->n, be->quorum, &lost);
    if (!lost)
        return r;
    out->bad = req->n;
    for (size_t i = 0; i < be->n; i++) {
        undo[i] = v[i].answered && v[i].res == BACKEND_OK;
        if (v[i].answered && v[i].voting && v[i].res == r &&
            g[i].bad < out->bad)
            out->bad = g[i].bad;
    }
    if (out->bad >= req->n)
        out->bad = 0;
    redlock_undo_multi(be, req, undo);
    return r;
}

enum backend_result redlock_release_multi(struct backend *b,
                                          const struct lock_multi_req *req,
                                          struct lock_multi_grant *out)
{
    struct redlock_be *be = (struct redlock_be *)b;
    struct redlock_vote v[REDLOCK_NODES_MAX];
    struct lock_multi_grant g[REDLOCK_NODES_MAX];
    struct redis_call c;
    bool lost;

    if (redis_call_release_multi(be->nodes[0], req, &c) != 0)
        return BACKEND_NO_MEMORY;
    redlock_mvotes(be, req, &c, clock_mono_us() + be->timeout_ms * 1000,
                   redis_reply_release_multi, v, g);
    redis_call_free(&c);
    /* the nodes answer OK or NOT_FOUND: a refusal is NOT_FOUND or
     * UNAVAILABLE, by the rule renew and release share */
    if (redlock_count(v, be->n, BACKEND_OK) < be->quorum)
        return redlock_refusal(v, be->n, be->quorum, &lost);
    for (size_t i = 0; i < be->n; i++)
        for (size_t k = 0;
             v[i].answered && v[i].res == BACKEND_OK && k < req->n; k++)
            out->released[k] |= g[i].released[k];
    for (size_t k = 0; k < req->n; k++)
        if (out->released[k])
            redlock_notify(be, req->keys[k], req->key_lens[k]);
    return BACKEND_OK;
}
