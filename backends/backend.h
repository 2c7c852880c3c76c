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
 *  - Safety: at any moment at most one token holds a key; a grant, renew
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

#define LOCK_KEY_MAX   512 /* bytes, after percent-decoding */
#define LOCK_OWNER_MAX 128 /* bytes */
#define LOCK_TOKEN_MAX 64  /* bytes of a token lockd itself makes */
#define LOCK_FENCE_MAX ((UINT64_C(1) << 53) - 1)

/*
 * Capabilities, each read by lockd:
 * QUEUE: acquire() with a waiter keeps the waiter's place in a FIFO in
 * the store, shared by every instance on it; a try-once acquire (no
 * waiter) never goes before a queued waiter (HELD with behind set). Read by
 * service/waitq.c (parks waiters in the store's order) and shown as
 * "fifo":"store" in /healthz; without it the order is kept per instance.
 */
#define BACKEND_CAP_QUEUE 0x1u

enum backend_result {
    BACKEND_OK = 0,
    BACKEND_HELD,        /* another token holds the key, or (QUEUE) an
                            earlier waiter goes first */
    BACKEND_NOT_FOUND,   /* free: never held, released or expired */
    BACKEND_MISMATCH,    /* held, under another token */
    BACKEND_UNAVAILABLE, /* the store could not be asked or did not answer
                            in time: never a grant */
    BACKEND_NO_MEMORY,   /* out of memory in lockd: nothing changed */
    BACKEND_INVALID,     /* open(): the URL is malformed or unsupported;
                            any call: an argument breaks this contract
                            (the wrappers answer it before the adapter) */
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
};

struct lock_grant {
    uint64_t fence;         /* < 2^53, grows with every grant of the key */
    uint64_t ttl_ms;        /* the TTL the lock now runs with */
    int64_t expires_at_ms;  /* unix ms by the store's clock, informational */
    uint64_t retry_ms;      /* BACKEND_HELD only: when a retry may succeed
                               (the holder's remaining TTL); 0 = unknown */
    bool behind;            /* BACKEND_HELD with a waiter on a queueing
                               store: no one holds the key, but an earlier
                               waiter in the store's queue goes first */
    int64_t valid_until_us; /* OK: set by backend_acquire()/backend_renew(),
                               not by adapters: monotonic us when the call
                               was sent + ttl_ms, the latest instant the
                               grant can still be valid */
};

struct lock_info {
    uint64_t fence;
    uint64_t ttl_ms;       /* remaining, >= 1 while held */
    int64_t expires_at_ms; /* unix ms */
    bool has_owner;
    char owner[LOCK_OWNER_MAX + 1];
};

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

struct backend_hooks {
    backend_notify_fn notify; /* may be NULL */
    void *arg;
};

struct backend { /* first member of every adapter's state */
    const struct backend_ops *ops;
    int64_t call_timeout_ms; /* set by open(): the longest one call may wait
                                for the store (its timeout option); 0 for a
                                store that never waits on I/O (memory), whose
                                calls run on the caller's thread */
};

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
     * Grant req->key under req->token if it is free (and, with a waiter on
     * a QUEUE store, if that waiter is first in the store's queue).
     * OK: out->fence, ttl_ms (= req->ttl_ms), expires_at_ms set; the waiter
     * (if any) has left the queue and its be_data is freed.
     * HELD: out->retry_ms = the holder's remaining TTL (0 if unknown),
     * out->behind when no one holds the key but an earlier waiter goes
     * first; with a waiter, its place is kept. UNAVAILABLE, NO_MEMORY.
     */
    enum backend_result (*acquire)(struct backend *be,
                                   const struct lock_req *req,
                                   struct lock_grant *out);
    /*
     * Move the expiry of req->key, held by req->token, to now + ttl
     * (req->ttl_ms, or the lock's last TTL when 0). OK: out->fence (the
     * same), ttl_ms, expires_at_ms. NOT_FOUND (free), MISMATCH (held by
     * another token), UNAVAILABLE, NO_MEMORY.
     */
    enum backend_result (*renew)(struct backend *be,
                                 const struct lock_req *req,
                                 struct lock_grant *out);
    /*
     * Free req->key if req->token holds it; a waiter on the key, on any
     * instance, is then notified (see backend_notify_fn). OK, NOT_FOUND,
     * MISMATCH (nothing changed), UNAVAILABLE, NO_MEMORY.
     */
    enum backend_result (*release)(struct backend *be,
                                   const struct lock_req *req);
    /*
     * Read the lock on key without changing it. OK: out filled (ttl_ms is
     * what remains, >= 1). NOT_FOUND (free), UNAVAILABLE, NO_MEMORY.
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
    /* Can the store be asked right now? OK or UNAVAILABLE (for /readyz). */
    enum backend_result (*ping)(struct backend *be);
    /* Locks held right now, or -1 when the store cannot tell cheaply. May
     * be NULL (-1). Never blocks on the store for long: for /metrics. */
    int64_t (*held_count)(struct backend *be);
    /* Free everything; accepts NULL. No call runs during or after it. */
    void (*close)(struct backend *be);
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

/* The operations the wrappers time and count, as metrics label indexes. */
enum backend_op {
    BACKEND_OP_ACQUIRE = 0,
    BACKEND_OP_RENEW,
    BACKEND_OP_RELEASE,
    BACKEND_OP_INSPECT,
    BACKEND_OP_CANCEL_WAIT,
    BACKEND_OP_PING,
    BACKEND_OP_COUNT,
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
                                    const struct lock_req *req);
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

/* What is left of an OK grant at monotonic time now_us, in whole ms
 * (rounded to nearest, at least 1 while any is left): 0 once it may have
 * expired. Counted from when the store call was sent, so time spent in
 * lockd and in the store is taken off, never added. */
uint64_t backend_grant_left_ms(const struct lock_grant *g, int64_t now_us);

#endif /* BACKENDS_BACKEND_H */
