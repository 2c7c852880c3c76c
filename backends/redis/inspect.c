/*
 * backends/redis/inspect.c - the Redis adapter's inspect(): inspect.lua's
 * summary of a key's holders (mode, limit, count, greatest fence, last
 * expiry) and the first LOCK_HOLDERS_SHOWN of them by fence, read into a
 * struct lock_info; and force_release(), whose script (force.lua) answers
 * the same for the holders it removed. Apart from redis.c because the
 * reply is the longest one to check.
 */
#include "backends/redis/redis_int.h"

#include <stdlib.h>
#include <string.h>

/* inspect.lua's reply: the summary's elements, then 4 per holder */
#define REDIS_BE_INS_HEAD 7
#define REDIS_BE_INS_EACH 4

/* Remaining ms of an expiry at now, at least 1 (held). */
static uint64_t redis_left(long long expires_at, long long now)
{
    return expires_at - now >= 1 ? (uint64_t)(expires_at - now) : 1;
}

/* An owner element (string or nil) into has/owner. */
static void redis_owner(const redisReply *e, bool *has, char *owner)
{
    size_t n;

    *has = false;
    if (e->type != REDIS_REPLY_STRING)
        return;
    n = e->len <= LOCK_OWNER_MAX ? e->len : LOCK_OWNER_MAX;
    memcpy(owner, e->str, n);
    owner[n] = '\0';
    *has = true;
}

/* The holders after the summary into out->holders: 0, -1 on a bad reply,
 * -2 out of memory. */
static int
redis_holders_fill(const redisReply *r, long long now, struct lock_info *out)
{
    size_t n = (r->elements - REDIS_BE_INS_HEAD) / REDIS_BE_INS_EACH;

    if (n == 0 || n > LOCK_HOLDERS_SHOWN || n > out->holder_count ||
        (r->elements - REDIS_BE_INS_HEAD) % REDIS_BE_INS_EACH != 0)
        return -1;
    out->holders = calloc(n, sizeof(*out->holders));
    if (out->holders == NULL)
        return -2;
    out->nholders = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        size_t at = REDIS_BE_INS_HEAD + i * REDIS_BE_INS_EACH;
        struct lock_holder *h = &out->holders[i];
        if (!redis_reply_is_int(r, at) || !redis_reply_is_int(r, at + 1) ||
            !redis_reply_is_int(r, at + 2) || r->element[at]->integer <= 0 ||
            r->element[at + 2]->integer < 1 ||
            r->element[at + 2]->integer > LOCK_HOLDS_MAX)
            return -1;
        h->fence = (uint64_t)r->element[at]->integer;
        h->expires_at_ms = r->element[at + 1]->integer;
        h->ttl_ms = redis_left(h->expires_at_ms, now);
        h->holds = (uint32_t)r->element[at + 2]->integer;
        redis_owner(r->element[at + 3], &h->has_owner, h->owner);
    }
    return 0;
}

/* inspect.lua's {1, ...} into out: OK, NO_MEMORY, or UNAVAILABLE for a
 * reply that is not what the script sends. */
static enum backend_result redis_inspect_fill(const redisReply *r,
                                              struct lock_info *out)
{
    long long mode, limit, count, now;
    int rc;

    for (size_t i = 1; i < REDIS_BE_INS_HEAD; i++)
        if (!redis_reply_is_int(r, i))
            return BACKEND_UNAVAILABLE;
    mode = r->element[1]->integer;
    limit = r->element[2]->integer;
    count = r->element[3]->integer;
    now = r->element[6]->integer;
    if ((mode != LOCK_EXCLUSIVE && mode != LOCK_SHARED) || limit < 0 ||
        limit > LOCK_LIMIT_MAX || count < 1 || count > UINT32_MAX ||
        (mode == LOCK_EXCLUSIVE && count != 1) || r->element[4]->integer <= 0)
        return BACKEND_UNAVAILABLE;
    out->mode = (enum lock_mode)mode;
    out->limit = (uint32_t)limit;
    out->holder_count = (uint32_t)count;
    out->fence = (uint64_t)r->element[4]->integer;
    out->expires_at_ms = r->element[5]->integer;
    out->ttl_ms = redis_left(out->expires_at_ms, now);
    rc = redis_holders_fill(r, now, out);
    if (rc != 0)
        return rc == -2 ? BACKEND_NO_MEMORY : BACKEND_UNAVAILABLE;
    if (mode == LOCK_EXCLUSIVE) { /* the one holder's, on top */
        out->holds = out->holders[0].holds;
        out->has_owner = out->holders[0].has_owner;
        memcpy(out->owner, out->holders[0].owner, sizeof(out->owner));
    }
    return BACKEND_OK;
}

/* A reply of inspect.lua or force.lua into out (r borrowed): OK,
 * NOT_FOUND, UNAVAILABLE (logged as what), NO_MEMORY. */
static enum backend_result redis_info_reply(struct redis_be *be,
                                            const char *what,
                                            const redisReply *r,
                                            struct lock_info *out)
{
    enum backend_result res = BACKEND_UNAVAILABLE;

    /* zeroed by the wrappers; again here, so that no field is left as the
     * caller had it and lock_info_clear() below frees only ours */
    memset(out, 0, sizeof(*out));
    if (redis_reply_is_int(r, 0) && r->element[0]->integer == 0 &&
        r->elements == 1)
        res = BACKEND_NOT_FOUND;
    else if (redis_reply_is_int(r, 0) && r->element[0]->integer == 1)
        res = redis_inspect_fill(r, out);
    if (res != BACKEND_OK)
        lock_info_clear(out);
    if (res == BACKEND_UNAVAILABLE)
        redis_warn(be, what, "unexpected reply");
    return res;
}

enum backend_result redis_reply_inspect(struct redis_be *be,
                                        const redisReply *r,
                                        struct lock_info *out)
{
    return redis_info_reply(be, "inspect", r, out);
}

enum backend_result redis_reply_force(struct redis_be *be,
                                      const redisReply *r,
                                      struct lock_info *out)
{
    return redis_info_reply(be, "force_release", r, out);
}

int redis_call_inspect(struct redis_be *be,
                       const char *key,
                       size_t key_len,
                       struct redis_call *c)
{
    struct redis_args a;

    redis_arg_key(be, &a, REDIS_BE_INS_LOCK, "lock:", key, key_len);
    redis_arg_key(be, &a, REDIS_BE_INS_EXP, "exp:", key, key_len);
    return redis_call_pack(c, REDIS_BE_SCRIPT_INSPECT, REDIS_BE_INS_NKEYS,
                           REDIS_BE_INS_NARGS, a.v, a.len);
}

/* Build c, run it on this thread's connection and parse its reply with
 * parse: what the parser says, UNAVAILABLE, or NO_MEMORY. */
static enum backend_result
redis_info_run(struct redis_be *be,
               struct redis_call *c,
               enum backend_result (*parse)(struct redis_be *,
                                            const redisReply *,
                                            struct lock_info *),
               struct lock_info *out)
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

enum backend_result redis_inspect_run(struct redis_be *be,
                                      const char *key,
                                      size_t key_len,
                                      struct lock_info *out)
{
    struct redis_call c;

    if (redis_call_inspect(be, key, key_len, &c) != 0)
        return BACKEND_NO_MEMORY;
    return redis_info_run(be, &c, redis_reply_inspect, out);
}

int redis_call_force(struct redis_be *be,
                     const char *key,
                     size_t key_len,
                     struct redis_call *c)
{
    struct redis_args a;

    redis_arg_key(be, &a, REDIS_BE_FRC_LOCK, "lock:", key, key_len);
    redis_arg_key(be, &a, REDIS_BE_FRC_EXP, "exp:", key, key_len);
    redis_arg_key(be, &a, REDIS_BE_FRC_QUEUE, "fifo:", key, key_len);
    redis_arg_key(be, &a, REDIS_BE_FRC_MWAIT, "mwait:", key, key_len);
    redis_arg_global(be, &a, REDIS_BE_FRC_INDEX, REDIS_BE_INDEX);
    redis_arg_global(be, &a, REDIS_BE_FRC_HELD, REDIS_BE_COUNTS);
    redis_arg_key(be, &a, REDIS_BE_FRC_FENCE, "fence:", key, key_len);
    redis_arg(&a, REDIS_BE_FRC_CHANNEL, be->channel, strlen(be->channel));
    redis_arg(&a, REDIS_BE_FRC_KEY, key, key_len);
    return redis_call_pack(c, REDIS_BE_SCRIPT_FORCE, REDIS_BE_FRC_NKEYS,
                           REDIS_BE_FRC_NARGS, a.v, a.len);
}

/*
 * One script: every holder goes (exclusive hash, or the shared records
 * and their expiry set, with their Idempotency-Keys), the slot's fence
 * counter stays, the key leaves the index and the counts, and the release is
 * published when someone waits (as release.lua does; the queue is left
 * as it is, its head takes the key next). Waiters here are woken at once.
 */
enum backend_result redis_force_release(struct backend *b,
                                        const char *key,
                                        size_t key_len,
                                        struct lock_info *out)
{
    struct redis_be *be = (struct redis_be *)b;
    struct redis_call c;
    enum backend_result res;

    if (redis_call_force(be, key, key_len, &c) != 0)
        return BACKEND_NO_MEMORY;
    res = redis_info_run(be, &c, redis_reply_force, out);
    if (res == BACKEND_OK && be->hooks.notify != NULL)
        be->hooks.notify(be->hooks.arg, key, key_len);
    return res;
}
