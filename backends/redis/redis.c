/*
 * backends/redis/redis.c - lock store on Redis (hiredis 0.14). A held key is one
 * hash (token digest, fence, TTL, owner) with a PX expiry, so Redis frees
 * it by itself; a per-key fence counter never expires. Every state change
 * is one Lua script run with EVALSHA, so every check-and-change is atomic
 * in Redis and judged by Redis's clock. One hiredis context per worker
 * thread (under a pthread key); a subscriber thread on its own connection
 * hears releases made through other lockd instances and wakes waiters.
 * Waiters queue in Redis (BACKEND_CAP_QUEUE): FIFO across every instance.
 *
 * Layout, for a prefix P (default "lockd:") and a lockd key K (raw bytes):
 *   P "lock:{" K "}"    hash  t = sha1hex(token), f = fence, ttl, [o = owner]
 *   P "fence:{" K "}"   integer, INCRed by every grant, never expires
 *   P "queue:{" K "}"   list of waiter ids, first come first served
 *   P "qdl:{" K "}"     hash waiter id -> its deadline (Redis's unix ms)
 *   channel P "released:" db   PUBLISHed with K by every release
 * P and the fixed words around K make the mapping injective: K is what is
 * left after stripping them, and "lock:" and "fence:" never collide.
 *
 * Keys reach the operations through the wrappers of backends/backend.c,
 * which let through only 1..LOCK_KEY_MAX bytes (backend_key_ok()): no
 * check here.
 */
#include "backends/backend.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/random.h"
#include "lib/text.h"
#include "lib/url.h"

#define REDIS_BE_DEFAULT_HOST       "127.0.0.1"
#define REDIS_BE_DEFAULT_PORT       6379
#define REDIS_BE_DEFAULT_PREFIX     "lockd:"
#define REDIS_BE_PREFIX_MAX         256
#define REDIS_BE_CONNECT_TIMEOUT_MS 500
#define REDIS_BE_TIMEOUT_MS         1000
#define REDIS_BE_TIMEOUT_MAX_MS     60000
#define REDIS_BE_BACKOFF_MIN_MS     50
#define REDIS_BE_BACKOFF_MAX_MS     1000
#define REDIS_BE_SUB_POLL_MS        100 /* close() stops the subscriber in this */
#define REDIS_BE_SUB_PING_MS        5000 /* idle subscriber checks its link */
#define REDIS_BE_LOG_EVERY_MS       1000 /* rate limit of repeated warnings */
#define REDIS_BE_WAITER_MAX         48   /* instance id ':' waiter id */
#define REDIS_BE_GRACE_MS           1000 /* the acquire script's grace */
#define REDIS_BE_TRASH_MAX          4096 /* failed cancels kept to retry */
#define REDIS_BE_TRASH_EVERY_MS     100  /* how often they are retried */
/* prefix + "fence:{" + key + "}", the longest kind */
#define REDIS_BE_KEYBUF (REDIS_BE_PREFIX_MAX + 8 + LOCK_KEY_MAX + 1)

enum redis_be_script {
    SCRIPT_ACQUIRE = 0,
    SCRIPT_RENEW,
    SCRIPT_RELEASE,
    SCRIPT_INSPECT,
    SCRIPT_CANCEL,
    SCRIPT_COUNT,
};

/*
 * The scripts. The token never reaches Redis's memory in clear: the hash
 * keeps sha1hex(token), and tokens are compared as digests. TIME comes
 * before writes in acquire, which Redis < 5 allows only after
 * replicate_commands() (a no-op from Redis 5 on). Fences are written with
 * %.0f: Lua numbers are doubles, exact below 2^53, and %.0f never switches
 * to exponent notation.
 *
 * Acquire and renew carry a not-after time in Redis's clock: the moment
 * lockd stops waiting for the reply. A Redis that was stopped or stalled
 * still runs the commands queued in its socket once it resumes; without
 * this, an acquire answered 503 would then grant the key to a token nobody
 * has, and the key would stay held until its TTL.
 */
/* The scripts, backends/redis/NAME.lua, embedded at build time. */

/* acquire: KEYS lock, fence, queue, deadlines; ARGV token, ttl_ms,
 * has_owner, owner, waiter ("" = try once), what is left of its wait
 * (ms, >= 0), this instance's waiter prefix, release channel, key,
 * not-after (Redis unix ms; the last argument).
 * {-2}: run after lockd gave up on it, nothing done.
 * {1, fence, ttl, expires_at} granted;
 * {0, retry_ms, behind, ours} held, or free with an earlier waiter
 * first (behind = 1; ours = 1 when that waiter is this instance's).
 * A retry of an acquire whose reply was lost finds its own token and
 * is granted again, with the same fence. A place's deadline is
 * Redis's now plus the wait left, set again by every try: lockd's
 * wall clock never reaches Redis, so a skewed one can neither reap a
 * live place nor keep a dead one. Places whose deadline (plus a grace,
 * REDIS_BE_GRACE_MS, for a late cancel) passed are dropped from the
 * head: their lockd would have cancelled them, so it is gone; the
 * queue's own expiry follows its last deadline. Behind another
 * instance's waiter on a free key, retry soon (it should take the key
 * at once); a waiter's grant is published so the others learn the new
 * holder's TTL. */
static const char acquire_lua[] =
#include "backends/redis/acquire.lua.h"
    ;

/* renew: KEYS lock; ARGV token, ttl_ms ("0" = the stored TTL),
 * not-after. {1, fence, ttl, expires_at}, {0} free, {-1} another
 * token, {-2} too late. */
static const char renew_lua[] =
#include "backends/redis/renew.lua.h"
    ;

/* release: KEYS lock, queue; ARGV token, channel, key. 1 released,
 * 0 free, -1 another token. Published only when someone waits: every
 * waiter, on any instance, has a place in the queue. */
static const char release_lua[] =
#include "backends/redis/release.lua.h"
    ;

/* inspect: KEYS lock. {1, fence, pttl, expires_at, owner or nil},
 * {0} free. */
static const char inspect_lua[] =
#include "backends/redis/inspect.lua.h"
    ;

/* cancel: KEYS queue, deadlines, lock; ARGV waiter, channel, key.
 * Leaves the queue; if the key is free and others wait, tells them. */
static const char cancel_lua[] =
#include "backends/redis/cancel.lua.h"
    ;

static const char *const redis_be_scripts[SCRIPT_COUNT] = {
    acquire_lua, renew_lua, release_lua, inspect_lua, cancel_lua,
};

struct redis_be;

/* A waiter's place in a key's queue: lock_waiter.be_data. */
struct redis_be_wait {
    char id[REDIS_BE_WAITER_MAX]; /* this instance's id ':' waiter->id */
    int64_t end_ms; /* monotonic: when the wait runs out, taken from the
                       waiter's wall-clock deadline once, on the first try,
                       so a step of the wall clock later changes nothing */
};

/* A place to take out of a queue once Redis answers again: a cancel that
 * failed. Without it, the place would keep a free key from everyone else
 * until its deadline. */
struct redis_be_trash {
    struct redis_be_trash *next;
    int64_t until_ms; /* monotonic: the place's deadline plus the grace;
                         past it, Redis drops the place by itself */
    char id[REDIS_BE_WAITER_MAX];
    size_t key_len;
    char key[]; /* key_len bytes, not NUL-terminated */
};

extern const struct backend_ops redis_backend;

/* One worker thread's connection, kept under be->tls. */
struct redis_conn {
    struct redis_be *be;  /* borrowed */
    redisContext *ctx;    /* owned; NULL while disconnected */
    int64_t retry_at_ms;  /* monotonic: no reconnect before this */
    int64_t backoff_ms;   /* 0 after a success */
    int64_t offset_ms;    /* Redis's unix ms minus our monotonic ms */
    int64_t failed_at_ms; /* monotonic: the last failure */
    char sha[SCRIPT_COUNT][41];
    struct redis_conn *prev; /* in be->conns, under be->lock */
    struct redis_conn *next;
};

struct redis_be {
    struct backend base; /* first */
    struct backend_hooks hooks;
    char *host; /* owned */
    int port;
    char *user;     /* owned; NULL: AUTH with the password only */
    char *password; /* owned; NULL: no AUTH */
    unsigned db;
    char *prefix; /* owned */
    size_t prefix_len;
    char *channel;     /* owned: prefix "released:" db */
    char instance[20]; /* random hex id ':', prefixes our waiters' ids */
    struct timeval connect_tv;
    struct timeval cmd_tv;

    pthread_key_t tls;            /* struct redis_conn * of this thread */
    pthread_mutex_t lock;         /* guards conns, trash and the sub_* fields */
    struct redis_conn *conns;     /* every thread's connection, so close() can
                                     free those of threads still alive */
    struct redis_be_trash *trash; /* owned; retried by the subscriber */
    size_t ntrash;                /* at most REDIS_BE_TRASH_MAX */
    pthread_cond_t sub_cond;      /* monotonic; signalled on sub_tried and stopping */
    bool sub_tried;               /* the subscriber made its first attempt */
    pthread_t sub_thread;
    bool sub_started;
    atomic_bool stopping;

    atomic_int up;               /* last state logged: -1 unknown, 0, 1 */
    _Atomic int64_t last_ok_ms;  /* monotonic: a thread last reached Redis */
    _Atomic int64_t last_log_ms; /* for redis_be_warn() */
};

/* ---- small helpers ---- */

/* Warn at most once a second: a down Redis must not flood the log. */
static void
redis_be_warn(struct redis_be *be, const char *what, const char *detail)
{
    int64_t now = clock_mono_ms();
    int64_t last = atomic_load_explicit(&be->last_log_ms, memory_order_relaxed);

    if (now - last < REDIS_BE_LOG_EVERY_MS && last != 0)
        return;
    if (!atomic_compare_exchange_strong(&be->last_log_ms, &last, now))
        return;
    log_warn("redis: %s: %s", what, detail);
}

/* Log the moments Redis goes away and comes back; on success, tell
 * threads waiting out a backoff that Redis answers again. */
static void redis_be_mark(struct redis_be *be, int up, const char *detail)
{
    int was;

    /* every success, not a sample of them: a thread that failed a moment
     * before the last sample would otherwise keep backing off (and answer
     * /readyz 503) after Redis is back */
    if (up)
        atomic_store_explicit(&be->last_ok_ms, clock_mono_ms(),
                              memory_order_relaxed);
    if (atomic_load_explicit(&be->up, memory_order_relaxed) == up)
        return;
    was = atomic_exchange(&be->up, up);
    if (was == up)
        return;
    if (up)
        log_info("redis: connected to %s:%d", be->host, be->port);
    else
        log_warn("redis: %s:%d unavailable: %s", be->host, be->port, detail);
}

static struct timeval redis_be_tv(uint64_t ms)
{
    struct timeval tv;

    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
    return tv;
}

/* Build prefix kind "{" key "}" into buf (REDIS_BE_KEYBUF bytes). */
static size_t redis_be_key(const struct redis_be *be,
                           const char *kind,
                           const char *key,
                           size_t key_len,
                           char *buf)
{
    size_t kl = strlen(kind), n = 0;

    memcpy(buf + n, be->prefix, be->prefix_len);
    n += be->prefix_len;
    memcpy(buf + n, kind, kl);
    n += kl;
    buf[n++] = '{';
    memcpy(buf + n, key, key_len);
    n += key_len;
    buf[n++] = '}';
    return n;
}

static bool reply_is_int(const redisReply *r, size_t i)
{
    return r->type == REDIS_REPLY_ARRAY && i < r->elements &&
           r->element[i]->type == REDIS_REPLY_INTEGER;
}

/* ---- connections ---- */

/*
 * Connect and authenticate: a context with command timeouts, or NULL (and
 * why in err). Blocks at most the connect timeout plus one command timeout
 * per round trip.
 */
static redisContext *
redis_be_dial(struct redis_be *be, char *err, size_t errlen)
{
    redisContext *c =
        redisConnectWithTimeout(be->host, be->port, be->connect_tv);
    redisReply *r;

    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (c->err != 0) {
        snprintf(err, errlen, "connect: %s", c->errstr);
        redisFree(c);
        return NULL;
    }
    if (redisSetTimeout(c, be->cmd_tv) != REDIS_OK) {
        snprintf(err, errlen, "cannot set timeouts: %s", c->errstr);
        redisFree(c);
        return NULL;
    }
    if (be->password == NULL)
        return c;
    if (be->user != NULL) {
        const char *argv[] = { "AUTH", be->user, be->password };
        size_t lens[] = { 4, strlen(be->user), strlen(be->password) };
        r = redisCommandArgv(c, 3, argv, lens);
    } else {
        const char *argv[] = { "AUTH", be->password };
        size_t lens[] = { 4, strlen(be->password) };
        r = redisCommandArgv(c, 2, argv, lens);
    }
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "AUTH: %s", r != NULL ? r->str : c->errstr);
        freeReplyObject(r);
        redisFree(c);
        return NULL;
    }
    freeReplyObject(r);
    return c;
}

/*
 * Measure Redis's clock against our monotonic one: *offset is Redis's unix
 * ms minus ours, off by at most half a round trip. 0, or -1 on a dead
 * context (the caller frees it).
 */
static int redis_be_clock(redisContext *c, int64_t *offset)
{
    const char *argv[] = { "TIME" };
    size_t lens[] = { 4 };
    int64_t t0 = clock_mono_ms(), t1;
    redisReply *r = redisCommandArgv(c, 1, argv, lens);
    int64_t sec, usec;
    char *end;

    t1 = clock_mono_ms();
    if (r == NULL)
        return -1;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return -1;
    }
    errno = 0;
    sec = strtoll(r->element[0]->str, &end, 10);
    if (errno != 0 || *end != '\0') {
        freeReplyObject(r);
        return -1;
    }
    usec = strtoll(r->element[1]->str, &end, 10);
    if (errno != 0 || *end != '\0') {
        freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    *offset = sec * 1000 + usec / 1000 - (t0 + t1) / 2;
    return 0;
}

/* Dial, SELECT the database and load the scripts, in one round trip. */
static int redis_be_conn_open(struct redis_be *be,
                              struct redis_conn *cn,
                              char *err,
                              size_t errlen)
{
    redisContext *c = redis_be_dial(be, err, errlen);
    char db[16];
    int n = 0, rc = 0;

    if (c == NULL)
        return -1;
    snprintf(db, sizeof(db), "%u", be->db);
    if (be->db != 0) {
        const char *argv[] = { "SELECT", db };
        size_t lens[] = { 6, strlen(db) };
        if (redisAppendCommandArgv(c, 2, argv, lens) != REDIS_OK)
            goto fail;
        n++;
    }
    for (int i = 0; i < SCRIPT_COUNT; i++) {
        const char *argv[] = { "SCRIPT", "LOAD", redis_be_scripts[i] };
        size_t lens[] = { 6, 4, strlen(redis_be_scripts[i]) };
        if (redisAppendCommandArgv(c, 3, argv, lens) != REDIS_OK)
            goto fail;
    }
    for (int i = 0; i < n + SCRIPT_COUNT; i++) {
        redisReply *r = NULL;
        if (redisGetReply(c, (void **)&r) != REDIS_OK || r == NULL)
            goto fail;
        if (i < n) { /* SELECT */
            if (r->type == REDIS_REPLY_ERROR) {
                snprintf(err, errlen, "SELECT %s: %s", db, r->str);
                rc = -1;
            }
        } else if (r->type != REDIS_REPLY_STRING || r->len != 40) {
            snprintf(err, errlen, "SCRIPT LOAD: %s",
                     r->type == REDIS_REPLY_ERROR ? r->str
                                                  : "unexpected reply");
            rc = -1;
        } else {
            memcpy(cn->sha[i - n], r->str, 40);
            cn->sha[i - n][40] = '\0';
        }
        freeReplyObject(r);
    }
    if (rc != 0) {
        redisFree(c);
        return -1;
    }
    if (redis_be_clock(c, &cn->offset_ms) != 0)
        goto fail;
    cn->ctx = c;
    return 0;
fail:
    snprintf(err, errlen, "%s", c->errstr[0] != '\0' ? c->errstr : "I/O error");
    redisFree(c);
    return -1;
}

static void redis_be_conn_free(struct redis_conn *cn)
{
    if (cn == NULL)
        return;
    if (cn->ctx != NULL)
        redisFree(cn->ctx);
    free(cn);
}

/* pthread key destructor: a worker thread exits. */
static void redis_be_conn_destroy(void *p)
{
    struct redis_conn *cn = p;
    struct redis_be *be = cn->be;

    pthread_mutex_lock(&be->lock);
    if (cn->prev != NULL)
        cn->prev->next = cn->next;
    else
        be->conns = cn->next;
    if (cn->next != NULL)
        cn->next->prev = cn->prev;
    pthread_mutex_unlock(&be->lock);
    redis_be_conn_free(cn);
}

/* This thread's connection state (created on first use), or NULL. */
static struct redis_conn *redis_be_conn(struct redis_be *be)
{
    struct redis_conn *cn = pthread_getspecific(be->tls);

    if (cn != NULL)
        return cn;
    cn = calloc(1, sizeof(*cn));
    if (cn == NULL)
        return NULL;
    cn->be = be;
    if (pthread_setspecific(be->tls, cn) != 0) {
        free(cn);
        return NULL;
    }
    pthread_mutex_lock(&be->lock);
    cn->next = be->conns;
    if (be->conns != NULL)
        be->conns->prev = cn;
    be->conns = cn;
    pthread_mutex_unlock(&be->lock);
    return cn;
}

/* The context broke (I/O error, timeout, protocol error): drop it and
 * hold off reconnecting a little, longer each time. */
static void
redis_be_conn_fail(struct redis_be *be, struct redis_conn *cn, const char *why)
{
    if (cn->ctx != NULL) {
        redisFree(cn->ctx);
        cn->ctx = NULL;
    }
    cn->backoff_ms =
        cn->backoff_ms == 0 ? REDIS_BE_BACKOFF_MIN_MS : cn->backoff_ms * 2;
    if (cn->backoff_ms > REDIS_BE_BACKOFF_MAX_MS)
        cn->backoff_ms = REDIS_BE_BACKOFF_MAX_MS;
    cn->failed_at_ms = clock_mono_ms();
    cn->retry_at_ms = cn->failed_at_ms + cn->backoff_ms;
    redis_be_mark(be, 0, why);
}

/* Make sure cn has a context: 0, or -1 while Redis cannot be reached. */
static int redis_be_conn_ready(struct redis_be *be, struct redis_conn *cn)
{
    char err[256];

    if (cn->ctx != NULL)
        return 0;
    /* back off, unless another thread has reached Redis since we failed:
     * then it is back and this thread should not answer 503 any longer */
    if (clock_mono_ms() < cn->retry_at_ms &&
        atomic_load_explicit(&be->last_ok_ms, memory_order_relaxed) <
            cn->failed_at_ms)
        return -1;
    if (redis_be_conn_open(be, cn, err, sizeof(err)) != 0) {
        redis_be_conn_fail(be, cn, err);
        return -1;
    }
    return 0;
}

/* Did the command fail because the server had closed the connection (a
 * Redis restart, an idle timeout) rather than time out? */
static bool redis_be_closed_by_peer(const redisContext *c, int saved_errno)
{
    if (c->err == REDIS_ERR_EOF)
        return true;
    return c->err == REDIS_ERR_IO &&
           (saved_errno == ECONNRESET || saved_errno == EPIPE);
}

/*
 * Run one command on this thread's connection: the reply (caller frees;
 * may be an error reply), or NULL when Redis is unavailable. A context the
 * server had closed is reopened and the command sent once more: each
 * command here is safe to repeat (acquire recognises its own token).
 */
static redisReply *redis_be_command(struct redis_be *be,
                                    int argc,
                                    const char **argv,
                                    const size_t *lens)
{
    struct redis_conn *cn = redis_be_conn(be);
    redisReply *r;
    bool reused;
    int saved;

    if (cn == NULL)
        return NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        reused = cn->ctx != NULL;
        if (redis_be_conn_ready(be, cn) != 0)
            return NULL;
        errno = 0;
        r = redisCommandArgv(cn->ctx, argc, argv, lens);
        saved = errno;
        if (r != NULL && cn->ctx->err == 0) {
            cn->backoff_ms = 0;
            redis_be_mark(be, 1, NULL);
            return r;
        }
        freeReplyObject(r);
        if (reused && attempt == 0 && redis_be_closed_by_peer(cn->ctx, saved)) {
            redisFree(cn->ctx);
            cn->ctx = NULL; /* reconnect at once, no backoff */
            continue;
        }
        {
            char why[sizeof(cn->ctx->errstr)];
            if (cn->ctx->err == REDIS_ERR_IO &&
                (saved == EAGAIN || saved == EWOULDBLOCK))
                snprintf(why, sizeof(why), "command timed out");
            else
                snprintf(why, sizeof(why), "%s",
                         cn->ctx->errstr[0] != '\0' ? cn->ctx->errstr
                                                    : "I/O error");
            redis_be_conn_fail(be, cn, why); /* frees the context */
        }
        return NULL;
    }
    return NULL;
}

/*
 * Run script s with nkeys keys then the other arguments (args[i] of
 * lens[i] bytes; at most 13 in all) and, when stamped, a last argument:
 * the not-after time in Redis's clock. EVALSHA first; EVAL when Redis lost
 * the script (SCRIPT FLUSH), which also caches it again. NULL or an error
 * reply are logged and answered NULL.
 */
static redisReply *redis_be_script(struct redis_be *be,
                                   enum redis_be_script s,
                                   int nkeys,
                                   int nargs,
                                   const char **args,
                                   const size_t *lens,
                                   bool stamped)
{
    const char *argv[3 + 14];
    size_t argl[3 + 14];
    char nk[4], stamp[24];
    struct redis_conn *cn = redis_be_conn(be);
    redisReply *r;
    int total = 3 + nargs + (stamped ? 1 : 0);

    if (cn == NULL || nargs > 13)
        return NULL;
    snprintf(nk, sizeof(nk), "%d", nkeys);
    argv[2] = nk;
    argl[2] = strlen(nk);
    for (int i = 0; i < nargs; i++) {
        argv[3 + i] = args[i];
        argl[3 + i] = lens[i];
    }
    for (int attempt = 0;; attempt++) {
        if (redis_be_conn_ready(be, cn) != 0)
            return NULL;
        if (stamped) {
            int64_t ms =
                (int64_t)be->cmd_tv.tv_sec * 1000 + be->cmd_tv.tv_usec / 1000;
            snprintf(stamp, sizeof(stamp), "%lld",
                     (long long)(clock_mono_ms() + ms + cn->offset_ms));
            argv[3 + nargs] = stamp;
            argl[3 + nargs] = strlen(stamp);
        }
        /* cn->sha is filled once the context is up; a reconnect inside
         * redis_be_command() reloads the same scripts, same digests. */
        argv[0] = "EVALSHA";
        argl[0] = 7;
        argv[1] = cn->sha[s];
        argl[1] = 40;
        r = redis_be_command(be, total, argv, argl);
        if (r != NULL && r->type == REDIS_REPLY_ERROR &&
            strncmp(r->str, "NOSCRIPT", 8) == 0) {
            freeReplyObject(r);
            argv[0] = "EVAL";
            argl[0] = 4;
            argv[1] = redis_be_scripts[s];
            argl[1] = strlen(redis_be_scripts[s]);
            r = redis_be_command(be, total, argv, argl);
        }
        if (r == NULL)
            return NULL;
        if (!(stamped && reply_is_int(r, 0) && r->element[0]->integer == -2))
            break;
        /* "too late", yet the reply is here in time: our idea of Redis's
         * clock is off (it was stepped, or this is another server).
         * Measure again and retry once. */
        freeReplyObject(r);
        if (attempt > 0 || cn->ctx == NULL ||
            redis_be_clock(cn->ctx, &cn->offset_ms) != 0) {
            redis_be_warn(be, "clock", "cannot agree on Redis's clock");
            if (cn->ctx != NULL)
                redis_be_conn_fail(be, cn, "clock check failed");
            return NULL;
        }
    }
    if (r->type == REDIS_REPLY_ERROR) {
        /* LOADING, READONLY, MISCONF, BUSY, OOM...: never a grant */
        redis_be_warn(be, "script error", r->str);
        freeReplyObject(r);
        return NULL;
    }
    if (r->type != REDIS_REPLY_ARRAY && r->type != REDIS_REPLY_INTEGER) {
        redis_be_warn(be, "script", "unexpected reply type");
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* ---- cancels, and the failed ones ---- */

/* Take waiter id out of key's queue: 0, or -1 when Redis did not answer. */
static int redis_be_cancel_run(struct redis_be *be,
                               const char *key,
                               size_t key_len,
                               const char *id)
{
    char queue[REDIS_BE_KEYBUF], qdl[REDIS_BE_KEYBUF], lock[REDIS_BE_KEYBUF];
    const char *args[6];
    size_t lens[6];
    redisReply *r;

    args[0] = queue;
    lens[0] = redis_be_key(be, "queue:", key, key_len, queue);
    args[1] = qdl;
    lens[1] = redis_be_key(be, "qdl:", key, key_len, qdl);
    args[2] = lock;
    lens[2] = redis_be_key(be, "lock:", key, key_len, lock);
    args[3] = id;
    lens[3] = strlen(id);
    args[4] = be->channel;
    lens[4] = strlen(be->channel);
    args[5] = key;
    lens[5] = key_len;
    r = redis_be_script(be, SCRIPT_CANCEL, 3, 6, args, lens, false);
    if (r == NULL)
        return -1;
    freeReplyObject(r);
    return 0;
}

/* Keep a failed cancel to retry; past the bound (or out of memory) the
 * place waits for its deadline, as it would without the list. */
static void redis_be_trash_add(struct redis_be *be,
                               const char *key,
                               size_t key_len,
                               const char *id,
                               int64_t until_ms)
{
    struct redis_be_trash *t = malloc(sizeof(*t) + key_len);

    if (t == NULL)
        return;
    t->until_ms = until_ms;
    snprintf(t->id, sizeof(t->id), "%s", id);
    t->key_len = key_len;
    memcpy(t->key, key, key_len);
    pthread_mutex_lock(&be->lock);
    if (be->ntrash < REDIS_BE_TRASH_MAX) {
        t->next = be->trash;
        be->trash = t;
        be->ntrash++;
        t = NULL;
    }
    pthread_mutex_unlock(&be->lock);
    if (t != NULL) {
        redis_be_warn(be, "cancel", "too many failed cancels to retry");
        free(t);
    }
}

static bool redis_be_trash_any(struct redis_be *be)
{
    bool any;

    pthread_mutex_lock(&be->lock);
    any = be->trash != NULL;
    pthread_mutex_unlock(&be->lock);
    return any;
}

/*
 * Retry the failed cancels, on this thread's own connection, until one
 * fails again: that one and the rest go back on the list. Those whose
 * place Redis has dropped by itself by now are forgotten.
 */
static void redis_be_trash_empty(struct redis_be *be)
{
    struct redis_be_trash *t, *next;

    pthread_mutex_lock(&be->lock);
    t = be->trash;
    be->trash = NULL;
    be->ntrash = 0;
    pthread_mutex_unlock(&be->lock);
    for (; t != NULL; t = next) {
        next = t->next;
        if (clock_mono_ms() > t->until_ms ||
            redis_be_cancel_run(be, t->key, t->key_len, t->id) == 0) {
            free(t);
            continue;
        }
        /* away again: back on the list, within its bound */
        pthread_mutex_lock(&be->lock);
        for (; t != NULL; t = next) {
            next = t->next;
            if (be->ntrash >= REDIS_BE_TRASH_MAX) {
                free(t);
                continue;
            }
            t->next = be->trash;
            be->trash = t;
            be->ntrash++;
        }
        pthread_mutex_unlock(&be->lock);
        return;
    }
}

/* The subscriber's turn to retry failed cancels, every
 * REDIS_BE_TRASH_EVERY_MS at most; *last_ms is its monotonic clock. */
static void redis_be_trash_tick(struct redis_be *be, int64_t *last_ms)
{
    int64_t now = clock_mono_ms();

    if (now - *last_ms < REDIS_BE_TRASH_EVERY_MS)
        return;
    *last_ms = now;
    if (redis_be_trash_any(be))
        redis_be_trash_empty(be);
}

/* ---- the subscriber ---- */

static void redis_be_sub_sleep(struct redis_be *be, int64_t ms)
{
    int64_t deadline = clock_deadline_ms(ms);

    pthread_mutex_lock(&be->lock);
    while (!atomic_load(&be->stopping))
        if (clock_cond_wait_until(&be->sub_cond, &be->lock, deadline) != 0)
            break;
    pthread_mutex_unlock(&be->lock);
}

static void redis_be_sub_tried(struct redis_be *be)
{
    pthread_mutex_lock(&be->lock);
    be->sub_tried = true;
    pthread_cond_broadcast(&be->sub_cond);
    pthread_mutex_unlock(&be->lock);
}

/* One message from the channel: ["message", channel, key]. */
static void redis_be_sub_handle(struct redis_be *be, const redisReply *r)
{
    const redisReply *kind, *key;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3)
        return;
    kind = r->element[0];
    key = r->element[2];
    if (kind->type != REDIS_REPLY_STRING || kind->len != 7 ||
        memcmp(kind->str, "message", 7) != 0)
        return;
    if (key->type != REDIS_REPLY_STRING || key->len == 0 ||
        key->len > LOCK_KEY_MAX)
        return;
    if (be->hooks.notify != NULL)
        be->hooks.notify(be->hooks.arg, key->str, key->len);
}

/*
 * Read the subscription until it breaks or close() asks. Polls with a short
 * timeout so stopping is noticed; an idle link is checked with PING now and
 * then (a subscribed connection may PING) so a dead peer is noticed too.
 */
static void redis_be_sub_read(struct redis_be *be, redisContext *c)
{
    int64_t last_rx = clock_mono_ms(), last_trash = 0;
    bool ping_out = false;

    while (!atomic_load(&be->stopping)) {
        redisReply *r = NULL;
        struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
        int n;

        /* on another connection: this one only listens */
        redis_be_trash_tick(be, &last_trash);
        if (redisGetReplyFromReader(c, (void **)&r) != REDIS_OK)
            return;
        if (r != NULL) {
            redis_be_sub_handle(be, r);
            freeReplyObject(r);
            continue;
        }
        n = poll(&pfd, 1, REDIS_BE_SUB_POLL_MS);
        if (n < 0 && errno != EINTR)
            return;
        if (n > 0) {
            if (redisBufferRead(c) != REDIS_OK)
                return;
            last_rx = clock_mono_ms();
            ping_out = false;
            continue;
        }
        if (clock_mono_ms() - last_rx < REDIS_BE_SUB_PING_MS)
            continue;
        if (ping_out)
            return; /* no answer to the last PING in a whole period */
        {
            const char *argv[] = { "PING" };
            size_t lens[] = { 4 };
            int done = 0;
            if (redisAppendCommandArgv(c, 1, argv, lens) != REDIS_OK)
                return;
            while (!done)
                if (redisBufferWrite(c, &done) != REDIS_OK)
                    return;
        }
        ping_out = true;
        last_rx = clock_mono_ms();
    }
}

static void *redis_be_sub_main(void *arg)
{
    struct redis_be *be = arg;
    int64_t backoff = 0, last_trash = 0;
    char err[256];

    while (!atomic_load(&be->stopping)) {
        redisContext *c = redis_be_dial(be, err, sizeof(err));
        redisReply *r = NULL;

        if (c != NULL) {
            const char *argv[] = { "SUBSCRIBE", be->channel };
            size_t lens[] = { 9, strlen(be->channel) };
            r = redisCommandArgv(c, 2, argv, lens);
            if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
                snprintf(err, sizeof(err), "SUBSCRIBE: %s",
                         r != NULL && r->type == REDIS_REPLY_ERROR ? r->str
                                                                   : c->errstr);
                freeReplyObject(r);
                redisFree(c);
                c = NULL;
            } else {
                freeReplyObject(r);
            }
        }
        if (c != NULL) {
            log_debug("redis: subscribed to the release channel");
            redis_be_mark(be, 1, NULL);
            backoff = 0;
            redis_be_sub_tried(be);
            redis_be_sub_read(be, c);
            redisFree(c);
            if (!atomic_load(&be->stopping))
                log_debug("redis: release subscription lost; resubscribing");
            /* releases published while we were away are not heard: their
             * waiters retry at the holder's expiry (the HELD hint) */
        } else {
            redis_be_sub_tried(be);
            log_debug("redis: subscriber: %s", err);
        }
        backoff = backoff == 0 ? REDIS_BE_BACKOFF_MIN_MS : backoff * 2;
        if (backoff > REDIS_BE_BACKOFF_MAX_MS)
            backoff = REDIS_BE_BACKOFF_MAX_MS;
        redis_be_sub_sleep(be, backoff);
        /* commands may work while SUBSCRIBE does not */
        if (!atomic_load(&be->stopping))
            redis_be_trash_tick(be, &last_trash);
    }
    return NULL;
}

/* ---- URL ---- */

/* host[:port], [v6][:port] or a bare v6 address; one primary only (a ','
 * is refused). Empty: the default host. 0, -1 when malformed, -2 when out
 * of memory. */
static int redis_be_parse_hosts(struct redis_be *be, const char *hosts)
{
    unsigned port = REDIS_BE_DEFAULT_PORT;
    int rc;

    if (hosts == NULL || hosts[0] == '\0') {
        be->host = strdup(REDIS_BE_DEFAULT_HOST);
        be->port = REDIS_BE_DEFAULT_PORT;
        return be->host != NULL ? 0 : -2;
    }
    rc = url_hostport(hosts, &be->host, &port, URL_HOSTPORT_BARE_V6);
    if (rc == 0)
        be->port = (int)port;
    return rc;
}

static enum backend_result redis_be_parse_url(struct redis_be *be,
                                              const char *url,
        char *errbuf,
        size_t errlen)
{
    static const char *const allowed[] = { "prefix", "connect_timeout_ms",
                                           "timeout_ms", NULL };
    struct url u;
    enum backend_result res = BACKEND_INVALID;
    const char *bad = NULL, *v;
    uint64_t n;

    if (url_parse(url, &u) != 0) {
        snprintf(errbuf, errlen, "redis: malformed URL");
        return BACKEND_INVALID;
    }
    if (strcmp(u.scheme, "redis") != 0) {
        snprintf(errbuf, errlen, "redis: the URL scheme is not redis://");
        goto out;
    }
    if (url_check_params(&u, allowed, &bad) != 0) {
        snprintf(errbuf, errlen, "redis: unknown URL option '%s' (known: prefix, "
                  "connect_timeout_ms, timeout_ms)",
                  bad);
        goto out;
    }
    switch (redis_be_parse_hosts(be, u.hosts)) {
    case 0:
        break;
    case -2:
        goto nomem;
    default:
        snprintf(errbuf, errlen, "redis: bad host or port in the URL");
        goto out;
    }
    if (u.user != NULL && u.password == NULL) {
        snprintf(errbuf, errlen, "redis: URL has a user but no password "
                  "(use redis://:password@host)");
        goto out;
    }
    if (u.password != NULL) {
        be->password = strdup(u.password);
        if (be->password == NULL)
            goto nomem;
        if (u.user != NULL && u.user[0] != '\0') {
            be->user = strdup(u.user);
            if (be->user == NULL)
                goto nomem;
        }
    }
    if (u.path != NULL) {
        if (text_parse_u64(u.path, 0, INT_MAX, &n) != 0) {
            snprintf(errbuf, errlen, "redis: the URL path must be a database number");
            goto out;
        }
        be->db = (unsigned)n;
    }
    v = url_param(&u, "prefix");
    if (v == NULL)
        v = REDIS_BE_DEFAULT_PREFIX;
    if (strlen(v) > REDIS_BE_PREFIX_MAX) {
        snprintf(errbuf, errlen, "redis: prefix longer than %d bytes", REDIS_BE_PREFIX_MAX);
        goto out;
    }
    be->prefix = strdup(v);
    if (be->prefix == NULL)
        goto nomem;
    be->prefix_len = strlen(be->prefix);
    n = REDIS_BE_CONNECT_TIMEOUT_MS;
    v = url_param(&u, "connect_timeout_ms");
    if (v != NULL && text_parse_u64(v, 1, REDIS_BE_TIMEOUT_MAX_MS, &n)) {
        snprintf(errbuf, errlen, "redis: connect_timeout_ms must be 1..%d",
                  REDIS_BE_TIMEOUT_MAX_MS);
        goto out;
    }
    be->connect_tv = redis_be_tv(n);
    n = REDIS_BE_TIMEOUT_MS;
    v = url_param(&u, "timeout_ms");
    if (v != NULL && text_parse_u64(v, 1, REDIS_BE_TIMEOUT_MAX_MS, &n)) {
        snprintf(errbuf, errlen, "redis: timeout_ms must be 1..%d", REDIS_BE_TIMEOUT_MAX_MS);
        goto out;
    }
    be->cmd_tv = redis_be_tv(n);
    be->base.call_timeout_ms = (int64_t)n;
    {
        size_t len = be->prefix_len + 32;
        be->channel = malloc(len);
        if (be->channel == NULL)
            goto nomem;
        snprintf(be->channel, len, "%sreleased:%u", be->prefix, be->db);
    }
    res = BACKEND_OK;
    goto out;
nomem:
    snprintf(errbuf, errlen, "redis: out of memory");
    res = BACKEND_NO_MEMORY;
out:
    url_cleanup(&u);
    return res;
}

/* ---- operations ---- */

static void redis_be_close(struct backend *b);
static enum backend_result redis_be_ping(struct backend *b);

static enum backend_result redis_be_open(const char *url,
                                         const struct backend_hooks *hooks,
                                         struct backend **out,
        char *errbuf,
        size_t errlen)
{
    struct redis_be *be = calloc(1, sizeof(*be));
    enum backend_result r;
    int64_t wait_ms, deadline;

    *out = NULL;
    if (be == NULL)
        return BACKEND_NO_MEMORY;
    be->base.ops = &redis_backend;
    if (hooks != NULL)
        be->hooks = *hooks;
    atomic_init(&be->up, -1);
    atomic_init(&be->stopping, false);
    atomic_init(&be->last_log_ms, 0);
    atomic_init(&be->last_ok_ms, 0);
    if (pthread_mutex_init(&be->lock, NULL) != 0) {
        free(be);
        return BACKEND_NO_MEMORY;
    }
    if (clock_cond_init(&be->sub_cond) != 0) {
        pthread_mutex_destroy(&be->lock);
        free(be);
        return BACKEND_NO_MEMORY;
    }
    if (pthread_key_create(&be->tls, redis_be_conn_destroy) != 0) {
        pthread_cond_destroy(&be->sub_cond);
        pthread_mutex_destroy(&be->lock);
        free(be);
        return BACKEND_NO_MEMORY;
    }
    if (random_hex(be->instance, 8) != 0) {
        redis_be_close(&be->base);
        return BACKEND_NO_MEMORY;
    }
    strcat(be->instance, ":");
    r = redis_be_parse_url(be, url, errbuf, errlen);
    if (r != BACKEND_OK) {
        redis_be_close(&be->base);
        return r;
    }
    if (pthread_create(&be->sub_thread, NULL, redis_be_sub_main, be) != 0) {
        redis_be_close(&be->base);
        return BACKEND_NO_MEMORY;
    }
    be->sub_started = true;

    /* Give the subscriber one attempt, so that releases through other
     * instances are heard from the first request on; a Redis that is
     * down is not an error here. */
    wait_ms = (int64_t)be->connect_tv.tv_sec * 1000 +
              be->connect_tv.tv_usec / 1000 +
              (int64_t)be->cmd_tv.tv_sec * 1000 + be->cmd_tv.tv_usec / 1000;
    deadline = clock_deadline_ms((wait_ms / 1000 + 1) * 1000);
    pthread_mutex_lock(&be->lock);
    while (!be->sub_tried)
        if (clock_cond_wait_until(&be->sub_cond, &be->lock, deadline) != 0)
            break;
    pthread_mutex_unlock(&be->lock);
    if (redis_be_ping(&be->base) != BACKEND_OK)
        log_warn("redis: %s:%d not reachable yet; requests answer 503 "
                 "until it is",
                 be->host, be->port);
    *out = &be->base;
    return BACKEND_OK;
}

/* The waiter's queue id, made on its first acquire; NULL: no memory. */
static struct redis_be_wait *redis_be_wait_get(struct redis_be *be,
                                               struct lock_waiter *w)
{
    struct redis_be_wait *bw = w->be_data;

    if (bw != NULL)
        return bw;
    bw = calloc(1, sizeof(*bw));
    if (bw == NULL)
        return NULL;
    snprintf(bw->id, sizeof(bw->id), "%s%llu", be->instance,
             (unsigned long long)w->id);
    /* deadline_ms and clock_wall_ms() are both lockd's wall clock: their
     * difference is the wait left, whatever that clock's error */
    bw->end_ms = clock_mono_ms() + (w->deadline_ms - clock_wall_ms());
    w->be_data = bw;
    return bw;
}

/* What is left of bw's wait, in ms (0 once it ran out). */
static int64_t redis_be_wait_left(const struct redis_be_wait *bw)
{
    int64_t left = bw->end_ms - clock_mono_ms();

    return left > 0 ? left : 0;
}

static void redis_be_wait_free(struct lock_waiter *w)
{
    free(w->be_data);
    w->be_data = NULL;
}

static enum backend_result redis_be_acquire(struct backend *b,
                                            const struct lock_req *req,
                                            struct lock_grant *out)
{
    struct redis_be *be = (struct redis_be *)b;
    char lock[REDIS_BE_KEYBUF], fence[REDIS_BE_KEYBUF];
    char queue[REDIS_BE_KEYBUF], qdl[REDIS_BE_KEYBUF];
    char ttl[24], left[24];
    const char *args[13];
    size_t lens[13];
    struct redis_be_wait *bw = NULL;
    redisReply *r;
    enum backend_result res = BACKEND_UNAVAILABLE;

    if (req->waiter != NULL) {
        bw = redis_be_wait_get(be, req->waiter);
        if (bw == NULL)
            return BACKEND_NO_MEMORY;
    }
    snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)req->ttl_ms);
    snprintf(left, sizeof(left), "%lld",
             bw != NULL ? (long long)redis_be_wait_left(bw) : 0LL);
    args[0] = lock;
    lens[0] = redis_be_key(be, "lock:", req->key, req->key_len, lock);
    args[1] = fence;
    lens[1] = redis_be_key(be, "fence:", req->key, req->key_len, fence);
    args[2] = queue;
    lens[2] = redis_be_key(be, "queue:", req->key, req->key_len, queue);
    args[3] = qdl;
    lens[3] = redis_be_key(be, "qdl:", req->key, req->key_len, qdl);
    args[4] = req->token;
    lens[4] = strlen(req->token);
    args[5] = ttl;
    lens[5] = strlen(ttl);
    args[6] = req->owner != NULL ? "1" : "0";
    lens[6] = 1;
    args[7] = req->owner != NULL ? req->owner : "";
    lens[7] = req->owner != NULL ? strlen(req->owner) : 0;
    args[8] = bw != NULL ? bw->id : "";
    lens[8] = strlen(args[8]);
    args[9] = left;
    lens[9] = strlen(left);
    args[10] = be->instance;
    lens[10] = strlen(be->instance);
    args[11] = be->channel;
    lens[11] = strlen(be->channel);
    args[12] = req->key;
    lens[12] = req->key_len;
    r = redis_be_script(be, SCRIPT_ACQUIRE, 4, 13, args, lens, true);
    if (r == NULL)
        return BACKEND_UNAVAILABLE; /* the waiter keeps its place, if any */
    if (reply_is_int(r, 0) && r->element[0]->integer == 1 && r->elements == 4 &&
        reply_is_int(r, 1) && reply_is_int(r, 2) && reply_is_int(r, 3) &&
        r->element[1]->integer > 0 &&
        (uint64_t)r->element[1]->integer <= LOCK_FENCE_MAX &&
        r->element[2]->integer > 0) {
        out->fence = (uint64_t)r->element[1]->integer;
        out->ttl_ms = (uint64_t)r->element[2]->integer;
        out->expires_at_ms = r->element[3]->integer;
        res = BACKEND_OK;
        if (req->waiter != NULL)
            redis_be_wait_free(req->waiter); /* out of the queue */
    } else if (reply_is_int(r, 0) && r->element[0]->integer == 0 &&
               r->elements == 4 && reply_is_int(r, 1) && reply_is_int(r, 2) &&
               reply_is_int(r, 3)) {
        long long hint = r->element[1]->integer;
        out->retry_ms = hint > 0 ? (uint64_t)hint : (hint == 0 ? 1 : 0);
        /* behind one of ours: waitq may hold them in another order and
         * passes the turn on; behind another instance's waiter, every one
         * of ours is behind too, so none needs trying until told */
        out->behind =
            r->element[2]->integer == 1 && r->element[3]->integer == 1;
        res = BACKEND_HELD;
    } else {
        redis_be_warn(be, "acquire", "unexpected reply");
    }
    freeReplyObject(r);
    return res;
}

static enum backend_result redis_be_cancel_wait(struct backend *b,
                                                const char *key,
                                                size_t key_len,
                                                struct lock_waiter *waiter)
{
    struct redis_be *be = (struct redis_be *)b;
    struct redis_be_wait *bw = waiter->be_data;
    enum backend_result res = BACKEND_OK;

    if (bw == NULL)
        return BACKEND_OK;
    if (redis_be_cancel_run(be, key, key_len, bw->id) != 0) {
        /* retried by the subscriber once Redis answers; at the latest,
         * the place goes when its deadline passes */
        redis_be_trash_add(be, key, key_len, bw->id,
                           bw->end_ms + REDIS_BE_GRACE_MS);
        res = BACKEND_UNAVAILABLE;
    }
    redis_be_wait_free(waiter);
    return res;
}

static enum backend_result redis_be_renew(struct backend *b,
                                          const struct lock_req *req,
                                          struct lock_grant *out)
{
    struct redis_be *be = (struct redis_be *)b;
    char lock[REDIS_BE_KEYBUF], ttl[24];
    const char *args[3];
    size_t lens[3];
    redisReply *r;
    enum backend_result res = BACKEND_UNAVAILABLE;

    snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)req->ttl_ms);
    args[0] = lock;
    lens[0] = redis_be_key(be, "lock:", req->key, req->key_len, lock);
    args[1] = req->token;
    lens[1] = strlen(req->token);
    args[2] = ttl;
    lens[2] = strlen(ttl);
    r = redis_be_script(be, SCRIPT_RENEW, 1, 3, args, lens, true);
    if (r == NULL)
        return BACKEND_UNAVAILABLE;
    if (!reply_is_int(r, 0)) {
        redis_be_warn(be, "renew", "unexpected reply");
    } else if (r->element[0]->integer == 0) {
        res = BACKEND_NOT_FOUND;
    } else if (r->element[0]->integer == -1) {
        res = BACKEND_MISMATCH;
    } else if (r->element[0]->integer == 1 && r->elements == 4 &&
               reply_is_int(r, 1) && reply_is_int(r, 2) && reply_is_int(r, 3) &&
               r->element[1]->integer > 0 && r->element[2]->integer > 0) {
        out->fence = (uint64_t)r->element[1]->integer;
        out->ttl_ms = (uint64_t)r->element[2]->integer;
        out->expires_at_ms = r->element[3]->integer;
        res = BACKEND_OK;
    } else {
        redis_be_warn(be, "renew", "unexpected reply");
    }
    freeReplyObject(r);
    return res;
}

static enum backend_result redis_be_release(struct backend *b,
                                            const struct lock_req *req)
{
    struct redis_be *be = (struct redis_be *)b;
    char lock[REDIS_BE_KEYBUF], queue[REDIS_BE_KEYBUF];
    const char *args[5];
    size_t lens[5];
    redisReply *r;
    enum backend_result res = BACKEND_UNAVAILABLE;

    args[0] = lock;
    lens[0] = redis_be_key(be, "lock:", req->key, req->key_len, lock);
    args[1] = queue;
    lens[1] = redis_be_key(be, "queue:", req->key, req->key_len, queue);
    args[2] = req->token;
    lens[2] = strlen(req->token);
    args[3] = be->channel;
    lens[3] = strlen(be->channel);
    args[4] = req->key;
    lens[4] = req->key_len;
    r = redis_be_script(be, SCRIPT_RELEASE, 2, 5, args, lens, false);
    if (r == NULL)
        return BACKEND_UNAVAILABLE;
    if (r->type != REDIS_REPLY_INTEGER)
        redis_be_warn(be, "release", "unexpected reply");
    else if (r->integer == 1)
        res = BACKEND_OK;
    else if (r->integer == 0)
        res = BACKEND_NOT_FOUND;
    else if (r->integer == -1)
        res = BACKEND_MISMATCH;
    else
        redis_be_warn(be, "release", "unexpected reply");
    freeReplyObject(r);
    /* wake local waiters now; the published message will wake them again
     * (spurious is fine) and reaches the other instances */
    if (res == BACKEND_OK && be->hooks.notify != NULL)
        be->hooks.notify(be->hooks.arg, req->key, req->key_len);
    return res;
}

static enum backend_result redis_be_inspect(struct backend *b,
                                            const char *key,
                                            size_t key_len,
                                            struct lock_info *out)
{
    struct redis_be *be = (struct redis_be *)b;
    char lock[REDIS_BE_KEYBUF];
    const char *args[1];
    size_t lens[1];
    redisReply *r;
    enum backend_result res = BACKEND_UNAVAILABLE;

    args[0] = lock;
    lens[0] = redis_be_key(be, "lock:", key, key_len, lock);
    r = redis_be_script(be, SCRIPT_INSPECT, 1, 1, args, lens, false);
    if (r == NULL)
        return BACKEND_UNAVAILABLE;
    if (!reply_is_int(r, 0)) {
        redis_be_warn(be, "inspect", "unexpected reply");
    } else if (r->element[0]->integer == 0) {
        res = BACKEND_NOT_FOUND;
    } else if (r->element[0]->integer == 1 && r->elements >= 4 &&
               reply_is_int(r, 1) && reply_is_int(r, 2) && reply_is_int(r, 3) &&
               r->element[1]->integer > 0) {
        long long pttl = r->element[2]->integer;
        out->fence = (uint64_t)r->element[1]->integer;
        out->ttl_ms = pttl >= 1 ? (uint64_t)pttl : 1; /* held: >= 1 */
        out->expires_at_ms = r->element[3]->integer;
        out->has_owner = false;
        if (r->elements >= 5 && r->element[4]->type == REDIS_REPLY_STRING) {
            size_t n = r->element[4]->len;
            if (n > LOCK_OWNER_MAX)
                n = LOCK_OWNER_MAX;
            memcpy(out->owner, r->element[4]->str, n);
            out->owner[n] = '\0';
            out->has_owner = true;
        }
        res = BACKEND_OK;
    } else {
        redis_be_warn(be, "inspect", "unexpected reply");
    }
    freeReplyObject(r);
    return res;
}

static enum backend_result redis_be_ping(struct backend *b)
{
    struct redis_be *be = (struct redis_be *)b;
    const char *argv[] = { "PING" };
    size_t lens[] = { 4 };
    redisReply *r = redis_be_command(be, 1, argv, lens);
    enum backend_result res = BACKEND_UNAVAILABLE;

    if (r == NULL)
        return BACKEND_UNAVAILABLE;
    if (r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0)
        res = BACKEND_OK;
    else
        redis_be_warn(be, "PING",
                      r->type == REDIS_REPLY_ERROR ? r->str
                                                   : "unexpected reply");
    freeReplyObject(r);
    return res;
}

static void redis_be_close(struct backend *b)
{
    struct redis_be *be = (struct redis_be *)b;
    struct redis_conn *cn, *next;

    if (be == NULL)
        return;
    if (be->sub_started) {
        pthread_mutex_lock(&be->lock);
        atomic_store(&be->stopping, true);
        pthread_cond_broadcast(&be->sub_cond);
        pthread_mutex_unlock(&be->lock);
        pthread_join(be->sub_thread, NULL);
    }
    /* Threads still alive keep their value under the key, but once the
     * key is deleted no destructor runs: free every connection here. */
    pthread_key_delete(be->tls);
    pthread_mutex_lock(&be->lock);
    cn = be->conns;
    be->conns = NULL;
    pthread_mutex_unlock(&be->lock);
    for (; cn != NULL; cn = next) {
        next = cn->next;
        redis_be_conn_free(cn);
    }
    while (be->trash != NULL) { /* their places go at their deadlines */
        struct redis_be_trash *t = be->trash;
        be->trash = t->next;
        free(t);
    }
    pthread_cond_destroy(&be->sub_cond);
    pthread_mutex_destroy(&be->lock);
    free(be->host);
    free(be->user);
    free(be->password);
    free(be->prefix);
    free(be->channel);
    free(be);
}

const struct backend_ops redis_backend = {
    .scheme = "redis",
    .caps = BACKEND_CAP_QUEUE,
    .open = redis_be_open,
    .acquire = redis_be_acquire,
    .renew = redis_be_renew,
    .release = redis_be_release,
    .inspect = redis_be_inspect,
    .cancel_wait = redis_be_cancel_wait,
    .ping = redis_be_ping,
    .held_count = NULL,
    .close = redis_be_close,
};
