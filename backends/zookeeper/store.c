/*
 * backends/zookeeper/store.c - every request lockd sends to ZooKeeper, one
 * function each: the one-call wrappers (get, create, set, delete, list)
 * and the multis of the recipe (grant, claim, renew, drop), each one
 * transaction. They borrow nothing and judge nothing: they build the call
 * (backends/zookeeper/call.c), wait for it until the request's deadline
 * and hand back ZooKeeper's return code; recipe.c and zookeeper.c decide
 * what it means.
 */
#include "backends/zookeeper/zk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"

enum backend_result zk_unavailable(const char *what, int rc)
{
    log_debug("zookeeper: %s: %s", what, zerror(rc));
    return BACKEND_UNAVAILABLE;
}

int64_t zk_deadline(const struct zk_be *be)
{
    return clock_deadline_ms(be->timeout_ms);
}

/* A path already built (struct zk_paths) into one of a call's buffers. */
static int zk_path_copy(char *out, const char *path)
{
    size_t n = strlen(path);

    if (n >= ZK_PATH_MAX)
        return -1;
    memcpy(out, path, n + 1);
    return 0;
}

/* A multi that could not be built: drop both references (no completion
 * will come). */
static int zk_multi_bad(struct zk_call *c)
{
    zk_call_unref(c);
    zk_call_unref(c);
    return ZBADARGUMENTS;
}

int zk_get_kids(struct zk_conn *cn,
                const char *path,
                int64_t dl,
                struct zk_call **out)
{
    struct zk_call *c = zk_call_new();
    int rc;

    *out = NULL;
    if (c == NULL)
        return ZSYSTEMERROR;
    rc = zk_call_wait(
        c, zoo_aget_children2(cn->zh, path, 0, zk_call_on_kids, c), dl);
    if (rc == ZOK)
        *out = c; /* the caller unrefs it when done with the names */
    else
        zk_call_unref(c);
    return rc;
}

/* get path's data; with a watch (ours, notifying the key) when watch. */
int zk_get(struct zk_be *be,
           struct zk_conn *cn,
           const char *path,
           bool watch,
           int64_t dl,
           struct zk_holder *h,
           struct Stat *st,
           bool *parsed)
{
    struct zk_call *c = zk_call_new();
    int rc;

    if (c == NULL)
        return ZSYSTEMERROR;
    if (watch)
        rc = zoo_awget(cn->zh, path, zk_node_watcher, be, zk_call_on_data, c);
    else
        rc = zoo_aget(cn->zh, path, 0, zk_call_on_data, c);
    rc = zk_call_wait(c, rc, dl);
    if (rc == ZOK) {
        *st = c->stat;
        if (h != NULL)
            *parsed = zk_parse_holder(c->data, c->data_len, h) == 0;
    }
    zk_call_unref(c);
    return rc;
}

int zk_delete(struct zk_conn *cn, const char *path, int version, int64_t dl)
{
    struct zk_call *c = zk_call_new();

    if (c == NULL)
        return ZSYSTEMERROR;
    return zk_call_run(
        c, zoo_adelete(cn->zh, path, version, zk_call_on_void, c), dl, NULL);
}

int zk_create(struct zk_conn *cn,
              const char *path,
              const char *data,
              int len,
              int mode,
              int64_t dl,
              char *name,
              size_t name_cap,
              struct Stat *st)
{
    struct zk_call *c = zk_call_new();
    int rc;

    if (c == NULL)
        return ZSYSTEMERROR;
    rc = zk_call_wait(c,
                      zoo_acreate2(cn->zh, path, data, len, cn->acl, mode,
                                   zk_call_on_create, c),
                      dl);
    if (rc == ZOK) {
        if (name != NULL)
            snprintf(name, name_cap, "%s", c->name);
        if (st != NULL)
            *st = c->stat;
    }
    zk_call_unref(c);
    return rc;
}

int zk_set(struct zk_conn *cn,
           const char *path,
           const char *data,
           int len,
           int version,
           int64_t dl,
           struct Stat *st)
{
    struct zk_call *c = zk_call_new();

    if (c == NULL)
        return ZSYSTEMERROR;
    return zk_call_run(
        c, zoo_aset(cn->zh, path, data, len, version, zk_call_on_stat, c), dl,
        st);
}

int zk_exists(struct zk_conn *cn, const char *path, int64_t dl)
{
    struct zk_call *c = zk_call_new();

    if (c == NULL)
        return ZSYSTEMERROR;
    return zk_call_run(c, zoo_aexists(cn->zh, path, 0, zk_call_on_stat, c), dl,
                       NULL);
}
/*
 * Renew: set h's data at version, in one multi with a check that h's
 * marker exists, so a renew that read h just before it expired and was
 * granted again (same version) cannot overwrite the new holder.
 */
int zk_set_marked(struct zk_conn *cn,
                  const struct zk_paths *p,
                  const char *data,
                  size_t len,
                  int version,
                  int64_t dl,
                  struct Stat *st)
{
    struct zk_call *c = zk_call_new();
    int rc, i;

    if (c == NULL)
        return ZSYSTEMERROR;
    if (zk_path_copy(c->paths[0], p->hpath) != 0 ||
        zk_child_path(p->parent, p->marker, c->paths[1], ZK_PATH_MAX) != 0 ||
        len > sizeof(c->buf))
        return zk_multi_bad(c);
    memcpy(c->buf, data, len);
    zoo_check_op_init(&c->ops[0], c->paths[1], -1);
    zoo_set_op_init(&c->ops[1], c->paths[0], c->buf, (int)len, version,
                    &c->set_stat);
    rc = zk_call_wait(
        c, zoo_amulti(cn->zh, 2, c->ops, c->results, zk_call_on_void, c), dl);
    if (rc == ZOK)
        *st = c->set_stat;
    else if ((i = zk_call_multi_failed(c, 2)) >= 0)
        rc = c->results[i].err;
    zk_call_unref(c);
    return rc;
}

/*
 * Keep h, found under our token beside a waiter node of ours (a grant that
 * committed after we had queued again): one multi that checks h's marker
 * and h's version, so h is still that grant, and deletes the waiter node.
 */
int zk_claim(struct zk_conn *cn,
             const struct zk_paths *p,
             int version,
             const char *waiter_name,
             int64_t dl)
{
    struct zk_call *c = zk_call_new();
    int rc, i;

    if (c == NULL)
        return ZSYSTEMERROR;
    if (zk_path_copy(c->paths[0], p->hpath) != 0 ||
        zk_child_path(p->parent, p->marker, c->paths[1], ZK_PATH_MAX) != 0 ||
        zk_child_path(p->parent, waiter_name, c->paths[2], ZK_PATH_MAX) != 0)
        return zk_multi_bad(c);
    zoo_check_op_init(&c->ops[0], c->paths[1], -1);
    zoo_check_op_init(&c->ops[1], c->paths[0], version);
    zoo_delete_op_init(&c->ops[2], c->paths[2], -1);
    rc = zk_call_wait(
        c, zoo_amulti(cn->zh, 3, c->ops, c->results, zk_call_on_void, c), dl);
    if (rc != ZOK && (i = zk_call_multi_failed(c, 3)) >= 0)
        rc = c->results[i].err;
    zk_call_unref(c);
    return rc;
}

/*
 * The grant, one multi and one transaction: [create the key's node +]
 * create h [+ delete our waiter node] + create h's marker + set h to the
 * same data, whose stat gives the czxid (fence) and mtime (start of the
 * TTL) in the same round trip. The key's node made here is persistent, not
 * a container: the C client 3.8 cannot read the server's answer to a
 * container create inside a multi. Releases, reaps and the sweep remove
 * it once empty.
 */
int zk_grant(struct zk_conn *cn,
             const struct zk_paths *p,
             bool make_parent,
             const char *waiter_name,
             const char *data,
             size_t len,
             int64_t dl,
             struct Stat *st)
{
    struct zk_call *c = zk_call_new();
    int n = 0, rc;

    if (c == NULL)
        return ZSYSTEMERROR;
    if (zk_path_copy(c->paths[0], p->hpath) != 0 ||
        (waiter_name != NULL && zk_child_path(p->parent, waiter_name,
                                              c->paths[1], ZK_PATH_MAX) != 0) ||
        zk_child_path(p->parent, p->marker, c->paths[2], ZK_PATH_MAX) != 0 ||
        zk_path_copy(c->paths[3], p->parent) != 0 || len > sizeof(c->buf))
        return zk_multi_bad(c);
    memcpy(c->buf, data, len);
    if (make_parent)
        zoo_create_op_init(&c->ops[n++], c->paths[3], NULL, -1, cn->acl,
                           ZOO_PERSISTENT, NULL, 0);
    zoo_create_op_init(&c->ops[n++], c->paths[0], c->buf, (int)len, cn->acl,
                       ZOO_PERSISTENT, NULL, 0);
    if (waiter_name != NULL)
        zoo_delete_op_init(&c->ops[n++], c->paths[1], -1);
    zoo_create_op_init(&c->ops[n++], c->paths[2], NULL, -1, cn->acl,
                       ZOO_PERSISTENT, NULL, 0);
    zoo_set_op_init(&c->ops[n++], c->paths[0], c->buf, (int)len, 0,
                    &c->set_stat);
    rc = zk_call_wait(
        c, zoo_amulti(cn->zh, n, c->ops, c->results, zk_call_on_void, c), dl);
    if (rc == ZOK)
        *st = c->set_stat;
    zk_call_unref(c);
    return rc;
}

/* Which op of zk_drop() failed. */
enum zk_drop_op {
    ZK_DROP_UNKNOWN = 0,
    ZK_DROP_MARKER,
    ZK_DROP_HOLDER,
    ZK_DROP_PARENT,
};

/* One multi: delete h's marker + delete h at version [+ delete the key's
 * node, which fails with ZNOTEMPTY while anyone waits]. On failure *failed
 * says which op the store refused. */
static int zk_drop(struct zk_conn *cn,
                   const struct zk_paths *p,
                   const char *marker,
                   int version,
                   bool with_parent,
                   int64_t dl,
                   enum zk_drop_op *failed)
{
    struct zk_call *c = zk_call_new();
    enum zk_drop_op what[3];
    int n = 0, rc, i;

    *failed = ZK_DROP_UNKNOWN;
    if (c == NULL)
        return ZSYSTEMERROR;
    if (zk_path_copy(c->paths[0], p->hpath) != 0 ||
        zk_child_path(p->parent, marker, c->paths[1], ZK_PATH_MAX) != 0 ||
        zk_path_copy(c->paths[2], p->parent) != 0)
        return zk_multi_bad(c);
    what[n] = ZK_DROP_MARKER;
    zoo_delete_op_init(&c->ops[n++], c->paths[1], -1);
    what[n] = ZK_DROP_HOLDER;
    zoo_delete_op_init(&c->ops[n++], c->paths[0], version);
    if (with_parent) {
        what[n] = ZK_DROP_PARENT;
        zoo_delete_op_init(&c->ops[n++], c->paths[2], -1);
    }
    rc = zk_call_wait(
        c, zoo_amulti(cn->zh, n, c->ops, c->results, zk_call_on_void, c), dl);
    if (rc != ZOK && (i = zk_call_multi_failed(c, n)) >= 0) {
        *failed = what[i];
        rc = c->results[i].err;
    }
    zk_call_unref(c);
    return rc;
}

/*
 * Free h at version, for a holder whose token we have checked: with its
 * marker, and with the key's node when with_parent and nobody waits. A
 * missing marker means h is no longer that holder (released or reaped in
 * between): ZNONODE, and never a second try without the marker, which
 * could delete a later grant that happens to have the same version (every
 * fresh h has version 1).
 */
int zk_drop_checked(struct zk_conn *cn,
                    const struct zk_paths *p,
                    const char *marker,
                    int version,
                    bool with_parent,
                    int64_t dl)
{
    enum zk_drop_op failed;
    int rc = zk_drop(cn, p, marker, version, with_parent, dl, &failed);

    /* waiters: the key's node stays theirs */
    if (rc == ZNOTEMPTY && failed == ZK_DROP_PARENT)
        rc = zk_drop(cn, p, marker, version, false, dl, &failed);
    return rc;
}

/*
 * Delete child name (a marker t<token> or a shared holder s<token> listed
 * without h) of p's key node, only while h does not exist: one multi that
 * creates h and deletes it again before deleting name, so it fails with
 * ZNODEEXISTS when a holder is there by now. A listing that showed name
 * without h may be stale: the key released and granted again since, under
 * the same token (a client may reuse one), and name is then the new
 * grant's; deleting it would leave h without its marker, which no release,
 * renew or reap can delete (each checks the marker): the key held for
 * ever. ZOK, ZNONODE (name or the key's node gone), ZNODEEXISTS (a holder:
 * name may be its), or the store's code.
 */
int zk_drop_stray(struct zk_conn *cn,
                  const struct zk_paths *p,
                  const char *name,
                  int64_t dl)
{
    struct zk_call *c = zk_call_new();
    int rc, i;

    if (c == NULL)
        return ZSYSTEMERROR;
    if (zk_path_copy(c->paths[0], p->hpath) != 0 ||
        zk_child_path(p->parent, name, c->paths[1], ZK_PATH_MAX) != 0)
        return zk_multi_bad(c);
    zoo_create_op_init(&c->ops[0], c->paths[0], NULL, -1, cn->acl,
                       ZOO_PERSISTENT, NULL, 0);
    zoo_delete_op_init(&c->ops[1], c->paths[0], -1);
    zoo_delete_op_init(&c->ops[2], c->paths[1], -1);
    rc = zk_call_wait(
        c, zoo_amulti(cn->zh, 3, c->ops, c->results, zk_call_on_void, c), dl);
    if (rc != ZOK && (i = zk_call_multi_failed(c, 3)) >= 0)
        rc = c->results[i].err;
    zk_call_unref(c);
    return rc;
}

int zk_delete_prefixed(struct zk_conn *cn,
                       const char *parent,
                       const char *prefix,
                       int64_t dl)
{
    struct zk_call *kc = NULL;
    char path[ZK_PATH_MAX];
    size_t plen = strlen(prefix);
    int rc = zk_get_kids(cn, parent, dl, &kc);

    for (int i = 0; rc == ZOK && i < kc->nkids; i++) {
        if (strncmp(kc->kids[i], prefix, plen) == 0 &&
            zk_child_path(parent, kc->kids[i], path, sizeof(path)) == 0)
            rc = zk_delete(cn, path, -1, dl);
        if (rc == ZNONODE)
            rc = ZOK;
    }
    zk_call_unref(kc);
    return rc;
}

/* ---- shared holders ----------------------------------------------------- */

/*
 * A shared grant, one multi: [create the key's node +] create the group h
 * (hv < 0) or set it at version hv (the holders counted in gdata) [+
 * delete our waiter node] + create our holder s<token> + set it to the
 * same data, whose stat gives its czxid (the fence) and mtime. Every
 * change of a key's shared holders sets h at the version it read, so two
 * decisions made from one read cannot both commit. *failed: which op the
 * store refused (ZK_SHARE_*), when it says.
 */
int zk_grant_shared(struct zk_conn *cn,
                    const struct zk_paths *p,
                    const struct zk_share_ops *o,
                    int64_t dl,
                    struct Stat *st,
                    enum zk_share_op *failed)
{
    struct zk_call *c = zk_call_new();
    enum zk_share_op what[ZK_MULTI_MAX];
    int n = 0, rc, i;

    *failed = ZK_SHARE_UNKNOWN;
    if (c == NULL)
        return ZSYSTEMERROR;
    if (zk_path_copy(c->paths[0], p->hpath) != 0 ||
        zk_child_path(p->parent, p->member, c->paths[1], ZK_PATH_MAX) != 0 ||
        (o->waiter_name != NULL &&
         zk_child_path(p->parent, o->waiter_name, c->paths[2], ZK_PATH_MAX) !=
             0) ||
        zk_path_copy(c->paths[3], p->parent) != 0 || p->member[0] == '\0' ||
        o->mlen > sizeof(c->buf) || o->glen > sizeof(c->gbuf))
        return zk_multi_bad(c);
    memcpy(c->buf, o->mdata, o->mlen);
    memcpy(c->gbuf, o->gdata, o->glen);
    if (o->make_parent) {
        what[n] = ZK_SHARE_PARENT;
        zoo_create_op_init(&c->ops[n++], c->paths[3], NULL, -1, cn->acl,
                           ZOO_PERSISTENT, NULL, 0);
    }
    what[n] = ZK_SHARE_GROUP;
    if (o->hv < 0)
        zoo_create_op_init(&c->ops[n++], c->paths[0], c->gbuf, (int)o->glen,
                           cn->acl, ZOO_PERSISTENT, NULL, 0);
    else
        zoo_set_op_init(&c->ops[n++], c->paths[0], c->gbuf, (int)o->glen, o->hv,
                        &c->set_stat2);
    if (o->waiter_name != NULL) {
        what[n] = ZK_SHARE_WAITER;
        zoo_delete_op_init(&c->ops[n++], c->paths[2], -1);
    }
    what[n] = ZK_SHARE_MEMBER;
    zoo_create_op_init(&c->ops[n++], c->paths[1], c->buf, (int)o->mlen, cn->acl,
                       ZOO_PERSISTENT, NULL, 0);
    what[n] = ZK_SHARE_MEMBER;
    zoo_set_op_init(&c->ops[n++], c->paths[1], c->buf, (int)o->mlen, 0,
                    &c->set_stat);
    rc = zk_call_wait(
        c, zoo_amulti(cn->zh, n, c->ops, c->results, zk_call_on_void, c), dl);
    if (rc == ZOK)
        *st = c->set_stat;
    else if ((i = zk_call_multi_failed(c, n)) >= 0) {
        *failed = what[i];
        rc = c->results[i].err;
    }
    zk_call_unref(c);
    return rc;
}

/* One multi: delete shared holders names[i] at versions[i] + set the group
 * h at hv to gdata (NULL: delete h, the last holder went) [+ delete the
 * key's node]. */
static int zk_drop_members_once(struct zk_conn *cn,
                                const struct zk_paths *p,
                                const struct zk_drop_ops *o,
                                bool with_parent,
                                int64_t dl,
                                bool *parent_failed)
{
    struct zk_call *c = zk_call_new();
    int n = 0, rc, i;

    *parent_failed = false;
    if (c == NULL)
        return ZSYSTEMERROR;
    if (o->n == 0 || o->n > ZK_MULTI_MAX - 3 ||
        zk_path_copy(c->paths[0], p->hpath) != 0 ||
        zk_path_copy(c->paths[1], p->parent) != 0 || o->glen > sizeof(c->gbuf))
        return zk_multi_bad(c);
    for (size_t k = 0; k < o->n; k++) {
        if (zk_child_path(p->parent, o->names[k], c->paths[2 + k],
                          ZK_PATH_MAX) != 0)
            return zk_multi_bad(c);
        zoo_delete_op_init(&c->ops[n++], c->paths[2 + k], o->versions[k]);
    }
    if (o->gdata != NULL) {
        memcpy(c->gbuf, o->gdata, o->glen);
        zoo_set_op_init(&c->ops[n++], c->paths[0], c->gbuf, (int)o->glen, o->hv,
                        &c->set_stat2);
    } else {
        zoo_delete_op_init(&c->ops[n++], c->paths[0], o->hv);
        if (with_parent)
            zoo_delete_op_init(&c->ops[n++], c->paths[1], -1);
    }
    rc = zk_call_wait(
        c, zoo_amulti(cn->zh, n, c->ops, c->results, zk_call_on_void, c), dl);
    if (rc != ZOK && (i = zk_call_multi_failed(c, n)) >= 0) {
        rc = c->results[i].err;
        *parent_failed = with_parent && o->gdata == NULL && i == n - 1;
    }
    zk_call_unref(c);
    return rc;
}

/* Remove shared holders from a key in one multi checked by the group's
 * version (see zk_drop_members_once()); with the key's node too when
 * with_parent, the last holder goes and nobody waits. */
int zk_drop_members(struct zk_conn *cn,
                    const struct zk_paths *p,
                    const struct zk_drop_ops *o,
                    bool with_parent,
                    int64_t dl)
{
    bool parent_failed;
    int rc = zk_drop_members_once(cn, p, o, with_parent, dl, &parent_failed);

    /* waiters: the key's node stays theirs */
    if (rc == ZNOTEMPTY && parent_failed)
        rc = zk_drop_members_once(cn, p, o, false, dl, &parent_failed);
    return rc;
}

/* A late shared grant of ours found beside a waiter node of ours: check
 * s<token> at version and delete the waiter node, in one multi. */
int zk_claim_member(struct zk_conn *cn,
                    const struct zk_paths *p,
                    int version,
                    const char *waiter_name,
                    int64_t dl)
{
    struct zk_call *c = zk_call_new();
    int rc, i;

    if (c == NULL)
        return ZSYSTEMERROR;
    if (zk_child_path(p->parent, p->member, c->paths[0], ZK_PATH_MAX) != 0 ||
        zk_child_path(p->parent, waiter_name, c->paths[1], ZK_PATH_MAX) != 0)
        return zk_multi_bad(c);
    zoo_check_op_init(&c->ops[0], c->paths[0], version);
    zoo_delete_op_init(&c->ops[1], c->paths[1], -1);
    rc = zk_call_wait(
        c, zoo_amulti(cn->zh, 2, c->ops, c->results, zk_call_on_void, c), dl);
    if (rc != ZOK && (i = zk_call_multi_failed(c, 2)) >= 0)
        rc = c->results[i].err;
    zk_call_unref(c);
    return rc;
}

/* Read the shared holders named in out[i].name under parent, all at once:
 * ZOK when every one answered (a holder gone since has gone set), else
 * the first error. */
int zk_get_members(struct zk_conn *cn,
                   const char *parent,
                   struct zk_member *out,
                   size_t n,
                   int64_t dl)
{
    struct zk_batch *b = zk_batch_new(n);
    char path[ZK_PATH_MAX];
    int rc = ZOK;

    if (b == NULL)
        return ZSYSTEMERROR;
    for (size_t i = 0; i < n; i++) {
        int sent;
        if (zk_child_path(parent, out[i].name, path, sizeof(path)) != 0) {
            b->slots[i].rc = ZBADARGUMENTS; /* never sent */
            continue;
        }
        zk_batch_sent(b);
        sent = zoo_aget(cn->zh, path, 0, zk_batch_on_data, &b->slots[i]);
        if (sent != ZOK)
            zk_batch_not_sent(b, (int)i, sent);
    }
    zk_batch_wait(b, dl);
    pthread_mutex_lock(&b->mu);
    for (size_t i = 0; i < n; i++) {
        const struct zk_batch_slot *s = &b->slots[i];
        out[i].gone = s->rc == ZNONODE;
        if (s->rc == ZOK) {
            out[i].st = s->stat;
            out[i].parsed =
                zk_parse_holder(s->data, s->data_len, &out[i].h) == 0 &&
                !out[i].h.group;
        } else if (s->rc != ZNONODE && rc == ZOK) {
            rc = s->rc;
        }
    }
    pthread_mutex_unlock(&b->mu);
    zk_batch_unref(b);
    return rc;
}
