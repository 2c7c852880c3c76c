/*
 * backends/redis/sentinel.c - redis+sentinel://: the Redis primary that a
 * set of Sentinels names. The URL lists the Sentinels and the master
 * name; the Redis nodes' password, if any, is the URL's, and Sentinels
 * with a password of their own get it from ?sentinel_password= or the
 * first line of ?sentinel_password_file=.
 *
 * The primary's address lives here, beside a generation counter bumped
 * each time it changes. It is learnt by asking the Sentinels in turn
 * (SENTINEL get-master-addr-by-name) and kept current by a watcher thread
 * subscribed to one Sentinel's +switch-master channel (on failure, the
 * next Sentinel). conn.c dials the address and confirms ROLE says master
 * before it sends anything; a connection dialled at an older generation
 * is dropped before its next command, so no write goes to a demoted
 * primary once the Sentinels have said so. A READONLY or MASTERDOWN reply
 * or a broken connection asks the Sentinels again (redis_sentinel_lost()).
 */
#include "backends/redis/redis_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/secret.h"
#include "lib/text.h"

#define REDIS_BE_SENTINEL_PORT     26379 /* a Sentinel's port by default */
#define REDIS_BE_SENTINEL_ASK_MS   100   /* workers ask at most this often */
#define REDIS_BE_SENTINEL_POLL_MS  2000  /* the watcher asks again anyway */
#define REDIS_BE_SENTINEL_HOST_MAX 256
#define REDIS_BE_SENTINELS_MAX     64 /* Sentinels in a URL, at most */
#define REDIS_BE_SENTINEL_SWITCH   "+switch-master"
#define REDIS_BE_SENTINEL_PROMOTED "+promoted-slave"

struct sentinel_state {
    pthread_mutex_t mu; /* guards host, port, epoch and stop */
    char host[REDIS_BE_SENTINEL_HOST_MAX]; /* the primary; "" unknown */
    int port;
    int64_t epoch;          /* Sentinel's config-epoch of host:port; -1 none */
    atomic_uint gen;        /* bumped whenever host:port changes */
    _Atomic int64_t ask_ms; /* monotonic: a worker last asked */
    char *password;         /* owned: the Sentinels' AUTH; NULL none */
    bool stop;              /* the watcher ends within REDIS_BE_SUB_POLL_MS */
    pthread_t thread;
    bool started;
};

/* ---- the URL ---- */

/* master-name[/db] into be. */
static enum backend_result sentinel_parse_path(struct redis_be *be,
                                               const char *path,
                                               char *err,
                                               size_t errlen)
{
    const char *slash = path != NULL ? strchr(path, '/') : NULL;
    size_t len = slash != NULL ? (size_t)(slash - path) : 0;
    uint64_t db;

    if (path != NULL && slash == NULL)
        len = strlen(path);
    if (len == 0) {
        snprintf(err, errlen,
                 "redis: redis+sentinel:// needs the master name as its "
                 "path (redis+sentinel://host:port,.../master-name[/db])");
        return BACKEND_INVALID;
    }
    be->master_name = strndup(path, len);
    if (be->master_name == NULL)
        return BACKEND_NO_MEMORY;
    if (slash != NULL) {
        if (text_parse_u64(slash + 1, 0, 0x7fffffff, &db) != 0) {
            snprintf(err, errlen,
                     "redis: after the master name, the URL path must be a "
                     "database number");
            return BACKEND_INVALID;
        }
        be->db = (unsigned)db;
    }
    return BACKEND_OK;
}

static struct sentinel_state *sentinel_state_new(void)
{
    struct sentinel_state *st = calloc(1, sizeof(*st));

    if (st == NULL)
        return NULL;
    if (pthread_mutex_init(&st->mu, NULL) != 0) {
        free(st);
        return NULL;
    }
    atomic_init(&st->gen, 1);
    st->epoch = -1;
    atomic_init(&st->ask_ms, 0);
    return st;
}

/* ?sentinel_password= or the first line of ?sentinel_password_file=
 * (not both) into the Sentinels' password. */
static enum backend_result sentinel_parse_password(struct redis_be *be,
                                                   const struct url *u,
                                                   char *err,
                                                   size_t errlen)
{
    const char *pw = url_param(u, "sentinel_password");
    const char *file = url_param(u, "sentinel_password_file");
    char why[256];

    if (pw != NULL && file != NULL) {
        snprintf(err, errlen,
                 "redis: the URL has sentinel_password and "
                 "sentinel_password_file: give one");
        return BACKEND_INVALID;
    }
    if (file != NULL) {
        be->sentinel->password = secret_file_line(file, why, sizeof(why));
        if (be->sentinel->password == NULL) {
            snprintf(err, errlen, "redis: %s", why);
            return BACKEND_INVALID;
        }
        return BACKEND_OK;
    }
    if (pw == NULL || pw[0] == '\0')
        return BACKEND_OK;
    be->sentinel->password = strdup(pw);
    return be->sentinel->password != NULL ? BACKEND_OK : BACKEND_NO_MEMORY;
}

enum backend_result redis_sentinel_parse(struct redis_be *be,
                                         const struct url *u,
                                         char *err,
                                         size_t errlen)
{
    enum backend_result res;

    be->sentinel = sentinel_state_new();
    if (be->sentinel == NULL)
        return BACKEND_NO_MEMORY;
    if (u->hosts == NULL || u->hosts[0] == '\0') {
        snprintf(err, errlen,
                 "redis: redis+sentinel:// needs at least one Sentinel "
                 "(redis+sentinel://host:port,.../master-name)");
        return BACKEND_INVALID;
    }
    res = redis_parse_addrs(be, u->hosts, REDIS_BE_SENTINEL_PORT,
                            REDIS_BE_SENTINELS_MAX, "Sentinel", err, errlen);
    for (size_t i = 0; res == BACKEND_OK && i < be->naddrs; i++)
        if (strlen(be->addrs[i].host) >= REDIS_BE_SENTINEL_HOST_MAX) {
            snprintf(err, errlen, "redis: Sentinel host name too long");
            res = BACKEND_INVALID;
        }
    if (res == BACKEND_OK)
        res = sentinel_parse_path(be, u->path, err, errlen);
    if (res == BACKEND_OK)
        res = redis_parse_auth(be, u, err, errlen);
    if (res == BACKEND_OK)
        res = sentinel_parse_password(be, u, err, errlen);
    return res;
}

/* ---- asking the Sentinels ---- */

/* Dial Sentinel i (its password, if any): a context, or NULL. */
static redisContext *sentinel_dial(struct redis_be *be, size_t i)
{
    struct sentinel_state *st = be->sentinel;
    struct timeval ct = { .tv_sec = (time_t)(be->connect_ms / 1000),
                          .tv_usec =
                              (suseconds_t)(be->connect_ms % 1000) * 1000 };
    struct timeval cmd = { .tv_sec = (time_t)(be->cmd_ms / 1000),
                           .tv_usec = (suseconds_t)(be->cmd_ms % 1000) * 1000 };
    redisContext *c =
        redisConnectWithTimeout(be->addrs[i].host, be->addrs[i].port, ct);
    redisReply *r;

    if (c == NULL)
        return NULL;
    if (c->err != 0 || redisSetTimeout(c, cmd) != REDIS_OK) {
        redisFree(c);
        return NULL;
    }
    if (st->password == NULL)
        return c;
    r = redisCommand(c, "AUTH %s", st->password);
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        redis_warn(be, "Sentinel AUTH", r != NULL ? r->str : c->errstr);
        freeReplyObject(r);
        redisFree(c);
        return NULL;
    }
    freeReplyObject(r);
    return c;
}

/*
 * Record host:port as the primary; bump the generation if it changed.
 * epoch: the Sentinel's config-epoch for it, bumped by every failover; an
 * answer older than what we know is ignored, for while a failover goes on
 * the Sentinels that have not heard of it still name the old primary (and
 * it still takes writes). -1: from a failover message, newer than any
 * epoch known so far.
 */
static void
sentinel_set(struct redis_be *be, const char *host, int port, int64_t epoch)
{
    struct sentinel_state *st = be->sentinel;
    bool changed = false;

    if (strlen(host) >= sizeof(st->host))
        return;
    pthread_mutex_lock(&st->mu);
    if (epoch < 0 || epoch >= st->epoch) {
        changed = strcmp(st->host, host) != 0 || st->port != port;
        if (epoch >= 0)
            st->epoch = epoch;
        else if (changed)
            st->epoch++; /* at least one more than the one we had */
    }
    if (changed) {
        snprintf(st->host, sizeof(st->host), "%s", host);
        st->port = port;
        atomic_fetch_add(&st->gen, 1);
    }
    pthread_mutex_unlock(&st->mu);
    if (!changed)
        return;
    log_info("redis: the Sentinels name %s:%d as the primary of '%s'", host,
             port, be->master_name);
    /* end every thread's back-off: the new primary may well answer */
    threadconn_ok(&be->conns, NULL);
}

/* A port number reply element: 1..65535, or 0. */
static int sentinel_port(const redisReply *e)
{
    uint64_t n;
    char buf[8];

    if (e->type != REDIS_REPLY_STRING || e->len == 0 || e->len >= sizeof(buf))
        return 0;
    memcpy(buf, e->str, e->len);
    buf[e->len] = '\0';
    return text_parse_u64(buf, 1, 65535, &n) == 0 ? (int)n : 0;
}

/* config-epoch of SENTINEL MASTER's flat field list: >= 0, or -1. */
static int64_t sentinel_epoch(const redisReply *r)
{
    uint64_t n;

    if (r == NULL || r->type != REDIS_REPLY_ARRAY)
        return -1;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING &&
            strcmp(r->element[i]->str, "config-epoch") == 0 &&
            r->element[i + 1]->type == REDIS_REPLY_STRING &&
            text_parse_u64(r->element[i + 1]->str, 0, INT64_MAX, &n) == 0)
            return (int64_t)n;
    return -1;
}

/* One Sentinel's answer. */
struct sentinel_answer {
    char host[REDIS_BE_SENTINEL_HOST_MAX];
    int port;
    int64_t epoch;
};

/* Ask Sentinel i for the primary and its epoch (one round trip): 0, or
 * -1. */
static int
sentinel_ask_one(struct redis_be *be, size_t i, struct sentinel_answer *a)
{
    redisContext *c = sentinel_dial(be, i);
    redisReply *r = NULL, *m = NULL;
    int rc = -1;

    if (c == NULL)
        return -1;
    if (redisAppendCommand(c, "SENTINEL get-master-addr-by-name %s",
                           be->master_name) != REDIS_OK ||
        redisAppendCommand(c, "SENTINEL MASTER %s", be->master_name) !=
            REDIS_OK ||
        redisGetReply(c, (void **)&r) != REDIS_OK ||
        redisGetReply(c, (void **)&m) != REDIS_OK)
        goto out;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING && r->element[0]->len > 0 &&
        r->element[0]->len < REDIS_BE_SENTINEL_HOST_MAX &&
        sentinel_port(r->element[1]) != 0 && sentinel_epoch(m) >= 0) {
        memcpy(a->host, r->element[0]->str, r->element[0]->len + 1);
        a->port = sentinel_port(r->element[1]);
        a->epoch = sentinel_epoch(m);
        rc = 0;
    } else if (r != NULL && r->type == REDIS_REPLY_NIL) {
        redis_warn(be, "Sentinel", "does not know the master name");
    }
out:
    freeReplyObject(r);
    freeReplyObject(m);
    redisFree(c);
    return rc;
}

/* Ask every Sentinel; the answer of the newest epoch wins: 0, or -1. */
static int sentinel_ask(struct redis_be *be)
{
    struct sentinel_answer best = { .epoch = -1 }, a;

    for (size_t i = 0; i < be->naddrs; i++)
        if (sentinel_ask_one(be, i, &a) == 0 && a.epoch > best.epoch)
            best = a;
    if (best.epoch < 0) {
        redis_warn(be, "Sentinels", "none named a primary");
        return -1;
    }
    sentinel_set(be, best.host, best.port, best.epoch);
    return 0;
}

void redis_sentinel_lost(struct redis_be *be)
{
    struct sentinel_state *st = be->sentinel;
    int64_t now = clock_mono_ms();
    int64_t last = atomic_load(&st->ask_ms);

    /* one thread asks; the others go on with what is known */
    if (now - last < REDIS_BE_SENTINEL_ASK_MS)
        return;
    if (!atomic_compare_exchange_strong(&st->ask_ms, &last, now))
        return;
    sentinel_ask(be);
}

unsigned redis_sentinel_gen(struct redis_be *be)
{
    return atomic_load(&be->sentinel->gen);
}

/* ---- dialling the primary ---- */

/* Does c's server say ROLE master? */
static bool sentinel_is_master(redisContext *c)
{
    redisReply *r = redisCommand(c, "ROLE");
    bool yes = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
               r->element[0]->type == REDIS_REPLY_STRING &&
               strcmp(r->element[0]->str, "master") == 0;

    freeReplyObject(r);
    return yes;
}

redisContext *redis_sentinel_dial(struct redis_be *be, char *err, size_t errlen)
{
    struct sentinel_state *st = be->sentinel;
    char host[REDIS_BE_SENTINEL_HOST_MAX];
    int port;
    redisContext *c;

    pthread_mutex_lock(&st->mu);
    memcpy(host, st->host, sizeof(host));
    port = st->port;
    pthread_mutex_unlock(&st->mu);
    if (host[0] == '\0') {
        redis_sentinel_lost(be);
        snprintf(err, errlen, "no primary known for '%s'", be->master_name);
        return NULL;
    }
    c = redis_dial_to(be, host, port, err, errlen);
    if (c == NULL) {
        redis_sentinel_lost(be);
        return NULL;
    }
    if (!sentinel_is_master(c)) {
        snprintf(err, errlen, "%s:%d is not (or no longer) the primary", host,
                 port);
        redisFree(c);
        redis_sentinel_lost(be);
        return NULL;
    }
    return c;
}

void redis_sentinel_where(struct redis_be *be, char *buf, size_t len)
{
    struct sentinel_state *st = be->sentinel;

    pthread_mutex_lock(&st->mu);
    snprintf(buf, len, "%s:%d (primary of '%s')",
             st->host[0] != '\0' ? st->host : "?", st->port, be->master_name);
    pthread_mutex_unlock(&st->mu);
}

/* ---- the watcher ---- */

static bool sentinel_stopping(struct sentinel_state *st)
{
    bool stop;

    pthread_mutex_lock(&st->mu);
    stop = st->stop;
    pthread_mutex_unlock(&st->mu);
    return stop;
}

/*
 * A message, from the wire:
 *   +switch-master  "<name> <old-ip> <old-port> <new-ip> <new-port>"
 *   +promoted-slave "slave <ip:port> <ip> <port> @ <name> <old-ip> <old-port>"
 * The second comes first, from the Sentinel leading the failover, the
 * moment the replica answers ROLE master; +switch-master only once every
 * replica is reconfigured (seconds later), and until Sentinel demotes it
 * the old primary still takes writes: they would be lost.
 */
static void sentinel_message(struct redis_be *be,
                             const redisReply *chan,
                             const redisReply *msg)
{
    char buf[3 * REDIS_BE_SENTINEL_HOST_MAX], *f[8], *save = NULL;
    bool promoted;
    uint64_t port;
    size_t n = 0;

    if (chan->type != REDIS_REPLY_STRING || msg->type != REDIS_REPLY_STRING ||
        msg->len >= sizeof(buf))
        return;
    promoted = strcmp(chan->str, REDIS_BE_SENTINEL_PROMOTED) == 0;
    memcpy(buf, msg->str, msg->len);
    buf[msg->len] = '\0';
    for (char *p = strtok_r(buf, " ", &save); p != NULL && n < 8;
         p = strtok_r(NULL, " ", &save))
        f[n++] = p;
    if (promoted && n == 8 && strcmp(f[0], "slave") == 0 &&
        strcmp(f[5], be->master_name) == 0 &&
        text_parse_u64(f[3], 1, 65535, &port) == 0)
        sentinel_set(be, f[2], (int)port, -1);
    else if (!promoted && n == 5 && strcmp(f[0], be->master_name) == 0 &&
             text_parse_u64(f[4], 1, 65535, &port) == 0)
        sentinel_set(be, f[3], (int)port, -1);
}

/* ["message", channel, payload]. */
static void sentinel_handle(struct redis_be *be, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        strcmp(r->element[0]->str, "message") != 0)
        return;
    sentinel_message(be, r->element[1], r->element[2]);
}

/* The watcher's link to one Sentinel. */
struct sentinel_link {
    redisContext *c;  /* subscribed; NULL while down */
    int64_t last_rx;  /* monotonic: it last sent something */
    int64_t retry_at; /* monotonic: when to dial it again */
    int64_t backoff;
};

static void sentinel_link_drop(struct redis_be *be, struct sentinel_link *l)
{
    if (l->c != NULL)
        redisFree(l->c);
    l->c = NULL;
    l->backoff = threadconn_backoff_next(&be->conns, l->backoff);
    l->retry_at = clock_mono_ms() + l->backoff;
}

/* Dial Sentinel i and SUBSCRIBE: true once subscribed. */
static bool
sentinel_link_up(struct redis_be *be, size_t i, struct sentinel_link *l)
{
    redisReply *r;

    l->c = sentinel_dial(be, i);
    if (l->c == NULL) {
        sentinel_link_drop(be, l);
        return false;
    }
    r = redisCommand(l->c, "SUBSCRIBE %s %s", REDIS_BE_SENTINEL_SWITCH,
                     REDIS_BE_SENTINEL_PROMOTED);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        sentinel_link_drop(be, l);
        return false;
    }
    freeReplyObject(r);
    l->backoff = 0;
    l->last_rx = clock_mono_ms();
    return true;
}

/* Read what l's Sentinel sent: 0, or -1 when the link broke. */
static int sentinel_link_read(struct redis_be *be, struct sentinel_link *l)
{
    redisReply *r = NULL;

    if (redisBufferRead(l->c) != REDIS_OK)
        return -1;
    l->last_rx = clock_mono_ms();
    for (;;) {
        if (redisGetReplyFromReader(l->c, (void **)&r) != REDIS_OK)
            return -1;
        if (r == NULL)
            return 0;
        sentinel_handle(be, r);
        freeReplyObject(r);
    }
}

/* PING l (a subscribed link may): 0, or -1. */
static int sentinel_link_ping(struct sentinel_link *l)
{
    int done = 0;

    if (redisAppendCommand(l->c, "PING") != REDIS_OK)
        return -1;
    while (!done)
        if (redisBufferWrite(l->c, &done) != REDIS_OK)
            return -1;
    return 0;
}

/*
 * One round of the watcher: dial the links that are due (then ask, so no
 * switch falls between), wait for messages, and every
 * REDIS_BE_SENTINEL_POLL_MS ask again (a message lost is made up for) and
 * PING each link; a link silent for two periods is dead.
 */
static void sentinel_round(struct redis_be *be,
                           struct sentinel_link *links,
                           struct pollfd *pfd,
                           int64_t *last_ask)
{
    int64_t now = clock_mono_ms();
    bool ask = now - *last_ask >= REDIS_BE_SENTINEL_POLL_MS;
    size_t n = be->naddrs;

    for (size_t i = 0; i < n; i++) {
        if (links[i].c == NULL && now >= links[i].retry_at &&
            sentinel_link_up(be, i, &links[i]))
            ask = true;
        pfd[i].fd = links[i].c != NULL ? links[i].c->fd : -1;
        pfd[i].events = POLLIN;
        pfd[i].revents = 0;
    }
    if (ask) {
        *last_ask = clock_mono_ms();
        sentinel_ask(be);
    }
    if (poll(pfd, (nfds_t)n, REDIS_BE_SUB_POLL_MS) < 0 && errno != EINTR)
        return;
    now = clock_mono_ms();
    for (size_t i = 0; i < n; i++) {
        struct sentinel_link *l = &links[i];
        if (l->c == NULL)
            continue;
        if ((pfd[i].revents != 0 && sentinel_link_read(be, l) != 0) ||
            now - l->last_rx > 2 * REDIS_BE_SENTINEL_POLL_MS ||
            (ask && sentinel_link_ping(l) != 0))
            sentinel_link_drop(be, l);
    }
}

/* Subscribed to every Sentinel at once: +promoted-slave comes only from
 * the one leading the failover, the others tell later. */
static void *sentinel_main(void *arg)
{
    struct redis_be *be = arg;
    struct sentinel_link *links = calloc(be->naddrs, sizeof(*links));
    struct pollfd *pfd = calloc(be->naddrs, sizeof(*pfd));
    int64_t last_ask = clock_mono_ms();

    if (links == NULL || pfd == NULL) {
        log_warn("redis: out of memory: no Sentinel watcher; the primary is "
                 "found again only after errors");
        goto out;
    }
    while (!sentinel_stopping(be->sentinel))
        sentinel_round(be, links, pfd, &last_ask);
    for (size_t i = 0; i < be->naddrs; i++)
        if (links[i].c != NULL)
            redisFree(links[i].c);
out:
    free(links);
    free(pfd);
    return NULL;
}

int redis_sentinel_start(struct redis_be *be)
{
    struct sentinel_state *st = be->sentinel;

    if (sentinel_ask(be) != 0)
        log_warn("redis: no Sentinel named the primary of '%s' yet",
                 be->master_name);
    if (pthread_create(&st->thread, NULL, sentinel_main, be) != 0)
        return -1;
    st->started = true;
    return 0;
}

void redis_sentinel_free(struct redis_be *be)
{
    struct sentinel_state *st = be->sentinel;

    if (st == NULL)
        return;
    if (st->started) {
        pthread_mutex_lock(&st->mu);
        st->stop = true;
        pthread_mutex_unlock(&st->mu);
        pthread_join(st->thread, NULL);
    }
    pthread_mutex_destroy(&st->mu);
    if (st->password != NULL)
        explicit_bzero(st->password, strlen(st->password));
    free(st->password);
    free(st);
    be->sentinel = NULL;
}
