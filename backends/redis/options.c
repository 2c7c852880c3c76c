/*
 * backends/redis/options.c - the Redis adapter's URLs:
 *   redis://[[user]:password@][host[:port]][/db][?options]
 *   redis+sentinel://[[user]:password@]s1:port,s2:port,.../master[/db][?...]
 *   redis+cluster://[[user]:password@]h1:port,h2:port,...[?options]
 * with the options prefix=P, connect_timeout_ms=N, timeout_ms=N,
 * min_replicas=N and replicas_timeout_ms=N (and those of each variant),
 * and password_file=PATH (with no password in the URL or its file: the
 * environment variable LOCKD_BACKEND_PASSWORD's), read into struct
 * redis_be once, by open(). The Sentinel and Cluster
 * variants' hosts and path are read by sentinel.c and cluster.c. Apart from the
 * operations because it is all checking and messages: each problem is told in
 * the caller's error buffer, starting "redis: ", naming a password's file
 * but never a password.
 */
#include "backends/redis/redis_int.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/text.h"
#include "lib/url.h"

const char *redis_url_piece(const char *s)
{
    /* a raw '/', '?' or '#' in a password ends the user info early: the
     * rest of it lands in the hosts or the query, where an '@' or a
     * leading ':' gives it away */
    if (s[0] == ':' || strchr(s, '@') != NULL)
        return "(hidden: it may hold a password; percent-encode a "
               "password's '/', '?' and '#', or use password_file)";
    return s;
}

/* host[:port], [v6][:port] or a bare v6 address; one primary only (a ','
 * is refused). Empty: the default host. */
static enum backend_result redis_parse_hosts(struct redis_be *be,
                                             const char *hosts,
                                             char *err,
                                             size_t errlen)
{
    unsigned port = REDIS_BE_DEFAULT_PORT;
    int rc;

    if (hosts == NULL || hosts[0] == '\0') {
        be->host = strdup(REDIS_BE_DEFAULT_HOST);
        be->port = REDIS_BE_DEFAULT_PORT;
        return be->host != NULL ? BACKEND_OK : BACKEND_NO_MEMORY;
    }
    rc = url_hostport(hosts, &be->host, &port, URL_HOSTPORT_BARE_V6);
    if (rc == -2)
        return BACKEND_NO_MEMORY;
    if (rc != 0) {
        snprintf(err, errlen, "redis: bad host or port in the URL");
        return BACKEND_INVALID;
    }
    be->port = (int)port;
    return BACKEND_OK;
}

enum backend_result redis_parse_auth(struct redis_be *be,
                                     const struct url *u,
                                     char *err,
                                     size_t errlen)
{
    if (u->user != NULL && u->password == NULL) {
        snprintf(err, errlen,
                 "redis: URL has a user but no password "
                 "(use %s://:password@host)",
                 u->scheme);
        return BACKEND_INVALID;
    }
    if (u->password == NULL)
        return BACKEND_OK;
    be->password = strdup(u->password);
    if (be->password == NULL)
        return BACKEND_NO_MEMORY;
    if (u->user != NULL && u->user[0] != '\0') {
        be->user = strdup(u->user);
        if (be->user == NULL)
            return BACKEND_NO_MEMORY;
    }
    return BACKEND_OK;
}

enum backend_result redis_parse_addrs(struct redis_be *be,
                                      const char *hosts,
                                      unsigned default_port,
                                      size_t max,
                                      const char *what,
                                      char *err,
                                      size_t errlen)
{
    size_t n = 1;
    char *copy, *p, *comma;
    enum backend_result res = BACKEND_OK;

    for (p = strchr(hosts, ','); p != NULL; p = strchr(p + 1, ','))
        n++;
    if (n > max) {
        snprintf(err, errlen, "redis: more than %zu %ss in the URL", max, what);
        return BACKEND_INVALID;
    }
    be->addrs = calloc(n, sizeof(*be->addrs));
    copy = strdup(hosts);
    if (be->addrs == NULL || copy == NULL) {
        free(copy);
        return BACKEND_NO_MEMORY;
    }
    for (p = copy; res == BACKEND_OK && p != NULL; p = comma) {
        unsigned port = default_port;
        char *host = NULL;
        int rc;

        comma = strchr(p, ',');
        if (comma != NULL)
            *comma++ = '\0';
        if (p[0] == '\0') {
            snprintf(err, errlen, "redis: empty %s address in the URL", what);
            res = BACKEND_INVALID;
            break;
        }
        rc = url_hostport(p, &host, &port, URL_HOSTPORT_BARE_V6);
        if (rc == -2)
            res = BACKEND_NO_MEMORY;
        else if (rc != 0 || host == NULL || host[0] == '\0') {
            free(host);
            snprintf(err, errlen, "redis: bad %s host or port '%s' in the URL",
                     what, redis_url_piece(p));
            res = BACKEND_INVALID;
        } else {
            be->addrs[be->naddrs].host = host;
            be->addrs[be->naddrs].port = (int)port;
            be->naddrs++;
        }
    }
    free(copy);
    return res;
}

/* [[user]:password@] and /db. */
static enum backend_result redis_parse_auth_db(struct redis_be *be,
                                               const struct url *u,
                                               char *err,
                                               size_t errlen)
{
    uint64_t n;
    enum backend_result res = redis_parse_auth(be, u, err, errlen);

    if (res != BACKEND_OK)
        return res;
    if (u->path != NULL) {
        if (text_parse_u64(u->path, 0, INT_MAX, &n) != 0) {
            snprintf(err, errlen,
                     "redis: the URL path must be a database number");
            return BACKEND_INVALID;
        }
        be->db = (unsigned)n;
    }
    return BACKEND_OK;
}

/* A timeout option name into *ms (left as it is when absent): 0, or -1. */
static int redis_parse_timeout(const struct url *u,
                               const char *name,
                               int64_t *ms,
                               char *err,
                               size_t errlen)
{
    const char *v = url_param(u, name);
    uint64_t n;

    if (v == NULL)
        return 0;
    if (text_parse_u64(v, 1, REDIS_BE_TIMEOUT_MAX_MS, &n) != 0) {
        snprintf(err, errlen, "redis: %s must be 1..%d", name,
                 REDIS_BE_TIMEOUT_MAX_MS);
        return -1;
    }
    *ms = (int64_t)n;
    return 0;
}

/* ?prefix=, the timeouts, and the release channel named after them. */
static enum backend_result redis_parse_options(struct redis_be *be,
                                               const struct url *u,
                                               char *err,
                                               size_t errlen)
{
    const char *v = url_param(u, "prefix");
    size_t len;

    if (v == NULL)
        v = REDIS_BE_DEFAULT_PREFIX;
    if (strlen(v) > REDIS_BE_PREFIX_MAX) {
        snprintf(err, errlen, "redis: prefix longer than %d bytes",
                 REDIS_BE_PREFIX_MAX);
        return BACKEND_INVALID;
    }
    be->prefix = strdup(v);
    if (be->prefix == NULL)
        return BACKEND_NO_MEMORY;
    be->prefix_len = strlen(be->prefix);
    be->connect_ms = REDIS_BE_CONNECT_TIMEOUT_MS;
    be->cmd_ms = REDIS_BE_TIMEOUT_MS;
    if (redis_parse_timeout(u, "connect_timeout_ms", &be->connect_ms, err,
                            errlen) != 0 ||
        redis_parse_timeout(u, "timeout_ms", &be->cmd_ms, err, errlen) != 0)
        return BACKEND_INVALID;
    be->base.call_timeout_ms = be->cmd_ms;
    v = url_param(u, "min_replicas");
    if (v != NULL) {
        uint64_t n;
        if (text_parse_u64(v, 0, REDIS_BE_REPLICAS_MAX, &n) != 0) {
            snprintf(err, errlen, "redis: min_replicas must be 0..%d",
                     REDIS_BE_REPLICAS_MAX);
            return BACKEND_INVALID;
        }
        be->min_replicas = (int)n;
    }
    be->replicas_timeout_ms = REDIS_BE_REPLICAS_TIMEOUT_MS;
    if (redis_parse_timeout(u, "replicas_timeout_ms", &be->replicas_timeout_ms,
                            err, errlen) != 0)
        return BACKEND_INVALID;
    len = be->prefix_len + 32;
    be->channel = malloc(len);
    if (be->channel == NULL)
        return BACKEND_NO_MEMORY;
    snprintf(be->channel, len, "%sreleased:%u", be->prefix, be->db);
    return BACKEND_OK;
}

/* The password of the URL, of its password_file or of the environment,
 * into u->password; the Sentinels' options refused on other topologies.
 * 0, or -1 with why in err (naming the file, never the password). */
static int redis_resolve_password(struct redis_be *be,
                                  struct url *u,
                                  char *err,
                                  size_t errlen)
{
    char why[256];

    if (be->topology != REDIS_BE_SENTINEL &&
        (url_param(u, "sentinel_password") != NULL ||
         url_param(u, "sentinel_password_file") != NULL)) {
        snprintf(err, errlen,
                 "redis: sentinel_password and sentinel_password_file are "
                 "for redis+sentinel:// only");
        return -1;
    }
    if (url_resolve_password(u, REDIS_BE_PASSWORD_ENV, why, sizeof(why)) == 0)
        return 0;
    snprintf(err, errlen, "redis: %s", why);
    return -1;
}

enum backend_result
redis_parse_url(struct redis_be *be, const char *url, char *err, size_t errlen)
{
    static const char *const allowed[] = {
        "prefix",
        "connect_timeout_ms",
        "timeout_ms",
        "min_replicas",
        "replicas_timeout_ms",
        "password_file",
        "sentinel_password",      /* redis+sentinel:// only (sentinel.c) */
        "sentinel_password_file", /* redis+sentinel:// only (sentinel.c) */
        NULL
    };
    struct url u;
    enum backend_result res = BACKEND_INVALID;
    const char *bad = NULL;

    if (url_parse(url, &u) != 0) {
        snprintf(err, errlen, "redis: malformed URL");
        return BACKEND_INVALID;
    }
    if (strcmp(u.scheme, "redis") == 0)
        be->topology = REDIS_BE_SINGLE;
    else if (strcmp(u.scheme, "redis+sentinel") == 0)
        be->topology = REDIS_BE_SENTINEL;
    else if (strcmp(u.scheme, "redis+cluster") == 0) {
        be->topology = REDIS_BE_CLUSTER;
        /* a release's PUBLISH crosses the cluster bus, which may drop it
         * while the subscriber's own link stays up: waiters keep polling */
        be->base.caps_off |= BACKEND_CAP_NOTIFIES;
    } else {
        snprintf(err, errlen,
                 "redis: the URL scheme is not redis://, redis+sentinel:// "
                 "or redis+cluster://");
        url_cleanup(&u);
        return BACKEND_INVALID;
    }
    if (url_check_params(&u, allowed, &bad) != 0)
        snprintf(err, errlen,
                 "redis: unknown URL option '%s' (known: prefix, "
                 "connect_timeout_ms, timeout_ms, min_replicas, "
                 "replicas_timeout_ms, password_file, sentinel_password, "
                 "sentinel_password_file)",
                 redis_url_piece(bad));
    else if (redis_resolve_password(be, &u, err, errlen) != 0)
        res = BACKEND_INVALID;
    else {
        switch (be->topology) {
        case REDIS_BE_SINGLE:
            res = redis_parse_hosts(be, u.hosts, err, errlen);
            if (res == BACKEND_OK)
                res = redis_parse_auth_db(be, &u, err, errlen);
            break;
        case REDIS_BE_SENTINEL:
            res = redis_sentinel_parse(be, &u, err, errlen);
            break;
        case REDIS_BE_CLUSTER:
            res = redis_cluster_parse(be, &u, err, errlen);
            break;
        }
        if (res == BACKEND_OK)
            res = redis_parse_options(be, &u, err, errlen);
        /* WAIT must answer before the command timeout, or a grant it
         * followed would be answered 503 and kept (issue 17) */
        if (res == BACKEND_OK && be->min_replicas > 0 &&
            be->replicas_timeout_ms >= be->cmd_ms) {
            snprintf(err, errlen,
                     "redis: replicas_timeout_ms must be below timeout_ms");
            res = BACKEND_INVALID;
        }
        /* a grant or renew is the script, then WAIT: the longest a call
         * can take, for the bound of the answer */
        if (res == BACKEND_OK && be->min_replicas > 0)
            be->base.call_timeout_ms = be->cmd_ms + be->replicas_timeout_ms;
    }
    if (res == BACKEND_NO_MEMORY)
        snprintf(err, errlen, "redis: out of memory");
    url_cleanup(&u);
    return res;
}

void redis_url_free(struct redis_be *be)
{
    redis_cluster_free(be->cluster);
    be->cluster = NULL;
    for (size_t i = 0; i < be->naddrs; i++)
        free(be->addrs[i].host);
    free(be->addrs);
    free(be->master_name);
    free(be->host);
    free(be->user);
    if (be->password != NULL) /* no copy left behind in freed memory */
        explicit_bzero(be->password, strlen(be->password));
    free(be->password);
    free(be->prefix);
    free(be->channel);
}
