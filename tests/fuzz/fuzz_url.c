/*
 * tests/fuzz/fuzz_url.c - a store URL as an operator writes it (flag,
 * environment, Helm value): url_parse() and url_param(), url_redact()
 * (the URL's password must never survive it), url_hostport() on the
 * hosts, and each adapter's parser that runs without connecting:
 * redis_parse_url() (redis://, redis+sentinel://, redis+cluster://),
 * redlock_parse_url(), mysql_url_parse() and zookeeper's chroot rule
 * (zk_parse_chroot()); zookeeper's option checks are static in
 * zookeeper.c and run only on the way to a connection, so they are not
 * reached here. The input is one URL, cut at its first NUL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/mysql/mysql_int.h"
#include "backends/redis/redis_int.h"
#include "backends/redlock/redlock_int.h"
#include "backends/zookeeper/zk.h"
#include "lib/url.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* the password of a URL that names none comes from here otherwise */
    unsetenv("LOCKD_BACKEND_PASSWORD");
    return 0;
}

/* How often needle occurs in hay. */
static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;

    for (const char *p = strstr(hay, needle); p != NULL;
         p = strstr(p + 1, needle))
        n++;
    return n;
}

/* The user info's password as written in url (percent escapes kept),
 * found the way url_parse() finds it, into raw (rawlen bytes); 0 when
 * there is one. */
static int raw_password(const char *url, char *raw, size_t rawlen)
{
    const char *p = strstr(url, "://"), *end, *at = NULL, *colon;

    if (p == NULL)
        return -1;
    p += 3;
    end = p + strcspn(p, "/?");
    for (const char *c = p; c < end; c++)
        if (*c == '@')
            at = c;
    colon = at != NULL ? memchr(p, ':', (size_t)(at - p)) : NULL;
    if (colon == NULL || (size_t)(at - colon - 1) >= rawlen)
        return -1;
    memcpy(raw, colon + 1, (size_t)(at - colon - 1));
    raw[at - colon - 1] = '\0';
    return 0;
}

/* The user info's password, when it is long enough and written only once
 * in the URL, must not appear in the redacted text. */
static void check_redacted(const char *url, const struct url *u)
{
    char out[4096], raw[4096];

    url_redact(url, out, sizeof(out));
    if (memchr(out, '\0', sizeof(out)) == NULL)
        abort();
    if (u->password == NULL || strlen(url) >= sizeof(out) ||
        raw_password(url, raw, sizeof(raw)) != 0 || strlen(raw) < 6 ||
        strchr(raw, '*') != NULL || count_of(url, raw) != 1)
        return;
    if (strstr(out, raw) != NULL)
        abort(); /* a password left in a log line */
}

static void check_hosts(const char *hosts)
{
    char *copy = strdup(hosts), *parts[16];
    size_t n;

    if (copy == NULL)
        abort();
    n = fuzz_split(copy, ',', parts, 16);
    for (size_t i = 0; i < n; i++)
        for (unsigned flags = 0; flags < 4; flags++) {
            char *host = NULL;
            unsigned port = 0;
            int rc = url_hostport(parts[i], &host, &port, flags);
            if (rc == 0 && (host == NULL || port > 65535))
                abort();
            free(host);
        }
    free(copy);
}

static void parse_adapters(const char *url, const struct url *u)
{
    char err[512];
    struct redis_be *rb = calloc(1, sizeof(*rb));
    struct mysql_be *mb = calloc(1, sizeof(*mb));
    struct redlock_cfg cfg;
    char *chroot = NULL;

    if (rb == NULL || mb == NULL)
        abort();
    redis_parse_url(rb, url, err, sizeof(err));
    redis_sentinel_free(rb); /* no thread started: just the state */
    redis_url_free(rb);
    free(rb);
    memset(&cfg, 0, sizeof(cfg));
    if (redlock_parse_url(url, &cfg, err, sizeof(err)) == BACKEND_OK)
        redlock_cfg_free(&cfg);
    mb->base.ops = &mysql_backend; /* its close() frees what parse set */
    mysql_url_parse(mb, url, err, sizeof(err));
    mysql_backend.close(&mb->base);
    if (u != NULL && u->path != NULL && zk_parse_chroot(u->path, &chroot) == 0)
        free(chroot);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *url = fuzz_strdup(data, size);
    struct url u;
    int parsed;

    if (fuzz_names_device(url, strlen(url))) { /* ?password_file= */
        free(url);
        return 0;
    }
    parsed = url_parse(url, &u) == 0;
    if (parsed) {
        for (size_t i = 0; i < u.nparams; i++)
            if (url_param(&u, u.names[i]) == NULL)
                abort();
        check_redacted(url, &u);
        if (u.hosts != NULL)
            check_hosts(u.hosts);
    } else {
        char out[256];
        url_redact(url, out, sizeof(out)); /* malformed URLs too */
    }
    parse_adapters(url, parsed ? &u : NULL);
    if (parsed)
        url_cleanup(&u);
    free(url);
    return 0;
}
