/*
 * backends/mysql/url.c - the MySQL adapter's backend URL,
 *
 *     mysql://user[:password]@host[:port]/database[?options]
 *     mysql://user[:password]@/database?socket=PATH[&options]
 *
 * options: socket, connect_timeout_ms, read_timeout_ms, write_timeout_ms
 * (1..3600000 ms, rounded up to whole seconds for Connector/C), table
 * (the tables' name prefix), password_file (the password's file, else
 * LOCKD_BACKEND_PASSWORD when the URL names none), and TLS: ssl_mode
 * (disabled, the default, as Connector/C 3.3's own; preferred, required,
 * verify_ca, verify_identity), ssl_ca, ssl_cert and ssl_key (PEM files,
 * checked readable here). Every problem is reported in open()'s error
 * buffer as one "mysql: ..." sentence, for lockd to print before it exits;
 * nothing here logs. Apart from mysql.c so that the rules of the URL read
 * in one place.
 */
#include <errno.h>
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
    /* clang-format off */
    static const char *const allowed[] = {
        "socket",
        "connect_timeout_ms",
        "read_timeout_ms",
        "write_timeout_ms",
        "table",
        "password_file",
        "ssl_mode",
        "ssl_ca",
        "ssl_cert",
        "ssl_key",
        "compound",
        NULL,
    };
    /* clang-format on */
    const char *bad = NULL;

    if (strcmp(u->scheme, "mysql") != 0) {
        snprintf(errbuf, errlen, "mysql: not a mysql:// URL");
        return BACKEND_INVALID;
    }
    if (url_check_params(u, allowed, &bad) != 0) {
        snprintf(errbuf, errlen,
                 "mysql: unknown URL option '%s' (known: socket, "
                 "connect_timeout_ms, read_timeout_ms, write_timeout_ms, "
                 "table, password_file, ssl_mode, ssl_ca, ssl_cert, "
                 "ssl_key, compound)",
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

/* table=, compound= and the timeouts, with their defaults. */
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
    v = url_param(u, "compound");
    if (v != NULL && strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
        snprintf(errbuf, errlen, "mysql: compound must be 0 or 1");
        return BACKEND_INVALID;
    }
    be->compound = v == NULL || strcmp(v, "1") == 0;
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

static const char *const mysql_ssl_modes[] = {
    [MYSQL_SSL_DISABLED] = "disabled",
    [MYSQL_SSL_PREFERRED] = "preferred",
    [MYSQL_SSL_REQUIRED] = "required",
    [MYSQL_SSL_VERIFY_CA] = "verify_ca",
    [MYSQL_SSL_VERIFY_IDENTITY] = "verify_identity",
};

const char *mysql_ssl_mode_name(enum mysql_ssl_mode m)
{
    return mysql_ssl_modes[m];
}

/* The file option name into *out (owned; NULL when absent), checked
 * readable now so that a typo stops lockd at start rather than failing
 * every connect. */
static enum backend_result mysql_url_file(const struct url *u,
                                          const char *name,
                                          char **out,
                                          char *errbuf,
                                          size_t errlen)
{
    const char *v = url_param(u, name);
    FILE *f;

    *out = NULL;
    if (v == NULL)
        return BACKEND_OK;
    if (v[0] == '\0') {
        snprintf(errbuf, errlen, "mysql: %s= needs a path", name);
        return BACKEND_INVALID;
    }
    f = fopen(v, "r");
    if (f == NULL) {
        int e = errno;
        snprintf(errbuf, errlen, "mysql: %s=%s: cannot read it: %s", name, v,
                 strerror(e));
        return BACKEND_INVALID;
    }
    fclose(f);
    *out = strdup(v);
    return *out != NULL ? BACKEND_OK : BACKEND_NO_MEMORY;
}

/* ssl_mode and the options that go with it: which make sense together. */
static enum backend_result mysql_url_tls_mode(struct mysql_be *be,
                                              const struct url *u,
                                              char *errbuf,
                                              size_t errlen)
{
    const char *v = url_param(u, "ssl_mode");
    bool ca = url_param(u, "ssl_ca") != NULL;
    bool cert = url_param(u, "ssl_cert") != NULL;
    size_t i = 0, n = sizeof(mysql_ssl_modes) / sizeof(mysql_ssl_modes[0]);

    while (v != NULL && i < n && strcmp(v, mysql_ssl_modes[i]) != 0)
        i++;
    if (i == n) {
        snprintf(errbuf, errlen,
                 "mysql: ssl_mode must be disabled, preferred, required, "
                 "verify_ca or verify_identity");
        return BACKEND_INVALID;
    }
    be->ssl_mode = (enum mysql_ssl_mode)i; /* 0, disabled, when absent */
    if (cert != (url_param(u, "ssl_key") != NULL)) {
        snprintf(errbuf, errlen,
                 "mysql: ssl_cert= and ssl_key= go together (a client "
                 "certificate and its key)");
        return BACKEND_INVALID;
    }
    if (be->ssl_mode == MYSQL_SSL_DISABLED && (ca || cert)) {
        snprintf(errbuf, errlen,
                 "mysql: %s= needs TLS, but ssl_mode is disabled (the "
                 "default): add ssl_mode=%s",
                 ca ? "ssl_ca" : "ssl_cert",
                 ca ? "verify_identity or verify_ca" : "required or higher");
        return BACKEND_INVALID;
    }
    /* Connector/C checks the chain whenever it has a CA: ssl_ca with
     * preferred or required would quietly verify */
    if (ca != (be->ssl_mode >= MYSQL_SSL_VERIFY_CA)) {
        snprintf(errbuf, errlen,
                 ca ? "mysql: ssl_ca= is for ssl_mode=verify_ca or "
                      "verify_identity (ssl_mode is %s)"
                    : "mysql: ssl_mode=%s needs ssl_ca=PATH (the CA that "
                      "signed the server's certificate)",
                 mysql_ssl_modes[be->ssl_mode]);
        return BACKEND_INVALID;
    }
    return BACKEND_OK;
}

/* ssl_mode, ssl_ca, ssl_cert, ssl_key. */
static enum backend_result mysql_url_tls(struct mysql_be *be,
                                         const struct url *u,
                                         char *errbuf,
                                         size_t errlen)
{
    enum backend_result r = mysql_url_tls_mode(be, u, errbuf, errlen);

    if (r == BACKEND_OK)
        r = mysql_url_file(u, "ssl_ca", &be->ssl_ca, errbuf, errlen);
    if (r == BACKEND_OK)
        r = mysql_url_file(u, "ssl_cert", &be->ssl_cert, errbuf, errlen);
    if (r == BACKEND_OK)
        r = mysql_url_file(u, "ssl_key", &be->ssl_key, errbuf, errlen);
    return r;
}

/* The user, the database and the password (user info, password_file=,
 * or LOCKD_BACKEND_PASSWORD). */
static enum backend_result
mysql_url_login(struct mysql_be *be, struct url *u, char *errbuf, size_t errlen)
{
    char why[256];

    if (url_resolve_password(u, "LOCKD_BACKEND_PASSWORD", why, sizeof(why)) !=
        0) {
        snprintf(errbuf, errlen, "mysql: %s", why);
        return BACKEND_INVALID;
    }
    be->user = strdup(u->user);
    be->password = mysql_url_dup(u->password);
    be->database = strdup(u->path);
    if (be->user == NULL || be->database == NULL ||
        (u->password != NULL && be->password == NULL))
        return BACKEND_NO_MEMORY;
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
    if (r == BACKEND_OK)
        r = mysql_url_tls(be, &u, errbuf, errlen);
    if (r == BACKEND_OK)
        r = mysql_url_login(be, &u, errbuf, errlen);
    if (u.password != NULL)
        explicit_bzero(u.password, strlen(u.password));
    url_cleanup(&u);
    return r;
}
