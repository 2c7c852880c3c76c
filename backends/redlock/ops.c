/*
 * backends/redlock/ops.c - the single-key operations on every node at
 * once: each builds the redis adapter's call once (redis_call_*), runs it
 * on all N nodes in parallel (redis_fan_run), parses each answer with the
 * single-server parser and lets vote.c decide. A grant holds only within
 * its validity: the TTL less the time the fan took and the drift, which
 * is the TTL the client is told (the adapter answers the TTL less the
 * drift; the wrappers count it from when the call was sent).
 */
#include "backends/redlock/redlock_int.h"

#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"

/* ---- shared by the operations ---- */

void redlock_fan(struct redlock_be *be,
                 const bool *which,
                 const struct redis_call *c,
                 int64_t deadline_us,
                 struct redis_fan *f)
{
    struct redis_be *sub[REDLOCK_NODES_MAX];
    struct redis_fan tmp[REDLOCK_NODES_MAX];
    size_t idx[REDLOCK_NODES_MAX], m = 0;

    bool up[REDLOCK_NODES_MAX];

    size_t nup = 0;

    /* a node the monitor found silent is not asked: dialling a stopped
     * server (its kernel still accepts the connection) would spend the
     * time the others need; the monitor tells when it answers again.
     * Unless the others cannot make a quorum: then it is asked too (a
     * dial gets only its share of the time), as it may be back already */
    pthread_mutex_lock(&be->lock);
    for (size_t i = 0; i < be->n; i++)
        nup += up[i] = be->st[i].up;
    pthread_mutex_unlock(&be->lock);
    if (nup < be->quorum)
        for (size_t i = 0; i < be->n; i++)
            up[i] = true;
    memset(f, 0, be->n * sizeof(*f));
    for (size_t i = 0; i < be->n; i++)
        if ((which == NULL || which[i]) && up[i]) {
            sub[m] = be->nodes[i];
            idx[m++] = i;
        }
    if (m == 0)
        return;
    redis_fan_run(sub, m, c, deadline_us, tmp);
    for (size_t k = 0; k < m; k++)
        f[idx[k]] = tmp[k];
}

int64_t
redlock_deadline(const struct redlock_be *be, int64_t t0_us, uint64_t ttl_ms)
{
    int64_t wait = be->timeout_ms;

    if (ttl_ms > 0) {
        int64_t valid = (int64_t)ttl_ms - redlock_drift(be, ttl_ms);
        if (valid <= 0)
            return 0;
        if (valid < wait)
            wait = valid; /* no point waiting past the validity */
    }
    return t0_us + wait * 1000;
}

int64_t redlock_elapsed_ms(int64_t t0_us)
{
    return (clock_mono_us() - t0_us + 999) / 1000;
}

void redlock_notify(struct redlock_be *be, const char *key, size_t key_len)
{
    if (be->hooks.notify != NULL)
        be->hooks.notify(be->hooks.arg, key, key_len);
}

void redlock_undo(struct redlock_be *be,
                  const char *key,
                  size_t key_len,
                  const char *token,
                  const bool *undo)
{
    struct lock_req req = {
        .key = key, .key_len = key_len, .token = token, .all = true
    };
    struct redis_call c;
    struct redis_fan f[REDLOCK_NODES_MAX];
    bool any = false;

    for (size_t i = 0; i < be->n; i++)
        any |= undo[i];
    if (!any || redis_call_release(be->nodes[0], &req, &c) != 0)
        return;
    redlock_fan(be, undo, &c, clock_mono_us() + be->timeout_ms * 1000, f);
    redis_fan_clear(f, be->n);
    redis_call_free(&c);
    /* a waiter here may have been told HELD because of what was undone */
    redlock_notify(be, key, key_len);
}

/* The fan's answers into v through parse (acquire, renew, release). */
typedef enum backend_result (*redlock_parse_fn)(struct redis_be *be,
                                                const redisReply *r,
                                                struct lock_grant *out);

static void redlock_votes(struct redlock_be *be,
                          const struct redis_fan *f,
                          redlock_parse_fn parse,
                          struct redlock_vote *v)
{
    bool voting[REDLOCK_NODES_MAX], benched[REDLOCK_NODES_MAX];

    redlock_voting(be, f, voting, benched);
    for (size_t i = 0; i < be->n; i++) {
        memset(&v[i], 0, sizeof(v[i]));
        v[i].sent = f[i].sent;
        v[i].voting = voting[i];
        v[i].benched = benched[i];
        if (f[i].reply == NULL)
            continue;
        v[i].res = parse(be->nodes[i], f[i].reply, &v[i].g);
        v[i].answered =
            v[i].res != BACKEND_UNAVAILABLE && v[i].res != BACKEND_NO_MEMORY;
    }
}

/* Run c (freed) on every node until deadline_us; the answers, parsed with
 * parse, into v. */
static void redlock_fan_votes(struct redlock_be *be,
                              struct redis_call *c,
                              int64_t deadline_us,
                              redlock_parse_fn parse,
                              struct redlock_vote *v)
{
    struct redis_fan f[REDLOCK_NODES_MAX];

    redlock_fan(be, NULL, c, deadline_us, f);
    redis_call_free(c);
    redlock_votes(be, f, parse, v);
    redis_fan_clear(f, be->n);
}

/* ---- acquire ---- */

/* Write F back to the nodes plan->refence names, then count the holders
 * at F among the voting nodes: true when the grant stands. */
static bool redlock_write_back(struct redlock_be *be,
                               const struct lock_req *req,
                               const struct redlock_vote *v,
                               const struct redlock_acq_plan *p,
                               int64_t t0)
{
    bool holders[REDLOCK_NODES_MAX], voting[REDLOCK_NODES_MAX], any = false;
    struct redis_fan f[REDLOCK_NODES_MAX];
    struct redis_call c;
    int64_t deadline, validity,
        validity_ms = (int64_t)req->ttl_ms - redlock_drift(be, req->ttl_ms);

    for (size_t i = 0; i < be->n; i++) {
        holders[i] = v[i].answered && v[i].res == BACKEND_OK &&
                     !v[i].g.replay && v[i].g.fence == p->fence;
        voting[i] = v[i].voting;
        any |= p->refence[i];
    }
    if (any) {
        if (redis_call_refence(be->nodes[0], &req->key, &req->key_len, 1,
                               req->token, &p->fence, &c) != 0)
            return false;
        /* a node timeout of its own, but never past the validity */
        deadline = clock_mono_us() + be->timeout_ms * 1000;
        if (deadline > t0 + validity_ms * 1000)
            deadline = t0 + validity_ms * 1000;
        redlock_fan(be, p->refence, &c, deadline, f);
        redis_call_free(&c);
        bool again[REDLOCK_NODES_MAX];
        redlock_voting(be, f, again, NULL);
        for (size_t i = 0; i < be->n; i++)
            if (p->refence[i] && f[i].reply != NULL && again[i] &&
                redis_reply_refence(f[i].reply, 1) == 1)
                holders[i] = true;
        redis_fan_clear(f, be->n);
    }
    validity = (int64_t)req->ttl_ms - redlock_elapsed_ms(t0) -
               redlock_drift(be, req->ttl_ms);
    return redlock_grant_holds(holders, voting, be->n, be->quorum, validity);
}

/*
 * Fill out for a grant (or replay) good for ttl_ms counted from when the
 * call was sent (the wrappers' valid_until_us counts from there, so the
 * client is told ttl_ms less the time spent: the validity), left_ms of
 * it still left now.
 */
static void redlock_grant_out(const struct lock_grant *g,
                              uint64_t fence,
                              uint64_t ttl_ms,
                              int64_t left_ms,
                              struct lock_grant *out)
{
    out->fence = fence;
    out->ttl_ms = ttl_ms;
    out->expires_at_ms = clock_wall_ms() + left_ms;
    out->mode = g->mode;
    out->limit = g->limit;
    out->holds = g->holds;
}

/* Everything this acquire may have granted: answers that say so, and
 * writes whose answer never came. */
static void redlock_acquire_undo_all(struct redlock_be *be,
                                     const struct lock_req *req,
                                     const struct redlock_vote *v)
{
    bool undo[REDLOCK_NODES_MAX];

    for (size_t i = 0; i < be->n; i++)
        undo[i] = v[i].sent && (!v[i].answered ||
                                (v[i].res == BACKEND_OK && !v[i].g.replay));
    redlock_undo(be, req->key, req->key_len, req->token, undo);
}

/* The plan carried out: the result. */
static enum backend_result redlock_acquire_finish(struct redlock_be *be,
                                                  const struct lock_req *req,
                                                  const struct redlock_vote *v,
                                                  struct redlock_acq_plan *p,
                                                  int64_t t0,
                                                  int64_t spent_ms,
                                                  struct lock_grant *out)
{
    int64_t drift = redlock_drift(be, req->ttl_ms), validity;

    if (p->v == REDLOCK_V_REPLAY) {
        const struct lock_grant *g = &v[p->replay_from].g;
        redlock_undo(be, req->key, req->key_len, req->token, p->undo);
        /* p->ttl_ms is what is left less spent_ms (elapsed + drift) */
        redlock_grant_out(g, p->fence, p->ttl_ms + (uint64_t)(spent_ms - drift),
                          (int64_t)p->ttl_ms, out);
        out->replay = true;
        memcpy(out->token, g->token, sizeof(out->token));
        return BACKEND_OK;
    }
    if (p->v == REDLOCK_V_REFUSE) {
        redlock_undo(be, req->key, req->key_len, req->token, p->undo);
        out->retry_ms = p->retry_ms;
        return p->res;
    }
    if (!redlock_write_back(be, req, v, p, t0)) {
        redlock_acquire_undo_all(be, req, v);
        return BACKEND_UNAVAILABLE;
    }
    validity = (int64_t)req->ttl_ms - redlock_elapsed_ms(t0) - drift;
    for (size_t i = 0; i < be->n; i++)
        if (v[i].answered && v[i].res == BACKEND_OK && !v[i].g.replay) {
            redlock_grant_out(&v[i].g, p->fence, req->ttl_ms - (uint64_t)drift,
                              validity, out);
            break;
        }
    out->holds = 1;
    out->expired_fence = p->expired_fence;
    return BACKEND_OK;
}

enum backend_result redlock_acquire(struct backend *b,
                                    const struct lock_req *req,
                                    struct lock_grant *out)
{
    struct redlock_be *be = (struct redlock_be *)b;
    struct redlock_vote v[REDLOCK_NODES_MAX];
    struct redlock_acq_plan p;
    struct redis_call c;
    int64_t t0 = clock_mono_us(), deadline;
    enum backend_result r;
    int64_t spent;

    if (req->mode == LOCK_SHARED && req->limit > 1)
        return BACKEND_INVALID; /* BACKEND_CAP_NO_SEMAPHORE */
    deadline = redlock_deadline(be, t0, req->ttl_ms);
    if (deadline == 0)
        return BACKEND_UNAVAILABLE; /* a TTL within the drift */
    if (redis_call_acquire(be->nodes[0], req, true,
                           req->waiter != NULL ? REDIS_BE_MARK_MS : 0, &c) != 0)
        return BACKEND_NO_MEMORY;
    redlock_fan_votes(be, &c, deadline, redis_reply_acquire, v);
    spent = redlock_elapsed_ms(t0) + redlock_drift(be, req->ttl_ms);
    redlock_acquire_plan(v, be->n, be->quorum, spent, &p);
    r = redlock_acquire_finish(be, req, v, &p, t0, spent, out);
    if (r != BACKEND_OK && r != BACKEND_HELD)
        memset(out, 0, sizeof(*out));
    return r;
}

/* ---- renew, release ---- */

/* The quorum-th largest of a field of the counted OK answers. */
static uint64_t redlock_ok_kth(const struct redlock_be *be,
                               const struct redlock_vote *v,
                               size_t field)
{
    uint64_t x[REDLOCK_NODES_MAX];
    size_t m = 0;

    for (size_t i = 0; i < be->n; i++)
        if (v[i].answered && v[i].voting && v[i].res == BACKEND_OK)
            x[m++] = field == 0   ? v[i].g.ttl_ms
                     : field == 1 ? v[i].g.holds
                                  : v[i].g.fence;
    return redlock_kth_largest(x, m, be->quorum);
}

enum backend_result redlock_renew(struct backend *b,
                                  const struct lock_req *req,
                                  struct lock_grant *out)
{
    struct redlock_be *be = (struct redlock_be *)b;
    struct redlock_vote v[REDLOCK_NODES_MAX];
    struct redis_call c;
    int64_t t0 = clock_mono_us(), deadline, validity;
    uint64_t ttl;
    bool lost, undo[REDLOCK_NODES_MAX];
    enum backend_result r;

    deadline = redlock_deadline(be, t0, req->ttl_ms);
    if (deadline == 0) /* a TTL within the drift: the nodes still say
                          whether the token holds the key (404, 409) */
        deadline = t0 + be->timeout_ms * 1000;
    if (redis_call_renew(be->nodes[0], req, &c) != 0)
        return BACKEND_NO_MEMORY;
    redlock_fan_votes(be, &c, deadline, redis_reply_renew, v);
    if (redlock_count(v, be->n, BACKEND_OK) >= be->quorum) {
        ttl = req->ttl_ms > 0 ? req->ttl_ms : redlock_ok_kth(be, v, 0);
        validity =
            (int64_t)ttl - redlock_elapsed_ms(t0) - redlock_drift(be, ttl);
        if (validity <= 0) /* renewed to no time at all: it is gone */
            return (int64_t)ttl <= redlock_drift(be, ttl) ? BACKEND_NOT_FOUND
                                                          : BACKEND_UNAVAILABLE;
        for (size_t i = 0; i < be->n; i++)
            if (v[i].answered && v[i].voting && v[i].res == BACKEND_OK) {
                redlock_grant_out(&v[i].g, 0,
                                  ttl - (uint64_t)redlock_drift(be, ttl),
                                  validity, out);
                break;
            }
        out->holds = (uint32_t)redlock_ok_kth(be, v, 1);
        for (size_t i = 0; i < be->n; i++)
            if (v[i].answered && v[i].res == BACKEND_OK &&
                v[i].g.fence > out->fence)
                out->fence = v[i].g.fence;
        return BACKEND_OK;
    }
    r = redlock_refusal(v, be->n, be->quorum, &lost);
    if (lost) {
        /* a minority still has it: give it back there */
        for (size_t i = 0; i < be->n; i++)
            undo[i] = v[i].answered && v[i].res == BACKEND_OK;
        redlock_undo(be, req->key, req->key_len, req->token, undo);
    }
    return r;
}

enum backend_result redlock_release(struct backend *b,
                                    const struct lock_req *req,
                                    struct lock_grant *out)
{
    struct redlock_be *be = (struct redlock_be *)b;
    struct redlock_vote v[REDLOCK_NODES_MAX];
    struct redis_call c;
    bool lost;

    if (redis_call_release(be->nodes[0], req, &c) != 0)
        return BACKEND_NO_MEMORY;
    redlock_fan_votes(be, &c, clock_mono_us() + be->timeout_ms * 1000,
                      redis_reply_release, v);
    if (redlock_count(v, be->n, BACKEND_OK) < be->quorum)
        return redlock_refusal(v, be->n, be->quorum, &lost);
    out->holds = (uint32_t)redlock_ok_kth(be, v, 1);
    for (size_t i = 0; i < be->n; i++)
        if (v[i].answered && v[i].res == BACKEND_OK &&
            v[i].g.granted_at_ms > 0) {
            out->granted_at_ms = v[i].g.granted_at_ms;
            break;
        }
    if (out->holds == 0)
        redlock_notify(be, req->key, req->key_len);
    return BACKEND_OK;
}
