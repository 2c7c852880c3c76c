/*
 * backends/mysql/conn.c - the MySQL adapter's connections: one per thread,
 * under a pthread key, connected on first use and again after a loss, with
 * a back-off between failed connects that ends as soon as any thread gets
 * through. Also what runs on a connection: the schema's creation (or a
 * probe of tables made by someone else), prepared statements, commit and
 * rollback, the classification of errors, and mysql_run_op(), which runs
 * one operation's transaction and retries it when that is safe. Kept apart
 * from the operations (mysql.c) so that they read as SQL steps only.
 */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <errmsg.h>
#include <mysql.h>
#include <mysqld_error.h>

#include "backends/mysql/mysql_int.h"
#include "lib/clock.h"
#include "lib/log.h"

/* MariaDB >= 10.3 (idle_transaction_timeout); not in every Connector/C. */
#define ER_CLIENT_INTERACTION_TIMEOUT 4031

static pthread_once_t mysql_lib_once = PTHREAD_ONCE_INIT;
static int mysql_lib_rc = -1;

static void mysql_lib_init(void)
{
    /* Once per process: Connector/C must not be initialised twice, and
       after mysql_library_end() never again, so it is never ended. */
    mysql_lib_rc = mysql_library_init(0, NULL, NULL);
}

int mysql_lib_ready(void)
{
    if (pthread_once(&mysql_lib_once, mysql_lib_init) != 0 || mysql_lib_rc != 0)
        return -1;
    return 0;
}

void mysql_bind_bytes(MYSQL_BIND *b,
                      const char *p,
                      size_t n,
                      unsigned long *len)
{
    memset(b, 0, sizeof(*b));
    *len = (unsigned long)n;
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = (void *)(uintptr_t)p; /* read only for input parameters */
    b->buffer_length = *len;
    b->length = len;
}

void mysql_bind_null(MYSQL_BIND *b)
{
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_NULL;
}

void mysql_bind_u64(MYSQL_BIND *b, uint64_t *v)
{
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
    b->is_unsigned = 1;
}

void mysql_bind_i64(MYSQL_BIND *b, int64_t *v, my_bool *is_null)
{
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
    b->is_null = is_null;
}

void mysql_bind_out_bytes(MYSQL_BIND *b,
                          char *buf,
                          size_t size,
                          unsigned long *len,
                          my_bool *is_null,
                          my_bool *trunc)
{
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = buf;
    b->buffer_length = (unsigned long)size;
    b->length = len;
    b->is_null = is_null;
    b->error = trunc;
}

void mysql_conn_drop(struct mysql_conn *c)
{
    for (int i = 0; i < MYSQL_ST_COUNT; i++) {
        if (c->stmt[i] != NULL)
            mysql_stmt_close(c->stmt[i]);
        c->stmt[i] = NULL;
    }
    if (c->db != NULL)
        mysql_close(c->db);
    c->db = NULL;
    c->tc.retry_at_ms = 0; /* a lost connection may be replaced at once */
}

/* Runs one statement that carries no user data (session set-up, schema). */
static unsigned mysql_conn_query(struct mysql_conn *c, const char *sql)
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
static int mysql_conn_probe(struct mysql_conn *c, const char *sql)
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

/* The tables could not be created (why): tables made beforehand will do if
 * every probe passes. 0 when they do; -1 (logged once per outage) when
 * not. */
static int mysql_schema_probe(struct mysql_conn *c, const char *why)
{
    struct mysql_be *be = c->be;

    for (size_t j = 0; j < MYSQL_SQL_PROBE_N; j++) {
        int found = mysql_conn_probe(c, be->probe[j]);
        if (found < 0 || (found == 0 && mysql_sql_probe[j].need_row)) {
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
    return 0;
}

/* The key table of a lockd before lock kinds gets its mode and lim
 * columns (existing rows: exclusive); 0 when it has them. */
static int mysql_schema_upgrade(struct mysql_conn *c)
{
    struct mysql_be *be = c->be;
    unsigned err;

    if (mysql_conn_probe(c, be->kinds_probe) >= 0) {
        mysql_rollback(c->db);
        return 0;
    }
    mysql_rollback(c->db);
    (void)mysql_conn_query(c, "SET SESSION lock_wait_timeout = 2");
    err = mysql_conn_query(c, be->kinds_upgrade);
    if (err != 0 && err != ER_DUP_FIELDNAME) {
        if (!atomic_load(&be->down))
            log_warn("mysql: cannot add the columns mode and lim to %s: "
                     "%s (%u)",
                     be->table, mysql_error(c->db), err);
        mysql_rollback(c->db);
        return -1;
    }
    log_info("mysql: table %s upgraded for lock kinds", be->table);
    return 0;
}

/* Create the tables if missing; else make sure they can be used. 0 when
 * they can; -1 (logged once per outage) when not. */
static int mysql_schema_ensure(struct mysql_conn *c)
{
    struct mysql_be *be = c->be;
    char why[256] = "";
    size_t i;

    for (i = 0; i < MYSQL_SQL_SCHEMA_N; i++) {
        if (mysql_conn_query(c, be->schema[i]) != 0) {
            snprintf(why, sizeof(why), "%s (%u)", mysql_error(c->db),
                     mysql_errno(c->db));
            mysql_rollback(c->db);
            break;
        }
    }
    /* no CREATE privilege, say */
    if (i < MYSQL_SQL_SCHEMA_N && mysql_schema_probe(c, why) != 0)
        return -1;
    if (mysql_schema_upgrade(c) != 0)
        return -1;
    for (i = 0; i < MYSQL_SQL_SEED_N; i++) {
        if (mysql_conn_query(c, be->seed[i]) != 0) {
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

/* be's TLS options on a handle not yet connected: 0, or -1 (no memory). */
static int mysql_conn_tls(MYSQL *db, const struct mysql_be *be)
{
    my_bool yes = 1;

    if (be->ssl_mode == MYSQL_SSL_DISABLED)
        return 0; /* Connector/C 3.3 speaks plain unless asked */
    /* "enforce" only turns TLS on: without a verified server Connector/C
     * still falls back to plain when the server offers no TLS, which
     * mysql_conn_open() refuses from required on */
    if (mysql_optionsv(db, MYSQL_OPT_SSL_ENFORCE, &yes) != 0 ||
        mysql_optionsv(db, MARIADB_OPT_TLS_VERSION, "TLSv1.2,TLSv1.3") != 0)
        return -1;
    if (be->ssl_ca != NULL &&
        mysql_optionsv(db, MYSQL_OPT_SSL_CA, be->ssl_ca) != 0)
        return -1;
    if (be->ssl_cert != NULL &&
        (mysql_optionsv(db, MYSQL_OPT_SSL_CERT, be->ssl_cert) != 0 ||
         mysql_optionsv(db, MYSQL_OPT_SSL_KEY, be->ssl_key) != 0))
        return -1;
    if (be->ssl_mode == MYSQL_SSL_VERIFY_IDENTITY &&
        mysql_optionsv(db, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &yes) != 0)
        return -1;
    return 0;
}

/* mysql_init() and mysql_real_connect() with be's options and the session
 * settings: 0, or -1 with the reason in why (c->db may be NULL: out of
 * memory). */
static int mysql_conn_open(struct mysql_conn *c, char *why, size_t whylen)
{
    struct mysql_be *be = c->be;
    my_bool no = 0;

    c->db = mysql_init(NULL);
    if (c->db == NULL) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    if (mysql_options(c->db, MYSQL_OPT_CONNECT_TIMEOUT,
                      &be->connect_timeout_s) != 0 ||
        mysql_options(c->db, MYSQL_OPT_READ_TIMEOUT, &be->read_timeout_s) !=
            0 ||
        mysql_options(c->db, MYSQL_OPT_WRITE_TIMEOUT, &be->write_timeout_s) !=
            0 ||
        mysql_options(c->db, MYSQL_OPT_RECONNECT, &no) != 0 ||
        mysql_options(c->db, MYSQL_SET_CHARSET_NAME, "utf8mb4") != 0 ||
        mysql_conn_tls(c->db, be) != 0) {
        snprintf(why, whylen, "cannot set the connection's options");
        return -1;
    }
    if (mysql_real_connect(c->db, be->socket != NULL ? "localhost" : be->host,
                           be->user, be->password, be->database, be->port,
                           be->socket, CLIENT_FOUND_ROWS) == NULL) {
        snprintf(why, whylen, "%s", mysql_error(c->db));
        return -1;
    }
    if (be->ssl_mode >= MYSQL_SSL_REQUIRED &&
        mysql_get_ssl_cipher(c->db) == NULL) {
        snprintf(why, whylen,
                 "the server does not offer TLS (ssl_mode=%s): connection "
                 "closed",
                 mysql_ssl_mode_name(be->ssl_mode));
        return -1;
    }
    for (size_t i = 0; i < MYSQL_SQL_SESSION_N; i++) {
        if (mysql_conn_query(c, mysql_sql_session[i].text) != 0) {
            snprintf(why, whylen, "%s", mysql_error(c->db));
            return -1;
        }
    }
    (void)mysql_conn_query(c, mysql_sql_session_idle.text);
    if (mysql_conn_clock(c) != 0) {
        snprintf(why, whylen, "cannot read its clock: %s", mysql_error(c->db));
        return -1;
    }
    return 0;
}

static int mysql_conn_connect(struct mysql_conn *c)
{
    struct mysql_be *be = c->be;
    char why[512];

    if (mysql_conn_open(c, why, sizeof(why)) != 0) {
        if (!atomic_exchange(&be->down, true))
            log_warn("mysql: cannot connect to %s: %s",
                     be->socket != NULL ? be->socket : be->host, why);
        mysql_conn_drop(c);
        return -1;
    }
    if (!atomic_load(&be->schema_ok) && mysql_schema_ensure(c) != 0) {
        atomic_store(&be->down, true); /* logged by mysql_schema_ensure() */
        mysql_conn_drop(c);
        return -1;
    }
    threadconn_ok(&be->conns, NULL);
    if (atomic_exchange(&be->down, false))
        log_info("mysql: connected to %s again",
                 be->socket != NULL ? be->socket : be->host);
    return 0;
}

void mysql_conn_destroy(struct threadconn *tc, bool thread_exits)
{
    mysql_conn_drop((struct mysql_conn *)tc);
    if (thread_exits)
        mysql_thread_end();
}

/* This thread's struct mysql_conn, made (not connected) on its first call;
 * NULL when out of memory. */
static struct mysql_conn *mysql_conn_mine(struct mysql_be *be)
{
    struct mysql_conn *c = (struct mysql_conn *)threadconn_get(&be->conns);

    if (c != NULL)
        c->be = be;
    return c;
}

/* Whether the server closed c's connection while it sat idle (it was
 * restarted or killed, or it timed the session out): then a statement sent
 * on it never ran, and a new connection may carry it at once. The server
 * speaks only when spoken to, so anything to read says so: an end of
 * stream or an error; or, without TLS, the error packet it sent before
 * closing. (Under TLS, bytes may also be a late session ticket.) */
static bool mysql_conn_closed_idle(struct mysql_conn *c)
{
    struct pollfd pfd = { .fd = (int)mysql_get_socket(c->db),
                          .events = POLLIN };
    char byte;
    ssize_t n;

    if (pfd.fd < 0 || poll(&pfd, 1, 0) <= 0)
        return false;
    n = recv(pfd.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 ||
        (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        return true;
    return n > 0 && mysql_get_ssl_cipher(c->db) == NULL;
}

/* This thread's connection, connected; NULL when the database cannot be
 * reached now (or within the back-off after a failed connect). *fresh: it
 * was connected by this call. */
static struct mysql_conn *mysql_conn_get(struct mysql_be *be, bool *fresh)
{
    struct mysql_conn *c = mysql_conn_mine(be);

    *fresh = false;
    if (c == NULL)
        return NULL;
    if (c->db != NULL && !mysql_conn_closed_idle(c))
        return c;
    if (c->db != NULL)
        mysql_conn_drop(c); /* and connect again at once */
    if (!threadconn_may_try(&be->conns, &c->tc))
        return NULL; /* backing off, and no thread got through since */
    if (mysql_conn_connect(c) != 0) {
        threadconn_failed(&be->conns, &c->tc);
        return NULL;
    }
    c->tc.backoff_ms = 0;
    *fresh = true;
    return c;
}

MYSQL_STMT *
mysql_conn_stmt(struct mysql_conn *c, enum mysql_stmt_id id, unsigned *err)
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
            log_warn("mysql: cannot prepare statement %s: %s",
                     mysql_sql_stmts[id].name, mysql_stmt_error(st));
        mysql_stmt_close(st);
        return NULL;
    }
    c->stmt[id] = st;
    return st;
}

unsigned mysql_conn_run(struct mysql_conn *c,
                        enum mysql_stmt_id id,
                        MYSQL_BIND *params,
                        MYSQL_BIND *results,
                        struct mysql_run_info *info)
{
    unsigned err = 0;
    MYSQL_STMT *st = mysql_conn_stmt(c, id, &err);
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

bool mysql_conn_block_ok(struct mysql_conn *c, enum mysql_stmt_id id)
{
    struct mysql_be *be = c->be;
    unsigned err = 0;

    if (!be->compound || atomic_load(&be->blocks_refused))
        return false;
    if (mysql_conn_stmt(c, id, &err) != NULL)
        return true;
    if (err == ER_PARSE_ERROR && !atomic_exchange(&be->blocks_refused, true))
        log_info("mysql: the server has no compound statements (MySQL?): "
                 "each step of an operation goes as its own statement");
    return false;
}

unsigned mysql_conn_clock(struct mysql_conn *c)
{
    int64_t t0 = clock_mono_ms(), t1;
    MYSQL_RES *r;
    MYSQL_ROW row;
    unsigned err = 0;
    char *end = NULL;

    if (mysql_real_query(c->db, mysql_sql_clock.text,
                         (unsigned long)strlen(mysql_sql_clock.text)) != 0)
        return mysql_errno(c->db) != 0 ? mysql_errno(c->db) : CR_UNKNOWN_ERROR;
    t1 = clock_mono_ms();
    r = mysql_store_result(c->db);
    if (r == NULL)
        return mysql_errno(c->db) != 0 ? mysql_errno(c->db) : CR_UNKNOWN_ERROR;
    row = mysql_fetch_row(r);
    if (row != NULL && row[0] != NULL)
        c->offset_ms = strtoll(row[0], &end, 10) - (t0 + t1) / 2;
    if (end == NULL || *end != '\0')
        err = CR_UNKNOWN_ERROR;
    mysql_free_result(r);
    return err;
}

int64_t mysql_conn_until(const struct mysql_conn *c, int64_t t0)
{
    return t0 + c->be->base.call_timeout_ms + c->offset_ms;
}

enum mysql_attempt mysql_block_too_late(struct mysql_conn *c, int64_t t0)
{
    if (clock_mono_ms() - t0 >= c->be->base.call_timeout_ms)
        return MYSQL_ATTEMPT_FAILED; /* late indeed: lockd gave up */
    log_warn("mysql: a call answered in time was too late by the "
             "database's clock: measuring it again");
    if (mysql_conn_clock(c) != 0) {
        mysql_conn_drop(c);
        return MYSQL_ATTEMPT_FAILED;
    }
    return MYSQL_ATTEMPT_AGAIN;
}

unsigned mysql_conn_block(struct mysql_conn *c,
                          enum mysql_stmt_id id,
                          MYSQL_BIND *params,
                          MYSQL_BIND *results)
{
    unsigned err = 0;
    MYSQL_STMT *st = mysql_conn_stmt(c, id, &err);
    int rc;

    if (st == NULL)
        return err;
    if (mysql_stmt_bind_param(st, params) != 0 || mysql_stmt_execute(st) != 0)
        goto fail;
    if (mysql_stmt_field_count(st) == 0) /* no row: cannot happen */
        return CR_UNKNOWN_ERROR;
    if (mysql_stmt_bind_result(st, results) != 0 ||
        mysql_stmt_store_result(st) != 0)
        goto fail;
    rc = mysql_stmt_fetch(st);
    mysql_stmt_free_result(st);
    if (rc == 1)
        goto fail;
    if (rc == MYSQL_NO_DATA)
        return CR_UNKNOWN_ERROR;
    /* then the compound statement's own OK: read, or the connection is out
       of sync for the next statement */
    while ((rc = mysql_stmt_next_result(st)) == 0)
        mysql_stmt_free_result(st);
    if (rc > 0)
        goto fail;
    return 0;
fail:
    err = mysql_stmt_errno(st);
    return err != 0 ? err : CR_UNKNOWN_ERROR;
}

unsigned mysql_conn_rows(struct mysql_conn *c,
                         enum mysql_stmt_id id,
                         MYSQL_BIND *params,
                         MYSQL_BIND *results,
                         void (*row)(void *arg),
                         void *arg)
{
    unsigned err = 0;
    MYSQL_STMT *st = mysql_conn_stmt(c, id, &err);
    int rc;

    if (st == NULL)
        return err;
    if ((params != NULL && mysql_stmt_bind_param(st, params) != 0) ||
        mysql_stmt_execute(st) != 0 ||
        mysql_stmt_bind_result(st, results) != 0 ||
        mysql_stmt_store_result(st) != 0) {
        err = mysql_stmt_errno(st);
        mysql_stmt_free_result(st);
        return err != 0 ? err : CR_UNKNOWN_ERROR;
    }
    while ((rc = mysql_stmt_fetch(st)) == 0 || rc == MYSQL_DATA_TRUNCATED)
        row(arg);
    err = rc == 1 ? mysql_stmt_errno(st) : 0;
    mysql_stmt_free_result(st);
    return rc == 1 && err == 0 ? CR_UNKNOWN_ERROR : err;
}

void mysql_conn_rollback(struct mysql_conn *c)
{
    if (c->db != NULL && mysql_rollback(c->db) != 0)
        mysql_conn_drop(c); /* the server rolls back when the session ends */
}

static bool mysql_err_is_lost(unsigned err)
{
    return (err >= CR_MIN_ERROR && err <= CR_MAX_ERROR) ||
           err == ER_CONNECTION_KILLED || err == ER_SERVER_SHUTDOWN ||
           err == ER_CLIENT_INTERACTION_TIMEOUT ||
           err == ER_QUERY_INTERRUPTED || err == ER_NET_READ_INTERRUPTED;
}

enum mysql_attempt mysql_conn_failed(struct mysql_conn *c, unsigned err)
{
    struct mysql_be *be = c->be;

    if (mysql_err_is_lost(err)) {
        mysql_conn_drop(c);
        return MYSQL_ATTEMPT_LOST;
    }
    switch (err) {
    case ER_LOCK_DEADLOCK: /* the server rolled the transaction back */
    case ER_DUP_ENTRY:     /* a racing acquire inserted the key first */
        mysql_conn_rollback(c);
        return MYSQL_ATTEMPT_AGAIN;
    case ER_NO_SUCH_TABLE: /* dropped under us: make it again */
        atomic_store(&be->schema_ok, false);
        mysql_conn_rollback(c);
        if (c->db != NULL && mysql_schema_ensure(c) == 0)
            return MYSQL_ATTEMPT_AGAIN;
        return MYSQL_ATTEMPT_FAILED;
    case ER_LOCK_WAIT_TIMEOUT: /* a stuck session holds the row */
        mysql_conn_rollback(c);
        return MYSQL_ATTEMPT_FAILED;
    default:
        log_warn("mysql: statement failed: %s (%u)",
                 c->db != NULL ? mysql_error(c->db) : "", err);
        mysql_conn_rollback(c);
        return MYSQL_ATTEMPT_FAILED;
    }
}

enum mysql_attempt mysql_block_failed(struct mysql_conn *c, unsigned err)
{
    if (!mysql_err_is_lost(err))
        return mysql_conn_failed(c, err);
    log_warn("mysql: connection lost in a compound statement: %s (%u)",
             c->db != NULL ? mysql_error(c->db) : "", err);
    mysql_conn_drop(c);
    return MYSQL_ATTEMPT_FAILED;
}

enum mysql_attempt mysql_conn_commit(struct mysql_conn *c)
{
    if (mysql_commit(c->db) == 0)
        return MYSQL_ATTEMPT_DONE;
    log_warn("mysql: commit failed: %s (%u)", mysql_error(c->db),
             mysql_errno(c->db));
    mysql_conn_drop(c);
    return MYSQL_ATTEMPT_FAILED;
}

/* Runs fn on this thread's connection. A deadlock or duplicate key is
 * retried at once; a lost connection once more on a new connection, when
 * the old one was reused and died quickly (typically: the server restarted
 * since its last use). Never more than MYSQL_BE_ATTEMPTS tries. */
enum backend_result
mysql_run_op(struct mysql_be *be, mysql_attempt_fn fn, void *arg)
{
    enum backend_result res = BACKEND_UNAVAILABLE;
    bool retried_lost = false;

    for (int i = 0; i < MYSQL_BE_ATTEMPTS; i++) {
        bool fresh;
        struct mysql_conn *c = mysql_conn_get(be, &fresh);
        int64_t t0;

        if (c == NULL)
            return BACKEND_UNAVAILABLE;
        t0 = clock_mono_ms();
        switch (fn(c, arg, &res)) {
        case MYSQL_ATTEMPT_DONE:
            threadconn_ok(&be->conns, NULL);
            return res;
        case MYSQL_ATTEMPT_AGAIN:
            continue;
        case MYSQL_ATTEMPT_LOST:
            if (fresh || retried_lost ||
                clock_mono_ms() - t0 > MYSQL_BE_FAST_FAIL_MS)
                return BACKEND_UNAVAILABLE;
            retried_lost = true;
            continue;
        case MYSQL_ATTEMPT_FAILED:
            return BACKEND_UNAVAILABLE;
        }
    }
    return BACKEND_UNAVAILABLE;
}
