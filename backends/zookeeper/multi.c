/*
 * backends/zookeeper/multi.c - acquire_multi: several keys taken
 * exclusive under one token in ONE multi, or none of them.
 *
 * A round reads every key at once (bulk.c: its node's children, with a
 * watch, and h), reaps what is dead (expired or void holders, waiters past
 * their deadline, markers left without their h) and judges: what it reaped
 * is free, for the multi checks it again. When no key has a live holder or
 * waiter, one multi makes, for every key, what a single
 * exclusive grant makes (recipe.c): the key's node, h with the grant_by of
 * this call, its marker t<token>, h set again for its stat. Where the key's
 * node exists (empty when read), the multi deletes and recreates it: the
 * delete fails with ZNOTEMPTY if a waiter or a holder came since, so the
 * whole multi checks "nobody holds or waits" atomically, with no lock of
 * lockd's and no order between keys to deadlock on. Each fence is its h's
 * czxid: every key of one grant shares the multi's zxid, still greater
 * than every earlier grant of each key. The first try of a call is that
 * multi before any read, as zk_acq_fresh() does for one key: free keys
 * usually have no node, and its creates fail if one is there.
 *
 * The watch set by the listing notifies this instance (zk_node_watcher()
 * names the key) when a child of a held key's node goes or comes: its
 * holder released or reaped, a waiter leaving. An expiry nobody reaps is
 * left to the retry hint, as for single keys.
 */
#include "backends/zookeeper/zk.h"

#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/text.h"

/* An acquire_multi: its keys and what its grant writes in each h. */
struct zk_macq {
    struct zk_multi m;
    struct zk_holder mine; /* the single exclusive layout, holds 1 */
    char data[ZK_DATA_MAX];
    size_t len;
    size_t last_failed; /* the key the last multi was refused on */
};

/* What the grant writes: 0, or -1 when the token or owner cannot be
 * stored (never for lockd's). */
static int zk_macq_setup(struct zk_macq *a,
                         const struct lock_multi_req *req,
                         int64_t grant_by)
{
    struct zk_holder *h = &a->mine;
    size_t tlen = strlen(req->token);

    memset(h, 0, sizeof(*h));
    if (tlen > LOCK_TOKEN_MAX ||
        (req->owner != NULL && strlen(req->owner) > LOCK_OWNER_MAX))
        return -1;
    memcpy(h->token, req->token, tlen + 1);
    h->ttl_ms = h->run_ms = req->ttl_ms;
    h->grant_by = grant_by;
    h->mode = LOCK_EXCLUSIVE;
    h->holds = 1;
    if (req->owner != NULL) {
        h->has_owner = true;
        memcpy(h->owner, req->owner, strlen(req->owner) + 1);
    }
    return zk_fmt_holder(a->data, sizeof(a->data), h, &a->len);
}

/* ---- looking at a key -------------------------------------------------- */

/* A shared key's group h: held while any holder lives (the least of what
 * is left of them is the hint); the dead are reaped, and with the last the
 * group goes. ZK_GO_ON, -1 (look again) or an answer. */
static int zk_macq_group(struct zk_macq *a, struct zk_mkey *k)
{
    struct zk_multi *m = &a->m;
    struct zk_member *ms = NULL;
    size_t n = 0, live, reaped = 0;
    int64_t min_left;
    int rc = zk_members_load(m->be, m->cn, &k->p, NULL, m->dl, &ms, &n);

    if (rc == ZNONODE)
        return -1;
    if (rc == ZSYSTEMERROR)
        return BACKEND_NO_MEMORY;
    if (rc != ZOK)
        return zk_unavailable("read holders", rc);
    live = zk_members_live(ms, n, &min_left);
    rc = zk_group_reap(m->be, m->cn, &k->p, &k->l.h, k->l.st.version, ms, n,
                       m->dl, &reaped);
    free(ms);
    if (live > 0 || (rc == ZOK && reaped == 0)) {
        k->l.held = true; /* a group without holders is not ours to fix */
        k->l.left = live > 0 ? min_left : 0;
        return ZK_GO_ON;
    }
    if (rc == ZOK)
        return ZK_GO_ON; /* the last holders went, with the group */
    if (rc == ZNONODE || rc == ZBADVERSION)
        return -1;
    return zk_unavailable("reap holders", rc);
}

/* Key k's h as read (slot hs): held (k->l.held, k->l.left), none or
 * reaped (ZK_GO_ON), changed since (-1: look again), or an answer. An h
 * under this call's own
 * token is a grant of an earlier try whose answer was lost: nobody was
 * told it is theirs, so it is freed like a dead one. */
static int zk_macq_holder(struct zk_macq *a,
                          struct zk_mkey *k,
                          const struct zk_batch_slot *hs)
{
    struct zk_multi *m = &a->m;
    struct zk_mlook *l = &k->l;
    int rc;

    if (hs->rc != ZOK)
        return ZK_GO_ON;
    l->has_h = true;
    l->st = hs->stat;
    l->parsed = zk_parse_holder(hs->data, hs->data_len, &l->h) == 0;
    if (!l->parsed) {
        log_warn("zookeeper: %s holds data lockd cannot read; treating "
                 "the key as held",
                 k->p.hpath);
        l->held = true;
        return ZK_GO_ON;
    }
    if (l->h.group)
        return zk_macq_group(a, k);
    if (!text_secret_eq(l->h.token, m->req->token)) {
        l->left = zk_remaining(m->be, &l->h, &l->st);
        if (l->left > 0) {
            l->held = true;
            return ZK_GO_ON;
        }
    }
    l->left = 0;
    rc = zk_reap_holder(m->be, m->cn, &k->p, &l->h, l->st.version, m->dl,
                        k->p.key, k->p.key_len);
    if (rc == ZOK)
        return ZK_GO_ON;
    if (rc == ZNONODE || rc == ZBADVERSION)
        return -1;
    return zk_unavailable("reap holder", rc);
}

/* Delete one child of k's node (a dead waiter, a stray marker):
 * ZK_GO_ON, or UNAVAILABLE. */
static int
zk_macq_drop_kid(struct zk_macq *a, const struct zk_mkey *k, const char *name)
{
    char path[ZK_PATH_MAX];
    int rc;

    if (zk_child_path(k->p.parent, name, path, sizeof(path)) != 0)
        return BACKEND_UNAVAILABLE;
    rc = zk_delete(a->m.cn, path, -1, a->m.dl);
    if (rc != ZOK && rc != ZNONODE)
        return zk_unavailable("reap node", rc);
    return ZK_GO_ON;
}

/* Key k's children (slot ls): a live waiter holds it for us (a multi
 * never overtakes one); dead waiters are reaped, and so are markers and
 * shared holders listed without h (their h went without them: nobody
 * makes one of those again, they only keep the node from going).
 * ZK_GO_ON or an answer. */
static int zk_macq_kids(struct zk_macq *a,
                        struct zk_mkey *k,
                        const struct zk_batch_slot *ls)
{
    bool h_listed = false;
    int64_t now = zk_server_now(a->m.be);
    int rc;

    for (int i = 0; i < ls->nkids; i++)
        h_listed |= strcmp(ls->kids[i], "h") == 0;
    for (int i = 0; i < ls->nkids; i++) {
        const char *name = ls->kids[i];
        struct zk_kid kid;
        if (strcmp(name, "h") == 0)
            continue;
        if (name[0] == 't' || name[0] == 's') {
            if (h_listed || k->l.has_h)
                continue; /* h's, or a member of its group */
            /* only while no h exists: it may be a new grant's by now */
            rc = zk_drop_stray(a->m.cn, &k->p, name, a->m.dl);
            if (rc == ZNODEEXISTS)
                return -1; /* granted since our read: look again */
            if (rc != ZOK && rc != ZNONODE)
                return zk_unavailable("reap node", rc);
            continue;
        } else if (zk_parse_waiter(name, &kid) == 0 && kid.deadline < now) {
            rc = zk_macq_drop_kid(a, k, name);
        } else {
            k->l.held = true; /* a waiter (or what lockd cannot read) */
            continue;
        }
        if (rc != ZK_GO_ON)
            return rc;
    }
    return ZK_GO_ON;
}

/* Judge key k from its listing and h: ZK_GO_ON, -1 or an answer. */
static int zk_macq_look(struct zk_macq *a,
                        struct zk_mkey *k,
                        const struct zk_batch_slot *ls,
                        const struct zk_batch_slot *hs)
{
    int rh, rk;

    if (ls->rc != ZOK)
        return hs->rc == ZOK ? -1 : ZK_GO_ON; /* made since: list again */
    k->l.node = true;
    rh = zk_macq_holder(a, k, hs);
    if (rh != ZK_GO_ON && rh != -1)
        return rh;
    rk = zk_macq_kids(a, k, ls);
    if (rk != ZK_GO_ON)
        return rk;
    return rh;
}

/* ---- answering --------------------------------------------------------- */

/* HELD: the keys with a holder or a waiter, and the least of what is left
 * of their holders. */
static int zk_macq_held(struct zk_macq *a, struct lock_multi_grant *out)
{
    uint64_t retry = 0;

    for (size_t i = 0; i < a->m.n; i++) {
        const struct zk_mlook *l = &a->m.keys[i].l;
        out->held[i] = l->held;
        if (l->held && l->left > 0 && (retry == 0 || (uint64_t)l->left < retry))
            retry = (uint64_t)l->left;
    }
    out->retry_ms = retry;
    return BACKEND_HELD;
}

/* Our grant came too late to be one: free every h of it (with its marker,
 * at the version it was made with), in one multi. Void or expired for
 * everyone already, so a failure leaves nothing anyone could take for a
 * grant. */
static void zk_macq_free(struct zk_macq *a)
{
    struct zk_big b;
    size_t failed;

    if (zk_big_init(&b, 2 * (int)a->m.n) != 0)
        return;
    for (size_t i = 0; i < a->m.n; i++) {
        struct zk_mkey *k = &a->m.keys[i];
        zk_big_delete(&b, i, k->tpath, -1);
        zk_big_delete(&b, i, k->p.hpath, k->l.st.version);
    }
    zk_big_run(a->m.cn, &b, a->m.dl, &failed);
    zk_big_cleanup(&b);
    for (size_t i = 0; i < a->m.n; i++)
        zk_notify(a->m.be, a->m.keys[i].p.key, a->m.keys[i].p.key_len);
}

/* The grant committed (multi sent at sent): answer it as zk_acq_own()
 * answers a single one, only while every instance would call every key
 * held. */
static int zk_macq_own(struct zk_macq *a,
                       const struct zk_big *b,
                       int64_t sent,
                       struct lock_multi_grant *out)
{
    struct zk_multi *m = &a->m;
    struct lock_grant g = { 0 };
    bool dead = false;

    zk_clock_sample(m->be, b->stats[0].mtime, sent, clock_mono_ms());
    for (size_t i = 0; i < m->n; i++) {
        struct zk_mkey *k = &m->keys[i];
        k->l.st = b->stats[k->l.stat];
        if (zk_left_surely(m->be, &a->mine, &k->l.st, sent) <= 0 ||
            zk_fill_grant(&k->l.st, a->mine.ttl_ms, a->mine.ttl_ms, &g) != 0)
            dead = true;
        out->fences[i] = g.fence;
        if (i == 0 || g.expires_at_ms < out->expires_at_ms)
            out->expires_at_ms = g.expires_at_ms;
    }
    if (dead) {
        zk_macq_free(a);
        return zk_unavailable("grant keys", ZOPERATIONTIMEOUT);
    }
    out->ttl_ms = a->mine.ttl_ms;
    for (size_t i = 0; i < m->n; i++) {
        zk_own_put(m->be, m->keys[i].p.key, m->keys[i].p.key_len, m->req->token,
                   &m->keys[i].l.st, a->mine.ttl_ms, 1, true);
        zk_index_add(m->be, m->keys[i].p.key, m->keys[i].p.key_len);
    }
    return BACKEND_OK;
}

/* Every key free: the grant, one multi. -1 when something came between
 * our reads and it (the multi changed nothing). */
static int zk_macq_grant(struct zk_macq *a, struct lock_multi_grant *out)
{
    struct zk_multi *m = &a->m;
    struct zk_big b;
    size_t failed;
    int64_t sent;
    int rc;

    if (zk_big_init(&b, 5 * (int)m->n) != 0)
        return BACKEND_NO_MEMORY;
    for (size_t i = 0; i < m->n; i++) {
        struct zk_mkey *k = &m->keys[i];
        if (k->l.node) /* ZNOTEMPTY if anyone holds or waits by now */
            zk_big_delete(&b, i, k->p.parent, -1);
        zk_big_create(&b, m->cn, i, k->p.parent, NULL, 0);
        zk_big_create(&b, m->cn, i, k->p.hpath, a->data, a->len);
        zk_big_create(&b, m->cn, i, k->tpath, NULL, 0);
        /* its stat: the fence (czxid) and the start of the TTL (mtime) */
        k->l.stat = zk_big_set(&b, i, k->p.hpath, a->data, a->len, 0);
    }
    sent = clock_mono_ms();
    rc = zk_big_run(m->cn, &b, m->dl, &failed);
    if (rc == ZOK) {
        rc = zk_macq_own(a, &b, sent, out);
    } else if (rc == ZNODEEXISTS || rc == ZNONODE || rc == ZNOTEMPTY) {
        a->last_failed = failed;
        rc = -1;
    } else {
        /* it may still commit: void by its grant_by if it does too late */
        rc = zk_unavailable("grant keys", rc);
    }
    zk_big_cleanup(&b);
    return rc;
}

/* One round: read, reap, judge, and grant when every key is free. An
 * answer, or -1 to look again. */
static int zk_macq_round(struct zk_macq *a, struct lock_multi_grant *out)
{
    struct zk_multi *m = &a->m;
    struct zk_batch *b = NULL;
    bool moved = false, held = false;
    int rc;

    zk_multi_reset(m);
    rc = zk_read_keys(m->be, m->cn, m->keys, m->n,
                      ZK_READ_LIST | ZK_READ_WATCH | ZK_READ_H, m->dl, &b);
    if (rc == ZSYSTEMERROR)
        return BACKEND_NO_MEMORY;
    if (rc != ZOK)
        return zk_unavailable("read keys", rc);
    for (size_t i = 0; i < m->n; i++) {
        rc = zk_macq_look(a, &m->keys[i], &b->slots[2 * i],
                          &b->slots[2 * i + 1]);
        if (rc != ZK_GO_ON && rc != -1)
            break;
        moved |= rc == -1;
        held |= m->keys[i].l.held;
        rc = ZK_GO_ON;
    }
    zk_batch_unref(b);
    if (rc != ZK_GO_ON)
        return rc;
    if (held) /* what was reaped is free now, but one key is not */
        return zk_macq_held(a, out);
    return moved ? -1 : zk_macq_grant(a, out);
}

enum backend_result zk_be_acquire_multi(struct backend *b,
                                        const struct lock_multi_req *req,
                                        struct lock_multi_grant *out)
{
    struct zk_be *be = (struct zk_be *)b;
    struct zk_macq a = { .last_failed = SIZE_MAX };
    enum backend_result r;

    /* by the server's clock, a bit earlier than we give up on it */
    if (zk_macq_setup(&a, req, zk_server_now(be) + be->timeout_ms) != 0) {
        log_error("zookeeper: acquire: token or owner cannot be stored");
        return BACKEND_UNAVAILABLE;
    }
    r = zk_multi_open(&a.m, be, req);
    if (r != BACKEND_OK)
        return r;
    for (size_t i = 0; i < a.m.n; i++)
        if (a.m.keys[i].tpath[0] == '\0')
            goto out; /* a token lockd made always names a marker */
    for (int i = 0; i < ZK_MAX_ROUNDS; i++) {
        /* free keys usually have no node: try the grant before any read
         * (its creates fail if a node is there, and then we look) */
        int rr = i == 0 ? zk_macq_grant(&a, out) : zk_macq_round(&a, out);
        if (rr >= 0) {
            r = (enum backend_result)rr;
            goto done;
        }
        if (clock_mono_ms() >= a.m.dl)
            break;
    }
    /* contended beyond our rounds: held, and look again soon */
    for (size_t i = 0; i < a.m.n; i++)
        out->held[i] = a.m.keys[i].l.held || i == a.last_failed;
    out->retry_ms = 10;
    r = BACKEND_HELD;
    goto done;
out:
    r = BACKEND_UNAVAILABLE;
done:
    zk_multi_close(&a.m);
    return r;
}
