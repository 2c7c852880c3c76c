/*
 * backends/mysql/multi_holder.c - renew_multi() and release_multi() of the
 * MySQL adapter: one transaction each, over the keys' rows in ascending key
 * order (the lock order multi.c sets out), running renew()'s and
 * release()'s statements key by key. A renew that finds a key not held by
 * the token reads why for the rest of the keys and renews none; a release
 * writes the event rows of every key it released after its last key row,
 * in one bump of the event sequence.
 */
#include <stdatomic.h>
#include <string.h>

#include "backends/mysql/mysql_int.h"

/* MULTI_SETTLE's rows: what each key at or after a position is. */
struct mysql_multi_settle_rows {
    struct mysql_multi_arg *a;
    char key[LOCK_KEY_MAX];
    unsigned long klen;
    int64_t live, holds;
    my_bool nulls[3], trunc;
    enum backend_result st[LOCK_MULTI_MAX]; /* by req index: OK = held by
                                               the token */
};

static void mysql_multi_settle_row(void *arg)
{
    struct mysql_multi_settle_rows *sr = arg;
    size_t k;

    if (sr->nulls[0] || sr->klen > LOCK_KEY_MAX)
        return;
    k = mysql_multi_find(sr->a, sr->key, sr->klen);
    if (k == LOCK_MULTI_MAX)
        return;
    if (!sr->nulls[2])
        sr->st[k] = BACKEND_OK;
    else if (!sr->nulls[1] && sr->live != 0)
        sr->st[k] = BACKEND_MISMATCH;
    else
        sr->st[k] = BACKEND_NOT_FOUND;
}

/* The renew of the key at sorted position at matched nothing (the keys
 * before it were renewed): NOT_FOUND or MISMATCH for the first key in req
 * order the token does not hold, or AGAIN if it now holds them all. The
 * transaction is ended. */
static enum mysql_attempt mysql_multi_settle(struct mysql_conn *c,
                                             struct mysql_multi_arg *a,
                                             size_t at,
                                             enum backend_result *res)
{
    struct mysql_multi_settle_rows sr = { .a = a };
    MYSQL_BIND p[1 + LOCK_MULTI_MAX], r[3];
    unsigned long tlen, lens[LOCK_MULTI_MAX];
    unsigned err;

    for (size_t i = 0; i < a->req->n; i++) /* held, if before at */
        sr.st[a->ord[i]] = i < at ? BACKEND_OK : BACKEND_NOT_FOUND;
    mysql_bind_bytes(&p[0], a->req->token, strlen(a->req->token), &tlen);
    mysql_multi_bind_keys(a, at, &p[1], lens);
    mysql_bind_out_bytes(&r[0], sr.key, sizeof(sr.key), &sr.klen, &sr.nulls[0],
                         &sr.trunc);
    mysql_bind_i64(&r[1], &sr.live, &sr.nulls[1]);
    mysql_bind_i64(&r[2], &sr.holds, &sr.nulls[2]);
    err = mysql_conn_rows(c, MYSQL_ST_MULTI_SETTLE, p, r,
                          mysql_multi_settle_row, &sr);
    if (err != 0)
        return mysql_conn_failed(c, err);
    mysql_conn_rollback(c);
    for (size_t k = 0; k < a->req->n; k++) {
        if (sr.st[k] != BACKEND_OK) {
            a->out->bad = k;
            *res = sr.st[k];
            return MYSQL_ATTEMPT_DONE;
        }
    }
    return MYSQL_ATTEMPT_AGAIN; /* changed in between: read again */
}

/* MULTI_READ's rows: the renewed holders. */
struct mysql_multi_read_rows {
    struct mysql_multi_arg *a;
    char key[LOCK_KEY_MAX];
    unsigned long klen;
    uint64_t fence, ttl, mode;
    int64_t expires;
    my_bool nulls[5], trunc;
    size_t rows;
    bool shared[LOCK_MULTI_MAX]; /* by req index: the key is held shared */
};

static void mysql_multi_read_row(void *arg)
{
    struct mysql_multi_read_rows *rr = arg;
    struct lock_multi_grant *out = rr->a->out;
    size_t k;

    if (rr->nulls[0] || rr->klen > LOCK_KEY_MAX)
        return;
    k = mysql_multi_find(rr->a, rr->key, rr->klen);
    if (k == LOCK_MULTI_MAX)
        return;
    out->fences[k] = rr->fence;
    rr->shared[k] = rr->mode == LOCK_SHARED;
    if (rr->rows == 0 || rr->ttl < out->ttl_ms)
        out->ttl_ms = rr->ttl;
    if (rr->rows == 0 || rr->expires < out->expires_at_ms)
        out->expires_at_ms = rr->expires;
    rr->rows++;
}

/* Every key renewed: read the holders back, set the shared keys' expiry,
 * COMMIT. */
static enum mysql_attempt mysql_multi_renewed(struct mysql_conn *c,
                                              struct mysql_multi_arg *a,
                                              enum backend_result *res)
{
    struct mysql_multi_read_rows rr = { .a = a };
    MYSQL_BIND p[LOCK_MULTI_MAX + 1], r[5], key;
    unsigned long tlen, klen, lens[LOCK_MULTI_MAX];
    unsigned err;
    enum mysql_attempt done;

    mysql_multi_bind_keys(a, 0, p, lens);
    mysql_bind_bytes(&p[LOCK_MULTI_MAX], a->req->token, strlen(a->req->token),
                     &tlen);
    mysql_bind_out_bytes(&r[0], rr.key, sizeof(rr.key), &rr.klen, &rr.nulls[0],
                         &rr.trunc);
    mysql_bind_u64(&r[1], &rr.fence);
    mysql_bind_u64(&r[2], &rr.ttl);
    mysql_bind_i64(&r[3], &rr.expires, &rr.nulls[3]);
    mysql_bind_u64(&r[4], &rr.mode);
    err = mysql_conn_rows(c, MYSQL_ST_MULTI_READ, p, r, mysql_multi_read_row,
                          &rr);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (rr.rows != a->req->n) { /* cannot happen under the row locks */
        mysql_conn_rollback(c);
        return MYSQL_ATTEMPT_FAILED;
    }
    for (size_t i = 0; i < a->req->n; i++) {
        if (!rr.shared[a->ord[i]]) /* a shorter TTL may lower the key's */
            continue;
        mysql_multi_bind_key(a, i, &key, &klen);
        done = mysql_key_fix(c, &key);
        if (done != MYSQL_ATTEMPT_DONE)
            return done;
    }
    done = mysql_conn_commit(c);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    if (a->req->ttl_ms != 0)
        a->out->ttl_ms = a->req->ttl_ms;
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

enum mysql_attempt mysql_renew_multi_attempt(struct mysql_conn *c,
                                             void *arg,
                                             enum backend_result *res)
{
    struct mysql_multi_arg *a = arg;
    uint64_t ttl = a->req->ttl_ms, inc = 0;
    MYSQL_BIND p[8];
    unsigned long klen, tlen;
    struct mysql_run_info info;
    unsigned err;
    enum mysql_attempt done;

    memset(a->out, 0, sizeof(*a->out)); /* a retry starts afresh */
    mysql_bind_u64(&p[0], &inc);
    for (int i = 1; i <= 4; i++) { /* 0: each keeps the TTL it last had */
        if (ttl == 0)
            mysql_bind_null(&p[i]);
        else
            mysql_bind_u64(&p[i], &ttl);
    }
    mysql_bind_bytes(&p[6], a->req->token, strlen(a->req->token), &tlen);
    mysql_bind_u64(&p[7], &inc);
    for (size_t i = 0; i < a->req->n; i++) { /* renew()'s, key by key */
        if (mysql_multi_late(c, a))
            return MYSQL_ATTEMPT_FAILED;
        mysql_multi_bind_key(a, i, &p[5], &klen);
        done = mysql_key_lock(c, &p[5], NULL);
        if (done != MYSQL_ATTEMPT_DONE)
            return done;
        err = mysql_conn_run(c, MYSQL_ST_RENEW, p, NULL, &info);
        if (err != 0)
            return mysql_conn_failed(c, err);
        if (info.affected == 0)
            return mysql_multi_settle(c, a, i, res);
    }
    return mysql_multi_renewed(c, a, res);
}

/* Release every hold of the token on the key at sorted position i, if it
 * holds it: *gone set then. release()'s statements. */
static enum mysql_attempt mysql_multi_release_key(struct mysql_conn *c,
                                                  struct mysql_multi_arg *a,
                                                  size_t i,
                                                  bool *gone)
{
    uint64_t all = 1;
    MYSQL_BIND p[3], q[2], r[2];
    unsigned long klen, tlen;
    int64_t live = 0, holds = 0;
    my_bool nulls[2] = { 0, 0 };
    struct mysql_run_info info;
    unsigned err;
    enum mysql_attempt done;

    *gone = false;
    mysql_multi_bind_key(a, i, &p[0], &klen);
    mysql_bind_bytes(&p[1], a->req->token, strlen(a->req->token), &tlen);
    mysql_bind_u64(&p[2], &all);
    /* the common case: the exclusive holder, both rows at once */
    done = mysql_key_lock(c, &p[0], NULL);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    err = mysql_conn_run(c, MYSQL_ST_REL_X, p, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (info.affected > 0) {
        *gone = true;
        return MYSQL_ATTEMPT_DONE;
    }
    /* a shared holder, or none: under the rows' locks */
    q[0] = p[1];
    q[1] = p[0];
    mysql_bind_i64(&r[0], &live, &nulls[0]);
    mysql_bind_i64(&r[1], &holds, &nulls[1]);
    err = mysql_conn_run(c, MYSQL_ST_REL_LOCK, q, r, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (!info.found || nulls[1])
        return MYSQL_ATTEMPT_DONE; /* not the token's: untouched */
    *gone = true;
    return mysql_release_holder(c, p);
}

/* The released keys' event rows: ids from one bump, in key order. */
static enum mysql_attempt mysql_multi_events(struct mysql_conn *c,
                                             struct mysql_multi_arg *a,
                                             uint64_t count)
{
    MYSQL_BIND p[1], q[2];
    unsigned long klen;
    uint64_t id;
    struct mysql_run_info info;
    unsigned err;

    mysql_bind_u64(&p[0], &count);
    err = mysql_conn_run(c, MYSQL_ST_EVENT_BUMP_N, p, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (info.affected != 1 || info.insert_id < count) {
        atomic_store(&c->be->schema_ok, false);
        mysql_conn_rollback(c);
        return MYSQL_ATTEMPT_FAILED;
    }
    id = info.insert_id - count; /* the ids after it are ours */
    mysql_bind_u64(&q[0], &id);
    for (size_t i = 0; i < a->req->n; i++) {
        if (!a->out->released[a->ord[i]])
            continue;
        id++;
        mysql_multi_bind_key(a, i, &q[1], &klen);
        err = mysql_conn_run(c, MYSQL_ST_EVENT_ADD, q, NULL, &info);
        if (err != 0)
            return mysql_conn_failed(c, err);
    }
    return MYSQL_ATTEMPT_DONE;
}

enum mysql_attempt mysql_release_multi_attempt(struct mysql_conn *c,
                                               void *arg,
                                               enum backend_result *res)
{
    struct mysql_multi_arg *a = arg;
    uint64_t count = 0;
    enum mysql_attempt done;
    bool gone;

    memset(a->out, 0, sizeof(*a->out)); /* a retry starts afresh */
    for (size_t i = 0; i < a->req->n; i++) {
        if (mysql_multi_late(c, a))
            return MYSQL_ATTEMPT_FAILED;
        done = mysql_multi_release_key(c, a, i, &gone);
        if (done != MYSQL_ATTEMPT_DONE)
            return done;
        a->out->released[a->ord[i]] = gone;
        count += gone ? 1 : 0;
    }
    if (count == 0) {
        mysql_conn_rollback(c);
        *res = BACKEND_NOT_FOUND;
        return MYSQL_ATTEMPT_DONE;
    }
    /* after the last key row: the event sequence row comes later in the
       lock order than every key row */
    if (mysql_multi_late(c, a))
        return MYSQL_ATTEMPT_FAILED;
    done = mysql_multi_events(c, a, count);
    if (done == MYSQL_ATTEMPT_DONE)
        done = mysql_conn_commit(c);
    if (done != MYSQL_ATTEMPT_DONE) {
        memset(a->out->released, 0, sizeof(a->out->released));
        return done;
    }
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}
