/*
 * backends/zookeeper/list.c - list(): a page of the held keys, in byte
 * order. The candidates come from the index (index.c), never from a
 * listing of every key: keys that start with the prefix and sort after
 * the cursor, taken in chunks of about what the page still needs. Each
 * chunk's holders h are read at once (one round trip); a key held shared
 * costs one more round trip for its holders s<token>. Keys whose holder
 * is gone or expired are left out (the sweep and the next acquire reap
 * them). At most ZK_LIST_BUDGET(limit) = 2 x limit + 16 keys are read per
 * call: past that the page ends early, with more and resume set to the
 * last key looked at.
 *
 * What it cannot tell: a key granted through another instance appears
 * only after this one's next relisting (index.c: 2 s with up to 5000
 * keys in the store, N / 2500 s for N keys above).
 */
#include "backends/zookeeper/zk.h"

#include <stdlib.h>
#include <string.h>

#include "lib/log.h"

/* The summary of a key's holders (h read as hst) into e: OK, NOT_FOUND
 * (no live holder), UNAVAILABLE, NO_MEMORY. */
static enum backend_result zk_list_one(struct zk_be *be,
                                       struct zk_conn *cn,
                                       const struct zk_ixkey *k,
                                       const struct zk_holder *h,
                                       const struct Stat *hst,
                                       int64_t dl,
                                       struct lock_entry *e)
{
    struct lock_info info = { 0 };
    enum backend_result r;
    int64_t left;

    if (h->group) {
        struct zk_member *ms = NULL;
        struct zk_paths p;
        size_t n = 0;
        int rc;
        if (zk_paths_key(be, k->key, k->len, NULL, &p) != 0)
            return BACKEND_NOT_FOUND;
        rc = zk_members_load(be, cn, &p, NULL, dl, &ms, &n);
        if (rc == ZNONODE)
            return BACKEND_NOT_FOUND;
        if (rc != ZOK)
            return rc == ZSYSTEMERROR ? BACKEND_NO_MEMORY
                                      : zk_unavailable("list holders", rc);
        r = zk_inspect_group(h, ms, n, &info);
        free(ms);
    } else {
        left = zk_remaining(be, h, hst);
        if (left <= 0 || hst->czxid <= 0 ||
            (uint64_t)hst->czxid > LOCK_FENCE_MAX)
            return BACKEND_NOT_FOUND;
        r = zk_inspect_one(h, hst, left, &info);
    }
    if (r != BACKEND_OK)
        return r;
    memcpy(e->key, k->key, k->len + 1);
    e->key_len = k->len;
    e->mode = info.mode;
    e->fence = info.fence;
    e->ttl_ms = info.ttl_ms;
    e->expires_at_ms = info.expires_at_ms;
    e->holder_count = info.holder_count;
    e->has_owner = info.mode == LOCK_EXCLUSIVE && info.has_owner;
    if (e->has_owner)
        memcpy(e->owner, info.owner, sizeof(e->owner));
    lock_info_clear(&info);
    return BACKEND_OK;
}

/* Read the h of keys ks[0..n) at once, and add the held ones to out in
 * order until it is full. *looked: how many of ks were looked at. */
static enum backend_result zk_list_chunk(struct zk_be *be,
                                         struct zk_conn *cn,
                                         const struct zk_ixkey *ks,
                                         size_t n,
                                         uint32_t limit,
                                         int64_t dl,
                                         struct lock_list *out,
                                         size_t *looked)
{
    struct zk_batch *b = zk_batch_new(n);
    enum backend_result r = BACKEND_OK;
    struct zk_paths p;

    *looked = 0;
    if (b == NULL)
        return BACKEND_NO_MEMORY;
    for (size_t i = 0; i < n; i++) {
        int sent;
        if (zk_paths_key(be, ks[i].key, ks[i].len, NULL, &p) != 0) {
            b->slots[i].rc = ZNONODE; /* never sent: cannot be a node */
            b->slots[i].done = true;
            continue;
        }
        zk_batch_sent(b);
        sent = zoo_aget(cn->zh, p.hpath, 0, zk_batch_on_data, &b->slots[i]);
        if (sent != ZOK)
            zk_batch_not_sent(b, (int)i, sent);
    }
    zk_batch_wait(b, dl);
    pthread_mutex_lock(&b->mu);
    for (size_t i = 0; i < n && r == BACKEND_OK; i++)
        if (!b->slots[i].done ||
            (b->slots[i].rc != ZOK && b->slots[i].rc != ZNONODE))
            r = zk_unavailable("list", b->slots[i].done ? b->slots[i].rc
                                                        : ZOPERATIONTIMEOUT);
    pthread_mutex_unlock(&b->mu);
    /* every slot answered: nothing writes into b any more */
    for (size_t i = 0; r == BACKEND_OK && i < n && out->n < limit; i++) {
        const struct zk_batch_slot *s = &b->slots[i];
        struct zk_holder h;
        enum backend_result one = BACKEND_NOT_FOUND;
        if (s->rc == ZOK && zk_parse_holder(s->data, s->data_len, &h) == 0)
            one = zk_list_one(be, cn, &ks[i], &h, &s->stat, dl,
                              &out->entries[out->n]);
        if (one != BACKEND_OK && one != BACKEND_NOT_FOUND) {
            r = one;
            break;
        }
        (*looked)++;
        out->n += one == BACKEND_OK;
    }
    zk_batch_unref(b);
    return r;
}

static void zk_list_resume(struct lock_list *out, const struct zk_ixkey *k)
{
    out->more = true;
    memcpy(out->resume, k->key, k->len + 1);
    out->resume_len = k->len;
}

enum backend_result zk_be_list(struct backend *b,
                               const struct lock_list_req *req,
                               struct lock_list *out)
{
    struct zk_be *be = (struct zk_be *)b;
    size_t budget = ZK_LIST_BUDGET(req->limit), seen = 0, want, n, looked;
    struct zk_ixkey *ks, last;
    enum backend_result r = BACKEND_OK;
    bool has_last = req->after != NULL, end = false;
    struct zk_conn *cn;
    int64_t dl;

    if (has_last) {
        last.len = req->after_len;
        memcpy(last.key, req->after, req->after_len);
        last.key[last.len] = '\0';
    }
    ks = malloc(((size_t)req->limit + 16) * sizeof(*ks));
    if (ks == NULL)
        return BACKEND_NO_MEMORY;
    cn = zk_conn_get(be);
    if (cn == NULL) {
        free(ks);
        return BACKEND_UNAVAILABLE;
    }
    dl = zk_deadline(be);
    while (r == BACKEND_OK && out->n < req->limit && !end) {
        want = req->limit - out->n + 16;
        if (want > budget - seen)
            want = budget - seen;
        if (want == 0) {
            zk_list_resume(out, &last); /* the budget is spent */
            break;
        }
        n = zk_index_next(be, has_last ? &last : NULL, req->prefix,
                          req->prefix_len, ks, want, &end);
        if (n == 0)
            break;
        r = zk_list_chunk(be, cn, ks, n, req->limit, dl, out, &looked);
        seen += looked;
        if (looked > 0) {
            last = ks[looked - 1];
            has_last = true;
        }
        /* a full page: keys may follow unless this was the last one */
        if (r == BACKEND_OK && out->n == req->limit && !(end && looked == n))
            zk_list_resume(out, &last);
    }
    zk_conn_put(be, cn);
    free(ks);
    if (r != BACKEND_OK)
        out->n = 0;
    return r;
}
