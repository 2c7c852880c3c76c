/*
 * backends/redis/scripts.c - the Lua scripts of the Redis adapter and how
 * they run: every state change is one script, so every check-and-change
 * is atomic in Redis and judged by Redis's clock. The scripts live in
 * backends/redis/NAME.lua, embedded at build time (the Makefile turns each
 * into $(GEN)/backends/redis/NAME.lua.h, one C string literal); here they
 * are loaded on each new connection, run with EVALSHA (EVAL when Redis
 * lost them) and, for acquire and renew (of one key or several), stamped
 * with a not-after time.
 *
 * The token never reaches Redis's memory in clear: the hash keeps
 * sha1hex(token), and tokens are compared as digests. A grant made with an
 * Idempotency-Key must answer its token again to a retry through any
 * instance: it keeps the token sealed (XOR) with a key stream drawn from
 * the Idempotency-Key, of which Redis keeps only a digest. TIME comes before
 * writes in acquire, which Redis < 5 allows only after
 * replicate_commands() (a no-op from Redis 5 on). Fences are written with
 * %.0f: Lua numbers are doubles, exact below 2^53, and %.0f never switches
 * to exponent notation.
 *
 * Acquire and renew (and their multi-key forms) carry a not-after time in
 * Redis's clock: the moment lockd stops waiting for the reply. A Redis
 * that was stopped or stalled still runs the commands queued in its socket
 * once it resumes; without this, an acquire answered 503 would then grant
 * the key to a token nobody has, and the key would stay held until its
 * TTL.
 */
#include "backends/redis/library.h"
#include "backends/redis/redis_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/text.h"

/* LOCK_HOLDS_MAX is written into holders.lua as holds_max,
 * REDIS_BE_GRACE_MS as grace and REDIS_BE_RETAIN_MS as retain */
_Static_assert(LOCK_HOLDS_MAX == 1000000, "holders.lua's holds_max");
_Static_assert(REDIS_BE_GRACE_MS == 1000, "holders.lua's grace");
_Static_assert(REDIS_BE_RETAIN_MS == 60000, "holders.lua's retain");

/* holders.lua holds the helpers (clock, holder records, reaping, the
 * queue's head) and the per-key steps (renew, release) that every script
 * but cancel starts with: its text goes before theirs, so a multi-key
 * script does to each key exactly what the single-key one does. */
static const char holders_lua[] =
#include "backends/redis/holders.lua.h"
    ;

/* Redis < 5 lets a script write after TIME only once it asked for effects
 * replication (a no-op from Redis 5 on; a function may not call it): an
 * EVAL text that starts with holders.lua starts with this line first. */
#define EVAL_PRELUDE \
    "if redis.replicate_commands then redis.replicate_commands() end\n"

/*
 * acquire: {-2}: run after lockd gave up on it, nothing done.
 * {1, fence, ttl, expires_at, mode, limit, holds, replay, [token]}
 * granted (replay = 1: the Idempotency-Key named a live grant, answered
 * again with its token and what is left of its TTL);
 * {0, retry_ms, behind, ours} held, or the holders leave room but an
 * earlier waiter goes first (behind = 1; ours = 1 when the queue's head is
 * this instance's); {-3} shared under another limit; {-4} the
 * Idempotency-Key names a grant of another mode or limit.
 * A retry of an acquire whose reply was lost finds its own token and is
 * granted again, with the same fence. A place's deadline is Redis's now
 * plus the wait left, set again by every try: lockd's wall clock never
 * reaches Redis, so a skewed one can neither reap a live place nor keep a
 * dead one. Places whose deadline (plus a grace, REDIS_BE_GRACE_MS) passed
 * are dropped from the head: their lockd would have cancelled them, so it
 * is gone; the queue's own expiry follows its last deadline. Behind
 * another instance's waiter on a free key, retry soon (it should take the
 * key at once); a waiter's grant is published when others wait, so they
 * learn the new holder's TTL and shared waiters behind go with it.
 * With floor "1" (redlock), the fence counter is first raised to Redis's
 * clock in microseconds, so the grant's fence is at least that clock; with
 * mark_ms > 0, a try-once acquire that is not granted sets the mwait mark
 * for the retry hint + mark_ms, as acquire_multi does. redis:// sends "0"
 * for both.
 */
static const char acquire_lua[] = EVAL_PRELUDE
#include "backends/redis/holders.lua.h"
/* then the script (apart, so that include sorting keeps the order) */
#include "backends/redis/acquire.lua.h"
    ;

/* renew: {1, fence, ttl, expires_at, mode, limit, holds}, {0} free, {-1}
 * another token, {-2} too late, {-3} holds at LOCK_HOLDS_MAX. A TTL of "0"
 * keeps the stored one. */
static const char renew_lua[] = EVAL_PRELUDE
#include "backends/redis/holders.lua.h"
/* then the script */
#include "backends/redis/renew.lua.h"
    ;

/* release: {1, holds left}, {0} free, {-1} another token. Published when
 * a holder went and someone waits: every single-key waiter, on any
 * instance, has a place in the queue, and a multi-key waiter marks the
 * keys it waits for (acquire_multi). */
static const char release_lua[] = EVAL_PRELUDE
#include "backends/redis/holders.lua.h"
/* then the script */
#include "backends/redis/release.lua.h"
    ;

/* inspect: {1, mode, limit, holder count, greatest fence, last expiry,
 * now, then fence, expires_at, holds, owner or nil of the first
 * LOCK_HOLDERS_SHOWN holders by fence}, {0} free. */
static const char inspect_lua[] = EVAL_PRELUDE
#include "backends/redis/holders.lua.h"
/* then the script */
#include "backends/redis/inspect.lua.h"
    ;

/* cancel: leaves the queue; if the key is free (or shared) and others
 * wait, tells them. The number of places removed. */
static const char cancel_lua[] =
#include "backends/redis/cancel.lua.h"
    ;

/*
 * acquire_multi: {-2} too late, nothing done; {1, ttl, expires_at (the
 * earliest), fence of each key} all granted, as acquire grants each (a
 * retry finds its own token and gets the same fences); {0, retry_ms (0:
 * only queued waiters), index of each held key} nothing granted, and the
 * held keys marked for the waiter that keeps no place (REDIS_BE_MARK_MS).
 */
static const char acquire_multi_lua[] = EVAL_PRELUDE
#include "backends/redis/holders.lua.h"
/* then the script */
#include "backends/redis/acquire_multi.lua.h"
    ;

/* renew_multi: {-2} too late; {1, ttl (the least), expires_at (the
 * earliest), fence of each key}; {0, index} that key is free, {-1, index}
 * held by others, for the first key the token does not hold, and nothing
 * renewed. */
static const char renew_multi_lua[] = EVAL_PRELUDE
#include "backends/redis/holders.lua.h"
/* then the script */
#include "backends/redis/renew_multi.lua.h"
    ;

/* release_multi: {1, index of each key released}, {0} none was held. */
static const char release_multi_lua[] = EVAL_PRELUDE
#include "backends/redis/holders.lua.h"
/* then the script */
#include "backends/redis/release_multi.lua.h"
    ;

/* list: {1, more, last key looked at or nil, now, then key, mode, fence,
 * expires_at, holder count, owner or nil of each held key}; index entries
 * of free keys met are taken out. */
static const char list_lua[] = EVAL_PRELUDE
#include "backends/redis/holders.lua.h"
/* then the script */
#include "backends/redis/list.lua.h"
    ;

/* force: inspect's reply for the holders removed, or {0} (free). */
static const char force_lua[] = EVAL_PRELUDE
#include "backends/redis/holders.lua.h"
/* then the script */
#include "backends/redis/force.lua.h"
    ;

/* count: the live holders, an integer. */
static const char count_lua[] = EVAL_PRELUDE
#include "backends/redis/holders.lua.h"
/* then the script */
#include "backends/redis/count.lua.h"
    ;

/* refence: {the number of keys the token holds}; every key's counter
 * raised to at least its fence, and the token's hold of it (if any) given
 * that fence (redlock's write-back, fan.c). */
static const char refence_lua[] = EVAL_PRELUDE
#include "backends/redis/holders.lua.h"
/* then the script */
#include "backends/redis/refence.lua.h"
    ;

static const struct redis_script_def {
    const char *text;
    size_t len;
    int nkeys;
    int nargs;    /* KEYS and ARGV, without the stamp */
    bool stamped; /* a not-after time follows as the last ARGV */
    bool acked;   /* min_replicas: WAIT after one that changed holders */
} redis_scripts[REDIS_BE_SCRIPT_COUNT] = {
    [REDIS_BE_SCRIPT_ACQUIRE] = { acquire_lua, sizeof(acquire_lua) - 1,
                                  REDIS_BE_ACQ_NKEYS, REDIS_BE_ACQ_NARGS, true,
                                  true },
    [REDIS_BE_SCRIPT_RENEW] = { renew_lua, sizeof(renew_lua) - 1,
                                REDIS_BE_REN_NKEYS, REDIS_BE_REN_NARGS, true,
                                true },
    [REDIS_BE_SCRIPT_RELEASE] = { release_lua, sizeof(release_lua) - 1,
                                  REDIS_BE_REL_NKEYS, REDIS_BE_REL_NARGS, false,
                                  true },
    [REDIS_BE_SCRIPT_INSPECT] = { inspect_lua, sizeof(inspect_lua) - 1,
                                  REDIS_BE_INS_NKEYS, REDIS_BE_INS_NARGS, false,
                                  false },
    [REDIS_BE_SCRIPT_CANCEL] = { cancel_lua, sizeof(cancel_lua) - 1,
                                 REDIS_BE_CAN_NKEYS, REDIS_BE_CAN_NARGS, false,
                                 false },
    /* as many KEYS and ARGV as the request has keys: set by the caller */
    [REDIS_BE_SCRIPT_ACQUIRE_MULTI] = { acquire_multi_lua,
                                        sizeof(acquire_multi_lua) - 1, 0, 0,
                                        true, true },
    [REDIS_BE_SCRIPT_RENEW_MULTI] = { renew_multi_lua,
                                      sizeof(renew_multi_lua) - 1, 0, 0, true,
                                      true },
    [REDIS_BE_SCRIPT_RELEASE_MULTI] = { release_multi_lua,
                                        sizeof(release_multi_lua) - 1, 0, 0,
                                        false, true },
    [REDIS_BE_SCRIPT_LIST] = { list_lua, sizeof(list_lua) - 1,
                               REDIS_BE_LST_NKEYS, REDIS_BE_LST_NARGS, false,
                               false },
    [REDIS_BE_SCRIPT_FORCE] = { force_lua, sizeof(force_lua) - 1,
                                REDIS_BE_FRC_NKEYS, REDIS_BE_FRC_NARGS, false,
                                false },
    [REDIS_BE_SCRIPT_HELD] = { count_lua, sizeof(count_lua) - 1,
                               REDIS_BE_HLD_NKEYS, REDIS_BE_HLD_NARGS, false,
                               false },
    [REDIS_BE_SCRIPT_REFENCE] = { refence_lua, sizeof(refence_lua) - 1, 0, 0,
                                  false, false },
};

/* ---- for the library of functions (library.c) ---- */

const char *redis_scripts_helpers(size_t *len)
{
    *len = sizeof(holders_lua) - 1;
    return holders_lua;
}

const char *redis_script_body(enum redis_script s, size_t *len)
{
    const struct redis_script_def *d = &redis_scripts[s];
    size_t at = 0, hl = sizeof(holders_lua) - 1, pl = strlen(EVAL_PRELUDE);

    if (s != REDIS_BE_SCRIPT_CANCEL) {
        if (d->len < pl + hl || memcmp(d->text, EVAL_PRELUDE, pl) != 0 ||
            memcmp(d->text + pl, holders_lua, hl) != 0)
            return NULL;
        at = pl + hl;
    }
    *len = d->len - at;
    return d->text + at;
}

/* ---- loading ---- */

int redis_scripts_send(redisContext *c)
{
    size_t len;
    const char *text = redis_scripts_library(&len);

    for (int i = 0; i < REDIS_BE_SCRIPT_COUNT; i++) {
        const char *argv[] = { "SCRIPT", "LOAD", redis_scripts[i].text };
        size_t lens[] = { 6, 4, redis_scripts[i].len };
        if (redisAppendCommandArgv(c, 3, argv, lens) != REDIS_OK)
            return -1;
    }
    if (text != NULL) {
        const char *argv[] = { "FUNCTION", "LOAD", text };
        size_t lens[] = { 8, 4, len };
        if (redisAppendCommandArgv(c, 3, argv, lens) != REDIS_OK)
            return -1;
    }
    return 0;
}

int redis_scripts_recv(redisContext *c,
                       struct redis_loaded *out,
                       char *err,
                       size_t errlen)
{
    int rc = 0;
    redisReply *r = NULL;
    size_t len;

    for (int i = 0; i < REDIS_BE_SCRIPT_COUNT; i++) {
        if (redisGetReply(c, (void **)&r) != REDIS_OK || r == NULL)
            return -2;
        if (r->type != REDIS_REPLY_STRING || r->len != 40) {
            snprintf(err, errlen, "SCRIPT LOAD: %s",
                     r->type == REDIS_REPLY_ERROR ? r->str
                                                  : "unexpected reply");
            rc = -1;
        } else {
            memcpy(out->sha[i], r->str, 40);
            out->sha[i][40] = '\0';
        }
        freeReplyObject(r);
    }
    out->fn = false;
    if (redis_scripts_library(&len) == NULL) /* not sent */
        return rc;
    if (redisGetReply(c, (void **)&r) != REDIS_OK || r == NULL)
        return -2;
    /* its name, or another connection loaded it first; any other error
     * (no FUNCTION, no right to it, a replica) leaves EVALSHA */
    out->fn = !out->fn_refused && (r->type == REDIS_REPLY_STRING ||
                                   (r->type == REDIS_REPLY_ERROR &&
                                    strstr(r->str, "already exists") != NULL));
    freeReplyObject(r);
    return rc;
}

/* ---- arguments ---- */

void redis_arg(struct redis_args *a, int i, const char *s, size_t n)
{
    a->v[i] = s;
    a->len[i] = n;
}

size_t
redis_key_len(const struct redis_be *be, const char *kind, size_t key_len)
{
    size_t tag = be->topology == REDIS_BE_CLUSTER ? REDIS_BE_CLUSTER_TAG : 0;

    if (strcmp(kind, REDIS_BE_SLOT_FENCE) == 0) /* at most */
        return be->prefix_len + 7 + strlen(kind) + 4;
    return be->prefix_len + tag + strlen(kind) + key_len + 2;
}

/* The fence counter of the key's slot: prefix "fence#" and, in 4 hex, the
 * hash slot of the key (Redis's rule) modulo REDIS_BE_FENCE_SLOTS; cluster
 * mode: prefix "{" tag "}" "fence#", tag a short one of the hash slot of
 * the key's "{h}", so that it lives beside the lock's keys (up to 16,384
 * counters over the cluster). */
static size_t redis_slot_fence_name(const struct redis_be *be,
                                    const char *key,
                                    size_t key_len,
                                    char *buf)
{
    size_t n = be->prefix_len;
    int slot;

    memcpy(buf, be->prefix, n);
    if (be->topology == REDIS_BE_CLUSTER) {
        char h[17];
        const char *tag;

        redis_cluster_hash(key, key_len, h);
        tag = redis_cluster_slot_tag(redis_cluster_crc16(h, 16) &
                                     (REDIS_BE_CLUSTER_SLOTS - 1));
        buf[n++] = '{';
        memcpy(buf + n, tag, strlen(tag));
        n += strlen(tag);
        buf[n++] = '}';
        memcpy(buf + n, REDIS_BE_SLOT_FENCE, strlen(REDIS_BE_SLOT_FENCE));
        return n + strlen(REDIS_BE_SLOT_FENCE);
    }
    slot = redis_cluster_keyslot(key, key_len) & (REDIS_BE_FENCE_SLOTS - 1);
    memcpy(buf + n, REDIS_BE_SLOT_FENCE, strlen(REDIS_BE_SLOT_FENCE));
    n += strlen(REDIS_BE_SLOT_FENCE);
    for (int i = 3; i >= 0; i--)
        buf[n++] = "0123456789abcdef"[(slot >> (4 * i)) & 0xf];
    return n;
}

/* prefix kind "{" key "}": the prefix and the fixed words around the key
 * make the mapping injective (see redis.c). */
size_t redis_key_name(const struct redis_be *be,
                      const char *kind,
                      const char *key,
                      size_t key_len,
                      char *buf)
{
    size_t kl = strlen(kind), n = 0;

    if (strcmp(kind, REDIS_BE_SLOT_FENCE) == 0)
        return redis_slot_fence_name(be, key, key_len, buf);
    memcpy(buf + n, be->prefix, be->prefix_len);
    n += be->prefix_len;
    if (be->topology == REDIS_BE_CLUSTER) { /* cluster.c: the slot's tag */
        buf[n++] = '{';
        redis_cluster_hash(key, key_len, buf + n); /* writes a NUL too */
        n += 16;
        buf[n++] = '}';
    }
    memcpy(buf + n, kind, kl);
    n += kl;
    buf[n++] = '{';
    memcpy(buf + n, key, key_len);
    n += key_len;
    buf[n++] = '}';
    return n;
}

void redis_arg_global(const struct redis_be *be,
                      struct redis_args *a,
                      int i,
                      const char *name)
{
    size_t nl = strlen(name), at = be->prefix_len;

    memcpy(a->keys[i], be->prefix, be->prefix_len);
    if (be->topology == REDIS_BE_CLUSTER) {
        /* cluster mode: the first key's slot (its "{h}"), so the script
         * stays on one slot; clusterdir.c keeps the prefix-wide view */
        memcpy(a->keys[i] + at, a->keys[0] + at, REDIS_BE_CLUSTER_TAG);
        at += REDIS_BE_CLUSTER_TAG;
    }
    memcpy(a->keys[i] + at, name, nl);
    redis_arg(a, i, a->keys[i], at + nl);
}

/* Into a->keys[i], REDIS_BE_KEYBUF bytes: room for the longest kind. */
void redis_arg_key(const struct redis_be *be,
                   struct redis_args *a,
                   int i,
                   const char *kind,
                   const char *key,
                   size_t key_len)
{
    size_t n = redis_key_name(be, kind, key, key_len, a->keys[i]);

    redis_arg(a, i, a->keys[i], n);
}

bool redis_reply_is_int(const redisReply *r, size_t i)
{
    return r->type == REDIS_REPLY_ARRAY && i < r->elements &&
           r->element[i]->type == REDIS_REPLY_INTEGER;
}

bool redis_script_stamped(enum redis_script s)
{
    return redis_scripts[s].stamped;
}

/* ---- running ---- */

/* FCALL or EVALSHA the script in argv (argv[2..] filled); EVAL when Redis
 * lost both (SCRIPT FLUSH), which also caches it again. With acks, WAIT
 * follows each (min_replicas, replicas.c). */
static redisReply *redis_script_eval(struct redis_be *be,
                                     struct redis_conn *cn,
                                     enum redis_script s,
                                     int argc,
                                     const char **argv,
                                     size_t *argl,
                                     long long *acks)
{
    redisReply *r;

    /* cn->scripts is filled once the context is up; a reconnect inside
     * redis_command() loads the same scripts, same digests and names */
    redis_script_head(cn, s, argv, argl);
    r = redis_command_acked(be, argc, argv, argl, acks);
    if (r != NULL && redis_fn_lost(cn, argv, r)) {
        /* refused before it ran: the same call with EVALSHA */
        freeReplyObject(r);
        redis_script_head(cn, s, argv, argl);
        r = redis_command_acked(be, argc, argv, argl, acks);
    }
    if (r != NULL && r->type == REDIS_REPLY_ERROR &&
        strncmp(r->str, "NOSCRIPT", 8) == 0) {
        freeReplyObject(r);
        argv[0] = "EVAL";
        argl[0] = 4;
        argv[1] = redis_scripts[s].text;
        argl[1] = redis_scripts[s].len;
        r = redis_command_acked(be, argc, argv, argl, acks);
    }
    return r;
}

/* An error reply or one of neither expected type is logged, freed and
 * answered NULL; any other is r. */
static redisReply *redis_script_checked(struct redis_be *be, redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR) {
        /* LOADING, READONLY, MISCONF, BUSY, OOM...: never a grant */
        redis_warn(be, "script error", r->str);
        freeReplyObject(r);
        return NULL;
    }
    if (r->type != REDIS_REPLY_ARRAY && r->type != REDIS_REPLY_INTEGER) {
        redis_warn(be, "script", "unexpected reply type");
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/*
 * Run script s with its KEYS and ARGV in argv and, when it is stamped, a
 * last argument: the not-after time in Redis's clock. A stamped script
 * that answers "too late" in time means our idea of Redis's clock is off:
 * it is measured again and the script run once more.
 */
static redisReply *script_argv(struct redis_be *be,
                               enum redis_script s,
                               int nkeys,
                               int nargs,
                               const char **argv,
                               size_t *argl,
                               bool acked)
{
    const struct redis_script_def *def = &redis_scripts[s];
    char nk[16], stamp[24];
    struct redis_conn *cn = redis_conn_get(be);
    redisReply *r;
    int total = 3 + nargs + (def->stamped ? 1 : 0);
    long long acks = -1; /* min_replicas: WAIT's answer (issue 17) */
    long long *want = acked && be->min_replicas > 0 ? &acks : NULL;

    if (cn == NULL)
        return NULL;
    snprintf(nk, sizeof(nk), "%d", nkeys);
    argv[2] = nk;
    argl[2] = strlen(nk);
    /* cluster mode: every KEYS of a script share the first one's slot */
    cn->slot = be->topology == REDIS_BE_CLUSTER && nkeys > 0
                   ? redis_cluster_keyslot(argv[3], argl[3])
                   : -1;
    for (int attempt = 0;; attempt++) {
        if (redis_conn_ready(be, cn) != 0)
            return NULL;
        if (def->stamped) {
            snprintf(stamp, sizeof(stamp), "%lld",
                     (long long)(clock_mono_ms() + be->cmd_ms + cn->offset_ms));
            argv[3 + nargs] = stamp;
            argl[3 + nargs] = strlen(stamp);
        }
        r = redis_script_eval(be, cn, s, total, argv, argl, want);
        if (r == NULL)
            return NULL;
        if (!(def->stamped && redis_reply_is_int(r, 0) &&
              r->element[0]->integer == -2))
            break;
        /* "too late", yet the reply is here in time: the clock was
         * stepped, or this is another server. Measure again, retry once. */
        freeReplyObject(r);
        if (attempt > 0 || cn->ctx == NULL ||
            redis_clock(cn->ctx, &cn->offset_ms) != 0) {
            redis_warn(be, "clock", "cannot agree on Redis's clock");
            if (cn->ctx != NULL)
                redis_conn_fail(be, cn, "clock check failed");
            return NULL;
        }
    }
    r = redis_script_checked(be, r);
    if (r != NULL && want != NULL)
        r = redis_replicas_check(be, s, nkeys, nargs, argv, argl, r, acks);
    return r;
}

/* ---- pipelined (batch.c) ---- */

/* "<lead><n>\r\n" at out: the bytes written. */
static size_t put_count(char *out, char lead, uint64_t n)
{
    size_t k = 0;

    out[k++] = lead;
    k += text_put_u64(out + k, n);
    out[k++] = '\r';
    out[k++] = '\n';
    return k;
}

int redis_append_argv(redisContext *ctx,
                      int argc,
                      const char **argv,
                      const size_t *argl)
{
    /* the array header and each argument's: at most 23 bytes, with its
     * \r\n after the bytes */
    size_t need = 23, n = 0;
    char small[1024], *buf = small;
    int rc;

    for (int i = 0; i < argc; i++)
        need += 25 + argl[i];
    if (need > sizeof(small) && (buf = malloc(need)) == NULL)
        return -1;
    n += put_count(buf + n, '*', (uint64_t)argc);
    for (int i = 0; i < argc; i++) {
        n += put_count(buf + n, '$', argl[i]);
        memcpy(buf + n, argv[i], argl[i]);
        n += argl[i];
        buf[n++] = '\r';
        buf[n++] = '\n';
    }
    /* hiredis copies the bytes into its output buffer: ours may go */
    rc = redisAppendFormattedCommand(ctx, buf, n) == REDIS_OK ? 0 : -1;
    if (buf != small)
        free(buf);
    return rc;
}

int redis_script_append(struct redis_be *be,
                        struct redis_conn *cn,
                        struct redis_call *c)
{
    const struct redis_script_def *def = &redis_scripts[c->s];
    char nk[TEXT_U64_MAX], stamp[TEXT_U64_MAX + 1];
    int total = 3 + c->nargs + (def->stamped ? 1 : 0);

    /* the numbers by hand, not with snprintf: every call has them */
    redis_script_head(cn, c->s, c->argv, c->argl);
    c->argv[2] = nk;
    c->argl[2] = text_put_u64(nk, (uint64_t)c->nkeys);
    if (def->stamped) {
        int64_t ms = clock_mono_ms() + be->cmd_ms + cn->offset_ms;
        uint64_t u = (uint64_t)ms;
        size_t k = 0;
        if (ms < 0) { /* as "%lld" writes it */
            stamp[k++] = '-';
            u = 0 - u;
        }
        k += text_put_u64(stamp + k, u);
        c->argv[3 + c->nargs] = stamp;
        c->argl[3 + c->nargs] = k;
    }
    return redis_append_argv(cn->ctx, total, c->argv, c->argl);
}

redisReply *redis_script_reply(struct redis_be *be,
                               struct redis_conn *cn,
                               const struct redis_call *c,
                               redisReply *r,
                               bool *again)
{
    *again =
        redis_fn_lost(cn, c->argv, r) ||
        (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) ||
        (redis_scripts[c->s].stamped && redis_reply_is_int(r, 0) &&
         r->element[0]->integer == -2);
    if (*again) {
        freeReplyObject(r);
        return NULL;
    }
    return redis_script_checked(be, r);
}

redisReply *redis_script_argv(struct redis_be *be,
                              enum redis_script s,
                              int nkeys,
                              int nargs,
                              const char **argv,
                              size_t *argl)
{
    return script_argv(be, s, nkeys, nargs, argv, argl, redis_scripts[s].acked);
}

static redisReply *script_run(struct redis_be *be,
                              enum redis_script s,
                              struct redis_args *a,
                              bool acked)
{
    const struct redis_script_def *def = &redis_scripts[s];
    const char *argv[3 + REDIS_BE_ARGS_MAX + 1];
    size_t argl[3 + REDIS_BE_ARGS_MAX + 1];

    memcpy(argv + 3, a->v, (size_t)def->nargs * sizeof(argv[0]));
    memcpy(argl + 3, a->len, (size_t)def->nargs * sizeof(argl[0]));
    return script_argv(be, s, def->nkeys, def->nargs, argv, argl, acked);
}

redisReply *
redis_script_run(struct redis_be *be, enum redis_script s, struct redis_args *a)
{
    return script_run(be, s, a, redis_scripts[s].acked);
}

redisReply *redis_script_run_unacked(struct redis_be *be,
                                     enum redis_script s,
                                     struct redis_args *a)
{
    return script_run(be, s, a, false);
}
