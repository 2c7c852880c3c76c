/*
 * backends/redis/cluster.c - redis+cluster://: the Redis adapter on a Redis
 * Cluster. The hash slot rules (CRC16, hash tags), the seeds from the URL,
 * the slot map (CLUSTER SLOTS, masters only) shared by every thread, and
 * the routing of each command to the master of its slot, following MOVED
 * (the map changed: learn the slot's new master, send again), ASK (a slot
 * being migrated: ASKING and the command on the target, once) and
 * TRYAGAIN (a key of a migrating slot is busy: a short wait). A reply of
 * -MOVED or -ASK means the command did not run, so sending it again is
 * never a second run; a broken connection is answered 503 as on a single
 * Redis and the map is read again.
 *
 * Per-thread connections stay conn.c's: each worker thread's struct
 * redis_conn holds one context per node (cn->cnodes, by node index), so no
 * thread waits for another. cn->ctx points at the context of the node the
 * current call goes to. The scripts' digests are the same on every node:
 * each new node connection loads them (SCRIPT LOAD), and a node that lost
 * them answers NOSCRIPT, which scripts.c handles as on a single server.
 *
 * Key layout (cluster mode only): every Redis key of lock K is
 * prefix "{" h "}" kind "{" K "}", h = 16 lowercase hex of FNV-1a 64 of
 * tag(K), tag(K) = Redis's hash tag rule applied to K. So all of a lock's
 * keys share one slot, and keys that share a tag (order:{42}:a,
 * order:{42}:b) share it too: a multi-key request over them runs as one
 * script.
 */
#include "backends/redis/redis_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/url.h"

#define CLUSTER_REFRESH_MIN_MS 100 /* CLUSTER SLOTS at most this often */
#define CLUSTER_TRYAGAIN_MS    20  /* wait between TRYAGAIN's retries */
#define CLUSTER_REDIRECTS      3   /* MOVED/ASK followed per command */

struct cluster_node {
    char *host; /* owned */
    int port;
};

/* Shared by every thread; lock guards all but the constant seeds. */
struct cluster_state {
    pthread_mutex_t lock;
    struct cluster_node nodes[REDIS_BE_CLUSTER_NODES_MAX]; /* append only */
    int nnodes;
    int16_t slots[REDIS_BE_CLUSTER_SLOTS]; /* master's node index; -1 */
    int64_t refreshed_ms; /* monotonic: the last CLUSTER SLOTS read */
    bool stale;           /* a node failed: read the map again */
    atomic_uint next_any; /* round robin of cluster_any() */
};

/* One node's context on one thread: in struct redis_conn's cnodes. */
struct redis_cnode {
    redisContext *ctx; /* owned; NULL while closed */
    int64_t offset_ms; /* Redis's unix ms minus our monotonic ms */
};

/* ---- slots and tags ---- */

uint16_t redis_cluster_crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;

    /* CRC16-CCITT (XMODEM): poly 0x1021, init 0, as Redis Cluster */
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((uint16_t)(unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) != 0 ? (uint16_t)((crc << 1) ^ 0x1021)
                                      : (uint16_t)(crc << 1);
    }
    return crc;
}

void redis_cluster_tag(const char *key, size_t len, size_t *at, size_t *n)
{
    const char *open = memchr(key, '{', len), *close;

    *at = 0;
    *n = len;
    if (open == NULL)
        return;
    close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));
    if (close == NULL || close == open + 1)
        return;
    *at = (size_t)(open + 1 - key);
    *n = (size_t)(close - open - 1);
}

int redis_cluster_keyslot(const char *key, size_t len)
{
    size_t at, n;

    redis_cluster_tag(key, len, &at, &n);
    return redis_cluster_crc16(key + at, n) & (REDIS_BE_CLUSTER_SLOTS - 1);
}

/* slot -> its tag; filled once, by the first caller */
static char slot_tags[REDIS_BE_CLUSTER_SLOTS][6];
static pthread_once_t slot_tags_once = PTHREAD_ONCE_INIT;

static void slot_tags_fill(void)
{
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    size_t left = REDIS_BE_CLUSTER_SLOTS;
    char t[6] = "#";

    /* "#0".."#z", then "#00".."#zz", ...: some 160,000 tries fill every
     * slot (a coupon collector's count), far below the 1.7 million of
     * four digits */
    for (size_t len = 1; len <= 4 && left > 0; len++) {
        size_t total = 1;

        for (size_t i = 0; i < len; i++)
            total *= 36;
        for (size_t v = 0; v < total && left > 0; v++) {
            size_t x = v;
            int slot;

            for (size_t i = len; i > 0; i--) {
                t[i] = digits[x % 36];
                x /= 36;
            }
            t[len + 1] = '\0';
            slot =
                redis_cluster_crc16(t, len + 1) & (REDIS_BE_CLUSTER_SLOTS - 1);
            if (slot_tags[slot][0] == '\0') {
                memcpy(slot_tags[slot], t, len + 2);
                left--;
            }
        }
    }
}

const char *redis_cluster_slot_tag(int slot)
{
    pthread_once(&slot_tags_once, slot_tags_fill);
    return slot_tags[slot & (REDIS_BE_CLUSTER_SLOTS - 1)];
}

void redis_cluster_hash(const char *key, size_t len, char out[17])
{
    static const char hex[] = "0123456789abcdef";
    uint64_t h = 14695981039346656037ULL;
    size_t at, n;

    redis_cluster_tag(key, len, &at, &n);
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)key[at + i];
        h *= 1099511628211ULL;
    }
    for (int i = 15; i >= 0; i--) {
        out[i] = hex[h & 0xf];
        h >>= 4;
    }
    out[16] = '\0';
}

/* ---- the URL ---- */

/* The shared state, its node table starting with the seeds. */
static struct cluster_state *cluster_state_new(const struct redis_be *be)
{
    struct cluster_state *st = calloc(1, sizeof(*st));

    if (st == NULL)
        return NULL;
    if (pthread_mutex_init(&st->lock, NULL) != 0) {
        free(st);
        return NULL;
    }
    for (size_t i = 0; i < REDIS_BE_CLUSTER_SLOTS; i++)
        st->slots[i] = -1;
    for (size_t i = 0; i < be->naddrs; i++) {
        st->nodes[i].host = strdup(be->addrs[i].host);
        st->nodes[i].port = be->addrs[i].port;
        st->nnodes++;
        if (st->nodes[i].host == NULL) {
            redis_cluster_free(st);
            return NULL;
        }
    }
    atomic_init(&st->next_any, 0);
    return st;
}

enum backend_result redis_cluster_parse(struct redis_be *be,
                                        const struct url *u,
                                        char *err,
                                        size_t errlen)
{
    const char *prefix = url_param(u, "prefix");
    enum backend_result res;

    if (u->path != NULL) {
        snprintf(err, errlen,
                 "redis: a Redis Cluster has one database: "
                 "redis+cluster:// takes no /db");
        return BACKEND_INVALID;
    }
    if (prefix != NULL && strpbrk(prefix, "{}") != NULL) {
        snprintf(err, errlen,
                 "redis: on a Redis Cluster the prefix may not "
                 "contain '{' or '}' (lockd puts the hash tag "
                 "there)");
        return BACKEND_INVALID;
    }
    if (u->hosts == NULL || u->hosts[0] == '\0') {
        snprintf(err, errlen,
                 "redis: redis+cluster:// needs at least one "
                 "node (host:port,host:port,...)");
        return BACKEND_INVALID;
    }
    res = redis_parse_addrs(be, u->hosts, REDIS_BE_DEFAULT_PORT,
                            REDIS_BE_CLUSTER_NODES_MAX, "cluster node", err,
                            errlen);
    if (res == BACKEND_OK)
        res = redis_parse_auth(be, u, err, errlen);
    if (res != BACKEND_OK)
        return res;
    /* be->host names the first seed in log lines */
    be->host = strdup(be->addrs[0].host);
    be->port = be->addrs[0].port;
    be->cluster = cluster_state_new(be);
    if (be->host == NULL || be->cluster == NULL)
        return BACKEND_NO_MEMORY;
    return BACKEND_OK;
}

void redis_cluster_free(struct cluster_state *st)
{
    if (st == NULL)
        return;
    for (int i = 0; i < st->nnodes; i++)
        free(st->nodes[i].host);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

/* ---- the slot map ---- */

/* The index of host:port in the table, added if new; -1 when full or out
 * of memory. Under st->lock. */
static int do_cluster_node(struct cluster_state *st, const char *host, int port)
{
    for (int i = 0; i < st->nnodes; i++)
        if (st->nodes[i].port == port && strcmp(st->nodes[i].host, host) == 0)
            return i;
    if (st->nnodes == REDIS_BE_CLUSTER_NODES_MAX)
        return -1;
    st->nodes[st->nnodes].host = strdup(host);
    if (st->nodes[st->nnodes].host == NULL)
        return -1;
    st->nodes[st->nnodes].port = port;
    return st->nnodes++;
}

/* One CLUSTER SLOTS range [start, end, [host, port, ...], replicas...]
 * into slots (asked: the node that answered, for an empty host). */
static void do_cluster_range(struct cluster_state *st,
                             const redisReply *e,
                             const char *asked,
                             int16_t *slots)
{
    const redisReply *m;
    const char *host;
    int idx;

    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[0]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->type != REDIS_REPLY_INTEGER)
        return;
    m = e->element[2];
    if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
        m->element[0]->type != REDIS_REPLY_STRING ||
        m->element[1]->type != REDIS_REPLY_INTEGER)
        return;
    host = m->element[0]->len > 0 ? m->element[0]->str : asked;
    idx = do_cluster_node(st, host, (int)m->element[1]->integer);
    if (idx < 0)
        return;
    for (long long s = e->element[0]->integer;
         s <= e->element[1]->integer && s < REDIS_BE_CLUSTER_SLOTS; s++)
        if (s >= 0)
            slots[s] = (int16_t)idx;
}

/* Ask node i for the map: 0 and the map replaced, or -1. */
static int cluster_read_map(struct redis_be *be, int i)
{
    struct cluster_state *st = be->cluster;
    const char *argv[] = { "CLUSTER", "SLOTS" };
    size_t lens[] = { 7, 5 };
    char host[256], err[256];
    int port, rc = -1;
    int16_t *slots;
    redisContext *c;
    redisReply *r;

    pthread_mutex_lock(&st->lock);
    snprintf(host, sizeof(host), "%s", st->nodes[i].host);
    port = st->nodes[i].port;
    pthread_mutex_unlock(&st->lock);
    c = redis_dial_to(be, host, port, err, sizeof(err));
    if (c == NULL)
        return -1;
    r = redisCommandArgv(c, 2, argv, lens);
    slots = malloc(REDIS_BE_CLUSTER_SLOTS * sizeof(*slots));
    if (slots != NULL && r != NULL && r->type == REDIS_REPLY_ARRAY &&
        r->elements > 0) {
        for (size_t s = 0; s < REDIS_BE_CLUSTER_SLOTS; s++)
            slots[s] = -1;
        pthread_mutex_lock(&st->lock);
        for (size_t k = 0; k < r->elements; k++)
            do_cluster_range(st, r->element[k], host, slots);
        memcpy(st->slots, slots, REDIS_BE_CLUSTER_SLOTS * sizeof(*slots));
        st->stale = false;
        pthread_mutex_unlock(&st->lock);
        rc = 0;
    }
    free(slots);
    freeReplyObject(r);
    redisFree(c);
    return rc;
}

/* Read the map again from any node that answers (at most every
 * CLUSTER_REFRESH_MIN_MS unless force): 0, or -1 when none did. */
static int cluster_refresh(struct redis_be *be, bool force)
{
    struct cluster_state *st = be->cluster;
    int64_t now = clock_mono_ms();
    int n, start;

    pthread_mutex_lock(&st->lock);
    if (!force && now - st->refreshed_ms < CLUSTER_REFRESH_MIN_MS) {
        pthread_mutex_unlock(&st->lock);
        return 0;
    }
    st->refreshed_ms = now;
    n = st->nnodes;
    pthread_mutex_unlock(&st->lock);
    start = (int)(atomic_fetch_add(&st->next_any, 1) % (unsigned)n);
    for (int k = 0; k < n; k++)
        if (cluster_read_map(be, (start + k) % n) == 0)
            return 0;
    return -1;
}

/* The node serving slot (-1: any node), reading the map when unknown or
 * stale: its index, or -1. */
static int cluster_node_of(struct redis_be *be, int slot)
{
    struct cluster_state *st = be->cluster;
    int idx;
    bool stale;

    for (int attempt = 0; attempt < 2; attempt++) {
        pthread_mutex_lock(&st->lock);
        stale = st->stale;
        if (slot < 0)
            idx = (int)(atomic_fetch_add(&st->next_any, 1) %
                        (unsigned)st->nnodes);
        else
            idx = st->slots[slot];
        pthread_mutex_unlock(&st->lock);
        if ((idx >= 0 && !stale) || attempt > 0)
            return idx;
        if (cluster_refresh(be, false) != 0)
            return idx;
    }
    return -1;
}

/* A -MOVED or -ASK reply's "slot host:port": the node's index, or -1. */
static int cluster_redirect(struct redis_be *be, const char *s, int *slot)
{
    struct cluster_state *st = be->cluster;
    char host[256];
    const char *sp = strchr(s, ' '), *colon;
    long long v;
    char *end;
    int idx;

    if (sp == NULL)
        return -1;
    errno = 0;
    v = strtoll(sp + 1, &end, 10);
    if (errno != 0 || *end != ' ' || v < 0 || v >= REDIS_BE_CLUSTER_SLOTS)
        return -1;
    colon = strrchr(end + 1, ':');
    if (colon == NULL || colon == end + 1 ||
        (size_t)(colon - end - 1) >= sizeof(host))
        return -1;
    memcpy(host, end + 1, (size_t)(colon - end - 1));
    host[colon - end - 1] = '\0';
    *slot = (int)v;
    errno = 0;
    v = strtoll(colon + 1, &end, 10);
    if (errno != 0 || *end != '\0' || v <= 0 || v > 65535)
        return -1;
    pthread_mutex_lock(&st->lock);
    idx = do_cluster_node(st, host, (int)v);
    pthread_mutex_unlock(&st->lock);
    return idx;
}

/* ---- per-thread node connections ---- */

void redis_cluster_conn_drop(struct redis_conn *cn)
{
    if (cn->cnodes == NULL)
        return;
    for (int i = 0; i < REDIS_BE_CLUSTER_NODES_MAX; i++)
        if (cn->cnodes[i].ctx != NULL)
            redisFree(cn->cnodes[i].ctx);
    free(cn->cnodes);
    cn->cnodes = NULL;
    cn->ctx = NULL;
}

/* Make node idx this call's: open its context if needed. 0, or -1. */
static int cluster_use(struct redis_be *be, struct redis_conn *cn, int idx)
{
    struct cluster_state *st = be->cluster;
    struct redis_cnode *nd;
    char host[256], err[256];
    int port;

    if (cn->cnodes == NULL) {
        cn->cnodes = calloc(REDIS_BE_CLUSTER_NODES_MAX, sizeof(*cn->cnodes));
        if (cn->cnodes == NULL)
            return -1;
    }
    nd = &cn->cnodes[idx];
    cn->node = idx;
    if (nd->ctx == NULL) {
        pthread_mutex_lock(&st->lock);
        snprintf(host, sizeof(host), "%s", st->nodes[idx].host);
        port = st->nodes[idx].port;
        pthread_mutex_unlock(&st->lock);
        nd->ctx = redis_node_open(be, host, port, &cn->scripts, &nd->offset_ms,
                                  err, sizeof(err));
        if (nd->ctx == NULL) {
            cn->ctx = NULL;
            redis_cluster_fail(be, cn, err);
            return -1;
        }
    }
    cn->ctx = nd->ctx;
    cn->offset_ms = nd->offset_ms;
    return 0;
}

int redis_cluster_ready(struct redis_be *be, struct redis_conn *cn)
{
    int idx = cluster_node_of(be, cn->slot);

    if (idx < 0) {
        redis_mark(be, 0, "no node serves the slot (cluster down?)");
        return -1;
    }
    if ((cn->cnodes == NULL || cn->cnodes[idx].ctx == NULL) &&
        !threadconn_may_try(&be->conns, &cn->tc))
        return -1;
    return cluster_use(be, cn, idx);
}

void redis_cluster_fail(struct redis_be *be,
                        struct redis_conn *cn,
                        const char *why)
{
    struct cluster_state *st = be->cluster;
    char detail[512];

    /* be->host names the first seed only: say which node failed */
    pthread_mutex_lock(&st->lock);
    snprintf(detail, sizeof(detail), "node %s:%d: %s", st->nodes[cn->node].host,
             st->nodes[cn->node].port, why);
    pthread_mutex_unlock(&st->lock);
    if (cn->cnodes != NULL && cn->cnodes[cn->node].ctx != NULL) {
        redisFree(cn->cnodes[cn->node].ctx);
        cn->cnodes[cn->node].ctx = NULL;
    }
    cn->ctx = NULL;
    pthread_mutex_lock(&st->lock);
    st->stale = true; /* a failover moves slots: read them again */
    pthread_mutex_unlock(&st->lock);
    threadconn_failed(&be->conns, &cn->tc);
    redis_mark(be, 0, detail);
}

redisContext *
redis_cluster_dial_any(struct redis_be *be, char *err, size_t errlen)
{
    struct cluster_state *st = be->cluster;
    char host[256];
    int n, start, port;
    redisContext *c;

    pthread_mutex_lock(&st->lock);
    n = st->nnodes;
    pthread_mutex_unlock(&st->lock);
    start = (int)(atomic_fetch_add(&st->next_any, 1) % (unsigned)n);
    for (int k = 0; k < n; k++) {
        pthread_mutex_lock(&st->lock);
        snprintf(host, sizeof(host), "%s", st->nodes[(start + k) % n].host);
        port = st->nodes[(start + k) % n].port;
        pthread_mutex_unlock(&st->lock);
        c = redis_dial_to(be, host, port, err, errlen);
        if (c != NULL)
            return c;
    }
    return NULL;
}

/* ---- one command, redirected ---- */

/* Send argv on node cn->node, after ASKING when asking, and WAIT after
 * it when acks (min_replicas: WAIT's answer into *acks, -1 if none): the
 * reply, or NULL on a broken context (errno in *saved). */
static redisReply *cluster_send(struct redis_be *be,
                                struct redis_conn *cn,
                                bool asking,
                                int argc,
                                const char **argv,
                                const size_t *lens,
                                long long *acks,
                                int *saved)
{
    redisReply *r = NULL;

    errno = 0;
    if (asking) {
        if (redisAppendCommand(cn->ctx, "ASKING") != REDIS_OK ||
            redisGetReply(cn->ctx, (void **)&r) != REDIS_OK) {
            *saved = errno;
            return NULL;
        }
        freeReplyObject(r); /* +OK */
        r = NULL;
    }
    if (acks != NULL)
        r = redis_replicas_command(be, cn->ctx, argc, argv, lens, acks);
    else
        r = redisCommandArgv(cn->ctx, argc, argv, lens);
    *saved = errno;
    if (r != NULL && cn->ctx->err != 0) {
        freeReplyObject(r);
        r = NULL;
    }
    return r;
}

/* What to do with an error reply: 0 answer it, 1 send again (to *node,
 * with *asking), -1 give up (answered NULL). */
static int cluster_on_error(struct redis_be *be,
                            const redisReply *r,
                            int64_t end_ms,
                            int *node,
                            bool *asking)
{
    int slot, idx;

    if (strncmp(r->str, "MOVED ", 6) == 0) {
        idx = cluster_redirect(be, r->str, &slot);
        if (idx < 0)
            return 0;
        pthread_mutex_lock(&be->cluster->lock);
        be->cluster->slots[slot] = (int16_t)idx;
        pthread_mutex_unlock(&be->cluster->lock);
        (void)cluster_refresh(be, false); /* other slots may have moved */
        *node = idx;
        *asking = false;
        return 1;
    }
    if (strncmp(r->str, "ASK ", 4) == 0) {
        idx = cluster_redirect(be, r->str, &slot);
        if (idx < 0)
            return 0;
        *node = idx;
        *asking = true;
        return 1;
    }
    if (strncmp(r->str, "TRYAGAIN", 8) == 0 &&
        clock_mono_ms() + CLUSTER_TRYAGAIN_MS < end_ms) {
        struct timespec ts = { 0, CLUSTER_TRYAGAIN_MS * 1000000L };
        nanosleep(&ts, NULL);
        return 1;
    }
    if (strncmp(r->str, "CLUSTERDOWN", 11) == 0)
        redis_mark(be, 0, r->str);
    return 0;
}

redisReply *redis_cluster_command(struct redis_be *be,
                                  struct redis_conn *cn,
                                  int argc,
                                  const char **argv,
                                  const size_t *lens,
                                  long long *acks)
{
    int64_t end_ms = clock_mono_ms() + be->cmd_ms;
    int node = -1, saved, redirects = 0;
    bool asking = false, retried = false;
    redisReply *r;

    for (;;) {
        if (node < 0) {
            if (redis_cluster_ready(be, cn) != 0)
                return NULL;
        } else if (cluster_use(be, cn, node) != 0) {
            return NULL;
        }
        node = cn->node;
        r = cluster_send(be, cn, asking, argc, argv, lens, acks, &saved);
        if (r == NULL) {
            /* closed by the peer (a restart, an idle timeout): reopen at
             * once, send once more; else the node is down */
            if (!retried && (cn->ctx->err == REDIS_ERR_EOF ||
                             (cn->ctx->err == REDIS_ERR_IO &&
                              (saved == ECONNRESET || saved == EPIPE)))) {
                retried = true;
                redisFree(cn->cnodes[node].ctx);
                cn->cnodes[node].ctx = NULL;
                cn->ctx = NULL;
                continue;
            }
            redis_cluster_fail(be, cn,
                               cn->ctx->errstr[0] != '\0' ? cn->ctx->errstr
                                                          : "I/O error");
            return NULL;
        }
        if (r->type == REDIS_REPLY_ERROR && redirects < CLUSTER_REDIRECTS) {
            int next = node;
            int act = cluster_on_error(be, r, end_ms, &next, &asking);
            if (act == 1) {
                if (next != node || asking)
                    redirects++;
                freeReplyObject(r);
                node = next;
                continue;
            }
        }
        if (r->type != REDIS_REPLY_ERROR ||
            strncmp(r->str, "CLUSTERDOWN", 11) != 0) {
            cn->tc.backoff_ms = 0;
            cn->cnodes[node].offset_ms = cn->offset_ms;
            redis_mark(be, 1, NULL);
        }
        return r;
    }
}

/* ---- multi-key requests ---- */

bool redis_cluster_same_slot(const char *const *keys,
                             const size_t *lens,
                             size_t n)
{
    char h[17];
    int slot;

    if (n == 0)
        return true;
    redis_cluster_hash(keys[0], lens[0], h);
    slot = redis_cluster_keyslot(h, 16);
    for (size_t i = 1; i < n; i++) {
        redis_cluster_hash(keys[i], lens[i], h);
        if (redis_cluster_keyslot(h, 16) != slot)
            return false;
    }
    return true;
}
