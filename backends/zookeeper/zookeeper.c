/*
 * backends/zookeeper/zookeeper.c - lock store on ZooKeeper
 * (libzookeeper-mt 3.8).
 *
 * One shared handle per process, owned by a keeper thread that opens it,
 * prepares the root nodes, samples the server's clock and replaces the
 * handle when its session expires. Requests borrow the handle, issue
 * asynchronous calls and wait for them with a deadline (timeout_ms;
 * backends/zookeeper/call.c), so no request hangs on a lost connection. The
 * library's threads only store results, signal condition variables and
 * call hooks->notify.
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
 *                                              FIFO by sequence number
 *
 * A grant creates h; only the lowest waiter may do so, in one multi that
 * also deletes its waiter node, and a try-once acquire only when nobody
 * waits (on a free key, one multi that also makes the key's node). Each
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
 */
#include "backends/backend.h"
#include "backends/zookeeper/call.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zookeeper/zookeeper.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/random.h"
#include "lib/text.h"
#include "lib/url.h"

#define ZK_CHROOT_MAX 256
#define ZK_NAME_MAX   96 /* a child's name */
#define ZK_SEQ_DIGITS 10 /* ZooKeeper's sequence suffix */
#define ZK_MAX_ROUNDS 16 /* look-act rounds per request */
/* others reap a waiter node this long after the deadline in its name */
#define ZK_WAITER_GRACE_MS 2000
/* a waiter looks at its place at least this often, whatever its watch */
#define ZK_WAITER_RECHECK_MS  5000
#define ZK_CLOCK_REFRESH_MS   5000
#define ZK_CLOCK_SLACK_MS     2 /* see zk_server_now() */
#define ZK_KEEPER_TICK_MS     250
#define ZK_SWEEP_BATCH        20   /* keys looked at per keeper tick */
#define ZK_SWEEP_RELIST_MS    2000 /* a new pass at most this often */
#define ZK_TRASH_MAX          4096
#define ZK_DEFAULT_SESSION_MS 10000
#define ZK_DEFAULT_TIMEOUT_MS 2000
/* the client library looks the hosts up again at most this often while
 * connected (its default, 0, is a getaddrinfo() per I/O loop turn: a
 * netlink dump per request); it always does on a connection loss */
#define ZK_RESOLVE_DELAY_MS 30000
#define ZK_OWN_SLOTS        4096 /* grants remembered for a quick release */

extern const struct backend_ops zookeeper_backend;

/* A handle and the requests that borrowed it. */
struct zk_conn {
    zhandle_t *zh;
    int refs;   /* guarded by be->mu: borrowers, plus one for be->conn */
    bool ready; /* guarded by be->mu: roots made, clock sampled */
};

/* The server's clock, learned from the mtime of our own writes. */
struct zk_clock {
    bool valid;
    /* server ms = local monotonic ms + offset. Every sample, mtime minus
     * our clock when the reply came, is a lower bound of the offset (the
     * write happened before we heard of it), behind by the time the reply
     * took; the best is the largest: we keep the largest of this period
     * and of the last one, so a slow reply never pulls the estimate down
     * and a clock change on the server is followed within two periods. */
    int64_t cur_ms;
    int64_t prev_ms;
    /* Upper bounds of the same offset: mtime + 1 minus our clock when the
     * request was sent (the write happened after that); the least of this
     * period and of the last one. */
    int64_t cur_hi_ms;
    int64_t prev_hi_ms;
    int64_t period_at; /* monotonic ms when cur_ms's period began */
    int64_t last_at;   /* monotonic ms of the last sample */
};

/* waiter->be_data: a waiting client's place in a key's queue. */
struct zk_waiter {
    struct zk_waiter *prev, *next; /* be->waiters, guarded by be->mu */
    char *key;                     /* owned copy, for notify after a new
                                      session */
    size_t key_len;
    char prefix[ZK_NAME_MAX]; /* of our node's name: w<inst>-<id>-<dl>- */
    char name[ZK_NAME_MAX];   /* our node's name, "" when we have none */
    bool pending;             /* a create may have made a node named
                                 prefix + sequence that we never heard of */
};

/* A grant or renew made here, remembered so that its release can be one
 * multi that does not read h first (zk_be_release). */
struct zk_own {
    char *key; /* owned; NULL: an empty slot */
    size_t key_len;
    char token[LOCK_TOKEN_MAX + 1];
    int version;   /* h's version after our write */
    int64_t mtime; /* h's mtime then: the TTL runs from it */
    uint64_t ttl_ms;
    bool alone; /* nobody waited then: drop the key's node with h */
};

/* A node to delete once the store answers again (a cancel that failed). */
struct zk_trash {
    struct zk_trash *next;
    char *parent; /* owned */
    char *name;   /* owned: a name, or a prefix when is_prefix */
    bool is_prefix;
};

struct zk_be {
    struct backend base;
    struct backend_hooks hooks;
    char *hosts;      /* owned: "h1:2181,h2:2181" */
    char *root;       /* owned: "<chroot>/lockd" */
    char *locks;      /* owned: root + "/locks" */
    char *clock_path; /* owned: root + "/clock" */
    char *chroot;     /* owned: "" or "/a/b" */
    int session_ms;
    int64_t timeout_ms;
    char inst[17]; /* random hex naming this instance's waiter nodes */

    pthread_mutex_t mu; /* guards every member below */
    pthread_cond_t cv;  /* keeper wake-ups; a retired handle's refs at 0 */
    struct zk_conn *conn;
    struct zk_clock clock;
    struct zk_waiter *waiters;
    struct zk_trash *trash;
    size_t ntrash;
    bool stopping;
    unsigned events; /* session events seen, bumped by the watcher */
    pthread_t keeper;
    bool keeper_started;
    pthread_mutex_t own_mu; /* guards own[] */
    struct zk_own *own;     /* owned: ZK_OWN_SLOTS slots, by key hash */
    /* the keeper's own: the sweep over every key's node */
    struct zk_call *sweep; /* the names being swept, or NULL */
    int sweep_i;           /* next one */
    int64_t sweep_at;      /* monotonic ms of the last listing */
};

/* One child of a key's node, parsed. */
struct zk_kid {
    const char *name; /* borrowed from the call's kids */
    int64_t seq;
    int64_t deadline; /* waiters: server ms after which anyone may reap */
};

struct zk_holder {
    uint64_t ttl_ms;
    int64_t grant_by; /* server ms: a grant made later (ctime) is void;
                         0: none (renewed) */
    char token[LOCK_TOKEN_MAX + 1];
    bool has_owner;
    char owner[LOCK_OWNER_MAX + 1];
};

/* ---- small helpers ---------------------------------------------------- */

static const char zk_b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* base64url without padding: injective, and never "." or ".." or "/". */
static size_t zk_b64_encode(const unsigned char *in, size_t n, char *out)
{
    size_t j = 0;

    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < n)
            v |= in[i + 2];
        out[j++] = zk_b64[(v >> 18) & 63];
        out[j++] = zk_b64[(v >> 12) & 63];
        if (i + 1 < n)
            out[j++] = zk_b64[(v >> 6) & 63];
        if (i + 2 < n)
            out[j++] = zk_b64[v & 63];
    }
    out[j] = '\0';
    return j;
}

static int zk_b64_val(char c)
{
    const char *p = c != '\0' ? strchr(zk_b64, c) : NULL;

    return p != NULL ? (int)(p - zk_b64) : -1;
}

/* Decode n chars of base64url; the length, or -1 on junk or overflow. */
static long
zk_b64_decode(const char *in, size_t n, unsigned char *out, size_t cap)
{
    size_t j = 0;
    uint32_t acc = 0;
    int bits = 0;

    if (n % 4 == 1)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int v = zk_b64_val(in[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (j == cap)
                return -1;
            out[j++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    return (long)j;
}

/* The key's node: <locks>/k<base64url(key)>. 0, or -1 if it cannot fit in
 * out. The key is 1..LOCK_KEY_MAX bytes: backend_key_ok() in the wrappers
 * (backends/backend.c) guarantees it, so only the room is checked here. */
static int zk_key_path(const struct zk_be *be,
                       const char *key,
                       size_t key_len,
                       char *out,
                       size_t cap)
{
    int n = snprintf(out, cap, "%s/k", be->locks);

    if (n < 0 || (size_t)n + (key_len + 2) / 3 * 4 >= cap)
        return -1;
    zk_b64_encode((const unsigned char *)key, key_len, out + n);
    return 0;
}

static int
zk_child_path(const char *parent, const char *name, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s", parent, name);

    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

static bool zk_is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
           (c >= 'A' && c <= 'F');
}

/* "lockd1 <ttl_ms> <token>[ <grant_by>][\n<owner>]" */
static int zk_fmt_holder(char *buf,
                         size_t cap,
                         const char *token,
                         uint64_t ttl_ms,
                         int64_t grant_by,
                         const char *owner,
                         size_t *len)
{
    char by[24] = "";
    int n;

    if (grant_by > 0)
        snprintf(by, sizeof(by), " %" PRId64, grant_by);
    n = snprintf(buf, cap, "lockd1 %" PRIu64 " %s%s%s%s", ttl_ms, token, by,
                 owner != NULL ? "\n" : "", owner != NULL ? owner : "");
    if (n < 0 || (size_t)n >= cap || strpbrk(token, " \n") != NULL)
        return -1;
    *len = (size_t)n;
    return 0;
}

/* Parse a holder's data; -1 if it is not ours. */
static int zk_parse_holder(const char *data, int len, struct zk_holder *h)
{
    const char *p = data, *end = data + (len > 0 ? len : 0);
    uint64_t ttl = 0;
    size_t n = 0;

    memset(h, 0, sizeof(*h));
    if (data == NULL || len < 9 || memcmp(p, "lockd1 ", 7) != 0)
        return -1;
    p += 7;
    while (p < end && *p >= '0' && *p <= '9' && n < 17) {
        ttl = ttl * 10 + (uint64_t)(*p++ - '0');
        n++;
    }
    if (n == 0 || ttl == 0 || p == end || *p != ' ')
        return -1;
    p++;
    n = 0;
    /* lockd's tokens are hex, so every holder has a marker (below) */
    while (p + n < end && zk_is_hex(p[n]) && n < LOCK_TOKEN_MAX)
        n++;
    if (n == 0 || (p + n < end && p[n] != '\n' && p[n] != ' '))
        return -1;
    memcpy(h->token, p, n);
    h->ttl_ms = ttl;
    p += n;
    if (p < end && *p == ' ') {
        int64_t by = 0;
        p++;
        n = 0;
        while (p < end && *p >= '0' && *p <= '9' && n < 17) {
            by = by * 10 + (*p++ - '0');
            n++;
        }
        if (n == 0 || by == 0 || (p < end && *p != '\n'))
            return -1;
        h->grant_by = by;
    }
    if (p < end) {
        p++; /* the '\n' */
        n = (size_t)(end - p);
        if (n > LOCK_OWNER_MAX)
            return -1;
        memcpy(h->owner, p, n);
        h->has_owner = true;
    }
    return 0;
}

/* ---- the server's clock ----------------------------------------------- */

/* Learn from a write of ours whose stat says mtime, sent at t0 and
 * answered at t1 (local monotonic ms). */
static void
zk_clock_sample(struct zk_be *be, int64_t mtime, int64_t t0, int64_t t1)
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
static int64_t zk_server_now(struct zk_be *be)
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
static int64_t zk_server_latest(struct zk_be *be)
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
static void zk_be_node_watcher(
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
static void zk_be_session_watcher(
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

static void zk_be_notify(struct zk_be *be, const char *key, size_t key_len)
{
    if (be->hooks.notify != NULL)
        be->hooks.notify(be->hooks.arg, key, key_len);
}

/* Every key with a waiter here: after a new session or a reconnect, when
 * watches may have been lost. */
static void zk_be_notify_all(struct zk_be *be)
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
        zk_be_notify(be, keys[k], lens[k]);
        free(keys[k]);
    }
    free(keys);
    free(lens);
}

/* ---- the shared handle ------------------------------------------------ */

static void zk_be_lib_log(const char *message)
{
    log_debug("zookeeper: %s", message);
}

/* Borrow the handle if it is connected and ready; NULL otherwise. */
static struct zk_conn *zk_conn_get(struct zk_be *be)
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

static void zk_conn_put(struct zk_be *be, struct zk_conn *c)
{
    pthread_mutex_lock(&be->mu);
    if (--c->refs == 0)
        pthread_cond_broadcast(&be->cv);
    pthread_mutex_unlock(&be->mu);
}

/* be->mu held; takes c out of service, waits until nobody borrows it,
 * closes it. Returns with be->mu held. */
static void do_zk_conn_retire(struct zk_be *be, struct zk_conn *c)
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

/* ---- one-call wrappers ------------------------------------------------ */

static int zk_get_kids(struct zk_conn *cn,
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
static int zk_get(struct zk_be *be,
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
        rc =
            zoo_awget(cn->zh, path, zk_be_node_watcher, be, zk_call_on_data, c);
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

static int
zk_delete(struct zk_conn *cn, const char *path, int version, int64_t dl)
{
    struct zk_call *c = zk_call_new();

    if (c == NULL)
        return ZSYSTEMERROR;
    return zk_call_run(
        c, zoo_adelete(cn->zh, path, version, zk_call_on_void, c), dl, NULL);
}

static int zk_create(struct zk_conn *cn,
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
    rc =
        zk_call_wait(c,
                     zoo_acreate2(cn->zh, path, data, len, &ZOO_OPEN_ACL_UNSAFE,
                                  mode, zk_call_on_create, c),
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

static int zk_set(struct zk_conn *cn,
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

static int zk_exists(struct zk_conn *cn, const char *path, int64_t dl)
{
    struct zk_call *c = zk_call_new();

    if (c == NULL)
        return ZSYSTEMERROR;
    return zk_call_run(c, zoo_aexists(cn->zh, path, 0, zk_call_on_stat, c), dl,
                       NULL);
}

/* h's token marker, "t<token>": a sibling of h, created and deleted with
 * it. Its name is unique to one grant (tokens are 128 random bits), which a
 * version number is not (every fresh h has version 1): a release, renew or
 * reap that checks the marker with h's version can never hit a later grant
 * of the key (an ABA), so a release needs no read.
 * -1 for a token that cannot be a node name (lockd's are 32 hex chars). */
static int zk_marker_name(const char *token, char *out, size_t cap)
{
    size_t n = strlen(token);

    if (n == 0 || n > LOCK_TOKEN_MAX || n + 2 > cap ||
        strspn(token, "0123456789abcdefABCDEF") != n)
        return -1;
    out[0] = 't';
    memcpy(out + 1, token, n + 1);
    return 0;
}

/*
 * Renew: set h's data at version, in one multi with a check that h's
 * marker exists, so a renew that read h just before it expired and was
 * granted again (same version) cannot overwrite the new holder.
 */
static int zk_set_marked(struct zk_conn *cn,
                         const char *parent,
                         const char *marker,
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
    if (zk_child_path(parent, "h", c->paths[0], ZK_PATH_MAX) != 0 ||
        zk_child_path(parent, marker, c->paths[1], ZK_PATH_MAX) != 0 ||
        len > sizeof(c->buf)) {
        zk_call_unref(c);
        zk_call_unref(c);
        return ZBADARGUMENTS;
    }
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
static int zk_claim(struct zk_conn *cn,
                    const char *parent,
                    const char *marker,
                    int version,
                    const char *waiter_name,
                    int64_t dl)
{
    struct zk_call *c = zk_call_new();
    int rc, i;

    if (c == NULL)
        return ZSYSTEMERROR;
    if (zk_child_path(parent, "h", c->paths[0], ZK_PATH_MAX) != 0 ||
        zk_child_path(parent, marker, c->paths[1], ZK_PATH_MAX) != 0 ||
        zk_child_path(parent, waiter_name, c->paths[2], ZK_PATH_MAX) != 0) {
        zk_call_unref(c);
        zk_call_unref(c);
        return ZBADARGUMENTS;
    }
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
static int zk_grant(struct zk_conn *cn,
                    const char *parent,
                    bool make_parent,
                    const char *waiter_name,
                    const char *marker,
                    const char *data,
                    size_t len,
                    int64_t dl,
                    struct Stat *st)
{
    struct zk_call *c = zk_call_new();
    int n = 0, rc;

    if (c == NULL)
        return ZSYSTEMERROR;
    if (zk_child_path(parent, "h", c->paths[0], ZK_PATH_MAX) != 0 ||
        (waiter_name != NULL &&
         zk_child_path(parent, waiter_name, c->paths[1], ZK_PATH_MAX) != 0) ||
        zk_child_path(parent, marker, c->paths[2], ZK_PATH_MAX) != 0 ||
        snprintf(c->paths[3], ZK_PATH_MAX, "%s", parent) >= ZK_PATH_MAX ||
        len > sizeof(c->buf)) {
        zk_call_unref(c);
        zk_call_unref(c);
        return ZBADARGUMENTS;
    }
    memcpy(c->buf, data, len);
    if (make_parent)
        zoo_create_op_init(&c->ops[n++], c->paths[3], NULL, -1,
                           &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0);
    zoo_create_op_init(&c->ops[n++], c->paths[0], c->buf, (int)len,
                       &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0);
    if (waiter_name != NULL)
        zoo_delete_op_init(&c->ops[n++], c->paths[1], -1);
    zoo_create_op_init(&c->ops[n++], c->paths[2], NULL, -1,
                       &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0);
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
                   const char *parent,
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
    if (zk_child_path(parent, "h", c->paths[0], ZK_PATH_MAX) != 0 ||
        zk_child_path(parent, marker, c->paths[1], ZK_PATH_MAX) != 0 ||
        snprintf(c->paths[2], ZK_PATH_MAX, "%s", parent) >= ZK_PATH_MAX) {
        zk_call_unref(c);
        zk_call_unref(c);
        return ZBADARGUMENTS;
    }
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
static int zk_drop_checked(struct zk_conn *cn,
                           const char *parent,
                           const char *marker,
                           int version,
                           bool with_parent,
                           int64_t dl)
{
    enum zk_drop_op failed;
    int rc = zk_drop(cn, parent, marker, version, with_parent, dl, &failed);

    /* waiters: the key's node stays theirs */
    if (rc == ZNOTEMPTY && failed == ZK_DROP_PARENT)
        rc = zk_drop(cn, parent, marker, version, false, dl, &failed);
    return rc;
}

/* ---- results ---------------------------------------------------------- */

/* The store did not answer (or answered something we cannot use). */
static enum backend_result zk_unavailable(const char *what, int rc)
{
    log_debug("zookeeper: %s: %s", what, zerror(rc));
    return BACKEND_UNAVAILABLE;
}

static int64_t zk_deadline(const struct zk_be *be)
{
    return clock_mono_ms() + be->timeout_ms;
}

/* A grant committed after the deadline its requester wrote in it: the
 * requester gave up (answered 503) before it could hear of it, so nobody
 * holds it. Judged from the store's own data, so every instance agrees. */
static bool zk_void(const struct zk_holder *h, const struct Stat *st)
{
    return h->grant_by > 0 && st->ctime > h->grant_by;
}

/* The holder's remaining ms by the server's clock (<= 0: expired or
 * void). */
static int64_t
zk_remaining(struct zk_be *be, const struct zk_holder *h, const struct Stat *st)
{
    int64_t left;

    if (zk_void(h, st))
        return 0;
    left = st->mtime + (int64_t)h->ttl_ms - zk_server_now(be);
    /* never more than the TTL, whatever the clock slack adds */
    return left < (int64_t)h->ttl_ms ? left : (int64_t)h->ttl_ms;
}

/* What is surely left of holder h (stat st), in ms: its expiry less the
 * latest the server's clock can be, and, after a write of ours sent at
 * sent (local monotonic ms; 0: none), no more than its TTL less the time
 * since then, which no clock estimate can stretch. <= 0: it may have
 * expired, or it is void by the grant_by stored in h (every instance
 * treats it as free): not a holder to answer as a grant. */
static int64_t zk_left_surely(struct zk_be *be,
                              const struct zk_holder *h,
                              const struct Stat *st,
                              int64_t sent)
{
    int64_t ttl = (int64_t)h->ttl_ms, left;

    if (zk_void(h, st))
        return 0;
    left = st->mtime + ttl - zk_server_latest(be);
    if (sent > 0 && ttl - (clock_mono_ms() - sent) < left)
        left = ttl - (clock_mono_ms() - sent);
    return left < ttl ? left : ttl;
}

/* A grant of h (stat st, TTL ttl_ms) answered with report ms to run; -1
 * if its czxid cannot be a fence. */
static int zk_fill_grant(const struct Stat *st,
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
static int zk_reap_holder(struct zk_be *be,
                          struct zk_conn *cn,
                          const char *parent,
                          const struct zk_holder *h,
                          int version,
                          int64_t dl,
                          const char *key,
                          size_t key_len)
{
    char marker[LOCK_TOKEN_MAX + 2];
    int rc = zk_marker_name(h->token, marker, sizeof(marker)) == 0
                 ? zk_drop_checked(cn, parent, marker, version, false, dl)
                 : ZBADARGUMENTS; /* not lockd's: zk_parse_holder() refuses */

    if (rc == ZOK) {
        metrics_lock_expired(1);
        zk_be_notify(be, key, key_len);
    }
    return rc;
}

/* ---- grants made here ------------------------------------------------- */

static size_t zk_own_slot(const char *key, size_t key_len)
{
    uint64_t hash = UINT64_C(14695981039346656037); /* FNV-1a */

    for (size_t i = 0; i < key_len; i++)
        hash = (hash ^ (unsigned char)key[i]) * UINT64_C(1099511628211);
    return (size_t)(hash % ZK_OWN_SLOTS);
}

/* Remember that token holds key at h's stat st (after our grant or renew),
 * replacing whatever the slot held. Best effort: without memory, nothing is
 * remembered and the release reads h first. */
static void zk_own_put(struct zk_be *be,
                       const char *key,
                       size_t key_len,
                       const char *token,
                       const struct Stat *st,
                       uint64_t ttl_ms,
                       bool alone)
{
    struct zk_own *o = &be->own[zk_own_slot(key, key_len)];
    size_t tlen = strlen(token);
    char *copy = NULL, *old;

    if (tlen > LOCK_TOKEN_MAX)
        return;
    pthread_mutex_lock(&be->own_mu);
    old = o->key;
    if (old != NULL && o->key_len == key_len &&
        memcmp(old, key, key_len) == 0) {
        old = NULL; /* the same key: keep its copy */
    } else {
        pthread_mutex_unlock(&be->own_mu);
        copy = malloc(key_len);
        if (copy == NULL)
            return;
        memcpy(copy, key, key_len);
        pthread_mutex_lock(&be->own_mu);
        old = o->key;
        o->key = copy;
        o->key_len = key_len;
    }
    memcpy(o->token, token, tlen + 1);
    o->version = st->version;
    o->mtime = st->mtime;
    o->ttl_ms = ttl_ms;
    o->alone = alone;
    pthread_mutex_unlock(&be->own_mu);
    free(old);
}

/* What we remember of token's hold on key: true and *out filled if the
 * slot holds that key under that token. */
static bool zk_own_get(struct zk_be *be,
                       const char *key,
                       size_t key_len,
                       const char *token,
                       struct zk_own *out)
{
    struct zk_own *o = &be->own[zk_own_slot(key, key_len)];
    bool hit;

    pthread_mutex_lock(&be->own_mu);
    hit = o->key != NULL && o->key_len == key_len &&
          memcmp(o->key, key, key_len) == 0 && text_secret_eq(o->token, token);
    if (hit) {
        *out = *o;
        out->key = NULL; /* not a copy */
    }
    pthread_mutex_unlock(&be->own_mu);
    return hit;
}

/* Forget key (released, or our memory of it is stale). */
static void zk_own_drop(struct zk_be *be, const char *key, size_t key_len)
{
    struct zk_own *o = &be->own[zk_own_slot(key, key_len)];
    char *old = NULL;

    pthread_mutex_lock(&be->own_mu);
    if (o->key != NULL && o->key_len == key_len &&
        memcmp(o->key, key, key_len) == 0) {
        old = o->key;
        o->key = NULL;
    }
    pthread_mutex_unlock(&be->own_mu);
    free(old);
}

/* ---- waiters ---------------------------------------------------------- */

static struct zk_waiter *
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

static void zk_waiter_free(struct zk_be *be, struct zk_waiter *w)
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

/* Remember a node to delete later (a cancel that could not reach the
 * store); bounded: past the limit the node waits for its deadline. */
static void zk_trash_add(struct zk_be *be,
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

static int zk_cmp_kid(const void *a, const void *b)
{
    const struct zk_kid *x = a, *y = b;

    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Parse a waiter's name: w<inst>-<id>-<deadline>-<10-digit sequence>. */
static int zk_parse_waiter(const char *name, struct zk_kid *k)
{
    size_t n = strlen(name);
    const char *p;
    int64_t v = 0, mul = 1;

    if (n < ZK_SEQ_DIGITS + 3 || name[0] != 'w' ||
        name[n - ZK_SEQ_DIGITS - 1] != '-')
        return -1;
    for (size_t i = n - ZK_SEQ_DIGITS; i < n; i++) {
        if (name[i] < '0' || name[i] > '9')
            return -1;
        v = v * 10 + (name[i] - '0');
    }
    k->name = name;
    k->seq = v;
    v = 0;
    p = name + n - ZK_SEQ_DIGITS - 2;
    while (p > name && *p >= '0' && *p <= '9' && mul <= INT64_C(1) << 50) {
        v += (*p - '0') * mul;
        mul *= 10;
        p--;
    }
    k->deadline = *p == '-' ? v : 0; /* unreadable: reapable */
    return 0;
}

/* ---- acquire ---------------------------------------------------------- */

struct zk_acq {
    struct zk_be *be;
    struct zk_conn *cn;
    const struct lock_req *req;
    struct zk_waiter *w; /* NULL: try once */
    char parent[ZK_PATH_MAX];
    char hpath[ZK_PATH_MAX];
    char data[ZK_DATA_MAX];
    size_t data_len;
    char marker[LOCK_TOKEN_MAX + 2];
    struct zk_holder mine; /* what data says: ttl_ms, token, grant_by */
    int64_t grant_by;      /* server ms, written into h */
    int64_t dl;            /* monotonic ms */
};

/*
 * h (stat st) is under our token: the grant this call just made (its
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
 * h is still ours. alone: nobody else waited.
 */
static int zk_acq_own(struct zk_acq *a,
                      const struct zk_holder *h,
                      const struct Stat *st,
                      int64_t sent,
                      const char *mine_node,
                      bool alone,
                      struct lock_grant *out)
{
    struct zk_be *be = a->be;
    int64_t left;
    int rc;

    if (sent > 0)
        zk_clock_sample(be, st->mtime, sent, clock_mono_ms());
    left = zk_left_surely(be, h, st, sent);
    if (left > 0 && mine_node != NULL) {
        rc = zk_claim(a->cn, a->parent, a->marker, st->version, mine_node,
                      a->dl);
        if (rc == ZNONODE || rc == ZBADVERSION)
            return -1; /* h or our node changed under us */
        if (rc != ZOK)
            return zk_unavailable("claim holder", rc);
        a->w->name[0] = '\0';
        left = zk_left_surely(be, h, st, sent);
    }
    if (left <= 0 ||
        zk_fill_grant(st, h->ttl_ms, sent > 0 ? h->ttl_ms : (uint64_t)left,
                      out) != 0) {
        rc = zk_reap_holder(be, a->cn, a->parent, h, st->version, a->dl,
                            a->req->key, a->req->key_len);
        if (sent > 0)
            return zk_unavailable("grant", ZOPERATIONTIMEOUT);
        if (rc != ZOK && rc != ZNONODE && rc != ZBADVERSION)
            return zk_unavailable("reap own holder", rc);
        return -1;
    }
    zk_own_put(be, a->req->key, a->req->key_len, a->req->token, st, h->ttl_ms,
               alone);
    if (a->w != NULL) {
        zk_waiter_free(be, a->w);
        a->req->waiter->be_data = NULL;
        /* the next waiter here may have watched a node that is gone now */
        zk_be_notify(be, a->req->key, a->req->key_len);
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
    int n, rc;

    n = snprintf(a->w->prefix, sizeof(a->w->prefix),
                 "w%s-%" PRIx64 "-%" PRId64 "-", be->inst, lw->id, dl_server);
    if (n < 0 || (size_t)n >= sizeof(a->w->prefix) ||
        zk_child_path(a->parent, a->w->prefix, path, sizeof(path)) != 0)
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
static int zk_acq_fresh(struct zk_acq *a, struct lock_grant *out)
{
    struct Stat st;
    int64_t sent = clock_mono_ms();
    int rc = zk_grant(a->cn, a->parent, true, NULL, a->marker, a->data,
                      a->data_len, a->dl, &st);

    if (rc == ZOK)
        return zk_acq_own(a, &a->mine, &st, sent, NULL, true, out);
    if (rc == ZNODEEXISTS || rc == ZNONODE)
        return -1;
    return zk_unavailable("grant", rc);
}

/*
 * One look-act round. Returns BACKEND_OK, HELD or UNAVAILABLE when the
 * request is answered, or -1 to look again (something moved under us).
 */
static int zk_acq_round(struct zk_acq *a, struct lock_grant *out)
{
    struct zk_be *be = a->be;
    struct zk_waiter *w = a->w;
    struct zk_call *kc = NULL;
    struct zk_kid *kids = NULL;
    struct zk_holder h;
    struct Stat st;
    size_t nw = 0, own = SIZE_MAX, ahead;
    bool has_h = false, parsed = false, gone = false;
    int rc, ret = -1;

    rc = zk_get_kids(a->cn, a->parent, a->dl, &kc);
    if (rc == ZNONODE) {
        /* our node, if any, went with it (our session ended) */
        if (w != NULL) {
            w->name[0] = '\0';
            w->pending = false;
        }
        return zk_acq_fresh(a, out);
    }
    if (rc != ZOK)
        return zk_unavailable("list waiters", rc);

    kids = calloc((size_t)kc->nkids + 1, sizeof(*kids));
    if (kids == NULL) {
        zk_call_unref(kc);
        return BACKEND_NO_MEMORY;
    }
    for (int i = 0; i < kc->nkids; i++) {
        const char *name = kc->kids[i];
        if (strcmp(name, "h") == 0)
            has_h = true;
        else if (zk_parse_waiter(name, &kids[nw]) == 0)
            nw++;
    }
    qsort(kids, nw, sizeof(*kids), zk_cmp_kid);

    if (w != NULL) {
        size_t plen = strlen(w->prefix);
        for (size_t i = 0; i < nw; i++) {
            const char *name = kids[i].name;
            bool mine = plen > 0 && plen + ZK_SEQ_DIGITS < sizeof(w->name) &&
                        strncmp(name, w->prefix, plen) == 0 &&
                        strlen(name) == plen + ZK_SEQ_DIGITS;
            if (w->name[0] != '\0' && strcmp(name, w->name) == 0)
                own = i;
            else if (w->name[0] == '\0' && w->pending && mine) {
                memcpy(w->name, name, plen + ZK_SEQ_DIGITS + 1);
                own = i;
            }
        }
        w->pending = false;
        if (w->name[0] != '\0' && own == SIZE_MAX) {
            /* our place is gone: our grant's answer was lost, or our
             * session (and its ephemeral node) ended */
            w->name[0] = '\0';
            gone = true;
        }
    }
    ahead = own != SIZE_MAX ? own : nw;

    if (has_h) {
        /* the first waiter watches h: its release or reap wakes us */
        rc = zk_get(be, a->cn, a->hpath, own == 0, a->dl, &h, &st, &parsed);
        if (rc == ZNONODE)
            goto out; /* it just went: look again */
        if (rc != ZOK) {
            ret = zk_unavailable("read holder", rc);
            goto out;
        }
        if (parsed && w != NULL && text_secret_eq(h.token, a->req->token)) {
            /* a grant of ours whose answer we never had: valid, it is
             * this waiter's; dead, it is freed and we look again */
            ret = zk_acq_own(a, &h, &st, 0,
                             own != SIZE_MAX ? kids[own].name : NULL,
                             nw <= (own != SIZE_MAX ? 1u : 0u), out);
            goto out;
        }
    }
    if (gone)
        goto out; /* look again, unregistered */

    if (ahead > 0) {
        int64_t now = zk_server_now(be);
        struct zk_kid *first = &kids[0], *pred = &kids[ahead - 1];
        struct Stat pst; /* our predecessor's; st stays h's */
        char path[ZK_PATH_MAX];

        /* a waiter past its deadline (its lockd died or lost it) */
        if (first->deadline < now || pred->deadline < now) {
            struct zk_kid *dead = first->deadline < now ? first : pred;
            if (zk_child_path(a->parent, dead->name, path, sizeof(path)) == 0)
                rc = zk_delete(a->cn, path, -1, a->dl);
            if (rc != ZOK && rc != ZNONODE)
                ret = zk_unavailable("reap waiter", rc);
            goto out;
        }
        if (w == NULL) {
            out->retry_ms = 1; /* the first waiter takes it now */
            if (has_h && parsed) {
                int64_t left = zk_remaining(be, &h, &st);
                if (left <= 0) {
                    zk_reap_holder(be, a->cn, a->parent, &h, st.version, a->dl,
                                   a->req->key, a->req->key_len);
                    left = 1;
                }
                out->retry_ms = (uint64_t)left;
            }
            ret = BACKEND_HELD;
            goto out;
        }
        if (w->name[0] == '\0') {
            rc = zk_acq_register(a);
            if (rc != ZOK && rc != ZNONODE)
                ret = zk_unavailable("queue waiter", rc);
            goto out;
        }
        /* wait for the one just ahead of us: no herd when it goes */
        if (zk_child_path(a->parent, pred->name, path, sizeof(path)) != 0) {
            ret = BACKEND_UNAVAILABLE;
            goto out;
        }
        rc = zk_get(be, a->cn, path, true, a->dl, NULL, &pst, NULL);
        if (rc == ZNONODE)
            goto out;
        if (rc != ZOK) {
            ret = zk_unavailable("watch waiter", rc);
            goto out;
        }
        {
            /* look again when the holder's TTL or our predecessor's
             * deadline passes, whichever comes first */
            int64_t until = pred->deadline - now + 1;
            if (until > ZK_WAITER_RECHECK_MS)
                until = ZK_WAITER_RECHECK_MS;
            if (has_h && parsed) {
                int64_t left = zk_remaining(be, &h, &st);
                if (left < until)
                    until = left > 0 ? left : 1;
            }
            out->retry_ms = (uint64_t)until;
        }
        /* free, but one of our own waiters is ahead in the store (two
         * threads queued in one order and parked in the other): the
         * caller passes the turn on */
        if (!has_h) {
            char mine[24];
            int n = snprintf(mine, sizeof(mine), "w%s-", be->inst);
            for (size_t i = 0; i < ahead && n > 0; i++)
                if (strncmp(kids[i].name, mine, (size_t)n) == 0)
                    out->behind = true;
        }
        ret = BACKEND_HELD;
        goto out;
    }

    if (has_h) {
        if (!parsed) {
            log_warn("zookeeper: %s holds data lockd cannot read; treating "
                     "the key as held",
                     a->hpath);
            out->retry_ms = ZK_WAITER_RECHECK_MS;
            ret = BACKEND_HELD;
            goto out;
        }
        int64_t left = zk_remaining(be, &h, &st);
        if (left <= 0) {
            rc = zk_reap_holder(be, a->cn, a->parent, &h, st.version, a->dl,
                                a->req->key, a->req->key_len);
            if (rc != ZOK && rc != ZNONODE && rc != ZBADVERSION)
                ret = zk_unavailable("reap holder", rc);
            goto out;
        }
        if (w != NULL && w->name[0] == '\0') {
            rc = zk_acq_register(a);
            if (rc != ZOK && rc != ZNONODE)
                ret = zk_unavailable("queue waiter", rc);
            goto out;
        }
        out->retry_ms = (uint64_t)left;
        ret = BACKEND_HELD;
        goto out;
    }

    /* free and nobody ahead of us */
    {
        int64_t sent = clock_mono_ms();
        rc = zk_grant(a->cn, a->parent, false,
                      w != NULL && w->name[0] != '\0' ? w->name : NULL,
                      a->marker, a->data, a->data_len, a->dl, &st);
        if (rc == ZOK) {
            /* others behind us: the release leaves the key's node to
             * them */
            ret = zk_acq_own(a, &a->mine, &st, sent, NULL,
                             nw <= (own == 0 ? 1u : 0u), out);
        } else if (rc == ZNONODE) {
            if (w != NULL)
                w->name[0] = '\0';
        } else if (rc != ZNODEEXISTS) {
            /* the multi may have happened: keep our name, so the next
             * round finds h under our token */
            ret = zk_unavailable("grant", rc);
        }
    }
out:
    free(kids);
    zk_call_unref(kc);
    return ret;
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

    if (zk_key_path(be, req->key, req->key_len, a.parent, sizeof(a.parent)) !=
            0 ||
        zk_child_path(a.parent, "h", a.hpath, sizeof(a.hpath)) != 0 ||
        zk_fmt_holder(a.data, sizeof(a.data), req->token, req->ttl_ms,
                      a.grant_by, req->owner, &a.data_len) != 0 ||
        zk_parse_holder(a.data, (int)a.data_len, &a.mine) != 0 ||
        zk_marker_name(req->token, a.marker, sizeof(a.marker)) != 0) {
        /* the key is checked by the wrapper; a token lockd made fits */
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
                                       const char *parent,
                                       const char *hpath,
                                       int64_t dl,
                                       struct zk_holder *h,
                                       struct Stat *st)
{
    bool parsed = false;
    int rc = zk_get(be, cn, hpath, false, dl, h, st, &parsed);

    if (rc == ZNONODE)
        return BACKEND_NOT_FOUND;
    if (rc != ZOK)
        return zk_unavailable("read holder", rc);
    if (!parsed)
        return BACKEND_MISMATCH;
    if (zk_remaining(be, h, st) <= 0) {
        zk_reap_holder(be, cn, parent, h, st->version, dl, req->key,
                       req->key_len);
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
    char parent[ZK_PATH_MAX], hpath[ZK_PATH_MAX], data[ZK_DATA_MAX];
    char marker[LOCK_TOKEN_MAX + 2];
    struct zk_conn *cn;
    struct zk_holder h;
    struct Stat st;
    enum backend_result r = BACKEND_UNAVAILABLE;
    int64_t dl;

    if (zk_key_path(be, req->key, req->key_len, parent, sizeof(parent)) != 0 ||
        zk_child_path(parent, "h", hpath, sizeof(hpath)) != 0)
        return BACKEND_NOT_FOUND;
    if (zk_marker_name(req->token, marker, sizeof(marker)) != 0)
        marker[0] = '\0';
    cn = zk_conn_get(be);
    if (cn == NULL)
        return BACKEND_UNAVAILABLE;
    dl = zk_deadline(be);
    for (int i = 0; i < ZK_MAX_ROUNDS && clock_mono_ms() < dl; i++) {
        uint64_t ttl;
        size_t len;
        int64_t sent;
        int rc;

        r = zk_read_own(be, cn, req, parent, hpath, dl, &h, &st);
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
        rc = zk_set_marked(cn, parent, marker, data, len, st.version, dl, &st);
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
                            const char *parent,
                            const char *marker,
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
    rc = zk_drop_checked(cn, parent, marker, o.version, o.alone, dl);
    if (rc == ZOK)
        return BACKEND_OK;
    if (rc == ZNONODE || rc == ZBADVERSION) {
        zk_own_drop(be, req->key, req->key_len);
        return -1;
    }
    return zk_unavailable("release", rc);
}

static enum backend_result zk_be_release(struct backend *b,
                                         const struct lock_req *req)
{
    struct zk_be *be = (struct zk_be *)b;
    char parent[ZK_PATH_MAX], hpath[ZK_PATH_MAX], marker[LOCK_TOKEN_MAX + 2];
    struct zk_conn *cn;
    struct zk_holder h;
    struct Stat st;
    enum backend_result r = BACKEND_UNAVAILABLE;
    int64_t dl;
    int known;

    if (zk_key_path(be, req->key, req->key_len, parent, sizeof(parent)) != 0 ||
        zk_child_path(parent, "h", hpath, sizeof(hpath)) != 0)
        return BACKEND_NOT_FOUND;
    if (zk_marker_name(req->token, marker, sizeof(marker)) != 0)
        marker[0] = '\0';
    cn = zk_conn_get(be);
    if (cn == NULL)
        return BACKEND_UNAVAILABLE;
    dl = zk_deadline(be);
    known = marker[0] != '\0'
                ? zk_release_known(be, cn, req, parent, marker, dl)
                : -1;
    if (known >= 0) {
        r = (enum backend_result)known;
        if (r == BACKEND_OK) {
            zk_own_drop(be, req->key, req->key_len);
            zk_be_notify(be, req->key, req->key_len);
        }
        goto out;
    }
    for (int i = 0; i < ZK_MAX_ROUNDS && clock_mono_ms() < dl; i++) {
        int rc;

        r = zk_read_own(be, cn, req, parent, hpath, dl, &h, &st);
        if (r != BACKEND_OK)
            break;
        /* the key's node goes too unless someone waits */
        rc = zk_drop_checked(cn, parent, marker, st.version, true, dl);
        r = BACKEND_UNAVAILABLE;
        if (rc == ZOK) {
            r = BACKEND_OK;
            zk_own_drop(be, req->key, req->key_len);
            zk_be_notify(be, req->key, req->key_len);
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
    char parent[ZK_PATH_MAX], hpath[ZK_PATH_MAX];
    struct zk_conn *cn;
    struct zk_holder h;
    struct Stat st;
    bool parsed = false;
    enum backend_result r;
    int64_t dl, left;
    int rc;

    if (zk_key_path(be, key, key_len, parent, sizeof(parent)) != 0 ||
        zk_child_path(parent, "h", hpath, sizeof(hpath)) != 0)
        return BACKEND_NOT_FOUND;
    cn = zk_conn_get(be);
    if (cn == NULL)
        return BACKEND_UNAVAILABLE;
    dl = zk_deadline(be);
    rc = zk_get(be, cn, hpath, false, dl, &h, &st, &parsed);
    if (rc == ZNONODE) {
        r = BACKEND_NOT_FOUND;
    } else if (rc != ZOK) {
        r = zk_unavailable("inspect", rc);
    } else if (!parsed || st.czxid <= 0 ||
               (uint64_t)st.czxid > LOCK_FENCE_MAX) {
        r = BACKEND_UNAVAILABLE;
    } else if ((left = zk_remaining(be, &h, &st)) <= 0) {
        zk_reap_holder(be, cn, parent, &h, st.version, dl, key, key_len);
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
    char parent[ZK_PATH_MAX], path[ZK_PATH_MAX];
    enum backend_result r = BACKEND_OK;
    struct zk_conn *cn;
    int rc = ZOK;

    if (w == NULL)
        return BACKEND_OK;
    waiter->be_data = NULL;
    if ((w->name[0] == '\0' && !w->pending) ||
        zk_key_path(be, key, key_len, parent, sizeof(parent)) != 0)
        goto out;
    cn = zk_conn_get(be);
    if (cn == NULL) {
        rc = ZCONNECTIONLOSS;
    } else if (w->name[0] != '\0') {
        if (zk_child_path(parent, w->name, path, sizeof(path)) == 0)
            rc = zk_delete(cn, path, -1, zk_deadline(be));
    } else {
        /* a create we never heard back from: find it by its prefix */
        struct zk_call *kc = NULL;
        size_t plen = strlen(w->prefix);
        int64_t dl = zk_deadline(be);
        rc = zk_get_kids(cn, parent, dl, &kc);
        for (int i = 0; rc == ZOK && i < kc->nkids; i++) {
            if (strncmp(kc->kids[i], w->prefix, plen) == 0 &&
                zk_child_path(parent, kc->kids[i], path, sizeof(path)) == 0)
                rc = zk_delete(cn, path, -1, dl);
            if (rc == ZNONODE)
                rc = ZOK;
        }
        zk_call_unref(kc);
    }
    if (cn != NULL)
        zk_conn_put(be, cn);
    if (rc != ZOK && rc != ZNONODE) {
        /* try again from the keeper; else it goes with our session or
         * when others see its deadline pass */
        zk_trash_add(be, parent, w->name[0] != '\0' ? w->name : w->prefix,
                     w->name[0] == '\0');
        r = BACKEND_UNAVAILABLE;
    }
out:
    zk_waiter_free(be, w);
    /* the next waiter here may have watched our node, or not yet */
    zk_be_notify(be, key, key_len);
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

/* ---- the keeper thread ------------------------------------------------ */

/* A new session: make the root nodes, learn the server's clock. */
static int zk_be_setup(struct zk_be *be, struct zk_conn *cn)
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
            return zk_unavailable("create chroot", rc);
    }
    for (size_t i = 1; i < sizeof(parts) / sizeof(parts[0]); i++) {
        rc = zk_create(cn, parts[i], NULL, -1, ZOO_PERSISTENT, dl, NULL, 0,
                       NULL);
        if (rc != ZOK && rc != ZNODEEXISTS)
            return zk_unavailable("create root", rc);
    }
    t0 = clock_mono_ms();
    rc = zk_set(cn, be->clock_path, NULL, -1, -1, dl, &st);
    t1 = clock_mono_ms();
    if (rc != ZOK)
        return zk_unavailable("sample clock", rc);
    zk_clock_sample(be, st.mtime, t0, t1);
    return ZOK;
}

/* Delete what failed cancels left behind. */
static void zk_be_empty_trash(struct zk_be *be, struct zk_conn *cn)
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
        if (!t->is_prefix) {
            if (zk_child_path(t->parent, t->name, path, sizeof(path)) == 0)
                rc = zk_delete(cn, path, -1, dl);
        } else {
            struct zk_call *kc = NULL;
            size_t plen = strlen(t->name);
            rc = zk_get_kids(cn, t->parent, dl, &kc);
            for (int i = 0; rc == ZOK && i < kc->nkids; i++) {
                if (strncmp(kc->kids[i], t->name, plen) == 0 &&
                    zk_child_path(t->parent, kc->kids[i], path, sizeof(path)) ==
                        0)
                    rc = zk_delete(cn, path, -1, dl);
                if (rc == ZNONODE)
                    rc = ZOK;
            }
            zk_call_unref(kc);
        }
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
 * bound.
 */
static void
zk_be_sweep_key(struct zk_be *be, struct zk_conn *cn, const char *name)
{
    char parent[ZK_PATH_MAX], path[ZK_PATH_MAX];
    unsigned char key[LOCK_KEY_MAX];
    struct zk_call *kc = NULL;
    struct zk_holder h;
    int64_t dl = zk_deadline(be), now;
    long key_len;
    int live = 0, rc;
    bool has_h = false, parsed = false;

    if (name[0] != 'k' ||
        (key_len = zk_b64_decode(name + 1, strlen(name + 1), key,
                                 sizeof(key))) <= 0 ||
        zk_child_path(be->locks, name, parent, sizeof(parent)) != 0)
        return;
    if (zk_get_kids(cn, parent, dl, &kc) != ZOK)
        return;
    for (int i = 0; i < kc->nkids; i++)
        if (strcmp(kc->kids[i], "h") == 0)
            has_h = true;
    if (has_h && zk_child_path(parent, "h", path, sizeof(path)) == 0) {
        struct Stat st;
        rc = zk_get(be, cn, path, false, dl, &h, &st, &parsed);
        if (rc == ZNONODE ||
            (rc == ZOK && parsed && zk_remaining(be, &h, &st) <= 0 &&
             zk_reap_holder(be, cn, parent, &h, st.version, dl,
                            (const char *)key, (size_t)key_len) == ZOK))
            has_h = false; /* its marker went with it */
        else if (rc != ZOK)
            parsed = false; /* keep every marker */
    }
    now = zk_server_now(be);
    for (int i = 0; i < kc->nkids; i++) {
        const char *kid = kc->kids[i];
        struct zk_kid k;
        if (strcmp(kid, "h") == 0) {
            live += has_h;
        } else if (kid[0] == 't') {
            /* a marker lives exactly as long as its holder */
            bool mine = has_h && (!parsed || strcmp(kid + 1, h.token) == 0);
            if (!mine && zk_child_path(parent, kid, path, sizeof(path)) == 0 &&
                ((rc = zk_delete(cn, path, -1, dl)) == ZOK || rc == ZNONODE))
                continue;
            live++;
        } else if (zk_parse_waiter(kid, &k) == 0 && k.deadline < now &&
                   zk_child_path(parent, k.name, path, sizeof(path)) == 0 &&
                   zk_delete(cn, path, -1, dl) == ZOK) {
            continue;
        } else {
            live++;
        }
    }
    zk_call_unref(kc);
    if (live == 0)
        zk_delete(cn, parent, -1, dl); /* ZNOTEMPTY: someone came: fine */
}

/* A few keys per tick, a new pass over all of them at most every
 * ZK_SWEEP_RELIST_MS: a bounded load whatever the number of keys. */
static void zk_be_sweep(struct zk_be *be, struct zk_conn *cn)
{
    int64_t now = clock_mono_ms();

    if (be->sweep == NULL || be->sweep_i >= be->sweep->nkids) {
        if (now - be->sweep_at < ZK_SWEEP_RELIST_MS)
            return;
        be->sweep_at = now;
        zk_call_unref(be->sweep);
        be->sweep = NULL;
        be->sweep_i = 0;
        if (zk_get_kids(cn, be->locks, zk_deadline(be), &be->sweep) != ZOK)
            return;
    }
    for (int n = 0; n < ZK_SWEEP_BATCH && be->sweep_i < be->sweep->nkids; n++)
        zk_be_sweep_key(be, cn, be->sweep->kids[be->sweep_i++]);
}

static void do_zk_keeper_wait(struct zk_be *be, int64_t ms)
{
    struct timespec ts;
    int64_t until = clock_mono_ms() + ms;

    ts.tv_sec = (time_t)(until / 1000);
    ts.tv_nsec = (long)(until % 1000) * 1000000L;
    pthread_cond_timedwait(&be->cv, &be->mu, &ts);
}

static void *zk_be_keeper(void *arg)
{
    struct zk_be *be = arg;
    bool up = false;
    int64_t backoff = 100;

    pthread_mutex_lock(&be->mu);
    while (!be->stopping) {
        struct zk_conn *c = be->conn;
        int state;

        if (c == NULL) {
            zhandle_t *zh;
            pthread_mutex_unlock(&be->mu);
            zh = zookeeper_init2(be->hosts, zk_be_session_watcher,
                                 be->session_ms, NULL, be, 0, zk_be_lib_log);
            pthread_mutex_lock(&be->mu);
            c = zh != NULL ? calloc(1, sizeof(*c)) : NULL;
            if (c == NULL) {
                log_warn("zookeeper: cannot open a handle for %s: %s",
                         be->hosts, strerror(errno));
                if (zh != NULL) {
                    pthread_mutex_unlock(&be->mu);
                    zookeeper_close(zh);
                    pthread_mutex_lock(&be->mu);
                }
                do_zk_keeper_wait(be, backoff);
                backoff = backoff < 5000 ? backoff * 2 : 5000;
                continue;
            }
            if (zoo_set_servers_resolution_delay(zh, ZK_RESOLVE_DELAY_MS) !=
                ZOK)
                log_warn("zookeeper: cannot set the resolution delay");
            c->zh = zh;
            c->refs = 1;
            be->conn = c;
        }
        state = zoo_state(c->zh);
        if (state == ZOO_EXPIRED_SESSION_STATE ||
            state == ZOO_AUTH_FAILED_STATE) {
            log_warn("zookeeper: session %s; opening a new one",
                     state == ZOO_AUTH_FAILED_STATE ? "refused" : "expired");
            up = false;
            do_zk_conn_retire(be, c);
            do_zk_keeper_wait(be, backoff);
            backoff = backoff < 5000 ? backoff * 2 : 5000;
            continue;
        }
        if (state == ZOO_CONNECTED_STATE) {
            bool notify = false;
            c->refs++;
            if (!c->ready) {
                pthread_mutex_unlock(&be->mu);
                int rc = zk_be_setup(be, c);
                pthread_mutex_lock(&be->mu);
                c->ready = rc == ZOK;
                if (c->ready)
                    pthread_cond_broadcast(&be->cv); /* open() waits */
            }
            if (c->ready && !up) {
                up = true;
                notify = true;
                backoff = 100;
                log_info("zookeeper: connected to %s (session 0x%" PRIx64 ")",
                         be->hosts, (uint64_t)zoo_client_id(c->zh)->client_id);
            }
            if (c->ready) {
                bool stale =
                    clock_mono_ms() - be->clock.last_at >= ZK_CLOCK_REFRESH_MS;
                bool trash = be->trash != NULL;
                pthread_mutex_unlock(&be->mu);
                if (notify)
                    zk_be_notify_all(be);
                if (stale) {
                    struct Stat st;
                    int64_t t0 = clock_mono_ms();
                    if (zk_set(c, be->clock_path, NULL, -1, -1, zk_deadline(be),
                               &st) == ZOK)
                        zk_clock_sample(be, st.mtime, t0, clock_mono_ms());
                }
                if (trash)
                    zk_be_empty_trash(be, c);
                zk_be_sweep(be, c);
                pthread_mutex_lock(&be->mu);
            }
            if (--c->refs == 0)
                pthread_cond_broadcast(&be->cv);
        } else if (up) {
            up = false;
            log_warn("zookeeper: connection to %s lost; answering 503 until "
                     "it is back",
                     be->hosts);
        }
        if (!be->stopping)
            do_zk_keeper_wait(be, ZK_KEEPER_TICK_MS);
    }
    pthread_mutex_unlock(&be->mu);
    return NULL;
}

/* ---- open and close --------------------------------------------------- */

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
        do_zk_conn_retire(be, be->conn);
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
    free(be->own);
    pthread_mutex_destroy(&be->own_mu);
    free(be->hosts);
    free(be->root);
    free(be->locks);
    free(be->clock_path);
    free(be->chroot);
    free(be);
}

/* "a/b" → "/a/b"; segments of [A-Za-z0-9._-], never "." or "..". */
static int zk_parse_chroot(const char *path, char **out)
{
    size_t n = path != NULL ? strlen(path) : 0;
    char *s;

    while (n > 0 && path[n - 1] == '/')
        n--;
    if (n > ZK_CHROOT_MAX)
        return -1;
    s = malloc(n + 2);
    if (s == NULL)
        return -1;
    s[0] = '\0';
    if (n > 0) {
        s[0] = '/';
        memcpy(s + 1, path, n);
        s[n + 1] = '\0';
        for (char *seg = s + 1; seg != NULL;) {
            char *end = strchr(seg, '/');
            size_t len = end != NULL ? (size_t)(end - seg) : strlen(seg);
            if (len == 0 || (len == 1 && seg[0] == '.') ||
                (len == 2 && seg[0] == '.' && seg[1] == '.') ||
                strspn(seg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstu"
                            "vwxyz0123456789._-") < len) {
                free(s);
                return -1;
            }
            seg = end != NULL ? end + 1 : NULL;
        }
    }
    *out = s;
    return 0;
}

static char *zk_concat(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);

    if (s != NULL) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb + 1);
    }
    return s;
}

static enum backend_result zk_be_open(const char *url,
                                      const struct backend_hooks *hooks,
                                      struct backend **out,
                                      char *errbuf,
                                      size_t errlen)
{
    static const char *const allowed[] = { "session_timeout_ms", "timeout_ms",
                                           NULL };
    struct url u;
    struct zk_be *be = NULL;
    enum backend_result r = BACKEND_INVALID;
    const char *bad = NULL, *v;
    uint64_t session = ZK_DEFAULT_SESSION_MS, timeout = ZK_DEFAULT_TIMEOUT_MS;
    pthread_condattr_t ca;

    *out = NULL;
    if (url_parse(url, &u) != 0) {
        snprintf(errbuf, errlen, "zookeeper: malformed URL");
        return BACKEND_INVALID;
    }
    if (strcmp(u.scheme, "zookeeper") != 0 || u.user != NULL ||
        u.hosts == NULL || u.hosts[0] == '\0' ||
        strpbrk(u.hosts, " \t/?#@") != NULL) {
        snprintf(errbuf, errlen,
                 "zookeeper: URL needs zookeeper://host:port[,host:port]"
                 "[/chroot]");
        goto out;
    }
    if (url_check_params(&u, allowed, &bad) != 0) {
        snprintf(errbuf, errlen,
                 "zookeeper: unknown URL option '%s' (known: "
                 "session_timeout_ms, timeout_ms)",
                 bad);
        goto out;
    }
    v = url_param(&u, "session_timeout_ms");
    if (v != NULL && text_parse_u64(v, 1000, 600000, &session) != 0) {
        snprintf(errbuf, errlen,
                 "zookeeper: session_timeout_ms must be 1000..600000");
        goto out;
    }
    v = url_param(&u, "timeout_ms");
    if (v != NULL && text_parse_u64(v, 10, 600000, &timeout) != 0) {
        snprintf(errbuf, errlen, "zookeeper: timeout_ms must be 10..600000");
        goto out;
    }
    r = BACKEND_NO_MEMORY;
    be = calloc(1, sizeof(*be));
    if (be == NULL)
        goto out;
    be->base.ops = &zookeeper_backend;
    if (zk_parse_chroot(u.path, &be->chroot) != 0) {
        snprintf(errbuf, errlen,
                 "zookeeper: chroot must be /segment[/segment] of "
                 "[A-Za-z0-9._-], at most %d bytes",
                 ZK_CHROOT_MAX);
        r = BACKEND_INVALID;
        goto out;
    }
    be->hosts = strdup(u.hosts);
    be->root = zk_concat(be->chroot, "/lockd");
    be->locks = be->root != NULL ? zk_concat(be->root, "/locks") : NULL;
    be->clock_path = be->root != NULL ? zk_concat(be->root, "/clock") : NULL;
    if (be->hosts == NULL || be->locks == NULL || be->clock_path == NULL)
        goto out;
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
        goto out;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (pthread_mutex_init(&be->own_mu, NULL) != 0) {
        pthread_condattr_destroy(&ca);
        snprintf(errbuf, errlen, "zookeeper: cannot make a mutex");
        goto out_free_raw;
    }
    if (pthread_mutex_init(&be->mu, NULL) != 0 ||
        pthread_cond_init(&be->cv, &ca) != 0) {
        pthread_condattr_destroy(&ca);
        pthread_mutex_destroy(&be->own_mu);
        snprintf(errbuf, errlen, "zookeeper: cannot make a mutex");
        goto out_free_raw;
    }
    pthread_condattr_destroy(&ca);
    zoo_set_debug_level(log_enabled(LOG_LEVEL_DEBUG) ? ZOO_LOG_LEVEL_INFO
                                                     : ZOO_LOG_LEVEL_WARN);
    if (pthread_create(&be->keeper, NULL, zk_be_keeper, be) != 0) {
        snprintf(errbuf, errlen, "zookeeper: cannot start the keeper thread");
        zk_be_close(&be->base);
        be = NULL;
        goto out;
    }
    be->keeper_started = true;
    /* a short wait for the first session, so that a lockd started next to
     * a running ZooKeeper is ready at once; a store still down is no
     * failure: calls answer UNAVAILABLE until it is back */
    pthread_mutex_lock(&be->mu);
    for (int64_t now = clock_mono_ms(), until = now + be->timeout_ms;
         now < until && (be->conn == NULL || !be->conn->ready);
         now = clock_mono_ms())
        do_zk_keeper_wait(be, until - now);
    if (be->conn == NULL || !be->conn->ready)
        log_warn("zookeeper: %s does not answer yet; answering 503 until it "
                 "does",
                 be->hosts);
    pthread_mutex_unlock(&be->mu);
    *out = &be->base;
    be = NULL;
    r = BACKEND_OK;
    goto out;
out_free_raw:
    free(be->own);
    free(be->hosts);
    free(be->root);
    free(be->locks);
    free(be->clock_path);
    free(be->chroot);
    free(be);
    be = NULL;
out:
    if (be != NULL) {
        free(be->own);
        free(be->hosts);
        free(be->root);
        free(be->locks);
        free(be->clock_path);
        free(be->chroot);
        free(be);
    }
    url_cleanup(&u);
    return r;
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
