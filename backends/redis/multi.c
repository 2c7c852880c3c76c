/*
 * backends/redis/multi.c - several keys at once on Redis: acquire_multi,
 * renew_multi and release_multi, each one script (acquire_multi.lua,
 * renew_multi.lua, release_multi.lua) over every Redis key of every lockd
 * key it names, so Redis runs it as one atomic step: no other call sees
 * some keys changed and others not, and two of them (or one and a
 * single-key script) never wait on each other. The scripts do to each key
 * what the single-key ones do (the steps in holders.lua), in the same
 * layout (redis.c), so a key granted here is an ordinary exclusive lock
 * afterwards. Apart from redis.c because of the arguments: as many as the
 * request has keys, built on the heap.
 */
#include "backends/redis/redis_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One multi-key script call's arguments, laid out as redis_script_argv()
 * takes them. */
struct redis_margs {
    const char **v; /* owned array; the strings are the caller's or in
                       names */
    size_t *len;    /* owned */
    char *names;    /* owned: the Redis key names, back to back */
    int nkeys;
    int nargs; /* KEYS and ARGV so far */
};

/* The Redis keys of each lockd key, in the order each script reads them
 * (its rk() or KEYS offsets); ARGV follow them, as each op pushes them. */
static const char *const acquire_kinds[] = {
    "lock:", "fence:", "fifo:", "qdl:", "exp:", "mwait:", REDIS_BE_SLOT_FENCE,
    NULL
};
_Static_assert(sizeof(acquire_kinds) / sizeof(acquire_kinds[0]) ==
                   REDIS_BE_MULTI_ACQ_KEYS + 1,
               "replicas.c reads the multi-key acquire's layout");
static const char *const renew_kinds[] = { "lock:", "exp:", "fence:", NULL };
static const char *const release_kinds[] = { "lock:",  "fifo:",  "exp:",
                                             "mwait:", "fence:", NULL };

/* ---- arguments ---- */

static void redis_margs_free(struct redis_margs *m)
{
    free(m->v);
    free(m->len);
    free(m->names);
    memset(m, 0, sizeof(*m));
}

static void redis_margs_push(struct redis_margs *m, const char *s, size_t n)
{
    m->v[3 + m->nargs] = s;
    m->len[3 + m->nargs] = n;
    m->nargs++;
}

/* The lockd keys themselves, as ARGV (what PUBLISH sends). */
static void redis_margs_push_keys(struct redis_margs *m,
                                  const struct lock_multi_req *req)
{
    for (size_t i = 0; i < req->n; i++)
        redis_margs_push(m, req->keys[i], req->key_lens[i]);
}

/* Room for the KEYS (each kind for each key of req, key by key, then the
 * index and the holders' counts, which every multi-key script takes last) and
 * nargv ARGV, and the KEYS set: 0, or -1 out of memory. */
static int redis_margs_init(const struct redis_be *be,
                            const struct lock_multi_req *req,
                            const char *const *kinds,
                            size_t nargv,
                            struct redis_margs *m)
{
    static const char *const globals[] = { REDIS_BE_INDEX, REDIS_BE_COUNTS };
    size_t nkinds = 0, bytes = 0, slots, at = 0;

    memset(m, 0, sizeof(*m));
    while (kinds[nkinds] != NULL)
        nkinds++;
    for (size_t i = 0; i < req->n; i++)
        for (size_t k = 0; k < nkinds; k++)
            bytes += redis_key_len(be, kinds[k], req->key_lens[i]);
    for (size_t g = 0; g < 2; g++)
        bytes += be->prefix_len + strlen(globals[g]) + REDIS_BE_CLUSTER_TAG;
    /* the command, the digest and the KEYS count first; the stamp last */
    slots = 3 + req->n * nkinds + 2 + nargv + 1;
    m->v = calloc(slots, sizeof(*m->v));
    m->len = calloc(slots, sizeof(*m->len));
    m->names = malloc(bytes);
    if (m->v == NULL || m->len == NULL || m->names == NULL) {
        redis_margs_free(m);
        return -1;
    }
    for (size_t i = 0; i < req->n; i++)
        for (size_t k = 0; k < nkinds; k++) {
            size_t n = redis_key_name(be, kinds[k], req->keys[i],
                                      req->key_lens[i], m->names + at);
            redis_margs_push(m, m->names + at, n);
            at += n;
        }
    for (size_t g = 0; g < 2; g++) {
        size_t gl = strlen(globals[g]), n = be->prefix_len;
        memcpy(m->names + at, be->prefix, be->prefix_len);
        if (be->topology == REDIS_BE_CLUSTER) { /* the first key's slot */
            memcpy(m->names + at + n, m->names + n, REDIS_BE_CLUSTER_TAG);
            n += REDIS_BE_CLUSTER_TAG;
        }
        memcpy(m->names + at + n, globals[g], gl);
        redis_margs_push(m, m->names + at, n + gl);
        at += n + gl;
    }
    m->nkeys = m->nargs;
    return 0;
}

/* A Redis Cluster runs one script on one slot only: keys apart cannot be
 * changed in one atomic step, so the request is refused (a 400). */
static bool redis_multi_apart(const struct redis_be *be,
                              const struct lock_multi_req *req)
{
    return be->topology == REDIS_BE_CLUSTER &&
           !redis_cluster_same_slot(req->keys, req->key_lens, req->n);
}

/* Directory notes (clusterdir.c) for every key of a grant or renew. */
static void redis_multi_note(struct redis_be *be,
                             const struct lock_multi_req *req,
                             const struct lock_multi_grant *g)
{
    for (size_t i = 0; be->topology == REDIS_BE_CLUSTER && i < req->n; i++)
        redis_cluster_note(be, req->keys[i], req->key_lens[i], req->token,
                           g->expires_at_ms);
}

/* c for script s from m, which is freed: 0, or -1 (no memory). */
static int redis_margs_pack(struct redis_margs *m,
                            enum redis_script s,
                            struct redis_call *c)
{
    int rc = redis_call_pack(c, s, m->nkeys, m->nargs, m->v + 3, m->len + 3);

    redis_margs_free(m);
    return rc;
}

/* ---- replies ---- */

/* True if r is an array of integers whose first is status. */
static bool redis_multi_ints(const redisReply *r, long long status)
{
    if (!redis_reply_is_int(r, 0) || r->element[0]->integer != status)
        return false;
    for (size_t i = 1; i < r->elements; i++)
        if (!redis_reply_is_int(r, i))
            return false;
    return true;
}

/* {1, ttl, expires_at, fence of each of the n keys} (acquire, renew) into
 * out: true, or false if it is not that (out untouched). */
static bool redis_multi_grant_fill(const redisReply *r,
                                   size_t n,
                                   struct lock_multi_grant *out)
{
    if (!redis_multi_ints(r, 1) || r->elements != 3 + n ||
        r->element[1]->integer <= 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        long long f = r->element[3 + i]->integer;
        if (f <= 0 || (uint64_t)f > LOCK_FENCE_MAX)
            return false;
    }
    out->ttl_ms = (uint64_t)r->element[1]->integer;
    out->expires_at_ms = r->element[2]->integer;
    for (size_t i = 0; i < n; i++)
        out->fences[i] = (uint64_t)r->element[3 + i]->integer;
    return true;
}

/* True if the integers of r from element from on are indexes of the n
 * keys. */
static bool redis_multi_indexes(const redisReply *r, size_t from, size_t n)
{
    for (size_t i = from; i < r->elements; i++)
        if (r->element[i]->integer < 0 ||
            (unsigned long long)r->element[i]->integer >= n)
            return false;
    return true;
}

/* {0, retry_ms, index of each held key} into out: true, or false (out
 * untouched). */
static bool redis_multi_held_fill(const redisReply *r,
                                  size_t n,
                                  struct lock_multi_grant *out)
{
    if (!redis_multi_ints(r, 0) || r->elements < 3 || r->elements > 2 + n ||
        r->element[1]->integer < 0 || !redis_multi_indexes(r, 2, n))
        return false;
    out->retry_ms = (uint64_t)r->element[1]->integer;
    for (size_t i = 2; i < r->elements; i++)
        out->held[r->element[i]->integer] = true;
    return true;
}

/* ---- the calls ---- */

/* ARGV: the token, the TTL, has owner, the owner, the channel, mark_ms,
 * floor, then the lockd keys (acquire_multi.lua's order). */
int redis_call_acquire_multi(struct redis_be *be,
                             const struct lock_multi_req *req,
                             bool floor,
                             uint64_t mark_ms,
                             struct redis_call *c)
{
    const char *owner = req->owner != NULL ? req->owner : "";
    struct redis_margs m;
    char ttl[24], mark[24];

    memset(c, 0, sizeof(*c));
    snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)req->ttl_ms);
    snprintf(mark, sizeof(mark), "%llu", (unsigned long long)mark_ms);
    if (redis_margs_init(be, req, acquire_kinds, 7 + req->n, &m) != 0)
        return -1;
    redis_margs_push(&m, req->token, strlen(req->token));
    redis_margs_push(&m, ttl, strlen(ttl));
    redis_margs_push(&m, req->owner != NULL ? "1" : "0", 1);
    redis_margs_push(&m, owner, strlen(owner));
    redis_margs_push(&m, be->channel, strlen(be->channel));
    redis_margs_push(&m, mark, strlen(mark));
    redis_margs_push(&m, floor ? "1" : "0", 1);
    redis_margs_push_keys(&m, req);
    return redis_margs_pack(&m, REDIS_BE_SCRIPT_ACQUIRE_MULTI, c);
}

int redis_call_renew_multi(struct redis_be *be,
                           const struct lock_multi_req *req,
                           struct redis_call *c)
{
    struct redis_margs m;
    char ttl[24];

    memset(c, 0, sizeof(*c));
    snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)req->ttl_ms);
    if (redis_margs_init(be, req, renew_kinds, 2, &m) != 0)
        return -1;
    redis_margs_push(&m, req->token, strlen(req->token));
    redis_margs_push(&m, ttl, strlen(ttl));
    return redis_margs_pack(&m, REDIS_BE_SCRIPT_RENEW_MULTI, c);
}

int redis_call_release_multi(struct redis_be *be,
                             const struct lock_multi_req *req,
                             struct redis_call *c)
{
    struct redis_margs m;

    memset(c, 0, sizeof(*c));
    if (redis_margs_init(be, req, release_kinds, 2 + req->n, &m) != 0)
        return -1;
    redis_margs_push(&m, req->token, strlen(req->token));
    redis_margs_push(&m, be->channel, strlen(be->channel));
    redis_margs_push_keys(&m, req);
    return redis_margs_pack(&m, REDIS_BE_SCRIPT_RELEASE_MULTI, c);
}

/* ---- the parsers ---- */

/* A reply that is none of what the script sends: nothing is known, so
 * nothing is told (out zeroed), never a grant. */
static enum backend_result redis_multi_odd(struct redis_be *be,
                                           const char *what,
                                           struct lock_multi_grant *out)
{
    memset(out, 0, sizeof(*out));
    redis_warn(be, what, "unexpected reply");
    return BACKEND_UNAVAILABLE;
}

enum backend_result redis_reply_acquire_multi(struct redis_be *be,
                                              const struct lock_multi_req *req,
                                              const redisReply *r,
                                              struct lock_multi_grant *out)
{
    memset(out, 0, sizeof(*out));
    if (redis_multi_grant_fill(r, req->n, out))
        return BACKEND_OK;
    if (redis_multi_held_fill(r, req->n, out))
        return BACKEND_HELD;
    return redis_multi_odd(be, "acquire_multi", out);
}

enum backend_result redis_reply_renew_multi(struct redis_be *be,
                                            const struct lock_multi_req *req,
                                            const redisReply *r,
                                            struct lock_multi_grant *out)
{
    memset(out, 0, sizeof(*out));
    if (redis_multi_grant_fill(r, req->n, out))
        return BACKEND_OK;
    if ((redis_multi_ints(r, 0) || redis_multi_ints(r, -1)) &&
        r->elements == 2 && redis_multi_indexes(r, 1, req->n)) {
        out->bad = (size_t)r->element[1]->integer;
        return r->element[0]->integer == 0 ? BACKEND_NOT_FOUND
                                           : BACKEND_MISMATCH;
    }
    return redis_multi_odd(be, "renew_multi", out);
}

enum backend_result redis_reply_release_multi(struct redis_be *be,
                                              const struct lock_multi_req *req,
                                              const redisReply *r,
                                              struct lock_multi_grant *out)
{
    memset(out, 0, sizeof(*out));
    if (redis_multi_ints(r, 0) && r->elements == 1)
        return BACKEND_NOT_FOUND;
    if (redis_multi_ints(r, 1) && r->elements >= 2 &&
        r->elements <= 1 + req->n && redis_multi_indexes(r, 1, req->n)) {
        for (size_t i = 1; i < r->elements; i++)
            out->released[r->element[i]->integer] = true;
        return BACKEND_OK;
    }
    return redis_multi_odd(be, "release_multi", out);
}

/* ---- the operations ---- */

typedef enum backend_result (*redis_multi_parse_fn)(
    struct redis_be *,
    const struct lock_multi_req *,
    const redisReply *,
    struct lock_multi_grant *);

/* Run c (freed) on this thread's connection and parse its reply: what
 * parse says, or UNAVAILABLE. */
static enum backend_result redis_multi_run(struct redis_be *be,
                                           struct redis_call *c,
                                           const struct lock_multi_req *req,
                                           redis_multi_parse_fn parse,
                                           struct lock_multi_grant *out)
{
    redisReply *r = redis_call_run(be, c);
    enum backend_result res;

    redis_call_free(c);
    if (r == NULL)
        return BACKEND_UNAVAILABLE;
    res = parse(be, req, r, out);
    freeReplyObject(r);
    return res;
}

/*
 * Stamped like the single acquire: a script Redis runs after lockd gave
 * up on it (a stalled Redis resuming) does nothing, and a resend after a
 * closed connection finds its own token on every key and is answered the
 * same grant. A grant whose answer is lost otherwise stays until its TTL,
 * under a token nobody has, as a single grant would. redis:// keeps the
 * fence counters as they are (no clock floor).
 */
enum backend_result redis_acquire_multi(struct backend *b,
                                        const struct lock_multi_req *req,
                                        struct lock_multi_grant *out)
{
    struct redis_be *be = (struct redis_be *)b;
    struct redis_call c;
    enum backend_result res;

    if (redis_multi_apart(be, req))
        return BACKEND_KEYS_APART;
    if (redis_call_acquire_multi(be, req, false, REDIS_BE_MARK_MS, &c) != 0)
        return BACKEND_NO_MEMORY;
    res = redis_multi_run(be, &c, req, redis_reply_acquire_multi, out);
    if (res == BACKEND_OK)
        redis_multi_note(be, req, out);
    return res;
}

enum backend_result redis_renew_multi(struct backend *b,
                                      const struct lock_multi_req *req,
                                      struct lock_multi_grant *out)
{
    struct redis_be *be = (struct redis_be *)b;
    struct redis_call c;
    enum backend_result res;

    if (redis_multi_apart(be, req))
        return BACKEND_KEYS_APART;
    if (redis_call_renew_multi(be, req, &c) != 0)
        return BACKEND_NO_MEMORY;
    res = redis_multi_run(be, &c, req, redis_reply_renew_multi, out);
    if (res == BACKEND_OK)
        redis_multi_note(be, req, out);
    return res;
}

/* Each key released wakes this instance's waiters at once; the published
 * message (when someone waits) wakes them again and every other
 * instance's. */
enum backend_result redis_release_multi(struct backend *b,
                                        const struct lock_multi_req *req,
                                        struct lock_multi_grant *out)
{
    struct redis_be *be = (struct redis_be *)b;
    struct redis_call c;
    enum backend_result res;

    if (redis_multi_apart(be, req))
        return BACKEND_KEYS_APART;
    if (redis_call_release_multi(be, req, &c) != 0)
        return BACKEND_NO_MEMORY;
    res = redis_multi_run(be, &c, req, redis_reply_release_multi, out);
    for (size_t i = 0; be->topology == REDIS_BE_CLUSTER && i < req->n; i++)
        if (res == BACKEND_OK && out->released[i])
            redis_cluster_unnote(be, req->keys[i], req->key_lens[i],
                                 req->token);
    for (size_t i = 0; res == BACKEND_OK && i < req->n; i++)
        if (out->released[i] && be->hooks.notify != NULL)
            be->hooks.notify(be->hooks.arg, req->keys[i], req->key_lens[i]);
    return res;
}
