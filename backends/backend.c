/*
 * backends/backend.c - the scheme table, the timed and counted wrappers
 * around every backend operation, and small helpers the adapters share
 * (clocks, constant-time token comparison, URL parsing).
 */
#include "backends/backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "service/metrics.h"

extern const struct backend_ops mem_be_ops;
#ifdef LOCKD_WITH_REDIS
extern const struct backend_ops redis_be_ops;
#endif
#ifdef LOCKD_WITH_ZOOKEEPER
extern const struct backend_ops zk_be_ops;
#endif
#ifdef LOCKD_WITH_MYSQL
extern const struct backend_ops mysql_be_ops;
#endif

static const struct backend_ops *const backend_table[] = {
    &mem_be_ops,
#ifdef LOCKD_WITH_REDIS
    &redis_be_ops,
#endif
#ifdef LOCKD_WITH_ZOOKEEPER
    &zk_be_ops,
#endif
#ifdef LOCKD_WITH_MYSQL
    &mysql_be_ops,
#endif
    NULL,
};

const char *backend_result_str(enum backend_result r)
{
    switch (r) {
    case BACKEND_OK:
        return "ok";
    case BACKEND_HELD:
        return "held";
    case BACKEND_NOT_FOUND:
        return "not found";
    case BACKEND_MISMATCH:
        return "token mismatch";
    case BACKEND_UNAVAILABLE:
        return "backend unavailable";
    case BACKEND_NO_MEMORY:
        return "out of memory";
    case BACKEND_INVALID:
        return "invalid backend URL";
    }
    return "unknown";
}

const char *backend_schemes(void)
{
    return "memory"
#ifdef LOCKD_WITH_REDIS
           ", redis"
#endif
#ifdef LOCKD_WITH_ZOOKEEPER
           ", zookeeper"
#endif
#ifdef LOCKD_WITH_MYSQL
           ", mysql"
#endif
        ;
}

enum backend_result backend_open(const char *url,
                                 const struct backend_hooks *hooks,
                                 struct backend **out,
                                 char *err,
                                 size_t errlen)
{
    const char *sep = strstr(url, "://");
    size_t n;
    enum backend_result r;

    *out = NULL;
    if (sep == NULL) {
        snprintf(err, errlen, "backend URL '%s' has no scheme:// part", url);
        return BACKEND_INVALID;
    }
    n = (size_t)(sep - url);
    for (size_t i = 0; backend_table[i] != NULL; i++) {
        const struct backend_ops *ops = backend_table[i];
        if (strlen(ops->scheme) != n || strncmp(ops->scheme, url, n) != 0)
            continue;
        r = ops->open(url, hooks, out);
        if (r != BACKEND_OK) {
            snprintf(err, errlen, "cannot open backend '%s': %s", url,
                     backend_result_str(r));
            *out = NULL;
        }
        return r;
    }
    snprintf(err, errlen, "unknown backend scheme in '%s' (built in: %s)", url,
             backend_schemes());
    return BACKEND_INVALID;
}

void backend_close(struct backend *be)
{
    if (be != NULL)
        be->ops->close(be);
}

const char *backend_scheme(const struct backend *be)
{
    return be->ops->scheme;
}

unsigned backend_caps(const struct backend *be)
{
    return be->ops->caps;
}

static int result_ok(enum backend_result r)
{
    return r != BACKEND_UNAVAILABLE && r != BACKEND_NO_MEMORY;
}

int64_t backend_mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

uint64_t backend_grant_left_ms(const struct lock_grant *g, int64_t now_us)
{
    int64_t left = g->valid_until_us - now_us;

    if (left <= 0)
        return 0;
    return left < 1500 ? 1 : (uint64_t)((left + 500) / 1000);
}

enum backend_result backend_acquire(struct backend *be,
                                    const struct lock_req *req,
                                    struct lock_grant *out)
{
    int64_t t0 = backend_mono_us();
    enum backend_result r;

    memset(out, 0, sizeof(*out));
    r = be->ops->acquire(be, req, out);
    if (r == BACKEND_OK) /* counted from the send: never more than is left */
        out->valid_until_us = t0 + (int64_t)out->ttl_ms * 1000;
    metrics_backend_op(METRICS_OP_ACQUIRE, result_ok(r),
                       backend_mono_us() - t0);
    if (r == BACKEND_OK)
        metrics_lock_granted();
    return r;
}

enum backend_result backend_renew(struct backend *be,
                                  const struct lock_req *req,
                                  struct lock_grant *out)
{
    int64_t t0 = backend_mono_us();
    enum backend_result r;

    memset(out, 0, sizeof(*out));
    r = be->ops->renew(be, req, out);
    if (r == BACKEND_OK)
        out->valid_until_us = t0 + (int64_t)out->ttl_ms * 1000;
    metrics_backend_op(METRICS_OP_RENEW, result_ok(r), backend_mono_us() - t0);
    if (r == BACKEND_OK)
        metrics_lock_renewed();
    return r;
}

enum backend_result backend_release(struct backend *be,
                                    const struct lock_req *req)
{
    int64_t t0 = backend_mono_us();
    enum backend_result r = be->ops->release(be, req);

    metrics_backend_op(METRICS_OP_RELEASE, result_ok(r),
                       backend_mono_us() - t0);
    if (r == BACKEND_OK)
        metrics_lock_released();
    return r;
}

enum backend_result backend_inspect(struct backend *be,
                                    const char *key,
                                    size_t key_len,
                                    struct lock_info *out)
{
    int64_t t0 = backend_mono_us();
    enum backend_result r;

    memset(out, 0, sizeof(*out));
    r = be->ops->inspect(be, key, key_len, out);
    metrics_backend_op(METRICS_OP_INSPECT, result_ok(r),
                       backend_mono_us() - t0);
    return r;
}

enum backend_result backend_cancel_wait(struct backend *be,
                                        const char *key,
                                        size_t key_len,
                                        struct lock_waiter *waiter)
{
    int64_t t0;
    enum backend_result r;

    if (be->ops->cancel_wait == NULL)
        return BACKEND_OK;
    t0 = backend_mono_us();
    r = be->ops->cancel_wait(be, key, key_len, waiter);
    metrics_backend_op(METRICS_OP_CANCEL_WAIT, result_ok(r),
                       backend_mono_us() - t0);
    return r;
}

enum backend_result backend_ping(struct backend *be)
{
    int64_t t0 = backend_mono_us();
    enum backend_result r = be->ops->ping(be);

    metrics_backend_op(METRICS_OP_PING, result_ok(r), backend_mono_us() - t0);
    return r;
}

int64_t backend_held_count(struct backend *be)
{
    if (be->ops->held_count == NULL)
        return -1;
    return be->ops->held_count(be);
}

int64_t backend_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t backend_mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool backend_token_eq(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    volatile unsigned char diff = (unsigned char)(la != lb);

    /* Walk the longer string's length either way so the time depends on
     * the lengths only, never on where the first difference is. */
    size_t n = la > lb ? la : lb;
    for (size_t i = 0; i < n; i++) {
        unsigned char ca = i < la ? (unsigned char)a[i] : 0;
        unsigned char cb = i < lb ? (unsigned char)b[i] : 0;
        diff |= (unsigned char)(ca ^ cb);
    }
    return diff == 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

char *
backend_percent_decode(const char *s, size_t n, size_t *out_len, bool *bad)
{
    char *out = malloc(n + 1);
    size_t j = 0;

    *bad = false;
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            out[j++] = s[i];
            continue;
        }
        int hi = i + 1 < n ? hexval(s[i + 1]) : -1;
        int lo = i + 2 < n ? hexval(s[i + 2]) : -1;
        if (hi < 0 || lo < 0) {
            free(out);
            *bad = true;
            return NULL;
        }
        out[j++] = (char)(hi * 16 + lo);
        i += 2;
    }
    out[j] = '\0';
    *out_len = j;
    return out;
}

/* Percent-decode s[0..n) into a new string; NULL on bad escapes or %00. */
static char *url_decode(const char *s, size_t n)
{
    size_t len;
    bool bad;
    char *out = backend_percent_decode(s, n, &len, &bad);

    if (out != NULL && strlen(out) != len) {
        free(out);
        return NULL;
    }
    return out;
}

void backend_url_cleanup(struct backend_url *u)
{
    free(u->scheme);
    free(u->user);
    free(u->password);
    free(u->hosts);
    free(u->path);
    for (size_t i = 0; i < u->nparams; i++) {
        free(u->names[i]);
        free(u->values[i]);
    }
    free(u->names);
    free(u->values);
    memset(u, 0, sizeof(*u));
}

static int url_parse_query(const char *q, struct backend_url *u)
{
    size_t cap = 0;

    while (*q != '\0') {
        size_t len = strcspn(q, "&");
        const char *eq = memchr(q, '=', len);
        size_t nlen = eq != NULL ? (size_t)(eq - q) : len;

        if (len > 0) {
            if (u->nparams == cap) {
                size_t ncap = cap == 0 ? 4 : cap * 2;
                char **nn = realloc(u->names, ncap * sizeof(*nn));
                if (nn == NULL)
                    return -1;
                u->names = nn;
                char **nv = realloc(u->values, ncap * sizeof(*nv));
                if (nv == NULL)
                    return -1;
                u->values = nv;
                cap = ncap;
            }
            u->names[u->nparams] = url_decode(q, nlen);
            u->values[u->nparams] = eq != NULL
                                        ? url_decode(eq + 1, len - nlen - 1)
                                        : url_decode("", 0);
            u->nparams++;
            if (u->names[u->nparams - 1] == NULL ||
                u->values[u->nparams - 1] == NULL)
                return -1;
        }
        q += len;
        if (*q == '&')
            q++;
    }
    return 0;
}

int backend_url_parse(const char *url, struct backend_url *u)
{
    const char *sep = strstr(url, "://");
    const char *p, *end, *at, *q, *slash;

    memset(u, 0, sizeof(*u));
    if (sep == NULL || sep == url)
        return -1;
    u->scheme = url_decode(url, (size_t)(sep - url));
    if (u->scheme == NULL)
        goto fail;
    p = sep + 3;
    q = strchr(p, '?');
    end = q != NULL ? q : p + strlen(p);
    slash = memchr(p, '/', (size_t)(end - p));
    /* user info ends at the last '@' before the path */
    at = NULL;
    for (const char *c = p; c < (slash != NULL ? slash : end); c++)
        if (*c == '@')
            at = c;
    if (at != NULL) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon != NULL) {
            u->user = url_decode(p, (size_t)(colon - p));
            u->password = url_decode(colon + 1, (size_t)(at - colon - 1));
            if (u->password == NULL)
                goto fail;
        } else {
            u->user = url_decode(p, (size_t)(at - p));
        }
        if (u->user == NULL)
            goto fail;
        p = at + 1;
    }
    u->hosts = url_decode(p, (size_t)((slash != NULL ? slash : end) - p));
    if (u->hosts == NULL)
        goto fail;
    if (slash != NULL && slash + 1 < end) {
        u->path = url_decode(slash + 1, (size_t)(end - slash - 1));
        if (u->path == NULL)
            goto fail;
    }
    if (q != NULL && url_parse_query(q + 1, u) != 0)
        goto fail;
    return 0;
fail:
    backend_url_cleanup(u);
    return -1;
}

const char *backend_url_param(const struct backend_url *u, const char *name)
{
    for (size_t i = 0; i < u->nparams; i++)
        if (strcmp(u->names[i], name) == 0)
            return u->values[i];
    return NULL;
}

int backend_url_check_params(const struct backend_url *u,
                             const char *const *allowed,
                             const char **bad)
{
    for (size_t i = 0; i < u->nparams; i++) {
        size_t k = 0;
        while (allowed[k] != NULL && strcmp(allowed[k], u->names[i]) != 0)
            k++;
        if (allowed[k] == NULL) {
            *bad = u->names[i];
            return -1;
        }
    }
    return 0;
}

int backend_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;

    if (s == NULL || *s == '\0')
        return -1;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (v < min || v > max)
        return -1;
    *out = v;
    return 0;
}
