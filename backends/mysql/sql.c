/*
 * backends/mysql/sql.c - all the SQL text of the MySQL adapter: the
 * prepared statements of every operation, the schema it creates (the same
 * tables as deploy/mysql/schema.sql), the probes and fence seed run before
 * first use, and the session settings of every connection. Kept apart from
 * the C that runs them so that a column or table renamed in one place
 * shows up in one diff, and in tests/unit/test_mysql_sql.c, which checks
 * every name used here against deploy/mysql/schema.sql.
 */
#include "backends/mysql/sql.h"

#include <stdlib.h>
#include <string.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The database's clock in unix ms; the session's time zone is UTC. */
#define NOW_MS "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"

/* The fence sequence row (row 1 of @S) of earlier versions is retired at
 * start-up by setting it to this value: an older lockd still running then
 * fails its bump (above LOCK_FENCE_MAX) instead of handing out a fence from
 * the old counter. */
#define SEQ_RETIRED "9007199254740991" /* LOCK_FENCE_MAX */

/* clang-format off */
#define STMT(id, sql) [MYSQL_ST_##id] = { .name = #id, .text = sql }
/* clang-format on */

const struct mysql_sql mysql_sql_stmts[MYSQL_ST_COUNT] = {
    /* Held (not expired): nothing changes, and LAST_INSERT_ID() reports
       the holder's remaining TTL (>= 1). Missing or expired: the grant,
       with fence 0 until ACQ_FENCE. Columns are assigned left to right,
       so expires_at goes last. */
    STMT(ACQ_UPSERT,
         "INSERT INTO @T (lock_key, token, owner, fence, ttl_ms, expires_at)"
         " VALUES (?, ?, ?, 0, ?, " NOW_MS " + ?) ON DUPLICATE KEY UPDATE"
         " token = IF(expires_at > " NOW_MS ", token, VALUES(token)),"
         " owner = IF(expires_at > " NOW_MS ", owner, VALUES(owner)),"
         " fence = IF(expires_at > " NOW_MS ", fence, 0),"
         " ttl_ms = IF(expires_at > " NOW_MS ", ttl_ms, VALUES(ttl_ms)),"
         " expires_at = IF(expires_at > " NOW_MS ","
         " IF(LAST_INSERT_ID(expires_at - " NOW_MS ") > 0, expires_at,"
         " expires_at), VALUES(expires_at))"),
    STMT(FENCE_NEW, "INSERT INTO @F () VALUES ()"),
    STMT(ACQ_FENCE,
         "UPDATE @T SET fence = ?,"
         " expires_at = LAST_INSERT_ID(expires_at)"
         " WHERE lock_key = ?"),
    /* expires_at first: it must see the old ttl_ms when the new one is NULL
       (MySQL assigns left to right) */
    STMT(RENEW,
         "UPDATE @T SET expires_at = " NOW_MS " + COALESCE(?, ttl_ms),"
         " ttl_ms = COALESCE(?, ttl_ms)"
         " WHERE lock_key = ? AND token = ? AND expires_at > " NOW_MS),
    STMT(RENEW_READ,
         "SELECT fence, ttl_ms, expires_at FROM @T"
         " WHERE lock_key = ?"),
    STMT(RELEASE,
         "DELETE FROM @T WHERE lock_key = ? AND token = ?"
         " AND expires_at > " NOW_MS),
    STMT(HELD, "SELECT 1 FROM @T WHERE lock_key = ? AND expires_at > " NOW_MS),
    STMT(INSPECT,
         "SELECT fence, expires_at, expires_at - " NOW_MS ", owner"
         " FROM @T WHERE lock_key = ? AND expires_at > " NOW_MS),
    STMT(REAP,
         "DELETE FROM @T WHERE expires_at <= " NOW_MS
         " ORDER BY expires_at LIMIT ?"),
    STMT(COUNT_HELD, "SELECT COUNT(*) FROM @T WHERE expires_at > " NOW_MS),
    STMT(EVENT_BUMP, "UPDATE @S SET v = LAST_INSERT_ID(v + 1) WHERE id = 2"),
    STMT(EVENT_ADD, "INSERT INTO @E (id, lock_key) VALUES (?, ?)"),
    STMT(EVENTS,
         "SELECT id, lock_key FROM @E WHERE id > ? ORDER BY id"
         " LIMIT ?"),
    STMT(EVENT_TOP, "SELECT v FROM @S WHERE id = 2"),
    STMT(EVENT_TRIM, "DELETE FROM @E WHERE id <= ? LIMIT ?"),
    STMT(FENCE_TOP, "SELECT MAX(id) FROM @F"),
    /* the highest row always stays: the counter never needs the rows on
       MariaDB >= 10.2.4 and MySQL 8 (it is persistent), but older servers
       restart it at MAX(id) + 1 */
    STMT(FENCE_TRIM, "DELETE FROM @F WHERE id < ? LIMIT ?"),
};

/* The schema (deploy/mysql/schema.sql), run once per process while the
 * tables are not known to exist. */
const struct mysql_sql mysql_sql_schema[] = {
    { "schema @T",
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
      false },
    { "schema @S",
      "CREATE TABLE IF NOT EXISTS @S ("
      " id TINYINT UNSIGNED NOT NULL,"
      " v BIGINT UNSIGNED NOT NULL,"
      " PRIMARY KEY (id)"
      ") ENGINE = InnoDB",
      false },
    { "schema @E",
      "CREATE TABLE IF NOT EXISTS @E ("
      " id BIGINT UNSIGNED NOT NULL,"
      " lock_key VARBINARY(512) NOT NULL,"
      " PRIMARY KEY (id)"
      ") ENGINE = InnoDB",
      false },
    { "schema @F",
      "CREATE TABLE IF NOT EXISTS @F ("
      " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,"
      " PRIMARY KEY (id)"
      ") ENGINE = InnoDB",
      false },
    { "schema rows", "INSERT IGNORE INTO @S (id, v) VALUES (1, 0), (2, 0)",
      false },
    { "schema commit", "COMMIT", false },
};

/* Tables made by someone else (deploy/mysql/schema.sql) for a user that may
 * not create them are used as they are if these all succeed; the two
 * sequence rows must be there. */
const struct mysql_sql mysql_sql_probe[] = {
    { "probe @T", "SELECT 1 FROM @T LIMIT 0", false },
    { "probe @E", "SELECT 1 FROM @E LIMIT 0", false },
    { "probe @S row 1", "SELECT 1 FROM @S WHERE id = 1", true },
    { "probe @S row 2", "SELECT 1 FROM @S WHERE id = 2", true },
    { "probe @F", "SELECT 1 FROM @F LIMIT 0", false },
};

/* Run after the tables exist, by anyone who may write them: the fence
 * counter starts above every fence handed out before: those of the old
 * sequence row (until it is retired), and those still in the lock table
 * (a fence table made again). The old row's lock is held throughout, so
 * an older lockd granting meanwhile either committed below the seed or
 * fails on the retired row. */
const struct mysql_sql mysql_sql_seed[] = {
    { "seed lock", "SELECT v FROM @S WHERE id = 1 FOR UPDATE", false },
    { "seed fence",
      "INSERT INTO @F (id) SELECT x.seed FROM (SELECT GREATEST("
      " COALESCE((SELECT IF(v < " SEQ_RETIRED ", v, 0) FROM @S"
      " WHERE id = 1), 0),"
      " COALESCE((SELECT MAX(fence) FROM @T), 0)) + 1 AS seed) x"
      " WHERE x.seed > COALESCE((SELECT MAX(id) FROM @F), 0)",
      false },
    { "seed retire", "UPDATE @S SET v = " SEQ_RETIRED " WHERE id = 1", false },
    { "seed commit", "COMMIT", false },
};

/* Autocommit off: each operation's first statement opens its transaction
 * and the operation ends it, saving a round trip. */
const struct mysql_sql mysql_sql_session[] = {
    { "session isolation",
      "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", false },
    { "session settings",
      "SET time_zone = '+00:00', autocommit = 0,"
      " innodb_lock_wait_timeout = 1",
      false },
};

/* MariaDB only: a lockd stopped in mid-transaction must not hold the
 * fence row for long. Plain MySQL has no such variable. */
const struct mysql_sql mysql_sql_session_idle = {
    "session idle timeout", "SET idle_transaction_timeout = 2", false
};

_Static_assert(ARRAY_LEN(mysql_sql_schema) == MYSQL_SQL_SCHEMA_N,
               "MYSQL_SQL_SCHEMA_N");
_Static_assert(ARRAY_LEN(mysql_sql_probe) == MYSQL_SQL_PROBE_N,
               "MYSQL_SQL_PROBE_N");
_Static_assert(ARRAY_LEN(mysql_sql_seed) == MYSQL_SQL_SEED_N,
               "MYSQL_SQL_SEED_N");
_Static_assert(ARRAY_LEN(mysql_sql_session) == MYSQL_SQL_SESSION_N,
               "MYSQL_SQL_SESSION_N");

/* The table-name suffix a placeholder "@c" stands for; NULL when "@c" is
 * not a placeholder. */
static const char *mysql_sql_suffix(char c)
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

char *mysql_sql_expand(const char *tmpl, const char *table)
{
    size_t tl = strlen(table), n = 0;
    const char *suffix;
    char *out, *p;

    for (const char *s = tmpl; *s != '\0'; s++)
        n += s[0] == '@' && mysql_sql_suffix(s[1]) != NULL ? tl + 10 : 1;
    out = malloc(n + 1);
    if (out == NULL)
        return NULL;
    p = out;
    for (const char *s = tmpl; *s != '\0'; s++) {
        suffix = s[0] == '@' ? mysql_sql_suffix(s[1]) : NULL;
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

int mysql_sql_expand_list(const struct mysql_sql *list,
                          size_t n,
                          const char *table,
                          char **out)
{
    for (size_t i = 0; i < n; i++) {
        out[i] = mysql_sql_expand(list[i].text, table);
        if (out[i] == NULL)
            return -1;
    }
    return 0;
}
