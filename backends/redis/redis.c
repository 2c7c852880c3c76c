/*
 * backends/redis/redis.c - lock store on Redis (hiredis 0.14): the ops
 * table, open/close and the operations, each one script run (scripts.c).
 * An exclusive key is one hash (token digest, fence, TTL, owner) with an
 * expiry, as cheap as before lock kinds; a shared key keeps its holders
 * in the same hash beside a sorted set of their expiries; fences come from
 * a counter per slot (kept for ever, a few of them) and the key's own last
 * fence, which goes with the key (holders.lua). Every state change is one Lua
 * script run with EVALSHA, so every check-and-change is atomic in Redis and
 * judged by Redis's clock. One hiredis context per worker thread (conn.c); a
 * subscriber thread on its own connection hears releases made through other
 * lockd instances and wakes waiters (subscriber.c). Waiters queue in Redis
 * (BACKEND_CAP_QUEUE, queue.c): FIFO across every instance.
 *
 * Layout, for a prefix P (default "lockd:") and a lockd key K (raw bytes):
 *   P "lock:{" K "}"    hash. Held EXCLUSIVE: t = the first 20 hex
 *                       digits of sha1hex(token) (all 40 from an older
 *                       lockd: holders.lua's tok_t()), f =
 *                       fence, ttl, a = when granted (Redis's unix ms;
 *                       g from an older lockd), [o = owner], [n = holds if
 *                       > 1], [x = sealed token, "i:" sha1hex(idem) = t],
 *                       with an expiry (PEXPIREAT), so Redis frees it by
 *                       itself. Held SHARED:
 *                       m = "s", l = limit ("0" none), "h:" digest = that
 *                       holder's record (msgpack: fence, ttl, holds, owner,
 *                       idem digest, sealed token, when granted), "i:"
 *                       sha1hex(idem) = its digest; expires with the last
 *                       holder
 *   P "exp:{" K "}"     zset, SHARED: token digest -> expiry (Redis's unix
 *                       ms); every script reaps what passed, and it expires
 *                       with the last holder too
 *   P "fence:{" K "}"   integer, a fence of the key that an older lockd
 *                       (without an expiry, or the holders' and
 *                       REDIS_BE_RETAIN_MS more) or redlock's refence (a
 *                       fence the servers agreed on) wrote: the next grant
 *                       takes it into the max and deletes it, and a release
 *                       that frees the key deletes one with an expiry. A
 *                       grant writes none: its index member keeps the key's
 *                       last fence (list.c)
 *   P "fence#" S        integer, S = 4 hex of the key's hash slot modulo
 *                       REDIS_BE_FENCE_SLOTS: at least every fence granted
 *                       to a key of that slot, kept for ever (cluster mode:
 *                       P "{" tag "}fence#", tag one of the lock's slot)
 *   P "fifo:{" K "}"    sorted set of waiter ids scored by arrival,
 *                       first come first served (holders.lua)
 *   P "qdl:{" K "}"     hash waiter id -> its deadline (Redis's unix ms),
 *                       followed by " s " limit for a shared waiter
 *   P "mwait:{" K "}"   string, set with a PX expiry by a multi-key acquire
 *                       (or a try-once acquire asked to mark: redlock)
 *                       that found K held: such a waiter keeps no place
 *                       in the queue, so while it lives a release of K
 *                       (or its queue's last cancel) is published too
 *   P "keys"            the index of the held keys, for list(): zsets of
 *                       at most 120 members (a listpack each), score 0, a
 *                       member K NUL its last fence: P "keys#" hi for each
 *                       hi (the first key past the bucket) in the
 *                       directory P "keys@", and P "keys", the last
 *                       (holders.lua; an older lockd kept one zset,
 *                       P "index")
 *   P "counts"          hash, expiry second -> holders that expire in it,
 *                       for held_count() (list.c); both expire
 *                       REDIS_BE_RETAIN_MS after the last holder
 *   channel P "released:" db   PUBLISHed with K by a release someone waits
 *                       for (a queued waiter, or the mwait mark)
 * P and the fixed words around K make the mapping injective: K is what is
 * left after stripping them, and the kinds ("lock:", "exp:", ...) never
 * collide. Several keys at once (multi.c) are one script over all their
 * Redis keys, so they must live on one Redis: true of the one primary
 * this adapter speaks to.
 *
 * Keys reach the operations through the wrappers of backends/backend.c,
 * which let through only 1..LOCK_KEY_MAX bytes (backend_key_ok()): no
 * check here.
 */
#include "backends/redis/redis_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/random.h"

static void redis_close(struct backend *b);
static enum backend_result redis_ping(struct backend *b);

/* ---- open ---- */

/* The parts of be that need no URL: 0, or -1 (be is freed). */
static int redis_init(struct redis_be *be, const struct backend_hooks *hooks)
{
    be->base.ops = &redis_backend;
    if (hooks != NULL)
        be->hooks = *hooks;
    atomic_init(&be->up, -1);
    atomic_init(&be->want_identity, false);
    atomic_init(&be->stopping, false);
    atomic_init(&be->last_log_ms, 0);
    if (pthread_mutex_init(&be->lock, NULL) != 0) {
        free(be);
        return -1;
    }
    if (clock_cond_init(&be->sub_cond) != 0) {
        pthread_mutex_destroy(&be->lock);
        free(be);
        return -1;
    }
    if (redis_conns_init(be) != 0) {
        pthread_cond_destroy(&be->sub_cond);
        pthread_mutex_destroy(&be->lock);
        free(be);
        return -1;
    }
    return 0;
}

static enum backend_result redis_open(const char *url,
                                      const struct backend_hooks *hooks,
                                      struct backend **out,
                                      char *err,
                                      size_t errlen)
{
    struct redis_be *be = calloc(1, sizeof(*be));
    enum backend_result r;

    *out = NULL;
    if (be == NULL || redis_init(be, hooks) != 0)
        return BACKEND_NO_MEMORY;
    if (random_hex(be->instance, REDIS_BE_INSTANCE_BYTES) != 0) {
        redis_close(&be->base);
        return BACKEND_NO_MEMORY;
    }
    strcat(be->instance, ":");
    r = redis_parse_url(be, url, err, errlen);
    if (r != BACKEND_OK) {
        redis_close(&be->base);
        return r;
    }
    /* batch.c pipelines on one server only (see there) */
    if (be->topology != REDIS_BE_SINGLE || be->min_replicas > 0)
        be->base.caps_off |= BACKEND_CAP_BATCH;
    /* sentinel: learn the primary before anything dials it (issue 17) */
    if (be->topology == REDIS_BE_SENTINEL && redis_sentinel_start(be) != 0) {
        redis_close(&be->base);
        return BACKEND_NO_MEMORY;
    }
    if (redis_sub_start(be) != 0) {
        redis_close(&be->base);
        return BACKEND_NO_MEMORY;
    }
    if (redis_ping(&be->base) != BACKEND_OK) {
        char where[320];
        redis_where(be, where, sizeof(where));
        log_warn("redis: %s not reachable yet; requests answer 503 "
                 "until it is",
                 where);
    }
    *out = &be->base;
    return BACKEND_OK;
}

/* ---- acquire and cancel ---- */

/* acquire.lua's call for req, with bw its waiter's place (NULL: try
 * once); floor and mark_ms as redis_call_acquire() says. */
int redis_acquire_build(struct redis_be *be,
                        const struct lock_req *req,
                        const struct redis_wait *bw,
                        bool floor,
                        uint64_t mark_ms,
                        struct redis_call *c)
{
    const char *k = req->key, *waiter = bw != NULL ? bw->id : "";
    const char *idem = req->idem_key != NULL ? req->idem_key : "";
    size_t kn = req->key_len;
    struct redis_args a;
    char ttl[24], left[24], limit[24], mark[24];

    snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)req->ttl_ms);
    snprintf(left, sizeof(left), "%lld",
             bw != NULL ? (long long)redis_wait_left(bw) : 0LL);
    snprintf(limit, sizeof(limit), "%u",
             req->mode == LOCK_SHARED ? (unsigned)req->limit : 0u);
    snprintf(mark, sizeof(mark), "%llu", (unsigned long long)mark_ms);
    redis_arg_key(be, &a, REDIS_BE_ACQ_LOCK, "lock:", k, kn);
    redis_arg_key(be, &a, REDIS_BE_ACQ_FENCE, "fence:", k, kn);
    redis_arg_key(be, &a, REDIS_BE_ACQ_QUEUE, "fifo:", k, kn);
    redis_arg_key(be, &a, REDIS_BE_ACQ_DEADLINES, "qdl:", k, kn);
    redis_arg_key(be, &a, REDIS_BE_ACQ_EXP, "exp:", k, kn);
    redis_arg_global(be, &a, REDIS_BE_ACQ_INDEX, REDIS_BE_INDEX);
    redis_arg_global(be, &a, REDIS_BE_ACQ_HELD, REDIS_BE_COUNTS);
    redis_arg_key(be, &a, REDIS_BE_ACQ_MWAIT, "mwait:", k, kn);
    redis_arg_key(be, &a, REDIS_BE_ACQ_SLOT_FENCE, REDIS_BE_SLOT_FENCE, k, kn);
    redis_arg(&a, REDIS_BE_ACQ_TOKEN, req->token, strlen(req->token));
    redis_arg(&a, REDIS_BE_ACQ_TTL, ttl, strlen(ttl));
    redis_arg(&a, REDIS_BE_ACQ_HAS_OWNER, req->owner != NULL ? "1" : "0", 1);
    redis_arg(&a, REDIS_BE_ACQ_OWNER, req->owner != NULL ? req->owner : "",
              req->owner != NULL ? strlen(req->owner) : 0);
    redis_arg(&a, REDIS_BE_ACQ_WAITER, waiter, strlen(waiter));
    redis_arg(&a, REDIS_BE_ACQ_WAIT_LEFT, left, strlen(left));
    redis_arg(&a, REDIS_BE_ACQ_INSTANCE, be->instance, strlen(be->instance));
    redis_arg(&a, REDIS_BE_ACQ_CHANNEL, be->channel, strlen(be->channel));
    redis_arg(&a, REDIS_BE_ACQ_KEY, k, kn);
    redis_arg(&a, REDIS_BE_ACQ_MODE, req->mode == LOCK_SHARED ? "1" : "0", 1);
    redis_arg(&a, REDIS_BE_ACQ_LIMIT, limit, strlen(limit));
    redis_arg(&a, REDIS_BE_ACQ_IDEM, idem, strlen(idem));
    redis_arg(&a, REDIS_BE_ACQ_FLOOR, floor ? "1" : "0", 1);
    redis_arg(&a, REDIS_BE_ACQ_MARK, mark, strlen(mark));
    return redis_call_pack(c, REDIS_BE_SCRIPT_ACQUIRE, REDIS_BE_ACQ_NKEYS,
                           REDIS_BE_ACQ_NARGS, a.v, a.len);
}

int redis_call_acquire(struct redis_be *be,
                       const struct lock_req *req,
                       bool floor,
                       uint64_t mark_ms,
                       struct redis_call *c)
{
    return redis_acquire_build(be, req, NULL, floor, mark_ms, c);
}

/* True if r is an array of at least n integers, the first status. */
static bool redis_reply_ints(const redisReply *r, size_t n, long long status)
{
    if (!redis_reply_is_int(r, 0) || r->element[0]->integer != status ||
        r->elements < n)
        return false;
    for (size_t i = 1; i < n; i++)
        if (!redis_reply_is_int(r, i))
            return false;
    return true;
}

/* {1, fence, ttl, expires_at, mode, limit, holds, ...} (acquire, renew)
 * into out: true, or false if it is not that. */
static bool redis_grant_fill(const redisReply *r, struct lock_grant *out)
{
    long long fence, ttl, mode, limit, holds;

    if (!redis_reply_ints(r, 7, 1))
        return false;
    fence = r->element[1]->integer;
    ttl = r->element[2]->integer;
    mode = r->element[4]->integer;
    limit = r->element[5]->integer;
    holds = r->element[6]->integer;
    if (fence <= 0 || (uint64_t)fence > LOCK_FENCE_MAX || ttl <= 0 ||
        (mode != LOCK_EXCLUSIVE && mode != LOCK_SHARED) || limit < 0 ||
        limit > LOCK_LIMIT_MAX || holds < 1 || holds > LOCK_HOLDS_MAX)
        return false;
    out->fence = (uint64_t)fence;
    out->ttl_ms = (uint64_t)ttl;
    out->expires_at_ms = r->element[3]->integer;
    out->mode = (enum lock_mode)mode;
    out->limit = (uint32_t)limit;
    out->holds = (uint32_t)holds;
    return true;
}

/* An acquire's grant: with replay = 1, the replayed grant's token too. */
static bool redis_acquire_fill(const redisReply *r, struct lock_grant *out)
{
    const redisReply *tok;

    if (!redis_grant_fill(r, out) || !redis_reply_is_int(r, 7))
        return false;
    if (r->element[7]->integer == 0) {
        /* a new grant: the takeover's fence, if it was one */
        if (redis_reply_is_int(r, 8) && r->element[8]->integer > 0 &&
            (uint64_t)r->element[8]->integer < out->fence)
            out->expired_fence = (uint64_t)r->element[8]->integer;
        return true;
    }
    if (r->elements < 9)
        return false;
    tok = r->element[8];
    if (tok->type != REDIS_REPLY_STRING || tok->len == 0 ||
        tok->len > LOCK_TOKEN_MAX)
        return false;
    memcpy(out->token, tok->str, tok->len);
    out->token[tok->len] = '\0';
    out->replay = true;
    return true;
}

enum backend_result redis_reply_acquire(struct redis_be *be,
                                        const redisReply *r,
                                        struct lock_grant *out)
{
    memset(out, 0, sizeof(*out));
    if (redis_acquire_fill(r, out))
        return BACKEND_OK;
    memset(out, 0, sizeof(*out));
    if (redis_reply_ints(r, 4, 0)) {
        long long hint = r->element[1]->integer;
        out->retry_ms = hint > 0 ? (uint64_t)hint : (hint == 0 ? 1 : 0);
        /* behind one of ours: waitq may hold them in another order and
         * passes the turn on; behind another instance's waiter, every one
         * of ours is behind too, so none needs trying until told */
        out->behind =
            r->element[2]->integer == 1 && r->element[3]->integer == 1;
        return BACKEND_HELD;
    }
    if (redis_reply_ints(r, 1, -3))
        return BACKEND_LIMIT_MISMATCH;
    if (redis_reply_ints(r, 1, -4))
        return BACKEND_IDEM_CONFLICT;
    redis_warn(be, "acquire", "unexpected reply");
    return BACKEND_UNAVAILABLE;
}

/* Run c (freed) on this thread's connection and parse its reply into out
 * with parse: what parse says, or UNAVAILABLE (no reply). */
enum backend_result
redis_grant_run(struct redis_be *be,
                struct redis_call *c,
                enum backend_result (*parse)(struct redis_be *,
                                             const redisReply *,
                                             struct lock_grant *),
                struct lock_grant *out)
{
    redisReply *r = redis_call_run(be, c);
    enum backend_result res;

    redis_call_free(c);
    if (r == NULL)
        return BACKEND_UNAVAILABLE;
    res = parse(be, r, out);
    freeReplyObject(r);
    return res;
}

static enum backend_result redis_acquire(struct backend *b,
                                         const struct lock_req *req,
                                         struct lock_grant *out)
{
    struct redis_be *be = (struct redis_be *)b;
    struct redis_wait *bw = NULL;
    struct redis_call c;
    enum backend_result res;

    if (req->waiter != NULL) {
        bw = redis_wait_get(be, req->waiter);
        if (bw == NULL)
            return BACKEND_NO_MEMORY;
    }
    /* redis:// keeps the fence counter as it is (no clock floor) and
     * marks nothing: a waiter keeps its place in the queue */
    if (redis_acquire_build(be, req, bw, false, 0, &c) != 0)
        return BACKEND_NO_MEMORY;
    /* no reply: the waiter keeps its place, if any */
    res = redis_grant_run(be, &c, redis_reply_acquire, out);
    redis_acquire_done(be, req, res, out);
    return res;
}

void redis_acquire_done(struct redis_be *be,
                        const struct lock_req *req,
                        enum backend_result res,
                        const struct lock_grant *out)
{
    if (res == BACKEND_OK && be->topology == REDIS_BE_CLUSTER)
        redis_cluster_note(be, req->key, req->key_len,
                           out->replay ? out->token : req->token,
                           out->expires_at_ms);
    if (res == BACKEND_OK && req->waiter != NULL)
        redis_wait_free(req->waiter); /* out of the queue (a replay too) */
}

static enum backend_result redis_cancel_wait(struct backend *b,
                                             const char *key,
                                             size_t key_len,
                                             struct lock_waiter *waiter)
{
    struct redis_be *be = (struct redis_be *)b;
    struct redis_wait *bw = waiter->be_data;
    enum backend_result res = BACKEND_OK;

    if (bw == NULL)
        return BACKEND_OK;
    if (redis_cancel_run(be, key, key_len, bw->id) != 0) {
        /* retried by the subscriber once Redis answers; at the latest,
         * the place goes when its deadline passes */
        redis_trash_add(be, key, key_len, bw->id,
                        bw->end_ms + REDIS_BE_GRACE_MS);
        res = BACKEND_UNAVAILABLE;
    }
    redis_wait_free(waiter);
    return res;
}

/* ---- renew, release, inspect, ping ---- */

int redis_call_renew(struct redis_be *be,
                     const struct lock_req *req,
                     struct redis_call *c)
{
    struct redis_args a;
    char ttl[24];

    snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)req->ttl_ms);
    redis_arg_key(be, &a, REDIS_BE_REN_LOCK, "lock:", req->key, req->key_len);
    redis_arg_key(be, &a, REDIS_BE_REN_EXP, "exp:", req->key, req->key_len);
    redis_arg_global(be, &a, REDIS_BE_REN_HELD, REDIS_BE_COUNTS);
    redis_arg_key(be, &a, REDIS_BE_REN_FENCE, "fence:", req->key, req->key_len);
    redis_arg_global(be, &a, REDIS_BE_REN_INDEX, REDIS_BE_INDEX);
    redis_arg(&a, REDIS_BE_REN_TOKEN, req->token, strlen(req->token));
    redis_arg(&a, REDIS_BE_REN_TTL, ttl, strlen(ttl));
    redis_arg(&a, REDIS_BE_REN_REENTER, req->reenter ? "1" : "0", 1);
    return redis_call_pack(c, REDIS_BE_SCRIPT_RENEW, REDIS_BE_REN_NKEYS,
                           REDIS_BE_REN_NARGS, a.v, a.len);
}

enum backend_result redis_reply_renew(struct redis_be *be,
                                      const redisReply *r,
                                      struct lock_grant *out)
{
    enum backend_result res = BACKEND_UNAVAILABLE;

    memset(out, 0, sizeof(*out));
    if (redis_grant_fill(r, out))
        return BACKEND_OK;
    if (redis_reply_ints(r, 1, 0))
        res = BACKEND_NOT_FOUND;
    else if (redis_reply_ints(r, 1, -1))
        res = BACKEND_MISMATCH;
    else if (redis_reply_ints(r, 1, -3))
        res = BACKEND_HOLDS_MAX;
    else
        redis_warn(be, "renew", "unexpected reply");
    return res;
}

static enum backend_result redis_renew(struct backend *b,
                                       const struct lock_req *req,
                                       struct lock_grant *out)
{
    struct redis_be *be = (struct redis_be *)b;
    struct redis_call c;
    enum backend_result res;

    if (redis_call_renew(be, req, &c) != 0)
        return BACKEND_NO_MEMORY;
    res = redis_grant_run(be, &c, redis_reply_renew, out);
    if (res == BACKEND_OK && be->topology == REDIS_BE_CLUSTER)
        redis_cluster_note(be, req->key, req->key_len, req->token,
                           out->expires_at_ms);
    return res;
}

void redis_release_args(const struct redis_be *be,
                        const char *key,
                        size_t key_len,
                        const char *token,
                        size_t token_len,
                        bool all,
                        struct redis_args *a)
{
    redis_arg_key(be, a, REDIS_BE_REL_LOCK, "lock:", key, key_len);
    redis_arg_key(be, a, REDIS_BE_REL_QUEUE, "fifo:", key, key_len);
    redis_arg_key(be, a, REDIS_BE_REL_EXP, "exp:", key, key_len);
    redis_arg_key(be, a, REDIS_BE_REL_MWAIT, "mwait:", key, key_len);
    redis_arg_global(be, a, REDIS_BE_REL_INDEX, REDIS_BE_INDEX);
    redis_arg_global(be, a, REDIS_BE_REL_HELD, REDIS_BE_COUNTS);
    redis_arg_key(be, a, REDIS_BE_REL_FENCE, "fence:", key, key_len);
    redis_arg(a, REDIS_BE_REL_TOKEN, token, token_len);
    redis_arg(a, REDIS_BE_REL_ALL, all ? "1" : "0", 1);
    redis_arg(a, REDIS_BE_REL_CHANNEL, be->channel, strlen(be->channel));
    redis_arg(a, REDIS_BE_REL_KEY, key, key_len);
}

int redis_call_release(struct redis_be *be,
                       const struct lock_req *req,
                       struct redis_call *c)
{
    struct redis_args a;

    redis_release_args(be, req->key, req->key_len, req->token,
                       strlen(req->token), req->all, &a);
    return redis_call_pack(c, REDIS_BE_SCRIPT_RELEASE, REDIS_BE_REL_NKEYS,
                           REDIS_BE_REL_NARGS, a.v, a.len);
}

enum backend_result redis_reply_release(struct redis_be *be,
                                        const redisReply *r,
                                        struct lock_grant *out)
{
    memset(out, 0, sizeof(*out));
    if (redis_reply_ints(r, 3, 1) && r->element[1]->integer >= 0 &&
        r->element[1]->integer < LOCK_HOLDS_MAX) {
        out->holds = (uint32_t)r->element[1]->integer;
        if (out->holds == 0 && r->element[2]->integer > 0)
            out->granted_at_ms = r->element[2]->integer;
        return BACKEND_OK;
    }
    if (redis_reply_ints(r, 1, 0))
        return BACKEND_NOT_FOUND;
    if (redis_reply_ints(r, 1, -1))
        return BACKEND_MISMATCH;
    redis_warn(be, "release", "unexpected reply");
    return BACKEND_UNAVAILABLE;
}

static enum backend_result redis_release(struct backend *b,
                                         const struct lock_req *req,
                                         struct lock_grant *out)
{
    struct redis_be *be = (struct redis_be *)b;
    struct redis_call c;
    enum backend_result res;

    if (redis_call_release(be, req, &c) != 0)
        return BACKEND_NO_MEMORY;
    res = redis_grant_run(be, &c, redis_reply_release, out);
    redis_release_done(be, req, res, out);
    return res;
}

void redis_release_done(struct redis_be *be,
                        const struct lock_req *req,
                        enum backend_result res,
                        const struct lock_grant *out)
{
    if (res == BACKEND_OK && out->holds == 0 &&
        be->topology == REDIS_BE_CLUSTER)
        redis_cluster_unnote(be, req->key, req->key_len, req->token);
    /* the last hold: wake local waiters now; the published message will
     * wake them again (spurious is fine) and reaches the other instances */
    if (res == BACKEND_OK && out->holds == 0 && be->hooks.notify != NULL)
        be->hooks.notify(be->hooks.arg, req->key, req->key_len);
}

static enum backend_result redis_inspect(struct backend *b,
                                         const char *key,
                                         size_t key_len,
                                         struct lock_info *out)
{
    return redis_inspect_run((struct redis_be *)b, key, key_len, out);
}

static enum backend_result redis_ping(struct backend *b)
{
    struct redis_be *be = (struct redis_be *)b;
    const char *argv[] = { "PING" };
    size_t lens[] = { 4 };
    redisReply *r = redis_command(be, 1, argv, lens);
    enum backend_result res = BACKEND_UNAVAILABLE;

    if (r == NULL)
        return BACKEND_UNAVAILABLE;
    if (r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0)
        res = BACKEND_OK;
    else
        redis_warn(be, "PING",
                   r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return res;
}

/* ---- close ---- */

static void redis_close(struct backend *b)
{
    struct redis_be *be = (struct redis_be *)b;

    if (be == NULL)
        return;
    redis_sub_stop(be);
    redis_sentinel_free(be); /* uses be->conns: before them */
    redis_conns_free(be);
    redis_trash_free(be); /* their places go at their deadlines */
    pthread_cond_destroy(&be->sub_cond);
    pthread_mutex_destroy(&be->lock);
    redis_url_free(be);
    free(be);
}

const struct backend_ops redis_backend = {
    .scheme = "redis",
    .caps = BACKEND_CAP_QUEUE | BACKEND_CAP_NOTIFIES | BACKEND_CAP_BATCH,
    .open = redis_open,
    .acquire = redis_acquire,
    .renew = redis_renew,
    .release = redis_release,
    .inspect = redis_inspect,
    .cancel_wait = redis_cancel_wait,
    .acquire_multi = redis_acquire_multi,
    .renew_multi = redis_renew_multi,
    .release_multi = redis_release_multi,
    .list = redis_list,
    .force_release = redis_force_release,
    .ping = redis_ping,
    .held_count = redis_held_count,
    .close = redis_close,
    .describe = redis_describe,
    .batch = redis_batch,
};
