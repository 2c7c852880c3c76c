/*
 * backends/zookeeper/zk.h - the ZooKeeper adapter's private header: its
 * limits and timings, the state every part shares (struct zk_be) and the
 * prototypes the parts call across files. Nothing outside
 * backends/zookeeper/ includes it; the rest of lockd sees only the ops
 * table zookeeper_backend (zookeeper.c).
 *
 * The parts, like curl's lib/vtls/ (one concern a file, one header):
 *   zookeeper.c  the ops table, open/close, acquire, cancel_wait, ping
 *   recipe.c     the acquire/queue recipe: the look-act round, judging a
 *                holder, waiter places
 *   kinds.c      what a round checks first: idempotent replays, limits
 *   shared.c     shared holders: s<token> nodes and their group h
 *   holders.c    renew (re-entry), release and inspect of a holder
 *   multi.c      several keys at once: acquire_multi
 *   multi_hold.c several keys at once: renew_multi, release_multi
 *   bulk.c       the reads of several keys at once, and a multi of any size
 *   store.c      every request lockd sends: one-call wrappers and the
 *                recipe's multis
 *   keeper.c     the keeper thread: session, reconnect, the server's
 *                clock, watches, the sweep
 *   own.c        grants made here, remembered for a release without a read
 *   names.c      node names, paths and the data lockd stores in nodes
 *   call.c       one asynchronous call waited for with a deadline
 *   auth.c       digest credentials and the ACL of lockd's nodes
 * Every internal function is named zk_...; zk_be_<op> is kept for the
 * backend operations themselves (zookeeper.c and holders.c).
 */
#ifndef BACKENDS_ZOOKEEPER_ZK_H
#define BACKENDS_ZOOKEEPER_ZK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zookeeper/zookeeper.h>

#include "backends/backend.h"
#include "backends/zookeeper/call.h"

struct url; /* lib/url.h */

#define ZK_CHROOT_MAX 256
#define ZK_NAME_MAX   96 /* a child's name */
#define ZK_SEQ_DIGITS 10 /* ZooKeeper's sequence suffix */
#define ZK_MAX_ROUNDS 16 /* look-act rounds per request */
/* a release from a shared group races every join and leave of the group
 * on its version: it tries until its deadline, at most this many rounds */
#define ZK_LEAVE_ROUNDS 512
/* others reap a waiter node this long after the deadline in its name */
#define ZK_WAITER_GRACE_MS 2000
/* a waiter looks at its place at least this often, whatever its watch */
#define ZK_WAITER_RECHECK_MS  5000
#define ZK_CLOCK_REFRESH_MS   5000
#define ZK_CLOCK_SLACK_MS     2 /* see zk_server_now() */
#define ZK_KEEPER_TICK_MS     250
#define ZK_SWEEP_BATCH        20   /* keys looked at per keeper tick */
#define ZK_SWEEP_RELIST_MS    2000 /* a new pass at most this often */
#define ZK_TRASH_MAX          4096
#define ZK_DEFAULT_SESSION_MS 10000
#define ZK_DEFAULT_TIMEOUT_MS 2000
/* the client library looks the hosts up again at most this often while
 * connected (its default, 0, is a getaddrinfo() per I/O loop turn: a
 * netlink dump per request); it always does on a connection loss */
#define ZK_RESOLVE_DELAY_MS 30000
#define ZK_OWN_SLOTS        4096 /* grants remembered for a quick release */
#define ZK_MARKER_MAX       (LOCK_TOKEN_MAX + 2) /* "t<token>" and a NUL */
/* index.c: keys relisted at most this many a second (a relisting of N keys
 * comes every max(ZK_SWEEP_RELIST_MS, N / ZK_RELIST_RATE s)) */
#define ZK_RELIST_RATE  2500
#define ZK_INDEX_MAX    (1 << 20) /* keys the index keeps */
#define ZK_INDEX_RECENT 4096      /* grants made here between relistings */
/* list(): keys read per page at most, dead or alive: 2 x limit + 16 */
#define ZK_LIST_BUDGET(limit) (2 * (size_t)(limit) + 16)
/* force_release(): shared holders deleted per multi (ZooKeeper's 1 MB
 * request limit: a holder's path is at most ~770 bytes) */
#define ZK_FORCE_CHUNK 256

/* A handle and the requests that borrowed it. */
struct zk_conn {
    zhandle_t *zh;
    /* what every node created on it carries: be->acl, borrowed */
    const struct ACL_vector *acl;
    int refs;   /* guarded by be->mu: borrowers, plus one for be->conn */
    bool ready; /* guarded by be->mu: roots made, clock sampled */
};

/* The server's clock, learned from the mtime of our own writes. */
struct zk_clock {
    bool valid;
    /* server ms = local monotonic ms + offset. Every sample, mtime minus
     * our clock when the reply came, is a lower bound of the offset (the
     * write happened before we heard of it), behind by the time the reply
     * took; the best is the largest: we keep the largest of this period
     * and of the last one, so a slow reply never pulls the estimate down
     * and a clock change on the server is followed within two periods. */
    int64_t cur_ms;
    int64_t prev_ms;
    /* Upper bounds of the same offset: mtime + 1 minus our clock when the
     * request was sent (the write happened after that); the least of this
     * period and of the last one. */
    int64_t cur_hi_ms;
    int64_t prev_hi_ms;
    int64_t period_at; /* monotonic ms when cur_ms's period began */
    int64_t last_at;   /* monotonic ms of the last sample */
};

/* waiter->be_data: a waiting client's place in a key's queue. */
struct zk_waiter {
    struct zk_waiter *prev, *next; /* be->waiters, guarded by be->mu */
    char *key;                     /* owned copy, for notify after a new
                                      session */
    size_t key_len;
    char prefix[ZK_NAME_MAX]; /* of our node's name: w<inst>-<id>-<dl>- */
    char name[ZK_NAME_MAX];   /* our node's name, "" when we have none */
    bool pending;             /* a create may have made a node named
                                 prefix + sequence that we never heard of */
};

/* A grant or renew made here, remembered so that its release can be one
 * multi that does not read h first (zk_be_release). */
struct zk_own {
    char *key; /* owned; NULL: an empty slot */
    size_t key_len;
    char token[LOCK_TOKEN_MAX + 1];
    int version;   /* h's version after our write */
    int64_t mtime; /* h's mtime then: the TTL runs from it */
    int64_t ctime; /* h's ctime: when it was granted (server ms) */
    uint64_t ttl_ms;
    uint32_t holds; /* h's hold count then */
    bool alone;     /* nobody waited then: drop the key's node with h */
};

/* A node to delete once the store answers again (a cancel that failed). */
struct zk_trash {
    struct zk_trash *next;
    char *parent; /* owned */
    char *name;   /* owned: a name, or a prefix when is_prefix */
    bool is_prefix;
};

struct zk_be {
    struct backend base;
    struct backend_hooks hooks;
    char *hosts;      /* owned: "h1:2181,h2:2181" */
    char *root;       /* owned: "<chroot>/lockd" */
    char *locks;      /* owned: root + "/locks" */
    char *clock_path; /* owned: root + "/clock" */
    char *chroot;     /* owned: "" or "/a/b" */
    int session_ms;
    int64_t timeout_ms;
    char inst[17]; /* random hex naming this instance's waiter nodes */
    /* auth.c: digest credentials, NULL without; set at open, then read
     * only */
    char *auth;                   /* owned, wiped when freed: "user:password" */
    size_t auth_len;              /* strlen(auth) */
    char *auth_user;              /* owned: the user alone, for messages */
    const struct ACL_vector *acl; /* nodes we create: open, or acl_vec,
                                     or ZOO_CREATOR_ALL_ACL */
    const char *acl_name;         /* static: "open", "creator_read", ... */
    struct ACL acl_items[2];      /* acl_vec's (ids: the library's) */
    struct ACL_vector acl_vec;
    bool noauth_said; /* the keeper's: a NoAuth at setup was logged */

    pthread_mutex_t mu; /* guards every member below */
    pthread_cond_t cv;  /* keeper wake-ups; a retired handle's refs at 0 */
    struct zk_conn *conn;
    struct zk_clock clock;
    struct zk_waiter *waiters;
    struct zk_trash *trash;
    size_t ntrash;
    bool stopping;
    unsigned events; /* session events seen, bumped by the watcher */
    pthread_t keeper;
    bool keeper_started;
    pthread_mutex_t own_mu; /* guards own[] */
    struct zk_own *own;     /* owned: ZK_OWN_SLOTS slots, by key hash */
    /* the keeper's own: the sweep over every key's node, in the index's
     * order, a few keys a tick */
    char sweep_key[LOCK_KEY_MAX + 1]; /* the last key swept */
    size_t sweep_len;
    bool sweep_mid;       /* a pass is under way: go on after sweep_key */
    bool sweep_listed;    /* a relisting has succeeded */
    int64_t sweep_at;     /* monotonic ms of the last relisting */
    int64_t sweep_live;   /* live holders seen so far in this pass */
    _Atomic int64_t held; /* live holders the last whole pass saw; -1
                             before one ended */
    /* index.c: the keys known to be in the store, for list() */
    pthread_mutex_t ix_mu;   /* guards the four below */
    struct zk_ix *ix;        /* the last relisting, sorted; NULL before */
    struct zk_ixrec *recent; /* grants made here since: sorted, owned */
    size_t nrecent;
    bool ix_listing; /* a relisting is under way */
    bool ix_ready;   /* ix_mu made */
    bool ix_cut_said;
};

/* A key copied out of the index. */
struct zk_ixkey {
    size_t len;
    char key[LOCK_KEY_MAX + 1]; /* NUL-terminated */
};

/* One child of a key's node, parsed. */
struct zk_kid {
    const char *name; /* borrowed from the call's kids */
    int64_t seq;
    int64_t deadline; /* waiters: server ms after which anyone may reap */
    bool shared;      /* a shared waiter (r...) */
};

/* What h (or a shared holder s<token>) holds, parsed from its data. */
struct zk_holder {
    uint64_t ttl_ms;  /* the TTL it was last granted or renewed with */
    uint64_t run_ms;  /* it expires at its mtime + run_ms: ttl_ms, but less
                         after a release of one hold (a write that must not
                         move the expiry) */
    int64_t grant_by; /* server ms: a grant made later (ctime) is void;
                         0: none (renewed) */
    char token[LOCK_TOKEN_MAX + 1];
    bool has_owner;
    char owner[LOCK_OWNER_MAX + 1];
    enum lock_mode mode;
    uint32_t limit; /* shared: the key's limit, 0 = none */
    uint32_t holds; /* >= 1 */
    bool has_idem;
    char idem[LOCK_IDEM_MAX + 1];
    bool group;     /* h of a shared key: limit and count, no token */
    uint32_t count; /* group: its holders, s<token> nodes */
};

/* A key's nodes, named once per request (zk_paths_key()). */
struct zk_paths {
    char parent[ZK_PATH_MAX];   /* <locks>/k<base64url(key)> */
    char hpath[ZK_PATH_MAX];    /* parent + "/h" */
    char marker[ZK_MARKER_MAX]; /* "t<token>"; "" without a token, or
                                   for one that cannot name a node */
    char member[ZK_MARKER_MAX]; /* "s<token>", the same way */
    const char *key;            /* borrowed; NULL when unknown */
    size_t key_len;
};

/* A shared holder as read: its node's name, data and stat. */
struct zk_member {
    char name[ZK_MARKER_MAX];
    struct zk_holder h;
    struct Stat st;
    bool parsed;  /* read, and lockd's */
    bool gone;    /* not there any more */
    int64_t left; /* zk_remaining(): <= 0 dead */
};

/* What zk_grant_shared() writes. */
struct zk_share_ops {
    bool make_parent;        /* create the key's node too */
    int hv;                  /* the group h's version; -1: create h */
    const char *waiter_name; /* our waiter node to delete, or NULL */
    const char *gdata;       /* the group's new data */
    size_t glen;
    const char *mdata; /* our holder's data */
    size_t mlen;
};

/* Which op of zk_grant_shared() the store refused. */
enum zk_share_op {
    ZK_SHARE_UNKNOWN = 0,
    ZK_SHARE_PARENT,
    ZK_SHARE_GROUP,
    ZK_SHARE_WAITER,
    ZK_SHARE_MEMBER,
};

/* What zk_drop_members() removes. */
struct zk_drop_ops {
    const char *const *names; /* s<token> names */
    const int *versions;
    size_t n;          /* 1..ZK_MULTI_MAX - 3 */
    int hv;            /* the group h's version */
    const char *gdata; /* the group's new data; NULL: delete h */
    size_t glen;
};

/* One acquire: what zk_be_acquire() sets up for the recipe's rounds. */
struct zk_acq {
    struct zk_be *be;
    struct zk_conn *cn;
    const struct lock_req *req;
    struct zk_waiter *w; /* NULL: try once */
    struct zk_paths p;
    char data[ZK_DATA_MAX];
    size_t data_len;
    struct zk_holder mine;  /* what data says: ttl_ms, token, grant_by */
    bool shared;            /* req->mode == LOCK_SHARED */
    int64_t grant_by;       /* server ms, written into h */
    int64_t dl;             /* monotonic ms */
    uint64_t expired_fence; /* the greatest fence of expired holders this
                               request reaped (a takeover); 0: none */
};

/* What one acquire round saw of a key's node. */
struct zk_look {
    struct zk_call *kc;  /* the listing: owns the names in kids */
    struct zk_kid *kids; /* the waiters, by sequence */
    size_t nw;           /* how many */
    size_t own;          /* our place among them; SIZE_MAX: none */
    size_t ahead;        /* waiters before us (all of them without a place) */
    bool has_h;          /* h is there */
    bool parsed;         /* h was read and is lockd's */
    bool gone;           /* our place was there and is not any more */
    bool mine_listed;    /* our shared holder s<token> is listed */
    struct zk_holder h;
    struct Stat st;       /* h's */
    struct zk_member *ms; /* shared holders read (zk_look_members()) */
    size_t nms;
    bool ms_read;
};

/* What a round of a multi-key call saw of one key (multi.c, multi_hold.c);
 * zeroed at the start of every round. */
struct zk_mlook {
    bool node;            /* the key's node was listed */
    bool has_h;           /* h was read */
    bool parsed;          /* and is lockd's */
    struct zk_holder h;   /* h: a holder, or a shared key's group */
    struct Stat st;       /* h's */
    bool member;          /* the token is a shared holder: m, in group h */
    struct zk_member m;   /* its s<token> */
    bool alone;           /* nothing listed but what a release drops */
    bool held;            /* acquire: a holder or a queued waiter */
    bool mine;            /* renew, release: held by the token */
    int64_t left;         /* acquire: what is left of the holders; 0:
                             unknown or none */
    struct zk_holder now; /* renew: the holder's new data */
    char data[ZK_DATA_MAX];
    size_t len;
    char gdata[ZK_GROUP_MAX]; /* release from a group: its new data */
    size_t glen;
    int stat; /* the stat of the round's set op on the holder */
};

/* One key of a multi-key call. */
struct zk_mkey {
    struct zk_paths p;
    char tpath[ZK_PATH_MAX]; /* p.parent + "/" + p.marker ("" for none) */
    char spath[ZK_PATH_MAX]; /* p.parent + "/" + p.member ("" for none) */
    struct zk_mlook l;
};

/* A multi-key call: its keys, handle and deadline. */
struct zk_multi {
    struct zk_be *be;
    struct zk_conn *cn;
    const struct lock_multi_req *req;
    struct zk_mkey *keys; /* owned: req->n of them, in req's order */
    size_t n;
    int64_t dl; /* monotonic ms */
};

/* One multi over several keys, of any size (bulk.c): its results and the
 * set ops' stats live in the call, which a late completion writes into. */
struct zk_big {
    struct zk_call *c;
    zoo_op_t *ops;            /* owned */
    size_t *key;              /* owned: the key index of each op */
    zoo_op_result_t *results; /* in c->extra */
    struct Stat *stats;       /* in c->extra */
    int n, nstats, cap;
    bool sent;
};

/* What zk_read_keys() asks of each key. */
#define ZK_READ_LIST  0x1u /* its node's children: slot 2i */
#define ZK_READ_WATCH 0x2u /* ... with a watch that notifies the key */
#define ZK_READ_H     0x4u /* h's data: slot 2i + 1 */

/* A round's step that has not answered: go on with the round. Answers are
 * >= -1 (BACKEND_*, or -1: look again). */
#define ZK_GO_ON (-2)

/* ---- names.c: node names, paths, node data ---------------------------- */

/* Decode n chars of base64url; the length, or -1 on junk or overflow. */
long zk_b64_decode(const char *in, size_t n, unsigned char *out, size_t cap);
/* parent + "/" + name into out (cap bytes): 0, or -1 if it cannot fit. */
int zk_child_path(const char *parent, const char *name, char *out, size_t cap);
/* A key's nodes, and token's marker when token is not NULL: 0, or -1 if
 * a path cannot fit. */
int zk_paths_key(const struct zk_be *be,
                 const char *key,
                 size_t key_len,
                 const char *token,
                 struct zk_paths *p);
/* The same from a key node's name ("k..."), as listed under be->locks. */
int zk_paths_node(const struct zk_be *be, const char *name, struct zk_paths *p);
/* "t<token>": 0, or -1 for a token that cannot be a node name. */
int zk_marker_name(const char *token, char *out, size_t cap);
/* "<c><token>", the same way. */
int zk_token_name(char c, const char *token, char *out, size_t cap);
/* A waiter node's name up to its sequence: w<inst>-<id>-<deadline>-
 * (r... when shared). */
int zk_waiter_prefix(const struct zk_be *be,
                     bool shared,
                     uint64_t id,
                     int64_t deadline,
                     char *out,
                     size_t cap);
/* True if a waiter node's name is one of this instance's. */
bool zk_waiter_is_ours(const struct zk_be *be, const char *name);
/* Parse a waiter's name: w<inst>-<id>-<deadline>-<10-digit sequence>. */
int zk_parse_waiter(const char *name, struct zk_kid *k);
int zk_cmp_kid(const void *a, const void *b); /* by sequence, for qsort */
/* A holder's data (see names.c): 0 and *len, or -1 if it cannot fit. */
int zk_fmt_holder(char *buf,
                  size_t cap,
                  const struct zk_holder *h,
                  size_t *len);
/* A group's data: "lockd2 g <limit> <count>". */
int zk_fmt_group(
    char *buf, size_t cap, uint32_t limit, uint32_t count, size_t *len);
/* Parse a holder's (or group's) data; -1 if it is not ours. */
int zk_parse_holder(const char *data, int len, struct zk_holder *h);
/* The URL's path as a chroot: "a/b" -> "/a/b" (owned), "" for none. */
int zk_parse_chroot(const char *path, char **out);
/* be->root, be->locks and be->clock_path under be->chroot: 0, or -1
 * without memory. */
int zk_root_paths(struct zk_be *be);

/* ---- auth.c: credentials and ACLs ------------------------------------- */

/* The URL's user, password (resolved: user info, password_file=,
 * LOCKD_BACKEND_PASSWORD) and acl= into be->auth and be->acl: 0, or -1
 * with the reason in errbuf (never the password). Without a user the ACL
 * is the open one. */
int zk_auth_parse(struct zk_be *be, struct url *u, char *errbuf, size_t errlen);
/* Add be's digest auth to a new handle, before any request on it: ZOK (or
 * no credentials), else the library's code (logged). */
int zk_auth_add(struct zk_be *be, zhandle_t *zh);
void zk_auth_cleanup(struct zk_be *be); /* wipes the password */

/* ---- keeper.c: the keeper thread, the handle, the clock, watches ------ */

void zk_clock_sample(struct zk_be *be, int64_t mtime, int64_t t0, int64_t t1);
int64_t zk_server_now(struct zk_be *be);
int64_t zk_server_latest(struct zk_be *be);
/* The watcher of h and of predecessors: notifies the key. */
void zk_node_watcher(
    zhandle_t *zh, int type, int state, const char *path, void *ctx);
void zk_notify(struct zk_be *be, const char *key, size_t key_len);
/* Borrow the handle if it is connected and ready; NULL otherwise. */
struct zk_conn *zk_conn_get(struct zk_be *be);
void zk_conn_put(struct zk_be *be, struct zk_conn *c);
/* be->mu held; takes c out of service, waits until nobody borrows it,
 * closes it. Returns with be->mu held. */
void zk_conn_retire(struct zk_be *be, struct zk_conn *c);
/* be->mu held: wait on be->cv for at most ms. */
void zk_keeper_wait(struct zk_be *be, int64_t ms);
void *zk_keeper(void *arg);
/* held_count(): the live holders the sweep's last whole pass saw (a pass
 * looks at ZK_SWEEP_BATCH keys a tick), -1 before one ended. */
int64_t zk_held_count(struct zk_be *be);
void zk_trash_add(struct zk_be *be,
                  const char *parent,
                  const char *name,
                  bool is_prefix);

/* ---- store.c: requests to the store ----------------------------------- */

/* The store did not answer (or answered something we cannot use). */
enum backend_result zk_unavailable(const char *what, int rc);
int64_t zk_deadline(const struct zk_be *be); /* monotonic ms */
int zk_get_kids(struct zk_conn *cn,
                const char *path,
                int64_t dl,
                struct zk_call **out);
int zk_get(struct zk_be *be,
           struct zk_conn *cn,
           const char *path,
           bool watch,
           int64_t dl,
           struct zk_holder *h,
           struct Stat *st,
           bool *parsed);
int zk_delete(struct zk_conn *cn, const char *path, int version, int64_t dl);
/* Delete every child of parent whose name starts with prefix. */
int zk_delete_prefixed(struct zk_conn *cn,
                       const char *parent,
                       const char *prefix,
                       int64_t dl);
int zk_create(struct zk_conn *cn,
              const char *path,
              const char *data,
              int len,
              int mode,
              int64_t dl,
              char *name,
              size_t name_cap,
              struct Stat *st);
int zk_set(struct zk_conn *cn,
           const char *path,
           const char *data,
           int len,
           int version,
           int64_t dl,
           struct Stat *st);
int zk_exists(struct zk_conn *cn, const char *path, int64_t dl);
int zk_set_marked(struct zk_conn *cn,
                  const struct zk_paths *p,
                  const char *data,
                  size_t len,
                  int version,
                  int64_t dl,
                  struct Stat *st);
int zk_claim(struct zk_conn *cn,
             const struct zk_paths *p,
             int version,
             const char *waiter_name,
             int64_t dl);
int zk_grant(struct zk_conn *cn,
             const struct zk_paths *p,
             bool make_parent,
             const char *waiter_name,
             const char *data,
             size_t len,
             int64_t dl,
             struct Stat *st);
int zk_drop_checked(struct zk_conn *cn,
                    const struct zk_paths *p,
                    const char *marker,
                    int version,
                    bool with_parent,
                    int64_t dl);
int zk_drop_stray(struct zk_conn *cn,
                  const struct zk_paths *p,
                  const char *name,
                  int64_t dl);
int zk_grant_shared(struct zk_conn *cn,
                    const struct zk_paths *p,
                    const struct zk_share_ops *o,
                    int64_t dl,
                    struct Stat *st,
                    enum zk_share_op *failed);
int zk_drop_members(struct zk_conn *cn,
                    const struct zk_paths *p,
                    const struct zk_drop_ops *o,
                    bool with_parent,
                    int64_t dl);
int zk_claim_member(struct zk_conn *cn,
                    const struct zk_paths *p,
                    int version,
                    const char *waiter_name,
                    int64_t dl);
int zk_get_members(struct zk_conn *cn,
                   const char *parent,
                   struct zk_member *out,
                   size_t n,
                   int64_t dl);

/* ---- recipe.c: the acquire/queue recipe ------------------------------- */

int64_t zk_remaining(struct zk_be *be,
                     const struct zk_holder *h,
                     const struct Stat *st);
int64_t zk_left_surely(struct zk_be *be,
                       const struct zk_holder *h,
                       const struct Stat *st,
                       int64_t sent);
int zk_fill_grant(const struct Stat *st,
                  uint64_t ttl_ms,
                  uint64_t report,
                  struct lock_grant *out);
int zk_reap_holder(struct zk_be *be,
                   struct zk_conn *cn,
                   const struct zk_paths *p,
                   const struct zk_holder *h,
                   int version,
                   int64_t dl,
                   const char *key,
                   size_t key_len);
struct zk_waiter *
zk_waiter_new(struct zk_be *be, const char *key, size_t key_len);
void zk_waiter_free(struct zk_be *be, struct zk_waiter *w);
/* Rounds of an acquire: BACKEND_OK, HELD, UNAVAILABLE or NO_MEMORY when
 * answered, -1 to look again. zk_acq_fresh() is the first round of a
 * request without a place yet (a free key usually has no node). */
int zk_acq_fresh(struct zk_acq *a, struct lock_grant *out);
int zk_acq_round(struct zk_acq *a, struct lock_grant *out);

int zk_acq_own(struct zk_acq *a,
               const struct zk_holder *h,
               const struct Stat *st,
               int64_t sent,
               const char *mine_node,
               bool alone,
               struct lock_grant *out);

/* ---- shared.c: shared holders ----------------------------------------- */

int zk_members_load(struct zk_be *be,
                    struct zk_conn *cn,
                    const struct zk_paths *p,
                    struct zk_call *kc,
                    int64_t dl,
                    struct zk_member **out,
                    size_t *n);
size_t zk_members_live(const struct zk_member *ms, size_t n, int64_t *min_left);
int zk_group_reap(struct zk_be *be,
                  struct zk_conn *cn,
                  const struct zk_paths *p,
                  const struct zk_holder *g,
                  int hv,
                  const struct zk_member *ms,
                  size_t n,
                  int64_t dl,
                  size_t *reaped);
int zk_member_find(struct zk_be *be,
                   struct zk_conn *cn,
                   const struct zk_paths *p,
                   const struct zk_holder *g,
                   const struct Stat *gst,
                   int64_t dl,
                   struct zk_member *m,
                   enum backend_result *r);
int zk_member_reap_token(struct zk_be *be,
                         struct zk_conn *cn,
                         const struct zk_paths *p,
                         int64_t dl);
size_t zk_sweep_group(struct zk_be *be,
                      struct zk_conn *cn,
                      const struct zk_paths *p,
                      const struct zk_holder *g,
                      const struct Stat *gst,
                      struct zk_call *kc,
                      int64_t dl);
int zk_acq_share_fresh(struct zk_acq *a, struct lock_grant *out);
int zk_acq_share(struct zk_acq *a, struct zk_look *l, struct lock_grant *out);
bool zk_acq_share_ok(const struct zk_acq *a, const struct zk_look *l);

/* ---- kinds.c: what an acquire checks first ----------------------------- */

/* Read the key's shared holders for l once and reap the dead: ZK_GO_ON,
 * -1 (some were reaped: look again), or an answer. */
int zk_look_members(struct zk_acq *a, struct zk_look *l);
/* Idempotent replay and limit mismatch: ZK_GO_ON, or the answer. */
int zk_acq_kinds(struct zk_acq *a, struct zk_look *l, struct lock_grant *out);
/* The waiter has its answer without a grant of its own: give up its
 * place (if any) and free it. */
void zk_acq_leave(struct zk_acq *a);

/* ---- holders.c: a holder's operations ---------------------------------- */

enum backend_result zk_be_renew(struct backend *b,
                                const struct lock_req *req,
                                struct lock_grant *out);
enum backend_result zk_be_release(struct backend *b,
                                  const struct lock_req *req,
                                  struct lock_grant *out);
enum backend_result zk_be_inspect(struct backend *b,
                                  const char *key,
                                  size_t key_len,
                                  struct lock_info *out);

/* ---- bulk.c: several keys at once ------------------------------------- */

int zk_read_keys(struct zk_be *be,
                 struct zk_conn *cn,
                 const struct zk_mkey *keys,
                 size_t n,
                 unsigned what,
                 int64_t dl,
                 struct zk_batch **out);
int zk_big_init(struct zk_big *b, int cap);
void zk_big_cleanup(struct zk_big *b);
/* A create op with cn's ACL. */
void zk_big_create(struct zk_big *b,
                   const struct zk_conn *cn,
                   size_t k,
                   const char *path,
                   const char *data,
                   size_t len);
void zk_big_delete(struct zk_big *b, size_t k, const char *path, int version);
void zk_big_check(struct zk_big *b, size_t k, const char *path, int version);
int zk_big_set(struct zk_big *b,
               size_t k,
               const char *path,
               const char *data,
               size_t len,
               int version);
int zk_big_run(struct zk_conn *cn,
               struct zk_big *b,
               int64_t dl,
               size_t *failed_key);
enum backend_result zk_multi_open(struct zk_multi *m,
                                  struct zk_be *be,
                                  const struct lock_multi_req *req);
void zk_multi_close(struct zk_multi *m);
void zk_multi_reset(struct zk_multi *m);

/* ---- multi.c, multi_hold.c: the multi-key operations ------------------- */

enum backend_result zk_be_acquire_multi(struct backend *b,
                                        const struct lock_multi_req *req,
                                        struct lock_multi_grant *out);
enum backend_result zk_be_renew_multi(struct backend *b,
                                      const struct lock_multi_req *req,
                                      struct lock_multi_grant *out);
enum backend_result zk_be_release_multi(struct backend *b,
                                        const struct lock_multi_req *req,
                                        struct lock_multi_grant *out);

/* ---- index.c: the keys known to be in the store ---------------------- */

/* Set up be's index (empty): 0, or -1 without memory. */
int zk_index_init(struct zk_be *be);
/* Free it; accepts an index never set up. */
void zk_index_cleanup(struct zk_be *be);
/* A grant of key was made here: list it before the next relisting. */
void zk_index_add(struct zk_be *be, const char *key, size_t len);
/* The keeper asks for a relisting now (grants made from here on may be
 * missing from it) ... */
void zk_index_listing(struct zk_be *be);
/* ... and has it (kc: the names under be->locks; NULL: it failed, keep
 * the old one), asked for at monotonic ms asked. */
void zk_index_listed(struct zk_be *be, const struct zk_call *kc, int64_t asked);
/* Keys in the index now. */
size_t zk_index_size(struct zk_be *be);
/* How long between relistings for the index's size now, in ms. */
int64_t zk_index_period(struct zk_be *be);
/* Up to max keys of the index that start with prefix (plen bytes) and
 * sort after *after (NULL: from the first), ascending, into out; *end
 * when no such key is left after them. Returns how many. */
size_t zk_index_next(struct zk_be *be,
                     const struct zk_ixkey *after,
                     const char *prefix,
                     size_t plen,
                     struct zk_ixkey *out,
                     size_t max,
                     bool *end);

/* ---- list.c, force.c: the operator's operations ----------------------- */

enum backend_result zk_be_list(struct backend *b,
                               const struct lock_list_req *req,
                               struct lock_list *out);
enum backend_result zk_be_force_release(struct backend *b,
                                        const char *key,
                                        size_t key_len,
                                        struct lock_info *out);
/* holders.c: a held key's summary for inspect(), list() and
 * force_release(): from an exclusive holder h with left ms to run, or
 * from a group's members ms (n, reordered: the live ones first, by
 * fence). OK, NOT_FOUND (no live member), NO_MEMORY. */
enum backend_result zk_inspect_one(const struct zk_holder *h,
                                   const struct Stat *st,
                                   int64_t left,
                                   struct lock_info *out);
enum backend_result zk_inspect_group(const struct zk_holder *g,
                                     struct zk_member *ms,
                                     size_t n,
                                     struct lock_info *out);

/* ---- own.c: grants made here ------------------------------------------ */

void zk_own_put(struct zk_be *be,
                const char *key,
                size_t key_len,
                const char *token,
                const struct Stat *st,
                uint64_t ttl_ms,
                uint32_t holds,
                bool alone);
bool zk_own_get(struct zk_be *be,
                const char *key,
                size_t key_len,
                const char *token,
                struct zk_own *out);
void zk_own_drop(struct zk_be *be, const char *key, size_t key_len);

#endif /* BACKENDS_ZOOKEEPER_ZK_H */
