/*
 * backends/zookeeper/auth.c - who lockd is to ZooKeeper, and who may touch
 * the nodes it makes. With credentials in the URL,
 *
 *     zookeeper://user:password@host:port[,host:port][/chroot][?acl=...]
 *
 * (or the password from password_file=PATH, else LOCKD_BACKEND_PASSWORD),
 * every session lockd opens adds digest auth "user:password" before its
 * first request, and every node lockd creates (the chroot and its
 * ancestors, the roots, keys, holders, markers, waiters) carries
 * creator-all + world-read (acl=creator_read, the default) or creator-all
 * only (acl=creator). "creator" is ZooKeeper's auth id: every session
 * authenticated as the same user, so lockd instances sharing the
 * credentials share the tree. Without credentials nodes stay open
 * (ZOO_OPEN_ACL_UNSAFE), as before. Nodes that exist already keep the
 * ACL they have.
 */
#include "backends/zookeeper/zk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/log.h"
#include "lib/url.h"

/* Digest auth answered: ZooKeeper accepts any user:password pair (it only
 * names who we are), so a refusal means a server set up otherwise. */
static void zk_auth_done(int rc, const void *data)
{
    const struct zk_be *be = data;

    if (rc != ZOK)
        log_warn("zookeeper: digest authentication as '%s' refused: %s",
                 be->auth_user, zerror(rc));
}

/* acl= into be->acl: 0, or -1 with the reason in errbuf. */
static int
zk_auth_acl(struct zk_be *be, const char *v, char *errbuf, size_t errlen)
{
    if (v == NULL || strcmp(v, "creator_read") == 0) {
        be->acl_items[0].perms = ZOO_PERM_ALL;
        be->acl_items[0].id = ZOO_AUTH_IDS;
        be->acl_items[1].perms = ZOO_PERM_READ;
        be->acl_items[1].id = ZOO_ANYONE_ID_UNSAFE;
        be->acl_vec.count = 2;
        be->acl_vec.data = be->acl_items;
        be->acl = &be->acl_vec;
        be->acl_name = "creator_read";
        return 0;
    }
    if (strcmp(v, "creator") == 0) {
        be->acl = &ZOO_CREATOR_ALL_ACL;
        be->acl_name = "creator";
        return 0;
    }
    snprintf(errbuf, errlen, "zookeeper: acl must be creator_read or creator");
    return -1;
}

int zk_auth_parse(struct zk_be *be, struct url *u, char *errbuf, size_t errlen)
{
    const char *acl = url_param(u, "acl");
    char why[256];
    size_t ul, pl;

    be->acl = &ZOO_OPEN_ACL_UNSAFE;
    be->acl_name = "open";
    if (u->user == NULL) {
        if (u->password != NULL || url_param(u, "password_file") != NULL ||
            acl != NULL) {
            snprintf(errbuf, errlen,
                     "zookeeper: %s needs a user: "
                     "zookeeper://user:password@host:port/chroot",
                     acl != NULL ? "acl=" : "a password");
            return -1;
        }
        return 0; /* LOCKD_BACKEND_PASSWORD alone names nobody */
    }
    if (u->user[0] == '\0' || strchr(u->user, ':') != NULL) {
        snprintf(errbuf, errlen,
                 "zookeeper: the user must be 1 or more characters, "
                 "without ':'");
        return -1;
    }
    if (url_resolve_password(u, "LOCKD_BACKEND_PASSWORD", why, sizeof(why)) !=
        0) {
        snprintf(errbuf, errlen, "zookeeper: %s", why);
        return -1;
    }
    if (u->password == NULL) {
        snprintf(errbuf, errlen,
                 "zookeeper: user '%s' needs a password (in the URL, "
                 "password_file= or LOCKD_BACKEND_PASSWORD)",
                 u->user);
        return -1;
    }
    if (zk_auth_acl(be, acl, errbuf, errlen) != 0)
        return -1;
    ul = strlen(u->user);
    pl = strlen(u->password);
    be->auth_user = strdup(u->user);
    be->auth = malloc(ul + 1 + pl + 1);
    if (be->auth_user == NULL || be->auth == NULL) {
        snprintf(errbuf, errlen, "zookeeper: out of memory");
        return -1;
    }
    memcpy(be->auth, u->user, ul);
    be->auth[ul] = ':';
    memcpy(be->auth + ul + 1, u->password, pl + 1);
    be->auth_len = ul + 1 + pl;
    return 0;
}

int zk_auth_add(struct zk_be *be, zhandle_t *zh)
{
    int rc;

    if (be->auth == NULL)
        return ZOK;
    /* before any request: the library sends auth first on every
     * (re)connect of this handle, ahead of what is queued */
    rc = zoo_add_auth(zh, "digest", be->auth, (int)be->auth_len, zk_auth_done,
                      be);
    if (rc != ZOK)
        log_warn("zookeeper: cannot add digest authentication as '%s': %s",
                 be->auth_user, zerror(rc));
    return rc;
}

void zk_auth_cleanup(struct zk_be *be)
{
    if (be->auth != NULL)
        explicit_bzero(be->auth, be->auth_len);
    free(be->auth);
    free(be->auth_user);
    be->auth = NULL;
    be->auth_user = NULL;
}
