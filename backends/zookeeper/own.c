/*
 * backends/zookeeper/own.c - the grants and renews made by this process,
 * remembered by key in a fixed table, so that a release of one is a
 * single multi that does not read h first (zk_be_release()). Only a hint:
 * a slot may be stale or overwritten, and the multi's marker and version
 * checks decide; a miss costs one read.
 */
#include "backends/zookeeper/zk.h"

#include <stdlib.h>
#include <string.h>

#include "lib/text.h"

static size_t zk_own_slot(const char *key, size_t key_len)
{
    uint64_t hash = UINT64_C(14695981039346656037); /* FNV-1a */

    for (size_t i = 0; i < key_len; i++)
        hash = (hash ^ (unsigned char)key[i]) * UINT64_C(1099511628211);
    return (size_t)(hash % ZK_OWN_SLOTS);
}

/* Remember that token holds key at h's stat st (after our grant or renew),
 * replacing whatever the slot held. Best effort: without memory, nothing is
 * remembered and the release reads h first. */
void zk_own_put(struct zk_be *be,
                const char *key,
                size_t key_len,
                const char *token,
                const struct Stat *st,
                uint64_t ttl_ms,
                uint32_t holds,
                bool alone)
{
    struct zk_own *o = &be->own[zk_own_slot(key, key_len)];
    size_t tlen = strlen(token);
    char *copy = NULL, *old;

    if (tlen > LOCK_TOKEN_MAX)
        return;
    pthread_mutex_lock(&be->own_mu);
    old = o->key;
    if (old != NULL && o->key_len == key_len &&
        memcmp(old, key, key_len) == 0) {
        old = NULL; /* the same key: keep its copy */
    } else {
        pthread_mutex_unlock(&be->own_mu);
        copy = malloc(key_len);
        if (copy == NULL)
            return;
        memcpy(copy, key, key_len);
        pthread_mutex_lock(&be->own_mu);
        old = o->key;
        o->key = copy;
        o->key_len = key_len;
    }
    memcpy(o->token, token, tlen + 1);
    o->version = st->version;
    o->mtime = st->mtime;
    o->ctime = st->ctime;
    o->ttl_ms = ttl_ms;
    o->holds = holds;
    o->alone = alone;
    pthread_mutex_unlock(&be->own_mu);
    free(old);
}

/* What we remember of token's hold on key: true and *out filled if the
 * slot holds that key under that token. */
bool zk_own_get(struct zk_be *be,
                const char *key,
                size_t key_len,
                const char *token,
                struct zk_own *out)
{
    struct zk_own *o = &be->own[zk_own_slot(key, key_len)];
    bool hit;

    pthread_mutex_lock(&be->own_mu);
    hit = o->key != NULL && o->key_len == key_len &&
          memcmp(o->key, key, key_len) == 0 && text_secret_eq(o->token, token);
    if (hit) {
        *out = *o;
        out->key = NULL; /* not a copy */
    }
    pthread_mutex_unlock(&be->own_mu);
    return hit;
}

/* Forget key (released, or our memory of it is stale). */
void zk_own_drop(struct zk_be *be, const char *key, size_t key_len)
{
    struct zk_own *o = &be->own[zk_own_slot(key, key_len)];
    char *old = NULL;

    pthread_mutex_lock(&be->own_mu);
    if (o->key != NULL && o->key_len == key_len &&
        memcmp(o->key, key, key_len) == 0) {
        old = o->key;
        o->key = NULL;
    }
    pthread_mutex_unlock(&be->own_mu);
    free(old);
}
