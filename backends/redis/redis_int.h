/*
 * backends/redis/redis_int.h - what the files of the Redis adapter share
 * and nothing else includes: the adapter's state, the limits, the
 * scripts' named arguments and each file's entry points. One header
 * rather than one per file: the parts are small and call each other.
 *
 *   redis.c       the ops table: open, close and the operations
 *   options.c     the redis:// URL
 *   conn.c        one hiredis context per worker thread, reconnects,
 *                 back-off, availability logging
 *   scripts.c     the Lua scripts: loading, EVALSHA, NOSCRIPT, not-after
 *   library.c     the scripts as Redis 7 functions, FCALL (library.h)
 *   multi.c       several keys at once: one script over all of them
 *   inspect.c     inspect.lua's reply into a struct lock_info, and
 *                 force_release, whose reply is the same
 *   list.c        list (the index of held keys) and held_count
 *   queue.c       a waiter's place in a key's queue, failed cancels
 *   subscriber.c  the thread that hears releases through other instances
 *   sentinel.c    redis+sentinel://: the primary the Sentinels name
 *   replicas.c    min_replicas: WAIT after grants and renews
 *   cluster.c     redis+cluster://: slots, the slot map, routing, MOVED/ASK
 *   clusterdir.c  redis+cluster://: the directory list() and held_count()
 *                 read there
 *   fan.c         one call on several independent servers at once (what
 *                 redlock:// is built from), and the server's identity
 *
 * Functions and types are named redis_*; macros and enum constants
 * REDIS_BE_*, as hiredis owns REDIS_*.
 */
#ifndef BACKENDS_REDIS_REDIS_INT_H
#define BACKENDS_REDIS_REDIS_INT_H

#include "backends/backend.h"
#include "backends/threadconn.h"
#include "lib/url.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#define REDIS_BE_DEFAULT_HOST   "127.0.0.1"
#define REDIS_BE_DEFAULT_PORT   6379
#define REDIS_BE_DEFAULT_PREFIX "lockd:"
#define REDIS_BE_PASSWORD_ENV \
    "LOCKD_BACKEND_PASSWORD" /* no password in the URL */
#define REDIS_BE_PREFIX_MAX          256
#define REDIS_BE_CONNECT_TIMEOUT_MS  500
#define REDIS_BE_TIMEOUT_MS          1000
#define REDIS_BE_TIMEOUT_MAX_MS      60000
#define REDIS_BE_REPLICAS_MAX        16  /* min_replicas, at most */
#define REDIS_BE_REPLICAS_TIMEOUT_MS 200 /* WAIT's timeout, default */
#define REDIS_BE_BACKOFF_MIN_MS      50
#define REDIS_BE_BACKOFF_MAX_MS      1000
#define REDIS_BE_SUB_POLL_MS         100 /* close() stops the subscriber in this */
#define REDIS_BE_SUB_PING_MS         5000 /* idle subscriber checks its link */
#define REDIS_BE_LOG_EVERY_MS        1000 /* rate limit of repeated warnings */
#define REDIS_BE_INSTANCE_BYTES      8    /* random bytes of an instance id */
#define REDIS_BE_WAITER_MAX          48   /* instance id ':' waiter id */
#define REDIS_BE_GRACE_MS            1000 /* holders.lua's grace */
/* how long a key a multi-key acquire found held stays marked beyond the
 * retry hint: the waiter's next try comes by then and marks it again */
#define REDIS_BE_MARK_MS        5000
#define REDIS_BE_TRASH_MAX      4096 /* failed cancels kept to retry */
#define REDIS_BE_TRASH_EVERY_MS 100  /* how often they are retried */
/* held_count() drops at most REDIS_BE_STALE_BATCH seconds passed of the
 * holders' counts, and looks up as many index members (see list.c) */
#define REDIS_BE_STALE_BATCH 64
/* list(): index entries looked at per call, at most */
#define REDIS_BE_LIST_BUDGET(limit) (2 * (limit) + 16)
/* how long the holders' counts and the index outlive the last holder,
 * and a fence counter redlock wrote back its key's holders (holders.lua's
 * retain; clusterdir.c's directory keeps a key's entries as long past its
 * expiry) */
#define REDIS_BE_RETAIN_MS 60000
/* the kind of a slot's fence counter: redis_key_name() names the counter
 * of the key's slot, not one of the key (redis.c) */
#define REDIS_BE_SLOT_FENCE "fence#"
/* how many slot counters there are on one Redis (a cluster has one per
 * hash slot, each beside its locks): a few kB in all, and few enough
 * that they soon all exist, so the distinct keys locked add nothing */
#define REDIS_BE_FENCE_SLOTS 1024
/* the prefix-wide keys, after the prefix (redis.c) */
#define REDIS_BE_INDEX  "keys"
#define REDIS_BE_COUNTS "counts"
/* prefix + "fence:{" + key + "}", the longest kind (with "mwait:"), and
 * in cluster mode "{" + 16 hex + "}" after the prefix */
#define REDIS_BE_KEYBUF \
    (REDIS_BE_PREFIX_MAX + REDIS_BE_CLUSTER_TAG + 8 + LOCK_KEY_MAX + 1)
/* cluster.c: the hash slots, the nodes a map may name (at most), and the
 * bytes of the tag "{" + 16 hex + "}" each key gets in cluster mode */
#define REDIS_BE_CLUSTER_SLOTS     16384
#define REDIS_BE_CLUSTER_NODES_MAX 64
#define REDIS_BE_CLUSTER_TAG       18

/* ---- the scripts and their arguments ---- */

enum redis_script {
    REDIS_BE_SCRIPT_ACQUIRE = 0,
    REDIS_BE_SCRIPT_RENEW,
    REDIS_BE_SCRIPT_RELEASE,
    REDIS_BE_SCRIPT_INSPECT,
    REDIS_BE_SCRIPT_CANCEL,
    REDIS_BE_SCRIPT_ACQUIRE_MULTI, /* KEYS and ARGV: see multi.c */
    REDIS_BE_SCRIPT_RENEW_MULTI,
    REDIS_BE_SCRIPT_RELEASE_MULTI,
    REDIS_BE_SCRIPT_LIST,
    REDIS_BE_SCRIPT_FORCE,
    REDIS_BE_SCRIPT_HELD,
    REDIS_BE_SCRIPT_REFENCE, /* KEYS and ARGV: see fan.c */
    REDIS_BE_SCRIPT_COUNT,
};

/*
 * Each script's arguments in the order it reads them: its KEYS, then its
 * ARGV (the .lua file names them again, in the same order, at its top).
 * A stamped script (acquire, renew) gets one more ARGV, last, from
 * redis_script_run(): the not-after time in Redis's clock.
 */
enum redis_acquire_arg {
    REDIS_BE_ACQ_LOCK,       /* KEYS: the lock hash */
    REDIS_BE_ACQ_FENCE,      /* the key's own counter, if any: taken over */
    REDIS_BE_ACQ_QUEUE,      /* the queue of waiter ids */
    REDIS_BE_ACQ_DEADLINES,  /* waiter id -> deadline [" s " limit] */
    REDIS_BE_ACQ_EXP,        /* shared holders' expiries */
    REDIS_BE_ACQ_INDEX,      /* the index of held keys (prefix-wide) */
    REDIS_BE_ACQ_HELD,       /* the holders' counts (prefix-wide) */
    REDIS_BE_ACQ_MWAIT,      /* the mark of a waiter that keeps no place */
    REDIS_BE_ACQ_SLOT_FENCE, /* the fence counter of the key's slot */
    REDIS_BE_ACQ_NKEYS,
    REDIS_BE_ACQ_TOKEN = REDIS_BE_ACQ_NKEYS, /* ARGV */
    REDIS_BE_ACQ_TTL,                        /* ms */
    REDIS_BE_ACQ_HAS_OWNER,                  /* "1" or "0" */
    REDIS_BE_ACQ_OWNER,                      /* "" when none */
    REDIS_BE_ACQ_WAITER,    /* the waiter's id; "" = try once */
    REDIS_BE_ACQ_WAIT_LEFT, /* ms left of its wait, >= 0 */
    REDIS_BE_ACQ_INSTANCE,  /* this instance's waiter id prefix */
    REDIS_BE_ACQ_CHANNEL,   /* the release channel */
    REDIS_BE_ACQ_KEY,       /* the lockd key, for PUBLISH */
    REDIS_BE_ACQ_MODE,      /* "0" exclusive, "1" shared */
    REDIS_BE_ACQ_LIMIT,     /* shared: the limit, "0" = none */
    REDIS_BE_ACQ_IDEM,      /* the Idempotency-Key; "" = none */
    REDIS_BE_ACQ_FLOOR,     /* "1": every fence >= Redis's clock in us */
    REDIS_BE_ACQ_MARK,      /* ms; try-once and not granted: the mwait
                               mark lives retry hint + this; "0" = none */
    REDIS_BE_ACQ_NARGS,
};

enum redis_renew_arg {
    REDIS_BE_REN_LOCK, /* KEYS */
    REDIS_BE_REN_EXP,
    REDIS_BE_REN_HELD,
    REDIS_BE_REN_FENCE, /* the key's own counter: unused, left as it is */
    REDIS_BE_REN_INDEX, /* expires with the holders, as the held set */
    REDIS_BE_REN_NKEYS,
    REDIS_BE_REN_TOKEN = REDIS_BE_REN_NKEYS, /* ARGV */
    REDIS_BE_REN_TTL,                        /* ms; "0" = the stored TTL */
    REDIS_BE_REN_REENTER,                    /* "1": one more hold */
    REDIS_BE_REN_NARGS,
};

enum redis_release_arg {
    REDIS_BE_REL_LOCK, /* KEYS */
    REDIS_BE_REL_QUEUE,
    REDIS_BE_REL_EXP,
    REDIS_BE_REL_MWAIT, /* marked while a multi-key acquire waits */
    REDIS_BE_REL_INDEX,
    REDIS_BE_REL_HELD,
    REDIS_BE_REL_FENCE, /* the key's own counter, if any: goes too */
    REDIS_BE_REL_NKEYS,
    REDIS_BE_REL_TOKEN = REDIS_BE_REL_NKEYS, /* ARGV */
    REDIS_BE_REL_ALL,                        /* "1": every hold */
    REDIS_BE_REL_CHANNEL,
    REDIS_BE_REL_KEY,
    REDIS_BE_REL_NARGS,
};

enum redis_inspect_arg {
    REDIS_BE_INS_LOCK, /* KEYS */
    REDIS_BE_INS_EXP,
    REDIS_BE_INS_NKEYS,
    REDIS_BE_INS_NARGS = REDIS_BE_INS_NKEYS, /* no ARGV */
};

enum redis_cancel_arg {
    REDIS_BE_CAN_QUEUE, /* KEYS */
    REDIS_BE_CAN_DEADLINES,
    REDIS_BE_CAN_LOCK,
    REDIS_BE_CAN_MWAIT,
    REDIS_BE_CAN_NKEYS,
    REDIS_BE_CAN_WAITER = REDIS_BE_CAN_NKEYS, /* ARGV */
    REDIS_BE_CAN_CHANNEL,
    REDIS_BE_CAN_KEY,
    REDIS_BE_CAN_NARGS,
};

enum redis_list_arg {
    REDIS_BE_LST_INDEX, /* KEYS */
    REDIS_BE_LST_NKEYS,
    REDIS_BE_LST_PREFIX = REDIS_BE_LST_NKEYS, /* ARGV: be->prefix */
    REDIS_BE_LST_MIN,                         /* ZRANGEBYLEX's bounds */
    REDIS_BE_LST_MAX,
    REDIS_BE_LST_LIMIT,
    REDIS_BE_LST_BUDGET, /* index entries to look at, at most */
    REDIS_BE_LST_NARGS,
};

enum redis_force_arg {
    REDIS_BE_FRC_LOCK, /* KEYS */
    REDIS_BE_FRC_EXP,
    REDIS_BE_FRC_QUEUE,
    REDIS_BE_FRC_MWAIT,
    REDIS_BE_FRC_INDEX,
    REDIS_BE_FRC_HELD,
    REDIS_BE_FRC_FENCE,
    REDIS_BE_FRC_NKEYS,
    REDIS_BE_FRC_CHANNEL = REDIS_BE_FRC_NKEYS, /* ARGV */
    REDIS_BE_FRC_KEY,
    REDIS_BE_FRC_NARGS,
};

enum redis_held_arg {
    REDIS_BE_HLD_HELD, /* KEYS */
    REDIS_BE_HLD_INDEX,
    REDIS_BE_HLD_NKEYS,
    REDIS_BE_HLD_BATCH = REDIS_BE_HLD_NKEYS, /* ARGV */
    REDIS_BE_HLD_NARGS,
};

#define REDIS_BE_KEYS_MAX REDIS_BE_ACQ_NKEYS /* the most KEYS of a script */
/* acquire_multi.lua's KEYS per lockd key (multi.c's acquire_kinds) */
#define REDIS_BE_MULTI_ACQ_KEYS 7
#define REDIS_BE_ARGS_MAX       REDIS_BE_ACQ_NARGS /* the most KEYS + ARGV */

/* One script call's KEYS and ARGV, set by name (the enums above), with
 * room for the Redis key names it builds. */
struct redis_args {
    const char *v[REDIS_BE_ARGS_MAX];
    size_t len[REDIS_BE_ARGS_MAX];
    char keys[REDIS_BE_KEYS_MAX][REDIS_BE_KEYBUF];
};

/* ---- the adapter's state ---- */

/* Who a server is, as a connection read it when it was dialled (fan.c). */
struct redis_identity {
    char run_id[41];    /* INFO server's run_id; "" unknown */
    int64_t uptime_s;   /* its uptime_in_seconds then */
    int64_t dialled_ms; /* monotonic ms when read */
    bool fsync_always;  /* INFO persistence aof_enabled:1 and CONFIG GET
                           appendfsync "always" (false when CONFIG is
                           refused) */
};

/* What a connection loaded (scripts.c): each script's digest for
 * EVALSHA, and whether the library of functions is there to FCALL (Redis
 * 7 or later); fn_refused: an FCALL was refused by the ACL, so that no
 * later dial of this connection turns FCALL on again. */
struct redis_loaded {
    char sha[REDIS_BE_SCRIPT_COUNT][41];
    bool fn;
    bool fn_refused;
};

/* One worker thread's connection, kept in be->conns (conn.c). */
struct redis_conn {
    struct threadconn tc; /* first: back-off, the set's list */
    struct redis_be *be;  /* borrowed */
    redisContext *ctx;    /* owned; NULL while disconnected; cluster mode:
                             borrowed from cnodes[node] */
    /* cluster mode (cluster.c): this call's slot (-1: any node), the node
     * it went to, and one context per node (owned array) */
    int slot;
    int node;
    struct redis_cnode *cnodes;
    int64_t offset_ms; /* Redis's unix ms minus our monotonic ms */
    unsigned gen;      /* sentinel: the primary's generation when dialled */
    struct redis_loaded scripts;
    /* be->want_identity: read by the dial of ctx (has_identity false
       while ctx was dialled without it) */
    bool has_identity;
    struct redis_identity identity;
};

/* A waiter's place in a key's queue: lock_waiter.be_data (queue.c). */
struct redis_wait {
    char id[REDIS_BE_WAITER_MAX]; /* this instance's id ':' waiter->id */
    int64_t end_ms; /* monotonic: when the wait runs out, taken from the
                       waiter's wall-clock deadline once, on the first try,
                       so a step of the wall clock later changes nothing */
};

/* A place to take out of a queue once Redis answers again: a cancel that
 * failed. Without it, the place would keep a free key from everyone else
 * until its deadline. */
struct redis_trash {
    struct redis_trash *next;
    int64_t until_ms; /* monotonic: the place's deadline plus the grace;
                         past it, Redis drops the place by itself */
    char id[REDIS_BE_WAITER_MAX];
    size_t key_len;
    char key[]; /* key_len bytes, not NUL-terminated */
};

/* Which Redis deployment the URL names (options.c). */
enum redis_topology {
    REDIS_BE_SINGLE = 0, /* redis://: one server */
    REDIS_BE_SENTINEL,   /* redis+sentinel://: the primary the Sentinels
                            name (sentinel.c) */
    REDIS_BE_CLUSTER,    /* redis+cluster://: a Redis Cluster (cluster.c) */
};

/* One host:port of a URL's list (the Sentinels, or a Cluster's seeds). */
struct redis_addr {
    char *host; /* owned */
    int port;
};

struct sentinel_state; /* sentinel.c */
struct cluster_state;  /* cluster.c */

struct redis_be {
    struct backend base; /* first */
    struct backend_hooks hooks;
    enum redis_topology topology;
    /* REDIS_BE_SENTINEL: the Sentinels; REDIS_BE_CLUSTER: the seed nodes;
     * REDIS_BE_SINGLE: none (host and port below) */
    struct redis_addr *addrs; /* owned, naddrs of them */
    size_t naddrs;
    char *master_name;               /* owned; REDIS_BE_SENTINEL only */
    struct sentinel_state *sentinel; /* owned; REDIS_BE_SENTINEL only */
    struct cluster_state *cluster;   /* owned; REDIS_BE_CLUSTER only */
    /* ?min_replicas=N: a grant or renew counts only once N replicas
     * acknowledged it (WAIT N replicas_timeout_ms); 0: no WAIT */
    int min_replicas;
    int64_t replicas_timeout_ms;
    char *host; /* owned; REDIS_BE_SINGLE: the server; else the node the
                   per-thread connections are to dial (see conn.c) */
    int port;
    char *user;     /* owned; NULL: AUTH with the password only */
    char *password; /* owned; NULL: no AUTH */
    unsigned db;
    char *prefix; /* owned */
    size_t prefix_len;
    char *channel; /* owned: prefix "released:" db */
    /* random hex id ':', the prefix of this instance's waiter ids */
    char instance[2 * REDIS_BE_INSTANCE_BYTES + 2];
    int64_t connect_ms; /* connect timeout */
    int64_t cmd_ms;     /* command timeout (= base.call_timeout_ms) */

    struct threadconn_set conns; /* every thread's struct redis_conn */
    pthread_mutex_t lock;        /* guards trash and the sub_* fields */
    struct redis_trash *trash;   /* owned; retried by the subscriber */
    size_t ntrash;               /* at most REDIS_BE_TRASH_MAX */
    pthread_cond_t sub_cond;     /* monotonic; signalled on sub_tried and
                                    stopping */
    bool sub_tried;              /* the subscriber made its first attempt */
    pthread_t sub_thread;
    bool sub_started;
    atomic_bool stopping;

    atomic_bool want_identity;   /* every dial reads the identity (fan.c) */
    atomic_int up;               /* last state logged: -1 unknown, 0, 1 */
    _Atomic int64_t last_log_ms; /* for redis_warn() */
};

extern const struct backend_ops redis_backend;

/* ---- options.c ---- */

/* Free what redis_parse_url() set in be (the Cluster state too; the
 * Sentinel watcher is sentinel.c's): close(), and tests of the parser. */
void redis_url_free(struct redis_be *be);
/* [[user]:password@] of u into be (user, password), for every variant. */
enum backend_result redis_parse_auth(struct redis_be *be,
                                     const struct url *u,
                                     char *err,
                                     size_t errlen);
/* A "host[:port],host[:port],..." list (hosts non-empty) into be->addrs,
 * default_port where none is given, at most max; what names one entry in
 * messages ("Sentinel", "cluster node"). */
enum backend_result redis_parse_addrs(struct redis_be *be,
                                      const char *hosts,
                                      unsigned default_port,
                                      size_t max,
                                      const char *what,
                                      char *err,
                                      size_t errlen);
/* s, a piece of a URL for a message, or a note in its place when it may
 * hold part of a password (static; s is returned as it is otherwise). */
const char *redis_url_piece(const char *s);
/* Fill be's settings from url; BACKEND_INVALID with a message in err. */
enum backend_result
redis_parse_url(struct redis_be *be, const char *url, char *err, size_t errlen);

/* ---- describe.c ---- */

/* backend_ops' describe: what /readyz says of the deployment. */
void redis_describe(const struct backend *b, struct backend_topology *out);

/* ---- sentinel.c: REDIS_BE_SENTINEL ---- */

/* redis+sentinel:// hosts and path into be (addrs, master_name, db):
 * BACKEND_OK, BACKEND_INVALID (why in err, starting "redis: "). */
enum backend_result redis_sentinel_parse(struct redis_be *be,
                                         const struct url *u,
                                         char *err,
                                         size_t errlen);

/* Ask the Sentinels for the primary now and start the thread that follows
 * +switch-master: 0, or -1 (no thread). A Sentinel that does not answer is
 * no error: requests answer 503 until one names a primary. */
int redis_sentinel_start(struct redis_be *be);
/* Stop the thread (if started) and free be->sentinel; accepts none. */
void redis_sentinel_free(struct redis_be *be);
/* The primary's generation: it changes whenever the primary does. */
unsigned redis_sentinel_gen(struct redis_be *be);
/* A reply or a broken link says the primary may have changed: ask the
 * Sentinels (one thread at a time, at most every 100 ms; may block for a
 * connect and a command timeout per Sentinel). */
void redis_sentinel_lost(struct redis_be *be);
/* Dial the primary the Sentinels named and confirm ROLE master: a context,
 * or NULL (why in err; the Sentinels are asked again). */
redisContext *
redis_sentinel_dial(struct redis_be *be, char *err, size_t errlen);
/* "host:port (primary of 'name')" into buf, for the log. */
void redis_sentinel_where(struct redis_be *be, char *buf, size_t len);

/* ---- cluster.c: REDIS_BE_CLUSTER ---- */

/* redis+cluster:// hosts and path into be (addrs): BACKEND_OK,
 * BACKEND_INVALID (why in err, starting "redis: "). */
enum backend_result redis_cluster_parse(struct redis_be *be,
                                        const struct url *u,
                                        char *err,
                                        size_t errlen);

/* Cluster mode: the Redis key names of the lock key (redis_key_name)
 * carry "{" h "}" after the prefix; a script's slot is its first key's.
 * Free the shared state (accepts NULL). */
void redis_cluster_free(struct cluster_state *st);
/* CRC16 (XMODEM) as Redis Cluster computes it. */
uint16_t redis_cluster_crc16(const char *buf, size_t len);
/* Redis's hash tag rule: the bytes between the first '{' and the first '}'
 * after it when they are not empty, else the whole key: key[*at..+*n). */
void redis_cluster_tag(const char *key, size_t len, size_t *at, size_t *n);
/* The hash slot of a Redis key name (with the tag rule), 0..16383. */
int redis_cluster_keyslot(const char *key, size_t len);
/* A hash tag of slot (0..16383): the first of "#0".."#zzzz" (base 36,
 * shortest first) whose CRC16 falls in it, NUL-terminated. */
const char *redis_cluster_slot_tag(int slot);
/* h of a lockd key: 16 lowercase hex of FNV-1a 64 of its tag, NUL. */
void redis_cluster_hash(const char *key, size_t len, char out[17]);
/* True if every lockd key's Redis keys land in one slot. */
bool redis_cluster_same_slot(const char *const *keys,
                             const size_t *lens,
                             size_t n);
/* conn.c's hooks in cluster mode: pick (and open) the node of cn->slot;
 * drop the current node's context; one command with MOVED/ASK/TRYAGAIN
 * followed, and WAIT after it when acks (replicas.c) (the reply, or NULL:
 * unavailable); free cn's node contexts. */
int redis_cluster_ready(struct redis_be *be, struct redis_conn *cn);
void redis_cluster_fail(struct redis_be *be,
                        struct redis_conn *cn,
                        const char *why);
redisReply *redis_cluster_command(struct redis_be *be,
                                  struct redis_conn *cn,
                                  int argc,
                                  const char **argv,
                                  const size_t *lens,
                                  long long *acks);
void redis_cluster_conn_drop(struct redis_conn *cn);
/* A plain context to any node that answers (the subscriber's), or NULL. */
redisContext *
redis_cluster_dial_any(struct redis_be *be, char *err, size_t errlen);

/* ---- clusterdir.c: the prefix-wide keys in cluster mode ---- */

/* After a grant or renew that reached Redis: note key's holder (token)
 * until expires_at_ms in the directory (best effort, logged). */
void redis_cluster_note(struct redis_be *be,
                        const char *key,
                        size_t key_len,
                        const char *token,
                        int64_t expires_at_ms);
/* After a release: the holder is gone (best effort). */
void redis_cluster_unnote(struct redis_be *be,
                          const char *key,
                          size_t key_len,
                          const char *token);
/* list() and held_count() in cluster mode. */
enum backend_result redis_cluster_list(struct redis_be *be,
                                       const struct lock_list_req *req,
                                       struct lock_list *out);
int64_t redis_cluster_held_count(struct redis_be *be);

/* ---- conn.c ---- */

/* Warn at most once a second: a down Redis must not flood the log. */
void redis_warn(struct redis_be *be, const char *what, const char *detail);
/* Note that Redis answered (up = 1) or not (0, and why). */
void redis_mark(struct redis_be *be, int up, const char *detail);
/* Cap each step of this thread's dials (connect, every round trip) at ms
 * (0: no cap), for fan.c: a dial ends near a fan-out's deadline. */
void redis_dial_cap(int64_t ms);
/* Connect and AUTH: a context with command timeouts, or NULL and why. */
redisContext *redis_dial(struct redis_be *be, char *err, size_t errlen);
/* The same to host:port (borrowed): cluster nodes, Sentinels. */
redisContext *redis_dial_to(
    struct redis_be *be, const char *host, int port, char *err, size_t errlen);
/* Where be's commands go, for the log: "host:port" and more. */
void redis_where(struct redis_be *be, char *buf, size_t len);
/* Dial host:port (host NULL: as redis_dial), SELECT be->db, load the
 * scripts into sha and measure the clock into *offset: the context, or
 * NULL (why in err). */
redisContext *redis_node_open(struct redis_be *be,
                              const char *host,
                              int port,
                              struct redis_loaded *scripts,
                              int64_t *offset,
                              char *err,
                              size_t errlen);
/* Redis's unix ms minus our monotonic ms into *offset: 0, or -1. */
int redis_clock(redisContext *c, int64_t *offset);

/* Set up and tear down the per-thread connections (pthread key, list). */
int redis_conns_init(struct redis_be *be);
void redis_conns_free(struct redis_be *be);
/* This thread's connection state (created on first use), or NULL. */
struct redis_conn *redis_conn_get(struct redis_be *be);
/* Make sure cn has a context: 0, or -1 while Redis cannot be reached. */
int redis_conn_ready(struct redis_be *be, struct redis_conn *cn);
/* The context broke: drop it and back off. */
void redis_conn_fail(struct redis_be *be,
                     struct redis_conn *cn,
                     const char *why);
/* One command on this thread's connection: the reply, or NULL. */
redisReply *redis_command(struct redis_be *be,
                          int argc,
                          const char **argv,
                          const size_t *lens);
/* The same; with acks, WAIT be->min_replicas follows in the same write
 * and *acks is its answer (-1 when unknown). */
redisReply *redis_command_acked(struct redis_be *be,
                                int argc,
                                const char **argv,
                                const size_t *lens,
                                long long *acks);

/* ---- scripts.c ---- */

/* Pipeline SCRIPT LOAD of every script on c, and FUNCTION LOAD of their
 * library: 0, or -1. */
int redis_scripts_send(redisContext *c);
/* Read those replies into out (out->fn: the library is there; a refused
 * FUNCTION LOAD is no error): 0; -1 on a bad reply (why in err); -2 when
 * the context broke (why in c->errstr). */
int redis_scripts_recv(redisContext *c,
                       struct redis_loaded *out,
                       char *err,
                       size_t errlen);
/* Set argument i of a to s[0..n). */
void redis_arg(struct redis_args *a, int i, const char *s, size_t n);
/* Write be's name of kind "{" key "}" into buf (room for
 * redis_key_len(be, kind, key_len) bytes; no NUL): its length. Kind
 * REDIS_BE_SLOT_FENCE names the fence counter of the key's slot. */
size_t redis_key_name(const struct redis_be *be,
                      const char *kind,
                      const char *key,
                      size_t key_len,
                      char *buf);
size_t
redis_key_len(const struct redis_be *be, const char *kind, size_t key_len);
/* Set key argument i of a to be's name of the prefix-wide key name
 * (REDIS_BE_INDEX or REDIS_BE_COUNTS): the prefix, then name. Cluster mode:
 * the prefix, key argument 0's "{h}" (set before), then name, so the
 * script stays on its lock's slot (clusterdir.c keeps the real view). */
void redis_arg_global(const struct redis_be *be,
                      struct redis_args *a,
                      int i,
                      const char *name);
/* Set key argument i of a to be's name of kind "{" key "}". */
void redis_arg_key(const struct redis_be *be,
                   struct redis_args *a,
                   int i,
                   const char *kind,
                   const char *key,
                   size_t key_len);
/* release.lua's KEYS and ARGV for token's hold of key (every hold with
 * all) into a (redis.c; the min_replicas undo uses it too). */
void redis_release_args(const struct redis_be *be,
                        const char *key,
                        size_t key_len,
                        const char *token,
                        size_t token_len,
                        bool all,
                        struct redis_args *a);
/* Run script s with a: an array or integer reply (the caller frees), or
 * NULL when Redis is unavailable or the script failed (logged). */
redisReply *redis_script_run(struct redis_be *be,
                             enum redis_script s,
                             struct redis_args *a);
/* The same without min_replicas' WAIT: for undoing a grant that failed
 * it, whose request is already late. */
redisReply *redis_script_run_unacked(struct redis_be *be,
                                     enum redis_script s,
                                     struct redis_args *a);
/* The same for a script of any length: argv[3 .. 3 + nargs) and argl hold
 * its nkeys KEYS then its ARGV, and both have room for 3 + nargs + 1
 * entries (the command, the digest and the KEYS count go first, a
 * stamped script's not-after time last). */
redisReply *redis_script_argv(struct redis_be *be,
                              enum redis_script s,
                              int nkeys,
                              int nargs,
                              const char **argv,
                              size_t *argl);
/* True if r is an array whose element i is an integer. */
bool redis_reply_is_int(const redisReply *r, size_t i);
/* True if script s is stamped: a not-after time follows its ARGV. */
bool redis_script_stamped(enum redis_script s);

/* ---- replicas.c: min_replicas ---- */

/* argv then WAIT be->min_replicas be->replicas_timeout_ms, pipelined on c:
 * argv's reply (the caller frees; NULL when c broke), WAIT's count in
 * *acks (-1 when it gave none). */
redisReply *redis_replicas_command(struct redis_be *be,
                                   redisContext *c,
                                   int argc,
                                   const char **argv,
                                   const size_t *lens,
                                   long long *acks);
/* After stamped script s (its arguments in argv, as redis_script_argv()
 * got them) answered r and WAIT acks: r when it is no success or enough
 * replicas have it; else NULL (r freed, a warning logged), and a fresh
 * grant is released best-effort with its token. */
redisReply *redis_replicas_check(struct redis_be *be,
                                 enum redis_script s,
                                 int nkeys,
                                 int nargs,
                                 const char **argv,
                                 const size_t *argl,
                                 redisReply *r,
                                 long long acks);

/* ---- inspect.c ---- */

/* inspect(): OK (out filled, out->holders malloc'ed), NOT_FOUND,
 * UNAVAILABLE, NO_MEMORY; on any but OK, out holds nothing. */
enum backend_result redis_inspect_run(struct redis_be *be,
                                      const char *key,
                                      size_t key_len,
                                      struct lock_info *out);
/* backend_ops' force_release: the same, and the holders are gone. */
enum backend_result redis_force_release(struct backend *b,
                                        const char *key,
                                        size_t key_len,
                                        struct lock_info *out);

/* ---- list.c: backend_ops' list and held_count ---- */

/* a ZRANGEBYLEX bound: '(' or '[' and a key, or "-" / "+" */
struct redis_lex {
    char s[LOCK_KEY_MAX + 2];
    size_t n;
};

/* The index's lex range of a page of req (shared with clusterdir.c). */
void redis_list_range(const struct lock_list_req *req,
                      struct redis_lex *min,
                      struct redis_lex *max);

enum backend_result redis_list(struct backend *b,
                               const struct lock_list_req *req,
                               struct lock_list *out);
int64_t redis_held_count(struct backend *b);

/* ---- multi.c: backend_ops' acquire_multi, renew_multi, release_multi ---- */

enum backend_result redis_acquire_multi(struct backend *b,
                                        const struct lock_multi_req *req,
                                        struct lock_multi_grant *out);
enum backend_result redis_renew_multi(struct backend *b,
                                      const struct lock_multi_req *req,
                                      struct lock_multi_grant *out);
enum backend_result redis_release_multi(struct backend *b,
                                        const struct lock_multi_req *req,
                                        struct lock_multi_grant *out);

/* ---- queue.c ---- */

/* The waiter's place, made on its first acquire; NULL: no memory. */
struct redis_wait *redis_wait_get(struct redis_be *be, struct lock_waiter *w);
/* What is left of bw's wait, in ms (0 once it ran out). */
int64_t redis_wait_left(const struct redis_wait *bw);
void redis_wait_free(struct lock_waiter *w);
/* Take waiter id out of key's queue: 0, or -1 when Redis did not answer. */
int redis_cancel_run(struct redis_be *be,
                     const char *key,
                     size_t key_len,
                     const char *id);
/* Keep a failed cancel to retry until until_ms (monotonic). */
void redis_trash_add(struct redis_be *be,
                     const char *key,
                     size_t key_len,
                     const char *id,
                     int64_t until_ms);
/* Retry the failed cancels, every REDIS_BE_TRASH_EVERY_MS at most;
 * *last_ms is the caller's monotonic clock of the last try. */
void redis_trash_tick(struct redis_be *be, int64_t *last_ms);
/* Forget the failed cancels (close()): their places go at their
 * deadlines. */
void redis_trash_free(struct redis_be *be);

/* ---- subscriber.c ---- */

/* Start the subscriber and wait for its first attempt: 0, or -1. */
int redis_sub_start(struct redis_be *be);
/* Stop it (if started) and wait for it to end. */
void redis_sub_stop(struct redis_be *be);

/* ---- fan.c: in its own header, for its length ---- */

#include "backends/redis/fan.h"

/* ---- batch.c: several requests' calls in one write ----
 *
 * The ops table's batch(): on one redis:// server (no Sentinel, cluster
 * or min_replicas: those make one call per request), the calls of many
 * requests go out in one write on the thread's connection and their
 * replies are read back in order, all within one command timeout. */
void redis_batch(struct backend *b, struct backend_call *calls, size_t n);

/* The single ops' own steps, which batch.c shares (redis.c): acquire.lua's
 * call for req with bw its waiter's place (NULL: try once); a call run on
 * this thread's connection and parsed (c freed; UNAVAILABLE when no
 * reply); and what follows an acquire's or a release's answer (the
 * waiter's place freed, waiters notified, the cluster directory). */
int redis_acquire_build(struct redis_be *be,
                        const struct lock_req *req,
                        const struct redis_wait *bw,
                        bool floor,
                        uint64_t mark_ms,
                        struct redis_call *c);
enum backend_result
redis_grant_run(struct redis_be *be,
                struct redis_call *c,
                enum backend_result (*parse)(struct redis_be *,
                                             const redisReply *,
                                             struct lock_grant *),
                struct lock_grant *out);
void redis_acquire_done(struct redis_be *be,
                        const struct lock_req *req,
                        enum backend_result res,
                        const struct lock_grant *out);
void redis_release_done(struct redis_be *be,
                        const struct lock_req *req,
                        enum backend_result res,
                        const struct lock_grant *out);

/* scripts.c: c's script (FCALL or EVALSHA, its stamp) appended to cn's output
 * buffer: 0, or -1 (no memory). The reply r read for it: NULL (r freed)
 * with *again set when c must run once more by itself, through
 * redis_call_run() (Redis lost the script, or the stamp passed: the clock
 * is measured again), else r checked as redis_script_argv() checks its
 * reply (NULL: an error reply, logged). */
int redis_script_append(struct redis_be *be,
                        struct redis_conn *cn,
                        struct redis_call *c);
/* scripts.c: argv (argl[i] bytes each) as one RESP command appended to
 * ctx's output buffer, written by hand (hiredis's own formatting built it
 * with sdscatfmt and two allocations): 0, or -1 (no memory). */
int redis_append_argv(redisContext *ctx,
                      int argc,
                      const char **argv,
                      const size_t *argl);
redisReply *redis_script_reply(struct redis_be *be,
                               struct redis_conn *cn,
                               const struct redis_call *c,
                               redisReply *r,
                               bool *again);
/* conn.c: write what was appended to cn's context: 0, or -1 (the context
 * dropped; *closed as below). Then each reply in turn, waiting until
 * deadline_ms (monotonic) at most: the reply (the caller frees; may be an error
 * reply), or NULL when the context broke or the time ran out (the context is
 * dropped; *closed set when the server had closed it, which is no outage: the
 * next call dials again at once). */
int redis_pipe_send(struct redis_be *be, struct redis_conn *cn, bool *closed);
redisReply *redis_pipe_reply(struct redis_be *be,
                             struct redis_conn *cn,
                             int64_t deadline_ms,
                             bool *closed);

#endif /* BACKENDS_REDIS_REDIS_INT_H */
