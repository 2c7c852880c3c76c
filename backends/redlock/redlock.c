/*
 * backends/redlock/redlock.c - lock store on N independent Redis masters
 * (Redlock, SPEC-21): a grant holds when a majority of the nodes granted
 * it within its validity, and its fence, the greatest the granting nodes
 * gave, was written back to a majority before the answer. Every node is a
 * redis:// backend of its own (its scripts, layout and subscriber); this
 * file opens them from the URL, keeps the monitor running and answers
 * what needs no key (describe, nodes, ping). Waiting is per instance: the
 * nodes keep no place for a waiter (no BACKEND_CAP_QUEUE), and a shared
 * limit above 1 is refused (BACKEND_CAP_NO_SEMAPHORE: with 3 nodes and
 * limit 2, three holders could each sit on a majority).
 *
 * URL: redlock://[[user]:password@]h1:port,h2:port,h3:port[/db][?options]
 * with prefix, timeout_ms, connect_timeout_ms (passed to every node),
 * password_file=PATH (else LOCKD_BACKEND_PASSWORD, when the URL has no
 * password: every node's), drift_ms and trust_fsync=1 (redlock's own).
 */
#include "backends/redlock/redlock_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/text.h"
#include "lib/url.h"

/* ---- the URL ---- */

/* Append s percent-encoded (all but unreserved characters) to buf. */
static void redlock_enc(char *buf, size_t len, const char *s)
{
    size_t at = strlen(buf);

    for (; *s != '\0' && at + 4 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || strchr("-._~", c) != NULL)
            buf[at++] = (char)c;
        else
            at += (size_t)snprintf(buf + at, len - at, "%%%02X", c);
    }
    buf[at] = '\0';
}

/* Redlock's own options and the refused ones. */
static enum backend_result redlock_parse_own(const struct url *u,
                                             struct redlock_cfg *cfg,
                                             char *err,
                                             size_t errlen)
{
    static const char *const refused[] = { "min_replicas",
                                           "replicas_timeout_ms",
                                           "sentinel_password", NULL };
    static const char *const allowed[] = { "prefix",
                                           "timeout_ms",
                                           "connect_timeout_ms",
                                           "password_file",
                                           "drift_ms",
                                           "trust_fsync",
                                           NULL };
    const char *bad = NULL, *v;
    uint64_t n;

    for (size_t i = 0; refused[i] != NULL; i++)
        if (url_param(u, refused[i]) != NULL) {
            snprintf(err, errlen,
                     "redlock: %s is not offered: the nodes are independent "
                     "masters, each its own copy",
                     refused[i]);
            return BACKEND_INVALID;
        }
    if (url_check_params(u, allowed, &bad) != 0) {
        snprintf(err, errlen,
                 "redlock: unknown URL option '%s' (known: prefix, "
                 "timeout_ms, connect_timeout_ms, password_file, drift_ms, "
                 "trust_fsync)",
                 redis_url_piece(bad));
        return BACKEND_INVALID;
    }
    cfg->drift_ms = -1;
    v = url_param(u, "drift_ms");
    if (v != NULL) {
        if (text_parse_u64(v, 0, REDLOCK_DRIFT_MAX_MS, &n) != 0) {
            snprintf(err, errlen, "redlock: drift_ms must be 0..%d",
                     REDLOCK_DRIFT_MAX_MS);
            return BACKEND_INVALID;
        }
        cfg->drift_ms = (int64_t)n;
    }
    v = url_param(u, "trust_fsync");
    if (v != NULL && strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
        snprintf(err, errlen, "redlock: trust_fsync must be 0 or 1");
        return BACKEND_INVALID;
    }
    cfg->trust_fsync = v != NULL && strcmp(v, "1") == 0;
    v = url_param(u, "prefix");
    cfg->prefix = strdup(v != NULL ? v : REDIS_BE_DEFAULT_PREFIX);
    return cfg->prefix != NULL ? BACKEND_OK : BACKEND_NO_MEMORY;
}

/* One node's redis:// URL into cfg->urls[i]. */
static enum backend_result redlock_node_url(const struct url *u,
                                            struct redlock_cfg *cfg,
                                            size_t i,
                                            const char *host,
                                            unsigned port)
{
    static const char *const pass[] = { "timeout_ms", "connect_timeout_ms",
                                        NULL };
    char buf[REDLOCK_URL_MAX] = "redis://";
    size_t at;

    if (u->password != NULL) {
        redlock_enc(buf, sizeof(buf), u->user != NULL ? u->user : "");
        strcat(buf, ":");
        redlock_enc(buf, sizeof(buf), u->password);
        strcat(buf, "@");
    }
    at = strlen(buf);
    snprintf(buf + at, sizeof(buf) - at,
             strchr(host, ':') != NULL ? "[%s]:%u%s%s?prefix="
                                       : "%s:%u%s%s"
                                         "?prefix=",
             host, port, u->path != NULL ? "/" : "",
             u->path != NULL ? u->path : "");
    redlock_enc(buf, sizeof(buf), cfg->prefix);
    for (size_t k = 0; pass[k] != NULL; k++) {
        const char *v = url_param(u, pass[k]);
        if (v == NULL)
            continue;
        at = strlen(buf);
        snprintf(buf + at, sizeof(buf) - at, "&%s=", pass[k]);
        redlock_enc(buf, sizeof(buf), v);
    }
    /* redlock_enc() stops short of the end: a URL that came near it may
     * have lost part of its password */
    if (strlen(buf) + 4 >= sizeof(buf))
        return BACKEND_INVALID;
    cfg->urls[i] = strdup(buf);
    return cfg->urls[i] != NULL ? BACKEND_OK : BACKEND_NO_MEMORY;
}

/* The host list: names and URLs; N odd, 3..9, no repeats. */
static enum backend_result redlock_parse_hosts(const struct url *u,
                                               struct redlock_cfg *cfg,
                                               char *err,
                                               size_t errlen)
{
    char *copy = strdup(u->hosts != NULL ? u->hosts : ""), *p, *comma;
    enum backend_result res = BACKEND_OK;
    size_t n = 1;

    if (copy == NULL)
        return BACKEND_NO_MEMORY;
    for (p = strchr(copy, ','); p != NULL; p = strchr(p + 1, ','))
        n++;
    if (copy[0] == '\0')
        n = 0;
    if (n < REDLOCK_NODES_MIN || n > REDLOCK_NODES_MAX || n % 2 == 0) {
        snprintf(err, errlen,
                 "redlock: the URL names %zu node%s; it needs an odd number "
                 "from 3 to 9 (a majority of 2f+1 nodes survives f down)",
                 n, n == 1 ? "" : "s");
        free(copy);
        return BACKEND_INVALID;
    }
    for (p = copy; res == BACKEND_OK && p != NULL; p = comma) {
        unsigned port = REDIS_BE_DEFAULT_PORT;
        char *host = NULL;
        int rc;

        comma = strchr(p, ',');
        if (comma != NULL)
            *comma++ = '\0';
        rc = url_hostport(p, &host, &port, URL_HOSTPORT_BARE_V6);
        if (rc == -2)
            res = BACKEND_NO_MEMORY;
        else if (rc != 0 || host == NULL || host[0] == '\0') {
            snprintf(err, errlen, "redlock: bad node host or port '%s'",
                     redis_url_piece(p));
            res = BACKEND_INVALID;
        } else {
            snprintf(cfg->names[cfg->n], BACKEND_NODE_NAME,
                     strchr(host, ':') != NULL ? "[%s]:%u" : "%s:%u", host,
                     port);
            for (size_t k = 0; k < cfg->n; k++)
                if (strcmp(cfg->names[k], cfg->names[cfg->n]) == 0) {
                    snprintf(err, errlen, "redlock: node %s named twice",
                             cfg->names[k]);
                    res = BACKEND_INVALID;
                }
            if (res == BACKEND_OK) {
                res = redlock_node_url(u, cfg, cfg->n, host, port);
                if (res == BACKEND_INVALID)
                    snprintf(err, errlen,
                             "redlock: node %s: URL too long (the password?)",
                             cfg->names[cfg->n]);
            }
            if (res == BACKEND_OK)
                cfg->n++;
        }
        free(host);
    }
    free(copy);
    return res;
}

enum backend_result redlock_parse_url(const char *url,
                                      struct redlock_cfg *cfg,
                                      char *err,
                                      size_t errlen)
{
    struct url u;
    enum backend_result res;
    uint64_t db;
    char why[256];

    memset(cfg, 0, sizeof(*cfg));
    if (url_parse(url, &u) != 0) {
        snprintf(err, errlen, "redlock: malformed URL");
        return BACKEND_INVALID;
    }
    res = BACKEND_INVALID;
    if (strcmp(u.scheme, "redlock") != 0)
        snprintf(err, errlen, "redlock: the URL scheme is not redlock://");
    else if (url_resolve_password(&u, REDIS_BE_PASSWORD_ENV, why,
                                  sizeof(why)) != 0)
        snprintf(err, errlen, "redlock: %s", why);
    else if (u.user != NULL && u.password == NULL)
        snprintf(err, errlen,
                 "redlock: URL has a user but no password "
                 "(use redlock://:password@host,...)");
    else if (u.path != NULL && text_parse_u64(u.path, 0, 1 << 20, &db) != 0)
        snprintf(err, errlen,
                 "redlock: the URL path must be a database "
                 "number");
    else
        res = redlock_parse_own(&u, cfg, err, errlen);
    if (res == BACKEND_OK)
        res = redlock_parse_hosts(&u, cfg, err, errlen);
    if (res == BACKEND_NO_MEMORY)
        snprintf(err, errlen, "redlock: out of memory");
    url_cleanup(&u);
    if (res != BACKEND_OK)
        redlock_cfg_free(cfg);
    return res;
}

void redlock_cfg_free(struct redlock_cfg *cfg)
{
    for (size_t i = 0; i < REDLOCK_NODES_MAX; i++) {
        if (cfg->urls[i] != NULL) /* they hold the password */
            explicit_bzero(cfg->urls[i], strlen(cfg->urls[i]));
        free(cfg->urls[i]);
    }
    free(cfg->prefix);
    memset(cfg, 0, sizeof(*cfg));
}

/* ---- open, close ---- */

int64_t redlock_drift(const struct redlock_be *be, uint64_t ttl_ms)
{
    if (be->cfg.drift_ms >= 0)
        return be->cfg.drift_ms;
    return (int64_t)(ttl_ms / 100) + 2;
}

static void redlock_close(struct backend *b)
{
    struct redlock_be *be = (struct redlock_be *)b;

    if (be == NULL)
        return;
    redlock_monitor_stop(be); /* first: it uses the nodes */
    for (size_t i = 0; i < be->n; i++)
        redis_backend.close(&be->nodes[i]->base);
    pthread_cond_destroy(&be->cond);
    pthread_mutex_destroy(&be->lock);
    redlock_cfg_free(&be->cfg);
    free(be);
}

/* Open every node (a node that cannot be reached yet is no error). */
static enum backend_result
redlock_open_nodes(struct redlock_be *be, char *err, size_t errlen)
{
    for (size_t i = 0; i < be->cfg.n; i++) {
        struct backend *nb = NULL;
        char nerr[256] = "";
        enum backend_result r = redis_backend.open(be->cfg.urls[i], &be->hooks,
                                                   &nb, nerr, sizeof(nerr));
        if (r != BACKEND_OK) {
            snprintf(err, errlen, "redlock: node %s: %s", be->cfg.names[i],
                     nerr);
            return r;
        }
        be->nodes[i] = (struct redis_be *)nb;
        be->n++;
        redis_want_identity(be->nodes[i]);
        be->st[i].latency_us = -1;
    }
    be->quorum = be->n / 2 + 1;
    be->timeout_ms = be->nodes[0]->cmd_ms;
    be->connect_ms = be->nodes[0]->connect_ms;
    /* a call is the fan, the write-back and an undo, each up to a
     * node timeout, and a dial */
    be->base.call_timeout_ms = 3 * be->timeout_ms + be->connect_ms;
    return BACKEND_OK;
}

static enum backend_result redlock_open(const char *url,
                                        const struct backend_hooks *hooks,
                                        struct backend **out,
                                        char *err,
                                        size_t errlen)
{
    struct redlock_be *be = calloc(1, sizeof(*be));
    enum backend_result r;

    *out = NULL;
    if (be == NULL)
        return BACKEND_NO_MEMORY;
    be->base.ops = &redlock_backend;
    if (hooks != NULL)
        be->hooks = *hooks;
    be->max_ttl_ms = be->hooks.max_ttl_ms > 0 ? (int64_t)be->hooks.max_ttl_ms
                                              : REDLOCK_MAX_TTL_MS;
    atomic_init(&be->stopping, false);
    if (pthread_mutex_init(&be->lock, NULL) != 0) {
        free(be);
        return BACKEND_NO_MEMORY;
    }
    if (clock_cond_init(&be->cond) != 0) {
        pthread_mutex_destroy(&be->lock);
        free(be);
        return BACKEND_NO_MEMORY;
    }
    r = redlock_parse_url(url, &be->cfg, err, errlen);
    if (r == BACKEND_OK)
        r = redlock_open_nodes(be, err, errlen);
    if (r == BACKEND_OK) {
        /* the first pass before any call: who votes */
        redlock_check(be, be->connect_ms);
        if (redlock_monitor_start(be) != 0)
            r = BACKEND_NO_MEMORY;
    }
    if (r != BACKEND_OK) {
        redlock_close(&be->base);
        return r;
    }
    *out = &be->base;
    return BACKEND_OK;
}

/* ---- what needs no key ---- */

static enum backend_result redlock_ping(struct backend *b)
{
    struct redlock_be *be = (struct redlock_be *)b;
    struct redis_fan f[REDLOCK_NODES_MAX];
    bool voting[REDLOCK_NODES_MAX];
    const char *argv[1] = { "PING" };
    size_t lens[1] = { 4 }, ok = 0;

    struct redis_be *ask[REDLOCK_NODES_MAX];
    struct redis_fan g[REDLOCK_NODES_MAX];
    size_t idx[REDLOCK_NODES_MAX], m = 0;

    /* a real round trip, as on every store: the monitor's view may be a
     * pass old, and readiness must not outlive a store that stopped. The
     * nodes the monitor found silent are left out (a probe must not wait
     * for them), unless the others cannot make a quorum */
    pthread_mutex_lock(&be->lock);
    for (size_t i = 0; i < be->n; i++)
        if (be->st[i].up)
            idx[m++] = i;
    pthread_mutex_unlock(&be->lock);
    if (m < be->quorum)
        for (m = 0; m < be->n; m++)
            idx[m] = m;
    for (size_t k = 0; k < m; k++)
        ask[k] = be->nodes[idx[k]];
    redis_fan_command(ask, m, 1, argv, lens,
                      clock_mono_us() + be->timeout_ms * 1000, g);
    memset(f, 0, sizeof(f));
    for (size_t k = 0; k < m; k++)
        f[idx[k]] = g[k];
    redlock_voting(be, f, voting, NULL);
    for (size_t i = 0; i < be->n; i++)
        ok += voting[i] && f[i].reply != NULL &&
              f[i].reply->type == REDIS_REPLY_STATUS;
    redis_fan_clear(f, be->n);
    return ok >= be->quorum ? BACKEND_OK : BACKEND_UNAVAILABLE;
}

static void redlock_describe(const struct backend *b,
                             struct backend_topology *out)
{
    const struct redlock_be *be = (const struct redlock_be *)b;

    snprintf(out->topology, sizeof(out->topology), "redlock");
    snprintf(
        out->fence, sizeof(out->fence),
        "counters per key slot on a majority, written back before the grant, "
        "floored by the nodes' clocks (s)");
    snprintf(out->failover, sizeof(out->failover),
             "survives the loss of any %zu of %zu nodes; a node that "
             "restarted without its data is not counted for the max TTL",
             be->n / 2, be->n);
    out->nodes = (unsigned)be->n;
}

static size_t redlock_nodes(const struct backend *b,
                            struct backend_node *out,
                            size_t max,
                            unsigned *quorum)
{
    /* nodes() reads the state under its mutex: not const in C's sense */
    struct redlock_be *be = (struct redlock_be *)(uintptr_t)b;
    int64_t now = clock_mono_ms();
    size_t n = be->n < max ? be->n : max;

    *quorum = (unsigned)be->quorum;
    pthread_mutex_lock(&be->lock);
    for (size_t i = 0; i < n; i++) {
        const struct redlock_nstate *st = &be->st[i];
        snprintf(out[i].name, sizeof(out[i].name), "%s", be->cfg.names[i]);
        out[i].up = st->up;
        out[i].voting = st->state == REDLOCK_VOTING;
        out[i].quarantined = st->state == REDLOCK_QUARANTINED;
        out[i].quarantine_ms = out[i].quarantined && st->quarantine_until > now
                                   ? st->quarantine_until - now
                                   : 0;
        out[i].latency_us = st->latency_us;
    }
    pthread_mutex_unlock(&be->lock);
    return be->n;
}

const struct backend_ops redlock_backend = {
    .scheme = "redlock",
    .caps = BACKEND_CAP_NO_SEMAPHORE,
    .open = redlock_open,
    .acquire = redlock_acquire,
    .renew = redlock_renew,
    .release = redlock_release,
    .inspect = redlock_inspect,
    .cancel_wait = NULL,
    .acquire_multi = redlock_acquire_multi,
    .renew_multi = redlock_renew_multi,
    .release_multi = redlock_release_multi,
    .list = redlock_list,
    .force_release = redlock_force_release,
    .ping = redlock_ping,
    .held_count = redlock_held_count,
    .close = redlock_close,
    .describe = redlock_describe,
    .nodes = redlock_nodes,
};
