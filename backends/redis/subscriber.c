/*
 * backends/redis/subscriber.c - the Redis adapter's subscriber thread: on
 * a connection of its own it listens on the release channel, so releases
 * made through other lockd instances wake this instance's waiters
 * (hooks.notify; hooks.notify_all each time it subscribes, for what it
 * may have missed), and it retries the failed cancels (queue.c) now and
 * then. Apart from the worker threads' connections (conn.c) because a
 * subscribed connection can do nothing but listen.
 */
#include "backends/redis/redis_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"

/* Sleep ms, or less when close() asks the thread to stop. */
static void redis_sub_sleep(struct redis_be *be, int64_t ms)
{
    int64_t deadline = clock_deadline_ms(ms);

    pthread_mutex_lock(&be->lock);
    while (!atomic_load(&be->stopping))
        if (clock_cond_wait_until(&be->sub_cond, &be->lock, deadline) != 0)
            break;
    pthread_mutex_unlock(&be->lock);
}

static void redis_sub_tried(struct redis_be *be)
{
    pthread_mutex_lock(&be->lock);
    be->sub_tried = true;
    pthread_cond_broadcast(&be->sub_cond);
    pthread_mutex_unlock(&be->lock);
}

/* One message from the channel: ["message", channel, key]. */
static void redis_sub_handle(struct redis_be *be, const redisReply *r)
{
    const redisReply *kind, *key;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3)
        return;
    kind = r->element[0];
    key = r->element[2];
    if (kind->type != REDIS_REPLY_STRING || kind->len != 7 ||
        memcmp(kind->str, "message", 7) != 0)
        return;
    /* from the wire, so checked: only a key lockd could have sent */
    if (key->type != REDIS_REPLY_STRING || key->len == 0 ||
        key->len > LOCK_KEY_MAX)
        return;
    if (be->hooks.notify != NULL)
        be->hooks.notify(be->hooks.arg, key->str, key->len);
}

/* Send PING on the subscribed context c: 0, or -1. */
static int redis_sub_ping(redisContext *c)
{
    const char *argv[] = { "PING" };
    size_t lens[] = { 4 };
    int done = 0;

    if (redisAppendCommandArgv(c, 1, argv, lens) != REDIS_OK)
        return -1;
    while (!done)
        if (redisBufferWrite(c, &done) != REDIS_OK)
            return -1;
    return 0;
}

/*
 * Read the subscription until it breaks or close() asks. Polls with a short
 * timeout so stopping is noticed; an idle link is checked with PING now and
 * then (a subscribed connection may PING) so a dead peer is noticed too.
 */
static void redis_sub_read(struct redis_be *be, redisContext *c, unsigned gen)
{
    int64_t last_rx = clock_mono_ms(), last_trash = 0;
    bool ping_out = false;

    while (!atomic_load(&be->stopping)) {
        redisReply *r = NULL;
        struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
        int n;

        /* sentinel: the primary changed; PUBLISHes go to the new one */
        if (be->topology == REDIS_BE_SENTINEL && redis_sentinel_gen(be) != gen)
            return;

        /* on another connection: this one only listens */
        redis_trash_tick(be, &last_trash);
        if (redisGetReplyFromReader(c, (void **)&r) != REDIS_OK)
            return;
        if (r != NULL) {
            redis_sub_handle(be, r);
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
        if (redis_sub_ping(c) != 0)
            return;
        ping_out = true;
        last_rx = clock_mono_ms();
    }
}

/* Dial and SUBSCRIBE: the subscribed context, or NULL (why in err). */
static redisContext *
redis_sub_dial(struct redis_be *be, char *err, size_t errlen)
{
    /* cluster mode: PUBLISH reaches every node; any one that answers */
    redisContext *c = be->topology == REDIS_BE_CLUSTER
                          ? redis_cluster_dial_any(be, err, errlen)
                          : redis_dial(be, err, errlen);
    const char *argv[] = { "SUBSCRIBE", be->channel };
    size_t lens[] = { 9, strlen(be->channel) };
    redisReply *r;

    if (c == NULL)
        return NULL;
    r = redisCommandArgv(c, 2, argv, lens);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "SUBSCRIBE: %s",
                 r != NULL && r->type == REDIS_REPLY_ERROR ? r->str
                                                           : c->errstr);
        freeReplyObject(r);
        redisFree(c);
        return NULL;
    }
    freeReplyObject(r);
    return c;
}

static void *redis_sub_main(void *arg)
{
    struct redis_be *be = arg;
    int64_t backoff = 0, last_trash = 0;
    char err[256];

    while (!atomic_load(&be->stopping)) {
        unsigned gen =
            be->topology == REDIS_BE_SENTINEL ? redis_sentinel_gen(be) : 0;
        redisContext *c = redis_sub_dial(be, err, sizeof(err));

        if (c != NULL) {
            log_debug("redis: subscribed to the release channel");
            redis_mark(be, 1, NULL);
            backoff = 0;
            redis_sub_tried(be);
            /* releases published while nobody here listened (before the
             * first SUBSCRIBE, or since the last one broke) were not
             * heard: every waiter tries again (BACKEND_CAP_NOTIFIES) */
            if (be->hooks.notify_all != NULL)
                be->hooks.notify_all(be->hooks.arg);
            redis_sub_read(be, c, gen);
            redisFree(c);
            if (!atomic_load(&be->stopping))
                log_debug("redis: release subscription lost; resubscribing");
        } else {
            redis_sub_tried(be);
            log_debug("redis: subscriber: %s", err);
        }
        backoff = threadconn_backoff_next(&be->conns, backoff);
        redis_sub_sleep(be, backoff);
        /* commands may work while SUBSCRIBE does not */
        if (!atomic_load(&be->stopping))
            redis_trash_tick(be, &last_trash);
    }
    return NULL;
}

/* Give the subscriber one attempt before open() returns, so that releases
 * through other instances are heard from the first request on; a Redis
 * that is down is not an error here. */
int redis_sub_start(struct redis_be *be)
{
    int64_t wait_ms = be->connect_ms + be->cmd_ms, deadline;

    if (pthread_create(&be->sub_thread, NULL, redis_sub_main, be) != 0)
        return -1;
    be->sub_started = true;
    deadline = clock_deadline_ms((wait_ms / 1000 + 1) * 1000);
    pthread_mutex_lock(&be->lock);
    while (!be->sub_tried)
        if (clock_cond_wait_until(&be->sub_cond, &be->lock, deadline) != 0)
            break;
    pthread_mutex_unlock(&be->lock);
    return 0;
}

void redis_sub_stop(struct redis_be *be)
{
    if (!be->sub_started)
        return;
    pthread_mutex_lock(&be->lock);
    atomic_store(&be->stopping, true);
    pthread_cond_broadcast(&be->sub_cond);
    pthread_mutex_unlock(&be->lock);
    pthread_join(be->sub_thread, NULL);
    be->sub_started = false;
}
