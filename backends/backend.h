/*
 * backends/backend.h - the contract between lockd and a lock store, and the
 * wrappers api/ and service/ call. An adapter is a folder backends/NAME/
 * whose ops table is `const struct backend_ops NAME_backend`; the Makefile
 * finds the folder and backend.c's table lists it (no list to edit). An
 * adapter includes this header and lib/ only: it never sees HTTP, JSON,
 * libmicrohttpd, the wait queue or metrics.
 *
 * The rules every adapter keeps (tests/unit/test_contract.c checks them on
 * every adapter through this table):
 *  - Safety: at any moment a key is free, held by one token in exclusive
 *    mode, or held in shared mode by at most its limit of tokens (never
 *    beside an exclusive holder); a grant, renew
 *    or release is one atomic step in the store (a Lua script, a ZooKeeper
 *    multi, one transaction, a shard lock), never compare-then-act; expiry
 *    is judged by the store's clock; the fence of every grant of a key is
 *    greater than that of every earlier grant of that key, across restarts
 *    of lockd (and of the store, where it is durable).
 *  - Failure: when the store cannot be asked or does not answer in time,
 *    the call returns BACKEND_UNAVAILABLE, never a guess; a write whose
 *    outcome is unknown must leave nothing a later caller could mistake
 *    for a grant to someone else (or the grant must expire by its TTL).
 *  - Time: no call blocks longer than backend.call_timeout_ms (plus the
 *    time to take a local lock); open() and close() may take up to about
 *    one connect timeout. Calls never sleep to wait for a key: waiting is
 *    service/waitq.c's job.
 *  - Threads: every call but open() and close() may run at once on all
 *    worker threads, for the same key or not. close() runs once, after
 *    every other call has returned.
 *  - Memory: everything passed in is borrowed for the call only, except
 *    struct lock_waiter (see below); results are written into the caller's
 *    structs, which the wrappers zero first.
 *
 * Waiting is split between the store and service/waitq.c (README, "How it
 * is built"): acquire() grants or answers BACKEND_HELD with a retry hint;
 * the caller parks the waiter and retries when the notify hook names the
 * key, or when the hint's time comes. Stores with BACKEND_CAP_QUEUE keep
 * the waiter's place in their own FIFO, so the order holds across every
 * instance sharing the store.
 */
#ifndef BACKENDS_BACKEND_H
#define BACKENDS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LOCK_KEY_MAX       512 /* bytes, after percent-decoding */
#define LOCK_OWNER_MAX     128 /* bytes */
#define LOCK_TOKEN_MAX     64  /* bytes of a token lockd itself makes */
#define LOCK_FENCE_MAX     ((UINT64_C(1) << 53) - 1)
#define LOCK_IDEM_MAX      128     /* bytes of an Idempotency-Key */
#define LOCK_LIMIT_MAX     10000   /* the greatest limit of a shared key */
#define LOCK_HOLDS_MAX     1000000 /* the greatest hold count of one token */
#define LOCK_HOLDERS_SHOWN 100     /* holders inspect() lists, by fence */
#define LOCK_MULTI_MAX     64      /* keys of one multi-key request */
#define LOCK_LIST_MAX      1000    /* keys of one list() page */

/*
 * The two modes of a hold. A key is free, held EXCLUSIVE by one token, or
 * held SHARED by 1..limit tokens (no limit: 0). Each holder has its own
 * token, fence, TTL, owner, hold count (re-entries) and Idempotency-Key.
 * The limit belongs to the key while anyone holds it.
 */
enum lock_mode {
    LOCK_EXCLUSIVE = 0,
    LOCK_SHARED = 1,
};

/*
 * Capabilities, each read by lockd:
 * QUEUE: acquire() with a waiter keeps the waiter's place in a FIFO in
 * the store, shared by every instance on it; a try-once acquire (no
 * waiter) never goes before a queued waiter (HELD with behind set). Read by
 * service/waitq.c (parks waiters in the store's order) and shown as
 * "fifo":"store" in /healthz; without it the order is kept per instance.
 */
#define BACKEND_CAP_QUEUE 0x1u
/*
 * HELD_LAGS: held_count() is the count as of a recent moment (the
 * adapter's last sweep pass, say), not right now: the adapter says how
 * old it may be. For /metrics; the contract suite checks it only for sense.
 */
#define BACKEND_CAP_HELD_LAGS 0x2u
/*
 * NO_SEMAPHORE: a shared acquire with a limit above 1 cannot be kept
 * safe by this store (a Redlock majority: with 3 nodes and limit 2, three
 * holders can each sit on a majority while no node has more than 2).
 * api/ answers it 400 invalid_parameter naming the backend before the
 * adapter runs; limit 0 (no limit) and 1 are served.
 */
#define BACKEND_CAP_NO_SEMAPHORE 0x4u
/*
 * NOTIFIES: a waiter needs no poll. The notify hook names every key whose
 * holder left through any instance on the store, a HELD answer's retry
 * hint covers a TTL passing, and when the adapter may have missed some
 * notifications (its subscription to the store broke) it calls
 * notify_all once it hears again. service/waitq.c then retries a parked
 * single-key waiter only on those, not every 2 s as for other stores (see
 * WQ_RETRY_MAX_MS and WQ_RETRY_NOTIFIED_MS): idle waiters cost nothing.
 */
#define BACKEND_CAP_NOTIFIES 0x8u
/*
 * BATCH: batch() sends the calls of several requests to the store at
 * once (see there). Read by service/waitq.c, which then makes the first
 * calls of single-key requests in batches, one batch in flight at a time.
 * An adapter whose batch() would make one call after another as the URL
 * sets it up (a Redis Cluster, say) turns it off, and keeps its calls
 * running side by side on the workers.
 */
#define BACKEND_CAP_BATCH 0x10u

enum backend_result {
    BACKEND_OK = 0,
    BACKEND_HELD,           /* another token holds the key, or (QUEUE) an
                               earlier waiter goes first */
    BACKEND_NOT_FOUND,      /* free: never held, released or expired */
    BACKEND_MISMATCH,       /* held, under another token */
    BACKEND_UNAVAILABLE,    /* the store could not be asked or did not answer
                               in time: never a grant */
    BACKEND_NO_MEMORY,      /* out of memory in lockd: nothing changed */
    BACKEND_INVALID,        /* open(): the URL is malformed or unsupported;
                               any call: an argument breaks this contract
                               (the wrappers answer it before the adapter) */
    BACKEND_LIMIT_MISMATCH, /* shared acquire: the key is held shared
                               under another limit (nothing changed) */
    BACKEND_HOLDS_MAX,      /* re-entry: the token already has
                               LOCK_HOLDS_MAX holds (nothing changed) */
    BACKEND_IDEM_CONFLICT,  /* acquire: the Idempotency-Key names a live
                               grant of another mode or limit */
    BACKEND_KEYS_APART,     /* multi-key: the store cannot change these
                               keys in one step (a Redis Cluster: they
                               do not share a hash tag); nothing changed */
};

/*
 * One waiting client, owned by the caller (service/waitq.c). It lives from
 * the first acquire() that names it until that acquire() (or a later one)
 * returns BACKEND_OK, or until cancel_wait() returns. The caller never
 * calls acquire() and cancel_wait() for the same waiter at once.
 */
struct lock_waiter {
    uint64_t id;         /* unique in this process, never 0 */
    int64_t deadline_ms; /* wall clock (unix ms) when the wait runs out;
                            a queueing store may reap the place after it */
    void *be_data;       /* the backend's own state for this waiter: NULL
                            before the first acquire(); the backend frees it
                            on grant and in cancel_wait() */
};

struct lock_req {
    const char *key; /* borrowed; 1..LOCK_KEY_MAX bytes of valid UTF-8,
                        no control characters, NUL-terminated */
    size_t key_len;
    const char *token;          /* borrowed; acquire: the token to grant under
                                   (made by the caller); renew/release: the
                                   client's token, any ASCII string */
    const char *owner;          /* borrowed; NULL when none was given */
    uint64_t ttl_ms;            /* acquire: 1..max; renew: 0 = keep the lock's
                                   last TTL */
    struct lock_waiter *waiter; /* acquire only; NULL = try once and take no
                                   place in any queue */
    enum lock_mode mode;        /* acquire: the mode asked for */
    uint32_t limit;             /* acquire, SHARED only: 1..LOCK_LIMIT_MAX
                                   holders at most; 0 = no limit */
    const char *idem_key;       /* acquire: the Idempotency-Key, 1..
                                   LOCK_IDEM_MAX printable ASCII; NULL =
                                   none */
    bool reenter;               /* renew: re-entry, one more hold as well */
    bool all;                   /* release: give back every hold at once */
};

struct lock_grant {
    uint64_t fence;         /* < 2^53, grows with every grant of the key */
    uint64_t ttl_ms;        /* the TTL the lock now runs with */
    int64_t expires_at_ms;  /* unix ms by the store's clock, informational */
    uint64_t retry_ms;      /* BACKEND_HELD only: when a retry may succeed
                               (the holder's remaining TTL); 0 = unknown */
    bool behind;            /* BACKEND_HELD with a waiter on a queueing
                               store: an earlier waiter in the store's
                               queue goes first, and the caller should try
                               its own waiters behind this one (set when
                               the holders leave room; a store whose
                               wake-ups reach one waiter each also sets
                               it when that earlier waiter is one of
                               this instance's, held or not) */
    int64_t valid_until_us; /* OK: set by backend_acquire()/backend_renew(),
                               not by adapters: monotonic us when the call
                               was sent + ttl_ms, the latest instant the
                               grant can still be valid */
    enum lock_mode mode;    /* OK (acquire, renew): the holder's mode */
    uint32_t limit;         /* OK, SHARED: the key's limit; 0 = none */
    uint32_t holds;         /* OK: the token's holds now (acquire: 1, or the
                               replayed grant's; release: what is left, 0
                               when the token no longer holds the key) */
    bool replay;            /* acquire OK: req->idem_key named a live grant,
                               which is answered again: token is its token,
                               ttl_ms what is left of it; nothing changed */
    uint64_t expired_fence; /* acquire OK (not a replay): the greatest fence
                               of the holders of the key whose TTL had
                               passed and that this grant's atomic step
                               found (a takeover); 0 = none, or the store
                               cannot tell (say so in the adapter) */
    int64_t granted_at_ms;  /* release OK with holds 0: unix ms by the
                               store's clock when the hold just given back
                               was granted (for the hold-time histogram);
                               0 = unknown */
    char token[LOCK_TOKEN_MAX + 1]; /* replay only */
};

/*
 * Several keys at once (POST, PUT and DELETE /locks): n distinct keys,
 * each a key as in lock_req, in the client's order (an adapter that must
 * take locks in a fixed order sorts its own copy). Multi-key holds are
 * EXCLUSIVE, one token for all the keys, each key afterwards an ordinary
 * exclusive lock for the single-key calls (renew, release, inspect).
 */
struct lock_multi_req {
    size_t n;                /* 1..LOCK_MULTI_MAX */
    const char *const *keys; /* borrowed; n distinct keys, NUL-terminated */
    const size_t *key_lens;
    const char *token; /* acquire: the token to grant under (made by the
                          caller); renew/release: the client's token */
    const char *owner; /* acquire: borrowed; NULL when none was given */
    uint64_t ttl_ms;   /* acquire: 1..max; renew: 0 = each key's last TTL */
};

struct lock_multi_grant {
    uint64_t ttl_ms;        /* OK (acquire, renew): the TTL the keys now run
                               with (renew with 0: the least of them) */
    int64_t expires_at_ms;  /* OK: the earliest expiry of the keys, unix ms
                               by the store's clock, informational */
    int64_t valid_until_us; /* OK: set by the wrappers, as in lock_grant */
    uint64_t retry_ms;      /* acquire HELD: the time until the first TTL
                               among the held keys' holders passes; 0 =
                               unknown (only queued waiters, say) */
    size_t bad;             /* renew NOT_FOUND/MISMATCH: index of the first
                               key (in req order) the token does not hold */
    uint64_t fences[LOCK_MULTI_MAX]; /* OK (acquire, renew): by index */
    bool held[LOCK_MULTI_MAX];       /* acquire HELD: the keys that have a
                                        holder or (QUEUE) a queued waiter */
    bool released[LOCK_MULTI_MAX];   /* release OK: the keys released */
};

/* One holder of a key, as inspect() shows it (never its token). */
struct lock_holder {
    uint64_t fence;
    uint64_t ttl_ms;       /* remaining, >= 1 */
    int64_t expires_at_ms; /* unix ms */
    uint32_t holds;
    bool has_owner;
    char owner[LOCK_OWNER_MAX + 1];
};

/*
 * A held key. The top-level fields sum up the holders: fence is the
 * greatest fence held, ttl_ms and expires_at_ms those of the holder that
 * expires last; owner and holds are the exclusive holder's (unset for a
 * shared key). holders is malloc'ed by the adapter (lock_info_clear()
 * frees it): the first min(holder_count, LOCK_HOLDERS_SHOWN) holders by
 * ascending fence.
 */
struct lock_info {
    uint64_t fence;
    uint64_t ttl_ms;       /* remaining, >= 1 while held */
    int64_t expires_at_ms; /* unix ms */
    bool has_owner;
    char owner[LOCK_OWNER_MAX + 1];
    enum lock_mode mode;
    uint32_t limit; /* SHARED: the key's limit; 0 = none */
    uint32_t holds; /* EXCLUSIVE: the holder's hold count */
    uint32_t holder_count;
    uint32_t nholders;
    struct lock_holder *holders;
};

/*
 * One held key as list() shows it: struct lock_info's summary, without
 * the holders (and never a token).
 */
struct lock_entry {
    char key[LOCK_KEY_MAX + 1]; /* NUL-terminated */
    size_t key_len;
    enum lock_mode mode;
    uint64_t fence;        /* the greatest fence held */
    uint64_t ttl_ms;       /* remaining of the holder that expires last, >= 1 */
    int64_t expires_at_ms; /* unix ms, that holder's */
    uint32_t holder_count;
    bool has_owner; /* EXCLUSIVE only: the holder's owner */
    char owner[LOCK_OWNER_MAX + 1];
};

/*
 * A page of held keys (GET /locks): the keys that start with prefix and
 * sort after `after` (memcmp order, a key before every longer key it
 * starts), in that order.
 */
struct lock_list_req {
    const char *prefix; /* borrowed; 0..LOCK_KEY_MAX bytes, no NUL inside */
    size_t prefix_len;
    const char *after; /* borrowed; NULL = from the first key; else a key
                          (valid as for lock_req), NUL-terminated */
    size_t after_len;
    uint32_t limit; /* 1..LOCK_LIST_MAX */
};

struct lock_list {
    struct lock_entry *entries; /* the caller's array of req->limit entries */
    size_t n;                   /* entries filled, ascending, <= limit */
    bool more;                  /* keys may follow: the next page is the
                                   keys after resume */
    char resume[LOCK_KEY_MAX + 1]; /* more: entries[n-1].key when the page
                                      is full, else the last key the
                                      adapter looked at (n may then be
                                      below limit, even 0) */
    size_t resume_len;
};

/* Free info->holders and zero info. Accepts a zeroed info. */
void lock_info_clear(struct lock_info *info);

/*
 * Called by a backend, from any of its threads and without any of its
 * locks held, whenever key may have become free for a waiter: a release or
 * an expiry, through this instance or another one on the same store. It
 * must not be missed while a waiter (of this instance) waits on the key:
 * after acquire() answered it HELD, and until it is granted or cancelled;
 * with no waiter it may be skipped, and it may always be spurious. Expiry
 * may also be left to the retry hint (lock_grant.retry_ms). key is
 * borrowed for the call only.
 */
typedef void (*backend_notify_fn)(void *arg, const char *key, size_t key_len);

/*
 * Called by an adapter whose own background work (a sweeper) removed a
 * holder because its TTL passed: the key, that holder's fence and owner
 * (NULL: none). From the adapter's thread, without its locks held; every
 * argument borrowed for the call. An expiry that a grant finds is told
 * through lock_grant.expired_fence instead.
 */
typedef void (*backend_expired_fn)(void *arg,
                                   const char *key,
                                   size_t key_len,
                                   uint64_t fence,
                                   const char *owner);

/*
 * Called by an adapter that may have missed notifications (BACKEND_CAP_
 * NOTIFIES: its subscription broke and is back): every key with waiters
 * is to be tried again. From the adapter's thread, without its locks held.
 */
typedef void (*backend_notify_all_fn)(void *arg);

struct backend_hooks {
    backend_notify_fn notify;         /* may be NULL */
    backend_notify_all_fn notify_all; /* may be NULL; called with arg */
    void *arg;
    backend_expired_fn expired; /* may be NULL; called with expired_arg */
    void *expired_arg;
    uint64_t max_ttl_ms; /* the longest TTL lockd grants (--max-ttl-ms);
                            0 = unknown (a test's caller): an adapter
                            that needs it assumes 86400000 */
};

/*
 * One node of a store made of independent servers (redlock://), as the
 * adapter last saw it: for /readyz and /metrics. Filled by
 * backend_ops.nodes() from what the adapter already knows: never a store
 * call.
 */
#define BACKEND_NODES_MAX 9
#define BACKEND_NODE_NAME 64 /* bytes of "host:port", with its NUL */

struct backend_node {
    char name[BACKEND_NODE_NAME]; /* "host:port" as the URL names it */
    bool up;                      /* answered its last check */
    bool voting;                  /* its grants count now */
    bool quarantined;      /* restarted or lost its data: not voting until
                              quarantine_ms passes */
    int64_t quarantine_ms; /* quarantined: ms left, else 0 */
    int64_t latency_us;    /* its last check's round trip; -1 unknown */
};

/*
 * The guarantees of the store lockd runs on, for /readyz and the README's
 * "Guarantees by backend and topology": the deployment the URL names,
 * where fences come from, and what a failover or the loss of a store node
 * can lose. Fixed when open() returns; describe() never asks the store.
 */
#define BACKEND_TOPOLOGY_MAX 16  /* bytes of topology, with its NUL */
#define BACKEND_PHRASE_MAX   256 /* bytes of fence or failover, with NUL */

struct backend_topology {
    char topology[BACKEND_TOPOLOGY_MAX]; /* "process" (in lockd), "single"
                                            (one server), "sentinel",
                                            "cluster", "ensemble" */
    char fence[BACKEND_PHRASE_MAX];      /* where fences come from, one
                                            short phrase */
    char failover[BACKEND_PHRASE_MAX];   /* what a failover, a restart or
                                            the loss of a node can lose */
    unsigned nodes; /* store nodes the URL names (a ZooKeeper ensemble's
                       servers, the Sentinels, a Cluster's seeds); 0 for a
                       store inside lockd */
};

struct backend { /* first member of every adapter's state */
    const struct backend_ops *ops;
    int64_t call_timeout_ms; /* set by open(): the longest one call may wait
                                for the store (its timeout option); 0 for a
                                store that never waits on I/O (memory), whose
                                calls run on the caller's thread */
    unsigned caps_off;       /* set by open(): the ops' BACKEND_CAP_* this
                                store lacks as its URL sets it up */
};

/* The most calls one batch() carries (struct backend_call, below). */
#define BACKEND_BATCH_MAX 32
struct backend_call;

struct backend_ops {
    const char *scheme; /* the URL scheme and folder name: "redis" */
    unsigned caps;      /* BACKEND_CAP_* */

    /*
     * Parse url and build the state; on success *out is the new backend
     * (its ops and call_timeout_ms set). Results: OK; INVALID for a bad or
     * unsupported URL, with a message in err (errlen bytes, NUL-terminated,
     * starting with the scheme; lockd prints it and exits 2); NO_MEMORY.
     * A store that cannot be reached yet is not a failure: open() succeeds
     * and later calls answer UNAVAILABLE until it can. hooks is copied
     * (may be NULL); the adapter calls hooks->notify from its own threads.
     */
    enum backend_result (*open)(const char *url,
                                const struct backend_hooks *hooks,
                                struct backend **out,
                                char *err,
                                size_t errlen);

    /*
     * Grant req->key under req->token in req->mode if the key allows it
     * (and, with a waiter on a QUEUE store, if no waiter ahead of it in
     * the store's queue goes first).
     * First, with req->idem_key: if a live holder of the key was granted
     * with that Idempotency-Key, answer it again (OK, out->replay, its
     * token, fence, mode, limit, holds and remaining ttl_ms; nothing
     * changes), or IDEM_CONFLICT if its mode or limit differ from req's.
     * Then, in one atomic step with the holders' expiry:
     *  - EXCLUSIVE: granted when the key has no holder;
     *  - SHARED: LIMIT_MISMATCH if the key is held shared under another
     *    limit (whatever the waiter); granted when the key has no holder,
     *    or shared holders fewer than the limit;
     *  - a try-once acquire (no waiter) on a QUEUE store is HELD (behind)
     *    while anyone waits; a waiter is granted only if every waiter
     *    ahead of it is SHARED, it is SHARED too, and the holders plus
     *    those waiters ahead leave room under the limit; an EXCLUSIVE
     *    waiter only when first and the key is free.
     * OK: out->fence, ttl_ms (= req->ttl_ms), expires_at_ms, mode, limit,
     * holds (1) set; the grant remembers req->owner and req->idem_key; the
     * waiter (if any) has left the queue and its be_data is freed.
     * HELD: out->retry_ms = the time until the first holder's TTL passes
     * (0 if unknown), out->behind when the holders leave room but an
     * earlier waiter goes first (or, where a wake-up reaches one waiter
     * only, when an earlier waiter is this instance's: see behind);
     * with a waiter, its place is kept.
     * UNAVAILABLE, NO_MEMORY.
     */
    enum backend_result (*acquire)(struct backend *be,
                                   const struct lock_req *req,
                                   struct lock_grant *out);
    /*
     * Move the expiry of req->key's holder req->token to now + ttl
     * (req->ttl_ms, or the holder's last TTL when 0); with req->reenter,
     * also one more hold (HOLDS_MAX, nothing changed, if it has
     * LOCK_HOLDS_MAX). OK: out->fence (the same), ttl_ms, expires_at_ms,
     * mode, limit, holds. NOT_FOUND (no holder at all), MISMATCH (held,
     * but not by this token), UNAVAILABLE, NO_MEMORY.
     */
    enum backend_result (*renew)(struct backend *be,
                                 const struct lock_req *req,
                                 struct lock_grant *out);
    /*
     * Give back one hold of req->token on req->key (every hold with
     * req->all); at the last, the token no longer holds the key and a
     * waiter on the key, on any instance, is notified (see
     * backend_notify_fn). OK: out->holds = the holds left (0: gone).
     * NOT_FOUND (no holder), MISMATCH (not held by this token; nothing
     * changed), UNAVAILABLE, NO_MEMORY.
     */
    enum backend_result (*release)(struct backend *be,
                                   const struct lock_req *req,
                                   struct lock_grant *out);
    /*
     * Read the lock on key without changing it. OK: out filled (see struct
     * lock_info; ttl_ms is what remains, >= 1). NOT_FOUND (free),
     * UNAVAILABLE, NO_MEMORY.
     */
    enum backend_result (*inspect)(struct backend *be,
                                   const char *key,
                                   size_t key_len,
                                   struct lock_info *out);
    /*
     * Give up waiter's place on key (if it has one) and free its be_data.
     * OK (also when it had no place); UNAVAILABLE when the store could not
     * be told: the place is then reaped after waiter->deadline_ms. May be
     * NULL for stores that keep no place.
     */
    enum backend_result (*cancel_wait)(struct backend *be,
                                       const char *key,
                                       size_t key_len,
                                       struct lock_waiter *waiter);
    /*
     * Several keys at once, each call ONE atomic step in the store over
     * all the keys (one Lua script, one ZooKeeper multi, one transaction
     * that locks its rows in a fixed order, the memory shards' locks
     * taken in a fixed order): no other call ever sees some of the keys
     * changed and others not, and two multi-key calls (or a multi-key and
     * a single-key one) never deadlock.
     *
     * acquire_multi: grant every key EXCLUSIVE under req->token (holds 1,
     * req->owner, req->ttl_ms), each with a fence as a single grant of it
     * would get (greater than every earlier grant of that key), if every
     * key has no holder and, on a QUEUE store, no waiter in its queue (a
     * multi-key acquire never overtakes a queued waiter, and keeps no
     * place in any queue: waiting is retrying, by service/waitq.c, when
     * the notify hook names one of the keys or the retry hint comes).
     * Otherwise nothing changes. OK: fences[i], ttl_ms, expires_at_ms.
     * HELD: held[i] for each key that has a holder or a queued waiter,
     * retry_ms. The store arranges, on HELD, that a later release,
     * expiry or dequeue of each held key notifies this instance, though
     * the multi-key request keeps no place in its queue: where wake-ups
     * reach only those who asked (ZooKeeper watches), or where a release
     * notifies only while someone is queued (memory, Redis), it marks
     * the held keys (a watch, a flag, a short-lived mark key).
     * UNAVAILABLE, NO_MEMORY. May be NULL in an adapter that has none
     * (the wrappers answer INVALID).
     */
    enum backend_result (*acquire_multi)(struct backend *be,
                                         const struct lock_multi_req *req,
                                         struct lock_multi_grant *out);
    /*
     * renew_multi: if req->token holds every key, move each key's expiry
     * to now + ttl (req->ttl_ms, or that key's last TTL when 0), hold
     * counts kept. OK: fences[i] (unchanged), ttl_ms, expires_at_ms.
     * Otherwise nothing is renewed: NOT_FOUND (key out->bad has no
     * holder) or MISMATCH (it is held, but not by this token), for the
     * first such key in req order. UNAVAILABLE, NO_MEMORY.
     */
    enum backend_result (*renew_multi)(struct backend *be,
                                       const struct lock_multi_req *req,
                                       struct lock_multi_grant *out);
    /*
     * release_multi: give back every hold of req->token on each key it
     * holds (as release() with all), keys it does not hold untouched;
     * waiters on each released key, on every instance, are notified. OK:
     * released[i] for the keys released (at least one). NOT_FOUND when
     * the token held none of them. UNAVAILABLE, NO_MEMORY.
     */
    enum backend_result (*release_multi)(struct backend *be,
                                         const struct lock_multi_req *req,
                                         struct lock_multi_grant *out);
    /*
     * List the held keys of req (see struct lock_list_req), at most
     * req->limit of them, each as inspect() would sum it up at the moment
     * it was read: only keys with a live holder (expired holders are left
     * out, and may be reaped); waiters alone do not make a key held. The
     * cost of one call is bounded by req->limit (times a constant the
     * adapter states), never by the number of keys held or stored: an
     * adapter that has looked at its budget of candidates without filling
     * the page stops early with more set and resume at the last key it
     * looked at. Not a snapshot: a key granted or freed while a client
     * pages may or may not appear; a key held throughout appears on
     * exactly one page. OK (out->n, more, resume), UNAVAILABLE, NO_MEMORY.
     */
    enum backend_result (*list)(struct backend *be,
                                const struct lock_list_req *req,
                                struct lock_list *out);
    /*
     * An operator frees key whatever its holders and hold counts
     * (DELETE /locks/{key}?force=true): in one atomic step every holder
     * is removed (with its Idempotency-Key), the key's fence counter is
     * kept, so the next grant's fence is greater than every fence the
     * removed holders had, and waiters on the key, on every instance, are
     * notified as after a release. OK: out = the holders removed, as
     * inspect() would have shown them (holder_count, the greatest fence,
     * the first LOCK_HOLDERS_SHOWN holders). NOT_FOUND (no live holder;
     * expired ones may be reaped), UNAVAILABLE, NO_MEMORY.
     */
    enum backend_result (*force_release)(struct backend *be,
                                         const char *key,
                                         size_t key_len,
                                         struct lock_info *out);
    /* Can the store be asked right now? OK or UNAVAILABLE (for /readyz). */
    enum backend_result (*ping)(struct backend *be);
    /* Holders right now (a key held shared by three tokens counts 3), or
     * -1 when the store cannot tell cheaply. May be NULL (-1). Never
     * blocks on the store for long: for /metrics. */
    int64_t (*held_count)(struct backend *be);
    /* Free everything; accepts NULL. No call runs during or after it. */
    void (*close)(struct backend *be);
    /*
     * Fill out (zeroed by the wrapper) with what this store, as the URL
     * configured it, guarantees: every string NUL-terminated, from the
     * adapter's reading of its own recipe. Reads only what open() fixed;
     * never asks the store, never blocks; any thread, any time between
     * open() and close(). May be NULL (the wrapper says "unknown").
     */
    void (*describe)(const struct backend *be, struct backend_topology *out);
    /*
     * A store of independent nodes (redlock://): fill out[0..max) with
     * its nodes as last checked and return how many it has (at most
     * BACKEND_NODES_MAX), and the majority its grants need in *quorum.
     * Never asks the store, never blocks; any thread. May be NULL (the
     * wrapper returns 0: no per-node view).
     */
    size_t (*nodes)(const struct backend *be,
                    struct backend_node *out,
                    size_t max,
                    unsigned *quorum);
    /*
     * Run n single-key calls (acquire, renew or release: see struct
     * backend_call) of n different requests with fewer round trips than n
     * calls would make: their commands written to the store at once, the
     * answers read back in one go. Each call is its own atomic step and
     * answers exactly as the single op would (result and out), in any
     * order against the others, as concurrent requests may; the batch as
     * a whole keeps to call_timeout_ms, and when the store stops
     * answering, each call without an answer is UNAVAILABLE. calls[i].req
     * and out are the caller's; n is 1..BACKEND_BATCH_MAX. May be NULL:
     * service/waitq.c then makes one call per request.
     */
    void (*batch)(struct backend *be, struct backend_call *calls, size_t n);
};

/* Text for a result, for logs. Never NULL. */
const char *backend_result_str(enum backend_result r);

/*
 * Find the adapter for url's scheme and open it. BACKEND_INVALID (and a
 * message in err) for an unknown scheme, an adapter not built in, or a bad
 * URL. err is written as a NUL-terminated string of at most errlen bytes.
 */
enum backend_result backend_open(const char *url,
                                 const struct backend_hooks *hooks,
                                 struct backend **out,
                                 char *err,
                                 size_t errlen);
void backend_close(struct backend *be);

/* The schemes built into this binary, comma separated, e.g. for --help. */
const char *backend_schemes(void);
/* The i-th adapter built in (0 is memory), NULL past the last. */
const struct backend_ops *backend_adapter(size_t i);

/* True if key[0..key_len) is a key the contract lets reach an adapter:
 * 1..LOCK_KEY_MAX bytes of valid UTF-8 without control characters,
 * NUL-terminated. */
bool backend_key_ok(const char *key, size_t key_len);
/* True if k is an Idempotency-Key the contract allows: 1..LOCK_IDEM_MAX
 * printable ASCII characters (0x20..0x7e), NUL-terminated. */
bool backend_idem_key_ok(const char *k);

/* The operations the wrappers time and count, as metrics label indexes. */
enum backend_op {
    BACKEND_OP_ACQUIRE = 0,
    BACKEND_OP_RENEW,
    BACKEND_OP_RELEASE,
    BACKEND_OP_INSPECT,
    BACKEND_OP_CANCEL_WAIT,
    BACKEND_OP_PING,
    BACKEND_OP_LIST,
    BACKEND_OP_FORCE_RELEASE,
    BACKEND_OP_COUNT,
};

/* One call of a batch: op is BACKEND_OP_ACQUIRE, _RENEW or _RELEASE; req
 * and out as the single op takes them; result its answer. */
struct backend_call {
    enum backend_op op;
    const struct lock_req *req;
    struct lock_grant *out;
    enum backend_result result;
};
extern const char *const backend_op_names[BACKEND_OP_COUNT];

const char *backend_scheme(const struct backend *be);
unsigned backend_caps(const struct backend *be);

/*
 * Wrappers: what api/ and service/ call. Each checks its arguments against
 * the contract once (INVALID before the adapter runs: a key that is not
 * 1..LOCK_KEY_MAX bytes of UTF-8 without control characters, an acquire
 * token of more than LOCK_TOKEN_MAX bytes, an owner over LOCK_OWNER_MAX),
 * zeroes *out, times and counts the call (metrics) and, for grants, sets
 * out->valid_until_us. NULL members (cancel_wait, held_count) are handled.
 */
enum backend_result backend_acquire(struct backend *be,
                                    const struct lock_req *req,
                                    struct lock_grant *out);
enum backend_result backend_renew(struct backend *be,
                                  const struct lock_req *req,
                                  struct lock_grant *out);
enum backend_result backend_release(struct backend *be,
                                    const struct lock_req *req,
                                    struct lock_grant *out);
/* batch: each call checked as its wrapper checks it (INVALID, not sent),
 * the rest through the adapter's batch() in one go (one call after
 * another without one), then counted and stamped (valid_until_us) as the
 * single wrappers do. n is 1..BACKEND_BATCH_MAX. backend_batches(): does
 * this store take batches (BACKEND_CAP_BATCH, and a batch())? */
void backend_batch(struct backend *be, struct backend_call *calls, size_t n);
bool backend_batches(const struct backend *be);
enum backend_result backend_inspect(struct backend *be,
                                    const char *key,
                                    size_t key_len,
                                    struct lock_info *out);
enum backend_result backend_cancel_wait(struct backend *be,
                                        const char *key,
                                        size_t key_len,
                                        struct lock_waiter *waiter);
enum backend_result backend_ping(struct backend *be);
int64_t backend_held_count(struct backend *be);
/* describe: out zeroed, then the adapter's; "unknown" for an adapter
 * without the op or for a field it left empty. Not timed: no store call. */
void backend_describe(const struct backend *be, struct backend_topology *out);
/* nodes: out[0..max) and *quorum zeroed, then the adapter's; 0 for an
 * adapter without the op. Not timed: no store call. */
size_t backend_nodes(const struct backend *be,
                     struct backend_node *out,
                     size_t max,
                     unsigned *quorum);
/* list: INVALID before the adapter runs for a limit outside
 * 1..LOCK_LIST_MAX, a prefix over LOCK_KEY_MAX bytes or with a NUL, an
 * after that is not a valid key, out->entries NULL, or an adapter
 * without the op; out->n, more and resume zeroed first (entries kept). */
enum backend_result backend_list(struct backend *be,
                                 const struct lock_list_req *req,
                                 struct lock_list *out);
/* force_release: INVALID for a bad key or an adapter without the op. */
enum backend_result backend_force_release(struct backend *be,
                                          const char *key,
                                          size_t key_len,
                                          struct lock_info *out);

/* The multi-key wrappers: INVALID before the adapter runs for n outside
 * 1..LOCK_MULTI_MAX, a bad or repeated key, or a token or owner as above
 * (and for an adapter without the op); out zeroed; timed and counted as
 * the single-key op; OK grants get valid_until_us. */
enum backend_result backend_acquire_multi(struct backend *be,
                                          const struct lock_multi_req *req,
                                          struct lock_multi_grant *out);
enum backend_result backend_renew_multi(struct backend *be,
                                        const struct lock_multi_req *req,
                                        struct lock_multi_grant *out);
enum backend_result backend_release_multi(struct backend *be,
                                          const struct lock_multi_req *req,
                                          struct lock_multi_grant *out);
/* True if the n keys of req are valid and pairwise distinct. */
bool backend_multi_keys_ok(const struct lock_multi_req *req);

/* What is left of an OK grant at monotonic time now_us, in whole ms
 * (rounded to nearest, at least 1 while any is left): 0 once it may have
 * expired. Counted from when the store call was sent, so time spent in
 * lockd and in the store is taken off, never added. */
uint64_t backend_grant_left_ms(const struct lock_grant *g, int64_t now_us);

#endif /* BACKENDS_BACKEND_H */
