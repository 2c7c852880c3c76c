/*
 * backends/redis/queue.c - the waiter queue of the Redis adapter, from
 * lockd's side: a waiter's place (its id in a key's queue in Redis and
 * when its wait runs out), taking a place out again (cancel.lua), and the
 * cancels that failed while Redis was away, kept to retry so a dead place
 * does not hold a free key from everyone else until its deadline. The
 * queue itself lives in Redis (see redis.c): FIFO across every instance.
 */
#include "backends/redis/redis_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"

/* ---- a waiter's place ---- */

struct redis_wait *redis_wait_get(struct redis_be *be, struct lock_waiter *w)
{
    struct redis_wait *bw = w->be_data;

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

int64_t redis_wait_left(const struct redis_wait *bw)
{
    int64_t left = bw->end_ms - clock_mono_ms();

    return left > 0 ? left : 0;
}

void redis_wait_free(struct lock_waiter *w)
{
    free(w->be_data);
    w->be_data = NULL;
}

int redis_cancel_run(struct redis_be *be,
                     const char *key,
                     size_t key_len,
                     const char *id)
{
    struct redis_args a;
    redisReply *r;

    redis_arg_key(be, &a, REDIS_BE_CAN_QUEUE, "fifo:", key, key_len);
    redis_arg_key(be, &a, REDIS_BE_CAN_DEADLINES, "qdl:", key, key_len);
    redis_arg_key(be, &a, REDIS_BE_CAN_LOCK, "lock:", key, key_len);
    redis_arg_key(be, &a, REDIS_BE_CAN_MWAIT, "mwait:", key, key_len);
    redis_arg(&a, REDIS_BE_CAN_WAITER, id, strlen(id));
    redis_arg(&a, REDIS_BE_CAN_CHANNEL, be->channel, strlen(be->channel));
    redis_arg(&a, REDIS_BE_CAN_KEY, key, key_len);
    r = redis_script_run(be, REDIS_BE_SCRIPT_CANCEL, &a);
    if (r == NULL)
        return -1;
    freeReplyObject(r);
    return 0;
}

/* ---- failed cancels ---- */

/* Past the bound (or out of memory) the place waits for its deadline, as
 * it would without the list. */
void redis_trash_add(struct redis_be *be,
                     const char *key,
                     size_t key_len,
                     const char *id,
                     int64_t until_ms)
{
    struct redis_trash *t = malloc(sizeof(*t) + key_len);

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
        redis_warn(be, "cancel", "too many failed cancels to retry");
        free(t);
    }
}

static bool redis_trash_any(struct redis_be *be)
{
    bool any;

    pthread_mutex_lock(&be->lock);
    any = be->trash != NULL;
    pthread_mutex_unlock(&be->lock);
    return any;
}

/* Put t and the rest of its list back on be's, within the bound. */
static void redis_trash_putback(struct redis_be *be, struct redis_trash *t)
{
    struct redis_trash *next;

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
}

/*
 * Retry the failed cancels, on this thread's own connection, until one
 * fails again: that one and the rest go back on the list. Those whose
 * place Redis has dropped by itself by now are forgotten.
 */
static void redis_trash_empty(struct redis_be *be)
{
    struct redis_trash *t, *next;

    pthread_mutex_lock(&be->lock);
    t = be->trash;
    be->trash = NULL;
    be->ntrash = 0;
    pthread_mutex_unlock(&be->lock);
    for (; t != NULL; t = next) {
        next = t->next;
        if (clock_mono_ms() > t->until_ms ||
            redis_cancel_run(be, t->key, t->key_len, t->id) == 0) {
            free(t);
            continue;
        }
        redis_trash_putback(be, t); /* away again */
        return;
    }
}

void redis_trash_tick(struct redis_be *be, int64_t *last_ms)
{
    int64_t now = clock_mono_ms();

    if (now - *last_ms < REDIS_BE_TRASH_EVERY_MS)
        return;
    *last_ms = now;
    if (redis_trash_any(be))
        redis_trash_empty(be);
}

void redis_trash_free(struct redis_be *be)
{
    while (be->trash != NULL) {
        struct redis_trash *t = be->trash;
        be->trash = t->next;
        free(t);
    }
    be->ntrash = 0;
}
