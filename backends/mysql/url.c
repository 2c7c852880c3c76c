/*
 * backends/mysql/url.c - the MySQL adapter's backend URL,
 *
 *     mysql://user[:password]@host[:port]/database[?options]
 *     mysql://user[:password]@/database?socket=PATH[&options]
 *
 * options: socket, connect_timeout_ms, read_timeout_ms, write_timeout_ms
 * (1..3600000 ms, rounded up to whole seconds for Connector/C) and table
 * (the tables' name prefix). Every problem is reported in open()'s error
 * buffer as one "mysql: ..." sentence, for lockd to print before it exits;
 * nothing here logs. Apart from mysql.c so that the rules of the URL read
 * in one place.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/mysql/mysql_int.h"
#include "lib/text.h"
#include "lib/url.h"

static bool mysql_url_table_ok(const char *t)
{
    size_t n = strlen(t);

    if (n == 0 || n > MYSQL_BE_TABLE_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = t[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || ch == '_'))
            return false;
    }
    return true;
}

static char *mysql_url_dup(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

/* Millisecond option name into whole seconds (Connector/C's unit),
 * rounded up. 0, or -1 with the reason in errbuf. */
static int mysql_url_timeout(const struct url *u,
                             const char *name,
                             uint64_t def_ms,
                             unsigned *out_s,
                             char *errbuf,
                             size_t errlen)
{
    const char *v = url_param(u, name);
    uint64_t ms = def_ms;

    if (v != NULL && text_parse_u64(v, 1, MYSQL_BE_TIMEOUT_MAX_MS, &ms) != 0) {
        snprintf(errbuf, errlen, "mysql: %s must be 1..%d ms", name,
                 MYSQL_BE_TIMEOUT_MAX_MS);
        return -1;
    }
    *out_s = (unsigned)((ms + 999) / 1000);
    return 0;
}

/* The URL's shape: scheme, known options, a user and a database. */
static enum backend_result
mysql_url_shape(const struct url *u, char *errbuf, size_t errlen)
{
    static const char *const allowed[] = {
        "socket",          "connect_timeout_ms",
        "read_timeout_ms", "write_timeout_ms",
        "table",           NULL,
    };
    const char *bad = NULL;

    if (strcmp(u->scheme, "mysql") != 0) {
        snprintf(errbuf, errlen, "mysql: not a mysql:// URL");
        return BACKEND_INVALID;
    }
    if (url_check_params(u, allowed, &bad) != 0) {
        snprintf(errbuf, errlen,
                 "mysql: unknown URL option '%s' (known: socket, "
                 "connect_timeout_ms, read_timeout_ms, write_timeout_ms, "
                 "table)",
                 bad);
        return BACKEND_INVALID;
    }
    if (u->user == NULL || u->user[0] == '\0') {
        snprintf(errbuf, errlen,
                 "mysql: the URL needs a user: mysql://user[:password]@host"
                 "[:port]/database");
        return BACKEND_INVALID;
    }
    if (u->path == NULL || u->path[0] == '\0' || strchr(u->path, '/') != NULL) {
        snprintf(errbuf, errlen,
                 "mysql: the URL needs a database: mysql://user@host/"
                 "database");
        return BACKEND_INVALID;
    }
    return BACKEND_OK;
}

/* Where the server is: ?socket=PATH, or host[:port] ("[v6addr][:port]"). */
static enum backend_result mysql_url_where(struct mysql_be *be,
                                           const struct url *u,
                                           char *errbuf,
                                           size_t errlen)
{
    const char *sock = url_param(u, "socket");
    int rc;

    be->port = MYSQL_BE_DEFAULT_PORT;
    if (sock != NULL && sock[0] == '\0') {
        snprintf(errbuf, errlen, "mysql: socket= needs a path");
        return BACKEND_INVALID;
    }
    be->socket = mysql_url_dup(sock);
    if (sock != NULL && be->socket == NULL)
        return BACKEND_NO_MEMORY;
    if (u->hosts[0] == '\0') {
        if (be->socket != NULL)
            return BACKEND_OK;
        snprintf(errbuf, errlen,
                 "mysql: the URL needs a host (or ?socket=PATH)");
        return BACKEND_INVALID;
    }
    rc = url_hostport(u->hosts, &be->host, &be->port, 0);
    if (rc == -2)
        return BACKEND_NO_MEMORY;
    if (rc != 0) {
        snprintf(errbuf, errlen,
                 "mysql: bad host in the URL: '%s' (want host[:port] or "
                 "[v6addr][:port])",
                 u->hosts);
        return BACKEND_INVALID;
    }
    return BACKEND_OK;
}

/* table= and the timeouts, with their defaults. */
static enum backend_result mysql_url_options(struct mysql_be *be,
                                             const struct url *u,
                                             char *errbuf,
                                             size_t errlen)
{
    const char *v = url_param(u, "table");

    if (v != NULL && !mysql_url_table_ok(v)) {
        snprintf(errbuf, errlen,
                 "mysql: table= must be 1..%d letters, digits or '_'",
                 MYSQL_BE_TABLE_MAX);
        return BACKEND_INVALID;
    }
    be->table = strdup(v != NULL ? v : MYSQL_BE_DEFAULT_TABLE);
    if (be->table == NULL)
        return BACKEND_NO_MEMORY;
    if (mysql_url_timeout(u, "connect_timeout_ms", MYSQL_BE_CONNECT_TIMEOUT_MS,
                          &be->connect_timeout_s, errbuf, errlen) != 0 ||
        mysql_url_timeout(u, "read_timeout_ms", MYSQL_BE_RW_TIMEOUT_MS,
                          &be->read_timeout_s, errbuf, errlen) != 0 ||
        mysql_url_timeout(u, "write_timeout_ms", MYSQL_BE_RW_TIMEOUT_MS,
                          &be->write_timeout_s, errbuf, errlen) != 0)
        return BACKEND_INVALID;
    be->base.call_timeout_ms =
        (int64_t)(be->read_timeout_s > be->write_timeout_s
                      ? be->read_timeout_s
                      : be->write_timeout_s) *
        1000;
    return BACKEND_OK;
}

enum backend_result mysql_url_parse(struct mysql_be *be,
                                    const char *url,
                                    char *errbuf,
                                    size_t errlen)
{
    struct url u;
    enum backend_result r;

    if (url_parse(url, &u) != 0) {
        snprintf(errbuf, errlen, "mysql: malformed backend URL");
        return BACKEND_INVALID;
    }
    r = mysql_url_shape(&u, errbuf, errlen);
    if (r == BACKEND_OK)
        r = mysql_url_where(be, &u, errbuf, errlen);
    if (r == BACKEND_OK)
        r = mysql_url_options(be, &u, errbuf, errlen);
    if (r == BACKEND_OK) {
        be->user = strdup(u.user);
        be->password = mysql_url_dup(u.password);
        be->database = strdup(u.path);
        if (be->user == NULL || be->database == NULL ||
            (u.password != NULL && be->password == NULL))
            r = BACKEND_NO_MEMORY;
    }
    if (u.password != NULL)
        explicit_bzero(u.password, strlen(u.password));
    url_cleanup(&u);
    return r;
}
