/*
 * backends/mysql/mysql.c - lock store on MySQL or MariaDB (MariaDB Connector/C).
 * One row per held lock, keyed by the exact key bytes; every check-and-change
 * is one short InnoDB transaction at READ COMMITTED on prepared statements;
 * every expiry is judged by the database's clock (NOW(3)), never lockd's.
 * Fences are AUTO_INCREMENT ids of a fence table, inserted inside each
 * granting transaction after the key's row is locked (the counter's lock
 * ends with the INSERT, not at commit), so the rows of free keys can be
 * deleted (by release, and by the background thread for expired ones)
 * without a fence ever going back.
 * Every release also appends the key to an event table, in commit order
 * (ids from a second sequence row); the background thread of each instance
 * polls it and notifies its waiters. Expiries need no event: a waiter is
 * retried when the holder's TTL runs out (retry_ms).
 * One connection per thread, under a pthread key; no waiting queue in the
 * store (FIFO within an instance).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <errmsg.h>
#include <mysql.h>
#include <mysqld_error.h>

#include "backends/backend.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/clock.h"
#include "lib/text.h"
#include "lib/url.h"

#define MYSQL_BE_DEFAULT_PORT       3306
#define MYSQL_BE_DEFAULT_TABLE      "lockd_locks"
#define MYSQL_BE_TABLE_MAX          48 /* room for "_events" in 64 */
#define MYSQL_BE_CONNECT_TIMEOUT_MS 1000
#define MYSQL_BE_RW_TIMEOUT_MS      2000
#define MYSQL_BE_TIMEOUT_MAX_MS     3600000
#define MYSQL_BE_ATTEMPTS           3 /* per operation, see run_op() */
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
/* MariaDB >= 10.3 (idle_transaction_timeout); not in every Connector/C. */
#define ER_CLIENT_INTERACTION_TIMEOUT 4031

/* The database's clock in unix ms; the session's time zone is UTC. */
#define NOW_MS "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"

enum stmt_id {
    ST_ACQ_UPSERT, /* insert the key's row or take over an expired one;
                      either way the row is locked */
    ST_FENCE_NEW,  /* next fence: an AUTO_INCREMENT id */
    ST_ACQ_FENCE,  /* write the fence; read expires_at back */
    ST_RENEW,
    ST_RENEW_READ, /* the renewed row, still locked by ST_RENEW */
    ST_RELEASE,
    ST_HELD, /* held by anyone? tells MISMATCH from NOT_FOUND */
    ST_INSPECT,
    ST_REAP,
    ST_COUNT_HELD,
    ST_EVENT_BUMP, /* next event id, in commit order (row lock) */
    ST_EVENT_ADD,
    ST_EVENTS,    /* events after an id */
    ST_EVENT_TOP, /* the last committed event id */
    ST_EVENT_TRIM,
    ST_FENCE_TOP,  /* the highest committed fence row */
    ST_FENCE_TRIM, /* fence rows below it */
    ST_COUNT,
};

/* The fence sequence row (row 1 of @S) of earlier versions is retired at
 * start-up by setting it to this value: an older lockd still running then
 * fails its bump (above LOCK_FENCE_MAX) instead of handing out a fence from
 * the old counter. */
#define MYSQL_BE_SEQ_RETIRED "9007199254740991" /* LOCK_FENCE_MAX */

/* "@T", "@S", "@E" and "@F" stand for the locks, sequence, event and
 * fence tables. */
static const char *const stmt_sql[ST_COUNT] = {
    /* Held (not expired): nothing changes, and LAST_INSERT_ID() reports
       the holder's remaining TTL (>= 1). Missing or expired: the grant,
       with fence 0 until ST_ACQ_FENCE. Columns are assigned left to right,
       so expires_at goes last. */
    [ST_ACQ_UPSERT] =
        "INSERT INTO @T (lock_key, token, owner, fence, ttl_ms, expires_at)"
        " VALUES (?, ?, ?, 0, ?, " NOW_MS " + ?) ON DUPLICATE KEY UPDATE"
        " token = IF(expires_at > " NOW_MS ", token, VALUES(token)),"
        " owner = IF(expires_at > " NOW_MS ", owner, VALUES(owner)),"
        " fence = IF(expires_at > " NOW_MS ", fence, 0),"
        " ttl_ms = IF(expires_at > " NOW_MS ", ttl_ms, VALUES(ttl_ms)),"
        " expires_at = IF(expires_at > " NOW_MS ","
        " IF(LAST_INSERT_ID(expires_at - " NOW_MS ") > 0, expires_at,"
        " expires_at), VALUES(expires_at))",
    [ST_FENCE_NEW] = "INSERT INTO @F () VALUES ()",
    [ST_ACQ_FENCE] = "UPDATE @T SET fence = ?,"
                     " expires_at = LAST_INSERT_ID(expires_at)"
                     " WHERE lock_key = ?",
    /* expires_at first: it must see the old ttl_ms when the new one is NULL
       (MySQL assigns left to right) */
    [ST_RENEW] = "UPDATE @T SET expires_at = " NOW_MS " + COALESCE(?, ttl_ms),"
                 " ttl_ms = COALESCE(?, ttl_ms)"
                 " WHERE lock_key = ? AND token = ? AND expires_at > " NOW_MS,
    [ST_RENEW_READ] = "SELECT fence, ttl_ms, expires_at FROM @T"
                      " WHERE lock_key = ?",
    [ST_RELEASE] = "DELETE FROM @T WHERE lock_key = ? AND token = ?"
                   " AND expires_at > " NOW_MS,
    [ST_HELD] = "SELECT 1 FROM @T WHERE lock_key = ? AND expires_at > " NOW_MS,
    [ST_INSPECT] = "SELECT fence, expires_at, expires_at - " NOW_MS ", owner"
                   " FROM @T WHERE lock_key = ? AND expires_at > " NOW_MS,
    [ST_REAP] = "DELETE FROM @T WHERE expires_at <= " NOW_MS
                " ORDER BY expires_at LIMIT ?",
    [ST_COUNT_HELD] = "SELECT COUNT(*) FROM @T WHERE expires_at > " NOW_MS,
    [ST_EVENT_BUMP] = "UPDATE @S SET v = LAST_INSERT_ID(v + 1) WHERE id = 2",
    [ST_EVENT_ADD] = "INSERT INTO @E (id, lock_key) VALUES (?, ?)",
    [ST_EVENTS] = "SELECT id, lock_key FROM @E WHERE id > ? ORDER BY id"
                  " LIMIT ?",
    [ST_EVENT_TOP] = "SELECT v FROM @S WHERE id = 2",
    [ST_EVENT_TRIM] = "DELETE FROM @E WHERE id <= ? LIMIT ?",
    [ST_FENCE_TOP] = "SELECT MAX(id) FROM @F",
    /* the highest row always stays: the counter never needs the rows on
       MariaDB >= 10.2.4 and MySQL 8 (it is persistent), but older servers
       restart it at MAX(id) + 1 */
    [ST_FENCE_TRIM] = "DELETE FROM @F WHERE id < ? LIMIT ?",
};

/* The schema (deploy/mysql/schema.sql), run once per process while the
 * tables are not known to exist. */
static const char *const schema_sql[] = {
    "CREATE TABLE IF NOT EXISTS @T ("
    " lock_key VARBINARY(512) NOT NULL,"
    " token VARBINARY(64) NOT NULL,"
    " owner VARBINARY(128) NULL,"
    " fence BIGINT UNSIGNED NOT NULL,"
    " ttl_ms BIGINT UNSIGNED NOT NULL,"
    " expires_at BIGINT NOT NULL,"
    " PRIMARY KEY (lock_key),"
    " KEY expires_at (expires_at)"
    ") ENGINE = InnoDB",
    "CREATE TABLE IF NOT EXISTS @S ("
    " id TINYINT UNSIGNED NOT NULL,"
    " v BIGINT UNSIGNED NOT NULL,"
    " PRIMARY KEY (id)"
    ") ENGINE = InnoDB",
    "CREATE TABLE IF NOT EXISTS @E ("
    " id BIGINT UNSIGNED NOT NULL,"
    " lock_key VARBINARY(512) NOT NULL,"
    " PRIMARY KEY (id)"
    ") ENGINE = InnoDB",
    "CREATE TABLE IF NOT EXISTS @F ("
    " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,"
    " PRIMARY KEY (id)"
    ") ENGINE = InnoDB",
    "INSERT IGNORE INTO @S (id, v) VALUES (1, 0), (2, 0)",
    "COMMIT",
};

/* Run after the tables exist, by anyone who may write them: the fence
 * counter starts above every fence handed out before: those of the old
 * sequence row (until it is retired), and those still in the lock table
 * (a fence table made again). The old row's lock is held throughout, so
 * an older lockd granting meanwhile either committed below the seed or
 * fails on the retired row. */
static const char *const seed_sql[] = {
    "SELECT v FROM @S WHERE id = 1 FOR UPDATE",
    "INSERT INTO @F (id) SELECT x.seed FROM (SELECT GREATEST("
    " COALESCE((SELECT IF(v < " MYSQL_BE_SEQ_RETIRED ", v, 0) FROM @S"
    " WHERE id = 1), 0),"
    " COALESCE((SELECT MAX(fence) FROM @T), 0)) + 1 AS seed) x"
    " WHERE x.seed > COALESCE((SELECT MAX(id) FROM @F), 0)",
    "UPDATE @S SET v = " MYSQL_BE_SEQ_RETIRED " WHERE id = 1",
    "COMMIT",
};

/* Tables made by someone else (deploy/mysql/schema.sql) for a user that may
 * not create them are used as they are if these all succeed. */
static const char *const schema_probe_sql[] = {
    "SELECT 1 FROM @T LIMIT 0",      "SELECT 1 FROM @E LIMIT 0",
    "SELECT 1 FROM @S WHERE id = 1", "SELECT 1 FROM @S WHERE id = 2",
    "SELECT 1 FROM @F LIMIT 0",
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

struct mysql_be;

extern const struct backend_ops mysql_backend; /* defined last */

/* One thread's connection; created on the thread's first call, freed by the
 * pthread key's destructor when the thread exits (or by close()). */
struct mysql_conn {
    struct mysql_be *be;
    MYSQL *db;                  /* NULL while disconnected */
    MYSQL_STMT *stmt[ST_COUNT]; /* prepared on first use; NULL before */
    int64_t retry_at_ms;        /* monotonic: no connect attempt before,
                                   unless be->ok_at_ms passes failed_at_ms */
    int64_t failed_at_ms;       /* monotonic: the last failed connect */
    int64_t backoff_ms;         /* after the next failed connect */
    struct mysql_conn *prev;    /* in be->conns, under be->mu */
    struct mysql_conn *next;
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
    unsigned connect_timeout_s;
    unsigned read_timeout_s;
    unsigned write_timeout_s;
    char *table;         /* owned, for messages */
    char *sql[ST_COUNT]; /* owned: stmt_sql with the table names in */
    char *schema[ARRAY_LEN(schema_sql)];      /* owned, expanded */
    char *probe[ARRAY_LEN(schema_probe_sql)]; /* owned, expanded */
    char *seed[ARRAY_LEN(seed_sql)];          /* owned, expanded */
    atomic_bool schema_ok; /* the tables exist (as far as we know) */
    atomic_bool down;      /* the last connect failed: log changes once */
    atomic_int_fast64_t ok_at_ms; /* monotonic: the last answer from the
                                     database to any thread; a newer one
                                     ends every thread's back-off */
    pthread_key_t tls;            /* -> this thread's struct mysql_conn */
    bool tls_made;
    pthread_mutex_t mu;  /* guards conns and stop */
    pthread_cond_t cond; /* wakes the background thread to stop */
    struct mysql_conn *conns;
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

/* What one attempt at an operation came to; see run_op(). */
enum attempt {
    ATTEMPT_DONE,   /* *res holds the answer */
    ATTEMPT_AGAIN,  /* rolled back (deadlock, duplicate key, schema made):
                       nothing changed, may run again */
    ATTEMPT_LOST,   /* the connection died before COMMIT: the server rolled
                       back, nothing changed; may run again on a new one */
    ATTEMPT_FAILED, /* unavailable; never retried */
};

/* Results of one statement run. */
struct run_info {
    bool found;        /* a row was fetched */
    uint64_t affected; /* rows matched (CLIENT_FOUND_ROWS) */
    uint64_t insert_id;
};

typedef enum attempt (*attempt_fn)(struct mysql_conn *c,
                                   void *arg,
                                   enum backend_result *res);

static pthread_once_t mysql_be_once = PTHREAD_ONCE_INIT;
static int mysql_be_lib_rc = -1;

static void mysql_be_lib_init(void)
{
    /* Once per process: Connector/C must not be initialised twice, and
       after mysql_library_end() never again, so it is never ended. */
    mysql_be_lib_rc = mysql_library_init(0, NULL, NULL);
}

/* The table-name suffix a placeholder "@c" stands for; NULL when "@c" is
 * not a placeholder. */
static const char *placeholder_suffix(char c)
{
    switch (c) {
    case 'T':
        return ""; /* the locks */
    case 'S':
        return "_seq";
    case 'E':
        return "_events";
    case 'F':
        return "_fence";
    default:
        return NULL;
    }
}

/* Replace @T, @S, @E and @F in tmpl by the quoted table names. */
static char *sql_expand(const char *tmpl, const char *table)
{
    size_t tl = strlen(table), n = 0;
    const char *suffix;
    char *out, *p;

    for (const char *s = tmpl; *s != '\0'; s++)
        n += s[0] == '@' && placeholder_suffix(s[1]) != NULL ? tl + 10 : 1;
    out = malloc(n + 1);
    if (out == NULL)
        return NULL;
    p = out;
    for (const char *s = tmpl; *s != '\0'; s++) {
        suffix = s[0] == '@' ? placeholder_suffix(s[1]) : NULL;
        if (suffix == NULL) {
            *p++ = *s;
            continue;
        }
        *p++ = '`';
        memcpy(p, table, tl);
        p += tl;
        memcpy(p, suffix, strlen(suffix));
        p += strlen(suffix);
        *p++ = '`';
        s++;
    }
    *p = '\0';
    return out;
}

/* Bind helpers: the binds point at the caller's storage, used at execute. */
static void
bind_bytes(MYSQL_BIND *b, const char *p, size_t n, unsigned long *len)
{
    memset(b, 0, sizeof(*b));
    *len = (unsigned long)n;
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = (void *)(uintptr_t)p; /* read only for input parameters */
    b->buffer_length = *len;
    b->length = len;
}

static void bind_null(MYSQL_BIND *b)
{
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_NULL;
}

static void bind_u64(MYSQL_BIND *b, uint64_t *v)
{
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
    b->is_unsigned = 1;
}

static void bind_i64(MYSQL_BIND *b, int64_t *v, my_bool *is_null)
{
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
    b->is_null = is_null;
}

static void conn_drop(struct mysql_conn *c)
{
    for (int i = 0; i < ST_COUNT; i++) {
        if (c->stmt[i] != NULL)
            mysql_stmt_close(c->stmt[i]);
        c->stmt[i] = NULL;
    }
    if (c->db != NULL)
        mysql_close(c->db);
    c->db = NULL;
    c->retry_at_ms = 0; /* a lost connection may be replaced at once */
}

/* Runs one statement that carries no user data (session set-up, schema). */
static unsigned conn_query(struct mysql_conn *c, const char *sql)
{
    if (mysql_real_query(c->db, sql, (unsigned long)strlen(sql)) != 0)
        return mysql_errno(c->db) != 0 ? mysql_errno(c->db) : CR_UNKNOWN_ERROR;
    /* none of ours returns rows, but never leave a result unread */
    MYSQL_RES *r = mysql_store_result(c->db);
    if (r != NULL)
        mysql_free_result(r);
    return 0;
}

/* 1 if the query returned a row, 0 if none, -1 on an error. */
static int conn_probe(struct mysql_conn *c, const char *sql)
{
    MYSQL_RES *r;
    int found;

    if (mysql_real_query(c->db, sql, (unsigned long)strlen(sql)) != 0)
        return -1;
    r = mysql_store_result(c->db);
    if (r == NULL)
        return mysql_errno(c->db) != 0 ? -1 : 0;
    found = mysql_fetch_row(r) != NULL;
    mysql_free_result(r);
    return found;
}

/* Create the tables if missing; else make sure they can be used. 0 when
 * they can; -1 (logged once per outage) when not. */
static int schema_ensure(struct mysql_conn *c)
{
    struct mysql_be *be = c->be;
    char why[256] = "";
    size_t i;

    for (i = 0; i < ARRAY_LEN(be->schema); i++) {
        if (conn_query(c, be->schema[i]) != 0) {
            snprintf(why, sizeof(why), "%s (%u)", mysql_error(c->db),
                     mysql_errno(c->db));
            mysql_rollback(c->db);
            break;
        }
    }
    if (i < ARRAY_LEN(be->schema)) {
        /* no CREATE privilege, say: tables made beforehand will do */
        for (size_t j = 0; j < ARRAY_LEN(be->probe); j++) {
            int found = conn_probe(c, be->probe[j]);
            /* the two sequence rows must be there */
            if (found < 0 || (found == 0 && (j == 2 || j == 3))) {
                mysql_rollback(c->db);
                if (!atomic_load(&be->down))
                    log_warn("mysql: tables %s, %s_seq, %s_events and "
                             "%s_fence are missing and cannot be created: %s",
                             be->table, be->table, be->table, be->table, why);
                return -1;
            }
        }
        mysql_rollback(c->db);
        log_info("mysql: using the existing tables %s* (cannot create: %s)",
                 be->table, why);
    }
    for (i = 0; i < ARRAY_LEN(be->seed); i++) {
        if (conn_query(c, be->seed[i]) != 0) {
            if (!atomic_load(&be->down))
                log_warn("mysql: cannot seed the fence counter %s_fence: "
                         "%s (%u)",
                         be->table, mysql_error(c->db), mysql_errno(c->db));
            mysql_rollback(c->db);
            return -1;
        }
    }
    atomic_store(&be->schema_ok, true);
    return 0;
}

static int conn_connect(struct mysql_conn *c)
{
    struct mysql_be *be = c->be;
    my_bool no = 0;
    unsigned err;

    c->db = mysql_init(NULL);
    if (c->db == NULL)
        return -1;
    if (mysql_options(c->db, MYSQL_OPT_CONNECT_TIMEOUT,
                      &be->connect_timeout_s) != 0 ||
        mysql_options(c->db, MYSQL_OPT_READ_TIMEOUT, &be->read_timeout_s) !=
            0 ||
        mysql_options(c->db, MYSQL_OPT_WRITE_TIMEOUT, &be->write_timeout_s) !=
            0 ||
        mysql_options(c->db, MYSQL_OPT_RECONNECT, &no) != 0 ||
        mysql_options(c->db, MYSQL_SET_CHARSET_NAME, "utf8mb4") != 0)
        goto fail;
    if (mysql_real_connect(c->db, be->socket != NULL ? "localhost" : be->host,
                           be->user, be->password, be->database, be->port,
                           be->socket, CLIENT_FOUND_ROWS) == NULL)
        goto fail;
    /* Autocommit off: each operation's first statement opens its
       transaction and the operation ends it, saving a round trip. */
    err = conn_query(c, "SET SESSION TRANSACTION ISOLATION LEVEL "
                        "READ COMMITTED");
    if (err == 0)
        err = conn_query(c, "SET time_zone = '+00:00', autocommit = 0,"
                            " innodb_lock_wait_timeout = 1");
    if (err != 0)
        goto fail;
    /* MariaDB only: a lockd stopped in mid-transaction must not hold the
       fence row for long. Plain MySQL has no such variable. */
    (void)conn_query(c, "SET idle_transaction_timeout = 2");
    if (!atomic_load(&be->schema_ok) && schema_ensure(c) != 0) {
        atomic_store(&be->down, true); /* logged by schema_ensure() */
        conn_drop(c);
        return -1;
    }
    atomic_store_explicit(&be->ok_at_ms, clock_mono_ms(),
                          memory_order_relaxed);
    if (atomic_exchange(&be->down, false))
        log_info("mysql: connected to %s again",
                 be->socket != NULL ? be->socket : be->host);
    return 0;
fail:
    if (!atomic_exchange(&be->down, true))
        log_warn("mysql: cannot connect to %s: %s",
                 be->socket != NULL ? be->socket : be->host,
                 c->db != NULL ? mysql_error(c->db) : "out of memory");
    conn_drop(c);
    return -1;
}

static void conn_destroy(void *p)
{
    struct mysql_conn *c = p;
    struct mysql_be *be = c->be;

    pthread_mutex_lock(&be->mu);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        be->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&be->mu);
    conn_drop(c);
    free(c);
    mysql_thread_end();
}

/* This thread's connection, connected; NULL when the database cannot be
 * reached now (or within the back-off after a failed connect). *fresh: it
 * was connected by this call. */
static struct mysql_conn *conn_get(struct mysql_be *be, bool *fresh)
{
    struct mysql_conn *c = pthread_getspecific(be->tls);
    int64_t now;

    *fresh = false;
    if (c == NULL) {
        c = calloc(1, sizeof(*c));
        if (c == NULL)
            return NULL;
        c->be = be;
        if (pthread_setspecific(be->tls, c) != 0) {
            free(c);
            return NULL;
        }
        pthread_mutex_lock(&be->mu);
        c->next = be->conns;
        if (be->conns != NULL)
            be->conns->prev = c;
        be->conns = c;
        pthread_mutex_unlock(&be->mu);
    }
    if (c->db != NULL)
        return c;
    now = clock_mono_ms();
    if (now < c->retry_at_ms &&
        atomic_load_explicit(&be->ok_at_ms, memory_order_relaxed) <
            c->failed_at_ms)
        return NULL; /* backing off, and no thread got through since */
    if (conn_connect(c) != 0) {
        c->failed_at_ms = clock_mono_ms();
        c->backoff_ms = c->backoff_ms == 0 ? MYSQL_BE_BACKOFF_MIN_MS
                        : c->backoff_ms * 2 > MYSQL_BE_BACKOFF_MAX_MS
                            ? MYSQL_BE_BACKOFF_MAX_MS
                            : c->backoff_ms * 2;
        c->retry_at_ms = c->failed_at_ms + c->backoff_ms;
        return NULL;
    }
    c->backoff_ms = 0;
    *fresh = true;
    return c;
}

/* Prepared statement id on c, prepared on first use; NULL and *err set on
 * failure. */
static MYSQL_STMT *
conn_stmt(struct mysql_conn *c, enum stmt_id id, unsigned *err)
{
    MYSQL_STMT *st = c->stmt[id];
    const char *sql = c->be->sql[id];

    if (st != NULL)
        return st;
    st = mysql_stmt_init(c->db);
    if (st == NULL) {
        *err = CR_OUT_OF_MEMORY;
        return NULL;
    }
    if (mysql_stmt_prepare(st, sql, (unsigned long)strlen(sql)) != 0) {
        *err =
            mysql_stmt_errno(st) != 0 ? mysql_stmt_errno(st) : CR_UNKNOWN_ERROR;
        if (*err < CR_MIN_ERROR || *err > CR_MAX_ERROR)
            log_warn("mysql: cannot prepare statement %d: %s", (int)id,
                     mysql_stmt_error(st));
        mysql_stmt_close(st);
        return NULL;
    }
    c->stmt[id] = st;
    return st;
}

/* Execute statement id with params (NULL: none); with results, fetch at most
 * one row into them. 0, or the client or server error number. */
static unsigned stmt_run(struct mysql_conn *c,
                         enum stmt_id id,
                         MYSQL_BIND *params,
                         MYSQL_BIND *results,
                         struct run_info *info)
{
    unsigned err = 0;
    MYSQL_STMT *st = conn_stmt(c, id, &err);
    int rc;

    memset(info, 0, sizeof(*info));
    if (st == NULL)
        return err;
    if (params != NULL && mysql_stmt_bind_param(st, params) != 0)
        goto fail;
    if (mysql_stmt_execute(st) != 0)
        goto fail;
    info->affected = (uint64_t)mysql_stmt_affected_rows(st);
    info->insert_id = (uint64_t)mysql_stmt_insert_id(st);
    if (results == NULL)
        return 0;
    if (mysql_stmt_bind_result(st, results) != 0 ||
        mysql_stmt_store_result(st) != 0)
        goto fail;
    rc = mysql_stmt_fetch(st);
    if (rc == 1) {
        err = mysql_stmt_errno(st);
        mysql_stmt_free_result(st);
        return err != 0 ? err : CR_UNKNOWN_ERROR;
    }
    info->found = rc == 0 || rc == MYSQL_DATA_TRUNCATED;
    mysql_stmt_free_result(st);
    return 0;
fail:
    err = mysql_stmt_errno(st);
    return err != 0 ? err : CR_UNKNOWN_ERROR;
}

/* End the open transaction without keeping anything. */
static void conn_rollback(struct mysql_conn *c)
{
    if (c->db != NULL && mysql_rollback(c->db) != 0)
        conn_drop(c); /* the server rolls back when the session ends */
}

static bool err_is_lost(unsigned err)
{
    return (err >= CR_MIN_ERROR && err <= CR_MAX_ERROR) ||
           err == ER_CONNECTION_KILLED || err == ER_SERVER_SHUTDOWN ||
           err == ER_CLIENT_INTERACTION_TIMEOUT ||
           err == ER_QUERY_INTERRUPTED || err == ER_NET_READ_INTERRUPTED;
}

/* Classify a failed statement inside an open transaction (before COMMIT)
 * and leave c ready for the next attempt. */
static enum attempt conn_failed(struct mysql_conn *c, unsigned err)
{
    struct mysql_be *be = c->be;

    if (err_is_lost(err)) {
        conn_drop(c);
        return ATTEMPT_LOST;
    }
    switch (err) {
    case ER_LOCK_DEADLOCK: /* the server rolled the transaction back */
    case ER_DUP_ENTRY:     /* a racing acquire inserted the key first */
        conn_rollback(c);
        return ATTEMPT_AGAIN;
    case ER_NO_SUCH_TABLE: /* dropped under us: make it again */
        atomic_store(&be->schema_ok, false);
        conn_rollback(c);
        if (c->db != NULL && schema_ensure(c) == 0)
            return ATTEMPT_AGAIN;
        return ATTEMPT_FAILED;
    case ER_LOCK_WAIT_TIMEOUT: /* a stuck session holds the row */
        conn_rollback(c);
        return ATTEMPT_FAILED;
    default:
        log_warn("mysql: statement failed: %s (%u)",
                 c->db != NULL ? mysql_error(c->db) : "", err);
        conn_rollback(c);
        return ATTEMPT_FAILED;
    }
}

/* COMMIT; on failure the outcome is unknown (the reply may be what was
 * lost), so the answer is UNAVAILABLE and never a retry. */
static enum attempt conn_commit(struct mysql_conn *c)
{
    if (mysql_commit(c->db) == 0)
        return ATTEMPT_DONE;
    log_warn("mysql: commit failed: %s (%u)", mysql_error(c->db),
             mysql_errno(c->db));
    conn_drop(c);
    return ATTEMPT_FAILED;
}

/* Runs fn on this thread's connection. A deadlock or duplicate key is
 * retried at once; a lost connection once more on a new connection, when
 * the old one was reused and died quickly (typically: the server restarted
 * since its last use). Never more than MYSQL_BE_ATTEMPTS tries. */
static enum backend_result run_op(struct mysql_be *be, attempt_fn fn, void *arg)
{
    enum backend_result res = BACKEND_UNAVAILABLE;
    bool retried_lost = false;

    for (int i = 0; i < MYSQL_BE_ATTEMPTS; i++) {
        bool fresh;
        struct mysql_conn *c = conn_get(be, &fresh);
        int64_t t0;
        enum attempt a;

        if (c == NULL)
            return BACKEND_UNAVAILABLE;
        t0 = clock_mono_ms();
        a = fn(c, arg, &res);
        switch (a) {
        case ATTEMPT_DONE:
            atomic_store_explicit(&be->ok_at_ms, clock_mono_ms(),
                                  memory_order_relaxed);
            return res;
        case ATTEMPT_AGAIN:
            continue;
        case ATTEMPT_LOST:
            if (fresh || retried_lost ||
                clock_mono_ms() - t0 > MYSQL_BE_FAST_FAIL_MS)
                return BACKEND_UNAVAILABLE;
            retried_lost = true;
            continue;
        case ATTEMPT_FAILED:
            return BACKEND_UNAVAILABLE;
        }
    }
    return BACKEND_UNAVAILABLE;
}

/* acquire_attempt()'s and renew_attempt()'s argument through run_op() */
struct grant_arg {
    const struct lock_req *req;
    struct lock_grant *out;
};

static enum attempt
acquire_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    struct grant_arg *a = arg;
    const struct lock_req *req = a->req;
    struct mysql_be *be = c->be;
    MYSQL_BIND p[5];
    unsigned long klen, tlen, olen;
    uint64_t fence = 0, ttl = req->ttl_ms;
    struct run_info info;
    unsigned err;
    enum attempt done;
    bool took_over;

    bind_bytes(&p[0], req->key, req->key_len, &klen);
    bind_bytes(&p[1], req->token, strlen(req->token), &tlen);
    if (req->owner != NULL)
        bind_bytes(&p[2], req->owner, strlen(req->owner), &olen);
    else
        bind_null(&p[2]);
    bind_u64(&p[3], &ttl);
    bind_u64(&p[4], &ttl);

    /* 1. lock the key's row (inserting it, or taking over an expired one)
       in one statement, judged by the database's clock; a racing acquire
       of the same key waits here for our commit */
    err = stmt_run(c, ST_ACQ_UPSERT, p, NULL, &info);
    if (err != 0)
        return conn_failed(c, err);
    if (info.insert_id != 0) { /* held: LAST_INSERT_ID() is its TTL left */
        conn_rollback(c);
        a->out->retry_ms = info.insert_id;
        *res = BACKEND_HELD;
        return ATTEMPT_DONE;
    }
    /* 1 = inserted, 2 = an expired row taken over (the connection counts
       found rows, but a held row, the only unchanged one, is dealt with) */
    took_over = info.affected == 2;

    /* 2. the next fence, allocated under the key's row lock: after the
       commit of every earlier grant of this key, so above its fence.
       AUTO_INCREMENT's lock is not held to the commit. */
    err = stmt_run(c, ST_FENCE_NEW, NULL, NULL, &info);
    if (err != 0)
        return conn_failed(c, err);
    fence = info.insert_id;
    if (fence == 0 || fence > LOCK_FENCE_MAX) {
        log_error("mysql: fence counter %s_fence is exhausted", be->table);
        conn_rollback(c);
        return ATTEMPT_FAILED;
    }

    /* 3. write the fence; LAST_INSERT_ID() brings the expiry back */
    {
        MYSQL_BIND q[2] = { p[0], p[0] };
        bind_u64(&q[0], &fence);
        err = stmt_run(c, ST_ACQ_FENCE, q, NULL, &info);
    }
    if (err != 0)
        return conn_failed(c, err);
    if (info.affected != 1 || info.insert_id == 0) { /* cannot happen */
        log_error("mysql: the granted row of a key is gone before commit");
        conn_rollback(c);
        return ATTEMPT_FAILED;
    }

    /* 4. commit: only now is the lock granted */
    done = conn_commit(c);
    if (done != ATTEMPT_DONE)
        return done;
    if (took_over)
        metrics_lock_expired(1);
    a->out->fence = fence;
    a->out->ttl_ms = ttl;
    a->out->expires_at_ms = (int64_t)info.insert_id;
    *res = BACKEND_OK;
    return ATTEMPT_DONE;
}

/* After a renew or release matched nothing: is the key held by anyone?
 * Then it is not ours (MISMATCH); else NOT_FOUND. Ends the transaction. */
static enum attempt settle_unmatched(struct mysql_conn *c,
                                     const struct lock_req *req,
                                     enum backend_result *res)
{
    MYSQL_BIND p[1], r[1];
    unsigned long klen;
    int64_t one;
    my_bool one_null = 0;
    struct run_info info;
    unsigned err;

    bind_bytes(&p[0], req->key, req->key_len, &klen);
    bind_i64(&r[0], &one, &one_null);
    err = stmt_run(c, ST_HELD, p, r, &info);
    if (err != 0)
        return conn_failed(c, err);
    conn_rollback(c);
    *res = info.found ? BACKEND_MISMATCH : BACKEND_NOT_FOUND;
    return ATTEMPT_DONE;
}

static enum attempt
renew_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    struct grant_arg *a = arg;
    const struct lock_req *req = a->req;
    MYSQL_BIND p[4], r[3];
    unsigned long klen, tlen;
    uint64_t ttl = req->ttl_ms, fence = 0, ttl_now = 0;
    int64_t expires = 0;
    my_bool nulls[3] = { 0, 0, 0 };
    struct run_info info;
    unsigned err;
    enum attempt done;

    if (ttl == 0) { /* keep the TTL the lock last ran with */
        bind_null(&p[0]);
        bind_null(&p[1]);
    } else {
        bind_u64(&p[0], &ttl);
        bind_u64(&p[1], &ttl);
    }
    bind_bytes(&p[2], req->key, req->key_len, &klen);
    bind_bytes(&p[3], req->token, strlen(req->token), &tlen);
    err = stmt_run(c, ST_RENEW, p, NULL, &info);
    if (err != 0)
        return conn_failed(c, err);
    if (info.affected == 0)
        return settle_unmatched(c, req, res);

    /* the row is ours and locked until COMMIT */
    memset(r, 0, sizeof(r));
    bind_u64(&r[0], &fence);
    r[0].is_null = &nulls[0];
    bind_u64(&r[1], &ttl_now);
    r[1].is_null = &nulls[1];
    bind_i64(&r[2], &expires, &nulls[2]);
    err = stmt_run(c, ST_RENEW_READ, &p[2], r, &info);
    if (err != 0)
        return conn_failed(c, err);
    if (!info.found) { /* cannot happen under the row lock */
        conn_rollback(c);
        return ATTEMPT_FAILED;
    }
    done = conn_commit(c);
    if (done != ATTEMPT_DONE)
        return done;
    a->out->fence = fence;
    a->out->ttl_ms = ttl_now;
    a->out->expires_at_ms = expires;
    *res = BACKEND_OK;
    return ATTEMPT_DONE;
}

static enum attempt
release_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    const struct lock_req *req = arg;
    MYSQL_BIND p[2];
    unsigned long klen, tlen;
    uint64_t id;
    struct run_info info;
    unsigned err;
    enum attempt done;

    bind_bytes(&p[0], req->key, req->key_len, &klen);
    bind_bytes(&p[1], req->token, strlen(req->token), &tlen);
    err = stmt_run(c, ST_RELEASE, p, NULL, &info);
    if (err != 0)
        return conn_failed(c, err);
    if (info.affected == 0)
        return settle_unmatched(c, req, res);

    /* tell the other instances: an event whose id is taken under the
       sequence row's lock, so ids become visible in order, without gaps */
    err = stmt_run(c, ST_EVENT_BUMP, NULL, NULL, &info);
    if (err != 0)
        return conn_failed(c, err);
    if (info.affected != 1) {
        atomic_store(&c->be->schema_ok, false);
        conn_rollback(c);
        return ATTEMPT_FAILED;
    }
    id = info.insert_id;
    bind_u64(&p[1], &id);
    {
        MYSQL_BIND q[2] = { p[1], p[0] };
        err = stmt_run(c, ST_EVENT_ADD, q, NULL, &info);
    }
    if (err != 0)
        return conn_failed(c, err);
    done = conn_commit(c);
    if (done != ATTEMPT_DONE)
        return done;
    *res = BACKEND_OK;
    return ATTEMPT_DONE;
}

struct inspect_arg {
    const char *key;
    size_t key_len;
    struct lock_info *out;
};

static enum attempt
inspect_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    struct inspect_arg *a = arg;
    MYSQL_BIND p[1], r[4];
    unsigned long klen, olen = 0;
    uint64_t fence = 0;
    int64_t expires = 0, left = 0;
    my_bool nulls[4] = { 0, 0, 0, 0 };
    my_bool trunc = 0;
    char owner[LOCK_OWNER_MAX + 1];
    struct run_info info;
    unsigned err;

    bind_bytes(&p[0], a->key, a->key_len, &klen);
    bind_u64(&r[0], &fence);
    r[0].is_null = &nulls[0];
    bind_i64(&r[1], &expires, &nulls[1]);
    bind_i64(&r[2], &left, &nulls[2]);
    memset(&r[3], 0, sizeof(r[3]));
    r[3].buffer_type = MYSQL_TYPE_STRING;
    r[3].buffer = owner;
    r[3].buffer_length = LOCK_OWNER_MAX;
    r[3].length = &olen;
    r[3].is_null = &nulls[3];
    r[3].error = &trunc;
    err = stmt_run(c, ST_INSPECT, p, r, &info);
    if (err != 0)
        return conn_failed(c, err);
    conn_rollback(c);
    if (!info.found) {
        *res = BACKEND_NOT_FOUND;
        return ATTEMPT_DONE;
    }
    a->out->fence = fence;
    a->out->ttl_ms = left >= 1 ? (uint64_t)left : 1;
    a->out->expires_at_ms = expires;
    a->out->has_owner = !nulls[3];
    if (a->out->has_owner) {
        size_t n = olen < LOCK_OWNER_MAX ? olen : LOCK_OWNER_MAX;
        memcpy(a->out->owner, owner, n);
        a->out->owner[n] = '\0';
    }
    *res = BACKEND_OK;
    return ATTEMPT_DONE;
}

static enum attempt
ping_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    (void)arg;
    if (mysql_ping(c->db) != 0) {
        conn_drop(c);
        return ATTEMPT_LOST;
    }
    *res = BACKEND_OK;
    return ATTEMPT_DONE;
}

static enum attempt
count_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    int64_t *count = arg;
    MYSQL_BIND r[1];
    my_bool is_null = 0;
    struct run_info info;
    unsigned err;

    bind_i64(&r[0], count, &is_null);
    err = stmt_run(c, ST_COUNT_HELD, NULL, r, &info);
    if (err != 0)
        return conn_failed(c, err);
    conn_rollback(c);
    if (!info.found || is_null)
        *count = -1;
    *res = BACKEND_OK;
    return ATTEMPT_DONE;
}

/* Deletes up to MYSQL_BE_REAP_BATCH expired rows; *res is OK and *arg the
 * number deleted. Fences stay safe: they come from the sequence, not the
 * rows. */
static enum attempt
reap_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    uint64_t *deleted = arg;
    uint64_t batch = MYSQL_BE_REAP_BATCH;
    MYSQL_BIND p[1];
    struct run_info info;
    unsigned err;
    enum attempt done;

    bind_u64(&p[0], &batch);
    err = stmt_run(c, ST_REAP, p, NULL, &info);
    if (err != 0)
        return conn_failed(c, err);
    done = conn_commit(c);
    if (done != ATTEMPT_DONE)
        return done;
    *deleted = info.affected;
    *res = BACKEND_OK;
    return ATTEMPT_DONE;
}

/* Notifies every key released (through any instance) since the last
 * event seen; *arg is the number of events read. The first call only
 * learns where the events stand. */
static enum attempt
watch_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    struct mysql_be *be = c->be;
    uint64_t *count = arg;
    uint64_t after = be->watch_last, limit = MYSQL_BE_WATCH_BATCH, id = 0;
    char key[LOCK_KEY_MAX];
    unsigned long klen = 0;
    my_bool nulls[2] = { 0, 0 }, trunc = 0;
    MYSQL_BIND p[2], r[2];
    struct run_info info;
    MYSQL_STMT *st;
    unsigned err = 0;
    int rc;

    *count = 0;
    if (!be->watch_primed) {
        bind_u64(&r[0], &id);
        r[0].is_null = &nulls[0];
        err = stmt_run(c, ST_EVENT_TOP, NULL, r, &info);
        if (err != 0)
            return conn_failed(c, err);
        conn_rollback(c);
        be->watch_last = info.found && !nulls[0] ? id : 0;
        be->watch_primed = true;
        *res = BACKEND_OK;
        return ATTEMPT_DONE;
    }
    st = conn_stmt(c, ST_EVENTS, &err);
    if (st == NULL)
        return conn_failed(c, err);
    bind_u64(&p[0], &after);
    bind_u64(&p[1], &limit);
    bind_u64(&r[0], &id);
    r[0].is_null = &nulls[0];
    memset(&r[1], 0, sizeof(r[1]));
    r[1].buffer_type = MYSQL_TYPE_STRING;
    r[1].buffer = key;
    r[1].buffer_length = sizeof(key);
    r[1].length = &klen;
    r[1].is_null = &nulls[1];
    r[1].error = &trunc;
    if (mysql_stmt_bind_param(st, p) != 0 || mysql_stmt_execute(st) != 0 ||
        mysql_stmt_bind_result(st, r) != 0 ||
        mysql_stmt_store_result(st) != 0) {
        err = mysql_stmt_errno(st);
        mysql_stmt_free_result(st);
        return conn_failed(c, err != 0 ? err : CR_UNKNOWN_ERROR);
    }
    while ((rc = mysql_stmt_fetch(st)) == 0 || rc == MYSQL_DATA_TRUNCATED) {
        if (nulls[0] || id <= be->watch_last)
            continue;
        be->watch_last = id;
        (*count)++;
        if (!nulls[1] && klen >= 1 && klen <= sizeof(key) &&
            be->hooks.notify != NULL)
            be->hooks.notify(be->hooks.arg, key, klen);
    }
    mysql_stmt_free_result(st);
    conn_rollback(c);
    *res = BACKEND_OK;
    return ATTEMPT_DONE;
}

/* Once a reap round: events not seen for MYSQL_BE_EVENTS_KEEP_MS go, and a
 * sequence that went back (tables made again) is followed. */
static enum attempt
trim_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    struct mysql_be *be = c->be;
    uint64_t *deleted = arg, top = 0, batch = MYSQL_BE_REAP_BATCH * 10;
    my_bool is_null = 0;
    MYSQL_BIND p[2], r[1];
    struct run_info info;
    unsigned err;
    enum attempt done;
    int64_t now = clock_mono_ms();

    *deleted = 0;
    bind_u64(&r[0], &top);
    r[0].is_null = &is_null;
    err = stmt_run(c, ST_EVENT_TOP, NULL, r, &info);
    if (err != 0)
        return conn_failed(c, err);
    if (info.found && !is_null && top < be->watch_last)
        be->watch_last = top;
    if (be->trim_id > 0 && now >= be->trim_at_ms) {
        bind_u64(&p[0], &be->trim_id);
        bind_u64(&p[1], &batch);
        err = stmt_run(c, ST_EVENT_TRIM, p, NULL, &info);
        if (err != 0)
            return conn_failed(c, err);
        *deleted = info.affected;
    }
    done = conn_commit(c);
    if (done != ATTEMPT_DONE)
        return done;
    if (*deleted < batch && now >= be->trim_at_ms) {
        be->trim_id = be->watch_last;
        be->trim_at_ms = now + MYSQL_BE_EVENTS_KEEP_MS;
    }
    *res = BACKEND_OK;
    return ATTEMPT_DONE;
}

/* Deletes up to MYSQL_BE_FENCE_BATCH fence rows below the highest one
 * seen a round earlier (whose grant has long committed or rolled back);
 * *arg is the number deleted. The highest row always stays. */
static enum attempt
fence_trim_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    struct mysql_be *be = c->be;
    uint64_t *deleted = arg, top = 0, batch = MYSQL_BE_FENCE_BATCH;
    my_bool is_null = 0;
    MYSQL_BIND p[2], r[1];
    struct run_info info;
    unsigned err;
    enum attempt done;

    *deleted = 0;
    bind_u64(&r[0], &top);
    r[0].is_null = &is_null;
    err = stmt_run(c, ST_FENCE_TOP, NULL, r, &info);
    if (err != 0)
        return conn_failed(c, err);
    if (!info.found || is_null)
        top = 0;               /* no rows */
    if (top < be->fence_floor) /* the table was made again */
        be->fence_floor = top;
    if (be->fence_floor > 0) {
        bind_u64(&p[0], &be->fence_floor);
        bind_u64(&p[1], &batch);
        err = stmt_run(c, ST_FENCE_TRIM, p, NULL, &info);
        if (err != 0)
            return conn_failed(c, err);
        *deleted = info.affected;
    }
    done = conn_commit(c);
    if (done != ATTEMPT_DONE)
        return done;
    if (*deleted < batch)
        be->fence_floor = top; /* caught up: next round, up to here */
    *res = BACKEND_OK;
    return ATTEMPT_DONE;
}

static void bg_reap(struct mysql_be *be)
{
    int64_t t0 = clock_mono_ms();
    uint64_t deleted;

    do {
        deleted = 0;
        if (run_op(be, reap_attempt, &deleted) != BACKEND_OK)
            return;
        if (deleted > 0)
            metrics_lock_expired(deleted);
    } while (deleted == MYSQL_BE_REAP_BATCH &&
             clock_mono_ms() - t0 < MYSQL_BE_REAP_BUDGET_MS);
    (void)run_op(be, trim_attempt, &deleted);
    do {
        deleted = 0;
        if (run_op(be, fence_trim_attempt, &deleted) != BACKEND_OK)
            return;
    } while (deleted == MYSQL_BE_FENCE_BATCH &&
             clock_mono_ms() - t0 < MYSQL_BE_REAP_BUDGET_MS);
}

/* The background thread: polls the event table every
 * MYSQL_BE_WATCH_EVERY_MS, reaps every MYSQL_BE_REAP_EVERY_MS. */
static void *bg_main(void *arg)
{
    struct mysql_be *be = arg;
    int64_t next_reap = clock_mono_ms() + MYSQL_BE_REAP_EVERY_MS;

    pthread_mutex_lock(&be->mu);
    while (!be->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += (long)MYSQL_BE_WATCH_EVERY_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!be->stop &&
               pthread_cond_timedwait(&be->cond, &be->mu, &ts) != ETIMEDOUT)
            ;
        if (be->stop)
            break;
        pthread_mutex_unlock(&be->mu);

        uint64_t n;
        do { /* a full batch: more are waiting */
            n = 0;
            if (run_op(be, watch_attempt, &n) != BACKEND_OK)
                break;
        } while (n == MYSQL_BE_WATCH_BATCH);
        if (clock_mono_ms() >= next_reap) {
            bg_reap(be);
            next_reap = clock_mono_ms() + MYSQL_BE_REAP_EVERY_MS;
        }

        pthread_mutex_lock(&be->mu);
    }
    pthread_mutex_unlock(&be->mu);
    return NULL;
}

static void mysql_be_close(struct backend *base)
{
    struct mysql_be *be = (struct mysql_be *)base;

    if (be == NULL)
        return;
    if (be->bg_started) {
        pthread_mutex_lock(&be->mu);
        be->stop = true;
        pthread_cond_signal(&be->cond);
        pthread_mutex_unlock(&be->mu);
        pthread_join(be->bg, NULL); /* its key destructor ran */
    }
    if (be->tls_made) {
        /* Threads still alive (this one, usually) keep a connection: close
           them all; after pthread_key_delete no destructor runs. */
        pthread_mutex_lock(&be->mu);
        while (be->conns != NULL) {
            struct mysql_conn *c = be->conns;
            be->conns = c->next;
            conn_drop(c);
            free(c);
        }
        pthread_mutex_unlock(&be->mu);
        pthread_setspecific(be->tls, NULL);
        pthread_key_delete(be->tls);
    }
    pthread_cond_destroy(&be->cond);
    pthread_mutex_destroy(&be->mu);
    for (int i = 0; i < ST_COUNT; i++)
        free(be->sql[i]);
    for (size_t i = 0; i < ARRAY_LEN(be->schema); i++)
        free(be->schema[i]);
    for (size_t i = 0; i < ARRAY_LEN(be->probe); i++)
        free(be->probe[i]);
    for (size_t i = 0; i < ARRAY_LEN(be->seed); i++)
        free(be->seed[i]);
    free(be->host);
    free(be->user);
    if (be->password != NULL)
        explicit_bzero(be->password, strlen(be->password));
    free(be->password);
    free(be->database);
    free(be->socket);
    free(be->table);
    free(be);
}

static int table_name_ok(const char *t)
{
    size_t n = strlen(t);

    if (n == 0 || n > MYSQL_BE_TABLE_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = t[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || ch == '_'))
            return 0;
    }
    return 1;
}

static char *dup_or_null(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

/* Millisecond option name into whole seconds (Connector/C's unit),
 * rounded up. */
static int opt_timeout(const struct url *u,
                       const char *name,
                       uint64_t def_ms,
                       unsigned *out_s)
{
    const char *v = url_param(u, name);
    uint64_t ms = def_ms;

    if (v != NULL &&
        text_parse_u64(v, 1, MYSQL_BE_TIMEOUT_MAX_MS, &ms) != 0) {
        log_error("mysql: %s must be 1..%d ms", name, MYSQL_BE_TIMEOUT_MAX_MS);
        return -1;
    }
    *out_s = (unsigned)((ms + 999) / 1000);
    return 0;
}

/* Fill be from url; BACKEND_INVALID with a logged reason, or NO_MEMORY. */
static enum backend_result parse_url(struct mysql_be *be, const char *url,
        char *errbuf,
        size_t errlen)
{
    static const char *const allowed[] = {
        "socket",          "connect_timeout_ms",
        "read_timeout_ms", "write_timeout_ms",
        "table",           NULL,
    };
    struct url u;
    const char *bad = NULL, *v;
    enum backend_result r = BACKEND_INVALID;
    uint64_t port = MYSQL_BE_DEFAULT_PORT;

    if (url_parse(url, &u) != 0) {
        snprintf(errbuf, errlen, "mysql: malformed backend URL");
        return BACKEND_INVALID;
    }
    if (strcmp(u.scheme, "mysql") != 0)
        goto out;
    if (url_check_params(&u, allowed, &bad) != 0) {
        snprintf(errbuf, errlen, "mysql: unknown URL option '%s' (known: socket, "
                  "connect_timeout_ms, read_timeout_ms, write_timeout_ms, "
                  "table)",
                  bad);
        goto out;
    }
    if (u.user == NULL || u.user[0] == '\0') {
        snprintf(errbuf, errlen, "mysql: the URL needs a user: mysql://user[:password]@host"
                  "[:port]/database");
        goto out;
    }
    if (u.path == NULL || u.path[0] == '\0' || strchr(u.path, '/') != NULL) {
        snprintf(errbuf, errlen, "mysql: the URL needs a database: mysql://user@host/"
                  "database");
        goto out;
    }
    be->socket = dup_or_null(url_param(&u, "socket"));
    if (be->socket != NULL && be->socket[0] == '\0') {
        snprintf(errbuf, errlen, "mysql: socket= needs a path");
        goto out;
    }
    if (u.hosts[0] == '\0' && be->socket == NULL) {
        snprintf(errbuf, errlen, "mysql: the URL needs a host (or ?socket=PATH)");
        goto out;
    }
    if (u.hosts[0] != '\0') {
        const char *h = u.hosts, *end, *colon;
        if (h[0] == '[') { /* [v6]:port */
            end = strchr(h, ']');
            if (end == NULL || end == h + 1)
                goto bad_host;
            colon = end[1] == ':' ? end + 1 : NULL;
            if (end[1] != '\0' && colon == NULL)
                goto bad_host;
            be->host = strndup(h + 1, (size_t)(end - h - 1));
        } else {
            colon = strchr(h, ':');
            if (colon == h || strchr(h, ',') != NULL)
                goto bad_host;
            be->host =
                colon != NULL ? strndup(h, (size_t)(colon - h)) : strdup(h);
        }
        if (be->host == NULL) {
            r = BACKEND_NO_MEMORY;
            goto out;
        }
        if (colon != NULL && text_parse_u64(colon + 1, 1, 65535, &port) != 0)
            goto bad_host;
    }
    be->port = (unsigned)port;
    v = url_param(&u, "table");
    if (v != NULL && !table_name_ok(v)) {
        snprintf(errbuf, errlen, "mysql: table= must be 1..%d letters, digits or '_'",
                  MYSQL_BE_TABLE_MAX);
        goto out;
    }
    be->table = strdup(v != NULL ? v : MYSQL_BE_DEFAULT_TABLE);
    if (opt_timeout(&u, "connect_timeout_ms", MYSQL_BE_CONNECT_TIMEOUT_MS,
                    &be->connect_timeout_s) != 0 ||
        opt_timeout(&u, "read_timeout_ms", MYSQL_BE_RW_TIMEOUT_MS,
                    &be->read_timeout_s) != 0 ||
        opt_timeout(&u, "write_timeout_ms", MYSQL_BE_RW_TIMEOUT_MS,
                    &be->write_timeout_s) != 0)
        goto out;
    be->base.call_timeout_ms =
        (int64_t)(be->read_timeout_s > be->write_timeout_s
                      ? be->read_timeout_s
                      : be->write_timeout_s) *
        1000;
    be->user = strdup(u.user);
    be->password = dup_or_null(u.password);
    be->database = strdup(u.path);
    if (be->table == NULL || be->user == NULL || be->database == NULL ||
        (u.password != NULL && be->password == NULL) ||
        (url_param(&u, "socket") != NULL && be->socket == NULL)) {
        r = BACKEND_NO_MEMORY;
        goto out;
    }
    r = BACKEND_OK;
    goto out;
bad_host:
    snprintf(errbuf, errlen, "mysql: bad host in the URL: '%s' (want host[:port] or "
              "[v6addr][:port])",
              u.hosts);
out:
    if (u.password != NULL)
        explicit_bzero(u.password, strlen(u.password));
    url_cleanup(&u);
    return r;
}

static enum backend_result mysql_be_open(const char *url,
                                         const struct backend_hooks *hooks,
                                         struct backend **out,
        char *errbuf,
        size_t errlen)
{
    struct mysql_be *be;
    enum backend_result r;

    *out = NULL;
    be = calloc(1, sizeof(*be));
    if (be == NULL)
        return BACKEND_NO_MEMORY;
    be->base.ops = &mysql_backend;
    if (hooks != NULL)
        be->hooks = *hooks;
    if (pthread_mutex_init(&be->mu, NULL) != 0) {
        free(be);
        return BACKEND_NO_MEMORY;
    }
    {
        pthread_condattr_t ca;
        int rc = pthread_condattr_init(&ca);
        if (rc == 0)
            rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        if (rc == 0)
            rc = pthread_cond_init(&be->cond, &ca);
        pthread_condattr_destroy(&ca);
        if (rc != 0) {
            pthread_mutex_destroy(&be->mu);
            free(be);
            return BACKEND_NO_MEMORY;
        }
    }
    r = parse_url(be, url, errbuf, errlen);
    if (r != BACKEND_OK)
        goto fail;
    r = BACKEND_NO_MEMORY;
    for (int i = 0; i < ST_COUNT; i++) {
        be->sql[i] = sql_expand(stmt_sql[i], be->table);
        if (be->sql[i] == NULL)
            goto fail;
    }
    for (size_t i = 0; i < ARRAY_LEN(be->schema); i++) {
        be->schema[i] = sql_expand(schema_sql[i], be->table);
        if (be->schema[i] == NULL)
            goto fail;
    }
    for (size_t i = 0; i < ARRAY_LEN(be->probe); i++) {
        be->probe[i] = sql_expand(schema_probe_sql[i], be->table);
        if (be->probe[i] == NULL)
            goto fail;
    }
    for (size_t i = 0; i < ARRAY_LEN(be->seed); i++) {
        be->seed[i] = sql_expand(seed_sql[i], be->table);
        if (be->seed[i] == NULL)
            goto fail;
    }
    if (pthread_once(&mysql_be_once, mysql_be_lib_init) != 0 ||
        mysql_be_lib_rc != 0) {
        log_error("mysql: cannot initialise the client library");
        goto fail;
    }
    if (pthread_key_create(&be->tls, conn_destroy) != 0)
        goto fail;
    be->tls_made = true;
    if (pthread_create(&be->bg, NULL, bg_main, be) != 0)
        goto fail;
    be->bg_started = true;
    *out = &be->base;
    return BACKEND_OK;
fail:
    mysql_be_close(&be->base);
    return r;
}

static enum backend_result mysql_be_acquire(struct backend *base,
                                            const struct lock_req *req,
                                            struct lock_grant *out)
{
    struct grant_arg a = { .req = req, .out = out };

    /* req->waiter is ignored: no queue in the store (no CAP_QUEUE) */
    return run_op((struct mysql_be *)base, acquire_attempt, &a);
}

static enum backend_result mysql_be_renew(struct backend *base,
                                          const struct lock_req *req,
                                          struct lock_grant *out)
{
    struct grant_arg a = { .req = req, .out = out };

    return run_op((struct mysql_be *)base, renew_attempt, &a);
}

static enum backend_result mysql_be_release(struct backend *base,
                                            const struct lock_req *req)
{
    struct mysql_be *be = (struct mysql_be *)base;
    /* run_op() only takes a void *: the request is not changed */
    enum backend_result r = run_op(be, release_attempt, (void *)(uintptr_t)req);

    if (r == BACKEND_OK && be->hooks.notify != NULL)
        be->hooks.notify(be->hooks.arg, req->key, req->key_len);
    return r;
}

static enum backend_result mysql_be_inspect(struct backend *base,
                                            const char *key,
                                            size_t key_len,
                                            struct lock_info *out)
{
    struct inspect_arg a = { .key = key, .key_len = key_len, .out = out };

    return run_op((struct mysql_be *)base, inspect_attempt, &a);
}

static enum backend_result mysql_be_ping(struct backend *base)
{
    return run_op((struct mysql_be *)base, ping_attempt, NULL);
}

static int64_t mysql_be_held_count(struct backend *base)
{
    int64_t count = -1;

    if (run_op((struct mysql_be *)base, count_attempt, &count) != BACKEND_OK)
        return -1;
    return count;
}

const struct backend_ops mysql_backend = {
    .scheme = "mysql",
    /* NOTIFY: releases through other instances arrive by the event table;
       expiries need no notice, HELD's retry_ms is the exact time */
    .caps = 0,
    .open = mysql_be_open,
    .acquire = mysql_be_acquire,
    .renew = mysql_be_renew,
    .release = mysql_be_release,
    .inspect = mysql_be_inspect,
    .cancel_wait = NULL,
    .ping = mysql_be_ping,
    .held_count = mysql_be_held_count,
    .close = mysql_be_close,
};
