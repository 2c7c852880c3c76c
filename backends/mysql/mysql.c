/*
 * backends/mysql/mysql.c - lock store on MySQL or MariaDB (MariaDB
 * Connector/C): the ops table, open() and close(), ping and held_count.
 * The operations are in acquire.c and holder.c, those on several keys at
 * once in multi.c and multi_holder.c; what the other files of the adapter
 * hold is listed in mysql_int.h.
 *
 * A row per held key (mode, limit, the last expiry of its holders) and a
 * row per holder (token, fence, TTL, holds, owner, Idempotency-Key), keyed
 * by the exact key bytes; every check-and-change is one short InnoDB
 * transaction at READ COMMITTED on prepared statements that locks the
 * key's row first; every expiry is judged by the database's clock
 * (NOW(3)), never lockd's. On MariaDB the common exclusive acquire, renew
 * and release send their transaction as one prepared compound statement
 * (BEGIN NOT ATOMIC ... COMMIT ... END): one round trip each, where MySQL,
 * which has none, takes one per statement. Fences are AUTO_INCREMENT ids of a
 * fence table, inserted inside each granting transaction after the key's row is
 * locked (the counter's lock ends with the INSERT, not at commit), so the rows
 * of free keys can be deleted (by release, and by the background thread for
 * expired ones) without a fence ever going back.
 * Every holder that leaves also appends the key to an event table, in
 * commit order (ids from a second sequence row); the background thread of
 * each instance polls it and notifies its waiters. Expiries need no event:
 * a waiter is retried when the first holder's TTL runs out (retry_ms).
 * One connection per thread, under a pthread key; no waiting queue in the
 * store (FIFO within an instance).
 *
 * What the adapter tells and what it cannot (struct lock_grant):
 *  - expired_fence: an exclusive acquire that takes over a key row that is
 *    no longer live reads the greatest fence of the holder rows it leaves
 *    behind (one statement, only on a takeover); a shared acquire reads it
 *    with the holders it reaps. 0 when the reaper (every second) deleted
 *    the expired holders first: then no grant found them. acquire_multi()
 *    reports none (its grant has no such field).
 *  - granted_at_ms: always 0 (unknown). The holder rows keep no grant time
 *    (expires_at - ttl_ms is the last renew's, not the grant's); adding a
 *    column means changing deploy/mysql/schema.sql, which
 *    tests/unit/test_mysql_sql.c holds the created tables to column for
 *    column, and an ALTER at start on tables of every earlier version, and
 *    the exclusive release (REL_X, one multiple-table DELETE) would need
 *    one more round trip to read it. Left for a change that may edit the
 *    schema file.
 *  - held_count: one COUNT(*) over the expires_at index of the holder
 *    table (the live holders' range only).
 * list() and force_release() are in list.c (see there for the budget).
 *
 * Keys, tokens and owners reach the operations already checked by the
 * wrappers of backends/backend.c (backend_key_ok: 1..LOCK_KEY_MAX bytes of
 * UTF-8, NUL-terminated; owners of at most LOCK_OWNER_MAX bytes), so none
 * is checked again here.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/mysql/mysql_int.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "lib/metrics.h"

static enum mysql_attempt
mysql_ping_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    (void)arg;
    if (mysql_ping(c->db) != 0) {
        mysql_conn_drop(c);
        return MYSQL_ATTEMPT_LOST;
    }
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

static enum mysql_attempt
mysql_count_attempt(struct mysql_conn *c, void *arg, enum backend_result *res)
{
    int64_t *count = arg;
    MYSQL_BIND r[1];
    my_bool is_null = 0;
    struct mysql_run_info info;
    unsigned err;

    mysql_bind_i64(&r[0], count, &is_null);
    err = mysql_conn_run(c, MYSQL_ST_COUNT_HELD, NULL, r, &info);
    if (err != 0)
        return mysql_conn_failed(c, err);
    mysql_conn_rollback(c);
    if (!info.found || is_null)
        *count = -1;
    *res = BACKEND_OK;
    return MYSQL_ATTEMPT_DONE;
}

static void mysql_be_free_sql(char **sql, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(sql[i]);
}

static void mysql_be_close(struct backend *base)
{
    struct mysql_be *be = (struct mysql_be *)base;

    if (be == NULL)
        return;
    mysql_bg_stop(be);
    if (be->conns_made) /* threads still alive (this one, usually) keep a
                           connection: threadconn closes them all */
        threadconn_set_destroy(&be->conns);
    pthread_cond_destroy(&be->cond);
    pthread_mutex_destroy(&be->mu);
    mysql_be_free_sql(be->sql, MYSQL_ST_COUNT);
    mysql_be_free_sql(be->schema, MYSQL_SQL_SCHEMA_N);
    mysql_be_free_sql(be->probe, MYSQL_SQL_PROBE_N);
    mysql_be_free_sql(be->seed, MYSQL_SQL_SEED_N);
    free(be->kinds_probe);
    free(be->kinds_upgrade);
    free(be->host);
    free(be->user);
    if (be->password != NULL)
        explicit_bzero(be->password, strlen(be->password));
    free(be->password);
    free(be->database);
    free(be->socket);
    free(be->ssl_ca);
    free(be->ssl_cert);
    free(be->ssl_key);
    free(be->table);
    free(be);
}

/* Every statement of sql.c with be->table's names in: 0, or -1 when out
 * of memory. */
static int mysql_be_expand_sql(struct mysql_be *be)
{
    if (mysql_sql_expand_list(mysql_sql_stmts, MYSQL_ST_COUNT, be->table,
                              be->sql) != 0 ||
        mysql_sql_expand_list(mysql_sql_schema, MYSQL_SQL_SCHEMA_N, be->table,
                              be->schema) != 0 ||
        mysql_sql_expand_list(mysql_sql_probe, MYSQL_SQL_PROBE_N, be->table,
                              be->probe) != 0 ||
        mysql_sql_expand_list(mysql_sql_seed, MYSQL_SQL_SEED_N, be->table,
                              be->seed) != 0)
        return -1;
    be->kinds_probe = mysql_sql_expand(mysql_sql_kinds_probe.text, be->table);
    be->kinds_upgrade =
        mysql_sql_expand(mysql_sql_kinds_upgrade.text, be->table);
    if (be->kinds_probe == NULL || be->kinds_upgrade == NULL)
        return -1;
    return 0;
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
    if (clock_cond_init(&be->cond) != 0) {
        pthread_mutex_destroy(&be->mu);
        free(be);
        return BACKEND_NO_MEMORY;
    }
    r = mysql_url_parse(be, url, errbuf, errlen);
    if (r != BACKEND_OK)
        goto fail;
    r = BACKEND_NO_MEMORY;
    if (mysql_be_expand_sql(be) != 0)
        goto fail;
    if (mysql_lib_ready() != 0) {
        log_error("mysql: cannot initialise the client library");
        goto fail;
    }
    if (threadconn_set_init(&be->conns, sizeof(struct mysql_conn),
                            mysql_conn_destroy, MYSQL_BE_BACKOFF_MIN_MS,
                            MYSQL_BE_BACKOFF_MAX_MS) != 0)
        goto fail;
    be->conns_made = true;
    if (mysql_bg_start(be) != 0)
        goto fail;
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
    struct mysql_grant_arg a = { .req = req, .out = out };

    return mysql_run_op((struct mysql_be *)base, mysql_acquire_attempt, &a);
}

static enum backend_result mysql_be_renew(struct backend *base,
                                          const struct lock_req *req,
                                          struct lock_grant *out)
{
    struct mysql_grant_arg a = { .req = req, .out = out };

    return mysql_run_op((struct mysql_be *)base, mysql_renew_attempt, &a);
}

static enum backend_result mysql_be_release(struct backend *base,
                                            const struct lock_req *req,
                                            struct lock_grant *out)
{
    struct mysql_be *be = (struct mysql_be *)base;
    struct mysql_release_arg a = { .req = req, .out = out };
    enum backend_result r = mysql_run_op(be, mysql_release_attempt, &a);

    if (r == BACKEND_OK && a.left && be->hooks.notify != NULL)
        be->hooks.notify(be->hooks.arg, req->key, req->key_len);
    return r;
}

static enum backend_result mysql_be_inspect(struct backend *base,
                                            const char *key,
                                            size_t key_len,
                                            struct lock_info *out)
{
    struct mysql_inspect_arg a = { .key = key, .key_len = key_len, .out = out };

    return mysql_run_op((struct mysql_be *)base, mysql_inspect_attempt, &a);
}

static enum backend_result
mysql_be_acquire_multi(struct backend *base,
                       const struct lock_multi_req *req,
                       struct lock_multi_grant *out)
{
    struct mysql_multi_arg a;

    mysql_multi_init(&a, req, out, base->call_timeout_ms);
    return mysql_run_op((struct mysql_be *)base, mysql_acquire_multi_attempt,
                        &a);
}

static enum backend_result
mysql_be_renew_multi(struct backend *base,
                     const struct lock_multi_req *req,
                     struct lock_multi_grant *out)
{
    struct mysql_multi_arg a;

    mysql_multi_init(&a, req, out, base->call_timeout_ms);
    return mysql_run_op((struct mysql_be *)base, mysql_renew_multi_attempt, &a);
}

static enum backend_result
mysql_be_release_multi(struct backend *base,
                       const struct lock_multi_req *req,
                       struct lock_multi_grant *out)
{
    struct mysql_be *be = (struct mysql_be *)base;
    struct mysql_multi_arg a;
    enum backend_result r;

    mysql_multi_init(&a, req, out, base->call_timeout_ms);
    r = mysql_run_op(be, mysql_release_multi_attempt, &a);
    for (size_t i = 0; r == BACKEND_OK && i < req->n; i++)
        if (out->released[i] && be->hooks.notify != NULL)
            be->hooks.notify(be->hooks.arg, req->keys[i], req->key_lens[i]);
    return r;
}

static enum backend_result mysql_be_list(struct backend *base,
                                         const struct lock_list_req *req,
                                         struct lock_list *out)
{
    struct mysql_list_arg a = { .req = req, .out = out };

    return mysql_run_op((struct mysql_be *)base, mysql_list_attempt, &a);
}

static enum backend_result mysql_be_force_release(struct backend *base,
                                                  const char *key,
                                                  size_t key_len,
                                                  struct lock_info *out)
{
    struct mysql_be *be = (struct mysql_be *)base;
    struct mysql_force_arg a = { .in = { key, key_len, out } };
    enum backend_result r = mysql_run_op(be, mysql_force_attempt, &a);

    if (r == BACKEND_OK && a.left && be->hooks.notify != NULL)
        be->hooks.notify(be->hooks.arg, key, key_len);
    return r;
}

static enum backend_result mysql_be_ping(struct backend *base)
{
    return mysql_run_op((struct mysql_be *)base, mysql_ping_attempt, NULL);
}

static int64_t mysql_be_held_count(struct backend *base)
{
    int64_t count = -1;

    if (mysql_run_op((struct mysql_be *)base, mysql_count_attempt, &count) !=
        BACKEND_OK)
        return -1;
    return count;
}

/* One server (the primary) whatever the URL: a replica is not lockd's. */
static void mysql_be_describe(const struct backend *b,
                              struct backend_topology *out)
{
    (void)b;
    snprintf(out->topology, sizeof(out->topology), "single");
    snprintf(out->fence, sizeof(out->fence),
             "an AUTO_INCREMENT id of the fence table, inserted in the "
             "granting transaction");
    snprintf(out->failover, sizeof(out->failover),
             "what the primary's durability settings lose (nothing with "
             "innodb_flush_log_at_trx_commit=1); a failover to an "
             "asynchronous replica can lose the last grants and reuse "
             "their fences");
    out->nodes = 1;
}

/* No capability flags: no queue in the store (waiters wait in this
 * instance's FIFO). Releases through other instances still reach notify()
 * by the event table, and expiries need no notice: HELD's retry_ms is the
 * exact time. */
const struct backend_ops mysql_backend = {
    .scheme = "mysql",
    .caps = 0, /* waiters wait per instance; releases through other
                  instances arrive by the event table (bg.c), and HELD's
                  retry_ms is the holder's exact expiry */
    .open = mysql_be_open,
    .acquire = mysql_be_acquire,
    .renew = mysql_be_renew,
    .release = mysql_be_release,
    .inspect = mysql_be_inspect,
    .cancel_wait = NULL,
    .acquire_multi = mysql_be_acquire_multi,
    .renew_multi = mysql_be_renew_multi,
    .release_multi = mysql_be_release_multi,
    .list = mysql_be_list,
    .force_release = mysql_be_force_release,
    .ping = mysql_be_ping,
    .held_count = mysql_be_held_count,
    .close = mysql_be_close,
    .describe = mysql_be_describe,
};
