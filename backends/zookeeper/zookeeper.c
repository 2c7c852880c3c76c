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

/* What a grant writes for req: a->mine and its data. 0, or -1 when the
 * token, owner or Idempotency-Key cannot be stored (never for lockd's). */
static int zk_acq_setup(struct zk_acq *a, const struct lock_req *req)
{
    struct zk_holder *m = &a->mine;
    size_t tlen = strlen(req->token);

    memset(m, 0, sizeof(*m));
    if (tlen > LOCK_TOKEN_MAX ||
        (req->owner != NULL && strlen(req->owner) > LOCK_OWNER_MAX) ||
        (req->idem_key != NULL && strlen(req->idem_key) > LOCK_IDEM_MAX))
        return -1;
    memcpy(m->token, req->token, tlen + 1);
    m->ttl_ms = m->run_ms = req->ttl_ms;
    m->grant_by = a->grant_by;
    m->mode = req->mode == LOCK_SHARED ? LOCK_SHARED : LOCK_EXCLUSIVE;
    m->limit = m->mode == LOCK_SHARED ? req->limit : 0;
    m->holds = 1;
    if (req->owner != NULL) {
        m->has_owner = true;
        memcpy(m->owner, req->owner, strlen(req->owner) + 1);
    }
    if (req->idem_key != NULL) {
        m->has_idem = true;
        memcpy(m->idem, req->idem_key, strlen(req->idem_key) + 1);
    }
    a->shared = m->mode == LOCK_SHARED;
    return zk_fmt_holder(a->data, sizeof(a->data), m, &a->data_len);
}

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
        a.p.marker[0] == '\0' || zk_acq_setup(&a, req) != 0) {
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

/* The live holders as of the sweep's last whole pass over every key
 * (keeper.c): no request to the store per scrape. A pass looks at
 * ZK_SWEEP_BATCH keys a keeper tick (80 keys a second), so the count is
 * as of up to N / 80 s ago for N keys in the store; -1 until the first
 * pass has ended. */
static int64_t zk_be_held_count(struct backend *b)
{
    return zk_held_count((struct zk_be *)b);
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
    zk_auth_cleanup(be);
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
    zk_index_cleanup(be);
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
                                           "password_file", "acl", NULL };
    const char *bad = NULL, *v;

    if (url_parse(url, u) != 0) {
        snprintf(errbuf, errlen, "zookeeper: malformed URL");
        return -1;
    }
    if (strcmp(u->scheme, "zookeeper") != 0 || u->hosts == NULL ||
        u->hosts[0] == '\0' || strpbrk(u->hosts, " \t/?#@") != NULL) {
        snprintf(errbuf, errlen,
                 "zookeeper: URL needs zookeeper://[user[:password]@]"
                 "host:port[,host:port][/chroot]");
        return -1;
    }
    if (url_check_params(u, allowed, &bad) != 0) {
        snprintf(errbuf, errlen,
                 "zookeeper: unknown URL option '%s' (known: "
                 "session_timeout_ms, timeout_ms, password_file, acl)",
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
static enum backend_result zk_new(struct url *u,
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
    if (zk_auth_parse(be, u, errbuf, errlen) != 0) {
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
    if (zk_index_init(be) != 0) {
        pthread_cond_destroy(&be->cv);
        pthread_mutex_destroy(&be->mu);
        pthread_mutex_destroy(&be->own_mu);
        goto fail;
    }
    atomic_init(&be->held, -1);
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
    if (u.password != NULL)
        explicit_bzero(u.password, strlen(u.password));
    url_cleanup(&u);
    if (r != BACKEND_OK)
        return r;
    zoo_set_debug_level(log_enabled(LOG_LEVEL_DEBUG) ? ZOO_LOG_LEVEL_INFO
                                                     : ZOO_LOG_LEVEL_WARN);
    if (be->auth_user != NULL)
        log_info("zookeeper: authenticating as '%s' (digest); new nodes get "
                 "acl=%s",
                 be->auth_user, be->acl_name);
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

/* One server or an ensemble, by the hosts of the URL. Every write is
 * answered only once a quorum has it in its fsynced transaction log. */
static void zk_be_describe(const struct backend *b,
                           struct backend_topology *out)
{
    const struct zk_be *be = (const struct zk_be *)b;
    unsigned n = 1;

    for (const char *p = be->hosts; *p != '\0'; p++)
        if (*p == ',')
            n++;
    snprintf(out->topology, sizeof(out->topology), "%s",
             n > 1 ? "ensemble" : "single");
    snprintf(out->fence, sizeof(out->fence),
             "the czxid of the holder's znode: ZooKeeper's transaction id "
             "of the grant");
    snprintf(out->failover, sizeof(out->failover), "%s",
             n > 1 ? "nothing a quorum acknowledged: a grant is answered "
                     "once a quorum logged it; without a quorum, 503s"
                   : "nothing ZooKeeper logged (it fsyncs before it "
                     "answers); while it is down, 503s");
    out->nodes = n;
}

const struct backend_ops zookeeper_backend = {
    .scheme = "zookeeper",
    .caps = BACKEND_CAP_QUEUE | BACKEND_CAP_HELD_LAGS,
    .open = zk_be_open,
    .acquire = zk_be_acquire,
    .renew = zk_be_renew,
    .release = zk_be_release,
    .inspect = zk_be_inspect,
    .cancel_wait = zk_be_cancel_wait,
    .acquire_multi = zk_be_acquire_multi,
    .renew_multi = zk_be_renew_multi,
    .release_multi = zk_be_release_multi,
    .list = zk_be_list,
    .force_release = zk_be_force_release,
    .ping = zk_be_ping,
    .held_count = zk_be_held_count,
    .close = zk_be_close,
    .describe = zk_be_describe,
};
