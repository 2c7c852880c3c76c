/*
 * backends/zookeeper/holders.c - the operations of a holder, by its
 * token: renew (and re-entry), release (one hold or all) and inspect. An
 * exclusive holder is h, checked by its marker t<token> in the same multi
 * as every write; a shared one is s<token>, whose name is its token, and
 * its removal sets or deletes the group h at the version read (shared.c).
 */
#include "backends/zookeeper/zk.h"

#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/text.h"

/* A holder found by token: h itself, or a shared holder and its group. */
struct zk_mine {
    bool member;        /* shared: s<token>, in the group g */
    struct zk_holder h; /* its data */
    struct Stat st;     /* its stat */
    struct zk_holder g; /* member: the group h */
    struct Stat gst;
};

/* Read req->token's holder: OK with m filled when it holds req->key
 * unexpired; NOT_FOUND, MISMATCH or UNAVAILABLE otherwise. A token that
 * cannot name a marker (not hex) is never OK: every holder lockd reads has
 * a hex token (zk_parse_holder()), so after OK the caller's marker and
 * member names are valid. */
static enum backend_result zk_find_mine(struct zk_be *be,
                                        struct zk_conn *cn,
                                        const struct lock_req *req,
                                        const struct zk_paths *p,
                                        int64_t dl,
                                        struct zk_mine *m)
{
    struct zk_member mem;
    enum backend_result r = BACKEND_UNAVAILABLE;
    bool parsed = false;
    int rc = zk_get(be, cn, p->hpath, false, dl, &m->h, &m->st, &parsed);

    m->member = false;
    if (rc == ZNONODE)
        return BACKEND_NOT_FOUND;
    if (rc != ZOK)
        return zk_unavailable("read holder", rc);
    if (!parsed)
        return BACKEND_MISMATCH;
    if (m->h.group) {
        m->member = true;
        m->g = m->h;
        m->gst = m->st;
        if (zk_member_find(be, cn, p, &m->g, &m->gst, dl, &mem, &r) != ZOK)
            return r;
        m->h = mem.h;
        m->st = mem.st;
        return BACKEND_OK;
    }
    if (zk_remaining(be, &m->h, &m->st) <= 0) {
        zk_reap_holder(be, cn, p, &m->h, m->st.version, dl, req->key,
                       req->key_len);
        return BACKEND_NOT_FOUND;
    }
    if (!text_secret_eq(req->token, m->h.token))
        return BACKEND_MISMATCH;
    return BACKEND_OK;
}

/* Write h's new data at the version read: h with its marker checked, or
 * s<token>. */
static int zk_write_mine(struct zk_conn *cn,
                         const struct zk_paths *p,
                         const struct zk_mine *m,
                         const struct zk_holder *now,
                         int64_t dl,
                         struct Stat *st)
{
    char data[ZK_DATA_MAX], path[ZK_PATH_MAX];
    size_t len;

    if (zk_fmt_holder(data, sizeof(data), now, &len) != 0)
        return ZBADARGUMENTS;
    /* the version and marker checks: a reap or release in between wins,
     * and a later grant of the key is never overwritten */
    if (!m->member)
        return zk_set_marked(cn, p, data, len, m->st.version, dl, st);
    if (zk_child_path(p->parent, p->member, path, sizeof(path)) != 0)
        return ZBADARGUMENTS;
    return zk_set(cn, path, data, (int)len, m->st.version, dl, st);
}

/* After a write of now (sent at sent) that committed with stat st: the
 * answer, or UNAVAILABLE when none of it is surely left. */
static enum backend_result zk_answer_mine(struct zk_be *be,
                                          const struct lock_req *req,
                                          const struct zk_mine *m,
                                          const struct zk_holder *now,
                                          const struct Stat *st,
                                          int64_t sent,
                                          struct lock_grant *out)
{
    struct zk_own o;
    bool alone;
    int64_t left;

    zk_clock_sample(be, st->mtime, sent, clock_mono_ms());
    if (!m->member) {
        alone =
            !zk_own_get(be, req->key, req->key_len, req->token, &o) || o.alone;
        zk_own_put(be, req->key, req->key_len, now->token, st, now->ttl_ms,
                   now->holds, alone);
    }
    /* its whole TTL from when the call began, unless none of it is surely
     * left once the answer came: then it came too late to be one */
    left = zk_left_surely(be, now, st, sent);
    if (left <= 0 || zk_fill_grant(st, now->ttl_ms, now->ttl_ms, out) != 0)
        return zk_unavailable("renew", ZOPERATIONTIMEOUT);
    out->mode = m->member ? LOCK_SHARED : LOCK_EXCLUSIVE;
    out->limit = m->member ? m->g.limit : 0;
    out->holds = now->holds;
    return BACKEND_OK;
}

enum backend_result zk_be_renew(struct backend *b,
                                const struct lock_req *req,
                                struct lock_grant *out)
{
    struct zk_be *be = (struct zk_be *)b;
    struct zk_paths p;
    struct zk_conn *cn;
    struct zk_mine m;
    enum backend_result r = BACKEND_UNAVAILABLE;
    int64_t dl;

    if (zk_paths_key(be, req->key, req->key_len, req->token, &p) != 0)
        return BACKEND_NOT_FOUND;
    cn = zk_conn_get(be);
    if (cn == NULL)
        return BACKEND_UNAVAILABLE;
    dl = zk_deadline(be);
    for (int i = 0; i < ZK_MAX_ROUNDS && clock_mono_ms() < dl; i++) {
        struct zk_holder now;
        struct Stat st;
        int64_t sent;
        int rc;

        r = zk_find_mine(be, cn, req, &p, dl, &m);
        if (r != BACKEND_OK)
            break;
        if (req->reenter && m.h.holds >= LOCK_HOLDS_MAX) {
            r = BACKEND_HOLDS_MAX;
            break;
        }
        now = m.h;
        now.ttl_ms = req->ttl_ms != 0 ? req->ttl_ms : m.h.ttl_ms;
        now.run_ms = now.ttl_ms;
        now.grant_by = 0;
        now.holds += req->reenter ? 1 : 0;
        sent = clock_mono_ms();
        rc = zk_write_mine(cn, &p, &m, &now, dl, &st);
        if (rc == ZOK) {
            r = zk_answer_mine(be, req, &m, &now, &st, sent, out);
            break;
        }
        r = BACKEND_UNAVAILABLE;
        if (rc == ZNONODE && !m.member) {
            r = BACKEND_NOT_FOUND;
            break;
        }
        if (rc != ZBADVERSION && rc != ZNONODE) {
            r = zk_unavailable("renew", rc);
            break;
        }
    }
    zk_conn_put(be, cn);
    return r;
}

/*
 * A release of a grant or renew made here, without reading h: one multi
 * that deletes h's marker (so h is still that grant: its token is
 * req->token) and h at the version we wrote (so nobody renewed it since,
 * and the expiry we know is h's). BACKEND_OK, UNAVAILABLE, or -1 when what
 * we remember is stale, expired or re-entered: then read h and judge.
 */
static int zk_release_known(struct zk_be *be,
                            struct zk_conn *cn,
                            const struct lock_req *req,
                            const struct zk_paths *p,
                            int64_t dl,
                            struct lock_grant *out)
{
    struct zk_own o;
    int rc;

    if (!zk_own_get(be, req->key, req->key_len, req->token, &o))
        return -1;
    if (o.holds > 1 && !req->all)
        return -1; /* one hold back: a write, not a delete */
    if (o.mtime + (int64_t)o.ttl_ms - zk_server_now(be) <= 0) {
        zk_own_drop(be, req->key, req->key_len);
        return -1; /* expired by now: the read path reaps it */
    }
    rc = zk_drop_checked(cn, p, p->marker, o.version, o.alone, dl);
    if (rc == ZOK) {
        out->granted_at_ms = o.ctime;
        return BACKEND_OK;
    }
    if (rc == ZNONODE || rc == ZBADVERSION) {
        zk_own_drop(be, req->key, req->key_len);
        return -1;
    }
    return zk_unavailable("release", rc);
}

/* Remove the holder m (every hold): ZOK or the store's code. */
static int zk_drop_mine(struct zk_conn *cn,
                        const struct zk_paths *p,
                        const struct zk_mine *m,
                        int64_t dl)
{
    const char *names[1] = { p->member };
    int versions[1] = { m->st.version };
    char gdata[ZK_GROUP_MAX];
    struct zk_drop_ops o = {
        .names = names, .versions = versions, .n = 1, .hv = m->gst.version
    };

    /* the key's node goes too unless someone waits */
    if (!m->member)
        return zk_drop_checked(cn, p, p->marker, m->st.version, true, dl);
    if (m->g.count > 1 && zk_fmt_group(gdata, sizeof(gdata), m->g.limit,
                                       m->g.count - 1, &o.glen) == 0)
        o.gdata = gdata;
    return zk_drop_members(cn, p, &o, o.gdata == NULL, dl);
}

/* The read path of a release: one round. OK, NOT_FOUND, MISMATCH,
 * UNAVAILABLE, or -1 to look again. */
static int zk_release_round(struct zk_be *be,
                            struct zk_conn *cn,
                            const struct lock_req *req,
                            const struct zk_paths *p,
                            int64_t dl,
                            struct lock_grant *out)
{
    struct zk_mine m;
    struct zk_holder now;
    struct Stat st;
    enum backend_result r = zk_find_mine(be, cn, req, p, dl, &m);
    int64_t left;
    int rc;

    if (r != BACKEND_OK)
        return r;
    if (m.h.holds > 1 && !req->all) {
        now = m.h;
        now.holds--;
        now.grant_by = 0;
        /* the write moves mtime: run what was left, so the expiry stays
         * (later by the few ms our clock estimate lags, never earlier) */
        left = zk_remaining(be, &m.h, &m.st);
        now.run_ms = left > 0 ? (uint64_t)left : 1;
        rc = zk_write_mine(cn, p, &m, &now, dl, &st);
        if (rc == ZOK) {
            if (!m.member)
                zk_own_put(be, req->key, req->key_len, now.token, &st,
                           now.run_ms, now.holds, false);
            out->holds = now.holds;
            return BACKEND_OK;
        }
    } else {
        rc = zk_drop_mine(cn, p, &m, dl);
        if (rc == ZOK) {
            zk_own_drop(be, req->key, req->key_len);
            zk_notify(be, req->key, req->key_len);
            out->holds = 0;
            out->granted_at_ms = m.st.ctime; /* h's, or s<token>'s */
            return BACKEND_OK;
        }
    }
    if (rc == ZNONODE && !m.member)
        return BACKEND_NOT_FOUND;
    if (rc != ZBADVERSION && rc != ZNONODE)
        return zk_unavailable("release", rc);
    return -1;
}

enum backend_result zk_be_release(struct backend *b,
                                  const struct lock_req *req,
                                  struct lock_grant *out)
{
    struct zk_be *be = (struct zk_be *)b;
    struct zk_paths p;
    struct zk_conn *cn;
    enum backend_result r = BACKEND_UNAVAILABLE;
    int64_t dl;
    int known;

    if (zk_paths_key(be, req->key, req->key_len, req->token, &p) != 0)
        return BACKEND_NOT_FOUND;
    cn = zk_conn_get(be);
    if (cn == NULL)
        return BACKEND_UNAVAILABLE;
    dl = zk_deadline(be);
    out->holds = 0;
    known =
        p.marker[0] != '\0' ? zk_release_known(be, cn, req, &p, dl, out) : -1;
    if (known >= 0) {
        r = (enum backend_result)known;
        if (r == BACKEND_OK) {
            zk_own_drop(be, req->key, req->key_len);
            zk_notify(be, req->key, req->key_len);
        }
        goto out;
    }
    for (int i = 0; i < ZK_LEAVE_ROUNDS && clock_mono_ms() < dl; i++) {
        int rr = zk_release_round(be, cn, req, &p, dl, out);
        r = BACKEND_UNAVAILABLE;
        if (rr >= 0) {
            r = (enum backend_result)rr;
            break;
        }
    }
out:
    zk_conn_put(be, cn);
    return r;
}

/* ---- inspect ------------------------------------------------------------ */

static int zk_cmp_member_fence(const void *x, const void *y)
{
    const struct zk_member *a = x, *b = y;

    return a->st.czxid < b->st.czxid ? -1 : a->st.czxid > b->st.czxid;
}

static void zk_holder_show(const struct zk_holder *h,
                           const struct Stat *st,
                           int64_t left,
                           struct lock_holder *out)
{
    out->fence = (uint64_t)st->czxid;
    out->ttl_ms = left > 0 ? (uint64_t)left : 1;
    out->expires_at_ms = st->mtime + (int64_t)h->run_ms;
    out->holds = h->holds;
    out->has_owner = h->has_owner;
    memcpy(out->owner, h->owner, sizeof(out->owner));
}

/* Fill info from a group's live holders ms (n of them, by any order). */
enum backend_result zk_inspect_group(const struct zk_holder *g,
                                     struct zk_member *ms,
                                     size_t n,
                                     struct lock_info *out)
{
    size_t live = 0, shown;

    for (size_t i = 0; i < n; i++)
        if (!ms[i].gone && ms[i].parsed && ms[i].left > 0 &&
            ms[i].st.czxid > 0 && (uint64_t)ms[i].st.czxid <= LOCK_FENCE_MAX)
            ms[live++] = ms[i];
    if (live == 0)
        return BACKEND_NOT_FOUND;
    qsort(ms, live, sizeof(*ms), zk_cmp_member_fence);
    shown = live < LOCK_HOLDERS_SHOWN ? live : LOCK_HOLDERS_SHOWN;
    out->holders = calloc(shown, sizeof(*out->holders));
    if (out->holders == NULL)
        return BACKEND_NO_MEMORY;
    out->mode = LOCK_SHARED;
    out->limit = g->limit;
    out->holder_count = (uint32_t)live;
    out->nholders = (uint32_t)shown;
    out->fence = (uint64_t)ms[live - 1].st.czxid;
    for (size_t i = 0; i < live; i++) {
        int64_t exp = ms[i].st.mtime + (int64_t)ms[i].h.run_ms;
        if (i < shown)
            zk_holder_show(&ms[i].h, &ms[i].st, ms[i].left, &out->holders[i]);
        if (i == 0 || exp > out->expires_at_ms) {
            out->expires_at_ms = exp;
            out->ttl_ms = ms[i].left > 0 ? (uint64_t)ms[i].left : 1;
        }
    }
    return BACKEND_OK;
}

/* Fill info from an exclusive holder h, left ms to run. */
enum backend_result zk_inspect_one(const struct zk_holder *h,
                                   const struct Stat *st,
                                   int64_t left,
                                   struct lock_info *out)
{
    out->holders = calloc(1, sizeof(*out->holders));
    if (out->holders == NULL)
        return BACKEND_NO_MEMORY;
    zk_holder_show(h, st, left, &out->holders[0]);
    out->nholders = out->holder_count = 1;
    out->fence = (uint64_t)st->czxid;
    out->ttl_ms = (uint64_t)left;
    out->expires_at_ms = st->mtime + (int64_t)h->run_ms;
    out->has_owner = h->has_owner;
    memcpy(out->owner, h->owner, sizeof(out->owner));
    out->mode = LOCK_EXCLUSIVE;
    out->holds = h->holds;
    return BACKEND_OK;
}

/* A group's holders, read and judged (the dead ones reaped). */
static enum backend_result zk_inspect_members(struct zk_be *be,
                                              struct zk_conn *cn,
                                              const struct zk_paths *p,
                                              const struct zk_holder *g,
                                              const struct Stat *gst,
                                              int64_t dl,
                                              struct lock_info *out)
{
    struct zk_member *ms = NULL;
    size_t n = 0, reaped;
    enum backend_result r;
    int rc = zk_members_load(be, cn, p, NULL, dl, &ms, &n);

    if (rc == ZNONODE)
        return BACKEND_NOT_FOUND;
    if (rc != ZOK)
        return rc == ZSYSTEMERROR ? BACKEND_NO_MEMORY
                                  : zk_unavailable("inspect", rc);
    zk_group_reap(be, cn, p, g, gst->version, ms, n, dl, &reaped);
    r = zk_inspect_group(g, ms, n, out);
    free(ms);
    return r;
}

enum backend_result zk_be_inspect(struct backend *b,
                                  const char *key,
                                  size_t key_len,
                                  struct lock_info *out)
{
    struct zk_be *be = (struct zk_be *)b;
    struct zk_paths p;
    struct zk_conn *cn;
    struct zk_holder h;
    struct Stat st;
    bool parsed = false;
    enum backend_result r;
    int64_t dl, left;
    int rc;

    if (zk_paths_key(be, key, key_len, NULL, &p) != 0)
        return BACKEND_NOT_FOUND;
    cn = zk_conn_get(be);
    if (cn == NULL)
        return BACKEND_UNAVAILABLE;
    dl = zk_deadline(be);
    rc = zk_get(be, cn, p.hpath, false, dl, &h, &st, &parsed);
    if (rc == ZNONODE) {
        r = BACKEND_NOT_FOUND;
    } else if (rc != ZOK) {
        r = zk_unavailable("inspect", rc);
    } else if (parsed && h.group) {
        r = zk_inspect_members(be, cn, &p, &h, &st, dl, out);
    } else if (!parsed || st.czxid <= 0 ||
               (uint64_t)st.czxid > LOCK_FENCE_MAX) {
        r = BACKEND_UNAVAILABLE;
    } else if ((left = zk_remaining(be, &h, &st)) <= 0) {
        zk_reap_holder(be, cn, &p, &h, st.version, dl, key, key_len);
        r = BACKEND_NOT_FOUND;
    } else {
        r = zk_inspect_one(&h, &st, left, out);
    }
    zk_conn_put(be, cn);
    return r; /* holders is allocated last: NULL unless OK */
}
