/*
 * backends/redlock/vote.c - the pure rules that turn the nodes' answers
 * into one result (SPEC-21 "Votes", "Acquire", "Renew, release"). No
 * lock, no I/O: tests/unit/test_redlock.c feeds them answers directly.
 *
 * An answer counts only when its node votes (struct redlock_vote's
 * voting); every other node, answering or not, is "uncounted": it could
 * have said yes, so a refusal needs more than N - quorum counted noes,
 * else the result is UNAVAILABLE (too few nodes answered to tell). A
 * quarantined node (benched) is not uncounted: whatever it said, it could
 * not have counted, so a key it cannot help grant is HELD, not 503.
 */
#include "backends/redlock/redlock_int.h"

#include <string.h>

uint64_t redlock_kth_largest(uint64_t *v, size_t n, size_t k)
{
    if (k == 0 || n < k)
        return 0;
    /* n <= 9: insertion sort, descending */
    for (size_t i = 1; i < n; i++) {
        uint64_t x = v[i];
        size_t j = i;
        while (j > 0 && v[j - 1] < x) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
    return v[k - 1];
}

static bool redlock_counts(const struct redlock_vote *v)
{
    return v->answered && v->voting;
}

size_t
redlock_count(const struct redlock_vote *v, size_t n, enum backend_result res)
{
    size_t c = 0;

    for (size_t i = 0; i < n; i++)
        if (redlock_counts(&v[i]) && v[i].res == res)
            c++;
    return c;
}

size_t redlock_uncounted(const struct redlock_vote *v, size_t n)
{
    size_t c = 0;

    for (size_t i = 0; i < n; i++)
        if (!redlock_counts(&v[i]) && !v[i].benched)
            c++;
    return c;
}

static bool redlock_is_grant(const struct redlock_vote *v)
{
    return v->answered && v->res == BACKEND_OK && !v->g.replay;
}

static bool redlock_is_replay(const struct redlock_vote *v)
{
    return v->answered && v->res == BACKEND_OK && v->g.replay;
}

/* Step 3: a quorum of counted replays under one token: true, p filled. */
static bool redlock_plan_replay(const struct redlock_vote *v,
                                size_t n,
                                size_t quorum,
                                int64_t spent_ms,
                                struct redlock_acq_plan *p)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t ttls[REDLOCK_NODES_MAX], fence = 0, ttl;
        size_t c = 0;

        if (!redlock_is_replay(&v[i]) || !v[i].voting)
            continue;
        for (size_t j = 0; j < n; j++)
            if (redlock_is_replay(&v[j]) && v[j].voting &&
                strcmp(v[j].g.token, v[i].g.token) == 0) {
                ttls[c++] = v[j].g.ttl_ms;
                if (v[j].g.fence > fence)
                    fence = v[j].g.fence;
            }
        if (c < quorum)
            continue;
        ttl = redlock_kth_largest(ttls, c, quorum);
        if ((int64_t)ttl <= spent_ms)
            return false; /* as good as gone: HELD */
        p->v = REDLOCK_V_REPLAY;
        p->fence = fence;
        p->ttl_ms = ttl - (uint64_t)spent_ms;
        p->replay_from = i;
        for (size_t j = 0; j < n; j++)
            p->undo[j] = redlock_is_grant(&v[j]);
        return true;
    }
    return false;
}

/* Step 4: a quorum of counted fresh grants. */
static bool redlock_plan_grant(const struct redlock_vote *v,
                               size_t n,
                               size_t quorum,
                               struct redlock_acq_plan *p)
{
    size_t grants = 0;
    uint64_t f = 0, expired = 0;

    for (size_t i = 0; i < n; i++) {
        if (!redlock_is_grant(&v[i]))
            continue;
        grants += v[i].voting;
        if (v[i].g.fence > f)
            f = v[i].g.fence;
        if (v[i].g.expired_fence > expired)
            expired = v[i].g.expired_fence;
    }
    if (grants < quorum)
        return false;
    p->v = REDLOCK_V_GRANT;
    p->fence = f;
    p->expired_fence = expired < f ? expired : 0;
    for (size_t i = 0; i < n; i++)
        p->refence[i] = redlock_is_grant(&v[i]) && v[i].g.fence < f;
    return true;
}

void redlock_acquire_plan(const struct redlock_vote *v,
                          size_t n,
                          size_t quorum,
                          int64_t spent_ms,
                          struct redlock_acq_plan *p)
{
    size_t grants = 0;

    memset(p, 0, sizeof(*p));
    if (redlock_plan_replay(v, n, quorum, spent_ms, p) ||
        redlock_plan_grant(v, n, quorum, p))
        return;
    p->v = REDLOCK_V_REFUSE;
    for (size_t i = 0; i < n; i++) {
        /* what may hold a grant of ours: an answer that says so, or a
         * write whose answer never came */
        p->undo[i] = redlock_is_grant(&v[i]) || (v[i].sent && !v[i].answered);
        if (redlock_is_grant(&v[i]) && v[i].voting)
            grants++;
        if (redlock_counts(&v[i]) && v[i].res == BACKEND_HELD &&
            v[i].g.retry_ms > 0 &&
            (p->retry_ms == 0 || v[i].g.retry_ms < p->retry_ms))
            p->retry_ms = v[i].g.retry_ms;
    }
    if (redlock_count(v, n, BACKEND_LIMIT_MISMATCH) >= quorum)
        p->res = BACKEND_LIMIT_MISMATCH;
    else if (redlock_count(v, n, BACKEND_IDEM_CONFLICT) >= quorum)
        p->res = BACKEND_IDEM_CONFLICT;
    else if (grants + redlock_uncounted(v, n) >= quorum)
        p->res = BACKEND_UNAVAILABLE;
    else if (redlock_count(v, n, BACKEND_HELD) > 0)
        p->res = BACKEND_HELD;
    else /* free wherever it was asked, but too few nodes vote */
        p->res = BACKEND_UNAVAILABLE;
    if (p->res == BACKEND_HELD && p->retry_ms == 0)
        p->retry_ms = 1;
}

bool redlock_grant_holds(const bool *holders,
                         const bool *voting,
                         size_t n,
                         size_t quorum,
                         int64_t validity_ms)
{
    size_t c = 0;

    for (size_t i = 0; i < n; i++)
        c += holders[i] && voting[i];
    return c >= quorum && validity_ms > 0;
}

enum backend_result redlock_refusal(const struct redlock_vote *v,
                                    size_t n,
                                    size_t quorum,
                                    bool *lost)
{
    size_t ok = redlock_count(v, n, BACKEND_OK);
    size_t mismatch = redlock_count(v, n, BACKEND_MISMATCH);
    size_t notfound = redlock_count(v, n, BACKEND_NOT_FOUND);

    *lost = false;
    if (redlock_count(v, n, BACKEND_HOLDS_MAX) >= quorum)
        return BACKEND_HOLDS_MAX;
    if (ok + redlock_uncounted(v, n) >= quorum)
        return BACKEND_UNAVAILABLE;
    *lost = true;
    return mismatch > 0 && mismatch >= notfound ? BACKEND_MISMATCH
                                                : BACKEND_NOT_FOUND;
}
