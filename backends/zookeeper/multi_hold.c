/*
 * backends/zookeeper/multi_hold.c - renew_multi and release_multi: the
 * holds of one token on several keys, renewed or given back in ONE multi.
 *
 * A round reads h of every key at once (bulk.c), finds the token's holder
 * on each as holders.c does for one key (h under its marker, or its
 * shared holder s<token> in a group; expired ones reaped), then writes
 * every key in one multi at the versions read, each exclusive write with
 * its marker checked: a renew, release or reap in between fails the whole
 * multi (nothing changed) and the round looks again, at most ZK_MAX_ROUNDS
 * times within the call's deadline.
 */
#include "backends/zookeeper/zk.h"

#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/text.h"

/* Does the token hold key k, by its h as read (slot hs)? OK (k->l.mine;
 * with k->l.member its shared holder k->l.m, h and st then the group's),
 * NOT_FOUND, MISMATCH, UNAVAILABLE. As zk_find_mine() (holders.c): a
 * token that cannot name a marker never holds anything. */
static enum backend_result zk_mhold_find(struct zk_multi *m,
                                         struct zk_mkey *k,
                                         const struct zk_batch_slot *hs)
{
    struct zk_mlook *l = &k->l;
    enum backend_result r = BACKEND_UNAVAILABLE;

    if (hs->rc != ZOK)
        return BACKEND_NOT_FOUND;
    l->has_h = true;
    l->st = hs->stat;
    l->parsed = zk_parse_holder(hs->data, hs->data_len, &l->h) == 0;
    if (!l->parsed)
        return BACKEND_MISMATCH;
    if (l->h.group) {
        if (zk_member_find(m->be, m->cn, &k->p, &l->h, &l->st, m->dl, &l->m,
                           &r) != ZOK)
            return r;
        l->member = l->mine = true;
        return BACKEND_OK;
    }
    if (zk_remaining(m->be, &l->h, &l->st) <= 0) {
        zk_reap_holder(m->be, m->cn, &k->p, &l->h, l->st.version, m->dl,
                       k->p.key, k->p.key_len);
        return BACKEND_NOT_FOUND;
    }
    if (k->tpath[0] == '\0' || !text_secret_eq(m->req->token, l->h.token))
        return BACKEND_MISMATCH;
    l->mine = true;
    return BACKEND_OK;
}

/* A multi refused or unanswered: -1 to look again when things moved under
 * us, else UNAVAILABLE. */
static int zk_mhold_failed(const char *what, int rc)
{
    if (rc == ZBADVERSION || rc == ZNONODE || rc == ZNOTEMPTY)
        return -1;
    return zk_unavailable(what, rc);
}

/* ---- renew ------------------------------------------------------------- */

/* Every key is the token's (one round's reads): the renew's multi, each
 * holder set at the version read to its new data (its TTL from now). */
static void zk_mren_build(struct zk_multi *m, struct zk_big *b)
{
    for (size_t i = 0; i < m->n; i++) {
        struct zk_mkey *k = &m->keys[i];
        struct zk_mlook *l = &k->l;
        l->now = l->member ? l->m.h : l->h;
        l->now.ttl_ms = m->req->ttl_ms != 0 ? m->req->ttl_ms : l->now.ttl_ms;
        l->now.run_ms = l->now.ttl_ms;
        l->now.grant_by = 0;
        if (zk_fmt_holder(l->data, sizeof(l->data), &l->now, &l->len) != 0)
            l->len = 0; /* it was read from the same format: never */
        if (l->member) {
            l->stat =
                zk_big_set(b, i, k->spath, l->data, l->len, l->m.st.version);
        } else {
            /* a later grant of the key (same version) is never written */
            zk_big_check(b, i, k->tpath, -1);
            l->stat =
                zk_big_set(b, i, k->p.hpath, l->data, l->len, l->st.version);
        }
    }
}

/* The renew committed (sent at sent): the answer, or UNAVAILABLE when
 * none of some key's new TTL is surely left (too late to be one). */
static int zk_mren_answer(struct zk_multi *m,
                          const struct zk_big *b,
                          int64_t sent,
                          struct lock_multi_grant *out)
{
    struct lock_grant g = { 0 };
    struct zk_own o;
    bool dead = false;

    zk_clock_sample(m->be, b->stats[0].mtime, sent, clock_mono_ms());
    for (size_t i = 0; i < m->n; i++) {
        struct zk_mkey *k = &m->keys[i];
        struct zk_mlook *l = &k->l;
        const struct Stat *st = &b->stats[l->stat];
        if (!l->member)
            zk_own_put(
                m->be, k->p.key, k->p.key_len, m->req->token, st, l->now.ttl_ms,
                l->now.holds,
                !zk_own_get(m->be, k->p.key, k->p.key_len, m->req->token, &o) ||
                    o.alone);
        if (zk_left_surely(m->be, &l->now, st, sent) <= 0 ||
            zk_fill_grant(st, l->now.ttl_ms, l->now.ttl_ms, &g) != 0)
            dead = true;
        out->fences[i] = g.fence;
        if (i == 0 || g.ttl_ms < out->ttl_ms)
            out->ttl_ms = g.ttl_ms;
        if (i == 0 || g.expires_at_ms < out->expires_at_ms)
            out->expires_at_ms = g.expires_at_ms;
    }
    if (dead)
        return zk_unavailable("renew keys", ZOPERATIONTIMEOUT);
    return BACKEND_OK;
}

/* One round of a renew: an answer, or -1 to look again. */
static int zk_mren_round(struct zk_multi *m, struct lock_multi_grant *out)
{
    struct zk_batch *rd = NULL;
    struct zk_big b;
    enum backend_result r = BACKEND_OK;
    size_t failed;
    int64_t sent;
    int rc;

    zk_multi_reset(m);
    rc = zk_read_keys(m->be, m->cn, m->keys, m->n, ZK_READ_H, m->dl, &rd);
    if (rc != ZOK)
        return rc == ZSYSTEMERROR ? BACKEND_NO_MEMORY
                                  : zk_unavailable("read keys", rc);
    /* in req order: the first key the token does not hold answers */
    for (size_t i = 0; i < m->n && r == BACKEND_OK; i++) {
        r = zk_mhold_find(m, &m->keys[i], &rd->slots[2 * i + 1]);
        out->bad = i;
    }
    zk_batch_unref(rd);
    if (r != BACKEND_OK)
        return r;
    out->bad = 0;
    if (zk_big_init(&b, 2 * (int)m->n) != 0)
        return BACKEND_NO_MEMORY;
    zk_mren_build(m, &b);
    sent = clock_mono_ms();
    rc = zk_big_run(m->cn, &b, m->dl, &failed);
    rc = rc == ZOK ? zk_mren_answer(m, &b, sent, out)
                   : zk_mhold_failed("renew keys", rc);
    zk_big_cleanup(&b);
    return rc;
}

/* Run round (a renew or a release round) until it answers, within the
 * call's deadline and ZK_MAX_ROUNDS: a version that moved under a round
 * makes it look again. */
static enum backend_result
zk_mhold_rounds(struct backend *b,
                const struct lock_multi_req *req,
                struct lock_multi_grant *out,
                int (*round)(struct zk_multi *, struct lock_multi_grant *))
{
    struct zk_multi m;
    enum backend_result r = zk_multi_open(&m, (struct zk_be *)b, req);

    if (r != BACKEND_OK)
        return r;
    r = BACKEND_UNAVAILABLE;
    for (int i = 0; i < ZK_MAX_ROUNDS && clock_mono_ms() < m.dl; i++) {
        int rr = round(&m, out);
        if (rr >= 0) {
            r = (enum backend_result)rr;
            break;
        }
    }
    zk_multi_close(&m);
    return r;
}

enum backend_result zk_be_renew_multi(struct backend *b,
                                      const struct lock_multi_req *req,
                                      struct lock_multi_grant *out)
{
    return zk_mhold_rounds(b, req, out, zk_mren_round);
}

/* ---- release ----------------------------------------------------------- */

/* The key's node may go with its holder: nothing listed (slot ls) but h
 * and what the release deletes, so nobody waits; a waiter coming since
 * fails the multi (ZNOTEMPTY) and the next round sees it. */
static bool zk_mrel_alone(const struct zk_mkey *k,
                          const struct zk_batch_slot *ls)
{
    const char *ours = k->l.member ? k->p.member : k->p.marker;

    if (ls->rc != ZOK || (k->l.member && k->l.h.count > 1))
        return false;
    for (int i = 0; i < ls->nkids; i++)
        if (strcmp(ls->kids[i], "h") != 0 && strcmp(ls->kids[i], ours) != 0)
            return false;
    return true;
}

/* The release's ops for key i, the token's. */
static void zk_mrel_build(struct zk_big *b, struct zk_mkey *k, size_t i)
{
    struct zk_mlook *l = &k->l;

    if (!l->member) {
        zk_big_delete(b, i, k->tpath, -1);
        zk_big_delete(b, i, k->p.hpath, l->st.version);
    } else {
        zk_big_delete(b, i, k->spath, l->m.st.version);
        /* the group counts its holders: one less, or gone with the last */
        if (l->h.count > 1 &&
            zk_fmt_group(l->gdata, sizeof(l->gdata), l->h.limit, l->h.count - 1,
                         &l->glen) == 0)
            zk_big_set(b, i, k->p.hpath, l->gdata, l->glen, l->st.version);
        else
            zk_big_delete(b, i, k->p.hpath, l->st.version);
    }
    if (l->alone)
        zk_big_delete(b, i, k->p.parent, -1);
}

/* The token's holders found this round, given back in one multi. */
static int zk_mrel_write(struct zk_multi *m, struct lock_multi_grant *out)
{
    struct zk_big b;
    size_t failed;
    int rc;

    if (zk_big_init(&b, 4 * (int)m->n) != 0)
        return BACKEND_NO_MEMORY;
    for (size_t i = 0; i < m->n; i++)
        if (m->keys[i].l.mine)
            zk_mrel_build(&b, &m->keys[i], i);
    rc = zk_big_run(m->cn, &b, m->dl, &failed);
    zk_big_cleanup(&b);
    if (rc != ZOK)
        return zk_mhold_failed("release keys", rc);
    for (size_t i = 0; i < m->n; i++) {
        struct zk_mkey *k = &m->keys[i];
        if (!k->l.mine)
            continue;
        out->released[i] = true;
        if (!k->l.member)
            zk_own_drop(m->be, k->p.key, k->p.key_len);
        zk_notify(m->be, k->p.key, k->p.key_len);
    }
    return BACKEND_OK;
}

/* One round of a release: an answer, or -1 to look again. */
static int zk_mrel_round(struct zk_multi *m, struct lock_multi_grant *out)
{
    struct zk_batch *rd = NULL;
    enum backend_result r = BACKEND_OK;
    bool any = false;
    int rc;

    zk_multi_reset(m);
    rc = zk_read_keys(m->be, m->cn, m->keys, m->n, ZK_READ_LIST | ZK_READ_H,
                      m->dl, &rd);
    if (rc != ZOK)
        return rc == ZSYSTEMERROR ? BACKEND_NO_MEMORY
                                  : zk_unavailable("read keys", rc);
    for (size_t i = 0; i < m->n; i++) {
        struct zk_mkey *k = &m->keys[i];
        r = zk_mhold_find(m, k, &rd->slots[2 * i + 1]);
        if (r != BACKEND_OK && r != BACKEND_NOT_FOUND && r != BACKEND_MISMATCH)
            break;
        r = BACKEND_OK;
        k->l.alone = k->l.mine && zk_mrel_alone(k, &rd->slots[2 * i]);
        any |= k->l.mine;
    }
    zk_batch_unref(rd);
    if (r != BACKEND_OK)
        return r;
    if (!any)
        return BACKEND_NOT_FOUND;
    return zk_mrel_write(m, out);
}

enum backend_result zk_be_release_multi(struct backend *b,
                                        const struct lock_multi_req *req,
                                        struct lock_multi_grant *out)
{
    return zk_mhold_rounds(b, req, out, zk_mrel_round);
}
