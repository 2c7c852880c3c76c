/*
 * backends/zookeeper/shared.c - shared holders: reading them, judging
 * them, reaping the dead ones, and the shared grant. A key held shared has
 *
 *   <chroot>/lockd/locks/k<base64url(key)>
 *       h                "lockd2 g <limit> <count>": the group, which
 *                        excludes an exclusive grant (that creates h) and
 *                        counts the holders
 *       s<token>         one per holder, persistent: its TTL, owner, hold
 *                        count and Idempotency-Key; expires at its mtime +
 *                        ttl_ms (server clock); the fence is its czxid
 *
 * Every change of the set of holders (a grant, release or reap) sets or
 * deletes h at the version it read, in the same multi as the holder's
 * create or delete: two decisions made from one read never both commit,
 * and the count in h is always the number of s nodes. A renew or a
 * re-entry only sets s<token> at its version (the name is the token: no
 * other grant can be at that path). A grant's czxid is greater than any
 * earlier grant's of the key, exclusive (h's czxid) or shared.
 */
#include "backends/zookeeper/zk.h"

#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/text.h"

/* ---- reading and judging ---------------------------------------------- */

/* The shared holders named in a listing (kc, or a new one when NULL) read
 * at once: ZOK with *out (owned, *n long; NULL when none), or an error.
 * Each one's left is set; one with data lockd cannot read is live. */
int zk_members_load(struct zk_be *be,
                    struct zk_conn *cn,
                    const struct zk_paths *p,
                    struct zk_call *kc,
                    int64_t dl,
                    struct zk_member **out,
                    size_t *n)
{
    struct zk_call *own = NULL;
    struct zk_member *ms;
    size_t k = 0;
    int rc = ZOK;

    *out = NULL;
    *n = 0;
    if (kc == NULL) {
        rc = zk_get_kids(cn, p->parent, dl, &own);
        if (rc != ZOK)
            return rc;
        kc = own;
    }
    ms = calloc((size_t)kc->nkids + 1, sizeof(*ms));
    if (ms == NULL) {
        zk_call_unref(own);
        return ZSYSTEMERROR;
    }
    for (int i = 0; i < kc->nkids; i++) {
        const char *name = kc->kids[i];
        if (name[0] == 's' && strlen(name) < sizeof(ms[k].name))
            memcpy(ms[k++].name, name, strlen(name) + 1);
    }
    zk_call_unref(own);
    if (k > 0)
        rc = zk_get_members(cn, p->parent, ms, k, dl);
    for (size_t i = 0; i < k; i++)
        ms[i].left = ms[i].gone     ? 0
                     : ms[i].parsed ? zk_remaining(be, &ms[i].h, &ms[i].st)
                                    : ZK_WAITER_RECHECK_MS;
    if (rc != ZOK) {
        free(ms);
        return rc;
    }
    *out = ms;
    *n = k;
    return ZOK;
}

/* How many of ms are live, and the least of their left (retry hint). */
size_t zk_members_live(const struct zk_member *ms, size_t n, int64_t *min_left)
{
    size_t live = 0;

    *min_left = 0;
    for (size_t i = 0; i < n; i++) {
        if (ms[i].gone || ms[i].left <= 0)
            continue;
        if (live == 0 || ms[i].left < *min_left)
            *min_left = ms[i].left;
        live++;
    }
    return live;
}

/*
 * Delete the dead among ms (expired or void, up to ZK_MULTI_MAX - 3 at a
 * time) with the group g seen at version hv, in one multi that sets h to
 * the count left or deletes it with the last. ZOK with *reaped set (0:
 * none was dead), or the store's code (ZBADVERSION, ZNONODE: things moved).
 */
int zk_group_reap(struct zk_be *be,
                  struct zk_conn *cn,
                  const struct zk_paths *p,
                  const struct zk_holder *g,
                  int hv,
                  const struct zk_member *ms,
                  size_t n,
                  int64_t dl,
                  size_t *reaped)
{
    const char *names[ZK_MULTI_MAX];
    int versions[ZK_MULTI_MAX];
    char gdata[ZK_GROUP_MAX];
    struct zk_drop_ops o = { .names = names, .versions = versions, .hv = hv };
    int rc;

    *reaped = 0;
    for (size_t i = 0; i < n && o.n < ZK_MULTI_MAX - 3; i++) {
        if (ms[i].gone || !ms[i].parsed || ms[i].left > 0)
            continue;
        names[o.n] = ms[i].name;
        versions[o.n++] = ms[i].st.version;
    }
    if (o.n == 0)
        return ZOK;
    if (g->count > o.n && zk_fmt_group(gdata, sizeof(gdata), g->limit,
                                       g->count - (uint32_t)o.n, &o.glen) == 0)
        o.gdata = gdata;
    rc = zk_drop_members(cn, p, &o, false, dl);
    if (rc == ZOK) {
        *reaped = o.n;
        metrics_lock_expired(o.n);
        if (p->key != NULL)
            zk_notify(be, p->key, p->key_len);
    }
    return rc;
}

/* ---- one shared holder by token (renew, release) ----------------------- */

/* Read h (group) and s<token>: ZOK when both are there, parsed, and the
 * holder is live; BACKEND-like verdicts in *r otherwise (NOT_FOUND when no
 * live holder at all, MISMATCH when others hold it). Dead holders seen
 * are reaped. */
int zk_member_find(struct zk_be *be,
                   struct zk_conn *cn,
                   const struct zk_paths *p,
                   const struct zk_holder *g,
                   const struct Stat *gst,
                   int64_t dl,
                   struct zk_member *m,
                   enum backend_result *r)
{
    struct zk_member *ms = NULL;
    size_t n = 0, live, reaped;
    int64_t min_left;
    int rc;

    memset(m, 0, sizeof(*m));
    memcpy(m->name, p->member, sizeof(m->name));
    rc = p->member[0] != '\0' ? zk_get_members(cn, p->parent, m, 1, dl)
                              : ZBADARGUMENTS;
    if (rc == ZOK && !m->gone && m->parsed) {
        m->left = zk_remaining(be, &m->h, &m->st);
        if (m->left > 0)
            return ZOK;
    }
    if (rc != ZOK && rc != ZBADARGUMENTS) {
        *r = zk_unavailable("read holder", rc);
        return rc;
    }
    /* not ours (any more): is the key held by others? */
    rc = zk_members_load(be, cn, p, NULL, dl, &ms, &n);
    if (rc != ZOK) {
        *r = rc == ZNONODE ? BACKEND_NOT_FOUND
                           : zk_unavailable("read holders", rc);
        return rc == ZNONODE ? ZNONODE : rc;
    }
    live = zk_members_live(ms, n, &min_left);
    zk_group_reap(be, cn, p, g, gst->version, ms, n, dl, &reaped);
    free(ms);
    *r = live > 0 ? BACKEND_MISMATCH : BACKEND_NOT_FOUND;
    return ZNONODE;
}

/* Free our own shared holder s<token>, judged dead by its grant's caller
 * (too late to answer): one multi with the group's version. */
int zk_member_reap_token(struct zk_be *be,
                         struct zk_conn *cn,
                         const struct zk_paths *p,
                         int64_t dl)
{
    struct zk_holder g;
    struct zk_member m = { 0 };
    struct Stat gst;
    bool parsed = false;
    size_t reaped;
    int rc = zk_get(be, cn, p->hpath, false, dl, &g, &gst, &parsed);

    if (rc != ZOK)
        return rc;
    if (!parsed || !g.group || p->member[0] == '\0')
        return ZNONODE;
    memcpy(m.name, p->member, sizeof(m.name));
    rc = zk_get_members(cn, p->parent, &m, 1, dl);
    if (rc != ZOK)
        return rc;
    if (m.gone || !m.parsed)
        return ZNONODE;
    m.left = 0;
    return zk_group_reap(be, cn, p, &g, gst.version, &m, 1, dl, &reaped);
}

/* ---- the shared grant --------------------------------------------------- */

/* May this shared waiter be granted now? Every waiter ahead is shared, no
 * exclusive holder, and the holders plus those waiters leave room. */
bool zk_acq_share_ok(const struct zk_acq *a, const struct zk_look *l)
{
    uint32_t n = 0;

    for (size_t i = 0; i < l->ahead; i++)
        if (!l->kids[i].shared)
            return false;
    if (l->has_h) {
        /* under another limit: only while none of its holders is seen
         * live yet (a listing older than h): look again */
        if (!l->parsed || !l->h.group || l->h.limit != a->req->limit)
            return false;
        n = l->h.count;
    }
    return a->req->limit == 0 || n + l->ahead < a->req->limit;
}

/* The shared grant's multi for a (the group at hv, -1: none yet, holding
 * count before us); returns like a round. */
static int zk_acq_share_at(struct zk_acq *a,
                           bool make_parent,
                           int hv,
                           uint32_t count,
                           bool alone,
                           struct lock_grant *out)
{
    struct zk_waiter *w = a->w;
    char gdata[ZK_GROUP_MAX];
    struct zk_share_ops o = { .make_parent = make_parent,
                              .hv = hv,
                              .gdata = gdata,
                              .mdata = a->data,
                              .mlen = a->data_len };
    enum zk_share_op failed;
    struct Stat st;
    int64_t sent;
    int rc;

    if (zk_fmt_group(gdata, sizeof(gdata), a->req->limit, count + 1, &o.glen) !=
        0)
        return BACKEND_UNAVAILABLE;
    o.waiter_name = w != NULL && w->name[0] != '\0' ? w->name : NULL;
    sent = clock_mono_ms();
    rc = zk_grant_shared(a->cn, &a->p, &o, a->dl, &st, &failed);
    if (rc == ZOK)
        return zk_acq_own(a, &a->mine, &st, sent, NULL, alone, out);
    if (rc == ZNONODE && failed == ZK_SHARE_WAITER)
        w->name[0] = '\0'; /* our place went (our session ended) */
    if (rc == ZNONODE || rc == ZNODEEXISTS || rc == ZBADVERSION)
        return -1;
    /* the multi may have happened: keep our name, so the next round finds
     * s<token> under our token */
    return zk_unavailable("grant", rc);
}

/* A free key without a node: make it, the group and our holder at once. */
int zk_acq_share_fresh(struct zk_acq *a, struct lock_grant *out)
{
    return zk_acq_share_at(a, true, -1, 0, true, out);
}

/* Grant a shared: join the group (or make it, on a free key), leaving our
 * place in the same multi. The caller has checked the queue's rule. */
int zk_acq_share(struct zk_acq *a, struct zk_look *l, struct lock_grant *out)
{
    bool alone = l->nw <= (l->own != SIZE_MAX ? 1u : 0u);

    if (!l->has_h)
        return zk_acq_share_at(a, false, -1, 0, alone, out);
    if (!l->parsed || !l->h.group)
        return -1;
    return zk_acq_share_at(a, false, l->st.version, l->h.count, alone, out);
}

/* The sweep's look at a group: reap its dead holders. Returns the live
 * ones (0 when they cannot be read). */
size_t zk_sweep_group(struct zk_be *be,
                      struct zk_conn *cn,
                      const struct zk_paths *p,
                      const struct zk_holder *g,
                      const struct Stat *gst,
                      struct zk_call *kc,
                      int64_t dl)
{
    struct zk_member *ms = NULL;
    size_t n = 0, reaped, live;
    int64_t min_left;

    if (zk_members_load(be, cn, p, kc, dl, &ms, &n) != ZOK)
        return 0;
    live = zk_members_live(ms, n, &min_left);
    zk_group_reap(be, cn, p, g, gst->version, ms, n, dl, &reaped);
    free(ms);
    return live;
}
