/*
 * backends/redis/clusterdir.c - the prefix-wide keys on a Redis Cluster:
 * the directory GET /locks and the held metric read.
 *
 * On one Redis the index of held keys and the holders' counts are two keys
 * every script updates in the same atomic step (list.c). On a cluster a
 * script touches one slot only, so the scripts keep those two per tag,
 * next to the lock (harmless, and what a takeover's expired fence reads),
 * and lockd keeps a directory in one slot (tag "dir") with plain commands
 * after each script that reached Redis:
 *   P{dir}index  sorted set, score 0, member = a lockd key that was held
 *   P{dir}held   sorted set, member = key NUL hash(token), score = the
 *                holder's expiry (Redis's unix ms)
 *   P{dir}expiry sorted set, key scored by the latest expiry noted for
 *                it (lockd before 2026-11-28 kept a hash P{dir}seen)
 * A grant or renew notes its holder (one script: ZADD, ZADD, ZADD max),
 * and takes out up to two keys and two holders whose expiry passed
 * REDIS_BE_RETAIN_MS ago, so that the directory does not grow with the
 * keys ever locked, listed or not; a release that leaves no hold takes
 * its held member out.
 *
 * list(): ZRANGEBYLEX of the index from the page's start, at most
 * REDIS_BE_LIST_BUDGET(limit) entries, each looked up with inspect on its
 * own slot: the page is exactly what the locks' own slots say (byte order,
 * cost bounded by the limit). Entries whose key is free are taken out,
 * but only when their noted expiry has passed, in one script on the
 * directory's slot: a grant noted meanwhile moved it forward, so a key
 * granted between the inspect and the prune is never dropped.
 * held_count(): ZCOUNT of P{dir}held from Redis's now; members
 * REDIS_BE_RETAIN_MS past their expiry are taken out.
 *
 * Lag, documented: the note follows the grant by one round trip; a grant
 * whose note was lost (the directory's master down at that moment, lockd
 * killed in between) is missing from GET /locks and from the metric until
 * its next renew. A forced release leaves its held member until its
 * expiry (the metric counts it until then).
 */
#include "backends/redis/redis_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIR_TAG "{dir}" /* never a lock key's tag: those are 16 hex */

/* note: KEYS index, held, expiry; ARGV key, member, expires_at, retain */
static const char dir_note_lua[] =
    "redis.call('ZADD', KEYS[1], 0, ARGV[1])\n"
    "redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])\n"
    "local s = tonumber(redis.call('ZSCORE', KEYS[3], ARGV[1]) or '0')\n"
    "if tonumber(ARGV[3]) > s then\n"
    "  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])\n"
    "end\n"
    "local t = redis.call('TIME')\n"
    "local cut = t[1] * 1000 + math.floor(t[2] / 1000) - ARGV[4]\n"
    "for _, k in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', cut,\n"
    "                              'LIMIT', 0, 2)) do\n"
    "  redis.call('ZREM', KEYS[1], k)\n"
    "  redis.call('ZREM', KEYS[3], k)\n"
    "end\n"
    "for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', cut,\n"
    "                              'LIMIT', 0, 2)) do\n"
    "  redis.call('ZREM', KEYS[2], m)\n"
    "end\n"
    "return 1\n";

/* prune: KEYS index, expiry; ARGV the keys found free */
static const char dir_prune_lua[] =
    "local t = redis.call('TIME')\n"
    "local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"
    "for _, k in ipairs(ARGV) do\n"
    "  local s = tonumber(redis.call('ZSCORE', KEYS[2], k) or '0')\n"
    "  if s < now then\n"
    "    redis.call('ZREM', KEYS[1], k)\n"
    "    redis.call('ZREM', KEYS[2], k)\n"
    "  end\n"
    "end\n"
    "return 1\n";

/* count: KEYS held; ARGV stale_ms */
static const char dir_count_lua[] =
    "local t = redis.call('TIME')\n"
    "local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ARGV[1])\n"
    "return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')\n";

/* The directory key P{dir}name into buf (room for the prefix + 16). */
static size_t dir_key(const struct redis_be *be, const char *name, char *buf)
{
    size_t n = be->prefix_len;

    memcpy(buf, be->prefix, n);
    memcpy(buf + n, DIR_TAG, strlen(DIR_TAG));
    n += strlen(DIR_TAG);
    memcpy(buf + n, name, strlen(name));
    return n + strlen(name);
}

/* One command on the directory's slot: the reply (caller frees), or NULL;
 * an error reply is logged and answered NULL. */
static redisReply *
dir_command(struct redis_be *be, int argc, const char **argv, size_t *lens)
{
    struct redis_conn *cn = redis_conn_get(be);
    char k[REDIS_BE_PREFIX_MAX + 16];
    size_t kn = dir_key(be, "", k);
    redisReply *r;

    if (cn == NULL)
        return NULL;
    cn->slot = redis_cluster_keyslot(k, kn);
    r = redis_command(be, argc, argv, lens);
    if (r != NULL && r->type == REDIS_REPLY_ERROR) {
        redis_warn(be, "cluster directory", r->str);
        freeReplyObject(r);
        r = NULL;
    }
    return r;
}

/* A holder's member: key NUL 16 hex of FNV-1a 64 of the token (the token
 * never reaches Redis in clear). Its length. */
static size_t
dir_member(const char *key, size_t key_len, const char *token, char *buf)
{
    static const char hex[] = "0123456789abcdef";
    uint64_t h = 14695981039346656037ULL;

    for (const char *p = token; *p != '\0'; p++) {
        h ^= (unsigned char)*p;
        h *= 1099511628211ULL;
    }
    memcpy(buf, key, key_len);
    buf[key_len] = '\0';
    for (int i = 15; i >= 0; i--) {
        buf[key_len + 1 + (size_t)i] = hex[h & 0xf];
        h >>= 4;
    }
    return key_len + 17;
}

void redis_cluster_note(struct redis_be *be,
                        const char *key,
                        size_t key_len,
                        const char *token,
                        int64_t expires_at_ms)
{
    char idx[REDIS_BE_PREFIX_MAX + 16], held[REDIS_BE_PREFIX_MAX + 16];
    char expiry[REDIS_BE_PREFIX_MAX + 16], m[LOCK_KEY_MAX + 18], exp[24];
    char retain[24];
    const char *argv[] = { "EVAL", dir_note_lua, "3", idx, held,
                           expiry, key,          m,   exp, retain };
    size_t lens[] = {
        4, sizeof(dir_note_lua) - 1, 1, 0, 0, 0, key_len, 0, 0, 0
    };
    redisReply *r;

    lens[3] = dir_key(be, "index", idx);
    lens[4] = dir_key(be, "held", held);
    lens[5] = dir_key(be, "expiry", expiry);
    lens[7] = dir_member(key, key_len, token, m);
    snprintf(exp, sizeof(exp), "%lld", (long long)expires_at_ms);
    lens[8] = strlen(exp);
    snprintf(retain, sizeof(retain), "%d", REDIS_BE_RETAIN_MS);
    lens[9] = strlen(retain);
    r = dir_command(be, 10, argv, lens);
    if (r == NULL)
        redis_warn(be, "cluster directory",
                   "a grant was not noted: GET /locks and the held metric "
                   "miss it until its next renew");
    freeReplyObject(r);
}

void redis_cluster_unnote(struct redis_be *be,
                          const char *key,
                          size_t key_len,
                          const char *token)
{
    char held[REDIS_BE_PREFIX_MAX + 16], m[LOCK_KEY_MAX + 18];
    const char *argv[] = { "ZREM", held, m };
    size_t lens[3] = { 4, 0, 0 };

    lens[1] = dir_key(be, "held", held);
    lens[2] = dir_member(key, key_len, token, m);
    freeReplyObject(dir_command(be, 3, argv, lens));
}

/* Take the free keys of r's entries [0, n) marked in free_at out of the
 * index, those whose noted expiry passed (best effort). */
static void dir_prune(struct redis_be *be,
                      const redisReply *keys,
                      const bool *free_at,
                      size_t nfree)
{
    char idx[REDIS_BE_PREFIX_MAX + 16], expiry[REDIS_BE_PREFIX_MAX + 16];
    const char **argv = calloc(5 + nfree, sizeof(*argv));
    size_t *lens = calloc(5 + nfree, sizeof(*lens));
    int argc = 5;

    if (argv != NULL && lens != NULL) {
        argv[0] = "EVAL";
        lens[0] = 4;
        argv[1] = dir_prune_lua;
        lens[1] = sizeof(dir_prune_lua) - 1;
        argv[2] = "2";
        lens[2] = 1;
        argv[3] = idx;
        lens[3] = dir_key(be, "index", idx);
        argv[4] = expiry;
        lens[4] = dir_key(be, "expiry", expiry);
        for (size_t i = 0; i < keys->elements; i++)
            if (free_at[i]) {
                argv[argc] = keys->element[i]->str;
                lens[argc++] = keys->element[i]->len;
            }
        freeReplyObject(dir_command(be, argc, argv, lens));
    }
    free(argv);
    free(lens);
}

/* lock_info into a list entry. */
static void dir_entry(const char *k,
                      size_t kn,
                      const struct lock_info *info,
                      struct lock_entry *e)
{
    memcpy(e->key, k, kn);
    e->key[kn] = '\0';
    e->key_len = kn;
    e->mode = info->mode;
    e->fence = info->fence;
    e->ttl_ms = info->ttl_ms >= 1 ? info->ttl_ms : 1;
    e->expires_at_ms = info->expires_at_ms;
    e->holder_count = info->holder_count;
    e->has_owner = info->mode == LOCK_EXCLUSIVE && info->has_owner;
    if (e->has_owner)
        memcpy(e->owner, info->owner, sizeof(e->owner));
}

/* Look up each index entry of r on its own slot, filling out up to limit:
 * OK, or UNAVAILABLE / NO_MEMORY. free_at marks the free ones. */
static enum backend_result dir_walk(struct redis_be *be,
                                    const redisReply *r,
                                    uint32_t limit,
                                    size_t budget,
                                    bool *free_at,
                                    size_t *nfree,
                                    struct lock_list *out)
{
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *k = r->element[i];
        struct lock_info info;
        enum backend_result res;

        if (k->type != REDIS_REPLY_STRING || k->len == 0 ||
            k->len > LOCK_KEY_MAX)
            continue;
        res = redis_inspect_run(be, k->str, k->len, &info);
        if (res == BACKEND_NOT_FOUND) {
            free_at[i] = true;
            (*nfree)++;
        } else if (res != BACKEND_OK) {
            return res;
        } else {
            dir_entry(k->str, k->len, &info, &out->entries[out->n++]);
            lock_info_clear(&info);
        }
        if (out->n == limit || i + 1 == r->elements) {
            out->more = i + 1 < r->elements || r->elements == budget;
            if (out->more) {
                memcpy(out->resume, k->str, k->len);
                out->resume[k->len] = '\0';
                out->resume_len = k->len;
            }
            break;
        }
    }
    return BACKEND_OK;
}

enum backend_result redis_cluster_list(struct redis_be *be,
                                       const struct lock_list_req *req,
                                       struct lock_list *out)
{
    char idx[REDIS_BE_PREFIX_MAX + 16], budget[16];
    struct redis_lex min, max;
    const char *argv[] = { "ZRANGEBYLEX", idx, min.s, max.s,
                           "LIMIT",       "0", budget };
    size_t lens[7] = { 11, 0, 0, 0, 5, 1, 0 };
    size_t nbudget = REDIS_BE_LIST_BUDGET(req->limit), nfree = 0;
    enum backend_result res;
    bool *free_at;
    redisReply *r;

    out->n = 0;
    out->more = false;
    out->resume_len = 0;
    redis_list_range(req, &min, &max);
    lens[1] = dir_key(be, "index", idx);
    lens[2] = min.n;
    lens[3] = max.n;
    snprintf(budget, sizeof(budget), "%zu", nbudget);
    lens[6] = strlen(budget);
    r = dir_command(be, 7, argv, lens);
    if (r == NULL)
        return BACKEND_UNAVAILABLE;
    if (r->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        redis_warn(be, "list", "unexpected reply");
        return BACKEND_UNAVAILABLE;
    }
    free_at = calloc(r->elements + 1, sizeof(*free_at));
    if (free_at == NULL) {
        freeReplyObject(r);
        return BACKEND_NO_MEMORY;
    }
    res = dir_walk(be, r, req->limit, nbudget, free_at, &nfree, out);
    if (res == BACKEND_OK && nfree > 0)
        dir_prune(be, r, free_at, nfree);
    if (res != BACKEND_OK) {
        out->n = 0;
        out->more = false;
        out->resume_len = 0;
    }
    free(free_at);
    freeReplyObject(r);
    return res;
}

int64_t redis_cluster_held_count(struct redis_be *be)
{
    char held[REDIS_BE_PREFIX_MAX + 16], stale[24];
    const char *argv[] = { "EVAL", dir_count_lua, "1", held, stale };
    size_t lens[] = { 4, sizeof(dir_count_lua) - 1, 1, 0, 0 };
    redisReply *r;
    int64_t n = -1;

    lens[3] = dir_key(be, "held", held);
    snprintf(stale, sizeof(stale), "%d", REDIS_BE_RETAIN_MS);
    lens[4] = strlen(stale);
    r = dir_command(be, 5, argv, lens);
    if (r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer >= 0)
        n = r->integer;
    freeReplyObject(r);
    return n;
}
