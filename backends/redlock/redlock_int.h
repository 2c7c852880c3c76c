/*
 * backends/redlock/redlock_int.h - what the files of the redlock://
 * adapter share and nothing else includes. Redlock runs every operation
 * on N independent Redis masters at once (the redis adapter's fan-out,
 * backends/redis/redis_int.h "fan.c") and counts a majority of them.
 *
 *   redlock.c  the ops table: open, close, describe, nodes, ping, and the
 *              URL (one redis:// URL per node)
 *   nodes.c    node state: the admission and quarantine rules (pure) and
 *              the monitor thread that applies them
 *   vote.c     the pure rules that combine the nodes' answers
 *   ops.c      acquire, renew, release, inspect, force_release
 *   multi.c    acquire_multi, renew_multi, release_multi
 *   list.c     list, held_count
 *
 * Functions and types are named redlock_*; macros REDLOCK_*.
 */
#ifndef BACKENDS_REDLOCK_REDLOCK_INT_H
#define BACKENDS_REDLOCK_REDLOCK_INT_H

#include "backends/backend.h"
#include "backends/redis/redis_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REDLOCK_NODES_MIN    3
#define REDLOCK_NODES_MAX    BACKEND_NODES_MAX /* 9 */
#define REDLOCK_MONITOR_MS   250               /* the monitor's period */
#define REDLOCK_HELD_MS      200               /* held_count()'s deadline */
#define REDLOCK_MAX_TTL_MS   86400000          /* hooks.max_ttl_ms unknown */
#define REDLOCK_DRIFT_MAX_MS 60000
#define REDLOCK_MARKER       "redlock" /* after the prefix */
#define REDLOCK_URL_MAX      2048

/* ---- the URL (redlock.c) ---- */

struct redlock_cfg {
    size_t n;                      /* nodes, odd, 3..9 */
    char *urls[REDLOCK_NODES_MAX]; /* owned: each node's redis:// */
    char names[REDLOCK_NODES_MAX][BACKEND_NODE_NAME]; /* "host:port" */
    char *prefix;     /* owned: the key prefix */
    int64_t drift_ms; /* -1: 1 % of the TTL + 2 */
    bool trust_fsync;
};

/* Parse a redlock:// URL into cfg (zeroed first): OK; INVALID with a
 * message starting "redlock: " in err; NO_MEMORY. On any result but OK,
 * cfg holds nothing. */
enum backend_result redlock_parse_url(const char *url,
                                      struct redlock_cfg *cfg,
                                      char *err,
                                      size_t errlen);
void redlock_cfg_free(struct redlock_cfg *cfg); /* accepts zeroed */

/* ---- node state (nodes.c) ---- */

enum redlock_state {
    REDLOCK_UNKNOWN = 0, /* not admitted yet */
    REDLOCK_VOTING,
    REDLOCK_QUARANTINED,
};

struct redlock_nstate {
    enum redlock_state state;
    char run_id[41];          /* the server we admitted; "" before */
    int64_t quarantine_until; /* monotonic ms; QUARANTINED only */
    bool up;                  /* answered the last check */
    int64_t latency_us;       /* the last check's round trip; -1 unknown */
    bool marked;              /* the marker was there at the last check */
};

/* What the rules need to know besides one node's sight. */
struct redlock_rules {
    int64_t hold_ms;  /* max TTL + drift: how long a node that lost its
                         data is not counted */
    bool trust_fsync; /* trust_fsync=1 */
    size_t seen;      /* nodes whose identity and marker were read in this
                         pass (first sight only) */
    size_t quorum;
    bool any_marked; /* one of those had the marker */
};

/* The rule's effects, for the caller to act on. */
#define REDLOCK_ACT_SET_MARKER 0x1u /* SET <prefix>redlock <run_id> on it */
#define REDLOCK_ACT_CHANGED    0x2u /* the state changed: log it */

/*
 * Apply the node-state rules (docs/redlock.md, "Restart safety") to st,
 * given the identity id of the server a connection read, marker and now
 * (monotonic ms). The marker key holds the run_id of the server process
 * that was admitted: marker is 1 when it names id's run_id (admitted, not
 * restarted since), 2 when it names another run (restarted with its old
 * data), 0 when it is missing (a new deployment, or the data is gone),
 * -1 not read. Pure: no lock, no I/O. Returns REDLOCK_ACT_* flags.
 */
unsigned redlock_node_step(struct redlock_nstate *st,
                           const struct redis_identity *id,
                           int marker,
                           int64_t now_ms,
                           const struct redlock_rules *r);
/* The monotonic ms a server with identity id restarted, at the latest
 * (Redis's uptime_in_seconds is the difference of two truncated seconds,
 * so the true uptime is above uptime_s - 1). */
int64_t redlock_restart_ms(const struct redis_identity *id);

/* ---- the adapter's state ---- */

struct redlock_be {
    struct backend base; /* first */
    struct backend_hooks hooks;
    struct redlock_cfg cfg;
    size_t n, quorum;
    struct redis_be *nodes[REDLOCK_NODES_MAX]; /* owned (redis_backend) */
    int64_t timeout_ms;                        /* a node's command timeout */
    int64_t connect_ms;                        /* a node's connect timeout */
    int64_t max_ttl_ms; /* hooks.max_ttl_ms, or REDLOCK_MAX_TTL_MS */

    pthread_mutex_t lock; /* guards st and checked_ms */
    struct redlock_nstate st[REDLOCK_NODES_MAX];
    int64_t checked_ms;  /* monotonic: the last check of every node */
    pthread_cond_t cond; /* monotonic; signalled on stopping */
    pthread_t monitor;
    bool monitor_started;
    atomic_bool stopping;
};

extern const struct backend_ops redlock_backend;

/* drift for a TTL of ttl_ms: drift_ms, or ttl/100 + 2. */
int64_t redlock_drift(const struct redlock_be *be, uint64_t ttl_ms);

/* One pass of the monitor on the calling thread: PING, identities,
 * markers, the rules, marker SETs; each fan waits wait_ms at most. */
void redlock_check(struct redlock_be *be, int64_t wait_ms);
/* Start the monitor thread: 0, or -1. Stop it (if started). */
int redlock_monitor_start(struct redlock_be *be);
void redlock_monitor_stop(struct redlock_be *be);

/*
 * After a fan-out on this thread: voting[i] = node i's answer counts
 * (it answered, the node is VOTING and the connection that carried the
 * answer reads the run_id the node state knows). A connection to a
 * restarted server runs the restart rule first. benched (may be NULL):
 * benched[i] = node i is QUARANTINED, so no answer of its could count,
 * whether it answered or not.
 */
void redlock_voting(struct redlock_be *be,
                    const struct redis_fan *f,
                    bool *voting,
                    bool *benched);

/* ---- vote.c: pure rules over the nodes' answers ---- */

/* One node's answer to an operation, as the combiners read it. */
struct redlock_vote {
    enum backend_result res; /* the parser's result; meaningless when
                                !answered */
    bool answered;           /* a reply came and parsed (not UNAVAILABLE) */
    bool voting;             /* it counts (see redlock_voting) */
    bool benched;            /* quarantined: its answer could not count
                                had it said yes (not "uncounted") */
    bool sent;               /* written: the node may have run it */
    struct lock_grant g;     /* the parsed grant (acquire, renew, release) */
};

/* What the acquire combiner decided. */
enum redlock_verdict {
    REDLOCK_V_REPLAY = 0, /* answer the replay (token, fence, ttl) */
    REDLOCK_V_GRANT,      /* write back fence to refence[], then count */
    REDLOCK_V_REFUSE,     /* undo[] then answer res */
};

struct redlock_acq_plan {
    enum redlock_verdict v;
    enum backend_result res;         /* REFUSE: the result */
    uint64_t fence;                  /* REPLAY, GRANT: the fence */
    uint64_t ttl_ms;                 /* REPLAY: the quorum-th largest ttl */
    uint64_t retry_ms;               /* REFUSE HELD */
    uint64_t expired_fence;          /* GRANT */
    size_t replay_from;              /* REPLAY: a node whose answer it is */
    bool refence[REDLOCK_NODES_MAX]; /* GRANT: fence below F */
    bool undo[REDLOCK_NODES_MAX];    /* release req->token there */
};

/* The k-th largest (1-based) of v[0..n), or 0 when n < k. v reordered. */
uint64_t redlock_kth_largest(uint64_t *v, size_t n, size_t k);

/* Steps 2..5 of SPEC "Acquire" over v[0..n), elapsed and drift already
 * known (replay ttl: the quorum-th largest minus both). */
void redlock_acquire_plan(const struct redlock_vote *v,
                          size_t n,
                          size_t quorum,
                          int64_t spent_ms,
                          struct redlock_acq_plan *p);
/* GRANT after the write-back: holders[i] = node i holds the key at the
 * fence (and voted). OK when >= quorum of them and validity > 0. */
bool redlock_grant_holds(const bool *holders,
                         const bool *voting,
                         size_t n,
                         size_t quorum,
                         int64_t validity_ms);

/*
 * The refusal of renew or release (no quorum of OK): UNAVAILABLE when
 * OK votes + uncounted nodes reach the quorum; HOLDS_MAX when a quorum
 * said so; else MISMATCH when MISMATCH votes >= NOT_FOUND votes and > 0,
 * else NOT_FOUND. *lost: the lock is lost (not UNAVAILABLE).
 */
enum backend_result redlock_refusal(const struct redlock_vote *v,
                                    size_t n,
                                    size_t quorum,
                                    bool *lost);
/* OK answers that count. */
size_t
redlock_count(const struct redlock_vote *v, size_t n, enum backend_result res);
/* Nodes whose answer does not count (no reply, or not voting). */
size_t redlock_uncounted(const struct redlock_vote *v, size_t n);

/* ---- ops.c, multi.c, list.c: backend_ops' members ---- */

enum backend_result redlock_acquire(struct backend *b,
                                    const struct lock_req *req,
                                    struct lock_grant *out);
enum backend_result redlock_renew(struct backend *b,
                                  const struct lock_req *req,
                                  struct lock_grant *out);
enum backend_result redlock_release(struct backend *b,
                                    const struct lock_req *req,
                                    struct lock_grant *out);
enum backend_result redlock_inspect(struct backend *b,
                                    const char *key,
                                    size_t key_len,
                                    struct lock_info *out);
enum backend_result redlock_force_release(struct backend *b,
                                          const char *key,
                                          size_t key_len,
                                          struct lock_info *out);
enum backend_result redlock_acquire_multi(struct backend *b,
                                          const struct lock_multi_req *req,
                                          struct lock_multi_grant *out);
enum backend_result redlock_renew_multi(struct backend *b,
                                        const struct lock_multi_req *req,
                                        struct lock_multi_grant *out);
enum backend_result redlock_release_multi(struct backend *b,
                                          const struct lock_multi_req *req,
                                          struct lock_multi_grant *out);
enum backend_result redlock_list(struct backend *b,
                                 const struct lock_list_req *req,
                                 struct lock_list *out);
int64_t redlock_held_count(struct backend *b);

/* Run c on the nodes which[] names (NULL: all) at once, until
 * deadline_us; f[0..n) indexed by node, zeroed for the others. */
void redlock_fan(struct redlock_be *be,
                 const bool *which,
                 const struct redis_call *c,
                 int64_t deadline_us,
                 struct redis_fan *f);
/* t0 + min(timeout, ttl - drift) (ttl 0: t0 + timeout), in monotonic us;
 * 0 when ttl leaves no time at all. */
int64_t
redlock_deadline(const struct redlock_be *be, int64_t t0_us, uint64_t ttl_ms);
/* ms since t0_us, rounded up. */
int64_t redlock_elapsed_ms(int64_t t0_us);
/* Call hooks.notify for key (if set). */
void redlock_notify(struct redlock_be *be, const char *key, size_t key_len);

/* Release token on the nodes undo[] names (all holds; one fan; best
 * effort, answers ignored). */
void redlock_undo(struct redlock_be *be,
                  const char *key,
                  size_t key_len,
                  const char *token,
                  const bool *undo);

#endif /* BACKENDS_REDLOCK_REDLOCK_INT_H */
