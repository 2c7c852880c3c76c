/*
 * lib/keytab.h - an intrusive hash table of byte-string keys, used by
 * the memory backend's shards and by the wait queue. SipHash-2-4 with a
 * per-process random seed, so clients cannot force collisions. Not
 * thread-safe: the owner locks.
 */
#ifndef LIB_KEYTAB_H
#define LIB_KEYTAB_H

#include <stddef.h>
#include <stdint.h>

struct keytab_entry { /* embedded in the owner's struct */
    struct keytab_entry *next;
    uint64_t hash;
    const char *key; /* borrowed from the owner's struct */
    size_t key_len;
};

struct keytab {
    struct keytab_entry **buckets; /* owned */
    size_t mask;                   /* buckets - 1, a power of two minus 1 */
    size_t count;
};

/* 0, or -1 when out of memory. nbuckets is rounded up to a power of two. */
int keytab_init(struct keytab *t, size_t nbuckets);
/* Frees the buckets only; entries belong to their owners. */
void keytab_cleanup(struct keytab *t);

uint64_t keytab_hash(const char *key, size_t len);

/* The entry for key, or NULL. */
struct keytab_entry *
keytab_find(const struct keytab *t, const char *key, size_t len, uint64_t hash);
/* Adds e (e->key, e->key_len and e->hash set by the caller; the key must
 * not be present). Grows the table when it fills; a failed growth only
 * makes chains longer. */
void keytab_insert(struct keytab *t, struct keytab_entry *e);
void keytab_remove(struct keytab *t, struct keytab_entry *e);

/* Calls fn for every entry; fn may remove the entry it is given. */
void keytab_foreach(struct keytab *t,
                    void (*fn)(struct keytab_entry *e, void *arg),
                    void *arg);

#endif /* LIB_KEYTAB_H */
