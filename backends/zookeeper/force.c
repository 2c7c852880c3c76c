/*
 * backends/zookeeper/force.c - force_release(): an operator frees a key
 * whatever its holders. An exclusive key is one multi, as a release: h's
 * marker t<token> and h at the version read (the marker's name is the
 * token read from that h, so a later grant of the key is never hit). A
 * shared key is one multi over every holder s<token>, each at the version
 * read, and the group h at its version (any join or leave in between
 * changes it: the multi fails and the round starts again, at most
 * ZK_MAX_ROUNDS until the deadline). A group of more than ZK_FORCE_CHUNK
 * holders goes in several such multis, each setting the group's count at
 * its version, so it is not one step then (ZooKeeper's 1 MB request
 * limit); nobody sees a holder counted that is gone, or the other way.
 *
 * An exclusive key's node goes too when nobody waits (a shared key's is
 * left to the sweep). The fence is the czxid of
 * the next grant's node, greater than every zxid before it, so the next
 * fence is greater than every fence removed. Deleting h fires the watch of
 * the first waiter (each waiter watches its predecessor, the first one
 * h), on whichever instance it waits: it is woken as after a release.
 */
#include "backends/zookeeper/zk.h"

#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"

/* One multi: delete ms[from..to) at their versions, and set the group at
 * *hv to count left (or delete it, with the key's node when nobody waits,
 * when none is left). ZOK (with *hv the group's new version) or the
 * store's code. */
static int zk_force_chunk(struct zk_conn *cn,
                          const struct zk_paths *p,
                          const struct zk_holder *g,
                          const struct zk_member *ms,
                          size_t from,
                          size_t to,
                          size_t left,
                          int *hv,
                          int64_t dl)
{
    char(*paths)[ZK_PATH_MAX] = calloc(to - from, sizeof(*paths));
    char gdata[ZK_GROUP_MAX];
    struct zk_big big;
    size_t glen, failed;
    int rc = ZSYSTEMERROR, st = -1;

    if (paths == NULL || zk_big_init(&big, (int)(to - from) + 2) != 0) {
        free(paths);
        return ZSYSTEMERROR;
    }
    for (size_t i = from; i < to; i++) {
        if (zk_child_path(p->parent, ms[i].name, paths[i - from],
                          ZK_PATH_MAX) != 0)
            goto out;
        zk_big_delete(&big, 0, paths[i - from], ms[i].st.version);
    }
    if (left > 0) {
        if (zk_fmt_group(gdata, sizeof(gdata), g->limit, (uint32_t)left,
                         &glen) != 0)
            goto out;
        st = zk_big_set(&big, 0, p->hpath, gdata, glen, *hv);
    } else {
        zk_big_delete(&big, 0, p->hpath, *hv);
    }
    rc = zk_big_run(cn, &big, dl, &failed);
    if (rc == ZOK && st >= 0)
        *hv = big.stats[st].version;
out:
    zk_big_cleanup(&big);
    free(paths);
    return rc;
}

/* A shared key's round: its holders read, the live ones summed up in
 * out, all of them deleted. OK, NOT_FOUND, UNAVAILABLE, NO_MEMORY, or -1
 * to look again. */
static int zk_force_group(struct zk_be *be,
                          struct zk_conn *cn,
                          const struct zk_paths *p,
                          const struct zk_holder *g,
                          const struct Stat *gst,
                          int64_t dl,
                          struct lock_info *out)
{
    struct zk_member *ms = NULL, *all;
    size_t n = 0, k = 0, reaped;
    int hv = gst->version, rc = zk_members_load(be, cn, p, NULL, dl, &ms, &n);
    enum backend_result r;

    if (rc == ZNONODE)
        return -1;
    if (rc != ZOK)
        return rc == ZSYSTEMERROR ? BACKEND_NO_MEMORY
                                  : zk_unavailable("read holders", rc);
    all = calloc(n + 1, sizeof(*all));
    if (all == NULL) {
        free(ms);
        return BACKEND_NO_MEMORY;
    }
    /* every node still there goes, dead or alive: keep a copy, since
     * zk_inspect_group() keeps only the live ones */
    for (size_t i = 0; i < n; i++)
        if (!ms[i].gone)
            all[k++] = ms[i];
    r = zk_inspect_group(g, ms, n, out);
    if (r == BACKEND_NOT_FOUND) {
        zk_group_reap(be, cn, p, g, gst->version, all, k, dl, &reaped);
        rc = ZOK;
    } else if (r == BACKEND_OK) {
        for (size_t from = 0; from < k && rc == ZOK; from += ZK_FORCE_CHUNK) {
            size_t to = k - from > ZK_FORCE_CHUNK ? from + ZK_FORCE_CHUNK : k;
            rc = zk_force_chunk(cn, p, g, all, from, to, k - to, &hv, dl);
        }
    }
    free(all);
    free(ms);
    if (r != BACKEND_OK || rc == ZOK)
        return r;
    lock_info_clear(out);
    if (rc == ZBADVERSION || rc == ZNONODE || rc == ZNODEEXISTS)
        return -1;
    return rc == ZSYSTEMERROR ? BACKEND_NO_MEMORY
                              : zk_unavailable("force release", rc);
}

/* One round: read h and free the key. Returns like zk_force_group(). */
static int zk_force_round(struct zk_be *be,
                          struct zk_conn *cn,
                          const struct zk_paths *p,
                          int64_t dl,
                          struct lock_info *out)
{
    char marker[ZK_MARKER_MAX];
    struct zk_holder h;
    struct Stat st;
    bool parsed = false;
    enum backend_result r;
    int64_t left;
    int rc = zk_get(be, cn, p->hpath, false, dl, &h, &st, &parsed);

    if (rc == ZNONODE)
        return BACKEND_NOT_FOUND;
    if (rc != ZOK)
        return zk_unavailable("read holder", rc);
    if (!parsed) {
        log_warn("zookeeper: %s holds data lockd cannot read; not freed",
                 p->hpath);
        return BACKEND_UNAVAILABLE;
    }
    if (h.group)
        return zk_force_group(be, cn, p, &h, &st, dl, out);
    left = zk_remaining(be, &h, &st);
    if (left <= 0) {
        zk_reap_holder(be, cn, p, &h, st.version, dl, p->key, p->key_len);
        return BACKEND_NOT_FOUND;
    }
    if (st.czxid <= 0 || (uint64_t)st.czxid > LOCK_FENCE_MAX ||
        zk_marker_name(h.token, marker, sizeof(marker)) != 0)
        return BACKEND_UNAVAILABLE;
    r = zk_inspect_one(&h, &st, left, out);
    if (r != BACKEND_OK)
        return r;
    rc = zk_drop_checked(cn, p, marker, st.version, true, dl);
    if (rc == ZOK)
        return BACKEND_OK;
    lock_info_clear(out);
    if (rc == ZNONODE || rc == ZBADVERSION)
        return -1; /* renewed, released or reaped since: look again */
    return zk_unavailable("force release", rc);
}

enum backend_result zk_be_force_release(struct backend *b,
                                        const char *key,
                                        size_t key_len,
                                        struct lock_info *out)
{
    struct zk_be *be = (struct zk_be *)b;
    enum backend_result r = BACKEND_UNAVAILABLE;
    struct zk_paths p;
    struct zk_conn *cn;
    int64_t dl;

    if (zk_paths_key(be, key, key_len, NULL, &p) != 0)
        return BACKEND_NOT_FOUND;
    cn = zk_conn_get(be);
    if (cn == NULL)
        return BACKEND_UNAVAILABLE;
    dl = zk_deadline(be);
    for (int i = 0; i < ZK_MAX_ROUNDS && clock_mono_ms() < dl; i++) {
        int rr = zk_force_round(be, cn, &p, dl, out);
        if (rr >= 0) {
            r = (enum backend_result)rr;
            break;
        }
    }
    zk_conn_put(be, cn);
    if (r == BACKEND_OK) {
        zk_own_drop(be, key, key_len);
        zk_notify(be, key, key_len);
    }
    return r;
}
