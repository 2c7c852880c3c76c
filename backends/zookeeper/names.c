/*
 * backends/zookeeper/names.c - what lockd names and writes in ZooKeeper:
 * a key's node (base64url of the key), its holder h and h's token marker,
 * waiter node names, the chroot and root paths, and the data h holds.
 * Every path is built here, once per request (struct zk_paths), so the
 * recipe, the operations and the sweep all name the same nodes the same
 * way. Pure string work: no I/O, no locks.
 *
 *   <chroot>/lockd/locks/k<base64url(key)>    a key's node
 *       h                                     the holder
 *       t<token>                              h's marker
 *       s<token>                              a shared holder (h: its group)
 *       w<inst>-<id>-<deadline>-0000000042    waiters (r...: shared ones)
 *   <chroot>/lockd/clock                      written to learn the clock
 */
#include "backends/zookeeper/zk.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char zk_b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* base64url without padding: injective, and never "." or ".." or "/". */
static size_t zk_b64_encode(const unsigned char *in, size_t n, char *out)
{
    size_t j = 0;

    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < n)
            v |= in[i + 2];
        out[j++] = zk_b64[(v >> 18) & 63];
        out[j++] = zk_b64[(v >> 12) & 63];
        if (i + 1 < n)
            out[j++] = zk_b64[(v >> 6) & 63];
        if (i + 2 < n)
            out[j++] = zk_b64[v & 63];
    }
    out[j] = '\0';
    return j;
}

static int zk_b64_val(char c)
{
    const char *p = c != '\0' ? strchr(zk_b64, c) : NULL;

    return p != NULL ? (int)(p - zk_b64) : -1;
}

/* Decode n chars of base64url; the length, or -1 on junk or overflow. */
long zk_b64_decode(const char *in, size_t n, unsigned char *out, size_t cap)
{
    size_t j = 0;
    uint32_t acc = 0;
    int bits = 0;

    if (n % 4 == 1)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int v = zk_b64_val(in[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (j == cap)
                return -1;
            out[j++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    return (long)j;
}

/* The key's node: <locks>/k<base64url(key)>. 0, or -1 if it cannot fit in
 * out. The key is 1..LOCK_KEY_MAX bytes: backend_key_ok() in the wrappers
 * (backends/backend.c) guarantees it, so only the room is checked here. */
static int zk_key_path(const struct zk_be *be,
                       const char *key,
                       size_t key_len,
                       char *out,
                       size_t cap)
{
    int n = snprintf(out, cap, "%s/k", be->locks);

    if (n < 0 || (size_t)n + (key_len + 2) / 3 * 4 >= cap)
        return -1;
    zk_b64_encode((const unsigned char *)key, key_len, out + n);
    return 0;
}

int zk_child_path(const char *parent, const char *name, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s", parent, name);

    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int zk_paths_key(const struct zk_be *be,
                 const char *key,
                 size_t key_len,
                 const char *token,
                 struct zk_paths *p)
{
    p->marker[0] = '\0';
    p->member[0] = '\0';
    p->key = key;
    p->key_len = key_len;
    if (token != NULL &&
        (zk_marker_name(token, p->marker, sizeof(p->marker)) != 0 ||
         zk_token_name('s', token, p->member, sizeof(p->member)) != 0)) {
        p->marker[0] = '\0';
        p->member[0] = '\0';
    }
    return zk_key_path(be, key, key_len, p->parent, sizeof(p->parent)) != 0 ||
                   zk_child_path(p->parent, "h", p->hpath, sizeof(p->hpath)) !=
                       0
               ? -1
               : 0;
}

int zk_paths_node(const struct zk_be *be, const char *name, struct zk_paths *p)
{
    p->marker[0] = '\0';
    p->member[0] = '\0';
    p->key = NULL;
    p->key_len = 0;
    return zk_child_path(be->locks, name, p->parent, sizeof(p->parent)) != 0 ||
                   zk_child_path(p->parent, "h", p->hpath, sizeof(p->hpath)) !=
                       0
               ? -1
               : 0;
}

/* h's token marker, "t<token>": a sibling of h, created and deleted with
 * it. Its name is unique to one grant (tokens are 128 random bits), which a
 * version number is not (every fresh h has version 1): a release, renew or
 * reap that checks the marker with h's version can never hit a later grant
 * of the key (an ABA), so a release needs no read.
 * -1 for a token that cannot be a node name (lockd's are 32 hex chars). */
int zk_marker_name(const char *token, char *out, size_t cap)
{
    return zk_token_name('t', token, out, cap);
}

/* <c><token>: 0, or -1 for a token that cannot be a node name. */
int zk_token_name(char c, const char *token, char *out, size_t cap)
{
    size_t n = strlen(token);

    if (n == 0 || n > LOCK_TOKEN_MAX || n + 2 > cap ||
        strspn(token, "0123456789abcdefABCDEF") != n)
        return -1;
    out[0] = c;
    memcpy(out + 1, token, n + 1);
    return 0;
}

int zk_waiter_prefix(const struct zk_be *be,
                     bool shared,
                     uint64_t id,
                     int64_t deadline,
                     char *out,
                     size_t cap)
{
    int n = snprintf(out, cap, "%c%s-%" PRIx64 "-%" PRId64 "-",
                     shared ? 'r' : 'w', be->inst, id, deadline);

    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

bool zk_waiter_is_ours(const struct zk_be *be, const char *name)
{
    size_t n = strlen(be->inst);

    return (name[0] == 'w' || name[0] == 'r') &&
           strncmp(name + 1, be->inst, n) == 0 && name[n + 1] == '-';
}

int zk_cmp_kid(const void *a, const void *b)
{
    const struct zk_kid *x = a, *y = b;

    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Parse a waiter's name: w<inst>-<id>-<deadline>-<10-digit sequence>
 * (exclusive), r... (shared). */
int zk_parse_waiter(const char *name, struct zk_kid *k)
{
    size_t n = strlen(name);
    const char *p;
    int64_t v = 0, mul = 1;

    if (n < ZK_SEQ_DIGITS + 3 || (name[0] != 'w' && name[0] != 'r') ||
        name[n - ZK_SEQ_DIGITS - 1] != '-')
        return -1;
    for (size_t i = n - ZK_SEQ_DIGITS; i < n; i++) {
        if (name[i] < '0' || name[i] > '9')
            return -1;
        v = v * 10 + (name[i] - '0');
    }
    k->name = name;
    k->seq = v;
    k->shared = name[0] == 'r';
    v = 0;
    p = name + n - ZK_SEQ_DIGITS - 2;
    while (p > name && *p >= '0' && *p <= '9' && mul <= INT64_C(1) << 50) {
        v += (*p - '0') * mul;
        mul *= 10;
        p--;
    }
    k->deadline = *p == '-' ? v : 0; /* unreadable: reapable */
    return 0;
}

static bool zk_is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
           (c >= 'A' && c <= 'F');
}

/* A holder's data. v2, written since lock kinds:
 *   "lockd2 <x|s> <ttl_ms> <token> <grant_by> <holds> <limit>[ <run_ms>]"
 *   "\n<idem>" [ "\n<owner>" ]   (idem: "" for none; owner: the rest;
 *   run_ms: ttl_ms when absent)
 * A shared key's h (the group): "lockd2 g <limit> <count>". */
int zk_fmt_holder(char *buf, size_t cap, const struct zk_holder *h, size_t *len)
{
    char run[24] = "";
    int n;

    if (h->run_ms != 0 && h->run_ms != h->ttl_ms)
        snprintf(run, sizeof(run), " %" PRIu64, h->run_ms);
    if (strpbrk(h->token, " \n") != NULL ||
        (h->has_idem && strchr(h->idem, '\n') != NULL))
        return -1;
    n = snprintf(buf, cap,
                 "lockd2 %c %" PRIu64 " %s %" PRId64 " %" PRIu32 " %" PRIu32
                 "%s\n%s%s%s",
                 h->mode == LOCK_SHARED ? 's' : 'x', h->ttl_ms, h->token,
                 h->grant_by, h->holds, h->limit, run,
                 h->has_idem ? h->idem : "", h->has_owner ? "\n" : "",
                 h->has_owner ? h->owner : "");
    if (n < 0 || (size_t)n >= cap)
        return -1;
    *len = (size_t)n;
    return 0;
}

int zk_fmt_group(
    char *buf, size_t cap, uint32_t limit, uint32_t count, size_t *len)
{
    int n = snprintf(buf, cap, "lockd2 g %" PRIu32 " %" PRIu32, limit, count);

    if (n < 0 || (size_t)n >= cap)
        return -1;
    *len = (size_t)n;
    return 0;
}

/* A decimal number of 1..17 digits at *p (< end), at most max: 0 and *p
 * past it, or -1. */
static int zk_num(const char **p, const char *end, uint64_t max, uint64_t *v)
{
    size_t n = 0;

    *v = 0;
    while (*p < end && **p >= '0' && **p <= '9' && n < 17) {
        *v = *v * 10 + (uint64_t)(*(*p)++ - '0');
        n++;
    }
    return n == 0 || *v > max ? -1 : 0;
}

/* The token at *p: 1..LOCK_TOKEN_MAX hex chars, into h->token. */
static int zk_token(const char **p, const char *end, struct zk_holder *h)
{
    size_t n = 0;

    /* lockd's tokens are hex, so every holder has a marker */
    while (*p + n < end && zk_is_hex((*p)[n]) && n < LOCK_TOKEN_MAX)
        n++;
    if (n == 0)
        return -1;
    memcpy(h->token, *p, n);
    *p += n;
    return 0;
}

/* The owner: the rest after the '\n' at p, if any. */
static int zk_owner(const char *p, const char *end, struct zk_holder *h)
{
    size_t n;

    if (p == end)
        return 0;
    if (*p++ != '\n')
        return -1;
    n = (size_t)(end - p);
    if (n > LOCK_OWNER_MAX)
        return -1;
    memcpy(h->owner, p, n);
    h->has_owner = true;
    return 0;
}

/* "lockd1 <ttl_ms> <token>[ <grant_by>][\n<owner>]": before lock kinds. */
static int zk_parse_v1(const char *p, const char *end, struct zk_holder *h)
{
    uint64_t v;

    if (zk_num(&p, end, UINT64_MAX, &v) != 0 || v == 0 || p == end ||
        *p++ != ' ' || zk_token(&p, end, h) != 0)
        return -1;
    h->ttl_ms = h->run_ms = v;
    if (p < end && *p == ' ') {
        p++;
        if (zk_num(&p, end, INT64_MAX, &v) != 0 || v == 0)
            return -1;
        h->grant_by = (int64_t)v;
    }
    return zk_owner(p, end, h);
}

static int zk_parse_v2(const char *p, const char *end, struct zk_holder *h)
{
    uint64_t ttl, by, holds, limit, run;
    const char *nl;
    char m = p < end ? *p++ : '\0';

    if (p == end || *p++ != ' ')
        return -1;
    if (m == 'g') {
        h->group = true;
        h->mode = LOCK_SHARED;
        if (zk_num(&p, end, LOCK_LIMIT_MAX, &limit) != 0 || p == end ||
            *p++ != ' ' || zk_num(&p, end, UINT32_MAX, &holds) != 0 || p != end)
            return -1;
        h->limit = (uint32_t)limit;
        h->count = (uint32_t)holds;
        return 0;
    }
    if ((m != 'x' && m != 's') || zk_num(&p, end, UINT64_MAX, &ttl) != 0 ||
        ttl == 0 || p == end || *p++ != ' ' || zk_token(&p, end, h) != 0 ||
        p == end || *p++ != ' ' || zk_num(&p, end, INT64_MAX, &by) != 0 ||
        p == end || *p++ != ' ' ||
        zk_num(&p, end, LOCK_HOLDS_MAX, &holds) != 0 || holds == 0 ||
        p == end || *p++ != ' ' ||
        zk_num(&p, end, LOCK_LIMIT_MAX, &limit) != 0 || p == end)
        return -1;
    run = ttl;
    if (*p == ' ') {
        p++;
        if (zk_num(&p, end, UINT64_MAX, &run) != 0 || run == 0 || p == end)
            return -1;
    }
    if (*p++ != '\n')
        return -1;
    h->run_ms = run;
    h->mode = m == 's' ? LOCK_SHARED : LOCK_EXCLUSIVE;
    h->ttl_ms = ttl;
    h->grant_by = (int64_t)by;
    h->holds = (uint32_t)holds;
    h->limit = (uint32_t)limit;
    nl = memchr(p, '\n', (size_t)(end - p));
    if (nl == NULL)
        nl = end;
    if ((size_t)(nl - p) > LOCK_IDEM_MAX)
        return -1;
    if (nl > p) {
        memcpy(h->idem, p, (size_t)(nl - p));
        h->has_idem = true;
    }
    return zk_owner(nl, end, h);
}

/* Parse a holder's (or a group's) data; -1 if it is not ours. */
int zk_parse_holder(const char *data, int len, struct zk_holder *h)
{
    const char *end = data + (len > 0 ? len : 0);

    memset(h, 0, sizeof(*h));
    h->holds = 1;
    if (data == NULL || len < 9)
        return -1;
    if (memcmp(data, "lockd1 ", 7) == 0)
        return zk_parse_v1(data + 7, end, h);
    if (memcmp(data, "lockd2 ", 7) == 0)
        return zk_parse_v2(data + 7, end, h);
    return -1;
}

/* "a/b" → "/a/b"; segments of [A-Za-z0-9._-], never "." or "..". */
int zk_parse_chroot(const char *path, char **out)
{
    size_t n = path != NULL ? strlen(path) : 0;
    char *s;

    while (n > 0 && path[n - 1] == '/')
        n--;
    if (n > ZK_CHROOT_MAX)
        return -1;
    s = malloc(n + 2);
    if (s == NULL)
        return -1;
    s[0] = '\0';
    if (n > 0) {
        s[0] = '/';
        memcpy(s + 1, path, n);
        s[n + 1] = '\0';
        for (char *seg = s + 1; seg != NULL;) {
            char *end = strchr(seg, '/');
            size_t len = end != NULL ? (size_t)(end - seg) : strlen(seg);
            if (len == 0 || (len == 1 && seg[0] == '.') ||
                (len == 2 && seg[0] == '.' && seg[1] == '.') ||
                strspn(seg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstu"
                            "vwxyz0123456789._-") < len) {
                free(s);
                return -1;
            }
            seg = end != NULL ? end + 1 : NULL;
        }
    }
    *out = s;
    return 0;
}

static char *zk_concat(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);

    if (s != NULL) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb + 1);
    }
    return s;
}

int zk_root_paths(struct zk_be *be)
{
    be->root = zk_concat(be->chroot, "/lockd");
    be->locks = be->root != NULL ? zk_concat(be->root, "/locks") : NULL;
    be->clock_path = be->root != NULL ? zk_concat(be->root, "/clock") : NULL;
    return be->locks != NULL && be->clock_path != NULL ? 0 : -1;
}
