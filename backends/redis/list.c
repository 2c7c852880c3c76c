/*
 * backends/redis/list.c - the Redis adapter's list() and held_count():
 * both read two prefix-wide keys the other scripts keep (redis.c):
 *   P "keys"    the index: members = a held lockd key (raw bytes), NUL
 *               and the fence of the grant that made it held, score 0,
 *               in buckets of at most 120 (P "keys#" hi for each hi in
 *               the directory P "keys@", and P "keys", holders.lua), each a
 *               compact listpack (an older lockd kept them all in one
 *               sorted set, P "index", not read now: README, *How it is
 *               stored*). A grant puts the key's member; a release or a
 *               forced release that leaves the key free takes it out. A
 *               key whose holders Redis expired stays until the key's
 *               next grant replaces it, list.lua meets it, or a grant or
 *               held_count() samples it (below): pruned lazily, a bounded
 *               number per call.
 *   P "counts"  hash, expiry second -> how many holders expire in it
 *               (holders.lua's held_put()): a grant adds one, a renew
 *               moves one, a release or a reap takes one; an expiry by
 *               Redis's clock needs nothing, for only the seconds ahead
 *               are summed. An older lockd kept a sorted set with a
 *               member per holder, P "held", not read now.
 *
 * list: one script (list.lua) reads the index with ZRANGEBYLEX from the
 * page's start to the end of the prefix's range, bucket after bucket, at
 * most REDIS_BE_LIST_BUDGET(limit) entries (a bucket that gives none
 * costs one), and sums up each key as inspect
 * does (read only; a shared key costs one read of its live holders). It
 * stops at limit live keys, or at the budget with more set and resume at
 * the last entry looked at: expired keys cost the budget, never the page
 * beyond it. Never SCAN or KEYS.
 *
 * held_count: the sum of the counts' seconds still ahead, one script on
 * this thread's connection with the call timeout: a holder counts until
 * the second it expires in has passed. It also drops up to
 * REDIS_BE_STALE_BATCH seconds passed, and looks up as many index members
 * of a bucket, taking out those of free keys, as grants do with eight at
 * one grant in four (holders.lua's held_prune_some()), so neither grows
 * with keys nobody touches again; both expire REDIS_BE_RETAIN_MS after
 * the last holder.
 *
 * expired_fence (acquire): a shared holder reaped by the grant's script is
 * known with its record. A grant of a free key that finds its index
 * member (no release took it out: its holders expired) answers the fence
 * in it, the fence of the last grant that made the key held (or of the
 * key's own counter, if an older lockd or redlock wrote one). Unknown (0)
 * once the member was pruned.
 *
 * Redis Cluster: a script touches one slot only, so the scripts keep these
 * two sets per lock tag there, and list() and held_count() read the
 * directory clusterdir.c keeps instead.
 */
#include "backends/redis/redis_int.h"

#include <stdio.h>
#include <string.h>

/* list.lua's reply: the head, then 6 elements per key */
#define REDIS_BE_LST_HEAD 4
#define REDIS_BE_LST_EACH 6

static void redis_lex_set(struct redis_lex *b, char c, const char *k, size_t n)
{
    b->s[0] = c;
    memcpy(b->s + 1, k, n);
    b->n = n + 1;
}

/* Byte order of a and b: memcmp on the shorter, then shorter first. */
static int redis_keycmp(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);

    if (c != 0)
        return c;
    return an < bn ? -1 : (an > bn ? 1 : 0);
}

/* The page's range of the index: from after (exclusive) or the prefix
 * (inclusive), whichever comes later, to the first string past every key
 * that starts with the prefix (exclusive): the prefix without its
 * trailing 0xff bytes, its last byte plus one; "+" when nothing is left
 * (an empty prefix or one of 0xff bytes only). */
void redis_list_range(const struct lock_list_req *req,
                      struct redis_lex *min,
                      struct redis_lex *max)
{
    size_t n = req->prefix_len;

    if (req->after != NULL &&
        redis_keycmp(req->after, req->after_len, req->prefix, n) >= 0)
        redis_lex_set(min, '(', req->after, req->after_len);
    else if (n > 0)
        redis_lex_set(min, '[', req->prefix, n);
    else
        redis_lex_set(min, '-', "", 0);
    while (n > 0 && (unsigned char)req->prefix[n - 1] == 0xff)
        n--;
    if (n == 0) {
        redis_lex_set(max, '+', "", 0);
        return;
    }
    redis_lex_set(max, '(', req->prefix, n);
    max->s[n] = (char)((unsigned char)max->s[n] + 1);
}

/* A string element of 1..LOCK_KEY_MAX bytes into k (NUL-terminated). */
static bool redis_key_el(const redisReply *e, char *k, size_t *n)
{
    if (e->type != REDIS_REPLY_STRING || e->len == 0 || e->len > LOCK_KEY_MAX)
        return false;
    memcpy(k, e->str, e->len);
    k[e->len] = '\0';
    *n = e->len;
    return true;
}

/* One key's 6 elements from at into e: true, or false if malformed. */
static bool redis_entry_fill(const redisReply *r,
                             size_t at,
                             long long now,
                             struct lock_entry *e)
{
    long long mode, fence, count;

    for (size_t i = 1; i < 5; i++)
        if (!redis_reply_is_int(r, at + i))
            return false;
    mode = r->element[at + 1]->integer;
    fence = r->element[at + 2]->integer;
    count = r->element[at + 4]->integer;
    if (!redis_key_el(r->element[at], e->key, &e->key_len) ||
        (mode != LOCK_EXCLUSIVE && mode != LOCK_SHARED) || fence <= 0 ||
        (uint64_t)fence > LOCK_FENCE_MAX || count < 1 || count > UINT32_MAX)
        return false;
    e->mode = (enum lock_mode)mode;
    e->fence = (uint64_t)fence;
    e->expires_at_ms = r->element[at + 3]->integer;
    e->ttl_ms =
        e->expires_at_ms - now >= 1 ? (uint64_t)(e->expires_at_ms - now) : 1;
    e->holder_count = (uint32_t)count;
    e->has_owner = false;
    if (r->element[at + 5]->type == REDIS_REPLY_STRING) {
        size_t on = r->element[at + 5]->len;
        if (on > LOCK_OWNER_MAX)
            on = LOCK_OWNER_MAX;
        memcpy(e->owner, r->element[at + 5]->str, on);
        e->owner[on] = '\0';
        e->has_owner = true;
    }
    return true;
}

/* list.lua's reply into out: true, or false if malformed. */
static bool
redis_list_fill(const redisReply *r, uint32_t limit, struct lock_list *out)
{
    size_t n;
    long long now;

    if (!redis_reply_is_int(r, 0) || r->element[0]->integer != 1 ||
        !redis_reply_is_int(r, 1) || !redis_reply_is_int(r, 3) ||
        (r->elements - REDIS_BE_LST_HEAD) % REDIS_BE_LST_EACH != 0)
        return false;
    n = (r->elements - REDIS_BE_LST_HEAD) / REDIS_BE_LST_EACH;
    now = r->element[3]->integer;
    if (n > limit)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!redis_entry_fill(r, REDIS_BE_LST_HEAD + i * REDIS_BE_LST_EACH, now,
                              &out->entries[i]))
            return false;
    out->n = n;
    out->more = r->element[1]->integer == 1;
    if (out->more &&
        !redis_key_el(r->element[2], out->resume, &out->resume_len))
        return false;
    return true;
}

int redis_call_list(struct redis_be *be,
                    const struct lock_list_req *req,
                    struct redis_call *c)
{
    struct redis_args a;
    struct redis_lex min, max;
    char limit[16], budget[16];

    redis_list_range(req, &min, &max);
    snprintf(limit, sizeof(limit), "%u", (unsigned)req->limit);
    snprintf(budget, sizeof(budget), "%u",
             (unsigned)REDIS_BE_LIST_BUDGET(req->limit));
    redis_arg_global(be, &a, REDIS_BE_LST_INDEX, REDIS_BE_INDEX);
    redis_arg(&a, REDIS_BE_LST_PREFIX, be->prefix, be->prefix_len);
    redis_arg(&a, REDIS_BE_LST_MIN, min.s, min.n);
    redis_arg(&a, REDIS_BE_LST_MAX, max.s, max.n);
    redis_arg(&a, REDIS_BE_LST_LIMIT, limit, strlen(limit));
    redis_arg(&a, REDIS_BE_LST_BUDGET, budget, strlen(budget));
    return redis_call_pack(c, REDIS_BE_SCRIPT_LIST, REDIS_BE_LST_NKEYS,
                           REDIS_BE_LST_NARGS, a.v, a.len);
}

/* out->entries is the caller's array: kept; the rest is set. */
enum backend_result redis_reply_list(struct redis_be *be,
                                     const struct lock_list_req *req,
                                     const redisReply *r,
                                     struct lock_list *out)
{
    out->n = 0;
    out->more = false;
    out->resume_len = 0;
    if (redis_list_fill(r, req->limit, out))
        return BACKEND_OK;
    out->n = 0;
    out->more = false;
    out->resume_len = 0;
    redis_warn(be, "list", "unexpected reply");
    return BACKEND_UNAVAILABLE;
}

enum backend_result redis_list(struct backend *b,
                               const struct lock_list_req *req,
                               struct lock_list *out)
{
    struct redis_be *be = (struct redis_be *)b;
    struct redis_call c;
    redisReply *r;
    enum backend_result res;

    if (be->topology == REDIS_BE_CLUSTER) /* clusterdir.c */
        return redis_cluster_list(be, req, out);
    if (redis_call_list(be, req, &c) != 0)
        return BACKEND_NO_MEMORY;
    r = redis_call_run(be, &c);
    redis_call_free(&c);
    if (r == NULL)
        return BACKEND_UNAVAILABLE;
    res = redis_reply_list(be, req, r, out);
    freeReplyObject(r);
    return res;
}

int redis_call_held(struct redis_be *be, struct redis_call *c)
{
    struct redis_args a;
    char batch[16];

    snprintf(batch, sizeof(batch), "%d", REDIS_BE_STALE_BATCH);
    redis_arg_global(be, &a, REDIS_BE_HLD_HELD, REDIS_BE_COUNTS);
    redis_arg_global(be, &a, REDIS_BE_HLD_INDEX, REDIS_BE_INDEX);
    redis_arg(&a, REDIS_BE_HLD_BATCH, batch, strlen(batch));
    return redis_call_pack(c, REDIS_BE_SCRIPT_HELD, REDIS_BE_HLD_NKEYS,
                           REDIS_BE_HLD_NARGS, a.v, a.len);
}

int64_t redis_reply_held(const redisReply *r)
{
    if (r->type == REDIS_REPLY_INTEGER && r->integer >= 0)
        return r->integer;
    return -1;
}

int64_t redis_held_count(struct backend *b)
{
    struct redis_be *be = (struct redis_be *)b;
    struct redis_call c;
    redisReply *r;
    int64_t n;

    if (be->topology == REDIS_BE_CLUSTER) /* clusterdir.c */
        return redis_cluster_held_count(be);
    if (redis_call_held(be, &c) != 0)
        return -1;
    r = redis_call_run(be, &c);
    redis_call_free(&c);
    if (r == NULL)
        return -1;
    n = redis_reply_held(r);
    if (n < 0)
        redis_warn(be, "held_count", "unexpected reply");
    freeReplyObject(r);
    return n;
}
