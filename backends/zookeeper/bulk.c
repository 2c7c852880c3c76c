/*
 * backends/zookeeper/bulk.c - what a multi-key call sends: the reads of
 * all its keys at once (listings and h, back to back, one round trip) and
 * one multi of any size over all of them (struct zk_big), so that the
 * whole grant, renew or release is one ZooKeeper transaction. Like
 * store.c, nothing here judges what the store answered.
 */
#include "backends/zookeeper/zk.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* ---- the keys of a call ------------------------------------------------ */

/* The nodes of req's keys, and the handle: BACKEND_OK, or UNAVAILABLE
 * (no handle, or a path that cannot fit) or NO_MEMORY, m cleaned up. */
enum backend_result zk_multi_open(struct zk_multi *m,
                                  struct zk_be *be,
                                  const struct lock_multi_req *req)
{
    memset(m, 0, sizeof(*m));
    m->be = be;
    m->req = req;
    m->n = req->n;
    m->keys = calloc(req->n, sizeof(*m->keys));
    if (m->keys == NULL)
        return BACKEND_NO_MEMORY;
    for (size_t i = 0; i < req->n; i++) {
        struct zk_mkey *k = &m->keys[i];
        if (zk_paths_key(be, req->keys[i], req->key_lens[i], req->token,
                         &k->p) != 0 ||
            (k->p.marker[0] != '\0' &&
             (zk_child_path(k->p.parent, k->p.marker, k->tpath,
                            sizeof(k->tpath)) != 0 ||
              zk_child_path(k->p.parent, k->p.member, k->spath,
                            sizeof(k->spath)) != 0))) {
            zk_multi_close(m);
            return BACKEND_UNAVAILABLE; /* the wrapper checked the key */
        }
    }
    m->cn = zk_conn_get(be);
    if (m->cn == NULL) {
        zk_multi_close(m);
        return BACKEND_UNAVAILABLE;
    }
    m->dl = zk_deadline(be);
    return BACKEND_OK;
}

void zk_multi_close(struct zk_multi *m)
{
    if (m->cn != NULL)
        zk_conn_put(m->be, m->cn);
    m->cn = NULL;
    free(m->keys);
    m->keys = NULL;
}

/* A new round: forget what the last one saw. */
void zk_multi_reset(struct zk_multi *m)
{
    for (size_t i = 0; i < m->n; i++)
        memset(&m->keys[i].l, 0, sizeof(m->keys[i].l));
}

/* ---- reads ------------------------------------------------------------- */

/* Send slot i's call; one that could not be sent counts as answered. */
static void zk_read_send(struct zk_be *be,
                         struct zk_conn *cn,
                         struct zk_batch *b,
                         size_t i,
                         const char *path,
                         unsigned what)
{
    struct zk_batch_slot *s = &b->slots[i];
    int rc;

    zk_batch_sent(b);
    if (i % 2 == 1)
        rc = zoo_aget(cn->zh, path, 0, zk_batch_on_data, s);
    else if (what & ZK_READ_WATCH)
        rc = zoo_awget_children2(cn->zh, path, zk_node_watcher, be,
                                 zk_batch_on_kids, s);
    else
        rc = zoo_aget_children2(cn->zh, path, 0, zk_batch_on_kids, s);
    if (rc != ZOK)
        zk_batch_not_sent(b, (int)i, rc);
}

/*
 * For each of the n keys, what asks (ZK_READ_*): its node's children in
 * slot 2i (a watch on them, when asked, notifies the key on any change of
 * them: a holder or waiter leaving, or the node going), h in slot 2i + 1;
 * all sent back to back and waited for together until dl. ZOK with *out
 * (the caller's to unref; every slot answered, ZOK or ZNONODE; slots not
 * asked for read ZNONODE), or the first other answer (a timeout:
 * ZOPERATIONTIMEOUT), *out NULL.
 */
int zk_read_keys(struct zk_be *be,
                 struct zk_conn *cn,
                 const struct zk_mkey *keys,
                 size_t n,
                 unsigned what,
                 int64_t dl,
                 struct zk_batch **out)
{
    struct zk_batch *b = zk_batch_new(2 * n);
    int rc = ZOK;

    *out = NULL;
    if (b == NULL)
        return ZSYSTEMERROR;
    for (size_t i = 0; i < 2 * n; i++) {
        bool list = i % 2 == 0;
        if (!(what & (list ? ZK_READ_LIST : ZK_READ_H))) {
            b->slots[i].rc = ZNONODE;
            b->slots[i].done = true;
            continue;
        }
        zk_read_send(be, cn, b, i,
                     list ? keys[i / 2].p.parent : keys[i / 2].p.hpath, what);
    }
    zk_batch_wait(b, dl);
    pthread_mutex_lock(&b->mu);
    for (size_t i = 0; i < 2 * n && rc == ZOK; i++)
        if (!b->slots[i].done ||
            (b->slots[i].rc != ZOK && b->slots[i].rc != ZNONODE))
            rc = b->slots[i].done ? b->slots[i].rc : ZOPERATIONTIMEOUT;
    pthread_mutex_unlock(&b->mu);
    if (rc != ZOK) {
        zk_batch_unref(b);
        return rc;
    }
    *out = b; /* all answered: nothing writes into it any more */
    return ZOK;
}

/* ---- one multi of any size --------------------------------------------- */

/* Room for cap ops: 0, or -1 without memory. */
int zk_big_init(struct zk_big *b, int cap)
{
    memset(b, 0, sizeof(*b));
    b->c = zk_call_new();
    b->ops = calloc((size_t)cap, sizeof(*b->ops));
    b->key = calloc((size_t)cap, sizeof(*b->key));
    if (b->c != NULL)
        b->c->extra =
            calloc((size_t)cap, sizeof(zoo_op_result_t) + sizeof(struct Stat));
    if (b->c == NULL || b->ops == NULL || b->key == NULL ||
        b->c->extra == NULL) {
        zk_big_cleanup(b);
        return -1;
    }
    b->results = b->c->extra;
    b->stats = (struct Stat *)(b->results + cap);
    b->cap = cap;
    return 0;
}

/* Let go of b; a multi still in flight keeps its call until it ends. */
void zk_big_cleanup(struct zk_big *b)
{
    if (b->c != NULL && !b->sent)
        zk_call_unref(b->c); /* the completion's: it never comes */
    zk_call_unref(b->c);
    free(b->ops);
    free(b->key);
    memset(b, 0, sizeof(*b));
}

/* The paths and data an op names are read when the multi is sent (the
 * library serializes them then): they need to live until zk_big_run(). */
static zoo_op_t *zk_big_op(struct zk_big *b, size_t k)
{
    assert(b->n < b->cap);
    b->key[b->n] = k;
    return &b->ops[b->n++];
}

void zk_big_create(struct zk_big *b,
                   const struct zk_conn *cn,
                   size_t k,
                   const char *path,
                   const char *data,
                   size_t len)
{
    zoo_create_op_init(zk_big_op(b, k), path, data,
                       data != NULL ? (int)len : -1, cn->acl, ZOO_PERSISTENT,
                       NULL, 0);
}

void zk_big_delete(struct zk_big *b, size_t k, const char *path, int version)
{
    zoo_delete_op_init(zk_big_op(b, k), path, version);
}

void zk_big_check(struct zk_big *b, size_t k, const char *path, int version)
{
    zoo_check_op_init(zk_big_op(b, k), path, version);
}

/* A set op; its stat's index in b->stats. */
int zk_big_set(struct zk_big *b,
               size_t k,
               const char *path,
               const char *data,
               size_t len,
               int version)
{
    struct Stat *st = &b->stats[b->nstats];

    zoo_set_op_init(zk_big_op(b, k), path, data, (int)len, version, st);
    return b->nstats++;
}

/*
 * Send the multi and wait for it until dl: ZOK (b->stats filled), or the
 * store's code, with *failed_key the key of the op it refused (SIZE_MAX
 * when unknown: no answer came, or it did not say).
 */
int zk_big_run(struct zk_conn *cn,
               struct zk_big *b,
               int64_t dl,
               size_t *failed_key)
{
    struct zk_call *c = b->c;
    int rc, done;

    *failed_key = SIZE_MAX;
    b->sent = true;
    rc = zk_call_wait(
        c, zoo_amulti(cn->zh, b->n, b->ops, b->results, zk_call_on_void, c),
        dl);
    if (rc == ZOK)
        return ZOK;
    pthread_mutex_lock(&c->mu);
    done = c->done;
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; done && i < b->n; i++) {
        if (b->results[i].err != ZOK &&
            b->results[i].err != ZRUNTIMEINCONSISTENCY) {
            *failed_key = b->key[i];
            return b->results[i].err;
        }
    }
    return rc;
}
