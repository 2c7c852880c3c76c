/*
 * backends/mysql/holder.c - renew(), release() and inspect() of the MySQL
 * adapter: one holder's rows (@H) and its key's row (@T), the key row
 * always locked first. The exclusive renew and release are one statement
 * over both rows each (a multiple-table UPDATE or DELETE, STRAIGHT_JOIN
 * from the key row), then what today's single-row statements were
 * followed by; re-entered holds and shared holders take a longer path under
 * the key row's lock. On MariaDB the common renew and release are one
 * compound statement each (RENEW_BLOCK, REL_BLOCK: one round trip, COMMIT
 * included), which leaves its transaction open for the longer path when
 * it matched nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/mysql/mysql_int.h"
#include "lib/clock.h"
#include "lib/metrics.h"

/* After a renew or release matched nothing (a transaction is open; it is
 * ended): NOT_FOUND (no live holder), MISMATCH (held, not by this token),
 * HOLDS_MAX (re-entry of a token at the cap), or AGAIN if the holder
 * changed in between. */
static enum mysql_attempt mysql_settle_unmatched(struct mysql_conn *c,
                                                 const struct lock_req *req,
                                                 bool reenter,
                                                 enum backend_result *res)
{
    MYSQL_BIND p[2], r[2];
    unsigned long klen, tlen;
    int64_t live = 0, holds = 0;
    my_bool nulls[2] = { 0, 0 };
    struct mysql_run_info info;
    unsigned err;

    mysql_bind_bytes(&p[0], req->token, strlen(req->token), &tlen);
    mysql_bind_bytes(&p[1], req->key, req->key_len, &klen);
    mysql_bind_i64(&r[0], &live, &nulls[0]);
    mysql_bind_i64(&r[1], &holds, &nulls[1]);
    err = mysql_conn_run(c, MYSQL_ST_SETTLE, p, r, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    mysql_conn_rollback(c);
    if (!info.found || (nulls[1] && (nulls[0] || live == 0)))
        *res = BACKEND_NOT_FOUND;
    else if (nulls[1])
        *res = BACKEND_MISMATCH;
    else if (reenter && holds >= LOCK_HOLDS_MAX)
        *res = BACKEND_HOLDS_MAX;
    else
        return MYSQL_ATTEMPT_AGAIN; /* renewed or granted meanwhile */
    return MYSQL_ATTEMPT_DONE;
}

enum mysql_attempt
mysql_key_lock(struct mysql_conn *c, MYSQL_BIND *key, bool *found)
{
    MYSQL_BIND r[1];
    int64_t one = 0;
    my_bool is_null = 0;
    struct mysql_run_info info;
    unsigned err;

    mysql_bind_i64(&r[0], &one, &is_null);
    err = mysql_conn_run(c, MYSQL_ST_KEY_LOCK, key, r, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (found != NULL)
        *found = info.found;
    return MYSQL_ATTEMPT_DONE;
}

/* The key's expiry := its last holder's (shared holders, after one left or
 * was renewed shorter). */
enum mysql_attempt mysql_key_fix(struct mysql_conn *c, MYSQL_BIND *key)
{
    MYSQL_BIND p[2] = { *key, *key };
    struct mysql_run_info info;
    unsigned err = mysql_conn_run(c, MYSQL_ST_KEY_FIX, p, NULL, &info);

    return err != 0 ? mysql_conn_failed(c, err) : MYSQL_ATTEMPT_DONE;
}

/* Fill out with a committed renew: v = fence, TTL, holds, mode, limit as
 * RENEW_READ reads them. */
static void mysql_renewed(struct mysql_grant_arg *a,
                          const uint64_t v[5],
                          int64_t expires,
                          enum backend_result *res)
{
    a->out->fence = v[0];
    a->out->ttl_ms = v[1];
    a->out->expires_at_ms = expires;
    a->out->holds = (uint32_t)v[2];
    a->out->mode = v[3] == LOCK_SHARED ? LOCK_SHARED : LOCK_EXCLUSIVE;
    a->out->limit = v[3] == LOCK_SHARED ? (uint32_t)v[4] : 0;
    *res = BACKEND_OK;
}

/* The renew as one compound statement (RENEW_BLOCK), with RENEW's binds
 * p: the same steps as below in one round trip; a renew that matched
 * nothing is settled step by step in the transaction it left open. */
static enum mysql_attempt mysql_renew_block(struct mysql_conn *c,
                                            struct mysql_grant_arg *a,
                                            MYSQL_BIND *p,
                                            enum backend_result *res)
{
    MYSQL_BIND b[5] = { p[0], p[1], p[5], p[6] }, r[7];
    uint64_t v[5] = { 0 };
    int64_t status = 0, expires = 0, t0 = clock_mono_ms();
    int64_t until = mysql_conn_until(c, t0);
    my_bool nulls[2] = { 0 };
    unsigned err;

    mysql_bind_i64(&b[4], &until, NULL);
    mysql_bind_i64(&r[0], &status, &nulls[0]);
    mysql_bind_u64(&r[1], &v[0]);
    mysql_bind_u64(&r[2], &v[1]);
    mysql_bind_i64(&r[3], &expires, &nulls[1]);
    mysql_bind_u64(&r[4], &v[2]);
    mysql_bind_u64(&r[5], &v[3]);
    mysql_bind_u64(&r[6], &v[4]);
    err = mysql_conn_block(c, MYSQL_ST_RENEW_BLOCK, b, r);
    if (err != 0)
        return mysql_block_failed(c, err);
    if (status == MYSQL_BLOCK_OPEN)
        return mysql_settle_unmatched(c, a->req, a->req->reenter, res);
    if (status == MYSQL_BLOCK_TOO_LATE)
        return mysql_block_too_late(c, t0);
    if (status != MYSQL_BLOCK_DONE) /* cannot happen under the row locks */
        return MYSQL_ATTEMPT_FAILED;
    mysql_renewed(a, v, expires, res);
    return MYSQL_ATTEMPT_DONE;
}

enum mysql_attempt
mysql_renew_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    struct mysql_grant_arg *a = arg;
    const struct lock_req *req = a->req;
    MYSQL_BIND p[8], r[6];
    unsigned long klen, tlen;
    uint64_t ttl = req->ttl_ms, inc = req->reenter ? 1 : 0;
    uint64_t fence = 0, ttl_now = 0, holds = 0, mode = 0, lim = 0;
    int64_t expires = 0;
    my_bool exp_null = 0;
    struct mysql_run_info info;
    unsigned err;
    enum mysql_attempt done;

    mysql_bind_u64(&p[0], &inc);
    for (int i = 1; i <= 4; i++) { /* 0: keep the TTL it last ran with */
        if (ttl == 0)
            mysql_bind_null(&p[i]);
        else
            mysql_bind_u64(&p[i], &ttl);
    }
    mysql_bind_bytes(&p[5], req->key, req->key_len, &klen);
    mysql_bind_bytes(&p[6], req->token, strlen(req->token), &tlen);
    mysql_bind_u64(&p[7], &inc);
    if (strlen(req->token) <= LOCK_TOKEN_MAX &&
        mysql_conn_block_ok(c, MYSQL_ST_RENEW_BLOCK))
        return mysql_renew_block(c, a, p, res);
    done = mysql_key_lock(c, &p[5], NULL);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    err = mysql_conn_run(c, MYSQL_ST_RENEW, p, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (info.affected == 0)
        return mysql_settle_unmatched(c, req, req->reenter, res);

    /* both rows are locked until COMMIT */
    mysql_bind_u64(&r[0], &fence);
    mysql_bind_u64(&r[1], &ttl_now);
    mysql_bind_i64(&r[2], &expires, &exp_null);
    mysql_bind_u64(&r[3], &holds);
    mysql_bind_u64(&r[4], &mode);
    mysql_bind_u64(&r[5], &lim);
    err = mysql_conn_run(c, MYSQL_ST_RENEW_READ, &p[5], r, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (!info.found) { /* cannot happen under the row locks */
        mysql_conn_rollback(c);
        return MYSQL_ATTEMPT_FAILED;
    }
    if (mode == LOCK_SHARED) { /* a shorter TTL may lower the key's */
        done = mysql_key_fix(c, &p[5]);
        if (done != MYSQL_ATTEMPT_DONE)
            return done;
    }
    done = mysql_conn_commit(c);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    mysql_renewed(a, (uint64_t[]){ fence, ttl_now, holds, mode, lim }, expires,
                  res);
    return MYSQL_ATTEMPT_DONE;
}

enum mysql_attempt mysql_event_add(struct mysql_conn *c, MYSQL_BIND *key)
{
    MYSQL_BIND q[2];
    uint64_t id;
    struct mysql_run_info info;
    unsigned err;

    /* an event whose id is taken under the sequence row's lock, so ids
       become visible in order, without gaps */
    err = mysql_conn_run(c, MYSQL_ST_EVENT_BUMP, NULL, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (info.affected != 1) {
        atomic_store(&c->be->schema_ok, false);
        mysql_conn_rollback(c);
        return MYSQL_ATTEMPT_FAILED;
    }
    id = info.insert_id;
    mysql_bind_u64(&q[0], &id);
    q[1] = *key;
    err = mysql_conn_run(c, MYSQL_ST_EVENT_ADD, q, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    return MYSQL_ATTEMPT_DONE;
}

/* The holder's row goes; then its expired fellows, the key's expiry (its
 * last live holder's) and the key row itself if none is left. */
enum mysql_attempt mysql_release_holder(struct mysql_conn *c, MYSQL_BIND *kt)
{
    struct mysql_run_info info;
    uint64_t reaped;
    unsigned err;
    enum mysql_attempt done;

    err = mysql_conn_run(c, MYSQL_ST_REL_DEL, kt, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    err = mysql_conn_run(c, MYSQL_ST_REAP_KEY, &kt[0], NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    reaped = info.affected;
    done = mysql_key_fix(c, &kt[0]);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    err = mysql_conn_run(c, MYSQL_ST_KEY_DROP, &kt[0], NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (reaped > 0)
        metrics_lock_expired(reaped);
    return MYSQL_ATTEMPT_DONE;
}

/* A release REL_X did not match: re-entered holds, a shared holder, or no
 * such holder. Under the rows' locks. */
static enum mysql_attempt mysql_release_slow(struct mysql_conn *c,
                                             struct mysql_release_arg *a,
                                             MYSQL_BIND *kt,
                                             enum backend_result *res)
{
    const struct lock_req *req = a->req;
    MYSQL_BIND p[2] = { kt[1], kt[0] }, r[2];
    int64_t live = 0, holds = 0;
    my_bool nulls[2] = { 0, 0 };
    struct mysql_run_info info;
    unsigned err;
    enum mysql_attempt done;

    mysql_bind_i64(&r[0], &live, &nulls[0]);
    mysql_bind_i64(&r[1], &holds, &nulls[1]);
    err = mysql_conn_run(c, MYSQL_ST_REL_LOCK, p, r, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (!info.found || nulls[1]) {
        mysql_conn_rollback(c);
        *res = info.found && !nulls[0] && live != 0 ? BACKEND_MISMATCH
                                                    : BACKEND_NOT_FOUND;
        return MYSQL_ATTEMPT_DONE;
    }
    if (holds > 1 && !req->all) {
        err = mysql_conn_run(c, MYSQL_ST_REL_DEC, kt, NULL, &info);
        if (err != 0)
            return mysql_conn_failed(c, err);
        a->out->holds = (uint32_t)(holds - 1);
    } else {
        done = mysql_release_holder(c, kt);
        if (done == MYSQL_ATTEMPT_DONE)
            done = mysql_event_add(c, &kt[0]);
        if (done != MYSQL_ATTEMPT_DONE)
            return done;
        a->left = true;
    }
    done = mysql_conn_commit(c);
    if (done != MYSQL_ATTEMPT_DONE) {
        a->left = false;
        return done;
    }
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

/* The release as one compound statement (REL_BLOCK), with REL_X's binds
 * p: REL_X, the event and COMMIT in one round trip; anything but the
 * exclusive holder's last hold goes on step by step in the transaction it
 * left open. */
static enum mysql_attempt mysql_release_block(struct mysql_conn *c,
                                              struct mysql_release_arg *a,
                                              MYSQL_BIND *p,
                                              enum backend_result *res)
{
    MYSQL_BIND r[1];
    int64_t status = 0;
    my_bool is_null = 0;
    unsigned err;

    mysql_bind_i64(&r[0], &status, &is_null);
    err = mysql_conn_block(c, MYSQL_ST_REL_BLOCK, p, r);
    if (err != 0)
        return mysql_block_failed(c, err);
    if (status == MYSQL_BLOCK_OPEN)
        return mysql_release_slow(c, a, p, res);
    if (status != MYSQL_BLOCK_DONE) { /* the event sequence row is gone */
        atomic_store(&c->be->schema_ok, false);
        return MYSQL_ATTEMPT_FAILED;
    }
    a->left = true;
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

enum mysql_attempt
mysql_release_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    struct mysql_release_arg *a = arg;
    const struct lock_req *req = a->req;
    MYSQL_BIND p[3];
    unsigned long klen, tlen;
    uint64_t all = req->all ? 1 : 0;
    struct mysql_run_info info;
    unsigned err;
    enum mysql_attempt done;

    a->left = false;
    a->out->holds = 0;
    mysql_bind_bytes(&p[0], req->key, req->key_len, &klen);
    mysql_bind_bytes(&p[1], req->token, strlen(req->token), &tlen);
    mysql_bind_u64(&p[2], &all);
    if (strlen(req->token) <= LOCK_TOKEN_MAX &&
        mysql_conn_block_ok(c, MYSQL_ST_REL_BLOCK))
        return mysql_release_block(c, a, p, res);
    /* the common case: the exclusive holder's last hold, both rows */
    done = mysql_key_lock(c, &p[0], NULL);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    err = mysql_conn_run(c, MYSQL_ST_REL_X, p, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (info.affected == 0)
        return mysql_release_slow(c, a, p, res);
    done = mysql_event_add(c, &p[0]);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    done = mysql_conn_commit(c);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    a->left = true;
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

/* inspect()'s row buffers and what it has gathered. */
struct mysql_inspect_rows {
    uint64_t fence, holds, mode, lim, max_fence;
    int64_t expires, left, count, max_exp, max_left;
    char owner[LOCK_OWNER_MAX + 1];
    unsigned long olen;
    my_bool nulls[11], trunc;
    struct lock_info *out;
    struct lock_holder *holders; /* owned until handed to out */
    uint32_t n;
    bool no_memory;
};

static void mysql_inspect_row(void *arg)
{
    struct mysql_inspect_rows *ir = arg;
    struct lock_info *out = ir->out;
    struct lock_holder *h;

    if (ir->n == 0) {
        size_t cap = ir->count > 0 && ir->count < LOCK_HOLDERS_SHOWN
                         ? (size_t)ir->count
                         : LOCK_HOLDERS_SHOWN;
        ir->holders = calloc(cap, sizeof(*ir->holders));
        if (ir->holders == NULL)
            ir->no_memory = true;
        out->mode = ir->mode == LOCK_SHARED ? LOCK_SHARED : LOCK_EXCLUSIVE;
        out->limit = out->mode == LOCK_SHARED ? (uint32_t)ir->lim : 0;
        out->holder_count = ir->count > 0 ? (uint32_t)ir->count : 1;
        out->fence = ir->max_fence;
        out->expires_at_ms = ir->max_exp;
        out->ttl_ms = ir->max_left >= 1 ? (uint64_t)ir->max_left : 1;
    }
    if (ir->no_memory || ir->n >= LOCK_HOLDERS_SHOWN ||
        ir->n >= out->holder_count)
        return;
    h = &ir->holders[ir->n++];
    h->fence = ir->fence;
    h->ttl_ms = ir->left >= 1 ? (uint64_t)ir->left : 1;
    h->expires_at_ms = ir->expires;
    h->holds = (uint32_t)ir->holds;
    h->has_owner = !ir->nulls[3];
    if (h->has_owner) {
        size_t n = ir->olen < LOCK_OWNER_MAX ? ir->olen : LOCK_OWNER_MAX;
        memcpy(h->owner, ir->owner, n);
        h->owner[n] = '\0';
    }
}

enum mysql_attempt mysql_holders_read(struct mysql_conn *c,
                                      const char *key,
                                      size_t key_len,
                                      struct lock_info *out,
                                      enum backend_result *res)
{
    struct mysql_inspect_rows ir = { .out = out };
    MYSQL_BIND p[2], r[11];
    unsigned long klen;
    uint64_t shown = LOCK_HOLDERS_SHOWN;
    unsigned err;

    mysql_bind_bytes(&p[0], key, key_len, &klen);
    mysql_bind_u64(&p[1], &shown);
    mysql_bind_u64(&r[0], &ir.fence);
    mysql_bind_i64(&r[1], &ir.expires, &ir.nulls[1]);
    mysql_bind_i64(&r[2], &ir.left, &ir.nulls[2]);
    mysql_bind_out_bytes(&r[3], ir.owner, LOCK_OWNER_MAX, &ir.olen,
                         &ir.nulls[3], &ir.trunc);
    mysql_bind_u64(&r[4], &ir.holds);
    mysql_bind_u64(&r[5], &ir.mode);
    mysql_bind_u64(&r[6], &ir.lim);
    mysql_bind_i64(&r[7], &ir.count, &ir.nulls[7]);
    mysql_bind_u64(&r[8], &ir.max_fence);
    mysql_bind_i64(&r[9], &ir.max_exp, &ir.nulls[9]);
    mysql_bind_i64(&r[10], &ir.max_left, &ir.nulls[10]);
    memset(out, 0, sizeof(*out));
    err = mysql_conn_rows(c, MYSQL_ST_INSPECT, p, r, mysql_inspect_row, &ir);
    if (err != 0) {
        free(ir.holders);
        memset(out, 0, sizeof(*out));
        return mysql_conn_failed(c, err);
    }
    if (ir.no_memory || ir.n == 0) {
        free(ir.holders);
        memset(out, 0, sizeof(*out));
        *res = ir.no_memory ? BACKEND_NO_MEMORY : BACKEND_NOT_FOUND;
        return MYSQL_ATTEMPT_DONE;
    }
    out->holders = ir.holders;
    out->nholders = ir.n;
    if (out->mode == LOCK_EXCLUSIVE) {
        const struct lock_holder *h = &out->holders[0];
        out->holds = h->holds;
        out->has_owner = h->has_owner;
        memcpy(out->owner, h->owner, sizeof(h->owner));
    }
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

enum mysql_attempt
mysql_inspect_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    struct mysql_inspect_arg *a = arg;
    enum mysql_attempt done =
        mysql_holders_read(c, a->key, a->key_len, a->out, res);

    if (done == MYSQL_ATTEMPT_DONE)
        mysql_conn_rollback(c);
    return done;
}
