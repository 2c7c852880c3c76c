/*
 * lib/keytab.c - intrusive chained hash table keyed by byte strings,
 * hashed with SipHash-2-4 (Aumasson and Bernstein) under a random seed.
 */
#include "lib/keytab.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "lib/random.h"

static uint64_t seed0, seed1; /* set once by pthread_once */
static pthread_once_t seed_once = PTHREAD_ONCE_INIT;

static void seed_init(void)
{
    uint64_t s[2] = { 0x736f6d6570736575ULL, 0x646f72616e646f6dULL };

    /* A failure leaves the fixed seed: hashing still works, only less
     * resistant to chosen keys. */
    if (random_bytes(s, sizeof(s)) != 0) {
        s[0] ^= (uint64_t)(uintptr_t)&s;
    }
    seed0 = s[0];
    seed1 = s[1];
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND           \
    do {                   \
        v0 += v1;          \
        v1 = ROTL(v1, 13); \
        v1 ^= v0;          \
        v0 = ROTL(v0, 32); \
        v2 += v3;          \
        v3 = ROTL(v3, 16); \
        v3 ^= v2;          \
        v0 += v3;          \
        v3 = ROTL(v3, 21); \
        v3 ^= v0;          \
        v2 += v1;          \
        v1 = ROTL(v1, 17); \
        v1 ^= v2;          \
        v2 = ROTL(v2, 32); \
    } while (0)

uint64_t keytab_hash(const char *key, size_t len)
{
    const unsigned char *in = (const unsigned char *)key;
    uint64_t v0, v1, v2, v3, m, b = (uint64_t)len << 56;
    size_t i, end = len - (len % 8);

    pthread_once(&seed_once, seed_init);
    v0 = 0x736f6d6570736575ULL ^ seed0;
    v1 = 0x646f72616e646f6dULL ^ seed1;
    v2 = 0x6c7967656e657261ULL ^ seed0;
    v3 = 0x7465646279746573ULL ^ seed1;
    for (i = 0; i < end; i += 8) {
        memcpy(&m, in + i, 8);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    for (size_t k = 0; i + k < len; k++)
        b |= (uint64_t)in[i + k] << (8 * k);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

int keytab_init(struct keytab *t, size_t nbuckets)
{
    size_t n = 8;

    while (n < nbuckets)
        n *= 2;
    t->buckets = calloc(n, sizeof(*t->buckets));
    if (t->buckets == NULL)
        return -1;
    t->mask = n - 1;
    t->count = 0;
    return 0;
}

void keytab_cleanup(struct keytab *t)
{
    free(t->buckets);
    t->buckets = NULL;
    t->count = 0;
}

struct keytab_entry *
keytab_find(const struct keytab *t, const char *key, size_t len, uint64_t hash)
{
    struct keytab_entry *e = t->buckets[hash & t->mask];

    for (; e != NULL; e = e->next)
        if (e->hash == hash && e->key_len == len &&
            memcmp(e->key, key, len) == 0)
            return e;
    return NULL;
}

static void grow(struct keytab *t)
{
    size_t n = (t->mask + 1) * 2;
    struct keytab_entry **nb = calloc(n, sizeof(*nb));

    if (nb == NULL)
        return;
    for (size_t i = 0; i <= t->mask; i++) {
        struct keytab_entry *e = t->buckets[i], *next;
        for (; e != NULL; e = next) {
            next = e->next;
            e->next = nb[e->hash & (n - 1)];
            nb[e->hash & (n - 1)] = e;
        }
    }
    free(t->buckets);
    t->buckets = nb;
    t->mask = n - 1;
}

void keytab_insert(struct keytab *t, struct keytab_entry *e)
{
    struct keytab_entry **b;

    if (t->count >= t->mask + 1)
        grow(t);
    b = &t->buckets[e->hash & t->mask];
    e->next = *b;
    *b = e;
    t->count++;
}

void keytab_remove(struct keytab *t, struct keytab_entry *e)
{
    struct keytab_entry **p = &t->buckets[e->hash & t->mask];

    for (; *p != NULL; p = &(*p)->next) {
        if (*p == e) {
            *p = e->next;
            e->next = NULL;
            t->count--;
            return;
        }
    }
}

void keytab_foreach(struct keytab *t,
                    void (*fn)(struct keytab_entry *e, void *arg),
                    void *arg)
{
    for (size_t i = 0; i <= t->mask; i++) {
        struct keytab_entry *e = t->buckets[i], *next;
        for (; e != NULL; e = next) {
            next = e->next;
            fn(e, arg);
        }
    }
}
