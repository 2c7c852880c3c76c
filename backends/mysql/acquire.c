/*
 * backends/mysql/acquire.c - acquire() of the MySQL adapter, in both modes,
 * each one short transaction that locks the key's row (@T) before it
 * reads or writes any of the key's holder rows (@H); see sql.c for the
 * tables. The exclusive path is four steps: lock-or-take the key row
 * (ACQ_UPSERT), a fence (FENCE_NEW), the holder row (ACQ_HOLDER), COMMIT;
 * on MariaDB one compound statement (ACQ_BLOCK) runs them in one round
 * trip, elsewhere (MySQL, compound=0) each is its own. The shared path reads
 * the key's holders under the row lock, reaps its expired ones and decides by
 * mode, limit and count. An Idempotency-Key is looked up among the key's live
 * holders whenever the key is held (a free key has no holder to replay). A
 * grant that finds expired holders (a takeover) reports the greatest of their
 * fences (lock_grant.expired_fence): the exclusive path with one more statement
 * (ACQ_EXPIRED), only when ACQ_UPSERT took over an existing row; the
 * shared path from ACQ_READ, which reads the holders anyway.
 */
#include <stdatomic.h>
#include <string.h>

#include "backends/mysql/mysql_int.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "lib/metrics.h"

/* The key's state as ACQ_READ reads it, under the key row's lock. */
struct mysql_key_state {
    uint64_t mode, lim;
    int64_t key_live;       /* the key row has not expired */
    int64_t live;           /* live holders */
    int64_t first_left;     /* ms until the first live holder expires */
    int64_t expired;        /* expired holder rows not yet reaped */
    int64_t key_left;       /* ms until the key row expires */
    uint64_t expired_fence; /* the greatest fence of the expired holders */
    my_bool first_null;
};

/* The live holder granted under req->idem_key, if any, answers again:
 * *res OK (replay) or IDEM_CONFLICT and the transaction ended; *hit false
 * when there is none (nothing ended). */
static enum mysql_attempt mysql_acquire_idem(struct mysql_conn *c,
                                             struct mysql_grant_arg *a,
                                             MYSQL_BIND *key,
                                             bool *hit,
                                             enum backend_result *res)
{
    const struct lock_req *req = a->req;
    struct lock_grant *out = a->out;
    MYSQL_BIND p[2] = { *key }, r[7];
    unsigned long ilen, tlen = 0;
    char token[LOCK_TOKEN_MAX + 1];
    uint64_t fence = 0, holds = 0, mode = 0, lim = 0;
    int64_t expires = 0, left = 0;
    my_bool nulls[7] = { 0 }, trunc = 0;
    struct mysql_run_info info;
    unsigned err;

    *hit = false;
    if (req->idem_key == NULL)
        return MYSQL_ATTEMPT_DONE;
    mysql_bind_bytes(&p[1], req->idem_key, strlen(req->idem_key), &ilen);
    mysql_bind_out_bytes(&r[0], token, LOCK_TOKEN_MAX, &tlen, &nulls[0],
                         &trunc);
    mysql_bind_u64(&r[1], &fence);
    mysql_bind_i64(&r[2], &expires, &nulls[2]);
    mysql_bind_i64(&r[3], &left, &nulls[3]);
    mysql_bind_u64(&r[4], &holds);
    mysql_bind_u64(&r[5], &mode);
    mysql_bind_u64(&r[6], &lim);
    err = mysql_conn_run(c, MYSQL_ST_IDEM, p, r, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (!info.found)
        return MYSQL_ATTEMPT_DONE;
    *hit = true;
    mysql_conn_rollback(c); /* nothing changes */
    if (mode != (uint64_t)req->mode ||
        (req->mode == LOCK_SHARED && lim != req->limit)) {
        *res = BACKEND_IDEM_CONFLICT;
        return MYSQL_ATTEMPT_DONE;
    }
    tlen = tlen < LOCK_TOKEN_MAX ? tlen : LOCK_TOKEN_MAX;
    memcpy(out->token, token, tlen);
    out->token[tlen] = '\0';
    out->replay = true;
    out->fence = fence;
    out->ttl_ms = left >= 1 ? (uint64_t)left : 1;
    out->expires_at_ms = expires;
    out->mode = mode == LOCK_SHARED ? LOCK_SHARED : LOCK_EXCLUSIVE;
    out->limit = mode == LOCK_SHARED ? (uint32_t)lim : 0;
    out->holds = (uint32_t)holds;
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

/* ACQ_READ into *st; found false when the key has no row. */
static enum mysql_attempt mysql_acquire_read(struct mysql_conn *c,
                                             MYSQL_BIND *key,
                                             struct mysql_key_state *st,
                                             bool *found)
{
    MYSQL_BIND r[8];
    my_bool nulls[8] = { 0 };
    struct mysql_run_info info;
    unsigned err;

    memset(st, 0, sizeof(*st));
    mysql_bind_u64(&r[0], &st->mode);
    mysql_bind_u64(&r[1], &st->lim);
    mysql_bind_i64(&r[2], &st->key_live, &nulls[2]);
    mysql_bind_i64(&r[3], &st->live, &nulls[3]);
    mysql_bind_i64(&r[4], &st->first_left, &st->first_null);
    mysql_bind_i64(&r[5], &st->expired, &nulls[5]);
    mysql_bind_i64(&r[6], &st->key_left, &nulls[6]);
    mysql_bind_u64(&r[7], &st->expired_fence);
    r[7].is_null = &nulls[7];
    err = mysql_conn_run(c, MYSQL_ST_ACQ_READ, key, r, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (nulls[7])
        st->expired_fence = 0;
    *found = info.found;
    return MYSQL_ATTEMPT_DONE;
}

/* The exclusive acquire found the key held (mode: the key's): an
 * Idempotency-Key replay, or HELD with the first holder's TTL left. */
static enum mysql_attempt mysql_acquire_held(struct mysql_conn *c,
                                             struct mysql_grant_arg *a,
                                             MYSQL_BIND *key,
                                             uint64_t mode,
                                             uint64_t left,
                                             enum backend_result *res)
{
    struct mysql_key_state st;
    enum mysql_attempt done;
    bool hit, found;

    done = mysql_acquire_idem(c, a, key, &hit, res);
    if (done != MYSQL_ATTEMPT_DONE || hit)
        return done;
    if (mode == LOCK_SHARED) { /* the first of its holders to expire */
        done = mysql_acquire_read(c, key, &st, &found);
        if (done != MYSQL_ATTEMPT_DONE)
            return done;
        if (found && !st.first_null && st.first_left > 0)
            left = (uint64_t)st.first_left;
    }
    mysql_conn_rollback(c);
    a->out->retry_ms = left;
    *res = BACKEND_HELD;
    return MYSQL_ATTEMPT_DONE;
}

/* An insert of the key row that found no stripe row: the stripes are
 * missing (tables made by hand without them); made again if we may. */
enum mysql_attempt mysql_acquire_no_stripe(struct mysql_conn *c)
{
    log_error("mysql: the stripe rows of %s_seq are missing", c->be->table);
    atomic_store(&c->be->schema_ok, false);
    mysql_conn_rollback(c);
    return MYSQL_ATTEMPT_FAILED;
}

/* A fence from the counter, taken under the key row's lock: after the
 * commit of every earlier grant of the key, so above its fence. */
enum mysql_attempt mysql_acquire_fence(struct mysql_conn *c, uint64_t *fence)
{
    struct mysql_run_info info;
    unsigned err;

    err = mysql_conn_run(c, MYSQL_ST_FENCE_NEW, NULL, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    *fence = info.insert_id;
    if (*fence == 0 || *fence > LOCK_FENCE_MAX) {
        log_error("mysql: fence counter %s_fence is exhausted", c->be->table);
        mysql_conn_rollback(c);
        return MYSQL_ATTEMPT_FAILED;
    }
    return MYSQL_ATTEMPT_DONE;
}

/* The greatest fence of the key's expired holders, which an exclusive
 * grant that took over the key's row leaves behind (the reaper deletes
 * them); 0 when there are none. Under the key row's lock. */
static enum mysql_attempt
mysql_acquire_expired(struct mysql_conn *c, MYSQL_BIND *key, uint64_t *fence)
{
    MYSQL_BIND r[1];
    my_bool is_null = 0;
    struct mysql_run_info info;
    unsigned err;

    *fence = 0;
    mysql_bind_u64(&r[0], fence);
    r[0].is_null = &is_null;
    err = mysql_conn_run(c, MYSQL_ST_ACQ_EXPIRED, key, r, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (!info.found || is_null)
        *fence = 0;
    return MYSQL_ATTEMPT_DONE;
}

/* The holder row's binds of ACQ_HOLDER and SH_HOLDER, in the order the
 * statement names them; idem may be NULL. */
static void mysql_bind_owner_idem(MYSQL_BIND *owner,
                                  MYSQL_BIND *idem,
                                  const struct lock_req *req,
                                  unsigned long *olen,
                                  unsigned long *ilen)
{
    if (req->owner != NULL)
        mysql_bind_bytes(owner, req->owner, strlen(req->owner), olen);
    else
        mysql_bind_null(owner);
    if (req->idem_key != NULL)
        mysql_bind_bytes(idem, req->idem_key, strlen(req->idem_key), ilen);
    else
        mysql_bind_null(idem);
}

/* Fill out with a committed grant; expired: the greatest fence of the
 * expired holders it took over (0: none). */
static void mysql_acquire_granted(struct mysql_grant_arg *a,
                                  uint64_t fence,
                                  int64_t expires,
                                  uint64_t expired,
                                  enum backend_result *res)
{
    a->out->fence = fence;
    a->out->ttl_ms = a->req->ttl_ms;
    a->out->expires_at_ms = expires;
    a->out->mode = a->req->mode;
    a->out->limit = a->req->mode == LOCK_SHARED ? a->req->limit : 0;
    a->out->holds = 1;
    a->out->expired_fence = expired;
    *res = BACKEND_OK;
}

/* Commit a grant and fill out (as mysql_acquire_granted()). */
static enum mysql_attempt mysql_acquire_done(struct mysql_conn *c,
                                             struct mysql_grant_arg *a,
                                             uint64_t fence,
                                             int64_t expires,
                                             uint64_t expired,
                                             enum backend_result *res)
{
    enum mysql_attempt done = mysql_conn_commit(c);

    if (done == MYSQL_ATTEMPT_DONE)
        mysql_acquire_granted(a, fence, expires, expired, res);
    return done;
}

/* The exclusive acquire as one compound statement (ACQ_BLOCK): the same
 * steps as mysql_acquire_exclusive(), in one round trip. A held key whose
 * answer needs more (a replay to look for, a shared holder's TTL) goes on
 * step by step in the transaction the block left open. */
static enum mysql_attempt mysql_acquire_block(struct mysql_conn *c,
                                              struct mysql_grant_arg *a,
                                              enum backend_result *res)
{
    const struct lock_req *req = a->req;
    MYSQL_BIND p[7], r[5];
    unsigned long klen, tlen, olen, ilen;
    uint64_t ttl = req->ttl_ms, stay = req->idem_key != NULL;
    uint64_t fence = 0, expired = 0;
    int64_t status = 0, held = 0, expires = 0, t0 = clock_mono_ms();
    int64_t until = mysql_conn_until(c, t0);
    my_bool nulls[5] = { 0 };
    unsigned err;

    mysql_bind_bytes(&p[0], req->key, req->key_len, &klen);
    mysql_bind_bytes(&p[1], req->token, strlen(req->token), &tlen);
    mysql_bind_owner_idem(&p[2], &p[3], req, &olen, &ilen);
    mysql_bind_u64(&p[4], &ttl);
    mysql_bind_u64(&p[5], &stay);
    mysql_bind_i64(&p[6], &until, NULL);
    mysql_bind_i64(&r[0], &status, &nulls[0]);
    mysql_bind_i64(&r[1], &held, &nulls[1]);
    mysql_bind_u64(&r[2], &fence);
    mysql_bind_i64(&r[3], &expires, &nulls[3]);
    mysql_bind_u64(&r[4], &expired);
    err = mysql_conn_block(c, MYSQL_ST_ACQ_BLOCK, p, r);
    if (err != 0)
        return mysql_block_failed(c, err);
    switch (status) {
    case MYSQL_BLOCK_DONE:
        mysql_acquire_granted(a, fence, expires, expired, res);
        return MYSQL_ATTEMPT_DONE;
    case MYSQL_BLOCK_OPEN: /* held: 2 * TTL left + mode, as ACQ_UPSERT */
        return mysql_acquire_held(c, a, &p[0], (uint64_t)held & 1,
                                  (uint64_t)held >> 1, res);
    case MYSQL_BLOCK_HELD:
        a->out->retry_ms = (uint64_t)held >> 1;
        *res = BACKEND_HELD;
        return MYSQL_ATTEMPT_DONE;
    case MYSQL_BLOCK_NO_STRIPE:
        return mysql_acquire_no_stripe(c);
    case MYSQL_BLOCK_TOO_LATE:
        return mysql_block_too_late(c, t0);
    case MYSQL_BLOCK_FENCE_OUT:
        log_error("mysql: fence counter %s_fence is exhausted", c->be->table);
        return MYSQL_ATTEMPT_FAILED;
    default:
        log_error("mysql: the granted row of a key is gone before commit");
        return MYSQL_ATTEMPT_FAILED;
    }
}

static enum mysql_attempt mysql_acquire_exclusive(struct mysql_conn *c,
                                                  struct mysql_grant_arg *a,
                                                  enum backend_result *res)
{
    const struct lock_req *req = a->req;
    MYSQL_BIND p[4], q[6];
    unsigned long klen, tlen, olen, ilen;
    uint64_t fence = 0, ttl = req->ttl_ms, expired = 0;
    struct mysql_run_info info;
    unsigned err;
    enum mysql_attempt done;

    mysql_bind_bytes(&p[0], req->key, req->key_len, &klen);
    mysql_bind_u64(&p[1], &ttl);
    mysql_bind_u64(&p[2], &ttl);
    p[3] = p[0]; /* its stripe */

    /* 1. lock the key's row (inserting it, or taking over a free one) in
       one statement, judged by the database's clock; a racing acquire of
       the same key waits here for our commit */
    err = mysql_conn_run(c, MYSQL_ST_ACQ_UPSERT, p, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (info.insert_id != 0) /* held: 2 * TTL left + mode */
        return mysql_acquire_held(c, a, &p[0], info.insert_id & 1,
                                  info.insert_id >> 1, res);
    if (info.affected == 0)
        return mysql_acquire_no_stripe(c);
    if (info.affected == 2) { /* an existing row, not live: taken over */
        done = mysql_acquire_expired(c, &p[0], &expired);
        if (done != MYSQL_ATTEMPT_DONE)
            return done;
    }

    /* 2. the fence; 3. the holder row, with the key row's expiry */
    done = mysql_acquire_fence(c, &fence);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    mysql_bind_bytes(&q[0], req->token, strlen(req->token), &tlen);
    mysql_bind_owner_idem(&q[1], &q[4], req, &olen, &ilen);
    mysql_bind_u64(&q[2], &fence);
    mysql_bind_u64(&q[3], &ttl);
    q[5] = p[0];
    err = mysql_conn_run(c, MYSQL_ST_ACQ_HOLDER, q, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (info.affected == 0 || info.insert_id == 0) { /* cannot happen */
        log_error("mysql: the granted row of a key is gone before commit");
        mysql_conn_rollback(c);
        return MYSQL_ATTEMPT_FAILED;
    }
    /* 4. commit: only now is the lock granted */
    return mysql_acquire_done(c, a, fence, (int64_t)info.insert_id, expired,
                              res);
}

/* Whether a shared request may join the holders st describes; *res set
 * (HELD, LIMIT_MISMATCH) when not. */
static bool mysql_shared_fits(const struct lock_req *req,
                              const struct mysql_key_state *st,
                              struct lock_grant *out,
                              enum backend_result *res)
{
    uint64_t first =
        !st->first_null && st->first_left > 0 ? (uint64_t)st->first_left : 0;

    if (st->live == 0 && st->key_live && st->mode == LOCK_EXCLUSIVE) {
        /* a lock of a lockd before lock kinds: its row is its holder */
        out->retry_ms = st->key_left > 0 ? (uint64_t)st->key_left : 0;
        *res = BACKEND_HELD;
        return false;
    }
    if (st->live == 0)
        return true; /* free: the limit is the request's */
    if (st->mode != LOCK_SHARED) {
        out->retry_ms = first;
        *res = BACKEND_HELD;
        return false;
    }
    if (st->lim != req->limit) {
        *res = BACKEND_LIMIT_MISMATCH;
        return false;
    }
    if (st->lim != 0 && (uint64_t)st->live >= st->lim) {
        out->retry_ms = first;
        *res = BACKEND_HELD;
        return false;
    }
    return true;
}

/* The shared grant, under the key row's lock: fence, holder row, then the
 * key row's mode, limit and expiry (the greatest of its holders'). */
static enum mysql_attempt mysql_shared_grant(struct mysql_conn *c,
                                             struct mysql_grant_arg *a,
                                             MYSQL_BIND *key,
                                             uint64_t expired,
                                             enum backend_result *res)
{
    const struct lock_req *req = a->req;
    MYSQL_BIND q[7], k[3];
    unsigned long tlen, olen, ilen;
    uint64_t fence = 0, ttl = req->ttl_ms, lim = req->limit;
    int64_t expires;
    struct mysql_run_info info;
    unsigned err;
    enum mysql_attempt done;

    done = mysql_acquire_fence(c, &fence);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    q[0] = *key;
    mysql_bind_bytes(&q[1], req->token, strlen(req->token), &tlen);
    mysql_bind_owner_idem(&q[2], &q[6], req, &olen, &ilen);
    mysql_bind_u64(&q[3], &fence);
    mysql_bind_u64(&q[4], &ttl);
    mysql_bind_u64(&q[5], &ttl);
    err = mysql_conn_run(c, MYSQL_ST_SH_HOLDER, q, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    expires = (int64_t)info.insert_id;
    mysql_bind_u64(&k[0], &lim);
    k[1] = *key;
    k[2] = *key;
    err = mysql_conn_run(c, MYSQL_ST_SH_KEY, k, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    return mysql_acquire_done(c, a, fence, expires, expired, res);
}

static enum mysql_attempt mysql_acquire_shared(struct mysql_conn *c,
                                               struct mysql_grant_arg *a,
                                               enum backend_result *res)
{
    const struct lock_req *req = a->req;
    MYSQL_BIND key, ks[2];
    unsigned long klen;
    struct mysql_key_state st;
    struct mysql_run_info info;
    uint64_t reaped = 0;
    unsigned err;
    enum mysql_attempt done;
    bool hit, found;

    mysql_bind_bytes(&key, req->key, req->key_len, &klen);
    /* 1. the key row, locked (made if absent), after its stripe's */
    ks[0] = key;
    ks[1] = key; /* its stripe */
    err = mysql_conn_run(c, MYSQL_ST_ACQ_LOCK, ks, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (info.affected == 0)
        return mysql_acquire_no_stripe(c);
    /* 2. a replay goes first */
    done = mysql_acquire_idem(c, a, &key, &hit, res);
    if (done != MYSQL_ATTEMPT_DONE || hit)
        return done;
    /* 3. the holders, and the expired ones reaped */
    done = mysql_acquire_read(c, &key, &st, &found);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    if (!found) { /* cannot happen: the row is ours */
        mysql_conn_rollback(c);
        return MYSQL_ATTEMPT_AGAIN;
    }
    if (st.expired > 0) {
        err = mysql_conn_run(c, MYSQL_ST_REAP_KEY, &key, NULL, &info);
        if (err != 0)
            return mysql_conn_failed(c, err);
        reaped = info.affected;
    }
    if (mysql_shared_fits(req, &st, a->out, res))
        done = mysql_shared_grant(c, a, &key, st.expired_fence, res);
    else if (reaped > 0) /* keep the reaping; nothing else changed */
        done = mysql_conn_commit(c);
    else
        mysql_conn_rollback(c);
    if (done == MYSQL_ATTEMPT_DONE && reaped > 0)
        metrics_lock_expired(reaped);
    return done;
}

enum mysql_attempt
mysql_acquire_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    struct mysql_grant_arg *a = arg;

    /* req->waiter is ignored: no queue in the store (no CAP_QUEUE) */
    if (a->req->mode == LOCK_SHARED)
        return mysql_acquire_shared(c, a, res);
    if (mysql_conn_block_ok(c, MYSQL_ST_ACQ_BLOCK))
        return mysql_acquire_block(c, a, res);
    return mysql_acquire_exclusive(c, a, res);
}
