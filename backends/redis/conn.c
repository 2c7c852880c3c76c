/*
 * backends/redis/conn.c - the connections of the Redis adapter: one
 * hiredis context per worker thread (under a pthread key, so no thread
 * waits for another's round trip), reconnecting with a growing back-off,
 * and the log lines for Redis going away and coming back. Kept apart
 * from the scripts and the operations so the per-thread-connection and
 * back-off logic can move into a module shared with other adapters.
 */
#include "backends/redis/redis_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "lib/clock.h"
#include "lib/log.h"

/* ---- logging and back-off ---- */

void redis_warn(struct redis_be *be, const char *what, const char *detail)
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
void redis_mark(struct redis_be *be, int up, const char *detail)
{
    int was;
    char where[320];

    /* every success, not a sample of them: a thread that failed a moment
     * before the last sample would otherwise keep backing off (and answer
     * /readyz 503) after Redis is back */
    if (up)
        threadconn_ok(&be->conns, NULL);
    if (atomic_load_explicit(&be->up, memory_order_relaxed) == up)
        return;
    was = atomic_exchange(&be->up, up);
    if (was == up)
        return;
    redis_where(be, where, sizeof(where));
    if (up)
        log_info("redis: connected to %s", where);
    else
        log_warn("redis: %s unavailable: %s", where, detail);
}

void redis_where(struct redis_be *be, char *buf, size_t len)
{
    /* sentinel: the primary changes, sentinel.c knows it (issue 17) */
    if (be->topology == REDIS_BE_SENTINEL)
        redis_sentinel_where(be, buf, len);
    else
        snprintf(buf, len, "%s:%d", be->host, be->port);
}

/* ---- dialling ---- */

/* fan.c: this thread's dials use at most this many ms per step (connect,
 * each round trip), whatever the URL says; 0: the URL's timeouts */
static _Thread_local int64_t redis_dial_cap_ms;

void redis_dial_cap(int64_t ms)
{
    redis_dial_cap_ms = ms;
}

/* ms, or the dial cap when there is a smaller one */
static int64_t redis_capped(int64_t ms)
{
    return redis_dial_cap_ms > 0 && redis_dial_cap_ms < ms ? redis_dial_cap_ms
                                                           : ms;
}

static struct timeval redis_tv(int64_t ms)
{
    struct timeval tv;

    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
    return tv;
}

/* AUTH on a fresh context: 0, or -1 (why in err). */
static int
redis_auth(struct redis_be *be, redisContext *c, char *err, size_t errlen)
{
    redisReply *r;

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
        return -1;
    }
    freeReplyObject(r);
    return 0;
}

/*
 * Connect and authenticate: a context with command timeouts, or NULL (and
 * why in err). Blocks at most the connect timeout plus one command timeout
 * per round trip.
 */
redisContext *redis_dial_to(
    struct redis_be *be, const char *host, int port, char *err, size_t errlen)
{
    redisContext *c = redisConnectWithTimeout(
        host, port, redis_tv(redis_capped(be->connect_ms)));

    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (c->err != 0) {
        snprintf(err, errlen, "connect: %s", c->errstr);
        redisFree(c);
        return NULL;
    }
    if (redisSetTimeout(c, redis_tv(redis_capped(be->cmd_ms))) != REDIS_OK) {
        snprintf(err, errlen, "cannot set timeouts: %s", c->errstr);
        redisFree(c);
        return NULL;
    }
    if (be->password != NULL && redis_auth(be, c, err, errlen) != 0) {
        redisFree(c);
        return NULL;
    }
    return c;
}

redisContext *redis_dial(struct redis_be *be, char *err, size_t errlen)
{
    /* sentinel: the primary the Sentinels name, ROLE checked (issue 17) */
    if (be->topology == REDIS_BE_SENTINEL)
        return redis_sentinel_dial(be, err, errlen);
    return redis_dial_to(be, be->host, be->port, err, errlen);
}

/* A decimal integer reply element: 0, or -1. */
static int redis_clock_part(const redisReply *e, int64_t *out)
{
    char *end;

    errno = 0;
    *out = strtoll(e->str, &end, 10);
    return errno != 0 || *end != '\0' ? -1 : 0;
}

/*
 * Measure Redis's clock against our monotonic one: *offset is Redis's unix
 * ms minus ours, off by at most half a round trip. 0, or -1 on a dead
 * context (the caller frees it).
 */
int redis_clock(redisContext *c, int64_t *offset)
{
    const char *argv[] = { "TIME" };
    size_t lens[] = { 4 };
    int64_t t0 = clock_mono_ms(), t1;
    redisReply *r = redisCommandArgv(c, 1, argv, lens);
    int64_t sec, usec;
    int rc = -1;

    t1 = clock_mono_ms();
    if (r == NULL)
        return -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING &&
        r->element[1]->type == REDIS_REPLY_STRING &&
        redis_clock_part(r->element[0], &sec) == 0 &&
        redis_clock_part(r->element[1], &usec) == 0) {
        *offset = sec * 1000 + usec / 1000 - (t0 + t1) / 2;
        rc = 0;
    }
    freeReplyObject(r);
    return rc;
}

/*
 * Dial, SELECT the database and load the scripts, in one round trip, then
 * measure Redis's clock.
 */
redisContext *redis_node_open(struct redis_be *be,
                              const char *host,
                              int port,
                              struct redis_loaded *scripts,
                              int64_t *offset,
                              char *err,
                              size_t errlen)
{
    /* host NULL: the server of the URL, or the primary the Sentinels
     * name (redis_dial) */
    redisContext *c = host != NULL ? redis_dial_to(be, host, port, err, errlen)
                                   : redis_dial(be, err, errlen);
    redisReply *r = NULL;
    char db[16];
    int rc = 0;

    if (c == NULL)
        return NULL;
    snprintf(db, sizeof(db), "%u", be->db);
    if (be->db != 0) {
        const char *argv[] = { "SELECT", db };
        size_t lens[] = { 6, strlen(db) };
        if (redisAppendCommandArgv(c, 2, argv, lens) != REDIS_OK)
            goto fail;
    }
    if (redis_scripts_send(c) != 0)
        goto fail;
    if (be->db != 0) {
        if (redisGetReply(c, (void **)&r) != REDIS_OK || r == NULL)
            goto fail;
        if (r->type == REDIS_REPLY_ERROR) {
            snprintf(err, errlen, "SELECT %s: %s", db, r->str);
            rc = -1;
        }
        freeReplyObject(r);
    }
    switch (redis_scripts_recv(c, scripts, err, errlen)) {
    case 0:
        break;
    case -1:
        rc = -1;
        break;
    default:
        goto fail;
    }
    if (rc != 0) {
        redisFree(c);
        return NULL;
    }
    if (redis_clock(c, offset) != 0)
        goto fail;
    return c;
fail:
    snprintf(err, errlen, "%s", c->errstr[0] != '\0' ? c->errstr : "I/O error");
    redisFree(c);
    return NULL;
}

static int redis_conn_open(struct redis_be *be,
                           struct redis_conn *cn,
                           char *err,
                           size_t errlen)
{
    /* sentinel: read before dialling, so a switch meanwhile drops it */
    cn->gen = be->topology == REDIS_BE_SENTINEL ? redis_sentinel_gen(be) : 0;
    cn->has_identity = false;
    cn->ctx =
        redis_node_open(be, NULL, 0, &cn->scripts, &cn->offset_ms, err, errlen);
    if (cn->ctx == NULL)
        return -1;
    /* redlock (fan.c): who the server is, read on this very connection,
     * so a restart is never mistaken for the server it replaced */
    if (be->topology == REDIS_BE_SINGLE && atomic_load(&be->want_identity)) {
        if (redis_identity_read(cn->ctx, &cn->identity) != 0) {
            snprintf(err, errlen, "identity: %s",
                     cn->ctx->errstr[0] != '\0' ? cn->ctx->errstr
                                                : "I/O error");
            redisFree(cn->ctx);
            cn->ctx = NULL;
            return -1;
        }
        cn->has_identity = true;
    }
    /* dialled under a fan-out's cap: its commands get the full timeout */
    if (redis_dial_cap_ms > 0 &&
        redisSetTimeout(cn->ctx, redis_tv(be->cmd_ms)) != REDIS_OK) {
        snprintf(err, errlen, "cannot set timeouts");
        redisFree(cn->ctx);
        cn->ctx = NULL;
        return -1;
    }
    return 0;
}

/* ---- per-thread connections ---- */

/* threadconn's drop: the thread exits, or the set is destroyed. */
static void redis_conn_drop(struct threadconn *tc, bool thread_exits)
{
    (void)thread_exits;
    struct redis_conn *cn = (struct redis_conn *)tc;

    if (cn->cnodes != NULL) { /* cluster mode: ctx is one of them */
        redis_cluster_conn_drop(cn);
        return;
    }
    if (cn->ctx != NULL)
        redisFree(cn->ctx);
    cn->ctx = NULL;
}

int redis_conns_init(struct redis_be *be)
{
    return threadconn_set_init(&be->conns, sizeof(struct redis_conn),
                               redis_conn_drop, REDIS_BE_BACKOFF_MIN_MS,
                               REDIS_BE_BACKOFF_MAX_MS);
}

/* Threads still alive keep no destructor once the set is gone: every
 * connection is closed and freed here. */
void redis_conns_free(struct redis_be *be)
{
    threadconn_set_destroy(&be->conns);
}

struct redis_conn *redis_conn_get(struct redis_be *be)
{
    struct redis_conn *cn = (struct redis_conn *)threadconn_get(&be->conns);

    if (cn != NULL && cn->be == NULL) {
        cn->be = be;
        cn->slot = -1; /* cluster mode: any node until a script names one */
    }
    return cn;
}

/* The context broke (I/O error, timeout, protocol error): drop it and
 * hold off reconnecting a little, longer each time. */
void redis_conn_fail(struct redis_be *be,
                     struct redis_conn *cn,
                     const char *why)
{
    if (be->topology == REDIS_BE_CLUSTER) { /* cluster.c: per node */
        redis_cluster_fail(be, cn, why);
        return;
    }
    if (cn->ctx != NULL) {
        redisFree(cn->ctx);
        cn->ctx = NULL;
    }
    threadconn_failed(&be->conns, &cn->tc);
    redis_mark(be, 0, why);
    if (be->topology == REDIS_BE_SENTINEL)
        redis_sentinel_lost(be); /* a failover, maybe: ask (issue 17) */
}

int redis_conn_ready(struct redis_be *be, struct redis_conn *cn)
{
    char err[256];

    if (be->topology == REDIS_BE_CLUSTER) /* cluster.c: the slot's node */
        return redis_cluster_ready(be, cn);
    /* sentinel: dialled before the last switch, to a demoted primary
     * maybe: never send it anything (issue 17) */
    if (cn->ctx != NULL && be->topology == REDIS_BE_SENTINEL &&
        cn->gen != redis_sentinel_gen(be)) {
        redisFree(cn->ctx);
        cn->ctx = NULL;
    }
    /* dialled before the identity was asked for: dial again with it */
    if (cn->ctx != NULL && !cn->has_identity &&
        be->topology == REDIS_BE_SINGLE && atomic_load(&be->want_identity)) {
        redisFree(cn->ctx);
        cn->ctx = NULL;
    }
    if (cn->ctx != NULL)
        return 0;
    /* back off, unless another thread has reached Redis since we failed:
     * then it is back and this thread should not answer 503 any longer */
    if (!threadconn_may_try(&be->conns, &cn->tc))
        return -1;
    if (redis_conn_open(be, cn, err, sizeof(err)) != 0) {
        redis_conn_fail(be, cn, err);
        return -1;
    }
    return 0;
}

/* Did the command fail because the server had closed the connection (a
 * Redis restart, an idle timeout) rather than time out? */
static bool redis_closed_by_peer(const redisContext *c, int saved_errno)
{
    if (c->err == REDIS_ERR_EOF)
        return true;
    return c->err == REDIS_ERR_IO &&
           (saved_errno == ECONNRESET || saved_errno == EPIPE);
}

/* A failed command on cn: say why and drop the context. */
static void
redis_command_failed(struct redis_be *be, struct redis_conn *cn, int saved)
{
    char why[sizeof(cn->ctx->errstr)];

    if (cn->ctx->err == REDIS_ERR_IO &&
        (saved == EAGAIN || saved == EWOULDBLOCK))
        snprintf(why, sizeof(why), "command timed out");
    else
        snprintf(why, sizeof(why), "%s",
                 cn->ctx->errstr[0] != '\0' ? cn->ctx->errstr : "I/O error");
    redis_conn_fail(be, cn, why); /* frees the context */
}

/* Is r the answer of a node that is not (or no longer) the primary? It
 * ran nothing: the command may go once more, to the primary. */
static bool redis_not_primary(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR &&
           (strncmp(r->str, "READONLY", 8) == 0 ||
            strncmp(r->str, "MASTERDOWN", 10) == 0);
}

/* Send one command and read its reply, and with acks, WAIT's after it
 * (replicas.c): the reply, or NULL when the context broke. */
static redisReply *redis_round_trip(struct redis_be *be,
                                    struct redis_conn *cn,
                                    int argc,
                                    const char **argv,
                                    const size_t *lens,
                                    long long *acks)
{
    if (acks == NULL)
        return redisCommandArgv(cn->ctx, argc, argv, lens);
    return redis_replicas_command(be, cn->ctx, argc, argv, lens, acks);
}

redisReply *redis_command(struct redis_be *be,
                          int argc,
                          const char **argv,
                          const size_t *lens)
{
    return redis_command_acked(be, argc, argv, lens, NULL);
}

/*
 * Run one command on this thread's connection: the reply (caller frees;
 * may be an error reply), or NULL when Redis is unavailable. A context the
 * server had closed is reopened and the command sent once more: each
 * command here is safe to repeat (acquire recognises its own token). So is
 * one answered READONLY or MASTERDOWN by a demoted primary: it ran nothing.
 */
redisReply *redis_command_acked(struct redis_be *be,
                                int argc,
                                const char **argv,
                                const size_t *lens,
                                long long *acks)
{
    struct redis_conn *cn = redis_conn_get(be);
    redisReply *r;
    bool reused;
    int saved;

    if (cn == NULL)
        return NULL;
    if (be->topology == REDIS_BE_CLUSTER) /* cluster.c: routed */
        return redis_cluster_command(be, cn, argc, argv, lens, acks);
    for (int attempt = 0; attempt < 2; attempt++) {
        reused = cn->ctx != NULL;
        if (redis_conn_ready(be, cn) != 0)
            return NULL;
        errno = 0;
        r = redis_round_trip(be, cn, argc, argv, lens, acks);
        saved = errno;
        if (r != NULL && cn->ctx->err == 0 &&
            be->topology == REDIS_BE_SENTINEL && redis_not_primary(r)) {
            redis_warn(be, "not the primary", r->str);
            redisFree(cn->ctx); /* dropped; the next dial checks ROLE */
            cn->ctx = NULL;
            redis_sentinel_lost(be);
            if (attempt == 0) {
                freeReplyObject(r);
                continue;
            }
            return r;
        }
        if (r != NULL && cn->ctx->err == 0) {
            cn->tc.backoff_ms = 0;
            redis_mark(be, 1, NULL);
            return r;
        }
        freeReplyObject(r);
        if (reused && attempt == 0 && redis_closed_by_peer(cn->ctx, saved)) {
            redisFree(cn->ctx);
            cn->ctx = NULL; /* reconnect at once, no backoff */
            continue;
        }
        redis_command_failed(be, cn, saved);
        return NULL;
    }
    return NULL;
}

/* ---- pipelined (batch.c) ---- */

/* A write or read of a pipeline failed with errno saved: the context is
 * dropped, with no back-off if the server had closed it (*closed). */
static void
pipe_failed(struct redis_be *be, struct redis_conn *cn, int saved, bool *closed)
{
    *closed = redis_closed_by_peer(cn->ctx, saved);
    if (*closed) { /* reopened by the next call, no back-off */
        redisFree(cn->ctx);
        cn->ctx = NULL;
        return;
    }
    redis_command_failed(be, cn, saved);
}

int redis_pipe_send(struct redis_be *be, struct redis_conn *cn, bool *closed)
{
    int done = 0;

    *closed = false;
    do {
        errno = 0;
        if (redisBufferWrite(cn->ctx, &done) != REDIS_OK) {
            pipe_failed(be, cn, errno, closed);
            return -1;
        }
    } while (!done);
    return 0;
}

redisReply *redis_pipe_reply(struct redis_be *be,
                             struct redis_conn *cn,
                             int64_t deadline_ms,
                             bool *closed)
{
    void *r = NULL;

    *closed = false;
    for (;;) {
        struct pollfd p = { .fd = cn->ctx->fd, .events = POLLIN };
        int64_t left;
        int n;

        if (redisGetReplyFromReader(cn->ctx, &r) != REDIS_OK)
            break;
        if (r != NULL) {
            cn->tc.backoff_ms = 0;
            redis_mark(be, 1, NULL);
            return r;
        }
        /* the whole batch keeps to one command's timeout */
        left = deadline_ms - clock_mono_ms();
        n = left > 0 ? poll(&p, 1, (int)left) : 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            redis_conn_fail(be, cn, "command timed out");
            return NULL;
        }
        errno = 0;
        if (redisBufferRead(cn->ctx) != REDIS_OK) {
            pipe_failed(be, cn, errno, closed);
            return NULL;
        }
    }
    redis_command_failed(be, cn, 0); /* the reply could not be parsed */
    return NULL;
}
