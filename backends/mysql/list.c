/*
 * backends/mysql/list.c - what operators ask of the MySQL adapter: list()
 * (GET /locks) and force_release() (DELETE /locks/{key}?force=true).
 *
 * list() is one read-only statement (LIST, sql.c): a range scan of the key
 * table's primary key, >= the prefix, > the cursor and < the prefix's
 * successor (bytes, as VARBINARY compares them: never LIKE with the
 * client's bytes), at most a budget of rows (MYSQL_BE_LIST_BUDGET: 2 *
 * limit + 16) in key order, each joined to its live holders. Rows whose
 * holders have all expired but that the reaper has not deleted yet count
 * against the budget: when it runs out before the page is full, the page
 * ends early with more set and resume at the last row looked at. So one
 * call reads at most 2 * limit + 16 key rows, and the holder rows of those
 * keys (one per exclusive key; up to its limit for a shared one). Key rows
 * of a lockd before lock kinds (their holder in the key row itself,
 * migrated at start) show only once they have holder rows, as in
 * inspect().
 *
 * force_release() is one transaction: the key's row locked first (as
 * every operation does), its live holders read as inspect() reads them,
 * every holder row (live or expired, with its Idempotency-Key) and the key
 * row deleted, and an event appended so that every instance's waiters on
 * the key are woken as after a release. Fences come from the fence table's
 * AUTO_INCREMENT counter, which no deletion touches, so the next grant's
 * fence is above every fence the forced holders had.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/mysql/mysql_int.h"
#include "lib/metrics.h"

/* Key rows one list() call may look at: limit live ones, and as many
 * expired ones again, plus a few. */
#define MYSQL_BE_LIST_BUDGET(limit) (2 * (uint64_t)(limit) + 16)

/* A parameter of raw bytes: MYSQL_TYPE_BLOB is taken as binary by the
 * server, never as text of the connection's character set (a prefix or
 * its successor need not be valid UTF-8). */
static void
mysql_blob_bind(MYSQL_BIND *b, const char *p, size_t n, unsigned long *len)
{
    mysql_bind_bytes(b, p, n, len);
    b->buffer_type = MYSQL_TYPE_BLOB;
}

/*
 * The least byte string above every string that starts with prefix[0..n):
 * prefix without its trailing 0xff bytes, its last byte plus one. With no
 * such string (n = 0, or only 0xff bytes) "\xff", which is above every
 * key: keys are UTF-8, in which no byte is 0xff. Its length; buf has room
 * for n + 1 bytes.
 */
static size_t mysql_list_successor(const char *prefix, size_t n, char *buf)
{
    while (n > 0 && (unsigned char)prefix[n - 1] == 0xff)
        n--;
    if (n == 0) {
        buf[0] = (char)0xff;
        return 1;
    }
    memcpy(buf, prefix, n);
    buf[n - 1] = (char)((unsigned char)buf[n - 1] + 1);
    return n;
}

/* list()'s row buffers and what it has gathered. */
struct mysql_list_rows {
    const struct lock_list_req *req;
    struct lock_list *out;
    char key[LOCK_KEY_MAX];
    unsigned long klen;
    uint64_t mode, fence;
    int64_t count, expires, left;
    char owner[LOCK_OWNER_MAX];
    unsigned long olen;
    my_bool nulls[7], trunc[2];
    uint64_t seen;           /* rows looked at */
    bool live_after;         /* a live key after a full page */
    char last[LOCK_KEY_MAX]; /* the last key looked at */
    size_t last_len;
};

static void mysql_list_row(void *arg)
{
    struct mysql_list_rows *lr = arg;
    struct lock_list *out = lr->out;
    struct lock_entry *e;
    size_t n;

    if (lr->live_after)
        return;
    lr->seen++;
    if (lr->nulls[0] || lr->klen < 1 || lr->klen > LOCK_KEY_MAX)
        return; /* cannot be: the primary key */
    if (lr->count > 0 && out->n >= lr->req->limit) {
        lr->live_after = true;
        return;
    }
    memcpy(lr->last, lr->key, lr->klen);
    lr->last_len = lr->klen;
    if (lr->count <= 0)
        return; /* every holder expired: not held */
    e = &out->entries[out->n++];
    memset(e, 0, sizeof(*e));
    memcpy(e->key, lr->key, lr->klen);
    e->key[lr->klen] = '\0';
    e->key_len = lr->klen;
    e->mode = lr->mode == LOCK_SHARED ? LOCK_SHARED : LOCK_EXCLUSIVE;
    e->fence = lr->nulls[3] ? 0 : lr->fence;
    e->expires_at_ms = lr->nulls[4] ? 0 : lr->expires;
    e->ttl_ms = !lr->nulls[5] && lr->left >= 1 ? (uint64_t)lr->left : 1;
    e->holder_count = (uint32_t)lr->count;
    e->has_owner = e->mode == LOCK_EXCLUSIVE && !lr->nulls[6];
    if (e->has_owner) {
        n = lr->olen < LOCK_OWNER_MAX ? lr->olen : LOCK_OWNER_MAX;
        memcpy(e->owner, lr->owner, n);
        e->owner[n] = '\0';
    }
}

static void mysql_list_bind_rows(struct mysql_list_rows *lr, MYSQL_BIND *r)
{
    mysql_bind_out_bytes(&r[0], lr->key, sizeof(lr->key), &lr->klen,
                         &lr->nulls[0], &lr->trunc[0]);
    mysql_bind_u64(&r[1], &lr->mode);
    mysql_bind_i64(&r[2], &lr->count, &lr->nulls[2]);
    mysql_bind_u64(&r[3], &lr->fence);
    r[3].is_null = &lr->nulls[3];
    mysql_bind_i64(&r[4], &lr->expires, &lr->nulls[4]);
    mysql_bind_i64(&r[5], &lr->left, &lr->nulls[5]);
    mysql_bind_out_bytes(&r[6], lr->owner, sizeof(lr->owner), &lr->olen,
                         &lr->nulls[6], &lr->trunc[1]);
}

/* more and resume, once the rows are read (budget: the rows asked for). */
static void mysql_list_finish(struct mysql_list_rows *lr, uint64_t budget)
{
    struct lock_list *out = lr->out;
    const char *k = lr->last;
    size_t n = lr->last_len;

    if (!lr->live_after && lr->seen < budget)
        return; /* the range ended within the budget: no more */
    out->more = true;
    if (out->n >= lr->req->limit) { /* full: after its last entry */
        k = out->entries[out->n - 1].key;
        n = out->entries[out->n - 1].key_len;
    }
    memcpy(out->resume, k, n);
    out->resume[n] = '\0';
    out->resume_len = n;
}

enum mysql_attempt
mysql_list_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    struct mysql_list_arg *a = arg;
    const struct lock_list_req *req = a->req;
    struct mysql_list_rows lr = { .req = req, .out = a->out };
    char succ[LOCK_KEY_MAX + 1];
    uint64_t budget = MYSQL_BE_LIST_BUDGET(req->limit);
    unsigned long plen, alen, slen;
    MYSQL_BIND p[4], r[7];
    unsigned err;

    a->out->n = 0;
    a->out->more = false;
    a->out->resume_len = 0;
    a->out->resume[0] = '\0';
    mysql_blob_bind(&p[0], req->prefix, req->prefix_len, &plen);
    if (req->after != NULL) /* else > '': every key, none is empty */
        mysql_blob_bind(&p[1], req->after, req->after_len, &alen);
    else
        mysql_blob_bind(&p[1], "", 0, &alen);
    mysql_blob_bind(&p[2], succ,
                    mysql_list_successor(req->prefix, req->prefix_len, succ),
                    &slen);
    mysql_bind_u64(&p[3], &budget);
    mysql_list_bind_rows(&lr, r);
    err = mysql_conn_rows(c, MYSQL_ST_LIST, p, r, mysql_list_row, &lr);
    if (err != 0) {
        a->out->n = 0;
        return mysql_conn_failed(c, err);
    }
    mysql_conn_rollback(c); /* read only */
    mysql_list_finish(&lr, budget);
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

/* Every holder row and the key row go, and an event tells the instances;
 * then COMMIT. *gone: the holder rows deleted (live and expired). */
static enum mysql_attempt
mysql_force_delete(struct mysql_conn *c, MYSQL_BIND *key, uint64_t *gone)
{
    struct mysql_run_info info;
    unsigned err;
    enum mysql_attempt done;

    err = mysql_conn_run(c, MYSQL_ST_FORCE_HOLD, key, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    *gone = info.affected;
    err = mysql_conn_run(c, MYSQL_ST_FORCE_KEY, key, NULL, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    done = mysql_event_add(c, key);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    return mysql_conn_commit(c);
}

enum mysql_attempt
mysql_force_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    struct mysql_force_arg *a = arg;
    struct lock_info *out = a->in.out;
    MYSQL_BIND key;
    unsigned long klen;
    uint64_t gone = 0;
    enum mysql_attempt done;
    bool found = false;

    a->left = false;
    lock_info_clear(out); /* an earlier attempt's */
    mysql_bind_bytes(&key, a->in.key, a->in.key_len, &klen);
    done = mysql_key_lock(c, &key, &found);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    if (!found) {
        mysql_conn_rollback(c);
        *res = BACKEND_NOT_FOUND;
        return MYSQL_ATTEMPT_DONE;
    }
    done = mysql_holders_read(c, a->in.key, a->in.key_len, out, res);
    if (done != MYSQL_ATTEMPT_DONE)
        return done;
    if (*res != BACKEND_OK) { /* no live holder: the reaper's rows */
        mysql_conn_rollback(c);
        return MYSQL_ATTEMPT_DONE;
    }
    done = mysql_force_delete(c, &key, &gone);
    if (done != MYSQL_ATTEMPT_DONE) {
        lock_info_clear(out);
        return done;
    }
    if (gone > out->holder_count) /* expired ones went too */
        metrics_lock_expired(gone - out->holder_count);
    a->left = true;
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}
