/*
 * backends/mysql/mysql.c - lock store on MySQL or MariaDB (MariaDB
 * Connector/C): the ops table, open() and close(), and each operation as
 * the steps of its transaction. What the other files of the adapter hold
 * is listed in mysql_int.h.
 *
 * One row per held lock, keyed by the exact key bytes; every
 * check-and-change is one short InnoDB transaction at READ COMMITTED on
 * prepared statements; every expiry is judged by the database's clock
 * (NOW(3)), never lockd's. Fences are AUTO_INCREMENT ids of a fence table,
 * inserted inside each granting transaction after the key's row is locked
 * (the counter's lock ends with the INSERT, not at commit), so the rows of
 * free keys can be deleted (by release, and by the background thread for
 * expired ones) without a fence ever going back.
 * Every release also appends the key to an event table, in commit order
 * (ids from a second sequence row); the background thread of each instance
 * polls it and notifies its waiters. Expiries need no event: a waiter is
 * retried when the holder's TTL runs out (retry_ms).
 * One connection per thread, under a pthread key; no waiting queue in the
 * store (FIFO within an instance).
 *
 * Keys, tokens and owners reach the operations already checked by the
 * wrappers of backends/backend.c (backend_key_ok: 1..LOCK_KEY_MAX bytes of
 * UTF-8, NUL-terminated; owners of at most LOCK_OWNER_MAX bytes), so none
 * is checked again here.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/mysql/mysql_int.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "lib/metrics.h"

/* mysql_acquire_attempt()'s and mysql_renew_attempt()'s argument through
 * mysql_run_op() */
struct mysql_grant_arg {
    const struct lock_req *req;
    struct lock_grant *out;
};

/* Steps 2 and 3 of a grant, under the key's row lock (key: the key's
 * bind): the next fence, written into the row; *expires, the expiry read
 * back. MYSQL_ATTEMPT_DONE when the grant may go on to its commit. */
static enum mysql_attempt mysql_acquire_fence(struct mysql_conn *c,
                                              const MYSQL_BIND *key,
                                              uint64_t *fence,
                                              int64_t *expires)
{
    MYSQL_BIND q[2] = { *key, *key };
    struct mysql_run_info info;
    unsigned err;

    /* 2. the next fence, allocated under the key's row lock: after the
       commit of every earlier grant of this key, so above its fence.
       AUTO_INCREMENT's lock is not held to the commit. */
    err = mysql_conn_run(c, MYSQL_ST_FENCE_NEW, NULL, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    *fence = info.insert_id;
    if (*fence == 0 || *fence > LOCK_FENCE_MAX) {
        log_error("mysql: fence counter %s_fence is exhausted", c->be->table);
        mysql_conn_rollback(c);
        return MYSQL_ATTEMPT_FAILED;
    }

    /* 3. write the fence; LAST_INSERT_ID() brings the expiry back */
    mysql_bind_u64(&q[0], fence);
    err = mysql_conn_run(c, MYSQL_ST_ACQ_FENCE, q, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (info.affected != 1 || info.insert_id == 0) { /* cannot happen */
        log_error("mysql: the granted row of a key is gone before commit");
        mysql_conn_rollback(c);
        return MYSQL_ATTEMPT_FAILED;
    }
    *expires = (int64_t)info.insert_id;
    return MYSQL_ATTEMPT_DONE;
}

static enum mysql_attempt
mysql_acquire_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    struct mysql_grant_arg *a = arg;
    const struct lock_req *req = a->req;
    MYSQL_BIND p[5];
    unsigned long klen, tlen, olen;
    uint64_t fence = 0, ttl = req->ttl_ms;
    int64_t expires = 0;
    struct mysql_run_info info;
    unsigned err;
    enum mysql_attempt done;
    bool took_over;

    mysql_bind_bytes(&p[0], req->key, req->key_len, &klen);
    mysql_bind_bytes(&p[1], req->token, strlen(req->token), &tlen);
    if (req->owner != NULL)
        mysql_bind_bytes(&p[2], req->owner, strlen(req->owner), &olen);
    else
        mysql_bind_null(&p[2]);
    mysql_bind_u64(&p[3], &ttl);
    mysql_bind_u64(&p[4], &ttl);

    /* 1. lock the key's row (inserting it, or taking over an expired one)
       in one statement, judged by the database's clock; a racing acquire
       of the same key waits here for our commit */
    err = mysql_conn_run(c, MYSQL_ST_ACQ_UPSERT, p, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (info.insert_id != 0) { /* held: LAST_INSERT_ID() is its TTL left */
        mysql_conn_rollback(c);
        a->out->retry_ms = info.insert_id;
        *res = BACKEND_HELD;
        return MYSQL_ATTEMPT_DONE;
    }
    /* 1 = inserted, 2 = an expired row taken over (the connection counts
       found rows, but a held row, the only unchanged one, is dealt with) */
    took_over = info.affected == 2;

    /* 2. and 3. */
    done = mysql_acquire_fence(c, &p[0], &fence, &expires);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;

    /* 4. commit: only now is the lock granted */
    done = mysql_conn_commit(c);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    if (took_over)
        metrics_lock_expired(1);
    a->out->fence = fence;
    a->out->ttl_ms = ttl;
    a->out->expires_at_ms = expires;
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

/* After a renew or release matched nothing: is the key held by anyone?
 * Then it is not ours (MISMATCH); else NOT_FOUND. Ends the transaction. */
static enum mysql_attempt mysql_settle_unmatched(struct mysql_conn *c,
                                                 const struct lock_req *req,
                                                 enum backend_result *res)
{
    MYSQL_BIND p[1], r[1];
    unsigned long klen;
    int64_t one;
    my_bool one_null = 0;
    struct mysql_run_info info;
    unsigned err;

    mysql_bind_bytes(&p[0], req->key, req->key_len, &klen);
    mysql_bind_i64(&r[0], &one, &one_null);
    err = mysql_conn_run(c, MYSQL_ST_HELD, p, r, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    mysql_conn_rollback(c);
    *res = info.found ? BACKEND_MISMATCH : BACKEND_NOT_FOUND;
    return MYSQL_ATTEMPT_DONE;
}

static enum mysql_attempt
mysql_renew_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    struct mysql_grant_arg *a = arg;
    const struct lock_req *req = a->req;
    MYSQL_BIND p[4], r[3];
    unsigned long klen, tlen;
    uint64_t ttl = req->ttl_ms, fence = 0, ttl_now = 0;
    int64_t expires = 0;
    my_bool nulls[3] = { 0, 0, 0 };
    struct mysql_run_info info;
    unsigned err;
    enum mysql_attempt done;

    if (ttl == 0) { /* keep the TTL the lock last ran with */
        mysql_bind_null(&p[0]);
        mysql_bind_null(&p[1]);
    } else {
        mysql_bind_u64(&p[0], &ttl);
        mysql_bind_u64(&p[1], &ttl);
    }
    mysql_bind_bytes(&p[2], req->key, req->key_len, &klen);
    mysql_bind_bytes(&p[3], req->token, strlen(req->token), &tlen);
    err = mysql_conn_run(c, MYSQL_ST_RENEW, p, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (info.affected == 0)
        return mysql_settle_unmatched(c, req, res);

    /* the row is ours and locked until COMMIT */
    mysql_bind_u64(&r[0], &fence);
    r[0].is_null = &nulls[0];
    mysql_bind_u64(&r[1], &ttl_now);
    r[1].is_null = &nulls[1];
    mysql_bind_i64(&r[2], &expires, &nulls[2]);
    err = mysql_conn_run(c, MYSQL_ST_RENEW_READ, &p[2], r, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (!info.found) { /* cannot happen under the row lock */
        mysql_conn_rollback(c);
        return MYSQL_ATTEMPT_FAILED;
    }
    done = mysql_conn_commit(c);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    a->out->fence = fence;
    a->out->ttl_ms = ttl_now;
    a->out->expires_at_ms = expires;
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

static enum mysql_attempt
mysql_release_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    const struct lock_req *req = arg;
    MYSQL_BIND p[2];
    unsigned long klen, tlen;
    uint64_t id;
    struct mysql_run_info info;
    unsigned err;
    enum mysql_attempt done;

    mysql_bind_bytes(&p[0], req->key, req->key_len, &klen);
    mysql_bind_bytes(&p[1], req->token, strlen(req->token), &tlen);
    err = mysql_conn_run(c, MYSQL_ST_RELEASE, p, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (info.affected == 0)
        return mysql_settle_unmatched(c, req, res);

    /* tell the other instances: an event whose id is taken under the
       sequence row's lock, so ids become visible in order, without gaps */
    err = mysql_conn_run(c, MYSQL_ST_EVENT_BUMP, NULL, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (info.affected != 1) {
        atomic_store(&c->be->schema_ok, false);
        mysql_conn_rollback(c);
        return MYSQL_ATTEMPT_FAILED;
    }
    id = info.insert_id;
    mysql_bind_u64(&p[1], &id);
    {
        MYSQL_BIND q[2] = { p[1], p[0] };
        err = mysql_conn_run(c, MYSQL_ST_EVENT_ADD, q, NULL, &info);
    }
    if (err != 0)
        return mysql_conn_failed(c, err);
    done = mysql_conn_commit(c);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

struct mysql_inspect_arg {
    const char *key;
    size_t key_len;
    struct lock_info *out;
};

static enum mysql_attempt
mysql_inspect_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    struct mysql_inspect_arg *a = arg;
    MYSQL_BIND p[1], r[4];
    unsigned long klen, olen = 0;
    uint64_t fence = 0;
    int64_t expires = 0, left = 0;
    my_bool nulls[4] = { 0, 0, 0, 0 };
    my_bool trunc = 0;
    char owner[LOCK_OWNER_MAX + 1];
    struct mysql_run_info info;
    unsigned err;

    mysql_bind_bytes(&p[0], a->key, a->key_len, &klen);
    mysql_bind_u64(&r[0], &fence);
    r[0].is_null = &nulls[0];
    mysql_bind_i64(&r[1], &expires, &nulls[1]);
    mysql_bind_i64(&r[2], &left, &nulls[2]);
    mysql_bind_out_bytes(&r[3], owner, LOCK_OWNER_MAX, &olen, &nulls[3],
                         &trunc);
    err = mysql_conn_run(c, MYSQL_ST_INSPECT, p, r, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    mysql_conn_rollback(c);
    if (!info.found) {
        *res = BACKEND_NOT_FOUND;
        return MYSQL_ATTEMPT_DONE;
    }
    a->out->fence = fence;
    a->out->ttl_ms = left >= 1 ? (uint64_t)left : 1;
    a->out->expires_at_ms = expires;
    a->out->has_owner = !nulls[3];
    if (a->out->has_owner) {
        size_t n = olen < LOCK_OWNER_MAX ? olen : LOCK_OWNER_MAX;
        memcpy(a->out->owner, owner, n);
        a->out->owner[n] = '\0';
    }
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

static enum mysql_attempt
mysql_ping_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    (void)arg;
    if (mysql_ping(c->db) != 0) {
        mysql_conn_drop(c);
        return MYSQL_ATTEMPT_LOST;
    }
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

static enum mysql_attempt
mysql_count_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    int64_t *count = arg;
    MYSQL_BIND r[1];
    my_bool is_null = 0;
    struct mysql_run_info info;
    unsigned err;

    mysql_bind_i64(&r[0], count, &is_null);
    err = mysql_conn_run(c, MYSQL_ST_COUNT_HELD, NULL, r, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    mysql_conn_rollback(c);
    if (!info.found || is_null)
        *count = -1;
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

static void mysql_be_free_sql(char **sql, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(sql[i]);
}

static void mysql_be_close(struct backend *base)
{
    struct mysql_be *be = (struct mysql_be *)base;

    if (be == NULL)
        return;
    mysql_bg_stop(be);
    if (be->conns_made) /* threads still alive (this one, usually) keep a
                           connection: threadconn closes them all */
        threadconn_set_destroy(&be->conns);
    pthread_cond_destroy(&be->cond);
    pthread_mutex_destroy(&be->mu);
    mysql_be_free_sql(be->sql, MYSQL_ST_COUNT);
    mysql_be_free_sql(be->schema, MYSQL_SQL_SCHEMA_N);
    mysql_be_free_sql(be->probe, MYSQL_SQL_PROBE_N);
    mysql_be_free_sql(be->seed, MYSQL_SQL_SEED_N);
    free(be->host);
    free(be->user);
    if (be->password != NULL)
        explicit_bzero(be->password, strlen(be->password));
    free(be->password);
    free(be->database);
    free(be->socket);
    free(be->table);
    free(be);
}

/* Every statement of sql.c with be->table's names in: 0, or -1 when out
 * of memory. */
static int mysql_be_expand_sql(struct mysql_be *be)
{
    if (mysql_sql_expand_list(mysql_sql_stmts, MYSQL_ST_COUNT, be->table,
                              be->sql) != 0 ||
        mysql_sql_expand_list(mysql_sql_schema, MYSQL_SQL_SCHEMA_N, be->table,
                              be->schema) != 0 ||
        mysql_sql_expand_list(mysql_sql_probe, MYSQL_SQL_PROBE_N, be->table,
                              be->probe) != 0 ||
        mysql_sql_expand_list(mysql_sql_seed, MYSQL_SQL_SEED_N, be->table,
                              be->seed) != 0)
        return -1;
    return 0;
}

static enum backend_result mysql_be_open(const char *url,
                                         const struct backend_hooks *hooks,
                                         struct backend **out,
                                         char *errbuf,
                                         size_t errlen)
{
    struct mysql_be *be;
    enum backend_result r;

    *out = NULL;
    be = calloc(1, sizeof(*be));
    if (be == NULL)
        return BACKEND_NO_MEMORY;
    be->base.ops = &mysql_backend;
    if (hooks != NULL)
        be->hooks = *hooks;
    if (pthread_mutex_init(&be->mu, NULL) != 0) {
        free(be);
        return BACKEND_NO_MEMORY;
    }
    if (clock_cond_init(&be->cond) != 0) {
        pthread_mutex_destroy(&be->mu);
        free(be);
        return BACKEND_NO_MEMORY;
    }
    r = mysql_url_parse(be, url, errbuf, errlen);
    if (r != BACKEND_OK)
        goto fail;
    r = BACKEND_NO_MEMORY;
    if (mysql_be_expand_sql(be) != 0)
        goto fail;
    if (mysql_lib_ready() != 0) {
        log_error("mysql: cannot initialise the client library");
        goto fail;
    }
    if (threadconn_set_init(&be->conns, sizeof(struct mysql_conn),
                            mysql_conn_destroy, MYSQL_BE_BACKOFF_MIN_MS,
                            MYSQL_BE_BACKOFF_MAX_MS) != 0)
        goto fail;
    be->conns_made = true;
    if (mysql_bg_start(be) != 0)
        goto fail;
    *out = &be->base;
    return BACKEND_OK;
fail:
    mysql_be_close(&be->base);
    return r;
}

static enum backend_result mysql_be_acquire(struct backend *base,
                                            const struct lock_req *req,
                                            struct lock_grant *out)
{
    struct mysql_grant_arg a = { .req = req, .out = out };

    /* req->waiter is ignored: no queue in the store (no CAP_QUEUE) */
    return mysql_run_op((struct mysql_be *)base, mysql_acquire_attempt, &a);
}

static enum backend_result mysql_be_renew(struct backend *base,
                                          const struct lock_req *req,
                                          struct lock_grant *out)
{
    struct mysql_grant_arg a = { .req = req, .out = out };

    return mysql_run_op((struct mysql_be *)base, mysql_renew_attempt, &a);
}

static enum backend_result mysql_be_release(struct backend *base,
                                            const struct lock_req *req,
                                            struct lock_grant *out)
{
    struct mysql_be *be = (struct mysql_be *)base;
    /* mysql_run_op() only takes a void *: the request is not changed */
    enum backend_result r =
        mysql_run_op(be, mysql_release_attempt, (void *)(uintptr_t)req);
    (void)out; /* holds left: 0, set by the wrapper */

    if (r == BACKEND_OK && be->hooks.notify != NULL)
        be->hooks.notify(be->hooks.arg, req->key, req->key_len);
    return r;
}

static enum backend_result mysql_be_inspect(struct backend *base,
                                            const char *key,
                                            size_t key_len,
                                            struct lock_info *out)
{
    struct mysql_inspect_arg a = { .key = key, .key_len = key_len, .out = out };

    return mysql_run_op((struct mysql_be *)base, mysql_inspect_attempt, &a);
}

static enum backend_result mysql_be_ping(struct backend *base)
{
    return mysql_run_op((struct mysql_be *)base, mysql_ping_attempt, NULL);
}

static int64_t mysql_be_held_count(struct backend *base)
{
    int64_t count = -1;

    if (mysql_run_op((struct mysql_be *)base, mysql_count_attempt, &count) !=
        BACKEND_OK)
        return -1;
    return count;
}

/* No capability flags: no queue in the store (waiters wait in this
 * instance's FIFO). Releases through other instances still reach notify()
 * by the event table, and expiries need no notice: HELD's retry_ms is the
 * exact time. */
const struct backend_ops mysql_backend = {
    .scheme = "mysql",
    .caps = 0, /* waiters wait per instance; releases through other
                  instances arrive by the event table (bg.c), and HELD's
                  retry_ms is the holder's exact expiry */
    .open = mysql_be_open,
    .acquire = mysql_be_acquire,
    .renew = mysql_be_renew,
    .release = mysql_be_release,
    .inspect = mysql_be_inspect,
    .cancel_wait = NULL,
    .ping = mysql_be_ping,
    .held_count = mysql_be_held_count,
    .close = mysql_be_close,
};
