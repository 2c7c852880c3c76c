/*
 * backends/memory/mem_int.h - the memory store's private state, shared by
 * its files: memory.c (the ops table and the decisions of acquire, renew,
 * release, inspect), holders.c (an entry's holders: grant, expiry, lookup,
 * removal), multi.c (several keys at once), index.c (each shard's entries
 * in key order), list.c (list: a merge of the shards' orders), due.c (each
 * shard's entries by their earliest expiry) and sweep.c (the sweeper
 * thread, which visits only what due.c says has expired).
 *
 * An entry exists while its key is held or has waiters. Its holders are
 * one array in logical order 0..nheld-1, by ascending fence (a grant
 * appends, and the fences of one key grow, since its grants run one at a
 * time under the shard mutex): holder 0 lives inside the entry, so the
 * common exclusive lock costs no second allocation; holders 1.. live in
 * `more`, allocated only for a key held shared by several tokens.
 */
#ifndef BACKENDS_MEMORY_MEM_INT_H
#define BACKENDS_MEMORY_MEM_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"
#include "lib/keytab.h"

#define MEM_SHARDS      64
#define MEM_SWEEP_MS    250 /* how often the sweeper looks for expiries */
#define MEM_SWEEP_BATCH 64  /* keys notified per shard visit */
/* How long an entry nobody holds or waits for stays, for its key's next
 * acquire (no allocation, hash or index work on a key used again); the
 * sweeper frees it after that, within MEM_SWEEP_MS more. */
#define MEM_LINGER_MS 1000

struct mem_entry;

struct mem_waiter { /* a place in an entry's FIFO; lock_waiter.be_data */
    struct mem_waiter *prev, *next;
    struct mem_entry *entry;
    uint32_t limit; /* SHARED: the limit asked for; 0 = none */
    uint8_t mode;   /* enum lock_mode, from the first acquire naming it */
};

/* Bytes of a token of lockd's own form: 32 lowercase hex digits. */
#define MEM_TOKEN_BYTES 16

struct mem_holder {
    int64_t expires_mono; /* ms, CLOCK_MONOTONIC */
    int64_t expires_wall; /* unix ms, informational */
    int64_t granted_wall; /* unix ms of the grant (release reports it) */
    uint64_t fence;
    uint64_t ttl_ms; /* the TTL last granted or renewed */
    char *owner;     /* owned; NULL when none */
    char *idem;      /* owned Idempotency-Key of the grant; NULL when none */
    /* The token: one of lockd's form as the bytes its digits spell, in
     * tok (the holder is 88 bytes, 128 with the text inline); any other
     * (1..LOCK_TOKEN_MAX bytes) as text, owned, in tok_text. */
    char *tok_text; /* NULL for one of lockd's form */
    uint32_t holds; /* 1..LOCK_HOLDS_MAX */
    uint8_t tok[MEM_TOKEN_BYTES];
};

struct mem_entry {
    struct keytab_entry ke;  /* ke.key points at key[] */
    struct mem_holder first; /* holder 0, valid while nheld > 0; while
                                idle, only first.expires_mono: when the
                                entry may go (do_mem_entry_idle()) */
    struct mem_holder *more; /* owned: holders 1..nheld-1; NULL if none */
    struct mem_waiter *qhead, *qtail;
    struct mem_entry *lo, *hi; /* the shard's ordered index (index.c) */
    /* 1 + its place in the shard's due heap (due.c) while held or idle; 0
     * while only waiters keep it */
    uint32_t due_at;
    uint32_t nheld;  /* holders now */
    uint32_t limit;  /* the key's limit while held SHARED; 0 = none */
    uint8_t mode;    /* enum lock_mode while held */
    bool multi_wait; /* a multi-key acquire was refused for this key since
                        the last notification: it keeps no place in the
                        FIFO, so this is what gets it told of a change */
    char key[];
};

/* The shard of a key's hash; multi.c locks shards in ascending index. */
static inline unsigned mem_shard_index(uint64_t hash)
{
    return (unsigned)((hash >> 58) % MEM_SHARDS);
}

struct mem_due { /* a place in a shard's due heap */
    int64_t at;  /* the entry's earliest holder expiry, monotonic ms */
    struct mem_entry *e;
};

struct mem_shard {
    pthread_mutex_t mu; /* guards tab, index, due and every entry in them */
    struct keytab tab;
    struct mem_entry *index; /* root of the same entries ordered by key */
    struct mem_due *due;     /* owned: min-heap by .at of the held entries */
    uint32_t ndue, due_cap;
} __attribute__((aligned(64)));

struct mem_be {
    struct backend base;
    struct backend_hooks hooks;
    _Atomic uint64_t fence; /* last fence granted, any key */
    _Atomic int64_t held;   /* holders of every entry */
    pthread_t sweeper;
    pthread_mutex_t stop_mu; /* guards stopping */
    pthread_cond_t stop_cv;
    bool stopping;
    bool sweeper_started;
    _Atomic uint64_t swept; /* entries the sweeper has visited, for tests */
    struct mem_shard shards[MEM_SHARDS];
};

static inline struct mem_shard *mem_shard_of(struct mem_be *m,
                                             const struct mem_entry *e)
{
    return &m->shards[mem_shard_index(e->ke.hash)];
}

/* due.c: every do_ function runs under the shard's mutex. An entry is in
 * its shard's due heap while it has holders, at the earliest of their
 * expiries, and while it is idle (no holder, no place queued), at the time
 * it may be freed; not while places alone keep it. Whatever adds, removes
 * or renews a holder calls do_mem_due_set() before it lets go of the
 * mutex, and do_mem_entry_idle() once the entry may be idle. */

/* Room in s's heap for one more entry: 0, or -1 (out of memory). */
int do_mem_due_room(struct mem_shard *s);
/* Put e in s's heap at its holders' earliest expiry or, idle, at
 * first.expires_mono; take it out when places alone keep it. Adding needs
 * the room do_mem_due_room() made. */
void do_mem_due_set(struct mem_shard *s, struct mem_entry *e);
/* Take e out of s's heap, if it is in it. */
void do_mem_due_drop(struct mem_shard *s, struct mem_entry *e);
/* The entry whose place (its earliest holder expiry, or when an idle one
 * may go) is the first, if it is at or before now; else NULL. */
struct mem_entry *do_mem_due_first(const struct mem_shard *s, int64_t now);
/* Give back heap room after a fall (a quarter full or less). */
void do_mem_due_shrink(struct mem_shard *s);
/* For tests: do the heaps of m agree with its entries (every held or
 * idle entry in its shard's heap once, at its earliest expiry or when it
 * may go, in heap order)? Locks each shard in turn. */
bool mem_due_check(struct backend *be);

/* holders.c: every do_ function runs under the entry's shard mutex. */

/* index.c: every do_ function runs under the shard's mutex. Every entry
 * of a shard's tab is in its index, from do_mem_entry_new() to
 * do_mem_entry_free(). */

/* Byte order of keys: memcmp, then the shorter first. <0, 0 or >0. */
int mem_key_cmp(const char *a, size_t alen, const char *b, size_t blen);
void do_mem_index_add(struct mem_shard *s, struct mem_entry *e);
void do_mem_index_remove(struct mem_shard *s, struct mem_entry *e);
/* The first entry of s whose key follows key (or equals it, with
 * inclusive), or NULL. */
struct mem_entry *do_mem_index_next(const struct mem_shard *s,
                                    const char *key,
                                    size_t len,
                                    bool inclusive);

/* Holder i (0..nheld-1) of e, by ascending fence. */
struct mem_holder *mem_holder_at(struct mem_entry *e, uint32_t i);
/* Expire e's holders whose TTL has passed at now (monotonic ms), each on
 * its own; the number expired. *gone (if not NULL) is raised to the
 * greatest fence expired. */
uint32_t do_mem_expire(struct mem_be *m,
                       struct mem_entry *e,
                       int64_t now,
                       uint64_t *gone);
/* Add a holder for req (a new fence, holds 1) and fill out: OK, or
 * NO_MEMORY with nothing changed. The first holder sets the key's mode
 * and limit. */
enum backend_result do_mem_grant(struct mem_be *m,
                                 struct mem_entry *e,
                                 const struct lock_req *req,
                                 int64_t now,
                                 struct lock_grant *out);
/* Remove holder i (its token dies); the last one frees the key's mode. */
void do_mem_unhold(struct mem_be *m, struct mem_entry *e, uint32_t i);
/* Free what h owns (owner, Idempotency-Key, a token's text). */
void mem_holder_drop(struct mem_holder *h);
/* h's token as text, into out. */
void mem_holder_token(const struct mem_holder *h, char out[LOCK_TOKEN_MAX + 1]);
/* The index of the holder with token / Idempotency-Key idem, or -1. */
int64_t do_mem_find_token(struct mem_entry *e, const char *token);
int64_t do_mem_find_idem(struct mem_entry *e, const char *idem);
/* ms until the first holder's TTL passes; 1 when nobody holds e. */
uint64_t do_mem_first_expiry(struct mem_entry *e, int64_t now);
/* ms left of h at now, at least 1 (h has not expired). */
uint64_t mem_holder_left(const struct mem_holder *h, int64_t now);
/* Fill out (holders malloc'ed) from e, held: OK or NO_MEMORY. */
enum backend_result
do_mem_fill_info(struct mem_entry *e, int64_t now, struct lock_info *out);
/* Fill out from e's holders whose TTL has not passed at now, without
 * changing e: false (out untouched) when there is none. */
bool do_mem_fill_entry(struct mem_entry *e,
                       int64_t now,
                       struct lock_entry *out);

/* memory.c */

/* Tell the wait queue that key may have become free for a waiter. */
void mem_notify(struct mem_be *m, const char *key, size_t len);
/* If e has no holder and no waiter: it stays MEM_LINGER_MS from now for
 * its key's next acquire (or is freed at once if the due heap has no room
 * for it). */
void do_mem_entry_idle(struct mem_shard *s, struct mem_entry *e, int64_t now);
/* Free e now: out of the heap, the hash table and the index. */
void do_mem_entry_free(struct mem_shard *s, struct mem_entry *e);
/* A new entry for key in s (no holder, no waiter), or NULL. */
struct mem_entry *
do_mem_entry_new(struct mem_shard *s, const char *key, size_t len, uint64_t h);
/* Is a change to e that may let someone in (an expiry, a release, a place
 * given up) to be notified: waiters queued, or a refused multi-key acquire
 * (whose mark it clears: that notification is now on its way)? */
bool do_mem_wake_due(struct mem_entry *e);

/* multi.c: the multi-key ops of the table */
enum backend_result mem_be_acquire_multi(struct backend *be,
                                         const struct lock_multi_req *req,
                                         struct lock_multi_grant *out);
enum backend_result mem_be_renew_multi(struct backend *be,
                                       const struct lock_multi_req *req,
                                       struct lock_multi_grant *out);
enum backend_result mem_be_release_multi(struct backend *be,
                                         const struct lock_multi_req *req,
                                         struct lock_multi_grant *out);

/* list.c */
enum backend_result mem_be_list(struct backend *be,
                                const struct lock_list_req *req,
                                struct lock_list *out);

/* sweep.c */
void *mem_sweeper_main(void *arg);
/* Free e, its holders and its queued places (at close). */
void mem_entry_free(struct mem_entry *e);

#endif /* BACKENDS_MEMORY_MEM_INT_H */
