/*
 * backends/zookeeper/keeper.c - the keeper thread and what it owns: the
 * one shared handle (opened, made ready, lent to requests, replaced when
 * its session expires), the server's clock learned from our own writes,
 * the watchers the library calls, the nodes failed cancels left behind,
 * and the sweep that frees keys nobody touches again. Requests never
 * open, close or wait for a session: they borrow the handle or answer
 * UNAVAILABLE at once.
 */
#include "backends/zookeeper/zk.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"

/* ---- the server's clock ----------------------------------------------- */

/* Learn from a write of ours whose stat says mtime, sent at t0 and
 * answered at t1 (local monotonic ms). */
void zk_clock_sample(struct zk_be *be, int64_t mtime, int64_t t0, int64_t t1)
{
    struct zk_clock *c = &be->clock;
    int64_t off = mtime - t1;
    /* mtime is whole ms: the write may have been up to 1 ms later */
    int64_t hi = mtime + 1 - t0;

    pthread_mutex_lock(&be->mu);
    if (!c->valid) {
        c->valid = true;
        c->cur_ms = c->prev_ms = off;
        c->cur_hi_ms = c->prev_hi_ms = hi;
        c->period_at = t1;
    } else if (t1 - c->period_at >= ZK_CLOCK_REFRESH_MS) {
        c->prev_ms = c->cur_ms;
        c->cur_ms = off;
        c->prev_hi_ms = c->cur_hi_ms;
        c->cur_hi_ms = hi;
        c->period_at = t1;
    } else {
        if (off > c->cur_ms)
            c->cur_ms = off;
        if (hi < c->cur_hi_ms)
            c->cur_hi_ms = hi;
    }
    c->last_at = t1;
    pthread_mutex_unlock(&be->mu);
}

/* The server's wall clock now, in ms, as far as we can tell: never ahead
 * (so we never reap early), behind by the fastest reply of the last few
 * seconds. */
int64_t zk_server_now(struct zk_be *be)
{
    int64_t now;

    pthread_mutex_lock(&be->mu);
    now = clock_mono_ms() + (be->clock.cur_ms > be->clock.prev_ms
                                 ? be->clock.cur_ms
                                 : be->clock.prev_ms);
    pthread_mutex_unlock(&be->mu);
    /* mtime and our clock are whole ms: each sample may be ahead by up to
     * 1 ms, and an mtime marks a write up to 1 ms after it */
    return now - ZK_CLOCK_SLACK_MS;
}

/* The latest the server's wall clock can be now, in ms: never behind it,
 * ahead by the fastest round trip of the last few seconds. A grant reports
 * what is left of it by this clock, so never more than is left by the
 * server's. */
int64_t zk_server_latest(struct zk_be *be)
{
    const struct zk_clock *c = &be->clock;
    int64_t mono, hi, lo;

    pthread_mutex_lock(&be->mu);
    mono = clock_mono_ms();
    hi = c->cur_hi_ms < c->prev_hi_ms ? c->cur_hi_ms : c->prev_hi_ms;
    lo = c->cur_ms > c->prev_ms ? c->cur_ms : c->prev_ms;
    pthread_mutex_unlock(&be->mu);
    /* our clock is whole ms too; and after a step of the server's clock
     * the bounds may cross: never earlier than the lower estimate */
    return mono + 1 + (hi > lo ? hi : lo);
}

/* ---- watches and notifications ---------------------------------------- */

/* A watch on h or on a predecessor fired (or a renew changed h): some
 * waiter of the key named in path may move up. Runs on the library's
 * thread: decode and notify, nothing else. */
void zk_node_watcher(
    zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    struct zk_be *be = ctx;
    unsigned char key[LOCK_KEY_MAX];
    size_t n = strlen(be->locks);
    const char *enc, *slash;
    long len;

    (void)zh;
    (void)state;
    if (type == ZOO_SESSION_EVENT || type == ZOO_NOTWATCHING_EVENT ||
        path == NULL || be->hooks.notify == NULL)
        return;
    if (strncmp(path, be->locks, n) != 0 || path[n] != '/' ||
        path[n + 1] != 'k')
        return;
    enc = path + n + 2;
    slash = strchr(enc, '/');
    len =
        zk_b64_decode(enc, slash != NULL ? (size_t)(slash - enc) : strlen(enc),
                      key, sizeof(key));
    if (len > 0)
        be->hooks.notify(be->hooks.arg, (const char *)key, (size_t)len);
}

/* Session events: wake the keeper, which does the work. */
static void zk_session_watcher(
    zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    struct zk_be *be = ctx;

    (void)zh;
    (void)state;
    (void)path;
    if (type != ZOO_SESSION_EVENT)
        return;
    pthread_mutex_lock(&be->mu);
    be->events++;
    pthread_cond_broadcast(&be->cv);
    pthread_mutex_unlock(&be->mu);
}

void zk_notify(struct zk_be *be, const char *key, size_t key_len)
{
    if (be->hooks.notify != NULL)
        be->hooks.notify(be->hooks.arg, key, key_len);
}

/* Every key with a waiter here: after a new session or a reconnect, when
 * watches may have been lost. */
static void zk_notify_all(struct zk_be *be)
{
    struct zk_waiter *w;
    size_t n = 0, i = 0;
    char **keys;
    size_t *lens;

    pthread_mutex_lock(&be->mu);
    for (w = be->waiters; w != NULL; w = w->next)
        n++;
    keys = n > 0 ? calloc(n, sizeof(*keys)) : NULL;
    lens = n > 0 ? calloc(n, sizeof(*lens)) : NULL;
    if (keys != NULL && lens != NULL) {
        for (w = be->waiters; w != NULL && i < n; w = w->next) {
            keys[i] = malloc(w->key_len + 1);
            if (keys[i] == NULL)
                continue;
            memcpy(keys[i], w->key, w->key_len + 1);
            lens[i++] = w->key_len;
        }
    }
    pthread_mutex_unlock(&be->mu);
    for (size_t k = 0; k < i; k++) {
        zk_notify(be, keys[k], lens[k]);
        free(keys[k]);
    }
    free(keys);
    free(lens);
}

/* ---- the shared handle ------------------------------------------------ */

static void zk_lib_log(const char *message)
{
    log_debug("zookeeper: %s", message);
}

/* Borrow the handle if it is connected and ready; NULL otherwise. */
struct zk_conn *zk_conn_get(struct zk_be *be)
{
    struct zk_conn *c;

    pthread_mutex_lock(&be->mu);
    c = be->conn;
    if (c != NULL && (!c->ready || zoo_state(c->zh) != ZOO_CONNECTED_STATE))
        c = NULL;
    if (c != NULL)
        c->refs++;
    pthread_mutex_unlock(&be->mu);
    return c;
}

void zk_conn_put(struct zk_be *be, struct zk_conn *c)
{
    pthread_mutex_lock(&be->mu);
    if (--c->refs == 0)
        pthread_cond_broadcast(&be->cv);
    pthread_mutex_unlock(&be->mu);
}

/* be->mu held; takes c out of service, waits until nobody borrows it,
 * closes it. Returns with be->mu held. */
void zk_conn_retire(struct zk_be *be, struct zk_conn *c)
{
    if (be->conn == c)
        be->conn = NULL;
    c->refs--;
    while (c->refs > 0)
        pthread_cond_wait(&be->cv, &be->mu);
    pthread_mutex_unlock(&be->mu);
    zookeeper_close(c->zh); /* pending completions get ZCLOSING */
    free(c);
    pthread_mutex_lock(&be->mu);
}

/* ---- nodes failed cancels left behind --------------------------------- */

/* Remember a node to delete later (a cancel that could not reach the
 * store); bounded: past the limit the node waits for its deadline. */
void zk_trash_add(struct zk_be *be,
                  const char *parent,
                  const char *name,
                  bool is_prefix)
{
    struct zk_trash *t = calloc(1, sizeof(*t));

    if (t != NULL) {
        t->parent = strdup(parent);
        t->name = strdup(name);
        t->is_prefix = is_prefix;
    }
    pthread_mutex_lock(&be->mu);
    if (t != NULL && t->parent != NULL && t->name != NULL &&
        be->ntrash < ZK_TRASH_MAX) {
        t->next = be->trash;
        be->trash = t;
        be->ntrash++;
        t = NULL;
    }
    pthread_mutex_unlock(&be->mu);
    if (t != NULL) {
        free(t->parent);
        free(t->name);
        free(t);
    }
}

/* ---- the keeper thread ------------------------------------------------ */

/* A step of zk_setup() on path failed with rc. NoAuth means the tree is
 * someone else's (or ours under other credentials): said once until a
 * setup succeeds, for it never passes by waiting. */
static int
zk_setup_failed(struct zk_be *be, const char *what, const char *path, int rc)
{
    if ((rc == ZNOAUTH || rc == ZINVALIDACL) && !be->noauth_said) {
        be->noauth_said = true;
        log_warn("zookeeper: %s %s: %s: %s; answering 503", what, path,
                 zerror(rc),
                 be->auth_user != NULL
                     ? "its ACL leaves out the URL's user (not the one that "
                       "made lockd's nodes, or a wrong password)"
                     : "its ACL leaves out a client without credentials "
                       "(add user:password to the URL)");
    }
    return zk_unavailable(what, rc);
}

/* A new session: make the root nodes, learn the server's clock. */
static int zk_setup(struct zk_be *be, struct zk_conn *cn)
{
    char path[ZK_PATH_MAX];
    const char *parts[] = { be->chroot, be->root, be->locks, be->clock_path };
    int64_t dl = zk_deadline(be), t0, t1;
    struct Stat st;
    int rc;

    /* every ancestor of the chroot, then ours */
    for (size_t i = 1, n = strlen(be->chroot); i <= n; i++) {
        if (i < n && be->chroot[i] != '/')
            continue;
        memcpy(path, be->chroot, i);
        path[i] = '\0';
        rc = zk_create(cn, path, NULL, -1, ZOO_PERSISTENT, dl, NULL, 0, NULL);
        if (rc != ZOK && rc != ZNODEEXISTS)
            return zk_setup_failed(be, "create chroot", path, rc);
    }
    for (size_t i = 1; i < sizeof(parts) / sizeof(parts[0]); i++) {
        rc = zk_create(cn, parts[i], NULL, -1, ZOO_PERSISTENT, dl, NULL, 0,
                       NULL);
        if (rc != ZOK && rc != ZNODEEXISTS)
            return zk_setup_failed(be, "create root", parts[i], rc);
    }
    t0 = clock_mono_ms();
    rc = zk_set(cn, be->clock_path, NULL, -1, -1, dl, &st);
    t1 = clock_mono_ms();
    if (rc != ZOK)
        return zk_setup_failed(be, "write clock", be->clock_path, rc);
    zk_clock_sample(be, st.mtime, t0, t1);
    be->noauth_said = false;
    return ZOK;
}

/* Delete what failed cancels left behind. */
static void zk_empty_trash(struct zk_be *be, struct zk_conn *cn)
{
    struct zk_trash *t, *keep = NULL;
    char path[ZK_PATH_MAX];

    pthread_mutex_lock(&be->mu);
    t = be->trash;
    be->trash = NULL;
    be->ntrash = 0;
    pthread_mutex_unlock(&be->mu);
    while (t != NULL) {
        struct zk_trash *next = t->next;
        int64_t dl = zk_deadline(be);
        int rc = ZOK;
        if (t->is_prefix)
            rc = zk_delete_prefixed(cn, t->parent, t->name, dl);
        else if (zk_child_path(t->parent, t->name, path, sizeof(path)) == 0)
            rc = zk_delete(cn, path, -1, dl);
        if (rc == ZOK || rc == ZNONODE || rc == ZNOTEMPTY) {
            free(t->parent);
            free(t->name);
            free(t);
        } else {
            t->next = keep;
            keep = t;
        }
        t = next;
    }
    while (keep != NULL) {
        struct zk_trash *next = keep->next;
        pthread_mutex_lock(&be->mu);
        keep->next = be->trash;
        be->trash = keep;
        be->ntrash++;
        pthread_mutex_unlock(&be->mu);
        keep = next;
    }
}

/*
 * Look at one key's node: drop waiters past their deadline, an expired
 * holder, markers without their holder (lockd drops them together; a
 * store edited by hand may not) and, when nothing is left, the node itself.
 * This is what frees keys that nobody touches again (a holder that died and
 * never released, a queue whose waiters all left), so nothing grows without
 * bound. Returns the live holders it saw (for held_count).
 */
static int64_t
zk_sweep_key(struct zk_be *be, struct zk_conn *cn, const struct zk_ixkey *key)
{
    struct zk_paths p;
    char path[ZK_PATH_MAX];
    struct zk_call *kc = NULL;
    struct zk_holder h;
    int64_t dl = zk_deadline(be), now, held = 0;
    int live = 0, rc;
    bool has_h = false, parsed = false;

    if (zk_paths_key(be, key->key, key->len, NULL, &p) != 0)
        return 0;
    if (zk_get_kids(cn, p.parent, dl, &kc) != ZOK)
        return 0;
    for (int i = 0; i < kc->nkids; i++)
        if (strcmp(kc->kids[i], "h") == 0)
            has_h = true;
    if (has_h) {
        struct Stat st;
        rc = zk_get(be, cn, p.hpath, false, dl, &h, &st, &parsed);
        if (rc == ZOK && parsed && h.group)
            held = (int64_t)zk_sweep_group(be, cn, &p, &h, &st, kc, dl);
        else if (rc == ZNONODE ||
                 (rc == ZOK && parsed && zk_remaining(be, &h, &st) <= 0 &&
                  zk_reap_holder(be, cn, &p, &h, st.version, dl, key->key,
                                 key->len) == ZOK))
            has_h = false; /* its marker went with it */
        else if (rc != ZOK)
            parsed = false; /* keep every marker */
        else
            held = parsed && zk_remaining(be, &h, &st) > 0;
    }
    now = zk_server_now(be);
    for (int i = 0; i < kc->nkids; i++) {
        const char *kid = kc->kids[i];
        struct zk_kid k;
        if (strcmp(kid, "h") == 0) {
            live += has_h;
        } else if (kid[0] == 't') {
            /* a marker lives exactly as long as its holder (a group has
             * none) */
            bool mine = has_h && (!parsed ||
                                  (!h.group && strcmp(kid + 1, h.token) == 0));
            /* only while no h exists: the listing may be older than a
             * new grant under the same token, whose marker this is */
            if (!mine &&
                ((rc = zk_drop_stray(cn, &p, kid, dl)) == ZOK || rc == ZNONODE))
                continue;
            live++;
        } else if (zk_parse_waiter(kid, &k) == 0 && k.deadline < now &&
                   zk_child_path(p.parent, k.name, path, sizeof(path)) == 0 &&
                   zk_delete(cn, path, -1, dl) == ZOK) {
            continue;
        } else {
            live++;
        }
    }
    zk_call_unref(kc);
    if (live == 0)
        zk_delete(cn, p.parent, -1, dl); /* ZNOTEMPTY: someone came: fine */
    return held;
}

/* Relist every key's node for the index (list() and the sweep go by it),
 * at most every zk_index_period(): the one listing of all keys, whose
 * cost grows with their number, so its period does too. */
static void zk_relist(struct zk_be *be, struct zk_conn *cn)
{
    struct zk_call *kc = NULL;
    int64_t now = clock_mono_ms();

    if (be->sweep_at != 0 && now - be->sweep_at < zk_index_period(be))
        return;
    be->sweep_at = now;
    zk_index_listing(be);
    if (zk_get_kids(cn, be->locks, zk_deadline(be), &kc) != ZOK)
        kc = NULL;
    zk_index_listed(be, kc, now);
    be->sweep_listed |= kc != NULL;
    zk_call_unref(kc);
}

/* A few keys per tick, in the index's order, wherever the last tick
 * stopped: a bounded load whatever the number of keys. At the end of a
 * pass, the live holders it saw become held_count. */
static void zk_sweep(struct zk_be *be, struct zk_conn *cn)
{
    struct zk_ixkey *keys, last;
    size_t n;
    bool end;

    zk_relist(be, cn);
    keys = malloc(ZK_SWEEP_BATCH * sizeof(*keys));
    if (keys == NULL)
        return;
    last.len = be->sweep_len;
    memcpy(last.key, be->sweep_key, be->sweep_len);
    n = zk_index_next(be, be->sweep_mid ? &last : NULL, "", 0, keys,
                      ZK_SWEEP_BATCH, &end);
    for (size_t i = 0; i < n; i++)
        be->sweep_live += zk_sweep_key(be, cn, &keys[i]);
    if (n > 0) {
        be->sweep_len = keys[n - 1].len;
        memcpy(be->sweep_key, keys[n - 1].key, keys[n - 1].len);
        be->sweep_mid = true;
    }
    if (end && be->sweep_listed) {
        atomic_store(&be->held, be->sweep_live);
        be->sweep_live = 0;
        be->sweep_mid = false;
    }
    free(keys);
}

int64_t zk_held_count(struct zk_be *be)
{
    return atomic_load(&be->held);
}

void zk_keeper_wait(struct zk_be *be, int64_t ms)
{
    clock_cond_wait_until(&be->cv, &be->mu, clock_deadline_ms(ms));
}

/* be->mu held: after a failure, wait the backoff and double it. */
static void zk_keeper_backoff(struct zk_be *be, int64_t *backoff)
{
    zk_keeper_wait(be, *backoff);
    *backoff = *backoff < 5000 ? *backoff * 2 : 5000;
}

/* be->mu held: open a handle (a session is made in the background) and
 * make it be->conn. NULL, after the backoff, when the library cannot. */
static struct zk_conn *zk_keeper_open(struct zk_be *be, int64_t *backoff)
{
    struct zk_conn *c;
    zhandle_t *zh;

    pthread_mutex_unlock(&be->mu);
    zh = zookeeper_init2(be->hosts, zk_session_watcher, be->session_ms, NULL,
                         be, 0, zk_lib_log);
    pthread_mutex_lock(&be->mu);
    /* auth before the handle serves anyone: a create without it would
     * get an ACL naming nobody (or fail) */
    if (zh != NULL && zk_auth_add(be, zh) != ZOK) {
        pthread_mutex_unlock(&be->mu);
        zookeeper_close(zh);
        pthread_mutex_lock(&be->mu);
        zk_keeper_backoff(be, backoff);
        return NULL;
    }
    c = zh != NULL ? calloc(1, sizeof(*c)) : NULL;
    if (c == NULL) {
        log_warn("zookeeper: cannot open a handle for %s: %s", be->hosts,
                 strerror(errno));
        if (zh != NULL) {
            pthread_mutex_unlock(&be->mu);
            zookeeper_close(zh);
            pthread_mutex_lock(&be->mu);
        }
        zk_keeper_backoff(be, backoff);
        return NULL;
    }
    if (zoo_set_servers_resolution_delay(zh, ZK_RESOLVE_DELAY_MS) != ZOK)
        log_warn("zookeeper: cannot set the resolution delay");
    c->zh = zh;
    c->acl = be->acl;
    c->refs = 1;
    be->conn = c;
    return c;
}

/* be->mu held, c ready and borrowed: the periodic work of a connected
 * keeper, done without be->mu (returns with it held). notify: a session
 * just became usable, so watches may have been lost. */
static void zk_keeper_chores(struct zk_be *be, struct zk_conn *c, bool notify)
{
    bool stale = clock_mono_ms() - be->clock.last_at >= ZK_CLOCK_REFRESH_MS;
    bool trash = be->trash != NULL;

    pthread_mutex_unlock(&be->mu);
    if (notify)
        zk_notify_all(be);
    if (stale) {
        struct Stat st;
        int64_t t0 = clock_mono_ms();
        if (zk_set(c, be->clock_path, NULL, -1, -1, zk_deadline(be), &st) ==
            ZOK)
            zk_clock_sample(be, st.mtime, t0, clock_mono_ms());
    }
    if (trash)
        zk_empty_trash(be, c);
    zk_sweep(be, c);
    pthread_mutex_lock(&be->mu);
}

/* be->mu held, c connected: make it ready (roots, clock) if it is not,
 * say so once, do the chores. *up: the last tick had a usable session. */
static void zk_keeper_connected(struct zk_be *be,
                                struct zk_conn *c,
                                bool *up,
                                int64_t *backoff)
{
    bool notify = false;

    c->refs++;
    if (!c->ready) {
        pthread_mutex_unlock(&be->mu);
        int rc = zk_setup(be, c);
        pthread_mutex_lock(&be->mu);
        c->ready = rc == ZOK;
        if (c->ready)
            pthread_cond_broadcast(&be->cv); /* open() waits */
    }
    if (c->ready && !*up) {
        *up = true;
        notify = true;
        *backoff = 100;
        log_info("zookeeper: connected to %s (session 0x%" PRIx64 ")",
                 be->hosts, (uint64_t)zoo_client_id(c->zh)->client_id);
    }
    if (c->ready)
        zk_keeper_chores(be, c, notify);
    if (--c->refs == 0)
        pthread_cond_broadcast(&be->cv);
}

void *zk_keeper(void *arg)
{
    struct zk_be *be = arg;
    bool up = false;
    int64_t backoff = 100;

    pthread_mutex_lock(&be->mu);
    while (!be->stopping) {
        struct zk_conn *c = be->conn;
        int state;

        if (c == NULL && (c = zk_keeper_open(be, &backoff)) == NULL)
            continue;
        state = zoo_state(c->zh);
        if (state == ZOO_EXPIRED_SESSION_STATE ||
            state == ZOO_AUTH_FAILED_STATE) {
            log_warn("zookeeper: session %s; opening a new one",
                     state == ZOO_AUTH_FAILED_STATE ? "refused" : "expired");
            up = false;
            zk_conn_retire(be, c);
            zk_keeper_backoff(be, &backoff);
            continue;
        }
        if (state == ZOO_CONNECTED_STATE) {
            zk_keeper_connected(be, c, &up, &backoff);
        } else if (up) {
            up = false;
            log_warn("zookeeper: connection to %s lost; answering 503 until "
                     "it is back",
                     be->hosts);
        }
        if (!be->stopping)
            zk_keeper_wait(be, ZK_KEEPER_TICK_MS);
    }
    pthread_mutex_unlock(&be->mu);
    return NULL;
}
