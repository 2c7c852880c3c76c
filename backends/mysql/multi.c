/*
 * backends/mysql/multi.c - acquire_multi() of the MySQL adapter, and what
 * the three multi-key calls share (multi_holder.c has renew_multi() and
 * release_multi()): each is one short transaction that runs the single-key
 * statements key by key, in one fixed order, plus a few statements that
 * take a list of up to LOCK_MULTI_MAX keys at once.
 *
 * No deadlock, between multi-key calls or with the single-key ones, because
 * every transaction of the adapter locks rows in this one order:
 *
 *  1. stripe rows (@S ids 128..255), by ascending id. Only grants take
 *     them: a single acquire its key's one, in the statement that then
 *     locks the key's row; acquire_multi all of its keys' stripes in one
 *     statement (STRIPES) before any key row. Taking each key's stripe
 *     just before its key row would not do: two multi-key acquires whose
 *     keys share stripes crosswise (a, d in one stripe; b, c in another;
 *     {a, b} against {c, d}) would each hold one stripe and wait for the
 *     other's.
 *  2. key rows (@T), by ascending key bytes (the primary key's order):
 *     a single-key call and the reaper lock one per transaction; a
 *     multi-key call one statement per key in that order (ord[]).
 *  3. holder rows (@H) of a key, only ever locked by whoever holds the
 *     key's row, so nobody waits for them.
 *  4. the fence counter (@F): its AUTO_INCREMENT lock ends with the
 *     INSERT, and the row it adds is no one else's.
 *  5. the event sequence row (@S id 2), bumped once, after the last key
 *     row, by every releasing transaction; then its event rows.
 *
 * A transaction waits only for a row of a later step than, or of the same
 * step and after, every row it holds; so a cycle of waits would have to
 * climb this order back to its start, which it cannot. InnoDB's gap locks
 * fit in too: at READ COMMITTED the only ones are those of the duplicate
 * check of a key row insert (one per insert, in the gap below the row it
 * found), which another insert waits for only if its key is below that
 * row; as key rows are inserted in ascending order, the transaction it
 * waits for has already gone past it, and the same climb applies.
 *
 * One case escapes the order: when a key row goes away (an insert rolled
 * back by a HELD answer here, a deleted row purged), InnoDB hands the X
 * locks that INSERT ... ON DUPLICATE KEY UPDATE took or waits for on it to
 * the next row as gap locks, even at READ COMMITTED; that gap may cover
 * keys its holder never asked for. So a deadlock stays possible, rarely
 * (none in most runs of the contention tests, a few at most, against
 * hundreds a run when the order is broken). InnoDB rolls one transaction
 * back and mysql_run_op() runs it again at once: no caller sees it.
 *
 * acquire_multi() answers HELD at the first key it finds held (in key
 * order), reading the others without locks; a grant takes fences and holder
 * rows only once every key's row is locked and free.
 */
#include <string.h>

#include "backends/mysql/mysql_int.h"
#include "lib/clock.h"
#include "lib/log.h"

/* Key byte order, as VARBINARY compares: bytes, then the shorter first. */
static int
mysql_multi_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);

    if (c != 0)
        return c;
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

void mysql_multi_init(struct mysql_multi_arg *a,
                      const struct lock_multi_req *req,
                      struct lock_multi_grant *out,
                      int64_t timeout_ms)
{
    memset(a, 0, sizeof(*a));
    a->req = req;
    a->out = out;
    a->deadline_ms = clock_mono_ms() + timeout_ms;
    for (size_t i = 0; i < req->n; i++) { /* insertion sort: n <= 64 */
        size_t j = i;
        while (j > 0 && mysql_multi_cmp(req->keys[a->ord[j - 1]],
                                        req->key_lens[a->ord[j - 1]],
                                        req->keys[i], req->key_lens[i]) > 0) {
            a->ord[j] = a->ord[j - 1];
            j--;
        }
        a->ord[j] = i;
    }
}

void mysql_multi_bind_key(const struct mysql_multi_arg *a,
                          size_t i,
                          MYSQL_BIND *b,
                          unsigned long *len)
{
    size_t k = a->ord[i];

    mysql_bind_bytes(b, a->req->keys[k], a->req->key_lens[k], len);
}

void mysql_multi_bind_keys(const struct mysql_multi_arg *a,
                           size_t from,
                           MYSQL_BIND *p,
                           unsigned long *lens)
{
    for (size_t i = 0; i < LOCK_MULTI_MAX; i++) {
        if (from + i < a->req->n)
            mysql_multi_bind_key(a, from + i, &p[i], &lens[i]);
        else
            mysql_bind_null(&p[i]);
    }
}

size_t mysql_multi_find(const struct mysql_multi_arg *a,
                        const char *key,
                        unsigned long len)
{
    size_t lo = 0, hi = a->req->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2, k = a->ord[mid];
        int c = mysql_multi_cmp(a->req->keys[k], a->req->key_lens[k], key, len);
        if (c == 0)
            return k;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return LOCK_MULTI_MAX;
}

bool mysql_multi_late(struct mysql_conn *c, const struct mysql_multi_arg *a)
{
    if (clock_mono_ms() <= a->deadline_ms)
        return false;
    log_warn("mysql: a call on %zu keys ran out of time; rolled back",
             a->req->n);
    mysql_conn_rollback(c);
    return true;
}

/* 1. Every stripe row of the keys, in ascending id order. */
static enum mysql_attempt mysql_multi_stripes(struct mysql_conn *c,
                                              struct mysql_multi_arg *a)
{
    MYSQL_BIND p[LOCK_MULTI_MAX];
    unsigned long lens[LOCK_MULTI_MAX];
    struct mysql_run_info info;
    unsigned err;

    mysql_multi_bind_keys(a, 0, p, lens);
    err = mysql_conn_run(c, MYSQL_ST_STRIPES, p, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    if (info.affected == 0)
        return mysql_acquire_no_stripe(c);
    return MYSQL_ATTEMPT_DONE;
}

/* 2. Each key's row, by ascending key, locked and, when free, made the
 * exclusive grant's as acquire() makes it (ACQ_UPSERT); up to the first
 * key that is held: *held is its sorted position (n: none), *left its TTL
 * left. */
static enum mysql_attempt mysql_multi_take(struct mysql_conn *c,
                                           struct mysql_multi_arg *a,
                                           size_t *held,
                                           uint64_t *left)
{
    uint64_t ttl = a->req->ttl_ms;
    MYSQL_BIND p[4];
    unsigned long klen;
    struct mysql_run_info info;
    unsigned err;

    for (size_t i = 0; i < a->req->n; i++) {
        if (mysql_multi_late(c, a))
            return MYSQL_ATTEMPT_FAILED;
        mysql_multi_bind_key(a, i, &p[0], &klen);
        mysql_bind_u64(&p[1], &ttl);
        mysql_bind_u64(&p[2], &ttl);
        p[3] = p[0]; /* its stripe: ours already */
        err = mysql_conn_run(c, MYSQL_ST_ACQ_UPSERT, p, NULL, &info);
        if (err != 0)
            return mysql_conn_failed(c, err);
        if (info.insert_id != 0) { /* held: 2 * TTL left + mode */
            *held = i;
            *left = info.insert_id >> 1;
            return MYSQL_ATTEMPT_DONE;
        }
        if (info.affected == 0)
            return mysql_acquire_no_stripe(c);
    }
    *held = a->req->n;
    return MYSQL_ATTEMPT_DONE;
}

/* MULTI_HELD's rows, and what they come to. */
struct mysql_multi_held_rows {
    struct mysql_multi_arg *a;
    char key[LOCK_KEY_MAX];
    unsigned long klen;
    int64_t left;
    my_bool nulls[2], trunc;
    uint64_t retry; /* the least TTL left, 0 none yet */
};

static void mysql_multi_held_row(void *arg)
{
    struct mysql_multi_held_rows *hr = arg;
    size_t k;

    if (hr->nulls[0] || hr->klen > LOCK_KEY_MAX)
        return;
    k = mysql_multi_find(hr->a, hr->key, hr->klen);
    if (k == LOCK_MULTI_MAX)
        return;
    hr->a->out->held[k] = true;
    if (!hr->nulls[1] && hr->left > 0 &&
        (hr->retry == 0 || (uint64_t)hr->left < hr->retry))
        hr->retry = (uint64_t)hr->left;
}

/* 3. The key at sorted position at is held (its TTL left: left): which of
 * it and the keys after it are held, read as committed (the keys before it
 * were free, and are ours until the rollback); HELD. */
static enum mysql_attempt mysql_multi_held(struct mysql_conn *c,
                                           struct mysql_multi_arg *a,
                                           size_t at,
                                           uint64_t left,
                                           enum backend_result *res)
{
    struct mysql_multi_held_rows hr = { .a = a, .retry = left };
    MYSQL_BIND p[LOCK_MULTI_MAX], r[2];
    unsigned long lens[LOCK_MULTI_MAX];
    unsigned err;

    a->out->held[a->ord[at]] = true;
    /* key at itself too: a shared key's first holder may expire first */
    mysql_multi_bind_keys(a, at, p, lens);
    mysql_bind_out_bytes(&r[0], hr.key, sizeof(hr.key), &hr.klen, &hr.nulls[0],
                         &hr.trunc);
    mysql_bind_i64(&r[1], &hr.left, &hr.nulls[1]);
    err = mysql_conn_rows(c, MYSQL_ST_MULTI_HELD, p, r, mysql_multi_held_row,
                          &hr);
    if (err != 0)
        return mysql_conn_failed(c, err);
    mysql_conn_rollback(c);
    a->out->retry_ms = hr.retry;
    *res = BACKEND_HELD;
    return MYSQL_ATTEMPT_DONE;
}

/* 4. Every key's row is ours and free: a fence and a holder row each, as
 * acquire() adds them; then COMMIT. */
static enum mysql_attempt mysql_multi_grant(struct mysql_conn *c,
                                            struct mysql_multi_arg *a,
                                            enum backend_result *res)
{
    const struct lock_multi_req *req = a->req;
    uint64_t fence = 0, ttl = req->ttl_ms;
    int64_t first = 0;
    MYSQL_BIND q[6];
    unsigned long tlen, olen, klen;
    struct mysql_run_info info;
    unsigned err;
    enum mysql_attempt done;

    mysql_bind_bytes(&q[0], req->token, strlen(req->token), &tlen);
    if (req->owner != NULL)
        mysql_bind_bytes(&q[1], req->owner, strlen(req->owner), &olen);
    else
        mysql_bind_null(&q[1]);
    mysql_bind_u64(&q[2], &fence);
    mysql_bind_u64(&q[3], &ttl);
    mysql_bind_null(&q[4]); /* no Idempotency-Key */
    for (size_t i = 0; i < req->n; i++) {
        if (mysql_multi_late(c, a))
            return MYSQL_ATTEMPT_FAILED;
        done = mysql_acquire_fence(c, &fence);
        if (done != MYSQL_ATTEMPT_DONE)
            return done;
        mysql_multi_bind_key(a, i, &q[5], &klen);
        err = mysql_conn_run(c, MYSQL_ST_ACQ_HOLDER, q, NULL, &info);
        if (err != 0)
            return mysql_conn_failed(c, err);
        if (info.affected == 0 || info.insert_id == 0) { /* cannot happen */
            log_error("mysql: the granted row of a key is gone before commit");
            mysql_conn_rollback(c);
            return MYSQL_ATTEMPT_FAILED;
        }
        a->out->fences[a->ord[i]] = fence;
        if (i == 0 || (int64_t)info.insert_id < first)
            first = (int64_t)info.insert_id;
    }
    done = mysql_conn_commit(c); /* only now are the keys granted */
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    a->out->ttl_ms = req->ttl_ms;
    a->out->expires_at_ms = first;
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

enum mysql_attempt mysql_acquire_multi_attempt(struct mysql_conn *c,
                                               void *arg,
                                               enum backend_result *res)
{
    struct mysql_multi_arg *a = arg;
    size_t held = 0;
    uint64_t left = 0;
    enum mysql_attempt done;

    memset(a->out, 0, sizeof(*a->out)); /* a retry starts afresh */
    done = mysql_multi_stripes(c, a);
    if (done == MYSQL_ATTEMPT_DONE)
        done = mysql_multi_take(c, a, &held, &left);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    if (held < a->req->n)
        return mysql_multi_held(c, a, held, left, res);
    return mysql_multi_grant(c, a, res);
}
