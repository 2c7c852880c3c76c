/*
 * backends/backend.h - the one interface every lock store implements
 * (memory, redis, zookeeper, mysql), the scheme registry and the timed,
 * counted wrappers that api/ and service/ call. Backends never see HTTP,
 * JSON or libmicrohttpd.
 *
 * Waiting is split between the store and service/waitq.c (see the
 * README, "How it is built"): acquire() grants or answers BACKEND_HELD with a
 * retry hint; the caller parks the waiter and retries when the backend's
 * notify hook names the key, or when the hint's time comes. Backends with
 * BACKEND_CAP_QUEUE keep the waiter's place in their own FIFO (memory,
 * zookeeper), so the order holds across every instance sharing the store.
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

#define BACKEND_CAP_QUEUE                               \
    0x1u /* acquire() queues waiters in the store: FIFO \
            across all instances on that store */
#define BACKEND_CAP_NOTIFY                                              \
    0x2u                         /* releases and expiries through other \
                                    instances reach notify() */
#define BACKEND_CAP_DURABLE 0x4u /* locks and fences outlive this process */

enum backend_result {
    BACKEND_OK = 0,
    BACKEND_HELD,      /* another token holds the key (or waiters are ahead) */
    BACKEND_NOT_FOUND, /* free: never held, released or expired */
    BACKEND_MISMATCH,  /* held, under another token */
    BACKEND_UNAVAILABLE, /* unreachable or timed out: never a grant */
    BACKEND_NO_MEMORY,
    BACKEND_INVALID, /* open(): the URL is malformed or unsupported */
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
 * locks held, whenever key may have become free: a release through this
 * instance, a release or expiry seen through another instance. May be
 * spurious; must not be missed. key is borrowed for the call only.
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
    const char *scheme; /* "memory", "redis", "zookeeper", "mysql" */
    unsigned caps;      /* BACKEND_CAP_* */

    /*
     * Parse url, build state; *out is NULL on failure. BACKEND_INVALID for
     * a bad URL (lockd exits 2). A store that cannot be reached yet is not
     * a failure: open() succeeds and later calls answer UNAVAILABLE until it
     * can. hooks is copied.
     */
    enum backend_result (*open)(const char *url,
                                const struct backend_hooks *hooks,
                                struct backend **out,
                                char *err,
                                size_t errlen);
    /* Every call below may run at once on all worker threads. */

    /* Grant req->key under req->token if free (and, with a waiter on a
     * queueing store, if the waiter is first). HELD fills out->retry_ms. */
    enum backend_result (*acquire)(struct backend *be,
                                   const struct lock_req *req,
                                   struct lock_grant *out);
    /* req->token must hold req->key; moves its expiry to now + ttl. */
    enum backend_result (*renew)(struct backend *be,
                                 const struct lock_req *req,
                                 struct lock_grant *out);
    /* Frees req->key if req->token holds it; notifies waiters. */
    enum backend_result (*release)(struct backend *be,
                                   const struct lock_req *req);
    enum backend_result (*inspect)(struct backend *be,
                                   const char *key,
                                   size_t key_len,
                                   struct lock_info *out);
    /* Gives up waiter's place (if any); frees waiter->be_data. May be NULL
     * for stores that keep no place. */
    enum backend_result (*cancel_wait)(struct backend *be,
                                       const char *key,
                                       size_t key_len,
                                       struct lock_waiter *waiter);
    enum backend_result (*ping)(struct backend *be); /* for /readyz */
    /* Locks currently held, or -1 when the store cannot tell cheaply. */
    int64_t (*held_count)(struct backend *be);
    void (*close)(struct backend *be); /* accepts NULL */
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

/* Wrappers: time and count every call (metrics), check NULL members. */
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
