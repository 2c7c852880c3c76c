/*
 * backends/zookeeper/zookeeper.c - lock store on ZooKeeper
 * (libzookeeper-mt 3.8): the ops table zookeeper_backend, open and close,
 * and the backend operations. The rest of the adapter is split by concern
 * (see zk.h): the recipe in recipe.c, the requests in store.c, the keeper
 * thread in keeper.c, names and paths in names.c.
 *
 * One shared handle per process, owned by a keeper thread that opens it,
 * prepares the root nodes, samples the server's clock and replaces the
 * handle when its session expires. Requests borrow the handle, issue
 * asynchronous calls and wait for them with a deadline (timeout_ms;
 * backends/zookeeper/call.c), so no request hangs on a lost connection. The
 * library's threads only store results, signal condition variables and
 * call hooks->notify.
 *
 * Keys reach these operations already checked by the wrappers in
 * backends/backend.c (backend_key_ok()): 1..LOCK_KEY_MAX bytes of valid
 * UTF-8 without control characters. The adapter does not check them again.
 */
#include "backends/zookeeper/zk.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/random.h"
#include "lib/text.h"
#include "lib/url.h"

extern const struct backend_ops zookeeper_backend;

/* ---- acquire ---------------------------------------------------------- */

static enum backend_result zk_be_acquire(struct backend *b,
                                         const struct lock_req *req,
                                         struct lock_grant *out)
{
    struct zk_be *be = (struct zk_be *)b;
    /* by the server's clock, a bit earlier than we give up on it */
    struct zk_acq a = { .be = be,
                        .req = req,
                        .grant_by = zk_server_now(be) + be->timeout_ms };
    enum backend_result r = BACKEND_UNAVAILABLE;

    /* the key is checked by the wrapper; a token lockd made always fits */
    if (zk_paths_key(be, req->key, req->key_len, req->token, &a.p) != 0 ||
        a.p.marker[0] == '\0' ||
        zk_fmt_holder(a.data, sizeof(a.data), req->token, req->ttl_ms,
                      a.grant_by, req->owner, &a.data_len) != 0 ||
        zk_parse_holder(a.data, (int)a.data_len, &a.mine) != 0) {
        log_error("zookeeper: acquire: token or owner cannot be stored");
        return BACKEND_UNAVAILABLE;
    }
    if (req->waiter != NULL) {
        a.w = req->waiter->be_data;
        if (a.w == NULL) {
            a.w = zk_waiter_new(be, req->key, req->key_len);
            if (a.w == NULL)
                return BACKEND_NO_MEMORY;
            req->waiter->be_data = a.w;
        }
    }
    a.cn = zk_conn_get(be);
    if (a.cn == NULL)
        return BACKEND_UNAVAILABLE;
    a.dl = zk_deadline(be);
    for (int i = 0; i < ZK_MAX_ROUNDS; i++) {
        int rr;
        /* no place in the queue yet: a free key usually has no node */
        if (i == 0 && (a.w == NULL || (a.w->name[0] == '\0' && !a.w->pending)))
            rr = zk_acq_fresh(&a, out);
        else
            rr = zk_acq_round(&a, out);
        if (rr >= 0) {
            r = (enum backend_result)rr;
            goto done;
        }
        if (clock_mono_ms() >= a.dl)
            break;
    }
    /* contended beyond our rounds: answer held and look again soon */
    out->retry_ms = 10;
    r = BACKEND_HELD;
done:
    zk_conn_put(be, a.cn);
    return r;
}

/* ---- renew, release, inspect ------------------------------------------ */

/* Read h for a token holder's request: OK with h and st when req->token
 * holds it unexpired; NOT_FOUND, MISMATCH or UNAVAILABLE otherwise. A
 * token that cannot name a marker (not hex) is never OK: every h lockd
 * reads has a hex token (zk_parse_holder()), so after OK the caller's
 * marker is valid. */
static enum backend_result zk_read_own(struct zk_be *be,
                                       struct zk_conn *cn,
                                       const struct lock_req *req,
                                       const struct zk_paths *p,
                                       int64_t dl,
                                       struct zk_holder *h,
                                       struct Stat *st)
{
    bool parsed = false;
    int rc = zk_get(be, cn, p->hpath, false, dl, h, st, &parsed);

    if (rc == ZNONODE)
        return BACKEND_NOT_FOUND;
    if (rc != ZOK)
        return zk_unavailable("read holder", rc);
    if (!parsed)
        return BACKEND_MISMATCH;
    if (zk_remaining(be, h, st) <= 0) {
        zk_reap_holder(be, cn, p, h, st->version, dl, req->key, req->key_len);
        return BACKEND_NOT_FOUND;
    }
    if (!text_secret_eq(req->token, h->token))
        return BACKEND_MISMATCH;
    return BACKEND_OK;
}

static enum backend_result zk_be_renew(struct backend *b,
                                       const struct lock_req *req,
                                       struct lock_grant *out)
{
    struct zk_be *be = (struct zk_be *)b;
    struct zk_paths p;
    char data[ZK_DATA_MAX];
    struct zk_conn *cn;
    struct zk_holder h;
    struct Stat st;
    enum backend_result r = BACKEND_UNAVAILABLE;
    int64_t dl;

    if (zk_paths_key(be, req->key, req->key_len, req->token, &p) != 0)
        return BACKEND_NOT_FOUND;
    cn = zk_conn_get(be);
    if (cn == NULL)
        return BACKEND_UNAVAILABLE;
    dl = zk_deadline(be);
    for (int i = 0; i < ZK_MAX_ROUNDS && clock_mono_ms() < dl; i++) {
        uint64_t ttl;
        size_t len;
        int64_t sent;
        int rc;

        r = zk_read_own(be, cn, req, &p, dl, &h, &st);
        if (r != BACKEND_OK)
            break;
        ttl = req->ttl_ms != 0 ? req->ttl_ms : h.ttl_ms;
        if (zk_fmt_holder(data, sizeof(data), h.token, ttl, 0,
                          h.has_owner ? h.owner : NULL, &len) != 0) {
            r = BACKEND_UNAVAILABLE;
            break;
        }
        /* the version and marker checks: a reap or release in between
         * wins, and a later grant of the key is never overwritten */
        sent = clock_mono_ms();
        rc = zk_set_marked(cn, &p, data, len, st.version, dl, &st);
        if (rc == ZOK) {
            struct zk_own o;
            bool alone =
                !zk_own_get(be, req->key, req->key_len, req->token, &o) ||
                o.alone;
            struct zk_holder now = h;
            int64_t left;
            now.ttl_ms = ttl;
            now.grant_by = 0;
            zk_clock_sample(be, st.mtime, sent, clock_mono_ms());
            zk_own_put(be, req->key, req->key_len, h.token, &st, ttl, alone);
            /* its whole TTL from when the call began, unless none of it
             * is surely left once the answer came: then it came too late
             * to be one */
            left = zk_left_surely(be, &now, &st, sent);
            r = left > 0 && zk_fill_grant(&st, ttl, ttl, out) == 0
                    ? BACKEND_OK
                    : zk_unavailable("renew", ZOPERATIONTIMEOUT);
            break;
        }
        r = BACKEND_UNAVAILABLE;
        if (rc == ZNONODE) {
            r = BACKEND_NOT_FOUND;
            break;
        }
        if (rc != ZBADVERSION) {
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
 * we remember is stale or expired: then read h and judge.
 */
static int zk_release_known(struct zk_be *be,
                            struct zk_conn *cn,
                            const struct lock_req *req,
                            const struct zk_paths *p,
                            int64_t dl)
{
    struct zk_own o;
    int rc;

    if (!zk_own_get(be, req->key, req->key_len, req->token, &o))
        return -1;
    if (o.mtime + (int64_t)o.ttl_ms - zk_server_now(be) <= 0) {
        zk_own_drop(be, req->key, req->key_len);
        return -1; /* expired by now: the read path reaps it */
    }
    rc = zk_drop_checked(cn, p, p->marker, o.version, o.alone, dl);
    if (rc == ZOK)
        return BACKEND_OK;
    if (rc == ZNONODE || rc == ZBADVERSION) {
        zk_own_drop(be, req->key, req->key_len);
        return -1;
    }
    return zk_unavailable("release", rc);
}

static enum backend_result zk_be_release(struct backend *b,
                                         const struct lock_req *req,
                                         struct lock_grant *out)
{
    struct zk_be *be = (struct zk_be *)b;
    struct zk_paths p;
    struct zk_conn *cn;
    struct zk_holder h;
    struct Stat st;
    enum backend_result r = BACKEND_UNAVAILABLE;
    int64_t dl;
    int known;
    (void)out; /* holds left: 0, set by the wrapper */

    if (zk_paths_key(be, req->key, req->key_len, req->token, &p) != 0)
        return BACKEND_NOT_FOUND;
    cn = zk_conn_get(be);
    if (cn == NULL)
        return BACKEND_UNAVAILABLE;
    dl = zk_deadline(be);
    known = p.marker[0] != '\0' ? zk_release_known(be, cn, req, &p, dl) : -1;
    if (known >= 0) {
        r = (enum backend_result)known;
        if (r == BACKEND_OK) {
            zk_own_drop(be, req->key, req->key_len);
            zk_notify(be, req->key, req->key_len);
        }
        goto out;
    }
    for (int i = 0; i < ZK_MAX_ROUNDS && clock_mono_ms() < dl; i++) {
        int rc;

        r = zk_read_own(be, cn, req, &p, dl, &h, &st);
        if (r != BACKEND_OK)
            break;
        /* the key's node goes too unless someone waits */
        rc = zk_drop_checked(cn, &p, p.marker, st.version, true, dl);
        r = BACKEND_UNAVAILABLE;
        if (rc == ZOK) {
            r = BACKEND_OK;
            zk_own_drop(be, req->key, req->key_len);
            zk_notify(be, req->key, req->key_len);
            break;
        }
        if (rc == ZNONODE) {
            r = BACKEND_NOT_FOUND;
            break;
        }
        if (rc != ZBADVERSION) {
            r = zk_unavailable("release", rc);
            break;
        }
    }
out:
    zk_conn_put(be, cn);
    return r;
}

static enum backend_result zk_be_inspect(struct backend *b,
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
    } else if (!parsed || st.czxid <= 0 ||
               (uint64_t)st.czxid > LOCK_FENCE_MAX) {
        r = BACKEND_UNAVAILABLE;
    } else if ((left = zk_remaining(be, &h, &st)) <= 0) {
        zk_reap_holder(be, cn, &p, &h, st.version, dl, key, key_len);
        r = BACKEND_NOT_FOUND;
    } else {
        out->fence = (uint64_t)st.czxid;
        out->ttl_ms = (uint64_t)left;
        out->expires_at_ms = st.mtime + (int64_t)h.ttl_ms;
        out->has_owner = h.has_owner;
        memcpy(out->owner, h.owner, sizeof(out->owner));
        r = BACKEND_OK;
    }
    zk_conn_put(be, cn);
    return r;
}

static enum backend_result zk_be_cancel_wait(struct backend *b,
                                             const char *key,
                                             size_t key_len,
                                             struct lock_waiter *waiter)
{
    struct zk_be *be = (struct zk_be *)b;
    struct zk_waiter *w = waiter->be_data;
    struct zk_paths p;
    char path[ZK_PATH_MAX];
    enum backend_result r = BACKEND_OK;
    struct zk_conn *cn;
    int rc = ZOK;

    if (w == NULL)
        return BACKEND_OK;
    waiter->be_data = NULL;
    if ((w->name[0] == '\0' && !w->pending) ||
        zk_paths_key(be, key, key_len, NULL, &p) != 0)
        goto out;
    cn = zk_conn_get(be);
    if (cn == NULL) {
        rc = ZCONNECTIONLOSS;
    } else if (w->name[0] != '\0') {
        if (zk_child_path(p.parent, w->name, path, sizeof(path)) == 0)
            rc = zk_delete(cn, path, -1, zk_deadline(be));
    } else {
        /* a create we never heard back from: find it by its prefix */
        rc = zk_delete_prefixed(cn, p.parent, w->prefix, zk_deadline(be));
    }
    if (cn != NULL)
        zk_conn_put(be, cn);
    if (rc != ZOK && rc != ZNONODE) {
        /* try again from the keeper; else it goes with our session or
         * when others see its deadline pass */
        zk_trash_add(be, p.parent, w->name[0] != '\0' ? w->name : w->prefix,
                     w->name[0] == '\0');
        r = BACKEND_UNAVAILABLE;
    }
out:
    zk_waiter_free(be, w);
    /* the next waiter here may have watched our node, or not yet */
    zk_notify(be, key, key_len);
    return r;
}

static enum backend_result zk_be_ping(struct backend *b)
{
    struct zk_be *be = (struct zk_be *)b;
    struct zk_conn *cn = zk_conn_get(be);
    int rc;

    if (cn == NULL)
        return BACKEND_UNAVAILABLE;
    rc = zk_exists(cn, be->root, zk_deadline(be));
    zk_conn_put(be, cn);
    return rc == ZOK ? BACKEND_OK : zk_unavailable("ping", rc);
}

/* ---- open and close --------------------------------------------------- */

/* What open() allocated; accepts a half-built be (zeroed members). */
static void zk_free(struct zk_be *be)
{
    free(be->own);
    free(be->hosts);
    free(be->root);
    free(be->locks);
    free(be->clock_path);
    free(be->chroot);
    free(be);
}

static void zk_be_close(struct backend *b)
{
    struct zk_be *be = (struct zk_be *)b;

    if (be == NULL)
        return;
    if (be->keeper_started) {
        pthread_mutex_lock(&be->mu);
        be->stopping = true;
        pthread_cond_broadcast(&be->cv);
        pthread_mutex_unlock(&be->mu);
        pthread_join(be->keeper, NULL);
    }
    zk_call_unref(be->sweep);
    pthread_mutex_lock(&be->mu);
    if (be->conn != NULL)
        zk_conn_retire(be, be->conn);
    while (be->trash != NULL) {
        struct zk_trash *t = be->trash;
        be->trash = t->next;
        free(t->parent);
        free(t->name);
        free(t);
    }
    while (be->waiters != NULL) { /* the caller should have cancelled them */
        struct zk_waiter *w = be->waiters;
        be->waiters = w->next;
        free(w->key);
        free(w);
    }
    pthread_mutex_unlock(&be->mu);
    pthread_cond_destroy(&be->cv);
    pthread_mutex_destroy(&be->mu);
    for (size_t i = 0; i < ZK_OWN_SLOTS; i++)
        free(be->own[i].key);
    pthread_mutex_destroy(&be->own_mu);
    zk_free(be);
}

/* Parse and check url: 0 with *u filled (the caller cleans it up) and the
 * options read, or -1 with the problem in errbuf and nothing logged. */
static int zk_parse_url(const char *url,
                        struct url *u,
                        uint64_t *session,
                        uint64_t *timeout,
                        char *errbuf,
                        size_t errlen)
{
    static const char *const allowed[] = { "session_timeout_ms", "timeout_ms",
                                           NULL };
    const char *bad = NULL, *v;

    if (url_parse(url, u) != 0) {
        snprintf(errbuf, errlen, "zookeeper: malformed URL");
        return -1;
    }
    if (strcmp(u->scheme, "zookeeper") != 0 || u->user != NULL ||
        u->hosts == NULL || u->hosts[0] == '\0' ||
        strpbrk(u->hosts, " \t/?#@") != NULL) {
        snprintf(errbuf, errlen,
                 "zookeeper: URL needs zookeeper://host:port[,host:port]"
                 "[/chroot]");
        return -1;
    }
    if (url_check_params(u, allowed, &bad) != 0) {
        snprintf(errbuf, errlen,
                 "zookeeper: unknown URL option '%s' (known: "
                 "session_timeout_ms, timeout_ms)",
                 bad);
        return -1;
    }
    v = url_param(u, "session_timeout_ms");
    if (v != NULL && text_parse_u64(v, 1000, 600000, session) != 0) {
        snprintf(errbuf, errlen,
                 "zookeeper: session_timeout_ms must be 1000..600000");
        return -1;
    }
    v = url_param(u, "timeout_ms");
    if (v != NULL && text_parse_u64(v, 10, 600000, timeout) != 0) {
        snprintf(errbuf, errlen, "zookeeper: timeout_ms must be 10..600000");
        return -1;
    }
    return 0;
}

/* The state for a checked URL, its locks made, no thread started yet:
 * BACKEND_OK, INVALID (a bad chroot) or NO_MEMORY, with *out set on OK. */
static enum backend_result zk_new(const struct url *u,
                                  const struct backend_hooks *hooks,
                                  uint64_t session,
                                  uint64_t timeout,
                                  struct zk_be **out,
                                  char *errbuf,
                                  size_t errlen)
{
    struct zk_be *be = calloc(1, sizeof(*be));

    if (be == NULL)
        return BACKEND_NO_MEMORY;
    be->base.ops = &zookeeper_backend;
    if (zk_parse_chroot(u->path, &be->chroot) != 0) {
        snprintf(errbuf, errlen,
                 "zookeeper: chroot must be /segment[/segment] of "
                 "[A-Za-z0-9._-], at most %d bytes",
                 ZK_CHROOT_MAX);
        zk_free(be);
        return BACKEND_INVALID;
    }
    be->hosts = strdup(u->hosts);
    if (zk_root_paths(be) != 0 || be->hosts == NULL)
        goto fail;
    if (hooks != NULL)
        be->hooks = *hooks;
    be->session_ms = (int)session;
    be->timeout_ms = (int64_t)timeout;
    be->base.call_timeout_ms = be->timeout_ms;
    if (random_hex(be->inst, (sizeof(be->inst) - 1) / 2) != 0) {
        uint64_t x = (uint64_t)clock_mono_us() ^ (uint64_t)clock_wall_ms()
                                                     << 20;
        snprintf(be->inst, sizeof(be->inst), "%016" PRIx64, x);
    }
    be->own = calloc(ZK_OWN_SLOTS, sizeof(*be->own));
    if (be->own == NULL)
        goto fail;
    if (pthread_mutex_init(&be->own_mu, NULL) != 0) {
        snprintf(errbuf, errlen, "zookeeper: cannot make a mutex");
        goto fail;
    }
    if (pthread_mutex_init(&be->mu, NULL) != 0 ||
        clock_cond_init(&be->cv) != 0) {
        pthread_mutex_destroy(&be->own_mu);
        snprintf(errbuf, errlen, "zookeeper: cannot make a mutex");
        goto fail;
    }
    *out = be;
    return BACKEND_OK;
fail:
    zk_free(be);
    return BACKEND_NO_MEMORY;
}

static enum backend_result zk_be_open(const char *url,
                                      const struct backend_hooks *hooks,
                                      struct backend **out,
                                      char *errbuf,
                                      size_t errlen)
{
    struct url u;
    struct zk_be *be = NULL;
    uint64_t session = ZK_DEFAULT_SESSION_MS, timeout = ZK_DEFAULT_TIMEOUT_MS;
    enum backend_result r = BACKEND_INVALID;

    *out = NULL;
    if (zk_parse_url(url, &u, &session, &timeout, errbuf, errlen) == 0)
        r = zk_new(&u, hooks, session, timeout, &be, errbuf, errlen);
    url_cleanup(&u);
    if (r != BACKEND_OK)
        return r;
    zoo_set_debug_level(log_enabled(LOG_LEVEL_DEBUG) ? ZOO_LOG_LEVEL_INFO
                                                     : ZOO_LOG_LEVEL_WARN);
    if (pthread_create(&be->keeper, NULL, zk_keeper, be) != 0) {
        snprintf(errbuf, errlen, "zookeeper: cannot start the keeper thread");
        zk_be_close(&be->base);
        return BACKEND_NO_MEMORY;
    }
    be->keeper_started = true;
    /* a short wait for the first session, so that a lockd started next to
     * a running ZooKeeper is ready at once; a store still down is no
     * failure: calls answer UNAVAILABLE until it is back */
    pthread_mutex_lock(&be->mu);
    for (int64_t now = clock_mono_ms(), until = now + be->timeout_ms;
         now < until && (be->conn == NULL || !be->conn->ready);
         now = clock_mono_ms())
        zk_keeper_wait(be, until - now);
    if (be->conn == NULL || !be->conn->ready)
        log_warn("zookeeper: %s does not answer yet; answering 503 until it "
                 "does",
                 be->hosts);
    pthread_mutex_unlock(&be->mu);
    *out = &be->base;
    return BACKEND_OK;
}

const struct backend_ops zookeeper_backend = {
    .scheme = "zookeeper",
    .caps = BACKEND_CAP_QUEUE,
    .open = zk_be_open,
    .acquire = zk_be_acquire,
    .renew = zk_be_renew,
    .release = zk_be_release,
    .inspect = zk_be_inspect,
    .cancel_wait = zk_be_cancel_wait,
    .ping = zk_be_ping,
    .held_count = NULL,
    .close = zk_be_close,
};
