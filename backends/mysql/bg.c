/*
 * backends/mysql/bg.c - the MySQL adapter's background thread, one per
 * open store. Every MYSQL_BE_WATCH_EVERY_MS it reads the event table and
 * notifies this instance's waiters of every key released through any
 * instance; every MYSQL_BE_REAP_EVERY_MS it deletes expired holder rows
 * (one key per transaction, its key row locked first as every operation
 * does), expired key rows, old events and old fence rows, in small batches
 * so that no statement holds locks for long. Its state (watch_last, trim_id,
 * fence_floor) is its own; it shares only the connection code (conn.c) with the
 * operations.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <errmsg.h>

#include "backends/mysql/mysql_int.h"
#include "lib/clock.h"
#include "lib/metrics.h"

/* Keys with expired rows, found by REAP_FIND (holder rows) or REAP (key
 * rows) without a lock, for one round. */
struct mysql_bg_keys {
    enum mysql_stmt_id find;
    char key[LOCK_KEY_MAX];
    unsigned long klen;
    my_bool nulls[1], trunc;
    size_t n;
    char (*keys)[LOCK_KEY_MAX]; /* owned: MYSQL_BE_REAP_BATCH of them */
    unsigned long *lens;        /* owned */
};

static void mysql_bg_key_row(void *arg)
{
    struct mysql_bg_keys *k = arg;

    if (k->nulls[0] || k->klen < 1 || k->klen > LOCK_KEY_MAX ||
        k->n >= MYSQL_BE_REAP_BATCH)
        return;
    for (size_t i = 0; i < k->n; i++) /* one key, several holders */
        if (k->lens[i] == k->klen && memcmp(k->keys[i], k->key, k->klen) == 0)
            return;
    memcpy(k->keys[k->n], k->key, k->klen);
    k->lens[k->n++] = k->klen;
}

static enum mysql_attempt
mysql_bg_find_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    struct mysql_bg_keys *k = arg;
    uint64_t batch = MYSQL_BE_REAP_BATCH;
    MYSQL_BIND p[1], r[1];
    unsigned err;

    k->n = 0;
    mysql_bind_u64(&p[0], &batch);
    mysql_bind_out_bytes(&r[0], k->key, sizeof(k->key), &k->klen, &k->nulls[0],
                         &k->trunc);
    err = mysql_conn_rows(c, k->find, p, r, mysql_bg_key_row, k);
    if (err != 0)
        return mysql_conn_failed(c, err);
    mysql_conn_rollback(c);
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

/* One key's expired holders (and its row, if none is left live), the key
 * row locked first as every operation does; deleted: holder rows gone. */
struct mysql_bg_one {
    const char *key;
    unsigned long klen;
    uint64_t deleted;
};

static enum mysql_attempt mysql_bg_reap_key_attempt(struct mysql_conn *c,
                                                    void *arg,
                                                    enum backend_result *res)
{
    struct mysql_bg_one *o = arg;
    MYSQL_BIND p[1];
    unsigned long klen;
    struct mysql_run_info info;
    unsigned err;
    enum mysql_attempt done;

    mysql_bind_bytes(&p[0], o->key, o->klen, &klen);
    done = mysql_key_lock(c, p, NULL);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    err = mysql_conn_run(c, MYSQL_ST_REAP_KEY, p, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    o->deleted = info.affected;
    err = mysql_conn_run(c, MYSQL_ST_KEY_DROP, p, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    done = mysql_conn_commit(c);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

/* Expired rows of up to MYSQL_BE_REAP_BATCH keys found by statement
 * find, each key in its own transaction. *found: the keys found (a full
 * batch: more). */
static int mysql_bg_reap_keys(struct mysql_be *be,
                              enum mysql_stmt_id find,
                              uint64_t *found)
{
    struct mysql_bg_keys k = { .find = find };
    int rc = -1;

    *found = 0;
    k.keys = malloc(sizeof(*k.keys) * MYSQL_BE_REAP_BATCH);
    k.lens = malloc(sizeof(*k.lens) * MYSQL_BE_REAP_BATCH);
    if (k.keys == NULL || k.lens == NULL)
        goto out;
    if (mysql_run_op(be, mysql_bg_find_attempt, &k) != BACKEND_OK)
        goto out;
    for (size_t i = 0; i < k.n; i++) {
        struct mysql_bg_one o = { k.keys[i], k.lens[i], 0 };
        if (mysql_run_op(be, mysql_bg_reap_key_attempt, &o) != BACKEND_OK)
            goto out;
        if (o.deleted > 0)
            metrics_lock_expired(o.deleted);
    }
    *found = k.n;
    rc = 0;
out:
    free(k.keys);
    free(k.lens);
    return rc;
}

/* The first poll only learns where the events stand. */
static enum mysql_attempt mysql_bg_watch_prime(struct mysql_conn *c,
                                               enum backend_result *res)
{
    struct mysql_be *be = c->be;
    uint64_t id = 0;
    my_bool is_null = 0;
    MYSQL_BIND r[1];
    struct mysql_run_info info;
    unsigned err;

    mysql_bind_u64(&r[0], &id);
    r[0].is_null = &is_null;
    err = mysql_conn_run(c, MYSQL_ST_EVENT_TOP, NULL, r, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    mysql_conn_rollback(c);
    be->watch_last = info.found && !is_null ? id : 0;
    be->watch_primed = true;
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

/* Notifies every key released (through any instance) since the last
 * event seen; *arg is the number of events read. */
static enum mysql_attempt mysql_bg_watch_attempt(struct mysql_conn *c,
                                                 void *arg,
                                                 enum backend_result *res)
{
    struct mysql_be *be = c->be;
    uint64_t *count = arg;
    uint64_t after = be->watch_last, limit = MYSQL_BE_WATCH_BATCH, id = 0;
    char key[LOCK_KEY_MAX];
    unsigned long klen = 0;
    my_bool nulls[2] = { 0, 0 }, trunc = 0;
    MYSQL_BIND p[2], r[2];
    MYSQL_STMT *st;
    unsigned err = 0;
    int rc;

    *count = 0;
    if (!be->watch_primed)
        return mysql_bg_watch_prime(c, res);
    st = mysql_conn_stmt(c, MYSQL_ST_EVENTS, &err);
    if (st == NULL)
        return mysql_conn_failed(c, err);
    mysql_bind_u64(&p[0], &after);
    mysql_bind_u64(&p[1], &limit);
    mysql_bind_u64(&r[0], &id);
    r[0].is_null = &nulls[0];
    mysql_bind_out_bytes(&r[1], key, sizeof(key), &klen, &nulls[1], &trunc);
    if (mysql_stmt_bind_param(st, p) != 0 || mysql_stmt_execute(st) != 0 ||
        mysql_stmt_bind_result(st, r) != 0 ||
        mysql_stmt_store_result(st) != 0) {
        err = mysql_stmt_errno(st);
        mysql_stmt_free_result(st);
        return mysql_conn_failed(c, err != 0 ? err : CR_UNKNOWN_ERROR);
    }
    while ((rc = mysql_stmt_fetch(st)) == 0 || rc == MYSQL_DATA_TRUNCATED) {
        if (nulls[0] || id <= be->watch_last)
            continue;
        be->watch_last = id;
        (*count)++;
        /* keys were written by releases, so hold 1..LOCK_KEY_MAX bytes */
        if (!nulls[1] && klen >= 1 && klen <= sizeof(key) &&
            be->hooks.notify != NULL)
            be->hooks.notify(be->hooks.arg, key, klen);
    }
    mysql_stmt_free_result(st);
    mysql_conn_rollback(c);
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

/* Once a reap round: events not seen for MYSQL_BE_EVENTS_KEEP_MS go, and a
 * sequence that went back (tables made again) is followed. */
static enum mysql_attempt
mysql_bg_trim_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    struct mysql_be *be = c->be;
    uint64_t *deleted = arg, top = 0, batch = MYSQL_BE_REAP_BATCH * 10;
    my_bool is_null = 0;
    MYSQL_BIND p[2], r[1];
    struct mysql_run_info info;
    unsigned err;
    enum mysql_attempt done;
    int64_t now = clock_mono_ms();

    *deleted = 0;
    mysql_bind_u64(&r[0], &top);
    r[0].is_null = &is_null;
    err = mysql_conn_run(c, MYSQL_ST_EVENT_TOP, NULL, r, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (info.found && !is_null && top < be->watch_last)
        be->watch_last = top;
    if (be->trim_id > 0 && now >= be->trim_at_ms) {
        mysql_bind_u64(&p[0], &be->trim_id);
        mysql_bind_u64(&p[1], &batch);
        err = mysql_conn_run(c, MYSQL_ST_EVENT_TRIM, p, NULL, &info);
        if (err != 0)
            return mysql_conn_failed(c, err);
        *deleted = info.affected;
    }
    done = mysql_conn_commit(c);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    if (*deleted < batch && now >= be->trim_at_ms) {
        be->trim_id = be->watch_last;
        be->trim_at_ms = now + MYSQL_BE_EVENTS_KEEP_MS;
    }
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

/* Deletes up to MYSQL_BE_FENCE_BATCH fence rows below the highest one
 * seen a round earlier (whose grant has long committed or rolled back);
 * *arg is the number deleted. The highest row always stays. */
static enum mysql_attempt mysql_bg_fence_trim_attempt(struct mysql_conn *c,
                                                      void *arg,
                                                      enum backend_result *res)
{
    struct mysql_be *be = c->be;
    uint64_t *deleted = arg, top = 0, batch = MYSQL_BE_FENCE_BATCH;
    my_bool is_null = 0;
    MYSQL_BIND p[2], r[1];
    struct mysql_run_info info;
    unsigned err;
    enum mysql_attempt done;

    *deleted = 0;
    mysql_bind_u64(&r[0], &top);
    r[0].is_null = &is_null;
    err = mysql_conn_run(c, MYSQL_ST_FENCE_TOP, NULL, r, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (!info.found || is_null)
        top = 0;               /* no rows */
    if (top < be->fence_floor) /* the table was made again */
        be->fence_floor = top;
    if (be->fence_floor > 0) {
        mysql_bind_u64(&p[0], &be->fence_floor);
        mysql_bind_u64(&p[1], &batch);
        err = mysql_conn_run(c, MYSQL_ST_FENCE_TRIM, p, NULL, &info);
        if (err != 0)
            return mysql_conn_failed(c, err);
        *deleted = info.affected;
    }
    done = mysql_conn_commit(c);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    if (*deleted < batch)
        be->fence_floor = top; /* caught up: next round, up to here */
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

/* One reap round, within MYSQL_BE_REAP_BUDGET_MS per kind of row. */
static void mysql_bg_reap(struct mysql_be *be)
{
    int64_t t0 = clock_mono_ms();
    uint64_t deleted;

    do { /* holders expired one by one */
        if (mysql_bg_reap_keys(be, MYSQL_ST_REAP_FIND, &deleted) != 0)
            return;
    } while (deleted == MYSQL_BE_REAP_BATCH &&
             clock_mono_ms() - t0 < MYSQL_BE_REAP_BUDGET_MS);
    do { /* key rows whose holders are all gone (or locks of an older
            lockd) */
        if (mysql_bg_reap_keys(be, MYSQL_ST_REAP, &deleted) != 0)
            return;
    } while (deleted == MYSQL_BE_REAP_BATCH &&
             clock_mono_ms() - t0 < MYSQL_BE_REAP_BUDGET_MS);
    (void)mysql_run_op(be, mysql_bg_trim_attempt, &deleted);
    do {
        deleted = 0;
        if (mysql_run_op(be, mysql_bg_fence_trim_attempt, &deleted) !=
            BACKEND_OK)
            return;
    } while (deleted == MYSQL_BE_FENCE_BATCH &&
             clock_mono_ms() - t0 < MYSQL_BE_REAP_BUDGET_MS);
}

/* The thread: polls the event table every MYSQL_BE_WATCH_EVERY_MS, reaps
 * every MYSQL_BE_REAP_EVERY_MS, until mysql_bg_stop(). */
static void *mysql_bg_main(void *arg)
{
    struct mysql_be *be = arg;
    int64_t next_reap = clock_deadline_ms(MYSQL_BE_REAP_EVERY_MS);

    pthread_mutex_lock(&be->mu);
    while (!be->stop) {
        int64_t wake = clock_deadline_ms(MYSQL_BE_WATCH_EVERY_MS);
        while (!be->stop &&
               clock_cond_wait_until(&be->cond, &be->mu, wake) != ETIMEDOUT)
            ;
        if (be->stop)
            break;
        pthread_mutex_unlock(&be->mu);

        uint64_t n;
        do { /* a full batch: more are waiting */
            n = 0;
            if (mysql_run_op(be, mysql_bg_watch_attempt, &n) != BACKEND_OK)
                break;
        } while (n == MYSQL_BE_WATCH_BATCH);
        if (clock_mono_ms() >= next_reap) {
            mysql_bg_reap(be);
            next_reap = clock_deadline_ms(MYSQL_BE_REAP_EVERY_MS);
        }

        pthread_mutex_lock(&be->mu);
    }
    pthread_mutex_unlock(&be->mu);
    return NULL;
}

int mysql_bg_start(struct mysql_be *be)
{
    if (pthread_create(&be->bg, NULL, mysql_bg_main, be) != 0)
        return -1;
    be->bg_started = true;
    return 0;
}

void mysql_bg_stop(struct mysql_be *be)
{
    if (!be->bg_started)
        return;
    pthread_mutex_lock(&be->mu);
    be->stop = true;
    pthread_cond_signal(&be->cond);
    pthread_mutex_unlock(&be->mu);
    pthread_join(be->bg, NULL); /* its key destructor ran */
    be->bg_started = false;
}
