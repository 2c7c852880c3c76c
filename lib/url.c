/*
 * lib/url.c - store URLs split into their parts, and host[:port].
 */
#include "lib/url.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/secret.h"
#include "lib/text.h"

/* Percent-decode s[0..n) into a new string; NULL on bad escapes or %00. */
static char *url_decode(const char *s, size_t n)
{
    size_t len;
    bool bad;
    char *out = text_percent_decode(s, n, &len, &bad);

    if (out != NULL && strlen(out) != len) {
        free(out);
        return NULL;
    }
    return out;
}

void url_cleanup(struct url *u)
{
    free(u->scheme);
    free(u->user);
    if (u->password != NULL) /* none left behind in freed memory */
        explicit_bzero(u->password, strlen(u->password));
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

static int parse_query(const char *q, struct url *u)
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

int url_parse(const char *url, struct url *u)
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
    if (q != NULL && parse_query(q + 1, u) != 0)
        goto fail;
    return 0;
fail:
    url_cleanup(u);
    return -1;
}

const char *url_param(const struct url *u, const char *name)
{
    for (size_t i = 0; i < u->nparams; i++)
        if (strcmp(u->names[i], name) == 0)
            return u->values[i];
    return NULL;
}

int url_check_params(const struct url *u,
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

int url_hostport(const char *s, char **host, unsigned *port, unsigned flags)
{
    const char *h = s, *p = NULL;
    size_t hl;
    uint64_t v;

    if (s == NULL || s[0] == '\0' || strchr(s, ',') != NULL)
        return -1;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close == s + 1)
            return -1;
        if (close[1] == ':')
            p = close + 2;
        else if (close[1] != '\0')
            return -1;
        h = s + 1;
        hl = (size_t)(close - s - 1);
    } else {
        const char *colon = strchr(s, ':');
        if (colon != NULL && strchr(colon + 1, ':') == NULL) {
            p = colon + 1;
            hl = (size_t)(colon - s);
        } else if (colon != NULL && !(flags & URL_HOSTPORT_BARE_V6)) {
            return -1;
        } else {
            hl = strlen(s); /* a host, or a bare IPv6 address */
        }
        if (hl == 0)
            return -1;
    }
    if (p != NULL) {
        if (text_parse_u64(p, 1, 65535, &v) != 0)
            return -1;
    } else if (flags & URL_HOSTPORT_NEED_PORT) {
        return -1;
    }
    *host = strndup(h, hl);
    if (*host == NULL)
        return -2;
    if (p != NULL)
        *port = (unsigned)v;
    return 0;
}

int url_resolve_password(struct url *u,
                         const char *env_name,
                         char *err,
                         size_t errlen)
{
    const char *file = url_param(u, "password_file");
    const char *env = env_name != NULL ? getenv(env_name) : NULL;

    if (file != NULL) {
        if (u->password != NULL) {
            snprintf(err, errlen,
                     "the URL has a password and password_file: give one");
            return -1;
        }
        u->password = secret_file_line(file, err, errlen);
        return u->password != NULL ? 0 : -1;
    }
    if (u->password != NULL || env == NULL || env[0] == '\0')
        return 0;
    u->password = strdup(env);
    if (u->password == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

/* Append s[0..n) to out (room left *room, always NUL-terminated). */
static void put(char **out, size_t *room, const char *s, size_t n)
{
    if (*room <= 1)
        return;
    if (n > *room - 1)
        n = *room - 1;
    memcpy(*out, s, n);
    *out += n;
    *room -= n;
    **out = '\0';
}

/* The query part q (after '?'), each value of a name ending in
 * "password" replaced. */
static void redact_query(const char *q, char **out, size_t *room)
{
    static const char suffix[] = "password";
    const size_t sl = sizeof(suffix) - 1;

    while (*q != '\0') {
        size_t len = strcspn(q, "&");
        const char *eq = memchr(q, '=', len);
        size_t nlen = eq != NULL ? (size_t)(eq - q) : len;

        if (eq != NULL && nlen >= sl &&
            strncasecmp(q + nlen - sl, suffix, sl) == 0) {
            put(out, room, q, nlen + 1);
            put(out, room, "***", 3);
        } else {
            put(out, room, q, len);
        }
        q += len;
        if (*q == '&') {
            put(out, room, "&", 1);
            q++;
        }
    }
}

void url_redact(const char *url, char *out, size_t outlen)
{
    const char *sep = strstr(url, "://");
    const char *p = sep != NULL ? sep + 3 : url;
    /* up to the query, not the path: a password with a raw '/' (or a URL
     * without its "://") must not stop the search for its '@'. An '@' in
     * a path hides more than needed, never less. Nor at a '#': url_parse()
     * takes one as part of the password */
    size_t hostlen = strcspn(p, "?");
    const char *at = NULL, *colon = NULL, *rest = url, *q;
    size_t room = outlen;

    if (outlen == 0)
        return;
    out[0] = '\0';
    for (const char *c = p; c < p + hostlen; c++)
        if (*c == '@')
            at = c;
    if (at == NULL) /* a raw '?' or '#' in the password: its '@' is later */
        at = strrchr(p, '@');
    if (at != NULL)
        colon = memchr(p, ':', (size_t)(at - p));
    if (colon != NULL) {
        put(&out, &room, url, (size_t)(colon + 1 - url));
        put(&out, &room, "***", 3);
        rest = at;
    }
    q = strchr(rest, '?');
    if (q == NULL) {
        put(&out, &room, rest, strlen(rest));
        return;
    }
    put(&out, &room, rest, (size_t)(q + 1 - rest));
    redact_query(q + 1, &out, &room);
}
