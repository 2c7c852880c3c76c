/*
 * backends/mysql/mysql_int.h - what the files of the MySQL adapter share,
 * and nothing else includes: its limits and intervals, the state of an
 * open store (struct mysql_be) and of one thread's connection (struct
 * mysql_conn), and the functions each file offers the others:
 *
 *   mysql.c  the ops table: open/close, ping, held_count
 *   acquire.c  acquire(), both modes, and Idempotency-Key replays
 *   holder.c   renew(), release() and inspect(): one holder's rows
 *   multi.c    acquire_multi(), and what the multi-key calls share
 *   multi_holder.c  renew_multi() and release_multi()
 *   list.c     list() and force_release(), for operators
 *   conn.c   per-thread connections, prepared statements, transactions,
 *            retries and back-off (mysql_run_op)
 *   bg.c     the background thread: release events, reaping
 *   url.c    the backend URL and its options
 *   sql.c    every statement's text (sql.h)
 *
 * Every function here is named mysql_<part>_... or mysql_<verb>; none
 * clashes with Connector/C's own mysql_* API.
 */
#ifndef BACKENDS_MYSQL_MYSQL_INT_H
#define BACKENDS_MYSQL_MYSQL_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mysql.h>

#include "backends/backend.h"
#include "backends/mysql/sql.h"
#include "backends/threadconn.h"

#define MYSQL_BE_DEFAULT_PORT       3306
#define MYSQL_BE_DEFAULT_TABLE      "lockd_locks"
#define MYSQL_BE_TABLE_MAX          48 /* room for "_holders" in 64 */
#define MYSQL_BE_CONNECT_TIMEOUT_MS 1000
#define MYSQL_BE_RW_TIMEOUT_MS      2000
#define MYSQL_BE_TIMEOUT_MAX_MS     3600000
#define MYSQL_BE_ATTEMPTS           3 /* per operation, see mysql_run_op() */
/* A lost connection noticed this fast is worth one more try. */
#define MYSQL_BE_FAST_FAIL_MS   100
#define MYSQL_BE_BACKOFF_MIN_MS 50 /* between failed connects */
#define MYSQL_BE_BACKOFF_MAX_MS 1000
#define MYSQL_BE_WATCH_EVERY_MS 50  /* polls of the event table */
#define MYSQL_BE_WATCH_BATCH    256 /* events per poll statement */
#define MYSQL_BE_REAP_EVERY_MS  1000
#define MYSQL_BE_REAP_BATCH     100   /* rows per DELETE */
#define MYSQL_BE_REAP_BUDGET_MS 200   /* per round, then sleep again */
#define MYSQL_BE_EVENTS_KEEP_MS 30000 /* events live 30..60 s */
#define MYSQL_BE_FENCE_BATCH    5000  /* fence rows per DELETE */

struct mysql_be;

/* ?ssl_mode=, as MySQL's client names its modes. Connector/C 3.3 speaks
 * plain unless asked: disabled is the default. */
enum mysql_ssl_mode {
    MYSQL_SSL_DISABLED = 0,    /* no TLS */
    MYSQL_SSL_PREFERRED,       /* TLS when the server offers it, unverified */
    MYSQL_SSL_REQUIRED,        /* TLS or no connection, unverified */
    MYSQL_SSL_VERIFY_CA,       /* TLS, the chain checked against ssl_ca */
    MYSQL_SSL_VERIFY_IDENTITY, /* ... and the host name against the cert */
};

extern const struct backend_ops mysql_backend; /* mysql.c */

/* One thread's connection, in be->conns; created on the thread's first
 * call, freed when the thread exits (or by close()). */
struct mysql_conn {
    struct threadconn tc; /* first: back-off, the set's list */
    struct mysql_be *be;
    MYSQL *db;                        /* NULL while disconnected */
    MYSQL_STMT *stmt[MYSQL_ST_COUNT]; /* prepared on first use; NULL before */
    int64_t offset_ms; /* the database's unix ms minus our monotonic ms, as
                          measured at connect (mysql_conn_clock) */
};

struct mysql_be {
    struct backend base; /* first: the generic handle */
    struct backend_hooks hooks;
    char *host; /* owned; NULL with a socket */
    unsigned port;
    char *user;     /* owned */
    char *password; /* owned; NULL when none */
    char *database; /* owned */
    char *socket;   /* owned; NULL for TCP */
    enum mysql_ssl_mode ssl_mode;
    char *ssl_ca;   /* owned; NULL when not given (every path checked
                       readable at open) */
    char *ssl_cert; /* owned; NULL, or given with ssl_key */
    char *ssl_key;  /* owned */
    unsigned connect_timeout_s;
    unsigned read_timeout_s;
    unsigned write_timeout_s;
    char *table; /* owned, for messages */
    /* owned: the statements of sql.c with the table names in */
    char *sql[MYSQL_ST_COUNT];
    char *schema[MYSQL_SQL_SCHEMA_N];
    char *probe[MYSQL_SQL_PROBE_N];
    char *seed[MYSQL_SQL_SEED_N];
    char *kinds_probe;   /* owned: mysql_sql_kinds_probe expanded */
    char *kinds_upgrade; /* owned: mysql_sql_kinds_upgrade expanded */
    bool compound; /* compound= (default true): the common acquire, release
                      and renew as one compound statement each */
    atomic_bool blocks_refused;  /* the server refused one: step by step */
    atomic_bool schema_ok;       /* the tables exist (as far as we know) */
    atomic_bool down;            /* the last connect failed: log changes once */
    struct threadconn_set conns; /* every thread's struct mysql_conn; a
                                    thread reaching the database ends every
                                    thread's back-off */
    bool conns_made;
    pthread_mutex_t mu;  /* guards stop */
    pthread_cond_t cond; /* wakes the background thread to stop */
    bool stop;
    pthread_t bg; /* polls events, reaps rows */
    bool bg_started;
    /* the background thread's own, unshared: */
    bool watch_primed;    /* watch_last is set */
    uint64_t watch_last;  /* the last event id seen */
    uint64_t trim_id;     /* events up to this id go at trim_at_ms */
    uint64_t fence_floor; /* fence rows below go in the next reap round */
    int64_t trim_at_ms;
};

/* What one attempt at an operation came to; see mysql_run_op(). */
enum mysql_attempt {
    MYSQL_ATTEMPT_DONE,   /* *res holds the answer */
    MYSQL_ATTEMPT_AGAIN,  /* rolled back (deadlock, duplicate key, schema
                             made): nothing changed, may run again */
    MYSQL_ATTEMPT_LOST,   /* the connection died before COMMIT: the server
                             rolled back, nothing changed; may run again on
                             a new one */
    MYSQL_ATTEMPT_FAILED, /* unavailable; never retried */
};

/* Results of one statement run. */
struct mysql_run_info {
    bool found;        /* a row was fetched */
    uint64_t affected; /* rows matched (CLIENT_FOUND_ROWS) */
    uint64_t insert_id;
};

typedef enum mysql_attempt (*mysql_attempt_fn)(struct mysql_conn *c,
                                               void *arg,
                                               enum backend_result *res);

/* ---- url.c ---- */

/* Fill be's connection settings from url: BACKEND_OK, BACKEND_INVALID
 * with the reason in errbuf ("mysql: ..."), or BACKEND_NO_MEMORY. */
enum backend_result mysql_url_parse(struct mysql_be *be,
                                    const char *url,
                                    char *errbuf,
                                    size_t errlen);
/* "disabled", "preferred", ... as ssl_mode= spells it. */
const char *mysql_ssl_mode_name(enum mysql_ssl_mode m);

/* ---- conn.c ---- */

/* Connector/C's one-time set-up: 0, or -1 when it failed. */
int mysql_lib_ready(void);
/* threadconn's drop for be->conns: closes a connection (see threadconn.h). */
void mysql_conn_destroy(struct threadconn *conn, bool thread_exits);
/* Close c's statements and connection; c stays, ready to connect again. */
void mysql_conn_drop(struct mysql_conn *c);

/* Bind helpers: the binds point at the caller's storage, used at execute. */
void mysql_bind_bytes(MYSQL_BIND *b,
                      const char *p,
                      size_t n,
                      unsigned long *len);
void mysql_bind_null(MYSQL_BIND *b);
void mysql_bind_u64(MYSQL_BIND *b, uint64_t *v);
void mysql_bind_i64(MYSQL_BIND *b, int64_t *v, my_bool *is_null);
/* A string result column into buf[0..size): its length in *len. */
void mysql_bind_out_bytes(MYSQL_BIND *b,
                          char *buf,
                          size_t size,
                          unsigned long *len,
                          my_bool *is_null,
                          my_bool *trunc);

/* Prepared statement id on c, prepared on first use; NULL and *err set on
 * failure. */
MYSQL_STMT *
mysql_conn_stmt(struct mysql_conn *c, enum mysql_stmt_id id, unsigned *err);
/* Execute statement id with params (NULL: none); with results, fetch at
 * most one row into them. 0, or the client or server error number. */
unsigned mysql_conn_run(struct mysql_conn *c,
                        enum mysql_stmt_id id,
                        MYSQL_BIND *params,
                        MYSQL_BIND *results,
                        struct mysql_run_info *info);
/* End the open transaction without keeping anything. */
void mysql_conn_rollback(struct mysql_conn *c);
/* Classify a failed statement inside an open transaction (before COMMIT)
 * and leave c ready for the next attempt. */
enum mysql_attempt mysql_conn_failed(struct mysql_conn *c, unsigned err);
/* COMMIT; on failure the outcome is unknown (the reply may be what was
 * lost), so the answer is UNAVAILABLE and never a retry. */
enum mysql_attempt mysql_conn_commit(struct mysql_conn *c);
/* Runs fn on this thread's connection, with retries (see conn.c). */
enum backend_result
mysql_run_op(struct mysql_be *be, mysql_attempt_fn fn, void *arg);

/* Whether c may run compound statement id (sql.h): be->compound, and
 * the statement prepared. A server that refuses it as a syntax error
 * (MySQL, which has no compound statements outside stored programs) sets
 * be->blocks_refused for good (logged once); any other failure (a lost
 * connection, say) answers false this time, and the step-by-step path then
 * meets and handles the same failure. */
bool mysql_conn_block_ok(struct mysql_conn *c, enum mysql_stmt_id id);
/* Measure the database's clock against our monotonic one into
 * c->offset_ms (off by at most half a round trip): 0, or the error
 * number. */
unsigned mysql_conn_clock(struct mysql_conn *c);
/* The not-after time, in the database's clock, of a compound statement
 * that grants or renews, sent at mono ms t0: the moment lockd gives up on
 * it (call_timeout_ms after t0). Past it the statement commits nothing, so
 * a statement the server runs only after lockd answered 503 (a paused or
 * overloaded server) grants nothing nobody heard of. */
int64_t mysql_conn_until(const struct mysql_conn *c, int64_t t0);
/* A compound statement answered MYSQL_BLOCK_TOO_LATE (rolled back):
 * sent at mono ms t0. An answer in time means our measure of the
 * database's clock is off (it was stepped): measured again, and AGAIN. */
enum mysql_attempt mysql_block_too_late(struct mysql_conn *c, int64_t t0);
/* Execute compound statement id with params and fetch its one row into
 * results; 0, or the error number. */
unsigned mysql_conn_block(struct mysql_conn *c,
                          enum mysql_stmt_id id,
                          MYSQL_BIND *params,
                          MYSQL_BIND *results);
/* Classify a failed compound statement: as mysql_conn_failed(), except
 * that a lost connection is UNAVAILABLE and never a retry, for the
 * statement may have committed before the connection went. */
enum mysql_attempt mysql_block_failed(struct mysql_conn *c, unsigned err);

/* Execute statement id with params and fetch every row into results,
 * calling row(arg) after each; 0, or the error number. */
unsigned mysql_conn_rows(struct mysql_conn *c,
                         enum mysql_stmt_id id,
                         MYSQL_BIND *params,
                         MYSQL_BIND *results,
                         void (*row)(void *arg),
                         void *arg);

/* ---- mysql.c, acquire.c, holder.c: the operations ---- */

/* The ops' arguments through mysql_run_op(). */
struct mysql_grant_arg {
    const struct lock_req *req;
    struct lock_grant *out;
};

struct mysql_inspect_arg {
    const char *key;
    size_t key_len;
    struct lock_info *out;
};

enum mysql_attempt mysql_acquire_attempt(struct mysql_conn *c,
                                         void *arg,
                                         enum backend_result *res);
enum mysql_attempt
mysql_renew_attempt(struct mysql_conn *c, void *arg, enum backend_result *res);
struct mysql_release_arg {
    const struct lock_req *req;
    struct lock_grant *out; /* OK: holds left */
    bool left;              /* OK: a holder left, the key may take a waiter */
};

enum mysql_attempt mysql_release_attempt(struct mysql_conn *c,
                                         void *arg,
                                         enum backend_result *res);
enum mysql_attempt mysql_inspect_attempt(struct mysql_conn *c,
                                         void *arg,
                                         enum backend_result *res);
/* The key's live holders into out, as inspect() shows them (*res OK,
 * NOT_FOUND or NO_MEMORY; out zeroed but for OK), inside the open
 * transaction, which is left open unless the attempt failed. */
enum mysql_attempt mysql_holders_read(struct mysql_conn *c,
                                      const char *key,
                                      size_t key_len,
                                      struct lock_info *out,
                                      enum backend_result *res);
/* Append an event for key (a holder left) inside the open transaction. */
enum mysql_attempt mysql_event_add(struct mysql_conn *c, MYSQL_BIND *key);

/* Steps the single-key operations share with the multi-key ones, each
 * inside the open transaction (ended on failure). acquire.c: the stripe
 * rows are missing (rolls back, FAILED); a fence from the counter, taken
 * once the key's row is locked. holder.c: the key's expiry := its last
 * holder's; a holder leaves (kt: key and token binds), with its expired
 * fellows and, when none is left, the key's row. */
enum mysql_attempt mysql_acquire_no_stripe(struct mysql_conn *c);
enum mysql_attempt mysql_acquire_fence(struct mysql_conn *c, uint64_t *fence);
enum mysql_attempt mysql_key_fix(struct mysql_conn *c, MYSQL_BIND *key);
/* The key's row locked in a statement of its own (KEY_LOCK), before a
 * renew or release judges its holder live with the statement's clock;
 * *found (if not NULL): the key has a row. */
enum mysql_attempt
mysql_key_lock(struct mysql_conn *c, MYSQL_BIND *key, bool *found);
enum mysql_attempt mysql_release_holder(struct mysql_conn *c, MYSQL_BIND *kt);

/* ---- list.c: what operators ask ---- */

struct mysql_list_arg {
    const struct lock_list_req *req;
    struct lock_list *out;
};

enum mysql_attempt
mysql_list_attempt(struct mysql_conn *c, void *arg, enum backend_result *res);
/* force_release()'s arguments; out (in.out) is filled on OK. */
struct mysql_force_arg {
    struct mysql_inspect_arg in;
    bool left; /* OK: the holders are gone, the key may take a waiter */
};
enum mysql_attempt
mysql_force_attempt(struct mysql_conn *c, void *arg, enum backend_result *res);

/* ---- multi.c, multi_holder.c: several keys in one transaction ---- */

/* A multi-key call's arguments through mysql_run_op(). */
struct mysql_multi_arg {
    const struct lock_multi_req *req;
    struct lock_multi_grant *out;
    size_t ord[LOCK_MULTI_MAX]; /* req's indexes by ascending key bytes:
                                   the order its key rows are locked in */
    int64_t deadline_ms;        /* monotonic: past it, give up (rolled
                                   back, UNAVAILABLE) */
};

/* Fill a for req and out, with a deadline timeout_ms from now. */
void mysql_multi_init(struct mysql_multi_arg *a,
                      const struct lock_multi_req *req,
                      struct lock_multi_grant *out,
                      int64_t timeout_ms);
/* The keys at sorted positions from..n-1 into p[0..LOCK_MULTI_MAX) (a
 * statement's list of keys), the other slots NULL; lens: the caller's
 * storage for their lengths. */
void mysql_multi_bind_keys(const struct mysql_multi_arg *a,
                           size_t from,
                           MYSQL_BIND *p,
                           unsigned long *lens);
/* The key at sorted position i, bound into *b (len: its storage). */
void mysql_multi_bind_key(const struct mysql_multi_arg *a,
                          size_t i,
                          MYSQL_BIND *b,
                          unsigned long *len);
/* req's index of key[0..len), or LOCK_MULTI_MAX if it is none of req's. */
size_t mysql_multi_find(const struct mysql_multi_arg *a,
                        const char *key,
                        unsigned long len);
/* True, with the transaction rolled back, once the call is out of time. */
bool mysql_multi_late(struct mysql_conn *c, const struct mysql_multi_arg *a);

enum mysql_attempt mysql_acquire_multi_attempt(struct mysql_conn *c,
                                               void *arg,
                                               enum backend_result *res);
enum mysql_attempt mysql_renew_multi_attempt(struct mysql_conn *c,
                                             void *arg,
                                             enum backend_result *res);
enum mysql_attempt mysql_release_multi_attempt(struct mysql_conn *c,
                                               void *arg,
                                               enum backend_result *res);

/* ---- bg.c ---- */

/* Start the background thread: 0, or -1. */
int mysql_bg_start(struct mysql_be *be);
/* Stop it and wait for it, if it was started. */
void mysql_bg_stop(struct mysql_be *be);

#endif /* BACKENDS_MYSQL_MYSQL_INT_H */
