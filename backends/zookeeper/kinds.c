/*
 * backends/zookeeper/kinds.c - what an acquire round checks before the
 * queue's rule: an Idempotency-Key that names a live grant of the key
 * (answered again, nothing changed) and a shared acquire under another
 * limit than the key's holders (limit_mismatch). Both are judged from the
 * round's reads; neither writes anything but reaps of dead holders.
 */
#include "backends/zookeeper/zk.h"

#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"

/* The greatest fence among the dead holders zk_group_reap() deletes. */
static uint64_t zk_dead_fence(const struct zk_member *ms, size_t n)
{
    uint64_t fence = 0;
    size_t k = 0;

    for (size_t i = 0; i < n && k < ZK_MULTI_MAX - 3; i++) {
        if (ms[i].gone || !ms[i].parsed || ms[i].left > 0)
            continue;
        k++;
        if ((uint64_t)ms[i].st.czxid > fence)
            fence = (uint64_t)ms[i].st.czxid;
    }
    return fence;
}

int zk_look_members(struct zk_acq *a, struct zk_look *l)
{
    uint64_t dead;
    size_t reaped;
    int rc;

    if (l->ms_read)
        return ZK_GO_ON;
    rc = zk_members_load(a->be, a->cn, &a->p, l->kc, a->dl, &l->ms, &l->nms);
    if (rc == ZSYSTEMERROR)
        return BACKEND_NO_MEMORY;
    if (rc != ZOK)
        return zk_unavailable("read holders", rc);
    l->ms_read = true;
    dead = zk_dead_fence(l->ms, l->nms);
    rc = zk_group_reap(a->be, a->cn, &a->p, &l->h, l->st.version, l->ms, l->nms,
                       a->dl, &reaped);
    if (rc == ZOK && reaped == 0)
        return ZK_GO_ON;
    if (rc == ZOK && dead > a->expired_fence)
        a->expired_fence = dead; /* a takeover, if this request grants */
    if (rc == ZOK || rc == ZNONODE || rc == ZBADVERSION)
        return -1;
    return zk_unavailable("reap holders", rc);
}

void zk_acq_leave(struct zk_acq *a)
{
    struct zk_waiter *w = a->w;
    char path[ZK_PATH_MAX];
    int rc = ZOK;

    if (w == NULL)
        return;
    if (w->name[0] != '\0' &&
        zk_child_path(a->p.parent, w->name, path, sizeof(path)) == 0)
        rc = zk_delete(a->cn, path, -1, a->dl);
    else if (w->name[0] == '\0' && w->pending)
        rc = ZCONNECTIONLOSS; /* found by its prefix, later */
    if (rc != ZOK && rc != ZNONODE)
        zk_trash_add(a->be, a->p.parent,
                     w->name[0] != '\0' ? w->name : w->prefix,
                     w->name[0] == '\0');
    zk_waiter_free(a->be, w);
    a->w = NULL;
    a->req->waiter->be_data = NULL;
    /* the next waiter here may have watched our place */
    zk_notify(a->be, a->req->key, a->req->key_len);
}

/* h (or a shared holder) was granted with req's Idempotency-Key: answer
 * it again if it is surely live, nothing changed. */
static int zk_acq_replay(struct zk_acq *a,
                         const struct zk_holder *h,
                         const struct Stat *st,
                         struct lock_grant *out)
{
    const struct lock_req *req = a->req;
    int64_t left = zk_left_surely(a->be, h, st, 0);
    size_t n = strlen(h->token);

    if (left <= 0)
        return ZK_GO_ON; /* it may be gone: not one to answer */
    if (h->mode != req->mode ||
        (h->mode == LOCK_SHARED && h->limit != req->limit))
        return BACKEND_IDEM_CONFLICT;
    if (n >= sizeof(out->token) ||
        zk_fill_grant(st, h->run_ms, (uint64_t)left, out) != 0)
        return BACKEND_UNAVAILABLE;
    out->replay = true;
    memcpy(out->token, h->token, n + 1);
    out->mode = h->mode;
    out->limit = h->mode == LOCK_SHARED ? h->limit : 0;
    out->holds = h->holds;
    zk_acq_leave(a);
    return BACKEND_OK;
}

static bool zk_idem_is(const struct zk_holder *h, const char *idem)
{
    return idem != NULL && h->has_idem && strcmp(h->idem, idem) == 0;
}

int zk_acq_kinds(struct zk_acq *a, struct zk_look *l, struct lock_grant *out)
{
    const struct lock_req *req = a->req;
    bool mismatch;
    int64_t min_left;
    int rc;

    if (!l->has_h || !l->parsed)
        return ZK_GO_ON;
    if (!l->h.group)
        return zk_idem_is(&l->h, req->idem_key)
                   ? zk_acq_replay(a, &l->h, &l->st, out)
                   : ZK_GO_ON;
    mismatch = a->shared && l->h.limit != req->limit;
    if (req->idem_key == NULL && !mismatch)
        return ZK_GO_ON;
    rc = zk_look_members(a, l);
    if (rc != ZK_GO_ON)
        return rc;
    for (size_t i = 0; req->idem_key != NULL && i < l->nms; i++) {
        const struct zk_member *m = &l->ms[i];
        if (m->gone || !m->parsed || m->left <= 0 ||
            !zk_idem_is(&m->h, req->idem_key))
            continue;
        rc = zk_acq_replay(a, &m->h, &m->st, out);
        if (rc != ZK_GO_ON)
            return rc;
    }
    if (mismatch && zk_members_live(l->ms, l->nms, &min_left) > 0)
        return BACKEND_LIMIT_MISMATCH;
    return ZK_GO_ON;
}
