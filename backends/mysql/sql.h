/*
 * backends/mysql/sql.h - every SQL statement the MySQL adapter sends, by
 * name, in one place (sql.c), so that the statements, the tables they
 * create and deploy/mysql/schema.sql can be read, and checked
 * (tests/unit/test_mysql_sql.c), side by side.
 *
 * Statement text names its tables by placeholders: "@T", "@H", "@S", "@E"
 * and "@F" stand for the key, holder, sequence, event and fence tables;
 * open() expands them once (mysql_sql_expand) for the table= option.
 */
#ifndef BACKENDS_MYSQL_SQL_H
#define BACKENDS_MYSQL_SQL_H

#include <stdbool.h>
#include <stddef.h>

/* The prepared statements, one per step of an operation; prepared on a
 * connection on first use. */
enum mysql_stmt_id {
    MYSQL_ST_ACQ_UPSERT, /* exclusive: insert the key's row or take over a
                            free one; either way the row is locked */
    MYSQL_ST_FENCE_NEW,  /* next fence: an AUTO_INCREMENT id */
    MYSQL_ST_ACQ_HOLDER, /* exclusive: the holder's row, expiry copied
                            from the key's row and read back */
    MYSQL_ST_ACQ_LOCK,   /* shared: lock the key's row, made if absent */
    MYSQL_ST_ACQ_READ,   /* the key's mode, limit and holders, locked */
    MYSQL_ST_IDEM,       /* the live holder granted under an idem key */
    MYSQL_ST_SH_HOLDER,  /* shared: the holder's row; expiry read back */
    MYSQL_ST_SH_KEY,     /* shared: the key's mode, limit and expiry */
    MYSQL_ST_REAP_KEY,   /* the key's expired holders, key row locked */
    MYSQL_ST_KEY_FIX,    /* the key's expiry := its last holder's */
    MYSQL_ST_KEY_DROP,   /* the key's row, once no holder is live */
    MYSQL_ST_RENEW,      /* holder and key row in one statement */
    MYSQL_ST_RENEW_READ, /* the renewed holder, still locked */
    MYSQL_ST_SETTLE,     /* why a renew or release matched nothing */
    MYSQL_ST_REL_X,      /* exclusive, last hold: both rows at once */
    MYSQL_ST_REL_LOCK,   /* any release: the rows, locked */
    MYSQL_ST_REL_DEC,    /* one hold back */
    MYSQL_ST_REL_DEL,    /* the holder's row */
    MYSQL_ST_INSPECT,
    MYSQL_ST_REAP,      /* expired key rows, any key */
    MYSQL_ST_REAP_FIND, /* keys with expired holder rows */
    MYSQL_ST_KEY_LOCK,  /* one key's row locked, before it is judged */
    MYSQL_ST_COUNT_HELD,
    MYSQL_ST_EVENT_BUMP, /* next event id, in commit order (row lock) */
    MYSQL_ST_EVENT_ADD,
    MYSQL_ST_EVENTS,    /* events after an id */
    MYSQL_ST_EVENT_TOP, /* the last committed event id */
    MYSQL_ST_EVENT_TRIM,
    MYSQL_ST_FENCE_TOP,  /* the highest committed fence row */
    MYSQL_ST_FENCE_TRIM, /* fence rows below it */
    /* several keys at once (multi.c); a list of keys has LOCK_MULTI_MAX
       slots, the unused ones NULL */
    MYSQL_ST_STRIPES,      /* lock the keys' stripe rows, by ascending id */
    MYSQL_ST_MULTI_HELD,   /* the live ones among the keys, TTL left */
    MYSQL_ST_MULTI_READ,   /* a token's holder rows of the keys */
    MYSQL_ST_MULTI_SETTLE, /* why a renew matched nothing, per key */
    MYSQL_ST_EVENT_BUMP_N, /* the next n event ids at once */
    /* operators (list.c) */
    MYSQL_ST_LIST,        /* a range of key rows, each with its live holders */
    MYSQL_ST_FORCE_HOLD,  /* every holder row of a key */
    MYSQL_ST_FORCE_KEY,   /* the key's row, whatever its expiry */
    MYSQL_ST_ACQ_EXPIRED, /* the greatest fence of a key's expired holders */
    /* compound statements (MariaDB): a whole transaction in one round
       trip; not prepared on a server without them (MySQL) */
    MYSQL_ST_ACQ_BLOCK,   /* exclusive acquire: ACQ_UPSERT .. COMMIT */
    MYSQL_ST_REL_BLOCK,   /* release: REL_X, the event, COMMIT */
    MYSQL_ST_RENEW_BLOCK, /* renew: RENEW, RENEW_READ, KEY_FIX, COMMIT */
    MYSQL_ST_COUNT,
};

/* The first column of a compound statement's row: what it did. Only
 * MYSQL_BLOCK_DONE committed; only MYSQL_BLOCK_OPEN leaves the
 * transaction open; every other one rolled back. */
enum mysql_block_status {
    MYSQL_BLOCK_DONE = 0,         /* granted, released, renewed */
    MYSQL_BLOCK_OPEN = 1,         /* nothing decided: the step-by-step path
                                     goes on in the same transaction */
    MYSQL_BLOCK_HELD = 2,         /* acquire: held (exclusively), no replay
                                     to look for */
    MYSQL_BLOCK_NO_STRIPE = 3,    /* acquire: the key's stripe row is gone */
    MYSQL_BLOCK_FENCE_OUT = 4,    /* acquire: the fence counter is spent */
    MYSQL_BLOCK_GONE = 5,         /* the row just written is not there */
    MYSQL_BLOCK_NO_EVENT_ROW = 6, /* release: the event sequence row is gone */
    MYSQL_BLOCK_TOO_LATE = 7,     /* acquire, renew: the database's clock
                                     passed the not-after time */
};

/* One named statement. */
struct mysql_sql {
    const char *name; /* for messages and tests: "ACQ_UPSERT", "schema T" */
    const char *text; /* with @T, @S, @E, @F for the table names */
    bool need_row;    /* a probe that must return a row, not just run */
};

/* The prepared statements, indexed by enum mysql_stmt_id. */
extern const struct mysql_sql mysql_sql_stmts[MYSQL_ST_COUNT];

/* Lists run in order as plain queries (no user data in them). */
#define MYSQL_SQL_SCHEMA_N  9 /* the tables, as deploy/mysql/schema.sql */
#define MYSQL_SQL_PROBE_N   7 /* tables made by someone else will do */
#define MYSQL_SQL_SEED_N    7 /* old rows' holders; the fence counter */
#define MYSQL_SQL_SESSION_N 2 /* every new connection */
extern const struct mysql_sql mysql_sql_schema[];
extern const struct mysql_sql mysql_sql_probe[];
extern const struct mysql_sql mysql_sql_seed[];
extern const struct mysql_sql mysql_sql_session[];
/* The key table of lockd before lock kinds lacks the mode and lim
 * columns: the probe fails (ER_BAD_FIELD_ERROR) and the upgrade adds them
 * (a racing instance may have: ER_DUP_FIELDNAME). */
extern const struct mysql_sql mysql_sql_kinds_probe;
extern const struct mysql_sql mysql_sql_kinds_upgrade;
/* The database's clock in unix ms: one row, one column. */
extern const struct mysql_sql mysql_sql_clock;
/* After the session list; MariaDB only, so its failure is ignored. */
extern const struct mysql_sql mysql_sql_session_idle;

/* tmpl with @T, @H, @S, @E and @F replaced by the back-quoted names table,
 * table_holders, table_seq, table_events and table_fence. table must be a plain
 * name (letters, digits, '_'). A new string, or NULL when out of memory. */
char *mysql_sql_expand(const char *tmpl, const char *table);

/* Expand the n texts of list into out[0..n): 0, or -1 when out of memory
 * (the entries made so far stay in out for the caller to free). */
int mysql_sql_expand_list(const struct mysql_sql *list,
                          size_t n,
                          const char *table,
                          char **out);

#endif /* BACKENDS_MYSQL_SQL_H */
