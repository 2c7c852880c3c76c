/*
 * backends/zookeeper/recipe.c - the lock and queue recipe: how an acquire
 * looks at a key's node and acts (the round), how a holder is judged
 * (void, expired, what is surely left of it) and reaped, and the waiter
 * places a queued acquire keeps between rounds. The requests themselves
 * are in store.c, the names in names.c.
 *
 * The recipe, per key (key bytes base64url-encoded into one node name):
 *
 *   <chroot>/lockd/locks/k<base64url(key)>    persistent; dropped with the
 *                                              last h, or by the sweep
 *       h                                     the holder: persistent, data
 *                                              "lockd1 <ttl_ms> <token>
 *                                              [<grant_by>][\n<owner>]";
 *                                              expires at its mtime + ttl_ms
 *                                              (server clock); void if its
 *                                              ctime > grant_by
 *       t<token>                              h's marker, made and dropped
 *                                              with it
 *       w<inst>-<id>-<deadline>-0000000042    waiters: ephemeral sequential,
 *                                              FIFO by sequence number (r...
 *                                              for shared ones: one queue)
 *
 * A key held shared has h as its group and one s<token> per holder
 * (shared.c). An exclusive grant creates h, so it never joins a group; a
 * shared one joins a group by setting h at the version it read.
 *
 * A grant creates h; only the lowest waiter may do so, in one multi that
 * also deletes its waiter node, and a try-once acquire only when nobody
 * waits (on a free key, one multi that also makes the key's node; several
 * keys at once likewise, in one multi over all of them: multi.c). Each
 * waiter watches only its predecessor (the lowest one watches h). Holders
 * are persistent, so a lock outlives the session of the lockd that granted
 * it; every instance reaps an expired h (delete with version check) and
 * waiters past their deadline. The fence is h's czxid. A release of a
 * grant made here is one multi without a read (zk_release_known()).
 *
 * A grant or renew is answered only while every instance would call h
 * held (zk_acq_own()): not void by the grant_by stored in h and not
 * expired by the latest the server's clock can be. A waiter that finds h
 * under its own token (its grant's answer was lost or came after it had
 * given up) judges that h the same way, frees it when it is dead, and
 * answers only what is left of it when it is not.
 *
 * A grant reports expired_fence when this request reaped an expired
 * holder (h, or shared ones) on its way to it: a takeover. The reap and
 * the grant are two multis, and a holder reaped by the sweep or by
 * another request is not seen: then 0 (unknown).
 */
#include "backends/zookeeper/zk.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/text.h"

/* ---- judging a holder ------------------------------------------------- */

/* A grant committed after the deadline its requester wrote in it: the
 * requester gave up (answered 503) before it could hear of it, so nobody
 * holds it. Judged from the store's own data, so every instance agrees. */
static bool zk_void(const struct zk_holder *h, const struct Stat *st)
{
    return h->grant_by > 0 && st->ctime > h->grant_by;
}

/* The holder's remaining ms by the server's clock (<= 0: expired or
 * void). */
int64_t
zk_remaining(struct zk_be *be, const struct zk_holder *h, const struct Stat *st)
{
    int64_t left;

    if (zk_void(h, st))
        return 0;
    left = st->mtime + (int64_t)h->run_ms - zk_server_now(be);
    /* never more than the TTL, whatever the clock slack adds */
    return left < (int64_t)h->run_ms ? left : (int64_t)h->run_ms;
}

/* What is surely left of holder h (stat st), in ms: its expiry less the
 * latest the server's clock can be, and, after a write of ours sent at
 * sent (local monotonic ms; 0: none), no more than its TTL less the time
 * since then, which no clock estimate can stretch. <= 0: it may have
 * expired, or it is void by the grant_by stored in h (every instance
 * treats it as free): not a holder to answer as a grant. */
int64_t zk_left_surely(struct zk_be *be,
                       const struct zk_holder *h,
                       const struct Stat *st,
                       int64_t sent)
{
    int64_t ttl = (int64_t)h->run_ms, left;

    if (zk_void(h, st))
        return 0;
    left = st->mtime + ttl - zk_server_latest(be);
    if (sent > 0 && ttl - (clock_mono_ms() - sent) < left)
        left = ttl - (clock_mono_ms() - sent);
    return left < ttl ? left : ttl;
}

/* A grant of h (stat st, running ttl_ms from its mtime) answered with
 * report ms to run; -1
 * if its czxid cannot be a fence. */
int zk_fill_grant(const struct Stat *st,
                  uint64_t ttl_ms,
                  uint64_t report,
                  struct lock_grant *out)
{
    if (st->czxid <= 0 || (uint64_t)st->czxid > LOCK_FENCE_MAX) {
        log_error("zookeeper: zxid %" PRId64 " does not fit a fence (2^53)",
                  st->czxid);
        return -1;
    }
    out->fence = (uint64_t)st->czxid;
    out->ttl_ms = report;
    out->expires_at_ms = st->mtime + (int64_t)ttl_ms;
    return 0;
}

/* An expired holder h seen at version: delete it (and its marker) if it is
 * still that one. The key's node stays: waiters may be on their way; the
 * next release or the sweep removes it. */
int zk_reap_holder(struct zk_be *be,
                   struct zk_conn *cn,
                   const struct zk_paths *p,
                   const struct zk_holder *h,
                   int version,
                   int64_t dl,
                   const char *key,
                   size_t key_len)
{
    char marker[ZK_MARKER_MAX];
    int rc = zk_marker_name(h->token, marker, sizeof(marker)) == 0
                 ? zk_drop_checked(cn, p, marker, version, false, dl)
                 : ZBADARGUMENTS; /* not lockd's: zk_parse_holder() refuses */

    if (rc == ZOK) {
        metrics_lock_expired(1);
        zk_notify(be, key, key_len);
    }
    return rc;
}
/* ---- waiters ---------------------------------------------------------- */

struct zk_waiter *
zk_waiter_new(struct zk_be *be, const char *key, size_t key_len)
{
    struct zk_waiter *w = calloc(1, sizeof(*w));

    if (w == NULL)
        return NULL;
    w->key = malloc(key_len + 1);
    if (w->key == NULL) {
        free(w);
        return NULL;
    }
    memcpy(w->key, key, key_len);
    w->key[key_len] = '\0';
    w->key_len = key_len;
    pthread_mutex_lock(&be->mu);
    w->next = be->waiters;
    if (be->waiters != NULL)
        be->waiters->prev = w;
    be->waiters = w;
    pthread_mutex_unlock(&be->mu);
    return w;
}

void zk_waiter_free(struct zk_be *be, struct zk_waiter *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&be->mu);
    if (w->prev != NULL)
        w->prev->next = w->next;
    else if (be->waiters == w)
        be->waiters = w->next;
    if (w->next != NULL)
        w->next->prev = w->prev;
    pthread_mutex_unlock(&be->mu);
    free(w->key);
    free(w);
}

/* ---- acquire ---------------------------------------------------------- */

/*
 * h (stat st) is under our token (h, or a shared holder s<token>): the
 * grant this call just made (its
 * multi sent at sent, local monotonic ms), or, with sent 0, one an
 * earlier try made whose answer was lost or came too late. It is a grant
 * only while every instance would call it held: not void by the grant_by
 * stored in h (not this try's), and not expired by the latest the server's
 * clock can be (zk_left_surely()). A dead one is freed with its marker at
 * the version seen (one multi), never answered: this call's own grant
 * answers UNAVAILABLE (the store was too slow for it), an earlier one -1
 * (look again: the key is free now).
 *
 * The answer's ttl_ms counts from when this call began, as the client
 * counts it from when it sent its request: a grant written during this
 * call has its whole TTL (it committed later); an earlier one only what is
 * surely left of it now, never more; expires_at is h's own expiry.
 * mine_node: our waiter node when we hold a place besides h (a grant
 * that committed after we queued again), dropped in one multi that checks
 * h is still ours. alone: nobody else waited. Only exclusive grants are
 * remembered for a release without a read (zk_own_put()).
 */
int zk_acq_own(struct zk_acq *a,
               const struct zk_holder *h,
               const struct Stat *st,
               int64_t sent,
               const char *mine_node,
               bool alone,
               struct lock_grant *out)
{
    struct zk_be *be = a->be;
    bool member = h->mode == LOCK_SHARED;
    int64_t left;
    int rc;

    if (sent > 0)
        zk_clock_sample(be, st->mtime, sent, clock_mono_ms());
    left = zk_left_surely(be, h, st, sent);
    if (left > 0 && mine_node != NULL) {
        rc = member
                 ? zk_claim_member(a->cn, &a->p, st->version, mine_node, a->dl)
                 : zk_claim(a->cn, &a->p, st->version, mine_node, a->dl);
        if (rc == ZNONODE || rc == ZBADVERSION)
            return -1; /* h or our node changed under us */
        if (rc != ZOK)
            return zk_unavailable("claim holder", rc);
        a->w->name[0] = '\0';
        left = zk_left_surely(be, h, st, sent);
    }
    if (left <= 0 ||
        zk_fill_grant(st, h->run_ms, sent > 0 ? h->run_ms : (uint64_t)left,
                      out) != 0) {
        rc = member ? zk_member_reap_token(be, a->cn, &a->p, a->dl)
                    : zk_reap_holder(be, a->cn, &a->p, h, st->version, a->dl,
                                     a->req->key, a->req->key_len);
        if (sent > 0)
            return zk_unavailable("grant", ZOPERATIONTIMEOUT);
        if (rc != ZOK && rc != ZNONODE && rc != ZBADVERSION)
            return zk_unavailable("reap own holder", rc);
        return -1;
    }
    out->mode = h->mode;
    out->limit = member ? h->limit : 0;
    out->holds = h->holds;
    if (sent > 0)
        out->expired_fence = a->expired_fence;
    zk_index_add(be, a->req->key, a->req->key_len);
    if (!member)
        zk_own_put(be, a->req->key, a->req->key_len, a->req->token, st,
                   h->run_ms, h->holds, alone);
    if (a->w != NULL) {
        zk_waiter_free(be, a->w);
        a->req->waiter->be_data = NULL;
        /* the next waiter here may have watched a node that is gone now,
         * or (shared) may be granted with us */
        zk_notify(be, a->req->key, a->req->key_len);
    }
    return BACKEND_OK;
}

/* Take a place at the end of the queue. ZOK, ZNONODE (no key node), or
 * an error with w->pending set (a node may exist that we never heard of). */
static int zk_acq_register(struct zk_acq *a)
{
    struct zk_be *be = a->be;
    struct lock_waiter *lw = a->req->waiter;
    char path[ZK_PATH_MAX], made[ZK_PATH_MAX];
    int64_t left = lw->deadline_ms - clock_wall_ms();
    int64_t dl_server =
        zk_server_now(be) + (left > 0 ? left : 0) + ZK_WAITER_GRACE_MS;
    const char *base;
    int rc;

    if (zk_waiter_prefix(be, a->shared, lw->id, dl_server, a->w->prefix,
                         sizeof(a->w->prefix)) != 0 ||
        zk_child_path(a->p.parent, a->w->prefix, path, sizeof(path)) != 0)
        return ZBADARGUMENTS;
    a->w->pending = true;
    rc = zk_create(a->cn, path, "", 0, ZOO_EPHEMERAL_SEQUENTIAL, a->dl, made,
                   sizeof(made), NULL);
    if (rc == ZNONODE) {
        a->w->pending = false;
        return rc;
    }
    if (rc != ZOK)
        return rc;
    base = strrchr(made, '/');
    base = base != NULL ? base + 1 : made;
    if (strlen(base) >= sizeof(a->w->name))
        return ZBADARGUMENTS; /* stays pending: found by its prefix */
    memcpy(a->w->name, base, strlen(base) + 1);
    a->w->pending = false;
    return ZOK;
}

/*
 * The common case, a free key, has no key node: make it and h in one multi
 * (one round trip, one transaction). Its create fails if the node exists,
 * so this never jumps a waiter. Returns like zk_acq_round(), -1 when the
 * node was there already.
 */
int zk_acq_fresh(struct zk_acq *a, struct lock_grant *out)
{
    struct Stat st;
    int64_t sent = clock_mono_ms();
    int rc;

    if (a->shared)
        return zk_acq_share_fresh(a, out);
    rc = zk_grant(a->cn, &a->p, true, NULL, a->data, a->data_len, a->dl, &st);
    if (rc == ZOK)
        return zk_acq_own(a, &a->mine, &st, sent, NULL, true, out);
    if (rc == ZNODEEXISTS || rc == ZNONODE)
        return -1;
    return zk_unavailable("grant", rc);
}

/* Sort the listing into waiters and h, and find our place (by name, or
 * by prefix after a create we never heard back from). */
static int zk_look_parse(struct zk_acq *a, struct zk_look *l)
{
    struct zk_waiter *w = a->w;

    l->kids = calloc((size_t)l->kc->nkids + 1, sizeof(*l->kids));
    if (l->kids == NULL)
        return BACKEND_NO_MEMORY;
    for (int i = 0; i < l->kc->nkids; i++) {
        const char *name = l->kc->kids[i];
        if (strcmp(name, "h") == 0)
            l->has_h = true;
        else if (name[0] == 's')
            l->mine_listed |=
                a->p.member[0] != '\0' && strcmp(name, a->p.member) == 0;
        else if (zk_parse_waiter(name, &l->kids[l->nw]) == 0)
            l->nw++;
    }
    qsort(l->kids, l->nw, sizeof(*l->kids), zk_cmp_kid);
    if (w != NULL) {
        size_t plen = strlen(w->prefix);
        for (size_t i = 0; i < l->nw; i++) {
            const char *name = l->kids[i].name;
            bool mine = plen > 0 && plen + ZK_SEQ_DIGITS < sizeof(w->name) &&
                        strncmp(name, w->prefix, plen) == 0 &&
                        strlen(name) == plen + ZK_SEQ_DIGITS;
            if (w->name[0] != '\0' && strcmp(name, w->name) == 0)
                l->own = i;
            else if (w->name[0] == '\0' && w->pending && mine) {
                memcpy(w->name, name, plen + ZK_SEQ_DIGITS + 1);
                l->own = i;
            }
        }
        w->pending = false;
        if (w->name[0] != '\0' && l->own == SIZE_MAX) {
            /* our place is gone: our grant's answer was lost, or our
             * session (and its ephemeral node) ended */
            w->name[0] = '\0';
            l->gone = true;
        }
    }
    l->ahead = l->own != SIZE_MAX ? l->own : l->nw;
    return ZK_GO_ON;
}

/* Read h, if there is one; a grant of ours in it answers the round. */
static int
zk_look_holder(struct zk_acq *a, struct zk_look *l, struct lock_grant *out)
{
    int rc;

    if (!l->has_h)
        return ZK_GO_ON;
    /* the first waiter watches h: its release or reap wakes us */
    rc = zk_get(a->be, a->cn, a->p.hpath, l->own == 0, a->dl, &l->h, &l->st,
                &l->parsed);
    if (rc == ZNONODE)
        return -1; /* it just went: look again */
    if (rc != ZOK)
        return zk_unavailable("read holder", rc);
    if (l->parsed && a->w != NULL && !l->h.group &&
        text_secret_eq(l->h.token, a->req->token)) {
        /* a grant of ours whose answer we never had: valid, it is
         * this waiter's; dead, it is freed and we look again */
        return zk_acq_own(a, &l->h, &l->st, 0,
                          l->own != SIZE_MAX ? l->kids[l->own].name : NULL,
                          l->nw <= (l->own != SIZE_MAX ? 1u : 0u), out);
    }
    if (l->parsed && a->w != NULL && l->h.group && l->mine_listed) {
        struct zk_member m = { 0 };
        memcpy(m.name, a->p.member, sizeof(m.name));
        rc = zk_get_members(a->cn, a->p.parent, &m, 1, a->dl);
        if (rc != ZOK)
            return zk_unavailable("read holder", rc);
        if (!m.gone && m.parsed && m.h.mode == LOCK_SHARED)
            return zk_acq_own(a, &m.h, &m.st, 0,
                              l->own != SIZE_MAX ? l->kids[l->own].name : NULL,
                              l->nw <= (l->own != SIZE_MAX ? 1u : 0u), out);
    }
    return ZK_GO_ON;
}

/* A waiter without a place takes one; then look again. */
static int zk_acq_queue(struct zk_acq *a)
{
    int rc = zk_acq_register(a);

    if (rc != ZOK && rc != ZNONODE)
        return zk_unavailable("queue waiter", rc);
    return -1;
}

/* Would the holders alone let this acquire in (the queue aside)? */
static bool zk_holders_allow(const struct zk_acq *a, const struct zk_look *l)
{
    if (!l->has_h)
        return true;
    return a->shared && l->parsed && l->h.group &&
           l->h.limit == a->req->limit &&
           (l->h.limit == 0 || l->h.count < l->h.limit);
}

/* What is left of the holders for a retry hint: h's, or the first shared
 * holder's to expire (when they were read); 0 when unknown. */
static int64_t zk_look_left(struct zk_acq *a, const struct zk_look *l)
{
    int64_t left = 0;

    if (!l->has_h || !l->parsed)
        return 0;
    if (!l->h.group)
        return zk_remaining(a->be, &l->h, &l->st);
    if (l->ms_read)
        zk_members_live(l->ms, l->nms, &left);
    return left;
}

/* Placed behind pred: watch it (no herd when it goes) and answer HELD
 * with when to look again at the latest. */
static int zk_acq_wait_pred(struct zk_acq *a,
                            struct zk_look *l,
                            const struct zk_kid *pred,
                            int64_t now,
                            struct lock_grant *out)
{
    struct Stat pst; /* our predecessor's; l->st stays h's */
    char path[ZK_PATH_MAX];
    int64_t until, left;
    int rc;

    if (zk_child_path(a->p.parent, pred->name, path, sizeof(path)) != 0)
        return BACKEND_UNAVAILABLE;
    rc = zk_get(a->be, a->cn, path, true, a->dl, NULL, &pst, NULL);
    if (rc == ZNONODE)
        return -1;
    if (rc != ZOK)
        return zk_unavailable("watch waiter", rc);
    /* look again when the holder's TTL or our predecessor's deadline
     * passes, whichever comes first */
    until = pred->deadline - now + 1;
    if (until > ZK_WAITER_RECHECK_MS)
        until = ZK_WAITER_RECHECK_MS;
    if (l->has_h && l->parsed && (!l->h.group || l->ms_read)) {
        left = zk_look_left(a, l);
        if (left < until)
            until = left > 0 ? left : 1;
    }
    out->retry_ms = (uint64_t)until;
    /* one of our own waiters is ahead in the store (two threads queued in
     * one order and parked in the other): the caller passes the turn on,
     * whether the holders would let us in or not. That waiter may be
     * granted now; and if it is the first, only it watches h, so unless
     * it is tried again after each wake-up, h's release is heard by
     * nobody here and every waiter sits until its deadline. */
    for (size_t i = 0; i < l->ahead; i++)
        if (zk_waiter_is_ours(a->be, l->kids[i].name))
            out->behind = true;
    return BACKEND_HELD;
}

/* A try-once acquire with waiters in the queue: held, behind them, with
 * when the first of them may take the key. */
static int
zk_acq_behind_once(struct zk_acq *a, struct zk_look *l, struct lock_grant *out)
{
    int64_t left;
    int rc;

    out->behind = true;
    out->retry_ms = 1; /* the first waiter takes it now */
    if (!l->has_h || !l->parsed)
        return BACKEND_HELD;
    if (l->h.group) {
        rc = zk_look_members(a, l);
        if (rc != ZK_GO_ON)
            return rc == -1 ? BACKEND_HELD : rc;
        left = zk_look_left(a, l);
        out->retry_ms = left > 0 ? (uint64_t)left : 1;
        return BACKEND_HELD;
    }
    left = zk_remaining(a->be, &l->h, &l->st);
    if (left <= 0) {
        zk_reap_holder(a->be, a->cn, &a->p, &l->h, l->st.version, a->dl,
                       a->req->key, a->req->key_len);
        left = 1;
    }
    out->retry_ms = (uint64_t)left;
    return BACKEND_HELD;
}

/* Others wait ahead of us (or of a try-once acquire). */
static int
zk_acq_behind(struct zk_acq *a, struct zk_look *l, struct lock_grant *out)
{
    int64_t now = zk_server_now(a->be);
    struct zk_kid *first = &l->kids[0], *pred = &l->kids[l->ahead - 1];

    /* a waiter past its deadline (its lockd died or lost it) */
    if (first->deadline < now || pred->deadline < now) {
        struct zk_kid *dead = first->deadline < now ? first : pred;
        char path[ZK_PATH_MAX];
        int rc = ZOK;
        if (zk_child_path(a->p.parent, dead->name, path, sizeof(path)) == 0)
            rc = zk_delete(a->cn, path, -1, a->dl);
        if (rc != ZOK && rc != ZNONODE)
            return zk_unavailable("reap waiter", rc);
        return -1;
    }
    if (a->w == NULL)
        return zk_acq_behind_once(a, l, out);
    /* shared behind shared waiters only, with room for them all: granted
     * together with them */
    if (a->shared && zk_acq_share_ok(a, l))
        return zk_acq_share(a, l, out);
    if (a->w->name[0] == '\0')
        return zk_acq_queue(a);
    return zk_acq_wait_pred(a, l, pred, now, out);
}

/* Nobody waits ahead of us; h is a group of shared holders. */
static int
zk_acq_group_held(struct zk_acq *a, struct zk_look *l, struct lock_grant *out)
{
    int64_t left;
    int rc;

    if (a->shared && zk_holders_allow(a, l))
        return zk_acq_share(a, l, out);
    rc = zk_look_members(a, l);
    if (rc != ZK_GO_ON)
        return rc;
    if (a->w != NULL && a->w->name[0] == '\0')
        return zk_acq_queue(a);
    left = zk_look_left(a, l);
    out->retry_ms = left > 0 ? (uint64_t)left : 1;
    return BACKEND_HELD;
}

/* Nobody waits ahead of us, but h is there. */
static int
zk_acq_held(struct zk_acq *a, struct zk_look *l, struct lock_grant *out)
{
    int64_t left;
    int rc;

    if (!l->parsed) {
        log_warn("zookeeper: %s holds data lockd cannot read; treating "
                 "the key as held",
                 a->p.hpath);
        out->retry_ms = ZK_WAITER_RECHECK_MS;
        return BACKEND_HELD;
    }
    if (l->h.group)
        return zk_acq_group_held(a, l, out);
    left = zk_remaining(a->be, &l->h, &l->st);
    if (left <= 0) {
        rc = zk_reap_holder(a->be, a->cn, &a->p, &l->h, l->st.version, a->dl,
                            a->req->key, a->req->key_len);
        /* a takeover: the grant this makes way for reports it */
        if (rc == ZOK && (uint64_t)l->st.czxid > a->expired_fence)
            a->expired_fence = (uint64_t)l->st.czxid;
        if (rc != ZOK && rc != ZNONODE && rc != ZBADVERSION)
            return zk_unavailable("reap holder", rc);
        return -1;
    }
    if (a->w != NULL && a->w->name[0] == '\0')
        return zk_acq_queue(a);
    out->retry_ms = (uint64_t)left;
    return BACKEND_HELD;
}

/* Free and nobody ahead of us: grant, dropping our place in the same
 * multi. */
static int
zk_acq_take(struct zk_acq *a, struct zk_look *l, struct lock_grant *out)
{
    struct zk_waiter *w = a->w;
    struct Stat st;
    int64_t sent = clock_mono_ms();
    int rc;

    if (a->shared)
        return zk_acq_share(a, l, out);
    rc = zk_grant(a->cn, &a->p, false,
                  w != NULL && w->name[0] != '\0' ? w->name : NULL, a->data,
                  a->data_len, a->dl, &st);
    if (rc == ZOK) {
        /* others behind us: the release leaves the key's node to them */
        return zk_acq_own(a, &a->mine, &st, sent, NULL,
                          l->nw <= (l->own == 0 ? 1u : 0u), out);
    }
    if (rc == ZNONODE) {
        if (w != NULL)
            w->name[0] = '\0';
    } else if (rc != ZNODEEXISTS) {
        /* the multi may have happened: keep our name, so the next round
         * finds h under our token */
        return zk_unavailable("grant", rc);
    }
    return -1;
}

/*
 * One look-act round. Returns BACKEND_OK, HELD or UNAVAILABLE (or a
 * lock-kinds answer) when the request is answered, or -1 to look again
 * (something moved under us).
 */
int zk_acq_round(struct zk_acq *a, struct lock_grant *out)
{
    struct zk_look l = { .own = SIZE_MAX };
    int rc = zk_get_kids(a->cn, a->p.parent, a->dl, &l.kc);

    if (rc == ZNONODE) {
        /* our node, if any, went with it (our session ended) */
        if (a->w != NULL) {
            a->w->name[0] = '\0';
            a->w->pending = false;
        }
        return zk_acq_fresh(a, out);
    }
    if (rc != ZOK)
        return zk_unavailable("list waiters", rc);
    rc = zk_look_parse(a, &l);
    if (rc == ZK_GO_ON)
        rc = zk_look_holder(a, &l, out);
    if (rc == ZK_GO_ON && l.gone)
        rc = -1; /* look again, unregistered */
    if (rc == ZK_GO_ON)
        rc = zk_acq_kinds(a, &l, out);
    if (rc == ZK_GO_ON)
        rc = l.ahead > 0 ? zk_acq_behind(a, &l, out)
             : l.has_h   ? zk_acq_held(a, &l, out)
                         : zk_acq_take(a, &l, out);
    free(l.ms);
    free(l.kids);
    zk_call_unref(l.kc);
    return rc;
}
