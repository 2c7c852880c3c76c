/*
 * lib/url.h - a store URL split into its parts, and host[:port] strings.
 * Leaf (uses lib/text.h and lib/secret.h only).
 */
#ifndef LIB_URL_H
#define LIB_URL_H

#include <stddef.h>

/*
 * A URL split into its parts, each percent-decoded and owned (NULL when
 * absent): scheme://[user[:password]@]hosts[/path][?name=value&...].
 * hosts is kept as written ("h1:2181,h2:2181", "[::1]:6379").
 */
struct url {
    char *scheme;
    char *user;
    char *password;
    char *hosts;
    char *path; /* without its leading '/' */
    size_t nparams;
    char **names;  /* nparams query names, decoded */
    char **values; /* nparams query values, decoded ("" when no '=') */
};

/* 0 on success; -1 (and *u zeroed) on a malformed URL (a bad escape, %00
 * anywhere, no "://") or no memory. */
int url_parse(const char *url, struct url *u);
void url_cleanup(struct url *u); /* accepts zeroed */
/* The value of query parameter name, or NULL. Borrowed from u. */
const char *url_param(const struct url *u, const char *name);
/* 0 if every query name is in allowed (NULL-terminated); else -1 and the
 * first unknown name in *bad (borrowed from u). */
int url_check_params(const struct url *u,
                     const char *const *allowed,
                     const char **bad);

/*
 * The store password the URL names, into u->password (owned; NULL when
 * there is none): the user info's password as written; else the first line
 * of the file named by ?password_file=PATH (both at once is an error);
 * else the value of the environment variable env_name (when env_name is
 * not NULL and the variable is set and not empty). The password_file
 * parameter stays in u (a backend lists it among its allowed names).
 * 0, or -1 with the reason in err (never the password itself).
 */
int url_resolve_password(struct url *u,
                         const char *env_name,
                         char *err,
                         size_t errlen);

/*
 * url for a log line or an error message: the user info's password and
 * the value of every query parameter whose name ends in "password" are
 * replaced by "***" (also in a malformed URL: the part between the first
 * ':' after the scheme separator, or after the start when there is none,
 * and the last '@' before the query, or anywhere when none is). The
 * result is truncated to outlen - 1 bytes and always NUL-terminated.
 */
void url_redact(const char *url, char *out, size_t outlen);

#define URL_HOSTPORT_NEED_PORT 0x1u /* "host" alone is malformed */
#define URL_HOSTPORT_BARE_V6   0x2u /* "::1" is a host, not host:port */

/*
 * Split one "host", "host:port", "[v6]" or "[v6]:port" (a ',' anywhere is
 * malformed). *host is a new string the caller frees; *port is set only
 * when the string has one (1..65535). 0, -1 when malformed, -2 when out of
 * memory.
 */
int url_hostport(const char *s, char **host, unsigned *port, unsigned flags);

#endif /* LIB_URL_H */
